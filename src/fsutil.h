/* fsutil.h — small filesystem steps of the write-aside-then-rename protocol. */
#ifndef TSR_FSUTIL_H
#define TSR_FSUTIL_H

/* mkdir -p of the directory that will hold `path` (its last component is not created).
 * Returns 0 or -1 with errno set. */
int fs_make_parents(const char *path);
/* fsync of the directory holding `path`, so a rename into it is durable. Returns 0 or
 * TSR_EXIT_DATA after tsr_error(). */
int fs_sync_parent(const char *path);

#endif
