/* hc_gpu_burn.c — the GEMM burn and the device-memory bandwidth (see hc_gpu.h), on every GPU at
 * once, a host thread each.
 *
 * GEMM burn, per GPU, bf16 then fp32, job->burn_s each. Shapes: A, B, C, R (N, N) row-major.
 *   C = A B with cublasGemmEx, fp32 output and CUBLAS_COMPUTE_32F: tensor cores with fp32
 *   accumulation for bf16 inputs; for fp32 inputs plain fp32 (no TF32: that needs
 *   CUBLAS_COMPUTE_32F_FAST_TF32 or the TF32 math mode, neither of which is set).
 *   Inputs are integers in [-K, K], K the largest (<= 63) with N K^2 < 2^22 (burn_range). Every
 *   product and every partial sum, in any order, is then an integer below 2^22: bf16 holds the
 *   inputs exactly (|a| <= 256) and fp32 every sum (< 2^24), so the exact result does not depend on
 *   the algorithm cuBLAS picks, its split-K or the order a tensor core adds in. The 4x margin below
 *   2^24 keeps the sums exact even if an accumulator kept only 22 bits while aligning its addends.
 *   The reference R is the first product (also the warm-up), checked exactly on the host with
 *   Freivalds' test; every timed iteration's C is then compared with R on the device
 *   (hck_count_diff) into a counter read once at the end. No tolerance: any wrong element is
 *   silent data corruption. Trade-off: small integers toggle fewer bits than random data, so the
 *   burn draws a little less power (the measured rate is, if anything, higher).
 *   TFLOP/s = 2 N^3 x timed iterations / time between cudaEvents around the GEMMs (the compare
 *   runs outside them).
 * During the burn each thread samples its GPU's NVML clocks event reasons every 0.1 s (while a GEMM
 * runs), and reads the power and thermal violation counters before and after both precisions.
 *
 * HBM bandwidth, per GPU: b = a over 2 arrays of membw_mib MiB, float4 copies; GB/s = 2 x array
 * bytes (read + written) / best of membw_reps times / 1e9, the convention of a device-to-device
 * copy's bandwidth. The copy is checked element by element; a wrong one makes it 0 GB/s.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hc_gpu_impl.h"
#include "hc_gpu_kernels.h"

/* Inputs in [-K, K]: the largest K <= 63 with N K^2 < 2^22. */
static int burn_range(int n) {
    int k = 63;
    while (k > 1 && (double)n * k * k >= 0x1p22) k--;
    return k;
}

static uint64_t mix64(uint64_t x) { /* SplitMix64's finaliser */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* m (nn) = deterministic integers in [-k, k], 8 from each 64-bit hash (the slight modulo bias
 * does not matter: the values only need to be reproducible and varied). */
static void make_inputs(signed char *m, size_t nn, int k, uint64_t seed) {
    for (size_t i = 0; i < nn; i += 8) {
        uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ULL + i);
        for (size_t b = 0; b < 8 && i + b < nn; b++)
            m[i + b] = (signed char)((int)((h >> (8 * b)) & 0xff) % (2 * k + 1) - k);
    }
}

/* Freivalds' test of C = A B: with x of pseudo-random 64-bit integers, (C x)_i must equal
 * (A (B x))_i, exactly in Z / 2^64 (unsigned wrap-around is defined); a wrong row of C passes with
 * probability ~2^-64. x and A (B x) depend on the inputs only: computed once for every GPU. */
typedef struct freivalds_ref {
    uint64_t *x, *abx; /* (N), (N) */
} freivalds_ref;

static int freivalds_init(freivalds_ref *f, const signed char *a8, const signed char *b8, int n) {
    uint64_t *bx = malloc((size_t)n * 8);
    f->x = malloc((size_t)n * 8), f->abx = malloc((size_t)n * 8);
    if (!bx || !f->x || !f->abx) {
        free(bx), free(f->x), free(f->abx);
        f->x = f->abx = NULL;
        return 1;
    }
    for (int j = 0; j < n; j++) f->x[j] = mix64(0x5eed + (uint64_t)j);
    for (int i = 0; i < n; i++) {
        uint64_t s = 0;
        for (int j = 0; j < n; j++) s += (uint64_t)(int64_t)b8[(size_t)i * n + j] * f->x[j];
        bx[i] = s;
    }
    for (int i = 0; i < n; i++) {
        uint64_t s = 0;
        for (int j = 0; j < n; j++) s += (uint64_t)(int64_t)a8[(size_t)i * n + j] * bx[j];
        f->abx[i] = s;
    }
    free(bx);
    return 0;
}

/* The rows of the device's C (N, N) that fail the test, read 256 rows at a time; -1 with err set
 * when C could not be read. */
