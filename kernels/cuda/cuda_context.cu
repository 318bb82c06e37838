/* cuda_context.cu — the process-wide context: tcu_init (device, SM count, opt-in shared memory,
 * the cuBLASLt handle and its workspace) and tcu_shutdown, which also frees the scratch the ops
 * cached. Its own file, above the ops it releases: cuda_common.cu (memory, failing) stays below
 * every op and calls none of them. */
#include <string.h>

#include "cuda_internal.h"
#include "tcu_cudnn.h" /* tcu_cudnn_release: cuDNN attention's plans, workspace, handle */

/* cuBLASLt workspace: NVIDIA recommends 32 MiB on Hopper (4 MiB is enough before it). */
#define TCU_LT_WORKSPACE_BYTES ((size_t)32 << 20)

/* ---- context ------------------------------------------------------------------------------- */

/* Selects `device`, reads its SM count and opt-in shared memory per block, creates the cuBLASLt
 * handle and a 32 MiB workspace. Calling it again for the same device does nothing; for another
 * device it dies (tcu_shutdown first: one context per process). */
void tcu_init(int device) {
    if (tcu_initialised) {
        TCU_REQUIRE(device == tcu_ctx.device, "tcu_init",
                    tcu_msg("already initialised on device %d, asked for device %d (call "
                            "tcu_shutdown first)",
                            tcu_ctx.device, device));
        return;
    }
    int count = tcu_device_count();
    TCU_REQUIRE(count > 0, "tcu_init", "no CUDA device (no driver, no GPU, or CUDA cannot start)");
    TCU_REQUIRE(device >= 0 && device < count, "tcu_init",
                tcu_msg("device %d does not exist (%d device%s: 0..%d)", device, count,
                        count == 1 ? "" : "s", count - 1));
    TCU_CHECK(cudaSetDevice(device), "tcu_init: cudaSetDevice");

    tcu_context c;
    memset(&c, 0, sizeof c);
    c.device = device;
    int v = 0;
    TCU_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device),
              "tcu_init: multiprocessor count");
    c.sm_count = v;
    TCU_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
              "tcu_init: opt-in shared memory per block");
    c.smem_optin = (size_t)v;
    TCU_CHECK_BLAS(cublasLtCreate(&c.lt), "tcu_init: cublasLtCreate");
    c.lt_workspace_bytes = TCU_LT_WORKSPACE_BYTES;
    c.lt_workspace = tcu_malloc(c.lt_workspace_bytes, "the cuBLASLt workspace");

    tcu_ctx = c;
    tcu_initialised = true;
}

/* Waits for the device, then frees the workspace, the handle, the scratch the ops cached and the
 * matmuls' cached cuBLASLt descriptors.
 * Nothing happens without a context. Streams the caller made are the caller's to destroy. */
void tcu_shutdown(void) {
    if (!tcu_initialised) return;
    TCU_CHECK(cudaDeviceSynchronize(), "tcu_shutdown: cudaDeviceSynchronize");
    tcu_elementwise_release();
    tcu_layernorm_release();
    tcu_matmul_release();
    tcu_fp8_release();
    tcu_cudnn_release();
    tcu_free(tcu_ctx.lt_workspace);
    TCU_CHECK_BLAS(cublasLtDestroy(tcu_ctx.lt), "tcu_shutdown: cublasLtDestroy");
    memset(&tcu_ctx, 0, sizeof tcu_ctx);
    tcu_initialised = false;
}

