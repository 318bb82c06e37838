/* testfs.h — small file helpers shared by the C unit tests (header-only, like tap.h). They exit(1)
 * on a path too long for their 512-byte buffers; the tests' temp paths are short. */
#ifndef TSR_TESTFS_H
#define TSR_TESTFS_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* out (512 bytes) = a "/" b */
static inline void pjoin(char *out, const char *a, const char *b) {
    if (snprintf(out, 512, "%s/%s", a, b) >= 512) {
        fprintf(stderr, "unit test: path too long: %s/%s\n", a, b);
        exit(1);
    }
}

static inline int testfs_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}
/* rm -rf path (does not follow symbolic links) */
static inline void rm_rf(const char *path) { nftw(path, testfs_rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static inline int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* The whole file, NUL-terminated, malloc'd; its length in *len (may be NULL). NULL if unreadable. */
static inline char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (len) *len = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = '\0';
    if (len) *len = got;
    return buf;
}

#endif
