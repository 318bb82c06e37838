/* mlp_dense.c — the dense MLP kinds (layer_kind.h): `dense`, gelu(x fcw^T) fcprojw^T (GPT-2,
 * MPT), and `gated`, act(x Wg^T) * (x Wu^T) fcprojw^T with act SiLU (SwiGLU: Llama, Qwen) or the
 * tanh GELU (GeGLU: Gemma), the gate and up projections fused as fcw's rows [gate | up]. A model
 * has one of them (model.mlp), in every layer the mixture of experts does not take.
 */
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "model/decoder_int.h"
#include "model/layer_kind.h"
#include "model/model_lora.h"

/* ---- their tensors ---------------------------------------------------------------------- */

/* fcw's output dimension is one block (dense) or two ([gate | up], gated), each split alike */
#define DENSE_PARAMS(parts)                                                                    \
    {TSR_P_FCW, "fcw", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 10, TSR_SPLIT_OUT, 0, parts, 1},        \
    {TSR_P_FCB, "fcb", TSR_PK_BIAS, TSR_INIT_ZERO, 11, TSR_SPLIT_OUT, 0, parts, 0},            \
    {TSR_P_FCPROJW, "fcprojw", TSR_PK_WEIGHT, TSR_INIT_RESIDUAL, 12, TSR_SPLIT_IN, 1, 1, 1},   \
    {TSR_P_FCPROJB, "fcprojb", TSR_PK_BIAS, TSR_INIT_ZERO, 13, TSR_SPLIT_AFTER_SUM, -1, 1, 0}
static const tsr_param_row dense_params[] = {DENSE_PARAMS(1)};
static const tsr_param_row gated_params[] = {DENSE_PARAMS(2)};
#undef DENSE_PARAMS

static const char *const dense_keys[] = {"model.mlp", "model.gelu", "model.intermediate_size",
                                         "model.expansion_ratio", "model.bias", NULL};
static const char *const gated_keys[] = {"model.mlp", "model.intermediate_size",
                                         "model.expansion_ratio", "model.bias", NULL};

static int gated_serves(const tsr_model_config *c, int l) {
    (void)l;
    return config_mlp_gated(c);
}

/* stacked over the LD dense layers: fcw (LD, FW, C), FW = F or 2F [gate | up], its bias; fcprojw
 * (LD, C, F) and its bias */
static void dense_layout(tsr_model *m) {
    const int64_t C = m->C, F = m->F, FW = m->FW, LD = m->LD;
    const int bias = m->cfg.bias;
    model_param_shape(m, TSR_P_FCW, LD > 0, 3, LD, FW, C, 0);
    model_param_shape(m, TSR_P_FCB, LD > 0 && bias, 2, LD, FW, 0, 0);
    model_param_shape(m, TSR_P_FCPROJW, LD > 0, 3, LD, C, F, 0);
    model_param_shape(m, TSR_P_FCPROJB, LD > 0 && bias, 2, LD, C, 0, 0);
}

/* ---- the pass ---------------------------------------------------------------------------- */

/* fch_gelu = gelu(fch = ln2 @ fcw^T + fcb): the matmul's GELU epilogue */
static void dense_forward(const dec_run *r, int l, const dec_layer *v, const void *const *w) {
    const tsr_model *m = r->d->m;
    dec_linear(r, l, v->fchg, v->fch, v->ln2, w[TSR_P_FCW], w[TSR_P_FCB], r->N, m->C, m->F);
}

/* fch = ln2 @ fcw^T + fcb, [gate | up] (and their adapters); fch_gelu = act(gate) * up */
static void gated_forward(const dec_run *r, int l, const dec_layer *v, const void *const *w) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    dec_linear(r, l, v->fch, NULL, v->ln2, w[TSR_P_FCW], w[TSR_P_FCB], r->N, m->C, m->FW);
    dec_lora_fwd(r, l, TSR_LORA_GATE, v->fch, v->ln2);
    dec_lora_fwd(r, l, TSR_LORA_UP, v->fch, v->ln2);
    (m->cfg.mlp == TSR_MLP_SWIGLU ? be->swiglu_forward : be->geglu_forward)(be, v->fchg, v->fch,
                                                                          r->N, m->F);
}

/* the down projection (and its adapter) into r->scratch */
static void dense_out(const dec_run *r, int l, const dec_layer *v, const void *const *w) {
    const tsr_model *m = r->d->m;
    dec_linear(r, l, r->scratch, NULL, v->fchg, w[TSR_P_FCPROJW], w[TSR_P_FCPROJB], r->N, m->F,
               m->C);
    dec_lora_fwd(r, l, TSR_LORA_DOWN, r->scratch, v->fchg);
}

