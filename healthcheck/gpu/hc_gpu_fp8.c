/* hc_gpu_fp8.c — the FP8 burn's GEMM (hc_gpu_impl.h): cuBLASLt's FP8 matmul set up from the plan
 * the training call makes (src/base/tcu_fp8_gemm.h, tcu_fp8_gemm_plan_f32) and refused by the same
 * rules (tcu_fp8_gemm_check) before cuBLASLt sees it, so the burn times the call tessera trains
 * with: E4M3 x E4M3, the "TN" layout, fp32 compute and scale type, unit scales as device scalars,
 * fast accumulation off, beta 0, a user-owned workspace. The one difference the rules allow: D (and
 * C, which is D) is fp32 instead of bf16, which holds the burn's exact integer sums (bf16 would
 * round them). */
#include <stdint.h>
#include <string.h>

#include "hc_gpu_impl.h"

#define FP8_WORKSPACE (32u << 20) /* cuBLASLt's workspace: 32 MiB, what Hopper's kernels ask at most */

static cudaDataType lt_type(tcu_lt_type t) {
    static const cudaDataType map[TCU_LT_TYPE_COUNT] = {CUDA_R_16BF, CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_32F};
    return map[t];
}

static cublasOperation_t lt_op(char t) { return t == 'T' ? CUBLAS_OP_T : CUBLAS_OP_N; }

/* The descriptor and the three layouts of the plan (C = D: one layout). */
static int fp8_describe(fp8_gemm *f, char *err, size_t ne) {
    const tcu_fp8_gemm *p = &f->plan;
    const cublasOperation_t ta = lt_op(p->ta), tb = lt_op(p->tb);
    const int8_t fast = (int8_t)p->fast_accum; /* int8_t: cublasLt.h's type for this attribute */
    const int a_n = p->ta == 'N', b_n = p->tb == 'N';
    BLAS_TRY(err, ne, cublasLtMatmulDescCreate(&f->desc, CUBLAS_COMPUTE_32F, lt_type(p->scale)));
    BLAS_TRY(err, ne, cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    BLAS_TRY(err, ne, cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    BLAS_TRY(err, ne, cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
    BLAS_TRY(err, ne, cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p->a_scale,
                                                     sizeof p->a_scale));
    BLAS_TRY(err, ne, cublasLtMatmulDescSetAttribute(f->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p->b_scale,
                                                     sizeof p->b_scale));
    BLAS_TRY(err, ne, cublasLtMatrixLayoutCreate(&f->la, lt_type(p->a_type), a_n ? p->m : p->k, a_n ? p->k : p->m, p->lda));
    BLAS_TRY(err, ne, cublasLtMatrixLayoutCreate(&f->lb, lt_type(p->b_type), b_n ? p->k : p->n, b_n ? p->n : p->k, p->ldb));
    BLAS_TRY(err, ne, cublasLtMatrixLayoutCreate(&f->ld, lt_type(p->d_type), p->m, p->n, p->ldd));
    return 0;
fail:
    return 1;
}

/* cuBLASLt's first choice for the plan, within the plan's workspace. */
static int fp8_pick(fp8_gemm *f, char *err, size_t ne) {
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    const size_t ws = f->plan.ws_heuristic;
    BLAS_TRY(err, ne, cublasLtMatmulPreferenceCreate(&pref));
    BLAS_TRY(err, ne, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    BLAS_TRY(err, ne, cublasLtMatmulAlgoGetHeuristic(f->lt, f->desc, f->la, f->lb, f->ld, f->ld, pref, 1, &res, &found));
    if (!found) gpu_note(err, ne, "FP8 burn: cuBLASLt offers no algorithm for the FP8 GEMM");
    else f->algo = res.algo;
    (void)cublasLtMatmulPreferenceDestroy(pref);
    return !found;
fail:
    if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
    return 1;
}

int fp8_gemm_init(fp8_gemm *f, int n, const void *A, const void *Bt, float *C, char *err, size_t ne) {
    const float one[8] = {1, 0, 0, 0, 1, 0, 0, 0}; /* two 16-byte slots: B's scale, A's scale */
    char desc[640];
    memset(f, 0, sizeof *f);
    GPU_TRY(err, ne, cudaMalloc((void **)&f->scales, sizeof one));
    GPU_TRY(err, ne, cudaMemcpy(f->scales, one, sizeof one, cudaMemcpyHostToDevice));
    GPU_TRY(err, ne, cudaMalloc(&f->ws, FP8_WORKSPACE));
    /* out (N, OC) = qx (N, IC) qw (OC, IC)^T with qx = A, qw = B^T: C = A B, row-major */
    tcu_fp8_gemm_plan_f32(&f->plan, C, A, f->scales, Bt, f->scales + 4, n, n, n, f->ws, FP8_WORKSPACE);
    const char *why = tcu_fp8_gemm_check(&f->plan);
    if (why) {
        gpu_note(err, ne, "FP8 burn: the plan breaks a rule of cuBLASLt's FP8 matmul: %s (%s)", why,
                 tcu_fp8_gemm_describe(&f->plan, desc, sizeof desc));
        return 1;
    }
    BLAS_TRY(err, ne, cublasLtCreate(&f->lt));
    return fp8_describe(f, err, ne) || fp8_pick(f, err, ne);
fail:
    return 1;
}

cublasStatus_t fp8_gemm_run(const fp8_gemm *f, float *D, cudaStream_t s) {
    const tcu_fp8_gemm *p = &f->plan;
    return cublasLtMatmul(f->lt, f->desc, &p->alpha, p->a, f->la, p->b, f->lb, &p->beta, D, f->ld, D, f->ld,
                          &f->algo, f->ws, p->ws_call, s);
}

void fp8_gemm_release(fp8_gemm *f) {
    if (f->la) (void)cublasLtMatrixLayoutDestroy(f->la);
    if (f->lb) (void)cublasLtMatrixLayoutDestroy(f->lb);
    if (f->ld) (void)cublasLtMatrixLayoutDestroy(f->ld);
    if (f->desc) (void)cublasLtMatmulDescDestroy(f->desc);
    if (f->lt) (void)cublasLtDestroy(f->lt);
    (void)cudaFree(f->scales), (void)cudaFree(f->ws);
    memset(f, 0, sizeof *f);
}
