/* mixer_deltanet.c — the gated_deltanet mixer (layer_kind.h; docs/deltanet.md "Wiring"): the
 * linear_attention layers' Hugging Face Qwen3-Next Gated DeltaNet (src/model/deltanet_layer.h) in
 * a block's mixer place, the MLP or MoE half of the block unchanged. Its forward is the mixer
 * step (ST_MIX), its output what the frame's residual add takes. Its activations are the layer's
 * slot of the attention group's stack (TSR_A_DN; activation checkpointing recomputes them with
 * the attention's); a decode step carries each linear layer's state and convolution tail in the
 * cache (tsr_kv_cache dn_*) in place of keys and values.
 * The layer runs over the decoder's backend (its dn_* entries); its decode-step and context
 * parallelism paths carry host caches, the fp32 CPU backend's only (docs/deltanet.md "CUDA").
 */
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "model/decoder.h"
#include "model/decoder_int.h"
#include "model/deltanet_layer.h"
#include "model/layer_kind.h"
#include "model/dn_ring.h"
#include "model/model_lora.h"
#include "model/model_ring.h"

#define DN_CHUNK DN_TRAIN_CHUNK

/* ---- its tensors ------------------------------------------------------------------------ */

/* the projections, the convolution and out_proj decayed as weights; dt_bias, A_log and the norm
 * not (FLA's _no_weight_decay, HF's norms), as norms */
static const tsr_param_row dn_rows[] = {
    {TSR_P_DNQKVW, "dnqkvw", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 27, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_DNZW, "dnzw", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 28, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_DNBW, "dnbw", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 29, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_DNAW, "dnaw", TSR_PK_WEIGHT, TSR_INIT_NORMAL, 30, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_DNCONV, "dnconv", TSR_PK_WEIGHT, TSR_INIT_OWN, 31, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_DNDTB, "dndtbias", TSR_PK_NORM, TSR_INIT_ONE, 32, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_DNALOG, "dnalog", TSR_PK_NORM, TSR_INIT_OWN, 33, TSR_SPLIT_HEADS, 0, 1, 0},
    {TSR_P_DNNORMW, "dnnormw", TSR_PK_NORM, TSR_INIT_ONE, 34, TSR_SPLIT_REPLICATED, -1, 1, 0},
    {TSR_P_DNOW, "dnow", TSR_PK_WEIGHT, TSR_INIT_RESIDUAL, 35, TSR_SPLIT_HEADS, 1, 1, 0},
};

static const char *const dn_keys[] = {
    "model.layer_types", "model.linear_num_key_heads", "model.linear_num_value_heads",
    "model.linear_key_head_dim", "model.linear_value_head_dim", "model.linear_conv_kernel_dim",
    "model.norm_eps", NULL};

static int dn_serves(const tsr_model_config *c, int l) { return config_layer_linear(c, l); }

/* stacked over the LL linear layers, CD = 2 HKl dkl + HVl dvl: dnqkvw (LL, CD, C) rows [q heads |
 * k heads | v heads] (in_proj_qkv), dnzw (LL, HVl dvl, C) (in_proj_z), dnbw and dnaw (LL, HVl, C)
 * (in_proj_b, in_proj_a), dnconv (LL, CD, K), dt_bias and A_log (LL, HVl), the gated norm's
 * weight (LL, dvl), dnow (LL, C, HVl dvl) (out_proj) */
static void dn_layout(tsr_model *m) {
    const int64_t LL = m->LL, C = m->C, on = LL > 0, HV = m->HVl, VD = (int64_t)m->HVl * m->dvl;
    const int64_t CD = 2 * (int64_t)m->HKl * m->dkl + VD;
    model_param_shape(m, TSR_P_DNQKVW, on, 3, LL, CD, C, 0);
    model_param_shape(m, TSR_P_DNZW, on, 3, LL, VD, C, 0);
    model_param_shape(m, TSR_P_DNBW, on, 3, LL, HV, C, 0);
    model_param_shape(m, TSR_P_DNAW, on, 3, LL, HV, C, 0);
    model_param_shape(m, TSR_P_DNCONV, on, 3, LL, CD, m->Kc, 0);
    model_param_shape(m, TSR_P_DNDTB, on, 2, LL, HV, 0, 0);
    model_param_shape(m, TSR_P_DNALOG, on, 2, LL, HV, 0, 0);
    model_param_shape(m, TSR_P_DNNORMW, on, 2, LL, m->dvl, 0, 0);
    model_param_shape(m, TSR_P_DNOW, on, 3, LL, C, VD, 0);
}

