/* run.h — a training run as the layers below the trainer see it (docs/architecture.md "Layers",
 * issue 80): the narrow view tsr_run that the telemetry, the objective table and the post-training
 * objectives work on, the parts of the trainer's state it points to (the partition, the backend,
 * the outputs), the figures of a step, and the few questions those layers ask of a run (the
 * LoRA dropout of a pass, an evaluation's scope, the device's context, the resumed checkpoint's
 * config). The trainer (src/train/train_state.h) owns every part and fills one view at start
 * (trainer_init): pointers to its parts and counters, so the view is always current; nothing here
 * includes the trainer, and the layers below it never name it.
 *
 * Batch math (docs/architecture.md "Data flow", docs/training.md): global_batch sequences per
 * optimizer step; data rank r of D takes global positions [s*GB + r*GB/D, s*GB + (r+1)*GB/D) of
 * the sampler's stream in microbatches of micro_batch; the loss is the mean over all counted
 * target tokens of the global batch, so the update does not depend on D beyond floating-point
 * summation order.
 */
#ifndef TSR_RUN_H
#define TSR_RUN_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "data/dataloader.h"
#include "dist/dist.h"
#include "mesh/mesh.h"
#include "model/fsdp.h"
#include "model/model.h"
#include "model/model_ep.h"
#include "model/model_lora.h"
#include "model/model_pp.h"
#include "model/model_tp.h"
#include "optim/optim.h"
#include "run/guard.h"

struct gpu_train_ctx;
struct trainer_strategy;
struct tsr_objective;
struct tsr_tokenizer;

typedef struct tsr_step_stats {
    int64_t step;          /* 1-based index of the step just taken */
    double loss;           /* mean loss over the global batch's counted targets */
    double mtp_loss;       /* multi-token prediction (model.num_nextn_predict_layers): the mean
                            * of its depths' losses, each over the counted targets; NAN without */
    double lr, grad_norm;  /* lr used; global grad norm before clipping */
    int64_t tokens;        /* counted target tokens in the global batch */
    double step_time;      /* seconds */
    double compute_time;   /* seconds of forward/backward on this rank, no collective waits */
    double peak_mem;       /* bytes: the most the training device's allocator held at once so far
                            * (cpu: tsr_ops allocations; cuda: device memory), largest rank */
    double peak_rss;       /* bytes: the process's peak resident memory so far, largest rank */
    int64_t data_batch;    /* index of the global batch in the data stream (docs/spike-guard.md) */
    tsr_guard_verdict verdict; /* GUARD_OK: the update was applied normally */
    char why[768];         /* the guard's reason when verdict != GUARD_OK */
    int rebaselined;       /* the guard restarted its window after this step's outlier */
    int phase_switch;      /* this step's batch starts a curriculum phase */
    int exit_code;         /* not 0: the step failed (GRPO's reward program) and the run stops
                            * with it, nothing applied */
} tsr_step_stats;

/* Who owns which parameters (owner: train/trainer_init.c plan_shards and init_sharded;
 * train/checkpointing_*.c does its I/O through it). The flat parameters are partitioned over the ranks (part_*: 16-float
 * aligned, rank order). ZeRO-1 (zero1 = 1): rank r owns its part [shard_lo, shard_hi), keeps
 * AdamW state for it only, receives its summed gradients by reduce-scatter and all-gathers its
 * updated parameters. DDP: every rank owns [0, n_params), gradients are all-reduced, and the
 * partition only splits checkpoint I/O. ZeRO-3 / HSDP (fsdp_on): weights, gradients and moments
 * live as fsdp shards (model/fsdp.h); m, v are (fsdp.shard_n) in shard order, model.params/grads
 * are NULL. */
