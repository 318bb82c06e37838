/* emu_matmul.c — the host emulator of cuda_matmul.cu (emu.h): the matmuls (with the GELU
 * epilogue, its fused backward, FP8), the reduction scheme and the GEMM choices' file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "tcu_fp8_gemm.h"
#include "tcu_gemm_tune.h"

static const tsr_ops *const cpu = &tsr_cpu_ops;

#define EMU_ROWS 1024                     /* rows per chunk of the matmul temporaries */

/* In chunks of EMU_ROWS rows: acc = inp @ w^T + bias (fp32); without pre_gelu out = round(acc);
 * with it pre_gelu = round(acc), out = round(gelu(emu_widen(pre_gelu))) */
void tcu_matmul_forward(tsr_bf16 *out, tsr_bf16 *pre_gelu, const tsr_bf16 *inp,
                        const tsr_bf16 *w, const tsr_bf16 *bias, int N, int IC, int OC,
                        tsr_gelu_kind gelu, tcu_stream s) {
    const char *what = "tcu_matmul_forward";
    REQUIRE_RULE(what, tcu_rule_matmul, N, IC, OC);
    REQUIRE(out && inp && w, what, "out, inp and w must not be NULL");
    if (pre_gelu) {
        REQUIRE(emu_gelu_kind_ok(gelu), what, "unknown GELU kind %d", (int)gelu);
        REQUIRE(pre_gelu != out, what, "pre_gelu must not alias out");
    }
    emu_need_context(what);
    const int rows = N < EMU_ROWS ? N : EMU_ROWS;
    float *wf = emu_widen(w, (size_t)OC * IC, what), *bf = bias ? emu_widen(bias, OC, what) : NULL;
    float *x = emu_host_alloc((size_t)rows * IC * sizeof *x, what);
    float *o = emu_host_alloc((size_t)rows * OC * sizeof *o, what);
    for (int n0 = 0; n0 < N; n0 += rows) {
        const int nr = N - n0 < rows ? N - n0 : rows;
        const size_t no = (size_t)nr * OC, off = (size_t)n0 * OC;
        emu_widen_into(x, inp + (size_t)n0 * IC, (size_t)nr * IC);
        cpu->matmul_forward(o, x, wf, bf, nr, IC, OC);
        if (pre_gelu) {
            emu_round_into(pre_gelu + off, o, no);
            emu_widen_into(o, pre_gelu + off, no);
            cpu->gelu_forward(o, o, no, gelu);
        }
        emu_round_into(out + off, o, no);
    }
    free(o), free(x), free(bf), free(wf);
}

/* In chunks of EMU_ROWS rows, the CPU op: dinp (bf16) += (SET: =) its fp32 increment of the
 * chunk; dw and dbias fp32 += by it (one fp32 add per chunk), each or NULL as the CPU op takes
 * them (dw NULL: inp unread). A NULL dinp gets a scratch stand-in (the CPU op needs one) and w then reads as
 * zeros. */
void tcu_matmul_backward(tsr_bf16 *dinp, float *dw, float *dbias, const tsr_bf16 *dout,
                         const tsr_bf16 *inp, const tsr_bf16 *w, int N, int IC, int OC,
                         tsr_grad_mode mode, tcu_stream s) {
    const char *what = "tcu_matmul_backward";
    REQUIRE_RULE(what, tcu_rule_matmul_backward, N, IC, OC, dinp, dw, dout, inp, w);
    emu_need_context(what);
    if (!dinp && !dw && !dbias) return;
    const int rows = N < EMU_ROWS ? N : EMU_ROWS;
    const size_t nw = (size_t)OC * IC;
    float *wf = dinp ? emu_widen(w, nw, what) : emu_host_zeros(nw, what);
    float *g = emu_host_alloc((size_t)rows * OC * sizeof *g, what);
    float *x = dw ? emu_host_alloc((size_t)rows * IC * sizeof *x, what) : NULL;
    float *dx = emu_host_alloc((size_t)rows * IC * sizeof *dx, what);
    for (int n0 = 0; n0 < N; n0 += rows) {
        const int nr = N - n0 < rows ? N - n0 : rows;
        const size_t ni = (size_t)nr * IC;
        emu_widen_into(g, dout + (size_t)n0 * OC, (size_t)nr * OC);
        if (dw) emu_widen_into(x, inp + (size_t)n0 * IC, ni);
        memset(dx, 0, ni * sizeof *dx);
        cpu->matmul_backward(dx, dw, dbias, g, x, wf, nr, IC, OC);
        if (dinp) emu_grad_round_into(dinp + (size_t)n0 * IC, dx, ni, mode);
    }
    free(dx), free(x), free(g), free(wf);
}

