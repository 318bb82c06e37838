/* cpu_llama.c — the fp32 CPU ops of the Llama/Qwen blocks: RMSNorm, QK-norm (Qwen 3), RoPE
 * (rotate-half pairing), SwiGLU and GeGLU (Gemma). ops.h states each op's contract.
 *
 * File-wide conventions (those of cpu_ops.c): backward ops accumulate (+=) into every gradient they
 * produce; loops are OpenMP-parallel over rows, every output element written by one thread in a
 * fixed order; parameter gradients (dw, dqw, dkw) are summed per fixed chunk of CPU_ROW_CHUNK
 * rows in double, then the chunks in order (cpu_reduce_chunks), so results do not depend on the
 * thread count; a parameter gradient given as NULL (frozen) is not computed, and dinp is the
 * same bits either way. RMSNorm and QK-norm share one row routine each way: a QK-norm head is an
 * RMSNorm row of hs (and rms_row_backward_dx, the frozen one, that routine less its sums).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu_internal.h"

/* ---- RMSNorm, one row ----------------------------------------------------------------------- */

/* o = x * r * w over C, r = 1 / sqrt(mean(x^2) + eps) with the mean in double; returns r.
 * o, x, w (C); o may be x */
static float rms_row_forward(float *o, const float *x, const float *w, int C, float eps) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += (double)x[c] * x[c];
    const float r = (float)(1.0 / sqrt(s / C + (double)eps));
    for (int c = 0; c < C; c++) o[c] = x[c] * r * w[c];
    return r;
}

/* With norm = x r:  dx += (w g - norm * mean(w g norm)) r;  pw += g norm (in double).
 * dx, g, x, w (C), pw (C) the chunk's partial sum of dw */
static void rms_row_backward(float *dx, double *pw, const float *g, const float *x,
                             const float *w, float r, int C) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) {
        const float norm = x[c] * r;
        s += (double)(w[c] * g[c]) * norm;
        pw[c] += (double)g[c] * norm;
    }
    const float m = (float)(s / C);
    for (int c = 0; c < C; c++) dx[c] += (w[c] * g[c] - x[c] * r * m) * r;
}

/* rms_row_backward without pw (the weight frozen): the same statements less the partial sum, so
 * dx gets the same bits (test_ops_llama.c checks it) */
static void rms_row_backward_dx(float *dx, const float *g, const float *x, const float *w, float r,
                                int C) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) {
        const float norm = x[c] * r;
        s += (double)(w[c] * g[c]) * norm;
    }
    const float m = (float)(s / C);
    for (int c = 0; c < C; c++) dx[c] += (w[c] * g[c] - x[c] * r * m) * r;
}

/* ---- RMSNorm -------------------------------------------------------------------------------- */

/* out = inp * rstd * w.  out (N,C), rstd (N), inp (N,C), w (C) */
void cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         float eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++)
        rstd[n] = rms_row_forward(out + (size_t)n * C, inp + (size_t)n * C, w, C, eps);
}

/* dinp (N,C) +=, dw (C) += sum_n dout * inp * rstd, or NULL (frozen: no sums); dout, inp (N,C),
 * w (C), rstd (N) */
void cpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C) {
    if (!dw) {
#pragma omp parallel for schedule(static) if ((long)N * C >= CPU_PAR_MIN)
        for (int n = 0; n < N; n++) {
            const size_t o = (size_t)n * C;
            rms_row_backward_dx(dinp + o, dout + o, inp + o, w, rstd[n], C);
        }
        return;
    }
    const int nchunks = cpu_row_chunks(N);
    double *part = tsr_malloc((size_t)nchunks * C * sizeof *part);
#pragma omp parallel for schedule(static) if ((long)N * C >= CPU_PAR_MIN)
    for (int k = 0; k < nchunks; k++) {
        double *pw = part + (size_t)k * C;
        for (int c = 0; c < C; c++) pw[c] = 0.0;
        const int n1 = (k + 1) * CPU_ROW_CHUNK < N ? (k + 1) * CPU_ROW_CHUNK : N;
        for (int n = k * CPU_ROW_CHUNK; n < n1; n++) {
            const size_t o = (size_t)n * C;
            rms_row_backward(dinp + o, pw, dout + o, inp + o, w, rstd[n], C);
        }
    }
    cpu_reduce_chunks(dw, part, nchunks, C);
    free(part);
}

/* ---- QK-norm ------------------------------------------------------------------------------- */

/* A qkv row's normalised groups: nq query groups of width wq (with qw), then nk key groups of
 * width wk (with kw), then the value columns (vw) copied. Per head (Qwen 3): NH and KVH groups of
 * hs; over the projection (OLMo 2): one group of NH hs and one of KVH hs. rstd (N, nq + nk). */