typedef struct tsr_train_part {
    int zero1;
    size_t shard_lo, shard_hi;
    int fsdp_on, fsdp_group;     /* fsdp_group: G, the ranks that share one copy of the state */
    tsr_fsdp fsdp;
    float *ckio[3];              /* fsdp checkpoint I/O: weights, m, v in the flat partition */
    float *ep_io[3];             /* parallel.expert, world ranks < EP: their part of the expert
                                  * tensors (model_ep.h ep_to_part), weights, m, v */
    size_t *part_counts, *part_displs; /* per rank (size_t: a flat buffer may pass 2^31 floats) */
    float *gslice;               /* ZeRO-1: summed gradients of the owned slice */
    float *m, *v;                /* the optimizer's state of the owned slice (optim below) */
    int lora_on;                 /* lora.rank > 0: the base is frozen (no gradients, no AdamW
                                  * state: m, v, gslice are NULL) and the adapters in lora train
                                  * (model/model_lora.h) */
    tsr_lora lora;
    int ep_on;                   /* parallel.expert > 1: the experts live in ep, outside the
                                  * flat layout and the sharding above (model/model_ep.h) */
    tsr_ep ep;
    uint64_t ep_sent_steps;       /* ep.sent_bytes before an evaluation (run_eval_scope) */
    int tp_on;                   /* parallel.tensor > 1: the model is this rank's split of the
                                  * tensor group's (model/model_tp.h); the flat layout's sums,
                                  * parts and partition run over the tensor_data group (flat),
                                  * the checkpoints go through tpio's exchange into the global
                                  * layout (this rank's part of it per set: tp_gpart) */
    tsr_tp tp;
    tp_io tpio;
    float *tp_gpart[3];
    uint64_t tp_sent_steps;      /* tp.sent before an evaluation (run_eval_scope) */
    int pp_on;                   /* parallel.pipeline > 1: the model is this pipeline rank's part
                                  * (model/model_pp.h), its flat layout's sums and parts over the
                                  * mesh's stage group (flat), its steps the schedule's
                                  * (train/pipeline.h) */
    tsr_pp pp;
    struct pp_exec *ppx;         /* the schedule's executor (train/pipeline_int.h) */
    tsr_group *flat;             /* the ranks that hold this rank's flat layout: NULL (the world)
                                  * or the mesh's tensor_data group (stage: a pipeline) */
    int flat_rank, flat_world;   /* this rank's place among them, their count */
    tsr_optim optim;             /* the optimizer slot (optim/optim.h): AdamW or Muon over the
                                  * owned parts, m and v its state (Muon: its matrices'
                                  * momentum is m over their elements; v stays zero there); off
                                  * on device = cuda (the library's) */
} tsr_train_part;

/* The silent-data-corruption checks of this process so far (train/sdc.h; docs/health.md
 * "Telemetry"): metrics.jsonl's health event, the Prometheus file, the account's health part. */
typedef struct tsr_health_figures {
    int64_t comparisons, rest_checks, replays, replay_mismatches, transients;
    int found;                   /* a corruption stopped this start */
    double step_s;               /* seconds they took inside the steps (hashing, comparing,
                                  * replaying): the account's health part (telemetry/account.h) */
} tsr_health_figures;

/* What the run reports (owner: telemetry/metrics.c). */
typedef struct tsr_train_out {
    FILE *metrics;               /* run_dir/metrics.jsonl on rank 0, else NULL */
    struct tsr_tboard *tb;       /* run_dir/tb/ event file on rank 0 (telemetry/tboard.h), else NULL */
    double flops_per_token, peak_flops, time_sum; /* time_sum: this process's steps 2.. */
    double planned_bytes;        /* the plan's memory of a rank at the current microbatch (the
                                  * TensorBoard step's memory/planned_bytes: plan_rank_bytes, set
                                  * by the trainer before each step is logged) */
    int64_t steps_run;           /* steps run by this process (the ETA and average divide by it) */
    double *moe;                 /* MoE models: the step's statistics summed over microbatches and
                                  * ranks, LM records of [aux, z, tokens per expert] (decoder.h
                                  * dec_moe_stats_add; the losses weighted as docs/moe.md says);
                                  * NULL in a dense model */
    int moe_layers;              /* moe's records: the whole model's MoE layers (a pipeline stage
                                  * adds its own layers' at their places) */
    tsr_health_figures health;   /* the silent-data-corruption checks so far (train/sdc.h) */
    struct {                     /* the checkpoint read at start (resume, init-from), read before */
        char what[16];           /* run_dir is opened: logged by trainer_open_run_dir; "" none */
        char path[1200];
        double seconds;
        uint64_t bytes;
    } start_load;
} tsr_train_out;

/* The checkpoints this process writes (owner: train/checkpointing_save.c; docs/checkpoint-format.md
 * "Asynchronous save"). */
typedef struct tsr_train_ckpt {
    int async;                   /* save_async in effect: the config's, off when the snapshot does
                                  * not fit host memory (trainer_init's check) */
    int64_t committed;           /* the step of the last checkpoint this process committed, -1 */
    uint64_t snap_plan;          /* the memory plan's snapshot: checkpointing_snapshot_bytes */
    uint64_t io_plan;            /* and its checkpoint I/O: checkpointing_io_bytes */
    int copy_in_step;            /* save_async_copy in effect: the copy into snap in the save step */
    float *snap;                 /* the snapshot: this rank's slices of every tensor (host memory,
                                  * allocated and written once at start: trainer_init) */
    size_t snap_cap;             /* its floats */
    struct ckpt_pending *pending;/* the save being written in the background, else NULL */
    int copied;                  /* its writer has copied the slices into snap (the state may
                                  * change: checkpointing_before_update) */
    double blocking;             /* its seconds of stopped training so far (pull, start, the wait
                                  * for the copy) */
    double snap_s;               /* of those, the main thread's part of the snapshot (the device's
                                  * state pulled, zero3 / hsdp parts moved into it) */
} tsr_train_ckpt;

