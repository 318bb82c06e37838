/* gpu_mla.c — multi-head latent attention on the CUDA backend by composition (gpu_mla.h; docs/cuda.md
 * "Multi-head latent attention"): no kernel of its own, only tcu_* ops.
 *
 * The assembly of the attention input (cpu_mla.h's layout, the same on both backends): strided
 * copies (tcu_memcpy2d) move the query heads, the keys' nope parts and the values; the rope parts
 * (the NH query heads' and the one RoPE key) are gathered into a buffer of rope_part's layout,
 * (N, (NH + 2) dr) = [NH query heads | the key | an unused value head] of dr, turned by
 * tcu_rope_part_* (pairs (i, i + dr/2), cosine and sine times mscale) and scattered back. With
 * interleaved pairs (2i, 2i + 1) the parts are de-interleaved on the way in and interleaved on the
 * way out by products with permutation matrices (tcu_matmul_forward: one product of 1 and zeros
 * per element, exact). The backward sums the key heads' rope gradients by one product with [I I ..
 * I] (the fp32 sum rounded once), the de-interleaving folded in.
 *
 * Attention with value heads of dv != hs, or a head size the kernels lack (cuda_shapes.h), runs
 * on copies zero-padded to the smallest kernel size P >= max(hs, dv): zero columns change no
 * q.k, the scale passed explicitly (var->scale, or 1/sqrt(hs)); a zero value column gives a zero
 * output column, so the padded output is the output's first dv columns of each head followed by
 * zeros, and the forward's output padded again is the backward's. The padded copies live in a
 * process-wide device scratch, grown as needed (and the attention kernels' scratch for P with
 * them), outside the device memory plan.
 */
#include "gpu/gpu_grown.h"
#include "gpu/gpu_mla.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "common.h"
#include "cuda_ops.h"
#include "cuda_shapes.h"
#include "gpu/gpu_profile.h"

#define STREAM(be) ((tcu_stream)(be)->ctx)
#define EL sizeof(tsr_bf16)

/* ---- the process-wide scratch and the permutation matrices ----------------------------------- */

/* the composed path's device scratch of at least bytes (process-wide) */
static char *scratch(const tsr_backend *be, size_t bytes) {
    static gpu_grown s;
    return gpu_grown_get(STREAM(be), &s, bytes,
                         "multi-head latent attention's composed path (scratch)");
}

/* rows of width elements, src spitch and dst dpitch elements apart */
static void cp(const tsr_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
               size_t width, size_t rows) {
    tcu_memcpy2d(dst, dpitch * EL, src, spitch * EL, width * EL, rows, STREAM(be));
}

static void *at(const void *p, size_t el) { return (char *)p + el * EL; }

/* out (N, OC) = inp (N, IC) w^T */
static void mm(const tsr_backend *be, void *out, const void *inp, const tsr_bf16 *w, size_t N,
               int IC, int OC) {
    tcu_matmul_forward(out, NULL, inp, w, NULL, (int)N, IC, OC, TSR_GELU_TANH, STREAM(be));
}

/* The matrices of one shape: de (dr, dr) the de-interleaving (the identity without interleave),
 * in its inverse, sum (dr, NH dr) = [de .. de] */
typedef struct perms { const tsr_bf16 *de, *in, *sum; } perms;

/* the source column of de's row j: 2j, 2(j - dr/2) + 1 interleaved, else j */
static int de_col(int j, int dr, int il) {
    return !il ? j : j < dr / 2 ? 2 * j : 2 * (j - dr / 2) + 1;
}

static void perms_fill(uint16_t *h, int dr, int NH, int il) {
    const size_t sq = (size_t)dr * dr, one = 0x3f80; /* bf16 1.0 */
    for (int j = 0; j < dr; j++) {
        const int c = de_col(j, dr, il);
        h[(size_t)j * dr + c] = one, h[sq + (size_t)c * dr + j] = one;
        for (int g = 0; g < NH; g++) h[2 * sq + (size_t)j * NH * dr + (size_t)g * dr + c] = one;
    }
}

