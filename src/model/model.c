/* model.c — parameter layout, initialisation, forward and backward of the decoder. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/layer_kind.h"
#include "model/model_pp.h"
#include "model/model_tp.h"

void model_param_shape(tsr_model *m, tsr_param_id id, int present, int ndim, int64_t d0,
                       int64_t d1, int64_t d2, int64_t d3) {
    tsr_param_info *p = &m->params_info[id];
    const tsr_param_row *row = model_param_row(m, id);
    p->name = row->name;
    p->kind = row->kind;
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = d1;
    p->shape[2] = d2;
    p->shape[3] = d3;
    p->numel = 0;
    if (present) {
        p->numel = (size_t)d0;
        if (ndim > 1) p->numel *= (size_t)d1;
        if (ndim > 2) p->numel *= (size_t)d2;
        if (ndim > 3) p->numel *= (size_t)d3;
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

static const double rope_pi = 3.14159265358979323846;

/* YaRN's dimension (of dim) at which a frequency turns `rotations` times over the original
 * context (Hugging Face's find_correction_dim) */
static double yarn_dim(double rotations, int dim, double theta, int orig) {
    return dim * log(orig / (rotations * 2.0 * rope_pi)) / (2.0 * log(theta));
}

/* YaRN's frequencies (Hugging Face's _compute_yarn_parameters), rot/2 of them: each the blend
 * of the frequency (extrapolation) and the frequency / factor (interpolation) by a linear ramp
 * over the dimensions from beta_fast's dimension to beta_slow's */
static void yarn_freqs(float *inv_freq, const tsr_model_config *c, int rot) {
    double lo = yarn_dim(c->rope_beta_fast, rot, c->rope_theta, c->rope_original_max_pos);
    double hi = yarn_dim(c->rope_beta_slow, rot, c->rope_theta, c->rope_original_max_pos);
    if (c->rope_truncate) lo = floor(lo), hi = ceil(hi);
    lo = lo > 0 ? lo : 0, hi = hi < rot - 1 ? hi : rot - 1;
    if (lo == hi) hi += 0.001; /* Hugging Face's guard against a zero-width ramp */
    for (int i = 0; i < rot / 2; i++) {
        const double f = pow(c->rope_theta, -2.0 * i / rot), ramp = (i - lo) / (hi - lo);
        const double extra = 1.0 - (ramp < 0 ? 0 : ramp > 1 ? 1 : ramp);
        inv_freq[i] = (float)(f / c->rope_factor * (1.0 - extra) + f * extra);
    }
}

int model_rope_dims(const tsr_model_config *cfg, int hs) {
    return (int)(cfg->partial_rotary_factor * hs + 0.5);
}

/* YaRN's m(s) = 0.1 s ln(factor) + 1 (Hugging Face's get_mscale) */
static double yarn_mscale(const tsr_model_config *cfg, double s) {
    return 0.1 * s * log(cfg->rope_factor) + 1.0;
}

double model_rope_mscale(const tsr_model_config *cfg) {
    if (cfg->rope_scaling != TSR_ROPE_SCALING_YARN || cfg->rope_factor <= 1.0) return 1.0;
    if (cfg->rope_mscale > 0 && cfg->rope_mscale_all_dim > 0) /* DeepSeek's: often 1 */
        return yarn_mscale(cfg, cfg->rope_mscale) / yarn_mscale(cfg, cfg->rope_mscale_all_dim);
    return yarn_mscale(cfg, 1.0);
}

double model_mla_scale(const tsr_model *m) {
    const tsr_model_config *c = &m->cfg;
    double s = 1.0 / sqrt((double)(m->dn + m->dr));
    if (c->rope_scaling == TSR_ROPE_SCALING_YARN && c->rope_factor > 1.0 &&
        c->rope_mscale_all_dim > 0) {
        const double k = yarn_mscale(c, c->rope_mscale_all_dim);
        s *= k * k;
    }
    return s;
}

int model_rope_head(const tsr_model *m) { return m->LX ? m->dr : m->hs; }

