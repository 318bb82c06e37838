/* gnuplot.c — see gnuplot.h (moved from report.c when --compare came to share them). */
#include "report/gnuplot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

/* s as a gnuplot single-quoted string ('' is a quote); -1 for a control character. */
int gnuplot_quote(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if ((unsigned char)*s < 0x20) return -1;
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
    return 0;
}

/* A datablock of (step, scale * field) over the points with a finite value; returns the count. */
size_t gnuplot_datablock(FILE *f, const char *name, const runlog_point *p, size_t n,
                         runlog_field field, double scale) {
    size_t k = 0;
    fprintf(f, "$%s << EOD\n", name);
    for (size_t i = 0; i < n; i++)
        if (p[i].has & 1u << field && isfinite(p[i].v[field]))
            fprintf(f, "%lld %.9g\n", (long long)p[i].step, scale * p[i].v[field]), k++;
    fprintf(f, "EOD\n");
    return k;
}

size_t gnuplot_datablock_smooth(FILE *f, const char *name, const runlog_point *p, size_t n,
                                runlog_field field, double scale, size_t *h) {
    int64_t *step = tsr_malloc((n + 1) * sizeof *step);
    double *v = tsr_malloc((n + 1) * sizeof *v);
    double *sum = tsr_malloc((n + 2) * sizeof *sum); /* sum[i]: the first i values' sum */
    size_t k = 0;
    sum[0] = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i].has & 1u << field && isfinite(p[i].v[field]))
            step[k] = p[i].step, v[k] = scale * p[i].v[field], sum[k + 1] = sum[k] + v[k], k++;
    *h = k / 50;
    fprintf(f, "$%s << EOD\n", name);
    for (size_t i = 0; i < k; i++) {
        size_t lo = i > *h ? i - *h : 0, hi = i + *h + 1 < k ? i + *h + 1 : k;
        fprintf(f, "%lld %.9g %.9g\n", (long long)step[i], v[i],
                (sum[hi] - sum[lo]) / (double)(hi - lo));
    }
    fprintf(f, "EOD\n");
    free(step);
    free(v);
    free(sum);
    return k;
}

void gnuplot_extent_add(gnuplot_extent *e, const runlog_point *p, size_t n, runlog_field field,
                        double scale) {
    for (size_t i = 0; i < n; i++) {
        double x = (double)p[i].step, y = scale * p[i].v[field];
        if (!(p[i].has & 1u << field) || !isfinite(y)) continue;
        if (!e->n++) {
            e->xlo = e->xhi = x, e->ylo = e->yhi = y;
            continue;
        }
        e->xlo = fmin(e->xlo, x), e->xhi = fmax(e->xhi, x);
        e->ylo = fmin(e->ylo, y), e->yhi = fmax(e->yhi, y);
    }
}

/* The value axis: for GP_Y_UNIT also the right axis (the rates), on the same scale. */
static void yrange(FILE *f, const gnuplot_extent *e, gnuplot_yaxis y) {
    if (y == GP_Y_UNIT) {
        double lo = e->n ? fmin(0, e->ylo) : 0, hi = e->n ? fmax(1, e->yhi) : 1, pad = (hi - lo) / 20;
        fprintf(f, "set yrange [%.9g:%.9g]\nset y2range [%.9g:%.9g]\n", lo - pad, hi + pad,
                -0.05, 1.05);
    } else if (y == GP_Y_ZERO) {
        if (e->n && e->yhi <= 0) fprintf(f, "set yrange [0:1]\n");
        else fprintf(f, "set yrange [0:*]\n");
    } else if (e->n && e->ylo == e->yhi) {
        double d = e->ylo ? fabs(e->ylo) / 10 : 1;
        fprintf(f, "set yrange [%.9g:%.9g]\n", e->ylo - d, e->ylo + d);
    } else {
        fprintf(f, "set yrange [*:*]\n");
    }
}

void gnuplot_ranges(FILE *f, const gnuplot_extent *e, gnuplot_yaxis y) {
    if (!e->n) fprintf(f, "set xrange [0:1]\n");
    else if (e->xlo == e->xhi) fprintf(f, "set xrange [%.17g:%.17g]\n", e->xlo - 1, e->xhi + 1);
    else fprintf(f, "set xrange [*:*]\n");
    /* steps are whole numbers: over a short run gnuplot's own ticks fall on 0.5s (a one-step run
     * drew 0.5, 1.5); the setting carries over to the script's next plot, so it is set each time */
    fprintf(f, "set xtics %s\n", e->n && e->xhi - e->xlo < 10 ? "1" : "autofreq");
    yrange(f, e, y);
}

int gnuplot_on_path(const char *prog) {
    const char *path = getenv("PATH");
    char buf[4096];
    while (path && *path) {
        size_t n = strcspn(path, ":");
        if (n && n < sizeof buf - strlen(prog) - 2) {
            snprintf(buf, sizeof buf, "%.*s/%s", (int)n, path, prog);
            if (access(buf, X_OK) == 0) return 1;
        }
        path += n + (path[n] == ':');
    }
    return 0;
}
