/* cpu_moe_route.c — DeepSeekMoE's router and its backward, fp32 (cpu_moe_route.h). One task per
 * row for the scores, the choice and the weights; the grouping by expert and the statistics on
 * one thread in row order (cpu_moe.c's), so nothing depends on the thread count.
 */
#include "cpu_moe_route.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu_internal.h"

/* One row's scores: s (E) = sigmoid(x) or softmax(x) (the sum in double); returns the logsumexp
 * of x (in double, rounded) */
static float row_scores(float *s, const float *x, int E, int sigmoid) {
    float mx = -INFINITY;
    for (int e = 0; e < E; e++) mx = x[e] > mx ? x[e] : mx;
    double sum = 0.0;
    for (int e = 0; e < E; e++) {
        const float v = cpu_expf(x[e] - mx);
        sum += v;
        s[e] = sigmoid ? 1.0f / (1.0f + cpu_expf(-x[e])) : v;
    }
    if (!sigmoid)
        for (int e = 0; e < E; e++) s[e] = (float)(s[e] / sum);
    return (float)((double)mx + log(sum));
}

/* the best (highest c, the lower index on ties) of experts [a, b) not yet taken in idx (n of
 * them) and allowed by ok (NULL: all), or -1 */
static int best_of(const float *c, int a, int b, const int32_t *idx, int n,
                   const unsigned char *ok) {
    int best = -1;
    for (int e = a; e < b; e++) {
        int taken = ok && !ok[e];
        for (int i = 0; i < n; i++) taken |= idx[i] == e;
        if (!taken && (best < 0 || c[e] > c[best])) best = e;
    }
    return best;
}

/* a group's score: its best c, or with noaux_tc the sum of its two best */
static float group_score(const float *c, int a, int b, int two) {
    int32_t top[2];
    top[0] = best_of(c, a, b, NULL, 0, NULL);
    if (!two) return c[top[0]];
    top[1] = best_of(c, a, b, top, 1, NULL);
    return c[top[0]] + c[top[1]];
}

/* ok (E): the experts of the topk_group groups of highest score (ties to the lower group) */
static void allowed_groups(unsigned char *ok, const float *c, int E, const tsr_moe_router *r) {
    const int G = r->n_group, per = E / G;
    float gs[4096];
    int32_t chosen[4096];
    for (int g = 0; g < G; g++) gs[g] = group_score(c, g * per, (g + 1) * per, r->method == 2);
    for (int j = 0; j < r->topk_group; j++) chosen[j] = best_of(gs, 0, G, chosen, j, NULL);
    memset(ok, 0, (size_t)E);
    for (int j = 0; j < r->topk_group; j++) memset(ok + (size_t)chosen[j] * per, 1, (size_t)per);
}

/* one row: the choice c = s (+ bias), its groups, the K best, their weights */
static void route_row(int32_t *idx, float *wts, float *c, unsigned char *ok, const float *s,
                      int E, int K, const tsr_moe_router *r) {
    for (int e = 0; e < E; e++) c[e] = r->bias ? s[e] + r->bias[e] : s[e];
    const int grouped = r->method > 0 && r->n_group > 1;
    if (grouped) allowed_groups(ok, c, E, r);
    double sum = 0.0;
    for (int j = 0; j < K; j++) {
        idx[j] = best_of(c, 0, E, idx, j, grouped ? ok : NULL);
        wts[j] = s[idx[j]];
        sum += wts[j];
    }
    const double div = r->norm ? sum + (r->sigmoid ? 1e-20 : 0.0) : 1.0;
    for (int j = 0; j < K; j++) wts[j] = (float)((double)wts[j] / div * r->scale);
}

/* the aux loss's scores: sigmoid's normalised per row (q = s / sum s) into q, else probs */
static const float *aux_scores(float *q, const float *probs, int N, int E, int sigmoid) {
    if (!sigmoid) return probs;
    for (int n = 0; n < N; n++) {
        const float *s = probs + (size_t)n * E;
        double sum = 0.0;
        for (int e = 0; e < E; e++) sum += s[e];
        for (int e = 0; e < E; e++) q[(size_t)n * E + e] = (float)(s[e] / sum);
    }
    return q;
}

