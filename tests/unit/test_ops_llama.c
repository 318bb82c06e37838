/* test_ops_llama.c — the fp32 CPU ops of the Llama/Qwen blocks (kernels/cpu/cpu_llama.c: RMSNorm,
 * QK-norm, RoPE, SwiGLU; grouped-query attention in cpu_attention.c, with KVH in {NH, NH/2, 1})
 * against float64 references written here as plain loops.
 *
 * Method (that of test_ops.c, whose helpers ops_check.h holds): inputs are drawn as floats and
 * copied to float64, so op and reference see the same numbers; each forward is compared with the
 * float64 reference forward; each backward with central finite differences of the float64
 * reference of J = sum(out * wts), wts random and handed to the backward as dout. Gradient buffers
 * start at random values G0 and are compared with G0 + dJ/dx, which checks the accumulation (+=).
 * Tolerances are abs + rel * |ref| (tap_max_err <= 1 passes), about 10-100x the fp32 rounding
 * error of each op (stated beside each check), so a wrong term (1e-2 and up) fails loudly.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ops.h"
#include "ops_check.h"
#include "tap.h"

#define NCHECKS 126

static const tsr_ops *ops = &tsr_cpu_ops;

/* ---- float64 references ------------------------------------------------------------------- */

/* out = x * r * w, r = 1 / sqrt(mean(x^2) + eps), per row of C; rstd (N) or NULL */
static void ref_rmsnorm(double *out, double *rstd, const double *inp, const double *w, int N,
                        int C, double eps) {
    for (int n = 0; n < N; n++) {
        const double *x = inp + (size_t)n * C;
        double s = 0.0;
        for (int c = 0; c < C; c++) s += x[c] * x[c];
        double r = 1.0 / sqrt(s / C + eps);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = x[c] * r * w[c];
        if (rstd) rstd[n] = r;
    }
}

/* QK-norm: query heads with qw, key heads with kw, value heads copied; rstd (N, NH+KVH) or NULL.
 * proj (OLMo 2's scope): all the query heads one row with qw (NH hs), all the key heads one with kw
 * (KVH hs); rstd (N, 2) */
static void ref_qknorm(double *out, double *rstd, const double *inp, const double *qw,
                       const double *kw, int N, int NH, int KVH, int hs, double eps, int proj) {
    const int nq = proj ? 1 : NH, nk = proj ? 1 : KVH, wq = proj ? NH * hs : hs;
    const int wk = proj ? KVH * hs : hs, H = nq + nk, QKV = (NH + 2 * KVH) * hs;
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < H; h++) {
            const size_t c = h < nq ? (size_t)h * wq : (size_t)nq * wq + (size_t)(h - nq) * wk;
            const size_t o = (size_t)n * QKV + c;
            ref_rmsnorm(out + o, rstd ? rstd + (size_t)n * H + h : NULL, inp + o, h < nq ? qw : kw,
                        1, h < nq ? wq : wk, eps);
        }
        for (int c = (NH + KVH) * hs; c < QKV; c++)
            out[(size_t)n * QKV + c] = inp[(size_t)n * QKV + c];
    }
}

/* RoPE by the definition of ops.h, in float64 (sign -1: the inverse rotation) */
static void ref_rope(double *out, const double *qkv, const int32_t *pos, int p0,
                     const float *inv_freq, int B, int T, int NH, int KVH, int hs, double sign) {
    const int QKV = (NH + 2 * KVH) * hs, half = hs / 2;
    memcpy(out, qkv, (size_t)B * T * QKV * sizeof *out);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            double p = pos ? pos[b * T + t] : t + p0;
            for (int h = 0; h < NH + KVH; h++) {
                size_t o = ((size_t)b * T + t) * QKV + (size_t)h * hs;
                for (int i = 0; i < half; i++) {
                    double a = sign * p * (double)inv_freq[i], x = qkv[o + i];
                    double y = qkv[o + half + i];
                    out[o + i] = x * cos(a) - y * sin(a);
                    out[o + half + i] = y * cos(a) + x * sin(a);
                }
            }
        }
}

/* SwiGLU, or with geglu GeGLU: 0.5 g (1 + tanh(sqrt(2/pi)(g + 0.044715 g^3))) in silu's place */
static void ref_swiglu(double *out, const double *inp, int N, int F, int geglu) {
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            double g = inp[(size_t)n * 2 * F + f], u = inp[(size_t)n * 2 * F + F + f];
            const double v = sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g);
            const double a = geglu ? 0.5 * g * (1.0 + tanh(v)) : g / (1.0 + exp(-g));
            out[(size_t)n * F + f] = a * u;
        }
}

/* Grouped-query causal attention with an explicit mask: query head h reads kv head h / (NH/KVH);
 * row i sees j <= i with seq[j] == seq[i] (every j <= i without seq); att (B,NH,T,T) or NULL */
static void ref_attention(double *out, double *att, const double *qkv, const double *slopes,
                          const int32_t *seq, int B, int T, int NH, int KVH, int hs) {
    const int QKV = (NH + 2 * KVH) * hs, C = NH * hs;
    double scale = 1.0 / sqrt((double)hs), *s = DALLOC((size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const int g = h / (NH / KVH);
                const double *q = qkv + ((size_t)b * T + i) * QKV + h * hs;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * QKV + (NH + g) * hs;
                    double dot = 0.0;
                    for (int d = 0; d < hs; d++) dot += q[d] * k[d];
                    s[j] = dot * scale - (slopes ? slopes[h] * (i - j) : 0.0);
                    if (seq && seq[b * T + j] != seq[b * T + i]) s[j] = -INFINITY;
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j <= i; j++) sum += (s[j] = exp(s[j] - mx));
                for (int j = 0; j <= i; j++) s[j] /= sum;
                for (int d = 0; d < hs; d++) {
                    double acc = 0.0;
                    for (int j = 0; j <= i; j++)
                        acc += s[j] * qkv[((size_t)b * T + j) * QKV + (NH + KVH + g) * hs + d];
                    out[((size_t)b * T + i) * C + h * hs + d] = acc;
                }
                if (att)
                    for (int j = 0; j < T; j++)
                        att[(((size_t)b * NH + h) * T + i) * T + j] = j <= i ? s[j] : 0.0;
            }
    free(s);
}

