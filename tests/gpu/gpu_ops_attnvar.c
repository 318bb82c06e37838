/* gpu_ops_attnvar.c — issue 67's attention variants on the CUDA ops (cuda_ops.h
 * tcu_attention_forward_var, _backward_var, _decode_var, tcu_ring_forward / _backward with
 * tsr_ring_block.var) against the CPU oracle (kernels/cpu/cpu_attention.c, cpu_ring.c) on the same
 * bf16 values: sliding windows (with the causal and the document masks, GQA), sinks (and their
 * gradient), the soft cap, the score scale, and their combinations; the ring's blocks; decoding
 * over a rolling window's cache. Included by test_gpu_ops.c (its helpers: hf, new_bf16,
 * check_close, ...), so it runs in build/tests/test_gpu_ops (a GPU), test_gpu_ops_emu (the host
 * emulator) and test_gpu_ops_simt (the real kernels under the SIMT emulator): shapes tiny, seconds
 * in all. Tolerances: the attention cases' own (test_attention, test_ring, test_decode). */

/* a case: shapes; seq: document mask (make_segments: documents of 1 to 30 positions, so a window
 * under 30 binds in the longer ones and the documents in the shorter); alibi; window W (0: none);
 * sinks; soft cap (0: none); qpas (query_pre_attn_scalar: scale 1/sqrt(qpas); 0: 1/sqrt(hs)) */
typedef struct {
    int B, T, NH, KVH, hs, seq, alibi, window, sinks;
    float cap, qpas;
} av_cfg;

static const av_cfg AV[] = {
    {1, 192, 2, 1, 32, 0, 0, 65, 0, 0.0f, 0.0f},  /* window, GQA: tiles left of the band skipped;
                                                    * W - 1 on a query tile's edge (64): the fused
                                                    * dq's last block is the band's */
    {2, 160, 2, 2, 32, 1, 0, 12, 0, 0.0f, 0.0f},  /* window + document mask (both bind) */
    {1, 130, 2, 1, 64, 0, 0, 24, 1, 0.0f, 0.0f},  /* window + sinks */
    {1, 96, 2, 2, 32, 0, 0, 0, 0, 3.0f, 8.0f},    /* soft cap + scale */
    {1, 80, 4, 2, 32, 0, 1, 0, 1, 0.0f, 0.0f},    /* sinks + ALiBi, GQA */
    {1, 150, 4, 2, 32, 1, 0, 10, 1, 3.0f, 16.0f}, /* all of them, document mask, GQA */
    {1, 140, 2, 1, 256, 0, 0, 40, 0, 0.0f, 256.0f}, /* Gemma 3: hs 256, window, qpas, GQA */
    {1, 100, 2, 1, 256, 1, 0, 12, 1, 3.0f, 224.0f}, /* hs 256 with all of them */
};
#define AV_CHECKS 5

/* The variants of a case on the host (sinks fp32, dsinks a host copy of dsk0) and on the device
 * (sinks bf16 as the weights' copy, dsinks fp32 from dsk0): the same values (sinks bf16-exact) */
typedef struct {
    tsr_attn_var h, d;
    float *dsk0; /* the gradients' start (NH) */
} av_vars;

static float av_scale(float qpas, int hs) {
    return qpas > 0.0f ? 1.0f / sqrtf(qpas) : 1.0f / sqrtf((float)hs);
}

static void av_make(av_vars *v, int NH, int hs, int window, int sinks, float cap, float qpas) {
    float *sk = hf(NH);
    v->dsk0 = hf(NH);
    fill_bf16(sk, NH, -1, 2), fill_f32(v->dsk0, NH, -1, 1);
    v->h = (tsr_attn_var){.window = window, .scale = qpas > 0.0f ? av_scale(qpas, hs) : 0.0f,
                          .softcap = cap};
    v->d = v->h;
    if (!sinks) return;
    v->h.sinks = sk, v->h.dsinks = hcopy(v->dsk0, NH);
    v->d.sinks = (const float *)(const void *)new_bf16(sk, NH), v->d.dsinks = new_f32(v->dsk0, NH);
}

