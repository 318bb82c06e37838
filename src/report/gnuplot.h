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
/* What a plot draws: its points' steps and (scaled) values, over the finite points of its series. */
typedef struct gnuplot_extent {
    double xlo, xhi, ylo, yhi;
    size_t n;
} gnuplot_extent;
/* Adds the finite points of field (times scale) to e (zeroed to start). */
void gnuplot_extent_add(gnuplot_extent *e, const runlog_point *p, size_t n, runlog_field field,
                        double scale);
/* How a plot's value axis is scaled (docs/tracking.md "Axes"). */
typedef enum gnuplot_yaxis {
    GP_Y_AUTO, /* the values' range */
    GP_Y_ZERO, /* from 0 to the largest value */
    GP_Y_UNIT, /* a figure meant for [0, 1] (a reward, a rate): min(0, lowest)..max(1, highest),
                * padded by 5% of that span either side, the right axis too (rates in [0, 1]) */
} gnuplot_yaxis;
/* `set xrange` and `set yrange` for the next plot of e's points, never an empty range (gnuplot's
 * "empty x range" warning): one step (or none) is drawn over step +-1, one value v over v +- 10%
 * (+-1 for 0); otherwise gnuplot autoscales what the axis leaves open. */
void gnuplot_ranges(FILE *f, const gnuplot_extent *e, gnuplot_yaxis y);
/* Is prog (gnuplot) an executable on PATH? */
int gnuplot_on_path(const char *prog);

#endif
