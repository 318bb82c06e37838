/* cuda_moe.cu — the mixture-of-experts ops of cuda_ops.h (tcu_moe_*): routing (softmax, top-k,
 * the stable grouping by expert, the auxiliary-loss statistics), the gather of rows into expert
 * order and its backward, the experts' grouped matmuls, the weighted combine and its backward,
 * the router's backward: the maths and orders of the ops.h moe_* ops (docs/moe.md).
 *
 * Vocabulary: N rows, E experts, K experts per row, NK = N*K assignments a = n*K + j; grouped row
 * r = slot[a] holds assignment a = rows[r]; expert e owns grouped rows offs[e] .. offs[e+1]-1.
 *
 * File-wide conventions (cuda_ops.h):
 *   - bf16 activations and weights, fp32 arithmetic (double where ops.h sums in double: the
 *     routing statistics, dwts, the router backward), fp32 weight gradients;
 *   - no host synchronisation: every op reads offs where it lies, on the device, so the whole
 *     layer queues without a round trip. The grouped matmuls launch a grid sized for the worst
 *     case (ceil(NK / tile) + E row tiles) and each block finds its expert from offs;
 *   - deterministic, no floating-point atomics: each output element is made by one thread in a
 *     fixed order; the grouping uses no atomics at all (counts per chunk of assignments, a
 *     fixed-order scan, then a placement pass: assignment index ascending within an expert);
 *   - backward ACCUMULATES into dx, dinp (bf16: read, fp32 add, one rounding) and dw (fp32 +=),
 *     except where ops.h says WRITES (combine backward, router backward);
 *   - every launch on the caller's stream, checked (TCU_CHECK_LAUNCH); N == 0 (NK == 0) returns
 *     at once (routing then writes offs = 0 and stats = 0, as the CPU op).
 */
#include <cstdint>

#include "cuda_internal.h"

#define MOE_THREADS 256 /* every kernel but the matmuls: 8 warps */
#define MOE_WARPS (MOE_THREADS / 32)
#define MOE_CHUNK 256          /* assignments per block of the grouping kernels */
#define MOE_STAT_ROWS 64       /* at least this many rows per partial sum of the statistics */
#define MOE_STAT_MAX_GROUPS 1024
#define EW_MAX_BLOCKS 65536u