/* the scores of row i (positions) against key j: c(q.k scale) - slope (i - j), in double */
static double av_score(const float *q, const float *k, int hs, double scale, double cap,
                       double slope, int ij) {
    double dot = 0.0;
    for (int d = 0; d < hs; d++) dot += (double)q[d] * k[d];
    double s = dot * scale;
    if (cap > 0.0) s = cap * tanh(s / cap);
    return s - slope * ij;
}

/* lse[b,h,i] = log (sum_{lo(i) <= j <= i} exp(s[i,j]) + exp(sink_h)), lo(i) the segment's start
 * moved up to i - W + 1 by a window, in double (host_lse with the variants) */
static void av_lse(float *lse, const float *qkv, const float *slopes, const int32_t *seq,
                   const tsr_attn_var *v, int B, int T, int NH, int KVH, int hs) {
    const size_t ld = (size_t)(NH + 2 * KVH) * hs;
    const double scale = v->scale > 0.0f ? v->scale : 1.0 / sqrt((double)hs);
    double *s = xmalloc((size_t)T * sizeof *s);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                int lo = seg_lo(seq ? seq + (size_t)b * T : NULL, i);
                if (v->window > 0 && i - v->window + 1 > lo) lo = i - v->window + 1;
                const float *q = qkv + ((size_t)b * T + i) * ld + QCOL(h);
                double mx = v->sinks ? v->sinks[h] : -INFINITY, sum = 0.0;
                for (int j = lo; j <= i; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * ld + KCOL(h / (NH / KVH));
                    s[j] = av_score(q, k, hs, scale, v->softcap, slopes ? slopes[h] : 0.0, i - j);
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = lo; j <= i; j++) sum += exp(s[j] - mx);
                if (v->sinks) sum += exp(v->sinks[h] - mx);
                lse[((size_t)b * NH + h) * T + i] = (float)(mx + log(sum));
            }
    free(s);
}

/* The sink gradients from what the device reads: ref[h] = dsk0[h] - sum_rows exp(sink_h - lse)
 * D (D = dout . out of the rows given, bf16 out; the CPU oracle's D is that of its fp32 out, a
 * bf16 rounding apart, which would need a tolerance a missing term passes), in double; mag[h] =
 * sum_rows p_sink |dout|.|out| (rows nr of C, lse (NH, ldl) from row l0) */
static void av_sink_ref(float *ref, float *mag, const float *dsk0, const float *lse,
                        const float *sinks, const float *dout, const float *out, int nr, int NH,
                        int hs, int ldl, int l0) {
    const size_t C = (size_t)NH * hs;
    for (int h = 0; h < NH; h++) {
        double m = 0.0, g = dsk0[h];
        for (int r = 0; r < nr; r++) {
            double D = 0.0, dabs = 0.0;
            for (int d = 0; d < hs; d++) {
                const double x = (double)dout[r * C + QCOL(h) + d] * out[r * C + QCOL(h) + d];
                D += x, dabs += fabs(x);
            }
            const double p = exp(sinks[h] - lse[(size_t)h * ldl + l0 + r]);
            g -= p * D, m += p * dabs;
        }
        ref[h] = (float)g, mag[h] = (float)m;
    }
}

/* the sink gradients on the device against ref (from the same start): fp32 sums of exact bf16
 * products (1e-5 of the terms' sizes); skipped, saying so, for a case without sinks */
static void av_check_dsinks(const char *tag, const av_vars *v, int NH, const float *ref,
                            const float *mag) {
    if (!v->h.sinks) {
        tap_skip(L("%s: sink gradients", tag), "no sinks in this case");
        return;
    }
    check_close(L("%s: dsinks += sum_rows -p_sink D", tag), get_f32(v->d.dsinks, NH), ref, NH,
                1e-6, 1e-5, mag, 1e-5);
}

/* the forward (out, lse) and the backward (dqkv +=, dsinks +=) against the CPU's; then the
 * backward again with the fused dq (where this backend has it) */
