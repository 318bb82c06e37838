/* model_ep.c — expert parallelism on the CPU backend: the experts' store, the exchange of routed
 * rows, the checkpoint layout (model_ep.h; docs/moe.md). */
#include "model/model_ep.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

/* What one MoE layer's forward left for its backward. Rows received are ordered by local expert,
 * then by source rank: offl (El + 1) over R rows. */
struct ep_slot {
    int32_t *allo;            /* (EP, E + 1) every group rank's expert offsets */
    int32_t *offs_local;      /* (El + 1) */
    size_t R, cap;            /* rows received; rows the buffers hold */
    float *xr, *h, *hg;       /* (R, C), (R, 2FE), (R, FE) */
    size_t *sc, *sd, *rc, *rd; /* (EP each) floats of C-wide rows sent to / received from each */
};

enum { SC_STAGE = 0, SC_Y, SC_DH, SC_DHG };

/* A buffer of at least n floats (never NULL), through the backend's allocator so that the
 * run's peak memory counts it. */
static float *grow(const tsr_ep *ep, float **p, size_t *cap, size_t n) {
    if (n > *cap || !*p) {
        if (*p) ep->ops->free(*p);
        *p = ep->ops->alloc((n ? n : 1) * sizeof(float));
        *cap = n;
    }
    return *p;
}

static float *scratch(tsr_ep *ep, int k, size_t n) {
    return grow(ep, &ep->scratch[k], &ep->scratch_cap[k], n);
}

void ep_init(tsr_ep *ep, tsr_model *m, int EP, const tsr_dist *d) {
    memset(ep, 0, sizeof *ep);
    ep->ops = m->ops;
    ep->EP = EP;
    ep->j = d->rank % EP;
    ep->E = m->E, ep->LM = m->LM, ep->C = m->C, ep->FE = m->FE;
    ep->El = m->E / EP;
    ep->e0 = ep->j * ep->El;
    ep->group = dist_group_split(d->rank / EP, d->rank);
    ep->edp = dist_group_split(ep->j, d->rank);
    ep->x1 = (size_t)2 * m->FE * m->C;
    ep->x2 = (size_t)m->C * m->FE;
    ep->n1 = (size_t)m->LM * ep->El * ep->x1;
    ep->n = ep->n1 + (size_t)m->LM * ep->El * ep->x2;
    float **bufs[] = {&ep->w, &ep->g, &ep->m, &ep->v};
    for (int i = 0; i < 4; i++) *bufs[i] = ep->ops->alloc(ep->n * sizeof(float)); /* zeroed */
    ep->n_slots = m->L;
    ep->slots = tsr_calloc((size_t)m->L, sizeof *ep->slots);
    for (int s = 0; s < m->L; s++) {
        ep_slot *q = &ep->slots[s];
        q->allo = tsr_malloc((size_t)EP * (size_t)(m->E + 1) * sizeof(int32_t));
        q->offs_local = tsr_malloc((size_t)(ep->El + 1) * sizeof(int32_t));
        size_t **c[] = {&q->sc, &q->sd, &q->rc, &q->rd};
        for (int i = 0; i < 4; i++) *c[i] = tsr_malloc((size_t)EP * sizeof(size_t));
    }
    m->ep = ep;
}

void ep_free(tsr_ep *ep) {
    if (!ep->slots) return;
    for (int s = 0; s < ep->n_slots; s++) {
        ep_slot *q = &ep->slots[s];
        free(q->allo), free(q->offs_local), free(q->sc), free(q->sd), free(q->rc), free(q->rd);
        float *bufs[] = {q->xr, q->h, q->hg};
        for (int i = 0; i < 3; i++)
            if (bufs[i]) ep->ops->free(bufs[i]);
    }
    free(ep->slots);
    float *own[] = {ep->scratch[0], ep->scratch[1], ep->scratch[2], ep->scratch[3],
                    ep->w, ep->g, ep->m, ep->v, ep->full};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (own[i]) ep->ops->free(own[i]);
    dist_group_free(ep->group);
    dist_group_free(ep->edp);
    memset(ep, 0, sizeof *ep);
}

/* store offset of (layer slot s, local expert el) in expw1 (which 0) or expw2 (1) */
static size_t local_at(const tsr_ep *ep, int which, int s, int el) {
    size_t x = which ? ep->x2 : ep->x1;
    return (which ? ep->n1 : 0) + ((size_t)s * ep->El + (size_t)el) * x;
}

