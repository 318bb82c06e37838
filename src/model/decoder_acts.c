/* decoder_acts.c — the decoder's activation plan (decoder.h, decoder_int.h; docs/decoder.md):
 * the buffers of tsr_acts for B x T on a backend (the frame's here, each layer kind's by its
 * row's acts slot), each layer's slots in their stacks (the kinds' by their view slots), their
 * allocation and release, the compressed activations (model.activation_compression = "fp8"), the
 * backend entries a model needs. The sequence that fills them is decoder.c's.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/decoder_int.h"
#include "model/layer_kind.h"
#include "model/model_ring.h"
#include "model/model_tp.h"

/* ---- the activation plan ------------------------------------------------------------------- */

/* Elements between consecutive layers of a stack of n elements of elem bytes: n rounded up to
 * whole blocks of the backend's alignment. On CUDA (256 bytes) every layer's slice then starts as
 * aligned as the buffer, so cuBLASLt (which caches its algorithm by the pointers' alignment) runs
 * the same algorithm for every layer and checkpoint slot: checkpointed runs stay bit-identical. */
static size_t layer_stride(size_t n, size_t elem, size_t align) {
    return (n * elem + align - 1) / align * align / elem;
}

/* model.activation_compression = "fp8" (docs/cuda.md "Compressed activations"): the saved
 * tensors a layer keeps as E4M3 (the linear layers' inputs and the MLP's hidden layer), each with
 * its one-layer working copy (bf), its E4M3 stack (q) and its activation checkpointing group */
#define NCOMP 5
static const struct { tsr_act_id bf, q; tsr_act_group g; } comp[NCOMP] = {
    {TSR_A_LN1, TSR_A_Q_LN1, TSR_AG_LN1},   {TSR_A_ATTY, TSR_A_Q_ATTY, TSR_AG_ATTN},
    {TSR_A_LN2, TSR_A_Q_LN2, TSR_AG_RES2},  {TSR_A_FCH, TSR_A_Q_FCH, TSR_AG_MLP},
    {TSR_A_FCHG, TSR_A_Q_FCHG, TSR_AG_MLP},
};

/* on where the backend has the casts (the CUDA backend; a host model of a CUDA run, e.g. its
 * sampler, keeps its fp32 activations as computed) */
static int comp_on(const tsr_model *m, const tsr_backend *be) {
    return m->cfg.activation_compression == TSR_ACTCOMP_FP8 && be->act_compress;
}

dec_plan dec_plan_of(const tsr_model *m, const tsr_backend *be, int B, int T) {
    const size_t N = (size_t)B * T, sp = m->tp && m->tp->sp ? (size_t)m->tp->T : 1;
    return (dec_plan){.m = m, .be = be, .B = B, .T = T, .N = N, .Nf = N / sp,
                      .e = tsr_dtype_size(be->act), .comp = comp_on(m, be)};
}

size_t dec_stride(const dec_plan *p, size_t n, size_t elem) {
    return layer_stride(n, elem, p->be->align);
}

void dec_plan_buffer(dec_plan *p, size_t bytes[TSR_A_COUNT], tsr_act_id id, int on,
                     size_t bytes1) {
    (void)p;
    bytes[id] = on ? bytes1 : 0;
}

void dec_plan_stack(dec_plan *p, size_t bytes[TSR_A_COUNT], tsr_act_id id, int on, size_t layers,
                    size_t stride, size_t elem) {
    bytes[id] = on ? elem * layers * stride : 0;
    p->stacked[id] = 1;
}

void *dec_stack_at(const void *buf, size_t slot, size_t stride, size_t elem) {
    return buf ? (char *)buf + slot * stride * elem : NULL;
}

const char *dec_need_missing(const dec_need *need, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (need[i].needed && !need[i].entry) return need[i].what;
    return NULL;
}

/* comp[i]'s elements per position */
static size_t comp_width(const tsr_model *m, int i) {
    const int w[NCOMP] = {m->C, m->QD, m->C, m->FW, m->F};
    return (size_t)w[i];
}

/* layers of a compressed tensor's E4M3 stack: those that keep group g */
static size_t comp_layers(const tsr_model *m, tsr_act_group g) {
    return (size_t)(m->L - (model_act_group_dropped(m, g) ? m->n_ckpt : 0));
}

