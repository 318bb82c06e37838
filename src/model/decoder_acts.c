/* decoder_acts.c — the decoder's activation plan (decoder.h, decoder_int.h; docs/decoder.md):
 * the buffers of tsr_acts for B x T on a backend, each layer's slots in their stacks, their
 * allocation and release, the compressed activations (model.activation_compression = "fp8") and
 * the MoE statistics' stacks. The sequence that fills them is decoder.c's.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/decoder_int.h"
#include "model/model_ring.h"

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
    size_t dn; /* fp32: a linear_attention layer's Gated DeltaNet (0 without; mixer_deltanet.c) */
    size_t ag; /* fp32 (2, N, QD): model.attn_output_gate's gate and gated output (0 without) */
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
                     .stats = E ? layer_stride(2, f, al) : 0,
                     .dn = m->LL ? layer_stride(dec_dn_floats(m, be, B, T), f, al) : 0,
                     .ag = m->cfg.attn_output_gate ? layer_stride(2 * N * m->QD, f, al) : 0};
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
               NAMED_AT(moe_offs, TSR_A_MOE_OFFS) && NAMED_AT(moe_dshg, TSR_A_MOE_DSHG) &&
               NAMED_AT(dn, TSR_A_DN) && NAMED_AT(dagate, TSR_A_DAGATE) &&
               NAMED_AT(dn_bwd, TSR_A_DNBWD),
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
        [TSR_A_DN] = f * Lat * st.dn,
        [TSR_A_AGATE] = f * Lat * st.ag,
        [TSR_A_DAGATE] = st.ag ? f * N * QD : 0,
        [TSR_A_DNBWD] = dec_dn_backward_bytes(m, be, B, T),
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
        TSR_A_Q_SCALES,  TSR_A_DN,        TSR_A_AGATE};
    for (size_t i = 0; i < sizeof stacked / sizeof stacked[0]; i++) sum += b[stacked[i]];
    if (comp_on(&one, be)) /* the working copies: one layer's for the whole model */
        for (int i = 0; i < NCOMP; i++) sum -= b[comp[i].bf];
    return sum / (size_t)m->L;
}

dec_layer dec_layer_at(const tsr_model *m, const tsr_backend *be, const tsr_acts *a, int l) {
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
        .dn = FAT(a->dn, sa, st.dn), .agate = FAT(a->agate, sa, st.ag),
        .agated = a->agate ? a->agate + sa * st.ag + (size_t)a->B * a->T * m->QD : NULL,
    };
#undef AT
#undef FAT
}

/* Every layer's slice of every stack starts on the backend's alignment (layer_stride): checked
 * once per allocation. */
