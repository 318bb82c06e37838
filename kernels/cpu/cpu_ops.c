/* cpu_ops.c — the fp32 CPU reference backend (the oracle): op table, memory, encoder, layernorm,
 * matmul (OpenBLAS sgemm), GELU, residual, gradient norm and AdamW. Attention is in
 * cpu_attention.c, softmax + cross-entropy in cpu_softmax.c, RMSNorm, QK-norm, RoPE and SwiGLU in
 * cpu_llama.c, the mixture-of-experts ops in cpu_moe.c.
 *
 * File-wide conventions (ops.h): backward ops accumulate (+=) into every gradient they produce;
 * shapes use the ops.h vocabulary. Loops are OpenMP-parallel and every output element is written by
 * one thread in a fixed order, so results do not depend on the thread count (sgemm aside, which is
 * deterministic for a fixed OpenBLAS thread count). Reductions over rows (dw, db, dbias) sum fixed
 * chunks of rows in double, then the chunks in order. A parameter gradient given as NULL (a frozen
 * parameter) is not computed at all; the input gradient is the same bits either way.
 */
#include <cblas.h>
#include <malloc.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"
#include "cpu_internal.h"
#include "ops.h"

/* Not declared by every cblas.h. */
char *openblas_get_corename(void);
void openblas_set_num_threads(int num_threads);

/* ---- threads and BLAS ---------------------------------------------------------------------- */

void cpu_ops_set_threads(int n) {
    if (n < 1) n = 1;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

const char *cpu_ops_blas_core(void) {
    const char *core = openblas_get_corename();
    return core ? core : "unknown";
}

/* ---- memory: 64-byte aligned, zero-filled ---------------------------------------------------- */

/* Bytes live through cpu_alloc/cpu_try_alloc (their usable sizes), the most live at once, and
 * the test hook's limit. Allocation happens on the main thread only. */
static size_t live_bytes, peak_bytes, mem_limit;

void cpu_ops_set_mem_limit(size_t bytes) { mem_limit = bytes; }
size_t cpu_ops_live_bytes(void) { return live_bytes; }
size_t cpu_ops_peak_bytes(void) { return peak_bytes; }

/* Blocks of 64 MiB and more are mapped from the kernel, whose pages are zero already: nothing is
 * touched before it is used. The heap's block had to be cleared, every page faulted in at once: a
 * GPU run's host copies of the gradients and AdamW moments (2 GB at 124M parameters, 16 GB at
 * 1.3B), which only a checkpoint reads, cost seconds at start and sat in its resident memory. A
 * few tens live at a time; past BIG_MAX the heap serves them. */
#define BIG_BYTES ((size_t)64 << 20)
#define BIG_MAX 256
static struct big_block { void *p; size_t n; } bigs[BIG_MAX];
static int n_bigs;

static void *alloc_big(size_t rounded) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t n = (rounded + page - 1) / page * page;
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    bigs[n_bigs++] = (struct big_block){p, n};
    live_bytes += n;
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
    return p;
}

static void *alloc_live(size_t bytes, int limited) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded < bytes) return NULL; /* overflow */
    if (rounded == 0) rounded = 64;
    if (limited && mem_limit && (rounded > mem_limit || live_bytes > mem_limit - rounded))
        return NULL;
    if (rounded >= BIG_BYTES && n_bigs < BIG_MAX) return alloc_big(rounded);
    void *p = aligned_alloc(64, rounded);
    if (!p) return NULL;
    live_bytes += malloc_usable_size(p);
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
    memset(p, 0, rounded);
    return p;
}

size_t cpu_ops_unresident_bytes(void) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char vec[4096];
    size_t out = 0;
    for (int i = 0; i < n_bigs; i++)
        for (size_t off = 0; off < bigs[i].n; off += sizeof vec * page) {
            size_t len = bigs[i].n - off < sizeof vec * page ? bigs[i].n - off : sizeof vec * page;
            if (mincore((char *)bigs[i].p + off, len, vec) != 0) continue; /* cannot tell: 0 */
            for (size_t k = 0; k < (len + page - 1) / page; k++) out += (vec[k] & 1) ? 0 : page;
        }
    return out;
}

