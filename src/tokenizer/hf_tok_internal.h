/* hf_tok_internal.h — the hf_tok struct, shared by hf_tokjson.c (loading) and hf_bpe.c (encoding).
 * Token bytes are the real bytes (the byte-level mapping undone), so merging works on bytes. */
#ifndef TSR_HF_TOK_INTERNAL_H
#define TSR_HF_TOK_INTERNAL_H

#include <stdint.h>

#include "tokenizer/hf_tok.h"

#define HF_NONE UINT32_MAX

struct hf_tok {
    hf_split_kind split;
    int nfc;           /* normalizer NFC */
    int ignore_merges; /* a pre-token found whole in the vocab is one token */
    uint32_t n_ids;    /* 1 + largest id */
    uint8_t *blob;     /* every id's bytes back to back */
    uint64_t *off;     /* (n_ids + 1) offsets into blob; an unassigned id has 0 bytes */
    uint8_t *assigned; /* (n_ids) 1 when the id is a vocab entry or an added token */
    /* model vocab: bytes -> id, open addressing (slot holds an id or HF_NONE) */
    uint32_t *vslot;
    uint64_t vmask;
    uint32_t byte_tok[256];
    /* merges: (left id, right id) -> rank, result id */
    uint64_t *mkey;
    uint32_t *mrank, *mres;
    uint64_t mmask;
    /* added tokens, matched literally (leftmost-longest) */
    uint32_t n_added;
    char **added;
    uint32_t *added_len, *added_id;
    uint8_t added_first[256]; /* 1 for a byte that starts some added token */
};

/* Id of the model-vocab entry holding bytes p[0..n), or HF_NONE. */
uint32_t hf_vocab_find(const hf_tok *t, const uint8_t *p, size_t n);
/* Rank of merging (l, r) (result in *res), or HF_NONE. */
uint32_t hf_merge_find(const hf_tok *t, uint32_t l, uint32_t r, uint32_t *res);

#endif
