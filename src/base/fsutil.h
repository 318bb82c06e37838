/* fsutil.h — small filesystem steps: the write-aside-then-rename protocol, where this program is,
 * the walk of an input directory. */
#ifndef TSR_FSUTIL_H
#define TSR_FSUTIL_H

#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

/* mkdir -p of the directory that will hold `path` (its last component is not created).
 * Returns 0 or -1 with errno set. */
int fs_make_parents(const char *path);
/* Creates a private directory TMPDIR/tessera-WHAT.XXXXXX (TMPDIR unset: /tmp) into out; 0, or
 * TSR_EXIT_DATA after tsr_error. */
int fs_temp_dir(char *out, size_t n, const char *what);
/* fsync of the directory holding `path`, so a rename into it is durable. Returns 0 or
 * TSR_EXIT_DATA after tsr_error(). */
int fs_sync_parent(const char *path);
/* The directory of the running executable (/proc/self/exe) into buf (n bytes), "" when
 * unreadable: where the libraries built beside it are looked for. */
void fs_exe_dir(char *buf, size_t n);
/* Opens a data file read-only: a regular file only, checked before the open (a FIFO in its place
 * would block open() forever, a directory read as an empty or short file) and again on the open
 * descriptor (O_NONBLOCK until then, so one swapped in between cannot block either). what names
 * the kind of file in messages ("shard", "safetensors file"). Returns the descriptor (O_CLOEXEC),
 * or -1 after tsr_error() naming the path and what it is. */
int fs_open_data(const char *path, const char *what);
/* The whole of the regular file `path` ("-" = standard input) into a malloc'd buffer with a '\0'
 * after its *n bytes, opened as fs_open_data does. max_bytes is the most the file may hold, and
 * every caller states it: there is no unbounded read (0 is a bug, stopped with exit 3), because
 * the files tessera reads whole are a user's or a download's (docs/limits.md). A regular file over
 * the bound is refused by its size before a byte is read ("PATH: N bytes, larger than MAX bytes,
 * the most this file may hold"); a stream, when it passes the bound. Returns 0, or TSR_EXIT_DATA
 * after tsr_error() naming the path (not a regular file, cannot open, read error, too large). */
int fs_read_all(const char *path, size_t max_bytes, char **out, size_t *n);
/* fs_read_all for an input a user may pipe in: a FIFO or a pipe (`<(...)`, /dev/stdin) is read
 * too (tessera tokenizer encode / decode). */
int fs_read_stream(const char *path, size_t max_bytes, char **out, size_t *n);
/* fs_read_all's size check alone, for a file copied or read later (before anything is written):
 * 0 when path is not a regular file larger than max_bytes, else TSR_EXIT_DATA after the same
 * message. */
int fs_fits(const char *path, size_t max_bytes);

/* Replacing a file atomically, so a reader sees the old or the new one, never a part (the health
 * checker's --json and --prometheus, the trainer's metrics.prometheus_dir): fs_open_beside opens a
 * new, empty temp file "PATH.XXXXXX" (mkstemp: whatever is at such a name, a file or a planted
 * symlink, is never opened or followed; mode 0644) and puts its name in tmp; NULL after tsr_error.
 * fs_commit_beside flushes, fsyncs and closes it, renames it over path and syncs the directory:
 * 0, or TSR_EXIT_DATA after tsr_error (the temp file is removed, path untouched). */
FILE *fs_open_beside(const char *path, char *tmp, size_t n);
int fs_commit_beside(FILE *f, const char *tmp, const char *path);

/* Runs argv[0] (found on PATH; no shell) with argv; captures up to n-1 bytes of its stdout into
 * out when out != NULL. Returns its exit status, or -1 when it could not be started (after
 * tsr_error naming it) or died of a signal. */
int fs_run_argv(char *const argv[], char *out, size_t n);

/* Called by fs_walk for each regular file found: its path (dir/sub/name) and stat (the target's,
 * for a symbolic link). Returns 0 to go on, or a status that stops the walk. */
typedef int (*fs_walk_fn)(void *ctx, const char *path, const struct stat *st);
/* The input-directory walk of `prep` and `tokenizer train` (docs/prep.md "Inputs"): calls on_file
 * for every regular file below the directory `dir`, recursively, depth first, each directory's
 * entries in byte order of their names (strcmp: the order does not depend on the locale, so a
 * run is reproducible). Names starting with '.' are skipped. Symbolic links are followed, to
 * files and to directories; a directory already on the path from `dir` down (a symbolic link
 * loop, e.g. `latest -> ..`) is skipped with a warning naming both paths, so every file is
 * visited once along each path and the walk ends. Sockets, FIFOs and devices are skipped with a
 * warning naming the path. An entry that cannot be stat'ed (a dangling link, no permission), a
 * directory that cannot be listed and a path over 4095 bytes are errors. Returns 0, on_file's
 * nonzero status, or TSR_EXIT_DATA after tsr_error() named the path. */
int fs_walk(const char *dir, fs_walk_fn on_file, void *ctx);

#endif
