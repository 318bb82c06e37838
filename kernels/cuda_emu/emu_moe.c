/* emu_moe.c — the host emulator of cuda_moe.cu (emu.h): mixture of experts: the router, gather,
 * grouped matmul, combine, their backward, the experts' bias and the shared expert's gate. */
#include <stdlib.h>

#include "emu.h"

static const tsr_ops *const cpu = &tsr_cpu_ops;

/* The CPU ops are optional in their table (ops.h): an emulated MoE op without its twin dies */
static void need_cpu_op(const char *what, int present) {
    REQUIRE(present, what, "the fp32 CPU op it runs on is missing from tsr_cpu_ops (kernels/cpu)");
}

static void check_moe(const char *what, int N, int E, int K) {
    REQUIRE(N >= 0 && E >= 1 && K >= 1 && K <= E, what,
            "need N >= 0 and 1 <= K <= E, got N=%d E=%d K=%d", N, E, K);
    REQUIRE((long long)N * K < (1ll << 31), what, "N*K = %lld assignments is too many (< 2^31)",
            (long long)N * K);
}

/* the CPU op on the widened logits: every output is fp32 or int32, written in place */
void tcu_moe_route(float *probs, float *lse, int32_t *idx, float *wts, int32_t *offs,
                   int32_t *rows, int32_t *slot, float *stats, const tsr_bf16 *logits, int N,
                   int E, int K, int norm, tcu_stream s) {
    const char *what = "tcu_moe_route";
    check_moe(what, N, E, K);
    REQUIRE(probs && lse && idx && wts && offs && rows && slot && stats && logits, what,
            "a required pointer is NULL");
    need_cpu_op(what, cpu->moe_route != NULL);
    float *x = emu_widen(logits, (size_t)N * E, what);
    cpu->moe_route(probs, lse, idx, wts, offs, rows, slot, stats, x, N, E, K, norm);
    free(x);
}

static void check_nkc(const char *what, int N, int K, int C, int ok) {
    REQUIRE(N >= 0 && K >= 1 && C >= 1, what, "need N >= 0, K >= 1 and C >= 1, got N=%d K=%d C=%d",
            N, K, C);
    REQUIRE((long long)N * K < (1ll << 31), what, "N*K = %lld assignments is too many (< 2^31)",
            (long long)N * K);
    REQUIRE(ok, what, "a required pointer is NULL");
}

/* a copy of bits (widening and rounding back is exact) */
void tcu_moe_gather(tsr_bf16 *xg, const tsr_bf16 *x, const int32_t *rows, int N, int K, int C,
                    tcu_stream s) {
    const char *what = "tcu_moe_gather";
    check_nkc(what, N, K, C, xg && x && rows);
    need_cpu_op(what, cpu->moe_gather != NULL);
    if (N == 0) return;
    const size_t NK = (size_t)N * K;
    float *xf = emu_widen(x, (size_t)N * C, what), *o = emu_host_alloc(NK * C * sizeof *o, what);
    cpu->moe_gather(o, xf, rows, N, K, C);
    emu_round_into(xg, o, NK * C);
    free(o), free(xf);
}

/* the CPU op on the widened dx itself (dx + dxg rows in j order, fp32), rounded once: the kernel's
 * order and rounding */
void tcu_moe_gather_backward(tsr_bf16 *dx, const tsr_bf16 *dxg, const int32_t *slot, int N, int K,
                             int C, tcu_stream s) {
    const char *what = "tcu_moe_gather_backward";
    check_nkc(what, N, K, C, dx && dxg && slot);
    need_cpu_op(what, cpu->moe_gather_backward != NULL);
    if (N == 0) return;
    const size_t n = (size_t)N * C;
    float *d = emu_widen(dx, n, what), *g = emu_widen(dxg, (size_t)N * K * C, what);
    cpu->moe_gather_backward(d, g, slot, N, K, C);
    emu_round_into(dx, d, n);
    free(g), free(d);
}

static void check_grouped(const char *what, int E, int NK, int IC, int OC, int ok) {
    REQUIRE(E >= 1 && NK >= 0 && IC >= 1 && OC >= 1, what,
            "need E >= 1, NK >= 0, IC >= 1 and OC >= 1, got E=%d NK=%d IC=%d OC=%d", E, NK, IC,
            OC);
    REQUIRE(ok, what, "a required pointer is NULL");
}

