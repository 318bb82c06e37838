/* cuda_elementwise.cu — the memory-bound model ops of cuda_ops.h: encoder forward and backward,
 * GELU, residual, and the fp32 add tcu_add_f32. The maths are those of the CPU oracle
 * (kernels/cpu/cpu_ops.c), in fp32 registers over bf16 (activations, weights) or fp32 (parameter
 * gradients) storage. (The optimizer kernels, tcu_sumsq and tcu_adamw_update, are in
 * cuda_common.cu.)
 *
 * File-wide conventions:
 *   - backward ops accumulate (+=): parameter gradients in fp32 (dwte, dwpe), activation gradients
 *     in bf16 by read-modify-write (dinp, da, db): bf16(float(old) + update), rounded once;
 *   - every op takes an explicit stream; n == 0 returns without a launch (the encoder ops need
 *     B, T, C > 0);
 *   - flat kernels are grid-stride loops of 256 threads over "packs" of 8 bf16: a pack
 *     moves as one 16-byte access when every pointer is 16-byte aligned (a flag computed on the
 *     host), element by element otherwise and for the last, partial pack. Each element gets the
 *     same arithmetic either way, so results do not depend on alignment (tcu_add_f32, over fp32,
 *     is a plain grid-stride loop of one element per step);
 *   - deterministic: no floating-point atomics, except tcu_encoder_backward's dwte when it is given
 *     no host copy of the tokens (as cuda_ops.h allows). Reductions add in a fixed order that
 *     depends only on the sizes (not on timing, not on the GPU model);
 *   - the scratch tcu_encoder_backward caches (token grouping, sort buffers, pinned staging) is
 *     reused across calls, ordered across streams by an event, and freed by tcu_shutdown
 *     (tcu_elementwise_release).
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cub/device/device_radix_sort.cuh>

#include "cuda_internal.h"


#define EW_THREADS 256u
#define EW_MAX_BLOCKS 65536u /* grid-stride launches use at most this many blocks */
#define FULL_MASK 0xffffffffu

static unsigned ew_grid(size_t items) {
    unsigned b = tcu_blocks(items, EW_THREADS);
    return b < EW_MAX_BLOCKS ? b : EW_MAX_BLOCKS;
}

namespace {

/* ---- device helpers ------------------------------------------------------------------------ */

/* W consecutive fp32 (W = 8: two 16-byte accesses, p aligned) */
template <int W> __device__ __forceinline__ void load_f32(const float *p, float f[W]) {
    if constexpr (W == 8) {
        float4 a = reinterpret_cast<const float4 *>(p)[0];
        float4 b = reinterpret_cast<const float4 *>(p)[1];
        f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
        f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
    } else {
        f[0] = *p;
    }
}
template <int W> __device__ __forceinline__ void store_f32(float *p, const float f[W]) {
    if constexpr (W == 8) {
        reinterpret_cast<float4 *>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
        reinterpret_cast<float4 *>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
    } else {
        *p = f[0];
    }
}

/* acc[j] += dout[row_of(i) * C + c + j] for i = 0, 1, ..., count-1 in that order (the order of the
 * CPU's loop, so the fp32 sums have its bits). Rows are fetched ACC_ROWS at a time before they are
 * added, so that many loads are in flight per thread. */
#define ACC_ROWS 8
template <int W, class RowOf>
__device__ __forceinline__ void accumulate_rows(float acc[W], const bf16 *dout, int C, int c,
                                                int count, RowOf row_of) {
    int i = 0;
    for (; i + ACC_ROWS <= count; i += ACC_ROWS) {
        float g[ACC_ROWS][W];
#pragma unroll
        for (int r = 0; r < ACC_ROWS; r++)
            tcu_load_bf16<W>(g[r], dout + row_of(i + r) * (size_t)C + c);
#pragma unroll
        for (int r = 0; r < ACC_ROWS; r++)
#pragma unroll
            for (int j = 0; j < W; j++) acc[j] += g[r][j];
    }
    for (; i < count; i++) {
        float g[W];
        tcu_load_bf16<W>(g, dout + row_of(i) * (size_t)C + c);
#pragma unroll
        for (int j = 0; j < W; j++) acc[j] += g[j];
    }
}

/* ---- encoder forward ----------------------------------------------------------------------- */

/* out[n,c] = wte[tokens[n],c] + wpe[p,c], p = pos[n] or n % T (fp32 add, one rounding; a copy
 * without wpe). out (N,C) bf16, tokens (N), wte (Vp,C) bf16, wpe (T_max,C) bf16 or NULL, pos (N)
 * or NULL. One item = W channels of one row (W = 8: C % 8 == 0 and out, wte, wpe 16-byte aligned;
 * else W = 1); grid-stride over N * C / W items, 256 threads. */
template <int W>
__global__ void encoder_forward_gather(bf16 *out, const int32_t *tokens, const bf16 *wte,
                                       const bf16 *wpe, const int32_t *pos, int T, int C,
                                       size_t items) {
    const int packs = C / W;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < items; k += stride) {
        size_t n = k / packs;
        int c = (int)(k - n * packs) * W;
        const bf16 *e = wte + (size_t)tokens[n] * C + c;
        bf16 *o = out + n * C + c;
        if (!wpe) {
            if constexpr (W == 8)
                *reinterpret_cast<uint4 *>(o) = *reinterpret_cast<const uint4 *>(e);
            else
                *o = *e;
            continue;
        }
        size_t p = tcu_encoder_pos(pos, n, T);
        float a[W], b[W];
        tcu_load_bf16<W>(a, e);
        tcu_load_bf16<W>(b, wpe + p * C + c);
#pragma unroll
        for (int j = 0; j < W; j++) a[j] += b[j];
        if constexpr (W == 8) tcu_store_bf16<8>(o, a);
        else *o = __float2bfloat16_rn(a[0]);
    }
}

} // namespace