/* no split-K here (every product one fp32 sum): the scheme is checked and changes nothing */
void tcu_matmul_set_reduction(tcu_reduction r) {
    REQUIRE(r == TCU_REDUCTION_COMPUTE || r == TCU_REDUCTION_NONE || r == TCU_REDUCTION_ANY,
            "tcu_matmul_set_reduction", "%d is not a tcu_reduction", (int)r);
}

/* TSR_GEMM_TUNE: the file read and checked as on a GPU (the emulator's device name, cuBLASLt
 * version 0); with one way for every matmul nothing is ever timed or added */
static tcu_tune_table emu_tune;

int tcu_matmul_tune_open(const char *path, int timing, char *err, size_t n) {
    emu_need_context("tcu_matmul_tune_open");
    char dev[128];
    tcu_device_info(dev, sizeof dev, NULL, NULL, NULL);
    tcu_tune_release(&emu_tune);
    return tcu_tune_open(&emu_tune, path, dev, 0, timing, err, n);
}

uint64_t tcu_matmul_tune_hash(void) { return tcu_tune_hash(&emu_tune); }

void tcu_matmul_tune_stats(tcu_tune_stats *st) {
    memset(st, 0, sizeof *st);
    st->loaded = emu_tune.loaded;
}

int tcu_matmul_tune_save(const char *path, char *err, size_t n) {
    (void)path, (void)err, (void)n;
    return 0;
}

int tcu_matmul_report(FILE *f) {
    if (f)
        fprintf(f, "cuBLASLt: the emulator has no cuBLASLt (one way for every matmul): 0 shape(s), "
                   "0 split-K\n");
    return 0;
}

/* dinp = round(gelu_tanh'(pre_gelu) * (dout @ w)) from the fp32 product (the DGELU epilogue's one
 * rounding); IC % 8 != 0, as the CUDA op (no epilogue): tcu_matmul_backward (=), then
 * tcu_gelu_backward in place, two roundings; dw, dbias by tcu_matmul_backward */
