/* gpu_muon.h — optim.name = "muon" on device = cuda, in every sharding mode (docs/training.md
 * "Muon"; the maths in src/optim/muon.h, the matrices and owners in optim/muon_plan.h).
 *
 * Per matrix: the momentum in fp32 (AdamW's m over the matrix's elements), X = u / ||u|| in bf16
 * (transposed when the matrix has more rows than columns), ns_steps iterations whose products are
 * the backend's bf16 matmuls with fp32 accumulation (A = X X^T; A A = A A^T, A being symmetric;
 * B X as the input gradient of a product with weights X), the element-wise steps of cuda_muon.cu,
 * then the fp32 master weights and their bf16 copy.
 *   ddp: every rank, every matrix of the flat buffers; parallel.expert: every rank, the matrices of
 *        its experts' store (whole experts, replicated over the EDP group), whatever the sharding;
 *   zero1, zero3, hsdp: the device shard (gpu_shard.h) is fsdp.h's unit pieces, which cut
 *        matrices, so every mode runs the owners' exchange of the CPU's zero3 (src/optim/muon.c)
 *        from the same plan (muon_plan_shards over the shard's fsdp plan: zero1's own, over the
 *        world; zero3's and hsdp's, over the group): each rank's runs of u are sent to their
 *        owners (one all-to-all-v on the group's communicator, fp32), the owner orthogonalises its
 *        matrices whole and sends each rank its runs of O back in fp32 (a second one), and each
 *        rank updates its shard. Bytes per step and group: muon_plan.h muon_plan_step_bytes, the
 *        CPU's; under zero1 this is communication the CPU's zero1 does not have (its flat
 *        partition is cut between matrices, which the device's equal NCCL blocks cannot be).
 * It stays in the CUDA library, not in the optimizer slot (src/optim/): its buffers, stream and
 * communicator are the device's (tcu_*, gpu_comm), which the CPU library must not link.
 * The device memory: gpu_muon_bytes (the iteration's buffers; the owner's whole matrices and
 * the exchange's buffers), in the plan and the banner.
 */
#ifndef TSR_GPU_MUON_H
#define TSR_GPU_MUON_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "cuda_ops.h"
#include "gpu/gpu_comm.h"
#include "model/fsdp.h"
#include "model/model.h"
#include "optim/muon_plan.h"

typedef struct gpu_muon {
    int on;
    const tsr_optim_config *o;
    muon_plan p;
    tcu_stream s;
    float *u;                  /* (big) fp32: the momentum's output (ddp, the experts' store) */
    float *acc;                /* (1) the norm's sum of squares */
    tsr_bf16 *x, *y, *a, *b;   /* X, the next X (big); A and B (sq) */
    /* the exchange (zero1, zero3, hsdp) */
    gpu_comm *group;           /* the shard's group */
    size_t *dev_at;            /* (my runs) where each starts in the device shard (padded) */
    float *owned;              /* (p.owned_n) the matrices this rank orthogonalises, whole */
    float *sbuf, *rbuf;        /* (p.send_n, p.recv_n) */
    tsr_bf16 *obf;             /* (p.send_n) the O that came back, in bf16 for tcu_muon_apply
                                * (exact: O is the iteration's bf16 X) */
    uint64_t sent;             /* bytes this rank sent to the others in the exchange */
} gpu_muon;

/* Device bytes of Muon under optimizer o for model m (0 when o is not Muon): the iteration's
 * buffers, u only with flat matrices (ddp, or parallel.expert's store: flat = 1), and with G > 0
 * the exchange over groups of G (the rank needing the most: muon_plan_mem). */
size_t gpu_muon_bytes(const tsr_model *m, const tsr_optim_config *o, int flat, int G);
/* Plans and allocates (nothing when o is not Muon). f, dev_unit_at, group: the shard's plan,
 * where each unit's piece starts in the device shard and the group's communicator (zero1, zero3,
 * hsdp), else NULL (ddp). */
void gpu_muon_init(gpu_muon *mu, const tsr_model *m, const tsr_optim_config *o, tcu_stream s,
                   const tsr_fsdp *f, const size_t *dev_unit_at, gpu_comm *group);
void gpu_muon_free(gpu_muon *mu);
/* Muon on the matrices mx[0..n) of flat buffers (the model's, or the experts' store): params and
 * their bf16 copy wbf, grads, mom (AdamW's m). lr: Muon's, scheduled. */
void gpu_muon_flat(gpu_muon *mu, const muon_matrix *mx, int n, float *params, tsr_bf16 *wbf,
                   const float *grads, float *mom, double lr, float gscale);
/* Muon on the device shard (params, wbf, grads, mom of gpu_shard.h): the owners' exchange.
 * Collective over the group. */
void gpu_muon_shard(gpu_muon *mu, float *params, tsr_bf16 *wbf, const float *grads, float *mom,
                    double lr, float gscale);

#endif
