/* cpu_attention.c — causal multi-head attention, fp32, for the CPU backend; optionally
 * block-diagonal (segment ids: a row attends only within its own segment, model.attn_mask =
 * document).
 *
 * Grouped-query attention (ops.h): query head h reads key/value head h / (NH/KVH); KVH = NH is
 * multi-head attention. The forward's task is one (b, h) pair, the backward's one (b, g) pair
 * (a key/value head with its query heads, in head order), each done by one thread, so dq, dk, dv
 * are summed in a fixed order whatever the thread count. Every product is a small matrix product
 * computed by tile(), MR x NR register tiles (NR/2 and NR/4 wide where a head size leaves less)
 * over contiguous rows of B (plain C that GCC vectorises: 8 vector accumulators with AVX2, or
 * AVX-512 when the build targets it). Causal
 * structure skips the upper triangle; att holds exact zeros above the diagonal, so contraction
 * ranges may overshoot the diagonal by less than a tile. The heads are packed into per-thread
 * scratch (allocated once per call) so that tiles walk contiguous memory: forward K^T (hs,T) and
 * V (T,hs); backward V^T (hs,T), q, k, dout (T,hs) and dS for a block of RB rows (RB,T).
 *
 * Segments. Row i sees columns [lo(i), i], lo(i) the start of its segment (0 without segment ids).
 * lo is non-decreasing, so a tile of rows starting at i0 needs columns from lo(i0) on: every
 * column tile left of it is skipped, and the columns of a tile that lie before a later row's lo
 * (or after the diagonal) hold exact zeros in att and dS, so the contractions may overshoot into
 * them. A row's softmax runs over its segment alone, from its first column, so its scores,
 * probabilities and output are the same bits as those of the segment computed alone at the start
 * of a sequence (zero terms add exactly); dq, dk, dv agree with that within rounding only, because
 * dk and dv are summed in blocks of RB rows counted from the start of the sequence. Without segment
 * ids lo = 0 and every loop is the plain causal one.
 *
 * Variants (ops.h tsr_attn_var). A sliding window of W moves lo(i) up to i - W + 1 and hi(j) down
 * to j + W: both stay non-decreasing, so the loops above are the window's too, and a row's work is
 * O(W), not O(i) (the blocks left of the band are never computed). Sinks add e^(sink_h - max) to
 * each row's denominator; the backward's sink gradient takes each row's sink probability as
 * 1 - sum_j att[i,j] (in double), so it needs neither the scores nor the ALiBi slopes again.
 */
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu_internal.h"

#define MR 4  /* tile rows */
#if defined(__AVX512F__)
#define NR 32 /* tile columns: two vectors, for 8 vector accumulators */
#else
#define NR 16
#endif
#define RB 64 /* rows of dS per backward block */

static inline int imin(int a, int b) { return a < b ? a : b; }

/* Ct[r][c] = alpha * sum_{k<K} A[r*rsa + k*csa] * B[k*ldb + c]  (+ Ct[r][c] if accumulate)
 * for r < MR, c < W; Ct[r][c] is Cm[r*ldc + c]. Constant trip counts only, so that acc lives in
 * registers (a variable index would force it to the stack); not inlined, for the same reason.
 * Defined for three widths W: NR, NR/2 and NR/4 (two, one and half a vector), so that a head size
 * that is not a multiple of NR (24 = 16 + 8, 48 = 32 + 16, 80 = 64 + 16) still runs in register
 * tiles. Every element is the same sum in the same order (k ascending, fused multiply-adds) in
 * each of them and in tile_edge, so how a product is split into tiles never changes its bits. */
