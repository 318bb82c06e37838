/* cuda_llama.cu — the Llama-style block ops of cuda_ops.h: RMSNorm (tcu_rmsnorm_forward, the
 * fused tcu_residual_rmsnorm_forward, tcu_rmsnorm_backward), Qwen 3's per-head QK-norm
 * (tcu_qknorm_forward/backward), RoPE (tcu_rope_forward/backward) and SwiGLU
 * (tcu_swiglu_forward/backward): the maths of the ops.h ops of the same names.
 *
 * File-wide conventions (cuda_ops.h):
 *   - bf16 activations and weights, fp32 arithmetic, statistics (rstd) and weight gradients;
 *   - backward ACCUMULATES: activation gradients (bf16) += by read, fp32 add, one rounding;
 *     weight gradients (fp32) += deterministically: no atomics. The norm backwards use
 *     LayerNorm's scheme (cuda_internal.h, tcu_norm_*): P row groups, one block each summing its
 *     rows in order into a partial row, then a fixed-order sum of the partials. A weight gradient
 *     given as NULL (frozen: dw, dqw, dkw each) skips its sums, scratch and reduction (the row
 *     kernel's GRADS = false instance), and dinp is the same bits either way;
 *   - RMSNorm and QK-norm are one pair of kernels over "strided rows": row r of C elements starts
 *     at (r / H) * ld + (r % H) * C, its rstd at (r / H) * sld + r % H. RMSNorm is H = 1, ld = C,
 *     sld = 1; QK-norm's query heads are H = NH rows of hs per token (ld = QKV, sld = NH + KVH),
 *     its key heads H = KVH from column NH*hs (rstd from column NH);
 *   - vector width W = 8 bf16 (16-byte loads and stores) when the row length is a multiple of 8
 *     and every pointer is 16-byte aligned (then every row start is too: ld and C are multiples of
 *     8); W = 8 with scalar accesses when only a pointer is unaligned (the same lane mapping, so
 *     the same bits); W = 1 otherwise;
 *   - every launch on the caller's stream, checked (TCU_CHECK_LAUNCH); N == 0 returns at once.
 */
#include <cstdarg>
#include <cstdint>
#include <cstdio>

#include "cuda_internal.h"

#define RMS_FWD_THREADS 256 /* forward: 8 warps per block, one row per warp */
#define EW_THREADS 256      /* elementwise kernels (RoPE, SwiGLU, the value columns) */
#define EW_MAX_BLOCKS 65536u

static unsigned ew_grid(size_t items) {
    const unsigned b = tcu_blocks(items, EW_THREADS);
    return b < EW_MAX_BLOCKS ? b : EW_MAX_BLOCKS;
}

/* where strided rows live (file comment) */
struct rows_layout {
    int H;     /* rows per token */
    size_t ld; /* elements between tokens */
    int sld;   /* rstd entries between tokens */
};

__device__ __forceinline__ size_t row_off(const rows_layout &L, int r, int C) {
    return (size_t)(r / L.H) * L.ld + (size_t)(r % L.H) * C;
}
__device__ __forceinline__ size_t rstd_off(const rows_layout &L, int r) {
    return (size_t)(r / L.H) * L.sld + (size_t)(r % L.H);
}

/* ---- RMSNorm forward ----------------------------------------------------------------------- */

/* out[row] = x * rstd * w, rstd = 1 / sqrtf(sum x^2 / C + eps) over the C elements of the row;
 * x = inp[row], or (FUSED) x = residual[row] = bf16(a[row] + b[row]), written first (residual may
 * be a or b: each lane reads an element before it writes it). out, inp, residual, a, b: strided
 * rows of layout L (out the same layout as the input); rstd or NULL (not saved); w (C) bf16.
 * Launch: grid ceil(R / 8), RMS_FWD_THREADS, one warp per row; lane l handles columns
 * l*W + j*32*W .. +W in both passes (the fused variant sums the same bf16 values in the same
 * order as the plain one on the residual: the same bits). Pass 2 reloads the row (L1/L2 hit). */
template <int W, bool VEC, bool FUSED>
__global__ void __launch_bounds__(RMS_FWD_THREADS)
    rmsnorm_forward_warp_per_row_kernel(bf16 *out, float *rstd, bf16 *residual, const bf16 *xa,
                                        const bf16 *xb, const bf16 *w, int R, int C,
                                        rows_layout L, float eps) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (RMS_FWD_THREADS / 32) + (threadIdx.x >> 5);
    if (row >= R) return; /* whole warp: no block barrier below */
    const size_t off = row_off(L, row, C);
    const bf16 *x = FUSED ? residual + off : xa + off;

    float ss = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
        float v[W];
        if constexpr (FUSED) {
            float va[W], vb[W];
            tcu_load_bf16<W, VEC>(va, xa + off + c);
            tcu_load_bf16<W, VEC>(vb, xb + off + c);
#pragma unroll
            for (int k = 0; k < W; k++) v[k] = __bfloat162float(__float2bfloat16_rn(va[k] + vb[k]));
            tcu_store_bf16<W, VEC>(residual + off + c, v); /* exact: v is bf16-representable */
        } else {
            tcu_load_bf16<W, VEC>(v, x + c);
        }
