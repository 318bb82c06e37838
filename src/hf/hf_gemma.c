/* hf_gemma.c — Gemma3ForCausalLM (model_type gemma3_text) and Gemma2ForCausalLM (docs/hf.md "The
 * families of issue 67"): sandwich norms of (1 + w), the embedding times sqrt(hidden_size),
 * query_pre_attn_scalar, GeGLU with the tanh GELU, sliding windows, soft caps, linear RoPE
 * scaling; Gemma 3 adds QK-norm per head and its own RoPE base on the sliding layers; Gemma 2 has
 * its soft caps on by default and every other layer sliding. The rest is LlamaConfig's
 * (hf_llama.c).
 */
#include "hf/hf_llama.h"

/* Gemma's features: sandwich norms, GeGLU or the scaled embedding (*by: the first set). */
static int gemma2_claims(const tsr_model *m, const char **by) {
    const tsr_model_config *c = &m->cfg;
    *by = c->norm_placement == TSR_NPLACE_SANDWICH ? "model.norm_placement = \"sandwich\""
          : c->mlp == TSR_MLP_GEGLU_TANH ? "model.mlp = \"geglu_tanh\""
          : "model.embed_scale = \"sqrt_d_model\"";
    return c->norm_placement == TSR_NPLACE_SANDWICH || c->mlp == TSR_MLP_GEGLU_TANH ||
           c->embed_scale;
}

static int gemma3_claims(const tsr_model *m, const char **by) {
    return gemma2_claims(m, by) && m->cfg.qk_norm;
}

/* defaults: vocab, hidden, MLP width, layers, heads, key/value heads, head_dim, sliding_window,
 * rope_theta, rms_norm_eps (Gemma3TextConfig, Gemma2Config) */
const hf_family hf_gemma3 = {
    "gemma3_text", "Gemma3ForCausalLM", HF_LLAMA_ROW, .claims = gemma3_claims,
    .place = TSR_NPLACE_SANDWICH, .qk_norm = 1, .mlp = TSR_MLP_GEGLU_TANH,
    .embed = TSR_EMB_SCALE_SQRT_D, .windows = 1, .qpas = 1, .head_dim_key = 1, .norm_add = 1.0f,
    .period = 6, .softcap = 1, .local_theta = 1, .rope_linear = 1, .tied = 1, .variant_keys = 1,
    .bias = HF_BIAS_ATTN, .window = HF_SW_SWITCH,
    .def = {262208, 2304, 9216, 26, 8, 4, 256, 4096, 10000, 1e-6}, .keys = hf_variants_write};
const hf_family hf_gemma2 = {
    "gemma2", "Gemma2ForCausalLM", HF_LLAMA_ROW, .claims = gemma2_claims,
    .place = TSR_NPLACE_SANDWICH, .mlp = TSR_MLP_GEGLU_TANH, .embed = TSR_EMB_SCALE_SQRT_D,
    .windows = 1, .qpas = 1, .head_dim_key = 1, .norm_add = 1.0f, .period = 2, .softcap = 1,
    .cap_attn = 50, .cap_final = 30, .rope_linear = 1, .tied = 1, .variant_keys = 1,
    .bias = HF_BIAS_ATTN, .window = HF_SW_SWITCH,
    .def = {256000, 2304, 9216, 26, 8, 4, 256, 4096, 10000, 1e-6}, .keys = hf_variants_write};
