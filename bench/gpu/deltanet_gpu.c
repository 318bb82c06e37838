/* deltanet_gpu.c — the time of the Gated DeltaNet core on the GPU (kernels/cuda/cuda_deltanet.cu,
 * tcu_deltanet_forward; docs/deltanet.md "CUDA"), for bench/gpu/deltanet_gpu.sh (the device
 * tool's `deltanet` stage, tests/gpu/device.sh), beside the PyTorch peer of the same chunked
 * algorithm (bench/torch_deltanet_peer.py on cuda, torch.compile).
 *
 *   deltanet_gpu B T HK HV DK DV REPS
 *
 * Inputs random (q, k, v and d out in [-1, 1) as bf16, g in (-1, 0), beta in (0, 1)), the chunk
 * states saved as training saves them (ckpt) and the final state written; the backward
 * (tcu_deltanet_backward) from them into dq, dk, dv, dg, dbeta. One warm-up run, then REPS runs
 * of the forward and of the backward, each timed by CUDA events; prints one JSON object as
 * bench/deltanet_bench.c does: the shape and the median forward and backward seconds.
 * Exit 1 on bad arguments, 77 without a CUDA device. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_ops.h"

static void *dev(size_t bytes) { return tcu_malloc(bytes, "deltanet_gpu"); }

/* n floats in [lo, hi) on the device, as bf16 when b16 (then *f32 NULL) */
static void *random_dev(size_t n, float lo, float hi, int b16, uint64_t *x, tcu_stream s) {
    float *h = malloc(n * sizeof *h), *d = dev(n * sizeof *d);
    for (size_t i = 0; i < n; i++) {
        *x ^= *x >> 12, *x ^= *x << 25, *x ^= *x >> 27;
        h[i] = lo + (hi - lo) * (float)((*x * 0x2545f4914f6cdd1dull) >> 40) / (float)(1 << 24);
    }
    tcu_memcpy_h2d(d, h, n * sizeof *h, s);
    free(h);
    if (!b16) return d;
    tsr_bf16 *b = dev(n * sizeof *b);
    tcu_f32_to_bf16(b, d, n, s);
    tcu_sync(s);
    tcu_free(d);
    return b;
}

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int a[7];
    for (int i = 0; i < 7 && i + 1 < argc; i++) a[i] = atoi(argv[i + 1]);
    if (argc != 8 || a[0] < 1 || a[1] < 1 || a[2] < 1 || a[3] < a[2] || a[3] % a[2] || a[4] < 16 ||
        a[5] < 16 || a[6] < 1 || a[6] > 1000) {
        fprintf(stderr, "usage: deltanet_gpu B T HK HV DK DV REPS (HV a multiple of HK, DK and "
                        "DV multiples of 16 up to 128, 1 <= REPS <= 1000)\n");
        return 1;
    }
    const int B = a[0], T = a[1], HK = a[2], HV = a[3], dk = a[4], dv = a[5], reps = a[6];
    if (tcu_device_count() == 0) {
        printf("deltanet_gpu: no CUDA device: SKIP\n");
        return 77;
    }
    tcu_init(0);
    tcu_stream s = tcu_stream_create();
    const size_t N = (size_t)B * T, nq = N * HK * dk, nv = N * HV * dv, ng = N * HV;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    tsr_bf16 *q = random_dev(nq, -1, 1, 1, &x, s), *k = random_dev(nq, -1, 1, 1, &x, s),
             *v = random_dev(nv, -1, 1, 1, &x, s), *out = dev(nv * sizeof *out);
    float *g = random_dev(ng, -1, 0, 0, &x, s), *beta = random_dev(ng, 0, 1, 0, &x, s);
    float *st = dev((size_t)B * HV * dk * dv * sizeof *st);
    float *ck = dev(tcu_deltanet_ckpt_floats(B, T, HV, dk, dv) * sizeof *ck);
    tsr_bf16 *dout = random_dev(nv, -1, 1, 1, &x, s), *dq = dev(nq * 2), *dkk = dev(nq * 2),
             *dvv = dev(nv * 2);
    float *dg = dev(ng * 4), *db = dev(ng * 4);
    void *scratch = dev(tcu_deltanet_backward_scratch_bytes(B, T, HV, dk, dv));
    tcu_zero(dq, nq * 2, s), tcu_zero(dkk, nq * 2, s), tcu_zero(dvv, nv * 2, s);
    tcu_zero(dg, ng * 4, s), tcu_zero(db, ng * 4, s);
    float *ms = malloc(sizeof *ms * 2 * (size_t)reps), *mb = ms + reps;
    tcu_event e0 = tcu_event_create_timed(), e1 = tcu_event_create_timed(),
              e2 = tcu_event_create_timed();
    for (int r = -1; r < reps; r++) {
        tcu_event_record(e0, s);
        tcu_deltanet_forward(out, st, ck, q, k, v, g, beta, NULL, NULL, B, T, HK, HV, dk, dv, s);
        tcu_event_record(e1, s);
        tcu_deltanet_backward(dq, dkk, dvv, dg, db, NULL, dout, NULL, ck, q, k, v, g, beta, NULL,
                              scratch, B, T, HK, HV, dk, dv, s);
        tcu_event_record(e2, s);
        const float tf = tcu_event_elapsed_ms(e0, e1), tb = tcu_event_elapsed_ms(e1, e2);
        if (r >= 0) ms[r] = tf, mb[r] = tb;
    }
    qsort(ms, (size_t)reps, sizeof *ms, cmp_float);
    qsort(mb, (size_t)reps, sizeof *mb, cmp_float);
    printf("{\"B\": %d, \"T\": %d, \"HK\": %d, \"HV\": %d, \"dk\": %d, \"dv\": %d, \"chunk\": 64, "
           "\"device\": \"cuda\", \"forward_s\": %.6f, \"backward_s\": %.6f}\n",
           B, T, HK, HV, dk, dv, ms[reps / 2] / 1000.0, mb[reps / 2] / 1000.0);
    tcu_event_destroy(e0), tcu_event_destroy(e1), tcu_event_destroy(e2);
    void *bufs[] = {q, k, v, out, g, beta, st, ck, dout, dq, dkk, dvv, dg, db, scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) tcu_free(bufs[i]);
    tcu_stream_destroy(s);
    tcu_shutdown();
    free(ms);
    return 0;
}
