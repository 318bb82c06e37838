/* train_fit.c — --fit's trial of one value (train_plan.h trainer_plan_trial; plan/fit.h): a dry
 * start of the trainer, the plan's device memory per rank. Apart from train_plan.c, which
 * trainer_init uses: this one runs trainer_init. */
#include <stdlib.h>

#include "common.h"
#include "run/objective.h"
#include "train/train_gpu.h"
#include "train/train_plan.h"
#include "train/trainer.h"

double trainer_plan_trial(const tsr_config *cfg, const tsr_dist *d, int64_t *per_rank,
                          int *pairs) {
    tsr_trainer *t = tsr_malloc(sizeof *t);
    plan_set_quiet(1);
    tsr_log_mute(1);
    int rc = trainer_init(t, cfg, d, 1, NULL); /* (a dry run: no hand-overs) */
    double b = rc ? -1 : train_gpu_plan_total(t);
    if (per_rank) *per_rank = t->per_rank;
    if (pairs) *pairs = !rc && t->objective->pairs; /* (the objective's table: whole pairs) */
    if (!rc) trainer_free(t);
    tsr_log_mute(0);
    plan_set_quiet(0);
    free(t);
    return b;
}

int trainer_layout_trial(const tsr_config *cfg, const tsr_dist *d, plan_layout_use use, void *ctx) {
    tsr_trainer *t = tsr_malloc(sizeof *t);
    plan_set_quiet(1);
    tsr_log_mute(1);
    int rc = trainer_init(t, cfg, d, 1, NULL);
    if (!rc) {
        const double acts = train_gpu_plan_acts(t);
        plan_view *v = trainer_plan_view(t);
        use(v, train_gpu_plan_total(t) - acts, acts, ctx);
        free(v);
        trainer_free(t);
    }
    tsr_log_mute(0);
    plan_set_quiet(0);
    free(t);
    return rc ? -1 : 0;
}
