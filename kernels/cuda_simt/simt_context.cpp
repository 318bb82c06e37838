/* simt_context.cpp — the CUDA backend's process-wide context (cuda_internal.h) as the kernel files
 * read it in the SIMT build: an H100's limits (132 SMs, 227 KiB of opt-in shared memory a block),
 * no cuBLASLt (the SIMT build has no matmul kernel file). The real one is made by tcu_init
 * (cuda_context.cu, data in cuda_common.cu), which needs a GPU. */
#include "simt.h" /* before cuda_internal.h: its device helpers need the builtins */

#include "cuda_internal.h"

tcu_context tcu_ctx = {0, 132, (size_t)227 * 1024, nullptr, nullptr, 0};
bool tcu_initialised = true;

const tcu_context *tcu_context_get(const char *what) {
    (void)what;
    return &tcu_ctx;
}