/* Preconditions: B, T, C > 0, B*T < 2^30, tokens in [0, V), pos in [0, T_max) (not checked). */
void tcu_encoder_forward(tsr_bf16 *out, const int32_t *tokens, const tsr_bf16 *wte,
                         const tsr_bf16 *wpe, const int32_t *pos, int B, int T, int C,
                         tcu_stream s) {
    const char *what = "tcu_encoder_forward";
    TCU_REQUIRE_RULE(what, tcu_rule_encoder_forward, B, T, C, out, tokens, wte);
    bf16 *o = (bf16 *)out;
    const bf16 *e = (const bf16 *)wte, *p = (const bf16 *)wpe;
    bool v8 = C % 8 == 0 && tcu_aligned16(o) && tcu_aligned16(e) && (!p || tcu_aligned16(p));
    size_t items = (size_t)B * T * (size_t)(v8 ? C / 8 : C);
    auto kernel = v8 ? encoder_forward_gather<8> : encoder_forward_gather<1>;
    kernel<<<ew_grid(items), EW_THREADS, 0, s>>>(o, tokens, e, p, pos, T, C, items);
    TCU_CHECK_LAUNCH(what);
}

/* ---- encoder backward ---------------------------------------------------------------------- */

namespace {

/* dwpe[t,c] += sum_b dout[b*T + t, c], b = 0..B-1 in order, added one by one onto dwpe[t,c] as the
 * CPU does (its bits). dwpe (T_max,C) fp32, dout (B*T,C) bf16. One item = W channels of one
 * position (W = 8: C % 8 == 0, dwpe and dout 16-byte aligned); grid-stride over T * C / W items. */
template <int W>
__global__ void dwpe_sum_over_batch(float *dwpe, const bf16 *dout, int B, int T, int C,
                                    size_t items) {
    const int packs = C / W;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < items; k += stride) {
        int t = (int)(k / packs), c = (int)(k - (size_t)t * packs) * W;
        float *d = dwpe + (size_t)t * C + c;
        float acc[W];
        load_f32<W>(d, acc);
        accumulate_rows<W>(acc, dout, C, c, B, [=](int b) { return (size_t)b * T + t; });
        store_f32<W>(d, acc);
    }
}

