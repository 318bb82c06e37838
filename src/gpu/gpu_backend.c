/* gpu_backend.c — the CUDA backend of kernels/backend.h (gpu_backend.h): bf16 activations and
 * weights over kernels/cuda/cuda_ops.h, ctx = the stream. Each entry hands its pointers to the
 * tcu_* op as they come: a NULL weight gradient (a frozen parameter, backend.h) reaches the op,
 * which skips that gradient (cuda_ops.h). */
#include "gpu/gpu_backend.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu/gpu_mla.h"   /* multi-head latent attention, DeepSeek's router: composed */
#include "gpu/gpu_mla_ring.h" /* the ring over heads without a kernel: composed */
#include "gpu/gpu_model.h" /* tsr_gpu_model: the FP8 forward's gathered weights */
#include "gpu/gpu_profile.h"
#include "tcu_index.h" /* TCU_DN_CHUNK */

#define STREAM(be) ((tcu_stream)(be)->ctx)

/* PROF(be, NAME, A, B, C, call): the call, timed as op NAME of shape A x B x C (0: unused) when
 * TSR_PROFILE=1 (gpu_profile.h); just the call otherwise */
#define PROF(be, name, a, b, c, ...)                                                            \
    do {                                                                                        \
        const int prof_slot_ = gpu_prof_begin(STREAM(be), name, a, b, c);                       \
        __VA_ARGS__;                                                                            \
        gpu_prof_end(STREAM(be), prof_slot_);                                                   \
    } while (0)

static void *c_try_alloc(const tsr_backend *be, size_t bytes) {
    (void)be;
    return tcu_try_malloc(bytes > 0 ? bytes : 1);
}
static void c_free(const tsr_backend *be, void *p) {
    (void)be;
    tcu_free(p);
}
static void c_zero(const tsr_backend *be, void *p, size_t bytes) {
    PROF(be, "zero", 0, 0, 0, tcu_zero(p, bytes, STREAM(be)));
}
static void c_to_device(const tsr_backend *be, void *dst, const void *src, size_t bytes) {
    PROF(be, "to_device", 0, 0, 0,
         tcu_memcpy_h2d(dst, src, bytes, STREAM(be)));
}
static void c_to_host(const tsr_backend *be, void *dst, const void *src, size_t bytes) {
    PROF(be, "to_host", 0, 0, 0,
         tcu_memcpy_d2h(dst, src, bytes, STREAM(be)));
}

/* A measurement switch (docs/cuda.md): 0 when the environment sets NAME=0, else 1; *cache (-1
 * until then) keeps the answer, so the environment is read once per process. */
static int switch_on(const char *name, int *cache) {
    if (*cache < 0) {
        const char *v = getenv(name);
        *cache = !(v && strcmp(v, "0") == 0);
    }
    return *cache;
}

/* TSR_GRAD_SET as asked, or, when the environment sets TSR_GRAD_OVERWRITE=0, as before it
 * existed: the n bf16 of dinp zeroed, then TSR_GRAD_ADD. Both give the same bits. */
static tsr_grad_mode grad_mode(const tsr_backend *be, void *dinp, size_t n, tsr_grad_mode mode) {
    static int overwrite = -1;
    if (mode != TSR_GRAD_SET || switch_on("TSR_GRAD_OVERWRITE", &overwrite)) return mode;
    c_zero(be, dinp, n * sizeof(tsr_bf16));
    return TSR_GRAD_ADD;
}

static void c_encoder_forward(const tsr_backend *be, void *out, const int32_t *tokens,
                              const void *wte, const void *wpe, const int32_t *pos, int B, int T,
                              int C) {
    PROF(be, "encoder_forward", 0, 0, 0,
         tcu_encoder_forward(out, tokens, wte, wpe, pos, B, T, C, STREAM(be)));
}

static void c_encoder_backward(const tsr_backend *be, float *dwte, float *dwpe, const void *dout,
                               const int32_t *tokens, const int32_t *tokens_host,
                               const int32_t *pos, int B, int T, int C) {
    PROF(be, "encoder_backward", 0, 0, 0,
         tcu_encoder_backward(dwte, dwpe, dout, tokens, tokens_host, pos, B, T, C, STREAM(be)));
}

static void c_layernorm_forward(const tsr_backend *be, void *out, float *mean, float *rstd,
                                const void *inp, const void *w, const void *b, int N, int C) {
    PROF(be, "layernorm_forward", N, C, 0,
         tcu_layernorm_forward(out, mean, rstd, inp, w, b, N, C, STREAM(be)));
}

static void c_residual_layernorm_forward(const tsr_backend *be, void *res, void *out, float *mean,
                                         float *rstd, const void *a, const void *b, const void *w,
                                         const void *bias, int N, int C) {
    PROF(be, "residual_layernorm_forward", N, C, 0,
         tcu_residual_layernorm_forward(res, out, mean, rstd, a, b, w, bias, N, C, STREAM(be)));
}

static void c_layernorm_backward(const tsr_backend *be, void *dinp, float *dw, float *db,
                                 const void *dout, const void *inp, const void *w,
                                 const float *mean, const float *rstd, int N, int C) {
    PROF(be, "layernorm_backward", N, C, 0,
         tcu_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, STREAM(be)));
}

static void c_rmsnorm_forward(const tsr_backend *be, void *out, float *rstd, const void *inp,
                              const void *w, int N, int C, float eps) {
    PROF(be, "rmsnorm_forward", N, C, 0,
         tcu_rmsnorm_forward(out, rstd, inp, w, N, C, eps, STREAM(be)));
}

