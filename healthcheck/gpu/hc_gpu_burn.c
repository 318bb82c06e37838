/* hc_gpu_burn.c — the GEMM burn and the device-memory bandwidth (see hc_gpu.h), on every GPU at
 * once, a host thread each.
 *
 * GEMM burn, per GPU, bf16, fp32, then FP8, job->burn_s each. Shapes: A, B, C, R (N, N) row-major.
 *   C = A B with cublasGemmEx, fp32 output and CUBLAS_COMPUTE_32F: tensor cores with fp32
 *   accumulation for bf16 inputs; for fp32 inputs plain fp32 (no TF32: that needs
 *   CUBLAS_COMPUTE_32F_FAST_TF32 or the TF32 math mode, neither of which is set).
 *   Inputs are integers in [-K, K], K the largest (<= 63) with N K^2 < 2^22 (burn_range). Every
 *   product and every partial sum, in any order, is then an integer below 2^22: bf16 holds the
 *   inputs exactly (|a| <= 256) and fp32 every sum (< 2^24), so the exact result does not depend on
 *   the algorithm cuBLAS picks, its split-K or the order a tensor core adds in. The 4x margin below
 *   2^24 keeps the sums exact even if an accumulator kept only 22 bits while aligning its addends.
 *   FP8 (GPUs of compute capability >= 8.9; older ones skip it, not a failure): the same C = A B
 *   through cuBLASLt's FP8 matmul as the training call makes it (hc_gpu_fp8.c: E4M3 x E4M3, fp32
 *   accumulation, unit scales, fast accumulation off) with an fp32 D; inputs in [-K8, K8], K8 =
 *   min(K, 16): E4M3 holds every integer up to 16, so the same bound keeps every sum exact. Its
 *   own inputs and reference (B is uploaded transposed: the "TN" layout FP8 requires).
 *   The reference R is the first product (also the warm-up), checked exactly on the host with
 *   Freivalds' test; every timed iteration's C is then compared with R on the device
 *   (hck_count_diff) into a counter read once at the end. No tolerance: any wrong element is
 *   silent data corruption. Trade-off: small integers toggle fewer bits than random data, so the
 *   burn draws a little less power (the measured rate is, if anything, higher).
 *   TFLOP/s = 2 N^3 x timed iterations / time between cudaEvents around the GEMMs (the compare
 *   runs outside them).
 * During the burn each thread samples its GPU's NVML clocks event reasons every 0.1 s (while a GEMM
 * runs), and reads the power and thermal violation counters before and after all precisions.
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

/* The burn's precisions, in the order they run; the index of hc_gpu_dev.gemm_iters. */
typedef enum { BURN_BF16 = 0, BURN_FP32, BURN_FP8, BURN_COUNT } burn_prec;
static const struct burn_info {
    const char *name;
    hc_check rate, verify;
    hck_type type;
    size_t esz;
} burn_info[BURN_COUNT] = {
    [BURN_BF16] = {"bf16", HC_GEMM_BF16, HC_GEMM_BF16_VERIFY, HCK_BF16, 2},
    [BURN_FP32] = {"fp32", HC_GEMM_FP32, HC_GEMM_FP32_VERIFY, HCK_F32, 4},
    [BURN_FP8] = {"fp8", HC_GEMM_FP8, HC_GEMM_FP8_VERIFY, HCK_E4M3, 1},
};

typedef struct burn_inputs {
    signed char *a8, *b8; /* (N, N) row-major inputs, shared by every GPU's thread; FP8: b8 holds B^T */
    freivalds_ref ref;    /* of C = A B */
} burn_inputs;

typedef struct burn_job {
    const hc_gpu_job *job;
    hc_gpu_dev *dev;
    burn_inputs in[2]; /* [0] bf16 and fp32, [1] FP8 (a narrower range, B transposed) */
} burn_job;

/* One GPU's buffers and GEMM for one precision. */
typedef struct burn_run {
    burn_prec p;
    int n;
    size_t nn;
    cudaStream_t s;
    cudaEvent_t e0, e1;
    signed char *a8, *b8;
    void *A, *B;
    float *C, *R;
    unsigned long long *bad;
    cublasHandle_t h; /* bf16, fp32 */
    fp8_gemm f8;      /* FP8 */
} burn_run;

static cublasStatus_t burn_gemm(const burn_run *r, float *D) {
    return r->p == BURN_FP8 ? fp8_gemm_run(&r->f8, D, r->s) : gemm(r->h, r->p == BURN_BF16, r->n, r->A, r->B, D);
}