static unsigned ew_grid(size_t items) {
    const unsigned b = tcu_blocks(items, MOE_THREADS);
    return b < EW_MAX_BLOCKS ? b : EW_MAX_BLOCKS;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* butterfly: every lane gets the same bits */
__device__ __forceinline__ double warp_sum_double(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- routing ------------------------------------------------------------------------------- */

/* (v, e) comes before (bv, be) in the top-k order: higher probability first, the lower expert
 * index on ties */
__device__ __forceinline__ bool topk_before(float v, int e, float bv, int be) {
    return v > bv || (v == bv && e < be);
}

/* One warp per row n (the cpu op's arithmetic): m = max logit, sum = sum_e exp(x - m) (double),
 * probs = exp(x - m) * (float)(1 / sum), lse = m + log(sum); then K picks, each the first in
 * top-k order of the experts after the previous pick (NaN probabilities rank as -1, below every
 * number: a NaN row picks 0..K-1, as the CPU), wts = the picked probabilities, divided by their
 * sum (double, j in order) when norm. probs (N,E), lse (N), idx, wts (N,K), logits (N,E) bf16.
 * Launch: grid ceil(N / 8), MOE_THREADS. */
__global__ void __launch_bounds__(MOE_THREADS)
    moe_route_warp_per_row_kernel(float *probs, float *lse, int32_t *idx, float *wts,
                                  const bf16 *logits, int N, int E, int K, int norm) {
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (n >= N) return; /* whole warp */
    const bf16 *x = logits + (size_t)n * E;
    float *p = probs + (size_t)n * E;
    float m = -INFINITY;
    for (int e = lane; e < E; e += 32) m = fmaxf(m, __bfloat162float(x[e]));
    m = warp_max(m);
    double sum = 0.0;
    for (int e = lane; e < E; e += 32) sum += (double)expf(__bfloat162float(x[e]) - m);
    sum = warp_sum_double(sum);
    const float inv = (float)(1.0 / sum);
    for (int e = lane; e < E; e += 32) p[e] = expf(__bfloat162float(x[e]) - m) * inv;
    if (lane == 0) lse[n] = (float)((double)m + log(sum));
    __syncwarp(); /* every lane reads the row the others wrote */

    float pv = INFINITY;
    int pe = -1;
    double s = 0.0;
    for (int j = 0; j < K; j++) {
        float bv = -INFINITY;
        int be = E;
        for (int e = lane; e < E; e += 32) {
            float v = p[e];
            if (v != v) v = -1.0f;
            if (topk_before(pv, pe, v, e) && topk_before(v, e, bv, be)) bv = v, be = e;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oe = __shfl_xor_sync(0xffffffffu, be, o);
            if (topk_before(ov, oe, bv, be)) bv = ov, be = oe;
        }
        pv = bv, pe = be;
        const float w = p[be];
        s += w;
        if (lane == 0) idx[(size_t)n * K + j] = be, wts[(size_t)n * K + j] = w;
    }
    if (norm && lane == 0)
        for (int j = 0; j < K; j++) {
            float *wj = wts + (size_t)n * K + j;
            *wj = (float)((double)*wj / s);
        }
}

/* Loads chunk blockIdx.x's experts (idx of its assignments) into ex; returns how many it has. */
__device__ __forceinline__ int load_chunk(int *ex, const int32_t *idx, int NK) {
    const int a0 = blockIdx.x * MOE_CHUNK, a = a0 + threadIdx.x;
    ex[threadIdx.x] = a < NK ? idx[a] : -1;
    __syncthreads();
    return min(MOE_CHUNK, NK - a0);
}

/* counts (chunks, E), zeroed before: the first assignment of each expert in the chunk writes how
 * many of the chunk's assignments went to that expert. No atomics. Launch: one block of
 * MOE_CHUNK threads per chunk of MOE_CHUNK assignments. */
__global__ void __launch_bounds__(MOE_CHUNK)
    moe_chunk_count_kernel(int32_t *counts, const int32_t *idx, int NK, int E) {
    __shared__ int ex[MOE_CHUNK];
    const int na = load_chunk(ex, idx, NK), t = threadIdx.x;
    if (t >= na) return;
    const int e = ex[t];
    for (int u = 0; u < t; u++)
        if (ex[u] == e) return; /* not the first of its expert */
    int c = 0;
    for (int u = t; u < na; u++) c += ex[u] == e;
    counts[(size_t)blockIdx.x * E + e] = c;
}

/* partial (P, E+1) double: row group g (rows g*rows ..) sums probs[n,e] over its rows in order
 * into partial[g,e], and lse[n]^2 into partial[g,E], in double as the CPU op. Launch: P blocks of
 * MOE_THREADS. */
__global__ void __launch_bounds__(MOE_THREADS)
    moe_route_partial_kernel(double *partial, const float *probs, const float *lse, int N, int E,
                             int rows) {
    const int n0 = blockIdx.x * rows, n1 = min(N, n0 + rows);
    double *part = partial + (size_t)blockIdx.x * (E + 1);
    for (int e = threadIdx.x; e <= E; e += blockDim.x) {
        double acc = 0.0;
        if (e < E)
            for (int n = n0; n < n1; n++) acc += probs[(size_t)n * E + e];
        else
            for (int n = n0; n < n1; n++) acc += (double)lse[n] * lse[n];
        part[e] = acc;
    }
}

/* One block of MOE_THREADS. counts (chunks, E) becomes each chunk's exclusive base within its
 * expert (chunks in order); offs (E+1) = the exclusive scan of the expert totals; stats[0] =
 * aux = E * sum_e count_e * colsum_e / (NK * N), stats[1] = z = sum_g partial[g,E] / N, every
 * sum over partials and experts in double, in a fixed order. */
__global__ void __launch_bounds__(MOE_THREADS)
    moe_route_scan_kernel(int32_t *offs, float *stats, int32_t *counts, const double *partial,
                          int chunks, int P, int N, int E, int K) {
    __shared__ double red[MOE_THREADS];
    double mine = 0.0; /* sum over this thread's experts of count_e * colsum_e */
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int run = 0;
        for (int c = 0; c < chunks; c++) {
            const int k = counts[(size_t)c * E + e];
            counts[(size_t)c * E + e] = run;
            run += k;
        }
        double col = 0.0;
        for (int g = 0; g < P; g++) col += partial[(size_t)g * (E + 1) + e];
        offs[e + 1] = run;
        mine += (double)run * col;
    }
    red[threadIdx.x] = mine;
    __syncthreads(); /* also makes offs[1..E] (the totals) visible to thread 0 */
    if (threadIdx.x != 0) return;
    double aux = 0.0, z = 0.0;
    for (int t = 0; t < (int)blockDim.x; t++) aux += red[t];
    for (int g = 0; g < P; g++) z += partial[(size_t)g * (E + 1) + E];
    offs[0] = 0;
    for (int e = 0; e < E; e++) offs[e + 1] += offs[e];
    stats[0] = (float)(aux * E / ((double)N * K * N));
    stats[1] = (float)(z / N);
}

/* slot[a] = offs[e] + base[chunk, e] + (assignments of e before a in the chunk), rows[slot] = a:
 * the stable order (a ascending within an expert). Launch: as moe_chunk_count_kernel. */
__global__ void __launch_bounds__(MOE_CHUNK)
    moe_place_kernel(int32_t *rows, int32_t *slot, const int32_t *idx, const int32_t *base,
                     const int32_t *offs, int NK, int E) {
    __shared__ int ex[MOE_CHUNK];
    const int na = load_chunk(ex, idx, NK), t = threadIdx.x;
    if (t >= na) return;
    const int e = ex[t];
    int rank = 0;
    for (int u = 0; u < t; u++) rank += ex[u] == e;
    const int r = offs[e] + base[(size_t)blockIdx.x * E + e] + rank;
    const int a = blockIdx.x * MOE_CHUNK + t;
    slot[a] = r;
    rows[r] = a;
}

/* Five launches: the rows (softmax, top-k, weights), the per-chunk counts, the statistics'
 * partial sums, the scan (offs, stats), the placement (slot, rows). Scratch: the process-wide
 * partial-sum buffer (tcu_norm_partial_scratch): P*(E+1) doubles, then chunks*E int32 counts. */
void tcu_moe_route(float *probs, float *lse, int32_t *idx, float *wts, int32_t *offs,
                   int32_t *rows, int32_t *slot, float *stats, const tsr_bf16 *logits, int N,
                   int E, int K, int norm, tcu_stream s) {
    const char *what = "tcu_moe_route";
    TCU_REQUIRE(N >= 0 && E >= 1 && K >= 1 && K <= E, what,
                tcu_msg("need N >= 0 and 1 <= K <= E, got N=%d E=%d K=%d", N, E, K));
    TCU_REQUIRE((long long)N * K < (1ll << 31) && (long long)N * E < (1ll << 40), what,
                tcu_msg("N=%d rows of E=%d K=%d: too many assignments (N*K < 2^31)", N, E, K));
    TCU_REQUIRE(probs && lse && idx && wts && offs && rows && slot && stats && logits, what,
                "a required pointer is NULL");
    const cudaStream_t st = (cudaStream_t)s;
    if (N == 0) {
        TCU_CHECK(cudaMemsetAsync(offs, 0, (size_t)(E + 1) * sizeof *offs, st), what);
        TCU_CHECK(cudaMemsetAsync(stats, 0, 2 * sizeof *stats, st), what);
        return;
    }
    const int NK = N * K, chunks = (NK + MOE_CHUNK - 1) / MOE_CHUNK;
    int grp = (N + MOE_STAT_MAX_GROUPS - 1) / MOE_STAT_MAX_GROUPS;
    grp = grp < MOE_STAT_ROWS ? MOE_STAT_ROWS : grp;
    const int P = (N + grp - 1) / grp;
    const size_t nparts = (size_t)P * (E + 1), ncounts = (size_t)chunks * E;
    double *partial = (double *)tcu_norm_partial_scratch(
        nparts * sizeof(double) + ncounts * sizeof(int32_t), what); /* 256-byte aligned */
    int32_t *counts = (int32_t *)(partial + nparts);

    moe_route_warp_per_row_kernel<<<tcu_blocks((size_t)N, MOE_WARPS), MOE_THREADS, 0, st>>>(
        probs, lse, idx, wts, (const bf16 *)logits, N, E, K, norm);
    TCU_CHECK_LAUNCH("tcu_moe_route: moe_route_warp_per_row_kernel");
    TCU_CHECK(cudaMemsetAsync(counts, 0, ncounts * sizeof *counts, st), what);
    moe_chunk_count_kernel<<<chunks, MOE_CHUNK, 0, st>>>(counts, idx, NK, E);
    TCU_CHECK_LAUNCH("tcu_moe_route: moe_chunk_count_kernel");
    moe_route_partial_kernel<<<P, MOE_THREADS, 0, st>>>(partial, probs, lse, N, E, grp);
    TCU_CHECK_LAUNCH("tcu_moe_route: moe_route_partial_kernel");
    moe_route_scan_kernel<<<1, MOE_THREADS, 0, st>>>(offs, stats, counts, partial, chunks, P, N,
                                                     E, K);
    TCU_CHECK_LAUNCH("tcu_moe_route: moe_route_scan_kernel");
    moe_place_kernel<<<chunks, MOE_CHUNK, 0, st>>>(rows, slot, idx, counts, offs, NK, E);
    TCU_CHECK_LAUNCH("tcu_moe_route: moe_place_kernel");
}

/* ---- gather and its backward --------------------------------------------------------------- */

static void check_nkc(const char *what, int N, int K, int C) {
    TCU_REQUIRE(N >= 0 && K >= 1 && C >= 1, what,
                tcu_msg("need N >= 0, K >= 1 and C >= 1, got N=%d K=%d C=%d", N, K, C));
    TCU_REQUIRE((long long)N * K < (1ll << 31), what,
                tcu_msg("N*K = %lld assignments is too many (< 2^31)", (long long)N * K));
}

/* W = 8 (16-byte accesses) when C is a multiple of 8 and every pointer is 16-byte aligned */
static bool vec8(int C, const void *a, const void *b, const void *c) {
    return C % 8 == 0 && tcu_aligned16(a) && tcu_aligned16(b) && (!c || tcu_aligned16(c));
}

/* BACKWARD = false: xg[r] = x[rows[r] / K] (a copy of bits); true: dx[n] = bf16(dx[n] +
 * dxg[slot[n*K]] + ... + dxg[slot[n*K+K-1]]), the fp32 adds in j order, one rounding. map = rows
 * or slot.
 * One item = W columns of one output row; grid-stride, MOE_THREADS. */
template <int W, bool BACKWARD>
__global__ void moe_gather_kernel(bf16 *o, const bf16 *x, const int32_t *map, int K, int C,
                                  size_t items) {
    const int packs = C / W;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < items; k += stride) {
        const size_t r = k / packs;
        const int c = (int)(k - r * packs) * W;
        float v[W];
        if constexpr (!BACKWARD) {
            tcu_load_bf16<W>(v, x + (size_t)(map[r] / K) * C + c);
        } else {
            tcu_load_bf16<W>(v, o + r * C + c);
            for (int j = 0; j < K; j++) {
                float g[W];
                tcu_load_bf16<W>(g, x + (size_t)map[r * K + j] * C + c);
#pragma unroll
                for (int i = 0; i < W; i++) v[i] += g[i];
            }
        }
        tcu_store_bf16<W>(o + r * C + c, v); /* the copy: widening and rounding back is exact */
    }
}

