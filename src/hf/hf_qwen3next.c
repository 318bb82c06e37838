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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "hf/hf_llama.h"
#include "hf/hf_rows.h"
#include "hf/hf_runkeys.h"

/* ---- the classes ---------------------------------------------------------------------------- */

/* text class, unfused, moe, stacked experts; defaults: vocab, hidden, MLP, layers, value heads,
 * experts, top k (Qwen3NextConfig, Qwen3_5TextConfig, Qwen3_5MoeTextConfig) */
static const hf_hybrid hybrids[] = {
    {&hf_qwen3next, 0, -1, 0, {151936, 2048, 5632, 48, 32, 512, 10}},
    {&hf_qwen35_text, 1, 0, 0, {248320, 4096, 12288, 32, 32, 0, 0}},
    {&hf_qwen35_moe_text, 1, 1, 1, {248320, 2048, 512, 40, 32, 256, 8}},
};

static const hf_family_ops hybrid_ops;

const hf_hybrid *hf_hybrid_of(const hf_family *f) {
    return f->ops == &hybrid_ops ? f->own : NULL;
}

/* ---- the tensor table ---------------------------------------------------------------------- */

/* Qwen3-Next's rows: the table (hf_rows.h) and the class's layout flags */
typedef struct table {
    hf_rows r;
    const hf_hybrid *hy;
} table;