void ep_init_weights(tsr_ep *ep, const tsr_model *m, uint64_t seed) {
    for (int which = 0; which < 2; which++) {
        tsr_param_id id = which ? TSR_P_EXPW2 : TSR_P_EXPW1;
        size_t x = which ? ep->x2 : ep->x1;
        for (int s = 0; s < ep->LM; s++)
            for (int el = 0; el < ep->El; el++) {
                float *w = ep->w + local_at(ep, which, s, el);
                size_t k0 = ((size_t)s * ep->E + (size_t)(ep->e0 + el)) * x; /* global element */
                for (size_t k = 0; k < x; k++) w[k] = model_init_weight(m, id, seed, k0 + k);
            }
    }
}

void ep_from_full(tsr_ep *ep, const float *w1, const float *w2) {
    for (int which = 0; which < 2; which++) {
        size_t x = which ? ep->x2 : ep->x1;
        for (int s = 0; s < ep->LM; s++)
            memcpy(ep->w + local_at(ep, which, s, 0),
                   (which ? w2 : w1) + ((size_t)s * ep->E + (size_t)ep->e0) * x,
                   (size_t)ep->El * x * sizeof(float));
    }
}

int ep_exchanging(const tsr_ep *ep) { return ep->full == NULL; }

void ep_unit(tsr_ep *ep, const tsr_model *m, int u, int backward, const void **w, float **g) {
    if (u < 1) return;
    int s = model_layer_slot(m, TSR_P_EXPW1, u - 1);
    if (s < 0) return;
    if (ep->full) { /* every expert: [expw1 (LM, E, ..) | expw2 (LM, E, ..)] */
        size_t n1 = (size_t)ep->LM * ep->E * ep->x1;
        w[TSR_P_EXPW1] = ep->full + (size_t)s * ep->E * ep->x1;
        w[TSR_P_EXPW2] = ep->full + n1 + (size_t)s * ep->E * ep->x2;
        return; /* (no gradients: evaluation only) */
    }
    w[TSR_P_EXPW1] = ep->w + local_at(ep, 0, s, 0);
    w[TSR_P_EXPW2] = ep->w + local_at(ep, 1, s, 0);
    if (backward) {
        g[TSR_P_EXPW1] = ep->g + local_at(ep, 0, s, 0);
        g[TSR_P_EXPW2] = ep->g + local_at(ep, 1, s, 0);
    }
}

/* ---- the exchange ------------------------------------------------------------------------- */

/* rows source q routed to local expert el (the slot's allgathered offsets) */
static int32_t rows_from(const tsr_ep *ep, const ep_slot *q, int src, int el) {
    const int32_t *o = q->allo + (size_t)src * (size_t)(ep->E + 1);
    return o[ep->e0 + el + 1] - o[ep->e0 + el];
}

/* The slot's plan from this rank's offsets: what goes where, what comes from where. */
static void plan_slot(tsr_ep *ep, ep_slot *q, const int32_t *offs) {
    const int P = ep->EP, El = ep->El, C = ep->C;
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
    if (q->R > q->cap || !q->xr) {
        size_t R = q->R, cap = 0;
        grow(ep, &q->xr, &cap, R * C);
        cap = 0, grow(ep, &q->h, &cap, R * 2 * (size_t)ep->FE);
        cap = 0, grow(ep, &q->hg, &cap, R * (size_t)ep->FE);
        q->cap = R;
    }
}

/* stage (rows by source rank, each source's by local expert) <-> by local expert, then source */
static void reorder(const tsr_ep *ep, const ep_slot *q, const float *from, float *to,
                    int to_expert_major) {
    const int P = ep->EP, El = ep->El;
    const size_t C = (size_t)ep->C;
    for (int p = 0; p < P; p++) {
        size_t src_at = q->rd[p] / C; /* this source's first row in the stage */
        for (int el = 0; el < El; el++) {
            size_t n = (size_t)rows_from(ep, q, p, el);
            size_t dst_at = (size_t)q->offs_local[el];
            for (int pp = 0; pp < p; pp++) dst_at += (size_t)rows_from(ep, q, pp, el);
            const float *a = to_expert_major ? from + src_at * C : from + dst_at * C;
            float *b = to_expert_major ? to + dst_at * C : to + src_at * C;
            memcpy(b, a, n * C * sizeof(float));
            src_at += n;
        }
    }
}

/* the rows of `mine` (NK, C: by expert, so by owner) to their owners, by local expert then
 * source into out (R, C) */
