/* sample.c — text from the trained model: top-k sampling with temperature, on rank 0 (on every
 * rank under zero3 / hsdp, whose forwards gather; rank 0 prints).
 *
 * No KV cache (that is `tessera generate`'s job): each new token reruns the forward pass over a
 * window of the last T tokens, padded at the end. Causal attention makes position len-1 depend only
 * on the tokens before it, so the padding never leaks in. Fine for demo-sized models. The pick is
 * gen_pick's (generate/gen_sample.h, top_p = 1), the one `tessera generate` uses. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "generate/gen_sample.h"
#include "train/trainer.h"

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
        const float *probs = m->acts.probs + (size_t)(w - 1) * m->Vp;
        ctx[len++] = out[s] = gen_pick(probs, V, &how, (uint64_t)s, c, wts);
    }
    free(ctx), free(win), free(tg), free(c), free(wts);
    return n_new;
}
