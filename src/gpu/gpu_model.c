/* gpu_model.c — forward and backward of the decoder on the CUDA backend (gpu_model.h). */
#include "gpu/gpu_model.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

size_t gpu_model_state_bytes(const tsr_model *m) {
    return m->n_params * (2 * sizeof(float) + sizeof(tsr_bf16));
}

/* Every activation buffer with its element size and count, in one table, so the byte count of
 * the plan and the allocation cannot disagree. */
typedef struct act_buf {
    void **p;
    size_t elem, n;
} act_buf;

static size_t act_table(tsr_gpu_model *g, const tsr_model *m, int B, int T, act_buf *t) {
    size_t L = m->L, C = m->C, F = m->F, NH = m->NH, N = (size_t)B * T, Vp = m->Vp;
    size_t b = sizeof(tsr_bf16), f = sizeof(float), i = sizeof(int32_t);
    int doc = m->cfg.attn_mask == TSR_MASK_DOCUMENT, learned = m->params_info[TSR_P_WPE].numel > 0;
    size_t k = 0;
#define BUF(field, e, count) t[k++] = (act_buf){(void **)&g->field, (e), (count)}
    BUF(encoded, b, N * C);
    BUF(ln1, b, L * N * C);
    BUF(ln1m, f, L * N);
    BUF(ln1r, f, L * N);
    BUF(qkv, b, L * N * 3 * C);
    BUF(atty, b, L * N * C);
    BUF(lse, f, L * B * NH * (size_t)T);
    BUF(res2, b, L * N * C);
    BUF(ln2, b, L * N * C);
    BUF(ln2m, f, L * N);
    BUF(ln2r, f, L * N);
    BUF(fch, b, L * N * F);
    BUF(fchg, b, L * N * F);
    BUF(res3, b, L * N * C);
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

void gpu_model_init(tsr_gpu_model *g, const tsr_model *m, tcu_stream s) {
    memset(g, 0, sizeof *g);
    g->m = m;
    g->s = s;
    g->params = tcu_malloc(m->n_params * sizeof(float), "master weights (fp32)");
    g->wbf = tcu_malloc(m->n_params * sizeof(tsr_bf16), "weights (bf16 copy)");
    g->grads = tcu_malloc(m->n_params * sizeof(float), "gradients (fp32)");
    tcu_zero(g->grads, m->n_params * sizeof(float), s);
    if (m->cfg.pos == TSR_POS_ALIBI) {
        float *h = tsr_malloc((size_t)m->NH * sizeof(float));
        model_alibi_slopes(h, m->NH);
        g->slopes = tcu_malloc((size_t)m->NH * sizeof(float), "ALiBi slopes");
        tcu_memcpy_h2d(g->slopes, h, (size_t)m->NH * sizeof(float), s);
        tcu_sync(s);
        free(h);
    }
}

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

/* Tensor id's slice for layer l (l ignored for the root tensors): weights (bf16) and gradients;
 * NULL when the model has no such tensor. */
static size_t slice_at(const tsr_model *m, tsr_param_id id, int l) {
    const tsr_param_info *p = &m->params_info[id];
    return p->offset + (model_param_per_layer(id) ? (size_t)l * (p->numel / (size_t)m->L) : 0);
}
static const tsr_bf16 *W(const tsr_gpu_model *g, tsr_param_id id, int l) {
    return g->m->params_info[id].numel ? g->wbf + slice_at(g->m, id, l) : NULL;
}
static float *G(const tsr_gpu_model *g, tsr_param_id id, int l) {
    return g->m->params_info[id].numel ? g->grads + slice_at(g->m, id, l) : NULL;
}

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
    int C = m->C, F = m->F, NH = m->NH, L = m->L;
    size_t N = (size_t)B * T, sN = (size_t)g->B * T; /* sN: per-layer stride of the stacks */
    tsr_gelu_kind gk = (tsr_gelu_kind)m->cfg.gelu;
    tcu_memcpy_h2d(g->tokens, tokens, N * sizeof(int32_t), s);
    tcu_memcpy_h2d(g->targets, targets, N * sizeof(int32_t), s);
    if (g->seq) {
        model_segments(g->seq_host, g->pos ? g->pos_host : NULL, tokens, m->cfg.eot_token, B, T);
        tcu_memcpy_h2d(g->seq, g->seq_host, N * sizeof(int32_t), s);
        if (g->pos) tcu_memcpy_h2d(g->pos, g->pos_host, N * sizeof(int32_t), s);
    }
    tcu_encoder_forward(g->encoded, g->tokens, W(g, TSR_P_WTE, 0), W(g, TSR_P_WPE, 0), g->pos, B,
                        T, C, s);
    tcu_layernorm_forward(g->ln1, g->ln1m, g->ln1r, g->encoded, W(g, TSR_P_LN1W, 0),
                          W(g, TSR_P_LN1B, 0), (int)N, C, s);
    for (int l = 0; l < L; l++) {
        const tsr_bf16 *x = l ? g->res3 + (size_t)(l - 1) * sN * C : g->encoded;
        tsr_bf16 *ln1 = g->ln1 + l * sN * C, *qkv = g->qkv + l * sN * 3 * C;
        tsr_bf16 *atty = g->atty + l * sN * C, *res2 = g->res2 + l * sN * C;
        tsr_bf16 *ln2 = g->ln2 + l * sN * C, *fch = g->fch + l * sN * F;
        tsr_bf16 *fchg = g->fchg + l * sN * F, *res3 = g->res3 + l * sN * C;
        tcu_matmul_forward(qkv, NULL, ln1, W(g, TSR_P_QKVW, l), W(g, TSR_P_QKVB, l), (int)N, C,
                           3 * C, gk, s);
        tcu_attention_forward(atty, g->lse + (size_t)l * g->B * NH * T, qkv, g->slopes, g->seq, B,
                              T, C, NH, s);
        tcu_matmul_forward(g->scratch, NULL, atty, W(g, TSR_P_ATTPROJW, l),
                           W(g, TSR_P_ATTPROJB, l), (int)N, C, C, gk, s);
        tcu_residual_layernorm_forward(res2, ln2, g->ln2m + l * sN, g->ln2r + l * sN, x,
                                       g->scratch, W(g, TSR_P_LN2W, l), W(g, TSR_P_LN2B, l),
                                       (int)N, C, s);
        tcu_matmul_forward(fchg, fch, ln2, W(g, TSR_P_FCW, l), W(g, TSR_P_FCB, l), (int)N, C, F,
                           gk, s);
        tcu_matmul_forward(g->scratch, NULL, fchg, W(g, TSR_P_FCPROJW, l),
                           W(g, TSR_P_FCPROJB, l), (int)N, F, C, gk, s);
        /* the residual add fused with the next LayerNorm: layer l+1's ln1, or the final one */
        int last = l + 1 == L;
        tcu_residual_layernorm_forward(
            res3, last ? g->lnf : g->ln1 + (l + 1) * sN * C,
            last ? g->lnfm : g->ln1m + (l + 1) * sN, last ? g->lnfr : g->ln1r + (l + 1) * sN,
            res2, g->scratch, last ? W(g, TSR_P_LNFW, 0) : W(g, TSR_P_LN1W, l + 1),
            last ? W(g, TSR_P_LNFB, 0) : W(g, TSR_P_LN1B, l + 1), (int)N, C, s);
    }
    tcu_matmul_forward(g->logits, NULL, g->lnf, W(g, TSR_P_WTE, 0), NULL, (int)N, C, m->Vp, gk, s);
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

void gpu_model_backward(tsr_gpu_model *g, const int32_t *tokens, int B, int T,
                        void (*ready)(void *ctx, int unit), void *ctx) {
    const tsr_model *m = g->m;
    check_shape(g, B, T, "gpu_model_backward");
    tcu_stream s = g->s;
    int C = m->C, F = m->F, NH = m->NH, L = m->L;
    size_t N = (size_t)B * T, sN = (size_t)g->B * T, b = sizeof(tsr_bf16);
    tsr_gelu_kind gk = (tsr_gelu_kind)m->cfg.gelu;
    /* logits hold dlogits (the fused softmax-cross-entropy of forward) */
    tcu_zero(g->dres, N * C * b, s);
    tcu_zero(g->dln, N * C * b, s);
    tcu_matmul_backward(g->dln, G(g, TSR_P_WTE, 0), NULL, g->logits, g->lnf, W(g, TSR_P_WTE, 0),
                        (int)N, C, m->Vp, s);
    tcu_layernorm_backward(g->dres, G(g, TSR_P_LNFW, 0), G(g, TSR_P_LNFB, 0), g->dln,
                           g->res3 + (size_t)(L - 1) * sN * C, W(g, TSR_P_LNFW, 0), g->lnfm,
                           g->lnfr, (int)N, C, s);
    /* dres: the gradient of the residual stream, first of residual3, then residual2, then x */
    for (int l = L - 1; l >= 0; l--) {
        const tsr_bf16 *x = l ? g->res3 + (size_t)(l - 1) * sN * C : g->encoded;
        const tsr_bf16 *ln1 = g->ln1 + l * sN * C, *qkv = g->qkv + l * sN * 3 * C;
        const tsr_bf16 *atty = g->atty + l * sN * C, *res2 = g->res2 + l * sN * C;
        const tsr_bf16 *ln2 = g->ln2 + l * sN * C, *fch = g->fch + l * sN * F;
        const tsr_bf16 *fchg = g->fchg + l * sN * F;
        tcu_zero(g->dfchg, N * F * b, s);
        tcu_matmul_backward(g->dfchg, G(g, TSR_P_FCPROJW, l), G(g, TSR_P_FCPROJB, l), g->dres,
                            fchg, W(g, TSR_P_FCPROJW, l), (int)N, F, C, s);
        tcu_zero(g->dfch, N * F * b, s);
        tcu_gelu_backward(g->dfch, fch, g->dfchg, N * F, gk, s);
        tcu_zero(g->dln, N * C * b, s);
        tcu_matmul_backward(g->dln, G(g, TSR_P_FCW, l), G(g, TSR_P_FCB, l), g->dfch, ln2,
                            W(g, TSR_P_FCW, l), (int)N, C, F, s);
        tcu_layernorm_backward(g->dres, G(g, TSR_P_LN2W, l), G(g, TSR_P_LN2B, l), g->dln, res2,
                               W(g, TSR_P_LN2W, l), g->ln2m + l * sN, g->ln2r + l * sN, (int)N, C,
                               s);
        tcu_zero(g->datty, N * C * b, s);
        tcu_matmul_backward(g->datty, G(g, TSR_P_ATTPROJW, l), G(g, TSR_P_ATTPROJB, l), g->dres,
                            atty, W(g, TSR_P_ATTPROJW, l), (int)N, C, C, s);
        tcu_zero(g->dqkv, N * 3 * C * b, s);
        tcu_attention_backward(g->dqkv, g->datty, qkv, atty, g->lse + (size_t)l * g->B * NH * T,
                               g->slopes, g->seq, g->att_scratch, B, T, C, NH, s);
        tcu_zero(g->dln, N * C * b, s);
        tcu_matmul_backward(g->dln, G(g, TSR_P_QKVW, l), G(g, TSR_P_QKVB, l), g->dqkv, ln1,
                            W(g, TSR_P_QKVW, l), (int)N, C, 3 * C, s);
        tcu_layernorm_backward(g->dres, G(g, TSR_P_LN1W, l), G(g, TSR_P_LN1B, l), g->dln, x,
                               W(g, TSR_P_LN1W, l), g->ln1m + l * sN, g->ln1r + l * sN, (int)N, C,
                               s);
        if (ready) ready(ctx, l + 1);
    }
    tcu_encoder_backward(G(g, TSR_P_WTE, 0), G(g, TSR_P_WPE, 0), g->dres, g->tokens, tokens,
                         g->pos, B, T, C, s);
    if (ready) ready(ctx, 0);
}
