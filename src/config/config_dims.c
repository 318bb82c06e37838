/* config_dims.c — what a model config derives and lists (config.h): its sizes (config_model_dims:
 * the heads, the MLP's width, the mixture of experts; the norm's and RoPE scaling's settings
 * refused together), LoRA's targets, the layers activation checkpointing covers.
 */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config/config.h"
#include "config/config_table.h"

/* DeepSeek's router (docs/moe.md "DeepSeek's router") against the experts: whole groups, enough
 * experts in the chosen groups for top_k, two experts a group for noaux_tc's group score, no
 * z-loss over sigmoid scores, a MoE layer after the dense ones */
static int router_check(const tsr_model_config *m, int moe_layers, const char **key, char *why,
                        size_t cap) {
    const int E = m->moe_experts, G = m->moe_n_group, per = G > 0 ? E / G : 0;
    const int grouped = m->moe_topk_method != TSR_MOE_TOPK_GREEDY;
    const struct { int bad; const char *key; } rules[] = {
        {E % G != 0, "model.moe_n_group"},
        {m->moe_topk_group > G, "model.moe_topk_group"},
        {grouped && m->moe_top_k > m->moe_topk_group * per, "model.moe_topk_group"},
        {!grouped && G != 1, "model.moe_n_group"},
        {m->moe_topk_method == TSR_MOE_TOPK_NOAUX_TC && G > 1 && per < 2, "model.moe_n_group"},
        {m->moe_scoring == TSR_MOE_SCORE_SIGMOID && m->moe_z_loss_coef != 0,
         "model.moe_z_loss_coef"},
        {moe_layers == 0, "model.moe_dense_layers"},
    };
    static const char *const reason[] = {
        "model.moe_experts must be a multiple of model.moe_n_group (whole groups)",
        "model.moe_topk_group must be at most model.moe_n_group",
        "the chosen groups must hold at least model.moe_top_k experts "
        "(model.moe_topk_group x model.moe_experts / model.moe_n_group)",
        "groups need model.moe_topk_method = \"group_limited_greedy\" or \"noaux_tc\" (greedy "
        "chooses over every expert)",
        "noaux_tc ranks a group by the sum of its two highest scores: at least 2 experts a group",
        "the z-loss is over softmax's logsumexp: with model.moe_scoring = \"sigmoid\" set it to 0",
        "no MoE layer is left after the dense ones (model.moe_dense_layers with model.moe_every "
        "and model.n_layer)",
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (rules[i].bad) {
            *key = rules[i].key;
            snprintf(why, cap, "%s: %s (model.moe_experts = %d, moe_n_group = %d, "
                     "moe_topk_group = %d, moe_top_k = %d, moe_dense_layers = %d)", rules[i].key,
                     reason[i], E, G, m->moe_topk_group, m->moe_top_k, m->moe_dense_layers);
            return -1;
        }
    return 0;
}

/* The mixture-of-experts keys (docs/moe.md) into d (E, K, FE, S, LM; all 0 in a dense model, where
 * the structural MoE keys must keep their defaults). d->F is resolved already. */
static int moe_dims(const tsr_model_config *m, tsr_model_dims *d, const char **key, char *why,
                    size_t cap) {
    if (m->moe_experts == 0) {
        const struct { int set; const char *name; } dense[] = {
            {m->moe_intermediate_size != 0, "model.moe_intermediate_size"},
            {m->moe_shared_size != 0, "model.moe_shared_size"},
            {m->moe_shared_gate, "model.moe_shared_gate"},
            {m->moe_every != 1, "model.moe_every"},
            {m->moe_z_loss_coef != 0, "model.moe_z_loss_coef"},
            {m->moe_router_bias, "model.moe_router_bias"},
            {m->moe_expert_bias, "model.moe_expert_bias"},
            {m->moe_act != TSR_MOE_ACT_SWIGLU, "model.moe_act"},
            {m->moe_scoring != TSR_MOE_SCORE_SOFTMAX, "model.moe_scoring"},
            {m->moe_topk_method != TSR_MOE_TOPK_GREEDY, "model.moe_topk_method"},
            {m->moe_n_group != 1, "model.moe_n_group"},
            {m->moe_topk_group != 1, "model.moe_topk_group"},
            {m->moe_routed_scaling != 1.0, "model.moe_routed_scaling"},
            {m->moe_dense_layers != 0, "model.moe_dense_layers"},
        };
        for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++)
            if (dense[i].set) {
                *key = dense[i].name;
                snprintf(why, cap, "%s is set, but model.moe_experts = 0 (a dense model): set "
                         "model.moe_experts to make the model a mixture of experts, or leave %s "
                         "out", dense[i].name, dense[i].name);
                return -1;
            }
        return 0;
    }
    if (m->moe_experts < 2) {
        *key = "model.moe_experts";
        snprintf(why, cap, "model.moe_experts = %d: a mixture needs at least 2 experts (0 = "
                 "a dense model)", m->moe_experts);
        return -1;
    }
    if (m->moe_top_k > m->moe_experts) {
        *key = "model.moe_top_k";
        snprintf(why, cap, "model.moe_top_k = %d is more than model.moe_experts = %d: each "
                 "token goes to top_k distinct experts", m->moe_top_k, m->moe_experts);
        return -1;
    }
    if (m->moe_every > m->n_layer) {
        *key = "model.moe_every";
        snprintf(why, cap, "model.moe_every = %d with model.n_layer = %d leaves no MoE layer "
                 "(layer l is MoE when l + 1 is a multiple of moe_every)", m->moe_every,
                 m->n_layer);
        return -1;
    }
    if (m->moe_intermediate_size > INT_MAX / 2 || m->moe_shared_size > INT_MAX / 2) {
        *key = m->moe_shared_size > INT_MAX / 2 ? "model.moe_shared_size"
                                                : "model.moe_intermediate_size";
        snprintf(why, cap, "%s is larger than %d (SwiGLU's fused gate and up projection is "
                 "twice as wide)", *key, INT_MAX / 2);
        return -1;
    }
    for (int l = 0; l < m->n_layer; l++) d->LM += config_moe_layer(m, l);
    if (router_check(m, d->LM, key, why, cap) != 0) return -1;
    if (m->moe_shared_gate && m->moe_shared_size == 0) {
        *key = "model.moe_shared_gate";
        snprintf(why, cap, "model.moe_shared_gate = true gates the shared expert, but "
                 "model.moe_shared_size = 0 (none): set model.moe_shared_size, or leave "
                 "model.moe_shared_gate out");
        return -1;
    }
    d->E = m->moe_experts;
    d->K = m->moe_top_k;
    d->FE = m->moe_intermediate_size > 0 ? m->moe_intermediate_size : d->F;
    d->S = m->moe_shared_size;
    return 0;
}