static void check_layout(const tsr_model *m, const tsr_backend *be, const tsr_acts *a) {
    if (be->align <= 1) return;
    for (int l = 0; l < m->L; l++) {
        dec_layer v = dec_layer_at(m, be, a, l);
        const void *p[] = {v.x,    v.ln1,  v.qkv,  v.qkvr, v.atty, v.res2, v.ln2,  v.fch,
                           v.fchg, v.res3, v.ln1m, v.ln1r, v.qknr, v.att,  v.ln2m, v.ln2r,
                           v.mlg,  v.xg,   v.h,    v.hg,   v.y,    v.sh,   v.shg,  v.probs,
                           v.lse,  v.wts,  v.stats, v.idx, v.rows, v.slot, v.offs, v.dn};
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
        {c->embed_scale != TSR_EMB_SCALE_NONE, be->scale_act, "model.embed_scale"},
        {c->norm_placement == TSR_NPLACE_POST, be->add_act, "model.norm_placement = \"post\""},
        {c->attn_output_gate, be->gate_forward, "model.attn_output_gate"},
        {c->attn_output_gate, be->gate_backward, "model.attn_output_gate"},
        {m->S > 0 && c->moe_shared_gate, be->moe_shgate_forward, "model.moe_shared_gate"},
        {m->S > 0 && c->moe_shared_gate, be->moe_shgate_grad, "model.moe_shared_gate"},
        {m->S > 0 && c->moe_shared_gate, be->moe_shgate_dx, "model.moe_shared_gate"},
        {m->E > 0 && c->moe_expert_bias, be->moe_bias_forward, "model.moe_expert_bias"},
        {m->E > 0 && c->moe_expert_bias, be->moe_bias_backward, "model.moe_expert_bias"},
        {m->E > 0 && c->moe_act == TSR_MOE_ACT_GPTOSS, be->moe_gptoss_forward, "model.moe_act"},
        {m->E > 0 && c->moe_act == TSR_MOE_ACT_GPTOSS, be->moe_gptoss_backward, "model.moe_act"},
        {c->pos == TSR_POS_ROPE && (c->partial_rotary_factor != 1.0 ||
                                    c->rope_scaling == TSR_ROPE_SCALING_YARN),
         be->rope_part_forward, "model.partial_rotary_factor or rope_scaling = \"yarn\""},
        {c->pos == TSR_POS_ROPE && (c->partial_rotary_factor != 1.0 ||
                                    c->rope_scaling == TSR_ROPE_SCALING_YARN),
         be->rope_part_backward, "model.partial_rotary_factor or rope_scaling = \"yarn\""},
        {c->mlp == TSR_MLP_GEGLU_TANH, be->geglu_forward, "model.mlp = \"geglu_tanh\""},
        {c->mlp == TSR_MLP_GEGLU_TANH, be->geglu_backward, "model.mlp = \"geglu_tanh\""},
        {c->qk_norm && c->qk_norm_scope == TSR_QKN_PROJECTION, be->qknorm_proj_forward,
         "model.qk_norm_scope = \"projection\""},
        {c->qk_norm && c->qk_norm_scope == TSR_QKN_PROJECTION, be->qknorm_proj_backward,
         "model.qk_norm_scope = \"projection\""},
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
        {m->LL > 0, be->dn_conv_forward, "model.layer_types (linear_attention)"},
        {m->LL > 0, be->dn_conv_backward, "model.layer_types (linear_attention)"},
        {m->LL > 0, be->dn_gates_forward, "model.layer_types (linear_attention)"},
        {m->LL > 0, be->dn_gates_backward, "model.layer_types (linear_attention)"},
        {m->LL > 0, be->dn_silu_gate_forward, "model.layer_types (linear_attention)"},
        {m->LL > 0, be->dn_silu_gate_backward, "model.layer_types (linear_attention)"},
        {m->LL > 0, be->dn_core_forward, "model.layer_types (linear_attention)"},
        {m->LL > 0, be->dn_core_backward, "model.layer_types (linear_attention)"},
        {m->LL > 0, be->copy_rows, "model.layer_types (linear_attention)"},
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

/* model.activation_compression: layer l's compressed tensor i, its working copy (bf), its E4M3
 * slot (q) and its scales (sc); 0 where the layer keeps none (it recomputes the group, a MoE
 * layer's dense MLP buffers, no compression; a decode step keeps none: its caller's test) */
static int comp_at(const tsr_decoder *d, int l, int i, void **bf, void **q, float **sc) {
    const tsr_model *m = d->m;
    const tsr_acts *a = d->a;
    const long slot = !comp_on(m, d->be) ? -1 : comp_slot(m, comp[i].g, l);
    if (slot < 0 || !a->buf[comp[i].bf] || (comp[i].g == TSR_AG_MLP && model_moe_layer(m, l)))
        return 0;
    const size_t n = (size_t)a->B * (size_t)a->T * comp_width(m, i); /* the allocated stride */
    *bf = a->buf[comp[i].bf];
    *q = (char *)a->buf[comp[i].q] + (size_t)slot * layer_stride(n, 1, d->be->align);
    *sc = a->q_scales + ((size_t)l * NCOMP + (size_t)i) * 4;
    return 1;
}

/* The compressed tensors layer l keeps: to E4M3 after its forward (save: its last read of them),
 * or back into the working copies before its backward and its recomputation */
void dec_comp_move(const tsr_decoder *d, int l, int N, int save) {
    const tsr_backend *be = d->be;
    void *bf, *q;
    float *sc;
    for (int i = 0; i < NCOMP; i++) {
        if (!comp_at(d, l, i, &bf, &q, &sc)) continue;
        const size_t n = (size_t)N * comp_width(d->m, i);
        if (save) be->act_compress(be, q, sc, bf, n);
        else be->act_decompress(be, bf, q, sc, n);
    }
}

/* ---- the MoE statistics' stacks ------------------------------------------------------------ */

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
