/* fsutil.c — see fsutil.h. */
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int fs_read_all(const char *path, size_t max_bytes, char **out, size_t *n) {
    *out = NULL;
    *n = 0;
    int is_stdin = strcmp(path, "-") == 0;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        tsr_error("%s: cannot open: %s", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    size_t cap = 1 << 16, len = 0, got;
    char *b = tsr_malloc(cap + 1);
    while ((got = fread(b + len, 1, cap - len, f)) > 0) {
        len += got;
        if (max_bytes && len > max_bytes) break;
        if (len == cap) b = tsr_realloc(b, (cap *= 2) + 1);
    }
    int err = ferror(f) ? errno : 0;
    if (!is_stdin) fclose(f);
    if (err || (max_bytes && len > max_bytes)) {
        if (err) tsr_error("%s: read failed after %zu bytes: %s", path, len, strerror(err));
        else tsr_error("%s: larger than %zu bytes, the most this file may hold", path, max_bytes);
        free(b);
        return TSR_EXIT_DATA;
    }
    b[len] = '\0';
    *out = b;
    *n = len;
    return 0;
}
