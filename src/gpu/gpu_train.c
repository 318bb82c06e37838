/* gpu_train.c — device = cuda in the trainer: the entry points of libtessera-cuda-train.so
 * (gpu_train.h). Everything but the table is static: the executable exports wrappers of the same
 * names, which must not capture the library's own calls. */
#include "gpu/gpu_train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu/gpu_comm.h"
#include "gpu/gpu_model.h"
#include "gpu/gpu_shard.h"
#include "train/metrics.h"
#include "train/trainer.h"

struct tsr_gpu_train {
    tsr_gpu_model g;
    tcu_stream s;
    int sharded;          /* zero1 on more than one rank, zero3, hsdp: gpu_shard.h */
    gpu_shard sh;
    gpu_comm *comm;       /* ddp; NULL: one rank and no NCCL (nothing to sum) */
    float *m, *v;         /* ddp: (n_params) AdamW moments */
    float *acc;           /* (1) sum of squares of the gradients */
    int device;
    /* per unit (0: root, l+1: layer l) its tensors' slices in the flat buffer */
    int *n_slices;        /* (units) */
    size_t *off, *len;    /* (units * TSR_P_COUNT) */
    int host_acts;        /* lib_host_model(on) allocated host activations */
};

/* The sharding this run uses on the GPU: 0 ddp, 1 zero1, 3 zero3 / hsdp (zero1 on one rank is
 * ddp, as on the CPU), and the group size. */
static int shard_mode(const tsr_trainer *t, int *G) {
    int W = t->dist.world;
    *G = W;
    if (t->cfg.sharding == TSR_SHARD_ZERO1) return W > 1 ? 1 : 0;
    if (t->cfg.sharding == TSR_SHARD_DDP) return 0;
    int g = W;
    if (trainer_shard_group(&t->cfg, W, t->dist.local_world, &g) == 0) *G = g;
    return 3;
}

/* zero3 / hsdp: what an evaluation (validation loss, ICL) gathers on top of the training state
 * while it runs, the full bf16 weights (gpu_shard_full_weights); 0 without evaluation or under
 * ddp / zero1, whose bf16 weights are whole already. */
static size_t eval_bytes(const tsr_trainer *t) {
    int G, evals = t->cfg.data.val[0] != '\0' || t->cfg.n_icl > 0;
    return evals && shard_mode(t, &G) == 3 ? t->model.n_params * sizeof(tsr_bf16) + 256 : 0;
}

static size_t fixed_bytes(const tsr_trainer *t) {
    const tsr_model *m = &t->model;
    int G, mode = shard_mode(t, &G);
    if (mode) return gpu_shard_bytes(m, mode == 1, G) + eval_bytes(t) + 512;
    return gpu_model_state_bytes(m, GPU_STATE_FULL) + 2 * m->n_params * sizeof(float) + 256;
}

static void lib_print_plan(const tsr_trainer *t) {
    if (t->dist.rank != 0) return;
    const tsr_model *m = &t->model;
    int G, mode = shard_mode(t, &G);
    char a[32], tot[32], st[32], ev[32];
    size_t acts = gpu_model_acts_bytes(m, t->micro, t->T), fixed = fixed_bytes(t);
    size_t evb = eval_bytes(t);
    metrics_human_bytes(a, sizeof a, (double)acts);
    metrics_human_bytes(tot, sizeof tot, (double)(fixed + acts));
    metrics_human_bytes(st, sizeof st, (double)(fixed - evb));
    metrics_human_bytes(ev, sizeof ev, (double)evb);
    if (mode) {
        printf("device memory per rank (cuda, bf16 activations, %s over %d ranks): shards, "
               "gathered weights and communication buffers %s, %s%s%sactivations %s per "
               "microbatch of %d x %d; total %s\n",
               mode == 1 ? "zero1" : G < t->dist.world ? "hsdp" : "zero3", G, st,
               evb ? "full weights while evaluating " : "", evb ? ev : "", evb ? ", " : "", a,
               t->micro, t->T, tot);
        return;
    }
    char w[32], g[32], o[32];
    double nb = (double)m->n_params;
    metrics_human_bytes(w, sizeof w, nb * (double)(sizeof(float) + sizeof(tsr_bf16)));
    metrics_human_bytes(g, sizeof g, nb * sizeof(float));
    metrics_human_bytes(o, sizeof o, nb * 2 * sizeof(float));
    printf("device memory per rank (cuda, bf16 activations): weights %s (fp32 master + bf16 "
           "copy), grads %s, AdamW %s, activations %s per microbatch of %d x %d; total %s\n",
           w, g, o, a, t->micro, t->T, tot);
}

