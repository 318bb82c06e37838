/* pipeline_zb.c — the zero-bubble schedule's split backward (docs/pipeline.md "Zero bubble"): a
 * B runs the chunk's backward on a backend whose linear layers compute the input's gradient only
 * and keep what their weights' gradient reads (the output's gradient and the input, copied: the
 * activations are free after the B); the W runs those products later. Everything else of the
 * backward (the norms, the attention, a MoE layer's experts, the embedding) stays in the B. On
 * the fp32 backend each product is the same call as in a whole backward, so the gradients are
 * the same bits.
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "train/pipeline_int.h"

/* room in l's arena for n more floats (grown; what it holds kept) */
static size_t arena_take(zb_list *l, size_t n) {
    if (l->used + n > l->size) {
        size_t size = l->size ? l->size : 1024;
        while (size < l->used + n) size *= 2;
        float *a = tsr_malloc(size * sizeof *a);
        if (l->used) memcpy(a, l->arena, l->used * sizeof *a);
        free(l->arena);
        l->arena = a, l->size = size;
    }
    const size_t at = l->used;
    l->used += n;
    return at;
}

static void keep(zb_backend *z, float *dw, float *dbias, const float *dout, const float *inp,
                 int N, int IC, int OC) {
    zb_list *l = z->into;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->items = tsr_realloc(l->items, (size_t)l->cap * sizeof *l->items);
    }
    const size_t no = (size_t)N * OC, ni = (size_t)N * IC;
    zb_item *it = &l->items[l->n++];
    *it = (zb_item){dw, dbias, arena_take(l, no), 0, N, IC, OC};
    it->inp = arena_take(l, ni);
    memcpy(l->arena + it->dout, dout, no * sizeof(float));
    memcpy(l->arena + it->inp, inp, ni * sizeof(float));
    z->held += no + ni;
    if (z->held > z->peak) z->peak = z->held;
}

/* matmul_backward's input half now, its weights' half kept for the W */
static void zb_matmul_backward(const tsr_backend *be, void *dinp, float *dw, float *dbias,
                               const void *dout, const void *inp, const void *w, int N, int IC,
                               int OC, tsr_grad_mode mode) {
    zb_backend *z = (zb_backend *)be;
    if (!z->into || (!dw && !dbias)) { /* (no B running, or nothing to keep: whole, at once) */
        z->base->matmul_backward(z->base, dinp, dw, dbias, dout, inp, w, N, IC, OC, mode);
        return;
    }
    z->base->matmul_backward(z->base, dinp, NULL, NULL, dout, inp, w, N, IC, OC, mode);
    keep(z, dw, dbias, dout, inp, N, IC, OC);
}

void zb_backend_use(zb_backend *z, const tsr_backend *base) {
    z->be = *base;
    z->base = base;
    z->be.matmul_backward = zb_matmul_backward;
    z->be.matmul_backward_gelu = NULL; /* (the fp32 backend has none: the two ops) */
}

void zb_run(zb_backend *z, zb_list *l, const tsr_ops *ops) {
    for (int i = 0; i < l->n; i++) {
        const zb_item *it = &l->items[i];
        ops->matmul_backward(NULL, it->dw, it->dbias, l->arena + it->dout, l->arena + it->inp,
                             NULL, it->N, it->IC, it->OC);
        z->held -= (size_t)it->N * (size_t)(it->OC + it->IC);
    }
    l->n = 0, l->used = 0;
}

void zb_list_free(zb_list *l) {
    free(l->items);
    free(l->arena);
    memset(l, 0, sizeof *l);
}
