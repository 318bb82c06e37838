/* hf_family.h — a transformers class as a row (issue 80): one row per model_type holds what
 * tessera knows of the class: its names, the decoder variants it fixes, transformers' defaults,
 * whether a model's features name it for an export, and its family's code: config.json written,
 * checked and read into a run's model.* keys, the tensor table, what a model needs to be it.
 *
 * Each family's rows and code are a file of their own: hf_gpt2.c (GPT-2, MPT), hf_llama.c (Llama,
 * Mistral, Qwen 2, Qwen 3, and LlamaConfig's keys the Llama family shares), hf_moe.c (Mixtral,
 * Qwen3-MoE), hf_olmo.c, hf_gemma.c, hf_smollm3.c, hf_gptoss.c, hf_qwen3next.c (Qwen3-Next and
 * Qwen 3.5), hf_deepseek.c (DeepSeek V2 and V3, Kimi K2); hf_families.c lists the rows and makes the export's choice; hf_config.c drives
 * config.json through a row; hf_reader.h is the one reader of config.json they all use. What the
 * Llama family's classes share (LlamaConfig's keys, RoPE, the issue-67 variants, the tensor table)
 * is read from the row's data, so that a class of that family is mostly data: docs/hf.md "How to
 * add a family".
 */
#ifndef TSR_HF_FAMILY_H
#define TSR_HF_FAMILY_H

#include <stddef.h>

#include "hf/hf_internal.h"
#include "hf/hf_reader.h"
#include "model/model.h"

/* A family's code (its file's), shared by its rows. */
typedef struct hf_family_ops {
    /* config.json's keys of m as class f, after "model_type" (hf_config_write writes the rest) */
    void (*write)(hf_text *b, const tsr_model *m, const hf_family *f);
    /* config.json (c->root) against the run's model m: faults through c */
    void (*check)(hf_reader *c, const tsr_model *m, const hf_family *f);
    /* config.json (c->root) as the run's model.* keys (c->fill) */
    void (*fill)(hf_reader *c, const hf_family *f);
    /* the HF tensors of m as class f (malloc'd; *n entries); row 0 is wte */
    hf_tensor *(*table)(const tsr_model *m, const hf_family *f, int *n);
    /* what m's mixture lacks for class f (NULL: f holds it); RoPE classes only */
    const char *(*moe_need)(const tsr_model *m, const hf_family *f);
} hf_family_ops;

/* How a family names the tensors of its files and its sizes in config.json (the import's checks). */
typedef struct hf_names {
    const char *layer;    /* a layer's tensors, after the prefix: "layers.%ld.%n" */
    const char *embed;    /* the token embedding, after the prefix */
    const char *up;       /* layer 0's MLP input projection, after the prefix (NULL: not checked) */
    int up_dim;           /* the dimension of its shape that is the MLP width */
    const char *keys[4];  /* config.json's layer count, width, vocabulary, MLP width (NULL: none) */
    const char *context;  /* config.json's context: max_position_embeddings, n_positions, ... */
    int head_row;         /* an untied lm_head.weight is a row of the table (else always tied) */
    /* a non-parameter buffer a file may hold (a causal mask, RoPE's inv_freq): not imported */
    int (*buffer)(const hf_family *f, const char *name);
} hf_names;

/* Which biases config.json's attention_bias (and mlp_bias) put on a Llama-family class. */
typedef enum {
    HF_BIAS_NONE = 0, /* none: attention_bias = true is refused (its module has no biases) */
    HF_BIAS_QKV,      /* on q, k and v, always (Qwen2Config has no attention_bias) */
    HF_BIAS_ATTN,     /* attention_bias on q, k, v and o: model.attn_bias (Qwen 3, OLMo, Gemma) */
    HF_BIAS_LLAMA,    /* attention_bias (q, k, v, o) and mlp_bias: both model.bias, attention_bias
                       * alone model.attn_bias */
    HF_BIAS_GPTOSS,   /* attention_bias (q, k, v, o; no dense MLP to hold others): model.bias */
} hf_bias;

/* How a Llama-family class reads sliding_window besides layer_types (tessera attends to the whole
 * context: a window is accepted only when no shorter than it). */
typedef enum {
    HF_SW_NONE = 0, /* not at all (LlamaConfig) */
    HF_SW_SWITCH,   /* when use_sliding_window is true (Qwen2Config and most) */
    HF_SW_ALWAYS,   /* always (MistralConfig, MixtralConfig) */
} hf_window;

