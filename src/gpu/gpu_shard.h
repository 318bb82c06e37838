/* gpu_shard.h — parallel.sharding = zero1 | zero3 | hsdp on the CUDA backend (docs/sharding.md,
 * docs/cuda.md).
 *
 * One shard layout for the three modes: the units and pieces of model/fsdp.h (unit 0 the root,
 * unit l+1 layer l; a unit split into G pieces of fsdp_piece_len floats, rank order). On the
 * device every piece is padded to that full length (the padding stays zero), so the collectives
 * are NCCL's equal-block reduce-scatter and all-gather and a gathered unit is the unit itself.
 * The shard holds the fp32 master weights, their bf16 copy, the fp32 gradients and both AdamW
 * moments; AdamW runs on the shard, tensor piece by tensor piece (weight decay by kind).
 *
 * zero1 (G = world): the model keeps its flat bf16 weights and fp32 gradients (gpu_model.h
 * GPU_STATE_NO_MASTER). The last microbatch's backward hands each unit, as it completes, to the
 * communication stream: its gradients are packed into the unit layout and reduce-scattered into
 * the shard, overlapping the layers still to come. After the update every unit's bf16 piece is
 * all-gathered and unpacked into the flat weights.
 *
 * zero3 (G = world) and hsdp (G = parallel.replica_group, R = world / G replicas): the model holds
 * no flat weights (GPU_STATE_NONE) and asks this source for each unit. The root is all-gathered
 * once per step and its gradients accumulate over the microbatches; a layer's bf16 weights are
 * all-gathered into one of two slots, the next layer's gather started on the communication stream
 * before this one computes (forward l+1, backward l-1); a layer's gradients go to one of two
 * buffers and are reduce-scattered, then added into the shard, as soon as its backward is queued.
 * Under hsdp the replicas then all-reduce their shards. Evaluation runs on the shards through the
 * same gathers, the ranks topping up their forwards with idle ones (model_forward's B = 0).
 *
 * Host mirror (checkpoints, sampling): as the CPU trainer of the same mode keeps it (the context's
 * buffers, gpu_train_ctx.h). zero3 / hsdp: the fsdp shard and c->m, c->v (unpadded pieces); zero1:
 * the full fp32 weights and c->m, c->v over the rank's part of the flat layout (converted with
 * fsdp_shard_to_part / part_to_shard).
 */
#ifndef TSR_GPU_SHARD_H
#define TSR_GPU_SHARD_H

#include <stddef.h>

#include "gpu/gpu_comm.h"
#include "gpu/gpu_model.h"
#include "gpu/gpu_muon.h"
#include "gpu/gpu_train_ctx.h"

typedef struct gpu_shard {
    const tsr_fsdp *f;      /* the plan: the trainer's (c->fsdp: zero3, hsdp) or own (zero1) */
    tsr_fsdp own;
    int zero1;
    int frozen;             /* zero3 / hsdp under LoRA: the bf16 shard only (no master weights,
                             * gradients or moments), the base never changes */
    tsr_gpu_model *g;
    tcu_stream s;
    gpu_comm *group, *replicas; /* replicas: hsdp with more than one group, else NULL */
    size_t *at;             /* (units) where unit u's piece starts in the device shard */
    size_t *piece_at;       /* (this rank's pieces) their offsets in the device shard */
    tcu_adamw_seg *segs;    /* (this rank's pieces) AdamW's segments, filled per update */
    size_t n;               /* floats in the device shard */
    size_t max_unit;        /* G x the longest piece of a layer unit (zero1: of any unit) */
    float *params, *grads, *m, *v; /* the shard (n) */
    tsr_bf16 *wbf;          /* (n) */
    float *acc;             /* (1) the sum of squares */
    float *pack;            /* zero1: (max_unit) a unit's gradients in the unit layout */
    tsr_bf16 *packbf;       /* zero1: (max_unit) a unit's gathered weights */
    tsr_bf16 *root_w;       /* zero3: (G x piece of unit 0) the gathered root */
    float *root_g;          /* zero3: its gradients, over the step's microbatches */
    int root_valid;
    tsr_bf16 *slot[2];      /* zero3: gathered layer units (max_unit) */
    int slot_unit[2];
    float *layer_g[2];      /* zero3: a layer's gradients (max_unit), alternately */
    int lg_next, lg_cur;
    float *piece;           /* zero3: a unit's reduce-scattered piece */
    tcu_event root_ev, slot_ev[2], lg_ev[2];
    /* precision.fp8_allgather (docs/cuda.md "FP8"): the forward gathers a layer's FP8 linear
     * weights as E4M3 with the whole tensor's scale, the rest of the unit in bf16 */
    int fp8_on;             /* 0: every gather in bf16 (no FP8, the setting off, generation) */
    unsigned char *fp8_seg; /* (units x TSR_P_COUNT) 1: unit u's segment k is gathered in E4M3 */
    int slot_fp8[2];        /* the slot holds its unit's FP8 gather (its bf16 FP8 weights stale) */
    tsr_fp8 *slot8[2];      /* (max_unit) the gathered E4M3 codes, at the unit's offsets */
    float *slot_sc[2];      /* (8 x TSR_P_COUNT) segment k's amax at 4k, its scale_inv at
                             * 4 (TSR_P_COUNT + k): 16-byte slots (tcu_matmul_fp8) */
    tsr_fp8 *q8;            /* (largest piece) this rank's codes */
    tsr_bf16 *rest, *rest_all; /* (rest_n), (G x rest_n): the other elements of the pieces */
    size_t rest_n;          /* the most elements of a layer piece outside its FP8 weights */
    gpu_param_source src;
    float *host;            /* host staging: one shard of f (unpadded) */
    tsr_bf16 *host_bf16;    /* frozen: the host shard rounded to bf16 (unpadded) */
} gpu_shard;

