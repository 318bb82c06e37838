/* cpu_backend.c — the fp32 backend of backend.h over an op table (ops.h): host memory, fp32
 * activations and weights. Each fused op is the unfused sequence of table calls written beside it,
 * so the decoder computes with it exactly what those calls compute one by one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "cpu_deltanet.h"
#include "cpu_mla.h"
#include "cpu_moe_route.h"

size_t tsr_dtype_size(tsr_dtype t) { return t == TSR_DT_BF16 ? 2 : 4; }

#define OPS(be) ((const tsr_ops *)(be)->ctx)

/* TSR_GRAD_SET on the fp32 ops, which accumulate: zero the n floats of dinp first (OpenBLAS's
 * beta = 0 would zero C in a pass of its own too, so nothing faster is lost) */
static void set_zero(const tsr_backend *be, void *dinp, size_t n, tsr_grad_mode mode) {
    if (mode == TSR_GRAD_SET) OPS(be)->zero(dinp, n * sizeof(float));
}

static void *f_try_alloc(const tsr_backend *be, size_t bytes) { return OPS(be)->try_alloc(bytes); }
static void f_free(const tsr_backend *be, void *p) { OPS(be)->free(p); }
static void f_zero(const tsr_backend *be, void *p, size_t bytes) { OPS(be)->zero(p, bytes); }
static void f_copy(const tsr_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (dst != src && bytes) memcpy(dst, src, bytes);
}

static void f_encoder_forward(const tsr_backend *be, void *out, const int32_t *tokens,
                              const void *wte, const void *wpe, const int32_t *pos, int B, int T,
                              int C) {
    OPS(be)->encoder_forward(out, tokens, wte, wpe, pos, B, T, C);
}

static void f_encoder_backward(const tsr_backend *be, float *dwte, float *dwpe, const void *dout,
                               const int32_t *tokens, const int32_t *tokens_host,
                               const int32_t *pos, int B, int T, int C) {
    (void)tokens_host; /* host memory: tokens are the host's */
    OPS(be)->encoder_backward(dwte, dwpe, dout, tokens, pos, B, T, C);
}

static void f_layernorm_forward(const tsr_backend *be, void *out, float *mean, float *rstd,
                                const void *inp, const void *w, const void *b, int N, int C) {
    OPS(be)->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
}

/* residual_forward, then layernorm_forward */
static void f_residual_layernorm_forward(const tsr_backend *be, void *res, void *out, float *mean,
                                         float *rstd, const void *a, const void *b, const void *w,
                                         const void *bias, int N, int C) {
    OPS(be)->residual_forward(res, a, b, (size_t)N * C);
    OPS(be)->layernorm_forward(out, mean, rstd, res, w, bias, N, C);
}

