/* runlog.c — see runlog.h. A small JSON reader for one flat object per line: the keys of
 * runlog_field become numbers (or absent when null); strings, booleans, nested objects and arrays
 * are checked for syntax (RFC 8259) and skipped. No library: the format is ours and flat. */
#include "report/runlog.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "json.h"

static const char *const field_names[] = {
    "step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mfu", "step_time_s",
    "val_loss", "val_ppl", "dpo_reward_margin", "dpo_accuracy", "grpo_reward_mean",
    "grpo_pass_rate", "val_pass_at_1",
    "seconds", "blocking_s", "write_s", "bytes", "val_dpo_accuracy",
    "moe_load cv (mean of the layers)", "moe_load cv (largest of the layers)",
};
_Static_assert(sizeof field_names / sizeof field_names[0] == RL_FIELD_COUNT,
               "one name per runlog_field");

const char *runlog_field_name(runlog_field f) { return field_names[f]; }

enum { LINE_OTHER, LINE_STEP, LINE_EVAL, LINE_START, LINE_SAVE };

/* A step line's "moe_load" (may be absent): the mean and the largest of its layers' "cv" (null
 * cvs, a diverged step's, are left out). 0, or -1 with *why. */
static int moe_cv(const json_value *a, runlog_point *pt, const char **why) {
    if (!a || a->type == JSON_NULL) return 0;
    if (a->type != JSON_ARRAY) return *why = "\"moe_load\": expected an array", -1;
    double sum = 0, most = 0;
    size_t n = 0;
    for (const json_value *l = a->child; l; l = l->next) {
        const json_value *cv = l->type == JSON_OBJECT ? json_get(l, "cv") : NULL;
        if (!cv || (cv->type != JSON_NUMBER && cv->type != JSON_NULL))
            return *why = "\"moe_load\": expected objects with \"cv\" a number or null", -1;
        if (cv->type == JSON_NULL) continue;
        sum += cv->num, most = n++ ? fmax(most, cv->num) : cv->num;
    }
    if (n) {
        pt->v[RL_MOE_CV_MEAN] = sum / (double)n, pt->v[RL_MOE_CV_MAX] = most;
        pt->has |= 1u << RL_MOE_CV_MEAN | 1u << RL_MOE_CV_MAX;
    }
    return 0;
}

/* One parsed line (src/base/json.c's parser): an object whose runlog_field keys are numbers or
 * null. Returns LINE_* or -1 with *why. */
static int classify(const json_value *o, runlog_point *pt, const char **why) {
    unsigned seen = 0;
    memset(pt, 0, sizeof *pt);
    if (o->type != JSON_OBJECT) return *why = "expected '{' (one JSON object per line)", -1;
    for (int f = 0; f < RL_KEY_COUNT; f++) {
        const json_value *v = json_get(o, field_names[f]);
        if (!v) continue;
        seen |= 1u << f;
        if (v->type == JSON_NUMBER) pt->v[f] = v->num, pt->has |= 1u << f;
        else if (v->type != JSON_NULL) return *why = "expected a number or null", -1;
    }
    const json_value *ev = json_get(o, "event");
    int start = ev && ev->type == JSON_STRING && strcmp(ev->str, "start") == 0;
    if ((ev && !start) || !(pt->has & 1u << RL_STEP)) return LINE_OTHER;
    double sv = pt->v[RL_STEP];
    if (!(sv >= 0 && sv < 9e18) || (double)(int64_t)sv != sv)
        return *why = "\"step\" is not an integer in [0, 9e18)", -1;
    pt->step = (int64_t)sv;
    if (start) return LINE_START; /* a process start: after the first, a restart */
    if (seen & 1u << RL_LOSS) return moe_cv(json_get(o, "moe_load"), pt, why) ? -1 : LINE_STEP;
    if (seen & (1u << RL_VAL_LOSS | 1u << RL_VAL_PASS)) return LINE_EVAL;
    const json_value *ck = json_get(o, "checkpoint");
    if (!ck || ck->type != JSON_STRING || strcmp(ck->str, "save") != 0) return LINE_OTHER;
    if (!(pt->has & 1u << RL_BLOCKING_S) && pt->has & 1u << RL_SECONDS) /* synchronous, older */
        pt->v[RL_BLOCKING_S] = pt->v[RL_SECONDS], pt->has |= 1u << RL_BLOCKING_S;
    const json_value *as = json_get(o, "async");
    pt->async = as && as->type == JSON_TRUE;
    return LINE_SAVE;
}

static void push(runlog_point **a, size_t *n, size_t *cap, const runlog_point *pt) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        runlog_point *p = realloc(*a, *cap * sizeof **a);
        if (!p) tsr_die(TSR_EXIT_INTERNAL, "runlog: realloc(%zu points): out of memory", *cap);
        *a = p;
    }
    (*a)[(*n)++] = *pt;
}

