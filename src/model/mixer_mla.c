/* mixer_mla.c — multi-head latent attention (DeepSeek-V2/V3, Kimi K2; layer_kind.h; docs/models.md
 * "DeepSeek"): the mixer of every layer that is not a linear one when model.kv_lora_rank > 0.
 *
 * From the layer's normed input x (N rows of C), NH heads, dqk = dn + dr, 1e-6 the latent norms'
 * eps (Hugging Face's DeepseekV3RMSNorm default, which its q_a_layernorm and kv_a_layernorm keep):
 *   queries   q = x Wq^T, or with the low-rank path (qr > 0) q = RMSNorm(x Wqa^T) Wq^T (N, NH dqk),
 *             each head [nope (dn) | rope (dr)]
 *   latent    c = x Wkva[:kvr]^T (N, kvr), its RoPE key kpe = x Wkva[kvr:]^T (N, dr), one for
 *             every head; kv = RMSNorm(c) Wkvb^T (N, NH (dn + dv)), each head [key nope | value]
 *   attention key head h = [kv's key nope of h | RoPE(kpe)], query head h = [q nope | RoPE(q rope)],
 *             value head h of dv (cpu_mla.h's assembly, then the attention entries with value
 *             heads of dv), scores times model_mla_scale (1 / sqrt(dqk), YaRN's mscale_all_dim^2)
 *   output    atty (N, NH dv) Wo^T
 * The two latents and the attention's input and output are kept for the backward (stacked with
 * the attention group, so activation checkpointing reruns them); the projections' outputs before
 * the assembly are scratch.
 *
 * Under context parallelism (parallel.context = N; docs/parallelism.md "Multi-head latent
 * attention") the ring carries each rank's normed latent and turned RoPE key (kvr + dr numbers a
 * token) instead of the expanded keys and values: each rank expands a block it receives with its
 * own kv_b_proj (mla_expand), and in the backward turns the block's key and value gradients back
 * into the latent's and the RoPE key's (mla_contract), which travel on to the block's owner;
 * kv_b_proj's weight gradient accumulates on every rank, reduced like every weight gradient.
 */
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "model/decoder.h"
#include "model/decoder_int.h"
#include "model/layer_kind.h"
#include "model/model_lora.h"
#include "model/model_ring.h"

#define MLA_EPS 1e-6f /* the latent norms' (Hugging Face's DeepseekV3RMSNorm default) */

/* ---- its tensors ------------------------------------------------------------------------ */

static const tsr_param_row mla_params[] = {
    {TSR_P_MLAQAW, "mlaqaw", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 60, TSR_SPLIT_REPLICATED, -1, 1, 1},
    {TSR_P_MLAQANORMW, "mlaqanormw", TSR_PK_NORM, TSR_INIT_ONE, 61, TSR_SPLIT_REPLICATED, -1, 1,
     0},
    {TSR_P_MLAQW, "mlaqw", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 62, TSR_SPLIT_HEADS, 0, 1, 1},
    {TSR_P_MLAKVAW, "mlakvaw", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 63, TSR_SPLIT_REPLICATED, -1, 1,
     1},
    {TSR_P_MLAKVANORMW, "mlakvanormw", TSR_PK_NORM, TSR_INIT_ONE, 64, TSR_SPLIT_REPLICATED, -1,
     1, 0},
    {TSR_P_MLAKVBW, "mlakvbw", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 65, TSR_SPLIT_HEADS, 0, 1, 1},
    {TSR_P_MLAOW, "mlaow", TSR_PK_WEIGHT, TSR_INIT_RESIDUAL, 66, TSR_SPLIT_HEADS, 1, 1, 1},
};

static const char *const mla_keys[] = {
    "model.n_head", "model.kv_lora_rank", "model.q_lora_rank", "model.qk_nope_head_dim",
    "model.qk_rope_head_dim", "model.v_head_dim", "model.rope_interleave", "model.pos",
    "model.rope_theta", "model.rope_scaling", "model.rope_factor",
    "model.rope_original_max_pos", "model.rope_beta_fast", "model.rope_beta_slow",
    "model.rope_truncate", "model.rope_mscale", "model.rope_mscale_all_dim",
    "model.layer_types", NULL};

static int mla_serves(const tsr_model_config *c, int l) {
    (void)l; /* (the linear layers are the DeltaNet's, whose row comes first) */
    return c->kv_lora_rank > 0;
}

