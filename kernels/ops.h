/* ops.h — the fp32 op table: the CPU backend's kernels (kernels/cpu/), the oracle every other
 * backend is tested against. The decoder (src/model/decoder.c) does not call it directly: it runs
 * on the typed backend interface of kernels/backend.h, whose fp32 implementation (cpu_backend.c)
 * is built on this table, and whose bf16 one (src/gpu/gpu_backend.c) on kernels/cuda/cuda_ops.h.
 *
 * Dimension vocabulary (fixed for the whole code base):
 *   B  sequences in a microbatch      T  sequence length          C  channels (d_model)
 *   NH attention heads                hs head size (C / NH unless the model sets head_dim)
 *   KVH key/value heads (NH a multiple; NH/KVH query heads share one: GQA, MQA at KVH = 1)
 *   QKV = (NH + 2 KVH) hs: the fused projection's width, [q heads | k heads | v heads]
 *   F  MLP hidden (expansion_ratio * C, or the model's intermediate_size)
 *   V  real vocabulary size           Vp vocabulary padded to a multiple of 64/128 (Vp >= V)
 *   N  rows = B * T                   L  layers
 * Every tensor is dense, row-major, fp32 on the CPU backend.
 *
 * Conventions for all backward ops (like llm.c's CPU reference):
 *   - gradients ACCUMULATE (+=) into both parameter gradients and input gradients; the caller zeroes
 *     them before a step (parameter grads) or before a backward pass (activation grads);
 *   - the one exception is softmax_xent_backward, which WRITES dlogits (=) and may alias probs.
 * Optional pointers are marked "or NULL"; an op given NULL skips that term (no bias, no learned
 * positions, no ALiBi, no segments: plain causal attention).
 * Frozen parameters: every parameter-gradient output of a backward op (dwte, dwpe, dw, db, dbias,
 * dqw, dkw) may be NULL, meaning that parameter is frozen (LoRA's base model): the op skips that
 * gradient's work (the weight-gradient product, the column sums) and computes the input gradient
 * (dinp, dx) exactly as with it, the same bits; the other parameter gradients too.
 */
#ifndef TSR_OPS_H
#define TSR_OPS_H

#include <stddef.h>
#include <stdint.h>

#define TSR_LN_EPS 1e-5f

typedef enum { TSR_GELU_TANH = 0, TSR_GELU_EXACT, TSR_GELU_COUNT } tsr_gelu_kind;

/* How a backward op of the backend tables (backend.h, cuda_ops.h) writes its input gradient:
 * TSR_GRAD_ADD accumulates (+=, the ops' convention), TSR_GRAD_SET overwrites (the buffer's old
 * contents are not read: the caller knows it is fresh). SET gives the bits of zeroing the buffer,
 * then ADD (a -0 result may read as +0), without the zeroing pass or the op's read of it. */
typedef enum { TSR_GRAD_ADD = 0, TSR_GRAD_SET = 1 } tsr_grad_mode;

/* The attention variants of one layer (docs/models.md "Attention variants"); a NULL pointer to
 * it, or a zeroed one, is plain attention, with the same bits as before the variants existed.
 *   window: sliding-window attention (model.layer_types, model.sliding_window): row i sees
 *           columns j with i - window < j <= i (Hugging Face's convention), besides the causal
 *           and document masks; 0 = no window.
 *   sinks:  (NH) a learned logit per query head (gpt-oss) that joins every row's softmax
 *           denominator and adds nothing to the output: att[i,j] = e^s_ij / (e^sink_h +
 *           sum_j' e^s_ij'); or NULL.
 *   dsinks: the backward's (NH) += d loss / d sink_h = -sum_i p_sink(i) (dout_i . out_i), or
 *           NULL (no sinks, or frozen).
 *   scale:  the scores' factor in place of 1 / sqrt(hs) (Gemma's query_pre_attn_scalar q:
 *           1 / sqrt(q)); 0 = 1 / sqrt(hs). */
