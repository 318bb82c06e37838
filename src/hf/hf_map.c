/* hf_map.c — tessera's parameters <-> the tensor names of transformers' GPT2LMHeadModel,
 * MptForCausalLM, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
 * MixtralForCausalLM and Qwen3MoeForCausalLM, the issue-67 classes; Qwen3NextForCausalLM's table
 * is hf_qwen3next.c's (its fused projections interleave tessera's tensors: hf_tensor.groups).
 *
 * tessera stacks per-layer tensors (qkvw (L, QKV, C)) and stores every weight as nn.Linear does,
 * (out, in): y = x W^T. transformers' GPT-2 uses Conv1D, (in, out): y = x W, so its weights are the
 * transposes; MPT and the Llama family use nn.Linear, same layout as tessera. GPT-2 and MPT tie the
 * LM head to wte, so no lm_head.weight is written. wte (and an untied lm_head) is written with its
 * V real rows (not the Vp padded ones). The Llama family splits what tessera fuses: qkvw's rows are
 * [q_proj | k_proj | v_proj] (NH hs, KVH hs, KVH hs rows), fcw's [gate_proj | up_proj] (F, F), so
 * each HF tensor is still one contiguous block of tessera's buffer. HF's Llama checkpoints hold q
 * and k already in the rotate-half order tessera's RoPE uses: no permutation.
 * Mixtures of experts (docs/moe.md): a MoE layer's router is routerw[slot] (E, C); expert e's
 * gate / up projections are rows [0, FE) / [FE, 2FE) of expw1[slot, e] and its down projection
 * expw2[slot, e] (C, FE), each again one contiguous block. slot = model_layer_slot: the MoE layers
 * and the dense-MLP layers are stacked apart. GptOssForCausalLM's experts are one tensor per layer
 * for all E, permuted inside the block (transposed, gate/up interleaved): hf_gptoss.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "fsutil.h"
#include "hf/hf_gptoss.h"
#include "hf/hf_internal.h"
#include "hf/hf_qwen3next.h"

const char *const hf_model_type[HF_ARCH_COUNT] = {"gpt2", "mpt", "llama", "mistral", "qwen2",
                                                   "qwen3", "mixtral", "qwen3_moe", "olmo2",
                                                   "olmo3", "gemma3_text", "gemma2", "smollm3",
                                                   "qwen3_next", "gpt_oss", "qwen3_5_text",
                                                   "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe"};
const char *const hf_class_name[HF_ARCH_COUNT] = {
    "GPT2LMHeadModel",  "MptForCausalLM",   "LlamaForCausalLM",   "MistralForCausalLM",
    "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MixtralForCausalLM", "Qwen3MoeForCausalLM",
    "Olmo2ForCausalLM", "Olmo3ForCausalLM", "Gemma3ForCausalLM", "Gemma2ForCausalLM",
    "SmolLM3ForCausalLM", "Qwen3NextForCausalLM", "GptOssForCausalLM", "Qwen3_5ForCausalLM",
    "Qwen3_5MoeForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"};

/* Olmo2ForCausalLM: post norms, QK-norm over the projections; Olmo3ForCausalLM: and layer_types
 * with sliding windows; Gemma3ForCausalLM: sandwich norms of (1 + w), QK-norm per head, the
 * scaled embedding, query_pre_attn_scalar, GeGLU with the tanh GELU, sliding windows, its own
 * RoPE base on the sliding layers, linear scaling on the full ones, optional soft caps;
 * Gemma2ForCausalLM: Gemma 3 without QK-norm and local base, its soft caps on by default, every
 * other layer sliding; SmolLM3ForCausalLM: Llama's with NoPE layers (no_rope_layers). */
