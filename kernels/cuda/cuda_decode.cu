/* cuda_decode.cu — batched decoding on the GPU (cuda_ops.h tcu_attention_decode, tcu_matmul_rows;
 * docs/generate.md "Batched generation"): the ops of ops.h attention_decode(_rows) and
 * matmul_rows, in bf16 storage with fp32 arithmetic.
 *
 * File-wide conventions (cuda_ops.h):
 *   - every row of a decode step is computed by its own blocks or warps with a fixed reduction
 *     order, so a row's result does not depend on which other rows share the launch (the
 *     batch invariance of the CPU ops, here within one GPU);
 *   - the KV cache is bf16, laid out as the CPU's: per slot and layer, kt (KVH, hs, cap) keys
 *     transposed per head, v (KVH, cap, hs), a ring of cap positions (position p at index
 *     p % cap: a full layer's cap is the whole context, a sliding layer's its window W, which
 *     keeps the last W positions; cpu_attention.c, docs/decoder.md "Rolling window");
 *   - the layer's variants (ops.h tsr_attn_var, cpu_attention.c's maths): a window W (a row at
 *     position p sees positions from max(seg, p - W + 1)), the score scale, the soft cap and the
 *     sinks (e^sink_h joins the softmax denominator);
 *   - every launch on the caller's stream, checked (TCU_CHECK_LAUNCH); n == 0 returns at once.
 */
#include <cstdint>

#include "cuda_internal.h"

#define DEC_THREADS 128 /* attention: one block per (row, query head) */
#define ROWS_THREADS 256 /* matmul_rows: 8 warps, one output column each */

/* the layer's variants as the decode kernel takes them (tcu_attention_decode_var) */
struct dec_var {
    int window;          /* 0: none */
    float scale, cap;    /* the scores' factor; the soft cap (0: none) */
    const bf16 *sinks;   /* (NH) bf16 on the device, or NULL */
};

/* where row i of a decode call lives: its slot, position and segment start */
struct dec_rows {
    const int32_t *slot, *pos, *seg; /* device arrays, or NULL: slot 0, p0 + i, seg0 */
    int p0, seg0;
};

__device__ __forceinline__ void row_at(const dec_rows &R, int i, int *sl, int *p, int *sg) {
    tcu_decode_row(R.slot, R.pos, R.seg, R.p0, R.seg0, i, sl, p, sg);
}

/* Row i's key and value (its qkv's k and v heads) into its slot's cache at its position.
 * Launch: grid n, DEC_THREADS; thread t copies elements t, t + DEC_THREADS, ... of KVH hs. */
__global__ void __launch_bounds__(DEC_THREADS)
    cache_store_kernel(bf16 *kt, bf16 *v, const bf16 *qkv, dec_rows R, size_t slot_stride,
                       int cap, int NH, int KVH, int hs) {
    const int i = blockIdx.x;
    int sl, p, sg;
    row_at(R, i, &sl, &p, &sg);
    const size_t QKV = (size_t)(NH + 2 * KVH) * hs;
    const bf16 *k = qkv + (size_t)i * QKV + (size_t)NH * hs, *vi = k + (size_t)KVH * hs;
    bf16 *kts = kt + (size_t)sl * slot_stride, *vs = v + (size_t)sl * slot_stride;
    for (int e = threadIdx.x; e < KVH * hs; e += DEC_THREADS) {
        const int g = e / hs, d = e % hs;
        kts[tcu_kv_key_at(g, d, p, hs, cap)] = k[e];
        vs[tcu_kv_value_at(g, d, p, hs, cap)] = vi[e];
    }
}

/* a block's max or sum of v (fixed tree: warp shuffles, then warp 0 over the warps' results) */
template <bool MAX> __device__ float block_reduce(float v, float *red) {
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, w) : v + w;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads(); /* (red may hold the previous reduction's values) */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = red[0];
    for (int k = 1; k < DEC_THREADS / 32; k++) v = MAX ? fmaxf(v, red[k]) : v + red[k];
    return v;
}

/* Query head h of row i over its slot's cached positions s0..p, s0 = max(seg, p - W + 1) (seg
 * without a window), position j at index j % cap:
 *   s_j = c((q . k_j) scale) - slope_h (p - j),  a = softmax(s) (with a sink: e^sink_h in its
 *   denominator),  out = sum_j a_j v_j;  c the soft cap (cap tanh(x / cap)) or none.
 * Launch: grid (n, NH), DEC_THREADS, dynamic shared memory (cap + hs + 32) floats: the scores,
 * the query in fp32, the reduction's slots. Thread t scores j = s0 + t, + DEC_THREADS, ...;
 * then output column d = t, t + DEC_THREADS, ... sums over j in order. */