/* Llama's frequencies theta^(-2i/hs), as floats (the op takes them as given) */
static void rope_freqs(float *f, int hs, double theta) {
    for (int i = 0; i < hs / 2; i++) f[i] = (float)pow(theta, -2.0 * i / hs);
}

/* ---- RMSNorm ------------------------------------------------------------------------------ */

typedef struct {
    const double *inp, *w;
    int N, C;
    double eps;
} rms_ctx;

static void rms_obj(const void *c, double *out) {
    const rms_ctx *r = c;
    ref_rmsnorm(out, NULL, r->inp, r->w, r->N, r->C, r->eps);
}

/* 5 checks */
static void test_rmsnorm(int N, int C, double offset, float eps) {
    size_t nx = (size_t)N * C;
    float *inp = FALLOC(nx), *w = FALLOC(C), *out = FALLOC(nx), *dout = FALLOC(nx);
    float *rstd = FALLOC(N), *g_inp = FALLOC(nx), *g_w = FALLOC(C);
    double *inp_ = DALLOC(nx), *w_ = DALLOC(C), *wts = DALLOC(nx), *want = DALLOC(nx);
    double *wrstd = DALLOC(N);
    fill(inp, inp_, nx, offset - 2, offset + 2);
    fill(w, w_, C, 0.5, 1.5);
    fill(dout, wts, nx, -1, 1);
    fill(g_inp, NULL, nx, -1, 1);
    fill(g_w, NULL, C, -1, 1);
    float *g0_inp = copy_f(g_inp, nx), *g0_w = copy_f(g_w, C);
    char what[96];
#define RMS_WHAT(s) \
    (snprintf(what, sizeof what, "rmsnorm %s (N=%d C=%d offset %g eps %g)", s, N, C, offset, \
              (double)eps),                                                                 \
     what)
    ops->rmsnorm_forward(out, rstd, inp, w, N, C, eps);
    ref_rmsnorm(want, wrstd, inp_, w_, N, C, eps);
    /* a C-term sum of squares in double, then 3 fp32 products: a few ulp */
    check(RMS_WHAT("forward out"), out, want, nx, 1e-6, 2e-6);
    check(RMS_WHAT("forward rstd"), rstd, wrstd, N, 1e-9, 1e-6);
    ops->rmsnorm_backward(g_inp, g_w, dout, inp, w, rstd, N, C);
    rms_ctx ctx = {inp_, w_, N, C, eps};
    objective o = {rms_obj, &ctx, nx, wts, DALLOC(nx)};
    /* dinp: a C-term sum times rstd; dw: an N-term sum (both fp32 products of order-1 terms) */
    check_grad(RMS_WHAT("backward dinp"), g_inp, g0_inp, inp_, nx, &o, 2e-5, 1e-4);
    check_grad(RMS_WHAT("backward dw"), g_w, g0_w, w_, C, &o, 2e-5, 1e-4);
#undef RMS_WHAT
    /* the same bits in place (out == inp) */
    float *io = copy_f(inp, nx), *rstd2 = FALLOC(N);
    ops->rmsnorm_forward(io, rstd2, io, w, N, C, eps);
    tap_ok(!memcmp(io, out, nx * 4) && !memcmp(rstd2, rstd, (size_t)N * 4),
           "rmsnorm forward in place (N=%d C=%d): the same bits", N, C);
    free(o.out), free(io), free(rstd2);
    free(inp), free(w), free(out), free(dout), free(rstd), free(g_inp), free(g_w), free(inp_);
    free(w_), free(wts), free(want), free(wrstd), free(g0_inp), free(g0_w);
}

/* ---- QK-norm ------------------------------------------------------------------------------ */

typedef struct {
    const double *inp, *qw, *kw;
    int N, NH, KVH, hs;
    double eps;
    int proj;
} qkn_ctx;

static void qkn_obj(const void *c, double *out) {
    const qkn_ctx *q = c;
    ref_qknorm(out, NULL, q->inp, q->qw, q->kw, q->N, q->NH, q->KVH, q->hs, q->eps, q->proj);
}