#define SWIGLU .mlp = TSR_MLP_SWIGLU
#define HYBRID {SWIGLU, .qk_norm = 1, .head_dim_key = 1, .norm_add = 1.0f, .hybrid = 1}
static const hf_family families[HF_ARCH_COUNT] = {
    [HF_LLAMA] = {SWIGLU, .head_dim_key = 1, .llama_bias = 1},   [HF_MISTRAL] = {SWIGLU, .head_dim_key = 1},
    [HF_QWEN2] = {SWIGLU, .head_dim_key = 1},   [HF_QWEN3] = {SWIGLU, .qk_norm = 1, .head_dim_key = 1},
    [HF_MIXTRAL] = {SWIGLU, .head_dim_key = 1}, [HF_QWEN3_MOE] = {SWIGLU, .qk_norm = 1, .head_dim_key = 1},
    [HF_OLMO2] = {SWIGLU, .place = TSR_NPLACE_POST, .qk_norm = 1, .scope = TSR_QKN_PROJECTION},
    [HF_OLMO3] = {SWIGLU, .place = TSR_NPLACE_POST, .qk_norm = 1, .scope = TSR_QKN_PROJECTION,
                  .windows = 1, .period = 4},
    [HF_GEMMA3] = {.place = TSR_NPLACE_SANDWICH, .qk_norm = 1, .mlp = TSR_MLP_GEGLU_TANH,
                   .embed = TSR_EMB_SCALE_SQRT_D, .windows = 1, .qpas = 1, .head_dim_key = 1,
                   .norm_add = 1.0f, .period = 6, .softcap = 1, .local_theta = 1, .rope_linear = 1,
                   .tied = 1},
    [HF_GEMMA2] = {.place = TSR_NPLACE_SANDWICH, .mlp = TSR_MLP_GEGLU_TANH,
                   .embed = TSR_EMB_SCALE_SQRT_D, .windows = 1, .qpas = 1, .head_dim_key = 1,
                   .norm_add = 1.0f, .period = 2, .softcap = 1, .cap_attn = 50, .cap_final = 30,
                   .rope_linear = 1, .tied = 1},
    [HF_SMOLLM3] = {SWIGLU, .nope = 1, .llama_bias = 1, .tied = 1},
    [HF_QWEN3NEXT] = HYBRID, [HF_QWEN35] = HYBRID, [HF_QWEN35_MOE] = HYBRID, [HF_QWEN35_VL] = HYBRID,
    [HF_QWEN35_MOE_VL] = HYBRID, /* Qwen 3.5: Qwen3-Next's layers (hf_qwen3next.c's hf_hybrid) */
    /* GptOssForCausalLM: sinks, every other layer sliding, YaRN, its experts (hf_gptoss.h) */
    [HF_GPTOSS] = {SWIGLU, .head_dim_key = 1, .windows = 1, .period = 2, .gptoss = 1},
};
#undef SWIGLU
#undef HYBRID

const hf_family *hf_family_of(hf_arch a) { return &families[a]; }

int hf_arch_moe(hf_arch a) {
    return a == HF_MIXTRAL || a == HF_QWEN3_MOE || a == HF_QWEN3NEXT || a == HF_GPTOSS ||
           a == HF_QWEN35_MOE || a == HF_QWEN35_MOE_VL;
}
int hf_arch_qk_norm(hf_arch a) { return families[a].qk_norm; }

const char *hf_prefix(hf_arch a) {
    if (hf_hybrid_of(a)) return hf_hybrid_of(a)->prefix; /* Qwen 3.5's VL: model.language_model. */
    return a >= HF_LLAMA ? "model." : "transformer.";
}

hf_arch hf_arch_named(const char *s) {
    for (int a = 0; a < HF_ARCH_COUNT; a++)
        if (!strcmp(s, hf_model_type[a])) return (hf_arch)a;
    return HF_ARCH_COUNT;
}

/* Per tessera parameter: HF names (after "transformer.", %d = layer; NULL = the architecture has
 * no such tensor), whether it is stacked per layer, whether GPT-2 holds its transpose. */
static const struct map_row {
    const char *gpt2, *mpt;
    int per_layer, transpose_gpt2;
} rows[] = {
    [TSR_P_WTE] = {"wte.weight", "wte.weight", 0, 0},
    [TSR_P_WPE] = {"wpe.weight", NULL, 0, 0},
    [TSR_P_LN1W] = {"h.%d.ln_1.weight", "blocks.%d.norm_1.weight", 1, 0},
    [TSR_P_LN1B] = {"h.%d.ln_1.bias", NULL, 1, 0},
    [TSR_P_QKVW] = {"h.%d.attn.c_attn.weight", "blocks.%d.attn.Wqkv.weight", 1, 1},
    [TSR_P_QKVB] = {"h.%d.attn.c_attn.bias", NULL, 1, 0},
    [TSR_P_ATTPROJW] = {"h.%d.attn.c_proj.weight", "blocks.%d.attn.out_proj.weight", 1, 1},
    [TSR_P_ATTPROJB] = {"h.%d.attn.c_proj.bias", NULL, 1, 0},
    [TSR_P_LN2W] = {"h.%d.ln_2.weight", "blocks.%d.norm_2.weight", 1, 0},
    [TSR_P_LN2B] = {"h.%d.ln_2.bias", NULL, 1, 0},
    [TSR_P_FCW] = {"h.%d.mlp.c_fc.weight", "blocks.%d.ffn.up_proj.weight", 1, 1},
    [TSR_P_FCB] = {"h.%d.mlp.c_fc.bias", NULL, 1, 0},
    [TSR_P_FCPROJW] = {"h.%d.mlp.c_proj.weight", "blocks.%d.ffn.down_proj.weight", 1, 1},
    [TSR_P_FCPROJB] = {"h.%d.mlp.c_proj.bias", NULL, 1, 0},
    [TSR_P_LNFW] = {"ln_f.weight", "norm_f.weight", 0, 0},
    [TSR_P_LNFB] = {"ln_f.bias", NULL, 0, 0},
    [TSR_P_QNORMW] = {NULL, NULL, 1, 0},
    [TSR_P_KNORMW] = {NULL, NULL, 1, 0},
    [TSR_P_LMHEAD] = {NULL, NULL, 0, 0},
};
_Static_assert(sizeof rows / sizeof rows[0] == TSR_P_COUNT, "one row per tessera parameter");

