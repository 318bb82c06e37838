/* gnuplot.h — the gnuplot script's parts that the --compare report (report_compare.c) shares
 * with the single-run report (report.c): quoting, the series as datablocks, finding gnuplot. The
 * series' statistics (medians): runlog.h. */
#ifndef TSR_REPORT_GNUPLOT_H
#define TSR_REPORT_GNUPLOT_H

#include <stdio.h>

#include "report/runlog.h"

/* s as a gnuplot single-quoted string ('' is a quote); -1 for a control character. */
int gnuplot_quote(FILE *f, const char *s);
/* A datablock $name of (step, scale * field) over the points with a finite value; the count. */
size_t gnuplot_datablock(FILE *f, const char *name, const runlog_point *p, size_t n,
                         runlog_field field, double scale);
/* The same with a third column, the series' moving average: the mean of the finite values within
 * *h points either side (fewer at the ends), h = count / 50, so the window is about 4% of the run
 * and 0 (no smoothing: the third column is the value) under 50 points. Returns the count. */
size_t gnuplot_datablock_smooth(FILE *f, const char *name, const runlog_point *p, size_t n,
                                runlog_field field, double scale, size_t *h);
/* Is prog (gnuplot) an executable on PATH? */
int gnuplot_on_path(const char *prog);

#endif
