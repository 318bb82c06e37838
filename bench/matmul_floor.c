/* matmul_floor.c — how long the CPU backend's matmuls of one training step take on their own, and
 * the machine's fp32 FMA peak: the floor under a step time that no work outside the matmuls can
 * lower (bench/cpu_vs_torch.sh, docs/benchmarks.md).
 *
 *   matmul_floor THREADS REPS < LINEARS
 *
 * LINEARS: one line per linear layer shape, "NAME N IC OC COUNT" (bench_util.py linears writes
 * them from a run's config.cfg): COUNT calls per step of matmul_forward (N,IC) x (OC,IC)^T and of
 * matmul_backward (the input gradient and the weight gradient), through the CPU backend's own
 * functions (tsr_cpu_ops, kernels/cpu/cpu_ops.c: OpenBLAS sgemm) with THREADS threads, so that
 * the same library, kernels and thread count run as in tessera-train. Each shape is timed REPS
 * times after one warm-up call; its median times COUNT goes into the step's total.
 *
 * Prints one JSON object: per shape and in total the FLOPs (2 N IC OC per product, three products)
 * and seconds per step, the total's GFLOP/s, and fma_gflops, the FLOP/s of a loop of independent
 * fused multiply-adds in vector registers on THREADS threads (what no fp32 matmul exceeds).
 * Exit 0, or 2 on bad input (the message names the line). */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blas_env.h"
#include "common.h"
#include "ops.h"

#define MAX_SHAPES 64

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fill(float *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.1f;
    }
}

/* The widest fused multiply-add the build targets (-march), W floats per vector */
#if defined(__AVX512F__)
typedef __m512 vec;
#define W 16
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VSET(x) _mm512_set1_ps(x)
#define VSUM(a) _mm512_reduce_add_ps(a)
#elif defined(__FMA__)
typedef __m256 vec;
#define W 8
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VSET(x) _mm256_set1_ps(x)
static float VSUM(__m256 a) {
    float f[8], s = 0.0f;
    _mm256_storeu_ps(f, a);
    for (int i = 0; i < 8; i++) s += f[i];
    return s;
}
#elif defined(__ARM_NEON) /* aarch64: NEON's 128-bit FMA (Grace: 4 pipes of them per core) */
typedef float32x4_t vec;
#define W 4
#define VFMA(a, b, c) vfmaq_f32(c, a, b)
#define VSET(x) vdupq_n_f32(x)
#define VSUM(a) vaddvq_f32(a)
#else
typedef float vec;
#define W 1
#define VFMA(a, b, c) fmaf(a, b, c)
#define VSET(x) (x)
#define VSUM(a) (a)
#endif

/* FLOP/s of 12 independent chains of vector fused multiply-adds per thread (12 registers: enough
 * to cover the FMA latency on two pipes) on THREADS threads */
static double fma_gflops(int threads) {
    const long iters = 50000000;
    double t = tsr_now();
#pragma omp parallel num_threads(threads)
    {
        vec acc[12];
        const vec b = VSET(0.9999f), c = VSET(1e-4f);
        for (int i = 0; i < 12; i++) acc[i] = VSET(1e-3f * (float)i);
        for (long k = 0; k < iters; k++)
            for (int i = 0; i < 12; i++) acc[i] = VFMA(acc[i], b, c);
        float s = 0.0f;
        for (int i = 0; i < 12; i++) s += VSUM(acc[i]);
        if (s == 12345.0f) printf("#\n"); /* keeps the loop */
    }
    t = tsr_now() - t;
    return 2.0 * 12 * W * (double)iters * threads / t / 1e9;
}

