/* grpo_loss.c — GRPO's objective over this rank's rows (grpo.h; docs/rl.md "The objective"): the
 * step's fourth phase, the loss, after grpo.c's rollout, reward and advantage.
 *
 * Per completion token t of row i (advantage A_i, rollout log-probability old_t):
 *   rho = exp(lp - old),  obj = min(rho A, clip(rho, 1 - clip_low, 1 + clip_high) A),
 *   loss_t = -obj + beta (exp(ref - lp) - (ref - lp) - 1)
 *   d loss_t / d lp = -(rho A, or 0 where the clip holds: clip(rho) A < rho A)
 *                     + beta (1 - exp(ref - lp))
 * (where rho is inside the clip range both terms are rho A: the derivative is rho A, as autograd
 * gives min's). The step's loss is sum_i sum_t w_it loss_t with w_it = 1 / (R n_i) (sequence), 1 /
 * (the batch's completion tokens) (token) or 1 / (R N) (constant), R the batch's completions. The
 * model sees it as d(loss)/d(token loss) = -w_it d loss_t / d lp on each completion token
 * (model_backward_weighted after model_token_scores), DPO's route.
 */
#include <math.h>
#include <string.h>

#include "common.h"
#include "posttrain/grpo_int.h"

double grpo_token_loss(const tsr_config *cfg, double lp, double old, double ref, double A,
                       double *dlp, int *clipped, double *kl) {
    const double rho = exp(lp - old);
    const double lo = 1.0 - cfg->grpo.clip_low, hi = 1.0 + cfg->grpo.clip_high;
    const double rc = rho < lo ? lo : rho > hi ? hi : rho;
    const double un = rho * A, cl = rc * A;
    *clipped = cl < un;
    double loss = -(*clipped ? cl : un);
    *dlp = *clipped ? 0.0 : -un;
    *kl = 0.0;
    if (cfg->grpo.kl_coef > 0) {
        const double x = ref - lp, e = exp(x);
        *kl = e - x - 1.0;
        loss += cfg->grpo.kl_coef * *kl;
        *dlp += cfg->grpo.kl_coef * (1.0 - e);
    }
    return loss;
}

/* Rows [r0, r0 + B) of the step's kept rows as inputs and targets (B, T): the context, EOT after
 * it; the completion's tokens the targets. */
static void rows_batch(const tsr_run *run, tsr_grpo *g, int64_t r0, int B) {
    const int T = *run->T;
    for (int b = 0; b < B; b++) {
        grpo_row *r = grpo_row_at(g, g->kept, (size_t)(r0 + b));
        const int32_t *ctx = grpo_ctx(r);
        int32_t *in = g->in + (size_t)b * T, *tg = g->tg + (size_t)b * T;
        const int L = 1 + r->n_prompt + r->n; /* L - 1 <= T (grpo_init) */
        for (int i = 0; i < T; i++) {
            in[i] = i < L - 1 ? ctx[i] : g->stop_ids[0];
            tg[i] = i >= r->n_prompt && i < L - 1 ? ctx[i + 1] : -1;
        }
    }
}

/* the microbatch's token weights: dl = -w d loss / d lp; returns sum w loss; st += (kl, clipped) */
static double weigh(const tsr_run *run, tsr_grpo *g, int64_t r0, int B, double st[2]) {
    const int T = *run->T;
    double sum = 0.0;
    memset(g->dl, 0, (size_t)B * T * sizeof *g->dl);
    for (int b = 0; b < B; b++) {
        grpo_row *r = grpo_row_at(g, g->kept, (size_t)(r0 + b));
        const float *old = grpo_logp(g, r);
        const double w = g->w_tok > 0 ? g->w_tok : g->w_row / r->n;
        for (int j = 0; j < r->n; j++) {
            const size_t at = (size_t)b * T + (size_t)(r->n_prompt + j);
            double dlp, kl;
            int clipped;
            const double lp = -(double)g->losses[at];
            sum += w * grpo_token_loss(run->cfg, lp, old[j], g->ref[at], r->adv, &dlp, &clipped,
                                       &kl);
            g->dl[at] = (float)(-w * dlp);
            st[0] += kl, st[1] += clipped;
        }
    }
    return sum;
}

double grpo_compute(const tsr_run *run, tsr_grpo *g) {
    const int update = g->update++;
    tsr_model *m = run->model;
    const int B = *run->micro, T = *run->T;
    const int64_t rows = *run->per_rank * g->G, first = run->mesh->data.rank * rows;
    const double R = (double)run->cfg->global_batch * g->G;
    const float moe_w = m->E ? (float)B / (float)R : 0.0f; /* the router losses: their mean */
    double loss = 0.0, st[2] = {0.0, 0.0};
    for (int64_t b = 0; b < rows; b += B) {
        rows_batch(run, g, first + b, B);
        memset(g->ref, 0, (size_t)B * T * sizeof *g->ref);
        if (run->cfg->grpo.kl_coef > 0) grpo_ref_logps(run, g, g->in, g->tg, B, g->ref);
        if (run->part->lora_on)
            lora_set_pass(&run->part->lora, 1, run_lora_key(run),
                          lora_pass_row0(run->mesh->data.rank, rows, b, T));
        model_token_scores(m, g->in, g->tg, B, T, g->losses, NULL);
        if (run->out->moe) model_moe_stats_add_w(m, moe_w, run->out->moe);
        loss += weigh(run, g, first + b, B, st);
        model_backward_weighted(m, g->in, g->tg, B, T, g->dl, moe_w);
    }
    if (run->part->lora_on) lora_set_pass(&run->part->lora, 0, 0, 0); /* evaluations: no dropout */
    if (update == 0) {
        dist_view_sum_f64(&run->mesh->data, st, 2); /* (a tensor group's ranks: its rows once) */
        g->stats[GRPO_KL] = st[0], g->stats[GRPO_CLIPPED] = st[1];
    }
    return loss;
}
