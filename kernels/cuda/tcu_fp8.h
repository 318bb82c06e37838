/* tcu_fp8.h — the FP8 formats (E4M3, E5M2) and tensorwise scaling, one definition for the host
 * (the emulator, kernels/cuda_emu/) and the device (kernels/cuda/cuda_fp8.cu): C and CUDA C++.
 *
 * The formats (the OCP 8-bit floating point specification, NVIDIA's __nv_fp8_e4m3 / _e5m2):
 *   - E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinity; NaN is S.1111.111
 *     (0x7f, 0xff); largest finite 0x7e = 1.75 * 2^8 = 448; subnormals m/8 * 2^-6 (smallest
 *     2^-9);
 *   - E5M2: sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like: infinity S.11111.00
 *     (0x7c, 0xfc), NaN S.11111.{01,10,11}; largest finite 0x7b = 1.75 * 2^15 = 57344;
 *     subnormals m/4 * 2^-14 (smallest 2^-16).
 * Encoding from fp32 (tcu_fp8_encode) rounds to nearest, ties to even, as PTX's cvt.rn does. With
 * saturation (sat = 1: PTX's .satfinite, cuda_fp8.h's __NV_SATFINITE, what transformer-engine's
 * casts and cuBLASLt's FP8 outputs use) a magnitude that rounds past the largest finite value, and
 * an infinity, become the largest finite value of their sign; without it they become NaN (E4M3)
 * or infinity (E5M2). A NaN becomes 0x7f in both formats (cuda_fp8.h's canonical NaN: the sign is
 * dropped). Zero keeps its sign; magnitudes at or under half the smallest subnormal become zero.
 *
 * Tensorwise current scaling (tcu_fp8_scale): a tensor x whose largest magnitude is amax is stored
 * as q = encode(x * scale), scale = fp8_max / amax (fp32 division), and read as
 * decode(q) * scale_inv, scale_inv = 1 / scale (fp32 division). amax = 0 (all zeros): scale 1. A
 * non-finite amax (a NaN or an infinity in the tensor) gives scale 1 and scale_inv NaN, so that
 * every product made from the tensor is NaN and the loss shows it (saturation alone would hide an
 * infinity); a quotient past fp32's range (amax tiny) is capped at FLT_MAX.
 * Every function is pure integer and IEEE fp32 arithmetic (no fused multiply-add, no fast-math
 * intrinsics), so the host and the device give the same bits.
 */
#ifndef TSR_TCU_FP8_H
#define TSR_TCU_FP8_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__) || defined(TCU_SIMT)
#define TCU_FP8_FN static __host__ __device__ inline
#else
#define TCU_FP8_FN static inline
#endif

typedef uint8_t tsr_fp8; /* the bits of one E4M3 or E5M2 value */
typedef enum { TCU_FP8_E4M3 = 0, TCU_FP8_E5M2 = 1, TCU_FP8_FORMAT_COUNT } tcu_fp8_format;

#define TCU_FP8_E4M3_MAX 448.0f
#define TCU_FP8_E5M2_MAX 57344.0f
#define TCU_FP8_NAN 0x7fu /* what a NaN encodes to, in both formats */

TCU_FP8_FN float tcu_fp8_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

TCU_FP8_FN uint32_t tcu_fp8_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* the format's largest finite value */
TCU_FP8_FN float tcu_fp8_max(tcu_fp8_format fmt) {
    return fmt == TCU_FP8_E4M3 ? TCU_FP8_E4M3_MAX : TCU_FP8_E5M2_MAX;
}

/* FP8 bits -> fp32, exact (every FP8 value is an fp32 value). */
TCU_FP8_FN float tcu_fp8_decode(tsr_fp8 q, tcu_fp8_format fmt) {
    const int m_bits = fmt == TCU_FP8_E4M3 ? 3 : 2, bias = fmt == TCU_FP8_E4M3 ? 7 : 15;
    const uint32_t sign = (uint32_t)(q >> 7) << 31, mag = q & 0x7fu;
    const uint32_t e = mag >> m_bits, m = mag & ((1u << m_bits) - 1u);
    if (fmt == TCU_FP8_E4M3 && mag == 0x7fu) return tcu_fp8_bits_f32(sign | 0x7fc00000u);
    if (fmt == TCU_FP8_E5M2 && e == 31u)
        return tcu_fp8_bits_f32(sign | (m ? 0x7fc00000u : 0x7f800000u));
    if (e == 0) { /* subnormal or zero: m units of 2^(1 - bias - m_bits), a power of two */
        const float unit = fmt == TCU_FP8_E4M3 ? 0x1p-9f : 0x1p-16f;
        return tcu_fp8_bits_f32(sign | tcu_fp8_f32_bits((float)m * unit));
    }
    return tcu_fp8_bits_f32(sign | ((e - (uint32_t)bias + 127u) << 23) | (m << (23 - m_bits)));
}

