/* hf_deepseek.c — DeepseekV3ForCausalLM (model_type deepseek_v3: DeepSeek-V3/R1, Moonlight; and
 * kimi_k2, Kimi K2's own model_type on the same class) and DeepseekV2ForCausalLM (deepseek_v2:
 * DeepSeek-V2, V2-Lite) <-> tessera's MLA decoder with DeepSeekMoE's router and multi-token
 * prediction (docs/hf.md "DeepSeek"; docs/models.md "DeepSeek", "Multi-token prediction";
 * docs/moe.md "DeepSeek's router").
 *
 * Per layer l (transformers' modeling_deepseek_v3.py, DeepSeek's modeling_deepseek.py):
 *   self_attn.q_a_proj (qr, C) = mlaqaw, q_a_layernorm (qr) = mlaqanormw, q_b_proj (NH dqk, qr)
 *   = mlaqw, or without the low-rank path (q_lora_rank null) q_proj (NH dqk, C) = mlaqw;
 *   kv_a_proj_with_mqa (kvr + dr, C) = mlakvaw, kv_a_layernorm (kvr), kv_b_proj (NH (dn + dv), kvr),
 *   o_proj (C, NH dv); mlp: a dense layer's gate_proj, up_proj (fcw's halves), down_proj, or a MoE
 *   layer's gate.weight (E, C) = routerw, gate.e_score_correction_bias (E) = routercorr (noaux_tc),
 *   experts.E.{gate,up,down}_proj, shared_experts.{gate,up,down}_proj (shw1's halves, shw2);
 *   input_layernorm, post_attention_layernorm;
 * and model.embed_tokens, model.norm, lm_head. MTP depth k (num_nextn_predict_layers) is
 * model.layers.{L + k - 1}: enorm, hnorm, eh_proj, shared_head.norm (the module's frame), that
 * layer's own tensors as above (the module's decoder layer, in mtp_layer_w / mtp_layer_n), and
 * embed_tokens, shared_head.head: the model's embedding and head, which the published checkpoints
 * store again there (copies: hf_tensor.copy).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "hf/hf_llama.h"
#include "hf/hf_rows.h"
#include "hf/hf_runkeys.h"

static const hf_family_ops ds_ops;

/* a V2 class (softmax router, no MTP, RoPE always interleaved, no rope_interleave key) */
static int is_v2(const hf_family *f) { return f == &hf_deepseek_v2; }

/* ---- the tensor table ---------------------------------------------------------------------- */

static void attention(hf_rows *r) {
    const tsr_model *m = r->m;
    const int64_t C = m->C, NH = m->NH, dqk = m->dn + m->dr;
    if (m->qr > 0) {
        hf_rows_plain(r, "self_attn.q_a_proj.weight", -1, TSR_P_MLAQAW, 0, m->qr, C, 0);
        hf_rows_plain(r, "self_attn.q_a_layernorm.weight", -1, TSR_P_MLAQANORMW, 0, m->qr, 0, 0);
        hf_rows_plain(r, "self_attn.q_b_proj.weight", -1, TSR_P_MLAQW, 0, NH * dqk, m->qr, 0);
    } else {
        hf_rows_plain(r, "self_attn.q_proj.weight", -1, TSR_P_MLAQW, 0, NH * dqk, C, 0);
    }
    hf_rows_plain(r, "self_attn.kv_a_proj_with_mqa.weight", -1, TSR_P_MLAKVAW, 0, m->kvr + m->dr,
                  C, 0);
    hf_rows_plain(r, "self_attn.kv_a_layernorm.weight", -1, TSR_P_MLAKVANORMW, 0, m->kvr, 0, 0);
    hf_rows_plain(r, "self_attn.kv_b_proj.weight", -1, TSR_P_MLAKVBW, 0, NH * (m->dn + m->dv),
                  m->kvr, 0);
    hf_rows_plain(r, "self_attn.o_proj.weight", -1, TSR_P_MLAOW, 0, C, NH * m->dv, 0);
}

