/* pipeline.h — pipeline parallelism in the trainer (parallel.pipeline = P; docs/pipeline.md).
 *
 * The model is cut into stages (model/model_pp.h: the cut, a rank's part and its chunks); a step's
 * per_rank / micro microbatches run through them in the order of the schedule's tables
 * (pipeline/pp_schedule.h: 1F1B, interleaved, zero bubble), each rank its list of forwards (F),
 * backwards (BW), or backwards split into the input's half (B) and the weights' (W). A
 * microbatch's activations go forward and their gradients back between neighbouring stages as
 * non-blocking point-to-point messages over the mesh's `pipeline` group (the receive waits, the
 * send does not); every stage keeps the activations of its microbatches in flight (a set each,
 * reused from step to step). The loss (the last stage's) is broadcast to the stage's pipeline;
 * the gradient norm sums every stage's share; tied embeddings' two copies (the first stage's
 * embedding, the last one's head) add their gradients. The data-parallel machinery runs over each
 * stage's ranks (the `stage` group) as over a world.
 *
 * Evaluations run every microbatch through the stages in turn (model_forward's hook: the
 * validation loss, the ICL scores). Each step's busy and waiting time is measured: the bubble.
 */
#ifndef TSR_PIPELINE_H
#define TSR_PIPELINE_H

#include "train/train_state.h"

/* trainer_init's step after the tensor split (parallel.pipeline > 1; nothing otherwise): the
 * microbatches against the schedule (exit 1 naming the keys and a valid value), the cut, this
 * rank's part of the model, the flat layout's group (the stage). A plan's too. */
int pipeline_init(tsr_trainer *t);
/* After the weights are allocated: the chunks' buffers, the executor, the model's evaluation
 * hooks. */
void pipeline_open(tsr_trainer *t);
void pipeline_free(tsr_trainer *t);
/* The step's microbatches of this rank's batch through the schedule, gradients accumulated,
 * losses weighted by scale: returns the step's loss sum (the last stage's, on every stage). */
double pipeline_compute(tsr_trainer *t, float scale);
/* The same schedule over the batch t->data points at, outside the step's measurement (the bubble,
 * the bytes sent): a deterministic replay's recomputation (train/sdc.h). Collective over the
 * pipeline. */
double pipeline_replay(tsr_trainer *t, float scale);
/* The activations: one set per chunk of t->micro sequences (more are added as microbatches come
 * in flight). 0, or -1 with nothing left allocated. pipeline_acts_B: the sequences a set holds, 0
 * when none. */
int pipeline_try_acts(tsr_trainer *t);
void pipeline_free_acts(tsr_trainer *t);
int pipeline_acts_B(const tsr_trainer *t);
/* Tied embeddings: the two copies' gradients (the first and the last stage's wte) summed
 * between the two ranks of this pipeline, before the stage's sums. Collective over them. */
void pipeline_tied_grads(tsr_trainer *t);
/* The squared norm of the part's gradients g (its flat [lo, hi)) that the pipeline counts (a
 * tied wte once), and the sum over the pipeline group of the stages' norms (ddp: each stage's
 * ranks hold the whole stage's). */
double pipeline_sumsq(const tsr_trainer *t, const float *g, size_t lo, size_t hi);
double pipeline_sum_stages(const tsr_trainer *t, double sq);
/* The step's MoE statistics moe (the whole model's layers, model_moe_stats_add's records, summed
 * over the ranks: each stage's layers over its data ranks) cut to the part's MoE layers in its
 * order (its chunks' in turn), as model_moe_bias_step reads them for the part: a new array */
double *pipeline_part_moe(const tsr_trainer *t, const double *moe);
/* zero3 / hsdp: the squared norm of this rank's gradient shard that the pipeline counts (a tied
 * wte's second copy left out) */
double pipeline_shard_sumsq(const tsr_trainer *t);
/* The end of the run: the bubble measured against the schedule's, the bytes sent between the
 * stages. Collective. */
void pipeline_report(tsr_trainer *t);

#endif
