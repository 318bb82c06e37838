/* decoder_backward.c — the decoder's backward (decoder.h, decoder_int.h; docs/decoder.md): each
 * layer's backward from d(residual3) to d(x) (the frame's norms around its MLP's and its mixer's
 * backward, through their rows), a checkpointed layer's recomputation first (the forward's steps,
 * decoder.c), the LM head's and the embedding's, and the entry points (dec_backward after a
 * training or an evaluation forward, dec_backward_weighted with per-token weights).
 */
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "model/decoder.h"
#include "model/decoder_int.h"
#include "model/layer_kind.h"
#include "model/model_ring.h"
#include "model/model_tp.h"


/* What a checkpointed layer reruns before its backward, by mode: from the first step that writes
 * a dropped group to the last one the backward reads. Indexed by tsr_actckpt_kind. */
static const struct { layer_step first, last; } rerun[] = {
    {ST_COUNT, ST_LN1}, /* none: nothing */
    {ST_LN1, ST_MLP},   /* block: everything from the kept input x */
    {ST_MIX, ST_MIX},   /* attention: the mixer, from the kept ln1 */
    {ST_MLP, ST_MLP},   /* mlp: from the kept ln2 */
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
        be->add_act(be, dinp, dout, (size_t)r->Nf * m->C);
    else if (m->cfg.norm == TSR_NORM_RMSNORM)
        be->rmsnorm_backward(be, dinp, dw, dout, inp, w, rstd, r->Nf, m->C);
    else be->layernorm_backward(be, dinp, dw, db, dout, inp, w, mean, rstd, r->Nf, m->C);
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
    const int id = mlp ? TSR_P_POSTMLPW : TSR_P_POSTATTNW, N = r->Nf, C = m->C;
    dec_branch_out(r, l, v, u->w, mlp, 0);
    /* the forward again for rstd (its output into dln, free until the branch's backward) */
    be->rmsnorm_forward(be, a->dln, a->lnf_rstd, r->scratch, u->w[id], N, C,
                        (float)m->cfg.norm_eps);
    be->zero(be, a->lnf, (size_t)N * C * tsr_dtype_size(be->act));
    be->rmsnorm_backward(be, a->lnf, u->g[id], a->dresidual, r->scratch, u->w[id], a->lnf_rstd,
                         N, C);
    return a->lnf;
}

/* Layer l's backward; dres holds d(residual3) and leaves with d(x): the MLP's and the mixer's
 * through their rows, each after its post-norm's and before its norm's. Under tensor
 * parallelism a half's output gradient and its normed input are gathered (sequence
 * parallelism) and its input gradient summed over the group (dec_tp_*). */
static void layer_backward(const dec_run *r, int l, const dec_unit *u) {
    const tsr_decoder *d = r->d;
    const tsr_model *m = d->m;
    tsr_acts *a = d->a;
    const void *const *w = u->w;
    float *const *g = u->g;
    dec_layer v = dec_run_layer(r, l);
    dec_comp_move(d, l, r->N, 0);
    if (model_ckpt_layer(m, l)) { /* recompute what the layer did not keep, into slot 0 */
        tsr_actckpt_kind k = m->cfg.activation_checkpointing;
        dec_layer_steps(r, l, &v, w, rerun[k].first, rerun[k].last);
    }
    /* MLP branch: dres is d(residual3) = d(the MLP's (normed) output), and flows on to
     * residual2 */
    dec_layer gv = v; /* (its normed input gathered, before a post-norm recomputes its output) */
    gv.ln2 = (void *)dec_tp_in(r, v.ln2);
    const void *dout = dec_tp_in_grad(r, post_norm_backward(r, l, &v, u, 1));
    model_mlp(&m->cfg, l)->backward(r, l, &gv, u, dout);
    dec_tp_out(r, a->dln);
    norm_backward(r, a->dresidual, g[TSR_P_LN2W], g[TSR_P_LN2B], a->dln, v.res2, w[TSR_P_LN2W],
                  v.ln2m, v.ln2r, 1);
    /* mixer branch: dres is now d(residual2) = d(the mixer's (normed) output) */
    gv = v;
    gv.ln1 = (void *)dec_tp_in(r, v.ln1);
    dout = dec_tp_in_grad(r, post_norm_backward(r, l, &v, u, 0));
    model_mixer(&m->cfg, l)->backward(r, l, &gv, u, dout);
    dec_tp_out(r, a->dln);
    norm_backward(r, a->dresidual, g[TSR_P_LN1W], g[TSR_P_LN1B], a->dln, v.x, w[TSR_P_LN1W],
                  v.ln1m, v.ln1r, 1);
}

/* an evaluation forward's loss gradient over the logits, from dlosses (set on the backend) */
static void xent_grad(const tsr_decoder *d, const int32_t *targets, int N) {
    const tsr_backend *be = d->be;
    tsr_acts *a = d->a;
    if (d->tp) { /* (vocabulary-parallel: the probabilities the forward left) */
        dec_tp_xent_grad(d, targets, a->dlosses, N);
        return;
    }
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
        dec_set_dlosses(d, targets, (size_t)r.N, loss_scale); /* (and MoE's weight) */
        if (!d->m->cfg.part.no_head) xent_grad(d, targets, r.N);
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
    if (!d->m->cfg.part.no_head) xent_grad(d, targets, (int)N); /* (a pipeline stage: pp_dy) */
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
    if (m->cfg.part.no_head) { /* a pipeline stage before the last: the next one's gradient */
        be->copy(be, a->dresidual, d->pp_dy, (size_t)r.Nf * C * e);
    } else {
        /* (sequence parallelism: the final norm's output as the forward gathered it, in tp_x) */
        const void *lnf = d->tp && d->tp->sp ? a->tp_x : a->lnf;
        be->matmul_backward(be, a->dln, root.g[dec_head_id(m)], NULL, a->probs, lnf,
                            root.w[dec_head_id(m)], N, C, m->Vp, TSR_GRAD_SET);
        dec_tp_out(&r, a->dln);
        be->zero(be, a->dresidual, (size_t)r.Nf * C * e);
        norm_backward(&r, a->dresidual, root.g[TSR_P_LNFW], root.g[TSR_P_LNFB], a->dln,
                      dec_layer_at(m, be, a, L - 1).res3, root.w[TSR_P_LNFW], a->lnf_mean,
                      a->lnf_rstd, 0);
        if (d->pp_dy) be->add_act(be, a->dresidual, d->pp_dy, (size_t)r.Nf * C);
    }
    for (int l = L - 1; l >= 0; l--) {
        dec_unit_get(d, l + 1, 1, &u);
        layer_backward(&r, l, &u);
        dec_unit_put(d, l + 1, 1);
        if (ready) ready(ctx, l + 1);
    }
    if (!m->cfg.part.no_embed) { /* (else d(the stage's input) stays in dresidual) */
        dec_embed_scale(d, a->dresidual, r.Nf); /* d(wte[token]) = sqrt(d_model) d(x) */
        if (d->tp) dec_tp_embed_backward(&r, &root, tokens); /* (vocabulary-parallel) */
        else be->encoder_backward(be, root.g[TSR_P_WTE], root.g[TSR_P_WPE], a->dresidual,
                                  be->host ? tokens : a->tokens, tokens, a->pos, B, r.T, C);
    }
    dec_unit_put(d, 0, 1);
    if (ready) ready(ctx, 0);
}
