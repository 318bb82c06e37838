/* model_infer.c — inference: the KV cache of one sequence, the incremental forward over it (the
 * layers run in decoder_kv.c's dec_kv_chunk), and the no-cache reference (model_forward over the
 * whole context) it is tested against; the caches of many sequences decoded together (batched
 * generation: tsr_kv_slots, the layers in decoder_kv.c's dec_kv_slots).
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
#include "model/layer_kind.h"

int model_kv_layer_cap(const tsr_model *m, int l, int cap) {
    const int W = config_layer_window(&m->cfg, l);
    return W > 0 && W < cap ? W : cap;
}

/* The positions the attention layers keep in a context of cap, all together; with lcap and lofs
 * (LA) each layer's ring and its offset (floats of one sequence's kt or v) too. */
static size_t kv_layout(const tsr_model *m, int cap, int *lcap, size_t *lofs) {
    size_t n = 0;
    for (int l = 0; l < m->L; l++) {
        const int la = model_layer_slot(m, TSR_P_QKVW, l);
        if (la < 0) continue; /* a linear layer: a state, not keys and values */
        const int c = model_kv_layer_cap(m, l, cap);
        if (lcap) lcap[la] = c, lofs[la] = n * m->KVH * m->hs;
        n += (size_t)c;
    }
    return n;
}

/* kv's lcap and lofs for a context of cap; the floats of kt (or v) of one sequence */
static size_t kv_layout_alloc(tsr_kv_cache *kv, const tsr_model *m, int cap) {
    kv->lcap = tsr_calloc((size_t)m->LA + 1, sizeof *kv->lcap);
    kv->lofs = tsr_calloc((size_t)m->LA + 1, sizeof *kv->lofs);
    return kv_layout(m, cap, kv->lcap, kv->lofs) * m->KVH * m->hs;
}

/* one slot's compressed cache of an MLA layer: cap positions of the latent and the RoPE key */
static size_t mla_slot_elems(const tsr_model *m, int cap) {
    return (size_t)cap * (size_t)(m->kvr + m->dr);
}

size_t model_kv_bytes(const tsr_model *m, int cap) {
    return (2 * kv_layout(m, cap, NULL, NULL) * (size_t)m->KVH * (size_t)m->hs +
            (size_t)m->LX * mla_slot_elems(m, cap)) * sizeof(float);
}

/* a buffer on be of n elements of elem bytes (exit 3 naming it when there is no room) */
static void *kv_alloc(const tsr_backend *be, size_t n, size_t elem, const char *what) {
    void *p = be->try_alloc(be, n * elem);
    if (!p)
        tsr_die(TSR_EXIT_INTERNAL, "KV cache: cannot allocate %zu bytes for %s on %s", n * elem,
                what, be->name);
    return p;
}

/* An MLA model's chunk buffers of n rows and its decode scratch for cap positions (model.h's
 * tsr_kv_cache mla) */
static void kv_mla_rows_alloc(tsr_kv_cache *kv, const tsr_model *m, const tsr_backend *be,
                              size_t n, int cap) {
    const size_t e = tsr_dtype_size(be->act), f = sizeof(float), NH = (size_t)m->NH;
    kv->mla.q = kv_alloc(be, n * NH * (size_t)(m->dn + m->dr), e, "MLA queries");
    if (m->qr) {
        kv->mla.cq = kv_alloc(be, n * (size_t)m->qr, e, "MLA queries' latent");
        kv->mla.cqn = kv_alloc(be, n * (size_t)m->qr, e, "MLA queries' latent");
    }
    kv->mla.c = kv_alloc(be, n * (size_t)m->kvr, e, "MLA latent");
    kv->mla.cn = kv_alloc(be, n * (size_t)m->kvr, e, "MLA latent");
    kv->mla.kpe = kv_alloc(be, n * (size_t)m->dr, e, "MLA RoPE key");
    kv->mla.atty = kv_alloc(be, n * NH * (size_t)m->dv, e, "MLA attention output");
    kv->mla.rq = kv_alloc(be, n, f, "MLA statistics");
    kv->mla.rkv = kv_alloc(be, n, f, "MLA statistics");
    kv->mla.scratch = kv_alloc(be, (size_t)kv->nthreads * (mla_slot_elems(m, 1) * 2 + (size_t)cap),
                               f, "MLA decode scratch");
}

/* The row buffers of a forward over n rows (the chunk's buffers of tsr_kv_cache: activations in
 * be's type, statistics fp32), and the attention's score rows for cap positions. */
