/* cuda_lora.cu — LoRA's adapter path on one target projection (cuda_ops.h tcu_lora_forward,
 * tcu_lora_backward; ops.h lora_forward / lora_backward; docs/lora.md).
 *
 * File-wide conventions (cuda_ops.h): row-major tensors; inp, out, dout, dinp bf16; A (R,IC),
 * B (OC,R), dA, dB fp32; every reduction in fp32; dinp, dA, dB accumulate (+=); every launch and
 * cuBLASLt call on the caller's stream, every one checked.
 *
 * Strategy. The adapter products are small next to the base matmul (R is 8..64), so they run in
 * fp32 on fp32 copies, which keeps them within fp32 rounding of the CPU oracle:
 *   forward:  xd = drop(inp) (N,IC) fp32                      drop_widen_kernel
 *             t  = xd A^T (N,R)                               cuBLASLt fp32, K = IC
 *             out[:, block] = bf16(out + scale t B^T)         add_low_rank_kernel, K = R
 *   backward: xd, t again (recomputed: R is small), dz = dout[:, block] (N,OC) fp32
 *             dB += scale dz^T t (OC,R)                       cuBLASLt fp32, K = N
 *             t  = scale dz B (N,R)                           cuBLASLt fp32, K = OC
 *             dA += t^T xd (R,IC)                             cuBLASLt fp32, K = N
 *             dinp = bf16(dinp + mask/(1-p) (t A))            add_low_rank_kernel, K = R
 * The two products with K = R are elementwise kernels (each output element an R-term fp32 dot
 * product in k order, added to the bf16 value it lands on and rounded once): a GEMM there would
 * need an (N,OC) or (N,IC) fp32 temporary and a second pass to add it into the bf16 column block,
 * since cuBLASLt's C/D cannot be bf16 with fp32 A and B. Not fused into the base matmul's
 * epilogue: cuBLASLt has no epilogue that adds a second product, and the base matmul writes the
 * whole fused projection while the adapters add per target column block (q, k, v; gate, up).
 *
 * Dropout: ops.h's mask from SplitMix64 (common.h tsr_hash64, the same constants below) of the
 * key and the element's global index (row0 + n) * IC + c; u = (hash >> 40) 2^-24, dropped when
 * u < p, else scaled by 1 / (1 - p) in fp32: the CPU's masks bit for bit.
 *
 * The GEMMs are cuda_matmul.cu's (tcu_lt_gemm_f32, cuda_internal.h): its workspace, split-K
 * restricted to fp32 partial sums, alignment rule and algorithm cache, with fp32 operands.
 * Determinism: no atomics; cuBLASLt's algorithm from its heuristic (itself deterministic) for a
 * fixed (shape, transposes, types, alignment, workspace). Not tuned: xd/dz are fp32 copies (4
 * bytes per element of inp/dout) rather than bf16 operands.
 */
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "cuda_internal.h"

/* ---- the dropout hash: common.h tsr_hash64 on the device ------------------------------------ */

__device__ __forceinline__ uint64_t lora_hash64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* ops.h's draw for element i under key, in [0, 1), 24 bits (cpu_lora.c lora_u) */
__device__ __forceinline__ float lora_u(uint64_t key, uint64_t i) {
    return (float)(lora_hash64(key ^ lora_hash64(i)) >> 40) * 0x1.0p-24f;
}

#define LORA_THREADS 256

/* xd[n, c] = drop(inp)[n, c] in fp32: 0 when lora_u(key, (row0 + n) IC + c) < p, else
 * inp * (1 / (1 - p)); p = 0: inp widened. xd, inp (N,IC). Grid-stride over N*IC. */
static __global__ void drop_widen_kernel(float *xd, const bf16 *inp, float p, uint64_t key,
                                         int64_t row0, int N, int IC) {
    const size_t total = (size_t)N * (size_t)IC;
    const float keep = 1.0f / (1.0f - p);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const float x = __bfloat162float(inp[i]);
        if (p > 0.0f) {
            const size_t n = i / (size_t)IC, c = i % (size_t)IC;
            const uint64_t at = (uint64_t)(row0 + (int64_t)n) * (uint64_t)IC + (uint64_t)c;
            xd[i] = lora_u(key, at) < p ? 0.0f : x * keep;
        } else {
            xd[i] = x;
        }
    }
}

