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
    const int gi = k->qoff + i;
    int lo = k->lo ? k->lo[(size_t)b * k->T + gi] - k->koff : 0, hi = gi - k->koff;
    *jlo = lo > 0 ? lo : 0;
    *jhi = hi < k->Tk - 1 ? hi : k->Tk - 1;
}

static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}

/* s[j - jlo] = q.k_j / sqrt(hs) - slope (position distance), for the keys jlo..jhi of row i */
static void row_scores(float *s, const float *q, const tsr_ring_block *k, int b, int g, int i,
                       int jlo, int jhi, float slope) {
    const float *kv = k->kv;
    const float scale = 1.0f / sqrtf((float)k->hs);
    for (int j = jlo; j <= jhi; j++) {
        const float *kj = kv + ((size_t)b * k->kbs + j) * k->ldkv + (size_t)g * k->hs;
        s[j - jlo] = dot(q, kj, k->hs) * scale - slope * (float)(k->qoff + i - k->koff - j);
    }
}

/* acc, lse of one row and head (a, L) merged with the block's (o, l) */
static void merge_row(float *a, float *L, const float *o, float l, int hs, int merge) {
    if (!merge) {
        memcpy(a, o, (size_t)hs * sizeof *a);
        *L = l;
        return;
    }
    if (l == -INFINITY) return;
    const float m = *L > l ? *L : l, w1 = cpu_expf(*L - m), w2 = cpu_expf(l - m);
    const float inv = 1.0f / (w1 + w2);
    for (int d = 0; d < hs; d++) a[d] = (w1 * a[d] + w2 * o[d]) * inv;
    *L = m + logf(w1 + w2);
}

/* One query row's attention over its keys in the block: o (hs) and its log-sum-exp */
static float row_forward(float *o, float *s, const float *q, const tsr_ring_block *k, int b, int h,
                         int i, int jlo, int jhi) {
    const int hs = k->hs, g = h / (k->NH / k->KVH), n = jhi - jlo + 1;
    const float *kv = k->kv;
    row_scores(s, q, k, b, g, i, jlo, jhi, k->slopes ? k->slopes[h] : 0.0f);
    float mx = -INFINITY, sum = 0.0f;
    for (int j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    for (int j = 0; j < n; j++) sum += s[j] = cpu_expf(s[j] - mx);
    memset(o, 0, (size_t)hs * sizeof *o);
    for (int j = 0; j < n; j++) {
        const float *vj = kv + ((size_t)b * k->kbs + jlo + j) * k->ldkv + (size_t)(k->KVH + g) * hs;
        for (int d = 0; d < hs; d++) o[d] = fmaf(s[j], vj[d], o[d]);
    }
    const float inv = 1.0f / sum;
    for (int d = 0; d < hs; d++) o[d] *= inv;
    return mx + logf(sum);
}

void cpu_ring_forward(float *acc, float *lse, const tsr_ring_block *k, int merge) {
    const int NH = k->NH, hs = k->hs, C = NH * hs;
    const float *q = k->q;
#pragma omp parallel
    {
        float *s = tsr_malloc(((size_t)k->Tk + (size_t)hs) * sizeof *s), *o = s + k->Tk;
#pragma omp for schedule(static)
        for (int bh = 0; bh < k->B * NH; bh++) {
            const int b = bh / NH, h = bh % NH;
            for (int i = 0; i < k->Tq; i++) {
                int jlo, jhi;
                key_range(k, b, i, &jlo, &jhi);
                float *a = acc + ((size_t)b * k->qbs + i) * C + (size_t)h * hs;
                float *L = lse + ((size_t)b * NH + h) * k->qbs + i;
                float l = -INFINITY;
                if (jhi >= jlo)
                    l = row_forward(o, s, q + ((size_t)b * k->qbs + i) * k->ldq + (size_t)h * hs,
                                    k, b, h, i, jlo, jhi);
                else memset(o, 0, (size_t)hs * sizeof *o);
                merge_row(a, L, o, l, hs, merge);
            }
        }
        free(s);
    }
}

/* One query row's backward over its keys in the block: dq_i, and its terms of dk_j, dv_j */
static void row_backward(float *dq, float *dkv, int lddkv, const float *q, const float *gi,
                         float D, float L, float *s, const tsr_ring_block *k, int b, int h, int i,
                         int jlo, int jhi) {
    const int hs = k->hs, g = h / (k->NH / k->KVH);
    const float *kv = k->kv, scale = 1.0f / sqrtf((float)hs);
    row_scores(s, q, k, b, g, i, jlo, jhi, k->slopes ? k->slopes[h] : 0.0f);
    for (int j = jlo; j <= jhi; j++) {
        const float *kj = kv + ((size_t)b * k->kbs + j) * k->ldkv + (size_t)g * hs;
        const float *vj = kj + (size_t)k->KVH * hs;
        float *dk = dkv + ((size_t)b * k->kbs + j) * lddkv + (size_t)g * hs;
        float *dv = dk + (size_t)k->KVH * hs;
        const float p = cpu_expf(s[j - jlo] - L), ds = p * (dot(gi, vj, hs) - D) * scale;
        for (int d = 0; d < hs; d++) {
            dq[d] = fmaf(ds, kj[d], dq[d]);
            dk[d] = fmaf(ds, q[d], dk[d]);
            dv[d] = fmaf(p, gi[d], dv[d]);
        }
    }
}

void cpu_ring_backward(float *dq, int lddq, float *dkv, int lddkv, const float *dout,
                       const float *out, const float *lse, const tsr_ring_block *k) {
    const int NH = k->NH, KVH = k->KVH, hs = k->hs, C = NH * hs, R = NH / KVH;
    const float *q = k->q;
#pragma omp parallel
    {
        float *s = tsr_malloc((size_t)k->Tk * sizeof *s);
#pragma omp for schedule(static)
        for (int bg = 0; bg < k->B * KVH; bg++) {
            const int b = bg / KVH, g = bg % KVH;
            for (int h = g * R; h < (g + 1) * R; h++)
                for (int i = 0; i < k->Tq; i++) {
                    int jlo, jhi;
                    key_range(k, b, i, &jlo, &jhi);
                    const size_t row = (size_t)b * k->qbs + i;
                    const float L = lse[((size_t)b * NH + h) * k->qbs + i];
                    if (jhi < jlo || L == -INFINITY) continue;
                    const float *gi = dout + row * C + (size_t)h * hs;
                    const float D = dot(gi, out + row * C + (size_t)h * hs, hs);
                    row_backward(dq + row * lddq + (size_t)h * hs, dkv, lddkv,
                                 q + row * k->ldq + (size_t)h * hs, gi, D, L, s, k, b, h, i, jlo,
                                 jhi);
                }
        }
        free(s);
    }
}