static void c_residual_rmsnorm_forward(const tsr_backend *be, void *res, void *out, float *rstd,
                                       const void *a, const void *b, const void *w, int N, int C,
                                       float eps) {
    PROF(be, "residual_rmsnorm_forward", N, C, 0,
         tcu_residual_rmsnorm_forward(res, out, rstd, a, b, w, N, C, eps, STREAM(be)));
}

static void c_rmsnorm_backward(const tsr_backend *be, void *dinp, float *dw, const void *dout,
                               const void *inp, const void *w, const float *rstd, int N, int C) {
    PROF(be, "rmsnorm_backward", N, C, 0,
         tcu_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C, STREAM(be)));
}

static void c_qknorm_forward(const tsr_backend *be, void *out, float *rstd, const void *inp,
                             const void *qw, const void *kw, int N, int NH, int KVH, int hs,
                             float eps) {
    PROF(be, "qknorm_forward", 0, 0, 0,
         tcu_qknorm_forward(out, rstd, inp, qw, kw, N, NH, KVH, hs, eps, STREAM(be)));
}

static void c_qknorm_backward(const tsr_backend *be, void *dinp, float *dqw, float *dkw,
                              const void *dout, const void *inp, const void *qw, const void *kw,
                              const float *rstd, int N, int NH, int KVH, int hs) {
    PROF(be, "qknorm_backward", 0, 0, 0,
         tcu_qknorm_backward(dinp, dqw, dkw, dout, inp, qw, kw, rstd, N, NH, KVH, hs, STREAM(be)));
}

static void c_rope_forward(const tsr_backend *be, void *qkv, const int32_t *pos, int p0,
                           const float *inv_freq, int B, int T, int NH, int KVH, int hs) {
    PROF(be, "rope_forward", 0, 0, 0,
         tcu_rope_forward(qkv, pos, p0, inv_freq, B, T, NH, KVH, hs, STREAM(be)));
}

static void c_rope_backward(const tsr_backend *be, void *dqkv, const int32_t *pos, int p0,
                            const float *inv_freq, int B, int T, int NH, int KVH, int hs) {
    PROF(be, "rope_backward", 0, 0, 0,
         tcu_rope_backward(dqkv, pos, p0, inv_freq, B, T, NH, KVH, hs, STREAM(be)));
}

static void c_swiglu_forward(const tsr_backend *be, void *out, const void *inp, int N, int F) {
    PROF(be, "swiglu_forward", N, F, 0,
         tcu_swiglu_forward(out, inp, N, F, STREAM(be)));
}

static void c_swiglu_backward(const tsr_backend *be, void *dinp, const void *inp,
                              const void *dout, int N, int F, tsr_grad_mode mode) {
    mode = grad_mode(be, dinp, (size_t)N * 2 * F, mode);
    PROF(be, "swiglu_backward", N, F, 0,
         tcu_swiglu_backward(dinp, inp, dout, N, F, mode, STREAM(be)));
}

static void c_moe_route(const tsr_backend *be, float *probs, float *lse, int32_t *idx,
                        float *wts, int32_t *offs, int32_t *rows, int32_t *slot, float *stats,
                        const void *logits, int N, int E, int K, int norm) {
    PROF(be, "moe_route", 0, 0, 0,
         tcu_moe_route(probs, lse, idx, wts, offs, rows, slot, stats, logits, N, E, K, norm,
                      STREAM(be)));
}

static void c_moe_gather(const tsr_backend *be, void *xg, const void *x, const int32_t *rows,
                         int N, int K, int C) {
    PROF(be, "moe_gather", 0, 0, 0,
         tcu_moe_gather(xg, x, rows, N, K, C, STREAM(be)));
}

static void c_moe_gather_backward(const tsr_backend *be, void *dx, const void *dxg,
                                  const int32_t *slot, int N, int K, int C) {
    PROF(be, "moe_gather_backward", 0, 0, 0,
         tcu_moe_gather_backward(dx, dxg, slot, N, K, C, STREAM(be)));
}

static void c_moe_matmul_forward(const tsr_backend *be, void *out, const void *inp, const void *w,
                                 const int32_t *offs, int E, int NK, int IC, int OC) {
    PROF(be, "moe_matmul_forward", NK, IC, OC,
         tcu_moe_matmul_forward(out, inp, w, offs, E, NK, IC, OC, STREAM(be)));
}

static void c_moe_matmul_backward(const tsr_backend *be, void *dinp, float *dw, const void *dout,
                                  const void *inp, const void *w, const int32_t *offs, int E,
                                  int NK, int IC, int OC) {
    PROF(be, "moe_matmul_backward", NK, IC, OC,
         tcu_moe_matmul_backward(dinp, dw, dout, inp, w, offs, E, NK, IC, OC, STREAM(be)));
}

static void c_moe_combine(const tsr_backend *be, void *out, const void *base, const void *y,
                          const float *wts, const int32_t *slot, int N, int K, int C) {
    PROF(be, "moe_combine", 0, 0, 0,
         tcu_moe_combine(out, base, y, wts, slot, N, K, C, STREAM(be)));
}

static void c_moe_combine_backward(const tsr_backend *be, void *dy, float *dwts, const void *dout,
                                   const void *y, const float *wts, const int32_t *slot, int N,
                                   int K, int C) {
    PROF(be, "moe_combine_backward", 0, 0, 0,
         tcu_moe_combine_backward(dy, dwts, dout, y, wts, slot, N, K, C, STREAM(be)));
}

