/* config_world.c — a config against the world size, once it is known (config.h
 * config_check_world): parallel.tensor's and parallel.context's groups and chunks, the batch over
 * the data ranks, DPO's whole pairs, parallel.expert's groups.
 */
#include <stdio.h>

#include "common.h"
#include "config/config.h"

/* parallel.context = N: N divides the world and 2N the sequence (its 2N zig-zag chunks) */
static int check_context(const tsr_config *cfg, int world) {
    const long long N = cfg->context, T = cfg->seq_len;
    if (N > 1 && world % N != 0) {
        tsr_error("parallel.context = %lld does not divide the %d ranks: the ranks form a data x "
                  "context mesh of groups of %lld consecutive ranks; choose a divisor of %d",
                  N, world, N, world);
        return TSR_EXIT_USAGE;
    }
    if (N > 1 && T % (2 * N) != 0) {
        const long long lo = T / (2 * N) * 2 * N, hi = lo + 2 * N;
        if (lo > 0)
            tsr_error("seq_len = %lld is not divisible by 2 x parallel.context = %lld (each of the "
                      "%lld ranks of a context group holds 2 of the sequence's %lld chunks): the "
                      "nearest valid values are %lld and %lld", T, 2 * N, N, 2 * N, lo, hi);
        else
            tsr_error("seq_len = %lld is not divisible by 2 x parallel.context = %lld (each of the "
                      "%lld ranks of a context group holds 2 of the sequence's %lld chunks): the "
                      "nearest valid value is %lld", T, 2 * N, N, 2 * N, hi);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

/* parallel.tensor = T: T divides the world (the tensor groups are T consecutive ranks) */
static int check_tensor(const tsr_config *cfg, int world) {
    const long long T = cfg->tensor;
    if (T <= 1 || world % T == 0) return 0;
    tsr_error("parallel.tensor = %lld does not divide the %d ranks: the ranks form a tensor x "
              "context x data mesh of tensor groups of %lld consecutive ranks; choose a divisor "
              "of %d", T, world, T, world);
    return TSR_EXIT_USAGE;
}

/* parallel.pipeline = P: P divides the world (the stages' ranks are W / P consecutive ranks) */
static int check_pipeline(const tsr_config *cfg, int world) {
    const long long P = cfg->pipeline;
    if (P <= 1 || world % P == 0) return 0;
    tsr_error("parallel.pipeline = %lld does not divide the %d ranks: the ranks form a pipeline x "
              "data x context x tensor mesh, each stage %d / %lld consecutive ranks; choose a "
              "divisor of %d", P, world, world, P, world);
    return TSR_EXIT_USAGE;
}

/* the ranks that share their sequences: a tensor group times a context group times the
 * pipeline's stages (at least 1) */
static int shared_ranks(const tsr_config *cfg) {
    return (cfg->context > 1 ? (int)cfg->context : 1) * (cfg->tensor > 1 ? (int)cfg->tensor : 1) *
           (cfg->pipeline > 1 ? (int)cfg->pipeline : 1);
}

int config_check_world(const tsr_config *cfg, int world) {
    if (world < 1) {
        tsr_error("world size %d: expected at least 1 rank", world);
        return TSR_EXIT_USAGE;
    }
    if (check_pipeline(cfg, world)) return TSR_EXIT_USAGE;
    const int P = cfg->pipeline > 1 ? (int)cfg->pipeline : 1;
    if (check_tensor(cfg, world / P)) return TSR_EXIT_USAGE;
    if (check_context(cfg, world / P / (cfg->tensor > 1 ? (int)cfg->tensor : 1)))
        return TSR_EXIT_USAGE;
    /* the batch is split over the data ranks: the world, or world / (T N) under tensor and
     * context parallelism (a tensor group and a context group share their sequences) */
    const int N = shared_ranks(cfg), D = world / N;
    char ranks[160];
    if (P > 1)
        snprintf(ranks, sizeof ranks, "%d data ranks (%d ranks / parallel.pipeline x "
                 "parallel.tensor x parallel.context = %d)", D, world, N);
    else if (N > 1 && cfg->tensor > 1)
        snprintf(ranks, sizeof ranks, "%d data ranks (%d ranks / parallel.tensor x "
                 "parallel.context = %d)", D, world, N);
    else if (N > 1)
        snprintf(ranks, sizeof ranks, "%d data ranks (%d ranks / parallel.context = %d)", D,
                 world, N);
    else snprintf(ranks, sizeof ranks, "%d ranks", world);
    long long gb = cfg->global_batch, mb = cfg->micro_batch;
    if (gb % D != 0) {
        tsr_error("global_batch = %lld is not divisible by the %s: choose a global_batch that "
                  "is a multiple of %d (and of %d x micro_batch)", gb, ranks, D, D);
        return TSR_EXIT_USAGE;
    }
    if (mb > 0 && (gb / D) % mb != 0) { /* mb 0 = auto: a divisor is chosen at run time */
        tsr_error("per-rank batch %lld (global_batch %lld / %s) is not divisible by "
                  "micro_batch = %lld", gb / D, gb, ranks, mb);
        return TSR_EXIT_USAGE;
    }
    if (cfg->objective == TSR_OBJ_DPO && (gb / D) % 2 != 0) {
        tsr_error("per-rank batch %lld (global_batch %lld / %s) is odd: objective = \"dpo\" "
                  "gives each rank whole pairs; choose a global_batch that is a multiple of %d",
                  gb / D, gb, ranks, 2 * D);
        return TSR_EXIT_USAGE;
    }
    if (cfg->expert > 1 && (world / P) % cfg->expert != 0) {
        tsr_error("parallel.expert = %lld does not divide the %d ranks: expert parallelism splits "
                  "the ranks into groups of that many, each holding every expert once; choose a "
                  "divisor of %d", (long long)cfg->expert, world, world);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

long long config_micro_fitting(const tsr_config *cfg, int world) {
    const long long N = shared_ranks(cfg), D = world / N;
    const long long gb = cfg->global_batch, mb = cfg->micro_batch;
    const long long step = cfg->objective == TSR_OBJ_DPO ? 2 : 1; /* (dpo: whole pairs) */
    if (mb <= 0 || world % N != 0 || gb % D != 0 || (gb / D) % mb == 0) return 0;
    long long fit = mb - mb % step;
    while (fit > 0 && (gb / D) % fit != 0) fit -= step;
    return fit > 0 ? fit : 0; /* (dpo, an odd per-rank batch: config_check_world says why) */
}
