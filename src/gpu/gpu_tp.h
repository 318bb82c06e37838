/* gpu_tp.h — tensor parallelism on device = cuda (parallel.tensor = T; docs/parallelism.md
 * "Tensor parallelism on the GPU"): the decoder's collectives over the tensor group
 * (model/model_tp.h tsr_tp_dev) on the device's bf16 activations, through a communicator of the
 * tensor group (gpu_comm.h: NCCL, or MPI when ranks share a GPU) beside the data-parallel one,
 * and the split model's gradients completed (the replicated tensors' partial sums over the
 * group) and their norm counted once over it.
 *
 * The sums run in fp32: the bf16 rows widened into a device scratch (tcu_bf16_to_f32), summed
 * (gpu_comm_allreduce / gpu_comm_reduce_scatter), rounded back (tcu_f32_to_bf16); the gathers
 * move the bf16 rows as they are. The cross-entropy's logits go to the host through the same
 * scratch (decoder_tp_dev.c). Each collective runs after the compute stream's work so far and
 * the data-parallel communicator's collectives queued before it, and the compute stream waits
 * for it (the next op reads it at once).
 */
#ifndef TSR_GPU_TP_H
#define TSR_GPU_TP_H

#include <stddef.h>

#include "cuda_ops.h"
#include "gpu/gpu_comm.h"
#include "gpu/gpu_grown.h"
#include "mesh/mesh.h"
#include "model/model.h"
#include "model/model_tp.h"

typedef struct gpu_tp {
    tsr_tp_dev dev;          /* the decoder's hooks (ctx: this) */
    tsr_tp *tp;              /* the host model's split (runs, groups) */
    gpu_comm *comm;          /* the tensor group */
    gpu_comm *after;         /* the data-parallel communicator, ordered before each collective,
                              * or NULL */
    tcu_stream s;            /* the compute stream */
    gpu_grown scr;           /* fp32 device scratch, grown (gpu_tp_scratch_bytes) */
    /* the flat gradients' slices the group sums (TP_SUM_TENSOR), and those this rank does not
     * count in the norm (held by every rank of the group: counted on one) */
    size_t *sum_off, *sum_len, *unc_off, *unc_len;
    int n_sum, n_unc;
} gpu_tp;

/* Device bytes of the scratch for microbatches of B x T on m (the split model): a sum's rows
 * widened and, under sequence parallelism, their reduced block; or the logits widened. */
size_t gpu_tp_scratch_bytes(const tsr_model *m, int B, int T);
/* The hooks over the mesh's tensor group for the split model m (m->tp; collective over the
 * world). 0, or TSR_EXIT_USAGE with the reason printed by rank 0. */
int gpu_tp_init(gpu_tp *x, const tsr_model *m, const tsr_mesh *mesh, tcu_stream s);
/* grads (the flat fp32 gradients): the partial ones summed over the group; the compute stream
 * waits for it. Collective over the tensor group. */
void gpu_tp_finish_grads(gpu_tp *x, float *grads);
/* The group's squared norm from this rank's sum of squares sq of every gradient it holds: the
 * slices it does not count taken out (acc: one device float of scratch), summed over the group.
 * Collective over the tensor group. */
double gpu_tp_sumsq(gpu_tp *x, double sq, const float *grads, float *acc);
void gpu_tp_free(gpu_tp *x);

#endif
