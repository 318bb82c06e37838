/* unicode_tables.h — code point classes of GPT-2's pre-tokenisation regex (\p{L}, \p{N}, \s as
 * JavaScript defines them), generated from node by gen_unicode_tables.js into unicode_tables.c,
 * and the type of every class table (here and in src/tokenizer/'s *_tables.h). */
#ifndef TSR_UNICODE_TABLES_H
#define TSR_UNICODE_TABLES_H

#include <stdint.h>

/* A class of code points: n sorted, non-overlapping, inclusive [lo, hi] ranges r. */
typedef struct tsr_uc_class {
    const uint32_t (*r)[2];
    uint32_t n;
} tsr_uc_class;

extern const tsr_uc_class tsr_uc_letter, tsr_uc_number, tsr_uc_space;
extern const char tsr_uc_version[]; /* "Unicode X (node vY, ICU Z)" */

/* 1 if cp lies in class c, else 0: binary search (unicode_search.c). */
int tsr_uc_in(const tsr_uc_class *c, uint32_t cp);

#endif
