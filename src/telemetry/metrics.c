/* metrics.c — per-step lines, eval lines, run_dir/metrics.jsonl and the TensorBoard event file
 * run_dir/tb/ (rank 0 only; tags in docs/tracking.md). The plan at start: src/plan/plan.c. */
#include "telemetry/metrics.h"
#include "run/objective.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common.h"
#include "tokenizer/tokenizer.h"
#include "telemetry/account.h"
#include "telemetry/metrics_prom.h"
#include "telemetry/tboard.h"

static int mkdir_p(const char *path) {
    char buf[1024];
    if (tsr_snprintf(buf, sizeof buf, "%s", path)) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

int metrics_save_config(const tsr_config *cfg) {
    char path[1200];
    snprintf(path, sizeof path, "%s/config.cfg", cfg->run_dir);
    return config_save(path, cfg);
}

int metrics_open_run_dir(const tsr_run *run) {
    TSR_CHECK(metrics_prom_check(run)); /* (before run_dir is written) */
    char path[1200];
    if (mkdir_p(run->cfg->run_dir) != 0) {
        tsr_error("run_dir = \"%s\": cannot create: %s", run->cfg->run_dir, strerror(errno));
        return TSR_EXIT_DATA;
    }
    TSR_CHECK(metrics_save_config(run->cfg));
    /* appended to: a resumed or requeued run continues the same file (a "start" line marks each
     * process start; a step logged twice after a crash is the later line that counts) */
    snprintf(path, sizeof path, "%s/metrics.jsonl", run->cfg->run_dir);
    run->out->metrics = fopen(path, "a");
    if (!run->out->metrics) {
        tsr_error("%s: cannot open for writing: %s", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    /* a new event file per process start: TensorBoard merges the files of run_dir/tb/ */
    TSR_CHECK(tboard_open(&run->out->tb, run->cfg->run_dir));
    return 0;
}

static void format_eta(char *buf, size_t n, double s) {
    long v = (long)(s + 0.5);
    if (v >= 3600) snprintf(buf, n, "%ldh%02ldm", v / 3600, v / 60 % 60);
    else if (v >= 60) snprintf(buf, n, "%ldm%02lds", v / 60, v % 60);
    else snprintf(buf, n, "%lds", v);
}

static void json_number(char *buf, size_t n, double v) {
    if (isfinite(v)) snprintf(buf, n, "%.9g", v);
    else snprintf(buf, n, "null");
}

/* MoE: one layer's expert load of the step: tokens routed (assignments), fewest and most per
 * expert, coefficient of variation (population standard deviation / mean) */
typedef struct moe_load {
    double tokens, min, max, cv;
} moe_load;

static moe_load moe_layer_load(const double *counts, int E) {
    moe_load s = {0, counts[0], counts[0], 0};
    for (int e = 0; e < E; e++) {
        s.tokens += counts[e];
        if (counts[e] < s.min) s.min = counts[e];
        if (counts[e] > s.max) s.max = counts[e];
    }
    double mean = s.tokens / E, var = 0;
    for (int e = 0; e < E; e++) var += (counts[e] - mean) * (counts[e] - mean);
    s.cv = mean > 0 ? sqrt(var / E) / mean : 0;
    return s;
}

/* The step's summed MoE losses over the layers: [aux, z] */
static void moe_losses(const tsr_run *run, double out[2]) {
    out[0] = out[1] = 0;
    for (int k = 0; k < run->out->moe_layers; k++) {
        const double *x = run->out->moe + (size_t)k * (size_t)(2 + run->model->E);
        out[0] += x[0];
        out[1] += x[1];
    }
}

/* One figure of an objective's step, PREFIX_NAME into the metrics.jsonl record and PREFIX/NAME
 * into the TensorBoard step */
static void log_figure(const tsr_run *run, const char *prefix, const char *name, double v) {
    if (run->out->metrics) {
        char num[32];
        json_number(num, sizeof num, v);
        fprintf(run->out->metrics, ", \"%s_%s\": %s", prefix, name, num);
    }
    if (run->out->tb) {
        char tag[64];
        snprintf(tag, sizeof tag, "%s/%s", prefix, name);
        tboard_scalar(run->out->tb, tag, v);
    }
}

/* the objective's figures of the step (dpo: its means over the pairs, docs/dpo.md; grpo:
 * docs/rl.md "Metrics"; run/objective.h), into the metrics.jsonl record and the TensorBoard
 * step */
static void objective_log(const tsr_run *run, const tsr_step_stats *st) {
    const tsr_objective *o = run->objective;
    if (!o->step_figures) return;
    objective_figure f[OBJECTIVE_MAX_FIGURES];
    const int n = o->step_figures(run->cfg, run->objective_state, st, f);
    for (int k = 0; k < n; k++) log_figure(run, o->figure_prefix, f[k].name, f[k].v);
}

/* the MoE part of a metrics.jsonl record and of the TensorBoard step (docs/moe.md) */
static void moe_log(const tsr_run *run) {
    if (!run->out->moe) return;
    const int E = run->model->E;
    double lz[2];
    moe_losses(run, lz);
    if (run->out->metrics) { /* non-finite values (a diverged step) are null, as the loss is */
        char aux[32], z[32], cv[32];
        json_number(aux, sizeof aux, lz[0]);
        json_number(z, sizeof z, lz[1]);
        fprintf(run->out->metrics, ", \"moe_aux\": %s, \"moe_z\": %s, \"moe_load\": [", aux, z);
        for (int k = 0; k < run->out->moe_layers; k++) {
            moe_load s = moe_layer_load(run->out->moe + (size_t)k * (size_t)(2 + E) + 2, E);
            json_number(cv, sizeof cv, s.cv);
            fprintf(run->out->metrics, "%s{\"tokens\": %.0f, \"min\": %.0f, \"max\": %.0f, "
                    "\"cv\": %s}", k ? ", " : "", s.tokens, s.min, s.max, cv);
        }
        fprintf(run->out->metrics, "]");
    }
    if (run->out->tb) {
        char tag[64];
        tboard_scalar(run->out->tb, "moe/aux", lz[0]);
        tboard_scalar(run->out->tb, "moe/z", lz[1]);
        for (int k = 0; k < run->out->moe_layers; k++) {
            moe_load s = moe_layer_load(run->out->moe + (size_t)k * (size_t)(2 + E) + 2, E);
            snprintf(tag, sizeof tag, "moe/load_cv/%d", k);
            tboard_scalar(run->out->tb, tag, s.cv);
            snprintf(tag, sizeof tag, "moe/load_max/%d", k);
            tboard_scalar(run->out->tb, tag, s.max);
            snprintf(tag, sizeof tag, "moe/load_min/%d", k);
            tboard_scalar(run->out->tb, tag, s.min);
        }
    }
}

/* a step's rates: the mean step time of this process, tokens/s and MFU */
typedef struct step_rates {
    double avg, tok_s, mfu;
} step_rates;

/* the step's rates; counts the step into this process's mean step time */
static step_rates step_rates_of(const tsr_run *run, const tsr_step_stats *st) {
    step_rates r;
    tsr_train_out *o = run->out;
    /* the first step of this process pays for page faults and thread start-up: keep it out of
     * the average, which divides this process's time by this process's steps (after a resume
     * the step number counts the earlier runs' steps too) */
    if (++o->steps_run > 1) o->time_sum += st->step_time;
    r.avg = o->steps_run > 1 ? o->time_sum / (double)(o->steps_run - 1) : st->step_time;
    r.tok_s = (double)(run->cfg->global_batch * *run->T) / st->step_time;
    r.mfu = o->peak_flops > 0 ? o->flops_per_token * r.tok_s / (run->dist->world * o->peak_flops)
                              : 0;
    return r;
}

/* the objective's and the MoE's figures of the step line: " | margin ... acc ...", ... */
static void step_line_aux(const tsr_run *run, const tsr_step_stats *st, char aux[96]) {
    size_t o = 0;
    aux[0] = '\0';
    const tsr_objective *ob = run->objective;
    if (ob->step_figures && ob->line[0].label) { /* (run/objective.h) */
        objective_figure f[OBJECTIVE_MAX_FIGURES];
        ob->step_figures(run->cfg, run->objective_state, st, f);
        for (int k = 0; k < 4 && ob->line[k].label && o < 96; k++)
            o += (size_t)snprintf(aux + o, 96 - o, "%s%s %.*f", k ? " " : " | ",
                                  ob->line[k].label, ob->line[k].digits, f[ob->line[k].figure].v);
    }
    if (run->model->D && o < 96) /* (multi-token prediction's, apart from the loss) */
        o += (size_t)snprintf(aux + o, 96 - o, " | mtp %.6f", st->mtp_loss);
    if (run->out->moe && o < 96) { /* (DPO on a MoE model: both) */
        double lz[2];
        moe_losses(run, lz);
        snprintf(aux + o, 96 - o, " | aux %.4f", lz[0]);
    }
}

/* the step line on stdout; " | data wait S s" at its end when the step waited for staged shards
 * before it began (data.stage_to: an object-store window, data.stage_wait) */
static void step_line(const tsr_run *run, const tsr_step_stats *st, const step_rates *r) {
    char eta[32] = "-", mem[32], aux[96], wait[48] = "";
    /* a process's first step (start-up, page faults) predicts nothing: no ETA until its second */
    if (run->out->steps_run > 1)
        format_eta(eta, sizeof eta, r->avg * (double)(*run->total_steps - st->step));
    metrics_human_bytes(mem, sizeof mem, st->peak_mem);
    step_line_aux(run, st, aux);
    if (run->data->step_wait >= 0.0005)
        snprintf(wait, sizeof wait, " | data wait %.3f s", run->data->step_wait);
    printf("step %*lld/%lld | loss %.6f%s | lr %.3e | norm %.4f | %.0f tok/s | mfu %.1f%% | "
           "%.1f ms | mem %s | eta %s%s\n",
           (int)snprintf(NULL, 0, "%lld", (long long)*run->total_steps), (long long)st->step,
           (long long)*run->total_steps, st->loss, aux, st->lr, st->grad_norm, r->tok_s,
           100 * r->mfu, 1e3 * st->step_time, mem, eta, wait);
    fflush(stdout);
}

/* a mixture's samples trained on from each stream so far, as loaded, into the record */
static void step_record_streams(const tsr_run *run) {
    FILE *f = run->out->metrics;
    fprintf(f, ", \"samples\": {");
    for (int k = 0; k < run->data->n_streams; k++)
        fprintf(f, "%s\"%s\": %lld", k ? ", " : "", run->data->stream_names[k],
                (long long)run->data->stream_seen[k]);
    fprintf(f, "}, \"stream_tokens\": {");
    for (int k = 0; k < run->data->n_streams; k++)
        fprintf(f, "%s\"%s\": %lld", k ? ", " : "", run->data->stream_names[k],
                (long long)run->data->stream_seen[k] * *run->T);
    fprintf(f, "}");
}

/* the step's metrics.jsonl record, up to the objective's and the MoE's figures */
static void step_record(const tsr_run *run, const tsr_step_stats *st, const step_rates *r) {
    /* JSON has no NaN or Inf: a non-finite value is null (a zero step time from a coarse
     * clock would make the rates infinite) */
    char loss[32], norm[32], rate[32], frac[32], secs[32];
    json_number(loss, sizeof loss, st->loss);
    json_number(norm, sizeof norm, st->grad_norm);
    json_number(rate, sizeof rate, r->tok_s);
    json_number(frac, sizeof frac, r->mfu);
    json_number(secs, sizeof secs, st->step_time);
    fprintf(run->out->metrics,
            "{\"step\": %lld, \"loss\": %s, \"lr\": %.9g, \"grad_norm\": %s, "
            "\"tokens\": %lld, \"tokens_per_s\": %s, \"mfu\": %s, \"step_time_s\": %s, "
            "\"data_batch\": %lld, \"targets\": %lld, \"peak_mem_bytes\": %.0f, "
            "\"peak_rss_bytes\": %.0f",
            (long long)st->step, loss, st->lr, norm, (long long)*run->tokens_seen,
            rate, frac, secs, (long long)st->data_batch, (long long)st->tokens,
            st->peak_mem, st->peak_rss);
    if (run->data->n_streams > 1) step_record_streams(run);
    if (run->data->stagers[0]) /* (staging: the seconds the step waited for its shards first) */
        fprintf(run->out->metrics, ", \"data_wait_s\": %.6f", run->data->step_wait);
    static const char *const verdicts[] = {"ok", "warn", "skip", "rollback", "stop"};
    if (st->verdict != GUARD_OK)
        fprintf(run->out->metrics, ", \"guard\": \"%s\"", verdicts[st->verdict]);
}

/* the step's TensorBoard figures after the objective's and the MoE's: the same as the JSONL
 * line (mfu as a fraction, as there); writes the step */
static void step_tboard(const tsr_run *run, const tsr_step_stats *st, const step_rates *r) {
    tboard_scalar(run->out->tb, "train/loss", st->loss);
    tboard_scalar(run->out->tb, "train/lr", st->lr);
    tboard_scalar(run->out->tb, "train/grad_norm", st->grad_norm);
    tboard_scalar(run->out->tb, "train/tokens_per_s", r->tok_s);
    tboard_scalar(run->out->tb, "train/mfu", r->mfu);
    tboard_scalar(run->out->tb, "train/step_time_s", st->step_time);
    tboard_scalar(run->out->tb, "train/tokens", (double)*run->tokens_seen);
    tboard_scalar(run->out->tb, "memory/planned_bytes", run->out->planned_bytes);
    tboard_scalar(run->out->tb, "memory/peak_bytes", st->peak_mem);
    tboard_scalar(run->out->tb, "memory/peak_rss_bytes", st->peak_rss);
    tboard_write_step(run->out->tb, st->step);
}

void metrics_log_step(const tsr_run *run, const tsr_step_stats *st) {
    if (run->dist->rank != 0) return;
    const step_rates r = step_rates_of(run, st);
    if (st->step % run->cfg->log_interval == 0 || st->step == *run->total_steps || st->step == 1)
        step_line(run, st, &r);
    metrics_prom_step(run, st, r.tok_s, r.mfu, r.avg * (double)(*run->total_steps - st->step));
    if (run->out->metrics) step_record(run, st, &r);
    moe_log(run); /* the record's MoE part and the TensorBoard step's (before it is written) */
    if (run->model->D) log_figure(run, "mtp", "loss", st->mtp_loss); /* "mtp_loss", mtp/loss */
    objective_log(run, st);
    if (run->out->metrics) jsonl_end_record(run->out->metrics);
    if (run->out->tb) step_tboard(run, st, &r);
}

void metrics_log_guard_note(const tsr_run *run, const char *action, const tsr_step_stats *st,
                            const char *note) {
    if (run->dist->rank != 0) return;
    printf("guard: %s at step %lld (data batch %lld): %s\n", action, (long long)st->step,
           (long long)st->data_batch, note);
    fflush(stdout);
    if (run->out->metrics) {
        fprintf(run->out->metrics, "{\"event\": \"guard\", \"action\": \"%s\", \"step\": %lld, "
                "\"data_batch\": %lld, \"why\": \"%s\"", action, (long long)st->step,
                (long long)st->data_batch, note);
        jsonl_end_record(run->out->metrics);
    }
}

void metrics_log_guard(const tsr_run *run, const char *action, const tsr_step_stats *st) {
    if (run->dist->rank != 0) return;
    printf("guard: %s step %lld (data batch %lld): %s\n", action, (long long)st->step,
           (long long)st->data_batch, st->why);
    fflush(stdout);
    char loss[32], norm[32];
    json_number(loss, sizeof loss, st->loss);
    json_number(norm, sizeof norm, st->grad_norm);
    if (run->out->metrics) {
        fprintf(run->out->metrics,
                "{\"event\": \"guard\", \"action\": \"%s\", \"step\": %lld, \"data_batch\": %lld, "
                "\"outlier_loss\": %s, \"outlier_grad_norm\": %s, \"why\": \"%s\"",
                action, (long long)st->step, (long long)st->data_batch, loss, norm, st->why);
        jsonl_end_record(run->out->metrics);
    }
}

void metrics_log_rollback(const tsr_run *run, const tsr_guard *g, int64_t from_step,
                          const char *path, int64_t lo, int64_t hi) {
    if (run->dist->rank != 0) return;
    account_rolled_back(from_step, *run->step); /* the steps after the restored one: lost */
    long long gb = (long long)run->cfg->global_batch;
    printf("guard: rollback at step %lld to step %lld (%s); skipping data batches [%lld, %lld) = "
           "global samples [%lld, %lld); rollback %lld of %lld\n",
           (long long)from_step, (long long)*run->step, path, (long long)lo, (long long)hi,
           (long long)lo * gb, (long long)hi * gb, (long long)g->rollbacks,
           (long long)g->max_rollbacks);
    fflush(stdout);
    if (run->out->metrics) {
        fprintf(run->out->metrics,
                "{\"event\": \"rollback\", \"step\": %lld, \"to_step\": %lld, \"checkpoint\": "
                "\"%s\", \"skipped_batches\": [%lld, %lld], \"skipped_samples\": [%lld, %lld], "
                "\"rollbacks\": %lld",
                (long long)from_step, (long long)*run->step, path, (long long)lo, (long long)hi,
                (long long)lo * gb, (long long)hi * gb, (long long)g->rollbacks);
        jsonl_end_record(run->out->metrics);
    }
}

/* Rank 0: "checkpoint WHAT step S | PATH | X s | Y MB | Z GB/s" printed (no newline) and its
 * metrics.jsonl record begun (left open for more fields). */
static void checkpoint_record(const tsr_run *run, const char *what, int64_t step,
                              const char *path, double seconds, uint64_t bytes) {
    double gbs = seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0;
    printf("checkpoint %s step %lld | %s | %.3f s | %.1f MB | %.2f GB/s", what, (long long)step,
           path, seconds, (double)bytes / 1e6, gbs);
    if (run->out->metrics)
        fprintf(run->out->metrics,
                "{\"step\": %lld, \"checkpoint\": \"%s\", \"path\": \"%s\", \"seconds\": %.6g, "
                "\"bytes\": %llu, \"gb_per_s\": %.6g",
                (long long)step, what, path, seconds, (unsigned long long)bytes, gbs);
}

void metrics_log_checkpoint(const tsr_run *run, const char *what, const char *path,
                            double seconds, uint64_t bytes) {
    if (run->dist->rank != 0) return;
    account_add(ACC_LOAD, seconds); /* (saves: metrics_log_save) */
    checkpoint_record(run, what, *run->step, path, seconds, bytes);
    printf("\n");
    fflush(stdout);
    if (run->out->metrics) jsonl_end_record(run->out->metrics);
}

/* what a background save's blocking time was: the snapshot taken at the save's step boundary, or
 * (save_async_copy = step) the copy into it made inside the next step, before its update */
static const char *snapshot_note(const tsr_train_ckpt *ck, char *buf, size_t n) {
    if (ck->copy_in_step) snprintf(buf, n, "the copy into the snapshot, made inside the step");
    else snprintf(buf, n, "snapshot %.3f s", ck->snap_s);
    return buf;
}

void metrics_log_save(const tsr_run *run, const tsr_train_ckpt *ck, int64_t step,
                      const char *path, const ckpt_stats *st, int async) {
    char snap[64];
    if (run->dist->rank != 0) return;
    account_add(ACC_SAVE, st->blocking); /* the time training stood still for it (goodput) */
    metrics_prom_saved(run);
    checkpoint_record(run, "save", step, path, st->seconds, st->bytes);
    if (async)
        printf(" | blocking %.3f s (%s); written in the background in %.3f s, waited %.3f s for "
               "it; committed at step %lld", st->blocking, snapshot_note(ck, snap, sizeof snap),
               st->write, st->waited, (long long)*run->step);
    printf("\n");
    fflush(stdout);
    if (!run->out->metrics) return;
    fprintf(run->out->metrics, ", \"async\": %s, \"blocking_s\": %.6g, \"write_s\": %.6g, "
            "\"waited_s\": %.6g, \"committed_step\": %lld", async ? "true" : "false",
            st->blocking, st->write, st->waited, (long long)*run->step);
    fprintf(run->out->metrics, ", \"write_cpu_s\": %.6g, \"write_cpu_copy_s\": %.6g, "
            "\"write_cpu_slices_s\": %.6g, \"write_cpu_fsync_s\": %.6g, \"write_cpu_io_s\": %.6g, "
            "\"write_bounced_bytes\": %llu", st->write_cpu, st->write_cpu_copy,
            st->write_cpu_slices, st->write_cpu_fsync, st->write_cpu_io,
            (unsigned long long)st->write_bounced);
    if (async)
        fprintf(run->out->metrics, ", \"snapshot_s\": %.6g, \"copy_in_step\": %s", ck->snap_s,
                ck->copy_in_step ? "true" : "false");
    jsonl_end_record(run->out->metrics);
}

void metrics_log_micro(const tsr_run *run, int from, int micro, int64_t failed) {
    if (run->dist->rank != 0) return;
    const double mib = 1024.0 * 1024.0;
    if (from > 0)
        printf("micro_batch auto: %d x %d sequences (%.1f MiB of activations) do not fit on %lld "
               "of %d ranks: step %lld reruns with microbatches of %d\n", from, *run->T,
               (double)model_acts_bytes(run->model, from, *run->T) / mib, (long long)failed,
               run->dist->world, (long long)*run->step + 1, micro);
    else
        printf("micro_batch auto: %d sequences per pass (%lld passes per step), %.1f MiB of "
               "activations per rank\n", micro, (long long)(*run->per_rank / micro),
               (double)model_acts_bytes(run->model, micro, *run->T) / mib);
    fflush(stdout);
    if (run->out->metrics) {
        fprintf(run->out->metrics, "{\"event\": \"micro_batch\", \"step\": %lld, "
                "\"micro_batch\": %d", (long long)*run->step, micro);
        if (from > 0)
            fprintf(run->out->metrics, ", \"did_not_fit\": %d, \"ranks_failed\": %lld", from,
                    (long long)failed);
        jsonl_end_record(run->out->metrics);
    }
}

void metrics_log_start(const tsr_run *run) {
    if (run->dist->rank != 0 || !run->out->metrics) return;
    fprintf(run->out->metrics, "{\"event\": \"start\", \"step\": %lld, \"world\": %d",
            (long long)*run->step, run->dist->world);
    account_start_fields(run, run->out->metrics); /* when and what this start holds (account.h) */
    jsonl_end_record(run->out->metrics);
}

/* A number or null (JSON has no NaN) as `, "key": v`. */
static void put_num(FILE *f, const char *key, double v) {
    if (isfinite(v)) fprintf(f, ", \"%s\": %.6g", key, v);
    else fprintf(f, ", \"%s\": null", key);
}

static void account_record(FILE *f, const acc_start *s, int rc) {
    const double h = s->wall / 3600;
    fprintf(f, "{\"event\": \"account\", \"step\": %lld, \"exit\": %d, \"wall_s\": %.6g",
            (long long)s->step, rc, s->wall);
    for (int p = 0; p < ACC_PARTS; p++)
        fprintf(f, ", \"%s\": %.6g", account_part_key((acc_part)p), s->s[p]);
    fprintf(f, ", \"goodput\": %.6g, \"ranks\": %d, \"gpus\": %d, \"threads\": %d, "
               "\"gpu_hours\": %.6g, \"cpu_hours\": %.6g, \"core_hours\": %.6g",
            s->wall > 0 ? s->s[ACC_STEPS] / s->wall : 0, s->ranks, s->gpus, s->threads,
            s->gpus * h, s->ranks * h, s->ranks * s->threads * h);
    put_num(f, "gpu_energy_j", s->gpu_j);
    put_num(f, "cpu_energy_j", s->cpu_j);
    jsonl_end_record(f);
}

static void energy_words(char *buf, size_t n, const char *what, double j, int gpu) {
    if (isfinite(j)) snprintf(buf, n, "%s %.4g kWh", what, j / 3.6e6);
    else snprintf(buf, n, "%s not measured (%s)", what, account_energy_why(gpu));
}

void metrics_log_account(const tsr_run *run, int rc, const acc_start *s,
                         metrics_run_line_fn run_line) {
    if (run->dist->rank != 0 || !run->out->metrics) return;
    metrics_prom_end(run, rc);
    account_record(run->out->metrics, s, rc);
    char ge[256], ce[256], path[1200], line[400];
    energy_words(ge, sizeof ge, "GPU energy", s->gpu_j, 1);
    energy_words(ce, sizeof ce, "CPU package energy", s->cpu_j, 0);
    printf("cost: this start %.1f s x %d rank%s: %.4g GPU-h, %.4g CPU-h, goodput %.1f%%; %s; %s\n",
           s->wall, s->ranks, s->ranks > 1 ? "s" : "", s->gpus * s->wall / 3600,
           s->ranks * s->wall / 3600, s->wall > 0 ? 100 * s->s[ACC_STEPS] / s->wall : 0, ge, ce);
    /* the run so far, every start of run_dir (its own file: an error is not expected) */
    snprintf(path, sizeof path, "%s/metrics.jsonl", run->cfg->run_dir);
    if (run_line && run_line(path, *run->step, line, sizeof line) == 1) {
        printf("cost: run so far: %s\n", line);
        fflush(stdout);
        if (account_comment_file(line) == 1)
            printf("cost: the line for the job's comment in TSR_COMMENT_FILE (the hook sets it)\n");
    }
    fflush(stdout);
}

/* an evaluation's figure as metrics.jsonl writes it: null when not finite, unless plain (lm's
 * record, "%.9g" whatever the value, as it always was) */
static void eval_number(char *buf, size_t n, double v, int plain) {
    if (plain) snprintf(buf, n, "%.9g", v);
    else json_number(buf, n, v);
}

/* the evaluation's line, record and TensorBoard step: the objective's two figures (validation
 * loss and perplexity; dpo: the pairs' DPO loss and accuracy, docs/dpo.md; grpo: held-out pass@1
 * and reward, docs/rl.md; run/objective.h) */
void metrics_log_eval(const tsr_run *run, double val_loss, double seconds) {
    if (run->dist->rank != 0) return;
    const tsr_objective *o = run->objective;
    if (o->eval_failed && o->eval_failed(run->objective_state)) return; /* (grpo's reward
                                                                            * failed: reported) */
    objective_eval_figure f[2];
    o->eval_figures(run->objective_state, val_loss, f);
    printf("eval step %lld | %s %.*f | %s %.*f | %.2f s\n", (long long)*run->step, f[0].label,
           f[0].digits, f[0].v, f[1].label, f[1].digits, f[1].v, seconds);
    fflush(stdout);
    if (run->out->metrics) {
        char v0[32], v1[32];
        eval_number(v0, sizeof v0, f[0].v, o->eval_json_plain);
        eval_number(v1, sizeof v1, f[1].v, o->eval_json_plain);
        fprintf(run->out->metrics, "{\"step\": %lld, \"%s\": %s, \"%s\": %s", (long long)*run->step,
                f[0].key, v0, f[1].key, v1);
        jsonl_end_record(run->out->metrics);
    }
    char tag[64];
    for (int k = 0; k < 2; k++) {
        snprintf(tag, sizeof tag, "eval/%s", f[k].key);
        tboard_scalar(run->out->tb, tag, f[k].v);
    }
    tboard_write_step(run->out->tb, *run->step);
}

void metrics_finish(const tsr_run *run) {
    if (run->dist->rank != 0) return;
    const int64_t n = run->out->steps_run;
    const long long steps = (long long)*run->step, tokens = (long long)*run->tokens_seen;
    double avg = n > 1 ? run->out->time_sum / (double)(n - 1) : 0;
    if (n > 1)
        /* a count, not a step range: a guard rollback makes this process run steps again */
        printf("done: %lld steps, %lld tokens, %.1f ms/step average (over the %lld steps this "
               "process ran after its first)\n", steps, tokens, 1e3 * avg, (long long)(n - 1));
    else
        printf("done: %lld steps, %lld tokens (%lld run by this process: no average)\n", steps,
               tokens, (long long)n);
    fflush(stdout);
    /* (the early-return paths close it in trainer_free; every record is flushed already) */
    tboard_close(run->out->tb);
    run->out->tb = NULL;
}

void metrics_log_sample(const tsr_run *run, const int32_t *ids, int n) {
    printf("sample (%d tokens, temperature %g, top-k %lld):\n", n, run->cfg->sample.temperature,
           (long long)run->cfg->sample.top_k);
    const tsr_tokenizer *tok = run->tok; /* loaded at start (trainer_init) */
    if (tok) {
        uint32_t *u = tsr_malloc((size_t)n * sizeof *u);
        for (int i = 0; i < n; i++) u[i] = (uint32_t)ids[i];
        size_t len = tokenizer_decode(tok, u, (size_t)n, NULL, 0);
        uint8_t *text = len == (size_t)-1 ? NULL : tsr_malloc(len + 1);
        if (text) tokenizer_decode(tok, u, (size_t)n, text, len);
        if (text) printf("%.*s\n", (int)len, (const char *)text);
        free(text);
        free(u);
    } else {
        for (int i = 0; i < n; i++) printf("%d%c", ids[i], i + 1 == n ? '\n' : ' ');
    }
    fflush(stdout);
}