void model_rope_freqs(float *inv_freq, const tsr_model_config *cfg, int hs) {
    const double pi = rope_pi;
    const double low_wl = cfg->rope_original_max_pos / cfg->rope_low_freq_factor;
    const double high_wl = cfg->rope_original_max_pos / cfg->rope_high_freq_factor;
    const int rot = model_rope_dims(cfg, hs);
    for (int i = rot / 2; i < hs / 2; i++) inv_freq[i] = 0.0f;
    if (cfg->rope_scaling == TSR_ROPE_SCALING_YARN) {
        yarn_freqs(inv_freq, cfg, rot);
        return;
    }
    for (int i = 0; i < rot / 2; i++) {
        double f = pow(cfg->rope_theta, -2.0 * i / rot);
        if (cfg->rope_scaling == TSR_ROPE_SCALING_LINEAR) f /= cfg->rope_factor;
        if (cfg->rope_scaling == TSR_ROPE_SCALING_LLAMA3) {
            double wl = 2.0 * pi / f;
            if (wl > low_wl) {
                f /= cfg->rope_factor;
            } else if (wl >= high_wl) {
                double s = (cfg->rope_original_max_pos / wl - cfg->rope_low_freq_factor) /
                           (cfg->rope_high_freq_factor - cfg->rope_low_freq_factor);
                f = (1.0 - s) * f / cfg->rope_factor + s * f;
            }
        }
        inv_freq[i] = (float)f;
    }
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
    tsr_model_dims d;
    if (config_model_dims(cfg, &d, &key, why, n) != 0) return -1;
    return 0;
}

/* The flat layout: offsets in id order, each tensor 16-float aligned (64 bytes, for vector loads);
 * the tensors of the expert store (ep) take no room. */
static void model_layout_flat(tsr_model *m) {
    size_t off = 0;
    for (int i = 0; i < TSR_P_COUNT; i++) {
        tsr_param_info *p = &m->params_info[i];
        p->offset = p->ep ? SIZE_MAX : off;
        if (!p->ep) off += (p->numel + 15) / 16 * 16;
    }
    m->n_params = off;
}

/* ---- the frame's tensors (layer_kind.h): the root's and the block's norms ---- */

static const tsr_param_row root_params[] = {
    {TSR_P_WTE, "wte", TSR_PK_EMBEDDING, TSR_INIT_NORMAL, 0, TSR_SPLIT_VOCAB, 0, 1, 0},
    {TSR_P_WPE, "wpe", TSR_PK_EMBEDDING, TSR_INIT_NORMAL, 1, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_LNFW, "lnfw", TSR_PK_NORM, TSR_INIT_ONE, 14, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_LNFB, "lnfb", TSR_PK_NORM, TSR_INIT_ZERO, 15, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_LMHEAD, "lm_head", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 18, TSR_SPLIT_VOCAB, 0, 1, 0},
};
static const tsr_param_row block_params[] = {
    {TSR_P_LN1W, "ln1w", TSR_PK_NORM, TSR_INIT_ONE, 2, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_LN1B, "ln1b", TSR_PK_NORM, TSR_INIT_ZERO, 3, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_POSTATTNW, "postattnw", TSR_PK_NORM, TSR_INIT_ONE, 25, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_POSTMLPW, "postmlpw", TSR_PK_NORM, TSR_INIT_ONE, 26, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_LN2W, "ln2w", TSR_PK_NORM, TSR_INIT_ONE, 8, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_LN2B, "ln2b", TSR_PK_NORM, TSR_INIT_ZERO, 9, TSR_SPLIT_REPLICATED, -1, 1, 0},
};
static const char *const root_keys[] = {
    "model.d_model", "model.vocab_size", "model.vocab_multiple", "model.pos", "model.max_seq_len",
    "model.norm", "model.norm_eps", "model.bias", "model.tie_embeddings", "model.embed_scale",
    "model.final_logit_softcapping", NULL};
static const char *const block_keys[] = {"model.n_layer", "model.norm_placement", NULL};

