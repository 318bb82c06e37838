/* trainer.c — the step's story (trainer.h): the batch loaded (or the objective's rollouts), the
 * pass of the objective over it by the run's strategy (ddp, zero1, fsdp, lora, device), the
 * gradients reduced and measured, the spike guard's verdict, the update through the optimizer
 * slot (optim/optim.h) with schedule and clipping, the weights gathered; the evaluation. The start
 * and the end are trainer_init.c's, the loop around the steps trainer_run.c's, the test-only
 * faults trainer_faults.c's; they share train/trainer_int.h. */
#include "trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "train/checkpointing.h"
#include "run/objective.h"
#include "train/train_plan.h"
#include "train/pipeline.h"
#include "train/sdc.h"
#include "telemetry/metrics.h"
#include "train/train_gpu.h"
#include "train/trainer_int.h"
#include "watchdog/watchdog.h"

/* The step's strategies (chosen once, by trainer_pick_strategy): how this run computes, sums and
 * measures its gradients, which part of the weights it updates, and how updated weights come back
 * to the ranks that compute. The update itself is the optimizer slot's (optim/optim.h), whatever
 * the optimizer: the strategy only names the part. ddp: every rank owns the whole flat buffer,
 * gradients are all-reduced; zero1: rank r owns its part [shard_lo, shard_hi) and its summed
 * gradients (reduce-scatter into gslice), the updated parts are all-gathered; fsdp (zero3, hsdp):
 * weights, gradients and moments are fsdp shards, the layers' gradients are reduce-scattered
 * during backward; lora: the adapters, replicated; device (device = cuda): the library sums the
 * gradients during backward and runs the optimizer on the device. */
typedef struct trainer_strategy {
    const char *name;
    /* forward and backward over this rank's batch in microbatches, gradients scaled by scale:
     * returns this rank's loss sum */
    double (*compute)(tsr_trainer *t, float scale);
    void (*reduce)(tsr_trainer *t);   /* the gradients summed over the ranks into the owned part */
    double (*sumsq)(tsr_trainer *t);  /* squared norm of the summed gradients, equal on all ranks */
    /* the part of the weights this rank updates, for the optimizer slot; NULL: the device's
     * library updates its own (device = cuda) */
    optim_part (*owned)(tsr_trainer *t);
    void (*gather)(tsr_trainer *t);   /* the updated weights to every rank that computes */
    size_t (*mem_peak)(void);         /* the training allocator's peak bytes */
} trainer_strategy;

static void zero_flat_grads(tsr_trainer *t) {
    t->be.ops->zero(t->model.grads, t->model.n_params * sizeof(float));
}

static void zero_shard_grads(tsr_trainer *t) { fsdp_zero_grads(&t->part.fsdp); }

/* MoE: the microbatch's statistics into the step's (docs/moe.md) */
static void moe_stats_add(tsr_trainer *t, const int32_t *tg, float scale) {
    if (t->out.moe) model_moe_stats_add(&t->model, tg, t->micro, t->T, scale, t->out.moe);
}


/* CPU: the microbatches' forward and backward (the gradients accumulate), after zero; or the
 * objective's own pass (DPO's over pairs, GRPO's over completions: run/objective.h). */
