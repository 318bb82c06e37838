/* checkpointing_save.c — the trainer's saves: when a checkpoint is written, from what (this
 * rank's slices: checkpointing_tensors.h), the asynchronous writer's life (the snapshot, the
 * thread that writes it while the steps go on, the wait before the state changes) and the commit
 * at a step boundary; the memory the plan counts for them; the room check at start.
 * (Resuming, --init-from and rollback: checkpointing_resume.c; stop signals: watchdog/stop.c.)
 * The NO_MPI build does the same as one rank (checkpoint/ on serial HDF5): its files load in the
 * MPI build and back. */
#include "train/checkpointing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "common.h"
#include "gpu/gpu_train.h"
#include "train/checkpointing_tensors.h"
#include "train/data_sources.h"
#include "train/sdc.h"
#include "telemetry/metrics.h"

#ifndef TSR_VERSION
#define TSR_VERSION "unknown"
#endif

static void fill_meta(const tsr_trainer *t, ckpt_meta *meta);

/* the bytes of one checkpoint of this run now (ckpt_file_bytes): the tensors checkpointing_save
 * writes, from their shapes (no buffer is touched), and its root attributes */
static uint64_t file_bytes(tsr_trainer *t) {
    ckpt_tensor ts[CKIO_MAX_TENSORS];
    char names[CKIO_MAX_TENSORS][64];
    int n = 0;
    if (t->part.lora_on) {
        n = ckio_lora_tensors(t, 1, ts, names);
    } else { /* ckio_base_tensors' tensors without their I/O buffers: each parameter, its moments */
        for (int set = 0; set < CKIO_SETS; set++)
            for (int i = 0; i < TSR_P_COUNT; i++)
                if (t->model.params_info[i].numel) {
                    ckio_param_tensor(&ts[n], names[n], &t->cfg.optim, set,
                                      &t->model.params_info[i]);
                    n++;
                }
    }
    ckpt_meta *meta = tsr_malloc(sizeof *meta);
    fill_meta(t, meta);
    const uint64_t b = ckpt_file_bytes(meta, ts, n);
    free(meta);
    return b;
}

void checkpointing_room_warn(tsr_trainer *t) {
    if (t->dist.rank != 0 || t->step >= t->total_steps) return;
    int64_t first = t->cfg.save_final ? t->total_steps : -1; /* the first save this run makes */
    if (t->save_every > 0) {
        const int64_t next = (t->step / t->save_every + 1) * t->save_every;
        if (next <= t->total_steps && (first < 0 || next < first)) first = next;
    }
    char why[1200];
    if (first < 0 || ckpt_room(t->cfg.run_dir, file_bytes(t), why, sizeof why) == 0) return;
    tsr_warn("%s: the run's first checkpoint (step %lld) would be refused now (exit 2), unless "
             "space is freed or run_dir is moved to a larger filesystem", why, (long long)first);
}

static void fill_meta(const tsr_trainer *t, ckpt_meta *meta) {
    memset(meta, 0, sizeof *meta);
    meta->step = t->step;
    meta->tokens = t->tokens_seen;
    meta->data_cursor = (t->step + t->data.data_offset) * t->cfg.global_batch;
    meta->optim_step = t->optim_step;
    meta->rollbacks = t->guard.rollbacks;
    meta->updates_skipped = t->guard.updates_skipped;
    guard_format_skips(&t->guard, meta->skipped_batches, sizeof meta->skipped_batches);
    dataloader_mix_tokens(&t->data, meta->mix_tokens, sizeof meta->mix_tokens);
    dataloader_format_plan(&t->data, meta->mix_plan, sizeof meta->mix_plan);
    guard_format_state(&t->guard, meta->guard_state, sizeof meta->guard_state);
    data_sources_format(t, meta->data_sources, sizeof meta->data_sources);
    meta->micro_batch = t->auto_micro ? t->micro : 0;
    meta->fingerprints_agreed = sdc_agreed(t); /* (sdc_before_save compared this state) */
    meta->world_size = t->dist.world;
    meta->global_batch = t->cfg.global_batch;
    meta->seed = t->cfg.seed;
    FILE *f = fmemopen(meta->config, sizeof meta->config - 1, "w");
    if (f) {
        config_print(f, &t->cfg);
        fclose(f);
    }
    snprintf(meta->program_version, sizeof meta->program_version, "%s", TSR_VERSION);
}

