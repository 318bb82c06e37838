/* trainer.h — the training run: its start (the config checked against the data, the model and
 * the world, the plan), its steps, evaluations and the loop that ends in a checkpoint. A step
 * is one story whatever the run: the batch (or GRPO's rollouts), forward and backward of the
 * objective (lm, dpo, grpo) over the microbatches, the gradients reduced by the sharding
 * strategy (ddp, zero1, zero3 / hsdp, LoRA's adapters, or device = cuda's library), the global
 * norm, the spike guard's verdict, clipping, the update by the optimizer slot (optim/optim.h:
 * AdamW or Muon at the schedule's learning rate, optim/schedule.h; grpo.updates = U: up to U
 * updates a step), the updated weights gathered. Ranks form the data x context mesh
 * (docs/parallelism.md). The state it works on, in owned parts, is train/train_state.h.
 */
#ifndef TSR_TRAINER_H
#define TSR_TRAINER_H

#include <stdint.h>

#include "train/train_state.h"

struct icl_suite;
struct tsr_tokenizer;
struct tsr_tboard;

/* In-context-learning evaluation at the trainer's evaluations. The scorer sits above the trainer
 * (src/eval/train_icl.h, which documents the three calls), so the program hands it over in
 * trainer_init's uses (trainer_uses.icl); without it a recipe with icl_tasks is refused. */
typedef struct trainer_icl_api {
    int (*open)(struct icl_suite **out, const tsr_config *cfg, const struct tsr_tokenizer *tok,
                int V, int micro, int T); /* tok: the trainer's data.tokenizer, or NULL */
    void (*run)(struct icl_suite *s, tsr_model *m, const tsr_dist *d, int acts_B, int64_t step,
                FILE *metrics, struct tsr_tboard *tb);
    void (*close)(struct icl_suite **s);
} trainer_icl_api;

/* Threads per rank for this config and rank layout (the config's, else from the CPU set, Slurm
 * or the node's cores): what trainer_init sets, for the start's banner before it. */
int trainer_threads(const tsr_config *cfg, const tsr_dist *d);

/* Checks the tokenizer, opens data, builds the model, prints the plan (rank 0). dry_run: stop
 * after the plan (no data opened, nothing allocated). uses: what the program hands over from the
 * layers above (train_state.h trainer_uses; copied into t->uses; NULL: none). Writes nothing in
 * run_dir. Returns 0 or an exit code after reporting. */
int trainer_init(tsr_trainer *t, const tsr_config *cfg, const tsr_dist *d, int dry_run,
                 const trainer_uses *uses);
/* Rank 0 creates run_dir, writes config.cfg, opens metrics.jsonl and a TensorBoard file: called
 * once config, data, tokenizer and checkpoint were all accepted, so a refused start leaves run_dir
 * as it was; then logs the {"event": "start"} record and the checkpoint read at start (resume,
 * init-from: t->start_load). Collective; returns 0 or rank 0's exit code on every rank. */
int trainer_open_run_dir(tsr_trainer *t);
/* One training step on the next global batch: one update (objective = grpo: up to
 * grpo.updates), or none when the spike guard skips it; st gets its numbers. */
void trainer_step(tsr_trainer *t, tsr_step_stats *st);
/* The activations for t->micro sequences, allocated when they are not yet (collective). Under
 * micro_batch = auto an allocation that fails on any rank lowers micro on every rank and retries;
 * at 1 sequence the run stops (exit 1) after printing the memory plan. */
void trainer_ensure_acts(tsr_trainer *t);
/* Before run_dir is written: the activations of the microbatch the run starts with are allocated
 * now (kept for the first step); under micro_batch = auto those of 1 sequence, where its halving
 * ends, are tried and given back (the first step halves from the recipe's size, logging each).
 * 0, or TSR_EXIT_USAGE after the memory plan and the reason (rank 0). Collective. */
int trainer_acts_fit(tsr_trainer *t);
/* Mean validation loss over eval_samples (or the whole split); NAN when there is no val set. */
double trainer_eval(tsr_trainer *t);
/* The whole run: steps until max_duration with logging, periodic eval and checkpoints; a stop
 * request (SIGUSR1/SIGTERM on any rank) checkpoints and returns TSR_EXIT_REQUEUE. Returns an
 * exit code. */
int trainer_run(tsr_trainer *t);
void trainer_free(tsr_trainer *t);
/* Samples n_new tokens after the prompt (n_prompt >= 1 tokens) with sample.temperature and
 * sample.top_k, deterministically from seed; writes them to out. Local to the calling rank, but
 * under zero3 / hsdp each forward gathers the units over the group: every rank of it samples
 * then (the same number of forwards). */
int trainer_sample(tsr_trainer *t, const int32_t *prompt, int n_prompt, int n_new, uint64_t seed,
                   int32_t *out);


#endif