/* 5 checks; proj: the projection scope (qknorm_proj_*) */
static void test_qknorm(int N, int NH, int KVH, int hs, int proj) {
    const float eps = 1e-6f;
    const int wq = proj ? NH * hs : hs, wk = proj ? KVH * hs : hs;
    size_t nx = (size_t)N * (NH + 2 * KVH) * hs, nr = (size_t)N * (proj ? 2 : NH + KVH);
    float *inp = FALLOC(nx), *qw = FALLOC(wq), *kw = FALLOC(wk), *out = FALLOC(nx);
    float *dout = FALLOC(nx), *rstd = FALLOC(nr), *g = FALLOC(nx), *gq = FALLOC(wq);
    float *gk = FALLOC(wk);
    double *inp_ = DALLOC(nx), *qw_ = DALLOC(wq), *kw_ = DALLOC(wk), *wts = DALLOC(nx);
    double *want = DALLOC(nx), *wrstd = DALLOC(nr);
    fill(inp, inp_, nx, -2, 2);
    fill(qw, qw_, wq, 0.5, 1.5);
    fill(kw, kw_, wk, 0.5, 1.5);
    fill(dout, wts, nx, -1, 1);
    fill(g, NULL, nx, -1, 1), fill(gq, NULL, wq, -1, 1), fill(gk, NULL, wk, -1, 1);
    float *g0 = copy_f(g, nx), *g0q = copy_f(gq, wq), *g0k = copy_f(gk, wk);
    char what[112];
#define QKN_WHAT(s) \
    (snprintf(what, sizeof what, "qknorm%s %s (N=%d NH=%d KVH=%d hs=%d)", proj ? "_proj" : "", s, \
              N, NH, KVH, hs), what)
    (proj ? ops->qknorm_proj_forward : ops->qknorm_forward)(out, rstd, inp, qw, kw, N, NH, KVH, hs,
                                                            eps);
    ref_qknorm(want, wrstd, inp_, qw_, kw_, N, NH, KVH, hs, eps, proj);
    /* RMSNorm rows of hs (a few ulp); value columns copied, so exact */
    check(QKN_WHAT("forward out"), out, want, nx, 1e-6, 2e-6);
    check(QKN_WHAT("forward rstd"), rstd, wrstd, nr, 1e-9, 1e-6);
    (proj ? ops->qknorm_proj_backward : ops->qknorm_backward)(g, gq, gk, dout, inp, qw, kw, rstd,
                                                              N, NH, KVH, hs);
    qkn_ctx ctx = {inp_, qw_, kw_, N, NH, KVH, hs, eps, proj};
    objective o = {qkn_obj, &ctx, nx, wts, DALLOC(nx)};
    check_grad(QKN_WHAT("backward dinp"), g, g0, inp_, nx, &o, 2e-5, 1e-4);
    check_grad(QKN_WHAT("backward dqw"), gq, g0q, qw_, wq, &o, 2e-5, 1e-4);
    check_grad(QKN_WHAT("backward dkw"), gk, g0k, kw_, wk, &o, 2e-5, 1e-4);
#undef QKN_WHAT
    free(o.out);
    free(inp), free(qw), free(kw), free(out), free(dout), free(rstd), free(g), free(gq), free(gk);
    free(inp_), free(qw_), free(kw_), free(wts), free(want), free(wrstd), free(g0), free(g0q);
    free(g0k);
}

/* ---- RoPE --------------------------------------------------------------------------------- */

typedef struct {
    const double *qkv;
    const int32_t *pos;
    const float *inv_freq;
    int p0, B, T, NH, KVH, hs;
} rope_ctx;

static void rope_obj(const void *c, double *out) {
    const rope_ctx *r = c;
    ref_rope(out, r->qkv, r->pos, r->p0, r->inv_freq, r->B, r->T, r->NH, r->KVH, r->hs, 1.0);
}

/* x . y over n, in double */
static double dotf(const float *x, const float *y, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * y[i];
    return s;
}

/* 5 checks. with_pos: positions given (restarting per segment, as attn_mask = document), else
 * t + p0 */
static void test_rope(int B, int T, int NH, int KVH, int hs, int with_pos, int p0) {
    const int QKV = (NH + 2 * KVH) * hs, vcol = (NH + KVH) * hs;
    size_t nx = (size_t)B * T * QKV;
    int32_t *pos = xcalloc((size_t)B * T, sizeof *pos);
    for (int i = 0; i < B * T; i++) pos[i] = i % T && urand() < 0.8 ? pos[i - 1] + 1 : 0;
    const int32_t *ps = with_pos ? pos : NULL;
    float *inv_freq = FALLOC(hs / 2), *x = FALLOC(nx), *y = FALLOC(nx), *rx = FALLOC(nx);
    double *x_ = DALLOC(nx), *want = DALLOC(nx), *wts = DALLOC(nx);
    rope_freqs(inv_freq, hs, 10000.0);
    fill(x, x_, nx, -2, 2);
    fill(y, wts, nx, -1, 1);
    char what[128];
#define ROPE_WHAT(s)                                                                        \
    (snprintf(what, sizeof what, "rope %s (B=%d T=%d NH=%d KVH=%d hs=%d %s p0=%d)", s, B, T, \
              NH, KVH, hs, with_pos ? "pos" : "t+p0", p0),                                  \
     what)
    memcpy(rx, x, nx * 4);
    ops->rope_forward(rx, ps, p0, inv_freq, B, T, NH, KVH, hs);
    ref_rope(want, x_, ps, p0, inv_freq, B, T, NH, KVH, hs, 1.0);
    /* cos and sin rounded to float, two products and a sum of order 2: ~4 ulp of 2 */
    check(ROPE_WHAT("forward"), rx, want, nx, 1e-6, 1e-6);
    int vsame = 1;
    for (size_t r = 0; r < (size_t)B * T; r++)
        vsame &= !memcmp(rx + r * QKV + vcol, x + r * QKV + vcol, (size_t)KVH * hs * 4);
    /* the backward: in place, the gradient of J = sum(rope(x) * y) */
    float *ry = copy_f(y, nx);
    ops->rope_backward(ry, ps, p0, inv_freq, B, T, NH, KVH, hs);
    for (size_t r = 0; r < (size_t)B * T; r++)
        vsame &= !memcmp(ry + r * QKV + vcol, y + r * QKV + vcol, (size_t)KVH * hs * 4);
    tap_ok(vsame, "%s", ROPE_WHAT("forward and backward leave the value heads' bits alone"));
    rope_ctx ctx = {x_, ps, inv_freq, p0, B, T, NH, KVH, hs};
    objective o = {rope_obj, &ctx, nx, wts, DALLOC(nx)};
    float *zero = FALLOC(nx);
    check_grad(ROPE_WHAT("backward"), ry, zero, x_, nx, &o, 1e-6, 1e-5);
    /* the transpose: R(x) . y == x . R^T(y), both in double over the fp32 results; each side
     * has rounding ~1e-7 per term of size ~2 */
    double l = dotf(rx, y, nx), r = dotf(x, ry, nx), scale_ = 0.0;
    for (size_t i = 0; i < nx; i++) scale_ += fabs((double)x[i] * y[i]);
    tap_ok(fabs(l - r) <= 1e-6 * scale_, "%s: %.12g vs %.12g",
           ROPE_WHAT("R(x).y == x.R^T(y)"), l, r);
    /* backward after forward gives x back (R^T R = 1) within rounding */
    ops->rope_backward(rx, ps, p0, inv_freq, B, T, NH, KVH, hs);
    check(ROPE_WHAT("backward(forward(x)) == x"), rx, x_, nx, 2e-6, 2e-6);
#undef ROPE_WHAT
    free(o.out), free(zero), free(ry);
    free(pos), free(inv_freq), free(x), free(y), free(rx), free(x_), free(want), free(wts);
}

