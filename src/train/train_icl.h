/* train_icl.h — in-context-learning evaluation during training (docs/eval.md, "During training").
 *
 * When the recipe has icl_tasks, the trainer scores them with the model of the step at every
 * evaluation (eval_interval, and after the last step), with the scorer of `tessera eval`
 * (eval/icl_score.h) and its default few-shot seed, so the last result equals `tessera eval` on
 * the final checkpoint. Rank 0 reports it: a line on stdout, an {"event": "icl"} line in
 * metrics.jsonl and the TensorBoard scalars icl/<label>/accuracy and icl/gauntlet.
 */
#ifndef TSR_TRAIN_ICL_H
#define TSR_TRAIN_ICL_H

struct tsr_trainer;

/* Every rank, after the model's activations are allocated: reads data.tokenizer and the task
 * files once. Nothing when icl_tasks is empty. Returns 0, or an exit code after reporting (1: no
 * tokenizer, or one that does not fit the model; 2: a missing or bad task file, naming it and the
 * line). */
int train_icl_open(struct tsr_trainer *t);
/* Collective: scores the tasks with t->model's weights as they are, and reports (rank 0). Writes
 * only the activations (which the next forward pass overwrites) and its own buffers: the training
 * state (weights, optimizer, data position, RNG) is untouched. */
void train_icl_run(struct tsr_trainer *t);
void train_icl_close(struct tsr_trainer *t);

#endif