static void f_layernorm_backward(const tsr_backend *be, void *dinp, float *dw, float *db,
                                 const void *dout, const void *inp, const void *w,
                                 const float *mean, const float *rstd, int N, int C) {
    OPS(be)->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

static void f_rmsnorm_forward(const tsr_backend *be, void *out, float *rstd, const void *inp,
                              const void *w, int N, int C, float eps) {
    OPS(be)->rmsnorm_forward(out, rstd, inp, w, N, C, eps);
}

/* residual_forward, then rmsnorm_forward */
static void f_residual_rmsnorm_forward(const tsr_backend *be, void *res, void *out, float *rstd,
                                       const void *a, const void *b, const void *w, int N, int C,
                                       float eps) {
    OPS(be)->residual_forward(res, a, b, (size_t)N * C);
    OPS(be)->rmsnorm_forward(out, rstd, res, w, N, C, eps);
}

static void f_rmsnorm_backward(const tsr_backend *be, void *dinp, float *dw, const void *dout,
                               const void *inp, const void *w, const float *rstd, int N, int C) {
    OPS(be)->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
}

static void f_qknorm_forward(const tsr_backend *be, void *out, float *rstd, const void *inp,
                             const void *qw, const void *kw, int N, int NH, int KVH, int hs,
                             float eps) {
    OPS(be)->qknorm_forward(out, rstd, inp, qw, kw, N, NH, KVH, hs, eps);
}

static void f_qknorm_backward(const tsr_backend *be, void *dinp, float *dqw, float *dkw,
                              const void *dout, const void *inp, const void *qw, const void *kw,
                              const float *rstd, int N, int NH, int KVH, int hs) {
    OPS(be)->qknorm_backward(dinp, dqw, dkw, dout, inp, qw, kw, rstd, N, NH, KVH, hs);
}

static void f_qknorm_proj_forward(const tsr_backend *be, void *out, float *rstd, const void *inp,
                                  const void *qw, const void *kw, int N, int NH, int KVH, int hs,
                                  float eps) {
    OPS(be)->qknorm_proj_forward(out, rstd, inp, qw, kw, N, NH, KVH, hs, eps);
}

static void f_qknorm_proj_backward(const tsr_backend *be, void *dinp, float *dqw, float *dkw,
                                   const void *dout, const void *inp, const void *qw,
                                   const void *kw, const float *rstd, int N, int NH, int KVH,
                                   int hs) {
    OPS(be)->qknorm_proj_backward(dinp, dqw, dkw, dout, inp, qw, kw, rstd, N, NH, KVH, hs);
}

static void f_rope_forward(const tsr_backend *be, void *qkv, const int32_t *pos, int p0,
                           const float *inv_freq, int B, int T, int NH, int KVH, int hs) {
    OPS(be)->rope_forward(qkv, pos, p0, inv_freq, B, T, NH, KVH, hs);
}

static void f_rope_part_forward(const tsr_backend *be, void *qkv, const int32_t *pos, int p0,
                                const float *inv_freq, int B, int T, int NH, int KVH, int hs,
                                int rot, float mscale) {
    OPS(be)->rope_part_forward(qkv, pos, p0, inv_freq, B, T, NH, KVH, hs, rot, mscale);
}

static void f_rope_part_backward(const tsr_backend *be, void *dqkv, const int32_t *pos, int p0,
                                 const float *inv_freq, int B, int T, int NH, int KVH, int hs,
                                 int rot, float mscale) {
    OPS(be)->rope_part_backward(dqkv, pos, p0, inv_freq, B, T, NH, KVH, hs, rot, mscale);
}

static void f_rope_backward(const tsr_backend *be, void *dqkv, const int32_t *pos, int p0,
                            const float *inv_freq, int B, int T, int NH, int KVH, int hs) {
    OPS(be)->rope_backward(dqkv, pos, p0, inv_freq, B, T, NH, KVH, hs);
}

static void f_swiglu_forward(const tsr_backend *be, void *out, const void *inp, int N, int F) {
    OPS(be)->swiglu_forward(out, inp, N, F);
}

static void f_geglu_forward(const tsr_backend *be, void *out, const void *inp, int N, int F) {
    OPS(be)->geglu_forward(out, inp, N, F);
}

static void f_geglu_backward(const tsr_backend *be, void *dinp, const void *inp,
                             const void *dout, int N, int F, tsr_grad_mode mode) {
    set_zero(be, dinp, (size_t)N * 2 * F, mode);
    OPS(be)->geglu_backward(dinp, inp, dout, N, F);
}

static void f_swiglu_backward(const tsr_backend *be, void *dinp, const void *inp,
                              const void *dout, int N, int F, tsr_grad_mode mode) {
    set_zero(be, dinp, (size_t)N * 2 * F, mode);
    OPS(be)->swiglu_backward(dinp, inp, dout, N, F);
}

/* mixture of experts: the table's moe_* ops (fp32: act = weight = float, casts only) */
static void f_moe_route(const tsr_backend *be, float *probs, float *lse, int32_t *idx, float *wts,
                        int32_t *offs, int32_t *rows, int32_t *slot, float *stats,
                        const void *logits, int N, int E, int K, int norm) {
    OPS(be)->moe_route(probs, lse, idx, wts, offs, rows, slot, stats, logits, N, E, K, norm);
}

static void f_moe_gather(const tsr_backend *be, void *xg, const void *x, const int32_t *rows,
                         int N, int K, int C) {
    OPS(be)->moe_gather(xg, x, rows, N, K, C);
}

static void f_moe_gather_backward(const tsr_backend *be, void *dx, const void *dxg,
                                  const int32_t *slot, int N, int K, int C) {
    OPS(be)->moe_gather_backward(dx, dxg, slot, N, K, C);
}

static void f_moe_matmul_forward(const tsr_backend *be, void *out, const void *inp, const void *w,
                                 const int32_t *offs, int E, int NK, int IC, int OC) {
    OPS(be)->moe_matmul_forward(out, inp, w, offs, E, NK, IC, OC);
}

static void f_moe_matmul_backward(const tsr_backend *be, void *dinp, float *dw, const void *dout,
                                  const void *inp, const void *w, const int32_t *offs, int E,
                                  int NK, int IC, int OC) {
    OPS(be)->moe_matmul_backward(dinp, dw, dout, inp, w, offs, E, NK, IC, OC);
}

/* the scratch: t (N,R), then xd (N,IC) */
static size_t f_lora_scratch(int N, int IC, int OC, int R) {
    (void)OC;
    return ((size_t)N * (size_t)R + (size_t)N * (size_t)IC) * sizeof(float);
}

static void f_lora_forward(const tsr_backend *be, void *out, int ld, const void *inp,
                           const float *A, const float *B, float scale, float p, uint64_t key,
                           int64_t row0, void *scratch, int N, int IC, int OC, int R) {
    float *t = scratch, *xd = t + (size_t)N * R;
    OPS(be)->lora_forward(out, ld, inp, A, B, scale, p, key, row0, t, xd, N, IC, OC, R);
}

static void f_lora_backward(const tsr_backend *be, void *dinp, float *dA, float *dB,
                            const void *dout, int ld, const void *inp, const float *A,
                            const float *B, float scale, float p, uint64_t key, int64_t row0,
                            void *scratch, int N, int IC, int OC, int R) {
    float *t = scratch, *xd = t + (size_t)N * R;
    OPS(be)->lora_backward(dinp, dA, dB, dout, ld, inp, A, B, scale, p, key, row0, t, xd, N, IC,
                           OC, R);
}

static void f_moe_combine(const tsr_backend *be, void *out, const void *base, const void *y,
                          const float *wts, const int32_t *slot, int N, int K, int C) {
    OPS(be)->moe_combine(out, base, y, wts, slot, N, K, C);
}

static void f_moe_combine_backward(const tsr_backend *be, void *dy, float *dwts,
                                   const void *dout, const void *y, const float *wts,
                                   const int32_t *slot, int N, int K, int C) {
    OPS(be)->moe_combine_backward(dy, dwts, dout, y, wts, slot, N, K, C);
}

static void f_moe_router_backward(const tsr_backend *be, void *dlogits, const float *dwts,
                                  const float *probs, const float *lse, const int32_t *idx,
                                  const float *wts, const int32_t *offs, int N, int E, int K,
                                  int norm, float aux_w, float z_w) {
    OPS(be)->moe_router_backward(dlogits, dwts, probs, lse, idx, wts, offs, N, E, K, norm, aux_w,
                                 z_w);
}

static void f_moe_bias_forward(const tsr_backend *be, void *out, const void *b,
                               const int32_t *offs, int E, int OC) {
    OPS(be)->moe_bias_forward(out, b, offs, E, OC);
}

static void f_moe_bias_backward(const tsr_backend *be, float *db, const void *dout,
                                const int32_t *offs, int E, int OC) {
    OPS(be)->moe_bias_backward(db, dout, offs, E, OC);
}

static void f_moe_gptoss_forward(const tsr_backend *be, void *out, const void *inp, int N, int F,
                                 float alpha, float limit) {
    OPS(be)->moe_gptoss_forward(out, inp, N, F, alpha, limit);
}

static void f_moe_gptoss_backward(const tsr_backend *be, void *dinp, const void *inp,
                                  const void *dout, int N, int F, float alpha, float limit,
                                  tsr_grad_mode mode) {
    set_zero(be, dinp, (size_t)N * 2 * F, mode);
    OPS(be)->moe_gptoss_backward(dinp, inp, dout, N, F, alpha, limit);
}

/* matmul_forward (into pre_gelu when given), then gelu_forward */
static void f_matmul_forward(const tsr_backend *be, void *out, void *pre_gelu, const void *inp,
                             const void *w, const void *bias, int N, int IC, int OC,
                             tsr_gelu_kind gelu) {
    OPS(be)->matmul_forward(pre_gelu ? pre_gelu : out, inp, w, bias, N, IC, OC);
    if (pre_gelu) OPS(be)->gelu_forward(out, pre_gelu, (size_t)N * OC, gelu);
}

/* matvec_forward (into pre_gelu when given), then gelu_forward */
static void f_matvec_forward(const tsr_backend *be, void *out, void *pre_gelu, const void *inp,
                             const void *w, const void *bias, int N, int IC, int OC,
                             tsr_gelu_kind gelu) {
    (void)N; /* 1 */
    OPS(be)->matvec_forward(pre_gelu ? pre_gelu : out, inp, w, bias, IC, OC);
    if (pre_gelu) OPS(be)->gelu_forward(out, pre_gelu, (size_t)OC, gelu);
}

/* matmul_rows (into pre_gelu when given), then gelu_forward */
static void f_matrows_forward(const tsr_backend *be, void *out, void *pre_gelu, const void *inp,
                              const void *w, const void *bias, int N, int IC, int OC,
                              tsr_gelu_kind gelu) {
    OPS(be)->matmul_rows(pre_gelu ? pre_gelu : out, inp, w, bias, N, IC, OC);
    if (pre_gelu) OPS(be)->gelu_forward(out, pre_gelu, (size_t)N * OC, gelu);
}

static void f_matmul_backward(const tsr_backend *be, void *dinp, float *dw, float *dbias,
                              const void *dout, const void *inp, const void *w, int N, int IC,
                              int OC, tsr_grad_mode mode) {
    set_zero(be, dinp, (size_t)N * IC, mode);
    OPS(be)->matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC);
}

