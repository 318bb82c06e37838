/* model_ep.c — expert parallelism: the experts' host store, the exchange of routed rows (on the
 * backend the decoder runs: fp32 host rows by MPI on the CPU, bf16 device rows through the
 * tsr_ep_xfer of src/gpu/gpu_ep.c on CUDA), the checkpoint layout (model_ep.h; docs/moe.md). */
#include "model/model_ep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/model_tp.h"

/* What one MoE layer's forward left for its backward. Rows received are ordered by local expert,
 * then by source rank: offl (El + 1) over R rows. */
struct ep_slot {
    int32_t *allo;            /* (EP, E + 1) every group rank's expert offsets (host) */
    int32_t *offs_local;      /* (El + 1) host */
    void *offs_dev;           /* (El + 1) int32, the same in the exchange backend's memory */
    size_t R, cap;            /* rows received; rows the buffers hold */
    void *xr, *h, *hg;        /* (R, C), (R, 2FE), (R, FE) activations of the exchange backend */
    size_t *sc, *sd, *rc, *rd; /* (EP each) elements of C-wide rows sent to / received from each */
};

enum { SC_STAGE = 0, SC_Y, SC_DH, SC_DHG };

/* The backend the exchange runs on: the first ep_forward's (its buffers live there until
 * ep_release). Mixing backends in one run is an internal error. */
static const tsr_backend *xbe(tsr_ep *ep, const tsr_backend *be) {
    if (!ep->xbe_set) {
        ep->xbe = *be;
        ep->xbe_set = 1;
    } else if (ep->xbe.ctx != be->ctx || ep->xbe.act != be->act) {
        tsr_die(TSR_EXIT_INTERNAL, "expert parallelism: the exchange moved to another backend "
                "(%s -> %s) without ep_release", ep->xbe.name, be->name);
    }
    return &ep->xbe;
}

/* A buffer of at least `bytes` in the exchange backend's memory (never NULL). */
static void *grow(tsr_ep *ep, void **p, size_t *cap, size_t bytes) {
    const tsr_backend *be = &ep->xbe;
    if (bytes > *cap || !*p) {
        if (*p) be->free(be, *p);
        *p = be->try_alloc(be, bytes ? bytes : 1);
        if (!*p) /* (the plan counts them for balanced routing; unbalanced needs up to EP x) */
            tsr_die(TSR_EXIT_USAGE, "parallel.expert: the %s backend has no room for %zu bytes "
                    "more of the expert exchange's buffers (the plan counts them for balanced "
                    "routing; unbalanced routing needs up to parallel.expert times as much): use "
                    "a smaller micro_batch, or micro_batch = \"auto\"", be->name, bytes);
        *cap = bytes;
    }
    return *p;
}

static void *scratch(tsr_ep *ep, int k, size_t bytes) {
    return grow(ep, &ep->scratch[k], &ep->scratch_cap[k], bytes);
}

/* the element size of the exchanged activations */
static size_t esize(const tsr_ep *ep) { return tsr_dtype_size(ep->xbe.act); }

/* a pipeline rank's part (model_pp.h): the whole model's MoE slot of each of the store's */
static void store_layers(tsr_ep *ep, const tsr_model *m) {
    if (!m->pp) return;
    ep->gslot = tsr_malloc((size_t)(ep->LM ? ep->LM : 1) * sizeof *ep->gslot);
    for (int l = 0, s = 0; l < m->L; l++)
        if (model_layer_slot(m, TSR_P_EXPW1, l) >= 0)
            ep->gslot[s++] = model_layer_slot(m->global, TSR_P_EXPW1, config_layer_at(&m->cfg, l));
}

/* the store's slot of model m's (the part's, or a pipeline chunk's) layer l; -1 when l is no
 * MoE layer */
static int store_slot(const tsr_ep *ep, const tsr_model *m, int l) {
    const int s = model_layer_slot(m, TSR_P_EXPW1, l);
    if (s < 0 || !ep->gslot) return s;
    const int g = model_layer_slot(m->global, TSR_P_EXPW1, config_layer_at(&m->cfg, l));
    for (int k = 0; k < ep->LM; k++)
        if (ep->gslot[k] == g) return k;
    tsr_die(TSR_EXIT_INTERNAL, "expert parallelism: layer %d's experts are not in this rank's "
            "store", config_layer_at(&m->cfg, l));
}

