/* gpu_ep.c — expert parallelism on device = cuda: the experts' store on the device and the way the
 * shared exchange (model_ep.c) moves device rows (gpu_ep.h; docs/moe.md). */
#include "gpu/gpu_ep.h"

#include <stdio.h>
#include <string.h>

#include "common.h"

static size_t store_floats(const tsr_model *m, int EP) {
    return (size_t)m->LM * (size_t)(m->E / EP) * 3 * (size_t)m->FE * (size_t)m->C;
}

size_t gpu_ep_state_bytes(const tsr_model *m, int EP) {
    /* fp32 master + bf16 copy + fp32 gradients + two fp32 moments, and the norm's accumulator */
    return store_floats(m, EP) * (4 * sizeof(float) + sizeof(tsr_bf16)) + 5 * 256;
}

size_t gpu_ep_exchange_bytes(const tsr_model *m, int EP, int B, int T) {
    const size_t NK = (size_t)B * (size_t)T * (size_t)m->K, C = (size_t)m->C, FE = (size_t)m->FE;
    const size_t kept = NK * (C + 3 * FE) * sizeof(tsr_bf16) + 2 * 256; /* xr, h, hg per slot */
    const size_t stage = NK * (2 * C + 3 * FE) * sizeof(tsr_bf16) + 4 * 256;
    return (size_t)m->LM * (kept + (size_t)(m->E / EP + 1) * sizeof(int32_t) + 256) + stage;
}

/* c after the dense gradients' collectives queued so far (two communicators' collectives in one
 * order on every rank) */
static void after_dense(gpu_ep *x, gpu_comm *c) {
    for (int i = 0; i < 2; i++) gpu_comm_after(c, x->dense[i]);
}

static void x_alltoallv(void *ctx, const void *send, const size_t *sc, const size_t *sd,
                        void *recv, const size_t *rc, const size_t *rd, size_t elem) {
    gpu_ep *x = ctx;
    after_dense(x, x->group);
    gpu_comm_alltoallv(x->group, send, sc, sd, recv, rc, rd, elem);
}

static void x_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    gpu_ep *x = ctx;
    tcu_memcpy_d2d(dst, src, bytes, x->s);
}

int gpu_ep_init(gpu_ep *x, tsr_ep *ep, const tsr_model *m, const tsr_mesh *mesh, tcu_stream s,
                char *why, size_t n) {
    memset(x, 0, sizeof *x);
    x->ep = ep, x->m = m, x->s = s;
    /* the groups of model_ep.c, the mesh's: EP consecutive ranks; the ranks with the same index */
    x->group = gpu_comm_open(mesh_group(mesh, TSR_MESH_EXPERT), s, why, n);
    if (!x->group) return -1;
    x->edp = gpu_comm_open(mesh_group(mesh, TSR_MESH_EXPERT_DATA), s, why, n);
    if (!x->edp) return -1;
    const size_t b = ep->n * sizeof(float);
    x->w = tcu_malloc(b, "experts' master weights (fp32)");
    x->wbf = tcu_malloc(ep->n * sizeof(tsr_bf16), "experts' weights (bf16 copy)");
    x->g = tcu_malloc(b, "experts' gradients (fp32)");
    x->mo = tcu_malloc(b, "experts' AdamW m (fp32)");
    x->v = tcu_malloc(b, "experts' AdamW v (fp32)");
    x->acc = tcu_malloc(sizeof(float), "experts' gradient norm");
    tcu_zero(x->g, b, s);
    tcu_zero(x->mo, b, s);
    tcu_zero(x->v, b, s);
    gpu_ep_push(x, 0);
    x->xfer = (tsr_ep_xfer){.ctx = x, .alltoallv = x_alltoallv, .copy = x_copy};
    ep->xfer = &x->xfer;
    return 0;
}

void gpu_ep_unit(void *ctx, int u, int backward, const void **w, float **gr) {
    gpu_ep *x = ctx;
    size_t o1, o2;
    if (x->ep->full) /* (every expert gathered on the host: the end-of-run sample, on the host) */
        tsr_die(TSR_EXIT_INTERNAL, "gpu_ep_unit: a device forward while every expert is gathered");
    if (!ep_layer_offsets(x->ep, x->m, u, 0, &o1, &o2)) return;
    w[TSR_P_EXPW1] = x->wbf + o1;
    w[TSR_P_EXPW2] = x->wbf + o2;
    if (backward) {
        gr[TSR_P_EXPW1] = x->g + o1;
        gr[TSR_P_EXPW2] = x->g + o2;
    }
}

void gpu_ep_zero_grads(gpu_ep *x) { tcu_zero(x->g, x->ep->n * sizeof(float), x->s); }

void gpu_ep_reduce(gpu_ep *x) {
    size_t off = 0, len = x->ep->n;
    after_dense(x, x->edp);
    gpu_comm_allreduce(x->edp, x->g, &off, &len, 1);
    gpu_comm_wait(x->edp);
}

double gpu_ep_sumsq(gpu_ep *x) {
    float sq = 0.0f;
    tcu_zero(x->acc, sizeof(float), x->s);
    tcu_sumsq(x->acc, x->g, x->ep->n, x->s);
    tcu_memcpy_d2h(&sq, x->acc, sizeof sq, x->s);
    double s = sq;
    dist_group_allreduce_sum_f64(x->ep->group, &s, 1); /* the group holds every expert once */
    return s;
}

void gpu_ep_update(gpu_ep *x, const tsr_optim_config *o, float decay, double lr, float gscale,
                   int step) {
    tcu_adamw_update(x->w, x->wbf, x->g, x->mo, x->v, x->ep->n, (float)lr, (float)o->beta1,
                     (float)o->beta2, (float)o->eps, decay, gscale, step, x->s);
}

void gpu_ep_pull(gpu_ep *x, int with_optim) {
    tsr_ep *ep = x->ep;
    const size_t b = ep->n * sizeof(float);
    tcu_memcpy_d2h(ep->w, x->w, b, x->s);
    if (with_optim) {
        tcu_memcpy_d2h(ep->m, x->mo, b, x->s);
        tcu_memcpy_d2h(ep->v, x->v, b, x->s);
    }
}

void gpu_ep_push(gpu_ep *x, int with_optim) {
    tsr_ep *ep = x->ep;
    const size_t b = ep->n * sizeof(float);
    tcu_memcpy_h2d(x->w, ep->w, b, x->s);
    tcu_f32_to_bf16(x->wbf, x->w, ep->n, x->s);
    if (with_optim) {
        tcu_memcpy_h2d(x->mo, ep->m, b, x->s);
        tcu_memcpy_h2d(x->v, ep->v, b, x->s);
    }
    tcu_sync(x->s);
}

void gpu_ep_full(gpu_ep *x, int on) {
    tsr_ep *ep = x->ep;
    if (!on) {
        ep_full(ep, 0);
        return;
    }
    if (!ep->full) {
        gpu_ep_pull(x, 0);
        ep_full(ep, 1);
    }
}

void gpu_ep_free(gpu_ep *x) {
    if (!x->ep) return;
    tcu_sync(x->s);
    ep_release(x->ep);
    x->ep->xfer = NULL;
    gpu_comm_close(x->group);
    gpu_comm_close(x->edp);
    void *bufs[] = {x->w, x->wbf, x->g, x->mo, x->v, x->acc};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tcu_free(bufs[i]);
    memset(x, 0, sizeof *x);
}
