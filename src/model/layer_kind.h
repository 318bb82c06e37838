/* layer_kind.h — the kinds of a decoder layer's two halves as tables (docs/decoder.md "Layer
 * kinds"): the mixer (attention with its variants, the Gated DeltaNet) and the MLP (dense, gated,
 * mixture of experts). A row is all one kind is: its parameters (which ids of model.h's
 * tsr_param_id are its own, their shapes, initialisation and how a tensor-parallel split cuts
 * each), the config keys it reads, the layers it serves, its forward and backward in the decoder's
 * pass, the activations and decode cache it needs, its FLOPs, the backend entries it needs.
 * decoder.c runs a layer as the frame's norms and residual adds around its mixer row and its MLP
 * row; model.c lays out and initialises every row's tensors; neither names a kind. Adding a kind
 * is a row in a file of its own and its place in the lists of layer_kinds.c.
 *
 * The frame (model.c): the root tensors (embeddings, final norm, head: not per layer) and the
 * block's norms (per layer, every layer) are two rows of the same type without a pass.
 */
#ifndef TSR_LAYER_KIND_H
#define TSR_LAYER_KIND_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

struct dec_run;
struct dec_layer;
struct dec_unit;
struct dec_plan;

/* How a tensor-parallel group of T ranks splits a tensor (parallel.tensor; model/model_tp.h,
 * docs/parallelism.md "Tensor parallelism"). The dimension is row->dim of a layer's slice (the
 * stack's layer index not counted; a root tensor's whole shape). Rank t of the group holds the
 * t-th of T equal parts of that dimension (of each of its parts, or its heads), the other
 * dimensions whole. */
typedef enum {
    TSR_SPLIT_REPLICATED = 0, /* every rank holds all of it and uses it on its share (the frame's
                               * norms; a weight every head shares: the gradient is summed over
                               * the group) */
    TSR_SPLIT_AFTER_SUM,       /* every rank holds all of it, one adds it: a bias added to a
                               * row-parallel projection's output, whose partial sums the group
                               * adds (the group's first rank adds it and computes its gradient) */
    TSR_SPLIT_OUT,     /* by output dimension: a weight's rows (column-parallel; its output stays
                        * split); parts > 1: the dimension is that many blocks ([gate | up]), each
                        * split alike */
    TSR_SPLIT_IN,      /* by input dimension: a weight's columns (row-parallel; the partial
                        * outputs are summed) */
    TSR_SPLIT_HEADS,   /* by heads: whole heads of the dimension's head blocks ([q heads | k heads
                        * | v heads], each block split by its heads); key/value heads replicated
                        * when there are fewer of them than ranks in the split */
    TSR_SPLIT_VOCAB,   /* by vocabulary rows (the embedding, the LM head) */
    TSR_SPLIT_EXPERTS, /* by experts (the routed experts' tensors; parallel.expert's split):
                        * tensor parallelism cuts inside each expert as the kind's `within`
                        * slot says instead */
    TSR_SPLIT_COUNT
} tsr_split_rule;

/* A block of a TSR_SPLIT_HEADS dimension: n heads of size elements each; kv: key/value heads,
 * which, when fewer than the ranks of the split (and dividing them), are replicated, each rank
 * holding the one head its query heads read */
typedef struct tsr_head_block {
    int n, size, kv;
} tsr_head_block;

/* A tensor's initial values (model_init_weights). */
typedef enum {
    TSR_INIT_NORMAL = 0, /* N(0, init_std) */
    TSR_INIT_RESIDUAL,   /* N(0, init_std / sqrt(2 L)): a projection into the residual stream */
    TSR_INIT_ZERO,
    TSR_INIT_ONE,
    TSR_INIT_OWN,        /* the kind's init slot */
    TSR_INIT_COUNT
} tsr_init_rule;

/* One tensor of a kind. */
typedef struct tsr_param_row {
    tsr_param_id id;
    const char *name;     /* "qkvw": the dataset name in checkpoints and dumps */
    tsr_param_kind kind;  /* decides weight decay */
    tsr_init_rule init;
    uint64_t stream;      /* its random stream: the ids of the GPT-2/MPT layout, then a new number
                           * per tensor added, so a seed gives every older model its weights */
    tsr_split_rule split;
    int dim;              /* the dimension split cuts (-1: replicated) */
    int parts;            /* TSR_SPLIT_OUT: the blocks of that dimension, each split alike (1) */
    int fp8;              /* a linear layer's weight that dec_linear runs, in FP8 under
                           * precision.fp8 (model_fp8_linear) */
} tsr_param_row;

/* Which half of a layer a kind fills. */
typedef enum { TSR_HALF_ROOT = 0, TSR_HALF_BLOCK, TSR_HALF_MIXER, TSR_HALF_MLP } tsr_layer_half;

