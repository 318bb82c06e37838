/* fuzz_bpe.c — the BPE encoder (src/tokenizer/bpe.c, pretok.c): encode -> decode gives the input
 * back, byte for byte, for any bytes (invalid UTF-8 included), with and without special tokens,
 * on GPT-2's real tokenizer (data/npm/gpt2, or $TSR_DATA_DIR/gpt2: see INSTALL).
 * Input: one flag byte (bit 0: allow special tokens) then the text. */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "fuzz_common.h"
#include "fuzz_tokenizer.h"

static tsr_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    if (tokenizer_open(&g_tok, "gpt2") != 0) {
        fprintf(stderr, "fuzz_bpe: cannot load GPT-2's tokenizer (above); run from the repository "
                        "root or set TSR_DATA_DIR\n");
        exit(1);
    }
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    fuzz_round_trip(g_tok, data + 1, size - 1, data[0] & 1);
    return 0;
}