int config_moe_layer(const tsr_model_config *m, int l) {
    const int at = config_layer_at(m, l);
    return m->moe_experts > 0 && at >= m->moe_dense_layers && (at + 1) % m->moe_every == 0;
}

/* the heads of config_model_dims: query and key/value heads, the head size and what it must
 * divide or be */
static int head_dims(const tsr_model_config *m, tsr_model_dims *d, const char **key, char *why,
                     size_t cap) {
    d->NH = m->n_head;
    d->KVH = m->n_kv_head > 0 ? m->n_kv_head : m->n_head;
    *key = "model.n_head";
    if (m->head_dim > 0) {
        d->hs = m->head_dim;
    } else if (m->n_head > m->d_model) {
        snprintf(why, cap, "model.n_head = %d is larger than model.d_model = %d: the head size "
                 "d_model / n_head must be >= 1 (or set model.head_dim)", m->n_head, m->d_model);
        return -1;
    } else if (m->d_model % m->n_head != 0) {
        *key = "model.d_model";
        snprintf(why, cap, "model.d_model = %d is not divisible by model.n_head = %d: choose a "
                 "d_model that is a multiple of n_head (head size = d_model / n_head), or set "
                 "model.head_dim", m->d_model, m->n_head);
        return -1;
    } else {
        d->hs = m->d_model / m->n_head;
    }
    if (d->NH % d->KVH != 0 || d->KVH > d->NH) {
        *key = "model.n_kv_head";
        snprintf(why, cap, "model.n_kv_head = %d with model.n_head = %d: it must divide n_head "
                 "(and so be at most n_head): every key/value head serves the same number of "
                 "query heads, n_head / n_kv_head", m->n_kv_head, m->n_head);
        return -1;
    }
    if (((int64_t)d->NH + 2 * (int64_t)d->KVH) * d->hs > INT_MAX / 8) {
        *key = "model.head_dim";
        snprintf(why, cap, "model.head_dim = %d with %d heads and %d key/value heads makes a qkv "
                 "projection wider than %d", d->hs, d->NH, d->KVH, INT_MAX / 8);
        return -1;
    }
    if (m->pos == TSR_POS_ROPE && d->hs % 2 != 0) {
        *key = m->head_dim > 0 ? "model.head_dim" : "model.n_head";
        snprintf(why, cap, "with model.pos = \"rope\" the head size must be even (RoPE turns "
                 "pairs of dimensions); it is %d", d->hs);
        return -1;
    }
    return 0;
}

/* the dense MLP's width of config_model_dims: model.intermediate_size, else expansion_ratio x
 * d_model, a whole number */
