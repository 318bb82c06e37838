/* test_gemm_tune.c — the file of GEMM choices behind TSR_GEMM_TUNE (kernels/cuda/tcu_gemm_tune.h):
 * plain host C, so it is checked here on every machine. What a run depends on: a table written
 * and read back is the same table (keys, configurations, times), so a later run finds the
 * choices; a file from another GPU model or cuBLASLt version, or with a malformed line, is
 * refused naming the file, the line and the field, leaving the table empty; a failed write
 * leaves what was at the path as it was and no temporary file behind; an unwritable directory
 * is seen before a run times anything; two tables' hashes differ when an algorithm does.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"
#include "testfs.h"
#include "tcu_gemm_tune.h"

static char dir[256];

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

/* files in dir whose name contains ".tmp." */
static int temporaries(void) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

static void key_of(int64_t k[TCU_TUNE_KEY_N], int salt) {
    for (int i = 0; i < TCU_TUNE_KEY_N; i++) k[i] = 1000 * salt + i * 7 + (i == 18 ? 33554432 : 0);
}

static void cfg_of(int64_t c[TCU_TUNE_CFG_N], int salt) {
    for (int i = 0; i < TCU_TUNE_CFG_N; i++) c[i] = salt * 3 + i - (i == 0 ? 100 : 0);
}

/* an algorithm's bytes: every nibble used, the top bits too */
static void data_of(uint64_t d[TCU_TUNE_DATA_N], int salt) {
    for (int i = 0; i < TCU_TUNE_DATA_N; i++)
        d[i] = 0xfedcba9876543210ull ^ ((uint64_t)salt << (8 * i)) ^ (uint64_t)i;
}

/* "<20 key ints> <9 cfg ints> <128 hex digits> us first_us" for salt, with `drop` fields left
 * off the end and `extra` appended */
static void entry_line(char *out, size_t n, int salt, int drop, const char *extra) {
    int64_t k[TCU_TUNE_KEY_N], c[TCU_TUNE_CFG_N];
    uint64_t d[TCU_TUNE_DATA_N];
    key_of(k, salt), cfg_of(c, salt), data_of(d, salt);
    size_t at = 0;
    const int ints = TCU_TUNE_KEY_N + TCU_TUNE_CFG_N, total = ints + 3;
    for (int f = 0; f < total - drop; f++) {
        if (f < TCU_TUNE_KEY_N) at += snprintf(out + at, n - at, "%s%lld", f ? " " : "", (long long)k[f]);
        else if (f < ints) at += snprintf(out + at, n - at, " %lld", (long long)c[f - TCU_TUNE_KEY_N]);
        else if (f == ints) {
            at += snprintf(out + at, n - at, " ");
            for (int w = 0; w < TCU_TUNE_DATA_N; w++)
                at += snprintf(out + at, n - at, "%016llx", (unsigned long long)d[w]);
        } else at += snprintf(out + at, n - at, " %.3f", 10.0 + f);
    }
    snprintf(out + at, n - at, "%s\n", extra);
}

/* loads text from a file; true when it is refused with every string of want in the message */
static int refused(const char *name, const char *text, const char *const *want, int nwant,
                   char *err, size_t n) {
    char path[512];
    path_of(path, sizeof path, name);
    write_text(path, text);
    tcu_tune_table t;
    err[0] = 0;
    int rc = tcu_tune_load(&t, path, "NVIDIA H200", 130100, err, n);
    int ok = rc == -1 && t.n == 0 && t.e == NULL;
    for (int i = 0; i < nwant; i++) ok = ok && strstr(err, want[i]) != NULL;
    if (!ok) tap_diag("%s: rc %d, %d entries, \"%s\"", name, rc, t.n, err);
    tcu_tune_release(&t);
    return ok;
}