/* A Llama-family class's mixture-of-experts keys (hf_moe.c, hf_gptoss.c). */
typedef struct hf_moe_keys {
    const char *experts;  /* "num_local_experts" or "num_experts" */
    const char *width;    /* the experts' width: "intermediate_size" or "moe_intermediate_size" */
    long experts_def, top_k_def, width_def; /* transformers' defaults */
    int qwen;             /* norm_topk_prob, decoder_sparse_step, mlp_only_layers (Qwen3MoeConfig);
                           * else experts in every layer with renormalised top-k weights */
    int jitter;           /* router_jitter_noise is written (MixtralConfig's, 0) */
    int block_sparse;     /* the tensors are block_sparse_moe.gate and .experts.N.w1, w2, w3
                           * (Mixtral's modules), else mlp.gate and mlp.experts.N.*_proj */
    int width_only;       /* intermediate_size is the experts' only: model.intermediate_size is not
                           * filled from it (Mixtral) */
    /* the class's own keys beyond these (gpt-oss's unit, router and expert biases), or NULL */
    void (*check)(hf_reader *c, const tsr_model *m);
    void (*fill)(hf_reader *c, const hf_family *f);
    /* what m lacks for the class's mixture instead of the rule above (gpt-oss), or NULL */
    const char *(*need)(const tsr_model *m);
} hf_moe_keys;

/* A key of config.json tessera cannot represent yet: refused (exit 2) unless null or absent. */
typedef struct hf_unmapped {
    const char *key, *why;
} hf_unmapped;

/* transformers' defaults of a Llama-family class's config (LlamaConfig, Qwen3Config, ...). */
typedef struct hf_defaults {
    long vocab, hidden, inter, layers, heads, kv; /* kv 0: = heads */
    long head_dim;        /* 0: hidden / heads */
    long window;          /* sliding_window when absent (Mixtral: 0, none) */
    double theta, eps;    /* rope_theta, rms_norm_eps */
} hf_defaults;

struct hf_family {
    const char *model_type;   /* config.json's: "llama" */
    const char *class_name;   /* transformers': "LlamaForCausalLM" */
    const hf_family_ops *ops; /* its family's code */
    const hf_names *names;
    const char *prefix;       /* of the decoder's tensor names: "model.", "transformer." */
    const char *nest;         /* config.json's member holding the text model's keys, or NULL */
    int rope;                 /* a RoPE class (the Llama family): --arch and model.hf_model_type
                               * name it; GPT-2 and MPT follow from model.pos */
    int moe;                  /* routed experts (Mixtral, Qwen3-MoE, gpt-oss, the hybrids') */
    /* an export's choice: whether m's features name this class (*by: the feature, "" for none);
     * asked in hf_families.c's order; NULL: only --arch or model.hf_model_type name it */
    int (*claims)(const tsr_model *m, const char **by);
    /* what m's attention lacks for the class (its biases, QK-norm; NULL: nothing) */
    const char *(*need)(const tsr_model *m, const hf_family *f);

    /* The decoder variants the class fixes (docs/models.md "Families (issue 67)"): */
    tsr_norm_placement place;   /* pre (Llama), post (OLMo 2/3), sandwich (Gemma 3) */
    int qk_norm;                /* q_norm / k_norm tensors */
    tsr_qk_norm_scope scope;    /* per head (Qwen 3, Gemma 3) or the projection (OLMo 2/3) */
    tsr_mlp_kind mlp;           /* swiglu, or geglu_tanh (Gemma's gelu_pytorch_tanh) */
    tsr_embed_scale embed;      /* the embedding times sqrt(d_model) (Gemma) */
    int windows;                /* config.json's layer_types / sliding_window are read */
    int qpas;                   /* config.json's query_pre_attn_scalar is read */
    int head_dim_key;           /* config.json has head_dim (else hidden_size / heads) */
    float norm_add;             /* tessera's norm weight = the HF one + this (Gemma's 1 + w) */
    int period;                 /* layer_types absent: every period-th layer is full (else sliding) */
    int softcap;                /* attn_logit_softcapping, final_logit_softcapping are read */
    double cap_attn, cap_final; /* their defaults when absent (Gemma2Config: 50, 30; else null) */
    int local_theta;            /* rope_local_base_freq is read (Gemma 3's sliding layers' base) */
    int rope_linear;            /* rope_scaling of type "linear" is read */
    int nope;                   /* no_rope_layers (or no_rope_layer_interval) is read (SmolLM3) */
    int tied;                   /* tie_word_embeddings' default (GPT-2, MPT, Gemma, SmolLM3: true) */
    int hybrid;                 /* linear_attention layers, the attention output gate, partial
                                 * rotary and the shared expert's gate (hf_qwen3next.c) */
    int gptoss;                 /* gpt-oss: sinks, YaRN, router and expert biases, the clamped unit */
    int mla;                    /* DeepSeek: MLA, YaRN with mscales, DeepSeekMoE's router, MTP
                                 * (hf_deepseek.c) */
    int variant_keys;           /* the variants are filled as the run's keys (the issue-67 classes;
                                 * the older ones leave them to the check) */