template <bool BACKWARD>
static void gather_launch(const char *what, bf16 *o, const bf16 *x, const int32_t *map,
                          size_t out_rows, int K, int C, cudaStream_t st) {
    if (out_rows == 0) return;
    const bool v8 = vec8(C, o, x, nullptr);
    const size_t items = out_rows * (size_t)(v8 ? C / 8 : C);
    auto kern = v8 ? moe_gather_kernel<8, BACKWARD> : moe_gather_kernel<1, BACKWARD>;
    kern<<<ew_grid(items), MOE_THREADS, 0, st>>>(o, x, map, K, C, items);
    TCU_CHECK_LAUNCH(what);
}

void tcu_moe_gather(tsr_bf16 *xg, const tsr_bf16 *x, const int32_t *rows, int N, int K, int C,
                    tcu_stream s) {
    const char *what = "tcu_moe_gather";
    check_nkc(what, N, K, C);
    TCU_REQUIRE(xg && x && rows, what, "xg, x and rows must not be NULL");
    gather_launch<false>(what, (bf16 *)xg, (const bf16 *)x, rows, (size_t)N * K, K, C,
                         (cudaStream_t)s);
}

void tcu_moe_gather_backward(tsr_bf16 *dx, const tsr_bf16 *dxg, const int32_t *slot, int N, int K,
                             int C, tcu_stream s) {
    const char *what = "tcu_moe_gather_backward";
    check_nkc(what, N, K, C);
    TCU_REQUIRE(dx && dxg && slot, what, "dx, dxg and slot must not be NULL");
    gather_launch<true>(what, (bf16 *)dx, (const bf16 *)dxg, slot, (size_t)N, K, C,
                        (cudaStream_t)s);
}