const char *hf_moe_need(const tsr_model *m, hf_arch a) {
    if (hf_hybrid_of(a)) return hf_qwen3next_moe_need(m, a);
    if (!hf_arch_moe(a))
        return m->E ? "model.moe_experts = 0 (a dense model; MixtralForCausalLM, "
                      "Qwen3MoeForCausalLM and GptOssForCausalLM hold mixtures of experts)" : NULL;
    if (a == HF_GPTOSS) return hf_gptoss_need(m);
    if (!m->E) return "model.moe_experts > 0 (a mixture of experts)";
    if (m->S) return "model.moe_shared_size = 0 (it has no shared expert)";
    if (a == HF_MIXTRAL && (m->cfg.moe_every != 1 || !m->cfg.moe_norm_topk))
        return "model.moe_every = 1 and model.moe_norm_topk = true (experts in every layer, the "
               "top-k weights renormalised)";
    return NULL;
}

static int has_window(const tsr_model_config *c) {
    for (int l = 0; l < c->n_layer; l++)
        if (config_layer_window(c, l) > 0) return 1;
    return 0;
}

/* The class m's features name when the caller names none; *by: the feature of an issue-67
 * class that chose it ("" for the others). */
static hf_arch llama_default_arch(const tsr_model *m, const char **by) {
    const tsr_model_config *c = &m->cfg;
    *by = c->norm_placement == TSR_NPLACE_SANDWICH ? "model.norm_placement = \"sandwich\""
          : c->mlp == TSR_MLP_GEGLU_TANH ? "model.mlp = \"geglu_tanh\""
          : c->embed_scale ? "model.embed_scale = \"sqrt_d_model\""
          : c->norm_placement == TSR_NPLACE_POST ? "model.norm_placement = \"post\"" : "";
    if (c->norm_placement == TSR_NPLACE_SANDWICH || c->mlp == TSR_MLP_GEGLU_TANH || c->embed_scale)
        return c->qk_norm ? HF_GEMMA3 : HF_GEMMA2;
    if (c->norm_placement == TSR_NPLACE_POST) return has_window(c) ? HF_OLMO3 : HF_OLMO2;
    if (config_linear_layers(c) > 0 || c->attn_output_gate || c->moe_shared_gate) {
        *by = config_linear_layers(c) > 0 ? "model.layer_types with linear_attention"
              : c->attn_output_gate ? "model.attn_output_gate" : "model.moe_shared_gate";
        return HF_QWEN3NEXT;
    }
    if (m->E && (config_moe_variant_key(c) || c->attn_sinks)) {
        *by = config_moe_variant_key(c) ? config_moe_variant_key(c) : "model.attn_sinks";
        return HF_GPTOSS;
    }
    if (m->E) return c->qk_norm ? HF_QWEN3_MOE : HF_MIXTRAL;
    if (c->no_rope_layers[0] && !c->qk_norm) {
        *by = "model.no_rope_layers";
        return HF_SMOLLM3;
    }
    return c->qk_norm ? HF_QWEN3 : c->qkv_bias && !c->bias ? HF_QWEN2 : HF_LLAMA;
}

static const char *const place_name[] = {"pre", "sandwich", "post"};
static const char *const scope_name[] = {"head", "projection"};
static const char *const mlp_name[] = {"gelu", "swiglu", "geglu_tanh"};

/* The first key of m's that class f does not hold (soft-capping and the RoPE variants but those
 * of f's row, gpt-oss's experts, linear attention layers, the attention output gate), or NULL */
