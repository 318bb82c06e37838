/* cpu_deltanet.c — the Gated DeltaNet core on the CPU (cpu_deltanet.h, docs/deltanet.md).
 *
 * Forward, chunked (WY/UT) form. A chunk is n <= chunk positions of one document, with
 * gam_i = g_0 + ... + g_i (within the chunk) and S the state entering it:
 *   X = (I + A)^-1 [diag(beta) V | diag(beta) K exp(gam)],  A_ij = beta_i k_i.k_j e^(gam_i - gam_j)
 *       for j < i (forward substitution, row by row: the UT transform);
 *   Vnew = X_V - X_K S                      (the delta rule's corrected values)
 *   out_i = e^gam_i q_i^T S + sum_{j<=i} q_i.k_j e^(gam_i - gam_j) Vnew_j
 *   S <- e^gam_(n-1) S + sum_j e^(gam_(n-1) - gam_j) k_j Vnew_j^T
 * Chunks start at multiples of `chunk` and at document starts, so the state entering each block
 * of `chunk` positions is a chunk's entering state: the forward saves it (ckpt). The inner sums
 * run in double, the state of a pass too; inputs and outputs are fp32.
 *
 * Backward. Block by block from the last, the block's states are recomputed step by step from
 * ckpt, then the recurrence is differentiated step by step in reverse (dS carried across blocks),
 * in the normalised q~, k~; the L2 norm's backward ends it. The gradient is that of the same
 * function the chunked forward computes (the two forms are equal, tests/reference/
 * test_deltanet.py); a backward on the chunked form's matrix products is for the CUDA kernel. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu_deltanet.h"

#define DN_EPS 1e-6 /* the L2 norm's, as HF's l2norm */

/* one value head of one sequence */
typedef struct dn_head {
    const float *q, *k, *v, *g, *beta; /* row 0 of the head */
    const int32_t *seq;                /* (T) of the sequence, or NULL */
    int ldq, ldv, ldg;                 /* elements between rows: HK dk, HV dv, HV */
    int T, dk, dv, chunk;
    double scale;                      /* 1 / sqrt(dk) */
} dn_head;

/* one thread's scratch */
typedef struct dn_work {
    double *qn, *kn, *gam, *beta, *x, *vec, *sb;
} dn_work;

size_t cpu_deltanet_ckpt_floats(const tsr_dn_shape *s) {
    const size_t nb = (size_t)((s->T + s->chunk - 1) / s->chunk);
    return (size_t)s->B * (size_t)s->HV * nb * (size_t)s->dk * (size_t)s->dv;
}

static int imin(int a, int b) { return a < b ? a : b; }

static int doc_start(const int32_t *seq, int t) { return seq && t > 0 && seq[t] != seq[t - 1]; }

static dn_head head_view(const tsr_dn_shape *s, const float *q, const float *k, const float *v,
                         const float *g, const float *beta, const int32_t *seq, int b, int h) {
    const int hk = h / (s->HV / s->HK);
    const size_t row = (size_t)b * (size_t)s->T;
    dn_head d = {q + (row * s->HK + hk) * s->dk, k + (row * s->HK + hk) * s->dk,
                 v + (row * s->HV + h) * s->dv, g + row * s->HV + h, beta + row * s->HV + h,
                 seq ? seq + row : NULL, s->HK * s->dk, s->HV * s->dv, s->HV, s->T, s->dk, s->dv,
                 s->chunk, 1.0 / sqrt((double)s->dk)};
    return d;
}

static double dot(const double *a, const double *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y = mul x / sqrt(|x|^2 + eps); returns 1 / sqrt(|x|^2 + eps) */
static double l2_row(double *y, const float *x, int n, double mul) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    const double r = 1.0 / sqrt(s + DN_EPS);
    for (int i = 0; i < n; i++) y[i] = mul * r * x[i];
    return r;
}

/* dx += the gradient of x through y = mul x / sqrt(|x|^2 + eps), dy that of y */
static void l2_backward(float *dx, const float *x, const double *dy, int n, double mul) {
    double s = 0, yd = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    const double r = 1.0 / sqrt(s + DN_EPS);
    for (int i = 0; i < n; i++) yd += r * x[i] * dy[i];
    for (int i = 0; i < n; i++) dx[i] += (float)(mul * r * (dy[i] - r * x[i] * yd));
}

/* y (n) = M^T x for M (m, n) row-major */
static void mat_t_vec(double *y, const double *M, const double *x, int m, int n) {
    for (int j = 0; j < n; j++) y[j] = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) y[j] += M[i * n + j] * x[i];
}