void tcu_matmul_backward_dgelu(tsr_bf16 *dinp, float *dw, float *dbias, const tsr_bf16 *dout,
                               const tsr_bf16 *inp, const tsr_bf16 *w, const tsr_bf16 *pre_gelu,
                               int N, int IC, int OC, tcu_stream s) {
    const char *what = "tcu_matmul_backward_dgelu";
    REQUIRE_RULE(what, tcu_rule_matmul_dgelu, N, IC, OC, dinp, dout, w, pre_gelu);
    emu_need_context(what);
    if (IC % 8 != 0) {
        tcu_matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC, TSR_GRAD_SET, s);
        tcu_gelu_backward(dinp, pre_gelu, dinp, (size_t)N * IC, TSR_GELU_TANH, TSR_GRAD_SET, s);
        return;
    }
    const int rows = N < EMU_ROWS ? N : EMU_ROWS;
    float *wf = emu_widen(w, (size_t)OC * IC, what);
    float *g = emu_host_alloc((size_t)rows * OC * sizeof *g, what);
    float *pre = emu_host_alloc((size_t)rows * IC * sizeof *pre, what);
    float *dx = emu_host_alloc((size_t)rows * IC * sizeof *dx, what);
    float *d = emu_host_alloc((size_t)rows * IC * sizeof *d, what);
    for (int n0 = 0; n0 < N; n0 += rows) {
        const int nr = N - n0 < rows ? N - n0 : rows;
        const size_t ni = (size_t)nr * IC;
        emu_widen_into(g, dout + (size_t)n0 * OC, (size_t)nr * OC);
        emu_widen_into(pre, pre_gelu + (size_t)n0 * IC, ni);
        memset(dx, 0, ni * sizeof *dx);
        cpu->matmul_backward(dx, NULL, NULL, g, NULL, wf, nr, IC, OC);
        memset(d, 0, ni * sizeof *d);
        cpu->gelu_backward(d, pre, dx, ni, TSR_GELU_TANH);
        emu_round_into(dinp + (size_t)n0 * IC, d, ni);
    }
    free(d), free(dx), free(pre), free(g), free(wf);
    if (dw || dbias) tcu_matmul_backward(NULL, dw, dbias, dout, inp, w, N, IC, OC, TSR_GRAD_SET, s);
}

/* the decoded products summed in fp32 by the CPU's sgemm (cuBLASLt's up to the order of the
 * sums), times sx_inv * sw_inv, plus bias: rounded once to bf16 where the backend's plan
 * (tcu_fp8_gemm_plan, the same function) puts the bias in the BIAS epilogue, else rounded, then
 * the bias added and rounded again (bias_add_rows_kernel). The plan is refused as the backend
 * refuses it (tcu_fp8_gemm_check: cuBLASLt's FP8 rules); the emulator has no workspace. */
void tcu_matmul_fp8(tsr_bf16 *out, const tsr_fp8 *qx, const float *sx_inv, const tsr_fp8 *qw,
                    const float *sw_inv, const tsr_bf16 *bias, int N, int IC, int OC,
                    tcu_stream s) {
    const char *what = "tcu_matmul_fp8";
    REQUIRE_RULE(what, tcu_rule_matmul, N, IC, OC);
    REQUIRE(out && qx && qw && sx_inv && sw_inv, what,
            "out, qx, qw, sx_inv and sw_inv must not be NULL");
    tcu_fp8_gemm p;
    char desc[640];
    tcu_fp8_gemm_plan(&p, out, qx, sx_inv, qw, sw_inv, bias, N, IC, OC, NULL, 0);
    const char *why = tcu_fp8_gemm_check(&p);
    REQUIRE(!why, what, "N=%d IC=%d OC=%d: %s (cuBLASLt's FP8 rules; the call: %s)", N, IC, OC,
            why ? why : "", tcu_fp8_gemm_describe(&p, desc, sizeof desc));
    emu_need_context(what);
    const size_t nx = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *x = emu_host_alloc(nx * sizeof *x, what), *w = emu_host_alloc(nw * sizeof *w, what);
    float *o = emu_host_alloc(no * sizeof *o, what);
    for (size_t i = 0; i < nx; i++) x[i] = tcu_fp8_decode(qx[i], TCU_FP8_E4M3);
    for (size_t i = 0; i < nw; i++) w[i] = tcu_fp8_decode(qw[i], TCU_FP8_E4M3);
    cpu->matmul_forward(o, x, w, NULL, N, IC, OC);
    const float f = *sx_inv * *sw_inv;
    for (size_t i = 0; i < no; i++) {
        const float b = bias ? bf16_widen(bias[i % (size_t)OC]) : 0.0f;
        out[i] = p.bias_epilogue ? bf16_round(o[i] * f + b) : bf16_round(o[i] * f);
        if (bias && !p.bias_epilogue) out[i] = bf16_round(bf16_widen(out[i]) + b);
    }
    (void)s;
    free(o), free(w), free(x);
}