/* the head blocks of its TSR_SPLIT_HEADS tensors: the [q | k | v] channels of the projection
 * and the convolution (key heads twice, then value heads), the value heads' output gate and
 * out_proj's input, one per value head of beta, the decay, dt_bias and A_log */
static int dn_heads(const tsr_model *m, tsr_param_id id, tsr_head_block b[3]) {
    const tsr_head_block k = {m->HKl, m->dkl, 0}, v = {m->HVl, m->dvl, 0};
    switch (id) {
    case TSR_P_DNQKVW:
    case TSR_P_DNCONV:
        b[0] = k, b[1] = k, b[2] = v;
        return 3;
    case TSR_P_DNZW:
    case TSR_P_DNOW:
        b[0] = v;
        return 1;
    default: /* dnbw, dnaw, dndtbias, dnalog */
        b[0] = (tsr_head_block){m->HVl, 1, 0};
        return 1;
    }
}

/* dnconv: torch Conv1d's U(+-1/sqrt(K)) as N(0, 1/sqrt(3K)); dnalog: log(A) of value head h
 * with A spread evenly over [1, 16] across the heads (HF draws A uniform in (0, 16); a fixed
 * spread gives every seed the same decays) */
static float dn_init(const tsr_model *m, tsr_param_id id, uint64_t seed, size_t k) {
    if (id == TSR_P_DNCONV)
        return (float)(1.0 / sqrt(3.0 * m->Kc) *
                       tsr_rand_normal(seed, model_param_row(m, id)->stream, k));
    const int HV = m->HVl, h = (int)(k % (size_t)HV);
    return (float)log(1.0 + 15.0 * (HV > 1 ? (double)h / (HV - 1) : 0.0));
}

/* the layer's dimensions for B sequences of T positions */
static dn_dims dn_dims_of(const tsr_model *m, int B, int T) {
    return (dn_dims){.B = B, .T = T, .C = m->C, .HK = m->HKl, .HV = m->HVl, .dk = m->dkl,
                     .dv = m->dvl, .K = m->Kc, .chunk = DN_CHUNK, .eps = (float)m->cfg.norm_eps};
}

/* the floats of the layer's activations before its output: under context parallelism (T this
 * rank's positions), its two chunks' (dn_ring.h), or a pass's without the ring if more */
static size_t acts_floats(const tsr_model *m, const tsr_backend *be, const dn_dims *d) {
    const size_t one = dn_acts_floats(be, d), two = m->cpN > 1 ? dn_ring_acts_floats(d) : 0;
    return two > one ? two : one;
}

size_t dec_dn_floats(const tsr_model *m, const tsr_backend *be, int B, int T) {
    const dn_dims d = dn_dims_of(m, B, T);
    return acts_floats(m, be, &d) + (size_t)B * T * m->C; /* and the output (N, C) */
}

size_t dec_dn_backward_bytes(const tsr_model *m, const tsr_backend *be, int B, int T) {
    const dn_dims d = dn_dims_of(m, B, T);
    return m->LL && be->dn_scratch_bytes ? dn_backward_bytes(be, &d) : 0;
}

size_t dec_dn_cache_floats(const tsr_model *m, int state) {
    const size_t cd = 2 * (size_t)m->HKl * m->dkl + (size_t)m->HVl * m->dvl;
    return state ? (size_t)m->HVl * m->dkl * m->dvl : (size_t)(m->Kc - 1) * cd;
}

/* the layer's acts in the slot v->dn of a pass of B x T, *out its output (N, C) after them */
static dn_acts acts_of(const dec_run *r, const dn_dims *d, const dec_layer *v, float **out) {
    dn_acts a;
    dn_acts_at(r->d->be, &a, v->dn, d);
    *out = v->dn + acts_floats(r->d->m, r->d->be, d);
    return a;
}