static void test_attnvar(const av_cfg *a) {
    const int B = a->B, T = a->T, NH = a->NH, KVH = a->KVH, hs = a->hs;
    const size_t ld = (size_t)(NH + 2 * KVH) * hs, C = (size_t)NH * hs;
    const size_t nq = (size_t)B * T * ld, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    const size_t na = (size_t)B * NH * T * T;
    char tag[160];
    snprintf(tag, sizeof tag, "attention variants B=%d T=%d NH=%d KVH=%d hs=%d W=%d%s%s%s cap=%g "
             "qpas=%g%s", B, T, NH, KVH, hs, a->window, a->sinks ? " sinks" : "",
             a->seq ? " seq" : "", a->alibi ? " alibi" : "", a->cap, a->qpas,
             tcu_attention_wgmma(hs)              ? " (wgmma)"
             : tcu_attention_warp_rows(hs) == 32 ? " (32 rows a warp)"
                                                  : "");
    float *qkv = hf(nq), *qabs = hf(nq), *slopes = hf(NH), *dout = hf(no), *g0 = hf(nq);
    int32_t *seq = hi32((size_t)B * T);
    attn_inputs(qkv, qabs, (size_t)B * T, ld, VCOL(0));
    for (int b = 0; b < B; b++) make_segments(seq + (size_t)b * T, T, 3 * b);
    for (int h = 0; h < NH; h++) slopes[h] = exp2f(-8.0f * (float)(h + 1) / (float)NH);
    const float *sl = a->alibi ? slopes : NULL;
    const int32_t *sq = a->seq ? seq : NULL;
    fill_bf16(dout, no, -1, 1), fill_bf16(g0, nq, -1, 1);
    av_vars v;
    av_make(&v, NH, hs, a->window, a->sinks, a->cap, a->qpas);

    float *out = hf(no), *att = hf(na), *oabs = hf(no), *tmp = hf(na), *lse = hf(nl);
    cpu->attention_forward(out, att, qkv, sl, sq, &v.h, B, T, NH, KVH, hs);
    cpu->attention_forward(oabs, tmp, qabs, sl, sq, &v.h, B, T, NH, KVH, hs);
    av_lse(lse, qkv, sl, sq, &v.h, B, T, NH, KVH, hs);
    tsr_bf16 *d_qkv = new_bf16(qkv, nq), *d_out = d16(no);
    float *d_lse = df32(nl), *d_sl = a->alibi ? new_f32(slopes, NH) : NULL;
    int32_t *d_seq = a->seq ? new_i32(seq, (size_t)B * T) : NULL;
    poison(d_out, no * 2), poison(d_lse, nl * 4);
    tcu_attention_forward_var(d_out, d_lse, d_qkv, d_sl, d_seq, &v.d, B, T, NH, KVH, hs, g_s);
    check_close(L("%s: out", tag), get_bf16(d_out, no), out, no, 0, RTOL_BF16, oabs, 2 * U_BF16);
    check_close(L("%s: lse", tag), get_f32(d_lse, nl), lse, nl, 1e-4, 1e-5, NULL, 0);

    /* backward from the CPU forward's out (bf16) and the host lse, as test_attention's */
    float *ref = hcopy(g0, nq), *mag = hf(nq), *outb = hf(no), *smag = hf(NH), *sref = hf(NH);
    for (size_t i = 0; i < no; i++) outb[i] = rbf16(out[i]);
    cpu->attention_backward(ref, dout, qkv, att, sq, &v.h, B, T, NH, KVH, hs);
    attention_bwd_mag(mag, qkv, att, out, dout, B, T, NH, KVH, hs);
    const float sf = fmaxf(1.0f, av_scale(a->qpas, hs) * sqrtf((float)hs)); /* mag's scale */
    for (size_t i = 0; i < nq; i++) mag[i] *= sf;
    for (int b = 0; b < B && a->sinks; b++) { /* sequence by sequence, from the last's sums */
        av_sink_ref(sref, smag, b ? sref : v.dsk0, lse + (size_t)b * NH * T, v.h.sinks,
                    dout + (size_t)b * T * C, outb + (size_t)b * T * C, T, NH, hs, T, 0);
    }
    tsr_bf16 *d_dout = new_bf16(dout, no), *d_g = new_bf16(g0, nq), *d_ob = new_bf16(outb, no);
    float *d_lh = new_f32(lse, nl);
    void *d_scratch = dalloc(tcu_attention_scratch_bytes(B, T, NH, KVH, hs));
    tcu_attention_backward_var(d_g, d_dout, d_qkv, d_ob, d_lh, d_sl, d_seq, &v.d, d_scratch, B, T,
                               NH, KVH, hs, TSR_GRAD_ADD, g_s);
    float *extra = absdiff(ref, g0, nq, (float)U_BF16, mag, (float)(2 * U_BF16));
    check_close(L("%s: dqkv", tag), get_bf16(d_g, nq), ref, nq, 0, RTOL_BF16, extra, 1.0);
    av_check_dsinks(tag, &v, NH, sref, smag);

    tcu_attention_set_dq_fused(1); /* the fused dq: its own bound of a key block's queries */
    if (tcu_attention_dq_fused() && hs != 256) { /* hs 256: the dq kernel runs (docs/cuda.md) */
        void *d_fs = dalloc(tcu_attention_scratch_bytes(B, T, NH, KVH, hs));
        put_bf16(d_g, g0, nq);
        tsr_attn_var nv = v.d; /* the sinks' gradient was checked above */
        nv.dsinks = NULL;
        tcu_attention_backward_var(d_g, d_dout, d_qkv, d_ob, d_lh, d_sl, d_seq, &nv, d_fs, B, T,
                                   NH, KVH, hs, TSR_GRAD_ADD, g_s);
        check_close(L("%s: dqkv with the fused dq", tag), get_bf16(d_g, nq), ref, nq, 0,
                    RTOL_BF16, extra, 1.0);
    } else {
        tap_skip(L("%s: dqkv with the fused dq", tag),
                 hs == 256 ? "hs 256 has no fused dq" : "this backend has no fused dq");
    }
    tcu_attention_set_dq_fused(0);
    scope_end(tag);
}

