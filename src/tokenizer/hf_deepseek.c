/* hf_deepseek.c — DeepSeek-V3's pre-tokenizer without a regex engine: a Sequence of three Splits
 * (each Isolated), then ByteLevel. transformers.js applies each Split to every piece the one
 * before it gave (PreTokenizerSequence), running its pattern as a JavaScript regex with flag u and
 * keeping the text between two matches as a piece of its own (regexSplit):
 *   1. \p{N}{1,3}                              runs of numbers, cut every 3 code points
 *   2. [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+  runs of CJK ideographs, hiragana, katakana
 *   3. [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+   (A) ASCII punctuation + ASCII letters
 *      |[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+                (B) a word, one code point before it
 *      | ?[\p{P}\p{S}]+[\r\n]*                              (C) punctuation and symbols
 *      |\s*[\r\n]+|\s+(?!\S)|\s+                           (D) Llama 3's whitespace rules
 * A piece of (1) is final: (2) and (3) match nothing in it (no number is in (2)'s ranges, and
 * (3) matches no number), so (3) sees only text without numbers. Its matches are found left to
 * right; at a position where no alternative matches the code point joins the unmatched text
 * before the next match, which is one piece (a zero-width joiner between two emoji, a control
 * character before punctuation). (B)'s prefix may be a mark (not a letter): then the prefix and
 * the word are the same run of letters and marks. The whitespace rules look at the end of the
 * piece (3) runs on, not of the text: "a  1" is "a", "  ", "1".
 * Classes: node's \p{L}, \p{N}, \s (unicode_tables.c), \p{M} (hf_o200k_tables.c), [\p{P}\p{S}]
 * (hf_deepseek_tables.c).
 */
#include "tokenizer/hf_deepseek_tables.h"
#include "tokenizer/hf_o200k_tables.h"
#include "tokenizer/hf_tok_internal.h"
#include "tokenizer/tokenizer_internal.h"
#include "unicode_tables.h"

typedef void (*piece_fn)(void *ctx, const uint8_t *p, size_t len);

enum { DC_OTHER, DC_LETTER, DC_MARK, DC_NUMBER, DC_PUNCT, DC_SPACE };

static int ds_class(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return DC_LETTER;
        if (cp >= '0' && cp <= '9') return DC_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return DC_SPACE;
        return cp > ' ' && cp < 0x7F ? DC_PUNCT : DC_OTHER;
    }
    if (tsr_uc_in(&tsr_uc_letter, cp)) return DC_LETTER;
    if (tsr_uc_in(&tsr_o200k_mark, cp)) return DC_MARK;
    if (tsr_uc_in(&tsr_uc_number, cp)) return DC_NUMBER;
    if (tsr_uc_in(&tsr_deepseek_punct_symbol, cp)) return DC_PUNCT;
    if (tsr_uc_in(&tsr_uc_space, cp)) return DC_SPACE;
    return DC_OTHER;
}

/* Class of the code point at i (i < n), its byte length in *len and value in *cp. */
static int class_at(const uint8_t *t, size_t n, size_t i, size_t *len, uint32_t *cp) {
    *len = tsr_utf8_next(t + i, n - i, cp);
    return ds_class(*cp);
}

static int is_cjk(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF);
}

static int is_crlf(uint32_t cp) { return cp == '\r' || cp == '\n'; }

/* End of the run from i of code points of class a or b. */
static size_t run_of(const uint8_t *t, size_t n, size_t i, int a, int b) {
    size_t len;
    uint32_t cp;
    int cl;
    while (i < n && ((cl = class_at(t, n, i, &len, &cp)) == a || cl == b)) i += len;
    return i;
}

/* End of the match of (3) at i (i < n), or 0 when no alternative matches there. */
static size_t match_at(const uint8_t *t, size_t n, size_t i) {
    size_t len, len2 = 0, e;
    uint32_t cp, cp2 = 0;
    int cl = class_at(t, n, i, &len, &cp), cl2 = -1;
    if (i + len < n) cl2 = class_at(t, n, i + len, &len2, &cp2);
    if (cp < 0x80 && cl == DC_PUNCT && cp2 < 0x80 && cl2 == DC_LETTER) { /* (A) */
        for (e = i + len; e < n && (uint8_t)((t[e] | 0x20) - 'a') < 26;) e++;
        return e;
    }
    int prefix = !is_crlf(cp) && cl != DC_LETTER && cl != DC_PUNCT; /* (B) */
    if (prefix && (cl2 == DC_LETTER || cl2 == DC_MARK)) return run_of(t, n, i + len, DC_LETTER, DC_MARK);
    if (cl == DC_LETTER || cl == DC_MARK) return run_of(t, n, i, DC_LETTER, DC_MARK);
    if (cl == DC_PUNCT || (cp == ' ' && cl2 == DC_PUNCT)) { /* (C) */
        e = run_of(t, n, cl == DC_PUNCT ? i : i + len, DC_PUNCT, DC_PUNCT);
        while (e < n && is_crlf(t[e])) e++;
        return e;
    }
    if (cl != DC_SPACE) return 0;
    return tok_space_end(t, n, i, run_of(t, n, i, DC_SPACE, DC_SPACE)); /* (D) */
}

/* Split (3) over the n bytes at t: its matches, and the text between two as pieces. */
static void split_words(const uint8_t *t, size_t n, piece_fn piece, void *ctx) {
    size_t gap = 0, i = 0;
    uint32_t cp;
    while (i < n) {
        size_t e = match_at(t, n, i);
        if (!e) {
            i += tsr_utf8_next(t + i, n - i, &cp);
            continue;
        }
        if (gap < i) piece(ctx, t + gap, i - gap);
        piece(ctx, t + i, e - i);
        i = gap = e;
    }
    if (gap < n) piece(ctx, t + gap, n - gap);
}

/* Split (2) over text without numbers: each CJK run and the text between runs, through (3). */
static void split_cjk(const uint8_t *t, size_t n, piece_fn piece, void *ctx) {
    size_t i = 0, start = 0, len;
    uint32_t cp;
    while (i < n) {
        len = tsr_utf8_next(t + i, n - i, &cp);
        if (!is_cjk(cp)) {
            i += len;
            continue;
        }
        size_t e = i;
        while (e < n && (len = tsr_utf8_next(t + e, n - e, &cp)) && is_cjk(cp)) e += len;
        if (start < i) split_words(t + start, i - start, piece, ctx);
        split_words(t + i, e - i, piece, ctx);
        i = start = e;
    }
    if (start < n) split_words(t + start, n - start, piece, ctx);
}

void hf_deepseek_split(const uint8_t *t, size_t n, piece_fn piece, void *ctx) {
    size_t i = 0, start = 0, len;
    uint32_t cp;
    while (i < n) {
        if (class_at(t, n, i, &len, &cp) != DC_NUMBER) {
            i += len;
            continue;
        }
        if (start < i) split_cjk(t + start, i - start, piece, ctx);
        size_t e = i;
        for (int k = 0; k < 3 && e < n && class_at(t, n, e, &len, &cp) == DC_NUMBER; k++) e += len;
        piece(ctx, t + i, e - i); /* (1): final */
        i = start = e;
    }
    if (start < n) split_cjk(t + start, n - start, piece, ctx);
}
