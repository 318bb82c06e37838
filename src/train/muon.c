/* muon.c — the Muon optimizer: the matrices, the Newton-Schulz iteration, the update under each
 * sharding mode (muon.h, docs/training.md "Muon"). */
#include "train/muon.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

void muon_init(tsr_muon *mu, const tsr_model *m, const tsr_optim_config *o) {
    memset(mu, 0, sizeof *mu);
    mu->o = *o;
    mu->on = o->name == TSR_OPTIM_MUON;
    if (!mu->on) return;
    for (int i = 0; i < TSR_P_COUNT; i++)
        mu->tensor[i] = model_muon_tensor(i) && m->params_info[i].numel > 0;
    mu->n = model_muon_matrices(m, o, NULL);
    mu->mx = tsr_malloc((size_t)(mu->n ? mu->n : 1) * sizeof *mu->mx);
    model_muon_matrices(m, o, mu->mx);
    size_t big = 1, sq = 1;
    for (int i = 0; i < mu->n; i++) {
        size_t r = (size_t)mu->mx[i].rows, c = (size_t)mu->mx[i].cols, s = r < c ? r : c;
        if (r * c > big) big = r * c;
        if (s * s > sq) sq = s * s;
    }
    mu->u = tsr_malloc(big * sizeof(float));
    mu->x = tsr_malloc(big * sizeof(float));
    mu->y = tsr_malloc(big * sizeof(float));
    mu->a = tsr_malloc(sq * sizeof(float));
    mu->aa = tsr_malloc(sq * sizeof(float));
}

void muon_free(tsr_muon *mu) {
    free(mu->mx), free(mu->u), free(mu->x), free(mu->y), free(mu->a), free(mu->aa);
    for (int r = 0; mu->segs && r < mu->f->G; r++) free(mu->segs[r]);
    free(mu->segs), free(mu->n_segs), free(mu->owned_at), free(mu->owned);
    free(mu->sc), free(mu->sd), free(mu->rc), free(mu->rd), free(mu->sbuf), free(mu->rbuf);
    memset(mu, 0, sizeof *mu);
}

int muon_tensor(const tsr_muon *mu, int id) { return mu->on && mu->tensor[id]; }

/* The matrix whose elements hold flat offset x, or -1. */
static int matrix_at(const tsr_muon *mu, size_t x) {
    int lo = 0, hi = mu->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const muon_matrix *q = &mu->mx[mid];
        if (x < q->flat) hi = mid - 1;
        else if (x >= q->flat + (size_t)q->rows * (size_t)q->cols) lo = mid + 1;
        else return mid;
    }
    return -1;
}

