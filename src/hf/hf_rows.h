/* hf_rows.h — a tensor table built row by row (hf_internal.h's hf_tensor): the layers of a
 * family whose tensors are tessera's blocks as they are or their row ranges (Qwen3-Next,
 * hf_qwen3next.c; DeepSeek, hf_deepseek.c). A row names its HF tensor from the layer being added
 * and finds its block in the flat buffer: a stacked tensor's slice of that layer, or, for a
 * multi-token-prediction module's layer (DeepSeek's model.layers.{L + k - 1}), the module's
 * tensor in mtp_layer_w / mtp_layer_n (model_mtp_layer_tensor).
 */
#ifndef TSR_HF_ROWS_H
#define TSR_HF_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "hf/hf_internal.h"

typedef struct hf_rows {
    const tsr_model *m;
    hf_tensor *t;    /* the table (the caller allocates room for every row) */
    int n;           /* rows so far */
    int l;           /* the HF layer of the rows being added (-1: global) */
    int mtp;         /* >= 0: that layer is MTP depth mtp's (its tensors in the modules' blocks) */
    const char *pre; /* of the names: the class's prefix, "" for lm_head */
} hf_rows;

/* The next row, named pre + ("layers.L." when l >= 0) + fmt with e. */
hf_tensor *hf_rows_next(hf_rows *tb, const char *fmt, int e);
/* Tensor p's block for the layer being added (expert e of it when e >= 0): its offset in
 * m->params and floats in *len; SIZE_MAX when m has no such tensor there. */
size_t hf_rows_slice(const hf_rows *tb, tsr_param_id p, int e, size_t *len);
/* A plain row: rows [r0, r0 + rows) of p's block, (rows, cols), or 1-D (rows) when cols = 0;
 * none when m lacks p there. */
void hf_rows_plain(hf_rows *tb, const char *fmt, int e, tsr_param_id p, int64_t r0, int64_t rows,
                   int64_t cols, float add);
/* A SwiGLU MLP's three plain rows: PREFIX.gate_proj.weight and PREFIX.up_proj.weight, rows
 * [0, F) and [F, 2F) of w1's block, (F, C) each, and PREFIX.down_proj.weight, w2's (C, F); a
 * "%d" in prefix is expert e ("mlp.experts.%d"). */
void hf_rows_swiglu(hf_rows *tb, const char *prefix, int e, tsr_param_id w1, tsr_param_id w2,
                    int64_t F, int64_t C);
/* The last row (r, c) viewed as (a, b, c): conv1d's (CD, 1, K), stacked experts' (E, ., .). */
void hf_rows_view3(hf_rows *tb, int64_t a, int64_t b, int64_t c);

#endif
