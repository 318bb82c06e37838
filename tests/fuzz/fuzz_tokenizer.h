/* fuzz_tokenizer.h — a check shared by the tokenizer harnesses: a tokenizer that loaded must encode
 * and decode text back to the same bytes (byte-level BPE loses nothing but ill-formed UTF-8). */
#ifndef TSR_FUZZ_TOKENIZER_H
#define TSR_FUZZ_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* Encodes the n bytes at text (specials recognised when allow_special), decodes the ids and
 * aborts unless the bytes come back unchanged (ill-formed UTF-8 as U+FFFD, as the reference reads
 * it) and every id is below the vocabulary size. */
void fuzz_round_trip(const tsr_tokenizer *tok, const uint8_t *text, size_t n, int allow_special);

#endif