/* The GPU's peak bf16 FLOP/s from its name ("NVIDIA H100 80GB HBM3" -> H100), else 0. */
static double peak_of(const char *name) {
    const char *known[] = {"H100", "H200", "A100"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strstr(name, known[i])) return metrics_peak_flops(known[i], 1);
    return 0.0;
}

static double eval_forward(void *ctx, const int32_t *tokens, const int32_t *targets, int B,
                           int T) {
    tsr_gpu_model *g = ctx;
    gpu_model_forward(g, tokens, targets, B, T, -1.0f);
    return gpu_model_loss_sum(g, targets, B, T);
}

static void eval_scores(void *ctx, const int32_t *tokens, const int32_t *targets, int B, int T,
                        float *losses, int32_t *greedy) {
    tsr_gpu_model *g = ctx;
    gpu_model_forward(g, tokens, targets, B, T, -1.0f);
    gpu_model_token_scores(g, targets, B, T, losses, greedy);
}

/* The host model's evaluation calls (model_forward, model_token_scores) go to the device (g), or
 * back to the host ops (g NULL: sampling on the host weights, shutdown). */
static void route_model(tsr_model *m, tsr_gpu_model *g) {
    m->fwd = g ? eval_forward : NULL;
    m->scores = g ? eval_scores : NULL;
    m->fwd_ctx = g;
}