#define DEFINE_TILE(NAME, W)                                                                     \
    static void NAME(int K, const float *A, ptrdiff_t rsa, ptrdiff_t csa, const float *B,       \
                     ptrdiff_t ldb, float *Cm, ptrdiff_t ldc, float alpha, int accumulate) {    \
        float acc[MR][W] = {{0.0f}};                                                             \
        for (int k = 0; k < K; k++) {                                                            \
            const float *a = A + k * csa, *b = B + k * ldb;                                      \
            const float a0 = a[0], a1 = a[rsa], a2 = a[2 * rsa], a3 = a[3 * rsa];                \
            for (int c = 0; c < W; c++) {                                                        \
                acc[0][c] = fmaf(a0, b[c], acc[0][c]);                                           \
                acc[1][c] = fmaf(a1, b[c], acc[1][c]);                                           \
                acc[2][c] = fmaf(a2, b[c], acc[2][c]);                                           \
                acc[3][c] = fmaf(a3, b[c], acc[3][c]);                                           \
            }                                                                                    \
        }                                                                                        \
        for (int r = 0; r < MR; r++) {                                                           \
            float *o = Cm + r * ldc;                                                             \
            if (accumulate)                                                                      \
                for (int c = 0; c < W; c++) o[c] += alpha * acc[r][c];                           \
            else                                                                                 \
                for (int c = 0; c < W; c++) o[c] = alpha * acc[r][c];                            \
        }                                                                                        \
    }
DEFINE_TILE(tile_full, NR)
DEFINE_TILE(tile_half, NR / 2)
DEFINE_TILE(tile_quarter, NR / 4)
#undef DEFINE_TILE

/* The same for a partial tile, r < m <= MR, c < n <= NR (the edges of a matrix). */
static void tile_edge(int m, int n, int K, const float *A, ptrdiff_t rsa, ptrdiff_t csa,
                      const float *B, ptrdiff_t ldb, float *Cm, ptrdiff_t ldc, float alpha,
                      int accumulate) {
    for (int r = 0; r < m; r++) {
        float acc[NR] = {0.0f};
        for (int k = 0; k < K; k++) {
            const float a = A[r * rsa + k * csa];
            for (int c = 0; c < n; c++) acc[c] = fmaf(a, B[k * ldb + c], acc[c]);
        }
        float *o = Cm + r * ldc;
        for (int c = 0; c < n; c++) o[c] = alpha * acc[c] + (accumulate ? o[c] : 0.0f);
    }
}

/* An m x n tile (m <= MR, n <= NR): full rows in register tiles of NR, NR/2 and NR/4 columns,
 * what is left (fewer than MR rows, or fewer than NR/4 columns) in tile_edge. */
static inline void tile(int m, int n, int K, const float *A, ptrdiff_t rsa, ptrdiff_t csa,
                        const float *B, ptrdiff_t ldb, float *Cm, ptrdiff_t ldc, float alpha,
                        int accumulate) {
    if (m < MR) {
        tile_edge(m, n, K, A, rsa, csa, B, ldb, Cm, ldc, alpha, accumulate);
        return;
    }
    if (n == NR) {
        tile_full(K, A, rsa, csa, B, ldb, Cm, ldc, alpha, accumulate);
        return;
    }
    int c = 0;
    if (n - c >= NR / 2) {
        tile_half(K, A, rsa, csa, B + c, ldb, Cm + c, ldc, alpha, accumulate);
        c += NR / 2;
    }
    if (n - c >= NR / 4) {
        tile_quarter(K, A, rsa, csa, B + c, ldb, Cm + c, ldc, alpha, accumulate);
        c += NR / 4;
    }
    if (c < n) tile_edge(m, n - c, K, A, rsa, csa, B + c, ldb, Cm + c, ldc, alpha, accumulate);
}

/* dst[d*T + j] = src[j*lds + d] for j < T, d < hs (a head, transposed) */
static void transpose_head(float *dst, const float *src, ptrdiff_t lds, int T, int hs) {
    /* 16 columns of dst at a time, so each destination cache line is written whole (rows of dst
     * are often 4 KiB apart and would evict each other one float at a time) */
    for (int j0 = 0; j0 < T; j0 += 16) {
        const int jn = imin(16, T - j0);
        for (int d = 0; d < hs; d++)
            for (int j = 0; j < jn; j++) dst[(size_t)d * T + j0 + j] = src[(j0 + j) * lds + d];
    }
}

/* dst[j*hs + d] = src[j*lds + d] (a head, packed: tiles then walk it without TLB misses) */
static void pack_head(float *dst, const float *src, ptrdiff_t lds, int T, int hs) {
    for (int j = 0; j < T; j++)
        memcpy(dst + (size_t)j * hs, src + j * lds, (size_t)hs * sizeof *dst);
}

