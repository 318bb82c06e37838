/* account_read.h — what a run cost, read back: the starts of a run directory's metrics.jsonl
 * (their "start" and "account" records, written by the trainer: src/telemetry/account.h, where
 * the parts of a start's wall time are defined), summed over the run; a start killed before its
 * record (SIGKILL, a node failure) is estimated from its own lines: wall up to its last record,
 * its step and checkpoint lines. `tessera report`'s cost section (report_cost.c), and the
 * trainer's last log lines, which train_main.c hands this reader over for (trainer_uses.run_line:
 * the trainer is a layer below the tools). */
#ifndef TSR_ACCOUNT_READ_H
#define TSR_ACCOUNT_READ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "telemetry/account.h"

typedef struct acc_run {
    acc_start *starts;
    size_t n;
    double s[ACC_PARTS], wall; /* summed over the starts, lost work across starts included */
    double gpu_h, cpu_h, core_h, gpu_j, cpu_j; /* energy: NAN when no start measured it */
} acc_run;

/* Reads the starts of metrics.jsonl at path and sums them. 0, or TSR_EXIT_DATA after an error
 * naming the file (cannot open; a line that is not JSON). A file from before accounting (start
 * lines without "started") gives n = 0. */
int account_read(acc_run *r, const char *path);
void account_free(acc_run *r);
/* One line: "tessera: 12 steps, 0.0031 GPU-h, 0.0062 CPU-h, goodput 71.2% (startup 9.1%, ...)"
 * (the Slurm comment and the log's last line). */
void account_line(const acc_run *r, int64_t steps, char *buf, size_t n);
/* The report's table: one line per start, then the totals and the goodput split. */
void account_print(FILE *f, const acc_run *r);

/* The one line of account_line for the run directory's metrics.jsonl at path after `steps` steps
 * into buf: 1 written, 0 not (no start records it can sum, or an error it reported). The
 * trainer's "cost: run so far" line (train/train_state.h trainer_uses.run_line). */
int account_run_line(const char *path, int64_t steps, char *buf, size_t n);

#endif
