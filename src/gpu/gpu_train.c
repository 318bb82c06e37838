/* gpu_train.c — device = cuda in the trainer: the entry points of libtessera-cuda-train.so
 * (gpu_train.h). Everything but the table is static: the executable exports wrappers of the same
 * names, which must not capture the library's own calls. */
#include "gpu/gpu_train.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "crc32c.h"
#include "gpu/gpu_comm.h"
#include "gpu/gpu_ep.h"
#include "gpu/gpu_model.h"
#include "gpu/gpu_muon.h"
#include "gpu/gpu_profile.h"
#include "gpu/gpu_ring.h"
#include "gpu/gpu_shard.h"
#include "model/decoder.h"
#include "model/model_lora.h"

struct tsr_gpu_train {
    tsr_gpu_model g;
    tcu_stream s;
    int sharded;          /* zero1 on more than one rank, zero3, hsdp: gpu_shard.h */
    gpu_shard sh;
    gpu_comm *comm;       /* ddp; NULL: one rank and no NCCL (nothing to sum) */
    float *m, *v;         /* ddp: (n_params) AdamW moments */
    float *acc;           /* (1) sum of squares of the gradients */
    int device;
    int sharing;          /* ranks of this node on this GPU (parallel.gpu_comm = "mpi"; else 1) */
    size_t budget;        /* sharing > 1: this rank's part of the device's free memory at start */
    /* per unit (0: root, l+1: layer l) its tensors' slices in the flat buffer */
    int *n_slices;        /* (units) */
    size_t *off, *len;    /* (units * TSR_P_COUNT) */
    int host_acts;        /* lib_host_model(on) allocated host activations */
    gpu_ep ep;            /* parallel.expert: the experts' store and exchange (gpu_ep.h) */
    int ep_on;
    /* LoRA (c->lora set): the base frozen in bf16 (GPU_STATE_FROZEN), the adapters' store on the
     * device with the host store's layout: w, g, m, v of lora.n floats each, the scratch on the
     * device backend (lora.scratch, allocated with the activations) */
    int lora_on;
    tsr_lora lora;
    /* the step's per-position losses (per_rank x T fp32) and, MoE, its microbatches' routing
     * statistics (a stage of gpu_model_moe_stage_bytes per microbatch, room for per_rank of
     * them): each microbatch's copied in on the device, read once when the step's passes are
     * queued (no wait per microbatch) */
    float *losses, *losses_host;
    unsigned char *moe_stage, *moe_stage_host;
    size_t moe_sb; /* bytes of one microbatch's stage (0: no MoE statistics kept) */
    /* optim.name = muon (gpu_muon.h): its matrices' momentum is m (the shard's, the experts'
     * store's), the iteration's scratch and, sharded, the owners' exchange */
    gpu_muon mu;
    void *pinned[8]; /* lib_pin_host's registrations (host buffers lib_pull writes), NULL-ended */
    /* parallel.context (gpu_ring.h): the ring the decoder runs, and a microbatch's targets as
     * this rank's share (the staged losses are the share's, T / N positions a sequence) */
    int ring_on;
    gpu_ring ring;
    int32_t *ring_tg;
};

/* optim.name = muon: the iteration's buffers (u with flat matrices: ddp, the experts' store)
 * and, sharded, the owners' exchange over the group (gpu_muon.h) */
static size_t muon_bytes(const gpu_train_ctx *c) {
    const int sharded = c->mode != GPU_SHARD_DDP;
    return gpu_muon_bytes(c->model, c->optim, !sharded || c->model->EP > 1, sharded ? c->G : 0);
}

/* device bytes of tsr_gpu_train.losses and .moe_stage */
static size_t losses_bytes(const gpu_train_ctx *c) {
    return ((size_t)c->per_rank * (size_t)c->T * sizeof(float) + 255) / 256 * 256;
}
static size_t moe_stage_bytes(const gpu_train_ctx *c) {
    return ((size_t)c->per_rank * gpu_model_moe_stage_bytes(c->model) + 255) / 256 * 256;
}

/* parallel.expert: the experts' store (gpu_ep.h), beside the flat state */
static size_t expert_bytes(const gpu_train_ctx *c) {
    return c->model->EP > 1 ? gpu_ep_state_bytes(c->model, c->model->EP) : 0;
}

static size_t state_bytes(const gpu_train_ctx *c);

/* the state, the step's losses and MoE statistics (evaluations run on the training's buffers:
 * zero3 / hsdp on the shards, parallel.expert through the exchange; train/train_state.h) */
static size_t fixed_bytes(const gpu_train_ctx *c) {
    return state_bytes(c) + losses_bytes(c) + moe_stage_bytes(c);
}

static size_t state_bytes(const gpu_train_ctx *c) {
    const tsr_model *m = c->model;
    /* LoRA: the bf16 base (whole, or its frozen shard and gathers), the adapters' w, g, m, v,
     * the norm's accumulator */
    if (c->lora && c->mode != GPU_SHARD_DDP)
        return gpu_shard_bytes(m, 0, c->G, 1) + lora_store_bytes(c->lora) + 512;
    if (c->lora)
        return gpu_model_state_bytes(m, GPU_STATE_FROZEN) + lora_store_bytes(c->lora) + 256;
    if (c->mode != GPU_SHARD_DDP)
        return gpu_shard_bytes(m, c->mode == GPU_SHARD_ZERO1, c->G, 0) + expert_bytes(c) +
               muon_bytes(c) + 512;
    return gpu_model_state_bytes(m, GPU_STATE_FULL) + 2 * m->n_params * sizeof(float) +
           expert_bytes(c) + muon_bytes(c) + 256;
}

static size_t lib_plan_bytes(const gpu_train_ctx *c) { return fixed_bytes(c); }

/* LoRA: a pass through the host model's hooks runs as the host model would. Its adapters off
 * (m->lora NULL: DPO's reference, the base) leave the device's off for the pass; else the host
 * adapters' pass (dropout on or off, its key and first row: train/dpo.c sets it per microbatch)
 * becomes the device adapters'. Returns the device adapters, to put back after the pass. */
static struct tsr_lora *follow_host_lora(tsr_gpu_model *g) {
    struct tsr_lora *dev = g->lora;
    const struct tsr_lora *host = g->m->lora;
    if (dev && !host) g->lora = NULL;
    else if (dev) lora_set_pass(dev, host->train, host->key, host->row0);
    return dev;
}

static double eval_forward(void *ctx, const int32_t *tokens, const int32_t *targets, int B,
                           int T) {
    tsr_gpu_model *g = ctx;
    struct tsr_lora *dev = follow_host_lora(g);
    g->starts = g->m->starts; /* the host model's rows' (model_forward's hand-off) */
    gpu_model_forward(g, tokens, targets, B, T, -1.0f);
    g->lora = dev;
    return gpu_model_loss_sum(g, targets, B, T);
}