static perms perms_of(const tsr_backend *be, int dr, int NH, int il) {
    static tsr_bf16 *dev;
    static int kdr, knh, kil = -1;
    const size_t sq = (size_t)dr * dr, n = 2 * sq + sq * NH;
    if (!dev || kdr != dr || knh != NH || kil != il) {
        uint16_t *h = tsr_calloc(n, sizeof *h);
        perms_fill(h, dr, NH, il);
        if (dev) tcu_sync(STREAM(be));
        tcu_free(dev);
        dev = tcu_malloc(n * EL, "multi-head latent attention's RoPE permutations");
        tcu_memcpy_h2d(dev, h, n * EL, STREAM(be));
        tcu_sync(STREAM(be));
        free(h);
        kdr = dr, knh = NH, kil = il;
    }
    return (perms){dev, dev + sq, dev + 2 * sq};
}

/* ---- the assembly -------------------------------------------------------------------------- */

/* a call's sizes in elements (cpu_mla.h): a qkv row W, q's QW, kv's KW, rope_part's row RW */
typedef struct mla_dims {
    size_t N, NH, dn, dr, dv, dqk, QW, KW, W, RW;
} mla_dims;

/* its scratch: tq, tp (N NH dr) the query rope parts, r (N RW), k1, k2 (N dr) */
typedef struct mla_buf { char *tq, *tp, *r, *k1, *k2; } mla_buf;

static mla_dims dims_of(const tsr_mla_shape *s, int B, int T) {
    mla_dims d = {.N = (size_t)B * T, .NH = (size_t)s->NH, .dn = (size_t)s->dn,
                  .dr = (size_t)s->dr, .dv = (size_t)s->dv};
    d.dqk = d.dn + d.dr, d.QW = d.NH * d.dqk, d.KW = d.NH * (d.dn + d.dv);
    d.W = 2 * d.QW + d.NH * d.dv, d.RW = (d.NH + 2) * d.dr;
    return d;
}

static size_t up(size_t el) { return (el * EL + 255) / 256 * 256; }

static mla_buf bufs_of(const tsr_backend *be, const mla_dims *d) {
    const size_t q = up(d->N * d->NH * d->dr), r = up(d->N * d->RW), k = up(d->N * d->dr);
    char *b = scratch(be, 2 * q + r + 2 * k);
    return (mla_buf){b, b + q, b + 2 * q, b + 2 * q + r, b + 2 * q + r + k};
}

/* the query rope parts of src (rows N NH, pitch dqk, from column dn) de-interleaved into b->r */
static void q_parts_in(const tsr_backend *be, const mla_dims *d, const mla_buf *b,
                       const void *src, const perms *p) {
    const size_t hr = d->NH * d->dr;
    cp(be, b->tq, d->dr, at(src, d->dn), d->dqk, d->dr, d->N * d->NH);
    mm(be, b->tp, b->tq, p->de, d->N * d->NH, (int)d->dr, (int)d->dr);
    cp(be, b->r, d->RW, b->tp, hr, hr, d->N);
}

/* b->r's query parts interleaved again into b->tp (N NH dr), its key into b->k2 (N dr) */
static void parts_out(const tsr_backend *be, const mla_dims *d, const mla_buf *b,
                      const perms *p) {
    const size_t hr = d->NH * d->dr;
    cp(be, b->tq, hr, b->r, d->RW, hr, d->N);
    mm(be, b->tp, b->tq, p->in, d->N * d->NH, (int)d->dr, (int)d->dr);
    cp(be, b->k1, d->dr, at(b->r, hr), d->RW, d->dr, d->N);
    mm(be, b->k2, b->k1, p->in, d->N, (int)d->dr, (int)d->dr);
}

