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

/* The HF tensors of m (malloc'd; *n entries), in the state dict's module order; row 0 is wte.
 * in_proj_qkvz (per key head [q k v z]), in_proj_ba (per key head [b a]) and the full layers'
 * q_proj (per head [query gate]) are interleaved tensors (hf_tensor.groups). */
hf_tensor *hf_qwen3next_table(const tsr_model *m, int *n);
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
/* The MoE's: none (a dense model), or a shared expert with its gate (hf_moe_need's answer). */
const char *hf_qwen3next_moe_need(const tsr_model *m);
/* Qwen3NextConfig's keys of m, after model_type, as JSON members each ending ",\n" (into buf,
 * at most cap bytes). Returns the length, or -1 when cap is too small. */
int hf_qwen3next_config_text(const tsr_model *m, double aux_coef, char *buf, size_t cap);
/* config.json (root, read from path) as the run's model.* keys (appended to f). 0 or
 * TSR_EXIT_DATA after tsr_error (a setting tessera cannot hold, named). */
int hf_qwen3next_fill(const json_value *root, const char *path, tsr_config_fill *f);
/* config.json against the run's model m: every key hf_qwen3next_fill gives must be m's. 0,
 * TSR_EXIT_USAGE (both values named, with the --set that fixes it) or TSR_EXIT_DATA. */
int hf_qwen3next_check(const json_value *root, const char *path, const tsr_model *m);

#endif
