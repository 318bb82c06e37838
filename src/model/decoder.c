/* decoder.c — the decoder's sequence, written once over the backend interface (decoder.h,
 * kernels/backend.h; docs/decoder.md).
 *
 * One block:  ln1 = N1(x); qkv = ln1 @ qkvw^T + qkvb (into qkvr, then qkv = QK-norm(qkvr) with
 *             qk_norm); qkv = RoPE(qkv) in place (pos = rope); atty = attention(qkv);
 *             residual2 = x + atty @ attprojw^T + attprojb; ln2 = N2(residual2);
 *             fch_gelu = gelu(fch = ln2 @ fcw^T + fcb)  (SwiGLU: fch = [gate | up] projection,
 *             fch_gelu = silu(gate) * up);
 *             residual3 = residual2 + fch_gelu @ fcprojw^T + fcprojb
 * N is LayerNorm or RMSNorm (model.norm). The LM head is wte, or lm_head when untied. With
 * model.norm_placement = sandwich (Gemma 2/3) each branch's output is RMS-normalised before its
 * residual add (postattnw, postmlpw: dec_branch_out); with post (OLMo 2) too, and N1, N2 are the
 * identity (ln1 = x, ln2 = residual2: copies, block_norm_forward).
 * Each residual add is fused with the LayerNorm that reads it (residual2 with LN2, residual3 with
 * the next layer's LN1 or the final one), so only layer 0's LN1 runs alone. The steps from LN1 to
 * the MLP's GELU form a table that activation checkpointing reruns a range of (residual3 is always
 * kept, so the last matmul never reruns). The KV-cache decode step runs the same layer loop over
 * one chunk's buffers, with the cache's attention in place of the training one.
 * The activation plan is decoder_acts.c's, the backward decoder_backward.c's, decoding with a KV
 * cache decoder_kv.c's (decoder_int.h: what they share).
 */
#include "model/decoder.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "model/decoder_int.h"
#include "model/model_ep.h"
#include "model/model_lora.h"
#include "model/model_ring.h"

/* ---- the parameter units ------------------------------------------------------------------- */

void dec_unit_offsets(const tsr_model *m, int u, size_t off[TSR_P_COUNT]) {
    size_t len;
    for (int i = 0; i < TSR_P_COUNT; i++) off[i] = model_unit_slice(m, (tsr_param_id)i, u, &len);
}

/* unit u's tensors, from the decoder's source (d->params) */
void dec_unit_get(const tsr_decoder *d, int u, int backward, dec_unit *v) {
    memset(v, 0, sizeof *v);
    d->params.get(d->params.ctx, u, backward, v->w, v->g);
}

void dec_unit_put(const tsr_decoder *d, int u, int backward) {
    if (d->params.put) d->params.put(d->params.ctx, u, backward);
}

/* ---- the layers ---------------------------------------------------------------------------- */

dec_layer dec_run_layer(const dec_run *r, int l) {
    if (!r->kv) return dec_layer_at(r->d->m, r->d->be, r->d->a, l);
    tsr_kv_cache *kv = r->kv;
    return (dec_layer){.x = kv->x, .ln1 = kv->ln, .qkv = kv->qkv, .qkvr = kv->qkvr,
                       .atty = kv->atty, .res2 = kv->x, .ln2 = kv->ln, .fch = kv->fch,
                       .fchg = kv->fchg, .res3 = kv->x, .ln1m = kv->mean, .ln1r = kv->rstd,
                       .qknr = kv->qknr, .ln2m = kv->mean, .ln2r = kv->rstd,
                       .mlg = kv->moe.logits, .xg = kv->moe.xg, .h = kv->moe.h,
                       .hg = kv->moe.hg, .y = kv->moe.y, .sh = kv->moe.sh, .shg = kv->moe.shg,
                       .shout = kv->moe.shout, .probs = kv->moe.probs, .lse = kv->moe.lse,
                       .wts = kv->moe.wts, .stats = kv->moe.stats, .idx = kv->moe.idx,
                       .rows = kv->moe.rows, .slot = kv->moe.slot, .offs = kv->moe.offs,
                       .dn = kv->dn, .agate = kv->agate,
                       .agated = kv->agate ? kv->agate + (size_t)kv->chunk * r->d->m->QD : NULL};
}

