/* deltanet_layer.c — the Gated DeltaNet token mixer over a backend (deltanet_layer.h,
 * docs/deltanet.md): the projections, the RMSNorm, the convolution, the gates, the core and the
 * output gate through the backend's table (kernels/backend.h dn_*; the fp32 backend runs
 * kernels/cpu/cpu_deltanet.h's functions). The layer's buffers are fp32 (the fp32 backend's). */
#include "model/deltanet_layer.h"

#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "cpu/cpu_deltanet.h" /* cpu_deltanet_ckpt_floats: the saved states' floats */

static size_t dn_cd(const dn_dims *d) { return 2 * (size_t)d->HK * d->dk + (size_t)d->HV * d->dv; }

static tsr_dn_shape core_shape(const dn_dims *d) {
    const tsr_dn_shape s = {d->B, d->T, d->HK, d->HV, d->dk, d->dv, d->chunk};
    return s;
}

void dn_check(const dn_dims *d) {
    const struct { const char *name; int v, lo, hi; } dims[] = {
        {"B", d->B, 1, 1 << 20},   {"T", d->T, 1, 1 << 24},     {"C", d->C, 1, 1 << 20},
        {"HK", d->HK, 1, 4096},    {"HV", d->HV, d->HK, 4096},  {"dk", d->dk, 1, 4096},
        {"dv", d->dv, 1, 4096},    {"K", d->K, 1, 16},          {"chunk", d->chunk, 1, 4096}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v < dims[i].lo || dims[i].v > dims[i].hi)
            tsr_die(TSR_EXIT_USAGE, "deltanet layer: %s = %d: expected %d to %d", dims[i].name,
                    dims[i].v, dims[i].lo, dims[i].hi);
    if (d->HV % d->HK)
        tsr_die(TSR_EXIT_USAGE, "deltanet layer: HV = %d value heads: expected a multiple of "
                "HK = %d query/key heads", d->HV, d->HK);
}

/* the room (4-byte units) of n elements of be's act type, or fp32 ones (f32), each buffer a
 * multiple of be's alignment; be NULL: the fp32 host layout (n) */
static size_t room(const tsr_backend *be, size_t n, int f32) {
    if (!be) return n;
    const size_t es = f32 ? sizeof(float) : tsr_dtype_size(be->act),
                 al = be->align > sizeof(float) ? be->align : sizeof(float);
    return (n * es + al - 1) / al * al / sizeof(float);
}

/* the room of each of dn_acts' buffers, in the struct's order: act elements but beta, g, rstd
 * and the core's saved states (fp32) */
static void acts_sizes(const tsr_backend *be, size_t n[15], const dn_dims *d) {
    const size_t N = (size_t)d->B * d->T, cd = dn_cd(d), kd = (size_t)d->HK * d->dk,
                 vd = (size_t)d->HV * d->dv, hv = (size_t)d->HV;
    const tsr_dn_shape s = core_shape(d);
    const size_t all[15] = {N * cd, N * cd, N * kd, N * kd, N * vd, N * vd, N * vd, N * vd,
                            N * vd, N * hv, N * hv, N * hv, N * hv, N * hv,
                            be ? be->dn_ckpt_floats(&s) : cpu_deltanet_ckpt_floats(&s)};
    for (int i = 0; i < 15; i++) n[i] = room(be, all[i], i >= 11);
}

/* dn_acts' buffers in their order */
static void acts_fields(dn_acts *a, float **f[15]) {
    float **all[15] = {&a->pre,   &a->qkv, &a->q, &a->k,    &a->v, &a->z,    &a->core, &a->normed,
                       &a->gated, &a->b,   &a->a, &a->beta, &a->g, &a->rstd, &a->ckpt};
    memcpy(f, all, sizeof all);
}

/* the sum of a buffer list's k sizes */
static size_t total_of(const size_t *n, int k) {
    size_t sum = 0;
    for (int i = 0; i < k; i++) sum += n[i];
    return sum;
}

size_t dn_acts_floats(const tsr_backend *be, const dn_dims *d) {
    size_t n[15];
    acts_sizes(be, n, d);
    return total_of(n, 15);
}

void dn_acts_at(const tsr_backend *be, dn_acts *a, float *base, const dn_dims *d) {
    size_t n[15];
    float **f[15];
    acts_sizes(be, n, d);
    acts_fields(a, f);
    for (int i = 0; i < 15; i++) *f[i] = base, base += n[i];
}

