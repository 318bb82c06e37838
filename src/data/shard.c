/* shard.c — the dataset format (docs/data-format.md): shard headers, the index, the mmap reader
 * and the writer.
 *
 * A dataset directory holds shard-NNNNN.bin files and index.tsv. Each shard is a 64-byte
 * little-endian header, the token payload (n x uint16 or uint32, little-endian) and, when the
 * dataset has a loss mask, n mask bytes. Dimension vocabulary: n = tokens in a shard, T = sample
 * length, S = shards.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "data/data.h"

#define SHARD_MAGIC "TSRSHARD"
#define SHARD_HEADER_SIZE 64
#define SHARD_HEADER_CRC_AT 60 /* the header CRC covers bytes [0, 60) */
#define SHARD_FLAG_MASK 1u
#define INDEX_NAME "index.tsv"
#define INDEX_MAGIC "tessera-dataset"
#define INDEX_MAX_BYTES (256u << 20)
#define MAX_VOCAB (1ull << 31) /* token ids must fit int32 */
#define MAX_SHARD_TOKENS (1ull << 60)
#define MAX_SHARDS 10000000
#define NAME_MAX_LEN 255
#define IO_CHUNK 65536

/* ================================ header ================================ */

typedef struct shard_header {
    uint32_t version, header_size, token_width, flags, vocab_size, shard_no;
    uint64_t n_tokens, token_offset, mask_offset;
    uint32_t payload_crc, header_crc;
} shard_header;

static void put_u32(uint8_t *p, uint32_t v) {
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(v >> (8 * k));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int k = 0; k < 8; k++) p[k] = (uint8_t)(v >> (8 * k));
}
static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) {
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* Serialises h and fills in (and stores into h) the header CRC. */
static void header_encode(shard_header *h, uint8_t out[SHARD_HEADER_SIZE]) {
    memcpy(out, SHARD_MAGIC, 8);
    put_u32(out + 8, h->version);
    put_u32(out + 12, h->header_size);
    put_u32(out + 16, h->token_width);
    put_u32(out + 20, h->flags);
    put_u32(out + 24, h->vocab_size);
    put_u32(out + 28, h->shard_no);
    put_u64(out + 32, h->n_tokens);
    put_u64(out + 40, h->token_offset);
    put_u64(out + 48, h->mask_offset);
    put_u32(out + 56, h->payload_crc);
    h->header_crc = tsr_crc32c(0, out, SHARD_HEADER_CRC_AT);
    put_u32(out + 60, h->header_crc);
}

static void header_decode(const uint8_t in[SHARD_HEADER_SIZE], shard_header *h) {
    h->version = get_u32(in + 8);
    h->header_size = get_u32(in + 12);
    h->token_width = get_u32(in + 16);
    h->flags = get_u32(in + 20);
    h->vocab_size = get_u32(in + 24);
    h->shard_no = get_u32(in + 28);
    h->n_tokens = get_u64(in + 32);
    h->token_offset = get_u64(in + 40);
    h->mask_offset = get_u64(in + 48);
    h->payload_crc = get_u32(in + 56);
    h->header_crc = get_u32(in + 60);
}

static uint32_t width_for_vocab(uint64_t vocab) { return vocab <= 65536 ? 2 : 4; }

/* Bytes a shard of n tokens occupies. */
static uint64_t shard_file_size(uint64_t n, uint32_t width, int mask) {
    return SHARD_HEADER_SIZE + n * width + (mask ? n : 0);
}

/* ================================ index ================================ */

typedef struct index_row {
    char name[NAME_MAX_LEN + 1];
    uint64_t n_tokens;
    uint32_t crc;
} index_row;

typedef struct dataset_index {
    uint32_t vocab, width;
    int has_mask, n_shards;
    uint64_t n_tokens;
    index_row *rows; /* (n_shards) */
} dataset_index;

/* Strict unsigned decimal: digits only, no sign, no overflow. */
static int parse_u64(const char *s, uint64_t *out) {
    uint64_t v = 0;
    if (!*s) return 1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return 1;
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return 1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 0;
}

static int parse_crc_hex(const char *s, uint32_t *out) {
    uint32_t v = 0;
    if (strlen(s) != 8) return 1;
    for (; *s; s++) {
        int d = (*s >= '0' && *s <= '9') ? *s - '0'
                : (*s >= 'a' && *s <= 'f') ? *s - 'a' + 10
                : (*s >= 'A' && *s <= 'F') ? *s - 'A' + 10 : -1;
        if (d < 0) return 1;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 0;
}

/* A shard name must be a plain file name inside the dataset: [A-Za-z0-9._-], not starting '.'. */
static int plain_name(const char *s) {
    if (!*s || *s == '.' || strlen(s) > NAME_MAX_LEN) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '_' || *s == '-'))
            return 0;
    return 1;
}

/* Splits a line in place on spaces/tabs; returns the field count (at most max). */
static int split_fields(char *line, char **f, int max) {
    int n = 0;
    char *p = line;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\r') *p++ = '\0';
        if (!*p) break;
        if (n == max) return max + 1;
        f[n++] = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\r') p++;
    }
    return n;
}