void muon_partition(const tsr_muon *mu, size_t n, int W, size_t *displs, size_t *counts) {
    size_t prev = 0;
    for (int r = 0; r < W; r++) {
        size_t cut = r + 1 == W ? n : n * (size_t)(r + 1) / (size_t)W / 16 * 16;
        int k = matrix_at(mu, cut);
        if (k >= 0 && cut != mu->mx[k].flat) { /* inside: to the nearer end */
            size_t a = mu->mx[k].flat, b = a + (size_t)mu->mx[k].rows * (size_t)mu->mx[k].cols;
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

void muon_flat_update(tsr_muon *mu, const tsr_ops *ops, float *params, const float *g, float *mom,
                      size_t lo, size_t hi, double lr, float gscale) {
    for (int k = 0; k < mu->n; k++) {
        const muon_matrix *q = &mu->mx[k];
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

/* ---- zero3 / hsdp ---- */

/* Owners: matrices by the iteration's cost (r c min(r, c)), largest first, each to the group rank
 * with the least so far (the lower rank on ties): the same on every rank. */
static void assign_owners(tsr_muon *mu, int G) {
    double *load = tsr_calloc((size_t)G, sizeof(double));
    unsigned char *done = tsr_calloc((size_t)(mu->n ? mu->n : 1), 1);
    for (int step = 0; step < mu->n; step++) {
        int best = -1;
        double bc = -1;
        for (int k = 0; k < mu->n; k++) {
            const muon_matrix *q = &mu->mx[k];
            double s = q->rows < q->cols ? q->rows : q->cols;
            double cost = (double)q->rows * q->cols * s;
            if (!done[k] && cost > bc) bc = cost, best = k;
        }
        int who = 0;
        for (int r = 1; r < G; r++)
            if (load[r] < load[who]) who = r;
        mu->mx[best].owner = who;
        load[who] += bc;
        done[best] = 1;
    }
    free(load), free(done);
}

/* Rank r's shard as runs inside the matrices, in shard order (out NULL: count only). */
static int list_segs(const tsr_muon *mu, const tsr_fsdp *f, int r, muon_seg *out) {
    int n = 0;
    for (int k = 0; k < f->n_pieces[r]; k++) {
        const fsdp_piece *p = &f->pieces[r][k];
        if (!mu->tensor[p->id]) continue;
        for (size_t x = p->flat; x < p->flat + p->len;) {
            int mi = matrix_at(mu, x);
            if (mi < 0) tsr_die(TSR_EXIT_INTERNAL, "muon: a %s element outside every matrix",
                                f->m->params_info[p->id].name);
            const muon_matrix *q = &mu->mx[mi];
            size_t end = q->flat + (size_t)q->rows * (size_t)q->cols;
            if (end > p->flat + p->len) end = p->flat + p->len;
            if (out) out[n] = (muon_seg){mi, p->shard + (x - p->flat), x - q->flat, end - x};
            n++;
            x = end;
        }
    }
    return n;
}

void muon_fsdp_plan(tsr_muon *mu, const tsr_fsdp *f) {
    const int G = f->G;
    mu->f = f;
    assign_owners(mu, G);
    mu->n_segs = tsr_malloc((size_t)G * sizeof(int));
    mu->segs = tsr_malloc((size_t)G * sizeof(muon_seg *));
    for (int r = 0; r < G; r++) {
        mu->n_segs[r] = list_segs(mu, f, r, NULL);
        mu->segs[r] = tsr_malloc((size_t)(mu->n_segs[r] ? mu->n_segs[r] : 1) * sizeof(muon_seg));
        list_segs(mu, f, r, mu->segs[r]);
    }
    mu->owned_at = tsr_malloc((size_t)(mu->n ? mu->n : 1) * sizeof(size_t));
    size_t owned = 0;
    for (int k = 0; k < mu->n; k++) {
        mu->owned_at[k] = mu->mx[k].owner == f->grank ? owned : SIZE_MAX;
        if (mu->mx[k].owner == f->grank) owned += (size_t)mu->mx[k].rows * (size_t)mu->mx[k].cols;
    }
    mu->owned = tsr_malloc((owned ? owned : 1) * sizeof(float));
    size_t *cnt[4];
    for (int i = 0; i < 4; i++) cnt[i] = tsr_calloc((size_t)G, sizeof(size_t));
    mu->sc = cnt[0], mu->sd = cnt[1], mu->rc = cnt[2], mu->rd = cnt[3];
    for (int s = 0; s < mu->n_segs[f->grank]; s++) /* what I send each owner */
        mu->sc[mu->mx[mu->segs[f->grank][s].mx].owner] += mu->segs[f->grank][s].len;
    for (int x = 0; x < G; x++) /* what each rank sends me */
        for (int s = 0; s < mu->n_segs[x]; s++)
            if (mu->mx[mu->segs[x][s].mx].owner == f->grank) mu->rc[x] += mu->segs[x][s].len;
    size_t ts = 0, tr = 0;
    for (int x = 0; x < G; x++) mu->sd[x] = ts, mu->rd[x] = tr, ts += mu->sc[x], tr += mu->rc[x];
    mu->sbuf = tsr_malloc((ts ? ts : 1) * sizeof(float));
    mu->rbuf = tsr_malloc((tr ? tr : 1) * sizeof(float));
}

uint64_t muon_fsdp_step_bytes(const tsr_muon *mu) {
    uint64_t floats = 0;
    for (int k = 0; k < mu->n; k++) {
        const muon_matrix *q = &mu->mx[k];
        uint64_t own = 0;
        for (int s = 0; s < mu->n_segs[q->owner]; s++)
            if (mu->segs[q->owner][s].mx == k) own += mu->segs[q->owner][s].len;
        floats += (uint64_t)q->rows * (uint64_t)q->cols - own;
    }
    return 2 * floats * sizeof(float);
}

/* The group's runs of each owned matrix: from rank x's packed block (to_owned) into `owned`, or
 * from `owned` back into it; both sides walk x's runs in shard order. */
static void owned_runs(tsr_muon *mu, int x, float *packed, int to_owned) {
    const int me = mu->f->grank;
    size_t at = 0;
    for (int s = 0; s < mu->n_segs[x]; s++) {
        const muon_seg *sg = &mu->segs[x][s];
        if (mu->mx[sg->mx].owner != me) continue;
        float *o = mu->owned + mu->owned_at[sg->mx] + sg->at;
        if (to_owned) memcpy(o, packed + at, sg->len * sizeof(float));
        else memcpy(packed + at, o, sg->len * sizeof(float));
        at += sg->len;
    }
}

void muon_fsdp_update(tsr_muon *mu, const tsr_ops *ops, tsr_fsdp *f, float *mom, double lr,
                      float gscale) {
    const int me = f->grank, G = f->G, ns = mu->n_segs[me];
    const muon_seg *mine = mu->segs[me];
    size_t *cur = tsr_malloc((size_t)G * sizeof(size_t));
    memcpy(cur, mu->sd, (size_t)G * sizeof(size_t));
    for (int s = 0; s < ns; s++) { /* u of my runs, packed by owner */
        int x = mu->mx[mine[s].mx].owner;
        momentum_step(&mu->o, mom + mine[s].shard, f->grads + mine[s].shard, mu->sbuf + cur[x],
                      mine[s].len, gscale);
        cur[x] += mine[s].len;
    }
    dist_group_alltoallv(f->group, mu->sbuf, mu->sc, mu->sd, mu->rbuf, mu->rc, mu->rd,
                         sizeof(float));
    for (int x = 0; x < G; x++) owned_runs(mu, x, mu->rbuf + mu->rd[x], 1);
    for (int k = 0; k < mu->n; k++)
        if (mu->owned_at[k] != SIZE_MAX)
            muon_orthogonalize(mu, ops, mu->owned + mu->owned_at[k], mu->mx[k].rows,
                               mu->mx[k].cols);
    for (int x = 0; x < G; x++) owned_runs(mu, x, mu->rbuf + mu->rd[x], 0);
    dist_group_alltoallv(f->group, mu->rbuf, mu->rc, mu->rd, mu->sbuf, mu->sc, mu->sd,
                         sizeof(float));
    memcpy(cur, mu->sd, (size_t)G * sizeof(size_t));
    for (int s = 0; s < ns; s++) { /* O of my runs, in the same packing */
        int x = mu->mx[mine[s].mx].owner;
        apply_step(&mu->o, f->params + mine[s].shard, mu->sbuf + cur[x], mine[s].len, lr,
                   mu->mx[mine[s].mx].scale);
        cur[x] += mine[s].len;
    }
    for (int x = 0; x < G; x++)
        if (x != me) mu->sent_bytes += (uint64_t)(mu->sc[x] + mu->rc[x]) * sizeof(float);
    free(cur);
}

void muon_report(const tsr_muon *mu, int64_t steps, int world) {
    if (!mu->on || !mu->f) return;
    int64_t sent = (int64_t)mu->sent_bytes;
    dist_allreduce_sum_i64(&sent, 1);
    if (dist_world_rank() == 0)
        printf("muon exchange: %lld bytes sent between ranks in %lld steps (all %d ranks; the "
               "formula: %llu per step and sharding group, %d groups)\n", (long long)sent,
               (long long)steps, world, (unsigned long long)muon_fsdp_step_bytes(mu),
               world / mu->f->G);
}
