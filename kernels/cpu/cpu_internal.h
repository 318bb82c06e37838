/* cpu_internal.h — what the files of the CPU backend share (not part of the op interface).
 *
 * cpu_ops.c holds the op table and the simple ops; cpu_attention.c and cpu_softmax.c the ops whose
 * speed matters most; cpu_llama.c the ops of the Llama/Qwen blocks (RMSNorm, QK-norm, RoPE,
 * SwiGLU); cpu_moe.c those of mixture of experts. Every op is deterministic: each output element
 * is produced by one thread in an order that does not depend on the thread count, so the same
 * inputs give the same bits.
 */
#ifndef TSR_CPU_INTERNAL_H
#define TSR_CPU_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops.h" /* tsr_ring_block */

/* Elementwise loops shorter than this run on one thread (a parallel region costs microseconds). */
#define CPU_PAR_MIN 16384
/* Rows per partial sum in row reductions; fixed, so the sum order is thread-count independent. */
#define CPU_ROW_CHUNK 64

/* cpu_ops.c: deterministic column sums over rows. A reduction over N rows writes the partial sums
 * of cpu_row_chunks(N) chunks of CPU_ROW_CHUNK rows into part[chunk][width] (doubles), then
 * cpu_reduce_chunks adds them in chunk order: out[c] += sum_k part[k*width + c]. */
int cpu_row_chunks(int N);
void cpu_reduce_chunks(float *out, const double *part, int nchunks, int width);

/* cpu_lora.c (ops.h describes them) */
void cpu_lora_forward(float *out, int ld, const float *inp, const float *A, const float *B,
                      float scale, float p, uint64_t key, int64_t row0, float *t, float *xd, int N,
                      int IC, int OC, int R);
void cpu_lora_backward(float *dinp, float *dA, float *dB, const float *dout, int ld,
                       const float *inp, const float *A, const float *B, float scale, float p,
                       uint64_t key, int64_t row0, float *t, float *xd, int N, int IC, int OC,
                       int R);

/* cpu_attention.c */
void cpu_attention_forward(float *out, float *att, const float *qkv, const float *alibi_slopes,
                           const int32_t *seq, const tsr_attn_var *var, int B, int T, int NH,
                           int KVH, int hs);
void cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                            const int32_t *seq, const tsr_attn_var *var, int B, int T, int NH,
                            int KVH, int hs);
void cpu_attention_decode(float *out, float *kt, float *v, const float *qkv,
                          const float *alibi_slopes, const tsr_attn_var *var, float *scratch,
                          int nscratch, int p0, int c, int seg, int cap, int NH, int KVH, int hs);
void cpu_attention_decode_rows(float *out, float *kt, float *v, const float *qkv,
                               const float *alibi_slopes, const tsr_attn_var *var, float *scratch,
                               int nscratch,
                               const int32_t *slot, const int32_t *pos, const int32_t *seg, int n,
                               size_t slot_stride, int cap, int NH, int KVH, int hs);

/* cpu_rows.c (ops.h matmul_rows) */
void cpu_matmul_rows(float *out, const float *inp, const float *w, const float *bias, int N,
                     int IC, int OC);

/* cpu_ring.c (ops.h ring_forward, ring_backward) */
void cpu_ring_forward(float *acc, float *lse, const tsr_ring_block *k, int merge);
void cpu_ring_backward(float *dq, int lddq, float *dkv, int lddkv, const float *dout,
                       const float *out, const float *lse, const tsr_ring_block *k);

/* cpu_llama.c (ops.h describes each) */
void cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                         float eps);
void cpu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C);
void cpu_qknorm_forward(float *out, float *rstd, const float *inp, const float *qw,
                        const float *kw, int N, int NH, int KVH, int hs, float eps);
void cpu_qknorm_backward(float *dinp, float *dqw, float *dkw, const float *dout, const float *inp,
                         const float *qw, const float *kw, const float *rstd, int N, int NH,
                         int KVH, int hs);
void cpu_qknorm_proj_forward(float *out, float *rstd, const float *inp, const float *qw,
                             const float *kw, int N, int NH, int KVH, int hs, float eps);
void cpu_qknorm_proj_backward(float *dinp, float *dqw, float *dkw, const float *dout,
                              const float *inp, const float *qw, const float *kw,
                              const float *rstd, int N, int NH, int KVH, int hs);
void cpu_rope_forward(float *qkv, const int32_t *pos, int p0, const float *inv_freq, int B, int T,
                      int NH, int KVH, int hs);
void cpu_rope_backward(float *dqkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                       int T, int NH, int KVH, int hs);
void cpu_rope_part_forward(float *qkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                           int T, int NH, int KVH, int hs, int rot, float mscale);
void cpu_rope_part_backward(float *dqkv, const int32_t *pos, int p0, const float *inv_freq,
                            int B, int T, int NH, int KVH, int hs, int rot, float mscale);
void cpu_swiglu_forward(float *out, const float *inp, int N, int F);
void cpu_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F);
void cpu_geglu_forward(float *out, const float *inp, int N, int F);
void cpu_geglu_backward(float *dinp, const float *inp, const float *dout, int N, int F);

/* cpu_moe.c (ops.h describes each) */
void cpu_moe_route(float *probs, float *lse, int32_t *idx, float *wts, int32_t *offs,
                   int32_t *rows, int32_t *slot, float *stats, const float *logits, int N, int E,
                   int K, int norm);
