/* tokenizer_text.c — ids to text fit for JSON and for people (tokenizer.h tokenizer_decode_text). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

/* appends n bytes to the buffer (*b, *len, *cap) */
static void put(char **b, size_t *len, size_t *cap, const void *s, size_t n) {
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        char *nb = realloc(*b, *cap);
        if (!nb) tsr_die(TSR_EXIT_INTERNAL, "decode: out of memory (%zu bytes)", *cap);
        *b = nb;
    }
    memcpy(*b + *len, s, n);
    *len += n;
}

/* raw (n bytes) with every ill-formed UTF-8 sequence replaced by U+FFFD */
static char *sanitize(const uint8_t *raw, size_t n, size_t *len) {
    char *b = NULL;
    size_t cap = 0;
    *len = 0;
    put(&b, len, &cap, "", 0);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = raw[i] < 0x80 ? 1 : tsr_utf8_next(raw + i, n - i, &cp);
        const int bad = raw[i] >= 0x80 && cp == 0xFFFD &&
                        !(l == 3 && raw[i] == 0xEF && raw[i + 1] == 0xBF && raw[i + 2] == 0xBD);
        if (bad) put(&b, len, &cap, "\xEF\xBF\xBD", 3);
        else put(&b, len, &cap, raw + i, l);
        i += l;
    }
    b[*len] = '\0';
    return b;
}

char *tokenizer_decode_text(const tsr_tokenizer *tok, const uint32_t *ids, size_t n, size_t *len) {
    char *raw = NULL;
    size_t rl = 0, cap = 0, run = 0;
    const uint32_t V = tokenizer_vocab_size(tok);
    for (size_t i = 0; i <= n; i++) {
        if (i < n && ids[i] < V) continue;
        if (i > run) { /* the run of ids the tokenizer has, decoded together */
            size_t need = tokenizer_decode(tok, ids + run, i - run, NULL, 0);
            uint8_t *d = tsr_malloc(need + 1);
            tokenizer_decode(tok, ids + run, i - run, d, need);
            put(&raw, &rl, &cap, d, need);
            free(d);
        }
        if (i < n) {
            char mark[32];
            int k = snprintf(mark, sizeof mark, "<|id %u|>", ids[i]);
            put(&raw, &rl, &cap, mark, (size_t)k);
        }
        run = i + 1;
    }
    char *text = sanitize((const uint8_t *)raw, rl, len);
    free(raw);
    return text;
}
