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
#include "train/trainer.h"

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
    if (strcmp(a->version, TSR_VERSION) != 0 || a->trainer_size != sizeof(tsr_trainer)) {
        (void)tsr_snprintf(why, n, "%s was built for tessera %s (trainer struct of %zu bytes), this "
                           "is %s (%zu): rebuild or reinstall both", path, a->version,
                           a->trainer_size, TSR_VERSION, sizeof(tsr_trainer));
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

int gpu_train_init(struct tsr_trainer *t) { return A()->init(t); }
void gpu_train_print_plan(const struct tsr_trainer *t) { A()->print_plan(t); }
int gpu_train_acts_B(const struct tsr_trainer *t) { return A()->acts_B(t); }
int gpu_train_try_acts(struct tsr_trainer *t, int B) { return A()->try_acts(t, B); }
void gpu_train_free_acts(struct tsr_trainer *t) { A()->free_acts(t); }
size_t gpu_train_acts_bytes(const struct tsr_trainer *t, int B) { return A()->acts_bytes(t, B); }
double gpu_train_compute(struct tsr_trainer *t, float scale) { return A()->compute(t, scale); }
double gpu_train_grad_sumsq(struct tsr_trainer *t) { return A()->grad_sumsq(t); }
void gpu_train_update(struct tsr_trainer *t, double lr, float gscale, int step) {
    A()->update(t, lr, gscale, step);
}
void gpu_train_pull(struct tsr_trainer *t) { A()->pull(t); }
void gpu_train_push(struct tsr_trainer *t, int with_optim) { A()->push(t, with_optim); }
void gpu_train_host_model(struct tsr_trainer *t, int on) { A()->host_model(t, on); }
void gpu_train_full_weights(struct tsr_trainer *t, int on) { A()->full_weights(t, on); }
size_t gpu_train_mem_peak(void) { return A()->mem_peak(); }
void gpu_train_free(struct tsr_trainer *t) {
    if (t->gpu) A()->free(t);
}
