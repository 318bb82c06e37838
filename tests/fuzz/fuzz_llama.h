/* fuzz_llama.h — the tiny Llama the model-reading harnesses build (fuzz_hfdir.c, fuzz_peft.c) and
 * test_untrusted_files.c's PEFT checks repeat (header-only): L 1, d_model 8, 2 heads of 4, 1
 * key/value head, a SwiGLU of 8, a vocabulary of 16, RoPE, RMSNorm, no biases, an untied head. */
#ifndef TSR_FUZZ_LLAMA_H
#define TSR_FUZZ_LLAMA_H

#include "config/config_table.h"

/* cfg = the documented defaults with the tiny Llama as its model */
static inline void fuzz_tiny_llama(tsr_config *cfg) {
    cfgtab_defaults(cfg);
    tsr_model_config *c = &cfg->model;
    c->n_layer = 1, c->d_model = 8, c->n_head = 2, c->n_kv_head = 1, c->head_dim = 4;
    c->intermediate_size = 8, c->vocab_size = 16, c->vocab_multiple = 8, c->max_seq_len = 16;
    c->pos = TSR_POS_ROPE, c->norm = TSR_NORM_RMSNORM, c->mlp = TSR_MLP_SWIGLU, c->bias = 0;
    c->norm_eps = 1e-6, c->rope_theta = 10000, c->tie_embeddings = 0;
}

#endif
