/* tcu_cudnn_plan.c — cuDNN attention's engines, plans and calls (tcu_cudnn.h): a handle per
 * device, heuristics mode A then the fallback list, engines whose notes say non-deterministic
 * skipped, a plan cache keyed by shape and device, the variant pack and the execute.
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
    void *fwd_ws;                     /* the forward's workspace, owned here */
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

/* builds the plan of entry c (its shape, direction, device set) */
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
        return;
    }
    choose(c, cd_lib(), hd);
    c->info.build_ms = ms_now() - t0;
    const size_t rows = ((size_t)c->sh.B * c->sh.NH * c->sh.T * 4 + 255) / 256 * 256;
    c->scratch = c->bwd ? rows + (c->info.ws + 255) / 256 * 256 : 0;
    if (c->plan && !c->bwd && c->info.ws) c->fwd_ws = tcu_malloc(c->info.ws, "cuDNN attention workspace");
}

static int same(tcu_cudnn_shape a, tcu_cudnn_shape b) {
    return a.B == b.B && a.T == b.T && a.NH == b.NH && a.KVH == b.KVH && a.hs == b.hs;
}

/* the cache's entry of (sh, bwd), built at its first use; NULL: full */
static cd_plan *plan_for(tcu_cudnn_shape sh, int bwd) {
    for (int i = 0; i < CD_MAX_PLANS; i++) {
        cd_plan *c = &plans[i];
        if (c->used && c->bwd == bwd && same(c->sh, sh)) return c;
        if (c->used) continue;
        *c = (cd_plan){.used = 1, .bwd = bwd, .sh = sh};
        build(c);
        return c;
    }
    return NULL;
}

/* ---- selection ---- */

/* 1 when the device is sm_90 (Hopper: what auto takes) */
static int sm90(void) {
    int sm = 0;
    if (tcu_device_count() > 0) tcu_device_info(NULL, 0, &sm, NULL, NULL);
    return sm == 90;
}

/* says once per distinct reason why TSR_ATTENTION=cudnn did not run a call on cuDNN */
static void say_once(const char *why, tcu_cudnn_shape sh, int bwd) {
    enum { SAID = 32 };
    static const char *said[SAID];
    static int n;
    for (int i = 0; i < n; i++)
        if (said[i] == why || !strcmp(said[i], why)) return;
    if (n < SAID) said[n++] = why;
    fprintf(stderr, "tessera: TSR_ATTENTION=cudnn: attention %s (B %d, T %d, heads %d/%d, hs %d) "
                    "runs on the own kernels: %s\n",
            bwd ? "backward" : "forward", sh.B, sh.T, sh.NH, sh.KVH, sh.hs, why);
}

/* the plan cuDNN runs this call with, or NULL: the own kernels run it (said once if forced) */
static cd_plan *select_plan(tcu_cudnn_shape sh, int bwd, const char *refusal) {
    const tcu_att_backend b = tcu_cudnn_backend();
    if (b == TCU_ATT_OWN) return NULL;
    const char *why = refusal ? refusal : tcu_cudnn_load();
    cd_plan *c = NULL;
    if (!why && b == TCU_ATT_AUTO && !sm90()) why = "auto: not an sm_90 device";
    if (!why) {
        c = plan_for(sh, bwd);
        why = !c ? "the plan cache is full" : c->plan ? NULL : c->why;
    }
    if (!why && bwd && !c->announced)
        why = "its scratch was not sized by tcu_attention_scratch_bytes for this shape";
    if (why && b == TCU_ATT_CUDNN) say_once(why, sh, bwd);
    return why ? NULL : c;
}

/* ---- execution ---- */