/* ---- combine and its backward -------------------------------------------------------------- */

/* out[n] = bf16(base[n] (or 0) + wts[n,0] y[slot[n*K]] + ... in j order), fp32 arithmetic, one
 * rounding. One item = W columns of one row; grid-stride, MOE_THREADS. out may be base. */
template <int W>
__global__ void moe_combine_kernel(bf16 *out, const bf16 *base, const bf16 *y, const float *wts,
                                   const int32_t *slot, int K, int C, size_t items) {
    const int packs = C / W;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < items; k += stride) {
        const size_t n = k / packs;
        const int c = (int)(k - n * packs) * W;
        float v[W];
        if (base) {
            tcu_load_bf16<W>(v, base + n * C + c);
        } else {
#pragma unroll
            for (int i = 0; i < W; i++) v[i] = 0.0f;
        }
        for (int j = 0; j < K; j++) {
            const float w = wts[n * K + j];
            float yv[W];
            tcu_load_bf16<W>(yv, y + (size_t)slot[n * K + j] * C + c);
#pragma unroll
            for (int i = 0; i < W; i++) v[i] += w * yv[i];
        }
        tcu_store_bf16<W>(out + n * C + c, v);
    }
}

void tcu_moe_combine(tsr_bf16 *out, const tsr_bf16 *base, const tsr_bf16 *y, const float *wts,
                     const int32_t *slot, int N, int K, int C, tcu_stream s) {
    const char *what = "tcu_moe_combine";
    check_nkc(what, N, K, C);
    TCU_REQUIRE(out && y && wts && slot, what, "out, y, wts and slot must not be NULL");
    if (N == 0) return;
    const bool v8 = vec8(C, out, y, base);
    const size_t items = (size_t)N * (v8 ? C / 8 : C);
    auto kern = v8 ? moe_combine_kernel<8> : moe_combine_kernel<1>;
    kern<<<ew_grid(items), MOE_THREADS, 0, (cudaStream_t)s>>>(
        (bf16 *)out, (const bf16 *)base, (const bf16 *)y, wts, slot, K, C, items);
    TCU_CHECK_LAUNCH(what);
}

/* One warp per row n, for j in order: dy[slot[a]] = bf16(wts[a] * dout[n]) and dwts[a] =
 * dot(dout[n], y[slot[a]]) in double (lane partials, then a butterfly), a = n*K + j. Both
 * WRITTEN. Launch: grid ceil(N / 8), MOE_THREADS. */
__global__ void __launch_bounds__(MOE_THREADS)
    moe_combine_backward_warp_per_row_kernel(bf16 *dy, float *dwts, const bf16 *dout,
                                             const bf16 *y, const float *wts,
                                             const int32_t *slot, int N, int K, int C) {
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (n >= N) return;
    const bf16 *g = dout + (size_t)n * C;
    for (int j = 0; j < K; j++) {
        const size_t a = (size_t)n * K + j, r = (size_t)slot[a];
        const float w = wts[a];
        const bf16 *yr = y + r * C;
        bf16 *d = dy + r * C;
        double dot = 0.0;
        for (int c = lane; c < C; c += 32) {
            const float gv = __bfloat162float(g[c]);
            dot += (double)gv * (double)__bfloat162float(yr[c]);
            d[c] = __float2bfloat16_rn(w * gv);
        }
        dot = warp_sum_double(dot);
        if (lane == 0) dwts[a] = (float)dot;
    }
}

void tcu_moe_combine_backward(tsr_bf16 *dy, float *dwts, const tsr_bf16 *dout, const tsr_bf16 *y,
                              const float *wts, const int32_t *slot, int N, int K, int C,
                              tcu_stream s) {
    const char *what = "tcu_moe_combine_backward";
    check_nkc(what, N, K, C);
    TCU_REQUIRE(dy && dwts && dout && y && wts && slot, what, "a required pointer is NULL");
    if (N == 0) return;
    moe_combine_backward_warp_per_row_kernel<<<tcu_blocks((size_t)N, MOE_WARPS), MOE_THREADS, 0,
                                               (cudaStream_t)s>>>(
        (bf16 *)dy, dwts, (const bf16 *)dout, (const bf16 *)y, wts, slot, N, K, C);
    TCU_CHECK_LAUNCH(what);
}