/* out = round(the CPU op on the widened operands); every row belongs to an expert */
void tcu_moe_matmul_forward(tsr_bf16 *out, const tsr_bf16 *inp, const tsr_bf16 *w,
                            const int32_t *offs, int E, int NK, int IC, int OC, tcu_stream s) {
    const char *what = "tcu_moe_matmul_forward";
    check_grouped(what, E, NK, IC, OC, out && inp && w && offs);
    need_cpu_op(what, cpu->moe_matmul_forward != NULL);
    if (NK == 0) return;
    float *x = emu_widen(inp, (size_t)NK * IC, what), *wf = emu_widen(w, (size_t)E * OC * IC, what);
    float *o = emu_host_alloc((size_t)NK * OC * sizeof *o, what);
    cpu->moe_matmul_forward(o, x, wf, offs, E, NK, IC, OC);
    emu_round_into(out, o, (size_t)NK * OC);
    free(o), free(wf), free(x);
}

/* dinp (bf16) += the CPU op's fp32 increment; dw fp32 += by the CPU op (or NULL: inp unread) */
void tcu_moe_matmul_backward(tsr_bf16 *dinp, float *dw, const tsr_bf16 *dout,
                             const tsr_bf16 *inp, const tsr_bf16 *w, const int32_t *offs, int E,
                             int NK, int IC, int OC, tcu_stream s) {
    const char *what = "tcu_moe_matmul_backward";
    check_grouped(what, E, NK, IC, OC, dinp && dout && (inp || !dw) && w && offs);
    need_cpu_op(what, cpu->moe_matmul_backward != NULL);
    if (NK == 0) return;
    const size_t ni = (size_t)NK * IC;
    float *x = dw ? emu_widen(inp, ni, what) : NULL, *g = emu_widen(dout, (size_t)NK * OC, what);
    float *wf = emu_widen(w, (size_t)E * OC * IC, what), *dx = emu_host_zeros(ni, what);
    cpu->moe_matmul_backward(dx, dw, g, x, wf, offs, E, NK, IC, OC);
    emu_add_round_into(dinp, dx, ni);
    free(dx), free(wf), free(g), free(x);
}

/* out = round(the CPU op on the widened base (or NULL) and y); out may be base */
void tcu_moe_combine(tsr_bf16 *out, const tsr_bf16 *base, const tsr_bf16 *y, const float *wts,
                     const int32_t *slot, int N, int K, int C, tcu_stream s) {
    const char *what = "tcu_moe_combine";
    check_nkc(what, N, K, C, out && y && wts && slot);
    need_cpu_op(what, cpu->moe_combine != NULL);
    if (N == 0) return;
    const size_t n = (size_t)N * C;
    float *b = base ? emu_widen(base, n, what) : NULL, *yf = emu_widen(y, (size_t)N * K * C, what);
    float *o = emu_host_alloc(n * sizeof *o, what);
    cpu->moe_combine(o, b, yf, wts, slot, N, K, C);
    emu_round_into(out, o, n);
    free(o), free(yf), free(b);
}

/* dy = round(the CPU op's wts * dout); dwts written by it (double dot products) */
void tcu_moe_combine_backward(tsr_bf16 *dy, float *dwts, const tsr_bf16 *dout, const tsr_bf16 *y,
                              const float *wts, const int32_t *slot, int N, int K, int C,
                              tcu_stream s) {
    const char *what = "tcu_moe_combine_backward";
    check_nkc(what, N, K, C, dy && dwts && dout && y && wts && slot);
    need_cpu_op(what, cpu->moe_combine_backward != NULL);
    if (N == 0) return;
    const size_t n = (size_t)N * C, nk = n * (size_t)K;
    float *g = emu_widen(dout, n, what), *d = emu_host_alloc(nk * sizeof *d, what);
    float *yf = emu_host_zeros(nk, what); /* zeroed first: gcc 12 cannot see it filled */
    emu_widen_into(yf, y, nk);
    cpu->moe_combine_backward(d, dwts, g, yf, wts, slot, N, K, C);
    emu_round_into(dy, d, nk);
    free(d), free(yf), free(g);
}

