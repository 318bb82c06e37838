/* decoder_int.h — internal to src/model/decoder*.c: what the decoder's files share (decoder.h is
 * the interface). decoder.c: the layers' forward and the training and evaluation forward;
 * decoder_acts.c: the activation plan, a layer's slots in it, the compressed activations, the MoE
 * statistics' stacks; decoder_backward.c: the backward with the recomputation of checkpointed
 * layers; decoder_kv.c: decoding with a KV cache. Calls go one way: decoder_backward.c and
 * decoder_kv.c call decoder.c, which calls decoder_acts.c.
 */
#ifndef TSR_DECODER_INT_H
#define TSR_DECODER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "model/decoder.h"

/* ---- the parameter units (decoder.c) ---- */

/* unit u's tensors by id (weights in the backend's type; gradients in backward) */
/* unit u's tensors by id (weights in the backend's type; gradients in backward) */
typedef struct dec_unit {
    const void *w[TSR_P_COUNT];
    float *g[TSR_P_COUNT];
} dec_unit;

void dec_unit_get(const tsr_decoder *d, int u, int backward, dec_unit *v);
void dec_unit_put(const tsr_decoder *d, int u, int backward);

/* ---- the activation plan (decoder_acts.c) ---- */

/* layer l's activations: its slot of each group's stack, x its input */
typedef struct dec_layer {
    void *x, *ln1, *qkv, *qkvr, *atty, *res2, *ln2, *fch, *fchg, *res3;
    float *ln1m, *ln1r, *qknr, *att, *ln2m, *ln2r; /* the means NULL with RMSNorm */
    /* MoE (NULL in a dense model): the MLP group's slot, and the layer's offsets and stats */
    void *mlg, *xg, *h, *hg, *y, *sh, *shg, *shout;
    float *probs, *lse, *wts, *stats;
    int32_t *idx, *rows, *slot, *offs;
    float *dn; /* a linear_attention layer's Gated DeltaNet activations (mixer_deltanet.c), else NULL */
    float *agate, *agated; /* model.attn_output_gate: the gate's logits, the gated output
                            * (N, QD each), else NULL */
} dec_layer;

/* layer l's activations in the allocated stacks (a->B x a->T) */
dec_layer dec_layer_at(const tsr_model *m, const tsr_backend *be, const tsr_acts *a, int l);
/* model.activation_compression = "fp8": the compressed tensors layer l keeps, of a pass over N
 * positions: to E4M3 after its forward (save: its last read of them), or back into the working
 * copies before its backward and its recomputation (not for a decode step: it keeps none) */
void dec_comp_move(const tsr_decoder *d, int l, int N, int save);

/* ---- the layers (decoder.c) ---- */

/* The steps of a block's forward from LN1 to the MLP's GELU, in order. */
typedef enum {
    ST_LN1 = 0, /* ln1 = LN1(x) (layer 0 only, and recomputation: else fused at the last layer) */
    ST_QKV,     /* qkv = ln1 @ qkvw^T + qkvb */
    ST_ATTN,    /* atty = attention(qkv) */
    ST_RES2,    /* residual2 = x + atty @ attprojw^T + attprojb; ln2 = LN2(residual2) */
    ST_FC,      /* fch_gelu = gelu(fch = ln2 @ fcw^T + fcb) */
    ST_COUNT
} layer_step;


/* One pass over the layers: training (kv NULL: layer l's slots of the stacks) or a decode chunk
 * (one set of chunk buffers, the cache's attention). */
typedef struct dec_run {
    const tsr_decoder *d;
    int B, T, N;
    void *scratch;                 /* (N,C) the projections' outputs */
    void *lnf;                     /* (N,C) the final LayerNorm's output, and its statistics */
    float *lnfm, *lnfr;
    tsr_kv_cache *kv;              /* decode: the cache, its chunk buffers; p0 the first position */
    tsr_kv_slots *ks;              /* batched decode (kv = its row buffers): the slots' caches */
    int slot;                      /* batched: the slot a chunk feeds, or -1: each row one new
                                    * token of the slot its ids name (ks->dev_ids) */
    int p0;
} dec_run;