typedef struct qkn_layout {
    int nq, wq, nk, wk;
    size_t row, vw; /* the row's width (NH + 2 KVH) hs, and the value columns' KVH hs */
} qkn_layout;

static qkn_layout qkn_heads(int NH, int KVH, int hs, int proj) {
    const size_t vw = (size_t)KVH * hs;
    if (proj) return (qkn_layout){1, NH * hs, 1, KVH * hs, (size_t)(NH + 2 * KVH) * hs, vw};
    return (qkn_layout){NH, hs, KVH, hs, (size_t)(NH + 2 * KVH) * hs, vw};
}

/* group g's first column in its row, and its width */
static size_t qkn_col(const qkn_layout *q, int g, int *w) {
    *w = g < q->nq ? q->wq : q->wk;
    return g < q->nq ? (size_t)g * q->wq : (size_t)q->nq * q->wq + (size_t)(g - q->nq) * q->wk;
}

static void qkn_forward(float *out, float *rstd, const float *inp, const float *qw,
                        const float *kw, int N, qkn_layout q, float eps) {
    const int H = q.nq + q.nk;
    const size_t vcol = q.row - q.vw;
#pragma omp parallel for schedule(static) if ((long)N * (long)vcol >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + n * q.row;
        float *o = out + n * q.row;
        for (int h = 0; h < H; h++) {
            int w;
            const size_t c = qkn_col(&q, h, &w);
            rstd[(size_t)n * H + h] = rms_row_forward(o + c, x + c, h < q.nq ? qw : kw, w, eps);
        }
        if (o != x) memcpy(o + vcol, x + vcol, q.vw * sizeof *o);
    }
}

/* Heads 0..NH-1 of a qkv row are the queries, NH..NH+KVH-1 the keys: each an RMSNorm row of hs,
 * with qw or kw. out, inp (N, (NH+2KVH) hs), rstd (N, NH+KVH), qw, kw (hs); out may be inp */
void cpu_qknorm_forward(float *out, float *rstd, const float *inp, const float *qw,
                        const float *kw, int N, int NH, int KVH, int hs, float eps) {
    qkn_forward(out, rstd, inp, qw, kw, N, qkn_heads(NH, KVH, hs, 0), eps);
}

/* The queries (NH hs columns) one RMSNorm row with qw (NH hs), the keys (KVH hs) one with kw
 * (KVH hs); rstd (N, 2) */
void cpu_qknorm_proj_forward(float *out, float *rstd, const float *inp, const float *qw,
                             const float *kw, int N, int NH, int KVH, int hs, float eps) {
    qkn_forward(out, rstd, inp, qw, kw, N, qkn_heads(NH, KVH, hs, 1), eps);
}

/* The value columns' pass-through: dinp[row] += dout[row] over the vw columns from col0. */
static void qknorm_value_rows(float *dinp, const float *dout, size_t row, size_t col0, size_t vw) {
    float *dv = dinp + row + col0;
    const float *gv = dout + row + col0;
    for (size_t c = 0; c < vw; c++) dv[c] += gv[c];
}

/* row n's backward: dinp +=; pq, pk the chunk's partial sums of dqw, dkw (NULL: frozen, none) */
static void qkn_row_backward(float *dinp, double *pq, double *pk, const float *dout,
                             const float *inp, const float *qw, const float *kw,
                             const float *rstd, int n, const qkn_layout *q) {
    const int H = q->nq + q->nk;
    const size_t row = n * q->row;
    for (int h = 0; h < H; h++) {
        int w;
        const size_t o = row + qkn_col(q, h, &w);
        const float r = rstd[(size_t)n * H + h];
        if (!pq) rms_row_backward_dx(dinp + o, dout + o, inp + o, h < q->nq ? qw : kw, r, w);
        else rms_row_backward(dinp + o, h < q->nq ? pq : pk, dout + o, inp + o,
                              h < q->nq ? qw : kw, r, w);
    }
    qknorm_value_rows(dinp, dout, row, q->row - q->vw, q->vw);
}

/* dinp (N,row) += (value columns: dout), dqw (wq), dkw (wk) += (either or both NULL: frozen;
 * both: no sums at all, one: both summed, that one not added); dout, inp (N,row) */
