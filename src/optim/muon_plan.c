/* muon_plan.c — the Muon matrices of a model and their owners under sharding (muon_plan.h). */
#include "optim/muon_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* The hidden matrices, in tensor id (= flat) order. */
static const tsr_param_id muon_ids[] = {TSR_P_QKVW,    TSR_P_ATTPROJW, TSR_P_FCW,
                                        TSR_P_FCPROJW, TSR_P_ROUTERW,  TSR_P_EXPW1,
                                        TSR_P_EXPW2,   TSR_P_SHW1,     TSR_P_SHW2};

/* One slice of tensor id is (rows, cols) from its shape's last two dimensions; its row blocks
 * (the projections stored fused) into split: q, k, v of qkvw; gate, up of SwiGLU's fcw, expw1,
 * shw1; else the slice itself. Returns the number of blocks. */
static int row_split(const tsr_model *m, int id, int *rows, int *cols, int split[3]) {
    const tsr_param_info *p = &m->params_info[id];
    *rows = (int)p->shape[p->ndim - 2];
    *cols = (int)p->shape[p->ndim - 1];
    if (id == TSR_P_QKVW) {
        split[0] = m->NH * m->hs, split[1] = split[2] = m->KVH * m->hs;
        return 3;
    }
    int halves = id == TSR_P_EXPW1 || id == TSR_P_SHW1 ||
                 (id == TSR_P_FCW && config_mlp_gated(&m->cfg));
    split[0] = split[1] = halves ? *rows / 2 : *rows;
    return halves ? 2 : 1;
}

static float update_scale(const tsr_optim_config *o, int rows, int cols) {
    double big = rows > cols ? rows : cols;
    if (o->muon.scale == TSR_MUON_SCALE_RMS) return (float)(o->muon.rms * sqrt(big));
    return (float)sqrt(rows > cols ? (double)rows / cols : 1.0);
}

/* Tensor id's matrices, `slices` slices from offset at, into out + n (when not NULL); returns
 * the new count. */
static int add_matrices(const tsr_model *m, const tsr_optim_config *o, int id, size_t slices,
                        size_t at, muon_matrix *out, int n) {
    int rows, cols, split[3];
    const int nb = row_split(m, id, &rows, &cols, split);
    for (size_t s = 0; s < slices; s++)
        for (int b = 0; b < nb; b++) {
            if (out) out[n] = (muon_matrix){id, at, split[b], cols, update_scale(o, split[b], cols),
                                            0};
            at += (size_t)split[b] * (size_t)cols;
            n++;
        }
    return n;
}

/* The flat layout's matrices (ep = 0; the expert store's tensors left out), or the experts'
 * store's (ep = 1: per MoE slot, this rank's E / EP experts' expw1, then all slots' expw2). */
static int list_matrices(const tsr_model *m, const tsr_optim_config *o, int ep, muon_matrix *out) {
    int n = 0;
    if (ep) {
        const size_t El = m->EP > 1 ? (size_t)(m->E / m->EP) : 0, slices = (size_t)m->LM * El;
        const size_t n1 = slices * 2 * (size_t)m->FE * (size_t)m->C;
        n = add_matrices(m, o, TSR_P_EXPW1, slices, 0, out, 0);
        return add_matrices(m, o, TSR_P_EXPW2, slices, n1, out, n);
    }
    for (size_t k = 0; k < sizeof muon_ids / sizeof *muon_ids; k++) {
        const tsr_param_info *p = &m->params_info[muon_ids[k]];
        if (!p->numel || p->ep) continue;
        int rows, cols, split[3];
        row_split(m, muon_ids[k], &rows, &cols, split);
        n = add_matrices(m, o, muon_ids[k], p->numel / ((size_t)rows * (size_t)cols), p->offset,
                         out, n);
    }
    return n;
}

int muon_plan_tensor(int id) {
    for (size_t k = 0; k < sizeof muon_ids / sizeof *muon_ids; k++)
        if ((int)muon_ids[k] == id) return 1;
    return 0;
}

static void largest(muon_plan *p, const muon_matrix *mx, int n) {
    for (int i = 0; i < n; i++) {
        size_t r = (size_t)mx[i].rows, c = (size_t)mx[i].cols, s = r < c ? r : c;
        if (r * c > p->big) p->big = r * c;
        if (s * s > p->sq) p->sq = s * s;
    }
}

