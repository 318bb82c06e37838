/* cuda_decode.cu — batched decoding on the GPU (cuda_ops.h tcu_attention_decode, tcu_matmul_rows;
 * docs/generate.md "Batched generation"): the ops of ops.h attention_decode(_rows) and
 * matmul_rows, in bf16 storage with fp32 arithmetic.
 *
 * File-wide conventions (cuda_ops.h):
 *   - every row of a decode step is computed by its own blocks or warps with a fixed reduction
 *     order, so a row's result does not depend on which other rows share the launch (the
 *     batch invariance of the CPU ops, here within one GPU);
 *   - the KV cache is bf16, laid out as the CPU's: per slot and layer, kt (KVH, hs, cap) keys
 *     transposed per head, v (KVH, cap, hs);
 *   - every launch on the caller's stream, checked (TCU_CHECK_LAUNCH); n == 0 returns at once.
 */
#include <cstdint>

#include "cuda_internal.h"

#define DEC_THREADS 128 /* attention: one block per (row, query head) */
#define ROWS_THREADS 256 /* matmul_rows: 8 warps, one output column each */

/* where row i of a decode call lives: its slot, position and segment start */
struct dec_rows {
    const int32_t *slot, *pos, *seg; /* device arrays, or NULL: slot 0, p0 + i, seg0 */
    int p0, seg0;
};

__device__ __forceinline__ void row_at(const dec_rows &R, int i, int *sl, int *p, int *sg) {
    *sl = R.slot ? R.slot[i] : 0;
    *p = R.pos ? R.pos[i] : R.p0 + i;
    *sg = R.seg ? R.seg[i] : R.seg0;
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
        kts[((size_t)g * hs + d) * cap + p] = k[e];
        vs[((size_t)g * cap + p) * hs + d] = vi[e];
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

/* Query head h of row i over its slot's cached positions seg..p:
 *   s_j = (q . k_j) / sqrt(hs) - slope_h (p - j),  a = softmax(s),  out = sum_j a_j v_j
 * Launch: grid (n, NH), DEC_THREADS, dynamic shared memory (cap + hs + 32) floats: the scores,
 * the query in fp32, the reduction's slots. Thread t scores j = seg + t, + DEC_THREADS, ...;
 * then output column d = t, t + DEC_THREADS, ... sums over j in order. */
__global__ void __launch_bounds__(DEC_THREADS)
    decode_kernel(bf16 *out, const bf16 *kt, const bf16 *v, const bf16 *qkv, const float *slopes,
                  dec_rows R, size_t slot_stride, int cap, int NH, int KVH, int hs) {
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
    const float scale = 1.0f / sqrtf((float)hs), slope = slopes ? slopes[h] : 0.0f;
    float mx = -INFINITY;
    for (int j = sg + threadIdx.x; j <= p; j += DEC_THREADS) {
        float s = 0.0f;
        for (int d = 0; d < hs; d++) s = fmaf(q[d], __bfloat162float(kh[(size_t)d * cap + j]), s);
        s = s * scale - slope * (float)(p - j);
        sc[j - sg] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_reduce<true>(mx, red);
    float sum = 0.0f;
    for (int j = sg + threadIdx.x; j <= p; j += DEC_THREADS) {
        const float e = expf(sc[j - sg] - mx);
        sc[j - sg] = e;
        sum += e;
    }
    sum = block_reduce<false>(sum, red);
    __syncthreads(); /* every score written */
    const float inv = 1.0f / sum;
    for (int d = threadIdx.x; d < hs; d += DEC_THREADS) {
        float acc = 0.0f;
        for (int j = sg; j <= p; j++) acc = fmaf(sc[j - sg], __bfloat162float(vh[(size_t)j * hs + d]), acc);
        out[(size_t)i * NH * hs + (size_t)h * hs + d] = __float2bfloat16_rn(acc * inv);
    }
}

void tcu_attention_decode(tsr_bf16 *out, tsr_bf16 *kt, tsr_bf16 *v, const tsr_bf16 *qkv,
                          const float *alibi_slopes, const int32_t *slot, const int32_t *pos,
                          const int32_t *seg, int p0, int seg0, int n, size_t slot_stride, int cap,
                          int NH, int KVH, int hs, tcu_stream s) {
    const char *what = "tcu_attention_decode";
    TCU_REQUIRE(n >= 0 && cap >= 1 && hs >= 1 && KVH >= 1 && NH % KVH == 0, what,
                tcu_msg("need n >= 0, cap, hs >= 1 and NH a multiple of KVH: n=%d cap=%d NH=%d "
                        "KVH=%d hs=%d", n, cap, NH, KVH, hs));
    if (n == 0) return;
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
        (bf16 *)out, (const bf16 *)kt, (const bf16 *)v, (const bf16 *)qkv, alibi_slopes, R,
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