void gpu_mla_qkv_forward(const tsr_backend *be, void *qkv, const void *q, const void *kv,
                         const void *kpe, const int32_t *pos, int p0, const float *inv_freq,
                         int B, int T, const tsr_mla_shape *s) {
    const int prof = gpu_prof_begin(STREAM(be), "mla_qkv_forward", B, T, s->NH);
    const mla_dims d = dims_of(s, B, T);
    const mla_buf b = bufs_of(be, &d);
    const perms p = perms_of(be, s->dr, s->NH, s->interleave);
    q_parts_in(be, &d, &b, q, &p);
    mm(be, b.k1, kpe, p.de, d.N, s->dr, s->dr);
    cp(be, at(b.r, d.NH * d.dr), d.RW, b.k1, d.dr, d.dr, d.N);
    tcu_rope_part_forward((tsr_bf16 *)b.r, pos, p0, inv_freq, B, T, s->NH, 1, s->dr, s->dr,
                          s->mscale, STREAM(be));
    parts_out(be, &d, &b, &p);
    cp(be, qkv, d.W, q, d.QW, d.QW, d.N);
    for (size_t h = 0; h < d.NH; h++) {
        const size_t k = d.QW + h * d.dqk, x = h * (d.dn + d.dv);
        cp(be, at(qkv, h * d.dqk + d.dn), d.W, at(b.tp, h * d.dr), d.NH * d.dr, d.dr, d.N);
        cp(be, at(qkv, k), d.W, at(kv, x), d.KW, d.dn, d.N);
        cp(be, at(qkv, k + d.dn), d.W, b.k2, d.dr, d.dr, d.N);
        cp(be, at(qkv, 2 * d.QW + h * d.dv), d.W, at(kv, x + d.dn), d.KW, d.dv, d.N);
    }
    gpu_prof_end(STREAM(be), prof);
}

void gpu_mla_qkv_backward(const tsr_backend *be, void *dq, void *dkv, void *dkpe,
                          const void *dqkv, const int32_t *pos, int p0, const float *inv_freq,
                          int B, int T, const tsr_mla_shape *s) {
    const int prof = gpu_prof_begin(STREAM(be), "mla_qkv_backward", B, T, s->NH);
    const mla_dims d = dims_of(s, B, T);
    const mla_buf b = bufs_of(be, &d);
    const perms p = perms_of(be, s->dr, s->NH, s->interleave);
    const size_t hr = d.NH * d.dr;
    cp(be, dq, d.QW, dqkv, d.W, d.QW, d.N);
    q_parts_in(be, &d, &b, dq, &p);
    for (size_t h = 0; h < d.NH; h++) /* the key heads' rope gradients side by side */
        cp(be, at(b.tq, h * d.dr), hr, at(dqkv, d.QW + h * d.dqk + d.dn), d.W, d.dr, d.N);
    mm(be, b.k1, b.tq, p.sum, d.N, (int)hr, s->dr);
    cp(be, at(b.r, hr), d.RW, b.k1, d.dr, d.dr, d.N);
    tcu_rope_part_backward((tsr_bf16 *)b.r, pos, p0, inv_freq, B, T, s->NH, 1, s->dr, s->dr,
                           s->mscale, STREAM(be));
    parts_out(be, &d, &b, &p);
    cp(be, at(dq, d.dn), d.dqk, b.tp, d.dr, d.dr, d.N * d.NH);
    tcu_memcpy_d2d(dkpe, b.k2, d.N * d.dr * EL, STREAM(be));
    for (size_t h = 0; h < d.NH; h++) {
        const size_t x = h * (d.dn + d.dv);
        cp(be, at(dkv, x), d.KW, at(dqkv, d.QW + h * d.dqk), d.W, d.dn, d.N);
        cp(be, at(dkv, x + d.dn), d.KW, at(dqkv, 2 * d.QW + h * d.dv), d.W, d.dv, d.N);
    }
    gpu_prof_end(STREAM(be), prof);
}

/* ---- attention over padded heads ------------------------------------------------------------ */

int gpu_attn_padded(const tsr_attn_var *var, int hs) {
    return (var && var->dv > 0 && var->dv != hs) || !tcu_attention_head_size_ok(hs);
}

size_t gpu_attn_scratch_bytes(int B, int T, int NH, int KVH, int hs) {
    return tcu_attention_head_size_ok(hs) ? tcu_attention_scratch_bytes(B, T, NH, KVH, hs) : 0;
}

/* a call's heads: NH query and KVH key/value heads of hs, values of dv, padded to P */
typedef struct pad_dims { int B, T, NH, KVH, hs, dv, P; size_t N, in, pw; } pad_dims;

int gpu_attn_pad_size(int hs, int dv) {
    const int need = dv > hs ? dv : hs;
    static const int sizes[] = {32, 64, 128, 256};
    for (int i = 0; i < 4; i++)
        if (sizes[i] >= need) return sizes[i];
    tsr_die(TSR_EXIT_INTERNAL, "cuda attention: heads of %d and values of %d: the kernels' "
            "largest head size is 256", hs, dv);
}