/* ---- router backward ----------------------------------------------------------------------- */

/* dp[e] of row n (ops.h), in double: cst * count_e, plus for e = ix[j] the weights' gradient
 * (norm: (dw[j] - dot) / s; else dw[j]) */
__device__ __forceinline__ double router_dp(int e, const int32_t *ix, const float *dw,
                                            const int32_t *offs, int K, int norm, double dot,
                                            double s, double cst) {
    double d = cst * (double)(offs[e + 1] - offs[e]);
    for (int j = 0; j < K; j++)
        if (ix[j] == e) d += norm ? ((double)dw[j] - dot) / s : (double)dw[j];
    return d;
}

/* One warp per row n: dlogits[n,e] = bf16(p_e (dp_e - sum_e' p_e' dp_e' + zc)), zc = 2 z_w
 * lse[n] / N, every sum in double (the sum over e: lane partials, then a butterfly). WRITTEN.
 * Launch: grid ceil(N / 8), MOE_THREADS. */
__global__ void __launch_bounds__(MOE_THREADS)
    moe_router_backward_warp_per_row_kernel(bf16 *dlogits, const float *dwts, const float *probs,
                                            const float *lse, const int32_t *idx,
                                            const float *wts, const int32_t *offs, int N, int E,
                                            int K, int norm, double cst, double zscale) {
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (n >= N) return;
    const float *p = probs + (size_t)n * E, *dw = dwts + (size_t)n * K, *wt = wts + (size_t)n * K;
    const int32_t *ix = idx + (size_t)n * K;
    double dot = 0.0, s = 0.0;
    if (norm)
        for (int j = 0; j < K; j++) {
            dot += (double)dw[j] * wt[j];
            s += p[ix[j]];
        }
    double sp = 0.0;
    for (int e = lane; e < E; e += 32)
        sp += (double)p[e] * router_dp(e, ix, dw, offs, K, norm, dot, s, cst);
    sp = warp_sum_double(sp);
    const double zc = zscale * lse[n];
    for (int e = lane; e < E; e += 32) {
        const double dp = router_dp(e, ix, dw, offs, K, norm, dot, s, cst);
        dlogits[(size_t)n * E + e] = __float2bfloat16_rn((float)((double)p[e] * (dp - sp + zc)));
    }
}

void tcu_moe_router_backward(tsr_bf16 *dlogits, const float *dwts, const float *probs,
                             const float *lse, const int32_t *idx, const float *wts,
                             const int32_t *offs, int N, int E, int K, int norm, float aux_w,
                             float z_w, tcu_stream s) {
    const char *what = "tcu_moe_router_backward";
    TCU_REQUIRE(N >= 0 && E >= 1 && K >= 1 && K <= E, what,
                tcu_msg("need N >= 0 and 1 <= K <= E, got N=%d E=%d K=%d", N, E, K));
    TCU_REQUIRE((long long)N * K < (1ll << 31), what,
                tcu_msg("N*K = %lld assignments is too many (< 2^31)", (long long)N * K));
    TCU_REQUIRE(dlogits && dwts && probs && lse && idx && wts && offs, what,
                "a required pointer is NULL");
    if (N == 0) return;
    const double cst = (double)aux_w * E / ((double)N * K * N), zscale = 2.0 * z_w / N;
    moe_router_backward_warp_per_row_kernel<<<tcu_blocks((size_t)N, MOE_WARPS), MOE_THREADS, 0,
                                              (cudaStream_t)s>>>(
        (bf16 *)dlogits, dwts, probs, lse, idx, wts, offs, N, E, K, norm, cst, zscale);
    TCU_CHECK_LAUNCH(what);
}

/* ---- the experts' grouped matmuls ---------------------------------------------------------- */

/* One tiled kernel, three products (MODE), C[m,n] = sum_k A[m,k] B[k,n] over a tile of
 * MM_TM x MM_TN outputs, fp32 accumulation (fmaf, k ascending in each thread), bf16 operands
 * widened into shared memory MM_TK at a time:
 *   MM_FWD   out[r, n] = bf16(sum_k inp[r, k] w[e][n, k]), r in expert e's rows   (k < IC)
 *   MM_DINP  dinp[r, n] = bf16(dinp[r, n] + sum_k dout[r, k] w[e][k, n])           (k < OC)
 *   MM_DW    dw[e][m, n] += sum_k dout[r_k, m] inp[r_k, n], r_k = offs[e] + k       (k < count_e)
 * FWD and DINP: blockIdx.x numbers the row tiles of all experts in expert order (ceil(count_e /
 * MM_TM) each; blocks past the last exit), blockIdx.y the column tiles. DW: blockIdx.z = e,
 * blockIdx.y the tiles of OC, blockIdx.x of IC; an expert without rows leaves dw[e] as it is.
 * Each output element is one thread's (no split over k): deterministic. Not tuned: no tensor
 * cores, scalar loads (docs/cuda.md). */
#define MM_TM 64
#define MM_TN 64
#define MM_TK 16
#define MM_THREADS 256 /* 16 x 16 threads, 4 x 4 outputs each, rows ty + 16i, columns tx + 16j */
enum { MM_FWD = 0, MM_DINP, MM_DW };

