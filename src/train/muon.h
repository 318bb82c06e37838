/* muon.h — the Muon optimizer of the hidden weight matrices (optim.name = "muon";
 * docs/training.md "Muon").
 *
 * Each hidden matrix W (rows, cols) — every projection on its own, also where tessera stores them
 * fused: qkvw's q, k and v rows, SwiGLU's gate and up rows, each expert's gate, up and down, the
 * router, attention's and the MLP's output projections — takes per step, with g the summed
 * gradient times the clipping scale:
 *   buf = momentum * buf + g;  u = nesterov ? g + momentum * buf : buf
 *   O = NS(u): X = u / (||u||_F + 1e-7) (transposed when rows > cols), then ns_steps times
 *       A = X X^T;  B = b A + c A A;  X = a X + B X   with (a, b, c) = (3.4445, -4.7750, 2.0315)
 *   W = W (1 - lr wd) - lr * scale * O
 * scale = rms * sqrt(max(rows, cols)) (optim.muon.scale = rms: O's RMS is 1/sqrt(max(rows, cols)),
 * so the update's RMS is `rms`, as an AdamW update's, and AdamW's learning rates carry over) or
 * sqrt(max(1, rows / cols)) (shape). The products run through the backend's matmul (the fp32 op
 * table here; device = cuda: the bf16 one, src/gpu/gpu_train.c). Every other tensor (the
 * embeddings, the LM head, norms, biases) is AdamW's, with optim.lr, beta1, beta2, weight_decay.
 *
 * The momentum buffer is AdamW's first-moment buffer over the Muon matrices' elements (the
 * trainer's m, sharded as AdamW's moments are, checkpointed as optim/m/<name>); their second
 * moment stays zero. Where each matrix is orthogonalised:
 *   ddp: every rank, all of them (its whole flat buffer: no communication);
 *   zero1: the rank whose part holds it: the partition is cut at matrix boundaries
 *          (muon_partition), so every matrix lies in one part and the sharding's own
 *          reduce-scatter and all-gather are all the communication there is;
 *   zero3 / hsdp: an owner per matrix in each sharding group (muon_fsdp_plan: the matrices spread
 *          over the group's ranks by the iteration's cost), which receives the other ranks' pieces
 *          of u (one all-to-all), orthogonalises, and sends each rank its pieces of O back (one
 *          more). Bytes sent per step and group: 2 * 4 * sum over matrices of (numel - the
 *          owner's own piece), muon_fsdp_step_bytes; bench/comm_volume.sh measures it.
 */
#ifndef TSR_MUON_H
#define TSR_MUON_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "dist.h"
#include "model/fsdp.h"
#include "model/model.h"
#include "model/model_muon.h"

/* zero3 / hsdp: a run of a rank's shard inside a matrix */
typedef struct muon_seg {
    int mx;             /* the matrix */
    size_t shard, at, len; /* its offset in the shard, in the matrix, its floats */
} muon_seg;

typedef struct tsr_muon {
    int on;             /* optim.name = muon */
    tsr_optim_config o;
    unsigned char tensor[TSR_P_COUNT]; /* tensor id's elements are Muon's (else AdamW's) */
    int n;              /* matrices, in flat order */
    muon_matrix *mx;
    float *u, *x, *y, *a, *aa; /* scratch: u, X, the next X (largest matrix), A, A A (r x r) */
    /* zero3 / hsdp (muon_fsdp_plan) */
    const tsr_fsdp *f;
    int *n_segs;        /* per group rank */
    muon_seg **segs;    /* per group rank: its shard's runs of matrices, in shard order */
    size_t *owned_at;   /* per matrix: its place in `owned` (this rank owns it), else SIZE_MAX */
    float *owned;       /* the matrices this rank orthogonalises, whole */
    size_t *sc, *sd, *rc, *rd; /* (G) the exchange's counts and displacements */
    float *sbuf, *rbuf;
    uint64_t sent_bytes; /* floats x 4 this rank sent to the others in the exchange */
} tsr_muon;

/* The plan of model m's Muon matrices for optimizer o (on = o->name == muon; off: nothing is
 * allocated and muon_tensor answers 0), and the iteration's scratch. */
void muon_init(tsr_muon *mu, const tsr_model *m, const tsr_optim_config *o);
void muon_free(tsr_muon *mu);
/* Whether tensor id is updated by Muon (0 when Muon is off). */
int muon_tensor(const tsr_muon *mu, int id);
/* The zero1 partition of the flat layout (n floats) over W ranks: the trainer's cuts (16-float
 * aligned, n r / W) moved to the nearer end of a matrix they fall inside, so each matrix lies in
 * one rank's part. displs, counts (W). */
void muon_partition(const tsr_muon *mu, size_t n, int W, size_t *displs, size_t *counts);
/* O = NS(u) in place: u (rows, cols) holds the orthogonalised matrix after; fp32 products on
 * ops. */
void muon_orthogonalize(tsr_muon *mu, const tsr_ops *ops, float *u, int rows, int cols);
/* ddp, zero1: Muon on every matrix inside [lo, hi) of the flat layout (each wholly inside: the
 * partition), params the whole flat buffer, g and mom from lo. lr: Muon's, scheduled. */
void muon_flat_update(tsr_muon *mu, const tsr_ops *ops, float *params, const float *g, float *mom,
                      size_t lo, size_t hi, double lr, float gscale);
/* zero3 / hsdp: owners and the shards' runs of each matrix (no communication). */
void muon_fsdp_plan(tsr_muon *mu, const tsr_fsdp *f);
/* zero3 / hsdp: Muon on the shard (f->params, f->grads, mom in shard order): the exchange
 * described above. Collective over the group. */
void muon_fsdp_update(tsr_muon *mu, const tsr_ops *ops, tsr_fsdp *f, float *mom, double lr,
                      float gscale);
/* zero3 / hsdp: the bytes one sharding group's ranks send each other per step (the formula). */
uint64_t muon_fsdp_step_bytes(const tsr_muon *mu);
/* zero3 / hsdp: rank 0 prints the exchange's bytes over the run's steps, all ranks, beside the
 * formula's. Collective. */
void muon_report(const tsr_muon *mu, int64_t steps, int world);

#endif