static pad_dims pad_of(const tsr_attn_var *var, int B, int T, int NH, int KVH, int hs) {
    pad_dims d = {B, T, NH, KVH, hs, var && var->dv > 0 ? var->dv : hs, 0, (size_t)B * T, 0, 0};
    d.P = gpu_attn_pad_size(hs, d.dv);
    d.in = (size_t)(NH + KVH) * hs + (size_t)KVH * d.dv, d.pw = (size_t)(NH + 2 * KVH) * d.P;
    return d;
}

/* the padded copy qp (N, pw) of qkv (N, in): zeros, then each head's columns */
static void pad_qkv(const tsr_backend *be, const pad_dims *d, void *qp, const void *qkv) {
    const size_t P = (size_t)d->P, hs = (size_t)d->hs, kq = (size_t)d->NH * hs;
    tcu_zero(qp, d->N * d->pw * EL, STREAM(be));
    for (int h = 0; h < d->NH + d->KVH; h++)
        cp(be, at(qp, h * P), d->pw, at(qkv, h * hs), d->in, hs, d->N);
    for (int g = 0; g < d->KVH; g++)
        cp(be, at(qp, (d->NH + d->KVH + g) * P), d->pw,
           at(qkv, kq + (size_t)d->KVH * hs + (size_t)g * d->dv), d->in, (size_t)d->dv, d->N);
}

tsr_attn_var gpu_attn_pad_var(const tsr_attn_var *var, int hs) {
    tsr_attn_var v = var ? *var : (tsr_attn_var){0};
    if (!(v.scale > 0)) v.scale = (float)(1.0 / sqrt((double)hs));
    v.dv = 0;
    return v;
}

/* the padded buffers: qkv (N pw), out and dout (N NH P), dqkv (N pw), the kernels' scratch */
typedef struct pad_buf { char *qkv, *out, *dout, *dqkv, *att; } pad_buf;

static pad_buf pad_bufs(const tsr_backend *be, const pad_dims *d, int backward) {
    const size_t q = up(d->N * d->pw), o = up(d->N * (size_t)d->NH * d->P);
    const size_t a = backward ? tcu_attention_scratch_bytes(d->B, d->T, d->NH, d->KVH, d->P) : 0;
    char *b = scratch(be, 2 * q + 2 * o + a);
    return (pad_buf){b, b + q, b + q + o, b + q + 2 * o, b + 2 * q + 2 * o};
}

void gpu_attn_padded_forward(const tsr_backend *be, void *out, float *lse, const void *qkv,
                             const float *slopes, const int32_t *seq, const tsr_attn_var *var,
                             int B, int T, int NH, int KVH, int hs) {
    const pad_dims d = pad_of(var, B, T, NH, KVH, hs);
    const pad_buf b = pad_bufs(be, &d, 0);
    const tsr_attn_var v = gpu_attn_pad_var(var, hs);
    pad_qkv(be, &d, b.qkv, qkv);
    tcu_attention_forward_var((tsr_bf16 *)b.out, lse, (const tsr_bf16 *)b.qkv, slopes, seq, &v, B,
                              T, NH, KVH, d.P, STREAM(be));
    cp(be, out, (size_t)d.dv, b.out, (size_t)d.P, (size_t)d.dv, d.N * NH);
}

/* dqkv's heads (N, in) from the padded gradient (N, pw): written, or added (through the padded
 * output's buffer, free by then) */
static void unpad_grad(const tsr_backend *be, const pad_dims *d, const pad_buf *b, void *dqkv,
                       tsr_grad_mode mode) {
    const size_t P = (size_t)d->P, hs = (size_t)d->hs, kq = (size_t)d->NH * hs;
    void *dst = mode == TSR_GRAD_SET ? dqkv : b->qkv; /* (the padded qkv: read no more) */
    for (int h = 0; h < d->NH + d->KVH; h++)
        cp(be, at(dst, h * hs), d->in, at(b->dqkv, h * P), d->pw, hs, d->N);
    for (int g = 0; g < d->KVH; g++)
        cp(be, at(dst, kq + (size_t)d->KVH * hs + (size_t)g * d->dv), d->in,
           at(b->dqkv, (d->NH + d->KVH + g) * P), d->pw, (size_t)d->dv, d->N);
    if (mode != TSR_GRAD_SET)
        tcu_residual_forward(dqkv, dqkv, dst, d->N * d->in, STREAM(be));
}