static int read_whole_file(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        tsr_error("%s: cannot open: %s (is the directory a tessera dataset? write one with "
                  "'tessera shard' or 'tessera synth')", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    size_t cap = 4096, n = 0;
    char *buf = tsr_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= INDEX_MAX_BYTES) {
                tsr_error("%s: index is larger than %u bytes; not a tessera index", path,
                          INDEX_MAX_BYTES);
                free(buf);
                fclose(f);
                return TSR_EXIT_DATA;
            }
            char *nb = tsr_malloc(cap * 2);
            memcpy(nb, buf, n);
            free(buf);
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        tsr_error("%s: read failed", path);
        free(buf);
        return TSR_EXIT_DATA;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

/* The header keys in their required order; each takes one unsigned decimal value. */
static const char *const index_keys[] = {"vocab_size", "token_width", "has_mask", "n_shards",
                                         "n_tokens"};
enum { INDEX_N_KEYS = sizeof index_keys / sizeof index_keys[0] };

/* Checks the header values read from the index against each other. */
static int index_check_header(const char *path, const uint64_t *v, dataset_index *ix) {
    if (v[0] < 1 || v[0] > MAX_VOCAB) {
        tsr_error("%s: vocab_size %llu out of range [1, %llu]", path, (unsigned long long)v[0],
                  (unsigned long long)MAX_VOCAB);
        return TSR_EXIT_DATA;
    }
    if (v[1] != width_for_vocab(v[0])) {
        tsr_error("%s: token_width %llu, expected %u for vocab_size %llu", path,
                  (unsigned long long)v[1], width_for_vocab(v[0]), (unsigned long long)v[0]);
        return TSR_EXIT_DATA;
    }
    if (v[2] > 1) {
        tsr_error("%s: has_mask %llu, expected 0 or 1", path, (unsigned long long)v[2]);
        return TSR_EXIT_DATA;
    }
    if (v[3] > MAX_SHARDS) {
        tsr_error("%s: n_shards %llu exceeds the limit %d", path, (unsigned long long)v[3],
                  MAX_SHARDS);
        return TSR_EXIT_DATA;
    }
    ix->vocab = (uint32_t)v[0];
    ix->width = (uint32_t)v[1];
    ix->has_mask = (int)v[2];
    ix->n_shards = (int)v[3];
    ix->n_tokens = v[4];
    return 0;
}

/* Parses one "shard NAME N_TOKENS CRC" row. */
static int index_parse_row(const char *path, int lineno, char **f, int nf, index_row *row) {
    if (nf != 4 || strcmp(f[0], "shard") != 0) {
        tsr_error("%s:%d: expected 'shard <file> <n_tokens> <crc32c>', found '%s' with %d fields",
                  path, lineno, nf ? f[0] : "", nf);
        return TSR_EXIT_DATA;
    }
    if (!plain_name(f[1])) {
        tsr_error("%s:%d: shard name '%s' is not a plain file name ([A-Za-z0-9._-], not "
                  "starting with '.')", path, lineno, f[1]);
        return TSR_EXIT_DATA;
    }
    if (parse_u64(f[2], &row->n_tokens) || row->n_tokens > MAX_SHARD_TOKENS) {
        tsr_error("%s:%d: n_tokens '%s' is not a number in [0, 2^60]", path, lineno, f[2]);
        return TSR_EXIT_DATA;
    }
    if (parse_crc_hex(f[3], &row->crc)) {
        tsr_error("%s:%d: crc32c '%s' is not 8 hex digits", path, lineno, f[3]);
        return TSR_EXIT_DATA;
    }
    strcpy(row->name, f[1]);
    return 0;
}

/* Parses the index text (modified in place). Lines: magic+version, the five header keys in
 * order, n_shards shard rows, "end". Blank lines and lines starting with '#' are skipped. */
static int index_parse(const char *path, char *text, dataset_index *ix) {
    uint64_t hv[INDEX_N_KEYS];
    int stage = 0, lineno = 0, rows = 0; /* stage: 0 magic, 1..5 keys, 6 rows, 7 end seen */
    char *save = NULL;
    memset(ix, 0, sizeof *ix);
    for (char *line = text; line; line = save) {
        char *nl = strchr(line, '\n');
        save = nl ? nl + 1 : NULL;
        if (nl) *nl = '\0';
        lineno++;
        char *f[5];
        int nf = split_fields(line, f, 4);
        if (nf == 0 || f[0][0] == '#') continue;
        if (stage == 7) {
            tsr_error("%s:%d: text after the 'end' line", path, lineno);
            return TSR_EXIT_DATA;
        }
        if (stage == 0) {
            uint64_t ver;
            if (nf != 2 || strcmp(f[0], INDEX_MAGIC) != 0 || parse_u64(f[1], &ver)) {
                tsr_error("%s:%d: bad magic: expected '%s <version>' as the first line, found "
                          "'%s'", path, lineno, INDEX_MAGIC, f[0]);
                return TSR_EXIT_DATA;
            }
            if (ver != TSR_DATA_VERSION) {
                tsr_error("%s:%d: dataset format version %llu, this tessera reads version %d",
                          path, lineno, (unsigned long long)ver, TSR_DATA_VERSION);
                return TSR_EXIT_DATA;
            }
            stage = 1;
        } else if (stage <= INDEX_N_KEYS) {
            const char *key = index_keys[stage - 1];
            if (nf != 2 || strcmp(f[0], key) != 0 || parse_u64(f[1], &hv[stage - 1])) {
                tsr_error("%s:%d: expected '%s <number>', found '%s'%s%s", path, lineno, key, f[0],
                          nf > 1 ? " " : "", nf > 1 ? f[1] : "");
                return TSR_EXIT_DATA;
            }
            if (++stage == INDEX_N_KEYS + 1) {
                if (index_check_header(path, hv, ix)) return TSR_EXIT_DATA;
                ix->rows = tsr_calloc((size_t)ix->n_shards + 1, sizeof *ix->rows);
                if (ix->n_shards == 0) stage = 6;
            }
        } else if (stage == 6 && rows == ix->n_shards) {
            if (nf != 1 || strcmp(f[0], "end") != 0) {
                tsr_error("%s:%d: expected 'end' after %d shard rows, found '%s'", path, lineno,
                          rows, f[0]);
                return TSR_EXIT_DATA;
            }
            stage = 7;
        } else {
            stage = 6;
            if (index_parse_row(path, lineno, f, nf, &ix->rows[rows])) return TSR_EXIT_DATA;
            rows++;
        }
    }
    if (stage != 7) {
        tsr_error("%s: incomplete index (ends at line %d before the 'end' line; %d of %d shard "
                  "rows)", path, lineno, rows, ix->n_shards);
        return TSR_EXIT_DATA;
    }
    uint64_t sum = 0;
    for (int k = 0; k < ix->n_shards; k++) sum += ix->rows[k].n_tokens;
    if (sum != ix->n_tokens) {
        tsr_error("%s: n_tokens is %llu, but the shard rows add up to %llu", path,
                  (unsigned long long)ix->n_tokens, (unsigned long long)sum);
        return TSR_EXIT_DATA;
    }
    return 0;
}

/* ================================ reader ================================ */

typedef struct shard_map {
    char *path;
    const uint8_t *map; /* the whole file, read-only */
    size_t map_len;
    const uint8_t *tokens, *mask; /* mask is NULL without a mask channel */
    uint64_t n_tokens;
} shard_map;

/* Prefix sums of samples per shard for one sequence length T, built on first use. */
typedef struct sample_table {
    int T;
    uint64_t *prefix; /* (n_shards + 1): prefix[s] = samples in shards [0, s) */
    struct sample_table *next;
} sample_table;

struct tsr_dataset {
    char *dir;
    uint32_t vocab, width;
    int has_mask, n_shards;
    uint64_t n_tokens;
    shard_map *shards; /* (n_shards) */
    _Atomic(sample_table *) tables; /* lock-free list, one entry per T seen */
};

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = tsr_malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Copy of a directory path without trailing slashes (keeps a lone "/"). */
static char *dir_dup(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    char *d = tsr_malloc(n + 1);
    memcpy(d, dir, n);
    d[n] = '\0';
    return d;
}

static uint32_t token_at(const uint8_t *tokens, uint32_t width, uint64_t i) {
    const uint8_t *p = tokens + i * width;
    return width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : get_u32(p);
}

/* Header fields that must agree with the index and with the layout rules. */
static int shard_check_header(const char *path, const shard_header *h, const dataset_index *ix,
                              int k) {
    const index_row *row = &ix->rows[k];
    uint32_t want_flags = ix->has_mask ? SHARD_FLAG_MASK : 0;
    uint64_t want_mask_at = ix->has_mask ? SHARD_HEADER_SIZE + row->n_tokens * ix->width : 0;
#define SHARD_FIELD(cond, fmt, ...)                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            tsr_error("%s: " fmt, path, __VA_ARGS__);                                      \
            return TSR_EXIT_DATA;                                                          \
        }                                                                                  \
    } while (0)
    SHARD_FIELD(h->header_size == SHARD_HEADER_SIZE, "header size %u bytes, expected %d",
                h->header_size, SHARD_HEADER_SIZE);
    SHARD_FIELD(h->vocab_size == ix->vocab, "vocab size %u, the index says %u", h->vocab_size,
                ix->vocab);
    SHARD_FIELD(h->token_width == ix->width, "token width %u bytes, the index says %u",
                h->token_width, ix->width);
    SHARD_FIELD(h->flags == want_flags, "flags 0x%x, expected 0x%x (has_mask %d in the index)",
                h->flags, want_flags, ix->has_mask);
    SHARD_FIELD(h->shard_no == (uint32_t)k, "shard number %u, but it is row %d of the index",
                h->shard_no, k);
    SHARD_FIELD(h->n_tokens == row->n_tokens, "%llu tokens, the index says %llu",
                (unsigned long long)h->n_tokens, (unsigned long long)row->n_tokens);
    SHARD_FIELD(h->token_offset == SHARD_HEADER_SIZE, "token offset %llu, expected %d",
                (unsigned long long)h->token_offset, SHARD_HEADER_SIZE);
    SHARD_FIELD(h->mask_offset == want_mask_at, "mask offset %llu, expected %llu",
                (unsigned long long)h->mask_offset, (unsigned long long)want_mask_at);
    SHARD_FIELD(h->payload_crc == row->crc, "payload checksum 0x%08x, the index says 0x%08x",
                h->payload_crc, row->crc);
