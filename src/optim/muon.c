/* muon.c — the Muon optimizer: the matrices, the Newton-Schulz iteration, the update under each
 * sharding mode (muon.h, docs/training.md "Muon"), and its slot (optim.h optim_muon). */
#include "optim/muon.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist/dist.h"
#include "model/model_tp.h"
#include "optim/adamw.h"
#include "optim/optim.h"

/* the backend's zeroed buffer of n floats (at least one) */
static float *grab(const tsr_ops *ops, size_t n) {
    float *p = ops->alloc((n ? n : 1) * sizeof(float));
    ops->zero(p, (n ? n : 1) * sizeof(float));
    return p;
}

/* tensor parallelism: global flat element g of the whole model's matrix holding the split
 * matrix q's first element, by the pieces of its range (the first found) */
typedef struct first_piece {
    size_t g;
    int found;
} first_piece;

static void note_first(void *ctx, size_t l, size_t g, size_t n, int counted) {
    first_piece *fp = ctx;
    (void)l, (void)n, (void)counted;
    if (!fp->found) fp->g = g, fp->found = 1;
}

/* tensor parallelism: the whole matrix (of the global plan) a split matrix q is a slice of */
static const muon_matrix *whole_of(const tsr_muon *mu, const muon_matrix *q) {
    first_piece fp = {0, 0};
    const size_t lo = q->flat;
    tp_pieces(mu->m->tp, mu->m, lo, lo + (size_t)q->rows * (size_t)q->cols, note_first, &fp);
    const int k = fp.found ? muon_plan_matrix_at(&mu->pg, fp.g) : -1;
    if (k < 0)
        tsr_die(TSR_EXIT_INTERNAL, "muon: the split matrix at %zu (%d x %d) is in no whole "
                "matrix", q->flat, q->rows, q->cols);
    return &mu->pg.mx[k];
}

/* The plan of model m's Muon matrices for optimizer o and, with f (zero3 / hsdp), their owners
 * over f's group; the iteration's scratch and the exchange's buffers from ops. A split model
 * (tensor parallelism): the whole model's plan beside, each split matrix taking its whole
 * matrix's scale, the iteration's scratch the whole matrices' size. */
static void muon_init(tsr_muon *mu, const tsr_model *m, const tsr_optim_config *o, tsr_fsdp *f,
                      const tsr_ops *ops) {
    memset(mu, 0, sizeof *mu);
    mu->o = *o;
    mu->on = o->name == TSR_OPTIM_MUON;
    if (!mu->on) return;
    muon_plan_init(&mu->p, m, o);
    mu->ops = ops;
    mu->m = m;
    size_t big = mu->p.big, sq = mu->p.sq;
    if (m->tp) {
        muon_plan_init(&mu->pg, m->global, o);
        for (int k = 0; k < mu->p.n; k++) mu->p.mx[k].scale = whole_of(mu, &mu->p.mx[k])->scale;
        big = mu->pg.big, sq = mu->pg.sq;
        mu->whole = grab(ops, big);
    }
    float **it[] = {&mu->u, &mu->x, &mu->y, &mu->a, &mu->aa};
    for (int i = 0; i < 5; i++) *it[i] = grab(ops, i < 3 ? big : sq);
    if (!f) return;
    mu->f = f;
    muon_plan_shards(&mu->p, f);
    mu->owned = grab(ops, mu->p.owned_n);
    mu->sbuf = grab(ops, mu->p.send_n);
    mu->rbuf = grab(ops, mu->p.recv_n);
}

/* The bytes muon_init allocates for model m under o on one rank (the memory plan; nothing
 * allocated): the iteration's five buffers and, with groups of G > 0 (zero3 / hsdp), the owned
 * matrices and the exchange's two (of the rank needing the most). 0 when o is not Muon. */
static size_t muon_host_bytes(const tsr_model *m, const tsr_optim_config *o, int G) {
    muon_mem mm;
    muon_plan_mem(m, o, G, &mm);
    return (3 * mm.big + 2 * mm.sq + mm.owned + mm.send + mm.recv + mm.whole) * sizeof(float);
}

