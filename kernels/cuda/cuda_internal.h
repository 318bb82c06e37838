/* cuda_internal.h — what the .cu files of kernels/cuda/ share: error checks, the cuBLASLt context,
 * bf16 helpers, launch arithmetic. Not part of the public interface (cuda_ops.h is). */
#ifndef TSR_CUDA_INTERNAL_H
#define TSR_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "cuda_ops.h"
#include "tcu_args.h"  /* the argument rules the emulator shares */
#include "tcu_index.h" /* the index arithmetic the emulator shares */

typedef __nv_bfloat16 bf16;

/* Exits the process (status 1) with "tessera cuda: WHAT: CUDA's message (file:line)". */
[[noreturn]] void tcu_fail(const char *what, const char *msg, const char *file, int line);
/* a CUDA runtime call */
#define TCU_CHECK(call, what)                                                                   \
    do {                                                                                        \
        cudaError_t tcu_err_ = (call);                                                          \
        if (tcu_err_ != cudaSuccess) tcu_fail((what), cudaGetErrorString(tcu_err_), __FILE__,   \
                                              __LINE__);                                        \
    } while (0)
/* after every kernel launch: the launch's own error (bad configuration, no kernel image) */
#define TCU_CHECK_LAUNCH(what) TCU_CHECK(cudaGetLastError(), (what))
/* a cuBLASLt call */
#define TCU_CHECK_BLAS(call, what)                                                              \
    do {                                                                                        \
        cublasStatus_t tcu_st_ = (call);                                                        \
        if (tcu_st_ != CUBLAS_STATUS_SUCCESS)                                                   \
            tcu_fail((what), cublasLtGetStatusString(tcu_st_), __FILE__, __LINE__);               \
    } while (0)
/* a precondition the op cannot handle: names the op and the offending value */
#define TCU_REQUIRE(cond, what, fmt_value)                                                      \
    do {                                                                                        \
        if (!(cond)) tcu_fail((what), (fmt_value), __FILE__, __LINE__);                         \
    } while (0)
/* one of tcu_args.h's rules, shared with the emulator: rule(buffer, its size, args...) */
#define TCU_REQUIRE_RULE(what, rule, ...)                                                       \
    do {                                                                                        \
        char tcu_rule_m_[256];                                                                  \
        const char *tcu_rule_why_ = rule(tcu_rule_m_, sizeof tcu_rule_m_, __VA_ARGS__);         \
        if (tcu_rule_why_) tcu_fail((what), tcu_rule_why_, __FILE__, __LINE__);                 \
    } while (0)

/* The process-wide context tcu_init makes (cuda_context.cu; the data lives in cuda_common.cu). */
typedef struct tcu_context {
    int device;
    int sm_count;
    size_t smem_optin;           /* cudaDevAttrMaxSharedMemoryPerBlockOptin */
    cublasLtHandle_t lt;
    void *lt_workspace;          /* cuBLASLt workspace, lt_workspace_bytes */
    size_t lt_workspace_bytes;
} tcu_context;
extern tcu_context tcu_ctx;
extern bool tcu_initialised; /* tcu_init ran (cuda_context.cu) and tcu_shutdown did not since */
/* dies unless tcu_init ran */
const tcu_context *tcu_context_get(const char *what);
/* free what cuda_elementwise.cu, cuda_layernorm.cu and cuda_matmul.cu cache (tcu_shutdown calls
 * them) */
void tcu_elementwise_release(void);
void tcu_layernorm_release(void);
void tcu_matmul_release(void);

/* D (m,n) = alpha op(A) op(B) + beta D, column-major, fp32 everywhere (CUBLAS_COMPUTE_32F: no
 * TF32): A stored (m,k), or (k,m) transposed, with lda; B likewise with ldb; D with ldd. The
 * cuBLASLt path of tcu_matmul_* (cuda_matmul.cu: its workspace, fixed-order fp32 reduction,
 * alignment rule and algorithm cache). Exits naming what and the shape when cuBLASLt has no
 * algorithm. */