/* a dense layer's MLP, or a MoE layer's (each row only where the layer has its tensor) */
static void mlp(hf_rows *r) {
    const tsr_model *m = r->m;
    const int64_t C = m->C, F = m->F, FE = m->FE, S = m->S;
    size_t len;
    hf_rows_swiglu(r, "mlp", -1, TSR_P_FCW, TSR_P_FCPROJW, F, C);
    if (hf_rows_slice(r, TSR_P_ROUTERW, -1, &len) == SIZE_MAX) return;
    hf_rows_plain(r, "mlp.gate.weight", -1, TSR_P_ROUTERW, 0, m->E, C, 0);
    hf_rows_plain(r, "mlp.gate.e_score_correction_bias", -1, TSR_P_ROUTERCORR, 0, m->E, 0, 0);
    for (int e = 0; e < m->E; e++)
        hf_rows_swiglu(r, "mlp.experts.%d", e, TSR_P_EXPW1, TSR_P_EXPW2, FE, C);
    hf_rows_swiglu(r, "mlp.shared_experts", -1, TSR_P_SHW1, TSR_P_SHW2, S, C);
}

static void layer(hf_rows *r) {
    attention(r);
    mlp(r);
    hf_rows_plain(r, "input_layernorm.weight", -1, TSR_P_LN1W, 0, r->m->C, 0, 0);
    hf_rows_plain(r, "post_attention_layernorm.weight", -1, TSR_P_LN2W, 0, r->m->C, 0, 0);
}

/* depth d's row of a (D, rows, cols) tensor of the MTP frame */
static void frame(hf_rows *r, const char *name, tsr_param_id p, int d, int64_t rows, int64_t cols) {
    const tsr_param_info *pi = &r->m->params_info[p];
    hf_tensor *h = hf_rows_next(r, name, 0);
    h->ndim = cols ? 2 : 1;
    h->shape[0] = rows, h->shape[1] = cols;
    h->numel = (size_t)(rows * (cols ? cols : 1));
    h->offset = pi->offset + (size_t)d * h->numel;
    h->rows = rows, h->cols = cols ? cols : 1;
}

/* a second name of the (V, C) block of p (the embedding, the head) */
static void copy(hf_rows *r, const char *name, tsr_param_id p) {
    frame(r, name, p, 0, r->m->V, r->m->C);
    r->t[r->n - 1].copy = 1;
}

/* MTP depth d: model.layers.{L + d} */
static void mtp_layer(hf_rows *r, int d) {
    const tsr_model *m = r->m;
    const int64_t C = m->C;
    r->l = m->L + d;
    r->mtp = d;
    frame(r, "enorm.weight", TSR_P_MTPENORMW, d, C, 0);
    frame(r, "hnorm.weight", TSR_P_MTPHNORMW, d, C, 0);
    frame(r, "eh_proj.weight", TSR_P_MTPEHW, d, C, 2 * C);
    frame(r, "shared_head.norm.weight", TSR_P_MTPNORMW, d, C, 0);
    copy(r, "embed_tokens.weight", TSR_P_WTE);
    copy(r, "shared_head.head.weight", m->cfg.tie_embeddings ? TSR_P_WTE : TSR_P_LMHEAD);
    layer(r);
}

static hf_tensor *ds_table(const tsr_model *m, const hf_family *f, int *n) {
    const size_t per = 30 + 3 * (size_t)m->E; /* the most rows a layer has */
    hf_rows r = {m, tsr_calloc(per * (size_t)(m->L + m->D) + 3, sizeof(hf_tensor)), 0, -1, -1,
                 f->prefix};
    hf_rows_plain(&r, "embed_tokens.weight", -1, TSR_P_WTE, 0, m->V, m->C, 0);
    for (r.l = 0; r.l < m->L; r.l++) layer(&r);
    for (int d = 0; d < m->D; d++) mtp_layer(&r, d);
    r.l = r.mtp = -1;
    hf_rows_plain(&r, "norm.weight", -1, TSR_P_LNFW, 0, m->C, 0, 0);
    r.pre = "";
    hf_rows_plain(&r, "lm_head.weight", -1, TSR_P_LMHEAD, 0, m->V, m->C, 0);
    *n = r.n;
    return r.t;
}

/* ---- what the classes hold ------------------------------------------------------------------- */

static const char *ds_need(const tsr_model *m, const hf_family *f) {
    const tsr_model_config *c = &m->cfg;
    if (m->LX != m->L || m->kvr <= 0) return "model.kv_lora_rank > 0 (every layer MLA)";
    if (c->bias || c->qkv_bias || c->attn_bias) return "model.bias, qkv_bias and attn_bias false";
    if (c->rope_scaling != TSR_ROPE_SCALING_NONE && c->rope_scaling != TSR_ROPE_SCALING_YARN)
        return "model.rope_scaling = \"yarn\" or \"none\"";
    if (is_v2(f) && (!c->rope_interleave || m->D))
        return "model.rope_interleave = true and model.num_nextn_predict_layers = 0 (DeepSeek-V2's "
               "RoPE pairs, no MTP)";
    return NULL;
}

