/* cuda_layernorm.cu — LayerNorm of cuda_ops.h: tcu_layernorm_forward, the fused
 * tcu_residual_layernorm_forward and tcu_layernorm_backward, the maths of kernels/cpu/cpu_ops.c.
 *
 * File-wide conventions (cuda_ops.h):
 *   - row-major (N,C) bf16 activations, (C) bf16 weight and bias, fp32 mean/rstd (N);
 *   - statistics in fp32: two passes (mean, then the biased variance of x - mean: no
 *     E[x^2] - E[x]^2 cancellation), rstd = 1 / sqrtf(var + TSR_LN_EPS), as the CPU op;
 *   - backward ACCUMULATES: dinp (bf16) += (read, add in fp32, round once); dw, db (fp32) +=;
 *   - dw/db are deterministic: no atomics. The rows are cut into P groups (P a function of N only,
 *     tcu_norm_rows_per_group); one block per group walks its rows in order (C <= 1024: a warp
 *     per row, the warps' sums added in warp order) and keeps fp32 column sums, written as
 *     partial row p of a scratch (P, 2C) = [dw | db]; a second kernel adds the P partials per
 *     column in a fixed order into dw/db;
 *   - frozen parameters: dw and db may each be NULL. Both NULL: the row kernel's GRADS = false
 *     instance (the same dinp statements without the column sums), no scratch, no reduction; one
 *     NULL: the sums as ever, that one not added. dinp is the same bits either way;
 *   - every launch on the caller's stream, checked (TCU_CHECK_LAUNCH).
 * Vector width: W = 8 bf16 per lane step (16-byte loads and stores) when C % 8 == 0 and every
 * pointer is 16-byte aligned; W = 8 with scalar loads when C % 8 == 0 but a pointer is not (same
 * element-to-lane mapping, so the same summation order and the same bits); W = 1 otherwise.
 * The backward scratch is one static device buffer (the norms', the matmuls' bias gradients' and
 * MoE routing's: tcu_norm_partial_scratch), grown (tcu_malloc, after a device synchronisation) on
 * demand and freed by tcu_layernorm_release (tcu_shutdown): two of its users on two streams at
 * once would race on it (one stream per rank).
 */
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "cuda_internal.h"

#define LN_FWD_THREADS 256   /* forward: 8 warps per block, one row per warp */
#define LN_BWD_MAX_GROUPS 512 /* backward: at most this many row groups (partials) */
#define LN_BWD_MIN_ROWS 4     /* backward: at least this many rows per group */
#define LN_RED_COLS 32        /* partial reduction: columns per block (one warp wide) */
#define LN_RED_SLICES 32      /* partial reduction: warps per block, each sums every 32nd partial */

/* ---- forward ----------------------------------------------------------------------------- */

/* out[n,:] = (x - mean) * rstd * w + bias, mean = sum x / C, rstd = 1/sqrtf(sum (x-mean)^2 / C + eps);
 * x = inp[n,:], or (FUSED) x = residual[n,:] = bf16(a[n,:] + b[n,:]), written first.
 * out (N,C) bf16; mean, rstd (N) fp32 or NULL (not saved); FUSED: residual (N,C) bf16 written,
 * a = xa, b = xb (N,C) bf16 (residual may be a or b: each lane reads an element before it
 * writes it); else inp = xa (N,C), xb unused; w (C) bf16; bias (C) bf16 or NULL.
 * Launch: grid ceil(N / 8), block LN_FWD_THREADS (8 warps), one warp per row, no shared memory.
 * Lane l handles columns c = l*W + j*32*W .. +W (same mapping in all three passes and in both
 * variants: the fused one sums the same bf16 values in the same order as the plain one on the
 * residual, bit for bit). Passes 2 and 3 reload the row (L1/L2 hits; FUSED: the residual this
 * lane just wrote). Preconditions (host): C >= 1; VEC: C % 8 == 0, all pointers 16-byte aligned. */
