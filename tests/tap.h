/* tap.h — minimal TAP output for tessera's C tests (header-only, test code only).
 *
 * A test program announces its plan, reports each check as "ok N - what" / "not ok N - what",
 * and exits with tap_done(): 0 when every planned check ran and passed, 1 otherwise. A check that
 * needs something absent is reported "ok N - what # SKIP why". tests/run.sh aggregates the lines
 * of every test program into the final "N passed, N failed, N skipped".
 *
 * Tolerances (docs/style.md "Tests"): err <= abs + rel * |ref|, written !(err <= tol) so NaN fails.
 */
#ifndef TSR_TAP_H
#define TSR_TAP_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int tap_planned_, tap_run_, tap_failed_;

static inline void tap_plan(int n) {
    tap_planned_ = n;
    printf("1..%d\n", n);
    fflush(stdout);
}

static inline int tap_ok(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int tap_ok(int cond, const char *fmt, ...) {
    va_list ap;
    tap_run_++;
    if (!cond) tap_failed_++;
    printf("%sok %d - ", cond ? "" : "not ", tap_run_);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    return cond;
}

static inline void tap_skip(const char *what, const char *why) {
    tap_run_++;
    printf("ok %d - %s # SKIP %s\n", tap_run_, what, why);
    fflush(stdout);
}

/* Diagnostic line (TAP comment). */
static inline void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tap_diag(const char *fmt, ...) {
    va_list ap;
    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

static inline int tap_done(void) {
    if (tap_run_ != tap_planned_) {
        printf("# planned %d checks, ran %d\n", tap_planned_, tap_run_);
        return 1;
    }
    return tap_failed_ ? 1 : 0;
}

/* Max over i of |a-b| / (abs_tol + rel_tol*|b|): <= 1 passes; NaN/Inf anywhere -> INFINITY. */
static inline double tap_max_err(const double *a, const double *b, size_t n, double abs_tol,
                                 double rel_tol) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        double e = fabs(a[i] - b[i]) / (abs_tol + rel_tol * fabs(b[i]));
        if (e > worst) worst = e;
    }
    return worst;
}

/* 1 when a library whose path contains name (e.g. "libcudnn") is mapped into this process (from
 * /proc/self/maps): the tests that a library is opened only when asked for */
static inline int tap_lib_mapped(const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, name) != NULL;
    if (f) fclose(f);
    return found;
}

/* text with control characters escaped (\n \r \t), for one-line test names; a static buffer */
static inline const char *tap_esc(const char *s) {
    static char buf[512];
    size_t o = 0;
    for (; *s && o + 5 < sizeof buf; s++) {
        if (*s == '\n') buf[o++] = '\\', buf[o++] = 'n';
        else if (*s == '\r') buf[o++] = '\\', buf[o++] = 'r';
        else if (*s == '\t') buf[o++] = '\\', buf[o++] = 't';
        else buf[o++] = *s;
    }
    buf[o] = '\0';
    return buf;
}

/* pieces joined by '|': a callback for the pre-tokenisers' piece(ctx, p, len) */
typedef struct tap_joined {
    char s[1024];
    size_t n;
} tap_joined;

static inline void tap_join_piece(void *ctx, const uint8_t *p, size_t len) {
    tap_joined *j = (tap_joined *)ctx; /* the cast: C++ too (tests/gpu/simt_selftest.cu) */
    if (j->n) j->s[j->n++] = '|';
    memcpy(j->s + j->n, p, len);
    j->n += len;
    j->s[j->n] = '\0';
}

#endif
