/* test_ops_moe.c — the fp32 CPU ops of mixture of experts (kernels/cpu/cpu_moe.c; ops.h's moe_*,
 * docs/moe.md) against hand-made cases and float64 references written here as plain loops.
 *
 * Method (that of test_ops.c and test_ops_llama.c, whose helpers ops_check.h holds): inputs are
 * drawn as floats and copied to float64; forwards are compared with float64 references, the
 * integer outputs of routing (top-k, grouping) exactly; each backward with central finite
 * differences of the float64 reference of a scalar objective J = sum(out * wts). Accumulating
 * gradients start at random G0 and are compared with G0 + dJ/dx (the +=); the gradients the ops
 * WRITE (combine_backward's dy, dwts, router_backward's dlogits) start at garbage and are compared
 * with 0 + dJ/dx. Tolerances are abs + rel * |ref| (tap_max_err <= 1 passes), stated beside each
 * check: about 10-100x the fp32 rounding of the op, so a wrong term (1e-2 and up) fails loudly.
 * The router's gradient is checked against finite differences of the function of the logits
 * L = sum(dwts * wts) + aux_w * aux + z_w * z with the counts held fixed (the op's contract); its
 * logits have gaps of >= 0.5 between a row's values, so the top-k set does not move under h.
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

#define NCHECKS 75

static const tsr_ops *ops = &tsr_cpu_ops;

#define IALLOC(n) ((int32_t *)xcalloc((n), sizeof(int32_t)))

/* ---- float64 references ------------------------------------------------------------------- */

/* p (E) = softmax(x), returns logsumexp(x) */
static double ref_softmax(double *p, const double *x, int E) {
    double mx = -INFINITY, s = 0.0;
    for (int e = 0; e < E; e++) mx = x[e] > mx ? x[e] : mx;
    for (int e = 0; e < E; e++) s += (p[e] = exp(x[e] - mx));
    for (int e = 0; e < E; e++) p[e] /= s;
    return mx + log(s);
}

/* idx (K): the K largest of p in descending order, ties to the lower index, by repeated
 * selection of "greater, or equal with a lower index" among the experts not chosen yet */
static void ref_topk(int32_t *idx, const double *p, int E, int K) {
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= idx[i] == e;
            if (taken) continue;
            if (best < 0 || p[e] > p[best] || (p[e] == p[best] && e < best)) best = e;
        }
        idx[j] = best;
    }
}

/* The grouping by definition: expert by expert, the assignments a of that expert in ascending
 * order (a filter per expert, not a counting sort). offs (E+1), rows, slot (NK) */
static void ref_group(int32_t *offs, int32_t *rows, int32_t *slot, const int32_t *idx, int NK,
                      int E) {
    int r = 0;
    for (int e = 0; e < E; e++) {
        offs[e] = r;
        for (int a = 0; a < NK; a++)
            if (idx[a] == e) rows[r] = a, slot[a] = r++;
    }
    offs[E] = r;
}

/* aux and z of docs/moe.md from probs (N,E), lse (N) and the counts of offs */
static void ref_stats(double *aux, double *z, const double *probs, const double *lse,
                      const int32_t *offs, int N, int E, int K) {
    *aux = 0.0, *z = 0.0;
    for (int e = 0; e < E; e++) {
        double P = 0.0;
        for (int n = 0; n < N; n++) P += probs[(size_t)n * E + e];
        *aux += (double)(offs[e + 1] - offs[e]) / ((double)N * K) * (P / N);
    }
    *aux *= E;
    for (int n = 0; n < N; n++) *z += lse[n] * lse[n] / N;
}

/* ---- routing outputs, the op's --------------------------------------------------------------- */

typedef struct {
    float *probs, *lse, *wts, stats[2];
    int32_t *idx, *offs, *rows, *slot;
} route_out;

static route_out route_run(const float *logits, int N, int E, int K, int norm) {
    route_out r = {FALLOC((size_t)N * E), FALLOC(N), FALLOC((size_t)N * K), {0, 0},
                   IALLOC((size_t)N * K), IALLOC(E + 1), IALLOC((size_t)N * K),
                   IALLOC((size_t)N * K)};
    ops->moe_route(r.probs, r.lse, r.idx, r.wts, r.offs, r.rows, r.slot, r.stats, logits, N, E,
                   K, norm);
    return r;
}

static void route_free(route_out *r) {
    free(r->probs), free(r->lse), free(r->wts), free(r->idx), free(r->offs), free(r->rows);
    free(r->slot);
}

/* 1 check: rows and slot inverse permutations, counts summing to NK (no token dropped), offs
 * ascending from 0 and every grouped row of expert e holding an assignment to e */
static void check_grouping(const char *what, const route_out *r, int N, int E, int K) {
    const int NK = N * K;
    int ok = r->offs[0] == 0 && r->offs[E] == NK;
    for (int e = 0; e < E; e++) {
        ok &= r->offs[e + 1] >= r->offs[e];
        for (int g = r->offs[e]; g < r->offs[e + 1]; g++) ok &= r->idx[r->rows[g]] == e;
    }
    for (int a = 0; a < NK; a++)
        ok &= r->slot[a] >= 0 && r->slot[a] < NK && r->rows[r->slot[a]] == a;
    tap_ok(ok, "%s: rows = slot^-1, offs from 0 to N*K=%d (no token dropped), each expert's rows "
               "its own", what, NK);
}

