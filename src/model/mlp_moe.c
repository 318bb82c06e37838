/* mlp_moe.c — the mixture-of-experts MLP kind (layer_kind.h; docs/moe.md): a router (softmax,
 * or DeepSeek's with its scores, groups, scale and correction bias), E routed SwiGLU (or
 * gpt-oss's) experts of which each token reaches K, and an optional shared expert (with
 * Qwen3-Next's gate), in every model.moe_every-th layer after the first model.moe_dense_layers;
 * and the correction bias's balancing rule (model_moe_bias_step).
 */
#include <stddef.h>
#include <stdint.h>

#include <stdlib.h>

#include "common.h"
#include "model/decoder.h"
#include "model/decoder_int.h"
#include "model/layer_kind.h"
#include "model/model_ep.h"
#include "model/model_tp.h"

/* ---- its tensors ------------------------------------------------------------------------ */

static const tsr_param_row moe_params[] = {
    {TSR_P_ROUTERW, "routerw", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 19, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_ROUTERB, "routerb", TSR_PK_BIAS, TSR_INIT_ZERO, 37, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_ROUTERCORR, "routercorr", TSR_PK_STATE, TSR_INIT_ZERO, 73, TSR_SPLIT_REPLICATED, -1, 1,
     0},
    {TSR_P_EXPW1, "expw1", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 20, TSR_SPLIT_EXPERTS, 0, 1, 0},
    {TSR_P_EXPB1, "expb1", TSR_PK_BIAS, TSR_INIT_ZERO, 38, TSR_SPLIT_EXPERTS, 0, 1, 0},
    {TSR_P_EXPW2, "expw2", TSR_PK_WEIGHT, TSR_INIT_RESIDUAL, 21, TSR_SPLIT_EXPERTS, 0, 1, 0},
    {TSR_P_EXPB2, "expb2", TSR_PK_BIAS, TSR_INIT_ZERO, 39, TSR_SPLIT_EXPERTS, 0, 1, 0},
    {TSR_P_SHW1, "shw1", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 22, TSR_SPLIT_OUT, 0, 2, 1},
    {TSR_P_SHW2, "shw2", TSR_PK_WEIGHT, TSR_INIT_RESIDUAL, 23, TSR_SPLIT_IN, 1, 1, 1},
    {TSR_P_SHGATEW, "shgatew", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 40, TSR_SPLIT_REPLICATED, -1, 1, 0},
};

static const char *const moe_keys[] = {
    "model.moe_experts", "model.moe_top_k", "model.moe_intermediate_size", "model.moe_every",
    "model.moe_norm_topk", "model.moe_shared_size", "model.moe_shared_gate",
    "model.moe_router_bias", "model.moe_expert_bias", "model.moe_act", "model.swiglu_limit",
    "model.moe_scoring", "model.moe_topk_method", "model.moe_n_group", "model.moe_topk_group",
    "model.moe_routed_scaling", "model.moe_dense_layers", NULL};

/* tensor parallelism inside each expert, as the dense MLP is split: [gate | up] (and its bias)
 * by rows of each part, the down projection by columns, its bias added once (the group's first
 * rank) */
static void moe_within(tsr_param_id id, tsr_split_rule *split, int *dim, int *parts) {
    const int up = id == TSR_P_EXPW1 || id == TSR_P_EXPB1;
    *split = up ? TSR_SPLIT_OUT : id == TSR_P_EXPW2 ? TSR_SPLIT_IN : TSR_SPLIT_AFTER_SUM;
    *dim = up ? 1 : id == TSR_P_EXPW2 ? 2 : -1;
    *parts = up ? 2 : 1;
}

static int moe_serves(const tsr_model_config *c, int l) { return config_moe_layer(c, l); }

/* stacked over the LM MoE layers: the router (LM, E, C) and its bias (LM, E); each expert's
 * [gate | up] rows (LM, E, 2FE, C) and down projection (LM, E, C, FE), their biases; the shared
 * expert's [gate | up] (LM, 2S, C), down (LM, C, S) and gate (LM, 1, C) */
