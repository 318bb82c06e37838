/* gpu_ops_mla.c — multi-head latent attention's decoding on the CUDA backend (src/gpu/gpu_mla.c
 * gpu_mla_decode: the decode kernel over the latent as one shared key/value head, kv_b_proj
 * absorbed; docs/cuda.md "Multi-head latent attention") against the CPU's (kernels/cpu/cpu_mla.c
 * cpu_mla_decode) on the same bf16 inputs, call by call, each side keeping its own compressed
 * cache: a long prefix fed as one chunk, then tokens one at a time; a document restarting (RoPE
 * positions from 0 again, the earlier document out of sight); slots of a batch side by side at
 * their own positions and segments, their prompts fed as chunks and their tokens as rows (the two
 * ways the decoder passes positions: rp0 and rpos). The RoPE constants are the model's
 * (model_rope_freqs, model_rope_mscale, model_mla_scale of a tiny MLA config), so YaRN's
 * frequencies and mscale go in as decoding uses them; both pair layouts (model.rope_interleave);
 * d_qk != d_v both ways; the NH query heads over the one latent (MLA has no key/value groups).
 * model.q_lora_rank does not reach this op: it only changes how q is projected (matmul, RMSNorm:
 * their own cases). Within one way of passing positions RoPE sees only their differences, so a
 * position offset or a segment restart miscounted on one path shows where a chunk's keys meet a
 * row's query (the batch cases); the other pairing fails every call. Checked by breaking
 * gpu_mla_decode (rp0 + 1; p0 for rp0; the interleave flag negated): 8, 8 and 30 of the 30 checks
 * fail, by 4x to 40x the tolerance.
 *
 * Included by test_gpu_ops.c (its helpers, tolerances), so it runs on a GPU (build/tests/
 * test_gpu_ops), the host emulator (test_gpu_ops_emu) and the SIMT emulator's real decode kernel
 * (test_gpu_ops_simt). Tolerance per output element (row i, head h, column e): rtol 2u |cpu| (the
 * output's rounding) + 2u mag, mag = sum_k |Wv_h[e,k]| max_j |latent_j[k]| (a bound of |out|:
 * the weighted latent o averages the stored latents). The device rounds o to bf16 (u of its
 * bound), and the absorbed query, the turned RoPE parts and the probabilities too, which move o
 * through the scores by a fraction of u of the bound at these sizes (the worst call of 6 seeds:
 * 0.18 of the tolerance); a wrong RoPE angle moves the scores by O(scale |q_rope| |k_rope|). */

#include "cpu/cpu_mla.h"
#include "gpu/gpu_mla.h"
#include "model/model.h"
#include "unit/tiny_models.h"

/* a case: the heads; interleave: RoPE pairs (2i, 2i + 1); yarn: YaRN scaling with mscale and
 * mscale_all_dim; slots: 0 one sequence (in slot 1 of 2), else a batch of that many slots */
typedef struct {
    const char *name;
    int NH, dn, dr, dv, kvr, interleave, yarn, slots;
} mla_cfg;

static const mla_cfg MLA[] = {
    {"V3-like", 4, 16, 8, 12, 32, 1, 1, 0},     /* interleaved pairs, YaRN, dv < dqk */
    {"V2-Lite-like", 2, 24, 8, 16, 16, 0, 0, 0}, /* rotate-half pairs, no scaling */
    {"batch V3-like", 4, 16, 8, 12, 32, 1, 1, 3},
    {"batch half-split", 3, 8, 16, 24, 24, 0, 1, 3}, /* dv > dqk, YaRN on rotate-half */
};
enum { MLA_CAP = 96, MLA_NMAX = 48, MLA_PREFIX = 40 };
#define MLA_MTOL (2 * U_BF16)
/* the calls (a check each) of a one-sequence case: a prefix of 40, 3 tokens, a new document at 43
 * (3 rows as a chunk, then 2 tokens); of a batch case: each slot's prefix, then MLA_STEPS steps */
enum { MLA_STEPS = 4, MLA_SEQ_CALLS = 7, MLA_BATCH_CALLS = 4 + MLA_STEPS };

