/* decoder.c — the decoder's sequence, written once over the backend interface (decoder.h,
 * kernels/backend.h; docs/decoder.md).
 *
 * One block:  ln1 = N1(x); qkv = ln1 @ qkvw^T + qkvb (into qkvr, then qkv = QK-norm(qkvr) with
 *             qk_norm); qkv = RoPE(qkv) in place (pos = rope); atty = attention(qkv);
 *             residual2 = x + atty @ attprojw^T + attprojb; ln2 = N2(residual2);
 *             fch_gelu = gelu(fch = ln2 @ fcw^T + fcb)  (SwiGLU: fch = [gate | up] projection,
 *             fch_gelu = silu(gate) * up);
 *             residual3 = residual2 + fch_gelu @ fcprojw^T + fcprojb
 * N is LayerNorm or RMSNorm (model.norm). The LM head is wte, or lm_head when untied.
 * Each residual add is fused with the LayerNorm that reads it (residual2 with LN2, residual3 with
 * the next layer's LN1 or the final one), so only layer 0's LN1 runs alone. The steps from LN1 to
 * the MLP's GELU form a table that activation checkpointing reruns a range of (residual3 is always
 * kept, so the last matmul never reruns). The KV-cache decode step runs the same layer loop over
 * one chunk's buffers, with the cache's attention in place of the training one.
 */
#include "model/decoder.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/model_ep.h"
#include "model/model_lora.h"
#include "model/model_ring.h"

/* ---- the parameter units ------------------------------------------------------------------- */

void dec_unit_offsets(const tsr_model *m, int u, size_t off[TSR_P_COUNT]) {
    size_t len;
    for (int i = 0; i < TSR_P_COUNT; i++) off[i] = model_unit_slice(m, (tsr_param_id)i, u, &len);
}

/* unit u's tensors by id (weights in the backend's type; gradients in backward) */
typedef struct dec_unit {
    const void *w[TSR_P_COUNT];
    float *g[TSR_P_COUNT];
} dec_unit;

static void unit_get(const tsr_decoder *d, int u, int backward, dec_unit *v) {
    memset(v, 0, sizeof *v);
    d->params.get(d->params.ctx, u, backward, v->w, v->g);
}

static void unit_put(const tsr_decoder *d, int u, int backward) {
    if (d->params.put) d->params.put(d->params.ctx, u, backward);
}

/* ---- the activation plan ------------------------------------------------------------------- */

/* Elements between consecutive layers of a stack of n elements of elem bytes: n rounded up to
 * whole blocks of the backend's alignment. On CUDA (256 bytes) every layer's slice then starts as
 * aligned as the buffer, so cuBLASLt (which caches its algorithm by the pointers' alignment) runs
 * the same algorithm for every layer and checkpoint slot: checkpointed runs stay bit-identical. */
static size_t layer_stride(size_t n, size_t elem, size_t align) {
    return (n * elem + align - 1) / align * align / elem;
}

/* per-layer strides of the stacks for B x T, in elements */
typedef struct strides {
    size_t nc, n, f, fw, qkv, qd, qkn, att; /* act (N,C); fp32 (N); act (N,F); act (N,FW);
                                             * act (N,QKV); act (N,NH*hs); fp32 (N,NH+KVH);
                                             * the saved attention */
    /* MoE (0 in a dense model): act (N,E), fp32 (N,E), 4-byte (N,K), 4-byte (NK), act (NK,C),
     * act (NK,2FE), act (NK,FE), act (N,2S), act (N,S), int32 (E+1), fp32 (2) */
    size_t ne, nef, nk, r, xg, h, hg, sh, shg, offs, stats;
} strides;

static strides strides_of(const tsr_model *m, const tsr_backend *be, int B, int T) {
    size_t N = (size_t)B * T, e = tsr_dtype_size(be->act), f = sizeof(float), al = be->align;
    const size_t E = (size_t)m->E, K = (size_t)m->K, NK = N * K, FE = (size_t)m->FE;
    const size_t S = (size_t)m->S;
    return (strides){layer_stride(N * m->C, e, al), layer_stride(N, f, al),
                     layer_stride(N * m->F, e, al), layer_stride(N * m->FW, e, al),
                     layer_stride(N * m->QKV, e, al), layer_stride(N * m->QD, e, al),
                     layer_stride(N * (size_t)(m->NH + m->KVH), f, al),
                     /* context parallelism keeps the log-sum-exp (B,NH,T) of its ring */
                     layer_stride(m->cpN > 1 ? N * (size_t)m->NH : be->attention_saved(B, T, m->NH),
                                  f, al),
                     .ne = layer_stride(N * E, e, al), .nef = layer_stride(N * E, f, al),
                     .nk = layer_stride(N * K, f, al), .r = layer_stride(NK, f, al),
                     .xg = layer_stride(NK * m->C, e, al), .h = layer_stride(NK * 2 * FE, e, al),
                     .hg = layer_stride(NK * FE, e, al), .sh = layer_stride(N * 2 * S, e, al),
                     .shg = layer_stride(N * S, e, al),
                     .offs = E ? layer_stride(E + 1, f, al) : 0,
                     .stats = E ? layer_stride(2, f, al) : 0};
}

/* model.activation_compression = "fp8" (docs/cuda.md "Compressed activations"): the saved
 * tensors a layer keeps as E4M3 (the linear layers' inputs and the MLP's hidden layer), each with
 * its one-layer working copy (bf), its E4M3 stack (q) and its activation checkpointing group */
#define NCOMP 5
static const struct { tsr_act_id bf, q; tsr_act_group g; } comp[NCOMP] = {
    {TSR_A_LN1, TSR_A_Q_LN1, TSR_AG_LN1},   {TSR_A_ATTY, TSR_A_Q_ATTY, TSR_AG_ATTN},
    {TSR_A_LN2, TSR_A_Q_LN2, TSR_AG_RES2},  {TSR_A_FCH, TSR_A_Q_FCH, TSR_AG_MLP},
    {TSR_A_FCHG, TSR_A_Q_FCHG, TSR_AG_MLP},
};

/* on where the backend has the casts (the CUDA backend; a host model of a CUDA run, e.g. its
 * sampler, keeps its fp32 activations as computed) */
static int comp_on(const tsr_model *m, const tsr_backend *be) {
    return m->cfg.activation_compression == TSR_ACTCOMP_FP8 && be->act_compress;
}

/* comp[i]'s elements per position */
static size_t comp_width(const tsr_model *m, int i) {
    const int w[NCOMP] = {m->C, m->QD, m->C, m->FW, m->F};
    return (size_t)w[i];
}

/* layers of a compressed tensor's E4M3 stack: those that keep group g */
static size_t comp_layers(const tsr_model *m, tsr_act_group g) {
    return (size_t)(m->L - (model_act_group_dropped(m, g) ? m->n_ckpt : 0));
}

/* layer l's slot of a compressed tensor's E4M3 stack, -1 when l recomputes group g instead */
static long comp_slot(const tsr_model *m, tsr_act_group g, int l) {
    if (!model_act_group_dropped(m, g)) return l;
    return model_ckpt_layer(m, l) ? -1 : (long)model_act_group_slot(m, g, l) - 1;
}

/* the compressed plan: each working copy one layer of its stack's, each E4M3 stack (bytes) over
 * the layers that keep the group, the scales (L, NCOMP, 4) fp32 */
static void comp_plan(const tsr_model *m, const tsr_backend *be, size_t N, size_t b[TSR_A_COUNT]) {
    const size_t e = tsr_dtype_size(be->act), al = be->align;
    for (int i = 0; i < NCOMP; i++) {
        const size_t n = N * comp_width(m, i);
        if (!b[comp[i].bf]) continue;
        b[comp[i].bf] = e * layer_stride(n, e, al);
        b[comp[i].q] = comp_layers(m, comp[i].g) * layer_stride(n, 1, al);
    }
    b[TSR_A_Q_SCALES] = (size_t)m->L * NCOMP * 4 * sizeof(float);
}

/* tsr_acts' named view lies over buf[] in tsr_act_id order (model.h) */
#define NAMED_AT(field, id) (offsetof(tsr_acts, field) == offsetof(tsr_acts, buf) + (id) * sizeof(void *))
_Static_assert(NAMED_AT(encoded, TSR_A_ENCODED) && NAMED_AT(att, TSR_A_ATT) &&
               NAMED_AT(residual3, TSR_A_RES3) && NAMED_AT(probs, TSR_A_LOGITS) &&
               NAMED_AT(dlosses, TSR_A_DLOSSES) && NAMED_AT(seq, TSR_A_SEQ) &&
               NAMED_AT(greedy, TSR_A_GREEDY) && NAMED_AT(moe_logits, TSR_A_MOE_LOGITS) &&
               NAMED_AT(moe_offs, TSR_A_MOE_OFFS) && NAMED_AT(moe_dshg, TSR_A_MOE_DSHG),
               "tsr_acts: the named buffers vs tsr_act_id");
#undef NAMED_AT

/* Bytes of every buffer of tsr_acts for B x T on be (0: not allocated); with context
 * parallelism, for this rank's T / cpN positions of each sequence, and the ring's buffers. */
