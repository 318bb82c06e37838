/* test_ops.c — the fp32 CPU ops (kernels/cpu) against readable float64 references.
 *
 * Each forward is compared with a float64 reference forward written here as plain loops; each
 * backward with central finite differences of the float64 reference, of a scalar objective
 * J = sum(out * wts) with random weights wts (passed to the backward op as dout). Inputs are
 * drawn as floats, so the fp32 op and the float64 reference see the same numbers and differences
 * come from fp32 rounding only. Gradient buffers start at random values G0 and are compared with
 * G0 + dJ/dx, which also checks that backward ops accumulate (+=).
 * Finite differences: h = 1e-5 in float64 on inputs of order 1; truncation error ~h^2 = 1e-10 and
 * cancellation ~1e-16 / h = 1e-11 relative, far below the fp32 tolerances, so FD is exact here.
 * Tolerances are abs + rel * |ref| (tap_max_err <= 1 passes). fp32 has unit roundoff 6e-8; the
 * sums here have <= ~100 terms of order 1, so fp32 errors are ~1e-6 at worst. We allow ~1e-4
 * relative (about 10-100x the observed error) so real bugs (1e-2 and up) still fail loudly.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu_internal.h"
#include "ops.h"
#include "ops_check.h"
#include "tap.h"

#define NCHECKS 151

static const tsr_ops *ops = &tsr_cpu_ops;

/* ---- float64 references ------------------------------------------------------------------- */

static void ref_encoder(double *out, const int32_t *tok, const double *wte, const double *wpe,
                        const int32_t *pos, int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t p = pos ? (size_t)pos[b * T + t] : (size_t)t;
            for (int c = 0; c < C; c++)
                out[((size_t)b * T + t) * C + c] =
                    wte[(size_t)tok[b * T + t] * C + c] + (wpe ? wpe[p * C + c] : 0.0);
        }
}

static void ref_layernorm(double *out, double *mean, double *rstd, const double *inp,
                          const double *w, const double *b, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double *x = inp + (size_t)n * C;
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= C;
        double r = 1.0 / sqrt(v + (double)TSR_LN_EPS);
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = (x[c] - m) * r * w[c] + (b ? b[c] : 0.0);
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = r;
    }
}

static void ref_matmul(double *out, const double *inp, const double *w, const double *bias, int N,
                       int IC, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int i = 0; i < IC; i++) s += inp[(size_t)n * IC + i] * w[(size_t)o * IC + i];
            out[(size_t)n * OC + o] = s;
        }
}

/* Causal attention with an explicit mask: row i sees j <= i with seq[j] == seq[i] (every j <= i
 * when seq is NULL); softmax over the seen columns only, att 0 elsewhere. */
static void ref_attention(double *out, double *att, const double *qkv, const double *slopes,
                          const int32_t *seq, int B, int T, int C, int NH) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    double *s = DALLOC((size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((size_t)b * T + i) * 3 * C + h * hs;
                const int32_t *sq = seq ? seq + (size_t)b * T : NULL;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double dot = 0.0;
                    for (int d = 0; d < hs; d++) dot += q[d] * k[d];
                    s[j] = dot * scale - (slopes ? slopes[h] * (i - j) : 0.0);
                    if (sq && sq[j] != sq[i]) s[j] = -INFINITY; /* masked: exp gives 0 */
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j <= i; j++) sum += (s[j] = exp(s[j] - mx));
                for (int j = 0; j <= i; j++) s[j] /= sum;
                double *o = out + ((size_t)b * T + i) * C + h * hs;
                for (int d = 0; d < hs; d++) {
                    double acc = 0.0;
                    for (int j = 0; j <= i; j++)
                        acc += s[j] * qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hs + d];
                    o[d] = acc;
                }
                if (att)
                    for (int j = 0; j < T; j++)
                        att[(((size_t)b * NH + h) * T + i) * T + j] = j <= i ? s[j] : 0.0;
            }
    free(s);
}

static double ref_gelu1(double x, tsr_gelu_kind kind) {
    if (kind == TSR_GELU_TANH)
        return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}

static void ref_xent(double *losses, double *probs, const double *logits, const int32_t *targets,
                     int N, int V, int Vp) {
    for (int n = 0; n < N; n++) {
        const double *x = logits + (size_t)n * Vp;
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        for (int j = 0; j < V; j++) sum += exp(x[j] - mx);
        if (probs)
            for (int j = 0; j < Vp; j++)
                probs[(size_t)n * Vp + j] = j < V ? exp(x[j] - mx) / sum : 0.0;
        losses[n] = targets[n] < 0 ? 0.0 : log(sum) - (x[targets[n]] - mx);
    }
}

/* ---- exp ---------------------------------------------------------------------------------- */

static void test_expf(void) {
    /* cpu_expf is the exponential of softmax, attention and GELU; allow 4 ulp (rel 2.4e-7),
     * about twice what its reduction + Taylor polynomial should give. */
    double worst = 0.0;
    for (int i = 0; i <= 2000000; i++) {
        float x = (float)(-44.0 + 131.0 * i / 2000000.0);
        double e = fabs((double)cpu_expf(x) - exp((double)x)) / exp((double)x);
        if (!(e <= worst)) worst = e;
    }
    tap_ok(worst <= 2.4e-7, "cpu_expf relative error on [-44, 87] (%.3g, limit 2.4e-7)", worst);
    float big = cpu_expf(1000.0f), inf = cpu_expf(INFINITY), tiny = cpu_expf(-44.5f);
    float ninf = cpu_expf(-INFINITY), nan = cpu_expf(NAN);
    tap_ok(big == inf && big > 6e37f && big < 6.1e37f && tiny == 0.0f && ninf == 0.0f && isnan(nan),
           "cpu_expf: e^1000 = e^inf = %g (e^87), e^-44.5 = e^-inf = %g, e^NaN = %g", big, tiny,
           nan);
}

/* ---- memory ------------------------------------------------------------------------------- */

static void test_memory(void) {
    size_t n = 1000;
    unsigned char *p = ops->alloc(n);
    int ok = ((uintptr_t)p % 64) == 0;
    for (size_t i = 0; i < n; i++) ok &= p[i] == 0;
    memset(p, 0xab, n);
    ops->zero(p, n);
    for (size_t i = 0; i < n; i++) ok &= p[i] == 0;
    ops->free(p);
    tap_ok(ok, "alloc is 64-byte aligned and zero-filled, zero() clears");
}

/* ---- encoder ------------------------------------------------------------------------------ */

typedef struct {
    const int32_t *tok, *pos;
    const double *wte, *wpe;
    int B, T, C;
} encoder_ctx;

static void encoder_obj(const void *c, double *out) {
    const encoder_ctx *e = c;
    ref_encoder(out, e->tok, e->wte, e->wpe, e->pos, e->B, e->T, e->C);
}

