/* cuda_xent.cu — the head of cuda_ops.h: tcu_softmax_xent, softmax over the first V of Vp columns
 * fused with cross-entropy and its gradient, the maths of cpu_softmax_xent_forward followed by
 * cpu_softmax_xent_backward (kernels/cpu/cpu_softmax.c), without an fp32 copy of the logits; and
 * tcu_argmax, each row's greedy token (ICL scoring during training).
 *
 * File-wide conventions (cuda_ops.h):
 *   - logits (N,Vp) bf16, row-major; losses, dlosses (N) fp32; targets (N) int32, < 0 = ignore;
 *   - all arithmetic in fp32: one read pass keeps an online (max, sum of exp(x - max)) per thread,
 *     combined across the block in a fixed order (deterministic);
 *   - dlogits WRITES (=) over the logits, bf16, rounded once; with dlosses NULL nothing is written
 *     but losses (evaluation);
 *   - every launch on the caller's stream, checked (TCU_CHECK_LAUNCH).
 * A target >= V (a bug upstream: no such class) is not an error exit but poisons the row:
 * losses[n] = NaN and, with dlosses, dlogits[n, j] = NaN for j < V (0 for j >= V), so the loss,
 * the gradient norm and the tests all see it.
 */
#include <cstdarg>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include <math_constants.h>

#include "cuda_internal.h"

#define XENT_MAX_THREADS 1024 /* one block per row; fewer threads for narrow rows */

/* ---- device helpers ---------------------------------------------------------------------- */


/* Online-softmax state (m, s): s = sum of exp(x - m) over the values seen, m their max; the empty
 * state is (-inf, 0). Merging two states rescales both sums to the larger max; an empty side adds
 * 0 (never exp(-inf - -inf) = NaN). Commutative bit for bit (fmaxf and + are). */
__device__ __forceinline__ float2 xent_merge(float2 a, float2 b) {
    const float m = fmaxf(a.x, b.x);
    const float sa = a.x == -CUDART_INF_F ? 0.0f : a.y * expf(a.x - m);
    const float sb = b.x == -CUDART_INF_F ? 0.0f : b.y * expf(b.x - m);
    return make_float2(m, sa + sb);
}

/* One W-wide chunk starting at column c into the online state st (columns >= V skipped): the
 * chunk max first, then one rescale and W exps. */
template <int W>
__device__ __forceinline__ void xent_chunk(float2 &st, const float *v, int c, int V) {
    float cm = -CUDART_INF_F;
#pragma unroll
    for (int k = 0; k < W; k++)
        if (c + k < V) cm = fmaxf(cm, v[k]);
    if (cm > st.x) { /* new max: rescale what was summed (exp(-inf) = 0 when it was empty) */
        st.y *= expf(st.x - cm);
        st.x = cm;
    }
    if (st.x != -CUDART_INF_F) { /* all -inf so far: nothing to add (and no -inf - -inf) */
#pragma unroll
        for (int k = 0; k < W; k++)
            if (c + k < V) st.y += expf(v[k] - st.x);
    }
}

/* The row's (max, sum) from every thread's state: the warp butterfly, then the warps in order
 * 0..nw-1 (the same bits in every thread). red: 32 float2 of shared memory. Ends with a barrier,
 * after which the row may be overwritten. */
__device__ __forceinline__ float2 xent_row_state(float2 st, float2 *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float2 other;
        other.x = __shfl_xor_sync(0xffffffffu, st.x, o);
        other.y = __shfl_xor_sync(0xffffffffu, st.y, o);
        st = xent_merge(st, other);
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = st;
    __syncthreads(); /* the row is read: from here on it may be overwritten */
    float2 row = red[0];
    for (int i = 1; i < (int)(blockDim.x >> 5); i++) row = xent_merge(row, red[i]);
    return row;
}

/* The gradient of one W-wide chunk at column c, in place of its logits v: (p - [j == t]) dl for
 * j < V (NaN when the row's target is bad), 0 for padding columns. */