void gpu_attn_padded_backward(const tsr_backend *be, void *dqkv, const void *dout,
                              const void *qkv, const void *out, const float *lse,
                              const float *slopes, const int32_t *seq, const tsr_attn_var *var,
                              int B, int T, int NH, int KVH, int hs, tsr_grad_mode mode) {
    const pad_dims d = pad_of(var, B, T, NH, KVH, hs);
    const pad_buf b = pad_bufs(be, &d, 1);
    const tsr_attn_var v = gpu_attn_pad_var(var, hs);
    const size_t rows = d.N * NH, o = rows * d.P * EL;
    pad_qkv(be, &d, b.qkv, qkv);
    tcu_zero(b.out, o, STREAM(be));
    tcu_zero(b.dout, o, STREAM(be));
    cp(be, b.out, (size_t)d.P, out, (size_t)d.dv, (size_t)d.dv, rows);
    cp(be, b.dout, (size_t)d.P, dout, (size_t)d.dv, (size_t)d.dv, rows);
    tcu_attention_backward_var((tsr_bf16 *)b.dqkv, (const tsr_bf16 *)b.dout,
                               (const tsr_bf16 *)b.qkv, (const tsr_bf16 *)b.out, lse, slopes, seq,
                               &v, b.att, B, T, NH, KVH, d.P, TSR_GRAD_SET, STREAM(be));
    unpad_grad(be, &d, &b, dqkv, mode);
}

/* ---- decoding over the compressed caches ----------------------------------------------------- */

/* A decode call in the decode kernel's terms (tcu_attention_decode_var): one key/value head of W
 * = dr + kvr shared by the NH query heads, a head [RoPE part (dr) | latent part (kvr)]: the query
 * head [q_rope turned | Wk^T q_nope], the key [kpe turned | latent], the value the same; a qkv row
 * XW = (NH + 2) W. The RoPE parts go through the de-interleaving first (both q's and k's: their
 * dot product is the interleaved one's), so the cache holds the key de-interleaved. */
typedef struct dec_dims { size_t n, NH, dn, dr, dv, kvr, W, dqk, XW, t; } dec_dims;

/* its scratch: x (n XW) the kernel's rows, o (n NH W) its output, t1, t2 (t) the per-head parts */
typedef struct dec_buf { char *x, *o, *t1, *t2; } dec_buf;

static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : b > c ? b : c; }

static dec_dims dec_dims_of(const tsr_mla_shape *s, int kvr, int n) {
    dec_dims d = {.n = (size_t)n, .NH = (size_t)s->NH, .dn = (size_t)s->dn, .dr = (size_t)s->dr,
                  .dv = (size_t)s->dv, .kvr = (size_t)kvr};
    d.W = d.dr + d.kvr, d.dqk = d.dn + d.dr, d.XW = (d.NH + 2) * d.W;
    d.t = d.n * max3(d.NH * d.dr, d.dn > d.dv ? d.dn : d.dv, d.kvr);
    return d;
}

static dec_buf dec_bufs(const tsr_backend *be, const dec_dims *d) {
    const size_t x = up(d->n * d->XW), o = up(d->n * d->NH * d->W), t = up(d->t);
    char *b = scratch(be, x + o + 2 * t);
    return (dec_buf){b, b + x, b + x + o, b + x + o + t};
}

/* x's RoPE parts (de-interleaved, not yet turned) and the key's and value's latent parts */
static void dec_parts(const tsr_backend *be, const dec_dims *d, const dec_buf *b, const void *q,
                      const void *cn, const void *kpe, const perms *p) {
    const size_t n = d->n, NH = d->NH, dr = d->dr;
    cp(be, b->t1, dr, at(q, d->dn), d->dqk, dr, n * NH);
    mm(be, b->t2, b->t1, p->de, n * NH, (int)dr, (int)dr);
    for (size_t h = 0; h < NH; h++)
        cp(be, at(b->x, h * d->W), d->XW, at(b->t2, h * dr), NH * dr, dr, n);
    mm(be, b->t1, kpe, p->de, n, (int)dr, (int)dr);
    for (size_t g = NH; g < NH + 2; g++) {
        cp(be, at(b->x, g * d->W), d->XW, b->t1, dr, dr, n);
        cp(be, at(b->x, g * d->W + dr), d->XW, cn, d->kvr, d->kvr, n);
    }
}