static int by_step_then_line(const void *x, const void *y) {
    const runlog_point *a = x, *b = y;
    if (a->step != b->step) return a->step < b->step ? -1 : 1;
    return a->line < b->line ? -1 : a->line > b->line;
}

/* Sorts by step and keeps the last line of each step. */
static size_t one_per_step(runlog_point *a, size_t n) {
    if (n == 0) return 0;
    qsort(a, n, sizeof *a, by_step_then_line);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k > 0 && a[k - 1].step == a[i].step) a[k - 1] = a[i];
        else a[k++] = a[i];
    }
    return k;
}

int runlog_read(runlog *rl, const char *path) {
    memset(rl, 0, sizeof *rl);
    FILE *f = fopen(path, "r");
    if (!f) {
        tsr_error("%s: cannot open: %s (is this a run directory of tessera-train?)", path,
                  strerror(errno));
        return TSR_EXIT_DATA;
    }
    char *line = NULL;
    size_t cap = 0, cap_t = 0, cap_e = 0, cap_s = 0, lineno = 0;
    ssize_t len;
    int rc = 0;
    json_doc doc;
    json_doc_init(&doc);
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if ((size_t)len != strlen(line)) {
            tsr_error("%s:%zu: not JSON: a NUL byte in the line", path, lineno);
            rc = TSR_EXIT_DATA;
            break;
        }
        size_t k = (size_t)len;
        while (k && (line[k - 1] == '\n' || line[k - 1] == '\r' || line[k - 1] == ' ' || line[k - 1] == '\t')) k--;
        if (k == 0) continue; /* a blank line */
        json_value *root;
        json_error err;
        const char *why = NULL;
        runlog_point pt;
        int kind = json_parse(&doc, line, k, &root, &err) != 0 ? -1 : classify(root, &pt, &why);
        if (kind < 0) {
            if (why) tsr_error("%s:%zu: not JSON of a metrics line: %s", path, lineno, why);
            else tsr_error("%s:%zu:%zu: not JSON: %s", path, lineno, err.pos + 1, err.msg);
            rc = TSR_EXIT_DATA;
            break;
        }
        pt.line = lineno;
        if (kind == LINE_STEP) push(&rl->train, &rl->n_train, &cap_t, &pt), rl->train_lines++;
        if (kind == LINE_EVAL) push(&rl->eval, &rl->n_eval, &cap_e, &pt), rl->eval_lines++;
        if (kind == LINE_SAVE) push(&rl->saves, &rl->n_saves, &cap_s, &pt);
        if (kind == LINE_START && rl->n_starts++ > 0) {
            int64_t *r = realloc(rl->restarts, rl->n_starts * sizeof *r);
            if (!r) tsr_die(TSR_EXIT_INTERNAL, "runlog: realloc(%zu restarts): out of memory", rl->n_starts);
            rl->restarts = r;
            rl->restarts[rl->n_restarts++] = pt.step;
        }
    }
    if (!rc && ferror(f)) {
        tsr_error("%s: read error: %s", path, strerror(errno));
        rc = TSR_EXIT_DATA;
    }
    json_doc_free(&doc);
    free(line);
    fclose(f);
    if (rc) {
        runlog_free(rl);
        return rc;
    }
    rl->n_train = one_per_step(rl->train, rl->n_train);
    rl->n_eval = one_per_step(rl->eval, rl->n_eval);
    rl->n_saves = one_per_step(rl->saves, rl->n_saves);
    return 0;
}

void runlog_free(runlog *rl) {
    free(rl->train);
    free(rl->eval);
    free(rl->saves);
    free(rl->restarts);
    memset(rl, 0, sizeof *rl);
}

int runlog_has(const runlog *rl, runlog_field f) {
    for (size_t i = 0; i < rl->n_train; i++)
        if (rl->train[i].has & 1u << f) return 1;
    return 0;
}

const char *runlog_loss_label(const runlog *rl) {
    if (runlog_has(rl, RL_DPO_MARGIN)) return "DPO loss (-log sigmoid of the margin)";
    if (runlog_has(rl, RL_GRPO_REWARD)) return "GRPO loss (the clipped policy gradient)";
    return "loss (nats/token)";
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* Median of the finite values of field f over the series p[0..np); NAN when there are none.
 * max (may be NULL): their largest. */
double runlog_points_median(const runlog_point *p, size_t np, runlog_field f, double *max) {
    double *v = tsr_malloc((np + 1) * sizeof *v);
    size_t n = 0;
    for (size_t i = 0; i < np; i++)
        if (p[i].has & 1u << f && isfinite(p[i].v[f])) v[n++] = p[i].v[f];
    double m = NAN;
    if (n) {
        qsort(v, n, sizeof *v, cmp_double);
        m = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    }
    if (max) *max = n ? v[n - 1] : NAN;
    free(v);
    return m;
}

double runlog_median(const runlog *rl, runlog_field f) {
    return runlog_points_median(rl->train, rl->n_train, f, NULL);
}
