/* test_ring.c — context parallelism's pieces that need no MPI (src/model/model_ring.c,
 * kernels/cpu/cpu_ring.c; docs/parallelism.md):
 *   - the zig-zag split: for N = 1, 2, 4, 8 the ranks' local positions are a permutation of the
 *     sequence, rank r holds chunks r and 2N-1-r in order, and every rank's causal attention work
 *     (sum over its positions of p + 1 keys) is the same; ring_split and ring_join are inverses
 *     (B = 3 rows, every rank's share gathered);
 *   - the block kernels and the log-sum-exp merge: the keys of a sequence cut into 2 and into 4
 *     blocks of unequal sizes, each block's attention merged into the output by ring_forward,
 *     gives the CPU's whole-sequence attention (cpu_attention_forward) within 2e-6 + 2e-6 |ref|
 *     for the output; ring_backward summed over the blocks, with the merged log-sum-exp, gives its
 *     dq, dk, dv within 1e-5 of the largest gradient. Causal and document masks (segments
 *     straddling the blocks' edges), ALiBi, grouped-query attention (4 query heads on 2);
 *   - a wrong merge is seen: the last block written over instead of merged moves the output by
 *     more than 1e-2;
 *   - the layer's variants (ops.h tsr_attn_var in the blocks): a sliding window of 7 (blocks
 *     partly and wholly outside the band), sinks, a scale other than 1 / sqrt(hs) and a soft cap,
 *     with the document mask and ALiBi, and sinks alone on the causal mask: the merged output,
 *     the summed dq, dk, dv and the sink gradients (taken in one block per row) equal
 *     cpu_attention_forward/backward with the same variants; the blocks without the sinks (each
 *     row's denominator without e^sink) miss by more than 1e-2;
 *   - value heads of their own size (tsr_attn_var.dv, multi-head latent attention's ring): the
 *     blocks' output and gradients equal the whole-sequence attention's with the same dv.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_ring.h"
#include "ops.h"
#include "tap.h"
#include "xorshift.h"

enum { B = 2, T = 24, NH = 4, KVH = 2, HS = 8, QKV = (NH + 2 * KVH) * HS, C = NH * HS };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(void) { /* in [-1, 1) */
    return (float)(xorshift64s(&rng) >> 40) / (float)(1 << 23) - 1.0f;
}

static void check_layout(void) {
    int ok_perm = 1, ok_chunks = 1, ok_work = 1;
    for (int N = 1; N <= 8; N *= 2) {
        const int TT = 2 * N * 3, Tl = TT / N, c = 3;
        int *seen = calloc((size_t)TT, sizeof *seen);
        long work0 = -1;
        for (int r = 0; r < N; r++) {
            long work = 0;
            for (int t = 0; t < Tl; t++) {
                const int p = ring_position(N, r, TT, t), chunk = t < c ? r : 2 * N - 1 - r;
                seen[p]++;
                ok_chunks &= p / c == chunk && p % c == t % c;
                work += p + 1;
            }
            if (work0 < 0) work0 = work;
            ok_work &= work == work0;
        }
        for (int p = 0; p < TT; p++) ok_perm &= seen[p] == 1;
        free(seen);
    }
    tap_ok(ok_perm, "zig-zag: the local positions of N = 1, 2, 4, 8 ranks are a permutation of "
                    "the sequence");
    tap_ok(ok_chunks, "zig-zag: rank r holds chunks r and 2N-1-r, in order");
    tap_ok(ok_work, "zig-zag: every rank's causal attention work (its positions' key counts) is "
                    "the same");
    int ok = 1;
    for (int N = 1; N <= 4; N *= 2) {
        const int TT = 16, Tl = TT / N;
        int32_t full[3 * 16], back[3 * 16], all[3 * 16];
        for (int i = 0; i < 3 * TT; i++) full[i] = 1000 * i + 7;
        for (int r = 0; r < N; r++) ring_split(all + r * 3 * Tl, full, 4, 3, N, r, TT);
        ring_join(back, all, 4, 3, N, TT);
        ok &= !memcmp(full, back, sizeof full);
        for (int r = 0; r < N; r++)
            for (int b = 0; b < 3; b++)
                for (int t = 0; t < Tl; t++)
                    ok &= all[(r * 3 + b) * Tl + t] == full[b * TT + ring_position(N, r, TT, t)];
    }
    tap_ok(ok, "ring_split gives each rank its positions of every row; ring_join undoes it");
}