void tcu_lt_gemm_f32(const char *what, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                     int k, float alpha, const float *a, int lda, const float *b, int ldb,
                     float beta, float *d, int ldd, tcu_stream s);

/* printf into a buffer of the calling thread, for messages built only on a failure path
 * (TCU_REQUIRE's value); the next call overwrites it */
const char *tcu_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static inline bool tcu_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* the 8 bf16 of one 16-byte register group -> fp32 (exact): what tcu_load_bf16<8, true> does
 * after its load */
__device__ __forceinline__ void tcu_unpack_bf16x8(float *v, int4 raw) {
    __nv_bfloat162 h[4];
    memcpy(h, &raw, sizeof raw);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 f = __bfloat1622float2(h[k]);
        v[2 * k] = f.x;
        v[2 * k + 1] = f.y;
    }
}

/* 8 consecutive bf16 as they lie in memory (tcu_unpack_bf16x8 widens them): VEC one 16-byte
 * load (p 16-byte aligned), else 8 scalar loads */
template <bool VEC> __device__ __forceinline__ int4 tcu_load_raw8(const bf16 *p) {
    if constexpr (VEC) {
        return *reinterpret_cast<const int4 *>(p);
    } else {
        bf16 h[8];
#pragma unroll
        for (int k = 0; k < 8; k++) h[k] = p[k];
        int4 raw;
        memcpy(&raw, h, sizeof raw);
        return raw;
    }
}

/* W consecutive bf16 <-> fp32: widening is exact, narrowing rounds to nearest even.
 * VEC: one 16-byte access (W == 8, p 16-byte aligned); else W scalar accesses. */
template <int W, bool VEC = (W == 8)>
__device__ __forceinline__ void tcu_load_bf16(float *v, const bf16 *p) {
    if constexpr (VEC) {
        static_assert(W == 8, "a 16-byte access holds 8 bf16");
        tcu_unpack_bf16x8(v, *reinterpret_cast<const int4 *>(p));
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) v[k] = __bfloat162float(p[k]);
    }
}
template <int W, bool VEC = (W == 8)>
__device__ __forceinline__ void tcu_store_bf16(bf16 *p, const float *v) {
    if constexpr (VEC) {
        static_assert(W == 8, "a 16-byte access holds 8 bf16");
        __nv_bfloat162 h[4];
#pragma unroll
        for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
        int4 raw;
        memcpy(&raw, h, sizeof raw);
        *reinterpret_cast<int4 *>(p) = raw;
    } else {
#pragma unroll
        for (int k = 0; k < W; k++) p[k] = __float2bfloat16_rn(v[k]);
    }
}

static inline unsigned tcu_blocks(size_t n, unsigned threads) {
    return (unsigned)((n + threads - 1) / threads);
}

/* sum over the 32 lanes of a warp (butterfly: every lane gets the same bits) */
__device__ __forceinline__ float tcu_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Block-wide sum of (x, y), the same value returned to every thread; fixed order (warp butterfly,
 * then warps 0..nw-1 in order). red: 32 float2 of shared memory; all threads must call it. The
 * leading barrier lets it be called again (next row) while slower threads still read red. */
__device__ __forceinline__ float2 tcu_block_sum2(float2 v, float2 *red) {
    v.x = tcu_warp_sum(v.x);
    v.y = tcu_warp_sum(v.y);
    const int nw = blockDim.x >> 5;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float2 t = make_float2(0.0f, 0.0f);
    for (int i = 0; i < nw; i++) {
        t.x += red[i].x;
        t.y += red[i].y;
    }
    return t;
}

/* *dst += the sum of every thread's acc over a block of 256 threads, in a fixed order (a tree
 * over red, 256 floats of shared memory); all threads must call it (the sink gradients of
 * cuda_attention.cu and cuda_ring.cu) */
