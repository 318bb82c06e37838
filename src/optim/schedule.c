/* schedule.c — the learning-rate schedule (schedule.h, docs/training.md "Schedule"). */
#include "optim/schedule.h"

#include <math.h>

double lr_multiplier(tsr_sched_kind kind, double alpha_f, int64_t s, int64_t W, int64_t S,
                     int64_t D) {
    if (s < W) return (double)(s + 1) / (double)W;
    if (kind == TSR_SCHED_WSD) { /* stable, then the linear decay over the last D steps */
        if (s < S - D) return 1.0;
        W = S - D;
        kind = TSR_SCHED_LINEAR;
    }
    double p = (double)(s - W) / (double)(S - W > 1 ? S - W : 1);
    if (p > 1.0) p = 1.0;
    switch (kind) {
    case TSR_SCHED_COSINE: return alpha_f + (1.0 - alpha_f) * 0.5 * (1.0 + cos(M_PI * p));
    case TSR_SCHED_LINEAR: return 1.0 - (1.0 - alpha_f) * p;
    default: return 1.0;
    }
}

tsr_sched_steps sched_steps_of(const tsr_config *cfg, uint64_t epoch_samples) {
    const int64_t B = cfg->global_batch, T = cfg->seq_len;
    tsr_sched_steps sc = {duration_to_steps(cfg->max_duration, B, T, epoch_samples),
                          duration_to_steps(cfg->optim.warmup, B, T, epoch_samples), 0};
    if (cfg->optim.schedule == TSR_SCHED_WSD)
        sc.decay = decay_to_steps(cfg->optim.decay, sc.total, B, T, epoch_samples);
    return sc;
}

double sched_lr_at(const tsr_config *cfg, tsr_sched_steps sc, int64_t s) {
    return cfg->optim.lr * lr_multiplier(cfg->optim.schedule, cfg->optim.alpha_f, s, sc.warmup,
                                         sc.total, sc.decay);
}
