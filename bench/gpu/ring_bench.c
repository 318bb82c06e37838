/* ring_bench.c — ring attention's blocks on one GPU against the one-GPU attention kernel at the
 * same shape (context parallelism, docs/parallelism.md; the device tool's `ring` stage,
 * tests/gpu/device.sh): Llama 3.1 8B's heads (32 query heads on 8 key/value heads of 128), one
 * sequence of Tl = T/N local positions (default 8192).
 *
 *   ring_bench [TL [REPS [W]]]
 *
 * For N = 2 and 4, one rank's blocks of a whole step, as src/model/model_ring.c runs them (its own
 * chunks' three blocks, then two blocks of another rank's chunks per later step: kernels/cuda/
 * cuda_ring.cu's tcu_ring_forward / _backward, the blocks' layout copies and merges included),
 * timed by CUDA events without the exchange, which needs N GPUs; and the plain kernel
 * (tcu_attention_forward / _backward) over the Tl positions. Both count the attention pairs a
 * causal mask lets through (n^2 / 2 of a causal n x n), the ring's summed over the blocks run: a
 * diagonal block of c = Tl/2 rows c^2 / 2, any other c^2; a rank of the ring N Tl^2 / 2 (T^2 / 2N
 * of the whole sequence, T = N Tl), the plain kernel Tl^2 / 2 (until 2026-11-27 the ring's were
 * counted as Tl^2 N / 4, half their number: its TFLOP/s and ratio read half what they were).
 * FLOPs: 4 hs pairs per head forward, 2.5 times that backward (FlashAttention's count). The
 * ring's TFLOP/s within 10% of the kernel's means the blocks cost what the attention costs; the
 * exchange's overlap is measured by a multi-GPU run.
 * TSR_ATT_WGMMA=1 times the wgmma forms of the kernels (tcu_attention_set_wgmma; refused where
 * the device cannot run them), as the trainer's switch of that name does.
 * W (issue 67; the device tool's `attn` stage with WINDOW=W): the sliding-window kernel
 * (tcu_attention_forward_var / _backward_var, window W) over the Tl positions instead of the
 * rings, beside the plain (full causal) kernel: its pairs the band's, sum_i min(i + 1, W) =
 * W Tl - W (W - 1) / 2 (W Tl, not Tl^2 / 2: the blocks outside the band are skipped, not
 * masked), so its TFLOP/s are the band's work over its time and the last column says how close
 * it runs to the full kernel's rate.
 * ATT_HEADS=NH/KVH/HS (issue 67; device.sh attn with ATT_HEADS, ring_torch.py reads it too): other
 * heads, e.g. Gemma 3 4B's 8/4/256; the rows then name hs.
 * TSR_ATTENTION=cudnn (issue 66 item 1; the device tool's `attn` stage runs it): the plain
 * kernel's row only, on cuDNN's fused attention (kernels/cuda/tcu_cudnn.h), after its plans'
 * engines, workspaces and build times, and then the backward run twice on fresh buffers with the
 * count of bytes that differ (the deterministic graph: 0). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"
#include "tcu_cudnn.h"

/* the heads: Llama 3.1 8B's, or ATT_HEADS=NH/KVH/HS (heads_from_env) */
static int NH = 32, KVH = 8, HS = 128, QKV, C, KVW;

/* ATT_HEADS=NH/KVH/HS (issue 67: Gemma 3's hs 256, e.g. 8/4/256 of 4B, 16/8/256 of 12B) instead
 * of Llama 3.1 8B's 32/8/128: 0, or 1 with a message when it is not three positive numbers, KVH
 * dividing NH and hs one the kernels take (cuda_shapes.h) */
static int heads_from_env(void) {
    const char *e = getenv("ATT_HEADS");
    if (e && *e) {
        char tail = 0;
        if (sscanf(e, "%d/%d/%d%c", &NH, &KVH, &HS, &tail) != 3 || NH < 1 || KVH < 1 ||
            NH % KVH || !tcu_attention_head_size_ok(HS)) {
            fprintf(stderr, "ring_bench: ATT_HEADS='%s': expected NH/KVH/HS, KVH dividing NH, hs "
                            TCU_ATTENTION_HEAD_SIZES "\n", e);
            return 1;
        }
    }
    QKV = (NH + 2 * KVH) * HS, C = NH * HS, KVW = 2 * KVH * HS;
    return 0;
}

