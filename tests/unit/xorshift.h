/* xorshift.h — the unit tests' random numbers (header-only, like tap.h): xorshift64*, whose state a
 * test seeds itself, so a test needs nothing external and draws the same numbers everywhere. */
#ifndef TSR_XORSHIFT_H
#define TSR_XORSHIFT_H

#include <stdint.h>

/* the next 64 random bits of the generator whose state is *s (never 0) */
static inline uint64_t xorshift64s(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

#endif
