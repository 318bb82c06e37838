/* trainer_run.c — the run around the steps (trainer.h trainer_run): after each step its log line,
 * the spike guard's response (a rollback, or the stop and its report), the evaluations, the
 * periodic checkpoint and the straggler watchdog; stop requests at step boundaries; at the end the
 * last checkpoint, the exchange reports, the summary and the sample; the run's accounting around
 * it all. */
#include "trainer.h"

#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "train/checkpointing.h"
#include "train/train_plan.h"
#include "run/objective.h"
#include "train/pipeline.h"
#include "train/sdc.h"
#include "telemetry/account.h"
#include "telemetry/metrics.h"
#include "train/train_gpu.h"
#include "train/trainer_int.h"
#include "watchdog/watchdog.h"

/* Muon's exchange over the run so far: the slot's, or device = cuda the library's (optim.h) */
static optim_traffic exchange_traffic(const tsr_trainer *t) {
    const gpu_train_ctx *g = t->be.gpu;
    if (!g) return optim_traffic_of(&t->part.optim);
    return (optim_traffic){g->muon_G, g->muon_sent, g->muon_step_bytes};
}

/* rank 0: run_dir/guard-report.json, what the guard saw and did, when it stops the run */
static void guard_report(const tsr_trainer *t, const tsr_step_stats *st, const char *reason) {
    if (t->dist.rank != 0) return;
    char path[1200];
    snprintf(path, sizeof path, "%s/guard-report.json", t->cfg.run_dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        tsr_warn("%s: cannot write the guard report", path);
        return;
    }
    const tsr_guard *g = &t->guard;
    fprintf(f, "{\n  \"stopped_at_step\": %lld,\n  \"data_batch\": %lld,\n  \"reason\": \"%s\",\n"
               "  \"rollbacks\": %lld,\n  \"max_rollbacks\": %lld,\n  \"updates_skipped\": %lld,\n"
               "  \"skipped_batches\": [",
            (long long)st->step, (long long)st->data_batch, reason, (long long)g->rollbacks,
            (long long)g->max_rollbacks, (long long)g->updates_skipped);
    for (int i = 0; i < g->n_skips; i++)
        fprintf(f, "%s[%lld, %lld]", i ? ", " : "", (long long)g->skips[i][0], (long long)g->skips[i][1]);
    fprintf(f, "],\n  \"global_batch\": %lld\n}\n", (long long)t->cfg.global_batch);
    fclose(f);
}

/* After a step the guard did not pass: log it; roll back, or stop. Returns 0 to go on, 1 after a
 * rollback (the run continues from the restored step), else an exit code. */
static int guard_respond(tsr_trainer *t, const tsr_step_stats *st) {
    tsr_guard *g = &t->guard;
    char reason[1100];
    if (st->verdict == GUARD_WARN || st->verdict == GUARD_SKIP) {
        metrics_log_guard(&t->run, st->verdict == GUARD_WARN ? "warn" : "skip", st);
        if (st->rebaselined)
            metrics_log_guard_note(&t->run, "rebaseline", st, "guard.patience consecutive outliers: taken "
                                   "as a lasting change of level, the window starts over");
        return 0;
    }
    snprintf(reason, sizeof reason, "%s", st->why);
    if (st->verdict == GUARD_ROLLBACK) {
        metrics_log_guard(&t->run, "rollback", st);
        char path[1200];
        int64_t from = t->step, d_next = t->step + t->data.data_offset, d_c = 0;
        int nonfinite = g->nonfinite_streak > 0;
        int rc = g->n_skips >= TSR_GUARD_MAX_SKIPS ? -1 /* no room to record the skip */
                 : checkpointing_rollback(t, g->streak_first - 1, path, sizeof path, &d_c);
        if (rc == 0) {
            guard_record_rollback(g, d_c, d_next);
            t->data.data_offset = d_next - t->step;
            dataloader_reset_seen(&t->data, d_next, (const int64_t(*)[2])g->skips, g->n_skips);
            t->data.stage_started = 0; /* the data position jumped: announce new windows */
            metrics_log_rollback(&t->run, &t->guard, from, path, d_c, d_next);
            /* commit the restored step with the skip recorded (this also points `latest` at
             * it), then set the abandoned trajectory's checkpoints aside */
            if ((rc = checkpointing_save(t, 0))) return rc;
            checkpointing_set_aside_after(t);
            return 1;
        }
        if (rc == -1) {
            snprintf(reason, sizeof reason, "%s; %d skipped data windows are recorded, no room for "
                     "another", st->why, TSR_GUARD_MAX_SKIPS);
        } else if (rc != 1) {
            return rc;
        } else if (!nonfinite) {
            /* no checkpoint from before the spike: keep going on the new level rather than stop
             * a run for a finite spike (loudly: the data window stays in the run) */
            guard_restart_window(g);
            metrics_log_guard_note(&t->run, "rebaseline", st, "no checkpoint before the spike to roll "
                                   "back to (save more often: save_interval, keep_last); the "
                                   "window starts over");
            return 0;
        } else {
            snprintf(reason, sizeof reason, "%s; no checkpoint at or before step %lld (before the "
                     "first non-finite step) to roll back to: save more often (save_interval) and "
                     "keep more (keep_last)", st->why, (long long)(g->streak_first - 1));
        }
    }
    if (t->dist.rank == 0) {
        tsr_error("spike guard: stopping at step %lld: %s (report: %s/guard-report.json)",
                  (long long)st->step, reason, t->cfg.run_dir);
        if (t->out.metrics) {
            fprintf(t->out.metrics, "{\"event\": \"guard\", \"action\": \"stop\", \"step\": %lld, "
                                "\"why\": \"%s\"", (long long)st->step, reason);
            jsonl_end_record(t->out.metrics);
        }
    }
    guard_report(t, st, reason);
    return TSR_EXIT_DATA;
}