#pragma unroll
        for (int k = 0; k < W; k++) ss = fmaf(v[k], v[k], ss);
    }
    const float r = 1.0f / sqrtf(tcu_warp_sum(ss) / (float)C + eps);

    for (int c = lane * W; c < C; c += 32 * W) {
        float v[W], wv[W];
        tcu_load_bf16<W, VEC>(v, x + c);
        tcu_load_bf16<W, VEC>(wv, w + c);
#pragma unroll
        for (int k = 0; k < W; k++) v[k] = v[k] * r * wv[k];
        tcu_store_bf16<W, VEC>(out + off + c, v);
    }
    if (lane == 0 && rstd) rstd[rstd_off(L, row)] = r;
}

/* Picks W / VEC and launches over R strided rows; `what` names the op in errors. */
template <bool FUSED>
static void rms_forward_launch(const char *what, bf16 *out, float *rstd, bf16 *residual,
                               const bf16 *xa, const bf16 *xb, const bf16 *w, int R, int C,
                               rows_layout L, float eps, cudaStream_t st) {
    if (R == 0) return;
    bool aligned = tcu_aligned16(out) && tcu_aligned16(xa) && tcu_aligned16(w);
    if (FUSED) aligned = aligned && tcu_aligned16(xb) && tcu_aligned16(residual);
    const bool w8 = C % 8 == 0 && L.ld % 8 == 0;
    const unsigned grid = tcu_blocks((size_t)R, RMS_FWD_THREADS / 32);
    auto kern = w8 && aligned ? rmsnorm_forward_warp_per_row_kernel<8, true, FUSED>
                : w8          ? rmsnorm_forward_warp_per_row_kernel<8, false, FUSED>
                              : rmsnorm_forward_warp_per_row_kernel<1, false, FUSED>;
    kern<<<grid, RMS_FWD_THREADS, 0, st>>>(out, rstd, residual, xa, xb, w, R, C, L, eps);
    TCU_CHECK_LAUNCH(what);
}

static void check_nc(const char *what, int N, int C, float eps) {
    TCU_REQUIRE(N >= 0 && C >= 1, what, tcu_msg("need N >= 0 and C >= 1, got N=%d C=%d", N, C));
    TCU_REQUIRE(eps >= 0.0f, what, tcu_msg("eps = %g must be >= 0", (double)eps));
}

void tcu_rmsnorm_forward(tsr_bf16 *out, float *rstd, const tsr_bf16 *inp, const tsr_bf16 *w,
                         int N, int C, float eps, tcu_stream s) {
    const char *what = "tcu_rmsnorm_forward";
    check_nc(what, N, C, eps);
    TCU_REQUIRE(out && inp && w, what, "out, inp and w must not be NULL");
    rms_forward_launch<false>(what, (bf16 *)out, rstd, nullptr, (const bf16 *)inp, nullptr,
                              (const bf16 *)w, N, C, rows_layout{1, (size_t)C, 1}, eps,
                              (cudaStream_t)s);
}

/* residual = bf16(a + b) (what tcu_residual_forward writes), out = RMSNorm(residual) from the
 * rounded residual: bit for bit the two separate ops. residual may alias a or b. */
void tcu_residual_rmsnorm_forward(tsr_bf16 *residual, tsr_bf16 *out, float *rstd,
                                  const tsr_bf16 *a, const tsr_bf16 *b, const tsr_bf16 *w, int N,
                                  int C, float eps, tcu_stream s) {
    const char *what = "tcu_residual_rmsnorm_forward";
    check_nc(what, N, C, eps);
    TCU_REQUIRE(residual && out && a && b && w, what, "a required pointer is NULL");
    rms_forward_launch<true>(what, (bf16 *)out, rstd, (bf16 *)residual, (const bf16 *)a,
                             (const bf16 *)b, (const bf16 *)w, N, C, rows_layout{1, (size_t)C, 1},
                             eps, (cudaStream_t)s);
}

/* ---- RMSNorm backward ---------------------------------------------------------------------- */

/* One row group per block; per row n of the group, in order (norm = x * rstd, g = dout):
 *   dinp[n,:] += (w*g - norm * mean(w*g*norm)) * rstd      (bf16, read-add-round)
 *   acc[:] += g * norm                                      (fp32 column sums of this group)
 * then partial[group] = acc. Strided rows of layout L (dinp, dout, inp alike), w (C) bf16,
 * rstd (layout L) fp32, partial (P, C) fp32 scratch.
 * Launch: grid P = ceil(R / rows), block ceil(C / W) rounded up to a warp, at most 1024 (thread t
 * owns columns t*W + j*blockDim*W .. +W in every pass: each column summed by one thread in row
 * order). Dynamic shared memory C floats when acc_smem (the accumulators), else 0 and the
 * accumulators are partial[group] itself. One block sum per row. GRADS = false (the weight
 * frozen): no accumulators, partial unread (may be NULL), acc_smem ignored; dinp the same
 * statements. */
