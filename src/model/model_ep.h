/* model_ep.h — expert parallelism (parallel.expert = EP; docs/moe.md), one exchange for both
 * backends: rows in the backend's activation type and memory, moved by MPI on the CPU or by the
 * tsr_ep_xfer a device path sets (src/gpu/gpu_ep.c on device = cuda).
 *
 * Groups (the mesh's expert and expert_data groups, mesh/mesh.h): the world splits into EP groups
 * of EP consecutive ranks (world rank r: group r / EP, index j = r % EP); each EP group holds
 * every expert once, rank j the E / EP experts e0 = j E / EP .. e0 + E / EP - 1 of every MoE
 * layer. The expert-data-parallel (EDP) group of a rank is the ranks with the same j (world / EP
 * of them): they hold the same experts and sum those experts' gradients.
 *
 * Storage: the expert tensors (expw1, expw2) leave the model's flat layout
 * (model_set_expert_parallel) for this store: w, g, m, v hold this rank's experts as
 * [expw1 (LM, E/EP, 2FE, C) | expw2 (LM, E/EP, C, FE)]. The dense tensors (the router included)
 * keep parallel.sharding (ddp, zero1, zero3, hsdp); the experts are replicated over the EDP group
 * like DDP whatever the sharding: gradients all-reduced over it, AdamW on every member. On
 * device = cuda this store is the host mirror of the device's (src/gpu/gpu_ep.h), which sums,
 * measures and updates the gradients there instead of ep_reduce, ep_sumsq and the optimizer
 * slot's update of the experts' part (optim/optim.h).
 *
 * Exchange (a MoE layer's forward, in the decoder's place of the experts' matmuls): the routed
 * rows, grouped by expert and so by owner, go to their owners by all-to-all; an owner orders what
 * it received by expert, then by source rank (so the order does not depend on timing), runs its
 * experts and sends each row's output back. The backward sends d(output) the same way and
 * d(input) back. Per MoE layer and microbatch a rank sends what it routes to the other ranks'
 * experts and receives their outputs back (forward), as much again in the backward.
 *
 * Under a pipeline (model_pp.h) the store holds the rank's part's MoE layers (gslot: their places
 * in the whole model; a pipeline chunk finds its layers' experts by them) and every group above
 * is formed within the stage's ranks; a stage's MoE layers are consecutive in the whole model
 * (one chunk a rank), so its first EP group writes their run of each expert tensor.
 *
 * Checkpoints keep global shapes: the experts are written by the first EP group (world ranks
 * 0 .. EP - 1), rank j its 1/EP of each expert tensor's flat elements (whole experts), after an
 * all-to-all within the group (ep_to_part); a load reads that part, sends the experts to their
 * holders (ep_from_part) and broadcasts them over the EDP groups: any EP degree and rank count
 * read the same file.
 *
 * Evaluations and ICL run through the exchange, every rank running as many forwards (idle ones
 * top up: model.h model_forward's B = 0); the end-of-run sample runs with every expert gathered
 * on every rank (ep_full), no exchange. */
#ifndef TSR_MODEL_EP_H
#define TSR_MODEL_EP_H

#include <stddef.h>
#include <stdint.h>

#include "dist/dist.h"
#include "mesh/mesh.h"
#include "backend.h"
#include "model/model.h"

typedef struct ep_slot ep_slot;

/* How the exchange moves rows when they live in a device's memory (device = cuda: src/gpu/gpu_ep.c
 * sets one on the EP group's communicator). NULL: the CPU's, MPI on host memory. Both are ordered
 * with the backend's queued work: they start after it, and work queued later sees their result. */
typedef struct tsr_ep_xfer {
    void *ctx;
    /* all-to-all-v over the EP group (ranks in group order): counts and displacements (EP each)
     * in elements of elem bytes */
    void (*alltoallv)(void *ctx, const void *send, const size_t *sc, const size_t *sd,
                      void *recv, const size_t *rc, const size_t *rd, size_t elem);
    /* dst = src, bytes, both in the device's memory */
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
} tsr_ep_xfer;

