/* hc_gemm.c — the GEMM burn with exact verification (see hc_measure.h). Shapes: A, B, C (N, N). */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "hc_fault.h"
#include "hc_measure.h"

static void sleep_s(double s) {
    if (!(s > 0)) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void *burn_alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0)
        tsr_die(HC_EXIT_CANNOT_RUN, "GEMM burn: cannot allocate %zu bytes", bytes);
    return p;
}

/* The integer at (matrix m, element i) in [-K, K]: a deterministic function of its position. */
static int64_t input_at(int m, size_t i, int64_t K) {
    return (int64_t)(tsr_rand_u64(20240601, (uint64_t)m, i) % (uint64_t)(2 * K + 1)) - K;
}

/* Freivalds: with x of pseudo-random integers, compare C x with A (B x), exactly in Z / 2^64
 * (unsigned wrap-around is defined). The values are integers of magnitude < 2^53, so converting
 * them to int64 is exact. Returns the number of rows of C x that differ. */
static long freivalds(const void *A, const void *B, const void *C, int n, int fp64) {
    uint64_t *x = burn_alloc((size_t)n * 8), *y = burn_alloc((size_t)n * 8);
    for (int j = 0; j < n; j++) x[j] = tsr_rand_u64(7, 0, (uint64_t)j);
#define ELEM(M, i) ((uint64_t)(int64_t)(fp64 ? ((const double *)(M))[i] : (double)((const float *)(M))[i]))
    for (int i = 0; i < n; i++) { /* y = B x */
        uint64_t s = 0;
        for (int j = 0; j < n; j++) s += ELEM(B, (size_t)i * n + j) * x[j];
        y[i] = s;
    }
    long bad = 0;
    for (int i = 0; i < n; i++) { /* (A y)_i vs (C x)_i */
        uint64_t ay = 0, cx = 0;
        for (int j = 0; j < n; j++) {
            ay += ELEM(A, (size_t)i * n + j) * y[j];
            cx += ELEM(C, (size_t)i * n + j) * x[j];
        }
        bad += ay != cx;
    }
#undef ELEM
    free(x);
    free(y);
    return bad;
}

static void gemm(int fp64, int n, const void *A, const void *B, void *C) {
    if (fp64)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, A, n, B, n, 0.0, C, n);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
}

static long count_diff(int fp64, const void *C, const void *R, size_t nn) {
    long bad = 0;
    if (fp64) {
        const double *c = C, *r = R;
        for (size_t i = 0; i < nn; i++) bad += !(c[i] == r[i]);
    } else {
        const float *c = C, *r = R;
        for (size_t i = 0; i < nn; i++) bad += !(c[i] == r[i]);
    }
    return bad;
}

void hc_gemm_burn(int fp64, int n, double seconds, unsigned faults, hc_facts *f) {
    /* exactness: every partial sum < n K^2 must be an integer the format represents */
    const int64_t K = fp64 ? (1 << 20) : 63;
    if ((double)n * (double)K * (double)K >= (fp64 ? 0x1p53 : 0x1p24))
        tsr_die(HC_EXIT_CANNOT_RUN, "GEMM burn: N = %d too large for exact results", n);
    const size_t nn = (size_t)n * n, esz = fp64 ? 8 : 4;
    void *A = burn_alloc(nn * esz), *B = burn_alloc(nn * esz), *C = burn_alloc(nn * esz),
         *R = burn_alloc(nn * esz);
    for (size_t i = 0; i < nn; i++) {
        int64_t a = input_at(0, i, K), b = input_at(1, i, K);
        if (fp64) ((double *)A)[i] = (double)a, ((double *)B)[i] = (double)b;
        else ((float *)A)[i] = (float)a, ((float *)B)[i] = (float)b;
    }
    gemm(fp64, n, A, B, R); /* the reference, also the warm-up */
    double errors = (double)freivalds(A, B, R, n, fp64);
    double busy = 0, start = tsr_now();
    long iters = 0;
    do {
        double t0 = tsr_now();
        gemm(fp64, n, A, B, C);
        double dt = tsr_now() - t0;
        if (HC_FAULT(faults, HC_FAULT_SLOW_GEMM)) sleep_s(49 * dt), dt *= 50;
        busy += dt;
        if (iters == 0 && HC_FAULT(faults, HC_FAULT_CORRUPT_GEMM)) { /* a flipped low bit */
            if (fp64) ((double *)C)[nn / 3] += 1.0;
            else ((float *)C)[nn / 3] += 1.0f;
        }
        if (memcmp(C, R, nn * esz) != 0) errors += (double)count_diff(fp64, C, R, nn);
        iters++;
    } while (tsr_now() - start < seconds);
    int k = fp64 ? 1 : 0;
    f->gemm_iters[k] = iters;
    f->gemm_seconds[k] = busy;
    hc_fact_set(f, fp64 ? HC_DGEMM : HC_SGEMM, 2.0 * (double)n * n * n * (double)iters / busy / 1e9);
    hc_fact_set(f, fp64 ? HC_DGEMM_VERIFY : HC_SGEMM_VERIFY, errors);
    free(A), free(B), free(C), free(R);
}
