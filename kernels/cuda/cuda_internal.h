/* cuda_internal.h — what the .cu files of kernels/cuda/ share: error checks, the cuBLASLt context,
 * bf16 helpers, launch arithmetic. Not part of the public interface (cuda_ops.h is). */
#ifndef TSR_CUDA_INTERNAL_H
#define TSR_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_ops.h"

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

/* The process-wide context tcu_init makes (cuda_common.cu). */
typedef struct tcu_context {
    int device;
    int sm_count;
    size_t smem_optin;           /* cudaDevAttrMaxSharedMemoryPerBlockOptin */
    cublasLtHandle_t lt;
    void *lt_workspace;          /* cuBLASLt workspace, lt_workspace_bytes */
    size_t lt_workspace_bytes;
} tcu_context;
extern tcu_context tcu_ctx;
/* dies unless tcu_init ran */
const tcu_context *tcu_context_get(const char *what);
/* free the scratch cuda_elementwise.cu and cuda_layernorm.cu cache (tcu_shutdown calls them) */
void tcu_elementwise_release(void);
void tcu_layernorm_release(void);

static inline unsigned tcu_blocks(size_t n, unsigned threads) {
    return (unsigned)((n + threads - 1) / threads);
}

#endif