/* M (m, n) += a x y^T */
static void rank1(double *M, double a, const double *x, const double *y, int m, int n) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) M[i * n + j] += a * x[i] * y[j];
}

/* the chunk's normalised rows, cumulative log-decay and write strengths */
static void chunk_load(const dn_head *h, int t0, int n, dn_work *w) {
    double gam = 0;
    for (int i = 0; i < n; i++) {
        const size_t t = (size_t)(t0 + i);
        l2_row(w->qn + (size_t)i * h->dk, h->q + t * h->ldq, h->dk, h->scale);
        l2_row(w->kn + (size_t)i * h->dk, h->k + t * h->ldq, h->dk, 1.0);
        gam += h->g[t * h->ldg];
        w->gam[i] = gam;
        w->beta[i] = h->beta[t * h->ldg];
    }
}

/* X = (I + A)^-1 [diag(beta) V | diag(beta) K e^gam], rows of dv + dk, then its V part less
 * X_K S: Vnew */
static void chunk_solve(const dn_head *h, int t0, int n, const double *S, dn_work *w) {
    const int dk = h->dk, dv = h->dv, xw = dv + dk;
    for (int i = 0; i < n; i++) {
        double *xi = w->x + (size_t)i * xw;
        const double *ki = w->kn + (size_t)i * dk, bi = w->beta[i];
        const float *vi = h->v + (size_t)(t0 + i) * h->ldv;
        for (int c = 0; c < dv; c++) xi[c] = bi * vi[c];
        for (int c = 0; c < dk; c++) xi[dv + c] = bi * ki[c] * exp(w->gam[i]);
        for (int j = 0; j < i; j++) {
            const double a = bi * dot(ki, w->kn + (size_t)j * dk, dk) * exp(w->gam[i] - w->gam[j]);
            const double *xj = w->x + (size_t)j * xw;
            for (int c = 0; c < xw; c++) xi[c] -= a * xj[c];
        }
    }
    for (int i = 0; i < n; i++) {
        double *xi = w->x + (size_t)i * xw;
        for (int a = 0; a < dk; a++)
            for (int c = 0; c < dv; c++) xi[c] -= xi[dv + a] * S[(size_t)a * dv + c];
    }
}

/* out_i = e^gam_i q_i^T S + sum_{j<=i} q_i.k_j e^(gam_i - gam_j) Vnew_j */
static void chunk_out(const dn_head *h, int t0, int n, const double *S, float *out, int ldo,
                      dn_work *w) {
    const int dk = h->dk, dv = h->dv, xw = dv + dk;
    double *o = w->vec;
    for (int i = 0; i < n; i++) {
        const double *qi = w->qn + (size_t)i * dk;
        mat_t_vec(o, S, qi, dk, dv);
        for (int c = 0; c < dv; c++) o[c] *= exp(w->gam[i]);
        for (int j = 0; j <= i; j++) {
            const double a = dot(qi, w->kn + (size_t)j * dk, dk) * exp(w->gam[i] - w->gam[j]);
            for (int c = 0; c < dv; c++) o[c] += a * w->x[(size_t)j * xw + c];
        }
        float *oi = out + (size_t)(t0 + i) * ldo;
        for (int c = 0; c < dv; c++) oi[c] = (float)o[c];
    }
}

/* S <- e^gam_(n-1) S + sum_j e^(gam_(n-1) - gam_j) k_j Vnew_j^T */
static void chunk_state(const dn_head *h, int n, double *S, const dn_work *w) {
    const int dk = h->dk, dv = h->dv, xw = dv + dk;
    const double last = w->gam[n - 1], e = exp(last);
    for (size_t i = 0; i < (size_t)dk * dv; i++) S[i] *= e;
    for (int j = 0; j < n; j++)
        rank1(S, exp(last - w->gam[j]), w->kn + (size_t)j * dk, w->x + (size_t)j * xw, dk, dv);
}

static void chunk_forward(const dn_head *h, int t0, int n, double *S, float *out, int ldo,
                          dn_work *w) {
    chunk_load(h, t0, n, w);
    chunk_solve(h, t0, n, S, w);
    chunk_out(h, t0, n, S, out, ldo, w);
    chunk_state(h, n, S, w);
}

static void to_float(float *dst, const double *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = (float)src[i];
}

static void to_double(double *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = src ? src[i] : 0.0;
}