/* ---- routing: hand-made cases -------------------------------------------------------------- */

/* 7 checks: N=4 rows, E=4, K=2 with known answers: distinct values, a tie between experts 1 and
 * 2, a row of four equal logits, and the grouping written out by hand */
static void test_route_hand(void) {
    const int N = 4, E = 4, K = 2;
    const float logits[16] = {0, 1, 2, 3, /* -> 3, 2 */
                              1, 3, 3, 0, /* tie: 1 before 2 */
                              2, 2, 2, 2, /* all equal: 0, 1 */
                              5, -1, 4, 0 /* -> 0, 2 */};
    const int32_t want_idx[8] = {3, 2, 1, 2, 0, 1, 0, 2};
    /* experts: 0 <- a 4, 6; 1 <- a 2, 5; 2 <- a 1, 3, 7; 3 <- a 0 */
    const int32_t want_offs[5] = {0, 2, 4, 7, 8}, want_rows[8] = {4, 6, 2, 5, 1, 3, 7, 0};
    const int32_t want_slot[8] = {7, 4, 2, 5, 0, 3, 1, 6};
    route_out r0 = route_run(logits, N, E, K, 0), r1 = route_run(logits, N, E, K, 1);
    tap_ok(!memcmp(r0.idx, want_idx, sizeof want_idx) && !memcmp(r1.idx, want_idx, sizeof want_idx),
           "route (hand): top-2 in descending order, ties to the lower index");
    tap_ok(!memcmp(r0.offs, want_offs, sizeof want_offs) &&
               !memcmp(r0.rows, want_rows, sizeof want_rows) &&
               !memcmp(r0.slot, want_slot, sizeof want_slot),
           "route (hand): offs, rows, slot those of the stable sort by expert");
    check_grouping("route (hand)", &r0, N, E, K);
    double p[16], lse[4], pd[4], x[4];
    for (int n = 0; n < N; n++) {
        for (int e = 0; e < E; e++) x[e] = logits[n * E + e];
        lse[n] = ref_softmax(pd, x, E);
        memcpy(p + n * E, pd, sizeof pd);
    }
    /* softmax of 4 terms, sum in double: a few ulp */
    check("route (hand): probs", r0.probs, p, 16, 1e-7, 1e-6);
    check("route (hand): lse", r0.lse, lse, 4, 1e-7, 1e-6);
    int ok = 1;
    for (int a = 0; a < N * K; a++) ok &= r0.wts[a] == r0.probs[(a / K) * E + r0.idx[a]];
    tap_ok(ok, "route (hand), norm off: wts = probs[idx] exactly");
    double wn[8];
    for (int n = 0; n < N; n++) {
        double s = p[n * E + want_idx[n * K]] + p[n * E + want_idx[n * K + 1]];
        for (int j = 0; j < K; j++) wn[n * K + j] = p[n * E + want_idx[n * K + j]] / s;
    }
    check("route (hand), norm on: wts = probs[idx] / their sum", r1.wts, wn, 8, 1e-7, 1e-6);
    route_free(&r0), route_free(&r1);
}

/* 4 checks: the statistics by hand. Row n of the balanced cases is a cyclic shift by n of the
 * same logits, so every expert gets N*K/E assignments and P_e = 1/E: aux = 1 exactly in exact
 * arithmetic, z = lse^2 with lse = log(sum_e exp(x_e)) the same on every row. */
static void test_route_stats_hand(void) {
    const int N = 4, E = 4;
    float lg[16];
    for (int K = 1; K <= 2; K++) {
        for (int n = 0; n < N; n++)
            for (int e = 0; e < E; e++) {
                const int d = (e - n + E) % E; /* n's own expert first, then n+1 */
                lg[n * E + e] = d == 0 ? 3.0f : d == 1 ? 1.0f : 0.0f;
            }
        route_out r = route_run(lg, N, E, K, 1);
        const double lse = log(exp(3.0) + exp(1.0) + 2.0);
        double got[2] = {r.stats[0], r.stats[1]}, want[2] = {1.0, lse * lse};
        double err = tap_max_err(got, want, 2, 1e-6, 1e-6);
        tap_ok(err <= 1.0, "route stats (hand), perfect balance K=%d: aux = 1, z = %.6f (max err "
               "%.3g of tolerance)", K, want[1], err);
        route_free(&r);
    }
    /* every row picks expert 0 (K=1): f_0 = 1, so aux = E * P_0 = E e^5 / (e^5 + 3) */
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++) lg[n * E + e] = e == 0 ? 5.0f : 0.0f;
    route_out r = route_run(lg, N, E, 1, 0);
    const double e5 = exp(5.0), lse = log(e5 + 3.0);
    double got[2] = {r.stats[0], r.stats[1]}, want[2] = {E * e5 / (e5 + 3.0), lse * lse};
    double err = tap_max_err(got, want, 2, 1e-6, 1e-6);
    tap_ok(err <= 1.0, "route stats (hand), all rows on expert 0: aux = %.6f, z = %.6f (max err "
           "%.3g of tolerance)", want[0], want[1], err);
    tap_ok(r.offs[1] == N && r.offs[E] == N, "route (hand), all rows on expert 0: count_0 = N");
    route_free(&r);
}

