/* cuda_attention.cu — fused causal attention of cuda_ops.h (FlashAttention-2 style): the maths of
 * kernels/cpu/cpu_attention.c without the (T,T) matrix. tcu_attention_forward,
 * tcu_attention_scratch_bytes, tcu_attention_backward.
 *
 * File-wide conventions (cuda_ops.h):
 *   - qkv (B,T,QKV) bf16, QKV = (NH + 2 KVH) hs, laid out [q heads | k heads | v heads]: query
 *     head h at column h*hs, key head g at NH*hs + g*hs, value head g at (NH+KVH)*hs + g*hs;
 *     grouped-query attention: query head h reads key/value head g = h / (NH/KVH) (KVH = NH:
 *     multi-head, KVH = 1: multi-query); out, dout (B,T,C) with C = NH*hs; lse, D (B,NH,T) fp32;
 *     hs in {32, 64, 128, 256} (one template instance each; 256: Gemma 3, mma.sync only);
 *   - s[i,j] = q_i.k_j * scale - slope_h (i - j), scale = 1/sqrt(hs), allowed for lo(i) <= j <= i,
 *     lo(i) the first index of the run of equal seq ids holding i (0 without seq). Equivalently
 *     j <= i < hi(j), hi(j) one past the end of j's run: the query-major kernels mask with lo of
 *     their rows, the key-major kernel with hi of its keys. Masked scores are -inf, exp gives 0;
 *   - the kernels work in log2 units: x = s * log2(e), p = exp2(x - m); lse is stored in natural
 *     units, lse = (m + log2 l) * ln 2;
 *   - tensor cores: mma.sync m16n8k16 bf16 x bf16 -> fp32 (sm_80 and sm_90a), operands from shared
 *     memory through ldmatrix, P and dS fed back from the accumulators as bf16 A fragments;
 *     or (tcu_attention_set_wgmma, sm_90a, hs 64 and 128) wgmma m64nNk16 on the block's 4 warps as
 *     one warpgroup, tiles in its core-matrix layout: each kernel's WG = true instance, with the
 *     tiles, masks, softmax and gradient code of its 16-rows-a-warp instance; its products, their
 *     grouping and the waits are its own (the kernels' comments);
 *     softmax, masks, dS and every sum in fp32;
 *   - 128 threads per block, 4 warps; each warp owns MS slabs of 16 rows (queries or keys) of
 *     the block's tile and all columns of the other operand's tile, so warps share nothing but
 *     the shared memory tiles. MS = 1 (16 rows a warp) or, for hs <= 64, 2 (32 rows: each B
 *     fragment read from shared memory feeds two slabs' mma; issue 25 item 2; chosen at run time,
 *     tcu_attention_set_warp_rows). Shared rows are padded to hs + 8 bf16 (ldmatrix without bank
 *     conflicts; the WG instances: the core-matrix layout, unpadded); rows past T are zero-filled
 *     (cp.async with source size 0);
 *   - backward ACCUMULATES into dqkv: read bf16, add the fp32 result, round once (TSR_GRAD_SET:
 *     0 + the result, rounded, dqkv unread: the same bits as zeroing dqkv first). Deterministic:
 *     dk, dv by one block per key tile of a key/value head (its group's query heads summed in the
 *     block, in head order), dq by one block per query tile (its key tiles last to first), fixed
 *     loop orders, no floating-point atomics; or (tcu_attention_set_dq_fused) dq added by the
 *     dk/dv blocks in a fixed order, highest key block first: the same bits where the tiles
 *     agree (16 rows a warp, no seq);
 *   - every launch on the caller's stream, checked (TCU_CHECK_LAUNCH); qkv, out, dout, dqkv must
 *     be 16-byte aligned (16-byte loads).
 * Segment bounds: a block needs lo (or hi) of its rows only; the run start of its first row is
 * found by a block-wide backward scan of seq (1024 positions per round), the rest from the tile's
 * own ids in shared memory.
 * Keys past kend (tcu_attention_forward_keys, tcu_attention_backward_keys: kend < T) are masked
 * too: context parallelism's blocks (kernels/cuda/cuda_ring.cu) lay a block's keys out before its
 * queries in one sequence and let the queries see those keys alone. A row that then sees no key
 * gets out 0 and lse -inf. The rows before kend are then keys only: the query tiles start at the
 * tile holding row kend (att_query_base), so a block costs its queries' work, not the causal
 * attention of the keys among themselves too.
 */
#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>

#include "cuda_internal.h"
#include "cuda_ptx.h"
#ifndef TCU_SIMT
#include "tcu_cudnn.h" /* cuDNN's fused attention, where TSR_ATTENTION asks for it */
#endif

#define ATT_THREADS 128 /* 4 warps per block, MS slabs of 16 rows each */
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_SCAN 8      /* seq positions each thread tests per round of a segment scan */

static constexpr float kLog2e = 1.4426950408889634f;
static constexpr float kLn2 = 0.6931471805599453f;

/* The layer's variants as the kernels take them (ops.h tsr_attn_var; docs/cuda.md "Attention
 * variants"): window W (0: none; row i sees keys from i - W + 1, folded into the rows' segment
 * bounds, so the blocks left of the band are never visited), the soft cap (0: none; the logit is
 * cap tanh(s scale / cap)) with the scale it needs, sinks (NH) bf16 on the device or NULL (the
 * forward adds e^sink to each row's denominator, so lse counts it). */
struct att_var {
    int window;
    float cap, scale;
    const bf16 *sinks;
};

/* Tile sizes per head size and slabs per warp (MS). A block owns ROWS = 64 MS rows. Forward: BR
 * query rows x BC keys per step (32 at hs 256: O's 128 fp32 a thread beside S). Backward dk/dv: BK
 * keys per block, BQ queries per step (32 at hs >= 128, or with MS = 2, keeps dk, dv, P, dP in
 * registers). Backward dq: BR query rows per block, BC keys per step (32 with MS = 2 or at hs
 * 256, for the same reason). No tile spills under ptxas -v, sm_90a and sm_80 (docs/cuda.md). */
template <int HS, int MS> struct att_tiles {
    static_assert(MS == 1 || (MS == 2 && HS <= 64), "32 rows a warp only for hs <= 64 (registers)");
    static constexpr int LD = HS + 8; /* shared row stride in bf16 */
    static constexpr int ROWS = 16 * MS * ATT_WARPS;
    static constexpr int FWD_BR = ROWS, FWD_BC = HS == 256 ? 32 : 64;
    static constexpr int KV_BK = ROWS, KV_BQ = HS >= 128 || MS == 2 ? 32 : 64;
    static constexpr int DQ_BR = ROWS, DQ_BC = HS == 256 || MS == 2 ? 32 : 64;
    /* dk/dv: the blocks a key block takes, each owning HS / KV_NS columns of its dk and dv (2 at
     * hs 256: 16 keys x 256 columns of both do not fit a thread's 255 registers; each part
     * recomputes P^T and dP^T over the whole hs) */
    static constexpr int KV_NS = HS == 256 ? 2 : 1, KV_NC = HS / KV_NS;
    static_assert(128 % FWD_BR == 0 && 128 % KV_BQ == 0 && 128 % DQ_BR == 0,
                  "query tiles dividing 128 rows (tcu_attention_keys_row0)");
    static constexpr size_t fwd_smem = (size_t)(FWD_BR + 2 * FWD_BC) * LD * sizeof(bf16);
    static constexpr size_t kv_smem = (size_t)(2 * KV_BK + 4 * KV_BQ) * LD * sizeof(bf16);
    static constexpr size_t dq_smem = (size_t)(2 * DQ_BR + 2 * DQ_BC) * LD * sizeof(bf16);
    /* the fused dq (tcu_attention_set_dq_fused): the dK/dV kernel's dS^T tile (BK keys x BQ
     * queries, stride DS_LD) in shared memory after its other tiles; its BQ x HS product dS K
     * split over the warps as RS slabs of 16 query rows x CP parts of NCOL columns */
    static constexpr int DS_LD = KV_BQ + 8, RS = KV_BQ / 16, CP = ATT_WARPS / RS, NCOL = HS / CP;
    static_assert(RS * CP == ATT_WARPS && NCOL % 16 == 0, "whole warps, whole 16-column pairs");
    static constexpr size_t kv_fused_smem = kv_smem + (size_t)KV_BK * DS_LD * sizeof(bf16);
    /* the wgmma kernels' (MS = 1): the same tiles unpadded, in wgmma's core-matrix layout */
    static constexpr size_t fwd_smem_cm = (size_t)(FWD_BR + 2 * FWD_BC) * HS * sizeof(bf16);
    static constexpr size_t kv_smem_cm = (size_t)(2 * KV_BK + 4 * KV_BQ) * HS * sizeof(bf16);
    static constexpr size_t dq_smem_cm = (size_t)(2 * DQ_BR + 2 * DQ_BC) * HS * sizeof(bf16);
};

/* ---- bf16 packing ------------------------------------------------------------------------- */

/* two fp32 -> one bf16x2 register, lo in the low half (round to nearest even) */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}

/* the accumulator tiles p (16 x 8NT of a warp) as the bf16 A fragment of k16 step kc: n-tiles
 * 2kc, 2kc+1 of the accumulator layout are k-block kc of the A layout (mma.sync's and wgmma's
 * alike) */
template <int NT>
__device__ __forceinline__ void afrag_of(uint32_t (&a)[4], const float (&p)[NT][4], int kc) {
    a[0] = pack_bf16(p[2 * kc][0], p[2 * kc][1]);
    a[1] = pack_bf16(p[2 * kc][2], p[2 * kc][3]);
    a[2] = pack_bf16(p[2 * kc + 1][0], p[2 * kc + 1][1]);
    a[3] = pack_bf16(p[2 * kc + 1][2], p[2 * kc + 1][3]);
}

/* ---- warp-level tile products ------------------------------------------------------------ */

/* acc[m] (16 x 8NN) += A_m B for m < MS, with A_m the 16 rows r0 + 16m.. of sa (16 x KD,
 * row-major, stride LD) and B[k][n] = sb[n][k] (sb: 8NN rows of KD, stride LD): S = Q K^T,
 * dP = dO V^T and their transposes. Each B fragment is read once for the MS slabs. */
template <int MS, int NN, int KD, int LD>
__device__ __forceinline__ void warp_mma_rows_rowsT(float (&acc)[MS][NN][4], const bf16 *sa,
                                                    int r0, const bf16 *sb, int lane) {
    static_assert(NN % 2 == 0 && KD % 16 == 0, "whole 16x16 fragments");
    /* A: matrices (rows +0, cols +0), (+8, +0), (+0, +8), (+8, +8) -> a0..a3 */
    const bf16 *pa = sa + (r0 + (lane & 15)) * LD + ((lane >> 4) << 3);
    /* B: matrices (n +0, k +0), (n +0, k +8), (n +8, k +0), (n +8, k +8) -> b0, b1 of n-tile
     * 2np, b0, b1 of n-tile 2np+1 */
    const bf16 *pb = sb + ((lane & 7) + ((lane >> 4) << 3)) * LD + (((lane >> 3) & 1) << 3);
#pragma unroll
    for (int kk = 0; kk < KD / 16; kk++) {
        uint32_t a[MS][4];
#pragma unroll
        for (int m = 0; m < MS; m++) ldsm_x4(a[m], pa + m * 16 * LD + kk * 16);
#pragma unroll
        for (int np = 0; np < NN / 2; np++) {
            uint32_t b[4];
            ldsm_x4(b, pb + np * 16 * LD + kk * 16);
#pragma unroll
            for (int m = 0; m < MS; m++) {
                mma_bf16(acc[m][2 * np], a[m], b[0], b[1]);
                mma_bf16(acc[m][2 * np + 1], a[m], b[2], b[3]);
            }
        }
    }
}

/* acc[m] (16 x 8NN) += P_m sb for m < MS, with P_m (16 x KP) the accumulator tiles p[m] (KP/8
 * n-tiles of 8 columns, rounded to bf16) and sb (KP rows x 8NN columns, row-major, stride LD):
 * O += P V, dQ += dS K, dV += P^T dO, dK += dS^T Q. Each B fragment is read once for the MS
 * slabs. */
template <int MS, int NN, int KP, int LD>
__device__ __forceinline__ void warp_mma_regs_rows(float (&acc)[MS][NN][4],
                                                   const float (&p)[MS][KP / 8][4],
                                                   const bf16 *sb, int lane) {
    static_assert(NN % 2 == 0 && KP % 16 == 0, "whole 16x16 fragments");
    /* B (.trans): matrices (k +0, n +0), (k +8, n +0), (k +0, n +8), (k +8, n +8) -> b0, b1 of
     * n-tile 2np, b0, b1 of n-tile 2np+1 */
    const bf16 *pb = sb + (lane & 15) * LD + ((lane >> 4) << 3);
#pragma unroll
    for (int kc = 0; kc < KP / 16; kc++) {
        uint32_t a[MS][4];
#pragma unroll
        for (int m = 0; m < MS; m++) afrag_of<KP / 8>(a[m], p[m], kc);
#pragma unroll
        for (int np = 0; np < NN / 2; np++) {
            uint32_t b[4];
            ldsm_x4_trans(b, pb + kc * 16 * LD + np * 16);
#pragma unroll
            for (int m = 0; m < MS; m++) {
                mma_bf16(acc[m][2 * np], a[m], b[0], b[1]);
                mma_bf16(acc[m][2 * np + 1], a[m], b[2], b[3]);
            }
        }
    }
}