static void c_moe_router_backward(const tsr_backend *be, void *dlogits, const float *dwts,
                                  const float *probs, const float *lse, const int32_t *idx,
                                  const float *wts, const int32_t *offs, int N, int E, int K,
                                  int norm, float aux_w, float z_w) {
    PROF(be, "moe_router_backward", 0, 0, 0,
         tcu_moe_router_backward(dlogits, dwts, probs, lse, idx, wts, offs, N, E, K, norm, aux_w, z_w,
                                STREAM(be)));
}

static void c_matmul_forward(const tsr_backend *be, void *out, void *pre_gelu, const void *inp,
                             const void *w, const void *bias, int N, int IC, int OC,
                             tsr_gelu_kind gelu) {
    PROF(be, "matmul_forward", N, IC, OC,
         tcu_matmul_forward(out, pre_gelu, inp, w, bias, N, IC, OC, gelu, STREAM(be)));
}

int gpu_backend_fp8_shape_ok(int64_t IC, int64_t OC) { return IC % 16 == 0 && OC % 16 == 0; }

/* zero3 / hsdp's FP8 all-gather: w's E4M3 codes and scale where the model's source gathered them
 * (matmul_forward_fp8 is only ever in a model's own table, g->be: gpu_backend_use_fp8) */
static int gathered_fp8(const tsr_backend *be, const void *w, const tsr_fp8 **qw,
                        const float **sw_inv) {
    const tsr_gpu_model *g =
        (const tsr_gpu_model *)(const void *)((const char *)be - offsetof(tsr_gpu_model, be));
    return g->src && g->src->fp8 && g->src->fp8(g->src->ctx, w, qw, sw_inv);
}

/* precision.fp8 = "tensorwise": cuBLASLt's FP8 GEMM where its shape rules allow (IC and OC
 * multiples of 16), else the bf16 product */
/* model.activation_compression = "fp8": a saved bf16 tensor to E4M3 with its tensorwise scale
 * (the FP8 forward's casts), and back into bf16 for the backward; the profile's shape is the
 * element count (capped at INT_MAX) */
static int prof_count(size_t n) { return n > INT_MAX ? INT_MAX : (int)n; }

static void c_act_compress(const tsr_backend *be, void *q, float *sc, const void *x, size_t n) {
    PROF(be, "act_compress", prof_count(n), 1, 1, {
        tcu_amax_bf16(sc, x, n, STREAM(be));
        tcu_fp8_quantize(q, sc + 1, x, sc, n, TCU_FP8_E4M3, STREAM(be));
    });
}

static void c_act_decompress(const tsr_backend *be, void *x, const void *q, const float *sc,
                             size_t n) {
    PROF(be, "act_decompress", prof_count(n), 1, 1,
         tcu_fp8_dequantize(x, q, sc + 1, n, TCU_FP8_E4M3, STREAM(be)));
}

static void c_matmul_forward_fp8(const tsr_backend *be, void *out, void *pre_gelu, const void *inp,
                                 const void *w, const void *bias, int N, int IC, int OC,
                                 tsr_gelu_kind gelu) {
    if (!gpu_backend_fp8_shape_ok(IC, OC)) {
        c_matmul_forward(be, out, pre_gelu, inp, w, bias, N, IC, OC, gelu);
        return;
    }
    const tsr_fp8 *qw;
    const float *sw_inv;
    if (gathered_fp8(be, w, &qw, &sw_inv))
        PROF(be, "matmul_forward_fp8", N, IC, OC,
             tcu_matmul_forward_fp8_qw(out, pre_gelu, inp, qw, sw_inv, bias, N, IC, OC, gelu,
                                       STREAM(be)));
    else
        PROF(be, "matmul_forward_fp8", N, IC, OC,
             tcu_matmul_forward_fp8(out, pre_gelu, inp, w, bias, N, IC, OC, gelu, STREAM(be)));
}

static void c_matmul_backward(const tsr_backend *be, void *dinp, float *dw, float *dbias,
                              const void *dout, const void *inp, const void *w, int N, int IC,
                              int OC, tsr_grad_mode mode) {
    if (dinp) mode = grad_mode(be, dinp, (size_t)N * IC, mode);
    PROF(be, "matmul_backward", N, IC, OC,
         tcu_matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC, mode, STREAM(be)));
}

static void c_matmul_backward_gelu(const tsr_backend *be, void *dinp, float *dw, float *dbias,
                                   const void *dout, const void *inp, const void *w,
                                   const void *pre_gelu, int N, int IC, int OC) {
    PROF(be, "matmul_backward_dgelu", N, IC, OC,
         tcu_matmul_backward_dgelu(dinp, dw, dbias, dout, inp, w, pre_gelu, N, IC, OC,
                                   STREAM(be)));
}

/* The fused GELU backward (matmul_backward_gelu), unless the environment sets TSR_DGELU_FUSION=0
 * (the decoder then runs matmul_backward and gelu_backward). */
static int dgelu_fusion(void) {
    static int on = -1;
    return switch_on("TSR_DGELU_FUSION", &on);
}

static void c_gelu_backward(const tsr_backend *be, void *dinp, const void *inp, const void *dout,
                            size_t n, tsr_gelu_kind kind, tsr_grad_mode mode) {
    mode = grad_mode(be, dinp, n, mode);
    PROF(be, "gelu_backward", n < INT_MAX ? (int)n : INT_MAX, 0, 0,
         tcu_gelu_backward(dinp, inp, dout, n, kind, mode, STREAM(be)));
}