template <int W, bool VEC, bool FUSED>
__global__ void __launch_bounds__(LN_FWD_THREADS)
    layernorm_forward_warp_per_row_kernel(bf16 *out, float *mean, float *rstd, bf16 *residual,
                                          const bf16 *xa, const bf16 *xb, const bf16 *w,
                                          const bf16 *bias, int N, int C) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (LN_FWD_THREADS / 32) + (threadIdx.x >> 5);
    if (row >= N) return; /* whole warp: row is warp-uniform, and there is no block barrier */
    const size_t off = (size_t)row * C;
    const bf16 *x = FUSED ? residual + off : xa + off;

    /* pass 1: sum (FUSED: residual = bf16(a + b), written, then summed as stored) */
    float s = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
        float v[W];
        if constexpr (FUSED) {
            float va[W], vb[W];
            tcu_load_bf16<W, VEC>(va, xa + off + c);
            tcu_load_bf16<W, VEC>(vb, xb + off + c);
#pragma unroll
            for (int k = 0; k < W; k++) v[k] = __bfloat162float(__float2bfloat16_rn(va[k] + vb[k]));
            /* exact: v is already bf16-representable */
            tcu_store_bf16<W, VEC>(residual + off + c, v);
        } else {
            tcu_load_bf16<W, VEC>(v, x + c);
        }
#pragma unroll
        for (int k = 0; k < W; k++) s += v[k];
    }
    const float m = tcu_warp_sum(s) / (float)C;

    /* pass 2: biased variance around m */
    float q = 0.0f;
    for (int c = lane * W; c < C; c += 32 * W) {
        float v[W];
        tcu_load_bf16<W, VEC>(v, x + c);
#pragma unroll
        for (int k = 0; k < W; k++) {
            const float d = v[k] - m;
            q += d * d;
        }
    }
    const float r = 1.0f / sqrtf(tcu_warp_sum(q) / (float)C + TSR_LN_EPS);

    /* pass 3: normalise, scale, shift (same expression order as the CPU op) */
    for (int c = lane * W; c < C; c += 32 * W) {
        float v[W], wv[W], o[W];
        tcu_load_bf16<W, VEC>(v, x + c);
        tcu_load_bf16<W, VEC>(wv, w + c);
        if (bias) {
            float bv[W];
            tcu_load_bf16<W, VEC>(bv, bias + c);
#pragma unroll
            for (int k = 0; k < W; k++) o[k] = fmaf((v[k] - m) * r, wv[k], bv[k]);
        } else {
#pragma unroll
            for (int k = 0; k < W; k++) o[k] = (v[k] - m) * r * wv[k];
        }
        tcu_store_bf16<W, VEC>(out + off + c, o);
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = r;
    }
}

/* Picks W/VEC (see the file comment) and launches; `what` names the op in errors. */
template <bool FUSED>
static void ln_forward_launch(const char *what, bf16 *out, float *mean, float *rstd,
                              bf16 *residual, const bf16 *xa, const bf16 *xb, const bf16 *w,
                              const bf16 *bias, int N, int C, cudaStream_t st) {
    TCU_REQUIRE(N >= 0 && C >= 1, what, tcu_msg("need N >= 0 and C >= 1, got N=%d C=%d", N, C));
    TCU_REQUIRE(out && xa && w && (!FUSED || (xb && residual)), what, "a required pointer is NULL");
    if (N == 0) return;
    bool aligned = tcu_aligned16(out) && tcu_aligned16(xa) && tcu_aligned16(w) &&
                   (!bias || tcu_aligned16(bias));
    if (FUSED) aligned = aligned && tcu_aligned16(xb) && tcu_aligned16(residual);
    const unsigned grid = tcu_blocks((size_t)N, LN_FWD_THREADS / 32);
    if (C % 8 == 0 && aligned)
        layernorm_forward_warp_per_row_kernel<8, true, FUSED><<<grid, LN_FWD_THREADS, 0, st>>>(
            out, mean, rstd, residual, xa, xb, w, bias, N, C);
    else if (C % 8 == 0)
        layernorm_forward_warp_per_row_kernel<8, false, FUSED><<<grid, LN_FWD_THREADS, 0, st>>>(
            out, mean, rstd, residual, xa, xb, w, bias, N, C);
    else
        layernorm_forward_warp_per_row_kernel<1, false, FUSED><<<grid, LN_FWD_THREADS, 0, st>>>(
            out, mean, rstd, residual, xa, xb, w, bias, N, C);
    TCU_CHECK_LAUNCH(what);
}

