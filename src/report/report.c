/* report.c — see report.h. The summary's figures (all over the step series, one point per step,
 * the last line logged for a step counting):
 *   steps       distinct steps logged, and the first..last step
 *   tokens      "tokens" of the last step (tokens trained on so far)
 *   loss        first, last and minimum train loss (null losses skipped), with their steps
 *   reward      a GRPO run's mean reward of the rollouts (grpo_reward_mean): first, last and
 *               maximum, with their steps
 *   val loss    the last eval line's val_loss and val_ppl (the last eval line that has one); a
 *               DPO run's: val_loss (the pairs' DPO loss) and val_dpo_accuracy, no perplexity
 *   pass@1      a GRPO run's held-out pass@1: the first and last eval lines' val_pass_at_1
 *   tokens/s    median of tokens_per_s; mfu: median of mfu, in percent (100 x the fraction)
 *   train time  sum of step_time_s (eval, checkpoints and restarts not included)
 *   checkpoints the saves (one point per step): how many, how many in the background ("async"),
 *               the median and largest blocking_s (training stopped), the median write_s, the
 *               last save's bytes
 * The median of an even count is the mean of the two middle values. */
#include "report/report.h"

#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "cli_commands.h"
#include "common.h"
#include "fsutil.h"
#include "report/gnuplot.h"
#include "report/report_compare.h"
#include "report/report_cost.h"
#include "report/runlog.h"

static const cli_opt report_opts[] = {
    {"out", 'o', "DIR", "where the PNGs, plots.gp and summary.txt go (default RUN_DIR/report)"},
    {"compare", CLI_NO_SHORT('c'), NULL, "several RUN_DIRs (a sweep's): their curves on shared "
     "axes and a table of their final figures (default --out: their parent directory/compare)"},
    {"help", 'h', NULL, "show this help"},
};
const cli_cmd report_cli = {
    "report", "RUN_DIR | --compare RUN_DIR...",
    "Reads RUN_DIR/metrics.jsonl; writes loss.png, throughput.png, mfu.png, lr.png and\n"
    "grad_norm.png (per-step curves: the values faint behind their moving average; and for a DPO\n"
    "run dpo.png, the reward margin, the accuracy and the validation accuracy; for a GRPO run\n"
    "grpo.png, the mean reward, the pass rate and the held-out pass@1; for a mixture of experts\n"
    "moe.png, the expert load's balance; for a run that saved, checkpoint.png, each save's\n"
    "blocking and write seconds and its bytes; drawn by gnuplot)\n"
    "and summary.txt into DIR, and prints the summary, then what the run cost (cost.txt: each\n"
    "start's hours and goodput; under Slurm against sacct). Exit 2: metrics.jsonl missing or not\n"
    "JSON, or gnuplot missing or failing (the summary is still written).",
    report_opts, (int)(sizeof report_opts / sizeof report_opts[0]), NULL,
};

typedef struct report_args {
    const char *out;
    int compare;
} report_args;

static int report_on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    report_args *a = ctx;
    if (ch == 'o') {
        a->out = val;
        return 0;
    }
    if (ch == CLI_NO_SHORT('c')) {
        a->compare = 1;
        return 0;
    }
    return cli_usage_error(c, "unhandled option", NULL);
}

