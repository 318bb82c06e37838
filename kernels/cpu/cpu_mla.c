/* cpu_mla.c — multi-head latent attention's assembly of the attention input and its transpose
 * (cpu_mla.h), fp32. One task per row; a row's rotation is cpu_llama.c's RoPE (the angle, its
 * cosine and sine times mscale formed in double and rounded to float, the rotation in fp32), over
 * the pairs the layout names.
 */
#include "cpu_mla.h"

#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu_internal.h"

/* cs, sn (dr/2): row n's cosine and sine (sign -1: the transpose's) times mscale */
static void row_angles(float *cs, float *sn, const int32_t *pos, int p0, long n, int T,
                       const float *inv_freq, int half, float mscale, double sign) {
    const double p = pos ? (double)pos[n] : (double)(n % T) + p0;
    for (int i = 0; i < half; i++) {
        const double a = p * (double)inv_freq[i];
        cs[i] = (float)(mscale * cos(a));
        sn[i] = (float)(sign * mscale * sin(a));
    }
}

/* x (dr) turned in place: pair i is (i, i + dr/2), or (2i, 2i + 1) interleaved */
static void turn(float *x, const float *cs, const float *sn, int dr, int interleave) {
    const int half = dr / 2;
    for (int i = 0; i < half; i++) {
        float *a = interleave ? x + 2 * i : x + i, *b = interleave ? a + 1 : a + half;
        const float x0 = *a, y0 = *b;
        *a = x0 * cs[i] - y0 * sn[i];
        *b = y0 * cs[i] + x0 * sn[i];
    }
}

static void check_shape(const char *op, const tsr_mla_shape *s) {
    if (s->NH < 1 || s->dn < 1 || s->dv < 1 || s->dr < 2 || s->dr % 2)
        tsr_die(TSR_EXIT_INTERNAL, "cpu %s: NH = %d heads of dn = %d, dr = %d, dv = %d: "
                "expected positive sizes and an even dr", op, s->NH, s->dn, s->dr, s->dv);
}

/* a row's layout (cpu_mla.h): qkv's W = [q heads (QW) | k heads (QW) | v heads], q's QW = NH dqk,
 * kv's KW = NH (dn + dv) */
typedef struct {
    const tsr_mla_shape *s;
    int dn, dr, dv, dqk;
    size_t W, QW, KW;
} mla_layout;

/* row n of the B T rows, its RoPE cosines and sines in cs, sn (dr/2 each); ctx the op's buffers */
typedef void (*mla_row_fn)(const mla_layout *L, const void *ctx, long n, const float *cs,
                           const float *sn);

/* fn for every row, the rows in parallel (one task per row); sign -1: the transpose's angles */
static void each_row(const char *op, const tsr_mla_shape *s, const int32_t *pos, int p0,
                     const float *inv_freq, int B, int T, double sign, mla_row_fn fn,
                     const void *ctx) {
    check_shape(op, s);
    const int dqk = s->dn + s->dr;
    const mla_layout L = {s, s->dn, s->dr, s->dv, dqk, (size_t)s->NH * (2 * dqk + s->dv),
                          (size_t)s->NH * dqk, (size_t)s->NH * (s->dn + s->dv)};
    const long N = (long)B * T;
#pragma omp parallel if (N * (long)L.W >= CPU_PAR_MIN)
    {
        float *cs = tsr_malloc((size_t)L.dr * sizeof *cs), *sn = cs + L.dr / 2;
#pragma omp for schedule(static)
        for (long n = 0; n < N; n++) {
            row_angles(cs, sn, pos, p0, n, T, inv_freq, L.dr / 2, s->mscale, sign);
            fn(&L, ctx, n, cs, sn);
        }
        free(cs);
    }
}

typedef struct {
    float *qkv;
    const float *q, *kv, *kpe;
} mla_fwd_io;