/* ---- warpgroup tile products (sm_90a wgmma; the kernels' WG instances) --------------------- */

/* A tile of load_rows_cm_async's layout (row r's 16-byte chunk c at (r/8) HS*16 + (r%8) 16 + c 128)
 * as a wgmma operand: K-major over hs (the A or B of a product over hs: the chunks, adjacent in K,
 * 128 bytes apart; the row groups, adjacent in M or N, HS*16), or MN-major over its rows (the B of
 * a product over the rows: the row groups, adjacent in K, HS*16 apart; the chunks, adjacent in N,
 * 128). Which stride goes in which descriptor field is cuda_ptx.h's (wgmma_desc_kmajor,
 * wgmma_desc_mnmajor), shared with test_wgmma_gpu. */
template <int HS> __device__ __forceinline__ uint64_t wg_desc_kmajor(const bf16 *tile) {
    return wgmma_desc_kmajor(tile, 128, HS * 16);
}
template <int HS> __device__ __forceinline__ uint64_t wg_desc_mnmajor(const bf16 *tile) {
    return wgmma_desc_mnmajor(tile, HS * 16, 128);
}

/* acc (64 x N of the warpgroup) = A B^T over HS: A and B tiles in shared memory, K-major over hs
 * (descriptors with the hs chunks 128 bytes apart); issued, not committed */
template <int N, int HS>
__device__ __forceinline__ void wg_smem_products(float (&acc)[N / 8][4], uint64_t desc_a,
                                                 uint64_t desc_b) {
#pragma unroll
    for (int ks = 0; ks < HS / 16; ks++)
        wgmma_ss<N>(acc, desc_a + ks * 2 * 128 / 16, desc_b + ks * 2 * 128 / 16, ks > 0);
}

/* acc (64 x HS) += P B over K: P the accumulator tiles p (16 x K of each warp) as bf16 A
 * fragments into pa, which must stay unchanged until the wait; B a tile in shared memory, MN-major
 * (its rows are K: row groups HS*16 bytes apart). Fenced, issued and committed, not waited for. */
template <int HS, int K>
__device__ __forceinline__ void wg_regs_product(float (&acc)[HS / 8][4], uint32_t (&pa)[K / 16][4],
                                                const float (&p)[K / 8][4], uint64_t desc_b) {
#pragma unroll
    for (int kc = 0; kc < K / 16; kc++) afrag_of<K / 8>(pa[kc], p, kc);
    wgmma_fence_operand(acc);
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < K / 16; kc++)
        wgmma_rs_mn<HS>(acc, pa[kc], desc_b + kc * 2 * HS * 16 / 16, 1);
    wgmma_commit();
}

/* ---- block-level helpers ----------------------------------------------------------------- */

/* rows r0..r0+ROWS-1 of one head (g: row 0 of the head, row stride ld elements, HS columns) ->
 * s (stride HS + 8), asynchronously; rows >= T are zero-filled. All threads of the block. */
template <int ROWS, int HS>
__device__ __forceinline__ void load_rows_async(bf16 *s, const bf16 *g, size_t ld, int r0,
                                                int T) {
    constexpr int CPR = HS / 8, TOTAL = ROWS * CPR; /* 16-byte chunks per row, in all */
    static_assert(TOTAL % ATT_THREADS == 0, "whole rounds of chunks");
#pragma unroll
    for (int k = 0; k < TOTAL / ATT_THREADS; k++) {
        const int c = threadIdx.x + k * ATT_THREADS, r = c / CPR, col = (c % CPR) * 8;
        const int gr = r0 + r;
        const bool ok = gr < T;
        cp_async16(s + r * (HS + 8) + col, g + (size_t)(ok ? gr : 0) * ld + col, ok ? 16 : 0);
    }
}

/* Start of the run holding p (0 <= p < T): the largest b in [1, p] with sq[b] != sq[b-1], else 0.
 * All threads of the block call it (barriers inside; the result is the same in every thread).
 * s_red: ATT_WARPS ints of shared memory. */
__device__ int segment_start(const int32_t *sq, int p, int *s_red) {
    for (int top = p; top >= 1; top -= ATT_THREADS * ATT_SCAN) {
        const int first = top - (int)threadIdx.x * ATT_SCAN; /* tests first, first-1, .. */
        int best = -1;
#pragma unroll
        for (int k = 0; k < ATT_SCAN; k++) {
            const int q = first - k;
            if (q >= 1 && sq[q] != sq[q - 1]) best = max(best, q); /* independent loads */
        }
        if (__syncthreads_or(best >= 0)) {
            best = __reduce_max_sync(0xffffffffu, best);
            if ((threadIdx.x & 31) == 0) s_red[threadIdx.x >> 5] = best;
            __syncthreads();
            int r = s_red[0];
#pragma unroll
            for (int w = 1; w < ATT_WARPS; w++) r = max(r, s_red[w]);
            return r;
        }
    }
    return 0;
}

/* End of the run holding p (0 <= p < T): the smallest b in [p+1, T-1] with sq[b] != sq[b-1],
 * else T. All threads of the block, as segment_start. */
__device__ int segment_end(const int32_t *sq, int p, int T, int *s_red) {
    for (int bot = p + 1; bot < T; bot += ATT_THREADS * ATT_SCAN) {
        const int first = bot + (int)threadIdx.x * ATT_SCAN; /* tests first, first+1, .. */
        int best = INT_MAX;
#pragma unroll
        for (int k = 0; k < ATT_SCAN; k++) {
            const int q = first + k;
            if (q < T && sq[q] != sq[q - 1]) best = min(best, q);
        }
        if (__syncthreads_or(best != INT_MAX)) {
            best = __reduce_min_sync(0xffffffffu, best);
            if ((threadIdx.x & 31) == 0) s_red[threadIdx.x >> 5] = best;
            __syncthreads();
            int r = s_red[0];
#pragma unroll
            for (int w = 1; w < ATT_WARPS; w++) r = min(r, s_red[w]);
            return r;
        }
    }
    return T;
}

/* s_lo[r] = lo(min(i0 + r, T-1)) for r < R (rows past T get the last row's bound), sq the ids of
 * this sequence or NULL (lo = 0); with a window W > 0, lo(i) >= i - W + 1 (the band). Ends with a
 * barrier. s_seq: R ints of shared memory. */
template <int R>
__device__ void segment_starts(int *s_lo, int *s_seq, int *s_red, const int32_t *sq, int i0,
                               int T, int W) {
    static_assert(R <= ATT_THREADS, "one row per thread");
    const int tid = threadIdx.x;
    /* a window moves each row's first key up to its row - W + 1 (rows past T: T - 1's) */
    const int band = W > 0 ? min(i0 + tid, T - 1) - W + 1 : 0;
    if (!sq) {
        if (tid < R) s_lo[tid] = max(0, band);
        __syncthreads();
        return;
    }
    const int lo0 = segment_start(sq, i0, s_red);
    if (tid < R) s_seq[tid] = sq[min(i0 + tid, T - 1)];
    __syncthreads();
    if (tid < R) {
        int lo = lo0; /* the last boundary in (i0, i0 + tid], else lo(i0) */
        for (int k = tid; k >= 1; k--)
            if (s_seq[k] != s_seq[k - 1]) {
                lo = i0 + k;
                break;
            }
        s_lo[tid] = max(lo, band);
    }
    __syncthreads();
}

/* s_hi[r] = hi(min(j0 + r, T-1)) for r < R, hi(j) one past the end of j's run (T without seq);
 * with a window W > 0, hi(j) <= j + W (the band).
 * Ends with a barrier. */
template <int R>
__device__ void segment_ends(int *s_hi, int *s_seq, int *s_red, const int32_t *sq, int j0, int T,
                             int W) {
    static_assert(R <= ATT_THREADS, "one row per thread");
    const int tid = threadIdx.x;
    /* a window ends each key's rows at its key + W (keys past T: T - 1's) */
    const int band = W > 0 ? min(j0 + tid, T - 1) + W : T;
    if (!sq) {
        if (tid < R) s_hi[tid] = min(T, band);
        __syncthreads();
        return;
    }
    const int hil = segment_end(sq, min(j0 + R - 1, T - 1), T, s_red);
    if (tid < R) s_seq[tid] = sq[min(j0 + tid, T - 1)];
    __syncthreads();
    if (tid < R) {
        int hi = hil; /* the first boundary in (j0 + tid, j0 + R), else hi of the tile's last key */
        for (int k = tid + 1; k < R; k++)
            if (s_seq[k] != s_seq[k - 1]) {
                hi = j0 + k;
                break;
            }
        s_hi[tid] = min(hi, band);
    }
    __syncthreads();
}

/* The backward's logit in log2 units, s * sl2 - slope2 (i - j) - lse2 (ij = i - j, lse2 = lse
 * log2(e)), with one explicit fma: the dk/dv and dq kernels both recompute it, and a compiler free
 * to contract each site its own way could give them different bits (the fused dq's identity with
 * the dq kernel needs the same dS in both). */
__device__ __forceinline__ float att_bwd_logit(float s, float sl2, float slope2, int ij,
                                               float lse2, const att_var &v) {
    if (v.cap > 0.0f)
        return (v.cap * kLog2e * tanhf(s * v.scale / v.cap) - slope2 * (float)ij) - lse2;
    return fmaf(s, sl2, -(slope2 * (float)ij)) - lse2;
}

/* The forward's logit in log2 units before the mask: s sl2 - slope2 (i - j), or with a soft cap
 * cap tanh(s scale / cap) log2(e) - slope2 (i - j) (cap, then ALiBi: cpu_attention.c's order) */
__device__ __forceinline__ float att_fwd_logit(float s, float sl2, float slope2, int ij,
                                               const att_var &v) {
    if (v.cap > 0.0f) return v.cap * kLog2e * tanhf(s * v.scale / v.cap) - slope2 * (float)ij;
    return s * sl2 - slope2 * (float)ij;
}

/* A soft cap's derivative 1 - t^2, t = tanh(s scale / cap), at a probability p = exp2(x - lse2)
 * of the backward: neither kernel keeps s beside p, so t comes back from p (cap log2(e) t =
 * log2 p + lse2 + slope2 (i - j)); one rule for the dk/dv and the dq kernels, so the fused dq's
 * dS is the dq kernel's. 0 where p is 0 (its dS is 0 whatever the factor). */
__device__ __forceinline__ float att_cap_grad(float p, float lse2, float slope2, int ij,
                                              const att_var &v) {
    if (!(p > 0.0f)) return 0.0f;
    const float t = (log2f(p) + lse2 + slope2 * (float)ij) / (v.cap * kLog2e);
    return 1.0f - t * t;
}

/* p[0], p[1] += x, y (bf16 pair: read, add in fp32, round once); set: p[0], p[1] = 0 + x, 0 + y
 * (p unread; the bits of += on zeros, -0 included); p 4-byte aligned */
__device__ __forceinline__ void add_bf16x2(bf16 *p, float x, float y, bool set) {
    __nv_bfloat162 *q = reinterpret_cast<__nv_bfloat162 *>(p);
    const float2 f = set ? make_float2(0.0f, 0.0f) : __bfloat1622float2(*q);
    *q = __floats2bfloat162_rn(f.x + x, f.y + y);
}

/* This thread's rows in each of its warp's MS slabs of a tile (i0: the tile's first row; r0: the
 * warp's first row in it; g = lane / 4): a[m] (accumulator elements 0, 1) and b[m] = a[m] + 8
 * (elements 2, 3), with their segment bounds from the tile's s_bound (s_lo or s_hi). */
template <int MS>
__device__ __forceinline__ void slab_rows(int (&a)[MS], int (&b)[MS], int (&bound_a)[MS],
                                          int (&bound_b)[MS], const int *s_bound, int i0, int r0,
                                          int g) {
#pragma unroll
    for (int m = 0; m < MS; m++) {
        const int ra = r0 + 16 * m + g;
        a[m] = i0 + ra, b[m] = a[m] + 8, bound_a[m] = s_bound[ra], bound_b[m] = s_bound[ra + 8];
    }
}

/* Row 0 of sequence b of query head h and of the key and value heads it reads (g = h / (NH/KVH)),
 * in qkv (B,T,QKV); rows are QKV elements apart. */
__device__ __forceinline__ void head_rows(const bf16 *&q, const bf16 *&k, const bf16 *&v,
                                          const bf16 *qkv, int b, int T, int h, int NH, int KVH,
                                          int hs) {
    const size_t ld = (size_t)(NH + 2 * KVH) * hs;
    const int g = h / (NH / KVH);
    const bf16 *row = qkv + (size_t)b * T * ld;
    q = row + (size_t)h * hs;
    k = row + (size_t)(NH + g) * hs;
    v = row + (size_t)(NH + KVH + g) * hs;
}

