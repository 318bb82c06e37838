/* emu_layernorm.c — the host emulator of cuda_layernorm.cu (emu.h): LayerNorm, fused with the
 * residual add, and its backward. */
#include <stdlib.h>

#include "emu.h"

static const tsr_ops *const cpu = &tsr_cpu_ops;

/* out = round(LN(x)) with x = inp, or (fused) x = residual = round(a + b): the LayerNorm of the
 * rounded residual, bit for bit the two separate ops; mean, rstd written when not NULL */
static void ln_forward(const char *what, int fused, tsr_bf16 *residual, tsr_bf16 *out,
                       float *mean, float *rstd, const tsr_bf16 *a, const tsr_bf16 *b,
                       const tsr_bf16 *w, const tsr_bf16 *bias, int N, int C) {
    REQUIRE(N >= 0 && C >= 1, what, "need N >= 0 and C >= 1, got N=%d C=%d", N, C);
    REQUIRE(out && a && w && (!fused || (b && residual)), what, "a required pointer is NULL");
    if (N == 0) return;
    const size_t n = (size_t)N * C;
    float *x = emu_norm_input(what, fused, residual, a, b, n);
    float *o = emu_host_alloc(n * sizeof *o, what);
    float *wf = emu_widen(w, C, what), *bf = bias ? emu_widen(bias, C, what) : NULL;
    float *mn = mean ? mean : emu_host_alloc((size_t)N * sizeof *mn, what);
    float *rs = rstd ? rstd : emu_host_alloc((size_t)N * sizeof *rs, what);
    cpu->layernorm_forward(o, mn, rs, x, wf, bf, N, C);
    emu_round_into(out, o, n);
    if (!mean) free(mn);
    if (!rstd) free(rs);
    free(bf), free(wf), free(o), free(x);
}

void tcu_layernorm_forward(tsr_bf16 *out, float *mean, float *rstd, const tsr_bf16 *inp,
                           const tsr_bf16 *w, const tsr_bf16 *b, int N, int C, tcu_stream s) {
    ln_forward("tcu_layernorm_forward", 0, NULL, out, mean, rstd, inp, NULL, w, b, N, C);
}

void tcu_residual_layernorm_forward(tsr_bf16 *residual, tsr_bf16 *out, float *mean, float *rstd,
                                    const tsr_bf16 *a, const tsr_bf16 *b, const tsr_bf16 *w,
                                    const tsr_bf16 *bias, int N, int C, tcu_stream s) {
    ln_forward("tcu_residual_layernorm_forward", 1, residual, out, mean, rstd, a, b, w, bias, N,
               C);
}

/* the real backward's HOLD variant (same bits): the emulator has one norm backward, and says so */
void tcu_norm_set_hold(int mask) {
    REQUIRE(mask >= 0 && mask <= TCU_NORM_HOLD_ALL, "tcu_norm_set_hold",
            "mask = %d: expected 0 ... %d", mask, TCU_NORM_HOLD_ALL);
}

int tcu_norm_hold(void) { return 0; }

/* dinp (bf16) += the CPU op's fp32 increment; dw, db fp32 += by the CPU op (each or NULL) */
void tcu_layernorm_backward(tsr_bf16 *dinp, float *dw, float *db, const tsr_bf16 *dout,
                            const tsr_bf16 *inp, const tsr_bf16 *w, const float *mean,
                            const float *rstd, int N, int C, tcu_stream s) {
    const char *what = "tcu_layernorm_backward";
    REQUIRE(N >= 0 && C >= 1, what, "need N >= 0 and C >= 1, got N=%d C=%d", N, C);
    REQUIRE(dinp && dout && inp && w && mean && rstd, what, "a required pointer is NULL");
    if (N == 0) return;
    emu_need_context(what);
    const size_t n = (size_t)N * C;
    float *x = emu_widen(inp, n, what), *g = emu_widen(dout, n, what), *wf = emu_widen(w, C, what);
    float *dx = emu_host_zeros(n, what);
    cpu->layernorm_backward(dx, dw, db, g, x, wf, mean, rstd, N, C);
    emu_add_round_into(dinp, dx, n);
    free(dx), free(wf), free(g), free(x);
}
