/* common.h — exit codes, error reporting and small helpers shared by every tessera program.
 *
 * Errors come in two tiers (docs/style.md "Errors"): library code returns a status (0 = ok, else an
 * exit code below) after printing what went wrong with tsr_error(); programs turn a status into an
 * exit with tsr_exit() (or tsr_fail_all(), tsr_die() below). Messages say actual vs expected with units and a hint, go to stderr, and start with
 * the program's name, then "[rank R host]" once the rank is known in a multi-rank run, then the
 * kind: "tessera-train: [rank 1 node7] error: ..." (docs/cli.md "Error messages").
 */
#ifndef TSR_COMMON_H
#define TSR_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Exit codes of tessera-train (docs/tessera-train.md "EXIT STATUS", docs/man/tessera-train.1). */
enum tsr_exit {
    TSR_EXIT_OK = 0,       /* finished */
    TSR_EXIT_USAGE = 1,    /* usage or config error: do not requeue */
    TSR_EXIT_DATA = 2,     /* data or checkpoint error: do not requeue */
    TSR_EXIT_REQUEUE = 85, /* checkpoint committed after a stop request: requeue me */
    TSR_EXIT_SLOW = 86,    /* checkpoint committed because the run got slow: sweep, then requeue */
    TSR_EXIT_SDC = 87,     /* silent data corruption: the culprit in run_dir/sdc-culprit.json;
                            * exclude and drain its node, requeue (docs/health.md) */
    TSR_EXIT_INTERNAL = 3, /* a bug or an environment failure (out of memory, MPI error) */
};

/* Sets the "[rank R host]" prefix used by every message; call once the rank is known. */
void tsr_log_set_rank(int rank, int world);
/* The rank tsr_log_set_rank set (0 before it is called). */
int tsr_log_rank(void);
/* While muted, tsr_error and tsr_warn print nothing (tsr_die always prints). Ranks other than 0
 * mute themselves around collective phases (config, opening data) where every rank meets the
 * same error, so it is printed once. */
void tsr_log_mute(int mute);
/* 1 while muted (tsr_log_mute) */
int tsr_log_muted(void);
/* stderr: "PROGRAM: [rank R host] error: <msg>" (PROGRAM: the executable's name, e.g. tessera-train;
 * no rank in single-process runs). */
