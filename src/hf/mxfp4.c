/* mxfp4.c — MXFP4 (E2M1 elements, E8M0 block scales) to fp32 and bf16 (mxfp4.h). */
#include <math.h>
#include <string.h>

#include "hf/mxfp4.h"
#include "why.h"

/* E2M1: sign bit 3, exponent bits 1-2 (bias 1), mantissa bit 0; exponent 0 is subnormal (0, 0.5) */
static const float e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

int mxfp4_shapes(const int64_t *bshape, int bndim, const int64_t *sshape, int sndim,
                 int64_t *rows, int64_t *groups, char *why, size_t cap) {
    if (bndim < 2 || bshape[bndim - 1] != MXFP4_BLOCK_BYTES || sndim != bndim - 1) {
        return tsr_why(-1, why, cap,
                       "MXFP4 blocks must be (..., G, %d) uint8 and scales (..., G) with the "
                       "same leading dimensions; got %d and %d dimensions, the last block dimension %lld",
                       MXFP4_BLOCK_BYTES, bndim, sndim, bndim ? (long long)bshape[bndim - 1] : -1LL);
    }
    int64_t r = 1;
    for (int d = 0; d < sndim; d++) {
        if (sshape[d] != bshape[d] || sshape[d] < 0)
            return tsr_why(-1, why, cap,
                           "MXFP4 scales' dimension %d is %lld, the blocks' %lld", d,
                           (long long)sshape[d], (long long)bshape[d]);
        if (d < sndim - 1) {
            if (sshape[d] > 0 && r > INT64_MAX / MXFP4_BLOCK / sshape[d])
                return tsr_why(-1, why, cap, "MXFP4 tensor too large");
            r *= sshape[d];
        }
    }
    *rows = r;
    *groups = sshape[sndim - 1];
    if (*groups > 0 && r > INT64_MAX / MXFP4_BLOCK / *groups)
        return tsr_why(-1, why, cap, "MXFP4 tensor too large");
    return 0;
}

/* The sizes against rows x groups, and every scale byte. */
static int check(const uint8_t *scales, size_t nb, size_t ns, int64_t rows, int64_t groups,
                 size_t out_n, char *why, size_t cap) {
    if (rows < 0 || groups < 0 || (groups > 0 && (uint64_t)rows > SIZE_MAX / MXFP4_BLOCK / (uint64_t)groups))
        return tsr_why(-1, why, cap,
                       "MXFP4: %lld rows of %lld blocks: not a size", (long long)rows,
                       (long long)groups);
    size_t n = (size_t)rows * (size_t)groups;
    if (nb != n * MXFP4_BLOCK_BYTES || ns != n || out_n < n * MXFP4_BLOCK) {
        return tsr_why(-1, why, cap,
                       "MXFP4: %lld x %lld blocks need %zu block bytes, %zu scale bytes and "
                       "room for %zu values; got %zu, %zu and %zu", (long long)rows, (long long)groups,
                       n * MXFP4_BLOCK_BYTES, n, n * MXFP4_BLOCK, nb, ns, out_n);
    }
    for (size_t i = 0; i < n; i++)
        if (scales[i] == 255)
            return tsr_why(-1, why, cap, "MXFP4: scale %zu is 255, NaN in the OCP MX format", i);
    return 0;
}

int mxfp4_to_f32(const uint8_t *blocks, size_t nb, const uint8_t *scales, size_t ns, int64_t rows,
                 int64_t groups, float *out, size_t out_n, char *why, size_t cap) {
    if (check(scales, nb, ns, rows, groups, out_n, why, cap)) return -1;
    size_t n = (size_t)rows * (size_t)groups;
    for (size_t b = 0; b < n; b++) {
        const uint8_t *p = blocks + b * MXFP4_BLOCK_BYTES;
        float *o = out + b * MXFP4_BLOCK;
        int e = (int)scales[b] - 127;
        for (int j = 0; j < MXFP4_BLOCK_BYTES; j++) {
            o[2 * j] = ldexpf(e2m1[p[j] & 15], e);
            o[2 * j + 1] = ldexpf(e2m1[p[j] >> 4], e);
        }
        for (int i = 0; i < MXFP4_BLOCK; i++)
            if (isinf(o[i]))
                return tsr_why(-1, why, cap,
                               "MXFP4: block %zu: element %d times its scale 2^%d is past "
                               "float32's range", b, i, e);
    }
    return 0;
}

int mxfp4_to_bf16(const uint8_t *blocks, size_t nb, const uint8_t *scales, size_t ns, int64_t rows,
                  int64_t groups, uint16_t *out, size_t out_n, char *why, size_t cap) {
    if (check(scales, nb, ns, rows, groups, out_n, why, cap)) return -1;
    size_t n = (size_t)rows * (size_t)groups;
    float x[MXFP4_BLOCK];
    for (size_t b = 0; b < n; b++) { /* one block at a time through fp32: exact, then its top half */
        if (mxfp4_to_f32(blocks + b * MXFP4_BLOCK_BYTES, MXFP4_BLOCK_BYTES, scales + b, 1, 1, 1, x,
                         MXFP4_BLOCK, why, cap))
            return -1;
        for (int i = 0; i < MXFP4_BLOCK; i++) {
            uint32_t u;
            memcpy(&u, &x[i], sizeof u);
            out[b * MXFP4_BLOCK + (size_t)i] = (uint16_t)(u >> 16);
        }
    }
    return 0;
}