static void c_lora_forward(const tsr_backend *be, void *out, int ld, const void *inp,
                           const float *A, const float *B, float scale, float p, uint64_t key,
                           int64_t row0, void *scratch, int N, int IC, int OC, int R) {
    PROF(be, "lora_forward", N, IC, OC,
         tcu_lora_forward(out, ld, inp, A, B, scale, p, key, row0, scratch, N, IC, OC, R, STREAM(be)));
}

static void c_lora_backward(const tsr_backend *be, void *dinp, float *dA, float *dB,
                            const void *dout, int ld, const void *inp, const float *A,
                            const float *B, float scale, float p, uint64_t key, int64_t row0,
                            void *scratch, int N, int IC, int OC, int R) {
    PROF(be, "lora_backward", N, IC, OC,
         tcu_lora_backward(dinp, dA, dB, dout, ld, inp, A, B, scale, p, key, row0, scratch, N, IC, OC,
                          R, STREAM(be)));
}

/* Attention with the layer's variants (var: window, scale, soft cap, sinks as the weights' bf16
 * copy, dsinks fp32; cuda_ops.h tcu_attention_forward_var, docs/cuda.md "Attention variants") */
/* the log-sum-exp (B,NH,T) */
static size_t c_attention_saved(int B, int T, int NH) { return (size_t)B * NH * T; }

static void c_attention_forward(const tsr_backend *be, void *out, float *saved, const void *qkv,
                                const float *slopes, const int32_t *seq, const tsr_attn_var *var,
                                int B, int T, int NH, int KVH, int hs) {
    if (gpu_attn_padded(var, hs)) { /* (value heads of dv != hs, MLA's: gpu_mla.h) */
        PROF(be, "attention_forward_padded", B, T, NH,
             gpu_attn_padded_forward(be, out, saved, qkv, slopes, seq, var, B, T, NH, KVH, hs));
        return;
    }
    PROF(be, "attention_forward", B, T, NH,
         tcu_attention_forward_var(out, saved, qkv, slopes, seq, var, B, T, NH, KVH, hs,
                                   STREAM(be)));
}

static void c_attention_backward(const tsr_backend *be, void *dqkv, const void *dout,
                                 const void *qkv, const void *out, const float *saved,
                                 const float *slopes, const int32_t *seq, const tsr_attn_var *var,
                                 void *scratch, int B, int T, int NH, int KVH, int hs,
                                 tsr_grad_mode mode) {
    if (gpu_attn_padded(var, hs)) {
        PROF(be, "attention_backward_padded", B, T, NH,
             gpu_attn_padded_backward(be, dqkv, dout, qkv, out, saved, slopes, seq, var, B, T, NH,
                                      KVH, hs, mode));
        return;
    }
    mode = grad_mode(be, dqkv, (size_t)B * T * (NH + 2 * KVH) * hs, mode);
    PROF(be, "attention_backward", B, T, NH,
         tcu_attention_backward_var(dqkv, dout, qkv, out, saved, slopes, seq, var, scratch, B, T,
                                    NH, KVH, hs, mode, STREAM(be)));
}

/* context parallelism's blocks and data movement (backend.h ring_*; kernels/cuda/cuda_ring.cu) */
static void c_ring_forward(const tsr_backend *be, float *acc, float *lse, const tsr_ring_block *k,
                           int merge, void *scratch) {
    if (gpu_attn_padded(k->var, k->hs)) /* (heads without a kernel: gpu_mla_ring.c) */
        PROF(be, "ring_forward_padded", k->B, k->Tq, k->Tk,
             gpu_ring_padded_forward(be, acc, lse, k, merge));
    else
        PROF(be, "ring_forward", k->B, k->Tq, k->Tk,
             tcu_ring_forward(acc, lse, k, merge, scratch, STREAM(be)));
}

static void c_ring_backward(const tsr_backend *be, float *dq, int lddq, float *dkv, int lddkv,
                            const void *dout, const void *out, const float *lse,
                            const tsr_ring_block *k, void *scratch) {
    if (gpu_attn_padded(k->var, k->hs))
        PROF(be, "ring_backward_padded", k->B, k->Tq, k->Tk,
             gpu_ring_padded_backward(be, dq, lddq, dkv, lddkv, dout, out, lse, k));
    else
        PROF(be, "ring_backward", k->B, k->Tq, k->Tk,
             tcu_ring_backward(dq, lddq, dkv, lddkv, dout, out, lse, k, scratch, STREAM(be)));
}

/* the ring kernels' scratch for heads of hs; none where hs has no kernel (the padded blocks keep
 * their own: gpu_mla_ring.c) */
static size_t c_ring_scratch(int B, int T, int NH, int KVH, int hs) {
    return tcu_attention_head_size_ok(hs) ? tcu_ring_scratch_bytes(B, T, NH, KVH, hs) : 0;
}

static void c_f32_to_act(const tsr_backend *be, void *dst, const float *src, size_t n) {
    tcu_f32_to_bf16(dst, src, n, STREAM(be));
}

static void c_act_to_f32(const tsr_backend *be, float *dst, const void *src, size_t n) {
    tcu_bf16_to_f32(dst, src, n, STREAM(be));
}

static void c_add_f32(const tsr_backend *be, float *dst, const float *src, size_t n) {
    tcu_add_f32(dst, src, n, STREAM(be));
}