void tsr_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tsr_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* tsr_warn_hold: from now on warnings are kept (this process's, in order) until
 * tsr_warn_release prints them, so that a start's warnings come last, after its banner and plan
 * (docs/tessera-train.md "OUTPUT"); an error, or more than 64 KiB of them, prints them at once. */
void tsr_warn_hold(void);
void tsr_warn_release(void);
/* Test-only fault injection: TSR_FAULT holds comma-separated items "kind:args" (e.g.
 * "garbage:33:36,usr1:35:0"); returns the args of the first item of that kind, or NULL. The
 * kinds and who reads them: docs/spike-guard.md, docs/tessera-train.md (WATCHDOGS),
 * src/train/trainer_faults.c, trainer_init.c, sdc_fault.c (flip, matmul: docs/health.md),
 * src/watchdog/watchdog.c, src/dist/dist.c, src/data/stage.c. */
const char *tsr_fault(const char *kind);
/* Unilateral fatal error: message, then MPI_Abort(code) when MPI runs with >1 rank, else exit(code).
 * Use when other ranks may be waiting in a collective. */
_Noreturn void tsr_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Collective fatal error, reached by every rank with the same cause (a bad config, a corrupt shard
 * that every rank opened): only rank 0 prints, all ranks finalize MPI and exit(code). */
_Noreturn void tsr_fail_all(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Exit with a status already reported by tsr_error(); finalizes MPI. */
_Noreturn void tsr_exit(int code);
/* What tsr_die and tsr_exit (and tsr_fail_all) do before exit(code): abort_all(code) stops every
 * rank (MPI_Abort), finalize() shuts MPI down. The MPI wrapper (src/dist/dist.c) registers them when it
 * initializes and clears them when it finalizes, so this base layer calls no layer above it. NULL
 * (the default): nothing but exit. */
void tsr_set_exit_hooks(void (*abort_all)(int code), void (*finalize)(void));
/* The process groups of children that must end with this process when the run aborts (the
 * reward program's keeper, src/posttrain/reward_keeper.h, the leader of a group of its own: it ends what
 * it keeps on SIGTERM, then exits): registered (on = 1) while they run, unregistered (on = 0) once
 * stopped; tsr_kill_child_groups sends the registered groups SIGTERM, waits up to 2 s for their
 * leaders to exit, then SIGKILLs the groups (async-signal-safe: the hang watchdog's thread aborts
 * through it, src/dist/dist.c). */
void tsr_child_group(int pgid, int on);
void tsr_kill_child_groups(void);

/* Checked libc wrappers: on failure they die naming the call, the argument, file and line. */
void *tsr_malloc_(size_t n, const char *file, int line);
void *tsr_calloc_(size_t n, size_t size, const char *file, int line);
void *tsr_realloc_(void *p, size_t n, const char *file, int line);
#define tsr_malloc(n) tsr_malloc_((n), __FILE__, __LINE__)
#define tsr_calloc(n, s) tsr_calloc_((n), (s), __FILE__, __LINE__)
#define tsr_realloc(p, n) tsr_realloc_((p), (n), __FILE__, __LINE__)

/* Frees each of the n buffers (a NULL one is skipped, as free does): a struct's buffers released
 * in one call, tsr_free_all(dl->inputs, dl->targets, dl->starts). */
void tsr_free_n(void *const *ptrs, size_t n);
#define tsr_free_all(...)                                                                \
    tsr_free_n((void *const[]){__VA_ARGS__}, sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *))

/* With TSR_DEBUG=1 in the environment: "PROGRAM: debug: from FILE:LINE: CALL", the internal
 * location a status was relayed from; users see only the error itself. */
void tsr_trace(const char *file, int line, const char *call);

/* Relay a nonzero status from a library call, noting where it was relayed from (TSR_DEBUG=1). */
#define TSR_CHECK(call)                                                                  \
    do {                                                                                 \
        int tsr_check_rc_ = (call);                                                      \
        if (tsr_check_rc_ != 0) {                                                        \
            tsr_trace(__FILE__, __LINE__, #call);                                        \
            return tsr_check_rc_;                                                        \
        }                                                                                \
    } while (0)

/* Strict number parsing: the whole string must be a number in [lo, hi]. Return 0 on success. */
int tsr_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
int tsr_parse_f64(const char *s, double lo, double hi, double *out);

/* The fewest significant digits ("%.*g") that read back as exactly v: "4", "4.0000000001",
 * "1e+300" (nan, inf as printf writes them). */
void tsr_fmt_shortest(char *buf, size_t n, double v);

/* Wall clock in seconds (CLOCK_MONOTONIC). */
double tsr_now(void);
/* CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID): independent of how loaded the
 * machine is, unlike tsr_now's differences. */
double tsr_thread_cpu(void);
/* The most resident memory this process has used, in bytes (getrusage's ru_maxrss); 0 if unknown. */
size_t tsr_peak_rss(void);

/* snprintf that reports truncation as an error (returns nonzero). */
int tsr_snprintf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Deterministic counter-based random numbers (SplitMix64 finaliser over (seed, stream, counter)):
 * the value at a counter does not depend on how many were drawn before, so any rank can draw any
 * element of a stream. */
uint64_t tsr_hash64(uint64_t x);
uint64_t tsr_rand_u64(uint64_t seed, uint64_t stream, uint64_t counter);
double tsr_rand_uniform(uint64_t seed, uint64_t stream, uint64_t counter);  /* in [0, 1) */
double tsr_rand_normal(uint64_t seed, uint64_t stream, uint64_t counter);   /* N(0, 1) */

#endif
