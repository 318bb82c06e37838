/* cpu_ring.c — ring attention's blocks for the CPU backend (ops.h ring_forward, ring_backward;
 * context parallelism, src/model/model_ring.c, docs/parallelism.md), fp32.
 *
 * A block is a set of query rows against a set of key/value rows, both with their positions in
 * the whole sequence: a query row sees the keys from its document's first position (lo) up to its
 * own position, so each row's keys in the block are one contiguous range. The forward computes
 * the block's softmax attention and log-sum-exp of each row in one pass over that range and
 * merges it into the running output by the log-sum-exp; the backward recomputes the
 * probabilities from the merged log-sum-exp (FlashAttention's backward), so no (T,T) matrix is
 * kept. One task per (sequence, query head) in the forward and per (sequence, key/value head) in
 * the backward (its query heads in head order, rows in order): every output element is summed by
 * one thread in a fixed order, so the bits do not depend on the thread count.
 *
 * Variants (ops.h tsr_attn_var in k->var): a window moves each row's first key up to its position
 * - window + 1 (the blocks wholly outside the band are never given: model_ring.c skips them); the
 * scale and the soft cap are applied to each score as attention_forward applies them, the cap's
 * derivative 1 - tanh^2 recomputed in the backward; a row started with sinks (merge = 0) starts
 * from the sink's logit, so it counts once in the merged log-sum-exp, and the sink gradient of a
 * row, -exp(sink - lse) D, is taken in the one block the caller marks (sink_grad), summed per
 * (sequence, head) and then over the sequences in order. The variants' dv gives value heads of
 * their own size (multi-head latent attention's ring: KVH hs key columns, then KVH dv value ones;
 * the output, acc, dout rows NH dv wide).
 */
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu_internal.h"

/* The keys row i of block k sees: [*jlo, *jhi] (empty when *jhi < *jlo) */
static void key_range(const tsr_ring_block *k, int b, int i, int *jlo, int *jhi) {
    const int gi = k->qoff + i, W = k->var ? k->var->window : 0;
    int first = k->lo ? k->lo[(size_t)b * k->T + gi] : 0;
    if (W > 0 && gi - W + 1 > first) first = gi - W + 1; /* the band */
    const int lo = first - k->koff, hi = gi - k->koff;
    *jlo = lo > 0 ? lo : 0;
    *jhi = hi < k->Tk - 1 ? hi : k->Tk - 1;
}

static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}

/* the scores' factor (1 / sqrt(hs) or the layer's) and soft cap (0: none) */
static float blk_scale(const tsr_ring_block *k) {
    return k->var && k->var->scale > 0.0f ? k->var->scale : 1.0f / sqrtf((float)k->hs);
}
static float blk_cap(const tsr_ring_block *k) { return k->var ? k->var->softcap : 0.0f; }
/* the value heads' size: the variants' dv (multi-head latent attention), else hs */
static int blk_dv(const tsr_ring_block *k) { return k->var && k->var->dv > 0 ? k->var->dv : k->hs; }

/* s[j - jlo] = c(q.k_j scale) - slope (position distance), for the keys jlo..jhi of row i, c the
 * soft cap (cap tanh(x / cap)) or none; with th, th[j - jlo] = that tanh (the backward's) */
static void row_scores(float *s, float *th, const float *q, const tsr_ring_block *k, int b, int g,
                       int i, int jlo, int jhi, float slope) {
    const float *kv = k->kv;
    const float scale = blk_scale(k), cap = blk_cap(k);
    for (int j = jlo; j <= jhi; j++) {
        const float *kj = kv + ((size_t)b * k->kbs + j) * k->ldkv + (size_t)g * k->hs;
        float x = dot(q, kj, k->hs) * scale;
        if (cap > 0.0f) {
            const float t = tanhf(x / cap);
            x = cap * t;
            if (th) th[j - jlo] = t;
        }
        s[j - jlo] = x - slope * (float)(k->qoff + i - k->koff - j);
    }
}

/* acc, lse of one row and head (a, L) merged with the block's (o, l) */
static void merge_row(float *a, float *L, const float *o, float l, int dv, int merge) {
    if (!merge) {
        memcpy(a, o, (size_t)dv * sizeof *a);
        *L = l;
        return;
    }
    if (l == -INFINITY) return;
    const float m = *L > l ? *L : l, w1 = cpu_expf(*L - m), w2 = cpu_expf(l - m);
    const float inv = 1.0f / (w1 + w2);
    for (int d = 0; d < dv; d++) a[d] = (w1 * a[d] + w2 * o[d]) * inv;
    *L = m + logf(w1 + w2);
}