/* dz[n, j] = dout[n * ld + j] in fp32, j < OC (the target's column block). Grid-stride. */
static __global__ void block_widen_kernel(float *dz, const bf16 *dout, int ld, int N, int OC) {
    const size_t total = (size_t)N * (size_t)OC;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / (size_t)OC, j = i % (size_t)OC;
        dz[i] = __bfloat162float(dout[n * (size_t)ld + j]);
    }
}

/* y[n * ldy + j] = bf16(y + scale * sum_k t[n, k] w[k, j] (* mask)), j < J: the K = R products.
 * t (N,R) fp32; w's element (k, j) at w[k * wk + j * wj] (B^T: wk = 1, wj = R; A: wk = IC,
 * wj = 1). masked: the dropout mask of (n, j) under key and row0 applies (dinp of dropped inputs
 * gets nothing; kept ones times 1 / (1 - p)), the index as drop_widen_kernel's with IC = J.
 * Grid-stride over N*J; the k sum in order 0..R-1. */
static __global__ void add_low_rank_kernel(bf16 *y, int ldy, const float *t, const float *w,
                                           int wk, int wj, float scale, int masked, float p,
                                           uint64_t key, int64_t row0, int N, int J, int R) {
    const size_t total = (size_t)N * (size_t)J;
    const float keep = 1.0f / (1.0f - p);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / (size_t)J, j = i % (size_t)J;
        float acc = 0.0f;
        const float *tn = t + n * (size_t)R;
        for (int k = 0; k < R; k++) acc += tn[k] * w[(size_t)k * wk + j * (size_t)wj];
        acc *= scale;
        if (masked) {
            const uint64_t at = (uint64_t)(row0 + (int64_t)n) * (uint64_t)J + (uint64_t)j;
            if (lora_u(key, at) < p) continue;
            acc *= keep;
        }
        bf16 *o = y + n * (size_t)ldy + j;
        *o = __float2bfloat16_rn(__bfloat162float(*o) + acc);
    }
}

