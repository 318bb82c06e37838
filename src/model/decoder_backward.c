/* decoder_backward.c — the decoder's backward (decoder.h, decoder_int.h; docs/decoder.md): each
 * layer's backward from d(residual3) to d(x), a checkpointed layer's recomputation first (the
 * forward's steps, decoder.c), the LM head's and the embedding's, and the entry points
 * (dec_backward after a training or an evaluation forward, dec_backward_weighted with per-token
 * weights).
 */
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "model/decoder.h"
#include "model/decoder_int.h"
#include "model/model_ep.h"
#include "model/model_lora.h"
#include "model/model_ring.h"


/* What a checkpointed layer reruns before its backward, by mode: from the first step that writes
 * a dropped group to the last one the backward reads. Indexed by tsr_actckpt_kind. */
static const struct { layer_step first, last; } rerun[] = {
    {ST_COUNT, ST_LN1}, /* none: nothing */
    {ST_LN1, ST_FC},    /* block: everything from the kept input x */
    {ST_QKV, ST_ATTN},  /* attention: from the kept ln1 */
    {ST_FC, ST_FC},     /* mlp: from the kept ln2 */
};
_Static_assert(sizeof rerun / sizeof rerun[0] == TSR_ACTCKPT_COUNT, "rerun vs tsr_actckpt_kind");
/* The backward of a norm: the final one, or a block's (block: N1, N2), which with
 * model.norm_placement = post is the identity (dinp += dout; fp32 activations as its forward's) */
static void norm_backward(const dec_run *r, void *dinp, float *dw, float *db, const void *dout,
                          const void *inp, const void *w, const float *mean, const float *rstd,
                          int block) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    if (block && m->cfg.norm_placement == TSR_NPLACE_POST)
        be->add_act(be, dinp, dout, (size_t)r->N * m->C);
    else if (m->cfg.norm == TSR_NORM_RMSNORM)
        be->rmsnorm_backward(be, dinp, dw, dout, inp, w, rstd, r->N, m->C);
    else be->layernorm_backward(be, dinp, dw, db, dout, inp, w, mean, rstd, r->N, m->C);
}

/* LoRA (model_lora.h): target t's adapter path of layer l, its backward into dinp and the
 * adapters' gradients */
static void lora_bwd(const dec_run *r, int l, tsr_lora_target t, void *dinp, const void *dout,
                     const void *inp) {
    lora_backward_at(r->d->lora, r->d->be, l, t, dinp, dout, inp, r->N);
}

/* The shared expert's backward: from dout to dln = d(ln2) (written); with its gate
 * (model.moe_shared_gate) through moe_shout as scratch: s dout, then d(the gate's logit) (N fp32). */
static void shared_backward(const dec_run *r, const dec_layer *v, const void *const *w,
                            float *const *g, const void *dout) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    tsr_acts *a = r->d->a;
    const int N = r->N, C = m->C, S = m->S;
    const void *gw = w[TSR_P_SHGATEW], *x = v->ln2;
    float *dg = a->moe_shout;
    if (gw) { /* moe_shout = s dout */
        be->copy(be, a->moe_shout, dout, (size_t)N * C * tsr_dtype_size(be->act));
        be->moe_shgate_forward(be, a->moe_shout, x, gw, N, C);
    }
    be->matmul_backward(be, a->moe_dshg, g[TSR_P_SHW2], NULL, gw ? a->moe_shout : dout, v->shg,
                        w[TSR_P_SHW2], N, S, C, TSR_GRAD_SET);
    if (gw) be->moe_shgate_grad(be, dg, g[TSR_P_SHGATEW], v->shg, a->moe_dshg, x, gw, N, S, C);
    be->swiglu_backward(be, a->moe_dsh, v->sh, a->moe_dshg, N, S, TSR_GRAD_SET);
    be->matmul_backward(be, a->dln, g[TSR_P_SHW1], NULL, a->moe_dsh, v->ln2, w[TSR_P_SHW1], N, C,
                        2 * S, TSR_GRAD_SET);
    if (gw) be->moe_shgate_dx(be, a->dln, dg, gw, N, C);
}