/* Device bytes of the shard state, its buffers, and the model's flat buffers, per rank, for the
 * trainer's sharding mode and group size G (nothing allocated: the plan and --plan use it). */
size_t gpu_shard_bytes(const tsr_model *m, int zero1, int G, int frozen);
/* precision.fp8_allgather: from now on (on = 1, after gpu_shard_init) the forward's gathers of
 * the layer units 1 .. L-2 move their FP8 linear weights (gpu_model_fp8_weight) as E4M3, each
 * shard cast with the common scale of the whole tensor (the shards' amax, a MAX all-reduce of one
 * float per tensor, one call per unit), which the FP8 GEMM takes as gathered; the backward
 * gathers bf16 (and reuses the forward's last two units, gathered in bf16 for it). on = 0 (GRPO's
 * generation: its products read the bf16 weights): every gather in bf16. Bits: the same as bf16
 * gathers, since the cast is element-wise with the scale the whole tensor gets. */
void gpu_shard_fp8_gather(gpu_shard *sh, int on);
/* The bytes a rank receives in one forward pass's layer gathers (units 1 .. L): with fp8 as the
 * FP8 all-gather moves them (the E4M3 codes, the bf16 rest), else all in bf16 */
size_t gpu_shard_forward_gather_bytes(const gpu_shard *sh, int fp8);
/* Plans (zero1), opens the communicators, allocates (the plan was checked against free memory),
 * sets g->src (zero3 / hsdp). 0, or an exit code with the reason reported on rank 0. With
 * c->lora (zero3 / hsdp only) the shard is frozen: bf16 weights gathered per unit, no gradients
 * (the source gives none: the decoder skips the weight gradients), nothing to reduce or update;
 * pull does nothing and push sends the host shard's weights (rounded on the host). */
int gpu_shard_init(gpu_shard *sh, gpu_train_ctx *c, tsr_gpu_model *g, tcu_stream s);
void gpu_shard_free(gpu_shard *sh);
/* A step: zero the gradients; zero1: the callback the last microbatch's backward calls per unit;
 * after the last backward: the remaining reduce-scatters (and the replicas' sum); the sum of
 * squares of the shard's gradients over the group; AdamW on the shard (with mu on, AdamW on the
 * other tensors and Muon's exchange on its matrices: gpu_muon.h) and the weights' refresh. */
void gpu_shard_zero_grads(gpu_shard *sh);
void gpu_shard_zero1_ready(void *sh, int unit);
void gpu_shard_finish_grads(gpu_shard *sh);
double gpu_shard_grad_sumsq(gpu_shard *sh);
void gpu_shard_update(gpu_shard *sh, const gpu_train_ctx *c, gpu_muon *mu, double lr,
                      float gscale, int step);
/* After this rank's pieces of the flat range [flat, flat + n) changed outside an update (their
 * fp32 weights and bf16 copy: the correction bias's balancing step, gpu_train_bias.c): zero1
 * gathers the units holding the range into the model's flat weights again, zero3 / hsdp forget
 * their gathered units. Collective over the group (every rank calls it with the same range). */
void gpu_shard_refresh(gpu_shard *sh, size_t flat, size_t n);
/* Host mirror <- device (weights and moments; collective) and back (the moments when
 * with_optim). */
void gpu_shard_pull(gpu_shard *sh, gpu_train_ctx *c, int with_optim);
void gpu_shard_push(gpu_shard *sh, gpu_train_ctx *c, int with_optim);

#endif