static void c_copy_rows(const tsr_backend *be, void *dst, size_t dpitch, const void *src,
                        size_t spitch, size_t width, size_t rows) {
    tcu_memcpy2d(dst, dpitch, src, spitch, width, rows, STREAM(be));
}

static void c_softmax_xent(const tsr_backend *be, float *losses, void *logits,
                           const int32_t *targets, const float *dlosses, int N, int V, int Vp) {
    PROF(be, "softmax_xent", N, Vp, 0,
         tcu_softmax_xent_capped(losses, logits, targets, dlosses, N, V, Vp, be->logit_softcap,
                                 STREAM(be)));
}

static void c_argmax(const tsr_backend *be, int32_t *idx, const void *logits, int N, int V,
                     int Vp) {
    PROF(be, "argmax", 0, 0, 0,
         tcu_argmax_capped(idx, logits, N, V, Vp, be->logit_softcap, STREAM(be)));
}

/* The gradient after an evaluation forward (DPO's weighted backward, docs/dpo.md): the fused op
 * again over the logits the evaluation left, now with dlosses (the losses rewritten, as the
 * backend's entry allows) */
static void c_softmax_xent_grad(const tsr_backend *be, float *losses, void *logits,
                                const float *dlosses, const int32_t *targets, int N, int V,
                                int Vp) {
    PROF(be, "softmax_xent_grad", N, Vp, 0,
         tcu_softmax_xent_capped(losses, logits, targets, dlosses, N, V, Vp, be->logit_softcap,
                                 STREAM(be)));
}

/* Batched decoding (cuda_decode.cu; model.h tsr_kv_slots): a chunk of one slot, or one row per
 * slot; the batch-invariant product; backend-to-backend copies (a shared prompt's cache) */
static void c_attention_decode(const tsr_backend *be, void *out, void *kt, void *v,
                               const void *qkv, const float *slopes, const tsr_attn_var *var,
                               float *scratch, int nscratch, int p0, int c, int seg, int cap,
                               int NH, int KVH, int hs) {
    (void)scratch, (void)nscratch;
    PROF(be, "attention_decode", c, NH, hs,
         tcu_attention_decode_var(out, kt, v, qkv, slopes, var, NULL, NULL, NULL, p0, seg, c, 0,
                                  cap, NH, KVH, hs, STREAM(be)));
}

static void c_attention_decode_rows(const tsr_backend *be, void *out, void *kt, void *v,
                                    const void *qkv, const float *slopes, const tsr_attn_var *var,
                                    float *scratch, int nscratch, const int32_t *slot,
                                    const int32_t *pos, const int32_t *seg, int n,
                                    size_t slot_stride, int cap, int NH, int KVH, int hs) {
    (void)scratch, (void)nscratch;
    PROF(be, "attention_decode_rows", n, NH, hs,
         tcu_attention_decode_var(out, kt, v, qkv, slopes, var, slot, pos, seg, 0, 0, n,
                                  slot_stride, cap, NH, KVH, hs, STREAM(be)));
}

/* TSR_DECODE_GEMM (issue 66 item 3; gpu_backend.h): batched decoding's rows through the training's
 * cuBLASLt GEMM where there are at least 8 of them and a multiple of 8 (the batch as the GEMM's N:
 * the weights read once for all rows, on the tensor cores; at most 8 row counts a layer shape, so
 * the GEMM's algorithm cache holds them). Process-wide, set at start; off: every row its own
 * product (batch-invariant bits). */
static int decode_gemm;

void gpu_backend_set_decode_gemm(int on) { decode_gemm = on; }

static void c_matrows_forward(const tsr_backend *be, void *out, void *pre_gelu, const void *inp,
                              const void *w, const void *bias, int N, int IC, int OC,
                              tsr_gelu_kind gelu) {
    if (decode_gemm && N >= 8 && N % 8 == 0) {
        c_matmul_forward(be, out, pre_gelu, inp, w, bias, N, IC, OC, gelu);
        return;
    }
    PROF(be, "matmul_rows", N, IC, OC,
         tcu_matmul_rows(pre_gelu ? pre_gelu : out, inp, w, bias, N, IC, OC, STREAM(be)));
    if (pre_gelu) tcu_gelu_forward(out, pre_gelu, (size_t)N * OC, gelu, STREAM(be));
}

static void c_copy(const tsr_backend *be, void *dst, const void *src, size_t bytes) {
    tcu_memcpy_d2d(dst, src, bytes, STREAM(be));
}

/* No matvec_forward: the one-sequence decode (tessera generate) runs on the CPU (docs/cuda.md);
 * batched decoding runs here (docs/generate.md "Batched generation"). */
/* ---- issue 67/68's model variants (cuvar67; docs/cuda.md "Model variants") ------------------ */

static void c_qknorm_proj_forward(const tsr_backend *be, void *out, float *rstd, const void *inp,
                                  const void *qw, const void *kw, int N, int NH, int KVH, int hs,
                                  float eps) {
    PROF(be, "qknorm_proj_forward", 0, 0, 0,
         tcu_qknorm_proj_forward(out, rstd, inp, qw, kw, N, NH, KVH, hs, eps, STREAM(be)));
}

static void c_qknorm_proj_backward(const tsr_backend *be, void *dinp, float *dqw, float *dkw,
                                   const void *dout, const void *inp, const void *qw,
                                   const void *kw, const float *rstd, int N, int NH, int KVH,
                                   int hs) {
    PROF(be, "qknorm_proj_backward", 0, 0, 0,
         tcu_qknorm_proj_backward(dinp, dqw, dkw, dout, inp, qw, kw, rstd, N, NH, KVH, hs,
                                  STREAM(be)));
}

