/* checkpointing_resume.c — the trainer's loads of a checkpoint: the start (resume from
 * --resume or run_dir's latest valid checkpoint; --init-from a checkpoint, a Hugging Face
 * directory or a PEFT adapter, LoRA's base and its checksum; the checks of the config against the
 * checkpoint's before anything is written) and the spike guard's rollback. Each rank reads its
 * slices (checkpointing_tensors.h), then the state is completed on every rank: DDP ranks
 * all-gather weights and moments, ZeRO-1 ranks weights only, ZeRO-3 / HSDP move the first group's
 * parts into their shards. (Saving: checkpointing_save.c; stop signals: watchdog/stop.c.) */
#include "train/checkpointing.h"

#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "model/ckpt_model.h"
#include "common.h"
#include "crc32c.h"
#include "gpu/gpu_train.h"
#include "config/config_table.h"
#include "train/checkpointing_tensors.h"
#include "train/data_sources.h"
#include "train/sdc.h"
#include "telemetry/metrics.h"
#include "optim/schedule.h"

/* --init-from names a PEFT adapter directory (LoRA: the adapters to start from) */
static int adapter_dir(const tsr_trainer *t, const char *init_arg) {
    const checkpointing_importer *imp = t->uses.importer;
    return init_arg && imp && imp->is_adapter && imp->is_adapter(init_arg);
}

/* --init-from names a directory of the importer's (a Hugging Face one or a PEFT adapter), not a
 * checkpoint */
static int imported(const tsr_trainer *t, const char *init_arg) {
    const checkpointing_importer *imp = t->uses.importer;
    return init_arg && imp && (imp->is_source(init_arg) || adapter_dir(t, init_arg));
}

/* The checkpoint read at start: checkpointing_resume runs before run_dir is opened (a refused start
 * writes nothing), so its record is kept for trainer_open_run_dir to log (metrics.jsonl, stdout). */
static void note_start_load(tsr_trainer *t, const char *what, const char *path, double seconds,
                            uint64_t bytes) {
    snprintf(t->out.start_load.what, sizeof t->out.start_load.what, "%s", what);
    snprintf(t->out.start_load.path, sizeof t->out.start_load.path, "%s", path);
    t->out.start_load.seconds = seconds;
    t->out.start_load.bytes = bytes;
}

/* After reading each rank's part of the base model: under parallel.expert the first EP group's
 * parts of the experts sent to their holders, then dense_gather (complete the replicated state;
 * ZeRO-3 / HSDP: move the first group's parts into its shards and copy those to the others). */
static void base_gather(tsr_trainer *t, int with_optim);
/* LoRA: rank 0 read the adapters (ckio_lora_tensors) */
static void gather_after_load(tsr_trainer *t, int with_optim) {
    if (!t->part.lora_on) {
        base_gather(t, with_optim);
        return;
    }
    tsr_lora *lo = &t->part.lora;
    float *store[CKIO_SETS] = {lo->w, lo->m, lo->v};
    const size_t chunk = (size_t)1 << 28; /* floats per broadcast: MPI's int count of bytes */
    for (int set = 0; set < (with_optim ? CKIO_SETS : 1); set++)
        for (size_t at = 0; at < lo->n; at += chunk)
            dist_bcast(store[set] + at, (lo->n - at < chunk ? lo->n - at : chunk) * sizeof(float),
                       0);
}

/* The flat buffer's parts read (ckio_layout) into the model's weights (and moments): all-gathered
 * (ddp, zero1), or moved into the shards and broadcast to the other groups (zero3, hsdp); then
 * the device's copy (device = cuda: the experts' store too). */
static void dense_gather(tsr_trainer *t, int with_optim) {
    for (int set = 0; trainer_split(t) && set < (with_optim ? CKIO_SETS : 1); set++)
        tp_from_global(&t->part.tpio, &t->model, t->part.tp_gpart[set], ckio_tp_held(t, set));
    if (t->part.fsdp_on) {
        tsr_fsdp *f = &t->part.fsdp;
        float *shard[CKIO_SETS] = {f->params, t->part.m, t->part.v};
        for (int set = 0; set < (with_optim ? CKIO_SETS : 1); set++) {
            if (f->gindex == 0) fsdp_part_to_shard(f, t->part.ckio[set], shard[set]);
            dist_group_bcast_f32(f->replicas, shard[set], f->shard_n, 0);
        }
        fsdp_params_changed(f);
        if (t->be.gpu) gpu_train_push(t->be.gpu, with_optim);
        return;
    }
    trainer_flat_allgather(t, t->model.params);
    if (with_optim && !t->part.zero1) {
        trainer_flat_allgather(t, t->part.m);
        trainer_flat_allgather(t, t->part.v);
    }
    if (t->be.gpu) gpu_train_push(t->be.gpu, with_optim);
}