/* out = LN(inp).  out (N,C) bf16; mean, rstd (N) fp32; inp (N,C) bf16; w (C) bf16; b (C) or NULL.
 * One warp per row (layernorm_forward_warp_per_row_kernel). N >= 0, C >= 1. */
void tcu_layernorm_forward(tsr_bf16 *out, float *mean, float *rstd, const tsr_bf16 *inp,
                           const tsr_bf16 *w, const tsr_bf16 *b, int N, int C, tcu_stream s) {
    ln_forward_launch<false>("tcu_layernorm_forward", (bf16 *)out, mean, rstd, nullptr,
                             (const bf16 *)inp, nullptr, (const bf16 *)w, (const bf16 *)b, N, C,
                             (cudaStream_t)s);
}

/* residual = bf16(a + b) (round to nearest even: what tcu_residual_forward writes), out =
 * LN(residual) computed from the rounded residual: equal, bit for bit, to tcu_residual_forward
 * then tcu_layernorm_forward. residual, out (N,C) bf16; a, b (N,C) bf16 (residual may alias a or
 * b); mean, rstd (N) fp32; w (C) bf16; bias (C) or NULL. N >= 0, C >= 1. */
void tcu_residual_layernorm_forward(tsr_bf16 *residual, tsr_bf16 *out, float *mean, float *rstd,
                                    const tsr_bf16 *a, const tsr_bf16 *b, const tsr_bf16 *w,
                                    const tsr_bf16 *bias, int N, int C, tcu_stream s) {
    ln_forward_launch<true>("tcu_residual_layernorm_forward", (bf16 *)out, mean, rstd,
                            (bf16 *)residual, (const bf16 *)a, (const bf16 *)b, (const bf16 *)w,
                            (const bf16 *)bias, N, C, (cudaStream_t)s);
}

/* ---- backward ---------------------------------------------------------------------------- */

/* One row group per block; per row n of the group, in order (norm = (x - mean) * rstd, g = dout):
 *   dinp[n,:] += (w*g - mean(w*g) - norm * mean(w*g*norm)) * rstd      (bf16, read-add-round)
 *   acc_w[:] += g * norm;  acc_b[:] += g   (fp32 column sums of this group, when with_db)
 * then partial[group] = [acc_w | acc_b]. GRADS = false (dw and db frozen): no accumulators,
 * partial unread (may be NULL), acc_smem and with_db ignored; dinp the same statements.
 * dinp, dout, inp (N,C) bf16; w (C) bf16; mean, rstd (N) fp32; partial (P, 2C) fp32 scratch.
 * Launch: grid P = ceil(N / rows), block = ceil(C / W) rounded up to a warp, at most 1024
 * threads (thread t owns columns c = t*W + j*blockDim*W .. +W: the same in every pass, so each
 * column's sums are kept by one thread, in row order: deterministic). Dynamic shared memory
 * 2*C floats when acc_smem (the accumulators), else 0 and the accumulators are partial[group]
 * itself (generic pointer; for C too large for shared memory). Two barriers per row (the
 * block sums of w*g and w*g*norm). Preconditions (host): rows >= 1; VEC: C % 8 == 0, aligned. */
