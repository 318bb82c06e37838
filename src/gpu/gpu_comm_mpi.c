/* gpu_comm_mpi.c — gpu_comm.h's direct transport for the host emulator of the CUDA backend
 * (kernels/cuda_emu/; parallel.gpu_comm = "nccl" there): its device memory is host memory, so MPI
 * moves it in place, on a communicator the mesh opens over the group (mesh_group_open). Every
 * call synchronises the compute stream first (a no-op in the emulator) and completes before it
 * returns, which keeps the ordering contract. */
#include "gpu/gpu_comm.h"

#include <stdlib.h>

#include "common.h"
#include "gpu/gpu_comm_impl.h"

typedef struct emu_comm {
    struct gpu_comm base; /* first: the dispatcher's view */
    tcu_stream compute;
    tsr_group *g;
} emu_comm;

static const gpu_comm_ops emu_ops;

gpu_comm *gpu_comm_direct_open(const tsr_mesh_group *g, tcu_stream compute, char *why, size_t n) {
    (void)why, (void)n;
    emu_comm *c = tsr_calloc(1, sizeof *c);
    c->base.ops = &emu_ops;
    c->compute = compute;
    c->g = mesh_group_open(g);
    c->base.size = dist_group_size(c->g);
    return &c->base;
}

static const char *emu_name(const gpu_comm *c) {
    (void)c;
    return "MPI (host memory: the CUDA emulator)";
}

static void emu_allreduce(gpu_comm *b, float *base, const size_t *off, const size_t *len, int k) {
    emu_comm *c = (emu_comm *)b;
    if (b->size < 2) return;
    tcu_sync(c->compute);
    for (int i = 0; i < k; i++) dist_group_allreduce_sum_f32(c->g, base + off[i], len[i]);
}

static void emu_allreduce_max(gpu_comm *b, float *buf, size_t n) {
    emu_comm *c = (emu_comm *)b;
    if (b->size < 2) return;
    tcu_sync(c->compute);
    dist_group_allreduce_max_f32(c->g, buf, n);
}

static void emu_reduce_scatter(gpu_comm *b, const float *send, float *recv, size_t count) {
    emu_comm *c = (emu_comm *)b;
    tcu_sync(c->compute);
    int *counts = tsr_malloc((size_t)b->size * sizeof(int));
    for (int r = 0; r < b->size; r++) counts[r] = (int)count;
    dist_group_reduce_scatter_f32(c->g, send, recv, counts);
    free(counts);
}

static void emu_all_gather(gpu_comm *b, const void *send, void *recv, size_t count, size_t elem) {
    emu_comm *c = (emu_comm *)b;
    tcu_sync(c->compute);
    dist_group_allgather(c->g, send, recv, count * elem);
}

static void emu_alltoallv(gpu_comm *b, const void *send, const size_t *sc, const size_t *sd,
                          void *recv, const size_t *rc, const size_t *rd, size_t elem) {
    emu_comm *c = (emu_comm *)b;
    tcu_sync(c->compute);
    dist_group_alltoallv(c->g, send, sc, sd, recv, rc, rd, elem);
}

static void emu_ring_shift(gpu_comm *b, const void *send, void *recv, size_t bytes) {
    emu_comm *c = (emu_comm *)b;
    tcu_sync(c->compute);
    dist_wait(dist_group_ring_shift(c->g, send, recv, bytes));
}

static tcu_stream emu_follow(gpu_comm *b) {
    emu_comm *c = (emu_comm *)b;
    tcu_sync(c->compute);
    return c->compute;
}

/* every call completes before it returns: already in order */
static void emu_after(gpu_comm *c, gpu_comm *before) { (void)c, (void)before; }

static void emu_mark(gpu_comm *b, tcu_event e) { tcu_event_record(e, ((emu_comm *)b)->compute); }

static void emu_wait(gpu_comm *c) { (void)c; }

static void emu_close(gpu_comm *b) {
    emu_comm *c = (emu_comm *)b;
    dist_group_free(c->g);
    free(c);
}

static const gpu_comm_ops emu_ops = {
    .name = emu_name, .allreduce = emu_allreduce, .allreduce_max = emu_allreduce_max,
    .reduce_scatter = emu_reduce_scatter,
    .all_gather = emu_all_gather, .alltoallv = emu_alltoallv, .ring_shift = emu_ring_shift,
    .follow = emu_follow,
    .after = emu_after, .mark = emu_mark, .wait = emu_wait, .close = emu_close,
};