static const char *ds_moe_need(const tsr_model *m, const hf_family *f) {
    const tsr_model_config *c = &m->cfg;
    if (!m->E) return "model.moe_experts > 0 (DeepSeekMoE)";
    if (c->moe_every != 1) return "model.moe_every = 1 (every layer after the dense ones MoE)";
    if (m->S % m->FE) return "model.moe_shared_size a multiple of model.moe_intermediate_size";
    if (is_v2(f) && (c->moe_scoring != TSR_MOE_SCORE_SOFTMAX ||
                     c->moe_topk_method == TSR_MOE_TOPK_NOAUX_TC))
        return "model.moe_scoring = \"softmax\" and model.moe_topk_method \"greedy\" or "
               "\"group_limited_greedy\" (DeepseekV2's router)";
    if (!is_v2(f) && (c->moe_scoring != TSR_MOE_SCORE_SIGMOID ||
                      c->moe_topk_method != TSR_MOE_TOPK_NOAUX_TC))
        return "model.moe_scoring = \"sigmoid\" and model.moe_topk_method = \"noaux_tc\" "
               "(DeepseekV3's router)";
    return NULL;
}

/* MLA: a DeepSeek class, V2's when its router is (*by: the feature) */
static int v3_claims(const tsr_model *m, const char **by) {
    *by = "model.kv_lora_rank";
    return m->kvr > 0;
}

static int v2_claims(const tsr_model *m, const char **by) {
    *by = "model.kv_lora_rank with model.moe_scoring = \"softmax\"";
    return m->kvr > 0 && m->cfg.moe_scoring == TSR_MOE_SCORE_SOFTMAX;
}

/* ---- config.json: writing ------------------------------------------------------------------- */

static const char *const topk_word[] = {"greedy", "group_limited_greedy", "noaux_tc"};

/* rope_theta, rope_scaling (null or YaRN with DeepSeek's mscales), rope_interleave (V3) */
static void rope_write(hf_text *b, const tsr_model *m, const hf_family *f) {
    const tsr_model_config *c = &m->cfg;
    char x[6][32];
    hfr_add(b, "  \"rope_theta\": %s,\n", hfr_double(x[0], sizeof x[0], c->rope_theta));
    if (c->rope_scaling == TSR_ROPE_SCALING_YARN)
        hfr_add(b, "  \"rope_scaling\": {\"type\": \"yarn\", \"factor\": %s, "
                "\"original_max_position_embeddings\": %d, \"beta_fast\": %s, \"beta_slow\": %s, "
                "\"mscale\": %s, \"mscale_all_dim\": %s%s},\n",
                hfr_double(x[1], sizeof x[1], c->rope_factor), c->rope_original_max_pos,
                hfr_double(x[2], sizeof x[2], c->rope_beta_fast),
                hfr_double(x[3], sizeof x[3], c->rope_beta_slow),
                hfr_double(x[4], sizeof x[4], c->rope_mscale),
                hfr_double(x[5], sizeof x[5], c->rope_mscale_all_dim),
                c->rope_truncate ? "" : ", \"truncate\": false");
    else
        hfr_add(b, "  \"rope_scaling\": null,\n");
    if (!is_v2(f)) hfr_add(b, "  \"rope_interleave\": %s,\n", c->rope_interleave ? "true" : "false");
}

static void moe_write(hf_text *b, const tsr_model *m) {
    const tsr_model_config *c = &m->cfg;
    char x[32];
    hfr_add(b, "  \"n_routed_experts\": %d,\n  \"num_experts_per_tok\": %d,\n"
            "  \"moe_intermediate_size\": %d,\n  \"n_shared_experts\": %d,\n"
            "  \"scoring_func\": \"%s\",\n  \"topk_method\": \"%s\",\n  \"n_group\": %d,\n"
            "  \"topk_group\": %d,\n  \"norm_topk_prob\": %s,\n  \"routed_scaling_factor\": %s,\n"
            "  \"first_k_dense_replace\": %d,\n  \"moe_layer_freq\": 1,\n", m->E, m->K, m->FE,
            m->S / m->FE, c->moe_scoring == TSR_MOE_SCORE_SIGMOID ? "sigmoid" : "softmax",
            topk_word[c->moe_topk_method], c->moe_n_group, c->moe_topk_group,
            c->moe_norm_topk ? "true" : "false",
            hfr_double(x, sizeof x, c->moe_routed_scaling), c->moe_dense_layers);
}