#undef SHARD_FIELD
    return 0;
}

/* The O(size) checks: payload CRC, token ids < vocab, mask bytes 0/1. */
static int shard_verify_payload(const char *path, const shard_map *s, const shard_header *h,
                                const dataset_index *ix) {
    size_t len = s->map_len - SHARD_HEADER_SIZE;
    uint32_t crc = tsr_crc32c(0, s->tokens, len);
    if (crc != h->payload_crc) {
        tsr_error("%s: payload checksum mismatch: computed 0x%08x over %zu bytes, header and "
                  "index say 0x%08x (the file is corrupted; regenerate or restore it)",
                  path, crc, len, h->payload_crc);
        return TSR_EXIT_DATA;
    }
    if (ix->vocab < (1ull << (8 * ix->width))) {
        for (uint64_t i = 0; i < s->n_tokens; i++) {
            uint32_t t = token_at(s->tokens, ix->width, i);
            if (t >= ix->vocab) {
                tsr_error("%s: token %u at position %llu is >= vocab size %u", path, t,
                          (unsigned long long)i, ix->vocab);
                return TSR_EXIT_DATA;
            }
        }
    }
    for (uint64_t i = 0; s->mask && i < s->n_tokens; i++) {
        if (s->mask[i] > 1) {
            tsr_error("%s: mask byte %u at position %llu, expected 0 or 1", path, s->mask[i],
                      (unsigned long long)i);
            return TSR_EXIT_DATA;
        }
    }
    return 0;
}