static int lib_init(tsr_trainer *t) {
    const tsr_model *m = &t->model;
    int count = tcu_device_count(), W = t->dist.world;
    /* every rank needs a GPU of its own (NCCL refuses two ranks on one GPU); the first rank
     * without is named by rank 0 (other ranks' messages are muted during init) */
    int bad = count == 0 ? 1 : W > 1 && t->dist.local_world > count ? 2 : 0;
    double first = bad ? W - t->dist.rank : 0; /* the max names the lowest such rank */
    dist_allreduce_max_f64(&first, 1);
    if (first > 0) {
        int r = W - (int)first;
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        double cnt = t->dist.rank == r ? count : 0;
        dist_allreduce_max_f64(&cnt, 1);
        if (t->dist.rank == 0 && cnt == 0)
            tsr_error("device = \"cuda\": rank %d sees no CUDA device (rank 0: "
                      "CUDA_VISIBLE_DEVICES=%s): request GPUs (sbatch --gpus-per-task=1) or use "
                      "device = \"cpu\"", r, vis ? vis : "(unset)");
        else if (t->dist.rank == 0)
            tsr_error("device = \"cuda\": rank %d shares a node's %d GPU(s) with more ranks: one "
                      "rank per GPU (srun --gpus-per-task=1, or as many ranks per node as GPUs)",
                      r, (int)cnt);
        return TSR_EXIT_USAGE;
    }
    if (!tcu_attention_head_size_ok(m->C / m->NH)) { /* the same on every rank: the config */
        if (t->dist.rank == 0)
            tsr_error("device = \"cuda\": head size model.d_model / model.n_head = %d / %d = %d has "
                      "no attention kernel on the GPU: it must be 32, 64 or 128 (change "
                      "model.n_head, or use device = \"cpu\")", m->C, m->NH, m->C / m->NH);
        return TSR_EXIT_USAGE;
    }
    struct tsr_gpu_train *gt = tsr_calloc(1, sizeof *gt);
    t->gpu = gt;
    gt->device = t->dist.local_rank % count;
    tcu_set_fail_hook(dist_abort); /* a CUDA failure on one rank stops them all */
    tcu_init(gt->device);
    char name[128];
    int sm = 0;
    size_t free_b = 0, total_b = 0;
    tcu_device_info(name, sizeof name, &sm, &free_b, &total_b);
    if (t->cfg.peak_flops <= 0) t->peak_flops = peak_of(name);
    /* the plan against the free memory, before anything large is allocated */
    size_t need = fixed_bytes(t) + gpu_model_acts_bytes(m, t->auto_micro ? 1 : t->micro, t->T);
    double short_by = need > free_b ? (double)(need - free_b) : 0.0;
    dist_allreduce_max_f64(&short_by, 1);
    if (t->dist.rank == 0)
        printf("device: %s (sm %d.%d), %.2f GiB free of %.2f on rank 0 (CUDA device %d)\n", name,
               sm / 10, sm % 10, (double)free_b / (1u << 30), (double)total_b / (1u << 30),
               gt->device);
    if (short_by > 0) {
        if (t->dist.rank == 0)
            tsr_error("device = \"cuda\": the plan needs %.2f GiB per GPU%s, %.2f GiB more than a "
                      "rank has free: use a smaller micro_batch (or \"auto\"), a shorter seq_len, "
                      "more GPUs or a smaller model", (double)need / (1u << 30),
                      t->auto_micro ? " with a microbatch of 1" : "", short_by / (1u << 30));
        return TSR_EXIT_USAGE;
    }
    gt->s = tcu_stream_create();
    int G, mode = shard_mode(t, &G);
    gt->sharded = mode != 0;
    gpu_model_init(&gt->g, m, gt->s,
                   mode == 0 ? GPU_STATE_FULL : mode == 1 ? GPU_STATE_NO_MASTER : GPU_STATE_NONE);
    if (gt->sharded) {
        int rc = gpu_shard_init(&gt->sh, t, &gt->g, gt->s);
        if (rc) return rc;
        gpu_shard_push(&gt->sh, t, 0);
        if (t->dist.rank == 0)
            printf("gradients: reduce-scattered per layer during backward into %s shards "
                   "(groups of %d) by %s\n", mode == 1 ? "zero1" : G < W ? "hsdp" : "zero3", G,
                   gpu_comm_name(gt->sh.group));
        route_model(&t->model, &gt->g);
        return 0;
    }
    gt->m = tcu_malloc(m->n_params * sizeof(float), "AdamW m (fp32)");
    gt->v = tcu_malloc(m->n_params * sizeof(float), "AdamW v (fp32)");
    gt->acc = tcu_malloc(sizeof(float), "gradient norm");
    tcu_zero(gt->m, m->n_params * sizeof(float), gt->s);
    tcu_zero(gt->v, m->n_params * sizeof(float), gt->s);
    gpu_model_upload(&gt->g, m->params);
    /* per-unit slices for the layer-by-layer gradient sums */
    size_t units = (size_t)m->L + 1;
    gt->n_slices = tsr_malloc(units * sizeof(int));
    gt->off = tsr_malloc(units * TSR_P_COUNT * sizeof(size_t));
    gt->len = tsr_malloc(units * TSR_P_COUNT * sizeof(size_t));
    for (size_t u = 0; u < units; u++)
        gt->n_slices[u] = gpu_model_unit_slices(m, (int)u, gt->off + u * TSR_P_COUNT,
                                                gt->len + u * TSR_P_COUNT);
    /* the communicator: needed with more than one rank; with one, NCCL is still used when it
     * loads (the same code path as many ranks), else nothing has to be summed */
    char why[512] = "";
    gt->comm = gpu_comm_open(0, t->dist.rank, gt->s, why, sizeof why);
    if (!gt->comm && t->dist.world > 1) {
        if (t->dist.rank == 0) tsr_error("device = \"cuda\" on %d ranks: %s", t->dist.world, why);
        return TSR_EXIT_USAGE;
    }
    if (t->dist.rank == 0)
        printf("gradients: summed per layer during backward by %s\n",
               gt->comm ? gpu_comm_name(gt->comm) : "nothing (one rank; NCCL not loaded)");
    if (!gt->comm && t->dist.rank == 0) tsr_warn("one rank without NCCL: %s", why);
    route_model(&t->model, &gt->g);
    return 0;
}

