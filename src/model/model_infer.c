/* model_infer.c — inference for one sequence: the incremental forward with a KV cache, and the
 * no-cache reference (model_forward over the whole context) it is tested against.
 *
 * Dimensions as in kernels/ops.h (L, C, NH, hs = C/NH, F, V, Vp); cap = positions the cache holds;
 * c = rows (positions) of one chunk of new tokens. The KV cache, per layer l and head h:
 *   kt (L, NH, hs, cap)  keys, transposed per head: kt[l][h][d][j] = k_j[h*hs + d]
 *   v  (L, NH, cap, hs)  values:                     v[l][h][j][d]  = v_j[h*hs + d]
 * (the layouts cpu_attention.c packs a head into, so a score row and an output row are computed
 * with the same fmaf order as the training kernel's tiles).
 *
 * A forward of c new tokens at positions p0..p0+c-1 (p0 = kv->len) is model.c's forward restricted
 * to those rows: every op but attention is row-wise, so it is the same op from the op table on c
 * rows; attention of row p reads the cached keys and values of positions 0..p. Only the last row
 * goes through the final LayerNorm and the LM head. The attention here is plain C (fp32, the CPU
 * backend's math), and so is the one-row matmul (linear()): a decode-attention and a matrix-vector
 * entry in kernels/ops.h would be their place once CUDA arrives.
 *
 * attn_mask = document (model.c): the fed tokens are cut into chunks that end at an eot_token, so
 * a chunk lies in one segment; a segment starting at position s = kv->seg sees positions s..p
 * only and its learned positions count from s, as in model_forward. A prompt without an
 * eot_token is one document; a completion after an end-of-text prompt starts a new one, as a
 * document after an eot_token does in training.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu/cpu_internal.h" /* cpu_expf: the exponential the training kernel's softmax uses */
#include "model.h"

/* Attention work (multiply-adds) below which a decode step stays on one thread. */
#define INFER_PAR_MIN 32768

/* out (c,OC) = inp (c,IC) @ w^T + bias (or NULL). One row (a decode step) on the CPU backend goes
 * to sgemv: OpenBLAS 0.3.21's sgemm with M = 1 streams the weights at 6-11 GB/s, its sgemv at
 * 25-55 GB/s (2-vCPU VM, 768x2304 .. 50304x768; docs/generate.md). Same maths, another summation
 * order. Anything else is the op table's matmul_forward, as model.c calls it. */
static void linear(const tsr_model *m, float *out, const float *inp, const float *w,
                   const float *bias, int c, int IC, int OC) {
    if (c != 1 || m->ops != &tsr_cpu_ops) {
        m->ops->matmul_forward(out, inp, w, bias, c, IC, OC);
        return;
    }
    if (bias) memcpy(out, bias, (size_t)OC * sizeof *out);
    else memset(out, 0, (size_t)OC * sizeof *out);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, IC, 1.0f, w, IC, inp, 1, 1.0f, out, 1);
}

/* The parameters of layer l (NULL where the model has none). */
typedef struct infer_layer {
    const float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb,
        *fcprojw, *fcprojb;
} infer_layer;

static const float *param(const tsr_model *m, tsr_param_id id, size_t l, size_t stride) {
    const tsr_param_info *p = &m->params_info[id];
    return p->numel ? m->params + p->offset + l * stride : NULL;
}

static infer_layer layer_at(const tsr_model *m, int l) {
    size_t C = m->C, F = m->F;
    infer_layer w = {
        param(m, TSR_P_LN1W, l, C),         param(m, TSR_P_LN1B, l, C),
        param(m, TSR_P_QKVW, l, 3 * C * C), param(m, TSR_P_QKVB, l, 3 * C),
        param(m, TSR_P_ATTPROJW, l, C * C), param(m, TSR_P_ATTPROJB, l, C),
        param(m, TSR_P_LN2W, l, C),         param(m, TSR_P_LN2B, l, C),
        param(m, TSR_P_FCW, l, F * C),      param(m, TSR_P_FCB, l, F),
        param(m, TSR_P_FCPROJW, l, C * F),  param(m, TSR_P_FCPROJB, l, C),
    };
    return w;
}

size_t model_kv_bytes(const tsr_model *m, int cap) {
    return 2 * (size_t)m->L * (size_t)cap * (size_t)m->C * sizeof(float);
}

