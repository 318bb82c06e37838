/* tcu_gemm_tune.c — the GEMM algorithm choices kept in a file (tcu_gemm_tune.h). */
#include "tcu_gemm_tune.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const tcu_tune_key_names[TCU_TUNE_KEY_N] = {
    "op", "epi", "ta", "tb", "ab", "cd", "m", "n", "k", "lda", "ldb", "ldc", "aux_ld",
    "al_a", "al_b", "al_c", "al_bias", "al_aux", "ws", "rule"};
const char *const tcu_tune_cfg_names[TCU_TUNE_CFG_N] = {
    "algo", "tile", "stages", "splitk", "red", "swizzle", "custom", "inner", "cluster"};

static void say(char *err, size_t n, const char *fmt, ...) {
    if (!err || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

static int key_equal(const int64_t *a, const int64_t *b) {
    return memcmp(a, b, TCU_TUNE_KEY_N * sizeof *a) == 0;
}

const tcu_tune_entry *tcu_tune_find(const tcu_tune_table *t, const int64_t key[TCU_TUNE_KEY_N]) {
    for (int i = 0; i < t->n; i++)
        if (key_equal(t->e[i].key, key)) return &t->e[i];
    return NULL;
}

int tcu_tune_add(tcu_tune_table *t, const int64_t key[TCU_TUNE_KEY_N],
                 const int64_t cfg[TCU_TUNE_CFG_N], const uint64_t data[TCU_TUNE_DATA_N],
                 double us, double first_us) {
    tcu_tune_entry *e = (tcu_tune_entry *)tcu_tune_find(t, key);
    if (!e) {
        if (t->n == t->cap) {
            int cap = t->cap ? 2 * t->cap : 64;
            tcu_tune_entry *g = realloc(t->e, (size_t)cap * sizeof *g);
            if (!g) return -1;
            t->e = g, t->cap = cap;
        }
        e = &t->e[t->n++];
        memcpy(e->key, key, sizeof e->key);
    }
    memcpy(e->cfg, cfg, sizeof e->cfg);
    memcpy(e->data, data, sizeof e->data);
    e->us = us, e->first_us = first_us;
    return 0;
}

uint64_t tcu_tune_hash(const tcu_tune_table *t) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the entries' keys, configurations and
                                            algorithms */
    for (int i = 0; i < t->n; i++) {
        const unsigned char *p[3] = {(const unsigned char *)t->e[i].key,
                                     (const unsigned char *)t->e[i].cfg,
                                     (const unsigned char *)t->e[i].data};
        const size_t len[3] = {sizeof t->e[i].key, sizeof t->e[i].cfg, sizeof t->e[i].data};
        for (int k = 0; k < 3; k++)
            for (size_t j = 0; j < len[k]; j++) h = (h ^ p[k][j]) * 1099511628211ull;
    }
    return h;
}

/* path's directory into dir (n bytes): "." when path has no slash */
static void dir_of(const char *path, char *dir, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, n, ".");
    else if (slash == path) snprintf(dir, n, "/");
    else snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

/* the temporary file beside path that tcu_tune_save writes (and tcu_tune_writable tries): 0, or
 * -1 with err */
static int tmp_name(const char *path, char *tmp, size_t tn, char *err, size_t n) {
    if (snprintf(tmp, tn, "%s.tmp.%ld", path, (long)getpid()) < (int)tn) return 0;
    say(err, n, "%s: path too long", path);
    return -1;
}

int tcu_tune_writable(const char *path, char *err, size_t n) {
    char tmp[4096];
    if (tmp_name(path, tmp, sizeof tmp, err, n)) return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644); /* (a killed save's leftover too) */
    if (fd < 0) {
        char dir[4096];
        dir_of(path, dir, sizeof dir);
        say(err, n, "%s: cannot write in %s (%s): the choices timed would be lost at the end",
            path, dir, strerror(errno));
        return -1;
    }
    close(fd);
    unlink(tmp);
    return 0;
}

void tcu_tune_release(tcu_tune_table *t) {
    free(t->e);
    t->e = NULL;
    t->n = t->cap = t->loaded = 0;
}

/* the line without its end-of-line and trailing blanks */
static void chomp(char *s) {
    size_t l = strlen(s);
    while (l && (s[l - 1] == '\n' || s[l - 1] == '\r' || s[l - 1] == ' ' || s[l - 1] == '\t'))
        s[--l] = 0;
}

/* 2 * TCU_TUNE_DATA_N * 8 hex digits into data; 0, or -1 */
static int parse_data(const char *p, size_t len, uint64_t data[TCU_TUNE_DATA_N]) {
    if (len != 16 * TCU_TUNE_DATA_N) return -1;
    for (int w = 0; w < TCU_TUNE_DATA_N; w++) {
        uint64_t v = 0;
        for (int d = 0; d < 16; d++) {
            const char c = p[16 * w + d];
            const int x = c >= '0' && c <= '9'   ? c - '0'
                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                 : -1;
            if (x < 0) return -1;
            v = v << 4 | (uint64_t)x;
        }
        data[w] = v;
    }
    return 0;
}