typedef struct tsr_attn_var {
    int window;
    const float *sinks;
    float *dsinks;
    float scale;
    float softcap; /* > 0: scores = softcap tanh(scores / softcap) after the scale (Gemma 2) */
    int dv;        /* the value heads' size where it is not hs (multi-head latent attention:
                    * v_head_dim): a qkv row is [q NH hs | k KVH hs | v KVH dv] and the output
                    * NH dv wide; 0 = hs. The training entries take it (attention_forward and
                    * _backward) and the CPU's ring blocks (ring_forward, _backward: value head
                    * g at kv + KVH hs + g dv, the output and acc rows NH dv wide); the decode
                    * entries and the CUDA ring's do not (0 there) */
} tsr_attn_var;

/* One block of ring attention (context parallelism: src/model/model_ring.c,
 * docs/parallelism.md): Tq query rows of each of B sequences against Tk key/value rows, with
 * their positions in the whole sequence. Query row i of sequence b is the sequence's position
 * qoff + i and has query head h at q + (b qbs + i) ldq + h hs; key row j is position koff + j,
 * with key head g at kv + (b kbs + j) ldkv + g hs and value head g at that + KVH hs (with the
 * variants' dv: at kv + (b kbs + j) ldkv + KVH hs + g dv). Query head h
 * reads key/value head h / (NH/KVH). Row i sees row j iff
 *   lo[b T + qoff + i] <= koff + j <= qoff + i     (lo NULL: 0, a causal mask alone),
 * with s[i,j] = q_i.k_j / sqrt(hs) - slope_h (qoff + i - koff - j) (ALiBi with slopes). lo and hi
 * (B,T) are the first position of each position's document and one past its last
 * (attn_mask = document; both or neither). The elements are fp32 in this table, the backend's
 * act type in backend.h's entries.
 * var: the layer's variants (tsr_attn_var) or NULL. A window also bounds what row i sees from
 * below, koff + j > qoff + i - window; the scale and the soft cap make the scores
 * c(scale q_i.k_j) - slope_h (...), c the cap (as attention_forward's). The sinks join each row's
 * softmax denominator once, in the merge: the block that starts a row (merge = 0) starts it
 * from acc = 0, lse = sink_h rather than from nothing, so the merged lse counts e^sink_h and the
 * backward's p = exp(s - lse) is the sinked probability. With sink_grad the backward adds each of
 * the block's rows' -p_sink(i) D_i = -exp(sink_h - lse_i) dout_i.out_i to var->dsinks[h]: the
 * caller sets it on one block per query row (model_ring.c: the diagonal one). */
typedef struct tsr_ring_block {
    int B, NH, KVH, hs;
    int Tq, Tk;              /* query rows and key rows of each sequence */
    int qoff, koff;          /* the whole sequence's position of query row 0, of key row 0 */
    const void *q, *kv;
    int ldq, ldkv;           /* elements between consecutive rows */
    int qbs, kbs;            /* rows between consecutive sequences (of q and of what follows it
                              * query-wise: acc, lse, dout, out, dq; of kv and dkv) */
    const int32_t *lo, *hi;  /* (B,T), or NULL */
    int T;                   /* the whole sequence's length (lo, hi's rows) */
    const float *slopes;     /* (NH) or NULL */
    const tsr_attn_var *var; /* the layer's variants, or NULL */
    int sink_grad;           /* the backward takes the rows' sink gradients in this block */
} tsr_ring_block;