static int mla_checks(void) {
    int n = 0;
    for (size_t i = 0; i < NCASES(MLA); i++) n += MLA[i].slots ? MLA_BATCH_CALLS : MLA_SEQ_CALLS;
    return n;
}

/* One case's state: the op's constants on both sides, each side's cache, the device's buffers */
typedef struct {
    const mla_cfg *c;
    tsr_mla_shape s;
    float scale, *inv, *kvb, *cache, *scr, *cmax;
    float *d_inv;
    tsr_bf16 *d_kvb, *d_cache, *d_q, *d_cn, *d_kpe, *d_out;
    int32_t *d_ids; /* slot, pos, seg, rpos (MLA_NMAX each) */
    size_t hstride, dstride;
    int slots;
} mla_run;

/* the model's RoPE constants for the case's heads (tiny_model's defaults, theta 1000) */
static void mla_consts(mla_run *r, const mla_cfg *c) {
    tsr_model_config m = tiny_model(1, 32, c->NH, 64, 16);
    m.pos = TSR_POS_ROPE, m.norm = TSR_NORM_RMSNORM, m.bias = 0, m.tie_embeddings = 0;
    m.mlp = TSR_MLP_SWIGLU, m.rope_theta = 1000, m.rope_interleave = c->interleave;
    m.kv_lora_rank = c->kvr, m.qk_nope_head_dim = c->dn, m.qk_rope_head_dim = c->dr;
    m.v_head_dim = c->dv;
    if (c->yarn)
        m.rope_scaling = TSR_ROPE_SCALING_YARN, m.rope_factor = 4, m.rope_original_max_pos = 16,
        m.rope_mscale = 0.9, m.rope_mscale_all_dim = 0.6;
    tsr_model tm;
    model_init(&tm, &m, MLA_CAP, &tsr_cpu_ops);
    r->scale = (float)model_mla_scale(&tm);
    model_free(&tm);
    r->inv = hf((size_t)c->dr / 2);
    model_rope_freqs(r->inv, &m, c->dr);
    r->s = (tsr_mla_shape){.NH = c->NH, .dn = c->dn, .dr = c->dr, .dv = c->dv,
                           .interleave = c->interleave, .mscale = (float)model_rope_mscale(&m)};
}

static void mla_setup(mla_run *r, const mla_cfg *c) {
    *r = (mla_run){.c = c, .slots = c->slots ? c->slots : 2};
    mla_consts(r, c);
    const size_t W = (size_t)c->kvr + c->dr, nkvb = (size_t)c->NH * (c->dn + c->dv) * c->kvr;
    r->hstride = MLA_CAP * W, r->dstride = 2 * MLA_CAP * W; /* (the device keeps 2 copies) */
    r->kvb = hf(nkvb);
    fill_bf16(r->kvb, nkvb, -0.5, 0.5);
    r->cache = hf(r->hstride * r->slots);
    r->scr = hf(4 * (MLA_CAP + 2 * W));
    r->cmax = hf((size_t)c->kvr);
    memset(r->cmax, 0, (size_t)c->kvr * sizeof(float));
    r->d_inv = new_f32(r->inv, (size_t)c->dr / 2), r->d_kvb = new_bf16(r->kvb, nkvb);
    r->d_cache = d16(r->dstride * r->slots);
    poison(r->d_cache, r->dstride * r->slots * sizeof(tsr_bf16)); /* an unstored read: NaN */
    r->d_q = d16((size_t)MLA_NMAX * c->NH * (c->dn + c->dr));
    r->d_cn = d16((size_t)MLA_NMAX * c->kvr), r->d_kpe = d16((size_t)MLA_NMAX * c->dr);
    r->d_out = d16((size_t)MLA_NMAX * c->NH * c->dv);
    r->d_ids = dalloc(4 * MLA_NMAX * sizeof(int32_t));
}

