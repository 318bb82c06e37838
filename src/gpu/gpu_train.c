/* gpu_train.c — device = cuda in the trainer: the entry points of libtessera-cuda-train.so
 * (gpu_train.h). Here start-up, the activations, shutdown and the table; a step, the state to and
 * from the host, the memory plan, the evaluation calls and the environment's switches are in the
 * files gpu_train_int.h names, which this one calls. Everything but the table is static or named
 * gtrain_*: the executable exports wrappers of the gpu_train_* names, which must not capture the
 * library's own calls. */
#include "gpu/gpu_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu/gpu_comm.h"
#include "gpu/gpu_ep.h"
#include "gpu/gpu_model.h"
#include "gpu/gpu_muon.h"
#include "gpu/gpu_pp.h"
#include "gpu/gpu_profile.h"
#include "gpu/gpu_ring.h"
#include "gpu/gpu_shard.h"
#include "gpu/gpu_train_int.h"
#include "model/model_lora.h"

static size_t lib_plan_bytes(const gpu_train_ctx *c) { return gtrain_fixed_bytes(c); }

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
    size_t need = gtrain_fixed_bytes(c) + gtrain_acts_bytes(c, c->auto_micro ? 1 : c->micro) *
                                             (size_t)gpu_pp_sets(c); /* (a stage's in flight) */
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
    /* (tensor parallelism: the ranks that hold the same split) */
    gt->comm = gpu_comm_open(mesh_group(c->mesh, c->model->tp ? TSR_MESH_TENSOR_DATA
                                                               : TSR_MESH_WORLD), gt->s, why,
                             sizeof why);
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
    size_t units = (size_t)m->L + 1 + (size_t)m->D; /* (MTP's layers: units L + 1 + d) */
    gt->n_slices = tsr_malloc(units * sizeof(int));
    gt->off = tsr_malloc(units * TSR_P_COUNT * sizeof(size_t));
    gt->len = tsr_malloc(units * TSR_P_COUNT * sizeof(size_t));
    for (size_t u = 0; u < units; u++)
        gt->n_slices[u] = gpu_model_unit_slices(m, (int)u, gt->off + u * TSR_P_COUNT,
                                                gt->len + u * TSR_P_COUNT);
    if (m->pp) return 0; /* (a pipeline stage's data ranks: gpu_pp.c's communicator) */
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
    c->ring = &gt->ring.ring;
    gt->ring_tg = tsr_malloc((size_t)c->micro * (size_t)c->T * sizeof(int32_t));
    return 0;
}

/* parallel.tensor: the decoder's collectives over a communicator of the tensor group, each
 * after ddp's queued collectives, and ddp's after its (unit_ready) */
static int init_tp(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    if (!c->model->tp) return 0;
    TSR_CHECK(gpu_tp_init(&gt->tp, c->model, c->mesh, gt->s));
    gt->tp.after = gt->comm;
    gt->tp_on = 1;
    gt->g.tp = &gt->tp.dev;
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
    TSR_CHECK(gtrain_check_wgmma(c));
    TSR_CHECK(check_fp8(c));
    TSR_CHECK(gtrain_gemm_tune_open(c->dist));
    TSR_CHECK(check_memory(c, gt->device));
    gt->s = tcu_stream_create();
    gt->losses = tcu_malloc(gtrain_losses_bytes(c), "the step's losses");
    gt->losses_host = tsr_malloc(gtrain_losses_bytes(c));
    gt->moe_sb = c->moe ? gpu_model_moe_stage_bytes(m) : 0;
    if (gt->moe_sb) {
        gt->moe_stage = tcu_malloc(gtrain_moe_stage_bytes(c), "the step's MoE statistics");
        gt->moe_stage_host = tsr_malloc(gtrain_moe_stage_bytes(c));
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
    TSR_CHECK(init_tp(c));
    gtrain_route_model(c->model, &gt->g);
    TSR_CHECK(gpu_pp_init(c)); /* (its evaluation hooks over the route's) */
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

static size_t lib_acts_bytes(const gpu_train_ctx *c, int B) { return gtrain_acts_bytes(c, B); }
static size_t lib_layer_bytes(const gpu_train_ctx *c, int B, int fp8) {
    return gpu_model_layer_acts_bytes(c->model, B, c->T, fp8);
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
    gpu_pp_free(c);
    gpu_ring_free(&gt->ring);
    gpu_tp_free(&gt->tp);
    free(gt->ring_tg);
    gpu_comm_close(gt->comm);
    if (gt->lora_on) {
        lora_free_scratch(&gt->lora);
        tcu_free(gt->lora.w), tcu_free(gt->lora.g), tcu_free(gt->lora.m), tcu_free(gt->lora.v);
    }
    gpu_shard_free(&gt->sh);
    gtrain_mtp_free(c); /* (its buffers on the device: before the model's and the shutdown) */
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
    gtrain_gemm_tune_close(c->dist);
    tcu_shutdown();
    free(gt->n_slices);
    free(gt->off);
    free(gt->len);
    free(gt);
    c->state = NULL;
    gtrain_route_model(c->model, NULL);
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
    .muon_bytes = gtrain_muon_bytes,
    .acts_B = lib_acts_B,
    .try_acts = lib_try_acts,
    .free_acts = lib_free_acts,
    .acts_bytes = lib_acts_bytes,
    .layer_bytes = lib_layer_bytes,
    .compute = gtrain_compute,
    .grad_sumsq = gtrain_grad_sumsq,
    .update = gtrain_update,
    .pull = gtrain_pull,
    .push = gtrain_push,
    .host_model = gtrain_host_model,
    .pin_host = gtrain_pin_host,
    .mem_peak = lib_mem_peak,
    .free = lib_free,
    .switches = gtrain_switches,
    .generate = lib_generate,
    .pull_grads = gtrain_pull_grads,
    .moe_bias = gtrain_moe_bias,
};
