/* train_plan.h — the trainer's side of the plan (plan/plan.h, plan/timeplan.h, plan/fit.h): the
 * snapshot of a trainer's layout the plan reads (plan_view), and --fit's trial of one value, a dry
 * start of the trainer. The plan sits below the trainer and sees only these. */
#ifndef TSR_TRAIN_PLAN_H
#define TSR_TRAIN_PLAN_H

#include "plan/layout.h"
#include "plan/plan.h"
#include "plan/timeplan.h"
#include "train/train_state.h"

/* The snapshot of t the plan reads, malloc'd (it holds the config: the caller frees it). */
plan_view *trainer_plan_view(const tsr_trainer *t);
/* t's plan printed (plan_print; rank 0). dry_run: --dry-run's or --plan's. */
void trainer_plan_print(const tsr_trainer *t, int dry_run);
/* plan_rank_bytes of t at its current microbatch (lora: a frozen base's plan). */
double trainer_plan_rank_bytes(const tsr_trainer *t, int lora);
/* --time: the time plan of t (initialised for a dry run) on rank 0 (timeplan_print). */
void trainer_plan_time(const tsr_trainer *t, const timeplan *p, long long recipe_micro);
/* --fit's trial (plan/fit.h plan_fit_trial; train_fit.c): trainer_init of a dry run of cfg on d,
 * printing nothing, its device memory plan per rank, or -1 when the config is refused. */
double trainer_plan_trial(const tsr_config *cfg, const tsr_dist *d, int64_t *per_rank, int *pairs);
/* --fit layout's trial (plan/layout.h plan_layout_trial; train_fit.c): the same dry start, its view
 * handed to use with its device memory (without the activations, one microbatch's); -1 refused. */
int trainer_layout_trial(const tsr_config *cfg, const tsr_dist *d, plan_layout_use use, void *ctx);

#endif