static void f_gelu_backward(const tsr_backend *be, void *dinp, const void *inp, const void *dout,
                            size_t n, tsr_gelu_kind kind, tsr_grad_mode mode) {
    set_zero(be, dinp, n, mode);
    OPS(be)->gelu_backward(dinp, inp, dout, n, kind);
}

/* the probabilities (B,NH,T,T); no scratch */
static size_t f_attention_saved(int B, int T, int NH) { return (size_t)B * NH * T * T; }
static size_t f_attention_scratch(int B, int T, int NH, int KVH, int hs) {
    (void)B, (void)T, (void)NH, (void)KVH, (void)hs;
    return 0;
}

static void f_attention_forward(const tsr_backend *be, void *out, float *saved, const void *qkv,
                                const float *slopes, const int32_t *seq, const tsr_attn_var *var,
                                int B, int T, int NH, int KVH, int hs) {
    OPS(be)->attention_forward(out, saved, qkv, slopes, seq, var, B, T, NH, KVH, hs);
}

/* the probabilities hold the ALiBi term: out, slopes and scratch go unread */
static void f_attention_backward(const tsr_backend *be, void *dqkv, const void *dout,
                                 const void *qkv, const void *out, const float *saved,
                                 const float *slopes, const int32_t *seq, const tsr_attn_var *var,
                                 void *scratch, int B, int T, int NH, int KVH, int hs,
                                 tsr_grad_mode mode) {
    (void)out, (void)slopes, (void)scratch;
    const int vs = var && var->dv > 0 ? var->dv : hs; /* (the value heads: ops.h tsr_attn_var) */
    set_zero(be, dqkv, (size_t)B * T * ((size_t)(NH + KVH) * hs + (size_t)KVH * vs), mode);
    OPS(be)->attention_backward(dqkv, dout, qkv, saved, seq, var, B, T, NH, KVH, hs);
}

