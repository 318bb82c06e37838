/* report_gp.h — the pieces of report.c that the --compare report (report_compare.c) shares with
 * the single-run report: the series statistics and the gnuplot script's parts. */
#ifndef TSR_REPORT_GP_H
#define TSR_REPORT_GP_H

#include <stdio.h>

#include "report/runlog.h"

/* Median of the finite values of field f over the series p[0..np); NAN when there are none.
 * max (may be NULL): their largest. */
double median_of(const runlog_point *p, size_t np, runlog_field f, double *max);
/* The same over the step series. */
double median(const runlog *rl, runlog_field f);
/* s as a gnuplot single-quoted string ('' is a quote); -1 for a control character. */
int gp_quote(FILE *f, const char *s);
/* A datablock $name of (step, scale * field) over the points with a finite value; the count. */
size_t datablock(FILE *f, const char *name, const runlog_point *p, size_t n, runlog_field field,
                 double scale);
/* The same with a third column, the series' moving average: the mean of the finite values within
 * *h points either side (fewer at the ends), h = count / 50, so the window is about 4% of the run
 * and 0 (no smoothing: the third column is the value) under 50 points. Returns the count. */
size_t datablock_smooth(FILE *f, const char *name, const runlog_point *p, size_t n,
                        runlog_field field, double scale, size_t *h);
/* Is prog an executable on PATH? */
int on_path(const char *prog);

#endif
