/* gpu_comm.h — gradient communication of device = cuda: sums over the ranks, one GPU per rank.
 *
 * Two implementations, picked at link time: gpu_comm_nccl.c (the CUDA build: NCCL, loaded with
 * dlopen so a binary that never trains on a GPU needs no libnccl; the communicator bootstrapped
 * by broadcasting ncclGetUniqueId over MPI) and gpu_comm_mpi.c (the host emulator of the CUDA
 * backend, where device memory is host memory: MPI_Allreduce). Collectives run on their own
 * stream, ordered after the compute stream's work at the time of the call, so the backward pass
 * of earlier layers overlaps them.
 */
#ifndef TSR_GPU_COMM_H
#define TSR_GPU_COMM_H

#include <stddef.h>

#include "cuda_ops.h"
#include "dist.h"

typedef struct gpu_comm gpu_comm;

/* Collective over the world. Returns NULL with the reason in why when the communicator cannot
 * be made (every rank learns of a failure: the result is agreed). */
gpu_comm *gpu_comm_open(const tsr_dist *d, tcu_stream compute, char *why, size_t n);
/* What carries the sums, for the banner ("NCCL 2.27.3", "MPI (host memory)"). */
const char *gpu_comm_name(const gpu_comm *c);
/* In-place sum over the ranks of the k slices base[off[i] .. + len[i]) (fp32), as one grouped
 * operation, after the work queued on the compute stream so far. Returns at once. */
void gpu_comm_allreduce(gpu_comm *c, float *base, const size_t *off, const size_t *len, int k);
/* The compute stream waits (on the device) for every collective queued so far. */
void gpu_comm_wait(gpu_comm *c);
void gpu_comm_close(gpu_comm *c);

#endif
