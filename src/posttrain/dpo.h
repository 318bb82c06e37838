/* dpo.h — Direct Preference Optimization on preference pairs (objective = "dpo"; docs/dpo.md).
 *
 * A microbatch holds whole pairs: rows 2j (the prompt and the chosen answer) and 2j+1 (the same
 * prompt and the rejected one), as `tessera prep --format preference` lays them out and the pair
 * sampler keeps them. For each pair, with log-probabilities summed over each answer's target
 * tokens, pi of the policy (the model trained: base + adapters with LoRA, all weights without) and
 * ref of the reference (dpo.reference: `base`, the base with the adapters off, so no second copy
 * of the weights; `precomputed`, the initial model's values, computed once and stored,
 * posttrain/dpo_ref.h):
 *   z = beta ((pi_c - ref_c) - (pi_r - ref_r))
 *   sigmoid: loss = -(1 - e) log sigmoid(z) - e log sigmoid(-z)   (e = dpo.label_smoothing)
 *   ipo:     loss = (z / beta - 1 / (2 beta))^2
 * The step's loss is the mean over the global batch's pairs; the gradient reaches the model as a
 * per-token weight on each answer's token losses (model_backward_weighted). */
#ifndef TSR_DPO_H
#define TSR_DPO_H

#include "run/run.h"

/* the step's statistics, tsr_dpo.stats[]: sums over pairs */
enum { DPO_CHOSEN_REWARD = 0, DPO_REJECTED_REWARD, DPO_ACCURACY, DPO_CHOSEN_LOGP,
       DPO_REJECTED_LOGP, DPO_LOSS, DPO_NSTATS };

/* dpo.reference = precomputed (owner: dpo_ref.c; docs/dpo.md): the initial model's
 * log-probabilities of every pair, (pairs, 2): [2p] chosen, [2p + 1] rejected, the same on every
 * rank; on = 0 (the base's reference): none. */
typedef struct tsr_dpo_ref {
    int on;
    int loaded;                  /* read on resume (not computed) */
    int copy;                    /* read from beside another run's checkpoint: to be written into
                                  * run_dir once it is opened */
    double *train, *val;         /* data.train's pairs; data.val's first n_val (NULL: none) */
    uint64_t n_train, n_val;
    char init[1024];             /* the initial model they were computed on, as recorded */
    uint32_t crc;                /* the file's checksum (its trailer): dpo.reference_checksum */
} tsr_dpo_ref;

/* objective = dpo's own state (the objective table's: dpo_objective.c creates and frees it) */
typedef struct tsr_dpo {
    tsr_dpo_ref ref;             /* the precomputed reference, when on */
    double stats[DPO_NSTATS];    /* the step's sums over its pairs (all data ranks' once
                                  * reduced) */
    double val_accuracy;         /* the last evaluation's pair accuracy */
} tsr_dpo;

/* One pair's loss and its derivatives d loss / d pi_c and d loss / d pi_r. */
typedef struct dpo_pair_out {
    double loss, dpi_c, dpi_r;
} dpo_pair_out;
dpo_pair_out dpo_pair(const tsr_config *cfg, double pi_c, double pi_r, double ref_c,
                      double ref_r);

/* This rank's batch (run->data) in microbatches of pairs: the gradients of the trained parameters
 * (the adapters, or all weights; the caller zeroed them) += those of scale x the sum of the pairs'
 * losses; the step's statistics into dp->stats. The reference of each pair is dp->ref's stored
 * values when on, else the base's forward. Returns this rank's sum of pair losses. */
double dpo_compute(const tsr_run *run, tsr_dpo *dp, float scale);

/* The reference pass of dpo.reference = precomputed: out[2p], out[2p + 1] = the current model's
 * log-probabilities of pair p's chosen and rejected rows, for the pairs [0, pairs) of ds, without
 * dropout. Forward c (pairs [c m, (c + 1) m), m = micro_batch / 2) runs on rank c mod W, and the
 * values are summed over the ranks, so they are the same bits whatever the rank count (under
 * parallel.expert within rounding: the exchange groups the experts' rows by rank). Collective
 * (ranks top up with idle forwards where a forward is: model_forwards_most); run_eval_scope
 * on, activations allocated. */
void dpo_reference_logps(const tsr_run *run, const tsr_dataset *ds, const char *name,
                         uint64_t pairs, double *out);

/* The validation pairs an evaluation takes: data.val's, at most eval_samples / 2 (eval_samples
 * > 0); 0 without data.val. */
uint64_t dpo_val_pairs(const tsr_run *run);

/* The validation pairs (data.val; eval_samples > 0: its first eval_samples / 2 pairs), split over
 * the ranks, reference and policy without dropout: returns the mean DPO loss over them, *accuracy
 * the share whose chosen reward exceeds the rejected one. Collective (idle forwards as above);
 * run_eval_scope on. */
double dpo_eval(const tsr_run *run, const tsr_dpo *dp, double *accuracy);

#endif
