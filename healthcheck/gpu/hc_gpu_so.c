/* hc_gpu_so.c — libtessera-hc-gpu.so's entry: the function table tessera-healthcheck looks up
 * (hc_gpu.h), device probing and the NVML state pass, and the library's small helpers. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hc_gpu_impl.h"

void gpu_note(char *err, size_t n, const char *fmt, ...) {
    if (!err || n == 0 || err[0]) return; /* keep the first failure: the later ones follow from it */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

double gpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void gpu_sleep(double s) {
    if (!(s > 0)) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

typedef struct each_arg {
    void (*fn)(void *ctx, int d);
    void *ctx;
    int d;
} each_arg;

static void *each_main(void *p) {
    each_arg *a = p;
    a->fn(a->ctx, a->d);
    return NULL;
}

void gpu_each(int n, void (*fn)(void *ctx, int d), void *ctx) {
    pthread_t t[HC_MAX_GPUS];
    each_arg a[HC_MAX_GPUS];
    int started[HC_MAX_GPUS] = {0};
    for (int d = 0; d < n && d < HC_MAX_GPUS; d++) {
        a[d] = (each_arg){fn, ctx, d};
        started[d] = pthread_create(&t[d], NULL, each_main, &a[d]) == 0;
        if (!started[d]) fn(ctx, d); /* no thread to be had: this GPU runs alone, still measured */
    }
    for (int d = 0; d < n && d < HC_MAX_GPUS; d++)
        if (started[d]) pthread_join(t[d], NULL);
}

/* NVML handles of the CUDA devices, found from their PCI bus ids by gpu_state */
static void *nvml_of[HC_MAX_GPUS];

void *gpu_nvml_handle(int d) { return d >= 0 && d < HC_MAX_GPUS ? nvml_of[d] : NULL; }

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

/* Per GPU: name, bus id, NVML handle and state. Sequential: a few fast queries per GPU. */
static void gpu_state(const hc_gpu_job *job, hc_gpu_dev *dev) {
    for (int d = 0; d < job->n_devices && d < HC_MAX_GPUS; d++) {
        hc_gpu_dev *g = &dev[d];
        struct cudaDeviceProp prop;
        char why[256] = "";
        nvml_of[d] = NULL;
        GPU_TRY(g->error, sizeof g->error, cudaGetDeviceProperties(&prop, d));
        snprintf(g->name, sizeof g->name, "%.*s", (int)sizeof g->name - 1, prop.name);
        GPU_TRY(g->error, sizeof g->error, cudaDeviceGetPCIBusId(g->bus_id, (int)sizeof g->bus_id, d));
        nvml_of[d] = nvml_device(g->bus_id, why, sizeof why);
        if (!nvml_of[d] && why[0]) gpu_note(g->error, sizeof g->error, "NVML: %s", why);
        nvml_state(nvml_of[d], g);
    fail:; /* the burn meets the same failure again and records this GPU as failed */
    }
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
