/* adamw.c — AdamW over a part of the weights (adamw.h), and its slot. */
#include "optim/adamw.h"

#include <stddef.h>

/* whether tensors of this kind get weight decay (a state tensor none: the device's AdamW, which
 * runs over it with its zero gradient, leaves it as its own rule moved it) */
static int decays(const tsr_optim_config *o, tsr_param_kind kind) {
    if (kind == TSR_PK_STATE) return 0;
    if (kind == TSR_PK_EMBEDDING) return o->decay_embeddings;
    if (kind == TSR_PK_NORM || kind == TSR_PK_BIAS) return o->decay_norms_biases;
    return 1;
}

float adamw_decay(const tsr_optim_config *o, tsr_param_kind kind) {
    return decays(o, kind) ? (float)o->weight_decay : 0.0f;
}

/* n elements from offset at of p's buffers (w from w_at), with the decay of kind; none of a
 * tensor the optimizer does not move (TSR_PK_STATE: its own rule does) */
static void run(const tsr_optim *op, const optim_part *p, size_t w_at, size_t at, size_t n,
                tsr_param_kind kind, double lr, float gscale, int64_t step) {
    const tsr_optim_config *o = &op->o;
    if (kind == TSR_PK_STATE) return;
    op->ops->adamw_update(p->w + w_at, p->g + at, p->m + at, p->v + at, n, (float)lr,
                          (float)o->beta1, (float)o->beta2, (float)o->eps, adamw_decay(o, kind),
                          gscale, (int)step);
}

/* ddp, zero1: the owned part [lo, hi) of each tensor (the experts' are their store's) */
static void flat_step(const tsr_optim *op, const optim_part *p, double lr, float gscale,
                      int64_t step, int (*skip)(const tsr_optim *, int)) {
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const tsr_param_info *q = &op->info[i];
        if (q->ep || (skip && skip(op, i))) continue;
        size_t end = q->offset + q->numel;
        size_t a = q->offset > p->lo ? q->offset : p->lo, b = end < p->hi ? end : p->hi;
        if (a >= b) continue;
        run(op, p, a, a - p->lo, b - a, q->kind, lr, gscale, step);
    }
}

/* zero3, hsdp: the shard, tensor piece by tensor piece */
static void shard_step(const tsr_optim *op, const optim_part *p, double lr, float gscale,
                       int64_t step, int (*skip)(const tsr_optim *, int)) {
    const tsr_fsdp *f = op->f;
    for (int k = 0; k < f->n_pieces[f->grank]; k++) {
        const fsdp_piece *q = &f->pieces[f->grank][k];
        if (skip && skip(op, q->id)) continue;
        run(op, p, q->shard, q->shard, q->len, op->info[q->id].kind, lr, gscale, step);
    }
}

void adamw_step_part(const tsr_optim *op, const optim_part *p, double lr, float gscale,
                     int64_t step, int (*skip)(const tsr_optim *op, int id)) {
    switch (p->kind) {
    case OPTIM_PART_FLAT: flat_step(op, p, lr, gscale, step, skip); break;
    case OPTIM_PART_SHARD: shard_step(op, p, lr, gscale, step, skip); break;
    default: /* the experts' store, the adapters: weight matrices, whole */
        run(op, p, 0, 0, p->hi - p->lo, TSR_PK_WEIGHT, lr, gscale, step);
    }
}

static void adamw_step(tsr_optim *op, const optim_part *p, double lr, float gscale,
                       int64_t step) {
    adamw_step_part(op, p, lr, gscale, step, NULL);
}

static const char *const adamw_state[] = {"m", "v"};

const optim_api optim_adamw = {
    .name = "adamw",
    .step = adamw_step,
    .state = adamw_state,
    .n_state = 2,
};
