/* cpu_moe.c — the fp32 CPU ops of the mixture-of-experts layer (docs/moe.md): routing (softmax,
 * top-k, grouping by expert, the auxiliary losses), the gather of rows into expert order and the
 * weighted combine back, the experts' grouped matmuls, and the backward of each. ops.h states
 * each op's contract, orders of summation included.
 *
 * Vocabulary: N rows, E experts, K experts per row, NK = N*K assignments (a = n*K + j), C
 * channels; grouped row r = slot[a] holds assignment a = rows[r]; expert e owns the grouped rows
 * offs[e] .. offs[e+1]-1.
 *
 * File-wide conventions (those of cpu_ops.c): backward ops accumulate (+=) unless ops.h says
 * WRITES (moe_combine_backward, moe_router_backward); loops are OpenMP-parallel over rows, every
 * output element written by one thread in a fixed order, and the few reductions over rows
 * (routing's grouping and its statistics) run on one thread in row order, so results do not
 * depend on the thread count. The grouped matmuls call the table's matmul_forward and
 * matmul_backward on each expert's rows, so an expert's rows have the bits of a matmul of those
 * rows alone.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu_internal.h"
#include "ops.h"

/* ---- routing --------------------------------------------------------------------------------- */

/* One row: p (E) = softmax(x) with max subtraction, the sum in double (cpu_softmax.c's way);
 * returns lse = max + log(sum). p may not alias x. */
static float route_softmax(float *p, const float *x, int E) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int e = 0; e < E; e++) mx = x[e] > mx ? x[e] : mx;
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int e = 0; e < E; e++) {
        const float v = cpu_expf(x[e] - mx);
        p[e] = v;
        sum += v;
    }
    const float inv = (float)(1.0 / sum);
#pragma omp simd
    for (int e = 0; e < E; e++) p[e] *= inv;
    return (float)((double)mx + log(sum));
}

/* One row: idx (K) = the K experts of highest p in descending order, ties to the lower index
 * (a strict > over ascending e keeps the first of equals; the first expert not yet chosen seeds
 * each pick, so idx stays valid, and distinct, even for NaN). wts (K) = p[idx], divided by
 * their sum (in double, j in order) when norm. */
static void route_topk(int32_t *idx, float *wts, const float *p, int E, int K, int norm) {
    double s = 0.0;
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= idx[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        idx[j] = best;
        wts[j] = p[best];
        s += p[best];
    }
    if (norm)
        for (int j = 0; j < K; j++) wts[j] = (float)((double)wts[j] / s);
}

/* The stable counting sort of the NK assignments by expert: offs (E+1), slot (NK) and its
 * inverse rows (NK). offs[e+1] first counts expert e; after the prefix sum offs[e] is e's first
 * row and serves as its cursor (each placement moves it on by one, so it ends at e's end =
 * offs[e+1]'s start); a shift by one restores the starts. One thread, a ascending: stable.
 * (cpu_internal.h; DeepSeek's router, cpu_moe_route.c, groups its choice with it too) */
void cpu_moe_group(int32_t *offs, int32_t *rows, int32_t *slot, const int32_t *idx, int NK,
                   int E) {
    memset(offs, 0, (size_t)(E + 1) * sizeof *offs);
    for (int a = 0; a < NK; a++) offs[idx[a] + 1]++;
    for (int e = 0; e < E; e++) offs[e + 1] += offs[e];
    for (int a = 0; a < NK; a++) {
        const int32_t r = offs[idx[a]]++;
        slot[a] = r;
        rows[r] = a;
    }
    for (int e = E; e > 0; e--) offs[e] = offs[e - 1];
    offs[0] = 0;
}

/* stats[0] = aux = E * sum_e (count_e / NK) * (sum_n probs[n,e] / N), stats[1] = z =
 * sum_n lse[n]^2 / N; every sum in double, one thread, n ascending then e ascending
 * (cpu_internal.h: DeepSeek's router passes its normalised scores as probs) */
void cpu_moe_stats(float *stats, const float *probs, const float *lse, const int32_t *offs,
                   int N, int E, int K) {
    double *colsum = tsr_malloc((size_t)E * sizeof *colsum);
    for (int e = 0; e < E; e++) colsum[e] = 0.0;
    double z = 0.0;
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * E;
        for (int e = 0; e < E; e++) colsum[e] += p[e];
        z += (double)lse[n] * lse[n];
    }
    double aux = 0.0;
    for (int e = 0; e < E; e++) aux += (double)(offs[e + 1] - offs[e]) * colsum[e];
    stats[0] = (float)(aux * E / ((double)N * K * N));
    stats[1] = (float)(z / N);
    free(colsum);
}

