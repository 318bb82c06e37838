/* hf_qwen3next.c — Qwen3NextForCausalLM <-> tessera's hybrid decoder (hf_qwen3next.h).
 *
 * Written from transformers' modeling_qwen3_next.py and configuration_qwen3_next.py:
 *   linear layer l:  linear_attn.conv1d.weight (CD, 1, K) = dnconv; in_proj_qkvz (2 HK dk + 2 HV dv,
 *                    C), per key head g the rows [q_g (dk) | k_g (dk) | v (r dv) | z (r dv)] with
 *                    r = HV / HK (fix_query_key_value_ordering), into dnqkvw's q, k, v rows and
 *                    dnzw; in_proj_ba (2 HV, C), per key head [b (r) | a (r)], into dnbw, dnaw;
 *                    dt_bias, A_log (HV); norm.weight (dv) as is (Qwen3NextRMSNormGated: ones at
 *                    init, no 1 + w); out_proj = dnow;
 *   full layer:      self_attn.q_proj (2 NH hs, C), per head [query (hs) | gate (hs)], into qkvw's
 *                    q rows and attngatew; k_proj, v_proj, o_proj; q_norm, k_norm (1 + w);
 *   every layer:     input_layernorm, post_attention_layernorm (1 + w); mlp: a dense SwiGLU, or
 *                    the MoE: gate (the router), experts.E.{gate,up,down}_proj, shared_expert.
 *                    {gate,up,down}_proj, shared_expert_gate (1, C);
 *   and model.embed_tokens, model.norm (1 + w), lm_head.
 * Qwen 3.5 (modular_qwen3_5.py, modular_qwen3_5_moe.py) is the same mapping with the flags of its
 * hf_hybrid row: linear_attn.in_proj_qkv ([all q | all k | all v], dnqkvw as is), in_proj_z,
 * in_proj_b, in_proj_a unfused; the experts stacked (mlp.experts.gate_up_proj (E, 2FE, C) = expw1,
 * down_proj (E, C, FE) = expw2); the vision-language class's decoder under model.language_model.
 * and its config.json's text keys in text_config; RoPE in rope_parameters with mrope_section.
 */
#include "hf/hf_qwen3next.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* ---- the classes ---------------------------------------------------------------------------- */

/* text class, prefix, nest, unfused, moe, stacked experts; defaults: vocab, hidden, MLP, layers,
 * value heads, experts, top k (Qwen3NextConfig, Qwen3_5TextConfig, Qwen3_5MoeTextConfig) */
static const hf_hybrid hybrids[] = {
    {HF_QWEN3NEXT, "model.", NULL, 0, -1, 0, {151936, 2048, 5632, 48, 32, 512, 10}},
    {HF_QWEN35, "model.", NULL, 1, 0, 0, {248320, 4096, 12288, 32, 32, 0, 0}},
    {HF_QWEN35_MOE, "model.", NULL, 1, 1, 1, {248320, 2048, 512, 40, 32, 256, 8}},
    {HF_QWEN35, "model.language_model.", "text_config", 1, 0, 0, {248320, 4096, 12288, 32, 32, 0, 0}},
    {HF_QWEN35_MOE, "model.language_model.", "text_config", 1, 1, 1,
     {248320, 2048, 512, 40, 32, 256, 8}},
};

const hf_hybrid *hf_hybrid_of(hf_arch a) {
    static const hf_arch order[] = {HF_QWEN3NEXT, HF_QWEN35, HF_QWEN35_MOE, HF_QWEN35_VL,
                                    HF_QWEN35_MOE_VL};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (order[i] == a) return &hybrids[i];
    return NULL;
}

/* ---- the tensor table ---------------------------------------------------------------------- */

typedef struct table {
    const tsr_model *m;
    const hf_hybrid *hy;
    hf_tensor *t;
    int n;
    int l;           /* the layer of the rows being added (-1: global) */
    const char *pre; /* of the names: the class's prefix, "" for lm_head */
} table;

static hf_tensor *next(table *tb, const char *fmt, int e) {
    hf_tensor *h = &tb->t[tb->n++];
    char sub[64];
    snprintf(sub, sizeof sub, fmt, e);
    if (tb->l >= 0) snprintf(h->name, sizeof h->name, "%slayers.%d.%.60s", tb->pre, tb->l, sub);
    else snprintf(h->name, sizeof h->name, "%s%.60s", tb->pre, sub);
    h->present = 1;
    return h;
}

/* tensor p's slice of this layer (expert e of it when e >= 0), at SIZE_MAX when m lacks it */
static size_t slice(const table *tb, tsr_param_id p, int e, size_t *len) {
    const tsr_model *m = tb->m;
    const tsr_param_info *pi = &m->params_info[p];
    const int slot = tb->l >= 0 ? model_layer_slot(m, p, tb->l) : 0;
    if (!pi->numel || slot < 0) return SIZE_MAX;
    const size_t n = pi->numel / (size_t)(tb->l >= 0 ? model_param_layers(m, p) : 1);
    *len = e >= 0 ? n / (size_t)m->E : n;
    return pi->offset + (size_t)slot * n + (e >= 0 ? (size_t)e * *len : 0);
}

