/* emu_xent.c — the host emulator of cuda_xent.cu (emu.h): softmax cross-entropy (with the
 * logits' soft cap) and argmax. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

static const tsr_ops *const cpu = &tsr_cpu_ops;

/* Row by row (in parallel): the CPU ops on the widened row, in place; with dlosses the row of
 * logits is overwritten by round(dlogits) (0 for target < 0 and columns >= V), without it left
 * as it is. A target >= V poisons its row as the kernels do (cuda_xent.cu): loss NaN and, with
 * dlosses, dlogits NaN in the first V columns and 0 in the padding. */
void tcu_softmax_xent(float *losses, tsr_bf16 *logits, const int32_t *targets,
                      const float *dlosses, int N, int V, int Vp, tcu_stream s) {
    const char *what = "tcu_softmax_xent";
    REQUIRE(N >= 0 && V >= 1 && Vp >= V, what,
            "need N >= 0 and 1 <= V <= Vp, got N=%d V=%d Vp=%d", N, V, Vp);
    REQUIRE(losses && logits && targets, what, "a required pointer is NULL");
    if (N == 0) return;
#pragma omp parallel
    {
        float *row = emu_host_alloc((size_t)Vp * sizeof *row, what);
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            tsr_bf16 *lr = logits + (size_t)n * Vp;
            if (targets[n] >= V) { /* the kernels' NaN, CUDART_NAN_F: bits 0x7fffffff */
                const uint32_t nan_bits = 0x7fffffffu;
                float nan;
                memcpy(&nan, &nan_bits, sizeof nan);
                losses[n] = nan;
                if (dlosses) {
                    for (int j = 0; j < Vp; j++) row[j] = j < V ? nan : 0.0f;
                    emu_round_into(lr, row, Vp);
                }
                continue;
            }
            emu_widen_into(row, lr, Vp);
            cpu->softmax_xent_forward(losses + n, row, row, targets + n, 1, V, Vp);
            if (dlosses) {
                cpu->softmax_xent_backward(row, dlosses + n, row, targets + n, 1, V, Vp);
                emu_round_into(lr, row, Vp);
            }
        }
        free(row);
    }
}

/* the real kernels' register-resident variant gives the same bits: nothing changes here */
void tcu_softmax_xent_set_resident(int on) { (void)on; }

void tcu_argmax(int32_t *idx, const tsr_bf16 *logits, int N, int V, int Vp, tcu_stream s) {
    const char *what = "tcu_argmax";
    REQUIRE(N >= 0 && V >= 1 && Vp >= V, what, "need N >= 0 and 1 <= V <= Vp, got N=%d V=%d Vp=%d",
            N, V, Vp);
    REQUIRE(idx && logits, what, "a required pointer is NULL");
    for (int n = 0; n < N; n++) { /* the largest value, the lowest column on ties, NaN as -inf */
        const tsr_bf16 *x = logits + (size_t)n * Vp;
        float bv = -INFINITY;
        int bj = 0;
        for (int j = 0; j < V; j++) {
            float v = bf16_widen(x[j]);
            if (isnan(v)) v = -INFINITY;
            if (v > bv) bv = v, bj = j;
        }
        idx[n] = bj;
    }
}

/* each row's capped logits z (the CPU's softcap_forward on the widened row), the softmax and loss
 * over z, with dlosses the gradient times the CPU's 1 - (z / cap)^2, rounded over the row */
void tcu_softmax_xent_capped(float *losses, tsr_bf16 *logits, const int32_t *targets,
                             const float *dlosses, int N, int V, int Vp, float cap, tcu_stream s) {
    const char *what = "tcu_softmax_xent";
    REQUIRE(cap >= 0.0f, what, "cap = %g must be >= 0", (double)cap);
    if (!(cap > 0.0f) || N == 0) {
        tcu_softmax_xent(losses, logits, targets, dlosses, N, V, Vp, s);
        return;
    }
    REQUIRE(V >= 1 && Vp >= V && N > 0 && losses && logits && targets, what, "bad arguments");
    float *row = emu_host_alloc((size_t)Vp * sizeof *row, what);
    float *z = emu_host_alloc((size_t)Vp * sizeof *z, what);
    for (int n = 0; n < N; n++) {
        tsr_bf16 *lr = logits + (size_t)n * Vp;
        emu_widen_into(row, lr, Vp);
        for (int j = 0; j < Vp; j++) z[j] = row[j];
        cpu->softcap_forward(z, row, 1, V, Vp, cap);
        for (int j = 0; j < Vp; j++) row[j] = z[j];
        if (targets[n] >= V) { /* tcu_softmax_xent's poisoned row, its NaN bits */
            tcu_softmax_xent(losses + n, lr, targets + n, dlosses ? dlosses + n : NULL, 1, V, Vp, s);
            continue;
        }
        cpu->softmax_xent_forward(losses + n, row, row, targets + n, 1, V, Vp);
        if (!dlosses) continue;
        cpu->softmax_xent_backward(row, dlosses + n, row, targets + n, 1, V, Vp);
        if (targets[n] >= 0) cpu->softcap_backward(row, z, 1, V, Vp, cap);
        emu_round_into(lr, row, Vp);
    }
    free(z), free(row);
}

void tcu_argmax_capped(int32_t *idx, const tsr_bf16 *logits, int N, int V, int Vp, float cap,
                       tcu_stream s) {
    const char *what = "tcu_argmax";
    REQUIRE(N >= 0 && V >= 1 && Vp >= V && idx && logits, what, "bad arguments");
    if (!(cap > 0.0f)) {
        tcu_argmax(idx, logits, N, V, Vp, s);
        return;
    }
    for (int n = 0; n < N; n++) { /* the largest capped value, the lowest column on ties */
        const tsr_bf16 *x = logits + (size_t)n * Vp;
        float bv = -INFINITY;
        int bj = 0;
        for (int j = 0; j < V; j++) {
            float v = cap * tanhf(bf16_widen(x[j]) / cap);
            if (isnan(v)) v = -INFINITY;
            if (v > bv) bv = v, bj = j;
        }
        idx[n] = bj;
    }
}
