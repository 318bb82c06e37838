/* mtp.c — multi-token prediction (mtp.h; docs/models.md "Multi-token prediction"): the modules'
 * tensors as a frame row (layer_kind.h), each module's decoder layer a one-layer model of the
 * config (the whole model's layer L + k - 1, a pipeline part without the embedding) run by the
 * decoder over the modules' tensors in the model's flat buffer, and the modules' frame (the input
 * norms, the concatenation, eh_proj) around it, on the backend of the model's decoder (the fp32
 * one, or device = "cuda"'s: src/gpu/gpu_mtp.c).
 */
#include "model/mtp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/decoder.h"
#include "model/layer_kind.h"
#include "model/model_ring.h"

/* One depth's module: its one-layer model (its activations and RoPE tables; its tensors are the
 * model's), where its layer's tensors lie in the packed blocks, and the frame's buffers. */
typedef struct mtp_depth {
    tsr_model sub;           /* (its layout and configuration; its activations are a's) */
    tsr_backend be;          /* the pass's backend, with the one-layer model's own soft-capped
                              * logits (the fp32 backend's: the model's stay its backward's) */
    tsr_acts a;              /* its activations on be */
    size_t off[TSR_P_COUNT]; /* a layer tensor's offset in its block (mtp_w or mtp_n), SIZE_MAX */
    int w[TSR_P_COUNT];      /* 1: in mtp_w (a weight), 0: in mtp_n */
    tsr_model *main;         /* the model whose units hold the tensors (set by each pass) */
    int d;
    int32_t *tok, *tg;       /* (B,T) t_{i+k}, t_{i+k+1} (-1: not counted), host */
    int32_t *tokl;           /* tok at this rank's positions (context parallelism's share), host */
    int32_t *tokd;           /* tokl on the backend (tokl itself on a host backend) */
    tsr_ring ring;           /* context parallelism: the module's ring over the model's group
                              * (its own staged rows: the model's stay the main pass's) */
    void *e, *en, *hn, *cat, *x, *dh; /* (N,C) act on the backend .. cat (N,2C); dh: d(h_{k-1}) */
    float *enr, *hnr;        /* (N) the norms' rstd, fp32 on the backend */
} mtp_depth;

typedef struct tsr_mtp {
    int D, B, T;
    size_t PW, PN;           /* floats of a depth in mtp_w, mtp_n */
    mtp_depth *dep;
    void *dcat, *dpart;      /* (N,2C), (N,C) act: the frame's backward scratch */
    int32_t *seq;            /* (B,T) host: the segments of a device backend's pass, or NULL */
    const tsr_backend *be;   /* what the buffers above are allocated on (NULL: none) */
    double loss;             /* the step's sum of the depths' loss sums */
    tsr_decoder main;        /* the model's decoder (mtp_train's caller's): its units, backend */
} tsr_mtp;

/* the one-layer model of depth d: the whole model's layer L + d, without the embedding */
static void sub_init(mtp_depth *p, const tsr_model *m, int d) {
    tsr_model_config c = m->cfg;
    c.n_layer = 1;
    c.num_nextn_predict_layers = 0;
    c.activation_checkpointing = TSR_ACTCKPT_NONE;
    memset(&c.part, 0, sizeof c.part);
    c.part.n = 1, c.part.first[0] = m->L + d, c.part.len[0] = 1, c.part.no_embed = 1;
    model_init(&p->sub, &c, m->maxT, m->ops);
    p->d = d;
}

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

/* the layer's tensors packed by kind: their offsets in the two blocks, the blocks' floats */
static void sub_pack(mtp_depth *p, size_t *pw, size_t *pn) {
    *pw = *pn = 0;
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const tsr_param_info *q = &p->sub.params_info[i];
        p->off[i] = SIZE_MAX;
        if (!q->numel || !model_param_per_layer((tsr_param_id)i)) continue;
        p->w[i] = q->kind == TSR_PK_WEIGHT || q->kind == TSR_PK_EMBEDDING;
        size_t *at = p->w[i] ? pw : pn;
        p->off[i] = *at;
        *at += round16(q->numel);
    }
}