/* The save in flight committed, then a synchronous checkpoint of this step unless that was it (or
 * a periodic save of this step committed it already): what a stop (exit 85, 86) leaves. */
static int final_checkpoint(tsr_trainer *t) {
    int rc;
    watchdog_phase(WD_CHECKPOINT, t->step);
    if ((rc = checkpointing_drain(t))) return rc;
    if (t->ck.committed != t->step && (rc = checkpointing_save(t, 0))) return rc;
    return sdc_final(t); /* what was written, checked once more at rest (train/sdc.h) */
}

/* At a step boundary after a stop request (SIGUSR1/SIGTERM on any rank): the checkpoint of this
 * step (final_checkpoint). Returns TSR_EXIT_REQUEUE or an exit code. */
static int stop_on_request(tsr_trainer *t) {
    int rc;
    if ((rc = final_checkpoint(t))) return rc;
    if (t->dist.rank == 0)
        printf("stop requested (SIGUSR1/SIGTERM): checkpoint of step %lld committed; "
               "exit %d = requeue me\n", (long long)t->step, TSR_EXIT_REQUEUE);
    return TSR_EXIT_REQUEUE;
}

/* A stop request seen while the ranks waited for a window's data (dataloader_stage_step): as at a
 * step boundary, but before this start's first step nothing is saved: the state is still the one
 * it started from (the checkpoint it resumed, or the seed's or --init-from's weights at step 0),
 * and a rerun starts there again. Returns TSR_EXIT_REQUEUE or an exit code. */
static int stop_in_wait(tsr_trainer *t) {
    if (t->out.steps_run > 0) return stop_on_request(t);
    char from[64] = "from the beginning";
    if (t->step > 0) snprintf(from, sizeof from, "from the checkpoint of step %lld", (long long)t->step);
    if (t->dist.rank == 0)
        printf("stop requested (SIGUSR1/SIGTERM) while waiting for the data of step %lld, the first "
               "of this start: no step ran, no checkpoint written (a rerun starts %s, as this one "
               "did); exit %d = requeue me\n", (long long)t->step + 1, from, TSR_EXIT_REQUEUE);
    return TSR_EXIT_REQUEUE;
}

/* The evaluations due after this step: validation loss (grpo: pass@1), the ICL tasks. Returns
 * 0, or TSR_EXIT_DATA when grpo's reward failed (reported). */
static int evaluate(tsr_trainer *t) {
    const double t0 = tsr_now();
    if (t->data.val) {
        watchdog_phase(WD_EVAL, t->step);
        double loss = trainer_eval(t);
        metrics_log_eval(&t->run, loss, tsr_now() - t0);
        if (t->objective->eval_failed && t->objective->eval_failed(t->run.objective_state))
            return TSR_EXIT_DATA;
    }
    if (t->icl) {
        watchdog_phase(WD_EVAL, t->step);
        run_eval_scope(&t->run, 1);
        trainer_ensure_acts(t);
        t->uses.icl->run(t->icl, &t->model, &t->mesh.data, trainer_acts_B(t), t->step,
                         t->out.metrics, t->out.tb);
        run_eval_scope(&t->run, 0);
    }
    account_add(ACC_EVAL, tsr_now() - t0);
    return 0;
}

