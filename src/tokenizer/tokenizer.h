/* tokenizer.h — byte-level BPE (GPT-2's scheme): pre-tokenisation, merges by rank, special tokens.
 *
 * A tokenizer is a vocabulary of byte strings (token id -> bytes) plus a ranked list of merges
 * (left id, right id) -> merged id, plus special tokens (e.g. "<|endoftext|>") that are matched
 * literally before pre-tokenisation. Token ids are uint32 so vocabularies above 65,536 work.
 * Two sources build one: GPT-2's encoder.json + vocab.bpe (tokenizer_load_gpt2), and tessera's own
 * versioned file written by `tessera tokenizer train` (tokenizer_load / tokenizer_save; format in
 * docs/tokenizer.md). Functions returning int return 0 or TSR_EXIT_DATA / TSR_EXIT_USAGE after
 * tsr_error() named the file and the fault. A built tokenizer is read-only: encode and decode
 * may be called from several threads at once.
 */
#ifndef TSR_TOKENIZER_H
#define TSR_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tsr_tokenizer tsr_tokenizer;

typedef struct tsr_merge {
    uint32_t left, right, result; /* result's bytes = left's bytes followed by right's bytes */
} tsr_merge;

/* Builds a tokenizer from its parts (copied). tokens[i] (len[i] bytes) is the byte string of id i;
 * merges are in rank order (merges[0] applies first); specials[k] is a special token's text and
 * special_ids[k] its id (it must also be a vocabulary entry holding the same bytes). */
int tokenizer_build(tsr_tokenizer **out, uint32_t n_tokens, const uint8_t *const *tokens,
                    const uint32_t *len, uint32_t n_merges, const tsr_merge *merges,
                    uint32_t n_specials, const char *const *specials, const uint32_t *special_ids);
/* bytes of each of GPT-2's files: encoder.json is 1 MB and vocab.bpe 0.5 MB (50,257 tokens); a
 * vocab.json and merges.txt of 256k tokens some 10 MB */
#define GPT2_FILE_MAX ((size_t)64 << 20)
/* GPT-2: encoder.json (byte-to-unicode-mapped strings -> ids) and vocab.bpe (ranked merges), each
 * at most GPT2_FILE_MAX bytes. */
int tokenizer_load_gpt2(tsr_tokenizer **out, const char *encoder_json, const char *vocab_bpe);
/* tessera's own format (written by tokenizer_save). */
int tokenizer_load(tsr_tokenizer **out, const char *path);
int tokenizer_save(const tsr_tokenizer *tok, const char *path); /* temp file + rename */
/* Where "gpt2"'s encoder.json + vocab.bpe are: the first directory found of $TSR_DATA_DIR/gpt2,
 * PREFIX/share/tessera/gpt2 beside the program, the checkout's data/npm/gpt2 beside the program,
 * ./data/npm/gpt2. Returns 0, or TSR_EXIT_DATA after an error naming every place tried. */
int tokenizer_gpt2_dir(char *dir, size_t cap);
/* The tokenizer files of a directory, the first found of (docs/tokenizer.md "A directory"):
 *   1. encoder.json + vocab.bpe     GPT-2's own names (data/npm/gpt2, "gpt2")
 *   2. tokenizer.json               a Hugging Face tokenizer (its tokenizer_config.json beside it,
 *                                   when there is one, gives the chat template and eos_token)
 *   3. tiktoken.model               tiktoken's format (Kimi K2, Moonlight: its tokenizer_config.json
 *                                   beside it names the special tokens; docs/tokenizers-hf.md)
 *   4. vocab.json + merges.txt      GPT-2's format under transformers' names (what `tessera ckpt
 *                                   export --format hf` writes for a GPT-2 tokenizer)
 * A pair counts only when both its files are there. */
enum { TOKENIZER_FILES_NONE, TOKENIZER_FILES_GPT2, TOKENIZER_FILES_HF, TOKENIZER_FILES_TIKTOKEN };
typedef struct tokenizer_files {
    int kind;                       /* TOKENIZER_FILES_* */
    char vocab[4200], merges[4200]; /* GPT2: encoder.json or vocab.json; vocab.bpe or merges.txt */
    char json[4200];                /* HF: tokenizer.json; TIKTOKEN: tiktoken.model */
} tokenizer_files;
/* Finds dir's tokenizer files (reports nothing): f->kind, and the paths of that kind; NONE when
 * dir holds none of the three (or its path does not fit). Returns f->kind. */
int tokenizer_find_files(const char *dir, tokenizer_files *f);
/* The files looked for by tokenizer_find_files, for messages: "encoder.json + vocab.bpe, ..." */
#define TOKENIZER_FILES_NAMES "encoder.json + vocab.bpe, tokenizer.json, tiktoken.model or vocab.json + merges.txt"
/* Loads by name: "gpt2" (tokenizer_gpt2_dir), a directory (tokenizer_find_files: GPT-2's files, a
 * Hugging Face tokenizer.json or a tiktoken.model), a Hugging Face tokenizer.json file (a name ending
 * in .json; hf_tok.h, docs/tokenizers-hf.md), a file in tiktoken's format (NAME.tiktoken, or a
 * tiktoken.model: its directory's), or a file in tessera's format. An HF tokenizer answers every call below through hf_tok_*: its special tokens are its
 * added tokens (tokenizer_special_id); it has no merges or specials to list (n_merges and
 * n_specials are 0) and tokenizer_save refuses it. */
int tokenizer_open(tsr_tokenizer **out, const char *spec);
/* 1 when tok was opened from a Hugging Face tokenizer.json. */
int tokenizer_is_hf(const tsr_tokenizer *tok);
void tokenizer_free(tsr_tokenizer *tok);