static void act_plan(const tsr_model *m, const tsr_backend *be, int B, int Tw,
                     size_t bytes[TSR_A_COUNT]) {
    const int cp = m->cpN > 1, T = Tw / (cp ? m->cpN : 1);
    const size_t L = m->L, C = m->C, F = m->F, N = (size_t)B * T, e = tsr_dtype_size(be->act);
    const size_t FW = m->FW, QKV = m->QKV, QD = m->QD;
    const int ln = m->cfg.norm == TSR_NORM_LAYERNORM, qk = m->cfg.qk_norm;
    const size_t f = sizeof(float), i4 = sizeof(int32_t);
    const size_t Ln1 = model_act_group_layers(m, TSR_AG_LN1);
    const size_t Lat = model_act_group_layers(m, TSR_AG_ATTN);
    const size_t Lr2 = model_act_group_layers(m, TSR_AG_RES2);
    const size_t Lml = model_act_group_layers(m, TSR_AG_MLP);
    const strides st = strides_of(m, be, B, T);
    const int doc = m->cfg.attn_mask == TSR_MASK_DOCUMENT;
    const int learned = m->params_info[TSR_P_WPE].numel > 0, rope = m->cfg.pos == TSR_POS_ROPE;
    const size_t dev = be->host ? 0 : N * i4; /* device copies of host arrays */
    /* the dense MLP's buffers only when some layer has one; with moe_every > 1 both kinds are
     * stacked over the MLP group's layers (a MoE layer's slot of the dense stack goes unused, and
     * the reverse: docs/moe.md) */
    const int moe = m->E > 0, sh = moe && m->S > 0;
    const size_t dense = m->LD > 0;
    const size_t NK = N * (size_t)m->K, E = (size_t)m->E, FE = (size_t)m->FE, S = (size_t)m->S;
    const size_t b[TSR_A_COUNT] = {
        [TSR_A_ENCODED] = e * N * C,      [TSR_A_LN1] = e * Ln1 * st.nc,
        [TSR_A_LN1_MEAN] = ln ? f * Ln1 * st.n : 0, [TSR_A_LN1_RSTD] = f * Ln1 * st.n,
        [TSR_A_QKV] = e * Lat * st.qkv,   [TSR_A_QKVR] = qk ? e * Lat * st.qkv : 0,
        [TSR_A_QKN_RSTD] = qk ? f * Lat * st.qkn : 0, [TSR_A_ATTY] = e * Lat * st.qd,
        [TSR_A_ATT] = f * Lat * st.att,   [TSR_A_RES2] = e * Lr2 * st.nc,
        [TSR_A_LN2] = e * Lr2 * st.nc,    [TSR_A_LN2_MEAN] = ln ? f * Lr2 * st.n : 0,
        [TSR_A_LN2_RSTD] = f * Lr2 * st.n, [TSR_A_FCH] = dense * e * Lml * st.fw,
        [TSR_A_FCHG] = dense * e * Lml * st.f, [TSR_A_RES3] = e * L * st.nc,
        [TSR_A_LNF] = e * N * C,          [TSR_A_LNF_MEAN] = ln ? f * N : 0,
        [TSR_A_LNF_RSTD] = f * N,         [TSR_A_LOGITS] = e * N * (size_t)m->Vp,
        [TSR_A_LOSSES] = f * N,           [TSR_A_SCRATCH] = e * N * C,
        [TSR_A_DRES] = e * N * C,         [TSR_A_DLN] = e * N * C,
        [TSR_A_DATTY] = e * N * QD,       [TSR_A_DQKV] = e * N * QKV,
        [TSR_A_DQKVR] = qk ? e * N * QKV : 0,
        [TSR_A_DFCH] = dense * e * N * FW, [TSR_A_DFCHG] = dense * e * N * F,
        [TSR_A_DLOSSES] = f * N,          [TSR_A_SEQ] = doc && !cp ? i4 * N : 0,
        /* a ring's positions are never 0.. T-1 (its two chunks lie apart) */
        [TSR_A_POS] = (doc || cp) && (learned || rope) ? i4 * N : 0,
        [TSR_A_ATT_SCRATCH] = cp ? 0 : be->attention_scratch(B, T, m->NH, m->KVH, m->hs),
        [TSR_A_TOKENS] = dev,             [TSR_A_TARGETS] = dev,
        [TSR_A_GREEDY] = dev,
        [TSR_A_MOE_LOGITS] = moe ? e * Lml * st.ne : 0,
        [TSR_A_MOE_PROBS] = moe ? f * Lml * st.nef : 0,
        [TSR_A_MOE_LSE] = moe ? f * Lml * st.n : 0,
        [TSR_A_MOE_IDX] = moe ? i4 * Lml * st.nk : 0,
        [TSR_A_MOE_WTS] = moe ? f * Lml * st.nk : 0,
        [TSR_A_MOE_ROWS] = moe ? i4 * Lml * st.r : 0,
        [TSR_A_MOE_SLOT] = moe ? i4 * Lml * st.r : 0,
        [TSR_A_MOE_XG] = moe ? e * Lml * st.xg : 0,
        [TSR_A_MOE_H] = moe ? e * Lml * st.h : 0,
        [TSR_A_MOE_HG] = moe ? e * Lml * st.hg : 0,
        [TSR_A_MOE_Y] = moe ? e * Lml * st.xg : 0,
        [TSR_A_MOE_SH] = sh ? e * Lml * st.sh : 0,
        [TSR_A_MOE_SHG] = sh ? e * Lml * st.shg : 0,
        [TSR_A_MOE_OFFS] = moe ? i4 * L * st.offs : 0,
        [TSR_A_MOE_STATS] = moe ? f * L * st.stats : 0,
        [TSR_A_MOE_SHOUT] = sh ? e * N * C : 0,
        [TSR_A_MOE_DXY] = moe ? e * NK * C : 0,
        [TSR_A_MOE_DH] = moe ? e * NK * 2 * FE : 0,
        [TSR_A_MOE_DHG] = moe ? e * NK * FE : 0,
        [TSR_A_MOE_DWTS] = moe ? f * N * (size_t)m->K : 0,
        [TSR_A_MOE_DLOGITS] = moe ? e * N * E : 0,
        [TSR_A_MOE_DSH] = sh ? e * N * 2 * S : 0,
        [TSR_A_MOE_DSHG] = sh ? e * N * S : 0,
    };
    memcpy(bytes, b, sizeof b);
    if (comp_on(m, be)) comp_plan(m, be, N, bytes);
    if (cp)
        ring_act_plan(be, m->cpN, B, Tw, m->NH, m->KVH, m->hs, doc, bytes + TSR_A_RING_KV);
}

size_t dec_acts_bytes(const tsr_model *m, const tsr_backend *be, int B, int T) {
    size_t b[TSR_A_COUNT], sum = 0;
    act_plan(m, be, B, T, b);
    for (int i = 0; i < TSR_A_COUNT; i++) sum += (b[i] + be->align - 1) / be->align * be->align;
    return sum;
}

size_t dec_layer_acts_bytes(const tsr_model *m, const tsr_backend *be, int B, int T, int fp8) {
    tsr_model one = *m; /* the same model without checkpointing, compressed or not */
    one.n_ckpt = 0;
    one.cfg.activation_compression = fp8 ? TSR_ACTCOMP_FP8 : TSR_ACTCOMP_NONE;
    size_t b[TSR_A_COUNT], sum = 0;
    act_plan(&one, be, B, T, b);
    static const tsr_act_id stacked[] = {
        TSR_A_LN1,       TSR_A_LN1_MEAN,  TSR_A_LN1_RSTD,  TSR_A_QKV,      TSR_A_QKVR,
        TSR_A_QKN_RSTD,  TSR_A_ATTY,      TSR_A_ATT,       TSR_A_RES2,     TSR_A_LN2,
        TSR_A_LN2_MEAN,  TSR_A_LN2_RSTD,  TSR_A_FCH,       TSR_A_FCHG,     TSR_A_RES3,
        TSR_A_MOE_LOGITS, TSR_A_MOE_PROBS, TSR_A_MOE_LSE,  TSR_A_MOE_IDX,  TSR_A_MOE_WTS,
        TSR_A_MOE_ROWS,  TSR_A_MOE_SLOT,  TSR_A_MOE_XG,    TSR_A_MOE_H,    TSR_A_MOE_HG,
        TSR_A_MOE_Y,     TSR_A_MOE_SH,    TSR_A_MOE_SHG,   TSR_A_MOE_OFFS, TSR_A_MOE_STATS,
        TSR_A_Q_LN1,     TSR_A_Q_ATTY,    TSR_A_Q_LN2,     TSR_A_Q_FCH,    TSR_A_Q_FCHG,
        TSR_A_Q_SCALES};
    for (size_t i = 0; i < sizeof stacked / sizeof stacked[0]; i++) sum += b[stacked[i]];
    if (comp_on(&one, be)) /* the working copies: one layer's for the whole model */
        for (int i = 0; i < NCOMP; i++) sum -= b[comp[i].bf];
    return sum / (size_t)m->L;
}

/* layer l's activations: its slot of each group's stack, x its input */
typedef struct dec_layer {
    void *x, *ln1, *qkv, *qkvr, *atty, *res2, *ln2, *fch, *fchg, *res3;
    float *ln1m, *ln1r, *qknr, *att, *ln2m, *ln2r; /* the means NULL with RMSNorm */
    /* MoE (NULL in a dense model): the MLP group's slot, and the layer's offsets and stats */
    void *mlg, *xg, *h, *hg, *y, *sh, *shg, *shout;
    float *probs, *lse, *wts, *stats;
    int32_t *idx, *rows, *slot, *offs;
} dec_layer;

