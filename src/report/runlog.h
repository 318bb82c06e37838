/* runlog.h — a run's metrics.jsonl read back: the step series and the eval series.
 *
 * metrics.jsonl holds one flat JSON object per line (src/telemetry/metrics.c). Step lines carry "step"
 * and "loss" (plus "lr", "grad_norm", "tokens", "tokens_per_s", "mfu", "step_time_s"); eval lines
 * "step" and "val_loss" (plus "val_ppl") or, for GRPO, "val_pass_at_1"; DPO step lines also
 * "dpo_reward_margin" and "dpo_accuracy", GRPO's "grpo_reward_mean" and "grpo_pass_rate"; save
 * lines ({"checkpoint": "save", ...}) the saves series: "seconds", "blocking_s", "write_s",
 * "bytes" (DPO's eval lines also "val_dpo_accuracy"; a mixture of experts' step lines "moe_load":
 * RL_MOE_CV_*) (a line written before save_async has no blocking_s: its save was synchronous,
 * blocking = seconds); lines with "event" (start, guard, rollback) and the other checkpoint lines
 * (resume, init-from, rollback) are not series points. {"event": "start", "step": S} lines (one per process
 * start) after the first are the run's restarts, at step S. Any value may be null (a non-finite number). A step
 * logged twice (a resume, a rollback) counts with its later line.
 */
#ifndef TSR_RUNLOG_H
#define TSR_RUNLOG_H

#include <stddef.h>
#include <stdint.h>

typedef enum runlog_field {
    RL_STEP, RL_LOSS, RL_LR, RL_GRAD_NORM, RL_TOKENS, RL_TOKENS_PER_S, RL_MFU, RL_STEP_TIME_S,
    RL_VAL_LOSS, RL_VAL_PPL,
    RL_DPO_MARGIN, RL_DPO_ACCURACY, /* objective = dpo step lines (docs/dpo.md) */
    RL_GRPO_REWARD, RL_GRPO_PASS,   /* objective = grpo step lines (docs/rl.md) */
    RL_VAL_PASS,                    /* ... and its eval lines: the held-out pass@1 */
    RL_SECONDS, RL_BLOCKING_S, RL_WRITE_S, RL_BYTES, /* save lines (docs/tracking.md) */
    RL_VAL_DPO_ACCURACY,            /* a DPO run's eval lines: the validation pairs' accuracy */
    /* not keys: from a mixture of experts' "moe_load" array (one {tokens, min, max, cv} per MoE
     * layer, docs/moe.md), the mean and the largest of the layers' cv (the expert load's
     * coefficient of variation: 0 = balanced) */
    RL_MOE_CV_MEAN, RL_MOE_CV_MAX,
    RL_FIELD_COUNT
} runlog_field;
#define RL_KEY_COUNT RL_MOE_CV_MEAN /* the fields that are a line's keys */

typedef struct runlog_point {
    int64_t step;
    double v[RL_FIELD_COUNT]; /* v[f] is meaningful when has & (1u << f) */
    unsigned has;             /* bit f: field f holds a number (present and not null) */
    int async;                /* a save line: "async": true (written in the background) */
    size_t line;              /* 1-based line of metrics.jsonl */
} runlog_point;

typedef struct runlog {
    runlog_point *train, *eval, *saves; /* sorted by step, one point per step */
    size_t n_train, n_eval, n_saves;
    size_t train_lines, eval_lines; /* lines read, before keeping one per step */
    int64_t *restarts;              /* the step of every start line after the first, in file order */
    size_t n_restarts, n_starts;
} runlog;

/* Reads path. Returns 0, or TSR_EXIT_DATA after an error naming the file (cannot open), or
 * file:line:column and what was expected (a line that is not a JSON object). */
int runlog_read(runlog *rl, const char *path);
void runlog_free(runlog *rl);
/* The JSON key of a field ("loss", ...). */
const char *runlog_field_name(runlog_field f);
/* The run has step lines holding field f. */
int runlog_has(const runlog *rl, runlog_field f);
/* What the run's "loss" is, as an axis label: a DPO run's pairs' DPO loss, a GRPO run's clipped
 * policy-gradient loss, else the language model's cross-entropy in nats per token. */
const char *runlog_loss_label(const runlog *rl);

/* Median of the finite values of field f over the series p[0..np); NAN when there are none.
 * max (may be NULL): their largest. */
double runlog_points_median(const runlog_point *p, size_t np, runlog_field f, double *max);
/* The same over the step series (rl->train). */
double runlog_median(const runlog *rl, runlog_field f);

#endif
