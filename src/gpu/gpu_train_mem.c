/* gpu_train_mem.c — the device memory plan of the CUDA trainer (gpu_train_int.h): the state
 * by sharding mode, the step's losses and MoE statistics, Muon's buffers, a microbatch's
 * activations and what the first passes allocate beside them. */
#include <stddef.h>

#include "common.h"
#include "gpu/gpu_train_int.h"

/* optim.name = muon: the iteration's buffers (u with flat matrices: ddp, the experts' store)
 * and, sharded, the owners' exchange over the group (gpu_muon.h) */
size_t gtrain_muon_bytes(const gpu_train_ctx *c) {
    const int sharded = c->mode != GPU_SHARD_DDP;
    return gpu_muon_bytes(c->model, c->optim, !sharded || c->model->EP > 1, sharded ? c->G : 0);
}

/* device bytes of tsr_gpu_train.losses and .moe_stage */
size_t gtrain_losses_bytes(const gpu_train_ctx *c) {
    return ((size_t)c->per_rank * (size_t)c->T * sizeof(float) + 255) / 256 * 256;
}
size_t gtrain_moe_stage_bytes(const gpu_train_ctx *c) {
    return ((size_t)c->per_rank * gpu_model_moe_stage_bytes(c->model) + 255) / 256 * 256;
}

/* parallel.expert: the experts' store (gpu_ep.h), beside the flat state */
static size_t expert_bytes(const gpu_train_ctx *c) {
    return c->model->EP > 1 ? gpu_ep_state_bytes(c->model, c->model->EP) : 0;
}

static size_t state_bytes(const gpu_train_ctx *c);

/* the state, the step's losses and MoE statistics (evaluations run on the training's buffers:
 * zero3 / hsdp on the shards, parallel.expert through the exchange; train/train_state.h) */
size_t gtrain_fixed_bytes(const gpu_train_ctx *c) {
    return state_bytes(c) + gtrain_losses_bytes(c) + gtrain_moe_stage_bytes(c);
}

static size_t state_bytes(const gpu_train_ctx *c) {
    const tsr_model *m = c->model;
    /* LoRA: the bf16 base (whole, or its frozen shard and gathers), the adapters' w, g, m, v,
     * the norm's accumulator */
    if (c->lora && c->mode != GPU_SHARD_DDP)
        return gpu_shard_bytes(m, 0, c->G, 1) + lora_store_bytes(c->lora) + 512;
    if (c->lora)
        return gpu_model_state_bytes(m, GPU_STATE_FROZEN) + lora_store_bytes(c->lora) + 256;
    if (c->mode != GPU_SHARD_DDP)
        return gpu_shard_bytes(m, c->mode == GPU_SHARD_ZERO1, c->G, 0) + expert_bytes(c) +
               gtrain_muon_bytes(c) + 512;
    return gpu_model_state_bytes(m, GPU_STATE_FULL) + 2 * m->n_params * sizeof(float) +
           expert_bytes(c) + gtrain_muon_bytes(c) + 256;
}

/* The activations for B sequences and, under parallel.expert, the exchange's buffers (balanced
 * routing: gpu_ep_exchange_bytes) */
/* a microbatch of B: the activations (the decoder's plan on the CUDA backend, with the linear
 * layers' one backward slot: their activation gradients and the core's scratch, TSR_A_DNBWD),
 * parallel.expert's exchange buffers, LoRA's scratch, precision.fp8's operands' scratch (a
 * pipeline stage holds gpu_pp_sets of them: the plan's pipeline line, check_memory) */
size_t gtrain_acts_bytes(const gpu_train_ctx *c, int B) {
    return gpu_model_acts_bytes(c->model, B, c->T) +
           (c->model->EP > 1 ? gpu_ep_exchange_bytes(c->model, c->model->EP, B, c->T) : 0) +
           (c->lora ? gpu_model_lora_scratch_bytes(c->lora, B * c->T) : 0) +
           (c->fp8 != TSR_FP8_NONE ? gpu_model_fp8_scratch_bytes(c->model, B * c->T, c->fp8_skip) : 0) +
           gpu_tp_scratch_bytes(c->model, B, c->T);
}
