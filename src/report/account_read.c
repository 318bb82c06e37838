/* account_read.c — see account_read.h. */
#include "report/account_read.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "json.h"

static const char *const part_words[ACC_PARTS] = {"startup", "steps", "ckpt save", "ckpt load",
                                                  "eval", "lost", "data wait", "health checks",
                                                  "idle"};

typedef struct { int64_t step; double secs; size_t start; } step_line;

typedef struct reader {
    acc_run *r;
    step_line *steps;
    size_t n_steps, cap_steps, cap_starts;
    double *last_time, *first_step_end, *first_step_secs; /* per start, for the estimates */
} reader;

static double num(const json_value *o, const char *key, double dflt) {
    const json_value *v = json_get(o, key);
    return v && v->type == JSON_NUMBER ? v->num : dflt;
}

static void grow_starts(reader *rd) {
    acc_run *r = rd->r;
    if (r->n < rd->cap_starts) return;
    rd->cap_starts = rd->cap_starts ? 2 * rd->cap_starts : 16;
    r->starts = tsr_realloc(r->starts, rd->cap_starts * sizeof *r->starts);
    rd->last_time = tsr_realloc(rd->last_time, rd->cap_starts * sizeof *rd->last_time);
    rd->first_step_end = tsr_realloc(rd->first_step_end, rd->cap_starts * sizeof(double));
    rd->first_step_secs = tsr_realloc(rd->first_step_secs, rd->cap_starts * sizeof(double));
}

static void on_start(reader *rd, const json_value *o) {
    grow_starts(rd);
    acc_start *s = &rd->r->starts[rd->r->n];
    memset(s, 0, sizeof *s);
    s->step = (int64_t)num(o, "step", 0), s->started = num(o, "started", NAN);
    s->ranks = (int)num(o, "ranks", num(o, "world", 1)), s->gpus = (int)num(o, "gpus", 0);
    s->threads = (int)num(o, "threads", 1), s->gpu_j = s->cpu_j = NAN, s->last_step = -1;
    const json_value *job = json_get(o, "job");
    if (job && json_str_plain(job)) snprintf(s->job, sizeof s->job, "%s", job->str);
    rd->last_time[rd->r->n] = rd->first_step_end[rd->r->n] = NAN;
    rd->first_step_secs[rd->r->n] = 0;
    rd->r->n++;
}

static void on_account(acc_start *s, const json_value *o) {
    s->recorded = 1, s->wall = num(o, "wall_s", 0);
    for (int p = 0; p < ACC_PARTS; p++) s->s[p] = num(o, account_part_key((acc_part)p), 0);
    s->gpu_j = num(o, "gpu_energy_j", NAN), s->cpu_j = num(o, "cpu_energy_j", NAN);
}

static void on_step(reader *rd, const json_value *o, double t) {
    size_t k = rd->r->n - 1;
    acc_start *s = &rd->r->starts[k];
    double secs = num(o, "step_time_s", 0);
    s->last_step = (int64_t)num(o, "step", 0);
    if (isnan(rd->first_step_end[k])) rd->first_step_end[k] = t, rd->first_step_secs[k] = secs;
    if (rd->n_steps == rd->cap_steps) {
        rd->cap_steps = rd->cap_steps ? 2 * rd->cap_steps : 256;
        rd->steps = tsr_realloc(rd->steps, rd->cap_steps * sizeof *rd->steps);
    }
    rd->steps[rd->n_steps++] = (step_line){s->last_step, secs, k};
    if (!s->recorded) s->s[ACC_STEPS] += secs;
}

static void on_line(reader *rd, const json_value *o) {
    const json_value *ev = json_get(o, "event"), *ck = json_get(o, "checkpoint");
    const char *e = ev && json_str_plain(ev) ? ev->str : "";
    if (!strcmp(e, "start")) { /* (one from before accounting has no "started": wall unknown) */
        on_start(rd, o);
        return;
    }
    if (rd->r->n == 0) return;
    size_t k = rd->r->n - 1;
    acc_start *s = &rd->r->starts[k];
    double t = num(o, "time", NAN);
    if (isfinite(t)) rd->last_time[k] = t;
    if (!strcmp(e, "account")) on_account(s, o);
    else if (!*e && json_get(o, "loss") && !ck) on_step(rd, o, t);
    else if (!*e && ck && json_str_plain(ck) && !s->recorded)
        s->s[strcmp(ck->str, "save") ? ACC_LOAD : ACC_SAVE] += num(o, "seconds", 0);
}

/* A start without its record: wall to its last line, startup to its first step's start. */
static void estimate(acc_start *s, double last, double first_end, double first_secs) {
    s->wall = isfinite(last) && isfinite(s->started) ? last - s->started : 0;
    if (isfinite(first_end))
        s->s[ACC_STARTUP] = first_end - first_secs - s->started - s->s[ACC_LOAD];
    if (!(s->s[ACC_STARTUP] > 0)) s->s[ACC_STARTUP] = 0;
    double busy = 0;
    for (int p = 0; p < ACC_IDLE; p++) busy += s->s[p];
    s->s[ACC_IDLE] = s->wall > busy ? s->wall - busy : 0;
}

/* Steps a start ran past the step the next start resumed from were lost to the restart. */
static void restart_losses(reader *rd) {
    acc_run *r = rd->r;
    for (size_t i = 0; i < rd->n_steps; i++) {
        size_t k = rd->steps[i].start;
        if (k + 1 < r->n && rd->steps[i].step > r->starts[k + 1].step) {
            double x = rd->steps[i].secs;
            if (x > r->starts[k].s[ACC_STEPS]) x = r->starts[k].s[ACC_STEPS];
            r->starts[k].s[ACC_STEPS] -= x, r->starts[k].s[ACC_LOST] += x;
        }
    }
}