static double cpu_compute(tsr_trainer *t, float scale, void (*zero)(tsr_trainer *)) {
    tsr_model *m = &t->model;
    double loss_sum = 0.0;
    zero(t);
    if (t->part.ep_on) ep_zero_grads(&t->part.ep);
    if (t->objective->pass || t->part.pp_on) { /* a pass of the objective's own (dpo, grpo:
                                                 * run/objective.h), the pipeline's schedule */
        loss_sum = t->objective->pass
                       ? t->objective->pass(&t->run, t->run.objective_state, scale)
                       : pipeline_compute(t, scale);
        if (t->part.lora_on) lora_set_pass(&t->part.lora, 0, 0, 0); /* (evaluations: none) */
        trainer_fault_nan(t);
        sdc_replay_first(t, loss_sum); /* (dpo: its pass is the replay's unit) */
        if (t->part.pp_on) sdc_replay_whole(t, loss_sum); /* (the schedule's: the same) */
        return loss_sum;
    }
    sdc_replay_begin(t); /* (the fingerprints of a deterministic replay: train/sdc.h) */
    model_mtp_reset(m);  /* (after a replay's recomputation, whose forwards add to it) */
    for (int64_t b = 0; b < t->per_rank; b += t->micro) {
        const int32_t *in = t->data.inputs + b * t->T, *tg = t->data.targets + b * t->T;
        run_lora_pass(&t->run, b);
        m->starts = t->data.starts ? t->data.starts + b * t->T : NULL;
        loss_sum += model_forward(m, in, tg, t->micro, t->T);
        moe_stats_add(t, tg, scale);
        model_backward(m, in, tg, t->micro, t->T, scale);
        if (b == 0) sdc_replay_first(t, loss_sum);
    }
    m->starts = NULL;
    if (t->part.lora_on) lora_set_pass(&t->part.lora, 0, 0, 0); /* evaluations: no dropout */
    trainer_fault_nan(t);
    sdc_replay_whole(t, loss_sum); /* (what the rank hands to the reduction) */
    return loss_sum;
}

static double flat_compute(tsr_trainer *t, float scale) {
    return cpu_compute(t, scale, zero_flat_grads);
}

static double shard_compute(tsr_trainer *t, float scale) {
    return cpu_compute(t, scale, zero_shard_grads);
}

static void nothing(tsr_trainer *t) { (void)t; }

/* LoRA (model/model_lora.h): the adapters' gradients, replicated on every rank whatever the
 * sharding; the base has none */
static void lora_zero_grads(tsr_trainer *t) {
    t->be.ops->zero(t->part.lora.g, t->part.lora.n * sizeof(float));
}

static double lora_compute(tsr_trainer *t, float scale) {
    return cpu_compute(t, scale, lora_zero_grads);
}

static void lora_reduce(tsr_trainer *t) {
    if (t->dist.world > 1) dist_allreduce_sum_f32(t->part.lora.g, t->part.lora.n);
}

static double lora_sumsq(tsr_trainer *t) {
    return t->be.ops->sumsq(t->part.lora.g, t->part.lora.n);
}

/* tensor parallelism: the rank's gradients that the tensor group sums (the replicated tensors'
 * shares; model/model_tp.h), before the data-parallel sums (a sum either way: every rank then
 * sends the same, model_tp.h tp_step_bytes) */
static void tp_finish(tsr_trainer *t) {
    if (t->part.tp_on)
        tp_finish_grads(&t->part.tp, &t->model, t->model.grads, 0, t->model.n_params);
    if (t->part.pp_on) pipeline_tied_grads(t); /* (the two copies of tied embeddings) */
}

static void ddp_reduce(tsr_trainer *t) {
    tp_finish(t);
    if (!sdc_fault_reduce(t, t->model.grads)) /* (test-only: a flipped bit on the wire) */
        trainer_flat_allreduce(t, t->model.grads, t->model.n_params);
}

static void zero1_reduce(tsr_trainer *t) {
    tp_finish(t);
    trainer_flat_reduce_scatter(t, t->model.grads, t->part.gslice);
}

/* tensor parallelism under zero3 / hsdp: the shard's pieces as spans of the split flat layout
 * (n of them; freed by the caller) */
static tp_span *shard_spans(tsr_trainer *t, size_t *n) {
    const tsr_fsdp *f = &t->part.fsdp;
    *n = (size_t)f->n_pieces[f->grank];
    tp_span *sp = tsr_malloc((*n ? *n : 1) * sizeof *sp);
    for (size_t i = 0; i < *n; i++) {
        const fsdp_piece *p = &f->pieces[f->grank][i];
        sp[i] = (tp_span){p->flat, p->len, f->grads + p->shard};
    }
    return sp;
}

/* the layers' gradients are reduce-scattered already: the root's, and hsdp's replica sum; then
 * (tensor parallelism) the shard's partial gradients summed over the tensor group */