/* A plain tensor: rows [r0, r0 + rows) of p's slice, (rows, cols) or 1-D when cols = 0. */
static void plain(table *tb, const char *fmt, int e, tsr_param_id p, int64_t r0, int64_t rows,
                  int64_t cols, float add) {
    size_t len, at = slice(tb, p, e, &len);
    if (at == SIZE_MAX) return;
    hf_tensor *h = next(tb, fmt, e);
    const int64_t c = cols ? cols : 1;
    h->ndim = cols ? 2 : 1;
    h->shape[0] = rows, h->shape[1] = cols;
    h->offset = at + (size_t)(r0 * c);
    h->numel = (size_t)(rows * c);
    h->rows = rows, h->cols = c;
    h->add = add;
}

int hf_qwen3next_fused(const tsr_model *m, hf_fused which, hf_piece ps[4], int *groups) {
    const int64_t HK = m->HKl, dk = m->dkl, dv = m->dvl, r = m->HKl ? m->HVl / m->HKl : 0;
    const hf_piece qkvz[] = {{TSR_P_DNQKVW, 0, dk}, {TSR_P_DNQKVW, HK * dk, dk},
                             {TSR_P_DNQKVW, 2 * HK * dk, r * dv}, {TSR_P_DNZW, 0, r * dv}};
    const hf_piece ba[] = {{TSR_P_DNBW, 0, r}, {TSR_P_DNAW, 0, r}};
    const hf_piece q[] = {{TSR_P_QKVW, 0, m->hs}, {TSR_P_ATTNGATEW, 0, m->hs}};
    const hf_piece *src = which == HF_FUSED_QKVZ ? qkvz : which == HF_FUSED_BA ? ba : q;
    const int np = which == HF_FUSED_QKVZ ? 4 : 2;
    *groups = which == HF_FUSED_Q ? m->NH : m->HKl;
    memcpy(ps, src, (size_t)np * sizeof *ps);
    return np;
}

/* An interleaved tensor: the groups of a fused projection's pieces (hf_qwen3next_fused). */
static void interleaved(table *tb, const char *fmt, hf_fused which, int64_t cols) {
    hf_piece ps[4];
    int groups;
    const int np = hf_qwen3next_fused(tb->m, which, ps, &groups);
    hf_tensor *h = next(tb, fmt, 0);
    int64_t rows = 0;
    for (int i = 0; i < np; i++) {
        size_t len;
        h->piece[i].offset = slice(tb, ps[i].p, -1, &len) + (size_t)(ps[i].r0 * cols);
        h->piece[i].rows = ps[i].rows;
        rows += ps[i].rows * groups;
    }
    h->groups = groups, h->npieces = np;
    h->ndim = 2;
    h->shape[0] = rows, h->shape[1] = cols;
    h->rows = rows, h->cols = cols;
    h->numel = (size_t)(rows * cols);
    h->offset = h->piece[0].offset;
}

/* The last row (r, c) viewed as (a, b, c2): conv1d's (CD, 1, K), the stacked experts' (E, ., .) */
static void view3(table *tb, int64_t a, int64_t b, int64_t c) {
    hf_tensor *h = &tb->t[tb->n - 1];
    h->ndim = 3;
    h->shape[0] = a, h->shape[1] = b, h->shape[2] = c;
}

static void linear_layer(table *tb) {
    const tsr_model *m = tb->m;
    const int64_t C = m->C, HV = m->HVl, dv = m->dvl, CD = 2 * m->HKl * m->dkl + HV * dv;
    plain(tb, "linear_attn.conv1d.weight", -1, TSR_P_DNCONV, 0, CD, m->Kc, 0);
    view3(tb, CD, 1, m->Kc);
    if (tb->hy->unfused) { /* Qwen 3.5: one tensor each, tessera's rows as they are */
        plain(tb, "linear_attn.in_proj_qkv.weight", -1, TSR_P_DNQKVW, 0, CD, C, 0);
        plain(tb, "linear_attn.in_proj_z.weight", -1, TSR_P_DNZW, 0, HV * dv, C, 0);
        plain(tb, "linear_attn.in_proj_b.weight", -1, TSR_P_DNBW, 0, HV, C, 0);
        plain(tb, "linear_attn.in_proj_a.weight", -1, TSR_P_DNAW, 0, HV, C, 0);
    } else {
        interleaved(tb, "linear_attn.in_proj_qkvz.weight", HF_FUSED_QKVZ, C);
        interleaved(tb, "linear_attn.in_proj_ba.weight", HF_FUSED_BA, C);
    }
    plain(tb, "linear_attn.dt_bias", -1, TSR_P_DNDTB, 0, HV, 0, 0);
    plain(tb, "linear_attn.A_log", -1, TSR_P_DNALOG, 0, HV, 0, 0);
    plain(tb, "linear_attn.norm.weight", -1, TSR_P_DNNORMW, 0, dv, 0, 0);
    plain(tb, "linear_attn.out_proj.weight", -1, TSR_P_DNOW, 0, C, HV * dv, 0);
}