/* The block's normalisation (model.norm): LayerNorm (mean, rstd; bias b or NULL) or RMSNorm
 * (rstd; mean and b unused). */
static void norm_forward(const dec_run *r, void *out, float *mean, float *rstd, const void *inp,
                         const void *w, const void *b, int N) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    if (m->cfg.norm == TSR_NORM_RMSNORM)
        be->rmsnorm_forward(be, out, rstd, inp, w, N, m->C, (float)m->cfg.norm_eps);
    else be->layernorm_forward(be, out, mean, rstd, inp, w, b, N, m->C);
}

/* model.norm_placement = post: a block has no norm before its branches (N1, N2 the identity) */
static int no_pre_norm(const tsr_model *m) { return m->cfg.norm_placement == TSR_NPLACE_POST; }

/* a block's N1 (ln1 = N1(x)), or with no_pre_norm a copy of inp (ln1 = x) */
static void block_norm_forward(const dec_run *r, void *out, float *mean, float *rstd,
                               const void *inp, const void *w, const void *b, int N) {
    const tsr_backend *be = r->d->be;
    if (!no_pre_norm(r->d->m)) norm_forward(r, out, mean, rstd, inp, w, b, N);
    else be->copy(be, out, inp, (size_t)N * r->d->m->C * tsr_dtype_size(be->act));
}

/* res = a + b, then out = the normalisation of res (fused); a block's (block: N2, or the next
 * layer's N1) with no_pre_norm: out = res, a copy */
static void residual_norm_forward(const dec_run *r, void *res, void *out, float *mean, float *rstd,
                                  const void *a, const void *b, const void *w, const void *bias,
                                  int N, int block) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    if (block && no_pre_norm(m)) {
        const size_t n = (size_t)N * m->C, e = tsr_dtype_size(be->act);
        be->copy(be, res, a, n * e);
        be->add_act(be, res, b, n);
        be->copy(be, out, res, n * e);
        return;
    }
    if (m->cfg.norm == TSR_NORM_RMSNORM)
        be->residual_rmsnorm_forward(be, res, out, rstd, a, b, w, N, m->C,
                                     (float)m->cfg.norm_eps);
    else be->residual_layernorm_forward(be, res, out, mean, rstd, a, b, w, bias, N, m->C);
}

/* RoPE's positions: the segment positions (attn_mask = document, training), else t + p0 (a
 * decode chunk: its first position in the current segment) */
