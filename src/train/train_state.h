/* train_state.h — the trainer's state, in owned parts, and the small questions asked of it.
 *
 * The lowest header of src/train/: the modules that work on the trainer (checkpointing,
 * train_gpu) include this, not trainer.h, and trainer.c, which drives them, sits above them all,
 * so no include goes around in a circle. The parts the layers below the trainer see (the
 * partition, the backend, the outputs, a step's figures) are run/run.h's, and the trainer hands
 * them over as its view, `run` (the telemetry, the objective table, the post-training objectives
 * take that, never the trainer). Batch math: run/run.h.
 */
#ifndef TSR_TRAIN_STATE_H
#define TSR_TRAIN_STATE_H

#include <stdint.h>
#include <stdio.h>

#include "model/model_ring.h"
#include "optim/schedule.h"
#include "run/guard.h"
#include "run/run.h"

struct icl_suite;
struct checkpointing_importer;
struct trainer_icl_api;

/* What the program hands the trainer from the layers above it (docs/architecture.md
 * "Hand-overs"): given to trainer_init, kept in the trainer for its run; no process-global state.
 * A NULL member: the program has none of it (a dry run uses none). */
typedef struct trainer_uses {
    /* --init-from a Hugging Face directory or a PEFT adapter (model/model_importer.h; src/hf's
     * hf_checkpointing_importer); NULL: every --init-from names a checkpoint */
    const struct checkpointing_importer *importer;
    /* icl_tasks' scorer (train/trainer.h; src/eval/train_icl.h); NULL: a recipe with icl_tasks is
     * refused */
    const struct trainer_icl_api *icl;
    /* the report tool's reader of the run's accounting (src/report/account_read.h
     * account_run_line), for the log's last "cost: run so far" line: reads the accounting of
     * run_dir (path) and writes the line for `steps` steps into line (n bytes); -1 error, 1
     * written, 0 not. NULL: no such line */
    int (*run_line)(const char *path, int64_t steps, char *line, size_t n);
} trainer_uses;

typedef struct tsr_trainer {
    tsr_config cfg;
    tsr_dist dist;
    /* what the run optimises: its objective's table (run/objective.h: lm, dpo, grpo), chosen
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
    tsr_dataloader data;         /* the run's data: its datasets, the batch (data/dataloader.h) */
    tsr_train_part part;
    tsr_train_out out;
    tsr_train_ckpt ck;
    tsr_train_backend be;
    struct tsr_sdc *sdc;         /* silent data corruption checks (train/sdc.h; docs/health.md) */
    trainer_uses uses;           /* what the program handed over (trainer_init) */
    tsr_run run;                 /* the view of all this the layers below the trainer take
                                  * (run/run.h; filled by trainer_init) */
} tsr_trainer;

/* The model is held in another layout than the whole model's (tensor parallelism's split, a
 * pipeline rank's part): its checkpoints go through the exchange into the global layout
 * (part.tpio, model/model_tp.h tp_io). */
int trainer_split(const tsr_trainer *t);
/* Sequences the allocated activations hold (on the device with device = cuda); 0: none yet. */
int trainer_acts_B(const tsr_trainer *t);
/* micro_batch = auto: the largest divisor of the per-rank batch that is at most `at_most` (>= 1). */
int trainer_micro_at_most(const tsr_trainer *t, int64_t at_most);
/* The flat layout's sums over the ranks that hold the same layout (t->part.flat: the world, or
 * the tensor_data group under tensor parallelism): buf (n) summed in place (ddp); send (the
 * layout) reduce-scattered into recv (this rank's part, part_counts); buf's parts all-gathered in
 * place (zero1's update, a load). */
void trainer_flat_allreduce(tsr_trainer *t, float *buf, size_t n);
void trainer_flat_reduce_scatter(tsr_trainer *t, const float *send, float *recv);
void trainer_flat_allgather(tsr_trainer *t, float *buf);
/* The end-of-run sample's host model, on = 1 before it and 0 after: every expert on every rank
 * (ep_full), and under zero3 / hsdp the shard's gathers forgotten (device = cuda pulls the shard
 * into it first). Collective. */
void trainer_host_weights(tsr_trainer *t, int on);


#endif