static dec_layer layer_at(const tsr_model *m, const tsr_backend *be, const tsr_acts *a, int l) {
    const strides st = strides_of(m, be, a->B, a->T); /* the allocated B x T */
    const size_t e = tsr_dtype_size(be->act);
    const size_t s1 = model_act_group_slot(m, TSR_AG_LN1, l);
    const size_t sa = model_act_group_slot(m, TSR_AG_ATTN, l);
    const size_t s2 = model_act_group_slot(m, TSR_AG_RES2, l);
    const size_t sm = model_act_group_slot(m, TSR_AG_MLP, l);
    const int cz = !comp_on(m, be); /* 0: the compressed tensors' working copies (slot 0) */
    char *const *p = (char *const *)a->buf;
    /* slot of a stack, NULL for a buffer this model does not have */
#define AT(id, slot, stride) (p[id] ? (void *)(p[id] + (slot) * (stride) * e) : NULL)
#define FAT(buf, slot, stride) ((buf) ? (buf) + (slot) * (stride) : NULL)
    return (dec_layer){
        .x = l ? AT(TSR_A_RES3, (size_t)(l - 1), st.nc) : a->buf[TSR_A_ENCODED],
        .ln1 = AT(TSR_A_LN1, cz * s1, st.nc), .ln1m = FAT(a->ln1_mean, s1, st.n),
        .ln1r = a->ln1_rstd + s1 * st.n, .qkv = AT(TSR_A_QKV, sa, st.qkv),
        .qkvr = AT(TSR_A_QKVR, sa, st.qkv), .qknr = FAT(a->qkn_rstd, sa, st.qkn),
        .atty = AT(TSR_A_ATTY, cz * sa, st.qd), .att = a->att + sa * st.att,
        .res2 = AT(TSR_A_RES2, s2, st.nc), .ln2 = AT(TSR_A_LN2, cz * s2, st.nc),
        .ln2m = FAT(a->ln2_mean, s2, st.n), .ln2r = a->ln2_rstd + s2 * st.n,
        .fch = AT(TSR_A_FCH, cz * sm, st.fw), .fchg = AT(TSR_A_FCHG, cz * sm, st.f),
        .res3 = AT(TSR_A_RES3, (size_t)l, st.nc),
        .mlg = AT(TSR_A_MOE_LOGITS, sm, st.ne), .xg = AT(TSR_A_MOE_XG, sm, st.xg),
        .h = AT(TSR_A_MOE_H, sm, st.h), .hg = AT(TSR_A_MOE_HG, sm, st.hg),
        .y = AT(TSR_A_MOE_Y, sm, st.xg), .sh = AT(TSR_A_MOE_SH, sm, st.sh),
        .shg = AT(TSR_A_MOE_SHG, sm, st.shg), .shout = a->moe_shout,
        .probs = FAT(a->moe_probs, sm, st.nef), .lse = FAT(a->moe_lse, sm, st.n),
        .wts = FAT(a->moe_wts, sm, st.nk), .stats = FAT(a->moe_stats, (size_t)l, st.stats),
        .idx = FAT(a->moe_idx, sm, st.nk), .rows = FAT(a->moe_rows, sm, st.r),
        .slot = FAT(a->moe_slot, sm, st.r), .offs = FAT(a->moe_offs, (size_t)l, st.offs),
    };
#undef AT
#undef FAT
}

/* Every layer's slice of every stack starts on the backend's alignment (layer_stride): checked
 * once per allocation. */
static void check_layout(const tsr_model *m, const tsr_backend *be, const tsr_acts *a) {
    if (be->align <= 1) return;
    for (int l = 0; l < m->L; l++) {
        dec_layer v = layer_at(m, be, a, l);
        const void *p[] = {v.x,    v.ln1,  v.qkv,  v.qkvr, v.atty, v.res2, v.ln2,  v.fch,
                           v.fchg, v.res3, v.ln1m, v.ln1r, v.qknr, v.att,  v.ln2m, v.ln2r,
                           v.mlg,  v.xg,   v.h,    v.hg,   v.y,    v.sh,   v.shg,  v.probs,
                           v.lse,  v.wts,  v.stats, v.idx, v.rows, v.slot, v.offs};
        for (size_t k = 0; k < sizeof p / sizeof p[0]; k++)
            if ((uintptr_t)p[k] % be->align != 0)
                tsr_die(TSR_EXIT_INTERNAL, "decoder: layer %d's activation %zu at %p is not "
                        "%zu-byte aligned (B=%d T=%d)", l, k, p[k], be->align, a->B, a->T);
    }
}

void dec_check_backend(const tsr_model *m, const tsr_backend *be) {
    const tsr_model_config *c = &m->cfg;
    const struct { int needed; const void *entry; const char *what; } need[] = {
        {c->norm == TSR_NORM_RMSNORM, be->rmsnorm_forward, "model.norm = \"rmsnorm\""},
        {c->norm == TSR_NORM_RMSNORM, be->residual_rmsnorm_forward, "model.norm = \"rmsnorm\""},
        {c->norm == TSR_NORM_RMSNORM, be->rmsnorm_backward, "model.norm = \"rmsnorm\""},
        {c->qk_norm, be->qknorm_forward, "model.qk_norm = true"},
        {c->qk_norm, be->qknorm_backward, "model.qk_norm = true"},
        {c->pos == TSR_POS_ROPE, be->rope_forward, "model.pos = \"rope\""},
        {c->pos == TSR_POS_ROPE, be->rope_backward, "model.pos = \"rope\""},
        {c->mlp == TSR_MLP_SWIGLU, be->swiglu_forward, "model.mlp = \"swiglu\""},
        {c->mlp == TSR_MLP_SWIGLU, be->swiglu_backward, "model.mlp = \"swiglu\""},
        {m->E > 0, be->moe_route, "model.moe_experts > 0"},
        {m->E > 0, be->moe_gather, "model.moe_experts > 0"},
        {m->E > 0, be->moe_gather_backward, "model.moe_experts > 0"},
        {m->E > 0, be->moe_matmul_forward, "model.moe_experts > 0"},
        {m->E > 0, be->moe_matmul_backward, "model.moe_experts > 0"},
        {m->E > 0, be->moe_combine, "model.moe_experts > 0"},
        {m->E > 0, be->moe_combine_backward, "model.moe_experts > 0"},
        {m->E > 0, be->moe_router_backward, "model.moe_experts > 0"},
        {m->E > 0, be->swiglu_forward, "model.moe_experts > 0"},
        {m->E > 0, be->swiglu_backward, "model.moe_experts > 0"},
        {m->lora != NULL, be->lora_forward, "lora.rank > 0"},
        {m->lora != NULL, be->lora_backward, "lora.rank > 0"},
        {m->cpN > 1, be->ring_forward, "parallel.context > 1"},
        {m->cpN > 1, be->ring_backward, "parallel.context > 1"},
        {m->cpN > 1, be->f32_to_act, "parallel.context > 1"},
        {m->cpN > 1, be->add_f32, "parallel.context > 1"},
        {m->cpN > 1, be->copy_rows, "parallel.context > 1"},
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (need[i].needed && !need[i].entry)
            tsr_die(TSR_EXIT_USAGE, "%s: the %s backend does not have it yet (docs/models.md)",
                    need[i].what, be->name);
}

int dec_try_alloc_acts(const tsr_model *m, const tsr_backend *be, tsr_acts *a, int B, int T) {
    size_t b[TSR_A_COUNT];
    dec_check_backend(m, be);
    dec_free_acts(be, a);
    act_plan(m, be, B, T, b);
    for (int i = 0; i < TSR_A_COUNT; i++)
        if (b[i] && !(a->buf[i] = be->try_alloc(be, b[i]))) {
            dec_free_acts(be, a); /* nothing half-made stays */
            return -1;
        }
    T /= m->cpN > 1 ? m->cpN : 1; /* (context parallelism: this rank's share) */
    if (!be->host) { /* host staging: a failure backs off like the device buffers, never exits */
        size_t N = (size_t)B * T;
        a->seq_host = malloc(N * sizeof(int32_t));
        a->pos_host = malloc(N * sizeof(int32_t));
        a->losses_host = malloc(N * sizeof(float));
        a->dlosses_host = malloc(N * sizeof(float));
        if (!a->seq_host || !a->pos_host || !a->losses_host || !a->dlosses_host) {
            dec_free_acts(be, a);
            return -1;
        }
    }
    a->B = B;
    a->T = T;
    check_layout(m, be, a);
    return 0;
}

void dec_free_acts(const tsr_backend *be, tsr_acts *a) {
    for (int i = 0; i < TSR_A_COUNT; i++) {
        if (a->buf[i]) be->free(be, a->buf[i]);
        a->buf[i] = NULL;
    }
    free(a->seq_host), free(a->pos_host), free(a->losses_host), free(a->dlosses_host);
    a->seq_host = a->pos_host = NULL;
    a->losses_host = a->dlosses_host = NULL;
    a->B = a->T = 0;
    a->dlogits = 0;
}

/* ---- the layers ---------------------------------------------------------------------------- */

/* The steps of a block's forward from LN1 to the MLP's GELU, in order. */
typedef enum {
    ST_LN1 = 0, /* ln1 = LN1(x) (layer 0 only, and recomputation: else fused at the last layer) */
    ST_QKV,     /* qkv = ln1 @ qkvw^T + qkvb */
    ST_ATTN,    /* atty = attention(qkv) */
    ST_RES2,    /* residual2 = x + atty @ attprojw^T + attprojb; ln2 = LN2(residual2) */
    ST_FC,      /* fch_gelu = gelu(fch = ln2 @ fcw^T + fcb) */
    ST_COUNT
} layer_step;

/* What a checkpointed layer reruns before its backward, by mode: from the first step that writes
 * a dropped group to the last one the backward reads. Indexed by tsr_actckpt_kind. */
static const struct { layer_step first, last; } rerun[] = {
    {ST_COUNT, ST_LN1}, /* none: nothing */
    {ST_LN1, ST_FC},    /* block: everything from the kept input x */
    {ST_QKV, ST_ATTN},  /* attention: from the kept ln1 */
    {ST_FC, ST_FC},     /* mlp: from the kept ln2 */
};
_Static_assert(sizeof rerun / sizeof rerun[0] == TSR_ACTCKPT_COUNT, "rerun vs tsr_actckpt_kind");

/* One pass over the layers: training (kv NULL: layer l's slots of the stacks) or a decode chunk
 * (one set of chunk buffers, the cache's attention). */
typedef struct run {
    const tsr_decoder *d;
    int B, T, N;
    void *scratch;                 /* (N,C) the projections' outputs */
    void *lnf;                     /* (N,C) the final LayerNorm's output, and its statistics */
    float *lnfm, *lnfr;
    tsr_kv_cache *kv;              /* decode: the cache, its chunk buffers; p0 the first position */
    tsr_kv_slots *ks;              /* batched decode (kv = its row buffers): the slots' caches */
    int slot;                      /* batched: the slot a chunk feeds, or -1: each row one new
                                    * token of the slot its ids name (ks->dev_ids) */
    int p0;
} run;

static dec_layer run_layer(const run *r, int l) {
    if (!r->kv) return layer_at(r->d->m, r->d->be, r->d->a, l);
    tsr_kv_cache *kv = r->kv;
    return (dec_layer){.x = kv->x, .ln1 = kv->ln, .qkv = kv->qkv, .qkvr = kv->qkvr,
                       .atty = kv->atty, .res2 = kv->x, .ln2 = kv->ln, .fch = kv->fch,
                       .fchg = kv->fchg, .res3 = kv->x, .ln1m = kv->mean, .ln1r = kv->rstd,
                       .qknr = kv->qknr, .ln2m = kv->mean, .ln2r = kv->rstd,
                       .mlg = kv->moe.logits, .xg = kv->moe.xg, .h = kv->moe.h,
                       .hg = kv->moe.hg, .y = kv->moe.y, .sh = kv->moe.sh, .shg = kv->moe.shg,
                       .shout = kv->moe.shout, .probs = kv->moe.probs, .lse = kv->moe.lse,
                       .wts = kv->moe.wts, .stats = kv->moe.stats, .idx = kv->moe.idx,
                       .rows = kv->moe.rows, .slot = kv->moe.slot, .offs = kv->moe.offs};
}

/* The block's normalisation (model.norm): LayerNorm (mean, rstd; bias b or NULL) or RMSNorm
 * (rstd; mean and b unused). */
static void norm_forward(const run *r, void *out, float *mean, float *rstd, const void *inp,
                         const void *w, const void *b, int N) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    if (m->cfg.norm == TSR_NORM_RMSNORM)
        be->rmsnorm_forward(be, out, rstd, inp, w, N, m->C, (float)m->cfg.norm_eps);
    else be->layernorm_forward(be, out, mean, rstd, inp, w, b, N, m->C);
}

