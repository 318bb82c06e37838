/* test_data.c — the data layer: CRC32C, shard writer/reader roundtrips, corruption detection,
 * the Feistel sampler, and the shard/synth commands. Fixtures live in a mkdtemp directory under
 * /tmp that is removed at the end. Token fixture: token(i) = (7919 i + 13) mod V, mask(i) =
 * (i mod 3 != 0), for the global token index i. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "crc32c.h"
#include "data/data.h"
#include "data/data_cmd.h"
#include "tap.h"
#include "testfs.h"

#define PLAN 84

static char root[256];

/* ---------------------------------------------------------------- helpers */

static uint64_t rng_state = 0x1234567887654321ull;
static uint64_t rng(void) { return rng_state = tsr_hash64(rng_state); }

static uint32_t fix_token(uint64_t i, uint32_t vocab) {
    return (uint32_t)((i * 7919u + 13u) % vocab);
}
static uint8_t fix_mask(uint64_t i) { return (uint8_t)(i % 3 != 0); }

/* snprintf into an array, failing the test program on truncation. */
#define FMT(buf, ...)                                                                      \
    do {                                                                                   \
        if (snprintf(buf, sizeof buf, __VA_ARGS__) >= (int)sizeof buf) {                   \
            fprintf(stderr, "test_data: path too long\n");                                 \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static void spit(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (buf && n) fwrite(buf, 1, n, f);
    fclose(f);
}

static void patch(const char *path, long off, const void *bytes, size_t n) {
    int fd = open(path, O_WRONLY);
    if (pwrite(fd, bytes, n, off) != (ssize_t)n) perror(path);
    close(fd);
}

static void copy_dir(const char *src, const char *dst) {
    mkdir(dst, 0777);
    DIR *d = opendir(src);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char a[512], b[512];
        size_t n = 0;
        pjoin(a, src, e->d_name);
        pjoin(b, dst, e->d_name);
        char *buf = slurp(a, &n);
        spit(b, buf, n);
        free(buf);
    }
    closedir(d);
}

static int has(const char *text, const char *a, const char *b) {
    return strstr(text, a) && (!b || strstr(text, b));
}

/* Writes the fixture dataset: n tokens, appended in pieces of 37. */
static int write_fixture(const char *dir, uint32_t vocab, int mask, uint64_t shard_tokens,
                         uint64_t n) {
    tsr_dataset_writer *w;
    if (dataset_writer_open(&w, dir, vocab, mask, shard_tokens)) return 1;
    uint32_t tok[37];
    uint8_t m[37];
    for (uint64_t i = 0; i < n;) {
        size_t k = 0;
        for (; k < 37 && i < n; k++, i++) {
            tok[k] = fix_token(i, vocab);
            m[k] = fix_mask(i);
        }
        if (dataset_writer_append(w, tok, mask ? m : NULL, k)) {
            dataset_writer_abort(w);
            return 1;
        }
    }
    return dataset_writer_close(w);
}

/* Checks every sample of length T against the fixture; returns the number of mismatches. */
static long check_all_samples(const tsr_dataset *ds, int T, uint32_t vocab, int mask,
                              uint64_t shard_tokens, uint64_t n) {
    int32_t in[512], tg[512];
    long bad = 0;
    uint64_t i = 0;
    for (uint64_t s0 = 0; s0 < n; s0 += shard_tokens) {
        uint64_t len = n - s0 < shard_tokens ? n - s0 : shard_tokens;
        for (uint64_t k = 0; len && k < (len - 1) / (uint64_t)T; k++, i++) {
            int kept = dataset_read_sample(ds, T, i, in, tg), want_kept = 0;
            for (int j = 0; j < T; j++) {
                uint64_t g = s0 + k * (uint64_t)T + (uint64_t)j;
                int32_t want_t = (!mask || fix_mask(g + 1)) ? (int32_t)fix_token(g + 1, vocab) : -1;
                want_kept += want_t >= 0;
                bad += in[j] != (int32_t)fix_token(g, vocab);
                bad += tg[j] != want_t;
            }
            bad += kept != want_kept;
        }
    }
    bad += i != dataset_n_samples(ds, T);
    return bad;
}

/* ---------------------------------------------------------------- CRC32C */

static uint32_t crc_bitwise(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}

static void test_crc(void) {
    const char *s = "123456789";
    tap_ok(tsr_crc32c(0, s, 9) == 0xE3069283u, "crc32c(\"123456789\") = 0x%08x, expected 0xE3069283",
           tsr_crc32c(0, s, 9));
    tap_ok(tsr_crc32c_sw(0, s, 9) == 0xE3069283u, "table crc32c of the check string");
    tap_ok(tsr_crc32c(tsr_crc32c(0, s, 4), s + 4, 5) == 0xE3069283u, "crc32c chains across calls");
    uint8_t *buf = malloc(5000);
    for (int i = 0; i < 5000; i++) buf[i] = (uint8_t)rng();
    int bad_ref = 0, bad_hw = 0;
    for (int t = 0; t < 300; t++) {
        size_t off = rng() % 16, len = (rng() % 2400) | 1; /* odd lengths, any alignment */
        uint32_t ref = crc_bitwise(buf + off, len);
        bad_ref += tsr_crc32c_sw(0, buf + off, len) != ref;
        bad_hw += tsr_crc32c(0, buf + off, len) != ref;
    }
    tap_ok(bad_ref == 0, "table crc32c matches a bitwise reference on 300 odd-length buffers "
           "(%d wrong)", bad_ref);
    if (tsr_crc32c_hw())
        tap_ok(bad_hw == 0, "the CPU's crc32c instruction (SSE4.2, ARMv8 CRC) matches the table "
               "and the reference (%d wrong)", bad_hw);
    else
        tap_skip("the CPU's crc32c instruction matches the table",
                 "CPU has no SSE4.2 / ARMv8 CRC; table path only");
    tap_ok(tsr_crc32c(0, buf, 0) == 0 && tsr_crc32c(0x1234, buf, 0) == 0x1234,
           "crc32c of zero bytes leaves the value unchanged");
    free(buf);
}

/* ---------------------------------------------------------------- roundtrip */

static void test_roundtrip_one(uint32_t vocab, int mask) {
    char dir[512], name[64], shard[512];
    snprintf(name, sizeof name, "rt-%u-%d", vocab, mask);
    pjoin(dir, root, name);
    const uint64_t n = 1000, st = 300; /* shards of 300, 300, 300, 100 tokens */
    const char *what = vocab > 65536 ? "uint32" : "uint16";
    tap_ok(write_fixture(dir, vocab, mask, st, n) == 0 && !exists(strcat(strcpy(shard, dir), ".tmp")),
           "%s mask=%d: writer roundtrip writes %s, no .tmp left", what, mask, name);
    tsr_dataset *ds = NULL;
    int rc = dataset_open(&ds, dir, 1);
    tap_ok(rc == 0 && ds && dataset_vocab_size(ds) == vocab && dataset_n_tokens(ds) == n &&
               dataset_n_shards(ds) == 4 && dataset_has_mask(ds) == mask,
           "%s mask=%d: opens with verify; vocab, tokens, 4 shards, mask flag", what, mask);
    if (rc) {
        for (int k = 0; k < 4; k++) tap_ok(0, "%s mask=%d: (dataset did not open)", what, mask);
        return;
    }
    pjoin(shard, dir, "shard-00003.bin");
    struct stat stt = {0};
    uint64_t w = vocab > 65536 ? 4 : 2, want = 64 + 100 * w + (mask ? 100 : 0);
    int st_rc = stat(shard, &stt);
    tap_ok(st_rc == 0 && (uint64_t)stt.st_size == want,
           "%s mask=%d: last shard is %lld bytes, expected %llu (%llu-byte tokens)", what, mask,
           (long long)stt.st_size, (unsigned long long)want, (unsigned long long)w);
    tap_ok(dataset_n_samples(ds, 7) == 3 * 42 + 14 && dataset_n_samples(ds, 1) == 3 * 299 + 99 &&
               dataset_n_samples(ds, 400) == 0,
           "%s mask=%d: sample counts (T=7: %llu, T=1, T=400: none)", what, mask,
           (unsigned long long)dataset_n_samples(ds, 7));
    long bad = check_all_samples(ds, 7, vocab, mask, st, n) + check_all_samples(ds, 1, vocab, mask, st, n) +
               check_all_samples(ds, 99, vocab, mask, st, n);
    tap_ok(bad == 0, "%s mask=%d: every sample (T=1, 7, 99) has the right inputs, targets, -1 "
           "for masked targets, and kept count (%ld wrong)", what, mask, bad);
    int32_t in[8], tg[8];
    int ok = dataset_read_sample(ds, 7, 42, in, tg) >= 0 && in[0] == (int32_t)fix_token(300, vocab);
    cap_begin();
    int r = dataset_read_sample(ds, 7, 140, in, tg);
    const char *err = cap_end();
    tap_ok(ok && r == -1 && has(err, "out of range", NULL),
           "%s mask=%d: sample 42 starts shard 1; sample 140 is out of range: %s", what, mask, err);
    dataset_close(ds);
}

typedef struct reader_arg {
    const tsr_dataset *ds;
    long bad;
} reader_arg;

static void *reader_thread(void *p) {
    reader_arg *a = p;
    a->bad = check_all_samples(a->ds, 5, 1000, 1, 300, 1000);
    return NULL;
}

static void test_roundtrip(void) {
    test_roundtrip_one(1000, 0);
    test_roundtrip_one(1000, 1);
    test_roundtrip_one(70000, 0);
    test_roundtrip_one(70000, 1);
    /* Concurrent first use of the same T from several threads. */
    char dir[512];
    pjoin(dir, root, "rt-1000-1");
    tsr_dataset *ds;
    long bad = dataset_open(&ds, dir, 0) ? 1 : 0;
    if (!bad) {
        pthread_t th[4];
        reader_arg args[4];
        for (int k = 0; k < 4; k++) {
            args[k] = (reader_arg){ds, 0};
            pthread_create(&th[k], NULL, reader_thread, &args[k]);
        }
        for (int k = 0; k < 4; k++) {
            pthread_join(th[k], NULL);
            bad += args[k].bad;
        }
        dataset_close(ds);
    }
    tap_ok(bad == 0, "4 threads reading all samples with the same new T agree with the fixture");
}

/* ---------------------------------------------------------------- writer refusals */

static void test_writer_errors(void) {
    char dir[512], tmp[512], junk[512];
    tsr_dataset_writer *w = NULL;
    pjoin(dir, root, "rt-1000-0");
    cap_begin();
    int rc = dataset_writer_open(&w, dir, 1000, 0, 100);
    const char *err = cap_end();
    tap_ok(rc == TSR_EXIT_DATA && !w && has(err, dir, "already exists"),
           "writer refuses an existing directory: %s", err);

    pjoin(dir, root, "stale");
    FMT(tmp, "%s.tmp", dir);
    mkdir(tmp, 0777);
    pjoin(junk, tmp, "shard-00000.bin");
    spit(junk, "xx", 2);
    cap_begin();
    rc = write_fixture(dir, 1000, 0, 100, 250);
    cap_end();
    tap_ok(rc == 0 && exists(dir) && !exists(tmp), "a stale DIR.tmp of the writer's files is removed");

    pjoin(dir, root, "foreign");
    FMT(tmp, "%s.tmp", dir);
    mkdir(tmp, 0777);
    pjoin(junk, tmp, "notes.txt");
    spit(junk, "keep me", 7);
    cap_begin();
    rc = dataset_writer_open(&w, dir, 1000, 0, 100);
    err = cap_end();
    tap_ok(rc == TSR_EXIT_DATA && exists(junk) && has(err, tmp, NULL),
           "a DIR.tmp holding other files is kept and reported: %s", err);

    pjoin(dir, root, "empty");
    tsr_dataset *ds = NULL;
    rc = write_fixture(dir, 7, 1, 100, 0);
    int rc2 = rc ? 1 : dataset_open(&ds, dir, 1);
    tap_ok(rc == 0 && rc2 == 0 && dataset_n_shards(ds) == 0 && dataset_n_tokens(ds) == 0 &&
               dataset_n_samples(ds, 4) == 0,
           "an empty dataset round-trips: 0 shards, 0 tokens, 0 samples");
    if (ds) dataset_close(ds);

    pjoin(dir, root, "badtok");
    uint32_t toks[3] = {1, 2, 1000};
    rc = dataset_writer_open(&w, dir, 1000, 0, 100);
    cap_begin();
    rc2 = rc ? 0 : dataset_writer_append(w, toks, NULL, 3);
    err = cap_end();
    tap_ok(rc == 0 && rc2 == TSR_EXIT_DATA && has(err, "1000", "vocab size 1000"),
           "append rejects a token >= vocab: %s", err);
    if (!rc) dataset_writer_abort(w);
    FMT(tmp, "%s.tmp", dir);
    tap_ok(!exists(dir) && !exists(tmp), "abort leaves neither DIR nor DIR.tmp");
}

/* ---------------------------------------------------------------- reader rejections */

/* Recomputes the header CRC of a shard after a patch. */
static void fix_header_crc(const char *path) {
    uint8_t h[64];
    int fd = open(path, O_RDWR);
    if (pread(fd, h, 64, 0) != 64) perror(path);
    uint32_t c = tsr_crc32c(0, h, 60);
    if (pwrite(fd, &c, 4, 60) != 4) perror(path); /* little-endian host */
    close(fd);
}

/* Replaces the first occurrence of `from` by `to` (same length) in a text file. */
static void edit_text(const char *path, const char *from, const char *to) {
    size_t n;
    char *t = slurp(path, &n);
    char *at = strstr(t, from);
    if (at && strlen(from) == strlen(to)) memcpy(at, to, strlen(to));
    else fprintf(stderr, "edit_text: '%s' not found in %s\n", from, path);
    spit(path, t, n);
    free(t);
}

static const char *corrupt_dir(const char *name, char *dir, char *file, const char *shard) {
    char good[512];
    pjoin(good, root, "rt-1000-0");
    pjoin(dir, root, name);
    copy_dir(good, dir);
    pjoin(file, dir, shard);
    return file;
}

/* dataset_open must fail with TSR_EXIT_DATA and a message holding both strings. */
static void expect_open_fail(const char *dir, int verify, const char *file, const char *a,
                             const char *b, const char *what) {
    tsr_dataset *ds = NULL;
    cap_begin();
    int rc = dataset_open(&ds, dir, verify);
    const char *err = cap_end();
    tap_ok(rc == TSR_EXIT_DATA && !ds && has(err, file, a) && (!b || strstr(err, b)),
           "rejects %s: %s", what, err);
    if (ds) dataset_close(ds);
}

static void test_reader_errors(void) {
    char dir[512], f[512], g[512];
    uint8_t byte;
    uint32_t u32;

    corrupt_dir("bad-magic", dir, f, "shard-00001.bin");
    patch(f, 0, "X", 1);
    expect_open_fail(dir, 0, f, "bad magic", NULL, "bad magic");

    corrupt_dir("bad-version", dir, f, "shard-00001.bin");
    u32 = 2;
    patch(f, 8, &u32, 4);
    fix_header_crc(f);
    expect_open_fail(dir, 0, f, "version 2", NULL, "a future format version");

    corrupt_dir("bad-hcrc", dir, f, "shard-00002.bin");
    byte = 0x55;
    patch(f, 33, &byte, 1);
    expect_open_fail(dir, 0, f, "header checksum mismatch", NULL, "a header checksum mismatch");

    corrupt_dir("bad-pcrc", dir, f, "shard-00000.bin");
    byte = 0xEE;
    patch(f, 64 + 101, &byte, 1);
    expect_open_fail(dir, 1, f, "payload checksum mismatch", NULL,
                     "a flipped payload byte (verify)");
    tsr_dataset *ds = NULL;
    int rc = dataset_open(&ds, dir, 0);
    tap_ok(rc == 0, "without verify, a payload flip is not looked for (O(1) open)");
    dataset_close(ds);

    corrupt_dir("truncated", dir, f, "shard-00001.bin");
    rc = truncate(f, 64 + 600 - 10);
    expect_open_fail(dir, 0, f, "truncated: file is 654 bytes", "header says 664",
                     "a truncated file");

    corrupt_dir("trailing", dir, f, "shard-00003.bin");
    FILE *fp = fopen(f, "ab");
    fputc(0, fp);
    fclose(fp);
    expect_open_fail(dir, 0, f, "trailing bytes", NULL, "trailing bytes");

    corrupt_dir("tiny", dir, f, "shard-00003.bin");
    rc = truncate(f, 10);
    expect_open_fail(dir, 0, f, "truncated", "smaller than the 64-byte header",
                     "a file shorter than a header");

    corrupt_dir("missing", dir, f, "shard-00002.bin");
    unlink(f);
    expect_open_fail(dir, 0, f, "cannot open", NULL, "a missing shard");

    corrupt_dir("no-index", dir, f, "index.tsv");
    unlink(f);
    expect_open_fail(dir, 0, f, "cannot open", NULL, "a missing index");

    corrupt_dir("index-magic", dir, f, "index.tsv");
    edit_text(f, "tessera-dataset", "tessera-datasex");
    expect_open_fail(dir, 0, f, ":1:", "bad magic", "an index with a bad magic line");

    corrupt_dir("index-version", dir, f, "index.tsv");
    edit_text(f, "tessera-dataset\t1", "tessera-dataset\t7");
    expect_open_fail(dir, 0, f, "version 7", NULL, "an index of another format version");

    corrupt_dir("index-key", dir, f, "index.tsv");
    edit_text(f, "has_mask", "has_mast");
    expect_open_fail(dir, 0, f, "expected 'has_mask <number>'", NULL,
                     "an index with a wrong key");

    corrupt_dir("index-mask3", dir, f, "index.tsv");
    edit_text(f, "has_mask\t0", "has_mask\t3");
    expect_open_fail(dir, 0, f, "has_mask 3, expected 0, 1 or 2", NULL, "has_mask 3");

    corrupt_dir("index-mask2", dir, f, "index.tsv");
    edit_text(f, "has_mask\t0", "has_mask\t2");
    pjoin(g, dir, "shard-00000.bin");
    expect_open_fail(dir, 0, g, "flags 0x0, expected 0x3", NULL,
                     "has_mask 2 (segment starts) over shards without them");

    corrupt_dir("index-sum", dir, f, "index.tsv");
    edit_text(f, "n_tokens\t1000", "n_tokens\t1001");
    expect_open_fail(dir, 0, f, "add up to 1000", NULL, "an index whose total disagrees");

    corrupt_dir("index-cut", dir, f, "index.tsv");
    edit_text(f, "end", "#nd");
    expect_open_fail(dir, 0, f, "incomplete index", NULL, "an index cut before 'end'");

    corrupt_dir("index-row", dir, f, "index.tsv");
    edit_text(f, "shard\tshard-00001.bin\t300", "shard\tshard-00001.bin\t299");
    edit_text(f, "n_tokens\t1000", "n_tokens\t0999");
    pjoin(g, dir, "shard-00001.bin");
    expect_open_fail(dir, 0, g, "300 tokens, the index says 299", NULL,
                     "a shard header that disagrees with the index");

    corrupt_dir("index-path", dir, f, "index.tsv");
    edit_text(f, "shard-00001.bin", "../hard-001.bin");
    expect_open_fail(dir, 0, f, "not a plain file name", NULL, "a shard name with a path");

    /* A valid-checksum shard with a token >= vocab: patch, then re-seal payload and header CRCs. */
    corrupt_dir("bad-token", dir, f, "shard-00000.bin");
    uint16_t big = 2000;
    patch(f, 64 + 2 * 5, &big, 2);
    size_t n;
    char *bytes = slurp(f, &n);
    uint32_t old_crc, new_crc = tsr_crc32c(0, bytes + 64, n - 64);
    memcpy(&old_crc, bytes + 56, 4);
    free(bytes);
    patch(f, 56, &new_crc, 4);
    fix_header_crc(f);
    char from[16], to[16];
    snprintf(from, sizeof from, "%08x", old_crc);
    snprintf(to, sizeof to, "%08x", new_crc);
    pjoin(g, dir, "index.tsv");
    edit_text(g, from, to);
    expect_open_fail(dir, 1, f, "token 2000 at position 5", "vocab size 1000",
                     "a token >= vocab (verify)");
    ds = NULL;
    rc = dataset_open(&ds, dir, 0);
    int32_t in[7], tg[7];
    int r = 0;
    const char *msg = "";
    if (!rc) {
        cap_begin();
        r = dataset_read_sample(ds, 7, 0, in, tg);
        msg = cap_end();
        dataset_close(ds);
    }
    tap_ok(rc == 0 && r == -1, "without verify, reading the sample with the bad token fails: %s",
           msg);
}

static void test_reader_readonly(void) {
    char dir[512], copy[512], a[512], b[512];
    pjoin(dir, root, "rt-70000-1");
    pjoin(copy, root, "ro-copy");
    copy_dir(dir, copy);
    struct stat before[5], after[5];
    const char *names[5] = {"index.tsv", "shard-00000.bin", "shard-00001.bin", "shard-00002.bin",
                            "shard-00003.bin"};
    for (int k = 0; k < 5; k++) {
        pjoin(a, dir, names[k]);
        stat(a, &before[k]);
    }
    tsr_dataset *ds;
    int rc = dataset_open(&ds, dir, 1);
    if (!rc) {
        check_all_samples(ds, 3, 70000, 1, 300, 1000);
        dataset_close(ds);
    }
    int same = rc == 0;
    for (int k = 0; k < 5; k++) {
        pjoin(a, dir, names[k]);
        pjoin(b, copy, names[k]);
        stat(a, &after[k]);
        same &= same_file(a, b) && before[k].st_mtim.tv_sec == after[k].st_mtim.tv_sec &&
                before[k].st_mtim.tv_nsec == after[k].st_mtim.tv_nsec;
    }
    tap_ok(same, "the reader leaves every file's bytes and mtime unchanged");
}

/* ---------------------------------------------------------------- sampler */

static int is_permutation(uint64_t seed, uint64_t epoch, uint64_t n, uint8_t *seen) {
    memset(seen, 0, (size_t)(n + 7) / 8);
    for (uint64_t p = 0; p < n; p++) {
        uint64_t x = sampler_permute(seed, epoch, n, p);
        if (x >= n || (seen[x / 8] >> (x % 8) & 1)) return 0;
        seen[x / 8] |= (uint8_t)(1u << (x % 8));
    }
    return 1;
}

static void test_sampler(void) {
    uint8_t *seen = malloc((1 << 21) / 8 + 1);
    int bad = 0;
    for (uint64_t n = 1; n <= 300; n++)
        for (uint64_t seed = 0; seed < 3; seed++)
            for (uint64_t e = 0; e < 2; e++) bad += !is_permutation(seed * 977 + 1, e, n, seen);
    tap_ok(bad == 0, "sampler_permute is a bijection of [0, n) for n = 1..300, 3 seeds, 2 epochs "
           "(%d failures)", bad);
    tap_ok(is_permutation(42, 3, 1000000, seen) && is_permutation(7, 0, 1 << 20, seen) &&
               is_permutation(7, 0, (1 << 20) + 1, seen),
           "bijection for n = 10^6, 2^20 and 2^20 + 1 (bitmap)");
    free(seen);

    const uint64_t n = 1000;
    int diff_epoch = 0, diff_seed = 0, fixed = 0, same_again = 1;
    for (uint64_t p = 0; p < n; p++) {
        uint64_t x = sampler_permute(5, 0, n, p);
        diff_epoch += x != sampler_permute(5, 1, n, p);
        diff_seed += x != sampler_permute(6, 0, n, p);
        fixed += x == p;
        same_again &= x == sampler_permute(5, 0, n, p);
    }
    tap_ok(diff_epoch > 900, "epochs 0 and 1 give different orders (%d of 1000 positions differ)",
           diff_epoch);
    tap_ok(diff_seed > 900, "seeds 5 and 6 give different orders (%d of 1000 positions differ)",
           diff_seed);
    tap_ok(fixed < 20 && same_again, "the order is shuffled (%d fixed points) and reproducible",
           fixed);

    tsr_sampler id = {.n = 37, .seed = 9, .shuffle = 0}, sh = {.n = 37, .seed = 9, .shuffle = 1};
    int bad_id = 0, bad_sh = 0;
    for (uint64_t g = 0; g < 37 * 4; g++) {
        bad_id += sampler_index(&id, g) != g % 37;
        bad_sh += sampler_index(&sh, g) != sampler_permute(9, g / 37, 37, g % 37);
    }
    tap_ok(bad_id == 0, "sampler_index is g mod n without shuffle");
    tap_ok(bad_sh == 0, "sampler_index(g) = permute(seed, g / n, n, g mod n) with shuffle");

    /* W-independence: rank r of W takes positions s*GB + r*GB/W + j, j < GB/W. */
    enum { GB = 16, STEPS = 200 };
    tsr_sampler s = {.n = 1000, .seed = 11, .shuffle = 1};
    static uint64_t seq[3][STEPS * GB];
    const int Ws[3] = {1, 2, 4};
    for (int wi = 0; wi < 3; wi++) {
        int W = Ws[wi], per = GB / W;
        for (uint64_t step = 0; step < STEPS; step++)
            for (int r = 0; r < W; r++)
                for (int j = 0; j < per; j++)
                    seq[wi][step * GB + (uint64_t)(r * per + j)] =
                        sampler_index(&s, step * GB + (uint64_t)(r * per + j));
    }
    tap_ok(memcmp(seq[0], seq[1], sizeof seq[0]) == 0 && memcmp(seq[0], seq[2], sizeof seq[0]) == 0,
           "global batches assembled from W = 1, 2, 4 ranks are identical over 3.2 epochs");

    const uint64_t big = (1ull << 40) + 17, p0 = 1000000000000ull;
    uint64_t x = sampler_permute(3, 2, big, p0);
    uint64_t win[4096];
    int ok = x < big;
    for (int k = 0; k < 4096; k++) {
        win[k] = sampler_permute(3, 2, big, p0 + (uint64_t)k);
        ok &= win[k] < big;
        for (int j = 0; j < k && ok; j++) ok &= win[j] != win[k];
    }
    tap_ok(ok, "n = 2^40 + 17: position 10^12 maps into range; 4096 neighbours are distinct");
}

/* ---------------------------------------------------------------- commands */

static int run_cmd(int (*cmd)(int, char **), const char *line) {
    char buf[1024], *argv[32];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *t = strtok(buf, " "); t && argc < 31; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    return cmd(argc, argv);
}

static void test_commands(void) {
    char a[512], b[512], c[512], fa[512], fb[512], line[1024];
    pjoin(a, root, "nested/deeper/syn-a"); /* synth creates missing parents */
    pjoin(b, root, "syn-b");
    pjoin(c, root, "syn-c");
    FMT(line, "synth -q --out %s --tokens 100000 --shard-tokens 30000", a);
    int ra = run_cmd(cmd_synth, line);
    FMT(line, "synth -q -o %s --tokens 100000 --shard-tokens 30000 -S 1 --vocab 512 --val-tokens 10000", b);
    int rb = run_cmd(cmd_synth, line);
    FMT(line, "synth -q -o %s --tokens 100000 --shard-tokens 30000 -S 2", c);
    int rc = run_cmd(cmd_synth, line);
    int same = ra == 0 && rb == 0;
    const char *names[7] = {"train/index.tsv", "train/shard-00000.bin", "train/shard-00001.bin",
                            "train/shard-00002.bin", "train/shard-00003.bin", "val/index.tsv",
                            "val/shard-00000.bin"};
    for (int k = 0; k < 7; k++) {
        pjoin(fa, a, names[k]);
        pjoin(fb, b, names[k]);
        same &= same_file(fa, fb);
    }
    tap_ok(same, "synth: the same arguments give byte-identical train (4 shards) and val datasets");
    pjoin(fa, a, "train/shard-00001.bin");
    pjoin(fb, c, "train/shard-00001.bin");
    tap_ok(rc == 0 && !same_file(fa, fb), "synth: another seed gives another corpus");
    tsr_dataset *ds;
    pjoin(fa, a, "train");
    int r = dataset_open(&ds, fa, 1);
    int32_t in[64], tg[64];
    int eod = 0, range = 1;
    if (!r) {
        for (uint64_t i = 0; i < dataset_n_samples(ds, 64); i++) {
            dataset_read_sample(ds, 64, i, in, tg);
            for (int j = 0; j < 64; j++) {
                eod += in[j] == 511;
                range &= in[j] >= 0 && in[j] < 512;
            }
        }
    }
    tap_ok(r == 0 && dataset_n_tokens(ds) == 100000 && dataset_n_shards(ds) == 4 && range &&
               eod > 100 && eod < 1000,
           "synth: train verifies, 100000 tokens in 4 shards, ids < 512, %d end-of-document tokens",
           eod);
    if (!r) dataset_close(ds);
    pjoin(fa, a, "val");
    r = dataset_open(&ds, fa, 1);
    int32_t in2[64], tg2[64];
    int differs = 0;
    if (!r) {
        tsr_dataset *tr;
        pjoin(fb, a, "train");
        if (dataset_open(&tr, fb, 0) == 0) {
            dataset_read_sample(ds, 64, 0, in, tg);
            dataset_read_sample(tr, 64, 0, in2, tg2);
            differs = memcmp(in, in2, sizeof in) != 0;
            dataset_close(tr);
        }
    }
    tap_ok(r == 0 && dataset_n_tokens(ds) == 10000 && dataset_n_shards(ds) == 1 && differs,
           "synth: val (default N/10 = 10000 tokens) verifies and is not a copy of train");
    if (!r) dataset_close(ds);

    /* shard: text with a mask, two files, a token per line and several per line. */
    pjoin(fa, root, "in1.txt");
    pjoin(fb, root, "in2.txt");
    spit(fa, "5:1 6:0\n7:1\t8:1\n", 16);
    spit(fb, "  9:0\n\n10:1 11:1", 16);
    pjoin(a, root, "sh-mask");
    FMT(line, "shard -q --mask --vocab 12 --out %s %s %s", a, fa, fb);
    r = run_cmd(cmd_shard, line);
    int ok = r == 0 && dataset_open(&ds, a, 1) == 0;
    if (ok) {
        int kept = dataset_read_sample(ds, 6, 0, in, tg);
        const int32_t want_in[6] = {5, 6, 7, 8, 9, 10}, want_tg[6] = {-1, 7, 8, -1, 10, 11};
        ok = kept == 4 && memcmp(in, want_in, sizeof want_in) == 0 &&
             memcmp(tg, want_tg, sizeof want_tg) == 0 && dataset_has_mask(ds);
        dataset_close(ds);
    }
    tap_ok(ok, "shard: ID:M text from two files reads back with masked targets = -1");

    spit(fa, "1 2 3\n4 12 5\n", 13);
    pjoin(a, root, "sh-bad");
    FMT(line, "shard -q --vocab 12 -o %s %s", a, fa);
    cap_begin();
    r = run_cmd(cmd_shard, line);
    const char *err = cap_end();
    FMT(b, "%.500s.tmp", a);
    tap_ok(r == TSR_EXIT_DATA && has(err, "in1.txt:2:", "token id 12 is >= vocab size 12") &&
               !exists(a) && !exists(b),
           "shard: an out-of-range id exits 2 naming file and line, writes nothing: %s", err);

    cap_begin();
    r = run_cmd(cmd_shard, "shard --vocab 12 nothing.txt");
    err = cap_end();
    tap_ok(r == TSR_EXIT_USAGE && has(err, "--out", NULL), "shard: a missing --out exits 1: %s", err);
}

/* has_mask 2: the mask bytes' bit 0 is the loss mask, bit 1 a segment start (docs/data-format.md
 * "Segments"); a dataset without them gives the starts after each eot. */
static void test_segments(void) {
    char dir[512];
    tsr_dataset_writer *w;
    const uint32_t tok[9] = {7, 1, 2, 3, 7, 4, 5, 7, 6};
    const uint8_t mask[9] = {2, 0, 1, 1, 3, 0, 1, 1, 2}, bad = 4;
    pjoin(dir, root, "segments");
    int rc = dataset_writer_open(&w, dir, 10, DATASET_MASK_SEGMENTS, 100);
    cap_begin();
    int rbad = rc ? 0 : dataset_writer_append(w, tok, &bad, 1);
    const char *err = cap_end();
    tap_ok(rbad == TSR_EXIT_DATA && has(err, "mask byte 4", "expected 0 to 3"),
           "the writer refuses a mask byte above 3 with segments: %s", err);
    rc = rc ? rc : dataset_writer_append(w, tok, mask, 9);
    rc = rc ? rc : dataset_writer_close(w);
    tsr_dataset *ds = NULL;
    int32_t in[8], tg[8];
    uint8_t st[8], st_eot[8];
    rc = rc ? rc : dataset_open(&ds, dir, 1);
    int kept = rc ? -1 : dataset_read_sample(ds, 8, 0, in, tg);
    if (!rc) dataset_read_starts(ds, 8, 0, 7, st);
    const int32_t want_tg[8] = {-1, 2, 3, 7, -1, 5, 7, -1};
    const uint8_t want_st[8] = {1, 0, 0, 0, 1, 0, 0, 0}, want_eot[8] = {1, 1, 0, 0, 0, 1, 0, 0};
    tap_ok(!rc && dataset_has_segments(ds) && kept == 5 && !memcmp(tg, want_tg, sizeof tg) &&
               !memcmp(st, want_st, sizeof st),
           "has_mask 2 reads back: targets from bit 0, segment starts from bit 1 (not at eot 7)");
    if (ds) dataset_close(ds);
    /* the same tokens with a plain mask: the starts follow each eot */
    pjoin(dir, root, "segments-eot");
    uint8_t m1[9];
    for (int k = 0; k < 9; k++) m1[k] = mask[k] & 1;
    rc = dataset_writer_open(&w, dir, 10, DATASET_MASK, 100);
    rc = rc ? rc : dataset_writer_append(w, tok, m1, 9);
    rc = rc ? rc : dataset_writer_close(w);
    rc = rc ? rc : dataset_open(&ds, dir, 1);
    if (!rc) dataset_read_starts(ds, 8, 0, 7, st_eot);
    tap_ok(!rc && !dataset_has_segments(ds) && !memcmp(st_eot, want_eot, sizeof st_eot),
           "has_mask 1: the segment starts follow each eot_token");
    if (!rc) dataset_close(ds);
}

/* tokens 0, 1, .. n - 1 (mod top + 1) into a dataset of vocabulary vocab at dir: the largest is top */
static int write_upto(const char *dir, uint32_t vocab, uint32_t top, uint32_t n) {
    tsr_dataset_writer *w;
    uint32_t tok[1];
    int rc = dataset_writer_open(&w, dir, vocab, DATASET_NO_MASK, 64);
    for (uint32_t i = 0; !rc && i < n; i++) tok[0] = i % (top + 1), rc = dataset_writer_append(w, tok, NULL, 1);
    return rc ? rc : dataset_writer_close(w);
}

/* The largest token id (docs/data-format.md "max_token_id"): the writer's note, the ids read by
 * verify when an older index has none, vocab - 1 when neither tells; a note that lies is refused
 * by verify and by the read of a sample past it; a note at or above vocab_size is refused. */
static void test_max_id(void) {
    char dir[512], f[512], msg[256];
    const char *how = NULL;
    tsr_dataset *ds = NULL;
    int32_t in[8], tg[8];
    pjoin(dir, root, "maxid");
    pjoin(f, dir, "index.tsv");
    int rc = write_upto(dir, 1000, 599, 700);
    char *text = rc ? NULL : slurp(f, NULL);
    tap_ok(text && strstr(text, "\n# max_token_id\t599\t(the largest token id in the shards)\n"),
           "the writer notes the largest id: '# max_token_id<TAB>599<TAB>(...)' in index.tsv");
    free(text);
    uint32_t noted = rc || dataset_open(&ds, dir, 0) ? 0 : dataset_max_token_id(ds, &how);
    snprintf(msg, sizeof msg, "%s", how ? how : "(null)");
    if (ds) dataset_close(ds), ds = NULL;
    uint32_t read = dataset_open(&ds, dir, 1) ? 0 : dataset_max_token_id(ds, &how);
    tap_ok(noted == 599 && strstr(msg, "max_token_id") && read == 599 && how && strstr(how, "read"),
           "dataset_max_token_id: 599 from the note (%s) without verify, 599 read with it", msg);
    if (ds) dataset_close(ds), ds = NULL;
    edit_text(f, "# max_token_id", "# max_token_xx"); /* an index written before the note */
    uint32_t bound = dataset_open(&ds, dir, 0) ? 0 : dataset_max_token_id(ds, &how);
    int unknown = how == NULL;
    if (ds) dataset_close(ds), ds = NULL;
    read = dataset_open(&ds, dir, 1) ? 0 : dataset_max_token_id(ds, &how);
    tap_ok(bound == 999 && unknown && read == 599,
           "no note: vocab_size - 1 = %u and unknown without verify, %u read with it", bound, read);
    if (ds) dataset_close(ds), ds = NULL;
    edit_text(f, "# max_token_xx\t599", "# max_token_id\t500"); /* a note that lies */
    expect_open_fail(dir, 1, "shard-00007.bin", "token 501 at position 53", "above max_token_id 500",
                     "with verify, a token above the index's max_token_id");
    cap_begin();
    int kept = dataset_open(&ds, dir, 0) ? 0 : dataset_read_sample(ds, 8, 55, in, tg);
    const char *err = cap_end();
    tap_ok(ds && kept == -1 && has(err, "token 501", "above the index's max_token_id 500"),
           "without verify, the sample holding it is refused at its read: %s", err);
    if (ds) dataset_close(ds), ds = NULL;
    edit_text(f, "# max_token_id\t500", "# max_token_id\t100"); /* (reads below 500 stay fine) */
    edit_text(f, "vocab_size\t1000", "vocab_size\t0100");
    expect_open_fail(dir, 0, f, "max_token_id '100'", "below vocab_size 100",
                     "a max_token_id at vocab_size");
}

int main(void) {
    tap_plan(PLAN);
    testfs_root(root, sizeof root, "test_data");
    test_crc();
    test_roundtrip();
    test_writer_errors();
    test_reader_errors();
    test_segments();
    test_max_id();
    test_reader_readonly();
    test_sampler();
    test_commands();
    rm_rf(root);
    return tap_done();
}
