/* account.c — see account.h: the trainer's side (what a start feeds and writes; read back by
 * src/report/account_read.c). */
#include "telemetry/account.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "fsutil.h"
#include "json.h"
#include "telemetry/energy.h"

static const char *const part_keys[ACC_PARTS] = {"startup_s", "steps_s", "save_s", "load_s",
                                                 "eval_s", "lost_s", "data_s", "health_s",
                                                 "idle_s"};
const char *account_part_key(acc_part p) { return part_keys[p]; }

static struct {
    double s[ACC_PARTS];
    double begin, load_at_begin; /* UNIX time trainer_run began; load seconds by then */
    double poll;                 /* tsr_now() of the last energy poll */
    int64_t n_steps;
    double health_seen;          /* run->out->health.step_s at the last step */
    struct { int64_t step; double secs; } recent[4096]; /* by step % 4096: a rollback's steps */
    tsr_energy energy;
} acc;

static double unix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* UNIX time this process started: /proc/self/stat's starttime (clock ticks after boot, field 22,
 * after the command name in parentheses) against /proc/uptime (seconds after boot, now, to 10 ms):
 * now - (uptime - starttime). Now when unreadable. */
static double process_started(void) {
    static double started;
    if (started > 0) return started;
    char *stat = NULL, *up = NULL, *p;
    size_t n;
    unsigned long long ticks = 0;
    double uptime = -1;
    if (fs_read_all("/proc/self/stat", 1 << 16, &stat, &n) == 0 && (p = strrchr(stat, ')')) &&
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d "
                      "%*d %llu", &ticks) == 1 &&
        fs_read_all("/proc/uptime", 4096, &up, &n) == 0)
        uptime = strtod(up, NULL);
    free(stat);
    free(up);
    double since = uptime - (double)ticks / (double)sysconf(_SC_CLK_TCK);
    started = unix_now() - (uptime >= 0 && since >= 0 ? since : 0);
    return started;
}

void account_add(acc_part p, double seconds) {
    if (seconds > 0) acc.s[p] += seconds;
}

void account_rolled_back(int64_t from, int64_t to) {
    double lost = 0, mean = acc.n_steps ? acc.s[ACC_STEPS] / (double)acc.n_steps : 0;
    for (int64_t k = to + 1; k <= from; k++) { /* each step's own time (older: the mean) */
        int i = (int)(k % 4096);
        lost += acc.recent[i].step == k ? acc.recent[i].secs : mean;
        acc.recent[i].step = -1;
    }
    if (lost > acc.s[ACC_STEPS]) lost = acc.s[ACC_STEPS];
    acc.s[ACC_STEPS] -= lost, acc.s[ACC_LOST] += lost;
}

static int gpus_per_rank(const tsr_run *run) { return run->cfg->device == TSR_DEVICE_CUDA; }

void account_run_begin(const tsr_run *run) {
    process_started();
    acc.begin = unix_now(), acc.load_at_begin = acc.s[ACC_LOAD], acc.poll = tsr_now();
    energy_start(&acc.energy, gpus_per_rank(run) ? run->dist->local_rank : -1,
                 run->dist->local_rank == 0);
}

void account_step(const tsr_run *run, double step_time) {
    double health = run->out->health.step_s - acc.health_seen;
    acc.health_seen = run->out->health.step_s;
    if (health > step_time) health = step_time;
    account_add(ACC_STEPS, step_time - health), account_add(ACC_HEALTH, health), acc.n_steps++;
    acc.recent[*run->step % 4096].step = *run->step;
    acc.recent[*run->step % 4096].secs = step_time - health;
    if (tsr_now() - acc.poll >= 10) { /* the package counters wrap: read them often enough */
        double g, c;
        energy_read(&acc.energy, &g, &c);
        acc.poll = tsr_now();
    }
}

static const char *slurm_job(char *buf, size_t n) {
    const char *arr = getenv("SLURM_ARRAY_JOB_ID"), *task = getenv("SLURM_ARRAY_TASK_ID");
    const char *job = getenv("SLURM_JOB_ID");
    if (arr && *arr && task && *task) snprintf(buf, n, "%s_%s", arr, task);
    else snprintf(buf, n, "%s", job ? job : "");
    return buf;
}

void account_start_fields(const tsr_run *run, FILE *f) {
    char job[64];
    fprintf(f, ", \"started\": %.3f, \"ranks\": %d, \"gpus\": %d, \"threads\": %d, \"job\": ",
            process_started(), run->dist->world, run->dist->world * gpus_per_rank(run),
            run->be->threads);
    json_fput_string(f, slurm_job(job, sizeof job));
}

/* The run's summary line into TSR_COMMENT_FILE, for the requeue hook to make the job's comment
 * once the step has ended (scontrol run from inside a step of one job cancelled a step of another
 * on the test cluster: the hook, outside the step, does it). 1 written, 0 no such file asked. */
int account_comment_file(const char *line) {
    const char *path = getenv("TSR_COMMENT_FILE");
    if (!path || !*path) return 0;
    FILE *f = fopen(path, "w");
    int ok = f && fprintf(f, "%s\n", line) > 0;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) tsr_warn("TSR_COMMENT_FILE=%s: cannot write the job's comment line", path);
    return ok;
}

const char *account_energy_why(int gpu) {
    return gpu ? acc.energy.gpu_why : acc.energy.cpu_why;
}

void account_close(const tsr_run *run, acc_start *s) {
    double e[2];
    energy_read(&acc.energy, &e[0], &e[1]);
    double have[2] = {isfinite(e[0]), isfinite(e[1])};
    for (int k = 0; k < 2; k++) e[k] = have[k] ? e[k] : 0;
    dist_allreduce_sum_f64(e, 2); /* the ranks' GPUs, the nodes' packages */
    dist_allreduce_sum_f64(have, 2);
    memset(s, 0, sizeof *s);
    s->step = *run->step, s->last_step = *run->step, s->recorded = 1;
    s->ranks = run->dist->world, s->gpus = run->dist->world * gpus_per_rank(run);
    s->threads = run->be->threads, s->started = process_started();
    s->gpu_j = have[0] > 0 ? e[0] : NAN, s->cpu_j = have[1] > 0 ? e[1] : NAN;
    s->wall = unix_now() - s->started;
    acc.s[ACC_STARTUP] = acc.begin - s->started - acc.load_at_begin;
    if (acc.s[ACC_STARTUP] < 0) acc.s[ACC_STARTUP] = 0;
    double busy = 0;
    for (int p = 0; p < ACC_IDLE; p++) busy += acc.s[p];
    acc.s[ACC_IDLE] = s->wall > busy ? s->wall - busy : 0;
    memcpy(s->s, acc.s, sizeof s->s);
}