/* ---- ring blocks ---------------------------------------------------------------------------- */

/* test_ring's layout (local chunk 1 of c rows at position 5c as the queries; keys: the own chunk,
 * remote chunks at c and 2c), with the variants: the window W = 4c reaches into the chunk at c
 * partly (its distances 3c+1 .. 5c-1) and the one at 2c wholly; sinks start each row in the
 * first block (merge 0), their gradient taken in the diagonal block (sink_grad) */
typedef struct { int c, NH, KVH, hs, doc, sinks; float cap, qpas; } avr_cfg;
static const avr_cfg AVR[] = {
    {32, 2, 1, 32, 0, 0, 0.0f, 0.0f},  /* the window alone */
    {32, 4, 2, 32, 1, 1, 3.0f, 16.0f}, /* window, document mask, sinks, soft cap, scale */
    {32, 2, 1, 256, 0, 0, 0.0f, 256.0f}, /* hs 256 (Gemma 3): the window, qpas */
};
#define AVR_CHECKS 5

/* the blocks of test_ring's layout on the host (h) and the device (d) */
static void avr_blocks(tsr_ring_block *h, tsr_ring_block *d, const avr_cfg *r, const av_vars *v,
                       const float *qkv, const float *kv, const tsr_bf16 *d_qkv,
                       const tsr_bf16 *d_kv, const int32_t *lo, const int32_t *d_lo) {
    const int c = r->c, NH = r->NH, KVH = r->KVH, hs = r->hs, QKV = (NH + 2 * KVH) * hs;
    const int KVW = 2 * KVH * hs, koff[3] = {5 * c, c, 2 * c};
    for (int k = 0; k < 3; k++) {
        h[k] = (tsr_ring_block){.B = 1, .NH = NH, .KVH = KVH, .hs = hs, .Tq = c, .Tk = c,
                                .qoff = 5 * c, .koff = koff[k], .ldq = QKV, .qbs = 2 * c,
                                .kbs = 2 * c, .lo = r->doc ? lo : NULL, .T = 6 * c,
                                .var = &v->h, .sink_grad = k == 0};
        d[k] = h[k];
        d[k].lo = r->doc ? d_lo : NULL, d[k].var = &v->d;
        const size_t q0 = (size_t)c * QKV, k0 = (size_t)(k == 2 ? c : 0) * KVW;
        h[k].q = qkv + q0, d[k].q = d_qkv + q0;
        h[k].kv = k ? (const void *)(kv + k0) : (const void *)(qkv + q0 + NH * hs);
        d[k].kv = k ? (const void *)(d_kv + k0) : (const void *)(d_qkv + q0 + NH * hs);
        h[k].ldkv = d[k].ldkv = k ? KVW : QKV;
    }
}