/* wte (Vp, C); wpe (maxT, C) with learned positions; the final norm (C); the untied head */
static void root_layout(tsr_model *m) {
    const tsr_model_config *c = &m->cfg;
    const int nbias = c->bias && c->norm == TSR_NORM_LAYERNORM;
    /* (a pipeline stage's part: the embedding on the first, the final norm and the head on the
     * last, a tied head's wte there too) */
    const int embed = !c->part.no_embed, head = !c->part.no_head;
    model_param_shape(m, TSR_P_WTE, embed || (head && c->tie_embeddings), 2, m->Vp, m->C, 0, 0);
    model_param_shape(m, TSR_P_WPE, embed && c->pos == TSR_POS_LEARNED, 2, m->maxT, m->C, 0, 0);
    model_param_shape(m, TSR_P_LNFW, head, 1, m->C, 0, 0, 0);
    model_param_shape(m, TSR_P_LNFB, head && nbias, 1, m->C, 0, 0, 0);
    model_param_shape(m, TSR_P_LMHEAD, head && !c->tie_embeddings, 2, m->Vp, m->C, 0, 0);
}

/* (L, C) each: the norms before the branches (pre, sandwich), after them (sandwich, post) */
static void block_layout(tsr_model *m) {
    const tsr_model_config *c = &m->cfg;
    const int after = c->norm_placement != TSR_NPLACE_PRE;
    const int before = c->norm_placement != TSR_NPLACE_POST;
    const int nbias = c->bias && c->norm == TSR_NORM_LAYERNORM;
    const int64_t L = m->L, C = m->C;
    model_param_shape(m, TSR_P_LN1W, before, 2, L, C, 0, 0);
    model_param_shape(m, TSR_P_LN1B, nbias, 2, L, C, 0, 0);
    model_param_shape(m, TSR_P_POSTATTNW, after, 2, L, C, 0, 0);
    model_param_shape(m, TSR_P_POSTMLPW, after, 2, L, C, 0, 0);
    model_param_shape(m, TSR_P_LN2W, before, 2, L, C, 0, 0);
    model_param_shape(m, TSR_P_LN2B, nbias, 2, L, C, 0, 0);
}

const tsr_layer_kind kind_root = {.name = "root", .half = TSR_HALF_ROOT, .params = root_params,
                                  .n_params = 5, .keys = root_keys, .layout = root_layout};
const tsr_layer_kind kind_block = {.name = "block", .half = TSR_HALF_BLOCK,
                                   .params = block_params, .n_params = 6, .keys = block_keys,
                                   .layout = block_layout};
_Static_assert(sizeof root_params / sizeof *root_params == 5, "root_params");
_Static_assert(sizeof block_params / sizeof *block_params == 6, "block_params");

/* the sizes every kind's layout reads: heads, widths, the layers of each kind */
static void model_dims(tsr_model *m, const tsr_model_config *cfg, int seq_len) {
    char why[400];
    const char *key;
    tsr_model_dims dims;
    config_model_dims(cfg, &dims, &key, why, sizeof why); /* checked by model_init */
    m->L = cfg->n_layer;
    m->C = cfg->d_model;
    m->NH = dims.NH;
    m->KVH = dims.KVH;
    m->hs = dims.hs;
    m->QD = m->NH * m->hs;
    m->QKV = (m->NH + 2 * m->KVH) * m->hs;
    m->F = dims.F;
    m->FW = config_mlp_gated(cfg) ? 2 * m->F : m->F;
    m->E = dims.E, m->K = dims.K, m->FE = dims.FE, m->S = dims.S;
    m->LM = dims.LM;
    m->LD = cfg->n_layer - dims.LM;
    m->LL = config_linear_layers(cfg);
    m->LX = cfg->kv_lora_rank > 0 ? m->L - m->LL : 0; /* MLA: every layer but the linear ones */
    m->LA = m->L - m->LL - m->LX;
    if (m->LX) {
        m->qr = cfg->q_lora_rank, m->kvr = cfg->kv_lora_rank;
        m->dn = cfg->qk_nope_head_dim, m->dr = cfg->qk_rope_head_dim, m->dv = cfg->v_head_dim;
    }
    m->HKl = cfg->linear_num_key_heads, m->HVl = cfg->linear_num_value_heads;
    m->dkl = cfg->linear_key_head_dim, m->dvl = cfg->linear_value_head_dim;
    m->Kc = cfg->linear_conv_kernel_dim;
    m->V = cfg->vocab_size;
    int mult = cfg->vocab_multiple > 0 ? cfg->vocab_multiple : 1;
    m->Vp = (m->V + mult - 1) / mult * mult;
    m->maxT = cfg->max_seq_len > 0 ? cfg->max_seq_len : seq_len;
}