static void kv_rows_alloc(tsr_kv_cache *kv, const tsr_model *m, const tsr_backend *be, int n_,
                          int cap) {
    const size_t C = m->C, F = m->F, FW = m->FW, QKV = m->QKV, f = sizeof(float);
    const size_t e = tsr_dtype_size(be->act), n = (size_t)n_;
    kv->nthreads = omp_get_max_threads();
    kv->x = kv_alloc(be, n * C, e, "x");
    kv->ln = kv_alloc(be, n * C, e, "ln");
    kv->mean = kv_alloc(be, n, f, "mean");
    kv->rstd = kv_alloc(be, n, f, "rstd");
    if (m->LA) { /* the attention layers' */
        kv->qkv = kv_alloc(be, n * QKV, e, "qkv");
        kv->atty = kv_alloc(be, n * (size_t)m->QD, e, "atty");
    }
    if (m->LA && m->cfg.qk_norm) {
        kv->qkvr = kv_alloc(be, n * QKV, e, "qkvr");
        kv->qknr = kv_alloc(be, n * (size_t)(m->NH + m->KVH), f, "qknr");
    }
    if (m->LX) kv_mla_rows_alloc(kv, m, be, n, cap);
    kv->proj = kv_alloc(be, n * C, e, "proj");
    kv->fch = kv_alloc(be, n * FW, e, "fch");
    kv->fchg = kv_alloc(be, n * F, e, "fchg");
    kv->att = kv_alloc(be, (size_t)kv->nthreads * cap, f, "att");
    if (m->LL) { /* a chunk of one sequence (1 x n) or one row of each of n slots (n x 1) */
        const size_t a = dec_dn_floats(m, be, 1, n_), b = dec_dn_floats(m, be, n_, 1);
        kv->dn = kv_alloc(be, a > b ? a : b, f, "linear layer");
    }
    if (m->cfg.attn_output_gate) kv->agate = kv_alloc(be, 2 * n * (size_t)m->QD, f, "gate");
    if (m->E) { /* the MoE layer's buffers for one chunk (4-byte elements, as tsr_acts') */
        const size_t E = m->E, K = m->K, FE = m->FE, S = m->S, nk = n * K;
        kv->moe.logits = kv_alloc(be, n * E, e, "moe");
        kv->moe.probs = kv_alloc(be, n * E, f, "moe");
        kv->moe.lse = kv_alloc(be, n, f, "moe");
        kv->moe.wts = kv_alloc(be, nk, f, "moe");
        kv->moe.xg = kv_alloc(be, nk * C, e, "moe");
        kv->moe.h = kv_alloc(be, nk * 2 * FE, e, "moe");
        kv->moe.hg = kv_alloc(be, nk * FE, e, "moe");
        kv->moe.y = kv_alloc(be, nk * C, e, "moe");
        if (S) {
            kv->moe.sh = kv_alloc(be, n * 2 * S, e, "moe");
            kv->moe.shg = kv_alloc(be, n * S, e, "moe");
            kv->moe.shout = kv_alloc(be, n * C, e, "moe");
        }
        kv->moe.stats = kv_alloc(be, 2, f, "moe");
        kv->moe.idx = kv_alloc(be, nk, f, "moe");
        kv->moe.rows = kv_alloc(be, nk, f, "moe");
        kv->moe.slot = kv_alloc(be, nk, f, "moe");
        kv->moe.offs = kv_alloc(be, E + 1, f, "moe");
    }
}

void model_kv_init(tsr_kv_cache *kv, const tsr_model *m, int cap, int chunk) {
    if (cap < 1 || chunk < 1)
        tsr_die(TSR_EXIT_INTERNAL, "model_kv_init: cap %d and chunk %d must be >= 1", cap, chunk);
    memset(kv, 0, sizeof *kv);
    kv->cap = cap;
    kv->chunk = chunk < cap ? chunk : cap;
    const size_t per = kv_layout_alloc(kv, m, cap) + 1; /* the attention layers' */
    kv->kt = kv_alloc(&m->be, per, sizeof(float), "keys");
    kv->v = kv_alloc(&m->be, per, sizeof(float), "values");
    if (m->LL) { /* the linear layers' state and convolution tail (mixer_deltanet.c) */
        kv->dn_state = kv_alloc(&m->be, m->LL * dec_dn_cache_floats(m, 1), sizeof(float), "state");
        kv->dn_conv = kv_alloc(&m->be, m->LL * dec_dn_cache_floats(m, 0) + 1, sizeof(float),
                               "convolution tail");
    }
    if (m->LX) /* the MLA layers' compressed caches */
        kv->mla.cache = kv_alloc(&m->be, (size_t)m->LX * mla_slot_elems(m, cap) *
                                             (size_t)tsr_mla_cache_copies(&m->be), sizeof(float),
                                 "the latent cache");
    kv_rows_alloc(kv, m, &m->be, kv->chunk, cap);
    kv->logits = kv_alloc(&m->be, (size_t)m->Vp, sizeof(float), "logits");
}