/* res = a + b, then out = the normalisation of res (fused) */
static void residual_norm_forward(const run *r, void *res, void *out, float *mean, float *rstd,
                                  const void *a, const void *b, const void *w, const void *bias,
                                  int N) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    if (m->cfg.norm == TSR_NORM_RMSNORM)
        be->residual_rmsnorm_forward(be, res, out, rstd, a, b, w, N, m->C,
                                     (float)m->cfg.norm_eps);
    else be->residual_layernorm_forward(be, res, out, mean, rstd, a, b, w, bias, N, m->C);
}

static void norm_backward(const run *r, void *dinp, float *dw, float *db, const void *dout,
                          const void *inp, const void *w, const float *mean, const float *rstd) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    if (m->cfg.norm == TSR_NORM_RMSNORM)
        be->rmsnorm_backward(be, dinp, dw, dout, inp, w, rstd, r->N, m->C);
    else be->layernorm_backward(be, dinp, dw, db, dout, inp, w, mean, rstd, r->N, m->C);
}

/* RoPE's positions: the segment positions (attn_mask = document, training), else t + p0 (a
 * decode chunk: its first position in the current segment) */
static const int32_t *rope_pos(const run *r, int *p0) {
    if (r->ks && r->slot < 0) { /* each row at its own position in its segment */
        *p0 = 0;
        return r->ks->dev_ids + 4 * r->ks->rows;
    }
    if (r->kv) {
        *p0 = r->p0 - (r->ks ? r->ks->seg[r->slot] : r->kv->seg);
        return NULL;
    }
    *p0 = 0;
    return r->d->a->pos;
}

/* out = inp @ w^T + bias (gelu epilogue when pre_gelu) for layer l's linear layer (l < 0: not a
 * decoder linear layer, the router): a decode step's single row goes to the backend's
 * matrix-vector product where it has one; batched decoding's rows to its batch-invariant
 * product; the layers the backend runs in FP8 (fp8_first .. fp8_last) to matmul_forward_fp8,
 * outside KV-cache decoding (generation stays in the backend's own precision) */
static void linear(const run *r, int l, void *out, void *pre_gelu, const void *inp, const void *w,
                   const void *bias, int N, int IC, int OC) {
    const tsr_backend *be = r->d->be;
    tsr_gelu_kind gk = (tsr_gelu_kind)r->d->m->cfg.gelu;
    if (r->ks && be->matrows_forward)
        be->matrows_forward(be, out, pre_gelu, inp, w, bias, N, IC, OC, gk);
    else if (r->kv && !r->ks && N == 1 && be->matvec_forward)
        be->matvec_forward(be, out, pre_gelu, inp, w, bias, N, IC, OC, gk);
    else if (be->matmul_forward_fp8 && !r->kv && l >= be->fp8_first && l <= be->fp8_last)
        be->matmul_forward_fp8(be, out, pre_gelu, inp, w, bias, N, IC, OC, gk);
    else be->matmul_forward(be, out, pre_gelu, inp, w, bias, N, IC, OC, gk);
}

static void attention(const run *r, int l, const dec_layer *v) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const int NH = d->m->NH, KVH = d->m->KVH, hs = d->m->hs;
    if (!r->kv && d->ring) { /* context parallelism: round the ring (model_ring.h) */
        ring_attention_forward(d->ring, be, d->a, v->atty, v->att, v->qkv, d->slopes, r->B,
                               r->T * d->ring->N, NH, KVH, hs);
        return;
    }
    if (!r->kv) {
        be->attention_forward(be, v->atty, v->att, v->qkv, d->slopes, d->a->seq, r->B, r->T, NH,
                              KVH, hs);
        return;
    }
    tsr_kv_cache *kv = r->kv;
    const size_t per = (size_t)KVH * hs * kv->cap, e = tsr_dtype_size(be->act);
    if (r->ks) { /* layer l of every slot, then the slot */
        const tsr_kv_slots *ks = r->ks;
        char *kt = (char *)kv->kt + (size_t)l * ks->slots * per * e;
        char *vv = (char *)kv->v + (size_t)l * ks->slots * per * e;
        const int32_t *ids = ks->dev_ids, R = ks->rows;
        if (r->slot >= 0)
            be->attention_decode(be, v->atty, kt + (size_t)r->slot * per * e,
                                 vv + (size_t)r->slot * per * e, v->qkv, d->slopes, kv->att,
                                 kv->nthreads, r->p0, r->N, ks->seg[r->slot], kv->cap, NH, KVH,
                                 hs);
        else
            be->attention_decode_rows(be, v->atty, kt, vv, v->qkv, d->slopes, kv->att,
                                      kv->nthreads, ids + R, ids + 2 * R, ids + 3 * R, r->N, per,
                                      kv->cap, NH, KVH, hs);
        return;
    }
    be->attention_decode(be, v->atty, (char *)kv->kt + l * per * e, (char *)kv->v + l * per * e,
                         v->qkv, d->slopes, kv->att, kv->nthreads, r->p0, r->N, kv->seg, kv->cap,
                         NH, KVH, hs);
}

/* LoRA (model_lora.h): target t's adapter path of layer l added to out, the projection's
 * output (forward), or its backward into dinp and the adapters' gradients */
static void lora_fwd(const run *r, int l, tsr_lora_target t, void *out, const void *inp) {
    lora_forward_at(r->d->lora, r->d->be, l, t, out, inp, r->N);
}

static void lora_bwd(const run *r, int l, tsr_lora_target t, void *dinp, const void *dout,
                     const void *inp) {
    lora_backward_at(r->d->lora, r->d->be, l, t, dinp, dout, inp, r->N);
}

/* qkv = ln1 @ qkvw^T + qkvb (+ the q, k, v adapters), then QK-norm (from qkvr) and RoPE in
 * place */
