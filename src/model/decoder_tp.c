/* decoder_tp.c — the decoder's communication points under tensor parallelism (model_tp.h,
 * decoder_int.h; docs/parallelism.md "Tensor parallelism"): a half's input gathered and its
 * partial output summed over the tensor group, the vocabulary-parallel embedding, and the
 * cross-entropy and greedy choice over the vocabulary-parallel logits. Host memory, fp32 (the
 * CPU backend); on a device backend the collectives go through d->tpdev, and
 * decoder_tp_dev.c, which dispatches the vocabulary-parallel ends, stages the rest. Without a split (d->tp NULL) each is the identity or the backend's own op,
 * so a whole model runs as before (the same bits).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu/cpu_internal.h" /* cpu_expf: the CPU cross-entropy's exponential */
#include "model/decoder_int.h"
#include "model/model_tp.h"

/* the group's sizes of a pass: its tokens' rows, C floats each */
static size_t row_floats(const dec_run *r) { return (size_t)r->d->m->C; }

/* bytes of an activation element (4 on the CPU, 2 on the GPU) */
static size_t act_bytes(const dec_run *r) { return tsr_dtype_size(r->d->be->act); }

/* all = every rank's x (r->Nf rows each, in rank order): an all-gather over the group */
static void *gather_rows(const dec_run *r, const void *x, void *all) {
    tsr_tp *tp = r->d->tp;
    const tsr_tp_dev *dev = r->d->tpdev;
    const size_t piece = (size_t)r->Nf * row_floats(r);
    tp->sent += tp_collective_bytes(tp->T, 0, (uint64_t)piece * tp->T * act_bytes(r));
    if (dev) {
        dev->gather(dev->ctx, x, all, piece);
        return all;
    }
    int *counts = tsr_malloc(2 * (size_t)tp->T * sizeof *counts);
    for (int k = 0; k < tp->T; k++) counts[k] = (int)piece, counts[tp->T + k] = k * (int)piece;
    dist_group_allgatherv_f32(tp->group, x, all, counts, counts + tp->T);
    free(counts);
    return all;
}

const void *dec_tp_in(const dec_run *r, const void *x) {
    const tsr_tp *tp = r->d->tp;
    return tp && tp->sp ? gather_rows(r, x, r->d->a->tp_x) : x;
}

const void *dec_tp_in_grad(const dec_run *r, const void *dy) {
    const tsr_tp *tp = r->d->tp; /* (into tp_dy: tp_x holds the half's gathered input next) */
    return tp && tp->sp ? gather_rows(r, dy, r->d->a->tp_dy) : dy;
}

void dec_tp_out(const dec_run *r, void *buf) {
    tsr_tp *tp = r->d->tp;
    if (!tp) return;
    const size_t n = (size_t)r->N * row_floats(r);
    const tsr_tp_dev *dev = r->d->tpdev;
    tp->sent += tp_collective_bytes(tp->T, !tp->sp, n * act_bytes(r));
    if (dev && tp->sp) dev->sum_scatter(dev->ctx, buf, buf, n);
    else if (dev) dev->sum(dev->ctx, buf, n);
    if (dev) return;
    if (!tp->sp) {
        dist_group_allreduce_sum_f32(tp->group, buf, n);
        return;
    }
    int *counts = tsr_malloc((size_t)tp->T * sizeof *counts);
    for (int k = 0; k < tp->T; k++) counts[k] = (int)(n / (size_t)tp->T);
    dist_group_reduce_scatter_f32(tp->group, buf, buf, counts); /* (in place: the first rows) */
    free(counts);
}

/* the whole pass's row of this rank's frame row i (its first under sequence parallelism) */
static size_t frame_row(const dec_run *r, size_t i) {
    const tsr_tp *tp = r->d->tp;
    return (tp && tp->sp ? (size_t)tp->t * (size_t)r->Nf : 0) + i;
}

/* the position of row n of the pass (learned positions): its document's, else n mod T */
static size_t row_pos(const dec_run *r, size_t n) {
    const int32_t *pos = r->d->a->pos;
    return pos ? (size_t)pos[n] : n % (size_t)r->T;
}

