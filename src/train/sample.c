/* sample.c — text from the trained model: top-k sampling with temperature, on rank 0.
 *
 * No KV cache (that is `tessera generate`'s job): each new token reruns the forward pass over a
 * window of the last T tokens, padded at the end. Causal attention makes position len-1 depend only
 * on the tokens before it, so the padding never leaks in. Fine for demo-sized models. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "train/trainer.h"

typedef struct cand { float p; int32_t id; } cand;

static int by_prob_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id - y->id; /* ties: lower id first, so the order is deterministic */
}

/* Picks a token from probs (V) with temperature and top-k; u is uniform in [0, 1). */
static int32_t pick(const float *probs, int V, double temperature, int64_t top_k, double u,
                    cand *c) {
    for (int i = 0; i < V; i++) c[i] = (cand){probs[i], i};
    qsort(c, (size_t)V, sizeof *c, by_prob_desc);
    int k = top_k > 0 && top_k < V ? (int)top_k : V;
    double total = 0.0;
    for (int i = 0; i < k; i++) total += c[i].p > 0 ? pow(c[i].p, 1.0 / temperature) : 0.0;
    double r = u * total, acc = 0.0;
    for (int i = 0; i < k; i++) {
        acc += c[i].p > 0 ? pow(c[i].p, 1.0 / temperature) : 0.0;
        if (r < acc) return c[i].id;
    }
    return c[0].id;
}

int trainer_sample(tsr_trainer *t, const int32_t *prompt, int n_prompt, int n_new, uint64_t seed,
                   int32_t *out) {
    tsr_model *m = &t->model;
    int T = t->T, V = m->V;
    int32_t *ctx = tsr_malloc((size_t)(n_prompt + n_new) * sizeof *ctx);
    int32_t *win = tsr_malloc((size_t)T * sizeof *win), *tg = tsr_malloc((size_t)T * sizeof *tg);
    cand *c = tsr_malloc((size_t)V * sizeof *c);
    memcpy(ctx, prompt, (size_t)n_prompt * sizeof *ctx);
    for (int i = 0; i < T; i++) tg[i] = -1; /* no loss: only the probabilities are wanted */
    int len = n_prompt;
    for (int s = 0; s < n_new; s++) {
        int start = len > T ? len - T : 0, w = len - start;
        memcpy(win, ctx + start, (size_t)w * sizeof *win);
        for (int i = w; i < T; i++) win[i] = 0;
        model_forward(m, win, tg, 1, T);
        const float *probs = m->acts.probs + (size_t)(w - 1) * m->Vp;
        double u = tsr_rand_uniform(seed, 0x5a3317e, (uint64_t)s);
        ctx[len++] = out[s] = pick(probs, V, t->cfg.sample.temperature, t->cfg.sample.top_k, u, c);
    }
    free(ctx), free(win), free(tg), free(c);
    return n_new;
}
