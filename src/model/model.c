/* model.c — parameter layout, initialisation, forward and backward of the decoder. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

static void set_param(tsr_model *m, tsr_param_id id, const char *name, tsr_param_kind kind,
                      int present, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    tsr_param_info *p = &m->params_info[id];
    p->name = name;
    p->kind = kind;
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = d1;
    p->shape[2] = d2;
    p->numel = 0;
    if (present) {
        p->numel = (size_t)d0;
        if (ndim > 1) p->numel *= (size_t)d1;
        if (ndim > 2) p->numel *= (size_t)d2;
    }
}

void model_alibi_slopes(float *slopes, int NH) {
    /* MPT (llm-foundry gen_slopes, alibi_bias_max = 8): for the next power of two n >= NH,
     * m_i = i * 8 / n (i = 1..n), slope_i = 2^-m_i; if n != NH take the odd-indexed slopes
     * followed by the even-indexed ones, first NH of them. */
    int n = 1;
    while (n < NH) n *= 2;
    float all[2 * 4096];
    float tmp[2 * 4096];
    for (int i = 0; i < n && i < 4096; i++) all[i] = (float)pow(2.0, -(double)(i + 1) * 8.0 / n);
    if (n == NH) {
        memcpy(slopes, all, (size_t)NH * sizeof(float));
        return;
    }
    int k = 0;
    for (int i = 1; i < n; i += 2) tmp[k++] = all[i];
    for (int i = 0; i < n; i += 2) tmp[k++] = all[i];
    memcpy(slopes, tmp, (size_t)NH * sizeof(float));
}

int model_config_check(const tsr_model_config *cfg, char *why, size_t n) {
    if (cfg->attn_mask == TSR_MASK_DOCUMENT &&
        (cfg->eot_token < 0 || cfg->eot_token >= cfg->vocab_size)) {
        snprintf(why, n,
                 "model.eot_token = %d is not a token id of model.vocab_size = %d: with "
                 "model.attn_mask = \"document\" it must be in [0, %d) (the tokenizer's "
                 "<|endoftext|> id; GPT-2's is 50256)",
                 cfg->eot_token, cfg->vocab_size, cfg->vocab_size);
        return -1;
    }
    int lo, cn;
    const char *key;
    if (config_actckpt_layers(cfg, &lo, &cn, &key, why, n) != 0) return -1;
    return 0;
}

void model_init(tsr_model *m, const tsr_model_config *cfg, int seq_len, const tsr_ops *ops) {
    char why[256];
    if (model_config_check(cfg, why, sizeof why)) tsr_die(TSR_EXIT_USAGE, "%s", why);
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->ops = ops;
    m->L = cfg->n_layer;
    m->C = cfg->d_model;
    m->NH = cfg->n_head;
    m->F = (int)llround(cfg->expansion_ratio * cfg->d_model);
    m->V = cfg->vocab_size;
    int mult = cfg->vocab_multiple > 0 ? cfg->vocab_multiple : 1;
    m->Vp = (m->V + mult - 1) / mult * mult;
    m->maxT = cfg->max_seq_len > 0 ? cfg->max_seq_len : seq_len;
    const char *ck_key;
    config_actckpt_layers(cfg, &m->ckpt_lo, &m->n_ckpt, &ck_key, why, sizeof why); /* checked */
    int64_t L = m->L, C = m->C, F = m->F;
    int learned = cfg->pos == TSR_POS_LEARNED, bias = cfg->bias;
    set_param(m, TSR_P_WTE, "wte", TSR_PK_EMBEDDING, 1, 2, m->Vp, C, 0);
    set_param(m, TSR_P_WPE, "wpe", TSR_PK_EMBEDDING, learned, 2, m->maxT, C, 0);
    set_param(m, TSR_P_LN1W, "ln1w", TSR_PK_NORM, 1, 2, L, C, 0);
    set_param(m, TSR_P_LN1B, "ln1b", TSR_PK_NORM, bias, 2, L, C, 0);
    set_param(m, TSR_P_QKVW, "qkvw", TSR_PK_WEIGHT, 1, 3, L, 3 * C, C);
    set_param(m, TSR_P_QKVB, "qkvb", TSR_PK_BIAS, bias, 2, L, 3 * C, 0);
    set_param(m, TSR_P_ATTPROJW, "attprojw", TSR_PK_WEIGHT, 1, 3, L, C, C);
    set_param(m, TSR_P_ATTPROJB, "attprojb", TSR_PK_BIAS, bias, 2, L, C, 0);
    set_param(m, TSR_P_LN2W, "ln2w", TSR_PK_NORM, 1, 2, L, C, 0);
    set_param(m, TSR_P_LN2B, "ln2b", TSR_PK_NORM, bias, 2, L, C, 0);
    set_param(m, TSR_P_FCW, "fcw", TSR_PK_WEIGHT, 1, 3, L, F, C);
    set_param(m, TSR_P_FCB, "fcb", TSR_PK_BIAS, bias, 2, L, F, 0);
    set_param(m, TSR_P_FCPROJW, "fcprojw", TSR_PK_WEIGHT, 1, 3, L, C, F);
    set_param(m, TSR_P_FCPROJB, "fcprojb", TSR_PK_BIAS, bias, 2, L, C, 0);
    set_param(m, TSR_P_LNFW, "lnfw", TSR_PK_NORM, 1, 1, C, 0, 0);
    set_param(m, TSR_P_LNFB, "lnfb", TSR_PK_NORM, bias, 1, C, 0, 0);
    size_t off = 0;
    for (int i = 0; i < TSR_P_COUNT; i++) {
        m->params_info[i].offset = off;
        /* keep every tensor 16-float aligned (64 bytes) for vector loads */
        off += (m->params_info[i].numel + 15) / 16 * 16;
    }
    m->n_params = off;
    m->n_params_counted = 0;
    for (int i = 0; i < TSR_P_COUNT; i++) m->n_params_counted += m->params_info[i].numel;
    m->n_params_counted -= (size_t)(m->Vp - m->V) * (size_t)C;
}