static void f_ring_forward(const tsr_backend *be, float *acc, float *lse, const tsr_ring_block *k,
                           int merge, void *scratch) {
    (void)scratch;
    OPS(be)->ring_forward(acc, lse, k, merge);
}

static void f_ring_backward(const tsr_backend *be, float *dq, int lddq, float *dkv, int lddkv,
                            const void *dout, const void *out, const float *lse,
                            const tsr_ring_block *k, void *scratch) {
    (void)scratch;
    OPS(be)->ring_backward(dq, lddq, dkv, lddkv, dout, out, lse, k);
}

static void f_scale_act(const tsr_backend *be, void *x, float s, size_t n) {
    (void)be;
    float *f = x;
    for (size_t i = 0; i < n; i++) f[i] *= s;
}

static void f_add_act(const tsr_backend *be, void *dst, const void *src, size_t n) {
    OPS(be)->residual_forward(dst, dst, src, n);
}

/* model.attn_output_gate: gated = y sigmoid(gate); backward dy = dy s, dgate = dy y s (1 - s) */
static float gate_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

static void f_gate_forward(const tsr_backend *be, void *gated, const void *y, const void *gate,
                           size_t n) {
    (void)be;
    const float *yf = y, *gf = gate;
    float *o = gated;
    for (size_t i = 0; i < n; i++) o[i] = yf[i] * gate_sigmoid(gf[i]);
}

static void f_gate_backward(const tsr_backend *be, void *dy, void *dgate, const void *y,
                            const void *gate, size_t n) {
    (void)be;
    const float *yf = y, *gf = gate;
    float *d = dy, *dg = dgate;
    for (size_t i = 0; i < n; i++) {
        const float s = gate_sigmoid(gf[i]), g = d[i];
        dg[i] = g * yf[i] * s * (1.0f - s);
        d[i] = g * s;
    }
}

static void f_moe_shgate_forward(const tsr_backend *be, void *out, const void *x, const void *w,
                                 int N, int C) {
    OPS(be)->moe_shgate_forward(out, x, w, N, C);
}

static void f_moe_shgate_grad(const tsr_backend *be, float *dg, float *gw, const void *shg,
                              const void *dshg, const void *x, const void *w, int N, int S,
                              int C) {
    OPS(be)->moe_shgate_grad(dg, gw, shg, dshg, x, w, N, S, C);
}

static void f_moe_shgate_dx(const tsr_backend *be, void *dx, const float *dg, const void *w,
                            int N, int C) {
    OPS(be)->moe_shgate_dx(dx, dg, w, N, C);
}

