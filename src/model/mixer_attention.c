/* mixer_attention.c — the attention mixer (layer_kind.h): grouped-query softmax attention with
 * its variants (QK-norm per head or over the projection, RoPE and its scalings, ALiBi, sliding
 * windows, sinks, soft-capping, Qwen3-Next's output gate), the kind of every layer that is not
 * another mixer's.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "model/decoder.h"
#include "model/decoder_int.h"
#include "model/layer_kind.h"
#include "model/model_ring.h"

/* ---- its tensors ------------------------------------------------------------------------ */

static const tsr_param_row attn_params[] = {
    {TSR_P_QKVW, "qkvw", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 4, TSR_SPLIT_HEADS, 0, 1, 1},
    {TSR_P_QKVB, "qkvb", TSR_PK_BIAS, TSR_INIT_ZERO, 5, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_QNORMW, "qnormw", TSR_PK_NORM, TSR_INIT_ONE, 16, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_KNORMW, "knormw", TSR_PK_NORM, TSR_INIT_ONE, 17, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_SINKS, "sinks", TSR_PK_BIAS, TSR_INIT_NORMAL, 24, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_ATTPROJW, "attprojw", TSR_PK_WEIGHT, TSR_INIT_RESIDUAL, 6, TSR_SPLIT_HEADS, 1, 1, 1},
    {TSR_P_ATTPROJB, "attprojb", TSR_PK_BIAS, TSR_INIT_ZERO, 7, TSR_SPLIT_AFTER_SUM, -1, 1, 0},
    {TSR_P_ATTNGATEW, "attngatew", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 36, TSR_SPLIT_HEADS, 0, 1, 0},
};

static const char *const attn_keys[] = {
    "model.n_head", "model.n_kv_head", "model.head_dim", "model.bias", "model.qkv_bias",
    "model.attn_bias",
    "model.qk_norm", "model.qk_norm_scope", "model.pos", "model.rope_theta", "model.rope_scaling",
    "model.rope_factor", "model.rope_low_freq_factor", "model.rope_high_freq_factor",
    "model.rope_original_max_pos", "model.rope_local_theta", "model.rope_beta_fast",
    "model.rope_beta_slow", "model.rope_truncate", "model.partial_rotary_factor",
    "model.no_rope_layers", "model.layer_types", "model.sliding_window", "model.attn_sinks",
    "model.attn_logit_softcapping", "model.query_pre_attn_scalar", "model.attn_output_gate",
    "model.rope_mscale", "model.rope_mscale_all_dim", NULL};

/* stacked over the LA attention layers: qkvw (LA, QKV, C) rows [q heads | k heads | v heads],
 * its bias (model.bias, qkv_bias or attn_bias); QK-norm's weights per head dimension (hs) or over
 * the projections (NH hs, KVH hs); the sinks (LA, NH); the output projection (LA, C, QD) and its
 * bias (model.bias or attn_bias); the gate (LA, QD, C) */
static void attn_layout(tsr_model *m) {
    const tsr_model_config *c = &m->cfg;
    const int64_t LA = m->LA, C = m->C, QKV = m->QKV, QD = m->QD, hs = m->hs;
    const int la = LA > 0, qn = c->qk_norm, bias = c->bias || c->attn_bias;
    const int proj = c->qk_norm_scope == TSR_QKN_PROJECTION;
    model_param_shape(m, TSR_P_QKVW, la, 3, LA, QKV, C, 0);
    model_param_shape(m, TSR_P_QKVB, la && (bias || c->qkv_bias), 2, LA, QKV, 0, 0);
    model_param_shape(m, TSR_P_QNORMW, la && qn, 2, LA, proj ? m->NH * hs : hs, 0, 0);
    model_param_shape(m, TSR_P_KNORMW, la && qn, 2, LA, proj ? m->KVH * hs : hs, 0, 0);
    model_param_shape(m, TSR_P_SINKS, la && c->attn_sinks, 2, LA, m->NH, 0, 0);
    model_param_shape(m, TSR_P_ATTPROJW, la, 3, LA, C, QD, 0);
    model_param_shape(m, TSR_P_ATTNGATEW, la && c->attn_output_gate, 3, LA, QD, C, 0);
    model_param_shape(m, TSR_P_ATTPROJB, la && bias, 2, LA, C, 0, 0);
}

