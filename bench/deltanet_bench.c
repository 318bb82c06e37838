/* deltanet_bench.c — the time of the Gated DeltaNet core on the CPU (kernels/cpu/cpu_deltanet.c):
 * the chunked forward (with the states saved for the backward) and the backward, for
 * bench/deltanet_vs_torch.sh (docs/benchmarks.md "Gated DeltaNet core, CPU").
 *
 *   deltanet_bench B T HK HV DK DV CHUNK REPS
 *
 * Inputs are random (q, k, v normal-ish, g in (-1, 0), beta in (0, 1)), the same for every call;
 * each pass runs REPS times after one warm-up, with OMP_NUM_THREADS threads. Prints one JSON
 * object: the shape, and the median forward and backward seconds. Exit 1 on bad arguments. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "cpu/cpu_deltanet.h"

static float *random_floats(size_t n, float lo, float hi, uint64_t *s) {
    float *p = tsr_malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = lo + (hi - lo) * (float)((*s >> 40) * (1.0 / 16777216.0));
    }
    return p;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

int main(int argc, char **argv) {
    if (argc != 9) tsr_die(TSR_EXIT_USAGE, "usage: deltanet_bench B T HK HV DK DV CHUNK REPS");
    int a[8];
    for (int i = 0; i < 8; i++) a[i] = atoi(argv[i + 1]);
    const tsr_dn_shape s = {a[0], a[1], a[2], a[3], a[4], a[5], a[6]};
    const int reps = a[7];
    if (s.B < 1 || s.T < 1 || s.HK < 1 || s.HV < s.HK || s.HV % s.HK || s.dk < 1 || s.dv < 1 ||
        s.chunk < 1 || reps < 1 || reps > 1000)
        tsr_die(TSR_EXIT_USAGE, "deltanet_bench: bad shape (HV a multiple of HK, all >= 1)");
    const size_t N = (size_t)s.B * s.T, nq = N * s.HK * s.dk, nv = N * s.HV * s.dv, ng = N * s.HV;
    uint64_t seed = 1;
    float *q = random_floats(nq, -1, 1, &seed), *k = random_floats(nq, -1, 1, &seed),
          *v = random_floats(nv, -1, 1, &seed), *g = random_floats(ng, -1, 0, &seed),
          *beta = random_floats(ng, 0, 1, &seed), *dout = random_floats(nv, -1, 1, &seed);
    float *out = tsr_calloc(nv, 4), *ck = tsr_calloc(cpu_deltanet_ckpt_floats(&s), 4),
          *dq = tsr_calloc(nq, 4), *dk = tsr_calloc(nq, 4), *dv = tsr_calloc(nv, 4),
          *dg = tsr_calloc(ng, 4), *db = tsr_calloc(ng, 4);
    double *tf = tsr_malloc(sizeof(double) * (size_t)reps), *tb = tsr_malloc(sizeof(double) * (size_t)reps);
    for (int r = -1; r < reps; r++) {
        const double t0 = tsr_now();
        cpu_deltanet_forward(out, NULL, ck, q, k, v, g, beta, NULL, NULL, &s);
        const double t1 = tsr_now();
        cpu_deltanet_backward(dq, dk, dv, dg, db, NULL, dout, NULL, ck, q, k, v, g, beta, NULL, &s);
        if (r >= 0) tf[r] = t1 - t0, tb[r] = tsr_now() - t1;
    }
    printf("{\"B\": %d, \"T\": %d, \"HK\": %d, \"HV\": %d, \"dk\": %d, \"dv\": %d, \"chunk\": %d, "
           "\"threads\": %d, \"forward_s\": %.6f, \"backward_s\": %.6f}\n",
           s.B, s.T, s.HK, s.HV, s.dk, s.dv, s.chunk, omp_get_max_threads(), median(tf, reps),
           median(tb, reps));
    return 0;
}
