/* gpu_train_ctx.h — the trainer as the CUDA path sees it (gpu_train.h, gpu_shard.h).
 *
 * The trainer's glue (src/train/train_gpu.c) fills it from the trainer: what the library reads
 * (layout, batch, sharding, optimizer settings) and the host buffers it mirrors (weights in the
 * host model, AdamW moments, fsdp shards). The library sees nothing else of the trainer, so the
 * CUDA path depends on the layers below it only (config, mesh, model, dist), and the table of entry
 * points checks the size of this struct, not of the whole trainer.
 */
#ifndef TSR_GPU_TRAIN_CTX_H
#define TSR_GPU_TRAIN_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "dist/dist.h"
#include "mesh/mesh.h"
#include "model/model.h"
#include "model/fsdp.h"
#include "model/model_ep.h"

/* parallel.sharding as the GPU runs it: zero1 on one rank is ddp, as on the CPU */
typedef enum { GPU_SHARD_DDP = 0, GPU_SHARD_ZERO1 = 1, GPU_SHARD_FSDP = 3 } gpu_shard_mode;

typedef struct gpu_train_ctx {
    const tsr_dist *dist;
    const tsr_mesh *mesh;      /* the rank mesh (mesh/mesh.h): every communicator the library
                                * opens is over one of its groups (gpu_comm_open) */
    tsr_model *model;          /* the host model: the layout, the host mirror of the weights, and
                                * the evaluation calls the library routes to the device */
    gpu_shard_mode mode;
    int G;                     /* ranks per sharding group (zero3: the world; hsdp: the group) */
    int comm_staged;           /* parallel.gpu_comm = "mpi": the host-staged transport (gpu_comm.h) */
    tsr_fp8_mode fp8;          /* precision.fp8 (docs/cuda.md "FP8") */
    tsr_fp8_skip fp8_skip;     /* precision.fp8_skip */
    int fp8_allgather;         /* precision.fp8_allgather (zero3 / hsdp: gpu_shard.h) */
    int T, micro;              /* seq_len, the microbatch in use */
    int64_t per_rank;          /* sequences per rank and step */
    int auto_micro;            /* micro_batch = auto: the plan must fit a microbatch of 1 */
    const int32_t *inputs, *targets; /* this rank's batch (per_rank, T) */
    const uint8_t *starts;           /* its segment starts (per_rank, T), or NULL (tsr_model.starts) */
    const tsr_optim_config *optim;
    float decay[TSR_P_COUNT];  /* each tensor's weight decay (optim.weight_decay, or 0 by kind) */
    float *m, *v;              /* host mirror of the AdamW moments: ddp (n_params); zero1 the
                                * rank's part of the flat partition; zero3 / hsdp the fsdp shard */
    const size_t *part_counts, *part_displs; /* the flat partition over the world (per rank) */
    tsr_fsdp *fsdp;            /* zero3 / hsdp: the host shards and their plan */
    tsr_ep *ep;                /* parallel.expert > 1: the experts' host store and the exchange
                                * (gpu_ep.h), else NULL */
    /* zero3 / hsdp: the host model about to sample from the pulled shards (on = 1: its gathers
     * forgotten, every expert gathered; train/train_state.h trainer_host_weights) or done (0) */
    void (*host_weights)(void *owner, int on);
    /* An objective with a pass of its own, else NULL (lm): objective = "dpo" (posttrain/dpo.h
     * dpo_compute, over this rank's preference pairs) or "grpo" (posttrain/grpo.h grpo_compute, over
     * this rank's rollout rows), its forwards and weighted backwards sent to the device through
     * the host model's hooks (model.h fwd_ctx: scores, bwd_weighted; the host model's LoRA state
     * is the pass's); returns the rank's share of the loss (DPO: its sum of pair losses). The
     * library zeroes the gradients before it and reduces them after it. */
    double (*objective_pass)(void *owner, float scale);
    void *owner;
    char device_name[128];     /* set by init: the GPU's name (its peak FLOP/s) */
    struct tsr_lora *lora;     /* LoRA (model/model_lora.h): the host adapters' store, the mirror
                                * of the device's (w, m, v; checkpoints read and write it), or
                                * NULL. The base is then frozen: bf16 on the device only */
    uint64_t lora_key;         /* LoRA: the step's dropout key (run/run.h run_lora_key) */
    float lora_decay;          /* LoRA: the adapters' weight decay (weight matrices') */
    double *moe;               /* MoE: the step's statistics the library adds each microbatch's
                                * to (train_state.h tsr_train_out.moe), else NULL */
    /* optim.name = muon, set by the library (src/gpu/gpu_muon.h): the bytes this rank sent in
     * the owners' exchange, the formula's per step and sharding group, the group's size (0: no
     * exchange, ddp); the trainer prints them (optim/optim.h optim_report) */
    uint64_t muon_sent, muon_step_bytes;
    int muon_G;
    int cpN;                   /* parallel.context (docs/parallelism.md): sequences split over
                                * groups of cpN consecutive ranks (1: none); inputs and targets
                                * are still whole sequences */
    int data_rank;             /* this rank's data rank (rank / cpN): LoRA's rows */
    const struct tsr_ring *ring; /* cpN > 1: the library's ring (set by init; its bytes sent and
                                  * blocks skipped, which the trainer reports), else NULL */
    struct tsr_gpu_train *state; /* the library's, NULL before init and after free */
} gpu_train_ctx;

#endif
