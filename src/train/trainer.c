/* trainer.c — data-parallel training steps, AdamW with schedule and clipping, evaluation. */
#include "trainer.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "train/checkpointing.h"
#include "train/metrics.h"
#include "train/watchdog.h"

double lr_multiplier(tsr_sched_kind kind, double alpha_f, int64_t s, int64_t W, int64_t S) {
    if (s < W) return (double)(s + 1) / (double)W;
    double p = (double)(s - W) / (double)(S - W > 1 ? S - W : 1);
    if (p > 1.0) p = 1.0;
    switch (kind) {
    case TSR_SCHED_COSINE: return alpha_f + (1.0 - alpha_f) * 0.5 * (1.0 + cos(M_PI * p));
    case TSR_SCHED_LINEAR: return 1.0 - (1.0 - alpha_f) * p;
    default: return 1.0;
    }
}

/* Threads per rank: the config's value, else the node's cores shared among its ranks. */
static int pick_threads(const tsr_config *cfg, const tsr_dist *d) {
    if (cfg->threads > 0) return cfg->threads;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = (int)(cores / (d->local_world > 0 ? d->local_world : 1));
    return n > 0 ? n : 1;
}

static int open_data(tsr_trainer *t) {
    const tsr_config *c = &t->cfg;
    TSR_CHECK(dataset_open(&t->train, c->data.train, c->data.verify));
    if (c->data.val[0]) TSR_CHECK(dataset_open(&t->val, c->data.val, c->data.verify));
    tsr_dataset *sets[2] = {t->train, t->val};
    const char *names[2] = {c->data.train, c->data.val};
    for (int i = 0; i < 2; i++) {
        if (!sets[i]) continue;
        if (dataset_vocab_size(sets[i]) > (uint32_t)c->model.vocab_size) {
            tsr_error("%s: dataset vocabulary is %u tokens but model.vocab_size = %d: the model "
                      "must cover every token id (set model.vocab_size >= %u)",
                      names[i], dataset_vocab_size(sets[i]), c->model.vocab_size,
                      dataset_vocab_size(sets[i]));
            return TSR_EXIT_USAGE;
        }
        if (dataset_n_samples(sets[i], t->T) == 0) {
            tsr_error("%s: %llu tokens hold no sample of seq_len + 1 = %d tokens", names[i],
                      (unsigned long long)dataset_n_tokens(sets[i]), t->T + 1);
            return TSR_EXIT_DATA;
        }
    }
    return 0;
}

/* The rank partition of the flat parameter buffer: rank r's part is [displs[r], +counts[r]),
 * 16-float aligned, in rank order. ZeRO-1 ranks own their part (optimizer state, update); DDP
 * ranks own everything but still use the partition to split checkpoint I/O. */
static int plan_shards(tsr_trainer *t) {
    size_t n = t->model.n_params, W = (size_t)t->dist.world;
    if (n / W > (size_t)INT32_MAX) {
        tsr_error("%zu parameters over %zu ranks exceed MPI's int counts; use more ranks", n, W);
        return TSR_EXIT_USAGE;
    }
    t->part_counts = tsr_malloc(W * sizeof(int));
    t->part_displs = tsr_malloc(W * sizeof(int));
    for (size_t r = 0; r < W; r++) {
        size_t lo = n * r / W / 16 * 16, hi = r + 1 == W ? n : n * (r + 1) / W / 16 * 16;
        t->part_displs[r] = (int)lo;
        t->part_counts[r] = (int)(hi - lo);
    }
    t->zero1 = t->cfg.sharding == TSR_SHARD_ZERO1 && W > 1;
    t->shard_lo = t->zero1 ? (size_t)t->part_displs[t->dist.rank] : 0;
    t->shard_hi = t->zero1 ? t->shard_lo + (size_t)t->part_counts[t->dist.rank] : n;
    if (t->zero1) t->gslice = t->ops->alloc((t->shard_hi - t->shard_lo) * sizeof(float));
    return 0;
}