static void to_owners(tsr_ep *ep, const ep_slot *q, const float *mine, float *out) {
    float *stage = scratch(ep, SC_STAGE, q->R * (size_t)ep->C);
    dist_group_alltoallv_f32(ep->group, mine, q->sc, q->sd, stage, q->rc, q->rd);
    for (int p = 0; p < ep->EP; p++)
        if (p != ep->j) ep->sent_bytes += q->sc[p] * sizeof(float);
    reorder(ep, q, stage, out, 1);
}

/* the reverse: rows (R, C) by local expert then source, back to their sources into out (NK, C) */
static void from_owners(tsr_ep *ep, const ep_slot *q, const float *rows, float *out) {
    float *stage = scratch(ep, SC_STAGE, q->R * (size_t)ep->C);
    reorder(ep, q, rows, stage, 0);
    dist_group_alltoallv_f32(ep->group, stage, q->rc, q->rd, out, q->sc, q->sd);
    for (int p = 0; p < ep->EP; p++)
        if (p != ep->j) ep->sent_bytes += q->rc[p] * sizeof(float);
}

void ep_forward(tsr_ep *ep, const tsr_backend *be, int slot, const float *xg,
                const int32_t *offs, const float *w1, const float *w2, float *y, int NK) {
    (void)NK;
    ep_slot *q = &ep->slots[slot];
    const int C = ep->C, FE = ep->FE;
    plan_slot(ep, q, offs);
    to_owners(ep, q, xg, q->xr);
    const int rows = (int)q->R;
    float *yr = scratch(ep, SC_Y, q->R * (size_t)C);
    be->moe_matmul_forward(be, q->h, q->xr, w1, q->offs_local, ep->El, rows, C, 2 * FE);
    be->swiglu_forward(be, q->hg, q->h, rows, FE);
    be->moe_matmul_forward(be, yr, q->hg, w2, q->offs_local, ep->El, rows, FE, C);
    from_owners(ep, q, yr, y);
}

void ep_backward(tsr_ep *ep, const tsr_backend *be, int slot, float *dxy, const float *w1,
                 const float *w2, float *g1, float *g2, int NK) {
    (void)NK;
    ep_slot *q = &ep->slots[slot];
    const int C = ep->C, FE = ep->FE, rows = (int)q->R;
    const size_t R = q->R;
    float *dyr = scratch(ep, SC_Y, R * (size_t)C);
    to_owners(ep, q, dxy, dyr);
    float *dhg = scratch(ep, SC_DHG, R * (size_t)FE), *dh = scratch(ep, SC_DH, R * 2 * (size_t)FE);
    memset(dhg, 0, R * (size_t)FE * sizeof(float));
    be->moe_matmul_backward(be, dhg, g2, dyr, q->hg, w2, q->offs_local, ep->El, rows, FE, C);
    memset(dh, 0, R * 2 * (size_t)FE * sizeof(float));
    be->swiglu_backward(be, dh, q->h, dhg, rows, FE);
    memset(dyr, 0, R * (size_t)C * sizeof(float)); /* dy is used up: it now takes d(xr) */
    be->moe_matmul_backward(be, dyr, g1, dh, q->xr, w1, q->offs_local, ep->El, rows, C, 2 * FE);
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
size_t ep_part_floats(const tsr_ep *ep) { return ep->n; }

void ep_part_range(const tsr_ep *ep, int which, uint64_t *lo, uint64_t *hi) {
    size_t len = which ? ep->n - ep->n1 : ep->n1;
    *lo = (uint64_t)ep->j * len;
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
    float *stage = tsr_malloc((size_t)ep->E * (ep->x1 > ep->x2 ? ep->x1 : ep->x2) * sizeof(float));
    for (int which = 0; which < 2; which++) {
        const size_t x = which ? ep->x2 : ep->x1, base = which ? ep->n1 : 0;
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
                dist_group_alltoallv_f32(ep->group, stage, sc, sd, dst, rc, rd);
                continue;
            }
            dist_group_alltoallv_f32(ep->group, src, sc, sd, stage, rc, rd);
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

void ep_to_part(tsr_ep *ep, const float *store, float *part) { part_exchange(ep, store, part, 1); }

void ep_from_part(tsr_ep *ep, const float *part, float *store) {
    part_exchange(ep, part, store, 0);
}

void ep_bcast(tsr_ep *ep, float *store) {
    if (dist_group_size(ep->edp) > 1) dist_group_bcast_f32(ep->edp, store, ep->n, 0);
}
