/* guard.h — the loss-spike and NaN guard (docs/spike-guard.md).
 *
 * Every step, before the optimizer update, the global loss and gradient norm are judged against a
 * rolling window of the last guard.window accepted steps: an outlier is a value more than
 * threshold standard deviations above the window mean (zscore; the deviation is floored at 1e-3 x
 * the mean so a flat window does not make noise an outlier) or above threshold x the mean
 * (multiplier). A NaN or Inf loss or gradient norm is always an outlier, also before the window is
 * full and with guard.window = 0. Outliers never enter the window.
 *
 * Verdicts escalate with guard.action: warn (apply the update, except a non-finite one), skip (no
 * optimizer state change), rollback (skip, and after guard.patience consecutive outliers restore
 * the newest checkpoint older than the first of them and skip the data window that led there);
 * stop when a rollback is needed but guard.max_rollbacks are used up, or after patience
 * consecutive non-finite steps that cannot be rolled back. warn / skip restart the window after
 * patience consecutive finite outliers (a lasting level change); so does rollback when there is
 * no checkpoint to roll back to (the trainer decides that). The trainer broadcasts rank 0's loss
 * and norm before judging, so every rank holds the same guard state.
 */
#ifndef TSR_GUARD_H
#define TSR_GUARD_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

#define TSR_GUARD_MAX_SKIPS 64

typedef enum { GUARD_OK = 0, GUARD_WARN, GUARD_SKIP, GUARD_ROLLBACK, GUARD_STOP } tsr_guard_verdict;

typedef struct tsr_guard {
    int64_t window, patience, max_rollbacks;
    tsr_guard_method method;
    tsr_guard_action action;
    double threshold;
    double *hist;              /* ring of (loss, norm) pairs, window entries */
    int64_t n_hist, head;
    int64_t streak;            /* consecutive outliers, the current one included */
    int64_t streak_first;      /* 1-based step of the streak's first outlier */
    int64_t nonfinite_streak;
    int64_t updates_skipped, rollbacks;
    int rebaselined;           /* set by guard_judge when it restarted the window (warn / skip) */
    int n_skips;
    int64_t skips[TSR_GUARD_MAX_SKIPS][2]; /* data batches [lo, hi) skipped by rollbacks */
} tsr_guard;

void guard_init(tsr_guard *g, const tsr_config *cfg);
void guard_free(tsr_guard *g);
/* Judges step `step` (1-based: the step being taken). why: a sentence for the log. */
tsr_guard_verdict guard_judge(tsr_guard *g, int64_t step, double loss, double norm, char *why,
                              size_t why_n);
/* Empties the window (judging resumes once it is full again) and clears the streak: at a
 * curriculum phase switch, and when warn / skip meet guard.patience consecutive finite outliers
 * (a lasting change of level, not a spike). */
void guard_restart_window(tsr_guard *g);
/* The window and the streak as text for the checkpoint attribute guard_state, and back (an empty
 * string gives an empty window). Parse returns -1 on junk. */
void guard_format_state(const tsr_guard *g, char *buf, size_t n);
int guard_parse_state(tsr_guard *g, const char *s);
/* Records a rollback that skipped data batches [lo, hi); clears the streak. Returns -1 when the
 * list is full (TSR_GUARD_MAX_SKIPS). */
int guard_record_rollback(tsr_guard *g, int64_t lo, int64_t hi);
/* "lo-hi,lo-hi" (the checkpoint attribute skipped_batches) and back. Parse returns -1 on junk. */
void guard_format_skips(const tsr_guard *g, char *buf, size_t n);
int guard_parse_skips(tsr_guard *g, const char *s);

#endif
