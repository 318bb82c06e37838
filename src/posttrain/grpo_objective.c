/* grpo_objective.c — objective = "grpo"'s row of the objective table (run/objective.h;
 * docs/rl.md): a sample is a prompt with grpo.group_size completions, the step's data are its
 * rollouts, grpo.updates updates a step, an evaluation is the held-out prompts' pass@1; its state
 * is tsr_grpo (grpo_int.h). */
#include <math.h>

#include "common.h"
#include "posttrain/grpo.h"
#include "posttrain/grpo_int.h"
#include "run/objective.h"

static void *grpo_create(void) { return tsr_calloc(1, sizeof(tsr_grpo)); }

static void grpo_release(void *s) { grpo_free(s); }

static int64_t grpo_rows(const tsr_config *cfg) { return cfg->grpo.group_size; }

static int grpo_start(const tsr_run *run, void *s) { return grpo_init(run, s); }

/* grpo.reference = auto is the base with LoRA, else the initial weights; with a KL term a
 * reference forward per microbatch (2N more per token) */
static void grpo_references(const tsr_run *run, void *s) {
    (void)s;
    tsr_config *c = run->cfg;
    if (c->grpo.reference == TSR_GRPO_REF_AUTO)
        c->grpo.reference = c->lora.rank > 0 ? TSR_GRPO_REF_BASE : TSR_GRPO_REF_INITIAL;
    if (c->grpo.kl_coef > 0)
        run->out->flops_per_token += 2.0 * (double)run->model->n_params_counted;
}

static int grpo_open_reference(const tsr_run *run, void *s) { return grpo_ref_open(run, s); }

static int64_t grpo_rollout_of(const tsr_run *run, void *s, int64_t d) {
    return grpo_rollout(run, s, d);
}

static double grpo_pass(const tsr_run *run, void *s, float scale) {
    (void)scale; /* (the pass weighs its tokens itself) */
    return grpo_compute(run, s);
}

/* a replay's pass counts as no first pass: no statistics (the step's own), no collective */
static void grpo_replay_scope(void *s, int on) {
    tsr_grpo *g = s;
    if (on) g->update_held = g->update, g->update = 1;
    else g->update = g->update_held;
}

static int64_t grpo_denominator(const tsr_config *cfg, int64_t counted) {
    (void)cfg, (void)counted;
    return 1;
}

static int grpo_updates(const tsr_config *cfg) { return (int)cfg->grpo.updates; }

static int grpo_step_figures(const tsr_config *cfg, const void *s, const tsr_step_stats *st,
                             objective_figure *f) {
    (void)cfg;
    return grpo_metrics(s, st, f);
}

/* pass@1 into the state's val_accuracy (-1: the reward failed), the mean reward; no loss */
static double grpo_evaluate(const tsr_run *run, void *s) {
    tsr_grpo *g = s;
    g->val_accuracy = grpo_eval(run, g, &g->val_reward);
    return NAN;
}

static int grpo_eval_failed(const void *s) { return ((const tsr_grpo *)s)->val_accuracy < 0; }

static void grpo_eval_figures(const void *s, double val_loss, objective_eval_figure f[2]) {
    (void)val_loss;
    const tsr_grpo *g = s;
    f[0] = (objective_eval_figure){"val pass@1", 4, "val_pass_at_1", g->val_accuracy};
    f[1] = (objective_eval_figure){"val reward", 4, "val_reward", g->val_reward};
}

const tsr_objective objective_grpo = {
    .name = "grpo",
    .create = grpo_create,
    .release = grpo_release,
    .rows_per_sample = grpo_rows,
    .start = grpo_start,
    .references = grpo_references,
    .open_reference = grpo_open_reference,
    .prompts = 1,
    .rollout = grpo_rollout_of,
    .pass = grpo_pass,
    .denominator = grpo_denominator,
    .updates = grpo_updates,
    .replay_scope = grpo_replay_scope,
    .figure_prefix = "grpo",
    .step_figures = grpo_step_figures,
    .line = {{"reward", 4, 0}, {"pass", 3, 2}, {"len", 1, 3}},
    .eval = grpo_evaluate,
    .eval_failed = grpo_eval_failed,
    .eval_figures = grpo_eval_figures,
};

_Static_assert(GRPO_NSTATS <= OBJECTIVE_MAX_FIGURES, "the step figures fit the table's bound");
