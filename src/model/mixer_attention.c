/* mixer_attention.c — the attention mixer (layer_kind.h): grouped-query softmax attention with
 * its variants (QK-norm per head or over the projection, RoPE and its scalings, ALiBi, sliding
 * windows, sinks, soft-capping, Qwen3-Next's output gate), the kind of every layer that is not
 * another mixer's.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "model/layer_kind.h"

/* ---- its tensors ------------------------------------------------------------------------ */

static const tsr_param_row attn_params[] = {
    {TSR_P_QKVW, "qkvw", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 4, TSR_SPLIT_HEADS, 0, 1, 1},
    {TSR_P_QKVB, "qkvb", TSR_PK_BIAS, TSR_INIT_ZERO, 5, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_QNORMW, "qnormw", TSR_PK_NORM, TSR_INIT_ONE, 16, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_KNORMW, "knormw", TSR_PK_NORM, TSR_INIT_ONE, 17, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_SINKS, "sinks", TSR_PK_BIAS, TSR_INIT_NORMAL, 24, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_ATTPROJW, "attprojw", TSR_PK_WEIGHT, TSR_INIT_RESIDUAL, 6, TSR_SPLIT_HEADS, 1, 1, 1},
    {TSR_P_ATTPROJB, "attprojb", TSR_PK_BIAS, TSR_INIT_ZERO, 7, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_ATTNGATEW, "attngatew", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 36, TSR_SPLIT_HEADS, 0, 1, 0},
};

static const char *const attn_keys[] = {
    "model.n_head", "model.n_kv_head", "model.head_dim", "model.bias", "model.qkv_bias",
    "model.qk_norm", "model.qk_norm_scope", "model.pos", "model.rope_theta", "model.rope_scaling",
    "model.rope_factor", "model.rope_low_freq_factor", "model.rope_high_freq_factor",
    "model.rope_original_max_pos", "model.rope_local_theta", "model.rope_beta_fast",
    "model.rope_beta_slow", "model.rope_truncate", "model.partial_rotary_factor",
    "model.no_rope_layers", "model.layer_types", "model.sliding_window", "model.attn_sinks",
    "model.attn_logit_softcapping", "model.query_pre_attn_scalar", "model.attn_output_gate",
    NULL};

/* stacked over the LA attention layers: qkvw (LA, QKV, C) rows [q heads | k heads | v heads],
 * its bias; QK-norm's weights per head dimension (hs) or over the projections (NH hs, KVH hs);
 * the sinks (LA, NH); the output projection (LA, C, QD) and its bias; the gate (LA, QD, C) */
static void attn_layout(tsr_model *m) {
    const tsr_model_config *c = &m->cfg;
    const int64_t LA = m->LA, C = m->C, QKV = m->QKV, QD = m->QD, hs = m->hs;
    const int la = LA > 0, qn = c->qk_norm, bias = c->bias;
    const int proj = c->qk_norm_scope == TSR_QKN_PROJECTION;
    model_param_shape(m, TSR_P_QKVW, la, 3, LA, QKV, C, 0);
    model_param_shape(m, TSR_P_QKVB, la && (bias || c->qkv_bias), 2, LA, QKV, 0, 0);
    model_param_shape(m, TSR_P_QNORMW, la && qn, 2, LA, proj ? m->NH * hs : hs, 0, 0);
    model_param_shape(m, TSR_P_KNORMW, la && qn, 2, LA, proj ? m->KVH * hs : hs, 0, 0);
    model_param_shape(m, TSR_P_SINKS, la && c->attn_sinks, 2, LA, m->NH, 0, 0);
    model_param_shape(m, TSR_P_ATTPROJW, la, 3, LA, C, QD, 0);
    model_param_shape(m, TSR_P_ATTNGATEW, la && c->attn_output_gate, 3, LA, QD, C, 0);
    model_param_shape(m, TSR_P_ATTPROJB, la && bias, 2, LA, C, 0, 0);
}

const tsr_layer_kind kind_attention = {
    .name = "attention",
    .half = TSR_HALF_MIXER,
    .params = attn_params,
    .n_params = sizeof attn_params / sizeof *attn_params,
    .keys = attn_keys,
    .layout = attn_layout,
};