/* ---- forward ----------------------------------------------------------------------------- */

/* One key tile's online-softmax step of the forward kernels, for the MS slabs of this thread's
 * warp: s (the tile's q.k, BC/8 n-tiles in the accumulator layout) becomes p = exp2(x - m) in
 * place, with x = s sl2 - slope2 (i - j) masked to lo <= j <= i (no mask when full: the tile lies
 * left of the diagonal, right of every row's segment start and before kend); the running maxima m and this
 * thread's column sums l of its rows a (elements 0, 1) and b (2, 3) are updated and o (NO n-tiles)
 * rescaled. v: the soft cap (att_fwd_logit). */
template <int MS, int BC, int NO>
__device__ __forceinline__ void
flash_softmax_tile(float (&s)[MS][BC / 8][4], float (&o)[MS][NO][4], float (&m_a)[MS],
                   float (&m_b)[MS], float (&l_a)[MS], float (&l_b)[MS], const int (&ia)[MS],
                   const int (&ib)[MS], const int (&lo_a)[MS], const int (&lo_b)[MS], int j0,
                   bool full, float sl2, float slope2, int kend, int t4, const att_var &v) {
    /* mask, scale, ALiBi; every (i, j) allowed when the tile lies left of the diagonal and
     * right of every row's segment start (columns past T lie right of the diagonal) */
#pragma unroll
    for (int m = 0; m < MS; m++) {
        float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = j0 + nt * 8 + 2 * t4 + (e & 1), i = e < 2 ? ia[m] : ib[m];
                const int lo = e < 2 ? lo_a[m] : lo_b[m];
                float x = att_fwd_logit(s[m][nt][e], sl2, slope2, i - j, v);
                if (!full && (j > i || j < lo || j >= kend)) x = -INFINITY;
                s[m][nt][e] = x;
                if (e < 2)
                    mx_a = fmaxf(mx_a, x);
                else
                    mx_b = fmaxf(mx_b, x);
            }
        /* a row's 8 columns of each n-tile are spread over the 4 threads of a quad */
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
        const float mn_a = fmaxf(m_a[m], mx_a), mn_b = fmaxf(m_b[m], mx_b);
        /* a row with nothing allowed so far keeps m = -inf: subtract 0 instead (exp2(-inf) =
         * 0, never -inf - -inf) */
        const float mu_a = mn_a == -INFINITY ? 0.0f : mn_a;
        const float mu_b = mn_b == -INFINITY ? 0.0f : mn_b;
        const float al_a = exp2f(m_a[m] - mu_a), al_b = exp2f(m_b[m] - mu_b);
        m_a[m] = mn_a;
        m_b[m] = mn_b;
        float ps_a = 0.0f, ps_b = 0.0f;
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++) {
            s[m][nt][0] = exp2f(s[m][nt][0] - mu_a);
            s[m][nt][1] = exp2f(s[m][nt][1] - mu_a);
            s[m][nt][2] = exp2f(s[m][nt][2] - mu_b);
            s[m][nt][3] = exp2f(s[m][nt][3] - mu_b);
            ps_a += s[m][nt][0] + s[m][nt][1];
            ps_b += s[m][nt][2] + s[m][nt][3];
        }
        l_a[m] = l_a[m] * al_a + ps_a;
        l_b[m] = l_b[m] * al_b + ps_b;
#pragma unroll
        for (int dn = 0; dn < NO; dn++) {
            o[m][dn][0] *= al_a;
            o[m][dn][1] *= al_a;
            o[m][dn][2] *= al_b;
            o[m][dn][3] *= al_b;
        }
    }
}

/* A sink (log2 units, sk) joins a row's denominator: its maximum m becomes max(m, sk), its sum
 * l (quad-summed) l 2^(m - m') + 2^(sk - m'); *w the factor its o then takes, 2^(m - m'). */
__device__ __forceinline__ void flash_sink(float &m, float &l, float &w, float sk) {
    const float mn = fmaxf(m, sk);
    w = exp2f(m - mn); /* m = -inf (no key seen): 0 */
    l = l * w + exp2f(sk - mn);
    m = mn;
}

/* The forward kernels' end: out rows ia, ib (this thread's of each slab; rows >= T skipped) =
 * o / l, lse = (m + log2 l) ln 2, the row sums l first summed over the quad's 4 threads; with
 * sinks (NH bf16, natural units, or NULL) head h's sink joins each row's sum first (flash_sink). */
template <int MS, int HS>
__device__ __forceinline__ void
flash_store_rows(bf16 *out, float *lse, const float (&o)[MS][HS / 8][4], float (&m_a)[MS],
                 float (&m_b)[MS], const float (&l_a)[MS], const float (&l_b)[MS],
                 const int (&ia)[MS], const int (&ib)[MS], int b, int h, int T, int NH, int t4,
                 const bf16 *sinks) {
    const int C = NH * HS;
#pragma unroll
    for (int m = 0; m < MS; m++) {
        float la = l_a[m], lb = l_b[m];
        la += __shfl_xor_sync(0xffffffffu, la, 1);
        la += __shfl_xor_sync(0xffffffffu, la, 2);
        lb += __shfl_xor_sync(0xffffffffu, lb, 1);
        lb += __shfl_xor_sync(0xffffffffu, lb, 2);
        float wa = 1.0f, wb = 1.0f;
        if (sinks) {
            const float sk = __bfloat162float(sinks[h]) * kLog2e;
            flash_sink(m_a[m], la, wa, sk);
            flash_sink(m_b[m], lb, wb, sk);
        }
        /* a row < T saw its diagonal, so l >= 1, unless keys past kend are masked: a row that
         * saw none writes 0 (and lse -inf) */
        const float inv_a = la > 0.0f ? wa / la : 0.0f, inv_b = lb > 0.0f ? wb / lb : 0.0f;
        bf16 *oa = out + ((size_t)b * T + ia[m]) * C + (size_t)h * HS + 2 * t4;
        bf16 *ob = oa + 8 * (size_t)C;
#pragma unroll
        for (int dn = 0; dn < HS / 8; dn++) {
            if (ia[m] < T)
                *reinterpret_cast<__nv_bfloat162 *>(oa + dn * 8) =
                    __floats2bfloat162_rn(o[m][dn][0] * inv_a, o[m][dn][1] * inv_a);
            if (ib[m] < T)
                *reinterpret_cast<__nv_bfloat162 *>(ob + dn * 8) =
                    __floats2bfloat162_rn(o[m][dn][2] * inv_b, o[m][dn][3] * inv_b);
        }
        if (t4 == 0) {
            float *lbh = lse + ((size_t)b * NH + h) * T;
            if (ia[m] < T) lbh[ia[m]] = (m_a[m] + log2f(la)) * kLn2;
            if (ib[m] < T) lbh[ib[m]] = (m_b[m] + log2f(lb)) * kLn2;
        }
    }
}

/* rows r0..r0+ROWS-1 of one head (as load_rows_async) -> s in wgmma's core-matrix layout without
 * swizzle: row r's 16-byte chunk c (columns 8c..8c+7) at byte (r/8) HS*16 + (r%8) 16 + c 128, so
 * that each 8 rows x 8 columns is one 128-byte core matrix, the chunks of a row group 128 bytes
 * apart and the row groups HS*16. 8 consecutive threads fill one core matrix (contiguous: no bank
 * conflict), a warp 8 rows x 4 chunks (64 bytes of each row from global memory). */
template <int ROWS, int HS>
__device__ __forceinline__ void load_rows_cm_async(bf16 *s, const bf16 *g, size_t ld, int r0,
                                                   int T) {
    constexpr int CPR = HS / 8, TOTAL = ROWS * CPR;
    static_assert(TOTAL % ATT_THREADS == 0 && ROWS % 8 == 0, "whole rounds, whole row groups");
#pragma unroll
    for (int k = 0; k < TOTAL / ATT_THREADS; k++) {
        const int c = threadIdx.x + k * ATT_THREADS, r8 = c & 7, ch = (c >> 3) % CPR;
        const int r = (c >> 3) / CPR * 8 + r8, gr = r0 + r;
        const bool ok = gr < T;
        const bf16 *src = g + (size_t)(ok ? gr : 0) * ld + ch * 8;
        cp_async16(s + (r >> 3) * HS * 8 + r8 * 8 + ch * 64, src, ok ? 16 : 0);
    }
}

/* a tile as the kernel's products read it: rows padded to HS + 8 for ldmatrix (mma.sync), or
 * wgmma's core-matrix layout (WG) */
template <bool WG, int ROWS, int HS>
__device__ __forceinline__ void load_tile_async(bf16 *s, const bf16 *g, size_t ld, int r0, int T) {
    if constexpr (WG)
        load_rows_cm_async<ROWS, HS>(s, g, ld, r0, T);
    else
        load_rows_async<ROWS, HS>(s, g, ld, r0, T);
}

/* out[b,i,h*HS..] = sum_j softmax_j(s[i,j]) v_j, lse[b,h,i] = log sum_j exp s[i,j].
 * Flash (online softmax) over key tiles, tensor-core S = Q K^T and O += P V.
 * Grid (ceil(T/BR), NH, B), last query tile first (the longest rows start first); 128 threads;
 * dynamic shared memory att_tiles<HS, MS>::fwd_smem (Q, K, V tiles; fwd_smem_cm with WG). Key
 * tiles start at lo of the tile's first row and end at its last row; K of the next tile loads
 * while P V runs, V of the next tile while the next S runs. sl2 = scale * log2(e).
 * WG (issue 25 item 2; sm_90a, MS = 1, hs 64 or 128): the two products on wgmma, the block's 4
 * warps one warpgroup (warp w owns rows 16w..16w+15 of the accumulator as with mma.sync, so the
 * softmax is the same code): S = Q K^T with Q and K from shared memory (K-major: the hs chunks
 * 128 bytes apart, lbo 128, sbo HS*16), O += P V with P from registers (the accumulator of S as
 * bf16 A fragments) and V from shared memory as an MN-major B (keys are K: lbo HS*16; hs is N:
 * sbo 128). Each product is waited for before its result is used: the warpgroup's products
 * overlap other blocks' softmax, not its own (FlashAttention-3's ping-pong and its producer warps
 * with TMA are the next step, docs/cuda.md). */
/* The first query row of the forward's and the dq kernel's tiles of BR rows: 0, or with kend < T
 * the tile holding row kend (the rows before it are keys only; those of the tile are computed and
 * unused). The kernels' grids (att_query_tiles) and their rows follow it. */
__device__ __forceinline__ int att_query_base(int kend, int T, int BR) {
    return kend < T ? kend / BR * BR : 0;
}

