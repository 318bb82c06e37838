/* gpu_mla_ring.c — ring blocks over padded heads (gpu_mla_ring.h; docs/cuda.md "Multi-head latent
 * attention"): no kernel of its own, only tcu_* ops.
 *
 * A block (ops.h tsr_ring_block) whose heads the ring kernels lack (gpu_attn_padded: query and
 * key heads of hs, value heads of dv) runs as gpu_mla.c's padded attention does: its query rows
 * (whole qkv rows, [q NH hs | k KVH hs | v KVH dv]) and key/value rows ([k KVH hs | v KVH dv])
 * copied into zeroed rows of heads of P = gpu_attn_pad_size(hs, dv), the scale made explicit
 * (gpu_attn_pad_var). Zero columns change no q.k and a zero value column gives a zero output
 * column, so the padded block's output is the block's, each head's first dv columns. The fp32
 * sums the ring keeps (the forward's output acc, the backward's dq and dkv) are copied into the
 * padded layout, the kernels merge or add into them there as they would in place, and they are
 * copied back: the same fp32 operations on the same values, the padding's columns dropped. The
 * backward's dout and out go padded with zeros, as the padded forward's output would be.
 * The copies live in a process-wide device scratch, grown as needed (with the ring kernels'
 * scratch for P), outside the device memory plan; the backend's ring_scratch is not used.
 */
#include "gpu/gpu_mla_ring.h"

#include <stddef.h>

#include "cuda_ops.h"
#include "gpu/gpu_grown.h"
#include "gpu/gpu_mla.h"

#define STREAM(be) ((tcu_stream)(be)->ctx)
#define EL sizeof(tsr_bf16)
#define F sizeof(float)

/* a block's heads: NH query, KVH key/value heads of hs, values of dv, padded to P; the padded
 * rows' widths (elements) of a qkv row, a key/value row, an output row; the rows the padded
 * copies of q (and acc, dout, out, dq) and of kv (and dkv) span */
typedef struct rdims {
    int B, NH, KVH, hs, dv, P;
    size_t QKVp, KVWp, CP, qr, kr;
} rdims;

static rdims rdims_of(const tsr_ring_block *k) {
    rdims d = {k->B, k->NH, k->KVH, k->hs, k->var && k->var->dv > 0 ? k->var->dv : k->hs, 0,
               0, 0, 0, 0, 0};
    d.P = gpu_attn_pad_size(d.hs, d.dv);
    d.QKVp = (size_t)(d.NH + 2 * d.KVH) * d.P, d.KVWp = (size_t)2 * d.KVH * d.P;
    d.CP = (size_t)d.NH * d.P;
    d.qr = (size_t)(d.B - 1) * k->qbs + k->Tq, d.kr = (size_t)(d.B - 1) * k->kbs + k->Tk;
    return d;
}

/* the padded copies: q, kv bf16; acc (the forward's acc, the backward's dq) fp32; dout, out bf16
 * and dkv fp32 (the backward); the ring kernels' scratch */
typedef struct rbuf { char *q, *kv, *acc, *dout, *out, *dkv, *scr; } rbuf;

static size_t up(size_t bytes) { return (bytes + 255) / 256 * 256; }

static rbuf rbufs_of(const tsr_backend *be, const rdims *d, const tsr_ring_block *k, int bwd) {
    static gpu_grown s;
    const size_t q = up(d->qr * d->QKVp * EL), kv = up(d->kr * d->KVWp * EL);
    const size_t acc = up(d->qr * d->CP * F), o = bwd ? up(d->qr * d->CP * EL) : 0;
    const size_t dkv = bwd ? up(d->kr * d->KVWp * F) : 0;
    const size_t scr = tcu_ring_scratch_bytes(d->B, k->Tq + k->Tk, d->NH, d->KVH, d->P);
    char *b = gpu_grown_get(STREAM(be), &s, q + kv + acc + 2 * o + dkv + scr,
                            "ring attention over padded heads (scratch)");
    rbuf r = {b, b + q, b + q + kv, b + q + kv + acc, b + q + kv + acc + o, 0, 0};
    r.dkv = r.out + o, r.scr = r.dkv + dkv;
    return r;
}

/* the heads of a row: k runs of n[i] heads of w[i] elements, el bytes each */
typedef struct heads { int n[3], w[3], k; size_t el; } heads;

/* rows rows of heads h between a padded copy (pad, its rows pp elements apart, each head P) and
 * the rows they stand for (raw, rp apart): into the copy (in), or back */
static void move(const tsr_backend *be, char *pad, size_t pp, char *raw, size_t rp,
                 const heads *h, int P, size_t rows, int in) {
    const size_t el = h->el;
    size_t ro = 0, po = 0;
    for (int s = 0; s < h->k; s++)
        for (int i = 0; i < h->n[s]; i++, ro += (size_t)h->w[s], po += (size_t)P) {
            char *p = pad + po * el, *r = raw + ro * el;
            if (in) tcu_memcpy2d(p, pp * el, r, rp * el, (size_t)h->w[s] * el, rows, STREAM(be));
            else tcu_memcpy2d(r, rp * el, p, pp * el, (size_t)h->w[s] * el, rows, STREAM(be));
        }
}