typedef struct tsr_layer_kind {
    const char *name;              /* "attention", "gated_deltanet", "dense", "gated", "moe" */
    tsr_layer_half half;
    const tsr_param_row *params;   /* its tensors (n_params) */
    int n_params;
    const char *const *keys;       /* the config keys it reads, NULL-terminated: each a key whose
                                    * row says it shapes the model */
    /* layer l of a model of config c is of this kind (NULL: every layer); the first row of its
     * half's list that serves a layer is that layer's kind */
    int (*serves)(const tsr_model_config *c, int l);
    /* its tensors' shapes for m (model_param_shape), stacked over the layers it serves */
    void (*layout)(tsr_model *m);
    /* a TSR_SPLIT_HEADS tensor's dimension as blocks of heads, in order (at most 3), of a model
     * at its global sizes: returns their count, 0 when every head shares the tensor (a weight
     * over one head's dimension: then replicated, its gradient summed over the group) */
    int (*heads)(const tsr_model *m, tsr_param_id id, tsr_head_block b[3]);
    /* a TSR_SPLIT_EXPERTS tensor's cut inside each expert under tensor parallelism (a rule, the
     * dimension of the layer's slice and its parts, as a row's split, dim, parts): every expert
     * is on every rank of the group, each holding its slice of each */
    void (*within)(tsr_param_id id, tsr_split_rule *split, int *dim, int *parts);
    /* a TSR_INIT_OWN tensor's element k (a pure function of seed and k, as model_init_weight) */
    float (*init)(const tsr_model *m, tsr_param_id id, uint64_t seed, size_t k);
    /* the pass (decoder_int.h; NULL for the frame): its forward from the layer's normed input
     * (v->ln1 for a mixer, v->ln2 for an MLP) into its activations; its output into r->scratch;
     * its backward from dout = d(its output) to the activations' a->dln = d(its input)
     * (written) and unit u's gradients */
    void (*forward)(const struct dec_run *r, int l, const struct dec_layer *v,
                    const void *const *w);
    void (*out)(const struct dec_run *r, int l, const struct dec_layer *v, const void *const *w);
    void (*backward)(const struct dec_run *r, int l, const struct dec_layer *v,
                     const struct dec_unit *u, const void *dout);
    /* its activations: bytes of the tsr_act_id buffers it owns (p: the plan of a pass), layer
     * l's view of them in the allocated stacks, and in a decode chunk's buffers */
    void (*acts)(struct dec_plan *p, size_t bytes[TSR_A_COUNT]);
    void (*view)(const struct dec_plan *p, const tsr_acts *a, int l, struct dec_layer *v);
    void (*kv_view)(const tsr_kv_cache *kv, const tsr_model *m, struct dec_layer *v);
    /* the bytes its layer l keeps per sequence in a decode cache of cap positions on be (0 or
     * NULL: none) */
    size_t (*cache_bytes)(const tsr_model *m, const tsr_backend *be, int l, int cap);
    /* training FLOPs per token of layer l beyond 6 x the parameters a token passes through (its
     * attention scores, a linear layer's state products; NULL: none; docs/mfu.md) */
    double (*flops)(const tsr_model *m, int l, int T);
    /* of its parameters per layer, those a token does not pass through (the experts it is not
     * routed to; NULL: none) */
    double (*idle)(const tsr_model *m);
    /* the key of a model setting this kind runs that backend be has no entry for, or NULL */
    const char *(*missing)(const tsr_model *m, const tsr_backend *be);
} tsr_layer_kind;

/* The rows, each in its file: the frame (model.c), the mixers (mixer_attention.c,
 * mixer_deltanet.c, mixer_mla.c), the MLPs (mlp_dense.c: dense, gated; mlp_moe.c); the
 * multi-token prediction modules' own tensors (mtp.c), a frame row. */
extern const tsr_layer_kind kind_root, kind_block, kind_mtp;
extern const tsr_layer_kind kind_attention, kind_deltanet, kind_mla;
extern const tsr_layer_kind kind_dense, kind_gated, kind_moe;

/* Every row (layer_kinds.c): the frame's two, then the mixers, then the MLPs, each half in the
 * order its layers are chosen (the last serves every layer). NULL-terminated. */
extern const tsr_layer_kind *const tsr_layer_kinds[];

/* The first row listing tensor id (*kind its kind), or NULL: what every model's row of it says
 * (name, kind, per layer or not, FP8); rows that share a tensor (dense, gated) agree on those. */
const tsr_param_row *layer_param_row(tsr_param_id id, const tsr_layer_kind **kind);
/* The kind whose tensor id is in a model of config c: of the rows listing it, the first that
 * serves a layer of c, else the first (model_init keeps it in m->kind_of). */
const tsr_layer_kind *layer_kind_of(const tsr_model_config *c, tsr_param_id id);
/* Layer l's mixer and MLP rows in a model of config c (0 <= l < n_layer). */
const tsr_layer_kind *model_mixer(const tsr_model_config *c, int l);
const tsr_layer_kind *model_mlp(const tsr_model_config *c, int l);
/* The row whose tensor id is in model m (the one of the kinds m uses, where two list it: dense
 * and gated share the dense MLP's tensors), and its param row. */
const tsr_layer_kind *model_param_kind(const tsr_model *m, tsr_param_id id);
const tsr_param_row *model_param_row(const tsr_model *m, tsr_param_id id);
/* k is m's row of its tensors: of the rows that list them, the one m uses (dense or gated), or
 * the only one (used by a layer or not): the rows whose tensors, activations and backend entries
 * m has (their layout, acts, views and needs run) */
int model_kind_on(const tsr_model *m, const tsr_layer_kind *k);
/* Layer l of m is of kind k (k's half) */
int model_layer_is(const tsr_model *m, const tsr_layer_kind *k, int l);
/* The layers of m of kind k (n_layer for the block's rows, 0 for the root's) */
int model_kind_layers(const tsr_model *m, const tsr_layer_kind *k);

/* For a row's layout: tensor id of m (its name and kind from its row) is present or not, of
 * ndim dimensions d0 .. (numel 0 when absent). */
void model_param_shape(tsr_model *m, tsr_param_id id, int present, int ndim, int64_t d0,
                       int64_t d1, int64_t d2, int64_t d3);

#endif