/* mode 0: no wpe; 1: wpe at t; 2: wpe at given positions (restarting, as per document) */
static void test_encoder(int mode) {
    enum { B = 2, T = 5, C = 8, Vp = 7 };
    size_t nout = (size_t)B * T * C;
    int32_t tok[B * T];
    const int32_t pos[B * T] = {0, 1, 0, 1, 2, 0, 0, 1, 2, 3}; /* repeats across b and t */
    const int with_wpe = mode > 0;
    const int32_t *ps = mode == 2 ? pos : NULL;
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(urand() * 6); /* repeats; row 6 unused */
    float *wte = FALLOC(Vp * C), *wpe = FALLOC(T * C), *out = FALLOC(nout), *dout = FALLOC(nout);
    double *dwte_ = DALLOC(Vp * C), *dwpe_ = DALLOC(T * C), *wts = DALLOC(nout);
    double *want = DALLOC(nout);
    fill(wte, dwte_, Vp * C, -1, 1);
    fill(wpe, dwpe_, T * C, -1, 1);
    fill(dout, wts, nout, -1, 1);
    const char *tag = mode == 0 ? "no wpe" : mode == 1 ? "wpe" : "wpe at pos";
    char what[64];

    ops->encoder_forward(out, tok, wte, with_wpe ? wpe : NULL, ps, B, T, C);
    ref_encoder(want, tok, dwte_, with_wpe ? dwpe_ : NULL, ps, B, T, C);
    /* one fp32 addition: correctly rounded, so within half an ulp (rel 6e-8) */
    snprintf(what, sizeof what, "encoder_forward (%s)", tag);
    check(what, out, want, nout, 1e-30, 6e-8);

    float *g_wte = FALLOC(Vp * C), *g_wpe = FALLOC(T * C), *g0_wte, *g0_wpe;
    fill(g_wte, NULL, Vp * C, -1, 1);
    fill(g_wpe, NULL, T * C, -1, 1);
    g0_wte = copy_f(g_wte, Vp * C);
    g0_wpe = copy_f(g_wpe, T * C);
    ops->encoder_backward(g_wte, with_wpe ? g_wpe : NULL, dout, tok, ps, B, T, C);
    encoder_ctx ctx = {tok, ps, dwte_, with_wpe ? dwpe_ : NULL, B, T, C};
    objective o = {encoder_obj, &ctx, nout, wts, DALLOC(nout)};
    /* sums of <= 10 fp32 terms of order 1 */
    snprintf(what, sizeof what, "encoder_backward dwte (%s)", tag);
    check_grad(what, g_wte, g0_wte, dwte_, Vp * C, &o, 1e-5, 1e-5);
    snprintf(what, sizeof what, "encoder_backward dwpe (%s)", tag);
    if (with_wpe) check_grad(what, g_wpe, g0_wpe, dwpe_, T * C, &o, 1e-5, 1e-5);
    free(o.out);
    free(wte), free(wpe), free(out), free(dout), free(dwte_), free(dwpe_), free(wts), free(want);
    free(g_wte), free(g_wpe), free(g0_wte), free(g0_wpe);
}

/* ---- layernorm ---------------------------------------------------------------------------- */

typedef struct {
    const double *inp, *w, *b;
    int N, C;
} ln_ctx;

static void ln_obj(const void *c, double *out) {
    const ln_ctx *l = c;
    ref_layernorm(out, NULL, NULL, l->inp, l->w, l->b, l->N, l->C);
}

static void test_layernorm(int N, int C, int with_b, double offset) {
    size_t nx = (size_t)N * C;
    float *inp = FALLOC(nx), *w = FALLOC(C), *b = FALLOC(C), *out = FALLOC(nx), *dout = FALLOC(nx);
    float *mean = FALLOC(N), *rstd = FALLOC(N);
    double *dinp_ = DALLOC(nx), *dw_ = DALLOC(C), *db_ = DALLOC(C), *wts = DALLOC(nx);
    double *want = DALLOC(nx), *wmean = DALLOC(N), *wrstd = DALLOC(N);
    fill(inp, dinp_, nx, offset - 2, offset + 2);
    fill(w, dw_, C, 0.5, 1.5);
    fill(b, db_, C, -1, 1);
    fill(dout, wts, nx, -1, 1);
    char what[96];
#define LN_WHAT(s) (snprintf(what, sizeof what, "layernorm %s (N=%d C=%d %s offset %g)", s, N, C, \
                             with_b ? "bias" : "no bias", offset),                              \
                    what)

    ops->layernorm_forward(out, mean, rstd, inp, w, with_b ? b : NULL, N, C);
    ref_layernorm(want, wmean, wrstd, dinp_, dw_, with_b ? db_ : NULL, N, C);
    /* normalised values of order 1-3: fp32 rounding of x - mean dominates (|x| <= 52 -> 4e-6) */
    check(LN_WHAT("forward out"), out, want, nx, 2e-5, 1e-5);
    check(LN_WHAT("forward mean"), mean, wmean, N, 1e-6, 1e-6);
    check(LN_WHAT("forward rstd"), rstd, wrstd, N, 1e-6, 1e-5);

    float *g_inp = FALLOC(nx), *g_w = FALLOC(C), *g_b = FALLOC(C);
    fill(g_inp, NULL, nx, -1, 1);
    fill(g_w, NULL, C, -1, 1);
    fill(g_b, NULL, C, -1, 1);
    float *g0_inp = copy_f(g_inp, nx), *g0_w = copy_f(g_w, C), *g0_b = copy_f(g_b, C);
    ops->layernorm_backward(g_inp, g_w, with_b ? g_b : NULL, dout, inp, w, mean, rstd, N, C);
    ln_ctx ctx = {dinp_, dw_, with_b ? db_ : NULL, N, C};
    objective o = {ln_obj, &ctx, nx, wts, DALLOC(nx)};
    /* dinp: C-term sums times rstd (~1), rounding of x - mean again; dw, db: N-term sums */
    check_grad(LN_WHAT("backward dinp"), g_inp, g0_inp, dinp_, nx, &o, 2e-5, 1e-4);
    check_grad(LN_WHAT("backward dw"), g_w, g0_w, dw_, C, &o, 2e-5, 1e-4);
    if (with_b) check_grad(LN_WHAT("backward db"), g_b, g0_b, db_, C, &o, 2e-5, 1e-4);
#undef LN_WHAT
    free(o.out);
    free(inp), free(w), free(b), free(out), free(dout), free(mean), free(rstd), free(dinp_);
    free(dw_), free(db_), free(wts), free(want), free(wmean), free(wrstd), free(g_inp), free(g_w);
    free(g_b), free(g0_inp), free(g0_w), free(g0_b);
}

/* ---- matmul ------------------------------------------------------------------------------- */

typedef struct {
    const double *inp, *w, *bias;
    int N, IC, OC;
} mm_ctx;

static void mm_obj(const void *c, double *out) {
    const mm_ctx *m = c;
    ref_matmul(out, m->inp, m->w, m->bias, m->N, m->IC, m->OC);
}

static void test_matmul(int N, int IC, int OC, int with_bias) {
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = FALLOC(ni), *w = FALLOC(nw), *bias = FALLOC(OC), *out = FALLOC(no);
    float *dout = FALLOC(no);
    double *inp_ = DALLOC(ni), *w_ = DALLOC(nw), *bias_ = DALLOC(OC), *wts = DALLOC(no);
    double *want = DALLOC(no);
    fill(inp, inp_, ni, -1, 1);
    fill(w, w_, nw, -1, 1);
    fill(bias, bias_, OC, -1, 1);
    fill(dout, wts, no, -1, 1);
    char what[96];
#define MM_WHAT(s) (snprintf(what, sizeof what, "matmul %s (N=%d IC=%d OC=%d %s)", s, N, IC, OC, \
                             with_bias ? "bias" : "no bias"),                                     \
                    what)
    ops->matmul_forward(out, inp, w, with_bias ? bias : NULL, N, IC, OC);
    ref_matmul(want, inp_, w_, with_bias ? bias_ : NULL, N, IC, OC);
    /* dot products of <= 40 terms of order 1 in fp32 */
    check(MM_WHAT("forward"), out, want, no, 1e-5, 1e-5);

    float *g_inp = FALLOC(ni), *g_w = FALLOC(nw), *g_b = FALLOC(OC);
    fill(g_inp, NULL, ni, -1, 1);
    fill(g_w, NULL, nw, -1, 1);
    fill(g_b, NULL, OC, -1, 1);
    float *g0_inp = copy_f(g_inp, ni), *g0_w = copy_f(g_w, nw), *g0_b = copy_f(g_b, OC);
    ops->matmul_backward(g_inp, g_w, with_bias ? g_b : NULL, dout, inp, w, N, IC, OC);
    mm_ctx ctx = {inp_, w_, with_bias ? bias_ : NULL, N, IC, OC};
    objective o = {mm_obj, &ctx, no, wts, DALLOC(no)};
    check_grad(MM_WHAT("backward dinp"), g_inp, g0_inp, inp_, ni, &o, 1e-5, 1e-5);
    check_grad(MM_WHAT("backward dw"), g_w, g0_w, w_, nw, &o, 1e-5, 1e-5);
    if (with_bias) check_grad(MM_WHAT("backward dbias"), g_b, g0_b, bias_, OC, &o, 1e-5, 1e-5);