template <int W, bool VEC, bool GRADS>
__global__ void __launch_bounds__(1024)
    layernorm_backward_row_group_kernel(bf16 *dinp, float *partial, const bf16 *dout,
                                        const bf16 *inp, const bf16 *w, const float *mean,
                                        const float *rstd, int N, int C, int rows, int acc_smem,
                                        int with_db) {
    extern __shared__ float ln_acc_smem[]; /* [2C] when acc_smem */
    __shared__ float2 red[32];
    float *part = GRADS ? partial + (size_t)blockIdx.x * 2 * C : nullptr;
    float *acc = acc_smem ? ln_acc_smem : part;
    const int c0 = threadIdx.x * W, step = blockDim.x * W;
    if constexpr (GRADS) {
        for (int c = c0; c < C; c += step) {
#pragma unroll
            for (int k = 0; k < W; k++) {
                acc[c + k] = 0.0f;
                if (with_db) acc[C + c + k] = 0.0f;
            }
        }
    }
    const int n0 = blockIdx.x * rows;
    const int n1 = min(N, n0 + rows);
    for (int n = n0; n < n1; n++) { /* n is block-uniform: every thread reaches the barriers */
        const size_t off = (size_t)n * C;
        const float m = mean[n], r = rstd[n];
        float2 sums = make_float2(0.0f, 0.0f); /* sum of w*g, of w*g*norm */
        for (int c = c0; c < C; c += step) {
            float xv[W], gv[W], wv[W];
            tcu_load_bf16<W, VEC>(xv, inp + off + c);
            tcu_load_bf16<W, VEC>(gv, dout + off + c);
            tcu_load_bf16<W, VEC>(wv, w + c);
#pragma unroll
            for (int k = 0; k < W; k++) {
                const float norm = (xv[k] - m) * r;
                const float dnorm = wv[k] * gv[k];
                sums.x += dnorm;
                sums.y += dnorm * norm;
                if constexpr (GRADS) {
                    acc[c + k] += gv[k] * norm;
                    if (with_db) acc[C + c + k] += gv[k];
                }
            }
        }
        sums = tcu_block_sum2(sums, red);
        const float dmean = sums.x / (float)C, dnmean = sums.y / (float)C;
        for (int c = c0; c < C; c += step) {
            float xv[W], gv[W], wv[W], dv[W];
            tcu_load_bf16<W, VEC>(xv, inp + off + c);
            tcu_load_bf16<W, VEC>(gv, dout + off + c);
            tcu_load_bf16<W, VEC>(wv, w + c);
            tcu_load_bf16<W, VEC>(dv, dinp + off + c);
#pragma unroll
            for (int k = 0; k < W; k++) {
                const float norm = (xv[k] - m) * r;
                dv[k] += (wv[k] * gv[k] - dmean - norm * dnmean) * r;
            }
            tcu_store_bf16<W, VEC>(dinp + off + c, dv);
        }
    }
    if (GRADS && acc_smem) {
        for (int c = c0; c < C; c += step) {
#pragma unroll
            for (int k = 0; k < W; k++) {
                part[c + k] = acc[c + k];
                if (with_db) part[C + c + k] = acc[C + c + k];
            }
        }
    }
}

/* ---- backward, many rows in flight: a warp per row (issue 25, item 1) ------------------------ */

/* LayerNorm (RMS = false) or RMSNorm (RMS = true: mean 0, no db) backward for C <= 32 * 8 * KP,
 * C % 8 == 0, contiguous rows (VEC: 16-byte accesses, every pointer 16-byte aligned; else the
 * same lane mapping with scalar accesses, so the same bits). One row group per block of
 * NB_WARPS warps; warp w takes rows n0 + w, n0 + w + NB_WARPS, ... of the group, each row alone
 * (warp sums: no block barrier per row), norm = (x - mean) * rstd, g = dout:
 *   LN:  dinp[n,:] += (w*g - mean(w*g) - norm * mean(w*g*norm)) * rstd
 *   RMS: dinp[n,:] += (w*g - norm * mean(w*g*norm)) * rstd                 (bf16, read-add-round)
 *   acc_w += g * norm; LN with db: acc_b += g   (fp32, in the lane's registers, row order)
 * then (GRADS) the warps' sums are added in warp order 0..NB_WARPS-1 in shared memory and written
 * as partial row `group` ([acc_w | acc_b], stride = 2C for LN, C for RMS), the row-group
 * kernels' layout, for tcu_norm_param_grad_reduce. Lane l owns the packs of 8 columns
 * c = (j * 32 + l) * 8, j < KP (c < C).
 * dinp, dout, inp (N,C) bf16; w (C) bf16; mean (LN) and rstd (N) fp32; partial (P, stride) fp32.
 * Launch: grid P = ceil(N / rows), block 32 * NB_WARPS, dynamic shared memory stride floats
 * (GRADS; else 0). Deterministic: a column's sum is in row order within a warp, then warp order,
 * then group order, all functions of N.
 * HOLD (tcu_norm_set_hold; issue 25): the row's x, dout and dinp are loaded together at the
 * row's start and kept in registers as bf16 (36 registers at C = 768), so a row costs one trip to
 * memory before its warp sums instead of two (the second pass reloaded x and dout, and could only
 * then load dinp, which may alias an earlier row's stores); the same arithmetic in the same
 * order, so the same bits. */