void model_alloc_params(tsr_model *m) {
    m->params = m->ops->alloc(m->n_params * sizeof(float));
    m->grads = m->ops->alloc(m->n_params * sizeof(float));
    model_alloc_slopes(m);
}

int model_param_per_layer(tsr_param_id id) { return id >= TSR_P_LN1W && id <= TSR_P_FCPROJB; }

void model_alloc_slopes(tsr_model *m) {
    if (m->cfg.pos == TSR_POS_ALIBI && !m->alibi_slopes) {
        m->alibi_slopes = m->ops->alloc((size_t)m->NH * sizeof(float));
        model_alibi_slopes(m->alibi_slopes, m->NH);
    }
}

void model_init_weights(tsr_model *m, uint64_t seed) {
    double std = m->cfg.init_std, proj_std = std / sqrt(2.0 * m->L);
    memset(m->params, 0, m->n_params * sizeof(float));
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const tsr_param_info *p = &m->params_info[i];
        float *w = m->params + p->offset;
        if (!p->numel) continue;
        if (p->kind == TSR_PK_BIAS) continue; /* zeros */
        if (p->kind == TSR_PK_NORM) {
            int is_bias = i == TSR_P_LN1B || i == TSR_P_LN2B || i == TSR_P_LNFB;
            for (size_t k = 0; k < p->numel; k++) w[k] = is_bias ? 0.0f : 1.0f;
            continue;
        }
        double s = (i == TSR_P_ATTPROJW || i == TSR_P_FCPROJW) ? proj_std : std;
        size_t n = p->numel;
        if (i == TSR_P_WTE) n = (size_t)m->V * (size_t)m->C; /* padded rows stay zero */
        for (size_t k = 0; k < n; k++) w[k] = (float)(s * tsr_rand_normal(seed, (uint64_t)i, k));
    }
}

/* Activation checkpointing (docs/model.md; the groups and slots: model.h). The groups each mode
 * recomputes, as bit masks over tsr_act_group. */
static const unsigned actckpt_drops[] = {
    0,                                                                       /* none */
    1u << TSR_AG_LN1 | 1u << TSR_AG_ATTN | 1u << TSR_AG_RES2 | 1u << TSR_AG_MLP, /* block */
    1u << TSR_AG_ATTN,                                                       /* attention */
    1u << TSR_AG_MLP,                                                        /* mlp */
};
_Static_assert(sizeof actckpt_drops / sizeof actckpt_drops[0] == TSR_ACTCKPT_COUNT,
               "actckpt_drops vs tsr_actckpt_kind");