/* 6 checks: random logits against the references (top-k of the op's own probabilities, the
 * grouping by definition, the statistics in double) */
static void test_route_random(int N, int E, int K, int norm, double scale) {
    const size_t ne = (size_t)N * E, nk = (size_t)N * K;
    float *lg = FALLOC(ne);
    double *x = DALLOC(ne), *p = DALLOC(ne), *lse = DALLOC(N), *pf, *w = DALLOC(nk);
    int32_t *idx = IALLOC(nk), *offs = IALLOC(E + 1), *rows = IALLOC(nk), *slot = IALLOC(nk);
    fill(lg, x, ne, -scale, scale);
    route_out r = route_run(lg, N, E, K, norm);
    for (int n = 0; n < N; n++) lse[n] = ref_softmax(p + (size_t)n * E, x + (size_t)n * E, E);
    char what[96];
    snprintf(what, sizeof what, "route (N=%d E=%d K=%d norm %d)", N, E, K, norm);
    /* softmax with a double sum and cpu_expf (a few ulp): 1e-6 relative */
    pf = to_double(r.probs, ne);
    double *lf = to_double(r.lse, N);
    tap_ok(tap_max_err(pf, p, ne, 1e-8, 2e-6) <= 1.0 && tap_max_err(lf, lse, N, 1e-6, 1e-6) <= 1.0,
           "%s: probs, lse", what);
    free(lf);
    for (int n = 0; n < N; n++) ref_topk(idx + (size_t)n * K, pf + (size_t)n * E, E, K);
    tap_ok(!memcmp(idx, r.idx, nk * sizeof *idx), "%s: idx = top-k of the probs", what);
    for (int n = 0; n < N; n++) {
        double s = 0.0;
        for (int j = 0; j < K; j++) s += pf[(size_t)n * E + idx[(size_t)n * K + j]];
        for (int j = 0; j < K; j++)
            w[(size_t)n * K + j] = pf[(size_t)n * E + idx[(size_t)n * K + j]] / (norm ? s : 1.0);
    }
    check("route: wts", r.wts, w, nk, 1e-8, 1e-6);
    ref_group(offs, rows, slot, r.idx, N * K, E);
    tap_ok(!memcmp(offs, r.offs, (size_t)(E + 1) * 4) && !memcmp(rows, r.rows, nk * 4) &&
               !memcmp(slot, r.slot, nk * 4),
           "%s: offs, rows, slot = the stable grouping by expert", what);
    check_grouping(what, &r, N, E, K);
    double st[2], got[2] = {r.stats[0], r.stats[1]};
    ref_stats(&st[0], &st[1], p, lse, offs, N, E, K);
    /* sums of N*E terms of fp32 probabilities: 1e-6 relative */
    tap_ok(tap_max_err(got, st, 2, 1e-7, 2e-6) <= 1.0, "%s: stats aux %.6f, z %.6f", what, st[0],
           st[1]);
    route_free(&r);
    free(lg), free(x), free(p), free(lse), free(pf), free(w), free(idx), free(offs), free(rows);
    free(slot);
}

/* ---- gather ---------------------------------------------------------------------------------- */

typedef struct {
    const double *x;
    const int32_t *rows;
    int N, K, C;
} gather_ctx;

static void gather_obj(const void *c, double *out) {
    const gather_ctx *g = c;
    for (int r = 0; r < g->N * g->K; r++)
        memcpy(out + (size_t)r * g->C, g->x + (size_t)(g->rows[r] / g->K) * g->C,
               (size_t)g->C * sizeof *out);
}

/* 2 checks: xg rows are x's rows bit for bit; dx += the gathered gradient by finite differences */
static void test_gather(int N, int E, int K, int C) {
    const size_t nx = (size_t)N * C, ng = (size_t)N * K * C;
    float *lg = FALLOC((size_t)N * E), *x = FALLOC(nx), *xg = FALLOC(ng), *dxg = FALLOC(ng);
    float *dx = FALLOC(nx);
    double *x_ = DALLOC(nx), *wts = DALLOC(ng);
    fill(lg, NULL, (size_t)N * E, -2, 2);
    route_out r = route_run(lg, N, E, K, 1);
    fill(x, x_, nx, -1, 1), fill(dxg, wts, ng, -1, 1), fill(dx, NULL, nx, -1, 1);
    float *g0 = copy_f(dx, nx);
    ops->moe_gather(xg, x, r.rows, N, K, C);
    int ok = 1;
    for (int g = 0; g < N * K; g++)
        ok &= !memcmp(xg + (size_t)g * C, x + (size_t)(r.rows[g] / K) * C, (size_t)C * 4);
    tap_ok(ok, "moe_gather (N=%d E=%d K=%d C=%d): xg[r] = x[rows[r] / K] bit for bit", N, E, K, C);
    ops->moe_gather_backward(dx, dxg, r.slot, N, K, C);
    gather_ctx ctx = {x_, r.rows, N, K, C};
    objective o = {gather_obj, &ctx, ng, wts, DALLOC(ng)};
    /* K fp32 additions of order-1 terms */
    check_grad("moe_gather_backward: dx", dx, g0, x_, nx, &o, 1e-6, 1e-5);
    route_free(&r);
    free(o.out), free(lg), free(x), free(xg), free(dxg), free(dx), free(x_), free(wts), free(g0);
}

