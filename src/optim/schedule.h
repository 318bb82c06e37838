/* schedule.h — the learning-rate schedule of tessera-train, in one place: its multiplier per step
 * and a run's schedule in steps from its config (docs/training.md "Schedule"). Used by the step
 * (trainer.c, trainer_init.c) and by a resume that changes it (checkpointing_resume.c); tests/reference/lr_schedule.py
 * is its float64 twin.
 */
#ifndef TSR_SCHEDULE_H
#define TSR_SCHEDULE_H

#include <stdint.h>

#include "config/config.h"

/* Learning-rate multiplier at 0-based step s of S with W warmup steps (docs/training.md):
 * s < W: (s+1)/W; then p = (s-W)/max(1, S-W) and cosine: a + (1-a)(1+cos(pi p))/2,
 * linear: 1 - (1-a) p, constant: 1; wsd: 1 until step S-D, then linear over the last D steps,
 * 1 - (1-a) p with p = (s-(S-D))/max(1, D). p is at most 1. The one schedule of the trainer. */
double lr_multiplier(tsr_sched_kind kind, double alpha_f, int64_t s, int64_t W, int64_t S,
                     int64_t D);
/* A run's schedule in steps: max_duration, optim.warmup, optim.decay (wsd; else 0). */
typedef struct tsr_sched_steps {
    int64_t total, warmup, decay;
} tsr_sched_steps;
/* The schedule's steps of cfg (epoch_samples: the training set's samples, for durations in
 * epochs). */
tsr_sched_steps sched_steps_of(const tsr_config *cfg, uint64_t epoch_samples);
/* The learning rate of cfg's schedule (steps sc) at 0-based step s. */
double sched_lr_at(const tsr_config *cfg, tsr_sched_steps sc, int64_t s);

#endif
