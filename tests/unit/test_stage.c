/* test_stage.c — node-local staging (src/data/stage.c) and the reader's redirect hooks.
 *
 * Fixture: a dataset of 10 shards x 4000 tokens (uint16, with a loss mask), token(i) = (7919 i +
 * 13) mod V, mask(i) = (i mod 3 != 0), in a mkdtemp directory under /tmp; each shard file is
 * B = 64 + 4000 x 2 + 4000 = 12064 bytes and holds 129 samples of T = 31. Stage roots live beside
 * it (same filesystem: hard links, or copies with TSR_STAGE_NO_LINK=1) and under /dev/shm when that
 * is another filesystem. The oracle for every read is a second handle of the dataset that is never
 * redirected (and that handle is checked against the token formula once).
 */
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
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "crc32c.h"
#include "data/data.h"
#include "data/stage.h"
#include "tap.h"
#include "testfs.h"

#define PLAN 51
#define VOCAB 50000u
#define SHARD_TOK 4000u
#define N_SHARDS 10
#define T 31
#define B 12064u /* bytes per shard file */

static char root[256], ds_dir[512];
static tsr_dataset *ref; /* never redirected */
static uint64_t n_samples;

/* ---------------------------------------------------------------- helpers */

static void copy_file(const char *src, const char *dst) {
    size_t n;
    char *buf = slurp(src, &n);
    FILE *f = fopen(dst, "wb");
    if (buf && f) fwrite(buf, 1, n, f);
    if (f) fclose(f);
    free(buf);
}

static void flip_byte(const char *path, long off) {
    int fd = open(path, O_RDWR);
    uint8_t c = 0;
    if (fd < 0 || pread(fd, &c, 1, off) != 1) perror(path);
    c ^= 0x5a;
    if (fd < 0 || pwrite(fd, &c, 1, off) != 1) perror(path);
    if (fd >= 0) close(fd);
}

static uint32_t fix_token(uint64_t i) { return (uint32_t)((i * 7919u + 13u) % VOCAB); }

static int write_fixture(const char *dir) {
    tsr_dataset_writer *w;
    if (dataset_writer_open(&w, dir, VOCAB, 1, SHARD_TOK)) return 1;
    uint32_t tok[SHARD_TOK];
    uint8_t m[SHARD_TOK];
    for (uint64_t s0 = 0; s0 < (uint64_t)N_SHARDS * SHARD_TOK; s0 += SHARD_TOK) {
        for (uint64_t j = 0; j < SHARD_TOK; j++) {
            tok[j] = fix_token(s0 + j);
            m[j] = (uint8_t)((s0 + j) % 3 != 0);
        }
        if (dataset_writer_append(w, tok, m, SHARD_TOK)) {
            dataset_writer_abort(w);
            return 1;
        }
    }
    return dataset_writer_close(w);
}

/* Samples of ds that differ from the reference handle (inputs, targets or the kept count). */
static long compare_all(const tsr_dataset *ds) {
    int32_t in[T], tg[T], rin[T], rtg[T];
    long bad = 0;
    for (uint64_t i = 0; i < n_samples; i++) {
        int k = dataset_read_sample(ds, T, i, in, tg), rk = dataset_read_sample(ref, T, i, rin, rtg);
        bad += k != rk || k < 0 || memcmp(in, rin, sizeof in) != 0 || memcmp(tg, rtg, sizeof tg) != 0;
    }
    return bad;
}

/* Reads every sample of shard k (T = 31: samples [129 k, 129 k + 129)); mismatches vs ref. */
static long read_shard(const tsr_dataset *ds, int k) {
    int32_t in[T], tg[T], rin[T], rtg[T];
    long bad = 0;
    for (uint64_t i = 129u * (uint64_t)k; i < 129u * (uint64_t)(k + 1); i++) {
        int a = dataset_read_sample(ds, T, i, in, tg), b = dataset_read_sample(ref, T, i, rin, rtg);
        bad += a != b || memcmp(in, rin, sizeof in) != 0 || memcmp(tg, rtg, sizeof tg) != 0;
    }
    return bad;
}

static void counts(const tsr_dataset *ds, uint64_t *staged, uint64_t *in_place) {
    dataset_read_counts(ds, staged, in_place);
}

/* compare_all, counting its reads from the staged copies and in place */
static long compare_counting(const tsr_dataset *ds, uint64_t *staged, uint64_t *in_place) {
    uint64_t s0, p0, s1, p1;
    counts(ds, &s0, &p0);
    long bad = compare_all(ds);
    counts(ds, &s1, &p1);
    *staged = s1 - s0;
    *in_place = p1 - p0;
    return bad;
}