/* lo, hi (B,T): each position's segment's first position and one past its last (runs of seq) */
static void segments(int32_t *lo, int32_t *hi, const int32_t *seq) {
    for (int b = 0; b < B; b++) {
        const int32_t *s = seq + b * T;
        for (int t = 0; t < T; t++) lo[b * T + t] = t && s[t] == s[t - 1] ? lo[b * T + t - 1] : t;
        for (int t = T - 1; t >= 0; t--)
            hi[b * T + t] = t + 1 < T && s[t] == s[t + 1] ? hi[b * T + t + 1] : t + 1;
    }
}

typedef struct blocks_out {
    float out[B * T * C], lse[B * NH * T], dqkv[B * T * QKV];
} blocks_out;

/* The whole sequence's queries against its keys cut at the positions in cut[] (nb blocks), with
 * the variants var (NULL: none); the sink gradients taken in the first block */
static void run_blocks(blocks_out *o, const float *qkv, const float *dout, const int32_t *lo,
                       const int32_t *hi, const float *slopes, const tsr_attn_var *var,
                       const int *cut, int nb, int overwrite_last) {
    tsr_ring_block k = {.B = B, .NH = NH, .KVH = KVH, .hs = HS, .Tq = T, .qoff = 0, .q = qkv,
                        .ldq = QKV, .ldkv = QKV, .qbs = T, .kbs = T, .lo = lo, .hi = hi, .T = T,
                        .slopes = slopes, .var = var};
    memset(o, 0, sizeof *o);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nb; i++) {
            k.koff = cut[i];
            k.Tk = cut[i + 1] - cut[i];
            k.kv = qkv + (size_t)cut[i] * QKV + C;
            k.sink_grad = i == 0;
            if (pass == 0)
                tsr_cpu_ops.ring_forward(o->out, o->lse, &k, i > 0 && !(overwrite_last && i == nb - 1));
            else
                tsr_cpu_ops.ring_backward(o->dqkv, QKV, o->dqkv + (size_t)cut[i] * QKV + C, QKV,
                                          dout, o->out, o->lse, &k);
        }
}