/* 3 checks. rope_part_forward/backward (partial rotary, YaRN's factor mscale on cos and sin):
 * rot = hs, mscale = 1 is rope_forward / rope_backward bit for bit; with rot < hs and mscale the
 * first rot dimensions of every q and k head against a double reference (pairs (i, i + rot/2),
 * angle (t + p0) f_i, times mscale), the other dimensions and the value heads the same bits;
 * the backward is the forward's transpose. */
static void test_rope_part(int B, int T, int NH, int KVH, int hs, int rot, float ms, int p0) {
    const int QKV = (NH + 2 * KVH) * hs, H = NH + KVH;
    size_t nx = (size_t)B * T * QKV;
    float *f = FALLOC(hs / 2), *x = FALLOC(nx), *a = FALLOC(nx), *b = FALLOC(nx), *y = FALLOC(nx);
    double *x_ = DALLOC(nx), *y_ = DALLOC(nx);
    rope_freqs(f, rot, 10000.0);
    fill(x, x_, nx, -2, 2), fill(y, y_, nx, -1, 1);
    memcpy(a, x, nx * 4), memcpy(b, x, nx * 4);
    ops->rope_forward(a, NULL, p0, f, B, T, NH, KVH, hs);
    ops->rope_part_forward(b, NULL, p0, f, B, T, NH, KVH, hs, hs, 1.0f);
    int same = !memcmp(a, b, nx * 4);
    memcpy(a, y, nx * 4), memcpy(b, y, nx * 4);
    ops->rope_backward(a, NULL, p0, f, B, T, NH, KVH, hs);
    ops->rope_part_backward(b, NULL, p0, f, B, T, NH, KVH, hs, hs, 1.0f);
    tap_ok(same && !memcmp(a, b, nx * 4), "rope_part hs=%d rot=hs mscale 1 == rope_forward, "
           "rope_backward bit for bit", hs);
    memcpy(a, x, nx * 4);
    ops->rope_part_forward(a, NULL, p0, f, B, T, NH, KVH, hs, rot, ms);
    double worst = 0.0;
    int rest = 1;
    for (size_t n = 0; n < (size_t)B * T; n++)
        for (int h = 0; h < NH + 2 * KVH; h++)
            for (int d = 0; d < hs; d++) {
                const size_t k = n * QKV + (size_t)h * hs + d;
                if (h >= H || d >= rot) {
                    rest &= a[k] == x[k];
                    continue;
                }
                const int i = d % (rot / 2), lo = d < rot / 2;
                const double ang = (double)(n % T + p0) * f[i];
                const double u = x_[k - (lo ? 0 : rot / 2)], v = x_[k + (lo ? rot / 2 : 0)];
                const double c = cos(ang), sn = sin(ang);
                const double w = ms * (lo ? u * c - v * sn : v * c + u * sn);
                if (fabs(a[k] - w) > worst) worst = fabs(a[k] - w);
            }
    tap_ok(rest && worst <= 4e-6, "rope_part forward hs=%d rot=%d mscale %g: max |err| %.2g <= "
           "4e-6 in the rotated dims, the rest the same bits", hs, rot, ms, worst);
    memcpy(b, y, nx * 4);
    ops->rope_part_backward(b, NULL, p0, f, B, T, NH, KVH, hs, rot, ms);
    double l = dotf(a, y, nx), r = dotf(x, b, nx), sc = 0.0;
    for (size_t i = 0; i < nx; i++) sc += fabs((double)x[i] * y[i]);
    tap_ok(fabs(l - r) <= 2e-6 * sc, "rope_part hs=%d rot=%d: R(x).y == x.R^T(y): %.12g vs %.12g",
           hs, rot, l, r);
    free(f), free(x), free(a), free(b), free(y), free(x_), free(y_);
}

/* ---- SwiGLU ------------------------------------------------------------------------------- */

typedef struct {
    const double *inp;
    int N, F, geglu;
} swiglu_ctx;

static void swiglu_obj(const void *c, double *out) {
    const swiglu_ctx *s = c;
    ref_swiglu(out, s->inp, s->N, s->F, s->geglu);
}

/* 2 checks. range: gate and up values in [-range, range] (plus a few large gates for the tails
 * of exp); geglu: geglu_* (Gemma) in place of swiglu_* */
static void test_swiglu(int N, int F, double range, int geglu) {
    const char *name = geglu ? "geglu" : "swiglu";
    size_t ni = (size_t)N * 2 * F, no = (size_t)N * F;
    float *inp = FALLOC(ni), *out = FALLOC(no), *dout = FALLOC(no), *g = FALLOC(ni);
    double *inp_ = DALLOC(ni), *want = DALLOC(no), *wts = DALLOC(no);
    fill(inp, inp_, ni, -range, range);
    const float tails[4] = {-100.0f, -30.0f, 30.0f, 100.0f};
    for (int k = 0; k < 4 && F >= 4; k++) inp[k] = (float)(inp_[k] = tails[k]);
    fill(dout, wts, no, -1, 1);
    fill(g, NULL, ni, -1, 1);
    float *g0 = copy_f(g, ni);
    char what[96];
    (geglu ? ops->geglu_forward : ops->swiglu_forward)(out, inp, N, F);
    ref_swiglu(want, inp_, N, F, geglu);
    /* exp (a few ulp), a quotient and a product: ~1e-6 relative */
    snprintf(what, sizeof what, "%s forward (N=%d F=%d range %g)", name, N, F, range);
    check(what, out, want, no, 1e-7, 2e-6);
    (geglu ? ops->geglu_backward : ops->swiglu_backward)(g, inp, dout, N, F);
    swiglu_ctx ctx = {inp_, N, F, geglu};
    objective o = {swiglu_obj, &ctx, no, wts, DALLOC(no)};
    snprintf(what, sizeof what, "%s backward dinp (N=%d F=%d range %g)", name, N, F, range);
    if (ni <= 20000)
        check_grad(what, g, g0, inp_, ni, &o, 1e-6, 1e-5);
    else /* each difference reruns the whole reference */
        check_grad_sampled(what, g, g0, inp_, ni, 300, &o, 1e-6, 1e-5);
    free(o.out);
    free(inp), free(out), free(dout), free(g), free(inp_), free(want), free(wts), free(g0);
}