static void qkv_forward_row(const mla_layout *L, const void *ctx, long n, const float *cs,
                            const float *sn) {
    const mla_fwd_io *io = ctx;
    const int dn = L->dn, dr = L->dr, dv = L->dv, dqk = L->dqk, il = L->s->interleave;
    float *o = io->qkv + (size_t)n * L->W, *k = o + L->QW, *v = k + L->QW;
    const float *kvn = io->kv + (size_t)n * L->KW;
    memcpy(o, io->q + (size_t)n * L->QW, L->QW * sizeof *o);
    for (int h = 0; h < L->s->NH; h++) {
        float *kh = k + (size_t)h * dqk;
        turn(o + (size_t)h * dqk + dn, cs, sn, dr, il);
        memcpy(kh, kvn + (size_t)h * (dn + dv), (size_t)dn * sizeof *kh);
        memcpy(v + (size_t)h * dv, kvn + (size_t)h * (dn + dv) + dn, (size_t)dv * sizeof *v);
        if (h == 0) { /* the RoPE key, turned once, then every head's copy */
            memcpy(kh + dn, io->kpe + (size_t)n * dr, (size_t)dr * sizeof *kh);
            turn(kh + dn, cs, sn, dr, il);
        } else {
            memcpy(kh + dn, k + dn, (size_t)dr * sizeof *kh);
        }
    }
}

void cpu_mla_qkv_forward(float *qkv, const float *q, const float *kv, const float *kpe,
                         const int32_t *pos, int p0, const float *inv_freq, int B, int T,
                         const tsr_mla_shape *s) {
    const mla_fwd_io io = {qkv, q, kv, kpe};
    each_row("mla_qkv_forward", s, pos, p0, inv_freq, B, T, 1.0, qkv_forward_row, &io);
}

typedef struct {
    float *dq, *dkv, *dkpe;
    const float *dqkv;
} mla_bwd_io;

static void qkv_backward_row(const mla_layout *L, const void *ctx, long n, const float *cs,
                             const float *sn) {
    const mla_bwd_io *io = ctx;
    const int dn = L->dn, dr = L->dr, dv = L->dv, dqk = L->dqk, il = L->s->interleave;
    const float *g = io->dqkv + (size_t)n * L->W, *gk = g + L->QW, *gv = gk + L->QW;
    float *q = io->dq + (size_t)n * L->QW, *kvn = io->dkv + (size_t)n * L->KW;
    float *pe = io->dkpe + (size_t)n * dr;
    memcpy(q, g, L->QW * sizeof *q);
    memset(pe, 0, (size_t)dr * sizeof *pe);
    for (int h = 0; h < L->s->NH; h++) {
        const float *kh = gk + (size_t)h * dqk;
        turn(q + (size_t)h * dqk + dn, cs, sn, dr, il);
        memcpy(kvn + (size_t)h * (dn + dv), kh, (size_t)dn * sizeof *kvn);
        memcpy(kvn + (size_t)h * (dn + dv) + dn, gv + (size_t)h * dv, (size_t)dv * sizeof *kvn);
        for (int i = 0; i < dr; i++) pe[i] += kh[dn + i];
    }
    turn(pe, cs, sn, dr, il);
}

void cpu_mla_qkv_backward(float *dq, float *dkv, float *dkpe, const float *dqkv,
                          const int32_t *pos, int p0, const float *inv_freq, int B, int T,
                          const tsr_mla_shape *s) {
    const mla_bwd_io io = {dq, dkv, dkpe, dqkv};
    each_row("mla_qkv_backward", s, pos, p0, inv_freq, B, T, -1.0, qkv_backward_row, &io);
}

/* ---- decoding over the compressed caches ------------------------------------------------- */

/* row i's slot, position, RoPE position and first visible position */
static void row_at(const tsr_mla_rows *r, int i, int *slot, int *pos, int *rpos, int *seg) {
    if (r->slot) {
        *slot = r->slot[i], *pos = r->pos[i], *rpos = r->rpos[i], *seg = r->seg[i];
        return;
    }
    *slot = r->slot0, *pos = r->p0 + i, *rpos = r->rp0 + i, *seg = r->seg0;
}

/* every row's latent and turned RoPE key into its slot's cache at its position */
static void mla_store(float *cache, const float *cn, const float *kpe, const float *inv_freq,
                      int kvr, const tsr_mla_shape *s, const tsr_mla_rows *r) {
    const int dr = s->dr, W = kvr + dr;
    float *cs = tsr_malloc((size_t)dr * sizeof *cs), *sn = cs + dr / 2;
    for (int i = 0; i < r->n; i++) {
        int slot, pos, rpos, seg;
        row_at(r, i, &slot, &pos, &rpos, &seg);
        float *c = cache + (size_t)slot * r->slot_stride + (size_t)pos * W;
        memcpy(c, cn + (size_t)i * kvr, (size_t)kvr * sizeof *c);
        memcpy(c + kvr, kpe + (size_t)i * dr, (size_t)dr * sizeof *c);
        row_angles(cs, sn, NULL, rpos, 0, 1, inv_freq, dr / 2, s->mscale, 1.0);
        turn(c + kvr, cs, sn, dr, s->interleave);
    }
    free(cs);
}