template <int W>
__device__ __forceinline__ void xent_grad_chunk(float *v, int c, int V, int t, bool bad, float mx,
                                                float inv, float dl) {
#pragma unroll
    for (int k = 0; k < W; k++) {
        const int j = c + k;
        if (j >= V) v[k] = 0.0f;
        else if (bad) v[k] = CUDART_NAN_F;
        else v[k] = (expf(v[k] - mx) * inv - (j == t ? 1.0f : 0.0f)) * dl;
    }
}

/* The final-logit soft-cap (model.final_logit_softcapping, cap > 0; cpu_softcap_forward): the
 * columns < V of a W-wide chunk at column c become cap tanh(v / cap); fct (or NULL) gets each
 * one's 1 - (z / cap)^2, the gradient's factor (cpu_softcap_backward). cap 0: nothing. */
template <int W>
__device__ __forceinline__ void xent_cap(float *v, float *fct, int c, int V, float cap) {
    if (!(cap > 0.0f)) return;
#pragma unroll
    for (int k = 0; k < W; k++)
        if (c + k < V) {
            v[k] = cap * tanhf(v[k] / cap);
            const float t = v[k] / cap;
            if (fct) fct[k] = 1.0f - t * t;
        }
}

/* A row whose target is < 0 (ignored): loss 0 (thread 0) and, with a gradient asked for, the
 * whole row of dlogits 0, each thread its W-wide chunks from c0 in steps of `step`. */
template <int W, bool VEC>
__device__ __forceinline__ void xent_ignored_row(float *loss, bf16 *x, bool grad, int c0, int step,
                                                 int Vp) {
    if (threadIdx.x == 0) *loss = 0.0f;
    if (!grad) return;
    float z[W];
#pragma unroll
    for (int k = 0; k < W; k++) z[k] = 0.0f;
    for (int c = c0; c < Vp; c += step) tcu_store_bf16<W, VEC>(x + c, z);
}

/* ---- the kernel -------------------------------------------------------------------------- */

/* Row n, t = targets[n], x = logits[n, 0..V):
 *   losses[n] = log(sum_j exp(x_j - max)) - (x_t - max), or 0 when t < 0, or NaN when t >= V;
 *   with dlosses: logits[n, j] = (exp(x_j - max) / sum - [j == t]) * dlosses[n] for j < V,
 *                 0 for V <= j < Vp, the whole row 0 when t < 0 (NaN for j < V when t >= V).
 * losses (N) fp32; logits (N,Vp) bf16, read then (with dlosses) overwritten; targets (N) int32;
 * dlosses (N) fp32 or NULL.
 * Launch: grid N (one block per row), block = row_threads(Vp, W) (Vp / W rounded up to a warp,
 * in [32, XENT_MAX_THREADS]); static shared memory 32 float2. Thread i owns the W-wide chunks starting at
 * c = i*W + j*blockDim*W. Pass 1 (columns < V) keeps an online (max, sum) per thread: per chunk,
 * the chunk max first, then one rescale and W exps; the block merge (warp butterfly, then the
 * warps in order 0..nw-1) ends with a barrier, after which pass 2 rewrites each chunk by the
 * thread that owns it (it reads the chunk, then writes it): every read of the row for the loss,
 * x_t included (thread 0, before the barrier), happens before any write.
 * Preconditions (host): 1 <= V <= Vp; VEC: W == 8, Vp % 8 == 0, logits 16-byte aligned (then a
 * chunk starting below V or Vp lies wholly inside the row). */