void dec_tp_embed_forward_host(const dec_run *r, const dec_unit *root, const int32_t *tokens) {
    const tsr_tp *tp = r->d->tp;
    tsr_acts *a = r->d->a;
    const size_t C = row_floats(r), N = (size_t)r->N;
    const float *wte = root->w[TSR_P_WTE], *wpe = root->w[TSR_P_WPE];
    float *part = tp->sp ? a->tp_x : a->encoded; /* this rank's vocabulary rows, zero elsewhere */
#pragma omp parallel for schedule(static) if (N * C >= (1u << 16))
    for (size_t n = 0; n < N; n++) {
        const int32_t v = tokens[n] - tp->v0;
        if (v >= 0 && v < tp->Vl) memcpy(part + n * C, wte + (size_t)v * C, C * sizeof(float));
        else memset(part + n * C, 0, C * sizeof(float));
    }
    if (tp->sp) { /* summed into this rank's rows */
        int *counts = tsr_malloc((size_t)tp->T * sizeof *counts);
        for (int k = 0; k < tp->T; k++) counts[k] = (int)((size_t)r->Nf * C);
        dist_group_reduce_scatter_f32(tp->group, part, a->encoded, counts);
        free(counts);
    } else {
        dist_group_allreduce_sum_f32(tp->group, part, N * C);
    }
    r->d->tp->sent += tp_collective_bytes(tp->T, !tp->sp, N * C * sizeof(float));
    float *x = a->encoded;
    for (size_t i = 0; wpe && i < (size_t)r->Nf; i++) {
        const float *p = wpe + row_pos(r, frame_row(r, i)) * C;
        for (size_t c = 0; c < C; c++) x[i * C + c] += p[c];
    }
}

void dec_tp_embed_backward_host(const dec_run *r, const dec_unit *root, const int32_t *tokens) {
    const tsr_tp *tp = r->d->tp;
    tsr_acts *a = r->d->a;
    const size_t C = row_floats(r), N = (size_t)r->N;
    float *dwte = root->g[TSR_P_WTE], *dwpe = root->g[TSR_P_WPE];
    const float *dx = a->dresidual;
    for (size_t i = 0; dwpe && i < (size_t)r->Nf; i++) { /* this rank's rows' positions */
        float *d = dwpe + row_pos(r, frame_row(r, i)) * C;
        for (size_t c = 0; c < C; c++) d[c] += dx[i * C + c];
    }
    const float *dy = dec_tp_in(r, dx); /* every row, for this rank's vocabulary rows */
    for (size_t n = 0; dwte && n < N; n++) { /* in row order: one rank's order of each row */
        const int32_t v = tokens[n] - tp->v0;
        if (v < 0 || v >= tp->Vl) continue;
        float *d = dwte + (size_t)v * C;
        for (size_t c = 0; c < C; c++) d[c] += dy[n * C + c];
    }
}

/* the cross-entropy's per-row scratch: 3 N doubles (the maximum as a float in the first N) */
static double *xent_scratch(tsr_tp *tp, size_t N) {
    if (tp->xent_cap < 3 * N) {
        free(tp->xent);
        tp->xent = tsr_malloc(3 * N * sizeof(double)), tp->xent_cap = 3 * N;
    }
    return tp->xent;
}

/* each row's maximum over the real vocabulary, reduced over the group (mx, N floats) */
static void xent_max(tsr_tp *tp, const float *logits, float *mx, size_t N, size_t Vp) {
#pragma omp parallel for schedule(static) if (N * Vp >= 65536)
    for (size_t n = 0; n < N; n++) {
        const float *x = logits + n * Vp;
        float m = -INFINITY;
        for (int j = 0; j < tp->Vl; j++) m = x[j] > m ? x[j] : m;
        mx[n] = m;
    }
    dist_group_allreduce_max_f32(tp->group, mx, N);
    tp->sent += tp_collective_bytes(tp->T, 1, N * sizeof(float));
}

/* model.final_logit_softcapping: the logits capped in place, cap tanh(x / cap) over the real
 * rows (the CPU's softcap op), a copy kept for the gradient (softcap_grad) */
static void softcap_keep(const tsr_decoder *d, float *logits, size_t N, size_t Vp) {
    tsr_tp *tp = d->tp;
    const float cap = (float)d->m->cfg.final_logit_softcapping;
    if (!(cap > 0.0f)) return;
    d->m->ops->softcap_forward(logits, logits, (int)N, tp->Vl, (int)Vp, cap);
    if (tp->capped_cap < N * Vp) {
        free(tp->capped);
        tp->capped = tsr_malloc(N * Vp * sizeof(float)), tp->capped_cap = N * Vp;
    }
    memcpy(tp->capped, logits, N * Vp * sizeof(float));
}