/* Checks the mapped file of shard k against its header and the index. */
static int shard_validate(shard_map *s, const dataset_index *ix, int k, int verify) {
    const char *path = s->path;
    shard_header h;
    if (memcmp(s->map, SHARD_MAGIC, 8) != 0) {
        char found[9];
        for (int j = 0; j < 8; j++)
            found[j] = (s->map[j] >= 32 && s->map[j] < 127) ? (char)s->map[j] : '?';
        found[8] = '\0';
        tsr_error("%s: bad magic: found '%s', expected '%s' (not a tessera shard)", path, found,
                  SHARD_MAGIC);
        return TSR_EXIT_DATA;
    }
    header_decode(s->map, &h);
    if (h.version != TSR_DATA_VERSION) {
        tsr_error("%s: shard format version %u, this tessera reads version %d", path, h.version,
                  TSR_DATA_VERSION);
        return TSR_EXIT_DATA;
    }
    uint32_t crc = tsr_crc32c(0, s->map, SHARD_HEADER_CRC_AT);
    if (crc != h.header_crc) {
        tsr_error("%s: header checksum mismatch: computed 0x%08x, stored 0x%08x (the header is "
                  "corrupted)", path, crc, h.header_crc);
        return TSR_EXIT_DATA;
    }
    if (shard_check_header(path, &h, ix, k)) return TSR_EXIT_DATA;
    uint64_t want = shard_file_size(h.n_tokens, h.token_width, ix->has_mask);
    if ((uint64_t)s->map_len != want) {
        tsr_error("%s: %s: file is %zu bytes, header says %llu (%d-byte header + %llu tokens x "
                  "%u bytes%s)", path, s->map_len < want ? "truncated" : "trailing bytes",
                  s->map_len, (unsigned long long)want, SHARD_HEADER_SIZE,
                  (unsigned long long)h.n_tokens, h.token_width,
                  ix->has_mask ? " + 1 mask byte each" : "");
        return TSR_EXIT_DATA;
    }
    s->n_tokens = h.n_tokens;
    s->tokens = s->map + SHARD_HEADER_SIZE;
    s->mask = ix->has_mask ? s->map + h.mask_offset : NULL;
    return verify ? shard_verify_payload(path, s, &h, ix) : 0;
}