template <int W, bool VEC>
__global__ void __launch_bounds__(XENT_MAX_THREADS)
    softmax_xent_block_per_row_kernel(float *losses, bf16 *logits, const int32_t *targets,
                                      const float *dlosses, int V, int Vp, float cap) {
    __shared__ float2 red[32];
    const int n = blockIdx.x;
    bf16 *x = logits + (size_t)n * Vp;
    const int t = targets[n]; /* block-uniform: the early return below skips no barrier */
    const int c0 = threadIdx.x * W, step = blockDim.x * W;

    if (t < 0) { /* ignored row: no loss, no gradient */
        xent_ignored_row<W, VEC>(losses + n, x, dlosses != nullptr, c0, step, Vp);
        return;
    }
    const bool bad = t >= V;
    float xt = (threadIdx.x == 0 && !bad) ? __bfloat162float(x[t]) : 0.0f;
    xent_cap<1>(&xt, nullptr, 0, 1, cap);
    const float dl = dlosses ? dlosses[n] : 0.0f; /* before losses[n] is written: may alias */

    /* pass 1: online max and sum over columns < V */
    float2 st = make_float2(-CUDART_INF_F, 0.0f);
    for (int c = c0; c < V; c += step) {
        float v[W];
        tcu_load_bf16<W, VEC>(v, x + c);
        xent_cap<W>(v, nullptr, c, V, cap);
        xent_chunk<W>(st, v, c, V);
    }
    const float2 row = xent_row_state(st, red);
    const float mx = row.x, sum = row.y;

    if (threadIdx.x == 0) losses[n] = bad ? CUDART_NAN_F : logf(sum) - (xt - mx);
    if (!dlosses) return;

    /* pass 2: dlogits over the whole row, in place */
    const float inv = 1.0f / sum;
    for (int c = c0; c < Vp; c += step) {
        float v[W], fct[W] = {};
        tcu_load_bf16<W, VEC>(v, x + c);
        xent_cap<W>(v, fct, c, V, cap);
        xent_grad_chunk<W>(v, c, V, t, bad, mx, inv, dl);
        if (cap > 0.0f)
#pragma unroll
            for (int k = 0; k < W; k++)
                if (c + k < V) v[k] *= fct[k];
        tcu_store_bf16<W, VEC>(x + c, v);
    }
}

/* The row held in registers (issue 25: softmax_xent ran at a third of the copy bandwidth):
 * the same per-thread chunks, the same arithmetic in the same order as
 * softmax_xent_block_per_row_kernel<8, true>, hence its bits, but each thread first loads all of
 * its (at most XENT_RES_CHUNKS) 16-byte chunks at once (all in flight together, instead of one per
 * loop turn) and pass 2 computes from those registers: the row is read from memory once, not
 * twice. Vp % 8 == 0, logits 16-byte aligned, Vp <= 8 XENT_RES_CHUNKS * blockDim.x (57344 at 1024
 * threads: GPT-2's 50304, Llama 2's 32000); blockDim = row_threads(Vp, 8). */
#define XENT_RES_CHUNKS 7
__global__ void __launch_bounds__(XENT_MAX_THREADS)
    softmax_xent_resident_kernel(float *losses, bf16 *logits, const int32_t *targets,
                                 const float *dlosses, int V, int Vp) {
    __shared__ float2 red[32];
    const int n = blockIdx.x;
    bf16 *x = logits + (size_t)n * Vp;
    const int t = targets[n]; /* block-uniform: the early return below skips no barrier */
    const int c0 = threadIdx.x * 8, step = blockDim.x * 8;

    if (t < 0) { /* ignored row: no loss, no gradient */
        xent_ignored_row<8, true>(losses + n, x, dlosses != nullptr, c0, step, Vp);
        return;
    }
    const bool bad = t >= V;
    const float xt = (threadIdx.x == 0 && !bad) ? __bfloat162float(x[t]) : 0.0f;
    const float dl = dlosses ? dlosses[n] : 0.0f; /* before losses[n] is written: may alias */

    int4 raw[XENT_RES_CHUNKS];
#pragma unroll
    for (int r = 0; r < XENT_RES_CHUNKS; r++)
        if (c0 + r * step < V) raw[r] = *reinterpret_cast<const int4 *>(x + c0 + r * step);

    /* pass 1: online max and sum over columns < V (the two-pass kernel's loop, from registers) */
    float2 st = make_float2(-CUDART_INF_F, 0.0f);
#pragma unroll
    for (int r = 0; r < XENT_RES_CHUNKS; r++) {
        const int c = c0 + r * step;
        if (c >= V) continue;
        float v[8];
        tcu_unpack_bf16x8(v, raw[r]);
        xent_chunk<8>(st, v, c, V);
    }
    const float2 row = xent_row_state(st, red);
    const float mx = row.x, sum = row.y;

    if (threadIdx.x == 0) losses[n] = bad ? CUDART_NAN_F : logf(sum) - (xt - mx);
    if (!dlosses) return;

    /* pass 2: dlogits over the whole row from the registers (padding columns: zeros) */
    const float inv = 1.0f / sum;
#pragma unroll
    for (int r = 0; r < XENT_RES_CHUNKS; r++) {
        const int c = c0 + r * step;
        if (c >= Vp) continue;
        float v[8];
        if (c < V) tcu_unpack_bf16x8(v, raw[r]);
        xent_grad_chunk<8>(v, c, V, t, bad, mx, inv, dl);
        tcu_store_bf16<8, true>(x + c, v);
    }
}