/* The stage directory of the fixture under stage root r. */
static void stage_dir(char *out, const char *r) {
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", dataset_index_crc(ref));
    pjoin(out, r, hex);
}

static void shard_file(char *out, const char *dir, int k) {
    char name[32];
    snprintf(name, sizeof name, "shard-%05d.bin", k);
    pjoin(out, dir, name);
}

/* Committed bytes (files without ".tmp.") and temporary files in a stage directory. */
static uint64_t dir_bytes(const char *dir, int *n_tmp, int *n_files) {
    uint64_t sum = 0;
    *n_tmp = *n_files = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char p[512];
        struct stat st;
        if (e->d_name[0] == '.') continue;
        pjoin(p, dir, e->d_name);
        if (strstr(e->d_name, ".tmp.")) {
            (*n_tmp)++;
        } else if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            sum += (uint64_t)st.st_size;
            (*n_files)++;
        }
    }
    if (d) closedir(d);
    return sum;
}

/* Bitmask of shards that are redirected. */
static unsigned redirected_mask(const tsr_dataset *ds) {
    unsigned m = 0;
    for (int k = 0; k < N_SHARDS; k++) m |= (unsigned)dataset_shard_redirected(ds, k) << k;
    return m;
}

/* Bitmask of shards with a committed file in dir. */
static unsigned present_mask(const char *dir) {
    unsigned m = 0;
    char p[512];
    for (int k = 0; k < N_SHARDS; k++) {
        shard_file(p, dir, k);
        m |= (unsigned)exists(p) << k;
    }
    return m;
}

/* Mappings of this process whose file was deleted, under dir (from /proc/self/maps). */
static int deleted_mappings(const char *dir) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, dir) && strstr(line, "(deleted)");
    if (f) fclose(f);
    return n;
}

/* Mappings of this process whose line names `what`. */
static int mapped_files(const char *what) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) n += strstr(line, what) != NULL;
    if (f) fclose(f);
    return n;
}

static void want_range(tsr_stager *s, int lo, int hi) {
    int list[N_SHARDS];
    for (int k = lo; k < hi; k++) list[k - lo] = k;
    stager_want(s, list, hi - lo);
}

static tsr_dataset *open_ds(void) {
    tsr_dataset *ds = NULL;
    if (dataset_open(&ds, ds_dir, 0)) {
        fprintf(stderr, "test_stage: cannot open the fixture\n");
        exit(1);
    }
    return ds;
}

/* ---------------------------------------------------------------- reader hooks */