static const char *unexported_key(const tsr_model_config *c, const hf_family *f) {
    const char *k = NULL;
    if (!f->softcap && c->attn_logit_softcapping > 0) k = "model.attn_logit_softcapping";
    else if (!f->softcap && c->final_logit_softcapping > 0) k = "model.final_logit_softcapping";
    else if ((c->rope_scaling == TSR_ROPE_SCALING_YARN && !f->gptoss) ||
             (c->rope_scaling == TSR_ROPE_SCALING_LINEAR && !f->rope_linear))
        k = "model.rope_scaling";
    else if (c->rope_local_theta > 0 && !f->local_theta) k = "model.rope_local_theta";
    else if (c->partial_rotary_factor != 1.0 && !f->hybrid) k = "model.partial_rotary_factor";
    else if (c->no_rope_layers[0] && !f->nope) k = "model.no_rope_layers";
    if (!k && !f->gptoss) k = config_moe_variant_key(c);
    if (k && f->hybrid && !strcmp(k, "model.moe_shared_gate")) k = NULL; /* Qwen3-Next's */
    if (!k && !f->hybrid && config_linear_layers(c) > 0) k = "model.layer_types";
    if (!k && !f->hybrid && c->attn_output_gate) k = "model.attn_output_gate";
    return k;
}

/* What class a's row of families needs of m's decoder variants, written into need (0: m has
 * them all). */
static int family_need(const tsr_model *m, hf_arch a, char *need, size_t cap) {
    const hf_family *f = &families[a];
    const tsr_model_config *c = &m->cfg;
    if (f->local_theta && c->rope_scaling != TSR_ROPE_SCALING_NONE && !c->rope_local_theta &&
        has_window(c))
        snprintf(need, cap, "model.rope_local_theta > 0 (its sliding layers turn without "
                 "rope_scaling, with rope_local_base_freq)");
    else if (c->norm_placement != f->place)
        snprintf(need, cap, "model.norm_placement = \"%s\"", place_name[f->place]);
    else if (c->mlp != f->mlp)
        snprintf(need, cap, "model.mlp = \"%s\"", mlp_name[f->mlp]);
    else if (c->embed_scale != f->embed)
        snprintf(need, cap, "model.embed_scale = \"%s\"", f->embed ? "sqrt_d_model" : "none");
    else if (c->qk_norm && f->qk_norm && c->qk_norm_scope != f->scope)
        snprintf(need, cap, "model.qk_norm_scope = \"%s\"", scope_name[f->scope]);
    else if (!f->windows && has_window(c))
        snprintf(need, cap, "no sliding window (model.layer_types, model.sliding_window)");
    else if (c->attn_sinks && !f->gptoss)
        snprintf(need, cap, "model.attn_sinks = false (GptOssForCausalLM's attention has sinks)");
    else if (!f->qpas && c->query_pre_attn_scalar > 0 && c->query_pre_attn_scalar != m->hs)
        snprintf(need, cap, "model.query_pre_attn_scalar = 0 (the head size)");
    else if (!f->head_dim_key && m->hs * m->NH != m->C)
        snprintf(need, cap, "model.head_dim = d_model / n_head (its config has no head_dim)");
    else
        return 0;
    return 1;
}

/* The Llama family: which of its classes can hold m (want, or the one its features name). */
static int llama_arch_of(const tsr_model *m, hf_arch want, hf_arch *a, char *why, size_t cap) {
    const tsr_model_config *c = &m->cfg;
    if (c->norm != TSR_NORM_RMSNORM || c->mlp == TSR_MLP_GELU) {
        snprintf(why, cap, "model.pos = \"rope\" exports to the Llama family (LlamaForCausalLM, "
                 "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, "
                 "Qwen3MoeForCausalLM, Olmo2ForCausalLM, Olmo3ForCausalLM, Gemma3ForCausalLM, "
                 "Gemma2ForCausalLM, SmolLM3ForCausalLM, GptOssForCausalLM), "
                 "which needs model.norm = \"rmsnorm\" and a gated MLP; this model has \"%s\" "
                 "and \"%s\"", c->norm == TSR_NORM_RMSNORM ? "rmsnorm" : "layernorm",
                 mlp_name[c->mlp]);
        return TSR_EXIT_USAGE;
    }
    int qkv_only = c->qkv_bias && !c->bias;
    const char *by = "";
    *a = want != HF_ARCH_COUNT ? want : llama_default_arch(m, &by);
    char fam[160];
    const char *need = unexported_key(&m->cfg, &families[*a]);
    if (need) { /* before the class's own needs: the key that keeps this class out */
        snprintf(fam, sizeof fam, "%s unset (the class does not hold it: docs/hf.md)", need);
        need = fam;
    } else switch (*a) {
    case HF_LLAMA: /* attention_bias (q, k, v, o) and mlp_bias = model.bias */
    case HF_SMOLLM3:
        if (c->qk_norm || qkv_only) need = "model.qk_norm = false and no model.qkv_bias without "
                                           "model.bias (q, k, v biases without an o_proj bias)";
        break;
    case HF_MISTRAL:
    case HF_MIXTRAL:
        if (c->qk_norm || c->bias || c->qkv_bias) need = "model.qk_norm, model.bias and "
                                                         "model.qkv_bias false (no biases)";
        break;
    case HF_QWEN2: /* q, k, v biases always, none elsewhere */
        if (c->qk_norm || !qkv_only) need = "model.qkv_bias = true, model.bias = false and "
                                            "model.qk_norm = false";
        break;
    case HF_QWEN3:
    case HF_QWEN3_MOE:
    case HF_OLMO2:
    case HF_OLMO3:
    case HF_GEMMA3:
        if (!c->qk_norm || c->bias || c->qkv_bias) need = "model.qk_norm = true, model.bias and "
                                                          "model.qkv_bias false";
        break;
    case HF_GEMMA2:
        if (c->qk_norm || c->bias || c->qkv_bias) need = "model.qk_norm, model.bias and "
                                                         "model.qkv_bias false";
        break;
    case HF_QWEN3NEXT:
    case HF_QWEN35:
    case HF_QWEN35_MOE:
    case HF_QWEN35_VL:
    case HF_QWEN35_MOE_VL:
        need = hf_qwen3next_need(m);
        break;
    case HF_GPTOSS: /* attention_bias = model.bias; the rest: hf_gptoss_need (hf_moe_need) */
        break;
    default:
        need = "model.pos other than \"rope\"";
    }
    if (!need && family_need(m, *a, fam, sizeof fam)) need = fam;
    if (!need) need = hf_moe_need(m, *a);
    if (!need) return 0;
    snprintf(why, cap, "%s%s%s (model_type \"%s\")%s needs %s", by, by[0] ? " exports as " : "",
             hf_class_name[*a], hf_model_type[*a], by[0] ? ", which" : "", need);
    return TSR_EXIT_USAGE;
}

