/* backend.h — the interface the decoder runs on (src/model/decoder.c; docs/decoder.md).
 *
 * One table of function pointers per backend, in the manner of ggml's backend interface: the
 * decoder's sequence (embedding, blocks, final norm, head, loss, their backward, activation
 * recomputation, the KV-cache decode step) is written once over it, and each backend fills it
 * with its own kernels, as one static table that names every entry once (TSR_BACKEND_DEFINE,
 * below: an entry added here and left out of a backend's table fails to compile). Buffers carry their element type through the table: activations and
 * their gradients are `act` elements, the weights the ops read `weight` elements; parameter
 * gradients, LayerNorm statistics, the attention state, losses are fp32, token ids int32.
 *   fp32 backend (kernels/cpu/cpu_backend.c): act = weight = fp32, over the op table of ops.h;
 *   CUDA backend (src/gpu/gpu_backend.c): act = weight = bf16 (fp32 master weights outside the
 *     table), over kernels/cuda/cuda_ops.h, ctx = the stream.
 * Dimensions and conventions as in ops.h: B T C NH hs F V Vp N = B*T; backward ops accumulate
 * (+=) into gradients except softmax_xent's gradient, which is written over the logits, and the
 * input gradient of the entries with a tsr_grad_mode `mode` (matmul, GELU, SwiGLU and attention
 * backward), which TSR_GRAD_SET overwrites (ops.h). Frozen
 * parameters as in ops.h: every fp32 parameter-gradient output of a backward entry (dwte, dwpe,
 * dw, db, dbias, dqw, dkw) may be NULL; the entry then skips that gradient and gives the
 * activation gradients (and the other parameter gradients) the same bits as with it.
 *
 * The fused ops are the seams a backend may fuse behind (the CUDA backend does); the fp32
 * backend runs each as the unfused sequence of ops.h calls written beside it, so its results
 * are the same bits as calling those ops one by one.
 * Optional entries (NULL where the backend has none): softmax_xent_grad, matvec_forward (the
 * decoder then uses matmul_forward), attention_decode (no KV-cache decoding on that backend),
 * matrows_forward (batched decoding then uses matmul_forward, whose rows depend on the batch),
 * attention_decode_rows (no batched decoding on that backend).
 * argmax is required. The entries of the Llama-style blocks (rmsnorm_*, residual_rmsnorm_forward,
 * qknorm_*, rope_*, swiglu_*) and of mixture-of-experts (moe_*) are needed only by the models that
 * use them: the decoder refuses a model whose entries its backend lacks (dec_check_backend).
 */
#ifndef TSR_BACKEND_H
#define TSR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "deltanet_shape.h"   /* tsr_dn_shape */
#include "mla_shape.h"        /* tsr_mla_shape, tsr_mla_rows */
#include "moe_router.h"       /* tsr_moe_router */
#include "ops.h"              /* tsr_gelu_kind */

typedef enum { TSR_DT_F32 = 0, TSR_DT_BF16, TSR_DT_COUNT } tsr_dtype;

/* bytes of one element of type t */
size_t tsr_dtype_size(tsr_dtype t);

typedef struct tsr_backend tsr_backend;
/* The capped logits (N rows of Vp: n = N Vp floats, host memory, grown as needed) the fp32
 * softmax_xent keeps with a soft cap, for the backward's factor 1 - (z / cap)^2 */
typedef struct tsr_capped_logits {
    float *z;
    size_t n, room;
} tsr_capped_logits;
struct tsr_backend {
    const char *name;
    tsr_dtype act;    /* activations, their gradients, the logits */
    tsr_dtype weight; /* the weights the ops read */
    size_t align;     /* bytes each layer's slice of an activation stack is aligned to (>= 1) */
    int host;         /* buffers are host memory: host arrays (tokens, segment ids) used in place */
    void *ctx;        /* the backend's state: the fp32 op table, or the CUDA stream */
    float logit_softcap; /* > 0: softmax_xent runs over cap tanh(logits / cap) (the model's
                          * final_logit_softcapping; only a backend with softcap ops is given it) */
    tsr_capped_logits *capped; /* with logit_softcap: the last softmax_xent's capped logits */
    int fp8_first, fp8_last;   /* the decoder layers matmul_forward_fp8 serves (below) */
    int mla_cache_copies; /* the copies of a position's compressed cache mla_decode keeps (0 or 1:
                           * one; CUDA's 2: the decode kernel's keys transposed and its values,
                           * gpu_mla.c): tsr_mla_cache_copies */