void cpu_moe_route_ds(float *probs, float *lse, int32_t *idx, float *wts, int32_t *offs,
                      int32_t *rows, int32_t *slot, float *stats, const float *logits, int N,
                      int E, int K, const tsr_moe_router *r) {
    if (r->n_group < 1 || E % r->n_group || E / r->n_group > 4096 || r->n_group > 4096)
        tsr_die(TSR_EXIT_INTERNAL, "cpu moe_route_ds: %d experts in %d groups", E, r->n_group);
#pragma omp parallel if ((long)N * E * K >= CPU_PAR_MIN)
    {
        float *c = tsr_malloc((size_t)E * sizeof *c);
        unsigned char *ok = tsr_malloc((size_t)E);
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            float *s = probs + (size_t)n * E;
            lse[n] = row_scores(s, logits + (size_t)n * E, E, r->sigmoid);
            route_row(idx + (size_t)n * K, wts + (size_t)n * K, c, ok, s, E, K, r);
        }
        free(ok);
        free(c);
    }
    cpu_moe_group(offs, rows, slot, idx, N * K, E);
    if (N == 0) {
        stats[0] = stats[1] = 0.0f;
        return;
    }
    float *q = r->sigmoid ? tsr_malloc((size_t)N * E * sizeof *q) : NULL;
    cpu_moe_stats(stats, aux_scores(q, probs, N, E, r->sigmoid), lse, offs, N, E, K);
    free(q);
}

/* One row of dlogits (E), written. ds (E) the scores' gradient, in double: the weights' through
 * the normalisation and the scale (norm: (scale dwts[j] - sum_k dwts[k] wts[k]) / S, S the sum of
 * the K scores (+ 1e-20 with sigmoid); else scale dwts[j]) at e = idx[j], plus the aux term
 * cst count_e on q (softmax: q = s; sigmoid: through q = s / sum s); then softmax's
 * s (ds - sum s ds) + zc s, or sigmoid's ds s (1 - s). */
static void ds_row_backward(float *d, double *ds, const float *dwts, const float *s, float lse,
                            const int32_t *idx, const float *wts, const int32_t *offs, int E,
                            int K, const tsr_moe_router *r, double cst, double zscale) {
    double sum = 0.0, dot = 0.0, S = 0.0;
    for (int e = 0; e < E; e++) ds[e] = cst * (offs[e + 1] - offs[e]), sum += s[e];
    if (r->sigmoid) { /* the aux term through q = s / sum: (dq - sum dq q) / sum */
        double dq = 0.0;
        for (int e = 0; e < E; e++) dq += ds[e] * (s[e] / sum);
        for (int e = 0; e < E; e++) ds[e] = (ds[e] - dq) / sum;
    }
    for (int j = 0; j < K; j++) dot += (double)dwts[j] * wts[j], S += s[idx[j]];
    S += r->sigmoid ? 1e-20 : 0.0;
    for (int j = 0; j < K; j++)
        ds[idx[j]] += r->norm ? ((double)r->scale * dwts[j] - dot) / S : (double)r->scale * dwts[j];
    if (r->sigmoid) {
        for (int e = 0; e < E; e++) d[e] = (float)(ds[e] * s[e] * (1.0 - s[e]));
        return;
    }
    double sp = 0.0;
    for (int e = 0; e < E; e++) sp += (double)s[e] * ds[e];
    for (int e = 0; e < E; e++) d[e] = (float)((double)s[e] * (ds[e] - sp + zscale * lse));
}

void cpu_moe_router_ds_backward(float *dlogits, const float *dwts, const float *probs,
                                const float *lse, const int32_t *idx, const float *wts,
                                const int32_t *offs, int N, int E, int K,
                                const tsr_moe_router *r, float aux_w, float z_w) {
    const double cst = N > 0 ? (double)aux_w * E / ((double)N * K * N) : 0.0;
    const double zscale = N > 0 && !r->sigmoid ? 2.0 * z_w / N : 0.0;
#pragma omp parallel if ((long)N * E * K >= CPU_PAR_MIN)
    {
        double *ds = tsr_malloc((size_t)E * sizeof *ds);
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const size_t nk = (size_t)n * K;
            ds_row_backward(dlogits + (size_t)n * E, ds, dwts + nk, probs + (size_t)n * E, lse[n],
                            idx + nk, wts + nk, offs, E, K, r, cst, zscale);
        }
        free(ds);
    }
}