int hf_arch_of(const tsr_model *m, hf_arch want, hf_arch *a, char *why, size_t cap) {
    if (want == HF_ARCH_COUNT && m->cfg.hf_model_type[0]) { /* an import's class (docs/hf.md) */
        want = hf_arch_named(m->cfg.hf_model_type);
        if (want == HF_ARCH_COUNT || want < HF_LLAMA) {
            snprintf(why, cap, "model.hf_model_type = \"%s\" is no model_type of the Llama "
                     "family tessera exports", m->cfg.hf_model_type);
            return TSR_EXIT_USAGE;
        }
    }
    if (m->cfg.pos == TSR_POS_ROPE) return llama_arch_of(m, want, a, why, cap);
    const char *variant = config_attn_variant_key(&m->cfg);
    if (variant) { /* GPT-2 and MPT have none of the variants */
        snprintf(why, cap, "this model sets %s, which GPT2LMHeadModel and MptForCausalLM do not "
                 "have (the classes that do need model.pos = \"rope\"; docs/models.md)", variant);
        return TSR_EXIT_USAGE;
    }
    const tsr_model_config *c = &m->cfg;
    if (want != HF_ARCH_COUNT && want < HF_LLAMA) want = HF_ARCH_COUNT; /* the one below anyway */
    if (want != HF_ARCH_COUNT)
        snprintf(why, cap, "%s needs model.pos = \"rope\", this model has \"%s\"",
                 hf_class_name[want], c->pos == TSR_POS_ALIBI ? "alibi" : "learned");
    else if (c->norm != TSR_NORM_LAYERNORM || c->mlp != TSR_MLP_GELU || m->KVH != m->NH ||
             c->qk_norm || c->qkv_bias || !c->tie_embeddings || m->hs * m->NH != m->C || m->E)
        snprintf(why, cap, "GPT2LMHeadModel and MptForCausalLM have LayerNorm, a GELU MLP, as many "
                 "key/value heads as heads of size d_model / n_head, no QK-norm, no qkv_bias, "
                 "no experts and a tied head; this model differs (the Llama family needs "
                 "model.pos = \"rope\")");
    else if (c->pos == TSR_POS_LEARNED) { /* GPT-2: any GELU, any MLP width (n_inner); no biases
                                             are written as zeros, which computes the same */
        *a = HF_GPT2;
        return 0;
    } else if (c->bias)
        snprintf(why, cap, "model.pos = \"alibi\" exports as MptForCausalLM, which has no biases, "
                 "but this model has model.bias = true (transformers has no ALiBi model with biases)");
    else if (c->gelu != TSR_GELU_EXACT)
        snprintf(why, cap, "model.pos = \"alibi\" exports as MptForCausalLM, whose MLP uses the exact "
                 "GELU, but this model has model.gelu = \"tanh\"");
    else if (m->F != 4 * m->C)
        snprintf(why, cap, "model.pos = \"alibi\" exports as MptForCausalLM, whose MLP is 4 x d_model "
                 "= %d wide, but this model's is %d (model.expansion_ratio = %g)", 4 * m->C, m->F,
                 c->expansion_ratio);
    else {
        *a = HF_MPT;
        return 0;
    }
    return TSR_EXIT_USAGE;
}

