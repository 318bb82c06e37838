/* fsutil.c — see fsutil.h. */
#include "fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

int fs_make_parents(const char *path) {
    char buf[4096];
    if (tsr_snprintf(buf, sizeof buf, "%s", path)) return -1;
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
    char *last = strrchr(buf, '/');
    if (!last || last == buf) return 0;
    *last = '\0';
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return (mkdir(buf, 0777) != 0 && errno != EEXIST) ? -1 : 0;
}

int fs_sync_parent(const char *path) {
    char buf[4096];
    if (tsr_snprintf(buf, sizeof buf, "%s", path)) return TSR_EXIT_DATA;
    char *last = strrchr(buf, '/');
    if (!last) strcpy(buf, ".");
    else if (last == buf) buf[1] = '\0';
    else *last = '\0';
    int fd = open(buf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL)) {
        tsr_error("%s: fsync of the directory failed: %s", buf, strerror(errno));
        if (fd >= 0) close(fd);
        return TSR_EXIT_DATA;
    }
    close(fd);
    return 0;
}

void fs_exe_dir(char *buf, size_t n) {
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    buf[0] = '\0';
    if (k <= 0) return;
    exe[k] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    snprintf(buf, n, "%s", exe);
}

static const char *file_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket"
           : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device" : "not a file";
}

int fs_open_data(const char *path, const char *what) {
    struct stat st;
    if (stat(path, &st) != 0) {
        tsr_error("%s: cannot open %s: %s", path, what, strerror(errno));
        return -1;
    }
    int fd = S_ISREG(st.st_mode) ? open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) : -1;
    if (fd < 0 && S_ISREG(st.st_mode)) {
        tsr_error("%s: cannot open %s: %s", path, what, strerror(errno));
        return -1;
    }
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) { /* replaced since the stat */
        close(fd);
        fd = -1;
    }
    if (fd < 0) {
        tsr_error("%s: is %s, not a regular file: a %s is read from a regular file only", path,
                  file_kind(st.st_mode), what);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

/* The one refusal of a file over its bound; size < 0 when unknown (a pipe, a file that grew). */
static int too_large(const char *path, long long size, size_t max_bytes) {
    char got[48] = "";
    if (size >= 0) snprintf(got, sizeof got, " %lld bytes,", size);
    tsr_error("%s:%s larger than %zu bytes, the most this file may hold", path, got, max_bytes);
    return TSR_EXIT_DATA;
}

static int read_stream(FILE *f, const char *path, size_t max_bytes, char **out, size_t *n) {
    size_t cap = 1 << 16, len = 0, got;
    char *b = tsr_malloc(cap + 1);
    while ((got = fread(b + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len > max_bytes) break;
        if (len == cap) b = tsr_realloc(b, (cap *= 2) + 1);
    }
    int err = ferror(f) ? errno : 0;
    if (f != stdin) fclose(f);
    if (err || len > max_bytes) {
        free(b);
        if (!err) return too_large(path, -1, max_bytes);
        tsr_error("%s: read failed after %zu bytes: %s", path, len, strerror(err));
        return TSR_EXIT_DATA;
    }
    b[len] = '\0';
    *out = b;
    *n = len;
    return 0;
}

int fs_fits(const char *path, size_t max_bytes) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size > max_bytes)
        return too_large(path, (long long)st.st_size, max_bytes);
    return 0;
}

static int read_file(const char *path, size_t max_bytes, char **out, size_t *n, int pipes) {
    *out = NULL;
    *n = 0;
    if (max_bytes == 0) /* a bug, not the file's fault: every read states its bound */
        tsr_die(TSR_EXIT_INTERNAL, "%s: read with no bound on its size", path);
    int own = strcmp(path, "-") != 0, fd = 0;
    if (own) {
        fd = pipes ? open(path, O_RDONLY | O_CLOEXEC) : fs_open_data(path, "file");
        if (pipes && fd < 0) tsr_error("%s: cannot open: %s", path, strerror(errno));
        if (fd < 0) return TSR_EXIT_DATA;
    }
    struct stat st; /* a regular file's size refused before a byte is read */
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size > max_bytes) {
        if (own) close(fd);
        return too_large(path, (long long)st.st_size, max_bytes);
    }
    FILE *f = own ? fdopen(fd, "rb") : stdin;
    if (!f) tsr_die(TSR_EXIT_INTERNAL, "%s: fdopen failed: %s", path, strerror(errno));
    return read_stream(f, path, max_bytes, out, n);
}

int fs_read_all(const char *path, size_t max_bytes, char **out, size_t *n) {
    return read_file(path, max_bytes, out, n, 0);
}

int fs_read_stream(const char *path, size_t max_bytes, char **out, size_t *n) {
    return read_file(path, max_bytes, out, n, 1);
}

/* ---- the input-directory walk ---- */

/* A directory on the path from the walk's root down: (device, inode) identify it whatever link
 * led there; path is where the walk met it. */
typedef struct fs_walk_dir {
    dev_t dev;
    ino_t ino;
    const char *path;
    const struct fs_walk_dir *up;
} fs_walk_dir;

typedef struct fs_walker {
    char path[4096]; /* the entry being visited; each level appends "/name" and truncates back */
    fs_walk_fn on_file;
    void *ctx;
} fs_walker;

static int walk_name_cmp(const struct dirent **x, const struct dirent **y) {
    return strcmp((*x)->d_name, (*y)->d_name); /* byte order: independent of the locale */
}
static int walk_not_hidden(const struct dirent *e) {
    return e->d_name[0] != '.';
}