/* WHAT's bytes sent between ranks in this process's steps (this rank's count), all ranks together,
 * printed by rank 0: "WHAT: N bytes sent between ranks in S steps (all W ranks, DETAIL)".
 * Collective. */
static void sent_report(const tsr_trainer *t, const char *what, uint64_t bytes,
                        const char *detail) {
    int64_t sent = (int64_t)bytes;
    dist_allreduce_sum_i64(&sent, 1);
    if (t->dist.rank == 0)
        printf("%s: %lld bytes sent between ranks in %lld steps (all %d ranks, %s)\n", what,
               (long long)sent, (long long)t->out.steps_run, t->dist.world, detail);
}

/* parallel.expert: the bytes the experts' exchange sent between ranks in this process's steps,
 * all ranks together (bench/comm_volume.sh compares them with the loopback's count). Collective. */
static void ep_report(tsr_trainer *t) {
    if (t->part.ep_on)
        sent_report(t, "expert exchange", t->part.ep.sent_bytes, "forward and backward");
}

/* parallel.context: the bytes the ring (the CPU's, or device = cuda the library's) sent between
 * ranks in this process's steps and evaluations, and the blocks it skipped outside the windows'
 * bands, all ranks together (bench/comm_volume.sh compares them with the loopback's count
 * and docs/parallelism.md's formula). Collective. */
static void ring_report(tsr_trainer *t) {
    const tsr_ring *g = t->be.gpu ? t->be.gpu->ring : &t->ring;
    if (!mesh_group(&t->mesh, TSR_MESH_CONTEXT)->cpu || !g) return;
    int64_t n[2] = {(int64_t)g->sent, (int64_t)g->skipped};
    dist_allreduce_sum_i64(n, 2);
    if (t->dist.rank == 0)
        printf("context ring: %lld bytes sent between ranks in %lld steps (all %d ranks, forward "
               "and backward), %lld attention blocks outside the sliding windows skipped\n",
               (long long)n[0], (long long)t->out.steps_run, t->dist.world, (long long)n[1]);
}

/* parallel.tensor: the bytes the tensor groups' collectives sent in this process's steps, all
 * ranks together (the decoder's and the partial gradients' sums, model/model_tp.h; the plan's
 * formula, tp_step_bytes, gives one rank's per step: tests/train/test_tensor.sh compares them).
 * Collective. */
static void tp_report(tsr_trainer *t) {
    if (t->part.tp_on)
        sent_report(t, "tensor parallelism", t->part.tp.sent,
                    "forward, backward and the gradients' sums");
}

/* sample.tokens after the run: rank 0 samples on the host's fp32 ops (device = cuda: from the
 * device's weights) and logs it; under zero3 / hsdp every rank samples alongside, on its shard
 * (each forward gathers the units over the group: the same forwards on every rank), under
 * context parallelism too (each forward goes round its context group's ring), and under tensor
 * parallelism (each forward runs over its tensor group's split). The prompt is
 * the end-of-text token, by convention the vocabulary's last id (GPT-2's 50256, the synthetic
 * corpus' V-1, a trained tokenizer's last special). Collective. */
static void end_of_run_sample(tsr_trainer *t) {
    if (t->cfg.sample.tokens <= 0) return;
    trainer_ensure_acts(t); /* collective: a resumed run that was already done ran no step */
    checkpointing_before_pull(t);
    if (t->be.gpu) gpu_train_host_model(t->be.gpu, 1);
    else trainer_host_weights(t, 1);
    if (t->dist.rank == 0 || t->part.fsdp_on || t->model.ring || t->model.tp) {
        int32_t eot = t->model.V - 1, n = (int32_t)t->cfg.sample.tokens;
        int32_t *ids = tsr_malloc((size_t)n * sizeof *ids);
        trainer_sample(t, &eot, 1, n, (uint64_t)t->cfg.seed, ids);
        if (t->dist.rank == 0) metrics_log_sample(&t->run, ids, n);
        free(ids);
    }
    if (t->be.gpu) gpu_train_host_model(t->be.gpu, 0);
    else trainer_host_weights(t, 0);
}

/* After a step: its log line, the guard's response, evaluation, periodic checkpoint (in the
 * background with save_async, but the last one), the straggler watchdog. Returns 0 to go on, 1
 * after a rollback, else an exit code (TSR_EXIT_SLOW after a checkpoint). */
