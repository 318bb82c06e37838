/* hf_smollm3.c — SmolLM3ForCausalLM (docs/hf.md "The families of issue 67"): Llama's layers
 * with NoPE layers (no_rope_layers: every 4th layer turns without RoPE by default), biases as
 * Llama's, a tied head. The rest is LlamaConfig's (hf_llama.c).
 */
#include "hf/hf_llama.h"

static int smollm3_claims(const tsr_model *m, const char **by) {
    *by = "model.no_rope_layers";
    return m->cfg.no_rope_layers[0] && !m->cfg.qk_norm;
}

/* SmolLM3Config's no_rope_layers, one entry per layer (1: RoPE), and no window. */
static void smollm3_keys(hf_text *b, const tsr_model *m, const hf_family *f) {
    (void)f;
    hfr_add(b, "  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n"
            "  \"no_rope_layers\": [");
    for (int l = 0; l < m->L; l++) hfr_add(b, "%s%d", l ? ", " : "", config_layer_rope(&m->cfg, l));
    hfr_add(b, "],\n");
}

/* defaults: vocab, hidden, MLP width, layers, heads, key/value heads, head_dim, sliding_window,
 * rope_theta, rms_norm_eps (SmolLM3Config) */
const hf_family hf_smollm3 = {
    "smollm3", "SmolLM3ForCausalLM", HF_LLAMA_ROW, .claims = smollm3_claims,
    .mlp = TSR_MLP_SWIGLU, .nope = 1, .tied = 1, .variant_keys = 1, .bias = HF_BIAS_LLAMA,
    .window = HF_SW_SWITCH, .def = {128256, 2048, 11008, 36, 16, 4, 0, 4096, 10000, 1e-6},
    .keys = smollm3_keys};
