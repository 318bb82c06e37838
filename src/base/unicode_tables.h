/* unicode_tables.h — code point classes of GPT-2's pre-tokenisation regex (\p{L}, \p{N}, \s as
 * JavaScript defines them), generated from node by gen_unicode_tables.js into unicode_tables.c.
 * Each table is sorted, non-overlapping, inclusive [lo, hi] ranges. */
#ifndef TSR_UNICODE_TABLES_H
#define TSR_UNICODE_TABLES_H

#include <stdint.h>

extern const uint32_t tsr_uc_letter[][2];
extern const uint32_t tsr_uc_letter_n;
extern const uint32_t tsr_uc_number[][2];
extern const uint32_t tsr_uc_number_n;
extern const uint32_t tsr_uc_space[][2];
extern const uint32_t tsr_uc_space_n;
extern const char tsr_uc_version[]; /* "Unicode X (node vY, ICU Z)" */

/* 1 if cp lies in one of the n ranges r (a table above), else 0: binary search (unicode_search.c). */
int tsr_uc_in_ranges(const uint32_t (*r)[2], uint32_t n, uint32_t cp);

#endif