/* whether tcu_softmax_xent runs softmax_xent_resident_kernel where the shape allows (a
 * measurement switch: slower on the H200, 2026-11-26, docs/cuda.md;
 * tcu_softmax_xent_set_resident) */
static bool xent_resident = false;

extern "C" void tcu_softmax_xent_set_resident(int on) { xent_resident = on != 0; }

/* Threads of a block-per-row kernel over `cols` columns in W-wide chunks: cols / W (a last partial
 * chunk goes to a thread's second round) rounded up to a warp, within [32, XENT_MAX_THREADS]. */
static int row_threads(int cols, int W) {
    int threads = (int)(((size_t)cols / W + 31) / 32 * 32);
    if (threads > XENT_MAX_THREADS) threads = XENT_MAX_THREADS;
    return threads < 32 ? 32 : threads;
}

/* losses (N) fp32 =; logits (N,Vp) bf16, overwritten by dlogits when dlosses is given;
 * targets (N) int32 (-1 = ignore); dlosses (N) fp32 or NULL.
 * One block per row (softmax_xent_block_per_row_kernel); 16-byte loads and stores when
 * Vp % 8 == 0 and logits is 16-byte aligned. N >= 0, 1 <= V <= Vp. */
void tcu_softmax_xent(float *losses, tsr_bf16 *logits, const int32_t *targets,
                      const float *dlosses, int N, int V, int Vp, tcu_stream s) {
    tcu_softmax_xent_capped(losses, logits, targets, dlosses, N, V, Vp, 0.0f, s);
}

/* tcu_softmax_xent over cap tanh(logits / cap) for cap > 0 (never the register-resident kernel) */
void tcu_softmax_xent_capped(float *losses, tsr_bf16 *logits, const int32_t *targets,
                             const float *dlosses, int N, int V, int Vp, float cap, tcu_stream s) {
    const char *what = "tcu_softmax_xent";
    TCU_REQUIRE(N >= 0 && V >= 1 && Vp >= V, what,
                tcu_msg("need N >= 0 and 1 <= V <= Vp, got N=%d V=%d Vp=%d", N, V, Vp));
    TCU_REQUIRE(cap >= 0.0f, what, tcu_msg("cap = %g must be >= 0", (double)cap));
    TCU_REQUIRE(losses && logits && targets, what, "a required pointer is NULL");
    if (N == 0) return;
    const cudaStream_t st = (cudaStream_t)s;
    const bool vec = Vp % 8 == 0 && ((uintptr_t)logits & 15u) == 0;
    const int threads = row_threads(Vp, vec ? 8 : 1);
    if (vec && xent_resident && !(cap > 0.0f) && Vp / 8 <= XENT_RES_CHUNKS * threads)
        softmax_xent_resident_kernel<<<(unsigned)N, threads, 0, st>>>(
            losses, (bf16 *)logits, targets, dlosses, V, Vp);
    else if (vec)
        softmax_xent_block_per_row_kernel<8, true><<<(unsigned)N, threads, 0, st>>>(
            losses, (bf16 *)logits, targets, dlosses, V, Vp, cap);
    else
        softmax_xent_block_per_row_kernel<1, false><<<(unsigned)N, threads, 0, st>>>(
            losses, (bf16 *)logits, targets, dlosses, V, Vp, cap);
    TCU_CHECK_LAUNCH(what);
}

/* ---- greedy tokens (argmax) ----------------------------------------------------------------- */

/* (v, j) beats (bv, bj) when v is larger, or equal with the lower column: a total order, so the
 * result does not depend on how the columns are split among threads. NaN is read as -inf. */
__device__ __forceinline__ bool argmax_beats(float v, int j, float bv, int bj) {
    return v > bv || (v == bv && j < bj);
}