void cpu_moe_gather(float *xg, const float *x, const int32_t *rows, int N, int K, int C);
void cpu_moe_gather_backward(float *dx, const float *dxg, const int32_t *slot, int N, int K,
                             int C);
void cpu_moe_matmul_forward(float *out, const float *inp, const float *w, const int32_t *offs,
                            int E, int NK, int IC, int OC);
void cpu_moe_matmul_backward(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const int32_t *offs, int E, int NK, int IC, int OC);
void cpu_moe_combine(float *out, const float *base, const float *y, const float *wts,
                     const int32_t *slot, int N, int K, int C);
void cpu_moe_combine_backward(float *dy, float *dwts, const float *dout, const float *y,
                              const float *wts, const int32_t *slot, int N, int K, int C);
void cpu_moe_router_backward(float *dlogits, const float *dwts, const float *probs,
                             const float *lse, const int32_t *idx, const float *wts,
                             const int32_t *offs, int N, int E, int K, int norm, float aux_w,
                             float z_w);
void cpu_moe_bias_forward(float *out, const float *b, const int32_t *offs, int E, int OC);
void cpu_moe_bias_backward(float *db, const float *dout, const int32_t *offs, int E, int OC);
void cpu_moe_gptoss_forward(float *out, const float *inp, int N, int F, float alpha,
                            float limit);
void cpu_moe_gptoss_backward(float *dinp, const float *inp, const float *dout, int N, int F,
                             float alpha, float limit);
void cpu_moe_shgate_forward(float *out, const float *x, const float *w, int N, int C);
void cpu_moe_shgate_grad(float *dg, float *gw, const float *shg, const float *dshg,
                         const float *x, const float *w, int N, int S, int C);
void cpu_moe_shgate_dx(float *dx, const float *dg, const float *w, int N, int C);

/* cpu_softmax.c */
void cpu_softmax_xent_forward(float *losses, float *probs, const float *logits,
                              const int32_t *targets, int N, int V, int Vp);
void cpu_softmax_xent_backward(float *dlogits, const float *dlosses, const float *probs,
                               const int32_t *targets, int N, int V, int Vp);
void cpu_softcap_forward(float *out, const float *inp, int N, int V, int Vp, float cap);
void cpu_softcap_backward(float *d, const float *out, int N, int V, int Vp, float cap);

/* The grouping of a routing by expert and its auxiliary losses (cpu_moe.c; ops.h moe_route):
 * offs (E+1), rows and slot (NK) from idx (NK); stats (2) = [aux over probs, z over lse]. */
void cpu_moe_group(int32_t *offs, int32_t *rows, int32_t *slot, const int32_t *idx, int NK,
                   int E);
void cpu_moe_stats(float *stats, const float *probs, const float *lse, const int32_t *offs,
                   int N, int E, int K);

/* e^x in float, written so that loops calling it vectorise (glibc's expf does not without
 * -ffast-math). Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then a degree-7 Taylor
 * polynomial (truncation error < 6e-9 relative), then scaling by 2^n built in the exponent bits.
 * Max relative error a few ulp against exp() in double (tests/unit/test_ops.c checks it).
 * Range: x is clamped to <= 87 (e^87 = 6.1e37, so 1 / (1 + e^x) stays a normal float), and
 * results below e^-44 (~2^-63.5) are returned as exactly 0. Softmax terms that small change a sum
 * of up to 2^32 terms by less than 2^-31 relative, far below fp32 rounding, and flushing them keeps
 * probabilities (and their products with gradients) clear of subnormal floats, which cost ~100x
 * on x86. NaN propagates.
 * The range logic is integer masks on the bits, with no branches or float compares, and there is
 * no float-to-int conversion: GCC does not if-convert float compares (nor branches it threads)
 * under -ftrapping-math, the default, and converting NaN to int is undefined. */
static inline float cpu_expf(float x) {
    uint32_t xb;
    memcpy(&xb, &x, sizeof xb);
    const uint32_t neg = xb >> 31, mag = xb & 0x7fffffffu;
    const uint32_t lim = 0x42ae0000u - neg * (0x42ae0000u - 0x42300000u); /* |x| <= 87, or 44 */
    const uint32_t nanm = 0u - (uint32_t)(mag > 0x7f800000u);            /* masks: all ones */
    const uint32_t over = 0u - (uint32_t)(mag > lim);                     /* if true */
    const uint32_t flushm = (0u - neg) & over & ~nanm;                    /* x < -44 */
    uint32_t cm = (mag & ~over) | (lim & over);
    xb = (neg << 31) | (cm & ~nanm) | (mag & nanm);
    memcpy(&x, &xb, sizeof x);
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    const float t = fmaf(x, 1.44269504088896341f, shifter);
    const float n = t - shifter;
    float r = fmaf(-n, 0.693145751953125f, x); /* ln2 high part (n * it is exact) */
    r = fmaf(-n, 1.428606765330187e-06f, r);    /* ln2 low part */
    float p = 1.0f / 5040.0f;
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    uint32_t bits; /* t's bits are 0x4b400000 + n; 2^n has the bits (n + 127) << 23 */
    memcpy(&bits, &t, sizeof bits);
    bits = (bits - 0x4b400000u + 127u) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float e = p * scale;
    memcpy(&bits, &e, sizeof bits);
    bits &= ~flushm;
    memcpy(&e, &bits, sizeof e);
    return e;
}

#endif
