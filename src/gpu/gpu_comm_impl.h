/* gpu_comm_impl.h — what the implementations of gpu_comm.h share with its dispatcher (gpu_comm.c);
 * nothing else includes it.
 *
 * Every communicator begins with a struct gpu_comm: its transport's table of functions and its
 * size. gpu_comm.c picks the transport at gpu_comm_open (gpu_comm_use) and calls through the
 * table, so one build carries two transports: the direct one (gpu_comm_nccl.c in the CUDA build,
 * gpu_comm_mpi.c in the emulator's) and the host-staged one (gpu_comm_staged.c, both builds).
 */
#ifndef TSR_GPU_COMM_IMPL_H
#define TSR_GPU_COMM_IMPL_H

#include "gpu/gpu_comm.h"

typedef struct gpu_comm_ops {
    const char *(*name)(const gpu_comm *c);
    void (*allreduce)(gpu_comm *c, float *base, const size_t *off, const size_t *len, int k);
    void (*allreduce_max)(gpu_comm *c, float *buf, size_t n);
    void (*reduce_scatter)(gpu_comm *c, const float *send, float *recv, size_t count);
    void (*all_gather)(gpu_comm *c, const void *send, void *recv, size_t count, size_t elem);
    void (*alltoallv)(gpu_comm *c, const void *send, const size_t *sc, const size_t *sd,
                      void *recv, const size_t *rc, const size_t *rd, size_t elem);
    void (*ring_shift)(gpu_comm *c, const void *send, void *recv, size_t bytes);
    tcu_stream (*follow)(gpu_comm *c);
    void (*after)(gpu_comm *c, gpu_comm *before);
    void (*mark)(gpu_comm *c, tcu_event e);
    void (*wait)(gpu_comm *c);
    void (*close)(gpu_comm *c);
} gpu_comm_ops;

struct gpu_comm {
    const gpu_comm_ops *ops;
    int size; /* ranks in the group */
};

/* The build's direct transport (NCCL; the emulator's MPI on its host "device" memory) and the
 * host-staged one: gpu_comm_open's contract, each. */
gpu_comm *gpu_comm_direct_open(const tsr_mesh_group *g, tcu_stream compute, char *why, size_t n);
gpu_comm *gpu_comm_staged_open(const tsr_mesh_group *g, tcu_stream compute, char *why, size_t n);

#endif