/* Row i of causal attention scores (already scaled) -> probabilities in place, over its segment
 * [lo, i]: row[j] = softmax_j(c(row[j]) - slope (i - j)) for lo <= j <= i, 0 for j < lo and
 * i < j < T; c(s) = cap tanh(s / cap) with a soft cap (cap > 0), else s.
 * The segment is addressed from its first column, so the arithmetic (and the order of the
 * vectorised sums) depends on the segment alone, not on where it lies in the row. */
static void softmax_causal_row(float *row, int lo, int i, int T, float slope, const float *sink,
                               float cap) {
    float *r = row + lo;
    const int n = i - lo + 1;
    for (int j = 0; j < lo; j++) row[j] = 0.0f;
    if (cap > 0.0f)
        for (int j = 0; j < n; j++) r[j] = cap * tanhf(r[j] / cap);
    if (slope != 0.0f)
        for (int j = 0; j < n; j++) r[j] -= slope * (float)(n - 1 - j);
    float mx = sink ? *sink : -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < n; j++) mx = r[j] > mx ? r[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
        float e = cpu_expf(r[j] - mx);
        r[j] = e;
        sum += e;
    }
    if (sink) sum += cpu_expf(*sink - mx); /* the sink's share of the denominator */
    float inv = 1.0f / sum;
    for (int j = 0; j < n; j++) r[j] *= inv;
    for (int j = i + 1; j < T; j++) row[j] = 0.0f;
}

/* lo[i] = first index of the segment holding i (a run of equal ids in seq (T)), hi[i] = one past
 * its last index; without seq one segment: lo = 0, hi = T. Then a window W > 0 narrows both:
 * lo[i] >= i - W + 1 (the first column row i sees), hi[i] <= i + W (one past the last row that
 * sees column i). Both are non-decreasing in i. */
static void segment_bounds(int *lo, int *hi, const int32_t *seq, int T, int W) {
    if (!seq) {
        for (int i = 0; i < T; i++) lo[i] = 0, hi[i] = T;
    } else {
        lo[0] = 0;
        for (int i = 1; i < T; i++) lo[i] = seq[i] == seq[i - 1] ? lo[i - 1] : i;
        hi[T - 1] = T;
        for (int i = T - 2; i >= 0; i--) hi[i] = seq[i] == seq[i + 1] ? hi[i + 1] : i + 1;
    }
    for (int i = 0; i < T && W > 0; i++) {
        if (lo[i] < i - W + 1) lo[i] = i - W + 1;
        if (hi[i] > i + W) hi[i] = i + W;
    }
}

static int var_window(const tsr_attn_var *var) { return var ? var->window : 0; }
static float var_scale(const tsr_attn_var *var, int hs) {
    return var && var->scale > 0.0f ? var->scale : 1.0f / sqrtf((float)hs);
}
static float var_cap(const tsr_attn_var *var) { return var ? var->softcap : 0.0f; }
static const float *var_sink(const tsr_attn_var *var, int h) {
    return var && var->sinks ? var->sinks + h : NULL;
}
/* the value heads' size: var->dv (multi-head latent attention), else hs */
static int var_vs(const tsr_attn_var *var, int hs) { return var && var->dv > 0 ? var->dv : hs; }

/* Grouped-query attention: query head h reads key/value head g = h / (NH/KVH). In a qkv row
 * [q heads | k heads | v heads] query head h starts at column h hs, key head g at NH hs + g hs,
 * value head g at (NH + KVH) hs + g vs, vs the value heads' size (hs, or var->dv: multi-head
 * latent attention's v_head_dim) (KVH = NH, vs = hs: the 3C layout of multi-head attention). */
static ptrdiff_t k_col(int h, int NH, int KVH, int hs) {
    return (ptrdiff_t)(NH + h / (NH / KVH)) * hs;
}
static ptrdiff_t v_col(int h, int NH, int KVH, int hs, int vs) {
    return (ptrdiff_t)(NH + KVH) * hs + (ptrdiff_t)(h / (NH / KVH)) * vs;
}

/* the decode entries read value heads of hs (ops.h tsr_attn_var's dv: the training ones only) */
static void check_decode_var(const char *op, const tsr_attn_var *var, int hs) {
    if (var_vs(var, hs) != hs)
        tsr_die(TSR_EXIT_INTERNAL, "cpu %s: value heads of %d with query/key heads of %d: the "
                "decode entries take hs-sized value heads only", op, var_vs(var, hs), hs);
}