int trainer_init(tsr_trainer *t, const tsr_config *cfg, const tsr_dist *d, int dry_run) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    t->dist = *d;
    t->ops = &tsr_cpu_ops;
    t->T = (int)cfg->seq_len;
    t->micro = (int)cfg->micro_batch;
    TSR_CHECK(config_check_world(cfg, d->world));
    t->per_rank = cfg->global_batch / d->world;
    t->threads = pick_threads(cfg, d);
    cpu_ops_set_threads(t->threads);
    t->peak_flops = cfg->peak_flops > 0 ? cfg->peak_flops : metrics_peak_flops("cpu", t->threads);
    if (!dry_run) {
        TSR_CHECK(open_data(t));
        t->sampler.n = dataset_n_samples(t->train, t->T);
        t->sampler.seed = (uint64_t)cfg->seed;
        t->sampler.shuffle = cfg->data.shuffle;
    }
    uint64_t epoch_samples = t->sampler.n ? t->sampler.n : 1;
    t->total_steps = duration_to_steps(cfg->max_duration, cfg->global_batch, cfg->seq_len, epoch_samples);
    t->warmup_steps = duration_to_steps(cfg->optim.warmup, cfg->global_batch, cfg->seq_len, epoch_samples);
    t->eval_every = duration_to_steps(cfg->eval_interval, cfg->global_batch, cfg->seq_len, epoch_samples);
    t->save_every = duration_to_steps(cfg->save_interval, cfg->global_batch, cfg->seq_len, epoch_samples);
    model_init(&t->model, &cfg->model, t->T, t->ops);
    t->flops_per_token = model_flops_per_token(&t->model, t->T);
    if (dry_run) { /* the plan needs the layout only: nothing is allocated */
        metrics_print_plan(t, 1);
        return 0;
    }
    model_alloc_params(&t->model);
    model_init_weights(&t->model, (uint64_t)cfg->seed);
    model_alloc_acts(&t->model, t->micro, t->T);
    TSR_CHECK(plan_shards(t));
    size_t owned = t->shard_hi - t->shard_lo;
    t->m = t->ops->alloc(owned * sizeof(float));
    t->v = t->ops->alloc(owned * sizeof(float));
    t->inputs = tsr_malloc((size_t)t->per_rank * t->T * sizeof(int32_t));
    t->targets = tsr_malloc((size_t)t->per_rank * t->T * sizeof(int32_t));
    metrics_print_plan(t, 0);
    if (d->rank == 0) TSR_CHECK(metrics_open_run_dir(t));
    return 0;
}

/* Reads one sample; a sample the reader refuses (a token id beyond the vocabulary in a dataset
 * opened without verify) is seen by this rank only, so it aborts every rank. */
static int64_t read_sample(const tsr_dataset *ds, const char *name, int T, uint64_t idx,
                           int32_t *inputs, int32_t *targets) {
    int k = dataset_read_sample(ds, T, idx, inputs, targets);
    if (k < 0)
        tsr_die(TSR_EXIT_DATA, "%s: cannot read sample %llu (reason above); set data.verify = "
                "true to check the whole dataset at start", name, (unsigned long long)idx);
    return k;
}

/* Loads this rank's share of global batch `step` and returns its count of counted targets. */
static int64_t load_batch(tsr_trainer *t, int64_t step) {
    int64_t first = step * t->cfg.global_batch + t->dist.rank * t->per_rank, counted = 0;
    for (int64_t i = 0; i < t->per_rank; i++) {
        uint64_t idx = sampler_index(&t->sampler, (uint64_t)(first + i));
        counted += read_sample(t->train, t->cfg.data.train, t->T, idx, t->inputs + i * t->T,
                               t->targets + i * t->T);
    }
    return counted;
}

static int param_decays(const tsr_optim_config *o, tsr_param_kind kind) {
    if (kind == TSR_PK_EMBEDDING) return o->decay_embeddings;
    if (kind == TSR_PK_NORM || kind == TSR_PK_BIAS) return o->decay_norms_biases;
    return 1;
}

/* Test-only faults inside a step's compute (TSR_FAULT, see maybe_fault): "slow:MS:RANK" makes RANK
 * sleep MS ms in every step (a straggler); "hang:STEP:RANK" makes it stop for good in step STEP. */
static void compute_fault(const tsr_trainer *t) {
    const char *f = getenv("TSR_FAULT");
    char kind[8] = "";
    long long a = -1, rank = -1;
    if (!f || sscanf(f, "%7[a-z0-9]:%lld:%lld", kind, &a, &rank) != 3 || rank != t->dist.rank) return;
    if (!strcmp(kind, "slow") && a > 0) usleep((useconds_t)(a * 1000));
    if (!strcmp(kind, "hang") && a == t->step + 1)
        for (;;) pause();
}

