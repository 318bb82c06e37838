/* gpu_train_step.c — a step of the CUDA trainer (gpu_train_int.h): the forward and backward
 * passes of the lm objective, LoRA's, and DPO's or GRPO's own pass, the step's losses and MoE
 * statistics read once, the gradients summed over the ranks, their norm, and the update (AdamW,
 * Muon), each timed as a phase under TSR_PROFILE=1. */
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "gpu/gpu_pp.h"
#include "gpu/gpu_profile.h"
#include "gpu/gpu_train_int.h"
#include "model/decoder.h"

static void unit_ready(void *ctx, int u) {
    struct tsr_gpu_train *gt = ctx;
    if (gt->ring_on) gpu_comm_after(gt->comm, gt->ring.comm);
    if (gt->tp_on) gpu_comm_after(gt->comm, gt->tp.comm);
    gpu_comm_allreduce(gt->comm, gt->g.grads, gt->off + (size_t)u * TSR_P_COUNT,
                       gt->len + (size_t)u * TSR_P_COUNT, gt->n_slices[u]);
}

/* microbatch b's losses and MoE statistics (the last forward's) into the step's, queued */
static void stage(gpu_train_ctx *c, int64_t b) {
    struct tsr_gpu_train *gt = c->state;
    if (b + c->micro > c->per_rank)
        tsr_die(TSR_EXIT_INTERNAL, "GPU step: microbatch rows %lld..%lld past the rank's %lld",
                (long long)b, (long long)(b + c->micro), (long long)c->per_rank);
    gpu_model_stage_losses(&gt->g, gt->losses + b * c->T, c->micro, c->T);
    if (gt->moe_sb) gpu_model_moe_stage(&gt->g, gt->moe_stage + (size_t)(b / c->micro) * gt->moe_sb);
}

/* The step's loss sum, and its MoE statistics added to c->moe: one copy of each to the host (the
 * step's one wait for the passes), then each microbatch's in order, as when every microbatch was
 * read on its own (the same bits). scale: the step's loss scale (the statistics' weight). */
static double staged_sums(gpu_train_ctx *c, float scale) {
    struct tsr_gpu_train *gt = c->state;
    const size_t sb = gt->moe_sb;
    tcu_memcpy_d2h(gt->losses_host, gt->losses, (size_t)c->per_rank * c->T * sizeof(float), gt->s);
    const int64_t nmicro = (c->per_rank + c->micro - 1) / c->micro;
    if (sb) tcu_memcpy_d2h(gt->moe_stage_host, gt->moe_stage, (size_t)nmicro * sb, gt->s);
    double sum = 0.0;
    const tsr_ring *g = gt->ring_on ? &gt->ring.ring : NULL;
    const int T = g ? c->T / g->N : c->T; /* (context parallelism: the rank's share) */
    for (int64_t b = 0; b < c->per_rank; b += c->micro) {
        const int32_t *tg = c->targets + b * c->T;
        if (g) tg = gt->ring_tg, ring_split(gt->ring_tg, c->targets + b * c->T, sizeof(int32_t),
                                            c->micro, g->N, g->r, c->T);
        sum += dec_sum_losses(gt->losses_host + b * c->T, tg, (size_t)c->micro * T);
        if (sb)
            gpu_model_moe_stats_add_staged(&gt->g, gt->moe_stage_host + (size_t)(b / c->micro) * sb,
                                           tg, c->micro, T, scale, c->moe);
    }
    if (g) g->comm.sum(g->comm.ctx, &sum, 1); /* the group's sequences' sum (model_forward's) */
    return sum;
}

/* The gradients a step computes, zeroed: LoRA's adapters', else the dense ones (the shard's under
 * zero1 / zero3 / hsdp) and, under parallel.expert, the experts' */
static void zero_grads(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    if (gt->lora_on) {
        tcu_zero(gt->lora.g, gt->lora.n * sizeof(float), gt->s);
        return;
    }
    if (gt->sharded) gpu_shard_zero_grads(&gt->sh);
    else tcu_zero(gt->g.grads, c->model->n_params * sizeof(float), gt->s);
    if (gt->ep_on) gpu_ep_zero_grads(&gt->ep);
}

/* What sums a dense step's gradients over the ranks once a unit's are complete (the backward's
 * ready hook, with *ctx): ddp all-reduces the unit, zero1 reduce-scatters it; NULL for one rank,
 * and for zero3 / hsdp, whose source reduce-scatters in every backward (gpu_model.h) */
typedef void (*unit_ready_fn)(void *ctx, int unit);
static unit_ready_fn unit_reducer(struct tsr_gpu_train *gt, void **ctx) {
    *ctx = gt->sharded ? (void *)&gt->sh : (void *)gt;
    if (gt->sharded) return gt->sh.zero1 ? gpu_shard_zero1_ready : NULL;
    return gt->comm ? unit_ready : NULL;
}