template <int W, bool VEC, bool GRADS>
__global__ void __launch_bounds__(1024)
    rmsnorm_backward_row_group_kernel(bf16 *dinp, float *partial, const bf16 *dout,
                                      const bf16 *inp, const bf16 *w, const float *rstd, int R,
                                      int C, rows_layout L, int rows, int acc_smem) {
    extern __shared__ float rms_acc_smem[]; /* [C] when acc_smem */
    __shared__ float2 red[32];
    float *part = GRADS ? partial + (size_t)blockIdx.x * C : nullptr;
    float *acc = acc_smem ? rms_acc_smem : part;
    const int c0 = threadIdx.x * W, step = blockDim.x * W;
    if constexpr (GRADS)
        for (int c = c0; c < C; c += step)
#pragma unroll
            for (int k = 0; k < W; k++) acc[c + k] = 0.0f;
    const int n0 = blockIdx.x * rows, n1 = min(R, n0 + rows);
    for (int n = n0; n < n1; n++) { /* block-uniform: every thread reaches the barriers */
        const size_t off = row_off(L, n, C);
        const float r = rstd[rstd_off(L, n)];
        float2 sums = make_float2(0.0f, 0.0f); /* sum of w*g*norm */
        for (int c = c0; c < C; c += step) {
            float xv[W], gv[W], wv[W];
            tcu_load_bf16<W, VEC>(xv, inp + off + c);
            tcu_load_bf16<W, VEC>(gv, dout + off + c);
            tcu_load_bf16<W, VEC>(wv, w + c);
#pragma unroll
            for (int k = 0; k < W; k++) {
                const float norm = xv[k] * r;
                sums.x += wv[k] * gv[k] * norm;
                if constexpr (GRADS) acc[c + k] += gv[k] * norm;
            }
        }
        const float dnmean = tcu_block_sum2(sums, red).x / (float)C;
        for (int c = c0; c < C; c += step) {
            float xv[W], gv[W], wv[W], dv[W];
            tcu_load_bf16<W, VEC>(xv, inp + off + c);
            tcu_load_bf16<W, VEC>(gv, dout + off + c);
            tcu_load_bf16<W, VEC>(wv, w + c);
            tcu_load_bf16<W, VEC>(dv, dinp + off + c);
#pragma unroll
            for (int k = 0; k < W; k++) dv[k] += (wv[k] * gv[k] - xv[k] * r * dnmean) * r;
            tcu_store_bf16<W, VEC>(dinp + off + c, dv);
        }
    }
    if (GRADS && acc_smem)
        for (int c = c0; c < C; c += step)
#pragma unroll
            for (int k = 0; k < W; k++) part[c + k] = acc[c + k];
}

/* dinp += and dw += over R strided rows of layout L: the warp-per-row kernel where it applies
 * (contiguous rows: RMSNorm, not QK-norm's heads; tcu_norm_backward_warp_rows), else the
 * row-group kernel, then the fixed-order sum of its partials (tcu_norm_param_grad_reduce). dw
 * NULL (frozen): the kernel without sums alone. Deterministic. */
static void rms_backward_rows(const char *what, bf16 *dinp, float *dw, const bf16 *dout,
                              const bf16 *inp, const bf16 *w, const float *rstd, int R, int C,
                              rows_layout L, cudaStream_t st) {
    if (R == 0) return;
    const int rows = tcu_norm_rows_per_group(R);
    const int P = (R + rows - 1) / rows;
    const bool grads = dw != nullptr;
    float *partial =
        grads ? tcu_norm_partial_scratch((size_t)P * C * sizeof(float), what) : nullptr;
    if (L.H == 1 && L.ld == (size_t)C && L.sld == 1 &&
        tcu_norm_backward_warp_rows(true, dinp, partial, dout, inp, w, nullptr, rstd, R, C, grads,
                                    false, st, what)) {
        if (grads) tcu_norm_param_grad_reduce(dw, nullptr, partial, P, C, (size_t)C, st, what);
        return;
    }
    const bool w8 = C % 8 == 0 && L.ld % 8 == 0;
    const bool vec = w8 && tcu_aligned16(dinp) && tcu_aligned16(dout) && tcu_aligned16(inp) &&
                     tcu_aligned16(w);
    const int W = w8 ? 8 : 1;
    int threads = (int)(((size_t)C / W + 31) / 32 * 32);
    threads = threads > 1024 ? 1024 : threads < 32 ? 32 : threads;
    const size_t acc_bytes = (size_t)C * sizeof(float);
    const tcu_context *ctx = tcu_context_get(what);
    const int acc_smem = grads && acc_bytes + 32 * sizeof(float2) <= ctx->smem_optin;
    const size_t dyn = acc_smem ? acc_bytes : 0;
    auto kern = grads ? (vec  ? rmsnorm_backward_row_group_kernel<8, true, true>
                         : w8 ? rmsnorm_backward_row_group_kernel<8, false, true>
                              : rmsnorm_backward_row_group_kernel<1, false, true>)
                      : (vec  ? rmsnorm_backward_row_group_kernel<8, true, false>
                         : w8 ? rmsnorm_backward_row_group_kernel<8, false, false>
                              : rmsnorm_backward_row_group_kernel<1, false, false>);
    /* always set (the static part on top must never tip a size near 48 KiB over) */
    TCU_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn),
              what);
    kern<<<P, threads, dyn, st>>>(dinp, partial, dout, inp, w, rstd, R, C, L, rows, acc_smem);
    TCU_CHECK_LAUNCH(what);
    if (grads) tcu_norm_param_grad_reduce(dw, nullptr, partial, P, C, (size_t)C, st, what);
}

void tcu_rmsnorm_backward(tsr_bf16 *dinp, float *dw, const tsr_bf16 *dout, const tsr_bf16 *inp,
                          const tsr_bf16 *w, const float *rstd, int N, int C, tcu_stream s) {
    const char *what = "tcu_rmsnorm_backward";
    check_nc(what, N, C, 0.0f);
    TCU_REQUIRE(dinp && dout && inp && w && rstd, what, "a required pointer is NULL");
    rms_backward_rows(what, (bf16 *)dinp, dw, (const bf16 *)dout, (const bf16 *)inp,
                      (const bf16 *)w, rstd, N, C, rows_layout{1, (size_t)C, 1}, (cudaStream_t)s);
}

/* ---- QK-norm ------------------------------------------------------------------------------- */