static void qkn_backward(float *dinp, float *dqw, float *dkw, const float *dout, const float *inp,
                         const float *qw, const float *kw, const float *rstd, int N,
                         qkn_layout q) {
    const int nchunks = cpu_row_chunks(N), W = q.wq + q.wk;
    if (!dqw && !dkw) {
#pragma omp parallel for schedule(static) if ((long)N * (long)q.row >= CPU_PAR_MIN)
        for (int n = 0; n < N; n++)
            qkn_row_backward(dinp, NULL, NULL, dout, inp, qw, kw, rstd, n, &q);
        return;
    }
    double *part = tsr_malloc((size_t)nchunks * W * sizeof *part); /* [chunk][dqw | dkw] */
#pragma omp parallel for schedule(static) if ((long)N * (long)q.row >= CPU_PAR_MIN)
    for (int k = 0; k < nchunks; k++) {
        double *pq = part + (size_t)k * W;
        for (int c = 0; c < W; c++) pq[c] = 0.0;
        const int n1 = (k + 1) * CPU_ROW_CHUNK < N ? (k + 1) * CPU_ROW_CHUNK : N;
        for (int n = k * CPU_ROW_CHUNK; n < n1; n++)
            qkn_row_backward(dinp, pq, pq + q.wq, dout, inp, qw, kw, rstd, n, &q);
    }
    /* one reduction of width wq + wk, then split */
    float *sums = tsr_malloc((size_t)W * sizeof *sums);
    memset(sums, 0, (size_t)W * sizeof *sums);
    cpu_reduce_chunks(sums, part, nchunks, W);
    for (int c = 0; dqw && c < q.wq; c++) dqw[c] += sums[c];
    for (int c = 0; dkw && c < q.wk; c++) dkw[c] += sums[q.wq + c];
    free(sums);
    free(part);
}

/* dinp (N,QKV) += (value columns: dout), dqw, dkw (hs) += (either or both NULL: frozen; both:
 * no sums at all, one: both summed, that one not added); dout, inp (N,QKV), rstd (N,NH+KVH) */
void cpu_qknorm_backward(float *dinp, float *dqw, float *dkw, const float *dout, const float *inp,
                         const float *qw, const float *kw, const float *rstd, int N, int NH,
                         int KVH, int hs) {
    qkn_backward(dinp, dqw, dkw, dout, inp, qw, kw, rstd, N, qkn_heads(NH, KVH, hs, 0));
}

/* cpu_qknorm_proj_forward's backward: dqw (NH hs), dkw (KVH hs); rstd (N, 2) */
void cpu_qknorm_proj_backward(float *dinp, float *dqw, float *dkw, const float *dout,
                              const float *inp, const float *qw, const float *kw,
                              const float *rstd, int N, int NH, int KVH, int hs) {
    qkn_backward(dinp, dqw, dkw, dout, inp, qw, kw, rstd, N, qkn_heads(NH, KVH, hs, 1));
}

/* ---- RoPE ----------------------------------------------------------------------------------- */

/* Rotates the first rot dimensions of the query and key heads of every row of qkv
 * (B,T,(NH+2KVH) hs) in place, pairs (i, i + rot/2), by the angle a = p * inv_freq[i] (sign 1)
 * or -a (sign -1, the transpose), p = pos[b,t] or t + p0. The angle, its cosine and sine (times
 * mscale) are formed in double once per (row, i) and rounded to float; the rotation is fp32:
 * x' = x c - y s,  y' = y c + x s. Dimensions rot..hs-1 are left as they are. */
static void rope_rotate(float *qkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                        int T, int NH, int KVH, int hs, int rot, double mscale, double sign) {
    if (rot % 2 || rot < 2 || rot > hs)
        tsr_die(TSR_EXIT_INTERNAL, "cpu rope: %d rotary dimensions of a head of %d (RoPE "
                "rotates pairs)", rot, hs);
    const int half = rot / 2, H = NH + KVH;
    const size_t QKV = (size_t)(NH + 2 * KVH) * hs;
    const long N = (long)B * T;
#pragma omp parallel if (N * H * hs >= CPU_PAR_MIN)
    {
        float *cs = tsr_malloc((size_t)(hs > 0 ? hs : 1) * sizeof *cs), *sn = cs + half;
#pragma omp for schedule(static)
        for (long n = 0; n < N; n++) {
            const double p = pos ? (double)pos[n] : (double)(n % T) + p0;
            for (int i = 0; i < half; i++) {
                const double a = p * (double)inv_freq[i];
                cs[i] = (float)(mscale * cos(a));
                sn[i] = (float)(sign * mscale * sin(a));
            }
            for (int h = 0; h < H; h++) {
                float *x = qkv + n * QKV + (size_t)h * hs, *y = x + half;
                for (int i = 0; i < half; i++) {
                    const float x0 = x[i], y0 = y[i];
                    x[i] = x0 * cs[i] - y0 * sn[i];
                    y[i] = y0 * cs[i] + x0 * sn[i];
                }
            }
        }
        free(cs);
    }
}