static void qkv_forward(const run *r, int l, const dec_layer *v, const void *const *w) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const tsr_model *m = d->m;
    const int qk = m->cfg.qk_norm;
    void *proj = qk ? v->qkvr : v->qkv;
    linear(r, l, proj, NULL, v->ln1, w[TSR_P_QKVW], w[TSR_P_QKVB], r->N, m->C, m->QKV);
    for (int t = TSR_LORA_Q; t <= TSR_LORA_V; t++) lora_fwd(r, l, t, proj, v->ln1);
    if (qk)
        be->qknorm_forward(be, v->qkv, v->qknr, v->qkvr, w[TSR_P_QNORMW], w[TSR_P_KNORMW], r->N,
                           m->NH, m->KVH, m->hs, (float)m->cfg.norm_eps);
    if (m->cfg.pos == TSR_POS_ROPE) {
        int p0;
        const int32_t *pos = rope_pos(r, &p0);
        be->rope_forward(be, v->qkv, pos, p0, d->rope, r->B, r->T, m->NH, m->KVH, m->hs);
    }
}

/* A MoE layer's MLP up to the experts' outputs (docs/moe.md): router, routing, the experts'
 * SwiGLU and down projections, the shared expert up to its SwiGLU. moe_combine_forward adds them
 * up afterwards (in the fcproj matmul's place). */
static void moe_forward(const run *r, int l, const dec_layer *v, const void *const *w) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    const int N = r->N, C = m->C, E = m->E, K = m->K, FE = m->FE, NK = N * K;
    linear(r, -1, v->mlg, NULL, v->ln2, w[TSR_P_ROUTERW], NULL, N, C, E);
    be->moe_route(be, v->probs, v->lse, v->idx, v->wts, v->offs, v->rows, v->slot, v->stats,
                  v->mlg, N, E, K, m->cfg.moe_norm_topk);
    be->moe_gather(be, v->xg, v->ln2, v->rows, N, K, C);
    if (m->ep && ep_exchanging(m->ep)) { /* the experts live on other ranks too (model_ep.h) */
        ep_forward(m->ep, be, (int)model_act_group_slot(m, TSR_AG_MLP, l), v->xg, v->offs,
                   w[TSR_P_EXPW1], w[TSR_P_EXPW2], v->y, NK);
    } else {
        be->moe_matmul_forward(be, v->h, v->xg, w[TSR_P_EXPW1], v->offs, E, NK, C, 2 * FE);
        be->swiglu_forward(be, v->hg, v->h, NK, FE);
        be->moe_matmul_forward(be, v->y, v->hg, w[TSR_P_EXPW2], v->offs, E, NK, FE, C);
    }
    if (m->S) {
        linear(r, l, v->sh, NULL, v->ln2, w[TSR_P_SHW1], NULL, N, C, 2 * m->S);
        be->swiglu_forward(be, v->shg, v->sh, N, m->S);
    }
}

/* out (N,C) = the shared expert's output (if any) + the weighted sum of each row's experts */
static void moe_combine_forward(const run *r, int l, void *out, const dec_layer *v,
                                const void *const *w) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    if (m->S) linear(r, l, v->shout, NULL, v->shg, w[TSR_P_SHW2], NULL, r->N, m->S, m->C);
    be->moe_combine(be, out, m->S ? v->shout : NULL, v->y, v->wts, v->slot, r->N, m->K, m->C);
}

/* Runs steps [first, last] of layer l with its weights w. */
static void layer_steps(const run *r, int l, const dec_layer *v, const void *const *w,
                        layer_step first, layer_step last) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    const int C = m->C, F = m->F, N = r->N;
    for (int s = first; s <= (int)last; s++) switch ((layer_step)s) {
        case ST_LN1:
            norm_forward(r, v->ln1, v->ln1m, v->ln1r, v->x, w[TSR_P_LN1W], w[TSR_P_LN1B], N);
            break;
        case ST_QKV:
            qkv_forward(r, l, v, w);
            break;
        case ST_ATTN:
            attention(r, l, v);
            break;
        case ST_RES2:
            linear(r, l, r->scratch, NULL, v->atty, w[TSR_P_ATTPROJW], w[TSR_P_ATTPROJB], N,
                   m->QD, C);
            lora_fwd(r, l, TSR_LORA_O, r->scratch, v->atty);
            residual_norm_forward(r, v->res2, v->ln2, v->ln2m, v->ln2r, v->x, r->scratch,
                                  w[TSR_P_LN2W], w[TSR_P_LN2B], N);
            break;
        case ST_FC:
            if (model_moe_layer(m, l)) {
                moe_forward(r, l, v, w);
            } else if (m->cfg.mlp == TSR_MLP_SWIGLU) {
                linear(r, l, v->fch, NULL, v->ln2, w[TSR_P_FCW], w[TSR_P_FCB], N, C, m->FW);
                lora_fwd(r, l, TSR_LORA_GATE, v->fch, v->ln2);
                lora_fwd(r, l, TSR_LORA_UP, v->fch, v->ln2);
                be->swiglu_forward(be, v->fchg, v->fch, N, F);
            } else {
                linear(r, l, v->fchg, v->fch, v->ln2, w[TSR_P_FCW], w[TSR_P_FCB], N, C, F);
            }
            break;
        case ST_COUNT:
            break;
        }
}

/* model.activation_compression: layer l's compressed tensor i, its working copy (bf), its E4M3
 * slot (q) and its scales (sc); 0 where the layer keeps none (it recomputes the group, a MoE
 * layer's dense MLP buffers, a decode step, no compression) */
static int comp_at(const run *r, int l, int i, void **bf, void **q, float **sc) {
    const tsr_model *m = r->d->m;
    const tsr_acts *a = r->d->a;
    const long slot = r->kv || !comp_on(m, r->d->be) ? -1 : comp_slot(m, comp[i].g, l);
    if (slot < 0 || !a->buf[comp[i].bf] || (comp[i].g == TSR_AG_MLP && model_moe_layer(m, l)))
        return 0;
    const size_t n = (size_t)a->B * (size_t)a->T * comp_width(m, i); /* the allocated stride */
    *bf = a->buf[comp[i].bf];
    *q = (char *)a->buf[comp[i].q] + (size_t)slot * layer_stride(n, 1, r->d->be->align);
    *sc = a->q_scales + ((size_t)l * NCOMP + (size_t)i) * 4;
    return 1;
}

/* The compressed tensors layer l keeps: to E4M3 after its forward (save: its last read of them),
 * or back into the working copies before its backward and its recomputation */
static void comp_move(const run *r, int l, int save) {
    const tsr_backend *be = r->d->be;
    void *bf, *q;
    float *sc;
    for (int i = 0; i < NCOMP; i++) {
        if (!comp_at(r, l, i, &bf, &q, &sc)) continue;
        const size_t n = (size_t)r->N * comp_width(r->d->m, i);
        if (save) be->act_compress(be, q, sc, bf, n);
        else be->act_decompress(be, bf, q, sc, n);
    }
}

/* Every layer's forward after the embedding (in x of layer 0), ending in the final LayerNorm.
 * A checkpointed layer writes its dropped groups to slot 0, which the next one overwrites. */
static void layers_forward(const run *r, const dec_unit *root) {
    const tsr_decoder *d = r->d;
    const int C = d->m->C, F = d->m->F, L = d->m->L, N = r->N;
    dec_unit cur, nxt;
    unit_get(d, 1, 0, &cur);
    dec_layer v0 = run_layer(r, 0);
    layer_steps(r, 0, &v0, cur.w, ST_LN1, ST_LN1);
    for (int l = 0; l < L; l++) {
        dec_layer v = run_layer(r, l);
        layer_steps(r, l, &v, cur.w, ST_QKV, ST_FC);
        if (model_moe_layer(d->m, l))
            moe_combine_forward(r, l, r->scratch, &v, cur.w);
        else {
            linear(r, l, r->scratch, NULL, v.fchg, cur.w[TSR_P_FCPROJW], cur.w[TSR_P_FCPROJB], N,
                   F, C);
            lora_fwd(r, l, TSR_LORA_DOWN, r->scratch, v.fchg);
        }
        comp_move(r, l, 1); /* before the next layer's ln1 takes the working copy */
        /* the residual add fused with the next LayerNorm: layer l+1's LN1, or the final one
         * (the next unit is asked for only now: this layer's weights are all used or queued) */
        const int last = l + 1 == L;
        if (!last) unit_get(d, l + 2, 0, &nxt);
        unit_put(d, l + 1, 0);
        dec_layer n = last ? v : run_layer(r, l + 1);
        residual_norm_forward(r, v.res3, last ? r->lnf : n.ln1, last ? r->lnfm : n.ln1m,
                              last ? r->lnfr : n.ln1r, v.res2, r->scratch,
                              last ? root->w[TSR_P_LNFW] : nxt.w[TSR_P_LN1W],
                              last ? root->w[TSR_P_LNFB] : nxt.w[TSR_P_LN1B], N);
        if (!last) cur = nxt;
    }
}