/* stacked over the LX MLA layers (model.h's TSR_P_MLA*) */
static void mla_layout(tsr_model *m) {
    const int64_t LX = m->LX, C = m->C, NH = m->NH, qr = m->qr, kvr = m->kvr;
    const int on = LX > 0, low = on && qr > 0;
    model_param_shape(m, TSR_P_MLAQAW, low, 3, LX, qr, C, 0);
    model_param_shape(m, TSR_P_MLAQANORMW, low, 2, LX, qr, 0, 0);
    model_param_shape(m, TSR_P_MLAQW, on, 3, LX, NH * (m->dn + m->dr), low ? qr : C, 0);
    model_param_shape(m, TSR_P_MLAKVAW, on, 3, LX, kvr + m->dr, C, 0);
    model_param_shape(m, TSR_P_MLAKVANORMW, on, 2, LX, kvr, 0, 0);
    model_param_shape(m, TSR_P_MLAKVBW, on, 3, LX, NH * (m->dn + m->dv), kvr, 0);
    model_param_shape(m, TSR_P_MLAOW, on, 3, LX, C, NH * m->dv, 0);
}

/* its heads: the query projection's rows (dqk each), kv_b's (dn + dv each), the output
 * projection's input (dv each); the latent's tensors every head shares */
static int mla_heads(const tsr_model *m, tsr_param_id id, tsr_head_block b[3]) {
    switch (id) {
    case TSR_P_MLAQW: b[0] = (tsr_head_block){m->NH, m->dn + m->dr, 0}; return 1;
    case TSR_P_MLAKVBW: b[0] = (tsr_head_block){m->NH, m->dn + m->dv, 0}; return 1;
    case TSR_P_MLAOW: b[0] = (tsr_head_block){m->NH, m->dv, 0}; return 1;
    default: return 0;
    }
}

/* ---- its activations' layout ------------------------------------------------------------- */

/* The per-layer parts of the two stacks and of the one layer's scratch, in elements (each a
 * whole number of the backend's alignment blocks): act cq, cqn (N qr), c, cn (N kvr), qkv
 * (N NH (2 dqk + dv)), atty (N NH dv); fp32 rq, rkv (N), att (the saved attention); the
 * scratch (act) q (N NH dqk), kv (N NH (dn + dv)), kpe (N dr), dqkv, datty, dc, dcn, dcq, dcqn
 * (the gradients of qkv, atty, c, cn, cq, cqn); its sums, a layer's stride */
typedef struct mla_parts {
    size_t cq, c, qkv, atty, act;        /* act stack: cq and cqn, c and cn of one size each */
    size_t r, att, f;                    /* fp32 stack */
    size_t q, kv, kpe, scratch;          /* the scratch: q .. kpe, then the gradients */
} mla_parts;

/* the attention's saved floats: the ring's log-sum-exp (N NH) under context parallelism, else
 * the backend's */
static size_t mla_saved(const dec_plan *p) {
    const tsr_model *m = p->m;
    return m->cpN > 1 ? p->N * (size_t)m->NH : p->be->attention_saved(p->B, p->T, m->NH);
}

static mla_parts mla_parts_of(const dec_plan *p) {
    const tsr_model *m = p->m;
    const size_t N = p->N, e = p->e, f = sizeof(float), NH = (size_t)m->NH;
    const size_t dqk = (size_t)(m->dn + m->dr), dv = (size_t)m->dv;
    mla_parts s = {
        .cq = m->qr ? dec_stride(p, N * m->qr, e) : 0, .c = dec_stride(p, N * m->kvr, e),
        .qkv = dec_stride(p, N * NH * (2 * dqk + dv), e), .atty = dec_stride(p, N * NH * dv, e),
        .r = dec_stride(p, N, f), .att = dec_stride(p, mla_saved(p), f),
        .q = dec_stride(p, N * NH * dqk, e), .kv = dec_stride(p, N * NH * (m->dn + dv), e),
        .kpe = dec_stride(p, N * m->dr, e)};
    s.act = 2 * s.cq + 2 * s.c + s.qkv + s.atty;
    s.f = 2 * s.r + s.att;
    s.scratch = s.q + s.kv + s.kpe + s.qkv + s.atty + 2 * s.c + 2 * s.cq;
    return s;
}

/* one layer's scratch: the projections' outputs before the assembly (the forward), then the
 * same buffers' gradients and those of the attention's input and output, the latents' */
typedef struct mla_work {
    void *q, *kv, *kpe, *dqkv, *datty, *dc, *dcn, *dcq, *dcqn;
} mla_work;

static mla_work mla_work_at(const dec_plan *p, void *buf) {
    const mla_parts s = mla_parts_of(p);
    char *b = buf;
    const size_t e = p->e;
    mla_work w;
    w.q = b, b += s.q * e;
    w.kv = b, b += s.kv * e;
    w.kpe = b, b += s.kpe * e;
    w.dqkv = b, b += s.qkv * e;
    w.datty = b, b += s.atty * e;
    w.dc = b, b += s.c * e;
    w.dcn = b, b += s.c * e;
    w.dcq = b, b += s.cq * e;
    w.dcqn = b;
    return w;
}

/* a pass's scratch: a training pass's (the allocated B x T's layout), or a decode chunk's
 * queries and RoPE key (the rest is the training backward's) */