#define NB_WARPS 8
#define NB_MAX_KP 4 /* C <= 1024 */
template <bool RMS, int KP, bool GRADS, bool VEC, bool HOLD>
__global__ void __launch_bounds__(32 * NB_WARPS, HOLD && VEC && KP <= 3 ? 2 : 1)
    norm_backward_warp_rows_kernel(bf16 *dinp, float *partial, const bf16 *dout, const bf16 *inp,
                                   const bf16 *w, const float *mean, const float *rstd, int N,
                                   int C, int rows, int with_db) {
    extern __shared__ float nb_acc_smem[]; /* [stride] when GRADS */
    constexpr int NACC = RMS ? 1 : 2;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float acc[NACC][KP][8];
#pragma unroll
    for (int a = 0; a < NACC; a++)
#pragma unroll
        for (int j = 0; j < KP; j++)
#pragma unroll
            for (int k = 0; k < 8; k++) acc[a][j][k] = 0.0f;
    const int n0 = blockIdx.x * rows, n1 = min(N, n0 + rows);
    for (int n = n0 + warp; n < n1; n += NB_WARPS) { /* warp-uniform */
        const size_t off = (size_t)n * C;
        const float m = RMS ? 0.0f : mean[n], r = rstd[n];
        float s1 = 0.0f, s2 = 0.0f; /* sum of w*g, of w*g*norm */
        int4 xr[HOLD ? KP : 1], gr[HOLD ? KP : 1], dr[HOLD ? KP : 1]; /* HOLD: the row, as bf16 */
        if constexpr (HOLD) {
#pragma unroll
            for (int j = 0; j < KP; j++) {
                const int c = (j * 32 + lane) * 8;
                if (c >= C) continue;
                xr[j] = tcu_load_raw8<VEC>(inp + off + c);
                gr[j] = tcu_load_raw8<VEC>(dout + off + c);
                dr[j] = tcu_load_raw8<VEC>(dinp + off + c);
            }
        }
#pragma unroll
        for (int j = 0; j < KP; j++) {
            const int c = (j * 32 + lane) * 8;
            if (c >= C) continue;
            float xv[8], gv[8], wv[8];
            if constexpr (HOLD) {
                tcu_unpack_bf16x8(xv, xr[j]);
                tcu_unpack_bf16x8(gv, gr[j]);
            } else {
                tcu_load_bf16<8, VEC>(xv, inp + off + c);
                tcu_load_bf16<8, VEC>(gv, dout + off + c);
            }
            tcu_load_bf16<8, VEC>(wv, w + c);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float norm = (xv[k] - m) * r;
                const float dnorm = wv[k] * gv[k];
                s1 += dnorm;
                s2 += dnorm * norm;
                if constexpr (GRADS) {
                    acc[0][j][k] += gv[k] * norm;
                    if constexpr (!RMS) acc[NACC - 1][j][k] += gv[k];
                }
            }
        }
        const float dmean = RMS ? 0.0f : tcu_warp_sum(s1) / (float)C;
        const float dnmean = tcu_warp_sum(s2) / (float)C;
#pragma unroll
        for (int j = 0; j < KP; j++) { /* the row again: registers (HOLD) or L1 hits */
            const int c = (j * 32 + lane) * 8;
            if (c >= C) continue;
            float xv[8], gv[8], wv[8], dv[8];
            if constexpr (HOLD) {
                tcu_unpack_bf16x8(xv, xr[j]);
                tcu_unpack_bf16x8(gv, gr[j]);
                tcu_unpack_bf16x8(dv, dr[j]);
            } else {
                tcu_load_bf16<8, VEC>(xv, inp + off + c);
                tcu_load_bf16<8, VEC>(gv, dout + off + c);
                tcu_load_bf16<8, VEC>(dv, dinp + off + c);
            }
            tcu_load_bf16<8, VEC>(wv, w + c);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float norm = (xv[k] - m) * r;
                dv[k] += (wv[k] * gv[k] - dmean - norm * dnmean) * r;
            }
            tcu_store_bf16<8, VEC>(dinp + off + c, dv);
        }
    }
    if constexpr (GRADS) {
        const int stride = RMS ? C : 2 * C;
        for (int wi = 0; wi < NB_WARPS; wi++) { /* warp order: a fixed sum per column */
            if (warp == wi) {
#pragma unroll
                for (int a = 0; a < NACC; a++) {
                    if (a == 1 && !with_db) continue;
#pragma unroll
                    for (int j = 0; j < KP; j++) {
                        const int c = (j * 32 + lane) * 8;
                        if (c >= C) continue;
#pragma unroll
                        for (int k = 0; k < 8; k++) {
                            float *dst = &nb_acc_smem[a * C + c + k];
                            *dst = wi == 0 ? acc[a][j][k] : *dst + acc[a][j][k];
                        }
                    }
                }
            }
            __syncthreads();
        }
        float *part = partial + (size_t)blockIdx.x * stride;
        const int width = RMS || !with_db ? C : 2 * C;
        for (int i = threadIdx.x; i < width; i += blockDim.x) part[i] = nb_acc_smem[i];
    }
}

