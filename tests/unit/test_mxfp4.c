/* test_mxfp4.c — src/hf/mxfp4.c against values computed another way.
 *
 * The reference decodes each E2M1 code from its bit fields, (-1)^s x (e == 0 ? m / 2 :
 * 2^(e - 1) (1 + m / 2)), in double, times pow(2, scale - 127) — not the lookup table of
 * mxfp4.c — and a table of bytes worked out by hand pins the nibble order (low nibble = the even
 * element), the sign bit and the scale. Then the refusals of untrusted sizes: blocks, scales or
 * output of the wrong size, a scale of 255 (NaN in the OCP MX spec), shapes whose leading
 * dimensions differ or whose last is not 16, a product that overflows, a value past float32's
 * range (2 x 2^127).
 * Run: build/tests/test_mxfp4 (TAP).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hf/mxfp4.h"
#include "tap.h"

static double e2m1_fields(unsigned code) {
    unsigned s = code >> 3, e = (code >> 1) & 3, m = code & 1;
    double mag = e == 0 ? m * 0.5 : ldexp(1.0 + m * 0.5, (int)e - 1);
    return s ? -mag : mag;
}

/* Every code in both nibble positions at several scales, against the field decode. */
static void all_codes(void) {
    enum { R = 3, G = 8 };
    static uint8_t blocks[R * G * 16], scales[R * G];
    static float out[R * G * 32];
    static uint16_t bf[R * G * 32];
    const uint8_t sc[] = {0, 1, 100, 126, 127, 128, 140, 200, 250, 252};
    for (int i = 0; i < R * G * 16; i++) blocks[i] = (uint8_t)((i * 37 + 11) & 255);
    for (int i = 0; i < R * G; i++) scales[i] = sc[i % (int)sizeof sc];
    char why[256] = "";
    int rc = mxfp4_to_f32(blocks, sizeof blocks, scales, sizeof scales, R, G, out, R * G * 32, why, sizeof why);
    int bad = 0, seen = 0;
    for (int b = 0; b < R * G && !rc; b++)
        for (int i = 0; i < 32; i++) {
            uint8_t byte = blocks[b * 16 + i / 2];
            unsigned code = i % 2 ? byte >> 4 : byte & 15;
            double want = e2m1_fields(code) * pow(2.0, (double)scales[b] - 127.0);
            float got = out[b * 32 + i];
            if ((double)got != want || !signbit(got) != !signbit(want)) bad++;
            seen |= 1 << code;
        }
    tap_ok(rc == 0 && bad == 0 && seen == 0xffff, "fp32: %d values of all 16 codes at scales 2^-127 .. "
           "2^125 equal the bit-field decode (exact, signs of zero too): %d differ (%s)", R * G * 32,
           bad, why);
    rc = mxfp4_to_bf16(blocks, sizeof blocks, scales, sizeof scales, R, G, bf, R * G * 32, why, sizeof why);
    bad = 0;
    for (int k = 0; k < R * G * 32 && !rc; k++) {
        uint32_t u = (uint32_t)bf[k] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        if (memcmp(&f, &out[k], sizeof f) != 0) bad++;
    }
    tap_ok(rc == 0 && bad == 0, "bf16: every value is the fp32 one exactly (no rounding): %d differ", bad);
}

/* Bytes worked out by hand: one block at scale 127 (x1), one at 129 (x4), one at 0, one at 254. */
static void hand_table(void) {
    uint8_t blocks[4 * 16] = {0}, scales[4] = {127, 129, 0, 254};
    blocks[0] = 0x21;  /* low 1 = 0.5, high 2 = 1.0 */
    blocks[1] = 0x7F;  /* low F = -6, high 7 = 6 */
    blocks[2] = 0x98;  /* low 8 = -0, high 9 = -0.5 */
    blocks[3] = 0x3C;  /* low C = -2, high 3 = 1.5 */
    blocks[16] = 0x65; /* (3, 4) x 4 */
    blocks[32] = 0x01; /* 0.5 x 2^-127 = 2^-128, 0 */
    blocks[48] = 0x21; /* 0.5 x 2^127, 1 x 2^127: the largest finite at this scale */
    const struct { int at; double v; } want[] = {
        {0, 0.5}, {1, 1.0}, {2, -6.0}, {3, 6.0}, {4, -0.0}, {5, -0.5}, {6, -2.0}, {7, 1.5}, {8, 0.0},
        {32, 12.0}, {33, 16.0}, {34, 0.0}, {64, 0x1p-128}, {65, 0.0}, {96, 0x1p+126}, {97, 0x1p+127}};
    float out[4 * 32];
    char why[256] = "";
    int rc = mxfp4_to_f32(blocks, sizeof blocks, scales, 4, 4, 1, out, 4 * 32, why, sizeof why), bad = 0;
    for (size_t k = 0; k < sizeof want / sizeof want[0] && !rc; k++)
        if ((double)out[want[k].at] != want[k].v || !signbit(out[want[k].at]) != !signbit(want[k].v)) {
            bad++;
            tap_diag("element %d: %g, want %g", want[k].at, (double)out[want[k].at], want[k].v);
        }
    tap_ok(rc == 0 && bad == 0, "hand table: low nibble first, sign bit, -0, scales x1, x4, 2^-127, "
           "2^127 (%s)", why);
}