static void eval_scores(void *ctx, const int32_t *tokens, const int32_t *targets, int B, int T,
                        float *losses, int32_t *greedy) {
    tsr_gpu_model *g = ctx;
    struct tsr_lora *dev = follow_host_lora(g);
    g->starts = g->m->starts; /* the host model's rows' (model_forward's hand-off) */
    gpu_model_forward(g, tokens, targets, B, T, -1.0f);
    g->lora = dev;
    gpu_model_token_scores(g, targets, B, T, losses, greedy);
}

/* DPO: the backward after eval_scores' forward (the same adapters and pass) */
static void eval_backward_weighted(void *ctx, const int32_t *tokens, const int32_t *targets,
                                   int B, int T, const float *dlosses, float moe_w) {
    tsr_gpu_model *g = ctx;
    struct tsr_lora *dev = follow_host_lora(g);
    gpu_model_backward_weighted(g, tokens, targets, B, T, dlosses, moe_w);
    g->lora = dev;
}

/* DPO with MoE: the routing statistics of the last of those forwards */
static void eval_moe_stats(void *ctx, double w, double *acc) {
    gpu_model_moe_stats_add(ctx, w, acc);
}

/* The host model's evaluation calls (model_forward, model_token_scores) and DPO's weighted
 * backward and routing statistics go to the device (g), or back to the host ops (g NULL:
 * sampling on the host weights, shutdown). */
static void route_model(tsr_model *m, tsr_gpu_model *g) {
    m->fwd = g ? eval_forward : NULL;
    m->scores = g ? eval_scores : NULL;
    m->bwd_weighted = g ? eval_backward_weighted : NULL;
    m->moe_stats = g ? eval_moe_stats : NULL;
    m->fwd_ctx = g;
}

/* The activations for B sequences and, under parallel.expert, the exchange's buffers (balanced
 * routing: gpu_ep_exchange_bytes) */
/* a microbatch of B: the activations, parallel.expert's exchange buffers, LoRA's scratch,
 * precision.fp8's operands' scratch */
static size_t acts_bytes(const gpu_train_ctx *c, int B) {
    return gpu_model_acts_bytes(c->model, B, c->T) +
           (c->model->EP > 1 ? gpu_ep_exchange_bytes(c->model, c->model->EP, B, c->T) : 0) +
           (c->lora ? gpu_model_lora_scratch_bytes(c->lora, B * c->T) : 0) +
           (c->fp8 != TSR_FP8_NONE ? gpu_model_fp8_scratch_bytes(c->model, B * c->T, c->fp8_skip) : 0);
}

/* Every rank needs a GPU of its own with NCCL (it refuses two ranks on one GPU); the staged
 * transport (parallel.gpu_comm = "mpi") lets several share one. The first rank without is named
 * by rank 0 (other ranks' messages are muted during init). Collective. */
static int check_devices(const gpu_train_ctx *c, int count) {
    const tsr_dist *d = c->dist;
    int W = d->world;
    int bad = count == 0 ? 1 : W > 1 && !c->comm_staged && d->local_world > count ? 2 : 0;
    double first = bad ? W - d->rank : 0; /* the max names the lowest such rank */
    dist_allreduce_max_f64(&first, 1);
    if (first <= 0) return 0;
    int r = W - (int)first;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    double cnt = d->rank == r ? count : 0;
    dist_allreduce_max_f64(&cnt, 1);
    if (d->rank == 0 && cnt == 0)
        tsr_error("device = \"cuda\": rank %d sees no CUDA device (rank 0: "
                  "CUDA_VISIBLE_DEVICES=%s): request GPUs (sbatch --gpus-per-task=1) or use "
                  "device = \"cpu\"", r, vis ? vis : "(unset)");
    else if (d->rank == 0)
        tsr_error("device = \"cuda\": rank %d shares a node's %d GPU(s) with more ranks: NCCL "
                  "needs one rank per GPU (srun --gpus-per-task=1, or as many ranks per node as "
                  "GPUs), or set parallel.gpu_comm = \"mpi\" to share them (slower)", r, (int)cnt);
    return TSR_EXIT_USAGE;
}

/* The device's name and free memory; the plan against the free memory, before anything large is
 * allocated. Collective. */
static int check_memory(gpu_train_ctx *c, int device) {
    int sm = 0, rank = c->dist->rank, k = c->state->sharing;
    size_t free_b = 0, total_b = 0;
    /* a shared GPU: every rank's context is made (tcu_init) before any reads what is left */
    double sync = 0;
    if (k > 1) dist_allreduce_max_f64(&sync, 1);
    tcu_device_info(c->device_name, sizeof c->device_name, &sm, &free_b, &total_b);
    size_t budget = free_b / (size_t)k;
    c->state->budget = k > 1 ? budget : 0;
    size_t need = fixed_bytes(c) + acts_bytes(c, c->auto_micro ? 1 : c->micro);
    double short_by = need > budget ? (double)(need - budget) : 0.0;
    dist_allreduce_max_f64(&short_by, 1);
    char each[96] = "";
    if (k > 1) snprintf(each, sizeof each, ", shared by %d ranks: %.2f GiB each", k,
                        (double)budget / (1u << 30));
    if (rank == 0)
        printf("device: %s (sm %d.%d), %.2f GiB free of %.2f on rank 0 (CUDA device %d%s)\n",
               c->device_name, sm / 10, sm % 10, (double)free_b / (1u << 30),
               (double)total_b / (1u << 30), device, each);
    if (short_by <= 0) return 0;
    if (rank == 0)
        tsr_error("device = \"cuda\": the plan needs %.2f GiB per %s%s, %.2f GiB more than a "
                  "rank has free: use a smaller micro_batch (or \"auto\"), a shorter seq_len, "
                  "more GPUs%s or a smaller model", (double)need / (1u << 30),
                  k > 1 ? "rank" : "GPU", c->auto_micro ? " with a microbatch of 1" : "",
                  short_by / (1u << 30), k > 1 ? ", fewer ranks per GPU" : "");
    return TSR_EXIT_USAGE;
}

/* precision.fp8_allgather under zero3 / hsdp (gpu_shard.h; not under LoRA: its frozen base is
 * gathered in bf16), on = 0 for GRPO's generation */
static void fp8_gather(gpu_train_ctx *c, int on) {
    struct tsr_gpu_train *gt = c->state;
    if (gt->sharded && !gt->lora_on)
        gpu_shard_fp8_gather(&gt->sh, on && c->fp8 != TSR_FP8_NONE && c->fp8_allgather);
}

/* the FP8 all-gather's layers and bytes (the E4M3 gathers stop 2 layers before the last) */
static void fp8_gather_report(const gpu_train_ctx *c) {
    const struct tsr_gpu_train *gt = c->state;
    if (!gt->sh.fp8_on || c->dist->rank != 0) return;
    int last = gt->g.be.fp8_last < c->model->L - 3 ? gt->g.be.fp8_last : c->model->L - 3;
    printf("precision.fp8_allgather: the forward gathers decoder layers %d to %d with their FP8 "
           "linear weights in E4M3: %zu bytes a rank and forward pass instead of %zu in bf16 "
           "(docs/cuda.md \"FP8\")\n", gt->g.be.fp8_first, last,
           gpu_shard_forward_gather_bytes(&gt->sh, 1), gpu_shard_forward_gather_bytes(&gt->sh, 0));
}

