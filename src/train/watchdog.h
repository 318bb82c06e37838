/* watchdog.h — the trainer's two watchdogs (docs/tessera-train.md, WATCHDOGS).
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

/* (grpo: the rollout phase is WD_ROLLOUT while decoding, WD_REWARD while the reward scores,
 * WD_EXCHANGE in its collectives: a rank waiting there for a peer still decoding says so.
 * WD_DATA_WAIT: a staging window's wait for its shards, train_data.c; WD_PIPE_WAIT: a pipeline
 * stage's wait for its neighbour's activations or gradients, train/pipeline_exec.c; their hang
 * line adds what watchdog_detail last said: the source, the window, the shards committed; the
 * neighbour's stage and world rank, the microbatch) */
typedef enum {
    WD_IDLE, WD_DATA, WD_COMPUTE, WD_REDUCE, WD_OPTIMIZER, WD_EVAL, WD_CHECKPOINT, WD_ROLLOUT,
    WD_REWARD, WD_EXCHANGE, WD_DATA_WAIT, WD_PIPE_WAIT, WD_PHASES
} tsr_wd_phase;

struct tsr_trainer;
struct tsr_step_stats;
/* Collective. Gathers the ranks' host names; starts the hang thread when configured. */
void watchdog_start(struct tsr_trainer *t);
/* The main thread enters a phase of step `step` (cheap: two atomic stores). */
void watchdog_phase(tsr_wd_phase phase, int64_t step);
/* What the main thread waits for in WD_DATA_WAIT (a line, at most 511 bytes kept), for the hang
 * line; it does not restart the phase's clock. Between watchdog_start and watchdog_stop. */
void watchdog_detail(const char *what);
/* Collective at a step boundary: accounts the step; at a window's end judges it. Returns 1 when
 * the run must checkpoint and exit 86 (rank 0 has printed why and logged it), else 0. */
int watchdog_after_step(struct tsr_trainer *t, const struct tsr_step_stats *st);
void watchdog_stop(void);
/* Test-only injections for the watchdogs' tests (docs/tessera-train.md, WATCHDOGS):
 * TSR_FAULT="KIND:MS:RANK" makes RANK sleep MS ms here (watchdog_slow_fault), TSR_FAULT=
 * "KIND:STEP:RANK" makes RANK stop here for good in step STEP (1-based; watchdog_hang_fault). */
void watchdog_slow_fault(const char *kind, int rank);
void watchdog_hang_fault(const char *kind, int64_t step, int rank);
/* Whether the main thread is saving a checkpoint or evaluating (async-signal-safe: one atomic load). */
int watchdog_saving_or_evaluating(void);

#endif
