/* train_plan.c — the trainer's side of the plan: see train_plan.h. */
#include "train/train_plan.h"

#include <stdlib.h>

#include "common.h"
#include "train/sdc.h"

plan_view *trainer_plan_view(const tsr_trainer *t) {
    plan_view *v = tsr_malloc(sizeof *v);
    v->cfg = t->cfg, v->dist = t->dist, v->mesh = t->mesh, v->model = t->model;
    v->part = t->part, v->out = t->out, v->ck = t->ck, v->be = t->be;
    v->objective = t->objective;
    v->T = t->T, v->micro = t->micro, v->auto_micro = t->auto_micro;
    v->per_rank = t->per_rank, v->total_steps = t->total_steps;
    v->warmup_steps = t->warmup_steps, v->eval_every = t->eval_every;
    v->samples = t->data.sampler.n;
    v->sdc_bytes = (double)sdc_plan_bytes(t);
    return v;
}

void trainer_plan_print(const tsr_trainer *t, int dry_run) {
    plan_view *v = trainer_plan_view(t);
    plan_print(v, dry_run);
    free(v);
}

double trainer_plan_rank_bytes(const tsr_trainer *t, int lora) {
    plan_view *v = trainer_plan_view(t);
    const double b = plan_rank_bytes(v, lora);
    free(v);
    return b;
}

void trainer_plan_time(const tsr_trainer *t, const timeplan *p, long long recipe_micro) {
    plan_view *v = trainer_plan_view(t);
    timeplan_print(p, v, recipe_micro);
    free(v);
}
