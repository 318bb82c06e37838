/* hf_o200k_tables.h — the case classes of gpt-oss's (o200k) Split pattern: [\p{Lu}\p{Lt}], \p{Ll}
 * and \p{M} as JavaScript defines them, generated from node by gen_hf_o200k_tables.js into
 * hf_o200k_tables.c. Sorted, non-overlapping, inclusive [lo, hi] ranges (tsr_uc_in). */
#ifndef TSR_HF_O200K_TABLES_H
#define TSR_HF_O200K_TABLES_H

#include "unicode_tables.h"

extern const tsr_uc_class tsr_o200k_upper, tsr_o200k_lower, tsr_o200k_mark;

#endif
