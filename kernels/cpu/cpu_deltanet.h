/* cpu_deltanet.h — the Gated DeltaNet core (Yang et al., "Gated Delta Networks"; Hugging Face's
 * Qwen3-Next torch_chunk_gated_delta_rule / torch_recurrent_gated_delta_rule), fp32 in and out,
 * for the CPU backend (docs/deltanet.md). Not in the op table yet: the decoder's linear-attention
 * layer will reach it through one once it is wired (docs/deltanet.md "What is left").
 *
 * Per value head h (HV of them) with its query/key head h / (HV / HK) (grouped as HF's
 * repeat_interleave), state S (dk, dv), at each position t:
 *   q~ = q / sqrt(|q|^2 + 1e-6) / sqrt(dk),  k~ = k / sqrt(|k|^2 + 1e-6)   (L2 norm in the op)
 *   S  = exp(g_t) S;  delta = beta_t (v_t - S^T k~);  S += k~ delta^T;  out_t = S^T q~
 * Shapes (dense, row-major): q, k (B,T,HK,dk); v, out (B,T,HV,dv); g (log-decay, alpha = exp(g)),
 * beta (the write strength, sigmoid(b) computed before) (B,T,HV); states (B,HV,dk,dv).
 * Packed documents: seq (B,T) segment ids as attention_forward takes them (contiguous runs), or
 * NULL. The state is zero at each document start after the first position; the state entering
 * position 0 is state0 (the document in progress there continues it: decoding, context
 * parallelism), or zero when state0 is NULL. The final state is the state after position T - 1.
 * Every gradient ACCUMULATES (+=), ops.h's convention. Deterministic whatever the thread count:
 * one thread does one (b, query/key head) pair with all its value heads, in head order. */
#ifndef TSR_CPU_DELTANET_H
#define TSR_CPU_DELTANET_H

#include <stddef.h>
#include <stdint.h>

#include "deltanet_shape.h" /* tsr_dn_shape */

/* floats of the forward's saved states (ckpt): one (dk, dv) state per value head and per block of
 * `chunk` positions, (B, HV, ceil(T / chunk), dk, dv) */
size_t cpu_deltanet_ckpt_floats(const tsr_dn_shape *s);

/* The chunked (WY/UT) form, for training. out (B,T,HV,dv); state_out (B,HV,dk,dv) the final state
 * or NULL; ckpt the state entering each block of `chunk` positions (for the backward) or NULL;
 * state0 or NULL (zero); seq or NULL. A chunk is a block's run of positions of one document. */
void cpu_deltanet_forward(float *out, float *state_out, float *ckpt, const float *q,
                          const float *k, const float *v, const float *g, const float *beta,
                          const float *state0, const int32_t *seq, const tsr_dn_shape *s);

/* The step-by-step recurrent form, for decoding: state (B,HV,dk,dv) holds the state entering
 * position 0 and is overwritten by the final state; out (B,T,HV,dv); seq or NULL. */
void cpu_deltanet_recurrent(float *out, float *state, const float *q, const float *k,
                            const float *v, const float *g, const float *beta, const int32_t *seq,
                            const tsr_dn_shape *s);

/* The backward of cpu_deltanet_forward: dq, dk (B,T,HK,dk), dv (B,T,HV,dv), dg, dbeta (B,T,HV)
 * +=; dstate0 (B,HV,dk,dv) += or NULL; dout (B,T,HV,dv); dstate_out the gradient of the final
 * state or NULL (zero); ckpt as the forward wrote it (it holds state0); the other inputs as given to the forward. */
void cpu_deltanet_backward(float *dq, float *dk, float *dv, float *dg, float *dbeta,
                           float *dstate0, const float *dout, const float *dstate_out,
                           const float *ckpt, const float *q, const float *k, const float *v,
                           const float *g, const float *beta, const int32_t *seq,
                           const tsr_dn_shape *s);

/* The layer's other parts (cpu_deltanet_layer.c; src/model/deltanet_layer.c composes them).
 *
 * The short causal depthwise convolution with SiLU (HF's conv1d, groups = channels, padding
 * K - 1, no bias, then silu): y[t,c] = silu(sum_j w[c,j] x[t - (K-1) + j, c]) over the rows of
 * t's own document (seq or NULL, as above: the window never reaches the previous document). Rows
 * before 0 are hist's (B, K-1, CD): the inputs before this pass (a decoding step, the previous
 * rank's), the document in progress at row 0 continuing them; or NULL, zeros (HF's padding).
 * x, y (B,T,CD), w (CD,K), K <= 16. Backward: dx (B,T,CD) +=, dhist (B,K-1,CD) += or NULL (the
 * gradient of hist: context parallelism passes it to the previous rank), dw (CD,K) += or NULL;
 * dy as y; hist as the forward's. */
void cpu_dn_conv_forward(float *y, const float *x, const float *hist, const float *w,
                         const int32_t *seq, int B, int T, int CD, int K);
void cpu_dn_conv_backward(float *dx, float *dhist, float *dw, const float *dy, const float *x,
                          const float *hist, const float *w, const int32_t *seq, int B, int T,
                          int CD, int K);

/* The gates (HF): beta = sigmoid(b), g = -exp(A_log[h]) softplus(a + dt_bias[h]) (softplus
 * x for x > 20, torch's threshold). b, a, beta, g (N,HV); A_log, dt_bias (HV). Backward: db, da
 * (N,HV) +=, dA_log, ddt_bias (HV) += or NULL (frozen); dbeta, dg (N,HV). */
void cpu_dn_gates_forward(float *beta, float *g, const float *b, const float *a,
                          const float *A_log, const float *dt_bias, int N, int HV);
void cpu_dn_gates_backward(float *db, float *da, float *dA_log, float *ddt_bias,
                           const float *dbeta, const float *dg, const float *b, const float *a,
                           const float *A_log, const float *dt_bias, int N, int HV);

/* The gate of the normed output: out = x silu(z), all (N, n). Backward: dx, dz +=. */
void cpu_dn_silu_gate_forward(float *out, const float *x, const float *z, size_t n);
void cpu_dn_silu_gate_backward(float *dx, float *dz, const float *dout, const float *x,
                               const float *z, size_t n);

#endif
