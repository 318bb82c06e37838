/* progress.h — what a long operation prints while it runs and when it ends (docs/cli.md
 * "Progress of long operations"): an evaluation inside training, `tessera eval`, `tessera ckpt
 * export`.
 *
 * tsr_progress_tick prints on stderr, every TSR_PROGRESS_S seconds and never before, a line
 *   eval: data/val: 24/64 batches (37%), 10 s, ETA 0:17
 * tsr_progress_seconds gives the time since tsr_progress_begin for the operation's final line,
 * which its caller prints with what it found ("... | 12.3 s"). Only the process of world rank 0
 * (tsr_log_set_rank) prints; stderr is unbuffered, and the programs make stdout line-buffered
 * (tsr_line_buffered), so a batch log shows each line when it is written.
 */
#ifndef TSR_PROGRESS_H
#define TSR_PROGRESS_H

#include <stdint.h>

#define TSR_PROGRESS_S 10.0 /* seconds between two progress lines */

typedef struct tsr_progress {
    char what[256]; /* "eval: data/val" */
    const char *unit; /* "batches" */
    uint64_t total;
    double t0, last;
} tsr_progress;

/* Starts the clock of an operation of total units; prints nothing. */
void tsr_progress_begin(tsr_progress *p, const char *what, uint64_t total, const char *unit);
/* done of total units are done: a line when TSR_PROGRESS_S have passed since the last one. */
void tsr_progress_tick(tsr_progress *p, uint64_t done);
/* Seconds since tsr_progress_begin. */
double tsr_progress_seconds(const tsr_progress *p);
/* stdout line-buffered: called first thing by each program's main. */
void tsr_line_buffered(void);

#endif
