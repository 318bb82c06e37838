/* gpu_model.c — the decoder (src/model/decoder.c) on the CUDA backend: the backend table over
 * kernels/cuda/cuda_ops.h, the device state (fp32 master weights, their bf16 copy, fp32 gradients)
 * and the parameter source the decoder reads (gpu_model.h). */
#include "gpu/gpu_model.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/decoder.h"
#include "generate/gen_batch.h"
#include "model/model_lora.h"
#include "gpu/gpu_profile.h"
#include "model/model_ring.h"
#include "tcu_memtab.h"

size_t gpu_model_state_bytes(const tsr_model *m, gpu_state state) {
    size_t per = state == GPU_STATE_FULL ? 2 * sizeof(float) + sizeof(tsr_bf16)
               : state == GPU_STATE_NO_MASTER ? sizeof(float) + sizeof(tsr_bf16)
               : state == GPU_STATE_FROZEN ? sizeof(tsr_bf16) : 0;
    return m->n_params * per;
}

/* ---- the CUDA backend of kernels/backend.h: bf16 activations and weights, ctx = the stream ----
 * Each entry hands its pointers to the tcu_* op as they come: a NULL weight gradient (a frozen
 * parameter, backend.h) reaches the op, which skips that gradient (cuda_ops.h). */

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

/* cuBLASLt's FP8 shape rule as the backend applies it */
static int fp8_shape_ok(int64_t IC, int64_t OC) { return IC % 16 == 0 && OC % 16 == 0; }

/* zero3 / hsdp's FP8 all-gather: w's E4M3 codes and scale where the model's source gathered them
 * (matmul_forward_fp8 is only ever in a model's own table, g->be: gpu_model_use_fp8) */
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
    if (!fp8_shape_ok(IC, OC)) {
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
    PROF(be, "attention_forward", B, T, NH,
         tcu_attention_forward_var(out, saved, qkv, slopes, seq, var, B, T, NH, KVH, hs,
                                   STREAM(be)));
}

static void c_attention_backward(const tsr_backend *be, void *dqkv, const void *dout,
                                 const void *qkv, const void *out, const float *saved,
                                 const float *slopes, const int32_t *seq, const tsr_attn_var *var,
                                 void *scratch, int B, int T, int NH, int KVH, int hs,
                                 tsr_grad_mode mode) {
    mode = grad_mode(be, dqkv, (size_t)B * T * (NH + 2 * KVH) * hs, mode);
    PROF(be, "attention_backward", B, T, NH,
         tcu_attention_backward_var(dqkv, dout, qkv, out, saved, slopes, seq, var, scratch, B, T,
                                    NH, KVH, hs, mode, STREAM(be)));
}

/* context parallelism's blocks and data movement (backend.h ring_*; kernels/cuda/cuda_ring.cu) */
static void c_ring_forward(const tsr_backend *be, float *acc, float *lse, const tsr_ring_block *k,
                           int merge, void *scratch) {
    PROF(be, "ring_forward", k->B, k->Tq, k->Tk,
         tcu_ring_forward(acc, lse, k, merge, scratch, STREAM(be)));
}

static void c_ring_backward(const tsr_backend *be, float *dq, int lddq, float *dkv, int lddkv,
                            const void *dout, const void *out, const float *lse,
                            const tsr_ring_block *k, void *scratch) {
    PROF(be, "ring_backward", k->B, k->Tq, k->Tk,
         tcu_ring_backward(dq, lddq, dkv, lddkv, dout, out, lse, k, scratch, STREAM(be)));
}

