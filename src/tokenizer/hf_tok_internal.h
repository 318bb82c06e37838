/* hf_tok_internal.h — the hf_tok struct, shared by hf_tokjson.c (loading) and hf_bpe.c (encoding).
 * Token bytes are the real bytes (the byte-level mapping undone), so merging works on bytes. */
#ifndef TSR_HF_TOK_INTERNAL_H
#define TSR_HF_TOK_INTERNAL_H

#include <stdint.h>

#include "common.h"

#include "tokenizer/hf_tok.h"

#define HF_NONE UINT32_MAX
#define HF_RANK_TOKEN_MAX 1024u /* bytes in one token of a ranks file (o200k's longest has 128) */

/* Metaspace's prepend_scheme: which sections get a U+2581 in front (transformers.js: "first" is
 * the section at the start of the text, not one after an added token). */
typedef enum hf_prepend { HF_PREPEND_NEVER, HF_PREPEND_FIRST, HF_PREPEND_ALWAYS, HF_PREPEND_COUNT } hf_prepend;

struct hf_tok {
    hf_split_kind split;
    int nfc;           /* normalizer NFC */
    int ignore_merges; /* a pre-token found whole in the vocab is one token */
    uint32_t n_ids;    /* 1 + largest id */
    uint8_t *blob;     /* every id's bytes back to back */
    uint64_t *off;     /* (n_ids + 1) offsets into blob; an unassigned id has 0 bytes */
    uint8_t *assigned; /* (n_ids) 1 when the id is a vocab entry or an added token */
    /* model vocab: bytes -> id, open addressing (slot holds an id or HF_NONE) */
    uint32_t *vslot;
    uint64_t vmask;
    uint32_t byte_tok[256];
    /* merges: (left id, right id) -> rank, result id */
    uint64_t *mkey;
    uint32_t *mrank, *mres;
    uint64_t mmask;
    /* the tiktoken format (tiktoken_load.c) has ranks, not merges: (l, r) merges when the bytes of
     * l then r are a token, at that token's rank (its id); no table, tokens up to max_tok_len
     * (at most HF_RANK_TOKEN_MAX) */
    int rank_merges;
    uint32_t max_tok_len;
    /* SentencePiece-style BPE (model.byte_fallback: Llama 2, Gemma 3; hf_spm.c): vocab keys are raw
     * UTF-8 with U+2581 for a space; merging starts from code points; a code point outside the
     * vocab becomes the <0xXX> tokens of its bytes */
    int spm;
    int prepend;      /* normalizer Prepend("\u2581") before Replace(" " -> "\u2581") */
    int metaspace;    /* pre_tokenizer Metaspace (Mistral; normalizer null): ' ' -> U+2581 ... */
    hf_prepend ms_prepend; /* ... and a U+2581 prefixed to a section not starting with one */
    int strip_first;  /* decoder Strip(" ", 1, 0) or Metaspace: the first decoded space is dropped */
    int dec_bytes;    /* decoder ByteFallback: <0xXX> decodes to its byte (a Metaspace decoder: as text) */
    uint32_t fb[256]; /* <0xXX> ids */
    uint32_t unk;     /* model.unk_token's id, or HF_NONE */
    uint32_t n_cross; /* vocab entries with U+2581 right after another code point (hf_spm_split) */
    uint32_t *cross_id, *cross_at; /* ... and the byte offset of that U+2581 in each */
    /* added tokens, matched literally (leftmost-longest); a special one only with allow_special,
     * the others (Gemma 3's HTML tags, Qwen 3's <think>) always, as HF tokenizers and
     * transformers.js split them: they are vocabulary, not control tokens */
    uint32_t n_added, n_added_plain; /* all of them, those not special */
    uint32_t added_plain_max;        /* the longest not special, bytes */
    char **added;
    uint32_t *added_len, *added_id;
    uint8_t *added_special;
    uint8_t added_first[256]; /* 1 for a byte that starts some added token */
};

/* Where encoded ids go: appended to *ids (realloc'd, capacity *cap), count *n. */
typedef struct hf_ids_out {
    uint32_t **ids;
    size_t *n, *cap;
} hf_ids_out;
static inline void hf_ids_push(hf_ids_out *o, uint32_t id) {
    if (*o->n == *o->cap) {
        *o->cap = *o->cap ? 2 * *o->cap : 1024;
        *o->ids = tsr_realloc(*o->ids, *o->cap * sizeof **o->ids);
    }
    (*o->ids)[(*o->n)++] = id;
}
/* 1 when the n bytes at s hold U+2581 (the SentencePiece space) at byte i. */
static inline int hf_metaspace_at(const uint8_t *s, size_t n, size_t i) {
    return i + 3 <= n && s[i] == 0xE2 && s[i + 1] == 0x96 && s[i + 2] == 0x81;
}

/* One word's BPE (hf_word.c), as transformers.js merges: repeatedly the adjacent pair of lowest
 * rank, the leftmost among equal ranks, until no pair has a merge; the pairs wait in a heap, so a
 * word of n symbols takes O(n log n) (a 1 MB run of letters is one word). Symbol i: its id
 * (HF_NONE: outside the vocab, never merged), its bytes off/len in the text, and the live
 * symbols as a list from symbol 0 (prev/next, -1 ends it). hf_word_reserve makes room for n
 * symbols (the arrays grow and are kept for the next word); the caller fills id, off, len of
 * symbols 0..m-1, hf_word_merge links and merges them. */
