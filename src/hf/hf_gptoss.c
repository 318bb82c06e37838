/* hf_gptoss.c — GptOssForCausalLM (model_type gpt_oss, docs/hf.md "gpt-oss"): its row, its
 * config.json keys beyond LlamaConfig's (the attention's biases, sinks, every other layer
 * sliding, YaRN, the clamped unit, the router's and experts' biases), and its router and experts
 * in Hugging Face's layout, bf16/fp32 or MXFP4 (hf_gptoss.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "hf/hf_gptoss.h"
#include "hf/hf_llama.h"
#include "hf/mxfp4.h"

/* ---- the row ---- */

/* A mixture with one of gpt-oss's own keys, or sinks (*by: which). */
static int gptoss_claims(const tsr_model *m, const char **by) {
    const tsr_model_config *c = &m->cfg;
    *by = config_moe_variant_key(c) ? config_moe_variant_key(c) : "model.attn_sinks";
    return m->E && (config_moe_variant_key(c) || c->attn_sinks);
}

/* GptOssConfig's keys beyond LlamaConfig's (attention_bias before them: hf_llama.c): the
 * windows, the unit's clamp (swiglu_alpha stays transformers' fixed 1.702); the experts' keys
 * follow (hf_moe.c). */
static void gptoss_keys(hf_text *b, const tsr_model *m, const hf_family *f) {
    char v[32];
    hfr_add(b, "  \"sliding_window\": %ld,\n",
            m->cfg.sliding_window > 0 ? (long)m->cfg.sliding_window : f->def.window);
    hf_layer_types_write(b, m);
    hfr_add(b, "  \"swiglu_limit\": %s,\n", hfr_double(v, sizeof v, m->cfg.swiglu_limit));
}

/* gpt-oss's clamped unit: swiglu_limit = model.swiglu_limit; swiglu_alpha (transformers 5) must
 * be the 1.702 tessera's unit has. */
static void check_unit(hf_reader *c, const tsr_model *m) {
    hfr_same_num(c, "swiglu_limit", hfr_num(c, c->root, "swiglu_limit", 7.0), "model.swiglu_limit",
                 m->cfg.swiglu_limit);
    double alpha = hfr_num(c, c->root, "swiglu_alpha", 1.702);
    if (alpha != 1.702)
        hfr_fault(c, TSR_EXIT_DATA, "swiglu_alpha = %g: tessera's gpt-oss unit has the fixed 1.702 "
                  "of transformers' GptOssExperts", alpha);
}

/* GptOssForCausalLM's router and experts (docs/moe.md "gpt-oss's experts"). */
static void fill_unit(hf_reader *c, const hf_family *f) {
    const char *mt = f->model_type;
    hfr_put_word(c, "model.moe_router_bias", "true", mt, "a router bias");
    hfr_put_word(c, "model.moe_expert_bias", "true", mt, "expert biases");
    hfr_put_word(c, "model.moe_act", "gptoss", mt, "the clamped unit");
    hfr_put_num(c, "model.swiglu_limit", c->root, "swiglu_limit", 7.0);
    hfr_put_word(c, "model.attn_sinks", "true", mt, "a sink logit per head");
}

/* MixtralConfig's form of the experts' keys, gpt-oss's defaults, its own keys and needs */
static const hf_moe_keys gptoss_moe = {"num_local_experts", "intermediate_size", 128, 4, 2880,
                                       .check = check_unit, .fill = fill_unit,
                                       .need = hf_gptoss_need};

/* defaults: vocab, hidden, MLP width, layers, heads, key/value heads, head_dim, sliding_window,
 * rope_theta, rms_norm_eps (GptOssConfig) */
const hf_family hf_gptoss = {
    "gpt_oss", "GptOssForCausalLM", HF_LLAMA_ROW, .claims = gptoss_claims, .moe = 1,
    .mlp = TSR_MLP_SWIGLU, .head_dim_key = 1, .windows = 1, .period = 2, .gptoss = 1,
    .variant_keys = 1, .bias = HF_BIAS_GPTOSS, .window = HF_SW_SWITCH, .mxfp4 = 1,
    .experts = &gptoss_moe, .def = {201088, 2880, 2880, 36, 64, 8, 64, 128, 150000, 1e-5},
    .keys = gptoss_keys};

