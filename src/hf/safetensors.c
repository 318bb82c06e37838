/* safetensors.c — see safetensors.h for the format and the rules checked.
 *
 * Conventions: sizes and offsets in bytes unless named numel; every failure is reported with
 * tsr_error naming the file (and the tensor when there is one) before returning TSR_EXIT_DATA.
 */
#include "hf/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "fsutil.h"
#include "json.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (the format is little-endian)"
#endif

#define CHUNK (1u << 20) /* elements converted per write or read */

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1},
              {"I16", 2},  {"U16", 2}, {"F16", 2},  {"BF16", 2},    {"I32", 4},
              {"U32", 4},  {"F32", 4}, {"F64", 8},  {"I64", 8},     {"U64", 8}};
_Static_assert(sizeof dtypes / sizeof dtypes[0] == ST_DTYPE_COUNT, "one row per st_dtype");

const char *st_dtype_name(st_dtype d) { return d < ST_DTYPE_COUNT ? dtypes[d].name : "?"; }
size_t st_dtype_size(st_dtype d) { return d < ST_DTYPE_COUNT ? dtypes[d].size : 0; }

static int dtype_parse(const char *s, st_dtype *out) {
    for (int d = 0; d < ST_DTYPE_COUNT; d++)
        if (strcmp(s, dtypes[d].name) == 0) {
            *out = (st_dtype)d;
            return 0;
        }
    return -1;
}

/* ================================ bf16 / f16 ================================ */

/* Round to nearest even on the 16 bits dropped: add 0x7fff plus the lowest kept bit, truncate. */
uint16_t st_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float st_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
        float f = ldexpf((float)m, -24);
        memcpy(&u, &f, sizeof u);
        u |= sign;
    } else if (e == 31) {
        u = sign | 0x7f800000u | (m << 13);
    } else {
        u = sign | ((e + 112u) << 23) | (m << 13);
    }
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ================================ writing ================================ */

typedef struct strbuf {
    char *s;
    size_t n, cap;
} strbuf;

static void sb_add(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(strbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) tsr_die(TSR_EXIT_INTERNAL, "safetensors: vsnprintf failed");
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap <= b->n + (size_t)k) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) tsr_die(TSR_EXIT_INTERNAL, "safetensors: out of memory for the header (%zu bytes)", cap);
        b->s = s;
        b->cap = cap;
    }
}

/* A JSON string: quotes, backslash and control characters escaped, other bytes as they are. */
static void sb_json_str(strbuf *b, const char *s) {
    sb_add(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') sb_add(b, "\\%c", *p);
        else if (*p < 0x20) sb_add(b, "\\u%04x", *p);
        else sb_add(b, "%c", *p);
    }
    sb_add(b, "\"");
}

static uint64_t numel_of(const st_tensor *t) {
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
    return n;
}

/* n elements of t starting at flat (row-major) element k0, as float32. */
static void gather(const st_tensor *t, uint64_t k0, size_t n, float *out) {
    if (!t->src) {
        memset(out, 0, n * sizeof *out);
    } else if (t->index) {
        for (size_t k = 0; k < n; k++) out[k] = t->src[t->index(t->ctx, k0 + k)];
    } else if (!t->transpose) {
        memcpy(out, t->src + k0, n * sizeof *out);
    } else { /* out (R, C) from src (C, R): out[i][j] = src[j][i] */
        uint64_t R = (uint64_t)t->shape[0], C = (uint64_t)t->shape[1];
        uint64_t i = k0 / C, j = k0 % C;
        for (size_t k = 0; k < n; k++) {
            out[k] = t->src[j * R + i];
            if (++j == C) j = 0, i++;
        }
    }
    if (t->src && t->add != 0.0f)
        for (size_t k = 0; k < n; k++) out[k] += t->add;
}

static int by_dtype_then_name(const void *a, const void *b, void *base) {
    const st_tensor *t = base, *x = &t[*(const int *)a], *y = &t[*(const int *)b];
    if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1; /* larger alignment first */
    return strcmp(x->name, y->name);
}