static void plain(table *tb, const char *fmt, int e, tsr_param_id p, int64_t r0, int64_t rows,
                  int64_t cols, float add) {
    hf_rows_plain(&tb->r, fmt, e, p, r0, rows, cols, add);
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
    const int np = hf_qwen3next_fused(tb->r.m, which, ps, &groups);
    hf_tensor *h = hf_rows_next(&tb->r, fmt, 0);
    int64_t rows = 0;
    for (int i = 0; i < np; i++) {
        size_t len;
        h->piece[i].offset = hf_rows_slice(&tb->r, ps[i].p, -1, &len) + (size_t)(ps[i].r0 * cols);
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

static void linear_layer(table *tb) {
    const tsr_model *m = tb->r.m;
    const int64_t C = m->C, HV = m->HVl, dv = m->dvl, CD = 2 * m->HKl * m->dkl + HV * dv;
    plain(tb, "linear_attn.conv1d.weight", -1, TSR_P_DNCONV, 0, CD, m->Kc, 0);
    hf_rows_view3(&tb->r, CD, 1, m->Kc);
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
    const tsr_model *m = tb->r.m;
    const int64_t C = m->C, hs = m->hs, QD = m->QD, KV = (int64_t)m->KVH * hs;
    interleaved(tb, "self_attn.q_proj.weight", HF_FUSED_Q, C);
    plain(tb, "self_attn.k_proj.weight", -1, TSR_P_QKVW, QD, KV, C, 0);
    plain(tb, "self_attn.v_proj.weight", -1, TSR_P_QKVW, QD + KV, KV, C, 0);
    plain(tb, "self_attn.o_proj.weight", -1, TSR_P_ATTPROJW, 0, C, QD, 0);
    plain(tb, "self_attn.q_norm.weight", -1, TSR_P_QNORMW, 0, hs, 0, 1.0f);
    plain(tb, "self_attn.k_norm.weight", -1, TSR_P_KNORMW, 0, hs, 0, 1.0f);
}

static void mlp(table *tb) {
    const tsr_model *m = tb->r.m;
    const int64_t C = m->C, F = m->F, FE = m->FE, S = m->S;
    if (!model_moe_layer(m, tb->r.l)) {
        hf_rows_swiglu(&tb->r, "mlp", -1, TSR_P_FCW, TSR_P_FCPROJW, F, C);
        return;
    }
    plain(tb, "mlp.gate.weight", -1, TSR_P_ROUTERW, 0, m->E, C, 0);
    if (tb->hy->stacked) { /* Qwen 3.5's MoE: the layer's experts in one tensor each, as tessera's */
        plain(tb, "mlp.experts.gate_up_proj", -1, TSR_P_EXPW1, 0, m->E * 2 * FE, C, 0);
        hf_rows_view3(&tb->r, m->E, 2 * FE, C);
        plain(tb, "mlp.experts.down_proj", -1, TSR_P_EXPW2, 0, m->E * C, FE, 0);
        hf_rows_view3(&tb->r, m->E, C, FE);
    }
    for (int e = 0; e < m->E && !tb->hy->stacked; e++)
        hf_rows_swiglu(&tb->r, "mlp.experts.%d", e, TSR_P_EXPW1, TSR_P_EXPW2, FE, C);
    hf_rows_swiglu(&tb->r, "mlp.shared_expert", -1, TSR_P_SHW1, TSR_P_SHW2, S, C);
    plain(tb, "mlp.shared_expert_gate.weight", -1, TSR_P_SHGATEW, 0, 1, C, 0);
}

/* The HF tensors of m as class f, in the state dict's module order; row 0 is wte. in_proj_qkvz
 * (per key head [q k v z]), in_proj_ba (per key head [b a]) and the full layers' q_proj (per head
 * [query gate]) are interleaved tensors (hf_tensor.groups). */
static hf_tensor *hybrid_table(const tsr_model *m, const hf_family *f, int *n) {
    const int per = 9 + 5 + 3 * m->E + 2; /* a linear layer, the MoE, the norms: the most a layer has */
    const hf_hybrid *hy = hf_hybrid_of(f);
    table tb = {{m, tsr_calloc((size_t)per * (size_t)m->L + 3, sizeof(hf_tensor)), 0, -1, -1,
                 f->prefix}, hy};
    plain(&tb, "embed_tokens.weight", -1, TSR_P_WTE, 0, m->V, m->C, 0);
    for (tb.r.l = 0; tb.r.l < m->L; tb.r.l++) {
        if (config_layer_linear(&m->cfg, tb.r.l)) linear_layer(&tb);
        else full_layer(&tb);
        mlp(&tb);
        plain(&tb, "input_layernorm.weight", -1, TSR_P_LN1W, 0, m->C, 0, 1.0f);
        plain(&tb, "post_attention_layernorm.weight", -1, TSR_P_LN2W, 0, m->C, 0, 1.0f);
    }
    tb.r.l = -1;
    plain(&tb, "norm.weight", -1, TSR_P_LNFW, 0, m->C, 0, 1.0f);
    tb.r.pre = "";
    plain(&tb, "lm_head.weight", -1, TSR_P_LMHEAD, 0, m->V, m->C, 0);
    *n = tb.r.n;
    return tb.r.t;
}

/* ---- what the class holds ------------------------------------------------------------------ */

/* What m lacks for the class beyond its row's variants (NULL: nothing): QK-norm and no biases,
 * the output gate on the full layers, linear or full layers only, no RoPE scaling. */
static const char *hybrid_need(const tsr_model *m, const hf_family *f) {
    const tsr_model_config *c = &m->cfg;
    (void)f;
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

/* The MoE's for class f: none (a dense model), or a shared expert with its gate; Qwen 3.5's dense
 * classes none, its MoE ones experts in every layer. */
static const char *hybrid_moe_need(const tsr_model *m, const hf_family *f) {
    const int moe = hf_hybrid_of(f)->moe;
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

/* ---- config.json: writing --------------------------------------------------------------------- */

/* RoPE: Qwen3-Next's keys at the top; Qwen 3.5's rope_parameters with an mrope_section over the
 * rotary frequencies (transformers' [11, 11, 10] for 32: text's equal streams, ordinary RoPE) */
static void rope_write(hf_text *b, const tsr_model *m, const hf_hybrid *hy) {
    const tsr_model_config *c = &m->cfg;
    char theta[32], prf[32];
    hfr_double(theta, sizeof theta, c->rope_theta);
    hfr_double(prf, sizeof prf, c->partial_rotary_factor);
    if (!hy->unfused) {
        hfr_add(b, "  \"rope_theta\": %s,\n  \"partial_rotary_factor\": %s,\n"
                "  \"rope_scaling\": null,\n", theta, prf);
        return;
    }
    const int n = (int)(m->hs * c->partial_rotary_factor) / 2; /* the rotary frequencies */
    hfr_add(b, "  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": %s, "
            "\"partial_rotary_factor\": %s, \"mrope_section\": [%d, %d, %d], "
            "\"mrope_interleaved\": true},\n", theta, prf, n / 3 + (n % 3 > 0),
            n / 3 + (n % 3 > 1), n / 3);
}

/* The mixture's keys: Qwen3-Next's all (num_experts 0 when dense), Qwen 3.5's MoE without the
 * sparse step, mlp_only_layers and norm_topk_prob it does not have, its dense sizes none. */
static void moe_write(hf_text *b, const tsr_model *m, const hf_hybrid *hy) {
    char aux[32];
    if (hy->moe < 0 || m->E) hfr_add(b, "  \"num_experts\": %d,\n", m->E);
    if (!m->E) return;
    hfr_add(b, "  \"num_experts_per_tok\": %d,\n  \"moe_intermediate_size\": %d,\n"
            "  \"shared_expert_intermediate_size\": %d,\n", m->K, m->FE, m->S);
    if (hy->moe < 0)
        hfr_add(b, "  \"norm_topk_prob\": %s,\n  \"decoder_sparse_step\": %d,\n"
                "  \"mlp_only_layers\": [],\n", m->cfg.moe_norm_topk ? "true" : "false",
                m->cfg.moe_every);
    hfr_add(b, "  \"router_aux_loss_coef\": %s,\n  \"output_router_logits\": false,\n",
            hfr_double(aux, sizeof aux, hf_aux_coef(m, m->cfg.moe_aux_loss_coef)));
}

/* The text config's keys of m as class f (Qwen3NextConfig's, Qwen3_5TextConfig's...). */
static void text_write(hf_text *b, const tsr_model *m, const hf_family *f) {
    const tsr_model_config *c = &m->cfg;
    const hf_hybrid *hy = hf_hybrid_of(f);
    char eps[32];
    hfr_add(b, "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n", m->V, m->C);
    if (!m->E || hy->moe < 0) hfr_add(b, "  \"intermediate_size\": %d,\n", m->F);
    hfr_add(b, "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
            "  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n  \"hidden_act\": \"silu\",\n",
            m->L, m->NH, m->KVH, m->hs);
    hfr_add(b, "  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %s,\n",
            c->max_seq_len > 0 ? c->max_seq_len : m->maxT, hfr_double(eps, sizeof eps, c->norm_eps));
    rope_write(b, m, hy);
    hfr_add(b, "  \"attention_bias\": false,\n  \"attention_dropout\": 0.0,\n  \"layer_types\": [");
    for (int l = 0; l < m->L; l++)
        hfr_add(b, "%s\"%s\"", l ? ", " : "", config_layer_linear(c, l) ? "linear_attention"
                                                                       : "full_attention");
    hfr_add(b, "],\n  \"linear_conv_kernel_dim\": %d,\n  \"linear_key_head_dim\": %d,\n"
            "  \"linear_value_head_dim\": %d,\n  \"linear_num_key_heads\": %d,\n"
            "  \"linear_num_value_heads\": %d,\n", c->linear_conv_kernel_dim,
            c->linear_key_head_dim, c->linear_value_head_dim, c->linear_num_key_heads,
            c->linear_num_value_heads);
    moe_write(b, m, hy);
}

/* The text keys, nested in the VL's text_config with its model_type and tying. */
static void hybrid_write(hf_text *b, const tsr_model *m, const hf_family *f) {
    if (!f->nest) {
        text_write(b, m, f);
        return;
    }
    hfr_add(b, "  \"%s\": {\n  \"model_type\": \"%s\",\n", f->nest,
            hf_hybrid_of(f)->text->model_type);
    text_write(b, m, f);
    hfr_add(b, "  \"tie_word_embeddings\": %s\n  },\n", m->cfg.tie_embeddings ? "true" : "false");
}

/* ---- config.json: reading ------------------------------------------------------------------- */

typedef struct hyread {
    hf_reader c;           /* over the text model's keys (c.root): the top, or the VL's text_config */
    const json_value *top; /* config.json's object */
    const hf_family *f;
    const hf_hybrid *hy;
    int types[HF_MAX_LAYERS]; /* 1: linear_attention, per layer */
    long L;
} hyread;

static const json_value *member(const hyread *rd, const char *key) {
    return hfr_member(rd->c.root, key);
}

/* A count of config.json (absent: def): a whole number >= least, else refused naming it. */
static long count(hyread *rd, const char *key, long def, long least) {
    long x = hfr_int(&rd->c, rd->c.root, key, def);
    if (x < least || x > 1000000000)
        hfr_fault(&rd->c, TSR_EXIT_DATA, "%s = %ld: expected an integer >= %ld", key, x, least);
    return x >= least && x <= 1000000000 ? x : least;
}

/* A value the class fixes: "model_type \"qwen3_next\" (VALUE)". */
static void put_word(hyread *rd, const char *run_key, const char *value) {
    hfr_put_word(&rd->c, run_key, value, rd->f->model_type, value);
}

/* layer_types, else every full_attention_interval-th layer full (Qwen3NextConfig's default 4) */
static void read_types(hyread *rd) {
    const json_value *lt = member(rd, "layer_types");
    if (rd->L < 1 || rd->L > HF_MAX_LAYERS) {
        hfr_fault(&rd->c, TSR_EXIT_DATA, "num_hidden_layers = %ld: expected 1 to %d", rd->L,
                  HF_MAX_LAYERS);
        return;
    }
    if (lt && lt->type != JSON_NULL) {
        const json_value *e = lt->type == JSON_ARRAY && (long)lt->len == rd->L ? lt->child : NULL;
        if (!e)
            hfr_fault(&rd->c, TSR_EXIT_DATA, "layer_types is not a list of num_hidden_layers = %ld "
                      "entries", rd->L);
        for (long l = 0; e && l < rd->L; l++, e = e->next) {
            int lin = e->type == JSON_STRING && !strcmp(e->str, "linear_attention");
            if (!lin && (e->type != JSON_STRING || strcmp(e->str, "full_attention") != 0))
                hfr_fault(&rd->c, TSR_EXIT_DATA, "layer_types[%ld] is not \"linear_attention\" or "
                          "\"full_attention\" (the layer types tessera's Qwen3-Next holds)", l);
            rd->types[l] = lin;
        }
        return;
    }
    long every = count(rd, "full_attention_interval", 4, 1);
    for (long l = 0; l < rd->L; l++) rd->types[l] = (l + 1) % every != 0;
}

/* model.layer_types: the shortest pattern that repeats into every layer's type */
static void put_types(hyread *rd) {
    const long p = hf_period_of(rd->types, rd->L);
    char v[2048];
    size_t n = 0;
    for (long l = 0; l < p && n < sizeof v; l++)
        n += (size_t)snprintf(v + n, sizeof v - n, "%s%s", l ? "," : "",
                              rd->types[l] ? "linear_attention" : "full_attention");
    if (n >= sizeof v)
        hfr_fault(&rd->c, TSR_EXIT_DATA, "layer_types: no pattern of %zu bytes repeats into it",
                  sizeof v);
    hfr_put_key(&rd->c, 0, "model.layer_types", rd->c.root,
                member(rd, "layer_types") ? "layer_types" : "full_attention_interval", v);
}

/* Qwen 3.5's mrope_section (rp: rope_parameters, or NULL): three integers >= 0 that share the
 * rotary dimensions' frequencies out (sum = head_dim x partial_rotary_factor / 2). A text's three
 * position streams are equal, so that is ordinary RoPE over those dimensions; anything else is
 * not a rotation tessera has (docs/hf.md "Qwen 3.5"). Absent: transformers' default, fine too. */
static void check_mrope(hyread *rd, const json_value *rp) {
    const json_value *ms = rp ? json_get(rp, "mrope_section") : NULL, *e;
    char got[96];
    if (!ms || ms->type == JSON_NULL) return;
    const json_value *pf = json_get(rp, "partial_rotary_factor");
    const double prf = pf && pf->type == JSON_NUMBER ? pf->num
                                                     : hfr_num(&rd->c, rd->c.root, "partial_rotary_factor", 0.25);
    const double rot = hfr_num(&rd->c, rd->c.root, "head_dim", 256) * prf;
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
        hfr_fault(&rd->c, TSR_EXIT_DATA, "rope_parameters.mrope_section = %s%s: expected three "
                  "integers >= 0 that add up to the %ld rotary frequencies (head_dim x "
                  "partial_rotary_factor / 2), which with a text's equal position streams is "
                  "ordinary RoPE; tessera reads no other", json_describe(ms, got, sizeof got),
                  adds, half);
}

/* A RoPE object's type other than "default" (rope_scaling's or rope_parameters'), or NULL. */
static const json_value *rope_type(const json_value *v) {
    const json_value *t = v && v->type == JSON_OBJECT ? json_get(v, "rope_type") : NULL;
    return t && !(t->type == JSON_STRING && !strcmp(t->str, "default")) ? t : NULL;
}

/* What tessera cannot hold: refused by name and value (exit 2). */
static void refusals(hyread *rd) {
    char got[96];
    const json_value *v = member(rd, "mlp_only_layers");
    if (v && v->type != JSON_NULL && (v->type != JSON_ARRAY || v->len))
        hfr_fault(&rd->c, TSR_EXIT_DATA, "mlp_only_layers = %s: tessera's MoE layers are every "
                  "decoder_sparse_step-th (model.moe_every) and cannot be made dense one by one; "
                  "only [] or null is accepted", json_describe(v, got, sizeof got));
    v = member(rd, "rope_scaling");
    const json_value *t = v && v->type == JSON_OBJECT ? json_get(v, "rope_type") : NULL;
    if (!t && v && v->type == JSON_OBJECT) t = json_get(v, "type");
    if (v && v->type != JSON_NULL && !(t && t->type == JSON_STRING && !strcmp(t->str, "default")))
        hfr_fault(&rd->c, TSR_EXIT_DATA, "rope_scaling = %s: tessera reads Qwen3-Next's plain RoPE "
                  "only (null)", json_describe(v, got, sizeof got));
    if ((t = rope_type(member(rd, "rope_parameters"))))
        hfr_fault(&rd->c, TSR_EXIT_DATA, "rope_parameters.rope_type = %s: tessera reads plain RoPE "
                  "only (\"default\")", json_describe(t, got, sizeof got));
    if (hfr_bool(&rd->c, rd->c.root, "attention_bias", 0))
        hfr_fault(&rd->c, TSR_EXIT_DATA, "attention_bias = true: tessera's Qwen3-Next has no "
                  "attention biases");
    v = member(rd, "hidden_act");
    if (v && !(v->type == JSON_STRING && !strcmp(v->str, "silu")))
        hfr_fault(&rd->c, TSR_EXIT_DATA, "hidden_act = %s: tessera's SwiGLU needs \"silu\"",
                  json_describe(v, got, sizeof got));
}

/* rope_theta and partial_rotary_factor, at the top or in transformers 5's rope_parameters */
static void put_rope(hyread *rd) {
    const json_value *rp = member(rd, "rope_parameters");
    const int in = rp && rp->type == JSON_OBJECT;
    hfr_put_num(&rd->c, "model.rope_theta", in && json_get(rp, "rope_theta") ? rp : rd->c.root,
                "rope_theta", 10000);
    hfr_put_num(&rd->c, "model.partial_rotary_factor",
                in && json_get(rp, "partial_rotary_factor") ? rp : rd->c.root,
                "partial_rotary_factor", 0.25);
}

static void put_moe(hyread *rd) {
    hf_reader *c = &rd->c;
    char e[32];
    const int moe = rd->hy->moe;
    const long E = moe == 0 ? 0 : count(rd, "num_experts", rd->hy->def[5], moe > 0);
    snprintf(e, sizeof e, "%ld", E);
    if (moe == 0) put_word(rd, "model.moe_experts", e); /* dense: the type's */
    else hfr_put_key(c, 0, "model.moe_experts", c->root, "num_experts", e);
    if (E <= 0) return;
    hfr_put_int(c, 0, "model.moe_top_k", "num_experts_per_tok", rd->hy->def[6]);
    hfr_put_int(c, 0, "model.moe_intermediate_size", "moe_intermediate_size", 512);
    hfr_put_int(c, 0, "model.moe_shared_size", "shared_expert_intermediate_size", 512);
    put_word(rd, "model.moe_shared_gate", "true");
    if (moe > 0) { /* Qwen 3.5: every layer, the top k renormalised (Qwen3VLMoeTextTopKRouter) */
        put_word(rd, "model.moe_norm_topk", "true");
        put_word(rd, "model.moe_every", "1");
        return;
    }
    hfr_put_key(c, 0, "model.moe_norm_topk", c->root, "norm_topk_prob",
                hfr_bool(c, c->root, "norm_topk_prob", 1) ? "true" : "false");
    hfr_put_int(c, 0, "model.moe_every", "decoder_sparse_step", 1);
}

static void put_sizes(hyread *rd) {
    hf_reader *c = &rd->c;
    const long *d = rd->hy->def;
    hfr_put_int(c, 0, "model.n_layer", "num_hidden_layers", d[3]);
    hfr_put_int(c, 0, "model.d_model", "hidden_size", d[1]);
    hfr_put_int(c, 0, "model.n_head", "num_attention_heads", 16);
    hfr_put_int(c, 0, "model.n_kv_head", "num_key_value_heads", 2);
    hfr_put_int(c, 0, "model.head_dim", "head_dim", 256);
    hfr_put_int(c, 0, "model.intermediate_size", "intermediate_size", d[2]);
    hfr_put_int(c, 0, "model.vocab_size", "vocab_size", d[0]);
    hfr_put_num(c, "model.norm_eps", c->root, "rms_norm_eps", 1e-6);
    hfr_put_int(c, 0, "model.linear_conv_kernel_dim", "linear_conv_kernel_dim", 4);
    hfr_put_int(c, 0, "model.linear_key_head_dim", "linear_key_head_dim", 128);
    hfr_put_int(c, 0, "model.linear_value_head_dim", "linear_value_head_dim", 128);
    hfr_put_int(c, 0, "model.linear_num_key_heads", "linear_num_key_heads", 16);
    hfr_put_int(c, 0, "model.linear_num_value_heads", "linear_num_value_heads", d[4]);
}

/* The head's tying: the text's tie_word_embeddings, else the VL's own. */
static void put_tied(hyread *rd) {
    const json_value *obj = member(rd, "tie_word_embeddings") ? rd->c.root : rd->top;
    hfr_put_key(&rd->c, 0, "model.tie_embeddings", obj, "tie_word_embeddings",
                hfr_bool(&rd->c, obj, "tie_word_embeddings", 0) ? "true" : "false");
}

static void fill(hyread *rd) {
    static const char *const words[][2] = {
        {"model.pos", "rope"}, {"model.norm", "rmsnorm"}, {"model.mlp", "swiglu"},
        {"model.bias", "false"}, {"model.qkv_bias", "false"}, {"model.qk_norm", "true"},
        {"model.qk_norm_scope", "head"}, {"model.norm_placement", "pre"},
        {"model.embed_scale", "none"}, {"model.rope_scaling", "none"},
        {"model.attn_output_gate", "true"}};
    char from[96];
    refusals(rd);
    rd->L = count(rd, "num_hidden_layers", rd->hy->def[3], 1);
    read_types(rd);
    if (rd->c.rc) return;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        put_word(rd, words[i][0], words[i][1]);
    put_sizes(rd);
    put_rope(rd);
    const json_value *rp = member(rd, "rope_parameters"); /* (over the sizes checked above) */
    if (rd->hy->unfused && !rd->c.rc) check_mrope(rd, rp && rp->type == JSON_OBJECT ? rp : NULL);
    put_tied(rd);
    if (member(rd, "max_position_embeddings")) /* the model's context (soft, as the others') */
        hfr_put_int(&rd->c, 1, "model.max_seq_len", "max_position_embeddings", 0);
    put_types(rd);
    put_moe(rd);
    snprintf(from, sizeof from, "model_type \"%s\" (%s)", rd->f->model_type, rd->f->model_type);
    hfr_put(&rd->c, 1, "model.hf_model_type", rd->f->model_type, from); /* what an export writes */
}

/* rd over config.json (c's) for class f: the text keys, where Qwen 3.5's VL nests them */
static void start(hyread *rd, const hf_reader *c, const hf_family *f) {
    rd->c = *c, rd->top = c->root, rd->f = f, rd->hy = hf_hybrid_of(f);
    if (!f->nest) return;
    const json_value *tc = json_get(rd->top, f->nest), *t;
    if (!tc || tc->type != JSON_OBJECT) {
        hfr_fault(&rd->c, TSR_EXIT_DATA, "no %s object: model_type \"%s\" nests the text model's "
                  "keys there", f->nest, f->model_type);
        return;
    }
    rd->c.root = tc;
    t = json_get(tc, "model_type");
    if (t && !(t->type == JSON_STRING && !strcmp(t->str, rd->hy->text->model_type)))
        hfr_fault(&rd->c, TSR_EXIT_DATA, "%s.model_type is not \"%s\" (the text model of "
                  "model_type \"%s\")", f->nest, rd->hy->text->model_type, f->model_type);
}

static void hybrid_fill(hf_reader *c, const hf_family *f) {
    hyread *rd = tsr_calloc(1, sizeof *rd);
    start(rd, c, f);
    if (!rd->c.rc) fill(rd);
    if (!c->rc) c->rc = rd->c.rc;
    free(rd);
}

/* ---- config.json: checking against a run's model ------------------------------------------- */

/* Each layer's kind against the run's (model.layer_types). */
static void check_types(hf_reader *c, const hyread *rd, const tsr_model *m) {
    for (long l = 0; l < rd->L && l < m->L && !c->rc; l++)
        if (rd->types[l] != config_layer_linear(&m->cfg, (int)l))
            hfr_fault(c, TSR_EXIT_USAGE, "layer_types: layer %ld is %s, but this run's "
                      "model.layer_types makes it %s", l,
                      rd->types[l] ? "linear_attention" : "full_attention",
                      rd->types[l] ? "an attention layer" : "linear_attention");
}

/* config.json against the run's model m: every key the fill gives must be m's. */
static void hybrid_check(hf_reader *c, const tsr_model *m, const hf_family *f) {
    tsr_config_fill *fl = tsr_calloc(1, sizeof *fl);
    hyread *rd = tsr_calloc(1, sizeof *rd);
    hf_reader text = *c;
    text.fill = fl;
    start(rd, &text, f);
    if (!rd->c.rc) fill(rd);
    if (!c->rc) c->rc = rd->c.rc;
    hf_fill_check(c, m, fl, "model.layer_types");
    check_types(c, rd, m);
    free(rd);
    free(fl);
}

/* ---- the rows ------------------------------------------------------------------------------- */

/* Linear attention layers, the attention output gate or the shared expert's gate (*by: which). */
static int qwen3next_claims(const tsr_model *m, const char **by) {
    const tsr_model_config *c = &m->cfg;
    *by = config_linear_layers(c) > 0 ? "model.layer_types with linear_attention"
          : c->attn_output_gate ? "model.attn_output_gate" : "model.moe_shared_gate";
    return config_linear_layers(c) > 0 || c->attn_output_gate || c->moe_shared_gate;
}

static const hf_family_ops hybrid_ops = {hybrid_write, hybrid_check, hybrid_fill, hybrid_table,
                                         hybrid_moe_need};

#define HYBRID_ROW .ops = &hybrid_ops, .names = &hf_llama_names, .rope = 1, .need = hybrid_need, \
                   .mlp = TSR_MLP_SWIGLU, .qk_norm = 1, .head_dim_key = 1, .norm_add = 1.0f, \
                   .hybrid = 1
const hf_family hf_qwen3next = {"qwen3_next", "Qwen3NextForCausalLM", HYBRID_ROW,
                                .prefix = "model.", .moe = 1, .claims = qwen3next_claims,
                                .own = &hybrids[0]};
const hf_family hf_qwen35_text = {"qwen3_5_text", "Qwen3_5ForCausalLM", HYBRID_ROW,
                                  .prefix = "model.", .own = &hybrids[1]};
const hf_family hf_qwen35_moe_text = {"qwen3_5_moe_text", "Qwen3_5MoeForCausalLM", HYBRID_ROW,
                                      .prefix = "model.", .moe = 1, .own = &hybrids[2]};
/* the vision-language wrappers: the text's layout under model.language_model., its keys in
 * text_config */
const hf_family hf_qwen35 = {"qwen3_5", "Qwen3_5ForConditionalGeneration", HYBRID_ROW,
                             .prefix = "model.language_model.", .nest = "text_config",
                             .own = &hybrids[1]};
const hf_family hf_qwen35_moe = {"qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration", HYBRID_ROW,
                                 .prefix = "model.language_model.", .nest = "text_config",
                                 .moe = 1, .own = &hybrids[2]};
#undef HYBRID_ROW