static void c_rope_part_forward(const tsr_backend *be, void *qkv, const int32_t *pos, int p0,
                                const float *inv_freq, int B, int T, int NH, int KVH, int hs,
                                int rot, float mscale) {
    PROF(be, "rope_part_forward", 0, 0, 0,
         tcu_rope_part_forward(qkv, pos, p0, inv_freq, B, T, NH, KVH, hs, rot, mscale,
                               STREAM(be)));
}

static void c_rope_part_backward(const tsr_backend *be, void *dqkv, const int32_t *pos, int p0,
                                 const float *inv_freq, int B, int T, int NH, int KVH, int hs,
                                 int rot, float mscale) {
    PROF(be, "rope_part_backward", 0, 0, 0,
         tcu_rope_part_backward(dqkv, pos, p0, inv_freq, B, T, NH, KVH, hs, rot, mscale,
                                STREAM(be)));
}

static void c_geglu_forward(const tsr_backend *be, void *out, const void *inp, int N, int F) {
    PROF(be, "geglu_forward", N, F, 0, tcu_geglu_forward(out, inp, N, F, STREAM(be)));
}

static void c_geglu_backward(const tsr_backend *be, void *dinp, const void *inp, const void *dout,
                             int N, int F, tsr_grad_mode mode) {
    mode = grad_mode(be, dinp, (size_t)N * 2 * F, mode);
    PROF(be, "geglu_backward", N, F, 0,
         tcu_geglu_backward(dinp, inp, dout, N, F, mode, STREAM(be)));
}

static void c_moe_bias_forward(const tsr_backend *be, void *out, const void *b,
                               const int32_t *offs, int E, int OC) {
    PROF(be, "moe_bias_forward", E, OC, 0, tcu_moe_bias_forward(out, b, offs, E, OC, STREAM(be)));
}

static void c_moe_bias_backward(const tsr_backend *be, float *db, const void *dout,
                                const int32_t *offs, int E, int OC) {
    PROF(be, "moe_bias_backward", E, OC, 0,
         tcu_moe_bias_backward(db, dout, offs, E, OC, STREAM(be)));
}

static void c_moe_gptoss_forward(const tsr_backend *be, void *out, const void *inp, int N, int F,
                                 float alpha, float limit) {
    PROF(be, "moe_gptoss_forward", N, F, 0,
         tcu_moe_gptoss_forward(out, inp, N, F, alpha, limit, STREAM(be)));
}

static void c_moe_gptoss_backward(const tsr_backend *be, void *dinp, const void *inp,
                                  const void *dout, int N, int F, float alpha, float limit,
                                  tsr_grad_mode mode) {
    mode = grad_mode(be, dinp, (size_t)N * 2 * F, mode);
    PROF(be, "moe_gptoss_backward", N, F, 0,
         tcu_moe_gptoss_backward(dinp, inp, dout, N, F, alpha, limit, mode, STREAM(be)));
}

static void c_scale_act(const tsr_backend *be, void *x, float sc, size_t n) {
    PROF(be, "scale", 0, 0, 0, tcu_scale_bf16(x, sc, n, STREAM(be)));
}

/* dst += src: the residual add with dst as its first operand (one rounding, as the CPU's) */
static void c_add_act(const tsr_backend *be, void *dst, const void *src, size_t n) {
    PROF(be, "add_act", 0, 0, 0, tcu_residual_forward(dst, dst, src, n, STREAM(be)));
}

static void c_gate_forward(const tsr_backend *be, void *gated, const void *y, const void *gate,
                           size_t n) {
    PROF(be, "gate_forward", 0, 0, 0, tcu_gate_forward(gated, y, gate, n, STREAM(be)));
}

static void c_gate_backward(const tsr_backend *be, void *dy, void *dgate, const void *y,
                            const void *gate, size_t n) {
    PROF(be, "gate_backward", 0, 0, 0, tcu_gate_backward(dy, dgate, y, gate, n, STREAM(be)));
}

/* the Gated DeltaNet layer's parts (backend.h dn_*; cuda_dnparts.cu, cuda_deltanet.cu) */
static void c_dn_conv_forward(const tsr_backend *be, void *y, const void *x, const void *hist,
                              const void *w, const int32_t *seq, int B, int T, int CD, int K) {
    PROF(be, "dn_conv_forward", B * T, CD, K,
         tcu_dn_conv_forward(y, x, hist, w, seq, B, T, CD, K, STREAM(be)));
}

static void c_dn_conv_backward(const tsr_backend *be, void *dx, void *dhist, float *dw,
                               const void *dy, const void *x, const void *hist, const void *w,
                               const int32_t *seq, int B, int T, int CD, int K) {
    PROF(be, "dn_conv_backward", B * T, CD, K,
         tcu_dn_conv_backward(dx, dhist, dw, dy, x, hist, w, seq, B, T, CD, K, STREAM(be)));
}

static void c_dn_gates_forward(const tsr_backend *be, float *beta, float *g, const void *b,
                               const void *a, const void *A_log, const void *dt_bias, int N,
                               int HV) {
    PROF(be, "dn_gates_forward", N, HV, 0,
         tcu_dn_gates_forward(beta, g, b, a, A_log, dt_bias, N, HV, STREAM(be)));
}

