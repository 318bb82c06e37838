/* gpu_profile.h — TSR_PROFILE=1: device time per backend op from CUDA events, no hardware
 * counters needed (for when ncu is refused them; docs/cuda.md, "Per-op profile").
 *
 * Each op of the CUDA backend table (src/gpu/gpu_backend.c) is bracketed by two timed events on
 * its stream; so are the trainer's phases of a step ("step: forward+backward", "step: gradient
 * norm", "step: AdamW"). Every few thousand events the pairs are read (one wait for the stream)
 * and summed per (name, shape). The first step is warm-up (cuBLASLt's heuristic, first
 * allocations, NCCL's set-up) and is dropped when a second one begins (a run of one step reports
 * that step). A step is one call of the step's passes (gpu_prof_step_begin): one the spike guard
 * skips counts, and a step run again (rollback, micro_batch = auto's retry) counts twice.
 * gpu_prof_report prints the table (rank 0 only calls it). Off (the default), every function
 * returns at once and nothing is allocated.
 */
#ifndef TSR_GPU_PROFILE_H
#define TSR_GPU_PROFILE_H

#include <stdio.h>

#include "cuda_ops.h"

/* 1 when TSR_PROFILE=1 (read once) */
int gpu_prof_on(void);
/* start timing op `name` of shape a x b x c (0: unused) on stream s: a slot for gpu_prof_end, or
 * -1 when profiling is off */
int gpu_prof_begin(tcu_stream s, const char *name, int a, int b, int c);
void gpu_prof_end(tcu_stream s, int slot);
/* a training step's passes begin: when the second begins, the first step's counts are dropped
 * (warm-up) */
void gpu_prof_step_begin(void);
/* reads what is pending, then writes the table (ops by total time, with their share of the
 * forward+backward phase) to f, headed by `who` */
void gpu_prof_report(FILE *f, const char *who);
/* frees the events (the CUDA context must still be alive) */
void gpu_prof_free(void);

#endif