/* every tensor's kind in this model, its stack's depth, and its shape by its kind's layout */
static void model_layout(tsr_model *m) {
    for (int i = 0; i < TSR_P_COUNT; i++) {
        m->kind_of[i] = layer_kind_of(&m->cfg, (tsr_param_id)i);
        if (!m->kind_of[i])
            tsr_die(TSR_EXIT_INTERNAL, "model: tensor id %d is in no layer kind's row", i);
        m->depth[i] = model_kind_layers(m, m->kind_of[i]);
    }
    for (const tsr_layer_kind *const *k = tsr_layer_kinds; *k; k++)
        if (model_kind_on(m, *k)) (*k)->layout(m);
}

void model_init(tsr_model *m, const tsr_model_config *cfg, int seq_len, const tsr_ops *ops) {
    char why[400];
    const char *ck_key;
    if (model_config_check(cfg, why, sizeof why)) tsr_die(TSR_EXIT_USAGE, "%s", why);
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->ops = ops;
    m->be = tsr_fp32_backend(ops);
    m->be.logit_softcap = (float)cfg->final_logit_softcapping;
    if (cfg->final_logit_softcapping > 0) /* the capped logits softmax_xent keeps (model_free) */
        m->be.capped = tsr_calloc(1, sizeof *m->be.capped);
    m->cpN = 1;
    model_dims(m, cfg, seq_len);
    config_actckpt_layers(cfg, &m->ckpt_lo, &m->n_ckpt, &ck_key, why, sizeof why); /* checked */
    model_layout(m);
    m->EP = 1;
    model_layout_flat(m);
    m->n_params_counted = 0;
    for (int i = 0; i < TSR_P_COUNT; i++) m->n_params_counted += m->params_info[i].numel;
    m->n_params_counted -=
        (size_t)(m->Vp - m->V) * (size_t)m->C * (cfg->tie_embeddings ? 1 : 2);
}

void model_set_expert_parallel(tsr_model *m, int EP) {
    if (EP <= 1 || m->E == 0) return;
    m->EP = EP;
    m->params_info[TSR_P_EXPW1].ep = m->params_info[TSR_P_EXPW2].ep = 1;
    model_layout_flat(m);
}

void model_set_context(tsr_model *m, int N) { m->cpN = N > 1 ? N : 1; }

void model_relayout(tsr_model *m) {
    model_layout(m);
    model_layout_flat(m);
}

void model_alloc_params(tsr_model *m) {
    model_alloc_frozen(m);
    m->grads = m->ops->alloc(m->n_params * sizeof(float));
}

void model_alloc_frozen(tsr_model *m) {
    m->params = m->ops->alloc(m->n_params * sizeof(float));
    model_alloc_slopes(m);
}

int model_param_per_layer(tsr_param_id id) {
    const tsr_layer_kind *k;
    return layer_param_row(id, &k) && k->half != TSR_HALF_ROOT;
}

int model_fp8_linear(tsr_param_id id) {
    const tsr_layer_kind *k;
    const tsr_param_row *row = layer_param_row(id, &k);
    return row && row->fp8;
}