/* the preconditions of grouped-query attention (ops.h): KVH divides NH */
static void check_heads(const char *op, int NH, int KVH, int hs) {
    if (NH < 1 || KVH < 1 || hs < 1 || NH % KVH)
        tsr_die(TSR_EXIT_INTERNAL,
                "cpu %s: NH = %d query heads, KVH = %d key/value heads, hs = %d: expected "
                "KVH >= 1 dividing NH, hs >= 1",
                op, NH, KVH, hs);
}

/* s[i,j] = q_i . k_j / sqrt(hs) - slope_h (i - j) (lo(i) <= j <= i), k and v those of the key/value
 * head g = h / (NH/KVH) of query head h;
 * att[b,h,i,:] = softmax_j s[i,:];  out[b,i,h*vs:(h+1)*vs] = sum_j att[b,h,i,j] v_j.
 * out (B,T,C), C = NH vs (vs = var_vs), att (B,NH,T,T), qkv (B,T,QKV) [q | k | v] (k_col, v_col),
 * alibi_slopes (NH) or NULL, seq (B,T) segment ids or NULL. One task per (b, h): a key/value
 * head is packed once per query head that reads it (O(T hs) beside the head's O(T^2 hs)). */
void cpu_attention_forward(float *out, float *att, const float *qkv, const float *alibi_slopes,
                           const int32_t *seq, const tsr_attn_var *var, int B, int T, int NH,
                           int KVH, int hs) {
    const int vs = var_vs(var, hs), C = NH * vs;
    check_heads("attention_forward", NH, KVH, hs);
    const ptrdiff_t C3 = (ptrdiff_t)(NH + KVH) * hs + (ptrdiff_t)KVH * vs;
    const float scale = var_scale(var, hs);
#pragma omp parallel
    {
        float *kt = tsr_malloc((size_t)(hs + vs) * T * sizeof *kt), *vp = kt + (size_t)hs * T;
        int *lo = tsr_malloc((size_t)2 * T * sizeof *lo), *hi = lo + T;
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            const float *row = qkv + (size_t)b * T * C3, *q = row + (size_t)h * hs;
            const float *k = row + k_col(h, NH, KVH, hs), *v = row + v_col(h, NH, KVH, hs, vs);
            float *a = att + (size_t)bh * T * T;
            float *o = out + (size_t)b * T * C + (size_t)h * vs;
            const float slope = alibi_slopes ? alibi_slopes[h] : 0.0f;
            segment_bounds(lo, hi, seq ? seq + (size_t)b * T : NULL, T, var_window(var));
            transpose_head(kt, k, C3, T, hs); /* K^T (hs,T) */
            pack_head(vp, v, C3, T, vs);      /* V (T,vs) */
            for (int i0 = 0; i0 < T; i0 += MR) {
                /* rows i0..iend-1 see columns jlo <= j < iend (lo is non-decreasing) */
                const int m = imin(MR, T - i0), iend = i0 + m, jlo = lo[i0];
                /* scores; the last tile may spill past the diagonal, and a later row's segment
                 * may start after jlo (softmax zeroes both) */
                for (int j0 = jlo; j0 < iend; j0 += NR)
                    tile(m, imin(NR, T - j0), hs, q + i0 * C3, C3, 1, kt + j0, T,
                         a + (size_t)i0 * T + j0, T, scale, 0);
                for (int i = i0; i < iend; i++)
                    softmax_causal_row(a + (size_t)i * T, lo[i], i, T, slope, var_sink(var, h),
                                       var_cap(var));
                for (int d0 = 0; d0 < vs; d0 += NR)
                    tile(m, imin(NR, vs - d0), iend - jlo, a + (size_t)i0 * T + jlo, T, 1,
                         vp + (size_t)jlo * vs + d0, vs, o + (size_t)i0 * C + d0, C, 1.0f, 0);
            }
        }
        free(lo);
        free(kt);
    }
}

/* A row's sink probability: what its n probabilities leave of 1 (>= 0). */
static float sink_prob(const float *a, int n) {
    double sum = 0.0;
    for (int j = 0; j < n; j++) sum += a[j];
    return sum < 1.0 ? (float)(1.0 - sum) : 0.0f;
}