/* The value columns [(NH+KVH)*hs, QKV) of each of the N rows (ld = QKV elements apart):
 * ACC = false: out = x (a copy); ACC = true: out = bf16(out + x) (the gradient's pass-through).
 * One item = W columns of one row (W = 8 when width, ld and col0 are multiples of 8 and both
 * pointers 16-byte aligned); grid-stride, EW_THREADS. */
template <int W, bool ACC>
__global__ void value_columns_kernel(bf16 *out, const bf16 *x, int N, size_t ld, size_t col0,
                                     int width) {
    const int packs = width / W;
    const size_t items = (size_t)N * packs, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < items; k += stride) {
        const size_t n = k / packs, at = n * ld + col0 + (size_t)(k - n * packs) * W;
        float v[W];
        tcu_load_bf16<W>(v, x + at);
        if constexpr (ACC) {
            float o[W];
            tcu_load_bf16<W>(o, out + at);
#pragma unroll
            for (int j = 0; j < W; j++) v[j] += o[j];
        }
        tcu_store_bf16<W>(out + at, v);
    }
}

template <bool ACC>
static void value_columns(const char *what, bf16 *out, const bf16 *x, int N, int NH, int KVH,
                          int hs, cudaStream_t st) {
    const size_t ld = (size_t)(NH + 2 * KVH) * hs, col0 = (size_t)(NH + KVH) * hs;
    const int width = KVH * hs;
    const bool v8 = width % 8 == 0 && ld % 8 == 0 && col0 % 8 == 0 && tcu_aligned16(out) &&
                    tcu_aligned16(x);
    const size_t items = (size_t)N * (v8 ? width / 8 : width);
    auto kern = v8 ? value_columns_kernel<8, ACC> : value_columns_kernel<1, ACC>;
    kern<<<ew_grid(items), EW_THREADS, 0, st>>>(out, x, N, ld, col0, width);
    TCU_CHECK_LAUNCH(what);
}

/* How QK-norm splits a row of (N,QKV): per head (every query head, every key head one RMSNorm
 * row of hs; rstd (N, NH+KVH)) or per projection (OLMo 2: the NH hs query columns one row, the
 * KVH hs key columns one; rstd (N, 2)). */
struct qk_split {
    int qrows, krows, qc, kc, koff_rstd;
    rows_layout ql, kl;
};

static qk_split qk_split_of(int N, int NH, int KVH, int hs, bool per_head) {
    const size_t ld = (size_t)(NH + 2 * KVH) * hs;
    if (per_head)
        return qk_split{N * NH, N * KVH, hs, hs, NH, rows_layout{NH, ld, NH + KVH},
                        rows_layout{KVH, ld, NH + KVH}};
    return qk_split{N, N, NH * hs, KVH * hs, 1, rows_layout{1, ld, 2}, rows_layout{1, ld, 2}};
}

/* out (N,QKV): the query and key columns RMSNorm'ed (qw, kw) as qk_split_of says, the value heads
 * copied. Three launches (queries, keys, values). */
static void qknorm_forward(const char *what, bool per_head, tsr_bf16 *out, float *rstd,
                           const tsr_bf16 *inp, const tsr_bf16 *qw, const tsr_bf16 *kw, int N,
                           int NH, int KVH, int hs, float eps, tcu_stream s) {
    TCU_REQUIRE_RULE(what, tcu_rule_heads, N, NH, KVH, hs);
    check_nc(what, N, hs, eps);
    TCU_REQUIRE(out && inp && qw && kw, what, "out, inp, qw and kw must not be NULL");
    if (N == 0) return;
    const cudaStream_t st = (cudaStream_t)s;
    const size_t koff = (size_t)NH * hs;
    const qk_split q = qk_split_of(N, NH, KVH, hs, per_head);
    bf16 *o = (bf16 *)out;
    const bf16 *x = (const bf16 *)inp;
    rms_forward_launch<false>(what, o, rstd, nullptr, x, nullptr, (const bf16 *)qw, q.qrows, q.qc,
                              q.ql, eps, st);
    rms_forward_launch<false>(what, o + koff, rstd ? rstd + q.koff_rstd : nullptr, nullptr,
                              x + koff, nullptr, (const bf16 *)kw, q.krows, q.kc, q.kl, eps, st);
    value_columns<false>(what, o, x, N, NH, KVH, hs, st);
}

/* dinp (N,QKV) += the gradient (the value columns: dout's); dqw, dkw fp32 +=, each by the
 * deterministic row-group scheme, each or NULL (frozen: that head kind's sums skipped). */
static void qknorm_backward(const char *what, bool per_head, tsr_bf16 *dinp, float *dqw,
                            float *dkw, const tsr_bf16 *dout, const tsr_bf16 *inp,
                            const tsr_bf16 *qw, const tsr_bf16 *kw, const float *rstd, int N,
                            int NH, int KVH, int hs, tcu_stream s) {
    TCU_REQUIRE_RULE(what, tcu_rule_heads, N, NH, KVH, hs);
    TCU_REQUIRE(dinp && dout && inp && qw && kw && rstd, what, "a required pointer is NULL");
    if (N == 0) return;
    const cudaStream_t st = (cudaStream_t)s;
    const size_t koff = (size_t)NH * hs;
    const qk_split q = qk_split_of(N, NH, KVH, hs, per_head);
    bf16 *d = (bf16 *)dinp;
    const bf16 *g = (const bf16 *)dout, *x = (const bf16 *)inp;
    rms_backward_rows(what, d, dqw, g, x, (const bf16 *)qw, rstd, q.qrows, q.qc, q.ql, st);
    rms_backward_rows(what, d + koff, dkw, g + koff, x + koff, (const bf16 *)kw,
                      rstd + q.koff_rstd, q.krows, q.kc, q.kl, st);
    value_columns<true>(what, d, g, N, NH, KVH, hs, st);
}