/* each query head's latent part: Wk^T q_nope (kv_b's key rows of the head absorbed: dinp of a
 * product with them, dout @ w) */
static void dec_absorb(const tsr_backend *be, const dec_dims *d, const dec_buf *b, const void *q,
                       const tsr_bf16 *kvb) {
    for (size_t h = 0; h < d->NH; h++) {
        const tsr_bf16 *wk = kvb + h * (d->dn + d->dv) * d->kvr;
        cp(be, b->t1, d->dn, at(q, h * d->dqk), d->NH * d->dqk, d->dn, d->n);
        tcu_matmul_backward((tsr_bf16 *)b->t2, NULL, NULL, (const tsr_bf16 *)b->t1, NULL, wk,
                            (int)d->n, (int)d->kvr, (int)d->dn, TSR_GRAD_SET, STREAM(be));
        cp(be, at(b->x, h * d->W + d->dr), d->XW, b->t2, d->kvr, d->kvr, d->n);
    }
}

/* out (n, NH dv): each head's weighted latent (o's columns dr..W) through kv_b's value rows */
static void dec_values(const tsr_backend *be, const dec_dims *d, const dec_buf *b, void *out,
                       const tsr_bf16 *kvb) {
    for (size_t h = 0; h < d->NH; h++) {
        const tsr_bf16 *wv = kvb + (h * (d->dn + d->dv) + d->dn) * d->kvr;
        cp(be, b->t1, d->kvr, at(b->o, h * d->W + d->dr), d->NH * d->W, d->kvr, d->n);
        mm(be, b->t2, b->t1, wv, d->n, (int)d->kvr, (int)d->dv);
        cp(be, at(out, h * d->dv), d->NH * d->dv, b->t2, d->dv, d->dv, d->n);
    }
}

void gpu_mla_decode(const tsr_backend *be, void *out, void *cache, const void *q, const void *cn,
                    const void *kpe, const void *kvb, const float *inv_freq, float scale, int kvr,
                    const tsr_mla_shape *s, const tsr_mla_rows *rows, float *scr, int nscr) {
    (void)scr, (void)nscr; /* (the host's per-thread scratch: this path keeps its own) */
    if (rows->n == 0) return;
    const dec_dims d = dec_dims_of(s, kvr, rows->n);
    const size_t half = (size_t)rows->cap * d.W; /* a slot: the keys transposed, the values */
    if (rows->slot_stride < 2 * half)
        tsr_die(TSR_EXIT_INTERNAL, "cuda mla_decode: slots of %zu elements, need %zu (two copies "
                "of the cache: tsr_mla_cache_copies)", rows->slot_stride, 2 * half);
    const int prof = gpu_prof_begin(STREAM(be), "mla_decode", rows->n, s->NH, (int)d.W);
    const dec_buf b = dec_bufs(be, &d);
    const perms p = perms_of(be, s->dr, s->NH, s->interleave);
    dec_parts(be, &d, &b, q, cn, kpe, &p);
    dec_absorb(be, &d, &b, q, kvb);
    tcu_rope_part_forward((tsr_bf16 *)b.x, rows->slot ? rows->rpos : NULL, rows->rp0, inv_freq, 1,
                          rows->n, s->NH, 1, (int)d.W, s->dr, s->mscale, STREAM(be));
    const tsr_attn_var var = {.scale = scale};
    tsr_bf16 *kt = (tsr_bf16 *)cache + (rows->slot ? 0 : (size_t)rows->slot0 * rows->slot_stride);
    tcu_attention_decode_var((tsr_bf16 *)b.o, kt, kt + half, (const tsr_bf16 *)b.x, NULL, &var,
                             rows->slot, rows->pos, rows->seg, rows->p0, rows->seg0, rows->n,
                             rows->slot_stride, rows->cap, s->NH, 1, (int)d.W, STREAM(be));
    dec_values(be, &d, &b, out, kvb);
    gpu_prof_end(STREAM(be), prof);
}