static int by_tensor_name(const void *a, const void *b, void *base) {
    const st_tensor *t = base;
    return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

static int bad_request(const char *path, const st_tensor *x) {
    tsr_error("%s: cannot write tensor \"%s\": duplicate or reserved name, dtype %s not "
              "F32/BF16, or a bad shape (internal error)", path, x->name ? x->name : "(null)",
              st_dtype_name(x->dtype));
    return TSR_EXIT_INTERNAL;
}

/* Each tensor valid, the names unique (sorted by name: O(n log n)) */
static int check_request(const char *path, const st_tensor *t, int n, const int *order) {
    for (int k = 0; k < n; k++) {
        const st_tensor *x = &t[order[k]];
        int bad = !x->name || (x->dtype != ST_F32 && x->dtype != ST_BF16) || x->ndim < 0 ||
                  x->ndim > ST_MAX_NDIM || (x->transpose && x->ndim != 2);
        for (int d = 0; !bad && d < x->ndim; d++) bad = x->shape[d] < 0;
        if (!bad) bad = strcmp(x->name, "__metadata__") == 0;
        if (bad) return bad_request(path, x);
    }
    int *names = tsr_malloc((size_t)(n > 0 ? n : 1) * sizeof *names), rc = 0;
    memcpy(names, order, (size_t)n * sizeof *names);
    qsort_r(names, (size_t)n, sizeof *names, by_tensor_name, (void *)t);
    for (int k = 1; k < n && !rc; k++)
        if (strcmp(t[names[k - 1]].name, t[names[k]].name) == 0) rc = bad_request(path, &t[names[k]]);
    free(names);
    return rc;
}

static int write_all(FILE *fp, const void *buf, size_t n) { return fwrite(buf, 1, n, fp) == n ? 0 : -1; }

static int write_data(FILE *fp, const st_tensor *t) {
    uint64_t numel = numel_of(t);
    float *f = tsr_malloc((size_t)CHUNK * sizeof *f);
    uint16_t *h = t->dtype == ST_BF16 ? tsr_malloc((size_t)CHUNK * sizeof *h) : NULL;
    int rc = 0;
    for (uint64_t k = 0; k < numel && !rc; k += CHUNK) {
        size_t m = (size_t)(numel - k < CHUNK ? numel - k : CHUNK);
        gather(t, k, m, f);
        if (h) {
            for (size_t i = 0; i < m; i++) h[i] = st_f32_to_bf16(f[i]);
            rc = write_all(fp, h, m * sizeof *h);
        } else {
            rc = write_all(fp, f, m * sizeof *f);
        }
    }
    free(f);
    free(h);
    return rc;
}

int st_save(const char *path, const st_tensor *t, int n, const st_kv *meta, int n_meta) {
    int *order = tsr_malloc((size_t)(n > 0 ? n : 1) * sizeof *order);
    for (int k = 0; k < n; k++) order[k] = k;
    qsort_r(order, (size_t)n, sizeof *order, by_dtype_then_name, (void *)t);
    int rc = check_request(path, t, n, order);
    if (rc) {
        free(order);
        return rc;
    }
    strbuf hb = {0};
    sb_add(&hb, "{");
    if (n_meta > 0) {
        sb_add(&hb, "\"__metadata__\":{");
        for (int k = 0; k < n_meta; k++) {
            if (k) sb_add(&hb, ",");
            sb_json_str(&hb, meta[k].key);
            sb_add(&hb, ":");
            sb_json_str(&hb, meta[k].value);
        }
        sb_add(&hb, "}%s", n ? "," : "");
    }
    uint64_t off = 0;
    for (int k = 0; k < n; k++) {
        const st_tensor *x = &t[order[k]];
        uint64_t bytes = numel_of(x) * st_dtype_size(x->dtype);
        if (k) sb_add(&hb, ",");
        sb_json_str(&hb, x->name);
        sb_add(&hb, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(x->dtype));
        for (int d = 0; d < x->ndim; d++) sb_add(&hb, "%s%lld", d ? "," : "", (long long)x->shape[d]);
        sb_add(&hb, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
               (unsigned long long)(off + bytes));
        off += bytes;
    }
    sb_add(&hb, "}");
    while (hb.n % 8) sb_add(&hb, " "); /* 8 + N is a multiple of 8: data 8-byte aligned */

    char tmp[1100];
    if (tsr_snprintf(tmp, sizeof tmp, "%s.tmp", path)) {
        tsr_error("%s: path too long", path);
        free(order), free(hb.s);
        return TSR_EXIT_DATA;
    }
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        tsr_error("%s: cannot create it: %s", tmp, strerror(errno));
        free(order), free(hb.s);
        return TSR_EXIT_DATA;
    }
    uint64_t hlen = hb.n;
    rc = write_all(fp, &hlen, sizeof hlen) || write_all(fp, hb.s, hb.n);
    for (int k = 0; k < n && !rc; k++) rc = write_data(fp, &t[order[k]]);
    if (!rc) rc = fflush(fp) != 0 || fsync(fileno(fp)) != 0;
    int err = errno;
    if (fclose(fp) != 0 && !rc) rc = 1, err = errno;
    if (!rc && rename(tmp, path) != 0) rc = 1, err = errno;
    if (rc) {
        tsr_error("%s: writing failed: %s (disk full? the partial file %s is removed)", path,
                  strerror(err), tmp);
        unlink(tmp);
    }
    free(order);
    free(hb.s);
    if (rc) return TSR_EXIT_DATA;
    return fs_sync_parent(path);
}

