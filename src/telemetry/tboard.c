/* tboard.c — see tboard.h; the format is written down in docs/tracking.md.
 *
 * TFRecord framing of one record of n data bytes (all integers little-endian):
 *   uint64 n | uint32 mask(crc32c(the 8 bytes of n)) | data[n] | uint32 mask(crc32c(data))
 *   mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8   (mod 2^32)
 * Protobuf wire format used (key = field << 3 | wire type): varint (type 0), fixed64 (type 1),
 * length-delimited (type 2: varint length, bytes), fixed32 (type 5).
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 */
#include "telemetry/tboard.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "crc32c.h"

/* A growable byte buffer for one encoded message. */
typedef struct pbuf {
    uint8_t *p;
    size_t n, cap;
} pbuf;

struct tsr_tboard {
    FILE *f;
    char path[1200];
    pbuf values;   /* encoded Summary.value entries of the pending event */
    pbuf event;    /* scratch: the Event being framed */
    int n_pending; /* scalars in `values` */
    int failed;    /* a write failed: reported, nothing more is written */
};

enum { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2, WT_FIXED32 = 5 };

static void pb_bytes(pbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) tsr_die(TSR_EXIT_INTERNAL, "tboard: realloc(%zu) failed: out of memory", cap);
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void pb_varint(pbuf *b, uint64_t v) {
    uint8_t tmp[10];
    size_t k = 0;
    do {
        tmp[k++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_bytes(b, tmp, k);
}

static void pb_key(pbuf *b, unsigned field, unsigned wire_type) {
    pb_varint(b, (uint64_t)field << 3 | wire_type);
}

static void put_le(uint8_t *dst, uint64_t v, int n) {
    for (int i = 0; i < n; i++) dst[i] = (uint8_t)(v >> (8 * i));
}

/* A fixed-width field: the n (8 or 4) low bytes of u, little-endian. */
static void pb_fixed(pbuf *b, unsigned field, uint64_t u, int n) {
    uint8_t le[8];
    put_le(le, u, n);
    pb_key(b, field, n == 8 ? WT_FIXED64 : WT_FIXED32);
    pb_bytes(b, le, (size_t)n);
}

static void pb_double(pbuf *b, unsigned field, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    pb_fixed(b, field, u, 8);
}

static void pb_float(pbuf *b, unsigned field, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    pb_fixed(b, field, u, 4);
}

static void pb_len(pbuf *b, unsigned field, const void *data, size_t n) {
    pb_key(b, field, WT_LEN);
    pb_varint(b, n);
    pb_bytes(b, data, n);
}

static double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint32_t masked_crc(const void *data, size_t n) {
    uint32_t c = tsr_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* Frames tb->event as one TFRecord and flushes it. */
static int write_record(tsr_tboard *tb) {
    if (tb->failed) return -1;
    uint8_t head[12], tail[4];
    put_le(head, (uint64_t)tb->event.n, 8);
    put_le(head + 8, masked_crc(head, 8), 4);
    put_le(tail, masked_crc(tb->event.p, tb->event.n), 4);
    if (fwrite(head, 1, sizeof head, tb->f) != sizeof head ||
        fwrite(tb->event.p, 1, tb->event.n, tb->f) != tb->event.n ||
        fwrite(tail, 1, sizeof tail, tb->f) != sizeof tail || fflush(tb->f) != 0) {
        tsr_warn("%s: cannot write a TensorBoard record: %s; no more TensorBoard records are "
                 "written by this run (metrics.jsonl goes on)", tb->path, strerror(errno));
        tb->failed = 1;
        return -1;
    }
    return 0;
}

/* Opens a file name that does not exist yet: BASE, else BASE.1, BASE.2, ... (a resume within the
 * same second on the same host). */
static FILE *open_new(char *path, size_t n, const char *base) {
    for (int k = 0; k < 1000; k++) {
        if (k == 0 ? tsr_snprintf(path, n, "%s", base) : tsr_snprintf(path, n, "%s.%d", base, k)) {
            errno = ENAMETOOLONG;
            return NULL;
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) return fdopen(fd, "wb");
        if (errno != EEXIST) return NULL;
    }
    return NULL;
}

int tboard_open(tsr_tboard **out, const char *run_dir) {
    *out = NULL;
    char dir[1024], base[1200], host[256] = "localhost";
    if (tsr_snprintf(dir, sizeof dir, "%s/tb", run_dir)) {
        tsr_error("run_dir = \"%s\": path too long for its tb/ directory", run_dir);
        return TSR_EXIT_DATA;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        tsr_error("%s: cannot create the TensorBoard directory: %s", dir, strerror(errno));
        return TSR_EXIT_DATA;
    }
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *p = host; *p; p++)
        if (*p == '/') *p = '_';
    if (tsr_snprintf(base, sizeof base, "%s/events.out.tfevents.%lld.%s", dir,
                     (long long)time(NULL), host)) {
        tsr_error("%s: path too long for an event file", dir);
        return TSR_EXIT_DATA;
    }
    tsr_tboard *tb = tsr_calloc(1, sizeof *tb);
    tb->f = open_new(tb->path, sizeof tb->path, base);
    if (!tb->f) {
        tsr_error("%s: cannot create the TensorBoard event file: %s", base, strerror(errno));
        free(tb);
        return TSR_EXIT_DATA;
    }
    static const char version[] = "brain.Event:2";
    pb_double(&tb->event, 1, wall_time());
    pb_len(&tb->event, 3, version, sizeof version - 1);
    if (write_record(tb) != 0) {
        tboard_close(tb);
        return TSR_EXIT_DATA;
    }
    *out = tb;
    return 0;
}

void tboard_scalar(tsr_tboard *tb, const char *tag, double value) {
    if (!tb || !isfinite(value) || !isfinite((float)value)) return;
    pbuf v = {0};
    pb_len(&v, 1, tag, strnlen(tag, 255));
    pb_float(&v, 2, (float)value);
    pb_len(&tb->values, 1, v.p, v.n); /* Summary.value (repeated) */
    free(v.p);
    tb->n_pending++;
}

int tboard_write_step(tsr_tboard *tb, int64_t step) {
    if (!tb || tb->n_pending == 0) return 0;
    tb->event.n = 0;
    pb_double(&tb->event, 1, wall_time());
    pb_key(&tb->event, 2, WT_VARINT);
    pb_varint(&tb->event, (uint64_t)step); /* int64: two's complement, as protobuf does */
    pb_len(&tb->event, 5, tb->values.p, tb->values.n);
    tb->values.n = 0;
    tb->n_pending = 0;
    return write_record(tb);
}

void tboard_close(tsr_tboard *tb) {
    if (!tb) return;
    if (tb->f && fclose(tb->f) != 0 && !tb->failed)
        tsr_warn("%s: closing the TensorBoard event file failed: %s", tb->path, strerror(errno));
    free(tb->values.p);
    free(tb->event.p);
    free(tb);
}