static void *cpu_try_alloc(size_t bytes) { return alloc_live(bytes, 1); }

static void *cpu_alloc(size_t bytes) {
    void *p = alloc_live(bytes, 0);
    if (!p)
        tsr_die(TSR_EXIT_INTERNAL,
                "cpu alloc: out of memory allocating %zu bytes (%.1f MiB); use a smaller "
                "batch or model",
                bytes, (double)bytes / (1024.0 * 1024.0));
    return p;
}

static void cpu_free(void *p) {
    if (!p) return;
    for (int i = 0; i < n_bigs; i++)
        if (bigs[i].p == p) {
            munmap(p, bigs[i].n);
            live_bytes = live_bytes > bigs[i].n ? live_bytes - bigs[i].n : 0;
            bigs[i] = bigs[--n_bigs];
            return;
        }
    size_t u = malloc_usable_size(p);
    live_bytes = live_bytes > u ? live_bytes - u : 0;
    free(p);
}

static void cpu_zero(void *p, size_t bytes) {
    if (bytes) memset(p, 0, bytes);
}

/* ---- encoder ------------------------------------------------------------------------------ */

/* out[b,t,:] = wte[tokens[b,t],:] + wpe[p,:], p = pos[b,t] or t.
 * out (B,T,C), tokens (B,T), wte (Vp,C), wpe (T_max,C) or NULL, pos (B,T) or NULL */
static void encoder_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                            const int32_t *pos, int B, int T, int C) {
    long N = (long)B * T;
#pragma omp parallel for schedule(static) if (N * C >= CPU_PAR_MIN)
    for (long n = 0; n < N; n++) {
        float *o = out + n * C;
        const float *e = wte + (size_t)tokens[n] * C;
        if (wpe) {
            const float *p = wpe + (pos ? (long)pos[n] : n % T) * C;
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        } else {
            memcpy(o, e, (size_t)C * sizeof *o);
        }
    }
}

/* dwte[tokens[n],:] += dout[n,:];  dwpe[p,:] += dout[n,:] for the p forward read.  dwte (Vp,C)
 * or NULL, dwpe or NULL (frozen or absent: skipped; tokens unread without dwte), pos (B,T) or
 * NULL. Thread k owns the vocabulary rows with token % nthreads == k and adds rows in the order
 * of n, so every dwte row is summed in the same order whatever the thread count; dwpe is split
 * over t, or with pos owned by position like dwte. */
static void encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                             const int32_t *pos, int B, int T, int C) {
    long N = (long)B * T;
    if (!dwte && !dwpe) return;
#pragma omp parallel if (N * C >= CPU_PAR_MIN)
    {
        int nt = omp_get_num_threads(), tid = omp_get_thread_num();
        for (long n = 0; dwte && n < N; n++) {
            int32_t tok = tokens[n];
            if (tok % nt != tid) continue;
            float *d = dwte + (size_t)tok * C;
            const float *g = dout + n * C;
            for (int c = 0; c < C; c++) d[c] += g[c];
        }
        if (dwpe && pos) {
            for (long n = 0; n < N; n++) {
                int32_t p = pos[n];
                if (p % nt != tid) continue;
                float *d = dwpe + (size_t)p * C;
                const float *g = dout + n * C;
                for (int c = 0; c < C; c++) d[c] += g[c];
            }
        } else if (dwpe) {
#pragma omp for schedule(static)
            for (int t = 0; t < T; t++) {
                float *d = dwpe + (size_t)t * C;
                for (int b = 0; b < B; b++) {
                    const float *g = dout + ((size_t)b * T + t) * C;
                    for (int c = 0; c < C; c++) d[c] += g[c];
                }
            }
        }
    }
}