static double max_abs(const float *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

static void check_blocks(int doc, int alibi) {
    static float qkv[B * T * QKV], dout[B * T * C], att[B * NH * T * T], ref[B * T * C],
        dref[B * T * QKV];
    static int32_t seq[B * T], lo[B * T], hi[B * T];
    static blocks_out o;
    const float slopes[NH] = {0.5f, 0.25f, 0.125f, 0.0625f};
    for (int i = 0; i < B * T * QKV; i++) qkv[i] = urand();
    for (int i = 0; i < B * T * C; i++) dout[i] = urand();
    for (int b = 0; b < B; b++) /* documents of 5, 9 and 10 positions: across the cuts below */
        for (int t = 0; t < T; t++) seq[b * T + t] = (t >= 5 + b) + (t >= 14);
    segments(lo, hi, seq);
    const float *sl = alibi ? slopes : NULL;
    const int32_t *sq = doc ? seq : NULL, *L = doc ? lo : NULL, *H = doc ? hi : NULL;
    tsr_cpu_ops.attention_forward(ref, att, qkv, sl, sq, NULL, B, T, NH, KVH, HS);
    memset(dref, 0, sizeof dref);
    tsr_cpu_ops.attention_backward(dref, dout, qkv, att, sq, NULL, B, T, NH, KVH, HS);
    const int cuts[2][5] = {{0, 11, T}, {0, 3, 12, 13, T}}, nbs[2] = {2, 4};
    for (int v = 0; v < 2; v++) {
        run_blocks(&o, qkv, dout, L, H, sl, NULL, cuts[v], nbs[v], 0);
        double eo = 0, eg = 0, gmax = max_abs(dref, B * T * QKV);
        for (int i = 0; i < B * T * C; i++) {
            const double e = fabs(o.out[i] - ref[i]) / (2e-6 + 2e-6 * fabs(ref[i]));
            eo = !(e <= eo) ? e : eo; /* NaN sticks */
        }
        for (int i = 0; i < B * T * QKV; i++) {
            const double e = fabs(o.dqkv[i] - dref[i]) / gmax;
            eg = !(e <= eg) ? e : eg;
        }
        tap_ok(eo <= 1.0, "%s%s, keys in %d blocks: merged output = whole-sequence attention "
                          "(worst %.2f of the tolerance)", doc ? "document" : "causal",
               alibi ? " + ALiBi" : "", nbs[v], eo);
        tap_ok(eg <= 1e-5, "%s%s, keys in %d blocks: summed dq, dk, dv = whole-sequence backward "
                           "(%.1e of the largest)", doc ? "document" : "causal",
               alibi ? " + ALiBi" : "", nbs[v], eg);
    }
    if (doc && alibi) { /* the check above can fail */
        run_blocks(&o, qkv, dout, L, H, sl, NULL, cuts[1], nbs[1], 1);
        double e = 0;
        for (int i = 0; i < B * T * C; i++) e = fmax(e, fabs(o.out[i] - ref[i]));
        tap_ok(e > 1e-2, "the last block written over instead of merged moves the output by %.2g",
               e);
    }
}

/* worst |a - ref| over n, in units of (abs + rel |ref|), NaN sticking */
static double worst(const float *a, const float *ref, size_t n, double abs, double rel) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs(a[i] - ref[i]) / (abs + rel * fabs(ref[i]));
        w = !(e <= w) ? e : w;
    }
    return w;
}

/* The variants: all of them with the document mask and ALiBi (all = 1), or sinks alone, causal */
static void check_variants(int all) {
    static float qkv[B * T * QKV], dout[B * T * C], att[B * NH * T * T], ref[B * T * C],
        dref[B * T * QKV];
    static int32_t seq[B * T], lo[B * T], hi[B * T];
    static blocks_out o;
    const float slopes[NH] = {0.5f, 0.25f, 0.125f, 0.0625f}, sinks[NH] = {0.3f, -1.0f, 1.5f, 0.0f};
    float ds_ref[NH] = {0}, ds[NH] = {0};
    for (int i = 0; i < B * T * QKV; i++) qkv[i] = 2.0f * urand();
    for (int i = 0; i < B * T * C; i++) dout[i] = urand();
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) seq[b * T + t] = (t >= 5 + b) + (t >= 14);
    segments(lo, hi, seq);
    const int32_t *sq = all ? seq : NULL, *L = all ? lo : NULL, *H = all ? hi : NULL;
    const float *sl = all ? slopes : NULL;
    tsr_attn_var vr = {.window = all ? 7 : 0, .sinks = sinks, .dsinks = ds_ref,
                       .scale = all ? 0.3f : 0.0f, .softcap = all ? 1.5f : 0.0f};
    tsr_cpu_ops.attention_forward(ref, att, qkv, sl, sq, &vr, B, T, NH, KVH, HS);
    memset(dref, 0, sizeof dref);
    tsr_cpu_ops.attention_backward(dref, dout, qkv, att, sq, &vr, B, T, NH, KVH, HS);
    tsr_attn_var vb = vr;
    vb.dsinks = ds;
    const int cut[5] = {0, 3, 12, 13, T}; /* rows >= 19 see nothing of block 0 with W = 7 */
    run_blocks(&o, qkv, dout, L, H, sl, &vb, cut, 4, 0);
    const double eo = worst(o.out, ref, B * T * C, 2e-6, 2e-6);
    const double eg = worst(o.dqkv, dref, B * T * QKV, max_abs(dref, B * T * QKV), 0) / 1e-5;
    const double es = worst(ds, ds_ref, NH, 1e-5 * max_abs(ds_ref, NH), 0);
    const char *what = all ? "window 7 + sinks + scale 0.3 + soft cap 1.5, document + ALiBi"
                           : "sinks, causal";
    tap_ok(eo <= 1.0, "%s, keys in 4 blocks: merged output = whole-sequence attention (worst "
                      "%.2f of the tolerance)", what, eo);
    tap_ok(eg <= 1.0 && es <= 1.0, "%s: summed dq, dk, dv and the sink gradients = the "
                                   "whole-sequence backward's (worst %.2f, %.2f of 1e-5 of the "
                                   "largest)", what, eg, es);
    if (all) return;
    vb.sinks = NULL; /* the check above can fail: the blocks without the sinks */
    run_blocks(&o, qkv, dout, L, H, sl, &vb, cut, 4, 0);
    double e = 0;
    for (int i = 0; i < B * T * C; i++) e = fmax(e, fabs(o.out[i] - ref[i]));
    tap_ok(e > 1e-2, "the blocks without the sinks move the output by %.2g", e);
}

