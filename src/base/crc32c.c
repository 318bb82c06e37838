/* crc32c.c — CRC32C (Castagnoli): reflected polynomial 0x82F63B78, initial value and final xor
 * 0xFFFFFFFF, so tsr_crc32c(0, "123456789", 9) == 0xE3069283 and calls chain:
 * tsr_crc32c(tsr_crc32c(0, a, na), b, nb) == CRC of a followed by b.
 *
 * Two implementations that must agree bit for bit (tests/unit/test_data.c checks it):
 *   - the CPU's CRC32C instruction, 8 bytes per step, used when the CPU has it (runtime check):
 *     SSE4.2's crc32 on x86-64, the ARMv8 CRC extension's crc32c[bd] on aarch64 (HWCAP_CRC32:
 *     every Neoverse core, Grace included);
 *   - slicing-by-8 over eight 256-entry tables, the portable fallback.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "crc32c.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define TSR_CRC_X86 1
#define TSR_CRC_HW 1
#include <nmmintrin.h>
#define CRC_U8(c, b) _mm_crc32_u8(c, b)
#define CRC_U64(c, v) _mm_crc32_u64(c, v)
#define CRC_TARGET "sse4.2"
#elif defined(__aarch64__) && defined(__GNUC__)
#define TSR_CRC_ARM 1
#define TSR_CRC_HW 1
#include <arm_acle.h>
#include <sys/auxv.h>
#define CRC_U8(c, b) __crc32cb(c, b)
#define CRC_U64(c, v) __crc32cd((uint32_t)(c), v)
#define CRC_TARGET "+crc"
#endif

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc_table[8][256]; /* crc_table[k][b]: CRC of byte b followed by k zero bytes */
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static int crc_use_hw;

static void crc_init(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
        crc_table[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; b++)
        for (int k = 1; k < 8; k++)
            crc_table[k][b] = (crc_table[k - 1][b] >> 8) ^ crc_table[0][crc_table[k - 1][b] & 0xFF];
#ifdef TSR_CRC_X86
    __builtin_cpu_init();
    crc_use_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#elif defined(TSR_CRC_ARM)
    crc_use_hw = getauxval(AT_HWCAP) & HWCAP_CRC32 ? 1 : 0;
#endif
}

/* Raw (no pre/post inversion) slicing-by-8 update. */
static uint32_t crc_sw_raw(uint32_t c, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7u)) {
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
        n--;
    }
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
            crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
            crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return c;
}

#ifdef TSR_CRC_HW
__attribute__((target(CRC_TARGET))) static uint32_t crc_hw_raw(uint32_t c, const uint8_t *p,
                                                              size_t n) {
    while (n && ((uintptr_t)p & 7u)) {
        c = CRC_U8(c, *p++);
        n--;
    }
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = CRC_U64(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = CRC_U8(c, *p++);
    return c;
}
#endif

uint32_t tsr_crc32c_sw(uint32_t crc, const void *buf, size_t n) {
    pthread_once(&crc_once, crc_init);
    return ~crc_sw_raw(~crc, (const uint8_t *)buf, n);
}

int tsr_crc32c_hw(void) {
    pthread_once(&crc_once, crc_init);
    return crc_use_hw;
}

uint32_t tsr_crc32c(uint32_t crc, const void *buf, size_t n) {
    pthread_once(&crc_once, crc_init);
#ifdef TSR_CRC_HW
    if (crc_use_hw) return ~crc_hw_raw(~crc, (const uint8_t *)buf, n);
#endif
    return ~crc_sw_raw(~crc, (const uint8_t *)buf, n);
}