static void kv_free_on(tsr_kv_cache *kv, const tsr_backend *be) {
    float **bufs[] = {&kv->kt,   &kv->v,    &kv->x,    &kv->ln,  &kv->mean, &kv->rstd, &kv->qkv,
                      &kv->atty, &kv->proj, &kv->fch, &kv->fchg, &kv->att,  &kv->logits,
                      &kv->qkvr, &kv->qknr, &kv->dn, &kv->dn_state, &kv->dn_conv,
                      &kv->dn_rows, &kv->agate,
                      &kv->moe.logits, &kv->moe.probs, &kv->moe.lse, &kv->moe.wts, &kv->moe.xg,
                      &kv->moe.h, &kv->moe.hg, &kv->moe.y, &kv->moe.sh, &kv->moe.shg,
                      &kv->moe.shout, &kv->moe.stats, &kv->mla.cache, &kv->mla.q,
                      &kv->mla.cq, &kv->mla.cqn, &kv->mla.c, &kv->mla.cn, &kv->mla.kpe,
                      &kv->mla.atty, &kv->mla.rq, &kv->mla.rkv, &kv->mla.scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (*bufs[i]) be->free(be, *bufs[i]);
        *bufs[i] = NULL;
    }
    int32_t **ibufs[] = {&kv->moe.idx, &kv->moe.rows, &kv->moe.slot, &kv->moe.offs};
    for (size_t i = 0; i < sizeof ibufs / sizeof ibufs[0]; i++) {
        if (*ibufs[i]) be->free(be, *ibufs[i]);
        *ibufs[i] = NULL;
    }
    free(kv->lcap), free(kv->lofs);
    kv->lcap = NULL, kv->lofs = NULL;
}

void model_kv_free(tsr_kv_cache *kv, const tsr_model *m) { kv_free_on(kv, &m->be); }

/* The decoder's parameter source: the weights in params (a decode step computes no gradients). */
static void infer_get(void *ctx, int u, int backward, const void **w, float **g) {
    const tsr_model *m = ctx;
    size_t off[TSR_P_COUNT];
    (void)backward, (void)g;
    dec_unit_offsets(m, u, off);
    for (int i = 0; i < TSR_P_COUNT; i++)
        if (off[i] != SIZE_MAX) w[i] = m->params + off[i];
}

void model_infer_decoder(const tsr_model *m, tsr_decoder *d) {
    *d = (tsr_decoder){.m = m, .be = &m->be, .params = {(void *)m, infer_get, NULL},
                       .slopes = m->alibi_slopes, .rope = m->rope_freqs, .lora = m->lora};
}

/* The tokens fed in one pass: at most cap of the n, and (attn_mask = document) ending at an
 * eot_token, after which the next position starts a segment. */
static int feed_chunk(const tsr_model *m, const int32_t *tokens, int n, int cap) {
    const int c = n < cap ? n : cap;
    if (m->cfg.attn_mask == TSR_MASK_DOCUMENT)
        for (int i = 0; i < c; i++)
            if (tokens[i] == m->cfg.eot_token) return i + 1;
    return c;
}

