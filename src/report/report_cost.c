/* report_cost.c — `tessera report`'s cost section (docs/site.md "What a run cost"): every start of
 * the run directory with its wall time, hours and goodput (src/report/account_read.h sums them),
 * and, where the starts ran under Slurm and sacct answers, their wall time against sacct's
 * Elapsed. */
#include "report/report_cost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fsutil.h"
#include "report/account_read.h"

/* "[D-]HH:MM:SS" (or MM:SS) in seconds; -1 when it is not that */
static double slurm_elapsed(const char *s) {
    int d = 0, h = 0, m = 0, sec = 0;
    const char *dash = strchr(s, '-');
    if (dash) d = atoi(s), s = dash + 1;
    if (sscanf(s, "%d:%d:%d", &h, &m, &sec) == 3) return ((d * 24.0 + h) * 60 + m) * 60 + sec;
    if (sscanf(s, "%d:%d", &m, &sec) == 2) return m * 60.0 + sec;
    return -1;
}

/* The distinct Slurm jobs of the starts, comma-separated; their starts' wall time in *wall */
static void starts_jobs(const acc_run *r, char *jobs, size_t n, double *wall) {
    size_t o = 0;
    *jobs = '\0', *wall = 0;
    for (size_t k = 0; k < r->n; k++) {
        const char *j = r->starts[k].job;
        if (!*j) continue;
        *wall += r->starts[k].wall;
        char key[72];
        snprintf(key, sizeof key, ",%s,", j);
        char have[4200];
        snprintf(have, sizeof have, ",%s,", jobs);
        if (strstr(have, key) || o + strlen(j) + 2 >= n) continue;
        o += (size_t)snprintf(jobs + o, n - o, "%s%s", o ? "," : "", j);
    }
}

/* `sacct -n -P -X -D -j JOBS --format=JobID,Elapsed` (TSR_SACCT: another program): the sum of the
 * Elapsed of every run of the jobs (-D: a requeued job's earlier runs too). -1: no answer. */
static double sacct_elapsed(const char *jobs, int *runs, int *status) {
    static char out[1 << 16];
    const char *sa = getenv("TSR_SACCT");
    char j[4200];
    snprintf(j, sizeof j, "%s", jobs);
    char *argv[] = {(char *)(sa && *sa ? sa : "sacct"), "-n", "-P", "-X", "-D", "-j", j,
                    "--format=JobID,Elapsed", NULL};
    tsr_log_mute(1);
    *status = fs_run_argv(argv, out, sizeof out);
    tsr_log_mute(0);
    if (*status != 0) return -1;
    double sum = 0;
    *runs = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char *bar = strchr(line, '|');
        double e = bar ? slurm_elapsed(bar + 1) : -1;
        if (e >= 0) sum += e, (*runs)++;
    }
    return *runs ? sum : -1;
}

/* The starts' wall time against sacct's: tessera-train runs inside the job, so sacct's is the
 * larger by the batch script's own time (module load, preflight, the requeue hook) */
static void reconcile(FILE *f, const acc_run *r) {
    char jobs[4096];
    double wall;
    starts_jobs(r, jobs, sizeof jobs, &wall);
    if (!*jobs) {
        fprintf(f, "  sacct:  not reconciled (no start ran under Slurm)\n");
        return;
    }
    int runs = 0, status = 0;
    double el = sacct_elapsed(jobs, &runs, &status);
    if (el < 0) {
        fprintf(f, "  sacct:  no answer for jobs %s (exit %d: no accounting storage?); not "
                   "reconciled\n", jobs, status);
        return;
    }
    fprintf(f, "  sacct:  jobs %s: Elapsed %.0f s over %d run%s; tessera-train's starts %.1f s "
               "(%.1f%% of it; the rest is the batch script's own: module load, preflight, "
               "requeue)\n", jobs, el, runs, runs == 1 ? "" : "s", wall,
            el > 0 ? 100 * wall / el : 0);
}

int report_cost(FILE *f, const char *metrics, int with_sacct) {
    acc_run r;
    int rc = account_read(&r, metrics);
    if (rc) return rc;
    if (r.n == 0) fprintf(f, "cost:       none recorded (a metrics.jsonl from before accounting)\n");
    else account_print(f, &r);
    if (r.n && with_sacct) reconcile(f, &r);
    account_free(&r);
    return 0;
}

int report_cost_figures(const char *metrics, double *goodput, double *gpu_h, double *cpu_h) {
    acc_run r;
    *goodput = *gpu_h = *cpu_h = NAN;
    tsr_log_mute(1);
    int rc = account_read(&r, metrics);
    tsr_log_mute(0);
    if (rc || r.n == 0) return rc ? rc : 1;
    *goodput = r.wall > 0 ? r.s[ACC_STEPS] / r.wall : NAN, *gpu_h = r.gpu_h, *cpu_h = r.cpu_h;
    account_free(&r);
    return 0;
}