/* the whole model's MoE slot of the store's slot s */
static size_t whole_slot(const tsr_ep *ep, int s) {
    return (size_t)(ep->gslot ? ep->gslot[s] : s);
}

void ep_init(tsr_ep *ep, tsr_model *m, const tsr_mesh *mesh) {
    const tsr_mesh_group *expert = mesh_group(mesh, TSR_MESH_EXPERT);
    const tsr_mesh_group *edp = mesh_group(mesh, TSR_MESH_EXPERT_DATA);
    const int EP = expert->size;
    if (!expert->cpu || !edp->cpu || EP != m->EP)
        tsr_die(TSR_EXIT_INTERNAL, "ep_init: the mesh's expert groups (%d ranks) are not the "
                "model's (parallel.expert = %d)", EP, m->EP);
    memset(ep, 0, sizeof *ep);
    ep->ops = m->ops;
    ep->EP = EP;
    ep->j = expert->rank;
    ep->E = m->E, ep->LM = m->LM, ep->C = m->C, ep->FE = m->FE;
    ep->El = m->E / EP;
    ep->e0 = ep->j * ep->El;
    ep->group = expert->cpu;
    ep->edp = edp->cpu;
    ep->x1 = (size_t)2 * m->FE * m->C;
    ep->x2 = (size_t)m->C * m->FE;
    ep->n1 = (size_t)m->LM * ep->El * ep->x1;
    ep->n = ep->n1 + (size_t)m->LM * ep->El * ep->x2;
    ep->tp = m->tp; /* (whole experts: the global model's width) */
    const int FE = m->tp ? m->tp->global.FE : m->FE;
    ep->gx1 = (size_t)2 * FE * m->C, ep->gx2 = (size_t)m->C * FE;
    ep->gn1 = (size_t)m->LM * ep->El * ep->gx1;
    ep->gn = ep->gn1 + (size_t)m->LM * ep->El * ep->gx2;
    float **bufs[] = {&ep->w, &ep->g, &ep->m, &ep->v};
    for (int i = 0; i < 4; i++) *bufs[i] = ep->ops->alloc(ep->n * sizeof(float)); /* zeroed */
    ep->n_slots0 = m->L;
    ep->slots0 = ep_slots_new(ep, m->L);
    ep_slots_use(ep, NULL, 0);
    ep->offs_h = tsr_malloc((size_t)(m->E + 1) * sizeof(int32_t));
    store_layers(ep, m);
    m->ep = ep;
}

ep_slot *ep_slots_new(const tsr_ep *ep, int n) {
    ep_slot *slots = tsr_calloc((size_t)(n > 0 ? n : 1), sizeof *slots);
    for (int s = 0; s < n; s++) {
        ep_slot *q = &slots[s];
        q->allo = tsr_malloc((size_t)ep->EP * (size_t)(ep->E + 1) * sizeof(int32_t));
        q->offs_local = tsr_malloc((size_t)(ep->El + 1) * sizeof(int32_t));
        q->offs_dev = NULL;
        size_t **c[] = {&q->sc, &q->sd, &q->rc, &q->rd};
        for (int i = 0; i < 4; i++) *c[i] = tsr_malloc((size_t)ep->EP * sizeof(size_t));
    }
    return slots;
}

/* the slots' buffers in the exchange backend's memory freed */
static void slots_release(tsr_ep *ep, ep_slot *slots, int n) {
    const tsr_backend *be = &ep->xbe;
    for (int s = 0; ep->xbe_set && s < n; s++) {
        ep_slot *q = &slots[s];
        void *bufs[] = {q->xr, q->h, q->hg, q->offs_dev};
        for (int i = 0; i < 4; i++)
            if (bufs[i]) be->free(be, bufs[i]);
        q->xr = q->h = q->hg = NULL, q->offs_dev = NULL, q->cap = 0;
    }
}