/* zero1, zero3, hsdp: the shards (gpu_shard.h) */
static int init_sharded(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    int rc = gpu_shard_init(&gt->sh, c, &gt->g, gt->s);
    if (rc) return rc;
    gpu_shard_push(&gt->sh, c, 0);
    fp8_gather(c, 1);
    fp8_gather_report(c);
    gpu_muon_init(&gt->mu, c->model, c->optim, gt->s, gt->sh.f, gt->sh.at, gt->sh.group);
    if (gt->mu.on) { /* (optim/optim.h optim_report prints them) */
        c->muon_G = gt->sh.f->G;
        c->muon_step_bytes = muon_plan_step_bytes(&gt->mu.p);
    }
    if (c->dist->rank == 0)
        printf("gradients: reduce-scattered per layer during backward into %s shards "
               "(groups of %d) by %s\n",
               c->mode == GPU_SHARD_ZERO1 ? "zero1" : c->G < c->dist->world ? "hsdp" : "zero3",
               c->G, gpu_comm_name(gt->sh.group));
    return 0;
}

/* ddp's communicator: needed with more than one rank; with one, NCCL is still used when it
 * loads (the same code path as many ranks), else nothing has to be summed */
static int open_replicated_comm(gpu_train_ctx *c, const char *what) {
    struct tsr_gpu_train *gt = c->state;
    const tsr_dist *d = c->dist;
    char why[512] = "";
    gt->comm = gpu_comm_open(mesh_group(c->mesh, TSR_MESH_WORLD), gt->s, why, sizeof why);
    if (!gt->comm && d->world > 1) {
        if (d->rank == 0) tsr_error("device = \"cuda\" on %d ranks: %s", d->world, why);
        return TSR_EXIT_USAGE;
    }
    if (d->rank == 0)
        printf("gradients: %s by %s\n", what,
               gt->comm ? gpu_comm_name(gt->comm) : "nothing (one rank; NCCL not loaded)");
    if (!gt->comm && d->rank == 0) tsr_warn("one rank without NCCL: %s", why);
    return 0;
}

/* LoRA: the frozen base in bf16, whole (ddp; zero1 is the same under LoRA: gpu_model_upload) or
 * as a frozen shard (zero3 / hsdp: gpu_shard.h, gathered unit by unit), the adapters' store on
 * the device from the host's (weights and moments: zero at a fresh start, the checkpoint's after
 * gpu_train_push), replicated on every rank */
static int init_lora(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    tsr_lora *lo = &gt->lora;
    if (gt->sharded) TSR_CHECK(gpu_shard_init(&gt->sh, c, &gt->g, gt->s));
    *lo = *c->lora; /* the layout; the buffers are the device's */
    lo->ops = NULL;
    lo->scratch = NULL, lo->scratch_cap = 0, lo->scratch_be = NULL;
    const size_t bytes = lo->n * sizeof(float);
    lo->w = tcu_malloc(bytes, "LoRA adapters (fp32)");
    lo->g = tcu_malloc(bytes, "LoRA adapter gradients (fp32)");
    lo->m = tcu_malloc(bytes, "LoRA AdamW m (fp32)");
    lo->v = tcu_malloc(bytes, "LoRA AdamW v (fp32)");
    tcu_zero(lo->g, bytes, gt->s);
    gt->acc = tcu_malloc(sizeof(float), "gradient norm");
    gt->lora_on = 1;
    gt->g.lora = lo;
    if (gt->sharded) gpu_shard_push(&gt->sh, c, 0);
    else gpu_model_upload(&gt->g, c->model->params);
    tcu_memcpy_h2d(lo->w, c->lora->w, bytes, gt->s);
    tcu_memcpy_h2d(lo->m, c->lora->m, bytes, gt->s);
    tcu_memcpy_h2d(lo->v, c->lora->v, bytes, gt->s);
    tcu_sync(gt->s);
    return open_replicated_comm(c, "the adapters', summed once after the backward pass,");
}

/* ddp: the whole state on every GPU, the gradients summed per unit (0: root, l+1: layer l) as
 * backward completes it */
static int init_replicated(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    const tsr_model *m = c->model;
    gt->m = tcu_malloc(m->n_params * sizeof(float), "AdamW m (fp32)");
    gt->v = tcu_malloc(m->n_params * sizeof(float), "AdamW v (fp32)");
    gt->acc = tcu_malloc(sizeof(float), "gradient norm");
    tcu_zero(gt->m, m->n_params * sizeof(float), gt->s);
    tcu_zero(gt->v, m->n_params * sizeof(float), gt->s);
    gpu_model_upload(&gt->g, m->params);
    gpu_muon_init(&gt->mu, m, c->optim, gt->s, NULL, NULL, NULL);
    size_t units = (size_t)m->L + 1;
    gt->n_slices = tsr_malloc(units * sizeof(int));
    gt->off = tsr_malloc(units * TSR_P_COUNT * sizeof(size_t));
    gt->len = tsr_malloc(units * TSR_P_COUNT * sizeof(size_t));
    for (size_t u = 0; u < units; u++)
        gt->n_slices[u] = gpu_model_unit_slices(m, (int)u, gt->off + u * TSR_P_COUNT,
                                                gt->len + u * TSR_P_COUNT);
    return open_replicated_comm(c, "summed per layer during backward");
}

/* parallel.expert: the experts' store on the device and the exchange's communicators */
static int init_experts(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    if (!c->ep) return 0;
    char why[512] = "";
    if (gpu_ep_init(&gt->ep, c->ep, c->model, c->mesh, gt->s, why, sizeof why) != 0) {
        if (c->dist->rank == 0)
            tsr_error("device = \"cuda\" with parallel.expert = %d: %s", c->ep->EP, why);
        return TSR_EXIT_USAGE;
    }
    gt->ep_on = 1;
    gt->ep.dense[0] = gt->sharded ? gt->sh.group : gt->comm;
    gt->ep.dense[1] = gt->sharded ? gt->sh.replicas : NULL;
    gt->g.experts = gpu_ep_unit;
    gt->g.experts_ctx = &gt->ep;
    if (c->dist->rank == 0)
        printf("experts: %d per rank, rows exchanged within groups of %d and gradients summed "
               "over %d replicas by %s\n", c->ep->El, c->ep->EP,
               c->dist->world / c->ep->EP, gpu_comm_name(gt->ep.group));
    return 0;
}

/* A measurement switch of the environment (docs/cuda.md, issue 25) that every rank must agree
 * on: its value, one of names[0..n) (unset or empty: names[0], the default), into *choice; rank 0
 * says so, with notes[i], when it is not the default. Every rank reads its own environment (a job
 * script can set it per node), so the ranks agree before any of them stops: one rank refusing
 * alone would leave the others waiting in their next collective, and two values would make the
 * ranks' kernels differ. `expected` lists the values for the error message. */
