/* hf_olmo.c — Olmo2ForCausalLM and Olmo3ForCausalLM (docs/hf.md "The families of issue 67"):
 * norms after the attention and the MLP (post_attention_layernorm, post_feedforward_layernorm),
 * QK-norm over the whole projections; OLMo 3 adds sliding windows (every 4th layer full). The
 * rest is LlamaConfig's (hf_llama.c).
 */
#include "hf/hf_llama.h"

static int olmo2_claims(const tsr_model *m, const char **by) {
    *by = "model.norm_placement = \"post\"";
    return m->cfg.norm_placement == TSR_NPLACE_POST;
}

static int olmo3_claims(const tsr_model *m, const char **by) {
    return olmo2_claims(m, by) && hf_has_window(&m->cfg);
}

/* config.json keys of Olmo3Config tessera cannot represent yet (docs/models.md "Families (issue
 * 67)"): when tessera gains the key, its row becomes a mapping. */
static const hf_unmapped olmo3_unmapped[] = {
    {"rope_scaling", "Olmo 3 scales the full-attention layers' RoPE only; tessera's scaling "
     "applies to every layer"},
    {NULL, NULL},
};

/* defaults: vocab, hidden, MLP width, layers, heads, key/value heads, head_dim, sliding_window,
 * rope_theta, rms_norm_eps (Olmo2Config, Olmo3Config) */
const hf_family hf_olmo2 = {
    "olmo2", "Olmo2ForCausalLM", HF_LLAMA_ROW, .claims = olmo2_claims,
    .mlp = TSR_MLP_SWIGLU, .place = TSR_NPLACE_POST, .qk_norm = 1, .scope = TSR_QKN_PROJECTION,
    .variant_keys = 1, .bias = HF_BIAS_ATTN, .window = HF_SW_SWITCH,
    .def = {50304, 4096, 11008, 32, 32, 0, 0, 4096, 10000, 1e-6}, .keys = hf_variants_write};
const hf_family hf_olmo3 = {
    "olmo3", "Olmo3ForCausalLM", HF_LLAMA_ROW, .claims = olmo3_claims,
    .mlp = TSR_MLP_SWIGLU, .place = TSR_NPLACE_POST, .qk_norm = 1, .scope = TSR_QKN_PROJECTION,
    .windows = 1, .period = 4, .variant_keys = 1, .bias = HF_BIAS_ATTN, .window = HF_SW_SWITCH,
    .def = {50304, 4096, 11008, 32, 32, 0, 0, 4096, 10000, 1e-6}, .unmapped = olmo3_unmapped,
    .keys = hf_variants_write};