/* probs (N,E), lse (N), idx (N,K), wts (N,K), offs (E+1), rows (NK), slot (NK), stats (2);
 * logits (N,E). N may be 0 (offs all 0, stats 0). */
void cpu_moe_route(float *probs, float *lse, int32_t *idx, float *wts, int32_t *offs,
                   int32_t *rows, int32_t *slot, float *stats, const float *logits, int N, int E,
                   int K, int norm) {
#pragma omp parallel for schedule(static) if ((long)N * E * K >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *p = probs + (size_t)n * E;
        lse[n] = route_softmax(p, logits + (size_t)n * E, E);
        route_topk(idx + (size_t)n * K, wts + (size_t)n * K, p, E, K, norm);
    }
    cpu_moe_group(offs, rows, slot, idx, N * K, E);
    if (N > 0) {
        cpu_moe_stats(stats, probs, lse, offs, N, E, K);
    } else {
        stats[0] = stats[1] = 0.0f;
    }
}

/* ---- gather and combine ---------------------------------------------------------------------- */

/* xg[r] = x[rows[r] / K].  xg (NK,C), x (N,C), rows (NK) */
void cpu_moe_gather(float *xg, const float *x, const int32_t *rows, int N, int K, int C) {
    const long NK = (long)N * K;
#pragma omp parallel for schedule(static) if (NK * C >= CPU_PAR_MIN)
    for (long r = 0; r < NK; r++)
        memcpy(xg + (size_t)r * C, x + (size_t)(rows[r] / K) * C, (size_t)C * sizeof *xg);
}

/* dx[n] += dxg[slot[n*K + j]] for j = 0..K-1 in order.  dx (N,C), dxg (NK,C), slot (NK) */
void cpu_moe_gather_backward(float *dx, const float *dxg, const int32_t *slot, int N, int K,
                             int C) {
#pragma omp parallel for schedule(static) if ((long)N * K * C >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *d = dx + (size_t)n * C;
        for (int j = 0; j < K; j++) {
            const float *g = dxg + (size_t)slot[(size_t)n * K + j] * C;
#pragma omp simd
            for (int c = 0; c < C; c++) d[c] += g[c];
        }
    }
}

/* out[n] = base[n] (or 0), then += wts[n,j] * y[slot[n*K + j]] for j in order. out may be base.
 * out (N,C), base (N,C) or NULL, y (NK,C), wts (N,K), slot (NK) */
void cpu_moe_combine(float *out, const float *base, const float *y, const float *wts,
                     const int32_t *slot, int N, int K, int C) {
#pragma omp parallel for schedule(static) if ((long)N * K * C >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
        if (!base) memset(o, 0, (size_t)C * sizeof *o);
        else if (base != out) memcpy(o, base + (size_t)n * C, (size_t)C * sizeof *o);
        for (int j = 0; j < K; j++) {
            const float w = wts[(size_t)n * K + j];
            const float *yr = y + (size_t)slot[(size_t)n * K + j] * C;
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] += w * yr[c];
        }
    }
}

/* WRITES dy[slot[n*K+j]] = wts[n,j] * dout[n] and dwts[n,j] = dot(dout[n], y[slot[n*K+j]]) (in
 * double). dy (NK,C), dwts (N,K), dout (N,C), y (NK,C), wts (N,K), slot (NK): each grouped row
 * belongs to one n, so the rows a thread writes are its own. */
void cpu_moe_combine_backward(float *dy, float *dwts, const float *dout, const float *y,
                              const float *wts, const int32_t *slot, int N, int K, int C) {
#pragma omp parallel for schedule(static) if ((long)N * K * C >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *g = dout + (size_t)n * C;
        for (int j = 0; j < K; j++) {
            const size_t a = (size_t)n * K + j, r = (size_t)slot[a];
            const float w = wts[a], *yr = y + r * C;
            float *d = dy + r * C;
            double dot = 0.0;
#pragma omp simd reduction(+ : dot)
            for (int c = 0; c < C; c++) {
                d[c] = w * g[c];
                dot += (double)g[c] * yr[c];
            }
            dwts[a] = (float)dot;
        }
    }
}

/* ---- the experts' grouped matmuls ------------------------------------------------------------ */

/* For each expert with rows: out[offs[e]..] = inp[offs[e]..] @ w[e]^T, by matmul_forward.
 * out (NK,OC), inp (NK,IC), w (E,OC,IC), offs (E+1) */