/* Maps shard file `path` read-only. */
static int shard_map_file(shard_map *s) {
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tsr_error("%s: cannot open shard: %s (listed in the index)", s->path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        tsr_error("%s: not a regular file", s->path);
        close(fd);
        return TSR_EXIT_DATA;
    }
    if ((uint64_t)st.st_size < SHARD_HEADER_SIZE) {
        tsr_error("%s: truncated: file is %lld bytes, smaller than the %d-byte header", s->path,
                  (long long)st.st_size, SHARD_HEADER_SIZE);
        close(fd);
        return TSR_EXIT_DATA;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        tsr_error("%s: %lld bytes do not fit this process's address space", s->path,
                  (long long)st.st_size);
        close(fd);
        return TSR_EXIT_DATA;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (m == MAP_FAILED) {
        tsr_error("%s: mmap of %lld bytes failed: %s", s->path, (long long)st.st_size,
                  strerror(err));
        return TSR_EXIT_DATA;
    }
    s->map = m;
    s->map_len = (size_t)st.st_size;
    return 0;
}

int dataset_open(tsr_dataset **out, const char *dir, int verify) {
    *out = NULL;
    tsr_dataset *ds = tsr_calloc(1, sizeof *ds);
    atomic_init(&ds->tables, NULL);
    ds->dir = dir_dup(dir);
    char *ipath = path_join(ds->dir, INDEX_NAME), *text = NULL;
    size_t len;
    dataset_index ix = {0};
    int rc = read_whole_file(ipath, &text, &len);
    if (!rc && strlen(text) != len) {
        tsr_error("%s: contains a NUL byte; not a tessera index", ipath);
        rc = TSR_EXIT_DATA;
    }
    if (!rc) rc = index_parse(ipath, text, &ix);
    if (!rc) {
        ds->vocab = ix.vocab;
        ds->width = ix.width;
        ds->has_mask = ix.has_mask;
        ds->n_tokens = ix.n_tokens;
        ds->shards = tsr_calloc((size_t)ix.n_shards + 1, sizeof *ds->shards);
        for (int k = 0; k < ix.n_shards && !rc; k++) {
            shard_map *s = &ds->shards[k];
            ds->n_shards = k + 1;
            s->path = path_join(ds->dir, ix.rows[k].name);
            rc = shard_map_file(s);
            if (!rc) rc = shard_validate(s, &ix, k, verify);
        }
    }
    free(ix.rows);
    free(text);
    free(ipath);
    if (rc) {
        dataset_close(ds);
        return TSR_EXIT_DATA;
    }
    *out = ds;
    return 0;
}

void dataset_close(tsr_dataset *ds) {
    if (!ds) return;
    for (int k = 0; k < ds->n_shards; k++) {
        if (ds->shards[k].map) munmap((void *)ds->shards[k].map, ds->shards[k].map_len);
        free(ds->shards[k].path);
    }
    sample_table *t = atomic_load(&ds->tables);
    while (t) {
        sample_table *next = t->next;
        free(t->prefix);
        free(t);
        t = next;
    }
    free(ds->shards);
    free(ds->dir);
    free(ds);
}

uint32_t dataset_vocab_size(const tsr_dataset *ds) { return ds->vocab; }
uint64_t dataset_n_tokens(const tsr_dataset *ds) { return ds->n_tokens; }
int dataset_n_shards(const tsr_dataset *ds) { return ds->n_shards; }
int dataset_has_mask(const tsr_dataset *ds) { return ds->has_mask; }

static uint64_t shard_samples(uint64_t n_tokens, int T) {
    return n_tokens ? (n_tokens - 1) / (uint64_t)T : 0;
}

static const sample_table *table_find(sample_table *t, int T) {
    for (; t; t = t->next)
        if (t->T == T) return t;
    return NULL;
}

/* The prefix-sum table for T (T >= 1): found in the list, or built and pushed with a CAS so
 * concurrent readers are safe; tables live until dataset_close. */
static const uint64_t *sample_prefix(const tsr_dataset *cds, int T) {
    tsr_dataset *ds = (tsr_dataset *)cds; /* only the atomic cache list is updated */
    sample_table *head = atomic_load_explicit(&ds->tables, memory_order_acquire);
    const sample_table *hit = table_find(head, T);
    if (hit) return hit->prefix;
    sample_table *nt = tsr_malloc(sizeof *nt);
    nt->T = T;
    nt->prefix = tsr_malloc(((size_t)ds->n_shards + 1) * sizeof *nt->prefix);
    nt->prefix[0] = 0;
    for (int k = 0; k < ds->n_shards; k++)
        nt->prefix[k + 1] = nt->prefix[k] + shard_samples(ds->shards[k].n_tokens, T);
    for (;;) {
        nt->next = head;
        if (atomic_compare_exchange_weak_explicit(&ds->tables, &head, nt, memory_order_release,
                                                  memory_order_acquire))
            return nt->prefix;
        hit = table_find(head, T); /* another thread may have added T meanwhile */
        if (hit) {
            free(nt->prefix);
            free(nt);
            return hit->prefix;
        }
    }
}

uint64_t dataset_n_samples(const tsr_dataset *ds, int T) {
    if (T < 1) return 0;
    return sample_prefix(ds, T)[ds->n_shards];
}

int dataset_read_sample(const tsr_dataset *ds, int T, uint64_t i, int32_t *inputs,
                        int32_t *targets) {
    if (T < 1) {
        tsr_error("%s: sample length T = %d, expected >= 1", ds->dir, T);
        return -1;
    }
    const uint64_t *pre = sample_prefix(ds, T);
    if (i >= pre[ds->n_shards]) {
        tsr_error("%s: sample %llu out of range: the dataset has %llu samples of length %d",
                  ds->dir, (unsigned long long)i, (unsigned long long)pre[ds->n_shards], T);
        return -1;
    }
    int lo = 0, hi = ds->n_shards; /* invariant: pre[lo] <= i < pre[hi] */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (pre[mid] <= i) lo = mid;
        else hi = mid;
    }
    const shard_map *s = &ds->shards[lo];
    uint64_t start = (i - pre[lo]) * (uint64_t)T;
    int kept = 0;
    for (int j = 0; j <= T; j++) {
        uint32_t t = token_at(s->tokens, ds->width, start + (uint64_t)j);
        if (t >= ds->vocab) {
            tsr_error("%s: token %u at position %llu is >= vocab size %u (open with verify to "
                      "check every token)", s->path, t, (unsigned long long)(start + (uint64_t)j),
                      ds->vocab);
            return -1;
        }
        if (j < T) inputs[j] = (int32_t)t;
        if (j == 0) continue;
        int keep = !s->mask || s->mask[start + (uint64_t)j] != 0;
        targets[j - 1] = keep ? (int32_t)t : -1;
        kept += keep;
    }
    return kept;
}

