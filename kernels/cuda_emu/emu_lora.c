/* emu_lora.c — the host emulator of cuda_lora.cu (emu.h): LoRA's adapter path. */
#include <stdlib.h>

#include "emu.h"

static const tsr_ops *const cpu = &tsr_cpu_ops;

/* the CUDA op's layout (tcu_index.h): the emulator keeps its own host temporaries but plans the
 * device's bytes */
size_t tcu_lora_scratch_bytes(int N, int IC, int OC, int R) {
    return tcu_lora_scratch_at(N, IC, OC, R, 3);
}

/* the CUDA op's rules (tcu_args.h), and the context its GEMMs need */
static void check_lora(const char *what, int N, int IC, int OC, int R, int ld, float p,
                       const void *scratch) {
    REQUIRE_RULE(what, tcu_rule_lora, N, IC, OC, R, ld, p, scratch);
    emu_need_context(what);
}

/* the CPU op on widened inputs: out's block = round(out + scale t B^T) (the kernel's one
 * rounding per element) */
void tcu_lora_forward(tsr_bf16 *out, int ld, const tsr_bf16 *inp, const float *A, const float *B,
                      float scale, float p, uint64_t key, int64_t row0, void *scratch, int N,
                      int IC, int OC, int R, tcu_stream s) {
    const char *what = "tcu_lora_forward";
    check_lora(what, N, IC, OC, R, ld, p, scratch);
    float *x = emu_widen(inp, (size_t)N * IC, what), *inc = emu_host_zeros((size_t)N * OC, what);
    float *t = emu_host_alloc((size_t)N * R * sizeof *t, what);
    float *xd = emu_host_alloc((size_t)N * IC * sizeof *xd, what);
    cpu->lora_forward(inc, OC, x, A, B, scale, p, key, row0, t, xd, N, IC, OC, R);
    for (int n = 0; n < N; n++)
        emu_add_round_into(out + (size_t)n * ld, inc + (size_t)n * OC, (size_t)OC);
    free(xd), free(t), free(inc), free(x);
}

/* the CPU op on widened inputs: dinp = round(dinp + its fp32 increment); dA, dB fp32 += */
void tcu_lora_backward(tsr_bf16 *dinp, float *dA, float *dB, const tsr_bf16 *dout, int ld,
                       const tsr_bf16 *inp, const float *A, const float *B, float scale, float p,
                       uint64_t key, int64_t row0, void *scratch, int N, int IC, int OC, int R,
                       tcu_stream s) {
    const char *what = "tcu_lora_backward";
    check_lora(what, N, IC, OC, R, ld, p, scratch);
    REQUIRE(dout != NULL && inp != NULL, what, "dout and inp must not be NULL");
    if (!dinp && !dA && !dB) return;
    float *x = emu_widen(inp, (size_t)N * IC, what);
    float *g = emu_host_alloc((size_t)N * OC * sizeof *g, what);
    for (int n = 0; n < N; n++)
        emu_widen_into(g + (size_t)n * OC, dout + (size_t)n * ld, (size_t)OC);
    float *dx = emu_host_zeros((size_t)N * IC, what);
    float *t = emu_host_alloc((size_t)N * R * sizeof *t, what);
    float *xd = emu_host_alloc((size_t)N * IC * sizeof *xd, what);
    cpu->lora_backward(dx, dA, dB, g, OC, x, A, B, scale, p, key, row0, t, xd, N, IC, OC, R);
    if (dinp) emu_add_round_into(dinp, dx, (size_t)N * IC);
    free(xd), free(t), free(dx), free(g), free(x);
}