static void full_layer(table *tb) {
    const tsr_model *m = tb->m;
    const int64_t C = m->C, hs = m->hs, QD = m->QD, KV = (int64_t)m->KVH * hs;
    interleaved(tb, "self_attn.q_proj.weight", HF_FUSED_Q, C);
    plain(tb, "self_attn.k_proj.weight", -1, TSR_P_QKVW, QD, KV, C, 0);
    plain(tb, "self_attn.v_proj.weight", -1, TSR_P_QKVW, QD + KV, KV, C, 0);
    plain(tb, "self_attn.o_proj.weight", -1, TSR_P_ATTPROJW, 0, C, QD, 0);
    plain(tb, "self_attn.q_norm.weight", -1, TSR_P_QNORMW, 0, hs, 0, 1.0f);
    plain(tb, "self_attn.k_norm.weight", -1, TSR_P_KNORMW, 0, hs, 0, 1.0f);
}

static void mlp(table *tb) {
    const tsr_model *m = tb->m;
    const int64_t C = m->C, F = m->F, FE = m->FE, S = m->S;
    if (!model_moe_layer(m, tb->l)) {
        plain(tb, "mlp.gate_proj.weight", -1, TSR_P_FCW, 0, F, C, 0);
        plain(tb, "mlp.up_proj.weight", -1, TSR_P_FCW, F, F, C, 0);
        plain(tb, "mlp.down_proj.weight", -1, TSR_P_FCPROJW, 0, C, F, 0);
        return;
    }
    plain(tb, "mlp.gate.weight", -1, TSR_P_ROUTERW, 0, m->E, C, 0);
    if (tb->hy->stacked) { /* Qwen 3.5's MoE: the layer's experts in one tensor each, as tessera's */
        plain(tb, "mlp.experts.gate_up_proj", -1, TSR_P_EXPW1, 0, m->E * 2 * FE, C, 0);
        view3(tb, m->E, 2 * FE, C);
        plain(tb, "mlp.experts.down_proj", -1, TSR_P_EXPW2, 0, m->E * C, FE, 0);
        view3(tb, m->E, C, FE);
    }
    for (int e = 0; e < m->E && !tb->hy->stacked; e++) {
        plain(tb, "mlp.experts.%d.gate_proj.weight", e, TSR_P_EXPW1, 0, FE, C, 0);
        plain(tb, "mlp.experts.%d.up_proj.weight", e, TSR_P_EXPW1, FE, FE, C, 0);
        plain(tb, "mlp.experts.%d.down_proj.weight", e, TSR_P_EXPW2, 0, C, FE, 0);
    }
    plain(tb, "mlp.shared_expert.gate_proj.weight", -1, TSR_P_SHW1, 0, S, C, 0);
    plain(tb, "mlp.shared_expert.up_proj.weight", -1, TSR_P_SHW1, S, S, C, 0);
    plain(tb, "mlp.shared_expert.down_proj.weight", -1, TSR_P_SHW2, 0, C, S, 0);
    plain(tb, "mlp.shared_expert_gate.weight", -1, TSR_P_SHGATEW, 0, 1, C, 0);
}

hf_tensor *hf_qwen3next_table(const tsr_model *m, hf_arch a, int *n) {
    const int per = 9 + 5 + 3 * m->E + 2; /* a linear layer, the MoE, the norms: the most a layer has */
    const hf_hybrid *hy = hf_hybrid_of(a);
    table tb = {m, hy, tsr_calloc((size_t)per * (size_t)m->L + 3, sizeof(hf_tensor)), 0, -1,
                hy->prefix};
    plain(&tb, "embed_tokens.weight", -1, TSR_P_WTE, 0, m->V, m->C, 0);
    for (tb.l = 0; tb.l < m->L; tb.l++) {
        if (config_layer_linear(&m->cfg, tb.l)) linear_layer(&tb);
        else full_layer(&tb);
        mlp(&tb);
        plain(&tb, "input_layernorm.weight", -1, TSR_P_LN1W, 0, m->C, 0, 1.0f);
        plain(&tb, "post_attention_layernorm.weight", -1, TSR_P_LN2W, 0, m->C, 0, 1.0f);
    }
    tb.l = -1;
    plain(&tb, "norm.weight", -1, TSR_P_LNFW, 0, m->C, 0, 1.0f);
    tb.pre = "";
    plain(&tb, "lm_head.weight", -1, TSR_P_LMHEAD, 0, m->V, m->C, 0);
    *n = tb.n;
    return tb.t;
}

/* ---- what the class holds ------------------------------------------------------------------ */

const char *hf_qwen3next_need(const tsr_model *m) {
    const tsr_model_config *c = &m->cfg;
    if (!c->qk_norm || c->bias || c->qkv_bias)
        return "model.qk_norm = true, model.bias and model.qkv_bias false";
    if (m->LA > 0 && !c->attn_output_gate)
        return "model.attn_output_gate = true (its full layers' q_proj holds the gate)";
    for (int l = 0; l < m->L; l++)
        if (config_layer_window(c, l) > 0)
            return "linear_attention and full_attention layers only (no sliding window)";
    if (c->rope_scaling != TSR_ROPE_SCALING_NONE) return "model.rope_scaling = \"none\"";
    return NULL;
}