/* one head's chunked pass: S enters as the initial state and leaves as the final one */
static void head_forward(const dn_head *h, double *S, float *out, int ldo, float *ckpt,
                         dn_work *w) {
    const size_t ss = (size_t)h->dk * h->dv;
    for (int c = 0, t0 = 0; t0 < h->T; c++, t0 += h->chunk) {
        if (ckpt) to_float(ckpt + (size_t)c * ss, S, ss);
        const int end = imin(h->T, t0 + h->chunk);
        for (int t = t0; t < end;) {
            int e = t + 1;
            while (e < end && !doc_start(h->seq, e)) e++;
            if (doc_start(h->seq, t)) memset(S, 0, ss * sizeof *S);
            chunk_forward(h, t, e - t, S, out, ldo, w);
            t = e;
        }
    }
}

static dn_work work_alloc(const tsr_dn_shape *s) {
    const size_t C = (size_t)s->chunk, dk = (size_t)s->dk, dv = (size_t)s->dv;
    const size_t vec = 4 * (dk > dv ? dk : dv);
    double *p = tsr_malloc(sizeof(double) * (2 * C * dk + 2 * C + C * (dk + dv) + vec + C * dk * dv));
    dn_work w = {p, p + C * dk, p + 2 * C * dk, p + 2 * C * dk + C, p + 2 * C * dk + 2 * C, NULL,
                 NULL};
    w.vec = w.x + C * (dk + dv);
    w.sb = w.vec + vec;
    return w;
}

/* a forward form's pass over one head: S enters as the initial state and leaves as the final
 * one; out the head's output column (row stride h->ldv); ckpt its saved states or NULL */
typedef void (*dn_pass)(const dn_head *h, double *S, float *out, float *ckpt, dn_work *w);

/* The forward forms' one driver: each (sequence, value head) a task, its state from state0 (or
 * zero), run by pass, its final state into state_out (or not; state_out may be state0). */
static void heads_forward(dn_pass pass, float *out, float *state_out, float *ckpt,
                          const float *state0, const float *q, const float *k, const float *v,
                          const float *g, const float *beta, const int32_t *seq,
                          const tsr_dn_shape *s) {
    const size_t ss = (size_t)s->dk * s->dv, nckpt = cpu_deltanet_ckpt_floats(s) / s->B / s->HV;
#pragma omp parallel
    {
        dn_work w = work_alloc(s);
        double *S = tsr_malloc(ss * sizeof *S);
#pragma omp for schedule(dynamic, 1)
        for (int bh = 0; bh < s->B * s->HV; bh++) {
            const dn_head h = head_view(s, q, k, v, g, beta, seq, bh / s->HV, bh % s->HV);
            to_double(S, state0 ? state0 + (size_t)bh * ss : NULL, ss);
            float *o = out + (size_t)(bh / s->HV) * s->T * h.ldv + (size_t)(bh % s->HV) * s->dv;
            pass(&h, S, o, ckpt ? ckpt + (size_t)bh * nckpt : NULL, &w);
            if (state_out) to_float(state_out + (size_t)bh * ss, S, ss);
        }
        free(S);
        free(w.qn);
    }
}

static void chunked_pass(const dn_head *h, double *S, float *out, float *ckpt, dn_work *w) {
    head_forward(h, S, out, h->ldv, ckpt, w);
}

void cpu_deltanet_forward(float *out, float *state_out, float *ckpt, const float *q,
                          const float *k, const float *v, const float *g, const float *beta,
                          const float *state0, const int32_t *seq, const tsr_dn_shape *s) {
    heads_forward(chunked_pass, out, state_out, ckpt, state0, q, k, v, g, beta, seq, s);
}

/* one step of the recurrence at position t on S (dk, dv); out_t written when out is not NULL */
static void step_forward(const dn_head *h, int t, double *S, float *out, dn_work *w) {
    const int dk = h->dk, dv = h->dv;
    const size_t ss = (size_t)dk * dv;
    double *m = w->vec, *qn = w->qn, *kn = w->kn;
    if (doc_start(h->seq, t)) memset(S, 0, ss * sizeof *S);
    l2_row(qn, h->q + (size_t)t * h->ldq, dk, h->scale);
    l2_row(kn, h->k + (size_t)t * h->ldq, dk, 1.0);
    const double a = exp(h->g[(size_t)t * h->ldg]), b = h->beta[(size_t)t * h->ldg];
    for (size_t i = 0; i < ss; i++) S[i] *= a;
    mat_t_vec(m, S, kn, dk, dv);
    const float *vt = h->v + (size_t)t * h->ldv;
    for (int c = 0; c < dv; c++) m[c] = b * (vt[c] - m[c]);
    rank1(S, 1.0, kn, m, dk, dv);
    if (!out) return;
    mat_t_vec(m, S, qn, dk, dv);
    for (int c = 0; c < dv; c++) out[(size_t)t * h->ldv + c] = (float)m[c];
}