static int mlp_width(const tsr_model_config *m, tsr_model_dims *d, const char **key, char *why,
                     size_t cap) {
    if (m->intermediate_size > INT_MAX / 2) {
        *key = "model.intermediate_size";
        snprintf(why, cap, "model.intermediate_size = %d is larger than %d (SwiGLU's fused gate "
                 "and up projection is twice as wide)", m->intermediate_size, INT_MAX / 2);
        return -1;
    }
    if (m->intermediate_size > 0) {
        d->F = m->intermediate_size;
        return 0;
    }
    double hidden = m->expansion_ratio * m->d_model;
    if (hidden != floor(hidden) || hidden < 1 || hidden > INT_MAX / 2) {
        char r[64], h[64];
        cfgtab_format_double(r, sizeof r, m->expansion_ratio);
        cfgtab_format_double(h, sizeof h, hidden);
        *key = "model.expansion_ratio";
        snprintf(why, cap, "model.expansion_ratio = %s with model.d_model = %d gives an MLP "
                 "width of %s: choose values whose product is a whole number in [1, %d] (or "
                 "set model.intermediate_size)", r, m->d_model, h, INT_MAX / 2);
        return -1;
    }
    d->F = (int)hidden;
    return 0;
}

/* the norm's and RoPE scaling's settings that config_model_dims refuses together */
static int norm_rope_check(const tsr_model_config *m, const char **key, char *why, size_t cap) {
    if (m->norm == TSR_NORM_LAYERNORM && m->norm_eps != 1e-5) {
        char e[64];
        cfgtab_format_double(e, sizeof e, m->norm_eps);
        *key = "model.norm_eps";
        snprintf(why, cap, "model.norm_eps = %s with model.norm = \"layernorm\": LayerNorm's "
                 "eps is fixed at 1e-5 (norm_eps is RMSNorm's)", e);
        return -1;
    }
    if (m->norm_placement != TSR_NPLACE_PRE && m->norm != TSR_NORM_RMSNORM) {
        *key = "model.norm_placement";
        snprintf(why, cap, "model.norm_placement = \"%s\" needs model.norm = \"rmsnorm\" "
                 "(Gemma's and OLMo 2's norms; the post-norms have no LayerNorm form here)",
                 m->norm_placement == TSR_NPLACE_POST ? "post" : "sandwich");
        return -1;
    }
    if (m->embed_scale != TSR_EMB_SCALE_NONE && m->pos == TSR_POS_LEARNED) {
        *key = "model.embed_scale";
        snprintf(why, cap, "model.embed_scale = \"sqrt_d_model\" with model.pos = \"learned\": "
                 "Gemma scales the token embedding alone, and the encoder adds the positions into "
                 "it (use model.pos = \"rope\")");
        return -1;
    }
    if (m->pos == TSR_POS_ROPE && m->rope_scaling == TSR_ROPE_SCALING_LLAMA3 &&
        m->rope_high_freq_factor <= m->rope_low_freq_factor) {
        *key = "model.rope_high_freq_factor";
        snprintf(why, cap, "model.rope_high_freq_factor = %g is not above "
                 "model.rope_low_freq_factor = %g: Llama 3's scaling interpolates between the "
                 "two (its published values: 4 and 1)", m->rope_high_freq_factor,
                 m->rope_low_freq_factor);
        return -1;
    }
    return 0;
}

/* The n-th entry of model.layer_types (n counted from 0): *at and *len of it; the entry count
 * when n is past the last one. Entries are comma-separated, spaces around them ignored. */
static int layer_type_at(const char *s, int n, const char **at, size_t *len) {
    int k = 0;
    for (const char *p = s;; k++) {
        size_t w = strcspn(p, ",");
        const char *b = p;
        while (w > 0 && *b == ' ') b++, w--;
        while (w > 0 && b[w - 1] == ' ') w--;
        if (k == n) *at = b, *len = w;
        p += strcspn(p, ",");
        if (!*p) return k + 1;
        p++;
    }
}

static int type_is(const char *at, size_t len, const char *name) {
    return strlen(name) == len && strncmp(at, name, len) == 0;
}

static int layer_type_is(const tsr_model_config *m, int l, const char *name);

/* A list of per-layer entries s (key's value, layer_type_at's entries): each one of the n_ok
 * names ok ("KEY entry K is "X": expected EXPECTED"), at most one per layer. */
static int layer_list_check(const char *key, const char *s, const char *const *ok, int n_ok,
                            const char *expected, int n_layer, char *why, size_t cap) {
    const char *at = NULL;
    size_t len = 0;
    int n = layer_type_at(s, -1, &at, &len);
    for (int k = 0; k < n; k++) {
        layer_type_at(s, k, &at, &len);
        int known = 0;
        for (int j = 0; j < n_ok; j++) known |= type_is(at, len, ok[j]);
        if (!known) {
            snprintf(why, cap, "%s entry %d is \"%.*s\": expected %s", key, k,
                     (int)(len < 64 ? len : 64), at, expected);
            return -1;
        }
    }
    if (n > n_layer) {
        snprintf(why, cap, "%s has %d entries with model.n_layer = %d: give one per layer, or a "
                 "shorter pattern (repeated over the layers)", key, n, n_layer);
        return -1;
    }
    return 0;
}

