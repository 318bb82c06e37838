/* gpu_model.c — forward and backward of the decoder on the CUDA backend (gpu_model.h). */
#include "gpu/gpu_model.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

size_t gpu_model_state_bytes(const tsr_model *m, gpu_state state) {
    size_t per = state == GPU_STATE_FULL ? 2 * sizeof(float) + sizeof(tsr_bf16)
               : state == GPU_STATE_NO_MASTER ? sizeof(float) + sizeof(tsr_bf16) : 0;
    return m->n_params * per;
}

/* Every activation buffer with its element size and count, in one table, so the byte count of
 * the plan and the allocation cannot disagree. */
typedef struct act_buf {
    void **p;
    size_t elem, n;
} act_buf;

/* The elements between consecutive layers of a per-layer stack of n elements of elem bytes each:
 * n rounded up to whole 256-byte blocks, so every layer's slice starts as aligned as the buffer
 * (tcu_malloc: 256 bytes). cuBLASLt's algorithm is cached by the pointers' alignment
 * (cuda_matmul.cu), so a layer's matmuls then run the same algorithm whichever layer or
 * activation-checkpointing slot their buffers are: checkpointed runs stay bit-identical to
 * `none` at any shape, not only where n * elem happens to be a multiple of 256. */
static size_t layer_stride(size_t n, size_t elem) { return (n * elem + 255) / 256 * 256 / elem; }

/* The per-layer strides of the stacks for B x T, in elements: act_table sizes the stacks with
 * them and lacts_at finds a layer's slices with them (one place, so the two cannot disagree). */
typedef struct strides {
    size_t nc, n, f, qkv, lse; /* bf16 (N,C); fp32 (N); bf16 (N,F); bf16 (N,3C); fp32 (B,NH,T) */
} strides;

static strides strides_of(const tsr_model *m, int B, int T) {
    size_t N = (size_t)B * T, b = sizeof(tsr_bf16), f = sizeof(float);
    return (strides){layer_stride(N * m->C, b), layer_stride(N, f), layer_stride(N * m->F, b),
                     layer_stride(N * 3 * m->C, b), layer_stride((size_t)B * m->NH * T, f)};
}

static size_t act_table(tsr_gpu_model *g, const tsr_model *m, int B, int T, act_buf *t) {
    size_t L = m->L, C = m->C, F = m->F, NH = m->NH, N = (size_t)B * T, Vp = m->Vp;
    size_t b = sizeof(tsr_bf16), f = sizeof(float), i = sizeof(int32_t);
    int doc = m->cfg.attn_mask == TSR_MASK_DOCUMENT, learned = m->params_info[TSR_P_WPE].numel > 0;
    size_t k = 0;
#define BUF(field, e, count) t[k++] = (act_buf){(void **)&g->field, (e), (count)}
    /* activation checkpointing: a dropped group has fewer layers of buffers (model.h) */
    size_t Ln1 = model_act_group_layers(m, TSR_AG_LN1);
    size_t Lat = model_act_group_layers(m, TSR_AG_ATTN);
    size_t Lr2 = model_act_group_layers(m, TSR_AG_RES2);
    size_t Lml = model_act_group_layers(m, TSR_AG_MLP);
    const strides st = strides_of(m, B, T);
    BUF(encoded, b, N * C);
    BUF(ln1, b, Ln1 * st.nc);
    BUF(ln1m, f, Ln1 * st.n);
    BUF(ln1r, f, Ln1 * st.n);
    BUF(qkv, b, Lat * st.qkv);
    BUF(atty, b, Lat * st.nc);
    BUF(lse, f, Lat * st.lse);
    BUF(res2, b, Lr2 * st.nc);
    BUF(ln2, b, Lr2 * st.nc);
    BUF(ln2m, f, Lr2 * st.n);
    BUF(ln2r, f, Lr2 * st.n);
    BUF(fch, b, Lml * st.f);
    BUF(fchg, b, Lml * st.f);
    BUF(res3, b, L * st.nc);
    BUF(lnf, b, N * C);
    BUF(lnfm, f, N);
    BUF(lnfr, f, N);
    BUF(logits, b, N * Vp);
    BUF(scratch, b, N * C);
    BUF(losses, f, N);
    BUF(dlosses, f, N);
    BUF(dres, b, N * C);
    BUF(dln, b, N * C);
    BUF(datty, b, N * C);
    BUF(dqkv, b, N * 3 * C);
    BUF(dfch, b, N * F);
    BUF(dfchg, b, N * F);
    BUF(att_scratch, 1, tcu_attention_scratch_bytes(B, T, (int)C, (int)NH));
    BUF(tokens, i, N);
    BUF(targets, i, N);
    BUF(greedy, i, N);
    if (doc) BUF(seq, i, N);
    if (doc && learned) BUF(pos, i, N);
#undef BUF
    return k;
}