/* A MoE layer's MLP backward: from dres = d(its output) to dln = d(ln2) (written). */
static void moe_backward(const run *r, int l, const dec_layer *v, const void *const *w,
                         float *const *g) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const tsr_model *m = d->m;
    tsr_acts *a = d->a;
    const int N = r->N, C = m->C, E = m->E, K = m->K, FE = m->FE, S = m->S, NK = N * K;
    const size_t e = tsr_dtype_size(be->act), n = (size_t)N, nk = (size_t)NK;
    be->moe_combine_backward(be, a->moe_dxy, a->moe_dwts, a->dresidual, v->y, v->wts, v->slot, N,
                             K, C);
    if (S) { /* the shared experts write dln first */
        be->matmul_backward(be, a->moe_dshg, g[TSR_P_SHW2], NULL, a->dresidual, v->shg,
                            w[TSR_P_SHW2], N, S, C, TSR_GRAD_SET);
        be->swiglu_backward(be, a->moe_dsh, v->sh, a->moe_dshg, N, S, TSR_GRAD_SET);
        be->matmul_backward(be, a->dln, g[TSR_P_SHW1], NULL, a->moe_dsh, v->ln2, w[TSR_P_SHW1], N,
                            C, 2 * S, TSR_GRAD_SET);
    } else {
        be->zero(be, a->dln, n * C * e);
    }
    if (m->ep && ep_exchanging(m->ep)) {
        ep_backward(m->ep, be, (int)model_act_group_slot(m, TSR_AG_MLP, l), a->moe_dxy,
                    w[TSR_P_EXPW1],
                    w[TSR_P_EXPW2], g[TSR_P_EXPW1], g[TSR_P_EXPW2], NK);
    } else {
        be->zero(be, a->moe_dhg, nk * FE * e);
        be->moe_matmul_backward(be, a->moe_dhg, g[TSR_P_EXPW2], a->moe_dxy, v->hg,
                                w[TSR_P_EXPW2], v->offs, E, NK, FE, C);
        be->swiglu_backward(be, a->moe_dh, v->h, a->moe_dhg, NK, FE, TSR_GRAD_SET);
        be->zero(be, a->moe_dxy, nk * C * e); /* dy is used up: the buffer now takes d(xg) */
        be->moe_matmul_backward(be, a->moe_dxy, g[TSR_P_EXPW1], a->moe_dh, v->xg,
                                w[TSR_P_EXPW1], v->offs, E, NK, C, 2 * FE);
    }
    be->moe_gather_backward(be, a->dln, a->moe_dxy, v->slot, N, K, C);
    be->moe_router_backward(be, a->moe_dlogits, a->moe_dwts, v->probs, v->lse, v->idx, v->wts,
                            v->offs, N, E, K, m->cfg.moe_norm_topk,
                            (float)(m->cfg.moe_aux_loss_coef * a->moe_w),
                            (float)(m->cfg.moe_z_loss_coef * a->moe_w));
    be->matmul_backward(be, a->dln, g[TSR_P_ROUTERW], NULL, a->moe_dlogits, v->ln2,
                        w[TSR_P_ROUTERW], N, C, E, TSR_GRAD_ADD);
}

/* The dense MLP's backward: from dres = d(its output) to dln = d(ln2) (written). */
static void mlp_backward(const run *r, int l, const dec_layer *v, const void *const *w,
                         float *const *g) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    tsr_acts *a = r->d->a;
    const int C = m->C, F = m->F, N = r->N;
    const size_t n = (size_t)N;
    /* tanh GELU without an adapter on the output projection: the two backwards as one op where
     * the backend fuses them (CUDA: the GELU's derivative in the matmul's epilogue) */
    if (m->cfg.mlp != TSR_MLP_SWIGLU && m->cfg.gelu == TSR_GELU_TANH && be->matmul_backward_gelu &&
        !lora_target_on(r->d->lora, TSR_LORA_DOWN)) {
        be->matmul_backward_gelu(be, a->dfch, g[TSR_P_FCPROJW], g[TSR_P_FCPROJB], a->dresidual,
                                 v->fchg, w[TSR_P_FCPROJW], v->fch, N, F, C);
    } else {
        be->matmul_backward(be, a->dfch_gelu, g[TSR_P_FCPROJW], g[TSR_P_FCPROJB], a->dresidual,
                            v->fchg, w[TSR_P_FCPROJW], N, F, C, TSR_GRAD_SET);
        lora_bwd(r, l, TSR_LORA_DOWN, a->dfch_gelu, a->dresidual, v->fchg);
        if (m->cfg.mlp == TSR_MLP_SWIGLU)
            be->swiglu_backward(be, a->dfch, v->fch, a->dfch_gelu, N, F, TSR_GRAD_SET);
        else
            be->gelu_backward(be, a->dfch, v->fch, a->dfch_gelu, n * F,
                              (tsr_gelu_kind)m->cfg.gelu, TSR_GRAD_SET);
    }
    be->matmul_backward(be, a->dln, g[TSR_P_FCW], g[TSR_P_FCB], a->dfch, v->ln2, w[TSR_P_FCW], N,
                        C, m->FW, TSR_GRAD_SET);
    lora_bwd(r, l, TSR_LORA_GATE, a->dln, a->dfch, v->ln2);
    lora_bwd(r, l, TSR_LORA_UP, a->dln, a->dfch, v->ln2);
}

/* Layer l's backward; dres holds d(residual3) and leaves with d(x). */
static void layer_backward(const run *r, int l, const dec_unit *u) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const tsr_model *m = d->m;
    tsr_acts *a = d->a;
    const int C = m->C, NH = m->NH, KVH = m->KVH, hs = m->hs, N = r->N;
    const size_t e = tsr_dtype_size(be->act), n = (size_t)N;
    const void *const *w = u->w;
    float *const *g = u->g;
    dec_layer v = run_layer(r, l);
    comp_move(r, l, 0);
    if (model_ckpt_layer(m, l)) { /* recompute what the layer did not keep, into slot 0 */
        tsr_actckpt_kind k = m->cfg.activation_checkpointing;
        layer_steps(r, l, &v, w, rerun[k].first, rerun[k].last);
    }
    /* MLP branch: dres is d(residual3) = d(the MLP's output), and flows on to residual2 */
    if (model_moe_layer(m, l)) moe_backward(r, l, &v, w, g);
    else mlp_backward(r, l, &v, w, g);
    norm_backward(r, a->dresidual, g[TSR_P_LN2W], g[TSR_P_LN2B], a->dln, v.res2, w[TSR_P_LN2W],
                  v.ln2m, v.ln2r);
    /* attention branch: dres is now d(residual2) = d(attproj output) */
    be->matmul_backward(be, a->datty, g[TSR_P_ATTPROJW], g[TSR_P_ATTPROJB], a->dresidual, v.atty,
                        w[TSR_P_ATTPROJW], N, m->QD, C, TSR_GRAD_SET);
    lora_bwd(r, l, TSR_LORA_O, a->datty, a->dresidual, v.atty);
    if (d->ring)
        ring_attention_backward(d->ring, be, a, a->dqkv, a->datty, v.qkv, v.atty, v.att,
                                d->slopes, r->B, r->T * d->ring->N, NH, KVH, hs);
    else
        be->attention_backward(be, a->dqkv, a->datty, v.qkv, v.atty, v.att, d->slopes, a->seq,
                               a->att_scratch, r->B, r->T, NH, KVH, hs, TSR_GRAD_SET);
    if (m->cfg.pos == TSR_POS_ROPE) {
        int p0;
        const int32_t *pos = rope_pos(r, &p0);
        be->rope_backward(be, a->dqkv, pos, p0, d->rope, r->B, r->T, NH, KVH, hs);
    }
    void *dproj = a->dqkv; /* the gradient of the projection's output */
    if (m->cfg.qk_norm) {
        be->zero(be, a->dqkvr, n * m->QKV * e);
        be->qknorm_backward(be, a->dqkvr, g[TSR_P_QNORMW], g[TSR_P_KNORMW], a->dqkv, v.qkvr,
                            w[TSR_P_QNORMW], w[TSR_P_KNORMW], v.qknr, N, NH, KVH, hs);
        dproj = a->dqkvr;
    }
    be->matmul_backward(be, a->dln, g[TSR_P_QKVW], g[TSR_P_QKVB], dproj, v.ln1, w[TSR_P_QKVW],
                        N, C, m->QKV, TSR_GRAD_SET);
    for (int t = TSR_LORA_Q; t <= TSR_LORA_V; t++) lora_bwd(r, l, t, a->dln, dproj, v.ln1);
    norm_backward(r, a->dresidual, g[TSR_P_LN1W], g[TSR_P_LN1B], a->dln, v.x, w[TSR_P_LN1W],
                  v.ln1m, v.ln1r);
}

/* The LM head's weight: lm_head when untied, else wte (gradient likewise) */
static int head_id(const tsr_model *m) {
    return m->params_info[TSR_P_LMHEAD].numel ? TSR_P_LMHEAD : TSR_P_WTE;
}

/* ---- training and evaluation ---------------------------------------------------------------- */

/* The layers' pass over B sequences of T positions: this rank's T / N with a ring. */
static run train_run(const tsr_decoder *d, int B, int T, const char *what) {
    const tsr_acts *a = d->a;
    if (d->m->cpN > 1 && (!d->ring || d->ring->N != d->m->cpN))
        tsr_die(TSR_EXIT_INTERNAL, "%s: the model splits sequences over %d ranks, but the decoder "
                "has no ring of them", what, d->m->cpN);
    const int Tl = d->ring ? T / d->ring->N : T;
    if (B > a->B || Tl != a->T || (d->ring && T % (2 * d->ring->N)))
        tsr_die(TSR_EXIT_INTERNAL, "%s: batch %dx%d exceeds the allocated %dx%d", what, B, Tl,
                a->B, a->T);
    return (run){.d = d, .B = B, .T = Tl, .N = B * Tl, .scratch = a->scratch, .lnf = a->lnf,
                 .lnfm = a->lnf_mean, .lnfr = a->lnf_rstd};
}

/* dlosses[i] = loss_scale where targets[i] counts, else 0; on the backend. And the weight of the
 * microbatch's MoE auxiliary losses: its counted targets x loss_scale (docs/moe.md). */
