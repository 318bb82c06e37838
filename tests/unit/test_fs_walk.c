/* test_fs_walk.c — fs_walk, the input-directory walk of `prep` and `tokenizer train`: byte order,
 * hidden names, symbolic links to files and directories followed, a link loop skipped with a
 * warning, a FIFO skipped with a warning, a dangling link an error, a callback's status stops the
 * walk. Fixture: a mkdtemp tree under /tmp, removed at the end. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "fsutil.h"
#include "tap.h"
#include "testfs.h"

#define PLAN 11

static char root[256];

/* The files found, as paths relative to root joined by ' '; stops with 7 at a path holding stop. */
typedef struct found {
    char list[2048];
    const char *stop;
    long long bytes;
} found;

static int on_file(void *ctx, const char *path, const struct stat *st) {
    found *f = ctx;
    size_t n = strlen(f->list), skip = strlen(root) + 1;
    snprintf(f->list + n, sizeof f->list - n, "%s%s", n ? " " : "", path + skip);
    f->bytes += (long long)st->st_size;
    return f->stop && strstr(path, f->stop) ? 7 : 0;
}

static void spit(const char *dir, const char *name, const char *text) {
    char p[512];
    pjoin(p, dir, name);
    FILE *f = fopen(p, "w");
    if (!f) {
        perror(p);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

static void make_link(const char *target, const char *dir, const char *name) {
    char p[512];
    pjoin(p, dir, name);
    if (symlink(target, p) != 0) {
        perror(p);
        exit(1);
    }
}

/* root/in: b.txt a.txt .hidden sub/{c.txt .h2 pipe back->..} link_file->a.txt link_dir->sub
 * Z.txt (upper case sorts before lower case in byte order). */
static void make_tree(char *in) {
    char sub[512], p[512];
    pjoin(in, root, "in");
    pjoin(sub, in, "sub");
    if (mkdir(in, 0700) || mkdir(sub, 0700)) {
        perror(in);
        exit(1);
    }
    spit(in, "b.txt", "bb");
    spit(in, "a.txt", "a");
    spit(in, "Z.txt", "zzz");
    spit(in, ".hidden", "hidden");
    spit(sub, "c.txt", "cccc");
    spit(sub, ".h2", "hidden");
    pjoin(p, sub, "pipe");
    if (mkfifo(p, 0600) != 0) perror(p);
    make_link("..", sub, "back");
    make_link("a.txt", in, "link_file");
    make_link("sub", in, "link_dir");
}

/* fs_walk(dir) into f with its stderr captured: the status, what it said in *err */
static int walk(const char *dir, found *f, const char **err) {
    cap_begin();
    int rc = fs_walk(dir, on_file, f);
    *err = cap_end();
    return rc;
}

static void test_walk(const char *in) {
    found f = {0};
    const char *err;
    int rc = walk(in, &f, &err);
    tap_ok(rc == 0, "the walk succeeds (rc %d)", rc);
    tap_ok(!strcmp(f.list, "in/Z.txt in/a.txt in/b.txt in/link_dir/c.txt in/link_file in/sub/c.txt"),
           "files in byte order, hidden skipped, links to files and directories followed: %s",
           f.list);
    tap_ok(f.bytes == 3 + 1 + 2 + 4 + 1 + 4, "each file's stat is its target's (%lld bytes)", f.bytes);
    tap_ok(strstr(err, "in/sub/pipe: a FIFO, skipped") && strstr(err, "in/link_dir/pipe: a FIFO"),
           "a FIFO is skipped with a warning naming it: %s", err);
    tap_ok(strstr(err, "in/sub/back: a symbolic link loop") != NULL,
           "a link back to an ancestor is skipped with a warning naming it");

    char slash[512];
    snprintf(slash, sizeof slash, "%s/", in);
    found g = {0};
    rc = walk(slash, &g, &err);
    tap_ok(rc == 0 && !strcmp(g.list, f.list), "a trailing '/' gives the same paths (no '//')");

    found h = {.stop = "b.txt"};
    rc = walk(in, &h, &err);
    tap_ok(rc == 7 && !strcmp(h.list, "in/Z.txt in/a.txt in/b.txt"),
           "a callback's nonzero status stops the walk and is returned: %d, %s", rc, h.list);
}

static void test_errors(void) {
    char bad[512], p[512];
    pjoin(bad, root, "bad");
    if (mkdir(bad, 0700) != 0) perror(bad);
    spit(bad, "a.txt", "a");
    make_link("missing", bad, "dangling");
    const struct { const char *dir, *want, *what; } errs[] = {
        {"bad", "bad/dangling: cannot read input", "a dangling link is an error naming it"},
        {"nothing", "nothing: cannot read input", "a missing directory is an error naming it"},
        {"in/a.txt", "cannot list directory", "a file given as the directory is an error"},
    };
    found f = {0};
    const char *err;
    for (int i = 0; i < 3; i++) {
        pjoin(p, root, errs[i].dir);
        int rc = walk(p, &f, &err);
        tap_ok(rc == TSR_EXIT_DATA && strstr(err, errs[i].want), "%s: %s", errs[i].what, err);
    }

    pjoin(p, root, "empty");
    if (mkdir(p, 0700) != 0) perror(p);
    found e = {0};
    int rc = fs_walk(p, on_file, &e);
    tap_ok(rc == 0 && !e.list[0], "an empty directory gives no file");
}

int main(void) {
    tap_plan(PLAN);
    testfs_root(root, sizeof root, "test_fs_walk");
    char in[512];
    make_tree(in);
    test_walk(in);
    test_errors();
    rm_rf(root);
    return tap_done();
}