static void moe_layout(tsr_model *m) {
    const tsr_model_config *c = &m->cfg;
    const int64_t C = m->C, LM = m->LM, E = m->E, FE = m->FE, S = m->S;
    const int on = LM > 0, rb = on && c->moe_router_bias, xb = on && c->moe_expert_bias;
    model_param_shape(m, TSR_P_ROUTERW, on, 3, LM, E, C, 0);
    model_param_shape(m, TSR_P_ROUTERB, rb, 2, LM, E, 0, 0);
    model_param_shape(m, TSR_P_ROUTERCORR, on && c->moe_topk_method == TSR_MOE_TOPK_NOAUX_TC, 2,
                      LM, E, 0, 0);
    model_param_shape(m, TSR_P_EXPW1, on, 4, LM, E, 2 * FE, C);
    model_param_shape(m, TSR_P_EXPB1, xb, 3, LM, E, 2 * FE, 0);
    model_param_shape(m, TSR_P_EXPW2, on, 4, LM, E, C, FE);
    model_param_shape(m, TSR_P_EXPB2, xb, 3, LM, E, C, 0);
    model_param_shape(m, TSR_P_SHW1, on && S > 0, 3, LM, 2 * S, C, 0);
    model_param_shape(m, TSR_P_SHW2, on && S > 0, 3, LM, C, S, 0);
    model_param_shape(m, TSR_P_SHGATEW, on && S > 0 && c->moe_shared_gate, 3, LM, 1, C, 0);
}

/* ---- the pass ---------------------------------------------------------------------------- */

/* The layer's router: DeepSeek's (kernels/cpu/cpu_moe_route.h; its correction bias the weights'
 * bias, noaux_tc) into *r, or NULL for the plain one (softmax, greedy, unscaled: moe_route's) */
static const tsr_moe_router *moe_router(const tsr_model *m, const void *bias, tsr_moe_router *r) {
    const tsr_model_config *c = &m->cfg;
    if (c->moe_scoring == TSR_MOE_SCORE_SOFTMAX && c->moe_topk_method == TSR_MOE_TOPK_GREEDY &&
        c->moe_routed_scaling == 1.0)
        return NULL;
    *r = (tsr_moe_router){.sigmoid = c->moe_scoring == TSR_MOE_SCORE_SIGMOID,
                          .method = (int)c->moe_topk_method, .n_group = c->moe_n_group,
                          .topk_group = c->moe_topk_group, .norm = c->moe_norm_topk,
                          .scale = (float)c->moe_routed_scaling, .bias = bias};
    return r;
}

/* A MoE layer's MLP up to the experts' outputs (docs/moe.md): router (with its bias: gpt-oss),
 * routing, the experts' units and down projections (experts_forward), the shared expert up to
 * its SwiGLU. moe_out adds them up afterwards (in the fcproj matmul's place). */
static void moe_forward(const dec_run *r, int l, const dec_layer *v, const void *const *w) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    const int N = r->N, C = m->C, E = m->E, K = m->K, NK = N * K;
    tsr_moe_router rr;
    const tsr_moe_router *rt = moe_router(m, w[TSR_P_ROUTERCORR], &rr);
    dec_linear(r, -1, v->mlg, NULL, v->ln2, w[TSR_P_ROUTERW], w[TSR_P_ROUTERB], N, C, E);
    if (rt)
        be->moe_route_ds(be, v->probs, v->lse, v->idx, v->wts, v->offs, v->rows, v->slot,
                         v->stats, v->mlg, N, E, K, rt);
    else
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