/* A MoE layer's MLP backward: from dout = d(its output) to dln = d(ln2) (written). */
static void moe_backward(const dec_run *r, int l, const dec_layer *v, const void *const *w,
                         float *const *g, const void *dout) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const tsr_model *m = d->m;
    tsr_acts *a = d->a;
    const int N = r->N, C = m->C, E = m->E, K = m->K, S = m->S, NK = N * K;
    const size_t e = tsr_dtype_size(be->act), n = (size_t)N;
    be->moe_combine_backward(be, a->moe_dxy, a->moe_dwts, dout, v->y, v->wts, v->slot, N, K, C);
    if (S) { /* the shared experts write dln first */
        shared_backward(r, v, w, g, dout);
    } else {
        be->zero(be, a->dln, n * C * e);
    }
    const tsr_experts x = experts_of(m, w, g);
    if (m->ep && ep_exchanging(m->ep)) {
        ep_backward(m->ep, be, (int)model_act_group_slot(m, TSR_AG_MLP, l), a->moe_dxy, &x, NK);
    } else { /* moe_dxy: d(y) in, d(xg) out */
        experts_backward(be, &x, v->offs, NK, a->moe_dxy, v->xg, v->h, v->hg, a->moe_dh,
                         a->moe_dhg);
    }
    be->moe_gather_backward(be, a->dln, a->moe_dxy, v->slot, N, K, C);
    be->moe_router_backward(be, a->moe_dlogits, a->moe_dwts, v->probs, v->lse, v->idx, v->wts,
                            v->offs, N, E, K, m->cfg.moe_norm_topk,
                            (float)(m->cfg.moe_aux_loss_coef * a->moe_w),
                            (float)(m->cfg.moe_z_loss_coef * a->moe_w));
    be->matmul_backward(be, a->dln, g[TSR_P_ROUTERW], g[TSR_P_ROUTERB], a->moe_dlogits, v->ln2,
                        w[TSR_P_ROUTERW], N, C, E, TSR_GRAD_ADD);
}

/* The dense MLP's backward: from dout = d(its output) to dln = d(ln2) (written). */
static void mlp_backward(const dec_run *r, int l, const dec_layer *v, const void *const *w,
                         float *const *g, const void *dout) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    tsr_acts *a = r->d->a;
    const int C = m->C, F = m->F, N = r->N;
    const size_t n = (size_t)N;
    /* tanh GELU without an adapter on the output projection: the two backwards as one op where
     * the backend fuses them (CUDA: the GELU's derivative in the matmul's epilogue) */
    if (m->cfg.mlp == TSR_MLP_GELU && m->cfg.gelu == TSR_GELU_TANH && be->matmul_backward_gelu &&
        !lora_target_on(r->d->lora, TSR_LORA_DOWN)) {
        be->matmul_backward_gelu(be, a->dfch, g[TSR_P_FCPROJW], g[TSR_P_FCPROJB], dout,
                                 v->fchg, w[TSR_P_FCPROJW], v->fch, N, F, C);
    } else {
        be->matmul_backward(be, a->dfch_gelu, g[TSR_P_FCPROJW], g[TSR_P_FCPROJB], dout, v->fchg,
                            w[TSR_P_FCPROJW], N, F, C, TSR_GRAD_SET);
        lora_bwd(r, l, TSR_LORA_DOWN, a->dfch_gelu, dout, v->fchg);
        if (config_mlp_gated(&m->cfg))
            (m->cfg.mlp == TSR_MLP_SWIGLU ? be->swiglu_backward : be->geglu_backward)(
                be, a->dfch, v->fch, a->dfch_gelu, N, F, TSR_GRAD_SET);
        else
            be->gelu_backward(be, a->dfch, v->fch, a->dfch_gelu, n * F,
                              (tsr_gelu_kind)m->cfg.gelu, TSR_GRAD_SET);
    }
    be->matmul_backward(be, a->dln, g[TSR_P_FCW], g[TSR_P_FCB], a->dfch, v->ln2, w[TSR_P_FCW], N,
                        C, m->FW, TSR_GRAD_SET);
    lora_bwd(r, l, TSR_LORA_GATE, a->dln, a->dfch, v->ln2);
    lora_bwd(r, l, TSR_LORA_UP, a->dln, a->dfch, v->ln2);
}