/* ================================ reading ================================ */

static int pread_full(int fd, void *buf, size_t n, uint64_t off) {
    char *p = buf;
    while (n > 0) {
        ssize_t k = pread(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k, n -= (size_t)k, off += (uint64_t)k;
    }
    return 0;
}

void st_close(st_file *f) {
    if (f->fd >= 0) close(f->fd);
    for (int k = 0; k < f->n; k++) free(f->t[k].name);
    for (int k = 0; k < f->n_meta; k++) free((char *)f->meta[k].key), free((char *)f->meta[k].value);
    free(f->t);
    free(f->by_name);
    free(f->meta);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

/* A JSON number that is an integer in [0, 2^53] (exact in a double). */
static int json_u64(const json_value *v, uint64_t *out) {
    if (!v || v->type != JSON_NUMBER || !(v->num >= 0) || v->num > 9007199254740992.0 ||
        v->num != floor(v->num))
        return -1;
    *out = (uint64_t)v->num;
    return 0;
}

/* The fault in one tensor entry (why), or 0. */
static int parse_entry(const json_value *v, st_entry *e, char *why, size_t cap) {
    if (v->type != JSON_OBJECT) {
        snprintf(why, cap, "its entry is a JSON %s, expected an object {\"dtype\", \"shape\", "
                 "\"data_offsets\"}", json_type_name(v->type));
        return -1;
    }
    const json_value *dt = NULL, *sh = NULL, *of = NULL;
    for (const json_value *m = v->child; m; m = m->next) {
        const json_value **slot = json_key_is(m, "dtype")          ? &dt
                                  : json_key_is(m, "shape")        ? &sh
                                  : json_key_is(m, "data_offsets") ? &of
                                                                   : NULL;
        if (!slot || *slot) {
            snprintf(why, cap, "%s key \"%.64s\" in its entry (expected dtype, shape and "
                     "data_offsets once each)", slot ? "repeated" : "unexpected", m->key);
            return -1;
        }
        *slot = m;
    }
    if (!dt || !sh || !of) {
        snprintf(why, cap, "its entry lacks \"%s\"", !dt ? "dtype" : !sh ? "shape" : "data_offsets");
        return -1;
    }
    if (dt->type != JSON_STRING || dtype_parse(dt->str, &e->dtype)) {
        snprintf(why, cap, "unknown dtype %s%.32s%s (known: BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 "
                 "BF16 I32 U32 F32 F64 I64 U64)", dt->type == JSON_STRING ? "\"" : "",
                 dt->type == JSON_STRING ? dt->str : json_type_name(dt->type),
                 dt->type == JSON_STRING ? "\"" : "");
        return -1;
    }
    if (sh->type != JSON_ARRAY || sh->len > ST_MAX_NDIM) {
        snprintf(why, cap, "shape is not an array of at most %d dimensions", ST_MAX_NDIM);
        return -1;
    }
    e->ndim = 0;
    e->numel = 1;
    for (const json_value *d = sh->child; d; d = d->next) {
        uint64_t x;
        if (json_u64(d, &x)) {
            snprintf(why, cap, "shape dimension %d is not a non-negative integer", e->ndim);
            return -1;
        }
        e->shape[e->ndim++] = (int64_t)x;
        if (__builtin_mul_overflow(e->numel, x, &e->numel)) {
            snprintf(why, cap, "its shape overflows 64 bits");
            return -1;
        }
    }
    uint64_t b, en;
    if (of->type != JSON_ARRAY || of->len != 2 || json_u64(of->child, &b) ||
        json_u64(of->child->next, &en) || en < b) {
        snprintf(why, cap, "data_offsets is not [begin, end] with integers 0 <= begin <= end");
        return -1;
    }
    e->begin = b, e->end = en;
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(st_entry *const *)a)->name, (*(st_entry *const *)b)->name);
}
static int by_offset(const void *a, const void *b) {
    const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Names unique; sizes match dtype x shape; sorted by offset, the tensors tile [0, buffer). */
static int check_layout(st_file *f) {
    uint64_t buf_len = f->file_size - f->data_start;
    for (int k = 0; k < f->n; k++) {
        st_entry *e = &f->t[k];
        uint64_t want;
        if (__builtin_mul_overflow(e->numel, (uint64_t)st_dtype_size(e->dtype), &want) ||
            e->end - e->begin != want) {
            tsr_error("%s: tensor \"%s\": data_offsets [%llu, %llu] hold %llu bytes, its dtype %s "
                      "and shape need %llu x %zu (damaged or not a safetensors file)", f->path,
                      e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                      (unsigned long long)(e->end - e->begin), st_dtype_name(e->dtype),
                      (unsigned long long)e->numel, st_dtype_size(e->dtype));
            return TSR_EXIT_DATA;
        }
        if (e->end > buf_len) {
            tsr_error("%s: tensor \"%s\": data_offsets [%llu, %llu] go beyond the data buffer "
                      "(%llu bytes after the header; truncated file?)", f->path, e->name,
                      (unsigned long long)e->begin, (unsigned long long)e->end,
                      (unsigned long long)buf_len);
            return TSR_EXIT_DATA;
        }
    }
    st_entry **p = tsr_malloc((size_t)(f->n > 0 ? f->n : 1) * sizeof *p);
    for (int k = 0; k < f->n; k++) p[k] = &f->t[k];
    qsort(p, (size_t)f->n, sizeof *p, by_name);
    int rc = 0;
    for (int k = 1; k < f->n && !rc; k++)
        if (strcmp(p[k - 1]->name, p[k]->name) == 0) {
            tsr_error("%s: tensor \"%s\" is named twice in the header (names must be unique)",
                      f->path, p[k]->name);
            rc = TSR_EXIT_DATA;
        }
    f->by_name = tsr_malloc((size_t)(f->n > 0 ? f->n : 1) * sizeof *f->by_name);
    memcpy(f->by_name, p, (size_t)f->n * sizeof *p);
    qsort(p, (size_t)f->n, sizeof *p, by_offset);
    uint64_t at = 0;
    for (int k = 0; k < f->n && !rc; k++) {
        if (p[k]->begin < at) {
            tsr_error("%s: tensor \"%s\": data_offsets [%llu, %llu] overlap those of \"%s\" "
                      "[%llu, %llu]", f->path, p[k]->name, (unsigned long long)p[k]->begin,
                      (unsigned long long)p[k]->end, p[k - 1]->name,
                      (unsigned long long)p[k - 1]->begin, (unsigned long long)p[k - 1]->end);
            rc = TSR_EXIT_DATA;
        } else if (p[k]->begin > at) {
            tsr_error("%s: tensor \"%s\" starts at byte %llu of the data buffer, but %s ends at %llu "
                      "(offsets must be contiguous)", f->path, p[k]->name,
                      (unsigned long long)p[k]->begin, k ? "the previous tensor" : "nothing",
                      (unsigned long long)at);
            rc = TSR_EXIT_DATA;
        }
        at = p[k]->end;
    }
    if (!rc && at != buf_len) {
        tsr_error("%s: %llu trailing bytes after the last tensor's data (the data buffer is %llu "
                  "bytes, the tensors cover %llu)", f->path, (unsigned long long)(buf_len - at),
                  (unsigned long long)buf_len, (unsigned long long)at);
        rc = TSR_EXIT_DATA;
    }
    free(p);
    return rc;
}

static int parse_header(st_file *f, const char *text, size_t len) {
    json_doc doc;
    json_doc_init(&doc);
    json_value *root = NULL;
    json_error err;
    int rc = 0;
    if (json_parse(&doc, text, len, &root, &err) != 0) {
        tsr_error("%s: the header (%zu bytes) is not valid JSON: %s at header byte %zu", f->path,
                  len, err.msg, err.pos);
        rc = TSR_EXIT_DATA;
    } else if (root->type != JSON_OBJECT) {
        tsr_error("%s: the header is a JSON %s, expected an object of tensors", f->path,
                  json_type_name(root->type));
        rc = TSR_EXIT_DATA;
    }
    if (!rc && root->len > ST_MAX_TENSORS) {
        tsr_error("%s: the header names %zu tensors, more than the %d a file may hold", f->path,
                  root->len, ST_MAX_TENSORS);
        rc = TSR_EXIT_DATA;
    }
    if (!rc) {
        f->t = tsr_calloc(root->len ? root->len : 1, sizeof *f->t);
        int seen_meta = 0;
        for (const json_value *m = root->child; m && !rc; m = m->next) {
            if (!json_key_plain(m)) { /* a name no C string can hold: never one transformers writes */
                tsr_error("%s: tensor \"%.200s\\u0000...\": a tensor name holds a NUL character "
                          "(\\u0000)", f->path, m->key);
                rc = TSR_EXIT_DATA;
                break;
            }
            if (json_key_is(m, "__metadata__")) {
                int ok = !seen_meta && m->type == JSON_OBJECT;
                for (const json_value *kv = ok ? m->child : NULL; kv; kv = kv->next)
                    ok &= json_key_plain(kv) && json_str_plain(kv);
                if (!ok) {
                    tsr_error("%s: \"__metadata__\" is %s (expected one object of string values)",
                              f->path, seen_meta ? "given twice" : "not an object of strings without \\u0000");
                    rc = TSR_EXIT_DATA;
                    break;
                }
                seen_meta = 1;
                f->meta = tsr_calloc(m->len ? m->len : 1, sizeof *f->meta);
                for (const json_value *kv = m->child; kv; kv = kv->next, f->n_meta++) {
                    f->meta[f->n_meta].key = strdup(kv->key);
                    f->meta[f->n_meta].value = strdup(kv->str);
                }
                continue;
            }
            st_entry *e = &f->t[f->n];
            char why[256];
            if (parse_entry(m, e, why, sizeof why) != 0) {
                tsr_error("%s: tensor \"%.200s\": %s", f->path, m->key, why);
                rc = TSR_EXIT_DATA;
                break;
            }
            e->name = strdup(m->key);
            if (!e->name) tsr_die(TSR_EXIT_INTERNAL, "out of memory");
            f->n++;
        }
    }
    json_doc_free(&doc);
    return rc;
}

int st_open(st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    snprintf(f->path, sizeof f->path, "%s", path);
    struct stat st;
    f->fd = fs_open_data(path, "safetensors file");
    if (f->fd < 0) {
        st_close(f);
        return TSR_EXIT_DATA;
    }
    if (fstat(f->fd, &st) != 0) {
        tsr_error("%s: fstat failed: %s", path, strerror(errno));
        st_close(f);
        return TSR_EXIT_DATA;
    }
    f->file_size = (uint64_t)st.st_size;
    uint64_t n = 0;
    if (f->file_size < 8 || pread_full(f->fd, &n, 8, 0) != 0) {
        tsr_error("%s: %llu bytes: too short for the 8-byte header length (not a safetensors file)",
                  path, (unsigned long long)f->file_size);
        st_close(f);
        return TSR_EXIT_DATA;
    }
    if (n > f->file_size - 8 || n > ST_MAX_HEADER) {
        tsr_error("%s: the header length field says %llu bytes, %s (the file has %llu bytes; a "
                  "damaged or truncated file, or not safetensors)", path, (unsigned long long)n,
                  n > ST_MAX_HEADER ? "above the 100 MB limit" : "which goes beyond the end of the file",
                  (unsigned long long)f->file_size);
        st_close(f);
        return TSR_EXIT_DATA;
    }
    f->header_len = n;
    f->data_start = 8 + n;
    char *text = tsr_malloc((size_t)n + 1);
    int rc = 0;
    if (pread_full(f->fd, text, (size_t)n, 8) != 0) {
        tsr_error("%s: reading the %llu-byte header failed: %s", path, (unsigned long long)n,
                  strerror(errno));
        rc = TSR_EXIT_DATA;
    }
    text[n] = '\0';
    if (!rc) rc = parse_header(f, text, (size_t)n);
    free(text);
    if (!rc) rc = check_layout(f);
    if (rc) st_close(f);
    return rc;
}

int st_read_f32_finite(const st_file *f, const st_entry *e, float *dst) {
    TSR_CHECK(st_read_f32(f, e, dst));
    for (uint64_t i = 0; i < e->numel; i++)
        if (!isfinite(dst[i])) {
            tsr_error("%s: tensor \"%s\" holds a non-finite value (%g at element %llu): "
                      "refusing to start from it", f->path, e->name, (double)dst[i],
                      (unsigned long long)i);
            return TSR_EXIT_DATA;
        }
    return 0;
}

const st_entry *st_find(const st_file *f, const char *name) {
    size_t lo = 0, hi = f->by_name ? (size_t)f->n : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->by_name[mid]->name, name);
        if (!c) return f->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const char *st_meta(const st_file *f, const char *key) {
    for (int k = 0; k < f->n_meta; k++)
        if (strcmp(f->meta[k].key, key) == 0) return f->meta[k].value;
    return NULL;
}

int st_read_raw(const st_file *f, const st_entry *e, void *dst) {
    uint64_t off = f->data_start + e->begin;
    if (!pread_full(f->fd, dst, (size_t)(e->end - e->begin), off)) return 0;
    tsr_error("%s: tensor \"%s\": reading %llu bytes at offset %llu failed: %s", f->path, e->name,
              (unsigned long long)(e->end - e->begin), (unsigned long long)off,
              errno ? strerror(errno) : "short read (file changed while reading?)");
    return TSR_EXIT_DATA;
}

int st_read_f32(const st_file *f, const st_entry *e, float *dst) {
    if (e->dtype != ST_F32 && e->dtype != ST_BF16 && e->dtype != ST_F16) {
        tsr_error("%s: tensor \"%s\" is %s: only F32, BF16 and F16 tensors can be read as float32",
                  f->path, e->name, st_dtype_name(e->dtype));
        return TSR_EXIT_DATA;
    }
    uint64_t off = f->data_start + e->begin;
    int bad = 0;
    if (e->dtype == ST_F32) {
        bad = pread_full(f->fd, dst, (size_t)e->numel * sizeof(float), off);
    } else {
        uint16_t *h = tsr_malloc((size_t)CHUNK * sizeof *h);
        for (uint64_t k = 0; k < e->numel && !bad; k += CHUNK) {
            size_t m = (size_t)(e->numel - k < CHUNK ? e->numel - k : CHUNK);
            bad = pread_full(f->fd, h, m * sizeof *h, off + k * sizeof *h);
            for (size_t i = 0; i < m && !bad; i++)
                dst[k + i] = e->dtype == ST_BF16 ? st_bf16_to_f32(h[i]) : st_f16_to_f32(h[i]);
        }
        free(h);
    }
    if (bad) {
        tsr_error("%s: tensor \"%s\": reading %llu bytes at offset %llu failed: %s", f->path,
                  e->name, (unsigned long long)(e->end - e->begin), (unsigned long long)off,
                  errno ? strerror(errno) : "short read (file changed while reading?)");
        return TSR_EXIT_DATA;
    }
    return 0;
}
