/* cpu_softmax.c — softmax over the vocabulary fused with cross-entropy, fp32, CPU backend.
 * One row per loop iteration (parallel over rows); exponentials through the vectorisable
 * cpu_expf(), row sums in double. probs may alias logits (forward) and dlogits may alias probs
 * (backward): every row is read before the same row is written where it matters.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_internal.h"

/* probs[n,j] = exp(x_j - max) / sum_{l<V} exp(x_l - max) for j < V, 0 for V <= j < Vp;
 * losses[n] = log(sum) - (x_t - max) = -log probs[n,t], or 0 if t = targets[n] < 0.
 * losses (N), probs (N,Vp) (may be logits), logits (N,Vp), targets (N) */
void cpu_softmax_xent_forward(float *losses, float *probs, const float *logits,
                              const int32_t *targets, int N, int V, int Vp) {
#pragma omp parallel for schedule(static) if ((long)N * Vp >= 65536)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vp;
        float *p = probs + (size_t)n * Vp;
        const int32_t t = targets[n];
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < V; j++) mx = x[j] > mx ? x[j] : mx;
        const float xt = t >= 0 ? x[t] : 0.0f; /* read before p (maybe x) is overwritten */
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < V; j++) {
            float e = cpu_expf(x[j] - mx);
            p[j] = e;
            sum += e;
        }
        const float inv = (float)(1.0 / sum);
#pragma omp simd
        for (int j = 0; j < V; j++) p[j] *= inv;
        for (int j = V; j < Vp; j++) p[j] = 0.0f;
        losses[n] = t >= 0 ? (float)(log(sum) - ((double)xt - (double)mx)) : 0.0f;
    }
}

/* dlogits[n,j] = (probs[n,j] - [j == t]) * dlosses[n] for j < V; 0 for j >= V or t < 0. Writes.
 * dlogits (N,Vp) (may be probs), dlosses (N), probs (N,Vp), targets (N) */
void cpu_softmax_xent_backward(float *dlogits, const float *dlosses, const float *probs,
                               const int32_t *targets, int N, int V, int Vp) {
#pragma omp parallel for schedule(static) if ((long)N * Vp >= 65536)
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * Vp;
        float *d = dlogits + (size_t)n * Vp;
        const int32_t t = targets[n];
        if (t < 0) {
            for (int j = 0; j < Vp; j++) d[j] = 0.0f;
            continue;
        }
        const float dl = dlosses[n], pt = p[t]; /* pt read before d (maybe p) is overwritten */
#pragma omp simd
        for (int j = 0; j < V; j++) d[j] = p[j] * dl;
        d[t] = (pt - 1.0f) * dl;
        for (int j = V; j < Vp; j++) d[j] = 0.0f;
    }
}

/* out[n,j] = cap tanh(inp[n,j] / cap) for j < V (out may be inp); columns V..Vp-1 untouched */
void cpu_softcap_forward(float *out, const float *inp, int N, int V, int Vp, float cap) {
#pragma omp parallel for schedule(static) if ((long)N * Vp >= 65536)
    for (int n = 0; n < N; n++)
        for (int j = 0; j < V; j++) {
            const size_t k = (size_t)n * Vp + j;
            out[k] = cap * tanhf(inp[k] / cap);
        }
}

/* d[n,j] *= 1 - (out[n,j] / cap)^2 for j < V: tanh's derivative from the capped values */
void cpu_softcap_backward(float *d, const float *out, int N, int V, int Vp, float cap) {
#pragma omp parallel for schedule(static) if ((long)N * Vp >= 65536)
    for (int n = 0; n < N; n++)
        for (int j = 0; j < V; j++) {
            const size_t k = (size_t)n * Vp + j;
            const float t = out[k] / cap;
            d[k] *= 1.0f - t * t;
        }
}