static size_t f_ring_scratch(int B, int T, int NH, int KVH, int hs) {
    (void)B, (void)T, (void)NH, (void)KVH, (void)hs;
    return 0;
}

static void f_f32_to_act(const tsr_backend *be, void *dst, const float *src, size_t n) {
    f_copy(be, dst, src, n * sizeof(float));
}

static void f_act_to_f32(const tsr_backend *be, float *dst, const void *src, size_t n) {
    f_copy(be, dst, src, n * sizeof(float));
}

static void f_add_f32(const tsr_backend *be, float *dst, const float *src, size_t n) {
    OPS(be)->residual_forward(dst, dst, src, n);
}

/* the Gated DeltaNet layer's parts (backend.h dn_*): kernels/cpu/cpu_deltanet.h's functions */
static void f_dn_conv_forward(const tsr_backend *be, void *y, const void *x, const void *hist,
                              const void *w, const int32_t *seq, int B, int T, int CD, int K) {
    (void)be;
    cpu_dn_conv_forward(y, x, hist, w, seq, B, T, CD, K);
}

static void f_dn_conv_backward(const tsr_backend *be, void *dx, void *dhist, float *dw,
                               const void *dy, const void *x, const void *hist, const void *w,
                               const int32_t *seq, int B, int T, int CD, int K) {
    (void)be;
    cpu_dn_conv_backward(dx, dhist, dw, dy, x, hist, w, seq, B, T, CD, K);
}

static void f_dn_gates_forward(const tsr_backend *be, float *beta, float *g, const void *b,
                               const void *a, const void *A_log, const void *dt_bias, int N,
                               int HV) {
    (void)be;
    cpu_dn_gates_forward(beta, g, b, a, A_log, dt_bias, N, HV);
}

static void f_dn_gates_backward(const tsr_backend *be, void *db, void *da, float *dA_log,
                                float *ddt_bias, const float *dbeta, const float *dg,
                                const void *b, const void *a, const void *A_log,
                                const void *dt_bias, int N, int HV) {
    (void)be;
    cpu_dn_gates_backward(db, da, dA_log, ddt_bias, dbeta, dg, b, a, A_log, dt_bias, N, HV);
}

static void f_dn_silu_gate_forward(const tsr_backend *be, void *out, const void *x,
                                   const void *z, size_t n) {
    (void)be;
    cpu_dn_silu_gate_forward(out, x, z, n);
}

static void f_dn_silu_gate_backward(const tsr_backend *be, void *dx, void *dz, const void *dout,
                                    const void *x, const void *z, size_t n) {
    (void)be;
    cpu_dn_silu_gate_backward(dx, dz, dout, x, z, n);
}

static size_t f_dn_scratch_bytes(const tsr_dn_shape *s) {
    (void)s;
    return 0;
}

static void f_dn_core_forward(const tsr_backend *be, void *out, float *state_out, float *ckpt,
                              const void *q, const void *k, const void *v, const float *g,
                              const float *beta, const float *state0, const int32_t *seq,
                              const tsr_dn_shape *s) {
    (void)be;
    cpu_deltanet_forward(out, state_out, ckpt, q, k, v, g, beta, state0, seq, s);
}

static void f_dn_core_backward(const tsr_backend *be, void *dq, void *dk, void *dv, float *dg,
                               float *dbeta, float *dstate0, const void *dout,
                               const float *dstate_out, const float *ckpt, const void *q,
                               const void *k, const void *v, const float *g, const float *beta,
                               const int32_t *seq, void *scratch, const tsr_dn_shape *s) {
    (void)be, (void)scratch;
    cpu_deltanet_backward(dq, dk, dv, dg, dbeta, dstate0, dout, dstate_out, ckpt, q, k, v, g,
                          beta, seq, s);
}

static void f_copy_rows(const tsr_backend *be, void *dst, size_t dpitch, const void *src,
                        size_t spitch, size_t width, size_t rows) {
    (void)be;
    for (size_t r = 0; r < rows; r++)
        memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}

static void f_moe_route_ds(const tsr_backend *be, float *probs, float *lse, int32_t *idx,
                           float *wts, int32_t *offs, int32_t *rows, int32_t *slot, float *stats,
                           const void *logits, int N, int E, int K, const tsr_moe_router *r) {
    (void)be;
    cpu_moe_route_ds(probs, lse, idx, wts, offs, rows, slot, stats, logits, N, E, K, r);
}

static void f_moe_router_ds_backward(const tsr_backend *be, void *dlogits, const float *dwts,
                                     const float *probs, const float *lse, const int32_t *idx,
                                     const float *wts, const int32_t *offs, int N, int E, int K,
                                     const tsr_moe_router *r, float aux_w, float z_w) {
    (void)be;
    cpu_moe_router_ds_backward(dlogits, dwts, probs, lse, idx, wts, offs, N, E, K, r, aux_w,
                               z_w);
}