/* dst[key,c] += the rows of dout whose key it is, in increasing row order (the CPU's order: its
 * bits). Rows are grouped by key, one segment per block (grid-stride over segments):
 *   starts != NULL (grouped on the host): segment s has key keys[s] and the rows
 *     rows[starts[s] .. starts[s+1]), nseg segments;
 *   starts == NULL (sorted on the device): keys (N) sorted, rows (N) the matching row indices;
 *     "segment" s < N is a run start when keys[s-1] != keys[s], its end found by a warp ballot.
 * dst (K,C) fp32 with every key < K; dout (N,C) bf16. The block's threads share the C / W channel
 * packs of the segment (W = 8: C % 8 == 0, dst and dout 16-byte aligned). blockDim a multiple of 32
 * (every lane takes part in the ballot; the per-block branches are uniform). */
template <int W>
__global__ void sum_rows_by_key(float *dst, const bf16 *dout, const int32_t *keys,
                                const int32_t *rows, const int32_t *starts, int nseg, int N,
                                int C) {
    const int packs = C / W, lane = threadIdx.x & 31;
    for (int s = blockIdx.x; s < nseg; s += gridDim.x) {
        int key, i0, i1;
        if (starts) {
            key = keys[s];
            i0 = starts[s];
            i1 = starts[s + 1];
        } else {
            key = keys[s];
            if (s > 0 && keys[s - 1] == key) continue; /* not the first row of its run */
            i0 = s;
            i1 = s + 1;
            for (;;) { /* 32 keys a step: the run ends at the first lane that differs */
                int j = i1 + lane;
                unsigned same = __ballot_sync(FULL_MASK, j < N && keys[j] == key);
                if (same == FULL_MASK) {
                    i1 += 32;
                    continue;
                }
                i1 += __ffs((int)~same) - 1;
                break;
            }
        }
        const int32_t *seg_rows = rows + i0;
        for (int cp = threadIdx.x; cp < packs; cp += blockDim.x) {
            int c = cp * W;
            float *d = dst + (size_t)key * C + c;
            float acc[W];
            load_f32<W>(d, acc);
            accumulate_rows<W>(acc, dout, C, c, i1 - i0,
                               [=](int i) { return (size_t)seg_rows[i]; });
            store_f32<W>(d, acc);
        }
    }
}

/* dwte[tokens[n],c] += dout[n,c] by fp32 atomics (the order, and so the last bits, vary run to
 * run). dwte (Vp,C) fp32, tokens (N), dout (N,C) bf16. One item = W channels of one row (W = 8:
 * C % 8 == 0, dout 16-byte aligned); grid-stride over N * C / W items. */
template <int W>
__global__ void dwte_scatter_atomic(float *dwte, const bf16 *dout, const int32_t *tokens, int C,
                                    size_t items) {
    const int packs = C / W;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < items; k += stride) {
        size_t n = k / packs;
        int c = (int)(k - n * packs) * W;
        float g[W];
        tcu_load_bf16<W>(g, dout + n * C + c);
        float *d = dwte + (size_t)tokens[n] * C + c;
#pragma unroll
        for (int j = 0; j < W; j++) atomicAdd(d + j, g[j]);
    }
}

/* idx[i] = i.  idx (n).  Grid-stride, 256 threads. */
__global__ void fill_iota(int32_t *idx, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        idx[i] = i;
}

} // namespace

/* Scratch of tcu_encoder_backward, grown as needed, freed by tcu_elementwise_release.
 *   dev: [host-grouped rows N | segment keys | segment starts] (at most 3N+1 int32), then
 *        [sorted positions N | row indices N | sorted rows N | CUB temporary storage];
 *   pinned: host staging of the first region; counts: per-token counts, host;
 *   uploaded: recorded after the upload from pinned (the host waits on it before rewriting it);
 *   done: recorded after the last kernel reading dev (the next call's stream waits on it, so calls
 *   on different streams cannot overwrite scratch still in use). */
static struct {
    void *dev;
    size_t dev_bytes;
    int32_t *pinned;
    size_t pinned_count;
    int32_t *counts;
    size_t counts_len;
    cudaEvent_t uploaded, done;
    bool have_events;
} enc;

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