/* context parallelism's ring when this pass runs over it (training and evaluation; not
 * decoding) */
static tsr_ring *ring_of(const dec_run *r) { return r->kv || r->ks ? NULL : r->d->ring; }

/* the whole sequences' segment ids under the document mask, else NULL */
static const int32_t *ring_seq(const dec_run *r) {
    return r->d->m->cfg.attn_mask == TSR_MASK_DOCUMENT ? r->d->ring->seq : NULL;
}

/* layer l's tensors of unit u: the weights (w) or their gradients (g) */
static dn_params params_of(void *const *t) {
    return (dn_params){.wqkv = t[TSR_P_DNQKVW], .wz = t[TSR_P_DNZW], .wb = t[TSR_P_DNBW],
                       .wa = t[TSR_P_DNAW], .conv = t[TSR_P_DNCONV], .dt_bias = t[TSR_P_DNDTB],
                       .a_log = t[TSR_P_DNALOG], .normw = t[TSR_P_DNNORMW], .wo = t[TSR_P_DNOW]};
}

/* LoRA's adapters on linear layer h->l's projections (model_lora.h): in_proj_qkvz over qkv and
 * z, in_proj_ba over b and a (part 1: the second output), out_proj */
static const tsr_lora_target dn_target[] = {TSR_LORA_QKVZ, TSR_LORA_QKVZ, TSR_LORA_BA,
                                            TSR_LORA_BA, TSR_LORA_OUTPROJ};

/* the part of its target's outputs projection `which` is (z and a: the second, part 1) */
static int dn_lora_part(dn_proj which) { return which == DN_PROJ_Z || which == DN_PROJ_A; }

static void lora_hook_fwd(const dn_hook *h, dn_proj which, float *out, const float *in, int N) {
    const dec_run *r = h->ctx;
    lora_forward_part(r->d->lora, r->d->be, dec_lora_layer(r, h->l), dn_target[which],
                      dn_lora_part(which), out, in, N);
}

static void lora_hook_bwd(const dn_hook *h, dn_proj which, float *din, const float *dout,
                          const float *in, int N) {
    const dec_run *r = h->ctx;
    lora_backward_part(r->d->lora, r->d->be, dec_lora_layer(r, h->l), dn_target[which],
                       dn_lora_part(which), din, dout, in, N);
}

/* p's adapters in h when the pass has LoRA */
static void hook_of(const dec_run *r, int l, dn_hook *h, dn_params *p) {
    *h = (dn_hook){lora_hook_fwd, lora_hook_bwd, r, l};
    if (r->d->lora) p->hook = h;
}

/* a decode step's cache of linear layer l: in (NULL when the chunk starts a segment: zeros) and
 * next, both the sequence's own (updated in place) */
static void kv_cache_of(const dec_run *r, int l, dn_cache *c, const dn_cache **in) {
    const tsr_model *m = r->d->m;
    const size_t s = (size_t)model_layer_slot(m, TSR_P_DNQKVW, l);
    c->state = r->kv->dn_state + s * dec_dn_cache_floats(m, 1);
    c->conv = r->kv->dn_conv + s * dec_dn_cache_floats(m, 0);
    *in = r->p0 == r->kv->seg ? NULL : c;
}

/* slot s's cache of linear layer l in the slots' caches (ks->buf dn_*: (LL, slots, .)) */
static dn_cache slot_cache_of(const dec_run *r, int l, int s) {
    const tsr_model *m = r->d->m;
    const size_t at = (size_t)model_layer_slot(m, TSR_P_DNQKVW, l) * r->ks->slots + (size_t)s;
    return (dn_cache){r->ks->buf.dn_state + at * dec_dn_cache_floats(m, 1),
                      r->ks->buf.dn_conv + at * dec_dn_cache_floats(m, 0)};
}

/* One new token of each of r->N slots (B = N rows of T = 1): their caches gathered into the
 * rows' (ks->buf.dn_rows; zeros where a row starts its segment), the layer run, scattered back. */
