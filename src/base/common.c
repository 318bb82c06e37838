/* common.c — error reporting, checked allocation, strict number parsing, counter-based RNG. */
#include "common.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char log_prefix[128] = "";
static int log_rank; /* 0 until tsr_log_set_rank says otherwise */
static int log_muted;

void tsr_log_mute(int mute) { log_muted = mute; }

int tsr_log_muted(void) { return log_muted; }

int tsr_log_rank(void) { return log_rank; }

void tsr_log_set_rank(int rank, int world) {
    char host[64] = "?";
    if (gethostname(host, sizeof host) != 0) strcpy(host, "?");
    host[sizeof host - 1] = '\0';
    log_rank = rank;
    if (world > 1)
        snprintf(log_prefix, sizeof log_prefix, "[rank %d %s] ", rank, host);
    else
        log_prefix[0] = '\0';
}

/* Warnings held by tsr_warn_hold: whole lines, printed in order by tsr_warn_release (or before
 * the first error, or directly once HELD_MAX bytes are held). held_mu: a thread (a watchdog's
 * fatal message) may report while the main thread holds. */
enum { HELD_MAX = 64 * 1024 };
static char *held;
static size_t held_n;
static int holding;
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;

static void release_held(void) { /* (held_mu locked) */
    holding = 0;
    if (held_n) {
        fflush(stdout); /* (what was printed before the warnings comes first) */
        fwrite(held, 1, held_n, stderr);
        fflush(stderr);
    }
    free(held);
    held = NULL;
    held_n = 0;
}

void tsr_warn_hold(void) {
    pthread_mutex_lock(&held_mu);
    holding = 1;
    pthread_mutex_unlock(&held_mu);
}

void tsr_warn_release(void) {
    pthread_mutex_lock(&held_mu);
    release_held();
    pthread_mutex_unlock(&held_mu);
}

/* Keeps a warning's line while warnings are held; 0 when it is to be printed now (after the held
 * ones: an error, or a warning that does not fit). */
static int hold_line(const char *kind, const char *line, size_t len) {
    int kept = 0;
    pthread_mutex_lock(&held_mu);
    if (holding && strcmp(kind, "warning: ") == 0 && held_n + len <= HELD_MAX) {
        if (!held) held = malloc(HELD_MAX);
        if (held) memcpy(held + held_n, line, len), held_n += len, kept = 1;
    }
    if (holding && !kept) release_held();
    pthread_mutex_unlock(&held_mu);
    return kept;
}

static void vreport(const char *kind, const char *fmt, va_list ap) {
    char msg[4096], line[4400];
    vsnprintf(msg, sizeof msg, fmt, ap);
    int n = snprintf(line, sizeof line, "%s: %s%s%s\n", program_invocation_short_name, log_prefix,
                     kind, msg);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (hold_line(kind, line, len)) return;
    fputs(line, stderr);
    fflush(stderr);
}

void tsr_error(const char *fmt, ...) {
    if (log_muted) return;
    va_list ap;
    va_start(ap, fmt);
    vreport("error: ", fmt, ap);
    va_end(ap);
}