    /* The entries: only function pointers from here to the end (TSR_BACKEND_ENTRIES counts them
     * so; a data field goes above). */
    /* memory: try_alloc returns NULL when there is no room (callers back off); copies */
    void *(*try_alloc)(const tsr_backend *be, size_t bytes);
    void (*free)(const tsr_backend *be, void *p);
    void (*zero)(const tsr_backend *be, void *p, size_t bytes);
    void (*to_device)(const tsr_backend *be, void *dst, const void *src_host, size_t bytes);
    /* waits for the queued work before copying */
    void (*to_host)(const tsr_backend *be, void *dst_host, const void *src, size_t bytes);
    /* backend to backend (in the queue's order) */
    void (*copy)(const tsr_backend *be, void *dst, const void *src, size_t bytes);

    /* out (B,T,C) act = wte[tokens] + wpe[pos or t]; wte (Vp,C), wpe (T_max,C) or NULL weight */
    void (*encoder_forward)(const tsr_backend *be, void *out, const int32_t *tokens,
                            const void *wte, const void *wpe, const int32_t *pos, int B, int T,
                            int C);
    /* dwte (or NULL: frozen), dwpe (or NULL: none or frozen) fp32 +=; dout act; tokens on the
     * backend, tokens_host the same ids on the host (a backend may group rows by token with them;
     * neither is read without dwte) */
    void (*encoder_backward)(const tsr_backend *be, float *dwte, float *dwpe, const void *dout,
                             const int32_t *tokens, const int32_t *tokens_host,
                             const int32_t *pos, int B, int T, int C);
    /* out (N,C) act = LN(inp) * w + b; mean, rstd (N) fp32; w, b (C) weight (b or NULL) */
    void (*layernorm_forward)(const tsr_backend *be, void *out, float *mean, float *rstd,
                              const void *inp, const void *w, const void *b, int N, int C);
    /* fused: res = a + b (N,C), then out = LN(res) as layernorm_forward
     * (fp32: residual_forward, then layernorm_forward) */
    void (*residual_layernorm_forward)(const tsr_backend *be, void *res, void *out, float *mean,
                                       float *rstd, const void *a, const void *b, const void *w,
                                       const void *bias, int N, int C);
    /* dinp (N,C) act +=, dw, db (C) fp32 += (each or NULL: frozen; db also when no bias); dout,
     * inp act; w weight */
    void (*layernorm_backward)(const tsr_backend *be, void *dinp, float *dw, float *db,
                               const void *dout, const void *inp, const void *w,
                               const float *mean, const float *rstd, int N, int C);
    /* RMSNorm (ops.h rmsnorm_forward): out (N,C) act, rstd (N) fp32, w (C) weight */
    void (*rmsnorm_forward)(const tsr_backend *be, void *out, float *rstd, const void *inp,
                            const void *w, int N, int C, float eps);
    /* fused: res = a + b (N,C), then out = RMSNorm(res) (fp32: residual_forward, then
     * rmsnorm_forward) */
    void (*residual_rmsnorm_forward)(const tsr_backend *be, void *res, void *out, float *rstd,
                                     const void *a, const void *b, const void *w, int N, int C,
                                     float eps);
    /* dinp (N,C) act +=, dw (C) fp32 += or NULL (frozen); dout, inp act; w weight */
    void (*rmsnorm_backward)(const tsr_backend *be, void *dinp, float *dw, const void *dout,
                             const void *inp, const void *w, const float *rstd, int N, int C);
    /* QK-norm (ops.h qknorm_forward): out, inp (N,QKV) act; rstd (N,NH+KVH) fp32; qw, kw (hs)
     * weight. backward: dinp act +=, dqw, dkw fp32 += (each or NULL: frozen) */
    void (*qknorm_forward)(const tsr_backend *be, void *out, float *rstd, const void *inp,
                           const void *qw, const void *kw, int N, int NH, int KVH, int hs,
                           float eps);
    void (*qknorm_backward)(const tsr_backend *be, void *dinp, float *dqw, float *dkw,
                            const void *dout, const void *inp, const void *qw, const void *kw,
                            const float *rstd, int N, int NH, int KVH, int hs);
    /* QK-norm over the whole projections (model.qk_norm_scope = projection; ops.h
     * qknorm_proj_forward): the same arguments, rstd (N, 2), qw (NH hs), kw (KVH hs); or NULL */
    void (*qknorm_proj_forward)(const tsr_backend *be, void *out, float *rstd, const void *inp,
                                const void *qw, const void *kw, int N, int NH, int KVH, int hs,
                                float eps);
    void (*qknorm_proj_backward)(const tsr_backend *be, void *dinp, float *dqw, float *dkw,
                                 const void *dout, const void *inp, const void *qw,
                                 const void *kw, const float *rstd, int N, int NH, int KVH,
                                 int hs);
    /* RoPE in place on qkv / its transpose on dqkv (B,T,QKV) act (ops.h rope_forward); pos on
     * the backend or NULL (then t + p0); inv_freq (hs/2) fp32 on the backend */
    void (*rope_forward)(const tsr_backend *be, void *qkv, const int32_t *pos, int p0,
                         const float *inv_freq, int B, int T, int NH, int KVH, int hs);
    void (*rope_backward)(const tsr_backend *be, void *dqkv, const int32_t *pos, int p0,
                          const float *inv_freq, int B, int T, int NH, int KVH, int hs);
    /* The same over the first rot dimensions of each head, cosine and sine times mscale (ops.h
     * rope_part_forward); optional: NULL where the backend has no RoPE variants */
    void (*rope_part_forward)(const tsr_backend *be, void *qkv, const int32_t *pos, int p0,
                              const float *inv_freq, int B, int T, int NH, int KVH, int hs,
                              int rot, float mscale);
    void (*rope_part_backward)(const tsr_backend *be, void *dqkv, const int32_t *pos, int p0,
                               const float *inv_freq, int B, int T, int NH, int KVH, int hs,
                               int rot, float mscale);
    /* SwiGLU: out (N,F) act = silu(inp[:, :F]) * inp[:, F:], inp (N,2F) act;
     * backward dinp (N,2F) act += (or = by mode) */
    void (*swiglu_forward)(const tsr_backend *be, void *out, const void *inp, int N, int F);
    void (*swiglu_backward)(const tsr_backend *be, void *dinp, const void *inp, const void *dout,
                            int N, int F, tsr_grad_mode mode);
    /* GeGLU with the tanh GELU (model.mlp = geglu_tanh): swiglu_*'s shapes with gelu_tanh in
     * silu's place (ops.h geglu_forward); or NULL */
    void (*geglu_forward)(const tsr_backend *be, void *out, const void *inp, int N, int F);
    void (*geglu_backward)(const tsr_backend *be, void *dinp, const void *inp, const void *dout,
                           int N, int F, tsr_grad_mode mode);
    /* Mixture of experts: the maths, shapes and orders of ops.h's moe_* entries, with the
     * backend's types: logits, x, xg, dx, dxg, out, base, y, dy, inp, dinp, dout, dlogits act;
     * w weight; probs, lse, wts, dwts, stats, dw fp32; idx, offs, rows, slot int32 — all on the
     * backend (no host copy is needed between them: a backend reads offs where it lies).
     * moe_matmul_backward's dw may be NULL (frozen experts). */
    void (*moe_route)(const tsr_backend *be, float *probs, float *lse, int32_t *idx, float *wts,
                      int32_t *offs, int32_t *rows, int32_t *slot, float *stats,
                      const void *logits, int N, int E, int K, int norm);
    void (*moe_gather)(const tsr_backend *be, void *xg, const void *x, const int32_t *rows, int N,
                       int K, int C);
    void (*moe_gather_backward)(const tsr_backend *be, void *dx, const void *dxg,
                                const int32_t *slot, int N, int K, int C);
    void (*moe_matmul_forward)(const tsr_backend *be, void *out, const void *inp, const void *w,
                               const int32_t *offs, int E, int NK, int IC, int OC);
    void (*moe_matmul_backward)(const tsr_backend *be, void *dinp, float *dw, const void *dout,
                                const void *inp, const void *w, const int32_t *offs, int E,
                                int NK, int IC, int OC);
    void (*moe_combine)(const tsr_backend *be, void *out, const void *base, const void *y,
                        const float *wts, const int32_t *slot, int N, int K, int C);
    void (*moe_combine_backward)(const tsr_backend *be, void *dy, float *dwts, const void *dout,
                                 const void *y, const float *wts, const int32_t *slot, int N,
                                 int K, int C);
    void (*moe_router_backward)(const tsr_backend *be, void *dlogits, const float *dwts,
                                const float *probs, const float *lse, const int32_t *idx,
                                const float *wts, const int32_t *offs, int N, int E, int K,
                                int norm, float aux_w, float z_w);
    /* DeepSeek's router (model.moe_scoring, moe_topk_method, moe_routed_scaling: docs/moe.md
     * "DeepSeek's router"): kernels/cpu/cpu_moe_route.h's functions of the same names, the
     * backend's types as moe_route's and moe_router_backward's (the router's bias weight); or
     * NULL (the model then refuses those keys: dec_check_backend) */
    void (*moe_route_ds)(const tsr_backend *be, float *probs, float *lse, int32_t *idx,
                         float *wts, int32_t *offs, int32_t *rows, int32_t *slot, float *stats,
                         const void *logits, int N, int E, int K, const tsr_moe_router *r);
    void (*moe_router_ds_backward)(const tsr_backend *be, void *dlogits, const float *dwts,
                                   const float *probs, const float *lse, const int32_t *idx,
                                   const float *wts, const int32_t *offs, int N, int E, int K,
                                   const tsr_moe_router *r, float aux_w, float z_w);
    /* gpt-oss's experts (ops.h moe_bias_*, moe_gptoss_*): out, dout, inp, dinp act; b weight;
     * db fp32; or NULL (the model then refuses the keys: dec_check_backend) */
    void (*moe_bias_forward)(const tsr_backend *be, void *out, const void *b,
                             const int32_t *offs, int E, int OC);
    void (*moe_bias_backward)(const tsr_backend *be, float *db, const void *dout,
                              const int32_t *offs, int E, int OC);
    void (*moe_gptoss_forward)(const tsr_backend *be, void *out, const void *inp, int N, int F,
                               float alpha, float limit);
    void (*moe_gptoss_backward)(const tsr_backend *be, void *dinp, const void *inp,
                                const void *dout, int N, int F, float alpha, float limit,
                                tsr_grad_mode mode);