static void fsdp_reduce(tsr_trainer *t) {
    if (t->part.pp_on) pipeline_tied_grads(t); /* (in the gathered root's, before its sum) */
    fsdp_finish_grads(&t->part.fsdp);
    if (!t->part.tp_on) return;
    size_t n;
    tp_span *sp = shard_spans(t, &n);
    tp_finish_spans(&t->part.tp, &t->model, sp, n);
    free(sp);
}

/* the summed gradients of the owned part [shard_lo, shard_hi) of the flat layout */
static float *owned_grads(tsr_trainer *t) {
    return t->part.zero1 ? t->part.gslice : t->model.grads;
}

/* the squared norm of the owned part's gradients g (flat [lo, hi)): under tensor parallelism
 * the elements this rank counts (each of the whole model's once over the group) */
static double owned_sumsq(tsr_trainer *t, const float *g, size_t lo, size_t hi) {
    if (t->part.tp_on) return tp_sumsq(&t->part.tp, &t->model, g, lo, hi);
    if (t->part.pp_on) return pipeline_sumsq(t, g, lo, hi); /* (a tied wte once) */
    return t->be.ops->sumsq(g, hi - lo);
}

static double ddp_sumsq(tsr_trainer *t) {
    double sq = owned_sumsq(t, t->model.grads, t->part.shard_lo, t->part.shard_hi);
    if (t->part.tp_on) dist_group_allreduce_sum_f64(t->part.tp.group, &sq, 1);
    return t->part.pp_on ? pipeline_sum_stages(t, sq) : sq;
}

static double zero1_sumsq(tsr_trainer *t) {
    double sq = owned_sumsq(t, t->part.gslice, t->part.shard_lo, t->part.shard_hi);
    dist_allreduce_sum_f64(&sq, 1); /* (every part of every split once) */
    return sq;
}

static double fsdp_sumsq(tsr_trainer *t) {
    double sq;
    if (t->part.tp_on) { /* (the elements this rank counts) */
        size_t n;
        tp_span *sp = shard_spans(t, &n);
        sq = tp_sumsq_spans(&t->part.tp, &t->model, sp, n);
        free(sp);
    } else if (t->part.pp_on) { /* (a tied wte once) */
        sq = pipeline_shard_sumsq(t);
    } else {
        sq = t->be.ops->sumsq(t->part.fsdp.grads, t->part.fsdp.shard_n);
    }
    dist_group_allreduce_sum_f64(t->part.fsdp.group, &sq, 1); /* replicas are equal */
    if (t->part.tp_on) dist_group_allreduce_sum_f64(t->part.tp.group, &sq, 1);
    return t->part.pp_on ? pipeline_sum_stages(t, sq) : sq;
}

/* the parts the optimizer slot updates (optim/optim.h) */
static optim_part flat_owned(tsr_trainer *t) {
    return (optim_part){OPTIM_PART_FLAT, t->model.params, owned_grads(t), t->part.m, t->part.v,
                        t->part.shard_lo, t->part.shard_hi};
}

static optim_part shard_owned(tsr_trainer *t) {
    tsr_fsdp *f = &t->part.fsdp;
    return (optim_part){OPTIM_PART_SHARD, f->params, f->grads, t->part.m, t->part.v, 0, f->shard_n};
}

static optim_part lora_owned(tsr_trainer *t) {
    tsr_lora *lo = &t->part.lora;
    return (optim_part){OPTIM_PART_LORA, lo->w, lo->g, lo->m, lo->v, 0, lo->n};
}

/* parallel.expert: the experts' store, on every rank of their EDP group (model_ep.h) */
static optim_part ep_owned(tsr_trainer *t) {
    tsr_ep *ep = &t->part.ep;
    return (optim_part){OPTIM_PART_EXPERTS, ep->w, ep->g, ep->m, ep->v, 0, ep->n};
}

