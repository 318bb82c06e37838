/* account.h — what a run cost (docs/site.md "What a run cost"): where the wall time of each
 * process start went, the GPU-, CPU- and core-hours it held and the energy it used, written to
 * metrics.jsonl as an {"event": "account"} record when the process ends a run (finished, exit 85
 * or 86, the spike guard's stop). This is the trainer's side, what it feeds while running and
 * writes; the totals over every start of a run directory are read back from metrics.jsonl by
 * src/report/account_read.h (`tessera report`, and the trainer's last log lines through
 * the trainer's trainer_uses.run_line).
 *
 * The parts of a start's wall time (from the process's start, /proc/self/stat, to its record):
 *   startup   until the first step, less the checkpoint read at start
 *   steps     training steps that were kept
 *   save      checkpoint saves;  load: checkpoint reads (the resume, a rollback's)
 *   eval      validation loss and ICL evaluations
 *   lost      steps computed and then thrown away: a rollback's (the steps after the checkpoint
 *             it restored) and, across starts, the steps a killed or stopped process ran after
 *             the checkpoint the next start resumed from
 *   data      waits for data at a window's start (the shards of an object-store dataset,
 *             data.stage_wait): the sum of the steps' data_wait_s (0 in a start estimated from
 *             its lines, and in records written before this part existed)
 *   health    the silent-data-corruption checks inside the steps: fingerprints hashed and
 *             compared, replays (docs/health.md; 0 where a record has none)
 *   idle      the rest (the end-of-run sample, logging, waits outside the parts above)
 * goodput = steps / wall. A start killed before its record (SIGKILL, a node failure) is estimated
 * from its own lines: wall up to its last record, its step and checkpoint lines. */
#ifndef TSR_ACCOUNT_H
#define TSR_ACCOUNT_H

#include <stddef.h>
#include <stdint.h>

#include "run/run.h"

typedef enum acc_part {
    ACC_STARTUP, ACC_STEPS, ACC_SAVE, ACC_LOAD, ACC_EVAL, ACC_LOST, ACC_DATA, ACC_HEALTH, ACC_IDLE,
    ACC_PARTS
} acc_part;
/* The JSON key of each part: "startup_s", "steps_s", ... */
const char *account_part_key(acc_part p);

/* One start's figures: written by the trainer (account_close, metrics_log_account), read back per
 * start by src/report/account_read.h. */
typedef struct acc_start {
    int64_t step;              /* the step it started from */
    char job[64];              /* SLURM_JOB_ID (ARRAY_TASK for an array task), "" outside Slurm */
    int ranks, gpus, threads;
    double started, wall;      /* UNIX time the process started; seconds to its record */
    double s[ACC_PARTS];
    double gpu_j, cpu_j;       /* NAN: not measured */
    int recorded;              /* its own account record (0: estimated from its lines) */
    int64_t last_step;         /* the last step it logged (-1: none) */
} acc_start;

/* ---- the trainer's side (rank 0 keeps the times; energy on every rank) ---- */
/* Seconds into a part. */
void account_add(acc_part p, double seconds);
/* A rollback from step `from` to step `to` threw away steps to+1..from: their times (of the last
 * 4096 steps; older ones at the mean step time) move from steps to lost. */
void account_rolled_back(int64_t from, int64_t to);
/* trainer_run's start (collective-free): the first step begins; the energy counters start. */
void account_run_begin(const tsr_run *run);
/* After each step (every rank): its time (less the health checks' in it, run->out->health.step_s's
 * growth: their part), and the energy counters polled (RAPL wraps). */
void account_step(const tsr_run *run, double step_time);
/* The fields of this process's start event: "started", "ranks", "gpus", "threads", "job". */
void account_start_fields(const tsr_run *run, FILE *f);

/* At trainer_run's end, every rank (collective: the energy is summed): this start's figures
 * into *s (metrics_log_account writes them). */
void account_close(const tsr_run *run, acc_start *s);
/* Why an energy counter was not read (gpu = 1: the GPU's, 0: the CPU packages'). */
const char *account_energy_why(int gpu);
/* The run's one-line summary into the file TSR_COMMENT_FILE names, which the requeue hook sets
 * (jobs/lib/tessera-job.sh tsr_run) and, once the step has ended, makes the job's comment with
 * `scontrol update JobId=... Comment=...`: 1 written, 0 not asked (warned when it cannot write). */
int account_comment_file(const char *line);

#endif