/* ---- the layout ---- */

/* A MoE layer's tensors in GptOssMLP's state-dict order (router, then GptOssExperts' own
 * parameters). experts: the block is E per-expert blocks (rows, cols) permuted as below. */
static const struct oss_row {
    tsr_param_id p;
    const char *name;
    int experts, transpose, interleave;
} oss_rows[] = {
    {TSR_P_ROUTERW, "mlp.router.weight", 0, 0, 0},
    {TSR_P_ROUTERB, "mlp.router.bias", 0, 0, 0},
    {TSR_P_EXPW1, "mlp.experts.gate_up_proj", 1, 1, 1},
    {TSR_P_EXPB1, "mlp.experts.gate_up_proj_bias", 1, 0, 1},
    {TSR_P_EXPW2, "mlp.experts.down_proj", 1, 1, 0},
    {TSR_P_EXPB2, "mlp.experts.down_proj_bias", 0, 0, 0},
};

/* One row of layer l: tessera's block (the layer's slice of the stack) and its HF shape. */
static void oss_add(const tsr_model *m, const struct oss_row *r, int l, hf_tensor *h) {
    const tsr_param_info *pi = &m->params_info[r->p];
    const int slot = model_layer_slot(m, r->p, l), nd = pi->ndim - 1;
    const int64_t *d = pi->shape + 1; /* the block's dimensions */
    size_t block = pi->numel / (size_t)pi->shape[0];
    snprintf(h->name, sizeof h->name, "model.layers.%d.%s", l, r->name);
    h->present = 1;
    h->numel = block;
    h->offset = pi->offset + (size_t)slot * block;
    h->ndim = nd;
    for (int k = 0; k < nd; k++) h->shape[k] = d[k];
    h->rows = nd >= 2 ? d[nd - 2] : d[0];
    h->cols = nd >= 2 ? d[nd - 1] : 1;
    if (!r->experts) return;
    h->experts = d[0];
    h->rows = d[1];
    h->cols = nd == 3 ? d[2] : 1;
    h->transpose = r->transpose;
    h->interleave = r->interleave;
    if (r->transpose) h->shape[1] = h->cols, h->shape[2] = h->rows;
}

void hf_gptoss_moe_rows(const tsr_model *m, int l, hf_tensor *t, int *k) {
    for (size_t j = 0; j < sizeof oss_rows / sizeof oss_rows[0]; j++) {
        const tsr_param_info *pi = &m->params_info[oss_rows[j].p];
        if (pi->numel && model_layer_slot(m, oss_rows[j].p, l) >= 0)
            oss_add(m, &oss_rows[j], l, &t[(*k)++]);
    }
}

void hf_gptoss_mxfp4_form(hf_tensor *t, int n) {
    for (int k = 0; k < n; k++)
        if (t[k].experts && t[k].ndim == 3) { /* gate_up_proj, down_proj */
            t[k].mxfp4 = 1;
            t[k].transpose = 0;
            t[k].shape[1] = t[k].rows;
            t[k].shape[2] = t[k].cols;
        }
}

size_t hf_gptoss_hf_index(const hf_tensor *t, size_t i) {
    const size_t R = (size_t)t->rows, Cc = (size_t)t->cols, per = R * Cc;
    size_t e = i / per, w = i % per, r = w / Cc, c = w % Cc;
    if (t->interleave) r = r < R / 2 ? 2 * r : 2 * (r - R / 2) + 1; /* gate even, up odd */
    return e * per + (t->transpose ? c * R + r : r * Cc + c);
}

uint64_t hf_gptoss_src_index(const void *ctx, uint64_t k) {
    const hf_tensor *t = ctx;
    const uint64_t R = (uint64_t)t->rows, Cc = (uint64_t)t->cols, per = R * Cc;
    uint64_t e = k / per, w = k % per, r = t->transpose ? w % R : w / Cc;
    uint64_t c = t->transpose ? w / R : w % Cc;
    if (t->interleave) r = r % 2 ? R / 2 + r / 2 : r / 2;
    return e * per + r * Cc + c;
}

