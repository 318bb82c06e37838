/* fit_world.c — --fit world (fit.h plan_fit_world; docs/planning.md "The smallest allocation"):
 * the fewest GPUs, in whole nodes, on which the recipe's plan fits a GPU of --gpu-mem GiB. */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "plan/fit.h"

#define GIB 1073741824.0
#define WORLD_MAX 1000000 /* --plan's bound */

/* the widest expert split of a MoE on W ranks: the largest divisor of the experts that divides
 * the ranks of a pipeline stage (config_check_world), the recipe's for a dense model */
static long long widest_experts(const tsr_config *cfg, long long W) {
    const long long E = cfg->model.moe_experts, P = cfg->pipeline > 1 ? cfg->pipeline : 1;
    if (E <= 0) return cfg->expert;
    long long best = 1;
    for (long long x = 1; x <= E && x <= W / P; x++)
        if (E % x == 0 && (W / P) % x == 0) best = x;
    return best;
}

/* cfg on W ranks (per_node of them a node) with the widest expert split and a micro_batch that
 * divides the per-rank batch: its device memory per rank, -1 refused */
static double planned_on(const tsr_config *cfg, const tsr_dist *d, plan_fit_trial trial,
                         long long W, long long *ep) {
    tsr_config *c = tsr_malloc(sizeof *c);
    tsr_dist dw = *d;
    *c = *cfg;
    dw.world = (int)W;
    c->expert = *ep = widest_experts(cfg, W);
    const long long fit = config_micro_fitting(c, (int)W);
    if (fit > 0) c->micro_batch = fit;
    const double b = trial(c, &dw, NULL, NULL);
    free(c);
    return b;
}

/* the most ranks the global batch feeds: a sequence for each data rank */
static long long world_cap(const tsr_config *cfg) {
    long long cap = cfg->global_batch;
    const long long split[] = {cfg->tensor, cfg->pipeline, cfg->context};
    for (int k = 0; k < 3; k++)
        if (split[k] > 1) cap *= split[k];
    return cap < WORLD_MAX ? cap : WORLD_MAX;
}

int plan_fit_world(const tsr_config *cfg, const tsr_dist *d, double gpu, plan_fit_trial trial) {
    const long long cap = world_cap(cfg), G = d->local_world > 0 ? d->local_world : 1;
    long long W = d->world, ep = 0, last = 0, last_ep = 0; /* last: the largest planned, too big */
    double b = -1, last_b = -1;
    for (; W <= cap; W += G) {
        b = planned_on(cfg, d, trial, W, &ep);
        if (b >= 0 && b <= gpu) break;
        if (b >= 0) last = W, last_b = b, last_ep = ep;
    }
    if (d->rank != 0) return 0;
    char before[200] = "";
    if (last)
        snprintf(before, sizeof before, "; %lld GPUs, the most planned that do not fit, need %.2f "
                 "GiB with parallel.expert = %lld", last, last_b / GIB, last_ep);
    if (W > cap)
        printf("fit: no world fits %.1f GiB a GPU (whole nodes from --plan's %lld up to %lld GPUs: "
               "global_batch = %lld feeds no more data ranks)%s\n", gpu / GIB, (long long)d->world,
               cap, (long long)cfg->global_batch, before);
    else
        printf("fit: %lld GPUs (%lld a node) is the smallest world that fits %.1f GiB a GPU, "
               "in whole nodes from --plan's %lld: %.2f GiB of device memory per rank with "
               "parallel.expert = %lld%s; a run: --plan %lld/%lld --set parallel.expert=%lld\n", W,
               G, gpu / GIB, (long long)d->world, b / GIB, ep, before, W, G, ep);
    fflush(stdout);
    return 0;
}