uint32_t tokenizer_vocab_size(const tsr_tokenizer *tok);
/* Id of a special token such as "<|endoftext|>", or UINT32_MAX when it has none. */
uint32_t tokenizer_special_id(const tsr_tokenizer *tok, const char *name);
/* The name of the special token with this id ("<image_soft_token>": a Hugging Face added token
 * marked special, or a special of a GPT-2-format or tessera tokenizer), or NULL when id is none:
 * encoding text never gives such an id (tokenizer_encode without allow_special). */
const char *tokenizer_special_of(const tsr_tokenizer *tok, uint32_t id);
/* " (<eos>)" or " ('the')": id's special name or its bytes (control bytes as '?', cut to fit) for
 * messages, into buf (cap bytes, at least 16); "" when tok is NULL or lacks id. Returns buf. */
const char *tokenizer_id_label(const tsr_tokenizer *tok, uint32_t id, char *buf, size_t cap);

/* Ill-formed UTF-8 subparts in n bytes: each becomes one U+FFFD when encoded (the maximal-subpart
 * rule of tokenizer_encode); a literal U+FFFD in the text is not counted. */
size_t tokenizer_count_invalid_utf8(const uint8_t *text, size_t n);
/* Encodes n bytes of text (any bytes; UTF-8 expected, invalid sequences are handled as GPT-2's
 * encoder does). Special tokens are recognised when allow_special != 0. Appends to *ids (realloc'd,
 * capacity in *cap) and returns the number of ids written after *n_ids, updating *n_ids. */
size_t tokenizer_encode(const tsr_tokenizer *tok, const uint8_t *text, size_t n, int allow_special,
                        uint32_t **ids, size_t *n_ids, size_t *cap);
/* Where a long text may be cut for encoding in parts (`tessera prep` streams a large file so): the
 * last position q in [1, n) where encode(text[0, q)) followed by encode_continued(text[q, ...))
 * equals encode(text) for any continuation, special tokens not recognised (allow_special 0); 0
 * when there is none in the n bytes. GPT-2's and the Hugging Face byte-level tokenizers (Llama 3,
 * Qwen): text[q] == '\n' after an ASCII letter or digit, where every pre-tokeniser here ends a
 * piece and begins the next (GPT-2's regex, Llama 3's and Qwen's Split), and no character composes
 * across it (NFC). The SentencePiece style (Llama 2, Gemma 3, Mistral): text[q] == ' ' after an
 * ASCII letter or digit, where its pieces are cut (a U+2581 after another code point); none when
 * a vocab entry holds U+2581 right after an ASCII letter or digit (hf_spm.c). */
size_t tokenizer_stream_cut(const tsr_tokenizer *tok, const uint8_t *text, size_t n);
/* As tokenizer_encode (special tokens not recognised) for the rest of a text cut at
 * tokenizer_stream_cut: not a text's start, so a SentencePiece-style normalizer (Llama 2's Prepend,
 * Metaspace's prepend_scheme) puts no U+2581 in front of it. */
size_t tokenizer_encode_continued(const tsr_tokenizer *tok, const uint8_t *text, size_t n,
                                  uint32_t **ids, size_t *n_ids, size_t *cap);
/* Decodes ids to bytes: writes at most cap bytes to out, returns the full length needed. An id
 * out of range is an error: returns (size_t)-1 after tsr_error(). */
size_t tokenizer_decode(const tsr_tokenizer *tok, const uint32_t *ids, size_t n, uint8_t *out,
                        size_t cap);
/* The text of ids (n) for JSON and for people: the decode, an id the tokenizer does not have
 * written "<|id N|>", and each ill-formed UTF-8 sequence replaced by U+FFFD (a model can emit
 * byte tokens that do not make characters). Malloc'd, NUL-terminated, *len bytes. */
char *tokenizer_decode_text(const tsr_tokenizer *tok, const uint32_t *ids, size_t n, size_t *len);
/* The bytes of one token (len in *len), or NULL for an id out of range. */
const uint8_t *tokenizer_token_bytes(const tsr_tokenizer *tok, uint32_t id, uint32_t *len);
/* The most bytes a text that encodes into `tokens` tokens can have, with room to spare: tokens x 2
 * x the longest token's bytes (at least 4: a character; 2: a normalizer may change the bytes'
 * count). A longer text cannot fit in that many tokens: prep --format prompts and generate skip or
 * refuse it unread, before any tokenizing (docs/tokenizer.md). */
size_t tokenizer_bytes_bound(const tsr_tokenizer *tok, size_t tokens);

/* GPT-2 pre-tokenisation of UTF-8 text: the regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * without a regex library. Calls piece(ctx, start, len) for each piece in order. Exposed for
 * `tessera tokenizer train`, which counts pieces. */
void tokenizer_pretokenize(const uint8_t *text, size_t n,
                           void (*piece)(void *ctx, const uint8_t *p, size_t len), void *ctx);

/* ---- Read access to a built tokenizer's parts, for tokenizer_save (src/tokenizer/tokfile.c).
 * Implemented beside the struct (bpe.c). Pointers stay valid until tokenizer_free. ---- */
uint32_t tokenizer_n_merges(const tsr_tokenizer *tok);
const tsr_merge *tokenizer_merges(const tsr_tokenizer *tok); /* (n_merges) in rank order */
uint32_t tokenizer_n_specials(const tsr_tokenizer *tok);
const char *tokenizer_special_name(const tsr_tokenizer *tok, uint32_t k); /* k < n_specials */
uint32_t tokenizer_special_id_at(const tsr_tokenizer *tok, uint32_t k);   /* k < n_specials */

#endif