/* layer l's slot of a compressed tensor's E4M3 stack, -1 when l recomputes group g instead */
static long comp_slot(const tsr_model *m, tsr_act_group g, int l) {
    if (!model_act_group_dropped(m, g)) return l;
    return model_ckpt_layer(m, l) ? -1 : (long)model_act_group_slot(m, g, l) - 1;
}

/* the compressed plan: each working copy one layer of its stack's, each E4M3 stack (bytes) over
 * the layers that keep the group, the scales (L, NCOMP, 4) fp32 */
static void comp_plan(const tsr_model *m, const tsr_backend *be, size_t N, size_t b[TSR_A_COUNT]) {
    const size_t e = tsr_dtype_size(be->act), al = be->align;
    for (int i = 0; i < NCOMP; i++) {
        const size_t n = N * comp_width(m, i);
        if (!b[comp[i].bf]) continue;
        b[comp[i].bf] = e * layer_stride(n, e, al);
        b[comp[i].q] = comp_layers(m, comp[i].g) * layer_stride(n, 1, al);
    }
    b[TSR_A_Q_SCALES] = (size_t)m->L * NCOMP * 4 * sizeof(float);
}

/* the compressed plan of a pass (comp_plan), its stacks marked */
static void comp_acts(dec_plan *p, size_t b[TSR_A_COUNT]) {
    comp_plan(p->m, p->be, p->N, b);
    for (int i = 0; i < NCOMP; i++) p->stacked[comp[i].q] = 1;
    p->stacked[TSR_A_Q_SCALES] = 1;
}

/* tsr_acts' named view lies over buf[] in tsr_act_id order (model.h) */
#define NAMED_AT(field, id) (offsetof(tsr_acts, field) == offsetof(tsr_acts, buf) + (id) * sizeof(void *))
_Static_assert(NAMED_AT(encoded, TSR_A_ENCODED) && NAMED_AT(att, TSR_A_ATT) &&
               NAMED_AT(residual3, TSR_A_RES3) && NAMED_AT(probs, TSR_A_LOGITS) &&
               NAMED_AT(dlosses, TSR_A_DLOSSES) && NAMED_AT(seq, TSR_A_SEQ) &&
               NAMED_AT(greedy, TSR_A_GREEDY) && NAMED_AT(moe_logits, TSR_A_MOE_LOGITS) &&
               NAMED_AT(moe_offs, TSR_A_MOE_OFFS) && NAMED_AT(moe_dshg, TSR_A_MOE_DSHG) &&
               NAMED_AT(dn, TSR_A_DN) && NAMED_AT(dagate, TSR_A_DAGATE) &&
               NAMED_AT(dn_bwd, TSR_A_DNBWD) && NAMED_AT(tp_dy, TSR_A_TP_DY),
               "tsr_acts: the named buffers vs tsr_act_id");
#undef NAMED_AT

/* The frame's buffers: the embedding's output, the block's norms and residuals (ln1 .. res2 ..
 * ln2 stacked with their groups, residual3 over every layer: where a recomputation starts), the
 * final norm, the logits and losses, the projections' scratch, the residual's and a norm's
 * gradients; the document mask's segments and positions; a device backend's copies of the host
 * token arrays; tensor parallelism's gathered rows. The norms', residuals' and the residual
 * gradient's rows are the frame's (Nf: 1/T of them under sequence parallelism), the others
 * every row. */