static void test_hooks(void) {
    char path[512], copy[512];
    size_t n;
    pjoin(path, ds_dir, "index.tsv");
    char *text = slurp(path, &n);
    tap_ok(text && dataset_index_crc(ref) == tsr_crc32c(0, text, n),
           "dataset_index_crc = CRC32C of index.tsv (0x%08x)", dataset_index_crc(ref));
    free(text);

    int32_t in[T], tg[T];
    long bad = 0;
    for (uint64_t i = 0; i < n_samples; i++) {
        bad += dataset_sample_shard(ref, T, i) != (int)(i / 129);
        dataset_read_sample(ref, T, i, in, tg);
        uint64_t g = (i / 129) * SHARD_TOK + (i % 129) * T;
        for (int j = 0; j < T; j++)
            bad += in[j] != (int32_t)fix_token(g + (uint64_t)j) ||
                   tg[j] != ((g + (uint64_t)j + 1) % 3 ? (int32_t)fix_token(g + (uint64_t)j + 1) : -1);
    }
    tap_ok(bad == 0 && n_samples == 1290 && dataset_sample_shard(ref, T, n_samples) == -1 &&
               dataset_sample_shard(ref, 0, 0) == -1,
           "dataset_sample_shard: shard of each of %llu samples, -1 out of range (%ld wrong); "
           "reference reads match the token formula", (unsigned long long)n_samples, bad);

    struct stat st;
    shard_file(path, ds_dir, 3);
    int sizes_ok = 1;
    for (int k = 0; k < N_SHARDS; k++) sizes_ok &= dataset_shard_bytes(ref, k) == B;
    tap_ok(strcmp(dataset_shard_name(ref, 3), "shard-00003.bin") == 0 && stat(path, &st) == 0 &&
               (uint64_t)st.st_size == dataset_shard_bytes(ref, 3) && sizes_ok &&
               strcmp(dataset_dir(ref), ds_dir) == 0,
           "dataset_shard_name/bytes/dir: '%s', %llu bytes, %s", dataset_shard_name(ref, 3),
           (unsigned long long)dataset_shard_bytes(ref, 3), dataset_dir(ref));

    /* direct redirects of shard 2 */
    tsr_dataset *ds = open_ds();
    uint64_t s0, p0, s1, p1;
    shard_file(path, ds_dir, 2);
    pjoin(copy, root, "copy-shard2.bin");
    copy_file(path, copy);
    counts(ds, &s0, &p0);
    int rc = dataset_shard_redirect(ds, 2, copy);
    long mism = compare_all(ds);
    counts(ds, &s1, &p1);
    tap_ok(rc == 0 && dataset_shard_redirected(ds, 2) && mism == 0 && s1 - s0 == 129 &&
               p1 - p0 == n_samples - 129,
           "redirect of shard 2 to a copy: all samples equal (%ld differ); 129 staged reads, "
           "%llu in place (got %llu, %llu)", mism, (unsigned long long)(n_samples - 129),
           (unsigned long long)(s1 - s0), (unsigned long long)(p1 - p0));

    char bad_copy[512];
    pjoin(bad_copy, root, "bad-shard2.bin");
    copy_file(path, bad_copy);
    flip_byte(bad_copy, 64 + 1000);
    cap_begin();
    rc = dataset_shard_redirect(ds, 2, bad_copy);
    const char *err = cap_end();
    tap_ok(rc == TSR_EXIT_DATA && strstr(err, "bad-shard2.bin") && strstr(err, "checksum") &&
               dataset_shard_redirected(ds, 2) && read_shard(ds, 2) == 0,
           "redirect to a copy with a flipped payload byte is refused, the previous redirect "
           "stays: %s", err);

    shard_file(path, ds_dir, 3);
    cap_begin();
    rc = dataset_shard_redirect(ds, 2, path);
    err = cap_end();
    tap_ok(rc == TSR_EXIT_DATA && strstr(err, "shard number 3"),
           "redirect of shard 2 to shard 3's file is refused: %s", err);

    unlink(copy); /* the mapping keeps the inode */
    tap_ok(read_shard(ds, 2) == 0 && dataset_shard_redirect(ds, 2, NULL) == 0 &&
               !dataset_shard_redirected(ds, 2) && read_shard(ds, 2) == 0 &&
               deleted_mappings(root) == 0,
           "a deleted redirect target still reads; redirect NULL unmaps it and reads in place");
    shard_file(path, ds_dir, 5);
    pjoin(copy, root, "copy-shard5.bin");
    copy_file(path, copy);
    rc = dataset_shard_redirect(ds, 5, copy);
    int mapped = mapped_files("copy-shard5.bin");
    dataset_close(ds);
    tap_ok(rc == 0 && mapped == 1 && mapped_files("copy-shard5.bin") == 0,
           "dataset_close unmaps redirected copies (mapped before: %d)", mapped);
}

/* ---------------------------------------------------------------- staging, same filesystem */

typedef struct reader_arg {
    const tsr_dataset *ds;
    long bad;
} reader_arg;
static void *reader_thread(void *p) {
    reader_arg *a = p;
    a->bad = compare_all(a->ds);
    return NULL;
}

