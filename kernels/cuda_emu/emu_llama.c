/* emu_llama.c — the host emulator of cuda_llama.cu (emu.h): the Llama-style blocks (RMSNorm,
 * QK-norm, RoPE, SwiGLU) and the model variants' element-wise ops (GeGLU, gpt-oss's unit, the
 * scale, the output gate). */
#include <math.h>
#include <stdlib.h>

#include "emu.h"

static const tsr_ops *const cpu = &tsr_cpu_ops;

/* out = round(RMSNorm(x)) with x = inp, or (fused) x = residual = round(a + b): the RMSNorm of the
 * rounded residual, bit for bit the two separate ops; rstd written when not NULL */
static void rms_forward(const char *what, int fused, tsr_bf16 *residual, tsr_bf16 *out,
                        float *rstd, const tsr_bf16 *a, const tsr_bf16 *b, const tsr_bf16 *w, int N,
                        int C, float eps) {
    REQUIRE(N >= 0 && C >= 1, what, "need N >= 0 and C >= 1, got N=%d C=%d", N, C);
    REQUIRE(eps >= 0.0f, what, "eps = %g must be >= 0", (double)eps);
    REQUIRE(out && a && w && (!fused || (b && residual)), what, "a required pointer is NULL");
    if (N == 0) return;
    const size_t n = (size_t)N * C;
    float *x = emu_norm_input(what, fused, residual, a, b, n);
    float *o = emu_host_alloc(n * sizeof *o, what);
    float *wf = emu_widen(w, C, what);
    float *rs = rstd ? rstd : emu_host_alloc((size_t)N * sizeof *rs, what);
    cpu->rmsnorm_forward(o, rs, x, wf, N, C, eps);
    emu_round_into(out, o, n);
    if (!rstd) free(rs);
    free(wf), free(o), free(x);
}

void tcu_rmsnorm_forward(tsr_bf16 *out, float *rstd, const tsr_bf16 *inp, const tsr_bf16 *w,
                         int N, int C, float eps, tcu_stream s) {
    rms_forward("tcu_rmsnorm_forward", 0, NULL, out, rstd, inp, NULL, w, N, C, eps);
}

void tcu_residual_rmsnorm_forward(tsr_bf16 *residual, tsr_bf16 *out, float *rstd,
                                  const tsr_bf16 *a, const tsr_bf16 *b, const tsr_bf16 *w, int N,
                                  int C, float eps, tcu_stream s) {
    rms_forward("tcu_residual_rmsnorm_forward", 1, residual, out, rstd, a, b, w, N, C, eps);
}

/* dinp (bf16) += the CPU op's fp32 increment; dw fp32 += by the CPU op (or NULL) */
void tcu_rmsnorm_backward(tsr_bf16 *dinp, float *dw, const tsr_bf16 *dout, const tsr_bf16 *inp,
                          const tsr_bf16 *w, const float *rstd, int N, int C, tcu_stream s) {
    const char *what = "tcu_rmsnorm_backward";
    REQUIRE(N >= 0 && C >= 1, what, "need N >= 0 and C >= 1, got N=%d C=%d", N, C);
    REQUIRE(dinp && dout && inp && w && rstd, what, "a required pointer is NULL");
    if (N == 0) return;
    emu_need_context(what);
    const size_t n = (size_t)N * C;
    float *x = emu_widen(inp, n, what), *g = emu_widen(dout, n, what), *wf = emu_widen(w, C, what);
    float *dx = emu_host_zeros(n, what);
    cpu->rmsnorm_backward(dx, dw, g, x, wf, rstd, N, C);
    emu_add_round_into(dinp, dx, n);
    free(dx), free(wf), free(g), free(x);
}

/* QK-norm through the CPU op (cpu->qknorm_forward or its per-projection twin): per head, qw and
 * kw (hs), rstd (N, NH+KVH); per projection, qw (NH hs), kw (KVH hs), rstd (N, 2) */
typedef void (*qk_fwd_op)(float *, float *, const float *, const float *, const float *, int, int,
                          int, int, float);

typedef void (*qk_bwd_op)(float *, float *, float *, const float *, const float *, const float *,
                          const float *, const float *, int, int, int, int);

