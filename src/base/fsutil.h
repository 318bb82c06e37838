/* fsutil.h — small filesystem steps: the write-aside-then-rename protocol, where this program is. */
#ifndef TSR_FSUTIL_H
#define TSR_FSUTIL_H

#include <stddef.h>

/* mkdir -p of the directory that will hold `path` (its last component is not created).
 * Returns 0 or -1 with errno set. */
int fs_make_parents(const char *path);
/* fsync of the directory holding `path`, so a rename into it is durable. Returns 0 or
 * TSR_EXIT_DATA after tsr_error(). */
int fs_sync_parent(const char *path);
/* The directory of the running executable (/proc/self/exe) into buf (n bytes), "" when
 * unreadable: where the libraries built beside it are looked for. */
void fs_exe_dir(char *buf, size_t n);
/* The whole of `path` ("-" = standard input; a pipe or FIFO works too) into a malloc'd buffer with
 * a '\0' after its *n bytes. At most max_bytes bytes (0: no limit). Returns 0, or TSR_EXIT_DATA
 * after tsr_error() naming the path (cannot open, read error, too large). */
int fs_read_all(const char *path, size_t max_bytes, char **out, size_t *n);

#endif