    /* LoRA's adapter path (ops.h lora_forward, lora_backward, docs/lora.md): out, dout, inp,
     * dinp act; A, B, dA, dB fp32 on the backend; scratch of lora_scratch(N, IC, OC, R) bytes.
     * NULL on a backend without LoRA. */
    size_t (*lora_scratch)(int N, int IC, int OC, int R);
    void (*lora_forward)(const tsr_backend *be, void *out, int ld, const void *inp, const float *A,
                         const float *B, float scale, float p, uint64_t key, int64_t row0,
                         void *scratch, int N, int IC, int OC, int R);
    void (*lora_backward)(const tsr_backend *be, void *dinp, float *dA, float *dB,
                          const void *dout, int ld, const void *inp, const float *A,
                          const float *B, float scale, float p, uint64_t key, int64_t row0,
                          void *scratch, int N, int IC, int OC, int R);

    /* out (N,OC) = inp (N,IC) @ w^T + bias (or NULL). pre_gelu (N,OC) or NULL: fused epilogue,
     * pre_gelu = the product, out = gelu(pre_gelu) of kind gelu
     * (fp32: matmul_forward into pre_gelu, then gelu_forward) */
    void (*matmul_forward)(const tsr_backend *be, void *out, void *pre_gelu, const void *inp,
                           const void *w, const void *bias, int N, int IC, int OC,
                           tsr_gelu_kind gelu);
    /* one row (N = 1) of matmul_forward, for the decode step, or NULL */
    void (*matvec_forward)(const tsr_backend *be, void *out, void *pre_gelu, const void *inp,
                           const void *w, const void *bias, int N, int IC, int OC,
                           tsr_gelu_kind gelu);
    /* matmul_forward in FP8 (precision.fp8 = "tensorwise", docs/cuda.md "FP8": inp and w cast to
     * E4M3 with their current amax, fp32 accumulation, act out), for the linear layers of decoder
     * layers fp8_first .. fp8_last (never the embeddings, the head, a MoE router; the experts'
     * grouped matmuls stay in moe_matmul_forward), or NULL: every product through matmul_forward.
     * The backward is matmul_backward's, on the unquantised act inputs and weights. */
    void (*matmul_forward_fp8)(const tsr_backend *be, void *out, void *pre_gelu, const void *inp,
                               const void *w, const void *bias, int N, int IC, int OC,
                               tsr_gelu_kind gelu);
    /* model.activation_compression = "fp8" (docs/cuda.md "Compressed activations"), or NULL:
     * act_compress stores n act elements x as E4M3 bytes q with a per-tensor scale from their
     * amax, sc (4 floats, 16-byte aligned) = {amax, scale_inv}; act_decompress writes them back
     * into x as act (decode(q) * scale_inv, rounded) */
    void (*act_compress)(const tsr_backend *be, void *q, float *sc, const void *x, size_t n);
    void (*act_decompress)(const tsr_backend *be, void *x, const void *q, const float *sc,
                           size_t n);
    /* matmul_forward with rows that do not depend on the batch (ops.h matmul_rows: each row's
     * bits a function of that row and w alone), for batched decoding, or NULL */
    void (*matrows_forward)(const tsr_backend *be, void *out, void *pre_gelu, const void *inp,
                            const void *w, const void *bias, int N, int IC, int OC,
                            tsr_gelu_kind gelu);
    /* dinp act += (or = by mode), dw, dbias fp32 += (each or NULL: dw frozen, dbias also when
     * no bias), as ops.h matmul_backward */
    void (*matmul_backward)(const tsr_backend *be, void *dinp, float *dw, float *dbias,
                            const void *dout, const void *inp, const void *w, int N, int IC,
                            int OC, tsr_grad_mode mode);
    /* The fused form of matmul_backward (TSR_GRAD_SET) then gelu_backward (TSR_GRAD_SET) through
     * pre_gelu, for tanh GELU: dinp (N,IC) act = gelu_tanh'(pre_gelu) * (dout @ w), written;
     * dw, dbias fp32 += (each or NULL). NULL on a backend without it (fp32: the decoder runs the
     * two ops, so CPU results keep their bits). */
    void (*matmul_backward_gelu)(const tsr_backend *be, void *dinp, float *dw, float *dbias,
                                 const void *dout, const void *inp, const void *w,
                                 const void *pre_gelu, int N, int IC, int OC);
    /* dinp (n) act += (or = by mode) gelu'(inp) * dout */
    void (*gelu_backward)(const tsr_backend *be, void *dinp, const void *inp, const void *dout,
                          size_t n, tsr_gelu_kind kind, tsr_grad_mode mode);

