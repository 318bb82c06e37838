/* reward_proc.h — reward.kind = command: the user's program, one per rank, and the exchange with
 * it (reward.h has the protocol; docs/rl.md "The reward program"). Internal to reward.c. */
#ifndef TSR_REWARD_PROC_H
#define TSR_REWARD_PROC_H

#include "posttrain/reward.h"

/* Starts sh -c reward.command (under ulimit -v reward.memory_mib, leading a process group of its
 * own) under its keeper (reward_keeper.h) with pipes on its stdin and stdout. 0 or
 * TSR_EXIT_DATA. */
int reward_proc_start(reward_ctx *r, int rank, int world);
/* Sends the n requests and reads the n answers (reward.h's rules). 0, or TSR_EXIT_DATA with
 * r->err quoting the exchange (the program is then stopped). */
int reward_proc_score(reward_ctx *r, const reward_req *q, int n, double *reward, int *pass);
/* Closes its stdin, waits up to a second for it to end, then closes the keeper's lifeline (the
 * keeper SIGKILLs the program and all it started, orphans in other sessions too, and exits) and
 * reaps the keeper. No-op without one. */
void reward_proc_stop(reward_ctx *r);

#endif