/* the variant pack of c's graph over the given buffers, executed on stream s: 0 or -1 */
static int execute(cd_plan *c, void *const buf[TCU_BUF_COUNT], void *ws, tcu_stream s) {
    const cd_api *api = cd_lib();
    tcu_cudnn_tensor tab[TCU_CD_UID_COUNT];
    int64_t uid[TCU_CD_UID_COUNT];
    void *ptr[TCU_CD_UID_COUNT];
    const int n = tcu_cudnn_tensors(c->sh, c->bwd, tab);
    for (int i = 0; i < n; i++) {
        const size_t elem = tab[i].fp32 ? 4 : 2;
        uid[i] = tab[i].uid;
        ptr[i] = (char *)buf[tab[i].buf] + tab[i].offset * elem;
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

/* the host scalars by value: scale, -inf, 1 */
static float host_scalars[3];

static void *scalars(tcu_cudnn_shape sh) {
    host_scalars[0] = 1.0f / sqrtf((float)sh.hs);
    host_scalars[1] = -INFINITY;
    host_scalars[2] = 1.0f;
    return host_scalars;
}

/* an execute that failed: the process ends, naming it (a half-run op cannot fall back) */
static void died(const cd_plan *c) {
    fprintf(stderr, "tessera: error: cuDNN attention %s (B %d, T %d, heads %d/%d, hs %d): %s "
                    "(TSR_ATTENTION=own runs the own kernels)\n",
            c->bwd ? "backward" : "forward", c->sh.B, c->sh.T, c->sh.NH, c->sh.KVH, c->sh.hs,
            c->why);
    exit(1);
}

size_t tcu_cudnn_scratch_bytes(tcu_cudnn_shape sh) {
    if (tcu_cudnn_refusal(sh, NULL, NULL, NULL, 1, TSR_GRAD_SET)) return 0;
    if (tcu_cudnn_backend() == TCU_ATT_OWN || tcu_cudnn_load()) return 0;
    if (tcu_cudnn_backend() == TCU_ATT_AUTO && !sm90()) return 0;
    plan_for(sh, 0); /* the forward's plan too, so no step builds one */
    cd_plan *c = plan_for(sh, 1);
    if (!c || !c->plan) return 0;
    c->announced = 1;
    return c->scratch;
}

int tcu_cudnn_forward(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv, const float *alibi_slopes,
                      const int32_t *seq, const tsr_attn_var *var, tcu_cudnn_shape sh,
                      tcu_stream s) {
    if (tcu_cudnn_backend() == TCU_ATT_OWN) return 0;
    cd_plan *c = select_plan(sh, 0, tcu_cudnn_refusal(sh, alibi_slopes, seq, var, 0, TSR_GRAD_SET));
    if (!c) return 0;
    void *const buf[TCU_BUF_COUNT] = {[TCU_BUF_QKV] = (void *)qkv, [TCU_BUF_OUT] = out,
                                      [TCU_BUF_LSE] = lse, [TCU_BUF_HOST] = scalars(sh)};
    if (execute(c, buf, c->fwd_ws, s)) died(c);
    return 1;
}

int tcu_cudnn_backward(tsr_bf16 *dqkv, const tsr_bf16 *dout, const tsr_bf16 *qkv,
                       const tsr_bf16 *out, const float *lse, const float *alibi_slopes,
                       const int32_t *seq, const tsr_attn_var *var, void *scratch,
                       tcu_cudnn_shape sh, tsr_grad_mode mode, tcu_stream s) {
    if (tcu_cudnn_backend() == TCU_ATT_OWN) return 0;
    cd_plan *c = select_plan(sh, 1, tcu_cudnn_refusal(sh, alibi_slopes, seq, var, 1, mode));
    if (!c) return 0;
    const size_t rows = ((size_t)sh.B * sh.NH * sh.T * 4 + 255) / 256 * 256;
    void *const buf[TCU_BUF_COUNT] = {
        [TCU_BUF_QKV] = (void *)qkv, [TCU_BUF_OUT] = (void *)out, [TCU_BUF_LSE] = (void *)lse,
        [TCU_BUF_DOUT] = (void *)dout, [TCU_BUF_DQKV] = dqkv, [TCU_BUF_SCRATCH] = scratch,
        [TCU_BUF_HOST] = scalars(sh)};
    if (execute(c, buf, c->info.ws ? (char *)scratch + rows : NULL, s)) died(c);
    return 1;
}

int tcu_cudnn_plan_info_of(tcu_cudnn_shape sh, int bwd, tcu_cudnn_plan_info *info, char *why,
                           size_t n) {
    const char *w = tcu_cudnn_load();
    cd_plan *c = w ? NULL : plan_for(sh, bwd);
    if (!w && !c) w = "the plan cache is full";
    if (!w && !c->plan) w = c->why;
    snprintf(why, n, "%s", w ? w : "");
    if (w) return -1;
    *info = c->info;
    return 0;
}
#endif
