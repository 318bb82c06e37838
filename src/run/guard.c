/* guard.c — loss-spike and NaN detection and the escalation of guard.h. */
#include "run/guard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

void guard_init(tsr_guard *g, const tsr_config *cfg) {
    memset(g, 0, sizeof *g);
    g->window = cfg->guard.window;
    g->patience = cfg->guard.patience;
    g->max_rollbacks = cfg->guard.max_rollbacks;
    g->method = cfg->guard.method;
    g->action = cfg->guard.action;
    g->threshold = cfg->guard.threshold;
    if (g->window > 0) g->hist = tsr_malloc((size_t)g->window * 2 * sizeof(double));
}

void guard_free(tsr_guard *g) {
    free(g->hist);
    g->hist = NULL;
}

/* Is v an outlier of column c (0 loss, 1 norm) of the full window? Writes the comparison. */
static int is_outlier(const tsr_guard *g, int c, double v, char *cmp, size_t n) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < g->n_hist; i++) mean += g->hist[2 * i + c];
    mean /= (double)g->n_hist;
    for (int64_t i = 0; i < g->n_hist; i++) {
        double e = g->hist[2 * i + c] - mean;
        var += e * e;
    }
    double sd = sqrt(var / (double)g->n_hist), floor_sd = 1e-3 * fabs(mean);
    if (sd < floor_sd) sd = floor_sd;
    if (g->method == TSR_GUARD_MULTIPLIER) {
        snprintf(cmp, n, "%.6g > %g x window mean %.6g", v, g->threshold, mean);
        return v > g->threshold * mean;
    }
    double z = sd > 0 ? (v - mean) / sd : (v > mean ? INFINITY : 0);
    snprintf(cmp, n, "%.6g is %.3g standard deviations above the window mean %.6g (threshold %g)",
             v, z, mean, g->threshold);
    return z > g->threshold;
}

tsr_guard_verdict guard_judge(tsr_guard *g, int64_t step, double loss, double norm, char *why,
                              size_t why_n) {
    int nonfinite = !isfinite(loss) || !isfinite(norm), outlier = nonfinite;
    g->rebaselined = 0;
    char cmp[256] = "";
    why[0] = '\0';
    if (nonfinite) {
        snprintf(why, why_n, "step %lld: %s is not finite (loss %g, grad norm %g)", (long long)step,
                 !isfinite(loss) ? "the loss" : "the gradient norm", loss, norm);
    } else if (g->window > 0 && g->n_hist == g->window) {
        if (is_outlier(g, 0, loss, cmp, sizeof cmp)) {
            outlier = 1;
            snprintf(why, why_n, "step %lld: loss spike: %s", (long long)step, cmp);
        } else if (is_outlier(g, 1, norm, cmp, sizeof cmp)) {
            outlier = 1;
            snprintf(why, why_n, "step %lld: gradient norm spike: %s", (long long)step, cmp);
        }
    }
    if (!outlier) {
        g->streak = g->nonfinite_streak = 0;
        if (g->window > 0) {
            g->hist[2 * g->head] = loss;
            g->hist[2 * g->head + 1] = norm;
            g->head = (g->head + 1) % g->window;
            if (g->n_hist < g->window) g->n_hist++;
        }
        return GUARD_OK;
    }
    if (g->streak++ == 0) g->streak_first = step;
    g->nonfinite_streak = nonfinite ? g->nonfinite_streak + 1 : 0;
    if (g->action == TSR_GUARD_ROLLBACK && g->streak >= g->patience) {
        if (g->rollbacks >= g->max_rollbacks) {
            size_t o = strlen(why);
            snprintf(why + o, why_n - o, "; %lld consecutive outliers and the %lld rollback(s) "
                     "allowed (guard.max_rollbacks) are used up. If these steps are this run's "
                     "normal (a finetune's loss and gradient norm swing more than pretraining's), "
                     "raise guard.threshold (now %g), set guard.action to skip (outliers "
                     "skipped, never a stop), or guard.window = 0 (no spike guard); "
                     "docs/spike-guard.md", (long long)g->streak, (long long)g->max_rollbacks,
                     g->threshold);
            return GUARD_STOP;
        }
        return GUARD_ROLLBACK;
    }
    if (g->action != TSR_GUARD_ROLLBACK && g->nonfinite_streak >= g->patience) {
        size_t o = strlen(why);
        snprintf(why + o, why_n - o, "; %lld consecutive non-finite steps (guard.patience)",
                 (long long)g->nonfinite_streak);
        return GUARD_STOP;
    }
    if (g->action != TSR_GUARD_ROLLBACK && !nonfinite && g->streak >= g->patience) {
        /* warn / skip: a level that lasts is the new normal, not a spike (else every later step
         * would be an outlier); this step is still treated as one */
        guard_restart_window(g);
        g->rebaselined = 1;
    }
    if (g->action == TSR_GUARD_WARN && !nonfinite) return GUARD_WARN;
    g->updates_skipped++;
    return GUARD_SKIP;
}