/* This rank's checkpoint tensors with their data ready to be written: the device's state pulled
 * (device = cuda), zero3 / hsdp shards moved into their flat parts (the first group writes:
 * fsdp.h), the experts' parts; LoRA writes its adapters only. */
static int save_tensors(tsr_trainer *t, ckpt_tensor *ts, char (*names)[64]) {
    int n = ckio_tensors(t, 1, ts, names);
    if (t->be.gpu) gpu_train_pull(t->be.gpu); /* device = cuda: the host mirror is written */
    if (t->part.fsdp_on && t->part.fsdp.gindex == 0 && !t->part.lora_on) {
        fsdp_shard_to_part(&t->part.fsdp, t->part.fsdp.params, t->part.ckio[CKIO_MODEL]);
        fsdp_shard_to_part(&t->part.fsdp, t->part.m, t->part.ckio[CKIO_M]);
        fsdp_shard_to_part(&t->part.fsdp, t->part.v, t->part.ckio[CKIO_V]);
    }
    for (int set = 0; ckio_ep_io(t) && set < CKIO_SETS; set++)
        ep_to_part(&t->part.ep, ckio_ep_store(t, set), t->part.ep_io[set]);
    /* (into the global layout; LoRA's adapters are whole on every rank, its base not saved) */
    for (int set = 0; trainer_split(t) && !t->part.lora_on && set < CKIO_SETS; set++)
        tp_to_global(&t->part.tpio, &t->model, ckio_tp_held(t, set), t->part.tp_gpart[set]);
    return n;
}

/* A save of step `step` committed: the record (metrics.jsonl, the log line). */
static void note_saved(tsr_trainer *t, int64_t step, const char *path, const ckpt_stats *st,
                       int async) {
    t->ck.committed = step;
    metrics_log_save(&t->run, &t->ck, step, path, st, async);
}

static size_t snapshot_direct(const tsr_trainer *t);

/* zero3 / hsdp writers (snapshot_direct) with a snapshot: the parts of the sets pointed into it
 * (on), or back to none (off: not ckio_layout's, never freed) */
static void parts_in_snapshot(tsr_trainer *t, int on) {
    const size_t d = t->ck.snap ? snapshot_direct(t) : 0;
    for (int set = 0; d && set < CKIO_SETS; set++) t->part.ckio[set] = on ? t->ck.snap + set * d : NULL;
}

/* A synchronous save of the current step. With save_async's snapshot (no save in flight: the
 * caller committed it) zero3 / hsdp parts are moved into it, not into parts of their own: the
 * final save takes no second snapshot's memory. */
static int save_now(tsr_trainer *t) {
    ckpt_tensor ts[CKIO_MAX_TENSORS];
    char names[CKIO_MAX_TENSORS][64];
    parts_in_snapshot(t, 1);
    int n = save_tensors(t, ts, names);
    ckpt_meta *meta = tsr_malloc(sizeof *meta);
    fill_meta(t, meta);
    char path[1200];
    ckpt_stats st = {0};
    int rc = ckpt_save(t->cfg.run_dir, meta, ts, n, t->cfg.keep_last, path, sizeof path, &st);
    free(meta);
    parts_in_snapshot(t, 0);
    ckio_release(t);
    if (!rc) note_saved(t, t->step, path, &st, 0);
    return rc;
}

/* The snapshot buffer holds at least n floats (zeroed when it grows, as ckio_layout's parts are). */
static void snap_reserve(tsr_trainer *t, size_t n) {
    if (n <= t->ck.snap_cap) return;
    free(t->ck.snap);
    t->ck.snap = tsr_calloc(n, sizeof(float));
    t->ck.snap_cap = n;
}

/* zero3 / hsdp, the first group's ranks (the writers), not LoRA: the floats of this rank's part
 * of each set, which fsdp_shard_to_part then writes straight into the snapshot (no part buffers,
 * no second copy); 0 otherwise. */
static size_t snapshot_direct(const tsr_trainer *t) {
    const tsr_fsdp *f = &t->part.fsdp;
    /* (tensor parallelism: the snapshot holds the global layout's part, tp_layout's) */
    if (!t->part.fsdp_on || t->part.lora_on || f->gindex != 0 || trainer_split(t)) return 0;
    return f->part_counts[f->grank];
}