/* QK-norm per head; rstd (N, NH+KVH) fp32 [query heads | key heads] */
void tcu_qknorm_forward(tsr_bf16 *out, float *rstd, const tsr_bf16 *inp, const tsr_bf16 *qw,
                        const tsr_bf16 *kw, int N, int NH, int KVH, int hs, float eps,
                        tcu_stream s) {
    qknorm_forward("tcu_qknorm_forward", true, out, rstd, inp, qw, kw, N, NH, KVH, hs, eps, s);
}

void tcu_qknorm_backward(tsr_bf16 *dinp, float *dqw, float *dkw, const tsr_bf16 *dout,
                         const tsr_bf16 *inp, const tsr_bf16 *qw, const tsr_bf16 *kw,
                         const float *rstd, int N, int NH, int KVH, int hs, tcu_stream s) {
    qknorm_backward("tcu_qknorm_backward", true, dinp, dqw, dkw, dout, inp, qw, kw, rstd, N, NH,
                    KVH, hs, s);
}

/* ---- RoPE ---------------------------------------------------------------------------------- */

/* In place on the query and key heads of x (N,QKV), rotate-half pairing: for i < hs/2 with
 * a = p * inv_freq[i] (fp32; sincosf), p = pos[n] or n % T + p0:
 *   x'[i] = x[i] cos a - s x[i + hs/2] sin a,  x'[i + hs/2] = x[i + hs/2] cos a + s x[i] sin a
 * with s = +1 (forward) or -1 (INVERSE: the backward's transposed rotation). One item = W pairs
 * (i..i+W-1 with their partners) of one head of one row: W = 8 when hs/2, QKV are multiples of 8
 * and x is 16-byte aligned; grid-stride over N * (NH+KVH) * hs/2 / W items, EW_THREADS. */
template <int W, bool INVERSE>
__global__ void rope_rotate_half_kernel(bf16 *x, const int32_t *pos, int p0,
                                        const float *inv_freq, int T, int heads, int hs,
                                        size_t ld, size_t items) {
    const int half = hs / 2, packs = half / W;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < items; k += stride) {
        const size_t n = k / ((size_t)heads * packs);
        const int rem = (int)(k - n * heads * packs), hh = rem / packs, i0 = (rem % packs) * W;
        const float p = (float)(pos ? pos[n] : (int)(n % T) + p0);
        bf16 *a = x + n * ld + (size_t)hh * hs + i0, *b = a + half;
        float va[W], vb[W];
        tcu_load_bf16<W>(va, a);
        tcu_load_bf16<W>(vb, b);
#pragma unroll
        for (int j = 0; j < W; j++) {
            float sn, cs;
            sincosf(p * inv_freq[i0 + j], &sn, &cs);
            if (INVERSE) sn = -sn;
            const float ra = va[j] * cs - vb[j] * sn, rb = vb[j] * cs + va[j] * sn;
            va[j] = ra;
            vb[j] = rb;
        }
        tcu_store_bf16<W>(a, va);
        tcu_store_bf16<W>(b, vb);
    }
}

template <bool INVERSE>
static void rope_launch(const char *what, tsr_bf16 *qkv, const int32_t *pos, int p0,
                        const float *inv_freq, int B, int T, int NH, int KVH, int hs,
                        tcu_stream s) {
    TCU_REQUIRE(B >= 0 && T >= 1 && hs >= 2 && hs % 2 == 0, what,
                tcu_msg("bad shape B=%d T=%d hs=%d (hs even)", B, T, hs));
    TCU_REQUIRE_RULE(what, tcu_rule_heads, B * T, NH, KVH, hs);
    TCU_REQUIRE(qkv && inv_freq, what, "qkv and inv_freq must not be NULL");
    TCU_REQUIRE(pos || p0 >= 0, what, tcu_msg("p0 = %d must be >= 0", p0));
    const size_t N = (size_t)B * T;
    if (N == 0) return;
    const size_t ld = (size_t)(NH + 2 * KVH) * hs;
    const int heads = NH + KVH, half = hs / 2;
    const bool v8 = half % 8 == 0 && ld % 8 == 0 && tcu_aligned16(qkv);
    const size_t items = N * heads * (size_t)(v8 ? half / 8 : half);
    auto kern = v8 ? rope_rotate_half_kernel<8, INVERSE> : rope_rotate_half_kernel<1, INVERSE>;
    kern<<<ew_grid(items), EW_THREADS, 0, (cudaStream_t)s>>>((bf16 *)qkv, pos, p0, inv_freq, T,
                                                             heads, hs, ld, items);
    TCU_CHECK_LAUNCH(what);
}

void tcu_rope_forward(tsr_bf16 *qkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                      int T, int NH, int KVH, int hs, tcu_stream s) {
    rope_launch<false>("tcu_rope_forward", qkv, pos, p0, inv_freq, B, T, NH, KVH, hs, s);
}

void tcu_rope_backward(tsr_bf16 *dqkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                       int T, int NH, int KVH, int hs, tcu_stream s) {
    rope_launch<true>("tcu_rope_backward", dqkv, pos, p0, inv_freq, B, T, NH, KVH, hs, s);
}

/* ---- SwiGLU -------------------------------------------------------------------------------- */