const int32_t *dec_rope_pos(const dec_run *r, int *p0) {
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
void dec_linear(const dec_run *r, int l, void *out, void *pre_gelu, const void *inp, const void *w,
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

const tsr_attn_var *dec_attn_var(const tsr_model *m, int l, const void *sinks, float *dsinks,
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
    static const float sink_weights; /* any pointer: dec_attn_var only asks whether there is one */
    tsr_attn_var vs;
    for (int l = 0; l < m->cfg.n_layer; l++)
        if (dec_attn_var(m, l, m->cfg.attn_sinks ? &sink_weights : NULL, NULL, &vs)) return 1;
    return 0;
}

static void attention(const dec_run *r, int l, const dec_layer *v, const void *sinks) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const int NH = d->m->NH, KVH = d->m->KVH, hs = d->m->hs;
    tsr_attn_var vs;
    const tsr_attn_var *var = dec_attn_var(d->m, l, sinks, NULL, &vs);
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
    tsr_kv_cache *kv = r->kv; /* attention layer la's ring of lc positions (model.h) */
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

/* LoRA (model_lora.h): target t's adapter path of layer l added to out, the projection's
 * output (forward), or its backward into dinp and the adapters' gradients */
static void lora_fwd(const dec_run *r, int l, tsr_lora_target t, void *out, const void *inp) {
    lora_forward_at(r->d->lora, r->d->be, l, t, out, inp, r->N);
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
    for (int t = TSR_LORA_Q; t <= TSR_LORA_V; t++) lora_fwd(r, l, t, proj, v->ln1);
    if (qk) /* per head, or over the whole projections (model.qk_norm_scope) */
        (m->cfg.qk_norm_scope == TSR_QKN_PROJECTION ? be->qknorm_proj_forward : be->qknorm_forward)(
            be, v->qkv, v->qknr, v->qkvr, w[TSR_P_QNORMW], w[TSR_P_KNORMW], r->N, m->NH, m->KVH,
            m->hs, (float)m->cfg.norm_eps);
    if (m->cfg.pos == TSR_POS_ROPE) {
        int p0;
        const int32_t *pos = dec_rope_pos(r, &p0);
        model_rope_apply(m, be, d->rope, l, v->qkv, pos, p0, r->B, r->T, 0);
    }
}

/* A MoE layer's MLP up to the experts' outputs (docs/moe.md): router (with its bias: gpt-oss),
 * routing, the experts' units and down projections (experts_forward), the shared expert up to
 * its SwiGLU. moe_combine_forward adds them up afterwards (in the fcproj matmul's place). */
static void moe_forward(const dec_run *r, int l, const dec_layer *v, const void *const *w) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    const int N = r->N, C = m->C, E = m->E, K = m->K, NK = N * K;
    dec_linear(r, -1, v->mlg, NULL, v->ln2, w[TSR_P_ROUTERW], w[TSR_P_ROUTERB], N, C, E);
    be->moe_route(be, v->probs, v->lse, v->idx, v->wts, v->offs, v->rows, v->slot, v->stats,
                  v->mlg, N, E, K, m->cfg.moe_norm_topk);
    be->moe_gather(be, v->xg, v->ln2, v->rows, N, K, C);
    const tsr_experts x = experts_of(m, w, NULL);
    if (m->ep && ep_exchanging(m->ep)) { /* the experts live on other ranks too (model_ep.h) */
        ep_forward(m->ep, be, (int)model_act_group_slot(m, TSR_AG_MLP, l), v->xg, v->offs, &x,
                   v->y, NK);
    } else {
        experts_forward(be, &x, v->offs, NK, v->xg, v->h, v->hg, v->y);
    }
    if (m->S) {
        dec_linear(r, l, v->sh, NULL, v->ln2, w[TSR_P_SHW1], NULL, N, C, 2 * m->S);
        be->swiglu_forward(be, v->shg, v->sh, N, m->S);
    }
}

/* out (N,C) = the shared expert's output (if any) + the weighted sum of each row's experts */
static void moe_combine_forward(const dec_run *r, int l, void *out, const dec_layer *v,
                                const void *const *w) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    if (m->S) dec_linear(r, l, v->shout, NULL, v->shg, w[TSR_P_SHW2], NULL, r->N, m->S, m->C);
    if (m->S && w[TSR_P_SHGATEW]) /* model.moe_shared_gate */
        be->moe_shgate_forward(be, v->shout, v->ln2, w[TSR_P_SHGATEW], r->N, m->C);
    be->moe_combine(be, out, m->S ? v->shout : NULL, v->y, v->wts, v->slot, r->N, m->K, m->C);
}

void dec_branch_out(const dec_run *r, int l, const dec_layer *v, const void *const *w, int mlp,
                    int post) {
    const tsr_model *m = r->d->m;
    const int C = m->C, N = r->N;
    if (!mlp && dec_dn_layer(m, l)) {
        dec_dn_out(r, v);
    } else if (!mlp) {
        dec_linear(r, l, r->scratch, NULL, dec_attn_in(m, v), w[TSR_P_ATTPROJW],
                   w[TSR_P_ATTPROJB], N, m->QD, C);
        lora_fwd(r, l, TSR_LORA_O, r->scratch, dec_attn_in(m, v));
    } else if (model_moe_layer(m, l)) {
        moe_combine_forward(r, l, r->scratch, v, w);
    } else {
        dec_linear(r, l, r->scratch, NULL, v->fchg, w[TSR_P_FCPROJW], w[TSR_P_FCPROJB], N, m->F,
                   C);
        lora_fwd(r, l, TSR_LORA_DOWN, r->scratch, v->fchg);
    }
    if (post && m->cfg.norm_placement != TSR_NPLACE_PRE) /* in place; lnf's rstd is free */
        norm_forward(r, r->scratch, r->lnfm, r->lnfr, r->scratch,
                     w[mlp ? TSR_P_POSTMLPW : TSR_P_POSTATTNW], NULL, N);
}