/* LoRA: the adapters' gradients summed over the ranks (small: one all-reduce after the backward) */
static void lora_reduce(struct tsr_gpu_train *gt) {
    if (!gt->comm) return;
    size_t off = 0, len = gt->lora.n;
    gpu_comm_allreduce(gt->comm, gt->lora.g, &off, &len, 1);
}

/* LoRA: the microbatches with the step's dropout (rows numbered as on the CPU: lora_pass_row0),
 * then the adapters' gradients summed over the ranks (small: one all-reduce after the backward) */
static double lora_compute(gpu_train_ctx *c, float scale) {
    struct tsr_gpu_train *gt = c->state;
    tsr_lora *lo = &gt->lora;
    zero_grads(c);
    for (int64_t b = 0; b < c->per_rank; b += c->micro) {
        const int32_t *in = c->inputs + b * c->T, *tg = c->targets + b * c->T;
        lora_set_pass(lo, 1, c->lora_key, lora_pass_row0(c->data_rank, c->per_rank, b, c->T));
        gt->g.starts = c->starts ? c->starts + b * c->T : NULL;
        gpu_model_forward(&gt->g, in, tg, c->micro, c->T, scale);
        stage(c, b); /* what the forward leaves: losses, routing statistics */
        gpu_model_backward(&gt->g, in, c->micro, c->T, NULL, NULL);
    }
    gt->g.starts = NULL;
    const double loss_sum = staged_sums(c, scale);
    lora_set_pass(lo, 0, 0, 0); /* evaluations: no dropout */
    lora_reduce(gt);
    return loss_sum;
}

static double dense_compute(gpu_train_ctx *c, float scale);

/* DPO and GRPO (c->objective_pass: posttrain/dpo.h, posttrain/grpo.h): the trainer's pass over the rank's
 * pairs or rollout rows runs its forwards and weighted backwards here through the host model's
 * hooks; the gradients are zeroed before it and summed over the ranks after its last backward
 * (no overlap with it: the pass is the trainer's, which does not say which backward is the
 * last): ddp's all-reduces, zero1's reduce-scatters; zero3 and hsdp reduce-scatter each unit in
 * the backward itself (the source's put), as in the lm objective. */
static double objective_compute(gpu_train_ctx *c, float scale) {
    struct tsr_gpu_train *gt = c->state;
    zero_grads(c);
    const double loss_sum = c->objective_pass(c->owner, scale);
    if (gt->lora_on) {
        lora_reduce(gt);
        return loss_sum;
    }
    /* every unit complete, in the order the backward completes them when it calls ready itself
     * (src/model/decoder_backward.c backward_pass: layers L..1 as units L..1, then unit 0) */
    void *ctx;
    const unit_ready_fn ready = unit_reducer(gt, &ctx);
    for (int u = c->model->L; ready && u >= 0; u--) ready(ctx, u);
    if (gt->sharded) gpu_shard_finish_grads(&gt->sh);
    if (gt->ep_on) gpu_ep_reduce(&gt->ep); /* (as dense_compute) */
    return loss_sum;
}

/* the forward and backward passes of a step, timed as one phase under TSR_PROFILE=1 */
double gtrain_compute(gpu_train_ctx *c, float scale) {
    struct tsr_gpu_train *gt = c->state;
    gpu_prof_step_begin();
    const int ps = gpu_prof_begin(gt->s, "step: forward+backward", 0, 0, 0);
    const double loss = gt->pp              ? gpu_pp_compute(c, scale)
                        : c->objective_pass ? objective_compute(c, scale)
                        : gt->lora_on     ? lora_compute(c, scale)
                                          : dense_compute(c, scale);
    gpu_prof_end(gt->s, ps);
    return loss;
}

static double dense_compute(gpu_train_ctx *c, float scale) {
    struct tsr_gpu_train *gt = c->state;
    zero_grads(c);
    /* the last microbatch completes each layer's gradients: their sums (ddp) or reduce-scatters
     * (zero1) start right away; zero3 / hsdp reduce-scatter every microbatch's (the source) */
    void *ctx;
    const unit_ready_fn ready = unit_reducer(gt, &ctx);
    gtrain_mtp_begin(c);
    for (int64_t b = 0; b < c->per_rank; b += c->micro) {
        const int32_t *in = c->inputs + b * c->T, *tg = c->targets + b * c->T;
        int last = b + c->micro >= c->per_rank;
        gt->g.starts = c->starts ? c->starts + b * c->T : NULL;
        gpu_model_forward(&gt->g, in, tg, c->micro, c->T, scale);
        stage(c, b); /* what the forward leaves: losses, routing statistics */
        gtrain_mtp_pass(c, in, tg, scale, last ? ready : NULL, ctx); /* (MTP's: its pp_dy) */
        gpu_model_backward(&gt->g, in, c->micro, c->T, last ? ready : NULL, ctx);
    }
    gt->g.starts = NULL, gt->g.pp_dy = NULL;
    const double loss_sum = staged_sums(c, scale);
    if (gt->sharded) gpu_shard_finish_grads(&gt->sh);
    if (gt->ep_on) gpu_ep_reduce(&gt->ep);
    if (gt->tp_on) gpu_tp_finish_grads(&gt->tp, gt->g.grads); /* (the replicated tensors') */
    return loss_sum;
}

