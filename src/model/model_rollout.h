/* model_rollout.h — the model a generation decodes on while the run trains (GRPO's rollouts,
 * docs/rl.md): a view of the training model whose weights are full and merged and which carries
 * none of the training's hooks, and the full-weight gather of a sharded model (zero3 / hsdp) it
 * needs. The trainer's model is not touched: the view is a copy of its struct, over its weights or
 * over a full copy of them. */
#ifndef TSR_MODEL_ROLLOUT_H
#define TSR_MODEL_ROLLOUT_H

#include "model/fsdp.h"
#include "model/model.h"
#include "model/model_lora.h"

/* zero3 / hsdp: every unit of f's shard gathered once into flat (the model's n_params floats):
 * the shard to its part of the flat layout, the parts all-gathered over f's group. Collective
 * over the group. */
void model_gather_full(tsr_fsdp *f, float *flat);

typedef struct model_rollout {
    tsr_model m;         /* the training model's struct, its weights full and merged, its
                          * training hooks (the sharded source, the adapters, the pass hooks,
                          * the MoE statistics) off */
    float *own;          /* the full copy of the weights, when one was made */
    float *slopes;       /* a split model's: the whole model's ALiBi slopes (else NULL) */
    const tsr_ops *ops;  /* where own came from */
} model_rollout;

/* The view of m for generation: fsdp (zero3 / hsdp, else NULL): the weights gathered into a copy
 * (model_gather_full; collective over its group); lora (else NULL): the adapters merged into a
 * copy of the base (lora_merge); neither: m's own weights. ops: the host ops a copy comes from.
 * A split model (tensor parallelism, model_tp.h): the whole model, its weights made whole over
 * the tensor group (tp_whole; collective over it, after fsdp's gather): a whole model a rank
 * while the view is open. */
void model_rollout_open(model_rollout *w, const tsr_model *m, tsr_fsdp *fsdp, const tsr_lora *lora,
                        const tsr_ops *ops);
void model_rollout_close(model_rollout *w);

#endif
