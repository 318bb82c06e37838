/* cpu_deltanet_layer.c — the parts of the Gated DeltaNet layer around its core (cpu_deltanet.h,
 * docs/deltanet.md): the short causal depthwise convolution with SiLU, the gates beta and g, the
 * SiLU gate of the normed output. fp32 in and out; parameter gradients are summed in double in
 * row order by one thread per parameter element, so the bits do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>

#include "cpu_deltanet.h"

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static double softplus(double x) { return x > 20.0 ? x : log1p(exp(x)); }

static double silu(double x) { return x * sigmoid(x); }

static double silu_grad(double x) {
    const double s = sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}

/* one sequence of the convolution: its rows x (T, CD), the K - 1 rows before them (hist, or
 * NULL: zeros), its document ids (or NULL) */
typedef struct conv_seq {
    const float *x, *hist, *w;
    const int32_t *seq;
    int CD, K;
} conv_seq;

static conv_seq conv_view(const float *x, const float *hist, const float *w, const int32_t *seq,
                          int b, int T, int CD, int K) {
    const size_t row = (size_t)b * T;
    conv_seq s = {x + row * CD, hist ? hist + (size_t)b * (K - 1) * CD : NULL, w,
                  seq ? seq + row : NULL, CD, K};
    return s;
}

/* the first row of row t's window: t - (K-1), or its document's start if later (rows below 0
 * are the history's) */
static int conv_lo(const conv_seq *s, int t) {
    int lo = t;
    while (lo > t - (s->K - 1) && !(s->seq && lo > 0 && s->seq[lo] != s->seq[lo - 1])) lo--;
    return lo;
}

/* row r's input at channel c: x's, the history's below 0 */
static double conv_in(const conv_seq *s, int r, int c) {
    if (r >= 0) return s->x[(size_t)r * s->CD + c];
    return s->hist ? s->hist[(size_t)(s->K - 1 + r) * s->CD + c] : 0.0;
}

/* the convolution's pre-activation at row t and channel c */
static double conv_pre(const conv_seq *s, int t, int c) {
    double a = 0;
    for (int r = conv_lo(s, t); r <= t; r++)
        a += (double)s->w[(size_t)c * s->K + (s->K - 1) - (t - r)] * conv_in(s, r, c);
    return a;
}

void cpu_dn_conv_forward(float *y, const float *x, const float *hist, const float *w,
                         const int32_t *seq, int B, int T, int CD, int K) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const conv_seq s = conv_view(x, hist, w, seq, b, T, CD, K);
            float *yt = y + ((size_t)b * T + t) * CD;
            for (int c = 0; c < CD; c++) yt[c] = (float)silu(conv_pre(&s, t, c));
        }
}

/* one channel of one sequence: dx += (its rows), dhist (its K-1 rows before, or NULL) +=,
 * dw[c] (K, double) += */
static void conv_backward_channel(float *dx, float *dhist, double *dw, const float *dy,
                                  const conv_seq *s, int T, int c) {
    const int CD = s->CD, K = s->K;
    for (int t = 0; t < T; t++) {
        const double d = dy[(size_t)t * CD + c] * silu_grad(conv_pre(s, t, c));
        for (int r = conv_lo(s, t); r <= t; r++) {
            const int j = (K - 1) - (t - r);
            const float dxr = (float)(d * s->w[(size_t)c * K + j]);
            if (r >= 0) dx[(size_t)r * CD + c] += dxr;
            else if (dhist) dhist[(size_t)(K - 1 + r) * CD + c] += dxr;
            dw[j] += d * conv_in(s, r, c);
        }
    }
}

void cpu_dn_conv_backward(float *dx, float *dhist, float *dw, const float *dy, const float *x,
                          const float *hist, const float *w, const int32_t *seq, int B, int T,
                          int CD, int K) {
#pragma omp parallel for schedule(static)
    for (int c = 0; c < CD; c++) {
        double acc[16] = {0}; /* K <= 16 (HF's conv kernels are 4) */
        for (int b = 0; b < B; b++) {
            const conv_seq s = conv_view(x, hist, w, seq, b, T, CD, K);
            const size_t row = (size_t)b * T;
            float *dh = dhist ? dhist + (size_t)b * (K - 1) * CD : NULL;
            conv_backward_channel(dx + row * CD, dh, acc, dy + row * CD, &s, T, c);
        }
        if (dw)
            for (int j = 0; j < K; j++) dw[(size_t)c * K + j] += (float)acc[j];
    }
}

void cpu_dn_gates_forward(float *beta, float *g, const float *b, const float *a,
                          const float *A_log, const float *dt_bias, int N, int HV) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < HV; h++) {
            const size_t i = (size_t)n * HV + h;
            beta[i] = (float)sigmoid(b[i]);
            g[i] = (float)(-exp((double)A_log[h]) * softplus((double)a[i] + dt_bias[h]));
        }
}

void cpu_dn_gates_backward(float *db, float *da, float *dA_log, float *ddt_bias,
                           const float *dbeta, const float *dg, const float *b, const float *a,
                           const float *A_log, const float *dt_bias, int N, int HV) {
#pragma omp parallel for schedule(static)
    for (int h = 0; h < HV; h++) {
        double sa = 0, sd = 0;
        const double e = exp((double)A_log[h]);
        for (int n = 0; n < N; n++) {
            const size_t i = (size_t)n * HV + h;
            const double s = sigmoid(b[i]), u = (double)a[i] + dt_bias[h];
            const double dai = -(double)dg[i] * e * sigmoid(u); /* softplus' = sigmoid */
            db[i] += (float)(dbeta[i] * s * (1.0 - s));
            da[i] += (float)dai;
            sd += dai;
            sa += (double)dg[i] * -e * softplus(u); /* d g / d A_log = g */
        }
        if (dA_log) dA_log[h] += (float)sa;
        if (ddt_bias) ddt_bias[h] += (float)sd;
    }
}

void cpu_dn_silu_gate_forward(float *out, const float *x, const float *z, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = (float)(x[i] * silu(z[i]));
}

void cpu_dn_silu_gate_backward(float *dx, float *dz, const float *dout, const float *x,
                               const float *z, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        dx[i] += (float)(dout[i] * silu(z[i]));
        dz[i] += (float)((double)dout[i] * x[i] * silu_grad(z[i]));
    }
}