/* from dout = d(its output) to a->dln = d(ln2) (written), for both kinds */
static void dense_backward(const dec_run *r, int l, const dec_layer *v, const dec_unit *u,
                           const void *dout) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    tsr_acts *a = r->d->a;
    const void *const *w = u->w;
    float *const *g = u->g;
    const int C = m->C, F = m->F, N = r->N;
    /* tanh GELU without an adapter on the output projection: the two backwards as one op where
     * the backend fuses them (CUDA: the GELU's derivative in the matmul's epilogue) */
    if (m->cfg.mlp == TSR_MLP_GELU && m->cfg.gelu == TSR_GELU_TANH && be->matmul_backward_gelu &&
        !lora_target_on(r->d->lora, TSR_LORA_DOWN)) {
        be->matmul_backward_gelu(be, a->dfch, g[TSR_P_FCPROJW], g[TSR_P_FCPROJB], dout,
                                 v->fchg, w[TSR_P_FCPROJW], v->fch, N, F, C);
    } else {
        be->matmul_backward(be, a->dfch_gelu, g[TSR_P_FCPROJW], g[TSR_P_FCPROJB], dout, v->fchg,
                            w[TSR_P_FCPROJW], N, F, C, TSR_GRAD_SET);
        dec_lora_bwd(r, l, TSR_LORA_DOWN, a->dfch_gelu, dout, v->fchg);
        if (config_mlp_gated(&m->cfg))
            (m->cfg.mlp == TSR_MLP_SWIGLU ? be->swiglu_backward : be->geglu_backward)(
                be, a->dfch, v->fch, a->dfch_gelu, N, F, TSR_GRAD_SET);
        else
            be->gelu_backward(be, a->dfch, v->fch, a->dfch_gelu, (size_t)N * F,
                              (tsr_gelu_kind)m->cfg.gelu, TSR_GRAD_SET);
    }
    be->matmul_backward(be, a->dln, g[TSR_P_FCW], g[TSR_P_FCB], a->dfch, v->ln2, w[TSR_P_FCW], N,
                        C, m->FW, TSR_GRAD_SET);
    dec_lora_bwd(r, l, TSR_LORA_GATE, a->dln, a->dfch, v->ln2);
    dec_lora_bwd(r, l, TSR_LORA_UP, a->dln, a->dfch, v->ln2);
}

/* ---- their activations, backend entries ------------------------------------------------- */

/* fch (N, FW) and fch_gelu (N, F), stacked with the MLP group (a MoE layer's slots go unused),
 * only when some layer has a dense MLP; their gradients, reused layer by layer */
static void dense_acts(dec_plan *p, size_t b[TSR_A_COUNT]) {
    const tsr_model *m = p->m;
    const size_t Lml = model_act_group_layers(m, TSR_AG_MLP), e = p->e, N = p->N;
    const int on = m->LD > 0;
    dec_plan_stack(p, b, TSR_A_FCH, on, Lml, dec_stride(p, N * m->FW, e), e);
    dec_plan_stack(p, b, TSR_A_FCHG, on, Lml, dec_stride(p, N * m->F, e), e);
    dec_plan_buffer(p, b, TSR_A_DFCH, on, e * N * m->FW);
    dec_plan_buffer(p, b, TSR_A_DFCHG, on, e * N * m->F);
}

static void dense_view(const dec_plan *p, const tsr_acts *a, int l, dec_layer *v) {
    const size_t sm = p->comp ? 0 : model_act_group_slot(p->m, TSR_AG_MLP, l), e = p->e;
    v->fch = dec_stack_at(a->fch, sm, dec_stride(p, p->N * p->m->FW, e), e);
    v->fchg = dec_stack_at(a->fch_gelu, sm, dec_stride(p, p->N * p->m->F, e), e);
}

static void dense_kv_view(const tsr_kv_cache *kv, const tsr_model *m, dec_layer *v) {
    (void)m;
    v->fch = kv->fch, v->fchg = kv->fchg;
}

static const char *gated_missing(const tsr_model *m, const tsr_backend *be) {
    const tsr_model_config *c = &m->cfg;
    const dec_need need[] = {
        {c->mlp == TSR_MLP_GEGLU_TANH, be->geglu_forward, "model.mlp = \"geglu_tanh\""},
        {c->mlp == TSR_MLP_GEGLU_TANH, be->geglu_backward, "model.mlp = \"geglu_tanh\""},
        {c->mlp == TSR_MLP_SWIGLU, be->swiglu_forward, "model.mlp = \"swiglu\""},
        {c->mlp == TSR_MLP_SWIGLU, be->swiglu_backward, "model.mlp = \"swiglu\""},
    };
    return dec_need_missing(need, sizeof need / sizeof need[0]);
}

const tsr_layer_kind kind_dense = {
    .name = "dense",
    .half = TSR_HALF_MLP,
    .params = dense_params,
    .n_params = sizeof dense_params / sizeof *dense_params,
    .keys = dense_keys,
    .layout = dense_layout,
    .forward = dense_forward,
    .out = dense_out,
    .backward = dense_backward,
    .acts = dense_acts,
    .view = dense_view,
    .kv_view = dense_kv_view,
};

const tsr_layer_kind kind_gated = {
    .name = "gated",
    .half = TSR_HALF_MLP,
    .params = gated_params,
    .n_params = sizeof gated_params / sizeof *gated_params,
    .keys = gated_keys,
    .serves = gated_serves,
    .layout = dense_layout,
    .forward = gated_forward,
    .out = dense_out,
    .backward = dense_backward,
    .acts = dense_acts,
    .view = dense_view,
    .kv_view = dense_kv_view,
    .missing = gated_missing,
};