/* model.layer_types and model.sliding_window against each other and the layer count */
static int layer_types_check(const tsr_model_config *m, const char **key, char *why, size_t cap) {
    static const char *const types[] = {"sliding_attention", "full_attention", "linear_attention"};
    const char *s = m->layer_types, *at = NULL;
    size_t len = 0;
    if (!s[0]) return 0;
    *key = "model.layer_types";
    if (layer_list_check(*key, s, types, 3, "\"sliding_attention\", \"full_attention\" or "
                         "\"linear_attention\" (Hugging Face's names)", m->n_layer, why, cap))
        return -1;
    int sliding = 0;
    for (int k = 0, n = layer_type_at(s, -1, &at, &len); k < n; k++) {
        layer_type_at(s, k, &at, &len);
        sliding |= type_is(at, len, "sliding_attention");
    }
    if (config_linear_layers(m) > 0 && m->linear_num_value_heads % m->linear_num_key_heads) {
        *key = "model.linear_num_value_heads";
        snprintf(why, cap, "model.linear_num_value_heads = %d is not a multiple of "
                 "model.linear_num_key_heads = %d (Qwen3-Next: 32 and 16)",
                 m->linear_num_value_heads, m->linear_num_key_heads);
        return -1;
    }
    if (sliding && m->sliding_window == 0) {
        *key = "model.sliding_window";
        snprintf(why, cap, "model.layer_types names sliding_attention layers but "
                 "model.sliding_window = 0: set the window (Gemma 3: 512 or 1024, gpt-oss: 128)");
        return -1;
    }
    return 0;
}

/* model.no_rope_layers: each entry "0" or "1", at most one per layer */
static int no_rope_check(const tsr_model_config *m, const char **key, char *why, size_t cap) {
    static const char *const flags[] = {"0", "1"};
    if (!m->no_rope_layers[0]) return 0;
    *key = "model.no_rope_layers";
    return layer_list_check(*key, m->no_rope_layers, flags, 2, "1 (RoPE) or 0 (no positions), "
                            "Hugging Face SmolLM3's no_rope_layers", m->n_layer, why, cap);
}

/* the keys of docs/models.md "Positions" against model.pos and the head size */
static int positions_check(const tsr_model_config *m, int hs, const char **key, char *why,
                           size_t cap) {
    const char *k = m->rope_local_theta > 0 ? "model.rope_local_theta"
                    : m->partial_rotary_factor != 1.0 ? "model.partial_rotary_factor"
                    : m->no_rope_layers[0] ? "model.no_rope_layers" : NULL;
    if (k && m->pos != TSR_POS_ROPE) {
        *key = k;
        snprintf(why, cap, "%s needs model.pos = \"rope\" (it is a setting of the rotary "
                 "embeddings)", k);
        return -1;
    }
    const double rot = m->partial_rotary_factor * hs;
    if (m->pos == TSR_POS_ROPE && (rot != floor(rot) || (long)rot % 2 != 0 || rot < 2)) {
        *key = "model.partial_rotary_factor";
        snprintf(why, cap, "model.partial_rotary_factor = %g with a head size of %d turns %g "
                 "dimensions: expected an even whole number >= 2 (RoPE turns pairs)",
                 m->partial_rotary_factor, hs, rot);
        return -1;
    }
    return no_rope_check(m, key, why, cap);
}

int config_layer_rope(const tsr_model_config *m, int l) {
    if (m->pos != TSR_POS_ROPE) return 0;
    if (!m->no_rope_layers[0]) return 1;
    const char *at = NULL;
    size_t len = 0;
    int n = layer_type_at(m->no_rope_layers, -1, &at, &len);
    layer_type_at(m->no_rope_layers, config_layer_at(m, l) % n, &at, &len);
    return !type_is(at, len, "0");
}

int config_layer_window(const tsr_model_config *m, int l) {
    if (!m->layer_types[0]) return m->sliding_window;
    return layer_type_is(m, l, "sliding_attention") ? m->sliding_window : 0;
}

/* layer l's entry of model.layer_types is name (l counted round a shorter pattern) */
static int layer_type_is(const tsr_model_config *m, int l, const char *name) {
    if (!m->layer_types[0]) return 0;
    const char *at = NULL;
    size_t len = 0;
    int n = layer_type_at(m->layer_types, -1, &at, &len);
    layer_type_at(m->layer_types, config_layer_at(m, l) % n, &at, &len);
    return type_is(at, len, name);
}

