/* model_rollout.c — see model_rollout.h. */
#include "model/model_rollout.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist/dist.h"
#include "model/model_tp.h"

void model_gather_full(tsr_fsdp *f, float *flat) {
    const int S = f->G; /* the shard group's ranks */
    int *counts = tsr_malloc((size_t)S * 2 * sizeof *counts), *displs = counts + S;
    for (int r = 0; r < S; r++) counts[r] = (int)f->part_counts[r], displs[r] = (int)f->part_displs[r];
    float *part = tsr_malloc((f->part_counts[f->grank] + 1) * sizeof *part);
    fsdp_shard_to_part(f, f->params, part);
    dist_group_allgatherv_f32(f->group, part, flat, counts, displs);
    free(part), free(counts);
}

/* the hooks of training off (the view decodes on the weights it is given) */
static void hooks_off(tsr_model *v) {
    v->src = NULL, v->lora = NULL, v->fwd = NULL, v->scores = NULL;
    v->bwd_weighted = NULL, v->moe_stats = NULL;
}

/* A split model (tensor parallelism): the whole model's struct over whole weights made from
 * every rank's split (the shard gathered first under zero3 / hsdp), its ALiBi slopes every
 * head's, the adapters merged by a plan of the whole model over the same (whole) store */
static void open_whole(model_rollout *w, const tsr_model *m, tsr_fsdp *fsdp, const tsr_lora *lora,
                       const tsr_ops *ops) {
    const tsr_tp *tp = m->tp;
    const size_t n = tp->global.n_params;
    float *split = m->params;
    if (fsdp) model_gather_full(fsdp, split = ops->alloc(m->n_params * sizeof(float)));
    w->m = tp->global;
    hooks_off(&w->m);
    w->m.ops = m->ops, w->m.be = m->be, w->m.rope_freqs = m->rope_freqs;
    w->m.tp = NULL, w->m.global = NULL, w->m.alibi_slopes = NULL;
    w->own = ops->alloc(n * sizeof(float));
    tp_whole(tp, m, 0, m->n_params, split, w->own, 0, n);
    if (fsdp) ops->free(split);
    w->m.params = w->own;
    model_alloc_slopes(&w->m); /* (ALiBi: the whole model's; NULL otherwise) */
    w->slopes = w->m.alibi_slopes;
    if (!lora) return;
    tsr_lora whole;
    lora_plan(&whole, &w->m, lora->R, 1.0, 0.0, lora->mask);
    whole.scale = lora->scale;
    lora_merge(&whole, lora->w, &w->m);
}

void model_rollout_open(model_rollout *w, const tsr_model *m, tsr_fsdp *fsdp, const tsr_lora *lora,
                        const tsr_ops *ops) {
    w->own = NULL, w->slopes = NULL, w->ops = ops;
    if (m->tp && m->tp->T > 1) {
        open_whole(w, m, fsdp, lora, ops);
        return;
    }
    w->m = *m;
    hooks_off(&w->m);
    const size_t bytes = m->n_params * sizeof(float);
    if (fsdp || lora) w->own = ops->alloc(bytes);
    if (fsdp) model_gather_full(fsdp, w->own);
    else if (lora) memcpy(w->own, m->params, bytes);
    if (w->own) w->m.params = w->own;
    if (lora) lora_merge(lora, lora->w, &w->m);
}

void model_rollout_close(model_rollout *w) {
    if (w->own) w->ops->free(w->own);
    if (w->slopes) w->m.ops->free(w->slopes);
    w->own = NULL, w->slopes = NULL;
}
