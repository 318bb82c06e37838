/* hf_tok.h — Hugging Face tokenizer.json: the byte-level BPE family (Llama 3, Qwen 2/3, gpt-oss)
 * and the SentencePiece-style BPE family with byte fallback (Llama 2, Gemma 3; hf_spm.c).
 *
 * Accepted: model.type "BPE" (vocab, merges as "a b" strings or [a, b] pairs, ignore_merges,
 * byte_fallback), added_tokens (matched literally, leftmost-longest, before everything else).
 * Byte-level: normalizer null, NFC or an empty Sequence, pre_tokenizer Sequence[Split(Regex P,
 * Isolated, invert false), ByteLevel(use_regex false)] where P is Llama 3's, Qwen 2/3's or
 * gpt-oss's (o200k) pattern, or DeepSeek-V3's three Splits then ByteLevel (matched by hand-written
 * C, hf_pretok.c, hf_o200k.c, hf_deepseek.c), decoder ByteLevel. The tiktoken format (Kimi K2,
 * Moonlight, OpenAI's o200k_base) loads into the same object (tiktoken_load.c, tiktoken.h).
 * SentencePiece-style: normalizer [Prepend("\u2581"),] Replace(" " -> "\u2581"), no pre_tokenizer
 * (or Gemma 3's Split on " "), or normalizer null and pre_tokenizer Metaspace (Mistral); decoder
 * Replace, ByteFallback, Fuse[, Strip], or Metaspace. Anything else is refused naming the file and key.
 * The reference is transformers.js (npm @lenml/tokenizers); docs/tokenizers-hf.md.
 * A loaded tokenizer is read-only: encode and decode may run in several threads at once.
 */
#ifndef TSR_HF_TOK_H
#define TSR_HF_TOK_H

#include <stddef.h>
#include <stdint.h>

typedef struct hf_tok hf_tok;

/* The pre-tokenizers recognised: a tokenizer.json's Split patterns (exact string compare with its
 * Regex), and the patterns of the tiktoken format (tiktoken_load.c), which are not in its file. */
typedef enum hf_split_kind {
    HF_SPLIT_LLAMA3,      /* ...|\p{N}{1,3}|...  (Llama 3, 3.1, 3.2) */
    HF_SPLIT_QWEN2,       /* ...|\p{N}|...       (Qwen 2, 2.5, 3) */
    HF_SPLIT_O200K,       /* case classes, contractions inside (gpt-oss; hf_o200k.c) */
    HF_SPLIT_DEEPSEEK_V3, /* a Sequence of three Splits (DeepSeek-V3, R1; hf_deepseek.c) */
    HF_SPLIT_TT_O200K,    /* o200k's pattern as tiktoken runs it (o200k_base.tiktoken; hf_o200k.c) */
    HF_SPLIT_TT_KIMI,     /* Kimi K2's / Moonlight's, as tiktoken runs it (tiktoken.model) */
    HF_SPLIT_COUNT
} hf_split_kind;
enum { HF_SPLIT_SINGLE = HF_SPLIT_O200K + 1 }; /* the kinds of one Split in a tokenizer.json */

/* bytes of a tokenizer.json: the largest real ones, Gemma 3's (33 MB), gpt-oss's (28 MB), Gemma
 * 2's (17 MB), Qwen 3's (11 MB), DeepSeek-V3's (8 MB), pass with room */
#define HF_TOKJSON_MAX ((size_t)256 << 20)
/* Loads a tokenizer.json (at most HF_TOKJSON_MAX bytes). Returns 0, or TSR_EXIT_DATA after tsr_error() named the file and fault. */
int hf_tok_load(hf_tok **out, const char *path);
/* Loads a tokenizer in tiktoken's format (tiktoken_load.c; docs/tokenizers-hf.md "tiktoken"): a
 * directory holding tiktoken.model and tokenizer_config.json (Kimi K2, Moonlight), its tiktoken.model,
 * or OpenAI's o200k_base.tiktoken. Returns 0, or TSR_EXIT_DATA after tsr_error() named the file
 * and fault. */
int tiktoken_load(hf_tok **out, const char *path);
/* 1 when the file name of path says tiktoken's format: NAME.tiktoken or tiktoken.model. */
int tiktoken_is_file(const char *path);
/* 1 when directory dir holds tiktoken.model. */
int tiktoken_in_dir(const char *dir);
void hf_tok_free(hf_tok *tok);

uint32_t hf_tok_vocab_size(const hf_tok *tok); /* 1 + the largest id (vocab and added tokens) */
/* Id of an added token such as "<|eot_id|>", or UINT32_MAX. */
uint32_t hf_tok_added_id(const hf_tok *tok, const char *content);
/* The content of the added token marked special with this id (never matched in text unless asked
 * for), or NULL. */
const char *hf_tok_special_of(const hf_tok *tok, uint32_t id);

/* Encodes n bytes of text (ill-formed UTF-8: each maximal subpart reads as U+FFFD, as node reads
 * a file). Added tokens marked special are matched when allow_special != 0, the others always. Appends to *ids (realloc'd, capacity
 * *cap), updates *n_ids and returns the ids written. */
size_t hf_tok_encode(const hf_tok *tok, const uint8_t *text, size_t n, int allow_special,
                     uint32_t **ids, size_t *n_ids, size_t *cap);
/* Decodes ids to bytes: writes at most cap bytes, returns the full length, (size_t)-1 after
 * tsr_error() for an id out of range. */
size_t hf_tok_decode(const hf_tok *tok, const uint32_t *ids, size_t n, uint8_t *out, size_t cap);
/* As hf_tok_encode (special added tokens not matched), for text that continues a text cut at
 * hf_tok_stream_cut: its start is not the text's start, so a SentencePiece-style normalizer puts
 * no U+2581 in front of it. */
size_t hf_tok_encode_continued(const hf_tok *tok, const uint8_t *text, size_t n, uint32_t **ids,
                               size_t *n_ids, size_t *cap);
/* tokenizer_stream_cut for this tokenizer: before a '\n' that follows an ASCII letter or digit in
 * the byte-level family; before a ' ' that follows one in the SentencePiece style (hf_spm.c). */
size_t hf_tok_stream_cut(const hf_tok *tok, const uint8_t *text, size_t n);
/* The bytes of one id (length in *len), or NULL for an id out of range or unassigned. */
const uint8_t *hf_tok_token_bytes(const hf_tok *tok, uint32_t id, uint32_t *len);

/* The Split pre-tokenisation alone: calls piece(ctx, start, len) for each piece of the UTF-8
 * text t (already sanitised: valid UTF-8). */
void hf_pretok_split(hf_split_kind kind, const uint8_t *t, size_t n,
                     void (*piece)(void *ctx, const uint8_t *p, size_t len), void *ctx);
/* The one-Split kind (below HF_SPLIT_SINGLE) whose Regex is exactly pattern, or HF_SPLIT_COUNT. */
hf_split_kind hf_split_kind_of(const char *pattern);
/* DeepSeek-V3's three Split patterns, in order (hf_deepseek.c). */
extern const char *const hf_deepseek_patterns[3];

#endif