void tcu_elementwise_release(void) {
    if (enc.have_events) {
        TCU_CHECK(cudaEventSynchronize(enc.done), "tcu_shutdown: encoder scratch");
        TCU_CHECK(cudaEventSynchronize(enc.uploaded), "tcu_shutdown: encoder scratch");
        TCU_CHECK(cudaEventDestroy(enc.done), "tcu_shutdown: cudaEventDestroy");
        TCU_CHECK(cudaEventDestroy(enc.uploaded), "tcu_shutdown: cudaEventDestroy");
    }
    tcu_free(enc.dev);
    if (enc.pinned) TCU_CHECK(cudaFreeHost(enc.pinned), "tcu_shutdown: cudaFreeHost");
    free(enc.counts);
    memset(&enc, 0, sizeof enc);
}

static void enc_events(void) {
    if (enc.have_events) return;
    TCU_CHECK(cudaEventCreateWithFlags(&enc.uploaded, cudaEventDisableTiming),
              "tcu_encoder_backward: cudaEventCreate");
    TCU_CHECK(cudaEventCreateWithFlags(&enc.done, cudaEventDisableTiming),
              "tcu_encoder_backward: cudaEventCreate");
    /* not yet recorded: waiting on them (host or stream) returns at once */
    enc.have_events = true;
}

/* Groups the N rows by token on the host into the pinned buffer: counting sort, stable (rows in
 * increasing order within a token). Layout [rows N | keys nseg | starts nseg+1]; returns nseg. */
static int enc_group_on_host(const int32_t *tokens_host, int N) {
    const char *what = "tcu_encoder_backward";
    int32_t maxtok = -1;
    for (int n = 0; n < N; n++) {
        int32_t t = tokens_host[n];
        TCU_REQUIRE(t >= 0, what, tcu_msg("tokens_host[%d] = %d is negative", n, (int)t));
        if (t > maxtok) maxtok = t;
    }
    size_t K = (size_t)maxtok + 1;
    if (K > enc.counts_len) {
        free(enc.counts);
        enc.counts = (int32_t *)malloc(K * sizeof *enc.counts);
        TCU_REQUIRE(enc.counts, what, tcu_msg("out of host memory for %zu token counts", K));
        enc.counts_len = K;
    }
    int32_t *cnt = enc.counts;
    memset(cnt, 0, K * sizeof *cnt);
    for (int n = 0; n < N; n++) cnt[tokens_host[n]]++;
    int nseg = 0, off = 0; /* counts -> first slot of each token */
    for (size_t k = 0; k < K; k++) {
        int c = cnt[k];
        cnt[k] = off;
        off += c;
        nseg += c > 0;
    }
    int32_t *rows = enc.pinned, *keys = rows + N, *starts = keys + nseg;
    int g = 0;
    for (size_t k = 0; k < K; k++) {
        int end = k + 1 < K ? cnt[k + 1] : N;
        if (end > cnt[k]) {
            keys[g] = (int32_t)k;
            starts[g] = cnt[k];
            g++;
        }
    }
    starts[nseg] = N;
    for (int n = 0; n < N; n++) rows[cnt[tokens_host[n]]++] = n;
    return nseg;
}

/* threads for a block sharing `packs` channel packs: whole warps, at most 256 */
static unsigned pack_threads(int packs) {
    unsigned warps = (unsigned)((packs + 31) / 32);
    if (warps > 8) warps = 8;
    return (warps ? warps : 1) * 32;
}

/* dwte: with tokens_host, grouped on the host (counting sort) and summed one token per block in
 * row order (deterministic, the CPU's bits); without it, fp32 atomics; NULL (frozen): skipped,
 * tokens and tokens_host unread (no grouping, no upload). dwpe (or NULL): without pos, one
 * thread per (position, channels) over the batch in order; with pos, the positions are sorted on
 * the device (CUB radix sort, stable, so rows stay in order) and summed one position per block:
 * deterministic either way. Costs: the host pass is O(B*T + max token), and a token that occurs
 * r times is r dependent adds for one block (fine for natural text at B*T ~ 1e5). Preconditions:
 * B, T, C > 0, B*T < 2^30, tokens in [0, Vp) and pos in [0, T_max) (not checked on the device). */