/* ================================ writer ================================ */

typedef struct shard_rec {
    uint64_t n_tokens;
    uint32_t crc;
} shard_rec;

struct tsr_dataset_writer {
    char *dir, *tmp;      /* the final directory and DIR.tmp */
    uint32_t vocab, width;
    int with_mask;
    uint64_t shard_tokens;
    FILE *f, *mf;         /* the open shard, and its mask side file (copied in at the end) */
    char *path, *mpath;   /* their paths */
    uint64_t cur_n;       /* tokens in the open shard */
    uint32_t crc;         /* running payload CRC of the open shard's tokens */
    shard_rec *recs;      /* finished shards */
    int n_recs, cap_recs;
};

static int io_fail(const char *path, const char *what) {
    tsr_error("%s: %s failed: %s", path, what, strerror(errno));
    return TSR_EXIT_DATA;
}

static int fsync_path(const char *path, int is_dir) {
    int fd = open(path, (is_dir ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_fail(path, "open for fsync");
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    errno = err;
    /* Some filesystems refuse fsync on directories (EINVAL); the data itself was synced. */
    return (rc != 0 && !(is_dir && (errno == EINVAL || errno == EROFS))) ? io_fail(path, "fsync")
                                                                        : 0;
}

/* Files the writer creates inside DIR.tmp: shard-*.bin, shard-*.bin.mask.tmp, index.tsv. */
static int writer_owned_name(const char *name) {
    size_t n = strlen(name);
    if (strcmp(name, INDEX_NAME) == 0) return 1;
    if (strncmp(name, "shard-", 6) != 0) return 0;
    return (n > 4 && strcmp(name + n - 4, ".bin") == 0) ||
           (n > 13 && strcmp(name + n - 13, ".bin.mask.tmp") == 0);
}

/* Removes DIR.tmp if it only holds files the writer creates; errors if anything else is there. */
static int remove_tmp_dir(const char *tmp) {
    DIR *d = opendir(tmp);
    if (!d) return errno == ENOENT ? 0 : io_fail(tmp, "opendir");
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!writer_owned_name(e->d_name)) continue;
        char *p = path_join(tmp, e->d_name);
        if (unlink(p) != 0) tsr_warn("%s: unlink failed: %s", p, strerror(errno));
        free(p);
    }
    closedir(d);
    if (rmdir(tmp) != 0) {
        tsr_error("%s: cannot remove the temporary directory: %s (it holds files tessera did not "
                  "write; remove it by hand)", tmp, strerror(errno));
        return TSR_EXIT_DATA;
    }
    return 0;
}

static void writer_free(tsr_dataset_writer *w) {
    if (w->f) fclose(w->f);
    if (w->mf) fclose(w->mf);
    free(w->dir);
    free(w->tmp);
    free(w->path);
    free(w->mpath);
    free(w->recs);
    free(w);
}

int dataset_writer_open(tsr_dataset_writer **out, const char *dir, uint32_t vocab_size,
                        int with_mask, uint64_t shard_tokens) {
    *out = NULL;
    if (vocab_size < 1 || vocab_size > MAX_VOCAB) {
        tsr_error("%s: vocab size %u out of range [1, %llu]", dir, vocab_size,
                  (unsigned long long)MAX_VOCAB);
        return TSR_EXIT_DATA;
    }
    if (shard_tokens < 1 || shard_tokens > MAX_SHARD_TOKENS) {
        tsr_error("%s: shard size %llu tokens out of range [1, 2^60]", dir,
                  (unsigned long long)shard_tokens);
        return TSR_EXIT_DATA;
    }
    char *d = dir_dup(dir);
    struct stat st;
    int found = lstat(d, &st) == 0;
    if (found || errno != ENOENT) {
        tsr_error("%s: %s; refusing to overwrite (choose a new output directory or remove it)",
                  d, found ? "already exists" : strerror(errno));
        free(d);
        return TSR_EXIT_DATA;
    }
    size_t n = strlen(d) + 5;
    char *tmp = tsr_malloc(n);
    snprintf(tmp, n, "%s.tmp", d);
    if (lstat(tmp, &st) == 0) {
        tsr_warn("%s: removing the temporary directory of an interrupted write", tmp);
        if (remove_tmp_dir(tmp)) {
            free(d);
            free(tmp);
            return TSR_EXIT_DATA;
        }
    }
    if (mkdir(tmp, 0777) != 0) {
        int rc = io_fail(tmp, "mkdir");
        free(d);
        free(tmp);
        return rc;
    }
    tsr_dataset_writer *w = tsr_calloc(1, sizeof *w);
    w->dir = d;
    w->tmp = tmp;
    w->vocab = vocab_size;
    w->width = width_for_vocab(vocab_size);
    w->with_mask = with_mask ? 1 : 0;
    w->shard_tokens = shard_tokens;
    *out = w;
    return 0;
}

