/* stop.h — stop requests (docs/tessera-train.md "STOP REQUESTS"): SIGUSR1 and SIGTERM ask the run
 * to checkpoint at the next step boundary and exit 85; the boundary itself is the trainer's
 * checkpointing_boundary (train/checkpointing.h), which asks stop_signalled, as does the data
 * loader's wait for a window's shards (data/dataloader.h). Beside the watchdog, below both: the
 * grace timer spares a rank the watchdog sees saving or evaluating. */
#ifndef TSR_STOP_H
#define TSR_STOP_H

/* SIGUSR1 and SIGTERM only set a flag (never checkpoint from a handler); a SIGTERM while steps run
 * also gives the rank a grace time to reach the next step boundary, after which a stuck rank exits
 * 143 (docs/tessera-train.md "STOP REQUESTS"). */
void stop_install_signals(void);
/* After each step: its wall time, which sets the SIGTERM's grace time (3 steps, 5 s at least). */
void stop_step_done(double step_seconds);
/* This rank got a stop signal. Local. */
int stop_signalled(void);
/* Every rank reached the boundary where the stop was agreed: the stop goes ahead, the grace
 * timer is disarmed. */
void stop_proceed(void);

#endif
