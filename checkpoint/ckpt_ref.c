/* ckpt_ref.c — reference files: the one format of the values a run stores once (ckpt_ref.h). */
#include "ckpt_ref.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "crc32c.h"
#include "fsutil.h"

#define HDR_FIXED 48 /* magic 8, version 4, kind 16, elem 4, parts 4, n 8, meta_bytes 4 */

size_t ckpt_ref_values_at(const ckpt_ref *r) { return HDR_FIXED + (size_t)r->meta_bytes; }

static uint64_t trailer_at(const ckpt_ref *r) {
    return (uint64_t)ckpt_ref_values_at(r) + r->n * r->elem;
}

uint64_t ckpt_ref_file_bytes(const ckpt_ref *r) { return trailer_at(r) + 4ull * r->parts + 4; }

/* the header's bytes (ckpt_ref_values_at(r) of them) */
static unsigned char *header(const ckpt_ref *r) {
    unsigned char *h = tsr_calloc(1, ckpt_ref_values_at(r));
    const uint32_t v = CKPT_REF_VERSION;
    memcpy(h, CKPT_REF_MAGIC, 8), memcpy(h + 8, &v, 4);
    memcpy(h + 12, r->kind, strnlen(r->kind, CKPT_REF_KIND - 1));
    memcpy(h + 28, &r->elem, 4), memcpy(h + 32, &r->parts, 4), memcpy(h + 36, &r->n, 8);
    memcpy(h + 44, &r->meta_bytes, 4);
    if (r->meta_bytes) memcpy(h + HDR_FIXED, r->meta, r->meta_bytes);
    return h;
}

static uint32_t checksum_of(const unsigned char *h, const ckpt_ref *r) {
    const uint32_t crc = tsr_crc32c(0, h, ckpt_ref_values_at(r));
    return tsr_crc32c(crc, r->part_crc, (size_t)r->parts * 4);
}

uint32_t ckpt_ref_checksum(const ckpt_ref *r) {
    unsigned char *h = header(r);
    const uint32_t crc = checksum_of(h, r);
    free(h);
    return crc;
}

static int io_fail(const char *path, const char *what) {
    tsr_error("%s: %s failed: %s", path, what, strerror(errno));
    return TSR_EXIT_DATA;
}

int ckpt_ref_create(const char *tmp) {
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || close(fd) != 0) return io_fail(tmp, "create");
    return 0;
}

/* n bytes at off into the open file fd, in pieces pwrite takes */
static int pwrite_all(int fd, const void *buf, uint64_t n, uint64_t off) {
    const char *p = buf;
    while (n) {
        const ssize_t w = pwrite(fd, p, n < (1u << 30) ? n : (1u << 30), (off_t)off);
        if (w <= 0) return -1;
        p += w, n -= (uint64_t)w, off += (uint64_t)w;
    }
    return 0;
}

static int pread_all(int fd, void *buf, uint64_t n, uint64_t off) {
    char *p = buf;
    while (n) {
        const ssize_t got = pread(fd, p, n < (1u << 30) ? n : (1u << 30), (off_t)off);
        if (got <= 0) return -1;
        p += got, n -= (uint64_t)got, off += (uint64_t)got;
    }
    return 0;
}

int ckpt_ref_write_values(const char *tmp, const ckpt_ref *r, uint64_t at, const void *v,
                          uint64_t count, uint32_t *crc) {
    const uint64_t bytes = count * r->elem;
    *crc = tsr_crc32c(0, v, (size_t)bytes);
    const int fd = open(tmp, O_WRONLY);
    int rc = fd < 0 || pwrite_all(fd, v, bytes, ckpt_ref_values_at(r) + at * r->elem) != 0 ||
             fsync(fd) != 0;
    if (rc) rc = io_fail(tmp, "write");
    if (fd >= 0) close(fd);
    return rc;
}

int ckpt_ref_commit(const char *tmp, const char *path, const ckpt_ref *r) {
    unsigned char *h = header(r);
    const uint32_t crc = checksum_of(h, r);
    const int fd = open(tmp, O_WRONLY);
    int rc = fd < 0 || pwrite_all(fd, h, ckpt_ref_values_at(r), 0) != 0 ||
             pwrite_all(fd, r->part_crc, 4ull * r->parts, trailer_at(r)) != 0 ||
             pwrite_all(fd, &crc, 4, trailer_at(r) + 4ull * r->parts) != 0 || fsync(fd) != 0;
    if (rc) rc = io_fail(tmp, "write");
    if (fd >= 0) close(fd);
    free(h);
    if (!rc && rename(tmp, path) != 0) rc = io_fail(path, "rename");
    return rc ? rc : fs_sync_parent(path);
}