static void c_f32_to_act(const tsr_backend *be, void *dst, const float *src, size_t n) {
    tcu_f32_to_bf16(dst, src, n, STREAM(be));
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

/* TSR_DECODE_GEMM (issue 66 item 3; gpu_model.h): batched decoding's rows through the training's
 * cuBLASLt GEMM where there are at least 8 of them and a multiple of 8 (the batch as the GEMM's N:
 * the weights read once for all rows, on the tensor cores; at most 8 row counts a layer shape, so
 * the GEMM's algorithm cache holds them). Process-wide, set at start; off: every row its own
 * product (batch-invariant bits). */
static int decode_gemm;

void gpu_model_set_decode_gemm(int on) { decode_gemm = on; }

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

/* the CUDA core's chunk is 64 (cuda_deltanet.cu) */
static void dn_chunk_check(const tsr_dn_shape *s) {
    if (s->chunk != 64)
        tsr_die(TSR_EXIT_USAGE, "deltanet on cuda: chunk %d: the CUDA core runs chunk 64 only",
                s->chunk);
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

/* the model variants' entries: model.attn_output_gate's, model.moe_shared_gate's, the Gated
 * DeltaNet layer's (dn_*) */
static void variant_entries(tsr_backend *be) {
    be->gate_forward = c_gate_forward;
    be->gate_backward = c_gate_backward;
    be->moe_shgate_forward = c_moe_shgate_forward;
    be->moe_shgate_grad = c_moe_shgate_grad;
    be->moe_shgate_dx = c_moe_shgate_dx;
    be->dn_conv_forward = c_dn_conv_forward;
    be->dn_conv_backward = c_dn_conv_backward;
    be->dn_gates_forward = c_dn_gates_forward;
    be->dn_gates_backward = c_dn_gates_backward;
    be->dn_silu_gate_forward = c_dn_silu_gate_forward;
    be->dn_silu_gate_backward = c_dn_silu_gate_backward;
    be->dn_ckpt_floats = c_dn_ckpt_floats;
    be->dn_scratch_bytes = c_dn_scratch_bytes;
    be->dn_core_forward = c_dn_core_forward;
    be->dn_core_backward = c_dn_core_backward;
}

static tsr_backend cuda_backend(tcu_stream s) {
    tsr_backend be = {
        .name = "cuda",
        .act = TSR_DT_BF16,
        .weight = TSR_DT_BF16,
        .align = 256,
        .host = 0,
        .ctx = s,
        .try_alloc = c_try_alloc,
        .free = c_free,
        .zero = c_zero,
        .to_device = c_to_device,
        .to_host = c_to_host,
        .copy = c_copy,
        .encoder_forward = c_encoder_forward,
        .encoder_backward = c_encoder_backward,
        .layernorm_forward = c_layernorm_forward,
        .residual_layernorm_forward = c_residual_layernorm_forward,
        .layernorm_backward = c_layernorm_backward,
        .rmsnorm_forward = c_rmsnorm_forward,
        .residual_rmsnorm_forward = c_residual_rmsnorm_forward,
        .rmsnorm_backward = c_rmsnorm_backward,
        .qknorm_forward = c_qknorm_forward,
        .qknorm_backward = c_qknorm_backward,
        .rope_forward = c_rope_forward,
        .rope_backward = c_rope_backward,
        .swiglu_forward = c_swiglu_forward,
        .swiglu_backward = c_swiglu_backward,
        .qknorm_proj_forward = c_qknorm_proj_forward,
        .qknorm_proj_backward = c_qknorm_proj_backward,
        .rope_part_forward = c_rope_part_forward,
        .rope_part_backward = c_rope_part_backward,
        .geglu_forward = c_geglu_forward,
        .geglu_backward = c_geglu_backward,
        .moe_bias_forward = c_moe_bias_forward,
        .moe_bias_backward = c_moe_bias_backward,
        .moe_gptoss_forward = c_moe_gptoss_forward,
        .moe_gptoss_backward = c_moe_gptoss_backward,
        .scale_act = c_scale_act,
        .add_act = c_add_act,
        .moe_route = c_moe_route,
        .moe_gather = c_moe_gather,
        .moe_gather_backward = c_moe_gather_backward,
        .moe_matmul_forward = c_moe_matmul_forward,
        .moe_matmul_backward = c_moe_matmul_backward,
        .moe_combine = c_moe_combine,
        .moe_combine_backward = c_moe_combine_backward,
        .moe_router_backward = c_moe_router_backward,
        .lora_scratch = tcu_lora_scratch_bytes,
        .lora_forward = c_lora_forward,
        .lora_backward = c_lora_backward,
        .matmul_forward = c_matmul_forward,
        .act_compress = c_act_compress,
        .act_decompress = c_act_decompress,
        .matrows_forward = c_matrows_forward,
        .matmul_backward = c_matmul_backward,
        .matmul_backward_gelu = dgelu_fusion() ? c_matmul_backward_gelu : NULL,
        .gelu_backward = c_gelu_backward,
        .attention_saved = c_attention_saved,
        .attention_scratch = tcu_attention_scratch_bytes,
        .attention_forward = c_attention_forward,
        .attention_backward = c_attention_backward,
        .ring_forward = c_ring_forward,
        .ring_backward = c_ring_backward,
        .ring_scratch = tcu_ring_scratch_bytes,
        .f32_to_act = c_f32_to_act,
        .add_f32 = c_add_f32,
        .copy_rows = c_copy_rows,
        .attention_decode = c_attention_decode,
        .attention_decode_rows = c_attention_decode_rows,
        .softmax_xent = c_softmax_xent,
        .softmax_xent_grad = c_softmax_xent_grad,
        .argmax = c_argmax,
    };
    variant_entries(&be);
    return be;
}

/* ---- the model on it ------------------------------------------------------------------------ */

/* Device bytes of the activations: the decoder's plan on the CUDA backend (no stream needed). */
size_t gpu_model_acts_bytes(const tsr_model *m, int B, int T) {
    const tsr_backend be = cuda_backend(NULL);
    return dec_acts_bytes(m, &be, B, T);
}

size_t gpu_model_layer_acts_bytes(const tsr_model *m, int B, int T, int fp8) {
    const tsr_backend be = cuda_backend(NULL);
    return dec_layer_acts_bytes(m, &be, B, T, fp8);
}

size_t gpu_model_lora_scratch_bytes(const tsr_lora *lo, int N) {
    const tsr_backend be = cuda_backend(NULL);
    return lora_scratch_bytes(lo, &be, N);
}

/* the scratch of one FP8 linear forward, 0 for a shape c_matmul_forward_fp8 keeps in bf16 */
static size_t fp8_layer_scratch(size_t N, int IC, int OC) {
    return IC % 16 == 0 && OC % 16 == 0 ? tcu_fp8_scratch_bytes(N, (size_t)IC, (size_t)OC) : 0;
}

size_t gpu_model_fp8_scratch_bytes(const tsr_model *m, int N, tsr_fp8_skip skip) {
    const int first = skip == TSR_FP8_SKIP_FIRST || skip == TSR_FP8_SKIP_FIRST_LAST;
    const int last = m->L - 1 - (skip == TSR_FP8_SKIP_LAST || skip == TSR_FP8_SKIP_FIRST_LAST);
    const size_t n = (size_t)N;
    size_t most = 0;
    for (int l = first; l <= last; l++) { /* decoder.c's linear() calls of layer l */
        size_t b[4] = {fp8_layer_scratch(n, m->C, m->QKV), fp8_layer_scratch(n, m->QD, m->C), 0, 0};
        if (!model_moe_layer(m, l)) b[2] = fp8_layer_scratch(n, m->C, m->FW), b[3] = fp8_layer_scratch(n, m->F, m->C);
        else if (m->S) b[2] = fp8_layer_scratch(n, m->C, 2 * m->S), b[3] = fp8_layer_scratch(n, m->S, m->C);
        for (int i = 0; i < 4; i++) most = b[i] > most ? b[i] : most;
    }
    return most;
}

void gpu_model_use_fp8(tsr_gpu_model *g, tsr_fp8_mode mode, tsr_fp8_skip skip) {
    const int L = g->m->L;
    g->be.matmul_forward_fp8 = mode == TSR_FP8_TENSORWISE ? c_matmul_forward_fp8 : NULL;
    model_fp8_layers(L, skip, &g->be.fp8_first, &g->be.fp8_last);
}

int gpu_model_fp8_weight(const tsr_gpu_model *g, int l, int id) {
    const tsr_param_info *p = &g->m->params_info[id];
    return model_fp8_linear((tsr_param_id)id) && g->be.matmul_forward_fp8 && l >= g->be.fp8_first && l <= g->be.fp8_last &&
           p->numel && fp8_shape_ok(p->shape[2], p->shape[1]); /* (L, OC, IC) */
}

void gpu_model_init(tsr_gpu_model *g, const tsr_model *m, tcu_stream s, gpu_state state) {
    memset(g, 0, sizeof *g);
    g->m = m;
    g->s = s;
    g->be = cuda_backend(s);
    g->be.logit_softcap = (float)m->cfg.final_logit_softcapping; /* (the kernels keep no copy) */
    if (state == GPU_STATE_FULL)
        g->params = tcu_malloc(m->n_params * sizeof(float), "master weights (fp32)");
    if (state == GPU_STATE_FROZEN)
        g->wbf = tcu_malloc(m->n_params * sizeof(tsr_bf16), "frozen base weights (bf16)");
    if (state == GPU_STATE_FULL || state == GPU_STATE_NO_MASTER) {
        g->wbf = tcu_malloc(m->n_params * sizeof(tsr_bf16), "weights (bf16 copy)");
        g->grads = tcu_malloc(m->n_params * sizeof(float), "gradients (fp32)");
        tcu_zero(g->grads, m->n_params * sizeof(float), s);
    }
    if (m->cfg.pos == TSR_POS_ALIBI) {
        float *h = tsr_malloc((size_t)m->NH * sizeof(float));
        model_alibi_slopes(h, m->NH);
        g->slopes = tcu_malloc((size_t)m->NH * sizeof(float), "ALiBi slopes");
        tcu_memcpy_h2d(g->slopes, h, (size_t)m->NH * sizeof(float), s);
        tcu_sync(s);
        free(h);
    }
    if (m->cfg.pos == TSR_POS_ROPE) { /* the host model's tables, or the same computed */
        const size_t n = (size_t)m->hs; /* (2, hs/2): the full layers', the sliding layers' */
        float *h = m->rope_freqs ? NULL : tsr_malloc(n * sizeof(float));
        if (h) model_rope_tables(h, &m->cfg, m->hs);
        g->rope = tcu_malloc(n * sizeof(float), "RoPE frequencies");
        tcu_memcpy_h2d(g->rope, h ? h : m->rope_freqs, n * sizeof(float), s);
        tcu_sync(s);
        free(h);
    }
}

int gpu_model_try_alloc_acts(tsr_gpu_model *g, int B, int T) {
    if (dec_try_alloc_acts(g->m, &g->be, &g->a, B, T) != 0) {
        g->B = g->T = 0;
        return -1;
    }
    g->B = B;
    g->T = T;
    return 0;
}

void gpu_model_free_acts(tsr_gpu_model *g) {
    if (g->be.free) dec_free_acts(&g->be, &g->a);
    g->B = g->T = 0;
}

void gpu_model_free(tsr_gpu_model *g) {
    if (!g->m) return;
    gpu_model_free_acts(g);
    tcu_free(g->params);
    tcu_free(g->wbf);
    tcu_free(g->grads);
    tcu_free(g->slopes);
    tcu_free(g->rope);
    memset(g, 0, sizeof *g);
}

/* fp32 -> bf16 on the host, round to nearest even, as tcu_f32_to_bf16 rounds finite values
 * (a NaN stays a quiet NaN of its sign) */
static tsr_bf16 host_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (tsr_bf16)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (tsr_bf16)(x >> 16);
}

void gpu_model_round_bf16(tsr_bf16 *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = host_bf16(src[i]);
}

/* elements per piece of a frozen base's upload (a 32 MiB host buffer) */
#define UPLOAD_PIECE ((size_t)1 << 24)

void gpu_model_upload(tsr_gpu_model *g, const float *params_host) {
    size_t n = g->m->n_params;
    if (!g->params) { /* frozen: rounded on the host, piece by piece (a pageable copy has read
                       * the piece when it returns: cuda_common.cu) */
        size_t piece = n < UPLOAD_PIECE ? n : UPLOAD_PIECE;
        tsr_bf16 *h = tsr_malloc((piece ? piece : 1) * sizeof *h);
        for (size_t at = 0; at < n; at += piece) {
            size_t k = n - at < piece ? n - at : piece;
            gpu_model_round_bf16(h, params_host + at, k);
            tcu_memcpy_h2d(g->wbf + at, h, k * sizeof *h, g->s);
        }
        tcu_sync(g->s);
        free(h);
        return;
    }
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
        off[k] = model_unit_slice(m, (tsr_param_id)i, u, &len[k]);
        if (off[k] != SIZE_MAX) k++;
    }
    return k;
}