int main(void) {
    tap_plan(18);
    snprintf(dir, sizeof dir, "/tmp/tsr-gemm-tune-XXXXXX");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "test_gemm_tune: cannot make a temporary directory\n");
        return 1;
    }
    char path[512], err[1024];
    path_of(path, sizeof path, "choices.txt");

    /* 1: a missing file is an empty table */
    tcu_tune_table t;
    int rc = tcu_tune_load(&t, path, "NVIDIA H200", 130100, err, sizeof err);
    tap_ok(rc == 0 && t.n == 0 && t.loaded == 0 && strcmp(t.device, "NVIDIA H200") == 0,
           "a missing file: an empty table for the caller's device (rc %d, %d entries)", rc, t.n);

    /* 2: add three, one of them twice (replaced, not duplicated), find them */
    int64_t k[3][TCU_TUNE_KEY_N], c[3][TCU_TUNE_CFG_N], c2[TCU_TUNE_CFG_N];
    uint64_t dd[3][TCU_TUNE_DATA_N], d2[TCU_TUNE_DATA_N];
    for (int i = 0; i < 3; i++) key_of(k[i], i + 1), cfg_of(c[i], i + 1), data_of(dd[i], i + 1);
    cfg_of(c2, 9), data_of(d2, 9);
    rc = 0;
    rc |= tcu_tune_add(&t, k[0], c2, d2, 5.0, 6.0);
    for (int i = 0; i < 3; i++) rc |= tcu_tune_add(&t, k[i], c[i], dd[i], 100.25 + i, 120.5 + i);
    const tcu_tune_entry *f1 = tcu_tune_find(&t, k[1]);
    int64_t other[TCU_TUNE_KEY_N];
    key_of(other, 1);
    other[TCU_TUNE_KEY_N - 1] += 1; /* another split-K rule: another key */
    tap_ok(rc == 0 && t.n == 3 && tcu_tune_find(&t, k[0]) &&
               memcmp(tcu_tune_find(&t, k[0])->cfg, c[0], sizeof c[0]) == 0 && f1 &&
               f1->us == 101.25 && !tcu_tune_find(&t, other),
           "three keys added (the first twice: replaced), each found with its configuration; a "
           "key differing in the split-K rule alone is not (%d entries)", t.n);

    /* 3-5: written, then read back the same (and its hash); no temporary file left */
    rc = tcu_tune_save(&t, path, err, sizeof err);
    tap_ok(rc == 0 && temporaries() == 0, "saved (rc %d, %d temporary files left)", rc,
           temporaries());
    tcu_tune_table r;
    rc = tcu_tune_load(&r, path, "NVIDIA H200", 130100, err, sizeof err);
    int same = rc == 0 && r.n == 3 && r.loaded == 3;
    for (int i = 0; i < 3 && same; i++) {
        const tcu_tune_entry *e = tcu_tune_find(&r, k[i]);
        same = e && memcmp(e->cfg, c[i], sizeof c[i]) == 0 &&
               memcmp(e->data, dd[i], sizeof dd[i]) == 0 && e->us == 100.25 + i &&
               e->first_us == 120.5 + i;
    }
    tap_ok(same, "read back: 3 entries, the same keys, configurations, algorithm bytes and times "
           "(rc %d: %s)", rc, rc ? err : "ok");
    /* the hash: the same table the same; one bit of one algorithm changed, another */
    const uint64_t h0 = tcu_tune_hash(&t), h1 = tcu_tune_hash(&r);
    r.e[1].data[7] ^= 1ull << 63;
    tap_ok(h0 == h1 && tcu_tune_hash(&r) != h0,
           "tcu_tune_hash: written and read back the same (%016llx), one bit of an algorithm "
           "flipped another", (unsigned long long)h0);
    tcu_tune_release(&r);

    /* 6, 7: another GPU model, another cuBLASLt version */
    rc = tcu_tune_load(&r, path, "NVIDIA H100 80GB HBM3", 130100, err, sizeof err);
    tap_ok(rc == -1 && r.n == 0 && strstr(err, "choices.txt:2") &&
               strstr(err, "\"NVIDIA H200\"") && strstr(err, "\"NVIDIA H100 80GB HBM3\""),
           "a file made on an H200, read on an H100: refused naming the line and both (%s)", err);
    rc = tcu_tune_load(&r, path, "NVIDIA H200", 120900, err, sizeof err);
    tap_ok(rc == -1 && r.n == 0 && strstr(err, "choices.txt:3") && strstr(err, "130100") &&
               strstr(err, "120900"),
           "another cuBLASLt version: refused naming both (%s)", err);

    /* 8-15: malformed files: an entry short of a field, one too many, a negative and an infinite
     * time, algorithm bytes too short (each against the header); a word for an integer; a key
     * twice; an entry before the cublaslt line */
    static const struct {
        const char *name;
        int drop;          /* fields left off the end of a good entry */
        const char *extra; /* then appended */
        const char *want[3];
        const char *what;
    } BAD[] = {
        {"short.txt", 1, "", {"short.txt:5", "31 fields, expected 32", "field 32 (first_us) is missing"},
         "an entry one field short: refused naming line 5 and the missing field"},
        {"long.txt", 0, " 7", {"long.txt:5", "more than 32 fields", "\"7\" after the last"},
         "a field too many: refused"},
        {"negative.txt", 1, " -1.5", {"negative.txt:5", "field 32 (first_us)", "a finite number >= 0"},
         "a negative time: refused"},
        {"inf.txt", 2, " inf 3", {"inf.txt:5", "field 31 (us) is \"inf\"", "a finite number"},
         "an infinite time: refused"},
        {"data.txt", 3, " 00ff 1 2", {"data.txt:5", "field 30 (data) is \"00ff\"", "expected 128 hex digits"},
         "algorithm bytes of 4 hex digits: refused naming the field"},
    };
    const char *head = "# a comment\n\ndevice NVIDIA H200\ncublaslt 130100\n";
    char text[4096], line[1024];
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        entry_line(line, sizeof line, 1, BAD[i].drop, BAD[i].extra);
        snprintf(text, sizeof text, "%s%s", head, line);
        tap_ok(refused(BAD[i].name, text, BAD[i].want, 3, err, sizeof err), "%s (%s)", BAD[i].what,
               err);
    }
    entry_line(line, sizeof line, 1, 0, "");
    char bad[1100];
    snprintf(bad, sizeof bad, "%s", line);
    char *sp = strchr(bad, ' ');
    sp = strchr(sp + 1, ' ');
    memcpy(sp + 1, "x7", 2); /* field 3 (ta) becomes "x7..." */
    snprintf(text, sizeof text, "%s%s", head, bad);
    const char *w8[] = {"word.txt:5", "field 3 (ta)", "expected an integer"};
    tap_ok(refused("word.txt", text, w8, 3, err, sizeof err),
           "a word where an integer belongs: refused naming the field (%s)", err);
    entry_line(line, sizeof line, 2, 0, "");
    snprintf(text, sizeof text, "%s%s%s", head, line, line);
    const char *w11[] = {"twice.txt:6", "the same GEMM key as an earlier line"};
    tap_ok(refused("twice.txt", text, w11, 2, err, sizeof err),
           "a key on two lines: refused at the second (%s)", err);
    snprintf(text, sizeof text, "device NVIDIA H200\n%s", line);
    const char *w12[] = {"headless.txt:2", "before the \"device\" and \"cublaslt\" lines"};
    tap_ok(refused("headless.txt", text, w12, 2, err, sizeof err),
           "an entry before the cublaslt line: refused, not a TSR_GEMM_TUNE file (%s)", err);

    /* 16: comments, blank lines and CRLF endings are fine */
    entry_line(line, sizeof line, 4, 0, "");
    line[strlen(line) - 1] = 0;
    snprintf(text, sizeof text, "# x\r\ndevice NVIDIA H200\r\n\r\ncublaslt 130100\r\n  # y\r\n%s\r\n",
             line);
    char crlf[512];
    path_of(crlf, sizeof crlf, "crlf.txt");
    write_text(crlf, text);
    rc = tcu_tune_load(&r, crlf, "NVIDIA H200", 130100, err, sizeof err);
    int64_t k4[TCU_TUNE_KEY_N];
    key_of(k4, 4);
    tap_ok(rc == 0 && r.n == 1 && tcu_tune_find(&r, k4),
           "comments, blank lines and CRLF line ends: read (rc %d, %d entries)", rc, r.n);
    tcu_tune_release(&r);

    /* 17: writable: a directory that exists, yes; one that does not, no (naming it) */
    char nodir[600];
    snprintf(nodir, sizeof nodir, "%s/no-such-dir/choices.txt", dir);
    int w_ok = tcu_tune_writable(path, err, sizeof err);
    int w_no = tcu_tune_writable(nodir, err, sizeof err);
    tap_ok(w_ok == 0 && w_no == -1 && strstr(err, "cannot write in") &&
               strstr(err, "/no-such-dir (") &&
               temporaries() == 0,
           "tcu_tune_writable: the test's directory yes, a missing one no, naming it (%s)", err);

    /* 18: a write that cannot complete (the path is a directory) leaves it as it was */
    char taken[512], inside[600];
    path_of(taken, sizeof taken, "taken");
    mkdir(taken, 0755);
    snprintf(inside, sizeof inside, "%s/keep", taken);
    write_text(inside, "kept\n");
    rc = tcu_tune_save(&t, taken, err, sizeof err);
    struct stat st;
    tap_ok(rc == -1 && stat(inside, &st) == 0 && st.st_size == 5 && temporaries() == 0 &&
               strstr(err, "taken: cannot write it") && strstr(err, "unchanged"),
           "a save onto a directory: refused, what was there untouched, no temporary file (%s)",
           err);
    tcu_tune_release(&t);

    /* clean up */
    const char *names[] = {"choices.txt", "short.txt", "word.txt", "long.txt", "negative.txt",
                           "inf.txt", "data.txt", "twice.txt", "headless.txt", "crlf.txt"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        path_of(path, sizeof path, names[i]);
        unlink(path);
    }
    unlink(inside);
    rmdir(taken);
    rmdir(dir);
    return tap_done();
}
