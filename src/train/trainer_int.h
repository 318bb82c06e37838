/* trainer_int.h — what the trainer's own files share, private to them (the rest of the tree
 * includes train/trainer.h or train/train_state.h): trainer.c (the step), trainer_init.c (the
 * start and the end), trainer_run.c (the loop around the steps), trainer_faults.c (the test-only
 * faults). Below trainer.h: it includes only the state, so no include goes in a circle. */
#ifndef TSR_TRAINER_INT_H
#define TSR_TRAINER_INT_H

#include "train/train_state.h"

/* The run's step strategy (ddp, zero1, fsdp, lora or device: trainer.c), chosen once at the end
 * of trainer_init. */
const struct trainer_strategy *trainer_pick_strategy(const tsr_trainer *t);

/* Test-only faults (TSR_FAULT; trainer_faults.c). "garbage:LO:HI": the rows of data batches
 * LO..HI-1 just loaded (t->data) replaced by pseudo-random tokens (a corrupt data window). */
void trainer_fault_garbage(tsr_trainer *t, int64_t d);
/* In a step's compute: "slow:MS:RANK" makes RANK
 * sleep MS ms in every step, "hang:STEP:RANK" stop for good in step STEP. */
void trainer_fault_compute(const tsr_trainer *t);
/* "nan:STEP:RANK" or "nan:FROM-TO:RANK": a NaN in RANK's gradients in those steps. */
void trainer_fault_nan(tsr_trainer *t);
/* "oom:MICRO:RANK": RANK's CPU backend holds the activations of MICRO sequences, not 2 x MICRO. */
void trainer_fault_oom(const tsr_trainer *t);
/* "kill:STEP:RANK", "usr1:STEP:RANK", "term:STEP:RANK": that signal to RANK after step STEP. */
void trainer_fault_signal(const tsr_trainer *t);

#endif