static int env_switch(const tsr_dist *d, const char *name, const char *const *names,
                      const char *const *notes, int n, const char *expected, int *choice) {
    const int not_one = n; /* a value that is none of names[] */
    const char *v = getenv(name);
    int mine = 0;
    if (v && *v) {
        mine = not_one;
        for (int i = 0; i < n; i++)
            if (strcmp(v, names[i]) == 0) mine = i;
    }
    int zero = mine, first = INT_MAX;
    dist_bcast(&zero, sizeof zero, 0);
    if (mine == not_one || mine != zero) first = d->rank;
    dist_allreduce_min_int(&first, 1);
    if (first == INT_MAX) {
        *choice = mine;
        if (mine && d->rank == 0)
            tsr_warn("environment %s = \"%s\": %s (docs/cuda.md)", name, v, notes[mine]);
        return 0;
    }
    int theirs = mine;
    dist_bcast(&theirs, sizeof theirs, first);
    if (d->rank != 0) return TSR_EXIT_USAGE;
    if (zero == not_one)
        tsr_error("environment %s = \"%s\": expected %s (docs/cuda.md)", name, v, expected);
    else
        tsr_error("environment %s: rank %d has %s%s%s, rank 0 \"%s\"%s: expected %s, the same on "
                  "every rank (docs/cuda.md)",
                  name, first, theirs == not_one ? "another value" : "\"",
                  theirs == not_one ? "" : names[theirs], theirs == not_one ? "" : "\"",
                  names[zero], v && *v ? "" : " (unset)", expected);
    return TSR_EXIT_USAGE;
}

/* TSR_GEMM_REDUCTION (issue 25 item 4): the split-K schemes the matmul heuristic may pick */
static int gemm_reduction(const tsr_dist *d, tcu_reduction *r) {
    static const char *const names[] = {"compute", "none", "any"};
    static const char *const notes[] = {
        "", "no split-K GEMMs",
        "cuBLASLt's own split-K reductions, partial sums possibly added in bf16: for measuring, "
        "not for training"};
    int choice;
    TSR_CHECK(env_switch(d, "TSR_GEMM_REDUCTION", names, notes, 3,
                         "compute (the default), none or any", &choice));
    *r = (tcu_reduction)choice;
    return 0;
}

/* an on/off measurement switch (issue 25): "0" (the default, unset or empty) or "1", whose
 * meaning `note` gives */
static int env_flag(const tsr_dist *d, const char *name, const char *note, int *on) {
    const char *const names[] = {"0", "1"}, *const notes[] = {"", note};
    return env_switch(d, name, names, notes, 2, "0 (the default) or 1", on);
}

/* TSR_ATT_WARP_ROWS (issue 25 item 2): the rows each warp of the attention kernels owns */
static int att_warp_rows(const tsr_dist *d, int *rows) {
    static const char *const names[] = {"16", "32"};
    static const char *const notes[] = {
        "", "32 rows a warp in the attention kernels where the head size is 64 or less (not the "
            "16-row default's bits)"};
    int choice;
    TSR_CHECK(env_switch(d, "TSR_ATT_WARP_ROWS", names, notes, 2, "16 (the default) or 32",
                         &choice));
    *rows = choice ? 32 : 16;
    return 0;
}

/* TSR_NORM_HOLD (issue 25): the norms whose backward keeps each row in registers, a
 * tcu_norm_set_hold mask. Unset (or "layernorm"): LayerNorm's up to C = 768, the default since
 * the H200 timed it (docs/cuda.md); 0: none; 1: both, at every C the kernel reaches (the rest
 * not yet timed) */
static int norm_hold_switch(const tsr_dist *d, int *mask) {
    static const char *const names[] = {"layernorm", "0", "1"};
    static const char *const notes[] = {
        "", "the LayerNorm and RMSNorm backwards read each row twice (the same bits)",
        "the LayerNorm and RMSNorm backwards keep each row in registers up to C = 1024 (the "
        "same bits; only LayerNorm's up to C = 768 is timed, and the default)"};
    static const int masks[] = {TCU_NORM_HOLD_DEFAULT, 0, TCU_NORM_HOLD_ALL};
    int choice;
    TSR_CHECK(env_switch(d, "TSR_NORM_HOLD", names, notes, 3,
                         "layernorm (the default: LayerNorm's backward holds its rows up to C = "
                         "768), 0 (neither) or 1 (LayerNorm's and RMSNorm's up to C = 1024)",
                         &choice));
    *mask = masks[choice];
    return 0;
}

/* TSR_GEMM_TUNE (issue 25 item 4): the file of GEMM choices (tcu_matmul_tune_open), or "" when
 * unset or empty (the heuristic's first answers). Every rank must name the same file. Only a
 * run on one rank times (and writes the file): on several, each rank would choose for itself. */
static char gemm_tune[4096];
static int gemm_tune_opened; /* gemm_tune_open read the file: gemm_tune_close reports */

/* whether every rank has the value v (its two halves and their negatives through one max:
 * exact in doubles). Collective. */
static int ranks_agree(uint64_t v) {
    const double hi = (double)(v >> 32), lo = (double)(v & 0xffffffffu);
    double m[4] = {hi, lo, -hi, -lo};
    dist_allreduce_max_f64(m, 4);
    return m[0] == -m[2] && m[1] == -m[3];
}

static int gemm_tune_switch(const tsr_dist *d) {
    const char *v = getenv("TSR_GEMM_TUNE");
    int too_long = v && strlen(v) >= sizeof gemm_tune;
    snprintf(gemm_tune, sizeof gemm_tune, "%s", v && !too_long ? v : "");
    double any_too_long = too_long;
    dist_allreduce_max_f64(&any_too_long, 1);
    /* the value's checksum, or one no checksum has for a value too long */
    const uint64_t mine = too_long ? UINT64_MAX : tsr_crc32c(0, gemm_tune, strlen(gemm_tune));
    if (!ranks_agree(mine) || any_too_long > 0) {
        if (d->rank == 0 && any_too_long > 0)
            tsr_error("environment TSR_GEMM_TUNE: a path of %zu bytes or more on some rank: "
                      "expected a file name (docs/cuda.md)", sizeof gemm_tune);
        else if (d->rank == 0)
            tsr_error("environment TSR_GEMM_TUNE: the ranks name different files (rank 0 "
                      "\"%s\"): expected the same value on every rank, one file on a shared file "
                      "system (docs/cuda.md)", gemm_tune);
        return TSR_EXIT_USAGE;
    }
    if (gemm_tune[0] && d->rank == 0 && d->world == 1)
        tsr_warn("environment TSR_GEMM_TUNE = \"%s\": each GEMM shape runs the file's algorithm, "
                 "or the fastest of cuBLASLt's first 8 answers, timed on its first call and "
                 "written to the file at the end; a run whose shapes are all in the file repeats "
                 "its bits (the file is read when the device opens; docs/cuda.md)", gemm_tune);
    else if (gemm_tune[0] && d->rank == 0)
        tsr_warn("environment TSR_GEMM_TUNE = \"%s\": each GEMM shape runs the file's algorithm, "
                 "else cuBLASLt's first answer; %d ranks time nothing (each would choose for "
                 "itself): tune with one rank first (the file is read when the device opens; "
                 "docs/cuda.md)", gemm_tune, d->world);
    return 0;
}