/* out = round(the CPU op on the widened inp): the value heads, copied exactly */
static void qknorm_forward_emu(const char *what, int per_head, qk_fwd_op op, tsr_bf16 *out,
                               float *rstd, const tsr_bf16 *inp, const tsr_bf16 *qw,
                               const tsr_bf16 *kw, int N, int NH, int KVH, int hs, float eps) {
    REQUIRE_RULE(what, tcu_rule_heads, N, NH, KVH, hs);
    REQUIRE(eps >= 0.0f, what, "eps = %g must be >= 0", (double)eps);
    REQUIRE(out && inp && qw && kw, what, "out, inp, qw and kw must not be NULL");
    if (N == 0) return;
    const size_t n = (size_t)N * (NH + 2 * KVH) * hs;
    const size_t nr = (size_t)N * (per_head ? NH + KVH : 2);
    float *x = emu_widen(inp, n, what), *qf = emu_widen(qw, (size_t)(per_head ? 1 : NH) * hs, what);
    float *kf = emu_widen(kw, (size_t)(per_head ? 1 : KVH) * hs, what);
    float *rs = rstd ? rstd : emu_host_alloc(nr * sizeof *rs, what);
    op(x, rs, x, qf, kf, N, NH, KVH, hs, eps);
    emu_round_into(out, x, n);
    if (!rstd) free(rs);
    free(kf), free(qf), free(x);
}

/* dinp (bf16) += the CPU op's fp32 increment (the value columns: dout, exact before the add);
 * dqw, dkw fp32 += by the CPU op (each or NULL) */
static void qknorm_backward_emu(const char *what, int per_head, qk_bwd_op op, tsr_bf16 *dinp,
                                float *dqw, float *dkw, const tsr_bf16 *dout, const tsr_bf16 *inp,
                                const tsr_bf16 *qw, const tsr_bf16 *kw, const float *rstd, int N,
                                int NH, int KVH, int hs) {
    REQUIRE_RULE(what, tcu_rule_heads, N, NH, KVH, hs);
    REQUIRE(dinp && dout && inp && qw && kw && rstd, what, "a required pointer is NULL");
    if (N == 0) return;
    emu_need_context(what);
    const size_t n = (size_t)N * (NH + 2 * KVH) * hs;
    float *x = emu_widen(inp, n, what), *g = emu_widen(dout, n, what);
    float *dx = emu_host_zeros(n, what);
    float *qf = emu_widen(qw, (size_t)(per_head ? 1 : NH) * hs, what);
    float *kf = emu_widen(kw, (size_t)(per_head ? 1 : KVH) * hs, what);
    op(dx, dqw, dkw, g, x, qf, kf, rstd, N, NH, KVH, hs);
    emu_add_round_into(dinp, dx, n);
    free(kf), free(qf), free(dx), free(g), free(x);
}

void tcu_qknorm_forward(tsr_bf16 *out, float *rstd, const tsr_bf16 *inp, const tsr_bf16 *qw,
                        const tsr_bf16 *kw, int N, int NH, int KVH, int hs, float eps,
                        tcu_stream s) {
    qknorm_forward_emu("tcu_qknorm_forward", 1, cpu->qknorm_forward, out, rstd, inp, qw, kw, N,
                       NH, KVH, hs, eps);
}

void tcu_qknorm_backward(tsr_bf16 *dinp, float *dqw, float *dkw, const tsr_bf16 *dout,
                         const tsr_bf16 *inp, const tsr_bf16 *qw, const tsr_bf16 *kw,
                         const float *rstd, int N, int NH, int KVH, int hs, tcu_stream s) {
    qknorm_backward_emu("tcu_qknorm_backward", 1, cpu->qknorm_backward, dinp, dqw, dkw, dout, inp,
                        qw, kw, rstd, N, NH, KVH, hs);
}

/* the per-head op's emulation with the CPU's per-projection op */
void tcu_qknorm_proj_forward(tsr_bf16 *out, float *rstd, const tsr_bf16 *inp, const tsr_bf16 *qw,
                             const tsr_bf16 *kw, int N, int NH, int KVH, int hs, float eps,
                             tcu_stream s) {
    qknorm_forward_emu("tcu_qknorm_proj_forward", 0, cpu->qknorm_proj_forward, out, rstd, inp, qw,
                       kw, N, NH, KVH, hs, eps);
}