/* Allocates, uploads and converts the inputs, makes the GEMM. 0, or 1 with err set. */
static int burn_setup(burn_run *r, const burn_inputs *in, int d, char *err, size_t ne) {
    const size_t esz = burn_info[r->p].esz;
    GPU_TRY(err, ne, cudaSetDevice(d));
    GPU_TRY(err, ne, cudaStreamCreateWithFlags(&r->s, cudaStreamNonBlocking));
    GPU_TRY(err, ne, cudaEventCreate(&r->e0));
    GPU_TRY(err, ne, cudaEventCreate(&r->e1));
    GPU_TRY(err, ne, cudaMalloc((void **)&r->a8, r->nn));
    GPU_TRY(err, ne, cudaMalloc((void **)&r->b8, r->nn));
    GPU_TRY(err, ne, cudaMalloc(&r->A, r->nn * esz));
    GPU_TRY(err, ne, cudaMalloc(&r->B, r->nn * esz));
    GPU_TRY(err, ne, cudaMalloc((void **)&r->C, r->nn * sizeof(float)));
    GPU_TRY(err, ne, cudaMalloc((void **)&r->R, r->nn * sizeof(float)));
    GPU_TRY(err, ne, cudaMalloc((void **)&r->bad, sizeof *r->bad));
    GPU_TRY(err, ne, cudaMemcpyAsync(r->a8, in->a8, r->nn, cudaMemcpyHostToDevice, r->s));
    GPU_TRY(err, ne, cudaMemcpyAsync(r->b8, in->b8, r->nn, cudaMemcpyHostToDevice, r->s));
    GPU_TRY(err, ne, hck_widen_i8(r->a8, r->A, r->nn, burn_info[r->p].type, r->s));
    GPU_TRY(err, ne, hck_widen_i8(r->b8, r->B, r->nn, burn_info[r->p].type, r->s));
    GPU_TRY(err, ne, cudaMemsetAsync(r->bad, 0, sizeof *r->bad, r->s));
    if (r->p == BURN_FP8) return fp8_gemm_init(&r->f8, r->n, r->A, r->B, r->C, err, ne);
    BLAS_TRY(err, ne, cublasCreate(&r->h));
    BLAS_TRY(err, ne, cublasSetStream(r->h, r->s));
    return 0;
fail:
    return 1;
}

static void burn_release(burn_run *r) {
    /* errors here would only echo the failure already noted */
    if (r->h) (void)cublasDestroy(r->h);
    fp8_gemm_release(&r->f8);
    if (r->e0) (void)cudaEventDestroy(r->e0);
    if (r->e1) (void)cudaEventDestroy(r->e1);
    if (r->s) (void)cudaStreamDestroy(r->s);
    (void)cudaFree(r->a8), (void)cudaFree(r->b8), (void)cudaFree(r->A), (void)cudaFree(r->B);
    (void)cudaFree(r->C), (void)cudaFree(r->R), (void)cudaFree(r->bad);
}

