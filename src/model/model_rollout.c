/* model_rollout.c — see model_rollout.h. */
#include "model/model_rollout.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist/dist.h"

void model_gather_full(tsr_fsdp *f, float *flat) {
    const int S = f->G; /* the shard group's ranks */
    int *counts = tsr_malloc((size_t)S * 2 * sizeof *counts), *displs = counts + S;
    for (int r = 0; r < S; r++) counts[r] = (int)f->part_counts[r], displs[r] = (int)f->part_displs[r];
    float *part = tsr_malloc((f->part_counts[f->grank] + 1) * sizeof *part);
    fsdp_shard_to_part(f, f->params, part);
    dist_group_allgatherv_f32(f->group, part, flat, counts, displs);
    free(part), free(counts);
}

void model_rollout_open(model_rollout *w, const tsr_model *m, tsr_fsdp *fsdp, const tsr_lora *lora,
                        const tsr_ops *ops) {
    w->m = *m;
    w->m.src = NULL, w->m.lora = NULL, w->m.fwd = NULL, w->m.scores = NULL;
    w->m.bwd_weighted = NULL, w->m.moe_stats = NULL;
    w->own = NULL, w->ops = ops;
    const size_t bytes = m->n_params * sizeof(float);
    if (fsdp || lora) w->own = ops->alloc(bytes);
    if (fsdp) model_gather_full(fsdp, w->own);
    else if (lora) memcpy(w->own, m->params, bytes);
    if (w->own) w->m.params = w->own;
    if (lora) lora_merge(lora, lora->w, &w->m);
}

void model_rollout_close(model_rollout *w) {
    if (w->own) w->ops->free(w->own);
    w->own = NULL;
}
