/* hf_moe.c — MixtralForCausalLM and Qwen3MoeForCausalLM (the rows), and the mixtures' keys of
 * the Llama family's config.json (hf_llama.h): MixtralConfig's form (num_local_experts, the
 * experts' width in intermediate_size, experts in every layer with renormalised top-k weights),
 * Qwen3MoeConfig's (num_experts, moe_intermediate_size, norm_topk_prob, decoder_sparse_step,
 * mlp_only_layers), gpt-oss's own keys through its row's hooks (hf_gptoss.c); written, checked
 * and read; what a model's mixture needs of a class. The router's jitter noise (training only)
 * is off, as in tessera. docs/moe.md.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "hf/hf_llama.h"

static const hf_moe_keys mixtral_keys = {"num_local_experts", "intermediate_size", 8, 2, 14336,
                                         .jitter = 1, .block_sparse = 1, .width_only = 1};
static const hf_moe_keys qwen3_moe_keys = {"num_experts", "moe_intermediate_size", 128, 8, 768,
                                           .qwen = 1};

static int mixtral_claims(const tsr_model *m, const char **by) {
    (void)by;
    return m->E > 0;
}

static int qwen3_moe_claims(const tsr_model *m, const char **by) {
    (void)by;
    return m->E > 0 && m->cfg.qk_norm;
}

/* defaults: vocab, hidden, MLP width, layers, heads, key/value heads, head_dim, sliding_window
 * (Mixtral's: none), rope_theta, rms_norm_eps (MixtralConfig, Qwen3MoeConfig) */
const hf_family hf_mixtral = {
    "mixtral", "MixtralForCausalLM", HF_LLAMA_ROW, .claims = mixtral_claims, .moe = 1,
    .mlp = TSR_MLP_SWIGLU, .head_dim_key = 1, .bias = HF_BIAS_NONE, .window = HF_SW_ALWAYS,
    .experts = &mixtral_keys, .def = {32000, 4096, 14336, 32, 32, 8, 0, 0, 10000, 1e-6},
    .keys = hf_mistral_keys};
const hf_family hf_qwen3_moe = {
    "qwen3_moe", "Qwen3MoeForCausalLM", HF_LLAMA_ROW, .claims = qwen3_moe_claims, .moe = 1,
    .mlp = TSR_MLP_SWIGLU, .qk_norm = 1, .head_dim_key = 1, .bias = HF_BIAS_ATTN,
    .window = HF_SW_SWITCH, .experts = &qwen3_moe_keys,
    .def = {151936, 2048, 6144, 24, 32, 4, 0, 4096, 10000, 1e-6}, .keys = hf_qwen_keys};

/* transformers' router_aux_loss_coef for tessera's coefficient coef (docs/moe.md): its
 * load_balancing_loss_func divides the counts by N, not N K (K times tessera's value), and pools the
 * LM layers into one loss (about their mean, where tessera sums them): coef x LM / K gives about
 * the same gradient. */
double hf_aux_coef(const tsr_model *m, double coef) { return coef * m->LM / m->K; }

const char *hf_moe_need(const tsr_model *m, const hf_family *f) {
    return f->ops->moe_need ? f->ops->moe_need(m, f) : NULL;
}

const char *hf_llama_moe_need(const tsr_model *m, const hf_family *f) {
    const hf_moe_keys *k = f->experts;
    if (!k)
        return m->E ? "model.moe_experts = 0 (a dense model; MixtralForCausalLM, "
                      "Qwen3MoeForCausalLM and GptOssForCausalLM hold mixtures of experts)" : NULL;
    if (k->need) return k->need(m);
    if (!m->E) return "model.moe_experts > 0 (a mixture of experts)";
    if (m->S) return "model.moe_shared_size = 0 (it has no shared expert)";
    if (!k->qwen && (m->cfg.moe_every != 1 || !m->cfg.moe_norm_topk))
        return "model.moe_every = 1 and model.moe_norm_topk = true (experts in every layer, the "
               "top-k weights renormalised)";
    return NULL;
}

/* ---- writing ---- */

void hf_moe_write(hf_text *b, const tsr_model *m, const hf_family *f) {
    const hf_moe_keys *k = f->experts;
    char coef[32];
    hfr_double(coef, sizeof coef, hf_aux_coef(m, m->cfg.moe_aux_loss_coef));
    if (!k->qwen)
        hfr_add(b, "  \"%s\": %d,\n  \"num_experts_per_tok\": %d,\n%s", k->experts, m->E, m->K,
                k->jitter ? "  \"router_jitter_noise\": 0.0,\n" : "");
    else
        hfr_add(b, "  \"%s\": %d,\n  \"num_experts_per_tok\": %d,\n  \"%s\": %d,\n"
                "  \"norm_topk_prob\": %s,\n  \"decoder_sparse_step\": %d,\n"
                "  \"mlp_only_layers\": [],\n", k->experts, m->E, m->K, k->width, m->FE,
                m->cfg.moe_norm_topk ? "true" : "false", m->cfg.moe_every);
    hfr_add(b, "  \"router_aux_loss_coef\": %s,\n  \"output_router_logits\": false,\n", coef);
}