void tcu_qknorm_proj_backward(tsr_bf16 *dinp, float *dqw, float *dkw, const tsr_bf16 *dout,
                              const tsr_bf16 *inp, const tsr_bf16 *qw, const tsr_bf16 *kw,
                              const float *rstd, int N, int NH, int KVH, int hs, tcu_stream s) {
    qknorm_backward_emu("tcu_qknorm_proj_backward", 0, cpu->qknorm_proj_backward, dinp, dqw, dkw,
                        dout, inp, qw, kw, rstd, N, NH, KVH, hs);
}

/* in place: round(the CPU rotation of the widened qkv): rot 0 the plain one (cpu->rope_*), else
 * the partial/scaled one of rot dims (cpu->rope_part_*, mscale); the value heads come back
 * unchanged (widening and rounding a bf16 is exact) */
static void rope_emu(const char *what, tsr_bf16 *qkv, const int32_t *pos, int p0,
                     const float *inv_freq, int B, int T, int NH, int KVH, int hs, int rot,
                     float mscale, int backward) {
    if (rot) /* partial / scaled (cpu->rope_part_*) */
        REQUIRE(B >= 0 && T >= 1 && hs >= 2 && rot >= 2 && rot % 2 == 0 && rot <= hs, what,
                "bad shape B=%d T=%d hs=%d rot=%d (rot even, 2 <= rot <= hs)", B, T, hs, rot);
    else
        REQUIRE(B >= 0 && T >= 1 && hs >= 2 && hs % 2 == 0, what,
                "bad shape B=%d T=%d hs=%d (hs even)", B, T, hs);
    REQUIRE_RULE(what, tcu_rule_heads, B * T, NH, KVH, hs);
    REQUIRE(qkv && inv_freq, what, "qkv and inv_freq must not be NULL");
    REQUIRE(pos || p0 >= 0, what, "p0 = %d must be >= 0", p0);
    const size_t n = (size_t)B * T * (NH + 2 * KVH) * hs;
    if (n == 0) return;
    float *x = emu_widen(qkv, n, what);
    if (rot)
        (backward ? cpu->rope_part_backward : cpu->rope_part_forward)(x, pos, p0, inv_freq, B, T,
                                                                      NH, KVH, hs, rot, mscale);
    else if (backward) cpu->rope_backward(x, pos, p0, inv_freq, B, T, NH, KVH, hs);
    else cpu->rope_forward(x, pos, p0, inv_freq, B, T, NH, KVH, hs);
    emu_round_into(qkv, x, n);
    free(x);
}

void tcu_rope_forward(tsr_bf16 *qkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                      int T, int NH, int KVH, int hs, tcu_stream s) {
    rope_emu("tcu_rope_forward", qkv, pos, p0, inv_freq, B, T, NH, KVH, hs, 0, 1.0f, 0);
}

void tcu_rope_backward(tsr_bf16 *dqkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                       int T, int NH, int KVH, int hs, tcu_stream s) {
    rope_emu("tcu_rope_backward", dqkv, pos, p0, inv_freq, B, T, NH, KVH, hs, 0, 1.0f, 1);
}

/* partial / scaled RoPE: rope_emu with rot and mscale */
void tcu_rope_part_forward(tsr_bf16 *qkv, const int32_t *pos, int p0, const float *inv_freq,
                           int B, int T, int NH, int KVH, int hs, int rot, float mscale,
                           tcu_stream s) {
    rope_emu("tcu_rope_part_forward", qkv, pos, p0, inv_freq, B, T, NH, KVH, hs, rot,
             mscale, 0);
}

void tcu_rope_part_backward(tsr_bf16 *dqkv, const int32_t *pos, int p0, const float *inv_freq,
                            int B, int T, int NH, int KVH, int hs, int rot, float mscale,
                            tcu_stream s) {
    rope_emu("tcu_rope_part_backward", dqkv, pos, p0, inv_freq, B, T, NH, KVH, hs, rot,
             mscale, 1);
}

static void check_nf(const char *what, int N, int F, int ok) {
    REQUIRE(N >= 0 && F >= 1, what, "need N >= 0 and F >= 1, got N=%d F=%d", N, F);
    REQUIRE(ok, what, "a required pointer is NULL");
}

void tcu_swiglu_forward(tsr_bf16 *out, const tsr_bf16 *inp, int N, int F, tcu_stream s) {
    const char *what = "tcu_swiglu_forward";
    check_nf(what, N, F, out && inp);
    if (N == 0) return;
    const size_t n = (size_t)N * F;
    float *x = emu_widen(inp, 2 * n, what), *o = emu_host_alloc(n * sizeof *o, what);
    cpu->swiglu_forward(o, x, N, F);
    emu_round_into(out, o, n);
    free(o), free(x);
}