/* A soft cap's derivative on row i's dS over n columns from j0: dS[j] *= 1 - tanh(s_j / cap)^2,
 * s_j = scale q_i . k_j recomputed from the packed q (qi) and keys (kp (T,hs)). */
static void softcap_rows(float *di, const float *qi, const float *kp, int j0, int n, int hs,
                         float scale, float cap) {
    for (int j = 0; j < n; j++) {
        const float *k = kp + (size_t)(j0 + j) * hs;
        float s = 0.0f;
        for (int d = 0; d < hs; d++) s = fmaf(qi[d], k[d], s);
        const float t = tanhf(scale * s / cap);
        di[j] *= 1.0f - t * t;
    }
}

/* The sizes of one head's backward: T rows, query/key head size hs, value head size vs, C3
 * elements between a qkv row and the next; the scale and the soft cap of its scores */
typedef struct head_dims {
    int T, hs, vs;
    ptrdiff_t C3;
    float scale, cap;
} head_dims;

/* One query head's share of the backward, its head's packed operands given: q, k (T,hs), dout
 * (T,vs) as qp, kp, gp, V^T (vs,T) as vt; a (T,T) its probabilities; ds (RB,T) scratch; lo, hi its rows'
 * segment bounds. dq_i += sum_j dS[i,j] k_j into dq; dk_j += sum_i dS[i,j] q_i and
 * dv_j += sum_i att[i,j] dout_i into dk, dv (rows C3 apart, all three); with a sink,
 * *dsink -= p_sink(i) D_i over the rows (D_i = sum_j att[i,j] dA[i,j] = dout_i . out_i). */
static void head_backward(float *dq, float *dk, float *dv, float *dsink, const float *a,
                          const float *qp, const float *kp, const float *vt, const float *gp,
                          float *ds, const int *lo, const int *hi, const head_dims *hd) {
    const int T = hd->T, hs = hd->hs, vs = hd->vs;
    const ptrdiff_t C3 = hd->C3;
    const float scale = hd->scale, cap = hd->cap;
    for (int r0 = 0; r0 < T; r0 += RB) {
        const int r1 = imin(T, r0 + RB), blo = lo[r0]; /* the block sees columns >= blo */
        /* dA for rows r0..r1-1, columns lo(i0) <= j <= i (tiles may spill past both
         * ends) */
        for (int i0 = r0; i0 < r1; i0 += MR) {
            const int m = imin(MR, r1 - i0), iend = i0 + m, jlo = lo[i0];
            for (int j0 = jlo; j0 < iend; j0 += NR)
                tile(m, imin(NR, T - j0), vs, gp + (size_t)i0 * vs, vs, 1, vt + j0, T,
                     ds + (size_t)(i0 - r0) * T + j0, T, 1.0f, 0);
        }
        /* dS over [lo(i), i]; zero for blo <= j < lo(i) and i < j < r1 (the later
         * contractions may overshoot into both) */
        for (int i = r0; i < r1; i++) {
            const int li = lo[i], n = i - li + 1;
            const float *ai = a + (size_t)i * T + li;
            float *row = ds + (size_t)(i - r0) * T, *di = row + li;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j < n; j++) dot += ai[j] * di[j];
            if (dsink) *dsink -= sink_prob(ai, n) * dot;
            for (int j = 0; j < n; j++) di[j] = scale * ai[j] * (di[j] - dot);
            if (cap > 0.0f) softcap_rows(di, qp + (size_t)i * hs, kp, li, n, hs, scale, cap);
            for (int j = blo; j < li; j++) row[j] = 0.0f;
            for (int j = i + 1; j < r1; j++) row[j] = 0.0f;
        }
        /* dq_i += sum_{lo(i) <= j <= i} dS[i,j] k_j */
        for (int i0 = r0; i0 < r1; i0 += MR) {
            const int m = imin(MR, r1 - i0), iend = i0 + m, jlo = lo[i0];
            for (int d0 = 0; d0 < hs; d0 += NR)
                tile(m, imin(NR, hs - d0), iend - jlo, ds + (size_t)(i0 - r0) * T + jlo, T,
                     1, kp + (size_t)jlo * hs + d0, hs, dq + i0 * C3 + d0, C3, 1.0f, 1);
        }
        /* dk_j += sum_{i in block, j <= i < hi(j)} dS[i,j] q_i;
         * dv_j += sum att[i,j] dout_i (same rows; hi is non-decreasing, so the tile's
         * last column bounds the rows of all its columns) */
        for (int j0 = blo; j0 < r1; j0 += MR) {
            const int m = imin(MR, r1 - j0), ist = j0 > r0 ? j0 : r0;
            const int K = imin(r1, hi[j0 + m - 1]) - ist;
            if (K <= 0) continue;
            for (int d0 = 0; d0 < hs; d0 += NR)
                tile(m, imin(NR, hs - d0), K, ds + (size_t)(ist - r0) * T + j0, 1, T,
                     qp + (size_t)ist * hs + d0, hs, dk + j0 * C3 + d0, C3, 1.0f, 1);
            for (int d0 = 0; d0 < vs; d0 += NR)
                tile(m, imin(NR, vs - d0), K, a + (size_t)ist * T + j0, 1, T,
                     gp + (size_t)ist * vs + d0, vs, dv + j0 * C3 + d0, C3, 1.0f, 1);
        }
    }
}