void model_kv_init(tsr_kv_cache *kv, const tsr_model *m, int cap, int chunk) {
    const tsr_ops *o = m->ops;
    size_t C = m->C, F = m->F, f = sizeof(float);
    if (cap < 1 || chunk < 1)
        tsr_die(TSR_EXIT_INTERNAL, "model_kv_init: cap %d and chunk %d must be >= 1", cap, chunk);
    memset(kv, 0, sizeof *kv);
    kv->cap = cap;
    kv->chunk = chunk < cap ? chunk : cap;
    kv->nthreads = omp_get_max_threads();
    size_t per = (size_t)m->L * cap * C, n = (size_t)kv->chunk;
    kv->kt = o->alloc(per * f);
    kv->v = o->alloc(per * f);
    kv->x = o->alloc(n * C * f);
    kv->ln = o->alloc(n * C * f);
    kv->mean = o->alloc(n * f);
    kv->rstd = o->alloc(n * f);
    kv->qkv = o->alloc(n * 3 * C * f);
    kv->atty = o->alloc(n * C * f);
    kv->proj = o->alloc(n * C * f);
    kv->fch = o->alloc(n * F * f);
    kv->fchg = o->alloc(n * F * f);
    kv->att = o->alloc((size_t)kv->nthreads * cap * f);
    kv->logits = o->alloc((size_t)m->Vp * f);
}

void model_kv_free(tsr_kv_cache *kv, const tsr_model *m) {
    float **bufs[] = {&kv->kt,   &kv->v,    &kv->x,    &kv->ln,  &kv->mean, &kv->rstd, &kv->qkv,
                      &kv->atty, &kv->proj, &kv->fch, &kv->fchg, &kv->att,  &kv->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (*bufs[i]) m->ops->free(*bufs[i]);
        *bufs[i] = NULL;
    }
}

/* Keys and values of rows p0..p0+c-1 (from qkv (c,3C) = [q | k | v]) into layer l's cache. */
static void cache_store(const tsr_model *m, tsr_kv_cache *kv, int l, int p0, int c,
                        const float *qkv) {
    const int C = m->C, NH = m->NH, hs = C / NH;
    const size_t cap = (size_t)kv->cap;
    for (int i = 0; i < c; i++) {
        const float *k = qkv + (size_t)i * 3 * C + C, *v = k + C;
        const size_t p = (size_t)(p0 + i);
        for (int h = 0; h < NH; h++) {
            float *kt = kv->kt + (((size_t)l * NH + h) * hs) * cap + p;
            for (int d = 0; d < hs; d++) kt[(size_t)d * cap] = k[h * hs + d];
            memcpy(kv->v + (((size_t)l * NH + h) * cap + p) * hs, v + h * hs,
                   (size_t)hs * sizeof(float));
        }
    }
}

/* One head of one row at position p, as cpu_attention_forward computes it:
 *   s_j = (sum_d fmaf-chain q_d k_j[d]) / sqrt(hs) - slope (p - j)  for j <= p
 *   a = softmax(s) (cpu_expf, float sum);  out[d] = sum_j fmaf-chain a_j v_j[d].
 * q (hs), kt (hs, cap), v (cap, hs), row (p+1) scratch, out (hs) */
static void attend_row(float *out, float *row, const float *q, const float *kt, const float *v,
                       int cap, int hs, int p, float slope, float scale) {
    const int n = p + 1;
    for (int j = 0; j < n; j++) row[j] = 0.0f;
    for (int d = 0; d < hs; d++) {
        const float a = q[d], *k = kt + (size_t)d * cap;
        for (int j = 0; j < n; j++) row[j] = fmaf(a, k[j], row[j]);
    }
    for (int j = 0; j < n; j++) row[j] = scale * row[j];
    /* from here to the normalisation: softmax_causal_row of cpu_attention.c */
    if (slope != 0.0f)
        for (int j = 0; j < n; j++) row[j] -= slope * (float)(p - j);
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < n; j++) mx = row[j] > mx ? row[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
        float e = cpu_expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j < n; j++) row[j] *= inv;
    for (int d = 0; d < hs; d++) out[d] = 0.0f;
    for (int j = 0; j < n; j++) {
        const float a = row[j], *vj = v + (size_t)j * hs;
        for (int d = 0; d < hs; d++) out[d] = fmaf(a, vj[d], out[d]);
    }
}

/* out (c,C): attention of rows p0..p0+c-1 over layer l's cache (positions 0..p0+c-1 filled),
 * each over positions s..p of its segment (s = kv->seg, 0 without segments; attend_row sees the
 * segment as a sequence of its own: ALiBi's p - j does not change); q is column block 0 of
 * qkv (c,3C). Rows x heads are independent tasks. */