static void report(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(const char *kind, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport(kind, fmt, ap);
    va_end(ap);
}

void tsr_trace(const char *file, int line, const char *call) {
    const char *d = getenv("TSR_DEBUG");
    if (log_muted || !d || strcmp(d, "1") != 0) return;
    report("debug: ", "from %s:%d: %s", file, line, call);
}

void tsr_warn(const char *fmt, ...) {
    if (log_muted) return;
    va_list ap;
    va_start(ap, fmt);
    vreport("warning: ", fmt, ap);
    va_end(ap);
}

static void (*exit_abort_all)(int code);
static void (*exit_finalize)(void);

void tsr_set_exit_hooks(void (*abort_all)(int code), void (*finalize)(void)) {
    exit_abort_all = abort_all;
    exit_finalize = finalize;
}

static atomic_int child_groups[4]; /* (a rank runs one reward program) */

void tsr_child_group(int pgid, int on) {
    for (int i = 0; i < 4; i++) {
        int want = on ? 0 : pgid;
        if (atomic_compare_exchange_strong(&child_groups[i], &want, on ? pgid : 0)) return;
    }
}

void tsr_kill_child_groups(void) {
    int left = 0;
    for (int i = 0; i < 4; i++) {
        int g = atomic_load(&child_groups[i]);
        if (g > 0) left += kill(-g, SIGTERM) == 0;
    }
    /* up to 2 s for each to end what it keeps and exit (waitpid, nanosleep: async-signal-safe),
     * then SIGKILL */
    const struct timespec tick = {0, 10 * 1000 * 1000};
    for (int k = 0; left && k < 200; k++) {
        left = 0;
        for (int i = 0; i < 4; i++) {
            int g = atomic_load(&child_groups[i]);
            if (g > 0) left += waitpid(g, NULL, WNOHANG) == 0;
        }
        if (left) nanosleep(&tick, NULL);
    }
    for (int i = 0; i < 4; i++) {
        int g = atomic_load(&child_groups[i]);
        if (g > 0) kill(-g, SIGKILL);
    }
}

void tsr_die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport("fatal: ", fmt, ap);
    va_end(ap);
    if (exit_abort_all) exit_abort_all(code);
    exit(code);
}

void tsr_exit(int code) {
    tsr_warn_release();
    if (exit_finalize) exit_finalize();
    exit(code);
}

void tsr_fail_all(int code, const char *fmt, ...) {
    if (log_rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        vreport("error: ", fmt, ap);
        va_end(ap);
    }
    tsr_exit(code);
}

void *tsr_malloc_(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) tsr_die(TSR_EXIT_INTERNAL, "%s:%d: malloc(%zu bytes) failed: out of memory", file, line, n);
    return p;
}

void *tsr_calloc_(size_t n, size_t size, const char *file, int line) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        tsr_die(TSR_EXIT_INTERNAL, "%s:%d: calloc(%zu x %zu bytes) failed: out of memory", file,
                line, n, size);
    return p;
}

void *tsr_realloc_(void *p, size_t n, const char *file, int line) {
    void *q = realloc(p, n ? n : 1);
    if (!q)
        tsr_die(TSR_EXIT_INTERNAL, "%s:%d: realloc(%zu bytes) failed: out of memory", file, line, n);
    return q;
}

void tsr_free_n(void *const *ptrs, size_t n) {
    for (size_t i = 0; i < n; i++) free(ptrs[i]);
}

int tsr_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    if (!s || !*s) return 1;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi) return 1;
    *out = v;
    return 0;
}

int tsr_parse_f64(const char *s, double lo, double hi, double *out) {
    char *end;
    if (!s || !*s) return 1;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end != '\0' || !isfinite(v) || v < lo || v > hi) return 1;
    *out = v;
    return 0;
}

void tsr_fmt_shortest(char *buf, size_t n, double v) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v || !isfinite(v)) return;
    }
}

double tsr_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double tsr_thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t tsr_peak_rss(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0 || ru.ru_maxrss < 0) return 0;
    return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

int tsr_snprintf(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return k < 0 || (size_t)k >= n;
}

/* SplitMix64 finaliser: a bijective 64-bit mixer with good avalanche. */
uint64_t tsr_hash64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t tsr_rand_u64(uint64_t seed, uint64_t stream, uint64_t counter) {
    return tsr_hash64(tsr_hash64(tsr_hash64(seed) ^ stream) ^ counter);
}

double tsr_rand_uniform(uint64_t seed, uint64_t stream, uint64_t counter) {
    return (double)(tsr_rand_u64(seed, stream, counter) >> 11) * 0x1.0p-53;
}

/* Box-Muller on two uniforms drawn from sub-counters 2c and 2c+1. */
double tsr_rand_normal(uint64_t seed, uint64_t stream, uint64_t counter) {
    double u1 = tsr_rand_uniform(seed, stream, 2 * counter);
    double u2 = tsr_rand_uniform(seed, stream, 2 * counter + 1);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

const char *tsr_fault(const char *kind) {
    const char *f = getenv("TSR_FAULT");
    size_t n = strlen(kind);
    for (const char *p = f; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, kind, n) && p[n] == ':') return p + n + 1;
    return NULL;
}