/* With dA[i,j] = dout_i . v_j and dS[i,j] = att[i,j] (dA[i,j] - sum_l att[i,l] dA[i,l]) / sqrt(hs):
 *   dq_i += sum_j dS[i,j] k_j;  dk_j += sum_i dS[i,j] q_i;  dv_j += sum_i att[i,j] dout_i.
 * Rows are done in blocks of RB; dS is kept for one block. Packed copies of q, k, dout (T,hs) and
 * V^T (hs,T) make every tile walk contiguous memory. With segments, row i has terms for columns
 * [lo(i), i] only and column j for rows [j, hi(j)) only; the loops skip the rest.
 * Grouped-query attention: a key/value head's gradient sums over its NH/KVH query heads, so one
 * task is a (b, g) pair, which packs k and v once and adds its query heads' terms in head order:
 * the same bits for any thread count (with KVH = NH a task is one head, as before GQA).
 * dqkv (B,T,QKV) +=, dout (B,T,C), C = NH vs (vs = var_vs), qkv (B,T,QKV), att (B,NH,T,T) from
 * the forward pass, seq (B,T) the forward's segment ids or NULL */
void cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                            const int32_t *seq, const tsr_attn_var *var, int B, int T, int NH,
                            int KVH, int hs) {
    const int vs = var_vs(var, hs), C = NH * vs, R = NH / (KVH > 0 ? KVH : 1);
    check_heads("attention_backward", NH, KVH, hs);
    /* each (b, h) sums its sink gradient alone; the heads' sums then add in b order */
    float *dsk = var && var->sinks && var->dsinks ? tsr_calloc((size_t)B * NH, sizeof *dsk) : NULL;
    const ptrdiff_t C3 = (ptrdiff_t)(NH + KVH) * hs + (ptrdiff_t)KVH * vs;
    const size_t th = (size_t)T * hs, tv = (size_t)T * vs;
    const head_dims hd = {T, hs, vs, C3, var_scale(var, hs), var_cap(var)};
#pragma omp parallel
    {
        float *vt = tsr_malloc((2 * th + 2 * tv + (size_t)RB * T) * sizeof *vt);
        float *qp = vt + tv, *kp = qp + th, *gp = kp + th, *ds = gp + tv;
        int *lo = tsr_malloc((size_t)2 * T * sizeof *lo), *hi = lo + T;
#pragma omp for schedule(static)
        for (int bg = 0; bg < B * KVH; bg++) {
            const int b = bg / KVH, h0 = (bg % KVH) * R;
            const size_t base = (size_t)b * T * C3;
            const ptrdiff_t kc = k_col(h0, NH, KVH, hs), vc = v_col(h0, NH, KVH, hs, vs);
            segment_bounds(lo, hi, seq ? seq + (size_t)b * T : NULL, T, var_window(var));
            transpose_head(vt, qkv + base + vc, C3, T, vs);
            pack_head(kp, qkv + base + kc, C3, T, hs);
            for (int h = h0; h < h0 + R; h++) {
                pack_head(qp, qkv + base + (size_t)h * hs, C3, T, hs);
                pack_head(gp, dout + (size_t)b * T * C + (size_t)h * vs, C, T, vs);
                head_backward(dqkv + base + (size_t)h * hs, dqkv + base + kc, dqkv + base + vc,
                              dsk ? dsk + (size_t)b * NH + h : NULL,
                              att + ((size_t)b * NH + h) * T * T, qp, kp, vt, gp, ds, lo, hi, &hd);
            }
        }
        free(lo);
        free(vt);
    }
    for (int b = 0; dsk && b < B; b++)
        for (int h = 0; h < NH; h++) var->dsinks[h] += dsk[(size_t)b * NH + h];
    free(dsk);
}

