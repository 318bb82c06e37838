/* emu_attention.c — the host emulator of cuda_attention.cu (emu.h): causal attention with its
 * variants, forward and backward, and the kernels' switches. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

static const tsr_ops *const cpu = &tsr_cpu_ops;

static int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Rows r = h*T + i of sequence b (x (T,QKV): its widened qkv, query head h reading key head
 * h / (NH/KVH)), over j in [lo(i), i], lo(i) the start of i's segment (run of equal ids in sq, or
 * 0; with a window W, at least i - W + 1), with s[i,j] = c(q_i . k_j scale) - slope (i - j) in
 * fp32 (fma dot products, as the CPU op; scale 1/sqrt(hs) or var's, c var's soft cap or none):
 * with lse_out, lse_out[b,h,i] = log (sum_j exp(s[i,j]) + exp(sink_h)) (online, in double; the
 * sink term with var's sinks only); else att (NH,T,T) row r = exp(s[i,j] - lse[b,h,i]), exact
 * zeros elsewhere */
static void att_rows(float *lse_out, float *att, const float *lse, const float *x,
                     const float *slopes, const int32_t *sq, const tsr_attn_var *var, int *lo,
                     int b, int T, int NH, int KVH, int hs) {
    const size_t ld = (size_t)(NH + 2 * KVH) * hs;
    const float scale = var && var->scale > 0.0f ? var->scale : 1.0f / sqrtf((float)hs);
    const float cap = var ? var->softcap : 0.0f;
    const int W = var ? var->window : 0;
    lo[0] = 0;
    for (int i = 1; i < T; i++) lo[i] = !sq ? 0 : sq[i] == sq[i - 1] ? lo[i - 1] : i;
    for (int i = 0; i < T && W > 0; i++) lo[i] = lo[i] > i - W + 1 ? lo[i] : i - W + 1;
#pragma omp parallel for schedule(dynamic, 16)
    for (long r = 0; r < (long)NH * T; r++) {
        const int h = (int)(r / T), i = (int)(r % T), g = h / (NH / KVH);
        const float slope = slopes ? slopes[h] : 0.0f, *q = x + (size_t)i * ld + (size_t)h * hs;
        const size_t at = ((size_t)b * NH + h) * T + i;
        const int sink = var && var->sinks;
        double m = sink ? var->sinks[h] : -INFINITY, sum = sink ? 1.0 : 0.0;
        if (!lse_out) memset(att + (size_t)r * T, 0, (size_t)T * sizeof *att);
        for (int j = lo[i]; j <= i; j++) {
            const float *k = x + (size_t)j * ld + (size_t)(NH + g) * hs;
            float dot = 0.0f;
            for (int d = 0; d < hs; d++) dot = fmaf(q[d], k[d], dot);
            float sj = scale * dot;
            if (cap > 0.0f) sj = cap * tanhf(sj / cap);
            if (slope != 0.0f) sj -= slope * (float)(i - j);
            if (!lse_out) att[(size_t)r * T + j] = expf(sj - lse[at]);
            else if (sj > m) sum = sum * exp(m - sj) + 1.0, m = sj;
            else sum += exp(sj - m);
        }
        if (lse_out) lse_out[at] = (float)(m + log(sum));
    }
}

void tcu_attention_forward(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv,
                           const float *alibi_slopes, const int32_t *seq, int B, int T, int NH,
                           int KVH, int hs, tcu_stream s) {
    tcu_attention_forward_var(out, lse, qkv, alibi_slopes, seq, NULL, B, T, NH, KVH, hs, s);
}

/* One sequence at a time (att temporaries of NH*T*T): out = round(CPU attention_forward of the
 * widened qkv, with var); lse[b,h,i] = log sum_{lo(i) <= j <= i} exp(s[i,j]) (+ the sink's
 * term; att_rows) */
void tcu_attention_forward_var(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv,
                               const float *alibi_slopes, const int32_t *seq,
                               const tsr_attn_var *var, int B, int T, int NH, int KVH, int hs,
                               tcu_stream s) {
    const char *what = "tcu_attention_forward";
    REQUIRE_RULE(what, tcu_rule_attention, B, T, NH, KVH, hs);
    REQUIRE(out && lse && qkv, what, "out, lse and qkv must not be NULL");
    tsr_attn_var vw;
    float *sk;
    var = emu_var(var, NH, &vw, &sk, what);
    REQUIRE(aligned16(qkv) && aligned16(out), what, "qkv and out must be 16-byte aligned");
    const size_t nx = (size_t)T * (NH + 2 * KVH) * hs, no = (size_t)T * NH * hs;
    float *x = emu_host_alloc(nx * sizeof *x, what), *o = emu_host_alloc(no * sizeof *o, what);
    float *att = emu_host_alloc((size_t)NH * T * T * sizeof *att, what);
    int *lo = emu_host_alloc((size_t)T * sizeof *lo, what);
    for (int b = 0; b < B; b++) {
        const int32_t *sq = seq ? seq + (size_t)b * T : NULL;
        emu_widen_into(x, qkv + b * nx, nx);
        cpu->attention_forward(o, att, x, alibi_slopes, sq, var, 1, T, NH, KVH, hs);
        emu_round_into(out + b * no, o, no);
        att_rows(lse, NULL, NULL, x, alibi_slopes, sq, var, lo, b, T, NH, KVH, hs);
    }
    free(lo), free(att), free(o), free(x), free(sk);
}

size_t tcu_attention_scratch_bytes(int B, int T, int NH, int KVH, int hs) {
    (void)KVH, (void)hs;
    return (size_t)B * NH * T * sizeof(float);
}

