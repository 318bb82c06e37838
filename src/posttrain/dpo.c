/* dpo.c — DPO's loss and its pass over a rank's pairs (dpo.h; docs/dpo.md). */
#include "posttrain/dpo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "progress.h"
#include "data/dataloader.h"

/* log sigmoid(x), stable for either sign */
static double log_sigmoid(double x) { return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x)); }
static double sigmoid(double x) { return exp(log_sigmoid(x)); }

dpo_pair_out dpo_pair(const tsr_config *cfg, double pi_c, double pi_r, double ref_c,
                      double ref_r) {
    const double beta = cfg->dpo.beta, h = (pi_c - ref_c) - (pi_r - ref_r);
    dpo_pair_out o;
    if (cfg->dpo.loss == TSR_DPO_IPO) {
        const double d = h - 1.0 / (2.0 * beta);
        o.loss = d * d;
        o.dpi_c = 2.0 * d;
    } else {
        const double e = cfg->dpo.label_smoothing, z = beta * h;
        o.loss = -(1.0 - e) * log_sigmoid(z) - e * log_sigmoid(-z);
        o.dpi_c = beta * (-(1.0 - e) * sigmoid(-z) + e * sigmoid(z));
    }
    o.dpi_r = -o.dpi_c;
    return o;
}

/* rows (pairs of rows) into ref (the reference) and pol (the policy); the policy's forward is the
 * last one (the backward follows it). stored (dpo.reference = precomputed): the reference of the
 * pair of rows 2j, 2j+1 is stored[2 pair[j]], stored[2 pair[j] + 1], no forward; NULL: the base,
 * adapters off, no dropout. train: the policy runs with the dropout of microbatch b
 * (run_lora_pass), else without. */
static void pair_logps(const tsr_run *run, const int32_t *in, const int32_t *tg, int rows,
                       int train, int64_t b, const double *stored, const uint64_t *pair,
                       double *ref, double *pol) {
    tsr_model *m = run->model;
    tsr_lora *lo = &run->part->lora;
    if (stored) {
        for (int j = 0; j < rows / 2; j++)
            ref[2 * j] = stored[2 * pair[j]], ref[2 * j + 1] = stored[2 * pair[j] + 1];
    } else {
        lora_set_pass(lo, 0, 0, 0);
        m->lora = NULL;
        model_row_logprobs(m, in, tg, rows, *run->T, ref);
        m->lora = lo;
    }
    if (train) run_lora_pass(run, b);
    model_row_logprobs(m, in, tg, rows, *run->T, pol);
}

/* The pairs [p0, p0 + n) of ds into rows 0 .. 2n - 1 of the batch buffers. */
static void read_pairs(const tsr_run *run, const tsr_dataset *ds, const char *name, uint64_t p0,
                       int n) {
    const int T = *run->T;
    for (int j = 0; j < 2 * n; j++)
        dataloader_read(ds, name, T, 2 * p0 + (uint64_t)j, run->data->inputs + (size_t)j * T,
                        run->data->targets + (size_t)j * T);
}

/* The forwards of this rank in a pass over `pairs` pairs in forwards of `per` (forward c on rank
 * c mod W). Ranks run different numbers: where a forward is collective (zero3 / hsdp, expert
 * parallelism) they top up with idle forwards (model_forwards_most), after their own. */
static int64_t rank_forwards(const tsr_run *run, uint64_t pairs, int per) {
    const uint64_t fwd = (pairs + (uint64_t)per - 1) / (uint64_t)per;
    const uint64_t W = (uint64_t)run->mesh->data.world, r = (uint64_t)run->mesh->data.rank;
    return (int64_t)(fwd / W + (r < fwd % W ? 1 : 0));
}

void dpo_reference_logps(const tsr_run *run, const tsr_dataset *ds, const char *name,
                         uint64_t pairs, double *out) {
    const int per = *run->micro / 2; /* pairs per forward */
    const int W = run->mesh->data.world, T = *run->T;
    memset(out, 0, (size_t)pairs * 2 * sizeof(double));
    lora_set_pass(&run->part->lora, 0, 0, 0); /* no dropout (no-op without LoRA) */
    /* forward c, pairs [c per, (c + 1) per), runs on rank c mod W: the same rows in every
     * forward whatever W, and each value is computed on one rank (the others add zeros) */
    const int64_t mine = rank_forwards(run, pairs, per);
    const int64_t most = model_forwards_most(run->model, mine);
    for (uint64_t p0 = (uint64_t)run->mesh->data.rank * (uint64_t)per; p0 < pairs;
         p0 += (uint64_t)W * (uint64_t)per) {
        int n = pairs - p0 < (uint64_t)per ? (int)(pairs - p0) : per;
        read_pairs(run, ds, name, p0, n);
        model_row_logprobs(run->model, run->data->inputs, run->data->targets, 2 * n, T,
                           out + 2 * p0);
    }
    for (int64_t k = mine; k < most; k++) model_forward(run->model, NULL, NULL, 0, T);
    dist_view_sum_f64(&run->mesh->data, out, (size_t)pairs * 2);
}