static mla_work mla_work_of(const dec_run *r) {
    const tsr_decoder *d = r->d;
    if (r->kv) return (mla_work){.q = r->kv->mla.q, .kpe = r->kv->mla.kpe};
    const dec_plan p = dec_plan_of(d->m, d->be, d->a->B, d->a->T);
    return mla_work_at(&p, d->a->mla_bwd);
}

/* ---- the pass ---------------------------------------------------------------------------- */

static tsr_mla_shape mla_shape(const tsr_model *m) {
    return (tsr_mla_shape){.NH = m->NH, .dn = m->dn, .dr = m->dr, .dv = m->dv,
                           .interleave = m->cfg.rope_interleave,
                           .mscale = (float)model_rope_mscale(&m->cfg)};
}

/* the attention's variants: value heads of dv, the scores' scale */
static tsr_attn_var mla_var(const tsr_model *m) {
    return (tsr_attn_var){.dv = m->dv, .scale = (float)model_mla_scale(m)};
}

/* kv_a_proj_with_mqa's rows from the latent's on (the RoPE key's), of a weight or a gradient */
static const void *kpe_rows(const tsr_model *m, const tsr_backend *be, const void *w) {
    return (const char *)w + (size_t)m->kvr * m->C * tsr_dtype_size(be->weight);
}

/* the queries' projection into w.q: through the low-rank path (cq, its norm cqn) or q_proj */
static void q_forward(const dec_run *r, int l, const dec_layer *v, const void *const *w,
                      const mla_work *s) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    const int N = r->N, C = m->C, qr = m->qr, QW = m->NH * (m->dn + m->dr);
    if (!qr) {
        dec_linear(r, l, s->q, NULL, v->ln1, w[TSR_P_MLAQW], NULL, N, C, QW);
        dec_lora_fwd(r, l, TSR_LORA_Q, s->q, v->ln1);
        return;
    }
    dec_linear(r, l, v->mla.cq, NULL, v->ln1, w[TSR_P_MLAQAW], NULL, N, C, qr);
    dec_lora_fwd(r, l, TSR_LORA_QA, v->mla.cq, v->ln1);
    be->rmsnorm_forward(be, v->mla.cqn, v->mla.rq, v->mla.cq, w[TSR_P_MLAQANORMW], N, qr,
                        MLA_EPS);
    dec_linear(r, l, s->q, NULL, v->mla.cqn, w[TSR_P_MLAQW], NULL, N, qr, QW);
    dec_lora_fwd(r, l, TSR_LORA_QB, s->q, v->mla.cqn);
}

/* kv_a_proj_with_mqa's adapter (model_lora.h): part 0 the latent's rows (into c or its
 * gradient's input), part 1 the RoPE key's; the backward adds into a->dln */
static void kva_lora(const dec_run *r, int l, int part, void *out, const void *dout,
                     const void *ln1) {
    tsr_lora *lo = r->d->lora;
    const int ll = dec_lora_layer(r, l);
    if (!dout) lora_forward_part(lo, r->d->be, ll, TSR_LORA_KVA, part, out, ln1, r->N);
    else lora_backward_part(lo, r->d->be, ll, TSR_LORA_KVA, part, out, dout, ln1, r->N);
}

/* the latent c, its RoPE key into w.kpe, its norm cn */
static void latent_forward(const dec_run *r, int l, const dec_layer *v, const void *const *w,
                           const mla_work *s) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    const int N = r->N, C = m->C, kvr = m->kvr;
    dec_linear(r, l, v->mla.c, NULL, v->ln1, w[TSR_P_MLAKVAW], NULL, N, C, kvr);
    dec_linear(r, l, s->kpe, NULL, v->ln1, kpe_rows(m, be, w[TSR_P_MLAKVAW]), NULL, N, C, m->dr);
    kva_lora(r, l, 0, v->mla.c, NULL, v->ln1);
    kva_lora(r, l, 1, s->kpe, NULL, v->ln1);
    be->rmsnorm_forward(be, v->mla.cn, v->mla.rkv, v->mla.c, w[TSR_P_MLAKVANORMW], N, kvr,
                        MLA_EPS);
}

/* a decode chunk's rows over the caches (cpu_mla.h tsr_mla_rows): one sequence's, a chunk of one
 * slot's, or one row of each slot its ids name */
static tsr_mla_rows mla_rows(const dec_run *r) {
    const tsr_model *m = r->d->m;
    const tsr_kv_slots *ks = r->ks;
    tsr_mla_rows w = {.n = r->N, .cap = r->kv->cap,
                      .slot_stride = (size_t)r->kv->cap * (size_t)(m->kvr + m->dr) *
                                     (size_t)tsr_mla_cache_copies(r->d->be)};
    if (ks && r->slot < 0) {
        const int32_t *ids = ks->dev_ids, R = ks->rows;
        w.slot = ids + R, w.pos = ids + 2 * R, w.seg = ids + 3 * R, w.rpos = ids + 4 * R;
        return w;
    }
    w.slot0 = ks ? r->slot : 0, w.p0 = r->p0, w.seg0 = ks ? ks->seg[r->slot] : r->kv->seg;
    w.rp0 = r->p0 - w.seg0;
    return w;
}