/* ---- the grouped matmuls --------------------------------------------------------------------- */

typedef struct {
    const double *inp, *w;
    const int32_t *offs;
    int E, IC, OC;
} gmm_ctx;

static void gmm_obj(const void *c, double *out) {
    const gmm_ctx *g = c;
    for (int e = 0; e < g->E; e++)
        for (int r = g->offs[e]; r < g->offs[e + 1]; r++)
            for (int o = 0; o < g->OC; o++) {
                double s = 0.0;
                for (int i = 0; i < g->IC; i++)
                    s += g->inp[(size_t)r * g->IC + i] * g->w[((size_t)e * g->OC + o) * g->IC + i];
                out[(size_t)r * g->OC + o] = s;
            }
}

/* 5 checks: E=5 experts with 3, 0, 1, 4, 2 rows (one without any, one with a single row):
 * forward and backward the bits of matmul_forward/matmul_backward of each expert's rows alone,
 * forward against float64, dinp and dw by finite differences (the empty expert's dw stays G0) */
static void test_moe_matmul(int IC, int OC) {
    enum { E = 5, NK = 10 };
    const int32_t offs[E + 1] = {0, 3, 3, 4, 8, 10};
    const size_t ni = (size_t)NK * IC, no = (size_t)NK * OC, nw = (size_t)E * OC * IC;
    float *inp = FALLOC(ni), *w = FALLOC(nw), *out = FALLOC(no), *out2 = FALLOC(no);
    float *dout = FALLOC(no), *dinp = FALLOC(ni), *dw = FALLOC(nw);
    double *inp_ = DALLOC(ni), *w_ = DALLOC(nw), *wts = DALLOC(no), *want = DALLOC(no);
    fill(inp, inp_, ni, -1, 1), fill(w, w_, nw, -1, 1), fill(dout, wts, no, -1, 1);
    fill(dinp, NULL, ni, -1, 1), fill(dw, NULL, nw, -1, 1);
    float *g0i = copy_f(dinp, ni), *g0w = copy_f(dw, nw), *dinp2 = copy_f(dinp, ni);
    float *dw2 = copy_f(dw, nw);
    ops->moe_matmul_forward(out, inp, w, offs, E, NK, IC, OC);
    ops->moe_matmul_backward(dinp, dw, dout, inp, w, offs, E, NK, IC, OC);
    for (int e = 0; e < E; e++) {
        const int r0 = offs[e], cnt = offs[e + 1] - r0;
        if (!cnt) continue;
        const size_t we = (size_t)e * OC * IC;
        ops->matmul_forward(out2 + (size_t)r0 * OC, inp + (size_t)r0 * IC, w + we, NULL, cnt, IC,
                            OC);
        ops->matmul_backward(dinp2 + (size_t)r0 * IC, dw2 + we, NULL, dout + (size_t)r0 * OC,
                             inp + (size_t)r0 * IC, w + we, cnt, IC, OC);
    }
    tap_ok(!memcmp(out, out2, no * 4), "moe_matmul_forward (IC=%d OC=%d, an expert without rows) "
           "= matmul_forward of each expert's rows, bit for bit", IC, OC);
    tap_ok(!memcmp(dinp, dinp2, ni * 4) && !memcmp(dw, dw2, nw * 4),
           "moe_matmul_backward = matmul_backward of each expert's rows, bit for bit");
    gmm_ctx ctx = {inp_, w_, offs, E, IC, OC};
    gmm_obj(&ctx, want);
    /* IC-term fp32 dot products of order-1 terms (sgemm) */
    check("moe_matmul_forward: out", out, want, no, 1e-5, 1e-5);
    objective o = {gmm_obj, &ctx, no, wts, DALLOC(no)};
    check_grad("moe_matmul_backward: dinp", dinp, g0i, inp_, ni, &o, 2e-5, 1e-4);
    check_grad("moe_matmul_backward: dw (the empty expert's untouched)", dw, g0w, w_, nw, &o,
               2e-5, 1e-4);
    free(o.out), free(inp), free(w), free(out), free(out2), free(dout), free(dinp), free(dw);
    free(inp_), free(w_), free(wts), free(want), free(g0i), free(g0w), free(dinp2), free(dw2);
}

/* ---- combine --------------------------------------------------------------------------------- */

typedef struct {
    const double *base, *y, *w;
    const int32_t *slot;
    int N, K, C;
} comb_ctx;

static void comb_obj(const void *c, double *out) {
    const comb_ctx *g = c;
    for (int n = 0; n < g->N; n++)
        for (int ch = 0; ch < g->C; ch++) {
            double s = g->base ? g->base[(size_t)n * g->C + ch] : 0.0;
            for (int j = 0; j < g->K; j++) {
                const size_t a = (size_t)n * g->K + j;
                s += g->w[a] * g->y[(size_t)g->slot[a] * g->C + ch];
            }
            out[(size_t)n * g->C + ch] = s;
        }
}

