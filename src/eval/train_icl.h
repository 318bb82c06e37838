/* train_icl.h — in-context-learning evaluation during training (docs/eval.md, "During training").
 *
 * When the recipe has icl_tasks, the trainer scores them with the model of the step at every
 * evaluation (eval_interval, and after the last step), with the scorer of `tessera eval`
 * (eval/icl_score.h) and its default few-shot seed, so the last result equals `tessera eval` on
 * the final checkpoint. Rank 0 reports it: a line on stdout, an {"event": "icl"} line in
 * metrics.jsonl and the TensorBoard scalars icl/<label>/accuracy and icl/gauntlet.
 *
 * It sits above the trainer (it uses the scorer of `tessera eval`): tessera-train hands these
 * three functions to the trainer as its trainer_icl_api (train/trainer.h, train_main.c).
 */
#ifndef TSR_TRAIN_ICL_H
#define TSR_TRAIN_ICL_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "dist/dist.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

struct icl_suite;
struct tsr_tboard;

/* Every rank, before the first step: reads the task files once and tokenizes them with tok, the
 * trainer's data.tokenizer (loaded once at start; NULL when data.tokenizer is empty), for passes
 * of icl_rows(micro) rows of T tokens over a vocabulary of V. *out: the suite, NULL when
 * icl_tasks is empty. Returns 0, or an exit code after reporting (1: no tokenizer, or one that
 * does not fit the model; 2: a missing or bad task file, naming it and the line). */
int train_icl_open(struct icl_suite **out, const tsr_config *cfg, const tsr_tokenizer *tok, int V,
                   int micro, int T);
/* Collective: scores the tasks with m's weights as they are, on activations that hold acts_B
 * sequences (allocated by the caller), and reports the result of step `step` (rank 0: stdout,
 * metrics when not NULL, tb). Writes only the activations (which the next forward pass
 * overwrites) and its own buffers: the training state (weights, optimizer, data position, RNG) is
 * untouched. */
void train_icl_run(struct icl_suite *s, tsr_model *m, const tsr_dist *d, int acts_B, int64_t step,
                   FILE *metrics, struct tsr_tboard *tb);
/* Frees *s (nothing when NULL) and sets it to NULL. */
void train_icl_close(struct icl_suite **s);

#endif