void tcu_encoder_backward(float *dwte, float *dwpe, const tsr_bf16 *dout_, const int32_t *tokens,
                          const int32_t *tokens_host, const int32_t *pos, int B, int T, int C,
                          tcu_stream s) {
    const char *what = "tcu_encoder_backward";
    TCU_REQUIRE_RULE(what, tcu_rule_encoder_backward, B, T, C, dout_, dwte, tokens, tokens_host);
    if (!dwte && !dwpe) return; /* everything frozen */
    const bf16 *dout = (const bf16 *)dout_;
    const int N = B * T;
    const bool w8 = C % 8 == 0 && tcu_aligned16(dout);
    const bool te8 = w8 && dwte && tcu_aligned16(dwte), pe8 = w8 && dwpe && tcu_aligned16(dwpe);
    const int packs_te = te8 ? C / 8 : C, packs_pe = pe8 ? C / 8 : C;

    const bool host_group = dwte && tokens_host != NULL, dev_sort = dwpe && pos;
    size_t region1 = host_group ? align256((size_t)(3 * (size_t)N + 1) * sizeof(int32_t)) : 0;
    size_t ints = align256((size_t)N * sizeof(int32_t)), cub_bytes = 0;
    if (dev_sort)
        TCU_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, pos, (int32_t *)nullptr,
                                                  (const int32_t *)nullptr, (int32_t *)nullptr, N,
                                                  0, 32, s),
                  "tcu_encoder_backward: radix sort size");
    size_t region2 = dev_sort ? 3 * ints + align256(cub_bytes) : 0;

    if (host_group || dev_sort) {
        enc_events();
        if (region1 + region2 > enc.dev_bytes) { /* grow: the old buffer may still be read */
            TCU_CHECK(cudaEventSynchronize(enc.done), "tcu_encoder_backward: cudaEventSynchronize");
            tcu_free(enc.dev);
            enc.dev = NULL;
            enc.dev = tcu_malloc(region1 + region2, "the encoder backward scratch");
            enc.dev_bytes = region1 + region2;
        }
        TCU_CHECK(cudaStreamWaitEvent(s, enc.done, 0), "tcu_encoder_backward: cudaStreamWaitEvent");
    }

    if (host_group) {
        size_t need = 3 * (size_t)N + 1;
        TCU_CHECK(cudaEventSynchronize(enc.uploaded), "tcu_encoder_backward: cudaEventSynchronize");
        if (need > enc.pinned_count) {
            if (enc.pinned)
                TCU_CHECK(cudaFreeHost(enc.pinned), "tcu_encoder_backward: cudaFreeHost");
            enc.pinned = NULL;
            TCU_CHECK(cudaMallocHost((void **)&enc.pinned, need * sizeof(int32_t)),
                      "tcu_encoder_backward: cudaMallocHost (token grouping staging)");
            enc.pinned_count = need;
        }
        int nseg = enc_group_on_host(tokens_host, N);
        int32_t *d_rows = (int32_t *)enc.dev, *d_keys = d_rows + N, *d_starts = d_keys + nseg;
        size_t bytes = ((size_t)N + 2 * (size_t)nseg + 1) * sizeof(int32_t);
        TCU_CHECK(cudaMemcpyAsync(d_rows, enc.pinned, bytes, cudaMemcpyHostToDevice, s),
                  "tcu_encoder_backward: upload of the token grouping");
        TCU_CHECK(cudaEventRecord(enc.uploaded, s), "tcu_encoder_backward: cudaEventRecord");
        unsigned grid = (unsigned)nseg < EW_MAX_BLOCKS ? (unsigned)nseg : EW_MAX_BLOCKS;
        auto kernel = te8 ? sum_rows_by_key<8> : sum_rows_by_key<1>;
        kernel<<<grid, pack_threads(packs_te), 0, s>>>(dwte, dout, d_keys, d_rows, d_starts, nseg,
                                                       N, C);
        TCU_CHECK_LAUNCH("tcu_encoder_backward (dwte, grouped rows)");
    } else if (dwte) {
        size_t items = (size_t)N * packs_te;
        auto kernel = te8 ? dwte_scatter_atomic<8> : dwte_scatter_atomic<1>;
        kernel<<<ew_grid(items), EW_THREADS, 0, s>>>(dwte, dout, tokens, C, items);
        TCU_CHECK_LAUNCH("tcu_encoder_backward (dwte, atomics)");
    }

    if (dwpe && !pos) {
        size_t items = (size_t)T * packs_pe;
        auto kernel = pe8 ? dwpe_sum_over_batch<8> : dwpe_sum_over_batch<1>;
        kernel<<<ew_grid(items), EW_THREADS, 0, s>>>(dwpe, dout, B, T, C, items);
        TCU_CHECK_LAUNCH("tcu_encoder_backward (dwpe)");
    } else if (dev_sort) {
        char *base = (char *)enc.dev + region1;
        int32_t *keys = (int32_t *)base, *idx = (int32_t *)(base + ints);
        int32_t *rows = (int32_t *)(base + 2 * ints);
        void *temp = base + 3 * ints;
        fill_iota<<<ew_grid((size_t)N), EW_THREADS, 0, s>>>(idx, N);
        TCU_CHECK_LAUNCH("tcu_encoder_backward (row indices)");
        size_t temp_bytes = cub_bytes;
        TCU_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, pos, keys, (const int32_t *)idx,
                                                  rows, N, 0, 32, s),
                  "tcu_encoder_backward: radix sort of the positions");
        unsigned grid = (unsigned)N < EW_MAX_BLOCKS ? (unsigned)N : EW_MAX_BLOCKS;
        auto kernel = pe8 ? sum_rows_by_key<8> : sum_rows_by_key<1>;
        kernel<<<grid, pack_threads(packs_pe), 0, s>>>(dwpe, dout, keys, rows, nullptr, N, N, C);
        TCU_CHECK_LAUNCH("tcu_encoder_backward (dwpe, sorted positions)");
    }
    if (host_group || dev_sort)
        TCU_CHECK(cudaEventRecord(enc.done, s), "tcu_encoder_backward: cudaEventRecord");
}