    /* Attention (the maths of ops.h attention_forward). What the backward reads besides qkv and
     * out is the backend's: `saved` fp32 of attention_saved(B,T,NH) floats (fp32: the
     * probabilities (B,NH,T,T); CUDA: the log-sum-exp (B,NH,T)), and attention_scratch bytes of
     * scratch (0: none). var: the layer's window, scale, soft cap and sinks (ops.h
     * tsr_attn_var; sinks the weights' type, fp32 here and bf16 on CUDA, dsinks fp32), or NULL;
     * both backends take them (CUDA: docs/cuda.md "Attention variants"). */
    size_t (*attention_saved)(int B, int T, int NH);
    size_t (*attention_scratch)(int B, int T, int NH, int KVH, int hs);
    void (*attention_forward)(const tsr_backend *be, void *out, float *saved, const void *qkv,
                              const float *slopes, const int32_t *seq, const tsr_attn_var *var,
                              int B, int T, int NH, int KVH, int hs);
    /* dqkv act += (or = by mode); var->dsinks fp32 += */
    void (*attention_backward)(const tsr_backend *be, void *dqkv, const void *dout,
                               const void *qkv, const void *out, const float *saved,
                               const float *slopes, const int32_t *seq, const tsr_attn_var *var,
                               void *scratch, int B, int T, int NH, int KVH, int hs,
                               tsr_grad_mode mode);
    /* Ring attention's blocks (context parallelism, src/model/model_ring.c): ops.h's
     * ring_forward and ring_backward with the backend's types (the block's q, kv, and dout, out
     * act; acc, lse, dq, dkv fp32; lo, hi int32 on the backend), and scratch of
     * ring_scratch(B, T, NH, KVH, hs) bytes for blocks of at most B x T rows (0: none). The
     * ring's data movement: f32_to_act, dst (n) act = src (n) fp32 (rounded), act_to_f32 the
     * other way (exact; multi-head latent attention's ring, mixer_mla.c); add_f32, dst (n)
     * fp32 += src (n); copy_rows, rows of width bytes from src (spitch bytes apart) to dst
     * (dpitch apart), cudaMemcpy2D's arguments. All NULL on a backend without context
     * parallelism (the trainer refuses parallel.context > 1 there). */
    void (*ring_forward)(const tsr_backend *be, float *acc, float *lse, const tsr_ring_block *k,
                         int merge, void *scratch);
    void (*ring_backward)(const tsr_backend *be, float *dq, int lddq, float *dkv, int lddkv,
                          const void *dout, const void *out, const float *lse,
                          const tsr_ring_block *k, void *scratch);
    size_t (*ring_scratch)(int B, int T, int NH, int KVH, int hs);
    void (*f32_to_act)(const tsr_backend *be, void *dst, const float *src, size_t n);
    void (*act_to_f32)(const tsr_backend *be, float *dst, const void *src, size_t n);
    void (*add_f32)(const tsr_backend *be, float *dst, const float *src, size_t n);
    /* x (n) act *= s (model.embed_scale on the embedding and its gradient), or NULL */
    void (*scale_act)(const tsr_backend *be, void *x, float s, size_t n);
    /* dst (n) act += src (n) act (model.norm_placement = post's residual adds), or NULL */
    void (*add_act)(const tsr_backend *be, void *dst, const void *src, size_t n);
    /* model.attn_output_gate (Qwen3-Next): gated (n) act = y sigmoid(gate); the backward from
     * dy = d(gated) in place: dy = dy s, dgate (n) act = dy y s (1 - s), written; or NULL */
    void (*gate_forward)(const tsr_backend *be, void *gated, const void *y, const void *gate,
                         size_t n);
    void (*gate_backward)(const tsr_backend *be, void *dy, void *dgate, const void *y,
                          const void *gate, size_t n);
    /* model.moe_shared_gate (ops.h moe_shgate_*): out (N,C) act *= s_n = sigmoid(x[n] . w), x
     * (N,C) act, w (C) weight; grad: dg (N) fp32 = (1 - s_n) shg[n] . dshg[n] (shg, dshg (N,S)
     * act), gw (C) fp32 += sum_n dg[n] x[n]; dx: dx (N,C) act += dg[n] w; or NULL */
    void (*moe_shgate_forward)(const tsr_backend *be, void *out, const void *x, const void *w,
                               int N, int C);
    void (*moe_shgate_grad)(const tsr_backend *be, float *dg, float *gw, const void *shg,
                            const void *dshg, const void *x, const void *w, int N, int S, int C);
    void (*moe_shgate_dx)(const tsr_backend *be, void *dx, const float *dg, const void *w, int N,
                          int C);
    /* Gated DeltaNet layers (model.layer_types linear_attention; src/model/deltanet_layer.c,
     * docs/deltanet.md "CUDA"): the parts of the layer around its projections and its RMSNorm,
     * the maths and shapes of kernels/cpu/cpu_deltanet.h's functions of the same names, with the
     * backend's types: x, y, hist, dx, dhist, dy (the convolution), b, a, db, da (the gates'
     * inputs), q, k, v, out, dq, dk, dv, dout (the core), z, dz (the output gate) act; w (the
     * convolution's), A_log, dt_bias weight; beta, g, dbeta, dg, the states, ckpt, dw, dA_log,
     * ddt_bias fp32; seq int32 on the backend. The core's chunk is s->chunk (CUDA: 64 only);
     * dn_scratch_bytes the backward's scratch (0: none). NULL on a backend without them (the
     * decoder then refuses linear layers: dec_check_backend). */
    void (*dn_conv_forward)(const tsr_backend *be, void *y, const void *x, const void *hist,
                            const void *w, const int32_t *seq, int B, int T, int CD, int K);
    void (*dn_conv_backward)(const tsr_backend *be, void *dx, void *dhist, float *dw,
                             const void *dy, const void *x, const void *hist, const void *w,
                             const int32_t *seq, int B, int T, int CD, int K);
    void (*dn_gates_forward)(const tsr_backend *be, float *beta, float *g, const void *b,
                             const void *a, const void *A_log, const void *dt_bias, int N,
                             int HV);
    void (*dn_gates_backward)(const tsr_backend *be, void *db, void *da, float *dA_log,
                              float *ddt_bias, const float *dbeta, const float *dg, const void *b,
                              const void *a, const void *A_log, const void *dt_bias, int N,
                              int HV);
    void (*dn_silu_gate_forward)(const tsr_backend *be, void *out, const void *x, const void *z,
                                 size_t n);
    void (*dn_silu_gate_backward)(const tsr_backend *be, void *dx, void *dz, const void *dout,
                                  const void *x, const void *z, size_t n);
    size_t (*dn_ckpt_floats)(const tsr_dn_shape *s);
    size_t (*dn_scratch_bytes)(const tsr_dn_shape *s);
    void (*dn_core_forward)(const tsr_backend *be, void *out, float *state_out, float *ckpt,
                            const void *q, const void *k, const void *v, const float *g,
                            const float *beta, const float *state0, const int32_t *seq,
                            const tsr_dn_shape *s);
    void (*dn_core_backward)(const tsr_backend *be, void *dq, void *dk, void *dv, float *dg,
                             float *dbeta, float *dstate0, const void *dout,
                             const float *dstate_out, const float *ckpt, const void *q,
                             const void *k, const void *v, const float *g, const float *beta,
                             const int32_t *seq, void *scratch, const tsr_dn_shape *s);
    void (*copy_rows)(const tsr_backend *be, void *dst, size_t dpitch, const void *src,
                      size_t spitch, size_t width, size_t rows);
    /* Multi-head latent attention (model.kv_lora_rank > 0; src/model/mixer_mla.c): the attention
     * input assembled from the query projection, the expanded keys and values and the shared
     * RoPE key, and its transpose, the maths and shapes of kernels/cpu/cpu_mla.h's functions of
     * the same names (qkv, q, kv, kpe, dq, dkv, dkpe, dqkv act; pos int32 and inv_freq fp32 on
     * the backend); the attention entries with tsr_attn_var's dv. NULL on a backend without MLA
     * (the decoder then refuses it: dec_check_backend). */
    void (*mla_qkv_forward)(const tsr_backend *be, void *qkv, const void *q, const void *kv,
                            const void *kpe, const int32_t *pos, int p0, const float *inv_freq,
                            int B, int T, const tsr_mla_shape *s);
    void (*mla_qkv_backward)(const tsr_backend *be, void *dq, void *dkv, void *dkpe,
                             const void *dqkv, const int32_t *pos, int p0, const float *inv_freq,
                             int B, int T, const tsr_mla_shape *s);
    /* decoding over the compressed caches (cpu_mla_decode: cache, cn, kpe, q, out act; kvb
     * weight; rows' ids int32 on the backend; scratch fp32), or NULL (no MLA decoding) */
    void (*mla_decode)(const tsr_backend *be, void *out, void *cache, const void *q,
                       const void *cn, const void *kpe, const void *kvb, const float *inv_freq,
                       float scale, int kvr, const tsr_mla_shape *s, const tsr_mla_rows *rows,
                       float *scratch, int nscratch);