/* ---- grouped-query attention --------------------------------------------------------------- */

typedef struct {
    const double *qkv, *slopes;
    const int32_t *seq;
    int B, T, NH, KVH, hs;
} att_ctx;

static void att_obj(const void *c, double *out) {
    const att_ctx *a = c;
    ref_attention(out, NULL, a->qkv, a->slopes, a->seq, a->B, a->T, a->NH, a->KVH, a->hs);
}

/* Segment ids: runs of random length 1..T, increasing, not counting from 0 */
static void random_segments(int32_t *seq, int B, int T) {
    for (int b = 0; b < B; b++) {
        int32_t id = 3;
        for (int t = 0; t < T;) {
            int len = 1 + (int)(urand() * (urand() < 0.5 ? 6 : T));
            for (int k = 0; k < len && t < T; k++) seq[(size_t)b * T + t++] = id;
            id += 1 + (int32_t)(urand() * 3);
        }
    }
}

/* 3 checks: forward out and probabilities against the float64 reference, backward dqkv (every
 * element, or fd_samples of them) against its finite differences */
static void test_gqa(int B, int T, int NH, int KVH, int hs, int alibi, int with_seq,
                     size_t fd_samples) {
    const int QKV = (NH + 2 * KVH) * hs, C = NH * hs;
    size_t nq = (size_t)B * T * QKV, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = FALLOC(nq), *out = FALLOC(no), *att = FALLOC(na), *dout = FALLOC(no);
    float *g = FALLOC(nq), *slopes = FALLOC(NH);
    double *qkv_ = DALLOC(nq), *wts = DALLOC(no), *want = DALLOC(no), *want_att = DALLOC(na);
    double *slopes_ = DALLOC(NH);
    int32_t *seq = xcalloc((size_t)B * T, sizeof *seq);
    random_segments(seq, B, T);
    const int32_t *sq = with_seq ? seq : NULL;
    for (int h = 0; h < NH; h++)
        slopes[h] = (float)(slopes_[h] = (float)pow(2.0, -8.0 * (h + 1) / NH));
    fill(qkv, qkv_, nq, -2, 2);
    fill(dout, wts, no, -1, 1);
    fill(g, NULL, nq, -1, 1);
    float *g0 = copy_f(g, nq);
    char what[128];
#define GQA_WHAT(s)                                                                          \
    (snprintf(what, sizeof what, "gqa attention %s (B=%d T=%d NH=%d KVH=%d hs=%d%s%s)", s, B, \
              T, NH, KVH, hs, alibi ? " alibi" : "", with_seq ? " segments" : ""),           \
     what)
    ops->attention_forward(out, att, qkv, alibi ? slopes : NULL, sq, NULL, B, T, NH, KVH, hs);
    ref_attention(want, want_att, qkv_, alibi ? slopes_ : NULL, sq, B, T, NH, KVH, hs);
    /* scores: hs-term dot products of values <= 2 (fp32 error ~1e-6 absolute), through exp */
    check(GQA_WHAT("forward out"), out, want, no, 2e-6, 1e-5);
    check(GQA_WHAT("forward att"), att, want_att, na, 1e-6, 1e-5);
    ops->attention_backward(g, dout, qkv, att, sq, NULL, B, T, NH, KVH, hs);
    att_ctx ctx = {qkv_, alibi ? slopes_ : NULL, sq, B, T, NH, KVH, hs};
    objective o = {att_obj, &ctx, no, wts, DALLOC(no)};
    /* sums over T, hs and the group's query heads of order-1 products: fp32 error ~1e-6 */
    check_grad_some(GQA_WHAT("backward dqkv"), g, g0, qkv_, nq, fd_samples, &o, 1e-5, 1e-4);
#undef GQA_WHAT
    free(o.out);
    free(qkv), free(out), free(att), free(dout), free(g), free(slopes), free(qkv_), free(wts);
    free(want), free(want_att), free(slopes_), free(seq), free(g0);
}

/* 1 check: the GQA backward (the query heads of a kv head add into one gradient) gives the same
 * bits with 1 and 2 threads and run twice, plain and with segments */
static void test_gqa_determinism(void) {
    const int B = 2, T = 70, NH = 4, KVH = 2, hs = 32, QKV = (NH + 2 * KVH) * hs;
    size_t nq = (size_t)B * T * QKV, no = (size_t)B * T * NH * hs, na = (size_t)B * NH * T * T;
    float *qkv = FALLOC(nq), *out = FALLOC(no), *att = FALLOC(na), *att_s = FALLOC(na);
    float *dout = FALLOC(no), *r[3], *rs[3];
    int32_t *seq = xcalloc((size_t)B * T, sizeof *seq);
    fill(qkv, NULL, nq, -2, 2), fill(dout, NULL, no, -1, 1);
    random_segments(seq, B, T);
    ops->attention_forward(out, att, qkv, NULL, NULL, NULL, B, T, NH, KVH, hs);
    ops->attention_forward(out, att_s, qkv, NULL, seq, NULL, B, T, NH, KVH, hs);
    const int threads[3] = {1, 2, 2};
    for (int k = 0; k < 3; k++) {
        cpu_ops_set_threads(threads[k]);
        r[k] = FALLOC(nq), rs[k] = FALLOC(nq);
        ops->attention_backward(r[k], dout, qkv, att, NULL, NULL, B, T, NH, KVH, hs);
        ops->attention_backward(rs[k], dout, qkv, att_s, seq, NULL, B, T, NH, KVH, hs);
    }
    cpu_ops_set_threads(2);
    const size_t nb = nq * sizeof(float);
    tap_ok(!memcmp(r[0], r[1], nb) && !memcmp(r[1], r[2], nb) && !memcmp(rs[0], rs[1], nb) &&
               !memcmp(rs[1], rs[2], nb),
           "gqa attention_backward (NH=4 KVH=2), plain and with segments: same bits with 1 and 2 "
           "threads, and run twice");
    for (int k = 0; k < 3; k++) free(r[k]), free(rs[k]);
    free(qkv), free(out), free(att), free(att_s), free(dout), free(seq);
}

