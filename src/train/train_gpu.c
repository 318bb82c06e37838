/* train_gpu.c — the trainer's side of device = cuda (train_gpu.h). */
#include "train/train_gpu.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "optim/adamw.h"
#include "run/objective.h"
#include "train/train_plan.h"
#include "metrics_units.h"
#include "train/train_state.h"

/* the host model's weights for the end-of-run sample (trainer_host_weights: every expert
 * gathered, zero3 / hsdp's gathers forgotten after the shard's pull) */
static void host_weights(void *owner, int on) { trainer_host_weights(owner, on); }

/* the objective's own pass (dpo, grpo: run/objective.h), its model calls routed to the
 * device */
static double objective_pass(void *owner, float scale) {
    tsr_trainer *t = owner;
    return t->objective->pass(&t->run, t->run.objective_state, scale);
}

/* The context the CUDA path sees (gpu_train_ctx.h), from the trainer. */
static void fill(gpu_train_ctx *c, const tsr_trainer *t) {
    memset(c, 0, sizeof *c);
    const tsr_config *cfg = &t->cfg;
    c->dist = &t->dist;
    c->mesh = &t->mesh;
    c->model = (tsr_model *)&t->model;
    /* zero1 on one rank is ddp, as on the CPU; under LoRA on any rank count (the adapters are
     * replicated and the frozen base has no optimizer state: nothing for zero1 to shard) */
    /* (tensor parallelism: the state is sharded over the ranks of one split, tensor_data's) */
    const int Tp = cfg->tensor > 1 ? (int)cfg->tensor : 1, Wt = t->dist.world / Tp;
    c->mode = cfg->sharding == TSR_SHARD_DDP ? GPU_SHARD_DDP
              : cfg->sharding != TSR_SHARD_ZERO1 ? GPU_SHARD_FSDP
              : Wt > 1 && !t->part.lora_on ? GPU_SHARD_ZERO1 : GPU_SHARD_DDP;
    c->G = Wt;
    int G = Wt;
    if (c->mode == GPU_SHARD_FSDP && run_shard_group(cfg, Wt, t->dist.local_world / Tp, &G) == 0)
        c->G = G;
    c->comm_staged = cfg->gpu_comm == TSR_GPU_COMM_MPI;
    c->fp8 = cfg->precision.fp8, c->fp8_skip = cfg->precision.fp8_skip;
    c->fp8_allgather = cfg->precision.fp8_allgather;
    c->T = t->T, c->micro = t->micro, c->per_rank = t->per_rank, c->auto_micro = t->auto_micro;
    c->inputs = t->data.inputs, c->targets = t->data.targets, c->starts = t->data.starts;
    c->moe = t->out.moe;
    c->cpN = t->mesh.N, c->data_rank = t->mesh.data.rank;
    if (t->part.lora_on) {
        c->lora = (struct tsr_lora *)&t->part.lora;
        c->lora_decay = adamw_decay(&cfg->optim, TSR_PK_WEIGHT);
    }
    c->optim = &cfg->optim;
    for (int i = 0; i < TSR_P_COUNT; i++)
        c->decay[i] = adamw_decay(&cfg->optim, t->model.params_info[i].kind);
    c->m = t->part.m, c->v = t->part.v;
    c->part_counts = t->part.part_counts, c->part_displs = t->part.part_displs;
    c->fsdp = (tsr_fsdp *)&t->part.fsdp;
    c->ep = t->part.ep_on ? (tsr_ep *)&t->part.ep : NULL;
    c->host_weights = host_weights;
    c->objective_pass = t->objective->pass ? objective_pass : NULL; /* NULL: lm, the library's */
    c->owner = (void *)t;
}

int train_gpu_switches(const tsr_trainer *t) {
    gpu_train_ctx c;
    fill(&c, t);
    return gpu_train_switches(&c);
}

void train_gpu_print_plan(const tsr_trainer *t) {
    if (t->dist.rank != 0) return;
    gpu_train_ctx c;
    fill(&c, t);
    plan_view *v = trainer_plan_view(t);
    plan_print_device(v, &c); /* (src/plan/plan.c) */
    free(v);
}

double train_gpu_plan_total(const tsr_trainer *t) {
    gpu_train_ctx c;
    fill(&c, t);
    return plan_device_bytes(&c, t->micro);
}

double train_gpu_plan_acts(const tsr_trainer *t) {
    gpu_train_ctx c;
    fill(&c, t);
    return (double)gpu_train_acts_bytes(&c, t->micro);
}

/* The GPU's peak bf16 FLOP/s from its name ("NVIDIA H100 80GB HBM3" -> H100), else 0. */
static double peak_of(const char *name) {
    const char *known[] = {"H100", "H200", "A100"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strstr(name, known[i])) return metrics_peak_flops(known[i], 1);
    return 0.0;
}

int train_gpu_init(tsr_trainer *t) {
    t->be.gpu = tsr_malloc(sizeof *t->be.gpu);
    fill(t->be.gpu, t);
    int rc = gpu_train_init(t->be.gpu);
    if (t->cfg.peak_flops <= 0 && t->be.gpu->device_name[0]) {
        t->out.peak_flops = peak_of(t->be.gpu->device_name);
        if (rc == 0 && t->dist.rank == 0) {
            if (t->out.peak_flops > 0)
                printf("peak %.4g FLOP/s per rank (the %s's bf16 dense peak, docs/mfu.md)\n",
                       t->out.peak_flops, t->be.gpu->device_name);
            else
                printf("peak FLOP/s: not known for %s, so mfu reads 0 (set peak_flops)\n",
                       t->be.gpu->device_name);
            fflush(stdout);
        }
    }
    return rc;
}

void train_gpu_pin_snapshot(tsr_trainer *t) {
    if (!t->be.gpu || !t->ck.async) return;
    const size_t b = gpu_train_pin_host(t->be.gpu);
    char hb[32];
    metrics_human_bytes(hb, sizeof hb, (double)b);
    if (!b)
        tsr_warn("save_async: CUDA would not pin the host copy of the device's state (a memlock "
                 "limit? ulimit -l): a background save's snapshot copies it through pageable "
                 "memory, more slowly; the run goes on");
    else if (t->dist.rank == 0)
        printf("save_async: %s of host memory pinned per rank for the device-to-host copy of a "
               "checkpoint's snapshot\n", hb);
    fflush(stdout);
}

void train_gpu_free(tsr_trainer *t) {
    if (!t->be.gpu) return;
    gpu_train_free(t->be.gpu);
    free(t->be.gpu);
    t->be.gpu = NULL;
}
