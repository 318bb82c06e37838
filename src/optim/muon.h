/* muon.h — the Muon optimizer of the hidden weight matrices (optim.name = "muon";
 * docs/training.md "Muon"), the slot's optim_muon (optim/optim.h): its state.
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
 * table here; device = cuda: the bf16 one, src/gpu/gpu_train_step.c). Every other tensor (the
 * embeddings, the LM head, norms, biases) is AdamW's, with optim.lr, beta1, beta2, weight_decay.
 *
 * The momentum buffer is AdamW's first-moment buffer over the Muon matrices' elements (the
 * trainer's m, sharded as AdamW's moments are, checkpointed as optim/m/<name>; under
 * parallel.expert the experts' store's m); their second moment stays zero. Where each matrix is
 * orthogonalised:
 *   ddp: every rank, all of them (its whole flat buffer: no communication);
 *   zero1: the rank whose part holds it: the partition is cut at matrix boundaries
 *          (the slot's partition), so every matrix lies in one part and the sharding's own
 *          reduce-scatter and all-gather are all the communication there is;
 *   zero3 / hsdp: an owner per matrix in each sharding group (muon_plan.h muon_plan_shards: the
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
#include "model/fsdp.h"
#include "model/model.h"
#include "optim/muon_plan.h"

struct tsr_tp;

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
    /* tensor parallelism (model/model_tp.h; m->tp): every matrix is a slice of the whole
     * model's; the whole one (the global plan's, pg) is all-reduced over the tensor group from
     * each element's counting rank into `whole`, orthogonalised on every rank of the group, and
     * each keeps its slice (muon_plan.h's scales are the whole matrices') */
    const tsr_model *m;
    muon_plan pg;
    float *whole;
} tsr_muon;

#endif
