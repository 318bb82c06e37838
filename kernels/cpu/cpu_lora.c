/* cpu_lora.c — LoRA's adapter path on one target projection (ops.h lora_forward, lora_backward;
 * docs/lora.md): two small OpenBLAS products beside the frozen base matmul, dropout on the
 * adapter's input from a counter-based hash (recomputed, never stored). */
#include <cblas.h>

#include "common.h"
#include "cpu_internal.h"
#include "ops.h"

/* ops.h's dropout draw for element i under key: in [0, 1), 24 bits */
static inline float lora_u(uint64_t key, uint64_t i) {
    return (float)(tsr_hash64(key ^ tsr_hash64(i)) >> 40) * 0x1.0p-24f;
}

/* xd = drop(inp): element (n, c) kept (scaled by 1 / (1 - p)) unless lora_u(key, (row0 + n)
 * IC + c) < p */
static void dropped(float *xd, const float *inp, float p, uint64_t key, int64_t row0, int N,
                    int IC) {
    const float keep = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if ((long)N * IC >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const uint64_t base = (uint64_t)(row0 + n) * (uint64_t)IC;
        const float *x = inp + (size_t)n * IC;
        float *o = xd + (size_t)n * IC;
        for (int c = 0; c < IC; c++) o[c] = lora_u(key, base + (uint64_t)c) < p ? 0.0f : x[c] * keep;
    }
}

void cpu_lora_forward(float *out, int ld, const float *inp, const float *A, const float *B,
                      float scale, float p, uint64_t key, int64_t row0, float *t, float *xd, int N,
                      int IC, int OC, int R) {
    const float *x = inp;
    if (p > 0.0f) {
        dropped(xd, inp, p, key, row0, N, IC);
        x = xd;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, R, IC, 1.0f, x, IC, A, IC, 0.0f, t, R);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, R, scale, t, R, B, R, 1.0f, out,
                ld);
}

void cpu_lora_backward(float *dinp, float *dA, float *dB, const float *dout, int ld,
                       const float *inp, const float *A, const float *B, float scale, float p,
                       uint64_t key, int64_t row0, float *t, float *xd, int N, int IC, int OC,
                       int R) {
    const float *x = inp;
    if (p > 0.0f) {
        dropped(xd, inp, p, key, row0, N, IC);
        x = xd;
    }
    /* t = drop(x) A^T again (cheaper than keeping it: R is small); dB += scale dout^T t */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, R, IC, 1.0f, x, IC, A, IC, 0.0f, t, R);
    if (dB)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, R, N, scale, dout, ld, t, R, 1.0f,
                    dB, R);
    /* t = dt = scale dout B; dA += dt^T drop(x) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, R, OC, scale, dout, ld, B, R, 0.0f,
                t, R);
    if (dA)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, R, IC, N, 1.0f, t, R, x, IC, 1.0f, dA,
                    IC);
    if (p <= 0.0f) { /* dinp += dt A */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, R, 1.0f, t, R, A, IC, 1.0f,
                    dinp, IC);
        return;
    }
    /* dinp += mask / (1 - p) * (dt A): the product into xd, then through the same mask */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, R, 1.0f, t, R, A, IC, 0.0f, xd,
                IC);
    const float keep = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if ((long)N * IC >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const uint64_t base = (uint64_t)(row0 + n) * (uint64_t)IC;
        const float *g = xd + (size_t)n * IC;
        float *o = dinp + (size_t)n * IC;
        for (int c = 0; c < IC; c++)
            if (lora_u(key, base + (uint64_t)c) >= p) o[c] += g[c] * keep;
    }
}