void dn_acts_alloc(dn_acts *a, const dn_dims *d) {
    size_t n[15];
    float **f[15];
    acts_sizes(NULL, n, d);
    acts_fields(a, f);
    for (int i = 0; i < 15; i++) *f[i] = tsr_calloc(n[i] + 1, sizeof(float));
}

void dn_acts_free(dn_acts *a) {
    float *all[] = {a->pre, a->qkv, a->q,    a->k, a->v,    a->z, a->core, a->normed,
                    a->gated, a->b, a->a, a->beta, a->g, a->rstd, a->ckpt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    memset(a, 0, sizeof *a);
}

void dn_cache_alloc(dn_cache *c, const dn_dims *d) {
    c->state = tsr_calloc((size_t)d->B * d->HV * d->dk * d->dv, sizeof(float));
    c->conv = tsr_calloc((size_t)d->B * (d->K - 1) * dn_cd(d) + 1, sizeof(float));
}

void dn_cache_free(dn_cache *c) {
    free(c->state), free(c->conv);
    c->state = c->conv = NULL;
}

void dn_host_only(const tsr_backend *be, const char *what) {
    if (!be->host || be->act != TSR_DT_F32)
        tsr_die(TSR_EXIT_USAGE, "deltanet layer: %s runs on the fp32 CPU backend only, not on %s "
                "(docs/deltanet.md \"CUDA\")", what, be->name);
}

/* sequence b's last document's first row, or below 0 (it began before this pass): where the
 * convolution's tail (its last K-1 inputs) starts being the next pass's */
static int tail_lo(const int32_t *seq, int b, const dn_dims *d) {
    const int32_t *sq = seq ? seq + (size_t)b * d->T : NULL;
    int lo = d->T - 1;
    while (lo > d->T - d->K && !(sq && lo > 0 && sq[lo] != sq[lo - 1])) lo--;
    return lo;
}

/* where row i (< K-1) of sequence b's convolution tail comes from: row T-(K-1)+i of pre, or of
 * hist below row 0 (NULL without hist), or NULL before the last document's start lo (tail_lo's).
 * As strchr, const in, not out: the backward's rows are its own to add into. */
static float *tail_row(const float *pre, const float *hist, int b, int i, int lo, const dn_dims *d) {
    const size_t cd = dn_cd(d);
    const int r = d->T - (d->K - 1) + i;
    const float *row = r < lo ? NULL
                     : r >= 0 ? pre + ((size_t)b * d->T + r) * cd
                     : hist ? hist + ((size_t)b * (d->K - 1) + (d->K - 1 + r)) * cd : NULL;
    return (float *)row;
}

/* the convolution's inputs of rows T-(K-1) .. T-1 of each sequence (hist's below row 0), zeros
 * before the last document's start: what the next pass's rows continue */
static void conv_tail(float *tail, const float *pre, const float *hist, const int32_t *seq,
                      const dn_dims *d) {
    const size_t cd = dn_cd(d);
    for (int b = 0; b < d->B; b++) {
        const int lo = tail_lo(seq, b, d);
        for (int i = 0; i < d->K - 1; i++) {
            float *dst = tail + ((size_t)b * (d->K - 1) + i) * cd;
            const float *src = tail_row(pre, hist, b, i, lo, d);
            for (size_t c = 0; c < cd; c++) dst[c] = src ? src[c] : 0.0f;
        }
    }
}

/* conv_tail's backward: dtail (B, K-1, CD) added into dpre's rows and dhist's (or NULL) */
static void conv_tail_backward(float *dpre, float *dhist, const float *dtail, const int32_t *seq,
                               const dn_dims *d) {
    const size_t cd = dn_cd(d);
    for (int b = 0; b < d->B; b++) {
        const int lo = tail_lo(seq, b, d);
        for (int i = 0; i < d->K - 1; i++) {
            const float *src = dtail + ((size_t)b * (d->K - 1) + i) * cd;
            float *dst = tail_row(dpre, dhist, b, i, lo, d);
            if (dst)
                for (size_t c = 0; c < cd; c++) dst[c] += src[c];
        }
    }
}

/* qkv (N, CD) rows <-> q, k (N, HK dk), v (N, HV dv), act elements, by the backend's row copies
 * (to_parts: out of qkv; else into qkv, which the backward holds at zeros until then) */
static void qkv_split(const tsr_backend *be, float *qkv, float *q, float *k, float *v,
                      const dn_dims *d, int to_parts) {
    const size_t N = (size_t)d->B * d->T, es = tsr_dtype_size(be->act), cd = dn_cd(d) * es,
                 kd = (size_t)d->HK * d->dk * es, vd = (size_t)d->HV * d->dv * es;
    char *row = (char *)qkv, *parts[3] = {(char *)q, (char *)k, (char *)v};
    const size_t off[3] = {0, kd, 2 * kd}, len[3] = {kd, kd, vd};
    for (int i = 0; i < 3; i++) {
        if (to_parts) be->copy_rows(be, parts[i], len[i], row + off[i], cd, len[i], N);
        else be->copy_rows(be, row + off[i], cd, parts[i], len[i], len[i], N);
    }
}

/* the four input projections of x (and their adapters) */
static void forward_in(const tsr_backend *be, dn_acts *a, const float *x, const dn_params *p,
                       const dn_dims *d) {
    const int N = d->B * d->T;
    float *outs[4] = {a->pre, a->z, a->b, a->a};
    const float *ws[4] = {p->wqkv, p->wz, p->wb, p->wa};
    const int ocs[4] = {(int)dn_cd(d), d->HV * d->dv, d->HV, d->HV};
    for (int k = 0; k < 4; k++)
        be->matmul_forward(be, outs[k], NULL, x, ws[k], NULL, N, d->C, ocs[k], TSR_GELU_TANH);
    if (p->hook)
        for (int k = 0; k < 4; k++) p->hook->fwd(p->hook, (dn_proj)k, outs[k], x, N);
}

void dn_layer_forward(const tsr_backend *be, float *out, const dn_cache *in, dn_cache *next,
                      dn_acts *a, const float *x, const dn_params *p, const int32_t *seq,
                      const dn_dims *d) {
    const int N = d->B * d->T, cd = (int)dn_cd(d), vd = d->HV * d->dv;
    const tsr_dn_shape s = core_shape(d);
    const float *hist = in ? in->conv : NULL;
    if (in || next)
        dn_host_only(be, "a pass that carries its cache (decoding, context parallelism)");
    forward_in(be, a, x, p, d);
    be->dn_conv_forward(be, a->qkv, a->pre, hist, p->conv, seq, d->B, d->T, cd, d->K);
    qkv_split(be, a->qkv, a->q, a->k, a->v, d, 1);
    be->dn_gates_forward(be, a->beta, a->g, a->b, a->a, p->a_log, p->dt_bias, N, d->HV);
    be->dn_core_forward(be, a->core, next ? next->state : NULL, a->ckpt, a->q, a->k, a->v, a->g,
                        a->beta, in ? in->state : NULL, seq, &s);
    be->rmsnorm_forward(be, a->normed, a->rstd, a->core, p->normw, N * d->HV, d->dv, d->eps);
    be->dn_silu_gate_forward(be, a->gated, a->normed, a->z, (size_t)N * vd);
    be->matmul_forward(be, out, NULL, a->gated, p->wo, NULL, N, vd, d->C, TSR_GELU_TANH);
    if (p->hook) p->hook->fwd(p->hook, DN_PROJ_O, out, a->gated, N);
    if (next) { /* through a copy: next may be in */
        const size_t n = (size_t)d->B * (d->K - 1) * cd;
        float *tail = tsr_malloc(n * sizeof *tail + 1);
        conv_tail(tail, a->pre, hist, seq, d);
        memcpy(next->conv, tail, n * sizeof *tail);
        free(tail);
    }
}

/* the backward's gradients of the activations */
typedef struct dn_dacts {
    float *gated, *normed, *core, *z, *q, *k, *v, *beta, *g, *b, *a, *qkv, *pre;
} dn_dacts;

/* the room of each of dn_dacts' buffers, in the struct's order (as acts_sizes: beta, g fp32) */
static void dacts_sizes(const tsr_backend *be, size_t n[13], const dn_dims *d) {
    const size_t N = (size_t)d->B * d->T, cd = dn_cd(d), kd = (size_t)d->HK * d->dk,
                 vd = (size_t)d->HV * d->dv, hv = (size_t)d->HV;
    const size_t all[13] = {N * vd, N * vd, N * vd, N * vd, N * kd, N * kd, N * vd,
                            N * hv, N * hv, N * hv, N * hv, N * cd, N * cd};
    for (int i = 0; i < 13; i++) n[i] = room(be, all[i], i == 7 || i == 8);
}

/* the core backward's scratch on be, a multiple of its alignment */
static size_t scratch_room(const tsr_backend *be, const dn_dims *d) {
    const tsr_dn_shape s = core_shape(d);
    return room(be, (be->dn_scratch_bytes(&s) + sizeof(float) - 1) / sizeof(float), 1);
}

size_t dn_backward_bytes(const tsr_backend *be, const dn_dims *d) {
    size_t n[13];
    dacts_sizes(be, n, d);
    return (total_of(n, 13) + scratch_room(be, d)) * sizeof(float);
}

/* the slot work (dn_backward_bytes) carved into the buffers, zeroed, and the core's scratch
 * after them (*scratch; NULL: the core has none) */
static dn_dacts dacts_at(const tsr_backend *be, void *work, void **scratch, const dn_dims *d) {
    size_t n[13];
    dacts_sizes(be, n, d);
    float *p = work;
    be->zero(be, p, total_of(n, 13) * sizeof(float));
    *scratch = scratch_room(be, d) ? p + total_of(n, 13) : NULL;
    dn_dacts g;
    float **f[13] = {&g.gated, &g.normed, &g.core, &g.z, &g.q, &g.k, &g.v,
                     &g.beta,  &g.g,      &g.b,    &g.a, &g.qkv, &g.pre};
    for (int i = 0; i < 13; i++) *f[i] = p, p += n[i];
    return g;
}

/* from dout to the core's output: the output projection, the SiLU gate, the RMSNorm */
static void backward_out(const tsr_backend *be, dn_dacts *g, const dn_params *grad,
                         const float *dout, const dn_acts *a, const dn_params *p,
                         const dn_dims *d) {
    const int N = d->B * d->T, vd = d->HV * d->dv;
    be->matmul_backward(be, g->gated, grad->wo, NULL, dout, a->gated, p->wo, N, vd, d->C,
                        TSR_GRAD_ADD);
    if (p->hook) p->hook->bwd(p->hook, DN_PROJ_O, g->gated, dout, a->gated, N);
    be->dn_silu_gate_backward(be, g->normed, g->z, g->gated, a->normed, a->z, (size_t)N * vd);
    be->rmsnorm_backward(be, g->core, grad->normw, g->normed, a->core, p->normw, a->rstd,
                         N * d->HV, d->dv);
}

/* the four input projections' backward (and their adapters') into dx */
static void backward_in(const tsr_backend *be, float *dx, const dn_params *grad,
                        const dn_dacts *g, const float *x, const dn_params *p, const dn_dims *d) {
    const int N = d->B * d->T;
    const float *douts[4] = {g->pre, g->z, g->b, g->a}, *ws[4] = {p->wqkv, p->wz, p->wb, p->wa};
    float *dws[4] = {grad->wqkv, grad->wz, grad->wb, grad->wa};
    const int ocs[4] = {(int)dn_cd(d), d->HV * d->dv, d->HV, d->HV};
    for (int k = 0; k < 4; k++)
        be->matmul_backward(be, dx, dws[k], NULL, douts[k], x, ws[k], N, d->C, ocs[k],
                            TSR_GRAD_ADD);
    if (p->hook)
        for (int k = 0; k < 4; k++) p->hook->bwd(p->hook, (dn_proj)k, dx, douts[k], x, N);
}

void dn_layer_backward(const tsr_backend *be, float *dx, const dn_params *grad, const float *dout,
                       const dn_cache *dnext, dn_cache *din, const dn_cache *in, const dn_acts *a,
                       const float *x, const dn_params *p, const int32_t *seq, void *work,
                       const dn_dims *d) {
    const int N = d->B * d->T, cd = (int)dn_cd(d);
    const tsr_dn_shape s = core_shape(d);
    if (in || din || dnext)
        dn_host_only(be, "a backward that carries its cache (context parallelism)");
    void *scratch;
    dn_dacts g = dacts_at(be, work, &scratch, d);
    backward_out(be, &g, grad, dout, a, p, d);
    be->dn_core_backward(be, g.q, g.k, g.v, g.g, g.beta, din ? din->state : NULL, g.core,
                         dnext ? dnext->state : NULL, a->ckpt, a->q, a->k, a->v, a->g, a->beta,
                         seq, scratch, &s);
    be->dn_gates_backward(be, g.b, g.a, grad->a_log, grad->dt_bias, g.beta, g.g, a->b, a->a,
                          p->a_log, p->dt_bias, N, d->HV);
    qkv_split(be, g.qkv, g.q, g.k, g.v, d, 0);
    if (dnext) conv_tail_backward(g.pre, din ? din->conv : NULL, dnext->conv, seq, d);
    be->dn_conv_backward(be, g.pre, din ? din->conv : NULL, grad->conv, g.qkv, a->pre,
                         in ? in->conv : NULL, p->conv, seq, d->B, d->T, cd, d->K);
    backward_in(be, dx, grad, &g, x, p, d);
}