/* one entry line: 20 + 9 integers, the algorithm's bytes, two times; 0 or -1 with err */
static int parse_entry(const char *line, tcu_tune_entry *e, const char *path, int ln, char *err,
                       size_t n) {
    const char *p = line;
    const int ints = TCU_TUNE_KEY_N + TCU_TUNE_CFG_N, total = ints + 3;
    for (int f = 0; f < total; f++) {
        while (*p == ' ' || *p == '\t') p++;
        const char *name = f < TCU_TUNE_KEY_N ? tcu_tune_key_names[f]
                           : f < ints         ? tcu_tune_cfg_names[f - TCU_TUNE_KEY_N]
                           : f == ints        ? "data"
                           : f == ints + 1    ? "us"
                                              : "first_us";
        if (!*p) {
            say(err, n, "%s:%d: %d fields, expected %d (%d key fields, %d of the algorithm, its "
                "bytes, two times): field %d (%s) is missing", path, ln, f, total,
                TCU_TUNE_KEY_N, TCU_TUNE_CFG_N, f + 1, name);
            return -1;
        }
        char *end;
        errno = 0;
        if (f == ints) {
            const size_t len = strcspn(p, " \t");
            if (parse_data(p, len, e->data)) {
                say(err, n, "%s:%d: field %d (%s) is \"%.*s\": expected %d hex digits (the "
                    "algorithm's bytes)", path, ln, f + 1, name, (int)(len > 40 ? 40 : len), p,
                    16 * TCU_TUNE_DATA_N);
                return -1;
            }
            p += len;
        } else if (f < ints) {
            long long v = strtoll(p, &end, 10);
            if (end == p || errno || (*end && *end != ' ' && *end != '\t')) {
                say(err, n, "%s:%d: field %d (%s) is \"%.*s\": expected an integer", path, ln,
                    f + 1, name, (int)strcspn(p, " \t"), p);
                return -1;
            }
            if (f < TCU_TUNE_KEY_N) e->key[f] = v;
            else e->cfg[f - TCU_TUNE_KEY_N] = v;
            p = end;
        } else {
            double v = strtod(p, &end);
            if (end == p || errno || (*end && *end != ' ' && *end != '\t') || !(v >= 0.0) ||
                !isfinite(v)) {
                say(err, n, "%s:%d: field %d (%s) is \"%.*s\": expected a time in microseconds "
                    "(a finite number >= 0)", path, ln, f + 1, name, (int)strcspn(p, " \t"), p);
                return -1;
            }
            if (f == ints + 1) e->us = v;
            else e->first_us = v;
            p = end;
        }
    }
    while (*p == ' ' || *p == '\t') p++;
    if (*p) {
        say(err, n, "%s:%d: more than %d fields (\"%s\" after the last)", path, ln, total, p);
        return -1;
    }
    return 0;
}

/* a TSR_GEMM_TUNE file being read: which, for which GPU model and cuBLASLt, the line number and
 * the header lines seen; the error message's buffer */
typedef struct tune_reader {
    const char *path, *device;
    int64_t lt_version;
    int ln, have_dev, have_ver;
    char *err;
    size_t n;
} tune_reader;

/* the "device NAME" line: the file is this GPU model's; 0, or -1 with the error said */
static int tune_device(tune_reader *r, const char *name) {
    r->have_dev = 1;
    if (strcmp(name, r->device) == 0) return 0;
    say(r->err, r->n, "%s:%d: made on device \"%s\", this is \"%s\": its algorithms may "
        "not exist here (one file per GPU model)", r->path, r->ln, name, r->device);
    return -1;
}

/* the "cublaslt VERSION" line s: the file is this cuBLASLt's; 0, or -1 with the error said */
static int tune_version(tune_reader *r, const char *s) {
    char *end;
    long long v = strtoll(s + 9, &end, 10);
    r->have_ver = 1;
    if (end == s + 9 || *end) {
        say(r->err, r->n, "%s:%d: \"%s\": expected cublaslt and an integer version", r->path,
            r->ln, s);
        return -1;
    }
    if (v != r->lt_version) {
        say(r->err, r->n, "%s:%d: made with cuBLASLt %lld, this is %" PRId64 ": its "
            "algorithms may differ (tune again into another file)", r->path, r->ln, v,
            r->lt_version);
        return -1;
    }
    return 0;
}

