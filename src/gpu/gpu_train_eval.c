/* gpu_train_eval.c — the host model's evaluation calls on the device (gpu_train_int.h):
 * model_forward, model_token_scores, DPO's and GRPO's weighted backward and routing statistics
 * routed to the CUDA model, the host model's LoRA pass followed. */
#include <stdint.h>

#include "gpu/gpu_train_int.h"
#include "model/model.h"

/* LoRA: a pass through the host model's hooks runs as the host model would. Its adapters off
 * (m->lora NULL: DPO's reference, the base) leave the device's off for the pass; else the host
 * adapters' pass (dropout on or off, its key and first row: posttrain/dpo.c sets it per microbatch)
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
void gtrain_route_model(tsr_model *m, tsr_gpu_model *g) {
    m->fwd = g ? eval_forward : NULL;
    m->scores = g ? eval_scores : NULL;
    m->bwd_weighted = g ? eval_backward_weighted : NULL;
    m->moe_stats = g ? eval_moe_stats : NULL;
    m->fwd_ctx = g;
}
