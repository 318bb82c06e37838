/* plan.h — the plan of a run, "does it fit": what rank 0 prints at start, and all that
 * tessera-train --dry-run / --plan RANKS print (docs/planning.md): the model line, the parameters
 * and FLOPs per token (docs/mfu.md), the memory of one rank (fp32 on the host: weights, grads, the
 * optimizer's state and scratch, communication buffers, activations per microbatch, the
 * checkpoint's buffers; device = cuda: the device's, priced by the CUDA path itself), context
 * parallelism's ring, the batch split and the steps. "How long": plan/timeplan.h (--time).
 * Nothing here allocates, so a dry run plans worlds it does not have. */
#ifndef TSR_PLAN_H
#define TSR_PLAN_H

#include "gpu/gpu_train.h"
#include "train/train_state.h"

/* Parameter count, FLOPs/token, memory plan, batch split, steps (rank 0 prints). */
void plan_print(const tsr_trainer *t, int dry_run);
/* One rank's planned fp32 memory in bytes (the memory line's total less the checkpoint's host
 * buffers); lora: the run's adapters train on a frozen base. The TensorBoard step's
 * memory/planned_bytes. */
double plan_rank_bytes(const tsr_trainer *t, int lora);
/* device = cuda (rank 0 prints): the device memory line and the activations kept per decoder
 * layer, for the CUDA path's context c (src/train/train_gpu.c fills it from the trainer). */
void plan_print_device(const tsr_trainer *t, const gpu_train_ctx *c);
/* The device memory plan per rank of c at microbatches of micro: the total of plan_print_device's
 * line (everything but the activations, and the activations); --gpu-mem compares it (fit.h). */
double plan_device_bytes(const gpu_train_ctx *c, int micro);
/* parallel.pipeline (plan_pipeline.c): the plan's pipeline line (the cut, the schedule's bubble
 * by its table, the activations in flight, the bytes to the neighbours), and the cut in
 * parallel.pipeline_layout's spelling ("Et*2|t*2L") into out. */
void plan_pipeline(const tsr_trainer *t);
void plan_pipeline_cut(const tsr_pp *pp, char *out, size_t n);
/* quiet 1: plan_print and plan_print_device print nothing (--fit's search plans quietly). */
void plan_set_quiet(int quiet);

#endif