/* After tcu_init, before the first matmul: every rank reads the file of GEMM choices (one rank:
 * and checks it can write it); the first rank that cannot is named by rank 0 with its reason,
 * and the ranks must have read the same table (its hash). Collective. */
static int gemm_tune_open(const tsr_dist *d) {
    if (!gemm_tune[0]) return 0;
    char err[1024] = "";
    int bad = tcu_matmul_tune_open(gemm_tune, d->world == 1, err, sizeof err) ? d->rank : INT_MAX;
    dist_allreduce_min_int(&bad, 1);
    if (bad != INT_MAX) {
        dist_bcast(err, sizeof err, bad);
        if (d->rank == 0)
            tsr_error("environment TSR_GEMM_TUNE: rank %d: %s (docs/cuda.md)", bad, err);
        return TSR_EXIT_USAGE;
    }
    tcu_tune_stats st;
    tcu_matmul_tune_stats(&st);
    if (!ranks_agree(tcu_matmul_tune_hash())) {
        if (d->rank == 0)
            tsr_error("environment TSR_GEMM_TUNE = \"%s\": the ranks read different files (rank "
                      "0: %d entries): expected one file on a shared file system (docs/cuda.md)",
                      gemm_tune, st.loaded);
        return TSR_EXIT_USAGE;
    }
    gemm_tune_opened = 1;
    if (d->rank == 0)
        printf("TSR_GEMM_TUNE: %d GEMM choice(s) read from %s\n", st.loaded, gemm_tune);
    return 0;
}

/* At the end, before tcu_shutdown: rank 0 writes the choices timed in this run into the file
 * and says what tuning did; a file that cannot be written is a warning (the run's own outputs
 * are complete). */
static void gemm_tune_close(const tsr_dist *d) {
    if (!gemm_tune_opened) return;
    gemm_tune_opened = 0;
    if (d->rank != 0) return;
    tcu_tune_stats st;
    tcu_matmul_tune_stats(&st);
    char err[1024] = "", wrote[64];
    int w = tcu_matmul_tune_save(gemm_tune, err, sizeof err);
    snprintf(wrote, sizeof wrote, "%d new choice(s) written to the file", st.added);
    printf("TSR_GEMM_TUNE: %d shape(s) from the file (%d by configuration), %d timed (%.1f us "
           "faster than cuBLASLt's first answers over one call of each), %d with one answer; "
           "%d not matched by the heuristic's answers, %d untimed, %d not in the file; calls "
           "past the algorithm cache: %lld not in the file, %lld not matched; %s\n",
           st.from_file, st.by_config, st.timed, st.saved_us, st.single, st.unmatched,
           st.untimed, st.missing, st.overflow_missing, st.overflow_unmatched,
           w == 1 ? wrote : w == 0 ? "the file unchanged" : "the file NOT written");
    if (w < 0) tsr_warn("TSR_GEMM_TUNE: %s", err);
    if (st.unmatched || st.overflow_unmatched)
        tsr_warn("TSR_GEMM_TUNE = \"%s\": %d shape(s) (and %lld calls past the algorithm cache) "
                 "ran cuBLASLt's first answer because the file's algorithm was not among its "
                 "answers (another split-K rule, workspace or cuBLASLt build?): not the bits of "
                 "the run that made the file", gemm_tune, st.unmatched, st.overflow_unmatched);
    if (st.missing)
        tsr_warn("TSR_GEMM_TUNE = \"%s\": %d shape(s) not in the file ran cuBLASLt's first "
                 "answer, untimed (%d ranks time nothing): tune with one rank first", gemm_tune,
                 st.missing, d->world);
    if (st.overflow_missing)
        tsr_warn("TSR_GEMM_TUNE = \"%s\": %lld call(s) of shapes past the algorithm cache (128 "
                 "shapes) ran cuBLASLt's first answer, untimed (never timed: it would be, every "
                 "call)", gemm_tune, st.overflow_missing);
    fflush(stdout);
}

/* The measurement switches of the environment (issue 25, docs/cuda.md), read and set before the
 * device memory plan is sized (the attention's scratch depends on TSR_ATT_WARP_ROWS and
 * TSR_ATT_DQ_FUSED) and before anything runs; no device is touched, so --plan reads them too.
 * Collective. */
static int att_wgmma_asked; /* TSR_ATT_WGMMA=1: checked against the device by check_wgmma */

static int lib_switches(const gpu_train_ctx *c) {
    tcu_reduction reduction;
    int att_rows, resident, dq_fused, hold, wgmma;
    TSR_CHECK(gemm_reduction(c->dist, &reduction));
    TSR_CHECK(att_warp_rows(c->dist, &att_rows));
    TSR_CHECK(env_flag(c->dist, "TSR_ATT_DQ_FUSED",
                       "the attention backward adds dq in its dk/dv kernel, in a fixed order (the "
                       "same bits with 16 rows a warp and no document mask); its fp32 sums, "
                       "micro_batch x n_head x seq_len x head_dim x 4 bytes, are in the device "
                       "plan's activations",
                       &dq_fused));
    TSR_CHECK(norm_hold_switch(c->dist, &hold));
    TSR_CHECK(env_flag(c->dist, "TSR_XENT_RESIDENT",
                       "softmax + cross-entropy keeps each row in registers where Vp <= 57344 "
                       "(the same bits)",
                       &resident));
    TSR_CHECK(env_flag(c->dist, "TSR_ATT_WGMMA",
                       "the attention forward and backward on Hopper's wgmma where the head size "
                       "is 64 or 128 (a GPU of compute capability 9.0: refused elsewhere; not the "
                       "default's bits; the fused dq stays on mma.sync)",
                       &wgmma));
    TSR_CHECK(gemm_tune_switch(c->dist));
    /* the wgmma kernels have 16 rows a warp and no fused dq: with either switch the run would mix
     * kernels unsaid (every rank reads the same environment: each refuses alike) */
    if (wgmma && (att_rows == 32 || dq_fused)) {
        if (c->dist->rank == 0)
            tsr_error("environment TSR_ATT_WGMMA = \"1\" with %s: the wgmma attention kernels "
                      "have 16 rows a warp and no fused dq; measure the switches one at a time",
                      att_rows == 32 ? "TSR_ATT_WARP_ROWS = \"32\""
                                     : "TSR_ATT_DQ_FUSED = \"1\"");
        return TSR_EXIT_USAGE;
    }
    att_wgmma_asked = wgmma;
    tcu_attention_set_wgmma(wgmma);
    tcu_matmul_set_reduction(reduction);
    tcu_attention_set_warp_rows(att_rows);
    tcu_attention_set_dq_fused(dq_fused);
    tcu_norm_set_hold(hold);
    tcu_softmax_xent_set_resident(resident);
    return 0;
}

