/* stage.h — node-local staging of dataset shards (docs/staging.md).
 *
 * One stager per dataset per process. On each node one process (local rank 0, is_stager = 1)
 * copies the shards the node will read next into stage_root/<8 hex of dataset_index_crc>/ in a
 * background thread: copy to NAME.tmp.HOST.PID, verify the payload CRC32C, fsync, rename to NAME
 * (committed). Every process redirects its reads (dataset_shard_redirect) to committed copies that
 * validate; until a copy is committed, reads are in place. When stage_root is on the shard's
 * filesystem, the stager hard-links instead of copying.
 *
 * Threads: every function here is called from one thread per stager (the trainer's main thread,
 * between steps, when no dataset_read_sample runs); the stager's own thread only copies. Messages
 * of the background thread are printed (tsr_warn) by the next stager_want/poll/wait_idle/close.
 *
 * Test knob: environment TSR_STAGE_NO_LINK=1 makes the stager copy even when it could hard-link
 * (tests use it to exercise the copy path on one filesystem).
 */
#ifndef TSR_STAGE_H
#define TSR_STAGE_H

#include <stdint.h>

#include "data/data.h"

typedef struct tsr_stager tsr_stager;

/* One per dataset per process. stage_root: the node-local directory (created if missing, mode
 * 0700); the dataset's copies live in stage_root/<8 hex of dataset_index_crc>/, each named like its
 * shard. cache_limit: bytes the staged files of this dataset may occupy (0 = unlimited).
 * is_stager: this process copies (local rank 0 of a node); others only install redirects to
 * committed files. Returns 0 or TSR_EXIT_USAGE after tsr_error naming stage_root and the fault
 * (not a directory, cannot be created, not writable), or TSR_EXIT_INTERNAL when the thread cannot
 * be started; *out is NULL on failure. The stager starts one background thread,
 * removes this host's stale NAME.tmp.HOST.PID files (of processes no longer alive) and counts the
 * committed files already there toward the cache (they are reused when they validate). */
int stager_open(tsr_stager **out, tsr_dataset *ds, const char *stage_root, uint64_t cache_limit,
                int is_stager);
/* Announces the next window: the shards the node will read, in order of first use (duplicates
 * and indices out of range are ignored). The previous call's list stays the current window.
 * Stager: replaces the copy queue with the uncommitted shards of the list, in order; before
 * copying a shard that would take the cache past cache_limit, evicts committed shards in neither
 * window, least recently requested first, but only if that makes room; else the shard is skipped
 * (read in place) and counted in skipped_for_space. Also notices committed files that vanished.
 * Non-stager: remembers the list only. */
void stager_want(tsr_stager *s, const int *shards, int n);
/* Main thread, at a step boundary: installs redirects for shards of the current and next window
 * whose committed file exists and validates (payload CRC included: O(size), once per file);
 * drops the redirects of shards in neither window. A staged file that fails validation is reported
 * with tsr_warn naming it, deleted (stager; re-staged at the next stager_want) and read in place. A
 * redirected file deleted by someone is still read through its mapping; the stager stages it again
 * and the redirect moves to the new file at a later poll. */
void stager_poll(tsr_stager *s);
/* Tests: blocks until the copy queue is empty (every shard staged, skipped or failed).
 * Non-stager: returns at once. */
void stager_wait_idle(tsr_stager *s);
/* Like stager_wait_idle, for at most timeout_s seconds. Returns 1 when the queue was still
 * busy at the deadline, else 0 (non-stager: 0 at once). */
int stager_wait_idle_for(tsr_stager *s, double timeout_s);

/* Object-store datasets (dataset_s3): how many of shards[0..n) have no redirect yet (a caller
 * polls and waits until 0: such shards are never read in place), or -1 when the stager could not
 * stage a shard for good (403/404, retries exhausted, an object whose size or checksum differs
 * from the index after FETCH_TRIES fetches, a shard that does not fit cache_limit), with why
 * naming the object. Non-stager processes never see -1 (their stager's does). */
int stager_local(tsr_stager *s, const int *shards, int n, char *why, size_t why_len);

typedef struct tsr_stage_stats {
    uint64_t staged_reads, in_place_reads; /* from dataset_read_counts */
    uint64_t files_staged, bytes_staged;   /* copied or linked by this process */
    uint64_t files_evicted, skipped_for_space, linked;
    uint64_t cache_bytes; /* committed staged bytes of this dataset now (non-stager: a dir scan) */
    uint64_t failed;      /* copies that failed (I/O error, checksum mismatch) or were rejected */
} tsr_stage_stats;
void stager_stats(const tsr_stager *s, tsr_stage_stats *st);
/* Stops the thread (an unfinished copy is abandoned and its temporary file removed; nothing
 * unfinished is ever under a committed name), drops the redirects, frees s. Staged files stay for
 * the next job on the node. Call before dataset_close. NULL is a no-op. */
void stager_close(tsr_stager *s);

#endif
