/* hf_nfc.h — Unicode NFC (the normalizer of Qwen 2/3's tokenizer.json), tables generated from node
 * by gen_hf_nfc_tables.js into hf_nfc_tables.c, so the result is the reference's
 * String.prototype.normalize("NFC"). */
#ifndef TSR_HF_NFC_H
#define TSR_HF_NFC_H

#include <stddef.h>
#include <stdint.h>

extern const uint32_t hf_nfc_decomp[][3]; /* code point, offset in pool, length; sorted */
extern const uint32_t hf_nfc_decomp_n;
extern const uint32_t hf_nfc_decomp_pool[];
extern const uint32_t hf_nfc_ccc[][2];    /* code point, order of its combining class; sorted */
extern const uint32_t hf_nfc_ccc_n;
extern const uint32_t hf_nfc_comp[][3];   /* first, second, composite; sorted by (first, second) */
extern const uint32_t hf_nfc_comp_n;
extern const char hf_nfc_version[];

/* NFC of n bytes of valid UTF-8. Returns NULL when NFC leaves the text unchanged (the common case,
 * found without copying), else a malloc'd normalised copy and its length in *out_n. */
uint8_t *hf_nfc(const uint8_t *t, size_t n, size_t *out_n);

#endif