static void mtp_make(tsr_model *m) {
    tsr_mtp *s = tsr_calloc(1, sizeof *s);
    s->D = m->D;
    s->dep = tsr_calloc((size_t)s->D, sizeof *s->dep);
    for (int d = 0; d < s->D; d++) {
        size_t pw, pn;
        sub_init(&s->dep[d], m, d);
        sub_pack(&s->dep[d], &pw, &pn);
        s->PW = pw > s->PW ? pw : s->PW, s->PN = pn > s->PN ? pn : s->PN;
    }
    m->mtp = s;
}

/* (D, C) norms, (D, C, 2C) eh_proj, the layers' blocks */
static void mtp_layout(tsr_model *m) {
    m->D = m->cfg.num_nextn_predict_layers;
    if (m->D > 0 && !m->mtp) mtp_make(m);
    const int on = m->D > 0;
    const int64_t D = m->D, C = m->C;
    model_param_shape(m, TSR_P_MTPENORMW, on, 2, D, C, 0, 0);
    model_param_shape(m, TSR_P_MTPHNORMW, on, 2, D, C, 0, 0);
    model_param_shape(m, TSR_P_MTPEHW, on, 3, D, C, 2 * C, 0);
    model_param_shape(m, TSR_P_MTPNORMW, on, 2, D, C, 0, 0);
    model_param_shape(m, TSR_P_MTPW, on, 2, D, on ? (int64_t)m->mtp->PW : 0, 0, 0);
    model_param_shape(m, TSR_P_MTPN, on, 2, D, on ? (int64_t)m->mtp->PN : 0, 0, 0);
}

/* element k of a layer block (mtp_w or mtp_n): the one-layer model's tensor there drawn as the
 * model draws its own (its rule; its own stream per depth), 0 in the alignment gaps */
static float mtp_init(const tsr_model *m, tsr_param_id id, uint64_t seed, size_t k) {
    const tsr_mtp *s = m->mtp;
    const int in_w = id == TSR_P_MTPW;
    const size_t P = in_w ? s->PW : s->PN, j = k % P;
    const mtp_depth *p = &s->dep[k / P];
    for (int i = 0; i < TSR_P_COUNT; i++) {
        if (p->off[i] == SIZE_MAX || p->w[i] != in_w) continue;
        const size_t n = p->sub.params_info[i].numel;
        if (j < p->off[i] || j >= p->off[i] + n) continue;
        const tsr_param_row *row = model_param_row(&p->sub, (tsr_param_id)i);
        const size_t e = j - p->off[i];
        const uint64_t stream = row->stream + ((uint64_t)(p->d + 1) << 16);
        switch (row->init) {
        case TSR_INIT_ZERO: return 0.0f;
        case TSR_INIT_ONE: return 1.0f;
        case TSR_INIT_OWN: return p->sub.kind_of[i]->init(&p->sub, (tsr_param_id)i, seed ^ stream, e);
        case TSR_INIT_RESIDUAL:
            return (float)(m->cfg.init_std / sqrt(2.0 * m->L) * tsr_rand_normal(seed, stream, e));
        default: return (float)(m->cfg.init_std * tsr_rand_normal(seed, stream, e));
        }
    }
    return 0.0f;
}

static const tsr_param_row mtp_params[] = {
    {TSR_P_MTPENORMW, "mtp_enorm", TSR_PK_NORM, TSR_INIT_ONE, 67, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_MTPHNORMW, "mtp_hnorm", TSR_PK_NORM, TSR_INIT_ONE, 68, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_MTPEHW, "mtp_eh_proj", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 69, TSR_SPLIT_REPLICATED, -1, 1,
     0},
    {TSR_P_MTPNORMW, "mtp_head_norm", TSR_PK_NORM, TSR_INIT_ONE, 70, TSR_SPLIT_REPLICATED, -1, 1,
     0},
    {TSR_P_MTPW, "mtp_layer_w", TSR_PK_WEIGHT, TSR_INIT_OWN, 71, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_MTPN, "mtp_layer_n", TSR_PK_NORM, TSR_INIT_OWN, 72, TSR_SPLIT_REPLICATED, -1, 1, 0},
};
static const char *const mtp_keys[] = {"model.num_nextn_predict_layers", NULL};

