/* hf_qwen3next.h — transformers' Qwen3NextForCausalLM (model_type "qwen3_next") and Qwen 3.5's
 * classes <-> tessera's hybrid decoder (docs/hf.md "Qwen3-Next", "Qwen 3.5", docs/deltanet.md):
 * their rows (hf_family.h: hf_qwen3next, hf_qwen35_text, hf_qwen35_moe_text, hf_qwen35,
 * hf_qwen35_moe), the tensor table, with the fused projections Hugging Face interleaves per head
 * split into tessera's tensors; config.json written, checked and read into a run's model.* keys.
 * What the PEFT adapters (hf_peft.c) share with the table is here. */
#ifndef TSR_HF_QWEN3NEXT_H
#define TSR_HF_QWEN3NEXT_H

#include <stddef.h>

#include "hf/hf_family.h"

/* The layout of one of the classes of Qwen3-Next's layers (docs/hf.md "Qwen3-Next", "Qwen 3.5"):
 * Qwen3NextForCausalLM, Qwen 3.5's text classes and their vision-language wrappers (whose rows
 * name the text's prefix and nest). One mapping, these flags (a row's own data): */
typedef struct hf_hybrid {
    const hf_family *text; /* the text model's class (itself, or the VL's text_config's) */
    int unfused;        /* linear_attn.in_proj_qkv, _z, _b, _a (Qwen 3.5), not in_proj_qkvz, _ba;
                         * RoPE in rope_parameters with an mrope_section */
    int moe;            /* -1: num_experts says (Qwen3-Next), 0: dense, 1: every layer MoE */
    int stacked;        /* mlp.experts.gate_up_proj (E, 2FE, C) and down_proj (E, C, FE), not
                         * mlp.experts.N.{gate,up,down}_proj */
    long def[7];        /* config defaults: vocab, hidden, MLP width, layers, value heads, experts,
                         * top k */
} hf_hybrid;
/* f's layout, or NULL when f is none of these classes. */
const hf_hybrid *hf_hybrid_of(const hf_family *f);

/* The row layout of one of Qwen3-Next's fused projections: HF_FUSED_QKVZ (linear_attn.in_proj_qkvz,
 * per key head [q k v z]), HF_FUSED_BA (in_proj_ba, per key head [b a]) or HF_FUSED_Q (a full
 * layer's self_attn.q_proj with the output gate, per head [query gate]): *groups groups of rows,
 * group g the pieces ps[0..np) in turn, piece i its rows [r0 + g rows, r0 + (g + 1) rows) of
 * tessera's tensor p. Returns np. The export's tensor table and the PEFT adapters' B rows
 * (hf_peft.c) both follow it. */
typedef enum { HF_FUSED_QKVZ, HF_FUSED_BA, HF_FUSED_Q } hf_fused;
typedef struct hf_piece {
    tsr_param_id p;
    int64_t r0, rows;
} hf_piece;
int hf_qwen3next_fused(const tsr_model *m, hf_fused which, hf_piece ps[4], int *groups);

#endif