/* ---- checking ---- */

/* Qwen3-MoE's sparse step, normalisation and dense layers against the run's. */
static void check_qwen(hf_reader *c, const json_value *r, const tsr_model_config *mc) {
    hfr_same(c, "decoder_sparse_step", hfr_int(c, r, "decoder_sparse_step", 1), "model.moe_every",
             mc->moe_every, "");
    hfr_same_bool(c, "norm_topk_prob", hfr_bool(c, r, "norm_topk_prob", 0), "model.moe_norm_topk",
                  mc->moe_norm_topk);
    const json_value *ml = hfr_member(r, "mlp_only_layers");
    if (ml && ml->type != JSON_NULL && (ml->type != JSON_ARRAY || ml->len))
        hfr_fault(c, TSR_EXIT_DATA, "mlp_only_layers is %s: tessera's MoE layers are every "
                  "decoder_sparse_step-th (model.moe_every) and cannot be made dense one by one; "
                  "only an empty list (or null) is accepted", ml->type == JSON_ARRAY ?
                  "not empty" : json_type_name(ml->type));
}

/* router_aux_loss_coef: a training choice, said to a run (c->notes), not refused. */
static void note_aux(hf_reader *c, const json_value *r, const tsr_model *m) {
    const tsr_model_config *mc = &m->cfg;
    double hf = hfr_num(c, r, "router_aux_loss_coef", 0.001);
    double run = hf_aux_coef(m, mc->moe_aux_loss_coef), back = hf * m->K / m->LM;
    char h[32], own[32], per[32], fix[32];
    if (c->notes && !c->rc && !(fabs(hf - run) <= 1e-6 * fabs(hf)))
        tsr_warn("%s: router_aux_loss_coef = %s is tessera's model.moe_aux_loss_coef x %d MoE "
                 "layers / top_k = %d (docs/moe.md), but this run has %s (which is %s there): it "
                 "trains with its own; --set model.moe_aux_loss_coef=%s trains with the model's",
                 c->path, hfr_double(h, sizeof h, hf), m->LM, m->K,
                 hfr_double(own, sizeof own, mc->moe_aux_loss_coef),
                 hfr_double(per, sizeof per, run), hfr_double(fix, sizeof fix, back));
}

void hf_moe_check(hf_reader *c, const json_value *r, const tsr_model *m, const hf_family *f) {
    const tsr_model_config *mc = &m->cfg;
    const hf_moe_keys *k = f->experts;
    long E = k ? hfr_int(c, r, k->experts, k->experts_def) : 0;
    if (!k || !m->E) {
        if ((k != NULL) != (m->E > 0))
            hfr_fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" %s, but this run has "
                      "model.moe_experts = %d: set --set model.moe_experts=%ld (and the other "
                      "model.moe_* keys of docs/hf.md)", f->model_type,
                      E ? "is a mixture of experts" : "has no experts", m->E, E);
        return;
    }
    hfr_same(c, k->experts, E, "model.moe_experts", m->E, "");
    hfr_same(c, "num_experts_per_tok", hfr_int(c, r, "num_experts_per_tok", k->top_k_def),
             "model.moe_top_k", m->K, "");
    hfr_same(c, k->width, hfr_int(c, r, k->width, k->width_def), "model.moe_intermediate_size",
             m->FE, mc->moe_intermediate_size ? "" : " (0 = the dense MLP width)");
    const char *need = hf_moe_need(m, f);
    if (need)
        hfr_fault(c, TSR_EXIT_USAGE, "%s cannot hold this run's experts: it needs %s (set those "
                  "keys with --set)", f->class_name, need);
    if (k->check) k->check(c, m);
    if (k->qwen) check_qwen(c, r, mc);
    note_aux(c, r, m);
}

/* ---- filling ---- */

void hf_moe_fill(hf_reader *c, const hf_family *f) {
    const hf_moe_keys *k = f->experts;
    const char *mt = f->model_type;
    hfr_put_int(c, 0, "model.moe_experts", k->experts, k->experts_def);
    hfr_put_int(c, 0, "model.moe_top_k", "num_experts_per_tok", k->top_k_def);
    hfr_put_int(c, 0, "model.moe_intermediate_size", k->width, k->width_def);
    if (k->fill) k->fill(c, f);
    hfr_put_word(c, "model.moe_shared_size", "0", mt, "no shared expert");
    if (!k->qwen) {
        hfr_put_word(c, "model.moe_every", "1", mt, "experts in every layer");
        hfr_put_word(c, "model.moe_norm_topk", "true", mt, "renormalised top-k weights");
    } else {
        hfr_put_int(c, 0, "model.moe_every", "decoder_sparse_step", 1);
        hfr_put_bool(c, "model.moe_norm_topk", "norm_topk_prob", 0);
    }
}
