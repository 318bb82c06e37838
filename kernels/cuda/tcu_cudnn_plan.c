/* tcu_cudnn_plan.c — cuDNN attention's engines, plans and calls (tcu_cudnn.h): a handle per
 * device, heuristics mode A then the fallback list, engines whose notes say non-deterministic
 * skipped, a plan cache keyed by shape (one device a process: tcu_cudnn_release, from tcu_shutdown,
 * empties it with the handle), the variant pack and the execute.
 * Needs a GPU from here on (cudnnCreate fails without one: then everything runs the own kernels).
 */
#include "tcu_cudnn_int.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef TCU_HAVE_CUDNN
size_t tcu_cudnn_calls(void) { return 0; }
size_t tcu_cudnn_scratch_bytes(tcu_cudnn_shape sh) {
    (void)sh;
    return 0;
}
int tcu_cudnn_forward(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv, const float *alibi_slopes,
                      const int32_t *seq, const tsr_attn_var *var, tcu_cudnn_shape sh,
                      tcu_stream s) {
    (void)out, (void)lse, (void)qkv, (void)alibi_slopes, (void)seq, (void)var, (void)sh, (void)s;
    if (tcu_cudnn_backend() == TCU_ATT_CUDNN) {
        static int said;
        if (!said) fprintf(stderr, "tessera: TSR_ATTENTION=cudnn: %s; the own kernels run "
                                   "attention\n", tcu_cudnn_load());
        said = 1;
    }
    return 0;
}
int tcu_cudnn_backward(tsr_bf16 *dqkv, const tsr_bf16 *dout, const tsr_bf16 *qkv,
                       const tsr_bf16 *out, const float *lse, const float *alibi_slopes,
                       const int32_t *seq, const tsr_attn_var *var, void *scratch,
                       tcu_cudnn_shape sh, tsr_grad_mode mode, tcu_stream s) {
    (void)dqkv, (void)dout, (void)qkv, (void)out, (void)lse, (void)alibi_slopes, (void)seq;
    (void)var, (void)scratch, (void)sh, (void)mode, (void)s;
    return 0;
}
int tcu_cudnn_plan_info_of(tcu_cudnn_shape sh, int bwd, tcu_cudnn_plan_info *info, char *why,
                           size_t n) {
    (void)sh, (void)bwd, (void)info;
    snprintf(why, n, "%s", tcu_cudnn_load());
    return -1;
}
void tcu_cudnn_set_fatal(int on) { (void)on; }
const char *tcu_cudnn_last_error(void) { return ""; }
void tcu_cudnn_release(void) {}
#else

/* ---- the handle ----
 * tessera drives one device per process (cuda_ops.h: one stream per process), so one handle is
 * its device's; it is made at the first plan, once the backend's context exists. */
enum { CD_MAX_PLANS = 64 };
static cudnnHandle_t handle;
static char handle_why[384];
static int handle_tried;

/* the handle, or NULL with why */
static cudnnHandle_t handle_of(const char **why) {
    const cd_api *api = cd_lib();
    *why = tcu_cudnn_load();
    if (!api) return NULL;
    if (!handle_tried) {
        cudnnStatus_t st = api->cudnnCreate(&handle);
        if (st != CUDNN_STATUS_SUCCESS) {
            cd_why("cudnnCreate", st, handle_why, sizeof handle_why);
            handle = NULL;
        }
        handle_tried = 1;
    }
    *why = handle ? NULL : handle_why;
    return handle;
}

/* ---- engines and plans ---- */
typedef struct cd_plan {
    int used, bwd;
    tcu_cudnn_shape sh;
    cd_graph *g;                      /* the operation graph the plan runs */
    cudnnBackendDescriptor_t plan;    /* NULL: refused (why) */
    cudnnBackendDescriptor_t cfg;     /* the engine config it runs */
    tcu_cudnn_plan_info info;
    size_t scratch;                   /* what the backward's scratch must hold */
    int announced;                    /* tcu_cudnn_scratch_bytes was asked for this shape */
    char why[384];
} cd_plan;
static cd_plan plans[CD_MAX_PLANS];
static size_t calls; /* executes that returned success */