int model_act_group_dropped(const tsr_model *m, tsr_act_group g) {
    return m->n_ckpt > 0 && (actckpt_drops[m->cfg.activation_checkpointing] >> g & 1u);
}
size_t model_act_group_layers(const tsr_model *m, tsr_act_group g) {
    return model_act_group_dropped(m, g) ? (size_t)(m->L - m->n_ckpt + 1) : (size_t)m->L;
}
int model_ckpt_layer(const tsr_model *m, int l) {
    return l >= m->ckpt_lo && l < m->ckpt_lo + m->n_ckpt;
}
size_t model_act_group_slot(const tsr_model *m, tsr_act_group g, int l) {
    if (!model_act_group_dropped(m, g)) return (size_t)l;
    if (model_ckpt_layer(m, l)) return 0;
    return (size_t)(l < m->ckpt_lo ? l + 1 : l - m->n_ckpt + 1);
}

/* Activation buffers: one allocation per tensor keeps the code obvious. Every pointer of tsr_acts
 * that model_free_acts frees, in one list. */
#define ACT_FLOAT_BUFS(a)                                                                         \
    {&(a)->encoded, &(a)->ln1, &(a)->ln1_mean, &(a)->ln1_rstd, &(a)->qkv, &(a)->atty, &(a)->att,  \
     &(a)->residual2, &(a)->ln2, &(a)->ln2_mean, &(a)->ln2_rstd, &(a)->fch, &(a)->fch_gelu,       \
     &(a)->residual3, &(a)->lnf, &(a)->lnf_mean, &(a)->lnf_rstd, &(a)->probs, &(a)->losses,       \
     &(a)->scratch, &(a)->dresidual, &(a)->dln, &(a)->datty, &(a)->dqkv, &(a)->dfch,              \
     &(a)->dfch_gelu, &(a)->dlosses}

int model_try_alloc_acts(tsr_model *m, int B, int T) {
    const tsr_ops *o = m->ops;
    tsr_acts *a = &m->acts;
    size_t L = m->L, C = m->C, F = m->F, NH = m->NH, N = (size_t)B * T, f = sizeof(float);
    size_t Ln1 = model_act_group_layers(m, TSR_AG_LN1);
    size_t Lat = model_act_group_layers(m, TSR_AG_ATTN);
    size_t Lr2 = model_act_group_layers(m, TSR_AG_RES2);
    size_t Lml = model_act_group_layers(m, TSR_AG_MLP);
    model_free_acts(m);
    /* floats per buffer, in the order of ACT_FLOAT_BUFS */
    size_t n[] = {N * C, Ln1 * N * C, Ln1 * N, Ln1 * N, Lat * N * 3 * C, Lat * N * C,
                  Lat * B * NH * (size_t)T * T, Lr2 * N * C, Lr2 * N * C, Lr2 * N, Lr2 * N,
                  Lml * N * F, Lml * N * F, L * N * C, N * C, N, N, N * (size_t)m->Vp, N,
                  N * C, N * C, N * C, N * C, N * 3 * C, N * F, N * F, N};
    float **bufs[] = ACT_FLOAT_BUFS(a);
    _Static_assert(sizeof n / sizeof n[0] == sizeof bufs / sizeof bufs[0], "n vs ACT_FLOAT_BUFS");
    a->B = B;
    a->T = T;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!(*bufs[i] = o->try_alloc(n[i] * f))) goto fail;
    if (m->cfg.attn_mask == TSR_MASK_DOCUMENT) {
        if (!(a->seq = o->try_alloc(N * sizeof(int32_t)))) goto fail;
        if (m->params_info[TSR_P_WPE].numel && !(a->pos = o->try_alloc(N * sizeof(int32_t))))
            goto fail;
    }
    return 0;
fail: /* what was allocated goes back: nothing half-made stays */
    model_free_acts(m);
    return -1;
}

void model_alloc_acts(tsr_model *m, int B, int T) {
    if (model_try_alloc_acts(m, B, T) != 0)
        tsr_die(TSR_EXIT_INTERNAL, "out of memory allocating the activations for a microbatch of "
                "%d x %d (%.1f MiB): use a smaller micro_batch (or micro_batch = \"auto\"), "
                "activation checkpointing or a smaller model", B, T,
                (double)model_acts_bytes(m, B, T) / (1024.0 * 1024.0));
}