static void set_dlosses(const tsr_decoder *d, const int32_t *targets, size_t N, float loss_scale) {
    const tsr_backend *be = d->be;
    tsr_acts *a = d->a;
    float *h = be->host ? a->dlosses : a->dlosses_host;
    for (size_t i = 0; i < N; i++) h[i] = targets[i] >= 0 ? loss_scale : 0.0f;
    a->moe_w = (float)dec_moe_weight(targets, N, loss_scale);
    be->to_device(be, a->dlosses, h, N * sizeof(float));
}

/* A forward's inputs: on the host (this rank's share with a ring), and on the backend */
typedef struct dec_inputs {
    const int32_t *tokens, *targets; /* host (B, r.T) */
    const int32_t *tok, *tg;         /* the backend's */
} dec_inputs;

/* Context parallelism: this rank's share of the whole sequences (tokens, targets, positions) and
 * the document bounds of the whole ones, staged on the backend (model_ring.h) */
static dec_inputs stage_ring(const tsr_decoder *d, const int32_t *tokens, const int32_t *targets,
                             int B, int T) {
    const tsr_backend *be = d->be;
    const tsr_model *m = d->m;
    tsr_acts *a = d->a;
    tsr_ring *g = d->ring;
    const size_t Nl = (size_t)B * (T / g->N), Nw = (size_t)B * T, i4 = sizeof(int32_t);
    ring_stage(g, tokens, targets, B, T,
               m->cfg.attn_mask == TSR_MASK_DOCUMENT ? m->cfg.eot_token : -1, d->starts);
    if (a->pos) be->to_device(be, a->pos, g->pos, Nl * i4);
    if (a->ring_lo) be->to_device(be, a->ring_lo, g->lo, Nw * i4);
    if (a->ring_hi) be->to_device(be, a->ring_hi, g->hi, Nw * i4);
    return (dec_inputs){g->tokens, g->targets, g->tokens, g->targets};
}

/* tokens, targets and (attn_mask = document) the segments onto the backend, or a ring's share */
static dec_inputs stage_inputs(const tsr_decoder *d, const int32_t *tokens,
                               const int32_t *targets, size_t N, int B, int T) {
    const tsr_backend *be = d->be;
    tsr_acts *a = d->a;
    dec_inputs in = {tokens, targets, tokens, targets};
    if (d->ring) in = stage_ring(d, tokens, targets, B, T);
    if (a->seq) {
        int32_t *seq = be->host ? a->seq : a->seq_host, *pos = be->host ? a->pos : a->pos_host;
        model_segments(seq, a->pos ? pos : NULL, tokens, d->m->cfg.eot_token, d->starts, B, T);
        be->to_device(be, a->seq, seq, N * sizeof(int32_t));
        if (a->pos) be->to_device(be, a->pos, pos, N * sizeof(int32_t));
    }
    if (be->host) return in;
    be->to_device(be, a->tokens, in.tokens, N * sizeof(int32_t));
    be->to_device(be, a->targets, in.targets, N * sizeof(int32_t));
    in.tok = a->tokens, in.tg = a->targets;
    return in;
}

void dec_forward(const tsr_decoder *d, const int32_t *tokens, const int32_t *targets, int B,
                 int T, float loss_scale) {
    const tsr_model *m = d->m;
    const tsr_backend *be = d->be;
    tsr_acts *a = d->a;
    const run r = train_run(d, B, T, "decoder forward");
    const dec_inputs in = stage_inputs(d, tokens, targets, (size_t)r.N, B, T);
    dec_unit root;
    unit_get(d, 0, 0, &root);
    be->encoder_forward(be, a->encoded, in.tok, root.w[TSR_P_WTE], root.w[TSR_P_WPE], a->pos, B,
                        r.T, m->C);
    layers_forward(&r, &root);
    be->matmul_forward(be, a->probs, NULL, a->lnf, root.w[head_id(m)], NULL, r.N, m->C, m->Vp,
                       TSR_GELU_TANH);
    unit_put(d, 0, 0);
    if (loss_scale >= 0) set_dlosses(d, in.targets, (size_t)r.N, loss_scale);
    be->softmax_xent(be, a->losses, a->probs, in.tg, loss_scale >= 0 ? a->dlosses : NULL, r.N,
                     m->V, m->Vp);
    a->dlogits = loss_scale >= 0;
}

double dec_loss_sum(const tsr_decoder *d, const int32_t *targets, int B, int T) {
    const tsr_backend *be = d->be;
    const tsr_acts *a = d->a;
    const run r = train_run(d, B, T, "decoder loss");
    const size_t N = (size_t)r.N;
    const float *l = a->losses;
    if (!be->host) be->to_host(be, a->losses_host, a->losses, N * sizeof(float)), l = a->losses_host;
    if (!d->ring) return dec_sum_losses(l, targets, N);
    double sum = dec_sum_losses(l, d->ring->targets, N); /* this rank's share, then the group's */
    d->ring->comm.sum(d->ring->comm.ctx, &sum, 1);
    return sum;
}

double dec_sum_losses(const float *losses, const int32_t *targets, size_t N) {
    double sum = 0.0;
    for (size_t i = 0; i < N; i++)
        if (targets[i] >= 0) sum += losses[i];
    return sum;
}

void dec_token_scores(const tsr_decoder *d, const int32_t *targets, int B, int T, float *losses,
                      int32_t *greedy) {
    const tsr_backend *be = d->be;
    const tsr_acts *a = d->a;
    const run r = train_run(d, B, T, "decoder token scores");
    const size_t N = (size_t)r.N;
    if (greedy) be->argmax(be, be->host ? greedy : a->greedy, a->probs, r.N, d->m->V, d->m->Vp);
    be->to_host(be, losses, a->losses, N * sizeof(float));
    if (greedy) be->to_host(be, greedy, be->host ? greedy : a->greedy, N * sizeof(int32_t));
    if (d->ring) { /* the whole sequences' from every rank's share (in place: the share first) */
        ring_gather(d->ring, losses, losses, B, T);
        if (greedy) ring_gather(d->ring, greedy, greedy, B, T);
    }
    for (size_t i = 0; i < (size_t)B * T; i++)
        if (targets[i] < 0) {
            losses[i] = 0.0f;
            if (greedy) greedy[i] = -1;
        }
}

/* an evaluation forward's loss gradient over the logits, from dlosses (set on the backend) */
static void xent_grad(const tsr_decoder *d, const int32_t *targets, int N) {
    const tsr_backend *be = d->be;
    tsr_acts *a = d->a;
    if (!be->softmax_xent_grad)
        tsr_die(TSR_EXIT_INTERNAL, "decoder backward: the %s backend forms the loss gradient "
                "in the forward pass only (give it a loss scale)", be->name);
    be->softmax_xent_grad(be, a->losses, a->probs, a->dlosses, be->host ? targets : a->targets, N, d->m->V,
                          d->m->Vp);
}

static void backward_pass(const tsr_decoder *d, const int32_t *tokens, int B, int T,
                          void (*ready)(void *ctx, int unit), void *ctx);

void dec_backward(const tsr_decoder *d, const int32_t *tokens, const int32_t *targets, int B,
                  int T, float loss_scale, void (*ready)(void *ctx, int unit), void *ctx) {
    /* the shape checked before anything is set */
    const run r = train_run(d, B, T, "decoder backward");
    if (d->ring) tokens = d->ring->tokens, targets = d->ring->targets; /* the forward's share */
    if (!d->a->dlogits) { /* an evaluation forward: the loss's gradient over the logits now */
        set_dlosses(d, targets, (size_t)r.N, loss_scale);
        xent_grad(d, targets, r.N);
    }
    backward_pass(d, tokens, B, T, ready, ctx);
}

void dec_backward_weighted(const tsr_decoder *d, const int32_t *tokens, const int32_t *targets,
                           int B, int T, const float *dlosses, float moe_w) {
    const tsr_backend *be = d->be;
    tsr_acts *a = d->a;
    const run r = train_run(d, B, T, "decoder backward");
    const size_t N = (size_t)r.N;
    if (a->dlogits)
        tsr_die(TSR_EXIT_INTERNAL, "decoder backward: a weighted backward follows an evaluation "
                "forward (loss scale < 0)");
    if (d->ring) { /* the forward's share, and this rank's share of the weights */
        tsr_ring *g = d->ring;
        ring_split(g->dlosses, dlosses, sizeof(float), B, g->N, g->r, T);
        tokens = g->tokens, targets = g->targets, dlosses = g->dlosses;
    }
    float *h = be->host ? a->dlosses : a->dlosses_host;
    for (size_t i = 0; i < N; i++) h[i] = targets[i] >= 0 ? dlosses[i] : 0.0f;
    a->moe_w = moe_w;
    be->to_device(be, a->dlosses, h, N * sizeof(float));
    xent_grad(d, targets, (int)N);
    backward_pass(d, tokens, B, T, NULL, NULL);
}