/* a decode chunk's attention over layer l's compressed caches, kv_b_proj absorbed (cpu_mla.h
 * cpu_mla_decode), into mla.atty */
static void mla_decode(const dec_run *r, int l, const dec_layer *v, const void *const *w,
                       const mla_work *s) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const tsr_model *m = d->m;
    const tsr_kv_cache *kv = r->kv;
    const tsr_mla_rows rows = mla_rows(r);
    const tsr_mla_shape sh = mla_shape(m);
    const size_t slots = r->ks ? (size_t)r->ks->slots : 1;
    const size_t lx = (size_t)model_layer_slot(m, TSR_P_MLAKVAW, l);
    if (lora_target_on(d->lora, TSR_LORA_KVB)) /* (decoding reads merged weights: lora_merge) */
        tsr_die(TSR_EXIT_INTERNAL, "mla: decoding with kv_b_proj's adapter beside the base (the "
                "absorbed kv_b_proj would leave it out): merge the adapters first");
    void *cache = (char *)kv->mla.cache + lx * slots * rows.slot_stride * tsr_dtype_size(be->act);
    if (!be->mla_decode) /* (a backend without it) */
        tsr_die(TSR_EXIT_USAGE, "model.kv_lora_rank > 0: decoding over its compressed caches on "
                "the %s backend: not yet (docs/cuda.md \"Multi-head latent attention\")",
                be->name);
    be->mla_decode(be, v->mla.atty, cache, s->q, v->mla.cn, s->kpe, w[TSR_P_MLAKVBW], d->rope,
                   (float)model_mla_scale(m), m->kvr, &sh, &rows, kv->mla.scratch, kv->nthreads);
}

/* ---- context parallelism: the latent round the ring (tsr_ring_payload) -------------------- */

/* A layer's latent ring: the pass, the layer, its activations, weights and (the backward) their
 * gradients, its scratch. A block is [cn (rows, kvr) | turned kpe (rows, dr)], rows = r->N. */
typedef struct mla_ring_ctx {
    const dec_run *r;
    int l;
    const dec_layer *v;
    const void *const *w;
    float *const *g; /* NULL in the forward */
    const mla_work *s;
} mla_ring_ctx;

/* this rank's block: the normed latent, the RoPE key turned (key head 0's of qkv) */
static void mla_pack(void *ctx, void *send) {
    const mla_ring_ctx *c = ctx;
    const tsr_backend *be = c->r->d->be;
    const tsr_model *m = c->r->d->m;
    const size_t e = tsr_dtype_size(be->act), n = (size_t)c->r->N * m->kvr * e;
    const size_t dqk = (size_t)(m->dn + m->dr), QKV = (size_t)m->NH * (2 * dqk + m->dv);
    be->copy_rows(be, send, n, c->v->mla.cn, n, n, 1);
    be->copy_rows(be, (char *)send + n, (size_t)m->dr * e,
                  (const char *)c->v->mla.qkv + ((size_t)m->NH * dqk + m->dn) * e, QKV * e,
                  (size_t)m->dr * e, (size_t)c->r->N);
}

/* one head's columns of the key/value rows kv (rows KVW = NH (dqk + dv)) and of kv_b's output
 * (rows KW = NH (dn + dv)): key nope, value, RoPE key; in element offsets */
typedef struct mla_cols { size_t kvw, kw, k, v, pe, bk, bv; } mla_cols;

static mla_cols mla_cols_of(const tsr_model *m, int h) {
    const size_t dqk = (size_t)(m->dn + m->dr), NH = (size_t)m->NH;
    return (mla_cols){.kvw = NH * (dqk + m->dv), .kw = NH * (size_t)(m->dn + m->dv),
                      .k = h * dqk, .v = NH * dqk + (size_t)h * m->dv, .pe = h * dqk + m->dn,
                      .bk = (size_t)h * (m->dn + m->dv), .bv = (size_t)h * (m->dn + m->dv) + m->dn};
}

/* kv_b_proj's adapter on rank src's block blk (model_lora.h): the forward adds into its
 * expansion out (dout NULL), the backward into the block's gradient; the dropout masks are
 * src's, its rows that rank's zig-zag share */