/* The norms after a branch (model.norm_placement sandwich or post): d(f) of the attention's
 * (mlp 0) or the MLP's (mlp 1) output f from dres = d(norm'(f)), f recomputed into scratch
 * (dec_branch_out) and its norm's statistics into lnf_rstd, into a->lnf: both free in the layers'
 * backward (the head's backward has read them). Returns what the branch's backward reads as d(its output): dres without. */
static const void *post_norm_backward(const dec_run *r, int l, const dec_layer *v,
                                      const dec_unit *u, int mlp) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    tsr_acts *a = r->d->a;
    if (m->cfg.norm_placement == TSR_NPLACE_PRE) return a->dresidual;
    const int id = mlp ? TSR_P_POSTMLPW : TSR_P_POSTATTNW, N = r->N, C = m->C;
    dec_branch_out(r, l, v, u->w, mlp, 0);
    /* the forward again for rstd (its output into dln, free until the branch's backward) */
    be->rmsnorm_forward(be, a->dln, a->lnf_rstd, r->scratch, u->w[id], N, C,
                        (float)m->cfg.norm_eps);
    be->zero(be, a->lnf, (size_t)N * C * tsr_dtype_size(be->act));
    be->rmsnorm_backward(be, a->lnf, u->g[id], a->dresidual, r->scratch, u->w[id], a->lnf_rstd,
                         N, C);
    return a->lnf;
}

/* Layer l's backward; dres holds d(residual3) and leaves with d(x). */
static void layer_backward(const dec_run *r, int l, const dec_unit *u) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const tsr_model *m = d->m;
    tsr_acts *a = d->a;
    const int C = m->C, NH = m->NH, KVH = m->KVH, hs = m->hs, N = r->N;
    const size_t e = tsr_dtype_size(be->act), n = (size_t)N;
    const void *const *w = u->w;
    float *const *g = u->g;
    tsr_attn_var var;
    dec_layer v = dec_run_layer(r, l);
    dec_comp_move(d, l, N, 0);
    if (model_ckpt_layer(m, l)) { /* recompute what the layer did not keep, into slot 0 */
        tsr_actckpt_kind k = m->cfg.activation_checkpointing;
        dec_layer_steps(r, l, &v, w, rerun[k].first, rerun[k].last);
    }
    /* MLP branch: dres is d(residual3) = d(the MLP's (normed) output), and flows on to
     * residual2 */
    const void *dout = post_norm_backward(r, l, &v, u, 1);
    if (model_moe_layer(m, l)) moe_backward(r, l, &v, w, g, dout);
    else mlp_backward(r, l, &v, w, g, dout);
    norm_backward(r, a->dresidual, g[TSR_P_LN2W], g[TSR_P_LN2B], a->dln, v.res2, w[TSR_P_LN2W],
                  v.ln2m, v.ln2r, 1);
    /* attention branch: dres is now d(residual2) = d(the (normed) attproj output) */
    dout = post_norm_backward(r, l, &v, u, 0);
    if (dec_dn_layer(m, l)) { /* linear_attention: the Gated DeltaNet's backward (mixer_deltanet.c) */
        dec_dn_backward(r, l, &v, u, dout);
        norm_backward(r, a->dresidual, g[TSR_P_LN1W], g[TSR_P_LN1B], a->dln, v.x, w[TSR_P_LN1W],
                      v.ln1m, v.ln1r, 1);
        return;
    }
    be->matmul_backward(be, a->datty, g[TSR_P_ATTPROJW], g[TSR_P_ATTPROJB], dout,
                        dec_attn_in(m, &v), w[TSR_P_ATTPROJW], N, m->QD, C, TSR_GRAD_SET);
    lora_bwd(r, l, TSR_LORA_O, a->datty, dout, dec_attn_in(m, &v));
    dec_gate_backward(r, &v, u, 0); /* attn_output_gate: d(gated) to d(atty) and d(gate) */
    const tsr_attn_var *av = dec_attn_var(m, l, w[TSR_P_SINKS], g[TSR_P_SINKS], &var);
    if (d->ring)
        ring_attention_backward(d->ring, be, a, a->dqkv, a->datty, v.qkv, v.atty, v.att,
                                d->slopes, av, r->B, r->T * d->ring->N, NH, KVH, hs);
    else
        be->attention_backward(be, a->dqkv, a->datty, v.qkv, v.atty, v.att, d->slopes, a->seq,
                               av, a->att_scratch, r->B, r->T, NH, KVH, hs, TSR_GRAD_SET);
    if (m->cfg.pos == TSR_POS_ROPE) {
        int p0;
        const int32_t *pos = dec_rope_pos(r, &p0);
        model_rope_apply(m, be, d->rope, l, a->dqkv, pos, p0, r->B, r->T, 1);
    }
    void *dproj = a->dqkv; /* the gradient of the projection's output */
    if (m->cfg.qk_norm) {
        be->zero(be, a->dqkvr, n * m->QKV * e);
        (m->cfg.qk_norm_scope == TSR_QKN_PROJECTION ? be->qknorm_proj_backward
                                                    : be->qknorm_backward)(
            be, a->dqkvr, g[TSR_P_QNORMW], g[TSR_P_KNORMW], a->dqkv, v.qkvr, w[TSR_P_QNORMW],
            w[TSR_P_KNORMW], v.qknr, N, NH, KVH, hs);
        dproj = a->dqkvr;
    }
    be->matmul_backward(be, a->dln, g[TSR_P_QKVW], g[TSR_P_QKVB], dproj, v.ln1, w[TSR_P_QKVW],
                        N, C, m->QKV, TSR_GRAD_SET);
    for (int t = TSR_LORA_Q; t <= TSR_LORA_V; t++) lora_bwd(r, l, t, a->dln, dproj, v.ln1);
    dec_gate_backward(r, &v, u, 1);
    if (v.agate) lora_bwd(r, l, TSR_LORA_AGATE, a->dln, a->dagate, v.ln1);
    norm_backward(r, a->dresidual, g[TSR_P_LN1W], g[TSR_P_LN1B], a->dln, v.x, w[TSR_P_LN1W],
                  v.ln1m, v.ln1r, 1);
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
    const dec_run r = dec_train_run(d, B, T, "decoder backward");
    if (d->ring) tokens = d->ring->tokens, targets = d->ring->targets; /* the forward's share */
    if (!d->a->dlogits) { /* an evaluation forward: the loss's gradient over the logits now */
        dec_set_dlosses(d, targets, (size_t)r.N, loss_scale);
        xent_grad(d, targets, r.N);
    }
    backward_pass(d, tokens, B, T, ready, ctx);
}