const tsr_layer_kind kind_mtp = {.name = "mtp", .half = TSR_HALF_ROOT, .params = mtp_params,
                                 .n_params = 6, .keys = mtp_keys, .layout = mtp_layout,
                                 .init = mtp_init};
_Static_assert(sizeof mtp_params / sizeof *mtp_params == 6, "mtp_params");

/* ---- the pass ------------------------------------------------------------------------------ */

/* the model's unit u (its root 0; depth d's layer L + 1 + d) as its decoder takes it: gathered
 * from the sharded source (zero3, hsdp) or in the flat buffers; backward: with its gradients */
static void main_unit(tsr_model *m, int u, int backward, const void **w, float **g) {
    const tsr_dec_params *x = &m->mtp->main.params;
    for (int i = 0; i < TSR_P_COUNT; i++) w[i] = NULL, g[i] = NULL;
    x->get(x->ctx, u, backward, w, g);
}

/* element off of weights w (the backend's weight type) */
static const void *weight_at(const tsr_model *m, const void *w, size_t off) {
    return (const char *)w + off * tsr_dtype_size(m->mtp->main.be->weight);
}

/* a root tensor of the model: its weights (and gradients) at offset off into it */
static void tensor_at(tsr_model *m, int id, size_t off, int backward, const void **w, float **g) {
    const void *rw[TSR_P_COUNT];
    float *rg[TSR_P_COUNT];
    main_unit(m, 0, backward, rw, rg);
    *w = rw[id] ? weight_at(m, rw[id], off) : NULL;
    *g = rg[id] ? rg[id] + off : NULL;
}

/* The module's decoder's units: the root its head's norm and the model's head (and a tied
 * head's wte), unit 1 its layer's tensors from its rows of the blocks (the model's unit
 * L + 1 + d) */
static void sub_get(void *ctx, int u, int backward, const void **w, float **g) {
    const mtp_depth *p = ctx;
    tsr_model *m = p->main;
    const tsr_model *sub = &p->sub;
    if (u == 0) {
        const int ids[] = {TSR_P_WTE, TSR_P_LMHEAD};
        for (size_t i = 0; i < 2; i++)
            if (sub->params_info[ids[i]].numel)
                tensor_at(m, ids[i], 0, backward, &w[ids[i]], &g[ids[i]]);
        tensor_at(m, TSR_P_MTPNORMW, (size_t)p->d * m->C, backward, &w[TSR_P_LNFW], &g[TSR_P_LNFW]);
        return;
    }
    const void *bw[TSR_P_COUNT];
    float *bg[TSR_P_COUNT];
    main_unit(m, m->L + 1 + p->d, backward, bw, bg);
    for (int i = 0; i < TSR_P_COUNT; i++) {
        if (p->off[i] == SIZE_MAX) continue;
        const int b = p->w[i] ? TSR_P_MTPW : TSR_P_MTPN;
        w[i] = weight_at(m, bw[b], p->off[i]);
        g[i] = bg[b] ? bg[b] + p->off[i] : NULL;
    }
}

/* after the module's decoder's last use of its unit u: the model's (a sharded layer's gradients
 * reduce-scattered) */
static void sub_put(void *ctx, int u, int backward) {
    const mtp_depth *p = ctx;
    const tsr_dec_params *x = &p->main->mtp->main.params;
    if (x->put) x->put(x->ctx, u ? p->main->L + 1 + p->d : 0, backward);
}

/* the module's decoder: the model's decoder's backend, tables and segment starts */
static tsr_decoder sub_decoder(mtp_depth *p, tsr_model *m) {
    const tsr_decoder *x = &m->mtp->main;
    p->main = m;
    return (tsr_decoder){.m = &p->sub, .be = &p->be, .a = &p->a, .params = {p, sub_get, sub_put},
                         .slopes = x->slopes, .rope = x->rope, .starts = x->starts,
                         .ring = x->ring ? &p->ring : NULL};
}

static void be_free(const tsr_backend *be, void *p) {
    if (p) be->free(be, p);
}

static void *be_alloc(const tsr_backend *be, size_t bytes) {
    void *p = be->try_alloc(be, bytes);
    if (!p)
        tsr_die(TSR_EXIT_INTERNAL, "out of memory allocating %zu bytes of multi-token "
                "prediction's buffers on the %s backend", bytes, be->name);
    return p;
}