static void muon_free(tsr_muon *mu) {
    float *bufs[] = {mu->u, mu->x, mu->y, mu->a, mu->aa, mu->owned, mu->sbuf, mu->rbuf, mu->whole};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) mu->ops->free(bufs[i]);
    muon_plan_free(&mu->p);
    if (mu->m && mu->m->tp) muon_plan_free(&mu->pg);
    memset(mu, 0, sizeof *mu);
}

/* Whether tensor id is updated by Muon (0 when Muon is off). */
static int muon_tensor(const tsr_muon *mu, int id) { return mu->on && muon_plan_tensor(id); }

/* The zero1 partition of the flat layout (n floats) over W ranks: the trainer's cuts (16-float
 * aligned, n r / W) moved to the nearer end of a matrix they fall inside, so each matrix lies in
 * one rank's part. displs, counts (W). */
static void muon_partition(const tsr_muon *mu, size_t n, int W, size_t *displs, size_t *counts) {
    size_t prev = 0;
    for (int r = 0; r < W; r++) {
        size_t cut = r + 1 == W ? n : n * (size_t)(r + 1) / (size_t)W / 16 * 16;
        int k = muon_plan_matrix_at(&mu->p, cut);
        const muon_matrix *q = k >= 0 ? &mu->p.mx[k] : NULL;
        if (q && cut != q->flat) { /* inside: to the nearer end */
            size_t a = q->flat, b = a + (size_t)q->rows * (size_t)q->cols;
            cut = cut - a <= b - cut ? a : b;
        }
        if (cut < prev) cut = prev;
        displs[r] = prev;
        counts[r] = cut - prev;
        prev = cut;
    }
}

/* dst (c, r) = src (r, c) transposed */
static void transpose(float *dst, const float *src, int r, int c) {
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) dst[(size_t)j * r + i] = src[(size_t)i * c + j];
}

/* O = NS(u) in place: u (rows, cols) holds the orthogonalised matrix after; fp32 products on
 * ops. */
static void muon_orthogonalize(tsr_muon *mu, const tsr_ops *ops, float *u, int rows, int cols) {
    const int tr = rows > cols, r = tr ? cols : rows, c = tr ? rows : cols;
    const size_t n = (size_t)r * (size_t)c, rr = (size_t)r * (size_t)r;
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (double)u[i] * u[i];
    const float inv = (float)(1.0 / (sqrt(ss) + MUON_NS_EPS));
    float *x = mu->x, *y = mu->y;
    if (tr) transpose(x, u, rows, cols);
    else memcpy(x, u, n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] *= inv;
    for (int k = 0; k < mu->o.muon.ns_steps; k++) {
        ops->matmul_forward(mu->a, x, x, NULL, r, c, r);         /* A = X X^T */
        ops->matmul_forward(mu->aa, mu->a, mu->a, NULL, r, r, r); /* A A^T = A A */
        for (size_t i = 0; i < rr; i++) mu->aa[i] = MUON_NS_B * mu->a[i] + MUON_NS_C * mu->aa[i];
        for (size_t i = 0; i < n; i++) y[i] = MUON_NS_A * x[i];
        ops->matmul_backward(y, NULL, NULL, mu->aa, NULL, x, r, c, r); /* Y = a X + B X */
        float *t = x;
        x = y, y = t;
    }
    if (tr) transpose(u, x, cols, rows);
    else memcpy(u, x, n * sizeof(float));
}

/* a split matrix's pieces into its whole matrix (fill: the ones this rank counts) or back */
/* O = NS(u) of the matrix q (u: its elements): under tensor parallelism the whole matrix's, its
 * slices all-reduced over the tensor group (each element from the one rank counting it: the sum
 * is the matrix), orthogonalised on every rank of the group (the same bits), u its slice after.
 * Collective over the tensor group: its ranks orthogonalise the same matrices in the same order
 * (the same split layout and parts). */
static void orthogonalize_at(tsr_muon *mu, const tsr_ops *ops, const muon_matrix *q, float *u) {
    const tsr_model *m = mu->m;
    if (!m->tp) {
        muon_orthogonalize(mu, ops, u, q->rows, q->cols);
        return;
    }
    const muon_matrix *w = whole_of(mu, q);
    const size_t n = (size_t)w->rows * (size_t)w->cols, lo = q->flat;
    const size_t hi = lo + (size_t)q->rows * (size_t)q->cols;
    tp_whole(m->tp, m, lo, hi, u, mu->whole, w->flat, n);
    muon_orthogonalize(mu, ops, mu->whole, w->rows, w->cols);
    tp_take(m->tp, m, lo, hi, mu->whole, w->flat, u);
}