/* ---- backend wiring and determinism ------------------------------------------------------- */

/* 2 checks: the fp32 backend's entries give the op table's bits; residual_rmsnorm_forward is
 * residual_forward then rmsnorm_forward */
static void test_backend(void) {
    const int N = 7, NH = 4, KVH = 2, hs = 8, C = 24, F = 10, QKV = (NH + 2 * KVH) * hs;
    const float eps = 1e-5f;
    const tsr_backend be = tsr_fp32_backend(ops);
    float *a = FALLOC((size_t)N * C), *b = FALLOC((size_t)N * C), *w = FALLOC(C);
    float *r1 = FALLOC((size_t)N * C), *r2 = FALLOC((size_t)N * C), *o1 = FALLOC((size_t)N * C);
    float *o2 = FALLOC((size_t)N * C), *s1 = FALLOC(N * (NH + KVH)), *s2 = FALLOC(N * (NH + KVH));
    fill(a, NULL, (size_t)N * C, -1, 1), fill(b, NULL, (size_t)N * C, -1, 1);
    fill(w, NULL, C, 0.5, 1.5);
    be.residual_rmsnorm_forward(&be, r1, o1, s1, a, b, w, N, C, eps);
    ops->residual_forward(r2, a, b, (size_t)N * C);
    ops->rmsnorm_forward(o2, s2, r2, w, N, C, eps);
    tap_ok(!memcmp(r1, r2, (size_t)N * C * 4) && !memcmp(o1, o2, (size_t)N * C * 4) &&
               !memcmp(s1, s2, (size_t)N * 4),
           "fp32 backend: residual_rmsnorm_forward = residual_forward, rmsnorm_forward");

    /* every other new entry against its op, on the same inputs (accumulating into equal
     * buffers) */
    size_t nq = (size_t)N * QKV, big = nq > (size_t)N * 2 * F ? nq : (size_t)N * 2 * F;
    float *x = FALLOC(big), *d = FALLOC(big), *y1 = FALLOC(big), *y2 = FALLOC(big);
    float *inv = FALLOC(hs / 2), *gw1 = FALLOC(2 * C), *gw2 = FALLOC(2 * C);
    int ok = 1;
    fill(x, NULL, big, -2, 2), fill(d, NULL, big, -1, 1);
    rope_freqs(inv, hs, 500000.0);
    be.rmsnorm_backward(&be, y1, gw1, d, x, w, s1, N, C);
    ops->rmsnorm_backward(y2, gw2, d, x, w, s2, N, C);
    ok &= !memcmp(y1, y2, big * 4) && !memcmp(gw1, gw2, 2 * C * 4);
    be.qknorm_forward(&be, y1, s1, x, w, w + hs, N, NH, KVH, hs, eps);
    ops->qknorm_forward(y2, s2, x, w, w + hs, N, NH, KVH, hs, eps);
    ok &= !memcmp(y1, y2, big * 4) && !memcmp(s1, s2, (size_t)N * (NH + KVH) * 4);
    be.qknorm_backward(&be, y1, gw1, gw1 + hs, d, x, w, w + hs, s1, N, NH, KVH, hs);
    ops->qknorm_backward(y2, gw2, gw2 + hs, d, x, w, w + hs, s2, N, NH, KVH, hs);
    ok &= !memcmp(y1, y2, big * 4) && !memcmp(gw1, gw2, 2 * C * 4);
    be.rope_forward(&be, y1, NULL, 3, inv, 1, N, NH, KVH, hs);
    ops->rope_forward(y2, NULL, 3, inv, 1, N, NH, KVH, hs);
    ok &= !memcmp(y1, y2, big * 4);
    be.rope_backward(&be, y1, NULL, 3, inv, 1, N, NH, KVH, hs);
    ops->rope_backward(y2, NULL, 3, inv, 1, N, NH, KVH, hs);
    ok &= !memcmp(y1, y2, big * 4);
    be.swiglu_forward(&be, y1, x, N, F);
    ops->swiglu_forward(y2, x, N, F);
    ok &= !memcmp(y1, y2, big * 4);
    be.swiglu_backward(&be, y1, x, d, N, F, TSR_GRAD_ADD);
    ops->swiglu_backward(y2, x, d, N, F);
    ok &= !memcmp(y1, y2, big * 4);
    for (size_t i = 0; i < (size_t)N * 2 * F; i++) y1[i] = NAN, y2[i] = 0.0f;
    be.swiglu_backward(&be, y1, x, d, N, F, TSR_GRAD_SET); /* over NaNs: not read */
    ops->swiglu_backward(y2, x, d, N, F);
    ok &= !memcmp(y1, y2, big * 4);
    tap_ok(ok, "fp32 backend: rmsnorm_backward, qknorm_*, rope_*, swiglu_* (+= and, over NaNs, "
           "TSR_GRAD_SET) = the op table's bits");
    free(a), free(b), free(w), free(r1), free(r2), free(o1), free(o2), free(s1), free(s2);
    free(x), free(d), free(y1), free(y2), free(inv), free(gw1), free(gw2);
}

/* 3 checks: the reductions over rows (rmsnorm_backward's dw, qknorm_backward's dqw/dkw) and the
 * row-parallel ops give the same bits with 1 and 2 threads, sizes past the one-thread cut-off
 * and over several row chunks */