template <int HS, int MS, bool WG>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_forward_flash_kernel(bf16 *__restrict__ out, float *__restrict__ lse,
                                   const bf16 *__restrict__ qkv, const float *__restrict__ slopes,
                                   const int32_t *__restrict__ seq, int T, int kend, int NH,
                                   int KVH, float sl2, att_var av) {
    using Tl = att_tiles<HS, MS>;
    constexpr int BR = Tl::FWD_BR, BC = Tl::FWD_BC, LD = WG ? HS : Tl::LD; /* a tile row */
    static_assert(BR == 16 * MS * ATT_WARPS, "MS 16-row slabs per warp");
    static_assert(!WG || (MS == 1 && ATT_THREADS == 128 && (HS == 64 || HS == 128)),
                  "wgmma: one warpgroup of 64 rows; its shapes");
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *sQ = reinterpret_cast<bf16 *>(att_smem), *sK = sQ + BR * LD, *sV = sK + BC * LD;
    __shared__ int s_lo[BR], s_seq[BR], s_red[ATT_WARPS];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    const int i0 = att_query_base(kend, T, BR) + (gridDim.x - 1 - blockIdx.x) * BR;
    const int h = blockIdx.y, b = blockIdx.z;
    const size_t ld = (size_t)(NH + 2 * KVH) * HS;
    const bf16 *q, *k, *v;
    head_rows(q, k, v, qkv, b, T, h, NH, KVH, HS);

    load_tile_async<WG, BR, HS>(sQ, q, ld, i0, T);
    cp_async_commit();
    segment_starts<BR>(s_lo, s_seq, s_red, seq ? seq + (size_t)b * T : nullptr, i0, T, av.window);
    const int jstart = s_lo[0], lo_max = s_lo[BR - 1], ilast = min(i0 + BR, T) - 1;
    const int jlast = min(ilast, kend - 1); /* (no tile: every row's keys lie past kend) */
    const int ntiles = jlast >= jstart ? (jlast - jstart) / BC + 1 : 0;
    load_tile_async<WG, BC, HS>(sK, k, ld, jstart, T);
    cp_async_commit();
    load_tile_async<WG, BC, HS>(sV, v, ld, jstart, T);
    cp_async_commit();
    [[maybe_unused]] uint64_t dq = 0, dk = 0, dv = 0;
    if constexpr (WG)
        dq = wg_desc_kmajor<HS>(sQ), dk = wg_desc_kmajor<HS>(sK), dv = wg_desc_mnmajor<HS>(sV);

    /* this thread's rows, per slab m: ia (accumulator elements 0, 1) and ib = ia + 8 (2, 3) */
    const int r0 = warp * 16 * MS;
    int ia[MS], ib[MS], lo_a[MS], lo_b[MS];
    slab_rows<MS>(ia, ib, lo_a, lo_b, s_lo, i0, r0, g);
    const float slope2 = slopes ? slopes[h] * kLog2e : 0.0f;
    float o[MS][HS / 8][4] = {};
    float m_a[MS], m_b[MS], l_a[MS], l_b[MS]; /* l: this thread's columns */
#pragma unroll
    for (int m = 0; m < MS; m++) m_a[m] = m_b[m] = -INFINITY, l_a[m] = l_b[m] = 0.0f;

    for (int jt = 0; jt < ntiles; jt++) {
        const int j0 = jstart + jt * BC;
        cp_async_wait<1>(); /* Q and K of this tile (V may still be in flight) */
        if constexpr (WG) fence_proxy_async(); /* ... visible to the wgmma, once all are past: */
        __syncthreads();
        float s[MS][BC / 8][4] = {};
        if constexpr (WG) {
            wgmma_fence_operand(s[0]);
            wgmma_fence();
            wg_smem_products<BC, HS>(s[0], dq, dk);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operand(s[0]);
        } else {
            warp_mma_rows_rowsT<MS, BC / 8, HS, LD>(s, sQ, r0, sK, lane);
        }

        flash_softmax_tile<MS, BC, HS / 8>(s, o, m_a, m_b, l_a, l_b, ia, ib, lo_a, lo_b, j0,
                                          j0 + BC - 1 <= i0 && j0 >= lo_max && j0 + BC <= kend,
                                          sl2, slope2, kend, t4, av);

        cp_async_wait<0>(); /* V of this tile */
        if constexpr (WG) fence_proxy_async();
        __syncthreads(); /* ... visible to all; every warp is done with K */
        if (jt + 1 < ntiles) {
            load_tile_async<WG, BC, HS>(sK, k, ld, j0 + BC, T);
            cp_async_commit();
        }
        if constexpr (WG) {
            uint32_t pa[BC / 16][4];
            wg_regs_product<HS, BC>(o[0], pa, s[0], dv);
            wgmma_wait<0>();
            wgmma_fence_operand(o[0]);
        } else {
            warp_mma_regs_rows<MS, HS / 8, BC, LD>(o, s, sV, lane);
        }
        __syncthreads(); /* every warp is done with V */
        if (jt + 1 < ntiles) {
            load_tile_async<WG, BC, HS>(sV, v, ld, j0 + BC, T);
            cp_async_commit();
        }
    }

    if (ntiles == 0) cp_async_wait<0>(); /* the first tiles' loads, unused */
    flash_store_rows<MS, HS>(out, lse, o, m_a, m_b, l_a, l_b, ia, ib, b, h, T, NH, t4, av.sinks);
}

/* ---- backward ---------------------------------------------------------------------------- */

/* ---- the backward's steps, shared by the mma.sync and wgmma kernels ------------------------ */

/* P^T for this thread's keys (the dk/dv kernels, MS slabs): p holds k_j.q_i of a tile of BQ
 * queries from it0 (keys x queries, accumulator layout) and becomes exp2 of the logit (tl: the
 * tile's lse in log2 units), masked to j <= i < hi(j) (no mask when full) */
template <int MS, int BQ>
__device__ __forceinline__ void
bwd_kv_probs(float (&p)[MS][BQ / 8][4], const int (&ja)[MS], const int (&jb)[MS],
             const int (&hi_a)[MS], const int (&hi_b)[MS], int it0, bool full, float sl2,
             float slope2, const float *tl, int t4, const att_var &v) {
#pragma unroll
    for (int m = 0; m < MS; m++)
#pragma unroll
        for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = nt * 8 + 2 * t4 + (e & 1), i = it0 + c;
                const int j = e < 2 ? ja[m] : jb[m], hi = e < 2 ? hi_a[m] : hi_b[m];
                float x = att_bwd_logit(p[m][nt][e], sl2, slope2, i - j, tl[c], v);
                if (!full && (j > i || i >= hi)) x = -INFINITY;
                p[m][nt][e] = exp2f(x);
            }
}

/* dS^T = P^T (dP^T - D): ds holds dP^T (keys x queries), tD the tile's D; with a soft cap times
 * its derivative (att_cap_grad; ja, jb this thread's keys, it0 the tile's first query, tl its
 * lse in log2 units) */
template <int MS, int BQ>
__device__ __forceinline__ void bwd_kv_ds(float (&ds)[MS][BQ / 8][4],
                                          const float (&p)[MS][BQ / 8][4], const float *tD,
                                          int t4, const int (&ja)[MS], const int (&jb)[MS],
                                          int it0, const float *tl, float slope2,
                                          const att_var &v) {
#pragma unroll
    for (int m = 0; m < MS; m++)
#pragma unroll
        for (int nt = 0; nt < BQ / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = nt * 8 + 2 * t4 + (e & 1);
                ds[m][nt][e] = p[m][nt][e] * (ds[m][nt][e] - tD[c]);
                if (v.cap > 0.0f)
                    ds[m][nt][e] *= att_cap_grad(p[m][nt][e], tl[c], slope2,
                                                 it0 + c - (e < 2 ? ja[m] : jb[m]), v);
            }
}

/* the dk/dv kernels' end: dk scale and dv of this thread's keys ja, jb (< T), columns c0..c0+NC-1
 * of the head, added into the key and value columns of head kvh of dqkv (set: written) */
template <int MS, int HS, int NC>
__device__ __forceinline__ void bwd_kv_store(bf16 *dqkv, const float (&dk)[MS][NC / 8][4],
                                             const float (&dv)[MS][NC / 8][4], const int (&ja)[MS],
                                             const int (&jb)[MS], int b, int T, int NH, int KVH,
                                             int kvh, int c0, float scale, bool set, int t4) {
    const size_t ld = (size_t)(NH + 2 * KVH) * HS;
    const size_t voff = (size_t)KVH * HS; /* value head kvh, from key head kvh */
#pragma unroll
    for (int m = 0; m < MS; m++) {
        bf16 *dka = dqkv + ((size_t)b * T + ja[m]) * ld + (size_t)(NH + kvh) * HS + c0 + 2 * t4;
        bf16 *dkb = dka + 8 * ld;
#pragma unroll
        for (int dn = 0; dn < NC / 8; dn++) {
            if (ja[m] < T) {
                add_bf16x2(dka + dn * 8, dk[m][dn][0] * scale, dk[m][dn][1] * scale, set);
                add_bf16x2(dka + voff + dn * 8, dv[m][dn][0], dv[m][dn][1], set);
            }
            if (jb[m] < T) {
                add_bf16x2(dkb + dn * 8, dk[m][dn][2] * scale, dk[m][dn][3] * scale, set);
                add_bf16x2(dkb + voff + dn * 8, dv[m][dn][2], dv[m][dn][3], set);
            }
        }
    }
}

/* the dq kernels' per-row lse (log2 units) and D of this thread's rows ia, ib (0 past T) */
template <int MS>
__device__ __forceinline__ void bwd_q_row_stats(float (&lse_a)[MS], float (&lse_b)[MS],
                                                float (&d_a)[MS], float (&d_b)[MS],
                                                const int (&ia)[MS], const int (&ib)[MS],
                                                const float *lbh, const float *dbh, int T) {
#pragma unroll
    for (int m = 0; m < MS; m++) {
        lse_a[m] = ia[m] < T ? lbh[ia[m]] * kLog2e : 0.0f;
        lse_b[m] = ib[m] < T ? lbh[ib[m]] * kLog2e : 0.0f;
        d_a[m] = ia[m] < T ? dbh[ia[m]] : 0.0f;
        d_b[m] = ib[m] < T ? dbh[ib[m]] : 0.0f;
    }
}

/* dS = P (dP - D) of a key tile from j0 (the dq kernels): s holds q_i.k_j, dp dP (queries x
 * keys); s becomes dS, masked to lo(i) <= j <= i, j < kend and i < T (no mask when full); with a
 * soft cap times its derivative (att_cap_grad, as bwd_kv_ds) */
template <int MS, int BC>
__device__ __forceinline__ void
bwd_q_ds(float (&s)[MS][BC / 8][4], const float (&dp)[MS][BC / 8][4], const int (&ia)[MS],
         const int (&ib)[MS], const int (&lo_a)[MS], const int (&lo_b)[MS],
         const float (&lse_a)[MS], const float (&lse_b)[MS], const float (&d_a)[MS],
         const float (&d_b)[MS], int j0, bool full, int T, float sl2, float slope2, int kend,
         int t4, const att_var &v) {
#pragma unroll
    for (int m = 0; m < MS; m++)
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = j0 + nt * 8 + 2 * t4 + (e & 1), i = e < 2 ? ia[m] : ib[m];
                const int lo = e < 2 ? lo_a[m] : lo_b[m];
                const float l2 = e < 2 ? lse_a[m] : lse_b[m];
                float x = att_bwd_logit(s[m][nt][e], sl2, slope2, i - j, l2, v);
                if (!full && (j > i || j < lo || i >= T || j >= kend)) x = -INFINITY;
                const float p = exp2f(x);
                s[m][nt][e] = p * (dp[m][nt][e] - (e < 2 ? d_a[m] : d_b[m]));
                if (v.cap > 0.0f) s[m][nt][e] *= att_cap_grad(p, l2, slope2, i - j, v);
            }
}

/* the dq kernels' end: dq scale of this thread's rows ia, ib (< T) added into head h's query
 * columns of dqkv (rows ld apart; set: written) */
template <int MS, int HS>
__device__ __forceinline__ void bwd_q_store(bf16 *dqkv, const float (&dq)[MS][HS / 8][4],
                                            const int (&ia)[MS], const int (&ib)[MS], int b,
                                            int h, int T, size_t ld, float scale, bool set,
                                            int t4) {
#pragma unroll
    for (int m = 0; m < MS; m++) {
        bf16 *qa = dqkv + ((size_t)b * T + ia[m]) * ld + (size_t)h * HS + 2 * t4;
        bf16 *qb = qa + 8 * ld;
#pragma unroll
        for (int dn = 0; dn < HS / 8; dn++) {
            if (ia[m] < T) add_bf16x2(qa + dn * 8, dq[m][dn][0] * scale, dq[m][dn][1] * scale, set);
            if (ib[m] < T) add_bf16x2(qb + dn * 8, dq[m][dn][2] * scale, dq[m][dn][3] * scale, set);
        }
    }
}

/* D[b,h,i] = sum_d dout[b,i,h*HS+d] * out[b,i,h*HS+d] (fp32) for the rows i >= row0 (0, or with
 * keys past kend masked the first one read: tcu_attention_keys_row0). One thread per 8 channels
 * (16-byte loads), a group of HS/8 consecutive lanes per (row, head), summed by shuffles in a
 * fixed order. Grid ceil(B*(T-row0)*C/8 / 256), 256 threads. */
template <int HS>
__global__ void __launch_bounds__(256)
    attention_backward_rowdot_kernel(float *__restrict__ D, const bf16 *__restrict__ dout,
                                     const bf16 *__restrict__ out, size_t nchunks, int T, int C,
                                     int NH, int row0) {
    constexpr int G = HS / 8;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const bool ok = idx < nchunks; /* G divides 32 and C/8: a group is all in or all out */
    const size_t cpr = (size_t)C / 8, n = idx / cpr, Tr = (size_t)(T - row0);
    const size_t bb = n / Tr, i = row0 + n % Tr; /* row bb*T + i */
    const int c8 = (int)(idx % cpr);
    const size_t at = ((bb * T + i) * cpr + c8) * 8; /* row0 = 0: idx * 8 */
    float acc = 0.0f;
    if (ok) {
        const int4 dr = *reinterpret_cast<const int4 *>(dout + at);
        const int4 orw = *reinterpret_cast<const int4 *>(out + at);
        const __nv_bfloat162 *d2 = reinterpret_cast<const __nv_bfloat162 *>(&dr);
        const __nv_bfloat162 *o2 = reinterpret_cast<const __nv_bfloat162 *>(&orw);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 x = __bfloat1622float2(d2[k]), y = __bfloat1622float2(o2[k]);
            acc = fmaf(x.x, y.x, acc);
            acc = fmaf(x.y, y.y, acc);
        }
    }
#pragma unroll
    for (int off = G / 2; off >= 1; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (ok && c8 % G == 0) D[(bb * NH + c8 / G) * T + i] = acc;
}