void model_free_acts(tsr_model *m) {
    tsr_acts *a = &m->acts;
    float **bufs[] = ACT_FLOAT_BUFS(a);
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (*bufs[i]) m->ops->free(*bufs[i]);
        *bufs[i] = NULL;
    }
    int32_t **ibufs[] = {&a->seq, &a->pos};
    for (size_t i = 0; i < sizeof ibufs / sizeof ibufs[0]; i++) {
        if (*ibufs[i]) m->ops->free(*ibufs[i]);
        *ibufs[i] = NULL;
    }
    a->B = 0;
}

size_t model_acts_bytes(const tsr_model *m, int B, int T) {
    size_t L = m->L, C = m->C, F = m->F, NH = m->NH, N = (size_t)B * T;
    size_t Ln1 = model_act_group_layers(m, TSR_AG_LN1);
    size_t Lat = model_act_group_layers(m, TSR_AG_ATTN);
    size_t Lr2 = model_act_group_layers(m, TSR_AG_RES2);
    size_t Lml = model_act_group_layers(m, TSR_AG_MLP);
    size_t floats = N * C                                              /* encoded */
                    + Ln1 * N * (C + 2)                                /* ln1 + stats */
                    + Lat * (N * 3 * C + N * C                         /* qkv, atty */
                             + B * NH * (size_t)T * T)                 /* att */
                    + Lr2 * (N * C + N * (C + 2))                      /* residual2, ln2 + stats */
                    + Lml * N * F * 2                                  /* fch, fch_gelu */
                    + L * N * C                                        /* residual3 */
                    + N * (C + 2)                                      /* lnf */
                    + N * (size_t)m->Vp + N                            /* probs, losses */
                    + N * C * 4 + N * 3 * C + N * F * 2 + N; /* scratch and gradient scratch */
    size_t ints = 0;                                         /* segment ids and positions */
    if (m->cfg.attn_mask == TSR_MASK_DOCUMENT) ints = N * (m->params_info[TSR_P_WPE].numel ? 2 : 1);
    return floats * sizeof(float) + ints * sizeof(int32_t);
}

void model_free(tsr_model *m) {
    model_free_acts(m);
    float **bufs[] = {&m->params, &m->grads, &m->alibi_slopes};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (*bufs[i]) m->ops->free(*bufs[i]);
        *bufs[i] = NULL;
    }
}

double model_flops_per_token(const tsr_model *m, int T) {
    return 6.0 * (double)m->n_params_counted + 12.0 * m->L * (double)m->C * T;
}

/* One unit's parameter and gradient bases by tensor id (unit 0: the root tensors wte, wpe, lnfw,
 * lnfb; unit l+1: layer l's slices of the per-layer tensors), NULL where the unit has none. */
typedef struct unit_view {
    float *w[TSR_P_COUNT], *g[TSR_P_COUNT];
} unit_view;

/* Gets unit u's tensors: from the parameter source (sharded), else from params/grads. */
static void unit_get(const tsr_model *m, int u, int backward, unit_view *v) {
    memset(v, 0, sizeof *v);
    if (m->src) {
        m->src->get(m->src->ctx, u, backward, v->w, v->g);
        return;
    }
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const tsr_param_info *p = &m->params_info[i];
        if (!p->numel || model_param_per_layer((tsr_param_id)i) != (u > 0)) continue;
        size_t at = p->offset + (u > 0 ? (size_t)(u - 1) * (p->numel / (size_t)m->L) : 0);
        v->w[i] = m->params + at;
        if (m->grads) v->g[i] = m->grads + at;
    }
}

static void unit_put(const tsr_model *m, int u, int backward) {
    if (m->src) m->src->put(m->src->ctx, u, backward);
}

void model_segments(int32_t *seq, int32_t *pos, const int32_t *tokens, int eot, int B, int T) {
    for (int b = 0; b < B; b++) {
        int32_t s = 0, p = 0;
        for (size_t n = (size_t)b * T, end = n + (size_t)T; n < end; n++) {
            seq[n] = s;
            if (pos) pos[n] = p;
            if (tokens[n] == eot) s++, p = 0;
            else p++;
        }
    }
}

