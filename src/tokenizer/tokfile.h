/* tokfile.h — tessera's tokenizer file (format version 1, docs/tokenizer.md "File format").
 *
 * A line-based text file, diff-able: magic + version, counts, one line per token (hex bytes), the
 * ranked merges (left right result), the special tokens, and a closing CRC32C line over everything
 * before it. tokenizer_load (tokenizer.h) reads it; tokenizer_save (tokenizer.h) and
 * tokenizer_save_parts (here) write it via path.tmp + fsync + rename.
 */
#ifndef TSR_TOKFILE_H
#define TSR_TOKFILE_H

#include <stdint.h>

#include "tokenizer/tokenizer.h"

#define TSR_TOKFILE_MAGIC "tessera-tokenizer"
#define TSR_TOKFILE_VERSION 1

/* Writes a tokenizer given by its parts (the arguments of tokenizer_build) to path: validates them
 * (ids in range, merge results = left bytes + right bytes, specials = their vocabulary bytes), then
 * writes path.tmp, fsyncs it, renames it to path and fsyncs the directory.
 * Returns 0, TSR_EXIT_USAGE for invalid parts, or TSR_EXIT_DATA for an I/O error. */
int tokenizer_save_parts(const char *path, uint32_t n_tokens, const uint8_t *const *tokens,
                         const uint32_t *len, uint32_t n_merges, const tsr_merge *merges,
                         uint32_t n_specials, const char *const *specials,
                         const uint32_t *special_ids);

/* The parts of a tokenizer file, as read and validated (owned; free with tokfile_parts_free). */
typedef struct tsr_tokfile_parts {
    uint32_t n_tokens, n_merges, n_specials;
    uint8_t **tokens;      /* (n_tokens) byte strings */
    uint32_t *len;         /* (n_tokens) */
    tsr_merge *merges;     /* (n_merges) in rank order */
    char **specials;       /* (n_specials) NUL-terminated */
    uint32_t *special_ids; /* (n_specials) */
} tsr_tokfile_parts;

/* Reads and validates a tokenizer file without building a tokenizer (tokenizer_load = this +
 * tokenizer_build). Errors name the file and the fault; returns 0 or TSR_EXIT_DATA. */
int tokfile_read(tsr_tokfile_parts *out, const char *path);
void tokfile_parts_free(tsr_tokfile_parts *p);

#endif
