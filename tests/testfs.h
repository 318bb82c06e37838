/* testfs.h — small file helpers shared by the C unit tests (header-only, like tap.h). They exit(1)
 * on a path too long for their 512-byte buffers; the tests' temp paths are short. */
#ifndef TSR_TESTFS_H
#define TSR_TESTFS_H

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* path = text (created or truncated); exits 1 when it cannot be written */
static inline void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "unit test: cannot write %s\n", path);
        exit(1);
    }
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

/* whether files a and b are both readable and hold the same bytes */
static inline int same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* Stderr capture: cap_begin sends fd 2 to a file until cap_end returns what was written there,
 * trailing newlines dropped and the others shown as '|' (so it fits one TAP line; at most 8191
 * bytes). cap_set_dir(dir) first: the file is dir/stderr.txt. State in a function's statics, so a
 * test that does not capture gets no unused variable. */
typedef struct testfs_capture {
    int saved;
    char path[512];
    char text[8192];
} testfs_capture;

static inline testfs_capture *testfs_cap(void) {
    static testfs_capture c = {.saved = -1};
    return &c;
}

static inline void cap_set_dir(const char *dir) { pjoin(testfs_cap()->path, dir, "stderr.txt"); }

/* fd 1 or 2 sent to path (created or truncated; "/dev/null" to silence it) until
 * fd_restore(fd, saved) with the copy of the old one this returns; exits 1 when it cannot */
static inline int fd_redirect(int fd, const char *path) {
    fflush(fd == 1 ? stdout : stderr);
    int saved = dup(fd), to = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved < 0 || to < 0) {
        perror(path);
        exit(1);
    }
    dup2(to, fd);
    close(to);
    return saved;
}

static inline void fd_restore(int fd, int saved) {
    fflush(fd == 1 ? stdout : stderr);
    dup2(saved, fd);
    close(saved);
}

static inline void cap_begin(void) { testfs_cap()->saved = fd_redirect(2, testfs_cap()->path); }

/* root (size bytes) = a new directory /tmp/tsr_NAME.XXXXXX, the test's own, where the capture
 * writes (cap_set_dir); exits 1 when it cannot be made */
static inline void testfs_root(char *root, size_t size, const char *name) {
    if (snprintf(root, size, "/tmp/tsr_%s.XXXXXX", name) >= (int)size || !mkdtemp(root)) {
        perror("mkdtemp");
        exit(1);
    }
    cap_set_dir(root);
}

static inline const char *cap_end(void) {
    testfs_capture *c = testfs_cap();
    fd_restore(2, c->saved);
    size_t n;
    char *t = slurp(c->path, &n);
    snprintf(c->text, sizeof c->text, "%.*s", (int)n, t ? t : "");
    free(t);
    n = strlen(c->text);
    while (n && c->text[n - 1] == '\n') c->text[--n] = '\0';
    for (char *p = c->text; *p; p++)
        if (*p == '\n') *p = '|';
    return c->text;
}

#endif
