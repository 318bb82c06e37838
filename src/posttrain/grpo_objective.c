/* grpo_objective.c — objective = "grpo"'s row of the objective table (train/objective.h;
 * docs/rl.md): a sample is a prompt with grpo.group_size completions, the step's data are its
 * rollouts, grpo.updates updates a step, an evaluation is the held-out prompts' pass@1. */
#include <math.h>

#include "posttrain/grpo.h"
#include "train/objective.h"

static int64_t grpo_rows(const tsr_config *cfg) { return cfg->grpo.group_size; }

/* grpo.reference = auto is the base with LoRA, else the initial weights; with a KL term a
 * reference forward per microbatch (2N more per token) */
static void grpo_references(tsr_trainer *t) {
    if (t->cfg.grpo.reference == TSR_GRPO_REF_AUTO)
        t->cfg.grpo.reference = t->cfg.lora.rank > 0 ? TSR_GRPO_REF_BASE : TSR_GRPO_REF_INITIAL;
    if (t->cfg.grpo.kl_coef > 0)
        t->out.flops_per_token += 2.0 * (double)t->model.n_params_counted;
}

static double grpo_pass(tsr_trainer *t, float scale) {
    (void)scale; /* (the pass weighs its tokens itself) */
    return grpo_compute(t);
}

static int64_t grpo_denominator(const tsr_trainer *t, int64_t counted) {
    (void)t, (void)counted;
    return 1;
}

static int grpo_updates(const tsr_config *cfg) { return (int)cfg->grpo.updates; }

/* pass@1 into t->out.val_accuracy (-1: the reward failed), the mean reward; no loss */
static double grpo_evaluate(tsr_trainer *t) {
    t->out.val_accuracy = grpo_eval(t, &t->out.val_reward);
    return NAN;
}

static int grpo_eval_failed(const tsr_trainer *t) { return t->out.val_accuracy < 0; }

static void grpo_eval_figures(const tsr_trainer *t, double val_loss, objective_eval_figure f[2]) {
    (void)val_loss;
    f[0] = (objective_eval_figure){"val pass@1", 4, "val_pass_at_1", t->out.val_accuracy};
    f[1] = (objective_eval_figure){"val reward", 4, "val_reward", t->out.val_reward};
}

const tsr_objective objective_grpo = {
    .name = "grpo",
    .rows_per_sample = grpo_rows,
    .start = grpo_init,
    .references = grpo_references,
    .open_reference = grpo_ref_open,
    .release = grpo_free,
    .prompts = 1,
    .rollout = grpo_rollout,
    .pass = grpo_pass,
    .denominator = grpo_denominator,
    .updates = grpo_updates,
    .figure_prefix = "grpo",
    .step_figures = grpo_metrics,
    .line = {{"reward", 4, 0}, {"pass", 3, 2}, {"len", 1, 3}},
    .eval = grpo_evaluate,
    .eval_failed = grpo_eval_failed,
    .eval_figures = grpo_eval_figures,
};

_Static_assert(GRPO_NSTATS <= OBJECTIVE_MAX_FIGURES, "the step figures fit the table's bound");