static hf_tensor *gpt2_table(const tsr_model *m, hf_arch a, int *n) {
    int cap = TSR_P_COUNT * (m->L + 1), k = 0;
    hf_tensor *t = tsr_calloc((size_t)cap, sizeof *t);
    for (int p = 0; p < TSR_P_COUNT; p++) {
        const struct map_row *r = &rows[p];
        const char *fmt = a == HF_GPT2 ? r->gpt2 : r->mpt;
        const tsr_param_info *pi = &m->params_info[p];
        if (!fmt || (p == TSR_P_WPE && !pi->numel)) continue;
        int layers = r->per_layer ? m->L : 1, tr = a == HF_GPT2 && r->transpose_gpt2;
        /* the block: one layer's slice of a stacked tensor, or the whole tensor */
        int ndim = r->per_layer ? pi->ndim - 1 : pi->ndim;
        int64_t d0 = r->per_layer ? pi->shape[1] : pi->shape[0];
        int64_t d1 = ndim == 2 ? (r->per_layer ? pi->shape[2] : pi->shape[1]) : 1;
        if (p == TSR_P_WTE) d0 = m->V; /* the real vocabulary only */
        size_t numel = (size_t)d0 * (size_t)d1;
        for (int l = 0; l < layers; l++, k++) {
            hf_tensor *h = &t[k];
            char suffix[64];
            snprintf(suffix, sizeof suffix, fmt, l);
            snprintf(h->name, sizeof h->name, "transformer.%s", suffix);
            h->ndim = ndim;
            h->shape[0] = tr ? d1 : d0;
            h->shape[1] = tr ? d0 : d1;
            h->present = pi->numel > 0;
            h->numel = numel;
            h->offset = pi->offset + (size_t)l * numel;
            h->transpose = tr;
            h->rows = d0;
            h->cols = d1;
        }
    }
    *n = k;
    return t;
}

/* The Llama family, in the order of transformers' state dict (module order: what a sharded save
 * follows). part: which rows of the tessera block the tensor is. */
typedef enum {
    PART_ALL = 0, PART_Q, PART_K, PART_V, PART_GATE, PART_UP, PART_EGATE, PART_EUP, PART_VOCAB
} part_kind;
typedef struct llama_row {
    tsr_param_id p;
    const char *fmt; /* after "model.layers.%d."; %d = the expert for expert tensors */
    part_kind part;
} llama_row;
#define NROWS(a) ((int)(sizeof(a) / sizeof((a)[0])))
static const llama_row llama_global_first[] = {{TSR_P_WTE, "model.embed_tokens.weight", PART_VOCAB}},
  llama_attn[] = {
    {TSR_P_SINKS, "self_attn.sinks", PART_ALL}, /* gpt-oss: the module's own parameter first */
    {TSR_P_QKVW, "self_attn.q_proj.weight", PART_Q},     {TSR_P_QKVB, "self_attn.q_proj.bias", PART_Q},
    {TSR_P_QKVW, "self_attn.k_proj.weight", PART_K},     {TSR_P_QKVB, "self_attn.k_proj.bias", PART_K},
    {TSR_P_QKVW, "self_attn.v_proj.weight", PART_V},     {TSR_P_QKVB, "self_attn.v_proj.bias", PART_V},
    {TSR_P_ATTPROJW, "self_attn.o_proj.weight", PART_ALL},
    {TSR_P_ATTPROJB, "self_attn.o_proj.bias", PART_ALL},
    {TSR_P_QNORMW, "self_attn.q_norm.weight", PART_ALL}, {TSR_P_KNORMW, "self_attn.k_norm.weight", PART_ALL},
  },
  llama_mlp[] = { /* a dense-MLP layer */
    {TSR_P_FCW, "mlp.gate_proj.weight", PART_GATE},      {TSR_P_FCB, "mlp.gate_proj.bias", PART_GATE},
    {TSR_P_FCW, "mlp.up_proj.weight", PART_UP},          {TSR_P_FCB, "mlp.up_proj.bias", PART_UP},
    {TSR_P_FCPROJW, "mlp.down_proj.weight", PART_ALL},   {TSR_P_FCPROJB, "mlp.down_proj.bias", PART_ALL},
  },
  llama_norms[] = {
    {TSR_P_LN1W, "input_layernorm.weight", PART_ALL},
    {TSR_P_LN2W, "post_attention_layernorm.weight", PART_ALL},
  },
  /* OLMo 2/3's post norms (no ln1w, ln2w) and Gemma 3's sandwich: HF's post_attention_layernorm
   * is the norm AFTER the attention there (postattnw), not Llama's MLP input norm (ln2w) */
  post_norms[] = {
    {TSR_P_POSTATTNW, "post_attention_layernorm.weight", PART_ALL},
    {TSR_P_POSTMLPW, "post_feedforward_layernorm.weight", PART_ALL},
  },
  sandwich_norms[] = {
    {TSR_P_LN1W, "input_layernorm.weight", PART_ALL},
    {TSR_P_POSTATTNW, "post_attention_layernorm.weight", PART_ALL},
    {TSR_P_LN2W, "pre_feedforward_layernorm.weight", PART_ALL},
    {TSR_P_POSTMLPW, "post_feedforward_layernorm.weight", PART_ALL},
  },
  /* a MoE layer: the router, then per expert (MixtralBlockSparseTop2MLP: w1 w2 w3; Qwen3MoeMLP:
   * gate_proj up_proj down_proj) */
  mixtral_router[] = {{TSR_P_ROUTERW, "block_sparse_moe.gate.weight", PART_ALL}},
  mixtral_expert[] = {
    {TSR_P_EXPW1, "block_sparse_moe.experts.%d.w1.weight", PART_EGATE},
    {TSR_P_EXPW2, "block_sparse_moe.experts.%d.w2.weight", PART_ALL},
    {TSR_P_EXPW1, "block_sparse_moe.experts.%d.w3.weight", PART_EUP},
  },
  qwen3_moe_router[] = {{TSR_P_ROUTERW, "mlp.gate.weight", PART_ALL}},
  qwen3_moe_expert[] = {
    {TSR_P_EXPW1, "mlp.experts.%d.gate_proj.weight", PART_EGATE},
    {TSR_P_EXPW1, "mlp.experts.%d.up_proj.weight", PART_EUP},
    {TSR_P_EXPW2, "mlp.experts.%d.down_proj.weight", PART_ALL},
  },
  llama_global_last[] = {{TSR_P_LNFW, "model.norm.weight", PART_ALL},
                         {TSR_P_LMHEAD, "lm_head.weight", PART_VOCAB}};