static int shard_start(tsr_dataset_writer *w) {
    char name[64];
    snprintf(name, sizeof name, "shard-%05d.bin", w->n_recs);
    free(w->path);
    free(w->mpath);
    w->path = path_join(w->tmp, name);
    size_t n = strlen(w->path) + 10;
    w->mpath = tsr_malloc(n);
    snprintf(w->mpath, n, "%s.mask.tmp", w->path);
    uint8_t zero[SHARD_HEADER_SIZE] = {0};
    w->f = fopen(w->path, "wb");
    if (!w->f) return io_fail(w->path, "create");
    if (fwrite(zero, 1, sizeof zero, w->f) != sizeof zero) return io_fail(w->path, "write");
    if (w->with_mask) {
        w->mf = fopen(w->mpath, "w+b");
        if (!w->mf) return io_fail(w->mpath, "create");
    }
    w->cur_n = 0;
    w->crc = 0;
    return 0;
}

/* Appends the mask side file to the shard, continuing the payload CRC; removes the side file. */
static int shard_copy_mask(tsr_dataset_writer *w) {
    uint8_t buf[IO_CHUNK];
    if (fflush(w->mf) != 0 || fseek(w->mf, 0, SEEK_SET) != 0) return io_fail(w->mpath, "rewind");
    uint64_t copied = 0;
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, w->mf)) > 0) {
        w->crc = tsr_crc32c(w->crc, buf, got);
        if (fwrite(buf, 1, got, w->f) != got) return io_fail(w->path, "write");
        copied += got;
    }
    if (ferror(w->mf)) return io_fail(w->mpath, "read");
    if (copied != w->cur_n) {
        tsr_error("%s: read back %llu mask bytes, wrote %llu", w->mpath,
                  (unsigned long long)copied, (unsigned long long)w->cur_n);
        return TSR_EXIT_DATA;
    }
    fclose(w->mf);
    w->mf = NULL;
    if (unlink(w->mpath) != 0) return io_fail(w->mpath, "unlink");
    return 0;
}

/* Completes the open shard: mask payload, final header, fsync, close. */
static int shard_finish(tsr_dataset_writer *w) {
    if (w->with_mask && shard_copy_mask(w)) return TSR_EXIT_DATA;
    shard_header h = {
        .version = TSR_DATA_VERSION, .header_size = SHARD_HEADER_SIZE, .token_width = w->width,
        .flags = w->with_mask ? SHARD_FLAG_MASK : 0, .vocab_size = w->vocab,
        .shard_no = (uint32_t)w->n_recs, .n_tokens = w->cur_n, .token_offset = SHARD_HEADER_SIZE,
        .mask_offset = w->with_mask ? SHARD_HEADER_SIZE + w->cur_n * w->width : 0,
        .payload_crc = w->crc,
    };
    uint8_t hb[SHARD_HEADER_SIZE];
    header_encode(&h, hb);
    if (fseek(w->f, 0, SEEK_SET) != 0) return io_fail(w->path, "seek");
    if (fwrite(hb, 1, sizeof hb, w->f) != sizeof hb) return io_fail(w->path, "write");
    if (fflush(w->f) != 0) return io_fail(w->path, "write");
    if (fsync(fileno(w->f)) != 0) return io_fail(w->path, "fsync");
    int rc = fclose(w->f);
    w->f = NULL;
    if (rc != 0) return io_fail(w->path, "close");
    if (w->n_recs == w->cap_recs) {
        w->cap_recs = w->cap_recs ? 2 * w->cap_recs : 16;
        shard_rec *nr = tsr_malloc((size_t)w->cap_recs * sizeof *nr);
        if (w->n_recs) memcpy(nr, w->recs, (size_t)w->n_recs * sizeof *nr);
        free(w->recs);
        w->recs = nr;
    }
    w->recs[w->n_recs++] = (shard_rec){.n_tokens = w->cur_n, .crc = w->crc};
    return 0;
}