/* The update of what this rank owns at learning rate lr, gradients times gscale: the optimizer
 * slot over the strategy's part, then, parallel.expert on the host, over the experts' store;
 * device = cuda: the library's (its experts' too, src/gpu/gpu_ep.h) */
static void update(tsr_trainer *t, double lr, float gscale) {
    const trainer_strategy *s = t->be.strategy;
    if (!s->owned) {
        gpu_train_update(t->be.gpu, lr, gscale, (int)t->optim_step);
        return;
    }
    optim_part p = s->owned(t);
    optim_step(&t->part.optim, &p, lr, gscale, t->optim_step);
    if (t->part.ep_on) {
        p = ep_owned(t);
        optim_step(&t->part.optim, &p, lr, gscale, t->optim_step);
    }
}

static void zero1_gather(tsr_trainer *t) { trainer_flat_allgather(t, t->model.params); }

static void fsdp_gather(tsr_trainer *t) { fsdp_params_changed(&t->part.fsdp); }

static double device_compute(tsr_trainer *t, float scale) {
    return gpu_train_compute(run_gpu(&t->run), scale);
}

static double device_sumsq(tsr_trainer *t) { return gpu_train_grad_sumsq(t->be.gpu); }

static size_t cpu_mem_peak(void) { return cpu_ops_peak_bytes(); }

static const trainer_strategy strategy_ddp = {
    "ddp", flat_compute, ddp_reduce, ddp_sumsq, flat_owned, nothing, cpu_mem_peak};
static const trainer_strategy strategy_zero1 = {
    "zero1", flat_compute, zero1_reduce, zero1_sumsq, flat_owned, zero1_gather, cpu_mem_peak};
/* the base's weights never change: nothing to gather */
static const trainer_strategy strategy_lora = {
    "lora", lora_compute, lora_reduce, lora_sumsq, lora_owned, nothing, cpu_mem_peak};
static const trainer_strategy strategy_fsdp = {
    "fsdp", shard_compute, fsdp_reduce, fsdp_sumsq, shard_owned, fsdp_gather, cpu_mem_peak};
/* the gradients are summed during backward, the weights refreshed by the library's update */
static const trainer_strategy strategy_device = {
    "device", device_compute, nothing, device_sumsq, NULL, nothing, gpu_train_mem_peak};

const trainer_strategy *trainer_pick_strategy(const tsr_trainer *t) {
    if (t->be.gpu) return &strategy_device;
    if (t->part.lora_on) return &strategy_lora;
    if (t->part.fsdp_on) return &strategy_fsdp;
    return t->part.zero1 ? &strategy_zero1 : &strategy_ddp;
}

/* The activations for t->micro on every rank: the number of ranks that could not allocate them
 * (then every rank gives its back). Collective. */
static int64_t try_acts(tsr_trainer *t) {
    int64_t failed = (t->be.gpu       ? gpu_train_try_acts(run_gpu(&t->run), t->micro)
                      : t->part.pp_on ? pipeline_try_acts(t) /* (a set a chunk) */
                                      : model_try_alloc_acts(&t->model, t->micro, t->T)) != 0;
    dist_allreduce_sum_i64(&failed, 1); /* every rank learns of any rank's failure */
    if (failed && t->be.gpu) gpu_train_free_acts(t->be.gpu);
    else if (failed && t->part.pp_on) pipeline_free_acts(t);
    else if (failed) model_free_acts(&t->model);
    return failed;
}

/* The run cannot fit t->micro sequences on `failed` ranks: the memory plan printed, the reason in
 * msg. */
static void acts_refusal(tsr_trainer *t, int64_t failed, char *msg, size_t cap) {
    double need = (double)(t->be.gpu ? gpu_train_acts_bytes(t->be.gpu, t->micro)
                                  : model_acts_bytes(&t->model, t->micro, t->T)) / (1024.0 * 1024.0);
    trainer_plan_print(t, 0);
    if (t->be.gpu) train_gpu_print_plan(t);
    snprintf(msg, cap, "out of memory on %lld of %d ranks allocating the activations for a "
             "microbatch of %d x %d (%.1f MiB, plan above)%s: use activation checkpointing, "
             "parallel.sharding = zero3, more ranks, a shorter seq_len or a smaller model",
             (long long)failed, t->dist.world, t->micro, t->T, need,
             t->auto_micro ? "; micro_batch = auto is down to 1 sequence" : "");
}