/* Rows [*r0, *r0 + *nr) of the block (one layer's or expert's slice, or the whole tensor) that
 * part is. */
static void part_rows(const tsr_model *m, part_kind part, int64_t nrows, int64_t *r0, int64_t *nr) {
    int64_t qd = m->QD, kv = (int64_t)m->KVH * m->hs;
    switch (part) {
    case PART_Q: *r0 = 0, *nr = qd; break;
    case PART_K: *r0 = qd, *nr = kv; break;
    case PART_V: *r0 = qd + kv, *nr = kv; break;
    case PART_GATE: *r0 = 0, *nr = m->F; break;
    case PART_UP: *r0 = m->F, *nr = m->F; break;
    case PART_EGATE: *r0 = 0, *nr = m->FE; break;
    case PART_EUP: *r0 = m->FE, *nr = m->FE; break;
    case PART_VOCAB: *r0 = 0, *nr = m->V; break;
    default: *r0 = 0, *nr = nrows;
    }
}

/* Appends row r of layer l (-1: a global tensor), expert e (-1: not an expert tensor) to t[*k]
 * when m has the tensor there; a norm's weight gets add (hf_family.norm_add). */
static void llama_add(const tsr_model *m, const llama_row *r, int l, int e, float add, hf_tensor *t,
                      int *k) {
    const tsr_param_info *pi = &m->params_info[r->p];
    int per = l >= 0, lead = per + (e >= 0), slot = per ? model_layer_slot(m, r->p, l) : 0;
    if (!pi->numel || slot < 0) return;
    int ndim = pi->ndim - lead;
    int64_t R = pi->shape[lead], cols = ndim == 2 ? pi->shape[lead + 1] : 1, r0, nr;
    size_t block = (size_t)(R * cols); /* one layer's slice, or one expert's of it */
    part_rows(m, r->part, R, &r0, &nr);
    hf_tensor *h = &t[(*k)++];
    char sub[64];
    snprintf(sub, sizeof sub, r->fmt, e);
    if (per) snprintf(h->name, sizeof h->name, "model.layers.%d.%s", l, sub);
    else snprintf(h->name, sizeof h->name, "%s", r->fmt);
    h->ndim = ndim;
    h->shape[0] = nr;
    h->shape[1] = cols;
    h->present = 1;
    h->numel = (size_t)nr * (size_t)cols;
    h->offset = pi->offset + ((size_t)slot * (size_t)(e >= 0 ? m->E : 1) + (size_t)(e >= 0 ? e : 0)) * block +
                (size_t)(r0 * cols);
    h->transpose = 0;
    h->rows = nr;
    h->cols = cols;
    h->add = pi->kind == TSR_PK_NORM ? add : 0.0f;
}