/* expert e and rows [r0, r1) of row tile `tile` (the expert-ordered numbering above), or false */
__device__ __forceinline__ bool moe_row_tile(const int32_t *offs, int E, int tile, int *e_out,
                                             int *r0, int *r1) {
    for (int e = 0; e < E; e++) {
        const int lo = offs[e], hi = offs[e + 1], nt = (hi - lo + MM_TM - 1) / MM_TM;
        if (tile < nt) {
            *e_out = e;
            *r0 = lo + tile * MM_TM;
            *r1 = min(hi, *r0 + MM_TM);
            return true;
        }
        tile -= nt;
    }
    return false;
}

/* an operand tile in shared memory as [k][i] (i = m for A, n for B): element (i, k) of the
 * operand at p + i * si + k * sk, zero outside [0, ni) x [0, nk). Threads walk the contiguous
 * dimension fastest (k when sk == 1, else i). */
template <int TI>
__device__ __forceinline__ void load_tile(float (*sm)[TI + 4], const bf16 *p, size_t si,
                                          size_t sk, int ni, int nk) {
    for (int t = threadIdx.x; t < TI * MM_TK; t += MM_THREADS) {
        const int i = sk == 1 ? t / MM_TK : t % TI, k = sk == 1 ? t % MM_TK : t / TI;
        sm[k][i] = i < ni && k < nk ? __bfloat162float(p[(size_t)i * si + (size_t)k * sk]) : 0.0f;
    }
}

template <int MODE>
__global__ void __launch_bounds__(MM_THREADS)
    moe_matmul_tiled_kernel(bf16 *o, float *dw, const bf16 *x, const bf16 *g, const bf16 *w,
                            const int32_t *offs, int E, int IC, int OC) {
    __shared__ float As[MM_TK][MM_TM + 4], Bs[MM_TK][MM_TN + 4];
    int e, m0, nm, n0, nn, kd;
    const bf16 *A, *B;
    size_t sam, sak, sbn, sbk;
    if constexpr (MODE == MM_DW) {
        e = blockIdx.z;
        const int r0 = offs[e];
        kd = offs[e + 1] - r0;
        if (kd <= 0) return;
        m0 = blockIdx.y * MM_TM, nm = min(MM_TM, OC - m0);
        n0 = blockIdx.x * MM_TN, nn = min(MM_TN, IC - n0);
        A = g + (size_t)r0 * OC + m0, sam = 1, sak = (size_t)OC;  /* dout[r_k, m] */
        B = x + (size_t)r0 * IC + n0, sbn = 1, sbk = (size_t)IC;  /* inp[r_k, n] */
    } else {
        int r0, r1;
        if (!moe_row_tile(offs, E, blockIdx.x, &e, &r0, &r1)) return;
        m0 = r0, nm = r1 - r0;
        const int ncols = MODE == MM_FWD ? OC : IC;
        n0 = blockIdx.y * MM_TN, nn = min(MM_TN, ncols - n0);
        kd = MODE == MM_FWD ? IC : OC;
        const bf16 *we = w + (size_t)e * OC * IC;
        if constexpr (MODE == MM_FWD) {
            A = x + (size_t)r0 * IC, sam = (size_t)IC, sak = 1;    /* inp[r, k] */
            B = we + (size_t)n0 * IC, sbn = (size_t)IC, sbk = 1;   /* w[e][n, k] */
        } else {
            A = g + (size_t)r0 * OC, sam = (size_t)OC, sak = 1;    /* dout[r, k] */
            B = we + n0, sbn = 1, sbk = (size_t)IC;                /* w[e][k, n] */
        }
    }
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < kd; k0 += MM_TK) {
        const int nk = min(MM_TK, kd - k0);
        load_tile<MM_TM>(As, A + (size_t)k0 * sak, sam, sak, nm, nk);
        load_tile<MM_TN>(Bs, B + (size_t)k0 * sbk, sbn, sbk, nn, nk);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < MM_TK; k++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[k][ty + 16 * i], b[i] = Bs[k][tx + 16 * i];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int m = ty + 16 * i, n = tx + 16 * j;
            if (m >= nm || n >= nn) continue;
            if constexpr (MODE == MM_FWD) {
                o[(size_t)(m0 + m) * OC + n0 + n] = __float2bfloat16_rn(acc[i][j]);
            } else if constexpr (MODE == MM_DINP) {
                bf16 *d = o + (size_t)(m0 + m) * IC + n0 + n;
                *d = __float2bfloat16_rn(__bfloat162float(*d) + acc[i][j]);
            } else {
                dw[((size_t)e * OC + m0 + m) * IC + n0 + n] += acc[i][j];
            }
        }
}

static void check_grouped(const char *what, int E, int NK, int IC, int OC) {
    TCU_REQUIRE(E >= 1 && NK >= 0 && IC >= 1 && OC >= 1, what,
                tcu_msg("need E >= 1, NK >= 0, IC >= 1 and OC >= 1, got E=%d NK=%d IC=%d OC=%d",
                        E, NK, IC, OC));
    TCU_REQUIRE((OC + MM_TN - 1) / MM_TN <= 65535 && (IC + MM_TN - 1) / MM_TN <= 65535 &&
                    E <= 65535,
                what, tcu_msg("IC=%d, OC=%d or E=%d is too large for the grid", IC, OC, E));
}

/* grid of the row-tiled modes: every expert's row tiles (at most ceil(NK / MM_TM) + E of them)
 * by the tiles of `cols` output columns */