/* Where the step runs (owner: train/trainer.c; the CUDA path: train/train_gpu.c). */
typedef struct tsr_train_backend {
    const tsr_ops *ops;          /* the host's fp32 ops */
    struct gpu_train_ctx *gpu;   /* device = cuda: what the CUDA path sees (train/train_gpu.h),
                                  * else NULL */
    const struct trainer_strategy *strategy; /* ddp, zero1, fsdp, lora or device (trainer.c) */
    int threads;
} tsr_train_backend;

/* The view: what the telemetry, the objective table and the post-training objectives see of a
 * run. Every member points into the trainer that filled it (trainer_init), so it reads as the run
 * is now; the parts are the trainer's, lent, not copied. */
typedef struct tsr_run {
    tsr_config *cfg;             /* the run's config (an objective resolves its own auto keys in
                                  * it: dpo.reference, grpo.reference; records its references'
                                  * checksums) */
    const tsr_dist *dist;        /* the world */
    tsr_mesh *mesh;              /* the rank mesh: every group (mesh/mesh.h) */
    tsr_model *model;            /* the host's model (device = cuda: its layout, the sample's
                                  * weights) */
    tsr_train_part *part;        /* who owns which parameters: sharding, LoRA, experts */
    tsr_train_backend *be;       /* where the step runs: the host's ops, the device's context */
    tsr_train_out *out;          /* what the run reports, and the checkpoint read at start */
    tsr_dataloader *data;        /* the run's data: its datasets and this rank's batch */
    const struct tsr_tokenizer *tok; /* data.tokenizer, loaded at start, or NULL */
    const struct tsr_objective *objective; /* what the run optimises (run/objective.h) */
    void *objective_state;       /* its own state, made by its table's create (or NULL) */
    /* the trainer's counters, read-only */
    const int *T;                /* seq_len */
    const int *micro;            /* micro_batch in use (rows: grpo's completions) */
    const int64_t *per_rank;     /* this data rank's samples of a global batch */
    const int64_t *step;         /* the steps taken */
    const int64_t *total_steps;  /* the run's steps (max_duration) */
    const int64_t *tokens_seen;  /* tokens trained on so far */
} tsr_run;

/* LoRA's dropout in microbatch b (its first row in this rank's batch) of the current step
 * (model/model_lora.h lora_set_pass): the key of the step's data batch and the global row number
 * of the microbatch's first row, so that a row's mask does not depend on the rank count. No-op
 * without LoRA. */
void run_lora_pass(const tsr_run *r, int64_t b);
/* LoRA: the dropout key of the current step (its data batch), the same for every microbatch and
 * rank; device = cuda hands it to the library each step (run_gpu). */
uint64_t run_lora_key(const tsr_run *r);
/* Around an evaluation (validation loss, ICL, DPO's reference pass): on = 1 before it, 0 after.
 * Ranks score different numbers of batches there, and a forward whose weights or experts live
 * on other ranks is a collective (zero3 / hsdp gather each unit, parallel.expert exchanges the
 * routed rows), so every rank tops up with idle forwards (model_forwards_most, model_forward's
 * B = 0): no rank gathers the full weights or every expert. The scope leaves the evaluation's
 * expert exchange and tensor group traffic out of the run's counts (ep_report, tp.sent: the
 * steps' traffic). */
void run_eval_scope(const tsr_run *r, int on);
/* device = cuda: the CUDA path's context with the current microbatch (micro_batch = auto lowers
 * it) and, with LoRA, the step's dropout key. */
struct gpu_train_ctx *run_gpu(const tsr_run *r);
/* parallel.sharding = zero3 | hsdp: the ranks per sharding group (zero3: the world; hsdp:
 * parallel.replica_group, 0 = the ranks of one node). 0 and *G, or TSR_EXIT_USAGE after naming the
 * key when G does not divide the world (the start, the device's context, the time plan). */
int run_shard_group(const tsr_config *cfg, int world, int local_world, int *G);
/* On a resume (rank 0): the config recorded in the checkpoint read (r->out->start_load.path)
 * into ck: what the run was trained with (the stored references' checksums). 0, or -1 when it
 * cannot be read (quietly: the resume reported it). */
int run_resumed_config(const tsr_run *r, tsr_config *ck);

#endif
