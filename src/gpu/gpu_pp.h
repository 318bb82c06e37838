/* gpu_pp.h — pipeline parallelism on device = cuda (parallel.pipeline = P, 1F1B and interleaved,
 * ddp; docs/parallelism.md "Pipeline parallelism", docs/cuda.md "In the trainer").
 *
 * The host model is already the rank's part (model/model_pp.h: its stage's layers, the embedding
 * on the first stage, the head on the last), so the device holds only the stage's weights,
 * gradients and AdamW moments. A step runs the schedule's table (pipeline/pp_schedule.h) for this
 * rank: each forward starts from the previous stage's output (the decoder's pp_x) and each
 * backward from the next stage's gradient (pp_dy), the device's activations kept a set per
 * microbatch in flight (interleaved: a chunk's decoder over its layers' places in the part's flat
 * buffers, model_pp.h, a set per chunk and microbatch). The bf16 activations and their gradients go between neighbouring stages
 * through host copies (pageable) and MPI point-to-point messages over the mesh's pipeline group
 * (the receive waits, the send does not), under either parallel.gpu_comm. With more than one rank
 * a stage (the stage's data ranks: parallel.sharding = ddp) the stage's gradients are summed once
 * after the schedule by a communicator of the stage group (gpu_comm.h). The last stage's loss is
 * broadcast over the pipeline; the gradient norm sums the stages'. Evaluations run the stages in
 * turn. Internal to the library (gpu_train*.c).
 */
#ifndef TSR_GPU_PP_H
#define TSR_GPU_PP_H

#include "gpu/gpu_train_ctx.h"

struct gpu_pp;

/* After the model and its state exist (c->model->pp set: parallel.pipeline > 1): the schedule,
 * the pipeline group, the evaluation hooks on the host model (over gtrain_route_model's), the stage group's
 * communicator. 0, or TSR_EXIT_USAGE with the reason printed by rank 0 (gpu_comm_open's result is
 * agreed); nothing when the model is not cut. Collective. */
int gpu_pp_init(gpu_train_ctx *c);
void gpu_pp_free(gpu_train_ctx *c);
/* The activations this rank holds at once, in microbatches of the whole part (the schedule's
 * table: its microbatches in flight; interleaved: the part's own set, unused, and a chunk's sets
 * of 1 / V of it each): check_memory's multiple of gtrain_acts_bytes; 1 without a pipeline. */
int gpu_pp_sets(const gpu_train_ctx *c);
/* A step's microbatches through the schedule; the last stage's loss sum, on every stage. */
double gpu_pp_compute(gpu_train_ctx *c, float scale);
/* sq (this stage's squared gradient norm) summed over the pipeline's stages (tied embeddings:
 * the last stage's copy of wte taken out, counted once) */
double gpu_pp_sum_stages(gpu_train_ctx *c, double sq);

#endif