/* the capped logits' factor 1 - (z / cap)^2 on their gradient */
static void softcap_grad(const tsr_decoder *d, float *dlogits, size_t N, size_t Vp) {
    const float cap = (float)d->m->cfg.final_logit_softcapping;
    if (cap > 0.0f)
        d->m->ops->softcap_backward(dlogits, d->tp->capped, (int)N, d->tp->Vl, (int)Vp, cap);
}

void dec_tp_xent_rows(const tsr_decoder *d, float *p, float *losses, const int32_t *targets,
                      const float *dlosses, int Ni) {
    tsr_tp *tp = d->tp;
    const size_t N = (size_t)Ni, Vp = (size_t)d->m->Vp;
    double *s = xent_scratch(tp, N); /* [sum of exponentials | target logit] per row, then mx */
    float *mx = (float *)(s + 2 * N);
    softcap_keep(d, p, N, Vp);
    xent_max(tp, p, mx, N, Vp);
#pragma omp parallel for schedule(static) if (N * Vp >= 65536)
    for (size_t n = 0; n < N; n++) {
        float *x = p + n * Vp;
        const int32_t v = targets[n] - tp->v0;
        double sum = 0.0;
        s[N + n] = targets[n] >= 0 && v >= 0 && v < tp->Vl ? (double)x[v] : 0.0;
        for (int j = 0; j < tp->Vl; j++) sum += x[j] = cpu_expf(x[j] - mx[n]);
        s[n] = sum;
    }
    dist_group_allreduce_sum_f64(tp->group, s, 2 * N);
    tp->sent += tp_collective_bytes(tp->T, 1, 2 * N * sizeof(double));
    for (size_t n = 0; n < N; n++) {
        float *x = p + n * Vp;
        const float inv = (float)(1.0 / s[n]);
        for (int j = 0; j < tp->Vl; j++) x[j] *= inv;
        for (size_t j = (size_t)tp->Vl; j < Vp; j++) x[j] = 0.0f;
        losses[n] = targets[n] >= 0 ? (float)(log(s[n]) - (s[N + n] - (double)mx[n])) : 0.0f;
    }
    if (dlosses) dec_tp_xent_grad_rows(d, p, targets, dlosses, Ni);
}

void dec_tp_xent_grad_rows(const tsr_decoder *d, float *p, const int32_t *targets,
                           const float *dlosses, int Ni) {
    const tsr_tp *tp = d->tp;
    const size_t N = (size_t)Ni, Vp = (size_t)d->m->Vp;
    for (size_t n = 0; n < N; n++) {
        float *x = p + n * Vp;
        const int32_t v = targets[n] - tp->v0;
        if (targets[n] < 0) {
            memset(x, 0, Vp * sizeof(float));
            continue;
        }
        const float dl = dlosses[n], pt = v >= 0 && v < tp->Vl ? x[v] : 0.0f;
        for (int j = 0; j < tp->Vl; j++) x[j] *= dl;
        if (v >= 0 && v < tp->Vl) x[v] = (pt - 1.0f) * dl;
    }
    softcap_grad(d, p, N, Vp);
}

void dec_tp_argmax_rows(const tsr_decoder *d, const float *p, int32_t *greedy, int Ni) {
    tsr_tp *tp = d->tp;
    const size_t N = (size_t)Ni, Vp = (size_t)d->m->Vp;
    double *s = xent_scratch(tp, N);
    float *best = (float *)s;
    int *idx = (int *)(s + N);
    for (size_t n = 0; n < N; n++) { /* this rank's best real row, the lower id on ties */
        const float *x = p + n * Vp;
        int b = 0;
        for (int j = 1; j < tp->Vl; j++)
            if (x[j] > x[b]) b = j;
        best[n] = tp->Vl > 0 ? x[b] : -INFINITY, idx[n] = tp->v0 + b;
    }
    float *mine = tsr_malloc(N * sizeof *mine);
    memcpy(mine, best, N * sizeof *mine);
    dist_group_allreduce_max_f32(tp->group, best, N);
    for (size_t n = 0; n < N; n++) idx[n] = mine[n] == best[n] ? idx[n] : INT32_MAX;
    dist_group_allreduce_min_int(tp->group, idx, N);
    for (size_t n = 0; n < N; n++) greedy[n] = idx[n];
    free(mine);
}