/* sigmoid(x) = 1 / (1 + e^-x), e^-x clamped to e^87 as the CPU's cpu_expf (finite: no inf * 0) */
__device__ __forceinline__ float sigmoid_f(float x) {
    return 1.0f / (1.0f + expf(fminf(-x, 87.0f)));
}

/* The gated units (UNIT): SWIGLU silu(g) u; GEGLU gelu_tanh(g) u (gelu_tanh(g) = g sigmoid(2v),
 * v = sqrt(2/pi)(g + 0.044715 g^3): cpu_geglu_*); GPTOSS gpt-oss's (u' + 1) g' sigmoid(alpha g'),
 * g' = min(g, limit), u' = clamp(u, -limit, limit) (cpu_moe_gptoss_*: the clamps pass the
 * gradient inside the bounds, bounds included). */
enum { UNIT_SWIGLU = 0, UNIT_GEGLU = 1, UNIT_GPTOSS = 2 };
struct unit_args {
    float alpha, limit; /* GPTOSS only */
};
#define GEGLU_K0 0.7978845608028654f /* sqrt(2/pi), cpu_llama.c's constants */
#define GEGLU_K1 0.044715f

/* the unit's value at (g, u) */
template <int UNIT>
__device__ __forceinline__ float unit_value(float g, float u, unit_args a) {
    if constexpr (UNIT == UNIT_SWIGLU) return g * sigmoid_f(g) * u;
    if constexpr (UNIT == UNIT_GEGLU) {
        const float v = GEGLU_K0 * (g + GEGLU_K1 * g * g * g);
        return g * sigmoid_f(2.0f * v) * u;
    }
    const float gc = fminf(g, a.limit), uc = fminf(fmaxf(u, -a.limit), a.limit);
    return (uc + 1.0f) * (gc * sigmoid_f(a.alpha * gc));
}

/* the unit's gradient at (g, u) given d = d(out): dg += d(gate), du += d(up) */
template <int UNIT>
__device__ __forceinline__ void unit_grad(float g, float u, float d, unit_args a, float &dg,
                                          float &du) {
    if constexpr (UNIT == UNIT_SWIGLU) {
        const float sg = sigmoid_f(g);
        dg += d * u * (sg * (1.0f + g * (1.0f - sg)));
        du += d * (g * sg);
    } else if constexpr (UNIT == UNIT_GEGLU) {
        const float v = GEGLU_K0 * (g + GEGLU_K1 * g * g * g);
        const float dv = GEGLU_K0 * (1.0f + 3.0f * GEGLU_K1 * g * g);
        const float s = sigmoid_f(2.0f * v);
        dg += d * u * (s + 2.0f * g * s * (1.0f - s) * dv);
        du += d * (g * s);
    } else {
        const float gc = fminf(g, a.limit), uc = fminf(fmaxf(u, -a.limit), a.limit);
        const float s = sigmoid_f(a.alpha * gc), dglu = s + a.alpha * gc * s * (1.0f - s);
        dg += g <= a.limit ? d * (uc + 1.0f) * dglu : 0.0f;
        du += u >= -a.limit && u <= a.limit ? d * gc * s : 0.0f;
    }
}

/* BACKWARD = false: out[n,f] = unit(g, u); true: dinp[n,f] += d(gate), dinp[n,F+f] += d(up)
 * (set: = instead of +=, dinp unread); g = inp[n,f], u = inp[n,F+f] (SWIGLU: silu(g) = g
 * sigmoid(g), silu' = s (1 + g (1 - s))). out, dout (N,F), inp, dinp (N,2F) bf16. One item = W
 * columns of one row (W = 8: F % 8 == 0 and every pointer 16-byte aligned); grid-stride,
 * EW_THREADS. */
template <int W, bool BACKWARD, int UNIT>
__global__ void gated_unit_kernel(bf16 *o, const bf16 *inp, const bf16 *dout, int F,
                                  size_t items, bool set, unit_args ua) {
    const int packs = F / W;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < items; k += stride) {
        const size_t n = k / packs;
        const int f = (int)(k - n * packs) * W;
        const bf16 *gp = inp + n * 2 * F + f, *up = gp + F;
        float g[W], u[W];
        tcu_load_bf16<W>(g, gp);
        tcu_load_bf16<W>(u, up);
        if constexpr (!BACKWARD) {
#pragma unroll
            for (int j = 0; j < W; j++) g[j] = unit_value<UNIT>(g[j], u[j], ua);
            tcu_store_bf16<W>(o + n * F + f, g);
        } else {
            float d[W], dg[W] = {}, du[W] = {};
            bf16 *dgp = o + n * 2 * F + f, *dup = dgp + F;
            tcu_load_bf16<W>(d, dout + n * F + f);
            if (!set) {
                tcu_load_bf16<W>(dg, dgp);
                tcu_load_bf16<W>(du, dup);
            }
#pragma unroll
            for (int j = 0; j < W; j++) unit_grad<UNIT>(g[j], u[j], d[j], ua, dg[j], du[j]);
            tcu_store_bf16<W>(dgp, dg);
            tcu_store_bf16<W>(dup, du);
        }
    }
}

