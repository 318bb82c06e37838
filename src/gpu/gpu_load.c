/* gpu_load.c — the executable's side of device = cuda (gpu_train.h): finds the GPU library's
 * entry table and forwards to it. The table is linked in (the emulator test build links
 * gpu_train.o) or, in the CUDA build, opened from libtessera-cuda-train.so with dlopen on first
 * use, so CPU runs never load CUDA. */
#include "gpu/gpu_train.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "fsutil.h"

/* present when gpu_train.o is linked into this program */
extern const gpu_train_api tsr_gpu_train_api __attribute__((weak));

static const gpu_train_api *api;
static char api_why[1400];

static const gpu_train_api *open_lib(char *why, size_t n) {
    char path[PATH_MAX + 64], dir[PATH_MAX];
    const char *env = getenv("TESSERA_CUDA_LIB");
    int found = 0;
    if (env && *env) {
        (void)tsr_snprintf(path, sizeof path, "%s", env);
        found = 1;
    } else {
        fs_exe_dir(dir, sizeof dir);
        static const char *const rel[] = {GPU_TRAIN_LIB_NAME, "../lib/tessera/" GPU_TRAIN_LIB_NAME};
        for (size_t i = 0; i < sizeof rel / sizeof rel[0] && !found; i++) {
            if (tsr_snprintf(path, sizeof path, "%s/%s", dir, rel[i])) continue;
            found = access(path, R_OK) == 0;
        }
        if (!found) {
            (void)tsr_snprintf(why, n, "%s is in neither %s/ nor %s/../lib/tessera/ (it is built where nvcc "
                     "is found; TESSERA_CUDA_LIB names another)", GPU_TRAIN_LIB_NAME, dir, dir);
            return NULL;
        }
    }
    /* RTLD_GLOBAL is not needed: the library finds the trainer's symbols in the executable */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        (void)tsr_snprintf(why, n, "cannot load %s: %s (the CUDA module loaded?)", path, e ? e : "?");
        return NULL;
    }
    const gpu_train_api *a = dlsym(h, GPU_TRAIN_SYMBOL);
    if (!a) {
        (void)tsr_snprintf(why, n, "%s has no %s: not tessera's CUDA training library", path, GPU_TRAIN_SYMBOL);
        dlclose(h);
        return NULL;
    }
    if (strcmp(a->version, TSR_VERSION) != 0 || a->ctx_size != sizeof(gpu_train_ctx) ||
        a->api_size != sizeof(gpu_train_api)) {
        (void)tsr_snprintf(why, n, "%s was built for tessera %s (trainer context of %zu bytes, "
                           "entry table of %zu), this is %s (%zu, %zu): rebuild or reinstall "
                           "both", path, a->version, a->ctx_size, a->api_size, TSR_VERSION,
                           sizeof(gpu_train_ctx), sizeof(gpu_train_api));
        dlclose(h);
        return NULL;
    }
    return a;
}

const char *gpu_backend(char *why, size_t n) {
    static int tried;
    if (!tried) {
        tried = 1;
        api = &tsr_gpu_train_api ? &tsr_gpu_train_api : open_lib(api_why, sizeof api_why);
    }
    if (!api && why) (void)tsr_snprintf(why, n, "%s", api_why);
    return api ? api->backend : NULL;
}

/* every wrapper runs after gpu_backend() said yes (trainer_init) */
static const gpu_train_api *A(void) {
    if (!api) tsr_die(TSR_EXIT_INTERNAL, "device = cuda used before its library was loaded");
    return api;
}

int gpu_train_switches(const gpu_train_ctx *c) { return A()->switches(c); }
int gpu_train_init(gpu_train_ctx *c) { return A()->init(c); }
size_t gpu_train_plan_bytes(const gpu_train_ctx *c) { return A()->plan_bytes(c); }
size_t gpu_train_muon_bytes(const gpu_train_ctx *c) { return A()->muon_bytes(c); }
size_t gpu_train_layer_bytes(const gpu_train_ctx *c, int B, int fp8) {
    return A()->layer_bytes(c, B, fp8);
}
int gpu_train_acts_B(const gpu_train_ctx *c) { return A()->acts_B(c); }
int gpu_train_try_acts(gpu_train_ctx *c, int B) { return A()->try_acts(c, B); }
void gpu_train_free_acts(gpu_train_ctx *c) { A()->free_acts(c); }
size_t gpu_train_acts_bytes(const gpu_train_ctx *c, int B) { return A()->acts_bytes(c, B); }
double gpu_train_compute(gpu_train_ctx *c, float scale) { return A()->compute(c, scale); }
double gpu_train_grad_sumsq(gpu_train_ctx *c) { return A()->grad_sumsq(c); }
void gpu_train_update(gpu_train_ctx *c, double lr, float gscale, int step) {
    A()->update(c, lr, gscale, step);
}
void gpu_train_moe_bias(gpu_train_ctx *c) { A()->moe_bias(c); }
void gpu_train_pull(gpu_train_ctx *c) { A()->pull(c); }
void gpu_train_push(gpu_train_ctx *c, int with_optim) { A()->push(c, with_optim); }
int gpu_train_pull_grads(gpu_train_ctx *c) { return A()->pull_grads(c); }
void gpu_train_host_model(gpu_train_ctx *c, int on) { A()->host_model(c, on); }
size_t gpu_train_pin_host(gpu_train_ctx *c) { return A()->pin_host(c); }
size_t gpu_train_mem_peak(void) { return A()->mem_peak(); }
void gpu_train_free(gpu_train_ctx *c) {
    if (c->state) A()->free(c);
}

int64_t gpu_train_generate(gpu_train_ctx *c, const struct gen_batch_opts *o, struct gen_seq *seqs,
                           int n) {
    return A()->generate(c, o, seqs, n);
}