/* Layer l's activation buffers for a batch of B x T in buffers allocated for a->B rows. */
typedef struct layer_acts {
    float *x;                  /* (B,T,C) the layer's input: encoded or the previous residual3 */
    float *ln1, *ln1m, *ln1r;  /* (B,T,C), (B,T), (B,T) */
    float *qkv, *atty, *att;   /* (B,T,3C), (B,T,C), (B,NH,T,T) */
    float *res2, *ln2, *ln2m, *ln2r;
    float *fch, *fchg;         /* (B,T,F) */
    float *res3;               /* (B,T,C) */
} layer_acts;

static layer_acts layer_acts_at(const tsr_model *m, int l, int T) {
    const tsr_acts *a = &m->acts;
    size_t C = m->C, F = m->F, NH = m->NH;
    size_t sN = (size_t)a->B * T; /* per-layer stride of the allocated buffers */
    size_t s1 = model_act_group_slot(m, TSR_AG_LN1, l);
    size_t sa = model_act_group_slot(m, TSR_AG_ATTN, l);
    size_t s2 = model_act_group_slot(m, TSR_AG_RES2, l);
    size_t sm = model_act_group_slot(m, TSR_AG_MLP, l);
    layer_acts v = {
        .x = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * sN * C,
        .ln1 = a->ln1 + s1 * sN * C, .ln1m = a->ln1_mean + s1 * sN, .ln1r = a->ln1_rstd + s1 * sN,
        .qkv = a->qkv + sa * sN * 3 * C, .atty = a->atty + sa * sN * C,
        .att = a->att + sa * (size_t)a->B * NH * T * T,
        .res2 = a->residual2 + s2 * sN * C, .ln2 = a->ln2 + s2 * sN * C,
        .ln2m = a->ln2_mean + s2 * sN, .ln2r = a->ln2_rstd + s2 * sN,
        .fch = a->fch + sm * sN * F, .fchg = a->fch_gelu + sm * sN * F,
        .res3 = a->residual3 + (size_t)l * sN * C,
    };
    return v;
}

/* The steps of one block's forward, in order; the recomputation of a checkpointed layer reruns a
 * contiguous range of them (the same calls on the same inputs, hence the same bits). */
typedef enum {
    LS_LN1 = 0, /* ln1 = LN1(x) */
    LS_QKV,     /* qkv = ln1 @ qkvw^T + qkvb */
    LS_ATTN,    /* atty, att = attention(qkv) */
    LS_ATTPROJ, /* residual2 = x + atty @ attprojw^T + attprojb */
    LS_LN2,     /* ln2 = LN2(residual2) */
    LS_FC,      /* fch = ln2 @ fcw^T + fcb */
    LS_GELU,    /* fch_gelu = gelu(fch) */
    LS_FCPROJ,  /* residual3 = residual2 + fch_gelu @ fcprojw^T + fcprojb */
    LS_COUNT
} layer_step;

/* Runs steps [first, last] of layer l's forward on B x T. */
static void layer_forward(tsr_model *m, int l, const unit_view *u, int B, int T, layer_step first,
                          layer_step last) {
    const tsr_ops *o = m->ops;
    tsr_acts *a = &m->acts;
    size_t C = m->C, F = m->F, NH = m->NH, N = (size_t)B * T;
    float *const *w = u->w;
    layer_acts v = layer_acts_at(m, l, T);
    for (int s = first; s <= (int)last; s++) {
        switch ((layer_step)s) {
        case LS_LN1:
            o->layernorm_forward(v.ln1, v.ln1m, v.ln1r, v.x, w[TSR_P_LN1W], w[TSR_P_LN1B], (int)N, (int)C);
            break;
        case LS_QKV:
            o->matmul_forward(v.qkv, v.ln1, w[TSR_P_QKVW], w[TSR_P_QKVB], (int)N, (int)C, (int)(3 * C));
            break;
        case LS_ATTN:
            o->attention_forward(v.atty, v.att, v.qkv, m->alibi_slopes, a->seq, B, T, (int)C,
                                 (int)NH);
            break;
        case LS_ATTPROJ:
            o->matmul_forward(a->scratch, v.atty, w[TSR_P_ATTPROJW], w[TSR_P_ATTPROJB], (int)N, (int)C, (int)C);
            o->residual_forward(v.res2, v.x, a->scratch, N * C);
            break;
        case LS_LN2:
            o->layernorm_forward(v.ln2, v.ln2m, v.ln2r, v.res2, w[TSR_P_LN2W], w[TSR_P_LN2B], (int)N, (int)C);
            break;
        case LS_FC:
            o->matmul_forward(v.fch, v.ln2, w[TSR_P_FCW], w[TSR_P_FCB], (int)N, (int)C, (int)F);
            break;
        case LS_GELU:
            o->gelu_forward(v.fchg, v.fch, N * F, (tsr_gelu_kind)m->cfg.gelu);
            break;
        case LS_FCPROJ:
            o->matmul_forward(a->scratch, v.fchg, w[TSR_P_FCPROJW], w[TSR_P_FCPROJB], (int)N, (int)F, (int)C);
            o->residual_forward(v.res3, v.res2, a->scratch, N * C);
            break;
        case LS_COUNT:
            break;
        }
    }
}