void muon_plan_init(muon_plan *p, const tsr_model *m, const tsr_optim_config *o) {
    memset(p, 0, sizeof *p);
    p->n = list_matrices(m, o, 0, NULL);
    p->mx = tsr_malloc((size_t)(p->n ? p->n : 1) * sizeof *p->mx);
    list_matrices(m, o, 0, p->mx);
    p->n_ep = list_matrices(m, o, 1, NULL);
    p->ep = tsr_malloc((size_t)(p->n_ep ? p->n_ep : 1) * sizeof *p->ep);
    list_matrices(m, o, 1, p->ep);
    largest(p, p->mx, p->n);
    largest(p, p->ep, p->n_ep);
}

void muon_plan_free(muon_plan *p) {
    free(p->mx), free(p->ep);
    for (int r = 0; p->segs && r < p->G; r++) free(p->segs[r]);
    free(p->segs), free(p->n_segs), free(p->owned_at);
    free(p->sc), free(p->sd), free(p->rc), free(p->rd);
    memset(p, 0, sizeof *p);
}

int muon_plan_matrix_at(const muon_plan *p, size_t x) {
    int lo = 0, hi = p->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const muon_matrix *q = &p->mx[mid];
        if (x < q->flat) hi = mid - 1;
        else if (x >= q->flat + (size_t)q->rows * (size_t)q->cols) lo = mid + 1;
        else return mid;
    }
    return -1;
}

/* the iteration's cost of a matrix: r c min(r, c) */
static double ns_cost(const muon_matrix *q) {
    double s = q->rows < q->cols ? q->rows : q->cols;
    return (double)q->rows * q->cols * s;
}

typedef struct costed {
    double cost;
    int k;
} costed;

/* costlier first; the lower index first among equal costs */
static int by_cost(const void *a, const void *b) {
    const costed *x = a, *y = b;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    return (x->k > y->k) - (x->k < y->k);
}

/* Owners: matrices by the iteration's cost, largest first, each to the group rank with the least
 * so far (the lower rank on ties): the same on every rank. */
static void assign_owners(muon_plan *p, int G) {
    double *load = tsr_calloc((size_t)G, sizeof(double));
    costed *order = tsr_malloc((size_t)(p->n ? p->n : 1) * sizeof *order);
    for (int k = 0; k < p->n; k++) order[k] = (costed){ns_cost(&p->mx[k]), k};
    qsort(order, (size_t)p->n, sizeof *order, by_cost);
    for (int i = 0; i < p->n; i++) {
        int who = 0;
        for (int r = 1; r < G; r++)
            if (load[r] < load[who]) who = r;
        p->mx[order[i].k].owner = who;
        load[who] += order[i].cost;
    }
    free(load), free(order);
}

/* Group rank r's shard as runs inside the matrices, in shard order (out NULL: count only). */
static int list_segs(const muon_plan *p, const tsr_fsdp *f, int r, muon_seg *out) {
    int n = 0;
    for (int k = 0; k < f->n_pieces[r]; k++) {
        const fsdp_piece *pc = &f->pieces[r][k];
        if (!muon_plan_tensor(pc->id)) continue;
        for (size_t x = pc->flat; x < pc->flat + pc->len;) {
            int mi = muon_plan_matrix_at(p, x);
            if (mi < 0) tsr_die(TSR_EXIT_INTERNAL, "muon: a %s element outside every matrix",
                                f->m->params_info[pc->id].name);
            const muon_matrix *q = &p->mx[mi];
            size_t end = q->flat + (size_t)q->rows * (size_t)q->cols;
            if (end > pc->flat + pc->len) end = pc->flat + pc->len;
            if (out) out[n] = (muon_seg){mi, pc->shard + (x - pc->flat), x - q->flat, end - x};
            n++;
            x = end;
        }
    }
    return n;
}

/* group rank `me`'s exchange: its owned matrices' places, what it sends each owner and
 * receives from each rank */
static void plan_exchange(muon_plan *p) {
    const int G = p->G, me = p->me;
    p->owned_at = tsr_malloc((size_t)(p->n ? p->n : 1) * sizeof(size_t));
    for (int k = 0; k < p->n; k++) {
        p->owned_at[k] = p->mx[k].owner == me ? p->owned_n : SIZE_MAX;
        if (p->mx[k].owner == me) p->owned_n += (size_t)p->mx[k].rows * (size_t)p->mx[k].cols;
    }
    size_t *cnt[4];
    for (int i = 0; i < 4; i++) cnt[i] = tsr_calloc((size_t)G, sizeof(size_t));
    p->sc = cnt[0], p->sd = cnt[1], p->rc = cnt[2], p->rd = cnt[3];
    for (int s = 0; s < p->n_segs[me]; s++) /* what I send each owner */
        p->sc[p->mx[p->segs[me][s].mx].owner] += p->segs[me][s].len;
    for (int x = 0; x < G; x++) /* what each rank sends me */
        for (int s = 0; s < p->n_segs[x]; s++)
            if (p->mx[p->segs[x][s].mx].owner == me) p->rc[x] += p->segs[x][s].len;
    for (int x = 0; x < G; x++) {
        p->sd[x] = p->send_n, p->rd[x] = p->recv_n;
        p->send_n += p->sc[x], p->recv_n += p->rc[x];
    }
}

