/* fuzz_hftok.c — a Hugging Face tokenizer.json (src/tokenizer/hf_tok*.c: the loader, the Split
 * matchers, NFC, added tokens, byte-level BPE). Input: the tokenizer.json [FUZZ_SEP text]. A file
 * that loads encodes a fixed text (scripts, marks, emoji, digits, an added token, invalid UTF-8)
 * and the input's text: every id it gives must be inside the vocabulary and decode. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fuzz_common.h"
#include "tokenizer/hf_tok.h"

static void use(const hf_tok *tok, const uint8_t *text, size_t n) {
    uint32_t *ids = NULL;
    size_t n_ids = 0, cap = 0;
    hf_tok_encode(tok, text, n, 1, &ids, &n_ids, &cap);
    uint32_t v = hf_tok_vocab_size(tok);
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= v) abort(); /* an id outside the vocabulary */
    size_t len = hf_tok_decode(tok, ids, n_ids, NULL, 0);
    if (len == (size_t)-1) abort(); /* the encoder's own ids must decode */
    uint8_t *out = malloc(len + 1);
    if (hf_tok_decode(tok, ids, n_ids, out, len) != len) abort();
    free(out);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part part[2];
    int np = fuzz_split(data, size, part, 2);
    hf_tok *tok = NULL;
    if (hf_tok_load(&tok, fuzz_write("tokenizer.json", part[0].p, part[0].n)) != 0) return 0;
    static const uint8_t fixed[] = "Hello world, it's 2024!<|eot_id|>  \n\n caf\xc3\xa9 e\xcc\x81 "
                                   "\xe4\xbd\xa0\xe5\xa5\xbd 12345678 \xf0\x9f\x91\xa9\xe2\x80\x8d"
                                   "\xf0\x9f\x92\xbb \xff\xfe";
    use(tok, fixed, sizeof fixed - 1);
    if (np == 2) use(tok, part[1].p, part[1].n);
    hf_tok_free(tok);
    return 0;
}
