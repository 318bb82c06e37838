/* shard_format.h — internal to src/data: the shard layout constants and header codec shared by
 * the reader (shard.c) and the writer (shard_writer.c). Byte layout: docs/data-format.md. */
#ifndef TSR_SHARD_FORMAT_H
#define TSR_SHARD_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC "TSRSHARD"
#define SHARD_HEADER_SIZE 64
#define SHARD_HEADER_CRC_AT 60 /* the header CRC covers bytes [0, 60) */
#define SHARD_FLAG_MASK 1u
#define SHARD_FLAG_SEGMENTS 2u /* the mask bytes' bit 1 marks segment starts (has_mask 2) */
#define INDEX_NAME "index.tsv"
#define INDEX_MAGIC "tessera-dataset"
#define INDEX_MAX_BYTES (256u << 20)
#define MAX_VOCAB (1ull << 31) /* token ids must fit int32 */
#define MAX_SHARD_TOKENS (1ull << 60)
#define MAX_SHARDS 10000000
#define NAME_MAX_LEN 255
/* the longest tokenizer name an index records (its optional `tokenizer` line) */
#define TOKENIZER_MAX_LEN 1023
#define IO_CHUNK 65536

typedef struct shard_header {
    uint32_t version, header_size, token_width, flags, vocab_size, shard_no;
    uint64_t n_tokens, token_offset, mask_offset;
    uint32_t payload_crc, header_crc;
} shard_header;

/* The header flags of a shard with an index's has_mask (DATASET_NO_MASK ...), and the largest
 * mask byte allowed in it. */
uint32_t shard_flags(int has_mask);
unsigned shard_mask_max(int has_mask);

/* Serialises h and fills in (and stores into h) the header CRC. */
void shard_header_encode(shard_header *h, uint8_t out[SHARD_HEADER_SIZE]);
void shard_put_u32(uint8_t *p, uint32_t v);
/* Token width in bytes: 2 when every id fits uint16, else 4. */
uint32_t shard_width_for_vocab(uint64_t vocab);
/* The note KEY of an index text (its magic line, then the header comments "# KEY<TAB>VALUE..."):
 * 1 with the value field in out (cap bytes), else 0 (shard_index.c). */
int index_note_in_text(const char *text, const char *key, char *out, size_t cap);
/* The index text dataset_index_preset handed over for dir (NUL-terminated, *len bytes), or NULL
 * (shard_index.c). */
const char *index_preset_text(const char *dir, size_t *len);
/* "dir/name" and a copy of dir without trailing slashes; both malloc'd. */
char *data_path_join(const char *dir, const char *name);
char *data_dir_dup(const char *dir);

/* ---- index.tsv (shard_index_parse.c) ---- */

typedef struct index_row {
    char name[NAME_MAX_LEN + 1];
    uint64_t n_tokens;
    uint32_t crc;
} index_row;

typedef struct dataset_index {
    uint32_t vocab, width;
    int has_mask, n_shards;
    uint64_t n_tokens;
    index_row *rows; /* (n_shards) */
    char tokenizer[TOKENIZER_MAX_LEN + 1]; /* the optional `tokenizer` line's value, "" without */
    uint32_t id_max; /* every token id is at most this: the max_token_id note, else vocab - 1 */
    int id_noted;    /* the index has the note */
} dataset_index;

/* Strict unsigned decimal: digits only, no sign, no overflow. 0 parsed, 1 not. */
int index_parse_u64(const char *s, uint64_t *out);
/* path's whole text (NUL-terminated, *len bytes; at most INDEX_MAX_BYTES): 0, or TSR_EXIT_DATA
 * after tsr_error naming the file and the fault. */
int index_read_file(const char *path, char **out, size_t *len);
/* The index text (modified in place) parsed into ix, every field checked: 0, or TSR_EXIT_DATA
 * after tsr_error naming path, the line and what was expected. */
int index_parse(const char *path, char *text, dataset_index *ix);

#endif