/* an entry line s, after the header: parsed, new, added to t; 0, or -1 with the error said */
static int tune_entry(tcu_tune_table *t, tune_reader *r, const char *s) {
    if (!r->have_dev || !r->have_ver) {
        say(r->err, r->n, "%s:%d: an entry before the \"device\" and \"cublaslt\" lines: not a "
            "TSR_GEMM_TUNE file", r->path, r->ln);
        return -1;
    }
    tcu_tune_entry e;
    if (parse_entry(s, &e, r->path, r->ln, r->err, r->n)) return -1;
    if (tcu_tune_find(t, e.key)) {
        say(r->err, r->n, "%s:%d: the same GEMM key as an earlier line", r->path, r->ln);
        return -1;
    }
    if (tcu_tune_add(t, e.key, e.cfg, e.data, e.us, e.first_us)) {
        say(r->err, r->n, "%s: out of host memory at line %d", r->path, r->ln);
        return -1;
    }
    return 0;
}

/* the lines of f into t until the end or the first error: 0, or -1 with the error said */
static int tune_read(tcu_tune_table *t, tune_reader *r, FILE *f) {
    char line[1024];
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        r->ln++;
        if (!strchr(line, '\n') && !feof(f)) {
            say(r->err, r->n, "%s:%d: a line longer than %zu bytes", r->path, r->ln,
                sizeof line - 2);
            return -1;
        }
        chomp(line);
        const char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (!*s || *s == '#') continue;
        if (strncmp(s, "device ", 7) == 0) rc = tune_device(r, s + 7);
        else if (strncmp(s, "cublaslt ", 9) == 0) rc = tune_version(r, s);
        else rc = tune_entry(t, r, s);
    }
    if (rc == 0 && ferror(f)) {
        say(r->err, r->n, "%s: read error: %s", r->path, strerror(errno));
        rc = -1;
    }
    return rc;
}

int tcu_tune_load(tcu_tune_table *t, const char *path, const char *device, int64_t lt_version,
                  char *err, size_t n) {
    memset(t, 0, sizeof *t);
    snprintf(t->device, sizeof t->device, "%s", device);
    t->lt_version = lt_version;
    FILE *f = fopen(path, "r");
    if (!f && errno == ENOENT) return 0;
    if (!f) {
        say(err, n, "%s: cannot read it: %s", path, strerror(errno));
        return -1;
    }
    tune_reader r = {path, device, lt_version, 0, 0, 0, err, n};
    int rc = tune_read(t, &r, f);
    fclose(f);
    if (rc == 0 && r.ln > 0 && (!r.have_dev || !r.have_ver)) {
        say(err, n, "%s: no \"%s\" line: not a TSR_GEMM_TUNE file", path,
            r.have_dev ? "cublaslt" : "device");
        rc = -1;
    }
    if (rc) {
        tcu_tune_release(t);
        return -1;
    }
    t->loaded = t->n;
    return 0;
}

int tcu_tune_open(tcu_tune_table *t, const char *path, const char *device, int64_t lt_version,
                  int writable, char *err, size_t n) {
    if (tcu_tune_load(t, path, device, lt_version, err, n)) return -1;
    if (writable && tcu_tune_writable(path, err, n)) {
        tcu_tune_release(t);
        return -1;
    }
    return 0;
}

int tcu_tune_save(const tcu_tune_table *t, const char *path, char *err, size_t n) {
    char tmp[4096];
    if (tmp_name(path, tmp, sizeof tmp, err, n)) return -1;
    FILE *f = fopen(tmp, "w");
    if (!f) {
        say(err, n, "%s: cannot write %s: %s", path, tmp, strerror(errno));
        return -1;
    }
    fprintf(f, "# tessera GEMM choices (TSR_GEMM_TUNE); docs/cuda.md, \"GEMM choice by the clock\"\n");
    fprintf(f, "device %s\ncublaslt %" PRId64 "\n#", t->device, t->lt_version);
    for (int i = 0; i < TCU_TUNE_KEY_N; i++) fprintf(f, " %s", tcu_tune_key_names[i]);
    for (int i = 0; i < TCU_TUNE_CFG_N; i++) fprintf(f, " %s", tcu_tune_cfg_names[i]);
    fprintf(f, " data us first_us\n");
    for (int i = 0; i < t->n; i++) {
        const tcu_tune_entry *e = &t->e[i];
        for (int k = 0; k < TCU_TUNE_KEY_N; k++) fprintf(f, "%s%" PRId64, k ? " " : "", e->key[k]);
        for (int k = 0; k < TCU_TUNE_CFG_N; k++) fprintf(f, " %" PRId64, e->cfg[k]);
        fputc(' ', f);
        for (int k = 0; k < TCU_TUNE_DATA_N; k++) fprintf(f, "%016" PRIx64, e->data[k]);
        fprintf(f, " %.3f %.3f\n", e->us, e->first_us);
    }
    int bad = ferror(f);
    int saved = errno;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) bad = 1, saved = errno;
    if (fclose(f) != 0 && !bad) bad = 1, saved = errno;
    if (bad || rename(tmp, path) != 0) {
        if (!bad) saved = errno;
        unlink(tmp);
        say(err, n, "%s: cannot write it: %s (the old file, if any, is unchanged)", path,
            strerror(saved));
        return -1;
    }
    char dir[4096]; /* the rename itself made durable */
    dir_of(path, dir, sizeof dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return 0;
}
