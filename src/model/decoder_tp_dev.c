/* decoder_tp_dev.c — tensor parallelism's vocabulary-parallel ends (decoder_int.h dec_tp_embed_*,
 * dec_tp_xent*, dec_tp_argmax): on the host decoder_tp.c's, on a device backend (d->tpdev;
 * model_tp.h tsr_tp_dev; docs/parallelism.md "Tensor parallelism on the GPU") the embedding by
 * the backend's own encoder over this rank's vocabulary rows, and the cross-entropy and greedy
 * choice on the logits staged through the host, where decoder_tp.c's host rows do them (the max
 * and the sums of exponentials reduced over the group, never the logits). No kernel of its own:
 * the backend's entries and the owner's hooks.
 */
#include <stdint.h>
#include <stdlib.h>

#include "common.h"
#include "model/decoder_int.h"
#include "model/model_tp.h"

/* *buf of at least n floats (its capacity *cap), grown */
static float *grown(float **buf, size_t *cap, size_t n) {
    if (*cap < n) {
        free(*buf);
        *buf = tsr_malloc(n * sizeof(float)), *cap = n;
    }
    return *buf;
}

/* tp's host rows of n ints or floats (the token ids, losses or loss weights), grown */
static float *host_row(tsr_tp *tp, size_t n) { return grown(&tp->hrow, &tp->hrow_cap, n); }

/* the logits' host rows (N, Vp / T) fp32, grown */
static float *host_logits(tsr_tp *tp, size_t n) {
    return grown(&tp->hlogits, &tp->hlogits_cap, n);
}

/* the token ids on the backend (a->tokens) as rows of this rank's wte: the others' clamped to
 * row 0 (their rows are zeroed after, or their gradients before) */
static void local_ids(const dec_run *r, const int32_t *tokens) {
    const tsr_decoder *d = r->d;
    const tsr_tp *tp = d->tp;
    int32_t *ids = (int32_t *)host_row(d->tp, (size_t)r->N);
    for (int n = 0; n < r->N; n++) {
        const int32_t v = tokens[n] - tp->v0;
        ids[n] = v >= 0 && v < tp->Vl ? v : 0;
    }
    d->be->to_device(d->be, d->a->tokens, ids, (size_t)r->N * sizeof(int32_t));
}

/* rows of x (C act elements each) whose token is not this rank's, zeroed: runs of them at once */
static void zero_others(const dec_run *r, void *x, const int32_t *tokens) {
    const tsr_backend *be = r->d->be;
    const tsr_tp *tp = r->d->tp;
    const size_t row = (size_t)r->d->m->C * tsr_dtype_size(be->act);
    int n = 0;
    while (n < r->N) {
        const int32_t v = tokens[n] - tp->v0;
        if (v >= 0 && v < tp->Vl) {
            n++;
            continue;
        }
        int e = n + 1;
        while (e < r->N && (tokens[e] - tp->v0 < 0 || tokens[e] - tp->v0 >= tp->Vl)) e++;
        be->zero(be, (char *)x + (size_t)n * row, (size_t)(e - n) * row);
        n = e;
    }
}

static void embed_forward(const dec_run *r, const dec_unit *root, const int32_t *tokens) {
    const tsr_decoder *d = r->d;
    const tsr_tp_dev *dev = d->tpdev;
    tsr_acts *a = d->a;
    const size_t n = (size_t)r->N * (size_t)d->m->C;
    void *part = d->tp->sp ? a->tp_x : a->encoded; /* this rank's rows, zero elsewhere */
    local_ids(r, tokens);
    d->be->encoder_forward(d->be, part, a->tokens, root->w[TSR_P_WTE], NULL, NULL, r->B, r->T,
                           d->m->C);
    zero_others(r, part, tokens);
    d->be->to_device(d->be, a->tokens, tokens, (size_t)r->N * sizeof(int32_t)); /* (restored) */
    if (d->tp->sp) dev->sum_scatter(dev->ctx, part, a->encoded, n);
    else dev->sum(dev->ctx, part, n);
    d->tp->sent += tp_collective_bytes(d->tp->T, !d->tp->sp, n * tsr_dtype_size(d->be->act));
}