/* r->scratch (N,C) = the shared expert's output (if any) + the weighted sum of each row's experts */
static void moe_out(const dec_run *r, int l, const dec_layer *v, const void *const *w) {
    void *out = r->scratch;
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    if (m->S) dec_linear(r, l, v->shout, NULL, v->shg, w[TSR_P_SHW2], NULL, r->N, m->S, m->C);
    if (m->S && w[TSR_P_SHGATEW]) /* model.moe_shared_gate */
        be->moe_shgate_forward(be, v->shout, v->ln2, w[TSR_P_SHGATEW], r->N, m->C);
    be->moe_combine(be, out, m->S ? v->shout : NULL, v->y, v->wts, v->slot, r->N, m->K, m->C);
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
static void moe_backward(const dec_run *r, int l, const dec_layer *v, const dec_unit *u,
                         const void *dout) {
    const void *const *w = u->w;
    float *const *g = u->g;
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
    /* (tensor parallelism: the router's gradient is summed over the group, each rank's from its
     * experts' slices; the auxiliary losses, the same on every rank, once: the first's) */
    const double aw = d->tp && d->tp->t != 0 ? 0.0 : a->moe_w;
    const float aux_w = (float)(m->cfg.moe_aux_loss_coef * aw);
    const float z_w = (float)(m->cfg.moe_z_loss_coef * aw);
    tsr_moe_router rr;
    const tsr_moe_router *rt = moe_router(m, w[TSR_P_ROUTERCORR], &rr);
    if (rt)
        be->moe_router_ds_backward(be, a->moe_dlogits, a->moe_dwts, v->probs, v->lse, v->idx,
                                   v->wts, v->offs, N, E, K, rt, aux_w, z_w);
    else
        be->moe_router_backward(be, a->moe_dlogits, a->moe_dwts, v->probs, v->lse, v->idx,
                                v->wts, v->offs, N, E, K, m->cfg.moe_norm_topk, aux_w, z_w);
    be->matmul_backward(be, a->dln, g[TSR_P_ROUTERW], g[TSR_P_ROUTERB], a->moe_dlogits, v->ln2,
                        w[TSR_P_ROUTERW], N, C, E, TSR_GRAD_ADD);
}

/* ---- its activations ---------------------------------------------------------------------- */

/* per-layer strides (NK = N K): act (N,E), fp32 (N,E), fp32 (N), 4-byte (N,K), 4-byte (NK),
 * act (NK,C), act (NK,2FE), act (NK,FE), act (N,2S), act (N,S), int32 (E+1), fp32 (2) */
typedef struct moe_strides { size_t ne, nef, n, nk, r, xg, h, hg, sh, shg, offs, stats; } moe_strides;

static moe_strides moe_strides_of(const dec_plan *p) {
    const tsr_model *m = p->m;
    const size_t N = p->N, e = p->e, f = sizeof(float), E = (size_t)m->E, NK = N * m->K;
    const size_t FE = (size_t)m->FE, S = (size_t)m->S;
    return (moe_strides){dec_stride(p, N * E, e), dec_stride(p, N * E, f), dec_stride(p, N, f),
                         dec_stride(p, N * m->K, f), dec_stride(p, NK, f),
                         dec_stride(p, NK * m->C, e), dec_stride(p, NK * 2 * FE, e),
                         dec_stride(p, NK * FE, e), dec_stride(p, N * 2 * S, e),
                         dec_stride(p, N * S, e), E ? dec_stride(p, E + 1, f) : 0,
                         E ? dec_stride(p, 2, f) : 0};
}

/* the routing's and the experts' buffers, stacked with the MLP group (a checkpointed layer
 * recomputes them; a dense layer's slots go unused), the shared expert's; every layer's offsets
 * and statistics (L, ...: the step's metrics read them); the gradients, reused layer by layer */
static void moe_acts(dec_plan *p, size_t b[TSR_A_COUNT]) {
    const tsr_model *m = p->m;
    const moe_strides st = moe_strides_of(p);
    const size_t Lml = model_act_group_layers(m, TSR_AG_MLP), L = (size_t)m->L, e = p->e;
    const size_t f = sizeof(float), N = p->N, NK = N * m->K, FE = m->FE, S = m->S, C = m->C;
    const int moe = m->E > 0, sh = moe && m->S > 0;
    dec_plan_stack(p, b, TSR_A_MOE_LOGITS, moe, Lml, st.ne, e);
    dec_plan_stack(p, b, TSR_A_MOE_PROBS, moe, Lml, st.nef, f);
    dec_plan_stack(p, b, TSR_A_MOE_LSE, moe, Lml, st.n, f);
    dec_plan_stack(p, b, TSR_A_MOE_IDX, moe, Lml, st.nk, f);
    dec_plan_stack(p, b, TSR_A_MOE_WTS, moe, Lml, st.nk, f);
    dec_plan_stack(p, b, TSR_A_MOE_ROWS, moe, Lml, st.r, f);
    dec_plan_stack(p, b, TSR_A_MOE_SLOT, moe, Lml, st.r, f);
    dec_plan_stack(p, b, TSR_A_MOE_XG, moe, Lml, st.xg, e);
    dec_plan_stack(p, b, TSR_A_MOE_H, moe, Lml, st.h, e);
    dec_plan_stack(p, b, TSR_A_MOE_HG, moe, Lml, st.hg, e);
    dec_plan_stack(p, b, TSR_A_MOE_Y, moe, Lml, st.xg, e);
    dec_plan_stack(p, b, TSR_A_MOE_SH, sh, Lml, st.sh, e);
    dec_plan_stack(p, b, TSR_A_MOE_SHG, sh, Lml, st.shg, e);
    dec_plan_stack(p, b, TSR_A_MOE_OFFS, moe, L, st.offs, f);
    dec_plan_stack(p, b, TSR_A_MOE_STATS, moe, L, st.stats, f);
    dec_plan_buffer(p, b, TSR_A_MOE_SHOUT, sh, e * N * C);
    dec_plan_buffer(p, b, TSR_A_MOE_DXY, moe, e * NK * C);
    dec_plan_buffer(p, b, TSR_A_MOE_DH, moe, e * NK * 2 * FE);
    dec_plan_buffer(p, b, TSR_A_MOE_DHG, moe, e * NK * FE);
    dec_plan_buffer(p, b, TSR_A_MOE_DWTS, moe, f * N * (size_t)m->K);
    dec_plan_buffer(p, b, TSR_A_MOE_DLOGITS, moe, e * N * (size_t)m->E);
    dec_plan_buffer(p, b, TSR_A_MOE_DSH, sh, e * N * 2 * S);
    dec_plan_buffer(p, b, TSR_A_MOE_DSHG, sh, e * N * S);
}

static void moe_view(const dec_plan *p, const tsr_acts *a, int l, dec_layer *v) {
    const moe_strides st = moe_strides_of(p);
    const size_t sm = model_act_group_slot(p->m, TSR_AG_MLP, l), e = p->e, f = sizeof(float);
    v->mlg = dec_stack_at(a->moe_logits, sm, st.ne, e);
    v->xg = dec_stack_at(a->moe_xg, sm, st.xg, e);
    v->h = dec_stack_at(a->moe_h, sm, st.h, e);
    v->hg = dec_stack_at(a->moe_hg, sm, st.hg, e);
    v->y = dec_stack_at(a->moe_y, sm, st.xg, e);
    v->sh = dec_stack_at(a->moe_sh, sm, st.sh, e);
    v->shg = dec_stack_at(a->moe_shg, sm, st.shg, e);
    v->shout = a->moe_shout;
    v->probs = dec_stack_at(a->moe_probs, sm, st.nef, f);
    v->lse = dec_stack_at(a->moe_lse, sm, st.n, f);
    v->wts = dec_stack_at(a->moe_wts, sm, st.nk, f);
    v->stats = dec_stack_at(a->moe_stats, (size_t)l, st.stats, f);
    v->idx = dec_stack_at(a->moe_idx, sm, st.nk, f);
    v->rows = dec_stack_at(a->moe_rows, sm, st.r, f);
    v->slot = dec_stack_at(a->moe_slot, sm, st.r, f);
    v->offs = dec_stack_at(a->moe_offs, (size_t)l, st.offs, f);
}

static void moe_kv_view(const tsr_kv_cache *kv, const tsr_model *m, dec_layer *v) {
    (void)m;
    v->mlg = kv->moe.logits, v->xg = kv->moe.xg, v->h = kv->moe.h, v->hg = kv->moe.hg;
    v->y = kv->moe.y, v->sh = kv->moe.sh, v->shg = kv->moe.shg, v->shout = kv->moe.shout;
    v->probs = kv->moe.probs, v->lse = kv->moe.lse, v->wts = kv->moe.wts;
    v->stats = kv->moe.stats, v->idx = kv->moe.idx, v->rows = kv->moe.rows;
    v->slot = kv->moe.slot, v->offs = kv->moe.offs;
}

/* ---- the parameters a token does not reach, the backend entries ------------------------- */

/* the E - K routed experts a token is not sent to: their [gate | up] and down products */
static double moe_idle(const tsr_model *m) { return (double)(m->E - m->K) * 3.0 * m->FE * m->C; }

static const char *moe_missing(const tsr_model *m, const tsr_backend *be) {
    const tsr_model_config *c = &m->cfg;
    const int on = m->E > 0, gate = m->S > 0 && c->moe_shared_gate, xb = on && c->moe_expert_bias;
    const int oss = on && c->moe_act == TSR_MOE_ACT_GPTOSS;
    tsr_moe_router rr;
    const int ds = on && moe_router(m, NULL, &rr);
    const char *k = "model.moe_experts > 0", *dk = "model.moe_scoring, moe_topk_method or "
                                                  "moe_routed_scaling (DeepSeek's router)";
    const dec_need need[] = {
        {gate, be->moe_shgate_forward, "model.moe_shared_gate"},
        {gate, be->moe_shgate_grad, "model.moe_shared_gate"},
        {gate, be->moe_shgate_dx, "model.moe_shared_gate"},
        {xb, be->moe_bias_forward, "model.moe_expert_bias"},
        {xb, be->moe_bias_backward, "model.moe_expert_bias"},
        {oss, be->moe_gptoss_forward, "model.moe_act"},
        {oss, be->moe_gptoss_backward, "model.moe_act"},
        {ds, be->moe_route_ds, dk},       {ds, be->moe_router_ds_backward, dk},
        {on, be->moe_route, k},           {on, be->moe_gather, k},
        {on, be->moe_gather_backward, k}, {on, be->moe_matmul_forward, k},
        {on, be->moe_matmul_backward, k}, {on, be->moe_combine, k},
        {on, be->moe_combine_backward, k}, {on, be->moe_router_backward, k},
        {on, be->swiglu_forward, k},      {on, be->swiglu_backward, k},
    };
    return dec_need_missing(need, sizeof need / sizeof need[0]);
}

/* ---- the statistics' stacks (decoder.h dec_moe_*) ------------------------------------------------------------ */

dec_moe_view dec_moe_stats_view(const tsr_decoder *d) {
    const tsr_model *m = d->m;
    const tsr_acts *a = d->a;
    if (!m->E) return (dec_moe_view){0};
    const dec_plan p = dec_plan_of(m, d->be, a->B, a->T);
    const moe_strides st = moe_strides_of(&p);
    return (dec_moe_view){.stats = a->moe_stats, .offs = a->moe_offs,
                          .stats_bytes = (size_t)m->L * st.stats * sizeof(float),
                          .offs_bytes = (size_t)m->L * st.offs * sizeof(int32_t)};
}

size_t dec_moe_stats_bytes(const tsr_model *m, const tsr_backend *be) {
    if (!m->E) return 0;
    const dec_plan p = dec_plan_of(m, be, 1, 1);
    const moe_strides st = moe_strides_of(&p); /* these two strides do not depend on B x T */
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
    const dec_plan p = dec_plan_of(m, d->be, a->B, a->T);
    const moe_strides st = moe_strides_of(&p);
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

/* ---- auxiliary-loss-free balancing (model.h) ----------------------------------------------- */

/* the step of expert e of MoE layer k: rate sign(mean load - its load) (0 at the mean) */
static float bias_delta(const double *moe, int E, size_t k, int e, float rate) {
    const double *load = moe + k * (size_t)(2 + E) + 2;
    double sum = 0.0;
    for (int j = 0; j < E; j++) sum += load[j];
    const double gap = sum / E - load[e];
    return gap > 0 ? rate : gap < 0 ? -rate : 0.0f;
}

void model_moe_bias_step(const tsr_model *m, const double *moe, size_t flat, float *w, size_t n) {
    const tsr_param_info *q = &m->params_info[TSR_P_ROUTERCORR];
    const float rate = (float)m->cfg.moe_bias_update_rate;
    if (!q->numel || rate == 0.0f || !moe) return;
    const size_t a = q->offset > flat ? q->offset : flat;
    const size_t b = q->offset + q->numel < flat + n ? q->offset + q->numel : flat + n;
    for (size_t i = a; i < b; i++) {
        const size_t at = i - q->offset;
        w[i - flat] += bias_delta(moe, m->E, at / (size_t)m->E, (int)(at % (size_t)m->E), rate);
    }
}

const tsr_layer_kind kind_moe = {
    .name = "moe",
    .half = TSR_HALF_MLP,
    .params = moe_params,
    .n_params = sizeof moe_params / sizeof *moe_params,
    .keys = moe_keys,
    .serves = moe_serves,
    .layout = moe_layout,
    .within = moe_within,
    .forward = moe_forward,
    .out = moe_out,
    .backward = moe_backward,
    .acts = moe_acts,
    .view = moe_view,
    .kv_view = moe_kv_view,
    .idle = moe_idle,
    .missing = moe_missing,
};