static void base_gather(tsr_trainer *t, int with_optim) {
    for (int set = 0; t->part.ep_on && set < (with_optim ? CKIO_SETS : 1); set++) {
        if (ckio_ep_io(t)) ep_from_part(&t->part.ep, t->part.ep_io[set], ckio_ep_store(t, set));
        ep_bcast(&t->part.ep, ckio_ep_store(t, set));
    }
    dense_gather(t, with_optim);
}

static int check_batch(const tsr_trainer *t, const ckpt_meta *meta, const char *path) {
    if (meta->global_batch != t->cfg.global_batch) {
        tsr_error("%s: saved with global_batch = %lld, this run has global_batch = %lld: resuming "
                  "needs the same global batch (the rank count may change); set global_batch = "
                  "%lld, or start from its weights with --init-from",
                  path, (long long)meta->global_batch, (long long)t->cfg.global_batch,
                  (long long)meta->global_batch);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

/* The step, the data position and (resume) the guard's record. */
static int apply_meta(tsr_trainer *t, const ckpt_meta *meta, const char *path, int with_guard) {
    int64_t gb = t->cfg.global_batch;
    if (meta->data_cursor % gb != 0 || meta->data_cursor / gb < meta->step) {
        tsr_error("%s: data_cursor = %lld is not a whole number of global batches (%lld) at or "
                  "after step %lld", path, (long long)meta->data_cursor, (long long)gb,
                  (long long)meta->step);
        return TSR_EXIT_DATA;
    }
    if (with_guard && guard_parse_skips(&t->guard, meta->skipped_batches) != 0) {
        tsr_error("%s: root attribute skipped_batches = \"%.200s\": expected \"lo-hi,lo-hi,...\"",
                  path, meta->skipped_batches);
        return TSR_EXIT_DATA;
    }
    if (with_guard && guard_parse_state(&t->guard, meta->guard_state) != 0) {
        tsr_error("%s: root attribute guard_state = \"%.100s...\": expected \"streak first "
                  "nonfinite|loss,norm;...\"", path, meta->guard_state);
        return TSR_EXIT_DATA;
    }
    char plan[sizeof meta->mix_plan];
    dataloader_format_plan(&t->data, plan, sizeof plan);
    if (meta->mix_plan[0] && strcmp(plan, meta->mix_plan) != 0) {
        tsr_error("%s: the data mix plan (phase start in batches: samples per stream) was \"%s\", "
                  "this run's is \"%s\": resuming would re-read or skip data. Keep data.mix, "
                  "data.curriculum and global_batch; a changed max_duration moves phases given "
                  "in %%: give their `at` as a duration instead", path, meta->mix_plan, plan);
        return TSR_EXIT_USAGE;
    }
    t->step = meta->step;
    t->tokens_seen = meta->tokens;
    t->data.data_offset = meta->data_cursor / gb - meta->step;
    t->optim_step = meta->optim_step >= 0 ? meta->optim_step : meta->step;
    if (with_guard) {
        t->guard.rollbacks = meta->rollbacks;
        t->guard.updates_skipped = meta->updates_skipped;
    }
    /* micro_batch = auto: a resumed run starts where the last one settled instead of failing its
     * way down again (a divisor of this run's per-rank batch, which a new rank count may change) */
    if (with_guard && t->auto_micro && meta->micro_batch > 0 && trainer_acts_B(t) == 0) {
        t->micro = trainer_micro_at_most(t, meta->micro_batch);
        if (t->dist.rank == 0)
            printf("micro_batch auto: %d, kept from %s (it ran %lld)\n", t->micro, path,
                   (long long)meta->micro_batch);
    }
    dataloader_reset_seen(&t->data, t->step + t->data.data_offset,
                          (const int64_t(*)[2])t->guard.skips, t->guard.n_skips);
    return 0;
}

/* The kinds of load: a resume (--resume, run_dir's latest), a rollback (the spike guard), the
 * weights alone (--init-from a checkpoint, LoRA's base). */
typedef enum { LOAD_RESUME, LOAD_ROLLBACK, LOAD_WEIGHTS } load_kind;

/* The ending of every load, once ckpt_load has read this rank's slices: a resume or a rollback
 * checks the global batch and takes the step and the data position from meta (a resume also the
 * guard's record, and compares the data sources with the checkpoint's: data_sources.h; a rollback
 * keeps the in-memory record, newer than the checkpoint's, and the run's own data); then what was
 * read is completed on every rank (the weights alone for LOAD_WEIGHTS) and the load recorded: a
 * rollback in metrics.jsonl, --init-from for trainer_open_run_dir (a resume by note_resume, after
 * LoRA's base has loaded). */
static int load_ending(tsr_trainer *t, load_kind kind, const ckpt_meta *meta, const char *path,
                       const ckpt_stats *st) {
    if (kind == LOAD_WEIGHTS) {
        base_gather(t, 0);
        note_start_load(t, "init-from", path, st->seconds, st->bytes);
        return 0;
    }
    int rc = check_batch(t, meta, path);
    if (!rc) rc = apply_meta(t, meta, path, kind == LOAD_RESUME);
    if (!rc && kind == LOAD_RESUME) rc = data_sources_check(t, meta->data_sources, path);
    if (rc) return rc;
    gather_after_load(t, 1);
    if (kind == LOAD_ROLLBACK) metrics_log_checkpoint(&t->run, "rollback", path, st->seconds, st->bytes);
    return 0;
}

int checkpointing_rollback(tsr_trainer *t, int64_t max_step, char *path, size_t cap,
                           int64_t *data_batch) {
    ckpt_tensor ts[CKIO_MAX_TENSORS];
    char names[CKIO_MAX_TENSORS][64];
    int rc = checkpointing_drain(t); /* the save in flight may be the one to roll back to */
    if (rc) return rc;
    ckpt_meta *meta = tsr_malloc(sizeof *meta);
    ckpt_stats st = {0};
    int n = ckio_tensors(t, 1, ts, names);
    int64_t found;
    /* newest first; one that fails to load (CRC, truncation) is reported and the next older tried:
     * every tensor is read again from the one that loads; one of another global batch stops the
     * search (an older one would not do either) */
    while ((rc = ckpt_newest_at_or_before(t->cfg.run_dir, max_step, path, cap, &found)) == 0) {
        rc = ckpt_load(path, meta, ts, n, NULL, &st, NULL);
        if (!rc) rc = check_batch(t, meta, path);
        if (!rc) break;
        if (rc == TSR_EXIT_USAGE) break;
        if (t->dist.rank == 0) tsr_warn("%s: cannot roll back to it (above); trying an older one", path);
        max_step = found - 1;
    }
    if (!rc) rc = load_ending(t, LOAD_ROLLBACK, meta, path, &st);
    if (!rc) *data_batch = meta->data_cursor / t->cfg.global_batch;
    free(meta);
    ckio_release(t);
    return rc;
}

void checkpointing_set_aside_after(tsr_trainer *t) { ckpt_set_aside_after(t->cfg.run_dir, t->step); }

/* --init-from, layer l: 0 when it is of one kind in the run and the checkpoint, else the refusal */
static int init_layer_kind(const tsr_model_config *x, const tsr_model_config *y, int l,
                           const char *path) {
    const int mx = config_moe_layer(x, l), my = config_moe_layer(y, l);
    if (mx != my) {
        tsr_error("--init-from %s: layer %d is %s in the checkpoint but %s in this run "
                  "(model.moe_every %d vs %d there, model.moe_dense_layers %d vs %d): the experts "
                  "would load into other layers; use the checkpoint's model.moe_every and "
                  "moe_dense_layers", path, l,
                  my ? "a mixture of experts" : "dense", mx ? "a mixture of experts" : "dense",
                  x->moe_every, y->moe_every, x->moe_dense_layers, y->moe_dense_layers);
        return TSR_EXIT_USAGE;
    }
    const int lx = config_layer_linear(x, l), ly = config_layer_linear(y, l);
    if (lx != ly) {
        tsr_error("--init-from %s: layer %d is %s in the checkpoint but %s in this run "
                  "(model.layer_types): the weights would load into other layers; use the "
                  "checkpoint's model.layer_types", path, l,
                  ly ? "linear_attention" : "an attention layer",
                  lx ? "linear_attention" : "an attention layer");
        return TSR_EXIT_USAGE;
    }
    return 0;
}

/* --init-from: the stacked MoE, dense-MLP, attention and DeltaNet tensors carry no layer index,
 * so a run whose MoE or linear_attention layers sit elsewhere (another model.moe_every or order
 * of model.layer_types, same shapes) would load them into the wrong layers: refused. Shapes
 * catch the rest (another n_layer, expert count or width, count of linear layers). */
static int check_init_moe_layers(const tsr_config *cfg, const char *path) {
    ckpt_peeked *pk = tsr_malloc(sizeof *pk);
    tsr_config *ck = tsr_calloc(1, sizeof *ck);
    int rc = 0;
    if (ckpt_peek_meta(path, pk, 0) == 0 &&
        ckpt_config_from_text(pk->path, pk->meta.config, NULL, 0, ck) == 0 &&
        ck->model.n_layer == cfg->model.n_layer)
        for (int l = 0; l < cfg->model.n_layer && !rc; l++)
            rc = init_layer_kind(&cfg->model, &ck->model, l, path);
    free(ck);
    free(pk);
    return rc;
}

int checkpointing_check_start(const tsr_trainer *t, const char *resume_arg, const char *init_arg,
                              ckpt_peeked *peeked) {
    const tsr_config *cfg = &t->cfg;
    char why[1024];
    if (peeked) peeked->path[0] = '\0';
    if (!init_arg && cfg->lora.rank > 0 && cfg->lora.base[0]) init_arg = cfg->lora.base;
    int rc = ckpt_check_run_dir(cfg->run_dir, why, sizeof why);
    if (rc) {
        tsr_error("%s", why);
        return rc;
    }
    char from[1200], path[1200];
    if (init_arg && !imported(t, init_arg)) { /* its file is opened through MPI-IO */
        if (ckpt_resolve_path(init_arg, path, sizeof path)) return TSR_EXIT_DATA;
        if ((rc = ckpt_check_load_path(path, why, sizeof why))) {
            tsr_error("--init-from %s: %s", init_arg, why);
            return rc;
        }
        if ((rc = check_init_moe_layers(cfg, path))) return rc;
    }
    if (resume_arg) {
        if (ckpt_resolve_path(resume_arg, from, sizeof from)) return TSR_EXIT_DATA;
        if ((rc = ckpt_check_load_path(from, why, sizeof why))) {
            tsr_error("--resume %s: %s", resume_arg, why);
            return rc;
        }
    } else {
        snprintf(from, sizeof from, "%s", cfg->run_dir);
    }
    ckpt_peeked *pk = peeked ? peeked : tsr_malloc(sizeof *pk);
    tsr_config *ck = tsr_calloc(1, sizeof *ck);
    /* no checkpoint (a fresh run), or none whose metadata reads (the resume reports each), or a
     * stored config that does not load (reported): nothing to compare */
    if (ckpt_peek_meta(from, pk, sdc_configured(cfg)) == 0 &&
        ckpt_config_from_text(pk->path, pk->meta.config, NULL, 0, ck) == 0) {
        char diff[1024];
        config_model_diff(cfg, ck, diff, sizeof diff);
        if (diff[0]) {
            tsr_error("%s: the model in the config differs from the checkpoint's: %s (config vs "
                      "checkpoint). A resume continues the same model: restore those settings, "
                      "use another run_dir, or start from the weights with --init-from",
                      pk->path, diff);
            rc = TSR_EXIT_USAGE;
        } else if (cfg->optim.name != ck->optim.name) { /* optim/m is Muon's momentum there */
            tsr_error("%s: optim.name = \"%s\" but the checkpoint was written by %s: its "
                      "optimizer state (optim/m, optim/v) means something else under the other "
                      "optimizer. Resume with optim.name = \"%s\", or start from its weights "
                      "with --init-from in another run_dir", pk->path,
                      cfg->optim.name == TSR_OPTIM_MUON ? "muon" : "adamw",
                      ck->optim.name == TSR_OPTIM_MUON ? "Muon" : "AdamW",
                      ck->optim.name == TSR_OPTIM_MUON ? "muon" : "adamw");
            rc = TSR_EXIT_USAGE;
        }
    }
    free(ck);
    if (pk != peeked) free(pk);
    return rc;
}

/* --init-from a Hugging Face directory (model.safetensors + config.json, docs/hf.md): every rank
 * checks config.json and the safetensors header itself (the same answer everywhere; rank 0 alone
 * reports), then reads only the tensors that meet its part of the flat buffer, as a checkpoint
 * load does (ckio_layout: ddp and zero1 ranks their part of the world's partition; zero3 / hsdp
 * ranks of the first group their part of the group's; no full copy on any rank); an all-reduce
 * agrees on the outcome, and dense_gather completes the weights or moves the parts into the
 * shards, as after a checkpoint load. The importer reads the plain layout (every expert in the
 * flat buffer): under parallel.expert, where the flat buffer holds the dense tensors only, each
 * dense tensor's share of the part is read at its plain offset, and every rank reads its own
 * experts straight into the store. */
static int init_from_hf(tsr_trainer *t, const char *dir) {
    double t0 = tsr_now();
    const checkpointing_importer *imp = t->uses.importer;
    /* (a split model reads the whole model's layout: its part of it, as a checkpoint's) */
    const tsr_model *m = trainer_split(t) ? t->model.global : &t->model, *plain = m;
    tsr_model *own = NULL;
    if (t->part.ep_on) { /* the plain layout, for its offsets (no weights) */
        plain = own = tsr_calloc(1, sizeof *own);
        model_init(own, &t->cfg.model, t->T, t->be.ops);
    }
    void *h = NULL;
    tsr_log_mute(t->dist.rank != 0);
    int rc = imp->open(&h, dir, plain);
    tsr_log_mute(0);
    size_t lo, hi, origin[CKIO_SETS];
    float *base[CKIO_SETS];
    ckio_release(t);
    ckio_layout(t, 0, &lo, &hi, base, origin);
    uint64_t bytes = 0;
    for (int i = 0; i < TSR_P_COUNT && !rc && hi > lo; i++) {
        const tsr_param_info *p = &m->params_info[i];
        const size_t a = p->offset > lo ? p->offset : lo,
                     b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (!p->numel || p->ep || a >= b) continue;
        const size_t at = plain->params_info[i].offset + (a - p->offset); /* (plain == m: a) */
        rc = imp->read(h, plain, at, at + (b - a), base[CKIO_MODEL] + (a - origin[CKIO_MODEL]),
                       &bytes);
    }
    float *whole = t->part.ep_on ? ep_whole_begin(&t->part.ep) : NULL; /* (whole experts) */
    for (int which = 0; which < 2 && !rc && t->part.ep_on; which++) {
        const size_t off = plain->params_info[which ? TSR_P_EXPW2 : TSR_P_EXPW1].offset;
        for (int s = 0; s < t->part.ep.LM && !rc; s++) {
            size_t in_tensor, in_store;
            const size_t n = ep_slot_span(&t->part.ep, which, s, &in_tensor, &in_store);
            rc = imp->read(h, plain, off + in_tensor, off + in_tensor + n, whole + in_store,
                           &bytes);
        }
    }
    if (whole) ep_whole_end(&t->part.ep, whole);
    imp->close(h);
    if (own) {
        model_free(own);
        free(own);
    }
    double worst = rc;
    dist_allreduce_max_f64(&worst, 1); /* a read error on one rank stops all of them */
    if (worst == 0) dense_gather(t, 0); /* (then the device's copy, device = cuda) */
    ckio_release(t);
    if (worst != 0) return (int)worst;
    int64_t total = (int64_t)bytes;
    dist_allreduce_sum_i64(&total, 1);
    note_start_load(t, "init-from", dir, tsr_now() - t0, (uint64_t)total);
    return 0;
}

/* The base model's weights only (--init-from, LoRA's base): from a Hugging Face directory or a
 * checkpoint (a file or a run directory's latest). */
static int load_weights(tsr_trainer *t, const char *arg) {
    if (adapter_dir(t, arg)) {
        if (t->dist.rank == 0)
            tsr_error("--init-from %s is a PEFT adapter directory: it starts a LoRA run (set "
                      "lora.rank, lora.alpha and lora.targets to the adapter's, and lora.base to "
                      "its base; docs/lora.md), not a model", arg);
        return TSR_EXIT_USAGE;
    }
    if (imported(t, arg)) return init_from_hf(t, arg);
    char from[1200];
    if (ckpt_resolve_path(arg, from, sizeof from)) return TSR_EXIT_DATA;
    ckpt_tensor ts[CKIO_MAX_TENSORS];
    char names[CKIO_MAX_TENSORS][64];
    ckpt_meta *meta = tsr_malloc(sizeof *meta);
    ckpt_stats st = {0};
    ckio_release(t);
    int n = ckio_base_tensors(t, 0, ts, names);
    int rc = ckpt_load(from, meta, ts, n, "model/", &st, NULL);
    if (!rc) rc = load_ending(t, LOAD_WEIGHTS, meta, from, &st);
    free(meta);
    ckio_release(t);
    return rc;
}

/* tensor parallelism: this rank's part of the whole model's flat layout (tp_io), gathered from
 * the split ranks' weights into ckio's buffer (ckio_release frees it); its floats in *len */
static const float *split_part(tsr_trainer *t, size_t *len) {
    size_t lo, hi, origin[CKIO_SETS];
    float *base[CKIO_SETS];
    ckio_release(t);
    ckio_layout(t, 0, &lo, &hi, base, origin);
    tsr_fsdp *f = &t->part.fsdp;
    if (t->part.fsdp_on && f->gindex == 0) /* (zero3 / hsdp: the first group's split parts) */
        fsdp_shard_to_part(f, f->params, t->part.ckio[CKIO_MODEL]);
    tp_to_global(&t->part.tpio, &t->model, ckio_tp_held(t, CKIO_MODEL), base[CKIO_MODEL]);
    *len = hi - lo;
    return base[CKIO_MODEL];
}

/* LoRA: "crc32c:XXXXXXXX" of the base's weights as this run holds them: the CRC32C of the whole
 * model's flat layout's float32 bytes, each rank's part of a partition (the world's; zero3 /
 * hsdp: the first group's; tensor parallelism and a pipeline: their parts of the whole layout,
 * tp_io) combined in order, the same whatever the layout. Collective. */
static void base_checksum(tsr_trainer *t, char *out, size_t cap) {
    const int W = t->dist.world;
    const float *part;
    float *tmp = NULL;
    size_t len;
    if (trainer_split(t)) {
        part = split_part(t, &len);
    } else if (t->part.fsdp_on) {
        tsr_fsdp *f = &t->part.fsdp;
        len = f->part_counts[f->grank];
        tmp = t->be.ops->alloc((len ? len : 1) * sizeof(float));
        fsdp_shard_to_part(f, f->params, tmp);
        part = tmp;
        if (f->gindex != 0) len = 0; /* the other groups hold the same */
    } else {
        part = t->model.params + t->part.part_displs[t->dist.rank];
        len = t->part.part_counts[t->dist.rank];
    }
    uint64_t mine[2] = {tsr_crc32c(0, part, len * sizeof(float)), len * sizeof(float)};
    uint64_t *all = tsr_malloc((size_t)W * sizeof mine);
    dist_allgather(mine, all, sizeof mine);
    uint32_t crc = 0;
    for (int r = 0; r < W; r++)
        if (all[2 * r + 1]) crc = crc32c_combine(crc, (uint32_t)all[2 * r], all[2 * r + 1]);
    free(all);
    if (tmp) t->be.ops->free(tmp);
    ckio_release(t);
    snprintf(out, cap, "crc32c:%08x", crc);
}

/* LoRA (docs/lora.md): the frozen base after the adapters' resume (meta and ck_path: the
 * checkpoint read) or on a fresh start (meta NULL). The base is --init-from's, else lora.base,
 * else the one the checkpoint's config names, else the seed's weights (already there); its
 * checksum must equal the one the checkpoint (or the config) recorded. The run's config then
 * records both, for its config.cfg and checkpoints. */
static int lora_base(tsr_trainer *t, const char *init_arg, const ckpt_meta *meta,
                     const char *ck_path) {
    tsr_config *ck = tsr_calloc(1, sizeof *ck);
    const char *expect = t->cfg.lora.base_checksum, *said = "lora.base_checksum in the config";
    char from_ck[1024] = "";
    if (meta && ckpt_config_from_text(ck_path, meta->config, NULL, 0, ck) == 0) {
        snprintf(from_ck, sizeof from_ck, "%s", ck->lora.base);
        expect = ck->lora.base_checksum, said = ck_path;
    }
    const char *base = init_arg ? init_arg : t->cfg.lora.base[0] ? t->cfg.lora.base
                                                                  : from_ck[0] ? from_ck : NULL;
    int rc = 0;
    char resolved[1200], found[1200];
    if (base && !init_arg) { /* as recorded: absolute, else relative to run_dir */
        tsr_log_mute(t->dist.rank != 0);
        rc = config_lora_base_find(t->cfg.lora.base[0] ? &t->cfg : ck, t->cfg.run_dir, found,
                                   sizeof found);
        tsr_log_mute(0);
        base = found;
    }
    if (base && !rc && !imported(t, base)) { /* a run directory or `latest`: the file it names now is the
                                    * base, and is what the run records */
        if (ckpt_resolve_path(base, resolved, sizeof resolved)) rc = TSR_EXIT_DATA;
        else base = resolved;
    }
    if (rc) {
    } else if (base) {
        rc = load_weights(t, base);
    } else if (t->dist.rank == 0) {
        tsr_warn("lora.rank = %lld but no base model (lora.base, --init-from): the adapters "
                 "train beside the seed's random initial weights", (long long)t->cfg.lora.rank);
    }
    char got[32];
    if (!rc) base_checksum(t, got, sizeof got);
    if (!rc && expect[0] && strcmp(expect, got) != 0) {
        if (t->dist.rank == 0)
            tsr_error("lora: the base model %s has weights %s, but the adapters belong to a base "
                      "with %s (%s): resume with the base they were trained on (lora.base or "
                      "--init-from), or start a new run_dir", base ? base : "(the seed's weights)",
                      got, expect, said);
        rc = TSR_EXIT_DATA;
    }
    /* device = cuda: the base (bf16) and the adapters as the host holds them now (the
     * adapters and moments a resume read, or a fresh start's) */
    if (!rc && t->be.gpu) gpu_train_push(t->be.gpu, 1);
    if (!rc) {
        snprintf(t->cfg.lora.base_checksum, sizeof t->cfg.lora.base_checksum, "%s", got);
        tsr_log_mute(t->dist.rank != 0);
        if (base) rc = config_lora_base_record(&t->cfg, base, t->cfg.run_dir);
        tsr_log_mute(0);
    }
    free(ck);
    return rc;
}

/* LoRA, fresh start from a PEFT adapter directory (docs/lora.md): its adapters (every rank reads
 * the small file; rank 0 reports), then the base: lora.base, else the adapter's
 * base_model_name_or_path when that is a path here. */
static int lora_from_peft(tsr_trainer *t, const char *dir) {
    double t0 = tsr_now();
    char named[1024] = "";
    tsr_log_mute(t->dist.rank != 0);
    int64_t rc = t->uses.importer->read_adapter(dir, &t->cfg, &t->part.lora, named, sizeof named);
    tsr_log_mute(0);
    int64_t worst = rc;
    dist_allreduce_sum_i64(&worst, 1); /* any rank's failure stops all */
    if (worst) return (int)(rc ? rc : TSR_EXIT_DATA);
    const char *base = t->cfg.lora.base[0] ? t->cfg.lora.base : NULL;
    struct stat st;
    /* whether the named base is a path here, agreed by all ranks (node-local paths differ) */
    int here[2] = {!base && named[0] && stat(named, &st) == 0, 0};
    here[1] = here[0];
    dist_allreduce_min_int(&here[0], 1);
    dist_allreduce_max_int(&here[1], 1);
    if (here[0] != here[1]) {
        if (t->dist.rank == 0)
            tsr_error("--init-from %s: the adapter's base \"%s\" is a path on some ranks and not "
                      "on others (node-local storage?): set lora.base to a path every rank can "
                      "read", dir, named);
        return TSR_EXIT_USAGE;
    }
    if (here[0]) base = named;
    if (!base) {
        if (t->dist.rank == 0)
            tsr_error("--init-from %s: a PEFT adapter needs its base model: set lora.base to it "
                      "(a checkpoint or a Hugging Face directory; the adapter names \"%s\", "
                      "which is not a path here)", dir, named);
        return TSR_EXIT_USAGE;
    }
    char base_copy[1024];
    snprintf(base_copy, sizeof base_copy, "%s", base);
    rc = lora_base(t, base_copy, NULL, NULL);
    if (!rc) note_start_load(t, "init-from", dir, tsr_now() - t0, 0);
    return (int)rc;
}

/* Appends "KEY A -> B" to the list in buf (len n) when a and b differ. */
static void note_diff(char *buf, size_t n, const char *key, const char *a, const char *b) {
    size_t k = strlen(buf);
    if (strcmp(a, b) != 0 && k < n)
        snprintf(buf + k, n - k, "%s%s %s -> %s", k ? ", " : "", key, a, b);
}

/* A resume against the config the checkpoint at path stored (ck): what changes in the
 * learning-rate schedule (max_duration, optim.schedule, optim.warmup, optim.decay, optim.lr,
 * optim.alpha_f), with the learning rate of the first step this run makes under each. */
static void note_sched_change(const tsr_trainer *t, const tsr_config *ck) {
    const tsr_config *c = &t->cfg;
    const tsr_sched_steps was = sched_steps_of(ck, t->epoch_samples), now = t->sched;
    const char *const *names = cfgtab_find("optim.schedule")->names;
    char what[1024] = "", a[96], b[96], d[64];
    duration_format(d, sizeof d, ck->max_duration);
    snprintf(a, sizeof a, "\"%s\" (%lld steps)", d, (long long)was.total);
    duration_format(d, sizeof d, c->max_duration);
    snprintf(b, sizeof b, "\"%s\" (%lld steps)", d, (long long)now.total);
    note_diff(what, sizeof what, "max_duration", a, b);
    note_diff(what, sizeof what, "optim.schedule", names[ck->optim.schedule],
              names[c->optim.schedule]);
    snprintf(a, sizeof a, "%lld steps", (long long)was.warmup);
    snprintf(b, sizeof b, "%lld steps", (long long)now.warmup);
    note_diff(what, sizeof what, "optim.warmup", a, b);
    snprintf(a, sizeof a, "%lld steps", (long long)was.decay);
    snprintf(b, sizeof b, "%lld steps", (long long)now.decay);
    note_diff(what, sizeof what, "the wsd decay", a, b);
    snprintf(a, sizeof a, "%.6g", ck->optim.lr);
    snprintf(b, sizeof b, "%.6g", c->optim.lr);
    note_diff(what, sizeof what, "optim.lr", a, b);
    snprintf(a, sizeof a, "%.6g", ck->optim.alpha_f);
    snprintf(b, sizeof b, "%.6g", c->optim.alpha_f);
    note_diff(what, sizeof what, "optim.alpha_f", a, b);
    if (!what[0]) return;
    printf("resume: the learning-rate schedule changes: %s; lr of step %lld (the first this run "
           "makes): %.6g under the checkpoint's schedule, %.6g under this one\n", what,
           (long long)t->step + 1, sched_lr_at(ck, was, t->step), sched_lr_at(c, now, t->step));
    fflush(stdout);
}

/* After a resume from path (meta: its metadata; st: the load's time and bytes): its record for
 * trainer_open_run_dir, then on rank 0: --init-from is not used (the run's own checkpoint wins, so
 * a requeued finetune continues), and what the schedule changes. */
static void note_resume(tsr_trainer *t, const ckpt_meta *meta, const char *path,
                        const ckpt_stats *st, const char *init_arg) {
    note_start_load(t, "resume", path, st->seconds, st->bytes);
    if (t->dist.rank != 0) return;
    if (init_arg)
        tsr_warn("--init-from %s is ignored: the run resumes from its own checkpoint %s (step "
                 "%lld; a run directory with a checkpoint continues it, so a requeued job goes "
                 "on); to start from %s instead, use a new run_dir", init_arg, path,
                 (long long)t->step, init_arg);
    tsr_config *ck = tsr_calloc(1, sizeof *ck);
    tsr_log_mute(1); /* (the check before the load reported a stored config that does not load) */
    int rc = ckpt_config_from_text(path, meta->config, NULL, 0, ck);
    tsr_log_mute(0);
    if (!rc) note_sched_change(t, ck);
    free(ck);
}

/* checkpointing_resume after its check: peeked holds on rank 0 what the check read. */
static int resume_or_init(tsr_trainer *t, const char *resume_arg, const char *init_arg,
                          const ckpt_peeked *peeked) {
    char resume_buf[1200];
    const char *resume_path = NULL;
    if (resume_arg) {
        if (ckpt_resolve_path(resume_arg, resume_buf, sizeof resume_buf)) return TSR_EXIT_DATA;
        resume_path = resume_buf;
    }
    if (init_arg && !imported(t, init_arg)) { /* a path that does not resolve stops the start */
        char init_buf[1200];
        if (ckpt_resolve_path(init_arg, init_buf, sizeof init_buf)) return TSR_EXIT_DATA;
    }
    ckpt_tensor ts[CKIO_MAX_TENSORS];
    char names[CKIO_MAX_TENSORS][64];
    ckpt_meta *meta = tsr_malloc(sizeof *meta);
    ckpt_stats st = {0};
    char path[1200];
    int rc, n = ckio_tensors(t, 1, ts, names);
    /* the run's own checkpoint wins over --init-from, so a requeued finetune continues */
    if (resume_path) {
        rc = ckpt_load(resume_path, meta, ts, n, NULL, &st, peeked);
        snprintf(path, sizeof path, "%s", resume_path);
    } else {
        rc = ckpt_resume(t->cfg.run_dir, meta, ts, n, path, sizeof path, &st, peeked,
                         sdc_configured(&t->cfg));
    }
    if (t->part.lora_on && rc == 1 && adapter_dir(t, init_arg)) { /* from a PEFT adapter */
        rc = lora_from_peft(t, init_arg);
    } else if (t->part.lora_on && rc == 1) { /* fresh LoRA run: the base, the adapters from the
                                                * seed */
        rc = lora_base(t, init_arg, NULL, NULL);
    } else if (t->part.lora_on) { /* LoRA resume: the adapters, then their base (a PEFT
                                     * directory --init-from named started the run: its base is
                                     * the one the checkpoint records) */
        if (!rc && !(rc = load_ending(t, LOAD_RESUME, meta, path, &st)) &&
            !(rc = lora_base(t, adapter_dir(t, init_arg) ? NULL : init_arg, meta, path)))
            note_resume(t, meta, path, &st, init_arg);
    } else if (rc == 1 && init_arg) { /* fresh run: weights only, step 0 */
        rc = load_weights(t, init_arg);
    } else if (rc == 1) {
        rc = 0; /* fresh run */
    } else if (!rc && !(rc = load_ending(t, LOAD_RESUME, meta, path, &st))) {
        note_resume(t, meta, path, &st, init_arg);
    }
    free(meta);
    ckio_release(t);
    return rc;
}

int checkpointing_resume(tsr_trainer *t, const char *resume_arg, const char *init_arg) {
    /* rank 0 alone opens the checkpoint's metadata (not thousands of ranks at once), and once:
     * what its check read is handed on to the load (ckpt_peeked), which reads the root
     * attributes again only for another file (a fallback past a damaged one) or this one changed */
    ckpt_peeked *peeked = tsr_calloc(1, sizeof *peeked);
    int rc = t->dist.rank == 0 ? checkpointing_check_start(t, resume_arg, init_arg, peeked)
                               : 0;
    dist_bcast(&rc, sizeof rc, 0);
    if (!rc) rc = resume_or_init(t, resume_arg, init_arg, peeked);
    free(peeked);
    return rc;
}
