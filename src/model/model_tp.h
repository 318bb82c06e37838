/* model_tp.h — tensor parallelism (parallel.tensor = T; docs/parallelism.md "Tensor
 * parallelism"): a model's matrices split over the T ranks of a tensor group (mesh/mesh.h), by
 * the split rules of its layer kinds' tensor rows (layer_kind.h), and what the decoder's
 * communication points, the trainer's gradient sums and the checkpoints need of the split.
 *
 * The split model. Rank t of the group holds a model whose sizes are the global ones divided by
 * T where a rule splits them: NH / T query heads, KVH / T key/value heads (or the one head its
 * query heads read when KVH < T: replicated over T / KVH ranks), F / T of the MLP's width (of
 * the gate's and the up projection's each), Vp / T vocabulary rows (t Vp / T ..), the linear
 * layers' HK / T and HV / T heads. Every rank of the group lays its tensors out alike (the same
 * offsets), so the data-parallel machinery (ddp, zero1: the tensor_data group's sums and parts)
 * runs on the split model as on a whole one. m->global keeps the whole model's layout (the
 * checkpoint's shapes, the initialisation's element numbers, the FLOPs per token).
 *
 * Runs. Each tensor of the split model is a list of runs, each a strided copy of a block of the
 * global tensor: count times len elements, local + k lstride in the split tensor holding global
 * + k gstride in the global one. A run's gradient is complete on the rank (a split block), or
 * partial and summed over the group (a replicated tensor whose rank sees a share of the tokens
 * or heads, a bias one rank adds) or over the tensor_kv group (a replicated key/value head); a
 * replicated run counts in the gradient norm on one rank of those that hold it.
 *
 * The decoder (decoder.c, decoder_tp.c) splits each layer Megatron's way: the column-parallel
 * projections (q, k, v by heads; the MLP's up and gate by columns) need their input whole, the
 * row-parallel ones (the attention's output projection, the MLP's down projection) give partial
 * sums. With sequence parallelism (parallel.sequence, sp) the frame between them (norms,
 * residual adds) holds this rank's N / T of the N = B T tokens: an all-gather before a
 * column-parallel half, a reduce-scatter after its row-parallel end, the reverse in the
 * backward; without it one all-reduce per half each way. The embedding and the head are split
 * by vocabulary rows; the cross-entropy never gathers the logits (the max and the sums of
 * exponentials all-reduced). On the CPU backend the collectives run on host fp32 buffers
 * (dist.h); on a device backend (device = cuda) through the hooks its owner sets (tsr_tp_dev:
 * src/gpu/gpu_tp.h), the cross-entropy's rows staged through the host (decoder_tp_dev.c).
 */
#ifndef TSR_MODEL_TP_H
#define TSR_MODEL_TP_H

#include <stddef.h>
#include <stdint.h>

#include "dist/dist.h"
#include "mesh/mesh.h"
#include "model/model.h"

/* How a run's gradient is completed: it is whole on the rank, or summed over the tensor group,
 * or over the tensor_kv group */
typedef enum { TP_SUM_NONE = 0, TP_SUM_TENSOR, TP_SUM_KV } tp_sum;

typedef struct tp_run {
    int id;                  /* tensor */
    size_t count, len;       /* count blocks of len elements */
    size_t local, lstride;   /* block k at local + k lstride in the split tensor */
    size_t global, gstride;  /* and at global + k gstride in the global one */
    unsigned char sum;       /* tp_sum */
    unsigned char counted;   /* this rank counts it in the gradient norm */
} tp_run;

typedef struct tsr_tp {
    int T, t;                /* the group's ranks, this rank's place */
    int sp;                  /* sequence parallelism (parallel.sequence) */
    int R;                   /* ranks holding one key/value head (1: the heads are split) */
    int v0, Vl;              /* this rank's first vocabulary row; of its Vp / T rows, the real
                              * ones (below the vocabulary size) */
    tsr_model global;        /* the whole model's layout (no buffers) */
    tp_run *runs;            /* this rank's runs, tensors in id order */
    size_t n_runs;
    tsr_group *group, *kv;   /* the mesh's tensor and tensor_kv groups (borrowed; NULL in a plan
                              * and when off) */
    float *red;              /* the partial gradients' sum buffer (tp_finish_grads), grown */
    size_t red_cap;
    double *xent;            /* the cross-entropy's per-row scratch, grown */
    size_t xent_cap;
    float *capped;           /* model.final_logit_softcapping: the last forward's capped logits
                              * (N, Vp / T), kept for the gradient's factor; grown */
    size_t capped_cap;
    uint64_t sent;           /* bytes this rank sent in the group's collectives (the ring
                              * algorithm's count: tp_collective_bytes) */
    /* a device backend (tsr_tp_dev): the logits' rows staged on the host (N, Vp / T) fp32, kept
     * from the forward for the backward; the rows' losses, token ids or loss weights (N); grown */
    float *hlogits, *hrow;
    size_t hlogits_cap, hrow_cap;
} tsr_tp;