static size_t snapshot_floats(const tsr_trainer *t);

/* Waits for a background save's writer to have copied this rank's slices into the snapshot */
static void wait_copied(tsr_trainer *t) {
    if (!t->ck.pending || t->ck.copied) return;
    t->ck.blocking += ckpt_save_wait_copied(t->ck.pending);
    t->ck.copied = 1;
    ckio_release(t); /* the experts' parts, copied */
}

/* Starts a save of the current step in the background: the device's state pulled, zero3 / hsdp
 * parts moved straight into the snapshot, the file created (the collective part); a thread of
 * each rank copies the rest of its slices into the snapshot and writes them while training goes
 * on (checkpointing_before_update waits for the copy). */
static int save_in_background(tsr_trainer *t) {
    const double t0 = tsr_now();
    ckpt_tensor ts[CKIO_MAX_TENSORS];
    char names[CKIO_MAX_TENSORS][64];
    snap_reserve(t, snapshot_floats(t)); /* (at start already: trainer_init) */
    parts_in_snapshot(t, 1);
    int n = save_tensors(t, ts, names);
    parts_in_snapshot(t, 0);
    t->ck.snap_s = tsr_now() - t0;
    ckpt_meta *meta = tsr_malloc(sizeof *meta);
    fill_meta(t, meta);
    int rc = ckpt_save_start(t->cfg.run_dir, meta, ts, n, t->cfg.keep_last, 1, t->ck.snap,
                             t->ck.snap_cap, &t->ck.pending);
    free(meta);
    if (rc) ckio_release(t);
    t->ck.blocking = tsr_now() - t0;
    if (!rc && t->ck.copy_in_step) wait_copied(t); /* save_async_copy: the copy in the step */
    return rc;
}

/* device = cuda: the update runs on the device and the writer copies from the host mirror, which
 * changes only at the next pull (checkpointing_before_pull): nothing to wait for. The wait there
 * was most of a background save's blocking time on the H200 (1.0 s of gpt2-124m's, of which the
 * snapshot's device-to-host copy 0.03 s; 2026-11-27). */
void checkpointing_before_update(tsr_trainer *t) {
    if (!t->be.gpu) wait_copied(t);
}

void checkpointing_before_pull(tsr_trainer *t) { wait_copied(t); }

/* Commits the save in flight, after waiting for this rank's writer. Collective. */
static int commit_pending(tsr_trainer *t) {
    ckpt_pending *p = t->ck.pending;
    const int64_t step = ckpt_save_step(p);
    const double t0 = tsr_now();
    char path[1200];
    ckpt_stats st = {0};
    t->ck.pending = NULL;
    int rc = ckpt_save_finish(p, path, sizeof path, &st);
    if (!t->ck.copied) ckio_release(t); /* (the writer copied them: it has finished) */
    t->ck.copied = 0;
    if (rc) {
        if (t->dist.rank == 0)
            tsr_error("the background save of step %lld failed (above): the run stops at step "
                      "%lld; %s/latest still names the previous checkpoint", (long long)step,
                      (long long)t->step, t->cfg.run_dir);
        return rc;
    }
    st.blocking = t->ck.blocking + (tsr_now() - t0); /* pull, start, wait for the copy, commit */
    note_saved(t, step, path, &st, 1);
    return 0;
}

int checkpointing_drain(tsr_trainer *t) { return t->ck.pending ? commit_pending(t) : 0; }

int checkpointing_boundary(tsr_trainer *t, int *stop) {
    int64_t v[2] = {stop_signalled(), t->ck.pending && !ckpt_save_written(t->ck.pending)};
    dist_allreduce_sum_i64(v, 2); /* every rank learns of a signal and of a writer still busy */
    *stop = v[0] > 0;
    if (*stop) stop_proceed(); /* the ranks all reached the boundary (no grace) */
    return t->ck.pending && v[1] == 0 ? commit_pending(t) : 0;
}