static int lib_acts_B(const tsr_trainer *t) { return t->gpu->g.B; }

/* The activations, and room left after them for what the ops allocate later (scratch, cuBLASLt,
 * NCCL's buffers, kernels' local memory): 2% of the device must stay free, and under zero3 / hsdp
 * with evaluation the full weights an evaluation gathers, so a microbatch that fills the GPU backs
 * off here instead of failing in the first backward or the first evaluation. The room is read,
 * not allocated: a trial allocation would count in the allocator's peak (peak_mem_bytes). */
static int lib_try_acts(tsr_trainer *t, int B) {
    if (gpu_model_try_alloc_acts(&t->gpu->g, B, t->T)) return -1;
    size_t free_b = 0, total_b = 0;
    tcu_device_info(NULL, 0, NULL, &free_b, &total_b);
    if (free_b < total_b / 50 + eval_bytes(t)) {
        gpu_model_free_acts(&t->gpu->g);
        return -1;
    }
    return 0;
}

static void lib_free_acts(tsr_trainer *t) { gpu_model_free_acts(&t->gpu->g); }

static size_t lib_acts_bytes(const tsr_trainer *t, int B) {
    return gpu_model_acts_bytes(&t->model, B, t->T);
}

static void unit_ready(void *ctx, int u) {
    struct tsr_gpu_train *gt = ctx;
    gpu_comm_allreduce(gt->comm, gt->g.grads, gt->off + (size_t)u * TSR_P_COUNT,
                       gt->len + (size_t)u * TSR_P_COUNT, gt->n_slices[u]);
}

static double lib_compute(tsr_trainer *t, float scale) {
    struct tsr_gpu_train *gt = t->gpu;
    if (gt->sharded) gpu_shard_zero_grads(&gt->sh);
    else tcu_zero(gt->g.grads, t->model.n_params * sizeof(float), gt->s);
    /* the last microbatch completes each layer's gradients: their sums (ddp) or reduce-scatters
     * (zero1) start right away; zero3 / hsdp reduce-scatter every microbatch's (the source) */
    void (*ready)(void *, int) = gt->comm ? unit_ready : NULL;
    void *ctx = gt;
    if (gt->sharded) ready = gt->sh.zero1 ? gpu_shard_zero1_ready : NULL, ctx = &gt->sh;
    double loss_sum = 0.0;
    for (int64_t b = 0; b < t->per_rank; b += t->micro) {
        const int32_t *in = t->inputs + b * t->T, *tg = t->targets + b * t->T;
        int last = b + t->micro >= t->per_rank;
        gpu_model_forward(&gt->g, in, tg, t->micro, t->T, scale);
        gpu_model_backward(&gt->g, in, t->micro, t->T, last ? ready : NULL, ctx);
        loss_sum += gpu_model_loss_sum(&gt->g, tg, t->micro, t->T);
    }
    if (gt->sharded) gpu_shard_finish_grads(&gt->sh);
    return loss_sum;
}

static double lib_grad_sumsq(tsr_trainer *t) {
    struct tsr_gpu_train *gt = t->gpu;
    if (gt->sharded) return gpu_shard_grad_sumsq(&gt->sh);
    if (gt->comm) gpu_comm_wait(gt->comm);
    float sq = 0.0f;
    tcu_zero(gt->acc, sizeof(float), gt->s);
    tcu_sumsq(gt->acc, gt->g.grads, t->model.n_params, gt->s);
    tcu_memcpy_d2h(&sq, gt->acc, sizeof sq, gt->s);
    return sq;
}

static void lib_update(tsr_trainer *t, double lr, float gscale, int step) {
    struct tsr_gpu_train *gt = t->gpu;
    const tsr_model *m = &t->model;
    const tsr_optim_config *o = &t->cfg.optim;
    if (gt->sharded) {
        gpu_shard_update(&gt->sh, t, lr, gscale, step);
        return;
    }
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const tsr_param_info *p = &m->params_info[i];
        if (!p->numel) continue;
        float wd = trainer_param_decays(o, p->kind) ? (float)o->weight_decay : 0.0f;
        size_t at = p->offset;
        tcu_adamw_update(gt->g.params + at, gt->g.wbf + at, gt->g.grads + at, gt->m + at,
                         gt->v + at, p->numel, (float)lr, (float)o->beta1, (float)o->beta2,
                         (float)o->eps, wd, gscale, step, gt->s);
    }
}