typedef struct tsr_ep {
    const tsr_ops *ops;        /* the allocator (peak memory counts the store) */
    int EP, j, El, e0;         /* degree, index in the EP group, experts per rank, first one */
    int E, LM, C, FE, n_slots;
    tsr_group *group, *edp;    /* the EP group, the EDP group (the mesh's: borrowed) */
    size_t x1, x2;             /* floats of one expert's expw1 (2FE C) and expw2 (C FE) */
    size_t n1, n;              /* floats of the local expw1 (LM El x1); of the store */
    const struct tsr_tp *tp;   /* tensor parallelism (model_tp.h; NULL without): the store holds
                                * this rank's split of each expert (FE its share) */
    size_t gx1, gx2, gn1, gn;  /* x1, x2, n1, n of whole experts (the checkpoint's; = x1 .. without
                                * tensor parallelism) */
    float *w, *g, *m, *v;      /* the store (n each): weights, gradients, AdamW moments */
    float *full;               /* ep_full on: every expert, [expw1 (LM,E,..) | expw2 (LM,E,..)] */
    ep_slot *slots;            /* (n_slots) the exchange's record of the last forward in each
                                * MLP activation slot: the store's own (slots0, one a layer) or
                                * a pipeline's activation set's (ep_slots_use) */
    ep_slot *slots0;
    int n_slots0;
    int *gslot;                /* (LM) a pipeline rank's part (model_pp.h): the whole model's MoE
                                * slot of each of the store's; NULL: the same */
    void *scratch[4];          /* backward and staging buffers, grown as needed (bytes) */
    size_t scratch_cap[4];
    int32_t *offs_h;           /* (E + 1) host copy of a layer's expert offsets */
    const tsr_ep_xfer *xfer;   /* how rows move (NULL: MPI on host memory) */
    tsr_backend xbe;           /* the backend the exchange's buffers live on (its act type is the
                                * payload's: fp32 on the CPU, bf16 on CUDA) */
    int xbe_set;
    uint64_t sent_bytes;       /* bytes this rank sent to other ranks in the exchanges */
} tsr_ep;

/* One MoE layer's routed experts as the decoder runs them (docs/moe.md "The layer" 4, "gpt-oss's
 * experts"): over rows grouped by expert (offs, E + 1), h = xg w1[e]^T (+ b1[e]), hg = the unit
 * of h (SwiGLU, or gpt-oss's clamped one), y = hg w2[e]^T (+ b2[e]). The same code runs all E
 * experts in the decoder and an owner's El under expert parallelism. */
typedef struct tsr_experts {
    const void *w1, *w2;         /* (E, 2FE, C), (E, C, FE) weights */
    const void *b1, *b2;         /* (E, 2FE), (E, C) biases (model.moe_expert_bias), or NULL */
    float *g1, *g2, *gb1, *gb2;  /* their gradients (accumulated), or NULL (frozen, forward) */
    int E, C, FE;
    int gptoss;                  /* model.moe_act = gptoss */
    float alpha, limit;          /* its sigmoid's scale (1.702) and clamp (model.swiglu_limit) */
} tsr_experts;
/* MoE layer weights w (and gradients g, or NULL) of model m as a tsr_experts of its E experts */
tsr_experts experts_of(const tsr_model *m, const void *const *w, float *const *g);
/* h (rows, 2FE), hg (rows, FE), y (rows, C) from xg (rows, C); offs (E + 1) in be's memory */
void experts_forward(const tsr_backend *be, const tsr_experts *x, const int32_t *offs, int rows,
                     const void *xg, void *h, void *hg, void *y);
/* Backward of experts_forward: dy (rows, C) holds d(y) and leaves with d(xg); dh (rows, 2FE),
 * dhg (rows, FE) scratch; x's gradients accumulate. */
void experts_backward(const tsr_backend *be, const tsr_experts *x, const int32_t *offs, int rows,
                      void *dy, const void *xg, const void *h, const void *hg, void *dh,
                      void *dhg);

/* The store for model m (after model_set_expert_parallel(m, EP)) over the mesh's expert and
 * expert_data groups (mesh_build made them, of EP = m->EP ranks and world / EP), and sets m->ep.
 * No communication. */
void ep_init(tsr_ep *ep, tsr_model *m, const tsr_mesh *mesh);
void ep_free(tsr_ep *ep);
/* The initial weights: this rank's slice of what model_init_weights gives the global tensors. */
void ep_init_weights(tsr_ep *ep, const tsr_model *m, uint64_t seed);
/* Unit u (model.h tsr_param_source) of a MoE layer: w[expw1], w[expw2] (and in backward g[..])
 * point at layer u - 1's experts: this rank's, or all of them under ep_full. */
void ep_unit(tsr_ep *ep, const tsr_model *m, int u, int backward, const void **w, float **g);
/* Unit u's expert tensors: 1 and their offsets o1 (expw1), o2 (expw2) in elements into the store
 * (full = 0) or into the every-expert layout of ep_full (full = 1); 0 when u is no MoE layer. The
 * CUDA path lays its device copy of the store out the same way. */
int ep_layer_offsets(const tsr_ep *ep, const tsr_model *m, int u, int full, size_t *o1,
                     size_t *o2);