void trainer_ensure_acts(tsr_trainer *t) {
    if (trainer_acts_B(t) > 0) return;
    for (int64_t failed; (failed = try_acts(t));) {
        if (!t->auto_micro || t->micro == 1) {
            char msg[600];
            acts_refusal(t, failed, msg, sizeof msg);
            tsr_fail_all(TSR_EXIT_USAGE, "%s", msg);
        }
        int next = trainer_micro_at_most(t, t->micro / 2);
        metrics_log_micro(&t->run, t->micro, next, failed);
        t->micro = next;
    }
    if (t->auto_micro) metrics_log_micro(&t->run, 0, t->micro, 0);
}

int trainer_acts_fit(tsr_trainer *t) {
    if (trainer_acts_B(t) > 0) return 0;
    const int micro = t->micro;
    if (t->auto_micro) t->micro = 1; /* where its halving ends */
    int64_t failed = try_acts(t);
    if (failed) {
        char msg[600];
        acts_refusal(t, failed, msg, sizeof msg);
        if (t->dist.rank == 0) tsr_error("%s", msg);
    } else if (t->auto_micro) { /* given back: the first step halves down from micro */
        if (t->be.gpu) gpu_train_free_acts(t->be.gpu);
        else model_free_acts(&t->model);
    }
    t->micro = micro;
    return failed ? TSR_EXIT_USAGE : 0;
}

/* The step's data: this rank's part of global batch d loaded; counted targets and samples per
 * stream summed over the ranks (sums[0], sums[1 + k]); a curriculum phase that starts with it
 * restarts the spike window (its loss level may differ). */
static int64_t step_load(tsr_trainer *t, int64_t d, int64_t *sums, tsr_step_stats *st) {
    watchdog_phase(WD_DATA, t->step);
    sums[0] = dataloader_next(&t->data, d);
    trainer_fault_garbage(t, d);
    for (int k = 0; k < t->data.n_streams; k++) sums[1 + k] = t->data.stream_loaded[k];
    dist_view_sum_i64(&t->mesh.data, sums, 1 + (size_t)t->data.n_streams); /* (a context group
                                                                             * counts once) */
    st->phase_switch = d > 0 && mix_phase(&t->data.mix, d) != mix_phase(&t->data.mix, d - 1);
    if (st->phase_switch) guard_restart_window(&t->guard);
    return sums[0];
}

/* The global loss (mean over the counted targets) and the ranks' peak memory. */
static double step_global_loss(tsr_trainer *t, double loss_sum, int64_t counted,
                               tsr_step_stats *st) {
    /* (every rank of a context group holds its sequences' sum: model_forward) */
    if (t->mesh.D > 1) dist_view_sum_f64(&t->mesh.data, &loss_sum, 1);
    double mem[2] = {(double)t->be.strategy->mem_peak(), (double)tsr_peak_rss()};
    if (t->dist.world > 1) dist_allreduce_max_f64(mem, 2);
    st->peak_mem = mem[0], st->peak_rss = mem[1];
    return counted > 0 ? loss_sum / (double)counted : NAN;
}

/* Multi-token prediction: the mean over its depths of their losses over the global batch's
 * counted targets (the main loss's normaliser; src/model/mtp.h) */
static double step_mtp_loss(tsr_trainer *t, double sum, int64_t counted) {
    if (t->mesh.D > 1) dist_view_sum_f64(&t->mesh.data, &sum, 1);
    return counted > 0 ? sum / (double)counted : NAN;
}

/* The spike guard judges before the update, on rank 0's numbers (all-reduced, so equal on every
 * rank unless a reduction differed in the last bit): every rank's guard state and verdict are then
 * the same by construction. */
