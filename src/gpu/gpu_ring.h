/* gpu_ring.h — context parallelism on device = cuda (docs/parallelism.md): the decoder's ring
 * (model/model_ring.h) over the device, its blocks passed round by a communicator of the context
 * group (gpu_comm.h: NCCL send/recv, or MPI in the emulator) beside the sharding's.
 */
#ifndef TSR_GPU_RING_H
#define TSR_GPU_RING_H

#include <stddef.h>

#include "cuda_ops.h"
#include "dist/dist.h"
#include "gpu/gpu_comm.h"
#include "mesh/mesh.h"
#include "model/model_ring.h"

#define GPU_RING_MARKS 4 /* exchanges in flight at most (model_ring.c has two) */

typedef struct gpu_ring {
    tsr_ring ring;             /* what the decoder runs (its comm: this transport) */
    gpu_comm *comm;            /* the context group: ranks rank / N * N .. + N - 1 */
    gpu_comm *after;           /* the dense gradients' communicator, ordered before each
                                * exchange (NCCL: communicators in one order on every rank), or
                                * NULL */
    tsr_group *group;          /* the same ranks, for the host's sums and gathers (the mesh's) */
    tcu_stream s;              /* the compute stream */
    tcu_event marks[GPU_RING_MARKS]; /* an exchange's end on the communication stream */
    int next;
} gpu_ring;

/* The ring of this rank's context group, the mesh's (N consecutive ranks; collective over the
 * world). 0, or TSR_EXIT_USAGE with the reason printed by rank 0 (no NCCL for several ranks). */
int gpu_ring_init(gpu_ring *r, const tsr_mesh *mesh, tcu_stream s);
void gpu_ring_free(gpu_ring *r);

#endif