__global__ void __launch_bounds__(DEC_THREADS)
    decode_kernel(bf16 *out, const bf16 *kt, const bf16 *v, const bf16 *qkv, const float *slopes,
                  dec_rows R, dec_var V, size_t slot_stride, int cap, int NH, int KVH, int hs) {
    extern __shared__ float sm[];
    float *sc = sm, *q = sm + cap, *red = q + hs;
    const int i = blockIdx.x, h = blockIdx.y, g = h / (NH / KVH);
    int sl, p, sg;
    row_at(R, i, &sl, &p, &sg);
    const size_t QKV = (size_t)(NH + 2 * KVH) * hs;
    for (int d = threadIdx.x; d < hs; d += DEC_THREADS)
        q[d] = __bfloat162float(qkv[(size_t)i * QKV + (size_t)h * hs + d]);
    __syncthreads();
    const bf16 *kh = kt + (size_t)sl * slot_stride + (size_t)g * hs * cap;
    const bf16 *vh = v + (size_t)sl * slot_stride + (size_t)g * cap * hs;
    const float slope = slopes ? slopes[h] : 0.0f;
    const int s0 = V.window > 0 && p - V.window + 1 > sg ? p - V.window + 1 : sg;
    float mx = -INFINITY;
    for (int j = s0 + threadIdx.x; j <= p; j += DEC_THREADS) {
        const int at = j % cap;
        float s = 0.0f;
        for (int d = 0; d < hs; d++) s = fmaf(q[d], __bfloat162float(kh[(size_t)d * cap + at]), s);
        s = s * V.scale;
        if (V.cap > 0.0f) s = V.cap * tanhf(s / V.cap);
        s -= slope * (float)(p - j);
        sc[j - s0] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_reduce<true>(mx, red);
    const float sink = V.sinks ? __bfloat162float(V.sinks[h]) : 0.0f;
    if (V.sinks) mx = fmaxf(mx, sink);
    float sum = 0.0f;
    for (int j = s0 + threadIdx.x; j <= p; j += DEC_THREADS) {
        const float e = expf(sc[j - s0] - mx);
        sc[j - s0] = e;
        sum += e;
    }
    sum = block_reduce<false>(sum, red);
    if (V.sinks) sum += expf(sink - mx); /* the sink's share of the denominator */
    __syncthreads(); /* every score written */
    const float inv = 1.0f / sum;
    for (int d = threadIdx.x; d < hs; d += DEC_THREADS) {
        float acc = 0.0f;
        for (int j = s0; j <= p; j++)
            acc = fmaf(sc[j - s0], __bfloat162float(vh[(size_t)(j % cap) * hs + d]), acc);
        out[(size_t)i * NH * hs + (size_t)h * hs + d] = __float2bfloat16_rn(acc * inv);
    }
}

/* The variants of tsr_attn_var (or NULL) as the kernel takes them */
static dec_var dec_var_of(const tsr_attn_var *var, int hs, const char *what) {
    dec_var V = {0, 1.0f / sqrtf((float)hs), 0.0f, NULL};
    if (!var) return V;
    TCU_REQUIRE(var->window >= 0 && var->softcap >= 0.0f && var->scale >= 0.0f, what,
                tcu_msg("window = %d, softcap = %g, scale = %g: expected none negative",
                        var->window, (double)var->softcap, (double)var->scale));
    V.window = var->window, V.cap = var->softcap;
    V.sinks = (const bf16 *)var->sinks; /* bf16 on this backend (cuda_ops.h) */
    if (var->scale > 0.0f) V.scale = var->scale;
    return V;
}

/* tcu_attention_decode with the layer's variants (cuda_ops.h). A chunk of one sequence (slot,
 * pos NULL) whose positions wrap round the ring (p0 + n > cap: a sliding layer's) goes one row
 * at a time, as the CPU's does: a later row's key would overwrite one an earlier row sees. */
void tcu_attention_decode_var(tsr_bf16 *out, tsr_bf16 *kt, tsr_bf16 *v, const tsr_bf16 *qkv,
                              const float *alibi_slopes, const tsr_attn_var *var,
                              const int32_t *slot, const int32_t *pos, const int32_t *seg, int p0,
                              int seg0, int n, size_t slot_stride, int cap, int NH, int KVH,
                              int hs, tcu_stream s) {
    const char *what = "tcu_attention_decode";
    TCU_REQUIRE_RULE(what, tcu_rule_decode, n, cap, NH, KVH, hs);
    if (n == 0) return;
    const dec_var V = dec_var_of(var, hs, what);
    if (n > 1 && !slot && !pos && p0 + n > cap) {
        const size_t QKV = (size_t)(NH + 2 * KVH) * hs, C = (size_t)NH * hs;
        for (int i = 0; i < n; i++)
            tcu_attention_decode_var(out + i * C, kt, v, qkv + i * QKV, alibi_slopes, var, NULL,
                                     NULL, seg ? seg + i : NULL, p0 + i, seg0, 1, slot_stride,
                                     cap, NH, KVH, hs, s);
        return;
    }
    cudaStream_t st = (cudaStream_t)s;
    const dec_rows R = {slot, pos, seg, p0, seg0};
    cache_store_kernel<<<n, DEC_THREADS, 0, st>>>((bf16 *)kt, (bf16 *)v, (const bf16 *)qkv, R,
                                                  slot_stride, cap, NH, KVH, hs);
    TCU_CHECK_LAUNCH(what);
    const size_t smem = ((size_t)cap + (size_t)hs + 32) * sizeof(float);
    if (smem > 48 * 1024) {
        TCU_REQUIRE(smem <= tcu_context_get(what)->smem_optin, what,
                    tcu_msg("a cache of %d positions needs %zu bytes of shared memory, the GPU "
                            "gives %zu", cap, smem, tcu_context_get(what)->smem_optin));
        TCU_CHECK(cudaFuncSetAttribute(decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem), what);
    }
    decode_kernel<<<dim3((unsigned)n, (unsigned)NH), DEC_THREADS, smem, st>>>(
        (bf16 *)out, (const bf16 *)kt, (const bf16 *)v, (const bf16 *)qkv, alibi_slopes, R, V,
        slot_stride, cap, NH, KVH, hs);
    TCU_CHECK_LAUNCH(what);
}

/* out[r][o] = inp[r] . w[o] + bias[o] for every row r: one warp per column o, lane l summing
 * elements l, l + 32, ... in order, then a fixed xor tree. Launch: grid ceil(OC / 8),
 * ROWS_THREADS. */
__global__ void __launch_bounds__(ROWS_THREADS)
    matmul_rows_kernel(bf16 *out, const bf16 *inp, const bf16 *w, const bf16 *bias, int N,
                       int IC, int OC) {
    const int o = blockIdx.x * (ROWS_THREADS / 32) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (o >= OC) return; /* whole warp */
    const bf16 *wo = w + (size_t)o * IC;
    const float b = bias ? __bfloat162float(bias[o]) : 0.0f;
    for (int r = 0; r < N; r++) {
        const bf16 *x = inp + (size_t)r * IC;
        float acc = 0.0f;
        for (int i = lane; i < IC; i += 32)
            acc = fmaf(__bfloat162float(x[i]), __bfloat162float(wo[i]), acc);
        for (int k = 16; k > 0; k >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, k);
        if (lane == 0) out[(size_t)r * OC + o] = __float2bfloat16_rn(acc + b);
    }
}

void tcu_matmul_rows(tsr_bf16 *out, const tsr_bf16 *inp, const tsr_bf16 *w, const tsr_bf16 *bias,
                     int N, int IC, int OC, tcu_stream s) {
    const char *what = "tcu_matmul_rows";
    TCU_REQUIRE(N >= 0 && IC >= 1 && OC >= 1, what,
                tcu_msg("need N >= 0, IC >= 1, OC >= 1: N=%d IC=%d OC=%d", N, IC, OC));
    if (N == 0) return;
    matmul_rows_kernel<<<tcu_blocks((size_t)OC, ROWS_THREADS / 32), ROWS_THREADS, 0,
                         (cudaStream_t)s>>>((bf16 *)out, (const bf16 *)inp, (const bf16 *)w,
                                            (const bf16 *)bias, N, IC, OC);
    TCU_CHECK_LAUNCH(what);
}