template <bool BACKWARD, int UNIT = UNIT_SWIGLU>
static void swiglu_launch(const char *what, bf16 *o, const bf16 *inp, const bf16 *dout, int N,
                          int F, bool set, cudaStream_t st, unit_args ua = unit_args{0.0f, 0.0f}) {
    TCU_REQUIRE(N >= 0 && F >= 1, what, tcu_msg("need N >= 0 and F >= 1, got N=%d F=%d", N, F));
    TCU_REQUIRE(o && inp && (!BACKWARD || dout), what, "a required pointer is NULL");
    if (N == 0) return;
    const bool v8 = F % 8 == 0 && tcu_aligned16(o) && tcu_aligned16(inp) &&
                    (!BACKWARD || tcu_aligned16(dout));
    const size_t items = (size_t)N * (v8 ? F / 8 : F);
    auto kern = v8 ? gated_unit_kernel<8, BACKWARD, UNIT> : gated_unit_kernel<1, BACKWARD, UNIT>;
    kern<<<ew_grid(items), EW_THREADS, 0, st>>>(o, inp, dout, F, items, set, ua);
    TCU_CHECK_LAUNCH(what);
}

void tcu_swiglu_forward(tsr_bf16 *out, const tsr_bf16 *inp, int N, int F, tcu_stream s) {
    swiglu_launch<false>("tcu_swiglu_forward", (bf16 *)out, (const bf16 *)inp, nullptr, N, F,
                         false, (cudaStream_t)s);
}

void tcu_swiglu_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, int N, int F,
                         tsr_grad_mode mode, tcu_stream s) {
    swiglu_launch<true>("tcu_swiglu_backward", (bf16 *)dinp, (const bf16 *)inp,
                        (const bf16 *)dout, N, F, mode == TSR_GRAD_SET, (cudaStream_t)s);
}

/* ---- issue 67's variants (docs/cuda.md "Model variants") ----------------------------------- */

/* GeGLU with the tanh GELU (model.mlp = geglu_tanh): tcu_swiglu_*'s shapes and modes */
void tcu_geglu_forward(tsr_bf16 *out, const tsr_bf16 *inp, int N, int F, tcu_stream s) {
    swiglu_launch<false, UNIT_GEGLU>("tcu_geglu_forward", (bf16 *)out, (const bf16 *)inp, nullptr,
                                     N, F, false, (cudaStream_t)s);
}

void tcu_geglu_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, int N, int F,
                        tsr_grad_mode mode, tcu_stream s) {
    swiglu_launch<true, UNIT_GEGLU>("tcu_geglu_backward", (bf16 *)dinp, (const bf16 *)inp,
                                    (const bf16 *)dout, N, F, mode == TSR_GRAD_SET,
                                    (cudaStream_t)s);
}

/* gpt-oss's clamped unit (cpu_moe_gptoss_*) */
void tcu_moe_gptoss_forward(tsr_bf16 *out, const tsr_bf16 *inp, int N, int F, float alpha,
                            float limit, tcu_stream s) {
    swiglu_launch<false, UNIT_GPTOSS>("tcu_moe_gptoss_forward", (bf16 *)out, (const bf16 *)inp,
                                      nullptr, N, F, false, (cudaStream_t)s,
                                      unit_args{alpha, limit});
}

void tcu_moe_gptoss_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, int N,
                             int F, float alpha, float limit, tsr_grad_mode mode, tcu_stream s) {
    swiglu_launch<true, UNIT_GPTOSS>("tcu_moe_gptoss_backward", (bf16 *)dinp, (const bf16 *)inp,
                                     (const bf16 *)dout, N, F, mode == TSR_GRAD_SET,
                                     (cudaStream_t)s, unit_args{alpha, limit});
}

/* QK-norm over the whole projections (OLMo 2): the per-head kernels with one row per token
 * (H = 1, sld = 2); rstd (N, 2). */
void tcu_qknorm_proj_forward(tsr_bf16 *out, float *rstd, const tsr_bf16 *inp, const tsr_bf16 *qw,
                             const tsr_bf16 *kw, int N, int NH, int KVH, int hs, float eps,
                             tcu_stream s) {
    qknorm_forward("tcu_qknorm_proj_forward", false, out, rstd, inp, qw, kw, N, NH, KVH, hs, eps,
                   s);
}

void tcu_qknorm_proj_backward(tsr_bf16 *dinp, float *dqw, float *dkw, const tsr_bf16 *dout,
                              const tsr_bf16 *inp, const tsr_bf16 *qw, const tsr_bf16 *kw,
                              const float *rstd, int N, int NH, int KVH, int hs, tcu_stream s) {
    qknorm_backward("tcu_qknorm_proj_backward", false, dinp, dqw, dkw, dout, inp, qw, kw, rstd, N,
                    NH, KVH, hs, s);
}

/* Partial / scaled RoPE (ops.h rope_part_forward): rope_rotate_half_kernel's rotation over the
 * first rot dimensions of each query and key head (pairs (i, i + rot/2), inv_freq (rot/2)), the
 * cosine and sine times mscale (YaRN); dimensions rot..hs-1 untouched. One item = one pair of one
 * head of one row; grid-stride over N (NH+KVH) rot/2 items, EW_THREADS. */
template <bool INVERSE>
__global__ void rope_part_kernel(bf16 *x, const int32_t *pos, int p0, const float *inv_freq,
                                 int T, int heads, int hs, int rot, float mscale, size_t ld,
                                 size_t items) {
    const int half = rot / 2;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < items; k += stride) {
        const size_t n = k / ((size_t)heads * half);
        const int rem = (int)(k - n * heads * half), hh = rem / half, i = rem % half;
        const float p = (float)(pos ? pos[n] : (int)(n % T) + p0);
        bf16 *a = x + n * ld + (size_t)hh * hs + i, *b = a + half;
        float sn, cs;
        sincosf(p * inv_freq[i], &sn, &cs);
        cs *= mscale;
        sn *= INVERSE ? -mscale : mscale;
        const float va = __bfloat162float(*a), vb = __bfloat162float(*b);
        *a = __float2bfloat16_rn(va * cs - vb * sn);
        *b = __float2bfloat16_rn(vb * cs + va * sn);
    }
}

