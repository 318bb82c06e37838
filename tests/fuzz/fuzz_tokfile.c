/* fuzz_tokfile.c — tessera's own tokenizer file (src/tokenizer/tokfile.c), as `tessera tokenizer
 * train` writes it. Input: the file [FUZZ_SEP text to round-trip through the tokenizer]. A file
 * that loads is also saved and loaded again: the save must load back. */
#include <stdlib.h>

#include "common.h"
#include "fuzz_common.h"
#include "fuzz_tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part part[2];
    int np = fuzz_split(data, size, part, 2);
    const char *path = fuzz_write("tok.txt", part[0].p, part[0].n);
    tsr_tokenizer *tok = NULL;
    if (tokenizer_load(&tok, path) == 0) {
        static const uint8_t hello[] = "Hello world, it's 2024!<|endoftext|> \xe2\x82\xac\xff";
        fuzz_round_trip(tok, hello, sizeof hello - 1, 1);
        if (np == 2) fuzz_round_trip(tok, part[1].p, part[1].n, 1);
        tsr_tokenizer *again = NULL;
        if (tokenizer_save(tok, fuzz_path("saved.txt")) != 0 ||
            tokenizer_load(&again, fuzz_path("saved.txt")) != 0 ||
            tokenizer_vocab_size(again) != tokenizer_vocab_size(tok))
            abort(); /* a loaded tokenizer must save and load back */
        tokenizer_free(again);
        tokenizer_free(tok);
    }
    return 0;
}