/* the head blocks of its TSR_SPLIT_HEADS tensors: [q | k | v] heads of the projection, the
 * query heads of the output projection's input, the gate and the sinks; QK-norm's weights per
 * query or key/value head over the projection scope, shared by every head over a head's
 * dimension */
static int attn_heads(const tsr_model *m, tsr_param_id id, tsr_head_block b[3]) {
    const tsr_head_block q = {m->NH, m->hs, 0}, kv = {m->KVH, m->hs, 1};
    const int proj = m->cfg.qk_norm_scope == TSR_QKN_PROJECTION;
    switch (id) {
    case TSR_P_QKVW:
    case TSR_P_QKVB:
        b[0] = q, b[1] = kv, b[2] = kv;
        return 3;
    case TSR_P_QNORMW:
        b[0] = q;
        return proj;
    case TSR_P_KNORMW:
        b[0] = kv;
        return proj;
    case TSR_P_SINKS:
        b[0] = (tsr_head_block){m->NH, 1, 0};
        return 1;
    default: /* attprojw's input, attngatew's output */
        b[0] = q;
        return 1;
    }
}

/* ---- the pass ---------------------------------------------------------------------------- */

/* Layer l's attention variants (ops.h tsr_attn_var: its window, the sinks and their gradient,
 * the score scale, the soft cap) filled into *var: var, or NULL when the layer has none (plain
 * attention: what every backend runs) */
static const tsr_attn_var *attn_var(const tsr_model *m, int l, const void *sinks, float *dsinks,
                                    tsr_attn_var *var) {
    const double q = m->cfg.query_pre_attn_scalar; /* 0 or the head size: 1 / sqrt(hs) */
    *var = (tsr_attn_var){.window = config_layer_window(&m->cfg, l), .sinks = sinks,
                          .dsinks = sinks ? dsinks : NULL,
                          .scale = q > 0 && q != m->hs ? (float)(1.0 / sqrt(q)) : 0.0f,
                          .softcap = (float)m->cfg.attn_logit_softcapping};
    return var->window > 0 || var->sinks || var->scale > 0.0f || var->softcap > 0.0f ? var
                                                                                     : NULL;
}

int dec_attn_has_variants(const tsr_model *m) {
    static const float sink_weights; /* any pointer: attn_var only asks whether there is one */
    tsr_attn_var vs;
    for (int l = 0; l < m->cfg.n_layer; l++)
        if (attn_var(m, l, m->cfg.attn_sinks ? &sink_weights : NULL, NULL, &vs)) return 1;
    return 0;
}

/* a decode chunk's attention over the cache: attention layer la's ring of lc positions
 * (model.h), of the one sequence, of one slot or of each row's slot */
static void attention_decode(const dec_run *r, int l, const dec_layer *v,
                             const tsr_attn_var *var) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const int NH = d->m->NH, KVH = d->m->KVH, hs = d->m->hs;
    tsr_kv_cache *kv = r->kv;
    const int la = model_layer_slot(d->m, TSR_P_QKVW, l), lc = kv->lcap[la];
    const size_t per = (size_t)KVH * hs * lc, e = tsr_dtype_size(be->act);
    const size_t at = kv->lofs[la] * (r->ks ? (size_t)r->ks->slots : 1) * e;
    char *kt = (char *)kv->kt + at, *vv = (char *)kv->v + at;
    if (r->ks) { /* layer l of every slot, then the slot */
        const tsr_kv_slots *ks = r->ks;
        const int32_t *ids = ks->dev_ids, R = ks->rows;
        if (r->slot >= 0)
            be->attention_decode(be, v->atty, kt + (size_t)r->slot * per * e,
                                 vv + (size_t)r->slot * per * e, v->qkv, d->slopes, var,
                                 kv->att, kv->nthreads, r->p0, r->N, ks->seg[r->slot], lc, NH,
                                 KVH, hs);
        else
            be->attention_decode_rows(be, v->atty, kt, vv, v->qkv, d->slopes, var, kv->att,
                                      kv->nthreads, ids + R, ids + 2 * R, ids + 3 * R, r->N, per,
                                      lc, NH, KVH, hs);
        return;
    }
    be->attention_decode(be, v->atty, kt, vv, v->qkv, d->slopes, var, kv->att, kv->nthreads,
                         r->p0, r->N, kv->seg, lc, NH, KVH, hs);
}

