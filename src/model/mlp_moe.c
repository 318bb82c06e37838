/* mlp_moe.c — the mixture-of-experts MLP kind (layer_kind.h; docs/moe.md): a router, E routed
 * SwiGLU (or gpt-oss's) experts of which each token reaches K, and an optional shared expert
 * (with Qwen3-Next's gate), in every model.moe_every-th layer.
 */
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "model/layer_kind.h"

/* ---- its tensors ------------------------------------------------------------------------ */

static const tsr_param_row moe_params[] = {
    {TSR_P_ROUTERW, "routerw", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 19, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_ROUTERB, "routerb", TSR_PK_BIAS, TSR_INIT_ZERO, 37, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_EXPW1, "expw1", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 20, TSR_SPLIT_EXPERTS, 0, 1, 0},
    {TSR_P_EXPB1, "expb1", TSR_PK_BIAS, TSR_INIT_ZERO, 38, TSR_SPLIT_EXPERTS, 0, 1, 0},
    {TSR_P_EXPW2, "expw2", TSR_PK_WEIGHT, TSR_INIT_RESIDUAL, 21, TSR_SPLIT_EXPERTS, 0, 1, 0},
    {TSR_P_EXPB2, "expb2", TSR_PK_BIAS, TSR_INIT_ZERO, 39, TSR_SPLIT_EXPERTS, 0, 1, 0},
    {TSR_P_SHW1, "shw1", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 22, TSR_SPLIT_OUT, 0, 2, 1},
    {TSR_P_SHW2, "shw2", TSR_PK_WEIGHT, TSR_INIT_RESIDUAL, 23, TSR_SPLIT_IN, 1, 1, 1},
    {TSR_P_SHGATEW, "shgatew", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 40, TSR_SPLIT_REPLICATED, -1, 1, 0},
};

static const char *const moe_keys[] = {
    "model.moe_experts", "model.moe_top_k", "model.moe_intermediate_size", "model.moe_every",
    "model.moe_norm_topk", "model.moe_shared_size", "model.moe_shared_gate",
    "model.moe_router_bias", "model.moe_expert_bias", "model.moe_act", "model.swiglu_limit",
    NULL};

static int moe_serves(const tsr_model_config *c, int l) {
    return c->moe_experts > 0 && (l + 1) % c->moe_every == 0;
}

/* stacked over the LM MoE layers: the router (LM, E, C) and its bias (LM, E); each expert's
 * [gate | up] rows (LM, E, 2FE, C) and down projection (LM, E, C, FE), their biases; the shared
 * expert's [gate | up] (LM, 2S, C), down (LM, C, S) and gate (LM, 1, C) */
static void moe_layout(tsr_model *m) {
    const tsr_model_config *c = &m->cfg;
    const int64_t C = m->C, LM = m->LM, E = m->E, FE = m->FE, S = m->S;
    const int on = LM > 0, rb = on && c->moe_router_bias, xb = on && c->moe_expert_bias;
    model_param_shape(m, TSR_P_ROUTERW, on, 3, LM, E, C, 0);
    model_param_shape(m, TSR_P_ROUTERB, rb, 2, LM, E, 0, 0);
    model_param_shape(m, TSR_P_EXPW1, on, 4, LM, E, 2 * FE, C);
    model_param_shape(m, TSR_P_EXPB1, xb, 3, LM, E, 2 * FE, 0);
    model_param_shape(m, TSR_P_EXPW2, on, 4, LM, E, C, FE);
    model_param_shape(m, TSR_P_EXPB2, xb, 3, LM, E, C, 0);
    model_param_shape(m, TSR_P_SHW1, on && S > 0, 3, LM, 2 * S, C, 0);
    model_param_shape(m, TSR_P_SHW2, on && S > 0, 3, LM, C, S, 0);
    model_param_shape(m, TSR_P_SHGATEW, on && S > 0 && c->moe_shared_gate, 3, LM, 1, C, 0);
}

const tsr_layer_kind kind_moe = {
    .name = "moe",
    .half = TSR_HALF_MLP,
    .params = moe_params,
    .n_params = sizeof moe_params / sizeof *moe_params,
    .keys = moe_keys,
    .serves = moe_serves,
    .layout = moe_layout,
};