/* Hard links (the stage root is on the dataset's filesystem), reads from 4 threads. */
static void test_link(void) {
    char sroot[512], dir[512], a[512], b[512];
    pjoin(sroot, root, "stage-link/nested");
    tsr_dataset *ds = open_ds();
    tsr_stager *s = NULL;
    tsr_stage_stats st;
    int rc = stager_open(&s, ds, sroot, 0, 1);
    stage_dir(dir, sroot);
    tap_ok(rc == 0 && s && exists(dir), "stager_open creates the stage root and %s", dir);
    if (rc) return;
    uint64_t staged, in_place;
    long bad = compare_counting(ds, &staged, &in_place);
    tap_ok(bad == 0 && staged == 0 && in_place == n_samples,
           "before staging every read is in place (%llu in place, %llu staged)",
           (unsigned long long)in_place, (unsigned long long)staged);

    const int order[] = {7, 7, 2, 9, 0, 1, 3, 4, 5, 6, 8, 2, 42, -1};
    stager_want(s, order, (int)(sizeof order / sizeof *order));
    int late = stager_wait_idle_for(s, 300); /* the bounded wait of data.stage_wait */
    stager_stats(s, &st);
    struct stat sa, sb;
    shard_file(a, ds_dir, 4);
    shard_file(b, dir, 4);
    tap_ok(late == 0 && st.files_staged == N_SHARDS && st.linked == N_SHARDS && st.bytes_staged == N_SHARDS * B &&
               st.cache_bytes == N_SHARDS * B && st.failed == 0 && stat(a, &sa) == 0 &&
               stat(b, &sb) == 0 && sa.st_ino == sb.st_ino,
           "same filesystem: 10 shards hard-linked (staged %llu, linked %llu, cache %llu bytes; "
           "duplicates and out-of-range ids ignored)", (unsigned long long)st.files_staged,
           (unsigned long long)st.linked, (unsigned long long)st.cache_bytes);
    tap_ok(redirected_mask(ds) == 0, "no redirect before stager_poll");
    stager_poll(s);
    tap_ok(redirected_mask(ds) == 0x3ff, "stager_poll redirects all 10 shards (mask 0x%x)",
           redirected_mask(ds));
    uint64_t s0, p0, s1, p1;
    counts(ds, &s0, &p0);
    pthread_t th[4];
    reader_arg args[4];
    for (int k = 0; k < 4; k++) {
        args[k] = (reader_arg){ds, 0};
        pthread_create(&th[k], NULL, reader_thread, &args[k]);
    }
    bad = 0;
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        bad += args[k].bad;
    }
    counts(ds, &s1, &p1);
    tap_ok(bad == 0 && s1 - s0 == 4 * n_samples && p1 == p0,
           "4 threads read every sample from the links: equal to in-place reads (%ld differ); "
           "staged reads +%llu, in place +%llu", bad, (unsigned long long)(s1 - s0),
           (unsigned long long)(p1 - p0));
    stager_close(s);
    tap_ok(redirected_mask(ds) == 0 && present_mask(dir) == 0x3ff,
           "stager_close drops the redirects and keeps the staged files");
    dataset_close(ds);
}

/* ---------------------------------------------------------------- staging by copy */

/* A stager staging by copy (TSR_STAGE_NO_LINK=1, left set) into root/NAME (sroot; dir: its stage
 * directory) with cache limit LIMIT, over a new open_ds(); returns stager_open's status */
static int open_copy_stager(const char *name, uint64_t limit, char *sroot, char *dir, tsr_dataset **ds,
                            tsr_stager **s) {
    setenv("TSR_STAGE_NO_LINK", "1", 1);
    pjoin(sroot, root, name);
    stage_dir(dir, sroot);
    *ds = open_ds();
    *s = NULL;
    return stager_open(s, *ds, sroot, limit, 1);
}