static void sum_starts(acc_run *r) {
    r->gpu_j = r->cpu_j = NAN;
    for (size_t k = 0; k < r->n; k++) {
        const acc_start *s = &r->starts[k];
        for (int p = 0; p < ACC_PARTS; p++) r->s[p] += s->s[p];
        r->wall += s->wall;
        r->gpu_h += s->gpus * s->wall / 3600, r->cpu_h += s->ranks * s->wall / 3600;
        r->core_h += s->ranks * s->threads * s->wall / 3600;
        if (isfinite(s->gpu_j)) r->gpu_j = (isfinite(r->gpu_j) ? r->gpu_j : 0) + s->gpu_j;
        if (isfinite(s->cpu_j)) r->cpu_j = (isfinite(r->cpu_j) ? r->cpu_j : 0) + s->cpu_j;
    }
}

static void reader_end(reader *rd) {
    for (size_t k = 0; k < rd->r->n; k++)
        if (!rd->r->starts[k].recorded)
            estimate(&rd->r->starts[k], rd->last_time[k], rd->first_step_end[k],
                     rd->first_step_secs[k]);
    restart_losses(rd);
    sum_starts(rd->r);
    free(rd->steps), free(rd->last_time), free(rd->first_step_end), free(rd->first_step_secs);
}

int account_read(acc_run *r, const char *path) {
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "r");
    if (!f) {
        tsr_error("%s: cannot open: %s", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    reader rd = {.r = r};
    json_doc doc;
    json_doc_init(&doc);
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    int rc = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        json_value *root;
        json_error err;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        if (len == 0) continue;
        if (json_parse(&doc, line, (size_t)len, &root, &err) != 0 || root->type != JSON_OBJECT) {
            tsr_error("%s:%zu: not a JSON object: %s", path, lineno, err.msg);
            rc = TSR_EXIT_DATA;
        } else {
            on_line(&rd, root);
        }
    }
    json_doc_free(&doc);
    free(line);
    fclose(f);
    reader_end(&rd);
    if (rc) account_free(r);
    return rc;
}

void account_free(acc_run *r) {
    free(r->starts);
    memset(r, 0, sizeof *r);
}

static double pct(const acc_run *r, acc_part p) { return r->wall > 0 ? 100 * r->s[p] / r->wall : 0; }

void account_line(const acc_run *r, int64_t steps, char *buf, size_t n) {
    int o = snprintf(buf, n, "tessera: %lld steps, %zu start%s, %.4g GPU-h, %.4g CPU-h, goodput "
                     "%.1f%% (", (long long)steps, r->n, r->n == 1 ? "" : "s", r->gpu_h, r->cpu_h,
                     pct(r, ACC_STEPS));
    for (int p = 0; p < ACC_PARTS && o > 0 && (size_t)o < n; p++) {
        if (p == ACC_STEPS) continue;
        o += snprintf(buf + o, n - (size_t)o, "%s%s %.1f%%", p ? ", " : "", part_words[p],
                      pct(r, (acc_part)p));
    }
    if (o > 0 && (size_t)o < n) snprintf(buf + o, n - (size_t)o, ")");
}

void account_print(FILE *f, const acc_run *r) {
    fprintf(f, "cost:       %zu start%s\n  start  from step  job           ranks gpus  wall s    "
               "goodput  lost s   record\n", r->n, r->n == 1 ? "" : "s");
    for (size_t k = 0; k < r->n; k++) {
        const acc_start *s = &r->starts[k];
        fprintf(f, "  %5zu  %9lld  %-12s  %5d %4d  %-8.4g  %5.1f%%  %-7.3g  %s\n", k + 1,
                (long long)s->step, *s->job ? s->job : "-", s->ranks, s->gpus, s->wall,
                s->wall > 0 ? 100 * s->s[ACC_STEPS] / s->wall : 0, s->s[ACC_LOST],
                s->recorded ? "yes" : "no: estimated (killed)");
    }
    fprintf(f, "  total: wall %.1f s, %.4g GPU-hours, %.4g CPU-hours (ranks x wall), %.4g "
               "core-hours\n", r->wall, r->gpu_h, r->cpu_h, r->core_h);
    fprintf(f, "  goodput %.1f%%:", pct(r, ACC_STEPS));
    for (int p = 0; p < ACC_PARTS; p++)
        fprintf(f, " %s %.1f s (%.1f%%)%s", part_words[p], r->s[p], pct(r, (acc_part)p),
                p + 1 < ACC_PARTS ? "," : "\n");
    char ge[64] = "not measured", ce[64] = "not measured";
    if (isfinite(r->gpu_j)) snprintf(ge, sizeof ge, "%.6g J (%.4g kWh)", r->gpu_j, r->gpu_j / 3.6e6);
    if (isfinite(r->cpu_j)) snprintf(ce, sizeof ce, "%.6g J (%.4g kWh)", r->cpu_j, r->cpu_j / 3.6e6);
    fprintf(f, "  energy: GPUs %s, CPU packages %s\n", ge, ce);
}

int account_run_line(const char *path, int64_t steps, char *buf, size_t n) {
    acc_run r;
    const int ok = account_read(&r, path) == 0 && r.n > 0;
    if (ok) account_line(&r, steps, buf, n);
    account_free(&r);
    return ok;
}