static int after_step(tsr_trainer *t, const tsr_step_stats *st) {
    int rc;
    account_step(&t->run, st->step_time);
    stop_step_done(st->step_time);
    if (t->dist.rank == 0 && t->out.tb) /* the TensorBoard step's memory/planned_bytes */
        t->out.planned_bytes = trainer_plan_rank_bytes(t, t->part.lora_on);
    metrics_log_step(&t->run, st);
    if (st->phase_switch)
        metrics_log_guard_note(&t->run, "restart-window", st, "a data-mix curriculum phase starts "
                               "with this batch: the spike window starts over");
    if (st->verdict != GUARD_OK) {
        if (st->verdict == GUARD_ROLLBACK) watchdog_phase(WD_CHECKPOINT, t->step);
        if ((rc = guard_respond(t, st))) return rc;
    }
    int last = t->step == t->total_steps;
    if (((t->eval_every > 0 && t->step % t->eval_every == 0) || last) && (rc = evaluate(t)))
        return rc;
    /* no periodic save inside an outlier streak: it would be useless to a rollback and its
     * retention could delete the last checkpoint from before the spike */
    if ((t->save_every > 0 && t->step % t->save_every == 0 && t->guard.streak == 0) ||
        (last && t->cfg.save_final)) {
        watchdog_phase(WD_CHECKPOINT, t->step);
        if ((rc = checkpointing_save(t, !last))) return rc;
    }
    const watchdog_step ws = {st->step, st->compute_time, st->step_time, st->tokens,
                              t->out.flops_per_token, t->out.peak_flops};
    if (watchdog_after_step(&ws, t->out.metrics) && !last) /* a straggler or low MFU: exit 86 */
        return (rc = final_checkpoint(t)) ? rc : TSR_EXIT_SLOW;
    return 0;
}

/* A run that stops with rc: the save in flight committed first (it is a good checkpoint; a
 * failed save left none in flight). Returns rc. */
static int stop_run(tsr_trainer *t, int rc) {
    watchdog_phase(WD_CHECKPOINT, t->step);
    checkpointing_drain(t); /* (its failure is reported; the run's own status stands) */
    if (rc == TSR_EXIT_SDC) sdc_stopped(t); /* the culprit file; suspect checkpoints set aside */
    watchdog_stop();
    return rc;
}

static int run_steps(tsr_trainer *t) {
    tsr_step_stats st = {0};
    watchdog_start(&t->dist, &t->cfg, t->step);
    int rc0 = sdc_start(t); /* the state loaded or initialised, compared once (train/sdc.h) */
    if (rc0) return stop_run(t, rc0);
    while (t->step < t->total_steps) {
        int rc, stop;
        if (t->ck.pending) watchdog_phase(WD_CHECKPOINT, t->step); /* a commit may come */
        /* at a step boundary, all ranks together: a stop request, a background save to commit */
        if ((rc = checkpointing_boundary(t, &stop))) return stop_run(t, rc);
        if (stop) /* the hang watchdog watches its save */
            return stop_run(t, stop_on_request(t));
        rc = dataloader_stage_step(&t->data, t->step, t->out.metrics);
        account_add(ACC_DATA, t->data.step_wait); /* the accounting's data part */
        if (rc) /* s3: an object failed; a stop in the data's wait */
            return stop_run(t, rc == TSR_EXIT_REQUEUE ? stop_in_wait(t) : rc);
        trainer_step(t, &st);
        if (st.exit_code) return stop_run(t, st.exit_code); /* (the previous checkpoint stands) */
        rc = after_step(t, &st);
        if (rc == 1) continue; /* rolled back: the loop goes on from the restored step */
        if (rc) return stop_run(t, rc);
        trainer_fault_signal(t);
    }
    int rc = checkpointing_drain(t); /* (save_final = false: a periodic save may be in flight) */
    if (!rc) rc = sdc_final(t); /* the last save, checked once more at rest */
    if (rc) return stop_run(t, rc);
    watchdog_stop();
    dataloader_stage_end(&t->data, t->step, t->out.metrics);
    ep_report(t);
    optim_report(exchange_traffic(t), t->out.steps_run, t->dist.world);
    ring_report(t);
    tp_report(t);
    pipeline_report(t);
    metrics_finish(&t->run);
    end_of_run_sample(t);
    return TSR_EXIT_OK;
}

/* The steps, between the accounting of this start (telemetry/account.h): its record is written
 * whichever way the steps end (finished, 85, 86, the guard's stop) */
int trainer_run(tsr_trainer *t) {
    account_run_begin(&t->run);
    int rc = run_steps(t);
    sdc_summary(t);
    acc_start s;
    account_close(&t->run, &s);
    metrics_log_account(&t->run, rc, &s, t->uses.run_line);
    return rc;
}