typedef struct tsr_ops {
    const char *name; /* "cpu", "cuda" */

    /* memory on the backend's device */
    void *(*alloc)(size_t bytes);      /* zero-filled; dies on failure naming the size */
    void *(*try_alloc)(size_t bytes);  /* zero-filled; NULL when there is no room (the caller
                                        * backs off: micro_batch = auto) */
    void (*free)(void *p);
    void (*zero)(void *p, size_t bytes);

    /* out[b,t,:] = wte[tokens[b,t],:] + wpe[p,:] with p = pos[b,t], or p = t when pos is NULL.
     * out (B,T,C), tokens (B,T) with 0 <= token < V, wte (Vp,C), wpe (T_max,C) or NULL,
     * pos (B,T) with 0 <= pos < T_max, or NULL (positions restart per document: model.c) */
    void (*encoder_forward)(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                            const int32_t *pos, int B, int T, int C);
    /* dwte (Vp,C) += (or NULL: frozen; tokens then unread), dwpe (T_max,C) += at the rows forward
     * read (or NULL: none, or frozen), dout (B,T,C). Both NULL: nothing to do. */
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                             const int32_t *pos, int B, int T, int C);

    /* out = (inp - mean) * rstd * w + b over the last axis, eps = TSR_LN_EPS (biased variance).
     * out (N,C), mean (N), rstd (N) saved for backward, inp (N,C), w (C), b (C) or NULL */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C);
    /* dinp (N,C) +=, dw (C) += or NULL (frozen), db (C) += or NULL, dout (N,C) */
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);

    /* out = inp @ w^T + bias.  out (N,OC), inp (N,IC), w (OC,IC), bias (OC) or NULL */
    void (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias,
                           int N, int IC, int OC);
    /* dinp (N,IC) += dout @ w (or NULL: the product skipped; the zero-bubble pipeline's weight
     * half, src/train/pipeline_zb.c), dw (OC,IC) += dout^T @ inp (or NULL: frozen, the product
     * skipped), dbias (OC) += sum_n dout (or NULL) */
    void (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int IC, int OC);

    /* Causal multi-head attention on a fused qkv projection, optionally block-diagonal, with
     * grouped key/value heads: query head h reads key/value head g = h / (NH / KVH).
     *   s[i,j] = q_i . k_j / sqrt(hs) - slope_h * (i - j)   for j in [lo(i), i]  (ALiBi term only
     *            if slopes); lo(i) = 0 when seq is NULL, else the first index of the run of equal
     *            seq ids that holds i (a segment: row i sees only its own segment)
     *   att[b,h,i,:] = softmax_j(s[i,:]) (exact zeros for j outside [lo(i), i]);
     *   out[b,i,h*hs:(h+1)*hs] = sum_j att v_j
     * qkv (B,T,QKV) laid out [q | k | v]: query head h at columns h*hs.., key head g at
     * NH*hs + g*hs.., value head g at (NH+KVH)*hs + g*hs..; out (B,T,NH*hs);
     * att (B,NH,T,T) saved for backward; alibi_slopes (NH) or NULL; seq (B,T) segment ids or NULL
     * (segments are contiguous runs: an id that comes back after another is a new segment);
     * var the layer's window and sinks (tsr_attn_var), or NULL */
    void (*attention_forward)(float *out, float *att, const float *qkv, const float *alibi_slopes,
                              const int32_t *seq, const tsr_attn_var *var, int B, int T, int NH,
                              int KVH, int hs);
    /* dqkv (B,T,QKV) +=, dout (B,T,NH*hs), qkv and att from the forward pass, seq and var as
     * given to it, var->dsinks += (a key/value head's gradient sums over the query heads that
     * share it) */
    void (*attention_backward)(float *dqkv, const float *dout, const float *qkv, const float *att,
                               const int32_t *seq, const tsr_attn_var *var, int B, int T, int NH,
                               int KVH, int hs);

    /* RMSNorm over the last axis: out = inp * rstd * w, rstd = 1 / sqrt(mean(inp^2) + eps).
     * out (N,C), rstd (N) saved for backward, inp (N,C), w (C) */
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *w, int N,
                            int C, float eps);
    /* dinp (N,C) +=, dw (C) += or NULL (frozen), dout (N,C); inp, w, rstd as in forward */
    void (*rmsnorm_backward)(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const float *rstd, int N, int C);
    /* QK-norm (Qwen 3): out (N,QKV) = inp with every query head RMSNorm'ed with qw (hs) and every
     * key head with kw (hs), eps as given; the value heads copied. rstd (N, NH+KVH) saved for
     * backward (query heads, then key heads). */
    void (*qknorm_forward)(float *out, float *rstd, const float *inp, const float *qw,
                           const float *kw, int N, int NH, int KVH, int hs, float eps);
    /* dinp (N,QKV) += (the value columns: dout's), dqw, dkw (hs) += (each or NULL: frozen);
     * dout (N,QKV) */
    void (*qknorm_backward)(float *dinp, float *dqw, float *dkw, const float *dout,
                            const float *inp, const float *qw, const float *kw, const float *rstd,
                            int N, int NH, int KVH, int hs);
    /* QK-norm over the whole projections (OLMo 2), or NULL: the NH * hs query columns one
     * RMSNorm row with qw (NH hs), the KVH * hs key columns one with kw (KVH hs), the values
     * copied; rstd (N, 2). The backward as qknorm_backward's, dqw (NH hs), dkw (KVH hs). */
    void (*qknorm_proj_forward)(float *out, float *rstd, const float *inp, const float *qw,
                                const float *kw, int N, int NH, int KVH, int hs, float eps);
    void (*qknorm_proj_backward)(float *dinp, float *dqw, float *dkw, const float *dout,
                                 const float *inp, const float *qw, const float *kw,
                                 const float *rstd, int N, int NH, int KVH, int hs);
    /* RoPE in place on the query and key heads of qkv (B,T,QKV) (the value heads untouched), the
     * rotate-half pairing of Llama/Qwen: for i < hs/2, with a = p * inv_freq[i],
     *   x'[i] = x[i] cos a - x[i + hs/2] sin a,  x'[i + hs/2] = x[i + hs/2] cos a + x[i] sin a
     * p = pos[b,t] (attn_mask = document: the position in the segment), or t + p0 when pos is
     * NULL. The angle and its cosine and sine are formed in double. inv_freq (hs/2): the model's
     * frequencies (src/model/model.c model_rope_freqs). */
    void (*rope_forward)(float *qkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                         int T, int NH, int KVH, int hs);
    /* The backward, in place on dqkv (B,T,QKV): the transposed rotation (angle -a) of the query
     * and key gradients; the value gradients untouched. */
    void (*rope_backward)(float *dqkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                          int T, int NH, int KVH, int hs);
    /* rope_forward / rope_backward over the first rot dimensions of each head only (partial
     * rotary: pairs (i, i + rot/2), inv_freq (rot/2); dimensions rot..hs-1 untouched) with the
     * cosine and sine times mscale (YaRN's attention factor); rot = hs, mscale = 1 is
     * rope_forward, the same bits. Optional (NULL: the backend has no RoPE variants). */
    void (*rope_part_forward)(float *qkv, const int32_t *pos, int p0, const float *inv_freq,
                              int B, int T, int NH, int KVH, int hs, int rot, float mscale);
    void (*rope_part_backward)(float *dqkv, const int32_t *pos, int p0, const float *inv_freq,
                               int B, int T, int NH, int KVH, int hs, int rot, float mscale);
    /* SwiGLU: out (N,F) = silu(inp[:, :F]) * inp[:, F:], silu(x) = x / (1 + exp(-x)); inp (N,2F)
     * is the fused [gate | up] projection */
    void (*swiglu_forward)(float *out, const float *inp, int N, int F);
    /* dinp (N,2F) +=, dout (N,F), inp as in forward */
    void (*swiglu_backward)(float *dinp, const float *inp, const float *dout, int N, int F);
    /* GeGLU (Gemma), or NULL: out (N,F) = gelu_tanh(inp[:, :F]) * inp[:, F:], gelu_tanh(x) =
     * 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))); the backward as swiglu_backward's */
    void (*geglu_forward)(float *out, const float *inp, int N, int F);
    void (*geglu_backward)(float *dinp, const float *inp, const float *dout, int N, int F);

    /* ---- Mixture of experts (docs/moe.md; E experts, top K of them per row, NK = N * K) ----
     * MoE ops are optional in the table (NULL: the model refuses MoE configs on that backend).
     *
     * Routing: probs (N,E) = softmax(logits (N,E)) in fp32 (max-subtracted), lse (N) =
     * logsumexp of each logits row; idx (N,K) the K experts of highest probability in descending
     * order (ties: the lower expert index first); wts (N,K) their weights: probs[n, idx[n,j]],
     * divided by the sum of the K when norm. Grouping: assignment a = n*K + j goes to grouped
     * row slot[a]; rows are ordered by expert, then by a ascending (a stable counting sort), so
     * offs (E+1) gives expert e the rows offs[e] .. offs[e+1]-1 (offs[0] = 0, offs[E] = NK) and
     * rows (NK) is the inverse of slot (rows[slot[a]] = a). stats (2): this call's auxiliary
     * losses, stats[0] = aux = E * sum_e (count_e / NK) * (sum_n probs[n,e] / N) (1 at perfect
     * balance; count_e = offs[e+1] - offs[e]), stats[1] = z = sum_n lse[n]^2 / N. */
    void (*moe_route)(float *probs, float *lse, int32_t *idx, float *wts, int32_t *offs,
                      int32_t *rows, int32_t *slot, float *stats, const float *logits, int N,
                      int E, int K, int norm);
    /* xg (NK,C): xg[r] = x[rows[r] / K]; x (N,C) */
    void (*moe_gather)(float *xg, const float *x, const int32_t *rows, int N, int K, int C);
    /* dx (N,C) += dxg[slot[n*K + j]] for j = 0..K-1 in that order (added to dx[n] one by one) */
    void (*moe_gather_backward)(float *dx, const float *dxg, const int32_t *slot, int N, int K,
                                int C);
    /* The experts' grouped product: for each e, rows offs[e]..offs[e+1]-1 of out (NK,OC) =
     * those rows of inp (NK,IC) @ w[e]^T, w (E,OC,IC); an expert without rows computes nothing.
     * Each expert's rows as matmul_forward of those rows alone would give them (no bias). */
    void (*moe_matmul_forward)(float *out, const float *inp, const float *w, const int32_t *offs,
                               int E, int NK, int IC, int OC);
    /* dinp (NK,IC) +=, dw (E,OC,IC) += or NULL (frozen) : matmul_backward of each expert's rows */
    void (*moe_matmul_backward)(float *dinp, float *dw, const float *dout, const float *inp,
                                const float *w, const int32_t *offs, int E, int NK, int IC,
                                int OC);
    /* out (N,C) = base[n] (or 0 when base is NULL), then += wts[n,j] * y[slot[n*K+j]] for
     * j = 0..K-1 in that order. WRITES out. y (NK,C), wts (N,K) */
    void (*moe_combine)(float *out, const float *base, const float *y, const float *wts,
                        const int32_t *slot, int N, int K, int C);
    /* WRITES dy (NK,C): row slot[n*K+j] = wts[n,j] * dout[n]; WRITES dwts (N,K) =
     * dot(dout[n], y[slot[n*K+j]]) (summed in double) */
    void (*moe_combine_backward)(float *dy, float *dwts, const float *dout, const float *y,
                                 const float *wts, const int32_t *slot, int N, int K, int C);
    /* WRITES dlogits (N,E), the gradient of the router logits given dwts (N,K), the gradient of
     * the K weights, plus aux_w * d(aux)/d(logits) and z_w * d(z)/d(logits) of this call's stats:
     *   dp[n,e]  = the weights' gradient through the normalisation (norm: for e = idx[n,j],
     *              (dwts[n,j] - sum_j' dwts[n,j'] wts[n,j']) / s with s the sum of the K probs;
     *              else dwts[n,j]), 0 for experts not chosen, plus aux_w * E * count_e / (NK * N)
     *              (the counts are constants: aux's gradient flows through the probabilities);
     *   dlogits  = probs * (dp - sum_e probs * dp) + z_w * 2 lse[n] probs[n,e] / N
     * (sums in double). probs, lse, idx, wts, offs as moe_route wrote them. */
    void (*moe_router_backward)(float *dlogits, const float *dwts, const float *probs,
                                const float *lse, const int32_t *idx, const float *wts,
                                const int32_t *offs, int N, int E, int K, int norm, float aux_w,
                                float z_w);
    /* gpt-oss's experts (docs/moe.md "gpt-oss's experts"), optional like the moe_* above.
     * moe_bias_forward: out (NK,OC) rows offs[e]..offs[e+1]-1 += b[e], b (E,OC). */
    void (*moe_bias_forward)(float *out, const float *b, const int32_t *offs, int E, int OC);
    /* db (E,OC) += each expert's rows of dout (NK,OC) summed (in double, rows ascending) */
    void (*moe_bias_backward)(float *db, const float *dout, const int32_t *offs, int E, int OC);
    /* gpt-oss's unit: out (N,F) = (u + 1) g sigmoid(alpha g), g = min(inp[:, :F], limit),
     * u = clamp(inp[:, F:], -limit, limit); inp (N,2F) the [gate | up] projection */
    void (*moe_gptoss_forward)(float *out, const float *inp, int N, int F, float alpha,
                               float limit);
    /* dinp (N,2F) +=, dout (N,F); the clamps pass the gradient inside [-limit, limit] (bounds
     * included, as torch.clamp), 0 outside */
    void (*moe_gptoss_backward)(float *dinp, const float *inp, const float *dout, int N, int F,
                                float alpha, float limit);
    /* The shared expert's gate (model.moe_shared_gate: Qwen2-MoE's and Qwen3-Next's
     * shared_expert_gate; docs/moe.md), optional like the moe_* above. Per row n of N,
     * s_n = sigmoid(x[n] . w) (the dot product in double) with x (N,C) the layer's ln2, w (C):
     *   moe_shgate_forward  out (N,C) *= s_n in place (the shared expert's output; also the
     *                       d(output) of the ungated expert, from a copy of dout);
     *   moe_shgate_grad     dg (N) = d(the gate's logit) = (1 - s_n) shg[n] . dshg[n] from the
     *                       expert's hidden shg (N,S) and dshg = s_n (dout W2) (N,S); gw (C) +=
     *                       sum_n dg[n] x[n] (in double, rows in order), gw NULL: frozen;
     *   moe_shgate_dx       dx (N,C) += dg[n] w. */
    void (*moe_shgate_forward)(float *out, const float *x, const float *w, int N, int C);
    void (*moe_shgate_grad)(float *dg, float *gw, const float *shg, const float *dshg,
                            const float *x, const float *w, int N, int S, int C);
    void (*moe_shgate_dx)(float *dx, const float *dg, const float *w, int N, int C);

    /* LoRA's adapter path on one target projection (docs/lora.md), beside the frozen base:
     *   out[n, :OC] += scale * (drop(inp) @ A^T) @ B^T
     * out's rows ld floats apart (a column block of a fused projection: the caller offsets out),
     * inp (N,IC), A (R,IC), B (OC,R); t (N,R) and xd (N,IC) scratch (xd unread when p = 0).
     * Dropout (p in [0, 1)): element (n, c) of inp is dropped when
     * u = (hash64(key ^ hash64((row0 + n) * IC + c)) >> 40) * 2^-24 < p, else scaled by 1/(1-p)
     * (hash64: SplitMix64's finaliser, common.h tsr_hash64): a pure function of the key and the
     * element's row number row0 + n, so the backward and a recomputation draw the same mask, and
     * a row's mask does not depend on which rank or microbatch holds it. */
    void (*lora_forward)(float *out, int ld, const float *inp, const float *A, const float *B,
                         float scale, float p, uint64_t key, int64_t row0, float *t, float *xd,
                         int N, int IC, int OC, int R);
    /* dinp (N,IC) += d(inp); dA (R,IC) +=, dB (OC,R) += (either NULL: frozen); dout's rows ld
     * apart (as out above). t, xd scratch as above (t recomputed, not kept from the forward). */
    void (*lora_backward)(float *dinp, float *dA, float *dB, const float *dout, int ld,
                          const float *inp, const float *A, const float *B, float scale, float p,
                          uint64_t key, int64_t row0, float *t, float *xd, int N, int IC, int OC,
                          int R);

    /* GELU, tanh approximation (GPT-2) or exact erf form (MPT).  out, inp (n) */
    void (*gelu_forward)(float *out, const float *inp, size_t n, tsr_gelu_kind kind);
    /* dinp (n) += gelu'(inp) * dout */
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n,
                          tsr_gelu_kind kind);

    /* out = a + b (n); backward: da += dout, db += dout */
    void (*residual_forward)(float *out, const float *a, const float *b, size_t n);
    void (*residual_backward)(float *da, float *db, const float *dout, size_t n);

    /* Softmax over the first V of Vp columns, then cross-entropy against targets.
     * probs (N,Vp): softmax, columns >= V set to 0 (may alias logits: computed in place);
     * losses (N): -log probs[target], 0 where target < 0 (ignored: masked or padding);
     * logits (N,Vp), targets (N) with -1 = ignore, else 0 <= target < V */
    void (*softmax_xent_forward)(float *losses, float *probs, const float *logits,
                                 const int32_t *targets, int N, int V, int Vp);
    /* dlogits (N,Vp) = (probs - onehot(target)) * dlosses[n]; rows with target < 0 and columns
     * >= V are written 0. WRITES, may alias probs. dlosses (N) */
    void (*softmax_xent_backward)(float *dlogits, const float *dlosses, const float *probs,
                                  const int32_t *targets, int N, int V, int Vp);
    /* Soft-capping of the LM head's logits (model.final_logit_softcapping) over the V real
     * columns of N rows of Vp (the padding untouched): out = cap tanh(inp / cap) (out may be
     * inp); the backward d[n,j] *= 1 - (out[n,j] / cap)^2 from the capped values out.
     * Optional (NULL: the backend has no soft cap). */
    void (*softcap_forward)(float *out, const float *inp, int N, int V, int Vp, float cap);
    void (*softcap_backward)(float *d, const float *out, int N, int V, int Vp, float cap);

    /* Ring attention's block (tsr_ring_block k). Forward: the block's attention of each query
     * row, o = sum_j softmax_j(s[i,j]) v_j with l = log sum_j exp s[i,j] (o = 0, l = -inf where
     * the row sees no key), merged into acc (query-wise rows of NH hs: row i of sequence b at
     * (b qbs + i) NH hs, head h at + h hs) and lse (fp32, ((b NH + h) qbs + i)): with merge,
     *   L = log(e^lse + e^l), acc = e^(lse - L) acc + e^(l - L) o, lse = L;
     * without, acc = o, lse = l (the first block of each row).
     * Backward, with lse the merged one and out (query-wise rows of NH hs) the merged output:
     *   p = exp(s[i,j] - lse_i), D_i = dout_i.out_i, dS = p (dout_i.v_j - D_i) / sqrt(hs);
     *   dq_i += sum_j dS k_j (rows lddq apart, query-wise), dk_j += sum_i dS q_i and
     *   dv_j += sum_i p dout_i into dkv (rows lddkv apart, key-wise: k at g hs, v at (KVH + g) hs). */
    void (*ring_forward)(float *acc, float *lse, const tsr_ring_block *k, int merge);
    void (*ring_backward)(float *dq, int lddq, float *dkv, int lddkv, const float *dout,
                          const float *out, const float *lse, const tsr_ring_block *k);

    /* Decoding over a KV cache (one layer; docs/generate.md): stores the keys and values of rows
     * p0..p0+c-1 of qkv (c,QKV) into kt (KVH,hs,cap) (keys transposed per head) and
     * v (KVH,cap,hs), then out (c,NH*hs) = attention of each row p over the cached positions
     * seg..p, with the scores, softmax and products of attention_forward in the same order (the
     * same bits as a forward over the segment alone; with var's window, positions p - window + 1
     * .. p of the segment only, and var's sinks in the softmax). scratch (nscratch, cap): one
     * score row per thread (at most nscratch threads). */
    void (*attention_decode)(float *out, float *kt, float *v, const float *qkv,
                             const float *alibi_slopes, const tsr_attn_var *var, float *scratch,
                             int nscratch, int p0, int c, int seg, int cap, int NH, int KVH,
                             int hs);
    /* out (OC) = inp (IC) @ w^T + bias (or NULL): one row, the decode step's matrix-vector
     * product (another summation order than matmul_forward). */
    void (*matvec_forward)(float *out, const float *inp, const float *w, const float *bias,
                           int IC, int OC);
    /* Batched decoding (docs/generate.md "Batched generation"): n rows, row i the next token of
     * the sequence in cache slot slot[i] at cache position pos[i], its segment from seg[i]. The
     * layer's caches of all slots lie slot_stride floats apart in kt and v (each slot as
     * attention_decode's). Stores each row's key and value, then out (n,NH*hs) = each row as
     * attention_decode computes it (the same bits, whatever the other rows). scratch as
     * attention_decode's. */
    void (*attention_decode_rows)(float *out, float *kt, float *v, const float *qkv,
                                  const float *alibi_slopes, const tsr_attn_var *var,
                                  float *scratch, int nscratch,
                                  const int32_t *slot, const int32_t *pos, const int32_t *seg,
                                  int n, size_t slot_stride, int cap, int NH, int KVH, int hs);
    /* out (N,OC) = inp (N,IC) @ w^T + bias (or NULL), batch-invariant: each element one dot
     * product in an order fixed by IC alone, so a row's bits do not depend on N, the other rows
     * or the thread count (kernels/cpu/cpu_rows.c; sgemm's do). */
    void (*matmul_rows)(float *out, const float *inp, const float *w, const float *bias, int N,
                        int IC, int OC);

    /* sum of squares of g (n) in double, for the global gradient norm */
    double (*sumsq)(const float *g, size_t n);

    /* AdamW (decoupled weight decay, as torch.optim.AdamW) for one tensor at step t >= 1:
     *   g' = g * grad_scale;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
     *   p = p * (1 - lr * wd);  p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
     * p, g, m, v (n) */
    void (*adamw_update)(float *p, const float *g, float *m, float *v, size_t n, float lr,
                         float beta1, float beta2, float eps, float wd, float grad_scale, int t);
} tsr_ops;

/* The fp32 reference backend (kernels/cpu/). */
extern const tsr_ops tsr_cpu_ops;
/* Number of threads the CPU ops use (OpenMP and OpenBLAS); call before the first op. */
void cpu_ops_set_threads(int n);
/* Test hook of the out-of-memory back-off (micro_batch = auto): a try_alloc that would take the
 * bytes live through alloc/try_alloc past `bytes` returns NULL, as on a device that full; alloc
 * is not limited. 0 = no limit (the default). cpu_ops_live_bytes: what is live now;
 * cpu_ops_peak_bytes: the most that was live at once (metrics.jsonl's peak_mem_bytes). */
void cpu_ops_set_mem_limit(size_t bytes);
size_t cpu_ops_live_bytes(void);
size_t cpu_ops_peak_bytes(void);
/* Bytes of the live blocks of 64 MiB and more that no page of memory holds yet (mincore): what
 * the process commits when it first writes them (a GPU run's host copies: at its first checkpoint). */
size_t cpu_ops_unresident_bytes(void);
/* Name of the BLAS core in use (e.g. "SkylakeX"), for the banner. */
const char *cpu_ops_blas_core(void);

#endif