void model_infer_forward(const tsr_model *m, tsr_kv_cache *kv, const int32_t *tokens, int n,
                         float *probs) {
    const int learned = m->params_info[TSR_P_WPE].numel > 0;
    if (n < 1 || kv->len + n > kv->cap || (learned && kv->len + n > m->maxT))
        tsr_die(TSR_EXIT_INTERNAL,
                "model_infer_forward: %d tokens at position %d exceed the cache (%d positions)%s",
                n, kv->len, kv->cap, learned ? " or the position table" : "");
    const int doc = m->cfg.attn_mask == TSR_MASK_DOCUMENT;
    tsr_decoder d;
    model_infer_decoder(m, &d);
    for (int s = 0; s < n;) {
        const int c = feed_chunk(m, tokens + s, n - s, kv->chunk);
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

/* ---- slots: many sequences (model.h tsr_kv_slots) ---------------------------------------- */

size_t model_kv_slots_bytes(const tsr_model *m, const tsr_backend *be, int slots, int cap,
                            int rows) {
    const size_t e = tsr_dtype_size(be->act), n = (size_t)rows, f = sizeof(float);
    size_t b = 0;
    for (int l = 0; l < m->L; l++) { /* each slot's caches: every layer's mixer's */
        const tsr_layer_kind *k = model_mixer(&m->cfg, l);
        if (k->cache_bytes) b += (size_t)slots * k->cache_bytes(m, be, l, cap);
    }
    if (m->LL) /* one step's rows of the linear layers' states and tails */
        b += n * f * (dec_dn_cache_floats(m, 1) + dec_dn_cache_floats(m, 0));
    b += n * ((size_t)4 * m->C + 2 * m->QKV + m->QD + m->FW + m->F) * e + 2 * n * f;
    b += (size_t)omp_get_max_threads() * cap * f + n * (size_t)m->Vp * e + 5 * n * 4;
    if (m->E) b += n * (size_t)m->K * ((size_t)2 * m->C + 3 * m->FE) * e; /* (approximately) */
    if (m->LX) /* the MLA layers' chunk buffers and scratch (kv_mla_rows_alloc) */
        b += n * (size_t)(m->NH * (m->dn + m->dr + m->dv) + 2 * m->qr + 2 * m->kvr + m->dr) * e +
             2 * n * f + (size_t)omp_get_max_threads() * (2 * mla_slot_elems(m, 1) + cap) * f;
    return b;
}

/* the linear layers' per-slot states and convolution tails, zeros, and one step's rows of them */
static void slots_dn_alloc(tsr_kv_slots *ks, const tsr_model *m, const tsr_backend *be, int slots,
                           int rows) {
    const size_t ss = dec_dn_cache_floats(m, 1), cs = dec_dn_cache_floats(m, 0);
    const size_t n = (size_t)m->LL * slots;
    ks->buf.dn_state = kv_alloc(be, n * ss, sizeof(float), "the slots' states");
    ks->buf.dn_conv = kv_alloc(be, n * cs + 1, sizeof(float), "the slots' convolution tails");
    ks->buf.dn_rows = kv_alloc(be, (size_t)rows * (ss + cs) + 1, sizeof(float), "state rows");
}

void model_kv_slots_init(tsr_kv_slots *ks, const tsr_model *m, const tsr_backend *be, int slots,
                         int cap, int rows) {
    if (slots < 1 || cap < 1 || rows < 1)
        tsr_die(TSR_EXIT_INTERNAL, "model_kv_slots_init: %d slots of %d positions, %d rows", slots,
                cap, rows);
    memset(ks, 0, sizeof *ks);
    ks->slots = slots, ks->rows = rows;
    ks->buf.cap = cap, ks->buf.chunk = rows;
    const size_t per = kv_layout_alloc(&ks->buf, m, cap) * slots + 1;
    const size_t e = tsr_dtype_size(be->act);
    ks->buf.kt = kv_alloc(be, per, e, "the slots' keys");
    ks->buf.v = kv_alloc(be, per, e, "the slots' values");
    if (m->LL) slots_dn_alloc(ks, m, be, slots, rows);
    if (m->LX) /* the MLA layers' compressed caches, (LX, slots, cap, kvr + dr) */
        ks->buf.mla.cache = kv_alloc(be, (size_t)m->LX * slots * mla_slot_elems(m, cap) *
                                             (size_t)tsr_mla_cache_copies(be), e,
                                     "the slots' latent caches");
    kv_rows_alloc(&ks->buf, m, be, rows, cap);
    ks->logits = kv_alloc(be, (size_t)rows * m->Vp, e, "logits");
    ks->len = tsr_calloc((size_t)slots, sizeof *ks->len);
    ks->seg = tsr_calloc((size_t)slots, sizeof *ks->seg);
    ks->host_ids = tsr_malloc((size_t)5 * rows * sizeof *ks->host_ids);
    ks->dev_ids = be->host ? ks->host_ids : kv_alloc(be, (size_t)5 * rows, 4, "row ids");
    ks->loss = tsr_malloc((size_t)rows * sizeof *ks->loss);
    ks->none = tsr_malloc((size_t)rows * sizeof *ks->none);
    for (int i = 0; i < rows; i++) ks->none[i] = -1;
}

void model_kv_slots_free(tsr_kv_slots *ks, const tsr_backend *be) {
    kv_free_on(&ks->buf, be);
    if (ks->logits) be->free(be, ks->logits);
    if (ks->dev_ids && ks->dev_ids != ks->host_ids) be->free(be, ks->dev_ids);
    free(ks->len), free(ks->seg), free(ks->host_ids), free(ks->loss), free(ks->none);
    memset(ks, 0, sizeof *ks);
}

void model_kv_slots_reset(tsr_kv_slots *ks, int s) { ks->len[s] = ks->seg[s] = 0; }

void model_kv_slots_copy(tsr_kv_slots *ks, const tsr_backend *be, const tsr_model *m, int dst,
                         int src) {
    const size_t e = tsr_dtype_size(be->act);
    for (int l = 0; l < m->LA; l++) { /* the attention layers' keys and values */
        const size_t per = (size_t)ks->buf.lcap[l] * m->KVH * m->hs * e;
        const size_t at = ks->buf.lofs[l] * ks->slots * e;
        be->copy(be, (char *)ks->buf.kt + at + dst * per, (char *)ks->buf.kt + at + src * per,
                 per);
        be->copy(be, (char *)ks->buf.v + at + dst * per, (char *)ks->buf.v + at + src * per, per);
    }
    const size_t ss = dec_dn_cache_floats(m, 1), cs = dec_dn_cache_floats(m, 0);
    for (int l = 0; l < m->LL; l++) { /* the linear layers' states and tails (host fp32) */
        const size_t at = (size_t)l * ks->slots;
        memcpy(ks->buf.dn_state + (at + dst) * ss, ks->buf.dn_state + (at + src) * ss,
               ss * sizeof(float));
        memcpy(ks->buf.dn_conv + (at + dst) * cs, ks->buf.dn_conv + (at + src) * cs,
               cs * sizeof(float));
    }
    const size_t mla = mla_slot_elems(m, ks->buf.cap) * (size_t)tsr_mla_cache_copies(be) * e;
    /* (the MLA layers' latent caches) */
    for (int l = 0; l < m->LX; l++) {
        char *at = (char *)ks->buf.mla.cache + (size_t)l * ks->slots * mla;
        be->copy(be, at + (size_t)dst * mla, at + (size_t)src * mla, mla);
    }
    ks->len[dst] = ks->len[src], ks->seg[dst] = ks->seg[src];
}

void model_kv_slots_feed(const tsr_decoder *d, tsr_kv_slots *ks, int s, const int32_t *tokens,
                         int n, float *probs) {
    const tsr_model *m = d->m;
    const int learned = m->params_info[TSR_P_WPE].numel > 0;
    if (n < 1 || ks->len[s] + n > ks->buf.cap || (learned && ks->len[s] - ks->seg[s] + n > m->maxT))
        tsr_die(TSR_EXIT_INTERNAL, "model_kv_slots_feed: %d tokens at position %d exceed the cache "
                "(%d positions)%s", n, ks->len[s], ks->buf.cap,
                learned ? " or the position table" : "");
    const int doc = m->cfg.attn_mask == TSR_MASK_DOCUMENT;
    for (int i = 0; i < n;) {
        const int c = feed_chunk(m, tokens + i, n - i, ks->rows);
        dec_kv_slots(d, ks, s, tokens + i, c, i + c == n ? probs : NULL);
        if (doc && tokens[i + c - 1] == m->cfg.eot_token) ks->seg[s] = ks->len[s];
        i += c;
    }
}

void model_kv_slots_step(const tsr_decoder *d, tsr_kv_slots *ks, const int32_t *slot,
                         const int32_t *tokens, int n, float *probs) {
    const tsr_model *m = d->m;
    const int learned = m->params_info[TSR_P_WPE].numel > 0;
    int32_t *ids = ks->host_ids, R = ks->rows;
    if (n < 1 || n > R)
        tsr_die(TSR_EXIT_INTERNAL, "model_kv_slots_step: %d rows, buffers for %d", n, R);
    for (int i = 0; i < n; i++) {
        const int s = slot[i];
        if (ks->len[s] >= ks->buf.cap || (learned && ks->len[s] - ks->seg[s] >= m->maxT))
            tsr_die(TSR_EXIT_INTERNAL, "model_kv_slots_step: slot %d is full (%d positions)", s,
                    ks->len[s]);
        ids[i] = tokens[i], ids[R + i] = s, ids[2 * R + i] = ks->len[s];
        ids[3 * R + i] = ks->seg[s], ids[4 * R + i] = ks->len[s] - ks->seg[s];
    }
    dec_kv_slots(d, ks, -1, NULL, n, probs);
    const int doc = m->cfg.attn_mask == TSR_MASK_DOCUMENT;
    for (int i = 0; i < n; i++)
        if (doc && tokens[i] == m->cfg.eot_token) ks->seg[slot[i]] = ks->len[slot[i]];
}
