/* model_lora.h — LoRA adapters (lora.*; docs/lora.md) beside a frozen base model.
 *
 * Every target projection t of every layer l (config.h tsr_lora_target: q, k, v, o, gate, up,
 * down) gets y += (alpha / r) * drop(x) A^T B^T, A (r, in) and B (out, r), as PEFT's LoRA layer
 * computes it. Where tessera fuses projections (qkv: [q | k | v]; SwiGLU's [gate | up]) each
 * target adds into its column block of the fused output, so the maths is PEFT's on the separate
 * projections.
 *
 * Hybrid models (docs/lora.md "Hybrid models"): a Gated DeltaNet layer's in_proj_qkvz (one A, B's
 * rows over its qkv and z outputs), in_proj_ba (over b and a), out_proj, and the gated attention's
 * attn_gate, called from the layer's hook (deltanet_layer.h dn_hook) and the decoder.
 *
 * Storage: one flat fp32 store w, g, m, v (n floats each), tensor by tensor in target order,
 * each target's A stacked over the layers of its projection's kind (Lt: the attention layers, the
 * linear ones, or all; model_layer_slot) (Lt, r, in), then its B (Lt, out, r); the checkpoint
 * names them lora/<t>_A, lora/<t>_B at those shapes. The store is replicated on every rank
 * whatever parallel.sharding or parallel.tensor say (the base is what they split; the adapters
 * are small): gradients are all-reduced over the world, AdamW runs on every rank. Under tensor
 * parallelism a pass computes with its base's share of each adapter (below: lin, lout); the
 * gradient entries a rank does not touch stay zero, those it computes in part are partial sums,
 * so the world's sum is the whole gradient.
 *
 * Initialisation (PEFT's default): A uniform in [-1/sqrt(in), 1/sqrt(in)) (Kaiming-uniform with
 * a = sqrt(5)), B zero, so the adapted model starts as the base; a pure function of the seed.
 *
 * Dropout (lora.dropout, training only): each element of a target's input is dropped by a hash of
 * (the step's key, layer, target) and the element's global row (ops.h lora_forward): the same
 * mask in the backward and in a recomputation, and on any rank count. */
#ifndef TSR_MODEL_LORA_H
#define TSR_MODEL_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "model/model.h"

typedef struct tsr_lora {
    const tsr_ops *ops;          /* the allocator (peak memory counts the store) */
    const tsr_model *model;      /* its layer kinds: a layer's slot in a target's stack */
    int R, L;
    int Lt[TSR_LORA_COUNT];      /* the layers of target t's stack: those of its base tensor's
                                  * kind (LA attention, LL linear_attention, else L) */
    int rows0[TSR_LORA_COUNT], ld1[TSR_LORA_COUNT]; /* a target over two outputs (in_proj_qkvz:
                                  * the DeltaNet's qkv and z; in_proj_ba: b and a;
                                  * kv_a_proj_with_mqa: the latent and the RoPE key): B's first
                                  * rows0 rows feed the first (col, ld), the rest the second
                                  * (column 0, row width ld1); rows0 = out: one output */
    unsigned mask;               /* bit t: target t has adapters */
    float scale, p;              /* alpha / r; dropout */
    int in[TSR_LORA_COUNT], out[TSR_LORA_COUNT]; /* the target's input and output widths (the
                                                  * store's: the whole model's) */
    int col[TSR_LORA_COUNT], ld[TSR_LORA_COUNT]; /* its first column in the (fused) output, and
                                                  * that output's row width (the pass's: under
                                                  * tensor parallelism, the rank's split) */
    /* Tensor parallelism (model_tp.h; docs/lora.md "Tensor parallelism"): the pass's share of
     * each target, its base's split. A column-parallel target (q, k, v, gate, up, attn_gate)
     * takes its input whole and gives lout of its out rows, B's rows b0 ..; a row-parallel one
     * (o, down) takes lin of its in columns, A's columns a0 .., and gives a partial sum. Without
     * tensor parallelism lin = in, lout = out, a0 = b0 = 0. */
    int lin[TSR_LORA_COUNT], lout[TSR_LORA_COUNT], a0[TSR_LORA_COUNT], b0[TSR_LORA_COUNT];
    float *slice;                /* a row-parallel target's A columns (R, lin) and their
                                  * gradient, grown */
    size_t slice_cap;
    size_t a_at[TSR_LORA_COUNT], b_at[TSR_LORA_COUNT]; /* the A and B stacks in the store */
    size_t n;                    /* floats in the store */
    float *w, *g, *m, *v;        /* weights, gradients, AdamW moments */
    void *scratch;               /* the backend's lora_scratch, grown as needed */
    size_t scratch_cap;
    const tsr_backend *scratch_be; /* the backend the scratch lives on */
    int train;                   /* dropout on (a training pass) */
    uint64_t key;                /* the training pass's dropout key */
    int64_t row0;                /* the global row number of the pass's first row */
    int cpN, cpR, cpT;           /* context parallelism (model_ring.h; lora_set_context): a
                                  * pass's rows are rank cpR's share of sequences of cpT
                                  * positions split over cpN ranks; cpN 0 or 1: whole sequences */
} tsr_lora;