int config_layer_linear(const tsr_model_config *m, int l) {
    return layer_type_is(m, l, "linear_attention");
}

int config_linear_layers(const tsr_model_config *m) {
    int n = 0;
    for (int l = 0; l < m->n_layer; l++) n += config_layer_linear(m, l);
    return n;
}

/* whether window layers are set, and by which key */
static const char *window_key(const tsr_model_config *m) {
    for (int l = 0; l < m->n_layer; l++)
        if (config_layer_window(m, l) > 0)
            return m->layer_types[0] ? "model.layer_types" : "model.sliding_window";
    return NULL;
}

static int qpas_set(const tsr_model_config *m) {
    const int hs = m->head_dim > 0 ? m->head_dim : m->d_model / (m->n_head > 0 ? m->n_head : 1);
    return m->query_pre_attn_scalar > 0 && m->query_pre_attn_scalar != hs;
}

static const char *rope_key(const tsr_model_config *m, tsr_model_variant v) {
    if (m->pos != TSR_POS_ROPE) return NULL;
    switch (v) {
    case TSR_VAR_ROPE_SCALING:
        return m->rope_scaling == TSR_ROPE_SCALING_LINEAR || m->rope_scaling == TSR_ROPE_SCALING_YARN
                   ? "model.rope_scaling" : NULL;
    case TSR_VAR_ROPE_LOCAL: return m->rope_local_theta > 0 ? "model.rope_local_theta" : NULL;
    case TSR_VAR_PARTIAL_ROTARY:
        return m->partial_rotary_factor != 1.0 ? "model.partial_rotary_factor" : NULL;
    case TSR_VAR_NOPE: return m->no_rope_layers[0] ? "model.no_rope_layers" : NULL;
    default: return NULL;
    }
}

/* DeepSeek's router (docs/moe.md "DeepSeek's router"): the first of its keys off its default */
static const char *ds_router_key(const tsr_model_config *m) {
    if (m->moe_scoring != TSR_MOE_SCORE_SOFTMAX) return "model.moe_scoring";
    if (m->moe_topk_method != TSR_MOE_TOPK_GREEDY) return "model.moe_topk_method";
    if (m->moe_n_group != 1) return "model.moe_n_group";
    if (m->moe_routed_scaling != 1.0) return "model.moe_routed_scaling";
    return m->moe_dense_layers ? "model.moe_dense_layers" : NULL;
}

static const char *moe_key(const tsr_model_config *m, tsr_model_variant v) {
    if (m->moe_experts == 0) return NULL;
    switch (v) {
    case TSR_VAR_ROUTER_BIAS: return m->moe_router_bias ? "model.moe_router_bias" : NULL;
    case TSR_VAR_EXPERT_BIAS: return m->moe_expert_bias ? "model.moe_expert_bias" : NULL;
    case TSR_VAR_MOE_ACT: return m->moe_act != TSR_MOE_ACT_SWIGLU ? "model.moe_act" : NULL;
    case TSR_VAR_SHARED_GATE: return m->moe_shared_gate ? "model.moe_shared_gate" : NULL;
    case TSR_VAR_DS_ROUTER: return ds_router_key(m);
    default: return NULL;
    }
}

#define KEY_IF(cond, key) ((cond) ? (key) : NULL)

const char *config_variant_key(const tsr_model_config *m, tsr_model_variant v) {
    switch (v) {
    case TSR_VAR_LINEAR: return KEY_IF(config_linear_layers(m) > 0, "model.layer_types");
    case TSR_VAR_ATTN_GATE: return KEY_IF(m->attn_output_gate, "model.attn_output_gate");
    case TSR_VAR_WINDOW: return window_key(m);
    case TSR_VAR_SINKS: return KEY_IF(m->attn_sinks, "model.attn_sinks");
    case TSR_VAR_QPAS: return KEY_IF(qpas_set(m), "model.query_pre_attn_scalar");
    case TSR_VAR_NORM_PLACEMENT:
        return KEY_IF(m->norm_placement != TSR_NPLACE_PRE, "model.norm_placement");
    case TSR_VAR_QKN_PROJECTION:
        return KEY_IF(m->qk_norm && m->qk_norm_scope == TSR_QKN_PROJECTION, "model.qk_norm_scope");
    case TSR_VAR_EMBED_SCALE: return KEY_IF(m->embed_scale != TSR_EMB_SCALE_NONE, "model.embed_scale");
    case TSR_VAR_MLA: return KEY_IF(m->kv_lora_rank > 0, "model.kv_lora_rank");
    case TSR_VAR_GEGLU: return KEY_IF(m->mlp == TSR_MLP_GEGLU_TANH, "model.mlp");
    case TSR_VAR_ATTN_SOFTCAP:
        return KEY_IF(m->attn_logit_softcapping > 0, "model.attn_logit_softcapping");
    case TSR_VAR_FINAL_SOFTCAP:
        return KEY_IF(m->final_logit_softcapping > 0, "model.final_logit_softcapping");
    case TSR_VAR_ROPE_SCALING: case TSR_VAR_ROPE_LOCAL: case TSR_VAR_PARTIAL_ROTARY:
    case TSR_VAR_NOPE: return rope_key(m, v);
    default: return moe_key(m, v);
    }
}