void dec_backward_weighted(const tsr_decoder *d, const int32_t *tokens, const int32_t *targets,
                           int B, int T, const float *dlosses, float moe_w) {
    const tsr_backend *be = d->be;
    tsr_acts *a = d->a;
    const dec_run r = dec_train_run(d, B, T, "decoder backward");
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
    const dec_run r = dec_train_run(d, B, T, "decoder backward");
    const int C = m->C, L = m->L, N = r.N;
    const size_t e = tsr_dtype_size(be->act);
    dec_unit root, u;
    dec_unit_get(d, 0, 1, &root);
    be->matmul_backward(be, a->dln, root.g[dec_head_id(m)], NULL, a->probs, a->lnf,
                        root.w[dec_head_id(m)], N, C, m->Vp, TSR_GRAD_SET);
    be->zero(be, a->dresidual, (size_t)N * C * e);
    norm_backward(&r, a->dresidual, root.g[TSR_P_LNFW], root.g[TSR_P_LNFB], a->dln,
                  dec_layer_at(m, be, a, L - 1).res3, root.w[TSR_P_LNFW], a->lnf_mean, a->lnf_rstd,
                  0);
    for (int l = L - 1; l >= 0; l--) {
        dec_unit_get(d, l + 1, 1, &u);
        layer_backward(&r, l, &u);
        dec_unit_put(d, l + 1, 1);
        if (ready) ready(ctx, l + 1);
    }
    dec_embed_scale(d, a->dresidual, N); /* d(wte[token]) = sqrt(d_model) d(x) */
    be->encoder_backward(be, root.g[TSR_P_WTE], root.g[TSR_P_WPE], a->dresidual,
                         be->host ? tokens : a->tokens, tokens, a->pos, B, r.T, C);
    dec_unit_put(d, 0, 1);
    if (ready) ready(ctx, 0);
}