const char *hf_qwen3next_moe_need(const tsr_model *m, hf_arch a) {
    const int moe = hf_hybrid_of(a)->moe;
    if (moe == 0 && m->E)
        return "model.moe_experts = 0 (a dense model; the MoE releases are qwen3_5_moe_text and "
               "qwen3_5_moe)";
    if (moe == 1 && !m->E) return "model.moe_experts > 0 (a mixture of experts)";
    if (m->E && (!m->S || !m->cfg.moe_shared_gate))
        return "model.moe_shared_size > 0 and model.moe_shared_gate = true (its MoE layers have "
               "a gated shared expert)";
    if (moe == 1 && (m->cfg.moe_every != 1 || !m->cfg.moe_norm_topk))
        return "model.moe_every = 1 and model.moe_norm_topk = true (experts in every layer, the "
               "top-k weights renormalised)";
    return NULL;
}

/* ---- config.json --------------------------------------------------------------------------- */

static const char *jnum(char *buf, size_t cap, double v) {
    snprintf(buf, cap, "%.17g", v);
    if (!strpbrk(buf, ".eEn")) snprintf(buf + strlen(buf), cap - strlen(buf), ".0");
    return buf;
}

/* RoPE: Qwen3-Next's keys at the top; Qwen 3.5's rope_parameters with an mrope_section over the
 * rotary frequencies (transformers' [11, 11, 10] for 32: text's equal streams, ordinary RoPE) */
static size_t rope_text(const tsr_model *m, const hf_hybrid *hy, char *buf, size_t cap) {
    const tsr_model_config *c = &m->cfg;
    char theta[32], prf[32];
    jnum(theta, sizeof theta, c->rope_theta), jnum(prf, sizeof prf, c->partial_rotary_factor);
    if (!hy->unfused)
        return (size_t)snprintf(buf, cap, "  \"rope_theta\": %s,\n  \"partial_rotary_factor\": %s,\n"
                                "  \"rope_scaling\": null,\n", theta, prf);
    const int n = (int)(m->hs * c->partial_rotary_factor) / 2; /* the rotary frequencies */
    return (size_t)snprintf(buf, cap, "  \"rope_parameters\": {\"rope_type\": \"default\", "
                            "\"rope_theta\": %s, \"partial_rotary_factor\": %s, \"mrope_section\": "
                            "[%d, %d, %d], \"mrope_interleaved\": true},\n", theta, prf,
                            n / 3 + (n % 3 > 0), n / 3 + (n % 3 > 1), n / 3);
}

/* The mixture's keys: Qwen3-Next's all (num_experts 0 when dense), Qwen 3.5's MoE without the
 * sparse step, mlp_only_layers and norm_topk_prob it does not have, its dense sizes none. */
static size_t moe_text(const tsr_model *m, const hf_hybrid *hy, double aux_coef, char *buf,
                       size_t cap) {
    char aux[32];
    size_t k = 0;
#define ADD(...) (k += (size_t)snprintf(buf + k, k < cap ? cap - k : 0, __VA_ARGS__))
    if (hy->moe < 0 || m->E) ADD("  \"num_experts\": %d,\n", m->E);
    if (!m->E) return k;
    ADD("  \"num_experts_per_tok\": %d,\n  \"moe_intermediate_size\": %d,\n"
        "  \"shared_expert_intermediate_size\": %d,\n", m->K, m->FE, m->S);
    if (hy->moe < 0)
        ADD("  \"norm_topk_prob\": %s,\n  \"decoder_sparse_step\": %d,\n  \"mlp_only_layers\": [],\n",
            m->cfg.moe_norm_topk ? "true" : "false", m->cfg.moe_every);
    ADD("  \"router_aux_loss_coef\": %s,\n  \"output_router_logits\": false,\n",
        jnum(aux, sizeof aux, aux_coef));
#undef ADD
    return k;
}

int hf_qwen3next_config_text(const tsr_model *m, hf_arch a, double aux_coef, char *buf, size_t cap) {
    const tsr_model_config *c = &m->cfg;
    const hf_hybrid *hy = hf_hybrid_of(a);
    char eps[32];
    size_t k = 0;
#define ADD(...) (k += (size_t)snprintf(buf + k, k < cap ? cap - k : 0, __VA_ARGS__))
    ADD("  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n", m->V, m->C);
    if (!m->E || hy->moe < 0) ADD("  \"intermediate_size\": %d,\n", m->F);
    ADD("  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
        "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n  \"hidden_act\": \"silu\",\n",
        m->L, m->NH, m->KVH, m->hs);
    ADD("  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %s,\n",
        c->max_seq_len > 0 ? c->max_seq_len : m->maxT, jnum(eps, sizeof eps, c->norm_eps));
    k += rope_text(m, hy, buf + (k < cap ? k : cap), k < cap ? cap - k : 0);
    ADD("  \"attention_bias\": false,\n  \"attention_dropout\": 0.0,\n  \"layer_types\": [");
    for (int l = 0; l < m->L; l++)
        ADD("%s\"%s\"", l ? ", " : "", config_layer_linear(c, l) ? "linear_attention" : "full_attention");
    ADD("],\n  \"linear_conv_kernel_dim\": %d,\n  \"linear_key_head_dim\": %d,\n"
        "  \"linear_value_head_dim\": %d,\n  \"linear_num_key_heads\": %d,\n"
        "  \"linear_num_value_heads\": %d,\n", c->linear_conv_kernel_dim, c->linear_key_head_dim,
        c->linear_value_head_dim, c->linear_num_key_heads, c->linear_num_value_heads);
    k += moe_text(m, hy, aux_coef, buf + (k < cap ? k : cap), k < cap ? cap - k : 0);
#undef ADD
    return k < cap ? (int)k : -1;
}