/* buf = momentum buf + g gscale; u = nesterov ? g gscale + momentum buf : buf (n elements) */
static void momentum_step(const tsr_optim_config *o, float *buf, const float *g, float *u,
                          size_t n, float gscale) {
    const float beta = (float)o->muon.momentum;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        buf[i] = beta * buf[i] + gi;
        u[i] = o->muon.nesterov ? gi + beta * buf[i] : buf[i];
    }
}

/* p = p (1 - lr wd) - lr scale O (n elements) */
static void apply_step(const tsr_optim_config *o, float *p, const float *O, size_t n, double lr,
                       float scale) {
    const float decay = 1.0f - (float)lr * (float)o->muon.weight_decay;
    const float step = (float)(lr * (double)scale);
    for (size_t i = 0; i < n; i++) p[i] = p[i] * decay - step * O[i];
}

/* Muon on the matrices mx[0..n) that lie inside [lo, hi) of params' layout (each wholly inside),
 * g and mom from lo */
static void update_matrices(tsr_muon *mu, const tsr_ops *ops, const muon_matrix *mx, int n,
                            float *params, const float *g, float *mom, size_t lo, size_t hi,
                            double lr, float gscale) {
    for (int k = 0; k < n; k++) {
        const muon_matrix *q = &mx[k];
        const size_t len = (size_t)q->rows * (size_t)q->cols;
        if (q->flat < lo || q->flat >= hi) continue;
        if (q->flat + len > hi)
            tsr_die(TSR_EXIT_INTERNAL, "muon: the matrix at flat offset %zu (%d x %d) crosses the "
                    "owned part's end %zu (the zero1 partition must cut between matrices)",
                    q->flat, q->rows, q->cols, hi);
        momentum_step(&mu->o, mom + (q->flat - lo), g + (q->flat - lo), mu->u, len, gscale);
        orthogonalize_at(mu, ops, q, mu->u);
        apply_step(&mu->o, params + q->flat, mu->u, len, lr, q->scale);
    }
}

/* ddp, zero1: Muon on every matrix inside [lo, hi) of the flat layout (each wholly inside: the
 * partition), params the whole flat buffer, g and mom from lo. lr: Muon's, scheduled. */
static void muon_flat_update(tsr_muon *mu, const tsr_ops *ops, float *params, const float *g,
                             float *mom, size_t lo, size_t hi, double lr, float gscale) {
    update_matrices(mu, ops, mu->p.mx, mu->p.n, params, g, mom, lo, hi, lr, gscale);
}

/* parallel.expert: Muon on every matrix of the experts' store (w, g, mom: model_ep.h's). */
static void muon_ep_update(tsr_muon *mu, const tsr_ops *ops, float *w, const float *g,
                           float *mom, double lr, float gscale) {
    update_matrices(mu, ops, mu->p.ep, mu->p.n_ep, w, g, mom, 0, SIZE_MAX, lr, gscale);
}

/* ---- zero3 / hsdp ---- */

static void host_copy(void *ctx, float *dst, const float *src, size_t n) {
    (void)ctx;
    memcpy(dst, src, n * sizeof(float));
}

/* zero3 / hsdp: Muon on the shard (f->params, f->grads, mom in shard order): the exchange
 * described in muon.h. Collective over the group. */
