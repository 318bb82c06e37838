/* hf_nfc.c — Unicode NFC: canonical decomposition, canonical reordering, canonical composition
 * (UAX #15), with Hangul syllables done arithmetically and everything else from hf_nfc_tables.c.
 * Quick path: text whose code points are all below U+0300 is NFC already (none of them decomposes,
 * has a combining class or composes with what precedes it). */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer/hf_nfc.h"
#include "tokenizer/tokenizer_internal.h"

enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7,
       L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

static long find_row(const uint32_t *rows, uint32_t n, size_t width, uint32_t cp) {
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2, v = rows[mid * width];
        if (v == cp) return (long)mid;
        if (v < cp) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

static uint32_t ccc(uint32_t cp) {
    if (cp < 0x300) return 0;
    long r = find_row(&hf_nfc_ccc[0][0], hf_nfc_ccc_n, 2, cp);
    return r < 0 ? 0 : hf_nfc_ccc[r][1];
}

static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE &&
        b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    uint32_t lo = 0, hi = hf_nfc_comp_n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const uint32_t *r = hf_nfc_comp[mid];
        if (r[0] == a && r[1] == b) return r[2];
        if (r[0] < a || (r[0] == a && r[1] < b)) lo = mid + 1;
        else hi = mid;
    }
    return UINT32_MAX;
}

typedef struct cpbuf {
    uint32_t *v;
    size_t n, cap;
} cpbuf;

static void put(cpbuf *b, uint32_t cp) {
    if (b->n == b->cap) b->v = tsr_realloc(b->v, (b->cap = b->cap ? 2 * b->cap : 256) * sizeof *b->v);
    b->v[b->n++] = cp;
}

static void decompose(cpbuf *b, uint32_t cp) {
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        uint32_t s = cp - S_BASE;
        put(b, L_BASE + s / N_COUNT);
        put(b, V_BASE + (s % N_COUNT) / T_COUNT);
        if (s % T_COUNT) put(b, T_BASE + s % T_COUNT);
        return;
    }
    long r = cp < 0xC0 ? -1 : find_row(&hf_nfc_decomp[0][0], hf_nfc_decomp_n, 3, cp);
    if (r < 0) {
        put(b, cp);
        return;
    }
    for (uint32_t k = 0; k < hf_nfc_decomp[r][2]; k++) put(b, hf_nfc_decomp_pool[hf_nfc_decomp[r][1] + k]);
}

/* canonical reordering: a stable insertion sort of each run of marks by combining class */
static void reorder(cpbuf *b) {
    for (size_t i = 1; i < b->n; i++) {
        uint32_t c = b->v[i], cc = ccc(c);
        if (cc == 0) continue;
        size_t j = i;
        while (j > 0 && ccc(b->v[j - 1]) > cc) b->v[j] = b->v[j - 1], j--;
        b->v[j] = c;
    }
}

static void compose_all(cpbuf *b) {
    if (b->n == 0) return;
    size_t starter = 0, out = 1;
    uint32_t last = ccc(b->v[0]);
    int have_starter = last == 0;
    if (last) last = 256; /* a leading mark blocks */
    for (size_t i = 1; i < b->n; i++) {
        uint32_t c = b->v[i], cc = ccc(c), m;
        if (have_starter && (last < cc || last == 0) && (m = compose(b->v[starter], c)) != UINT32_MAX) {
            b->v[starter] = m;
            continue;
        }
        if (cc == 0) starter = out, have_starter = 1;
        last = cc;
        b->v[out++] = c;
    }
    b->n = out;
}

uint8_t *hf_nfc(const uint8_t *t, size_t n, size_t *out_n) {
    size_t i = 0;
    while (i < n && t[i] < 0xCC) i++; /* lead bytes below 0xCC start code points below U+0300 */
    if (i == n) return NULL;
    cpbuf b = {0};
    for (size_t k = 0; k < n;) {
        uint32_t cp;
        k += tsr_utf8_next(t + k, n - k, &cp);
        decompose(&b, cp);
    }
    reorder(&b);
    compose_all(&b);
    uint8_t *o = tsr_malloc(4 * b.n + 1);
    size_t len = 0;
    for (size_t k = 0; k < b.n; k++) {
        uint32_t c = b.v[k];
        if (c < 0x80) o[len++] = (uint8_t)c;
        else if (c < 0x800) o[len++] = (uint8_t)(0xC0 | c >> 6), o[len++] = (uint8_t)(0x80 | (c & 0x3F));
        else if (c < 0x10000) {
            o[len++] = (uint8_t)(0xE0 | c >> 12);
            o[len++] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
            o[len++] = (uint8_t)(0x80 | (c & 0x3F));
        } else {
            o[len++] = (uint8_t)(0xF0 | c >> 18);
            o[len++] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
            o[len++] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
            o[len++] = (uint8_t)(0x80 | (c & 0x3F));
        }
    }
    free(b.v);
    if (len == n && memcmp(o, t, n) == 0) {
        free(o);
        return NULL;
    }
    *out_n = len;
    return o;
}