int ckpt_ref_is_one(const char *path) {
    char m[8];
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    const int one = fread(m, 8, 1, f) == 1 && memcmp(m, CKPT_REF_MAGIC, 8) == 0;
    fclose(f);
    return one;
}

/* The fixed header h against want: "" or the first difference, in words, into why; want->n = 0:
 * the file's count, into want->n */
static void check_fixed(const unsigned char *h, ckpt_ref *want, char *why, size_t cap) {
    uint32_t v, elem, parts, meta;
    uint64_t n;
    char kind[CKPT_REF_KIND + 1] = "";
    memcpy(&v, h + 8, 4), memcpy(kind, h + 12, CKPT_REF_KIND), memcpy(&elem, h + 28, 4);
    memcpy(&parts, h + 32, 4), memcpy(&n, h + 36, 8), memcpy(&meta, h + 44, 4);
    why[0] = '\0';
    if (!want->n) want->n = n;
    if (memcmp(h, CKPT_REF_MAGIC, 8) != 0)
        snprintf(why, cap, "not a reference file (no %s header)", CKPT_REF_MAGIC);
    else if (v != CKPT_REF_VERSION)
        snprintf(why, cap, "format version %u, this program reads %u", v, CKPT_REF_VERSION);
    else if (strncmp(kind, want->kind, CKPT_REF_KIND) != 0)
        snprintf(why, cap, "it holds \"%s\" values, not \"%s\"", kind, want->kind);
    else if (elem != want->elem || n != want->n || n > ((uint64_t)1 << 48))
        snprintf(why, cap, "it holds %llu values of %u bytes, this run needs %llu of %u",
                 (unsigned long long)n, elem, (unsigned long long)want->n, want->elem);
    else if (parts != want->parts)
        snprintf(why, cap, "it is cut in %u parts, this run's sharding group has %u", parts,
                 want->parts);
    else if (meta != want->meta_bytes)
        snprintf(why, cap, "its record is %u bytes, this program writes %u", meta, want->meta_bytes);
}

int ckpt_ref_read_header(const char *path, ckpt_ref *want, uint32_t *crc, char *why, size_t cap) {
    const int fd = open(path, O_RDONLY);
    if (fd < 0 && errno == ENOENT) return 1;
    if (fd < 0) return io_fail(path, "open");
    unsigned char *h = tsr_calloc(1, ckpt_ref_values_at(want));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = io_fail(path, "stat");
    } else if ((uint64_t)st.st_size < HDR_FIXED || pread_all(fd, h, HDR_FIXED, 0) != 0) {
        snprintf(why, cap, "not a reference file (shorter than its header)");
        rc = -1;
    } else if (check_fixed(h, want, why, cap), why[0]) {
        rc = -1;
    } else if ((uint64_t)st.st_size != ckpt_ref_file_bytes(want)) {
        snprintf(why, cap, "its size (%llu bytes) does not match its header (%llu bytes: "
                 "truncated or extended)", (unsigned long long)st.st_size,
                 (unsigned long long)ckpt_ref_file_bytes(want));
        rc = -1;
    } else {
        uint32_t stored = 0;
        if (pread_all(fd, h + HDR_FIXED, want->meta_bytes, HDR_FIXED) != 0 ||
            pread_all(fd, want->part_crc, 4ull * want->parts, trailer_at(want)) != 0 ||
            pread_all(fd, &stored, 4, trailer_at(want) + 4ull * want->parts) != 0)
            rc = io_fail(path, "read");
        if (!rc && want->meta_bytes) memcpy(want->meta, h + HDR_FIXED, want->meta_bytes);
        *crc = checksum_of(h, want);
        if (!rc && *crc != stored) {
            snprintf(why, cap, "its checksum is crc32c:%08x, it records crc32c:%08x (damaged)",
                     *crc, stored);
            rc = -1;
        }
    }
    close(fd);
    free(h);
    return rc;
}

int ckpt_ref_read_part(const char *path, const ckpt_ref *want, uint32_t part, uint64_t at,
                       uint64_t count, void *out, char *why, size_t cap) {
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return io_fail(path, "open");
    const uint64_t bytes = count * want->elem;
    int rc = 0;
    if (part >= want->parts || at + count > want->n ||
        pread_all(fd, out, bytes, ckpt_ref_values_at(want) + at * want->elem) != 0) {
        snprintf(why, cap, "part %u (values %llu to %llu) cannot be read (truncated)", part,
                 (unsigned long long)at, (unsigned long long)(at + count));
        rc = -1;
    } else {
        const uint32_t got = tsr_crc32c(0, out, (size_t)bytes);
        if (got != want->part_crc[part]) {
            snprintf(why, cap, "its checksum is crc32c:%08x over part %u's values, its trailer "
                     "records crc32c:%08x (damaged)", got, part, want->part_crc[part]);
            rc = -1;
        }
    }
    close(fd);
    return rc;
}