static void muon_fsdp_update(tsr_muon *mu, const tsr_ops *ops, float *mom, double lr,
                             float gscale) {
    const muon_plan *p = &mu->p;
    tsr_fsdp *f = mu->f;
    const int me = p->me, G = p->G, ns = p->n_segs[me];
    const muon_seg *mine = p->segs[me];
    size_t *cur = tsr_malloc((size_t)G * sizeof(size_t));
    memcpy(cur, p->sd, (size_t)G * sizeof(size_t));
    for (int s = 0; s < ns; s++) { /* u of my runs, packed by owner */
        int x = p->mx[mine[s].mx].owner;
        momentum_step(&mu->o, mom + mine[s].shard, f->grads + mine[s].shard, mu->sbuf + cur[x],
                      mine[s].len, gscale);
        cur[x] += mine[s].len;
    }
    dist_group_alltoallv(f->group, mu->sbuf, p->sc, p->sd, mu->rbuf, p->rc, p->rd, sizeof(float));
    for (int x = 0; x < G; x++)
        muon_plan_owned_runs(p, x, mu->owned, mu->rbuf + p->rd[x], 1, host_copy, NULL);
    for (int k = 0; k < p->n; k++)
        if (p->owned_at[k] != SIZE_MAX)
            orthogonalize_at(mu, ops, &p->mx[k], mu->owned + p->owned_at[k]);
    for (int x = 0; x < G; x++)
        muon_plan_owned_runs(p, x, mu->owned, mu->rbuf + p->rd[x], 0, host_copy, NULL);
    dist_group_alltoallv(f->group, mu->rbuf, p->rc, p->rd, mu->sbuf, p->sc, p->sd, sizeof(float));
    memcpy(cur, p->sd, (size_t)G * sizeof(size_t));
    for (int s = 0; s < ns; s++) { /* O of my runs, in the same packing */
        int x = p->mx[mine[s].mx].owner;
        apply_step(&mu->o, f->params + mine[s].shard, mu->sbuf + cur[x], mine[s].len, lr,
                   p->mx[mine[s].mx].scale);
        cur[x] += mine[s].len;
    }
    for (int x = 0; x < G; x++)
        if (x != me) mu->sent_bytes += (uint64_t)(p->sc[x] + p->rc[x]) * sizeof(float);
    free(cur);
}

/* ---- the slot (optim.h) ---- */

static void slot_init(tsr_optim *op, const tsr_model *m) {
    muon_init(&op->muon, m, &op->o, op->f, op->ops);
}

static void slot_free(tsr_optim *op) { muon_free(&op->muon); }

static int is_matrix(const tsr_optim *op, int id) { return muon_tensor(&op->muon, id); }

/* flat and shard parts: AdamW on the other tensors, then Muon on the matrices (ddp: all; zero1:
 * the partition's, cut between matrices; zero3 / hsdp: through the matrices' owners); the
 * experts' store: Muon alone (its tensors are all matrices); LoRA's adapters: AdamW (the config
 * refuses Muon with LoRA) */
static void slot_step(tsr_optim *op, const optim_part *p, double lr, float gscale, int64_t step) {
    tsr_muon *mu = &op->muon;
    switch (p->kind) {
    case OPTIM_PART_FLAT:
        adamw_step_part(op, p, lr, gscale, step, is_matrix);
        muon_flat_update(mu, op->ops, p->w, p->g, p->m, p->lo, p->hi, muon_lr(&op->o, lr), gscale);
        break;
    case OPTIM_PART_SHARD:
        adamw_step_part(op, p, lr, gscale, step, is_matrix);
        muon_fsdp_update(mu, op->ops, p->m, muon_lr(&op->o, lr), gscale);
        break;
    case OPTIM_PART_EXPERTS:
        muon_ep_update(mu, op->ops, p->w, p->g, p->m, muon_lr(&op->o, lr), gscale);
        break;
    default: adamw_step_part(op, p, lr, gscale, step, NULL);
    }
}

static void slot_partition(const tsr_optim *op, size_t n, int W, size_t *displs, size_t *counts) {
    muon_partition(&op->muon, n, W, displs, counts);
}

/* zero3 / hsdp: the exchange's bytes (ddp and zero1 have none on the CPU) */
static optim_traffic slot_traffic(const tsr_optim *op) {
    const tsr_muon *mu = &op->muon;
    if (!mu->f) return (optim_traffic){0, 0, 0};
    return (optim_traffic){mu->p.G, mu->sent_bytes, muon_plan_step_bytes(&mu->p)};
}

/* the matrices' momentum is m; v stays zero over them (AdamW's moments elsewhere) */
static const char *const muon_state[] = {"m", "v"};

const optim_api optim_muon = {
    .name = "muon",
    .init = slot_init,
    .free = slot_free,
    .step = slot_step,
    .partition = slot_partition,
    .scratch_bytes = muon_host_bytes,
    .traffic = slot_traffic,
    .state = muon_state,
    .n_state = 2,
};