#undef MM_WHAT
    free(o.out);
    free(inp), free(w), free(bias), free(out), free(dout), free(inp_), free(w_), free(bias_);
    free(wts), free(want), free(g_inp), free(g_w), free(g_b), free(g0_inp), free(g0_w), free(g0_b);
}

/* ---- attention ---------------------------------------------------------------------------- */

/* ALiBi slopes as in Press et al. (also for head counts that are not powers of two) */
static void alibi_slopes(double *s, int n) {
    int p = 1;
    while (p * 2 <= n) p *= 2;
    for (int h = 0; h < p; h++) s[h] = pow(2.0, -8.0 * (h + 1) / p);
    for (int h = p; h < n; h++) s[h] = pow(2.0, -8.0 * (2 * (h - p) + 1) / (2 * p));
}

typedef struct {
    double *qkv; /* perturbed in place by the finite differences */
    const double *slopes;
    const int32_t *seq;
    int B, T, C, NH;
} att_ctx;

static void att_obj(const void *c, double *out) {
    const att_ctx *a = c;
    ref_attention(out, NULL, a->qkv, a->slopes, a->seq, a->B, a->T, a->C, a->NH);
}

/* The backward's dqkv (ctx's segment ids, B, T, C, NH; att and dout as the forward left them)
 * against ref_attention's finite differences in ctx->qkv (fd_samples of them, or all): one check.
 * Returns the gradient accumulated into *g0, a random start (the caller frees both). */
static float *check_dqkv(const char *what, const att_ctx *ctx, const float *qkv, const float *att,
                         const float *dout, const double *wts, size_t fd_samples, float **g0) {
    const int B = ctx->B, T = ctx->T, C = ctx->C, NH = ctx->NH;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
    float *g = FALLOC(nq);
    fill(g, NULL, nq, -1, 1);
    *g0 = copy_f(g, nq);
    ops->attention_backward(g, dout, qkv, att, ctx->seq, NULL, B, T, NH, NH, C / NH);
    objective o = {att_obj, ctx, no, wts, DALLOC(no)};
    /* sums over T and hs of products of order-1 values: fp32 error ~1e-6, abs 1e-5 */
    check_grad_some(what, g, *g0, ctx->qkv, nq, fd_samples, &o, 1e-5, 1e-4);
    free(o.out);
    return g;
}

static void test_attention(int B, int T, int C, int NH, int alibi, size_t fd_samples) {
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = FALLOC(nq), *out = FALLOC(no), *att = FALLOC(na), *dout = FALLOC(no);
    float slopes[16];
    double *qkv_ = DALLOC(nq), *wts = DALLOC(no), *want = DALLOC(no), *want_att = DALLOC(na);
    double slopes_[16];
    alibi_slopes(slopes_, NH);
    for (int h = 0; h < NH; h++) slopes[h] = (float)(slopes_[h] = (float)slopes_[h]);
    fill(qkv, qkv_, nq, -2, 2);
    fill(dout, wts, no, -1, 1);
    char what[128];
#define ATT_WHAT(s)                                                                        \
    (snprintf(what, sizeof what, "attention %s (B=%d T=%d C=%d NH=%d %s)", s, B, T, C, NH, \
              alibi ? "alibi" : "no alibi"),                                               \
     what)
    ops->attention_forward(out, att, qkv, alibi ? slopes : NULL, NULL, NULL, B, T, NH, NH, C / NH);
    ref_attention(want, want_att, qkv_, alibi ? slopes_ : NULL, NULL, B, T, C, NH);
    /* scores are hs-term dot products of values <= 2 (error ~1e-6 absolute), through exp */
    check(ATT_WHAT("forward out"), out, want, no, 2e-6, 1e-5);
    check(ATT_WHAT("forward att"), att, want_att, na, 1e-6, 1e-5);
    int zeros = 1;
    for (int bh = 0; bh < B * NH; bh++)
        for (int i = 0; i < T; i++)
            for (int j = i + 1; j < T; j++) zeros &= att[((size_t)bh * T + i) * T + j] == 0.0f;
    tap_ok(zeros, "%s", ATT_WHAT("att is exactly 0 above the diagonal"));

    att_ctx ctx = {qkv_, alibi ? slopes_ : NULL, NULL, B, T, C, NH};
    float *g0, *g = check_dqkv(ATT_WHAT("backward dqkv"), &ctx, qkv, att, dout, wts, fd_samples, &g0);
#undef ATT_WHAT
    free(qkv), free(out), free(att), free(dout), free(qkv_), free(wts), free(want), free(want_att);
    free(g), free(g0);
}

/* Segment ids for B rows of T: runs of random length (1, short, or up to T) with increasing ids
 * that are not consecutive (the op must not assume they count from 0). */
static void random_segments(int32_t *seq, int B, int T) {
    for (int b = 0; b < B; b++) {
        int32_t id = (int32_t)(urand() * 5);
        for (int t = 0; t < T;) {
            double u = urand();
            int len = u < 0.2 ? 1 : u < 0.6 ? 1 + (int)(urand() * 6) : 1 + (int)(urand() * T);
            for (int k = 0; k < len && t < T; k++) seq[(size_t)b * T + t++] = id;
            id += 1 + (int32_t)(urand() * 3);
        }
    }
}