#define MAX_ACT_BUFS 40

size_t gpu_model_acts_bytes(const tsr_model *m, int B, int T) {
    tsr_gpu_model scratch_g;
    act_buf t[MAX_ACT_BUFS];
    size_t n = act_table(&scratch_g, m, B, T, t), bytes = 0;
    for (size_t k = 0; k < n; k++) bytes += (t[k].elem * t[k].n + 255) / 256 * 256;
    return bytes;
}

void gpu_model_init(tsr_gpu_model *g, const tsr_model *m, tcu_stream s, gpu_state state) {
    memset(g, 0, sizeof *g);
    g->m = m;
    g->s = s;
    if (state == GPU_STATE_FULL)
        g->params = tcu_malloc(m->n_params * sizeof(float), "master weights (fp32)");
    if (state != GPU_STATE_NONE) {
        g->wbf = tcu_malloc(m->n_params * sizeof(tsr_bf16), "weights (bf16 copy)");
        g->grads = tcu_malloc(m->n_params * sizeof(float), "gradients (fp32)");
        tcu_zero(g->grads, m->n_params * sizeof(float), s);
    }
    if (m->cfg.pos == TSR_POS_ALIBI) {
        float *h = tsr_malloc((size_t)m->NH * sizeof(float));
        model_alibi_slopes(h, m->NH);
        g->slopes = tcu_malloc((size_t)m->NH * sizeof(float), "ALiBi slopes");
        tcu_memcpy_h2d(g->slopes, h, (size_t)m->NH * sizeof(float), s);
        tcu_sync(s);
        free(h);
    }
}

static void check_layout(const tsr_gpu_model *g);

int gpu_model_try_alloc_acts(tsr_gpu_model *g, int B, int T) {
    act_buf t[MAX_ACT_BUFS];
    gpu_model_free_acts(g);
    size_t n = act_table(g, g->m, B, T, t);
    for (size_t k = 0; k < n; k++) {
        size_t bytes = t[k].elem * t[k].n;
        if (!(*t[k].p = tcu_try_malloc(bytes > 0 ? bytes : 1))) {
            gpu_model_free_acts(g);
            return -1;
        }
    }
    size_t N = (size_t)B * T;
    g->seq_host = tsr_malloc(N * sizeof(int32_t));
    g->pos_host = tsr_malloc(N * sizeof(int32_t));
    g->losses_host = tsr_malloc(N * sizeof(float));
    g->dlosses_host = tsr_malloc(N * sizeof(float));
    g->B = B;
    g->T = T;
    check_layout(g);
    return 0;
}

void gpu_model_free_acts(tsr_gpu_model *g) {
    act_buf t[MAX_ACT_BUFS];
    size_t n = act_table(g, g->m, g->B > 0 ? g->B : 1, g->T > 0 ? g->T : 1, t);
    for (size_t k = 0; k < n; k++) {
        tcu_free(*t[k].p);
        *t[k].p = NULL;
    }
    free(g->seq_host), free(g->pos_host), free(g->losses_host), free(g->dlosses_host);
    g->seq_host = g->pos_host = NULL;
    g->losses_host = g->dlosses_host = NULL;
    g->B = g->T = 0;
}

void gpu_model_free(tsr_gpu_model *g) {
    if (!g->m) return;
    gpu_model_free_acts(g);
    tcu_free(g->params);
    tcu_free(g->wbf);
    tcu_free(g->grads);
    tcu_free(g->slopes);
    memset(g, 0, sizeof *g);
}

void gpu_model_upload(tsr_gpu_model *g, const float *params_host) {
    size_t n = g->m->n_params;
    tcu_memcpy_h2d(g->params, params_host, n * sizeof(float), g->s);
    tcu_f32_to_bf16(g->wbf, g->params, n, g->s);
    tcu_sync(g->s);
}