/* ---- column sums over rows, deterministic ---------------------------------------------------- */

/* Partial sums of fixed row chunks are written to part[chunk][...] by any thread; then each column
 * adds its chunks in order. part has nchunks * width doubles. */
int cpu_row_chunks(int N) { return (N + CPU_ROW_CHUNK - 1) / CPU_ROW_CHUNK; }

/* out[c] += sum_k part[k*width + c] for k < nchunks, parallel over columns. */
void cpu_reduce_chunks(float *out, const double *part, int nchunks, int width) {
#pragma omp parallel for schedule(static) if ((long)nchunks * width >= CPU_PAR_MIN)
    for (int c = 0; c < width; c++) {
        double s = 0.0;
        for (int k = 0; k < nchunks; k++) s += part[(size_t)k * width + c];
        out[c] += (float)s;
    }
}

/* ---- layernorm ---------------------------------------------------------------------------- */

/* out = (inp - mean) * rstd * w + b, mean/var over C in double (two passes; biased variance).
 * out (N,C), mean (N), rstd (N), inp (N,C), w (C), b (C) or NULL */
static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C) {
#pragma omp parallel for schedule(static) if ((long)N * C >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c];
        float m = (float)(s / C);
        double v = 0.0;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) {
            float d = x[c] - m;
            v += (double)d * d;
        }
        float r = (float)(1.0 / sqrt(v / C + (double)TSR_LN_EPS));
        if (b) {
            for (int c = 0; c < C; c++) o[c] = fmaf((x[c] - m) * r, w[c], b[c]);
        } else {
            for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c];
        }
        mean[n] = m;
        rstd[n] = r;
    }
}

/* dinp alone (dw and db frozen): the rows of layernorm_backward below without the column sums.
 * The row loop is that one's statement for statement less the two partial-sum updates, so dinp
 * gets the same bits (test_ops.c checks it). */
static void layernorm_backward_dinp(float *dinp, const float *dout, const float *inp,
                                    const float *w, const float *mean, const float *rstd, int N,
                                    int C) {
#pragma omp parallel for schedule(static) if ((long)N * C >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = mean[n], r = rstd[n];
        double s1 = 0.0, s2 = 0.0; /* sum of dnorm, of dnorm * norm */
#pragma omp simd reduction(+ : s1, s2)
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * r;
            float dnorm = w[c] * g[c];
            s1 += dnorm;
            s2 += (double)dnorm * norm;
        }
        float dmean = (float)(s1 / C), dnmean = (float)(s2 / C);
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * r;
            dx[c] += (w[c] * g[c] - dmean - norm * dnmean) * r;
        }
    }
}

/* norm = (inp - mean) * rstd;  dinp += (w*dout - mean(w*dout) - norm * mean(w*dout*norm)) * rstd;
 * dw += sum_n dout * norm;  db += sum_n dout.  dinp (N,C), dw (C) or NULL, db (C) or NULL,
 * dout (N,C). Both NULL (frozen): no column sums at all; one NULL: both summed (one reduction
 * of width 2C, as ever), that one not added. */