static void ds_write(hf_text *b, const tsr_model *m, const hf_family *f) {
    char eps[32];
    hfr_add(b, "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
            "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
            "  \"num_key_value_heads\": %d,\n", m->V, m->C, m->F, m->L, m->NH, m->NH);
    if (m->qr > 0) hfr_add(b, "  \"q_lora_rank\": %d,\n", m->qr);
    else hfr_add(b, "  \"q_lora_rank\": null,\n");
    hfr_add(b, "  \"kv_lora_rank\": %d,\n  \"qk_nope_head_dim\": %d,\n  \"qk_rope_head_dim\": %d,\n"
            "  \"v_head_dim\": %d,\n  \"hidden_act\": \"silu\",\n  \"max_position_embeddings\": %d,\n"
            "  \"rms_norm_eps\": %s,\n  \"attention_bias\": false,\n  \"attention_dropout\": 0.0,\n",
            m->kvr, m->dn, m->dr, m->dv, hf_rope_context(m),
            hfr_double(eps, sizeof eps, m->cfg.norm_eps));
    if (!is_v2(f)) hfr_add(b, "  \"num_nextn_predict_layers\": %d,\n", m->D);
    rope_write(b, m, f);
    moe_write(b, m);
}

/* ---- config.json: reading ------------------------------------------------------------------- */

/* An integer key from lo to hi (absent or null: def), put as run_key; a value outside is refused
 * naming it (exit 2: the file is untrusted, and a rank of 10^12 lays out no model). */
static long put_count(hf_reader *c, const char *run_key, const char *key, long def, long lo,
                      long hi) {
    long x = hfr_int(c, c->root, key, def);
    char v[32];
    if (x < lo || x > hi) {
        hfr_fault(c, TSR_EXIT_DATA, "%s = %ld: expected an integer from %ld to %ld", key, x, lo, hi);
        return lo;
    }
    snprintf(v, sizeof v, "%ld", x);
    if (run_key) hfr_put_key(c, 0, run_key, c->root, key, v);
    return x;
}

/* a string key that must be one of words[0..n) (absent: def), put as run_key */
static void put_choice(hf_reader *c, const char *run_key, const char *key, const char *def,
                       const char *const *words, int n) {
    const char *s = hfr_str(c, c->root, key, def);
    for (int i = 0; i < n; i++)
        if (!strcmp(s, words[i])) {
            hfr_put_key(c, 0, run_key, c->root, key, s);
            return;
        }
    char all[160] = "";
    for (int i = 0, k = 0; i < n; i++)
        k += snprintf(all + k, sizeof all - (size_t)k, "%s\"%s\"", i ? ", " : "", words[i]);
    hfr_fault(c, TSR_EXIT_DATA, "%s = \"%s\": tessera's DeepSeek router takes %s", key, s, all);
}

/* what tessera's MLA cannot take: other attention, RoPE scalings, activations (exit 2) */
static void refusals(hf_reader *c) {
    const json_value *rs = hfr_member(c->root, "rope_scaling");
    const char *type = rs && rs->type == JSON_OBJECT
                       ? hfr_str(c, rs, "type", hfr_str(c, rs, "rope_type", "")) : "";
    char got[96];
    if (rs && rs->type != JSON_NULL && strcmp(type, "yarn") != 0)
        hfr_fault(c, TSR_EXIT_DATA, "rope_scaling = %s: tessera reads DeepSeek's YaRN (type "
                  "\"yarn\") or null", json_describe(rs, got, sizeof got));
    if (hfr_bool(c, c->root, "attention_bias", 0))
        hfr_fault(c, TSR_EXIT_DATA, "attention_bias = true: tessera's MLA has no biases");
    if (strcmp(hfr_str(c, c->root, "hidden_act", "silu"), "silu") != 0)
        hfr_fault(c, TSR_EXIT_DATA, "hidden_act = \"%s\": tessera's SwiGLU needs \"silu\"",
                  hfr_str(c, c->root, "hidden_act", "silu"));
    if (hfr_int(c, c->root, "moe_layer_freq", 1) != 1)
        hfr_fault(c, TSR_EXIT_DATA, "moe_layer_freq = %ld: tessera reads 1 only (every layer after "
                  "first_k_dense_replace a MoE layer, as every release has it)",
                  hfr_int(c, c->root, "moe_layer_freq", 1));
}