/* atty = attention(qkv): the training one, round the ring of context parallelism, or a decode
 * chunk's over the cache */
static void attention(const dec_run *r, int l, const dec_layer *v, const void *sinks) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const int NH = d->m->NH, KVH = d->m->KVH, hs = d->m->hs;
    tsr_attn_var vs;
    const tsr_attn_var *var = attn_var(d->m, l, sinks, NULL, &vs);
    if (!r->kv && d->ring) { /* context parallelism: round the ring (model_ring.h) */
        ring_attention_forward(d->ring, be, d->a, v->atty, v->att, v->qkv, d->slopes, var, r->B,
                               r->T * d->ring->N, NH, KVH, hs);
        return;
    }
    if (!r->kv) {
        be->attention_forward(be, v->atty, v->att, v->qkv, d->slopes, d->a->seq, var, r->B, r->T,
                              NH, KVH, hs);
        return;
    }
    attention_decode(r, l, v, var);
}

/* qkv = ln1 @ qkvw^T + qkvb (+ the q, k, v adapters), then QK-norm (from qkvr) and RoPE in
 * place */
static void qkv_forward(const dec_run *r, int l, const dec_layer *v, const void *const *w) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const tsr_model *m = d->m;
    const int qk = m->cfg.qk_norm;
    void *proj = qk ? v->qkvr : v->qkv;
    dec_linear(r, l, proj, NULL, v->ln1, w[TSR_P_QKVW], w[TSR_P_QKVB], r->N, m->C, m->QKV);
    for (int t = TSR_LORA_Q; t <= TSR_LORA_V; t++) dec_lora_fwd(r, l, t, proj, v->ln1);
    if (qk && m->cfg.qk_norm_scope == TSR_QKN_PROJECTION && d->tp) /* (its sums over the group) */
        dec_tp_qknorm_forward(d, v->qkv, v->qknr, v->qkvr, w[TSR_P_QNORMW], w[TSR_P_KNORMW], r->N);
    else if (qk) /* per head, or over the whole projections (model.qk_norm_scope) */
        (m->cfg.qk_norm_scope == TSR_QKN_PROJECTION ? be->qknorm_proj_forward : be->qknorm_forward)(
            be, v->qkv, v->qknr, v->qkvr, w[TSR_P_QNORMW], w[TSR_P_KNORMW], r->N, m->NH, m->KVH,
            m->hs, (float)m->cfg.norm_eps);
    if (m->cfg.pos == TSR_POS_ROPE) {
        int p0;
        const int32_t *pos = dec_rope_pos(r, &p0);
        model_rope_apply(m, be, d->rope, l, v->qkv, pos, p0, r->B, r->T, 0);
    }
}

/* model.attn_output_gate (Qwen3-Next's gated attention): the gated output = atty *
 * sigmoid(gate), the gate = ln1 @ attngatew^T; what the output projection reads */
static void gate_forward(const dec_run *r, const dec_layer *v) {
    if (!v->agate) return;
    const tsr_backend *be = r->d->be;
    be->gate_forward(be, v->agated, v->atty, v->agate, (size_t)r->N * r->d->m->QD);
}

static const void *attn_in(const dec_layer *v) {
    return v->agate ? (const void *)v->agated : v->atty;
}

/* the gate's backward: proj 0 turns a->datty = d(gated) into d(atty) in place and d(gate) into
 * a->dagate; proj 1 adds the gate projection's gradient into a->dln, and its adapter's */
static void gate_backward(const dec_run *r, int l, const dec_layer *v, const dec_unit *u,
                          int proj) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    tsr_acts *a = r->d->a;
    if (!v->agate) return;
    const size_t n = (size_t)r->N * m->QD;
    if (proj) {
        be->matmul_backward(be, a->dln, u->g[TSR_P_ATTNGATEW], NULL, a->dagate, v->ln1,
                            u->w[TSR_P_ATTNGATEW], r->N, m->C, m->QD, TSR_GRAD_ADD);
        dec_lora_bwd(r, l, TSR_LORA_AGATE, a->dln, a->dagate, v->ln1);
        return;
    }
    /* datty = d gated: d y = it s, d gate = it y s (1 - s) */
    be->gate_backward(be, a->datty, a->dagate, v->atty, v->agate, n);
}