/* TSR_ATT_WGMMA=1 where the wgmma attention kernels cannot run (another GPU than compute
 * capability 9.0, a head size other than 64 or 128) is refused, not run on the mma.sync kernel: a
 * measurement of the switch would time the other kernel unawares. Collective (the lowest such
 * rank named). */
static int check_wgmma(const gpu_train_ctx *c) {
    const tsr_dist *d = c->dist;
    const int hs = c->model->hs;
    double first = att_wgmma_asked && !tcu_attention_wgmma_possible(hs) ? d->world - d->rank : 0;
    dist_allreduce_max_f64(&first, 1);
    if (first <= 0) return 0;
    if (d->rank == 0) {
        int sm = 0;
        char name[128] = "";
        tcu_device_info(name, sizeof name, &sm, NULL, NULL);
        tsr_error("environment TSR_ATT_WGMMA = \"1\": the wgmma attention kernels need a GPU of "
                  "compute capability 9.0 (H100, H200), a build with sm_90a code (NVCC_GENCODE) "
                  "and head size 64 or 128; rank %d cannot run them (rank 0: %s, sm %d.%d; head "
                  "size %d): unset it, or 0",
                  d->world - (int)first, name[0] ? name : "?", sm / 10, sm % 10, hs);
    }
    return TSR_EXIT_USAGE;
}

/* precision.fp8 needs cuBLASLt's FP8 GEMM: compute capability 8.9 (Ada) or newer on every rank.
 * Collective (the lowest such rank named). */
static int check_fp8(const gpu_train_ctx *c) {
    const tsr_dist *d = c->dist;
    int sm = 0;
    char name[128] = "";
    tcu_device_info(name, sizeof name, &sm, NULL, NULL);
    double first = c->fp8 != TSR_FP8_NONE && sm < 89 ? d->world - d->rank : 0;
    dist_allreduce_max_f64(&first, 1);
    if (first <= 0) return 0;
    if (d->rank == 0) /* (the other ranks' messages are muted at start) */
        tsr_error("precision.fp8 = \"%s\": FP8 matmuls need a GPU of compute capability 8.9 or "
                  "newer (Ada, Hopper: H100, H200); rank %d has an older one (rank 0: %s, sm "
                  "%d.%d): set precision.fp8 = \"none\"",
                  c->fp8 == TSR_FP8_ROWWISE ? "rowwise" : "tensorwise", d->world - (int)first,
                  name[0] ? name : "?", sm / 10, sm % 10);
    return TSR_EXIT_USAGE;
}

/* parallel.context: the ring over a communicator of the context group; its exchanges after the
 * dense gradients' collectives (ddp's, or the shards' group), and ddp's after the ring's (each
 * unit's sum: unit_ready), so that the two communicators run in one order on every rank */
static int init_ring(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    if (c->cpN <= 1) return 0;
    TSR_CHECK(gpu_ring_init(&gt->ring, c->mesh, gt->s));
    gt->ring.after = gt->comm ? gt->comm : gt->sharded ? gt->sh.group : NULL;
    gt->ring_on = 1;
    gt->g.ring = &gt->ring.ring;
    gt->ring_tg = tsr_malloc((size_t)c->micro * (size_t)c->T * sizeof(int32_t));
    return 0;
}

static int lib_init(gpu_train_ctx *c) {
    const tsr_model *m = c->model;
    int count = tcu_device_count();
    gpu_comm_use(c->comm_staged ? GPU_COMM_STAGED : GPU_COMM_DIRECT);
    TSR_CHECK(check_devices(c, count));
    /* (a head size without an attention kernel is refused when the config loads: config_load.c) */
    struct tsr_gpu_train *gt = tsr_calloc(1, sizeof *gt);
    c->state = gt;
    gt->device = c->dist->local_rank % count;
    gt->sharing = 0;
    for (int r = 0; r < c->dist->local_world; r++) gt->sharing += r % count == gt->device;
    tcu_set_fail_hook(dist_abort); /* a CUDA failure on one rank stops them all */
    tcu_init(gt->device);
    TSR_CHECK(check_wgmma(c));
    TSR_CHECK(check_fp8(c));
    TSR_CHECK(gemm_tune_open(c->dist));
    TSR_CHECK(check_memory(c, gt->device));
    gt->s = tcu_stream_create();
    gt->losses = tcu_malloc(losses_bytes(c), "the step's losses");
    gt->losses_host = tsr_malloc(losses_bytes(c));
    gt->moe_sb = c->moe ? gpu_model_moe_stage_bytes(m) : 0;
    if (gt->moe_sb) {
        gt->moe_stage = tcu_malloc(moe_stage_bytes(c), "the step's MoE statistics");
        gt->moe_stage_host = tsr_malloc(moe_stage_bytes(c));
    }
    gt->sharded = c->mode != GPU_SHARD_DDP;
    gpu_model_init(&gt->g, m, gt->s, c->lora && !gt->sharded ? GPU_STATE_FROZEN
                                     : c->mode == GPU_SHARD_DDP ? GPU_STATE_FULL
                                     : c->mode == GPU_SHARD_ZERO1 ? GPU_STATE_NO_MASTER
                                                                  : GPU_STATE_NONE);
    gpu_model_use_fp8(&gt->g, c->fp8, c->fp8_skip);
    if (c->fp8 != TSR_FP8_NONE && c->dist->rank == 0)
        printf("precision.fp8 = \"tensorwise\": the linear layers of decoder layers %d to %d "
               "forward in FP8 (E4M3, one current scale per tensor, cuBLASLt), their backward in "
               "bf16 (docs/cuda.md \"FP8\")\n", gt->g.be.fp8_first, gt->g.be.fp8_last);
    TSR_CHECK(c->lora ? init_lora(c) : gt->sharded ? init_sharded(c) : init_replicated(c));
    TSR_CHECK(init_experts(c)); /* (parallel.expert; never with LoRA: refused at load) */
    TSR_CHECK(init_ring(c));
    route_model(c->model, &gt->g);
    return 0;
}

static int lib_acts_B(const gpu_train_ctx *c) { return c->state->g.B; }

static void lib_free_acts(gpu_train_ctx *c) {
    gpu_model_free_acts(&c->state->g);
    if (c->state->lora_on) lora_free_scratch(&c->state->lora);
}

/* LoRA: the adapters' scratch for B x T rows is part of the activations (model_lora.c would
 * allocate it at the first pass; here a microbatch that leaves no room for it backs off) */
static int try_lora_scratch(gpu_train_ctx *c, int B) {
    struct tsr_gpu_train *gt = c->state;
    size_t need = gpu_model_lora_scratch_bytes(&gt->lora, B * c->T);
    gt->lora.scratch = need ? tcu_try_malloc(need) : NULL;
    if (need && !gt->lora.scratch) return -1;
    gt->lora.scratch_cap = need;
    gt->lora.scratch_be = &gt->g.be;
    return 0;
}