/* The steps each mode reruns before a checkpointed layer's backward: from the first step that
 * writes a dropped group to the last one the backward reads (residual3 is kept, so LS_FCPROJ never
 * reruns). Indexed by tsr_actckpt_kind; none reruns nothing. */
static const struct { layer_step first, last; } actckpt_rerun[] = {
    {LS_COUNT, LS_COUNT}, /* none */
    {LS_LN1, LS_GELU},    /* block: everything from the kept input x */
    {LS_QKV, LS_ATTN},    /* attention: from the kept ln1 */
    {LS_FC, LS_GELU},     /* mlp: from the kept ln2 */
};
_Static_assert(sizeof actckpt_rerun / sizeof actckpt_rerun[0] == TSR_ACTCKPT_COUNT,
               "actckpt_rerun vs tsr_actckpt_kind");

void model_token_scores(tsr_model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                        float *losses, int32_t *greedy) {
    if (m->scores) {
        m->scores(m->fwd_ctx, tokens, targets, B, T, losses, greedy);
        return;
    }
    model_forward(m, tokens, targets, B, T);
    for (size_t i = 0; i < (size_t)B * T; i++) {
        losses[i] = 0.0f, greedy[i] = -1;
        if (targets[i] < 0) continue;
        losses[i] = m->acts.losses[i];
        const float *p = m->acts.probs + i * (size_t)m->Vp;
        int best = 0;
        for (int v = 1; v < m->V; v++)
            if (p[v] > p[best]) best = v;
        greedy[i] = best;
    }
}

double model_forward(tsr_model *m, const int32_t *tokens, const int32_t *targets, int B, int T) {
    if (m->fwd) return m->fwd(m->fwd_ctx, tokens, targets, B, T);
    const tsr_ops *o = m->ops;
    tsr_acts *a = &m->acts;
    if (B > a->B || T != a->T)
        tsr_die(TSR_EXIT_INTERNAL, "model_forward: batch %dx%d exceeds the allocated %dx%d", B, T,
                a->B, a->T);
    size_t C = m->C, N = (size_t)B * T;
    size_t sN = (size_t)a->B * T; /* per-layer stride of the allocated buffers */
    if (a->seq) model_segments(a->seq, a->pos, tokens, m->cfg.eot_token, B, T);
    unit_view root, lu;
    unit_get(m, 0, 0, &root);
    o->encoder_forward(a->encoded, tokens, root.w[TSR_P_WTE], root.w[TSR_P_WPE], a->pos, B, T, (int)C);
    /* a checkpointed layer writes what it does not keep to slot 0, which the next one overwrites */
    for (int l = 0; l < m->L; l++) {
        unit_get(m, l + 1, 0, &lu);
        layer_forward(m, l, &lu, B, T, LS_LN1, LS_FCPROJ);
        unit_put(m, l + 1, 0);
    }
    float *last = a->residual3 + (m->L - 1) * sN * C;
    o->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, root.w[TSR_P_LNFW],
                         root.w[TSR_P_LNFB], (int)N, (int)C);
    o->matmul_forward(a->probs, a->lnf, root.w[TSR_P_WTE], NULL, (int)N, (int)C, m->Vp);
    unit_put(m, 0, 0);
    o->softmax_xent_forward(a->losses, a->probs, a->probs, targets, (int)N, m->V, m->Vp);
    double sum = 0.0;
    for (size_t i = 0; i < N; i++)
        if (targets[i] >= 0) sum += a->losses[i];
    return sum;
}