/* maximum of |got - want| / (abs + rel |want|) over n floats (fp32 against fp32) */
static double f_err(const float *got, const float *want, size_t n, double abs_tol, double rel_tol) {
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (abs_tol + rel_tol * fabs((double)want[i]));
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* Attention with segment ids (the block-diagonal mask of model.attn_mask = document):
 *   - forward and backward against the float64 reference with an explicit masked softmax;
 *   - att exactly 0 outside [segment start, i];
 *   - seq = NULL gives the same bits as seq all zero (one segment);
 *   - every segment gives the same forward bits (out, att) as the segment alone in a row of its
 *     own without ids, and dqkv within rounding (dk, dv are summed in row blocks counted from the
 *     start of the row, so a segment's blocks split differently when it is packed). */
static void test_attention_seq(int B, int T, int C, int NH, int alibi, size_t fd_samples) {
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = FALLOC(nq), *out = FALLOC(no), *att = FALLOC(na), *dout = FALLOC(no);
    float slopes[16];
    int32_t *seq = xcalloc((size_t)B * T, sizeof *seq);
    int32_t *zero = xcalloc((size_t)B * T, sizeof *zero);
    double *qkv_ = DALLOC(nq), *wts = DALLOC(no), *want = DALLOC(no), *want_att = DALLOC(na);
    double slopes_[16];
    alibi_slopes(slopes_, NH);
    for (int h = 0; h < NH; h++) slopes[h] = (float)(slopes_[h] = (float)slopes_[h]);
    const float *sl = alibi ? slopes : NULL;
    fill(qkv, qkv_, nq, -2, 2);
    fill(dout, wts, no, -1, 1);
    random_segments(seq, B, T);
    int nseg = 0;
    for (int n = 0; n < B * T; n++) nseg += n % T == 0 || seq[n] != seq[n - 1];
    char what[160];
#define SEQ_WHAT(s)                                                                         \
    (snprintf(what, sizeof what, "attention with segments %s (B=%d T=%d C=%d NH=%d %s, %d " \
              "segments)", s, B, T, C, NH, alibi ? "alibi" : "no alibi", nseg),           \
     what)
    for (size_t i = 0; i < na; i++) att[i] = 7.0f; /* every element must be written */
    ops->attention_forward(out, att, qkv, sl, seq, NULL, B, T, NH, NH, C / NH);
    ref_attention(want, want_att, qkv_, alibi ? slopes_ : NULL, seq, B, T, C, NH);
    /* as test_attention: hs-term dot products of values <= 2, through exp */
    check(SEQ_WHAT("forward out"), out, want, no, 2e-6, 1e-5);
    check(SEQ_WHAT("forward att"), att, want_att, na, 1e-6, 1e-5);
    int zeros = 1;
    for (int bh = 0; bh < B * NH; bh++) {
        const int32_t *sq = seq + (size_t)(bh / NH) * T;
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++)
                if (j > i || sq[j] != sq[i]) zeros &= att[((size_t)bh * T + i) * T + j] == 0.0f;
    }
    tap_ok(zeros, "%s", SEQ_WHAT("att is exactly 0 outside each row's segment"));

    att_ctx ctx = {qkv_, alibi ? slopes_ : NULL, seq, B, T, C, NH};
    float *g0, *g = check_dqkv(SEQ_WHAT("backward dqkv"), &ctx, qkv, att, dout, wts, fd_samples, &g0);

    /* NULL against all-zero ids: the same bits */
    float *out1 = FALLOC(no), *att1 = FALLOC(na), *out2 = FALLOC(no), *att2 = FALLOC(na);
    float *g1 = FALLOC(nq), *g2 = FALLOC(nq);
    ops->attention_forward(out1, att1, qkv, sl, NULL, NULL, B, T, NH, NH, C / NH);
    ops->attention_forward(out2, att2, qkv, sl, zero, NULL, B, T, NH, NH, C / NH);
    ops->attention_backward(g1, dout, qkv, att1, NULL, NULL, B, T, NH, NH, C / NH);
    ops->attention_backward(g2, dout, qkv, att2, zero, NULL, B, T, NH, NH, C / NH);
    tap_ok(!memcmp(out1, out2, no * sizeof(float)) && !memcmp(att1, att2, na * sizeof(float)) &&
               !memcmp(g1, g2, nq * sizeof(float)),
           "%s", SEQ_WHAT("seq NULL and seq all 0 give the same bits (out, att, dqkv)"));

    /* each segment alone: rows [s, e) of row b as a batch of one row of e - s, no ids */
    int same_fwd = 1;
    double gerr = 0.0;
    for (int b = 0; b < B; b++)
        for (int s0 = 0, e; s0 < T; s0 = e) {
            const int32_t *sq = seq + (size_t)b * T;
            for (e = s0 + 1; e < T && sq[e] == sq[s0]; e++) {}
            const int n = e - s0;
            const size_t rq = (size_t)3 * C, off = (size_t)b * T + s0;
            float *q1 = FALLOC((size_t)n * rq), *o1 = FALLOC((size_t)n * C);
            float *a1 = FALLOC((size_t)NH * n * n), *d1 = FALLOC((size_t)n * C);
            float *gg = FALLOC((size_t)n * rq), *gp = FALLOC((size_t)n * rq);
            memcpy(q1, qkv + off * rq, (size_t)n * rq * sizeof(float));
            memcpy(d1, dout + off * C, (size_t)n * C * sizeof(float));
            ops->attention_forward(o1, a1, q1, sl, NULL, NULL, 1, n, NH, NH, C / NH);
            ops->attention_backward(gg, d1, q1, a1, NULL, NULL, 1, n, NH, NH, C / NH);
            same_fwd &= !memcmp(o1, out + off * C, (size_t)n * C * sizeof(float));
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < n; i++)
                    same_fwd &= !memcmp(a1 + ((size_t)h * n + i) * n,
                                        att + (((size_t)b * NH + h) * T + s0 + i) * T + s0,
                                        (size_t)n * sizeof(float));
            /* the packed gradient of these rows: g - g0 (backward accumulated into g0) */
            for (size_t k = 0; k < (size_t)n * rq; k++) gp[k] = g[off * rq + k] - g0[off * rq + k];
            /* sums of up to T products of order 1, in other groupings: fp32 rounding, plus the
             * cancellation in g - g0 (|g0| <= 1, so ~1e-7 absolute) */
            double e1 = f_err(gp, gg, (size_t)n * rq, 1e-6, 1e-5);
            if (!(e1 <= gerr)) gerr = e1;
            free(q1), free(o1), free(a1), free(d1), free(gg), free(gp);
        }
    tap_ok(same_fwd, "%s", SEQ_WHAT("forward of each segment = the segment alone, bit for bit"));
    tap_ok(gerr <= 1.0, "%s (max err %.3g of tolerance)",
           SEQ_WHAT("backward of each segment = the segment alone"), gerr);
#undef SEQ_WHAT
    free(qkv), free(out), free(att), free(dout), free(seq), free(zero), free(qkv_), free(wts);
    free(want), free(want_att), free(g), free(g0), free(out1), free(att1), free(out2), free(att2);
    free(g1), free(g2);
}

/* ---- gelu, residual ----------------------------------------------------------------------- */

static void test_gelu(tsr_gelu_kind kind) {
    enum { N = 1000 };
    float inp[N], out[N], dout[N], g[N], g0[N];
    double want[N], dwant[N];
    const float special[] = {0.0f, 1e-20f, -1e-20f, 30.0f, -30.0f, 100.0f, -100.0f};
    fill(inp, NULL, N, -8, 8);
    memcpy(inp, special, sizeof special);
    fill(dout, NULL, N, -1, 1);
    fill(g, NULL, N, -1, 1);
    memcpy(g0, g, sizeof g);
    const char *name = kind == TSR_GELU_TANH ? "tanh" : "exact";
    ops->gelu_forward(out, inp, N, kind);
    for (int i = 0; i < N; i++) {
        double x = inp[i];
        want[i] = ref_gelu1(x, kind);
        double d = (ref_gelu1(x + FD_H, kind) - ref_gelu1(x - FD_H, kind)) / (2.0 * FD_H);
        dwant[i] = g0[i] + d * dout[i];
    }
    /* a few fp32 operations and one exp/erf: ~1e-7 relative; abs 1e-7 near zero crossings */
    char what[64];
    snprintf(what, sizeof what, "gelu_forward (%s)", name);
    check(what, out, want, N, 1e-7, 2e-6);
    ops->gelu_backward(g, inp, dout, N, kind);
    snprintf(what, sizeof what, "gelu_backward (%s)", name);
    check(what, g, dwant, N, 1e-6, 1e-5);
}

static void test_residual(void) {
    enum { N = 100 };
    float a[N], b[N], out[N], dout[N], da[N], db[N];
    double want[N], wa[N], wb[N];
    fill(a, NULL, N, -1, 1);
    fill(b, NULL, N, -1, 1);
    fill(dout, NULL, N, -1, 1);
    fill(da, NULL, N, -1, 1);
    fill(db, NULL, N, -1, 1);
    for (int i = 0; i < N; i++) {
        want[i] = (double)a[i] + b[i];
        wa[i] = (double)da[i] + dout[i];
        wb[i] = (double)db[i] + dout[i];
    }
    ops->residual_forward(out, a, b, N);
    ops->residual_backward(da, db, dout, N);
    /* one correctly rounded fp32 addition each */
    check("residual_forward", out, want, N, 1e-30, 6e-8);
    check("residual_backward da", da, wa, N, 1e-30, 6e-8);
    check("residual_backward db", db, wb, N, 1e-30, 6e-8);
}

/* ---- softmax + cross-entropy -------------------------------------------------------------- */

typedef struct {
    const double *logits;
    const int32_t *targets;
    int N, V, Vp;
} xent_ctx;

static void xent_obj(const void *c, double *out) {
    const xent_ctx *x = c;
    ref_xent(out, NULL, x->logits, x->targets, x->N, x->V, x->Vp);
}