/* dinp (bf16) += the CPU op's fp32 increment */
void tcu_swiglu_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, int N, int F,
                         tsr_grad_mode mode, tcu_stream s) {
    const char *what = "tcu_swiglu_backward";
    check_nf(what, N, F, dinp && inp && dout);
    if (N == 0) return;
    const size_t n = (size_t)N * F;
    float *x = emu_widen(inp, 2 * n, what), *g = emu_widen(dout, n, what);
    float *dx = emu_host_zeros(2 * n, what);
    cpu->swiglu_backward(dx, x, g, N, F);
    emu_grad_round_into(dinp, dx, 2 * n, mode);
    free(dx), free(g), free(x);
}

/* a gated unit's forward and backward (the CPU op on the widened rows): GeGLU or gpt-oss's
 * (alpha, limit) */
static void unit_emu(const char *what, int gptoss, tsr_bf16 *o, const tsr_bf16 *inp,
                     const tsr_bf16 *dout, int N, int F, float alpha, float limit,
                     tsr_grad_mode mode) {
    check_nf(what, N, F, o && inp);
    if (N == 0) return;
    const size_t n = (size_t)N * F;
    float *x = emu_widen(inp, 2 * n, what);
    if (!dout) {
        float *y = emu_host_alloc(n * sizeof *y, what);
        if (gptoss) cpu->moe_gptoss_forward(y, x, N, F, alpha, limit);
        else cpu->geglu_forward(y, x, N, F);
        emu_round_into(o, y, n);
        free(y), free(x);
        return;
    }
    float *g = emu_widen(dout, n, what), *dx = emu_host_zeros(2 * n, what);
    if (gptoss) cpu->moe_gptoss_backward(dx, x, g, N, F, alpha, limit);
    else cpu->geglu_backward(dx, x, g, N, F);
    emu_grad_round_into(o, dx, 2 * n, mode);
    free(dx), free(g), free(x);
}

void tcu_geglu_forward(tsr_bf16 *out, const tsr_bf16 *inp, int N, int F, tcu_stream s) {
    unit_emu("tcu_geglu_forward", 0, out, inp, NULL, N, F, 0.0f, 0.0f, TSR_GRAD_SET);
}

void tcu_geglu_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, int N, int F,
                        tsr_grad_mode mode, tcu_stream s) {
    REQUIRE(dout, "tcu_geglu_backward", "a required pointer is NULL");
    unit_emu("tcu_geglu_backward", 0, dinp, inp, dout, N, F, 0.0f, 0.0f, mode);
}

void tcu_moe_gptoss_forward(tsr_bf16 *out, const tsr_bf16 *inp, int N, int F, float alpha,
                            float limit, tcu_stream s) {
    unit_emu("tcu_moe_gptoss_forward", 1, out, inp, NULL, N, F, alpha, limit, TSR_GRAD_SET);
}

void tcu_moe_gptoss_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, int N,
                             int F, float alpha, float limit, tsr_grad_mode mode, tcu_stream s) {
    REQUIRE(dout, "tcu_moe_gptoss_backward", "a required pointer is NULL");
    unit_emu("tcu_moe_gptoss_backward", 1, dinp, inp, dout, N, F, alpha, limit, mode);
}

void tcu_scale_bf16(tsr_bf16 *x, float sc, size_t n, tcu_stream s) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(bf16_widen(x[i]) * sc);
}

static float emu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

void tcu_gate_forward(tsr_bf16 *gated, const tsr_bf16 *y, const tsr_bf16 *gate, size_t n,
                      tcu_stream s) {
    for (size_t i = 0; i < n; i++)
        gated[i] = bf16_round(bf16_widen(y[i]) * emu_sigmoid(bf16_widen(gate[i])));
}

void tcu_gate_backward(tsr_bf16 *dy, tsr_bf16 *dgate, const tsr_bf16 *y, const tsr_bf16 *gate,
                       size_t n, tcu_stream s) {
    for (size_t i = 0; i < n; i++) {
        const float sg = emu_sigmoid(bf16_widen(gate[i])), d = bf16_widen(dy[i]);
        dgate[i] = bf16_round(d * bf16_widen(y[i]) * sg * (1.0f - sg));
        dy[i] = bf16_round(d * sg);
    }
}