static void layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C) {
    if (!dw && !db) {
        layernorm_backward_dinp(dinp, dout, inp, w, mean, rstd, N, C);
        return;
    }
    int nchunks = cpu_row_chunks(N);
    double *part = tsr_malloc((size_t)nchunks * 2 * C * sizeof *part); /* [chunk][dw | db] */
#pragma omp parallel for schedule(static) if ((long)N * C >= CPU_PAR_MIN)
    for (int k = 0; k < nchunks; k++) {
        double *pw = part + (size_t)k * 2 * C, *pb = pw + C;
        for (int c = 0; c < C; c++) pw[c] = pb[c] = 0.0;
        int n1 = (k + 1) * CPU_ROW_CHUNK < N ? (k + 1) * CPU_ROW_CHUNK : N;
        for (int n = k * CPU_ROW_CHUNK; n < n1; n++) {
            const float *x = inp + (size_t)n * C, *g = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            float m = mean[n], r = rstd[n];
            double s1 = 0.0, s2 = 0.0; /* sum of dnorm, of dnorm * norm */
#pragma omp simd reduction(+ : s1, s2)
            for (int c = 0; c < C; c++) {
                float norm = (x[c] - m) * r;
                float dnorm = w[c] * g[c];
                s1 += dnorm;
                s2 += (double)dnorm * norm;
                pw[c] += (double)g[c] * norm;
                pb[c] += g[c];
            }
            float dmean = (float)(s1 / C), dnmean = (float)(s2 / C);
            for (int c = 0; c < C; c++) {
                float norm = (x[c] - m) * r;
                dx[c] += (w[c] * g[c] - dmean - norm * dnmean) * r;
            }
        }
    }
    /* part holds [chunk][dw | db]: one reduction of width 2C */
    float *sums = tsr_malloc((size_t)2 * C * sizeof *sums);
    memset(sums, 0, (size_t)2 * C * sizeof *sums);
    cpu_reduce_chunks(sums, part, nchunks, 2 * C);
    if (dw)
        for (int c = 0; c < C; c++) dw[c] += sums[c];
    if (db)
        for (int c = 0; c < C; c++) db[c] += sums[C + c];
    free(sums);
    free(part);
}

/* ---- matmul (OpenBLAS) -------------------------------------------------------------------- */

/* out = inp @ w^T + bias.  out (N,OC), inp (N,IC), w (OC,IC), bias (OC) or NULL */
static void matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                           int IC, int OC) {
    float beta = 0.0f;
    if (bias) {
#pragma omp parallel for schedule(static) if ((long)N * OC >= CPU_PAR_MIN)
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof *out);
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC, beta,
                out, OC);
}

/* out (OC) = inp (IC) @ w^T + bias (or NULL): one row through sgemv, not sgemm: OpenBLAS
 * 0.3.21's sgemm with M = 1 streams the weights at 6-11 GB/s, its sgemv at 25-55 GB/s (2-vCPU VM,
 * 768x2304 .. 50304x768; docs/generate.md). Same maths, another summation order. */
static void matvec_forward(float *out, const float *inp, const float *w, const float *bias, int IC,
                           int OC) {
    if (bias) memcpy(out, bias, (size_t)OC * sizeof *out);
    else memset(out, 0, (size_t)OC * sizeof *out);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, IC, 1.0f, w, IC, inp, 1, 1.0f, out, 1);
}

/* dinp (N,IC) += dout @ w;  dw (OC,IC) += dout^T @ inp, or NULL (frozen: that product skipped);
 * dbias (OC) += sum_n dout, or NULL. The three are independent: dinp's bits do not depend on
 * which others are asked for. */