static void refusals(void) {
    uint8_t blocks[2 * 16] = {0}, scales[2] = {127, 127};
    float out[64];
    char why[256];
    int r1 = mxfp4_to_f32(blocks, 31, scales, 2, 2, 1, out, 64, why, sizeof why);
    int r2 = mxfp4_to_f32(blocks, 32, scales, 1, 2, 1, out, 64, why, sizeof why);
    int r3 = mxfp4_to_f32(blocks, 32, scales, 2, 2, 1, out, 63, why, sizeof why);
    int r4 = mxfp4_to_f32(blocks, 32, scales, 2, -1, 1, out, 64, why, sizeof why);
    int r5 = mxfp4_to_f32(blocks, 32, scales, 2, INT64_MAX / 2, 4, out, 64, why, sizeof why);
    tap_ok(r1 && r2 && r3 && r4 && r5, "refused: 31 block bytes, 1 scale byte, room for 63 values, "
           "-1 rows, a size that overflows (rc %d %d %d %d %d)", r1, r2, r3, r4, r5);
    scales[1] = 255;
    int r6 = mxfp4_to_f32(blocks, 32, scales, 2, 2, 1, out, 64, why, sizeof why);
    tap_ok(r6 && strstr(why, "255"), "refused: a scale of 255 (NaN in the OCP MX format): %s", why);
    scales[1] = 254;
    blocks[16] = 0x04; /* 2 x 2^127 = 2^128: past float32 */
    int r7 = mxfp4_to_f32(blocks, 32, scales, 2, 2, 1, out, 64, why, sizeof why);
    scales[1] = 253;
    blocks[16] = 0x60; /* 0, then 4 x 2^126 = 2^128 */
    int r8 = mxfp4_to_f32(blocks, 32, scales, 2, 2, 1, out, 64, why, sizeof why);
    tap_ok(r7 && r8 && strstr(why, "range"), "refused: 2 x 2^127 and 4 x 2^126, past float32 "
           "(non-finite weights): %s", why);
    int64_t b[4] = {4, 6, 90, 16}, s[3] = {4, 6, 90}, rows = 0, g = 0;
    int ok = mxfp4_shapes(b, 4, s, 3, &rows, &g, why, sizeof why);
    tap_ok(ok == 0 && rows == 24 && g == 90, "shapes (4, 6, 90, 16) + (4, 6, 90): rows 24 x 90 blocks "
           "(%lld x %lld)", (long long)rows, (long long)g);
    int64_t b2[3] = {4, 90, 8}, s2[3] = {4, 91, 1}, s3[2] = {4, 91};
    int64_t b3[3] = {INT64_MAX / 8, 1 << 20, 16}, s4[2] = {INT64_MAX / 8, 1 << 20};
    int x1 = mxfp4_shapes(b2, 3, s3, 2, &rows, &g, why, sizeof why);
    int x2 = mxfp4_shapes(b, 4, s2, 3, &rows, &g, why, sizeof why);
    int x3 = mxfp4_shapes(b, 4, s3, 2, &rows, &g, why, sizeof why);
    int x4 = mxfp4_shapes(b3, 3, s4, 2, &rows, &g, why, sizeof why);
    tap_ok(x1 && x2 && x3 && x4, "shapes refused: last block dimension 8, scales of other leading "
           "dimensions, other rank, a product past int64 (rc %d %d %d %d)", x1, x2, x3, x4);
}

int main(void) {
    tap_plan(8);
    all_codes();
    hand_table();
    refusals();
    return tap_done();
}