void model_fp8_layers(int L, tsr_fp8_skip skip, int *first, int *last) {
    *first = skip == TSR_FP8_SKIP_FIRST || skip == TSR_FP8_SKIP_FIRST_LAST;
    *last = L - 1 - (skip == TSR_FP8_SKIP_LAST || skip == TSR_FP8_SKIP_FIRST_LAST);
}

int model_moe_layer(const tsr_model *m, int l) {
    return m->E > 0 && config_moe_layer(&m->cfg, l);
}

int model_param_layers(const tsr_model *m, tsr_param_id id) { return m->depth[id]; }

/* model_unit_slice of mtp_layer_w and mtp_layer_n (a unit of its own a depth, after the layers':
 * sharded and gathered as a decoder layer is, fsdp.h) and of the units past L: depth
 * u - L - 1's row of each (mtp.c) */
static size_t mtp_unit_slice(const tsr_model *m, tsr_param_id id, int u, size_t *len) {
    const int d = u - m->L - 1;
    const tsr_param_info *q = &m->params_info[id];
    if ((id != TSR_P_MTPW && id != TSR_P_MTPN) || !q->numel || d < 0 || d >= m->D) return SIZE_MAX;
    *len = q->numel / (size_t)m->D;
    return q->offset + (size_t)d * *len;
}

size_t model_unit_slice(const tsr_model *m, tsr_param_id id, int u, size_t *len) {
    const tsr_param_info *p = &m->params_info[id];
    *len = 0;
    if (u > m->L || id == TSR_P_MTPW || id == TSR_P_MTPN) return mtp_unit_slice(m, id, u, len);
    if (!p->numel || p->ep || model_param_per_layer(id) != (u > 0)) return SIZE_MAX;
    if (u == 0) {
        *len = p->numel;
        return p->offset;
    }
    const int slot = model_layer_slot(m, id, u - 1);
    if (slot < 0) return SIZE_MAX;
    *len = p->numel / (size_t)model_param_layers(m, id);
    return p->offset + (size_t)slot * *len;
}

int model_layer_slot(const tsr_model *m, tsr_param_id id, int l) {
    if (!m->params_info[id].numel || !model_param_per_layer(id) || l < 0 || l >= m->L) return -1;
    const tsr_layer_kind *k = m->kind_of[id];
    if (!model_layer_is(m, k, l)) return -1;
    int before = 0; /* the layers of its kind before l */
    for (int j = 0; j < l && k->half != TSR_HALF_BLOCK; j++) before += model_layer_is(m, k, j);
    return k->half == TSR_HALF_BLOCK ? l : before;
}

void model_alloc_slopes(tsr_model *m) {
    if (m->cfg.pos == TSR_POS_ALIBI && !m->alibi_slopes) {
        m->alibi_slopes = m->ops->alloc((size_t)m->NH * sizeof(float));
        if (m->tp) { /* a split model: its NH heads' of the whole model's */
            float *all = tsr_malloc((size_t)m->global->NH * sizeof *all);
            model_alibi_slopes(all, m->global->NH);
            memcpy(m->alibi_slopes, all + (size_t)m->tp->t * m->NH, (size_t)m->NH * sizeof *all);
            free(all);
        } else {
            model_alibi_slopes(m->alibi_slopes, m->NH);
        }
    }
    if (m->cfg.pos == TSR_POS_ROPE && !m->rope_freqs) {
        const int rh = model_rope_head(m);
        m->rope_freqs = m->ops->alloc((size_t)rh * sizeof(float));
        model_rope_tables(m->rope_freqs, &m->cfg, rh);
    }
}

void model_rope_tables(float *t, const tsr_model_config *cfg, int hs) {
    const int half = hs / 2;
    model_rope_freqs(t, cfg, hs);
    memcpy(t + half, t, (size_t)half * sizeof(float));
    if (cfg->rope_local_theta > 0) { /* the sliding layers' table: own base, unscaled */
        tsr_model_config local = *cfg;
        local.rope_theta = cfg->rope_local_theta;
        local.rope_scaling = TSR_ROPE_SCALING_NONE;
        model_rope_freqs(t + half, &local, hs);
    }
}