    /* How the Llama family's shared code reads the class's config.json (hf_llama.c): */
    hf_bias bias;
    hf_window window;
    int mxfp4;                       /* quantization_config's "mxfp4" experts are read (gpt-oss) */
    int fp8;                         /* its "fp8" block-scaled weights are read (DeepSeek: fp8block.h) */
    const hf_moe_keys *experts;      /* its mixture's keys, or NULL (a dense class) */
    hf_defaults def;
    const hf_unmapped *unmapped;     /* keys refused unless null ({NULL}-ended), or NULL */
    /* its keys after LlamaConfig's common ones (hf_llama.c's write), or NULL */
    void (*keys)(hf_text *b, const tsr_model *m, const hf_family *f);

    const void *own;                 /* the family file's own data of the row (hf_hybrid) */
};

/* ---- the rows (each in its family's file) and the list (hf_families.c) ---- */

extern const hf_family hf_gpt2, hf_mpt;                                  /* hf_gpt2.c */
extern const hf_family hf_llama, hf_mistral, hf_qwen2, hf_qwen3;         /* hf_llama.c */
extern const hf_family hf_mixtral, hf_qwen3_moe;                         /* hf_moe.c */
extern const hf_family hf_olmo2, hf_olmo3;                               /* hf_olmo.c */
extern const hf_family hf_gemma3, hf_gemma2;                             /* hf_gemma.c */
extern const hf_family hf_smollm3;                                       /* hf_smollm3.c */
extern const hf_family hf_gptoss;                                        /* hf_gptoss.c */
extern const hf_family hf_qwen3next, hf_qwen35, hf_qwen35_text, hf_qwen35_moe,
    hf_qwen35_moe_text;                                                  /* hf_qwen3next.c */
extern const hf_family hf_deepseek_v3, hf_deepseek_v2, hf_kimi_k2;      /* hf_deepseek.c */

/* Every row, NULL-ended, in the order messages list them. */
extern const hf_family *const hf_families[];

/* The row whose model_type is s, or NULL. */
const hf_family *hf_family_named(const char *s);
/* The model_types of the rows (rope: the RoPE classes only), quoted ("\"llama\"") or not,
 * joined by ", " and the last by last (" and ", ", ") into buf. */
void hf_family_list(char *buf, size_t cap, int rope, int quoted, const char *last);

/* The export's choice (hf_families.c): which class m exports to: learned positions -> GPT-2,
 * ALiBi -> MPT (hf_gpt2.c), RoPE -> the first row that claims m (deepseek_v2, deepseek_v3,
 * gemma3_text, gemma2, olmo3,
 * olmo2, qwen3_next, gpt_oss, qwen3_moe, mixtral, smollm3, qwen3, qwen2, llama), or want (NULL:
 * choose; model.hf_model_type's when m has one) when it can hold m: its needs, and a place in its
 * tensor table for every tensor of m (so that no key a class lacks is dropped unsaid). 0, or
 * TSR_EXIT_USAGE with the reason in why. */
int hf_family_for(const tsr_model *m, const hf_family *want, const hf_family **f, char *why,
                  size_t cap);
/* config.json's experts (r: its object) against the run's: a dense class refuses a run with
 * experts, a MoE class's keys (its f->experts) must be the run's (hf_moe.c). */
void hf_moe_check(hf_reader *c, const json_value *r, const tsr_model *m, const hf_family *f);
/* The export's choice between GPT-2 and MPT (model.pos other than "rope"; hf_gpt2.c): 0 with *f,
 * or TSR_EXIT_USAGE with the reason in why (want: a RoPE class named, which m cannot be). */
int hf_gpt2_choose(const tsr_model *m, const hf_family *want, const hf_family **f, char *why,
                   size_t cap);
/* What the mixture of m lacks for class f (NULL: f can hold it): experts for a MoE class, none for
 * a dense one, no shared expert, and for Mixtral experts in every layer with renormalised top-k
 * weights. The export's choice and the import's check both ask it. */
const char *hf_moe_need(const tsr_model *m, const hf_family *f);

#endif