/* move's rows of every sequence: rows of each, the sequences bs rows apart in both */
static void move_seqs(const tsr_backend *be, const rdims *d, void *pad, size_t pp,
                      const void *raw, size_t rp, const heads *h, int bs, int rows, int in) {
    for (int b = 0; b < d->B; b++) {
        const size_t r0 = (size_t)b * bs;
        move(be, (char *)pad + r0 * pp * h->el, pp, (char *)raw + r0 * rp * h->el, rp, h, d->P,
             (size_t)rows, in);
    }
}

/* the padded block kp (its variants in v) of k: q's and kv's rows copied */
static void lay_out(const tsr_backend *be, const rdims *d, const rbuf *b, const tsr_ring_block *k,
                    tsr_ring_block *kp, tsr_attn_var *v) {
    const heads q = {{d->NH, d->KVH, d->KVH}, {d->hs, d->hs, d->dv}, 3, EL};
    const heads kv = {{d->KVH, d->KVH}, {d->hs, d->dv}, 2, EL};
    tcu_zero(b->q, d->qr * d->QKVp * EL, STREAM(be));
    tcu_zero(b->kv, d->kr * d->KVWp * EL, STREAM(be));
    move_seqs(be, d, b->q, d->QKVp, k->q, (size_t)k->ldq, &q, k->qbs, k->Tq, 1);
    move_seqs(be, d, b->kv, d->KVWp, k->kv, (size_t)k->ldkv, &kv, k->kbs, k->Tk, 1);
    *v = gpu_attn_pad_var(k->var, d->hs);
    *kp = *k;
    kp->hs = d->P, kp->q = b->q, kp->kv = b->kv;
    kp->ldq = (int)d->QKVp, kp->ldkv = (int)d->KVWp, kp->var = v;
}

void gpu_ring_padded_forward(const tsr_backend *be, float *acc, float *lse,
                             const tsr_ring_block *k, int merge) {
    const rdims d = rdims_of(k);
    const rbuf b = rbufs_of(be, &d, k, 0);
    const heads o = {{d.NH}, {d.dv}, 1, F};
    const size_t C = (size_t)d.NH * d.dv;
    tsr_ring_block kp;
    tsr_attn_var v;
    lay_out(be, &d, &b, k, &kp, &v);
    tcu_zero(b.acc, d.qr * d.CP * F, STREAM(be));
    if (merge) move_seqs(be, &d, b.acc, d.CP, acc, C, &o, k->qbs, k->Tq, 1);
    tcu_ring_forward((float *)b.acc, lse, &kp, merge, b.scr, STREAM(be));
    move_seqs(be, &d, b.acc, d.CP, acc, C, &o, k->qbs, k->Tq, 0);
}

/* the backward's sums dq (lddq) and dkv (lddkv) into the padded copies (in), or back */
static void sums(const tsr_backend *be, const rdims *d, const rbuf *b, const tsr_ring_block *k,
                 float *dq, int lddq, float *dkv, int lddkv, int in) {
    const heads hq = {{d->NH}, {d->hs}, 1, F};
    const heads hkv = {{d->KVH, d->KVH}, {d->hs, d->dv}, 2, F};
    move_seqs(be, d, b->acc, d->CP, dq, (size_t)lddq, &hq, k->qbs, k->Tq, in);
    move_seqs(be, d, b->dkv, d->KVWp, dkv, (size_t)lddkv, &hkv, k->kbs, k->Tk, in);
}

void gpu_ring_padded_backward(const tsr_backend *be, float *dq, int lddq, float *dkv, int lddkv,
                              const void *dout, const void *out, const float *lse,
                              const tsr_ring_block *k) {
    const rdims d = rdims_of(k);
    const rbuf b = rbufs_of(be, &d, k, 1);
    const heads o = {{d.NH}, {d.dv}, 1, EL};
    const size_t C = (size_t)d.NH * d.dv, oe = d.qr * d.CP * EL;
    tsr_ring_block kp;
    tsr_attn_var v;
    lay_out(be, &d, &b, k, &kp, &v);
    tcu_zero(b.dout, oe, STREAM(be));
    tcu_zero(b.out, oe, STREAM(be));
    move_seqs(be, &d, b.dout, d.CP, dout, C, &o, k->qbs, k->Tq, 1);
    move_seqs(be, &d, b.out, d.CP, out, C, &o, k->qbs, k->Tq, 1);
    tcu_zero(b.acc, d.qr * d.CP * F, STREAM(be));
    tcu_zero(b.dkv, d.kr * d.KVWp * F, STREAM(be));
    sums(be, &d, &b, k, dq, lddq, dkv, lddkv, 1);
    tcu_ring_backward((float *)b.acc, (int)d.CP, (float *)b.dkv, (int)d.KVWp,
                      (const tsr_bf16 *)b.dout, (const tsr_bf16 *)b.out, lse, &kp, b.scr,
                      STREAM(be));
    sums(be, &d, &b, k, dq, lddq, dkv, lddkv, 0);
}
