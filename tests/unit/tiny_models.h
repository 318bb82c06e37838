/* tiny_models.h — the small model configurations the C unit tests build (header-only, like tap.h):
 * the documented defaults at a test's sizes, and the blocks of the families on top of them. */
#ifndef TSR_TINY_MODELS_H
#define TSR_TINY_MODELS_H

#include <stdio.h>

#include "config/config_table.h"

/* n_layer layers of d_model channels in n_head heads over vocab ids, padded to a multiple of
 * `multiple`; the keys a test does not set keep their documented defaults (cfgtab_defaults) */
static inline tsr_model_config tiny_model(int n_layer, int d_model, int n_head, int vocab, int multiple) {
    tsr_config d;
    cfgtab_defaults(&d);
    tsr_model_config c = d.model;
    c.n_layer = n_layer, c.d_model = d_model, c.n_head = n_head;
    c.vocab_size = vocab, c.vocab_multiple = multiple;
    return c;
}

/* c as a Llama/Qwen block: RoPE, RMSNorm, a SwiGLU of width 48, 2 KV heads, QK-norm, no biases,
 * an untied LM head */
static inline tsr_model_config tiny_llama(tsr_model_config c) {
    c.n_kv_head = 2, c.pos = TSR_POS_ROPE, c.norm = TSR_NORM_RMSNORM, c.mlp = TSR_MLP_SWIGLU;
    c.intermediate_size = 48, c.bias = 0, c.tie_embeddings = 0, c.qk_norm = 1;
    return c;
}

/* c with the layers `types` names (model.layer_types) and Qwen3-Next's linear attention for the
 * linear_attention ones: 2 key heads of 8 and 4 value heads of 6, a convolution of width 4 */
static inline tsr_model_config tiny_linear_layers(tsr_model_config c, const char *types) {
    snprintf(c.layer_types, sizeof c.layer_types, "%s", types);
    c.linear_num_key_heads = 2, c.linear_num_value_heads = 4;
    c.linear_key_head_dim = 8, c.linear_value_head_dim = 6, c.linear_conv_kernel_dim = 4;
    return c;
}

#endif