static const char *special_kind(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    return "not a regular file or a directory";
}

static int walk_level(fs_walker *w, const fs_walk_dir *here);

/* Visits w->path (stat'ed into st): a file, a directory below `here`, or something skipped. */
static int walk_entry(fs_walker *w, const fs_walk_dir *here, const struct stat *st) {
    if (S_ISREG(st->st_mode)) return w->on_file(w->ctx, w->path, st);
    if (!S_ISDIR(st->st_mode)) {
        tsr_warn("%s: %s, skipped", w->path, special_kind(st->st_mode));
        return 0;
    }
    for (const fs_walk_dir *a = here; a; a = a->up)
        if (a->dev == st->st_dev && a->ino == st->st_ino) {
            tsr_warn("%s: a symbolic link loop (the directory %s again), skipped", w->path, a->path);
            return 0;
        }
    char *own = strdup(w->path);
    if (!own) tsr_die(TSR_EXIT_INTERNAL, "out of memory walking %s", w->path);
    fs_walk_dir sub = {st->st_dev, st->st_ino, own, here};
    int rc = walk_level(w, &sub);
    free(own);
    return rc;
}

/* Visits the entries of the directory w->path (which is `here`), in byte order of their names. */
static int walk_level(fs_walker *w, const fs_walk_dir *here) {
    struct dirent **names;
    int n = scandir(w->path, &names, walk_not_hidden, walk_name_cmp);
    if (n < 0) {
        tsr_error("%s: cannot list directory: %s", w->path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    size_t len = strlen(w->path);
    int rc = 0;
    for (int k = 0; k < n; k++) {
        const char *sep = len && w->path[len - 1] == '/' ? "" : "/";
        struct stat st;
        if (!rc && tsr_snprintf(w->path + len, sizeof w->path - len, "%s%s", sep,
                                names[k]->d_name)) {
            w->path[len] = '\0';
            tsr_error("%s%s%s: path too long", w->path, sep, names[k]->d_name);
            rc = TSR_EXIT_DATA;
        }
        if (!rc && stat(w->path, &st) != 0) {
            tsr_error("%s: cannot read input: %s", w->path, strerror(errno));
            rc = TSR_EXIT_DATA;
        }
        if (!rc) rc = walk_entry(w, here, &st);
        w->path[len] = '\0';
        free(names[k]);
    }
    free(names);
    return rc;
}

int fs_walk(const char *dir, fs_walk_fn on_file, void *ctx) {
    fs_walker *w = tsr_malloc(sizeof *w);
    w->on_file = on_file;
    w->ctx = ctx;
    struct stat st;
    int rc = 0;
    if (tsr_snprintf(w->path, sizeof w->path, "%s", dir)) {
        tsr_error("%s: path too long", dir);
        rc = TSR_EXIT_DATA;
    } else if (stat(dir, &st) != 0) {
        tsr_error("%s: cannot read input: %s", dir, strerror(errno));
        rc = TSR_EXIT_DATA;
    } else {
        fs_walk_dir root = {st.st_dev, st.st_ino, dir, NULL};
        rc = walk_level(w, &root);
    }
    free(w);
    return rc;
}

/* Runs argv (no shell); captures up to n-1 bytes of stdout into out when out != NULL. Returns the
 * exit status, or -1 when it could not be started or died of a signal. */
int fs_run_argv(char *const argv[], char *out, size_t n) {
    int fd[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out) {
        if (pipe(fd) != 0) return -1;
        posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
        posix_spawn_file_actions_addclose(&fa, fd[0]);
        posix_spawn_file_actions_addclose(&fa, fd[1]);
    }
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (out) close(fd[1]);
    if (rc != 0) {
        if (out) close(fd[0]);
        tsr_error("cannot run %s: %s", argv[0], strerror(rc));
        return -1;
    }
    if (out) {
        size_t got = 0;
        for (;;) {
            char tmp[4096];
            ssize_t k = read(fd[0], tmp, sizeof tmp);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) break;
            size_t keep = got + (size_t)k < n - 1 ? (size_t)k : n - 1 - got;
            memcpy(out + got, tmp, keep);
            got += keep;
        }
        out[got] = '\0';
        close(fd[0]);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

FILE *fs_open_beside(const char *path, char *tmp, size_t n) {
    if (tsr_snprintf(tmp, n, "%s.XXXXXX", path)) {
        tsr_error("%s: path too long", path);
        return NULL;
    }
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        tsr_error("%s: cannot create a temporary file beside it (%s.XXXXXX): %s", path, path,
                  strerror(errno));
        return NULL;
    }
    FILE *f = fchmod(fd, 0644) == 0 ? fdopen(fd, "w") : NULL; /* mkstemp makes it 0600 */
    if (!f) {
        tsr_error("%s: cannot open %s: %s", path, tmp, strerror(errno));
        close(fd);
        unlink(tmp);
    }
    return f;
}

int fs_commit_beside(FILE *f, const char *tmp, const char *path) {
    int bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        tsr_error("%s: write failed: %s", path, strerror(errno));
        unlink(tmp);
        return TSR_EXIT_DATA;
    }
    return fs_sync_parent(path);
}

int fs_temp_dir(char *out, size_t n, const char *what) {
    const char *base = getenv("TMPDIR");
    base = base && base[0] ? base : "/tmp";
    if (tsr_snprintf(out, n, "%s/tessera-%s.XXXXXX", base, what) || !mkdtemp(out)) {
        tsr_error("%s: cannot create a temporary directory in %s: %s", what, base,
                  strerror(errno));
        return TSR_EXIT_DATA;
    }
    return 0;
}