void cpu_moe_matmul_forward(float *out, const float *inp, const float *w, const int32_t *offs,
                            int E, int NK, int IC, int OC) {
    (void)NK; /* = offs[E] */
    for (int e = 0; e < E; e++) {
        const int r0 = offs[e], cnt = offs[e + 1] - r0;
        if (cnt <= 0) continue;
        tsr_cpu_ops.matmul_forward(out + (size_t)r0 * OC, inp + (size_t)r0 * IC,
                                   w + (size_t)e * OC * IC, NULL, cnt, IC, OC);
    }
}

/* For each expert with rows: matmul_backward of its rows: dinp[offs[e]..] += dout @ w[e],
 * dw[e] += dout^T @ inp. dinp (NK,IC), dw (E,OC,IC) or NULL (frozen: skipped), dout (NK,OC),
 * inp (NK,IC), w (E,OC,IC) */
void cpu_moe_matmul_backward(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const int32_t *offs, int E, int NK, int IC, int OC) {
    (void)NK; /* = offs[E] */
    for (int e = 0; e < E; e++) {
        const int r0 = offs[e], cnt = offs[e + 1] - r0;
        if (cnt <= 0) continue;
        const size_t we = (size_t)e * OC * IC;
        tsr_cpu_ops.matmul_backward(dinp + (size_t)r0 * IC, dw ? dw + we : NULL, NULL,
                                    dout + (size_t)r0 * OC, inp + (size_t)r0 * IC, w + we, cnt, IC,
                                    OC);
    }
}

/* ---- gpt-oss's experts: biases and the clamped unit ----------------------------------------- */

/* For each expert: out[r] += b[e] over its rows r = offs[e]..offs[e+1]-1.  out (NK,OC),
 * b (E,OC) */
void cpu_moe_bias_forward(float *out, const float *b, const int32_t *offs, int E, int OC) {
    for (int e = 0; e < E; e++) {
        const float *be = b + (size_t)e * OC;
        const long r0 = offs[e], r1 = offs[e + 1];
#pragma omp parallel for schedule(static) if ((r1 - r0) * OC >= CPU_PAR_MIN)
        for (long r = r0; r < r1; r++) {
            float *o = out + (size_t)r * OC;
#pragma omp simd
            for (int c = 0; c < OC; c++) o[c] += be[c];
        }
    }
}

/* db[e] += the sum of dout's rows of expert e (in double, rows ascending; each column by one
 * thread).  db (E,OC), dout (NK,OC) */
void cpu_moe_bias_backward(float *db, const float *dout, const int32_t *offs, int E, int OC) {
    for (int e = 0; e < E; e++) {
        const long r0 = offs[e], r1 = offs[e + 1];
        float *d = db + (size_t)e * OC;
#pragma omp parallel for schedule(static) if ((r1 - r0) * OC >= CPU_PAR_MIN)
        for (int c = 0; c < OC; c++) {
            double s = 0.0;
            for (long r = r0; r < r1; r++) s += dout[(size_t)r * OC + c];
            d[c] = (float)((double)d[c] + s);
        }
    }
}

/* out[n,f] = (u + 1) g sigmoid(alpha g), g = min(gate, limit), u = clamp(up, -limit, limit);
 * gate = inp[n,f], up = inp[n,F+f].  out (N,F), inp (N,2F) */
void cpu_moe_gptoss_forward(float *out, const float *inp, int N, int F, float alpha,
                            float limit) {
#pragma omp parallel for schedule(static) if ((long)N * F >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *gp = inp + (size_t)n * 2 * F, *up = gp + F;
        float *o = out + (size_t)n * F;
#pragma omp simd
        for (int f = 0; f < F; f++) {
            const float g = fminf(gp[f], limit), u = fminf(fmaxf(up[f], -limit), limit);
            o[f] = (u + 1.0f) * (g / (1.0f + cpu_expf(-alpha * g)));
        }
    }
}

/* With s = sigmoid(alpha g): dgate += dout (u + 1) (s + alpha g s (1 - s)) where gate <= limit,
 * dup += dout g s where -limit <= up <= limit (torch.clamp's gradient: 0 outside, 1 on the
 * bounds).  dinp (N,2F) +=, inp (N,2F), dout (N,F) */
