/* trainer.h — the training loop: data-parallel steps over MPI, AdamW, schedule, eval, metrics.
 *
 * Batch math (docs/architecture.md "Data flow", docs/training.md): global_batch sequences per optimizer step; rank r of W takes global
 * positions [s*GB + r*GB/W, s*GB + (r+1)*GB/W) of the sampler's stream in microbatches of
 * micro_batch; the loss is the mean over all counted target tokens of the global batch, so the
 * update does not depend on W beyond floating-point summation order.
 */
#ifndef TSR_TRAINER_H
#define TSR_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "data/data.h"
#include "dist.h"
#include "data/mix.h"
#include "model/model.h"
#include "train/fsdp.h"
#include "train/guard.h"

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
    char why[512];         /* the guard's reason when verdict != GUARD_OK */
    int rebaselined;       /* the guard restarted its window after this step's outlier */
    int phase_switch;      /* this step's batch starts a curriculum phase */
} tsr_step_stats;

struct tsr_stager;
struct icl_suite;

typedef struct tsr_trainer {
    tsr_config cfg;
    tsr_dist dist;
    const tsr_ops *ops;
    tsr_model model;
    tsr_dataset *train, *val;    /* train = streams[0] */
    tsr_sampler sampler;         /* = samplers[0] */
    /* Training streams (src/train/train_data.c): data.train alone is one stream named "train";
     * data.mix lists several. Global batch d of the data stream is composed by `mix`. */
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
    int64_t data_offset;         /* data batch of step s (0-based) = s + data_offset (rollbacks) */
    int64_t optim_step;          /* AdamW updates applied (the bias-correction step) */
    tsr_guard guard;
    int T, micro;                /* seq_len, micro_batch (the value in use) */
    int auto_micro;              /* micro_batch = auto: micro starts at per_rank (or the value a
                                  * resumed checkpoint kept) and halves on out-of-memory */
    int64_t per_rank, step, total_steps, warmup_steps, eval_every, tokens_seen;
    int64_t save_every;          /* steps between checkpoints, 0 = only at the end */
    /* Optimizer ownership. The flat parameters are partitioned over the ranks (part_*: 16-float
     * aligned, rank order). ZeRO-1 (zero1 = 1): rank r owns its part [shard_lo, shard_hi), keeps
     * AdamW state for it only, receives its summed gradients by reduce-scatter and all-gathers
     * its updated parameters. DDP: every rank owns [0, n_params), gradients are all-reduced, and
     * the partition only splits checkpoint I/O. */
    int zero1;
    size_t shard_lo, shard_hi;
    /* ZeRO-3 / HSDP (fsdp_on): weights, gradients and moments live as fsdp shards (train/fsdp.h);
     * m, v are (fsdp.shard_n) in shard order, model.params/grads are NULL */
    int fsdp_on, fsdp_group;     /* fsdp_group: G, the ranks that share one copy of the state */
    tsr_fsdp fsdp;
    float *ckio[3];              /* fsdp checkpoint I/O: weights, m, v in the flat partition */
    size_t *part_counts, *part_displs; /* per rank (size_t: a flat buffer may pass 2^31 floats) */
    float *gslice;               /* ZeRO-1: summed gradients of the owned slice */
    float *m, *v;                /* AdamW moments of the owned slice */
    int32_t *inputs, *targets;   /* this rank's batch (per_rank, T) */
    FILE *metrics;               /* run_dir/metrics.jsonl on rank 0, else NULL */
    struct tsr_tboard *tb;       /* run_dir/tb/ event file on rank 0 (train/tboard.h), else NULL */
    struct icl_suite *icl;       /* icl_tasks, scored at each eval (train/train_icl.h), else NULL */
    struct tsr_tokenizer *tok;   /* data.tokenizer, loaded at start (decodes the samples), else NULL */
    struct tsr_gpu_train *gpu;   /* device = cuda (src/gpu/gpu_train.h), else NULL */
    double flops_per_token, peak_flops, time_sum; /* time_sum: this process's steps 2.. */
    int64_t steps_run;           /* steps run by this process (the ETA and average divide by it) */
    int threads;
    struct {                     /* the checkpoint read at start (resume, init-from), read before */
        char what[16];           /* run_dir is opened: logged by trainer_open_run_dir; "" none */
        char path[1200];
        double seconds;
        uint64_t bytes;
    } start_load;
} tsr_trainer;