static void f_mla_qkv_forward(const tsr_backend *be, void *qkv, const void *q, const void *kv,
                              const void *kpe, const int32_t *pos, int p0, const float *inv_freq,
                              int B, int T, const tsr_mla_shape *s) {
    (void)be;
    cpu_mla_qkv_forward(qkv, q, kv, kpe, pos, p0, inv_freq, B, T, s);
}

static void f_mla_qkv_backward(const tsr_backend *be, void *dq, void *dkv, void *dkpe,
                               const void *dqkv, const int32_t *pos, int p0,
                               const float *inv_freq, int B, int T, const tsr_mla_shape *s) {
    (void)be;
    cpu_mla_qkv_backward(dq, dkv, dkpe, dqkv, pos, p0, inv_freq, B, T, s);
}

static void f_mla_decode(const tsr_backend *be, void *out, void *cache, const void *q,
                         const void *cn, const void *kpe, const void *kvb, const float *inv_freq,
                         float scale, int kvr, const tsr_mla_shape *s, const tsr_mla_rows *rows,
                         float *scratch, int nscratch) {
    (void)be;
    cpu_mla_decode(out, cache, q, cn, kpe, kvb, inv_freq, scale, kvr, s, rows, scratch, nscratch);
}

static void f_attention_decode(const tsr_backend *be, void *out, void *kt, void *v,
                               const void *qkv, const float *slopes, const tsr_attn_var *var,
                               float *scratch, int nscratch, int p0, int c, int seg, int cap,
                               int NH, int KVH, int hs) {
    OPS(be)->attention_decode(out, kt, v, qkv, slopes, var, scratch, nscratch, p0, c, seg, cap, NH,
                              KVH, hs);
}

static void f_attention_decode_rows(const tsr_backend *be, void *out, void *kt, void *v,
                                    const void *qkv, const float *slopes, const tsr_attn_var *var,
                                    float *scratch, int nscratch, const int32_t *slot,
                                    const int32_t *pos, const int32_t *seg, int n,
                                    size_t slot_stride, int cap, int NH, int KVH, int hs) {
    OPS(be)->attention_decode_rows(out, kt, v, qkv, slopes, var, scratch, nscratch, slot, pos, seg,
                                   n, slot_stride, cap, NH, KVH, hs);
}

/* With a soft cap (be->logit_softcap): z = cap tanh(logits / cap) into be->capped (kept for
 * softcap_grad); else NULL (the softmax runs over the logits) */
static const float *softcap_keep(const tsr_backend *be, const float *logits, int N, int V,
                                 int Vp) {
    tsr_capped_logits *k = be->capped;
    if (!(be->logit_softcap > 0.0f)) return NULL;
    k->n = (size_t)N * Vp;
    if (k->room < k->n) {
        free(k->z);
        k->z = tsr_malloc(k->n * sizeof *k->z), k->room = k->n;
    }
    OPS(be)->softcap_forward(k->z, logits, N, V, Vp, be->logit_softcap);
    return k->z;
}

/* dlogits *= 1 - (z / cap)^2 from the kept capped logits of the same N rows */
static void softcap_grad(const tsr_backend *be, float *dlogits, int N, int V, int Vp) {
    if (!(be->logit_softcap > 0.0f)) return;
    if (be->capped->n != (size_t)N * Vp)
        tsr_die(TSR_EXIT_INTERNAL, "cpu softmax_xent: the soft cap's kept logits are of %zu "
                "values, the gradient's of %d x %d", be->capped->n, N, Vp);
    OPS(be)->softcap_backward(dlogits, be->capped->z, N, V, Vp, be->logit_softcap);
}

/* softmax_xent_forward in place (probabilities over the logits), then with dlosses
 * softmax_xent_backward in place. With a soft cap (be->logit_softcap) the softmax is over the
 * capped logits z, kept for the factor 1 - (z / cap)^2 of this or a later backward. */
static void f_softmax_xent(const tsr_backend *be, float *losses, void *logits,
                           const int32_t *targets, const float *dlosses, int N, int V, int Vp) {
    const float *z = softcap_keep(be, logits, N, V, Vp);
    OPS(be)->softmax_xent_forward(losses, logits, z ? z : logits, targets, N, V, Vp);
    if (dlosses) {
        OPS(be)->softmax_xent_backward(logits, dlosses, logits, targets, N, V, Vp);
        softcap_grad(be, logits, N, V, Vp);
    }
}