static void step_judge(tsr_trainer *t, double loss, double norm, tsr_step_stats *st) {
    double judged[2] = {loss, norm};
    if (t->dist.world > 1) dist_bcast(judged, sizeof judged, 0);
    st->verdict = guard_judge(&t->guard, t->step + 1, judged[0], judged[1], st->why, sizeof st->why);
    st->rebaselined = t->guard.rebaselined;
}

/* Counts the judged step; returns whether its update is applied. */
static int step_count(tsr_trainer *t, const tsr_step_stats *st) {
    t->step++;
    int apply = st->verdict == GUARD_OK || st->verdict == GUARD_WARN;
    if (apply) t->optim_step++;
    return apply;
}

/* The optimizer updates of a step (grpo: grpo.updates; else 1) */
static int step_updates(const tsr_trainer *t) {
    return t->objective->updates ? t->objective->updates(&t->cfg) : 1;
}

/* The gradients' multiplier under clipping (optim.grad_clip), 1 when within it. */
static float clip_scale(const tsr_optim_config *o, double norm) {
    return o->grad_clip > 0 && norm > o->grad_clip ? (float)(o->grad_clip / (norm + 1e-6)) : 1.0f;
}

/* Auxiliary-loss-free balancing (docs/moe.md "DeepSeek's router"): the router's correction bias
 * moved by the step's expert loads (summed over the ranks above) in the part of the weights this
 * rank updates, before the gather sends it on (a pipeline stage its own layers'; device = cuda
 * the library's copies); the experts' store and LoRA's adapters hold none (under LoRA the bias
 * stays frozen with the base) */
static void moe_balance(tsr_trainer *t) {
    const trainer_strategy *s = t->be.strategy;
    if (t->out.moe && t->be.gpu) gpu_train_moe_bias(t->be.gpu); /* (the library's weights) */
    if (!t->out.moe || !s->owned) return;
    const optim_part p = s->owned(t);
    /* (a pipeline's part: its own layers' rows of the whole model's loads) */
    double *part = t->part.pp_on ? pipeline_part_moe(t, t->out.moe) : NULL;
    const double *moe = part ? part : t->out.moe;
    if (p.kind == OPTIM_PART_FLAT)
        model_moe_bias_step(&t->model, moe, p.lo, p.w + p.lo, p.hi - p.lo);
    const tsr_fsdp *f = &t->part.fsdp;
    for (int k = 0; p.kind == OPTIM_PART_SHARD && k < f->n_pieces[f->grank]; k++) {
        const fsdp_piece *q = &f->pieces[f->grank][k];
        model_moe_bias_step(&t->model, moe, q->flat, p.w + q->shard, q->len);
    }
    free(part);
}

/* The step's data: the batch loaded, or the objective's rollouts made (grpo); the counted
 * targets (all ranks), -1 when the step failed (st->exit_code set) */
static int64_t step_data(tsr_trainer *t, int64_t d, int64_t *sums, tsr_step_stats *st) {
    if (!t->objective->rollout) return step_load(t, d, sums, st);
    watchdog_phase(WD_DATA, t->step);
    st->phase_switch = 0; /* (no data mix) */
    memset(sums, 0, (1 + (size_t)t->data.n_streams) * sizeof *sums);
    const int64_t counted = t->objective->rollout(&t->run, t->run.objective_state, d);
    st->exit_code = counted < 0 ? TSR_EXIT_DATA : 0;
    sums[1] = t->cfg.global_batch; /* prompts of the stream */
    return counted;
}

/* The pass's gradients: computed (on a replay step, with the replay's verdict: a rank whose
 * buffers lost its microbatches' gradients computes them again), reduced, fingerprinted on a
 * fingerprint step; *norm their norm. Returns this rank's loss sum (st->exit_code set when a
 * replay found a fault). */