/* Checks the tokenizer, opens data, builds the model, prints the plan (rank 0). dry_run: stop
 * after the plan (no data opened, nothing allocated). Writes nothing in run_dir. Returns 0 or an
 * exit code after reporting. */
int trainer_init(tsr_trainer *t, const tsr_config *cfg, const tsr_dist *d, int dry_run);
/* Rank 0 creates run_dir, writes config.cfg, opens metrics.jsonl and a TensorBoard file: called
 * once config, data, tokenizer and checkpoint were all accepted, so a refused start leaves run_dir
 * as it was; then logs the {"event": "start"} record and the checkpoint read at start (resume,
 * init-from: t->start_load). Collective; returns 0 or rank 0's exit code on every rank. */
int trainer_open_run_dir(tsr_trainer *t);
/* One optimizer step on the next global batch. */
void trainer_step(tsr_trainer *t, tsr_step_stats *st);
/* The activations for t->micro sequences, allocated when they are not yet (collective). Under
 * micro_batch = auto an allocation that fails on any rank lowers micro on every rank and retries;
 * at 1 sequence the run stops (exit 1) after printing the memory plan. */
void trainer_ensure_acts(tsr_trainer *t);
/* Sequences the allocated activations hold (on the device with device = cuda); 0: none yet. */
int trainer_acts_B(const tsr_trainer *t);
/* Whether tensors of this kind get weight decay (optim.decay_embeddings, decay_norms_biases). */
int trainer_param_decays(const tsr_optim_config *o, tsr_param_kind kind);
/* micro_batch = auto: the largest divisor of the per-rank batch that is at most `at_most` (>= 1). */
int trainer_micro_at_most(const tsr_trainer *t, int64_t at_most);
/* Mean validation loss over eval_samples (or the whole split); NAN when there is no val set. */
double trainer_eval(tsr_trainer *t);
/* The whole run: steps until max_duration with logging, periodic eval and checkpoints; a stop
 * request (SIGUSR1/SIGTERM on any rank) checkpoints and returns TSR_EXIT_REQUEUE. Returns an
 * exit code. */
int trainer_run(tsr_trainer *t);
void trainer_free(tsr_trainer *t);
/* parallel.sharding = zero3 | hsdp: the ranks per sharding group (zero3: the world; hsdp:
 * parallel.replica_group, 0 = the ranks of one node). 0 and *G, or TSR_EXIT_USAGE after naming the
 * key when G does not divide the world. */
int trainer_shard_group(const tsr_config *cfg, int world, int local_world, int *G);
/* ZeRO-3 / HSDP: on = 1 gathers the full weights for evaluation (like FSDP's
 * summon_full_params): into model.params on every rank on the CPU (eval, ICL and sampling run on
 * them), into the device model under device = cuda (gpu_train_full_weights); on = 0 frees them.
 * Collective; nothing under ddp and zero1. */
void trainer_full_weights(tsr_trainer *t, int on);
/* The host half of it: the host shards gathered into model.params (the CPU backend, and the
 * end-of-run sample of a sharded GPU run after its shards are pulled). */
void trainer_host_weights(tsr_trainer *t, int on);
/* Samples n_new tokens after the prompt (n_prompt >= 1 tokens) with sample.temperature and
 * sample.top_k, deterministically from seed; writes them to out. Local to the calling rank. */
int trainer_sample(tsr_trainer *t, const int32_t *prompt, int n_prompt, int n_new, uint64_t seed,
                   int32_t *out);

/* Learning-rate multiplier at 0-based step s of S with W warmup steps (docs/training.md):
 * s < W: (s+1)/W; then p = (s-W)/max(1, S-W) and cosine: a + (1-a)(1+cos(pi p))/2,
 * linear: 1 - (1-a) p, constant: 1. */
double lr_multiplier(tsr_sched_kind kind, double alpha_f, int64_t s, int64_t W, int64_t S);

#endif
