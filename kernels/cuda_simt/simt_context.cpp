/* simt_context.cpp — the CUDA backend's process-wide context (cuda_internal.h) as the kernel files
 * read it in the SIMT build: an H100's limits (132 SMs, 227 KiB of opt-in shared memory a block),
 * no cuBLASLt (the SIMT build has no matmul kernel file; tcu_lt_gemm_f32 below stands in). The
 * real one is made by tcu_init (cuda_context.cu, data in cuda_common.cu), which needs a GPU. */
#include "simt.h" /* before cuda_internal.h: its device helpers need the builtins */

#include "cuda_internal.h"

tcu_context tcu_ctx = {0, 132, (size_t)227 * 1024, nullptr, nullptr, 0};
bool tcu_initialised = true;

const tcu_context *tcu_context_get(const char *what) {
    (void)what;
    return &tcu_ctx;
}

/* cuBLASLt's fp32 GEMM as cuda_matmul.cu wraps it (LoRA's adapter products call it), a plain
 * column-major loop here: D (m,n) = alpha op(A) op(B) + beta D, the sum in fp32 in k order; D is
 * not read when beta is 0 (cuBLASLt's rule). The SIMT build checks cuda_lora.cu's own kernels
 * around it, not cuBLASLt. */
void tcu_lt_gemm_f32(const char *what, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                     int k, float alpha, const float *a, int lda, const float *b, int ldb,
                     float beta, float *d, int ldd, tcu_stream s) {
    (void)what, (void)s;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float acc = 0.0f;
            for (int p = 0; p < k; p++) {
                const float x = ta == CUBLAS_OP_N ? a[i + (size_t)p * lda] : a[p + (size_t)i * lda];
                const float y = tb == CUBLAS_OP_N ? b[p + (size_t)j * ldb] : b[j + (size_t)p * ldb];
                acc = fmaf(x, y, acc);
            }
            float *o = d + i + (size_t)j * ldd;
            *o = beta == 0.0f ? alpha * acc : alpha * acc + beta * *o;
        }
}