static void test_xent(void) {
    enum { N = 6, V = 11, Vp = 16 };
    const int32_t targets[N] = {3, -1, 0, 10, -1, 7};
    float logits[N * Vp], probs[N * Vp], losses[N], dl[N], dlogits[N * Vp];
    double logits_[N * Vp], wprobs[N * Vp], wlosses[N], wts[N];
    fill(logits, logits_, N * Vp, -4, 4);
    for (int n = 0; n < N; n++)
        for (int j = V; j < Vp; j++) logits[n * Vp + j] = 1e3f; /* padding must be ignored */
    fill(dl, wts, N, -1, 1);
    ops->softmax_xent_forward(losses, probs, logits, targets, N, V, Vp);
    ref_xent(wlosses, wprobs, logits_, targets, N, V, Vp);
    /* probabilities and log-sum-exp over 11 terms: a few ulp */
    check("softmax_xent_forward probs (V=11 Vp=16)", probs, wprobs, N * Vp, 1e-8, 2e-6);
    check("softmax_xent_forward losses (targets -1 give 0)", losses, wlosses, N, 1e-6, 1e-6);
    int pad0 = 1;
    for (int n = 0; n < N; n++)
        for (int j = V; j < Vp; j++) pad0 &= probs[n * Vp + j] == 0.0f;
    tap_ok(pad0, "softmax_xent_forward probs columns >= V are exactly 0");

    for (int i = 0; i < N * Vp; i++) dlogits[i] = 7.0f; /* must be overwritten, not added to */
    ops->softmax_xent_backward(dlogits, dl, probs, targets, N, V, Vp);
    xent_ctx ctx = {logits_, targets, N, V, Vp};
    objective o = {xent_obj, &ctx, N, wts, DALLOC(N)};
    float zero[N * Vp];
    memset(zero, 0, sizeof zero);
    check_grad("softmax_xent_backward dlogits (writes, not +=)", dlogits, zero, logits_, N * Vp, &o,
               1e-7, 1e-5);
    free(o.out);
    int zeros = 1;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < Vp; j++)
            if (j >= V || targets[n] < 0) zeros &= dlogits[n * Vp + j] == 0.0f;
    tap_ok(zeros, "softmax_xent_backward: columns >= V and rows with target -1 exactly 0");

    /* in place: probs == logits, then dlogits == probs; must match out of place bit for bit */
    float buf[N * Vp], losses2[N];
    memcpy(buf, logits, sizeof buf);
    ops->softmax_xent_forward(losses2, buf, buf, targets, N, V, Vp);
    tap_ok(memcmp(buf, probs, sizeof buf) == 0 && memcmp(losses2, losses, sizeof losses) == 0,
           "softmax_xent_forward in place (probs == logits) matches out of place bitwise");
    ops->softmax_xent_backward(buf, dl, buf, targets, N, V, Vp);
    tap_ok(memcmp(buf, dlogits, sizeof buf) == 0,
           "softmax_xent_backward in place (dlogits == probs) matches out of place bitwise");

    /* large logits (range +-60): stability; losses up to ~120 */
    fill(logits, logits_, N * Vp, -60, 60);
    ops->softmax_xent_forward(losses, probs, logits, targets, N, V, Vp);
    ref_xent(wlosses, wprobs, logits_, targets, N, V, Vp);
    check("softmax_xent_forward probs, logits in [-60, 60]", probs, wprobs, N * Vp, 1e-8, 2e-6);
    check("softmax_xent_forward losses, logits in [-60, 60]", losses, wlosses, N, 1e-5, 1e-6);
}

/* ---- sumsq, adamw ------------------------------------------------------------------------- */

static void test_sumsq(void) {
    size_t n = 200003; /* more than one 64 Ki block, not a multiple of it */
    float *g = FALLOC(n);
    fill(g, NULL, n, -2, 2);
    double want = 0.0;
    for (size_t i = 0; i < n; i++) want += (double)g[i] * g[i];
    double got = ops->sumsq(g, n);
    /* exact squares summed in double: ~n * 1e-16 relative */
    tap_ok(fabs(got - want) <= 1e-11 * want, "sumsq (n=%zu): %.17g vs %.17g", n, got, want);
    tap_ok(ops->sumsq(g, 0) == 0.0, "sumsq of nothing is 0");
    free(g);
}

static void test_adamw(int steps) {
    enum { N = 300 };
    float p[N], m[N], v[N], g[N];
    double pd[N], md[N], vd[N];
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.5f;
    fill(p, pd, N, -1, 1);
    memset(m, 0, sizeof m), memset(v, 0, sizeof v);
    memset(md, 0, sizeof md), memset(vd, 0, sizeof vd);
    for (int t = 1; t <= steps; t++) {
        fill(g, NULL, N, -1, 1);
        g[0] = 0.0f; /* a zero gradient: the update is decay only at t = 1 */
        ops->adamw_update(p, g, m, v, N, lr, b1, b2, eps, wd, scale, t);
        for (int i = 0; i < N; i++) {
            double gi = (double)g[i] * scale;
            md[i] = b1 * md[i] + (1.0 - b1) * gi;
            vd[i] = b2 * vd[i] + (1.0 - b2) * gi * gi;
            pd[i] *= 1.0 - (double)lr * wd;
            pd[i] -= lr * (md[i] / (1.0 - pow(b1, t))) / (sqrt(vd[i] / (1.0 - pow(b2, t))) + eps);
        }
    }
    /* a few fp32 operations per step, accumulated over <= 5 steps: v relative ~1e-6; m can
     * cancel towards 0 across steps, so its bound is absolute, a few ulp of its size (0.5);
     * the update m/sqrt(v) is ~lr, so p errs by ~lr * 1e-6 */
    char what[64];
    snprintf(what, sizeof what, "adamw_update p after %d step%s", steps, steps > 1 ? "s" : "");
    check(what, p, pd, N, 1e-7, 1e-6);
    snprintf(what, sizeof what, "adamw_update m after %d step%s", steps, steps > 1 ? "s" : "");
    check(what, m, md, N, 2e-7, 1e-5);
    snprintf(what, sizeof what, "adamw_update v after %d step%s", steps, steps > 1 ? "s" : "");
    check(what, v, vd, N, 1e-12, 1e-5);
}

/* ---- frozen parameters: NULL weight gradients -------------------------------------------- */

/* n floats with the same bits */
static int same_bits(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof *a) == 0;
}

/* 2 checks: encoder_backward with dwte NULL (frozen; tokens NULL too: unread then) gives dwpe the
 * bits it gets beside dwte; with dwpe NULL, dwte the same bits; both NULL returns. mode 1: wpe at
 * t; 2: at given positions. N * C past the one-thread cut-off, tokens repeated. */
static void test_encoder_frozen(int mode) {
    enum { B = 3, T = 70, C = 96, Vp = 11 };
    const size_t N = (size_t)B * T, nout = N * C, nte = (size_t)Vp * C, npe = (size_t)T * C;
    int32_t *tok = xcalloc(N, sizeof *tok), *pos = xcalloc(N, sizeof *pos);
    for (size_t n = 0; n < N; n++) tok[n] = (int32_t)(urand() * Vp), pos[n] = (int32_t)(n % 13);
    const int32_t *ps = mode == 2 ? pos : NULL;
    const char *tag = mode == 2 ? "wpe at pos" : "wpe at t";
    float *dout = FALLOC(nout), *g0w = FALLOC(nte), *g0p = FALLOC(npe);
    fill(dout, NULL, nout, -1, 1), fill(g0w, NULL, nte, -1, 1), fill(g0p, NULL, npe, -1, 1);
    float *fw = copy_f(g0w, nte), *fp = copy_f(g0p, npe), *zw = copy_f(g0w, nte);
    float *zp = copy_f(g0p, npe);
    ops->encoder_backward(fw, fp, dout, tok, ps, B, T, C);
    ops->encoder_backward(NULL, zp, dout, NULL, ps, B, T, C);
    tap_ok(same_bits(zp, fp, npe) && !same_bits(zp, g0p, npe),
           "encoder_backward (%s) dwte NULL (frozen): dwpe the same bits as beside dwte", tag);
    ops->encoder_backward(zw, NULL, dout, tok, ps, B, T, C);
    ops->encoder_backward(NULL, NULL, dout, NULL, ps, B, T, C);
    tap_ok(same_bits(zw, fw, nte) && !same_bits(zw, g0w, nte),
           "encoder_backward (%s) dwpe NULL: dwte the same bits; both NULL: returns", tag);
    free(tok), free(pos), free(dout), free(g0w), free(g0p), free(fw), free(fp), free(zw), free(zp);
}