/* dlogits = round(the CPU op's fp32 gradient) */
void tcu_moe_router_backward(tsr_bf16 *dlogits, const float *dwts, const float *probs,
                             const float *lse, const int32_t *idx, const float *wts,
                             const int32_t *offs, int N, int E, int K, int norm, float aux_w,
                             float z_w, tcu_stream s) {
    const char *what = "tcu_moe_router_backward";
    check_moe(what, N, E, K);
    REQUIRE(dlogits && dwts && probs && lse && idx && wts && offs, what,
            "a required pointer is NULL");
    need_cpu_op(what, cpu->moe_router_backward != NULL);
    if (N == 0) return;
    const size_t n = (size_t)N * E;
    float *d = emu_host_alloc(n * sizeof *d, what);
    cpu->moe_router_backward(d, dwts, probs, lse, idx, wts, offs, N, E, K, norm, aux_w, z_w);
    emu_round_into(dlogits, d, n);
    free(d);
}

/* out's rows of expert e = round(out + b[e]) (the CPU op on the widened rows) */
void tcu_moe_bias_forward(tsr_bf16 *out, const tsr_bf16 *b, const int32_t *offs, int E, int OC,
                          tcu_stream s) {
    const char *what = "tcu_moe_bias_forward";
    REQUIRE(E >= 1 && OC >= 1 && out && b && offs, what, "bad arguments E=%d OC=%d", E, OC);
    const size_t n = (size_t)offs[E] * OC;
    float *x = emu_widen(out, n, what), *bf = emu_widen(b, (size_t)E * OC, what);
    cpu->moe_bias_forward(x, bf, offs, E, OC);
    emu_round_into(out, x, n);
    free(bf), free(x);
}

void tcu_moe_bias_backward(float *db, const tsr_bf16 *dout, const int32_t *offs, int E, int OC,
                           tcu_stream s) {
    const char *what = "tcu_moe_bias_backward";
    REQUIRE(E >= 1 && OC >= 1 && db && dout && offs, what, "bad arguments E=%d OC=%d", E, OC);
    float *g = emu_widen(dout, (size_t)offs[E] * OC, what);
    cpu->moe_bias_backward(db, g, offs, E, OC);
    free(g);
}

/* the shared expert's gate: the CPU ops on the widened tensors, activations rounded back */
void tcu_moe_shgate_forward(tsr_bf16 *out, const tsr_bf16 *x, const tsr_bf16 *w, int N, int C,
                            tcu_stream s) {
    const char *what = "tcu_moe_shgate_forward";
    REQUIRE(N >= 0 && C >= 1 && out && x && w, what, "bad arguments N=%d C=%d", N, C);
    const size_t n = (size_t)N * C;
    float *o = emu_widen(out, n, what), *xf = emu_widen(x, n, what), *wf = emu_widen(w, C, what);
    cpu->moe_shgate_forward(o, xf, wf, N, C);
    emu_round_into(out, o, n);
    free(wf), free(xf), free(o);
}

void tcu_moe_shgate_grad(float *dg, float *gw, const tsr_bf16 *shg, const tsr_bf16 *dshg,
                         const tsr_bf16 *x, const tsr_bf16 *w, int N, int S, int C, tcu_stream s) {
    const char *what = "tcu_moe_shgate_grad";
    REQUIRE(N >= 0 && C >= 1 && S >= 1 && dg && shg && dshg && x && w, what,
            "bad arguments N=%d S=%d C=%d", N, S, C);
    const size_t n = (size_t)N * C, ns = (size_t)N * S;
    float *xf = emu_widen(x, n, what), *wf = emu_widen(w, C, what);
    float *hf = emu_widen(shg, ns, what), *df = emu_widen(dshg, ns, what);
    cpu->moe_shgate_grad(dg, gw, hf, df, xf, wf, N, S, C);
    free(df), free(hf), free(wf), free(xf);
}

void tcu_moe_shgate_dx(tsr_bf16 *dx, const float *dg, const tsr_bf16 *w, int N, int C,
                       tcu_stream s) {
    const char *what = "tcu_moe_shgate_dx";
    REQUIRE(N >= 0 && C >= 1 && dx && dg && w, what, "bad arguments N=%d C=%d", N, C);
    const size_t n = (size_t)N * C;
    float *d = emu_host_zeros(n, what), *wf = emu_widen(w, C, what);
    cpu->moe_shgate_dx(d, dg, wf, N, C);
    emu_add_round_into(dx, d, n);
    free(wf), free(d);
}