static void f_softmax_xent_grad(const tsr_backend *be, float *losses, void *logits,
                                const float *dlosses, const int32_t *targets, int N, int V, int Vp) {
    (void)losses; /* (the probabilities are what the forward left) */
    OPS(be)->softmax_xent_backward(logits, dlosses, logits, targets, N, V, Vp);
    softcap_grad(be, logits, N, V, Vp);
}

/* over the probabilities an evaluation softmax_xent left */
static void f_argmax(const tsr_backend *be, int32_t *idx, const void *logits, int N, int V,
                     int Vp) {
    (void)be;
    for (size_t i = 0; i < (size_t)N; i++) {
        const float *p = (const float *)logits + i * (size_t)Vp;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (p[v] > p[best]) best = v;
        idx[i] = best;
    }
}

/* The table, in backend.h's order. The entries over ops.h's optional ops are dropped from a
 * backend whose op table lacks them (drop_missing). */
#define FP32_TABLE(E)                                                                           \
    E(try_alloc, f_try_alloc)                                                                   \
    E(free, f_free)                                                                             \
    E(zero, f_zero)                                                                             \
    E(to_device, f_copy)                                                                        \
    E(to_host, f_copy)                                                                          \
    E(copy, f_copy)                                                                             \
    E(encoder_forward, f_encoder_forward)                                                       \
    E(encoder_backward, f_encoder_backward)                                                     \
    E(layernorm_forward, f_layernorm_forward)                                                   \
    E(residual_layernorm_forward, f_residual_layernorm_forward)                                 \
    E(layernorm_backward, f_layernorm_backward)                                                 \
    E(rmsnorm_forward, f_rmsnorm_forward)                                                       \
    E(residual_rmsnorm_forward, f_residual_rmsnorm_forward)                                     \
    E(rmsnorm_backward, f_rmsnorm_backward)                                                     \
    E(qknorm_forward, f_qknorm_forward)                                                         \
    E(qknorm_backward, f_qknorm_backward)                                                       \
    E(qknorm_proj_forward, f_qknorm_proj_forward)                                               \
    E(qknorm_proj_backward, f_qknorm_proj_backward)                                             \
    E(rope_forward, f_rope_forward)                                                             \
    E(rope_backward, f_rope_backward)                                                           \
    E(rope_part_forward, f_rope_part_forward)                                                   \
    E(rope_part_backward, f_rope_part_backward)                                                 \
    E(swiglu_forward, f_swiglu_forward)                                                         \
    E(swiglu_backward, f_swiglu_backward)                                                       \
    E(geglu_forward, f_geglu_forward)                                                           \
    E(geglu_backward, f_geglu_backward)                                                         \
    E(moe_route, f_moe_route)                                                                   \
    E(moe_gather, f_moe_gather)                                                                 \
    E(moe_gather_backward, f_moe_gather_backward)                                               \
    E(moe_matmul_forward, f_moe_matmul_forward)                                                 \
    E(moe_matmul_backward, f_moe_matmul_backward)                                               \
    E(moe_combine, f_moe_combine)                                                               \
    E(moe_combine_backward, f_moe_combine_backward)                                             \
    E(moe_router_backward, f_moe_router_backward)                                               \
    E(moe_route_ds, f_moe_route_ds)                                                             \
    E(moe_router_ds_backward, f_moe_router_ds_backward)                                         \
    E(moe_bias_forward, f_moe_bias_forward)                                                     \
    E(moe_bias_backward, f_moe_bias_backward)                                                   \
    E(moe_gptoss_forward, f_moe_gptoss_forward)                                                 \
    E(moe_gptoss_backward, f_moe_gptoss_backward)                                               \
    E(lora_scratch, f_lora_scratch)                                                             \
    E(lora_forward, f_lora_forward)                                                             \
    E(lora_backward, f_lora_backward)                                                           \
    E(matmul_forward, f_matmul_forward)                                                         \
    E(matvec_forward, f_matvec_forward)                                                         \
    E(matmul_forward_fp8, NULL) /* no FP8 */                                                    \
    E(act_compress, NULL)                                                                       \
    E(act_decompress, NULL) /* no compressed activations */                                     \
    E(matrows_forward, f_matrows_forward)                                                       \
    E(matmul_backward, f_matmul_backward)                                                       \
    E(matmul_backward_gelu, NULL) /* the decoder runs the two ops: their bits */                \
    E(gelu_backward, f_gelu_backward)                                                           \
    E(attention_saved, f_attention_saved)                                                       \
    E(attention_scratch, f_attention_scratch)                                                   \
    E(attention_forward, f_attention_forward)                                                   \
    E(attention_backward, f_attention_backward)                                                 \
    E(ring_forward, f_ring_forward)                                                             \
    E(ring_backward, f_ring_backward)                                                           \
    E(ring_scratch, f_ring_scratch)                                                             \
    E(f32_to_act, f_f32_to_act)                                                                 \
    E(act_to_f32, f_act_to_f32)                                                                 \
    E(add_f32, f_add_f32)                                                                       \
    E(scale_act, f_scale_act)                                                                   \
    E(add_act, f_add_act)                                                                       \
    E(gate_forward, f_gate_forward)                                                             \
    E(gate_backward, f_gate_backward)                                                           \
    E(moe_shgate_forward, f_moe_shgate_forward)                                                 \
    E(moe_shgate_grad, f_moe_shgate_grad)                                                       \
    E(moe_shgate_dx, f_moe_shgate_dx)                                                           \
    E(dn_conv_forward, f_dn_conv_forward)                                                       \
    E(dn_conv_backward, f_dn_conv_backward)                                                     \
    E(dn_gates_forward, f_dn_gates_forward)                                                     \
    E(dn_gates_backward, f_dn_gates_backward)                                                   \
    E(dn_silu_gate_forward, f_dn_silu_gate_forward)                                             \
    E(dn_silu_gate_backward, f_dn_silu_gate_backward)                                           \
    E(dn_ckpt_floats, cpu_deltanet_ckpt_floats)                                                 \
    E(dn_scratch_bytes, f_dn_scratch_bytes)                                                     \
    E(dn_core_forward, f_dn_core_forward)                                                       \
    E(dn_core_backward, f_dn_core_backward)                                                     \
    E(copy_rows, f_copy_rows)                                                                   \
    E(mla_qkv_forward, f_mla_qkv_forward)                                                       \
    E(mla_qkv_backward, f_mla_qkv_backward)                                                     \
    E(mla_decode, f_mla_decode)                                                                 \
    E(attention_decode_rows, f_attention_decode_rows)                                           \
    E(attention_decode, f_attention_decode)                                                     \
    E(softmax_xent, f_softmax_xent)                                                             \
    E(softmax_xent_grad, f_softmax_xent_grad)                                                   \
    E(argmax, f_argmax)

