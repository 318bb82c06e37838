/* moe_router.h — the settings of DeepSeek's router (docs/moe.md "DeepSeek's router"): what the
 * backend table (backend.h) and the CPU kernels (cpu/cpu_moe_route.h, which say what each array
 * holds) both take, here so that backend.h needs nothing of cpu/. */
#ifndef TSR_MOE_ROUTER_H
#define TSR_MOE_ROUTER_H

/* A router's settings (model.moe_scoring, moe_topk_method, moe_n_group, moe_topk_group,
 * moe_norm_topk, moe_routed_scaling; the correction bias of noaux_tc) */
typedef struct tsr_moe_router {
    int sigmoid;        /* scores s = sigmoid(logits), else softmax(logits) */
    int method;         /* 0 greedy, 1 group-limited (a group's best score), 2 noaux_tc (the
                         * bias added for the choice; a group's two best, summed) */
    int n_group, topk_group;
    int norm;           /* the K weights divided by their sum (+ 1e-20 with sigmoid scores) */
    float scale;        /* then times this (routed_scaling_factor) */
    const float *bias;  /* (E) noaux_tc's correction bias, or NULL */
} tsr_moe_router;

#endif