/* ---- decoding over a KV cache ------------------------------------------------------------- */

/* A layer's cache holds cap positions as a ring: position p at index p % cap. A full layer's cap
 * is the whole context (p < cap: index p); a sliding layer's is its window W (ops.h), so it keeps
 * the last W positions only. */

/* Keys and values of rows p0..p0+c-1 (from qkv (c,QKV) = [q | k | v]) into one layer's cache:
 * kt (KVH, hs, cap) keys transposed per head, v (KVH, cap, hs), position p at index p % cap. */
static void cache_store(float *kt, float *v, const float *qkv, int p0, int c, int cap, int NH,
                        int KVH, int hs) {
    const size_t QKV = (size_t)(NH + 2 * KVH) * hs;
    for (int i = 0; i < c; i++) {
        const float *k = qkv + i * QKV + (size_t)NH * hs, *vi = k + (size_t)KVH * hs;
        const size_t p = (size_t)(p0 + i) % (size_t)cap;
        for (int g = 0; g < KVH; g++) {
            float *ktg = kt + (size_t)g * hs * cap + p;
            for (int d = 0; d < hs; d++) ktg[(size_t)d * cap] = k[g * hs + d];
            memcpy(v + ((size_t)g * cap + p) * hs, vi + g * hs, (size_t)hs * sizeof(float));
        }
    }
}

/* One head of one row at position p that sees positions s..p of one key/value head's ring (kt,
 * v; s and p absolute, p - s < cap): the same arithmetic as cpu_attention_forward's tiles, one
 * column at a time, columns in position order (index (s + j) % cap: the ring's two runs):
 *   s_j = (fmaf-chain over d of q_d k_j[d]) * scale,  a = softmax_causal_row(s),
 *   out[d] = fmaf-chain over j of a_j v_j[d].
 * q (hs), kt (hs, cap), v (cap, hs), row (p-s+1) scratch, out (hs) */
static void decode_row(float *out, float *row, const float *q, const float *kt, const float *v,
                       int cap, int hs, int s, int p, float slope, float scale, const float *sink,
                       float softcap) {
    const int n = p - s + 1, a0 = s % cap, n1 = imin(n, cap - a0); /* run 1: a0.., run 2: 0.. */
    for (int j = 0; j < n; j++) row[j] = 0.0f;
    for (int d = 0; d < hs; d++) {
        const float a = q[d], *k = kt + (size_t)d * cap;
        for (int j = 0; j < n1; j++) row[j] = fmaf(a, k[a0 + j], row[j]);
        for (int j = n1; j < n; j++) row[j] = fmaf(a, k[j - n1], row[j]);
    }
    for (int j = 0; j < n; j++) row[j] = scale * row[j];
    softmax_causal_row(row, 0, n - 1, n, slope, sink, softcap);
    for (int d = 0; d < hs; d++) out[d] = 0.0f;
    for (int j = 0; j < n; j++) {
        const float a = row[j], *vj = v + (size_t)(j < n1 ? a0 + j : j - n1) * hs;
        for (int d = 0; d < hs; d++) out[d] = fmaf(a, vj[d], out[d]);
    }
}

/* The first cache position a row at position p sees: its segment's start seg, or with a window
 * W > 0 position p - W + 1 if later (the forward's lo). */
static int window_start(int seg, int p, int W) {
    return W > 0 && p - W + 1 > seg ? p - W + 1 : seg;
}

/* Attention work (multiply-adds) below which a decode step stays on one thread. */
#define DECODE_PAR_MIN 32768

