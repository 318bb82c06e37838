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
 * trainer's m, sharded as AdamW's moments are, checkpointed as optim/m/<name>; under
 * parallel.expert the experts' store's m); their second moment stays zero. Where each matrix is
 * orthogonalised:
 *   ddp: every rank, all of them (its whole flat buffer: no communication);
 *   zero1: the rank whose part holds it: the partition is cut at matrix boundaries
 *          (muon_partition), so every matrix lies in one part and the sharding's own
 *          reduce-scatter and all-gather are all the communication there is;
 *   zero3 / hsdp: an owner per matrix in each sharding group (model_muon.h muon_plan_shards: the
 *          matrices spread over the group's ranks by the iteration's cost), which receives the
 *          other ranks' pieces of u (one all-to-all), orthogonalises, and sends each rank its
 *          pieces of O back (one more). Bytes sent per step and group: 2 * 4 * sum over matrices
 *          of (numel - the owner's own piece), muon_plan_step_bytes; bench/comm_volume.sh
 *          measures it;
 *   parallel.expert: the experts' store, whole experts replicated over their EDP group, on every
 *          rank that holds them (like ddp, whatever the sharding of the dense tensors).
 * On device = cuda the library does all of this on the device (src/gpu/gpu_muon.h) from the same
 * plan; the trainer's tsr_muon stays off there.
 */
#ifndef TSR_MUON_H
#define TSR_MUON_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "dist.h"
#include "gpu/gpu_train_ctx.h"
#include "model/fsdp.h"
#include "model/model.h"
#include "model/model_muon.h"

typedef struct tsr_muon {
    int on;             /* optim.name = muon, device = cpu */
    tsr_optim_config o;
    muon_plan p;        /* the matrices; zero3 / hsdp: their owners and the exchange */
    const tsr_ops *ops; /* the scratch's allocator (the backend's: peak_mem_bytes counts it) */
    float *u, *x, *y, *a, *aa; /* the iteration: u, X, the next X (largest matrix), A, A A */
    float *owned;       /* zero3 / hsdp: the matrices this rank orthogonalises, whole */
    float *sbuf, *rbuf; /* zero3 / hsdp: the exchange's (p.send_n, p.recv_n) */
    tsr_fsdp *f;
    uint64_t sent_bytes; /* floats x 4 this rank sent to the others in the exchange */
} tsr_muon;

/* The plan of model m's Muon matrices for optimizer o (on = o->name == muon; off: nothing is
 * allocated and muon_tensor answers 0) and, with f (zero3 / hsdp), their owners over f's group;
 * the iteration's scratch and the exchange's buffers from ops. */
void muon_init(tsr_muon *mu, const tsr_model *m, const tsr_optim_config *o, tsr_fsdp *f,
               const tsr_ops *ops);
void muon_free(tsr_muon *mu);
/* The bytes muon_init allocates for model m under o on one rank (the memory plan; nothing
 * allocated): the iteration's five buffers and, with groups of G > 0 (zero3 / hsdp), the owned
 * matrices and the exchange's two (of the rank needing the most). 0 when o is not Muon. */
size_t muon_host_bytes(const tsr_model *m, const tsr_optim_config *o, int G);
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
/* parallel.expert: Muon on every matrix of the experts' store (w, g, mom: model_ep.h's). */
void muon_ep_update(tsr_muon *mu, const tsr_ops *ops, float *w, const float *g, float *mom,
                    double lr, float gscale);
/* zero3 / hsdp: Muon on the shard (f->params, f->grads, mom in shard order): the exchange
 * described above. Collective over the group. */
void muon_fsdp_update(tsr_muon *mu, const tsr_ops *ops, float *mom, double lr, float gscale);
/* zero3 / hsdp, and zero1 on device = cuda (gpu, the library's count): rank 0 prints the
 * exchange's bytes over the run's steps, all ranks, beside the formula's. Collective. */
void muon_report(const tsr_muon *mu, const gpu_train_ctx *gpu, int64_t steps, int world);

#endif