/* The fused dq's step for one (query head, query tile) of a key block (tcu_attention_set_dq_fused):
 * acc (16 rows x NCOL columns of this warp's part of the tile's BQ x HS) = the sum so far (zero
 * for the first block in the order, else from dqacc, fp32) + dS_tile K_block, with dS^T in sDS
 * (BK keys x BQ queries, bf16, stride DS_LD) and K in sK (BK x HS, stride LD); then the last block
 * in the order adds scale * acc into the q columns of dqkv (rows < T; set: 0 + x), the others
 * store acc back to dqacc. dqacc: the tile's BQ x HS fp32 rows; dq: dqkv at (b, row it0, query
 * head h's columns), rows ld apart. Per accumulator the mma run over the block's keys in k order,
 * as the dq kernel's over a key tile of the same keys: the same bits where the tiles agree. */
template <int HS, int MS>
__device__ __forceinline__ void dq_fused_step(bf16 *dq, size_t ld, float *dqacc, const bf16 *sDS,
                                              const bf16 *sK, int it0, int T, float scale,
                                              bool first, bool last, bool set) {
    using Tl = att_tiles<HS, MS>;
    constexpr int BK = Tl::KV_BK, LD = Tl::LD, DS_LD = Tl::DS_LD, NCOL = Tl::NCOL;
    constexpr int NT = NCOL / 8;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    const int q0 = (warp % Tl::RS) * 16, n0 = (warp / Tl::RS) * NCOL;
    float *ra = dqacc + (size_t)(q0 + g) * HS + n0 + 2 * t4, *rb = ra + 8 * HS;
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        float2 x = make_float2(0.0f, 0.0f), y = x;
        if (!first) {
            x = __ldcg(reinterpret_cast<const float2 *>(ra + nt * 8));
            y = __ldcg(reinterpret_cast<const float2 *>(rb + nt * 8));
        }
        acc[nt][0] = x.x, acc[nt][1] = x.y, acc[nt][2] = y.x, acc[nt][3] = y.y;
    }
    /* A = dS (queries x keys) from its transpose in sDS (.trans): matrices (rows +0, k +0),
     * (+8, +0), (+0, +8), (+8, +8) -> a0..a3, each 8 keys of sDS x 8 queries */
    const bf16 *pa =
        sDS + (((lane >> 4) << 3) + (lane & 7)) * DS_LD + q0 + (((lane >> 3) & 1) << 3);
    /* B = K (keys x columns, .trans), as warp_mma_regs_rows */
    const bf16 *pb = sK + (lane & 15) * LD + ((lane >> 4) << 3) + n0;
#pragma unroll
    for (int kc = 0; kc < BK / 16; kc++) {
        uint32_t a[4];
        ldsm_x4_trans(a, pa + kc * 16 * DS_LD);
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldsm_x4_trans(b, pb + kc * 16 * LD + np * 16);
            mma_bf16(acc[2 * np], a, b[0], b[1]);
            mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
    const int ia = it0 + q0 + g, ib = ia + 8;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        if (last) {
            bf16 *qa = dq + (size_t)(q0 + g) * ld + n0 + nt * 8 + 2 * t4;
            if (ia < T) add_bf16x2(qa, acc[nt][0] * scale, acc[nt][1] * scale, set);
            if (ib < T) add_bf16x2(qa + 8 * ld, acc[nt][2] * scale, acc[nt][3] * scale, set);
        } else {
            __stcg(reinterpret_cast<float2 *>(ra + nt * 8), make_float2(acc[nt][0], acc[nt][1]));
            __stcg(reinterpret_cast<float2 *>(rb + nt * 8), make_float2(acc[nt][2], acc[nt][3]));
        }
    }
}

/* The block's start ticket: atomicAdd(ticket, 1) by thread 0, given to all through s[0] (shared;
 * free again when this returns). Tickets count the blocks in the order they started. */
__device__ __forceinline__ int start_ticket(int *ticket, int *s) {
    if (threadIdx.x == 0) s[0] = atomicAdd(ticket, 1);
    __syncthreads();
    const int t = s[0];
    __syncthreads(); /* s is the caller's scratch again */
    return t;
}

/* dk_j = scale sum_h sum_i dS[h,i,j] q_hi, dv_j = sum_h sum_i P[h,i,j] dout_hi for the BK keys
 * of one block of key/value head kvh, h over the query heads that read it (kvh*grp ..
 * kvh*grp + grp-1, grp = NH/KVH, in that order), with P = exp(s - lse_i), dP = dout_i . v_j,
 * dS = P (dP - D_i) recomputed per query tile: S^T = K Q^T, dP^T = V dO^T, dV += P^T dO,
 * dK += dS^T Q on tensor cores (each warp MS slabs of 16 keys). The (head, query tile) steps run
 * head by head, tiles from the block's first key to hi of its last key; Q, dO, lse, D of the next
 * step load while the current one is computed (two shared buffers). dk, dv stay in registers over
 * the whole group (no atomics), then are added into the k and v columns of dqkv.
 * Grid (ceil(kend/BK), KVH, B) (no block for the masked keys), 128 threads, dynamic shared
 * memory att_tiles<HS, MS>::kv_smem (K, V, 2 x Q, 2 x dO; FUSED: kv_fused_smem, + dS^T; WG:
 * kv_smem_cm).
 *
 * FUSED (tcu_attention_set_dq_fused; issue 25): the block also adds dS K into dq for each of its
 * (query head, query tile) steps, so the dq kernel (which recomputes S and dP) does not run: five
 * tile products per step in all instead of seven. Deterministic, without floating-point atomics:
 * the blocks that reach one (query head, query tile) add in a fixed order, highest key block
 * first, through dqacc (B,NH,nqt*BQ,HS) fp32 and a turn counter per tile, turns[1 + tile] for the
 * (B,NH,nqt) tiles, zero at the launch: block kb waits (one thread spinning on an acquire load,
 * spin_wait_eq) until the counter says the kb_top - kb blocks above it, up to kb_top, the block
 * holding the tile's first query, have added, adds (dq_fused_step), and releases the counter + 1
 * after a barrier. The last block in the order (the one below does not reach the tile: kb = 0,
 * or the document of key j0 - 1 ends at or before the tile, or with a window W its band: hi(j0 - 1)
 * is hi(j0) - 1 where the band, not the document, bounds hi(j0) = j0 + W) writes dq instead; each
 * counter ends at its tile's number of blocks. A block's place comes from a start ticket
 * (turns[0], one atomicAdd as it starts), not from blockIdx: tickets in a (key/value head, sequence) group go to
 * key blocks from the highest down, so a block only ever waits for blocks that have started,
 * whatever order the GPU starts them in, and a waiting block never holds back one it waits for.
 * Causal order makes the waits short: block kb reaches a tile BK/BQ steps after block kb + 1 did
 * (more for later query heads of the group), and starts that many steps earlier. The contributors
 * of a tile are contiguous: block kb reaches query tile it0 iff j0 <= it0 < hi(its last key), and
 * hi grows with the key.
 * WG (sm_90a, MS = 1, not FUSED, hs 64 or 128; issue 25 item 2): the products on wgmma, tiles in
 * its core-matrix layout (load_rows_cm_async): P^T = K Q^T and dP^T = V dO^T in one commit group
 * (K-major over hs); then dV += P^T dO issued, dS^T made while it runs, dK += dS^T Q (P^T and
 * dS^T from registers, dO and Q as MN-major B: their rows are K), both waited for at the step's
 * end, before the barrier that releases the buffer. */
template <int HS, int MS, bool FUSED, bool WG>
__global__ void __launch_bounds__(ATT_THREADS) attention_backward_dkdv_keytile_kernel(
    bf16 *__restrict__ dqkv, const bf16 *__restrict__ dout, const bf16 *__restrict__ qkv,
    const float *__restrict__ lse, const float *__restrict__ Dsum,
    const float *__restrict__ slopes, const int32_t *__restrict__ seq, int T, int kend, int NH,
    int KVH, float scale, float sl2, bool set, float *__restrict__ dqacc, int *__restrict__ turns,
    int nqt, att_var av) {
    using Tl = att_tiles<HS, MS>;
    constexpr int BK = Tl::KV_BK, BQ = Tl::KV_BQ, NC = Tl::KV_NC, LD = WG ? HS : Tl::LD;
    const int C = NH * HS, grp = NH / KVH;
    static_assert(BK == 16 * MS * ATT_WARPS, "MS 16-key slabs per warp");
    static_assert(BK % BQ == 0 && (NC == HS || !FUSED), "query tiles in key blocks; parts unfused");
    static_assert(!WG || (!FUSED && MS == 1 && ATT_THREADS == 128 && (HS == 64 || HS == 128)),
                  "wgmma: one warpgroup of 64 keys, not fused; its shapes");
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *sK = reinterpret_cast<bf16 *>(att_smem), *sV = sK + BK * LD;
    bf16 *sQ0 = sV + BK * LD, *sG0 = sQ0 + 2 * BQ * LD; /* buffer u at +u * BQ * LD */
    bf16 *sDS = sG0 + 2 * BQ * LD;                       /* FUSED: dS^T, BK x DS_LD */
    __shared__ float s_lse[2][BQ], s_D[2][BQ];
    __shared__ int s_hi[BK], s_seq[BK], s_red[ATT_WARPS];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int lin = FUSED ? start_ticket(turns, s_red) : 0, nkb = (int)gridDim.x;
    const int kb = FUSED ? nkb - 1 - lin % nkb : (int)blockIdx.x / (HS / NC);
    const int kvh = FUSED ? lin / nkb % (int)gridDim.y : (int)blockIdx.y;
    const int b = FUSED ? lin / (nkb * (int)gridDim.y) : (int)blockIdx.z;
    const int j0 = kb * BK, h0 = kvh * grp, c0 = (int)blockIdx.x % (HS / NC) * NC;
    const size_t ld = (size_t)(NH + 2 * KVH) * HS;
    const bf16 *q0, *k, *v;
    head_rows(q0, k, v, qkv, b, T, h0, NH, KVH, HS); /* q0: the group's first query head */

    load_tile_async<WG, BK, HS>(sK, k, ld, j0, T);
    load_tile_async<WG, BK, HS>(sV, v, ld, j0, T);
    cp_async_commit();
    segment_ends<BK>(s_hi, s_seq, s_red, seq ? seq + (size_t)b * T : nullptr, j0, T, av.window);
    const int hi_min = s_hi[0], i_end = s_hi[BK - 1]; /* queries j0 <= i < i_end (<= T) */
    /* the query tiles from iq0: j0's, or (kend < T: the rows before kend are keys only) the one
     * holding row kend; none when every key's queries end before it */
    const int iq0 = kend < T && kend > j0 ? j0 + (kend - j0) / BQ * BQ : j0;
    const int nq = i_end > iq0 ? (i_end - iq0 + BQ - 1) / BQ : 0, nsteps = grp * nq;
    /* FUSED: hi of key j0 - 1 (the block below reaches tile it0 iff it0 < hi_below), 0 for kb 0 */
    int hi_below = 0;
    if constexpr (FUSED) {
        const int32_t *sqb = seq ? seq + (size_t)b * T : nullptr, wb = hi_min == j0 + av.window;
        hi_below = kb == 0 ? 0 : sqb && sqb[j0 - 1] != sqb[j0] ? j0 : hi_min - wb;
    }

    /* step st = (query head h0 + st / nq, query tile st % nq) into buffer u: Q, dO
     * asynchronously, lse (log2 units) and D by plain stores; zeros past T */
    auto load_query_tile = [&](int st, int u) {
        const int h = h0 + st / nq, it0 = iq0 + (st % nq) * BQ;
        const float *lbh = lse + ((size_t)b * NH + h) * T, *dbh = Dsum + ((size_t)b * NH + h) * T;
        load_tile_async<WG, BQ, HS>(sQ0 + u * BQ * LD, q0 + (size_t)(h - h0) * HS, ld, it0, T);
        load_tile_async<WG, BQ, HS>(sG0 + u * BQ * LD, dout + (size_t)b * T * C + (size_t)h * HS,
                                    (size_t)C, it0, T);
        cp_async_commit();
        if (tid < BQ) {
            const int i = it0 + tid;
            s_lse[u][tid] = i < T ? lbh[i] * kLog2e : 0.0f;
            s_D[u][tid] = i < T ? dbh[i] : 0.0f;
        }
    };
    if (nsteps) load_query_tile(0, 0);

    /* this thread's keys, per slab m: ja (accumulator elements 0, 1) and jb = ja + 8 (2, 3) */
    const int r0 = warp * 16 * MS;
    int ja[MS], jb[MS], hi_a[MS], hi_b[MS];
    slab_rows<MS>(ja, jb, hi_a, hi_b, s_hi, j0, r0, g);
    float dk[MS][NC / 8][4] = {}, dv[MS][NC / 8][4] = {};
    [[maybe_unused]] uint64_t desc_k = 0, desc_v = 0; /* WG: K, V as the A of products over hs */
    if constexpr (WG) desc_k = wg_desc_kmajor<HS>(sK), desc_v = wg_desc_kmajor<HS>(sV);

    for (int st = 0; st < nsteps; st++) {
        const int u = st & 1, it0 = iq0 + (st % nq) * BQ;
        const float slope2 = slopes ? slopes[h0 + st / nq] * kLog2e : 0.0f;
        if (st + 1 < nsteps) {
            load_query_tile(st + 1, u ^ 1); /* buffer u^1 was released by the last barrier */
            cp_async_wait<1>();             /* everything but that step's tiles */
        } else {
            cp_async_wait<0>();
        }
        if constexpr (WG) fence_proxy_async(); /* visible to the wgmma, once all are past: */
        __syncthreads();
        const bf16 *sQ = sQ0 + u * BQ * LD, *sG = sG0 + u * BQ * LD;
        const float *tl = s_lse[u], *tD = s_D[u];

        /* P^T = K Q^T and dP^T = V dO^T (keys x queries) */
        float p[MS][BQ / 8][4] = {};
        float ds[MS][BQ / 8][4] = {};
        if constexpr (WG) { /* both in one commit group */
            const uint64_t dq_k = wg_desc_kmajor<HS>(sQ), dg_k = wg_desc_kmajor<HS>(sG);
            wgmma_fence_operand(p[0]);
            wgmma_fence_operand(ds[0]);
            wgmma_fence();
            wg_smem_products<BQ, HS>(p[0], desc_k, dq_k);
            wg_smem_products<BQ, HS>(ds[0], desc_v, dg_k);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operand(p[0]);
            wgmma_fence_operand(ds[0]);
        } else {
            warp_mma_rows_rowsT<MS, BQ / 8, HS, LD>(p, sK, r0, sQ, lane);
        }
        bwd_kv_probs<MS, BQ>(p, ja, jb, hi_a, hi_b, it0,
                             j0 + BK - 1 <= it0 && it0 + BQ <= hi_min /* hi_min <= T */, sl2,
                             slope2, tl, t4, av);
        if constexpr (WG) {
            /* dV += P^T dO issued, dS^T made while it runs, then dK += dS^T Q (dO and Q as
             * MN-major B: their rows are K) */
            const uint64_t dq_m = wg_desc_mnmajor<HS>(sQ), dg_m = wg_desc_mnmajor<HS>(sG);
            uint32_t pa[BQ / 16][4], da[BQ / 16][4];
            wg_regs_product<HS, BQ>(dv[0], pa, p[0], dg_m);
            bwd_kv_ds<MS, BQ>(ds, p, tD, t4, ja, jb, it0, tl, slope2, av);
            wg_regs_product<HS, BQ>(dk[0], da, ds[0], dq_m);
            wgmma_wait<0>();
            wgmma_fence_operand(dv[0]);
            wgmma_fence_operand(dk[0]);
        } else {
            warp_mma_rows_rowsT<MS, BQ / 8, HS, LD>(ds, sV, r0, sG, lane); /* dP^T = V dO^T */
            warp_mma_regs_rows<MS, NC / 8, BQ, LD>(dv, p, sG + c0, lane);   /* dV += P^T dO */
            bwd_kv_ds<MS, BQ>(ds, p, tD, t4, ja, jb, it0, tl, slope2, av);
            warp_mma_regs_rows<MS, NC / 8, BQ, LD>(dk, ds, sQ + c0, lane); /* dK += dS^T Q */
        }
        if constexpr (FUSED) {
            /* dS^T -> sDS (bf16, the rounding the dq kernel's A fragments get) */
#pragma unroll
            for (int m = 0; m < MS; m++)
#pragma unroll
                for (int nt = 0; nt < BQ / 8; nt++) {
                    bf16 *ra = sDS + (r0 + 16 * m + g) * Tl::DS_LD + nt * 8 + 2 * t4;
                    *reinterpret_cast<__nv_bfloat162 *>(ra) =
                        __floats2bfloat162_rn(ds[m][nt][0], ds[m][nt][1]);
                    *reinterpret_cast<__nv_bfloat162 *>(ra + 8 * Tl::DS_LD) =
                        __floats2bfloat162_rn(ds[m][nt][2], ds[m][nt][3]);
                }
            const int h = h0 + st / nq, turn = it0 / BK - kb; /* blocks before this one */
            int *sem = turns + 1 + ((size_t)b * NH + h) * nqt + it0 / BQ;
            if (tid == 0 && turn > 0)
                spin_wait_eq(sem, turn, "tcu_attention_backward: fused dq, a key block's turn");
            __syncthreads(); /* sDS written; this block's turn (its thread 0 acquired it) */
            dq_fused_step<HS, MS>(dqkv + ((size_t)b * T + it0) * ld + (size_t)h * HS, ld,
                                  dqacc + (((size_t)b * NH + h) * nqt * BQ + it0) * HS,
                                  sDS, sK, it0, T, scale, turn == 0, it0 >= hi_below, set);
            __syncthreads(); /* every warp is done with buffer u and sDS; dqacc stored */
            if (tid == 0) {
                __threadfence();
                st_release_gpu(sem, turn + 1);
            }
        } else {
            __syncthreads(); /* every warp is done with buffer u */
        }
    }

    if (!nsteps) cp_async_wait<0>(); /* K and V, unused: dk, dv are 0 */
    bwd_kv_store<MS, HS, NC>(dqkv, dk, dv, ja, jb, b, T, NH, KVH, kvh, c0, scale, set, t4);
}