/* the norms whose warp-per-row backward is the HOLD variant (issue 25: tcu_norm_set_hold) */
static int norm_hold = TCU_NORM_HOLD_DEFAULT;

extern "C" void tcu_norm_set_hold(int mask) {
    TCU_REQUIRE(mask >= 0 && mask <= TCU_NORM_HOLD_ALL, "tcu_norm_set_hold",
                tcu_msg("mask = %d: expected 0 ... %d", mask, TCU_NORM_HOLD_ALL));
    norm_hold = mask;
}

extern "C" int tcu_norm_hold(void) { return norm_hold; }

/* The warp-per-row backward when it applies (C % 8 == 0, C <= 1024, contiguous rows; aligned or
 * not, the same bits): launches it into `partial` (P row groups of tcu_norm_rows_per_group rows,
 * the row-group kernels' layout; NULL when !grads) and returns true; else false, having launched
 * nothing. rms: RMSNorm (mean unread, no db). */
bool tcu_norm_backward_warp_rows(bool rms, bf16 *dinp, float *partial, const bf16 *dout,
                                 const bf16 *inp, const bf16 *w, const float *mean,
                                 const float *rstd, int N, int C, bool grads, bool with_db,
                                 cudaStream_t st, const char *what) {
    if (C % 8 != 0 || C > 32 * 8 * NB_MAX_KP) return false;
    const bool vec = tcu_aligned16(dinp) && tcu_aligned16(dout) && tcu_aligned16(inp) &&
                     tcu_aligned16(w);
    const int rows = tcu_norm_rows_per_group(N);
    const int P = (N + rows - 1) / rows;
    const int kp = (C + 255) / 256;
    const size_t dyn = grads ? (size_t)(rms ? C : 2 * C) * sizeof(float) : 0;
    typedef void (*kern_t)(bf16 *, float *, const bf16 *, const bf16 *, const bf16 *,
                           const float *, const float *, int, int, int, int);
#define NB_KERNS(R, G, V, H)                                                                      \
    {norm_backward_warp_rows_kernel<R, 1, G, V, H>, norm_backward_warp_rows_kernel<R, 2, G, V, H>, \
     norm_backward_warp_rows_kernel<R, 3, G, V, H>, norm_backward_warp_rows_kernel<R, 4, G, V, H>}
#define NB_TABLE(H)                                                                               \
    {{{NB_KERNS(false, false, false, H), NB_KERNS(false, false, true, H)},                        \
      {NB_KERNS(false, true, false, H), NB_KERNS(false, true, true, H)}},                         \
     {{NB_KERNS(true, false, false, H), NB_KERNS(true, false, true, H)},                          \
      {NB_KERNS(true, true, false, H), NB_KERNS(true, true, true, H)}}}
    static const kern_t kerns[2][2][2][NB_MAX_KP] = NB_TABLE(false);
    static const kern_t kerns_hold[2][2][2][NB_MAX_KP] = NB_TABLE(true);
#undef NB_TABLE
#undef NB_KERNS
    const bool hold = (norm_hold & (rms ? TCU_NORM_HOLD_RMSNORM : TCU_NORM_HOLD_LAYERNORM)) != 0 &&
                      (kp <= 3 || (norm_hold & TCU_NORM_HOLD_WIDE) != 0);
    const kern_t kern = hold ? kerns_hold[rms][grads][vec][kp - 1]
                             : kerns[rms][grads][vec][kp - 1];
    TCU_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn),
              what);
    kern<<<P, 32 * NB_WARPS, dyn, st>>>(dinp, partial, dout, inp, w, mean, rstd, N, C, rows,
                                        with_db);
    TCU_CHECK_LAUNCH(what);
    return true;
}