/* Writes n tokens (and mask bytes) that fit the open shard. */
static int shard_write(tsr_dataset_writer *w, const uint32_t *tokens, const uint8_t *mask,
                       size_t n) {
    uint8_t buf[IO_CHUNK * 4];
    while (n > 0) {
        size_t m = n < IO_CHUNK ? n : IO_CHUNK;
        for (size_t j = 0; j < m; j++) {
            if (w->width == 2) {
                buf[2 * j] = (uint8_t)tokens[j];
                buf[2 * j + 1] = (uint8_t)(tokens[j] >> 8);
            } else {
                put_u32(buf + 4 * j, tokens[j]);
            }
        }
        size_t bytes = m * w->width;
        w->crc = tsr_crc32c(w->crc, buf, bytes);
        if (fwrite(buf, 1, bytes, w->f) != bytes) return io_fail(w->path, "write");
        if (w->with_mask && fwrite(mask, 1, m, w->mf) != m) return io_fail(w->mpath, "write");
        w->cur_n += m;
        tokens += m;
        if (mask) mask += m;
        n -= m;
    }
    return 0;
}

int dataset_writer_append(tsr_dataset_writer *w, const uint32_t *tokens, const uint8_t *mask,
                          size_t n) {
    if (w->with_mask && !mask && n > 0) {
        tsr_error("%s: the dataset has a loss mask, but no mask bytes were given", w->dir);
        return TSR_EXIT_DATA;
    }
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] >= w->vocab) {
            tsr_error("%s: token %u (input position %zu) is >= vocab size %u", w->dir, tokens[i],
                      i, w->vocab);
            return TSR_EXIT_DATA;
        }
        if (w->with_mask && mask[i] > 1) {
            tsr_error("%s: mask byte %u (input position %zu), expected 0 or 1", w->dir, mask[i], i);
            return TSR_EXIT_DATA;
        }
    }
    while (n > 0) {
        if (!w->f && shard_start(w)) return TSR_EXIT_DATA;
        uint64_t room = w->shard_tokens - w->cur_n;
        size_t m = (uint64_t)n < room ? n : (size_t)room;
        if (shard_write(w, tokens, w->with_mask ? mask : NULL, m)) return TSR_EXIT_DATA;
        tokens += m;
        if (w->with_mask) mask += m;
        n -= m;
        if (w->cur_n == w->shard_tokens && shard_finish(w)) return TSR_EXIT_DATA;
    }
    return 0;
}

static int writer_write_index(tsr_dataset_writer *w) {
    char *ipath = path_join(w->tmp, INDEX_NAME);
    FILE *f = fopen(ipath, "w");
    if (!f) {
        int rc = io_fail(ipath, "create");
        free(ipath);
        return rc;
    }
    uint64_t total = 0;
    for (int k = 0; k < w->n_recs; k++) total += w->recs[k].n_tokens;
    fprintf(f, "%s\t%d\n", INDEX_MAGIC, TSR_DATA_VERSION);
    fprintf(f, "# tessera token dataset; format: docs/data-format.md\n");
    fprintf(f, "vocab_size\t%u\ntoken_width\t%u\nhas_mask\t%d\nn_shards\t%d\nn_tokens\t%llu\n",
            w->vocab, w->width, w->with_mask, w->n_recs, (unsigned long long)total);
    fprintf(f, "# shard\tfile\tn_tokens\tpayload_crc32c\n");
    for (int k = 0; k < w->n_recs; k++)
        fprintf(f, "shard\tshard-%05d.bin\t%llu\t%08x\n", k,
                (unsigned long long)w->recs[k].n_tokens, w->recs[k].crc);
    fprintf(f, "end\n");
    int rc = 0;
    if (fflush(f) != 0 || ferror(f)) rc = io_fail(ipath, "write");
    else if (fsync(fileno(f)) != 0) rc = io_fail(ipath, "fsync");
    if (fclose(f) != 0 && !rc) rc = io_fail(ipath, "close");
    free(ipath);
    return rc;
}

/* The directory that holds `path` ("." when there is no slash). */
static char *parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return dir_dup(".");
    if (slash == path) return dir_dup("/");
    size_t n = (size_t)(slash - path);
    char *p = tsr_malloc(n + 1);
    memcpy(p, path, n);
    p[n] = '\0';
    return p;
}

static int writer_commit(tsr_dataset_writer *w) {
    if (w->f && shard_finish(w)) return TSR_EXIT_DATA;
    if (writer_write_index(w)) return TSR_EXIT_DATA;
    if (fsync_path(w->tmp, 1)) return TSR_EXIT_DATA;
    struct stat st;
    if (lstat(w->dir, &st) == 0) {
        tsr_error("%s: appeared while the dataset was being written; refusing to overwrite it",
                  w->dir);
        return TSR_EXIT_DATA;
    }
    if (rename(w->tmp, w->dir) != 0) {
        tsr_error("%s: rename to %s failed: %s", w->tmp, w->dir, strerror(errno));
        return TSR_EXIT_DATA;
    }
    char *parent = parent_dir(w->dir);
    int rc = fsync_path(parent, 1);
    free(parent);
    return rc;
}

int dataset_writer_close(tsr_dataset_writer *w) {
    int rc = writer_commit(w);
    if (rc) {
        dataset_writer_abort(w);
        return TSR_EXIT_DATA;
    }
    writer_free(w);
    return 0;
}

void dataset_writer_abort(tsr_dataset_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    if (w->mf) fclose(w->mf);
    w->f = w->mf = NULL;
    remove_tmp_dir(w->tmp);
    writer_free(w);
}