static void lib_pull(tsr_trainer *t) {
    struct tsr_gpu_train *gt = t->gpu;
    if (gt->sharded) {
        gpu_shard_pull(&gt->sh, t, 1);
        return;
    }
    size_t bytes = t->model.n_params * sizeof(float);
    gpu_model_download(&gt->g, t->model.params);
    tcu_memcpy_d2h(t->m, gt->m, bytes, gt->s);
    tcu_memcpy_d2h(t->v, gt->v, bytes, gt->s);
}

static void lib_push(tsr_trainer *t, int with_optim) {
    struct tsr_gpu_train *gt = t->gpu;
    if (gt->sharded) {
        gpu_shard_push(&gt->sh, t, with_optim);
        return;
    }
    size_t bytes = t->model.n_params * sizeof(float);
    gpu_model_upload(&gt->g, t->model.params);
    if (with_optim) {
        tcu_memcpy_h2d(gt->m, t->m, bytes, gt->s);
        tcu_memcpy_h2d(gt->v, t->v, bytes, gt->s);
        tcu_sync(gt->s);
    }
}

/* Collective: the weights come to the host on every rank that needs them (sharded: all, to
 * gather; ddp: rank 0, which samples). */
static void lib_host_model(tsr_trainer *t, int on) {
    struct tsr_gpu_train *gt = t->gpu;
    tsr_model *m = &t->model;
    int sampler = t->dist.rank == 0;
    if (on) {
        if (gt->sharded) gpu_shard_pull(&gt->sh, t, 0);
        else if (sampler) gpu_model_download(&gt->g, m->params);
        if (gt->sharded && !gt->sh.zero1) trainer_host_weights(t, 1);
        route_model(m, NULL);
        if (sampler && m->acts.B == 0) model_alloc_acts(m, 1, t->T), gt->host_acts = 1;
    } else {
        if (gt->host_acts) model_free_acts(m), gt->host_acts = 0;
        if (gt->sharded && !gt->sh.zero1) trainer_host_weights(t, 0);
        route_model(m, &gt->g);
    }
}

static void lib_full_weights(tsr_trainer *t, int on) {
    if (t->gpu->sharded) gpu_shard_full_weights(&t->gpu->sh, on);
}

static size_t lib_mem_peak(void) {
    size_t peak = 0;
    tcu_mem_stats(NULL, &peak);
    return peak;
}

static void lib_free(tsr_trainer *t) {
    struct tsr_gpu_train *gt = t->gpu;
    if (!gt) return;
    gpu_comm_close(gt->comm);
    gpu_shard_free(&gt->sh);
    gpu_model_free(&gt->g);
    tcu_free(gt->m);
    tcu_free(gt->v);
    tcu_free(gt->acc);
    tcu_stream_destroy(gt->s);
    tcu_shutdown();
    free(gt->n_slices);
    free(gt->off);
    free(gt->len);
    free(gt);
    t->gpu = NULL;
    route_model(&t->model, NULL);
}

#ifndef TSR_GPU_BACKEND
#define TSR_GPU_BACKEND "cuda"
#endif

const gpu_train_api tsr_gpu_train_api = {
    .version = TSR_VERSION,
    .trainer_size = sizeof(tsr_trainer),
    .backend = TSR_GPU_BACKEND,
    .init = lib_init,
    .print_plan = lib_print_plan,
    .acts_B = lib_acts_B,
    .try_acts = lib_try_acts,
    .free_acts = lib_free_acts,
    .acts_bytes = lib_acts_bytes,
    .compute = lib_compute,
    .grad_sumsq = lib_grad_sumsq,
    .update = lib_update,
    .pull = lib_pull,
    .push = lib_push,
    .host_model = lib_host_model,
    .full_weights = lib_full_weights,
    .mem_peak = lib_mem_peak,
    .free = lib_free,
};
