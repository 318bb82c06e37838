/* test_tokenizer_train.c — `tessera tokenizer train` and tessera's tokenizer file (tokfile.c).
 *
 * Fixture: a deterministic generated corpus (pseudo-words from syllables, numbers, punctuation,
 * contractions, Unicode words, "<|endoftext|>" between documents) written to a mkdtemp directory
 * under /tmp that is removed at the end. Checks: the vocabulary has exactly the size asked for with
 * bytes first and the special last; two runs give byte-identical files; a directory input equals
 * the same text in one file; chunked counting (> 4 MiB input) agrees with encoding the whole text;
 * save -> load -> encode/decode round trips; tokenizer_save of a loaded file rewrites it byte for
 * byte; the loader refuses bad magic, bad version, checksum mismatch and truncation (exit 2, the
 * message names the file); pruning under a tiny --max-memory still gives a valid tokenizer; GPT-2's
 * tokenizer (when present) survives tokenizer_save -> tokenizer_load.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "crc32c.h"
#include "tap.h"
#include "testfs.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_cmd.h"
#include "tokenizer/tokfile.h"

#define PLAN 44

static char root[256];

/* ---------------------------------------------------------------- helpers */

static void path_of(char *out, const char *name) {
    if (snprintf(out, 512, "%s/%s", root, name) >= 512) {
        fprintf(stderr, "test_tokenizer_train: path too long\n");
        exit(1);
    }
}

static void write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "test_tokenizer_train: cannot write %s\n", path);
        exit(1);
    }
}

/* Runs the train command with stdout and stderr captured (into out / err, NUL-terminated). */
static char captured_out[8192], captured_err[8192];
static int run_train(int argc, char **argv) {
    char po[512], pe[512];
    path_of(po, "stdout.txt");
    path_of(pe, "stderr.txt");
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fo, 1);
    dup2(fe, 2);
    int rc = cmd_tokenizer_train(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so), close(se), close(fo), close(fe);
    size_t n;
    char *o = slurp(po, &n), *e = slurp(pe, &n);
    snprintf(captured_out, sizeof captured_out, "%s", o ? o : "");
    snprintf(captured_err, sizeof captured_err, "%s", e ? e : "");
    free(o);
    free(e);
    return rc;
}

/* tokenizer_load with stderr captured into captured_err. */
static int load_capture(tsr_tokenizer **tok, const char *path) {
    char pe[512];
    path_of(pe, "stderr.txt");
    fflush(stderr);
    int se = dup(2), fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fe, 2);
    int rc = tokenizer_load(tok, path);
    fflush(stderr);
    dup2(se, 2);
    close(se), close(fe);
    size_t n;
    char *e = slurp(pe, &n);
    snprintf(captured_err, sizeof captured_err, "%s", e ? e : "");
    free(e);
    return rc;
}

/* ---------------------------------------------------------------- the corpus */

static uint64_t rng_state;
static uint64_t rng(void) { return rng_state = tsr_hash64(rng_state + 0x9E3779B97F4A7C15ull); }

typedef struct text {
    char *p;
    size_t n, cap;
} text;

static void put(text *t, const char *s) {
    size_t k = strlen(s);
    if (t->n + k + 1 > t->cap) {
        while (t->n + k + 1 > t->cap) t->cap = t->cap ? 2 * t->cap : 1 << 16;
        t->p = realloc(t->p, t->cap);
    }
    memcpy(t->p + t->n, s, k + 1);
    t->n += k;
}

/* A deterministic corpus of about `bytes` bytes. distinct_words: size of the word stock (a large
 * stock gives many distinct pieces, for the pruning test). */
