/* dpo_objective.c — objective = "dpo"'s row of the objective table (train/objective.h;
 * docs/dpo.md): preference pairs, the loss a mean over the global batch's pairs, the reference
 * (the base, or the initial model's stored log-probabilities: posttrain/dpo_ref.h). Beside dpo.c
 * rather than in it: dpo_ref.c includes dpo.h, so dpo.c cannot include dpo_ref.h. */
#include <math.h>

#include "posttrain/dpo.h"
#include "posttrain/dpo_ref.h"
#include "train/objective.h"
#include "train/trainer.h"

/* dpo.reference = auto is the base with LoRA, else precomputed; the base runs a forward per
 * microbatch as well (2N more), a precomputed one nothing during the steps */
static void dpo_references(tsr_trainer *t) {
    if (t->cfg.dpo.reference == TSR_DPO_REF_AUTO)
        t->cfg.dpo.reference = t->cfg.lora.rank > 0 ? TSR_DPO_REF_BASE : TSR_DPO_REF_PRECOMPUTED;
    if (t->cfg.dpo.reference == TSR_DPO_REF_BASE)
        t->out.flops_per_token += 2.0 * (double)t->model.n_params_counted;
    t->dpo_ref.on = t->cfg.dpo.reference == TSR_DPO_REF_PRECOMPUTED; /* (posttrain/dpo_ref.h) */
}

/* a fresh start's reference pass, or the copy of a resumed reference into run_dir */
static int dpo_open_reference(tsr_trainer *t) {
    int rc;
    if (t->dpo_ref.on && !t->dpo_ref.loaded) {
        trainer_ensure_acts(t);
        run_eval_scope(&t->run, 1); /* ranks run different numbers of forwards (run/run.h) */
        rc = dpo_ref_build(t);
        run_eval_scope(&t->run, 0);
    } else {
        rc = dpo_ref_build(t); /* (a copy of a resumed reference into run_dir, else nothing) */
    }
    return rc;
}

/* the step's loss is the mean over the global batch's pairs */
static int64_t dpo_denominator(const tsr_trainer *t, int64_t counted) {
    (void)counted;
    return t->cfg.global_batch / 2;
}

/* the step's sums over the pairs, from every data rank */
static void dpo_reduce_stats(tsr_trainer *t) {
    if (t->mesh.D > 1) dist_view_sum_f64(&t->mesh.data, t->out.dpo, DPO_NSTATS);
}

/* the step's means over its pairs */
static int dpo_step_figures(const tsr_trainer *t, const tsr_step_stats *st, objective_figure *f) {
    (void)st;
    const double P = (double)(t->cfg.global_batch / 2);
    const double *s = t->out.dpo;
    int n = 0;
    f[n++] = (objective_figure){"reward_chosen", s[DPO_CHOSEN_REWARD] / P};
    f[n++] = (objective_figure){"reward_rejected", s[DPO_REJECTED_REWARD] / P};
    f[n++] = (objective_figure){"reward_margin", (s[DPO_CHOSEN_REWARD] - s[DPO_REJECTED_REWARD]) / P};
    f[n++] = (objective_figure){"accuracy", s[DPO_ACCURACY] / P};
    f[n++] = (objective_figure){"logp_chosen", s[DPO_CHOSEN_LOGP] / P};
    f[n++] = (objective_figure){"logp_rejected", s[DPO_REJECTED_LOGP] / P};
    return n;
}

/* the validation pairs' DPO loss, their accuracy into t->out.val_accuracy */
static double dpo_evaluate(tsr_trainer *t) { return dpo_eval(t, &t->out.val_accuracy); }

static void dpo_eval_figures(const tsr_trainer *t, double val_loss, objective_eval_figure f[2]) {
    f[0] = (objective_eval_figure){"val dpo loss", 6, "val_loss", val_loss};
    f[1] = (objective_eval_figure){"val accuracy", 4, "val_dpo_accuracy", t->out.val_accuracy};
}

const tsr_objective objective_dpo = {
    .name = "dpo",
    .references = dpo_references,
    .check_reference = dpo_ref_load, /* a resume's stored reference, before run_dir is written */
    .open_reference = dpo_open_reference,
    .release = dpo_ref_free,
    .pairs = 1,
    .pass = dpo_compute,
    .denominator = dpo_denominator,
    .reduce_stats = dpo_reduce_stats,
    .figure_prefix = "dpo",
    .step_figures = dpo_step_figures,
    .line = {{"margin", 4, 2}, {"acc", 2, 3}},
    .eval = dpo_evaluate,
    .eval_figures = dpo_eval_figures,
};