/* dq_i = scale sum_j dS[i,j] k_j for the BR query rows of one block, P and dS recomputed per key
 * tile (dP = dO V^T, S = Q K^T, dQ += dS K on tensor cores, each warp MS slabs of 16 rows). Key
 * tiles as in the forward, taken last to first (the fused dq's order: highest key block first);
 * V of the next tile loads while S and dQ run, K of the next tile while dP runs. Result added
 * into the q columns of dqkv. Grid (ceil(T/BR), NH, B), last query tile
 * first; 128 threads; dynamic shared memory att_tiles<HS, MS>::dq_smem (Q, dO, K, V; WG:
 * dq_smem_cm).
 * WG (sm_90a, MS = 1, hs 64 or 128; issue 25 item 2): the products on wgmma, tiles in its
 * core-matrix layout: per key tile, dP = dO V^T and S = Q K^T in one commit group (K-major over
 * hs), V of the next tile loading once they are done, then dQ += dS K (dS from registers, K as an
 * MN-major B), K of the next tile after it. */
template <int HS, int MS, bool WG>
__global__ void __launch_bounds__(ATT_THREADS) attention_backward_dq_querytile_kernel(
    bf16 *__restrict__ dqkv, const bf16 *__restrict__ dout, const bf16 *__restrict__ qkv,
    const float *__restrict__ lse, const float *__restrict__ Dsum,
    const float *__restrict__ slopes, const int32_t *__restrict__ seq, int T, int kend, int NH,
    int KVH, float scale, float sl2, bool set, att_var av) {
    using Tl = att_tiles<HS, MS>;
    constexpr int BR = Tl::DQ_BR, BC = Tl::DQ_BC, LD = WG ? HS : Tl::LD; /* a tile row */
    const int C = NH * HS;
    static_assert(BR == 16 * MS * ATT_WARPS, "MS 16-row slabs per warp");
    static_assert(!WG || (MS == 1 && ATT_THREADS == 128 && (HS == 64 || HS == 128)),
                  "wgmma: one warpgroup of 64 rows; its shapes");
    extern __shared__ __align__(16) unsigned char att_smem[];
    bf16 *sQ = reinterpret_cast<bf16 *>(att_smem), *sG = sQ + BR * LD, *sK = sG + BR * LD;
    bf16 *sV = sK + BC * LD;
    __shared__ int s_lo[BR], s_seq[BR], s_red[ATT_WARPS];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    const int i0 = att_query_base(kend, T, BR) + (gridDim.x - 1 - blockIdx.x) * BR;
    const int h = blockIdx.y, b = blockIdx.z;
    const size_t ld = (size_t)(NH + 2 * KVH) * HS;
    const bf16 *q, *k, *v;
    head_rows(q, k, v, qkv, b, T, h, NH, KVH, HS);
    const bf16 *go = dout + (size_t)b * T * C + (size_t)h * HS;
    const float *lbh = lse + ((size_t)b * NH + h) * T, *dbh = Dsum + ((size_t)b * NH + h) * T;

    load_tile_async<WG, BR, HS>(sQ, q, ld, i0, T);
    load_tile_async<WG, BR, HS>(sG, go, (size_t)C, i0, T);
    cp_async_commit();
    segment_starts<BR>(s_lo, s_seq, s_red, seq ? seq + (size_t)b * T : nullptr, i0, T, av.window);
    const int jstart = s_lo[0], lo_max = s_lo[BR - 1], ilast = min(i0 + BR, T) - 1;
    const int jlast = min(ilast, kend - 1); /* (no tile: every row's keys lie past kend) */
    const int ntiles = jlast >= jstart ? (jlast - jstart) / BC + 1 : 0;
    const int jtop = jstart + (ntiles > 0 ? ntiles - 1 : 0) * BC; /* the last tile, taken first */
    load_tile_async<WG, BC, HS>(sV, v, ld, jtop, T);
    cp_async_commit();
    load_tile_async<WG, BC, HS>(sK, k, ld, jtop, T);
    cp_async_commit();

    const int r0 = warp * 16 * MS;
    int ia[MS], ib[MS], lo_a[MS], lo_b[MS];
    float lse_a[MS], lse_b[MS], d_a[MS], d_b[MS];
    slab_rows<MS>(ia, ib, lo_a, lo_b, s_lo, i0, r0, g);
    bwd_q_row_stats<MS>(lse_a, lse_b, d_a, d_b, ia, ib, lbh, dbh, T);
    const float slope2 = slopes ? slopes[h] * kLog2e : 0.0f;
    float dq[MS][HS / 8][4] = {};
    /* WG: Q, dO, K and V as the A or B of products over hs (K-major); K as the MN-major B of
     * dQ += dS K (its rows are K) */
    [[maybe_unused]] uint64_t desc_q = 0, desc_g = 0, desc_k = 0, desc_v = 0, desc_km = 0;
    if constexpr (WG) {
        desc_q = wg_desc_kmajor<HS>(sQ), desc_g = wg_desc_kmajor<HS>(sG);
        desc_k = wg_desc_kmajor<HS>(sK), desc_v = wg_desc_kmajor<HS>(sV);
        desc_km = wg_desc_mnmajor<HS>(sK);
    }

    for (int jt = 0; jt < ntiles; jt++) {
        const int j0 = jtop - jt * BC;
        float dp[MS][BC / 8][4] = {};
        float s[MS][BC / 8][4] = {};
        if constexpr (WG) {
            cp_async_wait<0>(); /* Q, dO, and V and K of this tile */
            fence_proxy_async();
            __syncthreads();
            wgmma_fence_operand(dp[0]);
            wgmma_fence_operand(s[0]);
            wgmma_fence();
            wg_smem_products<BC, HS>(dp[0], desc_g, desc_v); /* dP = dO V^T, S = Q K^T: */
            wg_smem_products<BC, HS>(s[0], desc_q, desc_k);  /* one commit group */
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_operand(dp[0]);
            wgmma_fence_operand(s[0]);
            __syncthreads(); /* every warp's products done: V is free */
            if (jt + 1 < ntiles) {
                load_tile_async<WG, BC, HS>(sV, v, ld, j0 - BC, T);
                cp_async_commit();
            }
        } else {
            cp_async_wait<1>(); /* Q, dO and V of this tile (K may still be in flight) */
            __syncthreads();
            warp_mma_rows_rowsT<MS, BC / 8, HS, LD>(dp, sG, r0, sV, lane); /* dP = dO V^T */
            cp_async_wait<0>(); /* K of this tile */
            __syncthreads();    /* ... visible to all; every warp is done with V */
            if (jt + 1 < ntiles) {
                load_tile_async<WG, BC, HS>(sV, v, ld, j0 - BC, T);
                cp_async_commit();
            }
            warp_mma_rows_rowsT<MS, BC / 8, HS, LD>(s, sQ, r0, sK, lane); /* S = Q K^T */
        }
        /* rows past T are masked too (their lse and D are stand-ins) */
        bwd_q_ds<MS, BC>(s, dp, ia, ib, lo_a, lo_b, lse_a, lse_b, d_a, d_b, j0,
                         j0 + BC - 1 <= i0 && j0 >= lo_max && i0 + BR <= T && j0 + BC <= kend, T,
                         sl2, slope2, kend, t4, av);
        if constexpr (WG) {
            uint32_t da[BC / 16][4];
            wg_regs_product<HS, BC>(dq[0], da, s[0], desc_km); /* dQ += dS K */
            wgmma_wait<0>();
            wgmma_fence_operand(dq[0]);
        } else {
            warp_mma_regs_rows<MS, HS / 8, BC, LD>(dq, s, sK, lane); /* dQ += dS K */
        }
        __syncthreads(); /* every warp is done with K */
        if (jt + 1 < ntiles) {
            load_tile_async<WG, BC, HS>(sK, k, ld, j0 - BC, T);
            cp_async_commit();
        }
    }

    if (ntiles == 0) cp_async_wait<0>(); /* the first tiles' loads, unused */
    bwd_q_store<MS, HS>(dqkv, dq, ia, ib, b, h, T, ld, scale, set, t4);
}

