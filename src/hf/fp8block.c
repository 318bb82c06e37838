/* fp8block.c — block-scaled E4M3 to fp32 (fp8block.h). */
#include "hf/fp8block.h"

#include <math.h>

#include "why.h"

float fp8_e4m3_to_f32(uint8_t b) {
    const int e = (b >> 3) & 15, mant = b & 7;
    const float sign = b & 0x80 ? -1.0f : 1.0f;
    if (e == 15 && mant == 7) return NAN;
    if (e == 0) return sign * ldexpf((float)mant, -9); /* subnormal: m/8 x 2^-6 */
    return sign * ldexpf((float)(8 + mant), e - 10);   /* (1 + m/8) x 2^(e - 7) */
}

/* ceil(n / b), the blocks along a dimension of n */
static int64_t blocks(int64_t n, int64_t b) { return (n + b - 1) / b; }

int fp8_block_shape(int64_t rows, int64_t cols, int64_t br, int64_t bc, const int64_t *sshape,
                    int sndim, char *why, size_t cap) {
    if (rows < 0 || cols < 0 || br < 1 || bc < 1)
        return tsr_why(-1, why, cap, "FP8: %lld x %lld in blocks of %lld x %lld: not a size",
                       (long long)rows, (long long)cols, (long long)br, (long long)bc);
    const int64_t r = blocks(rows, br), c = blocks(cols, bc);
    if (sndim == 2 && sshape[0] == r && sshape[1] == c) return 0;
    return tsr_why(-1, why, cap, "FP8: a %lld x %lld weight in blocks of %lld x %lld needs scales "
                   "[%lld, %lld] (ceil(rows / %lld), ceil(cols / %lld))", (long long)rows,
                   (long long)cols, (long long)br, (long long)bc, (long long)r, (long long)c,
                   (long long)br, (long long)bc);
}

/* every scale finite */
static int scales_ok(const float *s, size_t ns, int64_t cb, char *why, size_t cap) {
    for (size_t i = 0; i < ns; i++)
        if (!isfinite(s[i]))
            return tsr_why(-1, why, cap, "FP8: scale [%lld, %lld] is %g, not a finite number",
                           (long long)(i / (size_t)cb), (long long)(i % (size_t)cb), (double)s[i]);
    return 0;
}

int fp8_block_to_f32(const uint8_t *w, size_t nw, const float *s, size_t ns, int64_t rows,
                     int64_t cols, int64_t br, int64_t bc, float *out, size_t out_n, char *why,
                     size_t cap) {
    int64_t sh[2] = {br > 0 ? blocks(rows, br) : 0, bc > 0 ? blocks(cols, bc) : 0};
    if (fp8_block_shape(rows, cols, br, bc, sh, 2, why, cap)) return -1;
    const size_t n = (size_t)rows * (size_t)cols;
    if (nw != n || ns != (size_t)(sh[0] * sh[1]) || out_n < n)
        return tsr_why(-1, why, cap, "FP8: %lld x %lld needs %zu codes, %lld scales and room for "
                       "%zu values; got %zu, %zu and %zu", (long long)rows, (long long)cols, n,
                       (long long)(sh[0] * sh[1]), n, nw, ns, out_n);
    if (scales_ok(s, ns, sh[1], why, cap)) return -1;
    for (size_t i = 0; i < n; i++) {
        const int64_t r = (int64_t)(i / (size_t)cols), c = (int64_t)(i % (size_t)cols);
        out[i] = fp8_e4m3_to_f32(w[i]) * s[(r / br) * sh[1] + c / bc];
        if (!isfinite(out[i]))
            return tsr_why(-1, why, cap, "FP8: element [%lld, %lld] (code 0x%02x) times its "
                           "scale is %g", (long long)r, (long long)c, w[i], (double)out[i]);
    }
    return 0;
}