/* The decoder's collectives over the tensor group on a device backend's activations (act
 * elements; set by the device model's owner, src/gpu/gpu_tp.c, on tsr_decoder.tpdev): gather:
 * all (T n) = every rank's x (n), in rank order; sum: buf (n) summed over the group in place;
 * sum_scatter: out (n / T) = this rank's block of the group's sum of buf (n); to_host and
 * to_device: n act elements of the backend to fp32 host memory and back (the cross-entropy's
 * rows). Each completes before the backend's later work reads its result. */
typedef struct tsr_tp_dev {
    void *ctx;
    void (*gather)(void *ctx, const void *x, void *all, size_t n);
    void (*sum)(void *ctx, void *buf, size_t n);
    void (*sum_scatter)(void *ctx, const void *buf, void *out, size_t n);
    void (*to_host)(void *ctx, float *host, const void *x, size_t n);
    void (*to_device)(void *ctx, void *x, const float *host, size_t n);
} tsr_tp_dev;

/* Tensor id's split as tensor parallelism takes it: its row's rule, dimension and parts, or
 * under TSR_SPLIT_EXPERTS its kind's cut inside each expert (layer_kind.h `within`) */
typedef struct tp_rule {
    int split, dim, parts; /* tsr_split_rule, ... */
} tp_rule;
tp_rule tp_rule_of(const tsr_model *m, tsr_param_id id);

/* After model_init (and before anything is allocated): m becomes rank t's share of a split over
 * T ranks (sp: sequence parallelism), its layout the split one, m->global and m->tp set; the
 * groups are set by tp_attach. T = 1 changes nothing. Dies (internal) when a tensor's runs do not
 * tile its split shape (config_tensor_split passed the sizes). */
void model_set_tensor(tsr_model *m, tsr_tp *tp, int T, int t, int sp);
/* The mesh's tensor and tensor_kv groups (a run's; not in a plan) */
void tp_attach(tsr_tp *tp, const tsr_mesh *mesh);
void tp_free(tsr_tp *tp);

/* Rank t's runs of tensor id of the global model g split over T (n_runs returned, at most
 * TP_MAX_RUNS written); sp as model_set_tensor's. */
#define TP_MAX_RUNS 4
int tp_tensor_runs(const tsr_model *g, int T, int t, int sp, tsr_param_id id, tp_run *runs);

/* Expert parallelism's store (model_ep.h) under a split: `experts` whole experts of `layers`
 * MoE layers (every one, or a pipeline stage's), [expw1 (layers, experts, 2FE, C) | expw2
 * (layers, experts, C, FE)] at whole, and this rank's split of them (FE / T of each, the
 * experts' rule) at split, laid out alike: to_split copies the rank's elements whole -> split,
 * else split -> whole (the other elements untouched). */
void tp_expert_copy(const tsr_tp *tp, int layers, int experts, float *whole, float *split,
                    int to_split);

/* The pieces of this rank's runs within the split flat range [lo, hi): f(ctx, l, g, n, counted)
 * for split flat elements [l, l + n) that are the whole model's flat elements [g, g + n), counted:
 * this rank counts them (model_tp.h's runs); in run order. (Muon's whole matrices: optim/muon.c) */
void tp_pieces(const tsr_tp *tp, const tsr_model *m, size_t lo, size_t hi,
               void (*f)(void *ctx, size_t l, size_t g, size_t n, int counted), void *ctx);
/* The split flat range [lo, hi) held at split (split[0] is element lo) made whole: whole's n
 * floats (whole[0] the whole model's flat element w0) zeroed, each rank of the group puts the
 * elements it counts at their places, the group sums them: every rank gets the whole, the same
 * bits (each element from one rank). Collective over the tensor group. (Muon's whole matrices;
 * the whole weights of GRPO's rollouts and its reference file: model_rollout.h) tp_take is the
 * way back, no communication: this rank's elements of [lo, hi) from whole. */