static void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int IC, int OC) {
    if (dinp) /* (NULL: the weights' half alone, the zero-bubble pipeline's W) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, w, IC,
                    1.0f, dinp, IC);
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC,
                    1.0f, dw, IC);
    if (dbias) {
        int nchunks = cpu_row_chunks(N);
        double *part = tsr_malloc((size_t)nchunks * OC * sizeof *part);
#pragma omp parallel for schedule(static) if ((long)N * OC >= CPU_PAR_MIN)
        for (int k = 0; k < nchunks; k++) {
            double *p = part + (size_t)k * OC;
            for (int o = 0; o < OC; o++) p[o] = 0.0;
            int n1 = (k + 1) * CPU_ROW_CHUNK < N ? (k + 1) * CPU_ROW_CHUNK : N;
            for (int n = k * CPU_ROW_CHUNK; n < n1; n++) {
                const float *g = dout + (size_t)n * OC;
#pragma omp simd
                for (int o = 0; o < OC; o++) p[o] += g[o];
            }
        }
        cpu_reduce_chunks(dbias, part, nchunks, OC);
        free(part);
    }
}

/* ---- GELU --------------------------------------------------------------------------------- */

#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f

/* tanh: 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3), computed as x * sigmoid(2u)
 * (the same function: 0.5(1 + tanh u) = 1 / (1 + e^-2u)), which vectorises.
 * exact: 0.5 x (1 + erf(x / sqrt 2)), computed as 0.5 x erfc(-x / sqrt 2): the same, without the
 * cancellation of 1 + erf for x << 0.  out, inp (n) */
static void gelu_forward(float *out, const float *inp, size_t n, tsr_gelu_kind kind) {
    long ln = (long)n;
    if (kind == TSR_GELU_TANH) {
#pragma omp parallel for simd schedule(static) if (ln >= CPU_PAR_MIN)
        for (long i = 0; i < ln; i++) {
            float x = inp[i];
            float u = GELU_K0 * (x + GELU_K1 * x * x * x);
            out[i] = x / (1.0f + cpu_expf(-2.0f * u));
        }
    } else {
#pragma omp parallel for schedule(static) if (ln >= CPU_PAR_MIN)
        for (long i = 0; i < ln; i++) {
            float x = inp[i];
            out[i] = 0.5f * x * erfcf(x * -0.70710678118654752f);
        }
    }
}

/* tanh: d/dx = s + 2 x s (1 - s) u', s = sigmoid(2u), u' = sqrt(2/pi)(1 + 3*0.044715 x^2)
 *       (= 0.5(1 + tanh u) + 0.5 x sech^2(u) u').
 * exact: d/dx = 0.5(1 + erf(x/sqrt2)) + x exp(-x^2/2) / sqrt(2 pi).  dinp (n) += gelu'(inp) dout */
static void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n,
                          tsr_gelu_kind kind) {
    long ln = (long)n;
    if (kind == TSR_GELU_TANH) {
#pragma omp parallel for simd schedule(static) if (ln >= CPU_PAR_MIN)
        for (long i = 0; i < ln; i++) {
            float x = inp[i];
            float u = GELU_K0 * (x + GELU_K1 * x * x * x);
            float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
            float e = cpu_expf(-2.0f * u);
            float s = 1.0f / (1.0f + e); /* 1 - s = e s, without cancellation */
            float d = s + 2.0f * x * s * (e * s) * du;
            dinp[i] += d * dout[i];
        }
    } else {
#pragma omp parallel for schedule(static) if (ln >= CPU_PAR_MIN)
        for (long i = 0; i < ln; i++) {
            float x = inp[i];
            float cdf = 0.5f * erfcf(x * -0.70710678118654752f);
            float pdf = 0.3989422804014327f * cpu_expf(-0.5f * x * x);
            dinp[i] += (cdf + x * pdf) * dout[i];
        }
    }
}

/* ---- residual ----------------------------------------------------------------------------- */

/* out = a + b.  out, a, b (n) */
static void residual_forward(float *out, const float *a, const float *b, size_t n) {
    long ln = (long)n;
#pragma omp parallel for simd schedule(static) if (ln >= CPU_PAR_MIN)
    for (long i = 0; i < ln; i++) out[i] = a[i] + b[i];
}

