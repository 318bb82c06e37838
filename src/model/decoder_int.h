/* decoder_int.h — internal to src/model/decoder*.c and the layer kinds' files (layer_kind.h):
 * what they share (decoder.h is the interface). decoder.c: the sequence (the frame's norms and
 * residual adds around each layer's mixer and MLP, dispatched through their rows), the training
 * and evaluation forward, the helpers a kind's pass calls (dec_linear, dec_rope_pos, the LoRA
 * paths); decoder_acts.c: the activation plan (the frame's buffers and each kind's, the
 * compressed activations); decoder_backward.c: the backward with the recomputation of
 * checkpointed layers; decoder_kv.c: decoding with a KV cache. The kinds (mixer_*.c, mlp_*.c)
 * call the helpers; decoder.c reaches a kind only through its row. Calls go one way:
 * decoder_backward.c and decoder_kv.c call decoder.c, which calls decoder_acts.c.
 */
#ifndef TSR_DECODER_INT_H
#define TSR_DECODER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "model/decoder.h"

/* ---- the parameter units (decoder.c) ---- */

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
    struct {               /* an MLA layer's (mixer_mla.c), else NULL: the queries' latent
                            * before and after its norm (N, qr), the keys' and values' (N, kvr),
                            * the attention's input (N, NH (2 dqk + dv)) and output (N, NH dv);
                            * the norms' statistics (N) and the saved attention */
        void *cq, *cqn, *c, *cn, *qkv, *atty;
        float *rq, *rkv, *att;
    } mla;
} dec_layer;

/* The plan of a pass's activations (decoder_acts.c), what a kind's acts and view slots read:
 * a pass of B sequences of T positions (this rank's T under a ring) on be. acts sets the bytes of
 * the buffers the kind owns with dec_plan_buffer, which marks the stacks (a layer each: the
 * per-layer share dec_layer_acts_bytes reports). */
typedef struct dec_plan {
    const tsr_model *m;
    const tsr_backend *be;
    int B, T;
    size_t N, e;           /* B T; an act element's bytes */
    size_t Nf;             /* the frame's rows: N, or N / T under sequence parallelism */
    int comp;              /* model.activation_compression runs here: the compressed tensors'
                            * working copies are one layer's (slot 0) */
    unsigned char stacked[TSR_A_COUNT];
} dec_plan;
dec_plan dec_plan_of(const tsr_model *m, const tsr_backend *be, int B, int T);
/* Elements between consecutive layers of a stack of n elements of elem bytes: n rounded up to
 * whole blocks of the backend's alignment (every layer's slice starts as aligned as the buffer) */
size_t dec_stride(const dec_plan *p, size_t n, size_t elem);
/* bytes[id] = bytes (0 when !on); a stack (layers > 0): that many layers of stride elements of
 * elem bytes, marked as a stack */
void dec_plan_buffer(dec_plan *p, size_t bytes[TSR_A_COUNT], tsr_act_id id, int on, size_t bytes1);
void dec_plan_stack(dec_plan *p, size_t bytes[TSR_A_COUNT], tsr_act_id id, int on, size_t layers,
                    size_t stride, size_t elem);
/* slot of a stack buf of stride elements of elem bytes a layer, NULL without the buffer */
void *dec_stack_at(const void *buf, size_t slot, size_t stride, size_t elem);
/* A backend entry a model setting needs (dec_check_backend, a kind's missing slot): the key of
 * the first needed one the backend lacks, or NULL */
typedef struct dec_need {
    int needed;
    const void *entry;
    const char *what;
} dec_need;
const char *dec_need_missing(const dec_need *need, size_t n);

/* layer l's activations in the allocated stacks (a->B x a->T) */
dec_layer dec_layer_at(const tsr_model *m, const tsr_backend *be, const tsr_acts *a, int l);
/* model.activation_compression = "fp8": the compressed tensors layer l keeps, of a pass over N
 * positions: to E4M3 after its forward (save: its last read of them), or back into the working
 * copies before its backward and its recomputation (not for a decode step: it keeps none) */
