/* hf_internal.h — what src/hf/'s files share: the architecture, the tensor table, config.json.
 *
 * Dimensions as in model.h: L layers, C d_model, NH heads, KVH key/value heads, hs head size,
 * QD = NH hs, F MLP width, V real vocabulary, Vp padded rows of wte, maxT rows of wpe; MoE: E
 * experts, FE expert width, LM MoE layers, LD = L - LM dense-MLP layers.
 */
#ifndef TSR_HF_INTERNAL_H
#define TSR_HF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* HF_LLAMA and after: the Llama family (RoPE, RMSNorm, SwiGLU, GQA), names under "model.";
 * HF_MIXTRAL and HF_QWEN3_MOE are its mixtures of experts (docs/moe.md); HF_OLMO2, HF_OLMO3 and
 * HF_GEMMA3 (Gemma3ForCausalLM, model_type gemma3_text), HF_GEMMA2 (Gemma2ForCausalLM) and
 * HF_SMOLLM3 (SmolLM3ForCausalLM) its variants of issue 67 (hf_family), HF_QWEN3NEXT
 * (Qwen3NextForCausalLM, hf_qwen3next.c) the hybrid of issue 68, HF_GPTOSS (GptOssForCausalLM,
 * model_type gpt_oss: hf_gptoss.h) issue 67's mixture of experts with sinks; HF_QWEN35
 * (Qwen3_5ForCausalLM, qwen3_5_text), HF_QWEN35_MOE (Qwen3_5MoeForCausalLM, qwen3_5_moe_text) and
 * their vision-language wrappers HF_QWEN35_VL (qwen3_5), HF_QWEN35_MOE_VL (qwen3_5_moe) Qwen 3.5's
 * layouts of Qwen3-Next's layers (hf_qwen3next.c's hf_hybrid rows). A new class goes
 * before HF_ARCH_COUNT with its row in hf_map.c's families, hf_model_type, hf_class_name and
 * hf_config.c's llama_def. */
typedef enum {
    HF_GPT2 = 0, HF_MPT, HF_LLAMA, HF_MISTRAL, HF_QWEN2, HF_QWEN3, HF_MIXTRAL, HF_QWEN3_MOE,
    HF_OLMO2, HF_OLMO3, HF_GEMMA3, HF_GEMMA2, HF_SMOLLM3, HF_QWEN3NEXT, HF_GPTOSS, HF_QWEN35, HF_QWEN35_MOE, HF_QWEN35_VL,
    HF_QWEN35_MOE_VL, HF_ARCH_COUNT
} hf_arch;

/* What a Llama-family model_type fixes of tessera's decoder variants (docs/models.md "Families
 * (issue 67)"): the row of every class, so that import and export compare a model with it. */
typedef struct hf_family {
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
    int llama_bias;             /* attention_bias + mlp_bias as LlamaConfig's (= model.bias) */
    int tied;                   /* tie_word_embeddings' default (Gemma, SmolLM3: true) */
    int hybrid;                 /* linear_attention layers, the attention output gate, partial
                                 * rotary and the shared expert's gate (Qwen3-Next: hf_qwen3next.c) */
    int gptoss;                 /* gpt-oss: sinks, YaRN, router and expert biases, the clamped unit */
} hf_family;
const hf_family *hf_family_of(hf_arch a);

extern const char *const hf_model_type[HF_ARCH_COUNT];   /* "gpt2", "mpt", "llama", ... */
extern const char *const hf_class_name[HF_ARCH_COUNT];   /* "GPT2LMHeadModel", ... */
/* The prefix of the names of the base model's tensors: "transformer." or "model.". */
const char *hf_prefix(hf_arch a);
/* The architecture whose model_type is s, or HF_ARCH_COUNT. */
hf_arch hf_arch_named(const char *s);
/* a has routed experts (Mixtral, Qwen3-MoE); a has Qwen 3's per-head q_norm / k_norm. */
int hf_arch_moe(hf_arch a);
/* What the mixture of m lacks for class a (NULL: a can hold it): experts for a MoE class, none for
 * a dense one, no shared expert, and for Mixtral experts in every layer with renormalised top-k
 * weights. The export's choice of class and the import's check both ask it. */
const char *hf_moe_need(const tsr_model *m, hf_arch a);
int hf_arch_qk_norm(hf_arch a);