typedef struct row_set {
    const llama_row *r;
    int n;
} row_set;
#define ROWS(a) ((row_set){(a), NROWS(a)})

static void llama_add_rows(const tsr_model *m, row_set rs, int l, int e, float add, hf_tensor *t,
                           int *k) {
    for (int j = 0; j < rs.n; j++) llama_add(m, &rs.r[j], l, e, add, t, k);
}

static hf_tensor *llama_table(const tsr_model *m, hf_arch a, int *n) {
    const int mix = a == HF_MIXTRAL;
    const float add = families[a].norm_add;
    const row_set router = mix ? ROWS(mixtral_router) : ROWS(qwen3_moe_router);
    const row_set expert = mix ? ROWS(mixtral_expert) : ROWS(qwen3_moe_expert);
    const tsr_norm_placement pl = families[a].place;
    const row_set norms = pl == TSR_NPLACE_POST ? ROWS(post_norms)
                          : pl == TSR_NPLACE_SANDWICH ? ROWS(sandwich_norms) : ROWS(llama_norms);
    const int per_layer = NROWS(llama_attn) + NROWS(llama_mlp) + NROWS(sandwich_norms) +
                          NROWS(mixtral_router) + NROWS(mixtral_expert) * m->E + 6; /* gpt-oss */
    hf_tensor *t = tsr_calloc((size_t)per_layer * (size_t)m->L + 3, sizeof *t);
    int k = 0;
    llama_add_rows(m, ROWS(llama_global_first), -1, -1, add, t, &k);
    for (int l = 0; l < m->L; l++) {
        llama_add_rows(m, ROWS(llama_attn), l, -1, add, t, &k);
        llama_add_rows(m, ROWS(llama_mlp), l, -1, add, t, &k); /* none in a MoE layer */
        if (a == HF_GPTOSS) {
            hf_gptoss_moe_rows(m, l, t, &k);
        } else {
            llama_add_rows(m, router, l, -1, add, t, &k); /* none in a dense one */
            for (int e = 0; e < m->E; e++) llama_add_rows(m, expert, l, e, add, t, &k);
        }
        llama_add_rows(m, norms, l, -1, add, t, &k);
    }
    llama_add_rows(m, ROWS(llama_global_last), -1, -1, add, t, &k);
    *n = k;
    return t;
}

hf_tensor *hf_tensor_table(const tsr_model *m, hf_arch a, int *n) {
    if (hf_hybrid_of(a)) return hf_qwen3next_table(m, a, n);
    return a >= HF_LLAMA ? llama_table(m, a, n) : gpt2_table(m, a, n);
}

int hf_tensor_runs(const hf_tensor *t, int i, size_t *at, size_t *hf, size_t *len) {
    if (!t->groups) {
        if (i > 0) return 1;
        *at = t->offset, *hf = 0, *len = t->numel;
        return 0;
    }
    if (i >= t->groups * t->npieces) return t->groups * t->npieces;
    const int g = i / t->npieces, p = i % t->npieces;
    const size_t cols = (size_t)t->cols;
    int64_t before = 0, group = 0; /* rows of the pieces before p in a group; a group's rows */
    for (int q = 0; q < t->npieces; q++) group += t->piece[q].rows, before += q < p ? t->piece[q].rows : 0;
    *len = (size_t)t->piece[p].rows * cols;
    *at = t->piece[p].offset + (size_t)g * *len;
    *hf = ((size_t)g * (size_t)group + (size_t)before) * cols;
    return 0;
}

int hf_write_file(const char *path, const void *data, size_t n) {
    char tmp[4200];
    if (tsr_snprintf(tmp, sizeof tmp, "%s.tmp", path)) {
        tsr_error("%s: path too long", path);
        return TSR_EXIT_DATA;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int err = 0;
    if (fd < 0) {
        err = errno;
    } else {
        const char *p = data;
        size_t left = n;
        while (left > 0 && !err) {
            ssize_t k = write(fd, p, left);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) err = k < 0 ? errno : EIO;
            else p += k, left -= (size_t)k;
        }
        if (!err && fsync(fd) != 0) err = errno;
        if (close(fd) != 0 && !err) err = errno;
        if (!err && rename(tmp, path) != 0) err = errno;
    }
    if (err) {
        tsr_error("%s: cannot write it: %s", path, strerror(err));
        unlink(tmp);
        return TSR_EXIT_DATA;
    }
    return fs_sync_parent(path);
}