static void c_dn_gates_backward(const tsr_backend *be, void *db, void *da, float *dA_log,
                                float *ddt_bias, const float *dbeta, const float *dg,
                                const void *b, const void *a, const void *A_log,
                                const void *dt_bias, int N, int HV) {
    PROF(be, "dn_gates_backward", N, HV, 0,
         tcu_dn_gates_backward(db, da, dA_log, ddt_bias, dbeta, dg, b, a, A_log, dt_bias, N, HV,
                               STREAM(be)));
}

static void c_dn_silu_gate_forward(const tsr_backend *be, void *out, const void *x,
                                   const void *z, size_t n) {
    PROF(be, "dn_silu_gate_forward", 0, 0, 0, tcu_dn_silu_gate_forward(out, x, z, n, STREAM(be)));
}

static void c_dn_silu_gate_backward(const tsr_backend *be, void *dx, void *dz, const void *dout,
                                    const void *x, const void *z, size_t n) {
    PROF(be, "dn_silu_gate_backward", 0, 0, 0,
         tcu_dn_silu_gate_backward(dx, dz, dout, x, z, n, STREAM(be)));
}

/* the CUDA core's chunk is TCU_DN_CHUNK, 64 (cuda_deltanet.cu) */
static void dn_chunk_check(const tsr_dn_shape *s) {
    if (s->chunk != TCU_DN_CHUNK)
        tsr_die(TSR_EXIT_USAGE, "deltanet on cuda: chunk %d: the CUDA core runs chunk %d only",
                s->chunk, TCU_DN_CHUNK);
}

static size_t c_dn_ckpt_floats(const tsr_dn_shape *s) {
    dn_chunk_check(s);
    return tcu_deltanet_ckpt_floats(s->B, s->T, s->HV, s->dk, s->dv);
}

static size_t c_dn_scratch_bytes(const tsr_dn_shape *s) {
    return tcu_deltanet_backward_scratch_bytes(s->B, s->T, s->HV, s->dk, s->dv);
}

static void c_dn_core_forward(const tsr_backend *be, void *out, float *state_out, float *ckpt,
                              const void *q, const void *k, const void *v, const float *g,
                              const float *beta, const float *state0, const int32_t *seq,
                              const tsr_dn_shape *s) {
    dn_chunk_check(s);
    PROF(be, "dn_core_forward", s->B * s->T, s->HV, s->dk,
         tcu_deltanet_forward(out, state_out, ckpt, q, k, v, g, beta, state0, seq, s->B, s->T,
                              s->HK, s->HV, s->dk, s->dv, STREAM(be)));
}

static void c_dn_core_backward(const tsr_backend *be, void *dq, void *dk, void *dv, float *dg,
                               float *dbeta, float *dstate0, const void *dout,
                               const float *dstate_out, const float *ckpt, const void *q,
                               const void *k, const void *v, const float *g, const float *beta,
                               const int32_t *seq, void *scratch, const tsr_dn_shape *s) {
    dn_chunk_check(s);
    PROF(be, "dn_core_backward", s->B * s->T, s->HV, s->dk,
         tcu_deltanet_backward(dq, dk, dv, dg, dbeta, dstate0, dout, dstate_out, ckpt, q, k, v,
                               g, beta, seq, scratch, s->B, s->T, s->HK, s->HV, s->dk, s->dv,
                               STREAM(be)));
}

static void c_moe_shgate_forward(const tsr_backend *be, void *out, const void *x, const void *w,
                                 int N, int C) {
    PROF(be, "shgate_forward", N, C, 0, tcu_moe_shgate_forward(out, x, w, N, C, STREAM(be)));
}

static void c_moe_shgate_grad(const tsr_backend *be, float *dg, float *gw, const void *shg,
                              const void *dshg, const void *x, const void *w, int N, int S,
                              int C) {
    PROF(be, "shgate_grad", N, C, 0,
         tcu_moe_shgate_grad(dg, gw, shg, dshg, x, w, N, S, C, STREAM(be)));
}

static void c_moe_shgate_dx(const tsr_backend *be, void *dx, const float *dg, const void *w, int N,
                            int C) {
    PROF(be, "shgate_dx", N, C, 0, tcu_moe_shgate_dx(dx, dg, w, N, C, STREAM(be)));
}