static void kvb_lora(const mla_ring_ctx *c, int src, void *out, const void *dout,
                     const void *blk) {
    tsr_lora *lo = c->r->d->lora;
    if (!lora_target_on(lo, TSR_LORA_KVB)) return;
    const int own = lo->cpR;
    lora_set_context(lo, lo->cpN, src, lo->cpT);
    if (!dout) dec_lora_fwd(c->r, c->l, TSR_LORA_KVB, out, blk);
    else dec_lora_bwd(c->r, c->l, TSR_LORA_KVB, out, dout, blk);
    lora_set_context(lo, lo->cpN, own, lo->cpT);
}

/* a received block's key/value rows kv (rows, NH (dqk + dv)): kv_b_proj (and its adapter) of its
 * latent, each key head's RoPE part the block's turned RoPE key */
static void mla_expand(void *ctx, void *kv, const void *blk, int src) {
    const mla_ring_ctx *c = ctx;
    const tsr_backend *be = c->r->d->be;
    const tsr_model *m = c->r->d->m;
    const size_t e = tsr_dtype_size(be->act), rows = (size_t)c->r->N;
    const char *pe = (const char *)blk + rows * m->kvr * e, *x = c->s->kv;
    char *o = kv;
    dec_linear(c->r, c->l, c->s->kv, NULL, blk, c->w[TSR_P_MLAKVBW], NULL, c->r->N, m->kvr,
               m->NH * (m->dn + m->dv));
    kvb_lora(c, src, c->s->kv, NULL, blk);
    for (int h = 0; h < m->NH; h++) {
        const mla_cols k = mla_cols_of(m, h);
        be->copy_rows(be, o + k.k * e, k.kvw * e, x + k.bk * e, k.kw * e, m->dn * e, rows);
        be->copy_rows(be, o + k.pe * e, k.kvw * e, pe, m->dr * e, m->dr * e, rows);
        be->copy_rows(be, o + k.v * e, k.kvw * e, x + k.bv * e, k.kw * e, m->dv * e, rows);
    }
}

/* a block's gradient dblk (fp32) from its key/value rows' dkv (fp32): the RoPE key's the sum of
 * the heads' in fp32 (the terms in s->q .. s->kpe, contiguous: 2 rows dr activations at least,
 * room for rows dr floats); the rest rounded to the activations (in s->dqkv, free until the
 * ring's end) and laid out as kv_b's output in s->kv, for kv_b_proj's backward and its
 * adapter's (their gradients +=) into s->dcn, widened into dblk (on the CPU every step exact) */
static void mla_contract(void *ctx, float *dblk, const float *dkv, const void *blk, int src) {
    const mla_ring_ctx *c = ctx;
    const tsr_backend *be = c->r->d->be;
    const tsr_model *m = c->r->d->m;
    const size_t f = sizeof(float), e = tsr_dtype_size(be->act), rows = (size_t)c->r->N;
    float *dpe = dblk + rows * m->kvr, *tmp = c->s->q;
    char *x = c->s->kv, *a = c->s->dqkv;
    for (int h = 0; h < m->NH; h++) {
        const mla_cols k = mla_cols_of(m, h);
        be->copy_rows(be, h ? tmp : dpe, m->dr * f, dkv + k.pe, k.kvw * f, m->dr * f, rows);
        if (h) be->add_f32(be, dpe, tmp, rows * m->dr);
    }
    be->f32_to_act(be, a, dkv, rows * mla_cols_of(m, 0).kvw);
    for (int h = 0; h < m->NH; h++) {
        const mla_cols k = mla_cols_of(m, h);
        be->copy_rows(be, x + k.bk * e, k.kw * e, a + k.k * e, k.kvw * e, m->dn * e, rows);
        be->copy_rows(be, x + k.bv * e, k.kw * e, a + k.v * e, k.kvw * e, m->dv * e, rows);
    }
    be->matmul_backward(be, c->s->dcn, c->g[TSR_P_MLAKVBW], NULL, x, blk, c->w[TSR_P_MLAKVBW],
                        c->r->N, m->kvr, m->NH * (m->dn + m->dv), TSR_GRAD_SET);
    kvb_lora(c, src, c->s->dcn, x, blk);
    be->act_to_f32(be, dblk, c->s->dcn, rows * m->kvr);
}

static tsr_ring_payload mla_payload(mla_ring_ctx *c) {
    const tsr_model *m = c->r->d->m;
    return (tsr_ring_payload){m->kvr + m->dr, c, mla_pack, mla_expand, mla_contract};
}

/* the attention round the ring into mla.atty, its log-sum-exp into mla.att */
static void mla_ring_forward(const dec_run *r, int l, const dec_layer *v, const void *const *w,
                             const mla_work *s) {
    const tsr_decoder *d = r->d;
    const tsr_model *m = d->m;
    const tsr_attn_var var = mla_var(m);
    mla_ring_ctx c = {r, l, v, w, NULL, s};
    const tsr_ring_payload pay = mla_payload(&c);
    ring_latent_forward(d->ring, d->be, d->a, v->mla.atty, v->mla.att, v->mla.qkv, &var, &pay,
                        r->B, r->T * d->ring->N, m->NH, m->dn + m->dr);
}

