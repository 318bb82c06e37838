/* ops_check.h — what the op tests share (tests/unit/test_ops.c, test_ops_llama.c): a seeded
 * random stream, float inputs with float64 copies, tolerance checks against float64 references,
 * and central finite differences of a scalar objective J = sum(out * wts) (test_ops.c's header
 * explains the step and the tolerances). Header-only, test code only.
 */
#ifndef TSR_OPS_CHECK_H
#define TSR_OPS_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "xorshift.h"

static const double FD_H = 1e-5;

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t rng = 0x9e3779b97f4a7c15ull; /* xorshift64*: the test needs nothing external */
static inline double urand(void) {
    return (double)(xorshift64s(&rng) >> 11) * 0x1.0p-53;
}

static inline void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "ops test: out of memory (%zu x %zu bytes)\n", n, size);
        exit(1);
    }
    return p;
}
#define FALLOC(n) ((float *)xcalloc((n), sizeof(float)))
#define DALLOC(n) ((double *)xcalloc((n), sizeof(double)))

/* f[i] = d[i] = a float drawn uniformly from [lo, hi) */
static inline void fill(float *f, double *d, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) {
        f[i] = (float)(lo + (hi - lo) * urand());
        if (d) d[i] = f[i];
    }
}

static inline double *to_double(const float *f, size_t n) {
    double *d = DALLOC(n);
    for (size_t i = 0; i < n; i++) d[i] = f[i];
    return d;
}

/* tap check: fp32 result against float64 reference */
static inline int check(const char *what, const float *got, const double *want, size_t n,
                        double abs_tol, double rel_tol) {
    double *g = to_double(got, n);
    double err = tap_max_err(g, want, n, abs_tol, rel_tol);
    free(g);
    return tap_ok(err <= 1.0, "%s (max err %.3g of tolerance)", what, err);
}

/* A scalar objective of some inputs: J = sum_i out[i] * wts[i] where fwd(ctx, out) computes out
 * with the float64 reference from arrays that ctx points to. */
typedef struct {
    void (*fwd)(const void *ctx, double *out);
    const void *ctx;
    size_t nout;
    const double *wts;
    double *out; /* scratch (nout) */
} objective;

static inline double objective_eval(const objective *o) {
    o->fwd(o->ctx, o->out);
    double j = 0.0;
    for (size_t i = 0; i < o->nout; i++) j += o->out[i] * o->wts[i];
    return j;
}

/* grad[k] = dJ/dx[idx[k]] by central differences (idx NULL: every element, nidx = n) */
static inline void fd_grad(double *grad, double *x, const size_t *idx, size_t nidx,
                           const objective *o) {
    for (size_t k = 0; k < nidx; k++) {
        size_t i = idx ? idx[k] : k;
        double save = x[i];
        x[i] = save + FD_H;
        double jp = objective_eval(o);
        x[i] = save - FD_H;
        double jm = objective_eval(o);
        x[i] = save;
        grad[k] = (jp - jm) / (2.0 * FD_H);
    }
}

/* Checks a gradient: got (fp32, after backward accumulated into g0) against g0 + dJ/dx over all
 * n elements of x. */
static inline int check_grad(const char *what, const float *got, const float *g0, double *x,
                             size_t n, const objective *o, double abs_tol, double rel_tol) {
    double *want = DALLOC(n);
    fd_grad(want, x, NULL, n, o);
    for (size_t i = 0; i < n; i++) want[i] += g0[i];
    int ok = check(what, got, want, n, abs_tol, rel_tol);
    free(want);
    return ok;
}

/* The same on nidx elements sampled at random (for inputs too large to difference fully). */
static inline int check_grad_sampled(const char *what, const float *got, const float *g0, double *x,
                                     size_t n, size_t nidx, const objective *o, double abs_tol,
                                     double rel_tol) {
    size_t *idx = xcalloc(nidx, sizeof *idx);
    double *want = DALLOC(nidx), *g = DALLOC(nidx);
    for (size_t k = 0; k < nidx; k++) idx[k] = (size_t)(urand() * n);
    fd_grad(want, x, idx, nidx, o);
    for (size_t k = 0; k < nidx; k++) {
        want[k] += g0[idx[k]];
        g[k] = got[idx[k]];
    }
    double err = tap_max_err(g, want, nidx, abs_tol, rel_tol);
    free(idx);
    free(want);
    free(g);
    return tap_ok(err <= 1.0, "%s (%zu sampled, max err %.3g of tolerance)", what, nidx, err);
}

/* check_grad over all n elements (nidx 0) or check_grad_sampled over nidx of them. */
static inline int check_grad_some(const char *what, const float *got, const float *g0, double *x,
                                  size_t n, size_t nidx, const objective *o, double abs_tol,
                                  double rel_tol) {
    if (nidx) return check_grad_sampled(what, got, g0, x, n, nidx, o, abs_tol, rel_tol);
    return check_grad(what, got, g0, x, n, o, abs_tol, rel_tol);
}

static inline float *copy_f(const float *src, size_t n) {
    float *d = FALLOC(n);
    memcpy(d, src, n * sizeof *d);
    return d;
}

#endif