void gpu_model_download(const tsr_gpu_model *g, float *params_host) {
    tcu_memcpy_d2h(params_host, g->params, g->m->n_params * sizeof(float), g->s);
}

int gpu_model_unit_slices(const tsr_model *m, int u, size_t *off, size_t *len) {
    int k = 0;
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const tsr_param_info *p = &m->params_info[i];
        if (!p->numel || model_param_per_layer((tsr_param_id)i) != (u > 0)) continue;
        size_t per = u > 0 ? p->numel / (size_t)m->L : p->numel;
        off[k] = p->offset + (u > 0 ? (size_t)(u - 1) * per : 0);
        len[k++] = per;
    }
    return k;
}

/* Tensor id's slice for layer l (l ignored for the root tensors) in the flat layout. */
static size_t slice_at(const tsr_model *m, tsr_param_id id, int l) {
    const tsr_param_info *p = &m->params_info[id];
    return p->offset + (model_param_per_layer(id) ? (size_t)l * (p->numel / (size_t)m->L) : 0);
}

/* Unit u's weights (bf16) and, in backward, gradients (fp32) per tensor id; NULL for tensors the
 * model does not have or the unit does not hold. From the flat buffers, or from the source
 * (zero3 / hsdp) when the model holds no flat weights. */
typedef struct uview {
    const tsr_bf16 *w[TSR_P_COUNT];
    float *gr[TSR_P_COUNT];
} uview;

static void view(const tsr_gpu_model *g, int u, int backward, uview *v) {
    memset(v, 0, sizeof *v);
    if (!g->wbf) {
        g->src->get(g->src->ctx, u, backward, v->w, v->gr);
        return;
    }
    const tsr_model *m = g->m;
    for (int i = 0; i < TSR_P_COUNT; i++) {
        if (!m->params_info[i].numel || model_param_per_layer((tsr_param_id)i) != (u > 0)) continue;
        size_t at = slice_at(m, (tsr_param_id)i, u > 0 ? u - 1 : 0);
        v->w[i] = g->wbf + at;
        if (backward) v->gr[i] = g->grads + at;
    }
}

/* Layer l's activations: its slot of each group's stack (a dropped group's slot 0 is shared by
 * the checkpointed layers), x its input (the previous layer's residual3, or the embeddings). */
typedef struct lacts {
    const tsr_bf16 *x;
    tsr_bf16 *ln1, *qkv, *atty, *res2, *ln2, *fch, *fchg, *res3;
    float *ln1m, *ln1r, *lse, *ln2m, *ln2r;
} lacts;

static lacts lacts_at(const tsr_gpu_model *g, int l) {
    const tsr_model *m = g->m;
    const strides st = strides_of(m, g->B, g->T); /* act_table's, for the allocated B x T */
    size_t sNC = st.nc, sNf = st.n, sF = st.f, sQ = st.qkv, sL = st.lse;
    size_t s1 = model_act_group_slot(m, TSR_AG_LN1, l);
    size_t sa = model_act_group_slot(m, TSR_AG_ATTN, l);
    size_t s2 = model_act_group_slot(m, TSR_AG_RES2, l);
    size_t sm = model_act_group_slot(m, TSR_AG_MLP, l);
    return (lacts){
        .x = l ? g->res3 + (size_t)(l - 1) * sNC : g->encoded,
        .ln1 = g->ln1 + s1 * sNC, .ln1m = g->ln1m + s1 * sNf, .ln1r = g->ln1r + s1 * sNf,
        .qkv = g->qkv + sa * sQ, .atty = g->atty + sa * sNC, .lse = g->lse + sa * sL,
        .res2 = g->res2 + s2 * sNC, .ln2 = g->ln2 + s2 * sNC, .ln2m = g->ln2m + s2 * sNf,
        .ln2r = g->ln2r + s2 * sNf, .fch = g->fch + sm * sF, .fchg = g->fchg + sm * sF,
        .res3 = g->res3 + (size_t)l * sNC,
    };
}

/* Every layer's slice of every stack starts on a 256-byte boundary (layer_stride), which keeps
 * cuBLASLt's algorithm choice the same for every layer and slot: checked once per allocation. */