/* ---- host -------------------------------------------------------------------------------- */

/* the kernels' att_var of a layer's tsr_attn_var (NULL: none) for head size hs: its scale
 * (1/sqrt(hs) unless given), window (>= 0), soft cap (>= 0) and sinks */
static att_var att_var_of(const tsr_attn_var *var, int hs, const char *what) {
    att_var v = {0, 0.0f, 1.0f / sqrtf((float)hs), nullptr};
    if (!var) return v;
    TCU_REQUIRE(var->window >= 0 && var->softcap >= 0.0f && var->scale >= 0.0f, what,
                tcu_msg("window = %d, softcap = %g, scale = %g: expected none negative",
                        var->window, (double)var->softcap, (double)var->scale));
    v.window = var->window, v.cap = var->softcap;
    v.sinks = reinterpret_cast<const bf16 *>(var->sinks); /* bf16 on this backend (cuda_ops.h) */
    if (var->scale > 0.0f) v.scale = var->scale;
    return v;
}

/* a kernel's dynamic shared-memory limit = bytes (needed past the default 48 KB; set always, so
 * that the static part added on top never tips a size near 48 KB over) */
static void att_smem_limit(const void *kernel, size_t bytes, const char *what) {
    TCU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
              what);
}

/* rows a warp owns in the attention kernels: 16 (the default) or 32 (hs <= 64; issue 25 item 2,
 * a measurement switch: not faster on the H200, 2026-11-26, docs/cuda.md;
 * tcu_attention_set_warp_rows) */
static int att_warp_rows = 16;

extern "C" void tcu_attention_set_warp_rows(int rows) {
    TCU_REQUIRE(rows == 16 || rows == 32, "tcu_attention_set_warp_rows",
                tcu_msg("rows = %d: expected 16 or 32", rows));
    att_warp_rows = rows;
}

extern "C" int tcu_attention_warp_rows(int hs) { return hs <= 64 ? att_warp_rows : 16; }

/* dq added by the dk/dv blocks (issue 25: five tile products a step instead of seven; a
 * measurement switch: slower on the H200, 2026-11-26, docs/cuda.md; tcu_attention_set_dq_fused) */
static bool att_dq_fused = false;

extern "C" void tcu_attention_set_dq_fused(int on) {
    TCU_REQUIRE(on == 0 || on == 1, "tcu_attention_set_dq_fused",
                tcu_msg("on = %d: expected 0 or 1", on));
    att_dq_fused = on == 1;
}

extern "C" int tcu_attention_dq_fused(void) { return att_dq_fused; }

/* whether the backward at head size hs takes the fused dq: switched on, and not at hs 256 (its
 * dk/dv blocks own half the columns each: att_tiles::KV_NS; the separate dq kernel runs) */
static bool att_dq_fused_at(int hs) { return att_dq_fused && hs != 256; }

/* the attention kernels on wgmma (issue 25 item 2; a measurement switch, off until timed on a GPU:
 * tcu_attention_set_wgmma, TSR_ATT_WGMMA) */
static bool att_wgmma = false;

extern "C" void tcu_attention_set_wgmma(int on) {
    TCU_REQUIRE(on == 0 || on == 1, "tcu_attention_set_wgmma",
                tcu_msg("on = %d: expected 0 or 1", on));
    att_wgmma = on == 1;
}

#ifndef TCU_SIMT
/* 1 in the device code that has the wgmma instructions (built for sm_90a), 0 in any other: the
 * host reads the loaded module's copy, so a build whose NVCC_GENCODE has no sm_90a code (plain
 * sm_90, or PTX compiled at load time) refuses the switch instead of trapping in the kernels */
#ifdef TCU_WGMMA_ASM
__device__ int att_wgmma_code = 1;
#else
__device__ int att_wgmma_code = 0;
#endif
#endif

/* whether the current device runs this build's wgmma code: compute capability 9.0 (H100, H200,
 * GH200) and sm_90a code loaded for it; asked once a process (the SIMT emulator: yes, it runs
 * the kernels' own emulated wgmma) */
static bool att_device_sm90a(void) {
#ifdef TCU_SIMT
    return true;
#else
    static int known = -1;
    if (known < 0) {
        int dev = 0, major = 0, minor = 0, code = 0;
        TCU_CHECK(cudaGetDevice(&dev), "tcu_attention_wgmma: cudaGetDevice");
        TCU_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
                  "tcu_attention_wgmma: the compute capability");
        TCU_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev),
                  "tcu_attention_wgmma: the compute capability");
        if (major == 9 && minor == 0)
            TCU_CHECK(cudaMemcpyFromSymbol(&code, att_wgmma_code, sizeof code),
                      "tcu_attention_wgmma: whether the loaded code has wgmma");
        known = code == 1;
    }
    return known == 1;
#endif
}

extern "C" int tcu_attention_wgmma_possible(int hs) {
    return (hs == 64 || hs == 128) && att_device_sm90a();
}

extern "C" int tcu_attention_wgmma(int hs) { return att_wgmma && tcu_attention_wgmma_possible(hs); }

/* The backward's scratch: D (B,NH,T) fp32 at 0; with the fused dq also dqacc (B,NH,nqt*BQ,HS)
 * fp32 and, at the end, the turns: the start ticket, then the counters (B,NH,nqt) int (the op test
 * reads them back), dqacc and turns at 256-byte boundaries (nqt query tiles of the dk/dv kernel's
 * BQ rows). */
struct att_scratch_layout {
    int nqt = 0;
    size_t acc = 0, turns = 0, bytes = 0;
};
/* the query tiles of BR rows of a forward or dq grid: from att_query_base's row to T (one rule,
 * two places: the kernels' rows and their grids) */
static int att_query_tiles(int T, int kend, int BR) {
    const int base = kend < T ? kend / BR * BR : 0;
    return (T - base + BR - 1) / BR;
}

/* (cuda_internal.h) every query tile's rows (BR of the forward and dq, BQ of dk/dv) divide 128,
 * so each kernel's first query row, kend rounded down to its tile, is at or past this one */
extern "C" int tcu_attention_keys_row0(int kend, int T) { return kend < T ? kend / 128 * 128 : 0; }

static size_t att_align256(size_t n) { return (n + 255) / 256 * 256; }
static att_scratch_layout att_scratch(int B, int T, int NH, int hs) {
    att_scratch_layout L;
    L.bytes = (size_t)B * NH * T * sizeof(float);
    if (!att_dq_fused_at(hs)) return L;
    const bool two = tcu_attention_warp_rows(hs) == 32;
    const int bq = hs == 32 ? (two ? att_tiles<32, 2>::KV_BQ : att_tiles<32, 1>::KV_BQ)
                   : hs == 64 ? (two ? att_tiles<64, 2>::KV_BQ : att_tiles<64, 1>::KV_BQ)
                   : hs == 128 ? att_tiles<128, 1>::KV_BQ
                               : att_tiles<256, 1>::KV_BQ;
    L.nqt = (T + bq - 1) / bq;
    L.acc = att_align256(L.bytes);
    L.turns = att_align256(L.acc + (size_t)B * NH * L.nqt * bq * hs * sizeof(float));
    L.bytes = L.turns + (1 + (size_t)B * NH * L.nqt) * sizeof(int);
    return L;
}

/* the forward's launch: MS slabs a warp, or (WG) on wgmma with MS = 1 */
template <int HS, int MS, bool WG>
static void attention_forward_hs(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv,
                                 const float *slopes, const int32_t *seq, const att_var &av,
                                 int B, int T, int kend, int NH, int KVH, cudaStream_t st) {
    using Tl = att_tiles<HS, MS>;
    const size_t smem = WG ? Tl::fwd_smem_cm : Tl::fwd_smem;
    auto kernel = attention_forward_flash_kernel<HS, MS, WG>;
    att_smem_limit((const void *)kernel, smem,
                   WG ? "tcu_attention_forward: shared memory (wgmma)"
                      : "tcu_attention_forward: shared memory");
    const dim3 grid((unsigned)att_query_tiles(T, kend, Tl::FWD_BR), (unsigned)NH, (unsigned)B);
    kernel<<<grid, ATT_THREADS, smem, st>>>(reinterpret_cast<bf16 *>(out), lse,
                                            reinterpret_cast<const bf16 *>(qkv), slopes, seq, T,
                                            kend, NH, KVH, av.scale * kLog2e, av);
    TCU_CHECK_LAUNCH(WG ? "tcu_attention_forward (wgmma)" : "tcu_attention_forward");
}

/* cuDNN's fused attention first where TSR_ATTENTION asks for it and it takes the call
 * (tcu_cudnn.h; docs/cuda.md "cuDNN attention"): 1 when it ran; the SIMT build has only the own */
static bool att_cudnn_forward(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv, const float *slopes,
                              const int32_t *seq, const tsr_attn_var *var, int B, int T, int NH,
                              int KVH, int hs, tcu_stream s) {
#ifndef TCU_SIMT
    return tcu_cudnn_forward(out, lse, qkv, slopes, seq, var, tcu_cudnn_shape{B, T, NH, KVH, hs}, s);
#else
    (void)out, (void)lse, (void)qkv, (void)slopes, (void)seq, (void)var, (void)B, (void)T;
    (void)NH, (void)KVH, (void)hs, (void)s;
    return false;
#endif
}

static bool att_cudnn_backward(tsr_bf16 *dqkv, const tsr_bf16 *dout, const tsr_bf16 *qkv,
                               const tsr_bf16 *out, const float *lse, const float *slopes,
                               const int32_t *seq, const tsr_attn_var *var, void *scratch, int B,
                               int T, int NH, int KVH, int hs, tsr_grad_mode mode, tcu_stream s) {
#ifndef TCU_SIMT
    return tcu_cudnn_backward(dqkv, dout, qkv, out, lse, slopes, seq, var, scratch,
                              tcu_cudnn_shape{B, T, NH, KVH, hs}, mode, s);
#else
    (void)dqkv, (void)dout, (void)qkv, (void)out, (void)lse, (void)slopes, (void)seq, (void)var;
    (void)scratch, (void)B, (void)T, (void)NH, (void)KVH, (void)hs, (void)mode, (void)s;
    return false;
#endif
}

/* out (B,T,NH*hs) bf16, lse (B,NH,T) fp32 = forward of ops.h attention_forward (see the file
 * header). qkv (B,T,(NH+2KVH)hs) bf16, alibi_slopes (NH) or NULL, seq (B,T) or NULL. hs in
 * {32, 64, 128, 256}; qkv and out 16-byte aligned. One kernel, grid (ceil(T/(64 MS)), NH, B) x 128
 * threads (MS: tcu_attention_warp_rows(hs) / 16, or 1 where the wgmma instance runs:
 * tcu_attention_wgmma(hs)). */
extern "C" void tcu_attention_forward(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv,
                                      const float *alibi_slopes, const int32_t *seq, int B, int T,
                                      int NH, int KVH, int hs, tcu_stream s) {
    if (att_cudnn_forward(out, lse, qkv, alibi_slopes, seq, nullptr, B, T, NH, KVH, hs, s)) return;
    tcu_attention_forward_keys(out, lse, qkv, alibi_slopes, seq, nullptr, B, T, T, NH, KVH, hs, s);
}

/* tcu_attention_forward with the layer's variants (cuda_ops.h) */
extern "C" void tcu_attention_forward_var(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv,
                                          const float *alibi_slopes, const int32_t *seq,
                                          const tsr_attn_var *var, int B, int T, int NH, int KVH,
                                          int hs, tcu_stream s) {
    if (att_cudnn_forward(out, lse, qkv, alibi_slopes, seq, var, B, T, NH, KVH, hs, s)) return;
    tcu_attention_forward_keys(out, lse, qkv, alibi_slopes, seq, var, B, T, T, NH, KVH, hs, s);
}

/* tcu_attention_forward with the keys at kend.. masked (cuda_internal.h) */
extern "C" void tcu_attention_forward_keys(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv,
                                           const float *alibi_slopes, const int32_t *seq,
                                           const tsr_attn_var *var, int B, int T, int kend,
                                           int NH, int KVH, int hs, tcu_stream s) {
    const char *what = "tcu_attention_forward";
    TCU_REQUIRE_RULE(what, tcu_rule_attention, B, T, NH, KVH, hs);
    TCU_REQUIRE(kend >= 1 && kend <= T, what, tcu_msg("kend = %d: expected 1..T = %d", kend, T));
    TCU_REQUIRE(out && lse && qkv, what, "out, lse and qkv must not be NULL");
    TCU_REQUIRE(tcu_aligned16(qkv) && tcu_aligned16(out), what,
                "qkv and out must be 16-byte aligned");
    cudaStream_t st = reinterpret_cast<cudaStream_t>(s);
    const att_var av = att_var_of(var, hs, what);
    const bool two = tcu_attention_warp_rows(hs) == 32;
    const bool wg = tcu_attention_wgmma(hs);
#define ATT_FWD(HS, MS, WG)                                                                        \
    attention_forward_hs<HS, MS, WG>(out, lse, qkv, alibi_slopes, seq, av, B, T, kend, NH, KVH, st)
    if (hs == 64 && wg) ATT_FWD(64, 1, true);
    else if (hs == 128 && wg) ATT_FWD(128, 1, true);
    else if (hs == 32 && two) ATT_FWD(32, 2, false);
    else if (hs == 32) ATT_FWD(32, 1, false);
    else if (hs == 64 && two) ATT_FWD(64, 2, false);
    else if (hs == 64) ATT_FWD(64, 1, false);
    else if (hs == 128) ATT_FWD(128, 1, false);
    else ATT_FWD(256, 1, false);
#undef ATT_FWD
}