static dim3 row_tiles_grid(int NK, int E, int cols) {
    return dim3((unsigned)((NK + MM_TM - 1) / MM_TM + E), (unsigned)((cols + MM_TN - 1) / MM_TN));
}

void tcu_moe_matmul_forward(tsr_bf16 *out, const tsr_bf16 *inp, const tsr_bf16 *w,
                            const int32_t *offs, int E, int NK, int IC, int OC, tcu_stream s) {
    const char *what = "tcu_moe_matmul_forward";
    check_grouped(what, E, NK, IC, OC);
    TCU_REQUIRE(out && inp && w && offs, what, "out, inp, w and offs must not be NULL");
    if (NK == 0) return;
    moe_matmul_tiled_kernel<MM_FWD><<<row_tiles_grid(NK, E, OC), MM_THREADS, 0, (cudaStream_t)s>>>(
        (bf16 *)out, nullptr, (const bf16 *)inp, nullptr, (const bf16 *)w, offs, E, IC, OC);
    TCU_CHECK_LAUNCH(what);
}

/* Two launches: dinp (row tiles over IC), then dw (per expert, tiles of OC x IC); dw NULL (the
 * experts frozen): the first alone (inp then unread), dinp the same bits. */
void tcu_moe_matmul_backward(tsr_bf16 *dinp, float *dw, const tsr_bf16 *dout,
                             const tsr_bf16 *inp, const tsr_bf16 *w, const int32_t *offs, int E,
                             int NK, int IC, int OC, tcu_stream s) {
    const char *what = "tcu_moe_matmul_backward";
    check_grouped(what, E, NK, IC, OC);
    TCU_REQUIRE(dinp && dout && (inp || !dw) && w && offs, what, "a required pointer is NULL");
    if (NK == 0) return;
    const cudaStream_t st = (cudaStream_t)s;
    moe_matmul_tiled_kernel<MM_DINP><<<row_tiles_grid(NK, E, IC), MM_THREADS, 0, st>>>(
        (bf16 *)dinp, nullptr, nullptr, (const bf16 *)dout, (const bf16 *)w, offs, E, IC, OC);
    TCU_CHECK_LAUNCH("tcu_moe_matmul_backward: dinp");
    if (!dw) return;
    const dim3 grid((unsigned)((IC + MM_TN - 1) / MM_TN), (unsigned)((OC + MM_TM - 1) / MM_TM),
                    (unsigned)E);
    moe_matmul_tiled_kernel<MM_DW><<<grid, MM_THREADS, 0, st>>>(
        nullptr, dw, (const bf16 *)inp, (const bf16 *)dout, nullptr, offs, E, IC, OC);
    TCU_CHECK_LAUNCH("tcu_moe_matmul_backward: dw");
}

/* ---- gpt-oss's expert biases (ops.h moe_bias_*; docs/cuda.md "Model variants") -------------- */

/* Block e (grid E): out[r, c] = round(out[r, c] + b[e, c]) over expert e's grouped rows
 * r = offs[e] .. offs[e+1]-1, the block's threads striding over its (rows x OC) elements. */
__global__ void moe_bias_forward_kernel(bf16 *out, const bf16 *b, const int32_t *offs, int OC) {
    const int e = blockIdx.x;
    const size_t r0 = (size_t)offs[e], n = ((size_t)offs[e + 1] - r0) * OC;
    const bf16 *be = b + (size_t)e * OC;
    for (size_t k = threadIdx.x; k < n; k += blockDim.x) {
        const size_t at = r0 * OC + k;
        out[at] = __float2bfloat16_rn(__bfloat162float(out[at]) +
                                      __bfloat162float(be[k % OC]));
    }
}

/* Block e (grid E): db[e, c] += the sum of dout's rows of expert e (in double, rows ascending,
 * each column by one thread: cpu_moe_bias_backward's order), thread c over columns c, c + blockDim,
 * ... */
__global__ void moe_bias_backward_kernel(float *db, const bf16 *dout, const int32_t *offs,
                                         int OC) {
    const int e = blockIdx.x;
    const int r0 = offs[e], r1 = offs[e + 1];
    for (int c = threadIdx.x; c < OC; c += blockDim.x) {
        double s = 0.0;
        for (int r = r0; r < r1; r++) s += (double)__bfloat162float(dout[(size_t)r * OC + c]);
        float *d = db + (size_t)e * OC + c;
        *d = (float)((double)*d + s);
    }
}

static void check_bias(const char *what, int E, int OC, bool ok) {
    TCU_REQUIRE(E >= 1 && OC >= 1, what, tcu_msg("need E >= 1 and OC >= 1, got E=%d OC=%d", E, OC));
    TCU_REQUIRE(ok, what, "a required pointer is NULL");
}

void tcu_moe_bias_forward(tsr_bf16 *out, const tsr_bf16 *b, const int32_t *offs, int E, int OC,
                          tcu_stream s) {
    const char *what = "tcu_moe_bias_forward";
    check_bias(what, E, OC, out && b && offs);
    moe_bias_forward_kernel<<<(unsigned)E, MOE_THREADS, 0, (cudaStream_t)s>>>(
        (bf16 *)out, (const bf16 *)b, offs, OC);
    TCU_CHECK_LAUNCH(what);
}