#undef KEY_IF

/* the first variant of [first, last] that is set (the enum's order), or NULL */
static const char *first_variant(const tsr_model_config *m, tsr_model_variant first,
                                 tsr_model_variant last) {
    for (int v = first; v <= (int)last; v++) {
        const char *k = config_variant_key(m, (tsr_model_variant)v);
        if (k) return k;
    }
    return NULL;
}

const char *config_attn_variant_key(const tsr_model_config *m) {
    return first_variant(m, TSR_VAR_LINEAR, TSR_VAR_COUNT - 1);
}

const char *config_moe_variant_key(const tsr_model_config *m) {
    return first_variant(m, TSR_VAR_ROUTER_BIAS, TSR_VAR_SHARED_GATE);
}

const char *config_position_variant_key(const tsr_model_config *m) {
    return first_variant(m, TSR_VAR_ATTN_SOFTCAP, TSR_VAR_NOPE);
}

const char *config_rope_variant_key(const tsr_model_config *m) {
    return first_variant(m, TSR_VAR_ROPE_SCALING, TSR_VAR_NOPE);
}

int config_mlp_gated(const tsr_model_config *m) { return m->mlp != TSR_MLP_GELU; }

/* The MLA keys of a model without MLA (model.kv_lora_rank = 0) keep their defaults */
static int mla_unset(const tsr_model_config *m, const char **key, char *why, size_t cap) {
    const struct { int set; const char *name; } keys[] = {
        {m->q_lora_rank != 0, "model.q_lora_rank"},
        {m->qk_nope_head_dim != 128, "model.qk_nope_head_dim"},
        {m->qk_rope_head_dim != 64, "model.qk_rope_head_dim"},
        {m->v_head_dim != 128, "model.v_head_dim"},
        {m->rope_interleave, "model.rope_interleave"},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (keys[i].set) {
            *key = keys[i].name;
            snprintf(why, cap, "%s is set, but model.kv_lora_rank = 0 (no multi-head latent "
                     "attention): set model.kv_lora_rank, or leave %s out", keys[i].name,
                     keys[i].name);
            return -1;
        }
    return 0;
}

/* the attention settings multi-head latent attention does not take (its heads are its own:
 * docs/models.md "DeepSeek"), each refused with its key */
static int mla_others(const tsr_model_config *m, const char **key, char *why, size_t cap) {
    const int hs_set = m->head_dim > 0, kv_set = m->n_kv_head > 0 && m->n_kv_head != m->n_head;
    const struct { int set; const char *name, *want; } keys[] = {
        {m->pos != TSR_POS_ROPE, "model.pos", "\"rope\""},
        {m->norm != TSR_NORM_RMSNORM, "model.norm", "\"rmsnorm\""},
        {m->bias, "model.bias", "false"},
        {m->qkv_bias, "model.qkv_bias", "false"},
        {m->qk_norm, "model.qk_norm", "false"},
        {hs_set, "model.head_dim", "0 (qk_nope_head_dim + qk_rope_head_dim is MLA's)"},
        {kv_set, "model.n_kv_head", "0 (every MLA head has its own key and value)"},
        {m->attn_sinks, "model.attn_sinks", "false"},
        {m->attn_output_gate, "model.attn_output_gate", "false"},
        {window_key(m) != NULL, window_key(m), "none (no sliding window)"},
        {m->attn_logit_softcapping > 0, "model.attn_logit_softcapping", "0"},
        {m->query_pre_attn_scalar > 0, "model.query_pre_attn_scalar", "0"},
        {m->partial_rotary_factor != 1.0, "model.partial_rotary_factor", "1"},
        {m->no_rope_layers[0] != '\0', "model.no_rope_layers", "\"\""},
        {m->rope_local_theta > 0, "model.rope_local_theta", "0"},
        {m->qk_rope_head_dim % 2 != 0, "model.qk_rope_head_dim", "an even number"},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (keys[i].set) {
            *key = keys[i].name;
            snprintf(why, cap, "%s with model.kv_lora_rank = %d (multi-head latent attention): "
                     "expected %s", keys[i].name, m->kv_lora_rank, keys[i].want);
            return -1;
        }
    return 0;
}

/* multi-head latent attention's heads (model.kv_lora_rank > 0): NH heads of queries and keys of
 * qk_nope_head_dim + qk_rope_head_dim, as many key/value heads; the projections' widths bounded */
static int mla_dims(const tsr_model_config *m, tsr_model_dims *d, const char **key, char *why,
                    size_t cap) {
    if (m->kv_lora_rank == 0) return mla_unset(m, key, why, cap);
    if (mla_others(m, key, why, cap) != 0) return -1;
    const int64_t qk = (int64_t)m->qk_nope_head_dim + m->qk_rope_head_dim;
    const int64_t kv = (int64_t)m->qk_nope_head_dim + m->v_head_dim;
    if ((int64_t)m->n_head * (qk > kv ? qk : kv) * 3 > INT_MAX / 8) {
        *key = "model.n_head";
        snprintf(why, cap, "model.n_head = %d with MLA heads of %lld (query/key) and %lld "
                 "(key/value) makes projections wider than %d", m->n_head, (long long)qk,
                 (long long)kv, INT_MAX / 24);
        return -1;
    }
    d->NH = d->KVH = m->n_head;
    d->hs = (int)qk;
    return 0;
}

int config_model_dims(const tsr_model_config *m, tsr_model_dims *d, const char **key, char *why,
                      size_t cap) {
    memset(d, 0, sizeof *d);
    if (mla_dims(m, d, key, why, cap) != 0) return -1;
    if (!m->kv_lora_rank && head_dims(m, d, key, why, cap) != 0) return -1;
    if (mlp_width(m, d, key, why, cap) != 0) return -1;
    if (moe_dims(m, d, key, why, cap) != 0) return -1;
    if (layer_types_check(m, key, why, cap) != 0) return -1;
    /* (MLA's RoPE turns qk_rope_head_dim, checked by mla_dims) */
    if (positions_check(m, m->kv_lora_rank ? m->qk_rope_head_dim : d->hs, key, why, cap) != 0)
        return -1;
    return norm_rope_check(m, key, why, cap);
}

static const char *const lora_target_names[TSR_LORA_COUNT] = {
    "q", "k", "v", "o", "gate", "up", "down", "in_proj_qkvz", "in_proj_ba", "out_proj",
    "attn_gate", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"};

/* multi-head latent attention's absent targets (a bit mask): without MLA its own four; with it
 * k and v (its keys and values come from kv_a and kv_b), and q_proj or the low-rank pair,
 * whichever model.q_lora_rank leaves out */
static unsigned lora_absent_mla(const tsr_model_config *m) {
    const unsigned low = 1u << TSR_LORA_QA | 1u << TSR_LORA_QB;
    if (m->kv_lora_rank == 0) return low | 1u << TSR_LORA_KVA | 1u << TSR_LORA_KVB;
    return 1u << TSR_LORA_K | 1u << TSR_LORA_V | (m->q_lora_rank > 0 ? 1u << TSR_LORA_Q : low);
}

/* the targets the model has no projection for (a bit mask): the MLP's in a MoE model, gate and
 * up in a GELU one, the DeltaNet's without linear layers, attn_gate without the gate, MLA's */
static unsigned lora_absent(const tsr_model_config *m) {
    const unsigned mlp = 1u << TSR_LORA_GATE | 1u << TSR_LORA_UP | 1u << TSR_LORA_DOWN;
    const unsigned dn = 1u << TSR_LORA_QKVZ | 1u << TSR_LORA_BA | 1u << TSR_LORA_OUTPROJ;
    unsigned no = m->moe_experts > 0 ? mlp
                  : !config_mlp_gated(m) ? (1u << TSR_LORA_GATE | 1u << TSR_LORA_UP) : 0;
    if (config_linear_layers(m) == 0) no |= dn;
    if (!m->attn_output_gate) no |= 1u << TSR_LORA_AGATE;
    return no | lora_absent_mla(m);
}

/* why target t is absent (lora_absent, not an MLP target) */
static const char *lora_absent_why(const tsr_model_config *m, int t) {
    if (t == TSR_LORA_AGATE) return "attn_gate needs model.attn_output_gate = true";
    if (t == TSR_LORA_QKVZ || t == TSR_LORA_BA || t == TSR_LORA_OUTPROJ)
        return "the DeltaNet targets need linear_attention layers in model.layer_types";
    if (m->kv_lora_rank == 0) return "q_a_proj, q_b_proj, kv_a_proj_with_mqa and kv_b_proj are "
                                     "multi-head latent attention's: model.kv_lora_rank > 0";
    if (t == TSR_LORA_K || t == TSR_LORA_V)
        return "multi-head latent attention (model.kv_lora_rank > 0) has no k_proj or v_proj: "
               "name kv_a_proj_with_mqa and kv_b_proj";
    return m->q_lora_rank > 0 ? "with model.q_lora_rank > 0 the queries go through q_a_proj and "
                                "q_b_proj, not q (q_proj)"
                              : "q_a_proj and q_b_proj need model.q_lora_rank > 0 (without it "
                                "the queries' projection is q, PEFT's q_proj)";
}

const char *config_lora_target_name(int t) {
    return t >= 0 && t < TSR_LORA_COUNT ? lora_target_names[t] : "?";
}

int config_lora_targets(const tsr_model_config *m, const char *s, unsigned *mask, char *why,
                        size_t cap) {
    *mask = 0;
    const unsigned mlp = 1u << TSR_LORA_GATE | 1u << TSR_LORA_UP | 1u << TSR_LORA_DOWN;
    if (strcmp(s, "all-linear") == 0) { /* PEFT's name: every projection this model can adapt */
        *mask = ((1u << TSR_LORA_COUNT) - 1) & ~lora_absent(m);
        return 0;
    }
    const char *p = s;
    for (;;) {
        size_t n = strcspn(p, ",");
        while (n > 0 && *p == ' ') p++, n--;
        while (n > 0 && p[n - 1] == ' ') n--;
        int t = -1;
        for (int k = 0; k < TSR_LORA_COUNT && t < 0; k++)
            if (strlen(lora_target_names[k]) == n && strncmp(p, lora_target_names[k], n) == 0) t = k;
        if (t < 0) {
            snprintf(why, cap, "\"%.*s\" is not a target: expected \"all-linear\" or a "
                     "comma-separated list of q, k, v, o, gate, up, down, in_proj_qkvz, "
                     "in_proj_ba, out_proj, attn_gate, q_a_proj, q_b_proj, kv_a_proj_with_mqa, "
                     "kv_b_proj",
                     (int)(n < 64 ? n : 64), p);
            return -1;
        }
        if (*mask & (1u << t)) {
            snprintf(why, cap, "\"%s\" is named twice", lora_target_names[t]);
            return -1;
        }
        *mask |= 1u << t;
        p += strcspn(p, ",");
        if (!*p) break;
        p++;
    }
    if (m->moe_experts > 0 && (*mask & mlp)) {
        snprintf(why, cap, "gate, up and down are not targets in a mixture-of-experts model yet "
                 "(the experts take no adapters): name attention targets (q, k, v, o) only");
        return -1;
    }
    if (!config_mlp_gated(m) && (*mask & (1u << TSR_LORA_GATE | 1u << TSR_LORA_UP))) {
        snprintf(why, cap, "gate and up need model.mlp = \"swiglu\" or \"geglu_tanh\" (a GELU MLP "
                 "takes an adapter on down only so far)");
        return -1;
    }
    const unsigned absent = *mask & lora_absent(m) & ~mlp;
    for (int t = 0; t < TSR_LORA_COUNT; t++)
        if (absent >> t & 1u) {
            snprintf(why, cap, "%s: the model has no such projection (%s)", lora_target_names[t],
                     lora_absent_why(m, t));
            return -1;
        }
    return 0;
}

int config_actckpt_layers(const tsr_model_config *m, int *lo, int *n, const char **key, char *why,
                          size_t cap) {
    int ck = m->activation_checkpointing_layers, L = m->n_layer;
    const char *r = m->activation_checkpointing_range;
    *lo = 0, *n = 0;
    *key = "model.activation_checkpointing_layers";
    if (m->activation_checkpointing == TSR_ACTCKPT_NONE) return 0;
    if (r[0]) {
        long a, b;
        int used = 0;
        *key = "model.activation_checkpointing_range";
        if (ck != -1) {
            snprintf(why, cap, "model.activation_checkpointing_range = \"%s\" and "
                     "model.activation_checkpointing_layers = %d are both given: choose the first "
                     "N layers or a range", r, ck);
            return -1;
        }
        if (sscanf(r, "%ld-%ld%n", &a, &b, &used) != 2 || r[used] != '\0' || a < 0 || b < a ||
            b >= L || !isdigit((unsigned char)r[0])) {
            snprintf(why, cap, "model.activation_checkpointing_range = \"%s\" with model.n_layer "
                     "= %d: expected \"A-B\", layers A to B inclusive, 0 <= A <= B <= %d", r, L,
                     L - 1);
            return -1;
        }
        *lo = (int)a, *n = (int)(b - a + 1);
        return 0;
    }
    if (ck == 0 || ck < -1 || ck > L) {
        snprintf(why, cap, "model.activation_checkpointing_layers = %d with model.n_layer = %d: "
                 "checkpoint the first 1 .. %d layers, or -1 = all (or set "
                 "model.activation_checkpointing = \"none\")", ck, L, L);
        return -1;
    }
    *n = ck < 0 ? L : ck;
    return 0;
}