static void test_determinism(void) {
    const int N = 300, C = 96, NH = 4, KVH = 2, hs = 16, QKV = (NH + 2 * KVH) * hs;
    const size_t nx = (size_t)N * C, nq = (size_t)N * QKV;
    float *x = FALLOC(nq), *d = FALLOC(nq), *w = FALLOC(C), *rs = FALLOC(N * (NH + KVH));
    float *inv = FALLOC(hs / 2), *r[2], *q[2], *p[2];
    fill(x, NULL, nq, -2, 2), fill(d, NULL, nq, -1, 1), fill(w, NULL, C, 0.5, 1.5);
    rope_freqs(inv, hs, 10000.0);
    for (int k = 0; k < 2; k++) {
        cpu_ops_set_threads(k + 1);
        r[k] = FALLOC(nx + C + N); /* dinp | dw | out (of the forward) ... rstd reused */
        ops->rmsnorm_forward(r[k], rs, x, w, N, C, 1e-5f);
        ops->rmsnorm_backward(r[k], r[k] + nx, d, x, w, rs, N, C);
        q[k] = FALLOC(nq + 2 * hs);
        ops->qknorm_forward(q[k], rs, x, w, w + hs, N, NH, KVH, hs, 1e-6f);
        ops->qknorm_backward(q[k], q[k] + nq, q[k] + nq + hs, d, x, w, w + hs, rs, N, NH, KVH, hs);
        p[k] = copy_f(x, nq);
        ops->rope_forward(p[k], NULL, 0, inv, 3, N / 3, NH, KVH, hs);
        ops->swiglu_backward(p[k], x, d, N, QKV / 2);
    }
    cpu_ops_set_threads(2);
    tap_ok(!memcmp(r[0], r[1], (nx + C) * 4),
           "rmsnorm forward+backward: same bits, 1 and 2 threads");
    tap_ok(!memcmp(q[0], q[1], (nq + 2 * hs) * 4),
           "qknorm forward+backward: same bits, 1 and 2 threads");
    tap_ok(!memcmp(p[0], p[1], nq * 4), "rope, swiglu_backward: same bits, 1 and 2 threads");
    for (int k = 0; k < 2; k++) free(r[k]), free(q[k]), free(p[k]);
    free(x), free(d), free(w), free(rs), free(inv);
}

/* ---- frozen parameters: NULL weight gradients -------------------------------------------- */

/* 1 check: rmsnorm_backward with dw NULL (frozen) gives dinp the bits it gets beside dw */
static void test_rmsnorm_frozen(int N, int C) {
    const size_t nx = (size_t)N * C;
    float *x = FALLOC(nx), *w = FALLOC(C), *d = FALLOC(nx), *o = FALLOC(nx), *rs = FALLOC(N);
    float *g0 = FALLOC(nx), *gw = FALLOC(C);
    fill(x, NULL, nx, -2, 2), fill(w, NULL, C, 0.5, 1.5), fill(d, NULL, nx, -1, 1);
    fill(g0, NULL, nx, -1, 1), fill(gw, NULL, C, -1, 1);
    ops->rmsnorm_forward(o, rs, x, w, N, C, 1e-5f);
    float *fi = copy_f(g0, nx), *zi = copy_f(g0, nx);
    ops->rmsnorm_backward(fi, gw, d, x, w, rs, N, C);
    ops->rmsnorm_backward(zi, NULL, d, x, w, rs, N, C);
    tap_ok(!memcmp(zi, fi, nx * 4) && memcmp(zi, g0, nx * 4),
           "rmsnorm_backward (N=%d C=%d) dw NULL (frozen): dinp the same bits as with dw", N, C);
    free(x), free(w), free(d), free(o), free(rs), free(g0), free(gw), free(fi), free(zi);
}

/* 3 checks: qknorm_backward with dqw and dkw NULL (frozen): dinp the same bits as with both;
 * dqw NULL alone: dinp and dkw the same bits; dkw NULL alone: dinp and dqw */
static void test_qknorm_frozen(int N, int NH, int KVH, int hs) {
    const size_t nx = (size_t)N * (NH + 2 * KVH) * hs, nr = (size_t)N * (NH + KVH);
    float *x = FALLOC(nx), *qw = FALLOC(hs), *kw = FALLOC(hs), *d = FALLOC(nx), *o = FALLOC(nx);
    float *rs = FALLOC(nr), *g0 = FALLOC(nx), *g0q = FALLOC(hs), *g0k = FALLOC(hs);
    fill(x, NULL, nx, -2, 2), fill(qw, NULL, hs, 0.5, 1.5), fill(kw, NULL, hs, 0.5, 1.5);
    fill(d, NULL, nx, -1, 1), fill(g0, NULL, nx, -1, 1), fill(g0q, NULL, hs, -1, 1);
    fill(g0k, NULL, hs, -1, 1);
    ops->qknorm_forward(o, rs, x, qw, kw, N, NH, KVH, hs, 1e-6f);
    float *fi = copy_f(g0, nx), *fq = copy_f(g0q, hs), *fk = copy_f(g0k, hs);
    ops->qknorm_backward(fi, fq, fk, d, x, qw, kw, rs, N, NH, KVH, hs);
    float *zi = copy_f(g0, nx), *zq = copy_f(g0q, hs), *zk = copy_f(g0k, hs);
    const size_t bi = nx * 4, bw = (size_t)hs * 4;
    char tag[64];
    snprintf(tag, sizeof tag, "N=%d NH=%d KVH=%d hs=%d", N, NH, KVH, hs);
    ops->qknorm_backward(zi, NULL, NULL, d, x, qw, kw, rs, N, NH, KVH, hs);
    tap_ok(!memcmp(zi, fi, bi), "qknorm_backward (%s) dqw, dkw NULL (frozen): dinp the same bits "
           "as with them", tag);
    memcpy(zi, g0, bi);
    ops->qknorm_backward(zi, NULL, zk, d, x, qw, kw, rs, N, NH, KVH, hs);
    tap_ok(!memcmp(zi, fi, bi) && !memcmp(zk, fk, bw),
           "qknorm_backward (%s) dqw NULL: dinp and dkw the same bits", tag);
    memcpy(zi, g0, bi);
    ops->qknorm_backward(zi, zq, NULL, d, x, qw, kw, rs, N, NH, KVH, hs);
    tap_ok(!memcmp(zi, fi, bi) && !memcmp(zq, fq, bw),
           "qknorm_backward (%s) dkw NULL: dinp and dqw the same bits", tag);
    free(x), free(qw), free(kw), free(d), free(o), free(rs), free(g0), free(g0q), free(g0k);
    free(fi), free(fq), free(fk), free(zi), free(zq), free(zk);
}