static double dense_sumsq(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    if (gt->sharded && !gt->lora_on) return gpu_shard_grad_sumsq(&gt->sh);
    if (gt->comm) gpu_comm_wait(gt->comm);
    float sq = 0.0f;
    tcu_zero(gt->acc, sizeof(float), gt->s);
    if (gt->lora_on) tcu_sumsq(gt->acc, gt->lora.g, gt->lora.n, gt->s);
    else tcu_sumsq(gt->acc, gt->g.grads, c->model->n_params, gt->s);
    tcu_memcpy_d2h(&sq, gt->acc, sizeof sq, gt->s);
    return gt->tp_on ? gpu_tp_sumsq(&gt->tp, sq, gt->g.grads, gt->acc) : sq;
}

/* the dense tensors', plus the experts' (every expert once) under parallel.expert */
double gtrain_grad_sumsq(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    const int ps = gpu_prof_begin(gt->s, "step: gradient norm", 0, 0, 0);
    const double sq = dense_sumsq(c) + (gt->ep_on ? gpu_ep_sumsq(&gt->ep) : 0.0);
    gpu_prof_end(gt->s, ps);
    return gt->pp ? gpu_pp_sum_stages(c, sq) : sq; /* (the global norm: every stage's) */
}

static void update(gpu_train_ctx *c, double lr, float gscale, int step);

/* AdamW, timed as a phase under TSR_PROFILE=1 */
void gtrain_update(gpu_train_ctx *c, double lr, float gscale, int step) {
    struct tsr_gpu_train *gt = c->state;
    const int ps = gpu_prof_begin(gt->s, "step: AdamW", 0, 0, 0);
    update(c, lr, gscale, step);
    gpu_prof_end(gt->s, ps);
}

static void update(gpu_train_ctx *c, double lr, float gscale, int step) {
    struct tsr_gpu_train *gt = c->state;
    const tsr_model *m = c->model;
    const tsr_optim_config *o = c->optim;
    if (gt->ep_on && gt->mu.on) /* (the experts' store: every matrix Muon's) */
        gpu_muon_flat(&gt->mu, gt->mu.p.ep, gt->mu.p.n_ep, gt->ep.w, gt->ep.wbf, gt->ep.g,
                      gt->ep.mo, muon_lr(o, lr), gscale);
    else if (gt->ep_on) gpu_ep_update(&gt->ep, o, c->decay[TSR_P_EXPW1], lr, gscale, step);
    if (gt->sharded && !gt->lora_on) {
        gpu_shard_update(&gt->sh, c, &gt->mu, lr, gscale, step);
        c->muon_sent = gt->mu.sent;
        return;
    }
    if (gt->lora_on) { /* the adapters only (no bf16 copy: the adapter ops read fp32) */
        tsr_lora *lo = &gt->lora;
        tcu_adamw_update(lo->w, NULL, lo->g, lo->m, lo->v, lo->n, (float)lr, (float)o->beta1,
                         (float)o->beta2, (float)o->eps, c->lora_decay, gscale, step, gt->s);
        return;
    }
    tcu_adamw_seg segs[TSR_P_COUNT]; /* every dense tensor, one launch (issue 25, item 5) */
    int n = 0;
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const tsr_param_info *p = &m->params_info[i];
        if (!p->numel || p->ep) continue; /* (the experts' store: gpu_ep_update) */
        if (gt->mu.on && muon_plan_tensor(i)) continue; /* (gpu_muon_flat) */
        segs[n++] = (tcu_adamw_seg){p->offset, p->numel, c->decay[i]};
    }
    tcu_adamw_update_segments(segs, n, gt->g.params, gt->g.wbf, gt->g.grads, gt->m, gt->v,
                              (float)lr, (float)o->beta1, (float)o->beta2, (float)o->eps, gscale,
                              step, gt->s);
    if (gt->mu.on)
        gpu_muon_flat(&gt->mu, gt->mu.p.mx, gt->mu.p.n, gt->g.params, gt->g.wbf, gt->g.grads,
                      gt->m, muon_lr(o, lr), gscale);
}
