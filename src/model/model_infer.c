/* model_infer.c — inference for one sequence: the KV cache, the incremental forward over it
 * (the layers run in decoder.c's dec_kv_chunk), and the no-cache reference (model_forward over the
 * whole context) it is tested against.
 *
 * Dimensions as in kernels/ops.h (L, C, NH, KVH, hs, QKV, F, V, Vp); cap = positions the cache
 * holds; c = rows (positions) of one chunk of new tokens. The KV cache, per layer l and key/value
 * head g (grouped-query attention caches KVH heads, not NH):
 *   kt (L, KVH, hs, cap)  keys, transposed per head: kt[l][g][d][j] = k_j[g*hs + d]
 *   v  (L, KVH, cap, hs)  values:                     v[l][g][j][d]  = v_j[g*hs + d]
 * (the layouts cpu_attention.c packs a head into, so a score row and an output row are computed
 * with the same fmaf order as the training kernel's tiles; its attention_decode op).
 *
 * A forward of c new tokens at positions p0..p0+c-1 (p0 = kv->len) is model.c's forward restricted
 * to those rows: every op but attention is row-wise, so it is the same op on c rows; attention of
 * row p reads the cached keys and values of positions 0..p. Only the last row goes through the LM
 * head; a single row's matmuls use the backend's matrix-vector product (sgemv on the CPU).
 *
 * attn_mask = document (model.c): the fed tokens are cut into chunks that end at an eot_token, so
 * a chunk lies in one segment; a segment starting at position s = kv->seg sees positions s..p
 * only and its learned or rotary positions count from s, as in model_forward. A prompt without an
 * eot_token is one document; a completion after an end-of-text prompt starts a new one, as a
 * document after an eot_token does in training.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model.h"
#include "model/decoder.h"

size_t model_kv_bytes(const tsr_model *m, int cap) {
    return 2 * (size_t)m->L * (size_t)cap * (size_t)m->KVH * (size_t)m->hs * sizeof(float);
}

void model_kv_init(tsr_kv_cache *kv, const tsr_model *m, int cap, int chunk) {
    const tsr_ops *o = m->ops;
    size_t C = m->C, F = m->F, FW = m->FW, QKV = m->QKV, f = sizeof(float);
    if (cap < 1 || chunk < 1)
        tsr_die(TSR_EXIT_INTERNAL, "model_kv_init: cap %d and chunk %d must be >= 1", cap, chunk);
    memset(kv, 0, sizeof *kv);
    kv->cap = cap;
    kv->chunk = chunk < cap ? chunk : cap;
    kv->nthreads = omp_get_max_threads();
    size_t per = (size_t)m->L * cap * m->KVH * m->hs, n = (size_t)kv->chunk;
    kv->kt = o->alloc(per * f);
    kv->v = o->alloc(per * f);
    kv->x = o->alloc(n * C * f);
    kv->ln = o->alloc(n * C * f);
    kv->mean = o->alloc(n * f);
    kv->rstd = o->alloc(n * f);
    kv->qkv = o->alloc(n * QKV * f);
    if (m->cfg.qk_norm) {
        kv->qkvr = o->alloc(n * QKV * f);
        kv->qknr = o->alloc(n * (size_t)(m->NH + m->KVH) * f);
    }
    kv->atty = o->alloc(n * (size_t)m->QD * f);
    kv->proj = o->alloc(n * C * f);
    kv->fch = o->alloc(n * FW * f);
    kv->fchg = o->alloc(n * F * f);
    kv->att = o->alloc((size_t)kv->nthreads * cap * f);
    kv->logits = o->alloc((size_t)m->Vp * f);
    if (m->E) { /* the MoE layer's buffers for one chunk (4-byte elements, as tsr_acts') */
        const size_t E = m->E, K = m->K, FE = m->FE, S = m->S, nk = n * K;
        kv->moe.logits = o->alloc(n * E * f);
        kv->moe.probs = o->alloc(n * E * f);
        kv->moe.lse = o->alloc(n * f);
        kv->moe.wts = o->alloc(nk * f);
        kv->moe.xg = o->alloc(nk * C * f);
        kv->moe.h = o->alloc(nk * 2 * FE * f);
        kv->moe.hg = o->alloc(nk * FE * f);
        kv->moe.y = o->alloc(nk * C * f);
        if (S) {
            kv->moe.sh = o->alloc(n * 2 * S * f);
            kv->moe.shg = o->alloc(n * S * f);
            kv->moe.shout = o->alloc(n * C * f);
        }
        kv->moe.stats = o->alloc(2 * f);
        kv->moe.idx = o->alloc(nk * f);
        kv->moe.rows = o->alloc(nk * f);
        kv->moe.slot = o->alloc(nk * f);
        kv->moe.offs = o->alloc((E + 1) * f);
    }
}

