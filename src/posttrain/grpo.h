/* grpo.h — objective = "grpo": reinforcement learning on the model's own completions, scored by a
 * verifiable reward, generated and trained on the same ranks (docs/rl.md).
 *
 * A step: (1) the rollouts: this rank's prompts of the step's batch (global_batch prompts, the
 * sampler's positions as for any dataset), G = grpo.group_size completions each, sampled by the
 * batched generator (generate/gen_batch.h) on the full weights (gathered once under zero3 / hsdp,
 * LoRA merged), sample g of the prompt at batch position j from its own random stream
 * gen_stream_key(seed, data batch, j, g); their rewards (posttrain/reward.h), the overlong penalty;
 * the groups shared between the ranks (all-gather), with dynamic sampling the groups whose
 * rewards tie dropped and refilled from further prompts; each group's advantages
 * A_i = (r_i - mean) / (std + 1e-6) (std: unbiased; without it with grpo.scale_rewards false).
 * (2) grpo.updates optimizer steps, each a pass over this rank's share of the groups
 * (grpo_compute), with the per-token objective
 *   l_t = -min(rho_t A, clip(rho_t, 1 - clip_low, 1 + clip_high) A) + beta k3_t,
 *   rho_t = exp(logp_t - old_t),  k3_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1,
 * old_t the rollout's log-probability of the token, aggregated by grpo.loss_agg; its gradient
 * reaches the model as a weight on each completion token's loss (model_backward_weighted), as
 * DPO's does. Everything a step computes is a function of the step (its data batch) and the
 * weights, so a resumed run repeats its rollouts bit for bit.
 */
#ifndef TSR_GRPO_H
#define TSR_GRPO_H

#include <stdint.h>

#include "run/objective.h"
#include "run/run.h"

/* the step's statistics, tsr_grpo.stats[] (sums over the kept completions, the same on every
 * rank) */
enum {
    GRPO_ROWS = 0,   /* completions trained on */
    GRPO_REWARD,     /* sum of rewards (overlong penalty included) */
    GRPO_REWARD_SQ,
    GRPO_PASS,       /* completions the reward judged correct */
    GRPO_TOKENS,     /* completion tokens */
    GRPO_ENTROPY,    /* sum over tokens of the sampling distribution's entropy (nats) */
    GRPO_TRUNCATED,  /* completions that reached grpo.max_new_tokens */
    GRPO_TIED,       /* kept groups whose rewards all tie (no gradient) */
    GRPO_DROPPED,    /* groups dynamic sampling dropped */
    GRPO_ROUNDS,     /* generation rounds */
    GRPO_GEN_TOKENS, /* tokens generated, every round, every rank */
    GRPO_ROLLOUT_S,  /* seconds of the rollout phase (the slowest rank) */
    GRPO_KL,         /* sum over tokens of k3 (first update; with a reference) */
    GRPO_CLIPPED,    /* tokens whose ratio the clip holds (first update) */
    GRPO_NSTATS
};

/* objective = grpo's own state (grpo_int.h; the objective table's: grpo_objective.c creates and
 * frees it) */
typedef struct tsr_grpo tsr_grpo;

/* The prompts (data.train, data.val: tessera prep --format prompts) checked against the run,
 * their records loaded, the reward opened (its program started), the buffers, into g (zeroed).
 * Called by trainer_init (the table's start); 0 or an exit code after rank 0 reported.
 * Collective. */
int grpo_init(const tsr_run *run, tsr_grpo *g);
/* What g holds, and g. */
void grpo_free(tsr_grpo *g);
/* The KL reference once the checkpoint is read and run_dir is open (trainer_open_run_dir):
 * with grpo.reference = initial and kl_coef > 0 the starting weights, stored by a fresh start
 * in run_dir/grpo-reference.bin (its checksum into grpo.reference_checksum and config.cfg), read
 * back and checked by a resume (posttrain/grpo_ref.c). 0 or TSR_EXIT_DATA. Collective. */
int grpo_ref_open(const tsr_run *run, tsr_grpo *g);

/* The step's rollouts for data batch d (above, part 1): g's statistics filled. Returns the
 * completion tokens trained on (all ranks), or -1 after a reward failure on any rank (that rank
 * printed it, quoting the exchange); every rank returns the same. Collective. */
int64_t grpo_rollout(const tsr_run *run, tsr_grpo *g, int64_t d);

/* One pass of the objective over this rank's rows (the caller zeroed the gradients):
 * gradients += d(loss)/d(theta); returns this rank's share of the step's loss (the shares sum to
 * it). The first pass after a rollout keeps its KL and clip statistics. Collective. */
double grpo_compute(const tsr_run *run, tsr_grpo *g);

/* The held-out prompts' pass@1 (data.val; grpo.eval_prompts of them): greedy completions
 * scored by the reward. Returns the share that pass, *reward the mean reward; NAN without
 * data.val, -1 after a reward failure (reported). Collective; run_eval_scope on. */
double grpo_eval(const tsr_run *run, tsr_grpo *g, double *reward);

/* The step's figures for metrics.jsonl, TensorBoard and the log (means of g's statistics;
 * docs/rl.md "Metrics"): names without their "grpo_" prefix, at most GRPO_NSTATS of them (the
 * objective table's step_figures, run/objective.h). */
int grpo_metrics(const tsr_grpo *g, const tsr_step_stats *st, objective_figure *m);

/* One token's loss and d(loss)/d(logp): the per-token objective above (exposed for the tests).
 * lp the policy's log-probability, old the rollout's, ref the reference's (unused with beta 0),
 * A the advantage; *clipped: the clip holds the ratio, *kl: k3. */
double grpo_token_loss(const tsr_config *cfg, double lp, double old, double ref, double A,
                       double *dlp, int *clipped, double *kl);

#endif