void ep_slots_free(tsr_ep *ep, ep_slot *slots, int n) {
    if (!slots) return;
    slots_release(ep, slots, n);
    for (int s = 0; s < n; s++) {
        ep_slot *q = &slots[s];
        free(q->allo), free(q->offs_local), free(q->sc), free(q->sd), free(q->rc), free(q->rd);
    }
    free(slots);
}

void ep_slots_use(tsr_ep *ep, ep_slot *slots, int n) {
    ep->slots = slots ? slots : ep->slots0;
    ep->n_slots = slots ? n : ep->n_slots0;
}

void ep_release(tsr_ep *ep) {
    if (!ep->xbe_set) return;
    const tsr_backend *be = &ep->xbe;
    slots_release(ep, ep->slots0, ep->n_slots0);
    for (int k = 0; k < 4; k++) {
        if (ep->scratch[k]) be->free(be, ep->scratch[k]);
        ep->scratch[k] = NULL, ep->scratch_cap[k] = 0;
    }
    ep->xbe_set = 0;
}

void ep_free(tsr_ep *ep) {
    if (!ep->slots0) return;
    ep_release(ep);
    ep_slots_free(ep, ep->slots0, ep->n_slots0);
    free(ep->offs_h);
    free(ep->gslot);
    float *own[] = {ep->w, ep->g, ep->m, ep->v, ep->full};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (own[i]) ep->ops->free(own[i]);
    memset(ep, 0, sizeof *ep);
}

/* store offset of (layer slot s, local expert el) in expw1 (which 0) or expw2 (1) */
static size_t local_at(const tsr_ep *ep, int which, int s, int el) {
    size_t x = which ? ep->x2 : ep->x1;
    return (which ? ep->n1 : 0) + ((size_t)s * ep->El + (size_t)el) * x;
}

void ep_init_weights(tsr_ep *ep, const tsr_model *m, uint64_t seed) {
    float *whole = ep_whole_begin(ep); /* (the weights of the global tensors, by their numbers) */
    const tsr_model *g = m->global ? m->global : m; /* (the whole model's: its depth's scale) */
    for (int which = 0; which < 2; which++) {
        tsr_param_id id = which ? TSR_P_EXPW2 : TSR_P_EXPW1;
        for (int s = 0; s < ep->LM; s++) {
            size_t k0, at; /* the slot's experts: global element k0.., offset at.. */
            const size_t n = ep_slot_span(ep, which, s, &k0, &at);
            float *w = whole + at;
            /* (as model_init_weights: the same bits on any number of threads) */
#pragma omp parallel for schedule(static) if (n >= (1u << 16))
            for (size_t k = 0; k < n; k++) w[k] = model_init_weight(g, id, seed, k0 + k);
        }
    }
    ep_whole_end(ep, whole);
}

size_t ep_slot_span(const tsr_ep *ep, int which, int s, size_t *in_tensor, size_t *in_store) {
    const size_t x = which ? ep->gx2 : ep->gx1;
    *in_tensor = (whole_slot(ep, s) * ep->E + (size_t)ep->e0) * x;
    *in_store = (which ? ep->gn1 : 0) + (size_t)s * ep->El * x;
    return (size_t)ep->El * x;
}

float *ep_whole_begin(tsr_ep *ep) {
    if (!ep->tp) return ep->w;
    float *whole = ep->ops->alloc(ep->gn * sizeof(float));
    ep->ops->zero(whole, ep->gn * sizeof(float));
    return whole;
}

void ep_whole_end(tsr_ep *ep, float *whole) {
    if (!ep->tp) return;
    tp_expert_copy(ep->tp, ep->LM, ep->El, whole, ep->w, 1);
    ep->ops->free(whole);
}

int ep_exchanging(const tsr_ep *ep) { return ep->full == NULL; }

