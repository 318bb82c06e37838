/* metrics_prom.h — the run's figures for a site's Prometheus (metrics.prometheus_dir; docs/site.md
 * "Monitoring"): rank 0 keeps DIR/tessera_train_JOB.prom (JOB: the Slurm job id, ARRAY_TASK for an
 * array task, else the run directory's name) for node_exporter's textfile collector, replaced
 * atomically at most every metrics.prometheus_interval seconds after a step, at each checkpoint
 * save and at the end (then tessera_train_running 0 and the exit code; the file stays until the
 * next start of the job or a site's cleanup). Gauges, labels run, slurm_job (not job: Prometheus's
 * own scrape label), host:
 *   tessera_train_running, tessera_train_exit_code, tessera_train_step, tessera_train_total_steps,
 *   tessera_train_loss, tessera_train_tokens_per_second, tessera_train_mfu_ratio,
 *   tessera_train_eta_seconds, tessera_train_device_memory_peak_bytes{device},
 *   tessera_train_last_checkpoint_step, tessera_train_last_checkpoint_age_seconds,
 *   tessera_train_last_update_timestamp_seconds. */
#ifndef TSR_METRICS_PROM_H
#define TSR_METRICS_PROM_H

#include "run/run.h"

/* metrics.prometheus_dir, when set, is a writable directory: 0, else TSR_EXIT_USAGE after an error
 * naming the key and the directory (before anything is written into run_dir). */
int metrics_prom_check(const tsr_run *run);
/* The file this start keeps, DIR/tessera_train_JOB.prom, into buf: 1, or 0 when
 * metrics.prometheus_dir is "" (none). */
int metrics_prom_path(const tsr_run *run, char *buf, size_t n);
/* After a step (rank 0): the step's figures; the file rewritten when the interval has passed. */
void metrics_prom_step(const tsr_run *run, const tsr_step_stats *st, double tok_s, double mfu,
                       double eta_s);
/* A checkpoint committed at the trainer's step (rank 0): rewritten now. */
void metrics_prom_saved(const tsr_run *run);
/* The end of this start (rank 0): rewritten with running 0 and the exit code. */
void metrics_prom_end(const tsr_run *run, int rc);

#endif
