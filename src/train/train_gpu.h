/* train_gpu.h — the trainer's side of device = cuda: fills the CUDA path's narrow context
 * (gpu/gpu_train_ctx.h) from the trainer, prints its device memory plan, and hands the context to
 * the gpu_train_* calls (gpu/gpu_train.h). The library sees nothing else of the trainer. */
#ifndef TSR_TRAIN_GPU_H
#define TSR_TRAIN_GPU_H

#include "gpu/gpu_train.h"

struct tsr_trainer;

/* The environment's measurement switches (gpu_train_switches), on every rank, before the plan is
 * printed (--plan too) and before train_gpu_init. 0 or an exit code. */
int train_gpu_switches(const struct tsr_trainer *t);
/* The device memory plan per rank for the trainer's model, sharding and microbatch (rank 0
 * prints; --plan too, where nothing is allocated). */
void train_gpu_print_plan(const struct tsr_trainer *t);
/* That plan's total per rank in bytes (plan_device_bytes; every rank, nothing printed). */
double train_gpu_plan_total(const struct tsr_trainer *t);
/* Its activations part: one microbatch's (gpu_train_acts_bytes; --fit layout adds the pipeline's
 * microbatches in flight). */
double train_gpu_plan_acts(const struct tsr_trainer *t);
/* After the host weights are initialised: fills t->gpu and starts the library (gpu_train_init);
 * without optim peak_flops, the GPU's peak bf16 FLOP/s by its name. 0 or an exit code. */
int train_gpu_init(struct tsr_trainer *t);
/* save_async in effect (t->ck.async): pins the host buffers the device's state is copied into at
 * a save (gpu_train_pin_host), so the snapshot's device-to-host copy runs at the bus's speed;
 * rank 0 says how much, and a rank where CUDA refused warns (its copies stay pageable). */
void train_gpu_pin_snapshot(struct tsr_trainer *t);
void train_gpu_free(struct tsr_trainer *t);

#endif