static void recurrent_pass(const dn_head *h, double *S, float *out, float *ckpt, dn_work *w) {
    (void)ckpt;
    for (int t = 0; t < h->T; t++) step_forward(h, t, S, out, w);
}

void cpu_deltanet_recurrent(float *out, float *state, const float *q, const float *k,
                            const float *v, const float *g, const float *beta, const int32_t *seq,
                            const tsr_dn_shape *s) {
    heads_forward(recurrent_pass, out, state, NULL, state, q, k, v, g, beta, seq, s);
}

/* the backward's arguments, as cpu_deltanet_backward takes them */
typedef struct cpu_dn_args {
    float *dq, *dk, *dv, *dg, *dbeta, *dstate0;
    const float *dout, *dstate_out, *ckpt, *q, *k, *v, *g, *beta;
    const int32_t *seq;
    const tsr_dn_shape *s;
} cpu_dn_args;

/* the gradients of one value head: dqn, dkn in the normalised (and, for q, scaled) rows, (T, dk),
 * summed over the query/key head's value heads before the L2 norm's backward */
typedef struct dn_grads {
    double *dqn, *dkn, *dS;
    float *dv, *dg, *dbeta; /* row 0 of the head, strides as the inputs' */
    const float *dout;
} dn_grads;

/* dq += S'' do = a S do + k (delta . do);  dS'' += q do^T;  dk += dS'' delta */
static void step_out_backward(const dn_head *h, int t, const double *S, double a, double b,
                              const double *u, dn_grads *gr, dn_work *w) {
    const int dk = h->dk, dv = h->dv;
    const float *dot_ = gr->dout + (size_t)t * h->ldv;
    double *dq = gr->dqn + (size_t)t * dk, *dkr = gr->dkn + (size_t)t * dk, ddo = 0;
    for (int c = 0; c < dv; c++) ddo += b * u[c] * dot_[c];
    for (int i = 0; i < dk; i++) {
        double s = 0;
        const double *Si = S + (size_t)i * dv;
        for (int c = 0; c < dv; c++) s += Si[c] * dot_[c];
        dq[i] += a * s + w->kn[i] * ddo;
    }
    for (int i = 0; i < dk; i++) {
        double *dSi = gr->dS + (size_t)i * dv;
        for (int c = 0; c < dv; c++) dSi[c] += w->qn[i] * dot_[c];
        dkr[i] += b * dot(dSi, u, dv);
    }
}

/* the backward of step_forward at position t: S the state entering it (after a document start's
 * reset), gr->dS the gradient of the state it leaves, replaced by that of S. With S' = a S,
 * u = v - S'^T k, delta = b u, S'' = S' + k delta^T, out = S''^T q. */
static void step_backward(const dn_head *h, int t, const double *S, dn_grads *gr, dn_work *w) {
    const int dk = h->dk, dv = h->dv;
    double *u = w->vec, *dd = u + dv, *dS = gr->dS, *dkr = gr->dkn + (size_t)t * dk;
    l2_row(w->qn, h->q + (size_t)t * h->ldq, dk, h->scale);
    l2_row(w->kn, h->k + (size_t)t * h->ldq, dk, 1.0);
    const double a = exp(h->g[(size_t)t * h->ldg]), b = h->beta[(size_t)t * h->ldg];
    const float *vt = h->v + (size_t)t * h->ldv;
    mat_t_vec(u, S, w->kn, dk, dv);
    for (int c = 0; c < dv; c++) u[c] = vt[c] - a * u[c];
    step_out_backward(h, t, S, a, b, u, gr, w);
    mat_t_vec(dd, dS, w->kn, dk, dv); /* d delta = dS''^T k */
    double db = 0, dg = 0;
    for (int c = 0; c < dv; c++) {
        gr->dv[(size_t)t * h->ldv + c] += (float)(b * dd[c]);
        db += dd[c] * u[c];
        dd[c] *= -b; /* now d m, m = S'^T k: d m = -b d delta */
    }
    gr->dbeta[(size_t)t * h->ldg] += (float)db;
    rank1(dS, 1.0, w->kn, dd, dk, dv); /* dS' = dS'' + k dm^T */
    for (int i = 0; i < dk; i++) {
        dkr[i] += a * dot(S + (size_t)i * dv, dd, dv);
        dg += a * dot(S + (size_t)i * dv, dS + (size_t)i * dv, dv);
    }
    gr->dg[(size_t)t * h->ldg] += (float)dg;
    for (size_t i = 0; i < (size_t)dk * dv; i++) dS[i] *= a;
}

