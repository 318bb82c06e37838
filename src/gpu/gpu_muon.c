/* gpu_muon.c — Muon on device = cuda (gpu_muon.h). */
#include "gpu/gpu_muon.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

size_t gpu_muon_bytes(const tsr_model *m, const tsr_optim_config *o, int flat, int G) {
    muon_mem mm;
    muon_plan_mem(m, o, G, &mm);
    if (!mm.big) return 0;
    const size_t f = sizeof(float), b = sizeof(tsr_bf16);
    size_t bytes = (flat ? mm.big * f : 0) + f + 2 * mm.big * b + 2 * mm.sq * b;
    return bytes + mm.owned * f + mm.send * (f + b) + mm.recv * f;
}

static void *dev(size_t floats, size_t elem, const char *what) {
    return tcu_malloc((floats ? floats : 1) * elem, what);
}

/* where each of my runs starts in the device shard: its unit's piece there, plus its offset in
 * the piece (the host shard's units are unpadded, the device's padded to f->units[u].piece) */
static void place_runs(gpu_muon *mu, const tsr_fsdp *f, const size_t *dev_unit_at) {
    const int ns = mu->p.n_segs[mu->p.me];
    mu->dev_at = tsr_malloc((size_t)(ns ? ns : 1) * sizeof(size_t));
    for (int s = 0, u = 0; s < ns; s++) {
        const size_t at = mu->p.segs[mu->p.me][s].shard;
        while (at >= f->unit_at[u] + (size_t)f->units[u].counts[f->grank]) u++;
        mu->dev_at[s] = dev_unit_at[u] + (at - f->unit_at[u]);
    }
}

void gpu_muon_init(gpu_muon *mu, const tsr_model *m, const tsr_optim_config *o, tcu_stream s,
                   const tsr_fsdp *f, const size_t *dev_unit_at, gpu_comm *group) {
    memset(mu, 0, sizeof *mu);
    if (o->name != TSR_OPTIM_MUON) return;
    mu->on = 1, mu->o = o, mu->s = s;
    muon_plan_init(&mu->p, m, o);
    const size_t big = mu->p.big, sq = mu->p.sq;
    if (!f || mu->p.n_ep) mu->u = dev(big, sizeof(float), "Muon u (fp32)");
    mu->acc = dev(1, sizeof(float), "Muon norm");
    mu->x = dev(big, sizeof(tsr_bf16), "Muon X (bf16)");
    mu->y = dev(big, sizeof(tsr_bf16), "Muon next X (bf16)");
    mu->a = dev(sq, sizeof(tsr_bf16), "Muon A (bf16)");
    mu->b = dev(sq, sizeof(tsr_bf16), "Muon B (bf16)");
    if (!f) return;
    muon_plan_shards(&mu->p, f);
    place_runs(mu, f, dev_unit_at);
    mu->group = group;
    mu->owned = dev(mu->p.owned_n, sizeof(float), "Muon: the owned matrices (fp32)");
    mu->sbuf = dev(mu->p.send_n, sizeof(float), "Muon exchange: sent (fp32)");
    mu->rbuf = dev(mu->p.recv_n, sizeof(float), "Muon exchange: received (fp32)");
    mu->obf = dev(mu->p.send_n, sizeof(tsr_bf16), "Muon exchange: O (bf16)");
}

void gpu_muon_free(gpu_muon *mu) {
    if (!mu->on) return;
    tcu_sync(mu->s);
    void *bufs[] = {mu->u, mu->acc, mu->x, mu->y, mu->a, mu->b, mu->owned, mu->sbuf, mu->rbuf,
                    mu->obf};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) tcu_free(bufs[i]);
    free(mu->dev_at);
    muon_plan_free(&mu->p);
    memset(mu, 0, sizeof *mu);
}

/* O = NS(u) of a (rows, cols) fp32 matrix on the device: returns X (bf16; (cols, rows) when
 * rows > cols, the transposed iteration's) in the scratch */
static const tsr_bf16 *orthogonalize(gpu_muon *mu, const float *u, int rows, int cols) {
    const size_t n = (size_t)rows * (size_t)cols;
    const int tr = rows > cols, r = tr ? cols : rows, c = tr ? rows : cols;
    tsr_bf16 *x = mu->x, *y = mu->y;
    tcu_zero(mu->acc, sizeof(float), mu->s);
    tcu_sumsq(mu->acc, u, n, mu->s);
    tcu_muon_normalize(x, u, mu->acc, rows, cols, tr, (float)MUON_NS_EPS, mu->s);
    for (int k = 0; k < mu->o->muon.ns_steps; k++) {
        tcu_matmul_forward(mu->a, NULL, x, x, NULL, r, c, r, TSR_GELU_TANH, mu->s); /* X X^T */
        tcu_matmul_forward(mu->b, NULL, mu->a, mu->a, NULL, r, r, r, TSR_GELU_TANH, mu->s);
        tcu_axpby_bf16(mu->b, MUON_NS_C, mu->b, MUON_NS_B, mu->a, (size_t)r * r, mu->s);
        tcu_axpby_bf16(y, MUON_NS_A, x, 0.0f, NULL, n, mu->s);
        tcu_matmul_backward(y, NULL, NULL, mu->b, NULL, x, r, c, r, TSR_GRAD_ADD, mu->s);
        tsr_bf16 *t = x;
        x = y, y = t;
    }
    return x;
}

