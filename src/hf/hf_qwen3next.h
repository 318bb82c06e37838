/* hf_qwen3next.h — transformers' Qwen3NextForCausalLM (model_type "qwen3_next") <-> tessera's
 * hybrid decoder (docs/hf.md "Qwen3-Next", docs/deltanet.md): the tensor table, with the fused
 * projections Hugging Face interleaves per head split into tessera's tensors; config.json written,
 * checked and read into a run's model.* keys. Called by hf_map.c, hf_config.c (the family table's
 * HF_QWEN3NEXT row). */
#ifndef TSR_HF_QWEN3NEXT_H
#define TSR_HF_QWEN3NEXT_H

#include <stddef.h>

#include "config/config.h"
#include "hf/hf_internal.h"
#include "json.h"

/* The layout of one of the classes of Qwen3-Next's layers (docs/hf.md "Qwen3-Next", "Qwen 3.5"):
 * Qwen3NextForCausalLM, Qwen 3.5's text classes and their vision-language wrappers. One mapping,
 * these flags: */
typedef struct hf_hybrid {
    hf_arch text;       /* the text model's class (itself, or the VL's text_config's) */
    const char *prefix; /* of the decoder's tensor names: "model." or "model.language_model." */
    const char *nest;   /* config.json's member holding the text keys ("text_config"), or NULL */
    int unfused;        /* linear_attn.in_proj_qkv, _z, _b, _a (Qwen 3.5), not in_proj_qkvz, _ba;
                         * RoPE in rope_parameters with an mrope_section */
    int moe;            /* -1: num_experts says (Qwen3-Next), 0: dense, 1: every layer MoE */
    int stacked;        /* mlp.experts.gate_up_proj (E, 2FE, C) and down_proj (E, C, FE), not
                         * mlp.experts.N.{gate,up,down}_proj */
    long def[7];        /* config defaults: vocab, hidden, MLP width, layers, value heads, experts,
                         * top k */
} hf_hybrid;
/* a's row, or NULL when a is none of these classes. */
const hf_hybrid *hf_hybrid_of(hf_arch a);

/* The HF tensors of m as class a (malloc'd; *n entries), in the state dict's module order; row 0
 * is wte. in_proj_qkvz (per key head [q k v z]), in_proj_ba (per key head [b a]) and the full
 * layers' q_proj (per head [query gate]) are interleaved tensors (hf_tensor.groups). */
hf_tensor *hf_qwen3next_table(const tsr_model *m, hf_arch a, int *n);
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
/* What m lacks for Qwen3NextForCausalLM beyond the family table's row (NULL: nothing):
 * QK-norm and no biases, the output gate on the full layers, linear or full layers only, no
 * RoPE scaling. */
const char *hf_qwen3next_need(const tsr_model *m);
/* The MoE's for class a: none (a dense model), or a shared expert with its gate; Qwen 3.5's dense
 * classes none, its MoE ones experts in every layer (hf_moe_need's answer). */
const char *hf_qwen3next_moe_need(const tsr_model *m, hf_arch a);
/* The text config's keys of m as class a (Qwen3NextConfig's, Qwen3_5TextConfig's...), after
 * model_type, as JSON members each ending ",\n" (into buf, at most cap bytes). Returns the
 * length, or -1 when cap is too small. */
int hf_qwen3next_config_text(const tsr_model *m, hf_arch a, double aux_coef, char *buf, size_t cap);
/* config.json (root, read from path, of class a: its text_config for a VL class) as the run's
 * model.* keys (appended to f). 0 or TSR_EXIT_DATA after tsr_error (a setting tessera cannot
 * hold, named). */
int hf_qwen3next_fill(const json_value *root, const char *path, hf_arch a, tsr_config_fill *f);
/* config.json against the run's model m: every key hf_qwen3next_fill gives must be m's. 0,
 * TSR_EXIT_USAGE (both values named, with the --set that fixes it) or TSR_EXIT_DATA. */
int hf_qwen3next_check(const json_value *root, const char *path, hf_arch a, const tsr_model *m);

#endif