static void *dev(size_t bytes) { return tcu_malloc(bytes, "ring_bench"); }

/* device bf16 of n random values in [-1, 1) */
static tsr_bf16 *random_bf16(size_t n, tcu_stream s) {
    float *h = malloc(n * sizeof *h);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        h[i] = (float)((x * 0x2545f4914f6cdd1dull) >> 40) / (float)(1 << 23) - 1.0f;
    }
    float *d = dev(n * sizeof *d);
    tsr_bf16 *b = dev(n * sizeof *b);
    tcu_memcpy_h2d(d, h, n * sizeof *h, s);
    tcu_f32_to_bf16(b, d, n, s);
    tcu_sync(s);
    tcu_free(d);
    free(h);
    return b;
}

typedef struct bufs {
    tsr_bf16 *qkv, *kv, *dout, *out;
    float *acc, *lse, *dq, *dkv;
    void *scratch, *att;
} bufs;

/* one rank's (r = 0) blocks of one step of ring attention over N ranks, forward or backward: the
 * chunks as model_ring.c pairs them (a key chunk after a query chunk is skipped); the attention
 * pairs of the blocks (a diagonal block's c^2 / 2, another's c^2); b NULL: only count them */
static double ring_step(const bufs *b, int Tl, int N, int backward, tcu_stream s) {
    const int c = Tl / 2;
    double pairs = 0;
    for (int step = 0; step < N; step++) {
        const int src = (N - step) % N;
        int started[2] = {0, 0};
        for (int qk = 0; qk < 2; qk++)
            for (int kk = 0; kk < 2; kk++) {
                const int qc = qk ? 2 * N - 1 : 0, kc = kk ? 2 * N - 1 - src : src;
                if (kc > qc) continue;
                pairs += kc == qc ? (double)c * c / 2 : (double)c * c;
                if (!b) continue; /* counting only */
                const tsr_ring_block k = {
                    .B = 1, .NH = NH, .KVH = KVH, .hs = HS, .Tq = c, .Tk = c, .qoff = qc * c,
                    .koff = kc * c, .q = b->qkv + (size_t)qk * c * QKV,
                    .kv = step ? (const void *)(b->kv + (size_t)kk * c * KVW)
                               : (const void *)(b->qkv + (size_t)kk * c * QKV + C),
                    .ldq = QKV, .ldkv = step ? KVW : QKV, .qbs = Tl, .kbs = Tl, .T = 2 * N * c};
                if (backward)
                    tcu_ring_backward(b->dq + (size_t)qk * c * QKV, QKV, b->dkv, KVW,
                                      b->dout + (size_t)qk * c * C, b->out + (size_t)qk * c * C,
                                      b->lse + (size_t)qk * c, &k, b->scratch, s);
                else
                    tcu_ring_forward(b->acc + (size_t)qk * c * C, b->lse + (size_t)qk * c, &k,
                                     started[qk]++ > 0, b->scratch, s);
            }
    }
    return pairs;
}

/* milliseconds of reps calls of what (0: the plain kernel, with var's window when var; N: a ring
 * step of N ranks) */
static float timed(const bufs *b, int Tl, int N, int backward, int reps, const tsr_attn_var *var,
                   tcu_stream s) {
    tcu_event e0 = tcu_event_create_timed(), e1 = tcu_event_create_timed();
    for (int r = -1; r < reps; r++) { /* one call first: the kernels' set-up out of the timing */
        if (r == 0) tcu_event_record(e0, s);
        if (N && backward) ring_step(b, Tl, N, 1, s);
        else if (N) ring_step(b, Tl, N, 0, s);
        else if (backward)
            tcu_attention_backward_var(b->out, b->dout, b->qkv, b->out, b->lse, NULL, NULL, var,
                                       b->att, 1, Tl, NH, KVH, HS, TSR_GRAD_SET, s);
        else
            tcu_attention_forward_var(b->out, b->lse, b->qkv, NULL, NULL, var, 1, Tl, NH, KVH, HS,
                                      s);
    }
    tcu_event_record(e1, s);
    tcu_sync(s);
    const float ms = tcu_event_elapsed_ms(e0, e1) / (float)reps;
    tcu_event_destroy(e0), tcu_event_destroy(e1);
    return ms;
}