typedef struct hf_pair {
    uint32_t rank, left; /* heap order: rank, then the left symbol's position (leftmost first) */
    uint32_t lid, rid;   /* the ids it was made from: stale once either side changed */
    uint32_t right, res;
} hf_pair;
typedef struct hf_word {
    uint32_t *id, *off, *len;
    int32_t *prev, *next;
    size_t cap;
    hf_pair *heap;
    size_t nheap, capheap;
} hf_word;
void hf_word_reserve(hf_word *w, size_t n);
void hf_word_merge(const hf_tok *t, hf_word *w, size_t m);
void hf_word_free(hf_word *w);

/* Where a section of text between added tokens lies: at the text's start (Metaspace's
 * prepend_scheme "first"), after an added token, or at the start of the rest of a text cut at
 * hf_tok_stream_cut (within a section: no U+2581 goes in front). */
enum { HF_SECTION_LATER, HF_SECTION_FIRST, HF_SECTION_CONTINUED };

/* SentencePiece-style BPE (hf_spm.c): the normalizer or Metaspace pre-tokenizer of one section of
 * text between added tokens (valid UTF-8; where: HF_SECTION_*; malloc'd result), the cuts that do
 * not change the ids, and the BPE of one piece (merges from code points, then byte fallback). */
uint8_t *hf_spm_normalize(const hf_tok *t, const uint8_t *p, size_t n, int where, size_t *out_n);
void hf_spm_split(const hf_tok *t, const uint8_t *s, size_t n,
                  void (*piece)(void *ctx, const uint8_t *p, size_t len), void *ctx);
void hf_spm_piece(const hf_tok *t, const uint8_t *s, size_t n, hf_ids_out *out);
/* hf_tok_stream_cut of the SentencePiece style: tokenizer_cut_before ' ' (normalised, a U+2581
 * after an ASCII letter or digit: hf_spm_split cuts there, and the rest is a section's middle);
 * 0 when a vocab entry holds U+2581 right after an ASCII letter or digit (BPE may merge across). */
size_t hf_spm_stream_cut(const hf_tok *t, const uint8_t *text, size_t n);

/* One id's decoded bytes for a SentencePiece-style tokenizer: U+2581 -> ' ', <0xXX> -> the byte
 * (with dec_bytes), one leading ' ' dropped when strip; written to out (at most cap), returns the full length. */
size_t hf_spm_decode_id(const hf_tok *t, uint32_t id, int strip, uint8_t *out, size_t cap);

/* The o200k family of Split patterns (hf_o200k.c): gpt-oss's o200k as transformers.js runs it
 * (JavaScript's classes), the same pattern as tiktoken runs it (o200k_base: the Rust regex crate's
 * classes), Kimi K2's / Moonlight's (tiktoken: Han runs apart). */
typedef enum hf_o200k_flavor { HF_O200K_JS, HF_O200K_TIKTOKEN, HF_O200K_KIMI } hf_o200k_flavor;
/* Length of the piece of flavor f's pattern starting at byte i (i < n) of the valid UTF-8 text t. */
size_t hf_o200k_piece(hf_o200k_flavor f, const uint8_t *t, size_t n, size_t i);

/* DeepSeek-V3's pre-tokenizer (hf_deepseek.c): calls piece(ctx, start, len) for each piece of the
 * valid UTF-8 text t. */
void hf_deepseek_split(const uint8_t *t, size_t n, void (*piece)(void *ctx, const uint8_t *p, size_t len),
                       void *ctx);

struct json_value;
/* hf_json_file's use of a file's JSON: root is valid only during the call; returns a status. */
typedef int (*hf_json_load)(void *ctx, const struct json_value *root, const char *path);
/* path (at most max bytes) read and parsed, then load(ctx, its root, path): load's status, or
 * TSR_EXIT_DATA after the error ("PATH: not valid JSON at byte N: WHY"; unreadable: fs_read_all's). */
int hf_json_file(const char *path, size_t max, hf_json_load load, void *ctx);

/* Id of the model-vocab entry holding bytes p[0..n), or HF_NONE. */
uint32_t hf_vocab_find(const hf_tok *t, const uint8_t *p, size_t n);
/* Rank of merging (l, r) (result in *res), or HF_NONE. */
uint32_t hf_merge_find(const hf_tok *t, uint32_t l, uint32_t r, uint32_t *res);
/* The vocab lookup of hf_vocab_find over the ids whose assigned is 1 and skip (NULL: none) is 0;
 * t->n_ids, blob, off, assigned filled. */
void hf_vocab_index(hf_tok *t, const uint8_t *skip);
/* Room for n added tokens, then added token k: len bytes of text (len >= 1), its id, special or not. */
void hf_added_alloc(hf_tok *t, uint32_t n);
void hf_added_set(hf_tok *t, uint32_t k, const char *text, size_t len, uint32_t id, int special);

#endif
