/* tcu_args.h — the argument rules of cuda_ops.h's ops that the CUDA backend's host code (the .cu
 * files of kernels/cuda/) and its emulator (kernels/cuda_emu/) both check, written once with
 * their messages instead of restated by each. A rule takes a buffer m of n bytes and the op's
 * arguments and returns NULL when they hold, else what is wrong (in m, or a constant), which the
 * caller's TCU_REQUIRE_RULE (cuda_internal.h) or REQUIRE_RULE (emu.h) hands to its failure path
 * with the op's name: "tessera cuda: OP: MESSAGE (where)". Plain C, host code only. */
#ifndef TSR_TCU_ARGS_H
#define TSR_TCU_ARGS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "cuda_shapes.h" /* tcu_attention_head_size_ok */

/* m, holding fmt's message */
__attribute__((format(printf, 3, 4))) static inline const char *tcu_rule_msg(char *m, size_t n,
                                                                             const char *fmt,
                                                                             ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, n, fmt, ap);
    va_end(ap);
    return m;
}

/* the embedding's rows: B, T, C > 0 and B*T < 2^30 (int row indices with room to spare) */
static inline const char *tcu_rule_btc(char *m, size_t n, int B, int T, int C) {
    if (!(B > 0 && T > 0 && C > 0))
        return tcu_rule_msg(m, n, "B = %d, T = %d, C = %d must be > 0", B, T, C);
    if (!((size_t)B * T < ((size_t)1 << 30)))
        return tcu_rule_msg(m, n, "B*T = %zu rows is too many (at most 2^30 - 1)", (size_t)B * T);
    return NULL;
}

/* tcu_encoder_forward's: the rows, and out, tokens and wte */
static inline const char *tcu_rule_encoder_forward(char *m, size_t n, int B, int T, int C,
                                                   const void *out, const void *tokens,
                                                   const void *wte) {
    const char *why = tcu_rule_btc(m, n, B, T, C);
    if (!why && !(out && tokens && wte)) why = "out, tokens and wte must not be NULL";
    return why;
}

/* tcu_encoder_backward's: the rows, dout, and tokens (or tokens_host) for dwte */
static inline const char *tcu_rule_encoder_backward(char *m, size_t n, int B, int T, int C,
                                                    const void *dout, const void *dwte,
                                                    const void *tokens, const void *tokens_host) {
    const char *why = tcu_rule_btc(m, n, B, T, C);
    if (!why && !(dout && (!dwte || tokens || tokens_host)))
        why = "dout, and with dwte tokens (or tokens_host), must not be NULL";
    return why;
}

/* a matmul's shape: N, IC, OC >= 1 */
static inline const char *tcu_rule_matmul(char *m, size_t n, int N, int IC, int OC) {
    if (N >= 1 && IC >= 1 && OC >= 1) return NULL;
    return tcu_rule_msg(m, n, "N=%d IC=%d OC=%d: every dimension must be >= 1", N, IC, OC);
}

/* tcu_matmul_backward's: the shape, dout, w for dinp, inp for dw */
static inline const char *tcu_rule_matmul_backward(char *m, size_t n, int N, int IC, int OC,
                                                   const void *dinp, const void *dw,
                                                   const void *dout, const void *inp,
                                                   const void *w) {
    const char *why = tcu_rule_matmul(m, n, N, IC, OC);
    if (!why && dout == NULL) why = "dout must not be NULL";
    if (!why && !(!dinp || w)) why = "dinp needs w (w is NULL)";
    if (!why && !(!dw || inp)) why = "dw needs inp (inp is NULL)";
    return why;
}

/* tcu_matmul_backward_dgelu's: the shape, dinp, dout, w and pre_gelu, pre_gelu not dinp */
static inline const char *tcu_rule_matmul_dgelu(char *m, size_t n, int N, int IC, int OC,
                                                const void *dinp, const void *dout, const void *w,
                                                const void *pre_gelu) {
    const char *why = tcu_rule_matmul(m, n, N, IC, OC);
    if (!why && !(dinp && dout && w && pre_gelu))
        why = "dinp, dout, w and pre_gelu must not be NULL";
    if (!why && !(pre_gelu != dinp)) why = "pre_gelu must not alias dinp";
    return why;
}

/* LoRA's (tcu_lora_forward, tcu_lora_backward): the shape, the output's rows, the dropout, the
 * scratch */
static inline const char *tcu_rule_lora(char *m, size_t n, int N, int IC, int OC, int R, int ld,
                                        float p, const void *scratch) {
    if (!(N >= 1 && IC >= 1 && OC >= 1 && R >= 1))
        return tcu_rule_msg(m, n, "N=%d IC=%d OC=%d R=%d: every dimension must be >= 1", N, IC, OC,
                            R);
    if (!(ld >= OC)) return tcu_rule_msg(m, n, "ld=%d: the output's rows must hold OC=%d", ld, OC);
    if (!(p >= 0.0f && p < 1.0f))
        return tcu_rule_msg(m, n, "p=%g: dropout must be in [0, 1)", (double)p);
    if (scratch == NULL) return "scratch is NULL (tcu_lora_scratch_bytes)";
    return NULL;
}

/* the attention's shapes and head size: B, NH in 1..65535, T >= 1, 1 <= KVH dividing NH, hs with
 * a kernel */
static inline const char *tcu_rule_attention(char *m, size_t n, int B, int T, int NH, int KVH,
                                             int hs) {
    if (!(B >= 1 && B <= 65535 && T >= 1 && NH >= 1 && NH <= 65535 && KVH >= 1 && NH % KVH == 0))
        return tcu_rule_msg(m, n,
                            "bad shape B=%d T=%d NH=%d KVH=%d (B, NH in 1..65535, T >= 1, KVH >= 1 "
                            "dividing NH)",
                            B, T, NH, KVH);
    if (!tcu_attention_head_size_ok(hs))
        return tcu_rule_msg(m, n, "head size hs = %d (NH=%d) has no kernel: "
                                  TCU_ATTENTION_HEAD_SIZES, hs, NH);
    return NULL;
}

/* a decode call's (tcu_attention_decode_var): n rows >= 0, a cache of cap >= 1 positions, heads
 * of hs >= 1, NH a multiple of KVH >= 1 */
static inline const char *tcu_rule_decode(char *m, size_t n_, int n, int cap, int NH, int KVH,
                                          int hs) {
    if (n >= 0 && cap >= 1 && hs >= 1 && KVH >= 1 && NH % KVH == 0) return NULL;
    return tcu_rule_msg(m, n_, "need n >= 0, cap, hs >= 1 and NH a multiple of KVH: n=%d cap=%d "
                               "NH=%d KVH=%d hs=%d", n, cap, NH, KVH, hs);
}

/* the heads of N rows of a fused qkv (QK-norm, RoPE): NH a multiple of KVH >= 1, hs >= 1, fewer
 * than 2^31 head rows */
static inline const char *tcu_rule_heads(char *m, size_t n, int N, int NH, int KVH, int hs) {
    if (!(N >= 0 && NH >= 1 && KVH >= 1 && NH % KVH == 0 && hs >= 1))
        return tcu_rule_msg(m, n, "bad shape N=%d NH=%d KVH=%d hs=%d (NH a multiple of KVH >= 1, "
                                  "hs >= 1)", N, NH, KVH, hs);
    if (!((long long)N * (NH + KVH) < (1ll << 31)))
        return tcu_rule_msg(m, n, "N*(NH+KVH) = %lld head rows is too many (at most 2^31 - 1)",
                            (long long)N * (NH + KVH));
    return NULL;
}

#endif