double dpo_compute(const tsr_run *run, tsr_dpo *dp, float scale) {
    tsr_model *m = run->model;
    tsr_lora *lo = &run->part->lora;
    const int B = *run->micro, T = *run->T;
    if (dp->ref.on && !dp->ref.train)
        tsr_die(TSR_EXIT_INTERNAL, "dpo: the precomputed reference was not loaded before step 1");
    memset(dp->stats, 0, sizeof dp->stats); /* the step's sums (its one pass) */
    const size_t N = (size_t)B * (size_t)T;
    float *dl = tsr_malloc(N * sizeof(float));
    double *ref = tsr_malloc((size_t)B * sizeof(double)), *pol = tsr_malloc((size_t)B * sizeof(double));
    uint64_t *pair = tsr_malloc((size_t)B / 2 * sizeof *pair);
    double loss_sum = 0.0;
    /* MoE: the auxiliary losses of each microbatch's policy forward join the objective weighted
     * by its share of the step's pairs (scale is 1 / the step's pairs), so they enter as their
     * mean over the step, as in the lm objective (docs/dpo.md) */
    const float moe_w = m->E ? scale * (float)(B / 2) : 0.0f;
    for (int64_t b = 0; b < *run->per_rank; b += B) {
        const int32_t *in = run->data->inputs + b * T, *tg = run->data->targets + b * T;
        for (int j = 0; j < B / 2; j++) pair[j] = run->data->row_sample[b + 2 * j] / 2;
        pair_logps(run, in, tg, B, 1, b, dp->ref.train, pair, ref, pol); /* the policy's
                                                                           * activations kept */
        if (run->out->moe) /* the policy's routing */
            model_moe_stats_add_w(m, moe_w, run->out->moe);
        for (int j = 0; j + 1 < B; j += 2) {
            dpo_pair_out o = dpo_pair(run->cfg, pol[j], pol[j + 1], ref[j], ref[j + 1]);
            /* d(scale x loss) / d(a token's loss) = -scale d loss / d pi of its answer */
            for (int i = 0; i < T; i++) {
                dl[(size_t)j * T + i] = (float)(-scale * o.dpi_c);
                dl[(size_t)(j + 1) * T + i] = (float)(-scale * o.dpi_r);
            }
            const double rc = run->cfg->dpo.beta * (pol[j] - ref[j]);
            const double rr = run->cfg->dpo.beta * (pol[j + 1] - ref[j + 1]);
            dp->stats[DPO_CHOSEN_REWARD] += rc;
            dp->stats[DPO_REJECTED_REWARD] += rr;
            dp->stats[DPO_ACCURACY] += rc > rr;
            dp->stats[DPO_CHOSEN_LOGP] += pol[j];
            dp->stats[DPO_REJECTED_LOGP] += pol[j + 1];
            dp->stats[DPO_LOSS] += o.loss;
            loss_sum += o.loss;
        }
        model_backward_weighted(m, in, tg, B, T, dl, moe_w);
    }
    lora_set_pass(lo, 0, 0, 0); /* evaluations: no dropout */
    free(dl), free(ref), free(pol), free(pair);
    return loss_sum;
}

uint64_t dpo_val_pairs(const tsr_run *run) {
    if (!run->data->val) return 0;
    uint64_t pairs = dataset_n_samples(run->data->val, *run->T) / 2;
    if (run->cfg->eval_samples > 0 && (uint64_t)run->cfg->eval_samples / 2 < pairs)
        pairs = (uint64_t)run->cfg->eval_samples / 2;
    return pairs;
}

double dpo_eval(const tsr_run *run, const tsr_dpo *dp, double *accuracy) {
    const int B = *run->micro, W = run->mesh->data.world;
    const uint64_t pairs = dpo_val_pairs(run);
    double ref[2 * 64], pol[2 * 64], sums[3] = {0, 0, 0}; /* loss, correct, pairs */
    uint64_t pair[64];
    const int per = B / 2 < 64 ? B / 2 : 64; /* pairs per forward */
    const double *stored = dp->ref.on ? dp->ref.val : NULL;
    if (dp->ref.on && pairs > 0 && (!stored || dp->ref.n_val < pairs))
        tsr_die(TSR_EXIT_INTERNAL, "dpo: the precomputed reference holds %llu validation pairs, "
                "the evaluation takes %llu", (unsigned long long)dp->ref.n_val,
                (unsigned long long)pairs);
    /* rank r takes pairs r per, (r + W) per, ... in forwards of `per` pairs; the policy's
     * forward, and without a stored reference the base's (pair_logps), per forward */
    const int64_t mine = rank_forwards(run, pairs, per) * (stored ? 1 : 2);
    const int64_t most = model_forwards_most(run->model, mine);
    char what[1100];
    tsr_progress pg; /* every TSR_PROGRESS_S on rank 0: its pairs' place among all of them */
    snprintf(what, sizeof what, "eval: %s", run->cfg->data.val);
    tsr_progress_begin(&pg, what, pairs, "preference pairs");
    for (uint64_t p0 = (uint64_t)run->mesh->data.rank * (uint64_t)per; p0 < pairs;
         p0 += (uint64_t)W * (uint64_t)per) {
        int n = pairs - p0 < (uint64_t)per ? (int)(pairs - p0) : per;
        read_pairs(run, run->data->val, run->cfg->data.val, p0, n);
        for (int j = 0; j < n; j++) pair[j] = p0 + (uint64_t)j;
        pair_logps(run, run->data->inputs, run->data->targets, 2 * n, 0, 0, stored, pair, ref, pol);
        for (int j = 0; j < n; j++) {
            dpo_pair_out o = dpo_pair(run->cfg, pol[2 * j], pol[2 * j + 1], ref[2 * j],
                                      ref[2 * j + 1]);
            sums[0] += o.loss;
            sums[1] += pol[2 * j] - ref[2 * j] > pol[2 * j + 1] - ref[2 * j + 1];
            sums[2] += 1;
        }
        tsr_progress_tick(&pg, p0 + (uint64_t)n);
    }
    for (int64_t k = mine; k < most; k++) model_forward(run->model, NULL, NULL, 0, *run->T);
    dist_view_sum_f64(&run->mesh->data, sums, 3);
    *accuracy = sums[2] > 0 ? sums[1] / sums[2] : NAN;
    return sums[2] > 0 ? sums[0] / sums[2] : NAN;
}