void trainer_step(tsr_trainer *t, tsr_step_stats *st) {
    double t0 = tsr_now();
    watchdog_phase(WD_DATA, t->step);
    tsr_model *m = &t->model;
    const tsr_optim_config *o = &t->cfg.optim;
    int64_t counted = load_batch(t, t->step);
    dist_allreduce_sum_i64(&counted, 1);
    float scale = counted > 0 ? 1.0f / (float)counted : 0.0f;
    watchdog_phase(WD_COMPUTE, t->step);
    double tc = tsr_now();
    t->ops->zero(m->grads, m->n_params * sizeof(float));
    double loss_sum = 0.0;
    for (int64_t b = 0; b < t->per_rank; b += t->micro) {
        const int32_t *in = t->inputs + b * t->T, *tg = t->targets + b * t->T;
        loss_sum += model_forward(m, in, tg, t->micro, t->T);
        model_backward(m, in, tg, t->micro, t->T, scale);
    }
    compute_fault(t);
    st->compute_time = tsr_now() - tc;
    watchdog_phase(WD_REDUCE, t->step);
    /* gradients of the owned slice, summed over ranks */
    float *g = m->grads + t->shard_lo;
    size_t lo = t->shard_lo, hi = t->shard_hi;
    if (t->zero1) {
        dist_reduce_scatter_sum_f32(m->grads, t->gslice, t->part_counts);
        g = t->gslice;
    } else if (t->dist.world > 1) {
        dist_allreduce_sum_f32(m->grads, m->n_params);
    }
    if (t->dist.world > 1) dist_allreduce_sum_f64(&loss_sum, 1);
    double sq = t->ops->sumsq(g, hi - lo);
    if (t->zero1) dist_allreduce_sum_f64(&sq, 1);
    double norm = sqrt(sq);
    float gscale = 1.0f;
    if (o->grad_clip > 0 && norm > o->grad_clip) gscale = (float)(o->grad_clip / (norm + 1e-6));
    double lr = o->lr * lr_multiplier(o->schedule, o->alpha_f, t->step, t->warmup_steps,
                                      t->total_steps);
    watchdog_phase(WD_OPTIMIZER, t->step);
    t->step++;
    /* AdamW on the owned part of each tensor (weight decay depends on the tensor's kind) */
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const tsr_param_info *p = &m->params_info[i];
        size_t a = p->offset > lo ? p->offset : lo, b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a >= b) continue;
        float wd = param_decays(o, p->kind) ? (float)o->weight_decay : 0.0f;
        t->ops->adamw_update(m->params + a, g + (a - lo), t->m + (a - lo), t->v + (a - lo), b - a,
                             (float)lr, (float)o->beta1, (float)o->beta2, (float)o->eps, wd,
                             gscale, (int)t->step);
    }
    if (t->zero1) dist_allgatherv_f32(m->params, t->part_counts, t->part_displs);
    t->tokens_seen += t->cfg.global_batch * t->T;
    st->step = t->step;
    st->loss = counted > 0 ? loss_sum / (double)counted : NAN;
    st->lr = lr;
    st->grad_norm = norm;
    st->tokens = counted;
    st->step_time = tsr_now() - t0;
}

double trainer_eval(tsr_trainer *t) {
    if (!t->val) return NAN;
    tsr_model *m = &t->model;
    uint64_t n = dataset_n_samples(t->val, t->T);
    if (t->cfg.eval_samples > 0 && (uint64_t)t->cfg.eval_samples < n) n = (uint64_t)t->cfg.eval_samples;
    uint64_t lo = n * (uint64_t)t->dist.rank / (uint64_t)t->dist.world;
    uint64_t hi = n * (uint64_t)(t->dist.rank + 1) / (uint64_t)t->dist.world;
    double acc[2] = {0.0, 0.0}; /* loss sum, counted targets */
    for (uint64_t s = lo; s < hi; s += (uint64_t)t->micro) {
        int B = (int)(hi - s < (uint64_t)t->micro ? hi - s : (uint64_t)t->micro);
        for (int b = 0; b < B; b++)
            acc[1] += (double)read_sample(t->val, t->cfg.data.val, t->T, s + (uint64_t)b,
                                          t->inputs + b * t->T, t->targets + b * t->T);
        acc[0] += model_forward(m, t->inputs, t->targets, B, t->T);
    }
    dist_allreduce_sum_f64(acc, 2);
    return acc[1] > 0 ? acc[0] / acc[1] : NAN;
}

