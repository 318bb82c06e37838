/* fit.h — does a run fit a GPU of a given memory, and the largest seq_len or micro_batch that does
 * (tessera-train --gpu-mem GIB, --fit KEY; docs/planning.md "Does it fit"). The memory compared is
 * the device memory plan per rank (device = cuda), the one --plan prints; the search plans each
 * value it tries as --plan does (trainer_init of a dry run, printing nothing), so it searches the
 * plan's own memory function. */
#ifndef TSR_PLAN_FIT_H
#define TSR_PLAN_FIT_H

#include "config/config.h"
#include "dist/dist.h"

/* PLAN_FIT_LAYOUT: the layout search (plan/layout.h), not a key's largest value; PLAN_FIT_WORLD:
 * the fewest GPUs (plan_fit_world) */
typedef enum plan_fit_key {
    PLAN_FIT_NONE = 0, PLAN_FIT_SEQ_LEN, PLAN_FIT_MICRO_BATCH, PLAN_FIT_LAYOUT, PLAN_FIT_WORLD
} plan_fit_key;

/* --gpu-mem GIB: the GiB (0 < x <= 100000) into *bytes; --fit KEY: seq_len, micro_batch, layout
 * or world into *key. 0, or -1 with why. */
int plan_fit_parse_mem(const char *s, double *bytes, char *why, size_t n);
int plan_fit_parse_key(const char *s, plan_fit_key *key, char *why, size_t n);
/* --gpu-mem needs device = cuda (its plan is the device's), --fit one process: 0, or
 * TSR_EXIT_USAGE after saying why. Before the plan. */
int plan_fit_check(const tsr_config *cfg, int world, plan_fit_key key);
/* Rank 0 of d: "fits: X of Y GiB ..." or "does not fit: ... needs X" for a plan's device memory
 * per rank (device_bytes: plan_device_bytes's total) against gpu_bytes. */
void plan_fit_print(const tsr_dist *d, double device_bytes, double gpu_bytes);
/* One value the search tries: the device memory plan per rank of a run of cfg on the world d,
 * planned as --plan plans it (nothing allocated, nothing printed), or -1 when the config refuses
 * it; *per_rank (may be NULL): its per-rank batch, *pairs (may be NULL): its samples are whole
 * preference pairs. The trainer's (train/train_plan.c trainer_plan_trial): a plan of a config is
 * the trainer's dry start, which the plan, below the trainer, is handed. */
typedef double (*plan_fit_trial)(const tsr_config *cfg, const tsr_dist *d, int64_t *per_rank,
                                 int *pairs);
/* The largest key that fits gpu_bytes per rank for cfg on the world d (a plan's), each value
 * planned by trial: multiples of 128 (and of 2 x parallel.context) for seq_len, the divisors of
 * the per-rank batch for micro_batch; rank 0 says what it found and the memory there. 0, or an
 * exit code (a value the config refuses, said). One process: --fit plans, it runs nothing. */
int plan_fit_search(const tsr_config *cfg, const tsr_dist *d, plan_fit_key key, double gpu_bytes,
                    plan_fit_trial trial);
/* --fit world: the smallest world, in whole nodes from d's (PER_NODE a node: d->local_world), whose
 * plan of cfg fits gpu_bytes per rank, each world with the widest expert split of a MoE (the
 * largest divisor of the experts that divides a stage's ranks) and a micro_batch dividing its
 * per-rank batch, up to the ranks global_batch feeds; rank 0 says it ("a run: --plan W/G --set
 * parallel.expert=E") and the world before it. 0. One process. */
int plan_fit_world(const tsr_config *cfg, const tsr_dist *d, double gpu_bytes,
                   plan_fit_trial trial);

#endif
