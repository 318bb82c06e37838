/* hf_o200k.c — the o200k family of Split patterns without a regex engine: gpt-oss's (o200k
 * "harmony") as transformers.js runs it, the same pattern as tiktoken runs it (o200k_base), and
 * Kimi K2's / Moonlight's (tiktoken; tiktoken_load.c).
 *
 * o200k's, as transformers.js runs it (a JavaScript regex with flag u, the contraction group
 * rewritten to '([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])):
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
 *
 * tiktoken runs the same pattern with the Rust regex crate: the same backtracking order, but its
 * own classes (tiktoken_tables.c, kept as their differences from node's: another Unicode version;
 * \s holds U+0085, not U+FEFF) and Unicode case folding in the contraction group ('s also matches
 * 'ſ, U+017F). Kimi K2's pattern (tokenization_kimi.py's pat_str; Moonlight's is the same) puts
 * [\p{Han}]+ first, takes Han out of both letter classes (&&[^\p{Han}]) and has no '/' after
 * punctuation:
 *   [\p{Han}]+|(1)|(2) with u, w minus Han|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|...
 * so a Han code point is HAN_L (a letter), HAN_N (a number: 〇) or HAN_O (a radical, a mark): a
 * run of them is one piece wherever it starts; inside \p{N}{1,3} a HAN_N counts as a number,
 * inside the run of punctuation a HAN_O as other.
 */
#include "tokenizer/hf_o200k_tables.h"
#include "tokenizer/hf_tok_internal.h"
#include "tokenizer/tiktoken_tables.h"
#include "tokenizer/tokenizer_internal.h"
#include "unicode_tables.h"

enum { OC_O, OC_N, OC_S, OC_UP, OC_LOW, OC_BOTH, OC_MARK, OC_HAN_L, OC_HAN_N, OC_HAN_O };

/* The ASCII classes, the same in both engines. */
static int ascii_class(uint32_t cp) {
    if (cp >= 'A' && cp <= 'Z') return OC_UP;
    if (cp >= 'a' && cp <= 'z') return OC_LOW;
    if (cp >= '0' && cp <= '9') return OC_N;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return OC_S;
    return OC_O;
}

#define IN(table, cp) tsr_uc_in(&table, cp)

/* transformers.js's classes (node's tables). */
static int js_class(uint32_t cp) {
    if (cp < 0x80) return ascii_class(cp);
    if (IN(tsr_uc_letter, cp)) {
        if (IN(tsr_o200k_upper, cp)) return OC_UP;
        if (IN(tsr_o200k_lower, cp)) return OC_LOW;
        return OC_BOTH;
    }
    if (IN(tsr_o200k_mark, cp)) return OC_MARK;
    if (IN(tsr_uc_number, cp)) return OC_N;
    if (IN(tsr_uc_space, cp)) return OC_S;
    return OC_O;
}

/* tiktoken's class name: node's table, with the code points of tsr_tt_name_diff flipped. */
#define TT_IN(node_table, name, cp) (IN(node_table, cp) != IN(tsr_tt_##name##_diff, cp))

/* tiktoken's classes (the Rust regex crate's tables); han: Kimi's pattern, Han apart. */
static int tt_class(uint32_t cp, int han) {
    if (cp < 0x80) return ascii_class(cp);
    int letter = TT_IN(tsr_uc_letter, letter, cp);
    if (han && IN(tsr_tt_han, cp))
        return letter ? OC_HAN_L : TT_IN(tsr_uc_number, number, cp) ? OC_HAN_N : OC_HAN_O;
    if (letter) {
        if (TT_IN(tsr_o200k_upper, upper, cp)) return OC_UP;
        return TT_IN(tsr_o200k_lower, lower, cp) ? OC_LOW : OC_BOTH;
    }
    if (TT_IN(tsr_o200k_mark, mark, cp)) return OC_MARK;
    if (TT_IN(tsr_uc_number, number, cp)) return OC_N;
    if (TT_IN(tsr_uc_space, space, cp)) return OC_S;
    return OC_O;
}

static int is_u(int cl) { return cl == OC_UP || cl == OC_BOTH || cl == OC_MARK; }
static int is_w(int cl) { return cl == OC_LOW || cl == OC_BOTH || cl == OC_MARK; }
static int is_num(int cl) { return cl == OC_N || cl == OC_HAN_N; }
static int is_other(int cl) { return cl == OC_O || cl == OC_MARK || cl == OC_HAN_O; }
static int is_han(int cl) { return cl == OC_HAN_L || cl == OC_HAN_N || cl == OC_HAN_O; }
static int is_s(int cl) { return cl == OC_S; }
static int is_crlf(uint32_t cp) { return cp == '\r' || cp == '\n'; }