/* The table, in backend.h's order */
#define CUDA_TABLE(E)                                                                           \
    E(try_alloc, c_try_alloc)                                                                   \
    E(free, c_free)                                                                             \
    E(zero, c_zero)                                                                             \
    E(to_device, c_to_device)                                                                   \
    E(to_host, c_to_host)                                                                       \
    E(copy, c_copy)                                                                             \
    E(encoder_forward, c_encoder_forward)                                                       \
    E(encoder_backward, c_encoder_backward)                                                     \
    E(layernorm_forward, c_layernorm_forward)                                                   \
    E(residual_layernorm_forward, c_residual_layernorm_forward)                                 \
    E(layernorm_backward, c_layernorm_backward)                                                 \
    E(rmsnorm_forward, c_rmsnorm_forward)                                                       \
    E(residual_rmsnorm_forward, c_residual_rmsnorm_forward)                                     \
    E(rmsnorm_backward, c_rmsnorm_backward)                                                     \
    E(qknorm_forward, c_qknorm_forward)                                                         \
    E(qknorm_backward, c_qknorm_backward)                                                       \
    E(qknorm_proj_forward, c_qknorm_proj_forward)                                               \
    E(qknorm_proj_backward, c_qknorm_proj_backward)                                             \
    E(rope_forward, c_rope_forward)                                                             \
    E(rope_backward, c_rope_backward)                                                           \
    E(rope_part_forward, c_rope_part_forward)                                                   \
    E(rope_part_backward, c_rope_part_backward)                                                 \
    E(swiglu_forward, c_swiglu_forward)                                                         \
    E(swiglu_backward, c_swiglu_backward)                                                       \
    E(geglu_forward, c_geglu_forward)                                                           \
    E(geglu_backward, c_geglu_backward)                                                         \
    E(moe_route, c_moe_route)                                                                   \
    E(moe_gather, c_moe_gather)                                                                 \
    E(moe_gather_backward, c_moe_gather_backward)                                               \
    E(moe_matmul_forward, c_moe_matmul_forward)                                                 \
    E(moe_matmul_backward, c_moe_matmul_backward)                                               \
    E(moe_combine, c_moe_combine)                                                               \
    E(moe_combine_backward, c_moe_combine_backward)                                             \
    E(moe_router_backward, c_moe_router_backward)                                               \
    E(moe_route_ds, gpu_moe_route_ds) /* on the host (gpu_route_ds.c) */                        \
    E(moe_router_ds_backward, gpu_moe_router_ds_backward)                                       \
    E(moe_bias_forward, c_moe_bias_forward)                                                     \
    E(moe_bias_backward, c_moe_bias_backward)                                                   \
    E(moe_gptoss_forward, c_moe_gptoss_forward)                                                 \
    E(moe_gptoss_backward, c_moe_gptoss_backward)                                               \
    E(lora_scratch, tcu_lora_scratch_bytes)                                                     \
    E(lora_forward, c_lora_forward)                                                             \
    E(lora_backward, c_lora_backward)                                                           \
    E(matmul_forward, c_matmul_forward)                                                         \
    E(matvec_forward, NULL) /* the one-sequence decode runs on the CPU (above) */               \
    E(matmul_forward_fp8, NULL) /* a model's own table only: gpu_backend_use_fp8 */             \
    E(act_compress, c_act_compress)                                                             \
    E(act_decompress, c_act_decompress)                                                         \
    E(matrows_forward, c_matrows_forward)                                                       \
    E(matmul_backward, c_matmul_backward)                                                       \
    E(matmul_backward_gelu, c_matmul_backward_gelu) /* unless TSR_DGELU_FUSION=0 */             \
    E(gelu_backward, c_gelu_backward)                                                           \
    E(attention_saved, c_attention_saved)                                                       \
    E(attention_scratch, gpu_attn_scratch_bytes)                                                \
    E(attention_forward, c_attention_forward)                                                   \
    E(attention_backward, c_attention_backward)                                                 \
    E(ring_forward, c_ring_forward)                                                             \
    E(ring_backward, c_ring_backward)                                                           \
    E(ring_scratch, c_ring_scratch)                                                             \
    E(f32_to_act, c_f32_to_act)                                                                 \
    E(act_to_f32, c_act_to_f32)                                                                 \
    E(add_f32, c_add_f32)                                                                       \
    E(scale_act, c_scale_act)                                                                   \
    E(add_act, c_add_act)                                                                       \
    E(gate_forward, c_gate_forward)                                                             \
    E(gate_backward, c_gate_backward)                                                           \
    E(moe_shgate_forward, c_moe_shgate_forward)                                                 \
    E(moe_shgate_grad, c_moe_shgate_grad)                                                       \
    E(moe_shgate_dx, c_moe_shgate_dx)                                                           \
    E(dn_conv_forward, c_dn_conv_forward)                                                       \
    E(dn_conv_backward, c_dn_conv_backward)                                                     \
    E(dn_gates_forward, c_dn_gates_forward)                                                     \
    E(dn_gates_backward, c_dn_gates_backward)                                                   \
    E(dn_silu_gate_forward, c_dn_silu_gate_forward)                                             \
    E(dn_silu_gate_backward, c_dn_silu_gate_backward)                                           \
    E(dn_ckpt_floats, c_dn_ckpt_floats)                                                         \
    E(dn_scratch_bytes, c_dn_scratch_bytes)                                                     \
    E(dn_core_forward, c_dn_core_forward)                                                       \
    E(dn_core_backward, c_dn_core_backward)                                                     \
    E(copy_rows, c_copy_rows)                                                                   \
    E(mla_qkv_forward, gpu_mla_qkv_forward) /* composed (gpu_mla.c) */                          \
    E(mla_qkv_backward, gpu_mla_qkv_backward)                                                   \
    E(mla_decode, gpu_mla_decode) /* composed (gpu_mla.c) */                                    \
    E(attention_decode_rows, c_attention_decode_rows)                                           \
    E(attention_decode, c_attention_decode)                                                     \
    E(softmax_xent, c_softmax_xent)                                                             \
    E(softmax_xent_grad, c_softmax_xent_grad)                                                   \
    E(argmax, c_argmax)

TSR_BACKEND_DEFINE(cuda_table, CUDA_TABLE, .name = "cuda", .act = TSR_DT_BF16,
                   .weight = TSR_DT_BF16, .align = 256, .host = 0,
                   .mla_cache_copies = 2 /* (gpu_mla.c gpu_mla_decode) */);

tsr_backend gpu_backend_table(tcu_stream s) {
    tsr_backend be = cuda_table;
    be.ctx = s;
    if (!dgelu_fusion()) be.matmul_backward_gelu = NULL;
    return be;
}

void gpu_backend_use_fp8(tsr_backend *be, int on) {
    be->matmul_forward_fp8 = on ? c_matmul_forward_fp8 : NULL;
}