static void embed_backward(const dec_run *r, const dec_unit *root, const int32_t *tokens) {
    const tsr_decoder *d = r->d;
    float *dwte = root->g[TSR_P_WTE];
    if (!dwte) return; /* (frozen) */
    /* every row's gradient (gathered under sequence parallelism, else dresidual itself, whose
     * last reader this is), the other ranks' tokens' rows zeroed */
    void *dy = (void *)dec_tp_in(r, d->a->dresidual);
    zero_others(r, dy, tokens);
    local_ids(r, tokens);
    d->be->encoder_backward(d->be, dwte, NULL, dy, d->a->tokens, (const int32_t *)d->tp->hrow,
                            NULL, r->B, r->T, d->m->C);
    d->be->to_device(d->be, d->a->tokens, tokens, (size_t)r->N * sizeof(int32_t));
}

/* the logits (N rows of Vp / T) on the host, fp32 */
static float *stage_logits(const tsr_decoder *d, int N) {
    const size_t n = (size_t)N * (size_t)d->m->Vp;
    float *p = host_logits(d->tp, n);
    d->tpdev->to_host(d->tpdev->ctx, p, d->a->probs, n);
    return p;
}

static void xent(const tsr_decoder *d, const int32_t *targets, int grad, int N) {
    tsr_acts *a = d->a;
    float *p = stage_logits(d, N), *losses = host_row(d->tp, (size_t)N);
    dec_tp_xent_rows(d, p, losses, targets, grad ? a->dlosses_host : NULL, N);
    d->be->to_device(d->be, a->losses, losses, (size_t)N * sizeof(float));
    if (grad) d->tpdev->to_device(d->tpdev->ctx, a->probs, p, (size_t)N * (size_t)d->m->Vp);
}

static void xent_grad(const tsr_decoder *d, const int32_t *targets, int N) {
    tsr_acts *a = d->a;
    float *dl = host_row(d->tp, (size_t)N); /* (the weights the backward set on the backend) */
    d->be->to_host(d->be, dl, a->dlosses, (size_t)N * sizeof(float));
    dec_tp_xent_grad_rows(d, d->tp->hlogits, targets, dl, N);
    d->tpdev->to_device(d->tpdev->ctx, a->probs, d->tp->hlogits, (size_t)N * (size_t)d->m->Vp);
}

static void argmax(const tsr_decoder *d, int32_t *greedy, int N) {
    dec_tp_argmax_rows(d, stage_logits(d, N), greedy, N);
    /* (dec_token_scores reads the choice back from the backend's) */
    d->be->to_device(d->be, d->a->greedy, greedy, (size_t)N * sizeof(int32_t));
}

void dec_tp_embed_forward(const dec_run *r, const dec_unit *root, const int32_t *tokens) {
    if (r->d->tpdev) embed_forward(r, root, tokens);
    else dec_tp_embed_forward_host(r, root, tokens);
}

void dec_tp_embed_backward(const dec_run *r, const dec_unit *root, const int32_t *tokens) {
    if (r->d->tpdev) embed_backward(r, root, tokens);
    else dec_tp_embed_backward_host(r, root, tokens);
}

void dec_tp_xent(const tsr_decoder *d, const int32_t *targets, const float *dlosses, int N) {
    if (d->tpdev) xent(d, targets, dlosses != NULL, N);
    else dec_tp_xent_rows(d, d->a->probs, d->a->losses, targets, dlosses, N);
}

void dec_tp_xent_grad(const tsr_decoder *d, const int32_t *targets, const float *dlosses, int N) {
    if (d->tpdev) xent_grad(d, targets, N);
    else dec_tp_xent_grad_rows(d, d->a->probs, targets, dlosses, N);
}

void dec_tp_argmax(const tsr_decoder *d, int32_t *greedy, int N) {
    if (d->tpdev) argmax(d, greedy, N);
    else dec_tp_argmax_rows(d, d->a->probs, greedy, N);
}
