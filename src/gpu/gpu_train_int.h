/* gpu_train_int.h — internal to src/gpu/gpu_train*.c, the trainer's side of
 * libtessera-cuda-train.so (gpu_train.h is the interface): the library's state and what its files
 * share. gpu_train.c: start-up, the activations, shutdown, the table of entry points; the rest,
 * which it calls: gpu_train_mem.c (the device memory plan), gpu_train_eval.c (the host model's
 * evaluation calls on the device), gpu_train_env.c (the measurement switches of the environment),
 * gpu_train_step.c (a step: the passes, the gradient norm, the update), gpu_train_host.c (the
 * state to and from the host). Calls go one way (gpu_train.c -> the others; gpu_train_host.c ->
 * gpu_train_eval.c). The names are the library's own, not exported by tessera-train (exports.list),
 * so none can capture another's call.
 */
#ifndef TSR_GPU_TRAIN_INT_H
#define TSR_GPU_TRAIN_INT_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu_comm.h"
#include "gpu/gpu_ep.h"
#include "gpu/gpu_model.h"
#include "gpu/gpu_muon.h"
#include "gpu/gpu_ring.h"
#include "gpu/gpu_shard.h"
#include "gpu/gpu_tp.h"
#include "gpu/gpu_train.h"
#include "model/model_lora.h"

struct tsr_gpu_train {
    tsr_gpu_model g;
    tcu_stream s;
    int sharded;          /* zero1 on more than one rank, zero3, hsdp: gpu_shard.h */
    gpu_shard sh;
    gpu_comm *comm;       /* ddp; NULL: one rank and no NCCL (nothing to sum) */
    float *m, *v;         /* ddp: (n_params) AdamW moments */
    float *acc;           /* (1) sum of squares of the gradients */
    int device;
    int sharing;          /* ranks of this node on this GPU (parallel.gpu_comm = "mpi"; else 1) */
    size_t budget;        /* sharing > 1: this rank's part of the device's free memory at start */
    /* per unit (0: root, l+1: layer l) its tensors' slices in the flat buffer */
    int *n_slices;        /* (units) */
    size_t *off, *len;    /* (units * TSR_P_COUNT) */
    int host_acts;        /* lib_host_model(on) allocated host activations */
    gpu_ep ep;            /* parallel.expert: the experts' store and exchange (gpu_ep.h) */
    int ep_on;
    /* LoRA (c->lora set): the base frozen in bf16 (GPU_STATE_FROZEN), the adapters' store on the
     * device with the host store's layout: w, g, m, v of lora.n floats each, the scratch on the
     * device backend (lora.scratch, allocated with the activations) */
    int lora_on;
    tsr_lora lora;
    /* the step's per-position losses (per_rank x T fp32) and, MoE, its microbatches' routing
     * statistics (a stage of gpu_model_moe_stage_bytes per microbatch, room for per_rank of
     * them): each microbatch's copied in on the device, read once when the step's passes are
     * queued (no wait per microbatch) */
    float *losses, *losses_host;
    unsigned char *moe_stage, *moe_stage_host;
    size_t moe_sb; /* bytes of one microbatch's stage (0: no MoE statistics kept) */
    /* optim.name = muon (gpu_muon.h): its matrices' momentum is m (the shard's, the experts'
     * store's), the iteration's scratch and, sharded, the owners' exchange */
    gpu_muon mu;
    void *pinned[8]; /* lib_pin_host's registrations (host buffers lib_pull writes), NULL-ended */
    /* parallel.context (gpu_ring.h): the ring the decoder runs, and a microbatch's targets as
     * this rank's share (the staged losses are the share's, T / N positions a sequence) */
    int ring_on;
    gpu_ring ring;
    int32_t *ring_tg;
    /* parallel.tensor (gpu_tp.h): the decoder's collectives over the tensor group */
    int tp_on;
    gpu_tp tp;
    struct gpu_pp *pp; /* parallel.pipeline (gpu_pp.h: the stage's schedule), or NULL */
};

/* ---- the device memory plan (gpu_train_mem.c) ---- */

/* optim.name = muon: the iteration's buffers and, sharded, the owners' exchange */
size_t gtrain_muon_bytes(const gpu_train_ctx *c);
/* device bytes of tsr_gpu_train.losses and .moe_stage */
size_t gtrain_losses_bytes(const gpu_train_ctx *c);
size_t gtrain_moe_stage_bytes(const gpu_train_ctx *c);
/* the state, the step's losses and MoE statistics */
size_t gtrain_fixed_bytes(const gpu_train_ctx *c);
/* a microbatch of B: the activations and what the first passes allocate beside them */
size_t gtrain_acts_bytes(const gpu_train_ctx *c, int B);

/* ---- the host model's evaluation calls (gpu_train_eval.c) ---- */

/* to the device (g), or back to the host ops (g NULL) */
void gtrain_route_model(tsr_model *m, tsr_gpu_model *g);

/* ---- the measurement switches of the environment (gpu_train_env.c) ---- */

/* read and set before the memory plan; collective */
int gtrain_switches(const gpu_train_ctx *c);
/* TSR_ATT_WGMMA=1 against the device, after tcu_init; collective */
int gtrain_check_wgmma(const gpu_train_ctx *c);
/* TSR_GEMM_TUNE's file read after tcu_init, written at the end before tcu_shutdown */
int gtrain_gemm_tune_open(const tsr_dist *d);
void gtrain_gemm_tune_close(const tsr_dist *d);

/* ---- a step (gpu_train_step.c) ---- */

double gtrain_compute(gpu_train_ctx *c, float scale);
double gtrain_grad_sumsq(gpu_train_ctx *c);
void gtrain_update(gpu_train_ctx *c, double lr, float gscale, int step);
/* the correction bias's balancing step (gpu_train_bias.c) */
void gtrain_moe_bias(gpu_train_ctx *c);
/* Multi-token prediction (gpu_mtp.c): the step's module loss zeroed; after a microbatch's forward,
 * the modules' passes, their gradient to the last layer's output set as the model's pp_dy for its
 * backward (last: the modules' units then reduced with ready); the buffers freed at shutdown */
void gtrain_mtp_begin(gpu_train_ctx *c);
void gtrain_mtp_pass(gpu_train_ctx *c, const int32_t *in, const int32_t *tg, float scale,
                     void (*ready)(void *ctx, int unit), void *ctx);
void gtrain_mtp_free(gpu_train_ctx *c);

/* ---- the state to and from the host (gpu_train_host.c) ---- */

void gtrain_pull(gpu_train_ctx *c);
void gtrain_push(gpu_train_ctx *c, int with_optim);
int gtrain_pull_grads(gpu_train_ctx *c);
size_t gtrain_pin_host(gpu_train_ctx *c);
void gtrain_host_model(gpu_train_ctx *c, int on);

#endif
