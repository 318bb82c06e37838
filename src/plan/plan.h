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
#include "run/run.h"

/* What a plan reads of a run (the plan, the time plan, the fit): a snapshot of its layout, the
 * trainer's parts copied as they are (the trainer fills one: train/train_plan.c), read only; a
 * dry run's has nothing allocated. */
typedef struct plan_view {
    tsr_config cfg;              /* the run's config, its auto keys resolved */
    tsr_dist dist;               /* the world planned (--plan's, larger than the one running) */
    tsr_mesh mesh;               /* the rank mesh's numbers */
    tsr_model model;             /* the model's layout */
    tsr_train_part part;         /* the sharding's and LoRA's layout */
    tsr_train_out out;           /* the FLOPs per token, the peak FLOP/s */
    tsr_train_ckpt ck;           /* the checkpoint's host buffers: snap_plan, io_plan */
    tsr_train_backend be;        /* be.gpu: the device's context once it runs, else NULL */
    const struct tsr_objective *objective; /* the rows of a sample (run/objective.h) */
    int T, micro, auto_micro;    /* seq_len, micro_batch (rows), micro_batch = auto */
    int64_t per_rank, total_steps, warmup_steps, eval_every;
    uint64_t samples;            /* data.train's samples (0 in a dry run: no data opened) */
    double sdc_bytes;            /* the deterministic replay's host buffers (docs/health.md
                                  * "Deterministic replay"; train/sdc.h sdc_plan_bytes), 0: none */
} plan_view;

/* Parameter count, FLOPs/token, memory plan, batch split, steps (rank 0 prints). */
void plan_print(const plan_view *t, int dry_run);
/* One rank's planned fp32 memory in bytes (the memory line's total less the checkpoint's host
 * buffers); lora: the run's adapters train on a frozen base. The TensorBoard step's
 * memory/planned_bytes. */
double plan_rank_bytes(const plan_view *t, int lora);
/* device = cuda (rank 0 prints): the device memory line and the activations kept per decoder
 * layer, for the CUDA path's context c (src/train/train_gpu.c fills it from the trainer). */
void plan_print_device(const plan_view *t, const gpu_train_ctx *c);
/* The device memory plan per rank of c at microbatches of micro: the total of plan_print_device's
 * line (everything but the activations, and the activations); --gpu-mem compares it (fit.h). */
double plan_device_bytes(const gpu_train_ctx *c, int micro);
/* parallel.pipeline (plan_pipeline.c): the plan's pipeline line (the cut, the schedule's bubble
 * by its table, the activations in flight, the bytes to the neighbours), and the cut in
 * parallel.pipeline_layout's spelling ("Et*2|t*2L") into out. */
void plan_pipeline(const plan_view *t);
void plan_pipeline_cut(const tsr_pp *pp, char *out, size_t n);
/* The schedule's table of t's pipeline at M microbatches, equal action times (F = B = W): its
 * bubble, and the microbatch chunks the first and the last rank hold in flight at most; -1 when
 * the schedule does not build (the time plan's and --fit layout's bubble). */
double plan_pipeline_table(const plan_view *t, int M, int *first, int *last);
/* quiet 1: plan_print and plan_print_device print nothing (--fit's search plans quietly). */
void plan_set_quiet(int quiet);

#endif
