/* gpu_comm_mpi.c — gpu_comm.h for the host emulator of the CUDA backend (kernels/cuda_emu/):
 * its device memory is host memory, so MPI moves it in place, on a group of dist_group_split.
 * Every call synchronises the compute stream first (a no-op in the emulator) and completes
 * before it returns, which keeps the ordering contract. */
#include "gpu/gpu_comm.h"

#include <stdlib.h>

#include "common.h"

struct gpu_comm {
    tcu_stream compute;
    tsr_group *g;
    int size, rank;
};

gpu_comm *gpu_comm_open(int color, int key, tcu_stream compute, char *why, size_t n) {
    (void)why, (void)n;
    gpu_comm *c = tsr_malloc(sizeof *c);
    c->compute = compute;
    c->g = dist_group_split(color, key);
    c->size = dist_group_size(c->g);
    c->rank = dist_group_rank(c->g);
    return c;
}

const char *gpu_comm_name(const gpu_comm *c) {
    (void)c;
    return "MPI (host memory: the CUDA emulator)";
}

int gpu_comm_size(const gpu_comm *c) { return c->size; }

void gpu_comm_allreduce(gpu_comm *c, float *base, const size_t *off, const size_t *len, int k) {
    if (c->size < 2) return;
    tcu_sync(c->compute);
    for (int i = 0; i < k; i++) dist_group_allreduce_sum_f32(c->g, base + off[i], len[i]);
}

void gpu_comm_reduce_scatter(gpu_comm *c, const float *send, float *recv, size_t count) {
    tcu_sync(c->compute);
    int *counts = tsr_malloc((size_t)c->size * sizeof(int));
    for (int r = 0; r < c->size; r++) counts[r] = (int)count;
    dist_group_reduce_scatter_f32(c->g, send, recv, counts);
    free(counts);
}

void gpu_comm_all_gather(gpu_comm *c, const void *send, void *recv, size_t count, size_t elem) {
    tcu_sync(c->compute);
    dist_group_allgather(c->g, send, recv, count * elem);
}

void gpu_comm_alltoallv(gpu_comm *c, const void *send, const size_t *sc, const size_t *sd,
                        void *recv, const size_t *rc, const size_t *rd, size_t elem) {
    tcu_sync(c->compute);
    dist_group_alltoallv(c->g, send, sc, sd, recv, rc, rd, elem);
}

void gpu_comm_ring_shift(gpu_comm *c, const void *send, void *recv, size_t bytes) {
    tcu_sync(c->compute);
    dist_wait(dist_group_ring_shift(c->g, send, recv, bytes));
}

tcu_stream gpu_comm_follow(gpu_comm *c) {
    tcu_sync(c->compute);
    return c->compute;
}

/* every call completes before it returns: already in order */
void gpu_comm_after(gpu_comm *c, gpu_comm *before) { (void)c, (void)before; }

void gpu_comm_mark(gpu_comm *c, tcu_event e) { tcu_event_record(e, c->compute); }

void gpu_comm_wait(gpu_comm *c) { (void)c; }

void gpu_comm_close(gpu_comm *c) {
    if (!c) return;
    dist_group_free(c->g);
    free(c);
}