/* dw[c] += sum_p partial[p*stride + c];  db[c] += sum_p partial[p*stride + C + c] (when db),
 * p = 0..P-1. dw (C) fp32 or NULL (frozen: its columns summed, not added), db (C) fp32 or NULL,
 * partial (P, stride) fp32 (stride >= 2C with db).
 * Launch: grid ceil(width / LN_RED_COLS), width = C (no db) or 2C; block (LN_RED_COLS,
 * LN_RED_SLICES). Thread (x, y) sums partials y, y + 32, ... of its column in order; thread (x, 0)
 * adds the 32 slice sums in order 0..31: a fixed order, deterministic. */
__global__ void __launch_bounds__(LN_RED_COLS *LN_RED_SLICES)
    layernorm_param_grad_fixed_order_kernel(float *dw, float *db, const float *partial, int P,
                                            int C, size_t stride) {
    __shared__ float sl[LN_RED_SLICES][LN_RED_COLS];
    const int width = db ? 2 * C : C;
    const int col = blockIdx.x * LN_RED_COLS + threadIdx.x;
    float s = 0.0f;
    if (col < width)
        for (int p = threadIdx.y; p < P; p += LN_RED_SLICES) s += partial[(size_t)p * stride + col];
    sl[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < width) {
        float t = 0.0f;
        for (int i = 0; i < LN_RED_SLICES; i++) t += sl[i][threadIdx.x];
        if (col >= C) db[col - C] += t;
        else if (dw) dw[col] += t;
    }
}

void tcu_norm_param_grad_reduce(float *dw, float *db, const float *partial, int P, int C,
                                size_t stride, cudaStream_t st, const char *what) {
    const int width = db ? 2 * C : C;
    const dim3 rblock(LN_RED_COLS, LN_RED_SLICES);
    layernorm_param_grad_fixed_order_kernel<<<tcu_blocks((size_t)width, LN_RED_COLS), rblock, 0,
                                              st>>>(dw, db, partial, P, C, stride);
    TCU_CHECK_LAUNCH(what);
}

/* Rows per group: a function of N only (never of the device or of timing), so the partial sums
 * and the order they are added in, hence dw/db's bits, depend on the inputs alone. */
int tcu_norm_rows_per_group(int N) {
    const int r = (int)(((long long)N + LN_BWD_MAX_GROUPS - 1) / LN_BWD_MAX_GROUPS);
    return r < LN_BWD_MIN_ROWS ? LN_BWD_MIN_ROWS : r;
}

/* The partial-sum scratch: grown on demand, freed by tcu_layernorm_release (tcu_shutdown). */
static float *ln_partial = nullptr;
static size_t ln_partial_bytes = 0;

void tcu_layernorm_release(void) {
    if (ln_partial) tcu_free(ln_partial);
    ln_partial = nullptr;
    ln_partial_bytes = 0;
}

float *tcu_norm_partial_scratch(size_t bytes, const char *what) {
    if (bytes > ln_partial_bytes) {
        if (ln_partial) {
            /* a launch of the previous size may still be reading it, on any stream */
            TCU_CHECK(cudaDeviceSynchronize(), tcu_msg("%s: growing its scratch", what));
            tcu_free(ln_partial);
        }
        ln_partial = (float *)tcu_malloc(bytes, "norm and bias gradient partial sums");
        ln_partial_bytes = bytes;
    }
    return ln_partial;
}