/* 4 checks (with base or without): forward against float64; in place (out = base) the same
 * bits; dy and dwts (written: they start at garbage) by finite differences */
static void test_combine(int N, int E, int K, int C, int with_base) {
    const size_t nx = (size_t)N * C, ny = (size_t)N * K * C, nk = (size_t)N * K;
    float *lg = FALLOC((size_t)N * E), *base = FALLOC(nx), *y = FALLOC(ny), *out = FALLOC(nx);
    float *dout = FALLOC(nx), *dy = FALLOC(ny), *dwts = FALLOC(nk), *g0y = FALLOC(ny);
    float *g0w = FALLOC(nk);
    double *base_ = DALLOC(nx), *y_ = DALLOC(ny), *w_ = DALLOC(nk), *wts = DALLOC(nx);
    double *want = DALLOC(nx);
    fill(lg, NULL, (size_t)N * E, -2, 2);
    route_out r = route_run(lg, N, E, K, 1);
    for (size_t a = 0; a < nk; a++) w_[a] = r.wts[a];
    fill(base, base_, nx, -1, 1), fill(y, y_, ny, -1, 1), fill(dout, wts, nx, -1, 1);
    fill(dy, NULL, ny, 1e3, 2e3), fill(dwts, NULL, nk, 1e3, 2e3); /* garbage: overwritten */
    ops->moe_combine(out, with_base ? base : NULL, y, r.wts, r.slot, N, K, C);
    comb_ctx ctx = {with_base ? base_ : NULL, y_, w_, r.slot, N, K, C};
    comb_obj(&ctx, want);
    char what[96];
    snprintf(what, sizeof what, "moe_combine (N=%d K=%d C=%d, %s)", N, K, C,
             with_base ? "base" : "no base");
    /* K fp32 products and sums of order-1 terms */
    check(what, out, want, nx, 1e-6, 1e-5);
    float *io = copy_f(with_base ? base : out, nx);
    if (!with_base) memset(io, 0x7f, nx * 4); /* no base: out is written whatever it held */
    ops->moe_combine(io, with_base ? io : NULL, y, r.wts, r.slot, N, K, C);
    tap_ok(!memcmp(io, out, nx * 4), "%s: %s the same bits", what,
           with_base ? "in place (out = base)" : "over a dirty out");
    ops->moe_combine_backward(dy, dwts, dout, y, r.wts, r.slot, N, K, C);
    objective o = {comb_obj, &ctx, nx, wts, DALLOC(nx)};
    /* dy: one fp32 product; dwts: a C-term dot product in double */
    check_grad("moe_combine_backward: dy (written)", dy, g0y, y_, ny, &o, 1e-6, 1e-5);
    check_grad("moe_combine_backward: dwts (written)", dwts, g0w, w_, nk, &o, 1e-6, 1e-5);
    route_free(&r);
    free(o.out), free(io), free(lg), free(base), free(y), free(out), free(dout), free(dy);
    free(dwts), free(g0y), free(g0w), free(base_), free(y_), free(w_), free(wts), free(want);
}

/* ---- router backward ------------------------------------------------------------------------- */

typedef struct {
    const double *dwts;
    const int32_t *offs;
    int N, E, K, norm;
    double aux_w, z_w;
    double *p; /* scratch (E) */
} router_ctx;

/* out[0] = L(logits) = sum(dwts * wts) + aux_w * aux + z_w * z, the counts of offs held fixed */
static void router_L(const router_ctx *g, const double *x, double *out) {
    double L = 0.0, z = 0.0, aux = 0.0;
    int32_t idx[64];
    for (int n = 0; n < g->N; n++) {
        const double lse = ref_softmax(g->p, x + (size_t)n * g->E, g->E);
        ref_topk(idx, g->p, g->E, g->K);
        double s = 0.0;
        for (int j = 0; j < g->K; j++) s += g->p[idx[j]];
        for (int j = 0; j < g->K; j++)
            L += g->dwts[(size_t)n * g->K + j] * g->p[idx[j]] / (g->norm ? s : 1.0);
        for (int e = 0; e < g->E; e++)
            aux += (double)(g->offs[e + 1] - g->offs[e]) / ((double)g->N * g->K) * g->p[e] / g->N;
        z += lse * lse / g->N;
    }
    out[0] = L + g->aux_w * g->E * aux + g->z_w * z;
}

typedef struct {
    router_ctx r;
    const double *x;
} router_obj_ctx;

static void router_obj(const void *c, double *out) {
    const router_obj_ctx *g = c;
    router_L(&g->r, g->x, out);
}

/* 1 check: dlogits (written over garbage) = dL/dlogits by finite differences. Each row's logits
 * are a random permutation of 0, 0.5, 1, ..., so probabilities differ by factors >= e^0.5 and the
 * top-k set is the same for logits +- h. */