static void slots_rows_forward(const dec_run *r, int l, float *out, dn_acts *a, const dec_layer *v,
                               const dn_params *p, const dn_dims *d) {
    const tsr_model *m = r->d->m;
    const size_t ss = dec_dn_cache_floats(m, 1), cs = dec_dn_cache_floats(m, 0);
    const int32_t *ids = r->ks->host_ids, R = r->ks->rows;
    dn_cache rows = {r->ks->buf.dn_rows, r->ks->buf.dn_rows + (size_t)r->N * ss};
    for (int i = 0; i < r->N; i++) {
        const dn_cache c = slot_cache_of(r, l, ids[R + i]);
        const int fresh = ids[2 * R + i] == ids[3 * R + i]; /* its position is its segment's 0 */
        float *st = rows.state + (size_t)i * ss, *cv = rows.conv + (size_t)i * cs;
        if (fresh) memset(st, 0, ss * sizeof *st), memset(cv, 0, cs * sizeof *cv);
        else memcpy(st, c.state, ss * sizeof *st), memcpy(cv, c.conv, cs * sizeof *cv);
    }
    dn_layer_forward(r->d->be, out, &rows, &rows, a, v->ln1, p, NULL, d);
    for (int i = 0; i < r->N; i++) {
        const dn_cache c = slot_cache_of(r, l, ids[R + i]);
        memcpy(c.state, rows.state + (size_t)i * ss, ss * sizeof *c.state);
        memcpy(c.conv, rows.conv + (size_t)i * cs, cs * sizeof *c.conv);
    }
}

static void dn_forward(const dec_run *r, int l, const dec_layer *v, const void *const *w) {
    const dn_dims d = dn_dims_of(r->d->m, r->B, r->T);
    float *out;
    dn_acts a = acts_of(r, &d, v, &out);
    dn_params p = params_of((void *const *)w);
    dn_hook h;
    hook_of(r, l, &h, &p);
    dn_cache c;
    const dn_cache *in = NULL;
    if (r->kv || r->ks || ring_of(r))
        dn_host_only(r->d->be, "model.layer_types: a linear_attention layer's cache (decoding, "
                     "context parallelism)");
    if (ring_of(r)) {
        dn_ring_forward(r->d->be, ring_of(r), out, v->dn, v->ln1, &p, ring_seq(r), &d);
        return;
    }
    if (r->ks && r->slot < 0) {
        slots_rows_forward(r, l, out, &a, v, &p, &d);
        return;
    }
    if (r->ks) { /* a chunk of one slot */
        c = slot_cache_of(r, l, r->slot);
        in = r->p0 == r->ks->seg[r->slot] ? NULL : &c;
    } else if (r->kv) {
        kv_cache_of(r, l, &c, &in);
    }
    dn_layer_forward(r->d->be, out, in, r->kv ? &c : NULL, &a, v->ln1, &p,
                     r->kv ? NULL : r->d->a->seq, &d);
}

/* its output (after out_proj, in its slot) into r->scratch */
static void dn_out(const dec_run *r, int l, const dec_layer *v, const void *const *w) {
    (void)l, (void)w;
    const dn_dims d = dn_dims_of(r->d->m, r->B, r->T);
    float *out;
    acts_of(r, &d, v, &out);
    const tsr_backend *be = r->d->be;
    be->copy(be, r->scratch, out, (size_t)r->N * r->d->m->C * tsr_dtype_size(be->act));
}

/* from dout = d(its output) to a->dln = d(ln1) (written), unit u's gradients */
static void dn_backward(const dec_run *r, int l, const dec_layer *v, const dec_unit *u,
                        const void *dout) {
    const dn_dims d = dn_dims_of(r->d->m, r->B, r->T);
    tsr_acts *acts = r->d->a;
    float *out;
    const dn_acts a = acts_of(r, &d, v, &out);
    dn_params p = params_of((void *const *)u->w);
    const dn_params g = params_of((void *const *)u->g);
    dn_hook h;
    hook_of(r, l, &h, &p);
    r->d->be->zero(r->d->be, acts->dln, (size_t)r->N * r->d->m->C * tsr_dtype_size(r->d->be->act));
    if (ring_of(r))
        dn_ring_backward(r->d->be, ring_of(r), acts->dln, &g, dout, v->dn, v->ln1, &p,
                         ring_seq(r), acts->dn_bwd, &d);
    else
        dn_layer_backward(r->d->be, acts->dln, &g, dout, NULL, NULL, NULL, &a, v->ln1, &p,
                          acts->seq, acts->dn_bwd, &d);
}

