/* hc_gpu_load.c — finds and opens libtessera-hc-gpu.so (see hc_measure.h, hc_gpu.h). The only
 * place the executable meets the GPU library: through dlopen, so it links no CUDA itself. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "fsutil.h"
#include "hc_measure.h"

const char *const hc_gpu_mode_names[HC_GPU_MODE_COUNT] = {"off", "auto", "on"};
_Static_assert(sizeof hc_gpu_mode_names / sizeof hc_gpu_mode_names[0] == HC_GPU_MODE_COUNT, "one per mode");

/* The .so to load (see hc_measure.h for the order). Returns 0, or 1 with why set. */
static int find_lib(const char *lib, char *path, size_t np, char *why, size_t nw) {
    const char *env = getenv("TESSERA_HC_GPU_LIB");
    if (lib || (env && *env)) {
        if (tsr_snprintf(path, np, "%s", lib ? lib : env)) {
            snprintf(why, nw, "GPU library path too long");
            return 1;
        }
        return 0;
    }
    char dir[PATH_MAX];
    fs_exe_dir(dir, sizeof dir);
    static const char *const rel[] = {HC_GPU_LIB_NAME, "../lib/tessera/" HC_GPU_LIB_NAME};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        if (tsr_snprintf(path, np, "%s/%s", dir, rel[i])) continue;
        if (access(path, R_OK) == 0) return 0;
    }
    snprintf(why, nw, "%s not found in %s/ nor %s/../lib/tessera/ (it is built only where nvcc was "
             "found; --gpu-lib or TESSERA_HC_GPU_LIB name another)", HC_GPU_LIB_NAME, dir, dir);
    return 1;
}

const hc_gpu_api *hc_gpu_open(const char *lib, hc_gpu_mode mode, char *path, size_t np, char *why,
                              size_t nw) {
    path[0] = why[0] = '\0';
    if (mode == HC_GPU_OFF) {
        snprintf(why, nw, "--gpu off");
        return NULL;
    }
    const char *env = getenv("TESSERA_HC_GPU_LIB");
    /* every CUDA program opens /dev/nvidiactl: without it there is no usable NVIDIA driver here */
    if (mode == HC_GPU_AUTO && !lib && !(env && *env) && access("/dev/nvidiactl", F_OK) != 0) {
        snprintf(why, nw, "no /dev/nvidiactl (no NVIDIA driver on this node)");
        return NULL;
    }
    if (find_lib(lib, path, np, why, nw)) return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, nw, "cannot load %s: %s", path, e ? e : "?");
        return NULL;
    }
    void *sym = dlsym(h, HC_GPU_SYMBOL);
    if (!sym) {
        snprintf(why, nw, "%s has no symbol %s: not a tessera GPU gather library", path, HC_GPU_SYMBOL);
        dlclose(h);
        return NULL;
    }
    hc_gpu_api_fn fn;
    memcpy(&fn, &sym, sizeof fn); /* object pointer -> function pointer, as POSIX dlsym allows */
    const hc_gpu_api *api = fn();
    if (!api || api->abi != HC_GPU_ABI || api->check_count != HC_CHECK_COUNT ||
        api->dev_size != sizeof(hc_gpu_dev)) {
        snprintf(why, nw, "%s is from another build (ABI %d, %d checks, %zu-byte GPU facts; this "
                 "program expects ABI %d, %d, %zu): rebuild both", path, api ? api->abi : -1,
                 api ? api->check_count : -1, api ? api->dev_size : 0, HC_GPU_ABI, HC_CHECK_COUNT,
                 sizeof(hc_gpu_dev));
        dlclose(h);
        return NULL;
    }
    /* never dlclose a library that started CUDA threads: the process keeps it until exit */
    return api;
}