static unsigned grid_for(size_t n) {
    size_t b = (n + LORA_THREADS - 1) / LORA_THREADS;
    return (unsigned)(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

/* ---- the ops -------------------------------------------------------------------------------- */

/* t (N,R), xd (N,IC), dz (N,OC), each 256-byte aligned (tcu_index.h) */
size_t tcu_lora_scratch_bytes(int N, int IC, int OC, int R) {
    return tcu_lora_scratch_at(N, IC, OC, R, 3);
}

/* the scratch's three parts (tcu_lora_scratch_bytes's layout) */
static void scratch_parts(void *scratch, int N, int IC, int OC, int R, float **t, float **xd,
                          float **dz) {
    char *p = (char *)scratch;
    *t = (float *)(p + tcu_lora_scratch_at(N, IC, OC, R, 0));
    *xd = (float *)(p + tcu_lora_scratch_at(N, IC, OC, R, 1));
    *dz = (float *)(p + tcu_lora_scratch_at(N, IC, OC, R, 2));
}

/* t (N,R) = xd (N,IC) A^T: column-major t^T (R,N) = A (as (IC,R) stored, op T) xd^T (IC,N) */
static void xd_times_at(const char *what, float *t, const float *xd, const float *A, int N,
                        int IC, int R, tcu_stream s) {
    tcu_lt_gemm_f32(what, CUBLAS_OP_T, CUBLAS_OP_N, R, N, IC, 1.0f, A, IC, xd, IC, 0.0f, t, R, s);
}

/* xd (N,IC) = dropout(fp32(inp)): the input as both passes see it */
static void dropped_input(const char *what, float *xd, const tsr_bf16 *inp, float p, uint64_t key,
                          int64_t row0, int N, int IC, tcu_stream s) {
    drop_widen_kernel<<<grid_for((size_t)N * IC), LORA_THREADS, 0, (cudaStream_t)s>>>(
        xd, (const bf16 *)inp, p, key, row0, N, IC);
    TCU_CHECK_LAUNCH(what);
}

void tcu_lora_forward(tsr_bf16 *out, int ld, const tsr_bf16 *inp, const float *A, const float *B,
                      float scale, float p, uint64_t key, int64_t row0, void *scratch, int N,
                      int IC, int OC, int R, tcu_stream s) {
    const char *what = "tcu_lora_forward";
    TCU_REQUIRE_RULE(what, tcu_rule_lora, N, IC, OC, R, ld, p, scratch);
    float *t, *xd, *dz;
    scratch_parts(scratch, N, IC, OC, R, &t, &xd, &dz);
    const size_t no = (size_t)N * OC;
    dropped_input(what, xd, inp, p, key, row0, N, IC, s);
    xd_times_at(what, t, xd, A, N, IC, R, s);
    /* out[:, j] += scale sum_k t[:, k] B[j, k]: w(k, j) = B[j * R + k] */
    add_low_rank_kernel<<<grid_for(no), LORA_THREADS, 0, (cudaStream_t)s>>>(
        (bf16 *)out, ld, t, B, 1, R, scale, 0, 0.0f, 0, 0, N, OC, R);
    TCU_CHECK_LAUNCH(what);
}

void tcu_lora_backward(tsr_bf16 *dinp, float *dA, float *dB, const tsr_bf16 *dout, int ld,
                       const tsr_bf16 *inp, const float *A, const float *B, float scale, float p,
                       uint64_t key, int64_t row0, void *scratch, int N, int IC, int OC, int R,
                       tcu_stream s) {
    const char *what = "tcu_lora_backward";
    TCU_REQUIRE_RULE(what, tcu_rule_lora, N, IC, OC, R, ld, p, scratch);
    TCU_REQUIRE(dout != NULL && inp != NULL, what, "dout and inp must not be NULL");
    if (!dinp && !dA && !dB) return;
    float *t, *xd, *dz;
    scratch_parts(scratch, N, IC, OC, R, &t, &xd, &dz);
    const size_t ni = (size_t)N * IC, no = (size_t)N * OC;
    dropped_input(what, xd, inp, p, key, row0, N, IC, s);
    block_widen_kernel<<<grid_for(no), LORA_THREADS, 0, (cudaStream_t)s>>>(
        dz, (const bf16 *)dout, ld, N, OC);
    TCU_CHECK_LAUNCH(what);
    if (dB) { /* dB (OC,R) += scale dz^T t: column-major dB^T (R,OC) = t^T (R,N) dz (N,OC) */
        xd_times_at(what, t, xd, A, N, IC, R, s);
        tcu_lt_gemm_f32(what, CUBLAS_OP_N, CUBLAS_OP_T, R, OC, N, scale, t, R, dz, OC, 1.0f, dB,
                        R, s);
    }
    /* t = dt (N,R) = scale dz B: column-major dt^T (R,N) = B^T (R,OC) dz^T (OC,N) */
    tcu_lt_gemm_f32(what, CUBLAS_OP_N, CUBLAS_OP_N, R, N, OC, scale, B, R, dz, OC, 0.0f, t, R, s);
    if (dA) /* dA (R,IC) += dt^T xd: column-major dA^T (IC,R) = xd^T (IC,N) dt (N,R) */
        tcu_lt_gemm_f32(what, CUBLAS_OP_N, CUBLAS_OP_T, IC, R, N, 1.0f, xd, IC, t, R, 1.0f, dA,
                        IC, s);
    if (dinp) { /* dinp[:, c] += mask / (1 - p) sum_k dt[:, k] A[k, c]: w(k, c) = A[k * IC + c] */
        add_low_rank_kernel<<<grid_for(ni), LORA_THREADS, 0, (cudaStream_t)s>>>(
            (bf16 *)dinp, IC, t, A, IC, 1, 1.0f, p > 0.0f, p, key, row0, N, IC, R);
        TCU_CHECK_LAUNCH(what);
    }
}