/* The decoder's parameter source: unit u's bf16 weights and, in backward, fp32 gradients, from
 * the flat buffers, or from the source (zero3 / hsdp) when the model holds no flat weights. */
static void unit_get(void *ctx, int u, int backward, const void **w, float **gr) {
    const tsr_gpu_model *g = ctx;
    if (!g->wbf) {
        const tsr_bf16 *wb[TSR_P_COUNT] = {0};
        g->src->get(g->src->ctx, u, backward, wb, gr);
        for (int i = 0; i < TSR_P_COUNT; i++) w[i] = wb[i];
    } else {
        size_t off[TSR_P_COUNT];
        dec_unit_offsets(g->m, u, off);
        for (int i = 0; i < TSR_P_COUNT; i++) {
            if (off[i] == SIZE_MAX) continue;
            w[i] = g->wbf + off[i];
            if (backward && g->grads) gr[i] = g->grads + off[i]; /* (none: frozen, NULL) */
        }
    }
    if (g->experts) g->experts(g->experts_ctx, u, backward, w, gr);
}

/* the source hears of a layer unit after its backward (its gradients complete) */
static void unit_put(void *ctx, int u, int backward) {
    const tsr_gpu_model *g = ctx;
    if (!g->wbf && backward && u > 0) g->src->put(g->src->ctx, u);
}