/* ---- reading config.json ------------------------------------------------------------------- */

typedef struct reader {
    const json_value *r; /* the text model's keys: the top, or Qwen 3.5's VL text_config */
    const json_value *top;
    const hf_hybrid *hy;
    const char *mt; /* the top's model_type */
    const char *path;
    int rc;
    tsr_config_fill *f;
    int types[1024]; /* 1: linear_attention, per layer */
    long L;
} reader;

/* A setting tessera cannot hold (or a malformed one): said once, the read fails with exit 2. */
static void bad(reader *rd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bad(reader *rd, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!rd->rc) tsr_error("%s: %s", rd->path, msg);
    rd->rc = TSR_EXIT_DATA;
}

static const json_value *member(const reader *rd, const char *key) {
    return rd->r ? json_get(rd->r, key) : NULL;
}

static double num(reader *rd, const char *key, double def) {
    const json_value *v = member(rd, key);
    if (!v || v->type == JSON_NULL) return def;
    if (v->type == JSON_NUMBER) return v->num;
    char got[96];
    bad(rd, "%s = %s: expected a number", key, json_describe(v, got, sizeof got));
    return def;
}

/* A count of config.json (absent: def): a whole number >= least, else refused naming it. */
static long count(reader *rd, const char *key, double def, long least) {
    double x = num(rd, key, def);
    if (x != floor(x) || x < (double)least || x > 1e9)
        bad(rd, "%s = %g: expected an integer >= %ld", key, x, least);
    return x >= (double)least && x <= 1e9 ? (long)x : least;
}

static int boolean(reader *rd, const char *key, int def) {
    const json_value *v = member(rd, key);
    if (!v || v->type == JSON_NULL) return def;
    if (v->type == JSON_TRUE || v->type == JSON_FALSE) return v->type == JSON_TRUE;
    bad(rd, "%s is a JSON %s, expected true or false", key, json_type_name(v->type));
    return def;
}

/* One entry: the run's key gets value; hf_key names where config.json says so (or its default) */
static void put(reader *rd, int soft, const char *run_key, const char *value, const char *hf_key) {
    tsr_config_fill *f = rd->f;
    if (f->n == TSR_FILL_MAX) tsr_die(TSR_EXIT_INTERNAL, "hf_qwen3next_fill: raise TSR_FILL_MAX");
    snprintf(f->kv[f->n].key, sizeof f->kv[0].key, "%s", run_key);
    snprintf(f->kv[f->n].value, sizeof f->kv[0].value, "%s", value);
    if (!hf_key)
        snprintf(f->kv[f->n].from, sizeof f->kv[0].from, "config.json has model_type "
                 "\"%.20s\" (%s)", rd->mt, value);
    else if (member(rd, hf_key))
        snprintf(f->kv[f->n].from, sizeof f->kv[0].from, "config.json has %.40s = %.30s", hf_key,
                 value);
    else
        snprintf(f->kv[f->n].from, sizeof f->kv[0].from, "config.json has no %.40s (default %.20s)",
                 hf_key, value);
    f->kv[f->n++].soft = soft;
}

static void put_num(reader *rd, const char *run_key, const char *hf_key, double def, int integer) {
    char v[32];
    double x = num(rd, hf_key, def);
    if (integer && (x != floor(x) || fabs(x) > 1e9 || x < 1)) /* (sizes and counts) */
        bad(rd, "%s = %g: expected an integer >= 1 (a size or count)", hf_key, x);
    if (integer) snprintf(v, sizeof v, "%.0f", x);
    else jnum(v, sizeof v, x);
    put(rd, 0, run_key, v, hf_key);
}

/* layer_types, else every full_attention_interval-th layer full (Qwen3NextConfig's default 4) */
static void read_types(reader *rd) {
    const json_value *lt = member(rd, "layer_types");
    if (rd->L < 1 || rd->L > 1024) {
        bad(rd, "num_hidden_layers = %ld: expected 1 to 1024", rd->L);
        return;
    }
    if (lt && lt->type != JSON_NULL) {
        const json_value *e = lt->type == JSON_ARRAY && (long)lt->len == rd->L ? lt->child : NULL;
        if (!e) bad(rd, "layer_types is not a list of num_hidden_layers = %ld entries", rd->L);
        for (long l = 0; e && l < rd->L; l++, e = e->next) {
            int lin = e->type == JSON_STRING && !strcmp(e->str, "linear_attention");
            if (!lin && (e->type != JSON_STRING || strcmp(e->str, "full_attention") != 0))
                bad(rd, "layer_types[%ld] is not \"linear_attention\" or \"full_attention\" (the "
                    "layer types tessera's Qwen3-Next holds)", l);
            rd->types[l] = lin;
        }
        return;
    }
    long every = count(rd, "full_attention_interval", 4, 1);
    for (long l = 0; l < rd->L; l++) rd->types[l] = (l + 1) % every != 0;
}

