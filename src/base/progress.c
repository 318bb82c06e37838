/* progress.c — progress lines of long operations (progress.h). */
#include "progress.h"

#include <stdio.h>

#include "common.h"

void tsr_progress_begin(tsr_progress *p, const char *what, uint64_t total, const char *unit) {
    snprintf(p->what, sizeof p->what, "%s", what);
    p->unit = unit;
    p->total = total;
    p->t0 = p->last = tsr_now();
}

void tsr_progress_tick(tsr_progress *p, uint64_t done) {
    double now = tsr_now();
    if (now - p->last < TSR_PROGRESS_S || tsr_log_rank() != 0) return;
    p->last = now;
    double dt = now - p->t0, frac = p->total ? (double)done / (double)p->total : 1.0;
    long eta = done ? (long)(dt * (double)(p->total - done) / (double)done + 0.5) : 0;
    fprintf(stderr, "%s: %llu/%llu %s (%.0f%%), %.0f s, ETA %ld:%02ld\n", p->what,
            (unsigned long long)done, (unsigned long long)p->total, p->unit, 100 * frac, dt,
            eta / 60, eta % 60);
}

double tsr_progress_seconds(const tsr_progress *p) { return tsr_now() - p->t0; }

void tsr_line_buffered(void) { setvbuf(stdout, NULL, _IOLBF, 0); }