/* ---- its activations, cache, FLOPs and backend entries -------------------------------- */

/* a layer's activations (dec_dn_floats), stacked with the attention group (an attention layer's
 * slot goes unused); the one backward slot */
static size_t dn_stride(const dec_plan *p) {
    return p->m->LL ? dec_stride(p, dec_dn_floats(p->m, p->be, p->B, p->T), sizeof(float)) : 0;
}

static void dn_plan(dec_plan *p, size_t b[TSR_A_COUNT]) {
    dec_plan_stack(p, b, TSR_A_DN, 1, model_act_group_layers(p->m, TSR_AG_ATTN), dn_stride(p),
                   sizeof(float));
    dec_plan_buffer(p, b, TSR_A_DNBWD, 1, dec_dn_backward_bytes(p->m, p->be, p->B, p->T));
}

static void dn_view(const dec_plan *p, const tsr_acts *a, int l, dec_layer *v) {
    v->dn = dec_stack_at(a->dn, model_act_group_slot(p->m, TSR_AG_ATTN, l), dn_stride(p),
                         sizeof(float));
}

static void dn_kv_view(const tsr_kv_cache *kv, const tsr_model *m, dec_layer *v) {
    (void)m;
    v->dn = kv->dn;
}

/* a sequence's state and convolution tail */
static size_t dn_cache_bytes(const tsr_model *m, const tsr_backend *be, int l, int cap) {
    (void)be, (void)l, (void)cap;
    return (dec_dn_cache_floats(m, 1) + dec_dn_cache_floats(m, 0)) * sizeof(float);
}

/* per value head and token, forward, in chunks of c (docs/mfu.md): the state's three products
 * (X_K S, q S, the update) 2 dk dv each, the chunk's K K^T, Q K^T (2 c dk each), the solve over
 * [V | K] (2 c (dk + dv)) and the scores times V (2 c dv); x 3 with the backward */
static double dn_flops(const tsr_model *m, int l, int T) {
    (void)l;
    const double c = T < DN_TRAIN_CHUNK ? T : DN_TRAIN_CHUNK, dk = m->dkl, dv = m->dvl;
    return 3.0 * m->HVl * (6.0 * dk * dv + 2.0 * c * (3.0 * dk + 2.0 * dv));
}

double model_dn_flops(const tsr_model *m, int T) {
    double sum = 0.0;
    for (int l = 0; l < m->L; l++)
        if (model_mixer(&m->cfg, l) == &kind_deltanet) sum += dn_flops(m, l, T);
    return sum;
}

static const char *dn_missing(const tsr_model *m, const tsr_backend *be) {
    const int on = m->LL > 0;
    const char *k = "model.layer_types (linear_attention)";
    const dec_need need[] = {
        {on, be->dn_conv_forward, k},      {on, be->dn_conv_backward, k},
        {on, be->dn_gates_forward, k},     {on, be->dn_gates_backward, k},
        {on, be->dn_silu_gate_forward, k}, {on, be->dn_silu_gate_backward, k},
        {on, be->dn_core_forward, k},      {on, be->dn_core_backward, k},
        {on, be->copy_rows, k},
    };
    return dec_need_missing(need, sizeof need / sizeof need[0]);
}

const tsr_layer_kind kind_deltanet = {
    .name = "gated_deltanet",
    .half = TSR_HALF_MIXER,
    .params = dn_rows,
    .n_params = sizeof dn_rows / sizeof *dn_rows,
    .keys = dn_keys,
    .serves = dn_serves,
    .layout = dn_layout,
    .heads = dn_heads,
    .init = dn_init,
    .forward = dn_forward,
    .out = dn_out,
    .backward = dn_backward,
    .acts = dn_plan,
    .view = dn_view,
    .kv_view = dn_kv_view,
    .cache_bytes = dn_cache_bytes,
    .flops = dn_flops,
    .missing = dn_missing,
};