void tcu_moe_bias_backward(float *db, const tsr_bf16 *dout, const int32_t *offs, int E, int OC,
                           tcu_stream s) {
    const char *what = "tcu_moe_bias_backward";
    check_bias(what, E, OC, db && dout && offs);
    moe_bias_backward_kernel<<<(unsigned)E, MOE_THREADS, 0, (cudaStream_t)s>>>(
        db, (const bf16 *)dout, offs, OC);
    TCU_CHECK_LAUNCH(what);
}

/* ---- the shared expert's gate (model.moe_shared_gate; ops.h moe_shgate_*) ------------------- */

/* the warp's sum of a[c] b[c] over c < C (lanes striding; fp32, then the butterfly) */
__device__ __forceinline__ float warp_dot(const bf16 *a, const bf16 *b, int C) {
    float s = 0.0f;
    for (int c = threadIdx.x & 31; c < C; c += 32)
        s = fmaf(__bfloat162float(a[c]), __bfloat162float(b[c]), s);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

__device__ __forceinline__ float shgate_sigmoid(float z) {
    return 1.0f / (1.0f + expf(fminf(-z, 87.0f)));
}

/* GRAD = false: out[n] = round(out[n] s_n); true: dg[n] = (1 - s_n) shg[n] . dshg[n]; s_n =
 * sigmoid(x[n] . w). One warp per row (MOE_WARPS rows per block). */
template <bool GRAD>
__global__ void shgate_rows_kernel(bf16 *out, float *dg, const bf16 *shg, const bf16 *dshg,
                                   const bf16 *x, const bf16 *w, int N, int S, int C) {
    const int n = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (n >= N) return; /* whole warp */
    const float s = shgate_sigmoid(warp_dot(x + (size_t)n * C, w, C));
    if constexpr (GRAD) {
        const float d = warp_dot(shg + (size_t)n * S, dshg + (size_t)n * S, S);
        if ((threadIdx.x & 31) == 0) dg[n] = (1.0f - s) * d;
    } else {
        bf16 *o = out + (size_t)n * C;
        for (int c = threadIdx.x & 31; c < C; c += 32)
            o[c] = __float2bfloat16_rn(__bfloat162float(o[c]) * s);
    }
}

/* gw[c] += sum_n dg[n] x[n, c] (double, rows in order: one thread per column) */
__global__ void shgate_wgrad_kernel(float *gw, const float *dg, const bf16 *x, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0.0;
    for (int n = 0; n < N; n++) s += (double)dg[n] * __bfloat162float(x[(size_t)n * C + c]);
    gw[c] = (float)((double)gw[c] + s);
}

/* dx[n, c] = round(dx + dg[n] w[c]) */
__global__ void shgate_dx_kernel(bf16 *dx, const float *dg, const bf16 *w, int C, size_t items) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < items; k += stride) {
        const size_t n = k / C;
        const int c = (int)(k - n * C);
        dx[k] = __float2bfloat16_rn(__bfloat162float(dx[k]) + dg[n] * __bfloat162float(w[c]));
    }
}

static void check_shgate(const char *what, int N, int C, bool ok) {
    TCU_REQUIRE(N >= 0 && C >= 1, what, tcu_msg("need N >= 0 and C >= 1, got N=%d C=%d", N, C));
    TCU_REQUIRE(ok, what, "a required pointer is NULL");
}

void tcu_moe_shgate_forward(tsr_bf16 *out, const tsr_bf16 *x, const tsr_bf16 *w, int N, int C,
                            tcu_stream s) {
    const char *what = "tcu_moe_shgate_forward";
    check_shgate(what, N, C, out && x && w);
    if (N == 0) return;
    shgate_rows_kernel<false><<<tcu_blocks((size_t)N, MOE_WARPS), MOE_THREADS, 0,
                                (cudaStream_t)s>>>((bf16 *)out, nullptr, nullptr, nullptr,
                                                   (const bf16 *)x, (const bf16 *)w, N, 0, C);
    TCU_CHECK_LAUNCH(what);
}

void tcu_moe_shgate_grad(float *dg, float *gw, const tsr_bf16 *shg, const tsr_bf16 *dshg,
                         const tsr_bf16 *x, const tsr_bf16 *w, int N, int S, int C, tcu_stream s) {
    const char *what = "tcu_moe_shgate_grad";
    check_shgate(what, N, C, dg && shg && dshg && x && w && S >= 1);
    if (N == 0) return;
    const cudaStream_t st = (cudaStream_t)s;
    shgate_rows_kernel<true><<<tcu_blocks((size_t)N, MOE_WARPS), MOE_THREADS, 0, st>>>(
        nullptr, dg, (const bf16 *)shg, (const bf16 *)dshg, (const bf16 *)x, (const bf16 *)w, N,
        S, C);
    TCU_CHECK_LAUNCH(what);
    if (!gw) return;
    shgate_wgrad_kernel<<<tcu_blocks((size_t)C, MOE_THREADS), MOE_THREADS, 0, st>>>(
        gw, dg, (const bf16 *)x, N, C);
    TCU_CHECK_LAUNCH(what);
}

void tcu_moe_shgate_dx(tsr_bf16 *dx, const float *dg, const tsr_bf16 *w, int N, int C,
                       tcu_stream s) {
    const char *what = "tcu_moe_shgate_dx";
    check_shgate(what, N, C, dx && dg && w);
    if (N == 0) return;
    const size_t items = (size_t)N * C;
    shgate_dx_kernel<<<ew_grid(items), MOE_THREADS, 0, (cudaStream_t)s>>>(
        (bf16 *)dx, dg, (const bf16 *)w, C, items);
    TCU_CHECK_LAUNCH(what);
}