static void test_router_backward(int N, int E, int K, int norm, float aux_w, float z_w) {
    const size_t ne = (size_t)N * E, nk = (size_t)N * K;
    float *lg = FALLOC(ne), *dwts = FALLOC(nk), *dl = FALLOC(ne), *zero = FALLOC(ne);
    double *x = DALLOC(ne), *dw_ = DALLOC(nk), one = 1.0;
    for (int n = 0; n < N; n++) {
        float *row = lg + (size_t)n * E;
        for (int e = 0; e < E; e++) row[e] = 0.5f * e;
        for (int e = E - 1; e > 0; e--) { /* Fisher-Yates */
            const int k = (int)(urand() * (e + 1));
            const float t = row[e];
            row[e] = row[k], row[k] = t;
        }
    }
    for (size_t i = 0; i < ne; i++) x[i] = lg[i];
    fill(dwts, dw_, nk, -1, 1);
    fill(dl, NULL, ne, 1e3, 2e3); /* garbage: overwritten */
    route_out r = route_run(lg, N, E, K, norm);
    ops->moe_router_backward(dl, dwts, r.probs, r.lse, r.idx, r.wts, r.offs, N, E, K, norm, aux_w,
                             z_w);
    router_obj_ctx ctx = {{dw_, r.offs, N, E, K, norm, aux_w, z_w, DALLOC(E)}, x};
    objective o = {router_obj, &ctx, 1, &one, DALLOC(1)};
    char what[128];
    snprintf(what, sizeof what, "moe_router_backward (N=%d E=%d K=%d norm %d aux_w %g z_w %g): "
             "dlogits", N, E, K, norm, (double)aux_w, (double)z_w);
    /* E-term sums in double of fp32 probabilities times order-1 gradients */
    check_grad(what, dl, zero, x, ne, &o, 2e-6, 1e-4);
    route_free(&r);
    free(ctx.r.p), free(o.out), free(lg), free(dwts), free(dl), free(zero), free(x), free(dw_);
}

/* ---- threads and the fp32 backend ----------------------------------------------------------- */

/* Everything the row-parallel ops write for one routing, in one buffer per thread count: route's
 * outputs, gather, gather_backward, combine, combine_backward and router_backward. */
static float *row_ops_run(const float *lg, const float *x, const float *d, int N, int E, int K,
                          int C, size_t *bytes) {
    const size_t ne = (size_t)N * E, nk = (size_t)N * K, nx = (size_t)N * C, ng = nk * C;
    const size_t nf = 2 * ne + N + 2 + 2 * nk + 2 * nx + 2 * ng, ni = (size_t)E + 1 + 3 * nk;
    float *buf = FALLOC(nf + ni);
    float *probs = buf, *lse = probs + ne, *wts = lse + N, *stats = wts + nk, *xg = stats + 2;
    float *dx = xg + ng, *out = dx + nx, *dy = out + nx, *dwts = dy + ng, *dl = dwts + nk;
    int32_t *idx = (int32_t *)(buf + nf), *offs = idx + nk, *rows = offs + E + 1, *slot = rows + nk;
    ops->moe_route(probs, lse, idx, wts, offs, rows, slot, stats, lg, N, E, K, 1);
    ops->moe_gather(xg, x, rows, N, K, C);
    ops->moe_gather_backward(dx, xg, slot, N, K, C);
    ops->moe_combine(out, x, xg, wts, slot, N, K, C);
    ops->moe_combine_backward(dy, dwts, d, xg, wts, slot, N, K, C);
    ops->moe_router_backward(dl, dwts, probs, lse, idx, wts, offs, N, E, K, 1, 0.01f, 0.001f);
    *bytes = (nf + ni) * 4;
    return buf;
}

/* 1 check: sizes past the one-thread cut-off of every loop */
static void test_determinism(void) {
    const int N = 300, E = 16, K = 4, C = 64;
    const size_t nx = (size_t)N * C;
    float *lg = FALLOC((size_t)N * E), *x = FALLOC(nx), *d = FALLOC(nx), *got[2];
    fill(lg, NULL, (size_t)N * E, -3, 3), fill(x, NULL, nx, -1, 1), fill(d, NULL, nx, -1, 1);
    size_t bytes = 0;
    for (int k = 0; k < 2; k++) {
        cpu_ops_set_threads(k + 1);
        got[k] = row_ops_run(lg, x, d, N, E, K, C, &bytes);
    }
    cpu_ops_set_threads(2);
    tap_ok(!memcmp(got[0], got[1], bytes), "moe route, gather(+backward), combine(+backward), "
           "router_backward: same bits, 1 and 2 threads (N=%d E=%d K=%d C=%d)", N, E, K, C);
    free(got[0]), free(got[1]), free(lg), free(x), free(d);
}