/* mag (n NH dv): the bound of |out| above */
static void mla_mag(const mla_run *r, float *mag, int n) {
    const mla_cfg *c = r->c;
    for (int h = 0; h < c->NH; h++)
        for (int e = 0; e < c->dv; e++) {
            const float *wv = r->kvb + ((size_t)h * (c->dn + c->dv) + c->dn + e) * c->kvr;
            double b = 0.0;
            for (int k = 0; k < c->kvr; k++) b += fabs((double)wv[k]) * r->cmax[k];
            for (int i = 0; i < n; i++) mag[((size_t)i * c->NH + h) * c->dv + e] = (float)b;
        }
}

/* a call's fresh inputs (n rows, bf16 values) on both sides; the latents' bound (cmax) grown */
static void mla_inputs(mla_run *r, float *q, float *cn, float *kpe, int n) {
    const mla_cfg *c = r->c;
    const size_t nq = (size_t)n * c->NH * (c->dn + c->dr), ncn = (size_t)n * c->kvr;
    fill_bf16(q, nq, -1, 1), fill_bf16(cn, ncn, -1, 1);
    fill_bf16(kpe, (size_t)n * c->dr, -2, 2); /* RoPE's parts weigh in the scores: */
    for (size_t k = 0; k < nq; k++) /* the query's in [-2, 2] too (doubled: exact) */
        q[k] *= k % (size_t)(c->dn + c->dr) >= (size_t)c->dn ? 2.0f : 1.0f;
    for (size_t k = 0; k < ncn; k++)
        r->cmax[k % c->kvr] = fmaxf(r->cmax[k % c->kvr], fabsf(cn[k]));
    put_bf16(r->d_q, q, nq), put_bf16(r->d_cn, cn, ncn);
    put_bf16(r->d_kpe, kpe, (size_t)n * c->dr);
}

/* the device's rows of the host's hr: its slot stride, its copies of the ids */
static tsr_mla_rows mla_dev_rows(const mla_run *r, const tsr_mla_rows *hr) {
    tsr_mla_rows dr = *hr;
    dr.slot_stride = r->dstride;
    if (!hr->slot) return dr;
    int32_t ids[4 * MLA_NMAX];
    const int32_t *src[4] = {hr->slot, hr->pos, hr->seg, hr->rpos};
    for (int a = 0; a < 4; a++) memcpy(ids + a * MLA_NMAX, src[a], (size_t)hr->n * sizeof *ids);
    h2d(r->d_ids, ids, sizeof ids);
    dr.slot = r->d_ids, dr.pos = r->d_ids + MLA_NMAX, dr.seg = r->d_ids + 2 * MLA_NMAX;
    dr.rpos = r->d_ids + 3 * MLA_NMAX;
    return dr;
}

/* one call of n rows (hr: the host's rows): fresh inputs, both sides, their outputs compared */
static void mla_call(mla_run *r, tsr_mla_rows hr, const char *what) {
    const mla_cfg *c = r->c;
    const int n = hr.n;
    const size_t nq = (size_t)n * c->NH * (c->dn + c->dr), no = (size_t)n * c->NH * c->dv;
    float *q = malloc(nq * sizeof *q), *cn = malloc((size_t)n * c->kvr * sizeof *cn);
    float *kpe = malloc((size_t)n * c->dr * sizeof *kpe), *ref = malloc(no * sizeof *ref);
    float *got = malloc(no * sizeof *got), *mag = malloc(no * sizeof *mag);
    uint16_t *g16 = malloc(no * sizeof *g16);
    mla_inputs(r, q, cn, kpe, n);
    const tsr_mla_rows dr = mla_dev_rows(r, &hr);
    hr.slot_stride = r->hstride;
    const tsr_backend be = {.ctx = g_s};
    gpu_mla_decode(&be, r->d_out, r->d_cache, r->d_q, r->d_cn, r->d_kpe, r->d_kvb, r->d_inv,
                   r->scale, c->kvr, &r->s, &dr, NULL, 0);
    cpu_mla_decode(ref, r->cache, q, cn, kpe, r->kvb, r->inv, r->scale, c->kvr, &r->s, &hr,
                   r->scr, 4);
    d2h(g16, r->d_out, no * sizeof *g16);
    for (size_t i = 0; i < no; i++) got[i] = bf16_f32(g16[i]);
    mla_mag(r, mag, n);
    check_close(L("mla_decode %s (NH %d, dn %d, dr %d, dv %d, kvr %d%s%s): %s", c->name, c->NH,
                  c->dn, c->dr, c->dv, c->kvr, c->interleave ? ", interleaved" : ", half-split",
                  c->yarn ? ", YaRN" : "", what), got, ref, no, 0, RTOL_BF16, mag, MLA_MTOL);
    free(q), free(cn), free(kpe), free(ref), free(got), free(mag), free(g16);
}