__device__ __forceinline__ void tcu_block256_add(float *dst, float acc, float *red) {
    red[threadIdx.x] = acc;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *dst += red[0];
}

/* The deterministic weight gradients of the norm backwards (cuda_layernorm.cu; LayerNorm and the
 * RMSNorms of cuda_llama.cu share them, and the matmul's bias gradient, cuda_matmul.cu): the
 * rows are cut into groups of tcu_norm_rows_per_group(N) rows (a function of N only), each block
 * sums its group's column terms in row order into row p of a partial scratch (P rows of `stride`
 * floats, from tcu_norm_partial_scratch: one process-wide buffer, grown on demand, freed by
 * tcu_shutdown), and tcu_norm_param_grad_reduce adds the P partials per column in a fixed order:
 *   dw[c] += sum_p partial[p*stride + c], db[c] += sum_p partial[p*stride + C + c] (db or NULL;
 * with db, stride >= 2C; dw NULL: its columns not added). A norm backward whose weight gradients
 * are all NULL (frozen) computes dinp alone: no partial sums, no scratch, no reduction. */
int tcu_norm_rows_per_group(int N);
float *tcu_norm_partial_scratch(size_t bytes, const char *what);
void tcu_norm_param_grad_reduce(float *dw, float *db, const float *partial, int P, int C,
                                size_t stride, cudaStream_t st, const char *what);
/* The norms' backward with a warp per row (cuda_layernorm.cu; LayerNorm, or RMSNorm when rms):
 * where it applies (C % 8 == 0, C <= 1024, contiguous rows; the same bits aligned or not) it
 * launches dinp += and, when grads, the P partial rows above into partial (stride 2C for
 * LayerNorm, C for RMSNorm), and returns true; else false, having launched nothing. */
bool tcu_norm_backward_warp_rows(bool rms, bf16 *dinp, float *partial, const bf16 *dout,
                                 const bf16 *inp, const bf16 *w, const float *mean,
                                 const float *rstd, int N, int C, bool grads, bool with_db,
                                 cudaStream_t st, const char *what);

/* The attention of cuda_attention.cu with the keys at kend.. masked for every query (1 <= kend
 * <= T; kend = T: tcu_attention_forward / _backward themselves). A row that sees no key gets out
 * 0 and lse -inf. With kend < T the rows before kend are keys only: only the rows from the query
 * tile holding row kend are computed (out, lse, dq of the rows before it are not written; those
 * of the tile's rows before kend are, from their q, which must be finite); the backward writes no
 * dk, dv of the masked keys, gives the keys' dk, dv from the rows of those tiles (lse 1e30 makes
 * a row's probabilities 0) and never runs the fused dq. Context parallelism's blocks use them
 * (cuda_ring.cu). tcu_attention_keys_row0: the first row the kernels read (q, dout, out, lse)
 * with kend < T, kend rounded down to the largest query tile (128 rows): the caller makes the
 * rows from it to kend finite, and the rows before it are never read as queries. */
extern "C" int tcu_attention_keys_row0(int kend, int T);
/* var: the layer's variants (tcu_attention_forward_var), or NULL; the ring gives no sinks here
 * (it merges the sink itself, cuda_ring.cu), and the backward refuses sink gradients with
 * kend < T. */
extern "C" void tcu_attention_forward_keys(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv,
                                           const float *alibi_slopes, const int32_t *seq,
                                           const tsr_attn_var *var, int B, int T, int kend,
                                           int NH, int KVH, int hs, tcu_stream s);
extern "C" void tcu_attention_backward_keys(tsr_bf16 *dqkv, const tsr_bf16 *dout,
                                            const tsr_bf16 *qkv, const tsr_bf16 *out,
                                            const float *lse, const float *alibi_slopes,
                                            const int32_t *seq, const tsr_attn_var *var,
                                            void *scratch, int B, int T, int kend, int NH, int KVH,
                                            int hs, tsr_grad_mode mode, tcu_stream s);

#endif