/* model.layer_types: the shortest pattern that repeats into every layer's type */
static void put_types(reader *rd) {
    long p = 1;
    while (p < rd->L) {
        long l = p;
        while (l < rd->L && rd->types[l] == rd->types[l % p]) l++;
        if (l == rd->L) break;
        p++;
    }
    char v[2048];
    size_t n = 0;
    for (long l = 0; l < p && n < sizeof v; l++)
        n += (size_t)snprintf(v + n, sizeof v - n, "%s%s", l ? "," : "",
                              rd->types[l] ? "linear_attention" : "full_attention");
    if (n >= sizeof v) bad(rd, "layer_types: no pattern of %zu bytes repeats into it", sizeof v);
    put(rd, 0, "model.layer_types", v, member(rd, "layer_types") ? "layer_types" :
        "full_attention_interval");
}

/* Qwen 3.5's mrope_section (rp: rope_parameters, or NULL): three integers >= 0 that share the
 * rotary dimensions' frequencies out (sum = head_dim x partial_rotary_factor / 2). A text's three
 * position streams are equal, so that is ordinary RoPE over those dimensions; anything else is
 * not a rotation tessera has (docs/hf.md "Qwen 3.5"). Absent: transformers' default, fine too. */
static void check_mrope(reader *rd, const json_value *rp) {
    const json_value *ms = rp ? json_get(rp, "mrope_section") : NULL, *e;
    char got[96];
    if (!ms || ms->type == JSON_NULL) return;
    const json_value *pf = json_get(rp, "partial_rotary_factor");
    const double prf = pf && pf->type == JSON_NUMBER ? pf->num : num(rd, "partial_rotary_factor", 0.25);
    const double rot = num(rd, "head_dim", 256) * prf;
    const long half = (long)rot / 2;
    long sum = 0;
    if (rot != floor(rot) || rot < 2 || (long)rot % 2) return; /* (the rule of the rotary size's) */
    int ok = ms->type == JSON_ARRAY && ms->len == 3;
    for (e = ok ? ms->child : NULL; e; e = e->next) {
        ok = ok && e->type == JSON_NUMBER && e->num >= 0 && e->num == floor(e->num);
        sum += ok ? (long)e->num : 0;
    }
    char adds[48] = "";
    if (ok) snprintf(adds, sizeof adds, " adding up to %ld", sum);
    if (!ok || sum != half)
        bad(rd, "rope_parameters.mrope_section = %s%s: expected three integers >= 0 that add up "
            "to the %ld rotary frequencies (head_dim x partial_rotary_factor / 2), which with a "
            "text's equal position streams is ordinary RoPE; tessera reads no other",
            json_describe(ms, got, sizeof got), adds, half);
}

/* What tessera cannot hold: refused by name and value (exit 2). */
static void refusals(reader *rd) {
    char got[96];
    const json_value *v = member(rd, "mlp_only_layers");
    if (v && v->type != JSON_NULL && (v->type != JSON_ARRAY || v->len))
        bad(rd, "mlp_only_layers = %s: tessera's MoE layers are every decoder_sparse_step-th "
            "(model.moe_every) and cannot be made dense one by one; only [] or null is accepted",
            json_describe(v, got, sizeof got));
    v = member(rd, "rope_scaling");
    const json_value *t = v && v->type == JSON_OBJECT ? json_get(v, "rope_type") : NULL;
    if (!t && v && v->type == JSON_OBJECT) t = json_get(v, "type");
    if (v && v->type != JSON_NULL && !(t && t->type == JSON_STRING && !strcmp(t->str, "default")))
        bad(rd, "rope_scaling = %s: tessera reads Qwen3-Next's plain RoPE only (null)",
            json_describe(v, got, sizeof got));
    v = member(rd, "rope_parameters");
    t = v && v->type == JSON_OBJECT ? json_get(v, "rope_type") : NULL;
    if (t && !(t->type == JSON_STRING && !strcmp(t->str, "default")))
        bad(rd, "rope_parameters.rope_type = %s: tessera reads plain RoPE only (\"default\")",
            json_describe(t, got, sizeof got));
    if (boolean(rd, "attention_bias", 0))
        bad(rd, "attention_bias = true: tessera's Qwen3-Next has no attention biases");
    v = member(rd, "hidden_act");
    if (v && !(v->type == JSON_STRING && !strcmp(v->str, "silu")))
        bad(rd, "hidden_act = %s: tessera's SwiGLU needs \"silu\"", json_describe(v, got, sizeof got));
}

/* rope_theta and partial_rotary_factor, at the top or in transformers 5's rope_parameters */
static void put_rope(reader *rd) {
    const json_value *rp = member(rd, "rope_parameters");
    const json_value *save = rd->r;
    const int in = rp && rp->type == JSON_OBJECT;
    if (in && json_get(rp, "rope_theta")) rd->r = rp;
    put_num(rd, "model.rope_theta", "rope_theta", 10000, 0);
    rd->r = in && json_get(rp, "partial_rotary_factor") ? rp : save;
    put_num(rd, "model.partial_rotary_factor", "partial_rotary_factor", 0.25, 0);
    rd->r = save;
}