/* 1 check: the fp32 backend's moe_* entries give the table's bits (same inputs, buffers equal) */
static void test_backend(void) {
    const int N = 9, E = 5, K = 2, C = 6, F = 4, NK = N * K;
    const tsr_backend be = tsr_fp32_backend(ops);
    const size_t ne = (size_t)N * E, ng = (size_t)NK * C, nw = (size_t)E * F * C;
    float *lg = FALLOC(ne), *x = FALLOC((size_t)N * C), *w = FALLOC(nw), *d = FALLOC(ng);
    fill(lg, NULL, ne, -2, 2), fill(x, NULL, (size_t)N * C, -1, 1), fill(w, NULL, nw, -1, 1);
    fill(d, NULL, ng, -1, 1);
    const size_t nf = 2 * ne + N + 2 + 2 * (size_t)NK + 3 * ng + nw + (size_t)N * C;
    const size_t ni = 3 * (size_t)NK + E + 1;
    float *b[2];
    for (int k = 0; k < 2; k++) {
        float *p = b[k] = FALLOC(nf + ni);
        float *probs = p, *lse = p + ne, *wts = lse + N, *st = wts + NK, *xg = st + 2;
        float *h = xg + ng, *dxg = h + ng, *dw = dxg + ng, *dwts = dw + nw, *dl = dwts + NK;
        float *dx = dl + ne;
        int32_t *idx = (int32_t *)(p + nf), *offs = idx + NK, *rows = offs + E + 1;
        int32_t *slot = rows + NK;
        if (k == 0) {
            be.moe_route(&be, probs, lse, idx, wts, offs, rows, slot, st, lg, N, E, K, 1);
            be.moe_gather(&be, xg, x, rows, N, K, C);
            be.moe_matmul_forward(&be, h, xg, w, offs, E, NK, C, F);
            be.moe_matmul_backward(&be, dxg, dw, d, xg, w, offs, E, NK, C, F);
            be.moe_gather_backward(&be, dx, dxg, slot, N, K, C);
            be.moe_combine(&be, dx, dx, xg, wts, slot, N, K, C);
            be.moe_combine_backward(&be, dxg, dwts, d, xg, wts, slot, N, K, C);
            be.moe_router_backward(&be, dl, dwts, probs, lse, idx, wts, offs, N, E, K, 1, 0.1f,
                                   0.1f);
        } else {
            ops->moe_route(probs, lse, idx, wts, offs, rows, slot, st, lg, N, E, K, 1);
            ops->moe_gather(xg, x, rows, N, K, C);
            ops->moe_matmul_forward(h, xg, w, offs, E, NK, C, F);
            ops->moe_matmul_backward(dxg, dw, d, xg, w, offs, E, NK, C, F);
            ops->moe_gather_backward(dx, dxg, slot, N, K, C);
            ops->moe_combine(dx, dx, xg, wts, slot, N, K, C);
            ops->moe_combine_backward(dxg, dwts, d, xg, wts, slot, N, K, C);
            ops->moe_router_backward(dl, dwts, probs, lse, idx, wts, offs, N, E, K, 1, 0.1f, 0.1f);
        }
    }
    tap_ok(!memcmp(b[0], b[1], (nf + ni) * 4), "fp32 backend: moe_* = the op table's bits");
    free(b[0]), free(b[1]), free(lg), free(x), free(w), free(d);
}

/* 2 checks: moe_matmul_backward with dw NULL (frozen experts) gives dinp the bits it gets beside
 * dw (an expert without rows, one with one row); the fp32 backend passes the NULL through */
static void test_moe_matmul_frozen(int IC, int OC) {
    enum { E = 5, NK = 10 };
    const int32_t offs[E + 1] = {0, 3, 3, 4, 8, 10};
    const size_t ni = (size_t)NK * IC, no = (size_t)NK * OC, nw = (size_t)E * OC * IC;
    const tsr_backend be = tsr_fp32_backend(ops);
    float *inp = FALLOC(ni), *w = FALLOC(nw), *dout = FALLOC(no), *g0 = FALLOC(ni);
    float *dw = FALLOC(nw);
    fill(inp, NULL, ni, -1, 1), fill(w, NULL, nw, -1, 1), fill(dout, NULL, no, -1, 1);
    fill(g0, NULL, ni, -1, 1), fill(dw, NULL, nw, -1, 1);
    float *fi = copy_f(g0, ni), *zi = copy_f(g0, ni), *bi = copy_f(g0, ni);
    ops->moe_matmul_backward(fi, dw, dout, inp, w, offs, E, NK, IC, OC);
    ops->moe_matmul_backward(zi, NULL, dout, inp, w, offs, E, NK, IC, OC);
    tap_ok(!memcmp(zi, fi, ni * 4) && memcmp(zi, g0, ni * 4),
           "moe_matmul_backward (IC=%d OC=%d) dw NULL (frozen): dinp the same bits as with dw", IC,
           OC);
    be.moe_matmul_backward(&be, bi, NULL, dout, inp, w, offs, E, NK, IC, OC);
    tap_ok(!memcmp(bi, zi, ni * 4),
           "fp32 backend: moe_matmul_backward with dw NULL = the op table's bits");
    free(inp), free(w), free(dout), free(g0), free(dw), free(fi), free(zi), free(bi);
}

/* 2 checks: gpt-oss's unit (ops.h moe_gptoss_*) against its float64 formula and the analytic
 * derivative written here: gate = min(g, L), up = clamp(u, -L, L), out = (up + 1) gate
 * sigmoid(alpha gate); d/dg passes where g <= L, d/du where -L <= u <= L (torch.clamp: bounds
 * included). Inputs in [-3L, 3L] (most clamped somewhere) plus values exactly on the bounds;
 * the backward accumulates onto G0. */
