/* decoder.c — the decoder's sequence, written once over the backend interface (decoder.h,
 * kernels/backend.h; docs/decoder.md).
 *
 * One block:  ln1 = N1(x); the mixer's forward from ln1 (its row: attention, a linear layer);
 *             residual2 = x + the mixer's output; ln2 = N2(residual2); the MLP's forward from ln2
 *             (its row: dense, gated, mixture of experts); residual3 = residual2 + its output.
 * N is LayerNorm or RMSNorm (model.norm). The LM head is wte, or lm_head when untied. With
 * model.norm_placement = sandwich (Gemma 2/3) each branch's output is RMS-normalised before its
 * residual add (postattnw, postmlpw: dec_branch_out); with post (OLMo 2) too, and N1, N2 are the
 * identity (ln1 = x, ln2 = residual2: copies, block_norm_forward).
 * Each residual add is fused with the LayerNorm that reads it (residual2 with LN2, residual3 with
 * the next layer's LN1 or the final one), so only layer 0's LN1 runs alone. The steps from LN1 to
 * the MLP's hidden layer form a table that activation checkpointing reruns a range of (residual3
 * is always kept, so the MLP's output projection never reruns). The KV-cache decode step runs the
 * same layer loop over one chunk's buffers, where the kinds take the cache's paths.
 * The layer kinds are layer_kind.h's rows (mixer_attention.c, mixer_deltanet.c, mlp_dense.c,
 * mlp_moe.c); the activation plan is decoder_acts.c's, the backward decoder_backward.c's,
 * decoding with a KV cache decoder_kv.c's (decoder_int.h: what they share).
 */
#include "model/decoder.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "model/decoder_int.h"
#include "model/layer_kind.h"
#include "model/model_lora.h"
#include "model/model_ring.h"
#include "model/model_tp.h"

/* ---- the parameter units ------------------------------------------------------------------- */

void dec_unit_offsets(const tsr_model *m, int u, size_t off[TSR_P_COUNT]) {
    size_t len;
    for (int i = 0; i < TSR_P_COUNT; i++) off[i] = model_unit_slice(m, (tsr_param_id)i, u, &len);
}

/* unit u's tensors, from the decoder's source (d->params) */
void dec_unit_get(const tsr_decoder *d, int u, int backward, dec_unit *v) {
    memset(v, 0, sizeof *v);
    d->params.get(d->params.ctx, u, backward, v->w, v->g);
    if (!d->tp || d->tp->t == 0) return;
    for (int i = 0; i < TSR_P_COUNT; i++) /* a bias one rank adds to the group's sum: the first */
        if (v->w[i] && tp_rule_of(d->m, (tsr_param_id)i).split == TSR_SPLIT_AFTER_SUM)
            v->w[i] = NULL, v->g[i] = NULL;
}

void dec_unit_put(const tsr_decoder *d, int u, int backward) {
    if (d->params.put) d->params.put(d->params.ctx, u, backward);
}

/* ---- the layers ---------------------------------------------------------------------------- */