    /* ops.h attention_decode_rows on one layer's caches of every slot (kt, v act; slot, pos,
     * seg int32 on the backend; scratch fp32), or NULL */
    void (*attention_decode_rows)(const tsr_backend *be, void *out, void *kt, void *v,
                                  const void *qkv, const float *slopes, const tsr_attn_var *var,
                                  float *scratch,
                                  int nscratch, const int32_t *slot, const int32_t *pos,
                                  const int32_t *seg, int n, size_t slot_stride, int cap, int NH,
                                  int KVH, int hs);
    /* ops.h attention_decode on one layer's cache (kt, v act; scratch fp32), or NULL */
    void (*attention_decode)(const tsr_backend *be, void *out, void *kt, void *v,
                             const void *qkv, const float *slopes, const tsr_attn_var *var,
                             float *scratch, int nscratch,
                             int p0, int c, int seg, int cap, int NH, int KVH, int hs);

    /* Softmax over the first V of Vp columns and cross-entropy: losses (N) fp32. dlosses (N)
     * or NULL. fused: with dlosses the logits (N,Vp) act are overwritten by
     * dlogits = (p - onehot) * dlosses[n]; without, the logits become whatever the backend
     * keeps for evaluation (fp32: the probabilities; CUDA: the logits unchanged).
     * (fp32: softmax_xent_forward in place, then softmax_xent_backward in place) */
    void (*softmax_xent)(const tsr_backend *be, float *losses, void *logits,
                         const int32_t *targets, const float *dlosses, int N, int V, int Vp);
    /* The gradient after an evaluation softmax_xent (dlosses NULL), in place, or NULL where the
     * backend cannot (the decoder then needs dlosses in the forward). losses (N) fp32: scratch
     * it may overwrite (CUDA runs its fused softmax_xent again over the logits it kept, which
     * writes the losses too). */
    void (*softmax_xent_grad)(const tsr_backend *be, float *losses, void *logits,
                              const float *dlosses, const int32_t *targets, int N, int V, int Vp);
    /* idx (N) int32 = argmax over the V real columns of what an evaluation softmax_xent left in
     * logits (the lowest index on ties) */
    void (*argmax)(const tsr_backend *be, int32_t *idx, const void *logits, int N, int V, int Vp);
};