/* ---- QK-norm over the projection (model.qk_norm_scope = "projection") ----------------------- */

/* the query (p 0) or key (p 1) columns of a qkv row of the split: their first column and width,
 * and the whole projection's width; a key/value head replicated over R ranks counts 1 / R of its
 * squares on each, so that the group's sum counts it once */
typedef struct qkn_part { size_t c0, w; double W, share; } qkn_part;

static qkn_part qkn_of(const tsr_decoder *d, int p) {
    const tsr_model *m = d->m, *g = &d->tp->global;
    const size_t hs = (size_t)m->hs;
    if (p == 0) return (qkn_part){0, (size_t)m->NH * hs, (double)g->NH * (double)hs, 1.0};
    return (qkn_part){(size_t)m->NH * hs, (size_t)m->KVH * hs, (double)g->KVH * (double)hs,
                      1.0 / d->tp->R};
}

/* s (2 N): each row's sums f(x, y) over its query and key columns, times the part's share,
 * summed over the group */
static void qkn_sums(const tsr_decoder *d, double *s, const float *a, const float *b,
                     const float *qw, const float *kw, const float *rstd, int N) {
    tsr_tp *tp = d->tp;
    const size_t row = (size_t)d->m->QKV;
    for (int n = 0; n < N; n++)
        for (int p = 0; p < 2; p++) {
            const qkn_part q = qkn_of(d, p);
            const float *x = a + n * row + q.c0, *y = b ? b + n * row + q.c0 : NULL;
            const float *w = p ? kw : qw, r = rstd ? rstd[2 * n + p] : 0.0f;
            double sum = 0.0;
            for (size_t c = 0; c < q.w; c++)
                sum += y ? (double)(w[c] * y[c]) * (x[c] * r) : (double)x[c] * x[c];
            s[2 * n + p] = sum * q.share;
        }
    dist_group_allreduce_sum_f64(tp->group, s, 2 * (size_t)N);
    tp->sent += tp_collective_bytes(tp->T, 1, 2 * (size_t)N * sizeof(double));
}

void dec_tp_qknorm_forward(const tsr_decoder *d, float *out, float *rstd, const float *inp,
                           const float *qw, const float *kw, int N) {
    const size_t row = (size_t)d->m->QKV, vcol = row - (size_t)d->m->KVH * d->m->hs;
    double *s = xent_scratch(d->tp, (size_t)N);
    qkn_sums(d, s, inp, NULL, qw, kw, NULL, N);
    for (int n = 0; n < N; n++) {
        for (int p = 0; p < 2; p++) {
            const qkn_part q = qkn_of(d, p);
            const float *x = inp + n * row + q.c0, *w = p ? kw : qw;
            const float r = (float)(1.0 / sqrt(s[2 * n + p] / q.W + d->m->cfg.norm_eps));
            float *o = out + n * row + q.c0;
            for (size_t c = 0; c < q.w; c++) o[c] = x[c] * r * w[c];
            rstd[2 * n + p] = r;
        }
        if (out != inp)
            memcpy(out + n * row + vcol, inp + n * row + vcol, (row - vcol) * sizeof(float));
    }
}

void dec_tp_qknorm_backward(const tsr_decoder *d, float *dinp, float *dqw, float *dkw,
                            const float *dout, const float *inp, const float *qw, const float *kw,
                            const float *rstd, int N) {
    const size_t row = (size_t)d->m->QKV, vcol = row - (size_t)d->m->KVH * d->m->hs;
    double *s = xent_scratch(d->tp, (size_t)N);
    qkn_sums(d, s, inp, dout, qw, kw, rstd, N); /* (the sums of w g norm) */
    for (int n = 0; n < N; n++) {
        for (int p = 0; p < 2; p++) {
            const qkn_part q = qkn_of(d, p);
            const size_t o = n * row + q.c0;
            const float *x = inp + o, *g = dout + o, *w = p ? kw : qw, r = rstd[2 * n + p];
            float *dw = p ? dkw : dqw;
            const float mean = (float)(s[2 * n + p] / q.W);
            for (size_t c = 0; c < q.w; c++) {
                dinp[o + c] += (w[c] * g[c] - x[c] * r * mean) * r;
                if (dw) dw[c] += g[c] * (x[c] * r);
            }
        }
        for (size_t c = vcol; c < row; c++) dinp[n * row + c] += dout[n * row + c];
    }
}