/* the plans cuDNN chose for the plain kernel's shape: 0, or 1 (said why) */
static int cudnn_report(int Tl) {
    const tcu_cudnn_shape sh = {1, Tl, NH, KVH, HS};
    for (int bwd = 0; bwd < 2; bwd++) {
        tcu_cudnn_plan_info in;
        char why[512];
        if (tcu_cudnn_plan_info_of(sh, bwd, &in, why, sizeof why)) {
            fprintf(stderr, "ring_bench: TSR_ATTENTION=cudnn: no %s plan: %s\n",
                    bwd ? "backward" : "forward", why);
            return 1;
        }
        printf("ring_bench: cuDNN %zu %s plan: engine %lld, workspace %zu bytes, built in %.0f ms\n"
               "ring_bench: its JSON: %s\n", tcu_cudnn_version(), bwd ? "backward" : "forward",
               (long long)in.engine, in.ws, in.build_ms, in.json);
    }
    return 0;
}

/* the cuDNN backward twice on fresh buffers (a forward's out and lse): bytes that differ */
static size_t cudnn_bits_twice(const bufs *b, int Tl, tcu_stream s) {
    const size_t ng = (size_t)Tl * QKV * 2;
    tsr_bf16 *o = dev((size_t)Tl * C * 2), *g = dev(ng);
    unsigned char *h[2] = {malloc(ng), malloc(ng)};
    tcu_attention_forward(o, b->lse, b->qkv, NULL, NULL, 1, Tl, NH, KVH, HS, s);
    for (int k = 0; k < 2; k++) {
        tcu_attention_backward(g, b->dout, b->qkv, o, b->lse, NULL, NULL, b->att, 1, Tl, NH, KVH,
                               HS, TSR_GRAD_SET, s);
        tcu_memcpy_d2h(h[k], g, ng, s);
    }
    size_t dif = 0;
    for (size_t i = 0; h[0] && h[1] && i < ng; i++) dif += h[0][i] != h[1][i];
    free(h[0]), free(h[1]), tcu_free(o), tcu_free(g);
    return dif;
}

