/* gpu_comm_mpi.c — gpu_comm.h for the host emulator of the CUDA backend (kernels/cuda_emu/):
 * its device memory is host memory, so the gradients are summed by MPI in place. The compute
 * stream is synchronised first (a no-op in the emulator), which keeps the ordering contract. */
#include "gpu/gpu_comm.h"

#include <stdlib.h>

#include "common.h"

struct gpu_comm {
    tcu_stream compute;
    int world;
};

gpu_comm *gpu_comm_open(const tsr_dist *d, tcu_stream compute, char *why, size_t n) {
    (void)why, (void)n;
    gpu_comm *c = tsr_malloc(sizeof *c);
    c->compute = compute;
    c->world = d->world;
    return c;
}

const char *gpu_comm_name(const gpu_comm *c) {
    (void)c;
    return "MPI (host memory: the CUDA emulator)";
}

void gpu_comm_allreduce(gpu_comm *c, float *base, const size_t *off, const size_t *len, int k) {
    if (c->world < 2) return;
    tcu_sync(c->compute);
    for (int i = 0; i < k; i++) dist_allreduce_sum_f32(base + off[i], len[i]);
}

void gpu_comm_wait(gpu_comm *c) { (void)c; }

void gpu_comm_close(gpu_comm *c) { free(c); }