/* a chunk of n rows of slot k at p0, its document from seg0 */
static void mla_chunk(mla_run *r, int k, int p0, int n, int seg0, const char *what) {
    mla_call(r, (tsr_mla_rows){.n = n, .cap = MLA_CAP, .slot0 = k, .p0 = p0, .seg0 = seg0,
                               .rp0 = p0 - seg0}, what);
}

/* one sequence, in slot 1 */
static void mla_sequence(mla_run *r) {
    mla_chunk(r, 1, 0, MLA_PREFIX, 0, L("a prefix of %d as one chunk", MLA_PREFIX));
    for (int p = MLA_PREFIX; p < MLA_PREFIX + 3; p++)
        mla_chunk(r, 1, p, 1, 0, L("the token at position %d, alone", p));
    const int s = MLA_PREFIX + 3; /* a new document: RoPE from 0, the first one out of sight */
    mla_chunk(r, 1, s, 3, s, L("a new document at %d: 3 rows, RoPE positions 0..2", s));
    for (int p = s + 3; p < s + 5; p++)
        mla_chunk(r, 1, p, 1, s, L("the token at %d, RoPE position %d", p, p - s));
}

/* slots 0, 1, 2 with prefixes of 20, 9, 33 (chunks, as the decoder feeds a prompt), then 4 steps
 * of one row a slot (the decoder's rows), the rows in another order than the slots. Slot 1 holds
 * two documents, the second from position 5 (its own chunk, then its rows): keys turned by a
 * chunk's positions (rp0) meet queries turned by the rows' (rpos), where an offset or a segment
 * restart counted one way on one path and another way on the other shows (within one path RoPE
 * sees only differences of positions) */
static void mla_batch(mla_run *r) {
    static const int len[3] = {20, 9, 33};
    enum { DOC = 5 };
    mla_chunk(r, 0, 0, len[0], 0, "slot 0's prefix");
    mla_chunk(r, 1, 0, DOC, 0, "slot 1's first document");
    mla_chunk(r, 1, DOC, len[1] - DOC, DOC, L("slot 1's second document, from %d", DOC));
    mla_chunk(r, 2, 0, len[2], 0, "slot 2's prefix");
    int32_t slot[3], pos[3], seg[3], rpos[3];
    for (int step = 0; step < MLA_STEPS; step++) {
        for (int i = 0; i < 3; i++) {
            slot[i] = 2 - i, pos[i] = len[2 - i] + step;
            seg[i] = slot[i] == 1 ? DOC : 0, rpos[i] = pos[i] - seg[i];
        }
        mla_call(r, (tsr_mla_rows){.n = 3, .cap = MLA_CAP, .slot = slot, .pos = pos, .seg = seg,
                                   .rpos = rpos},
                 L("step %d: slots 2, 1, 0 at positions %d, %d, %d (RoPE %d, %d, %d)", step,
                   pos[0], pos[1], pos[2], rpos[0], rpos[1], rpos[2]));
    }
}

static void run_mla(void) {
    tap_diag("next: multi-head latent attention's decoding (tests/gpu/gpu_ops_mla.c)");
    for (size_t i = 0; i < NCASES(MLA); i++) {
        mla_run r;
        mla_setup(&r, &MLA[i]);
        if (MLA[i].slots) mla_batch(&r);
        else mla_sequence(&r);
        scope_end(MLA[i].name);
    }
}