static void frame_acts(dec_plan *p, size_t b[TSR_A_COUNT]) {
    const tsr_model *m = p->m;
    const size_t L = m->L, C = m->C, N = p->N, e = p->e, f = sizeof(float), i4 = sizeof(int32_t);
    const size_t Ln1 = model_act_group_layers(m, TSR_AG_LN1), Nf = p->Nf;
    const size_t Lr2 = model_act_group_layers(m, TSR_AG_RES2);
    const size_t nc = dec_stride(p, Nf * C, e), n = dec_stride(p, Nf, f);
    const int sp = m->tp && m->tp->sp;
    const int ln = m->cfg.norm == TSR_NORM_LAYERNORM, cp = m->cpN > 1;
    const int doc = m->cfg.attn_mask == TSR_MASK_DOCUMENT;
    const int learned = m->params_info[TSR_P_WPE].numel > 0, rope = m->cfg.pos == TSR_POS_ROPE;
    dec_plan_stack(p, b, TSR_A_LN1, 1, Ln1, nc, e);
    dec_plan_stack(p, b, TSR_A_LN1_MEAN, ln, Ln1, n, f);
    dec_plan_stack(p, b, TSR_A_LN1_RSTD, 1, Ln1, n, f);
    dec_plan_stack(p, b, TSR_A_RES2, 1, Lr2, nc, e);
    dec_plan_stack(p, b, TSR_A_LN2, 1, Lr2, nc, e);
    dec_plan_stack(p, b, TSR_A_LN2_MEAN, ln, Lr2, n, f);
    dec_plan_stack(p, b, TSR_A_LN2_RSTD, 1, Lr2, n, f);
    dec_plan_stack(p, b, TSR_A_RES3, 1, L, nc, e);
    const struct { tsr_act_id id; int on; size_t bytes; } one[] = {
        {TSR_A_ENCODED, 1, e * Nf * C},   {TSR_A_LNF, 1, e * Nf * C},
        {TSR_A_LNF_MEAN, ln, f * Nf},     {TSR_A_LNF_RSTD, 1, f * Nf},
        {TSR_A_LOGITS, 1, e * N * (size_t)m->Vp}, {TSR_A_LOSSES, 1, f * N},
        {TSR_A_SCRATCH, 1, e * N * C},    {TSR_A_DRES, 1, e * Nf * C},
        {TSR_A_TP_X, sp, e * N * C},      {TSR_A_TP_DY, sp, e * N * C},
        {TSR_A_DLN, 1, e * N * C},        {TSR_A_DLOSSES, 1, f * N},
        {TSR_A_SEQ, doc && !cp, i4 * N},
        /* a ring's positions are never 0.. T-1 (its two chunks lie apart) */
        {TSR_A_POS, (doc || cp) && (learned || rope), i4 * N},
        {TSR_A_TOKENS, !p->be->host, N * i4}, {TSR_A_TARGETS, !p->be->host, N * i4},
        {TSR_A_GREEDY, !p->be->host, N * i4},
    };
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
        dec_plan_buffer(p, b, one[i].id, one[i].on, one[i].bytes);
}

/* Bytes of every buffer of tsr_acts for B x T on be (0: not allocated): the frame's, each kind's
 * of the model, the compressed ones; with context parallelism, for this rank's T / cpN positions
 * of each sequence, and the ring's buffers. stacked (or NULL): which are per-layer stacks. */
static void act_plan(const tsr_model *m, const tsr_backend *be, int B, int Tw,
                     size_t bytes[TSR_A_COUNT], unsigned char stacked[TSR_A_COUNT]) {
    const int cp = m->cpN > 1;
    dec_plan p = dec_plan_of(m, be, B, Tw / (cp ? m->cpN : 1));
    memset(bytes, 0, TSR_A_COUNT * sizeof *bytes);
    frame_acts(&p, bytes);
    for (const tsr_layer_kind *const *k = tsr_layer_kinds; *k; k++)
        if ((*k)->acts && model_kind_on(m, *k)) (*k)->acts(&p, bytes);
    if (p.comp) comp_acts(&p, bytes);
    if (cp) {
        const tsr_ring_dims rd = ring_dims_of(m);
        ring_act_plan(be, m->cpN, B, Tw, &rd, m->cfg.attn_mask == TSR_MASK_DOCUMENT,
                      bytes + TSR_A_RING_KV);
    }
    if (stacked) memcpy(stacked, p.stacked, sizeof p.stacked);
}

size_t dec_acts_bytes(const tsr_model *m, const tsr_backend *be, int B, int T) {
    size_t b[TSR_A_COUNT], sum = 0;
    act_plan(m, be, B, T, b, NULL);
    for (int i = 0; i < TSR_A_COUNT; i++) sum += (b[i] + be->align - 1) / be->align * be->align;
    return sum;
}

