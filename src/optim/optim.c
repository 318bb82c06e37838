/* optim.c — the optimizer slot (optim.h): optim.name's table and the calls through it. */
#include "optim/optim.h"

#include <stdio.h>
#include <string.h>

#include "dist/dist.h"

static const optim_api *const apis[TSR_OPTIM_COUNT] = {
    [TSR_OPTIM_ADAMW] = &optim_adamw,
    [TSR_OPTIM_MUON] = &optim_muon,
};
_Static_assert(sizeof apis / sizeof *apis == TSR_OPTIM_COUNT, "apis vs tsr_optim_kind");

void optim_init(tsr_optim *op, const tsr_optim_config *o, const tsr_model *m, tsr_fsdp *f,
                const tsr_ops *ops) {
    memset(op, 0, sizeof *op);
    op->api = apis[o->name];
    op->o = *o;
    op->ops = ops;
    op->info = m->params_info;
    op->f = f;
    if (op->api->init) op->api->init(op, m);
}

void optim_free(tsr_optim *op) {
    if (op->api && op->api->free) op->api->free(op);
    memset(op, 0, sizeof *op);
}

void optim_step(tsr_optim *op, const optim_part *p, double lr, float gscale, int64_t step) {
    if (op->api) op->api->step(op, p, lr, gscale, step);
}

void optim_partition(const tsr_optim *op, size_t n, int W, size_t *displs, size_t *counts) {
    if (op->api && op->api->partition) op->api->partition(op, n, W, displs, counts);
}

size_t optim_scratch_bytes(const tsr_model *m, const tsr_optim_config *o, int G) {
    const optim_api *a = apis[o->name];
    return a->scratch_bytes ? a->scratch_bytes(m, o, G) : 0;
}

const char *const *optim_state_sets(const tsr_optim_config *o, int *n) {
    *n = apis[o->name]->n_state;
    return apis[o->name]->state;
}

optim_traffic optim_traffic_of(const tsr_optim *op) {
    if (!op->api || !op->api->traffic) return (optim_traffic){0, 0, 0};
    return op->api->traffic(op);
}

void optim_report(optim_traffic x, int64_t steps, int world) {
    if (x.G == 0) return; /* (no exchange: ddp, the CPU's zero1, or not Muon) */
    int64_t sent = (int64_t)x.sent;
    dist_allreduce_sum_i64(&sent, 1);
    if (dist_world_rank() == 0)
        printf("muon exchange: %lld bytes sent between ranks in %lld steps (all %d ranks; the "
               "formula: %llu per step and sharding group, %d groups)\n", (long long)sent,
               (long long)steps, world, (unsigned long long)x.step_bytes, world / x.G);
}
