/* gpu_mla.h — the CUDA backend's entries for multi-head latent attention and DeepSeek's router
 * (docs/cuda.md "Multi-head latent attention", "DeepSeek's router"), composed of the existing
 * tcu_* ops (no kernel of their own): gpu_mla.c the assembly of the attention input and the
 * attention with value heads of dv != dqk or a head size without a kernel (zero-padded to one),
 * gpu_route_ds.c the router on the host. backend.h's signatures; gpu_backend.c's table names them. */
#ifndef TSR_GPU_MLA_H
#define TSR_GPU_MLA_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

void gpu_mla_qkv_forward(const tsr_backend *be, void *qkv, const void *q, const void *kv,
                         const void *kpe, const int32_t *pos, int p0, const float *inv_freq,
                         int B, int T, const tsr_mla_shape *s);
void gpu_mla_qkv_backward(const tsr_backend *be, void *dq, void *dkv, void *dkpe,
                          const void *dqkv, const int32_t *pos, int p0, const float *inv_freq,
                          int B, int T, const tsr_mla_shape *s);
/* backend.h mla_decode by the decode kernel (tcu_attention_decode_var) over one key/value head
 * [turned RoPE key | latent] shared by the heads, the queries [turned q_rope | Wk^T q_nope]
 * (kv_b's key rows absorbed), the weighted latent through kv_b's value rows: a slot's cache
 * (cap, dr + kvr) twice, the keys transposed, then the values (mla_cache_copies = 2); scratch,
 * nscratch unread */
void gpu_mla_decode(const tsr_backend *be, void *out, void *cache, const void *q, const void *cn,
                    const void *kpe, const void *kvb, const float *inv_freq, float scale, int kvr,
                    const tsr_mla_shape *s, const tsr_mla_rows *rows, float *scratch, int nscratch);
/* 1 when attention over heads of hs with var goes the padded way: value heads of var->dv != hs,
 * or hs not a size the attention kernels have (cuda_shapes.h) */
int gpu_attn_padded(const tsr_attn_var *var, int hs);
/* the attention entries' maths (backend.h) on copies zero-padded to heads of the smallest kernel
 * size >= max(hs, dv): the scale var->scale or 1/sqrt(hs), the output's first dv columns of each
 * head; the backward's gradients of the padding dropped. Their buffers are process-wide device
 * scratch, grown as needed (outside the memory plan: docs/cuda.md) */
void gpu_attn_padded_forward(const tsr_backend *be, void *out, float *lse, const void *qkv,
                             const float *slopes, const int32_t *seq, const tsr_attn_var *var,
                             int B, int T, int NH, int KVH, int hs);
void gpu_attn_padded_backward(const tsr_backend *be, void *dqkv, const void *dout,
                              const void *qkv, const void *out, const float *lse,
                              const float *slopes, const int32_t *seq, const tsr_attn_var *var,
                              int B, int T, int NH, int KVH, int hs, tsr_grad_mode mode);
/* the padded heads' size: the smallest kernel size >= max(hs, dv) (dies past 256) */
int gpu_attn_pad_size(int hs, int dv);
/* var (or none) with the scale made explicit (1/sqrt(hs) unless set) and the values' size the
 * padded heads' */
tsr_attn_var gpu_attn_pad_var(const tsr_attn_var *var, int hs);
/* the scratch the backend's attention_scratch entry reports: the kernels' for hs, 0 where hs has
 * no kernel (the padded path keeps its own) */
size_t gpu_attn_scratch_bytes(int B, int T, int NH, int KVH, int hs);

/* DeepSeek's router (backend.h moe_route_ds, moe_router_ds_backward) on the host */
void gpu_moe_route_ds(const tsr_backend *be, float *probs, float *lse, int32_t *idx, float *wts,
                      int32_t *offs, int32_t *rows, int32_t *slot, float *stats,
                      const void *logits, int N, int E, int K, const tsr_moe_router *r);
void gpu_moe_router_ds_backward(const tsr_backend *be, void *dlogits, const float *dwts,
                                const float *probs, const float *lse, const int32_t *idx,
                                const float *wts, const int32_t *offs, int N, int E, int K,
                                const tsr_moe_router *r, float aux_w, float z_w);

#endif