/* The cost section (report_cost.c), printed and kept as OUT/cost.txt. */
static int write_cost(const char *metrics, const char *out) {
    char path[1200];
    if (tsr_snprintf(path, sizeof path, "%s/cost.txt", out)) return TSR_EXIT_USAGE;
    FILE *f = fopen(path, "w");
    if (!f) {
        tsr_error("%s: cannot open for writing: %s", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    int rc = report_cost(f, metrics, 0);
    if (fclose(f) != 0 && !rc) {
        tsr_error("%s: write error: %s", path, strerror(errno));
        rc = TSR_EXIT_DATA;
    }
    if (!rc) rc = report_cost(stdout, metrics, 1);
    if (!rc) printf("cost file:  %s\n", path);
    return rc;
}

/* ---- the summary ---- */

/* The checkpoints line of the summary. */
static void write_saves(FILE *f, const runlog *rl) {
    size_t bg = 0;
    for (size_t i = 0; i < rl->n_saves; i++) bg += rl->saves[i].async;
    if (!rl->n_saves) {
        fprintf(f, "checkpoints: none saved (no save lines)\n");
        return;
    }
    double most, block = runlog_points_median(rl->saves, rl->n_saves, RL_BLOCKING_S, &most);
    double write = runlog_points_median(rl->saves, rl->n_saves, RL_WRITE_S, NULL);
    const runlog_point *last = &rl->saves[rl->n_saves - 1];
    fprintf(f, "checkpoints: %zu saved (%zu in the background); training stopped %.4g s per save "
            "(median; longest %.4g s)", rl->n_saves, bg, block, most);
    if (!isnan(write)) fprintf(f, ", written in %.4g s (median)", write);
    if (last->has & 1u << RL_BYTES) fprintf(f, ", %.1f MB each (the last)", last->v[RL_BYTES] / 1e6);
    fprintf(f, "\n");
}

/* The val loss line: with its perplexity, or for a DPO run's evaluation the validation pairs'
 * accuracy (its loss is the pairs' DPO loss: no perplexity). */
static void write_val(FILE *f, const runlog_point *ev) {
    fprintf(f, "val loss:   %.6g (step %lld)", ev->v[RL_VAL_LOSS], (long long)ev->step);
    if (ev->has & 1u << RL_VAL_PPL) fprintf(f, ", ppl %.6g", ev->v[RL_VAL_PPL]);
    else if (ev->has & 1u << RL_VAL_DPO_ACCURACY)
        fprintf(f, ", val accuracy %.6g (DPO: the validation pairs' loss and accuracy)",
                ev->v[RL_VAL_DPO_ACCURACY]);
    fprintf(f, "\n");
}

/* "first V (step S), last V (step S), min|max V (step S)" of a step series (best: -1 the minimum,
 * 1 the maximum; null values skipped) after label; 0 when it has no value. */
static int write_span(FILE *f, const char *label, const runlog *rl, runlog_field field, int best) {
    const runlog_point *tr = rl->train, *first = NULL, *last = NULL, *top = NULL;
    for (size_t i = 0; i < rl->n_train; i++) {
        if (!(tr[i].has & 1u << field)) continue;
        if (!first) first = &tr[i];
        last = &tr[i];
        if (!top || best * (tr[i].v[field] - top->v[field]) > 0) top = &tr[i];
    }
    if (first)
        fprintf(f, "%sfirst %.6g (step %lld), last %.6g (step %lld), %s %.6g (step %lld)\n", label,
                first->v[field], (long long)first->step, last->v[field], (long long)last->step,
                best < 0 ? "min" : "max", top->v[field], (long long)top->step);
    return first != NULL;
}

static void write_summary(FILE *f, const char *run_dir, const runlog *rl) {
    const runlog_point *tr = rl->train;
    size_t n = rl->n_train;
    fprintf(f, "run:        %s (metrics.jsonl: %zu step lines, %zu eval lines)\n", run_dir,
            rl->train_lines, rl->eval_lines);
    fprintf(f, "steps:      %zu (steps %lld..%lld)\n", n, (long long)tr[0].step,
            (long long)tr[n - 1].step);
    if (tr[n - 1].has & 1u << RL_TOKENS) fprintf(f, "tokens:     %.0f\n", tr[n - 1].v[RL_TOKENS]);
    else fprintf(f, "tokens:     unknown (null)\n");
    if (!write_span(f, "loss:       ", rl, RL_LOSS, -1)) fprintf(f, "loss:       none (every loss is null)\n");
    if (runlog_has(rl, RL_GRPO_REWARD) && !write_span(f, "reward:     ", rl, RL_GRPO_REWARD, 1))
        fprintf(f, "reward:     none (every grpo_reward_mean is null)\n");
    const runlog_point *ev = rl->n_eval ? &rl->eval[rl->n_eval - 1] : NULL, *p0 = NULL, *p1 = NULL;
    for (size_t i = 0; i < rl->n_eval; i++) {
        if (rl->eval[i].has & 1u << RL_VAL_PASS) p1 = &rl->eval[i], p0 = p0 ? p0 : p1;
        if (rl->eval[i].has & 1u << RL_VAL_LOSS) ev = &rl->eval[i];
    }
    if (p1 && !(ev->has & 1u << RL_VAL_LOSS)) ev = NULL; /* a GRPO run: pass@1, no loss */
    if (p1)
        fprintf(f, "pass@1:     held-out %.6g (step %lld) -> %.6g (step %lld)\n",
                p0->v[RL_VAL_PASS], (long long)p0->step, p1->v[RL_VAL_PASS], (long long)p1->step);
    if (p1 && !ev) fprintf(f, "val loss:   none (a GRPO run's evaluations give pass@1)\n");
    else if (ev && ev->has & 1u << RL_VAL_LOSS) write_val(f, ev);
    else if (ev) fprintf(f, "val loss:   null (step %lld)\n", (long long)ev->step);
    else fprintf(f, "val loss:   none (no eval lines)\n");
    double tps = runlog_median(rl, RL_TOKENS_PER_S), mfu = runlog_median(rl, RL_MFU);
    if (isnan(tps)) fprintf(f, "tokens/s:   none (every value is null)\n");
    else fprintf(f, "tokens/s:   median %.6g\n", tps);
    if (isnan(mfu)) fprintf(f, "mfu:        none (every value is null)\n");
    else fprintf(f, "mfu:        median %.4g %%\n", 100 * mfu);
    double t = 0;
    for (size_t i = 0; i < n; i++)
        if (tr[i].has & 1u << RL_STEP_TIME_S) t += tr[i].v[RL_STEP_TIME_S];
    fprintf(f, "train time: %.6g s (sum of the step times)\n", t);
    write_saves(f, rl);
}

/* ---- the plots ---- */

/* The plot of a series without one finite value: an empty frame saying so. */
#define EMPTY "[0:1] [0:1] 1/0 title 'no data (every value null)'"

static const char *style(size_t n) {
    return n > 50 ? "lines lw 2" : "linespoints lw 2 pt 7 ps 0.8";
}

/* One plot command: output OUT/png, title, ylabel, then `plot BODY`. */
static int gp_plot(FILE *f, const char *out, const char *png, const char *title, const char *run,
                   const char *ylabel, const char *body) {
    char path[1200], t[1200];
    if (tsr_snprintf(path, sizeof path, "%s/%s", out, png) ||
        tsr_snprintf(t, sizeof t, "%s: %s", title, run))
        return -1;
    fprintf(f, "set output ");
    if (gnuplot_quote(f, path)) return -1;
    fprintf(f, "\nset title ");
    if (gnuplot_quote(f, t)) return -1;
    fprintf(f, "\nset ylabel '%s'\nplot %s\n", ylabel, body);
    return 0;
}

/* checkpoint.png: per save, the seconds training stood still for it and its writers' seconds (in
 * the background with save_async), and the megabytes written on the right axis. */
static int plot_saves(FILE *f, const char *out, const char *run, const runlog *rl) {
    size_t nb = gnuplot_datablock(f, "blocking", rl->saves, rl->n_saves, RL_BLOCKING_S, 1);
    size_t nw = gnuplot_datablock(f, "write", rl->saves, rl->n_saves, RL_WRITE_S, 1);
    size_t nm = gnuplot_datablock(f, "mbytes", rl->saves, rl->n_saves, RL_BYTES, 1e-6);
    char body[640];
    int o = snprintf(body, sizeof body, "$blocking using 1:2 with linespoints lw 2 pt 7 lc rgb "
                     "'#d62728' title 'training stopped (blocking)'");
    if (nw)
        o += snprintf(body + o, sizeof body - (size_t)o, ", $write using 1:2 with linespoints lw 2 "
                      "pt 5 lc rgb '#1f77b4' title 'written (background with save_async)'");
    if (nm)
        snprintf(body + o, sizeof body - (size_t)o, ", $mbytes using 1:2 axes x1y2 with points "
                 "pt 2 lc rgb '#7f7f7f' title 'MB written (right axis)'");
    gnuplot_extent e = {0};
    gnuplot_extent_add(&e, rl->saves, rl->n_saves, RL_BLOCKING_S, 1);
    gnuplot_extent_add(&e, rl->saves, rl->n_saves, RL_WRITE_S, 1);
    gnuplot_ranges(f, &e, GP_Y_ZERO);
    fprintf(f, "set y2range [0:*]\nset y2tics\nset y2label 'MB'\n");
    int bad = gp_plot(f, out, "checkpoint.png", "checkpoint saves", run, "seconds",
                      nb ? body : EMPTY);
    fprintf(f, "unset y2tics\nunset y2label\n");
    return bad;
}

/* The step series' field as datablock $name (datablock_smooth) and its curve appended to the plot
 * body b (at *o, after a comma when *o > 0): the values faint behind their moving average, or the
 * values alone for a short run; axes: "" or " axes x1y2". Returns the points. */
static size_t curve(FILE *f, char *b, size_t cap, int *o, const runlog *rl, const char *name,
                    runlog_field field, double scale, const char *rgb, const char *title,
                    const char *axes) {
    size_t h, n = gnuplot_datablock_smooth(f, name, rl->train, rl->n_train, field, scale, &h);
    const char *sep = *o ? ", " : "";
    if (!n || *o < 0 || (size_t)*o >= cap) return n;
    if (!h)
        *o += snprintf(b + *o, cap - (size_t)*o, "%s$%s using 1:2%s with %s lc rgb '#%s' title '%s'",
                       sep, name, axes, style(n), rgb, title);
    else /* (#AARRGGBB: alpha 0xb0 of 0xff transparent) */
        *o += snprintf(b + *o, cap - (size_t)*o, "%s$%s using 1:2%s with lines lw 1 lc rgb '#b0%s' "
                       "title '%s (each step)', $%s using 1:3%s with lines lw 2 lc rgb '#%s' title "
                       "'%s (mean of %zu steps)'", sep, name, axes, rgb, title, name, axes, rgb,
                       title, 2 * h + 1);
    return n;
}

/* loss.png: the train loss (a DPO run's: the pairs' DPO loss, not nats per token) and the val
 * loss at the evaluations. */
static int plot_loss(FILE *f, const char *out, const char *run, const runlog *rl) {
    const int dpo = runlog_has(rl, RL_DPO_MARGIN);
    char body[1024];
    int o = 0;
    size_t n_loss = curve(f, body, sizeof body, &o, rl, "loss", RL_LOSS, 1, "1f77b4",
                          dpo ? "train DPO loss" : "train loss", "");
    size_t n_val = gnuplot_datablock(f, "val", rl->eval, rl->n_eval, RL_VAL_LOSS, 1);
    if (n_val)
        snprintf(body + o, sizeof body - (size_t)o, "%s$val using 1:2 with linespoints lw 2 pt 7 "
                 "ps 1.2 lc rgb '#d62728' title '%s'", o ? ", " : "",
                 dpo ? "val DPO loss (the validation pairs)" : "val loss");
    gnuplot_extent e = {0};
    gnuplot_extent_add(&e, rl->train, rl->n_train, RL_LOSS, 1);
    gnuplot_extent_add(&e, rl->eval, rl->n_eval, RL_VAL_LOSS, 1);
    gnuplot_ranges(f, &e, GP_Y_AUTO);
    return gp_plot(f, out, "loss.png", "loss", run, runlog_loss_label(rl),
                   n_loss || n_val ? body : EMPTY);
}

/* throughput.png, mfu.png, lr.png, grad_norm.png: per-step curves. */
static int plot_steps(FILE *f, const char *out, const char *run, const runlog *rl) {
    static const struct {
        const char *name, *png, *title, *ylabel, *rgb, *key;
        runlog_field field;
        double scale;
        int smooth; /* (the learning rate is a schedule: drawn as it is) */
    } p[] = {
        {"tput", "throughput.png", "throughput", "tokens/s", "2ca02c", "tokens/s (all ranks)",
         RL_TOKENS_PER_S, 1, 1},
        {"mfu", "mfu.png", "model FLOPs utilization", "MFU (%)", "9467bd", "MFU", RL_MFU, 100, 1},
        {"lr", "lr.png", "learning rate", "learning rate", "ff7f0e", "learning rate", RL_LR, 1, 0},
        {"gnorm", "grad_norm.png", "gradient norm", "gradient norm (before clipping)", "8c564b",
         "gradient norm", RL_GRAD_NORM, 1, 1},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        char body[1024];
        int o = 0;
        gnuplot_extent e = {0};
        gnuplot_extent_add(&e, rl->train, rl->n_train, p[i].field, p[i].scale);
        gnuplot_ranges(f, &e, GP_Y_ZERO);
        size_t n = p[i].smooth ? curve(f, body, sizeof body, &o, rl, p[i].name, p[i].field,
                                       p[i].scale, p[i].rgb, p[i].key, "")
                               : gnuplot_datablock(f, p[i].name, rl->train, rl->n_train,
                                                   p[i].field, 1);
        if (!p[i].smooth)
            snprintf(body, sizeof body, "$%s using 1:2 with %s lc rgb '#%s' title '%s'", p[i].name,
                     style(n), p[i].rgb, p[i].key);
        bad |= gp_plot(f, out, p[i].png, p[i].title, run, p[i].ylabel, n ? body : EMPTY);
    }
    return bad;
}

/* dpo.png, grpo.png: a per-step figure; on the right axis a rate of it per step and at the
 * evaluations (the held-out pairs or prompts). */
typedef struct rate_plot {
    const char *png, *title, *ylabel, *key; /* key: where the legend goes */
    const char *name[3], *label[3];         /* the figure, its rate per step, at the evals */
    runlog_field field[3];
    gnuplot_yaxis axis;                     /* the figure's axis (the rates': [0, 1]) */
} rate_plot;

static const rate_plot dpo_plot = {
    "dpo.png", "DPO reward margin", "reward margin", "top right", {"margin", "acc", "vacc"},
    {"reward margin (chosen - rejected)", "accuracy (right axis)", "val accuracy (right axis)"},
    {RL_DPO_MARGIN, RL_DPO_ACCURACY, RL_VAL_DPO_ACCURACY}, GP_Y_AUTO};
static const rate_plot grpo_plot = {
    "grpo.png", "GRPO reward", "mean reward", "bottom right", {"reward", "pass", "vpass"},
    {"mean reward (rollouts)", "pass rate (rollouts, right axis)", "held-out pass@1 (right axis)"},
    {RL_GRPO_REWARD, RL_GRPO_PASS, RL_VAL_PASS}, GP_Y_UNIT};

static int plot_rate(FILE *f, const char *out, const char *run, const runlog *rl,
                     const rate_plot *p) {
    char body[1400];
    int o = 0;
    curve(f, body, sizeof body, &o, rl, p->name[0], p->field[0], 1, "ff7f0e", p->label[0], "");
    curve(f, body, sizeof body, &o, rl, p->name[1], p->field[1], 1, "17becf", p->label[1],
          " axes x1y2");
    if (gnuplot_datablock(f, p->name[2], rl->eval, rl->n_eval, p->field[2], 1))
        snprintf(body + o, sizeof body - (size_t)o, ", $%s using 1:2 axes x1y2 with linespoints "
                 "lw 2 pt 7 ps 1.2 lc rgb '#d62728' title '%s'", p->name[2], p->label[2]);
    gnuplot_extent e = {0}, all; /* the figure's values (the rates: right axis); every step */
    gnuplot_extent_add(&e, rl->train, rl->n_train, p->field[0], 1);
    all = e;
    gnuplot_extent_add(&all, rl->eval, rl->n_eval, p->field[2], 1);
    if (e.n) e.xlo = all.xlo, e.xhi = all.xhi;
    fprintf(f, "set y2range [0:1]\nset y2tics\nset key %s\n", p->key);
    gnuplot_ranges(f, e.n ? &e : &all, p->axis);
    int bad = gp_plot(f, out, p->png, p->title, run, p->ylabel, body);
    fprintf(f, "unset y2tics\nset key top right\n");
    return bad;
}

/* moe.png: the expert load's balance, the coefficient of variation of the tokens per expert (0 =
 * balanced): the mean over the MoE layers and the most unbalanced layer's. */
static int plot_moe(FILE *f, const char *out, const char *run, const runlog *rl) {
    char body[1400];
    int o = 0;
    curve(f, body, sizeof body, &o, rl, "moecv", RL_MOE_CV_MEAN, 1, "1f77b4",
          "mean over the MoE layers", "");
    curve(f, body, sizeof body, &o, rl, "moecvmax", RL_MOE_CV_MAX, 1, "d62728",
          "the most unbalanced layer", "");
    gnuplot_extent e = {0};
    gnuplot_extent_add(&e, rl->train, rl->n_train, RL_MOE_CV_MEAN, 1);
    gnuplot_extent_add(&e, rl->train, rl->n_train, RL_MOE_CV_MAX, 1);
    gnuplot_ranges(f, &e, GP_Y_ZERO);
    return gp_plot(f, out, "moe.png", "MoE expert load", run,
                   "load cv (std / mean of the tokens per expert)", body);
}

/* Writes OUT/plots.gp (data inline). Returns 0, or TSR_EXIT_DATA after reporting. */
static int write_script(const char *script, const char *out, const char *run, const runlog *rl) {
    FILE *f = fopen(script, "w");
    if (!f) {
        tsr_error("%s: cannot open for writing: %s", script, strerror(errno));
        return TSR_EXIT_DATA;
    }
    fprintf(f, "# plots.gp: written by `tessera report` from metrics.jsonl; `gnuplot plots.gp` "
               "redraws the PNGs\n"
               "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
               "    set terminal pngcairo size 960,600 font 'sans,11'\n"
               "} else {\n    set terminal png size 960,600\n}\n"
               "set termoption noenhanced\nset grid\nset key top right\nset xlabel 'step'\n");
    /* a restart (a process start after the first: a resume, a requeue) is a dashed vertical line
     * at the step it started from, on every plot */
    for (size_t i = 0; i < rl->n_restarts; i++)
        fprintf(f, "set arrow from %lld, graph 0 to %lld, graph 1 nohead dt 2 lw 1.5 lc rgb '#7f7f7f'\n"
                   "set label 'restart' at %lld, graph 0.97 right rotate by 90 offset -0.9,0 "
                   "tc rgb '#7f7f7f' font ',9'\n",
                (long long)rl->restarts[i], (long long)rl->restarts[i], (long long)rl->restarts[i]);
    int bad = plot_loss(f, out, run, rl);
    bad |= plot_steps(f, out, run, rl);
    if (runlog_has(rl, RL_DPO_MARGIN)) bad |= plot_rate(f, out, run, rl, &dpo_plot);
    if (rl->n_saves) bad |= plot_saves(f, out, run, rl);
    if (runlog_has(rl, RL_GRPO_REWARD)) bad |= plot_rate(f, out, run, rl, &grpo_plot);
    if (runlog_has(rl, RL_MOE_CV_MEAN)) bad |= plot_moe(f, out, run, rl);
    fprintf(f, "unset output\n");
    if (fclose(f) != 0 || bad) {
        tsr_error("%s: cannot write the gnuplot script%s", script,
                  bad ? ": a path has a control character or is too long" : "");
        return TSR_EXIT_DATA;
    }
    return 0;
}

/* gnuplot SCRIPT; its messages go to our stderr. Returns 0 or TSR_EXIT_DATA after reporting. */
static int run_gnuplot(const char *script, const char *out, const runlog *rl) {
    const char *pngs[9] = {"loss.png", "throughput.png", "mfu.png", "lr.png", "grad_norm.png"};
    size_t n_png = 5;
    if (runlog_has(rl, RL_DPO_MARGIN)) pngs[n_png++] = "dpo.png";
    if (runlog_has(rl, RL_GRPO_REWARD)) pngs[n_png++] = "grpo.png";
    if (rl->n_saves) pngs[n_png++] = "checkpoint.png";
    if (runlog_has(rl, RL_MOE_CV_MEAN)) pngs[n_png++] = "moe.png";
    char *argv[] = {"gnuplot", (char *)script, NULL};
    pid_t pid;
    fflush(stdout);
    int err = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
    if (err) {
        tsr_error("cannot start gnuplot: %s", strerror(err));
        return TSR_EXIT_DATA;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            tsr_error("waitpid(gnuplot): %s", strerror(errno));
            return TSR_EXIT_DATA;
        }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        tsr_error("gnuplot %s failed (%s %d; its messages above)", script,
                  WIFEXITED(status) ? "exit" : "signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        return TSR_EXIT_DATA;
    }
    for (size_t i = 0; i < n_png; i++) {
        char p[1200];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", out, pngs[i]);
        if (stat(p, &sb) != 0 || sb.st_size == 0) {
            tsr_error("%s: gnuplot exited 0 but did not write it", p);
            return TSR_EXIT_DATA;
        }
        printf("plot:       %s\n", p);
    }
    return 0;
}

int cmd_report(int argc, char **argv) {
    report_args a = {0};
    int rc = cli_parse(&report_cli, argc, argv, report_on_opt, &a);
    if (rc) return rc < 0 ? 0 : rc;
    const char *out = a.out;
    if (optind >= argc) return cli_usage_error(&report_cli, "no RUN_DIR given", NULL);
    if (a.compare) return report_compare(argc - optind, argv + optind, out);
    if (optind + 1 < argc)
        return cli_usage_error(&report_cli, "unexpected operand: ", argv[optind + 1]);
    const char *run_dir = argv[optind];
    char metrics[1100], out_buf[1100], summary[1200], script[1200];
    struct stat sb;
    if (stat(run_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        tsr_error("report: run directory %s: %s", run_dir,
                  stat(run_dir, &sb) != 0 ? strerror(errno) : "not a directory");
        return TSR_EXIT_DATA;
    }
    if (!out) {
        if (tsr_snprintf(out_buf, sizeof out_buf, "%s/report", run_dir))
            return cli_usage_error(&report_cli, "RUN_DIR too long: ", run_dir);
        out = out_buf;
    }
    if (tsr_snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", run_dir) ||
        tsr_snprintf(summary, sizeof summary, "%s/summary.txt", out) ||
        tsr_snprintf(script, sizeof script, "%s/plots.gp", out))
        return cli_usage_error(&report_cli, "path too long: ", strlen(out) > 1000 ? out : run_dir);
    runlog rl;
    if ((rc = runlog_read(&rl, metrics))) return rc;
    if (rl.n_train == 0) {
        tsr_error("%s: no step lines (a line with \"step\" and \"loss\"): has the run taken a "
                  "step?", metrics);
        runlog_free(&rl);
        return TSR_EXIT_DATA;
    }
    if ((fs_make_parents(summary) != 0 && errno != EEXIST)) {
        tsr_error("--out %s: cannot create: %s", out, strerror(errno));
        runlog_free(&rl);
        return TSR_EXIT_DATA;
    }
    FILE *f = fopen(summary, "w");
    if (!f) {
        tsr_error("%s: cannot open for writing: %s", summary, strerror(errno));
        runlog_free(&rl);
        return TSR_EXIT_DATA;
    }
    write_summary(f, run_dir, &rl);
    if (fclose(f) != 0) {
        tsr_error("%s: write error: %s", summary, strerror(errno));
        runlog_free(&rl);
        return TSR_EXIT_DATA;
    }
    write_summary(stdout, run_dir, &rl);
    if (rl.n_restarts) { /* marked on the plots */
        printf("restarts:   %zu, at step", rl.n_restarts);
        for (size_t i = 0; i < rl.n_restarts; i++)
            printf("%s %lld", i ? "," : "", (long long)rl.restarts[i]);
        printf(" (dashed lines on the plots)\n");
    }
    printf("summary:    %s\n", summary);
    if ((rc = write_cost(metrics, out))) {
        runlog_free(&rl);
        return rc;
    }
    const char *base = strrchr(run_dir, '/');
    base = base && base[1] ? base + 1 : run_dir;
    rc = write_script(script, out, base, &rl);
    if (!rc && !gnuplot_on_path("gnuplot")) {
        tsr_error("gnuplot not found on PATH: loss.png, throughput.png, mfu.png, lr.png and "
                  "grad_norm.png not drawn (the summary is written). Install it: ./INSTALL "
                  "(Debian's gnuplot-nox) or module load gnuplot; then rerun, or run: gnuplot %s",
                  script);
        rc = TSR_EXIT_DATA;
    }
    if (!rc) rc = run_gnuplot(script, out, &rl);
    runlog_free(&rl);
    return rc;
}