/* Where this rank's El experts of MoE slot s (0 .. LM-1) of tensor which (0: expw1 (LM, E, 2FE,
 * C), 1: expw2 (LM, E, C, FE)) sit: *in_tensor, the element offset of the first in the global
 * tensor, and *in_store, in the whole experts' layout (gn floats: the store itself without tensor
 * parallelism; ep_whole_begin); returns their floats, contiguous in both (--init-from a Hugging
 * Face directory reads them straight into it). */
size_t ep_slot_span(const tsr_ep *ep, int which, int s, size_t *in_tensor, size_t *in_store);
/* A buffer of this rank's El whole experts (gn floats): ep->w itself without tensor parallelism,
 * else a zeroed one, which ep_whole_end splits into ep->w (the rank's share) and frees. */
float *ep_whole_begin(tsr_ep *ep);
void ep_whole_end(tsr_ep *ep, float *whole);
/* Whether the decoder exchanges rows (1), or runs all E experts locally (0: ep_full). */
int ep_exchanging(const tsr_ep *ep);

/* A MoE layer's experts, forward: xg (NK, C) the routed rows grouped by expert (offs, E + 1), as
 * moe_gather leaves them; y (NK, C) receives each row's expert output, the same order. x: w1, w2
 * this rank's experts of the layer, b1, b2 (and gb1, gb2) all E experts' (the biases are dense
 * tensors, on every rank: an owner uses its experts' rows of them). slot: the layer's slot of the MLP activations
 * (model_act_group_slot: the layers that activation checkpointing recomputes share one, as their
 * activations do), where what it received is kept for the backward. Every pointer is be's memory
 * and type (activations be->act, weights be->weight, offs int32); the offsets are read on the host
 * (be->to_host waits for be's queued work). The first call fixes the backend until ep_release.
 * Collective over the EP group. */
void ep_forward(tsr_ep *ep, const tsr_backend *be, int slot, const void *xg,
                const int32_t *offs, const tsr_experts *x, void *y, int NK);
/* Backward of the last ep_forward of slot: dxy (NK, C) holds d(y) and leaves with d(xg); x's
 * g1, g2 (this rank's experts' gradients) and gb1, gb2 (its experts' rows of the biases'
 * gradients; the dense all-reduce sums them over the ranks) accumulate. Collective over the EP
 * group. */
void ep_backward(tsr_ep *ep, const tsr_backend *be, int slot, void *dxy, const tsr_experts *x,
                 int NK);
/* The exchange's buffers freed (they live on the backend of the first ep_forward: call before
 * that backend shuts down); the next ep_forward may use another backend. */
void ep_release(tsr_ep *ep);
/* The records of n activation slots, each a layer's last forward for its backward: a pipeline
 * (src/train/pipeline*.c) holds several microbatches of a chunk in flight, each activation set
 * with records of its own, made current (ep_slots_use; NULL: the store's own) before the chunk's
 * pass over that set. ep_slots_free before ep_free. */
ep_slot *ep_slots_new(const tsr_ep *ep, int n);
void ep_slots_free(tsr_ep *ep, ep_slot *slots, int n);
void ep_slots_use(tsr_ep *ep, ep_slot *slots, int n);

void ep_zero_grads(tsr_ep *ep);
/* The experts' gradients summed over the EDP group. */
void ep_reduce(tsr_ep *ep);
/* Squared norm of the experts' summed gradients, every expert once (equal on all ranks). */
double ep_sumsq(const tsr_ep *ep, const tsr_ops *ops);
/* on = 1: every expert gathered into ep->full (the end-of-run sample; collective); 0: freed. */
void ep_full(tsr_ep *ep, int on);

/* Checkpoint layout: the part of each expert tensor written by world rank j < EP (ep_part_range);
 * ep_to_part fills part (gn floats: expw1's part then expw2's) from a store-shaped buffer
 * (w, m or v), ep_from_part the reverse. Collective over the EP group. Under tensor parallelism
 * the writers are the first EP group of tensor rank 0 and the calls collective over the tensor
 * groups of the first EP groups (every tensor rank's: expert_data rank 0): ep_to_part gathers
 * each expert whole on tensor rank 0 first (its shares summed into zeros), ep_from_part sends the
 * whole experts over the group after (part unread on the other tensor ranks). */
void ep_part_range(const tsr_ep *ep, int which, uint64_t *lo, uint64_t *hi);
size_t ep_part_floats(const tsr_ep *ep);
void ep_to_part(tsr_ep *ep, const float *store, float *part);
void ep_from_part(tsr_ep *ep, const float *part, float *store);
/* After a load into this rank's store by the first EP group: copied to the other EDP members. */
void ep_bcast(tsr_ep *ep, float *store);

#endif
