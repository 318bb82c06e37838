/* train_state.h — the trainer's state, in owned parts, and the small questions asked of it.
 *
 * The lowest header of src/train/ but guard.h: the modules that work on the trainer (metrics,
 * train_data, checkpointing, watchdog, train_gpu) include this, not trainer.h, and trainer.c,
 * which drives them, sits above them all, so no include goes around in a circle.
 *
 * Batch math (docs/architecture.md "Data flow", docs/training.md): global_batch sequences per
 * optimizer step; rank r of W takes global positions [s*GB + r*GB/W, s*GB + (r+1)*GB/W) of the
 * sampler's stream in microbatches of micro_batch; the loss is the mean over all counted target
 * tokens of the global batch, so the update does not depend on W beyond floating-point summation
 * order.
 */
#ifndef TSR_TRAIN_STATE_H
#define TSR_TRAIN_STATE_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "data/data.h"
#include "data/mix.h"
#include "dist.h"
#include "mesh/mesh.h"
#include "model/model.h"
#include "model/fsdp.h"
#include "model/model_ep.h"
#include "model/model_lora.h"
#include "model/model_ring.h"
#include "train/guard.h"
#include "optim/optim.h"
#include "optim/schedule.h"

typedef struct tsr_step_stats {
    int64_t step;          /* 1-based index of the step just taken */
    double loss;           /* mean loss over the global batch's counted targets */
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

struct tsr_stager;
struct icl_suite;
struct gpu_train_ctx;
struct trainer_strategy;
struct tsr_grpo;
struct tsr_objective;

/* The data streams and this rank's batch (owner: train/train_data.c). data.train alone is one
 * stream named "train"; data.mix lists several. Global batch d of the data stream is composed by
 * `mix`. */
typedef struct tsr_train_data {
    tsr_dataset *train, *val;    /* train = streams[0] */
    tsr_sampler sampler;         /* = samplers[0] */
    int n_streams;
    tsr_dataset *streams[TSR_MAX_STREAMS];
    const char *stream_names[TSR_MAX_STREAMS], *stream_paths[TSR_MAX_STREAMS];
    tsr_sampler samplers[TSR_MAX_STREAMS];
    tsr_mix mix;
    int64_t stream_seen[TSR_MAX_STREAMS];   /* samples trained on per stream (not skipped away) */
    int64_t stream_loaded[TSR_MAX_STREAMS]; /* this rank's samples per stream in the current batch */
    int *slot_stream;            /* (per_rank) scratch of load_batch */
    uint64_t *slot_pos;
    struct tsr_stager *stagers[TSR_MAX_STREAMS]; /* data.stage_to, else NULL */
    int *node_ranks, n_node_ranks; /* global ranks on this node (staging) */
    int stage_started;
    int64_t stage_last[2];       /* staged / in-place reads at the last window boundary */
    double stage_fetch_wait;     /* s (max over ranks): an object-store window waited for its
                                  * shards since the last staging line (train_data.c) */
    double step_wait;            /* s this step waited for data before it began (train_data.c) */
    struct tsr_stager *val_stager; /* data.val on an object store: staged whole, else NULL */
    int64_t data_offset;         /* data batch of step s (0-based) = s + data_offset (rollbacks) */
    int32_t *inputs, *targets;   /* this rank's batch (per_rank, T) */
    uint8_t *starts;             /* its segment starts (per_rank, T) when attn_mask = document
                                  * and a stream records them (tsr_model.starts), else NULL */
    uint64_t *row_sample;        /* (per_rank) the sample index of each row of the batch in its
                                  * stream (objective = dpo: row 2j's / 2 is the pair) */
} tsr_train_data;

/* objective = dpo with dpo.reference = precomputed (owner: train/dpo_ref.c; docs/dpo.md): the
 * initial model's log-probabilities of every pair, (pairs, 2): [2p] chosen, [2p + 1] rejected,
 * the same on every rank; on = 0 (base reference, lm): none. */
typedef struct tsr_dpo_ref {
    int on;
    int loaded;                  /* read on resume (not computed) */
    int copy;                    /* read from beside another run's checkpoint: to be written into
                                  * run_dir once it is opened */
    double *train, *val;         /* data.train's pairs; data.val's first n_val (NULL: none) */
    uint64_t n_train, n_val;
    char init[1024];             /* the initial model they were computed on, as recorded */
    uint32_t crc;                /* the file's checksum (its trailer): dpo.reference_checksum */
} tsr_dpo_ref;

/* Who owns which parameters (owner: trainer_init.c plan_shards and init_sharded; checkpointing_*.c does
 * its I/O through it). The flat parameters are partitioned over the ranks (part_*: 16-float
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
    uint64_t ep_sent_steps;       /* ep.sent_bytes before an evaluation (trainer_eval_scope) */
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
    int64_t steps_run;           /* steps run by this process (the ETA and average divide by it) */
    double val_accuracy;         /* objective = dpo: the last evaluation's pair accuracy */
    double dpo[6];               /* objective = dpo: the step's sums over its pairs (ranks summed,
                                  * train/dpo.h DPO_*), divided by the pairs when logged */
    double grpo[16];             /* objective = grpo: the step's statistics (rl/grpo.h GRPO_*;
                                  * sums over its completions, the same on every rank) */
    double val_reward;           /* objective = grpo: the last evaluation's mean reward */
    double *moe;                 /* MoE models: the step's statistics summed over microbatches and
                                  * ranks, LM records of [aux, z, tokens per expert] (decoder.h
                                  * dec_moe_stats_add; the losses weighted as docs/moe.md says);
                                  * NULL in a dense model */
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

/* Where the step runs (owner: trainer.c; the CUDA path: train/train_gpu.c). */
typedef struct tsr_train_backend {
    const tsr_ops *ops;          /* the host's fp32 ops */
    struct gpu_train_ctx *gpu;   /* device = cuda: what the CUDA path sees (train/train_gpu.h),
                                  * else NULL */
    const struct trainer_strategy *strategy; /* ddp, zero1, fsdp, lora or device (trainer.c) */
    int threads;
} tsr_train_backend;

typedef struct tsr_trainer {
    tsr_config cfg;
    tsr_dist dist;
    /* what the run optimises: its objective's table (train/objective.h: lm, dpo, grpo), chosen
     * once from cfg.objective by trainer_init */
    const struct tsr_objective *objective;
    /* The rank mesh (src/mesh/mesh.h; built by trainer_init.c mesh_open; docs/parallelism.md): data x
     * context, with the expert and sharding groups. The N consecutive ranks of a context group
     * (parallel.context) share their sequences, each holding 2 of every sequence's 2N chunks
     * (model/model_ring.h); the batch is split over the D = world / N data ranks (mesh.data), as
     * it is over the world when N = 1 (batch math above, with W = D). The sharding modes and
     * expert parallelism work over the world's ranks as without it: every rank holds its own
     * tokens. */
    tsr_mesh mesh;
    tsr_ring ring;               /* N > 1: the CPU model's ring over mesh's context group
                                  * (model.ring) */
    tsr_model model;
    tsr_guard guard;
    int T, micro;                /* seq_len, micro_batch (the value in use) */
    int auto_micro;              /* micro_batch = auto: micro starts at per_rank (or the value a
                                  * resumed checkpoint kept) and halves on out-of-memory */
    int64_t per_rank, step, total_steps, warmup_steps, eval_every, tokens_seen;
    tsr_sched_steps sched;       /* the learning-rate schedule's steps (sched_steps_of) */
    uint64_t epoch_samples;      /* the training set's samples (durations in epochs) */
    int64_t save_every;          /* steps between checkpoints, 0 = only at the end */
    int64_t optim_step;          /* steps whose update was applied (the bias-correction step;
                                  * grpo.updates > 1: trainer.c step_update) */
    struct icl_suite *icl;       /* icl_tasks, scored at each eval (eval/train_icl.h), else NULL */
    struct tsr_tokenizer *tok;   /* data.tokenizer, loaded at start (decodes the samples), else NULL */
    tsr_train_data data;
    tsr_dpo_ref dpo_ref;
    struct tsr_grpo *grpo;       /* objective = grpo: prompts, rollouts, reward (rl/grpo.h) */
    tsr_train_part part;
    tsr_train_out out;
    tsr_train_ckpt ck;
    tsr_train_backend be;
    struct tsr_sdc *sdc;         /* silent data corruption checks (train/sdc.h; docs/health.md) */
} tsr_trainer;

/* Sequences the allocated activations hold (on the device with device = cuda); 0: none yet. */
int trainer_acts_B(const tsr_trainer *t);
/* micro_batch = auto: the largest divisor of the per-rank batch that is at most `at_most` (>= 1). */
int trainer_micro_at_most(const tsr_trainer *t, int64_t at_most);
/* parallel.sharding = zero3 | hsdp: the ranks per sharding group (zero3: the world; hsdp:
 * parallel.replica_group, 0 = the ranks of one node). 0 and *G, or TSR_EXIT_USAGE after naming the
 * key when G does not divide the world. */
int trainer_shard_group(const tsr_config *cfg, int world, int local_world, int *G);
/* Around an evaluation (validation loss, ICL, DPO's reference pass): on = 1 before it, 0 after.
 * Ranks score different numbers of batches there, and a forward whose weights or experts live
 * on other ranks is a collective (zero3 / hsdp gather each unit, parallel.expert exchanges the
 * routed rows), so every rank tops up with idle forwards (model_forwards_most, model_forward's
 * B = 0): no rank gathers the full weights or every expert. The scope leaves the evaluation's
 * expert exchange out of the run's count (ep_report: the steps' traffic). */
void trainer_eval_scope(tsr_trainer *t, int on);
/* The end-of-run sample's host model, on = 1 before it and 0 after: every expert on every rank
 * (ep_full), and under zero3 / hsdp the shard's gathers forgotten (device = cuda pulls the shard
 * into it first). Collective. */
void trainer_host_weights(tsr_trainer *t, int on);

/* On a resume (rank 0): the config recorded in the checkpoint read (t->out.start_load.path) into
 * ck: what the run was trained with (the stored references' checksums). 0, or -1 when it cannot
 * be read (quietly: the resume reported it). */
int trainer_resumed_config(const tsr_trainer *t, tsr_config *ck);
/* Every rank's node, as Slurm names it when srun started the rank (SLURMD_NODENAME: what
 * ExcNodeList and scontrol take, though two test nodes may share a host), else its host name;
 * into nodes[world]. The watchdog's and the fingerprints' messages name ranks by it.
 * Collective. */
void trainer_node_names(const tsr_trainer *t, char (*nodes)[64]);

/* LoRA: the dropout of microbatch b of this rank's batch in the current step (model_lora.h
 * lora_set_pass): the step's data batch gives the key, the global row of the microbatch's first
 * row the row numbers. No-op without LoRA. */
void trainer_lora_pass(tsr_trainer *t, int64_t b);
/* LoRA: the dropout key of the current step (its data batch), the same for every microbatch and
 * rank; device = cuda hands it to the library each step (train_gpu.c). */
uint64_t trainer_lora_key(const tsr_trainer *t);

#endif