size_t dec_layer_acts_bytes(const tsr_model *m, const tsr_backend *be, int B, int T, int fp8) {
    tsr_model one = *m; /* the same model without checkpointing, compressed or not */
    one.n_ckpt = 0;
    one.cfg.activation_compression = fp8 ? TSR_ACTCOMP_FP8 : TSR_ACTCOMP_NONE;
    size_t b[TSR_A_COUNT], sum = 0;
    unsigned char stacked[TSR_A_COUNT];
    act_plan(&one, be, B, T, b, stacked);
    for (int i = 0; i < TSR_A_COUNT; i++) sum += stacked[i] ? b[i] : 0;
    if (comp_on(&one, be)) /* the working copies: one layer's for the whole model */
        for (int i = 0; i < NCOMP; i++) sum -= b[comp[i].bf];
    return sum / (size_t)m->L;
}

/* layer l's frame buffers, then its kinds' (each row's view) */
dec_layer dec_layer_at(const tsr_model *m, const tsr_backend *be, const tsr_acts *a, int l) {
    const dec_plan p = dec_plan_of(m, be, a->B, a->T); /* the allocated B x T */
    const size_t e = p.e, f = sizeof(float);
    const size_t nc = dec_stride(&p, p.Nf * m->C, e), n = dec_stride(&p, p.Nf, f);
    const size_t s1 = model_act_group_slot(m, TSR_AG_LN1, l);
    const size_t s2 = model_act_group_slot(m, TSR_AG_RES2, l);
    const size_t c1 = p.comp ? 0 : s1, c2 = p.comp ? 0 : s2; /* compressed: the working copy */
    dec_layer v = {
        .x = l ? dec_stack_at(a->residual3, (size_t)(l - 1), nc, e) : a->buf[TSR_A_ENCODED],
        .ln1 = dec_stack_at(a->ln1, c1, nc, e), .ln1m = dec_stack_at(a->ln1_mean, s1, n, f),
        .ln1r = a->ln1_rstd + s1 * n, .res2 = dec_stack_at(a->residual2, s2, nc, e),
        .ln2 = dec_stack_at(a->ln2, c2, nc, e), .ln2m = dec_stack_at(a->ln2_mean, s2, n, f),
        .ln2r = a->ln2_rstd + s2 * n, .res3 = dec_stack_at(a->residual3, (size_t)l, nc, e),
    };
    for (const tsr_layer_kind *const *k = tsr_layer_kinds; *k; k++)
        if ((*k)->view && model_kind_on(m, *k)) (*k)->view(&p, a, l, &v);
    return v;
}

/* Every layer's slice of every stack starts on the backend's alignment (layer_stride): checked
 * once per allocation. */
static void check_layout(const tsr_model *m, const tsr_backend *be, const tsr_acts *a) {
    if (be->align <= 1) return;
    for (int l = 0; l < m->L; l++) {
        dec_layer v = dec_layer_at(m, be, a, l);
        const void *p[] = {v.x,    v.ln1,  v.qkv,  v.qkvr, v.atty, v.res2, v.ln2,  v.fch,
                           v.fchg, v.res3, v.ln1m, v.ln1r, v.qknr, v.att,  v.ln2m, v.ln2r,
                           v.mlg,  v.xg,   v.h,    v.hg,   v.y,    v.sh,   v.shg,  v.probs,
                           v.lse,  v.wts,  v.stats, v.idx, v.rows, v.slot, v.offs, v.dn};
        for (size_t k = 0; k < sizeof p / sizeof p[0]; k++)
            if ((uintptr_t)p[k] % be->align != 0)
                tsr_die(TSR_EXIT_INTERNAL, "decoder: layer %d's activation %zu at %p is not "
                        "%zu-byte aligned (B=%d T=%d)", l, k, p[k], be->align, a->B, a->T);
    }
}

void dec_check_backend(const tsr_model *m, const tsr_backend *be) {
    const tsr_model_config *c = &m->cfg;
    const int rms = c->norm == TSR_NORM_RMSNORM, cp = m->cpN > 1;
    const char *rk = "model.norm = \"rmsnorm\"", *ck = "parallel.context > 1";
    const dec_need need[] = { /* the frame's */
        {rms, be->rmsnorm_forward, rk},
        {rms, be->residual_rmsnorm_forward, rk},
        {rms, be->rmsnorm_backward, rk},
        {c->embed_scale != TSR_EMB_SCALE_NONE, be->scale_act, "model.embed_scale"},
        {c->norm_placement == TSR_NPLACE_POST, be->add_act, "model.norm_placement = \"post\""},
        {c->part.no_head, be->add_act, "parallel.pipeline > 1"},
        {m->lora != NULL, be->lora_forward, "lora.rank > 0"},
        {m->lora != NULL, be->lora_backward, "lora.rank > 0"},
        {cp, be->ring_forward, ck}, {cp, be->ring_backward, ck}, {cp, be->f32_to_act, ck},
        {cp, be->add_f32, ck},      {cp, be->copy_rows, ck},
    };
    const char *what = dec_need_missing(need, sizeof need / sizeof need[0]);
    for (const tsr_layer_kind *const *k = tsr_layer_kinds; *k && !what; k++)
        if ((*k)->missing && model_kind_on(m, *k)) what = (*k)->missing(m, be);
    if (what)
        tsr_die(TSR_EXIT_USAGE, "%s: the %s backend does not have it yet (docs/models.md)", what,
                be->name);
}