static double ms_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* 1 when engine config cfg's engine says it is non-deterministic */
static int nondeterministic(const cd_api *api, cudnnBackendDescriptor_t cfg) {
    cudnnBackendDescriptor_t eng = NULL;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t n = 0, got = 0;
    int bad = 1;
    if (api->cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng)) return 1;
    if (!api->cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &eng) &&
        !api->cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                       CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                       &n, notes)) {
        bad = 0;
        for (int64_t i = 0; i < n; i++) bad |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    }
    api->cudnnBackendDestroyDescriptor(eng);
    return bad;
}

/* the engine configs heuristics mode `mode` offers for g, into cfg (room for max): how many */
static int64_t heuristics(const cd_api *api, cd_graph *g, cudnnBackendHeurMode_t mode,
                          cudnnBackendDescriptor_t *cfg, int64_t max) {
    cudnnBackendDescriptor_t h = NULL;
    int64_t n = 0;
    if (api->cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &h)) return 0;
    if (api->cudnnBackendSetAttribute(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->opgraph) ||
        api->cudnnBackendSetAttribute(h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                                      &mode) ||
        api->cudnnBackendFinalize(h) ||
        api->cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, max, &n, cfg))
        n = 0;
    api->cudnnBackendDestroyDescriptor(h);
    return n < max ? n : max;
}

/* a finalized plan of cfg, or NULL */
static cudnnBackendDescriptor_t plan_of(const cd_api *api, cudnnHandle_t hd,
                                        cudnnBackendDescriptor_t cfg) {
    cudnnBackendDescriptor_t p = NULL;
    if (api->cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p)) return NULL;
    if (api->cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                      &hd) ||
        api->cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg) ||
        api->cudnnBackendFinalize(p)) {
        api->cudnnBackendDestroyDescriptor(p);
        return NULL;
    }
    return p;
}

/* what plan p is: its engine's index, workspace, JSON */
static void describe(const cd_api *api, cudnnBackendDescriptor_t p, cudnnBackendDescriptor_t cfg,
                     tcu_cudnn_plan_info *info) {
    int64_t ws = 0, got = 0;
    cudnnBackendDescriptor_t eng = NULL;
    api->cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                  &got, &ws);
    info->ws = ws > 0 ? (size_t)ws : 0;
    info->engine = -1;
    if (!api->cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng)) {
        if (!api->cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &eng))
            api->cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                          &got, &info->engine);
        api->cudnnBackendDestroyDescriptor(eng);
    }
    got = 0;
    api->cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                  sizeof info->json - 1, &got, info->json);
    info->json[got > 0 && got < (int64_t)sizeof info->json ? got : 0] = 0;
}

/* the first deterministic config of mode A, then the fallback list, whose plan finalizes; the
 * chosen config stays alive with the plan (c->cfg); without one, c->why counts what was seen */
static void choose(cd_plan *c, const cd_api *api, cudnnHandle_t hd) {
    enum { MAXCFG = 32 };
    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    cudnnBackendDescriptor_t cfg[MAXCFG];
    int64_t seen[2] = {0, 0}, nondet = 0;
    for (int m = 0; m < 2 && !c->plan; m++) {
        int64_t made = 0, pick = -1;
        while (made < MAXCFG &&
               !api->cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[made]))
            made++;
        seen[m] = heuristics(api, c->g, modes[m], cfg, made);
        for (int64_t i = 0; i < seen[m] && pick < 0; i++) {
            if (nondeterministic(api, cfg[i])) {
                nondet++;
                continue;
            }
            c->plan = plan_of(api, hd, cfg[i]);
            if (!c->plan) continue;
            describe(api, c->plan, cfg[i], &c->info);
            pick = i;
        }
        for (int64_t i = 0; i < made; i++)
            if (i != pick) api->cudnnBackendDestroyDescriptor(cfg[i]);
        if (pick >= 0) c->cfg = cfg[pick];
    }
    if (c->plan) return;
    char last[256] = "";
    api->cudnnGetLastErrorString(last, sizeof last);
    snprintf(c->why, sizeof c->why, "no deterministic cuDNN engine takes the graph (heuristics: "
             "%lld configs, fallback %lld; %lld non-deterministic)%s%s", (long long)seen[0],
             (long long)seen[1], (long long)nondet, last[0] ? ": " : "", last);
}

static size_t round256(size_t n) { return (n + 255) / 256 * 256; }

/* the backward's softmax_sum rows (B NH T fp32), 256-aligned: the scratch's start */
static size_t rows_bytes(tcu_cudnn_shape sh) { return round256((size_t)sh.B * sh.NH * sh.T * 4); }

