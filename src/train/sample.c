/* sample.c — text from the trained model: top-k sampling with temperature, on rank 0 (on every
 * rank under zero3 / hsdp, whose forwards gather, and under context parallelism, whose forwards
 * go round the ring; rank 0 prints).
 *
 * No KV cache (that is `tessera generate`'s job): each new token reruns the forward pass over a
 * window of the last T tokens, padded at the end. Causal attention makes position len-1 depend only
 * on the tokens before it, so the padding never leaks in. Fine for demo-sized models. The pick is
 * gen_pick's (generate/gen_sample.h, top_p = 1), the one `tessera generate` uses. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "generate/gen_sample.h"
#include "model/model_ring.h"
#include "model/model_tp.h"
#include "train/trainer.h"

/* tensor parallelism: the next token from position p's probabilities, every rank's share of the
 * vocabulary gathered over its tensor group (each rank picks the same: the same row, seed) */
static int32_t pick_split(const tsr_model *m, int p, const gen_sampling *how, int s, gen_cand *c,
                          double *wts) {
    const tsr_tp *tp = m->tp;
    float *row = tsr_malloc((size_t)m->Vp * tp->T * sizeof *row);
    dist_group_allgather(tp->group, m->acts.probs + (size_t)p * m->Vp, row,
                         (size_t)m->Vp * sizeof *row);
    const int32_t next = gen_pick(row, m->V, how, (uint64_t)s, c, wts);
    free(row);
    return next;
}

/* The next token from the probabilities of window position p: this rank's rows, or under context
 * parallelism those of the rank whose share holds p, which picks and tells the group (each rank
 * ran the same forward; the pick's randomness is seeded by the step s alone) */
static int32_t pick_at(const tsr_model *m, int T, int p, const gen_sampling *how, int s,
                       gen_cand *c, double *wts) {
    const tsr_ring *g = m->ring;
    if (m->tp) return pick_split(m, p, how, s, c, wts);
    int t = p;
    const int owner = g ? ring_owner(g->N, T, p, &t) : 0;
    int32_t mine = -1;
    if (!g || g->r == owner) mine = gen_pick(m->acts.probs + (size_t)t * m->Vp, m->V, how,
                                             (uint64_t)s, c, wts);
    if (!g) return mine;
    int32_t *all = tsr_malloc((size_t)g->N * sizeof *all);
    g->comm.gather(g->comm.ctx, &mine, all, sizeof mine);
    mine = all[owner];
    free(all);
    return mine;
}

int trainer_sample(tsr_trainer *t, const int32_t *prompt, int n_prompt, int n_new, uint64_t seed,
                   int32_t *out) {
    tsr_model *m = &t->model;
    int T = t->T, V = m->V;
    int32_t *ctx = tsr_malloc((size_t)(n_prompt + n_new) * sizeof *ctx);
    int32_t *win = tsr_malloc((size_t)T * sizeof *win), *tg = tsr_malloc((size_t)T * sizeof *tg);
    gen_cand *c = tsr_malloc((size_t)V * sizeof *c);
    double *wts = tsr_malloc((size_t)V * sizeof *wts);
    const gen_sampling how = {.temperature = t->cfg.sample.temperature,
                              .top_k = t->cfg.sample.top_k, .top_p = 1.0, .seed = seed};
    memcpy(ctx, prompt, (size_t)n_prompt * sizeof *ctx);
    for (int i = 0; i < T; i++) tg[i] = -1; /* no loss: only the probabilities are wanted */
    int len = n_prompt;
    for (int s = 0; s < n_new; s++) {
        int start = len > T ? len - T : 0, w = len - start;
        memcpy(win, ctx + start, (size_t)w * sizeof *win);
        for (int i = w; i < T; i++) win[i] = 0;
        model_forward(m, win, tg, 1, T);
        ctx[len++] = out[s] = pick_at(m, T, w - 1, &how, s, c, wts);
    }
    free(ctx), free(win), free(tg), free(c), free(wts);
    return n_new;
}