static void put_moe(reader *rd) {
    char e[32];
    const int moe = rd->hy->moe;
    const long E = moe == 0 ? 0 : count(rd, "num_experts", (double)rd->hy->def[5], moe > 0);
    snprintf(e, sizeof e, "%ld", E);
    put(rd, 0, "model.moe_experts", e, moe == 0 ? NULL : "num_experts"); /* dense: the type's */
    if (E <= 0) return;
    put_num(rd, "model.moe_top_k", "num_experts_per_tok", (double)rd->hy->def[6], 1);
    put_num(rd, "model.moe_intermediate_size", "moe_intermediate_size", 512, 1);
    put_num(rd, "model.moe_shared_size", "shared_expert_intermediate_size", 512, 1);
    put(rd, 0, "model.moe_shared_gate", "true", NULL);
    if (moe > 0) { /* Qwen 3.5: every layer, the top k renormalised (Qwen3VLMoeTextTopKRouter) */
        put(rd, 0, "model.moe_norm_topk", "true", NULL);
        put(rd, 0, "model.moe_every", "1", NULL);
        return;
    }
    put(rd, 0, "model.moe_norm_topk", boolean(rd, "norm_topk_prob", 1) ? "true" : "false",
        "norm_topk_prob");
    put_num(rd, "model.moe_every", "decoder_sparse_step", 1, 1);
}

static void put_sizes(reader *rd) {
    const long *d = rd->hy->def;
    put_num(rd, "model.n_layer", "num_hidden_layers", (double)d[3], 1);
    put_num(rd, "model.d_model", "hidden_size", (double)d[1], 1);
    put_num(rd, "model.n_head", "num_attention_heads", 16, 1);
    put_num(rd, "model.n_kv_head", "num_key_value_heads", 2, 1);
    put_num(rd, "model.head_dim", "head_dim", 256, 1);
    put_num(rd, "model.intermediate_size", "intermediate_size", (double)d[2], 1);
    put_num(rd, "model.vocab_size", "vocab_size", (double)d[0], 1);
    put_num(rd, "model.norm_eps", "rms_norm_eps", 1e-6, 0);
    put_num(rd, "model.linear_conv_kernel_dim", "linear_conv_kernel_dim", 4, 1);
    put_num(rd, "model.linear_key_head_dim", "linear_key_head_dim", 128, 1);
    put_num(rd, "model.linear_value_head_dim", "linear_value_head_dim", 128, 1);
    put_num(rd, "model.linear_num_key_heads", "linear_num_key_heads", 16, 1);
    put_num(rd, "model.linear_num_value_heads", "linear_num_value_heads", (double)d[4], 1);
}

static void fill(reader *rd) {
    static const char *const words[][2] = {
        {"model.pos", "rope"}, {"model.norm", "rmsnorm"}, {"model.mlp", "swiglu"},
        {"model.bias", "false"}, {"model.qkv_bias", "false"}, {"model.qk_norm", "true"},
        {"model.qk_norm_scope", "head"}, {"model.norm_placement", "pre"},
        {"model.embed_scale", "none"}, {"model.rope_scaling", "none"},
        {"model.attn_output_gate", "true"}};
    refusals(rd);
    rd->L = count(rd, "num_hidden_layers", (double)rd->hy->def[3], 1);
    read_types(rd);
    if (rd->rc) return;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        put(rd, 0, words[i][0], words[i][1], NULL);
    put_sizes(rd);
    put_rope(rd);
    const json_value *rp = member(rd, "rope_parameters"); /* (over the sizes checked above) */
    if (rd->hy->unfused && !rd->rc) check_mrope(rd, rp && rp->type == JSON_OBJECT ? rp : NULL);
    const json_value *save = rd->r; /* the VL's own tie_word_embeddings when text_config has none */
    if (!member(rd, "tie_word_embeddings")) rd->r = rd->top;
    put(rd, 0, "model.tie_embeddings", boolean(rd, "tie_word_embeddings", 0) ? "true" : "false",
        "tie_word_embeddings");
    rd->r = save;
    if (member(rd, "max_position_embeddings")) { /* the model's context (soft, as the others') */
        put_num(rd, "model.max_seq_len", "max_position_embeddings", 0, 1);
        rd->f->kv[rd->f->n - 1].soft = 1;
    }
    put_types(rd);
    put_moe(rd);
    put(rd, 1, "model.hf_model_type", rd->mt, NULL); /* the class an export writes again */
}

/* rd over config.json's root for class a: the text keys, where Qwen 3.5's VL nests them */
static void start(reader *rd, const json_value *root, const char *path, hf_arch a) {
    rd->r = rd->top = root, rd->path = path, rd->hy = hf_hybrid_of(a), rd->mt = hf_model_type[a];
    if (!rd->hy->nest) return;
    const json_value *tc = json_get(root, rd->hy->nest), *t;
    if (!tc || tc->type != JSON_OBJECT) {
        bad(rd, "no %s object: model_type \"%s\" nests the text model's keys there", rd->hy->nest,
            rd->mt);
        return;
    }
    rd->r = tc;
    t = json_get(tc, "model_type");
    if (t && !(t->type == JSON_STRING && !strcmp(t->str, hf_model_type[rd->hy->text])))
        bad(rd, "%s.model_type is not \"%s\" (the text model of model_type \"%s\")",
            rd->hy->nest, hf_model_type[rd->hy->text], rd->mt);
}

int hf_qwen3next_fill(const json_value *root, const char *path, hf_arch a, tsr_config_fill *f) {
    reader *rd = tsr_calloc(1, sizeof *rd);
    rd->f = f;
    start(rd, root, path, a);
    if (!rd->rc) fill(rd);
    int rc = rd->rc;
    free(rd);
    return rc;
}