int ep_layer_offsets(const tsr_ep *ep, const tsr_model *m, int u, int full, size_t *o1,
                     size_t *o2) {
    if (u < 1) return 0;
    const int s = store_slot(ep, m, u - 1);
    if (s < 0) return 0;
    if (full) { /* every expert: [expw1 (LM, E, ..) | expw2 (LM, E, ..)] */
        *o1 = (size_t)s * ep->E * ep->x1;
        *o2 = (size_t)ep->LM * ep->E * ep->x1 + (size_t)s * ep->E * ep->x2;
    } else {
        *o1 = local_at(ep, 0, s, 0);
        *o2 = local_at(ep, 1, s, 0);
    }
    return 1;
}

void ep_unit(tsr_ep *ep, const tsr_model *m, int u, int backward, const void **w, float **g) {
    size_t o1, o2;
    if (!ep_layer_offsets(ep, m, u, ep->full != NULL, &o1, &o2)) return;
    if (ep->full) {
        w[TSR_P_EXPW1] = ep->full + o1;
        w[TSR_P_EXPW2] = ep->full + o2;
        return; /* (no gradients: the end-of-run sample only) */
    }
    w[TSR_P_EXPW1] = ep->w + o1;
    w[TSR_P_EXPW2] = ep->w + o2;
    if (backward) {
        g[TSR_P_EXPW1] = ep->g + o1;
        g[TSR_P_EXPW2] = ep->g + o2;
    }
}

/* ---- the exchange ------------------------------------------------------------------------- */

/* rows source q routed to local expert el (the slot's allgathered offsets) */
static int32_t rows_from(const tsr_ep *ep, const ep_slot *q, int src, int el) {
    const int32_t *o = q->allo + (size_t)src * (size_t)(ep->E + 1);
    return o[ep->e0 + el + 1] - o[ep->e0 + el];
}

/* The slot's plan from this rank's offsets (offs: E + 1, in the backend's memory): what goes
 * where, what comes from where. The offsets come to the host (the backend waits for its queued
 * work: on a GPU one synchronisation per MoE layer and forward), since the counts size the
 * exchange. */
static void plan_slot(tsr_ep *ep, ep_slot *q, const int32_t *offs_be) {
    const int P = ep->EP, El = ep->El, C = ep->C;
    const tsr_backend *be = &ep->xbe;
    int32_t *offs = ep->offs_h;
    be->to_host(be, offs, offs_be, (size_t)(ep->E + 1) * sizeof(int32_t));
    dist_group_allgather(ep->group, offs, q->allo, (size_t)(ep->E + 1) * sizeof(int32_t));
    size_t at = 0;
    for (int p = 0; p < P; p++) {
        q->sd[p] = (size_t)offs[p * El] * C;
        q->sc[p] = (size_t)(offs[(p + 1) * El] - offs[p * El]) * C;
        size_t r = 0;
        for (int el = 0; el < El; el++) r += (size_t)rows_from(ep, q, p, el);
        q->rd[p] = at * C;
        q->rc[p] = r * C;
        at += r;
    }
    q->R = at;
    q->offs_local[0] = 0;
    for (int el = 0; el < El; el++) {
        int32_t r = 0;
        for (int p = 0; p < P; p++) r += rows_from(ep, q, p, el);
        q->offs_local[el + 1] = q->offs_local[el] + r;
    }
    const size_t es = esize(ep);
    if (q->R > q->cap || !q->xr) {
        size_t R = q->R, cap = 0;
        grow(ep, &q->xr, &cap, R * C * es);
        cap = 0, grow(ep, &q->h, &cap, R * 2 * (size_t)ep->FE * es);
        cap = 0, grow(ep, &q->hg, &cap, R * (size_t)ep->FE * es);
        q->cap = R;
    }
    if (!q->offs_dev) {
        size_t cap = 0;
        grow(ep, &q->offs_dev, &cap, (size_t)(El + 1) * sizeof(int32_t));
    }
    be->to_device(be, q->offs_dev, q->offs_local, (size_t)(El + 1) * sizeof(int32_t));
}

/* dst = src (bytes) in the exchange backend's memory, in order with its queued work */
static void move(const tsr_ep *ep, void *dst, const void *src, size_t bytes) {
    if (ep->xfer) ep->xfer->copy(ep->xfer->ctx, dst, src, bytes);
    else memcpy(dst, src, bytes);
}

