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
 *
 * sft/chat examples are segments: the writer was opened with DATASET_MASK_SEGMENTS and the mask
 * byte of each example's first token, of each window's first padding token and of each shard's
 * leading EOT carries DATASET_SEGMENT_BIT (data.h), so document-masked attention keeps the
 * examples of a sample apart whatever tokens a chat template writes.
 *
 * Preference pairs (--format preference, docs/prep.md "Preference pairs") use the same layout
 * with one example per window: pair i's chosen example in window 2i, its rejected one in window
 * 2i+1, and an even m, so a pair never straddles two shards.
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
    uint64_t dropped;   /* not written: longer than T with no target in the first T-1 tokens;
                         * and both examples of a dropped preference pair */
    uint64_t windows;   /* = samples of length T */
    uint64_t pad;       /* EOT filler tokens (mask 0): window padding + one leading EOT per shard */
    uint64_t tokens;    /* all tokens written */
    uint64_t targets;   /* tokens with mask 1 */
    uint64_t pairs;     /* preference pairs written (2 examples each) */
    uint64_t pairs_dropped; /* preference pairs not written (their 2 examples count in dropped) */
} pack_stats;

typedef struct prep_packer prep_packer;

/* The shard size --pack uses for a requested --shard-tokens n: 1 + floor((n-1)/(gT))*gT, the
 * largest size of whole groups of g samples not above n (g = 2 with paired, for preference pairs;
 * else 1); 0 when n < gT + 1 (no group fits). */
uint64_t pack_shard_tokens(uint64_t n, uint64_t T, int paired);

/* A packer writing into w, which must have been opened with shard size
 * pack_shard_tokens(n, T, paired) (passed here as shard_tokens) and with a mask channel. eot: the
 * <|endoftext|> id. paired: preference pairs, placed with pack_add_pair only; else examples,
 * placed with pack_add only. segments: mark the segment starts (above; w opened with
 * DATASET_MASK_SEGMENTS). */
prep_packer *pack_open(tsr_dataset_writer *w, uint32_t eot, uint64_t T, uint64_t shard_tokens,
                       int paired, int segments);

/* Places one example (n tokens ending with its EOT, and their mask bytes) after the previous one,
 * starting a new window when it does not fit the rest of the current one; *fate says what became
 * of it. Returns 0, or TSR_EXIT_DATA when the writer failed (it has said why). */
int pack_add(prep_packer *p, const uint32_t *tok, const uint8_t *mask, size_t n, pack_fate *fate);

/* Places a preference pair: its chosen example (the n[0] tokens at tok, and their mask bytes),
 * then its rejected one (the n[1] tokens after it), each alone in the next window (its first T-1
 * tokens when longer than T), padded. fate[k]: what example k alone would become, PACK_DROPPED
 * when the tokens it keeps hold no target; the pair is written only when neither is dropped, else
 * neither is. Returns 0, or TSR_EXIT_DATA when the writer failed. */
int pack_add_pair(prep_packer *p, const uint32_t *tok, const uint8_t *mask, const size_t n[2],
                  pack_fate fate[2]);

/* Places a prompt (--format prompts): its n tokens alone in the next window, padded with at
 * least one EOT (the window's last token, the next sample's first input, stays an EOT). A prompt
 * of T tokens or more is dropped, not cut (a prompt cut short asks another question), and so is
 * one without a target; *fate says which. Returns 0 or TSR_EXIT_DATA. */
int pack_add_alone(prep_packer *p, const uint32_t *tok, const uint8_t *mask, size_t n,
                   pack_fate *fate);

/* Pads and writes the last window. Returns 0 or TSR_EXIT_DATA. */
int pack_finish(prep_packer *p);

const pack_stats *pack_get_stats(const prep_packer *p);
void pack_free(prep_packer *p);

/* Adds the comment line "# packed_seq_len<TAB>T ..." to DIR/index.tsv after its leading comment,
 * and for preference pairs "# preference_pairs<TAB>N ..." right after it, so the layout travels
 * with the dataset p wrote (comments are part of the index format, and every reader skips them:
 * docs/data-format.md). Only for a dataset in prep's staging directory, after its writer closed:
 * the file is rewritten in place. Returns 0 or TSR_EXIT_DATA after tsr_error(). */
int pack_note_index(const prep_packer *p, const char *dir);
/* The same for any comment lines ("# KEY\tVALUE\t(...)\n" each): inserted after DIR/index.tsv's
 * leading comments. Returns 0 or TSR_EXIT_DATA after tsr_error(). */
int pack_note_lines(const char *dir, const char *lines);

#endif