/* Row n: idx[n] = the column j < V with the largest logits[n, j], the lowest such j on ties
 * (a NaN counts as -inf; a row of -inf and NaN gives 0).
 * idx (N) int32 =; logits (N,Vp) bf16, read only.
 * Launch: grid N (one block per row), block = row_threads(V, W) (V / W rounded up to a warp, in
 * [32, XENT_MAX_THREADS]); thread i owns the W-wide chunks at c = i*W + j*blockDim*W (with VEC a chunk
 * that starts below V ends inside the row: Vp % 8 == 0); static shared memory 32 (float, int);
 * the warp butterfly, then thread 0 over the warps, combine by argmax_beats. Idle lanes hold
 * (-inf, INT32_MAX), which column 0 always beats, so the result is a real column. Preconditions
 * as tcu_softmax_xent. */
template <int W, bool VEC>
__global__ void __launch_bounds__(XENT_MAX_THREADS)
    argmax_block_per_row_kernel(int32_t *idx, const bf16 *logits, int V, int Vp, float cap) {
    __shared__ float red_v[32];
    __shared__ int red_j[32];
    const int n = blockIdx.x;
    const bf16 *x = logits + (size_t)n * Vp;
    float bv = -CUDART_INF_F;
    int bj = INT32_MAX;
    for (int c = threadIdx.x * W; c < V; c += blockDim.x * W) {
        float v[W];
        tcu_load_bf16<W, VEC>(v, x + c);
        xent_cap<W>(v, nullptr, c, V, cap);
#pragma unroll
        for (int k = 0; k < W; k++) {
            const float e = isnan(v[k]) ? -CUDART_INF_F : v[k];
            if (c + k < V && argmax_beats(e, c + k, bv, bj)) bv = e, bj = c + k;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oj = __shfl_xor_sync(0xffffffffu, bj, o);
        if (argmax_beats(ov, oj, bv, bj)) bv = ov, bj = oj;
    }
    if ((threadIdx.x & 31) == 0) red_v[threadIdx.x >> 5] = bv, red_j[threadIdx.x >> 5] = bj;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < (int)(blockDim.x >> 5); i++)
            if (argmax_beats(red_v[i], red_j[i], red_v[0], red_j[0])) red_v[0] = red_v[i], red_j[0] = red_j[i];
        idx[n] = red_j[0] == INT32_MAX ? 0 : red_j[0];
    }
}

/* idx (N) int32 =; logits (N,Vp) bf16. One block per row (argmax_block_per_row_kernel), 16-byte
 * loads when Vp % 8 == 0 and logits is 16-byte aligned. N >= 0, 1 <= V <= Vp. */
void tcu_argmax(int32_t *idx, const tsr_bf16 *logits, int N, int V, int Vp, tcu_stream s) {
    tcu_argmax_capped(idx, logits, N, V, Vp, 0.0f, s);
}

/* tcu_argmax over cap tanh(logits / cap) for cap > 0 (the CPU's argmax over the capped
 * logits' probabilities: ties where the cap saturates go to the lower column as there) */
void tcu_argmax_capped(int32_t *idx, const tsr_bf16 *logits, int N, int V, int Vp, float cap,
                       tcu_stream s) {
    const char *what = "tcu_argmax";
    TCU_REQUIRE(N >= 0 && V >= 1 && Vp >= V, what,
                tcu_msg("need N >= 0 and 1 <= V <= Vp, got N=%d V=%d Vp=%d", N, V, Vp));
    TCU_REQUIRE(idx && logits, what, "a required pointer is NULL");
    if (N == 0) return;
    const cudaStream_t st = (cudaStream_t)s;
    const bool vec = Vp % 8 == 0 && ((uintptr_t)logits & 15u) == 0;
    const int threads = row_threads(V, vec ? 8 : 1);
    if (vec)
        argmax_block_per_row_kernel<8, true><<<(unsigned)N, threads, 0, st>>>(
            idx, (const bf16 *)logits, V, Vp, cap);
    else
        argmax_block_per_row_kernel<1, false><<<(unsigned)N, threads, 0, st>>>(
            idx, (const bf16 *)logits, V, Vp, cap);
    TCU_CHECK_LAUNCH(what);
}