static void test_copy(void) {
    char sroot[512], dir[512], a[512], b[512];
    tsr_dataset *ds;
    tsr_stager *s;
    tsr_stage_stats st;
    int rc = open_copy_stager("stage-copy", 0, sroot, dir, &ds, &s);
    tap_ok(rc == 0, "TSR_STAGE_NO_LINK=1: stager_open on the same filesystem");
    if (rc) return;
    want_range(s, 0, N_SHARDS);
    stager_wait_idle(s);
    stager_stats(s, &st);
    int same = 1, n_tmp, n_files;
    struct stat sa, sb;
    for (int k = 0; k < N_SHARDS; k++) {
        shard_file(a, ds_dir, k);
        shard_file(b, dir, k);
        same &= same_file(a, b) && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_ino != sb.st_ino;
    }
    uint64_t bytes = dir_bytes(dir, &n_tmp, &n_files);
    tap_ok(st.files_staged == N_SHARDS && st.linked == 0 && st.cache_bytes == N_SHARDS * B &&
               same && n_tmp == 0 && n_files == N_SHARDS && bytes == N_SHARDS * B,
           "copies: 10 files, byte-identical, other inodes, no temporaries left (staged %llu, "
           "linked %llu, %d tmp, %llu bytes)", (unsigned long long)st.files_staged,
           (unsigned long long)st.linked, n_tmp, (unsigned long long)bytes);
    uint64_t staged, in_place;
    long bad = compare_counting(ds, &staged, &in_place);
    tap_ok(bad == 0 && staged == 0 && in_place == n_samples,
           "staged but not polled: still read in place (+%llu in place)", (unsigned long long)in_place);
    stager_poll(s);
    bad = compare_counting(ds, &staged, &in_place);
    tap_ok(redirected_mask(ds) == 0x3ff && bad == 0 && staged == n_samples && in_place == 0,
           "after poll every sample reads from the copies, equal to in place (%ld differ; staged "
           "+%llu, in place +%llu)", bad, (unsigned long long)staged, (unsigned long long)in_place);

    /* someone deletes a committed file that is redirected */
    shard_file(b, dir, 1);
    unlink(b);
    bad = compare_counting(ds, &staged, &in_place);
    tap_ok(bad == 0 && dataset_shard_redirected(ds, 1) && staged == n_samples &&
               deleted_mappings(dir) > 0,
           "a deleted staged file keeps reading through its mapping (%ld differ)", bad);
    stager_poll(s); /* notices, re-queues */
    stager_wait_idle(s);
    stager_stats(s, &st);
    tap_ok(exists(b) && st.files_staged == N_SHARDS + 1 && st.cache_bytes == N_SHARDS * B,
           "the stager notices at the next poll and stages it again (staged %llu, cache %llu)",
           (unsigned long long)st.files_staged, (unsigned long long)st.cache_bytes);
    stager_poll(s);
    tap_ok(deleted_mappings(dir) == 0 && dataset_shard_redirected(ds, 1) && compare_all(ds) == 0,
           "the next poll moves the redirect to the new copy (the deleted inode is unmapped)");
    stager_close(s);

    /* a new stager reuses the files; this host's stale temporaries of dead processes go */
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char host[64] = "", mine[512], other[512], name[160];
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    snprintf(name, sizeof name, "shard-00000.bin.tmp.%s.%d", host, (int)dead);
    pjoin(mine, dir, name);
    snprintf(name, sizeof name, "shard-00000.bin.tmp.%s-other.%d", host, (int)dead);
    pjoin(other, dir, name);
    copy_file(a, mine);
    copy_file(a, other);
    rc = stager_open(&s, ds, sroot, 0, 1);
    stager_stats(s, &st);
    tap_ok(rc == 0 && st.cache_bytes == N_SHARDS * B && !exists(mine) && exists(other),
           "reopen: committed files count toward the cache (%llu bytes); this host's stale "
           "temporary is removed, another host's kept", (unsigned long long)st.cache_bytes);
    unlink(other);
    want_range(s, 0, N_SHARDS);
    stager_wait_idle(s);
    stager_poll(s);
    stager_stats(s, &st);
    tap_ok(st.files_staged == 0 && redirected_mask(ds) == 0x3ff && compare_all(ds) == 0,
           "reopen: existing copies are validated and used, nothing copied again");
    stager_close(s);
    dataset_close(ds);
    unsetenv("TSR_STAGE_NO_LINK");
}

/* A stage root on another filesystem (/dev/shm when it is one): copies without the knob. */
static void test_cross_fs(void) {
    struct stat a, b;
    char sroot[64] = "/dev/shm/tsr_test_stage.XXXXXX";
    if (stat(root, &a) != 0 || stat("/dev/shm", &b) != 0 || a.st_dev == b.st_dev ||
        !mkdtemp(sroot)) {
        tap_skip("cross-filesystem copy", "/dev/shm is missing or on the same filesystem as /tmp");
        tap_skip("cross-filesystem reads", "/dev/shm is missing or on the same filesystem as /tmp");
        return;
    }
    tsr_dataset *ds = open_ds();
    tsr_stager *s = NULL;
    tsr_stage_stats st = {0};
    int rc = stager_open(&s, ds, sroot, 0, 1);
    if (!rc) {
        want_range(s, 0, N_SHARDS);
        stager_wait_idle(s);
        stager_poll(s);
        stager_stats(s, &st);
    }
    tap_ok(rc == 0 && st.files_staged == N_SHARDS && st.linked == 0 && st.failed == 0,
           "stage root on another filesystem (%s): 10 shards copied, none linked", sroot);
    tap_ok(rc == 0 && redirected_mask(ds) == 0x3ff && compare_all(ds) == 0,
           "cross-filesystem copies read the same samples");
    stager_close(s);
    dataset_close(ds);
    rm_rf(sroot);
}

/* ---------------------------------------------------------------- cache limit */

static int limit_ok = 1;
static uint64_t check_limit(tsr_stager *s, const char *dir, uint64_t limit, tsr_stage_stats *st) {
    int n_tmp, n_files;
    stager_stats(s, st);
    uint64_t on_disk = dir_bytes(dir, &n_tmp, &n_files);
    limit_ok &= st->cache_bytes <= limit && on_disk == st->cache_bytes && n_tmp == 0;
    return on_disk;
}