/* the all-to-all-v over the EP group, counts and displacements in elements */
static void alltoallv(tsr_ep *ep, const void *send, const size_t *sc, const size_t *sd,
                      void *recv, const size_t *rc, const size_t *rd) {
    if (ep->xfer) ep->xfer->alltoallv(ep->xfer->ctx, send, sc, sd, recv, rc, rd, esize(ep));
    else dist_group_alltoallv(ep->group, send, sc, sd, recv, rc, rd, esize(ep));
}

/* stage (rows by source rank, each source's by local expert) <-> by local expert, then source */
static void reorder(const tsr_ep *ep, const ep_slot *q, const void *from, void *to,
                    int to_expert_major) {
    const int P = ep->EP, El = ep->El;
    const size_t C = (size_t)ep->C, row = C * esize(ep);
    for (int p = 0; p < P; p++) {
        size_t src_at = q->rd[p] / C; /* this source's first row in the stage */
        for (int el = 0; el < El; el++) {
            size_t n = (size_t)rows_from(ep, q, p, el);
            size_t dst_at = (size_t)q->offs_local[el];
            for (int pp = 0; pp < p; pp++) dst_at += (size_t)rows_from(ep, q, pp, el);
            const char *a = (const char *)from + (to_expert_major ? src_at : dst_at) * row;
            char *b = (char *)to + (to_expert_major ? dst_at : src_at) * row;
            if (n) move(ep, b, a, n * row);
            src_at += n;
        }
    }
}

/* the rows of `mine` (NK, C: by expert, so by owner) to their owners, by local expert then
 * source into out (R, C) */
static void to_owners(tsr_ep *ep, const ep_slot *q, const void *mine, void *out) {
    void *stage = scratch(ep, SC_STAGE, q->R * (size_t)ep->C * esize(ep));
    alltoallv(ep, mine, q->sc, q->sd, stage, q->rc, q->rd);
    for (int p = 0; p < ep->EP; p++)
        if (p != ep->j) ep->sent_bytes += q->sc[p] * esize(ep);
    reorder(ep, q, stage, out, 1);
}

/* the reverse: rows (R, C) by local expert then source, back to their sources into out (NK, C) */
static void from_owners(tsr_ep *ep, const ep_slot *q, const void *rows, void *out) {
    void *stage = scratch(ep, SC_STAGE, q->R * (size_t)ep->C * esize(ep));
    reorder(ep, q, rows, stage, 0);
    alltoallv(ep, stage, q->rc, q->rd, out, q->sc, q->sd);
    for (int p = 0; p < ep->EP; p++)
        if (p != ep->j) ep->sent_bytes += q->rc[p] * esize(ep);
}

/* ---- the experts' unit ---------------------------------------------------------------------- */

tsr_experts experts_of(const tsr_model *m, const void *const *w, float *const *g) {
    return (tsr_experts){.w1 = w[TSR_P_EXPW1], .w2 = w[TSR_P_EXPW2], .b1 = w[TSR_P_EXPB1],
                         .b2 = w[TSR_P_EXPB2], .g1 = g ? g[TSR_P_EXPW1] : NULL,
                         .g2 = g ? g[TSR_P_EXPW2] : NULL, .gb1 = g ? g[TSR_P_EXPB1] : NULL,
                         .gb2 = g ? g[TSR_P_EXPB2] : NULL, .E = m->E, .C = m->C, .FE = m->FE,
                         .gptoss = m->cfg.moe_act == TSR_MOE_ACT_GPTOSS, .alpha = 1.702f,
                         .limit = (float)m->cfg.swiglu_limit};
}

void experts_forward(const tsr_backend *be, const tsr_experts *x, const int32_t *offs, int rows,
                     const void *xg, void *h, void *hg, void *y) {
    const int C = x->C, FE = x->FE, E = x->E;
    be->moe_matmul_forward(be, h, xg, x->w1, offs, E, rows, C, 2 * FE);
    if (x->b1) be->moe_bias_forward(be, h, x->b1, offs, E, 2 * FE);
    if (x->gptoss) be->moe_gptoss_forward(be, hg, h, rows, FE, x->alpha, x->limit);
    else be->swiglu_forward(be, hg, h, rows, FE);
    be->moe_matmul_forward(be, y, hg, x->w2, offs, E, rows, FE, C);
    if (x->b2) be->moe_bias_forward(be, y, x->b2, offs, E, C);
}

