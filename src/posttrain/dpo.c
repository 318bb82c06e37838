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
static void pair_logps(tsr_trainer *t, const int32_t *in, const int32_t *tg, int rows, int train,
                       int64_t b, const double *stored, const uint64_t *pair, double *ref,
                       double *pol) {
    tsr_model *m = &t->model;
    tsr_lora *lo = &t->part.lora;
    if (stored) {
        for (int j = 0; j < rows / 2; j++)
            ref[2 * j] = stored[2 * pair[j]], ref[2 * j + 1] = stored[2 * pair[j] + 1];
    } else {
        lora_set_pass(lo, 0, 0, 0);
        m->lora = NULL;
        model_row_logprobs(m, in, tg, rows, t->T, ref);
        m->lora = lo;
    }
    if (train) run_lora_pass(&t->run, b);
    model_row_logprobs(m, in, tg, rows, t->T, pol);
}

/* The pairs [p0, p0 + n) of ds into rows 0 .. 2n - 1 of the batch buffers. */
static void read_pairs(tsr_trainer *t, const tsr_dataset *ds, const char *name, uint64_t p0,
                       int n) {
    for (int j = 0; j < 2 * n; j++)
        dataloader_read(ds, name, t->T, 2 * p0 + (uint64_t)j, t->data.inputs + (size_t)j * t->T,
                        t->data.targets + (size_t)j * t->T);
}

/* The forwards of this rank in a pass over `pairs` pairs in forwards of `per` (forward c on rank
 * c mod W). Ranks run different numbers: where a forward is collective (zero3 / hsdp, expert
 * parallelism) they top up with idle forwards (model_forwards_most), after their own. */
static int64_t rank_forwards(const tsr_trainer *t, uint64_t pairs, int per) {
    const uint64_t fwd = (pairs + (uint64_t)per - 1) / (uint64_t)per;
    const uint64_t W = (uint64_t)t->mesh.data.world, r = (uint64_t)t->mesh.data.rank;
    return (int64_t)(fwd / W + (r < fwd % W ? 1 : 0));
}

void dpo_reference_logps(tsr_trainer *t, const tsr_dataset *ds, const char *name, uint64_t pairs,
                         double *out) {
    const int per = t->micro / 2, W = t->mesh.data.world; /* pairs per forward */
    memset(out, 0, (size_t)pairs * 2 * sizeof(double));
    lora_set_pass(&t->part.lora, 0, 0, 0); /* no dropout (no-op without LoRA) */
    /* forward c, pairs [c per, (c + 1) per), runs on rank c mod W: the same rows in every
     * forward whatever W, and each value is computed on one rank (the others add zeros) */
    const int64_t mine = rank_forwards(t, pairs, per), most = model_forwards_most(&t->model, mine);
    for (uint64_t p0 = (uint64_t)t->mesh.data.rank * (uint64_t)per; p0 < pairs;
         p0 += (uint64_t)W * (uint64_t)per) {
        int n = pairs - p0 < (uint64_t)per ? (int)(pairs - p0) : per;
        read_pairs(t, ds, name, p0, n);
        model_row_logprobs(&t->model, t->data.inputs, t->data.targets, 2 * n, t->T, out + 2 * p0);
    }
    for (int64_t k = mine; k < most; k++) model_forward(&t->model, NULL, NULL, 0, t->T);
    dist_view_sum_f64(&t->mesh.data, out, (size_t)pairs * 2);
}