/* ---- checking against a run's model -------------------------------------------------------- */

/* The run's value of key, in the fill's format ("" when the table has no such key). */
static void run_value(const tsr_model *m, const char *key, char *v, size_t cap) {
    const tsr_model_config *c = &m->cfg;
    static const char *const place[] = {"pre", "sandwich", "post"}, *mlpw[] = {"gelu", "swiglu",
                                                                                "geglu_tanh"};
    const struct { const char *key; double x; } nums[] = {
        {"model.n_layer", m->L}, {"model.d_model", m->C}, {"model.n_head", m->NH},
        {"model.n_kv_head", m->KVH}, {"model.head_dim", m->hs},
        {"model.intermediate_size", m->F}, {"model.vocab_size", m->V},
        {"model.norm_eps", c->norm_eps}, {"model.linear_conv_kernel_dim", m->LL ? m->Kc : c->linear_conv_kernel_dim},
        {"model.linear_key_head_dim", c->linear_key_head_dim},
        {"model.linear_value_head_dim", c->linear_value_head_dim},
        {"model.linear_num_key_heads", c->linear_num_key_heads},
        {"model.linear_num_value_heads", c->linear_num_value_heads},
        {"model.rope_theta", c->rope_theta}, {"model.partial_rotary_factor", c->partial_rotary_factor},
        {"model.moe_experts", m->E}, {"model.moe_top_k", m->K},
        {"model.moe_intermediate_size", m->FE}, {"model.moe_shared_size", m->S},
        {"model.moe_every", c->moe_every}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        if (!strcmp(key, nums[i].key)) {
            jnum(v, cap, nums[i].x);
            return;
        }
    const struct { const char *key; const char *word; } words[] = {
        {"model.pos", c->pos == TSR_POS_ROPE ? "rope" : c->pos == TSR_POS_ALIBI ? "alibi" : "learned"},
        {"model.norm", c->norm == TSR_NORM_RMSNORM ? "rmsnorm" : "layernorm"},
        {"model.mlp", mlpw[c->mlp]}, {"model.bias", c->bias ? "true" : "false"},
        {"model.qkv_bias", c->qkv_bias ? "true" : "false"},
        {"model.qk_norm", c->qk_norm ? "true" : "false"},
        {"model.qk_norm_scope", c->qk_norm_scope == TSR_QKN_PROJECTION ? "projection" : "head"},
        {"model.norm_placement", place[c->norm_placement]},
        {"model.embed_scale", c->embed_scale ? "sqrt_d_model" : "none"},
        {"model.rope_scaling", c->rope_scaling == TSR_ROPE_SCALING_NONE ? "none" : "another"},
        {"model.attn_output_gate", c->attn_output_gate ? "true" : "false"},
        {"model.tie_embeddings", c->tie_embeddings ? "true" : "false"},
        {"model.moe_shared_gate", c->moe_shared_gate ? "true" : "false"},
        {"model.moe_norm_topk", c->moe_norm_topk ? "true" : "false"}};
    v[0] = 0;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (!strcmp(key, words[i].key)) snprintf(v, cap, "%s", words[i].word);
}

static int same_value(const char *a, const char *b) {
    char *ea, *eb;
    double x = strtod(a, &ea), y = strtod(b, &eb);
    if (*a && *b && !*ea && !*eb) return fabs(x - y) <= 1e-6 * fabs(y);
    return !strcmp(a, b);
}

/* Each layer's kind against the run's (model.layer_types). */
static int check_types(const reader *rd, const tsr_model *m) {
    for (long l = 0; l < rd->L && l < m->L; l++)
        if (rd->types[l] != config_layer_linear(&m->cfg, (int)l)) {
            tsr_error("%s: layer_types: layer %ld is %s, but this run's model.layer_types makes it "
                      "%s", rd->path, l, rd->types[l] ? "linear_attention" : "full_attention",
                      rd->types[l] ? "an attention layer" : "linear_attention");
            return TSR_EXIT_USAGE;
        }
    return 0;
}

int hf_qwen3next_check(const json_value *root, const char *path, hf_arch a, const tsr_model *m) {
    tsr_config_fill *f = tsr_calloc(1, sizeof *f);
    reader *rd = tsr_calloc(1, sizeof *rd);
    rd->f = f;
    start(rd, root, path, a);
    if (!rd->rc) fill(rd);
    int rc = rd->rc;
    char run[64];
    for (int i = 0; i < f->n && !rc; i++) {
        if (f->kv[i].soft || !strcmp(f->kv[i].key, "model.layer_types")) continue;
        if (!strcmp(f->kv[i].key, "model.intermediate_size") && m->E && !m->LD) continue;
        run_value(m, f->kv[i].key, run, sizeof run);
        if (same_value(f->kv[i].value, run)) continue;
        tsr_error("%s: %s, but this run has %s = %s: set --set %s=%s", path, f->kv[i].from + 16,
                  f->kv[i].key, run, f->kv[i].key, f->kv[i].value);
        rc = TSR_EXIT_USAGE;
    }
    if (!rc) rc = check_types(rd, m);
    free(rd);
    free(f);
    return rc;
}
