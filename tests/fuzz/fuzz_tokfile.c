/* fuzz_tokfile.c — tessera's own tokenizer file (src/tokenizer/tokfile.c), as `tessera tokenizer
 * train` writes it. Input: the file [FUZZ_SEP text to round-trip through the tokenizer]. A file
 * that loads is also saved and loaded again: the save must load back. Each input runs twice: as
 * is, and with its closing "crc32c XXXXXXXX" line made right (replaced, or added when missing),
 * so mutations reach the records behind the checksum. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "crc32c.h"
#include "fuzz_common.h"
#include "fuzz_tokenizer.h"

static void load_and_use(const char *path, const fuzz_part *text) {
    tsr_tokenizer *tok = NULL;
    if (tokenizer_load(&tok, path) != 0) return;
    static const uint8_t hello[] = "Hello world, it's 2024!<|endoftext|> \xe2\x82\xac\xff";
    fuzz_round_trip(tok, hello, sizeof hello - 1, 1);
    if (text) fuzz_round_trip(tok, text->p, text->n, 1);
    tsr_tokenizer *again = NULL;
    if (tokenizer_save(tok, fuzz_path("saved.txt")) != 0 ||
        tokenizer_load(&again, fuzz_path("saved.txt")) != 0 ||
        tokenizer_vocab_size(again) != tokenizer_vocab_size(tok))
        abort(); /* a loaded tokenizer must save and load back */
    tokenizer_free(again);
    tokenizer_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part part[2];
    int np = fuzz_split(data, size, part, 2);
    const fuzz_part *text = np == 2 ? &part[1] : NULL;
    load_and_use(fuzz_write("tok.txt", part[0].p, part[0].n), text);
    /* the records without a closing line of the form "crc32c XXXXXXXX\n", then the right one */
    const size_t cl = 16;
    size_t n = part[0].n;
    if (n >= cl && memcmp(part[0].p + n - cl, "crc32c ", 7) == 0 && part[0].p[n - 1] == '\n') n -= cl;
    char line[32];
    snprintf(line, sizeof line, "crc32c %08x\n", tsr_crc32c(0, part[0].p, n));
    if (n + cl == part[0].n && memcmp(part[0].p + n, line, cl) == 0) return 0; /* right already */
    uint8_t *fixed = malloc(n + cl);
    memcpy(fixed, part[0].p, n);
    memcpy(fixed + n, line, cl);
    load_and_use(fuzz_write("tok.txt", fixed, n + cl), text);
    free(fixed);
    return 0;
}
