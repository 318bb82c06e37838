/* hf_deepseek_tables.h — the class [\p{P}\p{S}] of DeepSeek-V3's Split patterns as JavaScript
 * defines it, generated from node by gen_hf_deepseek_tables.js into hf_deepseek_tables.c. Sorted,
 * non-overlapping, inclusive [lo, hi] ranges (tsr_uc_in). */
#ifndef TSR_HF_DEEPSEEK_TABLES_H
#define TSR_HF_DEEPSEEK_TABLES_H

#include "unicode_tables.h"

extern const tsr_uc_class tsr_deepseek_punct_symbol;

#endif