static void test_gptoss_unit(int N, int F) {
    const float alpha = 1.702f, L = 0.8f;
    const size_t ni = (size_t)N * 2 * F, no = (size_t)N * F;
    float *inp = FALLOC(ni), *out = FALLOC(no), *dout = FALLOC(no), *g = FALLOC(ni);
    double *want = DALLOC(no), *dwant = DALLOC(ni), *g0 = DALLOC(ni), *dd = DALLOC(no);
    fill(inp, NULL, ni, -3 * L, 3 * L), fill(dout, dd, no, -1, 1), fill(g, g0, ni, -1, 1);
    inp[0] = L, inp[F] = -L, inp[1] = -L, inp[F + 1] = L; /* gate and up on their bounds */
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            const size_t a = (size_t)n * 2 * F + f, b = a + F, o = (size_t)n * F + f;
            const double gi = inp[a], ui = inp[b], gc = fmin(gi, L), uc = fmax(fmin(ui, L), -L);
            const double sg = 1.0 / (1.0 + exp(-alpha * gc));
            want[o] = (uc + 1.0) * gc * sg;
            const double dglu = sg + alpha * gc * sg * (1 - sg);
            dwant[a] = g0[a] + (gi <= L ? dd[o] * (uc + 1.0) * dglu : 0);
            dwant[b] = g0[b] + (ui >= -L && ui <= L ? dd[o] * gc * sg : 0);
        }
    ops->moe_gptoss_forward(out, inp, N, F, alpha, L);
    check("moe_gptoss_forward vs float64 (abs 1e-6, rel 1e-5)", out, want, no, 1e-6, 1e-5);
    ops->moe_gptoss_backward(g, inp, dout, N, F, alpha, L);
    check("moe_gptoss_backward += the analytic gradient, 0 outside the clamps, the bounds "
          "passing (abs 1e-6, rel 1e-5)", g, dwant, ni, 1e-6, 1e-5);
    free(inp), free(out), free(dout), free(g), free(want), free(dwant), free(g0), free(dd);
}

/* 2 checks: moe_bias_forward adds expert e's bias to its rows only, moe_bias_backward adds the
 * sum of each expert's rows (an expert without rows keeps its G0) */
static void test_moe_bias(int OC) {
    enum { E = 4, NK = 7 };
    const int32_t offs[E + 1] = {0, 3, 3, 6, 7};
    const size_t no = (size_t)NK * OC, nb = (size_t)E * OC;
    float *out = FALLOC(no), *b = FALLOC(nb), *db = FALLOC(nb);
    double *want = DALLOC(no), *dwant = DALLOC(nb);
    fill(out, want, no, -1, 1), fill(b, NULL, nb, -1, 1), fill(db, dwant, nb, -1, 1);
    for (int e = 0; e < E; e++)
        for (int r = offs[e]; r < offs[e + 1]; r++)
            for (int c = 0; c < OC; c++) {
                dwant[(size_t)e * OC + c] += out[(size_t)r * OC + c]; /* out before the add */
                want[(size_t)r * OC + c] += b[(size_t)e * OC + c];
            }
    ops->moe_bias_backward(db, out, offs, E, OC);
    check("moe_bias_backward += each expert's rows summed", db, dwant, nb, 1e-6, 1e-6);
    ops->moe_bias_forward(out, b, offs, E, OC);
    check("moe_bias_forward: each row + its expert's bias", out, want, no, 1e-6, 1e-6);
    free(out), free(b), free(db), free(want), free(dwant);
}

int main(void) {
    tap_plan(NCHECKS);
    cpu_ops_set_threads(2);
    test_route_hand();                    /* 7 */
    test_route_stats_hand();              /* 4 */
    test_route_random(37, 8, 2, 1, 3.0);  /* 6 each */
    test_route_random(50, 6, 3, 0, 1.0);
    test_route_random(300, 16, 4, 1, 2.0); /* parallel rows */
    test_route_random(5, 4, 4, 1, 2.0);    /* K = E */
    test_gather(7, 4, 2, 5);              /* 2 each */
    test_gather(200, 8, 4, 24);           /* parallel rows */
    test_moe_matmul(6, 5);                /* 5 each */
    test_moe_matmul(33, 17);
    test_combine(6, 4, 2, 5, 1);          /* 4 each */
    test_combine(6, 4, 2, 5, 0);
    test_combine(150, 8, 3, 40, 1);       /* parallel rows */
    test_router_backward(6, 5, 2, 0, 0.3f, 0.2f); /* 1 each */
    test_router_backward(6, 5, 2, 1, 0.3f, 0.2f);
    test_router_backward(5, 8, 3, 1, 0.0f, 0.0f); /* dwts alone */
    test_router_backward(4, 6, 1, 1, 0.5f, 0.0f); /* K = 1 normalised: wts = 1, aux alone */
    test_determinism();                   /* 1 */
    test_backend();                       /* 1 */
    test_moe_matmul_frozen(6, 5);         /* frozen experts: 2 each */
    test_moe_matmul_frozen(33, 17);
    test_gptoss_unit(9, 13);              /* gpt-oss's experts: 2 */
    test_moe_bias(5);                     /* 2 */
    return tap_done();
}