int dec_try_alloc_acts(const tsr_model *m, const tsr_backend *be, tsr_acts *a, int B, int T) {
    size_t b[TSR_A_COUNT];
    dec_check_backend(m, be);
    dec_free_acts(be, a);
    act_plan(m, be, B, T, b, NULL);
    for (int i = 0; i < TSR_A_COUNT; i++)
        if (b[i] && !(a->buf[i] = be->try_alloc(be, b[i]))) {
            dec_free_acts(be, a); /* nothing half-made stays */
            return -1;
        }
    T /= m->cpN > 1 ? m->cpN : 1; /* (context parallelism: this rank's share) */
    if (!be->host) { /* host staging: a failure backs off like the device buffers, never exits */
        size_t N = (size_t)B * T;
        a->seq_host = malloc(N * sizeof(int32_t));
        a->pos_host = malloc(N * sizeof(int32_t));
        a->losses_host = malloc(N * sizeof(float));
        a->dlosses_host = malloc(N * sizeof(float));
        if (!a->seq_host || !a->pos_host || !a->losses_host || !a->dlosses_host) {
            dec_free_acts(be, a);
            return -1;
        }
    }
    a->B = B;
    a->T = T;
    check_layout(m, be, a);
    return 0;
}

void dec_free_acts(const tsr_backend *be, tsr_acts *a) {
    for (int i = 0; i < TSR_A_COUNT; i++) {
        if (a->buf[i]) be->free(be, a->buf[i]);
        a->buf[i] = NULL;
    }
    free(a->seq_host), free(a->pos_host), free(a->losses_host), free(a->dlosses_host);
    a->seq_host = a->pos_host = NULL;
    a->losses_host = a->dlosses_host = NULL;
    a->B = a->T = 0;
    a->dlogits = 0;
}

/* model.activation_compression: layer l's compressed tensor i, its working copy (bf), its E4M3
 * slot (q) and its scales (sc); 0 where the layer keeps none (it recomputes the group, a MoE
 * layer's dense MLP buffers, no compression; a decode step keeps none: its caller's test) */
static int comp_at(const tsr_decoder *d, int l, int i, void **bf, void **q, float **sc) {
    const tsr_model *m = d->m;
    const tsr_acts *a = d->a;
    const long slot = !comp_on(m, d->be) ? -1 : comp_slot(m, comp[i].g, l);
    if (slot < 0 || !a->buf[comp[i].bf] || (comp[i].g == TSR_AG_MLP && model_moe_layer(m, l)))
        return 0;
    const size_t n = (size_t)a->B * (size_t)a->T * comp_width(m, i); /* the allocated stride */
    *bf = a->buf[comp[i].bf];
    *q = (char *)a->buf[comp[i].q] + (size_t)slot * layer_stride(n, 1, d->be->align);
    *sc = a->q_scales + ((size_t)l * NCOMP + (size_t)i) * 4;
    return 1;
}

/* The compressed tensors layer l keeps: to E4M3 after its forward (save: its last read of them),
 * or back into the working copies before its backward and its recomputation */
void dec_comp_move(const tsr_decoder *d, int l, int N, int save) {
    const tsr_backend *be = d->be;
    void *bf, *q;
    float *sc;
    for (int i = 0; i < NCOMP; i++) {
        if (!comp_at(d, l, i, &bf, &q, &sc)) continue;
        const size_t n = (size_t)N * comp_width(d->m, i);
        if (save) be->act_compress(be, q, sc, bf, n);
        else be->act_decompress(be, bf, q, sc, n);
    }
}

