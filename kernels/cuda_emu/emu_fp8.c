/* emu_fp8.c — the host emulator of cuda_fp8.cu (emu.h): the FP8 casts: amax, quantize,
 * dequantize. */
#include "emu.h"

void tcu_amax_bf16(float *amax, const tsr_bf16 *x, size_t n, tcu_stream s) {
    const char *what = "tcu_amax_bf16";
    REQUIRE(amax && (x || n == 0), what, "amax and x must not be NULL");
    uint32_t m = 0; /* magnitudes as fp32 bits: they order as the numbers, a NaN above all */
    for (size_t i = 0; i < n; i++) {
        const uint32_t a = tcu_fp8_f32_bits(bf16_widen(x[i])) & 0x7fffffffu;
        if (a > m) m = a;
    }
    *amax = tcu_fp8_bits_f32(m);
}

void tcu_fp8_quantize(tsr_fp8 *q, float *scale_inv, const tsr_bf16 *x, const float *amax,
                      size_t n, tcu_fp8_format fmt, tcu_stream s) {
    const char *what = "tcu_fp8_quantize";
    REQUIRE(q && scale_inv && x && amax, what, "q, scale_inv, x and amax must not be NULL");
    REQUIRE((unsigned)fmt < (unsigned)TCU_FP8_FORMAT_COUNT, what, "unknown FP8 format %d",
            (int)fmt);
    const float scale = tcu_fp8_scale(*amax, fmt);
    for (size_t i = 0; i < n; i++) q[i] = tcu_fp8_quantize_one(bf16_widen(x[i]), scale, fmt);
    *scale_inv = tcu_fp8_scale_inv(*amax, fmt);
}

void tcu_fp8_dequantize(tsr_bf16 *x, const tsr_fp8 *q, const float *scale_inv, size_t n,
                        tcu_fp8_format fmt, tcu_stream s) {
    const char *what = "tcu_fp8_dequantize";
    REQUIRE(x && q && scale_inv, what, "x, q and scale_inv must not be NULL");
    REQUIRE((unsigned)fmt < (unsigned)TCU_FP8_FORMAT_COUNT, what, "unknown FP8 format %d",
            (int)fmt);
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(tcu_fp8_dequantize_one(q[i], *scale_inv, fmt));
}