int main(int argc, char **argv) {
    const int Tl = argc > 1 ? atoi(argv[1]) : 8192, reps = argc > 2 ? atoi(argv[2]) : 5;
    const int W = argc > 3 ? atoi(argv[3]) : 0;
    if (Tl < 128 || Tl % 128 || reps < 1 || W < 0 || W > Tl || (argc > 3 && W < 1)) {
        fprintf(stderr, "usage: ring_bench [TL (a multiple of 128) [REPS [W (1..TL: the sliding "
                        "window instead of the rings)]]]\n");
        return 1;
    }
    if (heads_from_env()) return 1;
    if (tcu_device_count() == 0) {
        printf("ring_bench: no CUDA device: SKIP\n");
        return 77;
    }
    tcu_init(0);
    const char *wg = getenv("TSR_ATT_WGMMA"); /* as the trainer: "1" the wgmma kernels (sm_90a) */
    const int wgmma = wg && !strcmp(wg, "1") && tcu_attention_wgmma_possible(HS);
    if (wg && !strcmp(wg, "1") && !wgmma) {
        fprintf(stderr, "ring_bench: TSR_ATT_WGMMA=1 but this device cannot run the wgmma kernels\n");
        return 1;
    }
    tcu_attention_set_wgmma(wgmma); /* before the scratch is sized */
    tcu_stream s = tcu_stream_create();
    bufs b = {.qkv = random_bf16((size_t)Tl * QKV, s), .kv = random_bf16((size_t)Tl * KVW, s),
              .dout = random_bf16((size_t)Tl * C, s)};
    b.out = dev((size_t)Tl * QKV * 2); /* the plain backward writes dqkv here */
    b.acc = dev((size_t)Tl * C * 4), b.lse = dev((size_t)Tl * NH * 4);
    b.dq = dev((size_t)Tl * QKV * 4), b.dkv = dev((size_t)Tl * KVW * 4);
    b.scratch = dev(tcu_ring_scratch_bytes(1, Tl, NH, KVH, HS));
    b.att = dev(tcu_attention_scratch_bytes(1, Tl, NH, KVH, HS));
    tcu_zero(b.acc, (size_t)Tl * C * 4, s), tcu_zero(b.dq, (size_t)Tl * QKV * 4, s);
    tcu_zero(b.dkv, (size_t)Tl * KVW * 4, s);
    const int cudnn = tcu_cudnn_backend() != TCU_ATT_OWN; /* TSR_ATTENTION: read by the sizing */
    if (cudnn && cudnn_report(Tl)) return 1;
    const size_t calls0 = tcu_cudnn_calls();
    tcu_attention_forward(b.out, b.lse, b.qkv, NULL, NULL, 1, Tl, NH, KVH, HS, s); /* a real lse */
    char name[128] = "";
    tcu_device_info(name, sizeof name, NULL, NULL, NULL);
    printf("ring_bench: %s, %s heads (%d on %d, hs %d), %d local positions, %d reps, "
           "%s\n", name, getenv("ATT_HEADS") && *getenv("ATT_HEADS") ? "ATT_HEADS" : "Llama 3.1 8B",
           NH, KVH, HS, Tl, reps,
           cudnn   ? "cuDNN's fused attention (TSR_ATTENTION=cudnn)"
           : wgmma ? "the wgmma kernels (TSR_ATT_WGMMA=1)"
                   : "the mma.sync kernels");
    printf("| what | forward ms | TFLOP/s | backward ms | TFLOP/s | fwd+bwd vs the kernel |\n");
    printf("|---|---|---|---|---|---|\n");
    double base = 0;
    const int Ns[] = {0, 2, 4}; /* the plain kernel, then rings of 2 and 4 (or the window's) */
    const tsr_attn_var win = {.window = W};
    for (int i = 0; i < (cudnn ? 1 : 3 - (W > 0)); i++) { /* cuDNN: the plain kernel's row */
        const int N = W ? 0 : Ns[i];
        const tsr_attn_var *var = W && i ? &win : NULL;
        const double pairs = N     ? ring_step(NULL, Tl, N, 0, s)
                             : var ? (double)W * Tl - (double)W * (W - 1) / 2.0 /* the band */
                                   : (double)Tl * Tl / 2.0;
        const double ff = 4.0 * HS * NH * pairs, fb = 2.5 * ff;
        const float mf = timed(&b, Tl, N, 0, reps, var, s), mb = timed(&b, Tl, N, 1, reps, var, s);
        const double tf = ff / (mf * 1e9), tb = fb / (mb * 1e9), all = (ff + fb) / ((mf + mb) * 1e9);
        if (!i) base = all;
        char what[96];
        const int n = N ? snprintf(what, sizeof what, "ring, N = %d (T = %d): a rank's blocks", N,
                                   N * Tl)
                      : var ? snprintf(what, sizeof what, "sliding window W = %d, T = %d", W, Tl)
                            : snprintf(what, sizeof what, "%s, T = %d",
                                       cudnn ? "cuDNN" : "one-GPU kernel", Tl);
        if (HS != 128) /* the head size in the row, beside the peer's (ring_torch.py) */
            snprintf(what + n, sizeof what - (size_t)n, ", hs %d", HS);
        printf("| %s | %.2f | %.1f | %.2f | %.1f | %.2f |\n", what, mf, tf, mb, tb, all / base);
        if (var) /* the count its TFLOP/s divide (tests/gpu/test_ring_bench.sh reads it) */
            printf("ring_bench: the sliding window's pairs: %.0f (the full kernel's %.0f)\n", pairs,
                   (double)Tl * Tl / 2.0);
    }
    int rc = 0;
    if (cudnn) {
        printf("ring_bench: cuDNN's backward run twice: %zu bytes of dqkv differ\n",
               cudnn_bits_twice(&b, Tl, s));
        const size_t calls1 = tcu_cudnn_calls(); /* the rows were cuDNN's, not the own kernels' */
        printf("ring_bench: cuDNN ran %zu calls (tcu_cudnn_calls %zu -> %zu)\n", calls1 - calls0,
               calls0, calls1);
        if (calls1 == calls0) {
            fprintf(stderr, "ring_bench: TSR_ATTENTION=cudnn: cuDNN ran no call (0, expected "
                            "the timed forwards and backwards): the times above are the own "
                            "kernels'\n");
            rc = 1;
        }
    }
    tcu_stream_destroy(s);
    tcu_shutdown();
    return rc;
}
