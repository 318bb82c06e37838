/* hf_pretok.c — the Split pre-tokenizers of Llama 3 and Qwen 2/3 without a regex engine, and the
 * dispatch to the others (the o200k family: hf_o200k.c; DeepSeek-V3's: hf_deepseek.c).
 *
 * The reference is transformers.js, which runs the pattern as a JavaScript regex with flag u (it
 * walks code points, \s is JavaScript's, (?i:'s|...) becomes '([sS]|[tT]|[rR][eE]|...)):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*
 *   |\s*[\r\n]+|\s+(?!\S)|\s+                          (Llama 3; Qwen 2/3 has \p{N} for \p{N}{1,3})
 * Alternatives are tried in order at each position; every code point is in exactly one class
 * (L letter, N number, S space, O other; \r \n are S), so at a position holding c:
 *   c == '\'' + s t m d / re ve ll (ASCII, any case)  -> the contraction
 *   c in L                                           -> the run of L
 *   c in O or S, not \r \n, followed by L            -> c plus the run of L
 *   c in N                                           -> up to 3 (Qwen: 1) N
 *   c == ' ' followed by O, or c in O                -> [' '] the run of O, then any \r \n run
 *   c in S: W = the run of S from c;
 *     W holds \r or \n                  -> up to and including the last \r/\n of W  (\s*[\r\n]+)
 *     W ends the text                   -> W                                       (\s+(?!\S))
 *     W is longer than one code point   -> W minus its last code point             (\s+(?!\S))
 *     else                              -> c                                       (\s+)
 * Isolated behaviour with every code point matched: the pieces are the matches, in order.
 * Classes come from unicode_tables.c (generated from node, the reference's engine).
 */
#include <string.h>

#include "tokenizer/hf_tok.h"
#include "tokenizer/hf_tok_internal.h"
#include "tokenizer/tokenizer_internal.h"
#include "unicode_tables.h"

enum { CL_O, CL_L, CL_N, CL_S };

static const char *const split_patterns[HF_SPLIT_SINGLE] = {
    [HF_SPLIT_LLAMA3] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    [HF_SPLIT_QWEN2] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                       "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    [HF_SPLIT_O200K] = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*"
                       "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                       "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
                       "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "
                       "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

const char *const hf_deepseek_patterns[3] = {
    "\\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
     "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
};

hf_split_kind hf_split_kind_of(const char *pattern) {
    for (int k = 0; k < HF_SPLIT_SINGLE; k++)
        if (strcmp(pattern, split_patterns[k]) == 0) return (hf_split_kind)k;
    return HF_SPLIT_COUNT;
}

static int cp_class(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return CL_L;
        if (cp >= '0' && cp <= '9') return CL_N;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CL_S;
        return CL_O;
    }
    if (tsr_uc_in(&tsr_uc_letter, cp)) return CL_L;
    if (tsr_uc_in(&tsr_uc_number, cp)) return CL_N;
    if (tsr_uc_in(&tsr_uc_space, cp)) return CL_S;
    return CL_O;
}

/* Class and length of the code point at i (i < n), its value in *cp. */
static int class_at(const uint8_t *t, size_t n, size_t i, size_t *len, uint32_t *cp) {
    *len = tsr_utf8_next(t + i, n - i, cp);
    return cp_class(*cp);
}

/* End of the run of class cl starting at i, at most max code points. */
static size_t run_end(const uint8_t *t, size_t n, size_t i, int cl, size_t max) {
    size_t len, k = 0;
    uint32_t cp;
    while (i < n && k < max && class_at(t, n, i, &len, &cp) == cl) i += len, k++;
    return i;
}

static int is_crlf(uint32_t cp) { return cp == '\r' || cp == '\n'; }

static size_t contraction(const uint8_t *t, size_t n, size_t i) {
    if (t[i] != '\'' || i + 1 >= n) return 0;
    int a = t[i + 1] | 0x20, b = i + 2 < n ? t[i + 2] | 0x20 : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* Length of the piece starting at i (i < n). */
static size_t piece_at(hf_split_kind kind, const uint8_t *t, size_t n, size_t i) {
    size_t c = contraction(t, n, i);
    if (c) return c;
    size_t len, len2;
    uint32_t cp, cp2;
    int cl = class_at(t, n, i, &len, &cp);
    if (cl == CL_L) return run_end(t, n, i, CL_L, SIZE_MAX) - i;
    if (cl == CL_N) return run_end(t, n, i, CL_N, kind == HF_SPLIT_LLAMA3 ? 3 : 1) - i;
    int cl2 = i + len < n ? class_at(t, n, i + len, &len2, &cp2) : -1;
    if (!is_crlf(cp) && cl2 == CL_L) return run_end(t, n, i + len, CL_L, SIZE_MAX) - i;
    if (cl == CL_O || (cp == ' ' && cl2 == CL_O)) {
        size_t j = run_end(t, n, cl == CL_O ? i : i + 1, CL_O, SIZE_MAX);
        while (j < n && is_crlf(t[j])) j++;
        return j - i;
    }
    /* cl == CL_S */
    return tok_space_end(t, n, i, run_end(t, n, i, CL_S, SIZE_MAX)) - i;
}

void hf_pretok_split(hf_split_kind kind, const uint8_t *t, size_t n,
                     void (*piece)(void *ctx, const uint8_t *p, size_t len), void *ctx) {
    if (kind == HF_SPLIT_DEEPSEEK_V3) {
        hf_deepseek_split(t, n, piece, ctx);
        return;
    }
    hf_o200k_flavor f = kind == HF_SPLIT_O200K ? HF_O200K_JS : kind == HF_SPLIT_TT_O200K ? HF_O200K_TIKTOKEN
                                                                                           : HF_O200K_KIMI;
    for (size_t i = 0; i < n;) {
        size_t len = kind < HF_SPLIT_O200K ? piece_at(kind, t, n, i) : hf_o200k_piece(f, t, n, i);
        piece(ctx, t + i, len);
        i += len;
    }
}