/* frees c's operation graph */
static void graph_drop(cd_plan *c) {
    if (!c->g) return;
    cd_graph_free(c->g);
    free(c->g);
    c->g = NULL;
}

/* one line a built plan, with the library's version (the run's log names what ran) */
static void log_plan(const cd_plan *c) {
    if (tcu_cudnn_backend() == TCU_ATT_OWN) return;
    fprintf(stderr, "tessera: cuDNN %zu attention %s plan (B %d, T %d, heads %d/%d, hs %d): engine "
                    "%lld, workspace %zu bytes, built in %.0f ms\n", tcu_cudnn_version(),
            c->bwd ? "backward" : "forward", c->sh.B, c->sh.T, c->sh.NH, c->sh.KVH, c->sh.hs,
            (long long)c->info.engine, c->info.ws, c->info.build_ms);
}

/* builds the plan of entry c (its shape, direction); allocates no device memory */
static void build(cd_plan *c) {
    const char *why = NULL;
    cudnnHandle_t hd = handle_of(&why);
    const double t0 = ms_now();
    if (!hd) {
        snprintf(c->why, sizeof c->why, "%s", why);
        return;
    }
    c->g = calloc(1, sizeof *c->g);
    if (!c->g) {
        snprintf(c->why, sizeof c->why, "out of host memory");
        return;
    }
    if (cd_graph_build(c->g, c->sh, c->bwd, hd)) {
        snprintf(c->why, sizeof c->why, "%s", c->g->why);
        graph_drop(c);
        return;
    }
    choose(c, cd_lib(), hd);
    c->info.build_ms = ms_now() - t0;
    c->scratch = c->bwd ? rows_bytes(c->sh) + round256(c->info.ws) : 0;
    if (!c->plan) graph_drop(c);
    else log_plan(c);
}

static int same(tcu_cudnn_shape a, tcu_cudnn_shape b) {
    return a.B == b.B && a.T == b.T && a.NH == b.NH && a.KVH == b.KVH && a.hs == b.hs;
}

/* the cache's entry of (sh, bwd); build: made (and built) when missing. NULL: none (or full) */
static cd_plan *plan_at(tcu_cudnn_shape sh, int bwd, int build_it) {
    for (int i = 0; i < CD_MAX_PLANS; i++) {
        cd_plan *c = &plans[i];
        if (c->used && c->bwd == bwd && same(c->sh, sh)) return c;
        if (c->used) continue;
        if (!build_it) return NULL;
        *c = (cd_plan){.used = 1, .bwd = bwd, .sh = sh};
        build(c);
        return c;
    }
    return NULL;
}

/* ---- selection ---- */

static int sm90_known = -1;

/* 1 when the device is sm_90 (Hopper: what auto takes); asked once */
static int sm90(void) {
    if (sm90_known < 0) {
        int sm = 0;
        if (tcu_device_count() > 0) tcu_device_info(NULL, 0, &sm, NULL, NULL);
        sm90_known = sm == 90;
    }
    return sm90_known;
}

/* says once per distinct reason why TSR_ATTENTION=cudnn did not run a call on cuDNN */
static void say_once(const char *why, tcu_cudnn_shape sh, int bwd) {
    enum { SAID = 32 };
    static char said[SAID][160];
    static int n;
    for (int i = 0; i < n; i++)
        if (!strncmp(said[i], why, sizeof said[i] - 1)) return;
    if (n < SAID) snprintf(said[n++], sizeof said[0], "%.159s", why);
    fprintf(stderr, "tessera: TSR_ATTENTION=cudnn: attention %s (B %d, T %d, heads %d/%d, hs %d) "
                    "runs on the own kernels: %s\n",
            bwd ? "backward" : "forward", sh.B, sh.T, sh.NH, sh.KVH, sh.hs, why);
}

/* the own kernels run this call: said once when cudnn was asked for */
static void refuse(const char *why, tcu_cudnn_shape sh, int bwd) {
    if (tcu_cudnn_backend() == TCU_ATT_CUDNN) say_once(why, sh, bwd);
}

/* the plan cuDNN runs this call with, or NULL: the own kernels run it (said once if forced). Only
 * a shape tcu_cudnn_scratch_bytes sized (announced) runs: no plan is built inside a step. */