/* ln1 -> the queries, the latent, the keys and values, the attention into mla.atty; a decode
 * chunk's over the compressed caches (mla_decode) */
static void mla_forward(const dec_run *r, int l, const dec_layer *v, const void *const *w) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const tsr_model *m = d->m;
    const mla_work s = mla_work_of(r);
    const tsr_mla_shape sh = mla_shape(m);
    const tsr_attn_var var = mla_var(m);
    int p0;
    const int32_t *pos = dec_rope_pos(r, &p0);
    q_forward(r, l, v, w, &s);
    latent_forward(r, l, v, w, &s);
    if (r->kv) {
        mla_decode(r, l, v, w, &s);
        return;
    }
    dec_linear(r, l, s.kv, NULL, v->mla.cn, w[TSR_P_MLAKVBW], NULL, r->N, m->kvr,
               m->NH * (m->dn + m->dv));
    dec_lora_fwd(r, l, TSR_LORA_KVB, s.kv, v->mla.cn);
    be->mla_qkv_forward(be, v->mla.qkv, s.q, s.kv, s.kpe, pos, p0, d->rope, r->B, r->T, &sh);
    if (d->ring) { /* context parallelism: the latent round the ring */
        mla_ring_forward(r, l, v, w, &s);
        return;
    }
    be->attention_forward(be, v->mla.atty, v->mla.att, v->mla.qkv, NULL, d->a->seq, &var, r->B,
                          r->T, m->NH, m->NH, m->dn + m->dr);
}

/* the output projection into r->scratch */
static void mla_out(const dec_run *r, int l, const dec_layer *v, const void *const *w) {
    const tsr_model *m = r->d->m;
    dec_linear(r, l, r->scratch, NULL, v->mla.atty, w[TSR_P_MLAOW], NULL, r->N, m->NH * m->dv,
               m->C);
    dec_lora_fwd(r, l, TSR_LORA_O, r->scratch, v->mla.atty);
}

/* float gradient g's rows from the latent's on (kv_a's RoPE key), or NULL (frozen) */
static float *kpe_grad(const tsr_model *m, float *g) {
    return g ? g + (size_t)m->kvr * m->C : NULL;
}

/* from the normed latent's gradient dcn and the RoPE key's (s->kpe): the latent norm's, kv_a's
 * (both parts) backward into a->dln (written) */
static void latent_backward(const dec_run *r, int l, const dec_layer *v, const dec_unit *u,
                            const void *dcn, const mla_work *s) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    const int N = r->N, C = m->C, kvr = m->kvr;
    void *dln = r->d->a->dln;
    be->zero(be, s->dc, (size_t)N * kvr * tsr_dtype_size(be->act));
    be->rmsnorm_backward(be, s->dc, u->g[TSR_P_MLAKVANORMW], dcn, v->mla.c,
                         u->w[TSR_P_MLAKVANORMW], v->mla.rkv, N, kvr);
    be->matmul_backward(be, dln, u->g[TSR_P_MLAKVAW], NULL, s->dc, v->ln1, u->w[TSR_P_MLAKVAW], N,
                        C, kvr, TSR_GRAD_SET);
    be->matmul_backward(be, dln, kpe_grad(m, u->g[TSR_P_MLAKVAW]), NULL, s->kpe, v->ln1,
                        kpe_rows(m, be, u->w[TSR_P_MLAKVAW]), N, C, m->dr, TSR_GRAD_ADD);
    kva_lora(r, l, 0, dln, s->dc, v->ln1);
    kva_lora(r, l, 1, dln, s->kpe, v->ln1);
}

/* from the keys' and values' gradient (s->kv) and the RoPE key's (s->kpe): kv_b's backward,
 * then latent_backward's */
static void kv_backward(const dec_run *r, int l, const dec_layer *v, const dec_unit *u,
                        const mla_work *s) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    be->matmul_backward(be, s->dcn, u->g[TSR_P_MLAKVBW], NULL, s->kv, v->mla.cn,
                        u->w[TSR_P_MLAKVBW], r->N, m->kvr, m->NH * (m->dn + m->dv), TSR_GRAD_SET);
    dec_lora_bwd(r, l, TSR_LORA_KVB, s->dcn, s->kv, v->mla.cn);
    latent_backward(r, l, v, u, s->dcn, s);
}

/* The attention's and the latent's backward round the ring (kv_b_proj's inside mla_contract),
 * from s->datty into s->q (the queries' gradient), the latent path's into a->dln. The RoPE key's
 * gradient that comes home goes into key head 0's RoPE columns of dqkv, the other key and value
 * columns zero, so that the assembly's transpose turns it back with the queries'. */
