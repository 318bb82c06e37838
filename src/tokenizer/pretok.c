/* pretok.c — GPT-2's pre-tokenisation without a regex library, plus the UTF-8 reader it uses, the
 * places where a long text may be cut (tokenizer_cut_before) and the end of the Hugging Face Split
 * patterns' whitespace run (tok_space_end).
 *
 * The reference is the JavaScript regex of npm gpt-3-encoder (flag u: it walks code points)
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * tried alternative by alternative at each position. Every code point falls in exactly one class
 * (letter L, number N, space S, other O), so at a position holding code point c:
 *   c == '\'' followed by s t m d / re ve ll    -> the contraction (case-sensitive)
 *   c == ' '  followed by L / N / O             -> the space plus the run of that class
 *   c in L / N / O                              -> the run of that class
 *   c in S: the run of S; at the end of text the whole run, else the run minus its last code
 *           point when that leaves one or more (\s+(?!\S)), else the single code point (\s+).
 * Classes come from unicode_tables.c (generated from node, so they match the reference's engine).
 */
#include <string.h>

#include "common.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"
#include "unicode_tables.h"

enum { CL_OTHER, CL_LETTER, CL_NUMBER, CL_SPACE };

size_t tsr_utf8_next(const uint8_t *p, size_t n, uint32_t *cp) {
    uint8_t b = p[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    uint32_t v;
    if (b >= 0xC2 && b <= 0xDF) need = 1, v = b & 0x1F;
    else if (b >= 0xE0 && b <= 0xEF) {
        need = 2, v = b & 0x0F;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3, v = b & 0x07;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        *cp = 0xFFFD; /* 80..C1, F5..FF: never valid as a lead byte */
        return 1;
    }
    size_t k = 1;
    for (; k <= need; k++) {
        if (k >= n) break;
        uint8_t c = p[k];
        if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
        v = (v << 6) | (c & 0x3F);
    }
    if (k <= need) {
        *cp = 0xFFFD; /* maximal subpart: the lead byte and the continuation bytes that fit */
        return k;
    }
    *cp = v;
    return need + 1;
}

size_t tok_space_end(const uint8_t *t, size_t n, size_t i, size_t j) {
    size_t len, last_nl = 0, last_start = i;
    uint32_t cp;
    for (size_t k = i; k < j; k += len) {
        len = tsr_utf8_next(t + k, n - k, &cp);
        if (cp == '\r' || cp == '\n') last_nl = k + 1;
        last_start = k;
    }
    if (last_nl) return last_nl;
    return j == n || last_start == i ? j : last_start;
}

uint8_t *tsr_utf8_sanitize(const uint8_t *text, size_t n, size_t *out_n) {
    size_t i = 0;
    uint32_t cp;
    /* find the first ill-formed subpart; valid text is not copied */
    while (i < n) {
        if (text[i] < 0x80) {
            i++;
            continue;
        }
        size_t l = tsr_utf8_next(text + i, n - i, &cp);
        if (cp == 0xFFFD && !(l == 3 && text[i] == 0xEF && text[i + 1] == 0xBF && text[i + 2] == 0xBD))
            break;
        i += l;
    }
    if (i >= n) return NULL;
    uint8_t *out = tsr_malloc(3 * n + 1); /* each byte becomes at most 3 */
    memcpy(out, text, i);
    size_t o = i;
    while (i < n) {
        size_t l = tsr_utf8_next(text + i, n - i, &cp);
        if (cp == 0xFFFD) {
            out[o++] = 0xEF, out[o++] = 0xBF, out[o++] = 0xBD;
        } else {
            memcpy(out + o, text + i, l);
            o += l;
        }
        i += l;
    }
    *out_n = o;
    return out;
}

size_t tokenizer_count_invalid_utf8(const uint8_t *text, size_t n) {
    size_t bad = 0;
    uint32_t cp;
    for (size_t i = 0; i < n;) {
        if (text[i] < 0x80) {
            i++;
            continue;
        }
        size_t l = tsr_utf8_next(text + i, n - i, &cp);
        bad += cp == 0xFFFD && !(l == 3 && text[i] == 0xEF && text[i + 1] == 0xBF && text[i + 2] == 0xBD);
        i += l;
    }
    return bad;
}

size_t tokenizer_cut_before(const uint8_t *text, size_t n, uint8_t c) {
    for (size_t q = n; q-- > 1;) {
        const uint8_t *hit = memrchr(text + 1, c, q);
        if (!hit) return 0;
        q = (size_t)(hit - text);
        uint8_t b = text[q - 1];
        if (tokenizer_ascii_alnum(b)) return q;
    }
    return 0;
}

static uint8_t ascii_class[128];
static int ascii_ready;

static int uc_class(uint32_t cp) {
    if (tsr_uc_in(&tsr_uc_letter, cp)) return CL_LETTER;
    if (tsr_uc_in(&tsr_uc_number, cp)) return CL_NUMBER;
    if (tsr_uc_in(&tsr_uc_space, cp)) return CL_SPACE;
    return CL_OTHER;
}

static void ascii_init(void) {
    /* idempotent, so concurrent first calls from several threads write the same bytes */
    if (__atomic_load_n(&ascii_ready, __ATOMIC_ACQUIRE)) return;
    for (uint32_t c = 0; c < 128; c++) ascii_class[c] = (uint8_t)uc_class(c);
    __atomic_store_n(&ascii_ready, 1, __ATOMIC_RELEASE);
}

/* Class and length of the code point at p (n >= 1 bytes left). */
static inline int next_class(const uint8_t *p, size_t n, size_t *len) {
    if (p[0] < 0x80) {
        *len = 1;
        return ascii_class[p[0]];
    }
    uint32_t cp;
    *len = tsr_utf8_next(p, n, &cp);
    return uc_class(cp);
}

/* End of the run of class cl starting at i. */
static size_t run_end(const uint8_t *t, size_t n, size_t i, int cl) {
    while (i < n) {
        if (t[i] < 0x80) {
            if (ascii_class[t[i]] != cl) break;
            i++;
            continue;
        }
        size_t l;
        if (next_class(t + i, n - i, &l) != cl) break;
        i += l;
    }
    return i;
}

void tokenizer_pretokenize(const uint8_t *t, size_t n,
                           void (*piece)(void *ctx, const uint8_t *p, size_t len), void *ctx) {
    ascii_init();
    size_t i = 0;
    while (i < n) {
        size_t l, end;
        int cl = next_class(t + i, n - i, &l);
        if (t[i] == '\'' && i + 1 < n) {
            uint8_t a = t[i + 1], b = i + 2 < n ? t[i + 2] : 0;
            size_t c = 0;
            if (a == 's' || a == 't' || a == 'm' || a == 'd') c = 2;
            else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) c = 3;
            if (c) {
                piece(ctx, t + i, c);
                i += c;
                continue;
            }
        }
        if (t[i] == ' ' && i + 1 < n) {
            size_t l2;
            int cl2 = next_class(t + i + 1, n - i - 1, &l2);
            if (cl2 != CL_SPACE) {
                end = run_end(t, n, i + 1 + l2, cl2);
                piece(ctx, t + i, end - i);
                i = end;
                continue;
            }
        }
        if (cl != CL_SPACE) {
            end = run_end(t, n, i + l, cl);
        } else {
            /* the run of spaces, remembering where its last code point starts */
            size_t last = i, j = i + l;
            while (j < n) {
                size_t l2;
                if (next_class(t + j, n - j, &l2) != CL_SPACE) break;
                last = j;
                j += l2;
            }
            end = (j == n || last == i) ? j : last;
        }
        piece(ctx, t + i, end - i);
        i = end;
    }
}