static void test_limit(void) {
    char sroot[512], dir[512];
    const uint64_t limit = 3 * B + B / 2; /* room for 3 shards */
    tsr_dataset *ds;
    tsr_stager *s;
    tsr_stage_stats st;
    int rc = open_copy_stager("stage-limit", limit, sroot, dir, &ds, &s);
    tap_ok(rc == 0, "stager_open with cache_limit %llu bytes (3.5 shards)",
           (unsigned long long)limit);
    if (rc) return;
    const int w1[] = {1, 0}, w2[] = {2}, w3[] = {3}, w4[] = {4, 5}, w5[] = {6, 7, 8, 9};
    stager_want(s, w1, 2);
    stager_wait_idle(s);
    stager_poll(s);
    check_limit(s, dir, limit, &st);
    stager_want(s, w2, 1);
    stager_wait_idle(s);
    check_limit(s, dir, limit, &st);
    tap_ok(present_mask(dir) == 0x7 && st.files_evicted == 0 && st.cache_bytes == 3 * B,
           "windows {1,0} then {2}: 3 shards staged, nothing evicted (present 0x%x)",
           present_mask(dir));
    stager_want(s, w3, 1); /* current {2}, next {3}: 1 (requested before 0) goes */
    stager_wait_idle(s);
    check_limit(s, dir, limit, &st);
    tap_ok(present_mask(dir) == 0xd && st.files_evicted == 1,
           "window {3}: evicts exactly the least recently requested shard outside the windows "
           "(1, not 0): present 0x%x, expected 0xd", present_mask(dir));
    stager_want(s, w4, 2);
    stager_wait_idle(s);
    check_limit(s, dir, limit, &st);
    tap_ok(present_mask(dir) == 0x38 && st.files_evicted == 3 && st.skipped_for_space == 0,
           "window {4,5}: evicts 0 then 2, keeps 3 of the current window (present 0x%x)",
           present_mask(dir));
    stager_want(s, w5, 4);
    stager_wait_idle(s);
    check_limit(s, dir, limit, &st);
    tap_ok(present_mask(dir) == 0x70 && st.files_evicted == 4 && st.skipped_for_space == 3 &&
               st.files_staged == 7,
           "window {6..9}: evicts 3, stages 6, skips 7 8 9 for space (skipped %llu, staged %llu, "
           "present 0x%x)", (unsigned long long)st.skipped_for_space,
           (unsigned long long)st.files_staged, present_mask(dir));
    stager_poll(s);
    tap_ok(redirected_mask(ds) == 0x70, "poll: redirects 4 5 6 only, drops 0 1 3 (mask 0x%x)",
           redirected_mask(ds));
    uint64_t s0, p0, s1, p1;
    counts(ds, &s0, &p0);
    long bad = read_shard(ds, 7) + read_shard(ds, 8) + read_shard(ds, 9);
    counts(ds, &s1, &p1);
    tap_ok(bad == 0 && p1 - p0 == 3 * 129 && s1 == s0,
           "shards skipped for space read in place and correct (+%llu in place)",
           (unsigned long long)(p1 - p0));
    tap_ok(compare_all(ds) == 0, "every sample equal to in place with a partial cache");
    check_limit(s, dir, limit, &st);
    tap_ok(limit_ok, "cache_bytes <= limit and equal to the committed bytes on disk at every check");
    stager_close(s);
    dataset_close(ds);
    unsetenv("TSR_STAGE_NO_LINK");
}

/* ---------------------------------------------------------------- corruption */