static cd_plan *select_plan(tcu_cudnn_shape sh, int bwd, const char *refusal) {
    const tcu_att_backend b = tcu_cudnn_backend();
    if (b == TCU_ATT_OWN) return NULL;
    const char *why = refusal ? refusal : tcu_cudnn_load();
    cd_plan *c = NULL;
    if (!why && b == TCU_ATT_AUTO && !sm90()) why = "auto: not an sm_90 device";
    if (!why) handle_of(&why);
    if (!why) {
        c = plan_at(sh, bwd, 0);
        why = !c || !c->announced ? "its shape was not sized by tcu_attention_scratch_bytes (no "
                                    "plan is built inside a step)"
              : c->plan ? NULL : c->why;
    }
    if (why) refuse(why, sh, bwd);
    return why ? NULL : c;
}

/* ---- execution ---- */

/* the host scalars by value (scale, -inf, 1), each in 16-byte aligned storage as declared */
typedef struct {
    _Alignas(16) float v;
} cd_scalar;
static cd_scalar host_scalars[3];

static void set_scalars(tcu_cudnn_shape sh) {
    host_scalars[0].v = 1.0f / sqrtf((float)sh.hs);
    host_scalars[1].v = -INFINITY;
    host_scalars[2].v = 1.0f;
}

static int fatal = 1;
static char last_error[512];

void tcu_cudnn_set_fatal(int on) { fatal = on; }
const char *tcu_cudnn_last_error(void) { return last_error; }

/* the variant pack of c's graph over the given buffers, executed on stream s: 0, 1 (refused: a
 * pointer not 16-byte aligned, said once, nothing run) or -1 (failed, c->why) */
static int execute(cd_plan *c, void *const buf[TCU_BUF_COUNT], void *ws, tcu_stream s) {
    const cd_api *api = cd_lib();
    tcu_cudnn_tensor tab[TCU_CD_UID_COUNT];
    int64_t uid[TCU_CD_UID_COUNT];
    void *ptr[TCU_CD_UID_COUNT];
    const char *mis = tcu_cudnn_misaligned(c->sh, c->bwd, buf, ws);
    if (mis) {
        refuse(mis, c->sh, c->bwd);
        return 1;
    }
    set_scalars(c->sh);
    const int n = tcu_cudnn_tensors(c->sh, c->bwd, tab);
    for (int i = 0; i < n; i++) {
        uid[i] = tab[i].uid;
        ptr[i] = tab[i].buf == TCU_BUF_HOST ? (void *)&host_scalars[tab[i].offset].v
                 : (char *)buf[tab[i].buf] + tab[i].offset * (tab[i].fp32 ? 4 : 2);
    }
    cudnnBackendDescriptor_t vp = NULL;
    cudnnHandle_t hd = handle;
    cudnnStatus_t st = api->cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (!st) st = api->cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uid);
    if (!st) st = api->cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptr);
    if (!st) st = api->cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (!st) st = api->cudnnBackendFinalize(vp);
    if (!st) st = api->cudnnSetStream(hd, (cudaStream_t)s);
    if (!st) st = api->cudnnBackendExecute(hd, c->plan, vp);
    if (st) cd_why("cudnnBackendExecute", st, c->why, sizeof c->why);
    else calls++;
    if (vp) api->cudnnBackendDestroyDescriptor(vp);
    return st ? -1 : 0;
}

size_t tcu_cudnn_calls(void) { return calls; }

/* an execute that failed: the process ends, naming it (a half-run op cannot fall back); under
 * tcu_cudnn_set_fatal(0) (the op test) the own kernels run the call instead, said: 0 */
static int failed(const cd_plan *c) {
    snprintf(last_error, sizeof last_error, "cuDNN attention %s (B %d, T %d, heads %d/%d, hs %d): "
             "%s", c->bwd ? "backward" : "forward", c->sh.B, c->sh.T, c->sh.NH, c->sh.KVH,
             c->sh.hs, c->why);
    fprintf(stderr, "tessera: %s%s (TSR_ATTENTION=own runs the own kernels)\n",
            fatal ? "error: " : "", last_error);
    if (fatal) exit(1);
    return 0;
}

/* the forward's workspace, grown once to n bytes (at the first forward that needs it) */
static void *fwd_ws;
static size_t fwd_ws_bytes;