void model_kv_free(tsr_kv_cache *kv, const tsr_model *m) {
    float **bufs[] = {&kv->kt,   &kv->v,    &kv->x,    &kv->ln,  &kv->mean, &kv->rstd, &kv->qkv,
                      &kv->atty, &kv->proj, &kv->fch, &kv->fchg, &kv->att,  &kv->logits,
                      &kv->qkvr, &kv->qknr,
                      &kv->moe.logits, &kv->moe.probs, &kv->moe.lse, &kv->moe.wts, &kv->moe.xg,
                      &kv->moe.h, &kv->moe.hg, &kv->moe.y, &kv->moe.sh, &kv->moe.shg,
                      &kv->moe.shout, &kv->moe.stats};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (*bufs[i]) m->ops->free(*bufs[i]);
        *bufs[i] = NULL;
    }
    int32_t **ibufs[] = {&kv->moe.idx, &kv->moe.rows, &kv->moe.slot, &kv->moe.offs};
    for (size_t i = 0; i < sizeof ibufs / sizeof ibufs[0]; i++) {
        if (*ibufs[i]) m->ops->free(*ibufs[i]);
        *ibufs[i] = NULL;
    }
}

/* The decoder's parameter source: the weights in params (a decode step computes no gradients). */
static void infer_get(void *ctx, int u, int backward, const void **w, float **g) {
    const tsr_model *m = ctx;
    size_t off[TSR_P_COUNT];
    (void)backward, (void)g;
    dec_unit_offsets(m, u, off);
    for (int i = 0; i < TSR_P_COUNT; i++)
        if (off[i] != SIZE_MAX) w[i] = m->params + off[i];
}

void model_infer_forward(const tsr_model *m, tsr_kv_cache *kv, const int32_t *tokens, int n,
                         float *probs) {
    const int learned = m->params_info[TSR_P_WPE].numel > 0;
    if (n < 1 || kv->len + n > kv->cap || (learned && kv->len + n > m->maxT))
        tsr_die(TSR_EXIT_INTERNAL,
                "model_infer_forward: %d tokens at position %d exceed the cache (%d positions)%s",
                n, kv->len, kv->cap, learned ? " or the position table" : "");
    const int doc = m->cfg.attn_mask == TSR_MASK_DOCUMENT;
    const tsr_decoder d = {.m = m, .be = &m->be, .params = {(void *)m, infer_get, NULL},
                           .slopes = m->alibi_slopes, .rope = m->rope_freqs, .lora = m->lora};
    for (int s = 0; s < n;) {
        int c = n - s < kv->chunk ? n - s : kv->chunk;
        if (doc) /* end the chunk at an eot_token: the next position starts a segment */
            for (int i = 0; i < c; i++)
                if (tokens[s + i] == m->cfg.eot_token) {
                    c = i + 1;
                    break;
                }
        dec_kv_chunk(&d, kv, tokens + s, c, s + c == n ? probs : NULL);
        if (doc && tokens[s + c - 1] == m->cfg.eot_token) kv->seg = kv->len;
        s += c;
    }
}

const float *model_forward_last(tsr_model *m, const int32_t *tokens, int n) {
    tsr_acts *a = &m->acts;
    const int T_alloc = a->T;
    if (n < 1 || n > T_alloc || a->B < 1)
        tsr_die(TSR_EXIT_INTERNAL, "model_forward_last: %d tokens, activations for 1x%d", n,
                T_alloc);
    int32_t *targets = tsr_malloc((size_t)n * sizeof *targets);
    for (int i = 0; i < n; i++) targets[i] = -1; /* no loss: only the probabilities */
    /* model_forward derives every stride from the T it is given, so buffers allocated for T_alloc
     * hold any shorter T; its check wants T == acts.T, so acts.T says n during the call */
    a->T = n;
    model_forward(m, tokens, targets, 1, n);
    a->T = T_alloc;
    free(targets);
    return a->probs + (size_t)(n - 1) * m->Vp;
}