static void test_corrupt(void) {
    char sroot[512], dir[512], b[512];
    tsr_dataset *ds;
    tsr_stager *s;
    tsr_stage_stats st;
    int rc = open_copy_stager("stage-corrupt", 0, sroot, dir, &ds, &s);
    if (rc) {
        tap_ok(0, "stager_open for the corruption test");
        return;
    }
    want_range(s, 0, N_SHARDS);
    stager_wait_idle(s);
    shard_file(b, dir, 2);
    flip_byte(b, 64 + 4000); /* a payload byte of the committed copy */
    cap_begin();
    stager_poll(s);
    const char *err = cap_end();
    stager_stats(s, &st);
    tap_ok(strstr(err, "warning") && strstr(err, "shard-00002.bin") &&
               strstr(err, "failed validation"),
           "a corrupted committed copy is reported by poll: %s", err);
    tap_ok(redirected_mask(ds) == 0x3fb && !exists(b) && st.failed == 1 &&
               st.cache_bytes == (N_SHARDS - 1) * B,
           "it is not used and deleted (mask 0x%x, failed %llu, cache %llu)", redirected_mask(ds),
           (unsigned long long)st.failed, (unsigned long long)st.cache_bytes);
    uint64_t staged, in_place;
    long bad = compare_counting(ds, &staged, &in_place);
    tap_ok(bad == 0 && in_place == 129 && staged == n_samples - 129,
           "its samples read in place and correct (+%llu in place, %ld differ)", (unsigned long long)in_place,
           bad);
    want_range(s, 0, N_SHARDS);
    stager_wait_idle(s);
    stager_poll(s);
    stager_stats(s, &st);
    tap_ok(redirected_mask(ds) == 0x3ff && st.files_staged == N_SHARDS + 1 && compare_all(ds) == 0,
           "the next window stages it again and redirects it");
    stager_close(s);
    dataset_close(ds);

    /* the source changes after open: the copy's checksum does not match the index */
    char ds2[512], src[512], sroot2[512], dir2[512];
    int n_tmp, n_files;
    pjoin(ds2, root, "ds-changed");
    pjoin(sroot2, root, "stage-changed");
    write_fixture(ds2);
    tsr_dataset *d2 = NULL;
    rc = dataset_open(&d2, ds2, 1);
    shard_file(src, ds2, 4);
    flip_byte(src, 64 + 10);
    if (!rc) rc = stager_open(&s, d2, sroot2, 0, 1);
    if (rc) {
        tap_ok(0, "open the changed dataset and its stager");
        tap_ok(0, "(skipped: setup failed)");
        return;
    }
    pjoin(dir2, sroot2, strrchr(dir, '/') + 1);
    cap_begin();
    want_range(s, 0, N_SHARDS);
    stager_wait_idle(s);
    err = cap_end();
    stager_stats(s, &st);
    dir_bytes(dir2, &n_tmp, &n_files);
    shard_file(b, dir2, 4);
    tap_ok(strstr(err, "warning") && strstr(err, "shard-00004.bin.tmp.") && strstr(err, src) &&
               strstr(err, "CRC32C"),
           "a copy whose payload CRC differs from the index is reported naming both files: %s",
           err);
    stager_poll(s);
    tap_ok(st.failed == 1 && st.files_staged == N_SHARDS - 1 && !exists(b) && n_tmp == 0 &&
               n_files == N_SHARDS - 1 && !dataset_shard_redirected(d2, 4),
           "it is not committed, its temporary is removed, the shard reads in place (failed "
           "%llu, staged %llu, %d tmp)", (unsigned long long)st.failed,
           (unsigned long long)st.files_staged, n_tmp);
    stager_close(s);
    dataset_close(d2);
    unsetenv("TSR_STAGE_NO_LINK");
}

/* ---------------------------------------------------------------- errors */

static void test_errors(void) {
    char file[512], sub[512], sroot[512], dir[512];
    tsr_stager *s = (tsr_stager *)&s;
    tsr_dataset *ds = open_ds();
    pjoin(file, root, "plain-file");
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    cap_begin();
    int rc = stager_open(&s, ds, file, 0, 1);
    const char *err = cap_end();
    tap_ok(rc == TSR_EXIT_USAGE && !s && strstr(err, file) && strstr(err, "not a directory"),
           "a stage root that is a file: exit 1 naming it: %s", err);
    pjoin(sub, file, "sub");
    cap_begin();
    rc = stager_open(&s, ds, sub, 0, 0);
    err = cap_end();
    tap_ok(rc == TSR_EXIT_USAGE && strstr(err, sub) && strstr(err, "cannot create"),
           "a stage root below a file: exit 1, cannot create: %s", err);
    pjoin(sroot, root, "stage-blocked");
    mkdir(sroot, 0700);
    stage_dir(dir, sroot);
    f = fopen(dir, "w");
    if (f) fclose(f);
    cap_begin();
    rc = stager_open(&s, ds, sroot, 0, 1);
    err = cap_end();
    tap_ok(rc == TSR_EXIT_USAGE && strstr(err, dir) && strstr(err, "not a directory"),
           "a file in place of the dataset's stage directory: exit 1 naming it: %s", err);
    if (geteuid() == 0) {
        tap_skip("a read-only stage root is refused", "running as root: permissions do not stop root");
    } else {
        pjoin(sroot, root, "stage-ro");
        mkdir(sroot, 0700);
        stage_dir(dir, sroot);
        mkdir(dir, 0500);
        cap_begin();
        rc = stager_open(&s, ds, sroot, 0, 1);
        err = cap_end();
        tap_ok(rc == TSR_EXIT_USAGE && strstr(err, "not writable") && strstr(err, dir),
               "a read-only stage directory: exit 1, not writable: %s", err);
        chmod(dir, 0700);
    }
    dataset_close(ds);
}

/* ---------------------------------------------------------------- two processes */