/* 3 checks: layernorm_backward with dw and db NULL (frozen): dinp the same bits as with both;
 * dw NULL alone: dinp and db the same bits; db NULL alone: dinp and dw. */
static void test_layernorm_frozen(int N, int C, double offset) {
    const size_t nx = (size_t)N * C;
    float *inp = FALLOC(nx), *w = FALLOC(C), *b = FALLOC(C), *out = FALLOC(nx), *dout = FALLOC(nx);
    float *mean = FALLOC(N), *rstd = FALLOC(N), *g0i = FALLOC(nx), *g0w = FALLOC(C);
    float *g0b = FALLOC(C);
    fill(inp, NULL, nx, offset - 2, offset + 2), fill(w, NULL, C, 0.5, 1.5);
    fill(b, NULL, C, -1, 1), fill(dout, NULL, nx, -1, 1), fill(g0i, NULL, nx, -1, 1);
    fill(g0w, NULL, C, -1, 1), fill(g0b, NULL, C, -1, 1);
    ops->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    float *fi = copy_f(g0i, nx), *fw = copy_f(g0w, C), *fb = copy_f(g0b, C);
    ops->layernorm_backward(fi, fw, fb, dout, inp, w, mean, rstd, N, C);
    float *zi = copy_f(g0i, nx), *zw = copy_f(g0w, C), *zb = copy_f(g0b, C);
    ops->layernorm_backward(zi, NULL, NULL, dout, inp, w, mean, rstd, N, C);
    tap_ok(same_bits(zi, fi, nx), "layernorm_backward (N=%d C=%d) dw, db NULL (frozen): dinp the "
           "same bits as with them", N, C);
    memcpy(zi, g0i, nx * sizeof *zi);
    ops->layernorm_backward(zi, NULL, zb, dout, inp, w, mean, rstd, N, C);
    tap_ok(same_bits(zi, fi, nx) && same_bits(zb, fb, C),
           "layernorm_backward (N=%d C=%d) dw NULL: dinp and db the same bits", N, C);
    memcpy(zi, g0i, nx * sizeof *zi);
    ops->layernorm_backward(zi, zw, NULL, dout, inp, w, mean, rstd, N, C);
    tap_ok(same_bits(zi, fi, nx) && same_bits(zw, fw, C),
           "layernorm_backward (N=%d C=%d) db NULL: dinp and dw the same bits", N, C);
    free(inp), free(w), free(b), free(out), free(dout), free(mean), free(rstd), free(g0i);
    free(g0w), free(g0b), free(fi), free(fw), free(fb), free(zi), free(zw), free(zb);
}

/* 3 checks: matmul_backward with dw and dbias NULL (a frozen linear): dinp the same bits as with
 * both; dw NULL alone: dinp and dbias the same bits; dbias NULL alone: dinp and dw. */
static void test_matmul_frozen(int N, int IC, int OC) {
    const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = FALLOC(ni), *w = FALLOC(nw), *dout = FALLOC(no), *g0i = FALLOC(ni);
    float *g0w = FALLOC(nw), *g0b = FALLOC(OC);
    fill(inp, NULL, ni, -1, 1), fill(w, NULL, nw, -1, 1), fill(dout, NULL, no, -1, 1);
    fill(g0i, NULL, ni, -1, 1), fill(g0w, NULL, nw, -1, 1), fill(g0b, NULL, OC, -1, 1);
    float *fi = copy_f(g0i, ni), *fw = copy_f(g0w, nw), *fb = copy_f(g0b, OC);
    ops->matmul_backward(fi, fw, fb, dout, inp, w, N, IC, OC);
    float *zi = copy_f(g0i, ni), *zw = copy_f(g0w, nw), *zb = copy_f(g0b, OC);
    ops->matmul_backward(zi, NULL, NULL, dout, inp, w, N, IC, OC);
    tap_ok(same_bits(zi, fi, ni), "matmul_backward (N=%d IC=%d OC=%d) dw, dbias NULL (frozen): "
           "dinp the same bits as with them", N, IC, OC);
    memcpy(zi, g0i, ni * sizeof *zi);
    ops->matmul_backward(zi, NULL, zb, dout, inp, w, N, IC, OC);
    tap_ok(same_bits(zi, fi, ni) && same_bits(zb, fb, OC),
           "matmul_backward (N=%d IC=%d OC=%d) dw NULL: dinp and dbias the same bits", N, IC, OC);
    memcpy(zi, g0i, ni * sizeof *zi);
    ops->matmul_backward(zi, zw, NULL, dout, inp, w, N, IC, OC);
    tap_ok(same_bits(zi, fi, ni) && same_bits(zw, fw, nw),
           "matmul_backward (N=%d IC=%d OC=%d) dbias NULL: dinp and dw the same bits", N, IC, OC);
    free(inp), free(w), free(dout), free(g0i), free(g0w), free(g0b), free(fi), free(fw);
    free(fb), free(zi), free(zw), free(zb);
}

/* 1 check: the fp32 backend passes NULL weight gradients through: its encoder, layernorm and
 * matmul backwards with every weight gradient NULL give the op table's bits (dwpe alone for the
 * encoder) */
static void test_backend_frozen(void) {
    const int B = 2, T = 5, C = 8, N = B * T, OC = 12;
    const tsr_backend be = tsr_fp32_backend(ops);
    int32_t tok[10] = {1, 3, 3, 0, 2, 1, 1, 4, 0, 3};
    float *x = FALLOC((size_t)N * C), *d = FALLOC((size_t)N * OC), *w = FALLOC((size_t)OC * C);
    float *mean = FALLOC(N), *rstd = FALLOC(N), *o = FALLOC((size_t)N * C), *y[2], *p[2];
    fill(x, NULL, (size_t)N * C, -2, 2), fill(d, NULL, (size_t)N * OC, -1, 1);
    fill(w, NULL, (size_t)OC * C, 0.5, 1.5);
    ops->layernorm_forward(o, mean, rstd, x, w, NULL, N, C);
    for (int k = 0; k < 2; k++) {
        y[k] = FALLOC((size_t)N * C), p[k] = FALLOC((size_t)T * C);
        if (k == 0) {
            be.encoder_backward(&be, NULL, p[k], d, NULL, tok, NULL, B, T, C);
            be.layernorm_backward(&be, y[k], NULL, NULL, d, x, w, mean, rstd, N, C);
            be.matmul_backward(&be, y[k], NULL, NULL, d, x, w, N, C, OC, TSR_GRAD_ADD);
        } else {
            ops->encoder_backward(NULL, p[k], d, NULL, NULL, B, T, C);
            ops->layernorm_backward(y[k], NULL, NULL, d, x, w, mean, rstd, N, C);
            ops->matmul_backward(y[k], NULL, NULL, d, x, w, N, C, OC);
        }
    }
    tap_ok(same_bits(y[0], y[1], (size_t)N * C) && same_bits(p[0], p[1], (size_t)T * C),
           "fp32 backend: encoder, layernorm, matmul backward with NULL weight gradients = the "
           "op table's bits");
    for (int k = 0; k < 2; k++) free(y[k]), free(p[k]);
    free(x), free(d), free(w), free(mean), free(rstd), free(o);
}

/* 1 check: TSR_GRAD_SET on the fp32 backend: matmul, GELU and attention backward over a buffer
 * of NaNs give the op table's bits on a zeroed one (the old contents are neither read nor kept),
 * and TSR_GRAD_ADD still adds */