/* Runs steps [first, last] of layer l with its weights w. */
void dec_layer_steps(const dec_run *r, int l, const dec_layer *v, const void *const *w,
                     layer_step first, layer_step last) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    const int C = m->C, F = m->F, N = r->N;
    for (int s = first; s <= (int)last; s++) switch ((layer_step)s) {
        case ST_LN1:
            block_norm_forward(r, v->ln1, v->ln1m, v->ln1r, v->x, w[TSR_P_LN1W], w[TSR_P_LN1B],
                               N);
            break;
        case ST_QKV: /* a linear_attention layer: its whole mixer here (mixer_deltanet.c) */
            if (dec_dn_layer(m, l)) {
                dec_dn_forward(r, l, v, w);
            } else {
                qkv_forward(r, l, v, w);
                if (v->agate) { /* attn_output_gate: the gate's projection */
                    dec_linear(r, l, v->agate, NULL, v->ln1, w[TSR_P_ATTNGATEW], NULL, N, C, m->QD);
                    lora_fwd(r, l, TSR_LORA_AGATE, v->agate, v->ln1);
                }
            }
            break;
        case ST_ATTN:
            if (dec_dn_layer(m, l)) break;
            attention(r, l, v, w[TSR_P_SINKS]);
            dec_gate_forward(r, v); /* attn_output_gate: atty * sigmoid(gate) */
            break;
        case ST_RES2:
            dec_branch_out(r, l, v, w, 0, 1);
            residual_norm_forward(r, v->res2, v->ln2, v->ln2m, v->ln2r, v->x, r->scratch,
                                  w[TSR_P_LN2W], w[TSR_P_LN2B], N, 1);
            break;
        case ST_FC:
            if (model_moe_layer(m, l)) {
                moe_forward(r, l, v, w);
            } else if (config_mlp_gated(&m->cfg)) {
                dec_linear(r, l, v->fch, NULL, v->ln2, w[TSR_P_FCW], w[TSR_P_FCB], N, C, m->FW);
                lora_fwd(r, l, TSR_LORA_GATE, v->fch, v->ln2);
                lora_fwd(r, l, TSR_LORA_UP, v->fch, v->ln2);
                (m->cfg.mlp == TSR_MLP_SWIGLU ? be->swiglu_forward : be->geglu_forward)(
                    be, v->fchg, v->fch, N, F);
            } else {
                dec_linear(r, l, v->fchg, v->fch, v->ln2, w[TSR_P_FCW], w[TSR_P_FCB], N, C, F);
            }
            break;
        case ST_COUNT:
            break;
        }
}

void dec_embed_scale(const tsr_decoder *d, void *x, int N) {
    const tsr_model *m = d->m;
    if (m->cfg.embed_scale == TSR_EMB_SCALE_NONE) return;
    d->be->scale_act(d->be, x, (float)sqrt((double)m->C), (size_t)N * m->C);
}

/* Every layer's forward after the embedding (in x of layer 0, scaled here: model.embed_scale),
 * ending in the final LayerNorm.
 * A checkpointed layer writes its dropped groups to slot 0, which the next one overwrites. */