/* The activations, and room left after them for what the ops allocate later (scratch, cuBLASLt,
 * NCCL's buffers, kernels' local memory): 2% of the device must stay free, and under
 * parallel.expert the exchange's buffers for B sequences (allocated by the first forward; with
 * precision.fp8 its operands' scratch too), so a
 * microbatch that fills the GPU backs off here instead of failing in the first backward. The
 * room is read, not allocated: a trial allocation would count in the allocator's peak
 * (peak_mem_bytes). */
static int lib_try_acts(gpu_train_ctx *c, int B) {
    if (gpu_model_try_alloc_acts(&c->state->g, B, c->T)) return -1;
    size_t free_b = 0, total_b = 0;
    if (c->state->lora_on && try_lora_scratch(c, B)) {
        gpu_model_free_acts(&c->state->g);
        return -1;
    }
    tcu_device_info(NULL, 0, NULL, &free_b, &total_b);
    size_t exchange = c->model->EP > 1 ? gpu_ep_exchange_bytes(c->model, c->model->EP, B, c->T) : 0;
    if (c->fp8 != TSR_FP8_NONE) /* and precision.fp8's operands' scratch, also the first forward's */
        exchange += gpu_model_fp8_scratch_bytes(c->model, B * c->T, c->fp8_skip);
    /* a shared GPU: this rank's part of it, the 2% shared too */
    const struct tsr_gpu_train *gt = c->state;
    size_t live = 0;
    if (gt->budget) tcu_mem_stats(&live, NULL);
    if (free_b < total_b / 50 + exchange ||
        (gt->budget && live + total_b / 50 / (size_t)gt->sharing + exchange > gt->budget)) {
        lib_free_acts(c);
        return -1;
    }
    return 0;
}

static size_t lib_acts_bytes(const gpu_train_ctx *c, int B) { return acts_bytes(c, B); }
static size_t lib_layer_bytes(const gpu_train_ctx *c, int B, int fp8) {
    return gpu_model_layer_acts_bytes(c->model, B, c->T, fp8);
}

static void unit_ready(void *ctx, int u) {
    struct tsr_gpu_train *gt = ctx;
    if (gt->ring_on) gpu_comm_after(gt->comm, gt->ring.comm);
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

/* DPO and GRPO (c->objective_pass: train/dpo.h, rl/grpo.h): the trainer's pass over the rank's
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
     * (src/model/decoder.c backward_pass: layers L..1 as units L..1, then unit 0) */
    void *ctx;
    const unit_ready_fn ready = unit_reducer(gt, &ctx);
    for (int u = c->model->L; ready && u >= 0; u--) ready(ctx, u);
    if (gt->sharded) gpu_shard_finish_grads(&gt->sh);
    if (gt->ep_on) gpu_ep_reduce(&gt->ep); /* (as dense_compute) */
    return loss_sum;
}

/* the forward and backward passes of a step, timed as one phase under TSR_PROFILE=1 */
static double lib_compute(gpu_train_ctx *c, float scale) {
    struct tsr_gpu_train *gt = c->state;
    gpu_prof_step_begin();
    const int ps = gpu_prof_begin(gt->s, "step: forward+backward", 0, 0, 0);
    const double loss = c->objective_pass ? objective_compute(c, scale)
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
    for (int64_t b = 0; b < c->per_rank; b += c->micro) {
        const int32_t *in = c->inputs + b * c->T, *tg = c->targets + b * c->T;
        int last = b + c->micro >= c->per_rank;
        gt->g.starts = c->starts ? c->starts + b * c->T : NULL;
        gpu_model_forward(&gt->g, in, tg, c->micro, c->T, scale);
        stage(c, b); /* what the forward leaves: losses, routing statistics */
        gpu_model_backward(&gt->g, in, c->micro, c->T, last ? ready : NULL, ctx);
    }
    gt->g.starts = NULL;
    const double loss_sum = staged_sums(c, scale);
    if (gt->sharded) gpu_shard_finish_grads(&gt->sh);
    if (gt->ep_on) gpu_ep_reduce(&gt->ep);
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
    return sq;
}

/* the dense tensors', plus the experts' (every expert once) under parallel.expert */
static double lib_grad_sumsq(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    const int ps = gpu_prof_begin(gt->s, "step: gradient norm", 0, 0, 0);
    const double sq = dense_sumsq(c) + (gt->ep_on ? gpu_ep_sumsq(&gt->ep) : 0.0);
    gpu_prof_end(gt->s, ps);
    return sq;
}

static void update(gpu_train_ctx *c, double lr, float gscale, int step);