int main(int argc, char **argv) {
    blas_fix_coretype(argv); /* the OpenBLAS core tessera-train would use (may re-execute) */
    if (argc != 3) {
        fprintf(stderr, "usage: matmul_floor THREADS REPS < LINEARS (lines: NAME N IC OC COUNT)\n");
        return 2;
    }
    const int threads = atoi(argv[1]), reps = atoi(argv[2]);
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "matmul_floor: THREADS and REPS must be >= 1 (got '%s', '%s')\n", argv[1],
                argv[2]);
        return 2;
    }
    cpu_ops_set_threads(threads);
    const tsr_ops *ops = &tsr_cpu_ops;

    char name[MAX_SHAPES][64], line[256];
    long shape[MAX_SHAPES][4]; /* N IC OC COUNT */
    int ns = 0, lineno = 0;
    while (fgets(line, sizeof line, stdin)) {
        lineno++;
        if (line[strspn(line, " \t\r\n")] == '\0') continue;
        if (ns == MAX_SHAPES) {
            fprintf(stderr, "matmul_floor: stdin line %d: more than %d shapes\n", lineno, MAX_SHAPES);
            return 2;
        }
        long *s = shape[ns];
        char extra[2];
        if (sscanf(line, "%63s %ld %ld %ld %ld %1s", name[ns], &s[0], &s[1], &s[2], &s[3], extra) !=
                5 ||
            s[0] < 1 || s[1] < 1 || s[2] < 1 || s[3] < 1 || s[0] > 1 << 24 || s[1] > 1 << 20 ||
            s[2] > 1 << 20) {
            fprintf(stderr, "matmul_floor: stdin line %d: expected 'NAME N IC OC COUNT' (positive "
                            "integers), got '%.*s'\n",
                    lineno, (int)strcspn(line, "\r\n"), line);
            return 2;
        }
        ns++;
    }
    if (ns == 0) {
        fprintf(stderr, "matmul_floor: no shapes on stdin\n");
        return 2;
    }

    double total_s = 0, total_flop = 0;
    printf("{\"threads\": %d, \"reps\": %d, \"shapes\": [", threads, reps);
    for (int i = 0; i < ns; i++) {
        const int N = (int)shape[i][0], IC = (int)shape[i][1], OC = (int)shape[i][2];
        const long count = shape[i][3];
        float *inp = tsr_malloc((size_t)N * IC * sizeof *inp), *w = tsr_malloc((size_t)OC * IC * 4);
        float *out = tsr_malloc((size_t)N * OC * sizeof *out), *dinp = tsr_malloc((size_t)N * IC * 4);
        float *dw = tsr_malloc((size_t)OC * IC * sizeof *dw);
        fill(inp, (size_t)N * IC, 1), fill(w, (size_t)OC * IC, 2), fill(out, (size_t)N * OC, 3);
        memset(dinp, 0, (size_t)N * IC * sizeof *dinp), memset(dw, 0, (size_t)OC * IC * sizeof *dw);
        double *t = tsr_malloc((size_t)reps * sizeof *t);
        for (int r = -1; r < reps; r++) {
            const double t0 = tsr_now();
            ops->matmul_forward(out, inp, w, NULL, N, IC, OC);
            ops->matmul_backward(dinp, dw, NULL, out, inp, w, N, IC, OC);
            if (r >= 0) t[r] = tsr_now() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        const double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
        const double flop = 3.0 * 2.0 * N * IC * OC;
        total_s += med * (double)count, total_flop += flop * (double)count;
        printf("%s\n  {\"name\": \"%s\", \"n\": %d, \"ic\": %d, \"oc\": %d, \"count\": %ld, "
               "\"gflop\": %.4f, \"s\": %.6f, \"gflops\": %.1f}",
               i ? "," : "", name[i], N, IC, OC, count, flop * (double)count / 1e9, med * (double)count,
               flop / med / 1e9);
        free(t), free(inp), free(w), free(out), free(dinp), free(dw);
    }
    const double peak = fma_gflops(threads);
    printf("],\n \"flop\": %.0f, \"gflop\": %.4f, \"s\": %.6f, \"gflops\": %.1f, \"fma_gflops\": %.1f, "
           "\"fma_s\": %.6f}\n",
           total_flop, total_flop / 1e9, total_s, total_flop / total_s / 1e9, peak, total_flop / 1e9 / peak);
    return 0;
}
