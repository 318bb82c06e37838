/* mlp_dense.c — the dense MLP kinds (layer_kind.h): `dense`, gelu(x fcw^T) fcprojw^T (GPT-2,
 * MPT), and `gated`, act(x Wg^T) * (x Wu^T) fcprojw^T with act SiLU (SwiGLU: Llama, Qwen) or the
 * tanh GELU (GeGLU: Gemma), the gate and up projections fused as fcw's rows [gate | up]. A model
 * has one of them (model.mlp), in every layer the mixture of experts does not take.
 */
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "model/layer_kind.h"

/* ---- their tensors ---------------------------------------------------------------------- */

/* fcw's output dimension is one block (dense) or two ([gate | up], gated), each split alike */
#define DENSE_PARAMS(parts)                                                                    \
    {TSR_P_FCW, "fcw", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 10, TSR_SPLIT_OUT, 0, parts, 1},        \
    {TSR_P_FCB, "fcb", TSR_PK_BIAS, TSR_INIT_ZERO, 11, TSR_SPLIT_OUT, 0, parts, 0},            \
    {TSR_P_FCPROJW, "fcprojw", TSR_PK_WEIGHT, TSR_INIT_RESIDUAL, 12, TSR_SPLIT_IN, 1, 1, 1},   \
    {TSR_P_FCPROJB, "fcprojb", TSR_PK_BIAS, TSR_INIT_ZERO, 13, TSR_SPLIT_REPLICATED, -1, 1, 0}
static const tsr_param_row dense_params[] = {DENSE_PARAMS(1)};
static const tsr_param_row gated_params[] = {DENSE_PARAMS(2)};
#undef DENSE_PARAMS

static const char *const dense_keys[] = {"model.mlp", "model.gelu", "model.intermediate_size",
                                         "model.expansion_ratio", "model.bias", NULL};
static const char *const gated_keys[] = {"model.mlp", "model.intermediate_size",
                                         "model.expansion_ratio", "model.bias", NULL};

static int gated_serves(const tsr_model_config *c, int l) {
    (void)l;
    return config_mlp_gated(c);
}

/* stacked over the LD dense layers: fcw (LD, FW, C), FW = F or 2F [gate | up], its bias; fcprojw
 * (LD, C, F) and its bias */
static void dense_layout(tsr_model *m) {
    const int64_t C = m->C, F = m->F, FW = m->FW, LD = m->LD;
    const int bias = m->cfg.bias;
    model_param_shape(m, TSR_P_FCW, LD > 0, 3, LD, FW, C, 0);
    model_param_shape(m, TSR_P_FCB, LD > 0 && bias, 2, LD, FW, 0, 0);
    model_param_shape(m, TSR_P_FCPROJW, LD > 0, 3, LD, C, F, 0);
    model_param_shape(m, TSR_P_FCPROJB, LD > 0 && bias, 2, LD, C, 0, 0);
}

const tsr_layer_kind kind_dense = {
    .name = "dense",
    .half = TSR_HALF_MLP,
    .params = dense_params,
    .n_params = sizeof dense_params / sizeof *dense_params,
    .keys = dense_keys,
    .layout = dense_layout,
};

const tsr_layer_kind kind_gated = {
    .name = "gated",
    .half = TSR_HALF_MLP,
    .params = gated_params,
    .n_params = sizeof gated_params / sizeof *gated_params,
    .keys = gated_keys,
    .serves = gated_serves,
    .layout = dense_layout,
};
