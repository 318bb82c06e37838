/* watchdog.h — the run's two watchdogs (docs/tessera-train.md, WATCHDOGS). Below the trainer, the
 * post-training objectives and the data loader, which all name the phase they are in; it knows
 * the world, the config's watchdog keys and the figures of a step, nothing of the trainer.
 *
 * Straggler/MFU: every watchdog.window steps the ranks allgather their mean compute time per step
 * (forward + backward, without waiting in collectives) and their wall time; a rank slower than
 * watchdog.slow_factor x the ranks' lower median, or an MFU under watchdog.min_mfu, for
 * watchdog.patience consecutive windows ends the run with a checkpoint and exit 86, naming the rank
 * and its host. Every rank decides from the same gathered numbers, so they agree without voting.
 *
 * Hang: with watchdog.hang_timeout > 0 a thread on each rank watches the phase the main thread is
 * in (watchdog_phase); one that lasts longer than the timeout makes the rank print its phase, step
 * and how long, and abort the whole run (MPI_Abort, exit 3) so that Slurm requeues it. */
#ifndef TSR_WATCHDOG_H
#define TSR_WATCHDOG_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "dist/dist.h"

/* (grpo: the rollout phase is WD_ROLLOUT while decoding, WD_REWARD while the reward scores,
 * WD_EXCHANGE in its collectives: a rank waiting there for a peer still decoding says so.
 * WD_DATA_WAIT: a staging window's wait for its shards, data/dataloader_stage.c; WD_PIPE_WAIT: a
 * pipeline stage's wait for its neighbour's activations or gradients, train/pipeline_exec.c; their
 * hang line adds what watchdog_detail last said: the source, the window, the shards committed; the
 * neighbour's stage and world rank, the microbatch) */
typedef enum {
    WD_IDLE, WD_DATA, WD_COMPUTE, WD_REDUCE, WD_OPTIMIZER, WD_EVAL, WD_CHECKPOINT, WD_ROLLOUT,
    WD_REWARD, WD_EXCHANGE, WD_DATA_WAIT, WD_PIPE_WAIT, WD_PHASES
} tsr_wd_phase;

/* What the straggler/MFU watchdog judges of a step (the trainer's step figures) */
typedef struct watchdog_step {
    int64_t step;                 /* the steps taken, this one included */
    double compute_time;          /* s of forward/backward on this rank, no collective waits */
    double step_time;             /* s of the whole step */
    int64_t tokens;               /* counted target tokens of the global batch */
    double flops_per_token, peak_flops; /* MFU = flops_per_token x tokens/s / (world x peak_flops),
                                         * docs/mfu.md */
} watchdog_step;

/* Collective over d's world. Gathers the ranks' host names; starts the hang thread when
 * cfg->watchdog.hang_timeout > 0 (cfg's watchdog keys are kept); `step`: the steps taken. */
void watchdog_start(const tsr_dist *d, const tsr_config *cfg, int64_t step);
/* The main thread enters a phase of step `step` (cheap: two atomic stores). */
void watchdog_phase(tsr_wd_phase phase, int64_t step);
/* What the main thread waits for in WD_DATA_WAIT (a line, at most 511 bytes kept), for the hang
 * line; it does not restart the phase's clock. Between watchdog_start and watchdog_stop. */
void watchdog_detail(const char *what);
/* Collective at a step boundary: accounts the step; at a window's end judges it. Returns 1 when
 * the run must checkpoint and exit 86 (rank 0 has printed why and logged it into metrics, the
 * run's metrics.jsonl or NULL), else 0. */
int watchdog_after_step(const watchdog_step *s, FILE *metrics);
void watchdog_stop(void);
/* Test-only injections for the watchdogs' tests (docs/tessera-train.md, WATCHDOGS):
 * TSR_FAULT="KIND:MS:RANK" makes RANK sleep MS ms here (watchdog_slow_fault), TSR_FAULT=
 * "KIND:STEP:RANK" makes RANK stop here for good in step STEP (1-based; watchdog_hang_fault). */
void watchdog_slow_fault(const char *kind, int rank);
void watchdog_hang_fault(const char *kind, int64_t step, int rank);
/* Whether the main thread is saving a checkpoint or evaluating (async-signal-safe: one atomic load). */
int watchdog_saving_or_evaluating(void);

#endif