/* ---- flat elementwise ops over packs of 8 bf16 ---------------------------------------------- */

namespace {

/* op.pack(i0) handles elements i0..i0+7 with 16-byte accesses, op.one(i) element i; the same
 * arithmetic per element. Grid-stride over ceil(n / 8) packs, 256 threads; vec: every pointer of
 * op is 16-byte aligned. */
template <class Op> __global__ void elementwise_packs_of_8(Op op, size_t n, bool vec) {
    const size_t npack = (n + 7) / 8, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < npack; k += stride) {
        size_t i0 = k * 8;
        if (vec && i0 + 8 <= n) {
            op.pack(i0);
        } else {
            size_t i1 = i0 + 8 < n ? i0 + 8 : n;
            for (size_t i = i0; i < i1; i++) op.one(i);
        }
    }
}

template <class Op>
void launch_packs_of_8(const Op &op, size_t n, bool vec, tcu_stream s, const char *what) {
    if (n == 0) return;
    elementwise_packs_of_8<Op><<<ew_grid((n + 7) / 8), EW_THREADS, 0, s>>>(op, n, vec);
    TCU_CHECK_LAUNCH(what);
}

#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f

/* e^x with x clamped to <= 87, as the CPU's cpu_expf (keeps e finite: no inf * 0 below) */
__device__ __forceinline__ float exp_clamped(float x) { return expf(fminf(x, 87.0f)); }

/* tanh: x sigmoid(2u) = x / (1 + e^-2u), u = sqrt(2/pi)(x + 0.044715 x^3);
 * exact: 0.5 x erfc(-x / sqrt 2). */
template <tsr_gelu_kind K> __device__ __forceinline__ float gelu_value(float x) {
    if constexpr (K == TSR_GELU_TANH) {
        float u = GELU_K0 * (x + GELU_K1 * x * x * x);
        return x / (1.0f + exp_clamped(-2.0f * u));
    } else {
        return 0.5f * x * erfcf(x * -0.70710678118654752f);
    }
}
/* tanh: s + 2 x s (1 - s) u', s = sigmoid(2u), 1 - s = e s, u' = sqrt(2/pi)(1 + 3 * 0.044715 x^2);
 * exact: 0.5 erfc(-x / sqrt 2) + x e^(-x^2/2) / sqrt(2 pi). */