double dpo_compute(tsr_trainer *t, float scale) {
    tsr_model *m = &t->model;
    tsr_lora *lo = &t->part.lora;
    const int B = t->micro, T = t->T;
    if (t->dpo_ref.on && !t->dpo_ref.train)
        tsr_die(TSR_EXIT_INTERNAL, "dpo: the precomputed reference was not loaded before step 1");
    const size_t N = (size_t)B * (size_t)T;
    float *dl = tsr_malloc(N * sizeof(float));
    double *ref = tsr_malloc((size_t)B * sizeof(double)), *pol = tsr_malloc((size_t)B * sizeof(double));
    uint64_t *pair = tsr_malloc((size_t)B / 2 * sizeof *pair);
    double loss_sum = 0.0;
    /* MoE: the auxiliary losses of each microbatch's policy forward join the objective weighted
     * by its share of the step's pairs (scale is 1 / the step's pairs), so they enter as their
     * mean over the step, as in the lm objective (docs/dpo.md) */
    const float moe_w = m->E ? scale * (float)(B / 2) : 0.0f;
    for (int64_t b = 0; b < t->per_rank; b += B) {
        const int32_t *in = t->data.inputs + b * T, *tg = t->data.targets + b * T;
        for (int j = 0; j < B / 2; j++) pair[j] = t->data.row_sample[b + 2 * j] / 2;
        pair_logps(t, in, tg, B, 1, b, t->dpo_ref.train, pair, ref, pol); /* the policy's
                                                                           * activations kept */
        if (t->out.moe) model_moe_stats_add_w(m, moe_w, t->out.moe); /* the policy's routing */
        for (int j = 0; j + 1 < B; j += 2) {
            dpo_pair_out o = dpo_pair(&t->cfg, pol[j], pol[j + 1], ref[j], ref[j + 1]);
            /* d(scale x loss) / d(a token's loss) = -scale d loss / d pi of its answer */
            for (int i = 0; i < T; i++) {
                dl[(size_t)j * T + i] = (float)(-scale * o.dpi_c);
                dl[(size_t)(j + 1) * T + i] = (float)(-scale * o.dpi_r);
            }
            const double rc = t->cfg.dpo.beta * (pol[j] - ref[j]);
            const double rr = t->cfg.dpo.beta * (pol[j + 1] - ref[j + 1]);
            t->out.dpo[DPO_CHOSEN_REWARD] += rc;
            t->out.dpo[DPO_REJECTED_REWARD] += rr;
            t->out.dpo[DPO_ACCURACY] += rc > rr;
            t->out.dpo[DPO_CHOSEN_LOGP] += pol[j];
            t->out.dpo[DPO_REJECTED_LOGP] += pol[j + 1];
            t->out.dpo[DPO_LOSS] += o.loss;
            loss_sum += o.loss;
        }
        model_backward_weighted(m, in, tg, B, T, dl, moe_w);
    }
    lora_set_pass(lo, 0, 0, 0); /* evaluations: no dropout */
    free(dl), free(ref), free(pol), free(pair);
    return loss_sum;
}

uint64_t dpo_val_pairs(const tsr_trainer *t) {
    if (!t->data.val) return 0;
    uint64_t pairs = dataset_n_samples(t->data.val, t->T) / 2;
    if (t->cfg.eval_samples > 0 && (uint64_t)t->cfg.eval_samples / 2 < pairs)
        pairs = (uint64_t)t->cfg.eval_samples / 2;
    return pairs;
}

double dpo_eval(tsr_trainer *t, double *accuracy) {
    const int B = t->micro, W = t->mesh.data.world;
    const uint64_t pairs = dpo_val_pairs(t);
    double ref[2 * 64], pol[2 * 64], sums[3] = {0, 0, 0}; /* loss, correct, pairs */
    uint64_t pair[64];
    const int per = B / 2 < 64 ? B / 2 : 64; /* pairs per forward */
    const double *stored = t->dpo_ref.on ? t->dpo_ref.val : NULL;
    if (t->dpo_ref.on && pairs > 0 && (!stored || t->dpo_ref.n_val < pairs))
        tsr_die(TSR_EXIT_INTERNAL, "dpo: the precomputed reference holds %llu validation pairs, "
                "the evaluation takes %llu", (unsigned long long)t->dpo_ref.n_val,
                (unsigned long long)pairs);
    /* rank r takes pairs r per, (r + W) per, ... in forwards of `per` pairs; the policy's
     * forward, and without a stored reference the base's (pair_logps), per forward */
    const int64_t mine = rank_forwards(t, pairs, per) * (stored ? 1 : 2);
    const int64_t most = model_forwards_most(&t->model, mine);
    char what[1100];
    tsr_progress pg; /* every TSR_PROGRESS_S on rank 0: its pairs' place among all of them */
    snprintf(what, sizeof what, "eval: %s", t->cfg.data.val);
    tsr_progress_begin(&pg, what, pairs, "preference pairs");
    for (uint64_t p0 = (uint64_t)t->mesh.data.rank * (uint64_t)per; p0 < pairs;
         p0 += (uint64_t)W * (uint64_t)per) {
        int n = pairs - p0 < (uint64_t)per ? (int)(pairs - p0) : per;
        read_pairs(t, t->data.val, t->cfg.data.val, p0, n);
        for (int j = 0; j < n; j++) pair[j] = p0 + (uint64_t)j;
        pair_logps(t, t->data.inputs, t->data.targets, 2 * n, 0, 0, stored, pair, ref, pol);
        for (int j = 0; j < n; j++) {
            dpo_pair_out o = dpo_pair(&t->cfg, pol[2 * j], pol[2 * j + 1], ref[2 * j],
                                      ref[2 * j + 1]);
            sums[0] += o.loss;
            sums[1] += pol[2 * j] - ref[2 * j] > pol[2 * j + 1] - ref[2 * j + 1];
            sums[2] += 1;
        }
        tsr_progress_tick(&pg, p0 + (uint64_t)n);
    }
    for (int64_t k = mine; k < most; k++) model_forward(&t->model, NULL, NULL, 0, t->T);
    dist_view_sum_f64(&t->mesh.data, sums, 3);
    *accuracy = sums[2] > 0 ? sums[1] / sums[2] : NAN;
    return sums[2] > 0 ? sums[0] / sums[2] : NAN;
}