enum { C_OPEN = 1, C_PHASE1 = 2, C_REDIRECTS = 4, C_READS = 8, C_COUNTS = 16, C_STATS = 32 };

/* The child: a non-stager rank on the same node. */
static int child_main(const char *sroot, int rfd, int wfd) {
    int bits = 0;
    char dir[512], c = '1';
    tsr_dataset *ds = open_ds();
    tsr_stager *s = NULL;
    tsr_stage_stats st;
    if (stager_open(&s, ds, sroot, 0, 0)) return C_OPEN;
    stage_dir(dir, sroot);
    want_range(s, 0, N_SHARDS);
    stager_wait_idle(s); /* returns at once */
    stager_poll(s);
    stager_stats(s, &st);
    if (redirected_mask(ds) || present_mask(dir) || st.files_staged || st.cache_bytes) bits |= C_PHASE1;
    if (write(wfd, &c, 1) != 1 || read(rfd, &c, 1) != 1) return bits | C_OPEN;
    stager_poll(s); /* the parent committed shards 0..4; shard 5 only as another host's temp */
    if (redirected_mask(ds) != 0x1f) bits |= C_REDIRECTS;
    uint64_t s0, p0, s1, p1;
    counts(ds, &s0, &p0);
    if (compare_all(ds)) bits |= C_READS;
    counts(ds, &s1, &p1);
    if (s1 - s0 != 5 * 129 || p1 - p0 != n_samples - 5 * 129) bits |= C_COUNTS;
    stager_stats(s, &st);
    if (st.files_staged || st.cache_bytes != 5 * B || st.staged_reads != 5 * 129) bits |= C_STATS;
    stager_close(s);
    dataset_close(ds);
    return bits;
}

static void test_two_processes(void) {
    char sroot[512], dir[512], fake[512], src[512];
    int to_child[2], to_parent[2];
    pjoin(sroot, root, "stage-node");
    stage_dir(dir, sroot);
    if (pipe(to_child) || pipe(to_parent)) {
        perror("pipe");
        exit(1);
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(to_child[1]);
        close(to_parent[0]);
        _exit(child_main(sroot, to_child[0], to_parent[1]));
    }
    close(to_child[0]);
    close(to_parent[1]);
    char c = 0;
    int got = (int)read(to_parent[0], &c, 1); /* the child looked before anything was staged */
    setenv("TSR_STAGE_NO_LINK", "1", 1);
    tsr_dataset *ds = open_ds();
    tsr_stager *s = NULL;
    int rc = got == 1 ? stager_open(&s, ds, sroot, 0, 1) : -1;
    if (rc == 0) {
        want_range(s, 0, 5);
        stager_wait_idle(s);
        shard_file(src, ds_dir, 5);
        pjoin(fake, dir, "shard-00005.bin.tmp.otherhost.1");
        copy_file(src, fake); /* complete and valid, but not under a committed name */
    }
    c = '2';
    if (write(to_child[1], &c, 1) != 1) perror("write");
    int status = 0;
    waitpid(pid, &status, 0);
    int bits = WIFEXITED(status) ? WEXITSTATUS(status) : 255;
    tap_ok(rc == 0 && !(bits & C_OPEN), "two processes: the child (is_stager = 0) opens the same "
           "stage root, the parent stages (child status 0x%x)", bits);
    tap_ok(!(bits & C_PHASE1), "the non-stager copies nothing and redirects nothing on its own");
    tap_ok(!(bits & C_REDIRECTS), "it redirects exactly the shards the stager committed (0..4), "
           "not a complete temporary of shard 5");
    tap_ok(!(bits & C_READS), "its reads equal in-place reads");
    tap_ok(!(bits & C_COUNTS), "its counters: 5 x 129 staged reads, the rest in place");
    tap_ok(!(bits & C_STATS), "its stats: nothing staged by it, cache_bytes from the directory");
    stager_close(s);
    dataset_close(ds);
    unsetenv("TSR_STAGE_NO_LINK");
}

int main(void) {
    tap_plan(PLAN);
    testfs_root(root, sizeof root, "test_stage");
    pjoin(ds_dir, root, "ds");
    if (write_fixture(ds_dir) || dataset_open(&ref, ds_dir, 1)) {
        fprintf(stderr, "test_stage: cannot write the fixture in %s\n", ds_dir);
        return 1;
    }
    n_samples = dataset_n_samples(ref, T);
    test_hooks();
    test_link();
    test_copy();
    test_cross_fs();
    test_limit();
    test_corrupt();
    test_errors();
    test_two_processes();
    dataset_close(ref);
    rm_rf(root);
    return tap_done();
}
