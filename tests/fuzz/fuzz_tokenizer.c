/* fuzz_tokenizer.c — the encode -> decode round trip check (fuzz_tokenizer.h). */
#include "fuzz_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

void fuzz_round_trip(const tsr_tokenizer *tok, const uint8_t *text, size_t n, int allow_special) {
    uint32_t *ids = NULL;
    size_t n_ids = 0, cap = 0;
    size_t got = tokenizer_encode(tok, text, n, allow_special, &ids, &n_ids, &cap);
    if (got != n_ids) abort(); /* returns what it appended */
    uint32_t V = tokenizer_vocab_size(tok);
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= V) {
            fprintf(stderr, "fuzz: id %u at %zu is beyond the vocabulary (%u)\n", ids[i], i, V);
            abort();
        }
    /* ill-formed UTF-8 is read as the reference reads it: each maximal ill-formed subpart as
     * U+FFFD, so that is what comes back */
    size_t want_n = n;
    uint8_t *sanitized = tsr_utf8_sanitize(text, n, &want_n);
    const uint8_t *want = sanitized ? sanitized : text;
    uint8_t *out = malloc(want_n + 1);
    size_t len = tokenizer_decode(tok, ids, n_ids, out, want_n + 1);
    if (len != want_n || memcmp(out, want, want_n) != 0) {
        fprintf(stderr, "fuzz: round trip: %zu bytes (%zu once sanitised) -> %zu ids -> %zu bytes%s\n",
                n, want_n, n_ids, len, len == want_n ? " (different)" : "");
        abort();
    }
    free(out);
    free(sanitized);
    free(ids);
}
