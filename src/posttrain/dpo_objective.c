/* dpo_objective.c — objective = "dpo"'s row of the objective table (run/objective.h;
 * docs/dpo.md): preference pairs, the loss a mean over the global batch's pairs, the reference
 * (the base, or the initial model's stored log-probabilities: posttrain/dpo_ref.h), its state
 * (tsr_dpo: the reference, the step's sums, the last evaluation's accuracy). Beside dpo.c rather
 * than in it: dpo_ref.c includes dpo.h, so dpo.c cannot include dpo_ref.h. */
#include <math.h>
#include <stdlib.h>

#include "common.h"
#include "posttrain/dpo.h"
#include "posttrain/dpo_ref.h"
#include "run/objective.h"

static void *dpo_create(void) { return tsr_calloc(1, sizeof(tsr_dpo)); }

static void dpo_release(void *s) {
    tsr_dpo *dp = s;
    dpo_ref_free(&dp->ref);
    free(dp);
}

/* dpo.reference = auto is the base with LoRA, else precomputed; the base runs a forward per
 * microbatch as well (2N more), a precomputed one nothing during the steps */
static void dpo_references(const tsr_run *run, void *s) {
    tsr_dpo *dp = s;
    tsr_config *c = run->cfg;
    if (c->dpo.reference == TSR_DPO_REF_AUTO)
        c->dpo.reference = c->lora.rank > 0 ? TSR_DPO_REF_BASE : TSR_DPO_REF_PRECOMPUTED;
    if (c->dpo.reference == TSR_DPO_REF_BASE)
        run->out->flops_per_token += 2.0 * (double)run->model->n_params_counted;
    dp->ref.on = c->dpo.reference == TSR_DPO_REF_PRECOMPUTED; /* (posttrain/dpo_ref.h) */
}

static int dpo_check_reference(const tsr_run *run, void *s) {
    return dpo_ref_load(run, &((tsr_dpo *)s)->ref);
}

/* a fresh start's reference pass, or the copy of a resumed reference into run_dir */
static int dpo_open_reference(const tsr_run *run, void *s) {
    return dpo_ref_build(run, &((tsr_dpo *)s)->ref);
}

/* the reference pass runs forwards: the ranks run different numbers of them (run/run.h
 * run_eval_scope) */
static int dpo_reference_forwards(const void *s) {
    const tsr_dpo *dp = s;
    return dp->ref.on && !dp->ref.loaded;
}

static double dpo_pass(const tsr_run *run, void *s, float scale) {
    return dpo_compute(run, s, scale);
}

/* the step's loss is the mean over the global batch's pairs */
static int64_t dpo_denominator(const tsr_config *cfg, int64_t counted) {
    (void)counted;
    return cfg->global_batch / 2;
}

/* the step's sums over the pairs, from every data rank */
static void dpo_reduce_stats(const tsr_run *run, void *s) {
    tsr_dpo *dp = s;
    if (run->mesh->D > 1) dist_view_sum_f64(&run->mesh->data, dp->stats, DPO_NSTATS);
}

/* the step's means over its pairs */
static int dpo_step_figures(const tsr_config *cfg, const void *s, const tsr_step_stats *st,
                            objective_figure *f) {
    (void)st;
    const double P = (double)(cfg->global_batch / 2);
    const double *x = ((const tsr_dpo *)s)->stats;
    int n = 0;
    f[n++] = (objective_figure){"reward_chosen", x[DPO_CHOSEN_REWARD] / P};
    f[n++] = (objective_figure){"reward_rejected", x[DPO_REJECTED_REWARD] / P};
    f[n++] = (objective_figure){"reward_margin",
                                (x[DPO_CHOSEN_REWARD] - x[DPO_REJECTED_REWARD]) / P};
    f[n++] = (objective_figure){"accuracy", x[DPO_ACCURACY] / P};
    f[n++] = (objective_figure){"logp_chosen", x[DPO_CHOSEN_LOGP] / P};
    f[n++] = (objective_figure){"logp_rejected", x[DPO_REJECTED_LOGP] / P};
    return n;
}

/* the validation pairs' DPO loss, their accuracy into the state */
static double dpo_evaluate(const tsr_run *run, void *s) {
    tsr_dpo *dp = s;
    return dpo_eval(run, dp, &dp->val_accuracy);
}

static void dpo_eval_figures(const void *s, double val_loss, objective_eval_figure f[2]) {
    const tsr_dpo *dp = s;
    f[0] = (objective_eval_figure){"val dpo loss", 6, "val_loss", val_loss};
    f[1] = (objective_eval_figure){"val accuracy", 4, "val_dpo_accuracy", dp->val_accuracy};
}

const tsr_objective objective_dpo = {
    .name = "dpo",
    .create = dpo_create,
    .release = dpo_release,
    .references = dpo_references,
    .check_reference = dpo_check_reference, /* a resume's stored reference, before run_dir is
                                             * written */
    .open_reference = dpo_open_reference,
    .reference_forwards = dpo_reference_forwards,
    .pairs = 1,
    .pass = dpo_pass,
    .denominator = dpo_denominator,
    .reduce_stats = dpo_reduce_stats,
    .figure_prefix = "dpo",
    .step_figures = dpo_step_figures,
    .line = {{"margin", 4, 2}, {"acc", 2, 3}},
    .eval = dpo_evaluate,
    .eval_figures = dpo_eval_figures,
};
