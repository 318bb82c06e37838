/* gpu_ring.c — the ring over the device (gpu_ring.h). */
#include "gpu/gpu_ring.h"

#include <stdio.h>
#include <string.h>

#include "common.h"

/* model_ring.h's transport: the exchange on the context communicator, its end marked for the
 * compute stream to wait on */
static void *ring_start(void *ctx, const void *send, void *recv, size_t bytes) {
    gpu_ring *r = ctx;
    gpu_comm_after(r->comm, r->after);
    gpu_comm_ring_shift(r->comm, send, recv, bytes);
    tcu_event e = r->marks[r->next];
    r->next = (r->next + 1) % GPU_RING_MARKS;
    gpu_comm_mark(r->comm, e);
    return e;
}

static void ring_wait(void *ctx, void *handle) {
    gpu_ring *r = ctx;
    tcu_stream_wait_event(r->s, handle);
}

static void ring_gather_host(void *ctx, const void *mine, void *all, size_t bytes) {
    dist_group_allgather(((gpu_ring *)ctx)->group, mine, all, bytes);
}

static void ring_sum(void *ctx, double *buf, size_t n) {
    dist_group_allreduce_sum_f64(((gpu_ring *)ctx)->group, buf, n);
}

int gpu_ring_init(gpu_ring *r, const tsr_mesh *mesh, tcu_stream s) {
    const tsr_mesh_group *context = mesh_group(mesh, TSR_MESH_CONTEXT);
    const int N = context->size, rank = mesh_group(mesh, TSR_MESH_WORLD)->rank;
    char why[512] = "";
    memset(r, 0, sizeof *r);
    r->s = s;
    r->comm = gpu_comm_open(context, s, why, sizeof why);
    if (!r->comm) {
        if (rank == 0)
            tsr_error("device = \"cuda\" with parallel.context = %d: %s", N, why);
        return TSR_EXIT_USAGE;
    }
    r->group = context->cpu;
    for (int i = 0; i < GPU_RING_MARKS; i++) r->marks[i] = tcu_event_create();
    r->ring.N = dist_group_size(r->group);
    r->ring.r = dist_group_rank(r->group);
    r->ring.comm = (tsr_ring_comm){r, ring_start, ring_wait, ring_gather_host, ring_sum};
    if (rank == 0)
        printf("context parallelism: the ring over %s, %d ranks a group\n", gpu_comm_name(r->comm),
               N);
    return 0;
}

void gpu_ring_free(gpu_ring *r) {
    if (!r->comm) return;
    ring_free(&r->ring);
    for (int i = 0; i < GPU_RING_MARKS; i++) tcu_event_destroy(r->marks[i]);
    gpu_comm_close(r->comm);
    memset(r, 0, sizeof *r);
}