static void check_layout(const tsr_gpu_model *g) {
    for (int l = 0; l < g->m->L; l++) {
        lacts a = lacts_at(g, l);
        const void *p[] = {a.x, a.ln1, a.qkv, a.atty, a.res2, a.ln2, a.fch, a.fchg, a.res3,
                           a.ln1m, a.ln1r, a.lse, a.ln2m, a.ln2r};
        for (size_t k = 0; k < sizeof p / sizeof p[0]; k++)
            if ((uintptr_t)p[k] % 256 != 0)
                tsr_die(TSR_EXIT_INTERNAL, "gpu_model: layer %d's activation %zu at %p is not "
                        "256-byte aligned (B=%d T=%d)", l, k, p[k], g->B, g->T);
    }
}

/* A layer's forward from its ln1 to the MLP's GELU, in steps; fcproj and the residual add fused
 * with the next LayerNorm stay in gpu_model_forward (residual3 is always kept, so a
 * recomputation never reruns them). */
typedef enum { STEP_QKV, STEP_ATTN, STEP_RES2, STEP_FC } layer_step;

static void layer_steps(tsr_gpu_model *g, const lacts *a, const uview *c, int B, int T,
                        layer_step first, layer_step last) {
    const tsr_model *m = g->m;
    int C = m->C, F = m->F, NH = m->NH, N = B * T;
    tsr_gelu_kind gk = (tsr_gelu_kind)m->cfg.gelu;
    tcu_stream s = g->s;
    for (layer_step k = first; k <= last; k++) switch (k) {
        case STEP_QKV:
            tcu_matmul_forward(a->qkv, NULL, a->ln1, c->w[TSR_P_QKVW], c->w[TSR_P_QKVB], N, C,
                               3 * C, gk, s);
            break;
        case STEP_ATTN:
            tcu_attention_forward(a->atty, a->lse, a->qkv, g->slopes, g->seq, B, T, C, NH, s);
            break;
        case STEP_RES2:
            tcu_matmul_forward(g->scratch, NULL, a->atty, c->w[TSR_P_ATTPROJW],
                               c->w[TSR_P_ATTPROJB], N, C, C, gk, s);
            tcu_residual_layernorm_forward(a->res2, a->ln2, a->ln2m, a->ln2r, a->x, g->scratch,
                                           c->w[TSR_P_LN2W], c->w[TSR_P_LN2B], N, C, s);
            break;
        case STEP_FC:
            tcu_matmul_forward(a->fchg, a->fch, a->ln2, c->w[TSR_P_FCW], c->w[TSR_P_FCB], N, C, F,
                               gk, s);
            break;
        }
}

/* What a checkpointed layer recomputes before its backward, by mode (the steps that write its
 * dropped groups; block also its ln1, from the kept input). Indexed by tsr_actckpt_kind. */
static const struct { int ln1; layer_step first, last; } rerun[] = {
    {0, STEP_FC, STEP_QKV},   /* none: nothing */
    {1, STEP_QKV, STEP_FC},   /* block */
    {0, STEP_QKV, STEP_ATTN}, /* attention */
    {0, STEP_FC, STEP_FC},    /* mlp */
};
_Static_assert(sizeof rerun / sizeof rerun[0] == TSR_ACTCKPT_COUNT, "rerun vs tsr_actckpt_kind");

static void check_shape(const tsr_gpu_model *g, int B, int T, const char *what) {
    if (B > g->B || T != g->T)
        tsr_die(TSR_EXIT_INTERNAL, "%s: batch %dx%d exceeds the allocated %dx%d", what, B, T, g->B,
                g->T);
}