/* 1 check: the fp32 backend passes NULL weight gradients through (rmsnorm, qknorm backward) */
static void test_backend_frozen(void) {
    const int N = 7, NH = 4, KVH = 2, hs = 8, QKV = (NH + 2 * KVH) * hs;
    const size_t nq = (size_t)N * QKV;
    const tsr_backend be = tsr_fp32_backend(ops);
    float *x = FALLOC(nq), *d = FALLOC(nq), *w = FALLOC(QKV), *rs = FALLOC(N * (NH + KVH));
    float *o = FALLOC(nq), *y[2];
    fill(x, NULL, nq, -2, 2), fill(d, NULL, nq, -1, 1), fill(w, NULL, QKV, 0.5, 1.5);
    ops->rmsnorm_forward(o, rs, x, w, N, QKV, 1e-5f);
    for (int k = 0; k < 2; k++) {
        y[k] = FALLOC(nq);
        if (k == 0) be.rmsnorm_backward(&be, y[k], NULL, d, x, w, rs, N, QKV);
        else ops->rmsnorm_backward(y[k], NULL, d, x, w, rs, N, QKV);
    }
    ops->qknorm_forward(o, rs, x, w, w + hs, N, NH, KVH, hs, 1e-6f);
    be.qknorm_backward(&be, y[0], NULL, NULL, d, x, w, w + hs, rs, N, NH, KVH, hs);
    ops->qknorm_backward(y[1], NULL, NULL, d, x, w, w + hs, rs, N, NH, KVH, hs);
    tap_ok(!memcmp(y[0], y[1], nq * 4), "fp32 backend: rmsnorm, qknorm backward with NULL weight "
           "gradients = the op table's bits");
    free(x), free(d), free(w), free(rs), free(o), free(y[0]), free(y[1]);
}

int main(void) {
    tap_plan(NCHECKS);
    cpu_ops_set_threads(2);
    test_rmsnorm(10, 8, 0.0, 1e-5f);
    test_rmsnorm(7, 37, 5.0, 1e-6f);  /* odd sizes, inputs off centre */
    test_rmsnorm(130, 16, 0.0, 1e-5f); /* three row chunks for dw */
    test_qknorm(5, 4, 2, 8, 0);        /* GQA 2:1 */
    test_qknorm(3, 3, 1, 2, 0);        /* MQA, hs 2 */
    test_qknorm(7, 2, 2, 64, 0);       /* MHA, hs 64 */
    test_qknorm(70, 2, 1, 4, 0);       /* two row chunks for dqw, dkw */
    test_qknorm(5, 4, 2, 8, 1);        /* over the projections (OLMo 2): 32 and 16 wide */
    test_qknorm(70, 2, 1, 4, 1);       /* two row chunks for dqw (8), dkw (4) */
    test_rope(2, 5, 4, 2, 8, 0, 0);
    test_rope(2, 5, 4, 2, 8, 0, 7);    /* offset p0 (a KV-cache chunk) */
    test_rope(2, 9, 4, 1, 8, 1, 0);    /* positions given, MQA */
    test_rope(1, 3, 2, 2, 2, 0, 1);    /* hs 2 */
    test_rope(1, 7, 2, 1, 64, 0, 3000); /* hs 64, large angles (cos/sin in double) */
    test_rope_part(2, 5, 4, 2, 16, 4, 1.3465736f, 3); /* Qwen3-Next's 0.25, YaRN's factor */
    test_swiglu(5, 7, 4.0, 0);
    test_swiglu(1, 1, 2.0, 0);
    test_swiglu(33, 600, 8.0, 0); /* past the one-thread cut-off */
    test_swiglu(5, 7, 4.0, 1);    /* GeGLU (Gemma) */
    test_swiglu(33, 600, 8.0, 1);
    test_gqa(2, 5, 4, 2, 8, 0, 0, 0);
    test_gqa(2, 7, 4, 1, 2, 1, 1, 0);     /* MQA, hs 2, ALiBi, segments */
    test_gqa(1, 9, 3, 3, 6, 0, 1, 0);     /* KVH = NH through the same reference */
    test_gqa(1, 70, 4, 2, 64, 1, 0, 300); /* full tiles, two backward row blocks */
    test_gqa(2, 150, 4, 1, 16, 0, 1, 300); /* three row blocks, segments across them */
    test_gqa(1, 33, 8, 2, 32, 0, 1, 300);  /* odd T, 4 query heads per kv head */
    test_gqa(2, 70, 8, 2, 24, 1, 1, 300);  /* head size 24 (16 + 8 column tiles), segments */
    test_gqa_determinism();
    test_backend();
    test_determinism();
    test_rmsnorm_frozen(10, 8);        /* frozen parameters: 1 each */
    test_rmsnorm_frozen(7, 37);
    test_rmsnorm_frozen(300, 64);      /* parallel rows, five row chunks */
    test_qknorm_frozen(5, 4, 2, 8);    /* 3 each: GQA */
    test_qknorm_frozen(3, 3, 1, 2);    /* MQA, hs 2 */
    test_qknorm_frozen(70, 2, 1, 4);   /* two row chunks */
    test_qknorm_frozen(40, 4, 2, 64);  /* parallel rows */
    test_backend_frozen();             /* 1 */
    return tap_done();
}