static tsr_decoder decoder_of(tsr_gpu_model *g) {
    return (tsr_decoder){.m = g->m, .be = &g->be, .a = &g->a, .params = {g, unit_get, unit_put},
                         .slopes = g->slopes, .rope = g->rope, .lora = g->lora,
                         .ring = g->ring, .starts = g->starts};
}

void gpu_model_forward(tsr_gpu_model *g, const int32_t *tokens, const int32_t *targets, int B,
                       int T, float loss_scale) {
    tsr_decoder d = decoder_of(g);
    dec_forward(&d, tokens, targets, B, T, loss_scale);
}

double gpu_model_loss_sum(tsr_gpu_model *g, const int32_t *targets, int B, int T) {
    tsr_decoder d = decoder_of(g);
    return dec_loss_sum(&d, targets, B, T);
}

/* a stage: the statistics' stack, then the counts' (dec_moe_stats_view) */
size_t gpu_model_moe_stage_bytes(const tsr_model *m) {
    const tsr_backend be = cuda_backend(NULL);
    return dec_moe_stats_bytes(m, &be);
}

void gpu_model_moe_stage(tsr_gpu_model *g, void *dst) {
    tsr_decoder d = decoder_of(g);
    const dec_moe_view v = dec_moe_stats_view(&d);
    tcu_memcpy_d2d(dst, v.stats, v.stats_bytes, g->s);
    tcu_memcpy_d2d((char *)dst + v.stats_bytes, v.offs, v.offs_bytes, g->s);
}