template <tsr_gelu_kind K> __device__ __forceinline__ float gelu_grad(float x) {
    if constexpr (K == TSR_GELU_TANH) {
        float u = GELU_K0 * (x + GELU_K1 * x * x * x);
        float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
        float e = exp_clamped(-2.0f * u);
        float sg = 1.0f / (1.0f + e);
        return sg + 2.0f * x * sg * (e * sg) * du;
    } else {
        float cdf = 0.5f * erfcf(x * -0.70710678118654752f);
        float pdf = 0.3989422804014327f * expf(-0.5f * x * x);
        return cdf + x * pdf;
    }
}

/* out = gelu(inp).  out, inp (n) bf16 (out may be inp) */
template <tsr_gelu_kind K> struct gelu_forward_op {
    bf16 *out;
    const bf16 *inp;
    __device__ void pack(size_t i) const {
        float x[8];
        tcu_load_bf16<8>(x, inp + i);
#pragma unroll
        for (int j = 0; j < 8; j++) x[j] = gelu_value<K>(x[j]);
        tcu_store_bf16<8>(out + i, x);
    }
    __device__ void one(size_t i) const {
        out[i] = __float2bfloat16_rn(gelu_value<K>(__bfloat162float(inp[i])));
    }
};

/* dinp += gelu'(inp) * dout.  dinp, inp, dout (n) bf16 */
template <tsr_gelu_kind K> struct gelu_backward_op {
    bf16 *dinp;
    const bf16 *inp, *dout;
    bool set; /* TSR_GRAD_SET: dinp written, not read */
    __device__ void pack(size_t i) const {
        float x[8], g[8], d[8] = {};
        tcu_load_bf16<8>(x, inp + i);
        tcu_load_bf16<8>(g, dout + i);
        if (!set) tcu_load_bf16<8>(d, dinp + i);
#pragma unroll
        for (int j = 0; j < 8; j++) d[j] += gelu_grad<K>(x[j]) * g[j];
        tcu_store_bf16<8>(dinp + i, d);
    }
    __device__ void one(size_t i) const {
        float x = __bfloat162float(inp[i]), g = __bfloat162float(dout[i]);
        float d = (set ? 0.0f : __bfloat162float(dinp[i])) + gelu_grad<K>(x) * g;
        dinp[i] = __float2bfloat16_rn(d);
    }
};

/* out = a + b.  out, a, b (n) bf16 (out may be a or b) */
struct residual_forward_op {
    bf16 *out;
    const bf16 *a, *b;
    __device__ void pack(size_t i) const {
        float x[8], y[8];
        tcu_load_bf16<8>(x, a + i);
        tcu_load_bf16<8>(y, b + i);
#pragma unroll
        for (int j = 0; j < 8; j++) x[j] += y[j];
        tcu_store_bf16<8>(out + i, x);
    }
    __device__ void one(size_t i) const {
        out[i] = __float2bfloat16_rn(__bfloat162float(a[i]) + __bfloat162float(b[i]));
    }
};

/* da += dout; db += dout.  da, db, dout (n) bf16. same (da == db): da = (da + dout) + dout in
 * fp32, rounded once (the CPU's two += on one buffer) */
struct residual_backward_op {
    bf16 *da, *db;
    const bf16 *dout;
    bool same;
    __device__ void pack(size_t i) const {
        float g[8], x[8], y[8];
        tcu_load_bf16<8>(g, dout + i);
        tcu_load_bf16<8>(x, da + i);
        if (same) {
#pragma unroll
            for (int j = 0; j < 8; j++) x[j] = (x[j] + g[j]) + g[j];
        } else {
            tcu_load_bf16<8>(y, db + i);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                x[j] += g[j];
                y[j] += g[j];
            }
            tcu_store_bf16<8>(db + i, y);
        }
        tcu_store_bf16<8>(da + i, x);
    }
    __device__ void one(size_t i) const {
        float g = __bfloat162float(dout[i]), x = __bfloat162float(da[i]) + g;
        if (same) x += g;
        else db[i] = __float2bfloat16_rn(__bfloat162float(db[i]) + g);
        da[i] = __float2bfloat16_rn(x);
    }
};

} // namespace