/* ln1 -> qkv (QK-norm, RoPE), the gate's projection, the attention, the gate */
static void attn_forward(const dec_run *r, int l, const dec_layer *v, const void *const *w) {
    const tsr_model *m = r->d->m;
    qkv_forward(r, l, v, w);
    if (v->agate) { /* attn_output_gate: the gate's projection */
        dec_linear(r, l, v->agate, NULL, v->ln1, w[TSR_P_ATTNGATEW], NULL, r->N, m->C, m->QD);
        dec_lora_fwd(r, l, TSR_LORA_AGATE, v->agate, v->ln1);
    }
    attention(r, l, v, w[TSR_P_SINKS]);
    gate_forward(r, v); /* attn_output_gate: atty * sigmoid(gate) */
}

/* the output projection (and its adapter) into r->scratch */
static void attn_out(const dec_run *r, int l, const dec_layer *v, const void *const *w) {
    const tsr_model *m = r->d->m;
    dec_linear(r, l, r->scratch, NULL, attn_in(v), w[TSR_P_ATTPROJW], w[TSR_P_ATTPROJB], r->N,
               m->QD, m->C);
    dec_lora_fwd(r, l, TSR_LORA_O, r->scratch, attn_in(v));
}

/* from dqkv = d(qkv) (after the attention's backward): RoPE's transpose, QK-norm's backward,
 * the projection's into a->dln (written) and its adapters', the gate's projection's */
static void qkv_backward(const dec_run *r, int l, const dec_layer *v, const dec_unit *u) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const tsr_model *m = d->m;
    tsr_acts *a = d->a;
    const int N = r->N;
    if (m->cfg.pos == TSR_POS_ROPE) {
        int p0;
        const int32_t *pos = dec_rope_pos(r, &p0);
        model_rope_apply(m, be, d->rope, l, a->dqkv, pos, p0, r->B, r->T, 1);
    }
    void *dproj = a->dqkv; /* the gradient of the projection's output */
    if (m->cfg.qk_norm) {
        be->zero(be, a->dqkvr, (size_t)N * m->QKV * tsr_dtype_size(be->act));
        if (m->cfg.qk_norm_scope == TSR_QKN_PROJECTION && d->tp)
            dec_tp_qknorm_backward(d, a->dqkvr, u->g[TSR_P_QNORMW], u->g[TSR_P_KNORMW], a->dqkv,
                                   v->qkvr, u->w[TSR_P_QNORMW], u->w[TSR_P_KNORMW], v->qknr, N);
        else (m->cfg.qk_norm_scope == TSR_QKN_PROJECTION ? be->qknorm_proj_backward
                                                    : be->qknorm_backward)(
            be, a->dqkvr, u->g[TSR_P_QNORMW], u->g[TSR_P_KNORMW], a->dqkv, v->qkvr,
            u->w[TSR_P_QNORMW], u->w[TSR_P_KNORMW], v->qknr, N, m->NH, m->KVH, m->hs);
        dproj = a->dqkvr;
    }
    be->matmul_backward(be, a->dln, u->g[TSR_P_QKVW], u->g[TSR_P_QKVB], dproj, v->ln1,
                        u->w[TSR_P_QKVW], N, m->C, m->QKV, TSR_GRAD_SET);
    for (int t = TSR_LORA_Q; t <= TSR_LORA_V; t++) dec_lora_bwd(r, l, t, a->dln, dproj, v->ln1);
    gate_backward(r, l, v, u, 1);
}

