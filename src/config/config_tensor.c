/* config_tensor.c — parallel.tensor against the model and the other keys (config.h
 * config_tensor_split, config_tensor_pair; docs/parallelism.md "Tensor parallelism"): what a split
 * over T ranks needs of the model's sizes, and the modes tensor parallelism does not run with
 * yet, each with the keys that name it.
 */
#include <stdio.h>

#include "common.h"
#include "config/config.h"

/* the padded vocabulary (model.vocab_multiple's rounding) */
static long long padded_vocab(const tsr_model_config *m) {
    const long long mult = m->vocab_multiple > 0 ? m->vocab_multiple : 1;
    return ((long long)m->vocab_size + mult - 1) / mult * mult;
}

/* some layer has a dense MLP (not every layer a mixture of experts) */
static int dense_mlp(const tsr_model_config *m, const tsr_model_dims *d) {
    return d->LM < m->n_layer;
}

int config_tensor_split(const tsr_config *cfg, int T, const char **key, char *why, size_t n) {
    const tsr_model_config *m = &cfg->model;
    tsr_model_dims d;
    char dwhy[400];
    if (T <= 1 || config_model_dims(m, &d, key, dwhy, sizeof dwhy) != 0) return 0;
    const int linear = config_linear_layers(m) > 0, N = cfg->context > 1 ? (int)cfg->context : 1;
    const struct { int bad; const char *key, *what; long long v; } rules[] = {
        {d.NH % T != 0, "model.n_head", "query heads", d.NH},
        {d.KVH % T != 0 && T % d.KVH != 0, "model.n_kv_head",
         "key/value heads (a multiple of them is a multiple of T, or they divide T: replicated)",
         d.KVH},
        {dense_mlp(m, &d) && d.F % T != 0, "model.intermediate_size", "MLP width", d.F},
        {padded_vocab(m) % T != 0, "model.vocab_multiple",
         "padded vocabulary (model.vocab_size rounded up to model.vocab_multiple)",
         padded_vocab(m)},
        {cfg->sequence && (cfg->seq_len / N) % T != 0, "seq_len",
         N > 1 ? "positions of a sequence's share of a rank (seq_len / parallel.context; "
                 "parallel.sequence splits them over the group)"
               : "positions of a sequence (parallel.sequence splits the tokens over the group)",
         (long long)cfg->seq_len / N},
        {d.E > 0 && d.FE % T != 0, "model.moe_intermediate_size", "experts' width", d.FE},
        {d.S % T != 0, "model.moe_shared_size", "shared expert's width", d.S},
        {linear && m->linear_num_key_heads % T != 0, "model.linear_num_key_heads",
         "linear_attention key heads", m->linear_num_key_heads},
        {linear && m->linear_num_value_heads % T != 0, "model.linear_num_value_heads",
         "linear_attention value heads", m->linear_num_value_heads},
    };
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++)
        if (rules[k].bad) {
            *key = rules[k].key;
            snprintf(why, n, "the %s, %s = %lld, do not split over parallel.tensor = %d ranks",
                     rules[k].what, rules[k].key, rules[k].v, T);
            return -1;
        }
    return 0;
}

int config_tensor_valid(const tsr_config *cfg, char *list, size_t n) {
    const char *key;
    char why[400];
    int found = 0, at = 0;
    list[0] = '\0';
    for (int T = 1; T <= 256; T++) {
        if (config_tensor_split(cfg, T, &key, why, sizeof why) != 0) continue;
        const int w = snprintf(list + at, at < (int)n ? n - (size_t)at : 0, "%s%d",
                               found ? ", " : "", T);
        if (w > 0 && at + w < (int)n) at += w;
        found++;
    }
    return found;
}

/* LoRA on a linear_attention layer's projections (in_proj_qkvz, in_proj_ba, out_proj): their
 * adapters' split (B's rows over the q, k, v channels and z of the rank's heads) is not built */
static int lora_linear(const tsr_config *cfg) {
    unsigned mask = 0;
    char why[400];
    const unsigned linear = 1u << TSR_LORA_QKVZ | 1u << TSR_LORA_BA | 1u << TSR_LORA_OUTPROJ;
    return cfg->lora.rank > 0 &&
           config_lora_targets(&cfg->model, cfg->lora.targets, &mask, why, sizeof why) == 0 &&
           (mask & linear) != 0;
}

const char *config_tensor_pair(const tsr_config *cfg, const char **value) {
    const tsr_model_config *m = &cfg->model;
    const tsr_cfg_pair pairs[] = {
        {lora_linear(cfg), "lora.targets",
         "naming in_proj_qkvz, in_proj_ba or out_proj (a linear_attention layer's)"},
        {m->kv_lora_rank > 0, "model.kv_lora_rank", "> 0 (multi-head latent attention)"},
    };
    return cfg->tensor > 1 ? config_first_pair(pairs, sizeof pairs / sizeof pairs[0], value) : NULL;
}

/* the key/value heads (model.n_kv_head; 0: one per query head) */
static int kv_heads(const tsr_model_config *m) { return m->n_kv_head > 0 ? m->n_kv_head : m->n_head; }

const char *config_tensor_cuda_pair(const tsr_config *cfg, const char **value) {
    const tsr_model_config *m = &cfg->model;
    const tsr_cfg_pair pairs[] = {
        {cfg->sharding != TSR_SHARD_DDP, "parallel.sharding", "other than \"ddp\""},
        {cfg->context > 1, "parallel.context", "> 1"},
        {cfg->pipeline > 1, "parallel.pipeline", "> 1"},
        {m->moe_experts > 0, "model.moe_experts", "> 0 (a mixture of experts)"},
        {config_linear_layers(m) > 0, "model.layer_types", "naming linear_attention layers"},
        {cfg->lora.rank > 0, "lora.rank", "> 0"},
        {cfg->objective != TSR_OBJ_LM, "objective", "other than \"lm\""},
        {cfg->optim.name == TSR_OPTIM_MUON, "optim.name", "= \"muon\""},
        {cfg->precision.fp8 != TSR_FP8_NONE, "precision.fp8", "other than \"none\""},
        {m->activation_compression != TSR_ACTCOMP_NONE, "model.activation_compression",
         "other than \"none\""},
        {m->activation_checkpointing != TSR_ACTCKPT_NONE, "model.activation_checkpointing",
         "other than \"none\""},
        {m->pos != TSR_POS_ROPE, "model.pos", "other than \"rope\" (learned positions, ALiBi)"},
        {m->final_logit_softcapping > 0, "model.final_logit_softcapping", "> 0"},
        {m->qk_norm && m->qk_norm_scope == TSR_QKN_PROJECTION, "model.qk_norm_scope",
         "= \"projection\""},
        {kv_heads(m) < cfg->tensor, "model.n_kv_head",
         "below parallel.tensor (key/value heads replicated over the group)"},
    };
    return cfg->tensor > 1 && cfg->device == TSR_DEVICE_CUDA
               ? config_first_pair(pairs, sizeof pairs / sizeof pairs[0], value)
               : NULL;
}