/* out (c, NH hs): each query head h of rows p0..p0+c-1 over key/value head g = h / (NH/KVH) of
 * the cache (see ops.h); one task per (row, query head). When the chunk's keys wrap round the
 * ring (a sliding layer's, p0 + c > cap), a later row's key would overwrite one an earlier row
 * still sees: the rows then go one at a time (the same bits). */
void cpu_attention_decode(float *out, float *kt, float *v, const float *qkv,
                          const float *alibi_slopes, const tsr_attn_var *var, float *scratch,
                          int nscratch, int p0, int c, int seg, int cap, int NH, int KVH, int hs) {
    const int C = NH * hs, R = NH / (KVH > 0 ? KVH : 1);
    check_heads("attention_decode", NH, KVH, hs);
    check_decode_var("attention_decode", var, hs);
    const size_t QKV = (size_t)(NH + 2 * KVH) * hs;
    if (c > 1 && p0 + c > cap) {
        for (int i = 0; i < c; i++)
            cpu_attention_decode(out + (size_t)i * C, kt, v, qkv + i * QKV, alibi_slopes, var,
                                 scratch, nscratch, p0 + i, 1, seg, cap, NH, KVH, hs);
        return;
    }
    const float scale = var_scale(var, hs);
    cache_store(kt, v, qkv, p0, c, cap, NH, KVH, hs);
    const long tasks = (long)c * NH, work = tasks * imin(p0 + c - seg, cap) * hs;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nscratch) if (work >= DECODE_PAR_MIN)
    for (long t = 0; t < tasks; t++) {
        const int i = (int)(t / NH), h = (int)(t % NH), g = h / R;
        const int s = window_start(seg, p0 + i, var_window(var));
        float *row = scratch + (size_t)omp_get_thread_num() * cap;
        decode_row(out + (size_t)i * C + (size_t)h * hs, row, qkv + i * QKV + (size_t)h * hs,
                   kt + (size_t)g * hs * cap, v + (size_t)g * cap * hs, cap, hs, s, p0 + i,
                   alibi_slopes ? alibi_slopes[h] : 0.0f, scale, var_sink(var, h),
                   var_cap(var));
    }
}

/* out (n, NH hs): row i is the next token of the sequence in cache slot slot[i] (slots
 * slot_stride floats apart in kt and v), at position pos[i], its segment from seg[i]: its key
 * and value stored there (index pos[i] % cap of the slot's ring), then each query head as
 * cpu_attention_decode computes one row (the same bits); one task per (row, query head) */
void cpu_attention_decode_rows(float *out, float *kt, float *v, const float *qkv,
                               const float *alibi_slopes, const tsr_attn_var *var, float *scratch,
                               int nscratch,
                               const int32_t *slot, const int32_t *pos, const int32_t *seg, int n,
                               size_t slot_stride, int cap, int NH, int KVH, int hs) {
    const int C = NH * hs, R = NH / (KVH > 0 ? KVH : 1);
    check_heads("attention_decode_rows", NH, KVH, hs);
    check_decode_var("attention_decode_rows", var, hs);
    const size_t QKV = (size_t)(NH + 2 * KVH) * hs;
    const float scale = var_scale(var, hs);
    long work = 0;
    for (int i = 0; i < n; i++) {
        const size_t at = (size_t)slot[i] * slot_stride;
        cache_store(kt + at, v + at, qkv + i * QKV, pos[i], 1, cap, NH, KVH, hs);
        work += (long)NH * imin(pos[i] + 1 - seg[i], cap) * hs;
    }
    const long tasks = (long)n * NH;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nscratch) if (work >= DECODE_PAR_MIN)
    for (long t = 0; t < tasks; t++) {
        const int i = (int)(t / NH), h = (int)(t % NH), g = h / R;
        const int s = window_start(seg[i], pos[i], var_window(var));
        const size_t at = (size_t)slot[i] * slot_stride;
        float *row = scratch + (size_t)omp_get_thread_num() * cap;
        decode_row(out + (size_t)i * C + (size_t)h * hs, row, qkv + i * QKV + (size_t)h * hs,
                   kt + at + (size_t)g * hs * cap, v + at + (size_t)g * cap * hs, cap, hs, s,
                   pos[i], alibi_slopes ? alibi_slopes[h] : 0.0f, scale, var_sink(var, h),
                   var_cap(var));
    }
}
