/* report_compare.c — `tessera report --compare DIR...` (docs/site.md "Sweeps"): several runs (a
 * sweep's tasks) on shared axes, compare-loss.png (train loss, and val loss where there is one)
 * and compare-throughput.png, drawn by gnuplot from compare.gp, and a table of each run's final
 * figures, printed and written to compare.txt. */
#include "report/report_compare.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "fsutil.h"
#include "report/gnuplot.h"
#include "report/report_cost.h"
#include "report/runlog.h"

#define MAX_RUNS 64

static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                      "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"};

/* the run's name on the plots and in the table: its directory's last component */
static const char *run_name(const char *dir) {
    const char *e = dir + strlen(dir);
    while (e > dir + 1 && e[-1] == '/') e--;
    const char *b = e;
    while (b > dir && b[-1] != '/') b--;
    static char name[MAX_RUNS][256];
    static int k;
    snprintf(name[k % MAX_RUNS], sizeof name[0], "%.*s", (int)(e - b), b);
    return name[k++ % MAX_RUNS];
}

static const runlog_point *last_with(const runlog_point *p, size_t n, runlog_field f) {
    for (size_t i = n; i-- > 0;)
        if (p[i].has & 1u << f) return &p[i];
    return NULL;
}

static void fmt(char *buf, size_t n, const char *f, double v) {
    if (isfinite(v)) snprintf(buf, n, f, v);
    else snprintf(buf, n, "-");
}

static void table_row(FILE *f, const char *name, const runlog *rl, const char *metrics) {
    const runlog_point *l = last_with(rl->train, rl->n_train, RL_LOSS);
    const runlog_point *v = last_with(rl->eval, rl->n_eval, RL_VAL_LOSS);
    double mn = NAN, good, gh, ch;
    for (size_t i = 0; i < rl->n_train; i++)
        if (rl->train[i].has & 1u << RL_LOSS && !(rl->train[i].v[RL_LOSS] >= mn))
            mn = rl->train[i].v[RL_LOSS];
    report_cost_figures(metrics, &good, &gh, &ch);
    char c[7][32];
    fmt(c[0], 32, "%.6g", l ? l->v[RL_LOSS] : NAN);
    fmt(c[1], 32, "%.6g", mn);
    fmt(c[2], 32, "%.6g", v ? v->v[RL_VAL_LOSS] : NAN);
    fmt(c[3], 32, "%.6g", runlog_median(rl, RL_TOKENS_PER_S));
    fmt(c[4], 32, "%.1f%%", 100 * good);
    fmt(c[5], 32, "%.4g", gh);
    fmt(c[6], 32, "%.4g", ch);
    fprintf(f, "%-28s %6lld  %-10s %-10s %-10s %-10s %-8s %-8s %-8s\n", name,
            rl->n_train ? (long long)rl->train[rl->n_train - 1].step : 0LL, c[0], c[1], c[2], c[3],
            c[4], c[5], c[6]);
}

static void table(FILE *f, int n, char **dirs, const runlog *rl, char (*metrics)[1100]) {
    fprintf(f, "%-28s %6s  %-10s %-10s %-10s %-10s %-8s %-8s %-8s\n", "run", "step", "loss",
            "min loss", "val loss", "tokens/s", "goodput", "GPU-h", "CPU-h");
    for (int i = 0; i < n; i++) table_row(f, run_name(dirs[i]), &rl[i], metrics[i]);
}

/* The points of run r's `field` series (train or eval points) added to e; how many. */
static size_t extent(gnuplot_extent *e, const runlog *r, runlog_field field) {
    size_t before = e->n;
    if (field == RL_VAL_LOSS) gnuplot_extent_add(e, r->eval, r->n_eval, field, 1);
    else gnuplot_extent_add(e, r->train, r->n_train, field, 1);
    return e->n - before;
}

/* one plot of every run's `field` series on shared axes (y: their range, or from 0); a run without
 * a point of it is left out (gnuplot would warn of an empty series) */
static int plot(FILE *f, const char *out, const char *png, const char *ylabel, int n, char **dirs,
                const runlog *rl, runlog_field field, gnuplot_yaxis y) {
    char path[1200];
    gnuplot_extent e = {0};
    for (int i = 0; i < n; i++) extent(&e, &rl[i], field);
    gnuplot_ranges(f, &e, y);
    if (tsr_snprintf(path, sizeof path, "%s/%s", out, png)) return -1;
    fprintf(f, "set output ");
    if (gnuplot_quote(f, path)) return -1;
    fprintf(f, "\nset ylabel '%s'\nplot ", ylabel);
    if (!e.n) fprintf(f, "[0:1] [0:1] 1/0 title 'no data (every value null)'");
    int drawn = 0;
    for (int i = 0; i < n; i++) {
        char name[32];
        gnuplot_extent mine = {0};
        if (!extent(&mine, &rl[i], field)) continue;
        snprintf(name, sizeof name, "r%d_%d", i, (int)field);
        fprintf(f, "%s$%s using 1:2 with lines lw 2 lc rgb '%s' title ", drawn++ ? ", " : "", name,
                colours[i % 10]);
        if (gnuplot_quote(f, run_name(dirs[i]))) return -1;
    }
    fprintf(f, "\n");
    return 0;
}

/* the runs' loss, as an axis label: their common kind, or a note that the kinds differ (a DPO
 * run's pairs' loss beside a pretraining run's nats per token) */
static const char *loss_label(int n, const runlog *rl) {
    for (int i = 1; i < n; i++)
        if (strcmp(runlog_loss_label(&rl[i]), runlog_loss_label(&rl[0])) != 0)
            return "loss (objectives differ between the runs: not one scale)";
    return runlog_loss_label(&rl[0]);
}