/* Value heads of DV unlike the keys' HS (ops.h tsr_attn_var.dv: multi-head latent attention's
 * ring), the document mask, keys in 4 blocks against the whole-sequence attention with the same
 * dv: rows [q NH HS | k KVH HS | v KVH DV], outputs NH DV */
static void check_dv(void) {
    enum { DV = 6, QW = NH * HS + KVH * (HS + DV), CW = NH * DV };
    static float qkv[B * T * QW], dout[B * T * CW], att[B * NH * T * T], ref[B * T * CW],
        dref[B * T * QW], out[B * T * CW], lse[B * NH * T], dqkv[B * T * QW];
    static int32_t seq[B * T], lo[B * T], hi[B * T];
    for (int i = 0; i < B * T * QW; i++) qkv[i] = urand();
    for (int i = 0; i < B * T * CW; i++) dout[i] = urand();
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) seq[b * T + t] = (t >= 5 + b) + (t >= 14);
    segments(lo, hi, seq);
    const tsr_attn_var var = {.dv = DV, .scale = 0.3f};
    tsr_cpu_ops.attention_forward(ref, att, qkv, NULL, seq, &var, B, T, NH, KVH, HS);
    tsr_cpu_ops.attention_backward(dref, dout, qkv, att, seq, &var, B, T, NH, KVH, HS);
    tsr_ring_block k = {.B = B, .NH = NH, .KVH = KVH, .hs = HS, .Tq = T, .q = qkv, .ldq = QW,
                        .ldkv = QW, .qbs = T, .kbs = T, .lo = lo, .hi = hi, .T = T, .var = &var};
    const int cut[5] = {0, 3, 12, 13, T};
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < 4; i++) {
            k.koff = cut[i], k.Tk = cut[i + 1] - cut[i];
            k.kv = qkv + (size_t)cut[i] * QW + NH * HS;
            if (pass == 0) tsr_cpu_ops.ring_forward(out, lse, &k, i > 0);
            else tsr_cpu_ops.ring_backward(dqkv, QW, dqkv + (size_t)cut[i] * QW + NH * HS, QW,
                                           dout, out, lse, &k);
        }
    const double eo = worst(out, ref, B * T * CW, 2e-6, 2e-6);
    const double eg = worst(dqkv, dref, B * T * QW, max_abs(dref, B * T * QW), 0) / 1e-5;
    tap_ok(eo <= 1.0 && eg <= 1.0, "value heads of %d (keys %d), document mask, keys in 4 blocks: "
           "merged output and summed dq, dk, dv = the whole-sequence attention's (worst %.2f, "
           "%.2f of the tolerance)", DV, HS, eo, eg);
}

int main(void) {
    tap_plan(3 + 1 + 4 * 4 + 1 + 2 * 2 + 1 + 1);
    check_layout();
    check_blocks(0, 0);
    check_blocks(1, 0);
    check_blocks(0, 1);
    check_blocks(1, 1);
    check_variants(1);
    check_variants(0);
    check_dv();
    return tap_done();
}
