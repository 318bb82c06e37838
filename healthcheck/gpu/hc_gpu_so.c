/* hc_gpu_so.c — libtessera-hc-gpu.so's entry: the function table tessera-healthcheck looks up
 * (hc_gpu.h) and device probing. The parts it lists: the NVML state pass (hc_gpu_nvml.c), the burns
 * (hc_gpu_burn.c), NCCL (hc_gpu_nccl.c); the library's small helpers are in hc_gpu_util.c. */
#include <stdio.h>
#include <string.h>

#include "hc_gpu_impl.h"

static int gpu_probe(hc_gpu_info *out, char *err, size_t ne) {
    int n = 0, drv = 0, rt = 0, blas[3] = {0, 0, 0}, nccl = 0;
    struct cudaDeviceProp prop;
    memset(out, 0, sizeof *out);
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        /* no driver, or one older than this runtime: the usual reasons on a node without a GPU */
        (void)cudaDriverGetVersion(&drv); /* 0 when no driver (libcuda.so.1) is installed */
        if (drv == 0)
            gpu_note(err, ne, "cudaGetDeviceCount: %s (no CUDA driver, libcuda.so.1, found)", cudaGetErrorString(e));
        else
            gpu_note(err, ne, "cudaGetDeviceCount: %s (the driver supports CUDA %d.%d; this library was built "
                     "with CUDA %d.%d)", cudaGetErrorString(e), drv / 1000, drv % 1000 / 10,
                     CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
        return 2;
    }
    out->n_devices = n;
    if (n > 0) {
        GPU_TRY(err, ne, cudaGetDeviceProperties(&prop, 0));
        snprintf(out->name0, sizeof out->name0, "%.*s", (int)sizeof out->name0 - 1, prop.name);
    }
    GPU_TRY(err, ne, cudaDriverGetVersion(&drv));
    GPU_TRY(err, ne, cudaRuntimeGetVersion(&rt));
    BLAS_TRY(err, ne, cublasGetProperty(MAJOR_VERSION, &blas[0]));
    BLAS_TRY(err, ne, cublasGetProperty(MINOR_VERSION, &blas[1]));
    BLAS_TRY(err, ne, cublasGetProperty(PATCH_LEVEL, &blas[2]));
    NCCL_TRY(err, ne, ncclGetVersion(&nccl));
    snprintf(out->versions, sizeof out->versions,
             "CUDA driver %d.%d, runtime %d.%d (built %d.%d), cuBLAS %d.%d.%d (built %d.%d.%d), NCCL %d (built %d)",
             drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10, CUDART_VERSION / 1000,
             CUDART_VERSION % 1000 / 10, blas[0], blas[1], blas[2], CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR,
             CUBLAS_VER_PATCH, nccl, NCCL_VERSION_CODE);
    if (nvml_open(out->nvml, sizeof out->nvml)) { /* out->nvml says why; the NVML facts stay unmeasured */ }
    return 0;
fail:
    return 2;
}

static void gpu_close(void) { nvml_close(); }

static const hc_gpu_api api = {
    .abi = HC_GPU_ABI,
    .check_count = HC_CHECK_COUNT,
    .dev_size = sizeof(hc_gpu_dev),
    .probe = gpu_probe,
    .state = gpu_state,
    .burn = gpu_burn,
    .membw = gpu_membw,
    .nccl_node = gpu_nccl_node,
    .nccl_id = gpu_nccl_id,
    .nccl_group = gpu_nccl_group,
    .close = gpu_close,
};

/* The one exported symbol (HC_GPU_SYMBOL); everything else is hidden by the link's version script. */
const hc_gpu_api *tsr_hc_gpu_api(void);
const hc_gpu_api *tsr_hc_gpu_api(void) { return &api; }