/* One tensor of the HF model and the block of tessera's flat parameter buffer it maps to. */
typedef struct hf_tensor {
    char name[96];        /* full HF name, "transformer.h.3.attn.c_attn.weight" */
    int ndim;             /* 1, 2 or 3 (Qwen3-Next's conv1d (CD, 1, K), gpt-oss's experts) */
    int64_t shape[3];     /* HF shape */
    int present;          /* 0: tessera's model has no such tensor (the biases of a bias-free
                             GPT-2-style model): exported as zeros, imported only if all zero */
    size_t offset, numel; /* the block in m->params (numel = HF numel; wte: the first V rows) */
    int transpose;        /* GPT-2 Conv1D: HF (in, out) = the transpose of tessera's (out, in) */
    int64_t rows, cols;   /* tessera's block shape (out, in) when transpose */
    float add;            /* tessera's value = the HF one + add (Gemma's norms: 1), else 0 */
    /* groups > 0: the HF rows interleave pieces of several tessera blocks (Qwen3-Next's fused
     * projections, hf_qwen3next.c): group g's rows are piece 0's rows [g rows0, (g + 1) rows0)
     * (at piece[0].offset + g rows0 cols in m->params), then piece 1's, ...; offset and numel
     * above are unused then (no transpose, no add) */
    int groups, npieces;
    struct { size_t offset; int64_t rows; } piece[4];
    int64_t experts;      /* > 0: E blocks of (rows, cols), each transposed when transpose, its
                             rows [gate | up] interleaved when interleave (gpt-oss: hf_gptoss.h) */
    int interleave;
    int mxfp4;            /* stored as NAME_blocks + NAME_scales (hf_gptoss.h), read dequantised */
} hf_tensor;

/* Contiguous run i of tensor t: *len elements at tessera flat offset *at, from element *hf of the
 * HF tensor; returns the number of runs (1 for a plain tensor) when i is past the last. */
int hf_tensor_runs(const hf_tensor *t, int i, size_t *at, size_t *hf, size_t *len);

/* Which architecture m exports to: learned positions -> GPT-2, ALiBi -> MPT, whose transformers
 * class has no biases, exact GELU only and an MLP of 4 d_model; RoPE + RMSNorm + SwiGLU -> Qwen 3
 * (qk_norm), Qwen 2 (qkv_bias without model.bias) or Llama, with experts Qwen3-MoE (qk_norm) or
 * Mixtral; or `want` when it is one of the Llama family and can hold the model (HF_ARCH_COUNT:
 * choose). 0, or TSR_EXIT_USAGE with the reason in why. */
int hf_arch_of(const tsr_model *m, hf_arch want, hf_arch *a, char *why, size_t cap);
/* The HF tensors of m for architecture a (malloc'd; *n entries): GPT-2 and MPT in tessera's
 * parameter order, the Llama family in transformers' state-dict order; row 0 is wte. */
hf_tensor *hf_tensor_table(const tsr_model *m, hf_arch a, int *n);

/* transformers' router_aux_loss_coef for tessera's model.moe_aux_loss_coef coef (docs/moe.md). */
double hf_aux_coef(const tsr_model *m, double coef);

/* The parsed config.json of an import: its architecture and the choices that change the weights. */
typedef struct hf_config {
    hf_arch arch;
    int tied;             /* tie_word_embeddings (default true for GPT-2 and MPT, false for the
                             Llama family, as in transformers) */
    int mxfp4;            /* quantization_config.quant_method = "mxfp4" (gpt-oss's experts) */
} hf_config;

/* Writes config.json for m (architecture a); bos, eos = token ids or -1 (then left out).
 * 0 or TSR_EXIT_DATA. */
int hf_config_write(const char *path, const tsr_model *m, hf_arch a, const char *torch_dtype,
                    long bos, long eos);
/* Reads config.json and checks it against the model m of this run: 0, TSR_EXIT_USAGE (a size,
 * the architecture or the GELU differ: both values named, with the --set that fixes it) or
 * TSR_EXIT_DATA (unreadable, not JSON, or a setting tessera cannot represent). notes: also warn
 * of the training choices the run makes otherwise than the model (router_aux_loss_coef): a
 * training run's import says it once (hf_config_load with a recipe); reading the model for
 * eval, generate or ckpt does not, nor do the later checks of the same directory. */
int hf_config_check(const char *path, const tsr_model *m, int notes, hf_config *out);

/* The safetensors headers of the directory dir (model.safetensors or its shards; no tensor data
 * read) against the model m that config.json describes: the layer count, width, vocabulary and MLP
 * width named by their config.json keys, then every tensor's name and shape (hf_import_open's
 * match). Needs m's layout only (model_init, nothing allocated): hf_config_load calls it so that
 * a config.json that lies about its weights is refused before any model memory is taken.
 * 0 or TSR_EXIT_DATA after tsr_error. */
int hf_weights_check(const char *dir, const tsr_model *m);

/* Writes n bytes to path atomically (path.tmp, fsync, rename, fsync of the directory).
 * 0 or TSR_EXIT_DATA after tsr_error. */
int hf_write_file(const char *path, const void *data, size_t n);

#endif