void dec_comp_move(const tsr_decoder *d, int l, int N, int save);

/* ---- the layers (decoder.c) ---- */

/* The steps of a block's forward from LN1 to the MLP's hidden layer, in order. */
typedef enum {
    ST_LN1 = 0, /* ln1 = LN1(x) (layer 0 only, and recomputation: else fused at the last layer) */
    ST_MIX,     /* the mixer's forward from ln1 (attention: qkv, attention; a linear layer) */
    ST_RES2,    /* residual2 = x + the mixer's output; ln2 = LN2(residual2) */
    ST_MLP,     /* the MLP's forward from ln2 up to its output projection (dense: fch_gelu =
                 * gelu(fch = ln2 @ fcw^T + fcb)) */
    ST_COUNT
} layer_step;


/* One pass over the layers: training (kv NULL: layer l's slots of the stacks) or a decode chunk
 * (one set of chunk buffers, the cache's attention). */
typedef struct dec_run {
    const tsr_decoder *d;
    int B, T, N;
    int Nf;                        /* the frame's rows (norms, residual adds): this rank's N / T of
                                    * them under sequence parallelism (model_tp.h), else N */
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
/* Layer l's mixer (mlp 0) or MLP (mlp 1) output f into r->scratch (its row's out slot: the
 * output projection with its adapter, a MoE layer's combination of its experts), summed over
 * the tensor group (tensor parallelism); with post and model.norm_placement = sandwich, normed
 * in place (postattnw / postmlpw; its statistics in r->lnfr, which the final norm writes only
 * after the layers). Under sequence parallelism the row's out reads the half's normed input
 * gathered in tp_x: call it after the half's forward, or after gathering that input again. */
void dec_branch_out(const dec_run *r, int l, const dec_layer *v, const void *const *w, int mlp,
                    int post);
/* out = inp @ w^T + bias for layer l's linear layer (l < 0: the router) */
void dec_linear(const dec_run *r, int l, void *out, void *pre_gelu, const void *inp, const void *w,
                const void *bias, int N, int IC, int OC);
/* LoRA (model_lora.h): layer l's place in the adapters' stacks, which are the whole model's (a
 * pipeline chunk's layer l is the whole model's config_layer_at(l); elsewhere l) */
int dec_lora_layer(const dec_run *r, int l);
/* LoRA (model_lora.h): target t's adapter path of layer l over the pass's N rows, added to out
 * (the projection's output) from inp, or its backward into dinp (+=) and the adapters' gradients */
void dec_lora_fwd(const dec_run *r, int l, tsr_lora_target t, void *out, const void *inp);
void dec_lora_bwd(const dec_run *r, int l, tsr_lora_target t, void *dinp, const void *dout,
                  const void *inp);
/* steps [first, last] of layer l's forward with its weights w */
void dec_layer_steps(const dec_run *r, int l, const dec_layer *v, const void *const *w,
                     layer_step first, layer_step last);
/* model.embed_scale: x (N, C), the embedding's output or its gradient, times sqrt(d_model) */
void dec_embed_scale(const tsr_decoder *d, void *x, int N);
/* every layer's forward after the embedding (scaled first), ending in the final LayerNorm */
void dec_layers_forward(const dec_run *r, const dec_unit *root);
/* the LM head's weight: TSR_P_LMHEAD when untied, else TSR_P_WTE */
int dec_head_id(const tsr_model *m);

/* ---- training and evaluation (decoder.c) ---- */

/* the layers' pass over B sequences of T positions (this rank's T / N with a ring); what names
 * the caller in the error of a batch past the allocated one */
dec_run dec_train_run(const tsr_decoder *d, int B, int T, const char *what);
/* dlosses = loss_scale where targets count, and the microbatch's MoE weight, on the backend */
void dec_set_dlosses(const tsr_decoder *d, const int32_t *targets, size_t N, float loss_scale);

/* ---- tensor parallelism (decoder_tp.c; model_tp.h): identities without d->tp ---- */

/* a column-parallel half's input x (the frame's Nf rows): every rank's rows gathered into tp_x
 * under sequence parallelism, else x itself */
const void *dec_tp_in(const dec_run *r, const void *x);
/* the same for the backward's output gradient dy (into tp_dy) */
const void *dec_tp_in_grad(const dec_run *r, const void *dy);
/* buf (r->N rows of a row-parallel half's partial sums, or of a column-parallel half's input
 * gradient): summed over the group into its first r->Nf rows (reduce-scatter under sequence
 * parallelism, else an all-reduce of every row) */
void dec_tp_out(const dec_run *r, void *buf);
/* the vocabulary-parallel embedding: encoded (the frame's rows) = wte's row of each token, from
 * the rank holding it, plus wpe's; its backward into root's wte (this rank's rows) and wpe
 * gradients from dresidual; tokens the host's (r->N) */
void dec_tp_embed_forward(const dec_run *r, const dec_unit *root, const int32_t *tokens);
void dec_tp_embed_backward(const dec_run *r, const dec_unit *root, const int32_t *tokens);
/* softmax_xent over the vocabulary-parallel logits a->probs (N rows of this rank's Vp / T):
 * losses, the probabilities in place, then with dlosses the logits' gradient; the max and the
 * sums of exponentials reduced over the group, never the logits */
void dec_tp_xent(const tsr_decoder *d, const int32_t *targets, const float *dlosses, int N);
void dec_tp_xent_grad(const tsr_decoder *d, const int32_t *targets, const float *dlosses, int N);
/* each row's greedy token over the group's probabilities (the lower id on ties) */
void dec_tp_argmax(const tsr_decoder *d, int32_t *greedy, int N);
/* (decoder_tp_dev.c: each of the five above is decoder_tp.c's on the host; on a device backend,
 * d->tpdev, the embedding runs the backend's encoder over this rank's vocabulary rows, the
 * other tokens' rows zeroed, summed through the hooks; the cross-entropy and the greedy choice
 * take the logits staged through the host, tsr_tp.hlogits, kept for dec_tp_xent_grad, which
 * reads the loss weights from the backend's dlosses.) decoder_tp.c's host halves: */
void dec_tp_embed_forward_host(const dec_run *r, const dec_unit *root, const int32_t *tokens);
void dec_tp_embed_backward_host(const dec_run *r, const dec_unit *root, const int32_t *tokens);
/* the cross-entropy, its gradient and the greedy choice on host fp32 rows p (N, Vp / T), losses
 * (N) and dlosses host: the CPU's buffers, or a device's rows staged on the host */
void dec_tp_xent_rows(const tsr_decoder *d, float *p, float *losses, const int32_t *targets,
                      const float *dlosses, int N);
void dec_tp_xent_grad_rows(const tsr_decoder *d, float *p, const int32_t *targets,
                           const float *dlosses, int N);
void dec_tp_argmax_rows(const tsr_decoder *d, const float *p, int32_t *greedy, int N);
/* model.qk_norm_scope = "projection" on the split's qkv rows (N of them, as the backend's
 * qknorm_proj_forward / _backward: rstd (N, 2), the value columns copied / passed): each row's
 * sums over the query and the key projection (its squares; in the backward of w g norm) summed
 * over the group, so that the norm spans every head; dqw, dkw (this rank's heads) += over the
 * rows, either NULL (frozen) */
void dec_tp_qknorm_forward(const tsr_decoder *d, float *out, float *rstd, const float *inp,
                           const float *qw, const float *kw, int N);
void dec_tp_qknorm_backward(const tsr_decoder *d, float *dinp, float *dqw, float *dkw,
                            const float *dout, const float *inp, const float *qw, const float *kw,
                            const float *rstd, int N);

#endif