/* One precision on GPU d: sets its gemm rate and verify facts (0 and NaN when it failed). */
static void burn_one(const burn_job *bj, int d, burn_prec p, clock_sampler *cs) {
    const hc_gpu_job *job = bj->job;
    const burn_inputs *in = &bj->in[p == BURN_FP8];
    hc_gpu_dev *g = &bj->dev[d];
    char *err = g->error;
    const size_t ne = sizeof g->error;
    const hc_check rate = burn_info[p].rate, verify = burn_info[p].verify;
    burn_run r = {.p = p, .n = job->gemm_n, .nn = (size_t)job->gemm_n * job->gemm_n};
    float ms = 0;
    unsigned long long hbad = 0;
    long long ref_bad = 0;
    long iters = 0;
    double busy = 0, start = 0;
    if (burn_setup(&r, in, d, err, ne)) goto fail;
    BLAS_TRY(err, ne, burn_gemm(&r, r.R)); /* the reference, and the warm-up */
    GPU_TRY(err, ne, cudaStreamSynchronize(r.s));
    ref_bad = freivalds(&in->ref, r.R, r.n, err, ne);
    if (ref_bad < 0) goto fail;
    if (ref_bad) gpu_note(err, ne, "%s burn: %lld rows of the reference product failed Freivalds' test",
                          burn_info[p].name, ref_bad);
    start = gpu_now();
    do {
        GPU_TRY(err, ne, cudaEventRecord(r.e0, r.s));
        BLAS_TRY(err, ne, burn_gemm(&r, r.C));
        GPU_TRY(err, ne, cudaEventRecord(r.e1, r.s));
        if (iters == 0 && HC_FAULT(job->faults, HC_FAULT_CORRUPT_GEMM)) /* the fault: one element off by 1 */
            GPU_TRY(err, ne, hck_add_one(r.C, r.nn / 3, r.s));
        GPU_TRY(err, ne, hck_count_diff(r.C, r.R, r.nn, r.bad, r.s));
        sample_clocks(cs); /* while the GEMM runs */
        GPU_TRY(err, ne, cudaEventSynchronize(r.e1));
        GPU_TRY(err, ne, cudaEventElapsedTime(&ms, r.e0, r.e1));
        double dt = ms / 1e3;
        if (HC_FAULT(job->faults, HC_FAULT_SLOW_GEMM)) gpu_sleep(49 * dt), dt *= 50;
        busy += dt;
        iters++;
    } while (gpu_now() - start < job->burn_s);
    GPU_TRY(err, ne, cudaMemcpyAsync(&hbad, r.bad, sizeof hbad, cudaMemcpyDeviceToHost, r.s));
    GPU_TRY(err, ne, cudaStreamSynchronize(r.s));
    g->gemm_iters[p] = iters;
    g->gemm_seconds[p] = busy;
    hc_gpu_set(g, rate, 2.0 * r.n * r.n * (double)r.n * (double)iters / busy / 1e12);
    hc_gpu_set(g, verify, (double)hbad + (double)ref_bad);
    burn_release(&r);
    return;
fail:
    hc_gpu_set(g, rate, 0.0);
    hc_gpu_set(g, verify, NAN);
    burn_release(&r);
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
    burn_one(bj, d, BURN_BF16, &cs);
    burn_one(bj, d, BURN_FP32, &cs);
    if (hc_gpu_burns_fp8(bj->job, g)) burn_one(bj, d, BURN_FP8, &cs); /* else not measured */
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

/* The inputs of C = A B in [-k, k] (seeds 1, 2) and Freivalds' reference; with transpose, b8 then
 * holds B^T (the FP8 GEMM's layout). 0, or 1 when the host memory is short. */
static int make_burn_inputs(burn_inputs *in, int n, int k, int transpose) {
    const size_t nn = (size_t)n * n;
    in->a8 = malloc(nn), in->b8 = malloc(nn);
    signed char *t = transpose ? malloc(nn) : NULL;
    if (!in->a8 || !in->b8 || (transpose && !t)) {
        free(t);
        return 1;
    }
    make_inputs(in->a8, nn, k, 1);
    make_inputs(in->b8, nn, k, 2);
    if (freivalds_init(&in->ref, in->a8, in->b8, n)) {
        free(t);
        return 1;
    }
    if (transpose) {
        for (size_t i = 0; i < (size_t)n; i++)
            for (size_t j = 0; j < (size_t)n; j++) t[j * n + i] = in->b8[i * n + j];
        free(in->b8);
        in->b8 = t;
    }
    return 0;
}

static void free_burn_inputs(burn_inputs *in) {
    free(in->a8), free(in->b8), free(in->ref.x), free(in->ref.abx);
}

void gpu_burn(const hc_gpu_job *job, hc_gpu_dev *dev) {
    const int n = job->gemm_n, k = burn_range(n);
    burn_job bj = {.job = job, .dev = dev};
    /* FP8: E4M3 holds every integer up to 16 (3 mantissa bits), so [-16, 16] at most */
    int short_mem = make_burn_inputs(&bj.in[0], n, k, 0) || make_burn_inputs(&bj.in[1], n, k < 16 ? k : 16, 1);
    if (short_mem) {
        for (int d = 0; d < job->n_devices; d++) {
            gpu_note(dev[d].error, sizeof dev[d].error, "GEMM burn: cannot allocate the host inputs (4 x %d^2 bytes)", n);
            for (int p = 0; p < BURN_COUNT; p++)
                if (p != BURN_FP8 || hc_gpu_burns_fp8(job, &dev[d]))
                    hc_gpu_set(&dev[d], burn_info[p].rate, 0.0), hc_gpu_set(&dev[d], burn_info[p].verify, NAN);
        }
    } else {
        gpu_each(job->n_devices, burn_device, &bj);
    }
    free_burn_inputs(&bj.in[0]), free_burn_inputs(&bj.in[1]);
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
