/* tokenizer_internal.h — helpers shared by the tokenizer's own files (not part of the API).
 *
 * UTF-8 is read the way the reference (node reading a file as UTF-8, the WHATWG decoder) reads it:
 * each maximal ill-formed subpart of a sequence counts as one U+FFFD (docs/tokenizer.md).
 */
#ifndef TSR_TOKENIZER_INTERNAL_H
#define TSR_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Decodes the code point at p (n >= 1 bytes left): returns the bytes it spans (>= 1) and sets *cp;
 * an ill-formed sequence spans its maximal subpart and reads as U+FFFD. */
size_t tsr_utf8_next(const uint8_t *p, size_t n, uint32_t *cp);
/* The end of the Hugging Face Split patterns' whitespace alternatives \s*[\r\n]+ | \s+(?!\S) | \s+
 * at byte i of t, where [i, j) (j > i) is the run of \s there: just after the run's last \r or
 * \n; else the whole run at the end of the text or when it is one code point; else the run less
 * its last code point, which goes with what follows (pretok.c; hf_pretok.c, hf_deepseek.c and
 * hf_o200k.c share it). */
size_t tok_space_end(const uint8_t *t, size_t n, size_t i, size_t j);
/* When text holds ill-formed UTF-8, returns a malloc'd copy with each maximal ill-formed subpart
 * replaced by U+FFFD (EF BF BD) and its length in *out_n; else NULL (the text is valid). */
uint8_t *tsr_utf8_sanitize(const uint8_t *text, size_t n, size_t *out_n);
static inline int tokenizer_ascii_alnum(uint8_t b) {
    return (b >= '0' && b <= '9') || ((b | 0x20) >= 'a' && (b | 0x20) <= 'z');
}
/* The last position q in [1, n) with text[q] == c and text[q - 1] an ASCII letter or digit, or 0
 * (tokenizer_stream_cut's places: c is '\n' for the byte-level family, ' ' for SentencePiece's). */
size_t tokenizer_cut_before(const uint8_t *text, size_t n, uint8_t c);

/* The longest piece (pre-tokenizer word) BPE merges whole: a longer one (a megabyte run of letters
 * on one line) is merged as consecutive chunks of at most TOK_PIECE_MAX bytes, cut before a UTF-8
 * lead byte, so that the merge's working memory (about 120 bytes per byte of the piece) stays
 * under 8 MiB per thread whatever the input (docs/tokenizer.md). No merge crosses a cut. */
#define TOK_PIECE_MAX 65536
/* The length of the first chunk of a piece of n > TOK_PIECE_MAX bytes: TOK_PIECE_MAX, less the
 * continuation bytes (10xxxxxx) before the cut, so that no character is split (a run of
 * continuation bytes, ill-formed, is cut anywhere). */
static inline size_t tok_piece_chunk(const uint8_t *p, size_t n) {
    if (n <= TOK_PIECE_MAX) return n;
    for (size_t k = TOK_PIECE_MAX; k > TOK_PIECE_MAX - 4; k--)
        if ((p[k] & 0xC0) != 0x80) return k;
    return TOK_PIECE_MAX;
}
/* A piece of n > TOK_PIECE_MAX bytes handed to piece(ctx, ...) as its chunks (tok_piece_chunk),
 * 1; a shorter one left to the caller, 0. */
static inline int tok_piece_split(void (*piece)(void *ctx, const uint8_t *p, size_t n), void *ctx,
                                  const uint8_t *p, size_t n) {
    if (n <= TOK_PIECE_MAX) return 0;
    for (size_t k; n; p += k, n -= k) piece(ctx, p, k = tok_piece_chunk(p, n));
    return 1;
}

/* bpe.c's object, for the loaders beside it. A merge (l, r) -> res of rank `rank`, into the
 * pair table of a tokenizer gpt2_load.c is filling. */
struct tsr_tokenizer;
struct hf_tok;
void tsr_tokenizer_set_pair(struct tsr_tokenizer *t, uint32_t l, uint32_t r, uint32_t rank,
                            uint32_t res);
/* A tsr_tokenizer whose every call goes to the Hugging Face tokenizer h (taken over). Returns 0. */
int tokenizer_wrap_hf(struct tsr_tokenizer **out, struct hf_tok *h);

#endif