/* AdamW, timed as a phase under TSR_PROFILE=1 */
static void lib_update(gpu_train_ctx *c, double lr, float gscale, int step) {
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

/* LoRA: the adapters (and their moments) device -> host store; the base never changes */
static void lora_pull(struct tsr_gpu_train *gt, tsr_lora *host, int with_optim) {
    const size_t bytes = gt->lora.n * sizeof(float);
    tcu_memcpy_d2h(host->w, gt->lora.w, bytes, gt->s);
    if (with_optim) {
        tcu_memcpy_d2h(host->m, gt->lora.m, bytes, gt->s);
        tcu_memcpy_d2h(host->v, gt->lora.v, bytes, gt->s);
    }
}

static void lib_pull(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    if (gt->ep_on) gpu_ep_pull(&gt->ep, 1);
    if (gt->lora_on) {
        lora_pull(gt, c->lora, 1);
        return;
    }
    if (gt->sharded) {
        gpu_shard_pull(&gt->sh, c, 1);
        return;
    }
    size_t bytes = c->model->n_params * sizeof(float);
    gpu_model_download(&gt->g, c->model->params);
    tcu_memcpy_d2h(c->m, gt->m, bytes, gt->s);
    tcu_memcpy_d2h(c->v, gt->v, bytes, gt->s);
}

static void lib_push(gpu_train_ctx *c, int with_optim) {
    struct tsr_gpu_train *gt = c->state;
    if (gt->ep_on) gpu_ep_push(&gt->ep, with_optim);
    if (gt->lora_on) { /* the base (bf16: whole or the frozen shard) and the adapters */
        const size_t bytes = gt->lora.n * sizeof(float);
        if (gt->sharded) gpu_shard_push(&gt->sh, c, 0);
        else gpu_model_upload(&gt->g, c->model->params);
        tcu_memcpy_h2d(gt->lora.w, c->lora->w, bytes, gt->s);
        if (with_optim) {
            tcu_memcpy_h2d(gt->lora.m, c->lora->m, bytes, gt->s);
            tcu_memcpy_h2d(gt->lora.v, c->lora->v, bytes, gt->s);
        }
        tcu_sync(gt->s);
        return;
    }
    if (gt->sharded) {
        gpu_shard_push(&gt->sh, c, with_optim);
        return;
    }
    size_t bytes = c->model->n_params * sizeof(float);
    gpu_model_upload(&gt->g, c->model->params);
    if (with_optim) {
        tcu_memcpy_h2d(gt->m, c->m, bytes, gt->s);
        tcu_memcpy_h2d(gt->v, c->v, bytes, gt->s);
        tcu_sync(gt->s);
    }
}

/* The host buffers lib_pull copies the device's state into, and their bytes: into p[], b[] (at
 * most 7); returns how many. */
static int pull_targets(gpu_train_ctx *c, void **p, size_t *b) {
    struct tsr_gpu_train *gt = c->state;
    int n = 0;
    if (gt->ep_on) {
        const tsr_ep *ep = gt->ep.ep;
        p[n] = ep->w, p[n + 1] = ep->m, p[n + 2] = ep->v;
        for (int k = 0; k < 3; k++) b[n++] = ep->n * sizeof(float);
    }
    float *set[3] = {c->model->params, c->m, c->v};
    size_t floats = c->model->n_params, sets = 3;
    if (gt->lora_on) {
        set[0] = c->lora->w, set[1] = c->lora->m, set[2] = c->lora->v, floats = gt->lora.n;
    } else if (gt->sharded && gt->sh.zero1) { /* through its staging buffer */
        set[0] = gt->sh.host, floats = gt->sh.f->shard_n, sets = 1;
    } else if (gt->sharded) {
        set[0] = c->fsdp->params, floats = gt->sh.f->shard_n;
    }
    for (size_t k = 0; k < sets; k++) p[n] = set[k], b[n++] = floats * sizeof(float);
    return n;
}

static size_t lib_pin_host(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    void *p[7];
    size_t b[7], pinned = 0;
    int n = pull_targets(c, p, b), k = 0;
    if (gt->pinned[0]) return 0; /* once */
    for (int i = 0; i < n; i++) {
        if (!p[i] || !b[i]) continue;
        if (tcu_host_register(p[i], b[i]) != 0) { /* refused: none pinned, all pageable */
            while (k > 0) tcu_host_unregister(gt->pinned[--k]);
            gt->pinned[0] = NULL;
            return 0;
        }
        gt->pinned[k++] = p[i], pinned += b[i];
    }
    gt->pinned[k] = NULL;
    return pinned;
}

/* Collective: the weights come to the host on every rank that needs them (zero1: all, to
 * gather; zero3 / hsdp: all, each rank's shard, and all sample: each forward gathers the units;
 * ddp: rank 0, which samples). */
static void lib_host_model(gpu_train_ctx *c, int on) {
    struct tsr_gpu_train *gt = c->state;
    tsr_model *m = c->model;
    int sampler = c->dist->rank == 0 || (gt->sharded && !gt->sh.zero1);
    if (on) {
        if (gt->lora_on && sampler) lora_pull(gt, c->lora, 0); /* (the base is the host's) */
        else if (gt->sharded) gpu_shard_pull(&gt->sh, c, 0);
        else if (sampler) gpu_model_download(&gt->g, m->params);
        /* every expert on the host (collective), from the device's weights: before the host
         * weights' hook, whose ep_full would gather the host store as it stands */
        if (gt->ep_on) gpu_ep_full(&gt->ep, 1);
        if (gt->sharded && !gt->sh.zero1) c->host_weights(c->owner, 1);
        route_model(m, NULL);
        if (sampler && m->acts.B == 0) model_alloc_acts(m, 1, c->T), gt->host_acts = 1;
    } else {
        if (gt->host_acts) model_free_acts(m), gt->host_acts = 0;
        if (gt->sharded && !gt->sh.zero1) c->host_weights(c->owner, 0);
        if (gt->ep_on) gpu_ep_full(&gt->ep, 0);
        route_model(m, &gt->g);
    }
}

static size_t lib_mem_peak(void) {
    size_t peak = 0;
    tcu_mem_stats(NULL, &peak);
    return peak;
}

static void lib_free(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    if (!gt) return;
    if (c->dist->rank == 0 && gpu_prof_on()) { /* the per-op times, then the GEMMs' algorithms */
        gpu_prof_report(stderr, "tessera-train");
        tcu_matmul_report(stderr);
    }
    gpu_prof_free();
    for (int k = 0; k < 8 && gt->pinned[k]; k++) tcu_host_unregister(gt->pinned[k]);
    gpu_ep_free(&gt->ep);
    gpu_ring_free(&gt->ring);
    free(gt->ring_tg);
    gpu_comm_close(gt->comm);
    if (gt->lora_on) {
        lora_free_scratch(&gt->lora);
        tcu_free(gt->lora.w), tcu_free(gt->lora.g), tcu_free(gt->lora.m), tcu_free(gt->lora.v);
    }
    gpu_shard_free(&gt->sh);
    gpu_model_free(&gt->g);
    tcu_free(gt->m);
    tcu_free(gt->v);
    tcu_free(gt->acc);
    gpu_muon_free(&gt->mu);
    tcu_free(gt->losses);
    free(gt->losses_host);
    if (gt->moe_stage) tcu_free(gt->moe_stage);
    free(gt->moe_stage_host);
    tcu_stream_destroy(gt->s);
    gemm_tune_close(c->dist);
    tcu_shutdown();
    free(gt->n_slices);
    free(gt->off);
    free(gt->len);
    free(gt);
    c->state = NULL;
    route_model(c->model, NULL);
}

#ifndef TSR_GPU_BACKEND
#define TSR_GPU_BACKEND "cuda"
#endif

/* GRPO's rollouts on the device (gpu_train.h gpu_train_generate) */
static int64_t lib_generate(gpu_train_ctx *c, const struct gen_batch_opts *o,
                            struct gen_seq *seqs, int n) {
    struct tsr_gpu_train *gt = c->state;
    if (gt->lora_on) lora_set_pass(&gt->lora, 0, 0, 0); /* no dropout */
    fp8_gather(c, 0); /* (decoding reads the bf16 weights) */
    int64_t r = gpu_model_generate(&gt->g, o, seqs, n);
    fp8_gather(c, 1);
    return r;
}

const gpu_train_api tsr_gpu_train_api = {
    .version = TSR_VERSION,
    .ctx_size = sizeof(gpu_train_ctx),
    .api_size = sizeof(gpu_train_api),
    .backend = TSR_GPU_BACKEND,
    .init = lib_init,
    .plan_bytes = lib_plan_bytes,
    .muon_bytes = muon_bytes,
    .acts_B = lib_acts_B,
    .try_acts = lib_try_acts,
    .free_acts = lib_free_acts,
    .acts_bytes = lib_acts_bytes,
    .layer_bytes = lib_layer_bytes,
    .compute = lib_compute,
    .grad_sumsq = lib_grad_sumsq,
    .update = lib_update,
    .pull = lib_pull,
    .push = lib_push,
    .host_model = lib_host_model,
    .pin_host = lib_pin_host,
    .mem_peak = lib_mem_peak,
    .free = lib_free,
    .switches = lib_switches,
    .generate = lib_generate,
};