/* da += dout, db += dout.  (n) */
static void residual_backward(float *da, float *db, const float *dout, size_t n) {
    long ln = (long)n;
#pragma omp parallel for simd schedule(static) if (ln >= CPU_PAR_MIN)
    for (long i = 0; i < ln; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

/* ---- gradient norm and optimizer ---------------------------------------------------------- */

/* sum_i g[i]^2 in double. Fixed blocks of at least 64 Ki elements (at most 1024 of them) are summed
 * in parallel, then the block sums in order: the same bits for any thread count. */
static double sumsq(const float *g, size_t n) {
    enum { MAX_BLOCKS = 1024 };
    size_t block = (n + MAX_BLOCKS - 1) / MAX_BLOCKS;
    if (block < 65536) block = 65536;
    long nblocks = (long)((n + block - 1) / block);
    double part[MAX_BLOCKS];
#pragma omp parallel for schedule(static) if (nblocks > 1)
    for (long k = 0; k < nblocks; k++) {
        size_t i0 = (size_t)k * block, i1 = i0 + block < n ? i0 + block : n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) s += (double)g[i] * g[i];
        part[k] = s;
    }
    double total = 0.0;
    for (long k = 0; k < nblocks; k++) total += part[k];
    return total;
}

/* g' = g * grad_scale;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;
 * p = p (1 - lr wd);  p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).  p, g, m, v (n).
 * Arranged as torch.optim.AdamW: p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), with the bias
 * corrections bc = 1 - beta^t computed in double. */
static void adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr,
                         float beta1, float beta2, float eps, float wd, float grad_scale, int t) {
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    float step = (float)((double)lr / bc1);
    float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    float decay = 1.0f - lr * wd;
    long ln = (long)n;
#pragma omp parallel for simd schedule(static) if (ln >= CPU_PAR_MIN)
    for (long i = 0; i < ln; i++) {
        float gi = g[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) * inv_sqrt_bc2 + eps;
        p[i] = p[i] * decay - step * mi / denom;
    }
}

/* ---- the table ---------------------------------------------------------------------------- */

const tsr_ops tsr_cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .try_alloc = cpu_try_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .encoder_forward = encoder_forward,
    .encoder_backward = encoder_backward,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward = layernorm_backward,
    .matmul_forward = matmul_forward,
    .matmul_backward = matmul_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .attention_decode = cpu_attention_decode,
    .ring_forward = cpu_ring_forward,
    .ring_backward = cpu_ring_backward,
    .attention_decode_rows = cpu_attention_decode_rows,
    .matmul_rows = cpu_matmul_rows,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .qknorm_forward = cpu_qknorm_forward,
    .qknorm_backward = cpu_qknorm_backward,
    .qknorm_proj_forward = cpu_qknorm_proj_forward,
    .qknorm_proj_backward = cpu_qknorm_proj_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .rope_part_forward = cpu_rope_part_forward,
    .rope_part_backward = cpu_rope_part_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .geglu_forward = cpu_geglu_forward,
    .geglu_backward = cpu_geglu_backward,
    .moe_route = cpu_moe_route,
    .moe_gather = cpu_moe_gather,
    .moe_gather_backward = cpu_moe_gather_backward,
    .moe_matmul_forward = cpu_moe_matmul_forward,
    .moe_matmul_backward = cpu_moe_matmul_backward,
    .lora_forward = cpu_lora_forward,
    .lora_backward = cpu_lora_backward,
    .moe_combine = cpu_moe_combine,
    .moe_combine_backward = cpu_moe_combine_backward,
    .moe_router_backward = cpu_moe_router_backward,
    .moe_bias_forward = cpu_moe_bias_forward,
    .moe_bias_backward = cpu_moe_bias_backward,
    .moe_gptoss_forward = cpu_moe_gptoss_forward,
    .moe_gptoss_backward = cpu_moe_gptoss_backward,
    .moe_shgate_forward = cpu_moe_shgate_forward,
    .moe_shgate_grad = cpu_moe_shgate_grad,
    .moe_shgate_dx = cpu_moe_shgate_dx,
    .matvec_forward = matvec_forward,
    .gelu_forward = gelu_forward,
    .gelu_backward = gelu_backward,
    .residual_forward = residual_forward,
    .residual_backward = residual_backward,
    .softmax_xent_forward = cpu_softmax_xent_forward,
    .softmax_xent_backward = cpu_softmax_xent_backward,
    .softcap_forward = cpu_softcap_forward,
    .softcap_backward = cpu_softcap_backward,
    .sumsq = sumsq,
    .adamw_update = adamw_update,
};
