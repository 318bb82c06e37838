/* tcu_fp8_gemm.h — the cuBLASLt FP8 GEMM of tcu_matmul_fp8 as data: every setting of the call
 * (types, transposes, shape, leading dimensions, alpha/beta, C and D, the epilogue and its bias,
 * the scale pointers, fast accumulation, the workspace) decided once, by tcu_fp8_gemm_plan, and
 * checked against the documented rules for cuBLASLt's FP8 matmul by tcu_fp8_gemm_check.
 *
 * Plain C on the host: the CUDA backend (cuda_matmul.cu) builds its descriptor from the plan, and
 * the emulator (kernels/cuda_emu/) makes the same plan and refuses it the same way, so a plan that
 * breaks a rule fails on any machine, not first on a GPU (issue 51: cuBLASLt refused the GEMM on
 * an H200 with CUBLAS_STATUS_NOT_SUPPORTED). docs/cuda.md "FP8" has the table of the rules with
 * their sources.
 *
 * Why in src/base/, with the CUDA backend's tcu_ prefix: it is the backend's call (tcu_matmul_fp8)
 * written as data, so it keeps the backend's names; it is shared by two users, the CUDA backend
 * (kernels/cuda/, rank 3) and the health checker's FP8 burn (healthcheck/gpu/hc_gpu_fp8.c, rank
 * 2, a layer below the kernels, which may not include them: docs/architecture.md "Layers"), so
 * that the burn makes the same plan and meets the same rules as the training call. base is the
 * one layer both may include, and the plan needs nothing but libc. Its object is linked into the
 * CUDA backend, its emulators and the health checker's GPU library (Makefile: grep tcu_fp8_gemm).
 *
 * The mapping (row-major tessera tensors to column-major cuBLASLt, as tcu_matmul_forward):
 * out (N,OC) = qx (N,IC) @ qw (OC,IC)^T is D (OC,N) ld OC = op(A) B with A = qw stored (IC,OC)
 * ld IC, op T, and B = qx stored (IC,N) ld IC, op N: the "TN" layout FP8 requires. */
#ifndef TCU_FP8_GEMM_H
#define TCU_FP8_GEMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the element types a plan names (cuda_matmul.cu maps them to cudaDataType_t) */
typedef enum { TCU_LT_BF16 = 0, TCU_LT_E4M3, TCU_LT_E5M2, TCU_LT_F32, TCU_LT_TYPE_COUNT } tcu_lt_type;

typedef struct tcu_fp8_gemm {
    tcu_lt_type a_type, b_type, c_type, d_type; /* A, B (FP8); C, D */
    tcu_lt_type compute, scale;                 /* the compute type (fp32 accumulation), alpha/beta's */
    char ta, tb;                                /* 'T' or 'N': op(A), op(B) */
    int m, n, k;                                /* op(A) (m,k), op(B) (k,n), D (m,n) */
    int64_t lda, ldb, ldc, ldd;                 /* in elements */
    float alpha, beta;
    int bias_epilogue;      /* 1: CUBLASLT_EPILOGUE_BIAS adds bias; 0: DEFAULT (a bias, if any,
                               is added after the GEMM by a kernel) */
    tcu_lt_type bias_type;  /* the BIAS epilogue's vector type */
    int fast_accum;         /* CUBLASLT_MATMUL_DESC_FAST_ACCUM: 0, fp32 accumulation throughout */
    const void *a, *b, *c, *d, *bias;
    const float *a_scale, *b_scale; /* device scalars (scale mode SCALAR_32F) */
    const void *workspace;
    size_t ws_heuristic, ws_call; /* the limit the heuristic is told; the bytes the call is given */
} tcu_fp8_gemm;

/* The plan of out = (qx @ qw^T) * (*sx_inv) * (*sw_inv) + bias (see the mapping above): E4M3 x
 * E4M3, fp32 compute and scale type, bf16 C = D, beta 0, A_SCALE = sw_inv (A is the weight),
 * B_SCALE = sx_inv, fast accumulation off, the workspace given to both the heuristic and the call.
 * The bias goes in the BIAS epilogue (bf16) only when it is 16-byte aligned; otherwise the plan
 * leaves it to a kernel after the GEMM (bias_epilogue 0). */
void tcu_fp8_gemm_plan(tcu_fp8_gemm *g, void *out, const void *qx, const float *sx_inv,
                       const void *qw, const float *sw_inv, const void *bias, int N, int IC,
                       int OC, const void *workspace, size_t ws_bytes);

/* The health checker's FP8 burn: tcu_fp8_gemm_plan without a bias and with an fp32 C = D (out
 * (N, OC) fp32), the one change the rules allow that holds an exact integer product. */
void tcu_fp8_gemm_plan_f32(tcu_fp8_gemm *g, float *out, const void *qx, const float *sx_inv,
                           const void *qw, const float *sw_inv, int N, int IC, int OC,
                           const void *workspace, size_t ws_bytes);

/* NULL when g meets every rule; else the first rule it breaks, a static string naming the rule
 * and its source. */
const char *tcu_fp8_gemm_check(const tcu_fp8_gemm *g);

/* g's settings in one line (types, transposes, m n k, leading dimensions, alpha beta, epilogue,
 * bias type, every pointer's alignment, fast accumulation, workspace) into buf (n bytes); for the
 * messages of a refused plan or call. Returns buf. */
char *tcu_fp8_gemm_describe(const tcu_fp8_gemm *g, char *buf, size_t n);

/* the largest power of two, at most 256, that divides p's address (256 for NULL) */
uint32_t tcu_ptr_alignment(const void *p);

#ifdef __cplusplus
}
#endif

#endif
