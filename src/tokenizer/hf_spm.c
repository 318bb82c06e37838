/* hf_spm.c — SentencePiece-style BPE of a tokenizer.json with model.byte_fallback (Llama 2,
 * Gemma 3, Mistral), as transformers.js encodes it (docs/tokenizers-hf.md):
 *   1. the normalizer: Prepend("\u2581") (Llama 2) to each section between added tokens, and
 *      Replace(" " -> "\u2581"); or, with normalizer null, the Metaspace pre-tokenizer (Mistral):
 *      the same Replace, and a U+2581 in front by its prepend_scheme ("first": only the section
 *      at the start of the text) unless the section already starts with one; it does not split;
 *   2. no pre-tokenization (Gemma 3's Split on " " finds no space left after Replace), so BPE
 *      runs over whole sections. For speed (and the per-call piece cache of hf_bpe.c) a section
 *      is cut before each U+2581 that follows another code point (hf_spm_split): no symbol can
 *      span such a point unless a vocab entry holds U+2581 after another code point there (Gemma
 *      3's ">\u2581</"), and those "crossing" entries are checked in the text, so the ids are
 *      the uncut section's;
 *   3. BPE over a piece's code points (hf_word_merge, shared with the byte-level BPE): repeatedly
 *      merge the adjacent pair of lowest rank, the leftmost among equal ranks, until no pair has a
 *      merge; the pairs wait in a heap;
 *   4. each symbol is its vocab id; a code point outside the vocab becomes the <0xXX> tokens of
 *      its UTF-8 bytes (byte fallback), or unk_token where one is missing.
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer/hf_tok_internal.h"
#include "tokenizer/tokenizer_internal.h"

static const uint8_t METASPACE[3] = {0xE2, 0x96, 0x81}; /* U+2581 */

/* 1 when a section gets a U+2581 in front: Llama 2's Prepend normalizer always; Metaspace by its
 * prepend_scheme, unless the section already starts with U+2581 once its spaces are replaced;
 * never the rest of a text cut within a section (HF_SECTION_CONTINUED). */
static int prefixed(const hf_tok *t, const uint8_t *p, size_t n, int where) {
    if (where == HF_SECTION_CONTINUED) return 0;
    if (t->prepend) return 1;
    if (!t->metaspace || (n && (p[0] == ' ' || hf_metaspace_at(p, n, 0)))) return 0;
    return t->ms_prepend == HF_PREPEND_ALWAYS ||
           (t->ms_prepend == HF_PREPEND_FIRST && where == HF_SECTION_FIRST);
}

uint8_t *hf_spm_normalize(const hf_tok *t, const uint8_t *p, size_t n, int where, size_t *out_n) {
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++) spaces += p[i] == ' ';
    uint8_t *s = tsr_malloc(n + 2 * spaces + 3 + 1), *o = s;
    if (prefixed(t, p, n, where)) memcpy(o, METASPACE, 3), o += 3;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == ' ') memcpy(o, METASPACE, 3), o += 3;
        else *o++ = p[i];
    }
    *out_n = (size_t)(o - s);
    return s;
}

/* Splits s into code-point symbols (s is valid UTF-8); returns their count. */
static size_t symbols(const hf_tok *t, const uint8_t *s, size_t n, hf_word *w) {
    size_t m = 0;
    for (size_t i = 0; i < n; m++) {
        uint32_t cp;
        size_t k = tsr_utf8_next(s + i, n - i, &cp);
        w->id[m] = hf_vocab_find(t, s + i, k);
        w->off[m] = (uint32_t)i, w->len[m] = (uint32_t)k;
        i += k;
    }
    return m;
}

static void emit(const hf_tok *t, const hf_word *w, const uint8_t *s, hf_ids_out *out) {
    for (int32_t i = 0; i >= 0; i = w->next[i]) {
        if (w->id[i] != HF_NONE) {
            hf_ids_push(out, w->id[i]);
            continue;
        }
        for (uint32_t k = 0; k < w->len[i]; k++) {
            uint32_t fb = t->fb[s[w->off[i] + k]];
            if (fb == HF_NONE) fb = t->unk;
            if (fb != HF_NONE) hf_ids_push(out, fb);
        }
    }
}

void hf_spm_piece(const hf_tok *t, const uint8_t *s, size_t sn, hf_ids_out *out) {
    hf_word w = {0};
    hf_word_reserve(&w, sn);
    size_t m = symbols(t, s, sn, &w);
    if (m) {
        hf_word_merge(t, &w, m);
        emit(t, &w, s, out);
    }
    hf_word_free(&w);
}

/* 1 when a crossing token (a vocab entry with U+2581 right after another code point) lies over
 * the U+2581 at i, as text: then a symbol may span i and the text must not be cut there. */
static int crossed(const hf_tok *t, const uint8_t *s, size_t n, size_t i) {
    for (uint32_t k = 0; k < t->n_cross; k++) {
        uint32_t id = t->cross_id[k], at = t->cross_at[k];
        size_t len = t->off[id + 1] - t->off[id];
        if (i >= at && i - at + len <= n && memcmp(s + i - at, t->blob + t->off[id], len) == 0) return 1;
    }
    return 0;
}

void hf_spm_split(const hf_tok *t, const uint8_t *s, size_t n,
                  void (*piece)(void *ctx, const uint8_t *p, size_t len), void *ctx) {
    size_t start = 0;
    for (size_t i = 1; i < n; i++) {
        /* a cut before each U+2581 that follows another code point (not inside a code point) */
        if (!hf_metaspace_at(s, n, i) || (i >= 3 && hf_metaspace_at(s, n, i - 3)) || crossed(t, s, n, i)) continue;
        piece(ctx, s + start, i - start);
        start = i;
    }
    if (n > start) piece(ctx, s + start, n - start);
}

/* A text cut at a U+2581 that follows an ASCII letter or digit gives the ids of the whole when the
 * first part is encoded as it is and the rest as HF_SECTION_CONTINUED: the whole's pieces
 * (hf_spm_split) end there unless a crossing entry lies over that U+2581, and then its letter or
 * digit comes right before a U+2581 in that entry; each part's pieces are the whole's. */
size_t hf_spm_stream_cut(const hf_tok *t, const uint8_t *text, size_t n) {
    for (uint32_t k = 0; k < t->n_cross; k++) {
        uint8_t b = t->blob[t->off[t->cross_id[k]] + t->cross_at[k] - 1];
        if (tokenizer_ascii_alnum(b)) return 0;
    }
    return tokenizer_cut_before(text, n, ' ');
}

/* The byte of a "<0xXX>" token, or -1. */
static int fallback_byte(const uint8_t *p, size_t n) {
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        int c = p[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = 16 * v + d;
    }
    return v;
}

size_t hf_spm_decode_id(const hf_tok *t, uint32_t id, int strip, uint8_t *out, size_t cap) {
    size_t n = t->off[id + 1] - t->off[id], len = 0;
    const uint8_t *p = t->blob + t->off[id];
    int b = t->dec_bytes && t->assigned[id] == 1 ? fallback_byte(p, n) : -1;
    if (b >= 0) {
        if (strip && b == ' ') return 0;
        if (cap) out[0] = (uint8_t)b;
        return 1;
    }
    for (size_t i = 0; i < n;) {
        int meta = hf_metaspace_at(p, n, i);
        uint8_t c = meta ? ' ' : p[i];
        i += meta ? 3 : 1;
        if (strip && meta) { /* only the first character can be stripped */
            strip = 0;
            continue;
        }
        strip = 0;
        if (len < cap) out[len] = c;
        len++;
    }
    return len;
}