/* the queries' rows (c.. of 2c) of x (rows of w) into a new array */
static float *avr_rows(const float *x, int c, size_t w) {
    return hcopy(x + (size_t)c * w, (size_t)c * w);
}

static void test_ring_var(const avr_cfg *r) {
    const int c = r->c, NH = r->NH, KVH = r->KVH, hs = r->hs, Tl = 2 * c, T = 6 * c;
    const int QKV = (NH + 2 * KVH) * hs, C = NH * hs, KVW = 2 * KVH * hs;
    char tag[160];
    snprintf(tag, sizeof tag, "ring blocks with variants c=%d NH=%d KVH=%d hs=%d W=%d%s%s cap=%g "
             "qpas=%g", c, NH, KVH, hs, 4 * c, r->doc ? " document" : "",
             r->sinks ? " sinks" : "", r->cap, r->qpas);
    const size_t nq = (size_t)Tl * QKV, nkv = (size_t)Tl * KVW, no = (size_t)Tl * C;
    float *qkv = hf(nq), *kv = hf(nkv), *dout = hf(no);
    fill_bf16(qkv, nq, -2, 2), fill_bf16(kv, nkv, -2, 2), fill_bf16(dout, no, -1, 1);
    int32_t *lo = hi32(T), *seq = hi32(T);
    make_segments(seq, T, 1);
    for (int t = c + c / 2; t < 5 * c + c / 2; t++) seq[t] = 99; /* a document across blocks */
    for (int t = 0; t < T; t++) lo[t] = seg_lo(seq, t);
    av_vars v;
    av_make(&v, NH, hs, 4 * c, r->sinks, r->cap, r->qpas);
    tsr_bf16 *d_qkv = new_bf16(qkv, nq), *d_kv = new_bf16(kv, nkv), *d_g = new_bf16(dout, no);
    int32_t *d_lo = new_i32(lo, T);
    const size_t nsc = tcu_ring_scratch_bytes(1, Tl, NH, KVH, hs);
    void *d_sc = nsc ? dalloc(nsc) : NULL;
    tsr_ring_block h[3], d[3];
    avr_blocks(h, d, r, &v, qkv, kv, d_qkv, d_kv, lo, d_lo);
    const size_t nl = (size_t)NH * Tl;
    float *acc = hf(no), *lse = hf(nl), *d_acc = df32(no), *d_lse = df32(nl);
    memset(acc, 0, no * sizeof(float)), memset(lse, 0, nl * sizeof(float));
    poison(d_acc, no * sizeof(float)), poison(d_lse, nl * sizeof(float));
    for (int k = 0; k < 3; k++) {
        cpu->ring_forward(acc + (size_t)c * C, lse + c, &h[k], k > 0);
        tcu_ring_forward(d_acc + (size_t)c * C, d_lse + c, &d[k], k > 0, d_sc, g_s);
    }
    float omax = 0, *ga = get_f32(d_acc, no), *gl = get_f32(d_lse, nl);
    for (size_t i = (size_t)c * C; i < no; i++) omax = fmaxf(omax, fabsf(acc[i]));
    check_close(L("%s: out merged over 3 blocks", tag), avr_rows(ga, c, C), avr_rows(acc, c, C),
                (size_t)c * C, 4 * U_BF16 * omax, 0, NULL, 0);
    float *rl = hf((size_t)NH * c), *el = hf((size_t)NH * c);
    for (int hh = 0; hh < NH; hh++)
        for (int i = 0; i < c; i++)
            rl[hh * c + i] = lse[hh * Tl + c + i], el[hh * c + i] = gl[hh * Tl + c + i];
    check_close(L("%s: lse", tag), el, rl, (size_t)NH * c, 1e-3, 1e-5, NULL, 0);

    float *out = hf(no);
    for (size_t i = 0; i < no; i++) out[i] = rbf16(acc[i]);
    tsr_bf16 *d_out = new_bf16(out, no);
    put_f32(d_lse, lse, nl);
    float *dq = hf(nq), *dkv = hf(2 * nkv), *d_dq = df32(nq), *d_dkv = df32(2 * nkv);
    memset(dq, 0, nq * sizeof(float)), memset(dkv, 0, 2 * nkv * sizeof(float));
    tcu_zero(d_dq, nq * sizeof(float), g_s), tcu_zero(d_dkv, 2 * nkv * sizeof(float), g_s);
    for (int k = 0; k < 3; k++) {
        const size_t dk0 = k ? (size_t)(k == 2 ? c : 0) * KVW : nkv + (size_t)c * KVW;
        cpu->ring_backward(dq + (size_t)c * QKV, QKV, dkv + dk0, KVW, dout + (size_t)c * C,
                           out + (size_t)c * C, lse + c, &h[k]);
        tcu_ring_backward(d_dq + (size_t)c * QKV, QKV, d_dkv + dk0, KVW, d_g + (size_t)c * C,
                          d_out + (size_t)c * C, d_lse + c, &d[k], d_sc, g_s);
    }
    float qmax = 0, kmax = 0, *gq = get_f32(d_dq, nq), *gk = get_f32(d_dkv, 2 * nkv);
    for (size_t i = 0; i < nq; i++) qmax = fmaxf(qmax, fabsf(dq[i]));
    for (size_t i = 0; i < 2 * nkv; i++) kmax = fmaxf(kmax, fabsf(dkv[i]));
    check_close(L("%s: dq summed over the blocks", tag), gq, dq, nq, 0.02 * qmax, 0.02, NULL, 0);
    check_close(L("%s: dk, dv of the 3 key chunks", tag), gk, dkv, 2 * nkv, 0.02 * kmax, 0.02,
                NULL, 0);
    float *smag = hf(NH), *sref = hf(NH);
    if (r->sinks) /* the query rows c.. (the CPU ring's own sum is this one in fp32) */
        av_sink_ref(sref, smag, v.dsk0, lse, v.h.sinks, dout + (size_t)c * C, out + (size_t)c * C,
                    c, NH, hs, Tl, c);
    av_check_dsinks(tag, &v, NH, sref, smag);
    scope_end(tag);
}

