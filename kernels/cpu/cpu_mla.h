/* cpu_mla.h — multi-head latent attention's own fp32 kernels (DeepSeek-V2/V3; the layer:
 * src/model/mixer_mla.c, docs/models.md "DeepSeek"): the attention input assembled from the
 * query projection, the heads' expanded keys and values and the one RoPE key they share, and its
 * transpose. The attention itself is cpu_attention.c's, with value heads of dv (tsr_attn_var).
 *
 * Shapes per row (B T rows): q (NH dqk), each head [nope (dn) | rope (dr)], dqk = dn + dr; kv
 * (NH (dn + dv)), each head [key nope (dn) | value (dv)]; kpe (dr) the RoPE key before its
 * rotation; qkv (NH dqk + NH dqk + NH dv) = [q heads | k heads | v heads], key head h =
 * [kv's key nope of h | the rotated kpe], the query heads' rope parts rotated too.
 */
#ifndef TSR_CPU_MLA_H
#define TSR_CPU_MLA_H

#include <stddef.h>
#include <stdint.h>

#include "mla_shape.h" /* tsr_mla_shape, tsr_mla_rows */

/* qkv (N, NH (2 dqk + dv)) from q, kv, kpe as above, the rope parts turned by the angle
 * p inv_freq[i], p = pos[n] or n % T + p0 (pos (N) or NULL); inv_freq (dr/2). N = B T. */
void cpu_mla_qkv_forward(float *qkv, const float *q, const float *kv, const float *kpe,
                         const int32_t *pos, int p0, const float *inv_freq, int B, int T,
                         const tsr_mla_shape *s);
/* Its transpose from dqkv: dq, dkv written; dkpe written, the sum over the heads (in head order)
 * of their key rope parts' gradients, turned back. */
void cpu_mla_qkv_backward(float *dq, float *dkv, float *dkpe, const float *dqkv,
                          const int32_t *pos, int p0, const float *inv_freq, int B, int T,
                          const tsr_mla_shape *s);

/* Multi-head latent attention over the compressed caches (docs/models.md "DeepSeek": decoding):
 * cache (slots, cap, kvr + dr) [the normed latent | the turned RoPE key] of one MLA layer. First
 * every row's cn (n, kvr) and turned kpe (n, dr) are stored at its position; then each (row, head
 * h) with the up-projections absorbed: kvb (NH (dn + dv), kvr) is kv_b_proj, head h's key rows
 * Wk_h (dn, kvr) then value rows Wv_h (dv, kvr);
 *   qa = [Wk_h^T q_nope_h (kvr) | RoPE(q_rope_h) (dr)],  s_j = scale qa . cache_j (j in the row's
 *   positions), p = softmax(s),  o = sum_j p_j cache_j[:kvr],  out_h (dv) = Wv_h o.
 * q (n, NH dqk) the queries before RoPE; out (n, NH dv). One task per (row, head), the same
 * arithmetic whatever the other rows; scratch (nscratch threads x (cap + 2 kvr + 2 dr)) floats. */
void cpu_mla_decode(float *out, float *cache, const float *q, const float *cn, const float *kpe,
                    const float *kvb, const float *inv_freq, float scale, int kvr,
                    const tsr_mla_shape *s, const tsr_mla_rows *rows, float *scratch,
                    int nscratch);

#endif