/* One query row's attention over its keys in the block: o (dv) and its log-sum-exp */
static float row_forward(float *o, float *s, const float *q, const tsr_ring_block *k, int b, int h,
                         int i, int jlo, int jhi) {
    const int dv = blk_dv(k), g = h / (k->NH / k->KVH), n = jhi - jlo + 1;
    const float *kv = k->kv;
    row_scores(s, NULL, q, k, b, g, i, jlo, jhi, k->slopes ? k->slopes[h] : 0.0f);
    float mx = -INFINITY, sum = 0.0f;
    for (int j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    for (int j = 0; j < n; j++) sum += s[j] = cpu_expf(s[j] - mx);
    memset(o, 0, (size_t)dv * sizeof *o);
    for (int j = 0; j < n; j++) {
        const float *vj = kv + ((size_t)b * k->kbs + jlo + j) * k->ldkv + (size_t)k->KVH * k->hs +
                          (size_t)g * dv;
        for (int d = 0; d < dv; d++) o[d] = fmaf(s[j], vj[d], o[d]);
    }
    const float inv = 1.0f / sum;
    for (int d = 0; d < dv; d++) o[d] *= inv;
    return mx + logf(sum);
}

void cpu_ring_forward(float *acc, float *lse, const tsr_ring_block *k, int merge) {
    const int NH = k->NH, hs = k->hs, dv = blk_dv(k), C = NH * dv;
    const float *q = k->q;
#pragma omp parallel
    {
        float *s = tsr_malloc(((size_t)k->Tk + (size_t)dv) * sizeof *s), *o = s + k->Tk;
#pragma omp for schedule(static)
        for (int bh = 0; bh < k->B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            for (int i = 0; i < k->Tq; i++) {
                int jlo, jhi;
                key_range(k, b, i, &jlo, &jhi);
                float *a = acc + ((size_t)b * k->qbs + i) * C + (size_t)h * dv;
                float *L = lse + ((size_t)b * NH + h) * k->qbs + i;
                float l = -INFINITY;
                if (jhi >= jlo)
                    l = row_forward(o, s, q + ((size_t)b * k->qbs + i) * k->ldq + (size_t)h * hs,
                                    k, b, h, i, jlo, jhi);
                else memset(o, 0, (size_t)dv * sizeof *o);
                const float *sink = k->var && k->var->sinks ? k->var->sinks + h : NULL;
                if (!merge && sink) { /* the row starts from its sink: e^sink joins once */
                    memset(a, 0, (size_t)dv * sizeof *a);
                    *L = *sink;
                }
                merge_row(a, L, o, l, dv, merge || sink);
            }
        }
        free(s);
    }
}

/* One query row's backward over its keys in the block: dq_i, and its terms of dk_j, dv_j;
 * s, th scratch of the block's keys */
static void row_backward(float *dq, float *dkv, int lddkv, const float *q, const float *gi,
                         float D, float L, float *s, float *th, const tsr_ring_block *k, int b,
                         int h, int i, int jlo, int jhi) {
    const int hs = k->hs, g = h / (k->NH / k->KVH), vd = blk_dv(k);
    const size_t vo = (size_t)k->KVH * hs + (size_t)g * vd - (size_t)g * hs; /* k head -> v head */
    const float *kv = k->kv, scale = blk_scale(k), cap = blk_cap(k);
    row_scores(s, th, q, k, b, g, i, jlo, jhi, k->slopes ? k->slopes[h] : 0.0f);
    for (int j = jlo; j <= jhi; j++) {
        const float *kj = kv + ((size_t)b * k->kbs + j) * k->ldkv + (size_t)g * hs;
        const float *vj = kj + vo;
        float *dk = dkv + ((size_t)b * k->kbs + j) * lddkv + (size_t)g * hs;
        float *dv = dk + vo;
        const float p = cpu_expf(s[j - jlo] - L);
        float ds = p * (dot(gi, vj, vd) - D) * scale;
        if (cap > 0.0f) ds *= 1.0f - th[j - jlo] * th[j - jlo]; /* the cap's derivative */
        for (int d = 0; d < hs; d++) {
            dq[d] = fmaf(ds, kj[d], dq[d]);
            dk[d] = fmaf(ds, q[d], dk[d]);
        }
        for (int d = 0; d < vd; d++) dv[d] = fmaf(p, gi[d], dv[d]);
    }
}

/* The block's sink gradients (k->sink_grad with trainable sinks): per (sequence, head), or NULL */
static float *sink_grads(const tsr_ring_block *k) {
    const tsr_attn_var *v = k->var;
    return k->sink_grad && v && v->sinks && v->dsinks
               ? tsr_calloc((size_t)k->B * k->NH, sizeof(float))
               : NULL;
}

/* them into var->dsinks, the sequences in order */
static void sink_grads_add(const tsr_ring_block *k, float *dsk) {
    for (int b = 0; dsk && b < k->B; b++)
        for (int h = 0; h < k->NH; h++) k->var->dsinks[h] += dsk[(size_t)b * k->NH + h];
    free(dsk);
}

void cpu_ring_backward(float *dq, int lddq, float *dkv, int lddkv, const float *dout,
                       const float *out, const float *lse, const tsr_ring_block *k) {
    const int NH = k->NH, KVH = k->KVH, dv = blk_dv(k), C = NH * dv, R = NH / KVH;
    const float *q = k->q;
    float *dsk = sink_grads(k);
#pragma omp parallel
    {
        float *s = tsr_malloc((size_t)2 * k->Tk * sizeof *s), *th = s + k->Tk;
#pragma omp for schedule(static)
        for (int bg = 0; bg < k->B * KVH; bg++) {
            const int b = bg / KVH, g = bg % KVH;
            for (int h = g * R; h < (g + 1) * R; h++)
                for (int i = 0; i < k->Tq; i++) {
                    int jlo, jhi;
                    key_range(k, b, i, &jlo, &jhi);
                    const size_t row = (size_t)b * k->qbs + i;
                    const float L = lse[((size_t)b * NH + h) * k->qbs + i];
                    const float *gi = dout + row * C + (size_t)h * dv;
                    const float D = dot(gi, out + row * C + (size_t)h * dv, dv);
                    if (dsk) /* the row's sink probability times D */
                        dsk[(size_t)b * NH + h] -= expf(k->var->sinks[h] - L) * D;
                    if (jhi < jlo || L == -INFINITY) continue;
                    row_backward(dq + row * lddq + (size_t)h * k->hs, dkv, lddkv,
                                 q + row * k->ldq + (size_t)h * k->hs, gi, D, L, s, th, k, b, h, i,
                                 jlo, jhi);
                }
        }
        free(s);
    }
    sink_grads_add(k, dsk);
}