static float decay_of(const gpu_muon *mu, double lr) {
    return 1.0f - (float)lr * (float)mu->o->muon.weight_decay;
}

void gpu_muon_flat(gpu_muon *mu, const muon_matrix *mx, int n, float *params, tsr_bf16 *wbf,
                   const float *grads, float *mom, double lr, float gscale) {
    const tsr_optim_config *o = mu->o;
    for (int k = 0; k < n; k++) {
        const muon_matrix *q = &mx[k];
        tcu_muon_momentum(mom + q->flat, grads + q->flat, mu->u, (size_t)q->rows * q->cols,
                          (float)o->muon.momentum, gscale, o->muon.nesterov, mu->s);
        const tsr_bf16 *x = orthogonalize(mu, mu->u, q->rows, q->cols);
        tcu_muon_apply(params + q->flat, wbf + q->flat, x, q->rows, q->cols, q->rows > q->cols,
                       decay_of(mu, lr), (float)(lr * (double)q->scale), mu->s);
    }
}

static void dev_copy(void *ctx, float *dst, const float *src, size_t n) {
    tcu_memcpy_d2d(dst, src, n * sizeof(float), ((gpu_muon *)ctx)->s);
}

/* The owner's matrices orthogonalised in place: `owned` holds each one's O in fp32 after
 * (tcu_muon_apply with decay 0 and step -1 writes 0 * u + O: the bf16 X widened, transposed
 * back where the iteration ran on the transpose) */
static void owner_iterations(gpu_muon *mu) {
    const muon_plan *p = &mu->p;
    for (int k = 0; k < p->n; k++) {
        if (p->owned_at[k] == SIZE_MAX) continue;
        const muon_matrix *q = &p->mx[k];
        float *w = mu->owned + p->owned_at[k];
        const tsr_bf16 *x = orthogonalize(mu, w, q->rows, q->cols);
        tcu_muon_apply(w, NULL, x, q->rows, q->cols, q->rows > q->cols, 0.0f, -1.0f, mu->s);
    }
}

/* my runs, in the exchange's packing (by owner, shard order within): u from the momentum
 * (apply = 0), or the weights' update from the O that came back (apply = 1) */
static void my_runs(gpu_muon *mu, float *params, tsr_bf16 *wbf, const float *grads, float *mom,
                    double lr, float gscale, int apply) {
    const muon_plan *p = &mu->p;
    const tsr_optim_config *o = mu->o;
    size_t *cur = tsr_malloc((size_t)p->G * sizeof(size_t));
    memcpy(cur, p->sd, (size_t)p->G * sizeof(size_t));
    for (int s = 0; s < p->n_segs[p->me]; s++) {
        const muon_seg *sg = &p->segs[p->me][s];
        const muon_matrix *q = &p->mx[sg->mx];
        const size_t at = mu->dev_at[s], x = (size_t)q->owner;
        if (sg->len > INT_MAX)
            tsr_die(TSR_EXIT_INTERNAL, "gpu_muon: a run of %zu floats (at most %d)", sg->len,
                    INT_MAX);
        if (apply)
            tcu_muon_apply(params + at, wbf + at, mu->obf + cur[x], 1, (int)sg->len, 0,
                           decay_of(mu, lr), (float)(lr * (double)q->scale), mu->s);
        else
            tcu_muon_momentum(mom + at, grads + at, mu->sbuf + cur[x], sg->len,
                              (float)o->muon.momentum, gscale, o->muon.nesterov, mu->s);
        cur[x] += sg->len;
    }
    free(cur);
}

void gpu_muon_shard(gpu_muon *mu, float *params, tsr_bf16 *wbf, const float *grads, float *mom,
                    double lr, float gscale) {
    const muon_plan *p = &mu->p;
    my_runs(mu, params, wbf, grads, mom, lr, gscale, 0);
    gpu_comm_alltoallv(mu->group, mu->sbuf, p->sc, p->sd, mu->rbuf, p->rc, p->rd, sizeof(float));
    for (int x = 0; x < p->G; x++)
        muon_plan_owned_runs(p, x, mu->owned, mu->rbuf + p->rd[x], 1, dev_copy, mu);
    owner_iterations(mu);
    for (int x = 0; x < p->G; x++)
        muon_plan_owned_runs(p, x, mu->owned, mu->rbuf + p->rd[x], 0, dev_copy, mu);
    gpu_comm_alltoallv(mu->group, mu->rbuf, p->rc, p->rd, mu->sbuf, p->sc, p->sd, sizeof(float));
    tcu_f32_to_bf16(mu->obf, mu->sbuf, p->send_n, mu->s);
    my_runs(mu, params, wbf, grads, mom, lr, gscale, 1);
    for (int x = 0; x < p->G; x++)
        if (x != p->me) mu->sent += (uint64_t)(p->sc[x] + p->rc[x]) * sizeof(float);
}
