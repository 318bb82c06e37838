/* grpo_stats.c — the figures of a GRPO step (grpo.h grpo_metrics; docs/rl.md "Metrics"): means
 * of its sums, for metrics.c through the objective table (run/objective.h). */
#include <math.h>

#include "posttrain/grpo_int.h"

int grpo_metrics(const tsr_grpo *g, const tsr_step_stats *st, objective_figure *m) {
    const double *s = g->stats, R = s[GRPO_ROWS] > 0 ? s[GRPO_ROWS] : 1.0;
    const double N = s[GRPO_TOKENS] > 0 ? s[GRPO_TOKENS] : 1.0, mean = s[GRPO_REWARD] / R;
    const double var = s[GRPO_REWARD_SQ] / R - mean * mean;
    const double roll = s[GRPO_ROLLOUT_S];
    int n = 0;
    m[n++] = (objective_figure){"reward_mean", mean};
    m[n++] = (objective_figure){"reward_std", sqrt(var > 0 ? var : 0.0)};
    m[n++] = (objective_figure){"pass_rate", s[GRPO_PASS] / R};
    m[n++] = (objective_figure){"response_length", s[GRPO_TOKENS] / R};
    m[n++] = (objective_figure){"truncated", s[GRPO_TRUNCATED] / R};
    m[n++] = (objective_figure){"entropy", s[GRPO_ENTROPY] / N};
    m[n++] = (objective_figure){"kl", s[GRPO_KL] / N};
    m[n++] = (objective_figure){"clip_fraction", s[GRPO_CLIPPED] / N};
    m[n++] = (objective_figure){"tied_groups", s[GRPO_TIED]};
    m[n++] = (objective_figure){"dropped_groups", s[GRPO_DROPPED]};
    m[n++] = (objective_figure){"rounds", s[GRPO_ROUNDS]};
    m[n++] = (objective_figure){"rollout_tokens_per_s", roll > 0 ? s[GRPO_GEN_TOKENS] / roll : 0.0};
    m[n++] = (objective_figure){"rollout_s", roll};
    m[n++] = (objective_figure){"train_s", st->step_time - roll};
    return n;
}