/* One sequence at a time: att = exp(s - lse) from the given lse (att_rows), the CPU
 * attention_backward into fp32 zeros (a key/value head's gradient summed over its query heads
 * there), dqkv (bf16) += that. out and scratch are not read (scratch must be given, as on the
 * GPU). */
void tcu_attention_backward(tsr_bf16 *dqkv, const tsr_bf16 *dout, const tsr_bf16 *qkv,
                            const tsr_bf16 *out, const float *lse, const float *alibi_slopes,
                            const int32_t *seq, void *scratch, int B, int T, int NH, int KVH,
                            int hs, tsr_grad_mode mode, tcu_stream s) {
    tcu_attention_backward_var(dqkv, dout, qkv, out, lse, alibi_slopes, seq, NULL, scratch, B, T,
                               NH, KVH, hs, mode, s);
}

/* The sink gradients as the kernel takes them: dsinks[h] += -sum_i exp(sink_h - lse[b,h,i]) D_i,
 * D_i = dout_i . out_i from the bf16 out (the CPU op's D is sum_j P dA, its fp32 out's), rows in
 * order; sinks widened, g (T, NH hs) sequence b's widened dout */
static void emu_sink_grads(float *dsinks, const float *sinks, const float *lse, const float *g,
                           const tsr_bf16 *out, int b, int T, int NH, int hs) {
    for (int h = 0; h < NH; h++) {
        float acc = 0.0f;
        for (int i = 0; i < T; i++) {
            const size_t r = (size_t)i * NH * hs + (size_t)h * hs;
            float D = 0.0f;
            for (int d = 0; d < hs; d++) D = fmaf(g[r + d], bf16_widen(out[r + d]), D);
            acc -= expf(sinks[h] - lse[((size_t)b * NH + h) * T + i]) * D;
        }
        dsinks[h] += acc;
    }
}

/* ... with var: the sink gradient as the kernel's (emu_sink_grads) into var->dsinks */
void tcu_attention_backward_var(tsr_bf16 *dqkv, const tsr_bf16 *dout, const tsr_bf16 *qkv,
                                const tsr_bf16 *out, const float *lse, const float *alibi_slopes,
                                const int32_t *seq, const tsr_attn_var *var, void *scratch, int B,
                                int T, int NH, int KVH, int hs, tsr_grad_mode mode, tcu_stream s) {
    const char *what = "tcu_attention_backward";
    REQUIRE_RULE(what, tcu_rule_attention, B, T, NH, KVH, hs);
    REQUIRE(dqkv && dout && qkv && out && lse, what,
            "dqkv, dout, qkv, out and lse must not be NULL");
    REQUIRE(aligned16(dqkv) && aligned16(dout) && aligned16(qkv) && aligned16(out), what,
            "dqkv, dout, qkv and out must be 16-byte aligned");
    REQUIRE(scratch != NULL, what, "scratch is NULL");
    tsr_attn_var vw;
    float *sk;
    var = emu_var(var, NH, &vw, &sk, what);
    float *dsinks = var && var->sinks ? var->dsinks : NULL;
    vw.dsinks = NULL; /* (var is &vw or NULL) */
    const size_t nx = (size_t)T * (NH + 2 * KVH) * hs, no = (size_t)T * NH * hs;
    float *x = emu_host_alloc(nx * sizeof *x, what), *g = emu_host_alloc(no * sizeof *g, what);
    float *dx = emu_host_alloc(nx * sizeof *dx, what);
    float *att = emu_host_alloc((size_t)NH * T * T * sizeof *att, what);
    int *lo = emu_host_alloc((size_t)T * sizeof *lo, what);
    for (int b = 0; b < B; b++) {
        const int32_t *sq = seq ? seq + (size_t)b * T : NULL;
        emu_widen_into(x, qkv + b * nx, nx);
        emu_widen_into(g, dout + b * no, no);
        att_rows(NULL, att, lse, x, alibi_slopes, sq, var, lo, b, T, NH, KVH, hs);
        memset(dx, 0, nx * sizeof *dx);
        cpu->attention_backward(dx, g, x, att, sq, var, 1, T, NH, KVH, hs);
        emu_grad_round_into(dqkv + b * nx, dx, nx, mode);
        if (dsinks) emu_sink_grads(dsinks, var->sinks, lse, g, out + b * no, b, T, NH, hs);
    }
    free(lo), free(att), free(dx), free(g), free(x), free(sk);
}

/* the real kernels' tiles: the emulator has one attention, whatever is asked (its sums have their
 * own order), and says so: 16 rows */
void tcu_attention_set_warp_rows(int rows) {
    REQUIRE(rows == 16 || rows == 32, "tcu_attention_set_warp_rows", "rows = %d: expected 16 or 32",
            rows);
}

int tcu_attention_warp_rows(int hs) {
    (void)hs;
    return 16;
}

/* ... and one dq: the fused one is not here, and it says so */
void tcu_attention_set_dq_fused(int on) {
    REQUIRE(on == 0 || on == 1, "tcu_attention_set_dq_fused", "on = %d: expected 0 or 1", on);
}

int tcu_attention_dq_fused(void) { return 0; }

/* ... and no wgmma kernels: never possible here (the SIMT build runs the real ones) */
void tcu_attention_set_wgmma(int on) {
    REQUIRE(on == 0 || on == 1, "tcu_attention_set_wgmma", "on = %d: expected 0 or 1", on);
}

int tcu_attention_wgmma(int hs) {
    (void)hs;
    return 0;
}

int tcu_attention_wgmma_possible(int hs) {
    (void)hs;
    return 0;
}