static long long freivalds(const freivalds_ref *f, const float *dC, int n, char *err, size_t ne) {
    const int block = 256;
    float *rows = malloc((size_t)block * n * sizeof(float));
    long long bad = 0;
    if (!rows) {
        gpu_note(err, ne, "Freivalds check: cannot allocate host memory (N = %d)", n);
        return -1;
    }
    for (int i0 = 0; i0 < n; i0 += block) {
        int m = n - i0 < block ? n - i0 : block;
        GPU_TRY(err, ne, cudaMemcpy(rows, dC + (size_t)i0 * n, (size_t)m * n * sizeof(float),
                                    cudaMemcpyDeviceToHost));
        for (int r = 0; r < m; r++) {
            const float *c = rows + (size_t)r * n;
            uint64_t cx = 0;
            int sane = 1;
            for (int j = 0; j < n; j++) {
                sane &= fabsf(c[j]) < 0x1p30f; /* NaN and huge values are wrong (and not castable) */
                cx += (uint64_t)(int64_t)(sane ? c[j] : 0.0f) * f->x[j];
            }
            bad += !sane || cx != f->abx[i0 + r];
        }
    }
    free(rows);
    return bad;
fail:
    free(rows);
    return -1;
}

/* Row-major C = A B is column-major C^T = B^T A^T: cuBLAS gets B first. */
static cublasStatus_t gemm(cublasHandle_t h, int bf16, int n, const void *A, const void *B, float *C) {
    const float one = 1.0f, zero = 0.0f;
    cudaDataType t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, B, t, n, A, t, n, &zero, C, CUDA_R_32F,
                        n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

typedef struct clock_sampler {
    void *nvml;       /* the GPU's NVML handle, or NULL */
    double next;      /* time of the next sample */
    int samples, hw, thermal;
    unsigned long long seen;
} clock_sampler;

static void sample_clocks(clock_sampler *cs) {
    double t = gpu_now();
    unsigned long long m;
    if (!cs->nvml || t < cs->next) return;
    cs->next = t + 0.1;
    if (nvml_clock_reasons(cs->nvml, &m)) return;
    cs->samples++;
    cs->hw += (m & nvml_reasons_hw) != 0;
    cs->thermal += (m & nvml_reasons_thermal) != 0;
    cs->seen |= m;
}

typedef struct burn_job {
    const hc_gpu_job *job;
    hc_gpu_dev *dev;
    const signed char *a8, *b8; /* (N, N) row-major inputs, shared by every GPU's thread */
    freivalds_ref ref;
} burn_job;

/* One precision on GPU d: sets its gemm rate and verify facts (0 and NaN when it failed). */
static void burn_one(const burn_job *bj, int d, int bf16, clock_sampler *cs) {
    const hc_gpu_job *job = bj->job;
    hc_gpu_dev *g = &bj->dev[d];
    char *err = g->error;
    const size_t ne = sizeof g->error, nn = (size_t)job->gemm_n * job->gemm_n, esz = bf16 ? 2 : 4;
    const int n = job->gemm_n, p = bf16 ? 0 : 1;
    const hc_check rate = bf16 ? HC_GEMM_BF16 : HC_GEMM_FP32, verify = bf16 ? HC_GEMM_BF16_VERIFY : HC_GEMM_FP32_VERIFY;
    signed char *a8 = NULL, *b8 = NULL;
    void *A = NULL, *B = NULL;
    float *C = NULL, *R = NULL, ms = 0;
    unsigned long long *bad = NULL, hbad = 0;
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cublasHandle_t h = NULL;
    long long ref_bad = 0;
    long iters = 0;
    double busy = 0, start = 0;
    GPU_TRY(err, ne, cudaSetDevice(d));
    GPU_TRY(err, ne, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    GPU_TRY(err, ne, cudaEventCreate(&e0));
    GPU_TRY(err, ne, cudaEventCreate(&e1));
    GPU_TRY(err, ne, cudaMalloc((void **)&a8, nn));
    GPU_TRY(err, ne, cudaMalloc((void **)&b8, nn));
    GPU_TRY(err, ne, cudaMalloc(&A, nn * esz));
    GPU_TRY(err, ne, cudaMalloc(&B, nn * esz));
    GPU_TRY(err, ne, cudaMalloc((void **)&C, nn * sizeof(float)));
    GPU_TRY(err, ne, cudaMalloc((void **)&R, nn * sizeof(float)));
    GPU_TRY(err, ne, cudaMalloc((void **)&bad, sizeof *bad));
    GPU_TRY(err, ne, cudaMemcpyAsync(a8, bj->a8, nn, cudaMemcpyHostToDevice, s));
    GPU_TRY(err, ne, cudaMemcpyAsync(b8, bj->b8, nn, cudaMemcpyHostToDevice, s));
    GPU_TRY(err, ne, hck_widen_i8(a8, A, nn, bf16, s));
    GPU_TRY(err, ne, hck_widen_i8(b8, B, nn, bf16, s));
    GPU_TRY(err, ne, cudaMemsetAsync(bad, 0, sizeof *bad, s));
    BLAS_TRY(err, ne, cublasCreate(&h));
    BLAS_TRY(err, ne, cublasSetStream(h, s));
    BLAS_TRY(err, ne, gemm(h, bf16, n, A, B, R)); /* the reference, and the warm-up */
    GPU_TRY(err, ne, cudaStreamSynchronize(s));
    ref_bad = freivalds(&bj->ref, R, n, err, ne);
    if (ref_bad < 0) goto fail;
    if (ref_bad) gpu_note(err, ne, "%s burn: %lld rows of the reference product failed Freivalds' test",
                          bf16 ? "bf16" : "fp32", ref_bad);
    start = gpu_now();
    do {
        GPU_TRY(err, ne, cudaEventRecord(e0, s));
        BLAS_TRY(err, ne, gemm(h, bf16, n, A, B, C));
        GPU_TRY(err, ne, cudaEventRecord(e1, s));
        if (iters == 0 && HC_FAULT(job->faults, HC_FAULT_CORRUPT_GEMM)) /* the fault: one element off by 1 */
            GPU_TRY(err, ne, hck_add_one(C, nn / 3, s));
        GPU_TRY(err, ne, hck_count_diff(C, R, nn, bad, s));
        sample_clocks(cs); /* while the GEMM runs */
        GPU_TRY(err, ne, cudaEventSynchronize(e1));
        GPU_TRY(err, ne, cudaEventElapsedTime(&ms, e0, e1));
        double dt = ms / 1e3;
        if (HC_FAULT(job->faults, HC_FAULT_SLOW_GEMM)) gpu_sleep(49 * dt), dt *= 50;
        busy += dt;
        iters++;
    } while (gpu_now() - start < job->burn_s);
    GPU_TRY(err, ne, cudaMemcpyAsync(&hbad, bad, sizeof hbad, cudaMemcpyDeviceToHost, s));
    GPU_TRY(err, ne, cudaStreamSynchronize(s));
    g->gemm_iters[p] = iters;
    g->gemm_seconds[p] = busy;
    hc_gpu_set(g, rate, 2.0 * n * n * (double)n * (double)iters / busy / 1e12);
    hc_gpu_set(g, verify, (double)hbad + (double)ref_bad);
    goto done;
fail:
    hc_gpu_set(g, rate, 0.0);
    hc_gpu_set(g, verify, NAN);
done:
    /* release: errors here would only echo the failure already noted */
    if (h) (void)cublasDestroy(h);
    if (e0) (void)cudaEventDestroy(e0);
    if (e1) (void)cudaEventDestroy(e1);
    if (s) (void)cudaStreamDestroy(s);
    (void)cudaFree(a8), (void)cudaFree(b8), (void)cudaFree(A), (void)cudaFree(B);
    (void)cudaFree(C), (void)cudaFree(R), (void)cudaFree(bad);
}

/* Percent of `wall` seconds covered by a violation counter's growth (ns). The counter and our clock
 * are read at slightly different moments, so the ratio may overshoot 100 by a hair: capped. */
static double violation_pct(unsigned long long before, unsigned long long after, double wall) {
    double grew = after >= before ? (double)(after - before) / 1e9 : 0.0;
    double pct = wall > 0 ? 100.0 * grew / wall : 0.0;
    return pct < 100.0 ? pct : 100.0;
}

static void burn_device(void *ctx, int d) {
    const burn_job *bj = ctx;
    hc_gpu_dev *g = &bj->dev[d];
    clock_sampler cs = {.nvml = gpu_nvml_handle(d)};
    unsigned long long pw0 = 0, th0 = 0, pw1 = 0, th1 = 0;
    int have_pw = !nvml_violation_ns(cs.nvml, 0, &pw0), have_th = !nvml_violation_ns(cs.nvml, 1, &th0);
    double t0 = gpu_now();
    burn_one(bj, d, 1, &cs);
    burn_one(bj, d, 0, &cs);
    double wall = gpu_now() - t0;
    if (have_pw && !nvml_violation_ns(cs.nvml, 0, &pw1)) hc_gpu_set(g, HC_POWER_VIOLATION, violation_pct(pw0, pw1, wall));
    if (have_th && !nvml_violation_ns(cs.nvml, 1, &th1)) hc_gpu_set(g, HC_THERMAL_VIOLATION, violation_pct(th0, th1, wall));
    g->clock_samples = cs.samples;
    g->clock_reasons = cs.seen;
    if (cs.samples) {
        hc_gpu_set(g, HC_THROTTLE_HW, 100.0 * cs.hw / cs.samples);
        hc_gpu_set(g, HC_THROTTLE_THERMAL, 100.0 * cs.thermal / cs.samples);
    }
}

void gpu_burn(const hc_gpu_job *job, hc_gpu_dev *dev) {
    const size_t nn = (size_t)job->gemm_n * job->gemm_n;
    const int k = burn_range(job->gemm_n);
    signed char *a8 = malloc(nn), *b8 = malloc(nn);
    burn_job bj = {job, dev, a8, b8, {NULL, NULL}};
    if (a8 && b8) {
        make_inputs(a8, nn, k, 1);
        make_inputs(b8, nn, k, 2);
    }
    if (!a8 || !b8 || freivalds_init(&bj.ref, a8, b8, job->gemm_n)) {
        for (int d = 0; d < job->n_devices; d++) {
            gpu_note(dev[d].error, sizeof dev[d].error, "GEMM burn: cannot allocate the host inputs (2 x %zu bytes)", nn);
            hc_gpu_set(&dev[d], HC_GEMM_BF16, 0.0), hc_gpu_set(&dev[d], HC_GEMM_FP32, 0.0);
            hc_gpu_set(&dev[d], HC_GEMM_BF16_VERIFY, NAN), hc_gpu_set(&dev[d], HC_GEMM_FP32_VERIFY, NAN);
        }
        free(a8), free(b8);
        return;
    }
    gpu_each(job->n_devices, burn_device, &bj);
    free(a8), free(b8), free(bj.ref.x), free(bj.ref.abx);
}

typedef struct membw_job {
    const hc_gpu_job *job;
    hc_gpu_dev *dev;
} membw_job;

static void membw_device(void *ctx, int d) {
    const membw_job *mj = ctx;
    const hc_gpu_job *job = mj->job;
    hc_gpu_dev *g = &mj->dev[d];
    char *err = g->error;
    const size_t ne = sizeof g->error, n = (size_t)job->membw_mib * 1024 * 1024 / sizeof(float);
    float *a = NULL, *b = NULL, ms = 0;
    unsigned long long *bad = NULL, hbad = 0;
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double best = 1e30;
    GPU_TRY(err, ne, cudaSetDevice(d));
    GPU_TRY(err, ne, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    GPU_TRY(err, ne, cudaEventCreate(&e0));
    GPU_TRY(err, ne, cudaEventCreate(&e1));
    GPU_TRY(err, ne, cudaMalloc((void **)&a, n * sizeof(float))); /* cudaMalloc aligns to >= 256 bytes */
    GPU_TRY(err, ne, cudaMalloc((void **)&b, n * sizeof(float)));
    GPU_TRY(err, ne, cudaMalloc((void **)&bad, sizeof *bad));
    GPU_TRY(err, ne, cudaMemsetAsync(bad, 0, sizeof *bad, s));
    GPU_TRY(err, ne, hck_fill_pattern(a, n, s));
    GPU_TRY(err, ne, hck_copy(a, b, n, s)); /* warm-up */
    for (int r = 0; r < job->membw_reps; r++) {
        GPU_TRY(err, ne, cudaEventRecord(e0, s));
        GPU_TRY(err, ne, hck_copy(a, b, n, s));
        GPU_TRY(err, ne, cudaEventRecord(e1, s));
        GPU_TRY(err, ne, cudaEventSynchronize(e1));
        GPU_TRY(err, ne, cudaEventElapsedTime(&ms, e0, e1));
        double dt = ms / 1e3;
        if (HC_FAULT(job->faults, HC_FAULT_LOW_MEMBW)) gpu_sleep(49 * dt), dt *= 50;
        if (dt < best) best = dt;
    }
    GPU_TRY(err, ne, hck_check_pattern(b, n, bad, s));
    GPU_TRY(err, ne, cudaMemcpyAsync(&hbad, bad, sizeof hbad, cudaMemcpyDeviceToHost, s));
    GPU_TRY(err, ne, cudaStreamSynchronize(s));
    if (hbad) gpu_note(err, ne, "HBM copy: %llu of %zu elements wrong: bandwidth counted as 0", hbad, n);
    hc_gpu_set(g, HC_HBM_BW, hbad ? 0.0 : 2.0 * (double)n * sizeof(float) / best / 1e9);
    goto done;
fail:
    hc_gpu_set(g, HC_HBM_BW, 0.0);
done:
    if (e0) (void)cudaEventDestroy(e0);
    if (e1) (void)cudaEventDestroy(e1);
    if (s) (void)cudaStreamDestroy(s);
    (void)cudaFree(a), (void)cudaFree(b), (void)cudaFree(bad);
}

void gpu_membw(const hc_gpu_job *job, hc_gpu_dev *dev) {
    membw_job mj = {job, dev};
    gpu_each(job->n_devices, membw_device, &mj);
}
