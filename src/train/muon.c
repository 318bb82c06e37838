/* muon.c — the Muon optimizer: the matrices, the Newton-Schulz iteration, the update under each
 * sharding mode (muon.h, docs/training.md "Muon"). */
#include "train/muon.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* the backend's zeroed buffer of n floats (at least one) */
static float *grab(const tsr_ops *ops, size_t n) {
    float *p = ops->alloc((n ? n : 1) * sizeof(float));
    ops->zero(p, (n ? n : 1) * sizeof(float));
    return p;
}

void muon_init(tsr_muon *mu, const tsr_model *m, const tsr_optim_config *o, tsr_fsdp *f,
               const tsr_ops *ops) {
    memset(mu, 0, sizeof *mu);
    mu->o = *o;
    mu->on = o->name == TSR_OPTIM_MUON;
    if (!mu->on) return;
    muon_plan_init(&mu->p, m, o);
    mu->ops = ops;
    float **it[] = {&mu->u, &mu->x, &mu->y, &mu->a, &mu->aa};
    for (int i = 0; i < 5; i++) *it[i] = grab(ops, i < 3 ? mu->p.big : mu->p.sq);
    if (!f) return;
    mu->f = f;
    muon_plan_shards(&mu->p, f);
    mu->owned = grab(ops, mu->p.owned_n);
    mu->sbuf = grab(ops, mu->p.send_n);
    mu->rbuf = grab(ops, mu->p.recv_n);
}

size_t muon_host_bytes(const tsr_model *m, const tsr_optim_config *o, int G) {
    muon_mem mm;
    muon_plan_mem(m, o, G, &mm);
    return (3 * mm.big + 2 * mm.sq + mm.owned + mm.send + mm.recv) * sizeof(float);
}

void muon_free(tsr_muon *mu) {
    float *bufs[] = {mu->u, mu->x, mu->y, mu->a, mu->aa, mu->owned, mu->sbuf, mu->rbuf};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) mu->ops->free(bufs[i]);
    muon_plan_free(&mu->p);
    memset(mu, 0, sizeof *mu);
}

int muon_tensor(const tsr_muon *mu, int id) { return mu->on && model_muon_tensor(id); }

void muon_partition(const tsr_muon *mu, size_t n, int W, size_t *displs, size_t *counts) {
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

void muon_orthogonalize(tsr_muon *mu, const tsr_ops *ops, float *u, int rows, int cols) {
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
        muon_orthogonalize(mu, ops, mu->u, q->rows, q->cols);
        apply_step(&mu->o, params + q->flat, mu->u, len, lr, q->scale);
    }
}

void muon_flat_update(tsr_muon *mu, const tsr_ops *ops, float *params, const float *g, float *mom,
                      size_t lo, size_t hi, double lr, float gscale) {
    update_matrices(mu, ops, mu->p.mx, mu->p.n, params, g, mom, lo, hi, lr, gscale);
}

void muon_ep_update(tsr_muon *mu, const tsr_ops *ops, float *w, const float *g, float *mom,
                    double lr, float gscale) {
    update_matrices(mu, ops, mu->p.ep, mu->p.n_ep, w, g, mom, 0, SIZE_MAX, lr, gscale);
}

/* ---- zero3 / hsdp ---- */

static void host_copy(void *ctx, float *dst, const float *src, size_t n) {
    (void)ctx;
    memcpy(dst, src, n * sizeof(float));
}

void muon_fsdp_update(tsr_muon *mu, const tsr_ops *ops, float *mom, double lr, float gscale) {
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
            muon_orthogonalize(mu, ops, mu->owned + p->owned_at[k], p->mx[k].rows, p->mx[k].cols);
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

void muon_report(const tsr_muon *mu, const gpu_train_ctx *gpu, int64_t steps, int world) {
    const int G = gpu ? gpu->muon_G : mu->f ? mu->p.G : 0;
    if (G == 0) return; /* (no exchange: ddp, the CPU's zero1, or not Muon) */
    int64_t sent = (int64_t)(gpu ? gpu->muon_sent : mu->sent_bytes);
    const uint64_t formula = gpu ? gpu->muon_step_bytes : muon_plan_step_bytes(&mu->p);
    dist_allreduce_sum_i64(&sent, 1);
    if (dist_world_rank() == 0)
        printf("muon exchange: %lld bytes sent between ranks in %lld steps (all %d ranks; the "
               "formula: %llu per step and sharding group, %d groups)\n", (long long)sent,
               (long long)steps, world, (unsigned long long)formula, world / G);
}