static void depth_free(mtp_depth *p, const tsr_backend *be) {
    void *bufs[] = {p->e, p->en, p->hn, p->cat, p->x, p->dh, p->enr, p->hnr,
                    p->tokd != p->tokl ? p->tokd : NULL};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) be_free(be, bufs[i]);
    void *host[] = {p->tok, p->tg, p->tokl};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++) free(host[i]);
    dec_free_acts(be, &p->a);
    ring_free(&p->ring);
    p->tok = p->tg = p->tokl = p->tokd = NULL;
}

/* the one-layer model's own allocations: its activations, its RoPE or ALiBi tables, its soft
 * cap's buffer (it has no parameters of its own) */
static void sub_free(tsr_model *sub) {
    dec_free_acts(&sub->be, &sub->acts);
    if (sub->be.capped) free(sub->be.capped->z), free(sub->be.capped), sub->be.capped = NULL;
    if (sub->rope_freqs) sub->ops->free(sub->rope_freqs), sub->rope_freqs = NULL;
    if (sub->alibi_slopes) sub->ops->free(sub->alibi_slopes), sub->alibi_slopes = NULL;
}

void mtp_release(tsr_model *m) {
    tsr_mtp *s = m->mtp;
    if (!s || !s->be) return;
    for (int d = 0; d < s->D; d++) depth_free(&s->dep[d], s->be);
    be_free(s->be, s->dcat), be_free(s->be, s->dpart), free(s->seq);
    s->dcat = s->dpart = NULL, s->seq = NULL;
    s->be = NULL, s->B = s->T = 0;
}

/* depth p's buffers of microbatches of B x T on be */
static void depth_alloc(mtp_depth *p, const tsr_model *m, const tsr_backend *be, int B, int T) {
    const size_t N = (size_t)B * T, nC = N * (size_t)m->C * tsr_dtype_size(be->act);
    p->be = *be;
    if (be->capped) p->be.capped = p->sub.be.capped; /* (its own: the model's is its backward's) */
    p->be.matmul_forward_fp8 = NULL; /* precision.fp8: the modules' layers stay in the backend's
                                      * precision, as the head does (the FP8 product belongs to
                                      * the model's own table, src/gpu/gpu_backend.c) */
    model_set_context(&p->sub, m->cpN); /* (its activations: this rank's share) */
    const tsr_ring *g = m->mtp->main.ring;
    if (g) p->ring = (tsr_ring){.N = g->N, .r = g->r, .comm = g->comm};
    if (dec_try_alloc_acts(&p->sub, &p->be, &p->a, B, T) != 0)
        tsr_die(TSR_EXIT_INTERNAL, "out of memory allocating multi-token prediction's "
                "activations for a microbatch of %d x %d", B, T);
    p->tok = tsr_malloc(N * sizeof(int32_t)), p->tg = tsr_malloc(N * sizeof(int32_t));
    p->tokl = tsr_malloc(N * sizeof(int32_t));
    p->tokd = be->host ? p->tokl : be_alloc(be, N * sizeof(int32_t));
    void **bufs[] = {&p->e, &p->en, &p->hn, &p->x, &p->dh};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) *bufs[i] = be_alloc(be, nC);
    p->cat = be_alloc(be, 2 * nC);
    p->enr = be_alloc(be, N * sizeof(float)), p->hnr = be_alloc(be, N * sizeof(float));
}

/* the buffers of microbatches of B x T on the model's decoder's backend */
static void mtp_alloc(tsr_mtp *s, tsr_model *m, int B, int T) {
    const tsr_backend *be = s->main.be;
    if (s->be == be && s->B == B && s->T == T) return;
    mtp_release(m);
    const size_t N = (size_t)B * T, nC = N * (size_t)m->C * tsr_dtype_size(be->act);
    s->dcat = be_alloc(be, 2 * nC), s->dpart = be_alloc(be, nC);
    if (!be->host) s->seq = tsr_malloc(N * sizeof(int32_t));
    s->be = be;
    for (int d = 0; d < s->D; d++) depth_alloc(&s->dep[d], m, be, B, T);
    s->B = B, s->T = T;
}

