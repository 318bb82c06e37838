/* hf_gptoss.h — gpt-oss (GptOssForCausalLM, model_type gpt_oss) in Hugging Face's layout
 * (docs/hf.md "gpt-oss").
 *
 * Per layer, in transformers' state-dict order: self_attn.sinks (NH) = sinks[l], q/k/v/o_proj
 * weight + bias (the Llama family's, model.bias), then the MoE layer's
 *   mlp.router.weight (E, C)              = routerw[s]
 *   mlp.router.bias (E)                   = routerb[s]
 *   mlp.experts.gate_up_proj (E, C, 2FE)  = expw1[s] (E, 2FE, C): per expert the TRANSPOSE, and its
 *                                           columns interleave gate and up (HF's gate = [..., ::2],
 *                                           up = [..., 1::2]; tessera's rows are [gate | up])
 *   mlp.experts.gate_up_proj_bias (E, 2FE) = expb1[s], interleaved the same way
 *   mlp.experts.down_proj (E, FE, C)      = expw2[s] (E, C, FE): per expert the transpose
 *   mlp.experts.down_proj_bias (E, C)     = expb2[s]
 * then input_layernorm = ln1w, post_attention_layernorm = ln2w. The MXFP4 form (the published
 * checkpoints: quantization_config.quant_method "mxfp4") holds gate_up_proj and down_proj as
 * NAME_blocks (E, R, G, 16) + NAME_scales (E, R, G) whose dequantisation (mxfp4.h) is (E, R, 32 G):
 * (E, 2FE, C) with the rows interleaved, and (E, C, FE), i.e. NOT transposed (transformers'
 * integrations/mxfp4.py transposes after convert_moe_packed_tensors).
 * Each such tensor covers one contiguous block of tessera's buffer; hf_gptoss_hf_index and
 * hf_gptoss_src_index are the permutation inside it, one the inverse of the other.
 */
#ifndef TSR_HF_GPTOSS_H
#define TSR_HF_GPTOSS_H

#include <stddef.h>
#include <stdint.h>

#include "hf/hf_internal.h"
#include "hf/safetensors.h"

/* Appends layer l's router and experts (a MoE layer of m) to t[*k], in state-dict order. */
void hf_gptoss_moe_rows(const tsr_model *m, int l, hf_tensor *t, int *k);
/* The table's expert weights (t[0 .. n)) in their MXFP4 form: dequantised (E, rows, cols). */
void hf_gptoss_mxfp4_form(hf_tensor *t, int n);
/* Element i of t's tessera block: its flat index in the HF tensor (t->experts > 0). */
size_t hf_gptoss_hf_index(const hf_tensor *t, size_t i);
/* Element k of the HF tensor ctx (an hf_tensor *): its index in the tessera block (export). */
uint64_t hf_gptoss_src_index(const void *ctx, uint64_t k);
/* What GptOssForCausalLM needs of m's experts and attention (NULL: m has it all). */
const char *hf_gptoss_need(const tsr_model *m);
/* NAME_blocks b and NAME_scales s (of file fb, fs) against t's dequantised shape: U8, (E, R, G, 16)
 * and (E, R, G) with 32 G = t->shape[2]. 0, or TSR_EXIT_DATA after tsr_error naming the tensor. */
int hf_gptoss_mxfp4_check(const st_file *fb, const st_entry *b, const st_entry *s, const hf_tensor *t);
/* Dequantises the pair into x (t->numel floats). 0, or TSR_EXIT_DATA after tsr_error. */
int hf_gptoss_mxfp4_read(const st_file *fb, const st_entry *b, const st_file *fs,
                         const st_entry *s, const hf_tensor *t, float *x);

#endif