static void test_backend_set(void) {
    const int B = 2, T = 5, C = 8, NH = 2, N = B * T, OC = 12;
    const size_t nq = (size_t)N * 3 * C, no = (size_t)N * C;
    const tsr_backend be = tsr_fp32_backend(ops);
    float *x = FALLOC(no), *d = FALLOC((size_t)N * OC), *w = FALLOC((size_t)OC * C);
    float *qkv = FALLOC(nq), *out = FALLOC(no), *att = FALLOC((size_t)B * NH * T * T);
    float *y[2], *q[2];
    fill(x, NULL, no, -2, 2), fill(d, NULL, (size_t)N * OC, -1, 1);
    fill(w, NULL, (size_t)OC * C, -1, 1), fill(qkv, NULL, nq, -1, 1);
    ops->attention_forward(out, att, qkv, NULL, NULL, NULL, B, T, NH, NH, C / NH);
    for (int k = 0; k < 2; k++) {
        y[k] = FALLOC(no), q[k] = FALLOC(nq);
        for (size_t i = 0; i < no; i++) y[k][i] = k == 0 ? NAN : 0.0f;
        for (size_t i = 0; i < nq; i++) q[k][i] = k == 0 ? NAN : 0.0f;
    }
    int ok = 1;
    be.matmul_backward(&be, y[0], NULL, NULL, d, x, w, N, C, OC, TSR_GRAD_SET);
    ops->matmul_backward(y[1], NULL, NULL, d, x, w, N, C, OC);
    ok &= same_bits(y[0], y[1], no);
    be.matmul_backward(&be, y[0], NULL, NULL, d, x, w, N, C, OC, TSR_GRAD_ADD); /* adds again */
    ops->matmul_backward(y[1], NULL, NULL, d, x, w, N, C, OC);
    ok &= same_bits(y[0], y[1], no);
    for (size_t i = 0; i < no; i++) y[0][i] = NAN, y[1][i] = 0.0f;
    be.gelu_backward(&be, y[0], x, out, no, TSR_GELU_TANH, TSR_GRAD_SET);
    ops->gelu_backward(y[1], x, out, no, TSR_GELU_TANH);
    ok &= same_bits(y[0], y[1], no);
    be.attention_backward(&be, q[0], out, qkv, out, att, NULL, NULL, NULL, NULL, B, T, NH, NH,
                          C / NH, TSR_GRAD_SET);
    ops->attention_backward(q[1], out, qkv, att, NULL, NULL, B, T, NH, NH, C / NH);
    ok &= same_bits(q[0], q[1], nq);
    tap_ok(ok, "fp32 backend: matmul, gelu and attention backward with TSR_GRAD_SET over NaNs = "
           "the op table's bits on zeros; TSR_GRAD_ADD adds");
    for (int k = 0; k < 2; k++) free(y[k]), free(q[k]);
    free(x), free(d), free(w), free(qkv), free(out), free(att);
}

/* ---- determinism -------------------------------------------------------------------------- */

/* attention_backward (plain and with segment ids), encoder_backward (positions t and given) and
 * layernorm_backward give the same bits with 1 and 2 threads and when run twice. */
static void test_determinism(void) {
    const int B = 2, T = 70, C = 64, NH = 2, Vp = 10;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = FALLOC(nq), *out = FALLOC(no), *att = FALLOC(na), *dout = FALLOC(no);
    float *att_s = FALLOC(na);
    float *r[3], *rs[3], *e[3], *ep[3], *l[3];
    int32_t *tok = xcalloc(B * T, sizeof *tok), *seq = xcalloc(B * T, sizeof *seq);
    int32_t *pos = xcalloc(B * T, sizeof *pos);
    float *mean = FALLOC(B * T), *rstd = FALLOC(B * T), *w = FALLOC(C), *lo = FALLOC(no);
    fill(qkv, NULL, nq, -2, 2);
    fill(dout, NULL, no, -1, 1);
    fill(w, NULL, C, 0.5, 1.5);
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(urand() * Vp);
    random_segments(seq, B, T);
    for (int i = 0; i < B * T; i++) pos[i] = i % T && seq[i] == seq[i - 1] ? pos[i - 1] + 1 : 0;
    ops->attention_forward(out, att, qkv, NULL, NULL, NULL, B, T, NH, NH, C / NH);
    ops->attention_forward(out, att_s, qkv, NULL, seq, NULL, B, T, NH, NH, C / NH);
    ops->layernorm_forward(lo, mean, rstd, qkv, w, NULL, B * T, C); /* qkv rows as inputs */
    const int threads[3] = {1, 2, 2};
    size_t ne = (size_t)Vp * C + (size_t)T * C; /* dwte | dwpe */
    for (int k = 0; k < 3; k++) {
        cpu_ops_set_threads(threads[k]);
        r[k] = FALLOC(nq);
        ops->attention_backward(r[k], dout, qkv, att, NULL, NULL, B, T, NH, NH, C / NH);
        rs[k] = FALLOC(nq);
        ops->attention_backward(rs[k], dout, qkv, att_s, seq, NULL, B, T, NH, NH, C / NH);
        e[k] = FALLOC(ne);
        ops->encoder_backward(e[k], e[k] + (size_t)Vp * C, dout, tok, NULL, B, T, C);
        ep[k] = FALLOC(ne);
        ops->encoder_backward(ep[k], ep[k] + (size_t)Vp * C, dout, tok, pos, B, T, C);
        l[k] = FALLOC(no + 2 * (size_t)C); /* dinp | dw | db */
        ops->layernorm_backward(l[k], l[k] + no, l[k] + no + C, dout, qkv, w, mean, rstd, B * T, C);
    }
    cpu_ops_set_threads(2);
    size_t nb = ne * sizeof(float), nl = (no + 2 * C) * sizeof(float), nr = nq * sizeof(float);
    tap_ok(!memcmp(r[0], r[1], nr) && !memcmp(r[1], r[2], nr),
           "attention_backward: same bits with 1 and 2 threads, and run twice");
    tap_ok(!memcmp(rs[0], rs[1], nr) && !memcmp(rs[1], rs[2], nr),
           "attention_backward with segment ids: same bits with 1 and 2 threads, and run twice");
    tap_ok(!memcmp(e[0], e[1], nb) && !memcmp(e[1], e[2], nb),
           "encoder_backward: same bits with 1 and 2 threads, and run twice");
    tap_ok(!memcmp(ep[0], ep[1], nb) && !memcmp(ep[1], ep[2], nb),
           "encoder_backward with positions: same bits with 1 and 2 threads, and run twice");
    tap_ok(!memcmp(l[0], l[1], nl) && !memcmp(l[1], l[2], nl),
           "layernorm_backward: same bits with 1 and 2 threads, and run twice");
    for (int k = 0; k < 3; k++) free(r[k]), free(rs[k]), free(e[k]), free(ep[k]), free(l[k]);
    free(qkv), free(out), free(att), free(att_s), free(dout), free(tok), free(seq), free(pos);
    free(mean), free(rstd), free(w), free(lo);
}

/* attention_decode over a KV cache fed in chunks of `chunk` rows gives the same bits as
 * attention_forward over the whole sequence (the same fmaf order, softmax_causal_row shared);
 * KVH < NH: grouped-query attention, the cache holding KVH heads; W > 0 a sliding window, sinks
 * a sink logit per head (ops.h tsr_attn_var), both in the forward and the decode. */