/* out (dv) = head h of one row over positions seg..pos of its cache c (W = kvr + dr a position):
 * qa = [Wk^T q_nope | q_rope turned] into work (kvr + dr), the scores into work + kvr + dr, the
 * weighted latent o into the last kvr */
static void mla_head(float *out, float *work, const float *c, const float *qh, const float *wk,
                     const float *wv, const float *cs, const float *sn, float scale, int kvr,
                     const tsr_mla_shape *s, int seg, int pos) {
    const int dn = s->dn, dr = s->dr, W = kvr + dr, n = pos - seg + 1;
    float *qa = work, *sc = qa + W, *o = sc + n;
    for (int k = 0; k < kvr; k++) qa[k] = 0.0f;
    for (int d = 0; d < dn; d++) /* Wk^T q_nope: kv_b's key rows of the head absorbed */
        for (int k = 0; k < kvr; k++) qa[k] = fmaf(qh[d], wk[(size_t)d * kvr + k], qa[k]);
    memcpy(qa + kvr, qh + dn, (size_t)dr * sizeof *qa);
    turn(qa + kvr, cs, sn, dr, s->interleave);
    float mx = -INFINITY, sum = 0.0f;
    for (int j = 0; j < n; j++) {
        const float *cj = c + (size_t)(seg + j) * W;
        float d = 0.0f;
        for (int k = 0; k < W; k++) d = fmaf(qa[k], cj[k], d);
        sc[j] = scale * d;
        mx = sc[j] > mx ? sc[j] : mx;
    }
    for (int j = 0; j < n; j++) sum += sc[j] = cpu_expf(sc[j] - mx);
    for (int k = 0; k < kvr; k++) o[k] = 0.0f;
    for (int j = 0; j < n; j++) {
        const float *cj = c + (size_t)(seg + j) * W, p = sc[j] / sum;
        for (int k = 0; k < kvr; k++) o[k] = fmaf(p, cj[k], o[k]);
    }
    for (int e = 0; e < s->dv; e++) { /* kv_b's value rows of the head, after the sum */
        float y = 0.0f;
        for (int k = 0; k < kvr; k++) y = fmaf(wv[(size_t)e * kvr + k], o[k], y);
        out[e] = y;
    }
}

void cpu_mla_decode(float *out, float *cache, const float *q, const float *cn, const float *kpe,
                    const float *kvb, const float *inv_freq, float scale, int kvr,
                    const tsr_mla_shape *s, const tsr_mla_rows *rows, float *scratch,
                    int nscratch) {
    check_shape("mla_decode", s);
    const int NH = s->NH, dqk = s->dn + s->dr, dr = s->dr, KW = s->dn + s->dv;
    const size_t per = (size_t)rows->cap + 2 * (size_t)kvr + 2 * (size_t)dr;
    mla_store(cache, cn, kpe, inv_freq, kvr, s, rows);
    const long tasks = (long)rows->n * NH;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nscratch) if (tasks * rows->cap * kvr >= CPU_PAR_MIN)
    for (long t = 0; t < tasks; t++) {
        const int i = (int)(t / NH), h = (int)(t % NH);
        int slot, pos, rpos, seg;
        row_at(rows, i, &slot, &pos, &rpos, &seg);
        float *work = scratch + (size_t)omp_get_thread_num() * per, *cs = work + per - dr;
        row_angles(cs, cs + dr / 2, NULL, rpos, 0, 1, inv_freq, dr / 2, s->mscale, 1.0);
        const float *wk = kvb + (size_t)h * KW * kvr;
        mla_head(out + ((size_t)i * NH + h) * s->dv, work,
                 cache + (size_t)slot * rows->slot_stride, q + ((size_t)i * NH + h) * dqk, wk,
                 wk + (size_t)s->dn * kvr, cs, cs + dr / 2, scale, kvr, s, seg, pos);
    }
}