/* depth k's inputs and targets: t_{i+k} (0 past the row: its target is not counted) and the main
 * target at i + k where it counts and i + k is in i's document (seq: the segments, or NULL), of
 * the whole rows (every rank of a context group has them: position i + k may lie in another's
 * share), and the inputs at this rank's positions (tokd: on the backend) */
static void depth_rows(mtp_depth *p, const int32_t *tokens, const int32_t *targets,
                       const int32_t *seq, int B, int T) {
    const int k = p->d + 1;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++) {
            const size_t n = (size_t)b * T + i, j = n + (size_t)k;
            const int in = i + k < T;
            p->tok[n] = in ? tokens[j] : 0;
            p->tg[n] = in && (!seq || seq[j] == seq[n]) ? targets[j] : -1;
        }
    if (p->ring.N > 1) ring_split(p->tokl, p->tok, sizeof(int32_t), B, p->ring.N, p->ring.r, T);
    else memcpy(p->tokl, p->tok, (size_t)B * T * sizeof(int32_t));
    const tsr_backend *be = &p->be;
    if (p->tokd != p->tokl)
        be->to_device(be, p->tokd, p->tokl, (size_t)B * (T / (p->ring.N > 1 ? p->ring.N : 1)) *
                                                sizeof(int32_t));
}

/* the whole rows' segments (attn_mask = document) on the host, or NULL: the model's forward's
 * (the fp32 backend's, or its ring's), or computed as that forward did (a device backend's) */
static const int32_t *mtp_seq(tsr_mtp *s, const tsr_model *m, const int32_t *tokens, int B,
                              int T) {
    const tsr_decoder *x = &s->main;
    if (m->cfg.attn_mask != TSR_MASK_DOCUMENT) return NULL;
    if (x->ring) return x->ring->seq;
    if (x->be->host) return x->a->seq;
    model_segments(s->seq, NULL, tokens, m->cfg.eot_token, x->starts, B, T);
    return s->seq;
}

/* x = eh_proj [RMSNorm_e(wte[tok]) | RMSNorm_h(h)] */
static void frame_forward(mtp_depth *p, tsr_model *m, const void *h, int B, int T) {
    const tsr_backend *be = &p->be;
    const int C = m->C, N = B * T;
    const size_t dC = (size_t)p->d * C, row = (size_t)C * tsr_dtype_size(be->act);
    const float eps = (float)m->cfg.norm_eps;
    const void *wte, *enw, *hnw, *eh;
    float *g;
    tensor_at(m, TSR_P_WTE, 0, 0, &wte, &g);
    tensor_at(m, TSR_P_MTPENORMW, dC, 0, &enw, &g);
    tensor_at(m, TSR_P_MTPHNORMW, dC, 0, &hnw, &g);
    tensor_at(m, TSR_P_MTPEHW, dC * 2 * C, 0, &eh, &g);
    be->encoder_forward(be, p->e, p->tokd, wte, NULL, NULL, B, T, C);
    be->rmsnorm_forward(be, p->en, p->enr, p->e, enw, N, C, eps);
    be->rmsnorm_forward(be, p->hn, p->hnr, h, hnw, N, C, eps);
    be->copy_rows(be, p->cat, 2 * row, p->en, row, row, (size_t)N);
    be->copy_rows(be, (char *)p->cat + row, 2 * row, p->hn, row, row, (size_t)N);
    be->matmul_forward(be, p->x, NULL, p->cat, eh, NULL, N, 2 * C, C, TSR_GELU_TANH);
}