/* the sizes and MLA's ranks; q_lora_rank null = no low-rank path (V2-Lite) */
static void put_sizes(hf_reader *c, const hf_family *f) {
    const hf_defaults *d = &f->def;
    const json_value *q = hfr_member(c->root, "q_lora_rank");
    hfr_put_layers(c, "model.n_layer", "num_hidden_layers", d->layers);
    put_count(c, "model.d_model", "hidden_size", d->hidden, 1, 1 << 20);
    long nh = put_count(c, "model.n_head", "num_attention_heads", d->heads, 1, 65536);
    long kvh = hfr_int(c, c->root, "num_key_value_heads", nh);
    if (kvh != nh)
        hfr_fault(c, TSR_EXIT_DATA, "num_key_value_heads = %ld: MLA gives every one of the %ld "
                  "heads its key and value (expected num_attention_heads)", kvh, nh);
    put_count(c, "model.intermediate_size", "intermediate_size", d->inter, 1, 1 << 24);
    put_count(c, "model.vocab_size", "vocab_size", d->vocab, 1, 1 << 24);
    hfr_put_num(c, "model.norm_eps", c->root, "rms_norm_eps", d->eps);
    if (q && q->type == JSON_NULL) hfr_put(c, 0, "model.q_lora_rank", "0", "q_lora_rank = null");
    else put_count(c, "model.q_lora_rank", "q_lora_rank", 1536, 0, 65536);
    put_count(c, "model.kv_lora_rank", "kv_lora_rank", 512, 1, 65536);
    put_count(c, "model.qk_nope_head_dim", "qk_nope_head_dim", 128, 1, 4096);
    long dr = put_count(c, "model.qk_rope_head_dim", "qk_rope_head_dim", 64, 2, 4096);
    if (dr % 2) hfr_fault(c, TSR_EXIT_DATA, "qk_rope_head_dim = %ld: expected an even size", dr);
    put_count(c, "model.v_head_dim", "v_head_dim", 128, 1, 4096);
    if (hfr_member(c->root, "max_position_embeddings"))
        hfr_put_int(c, 1, "model.max_seq_len", "max_position_embeddings", 0);
}

/* rope_theta, YaRN with its mscales, the pairs RoPE turns */
static void put_rope(hf_reader *c, const hf_family *f) {
    const json_value *rs = hfr_member(c->root, "rope_scaling");
    hf_rope_fill(c, f);
    if (rs && rs->type == JSON_OBJECT) {
        hfr_put_num(c, "model.rope_mscale", rs, "mscale", 0);
        hfr_put_num(c, "model.rope_mscale_all_dim", rs, "mscale_all_dim", 0);
    }
    if (is_v2(f)) hfr_put_word(c, "model.rope_interleave", "true", f->model_type, "RoPE in pairs");
    else hfr_put_bool(c, "model.rope_interleave", "rope_interleave", 1);
}