void tp_whole(const tsr_tp *tp, const tsr_model *m, size_t lo, size_t hi, const float *split,
              float *whole, size_t w0, size_t n);
void tp_take(const tsr_tp *tp, const tsr_model *m, size_t lo, size_t hi, const float *whole,
             size_t w0, float *split);

/* The bytes one rank sends in a collective over n ranks of bytes in all (the ring algorithm's:
 * an all-gather or a reduce-scatter of pieces of bytes / n sends (n - 1) pieces; an all-reduce
 * twice that) */
uint64_t tp_collective_bytes(int n, int allreduce, uint64_t bytes);

/* A run of the split flat layout held at data: elements [flat, flat + len) (a shard's pieces) */
typedef struct tp_span {
    size_t flat, len;
    float *data;
} tp_span;
/* tp_finish_grads and tp_sumsq over n spans (a zero3 / hsdp shard's pieces: one sum) */
void tp_finish_spans(tsr_tp *tp, const tsr_model *m, const tp_span *sp, size_t n);
double tp_sumsq_spans(const tsr_tp *tp, const tsr_model *m, const tp_span *sp, size_t n);
/* The gradients the group sums (the runs of TP_SUM_TENSOR, TP_SUM_KV) over the flat range
 * [lo, hi) of the split model, held at g (g[0] is flat element lo): summed over their groups in
 * place. Collective over the tensor group (and tensor_kv). */
void tp_finish_grads(tsr_tp *tp, const tsr_model *m, float *g, size_t lo, size_t hi);
/* The squared norm of the gradients g of the flat range [lo, hi) that this rank counts (every
 * element of the global model counted once over the group) */
double tp_sumsq(const tsr_tp *tp, const tsr_model *m, const float *g, size_t lo, size_t hi);
/* Floats of the runs the group sums (TP_SUM_TENSOR) and the tensor_kv group sums (TP_SUM_KV) in
 * the whole split model: the step's partial gradients */
void tp_partial_floats(const tsr_tp *tp, const tsr_model *m, size_t *tensor, size_t *kv);

/* The bytes one rank sends over the tensor group in a training step of `micro` microbatches of
 * B x T on m (its split set): the decoder's collectives (the embedding, each layer's two halves
 * forward and backward with their recomputations under activation checkpointing and the
 * branches' norms, the final norm, the head and the cross-entropy) and the partial gradients'
 * sums; act the activations' bytes (4 on the CPU) */
uint64_t tp_step_bytes(const tsr_model *m, int micro, int B, int T, size_t act);

/* Checkpoints at global shapes (docs/checkpoint-format.md; a pipeline rank's part, model_pp.h,
 * goes the same way with its part's runs in place of a split's): every rank r of the world writes the
 * part [io_lo[r], io_hi[r]) of the global flat layout (16-float aligned parts in rank order);
 * the split model's state is held, per rank, as a range [hold_lo, hold_hi) of its split flat
 * layout (its part over its tensor_data group; empty on a rank that holds none). Each global
 * element is taken from the one rank that counts it (model_tp.h's runs) and holds it;
 * tp_to_global fills this rank's global part gpart from every rank's held range (held: this
 * rank's, element hold_lo first), tp_from_global gives every rank that holds an element its value
 * from the global parts. tp_io_plan gathers every rank's layout once (collective over the world);
 * the exchanges are all-to-alls over the world, each rank enumerating the runs it shares with
 * each other rank (no index travels). */
typedef struct tp_io {
    int W, rank;
    tsr_group *world;          /* the mesh's world communicator (borrowed) */
    size_t *io_lo, *io_hi;     /* (W) each rank's part of the global flat layout */
    size_t *hold_lo, *hold_hi; /* (W) each rank's held range of its split layout */
    int *trank;                /* (W) each rank's layout: its tensor rank (a pipeline rank's
                                * part: its pipeline rank, model_pp.h) */
    size_t *counts;            /* (4 W) the exchange's counts and displacements, sent, received */
} tp_io;
void tp_io_plan(tp_io *io, const tsr_model *m, const tsr_mesh *mesh, size_t hold_lo,
                size_t hold_hi);
void tp_io_free(tp_io *io);
/* floats of this rank's global part */
size_t tp_io_part(const tp_io *io);
void tp_to_global(tp_io *io, const tsr_model *m, const float *held, float *gpart);
void tp_from_global(tp_io *io, const tsr_model *m, const float *gpart, float *held);

#endif