static void backward_pass(const tsr_decoder *d, const int32_t *tokens, int B, int T,
                          void (*ready)(void *ctx, int unit), void *ctx) {
    const tsr_model *m = d->m;
    const tsr_backend *be = d->be;
    tsr_acts *a = d->a;
    const run r = train_run(d, B, T, "decoder backward");
    const int C = m->C, L = m->L, N = r.N;
    const size_t e = tsr_dtype_size(be->act);
    dec_unit root, u;
    unit_get(d, 0, 1, &root);
    be->matmul_backward(be, a->dln, root.g[head_id(m)], NULL, a->probs, a->lnf,
                        root.w[head_id(m)], N, C, m->Vp, TSR_GRAD_SET);
    be->zero(be, a->dresidual, (size_t)N * C * e);
    norm_backward(&r, a->dresidual, root.g[TSR_P_LNFW], root.g[TSR_P_LNFB], a->dln,
                  layer_at(m, be, a, L - 1).res3, root.w[TSR_P_LNFW], a->lnf_mean, a->lnf_rstd);
    for (int l = L - 1; l >= 0; l--) {
        unit_get(d, l + 1, 1, &u);
        layer_backward(&r, l, &u);
        unit_put(d, l + 1, 1);
        if (ready) ready(ctx, l + 1);
    }
    be->encoder_backward(be, root.g[TSR_P_WTE], root.g[TSR_P_WPE], a->dresidual,
                         be->host ? tokens : a->tokens, tokens, a->pos, B, r.T, C);
    unit_put(d, 0, 1);
    if (ready) ready(ctx, 0);
}

double dec_moe_weight(const int32_t *targets, size_t N, float loss_scale) {
    size_t counted = 0;
    for (size_t i = 0; i < N; i++) counted += targets[i] >= 0;
    return (double)counted * loss_scale;
}

dec_moe_view dec_moe_stats_view(const tsr_decoder *d) {
    const tsr_model *m = d->m;
    const tsr_acts *a = d->a;
    if (!m->E) return (dec_moe_view){0};
    const strides st = strides_of(m, d->be, a->B, a->T);
    return (dec_moe_view){.stats = a->moe_stats, .offs = a->moe_offs,
                          .stats_bytes = (size_t)m->L * st.stats * sizeof(float),
                          .offs_bytes = (size_t)m->L * st.offs * sizeof(int32_t)};
}

size_t dec_moe_stats_bytes(const tsr_model *m, const tsr_backend *be) {
    if (!m->E) return 0;
    const strides st = strides_of(m, be, 1, 1); /* these two strides do not depend on B x T */
    return (size_t)m->L * (st.stats * sizeof(float) + st.offs * sizeof(int32_t));
}

void dec_moe_stats_add(const tsr_decoder *d, double w, double *acc) {
    const dec_moe_view v = dec_moe_stats_view(d);
    if (!d->m->E) return;
    /* the two per-layer stacks in two copies (one wait for the backend) */
    int32_t *offs = tsr_malloc(v.offs_bytes);
    float *stats = tsr_malloc(v.stats_bytes);
    d->be->to_host(d->be, stats, v.stats, v.stats_bytes);
    d->be->to_host(d->be, offs, v.offs, v.offs_bytes);
    dec_moe_stats_add_host(d, stats, offs, w, acc);
    free(offs);
    free(stats);
}

void dec_moe_stats_add_host(const tsr_decoder *d, const float *stats, const int32_t *offs,
                            double w, double *acc) {
    const tsr_model *m = d->m;
    const tsr_acts *a = d->a;
    if (!m->E) return;
    const strides st = strides_of(m, d->be, a->B, a->T);
    const int E = m->E;
    for (int l = 0, k = 0; l < m->L; l++) {
        if (!model_moe_layer(m, l)) continue;
        const float *s = stats + (size_t)l * st.stats;
        const int32_t *o = offs + (size_t)l * st.offs;
        double *x = acc + (size_t)k++ * (size_t)(2 + E);
        x[0] += w * s[0];
        x[1] += w * s[1];
        for (int e = 0; e < E; e++) x[2 + e] += o[e + 1] - o[e];
    }
}

/* ---- decoding with a KV cache --------------------------------------------------------------- */

void dec_kv_chunk(const tsr_decoder *d, tsr_kv_cache *kv, const int32_t *tokens, int c,
                  float *probs) {
    const tsr_model *m = d->m;
    const tsr_backend *be = d->be;
    const int C = m->C, p0 = kv->len;
    const size_t w = tsr_dtype_size(be->weight);
    if (!be->attention_decode || !be->host)
        tsr_die(TSR_EXIT_INTERNAL, "decoder: the %s backend has no KV-cache decoding", be->name);
    const run r = {.d = d, .B = 1, .T = c, .N = c, .scratch = kv->proj, .lnf = kv->ln,
                   .lnfm = kv->mean, .lnfr = kv->rstd, .kv = kv, .p0 = p0};
    dec_unit root;
    unit_get(d, 0, 0, &root);
    const char *wpe = root.w[TSR_P_WPE]; /* learned positions count from the segment's start */
    be->encoder_forward(be, kv->x, tokens, root.w[TSR_P_WTE],
                        wpe ? wpe + (size_t)(p0 - kv->seg) * C * w : NULL, NULL, 1, c, C);
    layers_forward(&r, &root);
    kv->len += c;
    if (probs) { /* the last row through the LM head and the softmax */
        float loss;
        const int32_t none = -1;
        linear(&r, -1, kv->logits, NULL, kv->ln + (size_t)(c - 1) * C, root.w[head_id(m)], NULL, 1, C,
               m->Vp);
        be->softmax_xent(be, &loss, kv->logits, &none, NULL, 1, m->V, m->Vp);
        be->to_host(be, probs, kv->logits, (size_t)m->Vp * sizeof(float));
    }
    unit_put(d, 0, 0);
}

/* probs (n, Vp) host: the softmax of the n rows of logits over the V real columns (columns >= V
 * are 0). A host backend runs its softmax_xent (model_forward's probabilities, the same bits); a
 * device's bf16 logits are brought to the host and normalised there, in double. */
static void head_probs(const tsr_decoder *d, tsr_kv_slots *ks, int n, float *probs) {
    const tsr_backend *be = d->be;
    const int V = d->m->V, Vp = d->m->Vp;
    if (be->host) {
        be->softmax_xent(be, ks->loss, ks->logits, ks->none, NULL, n, V, Vp);
        be->to_host(be, probs, ks->logits, (size_t)n * Vp * sizeof(float));
        return;
    }
    uint16_t *h = tsr_malloc((size_t)n * Vp * sizeof *h); /* bf16 bits */
    be->to_host(be, h, ks->logits, (size_t)n * Vp * sizeof *h);
    for (int i = 0; i < n; i++) {
        float *p = probs + (size_t)i * Vp;
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < Vp; j++) {
            uint32_t bits = (uint32_t)h[(size_t)i * Vp + j] << 16;
            memcpy(&p[j], &bits, sizeof bits);
            if (j < V && p[j] > mx) mx = p[j];
        }
        for (int j = 0; j < V; j++) sum += exp((double)p[j] - mx);
        for (int j = 0; j < Vp; j++) p[j] = j < V ? (float)(exp((double)p[j] - mx) / sum) : 0.0f;
    }
    free(h);
}

void dec_kv_slots(const tsr_decoder *d, tsr_kv_slots *ks, int slot, const int32_t *tokens, int c,
                  float *probs) {
    const tsr_model *m = d->m;
    const tsr_backend *be = d->be;
    const int C = m->C, R = ks->rows;
    const size_t w = tsr_dtype_size(be->weight), e = tsr_dtype_size(be->act);
    if (!be->attention_decode || !be->attention_decode_rows)
        tsr_die(TSR_EXIT_INTERNAL, "decoder: the %s backend has no batched decoding", be->name);
    if (c < 1 || c > R)
        tsr_die(TSR_EXIT_INTERNAL, "dec_kv_slots: %d rows, buffers for %d", c, R);
    if (slot >= 0) memcpy(ks->host_ids, tokens, (size_t)c * sizeof *tokens);
    if (!be->host) be->to_device(be, ks->dev_ids, ks->host_ids, (size_t)5 * R * sizeof(int32_t));
    tsr_kv_cache *kv = &ks->buf;
    const int p0 = slot >= 0 ? ks->len[slot] : 0;
    const run r = {.d = d, .B = slot >= 0 ? 1 : c, .T = slot >= 0 ? c : 1, .N = c,
                   .scratch = kv->proj, .lnf = kv->ln, .lnfm = kv->mean, .lnfr = kv->rstd,
                   .kv = kv, .ks = ks, .slot = slot, .p0 = p0};
    dec_unit root;
    unit_get(d, 0, 0, &root);
    const char *wpe = root.w[TSR_P_WPE]; /* learned positions count from the segment's start */
    if (slot >= 0)
        be->encoder_forward(be, kv->x, ks->dev_ids, root.w[TSR_P_WTE],
                            wpe ? wpe + (size_t)(p0 - ks->seg[slot]) * C * w : NULL, NULL, 1, c,
                            C);
    else
        be->encoder_forward(be, kv->x, ks->dev_ids, root.w[TSR_P_WTE], wpe, ks->dev_ids + 4 * R,
                            c, 1, C);
    layers_forward(&r, &root);
    if (slot >= 0) ks->len[slot] += c;
    else
        for (int i = 0; i < c; i++) ks->len[ks->host_ids[R + i]]++;
    if (probs) { /* a chunk's last row, or every row, through the LM head */
        const int n = slot >= 0 ? 1 : c, first = slot >= 0 ? c - 1 : 0;
        linear(&r, -1, ks->logits, NULL, (char *)kv->ln + (size_t)first * C * e, root.w[head_id(m)],
               NULL, n, C, m->Vp);
        head_probs(d, ks, n, probs);
    }
    unit_put(d, 0, 0);
}
