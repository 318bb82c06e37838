/* emu_dnparts.c — the host emulator of cuda_dnparts.cu (emu.h): the Gated DeltaNet layer's parts
 * around the core: the CPU functions on the widened tensors, the outputs rounded to bf16 (added
 * with one rounding where the op adds). */
#include <stdlib.h>

#include "emu.h"
#include "cpu/cpu_deltanet.h"

/* The convolution's shape checked, and its inputs widened when it has rows: xf (n = B T CD), hf
 * (nh = B (K-1) CD, or NULL without hist), wf (CD K); 0 when n = 0 (nothing widened) */
static int conv_inputs(const char *what, const tsr_bf16 *x, const tsr_bf16 *hist,
                       const tsr_bf16 *w, int B, int T, int CD, int K, size_t *n, size_t *nh,
                       float **xf, float **hf, float **wf) {
    REQUIRE(B >= 0 && T >= 0 && CD >= 0 && K >= 1 && K <= 16, what,
            "need B, T, CD >= 0 and 1 <= K <= 16: B=%d T=%d CD=%d K=%d", B, T, CD, K);
    *n = (size_t)B * T * CD, *nh = (size_t)B * (K - 1) * CD;
    if (*n == 0) return 0;
    *xf = emu_widen(x, *n, what), *hf = hist ? emu_widen(hist, *nh, what) : NULL;
    *wf = emu_widen(w, (size_t)CD * K, what);
    return 1;
}

void tcu_dn_conv_forward(tsr_bf16 *y, const tsr_bf16 *x, const tsr_bf16 *hist, const tsr_bf16 *w,
                         const int32_t *seq, int B, int T, int CD, int K, tcu_stream s) {
    const char *what = "tcu_dn_conv_forward";
    size_t n, nh;
    float *xf, *hf, *wf;
    if (!conv_inputs(what, x, hist, w, B, T, CD, K, &n, &nh, &xf, &hf, &wf)) return;
    float *yf = emu_host_alloc(n * sizeof *yf, what);
    cpu_dn_conv_forward(yf, xf, hf, wf, seq, B, T, CD, K);
    emu_round_into(y, yf, n);
    free(xf), free(hf), free(wf), free(yf);
}

void tcu_dn_conv_backward(tsr_bf16 *dx, tsr_bf16 *dhist, float *dw, const tsr_bf16 *dy,
                          const tsr_bf16 *x, const tsr_bf16 *hist, const tsr_bf16 *w,
                          const int32_t *seq, int B, int T, int CD, int K, tcu_stream s) {
    const char *what = "tcu_dn_conv_backward";
    size_t n, nh;
    float *xf, *hf, *wf;
    if (!conv_inputs(what, x, hist, w, B, T, CD, K, &n, &nh, &xf, &hf, &wf)) return;
    float *dyf = emu_widen(dy, n, what);
    float *gx = emu_host_zeros(n, what), *gh = dhist ? emu_host_zeros(nh + 1, what) : NULL;
    cpu_dn_conv_backward(gx, gh, dw, dyf, xf, hf, wf, seq, B, T, CD, K);
    emu_add_round_into(dx, gx, n);
    if (dhist) emu_add_round_into(dhist, gh, nh);
    free(xf), free(hf), free(wf), free(dyf), free(gx), free(gh);
}

/* The gates' shape checked, and their inputs widened when there are any: f[0..3] = b, a (n = N
 * HV), A_log, dt_bias (HV); 0 when n = 0 (nothing widened) */
static int gate_inputs(const char *what, const tsr_bf16 *b, const tsr_bf16 *a,
                       const tsr_bf16 *A_log, const tsr_bf16 *dt_bias, int N, int HV, size_t *n,
                       float *f[4]) {
    REQUIRE(N >= 0 && HV >= 0, what, "need N, HV >= 0: N=%d HV=%d", N, HV);
    *n = (size_t)N * HV;
    if (*n == 0) return 0;
    f[0] = emu_widen(b, *n, what), f[1] = emu_widen(a, *n, what);
    f[2] = emu_widen(A_log, HV, what), f[3] = emu_widen(dt_bias, HV, what);
    return 1;
}

void tcu_dn_gates_forward(float *beta, float *g, const tsr_bf16 *b, const tsr_bf16 *a,
                          const tsr_bf16 *A_log, const tsr_bf16 *dt_bias, int N, int HV,
                          tcu_stream s) {
    size_t n;
    float *f[4];
    if (!gate_inputs("tcu_dn_gates_forward", b, a, A_log, dt_bias, N, HV, &n, f)) return;
    float *bf = f[0], *af = f[1], *al = f[2], *dt = f[3];
    cpu_dn_gates_forward(beta, g, bf, af, al, dt, N, HV);
    free(bf), free(af), free(al), free(dt);
}

void tcu_dn_gates_backward(tsr_bf16 *db, tsr_bf16 *da, float *dA_log, float *ddt_bias,
                           const float *dbeta, const float *dg, const tsr_bf16 *b,
                           const tsr_bf16 *a, const tsr_bf16 *A_log, const tsr_bf16 *dt_bias,
                           int N, int HV, tcu_stream s) {
    const char *what = "tcu_dn_gates_backward";
    size_t n;
    float *f[4];
    if (!gate_inputs(what, b, a, A_log, dt_bias, N, HV, &n, f)) return;
    float *bf = f[0], *af = f[1], *al = f[2], *dt = f[3];
    float *gb = emu_host_zeros(n, what), *ga = emu_host_zeros(n, what);
    cpu_dn_gates_backward(gb, ga, dA_log, ddt_bias, dbeta, dg, bf, af, al, dt, N, HV);
    emu_add_round_into(db, gb, n), emu_add_round_into(da, ga, n);
    free(bf), free(af), free(al), free(dt), free(gb), free(ga);
}

void tcu_dn_silu_gate_forward(tsr_bf16 *out, const tsr_bf16 *x, const tsr_bf16 *z, size_t n,
                              tcu_stream s) {
    const char *what = "tcu_dn_silu_gate_forward";
    if (n == 0) return;
    float *xf = emu_widen(x, n, what), *zf = emu_widen(z, n, what);
    float *o = emu_host_alloc(n * sizeof *o, what);
    cpu_dn_silu_gate_forward(o, xf, zf, n);
    emu_round_into(out, o, n);
    free(xf), free(zf), free(o);
}

void tcu_dn_silu_gate_backward(tsr_bf16 *dx, tsr_bf16 *dz, const tsr_bf16 *dout,
                               const tsr_bf16 *x, const tsr_bf16 *z, size_t n, tcu_stream s) {
    const char *what = "tcu_dn_silu_gate_backward";
    if (n == 0) return;
    float *xf = emu_widen(x, n, what), *zf = emu_widen(z, n, what), *df = emu_widen(dout, n, what);
    float *gx = emu_host_zeros(n, what), *gz = emu_host_zeros(n, what);
    cpu_dn_silu_gate_backward(gx, gz, df, xf, zf, n);
    emu_add_round_into(dx, gx, n), emu_add_round_into(dz, gz, n);
    free(xf), free(zf), free(df), free(gx), free(gz);
}
