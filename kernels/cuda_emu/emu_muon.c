/* emu_muon.c — the host emulator of cuda_muon.cu (emu.h): Muon's element-wise steps (the same
 * fp32 operations, element by element). */
#include <math.h>

#include "emu.h"

void tcu_muon_momentum(float *buf, const float *g, float *u, size_t n, float beta, float gscale,
                       int nesterov, tcu_stream s) {
    if (n == 0) return;
    REQUIRE(buf && g && u, "tcu_muon_momentum", "buf, g and u must not be NULL");
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        buf[i] = beta * buf[i] + gi;
        u[i] = nesterov ? gi + beta * buf[i] : buf[i];
    }
}

void tcu_muon_normalize(tsr_bf16 *x, const float *u, const float *sumsq, int rows, int cols,
                        int transpose, float eps, tcu_stream s) {
    const char *what = "tcu_muon_normalize";
    REQUIRE(rows > 0 && cols > 0, what, "rows = %d, cols = %d must be > 0", rows, cols);
    REQUIRE(x && u && sumsq, what, "x, u and sumsq must not be NULL");
    const float inv = (float)(1.0 / (sqrt((double)*sumsq) + (double)eps));
    for (size_t k = 0; k < (size_t)rows * (size_t)cols; k++)
        x[tcu_muon_at(k, rows, cols, transpose)] = bf16_round(u[k] * inv);
}

void tcu_axpby_bf16(tsr_bf16 *out, float alpha, const tsr_bf16 *x, float beta, const tsr_bf16 *y,
                    size_t n, tcu_stream s) {
    if (n == 0) return;
    REQUIRE(out && x, "tcu_axpby_bf16", "out and x must not be NULL");
    for (size_t i = 0; i < n; i++) {
        float v = alpha * bf16_widen(x[i]);
        if (y) v = v + beta * bf16_widen(y[i]);
        out[i] = bf16_round(v);
    }
}

void tcu_muon_apply(float *p, tsr_bf16 *p_bf16, const tsr_bf16 *o, int rows, int cols,
                    int transposed, float decay, float step, tcu_stream s) {
    const char *what = "tcu_muon_apply";
    REQUIRE(rows > 0 && cols > 0, what, "rows = %d, cols = %d must be > 0", rows, cols);
    REQUIRE(p && o, what, "p and o must not be NULL");
    for (size_t k = 0; k < (size_t)rows * (size_t)cols; k++) {
        float ok = bf16_widen(o[tcu_muon_at(k, rows, cols, transposed)]);
        p[k] = p[k] * decay - step * ok;
        if (p_bf16) p_bf16[k] = bf16_round(p[k]);
    }
}
