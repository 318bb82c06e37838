/* fuzz_gpt2.c — GPT-2's tokenizer files (src/tokenizer/gpt2_load.c): encoder.json and vocab.bpe.
 * Input: encoder.json FUZZ_SEP vocab.bpe [FUZZ_SEP text to round-trip through the tokenizer]. */
#include "common.h"
#include "fuzz_common.h"
#include "fuzz_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part part[3];
    int np = fuzz_split(data, size, part, 3);
    if (np < 2) part[1] = (fuzz_part){(const uint8_t *)"", 0};
    const char *enc = fuzz_write("encoder.json", part[0].p, part[0].n);
    const char *bpe = fuzz_write("vocab.bpe", part[1].p, part[1].n);
    tsr_tokenizer *tok = NULL;
    if (tokenizer_load_gpt2(&tok, enc, bpe) == 0) {
        static const uint8_t hello[] = "Hello world, it's 2024!<|endoftext|> \xe2\x82\xac\xff";
        fuzz_round_trip(tok, hello, sizeof hello - 1, 1);
        if (np == 3) fuzz_round_trip(tok, part[2].p, part[2].n, 1);
        tokenizer_free(tok);
    }
    return 0;
}
