/* metrics_prom.c — see metrics_prom.h. */
#include "telemetry/metrics_prom.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "prom.h"

static struct {
    int64_t step, total, ckpt_step; /* ckpt_step -1: none committed by this start */
    double loss, tok_s, mfu, eta, mem, ckpt_time, written;
    int running, exit_code;
    char labels[1600], mem_labels[1700], file[160];
    tsr_health_figures health;   /* the sdc checks' figures (docs/health.md) */
} pm = {.ckpt_step = -1, .loss = NAN, .tok_s = NAN, .mfu = NAN, .eta = NAN, .mem = NAN};

static double unix_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int on(const tsr_run *run) {
    return run->dist->rank == 0 && run->cfg->metrics.prometheus_dir[0];
}

int metrics_prom_check(const tsr_run *run) {
    const char *d = run->cfg->metrics.prometheus_dir;
    struct stat sb;
    if (run->dist->rank != 0 || !*d) return 0;
    if (stat(d, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(d, W_OK | X_OK) != 0) {
        tsr_error("metrics.prometheus_dir = \"%s\": %s: expected a writable directory (node_exporter's "
                  "--collector.textfile.directory)", d, stat(d, &sb) != 0 ? strerror(errno)
                  : !S_ISDIR(sb.st_mode) ? "not a directory" : "not writable");
        return TSR_EXIT_USAGE;
    }
    return 0;
}

/* the labels and the file name, once: run (run_dir's last part), slurm_job, host. Not "job":
 * Prometheus gives every scraped sample its scrape job's own job label, and a file's job label
 * then becomes exported_job (docs/site.md) */
static void names(const tsr_run *run) {
    if (pm.file[0]) return;
    const char *name = strrchr(run->cfg->run_dir, '/');
    name = name && name[1] ? name + 1 : run->cfg->run_dir;
    const char *arr = getenv("SLURM_ARRAY_JOB_ID"), *task = getenv("SLURM_ARRAY_TASK_ID");
    const char *id = getenv("SLURM_JOB_ID");
    char job[64] = "";
    if (arr && *arr && task && *task) snprintf(job, sizeof job, "%s_%s", arr, task);
    else if (id) snprintf(job, sizeof job, "%s", id);
    prom_labels(pm.labels, sizeof pm.labels, "run", name, "slurm_job", job, "host", run->dist->host,
                NULL);
    snprintf(pm.mem_labels, sizeof pm.mem_labels, "%s,device=\"%s\"", pm.labels,
             run->cfg->device == TSR_DEVICE_CUDA ? "cuda" : "cpu");
    /* the file: one per job (a requeue rewrites it), else per run; [A-Za-z0-9_.-] only */
    snprintf(pm.file, sizeof pm.file, "tessera_train_%.120s", *job ? job : name);
    for (char *p = pm.file; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '-' || *p == '.')) *p = '_';
    strcat(pm.file, ".prom");
}

int metrics_prom_path(const tsr_run *run, char *buf, size_t n) {
    if (!run->cfg->metrics.prometheus_dir[0]) return 0;
    names(run);
    snprintf(buf, n, "%s/%s", run->cfg->metrics.prometheus_dir, pm.file);
    return 1;
}

static void gauge(FILE *f, const char *name, const char *help, const char *labels, double v) {
    prom_family(f, name, help);
    prom_sample(f, name, labels, v);
}

static void fill(FILE *f, const void *ctx) {
    (void)ctx;
    const double now = unix_time();
    const char *l = pm.labels;
    gauge(f, "tessera_train_running", "1 while tessera-train runs, 0 after it ended", l, pm.running);
    gauge(f, "tessera_train_exit_code", "exit status of the ended start (NaN while running)", l,
          pm.running ? NAN : pm.exit_code);
    gauge(f, "tessera_train_step", "optimizer steps done", l, (double)pm.step);
    gauge(f, "tessera_train_total_steps", "optimizer steps of the whole run", l, (double)pm.total);
    gauge(f, "tessera_train_loss", "training loss of the last step (nats/token)", l, pm.loss);
    gauge(f, "tessera_train_tokens_per_second", "tokens per second of the last step, all ranks", l,
          pm.tok_s);
    gauge(f, "tessera_train_mfu_ratio", "model FLOPs utilization of the last step (0..1)", l, pm.mfu);
    gauge(f, "tessera_train_eta_seconds", "estimated seconds to the end of the run", l, pm.eta);
    gauge(f, "tessera_train_device_memory_peak_bytes", "most memory the training device's "
          "allocator held, largest rank (GPU memory with device=cuda)", pm.mem_labels, pm.mem);
    gauge(f, "tessera_train_last_checkpoint_step", "step of the last checkpoint this start "
          "committed (-1: none yet)", l, (double)pm.ckpt_step);
    gauge(f, "tessera_train_last_checkpoint_age_seconds", "seconds since that checkpoint "
          "(NaN: none yet)", l, pm.ckpt_step >= 0 ? now - pm.ckpt_time : NAN);
    gauge(f, "tessera_train_sdc_comparisons", "fingerprint comparisons this start made "
          "(docs/health.md)", l, (double)pm.health.comparisons);
    gauge(f, "tessera_train_sdc_rest_checks", "at-rest fingerprint checks this start made", l,
          (double)pm.health.rest_checks);
    gauge(f, "tessera_train_sdc_replays", "deterministic replays this start made", l,
          (double)pm.health.replays);
    gauge(f, "tessera_train_sdc_transient_faults", "faults a replay found transient (the run went "
          "on)", l, (double)pm.health.transients);
    gauge(f, "tessera_train_sdc_found", "1 when a corruption stopped this start (exit 87)", l,
          (double)pm.health.found);
    gauge(f, "tessera_train_sdc_step_seconds", "seconds the checks took inside this start's steps "
          "(rank 0)", l, pm.health.step_s);
    /* (last: a reader that finds it has the whole file) */
    gauge(f, "tessera_train_last_update_timestamp_seconds", "when this file was written (Unix "
          "seconds): a stale file is a stopped writer", l, now);
}

static void write_now(const tsr_run *run) {
    names(run);
    pm.written = tsr_now();
    if (prom_write(run->cfg->metrics.prometheus_dir, pm.file, fill, NULL))
        tsr_warn("metrics.prometheus_dir: %s not written (the run goes on)", pm.file);
}

void metrics_prom_step(const tsr_run *run, const tsr_step_stats *st, double tok_s, double mfu,
                       double eta_s) {
    if (!on(run)) return;
    pm.running = 1, pm.step = st->step, pm.total = *run->total_steps, pm.loss = st->loss;
    pm.health = run->out->health;
    pm.tok_s = tok_s, pm.mfu = mfu, pm.eta = eta_s, pm.mem = st->peak_mem;
    if (pm.written == 0 || tsr_now() - pm.written >= run->cfg->metrics.prometheus_interval ||
        st->step == *run->total_steps)
        write_now(run);
}

void metrics_prom_saved(const tsr_run *run) {
    if (!on(run)) return;
    pm.running = 1, pm.ckpt_step = *run->step, pm.ckpt_time = unix_time(), pm.step = *run->step;
    pm.total = *run->total_steps;
    write_now(run);
}

void metrics_prom_end(const tsr_run *run, int rc) {
    if (!on(run)) return;
    pm.health = run->out->health;
    pm.running = 0, pm.exit_code = rc, pm.step = *run->step, pm.total = *run->total_steps;
    write_now(run);
}
