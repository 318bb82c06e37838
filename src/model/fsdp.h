/* fsdp.h — fully sharded parameters (parallel.sharding = zero3 | hsdp) on the CPU backend
 * (docs/sharding.md).
 *
 * Units: unit 0 is the root (wte, wpe, lnfw, lnfb), unit l+1 is layer l's slices of the per-layer
 * tensors, unit L+1+d multi-token prediction's depth d's decoder layer (its frame's norms and
 * eh_proj are root tensors); a unit's elements are its tensors' slices concatenated in
 * tsr_param_id order. The ranks of a sharding group (G ranks: the world under zero3, parallel.replica_group under hsdp) split
 * every unit into G contiguous pieces, rank order, of fsdp_piece_len floats each (the last ones
 * short or empty): a rank's shard is its piece of each unit, units in order. Equal pieces are what
 * NCCL's reduce-scatter and all-gather need, so the CUDA path (src/gpu/gpu_shard.c) uses this
 * plan too, with each piece padded to the full length on the device. It lives with the model (it
 * is the model's sharded tsr_param_source) so that both the trainer (src/train) and the CUDA path
 * (src/gpu, below the trainer) include it downward. Weights, gradients and both
 * AdamW moments live only as shards.
 *
 * A step: the model asks for each unit just before using it (tsr_param_source): a layer's weights
 * are all-gathered into one of two layer buffers, and the next layer's gather is started before
 * the current one is computed (forward: l+1, backward: l-1); after a layer's backward its gradients
 * are reduce-scattered into the owners' shards. The root stays gathered for the step (the LM head
 * and the embedding use wte at both ends), its gradients accumulate over the microbatches and are
 * reduce-scattered once. Under hsdp the groups then all-reduce their shards (one collective per
 * step over the ranks holding the same piece).
 *
 * Checkpoints stay at global shapes: the shards are exchanged (all-to-all within the group) into
 * the contiguous flat partition checkpoints use (16-float aligned parts of the flat layout, rank
 * order), which the first group writes and reads; a load sends the parts back to the shards and
 * broadcasts them to the other groups.
 */
#ifndef TSR_FSDP_H
#define TSR_FSDP_H

#include <stddef.h>
#include <stdint.h>

#include "dist/dist.h"
#include "mesh/mesh.h"
#include "model/model.h"

typedef struct fsdp_seg {
    int id;          /* tensor */
    size_t flat;     /* offset of the slice in the flat parameter layout (model.h) */
    size_t at, len;  /* offset in the unit and length */
} fsdp_seg;

typedef struct fsdp_unit {
    size_t size;
    int n_seg;
    fsdp_seg seg[TSR_P_COUNT];
    size_t piece;         /* fsdp_piece_len(size, G): rank r's piece starts at r * piece */
    int *counts, *displs; /* per group rank: its piece of the unit (the last ones may be short
                           * or empty) */
} fsdp_unit;

/* A run of a rank's shard that is one run of the flat layout (one tensor). */
typedef struct fsdp_piece {
    int id;
    size_t flat, shard, len;
} fsdp_piece;

typedef struct tsr_fsdp {
    tsr_model *m;
    const tsr_ops *ops;
    int G, R;                 /* group size, number of groups (replicas) */
    int frozen;               /* no gradients (LoRA's base: fsdp_init) */
    int grank, gindex;        /* rank in the group, index of the group */
    tsr_group *group, *replicas; /* the mesh's shard and replica groups (mesh/mesh.h; borrowed,
                                  * NULL in a layout): replicas holds the ranks with the same
                                  * grank in every group */
    int n_units;              /* L + 1 + D (D: the multi-token prediction depths) */
    fsdp_unit *units;
    size_t *unit_at;          /* (n_units) where this rank's piece of each unit starts in its shard */
    size_t shard_n;           /* floats in this rank's shard */
    int *n_pieces;            /* per group rank */
    fsdp_piece **pieces;      /* per group rank: its shard as flat runs, in shard order */
    float *params, *grads;    /* the shard */
    float *root_w, *root_g;   /* unit 0, gathered for the step; its gradients */
    int root_valid;
    float *slot[2];           /* layer units gathered: the current and the prefetched one */
    int slot_unit[2];
    void *slot_req[2];        /* a gather in flight into the slot, or NULL */
    float *layer_g;           /* the gradients of the layer in backward */
    float *piece_buf;         /* this rank's piece of one unit's summed gradients */
    size_t max_layer;
    size_t *part_counts, *part_displs; /* the checkpoint partition of the flat layout over G */
    tsr_param_source src;
    uint64_t sent_bytes;      /* floats x 4 this rank put into gathers and reduce-scatters */
    float *xbuf;              /* the checkpoint layout exchange's send and receive buffers
                               * (fsdp_exchange_floats each; at the first exchange, kept) */
    size_t xmost;             /* the exchange's longest stream between two ranks */
    int xmost_known;          /* (found at the first exchange) */
    /* a deterministic replay's tap (train/sdc_replay.c): each layer's gradients of a microbatch
     * as its backward completes them, before their reduce-scatter (NULL: none); tap_only: not
     * reduce-scattered (a replay's recomputation: the shards keep the step's gradients) */
    void (*tap)(void *ctx, const float *g, size_t n);
    void *tap_ctx;
    int tap_only;
} tsr_fsdp;

