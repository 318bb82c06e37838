/* hf_runkeys.c — a config.json's fill checked against the run's model (hf_runkeys.h). */
#include "hf/hf_runkeys.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "hf/hf_llama.h"

static const char *const scaling_word[] = {"none", "llama3", "linear", "yarn"};
static const char *const topk_word[] = {"greedy", "group_limited_greedy", "noaux_tc"};
_Static_assert(sizeof scaling_word / sizeof scaling_word[0] == TSR_ROPE_SCALING_COUNT,
               "scaling_word vs tsr_rope_scaling");
_Static_assert(sizeof topk_word / sizeof topk_word[0] == TSR_MOE_TOPK_COUNT,
               "topk_word vs tsr_moe_topk_kind");

/* The run's value of key, in the fill's format ("" when the table has no such key). */
void hf_run_value(const tsr_model *m, const char *key, char *v, size_t cap) {
    const tsr_model_config *c = &m->cfg;
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
        {"model.moe_every", c->moe_every}, {"model.kv_lora_rank", m->kvr},
        {"model.q_lora_rank", m->qr}, {"model.qk_nope_head_dim", c->qk_nope_head_dim},
        {"model.qk_rope_head_dim", c->qk_rope_head_dim}, {"model.v_head_dim", c->v_head_dim},
        {"model.rope_factor", c->rope_factor}, {"model.rope_original_max_pos", c->rope_original_max_pos},
        {"model.rope_beta_fast", c->rope_beta_fast}, {"model.rope_beta_slow", c->rope_beta_slow},
        {"model.rope_mscale", c->rope_mscale}, {"model.rope_mscale_all_dim", c->rope_mscale_all_dim},
        {"model.num_nextn_predict_layers", m->D}, {"model.moe_n_group", c->moe_n_group},
        {"model.moe_topk_group", c->moe_topk_group}, {"model.moe_routed_scaling", c->moe_routed_scaling},
        {"model.moe_dense_layers", c->moe_dense_layers}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        if (!strcmp(key, nums[i].key)) {
            hfr_double(v, cap, nums[i].x);
            return;
        }
    const struct { const char *key; const char *word; } words[] = {
        {"model.pos", c->pos == TSR_POS_ROPE ? "rope" : c->pos == TSR_POS_ALIBI ? "alibi" : "learned"},
        {"model.norm", c->norm == TSR_NORM_RMSNORM ? "rmsnorm" : "layernorm"},
        {"model.mlp", hf_mlp_word[c->mlp]}, {"model.bias", c->bias ? "true" : "false"},
        {"model.qkv_bias", c->qkv_bias ? "true" : "false"},
        {"model.qk_norm", c->qk_norm ? "true" : "false"},
        {"model.qk_norm_scope", c->qk_norm_scope == TSR_QKN_PROJECTION ? "projection" : "head"},
        {"model.norm_placement", hf_place_word[c->norm_placement]},
        {"model.embed_scale", c->embed_scale ? "sqrt_d_model" : "none"},
        {"model.rope_scaling", scaling_word[c->rope_scaling]},
        {"model.rope_interleave", c->rope_interleave ? "true" : "false"},
        {"model.rope_truncate", c->rope_truncate ? "true" : "false"},
        {"model.moe_scoring", c->moe_scoring == TSR_MOE_SCORE_SIGMOID ? "sigmoid" : "softmax"},
        {"model.moe_topk_method", topk_word[c->moe_topk_method]},
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

void hf_fill_check(hf_reader *c, const tsr_model *m, const tsr_config_fill *fl, const char *skip) {
    char run[64];
    for (int i = 0; i < fl->n && !c->rc; i++) {
        if (fl->kv[i].soft || (skip && !strcmp(fl->kv[i].key, skip))) continue;
        if (!strcmp(fl->kv[i].key, "model.intermediate_size") && m->E && !m->LD) continue;
        hf_run_value(m, fl->kv[i].key, run, sizeof run);
        if (same_value(fl->kv[i].value, run)) continue;
        hfr_fault(c, TSR_EXIT_USAGE, "%s, but this run has %s = %s: set --set %s=%s",
                  fl->kv[i].from + 16, fl->kv[i].key, run, fl->kv[i].key, fl->kv[i].value);
    }
}
