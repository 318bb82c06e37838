/* gen_sample.c — the next token from a distribution (gen_sample.h). */
#include "generate/gen_sample.h"

#include <math.h>
#include <stdlib.h>

#include "common.h"

/* Candidate order: higher probability first, then lower id (a total order: ids are unique). */
static int before(const gen_cand *a, const gen_cand *b) {
    return a->p > b->p || (a->p == b->p && a->id < b->id);
}

static int by_order(const void *x, const void *y) {
    const gen_cand *a = x, *b = y;
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

static void swap(gen_cand *a, gen_cand *b) {
    gen_cand t = *a;
    *a = *b;
    *b = t;
}

/* Rearranges c (n) so that its first k elements are the k first in candidate order (in any
 * order): quickselect with a median-of-three pivot; expected O(n). */
static void select_first(gen_cand *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (before(&c[hi], &c[lo])) swap(&c[hi], &c[lo]);
        if (before(&c[mid], &c[lo])) swap(&c[mid], &c[lo]);
        if (before(&c[hi], &c[mid])) swap(&c[hi], &c[mid]);
        gen_cand pivot = c[mid];
        int i = lo, j = hi;
        while (i <= j) { /* Hoare partition: [lo, j] before-or-equal pivot, [i, hi] after */
            while (before(&c[i], &pivot)) i++;
            while (before(&pivot, &c[j])) j--;
            if (i <= j) swap(&c[i++], &c[j--]);
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else return;
    }
}

static int32_t argmax(const float *probs, int V) {
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (probs[i] > probs[best]) best = i;
    return best;
}

static double weight(float p, double inv_t) { return p > 0 ? pow(p, inv_t) : 0.0; }

/* Nucleus over the k candidates of cand (the top-k set, in any order): sorts only as far as the
 * prefix holding top_p of the weight reaches, selecting 64, then 256, 1024, ... more at a time (a
 * full sort of 50257 candidates costs more than a 124M-parameter decode step's attention).
 * Writes the kept weights to w and returns how many are kept; *kept = their sum. */
static int nucleus(gen_cand *cand, int k, double inv_t, double top_p, double *w, double *kept) {
    double need = 0.0, acc = 0.0;
    for (int i = 0; i < k; i++) need += weight(cand[i].p, inv_t);
    need *= top_p;
    int m = 0, sorted = 0, step = 64;
    while (m < k && (m == 0 || acc < need)) {
        if (m == sorted) {
            int hi = k - sorted > step ? sorted + step : k;
            if (hi < k) select_first(cand + sorted, k - sorted, hi - sorted);
            qsort(cand + sorted, (size_t)(hi - sorted), sizeof *cand, by_order);
            sorted = hi;
            step *= 4;
        }
        acc += w[m] = weight(cand[m].p, inv_t);
        m++;
    }
    *kept = acc;
    return m;
}

int32_t gen_pick(const float *probs, int V, const gen_sampling *s, uint64_t step, gen_cand *cand,
                 double *w) {
    if (s->temperature == 0.0) return argmax(probs, V);
    const double inv_t = 1.0 / s->temperature;
    int k = s->top_k > 0 && s->top_k < V ? (int)s->top_k : V;
    for (int i = 0; i < V; i++) cand[i] = (gen_cand){probs[i], i};
    if (k < V) select_first(cand, V, k);
    double total = 0.0;
    if (s->top_p < 1.0) {
        k = nucleus(cand, k, inv_t, s->top_p, w, &total);
    } else {
        qsort(cand, (size_t)k, sizeof *cand, by_order);
        for (int i = 0; i < k; i++) total += w[i] = weight(cand[i].p, inv_t);
    }
    double r = tsr_rand_uniform(s->seed, GEN_RAND_STREAM, step) * total, acc = 0.0;
    for (int i = 0; i < k; i++) {
        acc += w[i];
        if (r < acc) return cand[i].id;
    }
    return cand[0].id;
}