/* layer l's activations in a pass: its slots of the stacks, or a decode chunk's buffers */
dec_layer dec_run_layer(const dec_run *r, int l);
/* RoPE's positions and *p0 of a pass */
const int32_t *dec_rope_pos(const dec_run *r, int *p0);
/* Layer l's attention variants (ops.h tsr_attn_var: its window, the sinks and their gradient, each
 * or NULL) filled into *var: var, or NULL when the layer has none (plain attention: what every
 * backend runs). */
const tsr_attn_var *dec_attn_var(const tsr_model *m, int l, const void *sinks, float *dsinks,
                                 tsr_attn_var *var);
/* Layer l's attention (mlp 0) or MLP (mlp 1) output f into r->scratch: the output projection
 * with its adapter, or a MoE layer's combination of its experts; with post and
 * model.norm_placement = sandwich, normed in place (postattnw / postmlpw; its statistics in
 * r->lnfr, which the final norm writes only after the layers). */
void dec_branch_out(const dec_run *r, int l, const dec_layer *v, const void *const *w, int mlp,
                    int post);
/* out = inp @ w^T + bias for layer l's linear layer (l < 0: the router) */
void dec_linear(const dec_run *r, int l, void *out, void *pre_gelu, const void *inp, const void *w,
                const void *bias, int N, int IC, int OC);
/* steps [first, last] of layer l's forward with its weights w */
void dec_layer_steps(const dec_run *r, int l, const dec_layer *v, const void *const *w,
                     layer_step first, layer_step last);
/* model.embed_scale: x (N, C), the embedding's output or its gradient, times sqrt(d_model) */
void dec_embed_scale(const tsr_decoder *d, void *x, int N);
/* every layer's forward after the embedding (scaled first), ending in the final LayerNorm */
void dec_layers_forward(const dec_run *r, const dec_unit *root);
/* the LM head's weight: TSR_P_LMHEAD when untied, else TSR_P_WTE */
int dec_head_id(const tsr_model *m);

/* ---- the linear_attention layers (mixer_deltanet.c; docs/deltanet.md "Wiring") ---- */

/* layer l is a linear_attention layer (Gated DeltaNet in the attention's place) */
int dec_dn_layer(const tsr_model *m, int l);
/* the layer's forward from v->ln1 into its slot (a decode chunk: with the cache's state) */
void dec_dn_forward(const dec_run *r, int l, const dec_layer *v, const void *const *w);
/* its output into r->scratch (dec_branch_out's attention branch) */
void dec_dn_out(const dec_run *r, const dec_layer *v);
/* its backward: dout = d(its output) to a->dln = d(ln1) (written), the gradients of unit u */
void dec_dn_backward(const dec_run *r, int l, const dec_layer *v, const dec_unit *u,
                     const void *dout);

/* model.attn_output_gate (mixer_deltanet.c; Qwen3-Next's gated attention): the gated output
 * = atty * sigmoid(gate) (ST_ATTN; the gate's projection from ln1 is dec_layer_steps' ST_QKV).
 * dec_attn_in: what the output projection reads, the gated output or atty. The backward: proj 0
 * turns a->datty = d(gated) into d(atty) in place and d(gate) into a->dagate; proj 1 adds the
 * projection's gradient into a->dln and unit u's attngatew gradient. No-ops without the gate. */
void dec_gate_forward(const dec_run *r, const dec_layer *v);
const void *dec_attn_in(const tsr_model *m, const dec_layer *v);
void dec_gate_backward(const dec_run *r, const dec_layer *v, const dec_unit *u, int proj);

/* ---- training and evaluation (decoder.c) ---- */

/* the layers' pass over B sequences of T positions (this rank's T / N with a ring); what names
 * the caller in the error of a batch past the allocated one */
dec_run dec_train_run(const tsr_decoder *d, int B, int T, const char *what);
/* dlosses = loss_scale where targets count, and the microbatch's MoE weight, on the backend */
void dec_set_dlosses(const tsr_decoder *d, const int32_t *targets, size_t N, float loss_scale);

#endif
