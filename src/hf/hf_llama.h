/* hf_llama.h — the code the Llama family's classes share (LlamaConfig and its relatives: every
 * RoPE class but the hybrids), each class reading it through its row's data (hf_family.h):
 *   hf_llama.c     LlamaConfig's keys (sizes, activation, biases, windows), the family's ops;
 *   hf_rope.c      rope_theta and the scaling (rope_scaling / rope_parameters);
 *   hf_variants.c  the issue-67 variants (norm placement, windows, soft caps, NoPE, ...);
 *   hf_moe.c       the mixtures' keys (Mixtral's and Qwen3-MoE's forms; gpt-oss's hooks);
 *   hf_map.c       the tensor table.
 */
#ifndef TSR_HF_LLAMA_H
#define TSR_HF_LLAMA_H

#include <stddef.h>

#include "hf/hf_family.h"

extern const hf_family_ops hf_llama_ops;
extern const hf_names hf_llama_names;
/* What every row of the family starts with (after its model_type and class name). */
#define HF_LLAMA_ROW .ops = &hf_llama_ops, .names = &hf_llama_names, .prefix = "model.", .rope = 1, \
                     .need = hf_llama_need

/* Rows' keys (hf_family.keys): MistralConfig's and MixtralConfig's "sliding_window": null;
 * Qwen2Config's, Qwen3Config's and Qwen3MoeConfig's use_sliding_window, sliding_window and
 * max_window_layers (and attention_bias with QK-norm). */
void hf_mistral_keys(hf_text *b, const tsr_model *m, const hf_family *f);
void hf_qwen_keys(hf_text *b, const tsr_model *m, const hf_family *f);

/* What m's attention lacks for class f by its bias form and QK-norm (the row's need), or NULL. */
const char *hf_llama_need(const tsr_model *m, const hf_family *f);
/* The Llama family's tensors, in the order of transformers' state dict (hf_map.c). */
hf_tensor *hf_llama_table(const tsr_model *m, const hf_family *f, int *n);

/* ---- RoPE (hf_rope.c) ---- */

/* max_position_embeddings to write: the model's context (model.max_seq_len, else the one the
 * scaling extends to, else seq_len). */
int hf_rope_context(const tsr_model *m);
/* rope_scaling: Llama 3's, linear (Gemma), YaRN (gpt-oss), or null; gpt-oss without scaling
 * writes {"rope_type": "default"} (GptOssConfig fills its YaRN in place of null: hf_gptoss.h). */
void hf_rope_write(hf_text *b, const tsr_model_config *c, const hf_family *f);
/* rope_theta and rope_scaling (or transformers 5's rope_parameters holding both) against the run. */
void hf_rope_check(hf_reader *c, const json_value *r, const tsr_model_config *mc, const hf_family *f);
/* rope_theta and the scaling as the run's model.rope_* keys. */
void hf_rope_fill(hf_reader *c, const hf_family *f);
/* transformers 5's rope_parameters per layer type ({"full_attention": {...},
 * "sliding_attention": {...}}: Gemma 3's): the entry of layer type `type`, or NULL when the form
 * is flat or absent. */
const json_value *hf_rope_per_type(const json_value *r, const char *type);
/* Gemma 3's sliding layers' base: rope_local_base_freq, or rope_parameters' sliding_attention
 * entry (plain frequencies only). */
double hf_rope_local_base(hf_reader *c, const json_value *r);

/* ---- the decoder variants (hf_variants.c) ---- */

extern const char *const hf_place_word[]; /* model.norm_placement's values, by tsr_norm_placement */
extern const char *const hf_mlp_word[];   /* model.mlp's, by tsr_mlp_kind */
/* Whether a layer of c attends through a window. */
int hf_has_window(const tsr_model_config *c);
/* The shortest period p of x[0 .. L): x[l] = x[l % p] for every l. */
long hf_period_of(const int *x, long L);
/* The row's unmapped keys (hf_family.unmapped) of r: refused unless null or absent. */
void hf_unmapped_check(hf_reader *c, const json_value *r, const hf_family *f);
/* The variants the class fixes and config.json's (r) against the run's. */
void hf_variants_check(hf_reader *c, const json_value *r, const tsr_model *m, const hf_family *f);
/* The variants as the run's keys (the classes with hf_family.variant_keys); L: the layer count. */
void hf_variants_fill(hf_reader *c, const hf_family *f, long L);
/* The keys of the issue-67 classes (Olmo2Config, Olmo3Config, Gemma3TextConfig, Gemma2Config)
 * beyond LlamaConfig's common ones: the windows, query_pre_attn_scalar, the soft caps, Gemma 3's
 * sliding layers' base (model.rope_local_theta, else the one rope_theta). */
void hf_variants_write(hf_text *b, const tsr_model *m, const hf_family *f);
/* layer_types of m as Hugging Face's list, one entry per layer. */
void hf_layer_types_write(hf_text *b, const tsr_model *m);
/* The first key of m's that class f does not hold (soft-capping and the RoPE variants but those
 * of f's row, gpt-oss's experts, linear attention layers, the attention output gate), or NULL. */
const char *hf_unexported_key(const tsr_model_config *c, const hf_family *f);
/* What class f's row needs of m's decoder variants, written into need (0: m has them all). */
int hf_variants_need(const tsr_model *m, const hf_family *f, char *need, size_t cap);

/* ---- the mixtures' keys (hf_moe.c) ---- */

/* MixtralConfig's / Qwen3MoeConfig's experts (f->experts); router_aux_loss_coef = tessera's
 * coefficient x LM / top_k (hf_aux_coef). */
void hf_moe_write(hf_text *b, const tsr_model *m, const hf_family *f);
/* The experts as the run's model.moe_* keys. */
void hf_moe_fill(hf_reader *c, const hf_family *f);
/* The Llama family's hf_moe_need (its ops' moe_need). */
const char *hf_llama_moe_need(const tsr_model *m, const hf_family *f);

#endif