/* ---- decoding over a rolling window's cache ------------------------------------------------- */

/* n rows in slots (0: a chunk of one sequence from p0), a sliding layer's cache of cap = W
 * positions (a ring: positions past cap wrap), the other variants */
typedef struct { int n, slots, cap, NH, KVH, hs, p0, sinks; float softcap, qpas; } avd_cfg;
static const avd_cfg AVD[] = {
    {4, 0, 8, 4, 2, 32, 13, 1, 0.0f, 0.0f}, /* a chunk wrapping round the ring: row by row */
    {3, 3, 12, 2, 1, 32, 0, 0, 3.0f, 8.0f}, /* rows of 3 slots at 5, 12, 19; soft cap, scale */
    {3, 3, 12, 4, 2, 16, 0, 1, 2.0f, 0.0f}, /* the same with sinks, GQA */
    {3, 3, 12, 2, 1, 256, 0, 1, 3.0f, 256.0f}, /* hs 256 (Gemma 3): sinks, soft cap, qpas */
};
#define AVD_CHECKS 2

static void test_decode_var(const avd_cfg *c) {
    const int R = c->slots ? c->slots : 1, NH = c->NH, KVH = c->KVH, hs = c->hs, n = c->n;
    const size_t per = (size_t)KVH * hs * c->cap, QKV = (size_t)(NH + 2 * KVH) * hs;
    const size_t no = (size_t)n * NH * hs, nc = (size_t)R * per;
    char tag[160];
    snprintf(tag, sizeof tag, "attention_decode_var n=%d slots=%d window=cap=%d NH=%d KVH=%d "
             "hs=%d%s softcap=%g qpas=%g", n, c->slots, c->cap, NH, KVH, hs,
             c->sinks ? " sinks" : "", c->softcap, c->qpas);
    float *kt = hf(nc), *v = hf(nc), *qkv = hf((size_t)n * QKV), *ref = hf(no);
    float *scr = hf(4 * (size_t)c->cap);
    fill_bf16(kt, nc, -1, 1), fill_bf16(v, nc, -1, 1), fill_bf16(qkv, (size_t)n * QKV, -1, 1);
    av_vars w;
    av_make(&w, NH, hs, c->cap, c->sinks, c->softcap, c->qpas);
    int32_t slot[8], pos[8], seg[8];
    for (int i = 0; i < n; i++)
        slot[i] = (i * 2 + 1) % R, pos[i] = 5 + 7 * i, seg[i] = i == 1 ? 3 : 0;
    tsr_bf16 *d_kt = new_bf16(kt, nc), *d_v = new_bf16(v, nc);
    tsr_bf16 *d_q = new_bf16(qkv, (size_t)n * QKV);
    int32_t *d_slot = c->slots ? new_i32(slot, n) : NULL;
    int32_t *d_pos = c->slots ? new_i32(pos, n) : NULL, *d_seg = c->slots ? new_i32(seg, n) : NULL;
    tsr_bf16 *d_out = d16(no);
    tcu_attention_decode_var(d_out, d_kt, d_v, d_q, NULL, &w.d, d_slot, d_pos, d_seg, c->p0, 0,
                             n, per, c->cap, NH, KVH, hs, g_s);
    if (c->slots)
        cpu->attention_decode_rows(ref, kt, v, qkv, NULL, &w.h, scr, 4, slot, pos, seg, n, per,
                                   c->cap, NH, KVH, hs);
    else
        cpu->attention_decode(ref, kt, v, qkv, NULL, &w.h, scr, 4, c->p0, n, 0, c->cap, NH, KVH,
                              hs);
    check_close(L("%s: out", tag), get_bf16(d_out, no), ref, no, 0x1p-14 * hs, RTOL_BF16, NULL, 0);
    size_t bad = ndiff(get_bf16(d_kt, nc), kt, nc, sizeof(float)) +
                 ndiff(get_bf16(d_v, nc), v, nc, sizeof(float));
    tap_ok(bad == 0, "%s: the rows' keys and values stored at position %% cap exactly (%zu "
           "elements differ)", tag, bad);
    scope_end(tag);
}