/* DeepSeekMoE's keys: the experts, the router's choice (per class), groups, scale, dense layers */
static void put_moe(hf_reader *c, const hf_family *f) {
    static const char *const v3_scoring[] = {"sigmoid"}, *const v3_topk[] = {"noaux_tc"};
    static const char *const v2_scoring[] = {"softmax"};
    const int v2 = is_v2(f);
    char v[32];
    long E = put_count(c, "model.moe_experts", "n_routed_experts", v2 ? 64 : 256, 1, 65536);
    put_count(c, "model.moe_top_k", "num_experts_per_tok", v2 ? 6 : 8, 1, E);
    long FE = put_count(c, "model.moe_intermediate_size", "moe_intermediate_size", v2 ? 1408 : 2048,
                        1, 1 << 24);
    long ns = put_count(c, NULL, "n_shared_experts", v2 ? 2 : 1, 0, 1024);
    snprintf(v, sizeof v, "%ld", ns * FE);
    hfr_put_key(c, 0, "model.moe_shared_size", c->root, "n_shared_experts", v);
    put_choice(c, "model.moe_scoring", "scoring_func", v2 ? "softmax" : "sigmoid",
               v2 ? v2_scoring : v3_scoring, 1);
    put_choice(c, "model.moe_topk_method", "topk_method", v2 ? "greedy" : "noaux_tc",
               v2 ? topk_word : v3_topk, v2 ? 2 : 1);
    long g = put_count(c, "model.moe_n_group", "n_group", v2 ? 1 : 8, 1, E);
    if (!c->rc && E % g)
        hfr_fault(c, TSR_EXIT_DATA, "n_group = %ld does not divide n_routed_experts = %ld", g, E);
    put_count(c, "model.moe_topk_group", "topk_group", v2 ? 1 : 4, 1, g);
    hfr_put_bool(c, "model.moe_norm_topk", "norm_topk_prob", !v2);
    double s = hfr_num(c, c->root, "routed_scaling_factor", v2 ? 1.0 : 2.5);
    if (!(s > 0 && s < 1e6))
        hfr_fault(c, TSR_EXIT_DATA, "routed_scaling_factor = %g: expected a number > 0", s);
    hfr_put_num(c, "model.moe_routed_scaling", c->root, "routed_scaling_factor", v2 ? 1.0 : 2.5);
    put_count(c, "model.moe_dense_layers", "first_k_dense_replace", v2 ? 0 : 3, 0,
              hfr_int(c, c->root, "num_hidden_layers", f->def.layers));
    hfr_put_word(c, "model.moe_every", "1", f->model_type, "moe_layer_freq 1");
}

static void ds_fill(hf_reader *c, const hf_family *f) {
    static const char *const words[][2] = {
        {"model.pos", "rope"}, {"model.norm", "rmsnorm"}, {"model.mlp", "swiglu"},
        {"model.bias", "false"}, {"model.qkv_bias", "false"}};
    char from[96];
    refusals(c);
    for (size_t i = 0; i < sizeof words / sizeof words[0] && !c->rc; i++)
        hfr_put_word(c, words[i][0], words[i][1], f->model_type, words[i][1]);
    if (!c->rc) put_sizes(c, f);
    if (!c->rc) put_rope(c, f);
    if (!c->rc) put_moe(c, f);
    if (!c->rc && !is_v2(f))
        put_count(c, "model.num_nextn_predict_layers", "num_nextn_predict_layers", 0, 0, 16);
    hfr_put_bool(c, "model.tie_embeddings", "tie_word_embeddings", 0);
    snprintf(from, sizeof from, "model_type \"%s\" (%s)", f->model_type, f->model_type);
    hfr_put(c, 1, "model.hf_model_type", f->model_type, from); /* what an export writes */
}

/* config.json against the run's model m: every key the fill gives must be m's. */
static void ds_check(hf_reader *c, const tsr_model *m, const hf_family *f) {
    tsr_config_fill *fl = tsr_calloc(1, sizeof *fl);
    hf_reader r = *c;
    r.fill = fl;
    ds_fill(&r, f);
    if (!c->rc) c->rc = r.rc;
    hf_fill_check(c, m, fl, NULL);
    free(fl);
}

/* ---- the rows -------------------------------------------------------------------------------- */

static const hf_family_ops ds_ops = {ds_write, ds_check, ds_fill, ds_table, ds_moe_need};

/* defaults: vocab, hidden, MLP width, layers, heads, key/value heads, head_dim (none: MLA's),
 * sliding_window, rope_theta, rms_norm_eps (DeepseekV3Config, DeepseekV2Config) */
#define DS_ROW .ops = &ds_ops, .names = &hf_llama_names, .prefix = "model.", .rope = 1, \
               .need = ds_need, .moe = 1, .mlp = TSR_MLP_SWIGLU, .head_dim_key = 1, .mla = 1, \
               .fp8 = 1
const hf_family hf_deepseek_v3 = {"deepseek_v3", "DeepseekV3ForCausalLM", DS_ROW,
                                  .claims = v3_claims,
                                  .def = {129280, 7168, 18432, 61, 128, 128, 0, 0, 10000, 1e-6}};
const hf_family hf_kimi_k2 = {"kimi_k2", "DeepseekV3ForCausalLM", DS_ROW,
                              .def = {163840, 7168, 18432, 61, 64, 64, 0, 0, 50000, 1e-6}};
const hf_family hf_deepseek_v2 = {"deepseek_v2", "DeepseekV2ForCausalLM", DS_ROW,
                                  .claims = v2_claims,
                                  .def = {102400, 4096, 11008, 30, 32, 32, 0, 0, 10000, 1e-6}};
#undef DS_ROW
