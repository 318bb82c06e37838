/* tcu_cudnn_load.c — TSR_ATTENTION, opening libcudnn.so.9 at run time and its version gate
 * (tcu_cudnn.h). The library is never linked: a build or a node without it runs the own kernels. */
#include "tcu_cudnn_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const tcu_att_backend_names[TCU_ATT_COUNT] = {"own", "cudnn", "auto"};

int tcu_cudnn_parse_backend(const char *s, tcu_att_backend *b) {
    if (!s || !s[0]) {
        *b = TCU_ATT_OWN;
        return 0;
    }
    for (int i = 0; i < TCU_ATT_COUNT; i++)
        if (!strcmp(s, tcu_att_backend_names[i])) {
            *b = (tcu_att_backend)i;
            return 0;
        }
    return -1;
}

static int backend_read;
static tcu_att_backend backend = TCU_ATT_OWN;

void tcu_cudnn_set_backend(tcu_att_backend b) {
    backend = b;
    backend_read = 1;
}

tcu_att_backend tcu_cudnn_backend(void) {
    tcu_att_backend b = TCU_ATT_OWN;
    if (backend_read) return backend;
    const char *s = getenv("TSR_ATTENTION");
    if (tcu_cudnn_parse_backend(s, &b)) {
        fprintf(stderr, "tessera: error: TSR_ATTENTION = \"%s\": expected own, cudnn or auto "
                        "(docs/cuda.md \"cuDNN attention\")\n", s);
        exit(2);
    }
    tcu_cudnn_set_backend(b);
    return b;
}

int tcu_cudnn_version_ok(size_t version, size_t cudart, char *why, size_t n) {
    if (version / 10000 != 9)
        snprintf(why, n, "cuDNN %zu: expected major version 9", version);
    else if (version < 91501)
        snprintf(why, n, "cuDNN %zu: older than 9.15.1 (91501), whose fixes of the fused "
                         "attention graphs tessera builds it needs (docs/cuda.md)", version);
    else if (cudart / 1000 != 13)
        snprintf(why, n, "cuDNN built for cudart %zu: expected CUDA 13 (13xxx)", cudart);
    else
        return 1;
    return 0;
}

#ifndef TCU_HAVE_CUDNN
int tcu_cudnn_built(void) { return 0; }
const char *tcu_cudnn_load(void) {
    return "this build has no cudnn_graph.h (the CUDA toolkit's include folder lacks cuDNN)";
}
size_t tcu_cudnn_version(void) { return 0; }
#else
#include <dlfcn.h>

int tcu_cudnn_built(void) { return 1; }

static cd_api api;
static int api_ok;
static char load_why[512];

/* resolves every entry point of CD_FUNCS from so: 0, or -1 naming the one missing */
static int resolve(void *so, const char *path) {
#define CD_SYM(name, ret, params)                                                                  \
    *(void **)&api.name = dlsym(so, #name);                                                        \
    if (!api.name) {                                                                               \
        snprintf(load_why, sizeof load_why, "%s has no %s", path, #name);                          \
        return -1;                                                                                 \
    }
    CD_FUNCS(CD_SYM)
#undef CD_SYM
    return 0;
}

static void load_once(void) {
    const char *env = getenv("TSR_CUDNN_LIB");
    const char *path = env && env[0] ? env : "libcudnn.so.9";
    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        snprintf(load_why, sizeof load_why, "cannot load %s: %s", path, dlerror());
        return;
    }
    if (resolve(so, path)) return;
    if (!tcu_cudnn_version_ok(api.cudnnGetVersion(), api.cudnnGetCudartVersion(), load_why,
                              sizeof load_why))
        return;
    api_ok = 1;
}

const char *tcu_cudnn_load(void) {
    static int tried;
    if (!tried) load_once();
    tried = 1;
    return api_ok ? NULL : load_why;
}

const cd_api *cd_lib(void) { return tcu_cudnn_load() ? NULL : &api; }

size_t tcu_cudnn_version(void) { return cd_lib() ? api.cudnnGetVersion() : 0; }

void cd_why(const char *what, cudnnStatus_t st, char *why, size_t n) {
    char last[256] = "";
    if (api.cudnnGetLastErrorString) api.cudnnGetLastErrorString(last, sizeof last);
    snprintf(why, n, "%s: %s%s%s", what, api.cudnnGetErrorString(st), last[0] ? ": " : "", last);
}
#endif