static void mla_ring_backward(const dec_run *r, int l, const dec_layer *v, const dec_unit *u,
                              const mla_work *s) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const tsr_model *m = d->m;
    const tsr_attn_var var = mla_var(m);
    const tsr_mla_shape sh = mla_shape(m);
    const size_t rows = (size_t)r->N, e = tsr_dtype_size(be->act), dqk = (size_t)(m->dn + m->dr);
    const size_t QKV = (size_t)m->NH * (2 * dqk + m->dv);
    mla_ring_ctx c = {r, l, v, u->w, u->g, s};
    const tsr_ring_payload pay = mla_payload(&c);
    int p0;
    const int32_t *pos = dec_rope_pos(r, &p0);
    const float *home = ring_latent_backward(d->ring, be, d->a, s->dqkv, s->datty, v->mla.qkv,
                                             v->mla.atty, v->mla.att, &var, &pay, r->B,
                                             r->T * d->ring->N, m->NH, (int)dqk);
    be->f32_to_act(be, s->kpe, home + rows * m->kvr, rows * m->dr); /* (rounded, as dqkv) */
    be->copy_rows(be, (char *)s->dqkv + ((size_t)m->NH * dqk + m->dn) * e, QKV * e, s->kpe,
                  m->dr * e, m->dr * e, rows);
    be->f32_to_act(be, s->dcn, home, rows * m->kvr);
    be->mla_qkv_backward(be, s->q, s->kv, s->kpe, s->dqkv, pos, p0, d->rope, r->B, r->T, &sh);
    latent_backward(r, l, v, u, s->dcn, s);
}

/* from the queries' gradient (s->q): q_proj's, or q_b's, its norm's and q_a's, added into
 * a->dln */
static void q_backward(const dec_run *r, int l, const dec_layer *v, const dec_unit *u,
                       const mla_work *s) {
    const tsr_backend *be = r->d->be;
    const tsr_model *m = r->d->m;
    const int N = r->N, C = m->C, qr = m->qr, QW = m->NH * (m->dn + m->dr);
    void *dln = r->d->a->dln;
    if (!qr) {
        be->matmul_backward(be, dln, u->g[TSR_P_MLAQW], NULL, s->q, v->ln1, u->w[TSR_P_MLAQW], N,
                            C, QW, TSR_GRAD_ADD);
        dec_lora_bwd(r, l, TSR_LORA_Q, dln, s->q, v->ln1);
        return;
    }
    be->matmul_backward(be, s->dcqn, u->g[TSR_P_MLAQW], NULL, s->q, v->mla.cqn,
                        u->w[TSR_P_MLAQW], N, qr, QW, TSR_GRAD_SET);
    dec_lora_bwd(r, l, TSR_LORA_QB, s->dcqn, s->q, v->mla.cqn);
    be->zero(be, s->dcq, (size_t)N * qr * tsr_dtype_size(be->act));
    be->rmsnorm_backward(be, s->dcq, u->g[TSR_P_MLAQANORMW], s->dcqn, v->mla.cq,
                         u->w[TSR_P_MLAQANORMW], v->mla.rq, N, qr);
    be->matmul_backward(be, dln, u->g[TSR_P_MLAQAW], NULL, s->dcq, v->ln1, u->w[TSR_P_MLAQAW], N,
                        C, qr, TSR_GRAD_ADD);
    dec_lora_bwd(r, l, TSR_LORA_QA, dln, s->dcq, v->ln1);
}

/* from dout = d(the output projection's output) to a->dln = d(ln1) */
static void mla_backward(const dec_run *r, int l, const dec_layer *v, const dec_unit *u,
                         const void *dout) {
    const tsr_decoder *d = r->d;
    const tsr_backend *be = d->be;
    const tsr_model *m = d->m;
    const mla_work s = mla_work_of(r);
    const tsr_mla_shape sh = mla_shape(m);
    tsr_attn_var var = mla_var(m);
    int p0;
    const int32_t *pos = dec_rope_pos(r, &p0);
    be->matmul_backward(be, s.datty, u->g[TSR_P_MLAOW], NULL, dout, v->mla.atty, u->w[TSR_P_MLAOW],
                        r->N, m->NH * m->dv, m->C, TSR_GRAD_SET);
    dec_lora_bwd(r, l, TSR_LORA_O, s.datty, dout, v->mla.atty);
    if (d->ring) { /* context parallelism: round the ring */
        mla_ring_backward(r, l, v, u, &s);
        q_backward(r, l, v, u, &s);
        return;
    }
    be->attention_backward(be, s.dqkv, s.datty, v->mla.qkv, v->mla.atty, v->mla.att, NULL,
                           d->a->seq, &var, d->a->mla_scratch, r->B, r->T, m->NH, m->NH,
                           m->dn + m->dr, TSR_GRAD_SET);
    /* the gradients of q, kv and kpe over their forward buffers (free by now) */
    be->mla_qkv_backward(be, s.q, s.kv, s.kpe, s.dqkv, pos, p0, d->rope, r->B, r->T, &sh);
    kv_backward(r, l, v, u, &s);
    q_backward(r, l, v, u, &s);
}