/* Class of the code point at i (i < n) under flavor f, its byte length in *len and value in *cp. */
static int class_at(hf_o200k_flavor f, const uint8_t *t, size_t n, size_t i, size_t *len, uint32_t *cp) {
    *len = tsr_utf8_next(t + i, n - i, cp);
    return f == HF_O200K_JS ? js_class(*cp) : tt_class(*cp, f == HF_O200K_KIMI);
}

/* End of the run from i of code points whose class passes in(); *last_w: where the last w of
 * the run starts (SIZE_MAX: none). */
static size_t run_of(hf_o200k_flavor f, const uint8_t *t, size_t n, size_t i, int (*in)(int),
                     size_t *last_w) {
    size_t len;
    uint32_t cp;
    int cl;
    *last_w = SIZE_MAX;
    while (i < n && in(cl = class_at(f, t, n, i, &len, &cp))) {
        if (is_w(cl)) *last_w = i;
        i += len;
    }
    return i;
}

/* i plus the length of the contraction at i, if any: ASCII letters of any case, and for tiktoken
 * (Unicode case folding) U+017F (C5 BF) for s. */
static size_t contraction_end(hf_o200k_flavor f, const uint8_t *t, size_t n, size_t i) {
    if (i + 1 >= n || t[i] != '\'') return i;
    int a = t[i + 1] | 0x20, b = i + 2 < n ? t[i + 2] | 0x20 : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    if (f != HF_O200K_JS && t[i + 1] == 0xC5 && i + 2 < n && t[i + 2] == 0xBF) return i + 3;
    return i;
}

/* End of U*W+ (first) or U+W* (!first) from i, contraction included; 0 when it does not match. */
static size_t letters_end(hf_o200k_flavor f, const uint8_t *t, size_t n, size_t i, int first) {
    size_t last_w, skip, len;
    uint32_t cp;
    size_t e = run_of(f, t, n, i, is_u, &last_w);
    if (!first && e == i) return 0;
    int at_w = e < n && is_w(class_at(f, t, n, e, &len, &cp));
    if (at_w) e = run_of(f, t, n, e, is_w, &skip);
    else if (first && last_w == SIZE_MAX) return 0;
    else if (first) e = last_w + tsr_utf8_next(t + last_w, n - last_w, &cp);
    return contraction_end(f, t, n, e);
}

/* End of alternative (1) or (2) at i, whose code point is cp of class cl; 0: no match. */
static size_t letter_alt(hf_o200k_flavor f, const uint8_t *t, size_t n, size_t i, size_t len,
                         uint32_t cp, int cl, int first) {
    int prefix = !is_crlf(cp) && (cl == OC_S || is_other(cl));
    size_t e = prefix && i + len < n ? letters_end(f, t, n, i + len, first) : 0;
    if (!e && (is_u(cl) || is_w(cl))) e = letters_end(f, t, n, i, first);
    return e;
}

/* End of ` ?[^\s\p{L}\p{N}]+[\r\n/]*` ([\r\n]* for Kimi) at i; 0: no match. */
static size_t other_alt(hf_o200k_flavor f, const uint8_t *t, size_t n, size_t i, size_t len,
                        uint32_t cp, int cl) {
    size_t l2, skip;
    uint32_t cp2;
    size_t s = i;
    if (cp == ' ' && i + len < n && is_other(class_at(f, t, n, i + len, &l2, &cp2))) s = i + len;
    else if (!is_other(cl)) return 0;
    size_t e = run_of(f, t, n, s, is_other, &skip);
    while (e < n && (is_crlf(t[e]) || (t[e] == '/' && f != HF_O200K_KIMI))) e++;
    return e;
}

size_t hf_o200k_piece(hf_o200k_flavor f, const uint8_t *t, size_t n, size_t i) {
    size_t len, e, skip;
    uint32_t cp;
    int cl = class_at(f, t, n, i, &len, &cp);
    if (is_han(cl)) return run_of(f, t, n, i, is_han, &skip) - i;
    if ((e = letter_alt(f, t, n, i, len, cp, cl, 1)) || (e = letter_alt(f, t, n, i, len, cp, cl, 0)))
        return e - i;
    if (is_num(cl)) {
        size_t k = 0;
        for (e = i; e < n && k < 3 && is_num(class_at(f, t, n, e, &len, &cp)); k++) e += len;
        return e - i;
    }
    if ((e = other_alt(f, t, n, i, len, cp, cl))) return e - i;
    return tok_space_end(t, n, i, run_of(f, t, n, i, is_s, &skip)) - i; /* i is a \s */
}
