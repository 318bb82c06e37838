/* emu_elementwise.c — the host emulator of cuda_elementwise.cu (emu.h): the embedding, GELU, the
 * residual adds and add_f32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

static const tsr_ops *const cpu = &tsr_cpu_ops;

/* out = round(wte[tok] + wpe[pos or t]) (an exact fp32 sum of two bf16 values); without wpe the
 * wte row is copied (bits, -0 included) */
void tcu_encoder_forward(tsr_bf16 *out, const int32_t *tokens, const tsr_bf16 *wte,
                         const tsr_bf16 *wpe, const int32_t *pos, int B, int T, int C,
                         tcu_stream s) {
    const char *what = "tcu_encoder_forward";
    REQUIRE_RULE(what, tcu_rule_encoder_forward, B, T, C, out, tokens, wte);
    const size_t N = (size_t)B * T;
    for (size_t n = 0; n < N; n++) {
        const tsr_bf16 *e = wte + (size_t)tokens[n] * C;
        tsr_bf16 *o = out + n * C;
        if (!wpe) {
            memcpy(o, e, (size_t)C * sizeof *o);
            continue;
        }
        const tsr_bf16 *p = wpe + tcu_encoder_pos(pos, n, T) * C;
        for (int c = 0; c < C; c++) o[c] = bf16_round(bf16_widen(e[c]) + bf16_widen(p[c]));
    }
}

/* the CPU op on the widened dout (dwte, dwpe fp32 +=, each or NULL: frozen; a fixed order with or
 * without tokens_host; without dwte the tokens are not read) */
void tcu_encoder_backward(float *dwte, float *dwpe, const tsr_bf16 *dout, const int32_t *tokens,
                          const int32_t *tokens_host, const int32_t *pos, int B, int T, int C,
                          tcu_stream s) {
    const char *what = "tcu_encoder_backward";
    REQUIRE_RULE(what, tcu_rule_encoder_backward, B, T, C, dout, dwte, tokens, tokens_host);
    if (!dwte && !dwpe) return;
    const size_t N = (size_t)B * T;
    if (dwte && tokens_host)
        for (size_t n = 0; n < N; n++)
            REQUIRE(tokens_host[n] >= 0, what, "tokens_host[%zu] = %d is negative", n,
                    (int)tokens_host[n]);
    float *g = emu_widen(dout, N * C, what);
    cpu->encoder_backward(dwte, dwpe, g, dwte ? (tokens ? tokens : tokens_host) : NULL, pos, B, T,
                          C);
    free(g);
}

void tcu_gelu_forward(tsr_bf16 *out, const tsr_bf16 *inp, size_t n, tsr_gelu_kind kind,
                      tcu_stream s) {
    const char *what = "tcu_gelu_forward";
    REQUIRE(emu_gelu_kind_ok(kind), what, "unknown GELU kind %d", (int)kind);
    if (n == 0) return;
    float *x = emu_widen(inp, n, what);
    cpu->gelu_forward(x, x, n, kind);
    emu_round_into(out, x, n);
    free(x);
}

/* dinp = round(dinp + gelu'(inp) dout) */
void tcu_gelu_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, size_t n,
                       tsr_gelu_kind kind, tsr_grad_mode mode, tcu_stream s) {
    const char *what = "tcu_gelu_backward";
    REQUIRE(emu_gelu_kind_ok(kind), what, "unknown GELU kind %d", (int)kind);
    if (n == 0) return;
    float *x = emu_widen(inp, n, what), *g = emu_widen(dout, n, what), *d = emu_host_zeros(n, what);
    cpu->gelu_backward(d, x, g, n, kind);
    emu_grad_round_into(dinp, d, n, mode);
    free(d), free(g), free(x);
}

void tcu_residual_forward(tsr_bf16 *out, const tsr_bf16 *a, const tsr_bf16 *b, size_t n,
                          tcu_stream s) {
    for (size_t i = 0; i < n; i++) out[i] = bf16_round(bf16_widen(a[i]) + bf16_widen(b[i]));
}

/* da = round(da + dout), db = round(db + dout); da == db: round((da + dout) + dout), as the real
 * kernel (the CPU's two += on one buffer, rounded once) */
void tcu_residual_backward(tsr_bf16 *da, tsr_bf16 *db, const tsr_bf16 *dout, size_t n,
                           tcu_stream s) {
    for (size_t i = 0; i < n; i++) {
        const float g = bf16_widen(dout[i]), x = bf16_widen(da[i]) + g;
        if (da == db) {
            da[i] = bf16_round(x + g);
        } else {
            db[i] = bf16_round(bf16_widen(db[i]) + g);
            da[i] = bf16_round(x);
        }
    }
}

/* dst[i] = dst[i] + src[i], one fp32 add each (as the kernel); needs no context (as the kernel) */
void tcu_add_f32(float *dst, const float *src, size_t n, tcu_stream s) {
    if (n == 0) return;
    REQUIRE(dst && src, "tcu_add_f32", "dst and src must not be NULL");
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}
