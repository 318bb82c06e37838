/* gpu_comm.c — gpu_comm.h's dispatcher: the transport parallel.gpu_comm names (gpu_comm_use) makes
 * every communicator opened after it; each call goes to its communicator's transport. */
#include "gpu/gpu_comm.h"

#include "gpu/gpu_comm_impl.h"

static gpu_comm_kind kind_in_use = GPU_COMM_DIRECT;

void gpu_comm_use(gpu_comm_kind kind) { kind_in_use = kind; }

gpu_comm_kind gpu_comm_in_use(void) { return kind_in_use; }

gpu_comm *gpu_comm_open(const tsr_mesh_group *g, tcu_stream compute, char *why, size_t n) {
    return kind_in_use == GPU_COMM_STAGED ? gpu_comm_staged_open(g, compute, why, n)
                                          : gpu_comm_direct_open(g, compute, why, n);
}

const char *gpu_comm_name(const gpu_comm *c) { return c->ops->name(c); }

int gpu_comm_size(const gpu_comm *c) { return c->size; }

void gpu_comm_allreduce(gpu_comm *c, float *base, const size_t *off, const size_t *len, int k) {
    c->ops->allreduce(c, base, off, len, k);
}

void gpu_comm_allreduce_max(gpu_comm *c, float *buf, size_t n) { c->ops->allreduce_max(c, buf, n); }

void gpu_comm_reduce_scatter(gpu_comm *c, const float *send, float *recv, size_t count) {
    c->ops->reduce_scatter(c, send, recv, count);
}

void gpu_comm_all_gather(gpu_comm *c, const void *send, void *recv, size_t count, size_t elem) {
    c->ops->all_gather(c, send, recv, count, elem);
}

void gpu_comm_alltoallv(gpu_comm *c, const void *send, const size_t *sc, const size_t *sd,
                        void *recv, const size_t *rc, const size_t *rd, size_t elem) {
    c->ops->alltoallv(c, send, sc, sd, recv, rc, rd, elem);
}

void gpu_comm_ring_shift(gpu_comm *c, const void *send, void *recv, size_t bytes) {
    c->ops->ring_shift(c, send, recv, bytes);
}

tcu_stream gpu_comm_follow(gpu_comm *c) { return c->ops->follow(c); }

void gpu_comm_after(gpu_comm *c, gpu_comm *before) {
    if (before) c->ops->after(c, before);
}

void gpu_comm_mark(gpu_comm *c, tcu_event e) { c->ops->mark(c, e); }

void gpu_comm_wait(gpu_comm *c) { c->ops->wait(c); }

void gpu_comm_close(gpu_comm *c) {
    if (c) c->ops->close(c);
}