/* dinp (N,C) bf16 +=; dw (C) fp32 += or NULL; db (C) fp32 += or NULL; dout, inp (N,C) bf16;
 * w (C) bf16; mean, rstd (N) fp32 from the forward pass.
 * Two launches: norm_backward_warp_rows_kernel where it applies (C % 8 == 0, C <= 1024,
 * aligned), else layernorm_backward_row_group_kernel (dinp, and P = ceil(N / rows) partial sums
 * of dw/db into the scratch), then layernorm_param_grad_fixed_order_kernel (dw, db +=); with dw
 * and db both NULL (frozen) the first alone, without sums. Deterministic. N >= 0, C >= 1. */
void tcu_layernorm_backward(tsr_bf16 *dinp, float *dw, float *db, const tsr_bf16 *dout,
                            const tsr_bf16 *inp, const tsr_bf16 *w, const float *mean,
                            const float *rstd, int N, int C, tcu_stream s) {
    const char *what = "tcu_layernorm_backward";
    TCU_REQUIRE(N >= 0 && C >= 1, what, tcu_msg("need N >= 0 and C >= 1, got N=%d C=%d", N, C));
    TCU_REQUIRE(dinp && dout && inp && w && mean && rstd, what, "a required pointer is NULL");
    if (N == 0) return;
    const cudaStream_t st = (cudaStream_t)s;
    const int rows = tcu_norm_rows_per_group(N);
    const int P = (N + rows - 1) / rows;
    const bool grads = dw || db;
    float *partial =
        grads ? tcu_norm_partial_scratch((size_t)P * 2 * C * sizeof(float), what) : nullptr;

    const int with_db = db != nullptr;
    if (tcu_norm_backward_warp_rows(false, (bf16 *)dinp, partial, (const bf16 *)dout,
                                    (const bf16 *)inp, (const bf16 *)w, mean, rstd, N, C, grads,
                                    with_db, st, "tcu_layernorm_backward: warp-per-row kernel")) {
        if (grads)
            tcu_norm_param_grad_reduce(dw, db, partial, P, C, (size_t)2 * C, st,
                                       "tcu_layernorm_backward: the fixed-order reduction");
        return;
    }

    const bool w8 = C % 8 == 0;
    const bool vec = w8 && tcu_aligned16(dinp) && tcu_aligned16(dout) && tcu_aligned16(inp) &&
                     tcu_aligned16(w);
    const int W = w8 ? 8 : 1;
    int threads = (int)(((size_t)C / W + 31) / 32 * 32);
    if (threads > 1024) threads = 1024;
    if (threads < 32) threads = 32;

    /* accumulators in shared memory when they fit beside the kernel's static 256 bytes */
    const size_t acc_bytes = (size_t)2 * C * sizeof(float);
    const tcu_context *ctx = tcu_context_get(what);
    const int acc_smem = grads && acc_bytes + 32 * sizeof(float2) <= ctx->smem_optin;
    const size_t dyn = acc_smem ? acc_bytes : 0;
    auto kern = grads ? (vec  ? layernorm_backward_row_group_kernel<8, true, true>
                         : w8 ? layernorm_backward_row_group_kernel<8, false, true>
                              : layernorm_backward_row_group_kernel<1, false, true>)
                      : (vec  ? layernorm_backward_row_group_kernel<8, true, false>
                         : w8 ? layernorm_backward_row_group_kernel<8, false, false>
                              : layernorm_backward_row_group_kernel<1, false, false>);
    /* always set: the kernel's static 256 bytes sit on top of dyn, so a dyn just under 48 KiB
     * (C = 6120..6144) needs the opt-in as much as one over it */
    TCU_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn),
              what);
    kern<<<P, threads, dyn, st>>>((bf16 *)dinp, partial, (const bf16 *)dout, (const bf16 *)inp,
                                  (const bf16 *)w, mean, rstd, N, C, rows, acc_smem, with_db);
    TCU_CHECK_LAUNCH("tcu_layernorm_backward: layernorm_backward_row_group_kernel");

    if (!grads) return;
    tcu_norm_param_grad_reduce(dw, db, partial, P, C, (size_t)2 * C, st,
                               "tcu_layernorm_backward: layernorm_param_grad_fixed_order_kernel");
}
