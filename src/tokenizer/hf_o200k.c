/* hf_o200k.c — gpt-oss's (o200k "harmony") Split pattern without a regex engine.
 *
 * The reference is transformers.js, which runs it as a JavaScript regex with flag u, the
 * contraction group rewritten to '([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]):
 *   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|..)?  (1)
 *   |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|..)? (2)
 *   |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Code points fall in seven classes: UP (Lu Lt), LOW (Ll), BOTH (Lm Lo), MARK (M: not a letter),
 * N, S (\s), O. "u" is UP BOTH MARK ([\p{Lu}..\p{M}]), "w" is LOW BOTH MARK; the prefix P is any
 * code point but \r \n, letters and numbers (so O, S, MARK).
 * U*W+ from t, with backtracking: U* takes the run of u to e; when e holds a w (LOW) W+ takes the
 * run of w from e; else U* gives back until W+ can start: at the last w of the run, which W+
 * takes alone (what follows it in the run is UP). No w in the run or at e: no match.
 * U+W* from t: the run of u (at least one), then the run of w.
 * At each position the alternatives are tried in order, each with its prefix taken first (when
 * the code point is a P) and then without (a MARK is a P and also u/w): (1) with, (1) without,
 * (2) with, (2) without; then N{1,3}; then [' '] a run of O/MARK and a run of \r \n /; then the
 * whitespace rules of Llama 3's pattern (hf_pretok.c). Either letter alternative ends with a
 * contraction when one follows.
 */
#include "tokenizer/hf_o200k_tables.h"
#include "tokenizer/hf_tok_internal.h"
#include "tokenizer/tokenizer_internal.h"
#include "unicode_tables.h"

enum { OC_O, OC_N, OC_S, OC_UP, OC_LOW, OC_BOTH, OC_MARK };

static int o_class(uint32_t cp) {
    if (cp < 0x80) {
        if (cp >= 'A' && cp <= 'Z') return OC_UP;
        if (cp >= 'a' && cp <= 'z') return OC_LOW;
        if (cp >= '0' && cp <= '9') return OC_N;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return OC_S;
        return OC_O;
    }
    if (tsr_uc_in_ranges(tsr_uc_letter, tsr_uc_letter_n, cp)) {
        if (tsr_uc_in_ranges(tsr_o200k_upper, tsr_o200k_upper_n, cp)) return OC_UP;
        if (tsr_uc_in_ranges(tsr_o200k_lower, tsr_o200k_lower_n, cp)) return OC_LOW;
        return OC_BOTH;
    }
    if (tsr_uc_in_ranges(tsr_o200k_mark, tsr_o200k_mark_n, cp)) return OC_MARK;
    if (tsr_uc_in_ranges(tsr_uc_number, tsr_uc_number_n, cp)) return OC_N;
    if (tsr_uc_in_ranges(tsr_uc_space, tsr_uc_space_n, cp)) return OC_S;
    return OC_O;
}

static int is_u(int cl) { return cl == OC_UP || cl == OC_BOTH || cl == OC_MARK; }
static int is_w(int cl) { return cl == OC_LOW || cl == OC_BOTH || cl == OC_MARK; }
static int is_crlf(uint32_t cp) { return cp == '\r' || cp == '\n'; }

/* Class of the code point at i (i < n), its byte length in *len and value in *cp. */
static int class_at(const uint8_t *t, size_t n, size_t i, size_t *len, uint32_t *cp) {
    *len = tsr_utf8_next(t + i, n - i, cp);
    return o_class(*cp);
}

/* End of the run from i of code points whose class passes in(); *last_w: where the last w of
 * the run starts (SIZE_MAX: none). */
static size_t run_of(const uint8_t *t, size_t n, size_t i, int (*in)(int), size_t *last_w) {
    size_t len;
    uint32_t cp;
    int cl;
    *last_w = SIZE_MAX;
    while (i < n && in(cl = class_at(t, n, i, &len, &cp))) {
        if (is_w(cl)) *last_w = i;
        i += len;
    }
    return i;
}

/* i plus the length of the contraction at i, if any (ASCII, any case). */
static size_t contraction_end(const uint8_t *t, size_t n, size_t i) {
    if (i + 1 >= n || t[i] != '\'') return i;
    int a = t[i + 1] | 0x20, b = i + 2 < n ? t[i + 2] | 0x20 : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return i;
}

/* End of U*W+ (first) or U+W* (!first) from i, contraction included; 0 when it does not match. */
static size_t letters_end(const uint8_t *t, size_t n, size_t i, int first) {
    size_t last_w, skip, len;
    uint32_t cp;
    size_t e = run_of(t, n, i, is_u, &last_w);
    if (!first && e == i) return 0;
    int at_w = e < n && is_w(class_at(t, n, e, &len, &cp));
    if (at_w) e = run_of(t, n, e, is_w, &skip);
    else if (first && last_w == SIZE_MAX) return 0;
    else if (first) e = last_w + tsr_utf8_next(t + last_w, n - last_w, &cp);
    return contraction_end(t, n, e);
}

/* End of alternative (1) or (2) at i, whose code point is cp of class cl; 0: no match. */
static size_t letter_alt(const uint8_t *t, size_t n, size_t i, size_t len, uint32_t cp, int cl,
                         int first) {
    int prefix = !is_crlf(cp) && (cl == OC_O || cl == OC_S || cl == OC_MARK);
    size_t e = prefix && i + len < n ? letters_end(t, n, i + len, first) : 0;
    if (!e && (is_u(cl) || is_w(cl))) e = letters_end(t, n, i, first);
    return e;
}

static int is_other(int cl) { return cl == OC_O || cl == OC_MARK; }

/* End of ` ?[^\s\p{L}\p{N}]+[\r\n/]*` at i; 0: no match. */
static size_t other_alt(const uint8_t *t, size_t n, size_t i, size_t len, uint32_t cp, int cl) {
    size_t l2, skip;
    uint32_t cp2;
    size_t s = i;
    if (cp == ' ' && i + len < n && is_other(class_at(t, n, i + len, &l2, &cp2))) s = i + len;
    else if (!is_other(cl)) return 0;
    size_t e = run_of(t, n, s, is_other, &skip);
    while (e < n && (is_crlf(t[e]) || t[e] == '/')) e++;
    return e;
}

/* End of the whitespace alternatives at i (a \s): \s*[\r\n]+ | \s+(?!\S) | \s+. */
static size_t space_alt(const uint8_t *t, size_t n, size_t i) {
    size_t len, j = i, last_nl = 0, last_start = i;
    uint32_t cp;
    while (j < n && class_at(t, n, j, &len, &cp) == OC_S) {
        if (is_crlf(cp)) last_nl = j + 1;
        last_start = j;
        j += len;
    }
    if (last_nl) return last_nl;
    if (j == n || last_start == i) return j;
    return last_start;
}

size_t hf_o200k_piece(const uint8_t *t, size_t n, size_t i) {
    size_t len, e;
    uint32_t cp;
    int cl = class_at(t, n, i, &len, &cp);
    if ((e = letter_alt(t, n, i, len, cp, cl, 1)) || (e = letter_alt(t, n, i, len, cp, cl, 0)))
        return e - i;
    if (cl == OC_N) {
        size_t k = 0;
        for (e = i; e < n && k < 3 && class_at(t, n, e, &len, &cp) == OC_N; k++) e += len;
        return e - i;
    }
    if ((e = other_alt(t, n, i, len, cp, cl))) return e - i;
    return space_alt(t, n, i) - i;
}
