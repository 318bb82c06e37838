/* objective.h — what the trainer optimises, as one table per objective (docs/training.md
 * "Objectives"): language modelling (lm), Direct Preference Optimization (dpo, docs/dpo.md) and
 * GRPO (grpo, docs/rl.md). The trainer (train/trainer*.c), the data loader's options, the
 * device's glue (train/train_gpu.c), the figures (telemetry/metrics.c) and the plan
 * (plan/plan.c) ask the run's table, chosen once at start by objective_of from cfg.objective;
 * none of them tests the kind. Each row lives beside its objective's code: lm's in
 * train/objectives.c (with objective_of, the only code besides the config that names the kinds),
 * dpo's in posttrain/dpo_objective.c, grpo's in posttrain/grpo_objective.c.
 *
 * An objective owns its state: its table's create makes it (the trainer holds it as an opaque
 * pointer, hands it to every hook, and its table's release frees it), and its references, the
 * part of it a run keeps (DPO's stored log-probabilities, GRPO's initial weights), are saved and
 * read back through check_reference and open_reference. The hooks see the run through its view
 * (run/run.h), never the trainer.
 *
 * A hook left NULL means "nothing of the objective's own": the trainer's common path (language
 * modelling's) runs, as each field says. */
#ifndef TSR_OBJECTIVE_H
#define TSR_OBJECTIVE_H

#include <stdint.h>

#include "run/run.h"

/* One figure of a step: NAME (prefix_NAME in metrics.jsonl, prefix/NAME in TensorBoard) */
typedef struct objective_figure {
    const char *name;
    double v;
} objective_figure;
#define OBJECTIVE_MAX_FIGURES 16

/* One figure of the step line: " | label %.{digits}f ...", the value of step figure `figure` */
typedef struct objective_line_figure {
    const char *label;
    int digits;
    int figure;
} objective_line_figure;

/* One figure of an evaluation: "label %.{digits}f" on the eval line, KEY in metrics.jsonl,
 * eval/KEY in TensorBoard */
typedef struct objective_eval_figure {
    const char *label;
    int digits;
    const char *key;
    double v;
} objective_eval_figure;

typedef struct tsr_objective {
    const char *name;            /* the config's word: "lm", "dpo", "grpo" */

    /* --- its state --- */
    /* the objective's own state, zeroed (every start, a plan's too: trainer_init's first step);
     * NULL hook: none (the hooks get NULL) */
    void *(*create)(void);
    /* frees what the state holds and the state (trainer_free); NULL: nothing to free */
    void (*release)(void *s);

    /* --- the start (trainer_init) --- */
    /* the rows of one sample of the batch in a microbatch (grpo: a prompt's group_size
     * completions; else 1): micro_batch counts samples, the trainer's micro rows */
    int64_t (*rows_per_sample)(const tsr_config *cfg);
    /* after the data are open (not for a plan): the objective's own start (grpo: the prompts,
     * the reward); NULL none. 0 or an exit code after rank 0 reported. Collective. */
    int (*start)(const tsr_run *r, void *s);
    /* the reference's choice (dpo.reference, grpo.reference = auto resolved in r->cfg) and the
     * FLOPs per token its forwards add to r->out->flops_per_token; NULL: none */
    void (*references)(const tsr_run *r, void *s);
    /* once the checkpoint is read: before run_dir is written (check_reference: a resume's stored
     * reference checked and read) and after it is open (open_reference: the reference built and
     * saved, copied or read back); NULL: none. 0 or an exit code, the same on every rank.
     * Collective. */
    int (*check_reference)(const tsr_run *r, void *s);
    int (*open_reference)(const tsr_run *r, void *s);
    /* 1 when open_reference runs forwards of the model (dpo: its reference pass): the trainer
     * allocates the activations first and scopes it as an evaluation (run_eval_scope); NULL: 0 */
    int (*reference_forwards)(const void *s);

    /* --- the data (data/dataloader.h's options) --- */
    int pairs;                   /* the datasets hold preference pairs, whole in a sample each */
    int prompts;                 /* the datasets hold prompts (not samples of seq_len + 1) */
    int segment_starts;          /* attn_mask = document: the batch carries segment starts */

    /* --- the step (trainer_step) --- */
    /* the step's data instead of data batch d loaded: (grpo) the rollouts; returns the
     * completion tokens trained on (all ranks), -1 after a failure (reported). NULL: the batch
     * loaded. Collective. */
    int64_t (*rollout)(const tsr_run *r, void *s, int64_t d);
    /* the objective's own pass over this rank's rows, on the host's model or the device's
     * (train_gpu.c routes the device's model calls): gradients += those of scale x its loss sum
     * (the caller zeroed them); returns this rank's loss sum. NULL: language modelling's
     * microbatches, the strategy's own loop (trainer.c, or the device library's) */
    double (*pass)(const tsr_run *r, void *s, float scale);
    /* the loss's denominator: the step's loss is the loss sum over it (lm: the counted targets,
     * `counted`; dpo: the pairs; grpo: 1, its pass weighs its tokens itself) */
    int64_t (*denominator)(const tsr_config *cfg, int64_t counted);
    /* the optimizer updates of a step (grpo: grpo.updates; else 1) */
    int (*updates)(const tsr_config *cfg);
    /* after the step's first pass: its statistics summed over the data ranks; NULL: none */
    void (*reduce_stats)(const tsr_run *r, void *s);
    /* around a deterministic replay's recomputation of another rank's pass (train/sdc.h): on = 1
     * before it, 0 after, what the pass keeps besides the gradients left as the step's own (grpo:
     * its count of passes, its statistics and their collective); NULL: nothing */
    void (*replay_scope)(void *s, int on);

    /* --- the figures (telemetry/metrics.c) --- */
    const char *figure_prefix;   /* the step figures' prefix ("dpo", "grpo"); NULL: none */
    /* the step's figures into f (at most OBJECTIVE_MAX_FIGURES); returns their count */
    int (*step_figures)(const tsr_config *cfg, const void *s, const tsr_step_stats *st,
                        objective_figure *f);
    objective_line_figure line[4]; /* the step line's figures (of step_figures), label NULL ends */

    /* --- the evaluation (trainer.c trainer_eval, telemetry/metrics.c metrics_log_eval) --- */
    /* the evaluation of data.val: returns the validation loss (NAN: none), the objective's own
     * figures into its state. Collective; run_eval_scope on. */
    double (*eval)(const tsr_run *r, void *s);
    /* the last evaluation failed (reported): nothing logged, the run stops (exit 3); NULL: never */
    int (*eval_failed)(const void *s);
    /* its two figures, for the eval line, metrics.jsonl and TensorBoard */
    void (*eval_figures)(const void *s, double val_loss, objective_eval_figure f[2]);
    int eval_json_plain;         /* metrics.jsonl's numbers as %.9g even when not finite (lm's
                                  * record; the others write null) */
} tsr_objective;

/* The table of an objective kind (cfg.objective); trainer_init takes the run's with it. */
const tsr_objective *objective_of(tsr_objective_kind kind);

/* the rows, each beside its objective's code */
extern const tsr_objective objective_lm;   /* train/objectives.c */
extern const tsr_objective objective_dpo;  /* posttrain/dpo_objective.c */
extern const tsr_objective objective_grpo; /* posttrain/grpo_objective.c */

#endif