void dec_layers_forward(const dec_run *r, const dec_unit *root) {
    const tsr_decoder *d = r->d;
    const int L = d->m->L, N = r->N;
    dec_unit cur, nxt;
    dec_unit_get(d, 1, 0, &cur);
    dec_layer v0 = dec_run_layer(r, 0);
    dec_embed_scale(d, v0.x, N);
    dec_layer_steps(r, 0, &v0, cur.w, ST_LN1, ST_LN1);
    for (int l = 0; l < L; l++) {
        dec_layer v = dec_run_layer(r, l);
        dec_layer_steps(r, l, &v, cur.w, ST_QKV, ST_FC);
        dec_branch_out(r, l, &v, cur.w, 1, 1);
        /* before the next layer's ln1 takes the working copy (a decode step keeps none) */
        if (!r->kv) dec_comp_move(d, l, N, 1);
        /* the residual add fused with the next LayerNorm: layer l+1's LN1, or the final one
         * (the next unit is asked for only now: this layer's weights are all used or queued) */
        const int last = l + 1 == L;
        if (!last) dec_unit_get(d, l + 2, 0, &nxt);
        dec_unit_put(d, l + 1, 0);
        dec_layer n = last ? v : dec_run_layer(r, l + 1);
        residual_norm_forward(r, v.res3, last ? r->lnf : n.ln1, last ? r->lnfm : n.ln1m,
                              last ? r->lnfr : n.ln1r, v.res2, r->scratch,
                              last ? root->w[TSR_P_LNFW] : nxt.w[TSR_P_LN1W],
                              last ? root->w[TSR_P_LNFB] : nxt.w[TSR_P_LN1B], N, !last);
        if (!last) cur = nxt;
    }
}

/* The LM head's weight: lm_head when untied, else wte (gradient likewise) */
int dec_head_id(const tsr_model *m) {
    return m->params_info[TSR_P_LMHEAD].numel ? TSR_P_LMHEAD : TSR_P_WTE;
}

/* ---- training and evaluation ---------------------------------------------------------------- */

/* The layers' pass over B sequences of T positions: this rank's T / N with a ring. */
dec_run dec_train_run(const tsr_decoder *d, int B, int T, const char *what) {
    const tsr_acts *a = d->a;
    if (d->m->cpN > 1 && (!d->ring || d->ring->N != d->m->cpN))
        tsr_die(TSR_EXIT_INTERNAL, "%s: the model splits sequences over %d ranks, but the decoder "
                "has no ring of them", what, d->m->cpN);
    const int Tl = d->ring ? T / d->ring->N : T;
    if (B > a->B || Tl != a->T || (d->ring && T % (2 * d->ring->N)))
        tsr_die(TSR_EXIT_INTERNAL, "%s: batch %dx%d exceeds the allocated %dx%d", what, B, Tl,
                a->B, a->T);
    return (dec_run){.d = d, .B = B, .T = Tl, .N = B * Tl, .scratch = a->scratch, .lnf = a->lnf,
                 .lnfm = a->lnf_mean, .lnfr = a->lnf_rstd};
}

/* dlosses[i] = loss_scale where targets[i] counts, else 0; on the backend. And the weight of the
 * microbatch's MoE auxiliary losses: its counted targets x loss_scale (docs/moe.md). */
void dec_set_dlosses(const tsr_decoder *d, const int32_t *targets, size_t N, float loss_scale) {
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
    const dec_run r = dec_train_run(d, B, T, "decoder forward");
    const dec_inputs in = stage_inputs(d, tokens, targets, (size_t)r.N, B, T);
    dec_unit root;
    dec_unit_get(d, 0, 0, &root);
    be->encoder_forward(be, a->encoded, in.tok, root.w[TSR_P_WTE], root.w[TSR_P_WPE], a->pos, B,
                        r.T, m->C);
    dec_layers_forward(&r, &root);
    be->matmul_forward(be, a->probs, NULL, a->lnf, root.w[dec_head_id(m)], NULL, r.N, m->C, m->Vp,
                       TSR_GELU_TANH);
    dec_unit_put(d, 0, 0);
    if (loss_scale >= 0) dec_set_dlosses(d, in.targets, (size_t)r.N, loss_scale);
    be->softmax_xent(be, a->losses, a->probs, in.tg, loss_scale >= 0 ? a->dlosses : NULL, r.N,
                     m->V, m->Vp);
    a->dlogits = loss_scale >= 0;
}

double dec_loss_sum(const tsr_decoder *d, const int32_t *targets, int B, int T) {
    const tsr_backend *be = d->be;
    const tsr_acts *a = d->a;
    const dec_run r = dec_train_run(d, B, T, "decoder loss");
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
    const dec_run r = dec_train_run(d, B, T, "decoder token scores");
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