/* whether layer l reads the sliding layers' RoPE table (model.rope_local_theta) */
static int rope_local(const tsr_model *m, int l) {
    return m->cfg.rope_local_theta > 0 && config_layer_window(&m->cfg, l) > 0;
}

void model_rope_apply(const tsr_model *m, const tsr_backend *be, const float *tables, int l,
                      void *qkv, const int32_t *pos, int p0, int B, int T, int backward) {
    if (!config_layer_rope(&m->cfg, l)) return; /* a NoPE layer (model.no_rope_layers) */
    const int local = rope_local(m, l), rot = model_rope_dims(&m->cfg, m->hs);
    const float *f = tables + (local ? m->hs / 2 : 0);
    const float ms = local ? 1.0f : (float)model_rope_mscale(&m->cfg);
    if (rot == m->hs && ms == 1.0f) {
        (backward ? be->rope_backward : be->rope_forward)(be, qkv, pos, p0, f, B, T, m->NH,
                                                          m->KVH, m->hs);
        return;
    }
    if (!be->rope_part_forward)
        tsr_die(TSR_EXIT_INTERNAL, "model: the backend has no partial or scaled RoPE "
                "(model.partial_rotary_factor, rope_scaling = yarn)");
    (backward ? be->rope_part_backward : be->rope_part_forward)(be, qkv, pos, p0, f, B, T, m->NH,
                                                                m->KVH, m->hs, rot, ms);
}

void model_init_weights(tsr_model *m, uint64_t seed) {
    model_init_weights_range(m, seed, 0, m->n_params, m->params);
}

/* global element k of tensor id of the whole model g: model_init_weights' value (zeros and ones
 * by rule, the padded vocabulary rows zero) */
static float split_init_value(const tsr_model *g, tsr_param_id id, uint64_t seed, size_t k) {
    const tsr_param_row *row = model_param_row(g, id);
    if (row->init == TSR_INIT_ZERO) return 0.0f;
    if (row->init == TSR_INIT_ONE) return 1.0f;
    if (row->split == TSR_SPLIT_VOCAB && k >= (size_t)g->V * (size_t)g->C) return 0.0f;
    return model_init_weight(g, id, seed, k);
}

/* model_init_weights_range of a split model (tensor parallelism, model_tp.h) or a pipeline
 * rank's part (model_pp.h), held as runs of the whole model: each element of each run the value
 * of the whole model's element it holds */
static void split_init_range(const tsr_model *m, const tp_run *runs, size_t n_runs, uint64_t seed,
                             size_t lo, size_t hi, float *dst) {
    memset(dst, 0, (hi - lo) * sizeof(float));
    for (size_t i = 0; i < n_runs; i++) {
        const tp_run *r = &runs[i];
        const size_t base = m->params_info[r->id].offset;
        for (size_t k = 0; k < r->count; k++) {
            const size_t a = base + r->local + k * r->lstride, b = a + r->len;
            const size_t x = a > lo ? a : lo, y = b < hi ? b : hi;
            const size_t g0 = r->global + k * r->gstride + (x - a);
            if (x >= y) continue;
#pragma omp parallel for schedule(static) if (y - x >= (1u << 16))
            for (size_t j = x; j < y; j++)
                dst[j - lo] = split_init_value(m->global, (tsr_param_id)r->id, seed, g0 + (j - x));
        }
    }
}