void guard_restart_window(tsr_guard *g) {
    g->n_hist = g->head = 0;
    g->streak = g->nonfinite_streak = 0;
}

/* "streak first nonfinite|loss,norm;loss,norm;..." (window oldest first, %.17g: exact) */
void guard_format_state(const tsr_guard *g, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "%lld %lld %lld|", (long long)g->streak,
                                (long long)g->streak_first, (long long)g->nonfinite_streak);
    for (int64_t i = 0; i < g->n_hist && o < n; i++) {
        int64_t j = (g->head - g->n_hist + i + g->window) % g->window;
        o += (size_t)snprintf(buf + o, n - o, "%s%.17g,%.17g", i ? ";" : "", g->hist[2 * j],
                              g->hist[2 * j + 1]);
    }
}

int guard_parse_state(tsr_guard *g, const char *s) {
    long long streak, first, nonfinite;
    int used = 0;
    guard_restart_window(g);
    if (!s || !*s) return 0; /* older checkpoint: an empty window */
    if (sscanf(s, "%lld %lld %lld|%n", &streak, &first, &nonfinite, &used) != 3 || used == 0)
        return -1;
    s += used;
    int64_t n = 0;
    double l, v;
    while (*s) {
        if (sscanf(s, "%lf,%lf%n", &l, &v, &used) != 2) return -1;
        if (g->window > 0) { /* keep the newest window entries (the window may have shrunk) */
            g->hist[2 * g->head] = l;
            g->hist[2 * g->head + 1] = v;
            g->head = (g->head + 1) % g->window;
            if (g->n_hist < g->window) g->n_hist++;
        }
        n++;
        s += used;
        if (*s == ';') s++;
        else if (*s) return -1;
    }
    g->streak = streak;
    g->streak_first = first;
    g->nonfinite_streak = nonfinite;
    return 0;
}

int guard_record_rollback(tsr_guard *g, int64_t lo, int64_t hi) {
    if (g->n_skips >= TSR_GUARD_MAX_SKIPS) return -1;
    g->skips[g->n_skips][0] = lo;
    g->skips[g->n_skips][1] = hi;
    g->n_skips++;
    g->rollbacks++;
    g->streak = g->nonfinite_streak = 0;
    return 0;
}

void guard_format_skips(const tsr_guard *g, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < g->n_skips && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld-%lld", i ? "," : "", (long long)g->skips[i][0],
                              (long long)g->skips[i][1]);
}

int guard_parse_skips(tsr_guard *g, const char *s) {
    g->n_skips = 0;
    while (s && *s) {
        long long lo, hi;
        int used = 0;
        if (g->n_skips >= TSR_GUARD_MAX_SKIPS || sscanf(s, "%lld-%lld%n", &lo, &hi, &used) != 2 ||
            lo < 0 || hi < lo)
            return -1;
        g->skips[g->n_skips][0] = lo;
        g->skips[g->n_skips][1] = hi;
        g->n_skips++;
        s += used;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return 0;
}