static double step_grads(tsr_trainer *t, tsr_step_stats *st, float scale, int first,
                         double *norm) {
    const trainer_strategy *s = t->be.strategy;
    const size_t n_moe = (size_t)t->out.moe_layers * (size_t)(2 + t->model.E);
    double tc = tsr_now();
    double loss_sum = s->compute(t, scale);
    /* MTP's loss sum of this rank, before a replay's forwards add to it (step_update makes it
     * the step's mean) */
    st->mtp_loss = model_mtp_loss_sum(&t->model);
    trainer_fault_compute(t);
    st->compute_time += tsr_now() - tc;
    int redo = 0; /* (a replay step: another rank recomputed a microbatch: train/sdc.h) */
    if (first && (st->exit_code = sdc_replay(t, scale, &redo))) return 0;
    if (redo && t->out.moe) memset(t->out.moe, 0, n_moe * sizeof(double));
    if (redo) { /* its microbatches again */
        loss_sum = s->compute(t, scale);
        st->mtp_loss = model_mtp_loss_sum(&t->model);
    }
    sdc_fault(t, SDC_BEFORE_REDUCE);
    if (t->out.moe && t->dist.world > 1 && first) dist_allreduce_sum_f64(t->out.moe, n_moe);
    if (t->objective->reduce_stats) /* (dpo's sums) */
        t->objective->reduce_stats(&t->run, t->run.objective_state);
    watchdog_phase(WD_REDUCE, t->step);
    s->reduce(t);
    /* the experts' part (model_ep.h); on device = cuda the library's reduce, sumsq and update
     * include it (src/gpu/gpu_ep.h) */
    const int ep_host = t->part.ep_on && !t->be.gpu;
    if (ep_host) ep_reduce(&t->part.ep);
    sdc_fault(t, SDC_AFTER_REDUCE);
    sdc_grads(t); /* (a fingerprint step: the reduced gradients, before the update uses them) */
    double ep_sq = ep_host ? ep_sumsq(&t->part.ep, t->be.ops) : 0.0;
    if (ep_host && t->part.pp_on) ep_sq = pipeline_sum_stages(t, ep_sq); /* (each stage's own) */
    *norm = sqrt(s->sumsq(t) + ep_sq);
    return loss_sum;
}

/* The guard found an outlier: the step replayed before its response (train/sdc.h); an update
 * the guard still applies (guard.action = warn) needs the step's gradients computed again, with
 * the step's MoE statistics kept. Returns st->exit_code. */
static int step_trip(tsr_trainer *t, tsr_step_stats *st, double loss, float scale,
                     double *norm) {
    int redo = 0;
    const char *trigger = isfinite(loss) && isfinite(*norm) ? "outlier" : "non-finite value";
    if ((st->exit_code = sdc_replay_trip(t, scale, trigger, &redo))) return st->exit_code;
    if (!redo || (st->verdict != GUARD_OK && st->verdict != GUARD_WARN)) return 0;
    const size_t n_moe = (size_t)t->out.moe_layers * (size_t)(2 + t->model.E);
    double *moe = t->out.moe ? tsr_malloc(n_moe * sizeof *moe) : NULL;
    if (moe) memcpy(moe, t->out.moe, n_moe * sizeof *moe);
    step_grads(t, st, scale, 0, norm);
    if (moe) memcpy(t->out.moe, moe, n_moe * sizeof *moe), free(moe);
    return st->exit_code;
}

/* One pass of the objective and its update (when applied); the step's first (pass 0) is judged
 * by the spike guard (its verdict applies to the step: a skipped step applies none). Returns
 * whether the update was applied; *loss, *norm the pass's. With grpo.updates = U a step applies
 * up to U AdamW updates but counts one in optim_step (so optim_step <= step, as checkpoints
 * check): pass k's bias-correction step is (optim_step - 1) U + 1 + k, the count of updates a
 * run applying every pass has made (a non-finite later pass, not applied, leaves its number
 * unused). */