/* the frame's backward from dx = d(x): eh_proj's, the two norms' (into wte's gradient and dh) */
static void frame_backward(tsr_mtp *s, mtp_depth *p, tsr_model *m, const void *h,
                           const void *dx, int B, int T) {
    const tsr_backend *be = &p->be;
    const int C = m->C, N = B * T;
    const size_t dC = (size_t)p->d * C, row = (size_t)C * tsr_dtype_size(be->act);
    const void *w[4];
    float *g[4], *gwte;
    tensor_at(m, TSR_P_MTPEHW, dC * 2 * C, 1, &w[0], &g[0]);
    tensor_at(m, TSR_P_MTPENORMW, dC, 1, &w[1], &g[1]);
    tensor_at(m, TSR_P_MTPHNORMW, dC, 1, &w[2], &g[2]);
    tensor_at(m, TSR_P_WTE, 0, 1, &w[3], &gwte);
    be->matmul_backward(be, s->dcat, g[0], NULL, dx, p->cat, w[0], N, 2 * C, C, TSR_GRAD_SET);
    for (int half = 0; half < 2; half++) {
        be->copy_rows(be, s->dpart, row, (char *)s->dcat + half * row, 2 * row, row, (size_t)N);
        void *dinp = half ? p->dh : p->en; /* (en: the forward's, read no more) */
        be->zero(be, dinp, (size_t)N * row);
        be->rmsnorm_backward(be, dinp, g[1 + half], s->dpart, half ? h : p->e, w[1 + half],
                             half ? p->hnr : p->enr, N, C);
        if (!half) be->encoder_backward(be, gwte, NULL, dinp, p->tokd, p->tokl, NULL, B, T, C);
    }
}

/* h_{k-1} of depth d: the last layer's output of the model's last forward (before the final
 * norm), or the previous module's (before its head's norm) */
static const void *depth_input(tsr_model *m, int d) {
    if (d == 0) return dec_output(&m->mtp->main);
    tsr_decoder x = sub_decoder(&m->mtp->dep[d - 1], m);
    return dec_output(&x);
}

const void *mtp_train(tsr_model *m, const tsr_decoder *main, const int32_t *tokens,
                      const int32_t *targets, int B, int T, float loss_scale) {
    tsr_mtp *s = m->mtp;
    if (!s) return NULL;
    s->main = *main;
    mtp_alloc(s, m, B, T);
    const float scale = (float)(loss_scale * m->cfg.mtp_loss_weight / s->D);
    const int32_t *seq = mtp_seq(s, m, tokens, B, T);
    tsr_ring *ring = main->ring;
    const int Tl = ring ? T / ring->N : T; /* the frame's: this rank's positions */
    for (int d = 0; d < s->D; d++) { /* forward, depth by depth */
        mtp_depth *p = &s->dep[d];
        tsr_decoder dd = sub_decoder(p, m);
        depth_rows(p, tokens, targets, seq, B, T);
        frame_forward(p, m, depth_input(m, d), B, Tl);
        dd.pp_x = p->x;
        dec_forward(&dd, tokens, p->tg, B, T, scale);
        s->loss += dec_loss_sum(&dd, p->tg, B, T);
    }
    for (int d = s->D - 1; d >= 0; d--) { /* backward, the last depth first */
        mtp_depth *p = &s->dep[d];
        tsr_decoder dd = sub_decoder(p, m);
        dd.pp_dy = d + 1 < s->D ? s->dep[d + 1].dh : NULL;
        dec_backward(&dd, tokens, p->tg, B, T, scale, NULL, NULL);
        frame_backward(s, p, m, depth_input(m, d), p->a.dresidual, B, Tl);
        if (ring) ring->sent += p->ring.sent, p->ring.sent = 0; /* (the ring's bytes) */
    }
    return s->dep[0].dh;
}

void model_mtp_reset(tsr_model *m) {
    if (m->mtp) m->mtp->loss = 0.0;
}

double model_mtp_loss_sum(const tsr_model *m) { return m->mtp ? m->mtp->loss / m->D : 0.0; }

const char *model_mtp_layer_tensor(const tsr_model *m, int d, tsr_param_id id, int64_t v[3]) {
    if (!m->mtp || d < 0 || d >= m->D || m->mtp->dep[d].off[id] == SIZE_MAX) return NULL;
    const mtp_depth *p = &m->mtp->dep[d];
    v[0] = !p->w[id], v[1] = (int64_t)p->off[id], v[2] = (int64_t)p->sub.params_info[id].numel;
    return p->sub.params_info[id].name;
}

void model_mtp_free(tsr_model *m) {
    tsr_mtp *s = m->mtp;
    if (!s) return;
    mtp_release(m);
    for (int d = 0; d < s->D; d++) sub_free(&s->dep[d].sub);
    free(s->dep), free(s);
    m->mtp = NULL;
}
