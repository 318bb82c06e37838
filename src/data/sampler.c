/* sampler.c — the deterministic sample order: a keyed Feistel permutation with cycle walking.
 *
 * Position p in [0, n) of epoch e maps to sample sampler_permute(seed, e, n, p). The permutation
 * works on the smallest domain [0, 4^h) with 4^h >= n (h >= 1 bits per half): SAMPLER_ROUNDS
 * rounds of a balanced Feistel network
 *     (L, R) -> (R, L xor (F_r(R) & (2^h - 1))),   F_r(x) = mix64(k_r xor x)
 * with round keys k_r = mix64(b + (r + 1) * GOLDEN), b = mix64(mix64(seed xor SALT) xor epoch),
 * on x = L * 2^h + R.
 * Any Feistel network is a bijection of [0, 4^h); cycle walking (re-apply until the value is < n)
 * turns it into a bijection of [0, n). 4^h < 4n, so the expected number of walks is below 4.
 * mix64 is the SplitMix64 finaliser, written out here so the order depends on this file alone
 * (docs/data-format.md "Sample order"); changing any constant changes every run's data order.
 */
#include <stdint.h>

#include "data/data.h"

#define SAMPLER_ROUNDS 6
#define SAMPLER_SALT 0x7465737365726153ull /* "tesseraS" */
#define SAMPLER_GOLDEN 0x9E3779B97F4A7C15ull

static uint64_t mix64(uint64_t x) {
    x += SAMPLER_GOLDEN;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Bits per Feistel half: the smallest h >= 1 with 4^h >= n (n >= 2). */
static int half_bits(uint64_t n) {
    int bits = 64 - __builtin_clzll(n - 1); /* bits needed for n - 1 */
    int h = (bits + 1) / 2;
    return h < 1 ? 1 : h;
}

static uint64_t feistel(const uint64_t *keys, int h, uint64_t x) {
    uint64_t mask = (h >= 32) ? 0xFFFFFFFFull : ((1ull << h) - 1);
    uint64_t l = (x >> h) & mask, r = x & mask;
    for (int k = 0; k < SAMPLER_ROUNDS; k++) {
        uint64_t t = l ^ (mix64(keys[k] ^ r) & mask);
        l = r;
        r = t;
    }
    return (l << h) | r;
}

uint64_t sampler_permute(uint64_t seed, uint64_t epoch, uint64_t n, uint64_t p) {
    if (n <= 1) return 0;
    p %= n; /* callers pass p < n; keep the result in range regardless */
    uint64_t base = mix64(mix64(seed ^ SAMPLER_SALT) ^ epoch);
    uint64_t keys[SAMPLER_ROUNDS];
    for (int k = 0; k < SAMPLER_ROUNDS; k++) keys[k] = mix64(base + (uint64_t)(k + 1) * SAMPLER_GOLDEN);
    int h = half_bits(n);
    uint64_t x = p;
    do {
        x = feistel(keys, h, x);
    } while (x >= n);
    return x;
}

uint64_t sampler_index(const tsr_sampler *s, uint64_t g) {
    if (s->pairs && s->n >= 2) {
        tsr_sampler p = {s->n / 2, s->seed, s->shuffle, 0};
        return 2 * sampler_index(&p, g / 2) + g % 2;
    }
    uint64_t n = s->n ? s->n : 1;
    uint64_t epoch = g / n, p = g % n;
    if (!s->shuffle) return p;
    return sampler_permute(s->seed, epoch, n, p);
}