static int step_update(tsr_trainer *t, tsr_step_stats *st, int64_t denom, int pass, double lr,
                       double *loss, double *norm) {
    const int first = pass == 0;
    const trainer_strategy *s = t->be.strategy;
    const tsr_optim_config *o = &t->cfg.optim;
    watchdog_phase(WD_COMPUTE, t->step);
    const float scale = denom > 0 ? 1.0f / (float)denom : 0.0f;
    if (first && (st->exit_code = sdc_replay_before(t, scale))) return 0;
    double loss_sum = step_grads(t, st, scale, first, norm);
    if (st->exit_code) return 0;
    *loss = step_global_loss(t, loss_sum, denom, st);
    st->mtp_loss = t->model.D ? step_mtp_loss(t, st->mtp_loss, denom) : NAN;
    if (t->ck.pending) { /* the state changes from here: a background save's copy is done */
        watchdog_phase(WD_CHECKPOINT, t->step);
        checkpointing_before_update(t);
    }
    watchdog_phase(WD_OPTIMIZER, t->step);
    if (first) step_judge(t, *loss, *norm, st);
    if (first && st->verdict != GUARD_OK && step_trip(t, st, *loss, scale, norm)) return 0;
    /* the state at rest since the last comparison (a replay's too), checked before it changes
     * (train/sdc.h) */
    if (first && (st->exit_code = sdc_before_update(t))) return 0;
    /* (grpo.updates: the step's verdict holds; a non-finite pass is not applied) */
    const int apply = first ? step_count(t, st) : isfinite(*loss) && isfinite(*norm);
    if (apply) {
        const int64_t steps = t->optim_step, U = step_updates(t);
        t->optim_step = (steps - 1) * U + 1 + pass; /* the update's bias-correction step */
        update(t, lr, clip_scale(o, *norm));
        t->optim_step = steps;
        if (first) moe_balance(t);
        s->gather(t);
    }
    return apply;
}

void trainer_step(tsr_trainer *t, tsr_step_stats *st) {
    double t0 = tsr_now();
    int64_t d = t->step + t->data.data_offset, sums[1 + TSR_MAX_STREAMS];
    const size_t n_moe = (size_t)t->out.moe_layers * (size_t)(2 + t->model.E);
    if (t->out.moe) memset(t->out.moe, 0, n_moe * sizeof(double));
    st->compute_time = 0.0, st->exit_code = 0;
    sdc_fault(t, SDC_AT_REST);
    int64_t counted = step_data(t, d, sums, st);
    if (st->exit_code) return; /* (nothing applied: the run stops at this step boundary) */
    /* the loss is a mean over the counted targets, (dpo) over the pairs; grpo's pass weighs its
     * tokens itself (run/objective.h) */
    int64_t denom = t->objective->denominator(&t->cfg, counted);
    trainer_ensure_acts(t); /* micro_batch = auto: the batch just loaded runs at the size that fits */
    double lr = sched_lr_at(&t->cfg, t->sched, t->step);
    const int updates = step_updates(t);
    double loss = NAN, norm = NAN, l, n;
    int apply = step_update(t, st, denom, 0, lr, &loss, &norm);
    if (st->exit_code) return; /* (a corruption found before the update: nothing applied) */
    for (int k = 1; apply && k < updates; k++) step_update(t, st, denom, k, lr, &l, &n);
    t->tokens_seen += t->cfg.global_batch * t->T;
    for (int k = 0; apply && k < t->data.n_streams; k++) t->data.stream_seen[k] += sums[1 + k];
    st->step = t->step, st->data_batch = d, st->tokens = counted;
    st->loss = loss, st->lr = lr, st->grad_norm = norm;
    st->step_time = tsr_now() - t0;
    st->exit_code = sdc_after_step(t); /* a fingerprint step compares (train/sdc.h) */
}

double trainer_eval(tsr_trainer *t) {
    if (!t->data.val) return NAN;
    trainer_ensure_acts(t);
    run_eval_scope(&t->run, 1); /* ranks run different numbers of batches (run/run.h) */
    /* the validation loss; dpo: the pairs' DPO loss; grpo: pass@1 (run/objective.h) */
    double loss = t->objective->eval(&t->run, t->run.objective_state);
    run_eval_scope(&t->run, 0);
    return loss;
}
