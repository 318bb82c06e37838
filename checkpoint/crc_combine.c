/* crc_combine.c — CRC32C of a concatenation from the CRCs of its parts.
 *
 * crc(A||B) = shift(crc(A), len(B)) ^ crc(B), where shift() runs the CRC register over len(B) zero
 * bytes without the pre/post inversion. Running over zeros is linear over GF(2), so it is a 32x32
 * bit matrix; the matrix for 2^k zero bits is squared repeatedly and applied for the set bits of
 * len(B) (zlib's crc32_combine, here for the reflected Castagnoli polynomial 0x82F63B78). This lets
 * every rank CRC its own slice of a tensor and the slices be combined into the whole tensor's CRC.
 */
#include "ckpt.h"

#define CRC32C_POLY 0x82F63B78u

/* mat is 32 columns: mat[i] = image of bit i. */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    for (int i = 0; vec; i++, vec >>= 1)
        if (vec & 1) sum ^= mat[i];
    return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat) {
    for (int i = 0; i < 32; i++) sq[i] = gf2_times(mat, mat[i]);
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    if (len_b == 0) return crc_a;
    uint32_t even[32], odd[32];
    odd[0] = CRC32C_POLY; /* operator for one zero bit */
    for (int i = 1; i < 32; i++) odd[i] = 1u << (i - 1);
    gf2_square(even, odd); /* two zero bits */
    gf2_square(odd, even); /* four zero bits */
    /* apply len_b zero bytes: first squaring gives one byte (8 bits) */
    do {
        gf2_square(even, odd);
        if (len_b & 1) crc_a = gf2_times(even, crc_a);
        len_b >>= 1;
        if (!len_b) break;
        gf2_square(odd, even);
        if (len_b & 1) crc_a = gf2_times(odd, crc_a);
        len_b >>= 1;
    } while (len_b);
    return crc_a ^ crc_b;
}
