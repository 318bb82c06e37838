/* gpu_train_host.c — the CUDA trainer's state to and from the host (gpu_train_int.h): its
 * pull for a checkpoint, its push after a resume, the reduced gradients for the fingerprints
 * (src/train/sdc.h), the host buffers pinned for the pull, and the host model for sampling on
 * the host weights. */
#include <stddef.h>

#include "gpu/gpu_train_int.h"
#include "model/model.h"

/* LoRA: the adapters (and their moments) device -> host store; the base never changes */
static void lora_pull(struct tsr_gpu_train *gt, tsr_lora *host, int with_optim) {
    const size_t bytes = gt->lora.n * sizeof(float);
    tcu_memcpy_d2h(host->w, gt->lora.w, bytes, gt->s);
    if (with_optim) {
        tcu_memcpy_d2h(host->m, gt->lora.m, bytes, gt->s);
        tcu_memcpy_d2h(host->v, gt->lora.v, bytes, gt->s);
    }
}

void gtrain_pull(gpu_train_ctx *c) {
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

void gtrain_push(gpu_train_ctx *c, int with_optim) {
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

/* ddp's dense gradients or LoRA's adapters' (the reduction waited for) */
int gtrain_pull_grads(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    if (gt->sharded && !gt->lora_on) return 0;
    if (gt->comm) gpu_comm_wait(gt->comm);
    if (gt->lora_on) tcu_memcpy_d2h(c->lora->g, gt->lora.g, gt->lora.n * sizeof(float), gt->s);
    else tcu_memcpy_d2h(c->model->grads, gt->g.grads, c->model->n_params * sizeof(float), gt->s);
    return 1;
}

/* The host buffers gtrain_pull copies the device's state into, and their bytes: into p[], b[] (at
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

size_t gtrain_pin_host(gpu_train_ctx *c) {
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
void gtrain_host_model(gpu_train_ctx *c, int on) {
    struct tsr_gpu_train *gt = c->state;
    tsr_model *m = c->model;
    /* (tensor parallelism: every rank of a group runs the sample's split forwards) */
    int sampler = c->dist->rank == 0 || (gt->sharded && !gt->sh.zero1) || m->tp;
    if (on) {
        if (gt->lora_on && sampler) lora_pull(gt, c->lora, 0); /* (the base is the host's) */
        else if (gt->sharded) gpu_shard_pull(&gt->sh, c, 0);
        else if (sampler) gpu_model_download(&gt->g, m->params);
        /* every expert on the host (collective), from the device's weights: before the host
         * weights' hook, whose ep_full would gather the host store as it stands */
        if (gt->ep_on) gpu_ep_full(&gt->ep, 1);
        if (gt->sharded && !gt->sh.zero1) c->host_weights(c->owner, 1);
        gtrain_route_model(m, NULL);
        if (sampler && m->acts.B == 0) model_alloc_acts(m, 1, c->T), gt->host_acts = 1;
    } else {
        if (gt->host_acts) model_free_acts(m), gt->host_acts = 0;
        if (gt->sharded && !gt->sh.zero1) c->host_weights(c->owner, 0);
        if (gt->ep_on) gpu_ep_full(&gt->ep, 0);
        gtrain_route_model(m, &gt->g);
    }
}