const char *hf_gptoss_need(const tsr_model *m) {
    const tsr_model_config *c = &m->cfg;
    if (!m->E) return "model.moe_experts > 0 (every layer a mixture of experts)";
    if (m->S) return "model.moe_shared_size = 0 (it has no shared expert)";
    if (c->moe_every != 1 || !c->moe_norm_topk)
        return "model.moe_every = 1 and model.moe_norm_topk = true (experts in every layer, a "
               "softmax over the chosen logits)";
    if (!c->moe_router_bias || !c->moe_expert_bias || c->moe_act != TSR_MOE_ACT_GPTOSS)
        return "model.moe_router_bias = true, model.moe_expert_bias = true and model.moe_act = "
               "\"gptoss\" (its router and experts)";
    if (!c->attn_sinks) return "model.attn_sinks = true (a sink logit per head)";
    if (c->qk_norm || (c->qkv_bias && !c->bias && !c->attn_bias))
        return "model.qk_norm = false and no model.qkv_bias without model.bias or model.attn_bias "
               "(attention_bias puts biases on q, k, v and o together)";
    if (c->rope_scaling != TSR_ROPE_SCALING_NONE && c->rope_scaling != TSR_ROPE_SCALING_YARN)
        return "model.rope_scaling = \"yarn\" or \"none\"";
    return NULL;
}

int hf_gptoss_mxfp4_check(const st_file *fb, const st_entry *b, const st_entry *s, const hf_tensor *t) {
    char why[256] = "";
    int64_t rows = 0, groups = 0;
    int bad = b->dtype != ST_U8 || s->dtype != ST_U8;
    if (!bad && mxfp4_shapes(b->shape, b->ndim, s->shape, s->ndim, &rows, &groups, why, sizeof why))
        bad = 1;
    else if (!bad)
        bad = b->ndim != 4 || b->shape[0] != t->shape[0] || b->shape[1] != t->shape[1] ||
              groups * MXFP4_BLOCK != t->shape[2];
    if (!bad) return 0;
    tsr_error("%s: tensors \"%s\" (%s, %d dimensions) and \"%s\" (%s): the model of config.json "
              "needs U8 [%lld, %lld, %lld, 16] and U8 [%lld, %lld, %lld], MXFP4 of %s [%lld, %lld, "
              "%lld]%s%s", fb->path, b->name, st_dtype_name(b->dtype), b->ndim, s->name,
              st_dtype_name(s->dtype), (long long)t->shape[0], (long long)t->shape[1],
              (long long)(t->shape[2] / MXFP4_BLOCK), (long long)t->shape[0], (long long)t->shape[1],
              (long long)(t->shape[2] / MXFP4_BLOCK), t->name, (long long)t->shape[0],
              (long long)t->shape[1], (long long)t->shape[2], why[0] ? ": " : "", why);
    return TSR_EXIT_DATA;
}

int hf_gptoss_mxfp4_read(const st_file *fb, const st_entry *b, const st_file *fs,
                         const st_entry *s, const hf_tensor *t, float *x) {
    size_t nb = (size_t)(b->end - b->begin), ns = (size_t)(s->end - s->begin);
    uint8_t *blocks = tsr_malloc(nb ? nb : 1), *scales = tsr_malloc(ns ? ns : 1);
    int rc = st_read_raw(fb, b, blocks);
    if (!rc) rc = st_read_raw(fs, s, scales);
    char why[256];
    int64_t rows = t->shape[0] * t->shape[1], groups = t->shape[2] / MXFP4_BLOCK;
    if (!rc && mxfp4_to_f32(blocks, nb, scales, ns, rows, groups, x, t->numel, why, sizeof why)) {
        tsr_error("%s: tensor \"%s\": %s", fb->path, b->name, why);
        rc = TSR_EXIT_DATA;
    }
    free(blocks);
    free(scales);
    return rc;
}