/* ---- its activations --------------------------------------------------------------------- */

/* the two stacks with the attention group (a linear layer's slots go unused), one layer's
 * scratch, the backend's attention scratch */
static void mla_acts(dec_plan *p, size_t b[TSR_A_COUNT]) {
    const tsr_model *m = p->m;
    const mla_parts s = mla_parts_of(p);
    const size_t Lat = model_act_group_layers(m, TSR_AG_ATTN), e = p->e, f = sizeof(float);
    const int on = m->LX > 0;
    dec_plan_stack(p, b, TSR_A_MLA, on, Lat, s.act, e);
    dec_plan_stack(p, b, TSR_A_MLA_F, on, Lat, s.f, f);
    dec_plan_buffer(p, b, TSR_A_MLA_BWD, on, s.scratch * e);
    dec_plan_buffer(p, b, TSR_A_MLA_SCRATCH, on && m->cpN < 2, /* (the ring has its own) */
                    p->be->attention_scratch(p->B, p->T, m->NH, m->NH, m->dn + m->dr));
}

static void mla_view(const dec_plan *p, const tsr_acts *a, int l, dec_layer *v) {
    if (!a->mla) return;
    const mla_parts s = mla_parts_of(p);
    const size_t sa = model_act_group_slot(p->m, TSR_AG_ATTN, l), e = p->e;
    char *x = (char *)a->mla + sa * s.act * e;
    float *f = a->mla_f + sa * s.f;
    v->mla.cq = x, x += s.cq * e;
    v->mla.cqn = x, x += s.cq * e;
    v->mla.c = x, x += s.c * e;
    v->mla.cn = x, x += s.c * e;
    v->mla.qkv = x, x += s.qkv * e;
    v->mla.atty = x;
    v->mla.rq = f, v->mla.rkv = f + s.r, v->mla.att = f + 2 * s.r;
}

static void mla_kv_view(const tsr_kv_cache *kv, const tsr_model *m, dec_layer *v) {
    (void)m;
    v->mla.cq = kv->mla.cq, v->mla.cqn = kv->mla.cqn, v->mla.c = kv->mla.c;
    v->mla.cn = kv->mla.cn, v->mla.atty = kv->mla.atty, v->mla.rq = kv->mla.rq;
    v->mla.rkv = kv->mla.rkv;
}

/* a sequence's compressed cache: the normed latent and the turned RoPE key of each position
 * (V3's 512 + 64 = 576 a token, against 128 heads of 192 + 128 expanded), as many copies as the
 * backend keeps (CUDA's two: gpu_mla.c gpu_mla_decode) */
static size_t mla_cache_bytes(const tsr_model *m, const tsr_backend *be, int l, int cap) {
    (void)l;
    return (size_t)cap * (size_t)(m->kvr + m->dr) * (size_t)tsr_mla_cache_copies(be) *
           tsr_dtype_size(be->act);
}

/* ---- its FLOPs, its backend entries ----------------------------------------------------- */

/* the scores (dqk) and the weighted values (dv) of NH heads, forward and backward, over T keys
 * (docs/mfu.md: attention's 12 NH hs T with dqk = dv = hs) */
static double mla_flops(const tsr_model *m, int l, int T) {
    (void)l;
    return 6.0 * m->NH * (double)(m->dn + m->dr + m->dv) * T;
}

static const char *mla_missing(const tsr_model *m, const tsr_backend *be) {
    const int on = m->LX > 0;
    const char *k = "model.kv_lora_rank > 0";
    const dec_need need[] = {
        {on, be->mla_qkv_forward, k}, {on, be->mla_qkv_backward, k},
        {on, be->rmsnorm_forward, k}, {on, be->rmsnorm_backward, k},
        {on && m->cpN > 1, be->act_to_f32, "parallel.context > 1 with model.kv_lora_rank > 0"},
    };
    return dec_need_missing(need, sizeof need / sizeof need[0]);
}

const tsr_layer_kind kind_mla = {
    .name = "mla",
    .half = TSR_HALF_MIXER,
    .params = mla_params,
    .n_params = sizeof mla_params / sizeof *mla_params,
    .keys = mla_keys,
    .serves = mla_serves,
    .layout = mla_layout,
    .heads = mla_heads,
    .forward = mla_forward,
    .out = mla_out,
    .backward = mla_backward,
    .acts = mla_acts,
    .view = mla_view,
    .kv_view = mla_kv_view,
    .cache_bytes = mla_cache_bytes,
    .flops = mla_flops,
    .missing = mla_missing,
};