/* fp32 -> FP8 bits, round to nearest even; sat: saturate to the largest finite value (see the
 * top). */
TCU_FP8_FN tsr_fp8 tcu_fp8_encode(float x, tcu_fp8_format fmt, int sat) {
    const int m_bits = fmt == TCU_FP8_E4M3 ? 3 : 2, bias = fmt == TCU_FP8_E4M3 ? 7 : 15;
    const uint32_t maxcode = fmt == TCU_FP8_E4M3 ? 0x7eu : 0x7bu;
    const uint32_t over = sat ? maxcode : fmt == TCU_FP8_E4M3 ? 0x7fu : 0x7cu;
    const uint32_t u = tcu_fp8_f32_bits(x), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (tsr_fp8)TCU_FP8_NAN;
    if (a == 0x7f800000u) return (tsr_fp8)(sign | over);
    uint32_t code;
    if (a < (uint32_t)(128 - bias) << 23) { /* under the smallest normal, 2^(1 - bias) */
        /* in units of the smallest subnormal (a power-of-two scaling: exact); the rounded count
         * is the code itself, 2^m_bits being the smallest normal's */
        const float units = tcu_fp8_bits_f32(a) * (fmt == TCU_FP8_E4M3 ? 0x1p9f : 0x1p16f);
        const uint32_t t = (uint32_t)units; /* truncated; units < 2^m_bits + 1 */
        const float rest = units - (float)t; /* exact */
        code = t + (rest > 0.5f || (rest == 0.5f && (t & 1u)));
    } else {
        const int shift = 23 - m_bits;
        const uint32_t r = a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u);
        code = (r >> shift) - ((uint32_t)(127 - bias) << m_bits);
        if (code > maxcode) code = over;
    }
    return (tsr_fp8)(sign | code);
}

/* the tensorwise scale of a tensor whose largest magnitude is amax (see the top) */
TCU_FP8_FN float tcu_fp8_scale(float amax, tcu_fp8_format fmt) {
    const uint32_t a = tcu_fp8_f32_bits(amax) & 0x7fffffffu;
    if (a == 0 || a >= 0x7f800000u) return 1.0f;
    const float s = tcu_fp8_max(fmt) / tcu_fp8_bits_f32(a);
    return tcu_fp8_f32_bits(s) >= 0x7f800000u ? 0x1.fffffep127f : s;
}

/* the scale's inverse, the factor that reads the stored values back (see the top) */
TCU_FP8_FN float tcu_fp8_scale_inv(float amax, tcu_fp8_format fmt) {
    const uint32_t a = tcu_fp8_f32_bits(amax) & 0x7fffffffu;
    if (a >= 0x7f800000u) return tcu_fp8_bits_f32(0x7fc00000u);
    return 1.0f / tcu_fp8_scale(amax, fmt);
}

/* one element quantised: encode(x * scale) with saturation */
TCU_FP8_FN tsr_fp8 tcu_fp8_quantize_one(float x, float scale, tcu_fp8_format fmt) {
    const float y = x * scale; /* one fp32 rounding, the same on host and device */
    return tcu_fp8_encode(y, fmt, 1);
}

/* one element read back: decode(q) * scale_inv (one fp32 rounding; the caller rounds to its
 * storage type, bf16 to nearest even in tcu_fp8_dequantize) */
TCU_FP8_FN float tcu_fp8_dequantize_one(tsr_fp8 q, float scale_inv, tcu_fp8_format fmt) {
    return tcu_fp8_decode(q, fmt) * scale_inv;
}

#endif