TSR_BACKEND_DEFINE(fp32_table, FP32_TABLE, .act = TSR_DT_F32, .weight = TSR_DT_F32, .align = 1,
                   .host = 1);

/* NULL for the entries whose optional op (ops.h) the op table lacks */
static void drop_missing(tsr_backend *be, const tsr_ops *ops) {
    if (!ops->qknorm_proj_forward) be->qknorm_proj_forward = NULL;
    if (!ops->qknorm_proj_backward) be->qknorm_proj_backward = NULL;
    if (!ops->geglu_forward) be->geglu_forward = NULL;
    if (!ops->geglu_backward) be->geglu_backward = NULL;
    if (!ops->moe_route) be->moe_route = NULL;
    if (!ops->moe_gather) be->moe_gather = NULL;
    if (!ops->moe_gather_backward) be->moe_gather_backward = NULL;
    if (!ops->moe_matmul_forward) be->moe_matmul_forward = NULL;
    if (!ops->moe_matmul_backward) be->moe_matmul_backward = NULL;
    if (!ops->moe_combine) be->moe_combine = NULL;
    if (!ops->moe_combine_backward) be->moe_combine_backward = NULL;
    if (!ops->moe_router_backward) be->moe_router_backward = NULL;
    if (!ops->moe_bias_forward) be->moe_bias_forward = NULL;
    if (!ops->moe_bias_backward) be->moe_bias_backward = NULL;
    if (!ops->moe_gptoss_forward) be->moe_gptoss_forward = NULL;
    if (!ops->moe_gptoss_backward) be->moe_gptoss_backward = NULL;
    if (!ops->moe_shgate_forward) be->moe_shgate_forward = NULL;
    if (!ops->moe_shgate_grad) be->moe_shgate_grad = NULL;
    if (!ops->moe_shgate_dx) be->moe_shgate_dx = NULL;
    if (!ops->lora_forward) be->lora_scratch = NULL;
    if (!ops->lora_forward) be->lora_forward = NULL;
    if (!ops->lora_backward) be->lora_backward = NULL;
    if (!ops->matvec_forward) be->matvec_forward = NULL;
    if (!ops->matmul_rows) be->matrows_forward = NULL;
    if (!ops->attention_decode) be->attention_decode = NULL;
    if (!ops->attention_decode_rows) be->attention_decode_rows = NULL;
    if (!ops->ring_forward) be->ring_forward = NULL;
    if (!ops->ring_backward) be->ring_backward = NULL;
}

tsr_backend tsr_fp32_backend(const tsr_ops *ops) {
    tsr_backend be = fp32_table;
    be.name = ops->name;
    be.ctx = (void *)ops;
    drop_missing(&be, ops);
    return be;
}