static void *fwd_workspace(size_t n) {
    if (n > fwd_ws_bytes) {
        if (fwd_ws) tcu_free(fwd_ws);
        fwd_ws = tcu_malloc(n, "cuDNN attention's forward workspace");
        fwd_ws_bytes = n;
    }
    return n ? fwd_ws : NULL;
}

size_t tcu_cudnn_scratch_bytes(tcu_cudnn_shape sh) {
    const tcu_att_backend b = tcu_cudnn_backend();
    if (b == TCU_ATT_OWN) return 0;
    if (tcu_cudnn_refusal(sh, NULL, NULL, NULL, 1, TSR_GRAD_SET) || tcu_cudnn_load()) return 0;
    if (b == TCU_ATT_AUTO && !sm90()) return 0;
    cd_plan *f = plan_at(sh, 0, 1), *c = plan_at(sh, 1, 1); /* the forward's too: none mid-run */
    if (f) f->announced = 1;
    if (c) c->announced = 1;
    return c && c->plan ? c->scratch : 0;
}

int tcu_cudnn_forward(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv, const float *alibi_slopes,
                      const int32_t *seq, const tsr_attn_var *var, tcu_cudnn_shape sh,
                      tcu_stream s) {
    if (tcu_cudnn_backend() == TCU_ATT_OWN) return 0;
    cd_plan *c = select_plan(sh, 0, tcu_cudnn_refusal(sh, alibi_slopes, seq, var, 0, TSR_GRAD_SET));
    if (!c) return 0;
    void *const buf[TCU_BUF_COUNT] = {[TCU_BUF_QKV] = (void *)qkv, [TCU_BUF_OUT] = out,
                                      [TCU_BUF_LSE] = lse};
    const int rc = execute(c, buf, fwd_workspace(c->info.ws), s);
    return rc < 0 ? failed(c) : rc == 0;
}

int tcu_cudnn_backward(tsr_bf16 *dqkv, const tsr_bf16 *dout, const tsr_bf16 *qkv,
                       const tsr_bf16 *out, const float *lse, const float *alibi_slopes,
                       const int32_t *seq, const tsr_attn_var *var, void *scratch,
                       tcu_cudnn_shape sh, tsr_grad_mode mode, tcu_stream s) {
    if (tcu_cudnn_backend() == TCU_ATT_OWN) return 0;
    cd_plan *c = select_plan(sh, 1, tcu_cudnn_refusal(sh, alibi_slopes, seq, var, 1, mode));
    if (!c) return 0;
    void *const buf[TCU_BUF_COUNT] = {
        [TCU_BUF_QKV] = (void *)qkv, [TCU_BUF_OUT] = (void *)out, [TCU_BUF_LSE] = (void *)lse,
        [TCU_BUF_DOUT] = (void *)dout, [TCU_BUF_DQKV] = dqkv, [TCU_BUF_SCRATCH] = scratch};
    const int rc = execute(c, buf, c->info.ws ? (char *)scratch + rows_bytes(sh) : NULL, s);
    return rc < 0 ? failed(c) : rc == 0;
}

int tcu_cudnn_plan_info_of(tcu_cudnn_shape sh, int bwd, tcu_cudnn_plan_info *info, char *why,
                           size_t n) {
    const char *w = tcu_cudnn_refusal(sh, NULL, NULL, NULL, bwd, TSR_GRAD_SET);
    if (!w) w = tcu_cudnn_load();
    cd_plan *c = w ? NULL : plan_at(sh, bwd, 1);
    if (!w && !c) w = "the plan cache is full";
    if (!w && !c->plan) w = c->why;
    snprintf(why, n, "%s", w ? w : "");
    if (w) return -1;
    *info = c->info;
    return 0;
}

void tcu_cudnn_release(void) {
    const cd_api *api = handle_tried ? cd_lib() : NULL; /* nothing built: nothing to open */
    for (int i = 0; api && i < CD_MAX_PLANS; i++) {
        cd_plan *c = &plans[i];
        if (c->plan) api->cudnnBackendDestroyDescriptor(c->plan);
        if (c->cfg) api->cudnnBackendDestroyDescriptor(c->cfg);
        graph_drop(c);
    }
    memset(plans, 0, sizeof plans);
    if (fwd_ws) tcu_free(fwd_ws);
    fwd_ws = NULL, fwd_ws_bytes = 0;
    if (api && handle) api->cudnnDestroy(handle);
    handle = NULL, handle_tried = 0, sm90_known = -1;
}
#endif
