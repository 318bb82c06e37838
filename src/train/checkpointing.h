/* checkpointing.h — save, resume and stop requests for the trainer (DESIGN.md "Checkpoints",
 * "Stop requests"). Collective: every rank calls these at the same step boundary. */
#ifndef TSR_CHECKPOINTING_H
#define TSR_CHECKPOINTING_H

#include "train/trainer.h"

/* SIGUSR1 and SIGTERM only set a flag (never checkpoint from a handler). */
void checkpointing_install_signals(void);
/* At a step boundary: did any rank get a stop signal? (one all-reduce) */
int checkpointing_stop_requested(void);
/* Writes and commits a checkpoint of the current step; logs time and bytes/s. */
int checkpointing_save(tsr_trainer *t);
/* At start: resume from resume_path if given, else from run_dir's latest valid checkpoint if any;
 * on a fresh run with init_from, load the weights only. Returns 0 (resumed or fresh) or an exit
 * code after reporting. */
int checkpointing_resume(tsr_trainer *t, const char *resume_path, const char *init_from);

#endif