/* scratch of tcu_attention_backward: D = rowsum(dout * out), (B,NH,T) fp32, nothing else (dq, dk,
 * dv are complete in registers when a block ends and go straight into dqkv); with the fused dq
 * also its fp32 sums and turn counters (att_scratch). Depends on the switches as set now. */
extern "C" size_t tcu_attention_scratch_bytes(int B, int T, int NH, int KVH, int hs) {
    const size_t own = att_scratch(B, T, NH, hs).bytes;
#ifndef TCU_SIMT
    const size_t cudnn = tcu_cudnn_scratch_bytes(tcu_cudnn_shape{B, T, NH, KVH, hs});
    return cudnn > own ? cudnn : own;
#else
    (void)KVH;
    return own;
#endif
}

/* D = rowsum(dout * out) (B,NH,T) fp32: the backward's first kernel */
template <int HS>
static void att_rowdot(float *D, const bf16 *g, const tsr_bf16 *out, int B, int T, int NH,
                       int row0, cudaStream_t st) {
    const int C = NH * HS;
    const size_t nchunks = (size_t)B * (T - row0) * (C / 8);
    attention_backward_rowdot_kernel<HS><<<tcu_blocks(nchunks, 256), 256, 0, st>>>(
        D, g, reinterpret_cast<const bf16 *>(out), nchunks, T, C, NH, row0);
    TCU_CHECK_LAUNCH("tcu_attention_backward: rowsum(dout * out)");
}

/* dsinks[h] += -sum_{b,i} exp(sinks[h] - lse[b,h,i]) D[b,h,i]: each row's sink probability
 * times D_i = dout_i . out_i (the sink's logit is a constant: its gradient is -p_sink D).
 * One block per head, thread t summing rows t, t + 256, ... in order, then a fixed tree. */
__global__ void __launch_bounds__(256)
    attention_sink_grad_kernel(float *__restrict__ dsinks, const bf16 *__restrict__ sinks,
                               const float *__restrict__ lse, const float *__restrict__ D, int B,
                               int T, int NH) {
    __shared__ float red[256];
    const int h = blockIdx.x;
    const float sk = __bfloat162float(sinks[h]);
    float acc = 0.0f;
    for (long r = threadIdx.x; r < (long)B * T; r += 256) {
        const size_t at = ((size_t)(r / T) * NH + h) * T + (size_t)(r % T);
        acc -= expf(sk - lse[at]) * D[at];
    }
    tcu_block256_add(dsinks + h, acc, red);
}

/* the sink gradients from lse and the D the backward left at the start of its scratch */
static void att_sink_grads(float *dsinks, const bf16 *sinks, const float *lse, const float *D,
                           int B, int T, int NH, cudaStream_t st) {
    attention_sink_grad_kernel<<<NH, 256, 0, st>>>(dsinks, sinks, lse, D, B, T, NH);
    TCU_CHECK_LAUNCH("tcu_attention_backward: the sink gradients");
}

/* the backward's launches: D, then dk/dv per key block and dq per query block (or, with the
 * fused dq, dk/dv/dq in one kernel), MS slabs a warp, or (WG, never fused) on wgmma with MS = 1 */
template <int HS, int MS, bool WG>
static void attention_backward_hs(tsr_bf16 *dqkv, const tsr_bf16 *dout, const tsr_bf16 *qkv,
                                  const tsr_bf16 *out, const float *lse, const float *slopes,
                                  const int32_t *seq, const att_var &av, void *scratch, int B,
                                  int T, int kend, int NH, int KVH, bool set, bool fused,
                                  cudaStream_t st) {
    using Tl = att_tiles<HS, MS>;
    const char *what = "tcu_attention_backward";
    const float scale = av.scale, sl2 = scale * kLog2e;
    bf16 *dq = reinterpret_cast<bf16 *>(dqkv);
    const bf16 *g = reinterpret_cast<const bf16 *>(dout), *x = reinterpret_cast<const bf16 *>(qkv);
    float *D = static_cast<float *>(scratch);

    att_rowdot<HS>(D, g, out, B, T, NH, tcu_attention_keys_row0(kend, T), st);

    /* the key blocks below kend (the masked keys' dk, dv are nobody's; kend = T: all) */
    const dim3 gkv((unsigned)((kend + Tl::KV_BK - 1) / Tl::KV_BK * Tl::KV_NS), (unsigned)KVH,
                   (unsigned)B);
    if constexpr (!WG && Tl::KV_NS == 1) {
        if (fused) {
            const att_scratch_layout L = att_scratch(B, T, NH, HS);
            unsigned char *base = static_cast<unsigned char *>(scratch);
            float *dqacc = reinterpret_cast<float *>(base + L.acc);
            int *turns = reinterpret_cast<int *>(base + L.turns);
            /* one rule, two places: the scratch's query tiles and the kernel's */
            TCU_REQUIRE(L.nqt == (T + Tl::KV_BQ - 1) / Tl::KV_BQ, what,
                        "the scratch's query tiles are not the kernel's");
            TCU_CHECK(cudaMemsetAsync(turns, 0, L.bytes - L.turns, st),
                      "tcu_attention_backward: the fused dq's turn counters");
            auto kv = attention_backward_dkdv_keytile_kernel<HS, MS, true, false>;
            att_smem_limit((const void *)kv, Tl::kv_fused_smem,
                           "tcu_attention_backward: shared memory (dk, dv, dq)");
            kv<<<gkv, ATT_THREADS, Tl::kv_fused_smem, st>>>(dq, g, x, lse, D, slopes, seq, T, T,
                                                            NH, KVH, scale, sl2, set, dqacc,
                                                            turns, L.nqt, av);
            TCU_CHECK_LAUNCH(what);
            return;
        }
    }
    const size_t kv_smem = WG ? Tl::kv_smem_cm : Tl::kv_smem;
    auto kv = attention_backward_dkdv_keytile_kernel<HS, MS, false, WG>;
    att_smem_limit((const void *)kv, kv_smem,
                   WG ? "tcu_attention_backward: shared memory (dk, dv; wgmma)"
                      : "tcu_attention_backward: shared memory (dk, dv)");
    kv<<<gkv, ATT_THREADS, kv_smem, st>>>(dq, g, x, lse, D, slopes, seq, T, kend, NH, KVH, scale,
                                          sl2, set, nullptr, nullptr, 0, av);
    TCU_CHECK_LAUNCH(WG ? "tcu_attention_backward: dk, dv (wgmma)"
                        : "tcu_attention_backward: dk, dv");

    const size_t q_smem = WG ? Tl::dq_smem_cm : Tl::dq_smem;
    auto qk = attention_backward_dq_querytile_kernel<HS, MS, WG>;
    att_smem_limit((const void *)qk, q_smem,
                   WG ? "tcu_attention_backward: shared memory (dq; wgmma)"
                      : "tcu_attention_backward: shared memory (dq)");
    const dim3 gq((unsigned)att_query_tiles(T, kend, Tl::DQ_BR), (unsigned)NH, (unsigned)B);
    qk<<<gq, ATT_THREADS, q_smem, st>>>(dq, g, x, lse, D, slopes, seq, T, kend, NH, KVH, scale,
                                        sl2, set, av);
    TCU_CHECK_LAUNCH(WG ? "tcu_attention_backward (wgmma)" : what);
}

/* dqkv (B,T,QKV) bf16 += (TSR_GRAD_SET: =) the gradient of ops.h attention_forward, from dout
 * (B,T,NH*hs), out and lse of the forward, qkv, slopes, seq as given to it; scratch:
 * tcu_attention_scratch_bytes bytes. Three kernels: D = rowsum(dout * out) into scratch, dk/dv
 * per key tile of each key/value head (its query heads summed inside the block), dq per query
 * tile; with the fused dq (tcu_attention_set_dq_fused) the turn counters' memset and the first
 * two kernels, the second adding dq too. */
extern "C" void tcu_attention_backward(tsr_bf16 *dqkv, const tsr_bf16 *dout, const tsr_bf16 *qkv,
                                       const tsr_bf16 *out, const float *lse,
                                       const float *alibi_slopes, const int32_t *seq,
                                       void *scratch, int B, int T, int NH, int KVH, int hs,
                                       tsr_grad_mode mode, tcu_stream s) {
    if (att_cudnn_backward(dqkv, dout, qkv, out, lse, alibi_slopes, seq, nullptr, scratch, B, T,
                           NH, KVH, hs, mode, s))
        return;
    tcu_attention_backward_keys(dqkv, dout, qkv, out, lse, alibi_slopes, seq, nullptr, scratch, B,
                                T, T, NH, KVH, hs, mode, s);
}

/* tcu_attention_backward with the layer's variants (cuda_ops.h): var->dsinks fp32 += */
extern "C" void tcu_attention_backward_var(tsr_bf16 *dqkv, const tsr_bf16 *dout,
                                           const tsr_bf16 *qkv, const tsr_bf16 *out,
                                           const float *lse, const float *alibi_slopes,
                                           const int32_t *seq, const tsr_attn_var *var,
                                           void *scratch, int B, int T, int NH, int KVH, int hs,
                                           tsr_grad_mode mode, tcu_stream s) {
    if (att_cudnn_backward(dqkv, dout, qkv, out, lse, alibi_slopes, seq, var, scratch, B, T, NH,
                           KVH, hs, mode, s))
        return;
    tcu_attention_backward_keys(dqkv, dout, qkv, out, lse, alibi_slopes, seq, var, scratch, B, T,
                                T, NH, KVH, hs, mode, s);
}

/* tcu_attention_backward with the keys at kend.. masked (cuda_internal.h): the fused dq only
 * where nothing is (kend = T); the masked keys' dk, dv are not written */
extern "C" void tcu_attention_backward_keys(tsr_bf16 *dqkv, const tsr_bf16 *dout,
                                            const tsr_bf16 *qkv, const tsr_bf16 *out,
                                            const float *lse, const float *alibi_slopes,
                                            const int32_t *seq, const tsr_attn_var *var,
                                            void *scratch, int B, int T, int kend, int NH, int KVH,
                                            int hs, tsr_grad_mode mode, tcu_stream s) {
    const char *what = "tcu_attention_backward";
    TCU_REQUIRE_RULE(what, tcu_rule_attention, B, T, NH, KVH, hs);
    TCU_REQUIRE(kend >= 1 && kend <= T, what, tcu_msg("kend = %d: expected 1..T = %d", kend, T));
    TCU_REQUIRE(dqkv && dout && qkv && out && lse, what,
                "dqkv, dout, qkv, out and lse must not be NULL");
    TCU_REQUIRE(tcu_aligned16(dqkv) && tcu_aligned16(dout) && tcu_aligned16(qkv) &&
                    tcu_aligned16(out),
                what, "dqkv, dout, qkv and out must be 16-byte aligned");
    TCU_REQUIRE(scratch != nullptr, what, "scratch is NULL");
    cudaStream_t st = reinterpret_cast<cudaStream_t>(s);
    const bool set = mode == TSR_GRAD_SET, two = tcu_attention_warp_rows(hs) == 32;
    const bool fused = att_dq_fused_at(hs) && kend == T, wg = tcu_attention_wgmma(hs) && !fused;
    const att_var av = att_var_of(var, hs, what);
    TCU_REQUIRE(!(av.sinks && var->dsinks && kend < T), what,
                "sink gradients with keys masked from kend: the ring takes them (cuda_ring.cu)");
#define ATT_BWD(HS, MS, WG)                                                                        \
    attention_backward_hs<HS, MS, WG>(dqkv, dout, qkv, out, lse, alibi_slopes, seq, av, scratch,   \
                                      B, T, kend, NH, KVH, set, fused, st)
    if (hs == 64 && wg) ATT_BWD(64, 1, true);
    else if (hs == 128 && wg) ATT_BWD(128, 1, true);
    else if (hs == 32 && two) ATT_BWD(32, 2, false);
    else if (hs == 32) ATT_BWD(32, 1, false);
    else if (hs == 64 && two) ATT_BWD(64, 2, false);
    else if (hs == 64) ATT_BWD(64, 1, false);
    else if (hs == 128) ATT_BWD(128, 1, false);
    else ATT_BWD(256, 1, false);
#undef ATT_BWD
    if (av.sinks && var->dsinks)
        att_sink_grads(var->dsinks, av.sinks, lse, static_cast<const float *>(scratch), B, T, NH,
                       st);
}