template <bool INVERSE>
static void rope_part_launch(const char *what, tsr_bf16 *qkv, const int32_t *pos, int p0,
                             const float *inv_freq, int B, int T, int NH, int KVH, int hs, int rot,
                             float mscale, tcu_stream s) {
    TCU_REQUIRE(B >= 0 && T >= 1 && hs >= 2 && rot >= 2 && rot % 2 == 0 && rot <= hs, what,
                tcu_msg("bad shape B=%d T=%d hs=%d rot=%d (rot even, 2 <= rot <= hs)", B, T, hs,
                        rot));
    TCU_REQUIRE_RULE(what, tcu_rule_heads, B * T, NH, KVH, hs);
    TCU_REQUIRE(qkv && inv_freq, what, "qkv and inv_freq must not be NULL");
    TCU_REQUIRE(pos || p0 >= 0, what, tcu_msg("p0 = %d must be >= 0", p0));
    const size_t N = (size_t)B * T;
    if (N == 0) return;
    const size_t ld = (size_t)(NH + 2 * KVH) * hs, items = N * (NH + KVH) * (size_t)(rot / 2);
    rope_part_kernel<INVERSE><<<ew_grid(items), EW_THREADS, 0, (cudaStream_t)s>>>(
        (bf16 *)qkv, pos, p0, inv_freq, T, NH + KVH, hs, rot, mscale, ld, items);
    TCU_CHECK_LAUNCH(what);
}

void tcu_rope_part_forward(tsr_bf16 *qkv, const int32_t *pos, int p0, const float *inv_freq,
                           int B, int T, int NH, int KVH, int hs, int rot, float mscale,
                           tcu_stream s) {
    rope_part_launch<false>("tcu_rope_part_forward", qkv, pos, p0, inv_freq, B, T, NH, KVH, hs,
                            rot, mscale, s);
}

void tcu_rope_part_backward(tsr_bf16 *dqkv, const int32_t *pos, int p0, const float *inv_freq,
                            int B, int T, int NH, int KVH, int hs, int rot, float mscale,
                            tcu_stream s) {
    rope_part_launch<true>("tcu_rope_part_backward", dqkv, pos, p0, inv_freq, B, T, NH, KVH, hs,
                           rot, mscale, s);
}

/* x (n) bf16 = round(x * sc) (model.embed_scale on the embedding and its gradient) */
__global__ void scale_bf16_kernel(bf16 *x, float sc, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
        x[k] = __float2bfloat16_rn(__bfloat162float(x[k]) * sc);
}

void tcu_scale_bf16(tsr_bf16 *x, float sc, size_t n, tcu_stream s) {
    const char *what = "tcu_scale_bf16";
    TCU_REQUIRE(x || n == 0, what, "x must not be NULL");
    if (n == 0) return;
    scale_bf16_kernel<<<ew_grid(n), EW_THREADS, 0, (cudaStream_t)s>>>((bf16 *)x, sc, n);
    TCU_CHECK_LAUNCH(what);
}

/* ---- the gates (model.attn_output_gate, model.moe_shared_gate) ------------------------------ */

/* gated (n) = y sigmoid(gate) (Qwen3-Next's attention output gate), bf16 */
__global__ void gate_forward_kernel(bf16 *gated, const bf16 *y, const bf16 *gate, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
        gated[k] = __float2bfloat16_rn(__bfloat162float(y[k]) *
                                       sigmoid_f(__bfloat162float(gate[k])));
}

/* from dy = d(gated) (in place: dy becomes d(y) = dy s) and dgate = dy y s (1 - s), written */
__global__ void gate_backward_kernel(bf16 *dy, bf16 *dgate, const bf16 *y, const bf16 *gate,
                                     size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) {
        const float s = sigmoid_f(__bfloat162float(gate[k])), d = __bfloat162float(dy[k]);
        dgate[k] = __float2bfloat16_rn(d * __bfloat162float(y[k]) * s * (1.0f - s));
        dy[k] = __float2bfloat16_rn(d * s);
    }
}

void tcu_gate_forward(tsr_bf16 *gated, const tsr_bf16 *y, const tsr_bf16 *gate, size_t n,
                      tcu_stream s) {
    const char *what = "tcu_gate_forward";
    TCU_REQUIRE(n == 0 || (gated && y && gate), what, "a required pointer is NULL");
    if (n == 0) return;
    gate_forward_kernel<<<ew_grid(n), EW_THREADS, 0, (cudaStream_t)s>>>(
        (bf16 *)gated, (const bf16 *)y, (const bf16 *)gate, n);
    TCU_CHECK_LAUNCH(what);
}

void tcu_gate_backward(tsr_bf16 *dy, tsr_bf16 *dgate, const tsr_bf16 *y, const tsr_bf16 *gate,
                       size_t n, tcu_stream s) {
    const char *what = "tcu_gate_backward";
    TCU_REQUIRE(n == 0 || (dy && dgate && y && gate), what, "a required pointer is NULL");
    if (n == 0) return;
    gate_backward_kernel<<<ew_grid(n), EW_THREADS, 0, (cudaStream_t)s>>>(
        (bf16 *)dy, (bf16 *)dgate, (const bf16 *)y, (const bf16 *)gate, n);
    TCU_CHECK_LAUNCH(what);
}