/* Floats a rank's checkpoint layout exchange sends to its peers in one round (at most
 * FSDP_XCHUNK, or (G - 1) parts when those are smaller; the environment's TSR_FSDP_XCHUNK, 16 or
 * more, replaces FSDP_XCHUNK: a test switch for many rounds) */
#define FSDP_XCHUNK ((size_t)4 << 20)

/* Per-rank bytes of a sharded step (the memory plan; nothing allocated): the weight and gradient
 * shards, AdamW (two shards), and the gather buffers (root weights and gradients, two layer
 * buffers, one layer's gradients, one unit's piece of reduce-scattered gradients). frozen (a
 * LoRA base, fsdp_init): the weights and their gather buffers only. */
void fsdp_plan_bytes(const tsr_model *m, int G, int frozen, double *weights, double *grads,
                     double *optim, double *comm);
/* ceil(size / G) rounded up to 16 floats (64-byte aligned pieces). */
size_t fsdp_piece_len(size_t size, int G);
/* The plan only over the mesh's shard and replica groups (mesh_build made them: G = their
 * shard group's size): units, groups, pieces, checkpoint partition; no buffers, m->src
 * untouched, no communication. fsdp_free releases it (the groups stay the mesh's). */
void fsdp_plan(tsr_fsdp *f, tsr_model *m, const tsr_mesh *mesh);
/* The plan's layout alone, as group rank grank of a group of G sees it: units, pieces, the
 * checkpoint partition; no groups, no communication (the memory plan counts with it: Muon's
 * exchange, optim/muon_plan.h). fsdp_free releases it. */
void fsdp_layout(tsr_fsdp *f, const tsr_model *m, int G, int grank);
/* Builds the plan over the mesh's groups (fsdp_plan: world rank r is group rank r % G of group
 * r / G) and the buffers, and sets m->src. frozen (LoRA's base, docs/lora.md): no
 * gradient buffers; the source hands out no gradients (NULL) and reduces nothing; zero_grads
 * and finish_grads are not to be called. */
void fsdp_init(tsr_fsdp *f, tsr_model *m, const tsr_mesh *mesh, int frozen);
void fsdp_free(tsr_fsdp *f);
/* This rank's shard of the initial weights (model_init_weights_range over its pieces): the same
 * bits as the full initialisation's, with no full copy and 1/G of the draws. */
void fsdp_init_weights(tsr_fsdp *f, uint64_t seed);
void fsdp_zero_grads(tsr_fsdp *f);
/* After the last microbatch's backward: the root's gradients reduce-scattered into the shards,
 * then (hsdp) the shards all-reduced over the groups. */
void fsdp_finish_grads(tsr_fsdp *f);
/* The shard's weights changed (update, load): gathered copies are stale. */
void fsdp_params_changed(tsr_fsdp *f);
/* Checkpoint layout exchange within the group: shard (shard_n) <-> this rank's part of the flat
 * layout (part_counts[grank] floats starting at flat offset part_displs[grank]). */
void fsdp_shard_to_part(tsr_fsdp *f, const float *shard, float *part);
void fsdp_part_to_shard(tsr_fsdp *f, const float *part, float *shard);
/* The floats of each of the exchange's two kept buffers (send, receive) for n_params weights over
 * a group of G: the memory plan counts twice this (with the checkpoint's buffers) */
size_t fsdp_exchange_floats(size_t n_params, int G);

#endif