/* from dout = d(the output projection's output) to a->dln = d(ln1) */
static void attn_backward(const dec_run *r, int l, const dec_layer *v, const dec_unit *u,
                          const void *dout) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const tsr_model *m = d->m;
    tsr_acts *a = d->a;
    const int NH = m->NH, KVH = m->KVH, hs = m->hs;
    tsr_attn_var var;
    be->matmul_backward(be, a->datty, u->g[TSR_P_ATTPROJW], u->g[TSR_P_ATTPROJB], dout,
                        attn_in(v), u->w[TSR_P_ATTPROJW], r->N, m->QD, m->C, TSR_GRAD_SET);
    dec_lora_bwd(r, l, TSR_LORA_O, a->datty, dout, attn_in(v));
    gate_backward(r, l, v, u, 0); /* attn_output_gate: d(gated) to d(atty) and d(gate) */
    const tsr_attn_var *av = attn_var(m, l, u->w[TSR_P_SINKS], u->g[TSR_P_SINKS], &var);
    if (d->ring)
        ring_attention_backward(d->ring, be, a, a->dqkv, a->datty, v->qkv, v->atty, v->att,
                                d->slopes, av, r->B, r->T * d->ring->N, NH, KVH, hs);
    else
        be->attention_backward(be, a->dqkv, a->datty, v->qkv, v->atty, v->att, d->slopes, a->seq,
                               av, a->att_scratch, r->B, r->T, NH, KVH, hs, TSR_GRAD_SET);
    qkv_backward(r, l, v, u);
}

/* ---- its activations and cache --------------------------------------------------------- */

/* per-layer strides: act (N,QKV), act (N,QD), fp32 (N,NH+KVH), the saved attention (context
 * parallelism keeps the ring's log-sum-exp (B,NH,T)), fp32 (2,N,QD) of the gate */
typedef struct attn_strides { size_t qkv, qd, qkn, att, ag; } attn_strides;

static attn_strides attn_strides_of(const dec_plan *p) {
    const tsr_model *m = p->m;
    const size_t N = p->N, f = sizeof(float);
    const size_t att = m->cpN > 1 ? N * (size_t)m->NH : p->be->attention_saved(p->B, p->T, m->NH);
    return (attn_strides){dec_stride(p, N * m->QKV, p->e), dec_stride(p, N * m->QD, p->e),
                          dec_stride(p, N * (size_t)(m->NH + m->KVH), f), dec_stride(p, att, f),
                          m->cfg.attn_output_gate ? dec_stride(p, 2 * N * m->QD, f) : 0};
}

/* qkv, qkvr, the QK-norm statistics, atty, the saved attention, the gate: stacked with the
 * attention group (a linear layer's slots go unused); their gradients, reused layer by layer;
 * the backend's attention scratch. None in a model without attention layers (every layer a
 * linear or an MLA one). */
static void attn_acts(dec_plan *p, size_t b[TSR_A_COUNT]) {
    const tsr_model *m = p->m;
    const attn_strides st = attn_strides_of(p);
    const size_t Lat = model_act_group_layers(m, TSR_AG_ATTN), e = p->e, f = sizeof(float);
    const size_t N = p->N, QKV = m->QKV, QD = m->QD;
    const int on = m->LA > 0, qk = on && m->cfg.qk_norm, cp = m->cpN > 1;
    dec_plan_stack(p, b, TSR_A_QKV, on, Lat, st.qkv, e);
    dec_plan_stack(p, b, TSR_A_QKVR, qk, Lat, st.qkv, e);
    dec_plan_stack(p, b, TSR_A_QKN_RSTD, qk, Lat, st.qkn, f);
    dec_plan_stack(p, b, TSR_A_ATTY, on, Lat, st.qd, e);
    dec_plan_stack(p, b, TSR_A_ATT, on, Lat, st.att, f);
    dec_plan_stack(p, b, TSR_A_AGATE, on, Lat, st.ag, f);
    dec_plan_buffer(p, b, TSR_A_DATTY, on, e * N * QD);
    dec_plan_buffer(p, b, TSR_A_DQKV, on, e * N * QKV);
    dec_plan_buffer(p, b, TSR_A_DQKVR, qk, e * N * QKV);
    dec_plan_buffer(p, b, TSR_A_DAGATE, on && st.ag > 0, f * N * QD);
    dec_plan_buffer(p, b, TSR_A_ATT_SCRATCH, on && !cp,
                    p->be->attention_scratch(p->B, p->T, m->NH, m->KVH, m->hs));
}