void cpu_rope_forward(float *qkv, const int32_t *pos, int p0, const float *inv_freq, int B, int T,
                      int NH, int KVH, int hs) {
    rope_rotate(qkv, pos, p0, inv_freq, B, T, NH, KVH, hs, hs, 1.0, 1.0);
}

void cpu_rope_part_forward(float *qkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                           int T, int NH, int KVH, int hs, int rot, float mscale) {
    rope_rotate(qkv, pos, p0, inv_freq, B, T, NH, KVH, hs, rot, mscale, 1.0);
}

void cpu_rope_part_backward(float *dqkv, const int32_t *pos, int p0, const float *inv_freq,
                            int B, int T, int NH, int KVH, int hs, int rot, float mscale) {
    rope_rotate(dqkv, pos, p0, inv_freq, B, T, NH, KVH, hs, rot, mscale, -1.0);
}

void cpu_rope_backward(float *dqkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                       int T, int NH, int KVH, int hs) {
    rope_rotate(dqkv, pos, p0, inv_freq, B, T, NH, KVH, hs, hs, 1.0, -1.0);
}

/* ---- SwiGLU --------------------------------------------------------------------------------- */

/* out[n,f] = silu(g) u, g = inp[n,f], u = inp[n,F+f], silu(g) = g / (1 + e^-g).
 * out (N,F), inp (N,2F) */
void cpu_swiglu_forward(float *out, const float *inp, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F;
        float *o = out + (size_t)n * F;
#pragma omp simd
        for (int f = 0; f < F; f++) o[f] = g[f] / (1.0f + cpu_expf(-g[f])) * u[f];
    }
}

/* With e = e^-g, s = 1 / (1 + e):  silu'(g) = s + g s (1 - s) = s + g s (e s);
 * dgate += dout u silu'(g),  dup += dout silu(g).  dinp (N,2F) +=, inp (N,2F), dout (N,F) */
void cpu_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F, *d = dout + (size_t)n * F;
        float *dg = dinp + (size_t)n * 2 * F, *du = dg + F;
#pragma omp simd
        for (int f = 0; f < F; f++) {
            const float e = cpu_expf(-g[f]), s = 1.0f / (1.0f + e);
            const float silu = g[f] / (1.0f + e), dsilu = s + g[f] * s * (e * s);
            dg[f] += d[f] * u[f] * dsilu;
            du[f] += d[f] * silu;
        }
    }
}

/* ---- GeGLU (tanh GELU) ---------------------------------------------------------------------- */

#define GEGLU_K0 0.7978845608028654f /* sqrt(2/pi), cpu_ops.c's GELU constants */
#define GEGLU_K1 0.044715f

/* out[n,f] = gelu_tanh(g) u, g = inp[n,f], u = inp[n,F+f]; gelu_tanh(g) = g sigmoid(2v),
 * v = sqrt(2/pi)(g + 0.044715 g^3) (cpu_ops.c's GELU form). out (N,F), inp (N,2F) */
void cpu_geglu_forward(float *out, const float *inp, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F;
        float *o = out + (size_t)n * F;
#pragma omp simd
        for (int f = 0; f < F; f++) {
            const float x = g[f], v = GEGLU_K0 * (x + GEGLU_K1 * x * x * x);
            o[f] = x / (1.0f + cpu_expf(-2.0f * v)) * u[f];
        }
    }
}

/* With e = e^-2v, s = 1 / (1 + e): gelu_tanh'(g) = s + 2 g s (e s) v', v' = sqrt(2/pi)(1 +
 * 3*0.044715 g^2); dgate += dout u gelu_tanh'(g), dup += dout gelu_tanh(g).
 * dinp (N,2F) +=, inp (N,2F), dout (N,F) */
void cpu_geglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
#pragma omp parallel for schedule(static) if ((long)N * F >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F, *d = dout + (size_t)n * F;
        float *dg = dinp + (size_t)n * 2 * F, *du = dg + F;
#pragma omp simd
        for (int f = 0; f < F; f++) {
            const float x = g[f], v = GEGLU_K0 * (x + GEGLU_K1 * x * x * x);
            const float dv = GEGLU_K0 * (1.0f + 3.0f * GEGLU_K1 * x * x);
            const float e = cpu_expf(-2.0f * v), s = 1.0f / (1.0f + e);
            dg[f] += d[f] * u[f] * (s + 2.0f * x * s * (e * s) * dv);
            du[f] += d[f] * (x * s);
        }
    }
}
