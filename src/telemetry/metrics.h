/* metrics.h — what a run reports while it runs: one line per step, eval lines, metrics.jsonl and
 * the TensorBoard step (the plan at start: src/plan/plan.h). The MFU formula is in docs/mfu.md:
 * MFU = flops_per_token * tokens/s / (W * peak_flops). */
#ifndef TSR_METRICS_H
#define TSR_METRICS_H

#include "ckpt.h"
#include "jsonl.h"
#include "telemetry/account.h"
#include "metrics_units.h"
#include "run/run.h"

/* Creates run_dir, writes the effective config (run_dir/config.cfg), opens run_dir/metrics.jsonl. */
int metrics_open_run_dir(const tsr_run *run);
/* (Re)writes run_dir/config.cfg from cfg (its run_dir), atomically (rank 0's job). 0 or an exit
 * code. */
int metrics_save_config(const tsr_config *cfg);
/* A {"event": "start"} line: where this process started (after a resume, the resumed step). */
void metrics_log_start(const tsr_run *run);
/* micro_batch = auto (rank 0, terminal and metrics.jsonl): from > 0: microbatches of `from` did
 * not fit on `failed` ranks, the step reruns with `micro`; from = 0: `micro` is what runs. */
void metrics_log_micro(const tsr_run *run, int from, int micro, int64_t failed);
void metrics_log_step(const tsr_run *run, const tsr_step_stats *st);
void metrics_log_eval(const tsr_run *run, double val_loss, double seconds);
void metrics_finish(const tsr_run *run);
/* The end of a start (rank 0): its {"event": "account"} record (account.h), the log's "cost:"
 * lines for it and for the run so far, and under Slurm the job's comment. rc: the exit code.
 * run_line reads the run so far back from run_dir/metrics.jsonl (path) after `steps` steps: one
 * line into line, 1 written, 0 not: the report tool's reader (src/report/account_read.h
 * account_run_line), a layer above, which train_main.c hands the trainer over
 * (train/train_state.h trainer_uses.run_line) and the trainer passes here. NULL: no "run so far"
 * line and no job comment. */
typedef int (*metrics_run_line_fn)(const char *path, int64_t steps, char *line, size_t n);
void metrics_log_account(const tsr_run *run, int rc, const acc_start *s,
                         metrics_run_line_fn run_line);
/* A checkpoint read ("resume", "init-from", "rollback"): time, bytes and bytes/s, in the log and
 * the JSONL (rank 0). */
void metrics_log_checkpoint(const tsr_run *run, const char *what, const char *path,
                            double seconds, uint64_t bytes);
/* A save of step `step` committed (at the run's step: later for a background save): its time,
 * bytes and bytes/s, the seconds training stood still for it (blocking; of them, async, the
 * snapshot's: ck->snap_s, or ck->copy_in_step's copy), its writers' time and the wait for them,
 * in the log and the JSONL (rank 0; docs/tracking.md). */
void metrics_log_save(const tsr_run *run, const tsr_train_ckpt *ck, int64_t step,
                      const char *path, const ckpt_stats *st, int async);
/* A step the spike guard did not pass ("warn", "skip", "stop"), with its reason (rank 0). */
void metrics_log_guard(const tsr_run *run, const char *action, const tsr_step_stats *st);
/* A guard event without an outlier comparison: "rebaseline", "restart-window" (rank 0). */
void metrics_log_guard_note(const tsr_run *run, const char *action, const tsr_step_stats *st,
                            const char *note);
/* A rollback from from_step to the run's step that skips data batches [lo, hi), the guard's
 * count of rollbacks in g (rank 0). */
void metrics_log_rollback(const tsr_run *run, const tsr_guard *g, int64_t from_step,
                          const char *path, int64_t lo, int64_t hi);
/* Prints sampled tokens: decoded with data.tokenizer when set, else as ids. */
void metrics_log_sample(const tsr_run *run, const int32_t *ids, int n);

#endif