/* Test-only fault injection (tests/test_resume.sh): TSR_FAULT="kill:STEP:RANK" makes that rank
 * SIGKILL itself right after that step, with no warning to anyone; "usr1:STEP:RANK" sends it
 * SIGUSR1 (a stop request, as Slurm's --signal would) at exactly that point; "term:STEP:RANK"
 * sends SIGTERM (what scancel and a requeue send). */
static void maybe_fault(const tsr_trainer *t) {
    const char *f = getenv("TSR_FAULT");
    char kind[8] = "";
    long long step = -1, rank = -1;
    if (!f || sscanf(f, "%7[a-z0-9]:%lld:%lld", kind, &step, &rank) != 3) return;
    if (step != t->step || rank != t->dist.rank) return;
    if (!strcmp(kind, "kill")) raise(SIGKILL);
    if (!strcmp(kind, "usr1")) raise(SIGUSR1);
    if (!strcmp(kind, "term")) raise(SIGTERM);
}

int trainer_run(tsr_trainer *t) {
    tsr_step_stats st;
    int rc;
    int64_t committed = -1; /* step of the last checkpoint this run committed */
    metrics_log_start(t);
    watchdog_start(t);
    while (t->step < t->total_steps) {
        if (checkpointing_stop_requested()) { /* at a step boundary, all ranks together */
            /* a stop signal that came during a periodic save finds this step committed: that
             * checkpoint is the one to resume from, do not write it a second time */
            watchdog_phase(WD_CHECKPOINT, t->step);
            if (committed != t->step && (rc = checkpointing_save(t))) return watchdog_stop(), rc;
            if (t->dist.rank == 0)
                printf("stop requested (SIGUSR1/SIGTERM): checkpoint of step %lld committed; "
                       "exit %d = requeue me\n", (long long)t->step, TSR_EXIT_REQUEUE);
            watchdog_stop();
            return TSR_EXIT_REQUEUE;
        }
        trainer_step(t, &st);
        if (!isfinite(st.loss)) {
            tsr_fail_all(TSR_EXIT_DATA, "step %lld: loss is %g (not finite); stopping. Lower "
                         "optim.lr or check the data", (long long)st.step, st.loss);
        }
        metrics_log_step(t, &st);
        int last = t->step == t->total_steps;
        if (t->val && ((t->eval_every > 0 && t->step % t->eval_every == 0) || last)) {
            watchdog_phase(WD_EVAL, t->step);
            metrics_log_eval(t, trainer_eval(t));
        }
        if ((t->save_every > 0 && t->step % t->save_every == 0) || last) {
            watchdog_phase(WD_CHECKPOINT, t->step);
            if ((rc = checkpointing_save(t))) return watchdog_stop(), rc;
            committed = t->step;
        }
        if (watchdog_after_step(t, &st) && !last) { /* a straggler or low MFU: exit 86 */
            watchdog_phase(WD_CHECKPOINT, t->step);
            if (committed != t->step && (rc = checkpointing_save(t))) return watchdog_stop(), rc;
            watchdog_stop();
            return TSR_EXIT_SLOW;
        }
        maybe_fault(t);
    }
    watchdog_stop();
    metrics_finish(t);
    if (t->cfg.sample.tokens > 0 && t->dist.rank == 0) {
        /* prompt: the end-of-text token, by convention the vocabulary's last id (GPT-2's 50256,
         * the synthetic corpus' V-1, a trained tokenizer's last special) */
        int32_t eot = t->model.V - 1, n = (int32_t)t->cfg.sample.tokens;
        int32_t *ids = tsr_malloc((size_t)n * sizeof *ids);
        trainer_sample(t, &eot, 1, n, (uint64_t)t->cfg.seed, ids);
        metrics_log_sample(t, ids, n);
        free(ids);
    }
    return TSR_EXIT_OK;
}

void trainer_free(tsr_trainer *t) {
    if (t->gslice) t->ops->free(t->gslice);
    free(t->part_counts);
    free(t->part_displs);
    if (t->m) t->ops->free(t->m);
    if (t->v) t->ops->free(t->v);
    free(t->inputs);
    free(t->targets);
    if (t->model.params) model_free(&t->model);
    if (t->train) dataset_close(t->train);
    if (t->val) dataset_close(t->val);
    if (t->metrics) fclose(t->metrics);
    memset(t, 0, sizeof *t);
}
