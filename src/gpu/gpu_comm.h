/* gpu_comm.h — communication of device = cuda: gradient sums over the ranks, the sharded modes'
 * reduce-scatter and all-gather, the expert exchange's all-to-all-v, context parallelism's ring
 * exchange.
 *
 * Two transports in each build, picked at run time by parallel.gpu_comm (gpu_comm_use; the
 * dispatcher is gpu_comm.c):
 *   "nccl" (the default), the direct one: gpu_comm_nccl.c in the CUDA build (NCCL, loaded with
 *     dlopen so a binary that never trains on a GPU needs no libnccl; the communicator bootstrapped
 *     by broadcasting ncclGetUniqueId over MPI; one GPU per rank), gpu_comm_mpi.c in the host
 *     emulator of the CUDA backend (device memory is host memory: MPI moves it in place);
 *   "mpi", host-staged (gpu_comm_staged.c, both builds): device -> pinned host copies on the
 *     communication stream, MPI on the host by one communication thread per process, copies
 *     back. The fallback for a site whose NCCL is broken, and the transport that lets several
 *     ranks share one GPU (NCCL refuses that).
 * Collectives run on a communication stream, ordered after the compute stream's work at the time
 * of the call, so the backward pass of earlier layers overlaps them; every call returns at once,
 * and the compute stream waits for them only where a function below says so.
 */
#ifndef TSR_GPU_COMM_H
#define TSR_GPU_COMM_H

#include <stddef.h>

#include "cuda_ops.h"
#include "dist/dist.h"
#include "mesh/mesh.h"

typedef struct gpu_comm gpu_comm;

/* parallel.gpu_comm: which transport gpu_comm_open makes from now on (a process uses one) */
typedef enum { GPU_COMM_DIRECT = 0, GPU_COMM_STAGED = 1 } gpu_comm_kind;
void gpu_comm_use(gpu_comm_kind kind);
gpu_comm_kind gpu_comm_in_use(void);

/* A communicator over the ranks of the mesh's group g (mesh/mesh.h: the world, a context,
 * expert, expert_data, shard or replica group; the transports take its split from the mesh and
 * compute none). Collective over the world: every rank opens the same group at the same point.
 * Returns NULL with the reason in why when it cannot be made (every rank learns of a failure: the
 * result is agreed). */
gpu_comm *gpu_comm_open(const tsr_mesh_group *g, tcu_stream compute, char *why, size_t n);
/* What carries the sums, for the banner ("NCCL 2.27.3", "MPI staged through pinned host memory
 * (...the fallback transport)"). */
const char *gpu_comm_name(const gpu_comm *c);
int gpu_comm_size(const gpu_comm *c);
/* In-place sum over the ranks of the k slices base[off[i] .. + len[i]) (fp32), as one grouped
 * operation, after the work queued on the compute stream so far. Returns at once. */
void gpu_comm_allreduce(gpu_comm *c, float *base, const size_t *off, const size_t *len, int k);
/* In-place maximum over the ranks of buf (n fp32, device), after the work queued on the compute
 * stream so far (the FP8 all-gather's common amax: one call for a unit's tensors). Returns at
 * once; the group's later operations follow it. */
void gpu_comm_allreduce_max(gpu_comm *c, float *buf, size_t n);
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
 * (NCCL >= 2.7); MPI: MPI_Alltoallv on host memory (staged: on the pinned copies). */
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
 * every rank (NCCL's rule), which two streams alone do not ensure. NULL before: nothing. (The
 * staged transport has one stream and one thread per process: already in the calls' order.) */
void gpu_comm_after(gpu_comm *c, gpu_comm *before);
/* Records e on the communication stream (after everything queued there so far). */
void gpu_comm_mark(gpu_comm *c, tcu_event e);
/* The compute stream waits (on the device) for every collective queued so far. */
void gpu_comm_wait(gpu_comm *c);
void gpu_comm_close(gpu_comm *c);

#endif
