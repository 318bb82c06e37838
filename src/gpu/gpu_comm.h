/* gpu_comm.h — communication of device = cuda, one GPU per rank: gradient sums over the ranks,
 * the sharded modes' reduce-scatter and all-gather, the expert exchange's all-to-all-v, context
 * parallelism's ring exchange.
 *
 * Two implementations, picked at link time: gpu_comm_nccl.c (the CUDA build: NCCL, loaded with
 * dlopen so a binary that never trains on a GPU needs no libnccl; the communicator bootstrapped
 * by broadcasting ncclGetUniqueId over MPI) and gpu_comm_mpi.c (the host emulator of the CUDA
 * backend, where device memory is host memory: MPI_Allreduce, MPI_Alltoallv). Collectives run on their own
 * stream, ordered after the compute stream's work at the time of the call, so the backward pass
 * of earlier layers overlaps them.
 */
#ifndef TSR_GPU_COMM_H
#define TSR_GPU_COMM_H

#include <stddef.h>

#include "cuda_ops.h"
#include "dist.h"

typedef struct gpu_comm gpu_comm;

/* Collective over the world: the ranks passing the same color form one communicator, ranked by
 * key (color 0, key = rank: the world; parallel.sharding = hsdp makes a group's and a replica
 * set's). Returns NULL with the reason in why when it cannot be made (every rank learns of a
 * failure: the result is agreed). */
gpu_comm *gpu_comm_open(int color, int key, tcu_stream compute, char *why, size_t n);
/* What carries the sums, for the banner ("NCCL 2.27.3", "MPI (host memory)"). */
const char *gpu_comm_name(const gpu_comm *c);
int gpu_comm_size(const gpu_comm *c);
/* In-place sum over the ranks of the k slices base[off[i] .. + len[i]) (fp32), as one grouped
 * operation, after the work queued on the compute stream so far. Returns at once. */
void gpu_comm_allreduce(gpu_comm *c, float *base, const size_t *off, const size_t *len, int k);
/* recv (count fp32) = this rank's block of the element-wise sum over the ranks of send
 * (size * count fp32, blocks in rank order); after the compute stream's work so far. */
void gpu_comm_reduce_scatter(gpu_comm *c, const float *send, float *recv, size_t count);
/* recv (size * count elements of elem bytes) = every rank's send (count elements), rank order;
 * after the compute stream's work so far. */
void gpu_comm_all_gather(gpu_comm *c, const void *send, void *recv, size_t count, size_t elem);
/* All-to-all-v: recv[rd[r] ..] (rc[r] elements of elem bytes) = group rank r's send[sd[me] ..]
 * (its sc[me]), for every r (counts and displacements per group rank, in elements; sc[r] here
 * must equal rc[me] on r). After the compute stream's work so far, and the compute stream's later
 * work waits for it (the expert exchange needs its rows at once). NCCL: grouped ncclSend/ncclRecv
 * (NCCL >= 2.7); MPI: MPI_Alltoallv on host memory. */
void gpu_comm_alltoallv(gpu_comm *c, const void *send, const size_t *sc, const size_t *sd,
                        void *recv, const size_t *rc, const size_t *rd, size_t elem);
/* The ring exchange of context parallelism (src/gpu/gpu_ring.c): bytes of send to group rank
 * (me + 1) mod size, as many from (me - 1) mod size into recv, after the compute stream's work so
 * far. NCCL: a grouped ncclSend/ncclRecv on the communication stream, returning at once (the
 * compute stream waits for it through an event marked after it: gpu_comm_mark); MPI: on host
 * memory, complete when it returns. */
void gpu_comm_ring_shift(gpu_comm *c, const void *send, void *recv, size_t bytes);
/* The communication stream, made to wait for the compute stream's work so far: copies queued on
 * it run in order with the collectives (packing a unit before its reduce-scatter, adding a
 * piece after it). */
tcu_stream gpu_comm_follow(gpu_comm *c);
/* c's collectives queued from now on wait (on the device) for everything queued on before's
 * stream so far: communicators used concurrently must run their collectives in the same order on
 * every rank (NCCL's rule), which two streams alone do not ensure. NULL before: nothing. */
void gpu_comm_after(gpu_comm *c, gpu_comm *before);
/* Records e on the communication stream (after everything queued there so far). */
void gpu_comm_mark(gpu_comm *c, tcu_event e);
/* The compute stream waits (on the device) for every collective queued so far. */
void gpu_comm_wait(gpu_comm *c);
void gpu_comm_close(gpu_comm *c);

#endif