void model_init_weights_range(const tsr_model *m, uint64_t seed, size_t lo, size_t hi,
                              float *dst) {
    if (m->tp || m->pp) { /* a split model, a part: each element its global element's value */
        split_init_range(m, m->tp ? m->tp->runs : m->pp->runs,
                         m->tp ? m->tp->n_runs : m->pp->n_runs, seed, lo, hi, dst);
        return;
    }
    memset(dst, 0, (hi - lo) * sizeof(float));
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const tsr_param_info *p = &m->params_info[i];
        const tsr_param_row *row = model_param_row(m, (tsr_param_id)i);
        /* zeros: the memset's (and the expert store initialises its own) */
        if (!p->numel || p->ep || row->init == TSR_INIT_ZERO) continue;
        size_t n = p->numel;
        if (row->split == TSR_SPLIT_VOCAB)
            n = (size_t)m->V * (size_t)m->C; /* padded rows stay zero */
        /* the tensor's elements [k0, k1) that fall in [lo, hi); element k at w[k - k0] */
        if (hi <= p->offset || lo >= p->offset + n) continue;
        const size_t k0 = lo > p->offset ? lo - p->offset : 0;
        const size_t k1 = hi - p->offset < n ? hi - p->offset : n;
        float *w = dst + (p->offset + k0 - lo);
        if (row->init == TSR_INIT_ONE) {
            for (size_t k = k0; k < k1; k++) w[k - k0] = 1.0f;
            continue;
        }
        /* element k's value depends on (seed, stream, k) alone (a counter-based generator), so
         * the threads give the same bits as one, and a range the same bits as the whole: 124M
         * weights took 5 s on one core of this machine, a 1B model's most of a minute, at the
         * start of every run */
#pragma omp parallel for schedule(static) if (k1 - k0 >= (1u << 16))
        for (size_t k = k0; k < k1; k++)
            w[k - k0] = model_init_weight(m, (tsr_param_id)i, seed, k);
    }
}

float model_init_weight(const tsr_model *m, tsr_param_id id, uint64_t seed, size_t k) {
    const tsr_param_row *row = model_param_row(m, id);
    double std = m->cfg.init_std;
    if (row->init == TSR_INIT_OWN) return m->kind_of[id]->init(m, id, seed, k);
    if (row->init == TSR_INIT_RESIDUAL) std /= sqrt(2.0 * m->L); /* the residual projections */
    return (float)(std * tsr_rand_normal(seed, row->stream, k));
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

double model_active_params(const tsr_model *m) {
    if (m->global) m = m->global; /* (a split model: the whole one's) */
    /* MoE: a token passes through K of the E experts; the others' weights do no work for it
     * (each layer's MLP row says how many: its idle slot) */
    double idle = 0.0;
    for (int l = 0; l < m->L + m->D; l++) { /* (multi-token prediction's layers: L + k - 1) */
        const tsr_layer_kind *k = model_mlp(&m->cfg, l);
        if (k->idle) idle += k->idle(m);
    }
    return (double)m->n_params_counted - idle;
}

double model_flops_per_token(const tsr_model *m, int T) {
    if (m->global) m = m->global; /* (a split model: the whole one's) */
    /* an untied model's input embedding is a lookup, not a matmul: only the head's V x C count */
    double lookup = m->cfg.tie_embeddings ? 0.0 : (double)m->V * m->C, own = 0.0;
    /* beyond the parameters': each layer's mixer's products (attention's 12 (NH hs) keys, a
     * linear layer's state) and its MLP's (none so far; docs/mfu.md), the MTP modules' layers
     * too */
    for (int l = 0; l < m->L + m->D; l++) {
        const tsr_layer_kind *mix = model_mixer(&m->cfg, l), *mlp = model_mlp(&m->cfg, l);
        if (mix->flops) own += mix->flops(m, l, T);
        if (mlp->flops) own += mlp->flops(m, l, T);
    }
    /* each multi-token prediction depth runs the shared head once more (docs/models.md) */
    own += 6.0 * (double)m->D * (double)m->V * (double)m->C;
    return 6.0 * (model_active_params(m) - lookup) + own;
}

void model_segments(int32_t *seq, int32_t *pos, const int32_t *tokens, int eot,
                    const uint8_t *starts, int B, int T) {
    for (int b = 0; b < B; b++) {
        int32_t s = 0, p = 0;
        for (size_t n = (size_t)b * T, end = n + (size_t)T; n < end; n++) {
            if (n > (size_t)b * T && (starts ? starts[n] : tokens[n - 1] == eot)) s++, p = 0;
            seq[n] = s;
            if (pos) pos[n] = p++;
        }
    }
}