void gpu_model_forward(tsr_gpu_model *g, const int32_t *tokens, const int32_t *targets, int B,
                       int T, float loss_scale) {
    const tsr_model *m = g->m;
    check_shape(g, B, T, "gpu_model_forward");
    tcu_stream s = g->s;
    int C = m->C, F = m->F, L = m->L;
    size_t N = (size_t)B * T;
    tsr_gelu_kind gk = (tsr_gelu_kind)m->cfg.gelu;
    tcu_memcpy_h2d(g->tokens, tokens, N * sizeof(int32_t), s);
    tcu_memcpy_h2d(g->targets, targets, N * sizeof(int32_t), s);
    if (g->seq) {
        model_segments(g->seq_host, g->pos ? g->pos_host : NULL, tokens, m->cfg.eot_token, B, T);
        tcu_memcpy_h2d(g->seq, g->seq_host, N * sizeof(int32_t), s);
        if (g->pos) tcu_memcpy_h2d(g->pos, g->pos_host, N * sizeof(int32_t), s);
    }
    uview r, cur, nxt;
    view(g, 0, 0, &r);
    view(g, 1, 0, &cur);
    tcu_encoder_forward(g->encoded, g->tokens, r.w[TSR_P_WTE], r.w[TSR_P_WPE], g->pos, B, T, C,
                        s);
    lacts a0 = lacts_at(g, 0);
    tcu_layernorm_forward(a0.ln1, a0.ln1m, a0.ln1r, g->encoded, cur.w[TSR_P_LN1W],
                          cur.w[TSR_P_LN1B], (int)N, C, s);
    /* a checkpointed layer writes its dropped groups to slot 0, which the next one overwrites */
    for (int l = 0; l < L; l++) {
        lacts a = lacts_at(g, l);
        layer_steps(g, &a, &cur, B, T, STEP_QKV, STEP_FC);
        tcu_matmul_forward(g->scratch, NULL, a.fchg, cur.w[TSR_P_FCPROJW],
                           cur.w[TSR_P_FCPROJB], (int)N, F, C, gk, s);
        /* the residual add fused with the next LayerNorm: layer l+1's ln1, or the final one
         * (asked for only now: this layer's weights are all queued, so a sharded source may
         * reuse their buffer for the layer after the next) */
        int last = l + 1 == L;
        lacts n = last ? a : lacts_at(g, l + 1);
        if (!last) view(g, l + 2, 0, &nxt);
        tcu_residual_layernorm_forward(
            a.res3, last ? g->lnf : n.ln1, last ? g->lnfm : n.ln1m, last ? g->lnfr : n.ln1r,
            a.res2, g->scratch, last ? r.w[TSR_P_LNFW] : nxt.w[TSR_P_LN1W],
            last ? r.w[TSR_P_LNFB] : nxt.w[TSR_P_LN1B], (int)N, C, s);
        if (!last) cur = nxt;
    }
    tcu_matmul_forward(g->logits, NULL, g->lnf, r.w[TSR_P_WTE], NULL, (int)N, C, m->Vp, gk, s);
    if (loss_scale >= 0) {
        for (size_t i = 0; i < N; i++) g->dlosses_host[i] = loss_scale;
        tcu_memcpy_h2d(g->dlosses, g->dlosses_host, N * sizeof(float), s);
    }
    tcu_softmax_xent(g->losses, g->logits, g->targets, loss_scale >= 0 ? g->dlosses : NULL,
                     (int)N, m->V, m->Vp, s);
}

double gpu_model_loss_sum(tsr_gpu_model *g, const int32_t *targets, int B, int T) {
    size_t N = (size_t)B * T;
    tcu_memcpy_d2h(g->losses_host, g->losses, N * sizeof(float), g->s);
    double sum = 0.0;
    for (size_t i = 0; i < N; i++)
        if (targets[i] >= 0) sum += g->losses_host[i];
    return sum;
}

void gpu_model_token_scores(tsr_gpu_model *g, const int32_t *targets, int B, int T, float *losses,
                            int32_t *greedy) {
    const tsr_model *m = g->m;
    check_shape(g, B, T, "gpu_model_token_scores");
    size_t N = (size_t)B * T;
    tcu_argmax(g->greedy, g->logits, (int)N, m->V, m->Vp, g->s);
    tcu_memcpy_d2h(losses, g->losses, N * sizeof(float), g->s);
    tcu_memcpy_d2h(greedy, g->greedy, N * sizeof(int32_t), g->s);
    for (size_t i = 0; i < N; i++)
        if (targets[i] < 0) losses[i] = 0.0f, greedy[i] = -1;
}