void experts_backward(const tsr_backend *be, const tsr_experts *x, const int32_t *offs, int rows,
                      void *dy, const void *xg, const void *h, const void *hg, void *dh,
                      void *dhg) {
    const int C = x->C, FE = x->FE, E = x->E;
    const size_t es = tsr_dtype_size(be->act), n = (size_t)rows;
    if (x->gb2) be->moe_bias_backward(be, x->gb2, dy, offs, E, C);
    be->zero(be, dhg, n * FE * es);
    be->moe_matmul_backward(be, dhg, x->g2, dy, hg, x->w2, offs, E, rows, FE, C);
    if (x->gptoss)
        be->moe_gptoss_backward(be, dh, h, dhg, rows, FE, x->alpha, x->limit, TSR_GRAD_SET);
    else be->swiglu_backward(be, dh, h, dhg, rows, FE, TSR_GRAD_SET);
    if (x->gb1) be->moe_bias_backward(be, x->gb1, dh, offs, E, 2 * FE);
    be->zero(be, dy, n * C * es); /* dy is used up: it now takes d(xg) */
    be->moe_matmul_backward(be, dy, x->g1, dh, xg, x->w1, offs, E, rows, C, 2 * FE);
}

/* x with this rank's El experts: w1, w2 are the store's already; the biases (dense, all E) move
 * on to expert e0's rows */
static tsr_experts local_experts(const tsr_ep *ep, const tsr_experts *x) {
    tsr_experts l = *x;
    const size_t ws = tsr_dtype_size(ep->xbe.weight), e0 = (size_t)ep->e0;
    const size_t o1 = e0 * 2 * (size_t)ep->FE, o2 = e0 * (size_t)ep->C;
    l.E = ep->El;
    if (l.b1) l.b1 = (const char *)l.b1 + o1 * ws;
    if (l.b2) l.b2 = (const char *)l.b2 + o2 * ws;
    if (l.gb1) l.gb1 += o1;
    if (l.gb2) l.gb2 += o2;
    return l;
}

void ep_forward(tsr_ep *ep, const tsr_backend *be, int slot, const void *xg,
                const int32_t *offs, const tsr_experts *x, void *y, int NK) {
    (void)NK;
    be = xbe(ep, be);
    ep_slot *q = &ep->slots[slot];
    plan_slot(ep, q, offs);
    to_owners(ep, q, xg, q->xr);
    void *yr = scratch(ep, SC_Y, q->R * (size_t)ep->C * esize(ep));
    const tsr_experts l = local_experts(ep, x);
    experts_forward(be, &l, (const int32_t *)q->offs_dev, (int)q->R, q->xr, q->h, q->hg, yr);
    from_owners(ep, q, yr, y);
}

void ep_backward(tsr_ep *ep, const tsr_backend *be, int slot, void *dxy, const tsr_experts *x,
                 int NK) {
    (void)NK;
    be = xbe(ep, be);
    ep_slot *q = &ep->slots[slot];
    const size_t R = q->R, es = esize(ep), FE = (size_t)ep->FE;
    void *dyr = scratch(ep, SC_Y, R * (size_t)ep->C * es);
    to_owners(ep, q, dxy, dyr);
    void *dhg = scratch(ep, SC_DHG, R * FE * es);
    void *dh = scratch(ep, SC_DH, R * 2 * FE * es);
    const tsr_experts l = local_experts(ep, x);
    experts_backward(be, &l, (const int32_t *)q->offs_dev, (int)R, dyr, q->xr, q->h, q->hg, dh,
                     dhg);
    from_owners(ep, q, dyr, dxy);
}

/* ---- the optimizer's side ------------------------------------------------------------------ */

