/* prep_pack.h — `tessera prep --pack T`: finetuning examples placed whole into the trainer's
 * sample windows, so no example is cut by a window boundary. Internal to src/prep/; the layout,
 * its arithmetic and the over-length policy are documented in docs/prep.md ("Packing").
 *
 * Vocabulary: T is the pack length (the trainer's seq_len). A *sample* of a shard is its tokens
 * [kT, kT + T]: T + 1 tokens, consecutive samples sharing one token. A *window* is the T tokens
 * [kT + 1, kT + T]: the targets of sample k. The packed stream of one shard is
 *
 *     EOT | window 0 (T tokens) | window 1 (T tokens) | ... | window m-1 (T tokens)
 *
 * so a shard holds 1 + m*T tokens and exactly m samples. Each window holds whole examples (each
 * ending with its EOT) and is filled up with EOT padding (mask 0); so a window's last token, the
 * first (input-only) token of the next sample, is always an EOT, as is the shard's first token.
 */
#ifndef TSR_PREP_PACK_H
#define TSR_PREP_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "data/data.h"

#define PACK_MIN_T 2         /* one target slot for a truncated example + its separator */
#define PACK_MAX_T 1048576   /* the trainer's largest seq_len (config key seq_len) */

/* What became of an example. */
typedef enum pack_fate { PACK_WHOLE, PACK_TRUNCATED, PACK_DROPPED, PACK_FATE_COUNT } pack_fate;

/* Counts of one packed dataset. tokens = what the dataset holds (its index's n_tokens). */
typedef struct pack_stats {
    uint64_t examples;  /* examples written, whole or truncated */
    uint64_t truncated; /* longer than T: the first T-1 tokens kept */
    uint64_t dropped;   /* longer than T with no target in the first T-1 tokens: not written */
    uint64_t windows;   /* = samples of length T */
    uint64_t pad;       /* EOT filler tokens (mask 0): window padding + one leading EOT per shard */
    uint64_t tokens;    /* all tokens written */
    uint64_t targets;   /* tokens with mask 1 */
} pack_stats;

typedef struct prep_packer prep_packer;

/* The shard size --pack uses for a requested --shard-tokens n: 1 + floor((n-1)/T)*T, the largest
 * size of whole samples not above n; 0 when n < T + 1 (no sample fits). */
uint64_t pack_shard_tokens(uint64_t n, uint64_t T);

/* A packer writing into w, which must have been opened with shard size pack_shard_tokens(n, T)
 * (passed here as shard_tokens) and with a mask channel. eot: the <|endoftext|> id. */
prep_packer *pack_open(tsr_dataset_writer *w, uint32_t eot, uint64_t T, uint64_t shard_tokens);

/* Places one example (n tokens ending with its EOT, and their mask bytes) after the previous one,
 * starting a new window when it does not fit the rest of the current one; *fate says what became
 * of it. Returns 0, or TSR_EXIT_DATA when the writer failed (it has said why). */
int pack_add(prep_packer *p, const uint32_t *tok, const uint8_t *mask, size_t n, pack_fate *fate);

/* Pads and writes the last window. Returns 0 or TSR_EXIT_DATA. */
int pack_finish(prep_packer *p);

const pack_stats *pack_get_stats(const prep_packer *p);
void pack_free(prep_packer *p);

/* Adds the comment line "# packed_seq_len<TAB>T ..." to DIR/index.tsv after its leading comment,
 * so the pack length travels with the dataset (comments are part of the index format, and every
 * reader skips them: docs/data-format.md). Only for a dataset in prep's staging directory: the
 * file is rewritten in place. Returns 0 or TSR_EXIT_DATA after tsr_error(). */
int pack_note_index(const char *dir, uint64_t T);

#endif