void tcu_gelu_forward(tsr_bf16 *out, const tsr_bf16 *inp, size_t n, tsr_gelu_kind kind,
                      tcu_stream s) {
    const char *what = "tcu_gelu_forward";
    bool vec = tcu_aligned16(out) && tcu_aligned16(inp);
    bf16 *o = (bf16 *)out;
    const bf16 *x = (const bf16 *)inp;
    if (kind == TSR_GELU_TANH)
        launch_packs_of_8(gelu_forward_op<TSR_GELU_TANH>{o, x}, n, vec, s, what);
    else if (kind == TSR_GELU_EXACT)
        launch_packs_of_8(gelu_forward_op<TSR_GELU_EXACT>{o, x}, n, vec, s, what);
    else tcu_fail(what, tcu_msg("unknown GELU kind %d", (int)kind), __FILE__, __LINE__);
}

void tcu_gelu_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, size_t n,
                       tsr_gelu_kind kind, tsr_grad_mode mode, tcu_stream s) {
    const char *what = "tcu_gelu_backward";
    bool vec = tcu_aligned16(dinp) && tcu_aligned16(inp) && tcu_aligned16(dout);
    bf16 *d = (bf16 *)dinp;
    const bf16 *x = (const bf16 *)inp, *g = (const bf16 *)dout;
    const bool set = mode == TSR_GRAD_SET;
    if (kind == TSR_GELU_TANH)
        launch_packs_of_8(gelu_backward_op<TSR_GELU_TANH>{d, x, g, set}, n, vec, s, what);
    else if (kind == TSR_GELU_EXACT)
        launch_packs_of_8(gelu_backward_op<TSR_GELU_EXACT>{d, x, g, set}, n, vec, s, what);
    else tcu_fail(what, tcu_msg("unknown GELU kind %d", (int)kind), __FILE__, __LINE__);
}

void tcu_residual_forward(tsr_bf16 *out, const tsr_bf16 *a, const tsr_bf16 *b, size_t n,
                          tcu_stream s) {
    bool vec = tcu_aligned16(out) && tcu_aligned16(a) && tcu_aligned16(b);
    launch_packs_of_8(residual_forward_op{(bf16 *)out, (const bf16 *)a, (const bf16 *)b}, n, vec, s,
                      "tcu_residual_forward");
}

/* da and db may be the same buffer (it then gets dout twice, as on the CPU); partial overlap is
 * not supported. */
void tcu_residual_backward(tsr_bf16 *da, tsr_bf16 *db, const tsr_bf16 *dout, size_t n,
                           tcu_stream s) {
    bool vec = tcu_aligned16(da) && tcu_aligned16(db) && tcu_aligned16(dout);
    launch_packs_of_8(residual_backward_op{(bf16 *)da, (bf16 *)db, (const bf16 *)dout, da == db}, n,
                      vec, s, "tcu_residual_backward");
}

/* ---- fp32 add ------------------------------------------------------------------------------ */

namespace {

/* dst[i] += src[i] for i < n.  dst, src (n) fp32 (the same buffer, or not overlapping).
 * Grid-stride over size_t indices (n may exceed 2^31), 256 threads; one fp32 add per element
 * (__fadd_rn: never contracted), so the result does not depend on the launch. */
__global__ void add_f32_grid_stride(float *dst, const float *src, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = __fadd_rn(dst[i], src[i]);
}

} // namespace

/* No scratch and no context: safe on any stream, concurrently with ops on another stream. */
void tcu_add_f32(float *dst, const float *src, size_t n, tcu_stream s) {
    const char *what = "tcu_add_f32";
    if (n == 0) return;
    TCU_REQUIRE(dst && src, what, "dst and src must not be NULL");
    add_f32_grid_stride<<<ew_grid(n), EW_THREADS, 0, s>>>(dst, src, n);
    TCU_CHECK_LAUNCH(what);
}
