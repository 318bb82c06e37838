/* report_cost.h — the cost section of `tessera report` (report_cost.c) and the figures its
 * --compare table takes from it. */
#ifndef TSR_REPORT_COST_H
#define TSR_REPORT_COST_H

#include <stdio.h>

/* The starts of metrics, their hours, goodput and energy (report/account_read.h), and with_sacct the
 * Slurm jobs' Elapsed against them where sacct answers (TSR_SACCT: another program). 0, or
 * TSR_EXIT_DATA after an error naming the file. */
int report_cost(FILE *f, const char *metrics, int with_sacct);
/* The run's goodput (a fraction), GPU- and CPU-hours; NAN each and non-zero when none is recorded. */
int report_cost_figures(const char *metrics, double *goodput, double *gpu_h, double *cpu_h);

#endif