/* 1 when target t (tsr_lora_target) has adapters in lo (lo may be NULL: no LoRA) */
int lora_target_on(const tsr_lora *lo, int t);
/* The layout for model m (widths from m, the targets a config_lora_targets mask); allocates
 * nothing (the memory plan of --plan). */
void lora_plan(tsr_lora *lo, const tsr_model *m, int R, double alpha, double dropout,
               unsigned mask);
/* lora_plan, then the store allocated (zero) through m's ops, and m->lora set. */
void lora_init(tsr_lora *lo, tsr_model *m, int R, double alpha, double dropout, unsigned mask);
void lora_free(tsr_lora *lo);
/* Frees the scratch only (on the backend it was allocated on); the next pass allocates it again. */
void lora_free_scratch(tsr_lora *lo);
/* The initial adapters (above) from seed. */
void lora_init_weights(tsr_lora *lo, uint64_t seed);
/* a store tensor's name's room ("kv_a_proj_with_mqa_B" and its NUL) */
#define TSR_LORA_NAME 32
/* Tensor k of the store, k = 0 .. 2 * TSR_LORA_COUNT - 1 (target k / 2, A when k is even):
 * 0 when that target has none; else 1 with its name ("q_A"), its shape (3 dims) and offset. */
int lora_tensor(const tsr_lora *lo, int k, char name[TSR_LORA_NAME], int64_t shape[3], size_t *offset,
                size_t *numel);
/* Layer l's slot in target t's stack (the index of its A and B among lo->Lt[t]), or -1 when
 * layer l has no such projection (an attention target on a linear layer, or the reverse). */
int lora_slot(const tsr_lora *lo, int l, int t);
/* A training pass (train = 1: dropout with key, its first row global row0) or an evaluation one
 * (train = 0: no dropout). */
void lora_set_pass(tsr_lora *lo, int train, uint64_t key, int64_t row0);
/* Context parallelism: the passes' rows are rank r's zig-zag share of sequences of T positions
 * split over N ranks (model_ring.h), so that a row's dropout mask is the one of its position in
 * the whole sequence (N = 1: whole sequences). */
void lora_set_context(tsr_lora *lo, int N, int r, int T);
/* The global row number of the first row of the microbatch at sequence b of a rank's batch
 * (per_rank sequences of T tokens on each rank, ranks in order): lora_set_pass's row0, so that a
 * row's dropout mask does not depend on the rank count (the CPU and CUDA trainers both use it). */
int64_t lora_pass_row0(int rank, int64_t per_rank, int64_t b, int T);
/* Target t of layer l, forward: out (the whole projection output, N rows of ld[t] act elements)
 * += the adapter path of inp (N, in[t]). No-op when t has no adapter. */
void lora_forward_at(tsr_lora *lo, const tsr_backend *be, int l, int t, void *out,
                     const void *inp, int N);
/* and backward: dinp (N, in[t]) += , the adapters' gradients in g +=; dout the whole projection
 * output's gradient. */
void lora_backward_at(tsr_lora *lo, const tsr_backend *be, int l, int t, void *dinp,
                      const void *dout, const void *inp, int N);
/* The same for part `part` of a target over two outputs (rows0 < out): part 0 is the above's,
 * part 1's out / dout the second output (N rows of ld1). Both parts share A and its dropout mask:
 * together they are one adapter on the fused projection. */
void lora_forward_part(tsr_lora *lo, const tsr_backend *be, int l, int t, int part, void *out,
                       const void *inp, int N);
void lora_backward_part(tsr_lora *lo, const tsr_backend *be, int l, int t, int part, void *dinp,
                        const void *dout, const void *inp, int N);
/* The adapters' weights w (a store's layout) merged into m's flat parameters:
 * W += (alpha / r) B A for every target and layer (the base tensor's rows of that target), in
 * fp32 through m's ops. The merged model computes what base + adapters compute (evaluation:
 * no dropout), up to rounding. m holds its parameters in params (no sharded source). */
void lora_merge(const tsr_lora *lo, const float *w, tsr_model *m);
/* Bytes of the store (w, g, m, v) and of the scratch for N rows: the memory plan. */
size_t lora_store_bytes(const tsr_lora *lo);
size_t lora_scratch_bytes(const tsr_lora *lo, const tsr_backend *be, int N);

#endif