static int write_script(const char *script, const char *out, int n, char **dirs, const runlog *rl) {
    FILE *f = fopen(script, "w");
    if (!f) return tsr_error("%s: cannot open for writing: %s", script, strerror(errno)), -1;
    fprintf(f, "# compare.gp: written by `tessera report --compare`; `gnuplot compare.gp` redraws\n"
               "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
               "    set terminal pngcairo size 960,600 font 'sans,11'\n"
               "} else {\n    set terminal png size 960,600\n}\n"
               "set termoption noenhanced\nset grid\nset key top right\nset xlabel 'step'\n");
    int vals = 0;
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "r%d_%d", i, (int)RL_LOSS);
        gnuplot_datablock(f, name, rl[i].train, rl[i].n_train, RL_LOSS, 1);
        snprintf(name, sizeof name, "r%d_%d", i, (int)RL_VAL_LOSS);
        vals += gnuplot_datablock(f, name, rl[i].eval, rl[i].n_eval, RL_VAL_LOSS, 1) > 0;
        snprintf(name, sizeof name, "r%d_%d", i, (int)RL_TOKENS_PER_S);
        gnuplot_datablock(f, name, rl[i].train, rl[i].n_train, RL_TOKENS_PER_S, 1);
    }
    fprintf(f, "set title 'train loss'\n");
    int bad = plot(f, out, "compare-loss.png", loss_label(n, rl), n, dirs, rl, RL_LOSS, GP_Y_AUTO);
    if (vals) {
        fprintf(f, "set title 'validation loss'\n");
        bad |= plot(f, out, "compare-val.png", "val loss", n, dirs, rl, RL_VAL_LOSS, GP_Y_AUTO);
    }
    fprintf(f, "set title 'throughput'\n");
    bad |= plot(f, out, "compare-throughput.png", "tokens/s", n, dirs, rl, RL_TOKENS_PER_S,
                GP_Y_ZERO);
    fprintf(f, "unset output\n");
    if (fclose(f) != 0 || bad)
        return tsr_error("%s: cannot write the gnuplot script (a path with a control character?)",
                         script), -1;
    return vals;
}

/* the runs' common parent directory + /compare (a sweep's directory), else the first's parent */
static void default_out(char *buf, size_t n, const char *first) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s", first);
    size_t k = strlen(tmp);
    while (k > 1 && tmp[k - 1] == '/') tmp[--k] = '\0';
    snprintf(buf, n, "%s/compare", dirname(tmp));
}

static int read_runs(int n, char **dirs, runlog *rl, char (*metrics)[1100]) {
    for (int i = 0; i < n; i++) {
        if (tsr_snprintf(metrics[i], sizeof metrics[i], "%s/metrics.jsonl", dirs[i]))
            return tsr_error("%s: path too long", dirs[i]), TSR_EXIT_USAGE;
        int rc = runlog_read(&rl[i], metrics[i]);
        if (rc) return rc;
        if (rl[i].n_train == 0)
            return tsr_error("%s: no step lines: has the run taken a step?", metrics[i]),
                   TSR_EXIT_DATA;
    }
    return 0;
}

static int draw(const char *out, int n, char **dirs, const runlog *rl) {
    char script[1300];
    snprintf(script, sizeof script, "%s/compare.gp", out);
    int vals = write_script(script, out, n, dirs, rl);
    if (vals < 0) return TSR_EXIT_DATA;
    if (!gnuplot_on_path("gnuplot"))
        return tsr_error("gnuplot not found on PATH: the plots are not drawn (the table is "
                         "written); then run: gnuplot %s", script), TSR_EXIT_DATA;
    char *argv[] = {"gnuplot", script, NULL};
    fflush(stdout);
    if (fs_run_argv(argv, NULL, 0) != 0)
        return tsr_error("gnuplot %s failed (its messages above)", script), TSR_EXIT_DATA;
    printf("plots:      %s/compare-loss.png%s, %s/compare-throughput.png\n", out,
           vals ? ", compare-val.png" : "", out);
    return 0;
}

int report_compare(int n, char **dirs, const char *out) {
    if (n < 2 || n > MAX_RUNS) {
        tsr_error("report --compare: %d run director%s given: expected 2 to %d", n,
                  n == 1 ? "y" : "ies", MAX_RUNS);
        return TSR_EXIT_USAGE;
    }
    runlog *rl = tsr_calloc((size_t)n, sizeof *rl);
    char(*metrics)[1100] = tsr_calloc((size_t)n, sizeof *metrics);
    char out_buf[1200], txt[1300];
    if (!out) default_out(out_buf, sizeof out_buf, dirs[0]), out = out_buf;
    snprintf(txt, sizeof txt, "%s/compare.txt", out);
    int rc = read_runs(n, dirs, rl, metrics);
    FILE *f = NULL;
    if (!rc && fs_make_parents(txt) != 0 && errno != EEXIST)
        rc = TSR_EXIT_DATA, tsr_error("--out %s: cannot create: %s", out, strerror(errno));
    if (!rc && !(f = fopen(txt, "w")))
        rc = TSR_EXIT_DATA, tsr_error("%s: cannot open for writing: %s", txt, strerror(errno));
    if (!rc) {
        table(f, n, dirs, rl, metrics);
        if (fclose(f) != 0) rc = TSR_EXIT_DATA, tsr_error("%s: write error", txt);
        table(stdout, n, dirs, rl, metrics);
        printf("table:      %s\n", txt);
    }
    if (!rc) rc = draw(out, n, dirs, rl);
    for (int i = 0; i < n; i++) runlog_free(&rl[i]);
    free(rl), free(metrics);
    return rc;
}