void cpu_moe_gptoss_backward(float *dinp, const float *inp, const float *dout, int N, int F,
                             float alpha, float limit) {
#pragma omp parallel for schedule(static) if ((long)N * F >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *gp = inp + (size_t)n * 2 * F, *up = gp + F, *d = dout + (size_t)n * F;
        float *dg = dinp + (size_t)n * 2 * F, *du = dg + F;
#pragma omp simd
        for (int f = 0; f < F; f++) {
            const float g = fminf(gp[f], limit), u = fminf(fmaxf(up[f], -limit), limit);
            const float s = 1.0f / (1.0f + cpu_expf(-alpha * g));
            const float dglu = s + alpha * g * s * (1.0f - s);
            dg[f] += gp[f] <= limit ? d[f] * (u + 1.0f) * dglu : 0.0f;
            du[f] += up[f] >= -limit && up[f] <= limit ? d[f] * g * s : 0.0f;
        }
    }
}

/* ---- router backward ------------------------------------------------------------------------- */

/* One row of dlogits (E), written: first dp (E) into d, rounded once from double: the aux term
 * cst * count_e for every e (cst = aux_w E / (NK N)) plus, for e = idx[j], the weights' gradient
 * g_j (norm: (dwts[j] - sum_j' dwts[j'] wts[j']) / s, s the sum of the K probs; else dwts[j]);
 * then d = p * (dp - sum_e p dp) + zc * p, zc = z_w 2 lse / N. dwts, wts, idx (K), p (E). */
static void router_row_backward(float *d, const float *dwts, const float *p, float lse,
                                const int32_t *idx, const float *wts, const int32_t *offs, int E,
                                int K, int norm, double cst, double zscale) {
    for (int e = 0; e < E; e++) d[e] = (float)(cst * (offs[e + 1] - offs[e]));
    double dot = 0.0, s = 0.0;
    if (norm)
        for (int j = 0; j < K; j++) {
            dot += (double)dwts[j] * wts[j];
            s += p[idx[j]];
        }
    for (int j = 0; j < K; j++) {
        const int e = idx[j];
        const double g = norm ? ((double)dwts[j] - dot) / s : (double)dwts[j];
        d[e] = (float)(cst * (offs[e + 1] - offs[e]) + g);
    }
    double sp = 0.0;
    for (int e = 0; e < E; e++) sp += (double)p[e] * d[e];
    const double zc = zscale * lse;
    for (int e = 0; e < E; e++) d[e] = (float)((double)p[e] * ((double)d[e] - sp + zc));
}

/* WRITES dlogits (N,E); dwts (N,K), probs (N,E), lse (N), idx (N,K), wts (N,K), offs (E+1) as
 * moe_route wrote them. */
void cpu_moe_router_backward(float *dlogits, const float *dwts, const float *probs,
                             const float *lse, const int32_t *idx, const float *wts,
                             const int32_t *offs, int N, int E, int K, int norm, float aux_w,
                             float z_w) {
    const double cst = N > 0 ? (double)aux_w * E / ((double)N * K * N) : 0.0;
    const double zscale = N > 0 ? 2.0 * z_w / N : 0.0;
#pragma omp parallel for schedule(static) if ((long)N * E * K >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const size_t nk = (size_t)n * K;
        router_row_backward(dlogits + (size_t)n * E, dwts + nk, probs + (size_t)n * E, lse[n],
                            idx + nk, wts + nk, offs, E, K, norm, cst, zscale);
    }
}

/* ---- the shared expert's gate (model.moe_shared_gate; ops.h moe_shgate_*) ------------------ */

static float shgate_dot(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return (float)s;
}

/* s_n = sigmoid(x[n] . w) */
static float gate_of(const float *x, const float *w, int n, int C) {
    return 1.0f / (1.0f + expf(-shgate_dot(x + (size_t)n * C, w, C)));
}

/* out[n] *= s_n (in place) */
void cpu_moe_shgate_forward(float *out, const float *x, const float *w, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float s = gate_of(x, w, n, C);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] *= s;
    }
}

/* dg[n] = (1 - s_n) shg[n] . dshg[n]; gw (or NULL: frozen) += sum_n dg[n] x[n] (rows in order) */
void cpu_moe_shgate_grad(float *dg, float *gw, const float *shg, const float *dshg,
                         const float *x, const float *w, int N, int S, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        dg[n] = (1.0f - gate_of(x, w, n, C)) *
                shgate_dot(shg + (size_t)n * S, dshg + (size_t)n * S, S);
    if (!gw) return;
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++) {
        double s = 0;
        for (int n = 0; n < N; n++) s += (double)dg[n] * x[(size_t)n * C + c];
        gw[c] += (float)s;
    }
}

/* dx[n] += dg[n] w */
void cpu_moe_shgate_dx(float *dx, const float *dg, const float *w, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) dx[(size_t)n * C + c] += dg[n] * w[c];
}