static text make_corpus(uint64_t seed, size_t bytes, uint32_t distinct_words, int invalid) {
    static const char *syl[] = {"ka", "to", "ri", "an", "the", "ing", "er", "mo", "lu", "sen",
                                "pa", "re", "qu", "is", "ve", "na", "or", "el", "do", "shi"};
    static const char *uni[] = {"café", "naïve", "日本語", "größe", "Ωmega", "😀", "пример",
                                "données", "東京", "ἀλήθεια"};
    static const char *punct[] = {",", ".", ";", "!", "?", " --", ":", "\"", "(", ")"};
    static const char *contr[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    text t = {0};
    rng_state = seed;
    while (t.n < bytes) {
        uint64_t r = rng();
        uint32_t w = (uint32_t)(r % distinct_words);
        /* Zipf-ish: small word numbers are much more frequent */
        if (r >> 60 < 12) w %= 300;
        char word[64];
        size_t k = 0;
        uint64_t x = tsr_hash64(w + 1);
        int nsyl = 1 + (int)(x % 4);
        for (int s = 0; s < nsyl; s++) {
            const char *y = syl[(x >> (8 + 5 * s)) % 20];
            memcpy(word + k, y, strlen(y));
            k += strlen(y);
        }
        word[k] = '\0';
        if ((r >> 8) % 7 == 0) word[0] = (char)(word[0] - 32); /* Capitalised */
        put(&t, " ");
        put(&t, word);
        switch ((r >> 16) % 40) {
        case 0: put(&t, contr[(r >> 24) % 7]); break;
        case 1: case 2: put(&t, punct[(r >> 24) % 10]); break;
        case 3: {
            char num[32];
            snprintf(num, sizeof num, " %u", (unsigned)((r >> 24) % 5000));
            put(&t, num);
        } break;
        case 4: put(&t, " "); put(&t, uni[(r >> 24) % 10]); break;
        case 5: put(&t, ".\n"); break;
        case 6: put(&t, ".\n\n  "); break;
        case 7: if ((r >> 24) % 8 == 0) put(&t, "\n<|endoftext|>"); break;
        case 8: put(&t, "\t"); break;
        case 9: if (invalid) put(&t, (r >> 24) % 2 ? " caf\xe9" : " \xf0\x9f\x98"); break;
        default: break;
        }
    }
    put(&t, "\n");
    return t;
}

static size_t count_tokens(const tsr_tokenizer *tok, const char *s, size_t n, int special) {
    uint32_t *ids = NULL;
    size_t n_ids = 0, cap = 0;
    tokenizer_encode(tok, (const uint8_t *)s, n, special, &ids, &n_ids, &cap);
    free(ids);
    return n_ids;
}

static int round_trip(const tsr_tokenizer *tok, const char *s) {
    size_t n = strlen(s);
    uint32_t *ids = NULL;
    size_t n_ids = 0, cap = 0;
    tokenizer_encode(tok, (const uint8_t *)s, n, 1, &ids, &n_ids, &cap);
    uint8_t *out = malloc(n + 16);
    size_t m = tokenizer_decode(tok, ids, n_ids, out, n + 16);
    int ok = m == n && memcmp(out, s, n) == 0;
    free(out);
    free(ids);
    return ok;
}

/* The "(N tokens / M bytes" of the summary; 0 when absent. */
static uint64_t summary_tokens(void) {
    const char *p = strstr(captured_out, "tokens per byte on the training input: ");
    if (!p || !(p = strchr(p, '('))) return 0;
    return strtoull(p + 1, NULL, 10);
}

/* ---------------------------------------------------------------- the oracle */

/* A readable reference BPE trainer: every pre-token is a word (no counting table), every merge
 * recounts all pairs from scratch and takes the most frequent, ties to the lowest (left, right),
 * then rewrites every word left to right. O(merges x text); for small texts only. */
typedef struct ref_words {
    uint32_t *sym;  /* all words back to back */
    size_t *start;  /* (n + 1) */
    size_t *len;    /* (n) current lengths */
    size_t n, cap, sym_n, sym_cap;
} ref_words;

static void ref_piece(void *ctx, const uint8_t *p, size_t len) {
    ref_words *w = ctx;
    if (w->n + 1 >= w->cap) {
        w->cap = w->cap ? 2 * w->cap : 1024;
        w->start = realloc(w->start, w->cap * sizeof *w->start);
        w->len = realloc(w->len, w->cap * sizeof *w->len);
    }
    if (w->sym_n + len > w->sym_cap) {
        while (w->sym_n + len > w->sym_cap) w->sym_cap = w->sym_cap ? 2 * w->sym_cap : 4096;
        w->sym = realloc(w->sym, w->sym_cap * sizeof *w->sym);
    }
    w->start[w->n] = w->sym_n;
    w->len[w->n++] = len;
    for (size_t i = 0; i < len; i++) w->sym[w->sym_n++] = p[i];
}

/* Returns the number of merges learned (at most max, pairs seen >= 2 times). */
static uint32_t ref_train(const char *t, size_t n, uint32_t max, tsr_merge *out) {
    ref_words w = {0};
    tokenizer_pretokenize((const uint8_t *)t, n, ref_piece, &w);
    uint32_t V = 256 + max, k;
    int64_t *cnt = malloc((size_t)V * V * sizeof *cnt);
    for (k = 0; k < max; k++) {
        memset(cnt, 0, (size_t)V * V * sizeof *cnt);
        for (size_t i = 0; i < w.n; i++)
            for (size_t j = 0; j + 1 < w.len[i]; j++)
                cnt[(size_t)w.sym[w.start[i] + j] * V + w.sym[w.start[i] + j + 1]]++;
        size_t best = 0;
        for (size_t q = 1; q < (size_t)V * V; q++)
            if (cnt[q] > cnt[best]) best = q;
        if (cnt[best] < 2) break;
        uint32_t A = (uint32_t)(best / V), B = (uint32_t)(best % V), X = 256 + k;
        out[k] = (tsr_merge){A, B, X};
        for (size_t i = 0; i < w.n; i++) {
            uint32_t *s = w.sym + w.start[i];
            size_t o = 0, r = 0;
            while (r < w.len[i]) {
                if (r + 1 < w.len[i] && s[r] == A && s[r + 1] == B) s[o++] = X, r += 2;
                else s[o++] = s[r++];
            }
            w.len[i] = o;
        }
    }
    free(cnt);
    free(w.sym);
    free(w.start);
    free(w.len);
    return k;
}

/* ---------------------------------------------------------------- tests */

int main(void) {
    tap_plan(PLAN);
    snprintf(root, sizeof root, "/tmp/tessera-tok-XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    char corpus[512], tok1[512], tok2[512], dir[512], part[512], tokdir[512], resave[512];
    path_of(corpus, "corpus.txt");
    path_of(tok1, "tok1.txt");
    path_of(tok2, "tok2.txt");
    path_of(dir, "parts");
    path_of(tokdir, "tokdir.txt");
    path_of(resave, "resaved.txt");
    text c = make_corpus(1, 600000, 20000, 0);
    write_all(corpus, c.p, c.n);

    /* 1. train: exact vocabulary size, bytes first, special last */
    char *a1[] = {"train", "--vocab-size", "1500", "--out", tok1, "--special", "<|endoftext|>",
                  corpus};
    int rc = run_train(8, a1);
    tap_ok(rc == 0, "train on a %zu-byte corpus exits 0 (rc %d)", c.n, rc);
    tap_ok(strstr(captured_out, "vocabulary 1500 = 256 bytes + 1243 merges + 1 specials") != NULL,
           "summary reports 256 bytes + 1243 merges + 1 special");
    uint64_t train_tokens = summary_tokens();
    tap_diag("%s", strtok(captured_out, "\n"));
    tsr_tokenizer *tok = NULL;
    rc = tokenizer_load(&tok, tok1);
    tap_ok(rc == 0 && tok, "the trained file loads");
    if (!tok) {
        printf("Bail out! no tokenizer\n");
        return 1;
    }
    tap_ok(tokenizer_vocab_size(tok) == 1500, "vocab size %u == 1500 as asked",
           tokenizer_vocab_size(tok));
    int bytes_ok = 1;
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t len;
        const uint8_t *b = tokenizer_token_bytes(tok, i, &len);
        bytes_ok &= b && len == 1 && b[0] == i;
    }
    tap_ok(bytes_ok, "ids 0..255 are the bytes 0..255");
    tap_ok(tokenizer_special_id(tok, "<|endoftext|>") == 1499, "<|endoftext|> is the last id (%u)",
           tokenizer_special_id(tok, "<|endoftext|>"));
    tap_ok(tokenizer_n_merges(tok) == 1243 && tokenizer_merges(tok)[0].result == 256 &&
               tokenizer_merges(tok)[1242].result == 1498,
           "merge k makes id 256 + k");

    /* 2. the training count agrees with encoding the whole text (specials allowed) */
    size_t enc = count_tokens(tok, c.p, c.n, 1);
    tap_ok(train_tokens == enc, "tokens counted in training (%llu) == tokens of encoding the text "
           "(%zu)", (unsigned long long)train_tokens, enc);
    tap_ok(enc < c.n / 2, "fewer tokens than half the bytes (%.3f tokens/byte)",
           (double)enc / (double)c.n);

    /* 3. round trips on varied text */
    static const char *samples[] = {
        "Hello, world! It's a test: don't we'll they're I'm you've he'd.",
        "Ünïcödé: café naïve größe — ∑ 日本語のテキスト 😀👍🏽 ἀλήθεια пример",
        "numbers 0 12 345 6789 3.14159 1e-9 0xFF",
        "  leading spaces, trailing spaces   \n\n\tand\ttabs\r\nand CRLF  ",
        "<|endoftext|>between<|endoftext|> documents <|endoftext|>",
        "kasen toriing Thelu shiqu mo'll: words of the corpus itself.",
        "a", "", " ", "\n",
    };
    int rt = 1;
    for (size_t k = 0; k < sizeof samples / sizeof *samples; k++) rt &= round_trip(tok, samples[k]);
    rt &= round_trip(tok, c.p);
    tap_ok(rt, "decode(encode(x)) == x for %zu texts and the whole corpus",
           sizeof samples / sizeof *samples);
    tap_ok(count_tokens(tok, "<|endoftext|>", 13, 1) == 1, "a special token encodes to one id");

    /* 4. determinism: a second run writes the same bytes */
    char *a2[] = {"train", "--vocab-size", "1500", "--out", tok2, "--special", "<|endoftext|>",
                  corpus};
    rc = run_train(8, a2);
    tap_ok(rc == 0 && same_file(tok1, tok2), "two runs give byte-identical files");

    /* 5. a directory input (files in sorted order, dot files skipped) equals the one file, when
     * split where a cut is exact (after a printable byte, before a newline) */
    mkdir(dir, 0755);
    size_t cut = c.n / 2;
    while (cut < c.n && !(c.p[cut] == '\n' && c.p[cut - 1] > ' ' && c.p[cut - 1] < 0x7f)) cut++;
    path_of(part, "parts/b.txt");
    write_all(part, c.p, cut);
    path_of(part, "parts/sub");
    mkdir(part, 0755);
    path_of(part, "parts/sub/c.txt");
    write_all(part, c.p + cut, c.n - cut);
    path_of(part, "parts/.hidden");
    write_all(part, "zzzz zzzz zzzz zzzz", 19);
    char *a3[] = {"train", "--vocab-size", "1500", "--out", tokdir, "--special", "<|endoftext|>",
                  dir};
    rc = run_train(8, a3);
    tap_ok(rc == 0 && same_file(tok1, tokdir), "a directory of two parts (+ a dot file) gives the "
           "same file as the whole text");

    /* 5b. the shared walk (fs_walk): a link to a directory is followed, a FIFO and a link loop are
     * skipped with a warning; linked/ = a.txt, fifo, loop -> ., rest -> parts/sub */
    char linked[512], tokln[512];
    path_of(linked, "linked");
    path_of(tokln, "linked.tok");
    mkdir(linked, 0755);
    path_of(part, "linked/a.txt");
    write_all(part, c.p, cut);
    path_of(part, "linked/fifo");
    mkfifo(part, 0600);
    path_of(part, "linked/loop");
    int ln = symlink(".", part);
    path_of(part, "linked/rest");
    ln |= symlink("../parts/sub", part);
    char *a3b[] = {"train", "--vocab-size", "1500", "--out", tokln, "--special", "<|endoftext|>",
                   linked};
    rc = run_train(8, a3b);
    path_of(part, "stderr.txt");
    size_t nw;
    char *warned = slurp(part, &nw);
    int said = warned && strstr(warned, "linked/fifo: a FIFO, skipped") &&
               strstr(warned, "linked/loop: a symbolic link loop");
    tap_ok(ln == 0 && rc == 0 && said && same_file(tok1, tokln), "a directory reached through a "
           "link, with a FIFO and a link loop beside it (each named in a warning), gives the same "
           "file as the whole text");
    free(warned);

    /* 6. tokenizer_save of the loaded tokenizer rewrites the file byte for byte */
    rc = tokenizer_save(tok, resave);
    tap_ok(rc == 0 && same_file(tok1, resave), "tokenizer_save(tokenizer_load(f)) == f");
    tokenizer_free(tok);

    /* 7. the loader refuses damaged files, naming the file and the fault */
    size_t n;
    char *good = slurp(tok1, &n);
    struct {
        const char *name, *what, *needle;
    } bad[] = {
        {"bad_magic.txt", "bad magic", "not a tessera tokenizer file"},
        {"bad_version.txt", "bad version", "format version 2"},
        {"bad_crc.txt", "checksum mismatch", "checksum mismatch"},
        {"truncated.txt", "truncated file", "truncated"},
        {"empty.txt", "empty file", "not a tessera tokenizer file"},
    };
    for (int k = 0; k < 5; k++) {
        char p[512];
        path_of(p, bad[k].name);
        char *b = malloc(n + 1);
        memcpy(b, good, n);
        size_t m = n;
        if (k == 0) b[0] = 'T';
        if (k == 1) b[strlen(TSR_TOKFILE_MAGIC) + 1] = '2';
        if (k == 2) { /* change one hex digit of token 300's bytes */
            char *t = strstr(b, "\nt 300 ");
            t[7] = t[7] == '6' ? '7' : '6';
        }
        if (k == 3) m = n / 2;
        if (k == 4) m = 0;
        write_all(p, b, m);
        free(b);
        tsr_tokenizer *t = NULL;
        rc = load_capture(&t, p);
        tap_ok(rc == TSR_EXIT_DATA && !t, "%s: refused with exit %d (expected 2)", bad[k].what, rc);
        tap_ok(strstr(captured_err, p) && strstr(captured_err, bad[k].needle),
               "%s: the message names the file and says '%s'", bad[k].what, bad[k].needle);
        if (!strstr(captured_err, bad[k].needle)) tap_diag("stderr: %s", captured_err);
        tokenizer_free(t);
    }
    /* a record error behind a valid checksum (a hand-edited file with its crc recomputed) */
    {
        char p[512], *b = malloc(n + 64);
        path_of(p, "bad_merge.txt");
        memcpy(b, good, n);
        char *m = strstr(b, "\nm ");
        char *sp = strchr(m + 3, ' ');
        sp[1] = sp[1] == '9' ? '8' : '9'; /* change the right id's first digit */
        size_t body = n - 16;
        int k = snprintf(b + body, 64, "crc32c %08x\n", tsr_crc32c(0, b, body));
        write_all(p, b, body + (size_t)k);
        free(b);
        tsr_tokenizer *t = NULL;
        rc = load_capture(&t, p);
        tap_ok(rc == TSR_EXIT_DATA && strstr(captured_err, p) && strstr(captured_err, "line") &&
                   strstr(captured_err, "merge"),
               "a merge whose bytes do not add up is refused with its line number");
        tokenizer_free(t);
    }
    free(good);

    /* 8. chunked counting: a 6 MB input (two 4 MiB chunks, with ill-formed UTF-8 that both read as
     * U+FFFD) counts as the whole text encodes */
    {
        char big[512], tokb[512];
        path_of(big, "big.txt");
        path_of(tokb, "tokbig.txt");
        text bt = make_corpus(7, 6000000, 3000, 1);
        write_all(big, bt.p, bt.n);
        char *a4[] = {"train", "--vocab-size", "3000", "--out", tokb, "--special",
                      "<|endoftext|>", big};
        double t0 = tsr_now();
        rc = run_train(8, a4);
        double dt = tsr_now() - t0;
        uint64_t counted = summary_tokens();
        tsr_tokenizer *t = NULL;
        tap_ok(rc == 0 && tokenizer_load(&t, tokb) == 0, "train on %zu bytes in %.2f s", bt.n, dt);
        size_t e = t ? count_tokens(t, bt.p, bt.n, 1) : 0;
        tap_ok(counted == e && e > 0, "chunked training count (%llu) == encoding the whole text "
               "(%zu)", (unsigned long long)counted, e);
        tap_ok(dt < 30, "training 6 MB to 3000 tokens takes seconds (%.2f s)", dt);
        tokenizer_free(t);
        free(bt.p);
    }

    /* 9. pruning: a 1 MB bound on a corpus with ~60k distinct words */
    {
        char wide[512], tokp[512];
        path_of(wide, "wide.txt");
        path_of(tokp, "tokprune.txt");
        text wt = make_corpus(3, 3000000, 400000, 0);
        write_all(wide, wt.p, wt.n);
        char *a5[] = {"train", "--vocab-size", "800", "--max-memory", "1", "--out", tokp, wide};
        rc = run_train(8, a5);
        tap_ok(rc == 0, "train with --max-memory 1 exits 0");
        tap_ok(strstr(captured_out, "pruned") && strstr(captured_err, "dropped"),
               "the summary and a warning say pieces were pruned");
        tsr_tokenizer *t = NULL;
        tap_ok(tokenizer_load(&t, tokp) == 0 && tokenizer_vocab_size(t) == 800,
               "the pruned run still gives a valid 800-token tokenizer");
        tap_ok(t && round_trip(t, samples[1]) && round_trip(t, wt.p),
               "it round-trips Unicode text and its corpus");
        tokenizer_free(t);
        free(wt.p);
    }

    /* 10. usage and input errors */
    {
        char tokx[512], missing[512];
        path_of(tokx, "x.txt");
        path_of(missing, "no-such-file.txt");
        char *a6[] = {"train", "--vocab-size", "256", "--out", tokx, corpus};
        tap_ok(run_train(6, a6) == TSR_EXIT_USAGE, "--vocab-size 256 (no room for merges) is a "
               "usage error");
        char *a7[] = {"train", "--vocab-size", "300", "--special", "<s>", "--special", "<s>",
                      "--out", tokx, corpus};
        tap_ok(run_train(10, a7) == TSR_EXIT_USAGE, "a repeated --special is a usage error");
        char *a8[] = {"train", "--vocab-size", "300", corpus};
        tap_ok(run_train(4, a8) == TSR_EXIT_USAGE, "a missing --out is a usage error");
        char *a9[] = {"train", "--vocab-size", "300", "--out", tokx, missing};
        rc = run_train(6, a9);
        tap_ok(rc == TSR_EXIT_DATA && strstr(captured_err, missing),
               "a missing input is a data error naming it");
        /* too little text: fewer merges than asked, a warning, still a valid file */
        char tiny[512];
        path_of(tiny, "tiny.txt");
        write_all(tiny, "hello hello hello world", 23);
        char *a10[] = {"train", "--vocab-size", "1000", "--out", tokx, tiny};
        rc = run_train(6, a10);
        tsr_tokenizer *t = NULL;
        tap_ok(rc == 0 && strstr(captured_err, "stopped after") && tokenizer_load(&t, tokx) == 0 &&
                   tokenizer_vocab_size(t) < 1000 && round_trip(t, "hello world"),
               "too little text: fewer merges, a warning, a valid file");
        tokenizer_free(t);
        char *a11[] = {"train", "--vocab-size", "300", "--min-frequency", "0", "--out", tokx,
                       corpus};
        tap_ok(run_train(8, a11) == TSR_EXIT_USAGE, "--min-frequency 0 is a usage error");
    }

    /* 11. tokenizer_save_parts validates what it writes */
    {
        char p[512];
        path_of(p, "parts.txt");
        uint8_t b0 = 'a', b1 = 'b', b2[2] = {'a', 'c'};
        const uint8_t *toks[] = {&b0, &b1, b2};
        uint32_t lens[] = {1, 1, 2};
        tsr_merge m = {0, 1, 2}; /* "a" + "b" != "ac" */
        fflush(stderr);
        int se = dup(2), dn = open("/dev/null", O_WRONLY);
        dup2(dn, 2);
        rc = tokenizer_save_parts(p, 3, toks, lens, 1, &m, 0, NULL, NULL);
        dup2(se, 2);
        close(se), close(dn);
        struct stat st;
        tap_ok(rc == TSR_EXIT_USAGE && stat(p, &st) != 0,
               "tokenizer_save_parts refuses a merge that is not a concatenation, writes nothing");
        b2[1] = 'b';
        rc = tokenizer_save_parts(p, 3, toks, lens, 1, &m, 0, NULL, NULL);
        tsr_tokfile_parts tp;
        int r2 = tokfile_read(&tp, p);
        tap_ok(rc == 0 && r2 == 0 && tp.n_tokens == 3 && tp.n_merges == 1 && tp.len[2] == 2 &&
                   tp.merges[0].result == 2 && tp.n_specials == 0,
               "a 3-token vocabulary without byte tokens saves and reads back");
        if (r2 == 0) tokfile_parts_free(&tp);
    }

    /* 13. the oracle: the same merges as the reference trainer, on a slice of the corpus and on
     * words of a's and b's (overlapping pairs: "aaa", "abab") */
    {
        text adv = {0};
        rng_state = 99;
        for (int i = 0; i < 4000; i++) {
            char wd[40];
            int L = 1 + (int)(rng() % 30);
            for (int j = 0; j < L; j++) wd[j] = "aab"[rng() % 3];
            wd[L] = '\0';
            put(&adv, i % 50 == 49 ? "\n" : " ");
            put(&adv, wd);
        }
        const char *name[2] = {"corpus slice (40 kB)", "a/b words"};
        const char *txt[2] = {c.p, adv.p};
        size_t len2[2] = {40000, adv.n};
        while (len2[0] < c.n && c.p[len2[0]] != '\n') len2[0]++;
        for (int k = 0; k < 2; k++) {
            char in[512], out[512], vs[16];
            path_of(in, "oracle.txt");
            path_of(out, "oracle.tok");
            write_all(in, txt[k], len2[k]);
            uint32_t want = 300;
            tsr_merge ref[300];
            uint32_t nref = ref_train(txt[k], len2[k], want, ref);
            snprintf(vs, sizeof vs, "%u", 256 + want);
            char *a12[] = {"train", "--vocab-size", vs, "--out", out, in};
            rc = run_train(6, a12);
            tsr_tokfile_parts tp;
            int same = rc == 0 && tokfile_read(&tp, out) == 0;
            if (same) {
                same = tp.n_merges == nref && memcmp(tp.merges, ref, nref * sizeof *ref) == 0;
                tokfile_parts_free(&tp);
            }
            tap_ok(same, "%s: the same %u merges as the reference trainer", name[k], nref);
        }
        free(adv.p);
    }

    /* 12. GPT-2's tokenizer (when ./INSTALL fetched it) survives tokenizer_save -> tokenizer_load:
     * the same ids on the corpus and the samples */
    {
        const char *d = getenv("TSR_DATA_DIR");
        char g[512], p[512];
        snprintf(g, sizeof g, "%s/gpt2/vocab.bpe", d && *d ? d : "data/npm");
        path_of(p, "gpt2.tok");
        struct stat st;
        if (stat(g, &st) != 0) {
            tap_skip("GPT-2 through tessera's format", "GPT-2 files absent (./INSTALL --ensure)");
        } else {
            tsr_tokenizer *g2 = NULL, *back = NULL;
            int ok = tokenizer_open(&g2, "gpt2") == 0 && tokenizer_save(g2, p) == 0 &&
                     tokenizer_load(&back, p) == 0;
            size_t same = 0, total = 0;
            for (size_t k = 0; ok && k <= sizeof samples / sizeof *samples; k++) {
                const char *x = k < sizeof samples / sizeof *samples ? samples[k] : c.p;
                size_t xn = strlen(x);
                uint32_t *i1 = NULL, *i2 = NULL;
                size_t n1 = 0, n2 = 0, c1 = 0, c2 = 0;
                tokenizer_encode(g2, (const uint8_t *)x, xn, 1, &i1, &n1, &c1);
                tokenizer_encode(back, (const uint8_t *)x, xn, 1, &i2, &n2, &c2);
                same += n1 == n2 && (n1 == 0 || memcmp(i1, i2, n1 * sizeof *i1) == 0);
                total++;
                free(i1);
                free(i2);
            }
            tap_ok(ok && same == total && tokenizer_vocab_size(back) == 50257 &&
                       tokenizer_special_id(back, "<|endoftext|>") == 50256,
                   "GPT-2 saved in tessera's format and loaded back encodes %zu of %zu texts "
                   "identically", same, total);
            tokenizer_free(g2);
            tokenizer_free(back);
        }
    }

    free(c.p);
    rm_rf(root);
    return tap_done();
}