/* The number of entries: the function pointers from try_alloc to the end of the struct */
#define TSR_BACKEND_ENTRIES                                                                     \
    ((sizeof(struct tsr_backend) - offsetof(struct tsr_backend, try_alloc)) / sizeof(void (*)(void)))
_Static_assert((sizeof(struct tsr_backend) - offsetof(struct tsr_backend, try_alloc)) %
                       sizeof(void (*)(void)) == 0,
               "backend.h: only function pointers after try_alloc (a data field goes above it)");

/* A backend's table is an X-macro of (entry, function or NULL) pairs, TABLE(E) with one
 * E(entry, fn) per entry, which
 *     TSR_BACKEND_DEFINE(name, TABLE, .act = ..., the other data fields);
 * makes the static const tsr_backend `name` of (a designated initialiser), after checking at
 * compile time that TABLE names every entry exactly once: an entry named twice is a duplicate
 * enumerator, a name that is no entry an unknown designator, an entry left out (an entry added
 * above and not to every backend) a count short of TSR_BACKEND_ENTRIES. An entry the backend
 * lacks is named with NULL, so that it is a choice written down. */
#define TSR_BACKEND_ENTRY_(entry, fn) .entry = (fn),
#define TSR_BACKEND_NAMED_(entry, fn) tsr_backend_named_##entry,
#define TSR_BACKEND_DEFINE(name, table, ...)                                                    \
    enum { table(TSR_BACKEND_NAMED_) name##_entries_ };                                         \
    _Static_assert(name##_entries_ == TSR_BACKEND_ENTRIES,                                      \
                   #table " does not name every entry of struct tsr_backend (backend.h)");      \
    static const tsr_backend name = {__VA_ARGS__, table(TSR_BACKEND_ENTRY_)}

/* The fp32 backend over an op table (kernels/cpu/cpu_backend.c): host memory, act = weight =
 * fp32, no alignment beyond the allocator's. */
tsr_backend tsr_fp32_backend(const tsr_ops *ops);

/* the copies of a position's compressed cache be's mla_decode keeps (>= 1) */
static inline int tsr_mla_cache_copies(const tsr_backend *be) {
    return be->mla_cache_copies > 1 ? be->mla_cache_copies : 1;
}

#endif