void model_backward(tsr_model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                    float loss_scale) {
    const tsr_ops *o = m->ops;
    tsr_acts *a = &m->acts;
    size_t C = m->C, F = m->F, NH = m->NH, N = (size_t)B * T, sN = (size_t)a->B * T;
    size_t f = sizeof(float);
    for (size_t i = 0; i < N; i++) a->dlosses[i] = targets[i] >= 0 ? loss_scale : 0.0f;
    /* dlogits overwrite probs in place */
    o->softmax_xent_backward(a->probs, a->dlosses, a->probs, targets, (int)N, m->V, m->Vp);
    unit_view root, lu;
    unit_get(m, 0, 1, &root);
    o->zero(a->dln, N * C * f);
    o->matmul_backward(a->dln, root.g[TSR_P_WTE], NULL, a->probs, a->lnf, root.w[TSR_P_WTE],
                       (int)N, (int)C, m->Vp);
    o->zero(a->dresidual, N * C * f);
    float *last = a->residual3 + (m->L - 1) * sN * C;
    o->layernorm_backward(a->dresidual, root.g[TSR_P_LNFW], root.g[TSR_P_LNFB], a->dln, last,
                          root.w[TSR_P_LNFW], a->lnf_mean, a->lnf_rstd, (int)N, (int)C);
    for (int l = m->L - 1; l >= 0; l--) {
        unit_get(m, l + 1, 1, &lu);
        if (model_ckpt_layer(m, l)) {
            /* recompute what the layer did not keep into slot 0 (a->scratch is free here) */
            tsr_actckpt_kind k = m->cfg.activation_checkpointing;
            layer_forward(m, l, &lu, B, T, actckpt_rerun[k].first, actckpt_rerun[k].last);
        }
        float *const *w = lu.w, *const *g = lu.g;
        layer_acts v = layer_acts_at(m, l, T);
        /* MLP branch: dresidual is d(residual3) = d(fcproj output), and flows on to residual2 */
        o->zero(a->dfch_gelu, N * F * f);
        o->matmul_backward(a->dfch_gelu, g[TSR_P_FCPROJW], g[TSR_P_FCPROJB], a->dresidual, v.fchg, w[TSR_P_FCPROJW],
                           (int)N, (int)F, (int)C);
        o->zero(a->dfch, N * F * f);
        o->gelu_backward(a->dfch, v.fch, a->dfch_gelu, N * F, (tsr_gelu_kind)m->cfg.gelu);
        o->zero(a->dln, N * C * f);
        o->matmul_backward(a->dln, g[TSR_P_FCW], g[TSR_P_FCB], a->dfch, v.ln2, w[TSR_P_FCW], (int)N, (int)C, (int)F);
        o->layernorm_backward(a->dresidual, g[TSR_P_LN2W], g[TSR_P_LN2B], a->dln, v.res2, w[TSR_P_LN2W], v.ln2m, v.ln2r,
                              (int)N, (int)C);
        /* attention branch: dresidual is now d(residual2) = d(attproj output) */
        o->zero(a->datty, N * C * f);
        o->matmul_backward(a->datty, g[TSR_P_ATTPROJW], g[TSR_P_ATTPROJB], a->dresidual, v.atty, w[TSR_P_ATTPROJW],
                           (int)N, (int)C, (int)C);
        o->zero(a->dqkv, N * 3 * C * f);
        o->attention_backward(a->dqkv, a->datty, v.qkv, v.att, a->seq, B, T, (int)C, (int)NH);
        o->zero(a->dln, N * C * f);
        o->matmul_backward(a->dln, g[TSR_P_QKVW], g[TSR_P_QKVB], a->dqkv, v.ln1, w[TSR_P_QKVW], (int)N, (int)C,
                           (int)(3 * C));
        o->layernorm_backward(a->dresidual, g[TSR_P_LN1W], g[TSR_P_LN1B], a->dln, v.x, w[TSR_P_LN1W], v.ln1m, v.ln1r,
                              (int)N, (int)C);
        unit_put(m, l + 1, 1);
    }
    o->encoder_backward(root.g[TSR_P_WTE], root.g[TSR_P_WPE], a->dresidual, tokens, a->pos, B, T,
                        (int)C);
    unit_put(m, 0, 1);
}