void gpu_model_backward(tsr_gpu_model *g, const int32_t *tokens, int B, int T,
                        void (*ready)(void *ctx, int unit), void *ctx) {
    const tsr_model *m = g->m;
    check_shape(g, B, T, "gpu_model_backward");
    tcu_stream s = g->s;
    int C = m->C, F = m->F, NH = m->NH, L = m->L;
    size_t N = (size_t)B * T, b = sizeof(tsr_bf16);
    tsr_gelu_kind gk = (tsr_gelu_kind)m->cfg.gelu;
    /* logits hold dlogits (the fused softmax-cross-entropy of forward) */
    tcu_zero(g->dres, N * C * b, s);
    tcu_zero(g->dln, N * C * b, s);
    uview r, c;
    view(g, 0, 1, &r);
    tcu_matmul_backward(g->dln, r.gr[TSR_P_WTE], NULL, g->logits, g->lnf, r.w[TSR_P_WTE], (int)N,
                        C, m->Vp, s);
    tcu_layernorm_backward(g->dres, r.gr[TSR_P_LNFW], r.gr[TSR_P_LNFB], g->dln,
                           lacts_at(g, L - 1).res3, r.w[TSR_P_LNFW], g->lnfm, g->lnfr, (int)N, C, s);
    /* dres: the gradient of the residual stream, first of residual3, then residual2, then x */
    for (int l = L - 1; l >= 0; l--) {
        lacts a = lacts_at(g, l);
        view(g, l + 1, 1, &c);
        if (model_ckpt_layer(m, l)) { /* recompute what the layer did not keep, into slot 0 */
            tsr_actckpt_kind k = m->cfg.activation_checkpointing;
            if (rerun[k].ln1)
                tcu_layernorm_forward(a.ln1, a.ln1m, a.ln1r, a.x, c.w[TSR_P_LN1W],
                                      c.w[TSR_P_LN1B], (int)N, C, s);
            layer_steps(g, &a, &c, B, T, rerun[k].first, rerun[k].last);
        }
        const tsr_bf16 *x = a.x, *ln1 = a.ln1, *qkv = a.qkv, *atty = a.atty, *res2 = a.res2;
        const tsr_bf16 *ln2 = a.ln2, *fch = a.fch, *fchg = a.fchg;
        tcu_zero(g->dfchg, N * F * b, s);
        tcu_matmul_backward(g->dfchg, c.gr[TSR_P_FCPROJW], c.gr[TSR_P_FCPROJB], g->dres,
                            fchg, c.w[TSR_P_FCPROJW], (int)N, F, C, s);
        tcu_zero(g->dfch, N * F * b, s);
        tcu_gelu_backward(g->dfch, fch, g->dfchg, N * F, gk, s);
        tcu_zero(g->dln, N * C * b, s);
        tcu_matmul_backward(g->dln, c.gr[TSR_P_FCW], c.gr[TSR_P_FCB], g->dfch, ln2,
                            c.w[TSR_P_FCW], (int)N, C, F, s);
        tcu_layernorm_backward(g->dres, c.gr[TSR_P_LN2W], c.gr[TSR_P_LN2B], g->dln, res2,
                               c.w[TSR_P_LN2W], a.ln2m, a.ln2r, (int)N, C, s);
        tcu_zero(g->datty, N * C * b, s);
        tcu_matmul_backward(g->datty, c.gr[TSR_P_ATTPROJW], c.gr[TSR_P_ATTPROJB], g->dres,
                            atty, c.w[TSR_P_ATTPROJW], (int)N, C, C, s);
        tcu_zero(g->dqkv, N * 3 * C * b, s);
        tcu_attention_backward(g->dqkv, g->datty, qkv, atty, a.lse,
                               g->slopes, g->seq, g->att_scratch, B, T, C, NH, s);
        tcu_zero(g->dln, N * C * b, s);
        tcu_matmul_backward(g->dln, c.gr[TSR_P_QKVW], c.gr[TSR_P_QKVB], g->dqkv, ln1,
                            c.w[TSR_P_QKVW], (int)N, C, 3 * C, s);
        tcu_layernorm_backward(g->dres, c.gr[TSR_P_LN1W], c.gr[TSR_P_LN1B], g->dln, x,
                               c.w[TSR_P_LN1W], a.ln1m, a.ln1r, (int)N, C, s);
        if (!g->wbf) g->src->put(g->src->ctx, l + 1);
        if (ready) ready(ctx, l + 1);
    }
    tcu_encoder_backward(r.gr[TSR_P_WTE], r.gr[TSR_P_WPE], g->dres, g->tokens, tokens, g->pos, B,
                         T, C, s);
    if (ready) ready(ctx, 0);
}