/* the checks of this file, and the run */
static int attnvar_checks(void) {
    return ((int)NCASES(AV) + 2) * AV_CHECKS + (int)NCASES(AVR) * AVR_CHECKS +
           (int)NCASES(AVD) * AVD_CHECKS;
}

/* case a again with 32 rows a warp (wg 0) or on wgmma (wg 1), the kernels' other instances (the
 * same mask, softmax and gradient code); skipped, saying so, where this backend has none */
static void attnvar_instance(const av_cfg *a, int wg) {
    if (wg ? !tcu_attention_wgmma_possible(a->hs) : a->hs > 64) {
        for (int k = 0; k < AV_CHECKS; k++)
            tap_skip(L("attention variants hs=%d on %s", a->hs, wg ? "wgmma" : "32 rows a warp"),
                     "no such kernel for this head size or device");
        return;
    }
    if (wg) tcu_attention_set_wgmma(1);
    else tcu_attention_set_warp_rows(32);
    if (wg || tcu_attention_warp_rows(a->hs) == 32) {
        test_attnvar(a);
    } else {
        for (int k = 0; k < AV_CHECKS; k++)
            tap_skip(L("attention variants hs=%d, 32 rows a warp", a->hs),
                     "this backend has one attention kernel (tcu_attention_warp_rows: 16)");
    }
    tcu_attention_set_wgmma(0), tcu_attention_set_warp_rows(16);
}

static void run_attnvar(void) {
    tap_diag("next: issue 67's attention variants (tests/gpu/gpu_ops_attnvar.c)");
    for (size_t i = 0; i < NCASES(AV); i++) test_attnvar(&AV[i]);
    attnvar_instance(&AV[5], 0); /* all the variants, 32 rows a warp */
    attnvar_instance(&AV[2], 1); /* window and sinks (hs 64) on wgmma */
    for (size_t i = 0; i < NCASES(AVR); i++) test_ring_var(&AVR[i]);
    for (size_t i = 0; i < NCASES(AVD); i++) test_decode_var(&AVD[i]);
}