void gpu_model_moe_stats_add_staged(tsr_gpu_model *g, const void *staged, const int32_t *targets,
                                    int B, int T, float loss_scale, double *acc) {
    tsr_decoder d = decoder_of(g);
    const dec_moe_view v = dec_moe_stats_view(&d);
    dec_moe_stats_add_host(&d, staged, (const int32_t *)((const char *)staged + v.stats_bytes),
                           dec_moe_weight(targets, (size_t)B * (size_t)T, loss_scale), acc);
}

void gpu_model_moe_stats_add(tsr_gpu_model *g, double w, double *acc) {
    tsr_decoder d = decoder_of(g);
    dec_moe_stats_add(&d, w, acc);
}

void gpu_model_stage_losses(tsr_gpu_model *g, float *dst, int B, int T) {
    /* (context parallelism: this rank's T / N positions of each sequence) */
    tcu_memcpy_d2d(dst, g->a.losses, (size_t)B * (size_t)(g->ring ? T / g->ring->N : T) *
                                         sizeof(float), g->s);
}

void gpu_model_token_scores(tsr_gpu_model *g, const int32_t *targets, int B, int T, float *losses,
                            int32_t *greedy) {
    tsr_decoder d = decoder_of(g);
    dec_token_scores(&d, targets, B, T, losses, greedy);
}

void gpu_model_backward(tsr_gpu_model *g, const int32_t *tokens, int B, int T,
                        void (*ready)(void *ctx, int unit), void *ctx) {
    tsr_decoder d = decoder_of(g);
    dec_backward(&d, tokens, NULL, B, T, -1.0f, ready, ctx);
}

void gpu_model_backward_weighted(tsr_gpu_model *g, const int32_t *tokens, const int32_t *targets,
                                 int B, int T, const float *dlosses, float moe_w) {
    tsr_decoder d = decoder_of(g);
    dec_backward_weighted(&d, tokens, targets, B, T, dlosses, moe_w);
}

int64_t gpu_model_generate(tsr_gpu_model *g, const gen_batch_opts *o, gen_seq *seqs, int n) {
    tsr_bf16 *full = NULL;
    if (!g->wbf) { /* zero3 / hsdp: every unit once, as a forward asks for them, into one copy */
        const tsr_model *m = g->m;
        full = tcu_malloc(m->n_params * sizeof *full, "the gathered weights of the rollouts");
        for (int u = 0; u <= m->L; u++) {
            const tsr_bf16 *wb[TSR_P_COUNT] = {0};
            g->src->get(g->src->ctx, u, 0, wb, NULL);
            for (int i = 0; i < TSR_P_COUNT; i++) {
                size_t len, off = model_unit_slice(m, (tsr_param_id)i, u, &len);
                if (off != SIZE_MAX && wb[i])
                    tcu_memcpy_d2d(full + off, wb[i], len * sizeof *full, g->s);
            }
        }
        g->wbf = full;
    }
    const tsr_decoder d = decoder_of(g);
    const int64_t tokens = gen_batch_run(&d, o, seqs, n);
    if (full) {
        tcu_sync(g->s);
        tcu_free(full);
        g->wbf = NULL;
    }
    return tokens;
}