/* the block of positions t0 .. t0 + n - 1 of one head, its entering state in S0 (ckpt) */
static void block_backward(const dn_head *h, int t0, int n, const float *S0, dn_grads *gr,
                           dn_work *w) {
    const size_t ss = (size_t)h->dk * h->dv;
    double *sb = w->sb; /* sb[i]: the state entering step t0 + i, after a document start's reset */
    to_double(sb, S0, ss);
    if (doc_start(h->seq, t0)) memset(sb, 0, ss * sizeof *sb);
    for (int i = 1; i < n; i++) {
        double *si = sb + (size_t)i * ss;
        memcpy(si, si - ss, ss * sizeof *si);
        step_forward(h, t0 + i - 1, si, NULL, w);
        if (doc_start(h->seq, t0 + i)) memset(si, 0, ss * sizeof *si);
    }
    for (int i = n - 1; i >= 0; i--) {
        step_backward(h, t0 + i, sb + (size_t)i * ss, gr, w);
        if (doc_start(h->seq, t0 + i)) memset(gr->dS, 0, ss * sizeof *gr->dS);
    }
}

static void head_backward(const dn_head *h, const float *ckpt, dn_grads *gr, dn_work *w) {
    const size_t ss = (size_t)h->dk * h->dv;
    const int nb = (h->T + h->chunk - 1) / h->chunk;
    for (int c = nb - 1; c >= 0; c--) {
        const int t0 = c * h->chunk;
        block_backward(h, t0, imin(h->chunk, h->T - t0), ckpt + (size_t)c * ss, gr, w);
    }
}

/* the value heads of query/key head hk of sequence b, then the L2 norms' backward */
static void group_backward(const cpu_dn_args *A, int b, int hk, dn_grads *gr, dn_work *w) {
    const tsr_dn_shape *s = A->s;
    const size_t ss = (size_t)s->dk * s->dv, T = (size_t)s->T, nck = cpu_deltanet_ckpt_floats(s) / s->B / s->HV;
    const int grp = s->HV / s->HK;
    memset(gr->dqn, 0, 2 * T * s->dk * sizeof *gr->dqn);
    for (int h = hk * grp; h < (hk + 1) * grp; h++) {
        const size_t bh = (size_t)b * s->HV + h, row = (size_t)b * T;
        const dn_head hd = head_view(s, A->q, A->k, A->v, A->g, A->beta, A->seq, b, h);
        to_double(gr->dS, A->dstate_out ? A->dstate_out + bh * ss : NULL, ss);
        gr->dv = A->dv + (row * s->HV + h) * s->dv;
        gr->dg = A->dg + row * s->HV + h, gr->dbeta = A->dbeta + row * s->HV + h;
        gr->dout = A->dout + (row * s->HV + h) * s->dv;
        head_backward(&hd, A->ckpt + bh * nck, gr, w);
        if (A->dstate0)
            for (size_t i = 0; i < ss; i++) A->dstate0[bh * ss + i] += (float)gr->dS[i];
    }
    const size_t base = ((size_t)b * T * s->HK + hk) * s->dk, ld = (size_t)s->HK * s->dk;
    for (size_t t = 0; t < T; t++) {
        l2_backward(A->dq + base + t * ld, A->q + base + t * ld, gr->dqn + t * s->dk, s->dk,
                    1.0 / sqrt((double)s->dk));
        l2_backward(A->dk + base + t * ld, A->k + base + t * ld, gr->dkn + t * s->dk, s->dk, 1.0);
    }
}

void cpu_deltanet_backward(float *dq, float *dk, float *dv, float *dg, float *dbeta,
                           float *dstate0, const float *dout, const float *dstate_out,
                           const float *ckpt, const float *q, const float *k, const float *v,
                           const float *g, const float *beta, const int32_t *seq,
                           const tsr_dn_shape *s) {
    const cpu_dn_args A = {dq, dk, dv, dg, dbeta, dstate0, dout, dstate_out, ckpt, q, k, v, g, beta,
                           seq, s};
    const size_t T = (size_t)s->T, ss = (size_t)s->dk * s->dv;
#pragma omp parallel
    {
        dn_work w = work_alloc(s);
        double *p = tsr_malloc((2 * T * s->dk + ss) * sizeof *p);
        dn_grads gr = {p, p + T * s->dk, p + 2 * T * s->dk, NULL, NULL, NULL, NULL};
#pragma omp for schedule(dynamic, 1)
        for (int bk = 0; bk < s->B * s->HK; bk++) group_backward(&A, bk / s->HK, bk % s->HK, &gr, &w);
        free(p);
        free(w.qn);
    }
}