void ep_zero_grads(tsr_ep *ep) { memset(ep->g, 0, ep->n * sizeof(float)); }

void ep_reduce(tsr_ep *ep) {
    if (dist_group_size(ep->edp) > 1) dist_group_allreduce_sum_f32(ep->edp, ep->g, ep->n);
}

double ep_sumsq(const tsr_ep *ep, const tsr_ops *ops) {
    double sq = ops->sumsq(ep->g, ep->n);
    dist_group_allreduce_sum_f64(ep->group, &sq, 1); /* the group holds every expert once */
    if (ep->tp) dist_group_allreduce_sum_f64(ep->tp->group, &sq, 1); /* (each its share) */
    return sq;
}

void ep_full(tsr_ep *ep, int on) {
    if (!on) {
        if (ep->full) ep->ops->free(ep->full);
        ep->full = NULL;
        return;
    }
    if (ep->full) return;
    size_t n1 = (size_t)ep->LM * ep->E * ep->x1;
    ep->full = ep->ops->alloc((n1 + (size_t)ep->LM * ep->E * ep->x2) * sizeof(float));
    /* layer by layer, each holder's experts broadcast from it (any size: dist_group_bcast_f32
     * cuts MPI's int counts) */
    for (int which = 0; which < 2; which++) {
        size_t x = which ? ep->x2 : ep->x1, layer = (size_t)ep->El * x;
        for (int s = 0; s < ep->LM; s++) {
            float *dst = ep->full + (which ? n1 : 0) + (size_t)s * ep->E * x;
            memcpy(dst + (size_t)ep->j * layer, ep->w + local_at(ep, which, s, 0),
                   layer * sizeof(float));
            for (int p = 0; p < ep->EP; p++)
                dist_group_bcast_f32(ep->group, dst + (size_t)p * layer, layer, p);
        }
    }
}

/* ---- checkpoints --------------------------------------------------------------------------- */

/* Expert tensor `which` as blocks of one expert of one layer, global block b = s E + e: part p
 * (of group rank p) is blocks [p B, (p + 1) B) with B = LM El; rank q holds the blocks
 * s E + q El + el. Both orders increase together, so what a rank sends to one part is one run of
 * its store and what a part sends back to one rank is one run of that rank's store. */
size_t ep_part_floats(const tsr_ep *ep) { return ep->gn; }

void ep_part_range(const tsr_ep *ep, int which, uint64_t *lo, uint64_t *hi) {
    size_t len = which ? ep->gn - ep->gn1 : ep->gn1;
    /* (a pipeline stage's layers: consecutive MoE slots of the whole model from gslot[0]) */
    const size_t at = ep->LM ? whole_slot(ep, 0) * (size_t)ep->E * (which ? ep->gx2 : ep->gx1) : 0;
    *lo = at + (uint64_t)ep->j * len;
    *hi = *lo + len;
}

/* Layer s of holder q (its store order): the blocks that fall in part p, [first, first + count)
 * of the holder's blocks of that layer. */
static void blocks_of(const tsr_ep *ep, int s, int q, int p, size_t *first, size_t *count) {
    const size_t B = (size_t)ep->LM * ep->El;
    size_t f = SIZE_MAX, c = 0;
    for (int el = 0; el < ep->El; el++) {
        size_t b = (size_t)s * ep->E + (size_t)q * ep->El + (size_t)el;
        if (b / B != (size_t)p) continue;
        if (f == SIZE_MAX) f = (size_t)el;
        c++;
    }
    *first = f == SIZE_MAX ? 0 : f;
    *count = c;
}

/* One layer at a time, through a stage of one layer's E experts (a part may hold a whole layer),
 * every count and displacement within one layer's E experts of a tensor (trainer_init checks
 * that this fits MPI's int counts). */