static void test_attention_decode(int T, int C, int NH, int KVH, int alibi, int chunk, int W,
                                  int sinks, float cap) {
    const int hs = C / NH, nthr = 2;
    const size_t QKV = (size_t)(NH + 2 * KVH) * hs;
    float *qkv = xcalloc((size_t)T * QKV, sizeof(float)), *out = xcalloc((size_t)T * C, 4);
    float *att = xcalloc((size_t)NH * T * T, 4), *dec = xcalloc((size_t)T * C, 4);
    float *kt = xcalloc((size_t)KVH * hs * T, 4), *v = xcalloc((size_t)KVH * T * hs, 4);
    float *scratch = xcalloc((size_t)nthr * T, 4), sl[16];
    double sd[16];
    fill(qkv, NULL, (size_t)T * QKV, -2.0, 2.0);
    alibi_slopes(sd, NH);
    for (int h = 0; h < NH; h++) sl[h] = (float)sd[h];
    float sk[16];
    fill(sk, NULL, 16, -1.0, 3.0);
    const tsr_attn_var var = {.window = W, .sinks = sinks ? sk : NULL, .softcap = cap};
    const tsr_attn_var *vp = W || sinks || cap > 0 ? &var : NULL;
    ops->attention_forward(out, att, qkv, alibi ? sl : NULL, NULL, vp, 1, T, NH, KVH, hs);
    for (int p0 = 0; p0 < T; p0 += chunk) {
        int c = T - p0 < chunk ? T - p0 : chunk;
        ops->attention_decode(dec + (size_t)p0 * C, kt, v, qkv + (size_t)p0 * QKV,
                              alibi ? sl : NULL, vp, scratch, nthr, p0, c, 0, T, NH, KVH, hs);
    }
    tap_ok(memcmp(out, dec, (size_t)T * C * sizeof(float)) == 0,
           "attention_decode T=%d C=%d NH=%d KVH=%d%s chunk %d window %d%s soft cap %g: the same "
           "bits as attention_forward",
           T, C, NH, KVH, alibi ? " ALiBi" : "", chunk, W, sinks ? " sinks" : "", cap);
    free(qkv), free(out), free(att), free(dec), free(kt), free(v), free(scratch);
}

/* The fp32 backend's fused ops are the unfused op-table sequence, bit for bit. */
static void test_fp32_backend_fusions(void) {
    const int N = 6, C = 16, OC = 24, V = 20, Vp = 24;
    const tsr_backend be = tsr_fp32_backend(ops);
    float *a = xcalloc((size_t)N * OC, 4), *b = xcalloc((size_t)N * OC, 4), *w = xcalloc(OC * C, 4);
    float *r1 = xcalloc((size_t)N * OC, 4), *r2 = xcalloc((size_t)N * OC, 4);
    float *o1 = xcalloc((size_t)N * Vp, 4), *o2 = xcalloc((size_t)N * Vp, 4);
    float st[4][8], l1[8], l2[8], dl[8];
    int32_t tg[6] = {1, -1, 19, 0, 7, 3};
    fill(a, NULL, (size_t)N * OC, -1.0, 1.0), fill(b, NULL, (size_t)N * OC, -1.0, 1.0);
    fill(w, NULL, (size_t)OC * C, -1.0, 1.0);
    be.residual_layernorm_forward(&be, r1, o1, st[0], st[1], a, b, w, b, N, C);
    ops->residual_forward(r2, a, b, (size_t)N * C);
    ops->layernorm_forward(o2, st[2], st[3], r2, w, b, N, C);
    tap_ok(!memcmp(r1, r2, (size_t)N * C * 4) && !memcmp(o1, o2, (size_t)N * C * 4) &&
           !memcmp(st[0], st[2], N * 4) && !memcmp(st[1], st[3], N * 4),
           "fp32 backend: residual_layernorm_forward = residual_forward, layernorm_forward");
    be.matmul_forward(&be, o1, r1, a, w, b, N, C, OC, TSR_GELU_EXACT);
    ops->matmul_forward(r2, a, w, b, N, C, OC);
    ops->gelu_forward(o2, r2, (size_t)N * OC, TSR_GELU_EXACT);
    tap_ok(!memcmp(r1, r2, (size_t)N * OC * 4) && !memcmp(o1, o2, (size_t)N * OC * 4),
           "fp32 backend: matmul_forward with pre_gelu = matmul_forward, gelu_forward");
    for (int i = 0; i < N; i++) dl[i] = 0.25f;
    fill(o1, NULL, (size_t)N * Vp, -3.0, 3.0);
    memcpy(o2, o1, (size_t)N * Vp * 4);
    be.softmax_xent(&be, l1, o1, tg, dl, N, V, Vp);
    ops->softmax_xent_forward(l2, o2, o2, tg, N, V, Vp);
    ops->softmax_xent_backward(o2, dl, o2, tg, N, V, Vp);
    tap_ok(!memcmp(l1, l2, N * 4) && !memcmp(o1, o2, (size_t)N * Vp * 4),
           "fp32 backend: softmax_xent with dlosses = softmax_xent_forward, _backward in place");
    free(a), free(b), free(w), free(r1), free(r2), free(o1), free(o2);
}

int main(void) {
    tap_plan(NCHECKS);
    cpu_ops_set_threads(2);
    tap_diag("BLAS core: %s", cpu_ops_blas_core());
    test_expf();
    test_memory();
    test_encoder(0);
    test_encoder(1);
    test_encoder(2);
    test_layernorm(10, 8, 1, 0.0);
    test_layernorm(10, 8, 0, 0.0);
    test_layernorm(7, 37, 1, 50.0);
    test_matmul(10, 7, 5, 1);
    test_matmul(10, 7, 5, 0);
    test_matmul(33, 40, 24, 1);
    test_attention(2, 5, 8, 2, 0, 0);
    test_attention(2, 5, 12, 3, 1, 0);  /* ALiBi, 3 heads (not a power of two) */
    test_attention(1, 70, 64, 2, 1, 400); /* full 4x16 tiles, two backward row blocks */
    test_attention(1, 70, 64, 2, 0, 400);
    /* head size 28: register tiles of 16 and 8 columns and a 4-column edge (AVX-512; 8 + 4 and
     * a 16-column tile with AVX2) */
    test_attention(1, 70, 56, 2, 0, 400);
    test_attention_seq(2, 9, 8, 2, 0, 0);
    test_attention_seq(2, 12, 12, 3, 1, 0);  /* ALiBi, 3 heads */
    test_attention_seq(1, 70, 64, 2, 1, 400); /* full tiles, segments across tiles and row blocks */
    test_attention_seq(2, 150, 32, 2, 0, 400); /* three backward row blocks */
    test_attention_decode(9, 12, 3, 3, 1, 1, 0, 0, 0);  /* one row at a time, ALiBi, 3 heads */
    test_attention_decode(70, 64, 2, 2, 0, 3, 0, 0, 0); /* chunks of 3 rows across tiles */
    test_attention_decode(70, 128, 4, 2, 0, 3, 0, 0, 0); /* grouped-query: 2 query heads per kv */
    test_attention_decode(9, 24, 6, 1, 1, 2, 0, 0, 0);   /* multi-query, ALiBi */
    test_attention_decode(70, 64, 2, 2, 1, 3, 9, 1, 0);   /* window 9 across tiles, ALiBi, sinks */
    test_attention_decode(70, 128, 4, 2, 0, 5, 20, 0, 0); /* window 20, grouped-query */
    test_attention_decode(70, 64, 2, 2, 0, 3, 0, 0, 1.5f); /* Gemma 2's soft cap */
    test_attention_decode(70, 64, 2, 2, 1, 3, 9, 1, 1.5f); /* soft cap, window, ALiBi, sinks */
    test_gelu(TSR_GELU_TANH);
    test_gelu(TSR_GELU_EXACT);
    test_residual();
    test_xent();
    test_sumsq();
    test_adamw(1);
    test_adamw(5);
    test_determinism();
    test_fp32_backend_fusions();
    test_encoder_frozen(1);           /* frozen parameters: 2 each */
    test_encoder_frozen(2);
    test_layernorm_frozen(10, 8, 0.0); /* 3 each */
    test_layernorm_frozen(7, 37, 50.0);
    test_layernorm_frozen(300, 64, 1.0); /* parallel rows, five row chunks */
    test_matmul_frozen(10, 7, 5);      /* 3 each */
    test_matmul_frozen(33, 40, 24);
    test_matmul_frozen(200, 96, 130);  /* dbias over parallel row chunks */
    test_backend_frozen();             /* 1 */
    test_backend_set();                /* 1 */
    return tap_done();
}