static void attn_view(const dec_plan *p, const tsr_acts *a, int l, dec_layer *v) {
    const attn_strides st = attn_strides_of(p);
    const size_t sa = model_act_group_slot(p->m, TSR_AG_ATTN, l), e = p->e, f = sizeof(float);
    v->qkv = dec_stack_at(a->qkv, sa, st.qkv, e);
    v->qkvr = dec_stack_at(a->qkvr, sa, st.qkv, e);
    v->qknr = dec_stack_at(a->qkn_rstd, sa, st.qkn, f);
    v->atty = dec_stack_at(a->atty, p->comp ? 0 : sa, st.qd, e);
    v->att = a->att + sa * st.att;
    v->agate = dec_stack_at(a->agate, sa, st.ag, f);
    v->agated = a->agate ? a->agate + sa * st.ag + p->N * p->m->QD : NULL;
}

static void attn_kv_view(const tsr_kv_cache *kv, const tsr_model *m, dec_layer *v) {
    v->qkv = kv->qkv, v->qkvr = kv->qkvr, v->qknr = kv->qknr, v->atty = kv->atty;
    v->agate = kv->agate;
    v->agated = kv->agate ? kv->agate + (size_t)kv->chunk * m->QD : NULL;
}

/* the keys and values of its ring of positions (model_kv_layer_cap) */
static size_t attn_cache_bytes(const tsr_model *m, const tsr_backend *be, int l, int cap) {
    return 2 * (size_t)model_kv_layer_cap(m, l, cap) * m->KVH * m->hs * tsr_dtype_size(be->act);
}

/* ---- its FLOPs, its backend entries ----------------------------------------------------- */

double model_attn_keys(const tsr_model *m, int T) {
    double keys = 0.0;
    for (int l = 0; l < m->L; l++) {
        const int W = config_layer_window(&m->cfg, l);
        if (model_mixer(&m->cfg, l) != &kind_attention) continue; /* (docs/mfu.md) */
        keys += W > 0 && W < T ? W : T;
    }
    return keys;
}

/* 12 (NH hs) keys: the scores and the weighted sum, forward and backward, over the T keys a
 * query sees (its window's W < T in a sliding layer; docs/mfu.md) */
static double attn_flops(const tsr_model *m, int l, int T) {
    const int W = config_layer_window(&m->cfg, l);
    return 12.0 * (double)m->QD * (W > 0 && W < T ? W : T);
}

static const char *attn_missing(const tsr_model *m, const tsr_backend *be) {
    const tsr_model_config *c = &m->cfg;
    const int rope = c->pos == TSR_POS_ROPE, proj = c->qk_norm_scope == TSR_QKN_PROJECTION;
    const int part = rope && (c->partial_rotary_factor != 1.0 ||
                              c->rope_scaling == TSR_ROPE_SCALING_YARN);
    const char *pk = "model.partial_rotary_factor or rope_scaling = \"yarn\"";
    const dec_need need[] = {
        {c->qk_norm, be->qknorm_forward, "model.qk_norm = true"},
        {c->qk_norm, be->qknorm_backward, "model.qk_norm = true"},
        {c->attn_output_gate, be->gate_forward, "model.attn_output_gate"},
        {c->attn_output_gate, be->gate_backward, "model.attn_output_gate"},
        {part, be->rope_part_forward, pk},
        {part, be->rope_part_backward, pk},
        {c->qk_norm && proj, be->qknorm_proj_forward, "model.qk_norm_scope = \"projection\""},
        {c->qk_norm && proj, be->qknorm_proj_backward, "model.qk_norm_scope = \"projection\""},
        {rope, be->rope_forward, "model.pos = \"rope\""},
        {rope, be->rope_backward, "model.pos = \"rope\""},
    };
    return dec_need_missing(need, sizeof need / sizeof need[0]);
}

const tsr_layer_kind kind_attention = {
    .name = "attention",
    .half = TSR_HALF_MIXER,
    .params = attn_params,
    .n_params = sizeof attn_params / sizeof *attn_params,
    .keys = attn_keys,
    .layout = attn_layout,
    .heads = attn_heads,
    .forward = attn_forward,
    .out = attn_out,
    .backward = attn_backward,
    .acts = attn_acts,
    .view = attn_view,
    .kv_view = attn_kv_view,
    .cache_bytes = attn_cache_bytes,
    .flops = attn_flops,
    .missing = attn_missing,
};