static void part_exchange(tsr_ep *ep, const float *in, float *out, int to_part) {
    const int P = ep->EP, me = ep->j;
    const size_t B = (size_t)ep->LM * ep->El;
    size_t *sc = tsr_malloc(4 * (size_t)P * sizeof(size_t)), *sd = sc + P, *rc = sd + P, *rd = rc + P;
    float *stage = tsr_malloc((size_t)ep->E * (ep->gx1 > ep->gx2 ? ep->gx1 : ep->gx2) *
                              sizeof(float));
    for (int which = 0; which < 2; which++) { /* (whole experts: gx, gn) */
        const size_t x = which ? ep->gx2 : ep->gx1, base = which ? ep->gn1 : 0;
        for (int s = 0; s < ep->LM; s++) {
            /* the store's run of layer s (its El experts); the part whole (its blocks of layer s
             * are where their global index says) */
            const float *src = to_part ? in + base + (size_t)s * ep->El * x : in + base;
            float *dst = to_part ? out + base : out + base + (size_t)s * ep->El * x;
            size_t at = 0;
            for (int p = 0; p < P; p++) {
                size_t f, c, f2, c2;
                if (to_part) { /* my blocks of part p; holder p's blocks of my part */
                    blocks_of(ep, s, me, p, &f, &c);
                    sd[p] = f * x, sc[p] = c * x;
                    blocks_of(ep, s, p, me, &f2, &c2);
                    rd[p] = at, rc[p] = c2 * x, at += c2 * x;
                } else { /* holder p's blocks of my part; my blocks of part p */
                    blocks_of(ep, s, p, me, &f, &c);
                    sd[p] = at, sc[p] = c * x, at += c * x;
                    blocks_of(ep, s, me, p, &f2, &c2);
                    rd[p] = f2 * x, rc[p] = c2 * x;
                }
            }
            if (!to_part) { /* my part's blocks of layer s, holder by holder, into the stage */
                size_t k = 0;
                for (int p = 0; p < P; p++)
                    for (int el = 0; el < ep->El; el++) {
                        size_t b = (size_t)s * ep->E + (size_t)p * ep->El + (size_t)el;
                        if (b / B != (size_t)me) continue;
                        memcpy(stage + k, src + (b - (size_t)me * B) * x, x * sizeof(float));
                        k += x;
                    }
                dist_group_alltoallv(ep->group, stage, sc, sd, dst, rc, rd, sizeof(float));
                continue;
            }
            dist_group_alltoallv(ep->group, src, sc, sd, stage, rc, rd, sizeof(float));
            size_t k = 0; /* the stage holds each holder's blocks of my part: to global order */
            for (int p = 0; p < P; p++)
                for (int el = 0; el < ep->El; el++) {
                    size_t b = (size_t)s * ep->E + (size_t)p * ep->El + (size_t)el;
                    if (b / B != (size_t)me) continue;
                    memcpy(dst + (b - (size_t)me * B) * x, stage + k, x * sizeof(float));
                    k += x;
                }
        }
    }
    free(stage);
    free(sc);
}

void ep_to_part(tsr_ep *ep, const float *store, float *part) {
    if (!ep->tp) {
        part_exchange(ep, store, part, 1);
        return;
    }
    float *whole = ep->ops->alloc(ep->gn * sizeof(float)); /* (each share into zeros, summed) */
    ep->ops->zero(whole, ep->gn * sizeof(float));
    tp_expert_copy(ep->tp, ep->LM, ep->El, whole, (float *)store, 0);
    dist_group_allreduce_sum_f32(ep->tp->group, whole, ep->gn);
    if (ep->tp->t == 0) part_exchange(ep, whole, part, 1);
    ep->ops->free(whole);
}

void ep_from_part(tsr_ep *ep, const float *part, float *store) {
    if (!ep->tp) {
        part_exchange(ep, part, store, 0);
        return;
    }
    float *whole = ep->ops->alloc(ep->gn * sizeof(float));
    if (ep->tp->t == 0) part_exchange(ep, part, whole, 0);
    dist_group_bcast_f32(ep->tp->group, whole, ep->gn, 0);
    tp_expert_copy(ep->tp, ep->LM, ep->El, whole, store, 1);
    ep->ops->free(whole);
}

void ep_bcast(tsr_ep *ep, float *store) {
    if (dist_group_size(ep->edp) > 1) dist_group_bcast_f32(ep->edp, store, ep->n, 0);
}
