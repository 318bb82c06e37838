/* fuzz_common.c — per-process scratch files and input splitting for the harnesses (fuzz_common.h). */
#include "fuzz_common.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

static char g_dir[512];

static void remove_dir(void) {
    if (!g_dir[0]) return;
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[1024];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
}

static void harness_fail(const char *what, const char *arg) {
    fprintf(stderr, "fuzz harness: %s %s: %s\n", what, arg, strerror(errno));
    abort();
}

void fuzz_quiet(void) {
    const char *v = getenv("FUZZ_VERBOSE");
    if (!v || strcmp(v, "1") != 0) tsr_log_mute(1);
}

const char *fuzz_dir(void) {
    if (!g_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(g_dir, sizeof g_dir, "%s/tessera-fuzz.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(g_dir)) harness_fail("mkdtemp", g_dir);
        atexit(remove_dir);
    }
    return g_dir;
}

void fuzz_unlink(const char *name) {
    if (unlink(fuzz_path(name)) != 0 && errno != ENOENT) harness_fail("unlink", fuzz_path(name));
}

const char *fuzz_path(const char *name) {
    static char paths[FUZZ_MAX_PARTS * 2][1024];
    static char names[FUZZ_MAX_PARTS * 2][64];
    fuzz_dir();
    int k = 0;
    while (k < FUZZ_MAX_PARTS * 2 && names[k][0] && strcmp(names[k], name) != 0) k++;
    if (k == FUZZ_MAX_PARTS * 2) harness_fail("too many scratch names, at", name);
    if (!names[k][0]) {
        snprintf(names[k], sizeof names[k], "%s", name);
        snprintf(paths[k], sizeof paths[k], "%s/%s", g_dir, name);
    }
    return paths[k];
}

const char *fuzz_write(const char *name, const uint8_t *p, size_t n) {
    const char *path = fuzz_path(name);
    FILE *f = fopen(path, "wb");
    if (!f) harness_fail("fopen", path);
    if ((n && fwrite(p, 1, n, f) != n) || fclose(f) != 0) harness_fail("write", path);
    return path;
}

int fuzz_split(const uint8_t *data, size_t n, fuzz_part *parts, int max) {
    const size_t seplen = sizeof FUZZ_SEP - 1;
    int k = 0;
    const uint8_t *p = data, *end = data + n;
    while (k < max - 1) {
        const uint8_t *s = (size_t)(end - p) >= seplen ? memmem(p, (size_t)(end - p), FUZZ_SEP, seplen) : NULL;
        if (!s) break;
        parts[k++] = (fuzz_part){p, (size_t)(s - p)};
        p = s + seplen;
    }
    parts[k++] = (fuzz_part){p, (size_t)(end - p)};
    return k;
}

__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_quiet();
    return 0;
}
