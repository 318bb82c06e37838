/* runlock.h — one writer per output: the lock file of a run directory (tessera-train,
 * RUN_DIR/tessera.lock) and of prep's output (OUT.lock beside OUT). docs/tessera-train.md "THE RUN
 * DIRECTORY LOCK" gives the rules; in short:
 *
 *   - Taking it: a temporary file beside the lock is written in full (the holder's program, host,
 *     boot id, PID and its start time, Slurm job, step and restart count, the time), then
 *     link(2)ed to the lock's name, which fails when the name exists: atomic on local disks, NFS
 *     (v2 and later: the link count is checked in case a retried reply lost the answer) and
 *     Lustre, which O_EXCL and flock are not everywhere. A reader never sees a partial lock file.
 *   - A lock that exists is stale only when its holder is provably gone: on this host (same boot)
 *     no process has its PID, or the one that has it started at another time; the host has booted
 *     since; it belongs to an earlier run of this Slurm job (SLURM_RESTART_COUNT is higher now: a
 *     requeued job restarts with its job id, maybe on another host, and takes its own lock back);
 *     squeue says its job (or its job step, for the same job) has ended. Anything else, a holder on
 *     another host without Slurm above all, holds: the message names it and the file to remove by
 *     hand if it is gone. A stale lock is taken over (renamed away, the link tried again).
 *   - A name that is not a regular file (a FIFO, a symbolic link, dangling or not, a directory,
 *     a socket) is refused with TSR_EXIT_DATA naming what it is; it is never opened (lstat, then
 *     O_NONBLOCK | O_NOFOLLOW), so a FIFO cannot hang the taker.
 *   - Releasing: at exit (the process that took it, not a child), or by tsr_lock_release. A
 *     SIGKILLed holder leaves the file behind: the next writer finds its holder gone.
 */
#ifndef TSR_RUNLOCK_H
#define TSR_RUNLOCK_H

#include <sys/types.h>

typedef struct tsr_lock {
    char path[4096];
    pid_t pid; /* the process that holds it (0: none) */
} tsr_lock;

/* What a lock file says ("tessera-lock 1" then "key value" lines). */
typedef struct tsr_lock_info {
    char what[64], host[256], boot[64], job[32], step[32];
    long pid;
    unsigned long long start; /* the process's start time: clock ticks since boot */
    long restart;             /* SLURM_RESTART_COUNT, -1 when not under Slurm */
    long long since;          /* when it was taken, seconds since the epoch */
} tsr_lock_info;

/* Takes the lock file at path for `what` ("tessera-train", "tessera prep"). Returns 0 (held,
 * released at exit), or TSR_EXIT_DATA after tsr_error: a live writer holds it (its program, host,
 * PID and job named, with why it counts as alive), or it cannot be written. Taking over a stale
 * lock prints a warning saying whose and why. */
int tsr_lock_take(tsr_lock *l, const char *path, const char *what);
/* Removes the lock file when this process holds it. */
void tsr_lock_release(tsr_lock *l);
/* Reads a lock file; 0, or -1 when it cannot be read or is not one. */
int tsr_lock_read(const char *path, tsr_lock_info *info);

#endif