void muon_plan_shards(muon_plan *p, const tsr_fsdp *f) {
    p->G = f->G;
    p->me = f->grank;
    assign_owners(p, p->G);
    p->n_segs = tsr_malloc((size_t)p->G * sizeof(int));
    p->segs = tsr_malloc((size_t)p->G * sizeof(muon_seg *));
    for (int r = 0; r < p->G; r++) {
        p->n_segs[r] = list_segs(p, f, r, NULL);
        p->segs[r] = tsr_malloc((size_t)(p->n_segs[r] ? p->n_segs[r] : 1) * sizeof(muon_seg));
        list_segs(p, f, r, p->segs[r]);
    }
    plan_exchange(p);
}

void muon_plan_owned_runs(const muon_plan *p, int x, float *owned, float *packed, int to_owned,
                          muon_copy_fn copy, void *ctx) {
    size_t at = 0;
    for (int s = 0; s < p->n_segs[x]; s++) {
        const muon_seg *sg = &p->segs[x][s];
        if (p->mx[sg->mx].owner != p->me) continue;
        float *o = owned + p->owned_at[sg->mx] + sg->at;
        if (to_owned) copy(ctx, o, packed + at, sg->len);
        else copy(ctx, packed + at, o, sg->len);
        at += sg->len;
    }
}

uint64_t muon_plan_step_bytes(const muon_plan *p) {
    uint64_t floats = 0;
    for (int k = 0; k < p->n; k++) {
        const muon_matrix *q = &p->mx[k];
        uint64_t own = 0;
        for (int s = 0; s < p->n_segs[q->owner]; s++)
            if (p->segs[q->owner][s].mx == k) own += p->segs[q->owner][s].len;
        floats += (uint64_t)q->rows * (uint64_t)q->cols - own;
    }
    return 2 * floats * sizeof(float);
}

/* mm's exchange figures: of the group rank whose owned, sent and received floats add up to the
 * most (one pass over every rank's runs) */
static void exchange_mem(const muon_plan *p, muon_mem *mm) {
    size_t *own = tsr_calloc((size_t)p->G, sizeof(size_t)), *snd = tsr_calloc((size_t)p->G,
                                                                              sizeof(size_t));
    size_t *rcv = tsr_calloc((size_t)p->G, sizeof(size_t));
    for (int k = 0; k < p->n; k++) own[p->mx[k].owner] += (size_t)p->mx[k].rows * p->mx[k].cols;
    for (int r = 0; r < p->G; r++)
        for (int s = 0; s < p->n_segs[r]; s++) {
            snd[r] += p->segs[r][s].len;
            rcv[p->mx[p->segs[r][s].mx].owner] += p->segs[r][s].len;
        }
    for (int r = 0; r < p->G; r++)
        if (own[r] + snd[r] + rcv[r] > mm->owned + mm->send + mm->recv)
            mm->owned = own[r], mm->send = snd[r], mm->recv = rcv[r];
    free(own), free(snd), free(rcv);
}

void muon_plan_mem(const tsr_model *m, const tsr_optim_config *o, int G, muon_mem *mm) {
    memset(mm, 0, sizeof *mm);
    if (o->name != TSR_OPTIM_MUON) return;
    muon_plan p;
    muon_plan_init(&p, m, o);
    mm->big = p.big, mm->sq = p.sq;
    if (m->global) { /* a split model orthogonalises the whole matrices */
        muon_plan pg;
        muon_plan_init(&pg, m->global, o);
        mm->big = mm->whole = pg.big, mm->sq = pg.sq;
        muon_plan_free(&pg);
    }
    if (G > 0) {
        tsr_fsdp f;
        fsdp_layout(&f, m, G, 0);
        muon_plan_shards(&p, &f);
        exchange_mem(&p, mm);
        fsdp_free(&f);
    }
    muon_plan_free(&p);
}

double muon_lr(const tsr_optim_config *o, double lr) {
    return o->muon.lr > 0 ? lr * (o->muon.lr / o->lr) : lr;
}