static void attend(const tsr_model *m, tsr_kv_cache *kv, int l, int p0, int c, const float *qkv,
                   float *out) {
    const int C = m->C, NH = m->NH, hs = C / NH, cap = kv->cap, s = kv->seg;
    const float scale = 1.0f / sqrtf((float)hs);
    const long tasks = (long)c * NH, work = tasks * (p0 + c - s) * hs;
#pragma omp parallel for schedule(dynamic, 1) num_threads(kv->nthreads) if (work >= INFER_PAR_MIN)
    for (long t = 0; t < tasks; t++) {
        const int i = (int)(t / NH), h = (int)(t % NH);
        float *row = kv->att + (size_t)omp_get_thread_num() * cap;
        const size_t head = (size_t)l * NH + h;
        attend_row(out + (size_t)i * C + (size_t)h * hs, row, qkv + (size_t)i * 3 * C + h * hs,
                   kv->kt + head * hs * cap + s, kv->v + (head * cap + s) * hs, cap, hs,
                   p0 + i - s, m->alibi_slopes ? m->alibi_slopes[h] : 0.0f, scale);
    }
}

/* c tokens at positions p0 = kv->len ..: through every layer; kv->len += c. With probs != NULL,
 * the last row through the final LayerNorm, the LM head and the softmax into probs (Vp). The c
 * positions lie in the segment that starts at kv->seg. */
static void forward_chunk(const tsr_model *m, tsr_kv_cache *kv, const int32_t *tokens, int c,
                          float *probs) {
    const tsr_ops *o = m->ops;
    const int C = m->C, F = m->F, p0 = kv->len;
    const float *wpe = param(m, TSR_P_WPE, 0, 0);
    float *x = kv->x;
    o->encoder_forward(x, tokens, param(m, TSR_P_WTE, 0, 0),
                       wpe ? wpe + (size_t)(p0 - kv->seg) * C : NULL, NULL, 1, c, C);
    for (int l = 0; l < m->L; l++) {
        infer_layer w = layer_at(m, l);
        o->layernorm_forward(kv->ln, kv->mean, kv->rstd, x, w.ln1w, w.ln1b, c, C);
        linear(m, kv->qkv, kv->ln, w.qkvw, w.qkvb, c, C, 3 * C);
        cache_store(m, kv, l, p0, c, kv->qkv);
        attend(m, kv, l, p0, c, kv->qkv, kv->atty);
        linear(m, kv->proj, kv->atty, w.attprojw, w.attprojb, c, C, C);
        o->residual_forward(x, x, kv->proj, (size_t)c * C); /* residual2 */
        o->layernorm_forward(kv->ln, kv->mean, kv->rstd, x, w.ln2w, w.ln2b, c, C);
        linear(m, kv->fch, kv->ln, w.fcw, w.fcb, c, C, F);
        o->gelu_forward(kv->fchg, kv->fch, (size_t)c * F, (tsr_gelu_kind)m->cfg.gelu);
        linear(m, kv->proj, kv->fchg, w.fcprojw, w.fcprojb, c, F, C);
        o->residual_forward(x, x, kv->proj, (size_t)c * C); /* residual3 */
    }
    kv->len += c;
    if (!probs) return;
    float loss;
    const int32_t none = -1;
    o->layernorm_forward(kv->ln, kv->mean, kv->rstd, x + (size_t)(c - 1) * C,
                         param(m, TSR_P_LNFW, 0, 0), param(m, TSR_P_LNFB, 0, 0), 1, C);
    linear(m, kv->logits, kv->ln, param(m, TSR_P_WTE, 0, 0), NULL, 1, C, m->Vp);
    o->softmax_xent_forward(&loss, probs, kv->logits, &none, 1, m->V, m->Vp);
}

void model_infer_forward(const tsr_model *m, tsr_kv_cache *kv, const int32_t *tokens, int n,
                         float *probs) {
    const int learned = m->params_info[TSR_P_WPE].numel > 0;
    if (n < 1 || kv->len + n > kv->cap || (learned && kv->len + n > m->maxT))
        tsr_die(TSR_EXIT_INTERNAL,
                "model_infer_forward: %d tokens at position %d exceed the cache (%d positions)%s",
                n, kv->len, kv->cap, learned ? " or the position table" : "");
    const int doc = m->cfg.attn_mask == TSR_MASK_DOCUMENT;
    for (int s = 0; s < n;) {
        int c = n - s < kv->chunk ? n - s : kv->chunk;
        if (doc) /* end the chunk at an eot_token: the next position starts a segment */
            for (int i = 0; i < c; i++)
                if (tokens[s + i] == m->cfg.eot_token) {
                    c = i + 1;
                    break;
                }
        forward_chunk(m, kv, tokens + s, c, s + c == n ? probs : NULL);
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