int checkpointing_save(tsr_trainer *t, int background) {
    if (t->ck.pending) { /* one save in flight: this one waits for the last to be committed */
        const int64_t prev = ckpt_save_step(t->ck.pending);
        int busy = !ckpt_save_written(t->ck.pending);
        const double t0 = tsr_now();
        dist_allreduce_max_int(&busy, 1);
        int rc = commit_pending(t);
        if (busy && t->dist.rank == 0)
            printf("checkpoint save step %lld: the background save of step %lld was still being "
                   "written; waited %.3f s for it and its commit (one save in flight at a time)\n",
                   (long long)t->step, (long long)prev, tsr_now() - t0);
        if (rc) return rc;
    }
    int rc = sdc_before_save(t); /* every save compares the state it writes (train/sdc.h) */
    if (rc) return rc;
    return background && t->ck.async ? save_in_background(t) : save_now(t);
}

/* The snapshot's floats beyond the slices: room to place each tensor's slice where it goes to
 * the disk straight from the snapshot (ckpt.h CKPT_STAGE_PAD_FLOATS) */
#define SNAP_PAD_FLOATS ((size_t)CKIO_MAX_TENSORS * CKPT_STAGE_PAD_FLOATS)

/* The floats of this rank's snapshot: its slices of every tensor (as ckio_tensors lays them out,
 * without building them), and SNAP_PAD_FLOATS */
static size_t snapshot_floats(const tsr_trainer *t) {
    size_t part = trainer_split(t)  ? tp_io_part(&t->part.tpio)
                  : t->part.fsdp_on ? snapshot_direct(t)
                                    : t->part.part_counts[t->dist.rank];
    size_t n = CKIO_SETS * (part + (ckio_ep_writer(t) ? ep_part_floats(&t->part.ep) : 0));
    if (t->part.lora_on) n = t->dist.rank == 0 ? CKIO_SETS * t->part.lora.n : 0;
    return n ? n + SNAP_PAD_FLOATS : 0; /* (nothing to write: none) */
}

void checkpointing_snapshot_alloc(tsr_trainer *t) {
    if (!t->ck.async) return;
    snap_reserve(t, snapshot_floats(t));
    /* written once now: its pages are committed at start (where the memory check was made), not
     * by the first save's copy, on which a fresh page costs a fault (slow in a VM) */
    if (t->ck.snap) memset(t->ck.snap, 0, t->ck.snap_cap * sizeof(float));
}

/* The most floats of n a rank's part holds when n is cut over G ranks (parts cut at 16 floats) */
static uint64_t part_bound(uint64_t n, int G) { return n / (uint64_t)(G > 0 ? G : 1) + 16; }

uint64_t checkpointing_snapshot_bytes(const tsr_trainer *t) {
    const tsr_model *m = &t->model;
    if (!t->cfg.save_async) return 0;
    const uint64_t pad = SNAP_PAD_FLOATS * sizeof(float);
    if (t->part.lora_on) return CKIO_SETS * (uint64_t)t->part.lora.n * sizeof(float) + pad;
    uint64_t dense = 0, experts = 0;
    for (int i = 0; i < TSR_P_COUNT; i++)
        *(m->params_info[i].ep ? &experts : &dense) += m->params_info[i].numel;
    if (trainer_split(t)) /* (each rank's part of the whole model's layout) */
        dense = t->model.global->n_params, experts = 0;
    uint64_t mine = part_bound(dense, t->part.fsdp_on ? t->part.fsdp_group : t->dist.world);
    if (m->EP > 1) mine += experts / (uint64_t)m->EP + 1;
    return CKIO_SETS * mine * sizeof(float) + pad;
}

uint64_t checkpointing_io_bytes(const tsr_trainer *t) {
    uint64_t b = ckpt_io_buffer_bytes();
    if (trainer_split(t)) { /* the global layout's part of each set, the exchange's two buffers
                          * (what a rank sends: its held part; receives: its global part) */
        const uint64_t gp = part_bound(t->model.global->n_params, t->dist.world);
        b += ((CKIO_SETS + 1) * gp + part_bound(t->model.n_params, t->part.flat_world)) *
             sizeof(float);
    }
    if (!t->part.fsdp_on) return b;
    const int G = t->part.fsdp_group; /* (the plan's: --plan builds no groups) */
    b += 2 * (uint64_t)fsdp_exchange_floats(t->model.n_params, G) * sizeof(float);
    if (!t->cfg.save_async && !t->part.lora_on) /* the parts a synchronous save moves shards into */
        b += CKIO_SETS * part_bound(t->model.n_params, G) * sizeof(float);
    return b;
}