dec_layer dec_run_layer(const dec_run *r, int l) {
    if (!r->kv) return dec_layer_at(r->d->m, r->d->be, r->d->a, l);
    tsr_kv_cache *kv = r->kv;
    dec_layer v = {.x = kv->x, .ln1 = kv->ln, .res2 = kv->x, .ln2 = kv->ln, .res3 = kv->x,
                   .ln1m = kv->mean, .ln1r = kv->rstd, .ln2m = kv->mean, .ln2r = kv->rstd};
    for (const tsr_layer_kind *const *k = tsr_layer_kinds; *k; k++)
        if ((*k)->kv_view && model_kind_on(r->d->m, *k)) (*k)->kv_view(kv, r->d->m, &v);
    return v;
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

int dec_lora_layer(const dec_run *r, int l) { return config_layer_at(&r->d->m->cfg, l); }

/* LoRA (model_lora.h): target t's adapter path of layer l */
void dec_lora_fwd(const dec_run *r, int l, tsr_lora_target t, void *out, const void *inp) {
    lora_forward_at(r->d->lora, r->d->be, dec_lora_layer(r, l), t, out, inp, r->N);
}

void dec_lora_bwd(const dec_run *r, int l, tsr_lora_target t, void *dinp, const void *dout,
                  const void *inp) {
    lora_backward_at(r->d->lora, r->d->be, dec_lora_layer(r, l), t, dinp, dout, inp, r->N);
}

void dec_branch_out(const dec_run *r, int l, const dec_layer *v, const void *const *w, int mlp,
                    int post) {
    const tsr_model *m = r->d->m;
    dec_layer gv = *v; /* sequence parallelism: the half's normed input as its pass read it,
                        * gathered (its forward's, or the backward's gather before this) */
    if (r->d->tp && r->d->tp->sp) *(mlp ? &gv.ln2 : &gv.ln1) = r->d->a->tp_x;
    (mlp ? model_mlp(&m->cfg, l) : model_mixer(&m->cfg, l))->out(r, l, &gv, w);
    dec_tp_out(r, r->scratch); /* (tensor parallelism: the group's partial sums) */
    if (post && m->cfg.norm_placement != TSR_NPLACE_PRE) /* in place; lnf's rstd is free */
        norm_forward(r, r->scratch, r->lnfm, r->lnfr, r->scratch,
                     w[mlp ? TSR_P_POSTMLPW : TSR_P_POSTATTNW], NULL, r->Nf);
}

/* Runs steps [first, last] of layer l with its weights w: the frame's norms and residual adds
 * (over its Nf rows), the mixer's and the MLP's forwards through their rows (over every row:
 * under tensor parallelism their normed input gathered, dec_tp_in). */
void dec_layer_steps(const dec_run *r, int l, const dec_layer *v, const void *const *w,
                     layer_step first, layer_step last) {
    const tsr_model *m = r->d->m;
    const int N = r->Nf;
    dec_layer g = *v;
    for (int s = first; s <= (int)last; s++) switch ((layer_step)s) {
        case ST_LN1:
            block_norm_forward(r, v->ln1, v->ln1m, v->ln1r, v->x, w[TSR_P_LN1W], w[TSR_P_LN1B],
                               N);
            break;
        case ST_MIX:
            g.ln1 = (void *)dec_tp_in(r, v->ln1);
            model_mixer(&m->cfg, l)->forward(r, l, &g, w);
            break;
        case ST_RES2:
            dec_branch_out(r, l, v, w, 0, 1);
            residual_norm_forward(r, v->res2, v->ln2, v->ln2m, v->ln2r, v->x, r->scratch,
                                  w[TSR_P_LN2W], w[TSR_P_LN2B], N, 1);
            break;
        case ST_MLP:
            g.ln2 = (void *)dec_tp_in(r, v->ln2);
            model_mlp(&m->cfg, l)->forward(r, l, &g, w);
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
    const int L = d->m->L, N = r->Nf;
    const tsr_model_part *part = &d->m->cfg.part;
    dec_unit cur, nxt;
    dec_unit_get(d, 1, 0, &cur);
    dec_layer v0 = dec_run_layer(r, 0);
    if (!part->no_embed) dec_embed_scale(d, v0.x, N); /* (a later pipeline stage's x is scaled) */
    dec_layer_steps(r, 0, &v0, cur.w, ST_LN1, ST_LN1);
    for (int l = 0; l < L; l++) {
        dec_layer v = dec_run_layer(r, l);
        dec_layer_steps(r, l, &v, cur.w, ST_MIX, ST_MLP);
        dec_branch_out(r, l, &v, cur.w, 1, 1);
        if (d->m->act_fault) /* (test-only: model.h) */
            d->m->act_fault(d->m->act_fault_ctx, l, r->scratch, (size_t)N * d->m->C,
                            tsr_dtype_size(d->be->act));
        /* before the next layer's ln1 takes the working copy (a decode step keeps none) */
        if (!r->kv) dec_comp_move(d, l, r->N, 1);
        /* the residual add fused with the next LayerNorm: layer l+1's LN1, or the final one
         * (the next unit is asked for only now: this layer's weights are all used or queued) */
        const int last = l + 1 == L;
        if (last && part->no_head) { /* a pipeline stage's end: its output, the next one's x */
            const size_t n = (size_t)N * d->m->C;
            dec_unit_put(d, l + 1, 0);
            d->be->copy(d->be, v.res3, v.res2, n * tsr_dtype_size(d->be->act));
            d->be->add_act(d->be, v.res3, r->scratch, n);
            break;
        }
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
    if (d->tp && ((!d->be->host && !d->tpdev) || (d->tp->sp && Tl % d->tp->T)))
        tsr_die(TSR_EXIT_INTERNAL, "%s: tensor parallelism runs on host memory or through the "
                "device's hooks, over sequences of a multiple of %d positions (the %s backend, %d)",
                what, d->tp->T, d->be->name, Tl);
    const int Nf = d->tp && d->tp->sp ? B * Tl / d->tp->T : B * Tl;
    return (dec_run){.d = d, .B = B, .T = Tl, .N = B * Tl, .Nf = Nf, .scratch = a->scratch,
                     .lnf = a->lnf, .lnfm = a->lnf_mean, .lnfr = a->lnf_rstd};
}

double dec_moe_weight(const int32_t *targets, size_t N, float loss_scale) {
    size_t counted = 0;
    for (size_t i = 0; i < N; i++) counted += targets[i] >= 0;
    return (double)counted * loss_scale;
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
    if (m->cfg.part.no_embed) /* (a later pipeline stage: the previous one's output) */
        be->copy(be, a->encoded, d->pp_x, (size_t)r.Nf * m->C * tsr_dtype_size(be->act));
    else if (d->tp) dec_tp_embed_forward(&r, &root, in.tokens); /* (vocabulary-parallel) */
    else be->encoder_forward(be, a->encoded, in.tok, root.w[TSR_P_WTE], root.w[TSR_P_WPE],
                             a->pos, B, r.T, m->C);
    dec_layers_forward(&r, &root);
    if (!m->cfg.part.no_head)
        be->matmul_forward(be, a->probs, NULL, dec_tp_in(&r, a->lnf), root.w[dec_head_id(m)],
                           NULL, r.N, m->C, m->Vp, TSR_GELU_TANH);
    dec_unit_put(d, 0, 0);
    if (loss_scale >= 0) dec_set_dlosses(d, in.targets, (size_t)r.N, loss_scale);
    a->dlogits = 0;
    if (m->cfg.part.no_head) return; /* (the stage's output: dec_output) */
    if (d->tp) dec_tp_xent(d, in.targets, loss_scale >= 0 ? a->dlosses : NULL, r.N);
    else be->softmax_xent(be, a->losses, a->probs, in.tg, loss_scale >= 0 ? a->dlosses : NULL,
                          r.N, m->V, m->Vp);
    a->dlogits = loss_scale >= 0;
}

const void *dec_output(const tsr_decoder *d) {
    return dec_layer_at(d->m, d->be, d->a, d->m->L - 1).res3;
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
    if (greedy && d->tp) dec_tp_argmax(d, greedy, r.N);
    else if (greedy)
        be->argmax(be, be->host ? greedy : a->greedy, a->probs, r.N, d->m->V, d->m->Vp);
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
