/* shard_index_parse.c — a dataset's index.tsv read and parsed strictly (docs/data-format.md
 * "index.tsv"): its magic line, the header keys in order, one row per shard, the `end` line;
 * every number range-checked, every shard name plain (shard_format.h). The reader (shard.c) opens
 * a dataset with it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "data/data.h"
#include "data/shard_format.h"
#include "fsutil.h"

/* (shard_format.h) */
uint32_t shard_width_for_vocab(uint64_t vocab) { return vocab <= 65536 ? 2 : 4; }

/* Strict unsigned decimal: digits only, no sign, no overflow. */
int index_parse_u64(const char *s, uint64_t *out) {
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

/* The refusal of an index over INDEX_MAX_BYTES; size < 0 when unknown (a file that grew). */
static int index_too_large(const char *path, long long size) {
    char got[48] = "";
    if (size >= 0) snprintf(got, sizeof got, " %lld bytes:", size);
    tsr_error("%s:%s index is larger than %u bytes; not a tessera index", path, got,
              INDEX_MAX_BYTES);
    return TSR_EXIT_DATA;
}

int index_read_file(const char *path, char **out, size_t *len) {
    struct stat st;
    if (stat(path, &st) != 0) {
        tsr_error("%s: cannot open: %s (is the directory a tessera dataset? write one with "
                  "'tessera shard' or 'tessera synth')", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    if (S_ISREG(st.st_mode) && st.st_size > (off_t)INDEX_MAX_BYTES) /* before a byte is read */
        return index_too_large(path, (long long)st.st_size);
    int fd = fs_open_data(path, "dataset index");
    FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
    if (!f) {
        if (fd >= 0) close(fd);
        return TSR_EXIT_DATA;
    }
    size_t cap = 4096, n = 0;
    char *buf = tsr_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= INDEX_MAX_BYTES) {
                free(buf);
                fclose(f);
                return index_too_large(path, -1);
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
    if (v[1] != shard_width_for_vocab(v[0])) {
        tsr_error("%s: token_width %llu, expected %u for vocab_size %llu", path,
                  (unsigned long long)v[1], shard_width_for_vocab(v[0]), (unsigned long long)v[0]);
        return TSR_EXIT_DATA;
    }
    if (v[2] > DATASET_MASK_SEGMENTS) {
        tsr_error("%s: has_mask %llu, expected 0, 1 or 2 (2: a loss mask that marks segment "
                  "starts, docs/data-format.md)", path, (unsigned long long)v[2]);
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
    if (index_parse_u64(f[2], &row->n_tokens) || row->n_tokens > MAX_SHARD_TOKENS) {
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

/* The index parser's state: which line it expects next. */
typedef struct index_parser {
    const char *path;
    dataset_index *ix;
    int stage; /* 0 magic, 1..5 header keys, 6 rows, 7 end seen */
    int lineno, rows;
    uint64_t hv[INDEX_N_KEYS];
} index_parser;

/* Line 1: "tessera-dataset <version>". */
static int index_magic(const index_parser *p, char **f, int nf) {
    uint64_t ver;
    if (nf != 2 || strcmp(f[0], INDEX_MAGIC) != 0 || index_parse_u64(f[1], &ver)) {
        tsr_error("%s:%d: bad magic: expected '%s <version>' as the first line, found "
                  "'%s'", p->path, p->lineno, INDEX_MAGIC, f[0]);
        return TSR_EXIT_DATA;
    }
    if (ver != TSR_DATA_VERSION) {
        tsr_error("%s:%d: dataset format version %llu, this tessera reads version %d",
                  p->path, p->lineno, (unsigned long long)ver, TSR_DATA_VERSION);
        return TSR_EXIT_DATA;
    }
    return 0;
}

/* After the last header key: the header checked, and the row table sized by n_shards. Each shard
 * needs a row: a count beyond the lines left (rest: the text after this line) is refused before
 * the row table is sized by it (a 90-byte index must not ask for gigabytes). */
static int index_header_done(index_parser *p, const char *rest) {
    dataset_index *ix = p->ix;
    if (index_check_header(p->path, p->hv, ix)) return TSR_EXIT_DATA;
    size_t left = 0;
    for (const char *q = rest; q; left++) {
        q = strchr(q, '\n');
        if (q) q++;
    }
    if ((size_t)ix->n_shards > left) {
        tsr_error("%s:%d: n_shards %d, but only %zu lines follow (one 'shard' row per "
                  "shard, then 'end')", p->path, p->lineno, ix->n_shards, left);
        return TSR_EXIT_DATA;
    }
    ix->rows = tsr_calloc((size_t)ix->n_shards + 1, sizeof *ix->rows);
    if (ix->n_shards == 0) p->stage = 6;
    return 0;
}

/* One header line "<key> <number>", the keys in index_keys order. */
static int index_header_key(index_parser *p, char **f, int nf, const char *rest) {
    const char *key = index_keys[p->stage - 1];
    if (nf != 2 || strcmp(f[0], key) != 0 || index_parse_u64(f[1], &p->hv[p->stage - 1])) {
        tsr_error("%s:%d: expected '%s <number>', found '%s'%s%s", p->path, p->lineno, key, f[0],
                  nf > 1 ? " " : "", nf > 1 ? f[1] : "");
        return TSR_EXIT_DATA;
    }
    if (++p->stage == INDEX_N_KEYS + 1) return index_header_done(p, rest);
    return 0;
}

/* "tokenizer NAME": the tokenizer that made the tokens (tessera prep); absent in older datasets. */
static int index_tokenizer(const index_parser *p, char **f, int nf) {
    if (nf != 2 || p->ix->tokenizer[0] || strlen(f[1]) > TOKENIZER_MAX_LEN) {
        tsr_error("%s:%d: expected one 'tokenizer <name>' line (a name without spaces, at "
                  "most %d bytes) before the shard rows", p->path, p->lineno, TOKENIZER_MAX_LEN);
        return TSR_EXIT_DATA;
    }
    snprintf(p->ix->tokenizer, sizeof p->ix->tokenizer, "%s", f[1]);
    return 0;
}

/* One line that is not blank nor a comment, by what the parser expects next. */
static int index_line(index_parser *p, char **f, int nf, const char *rest) {
    if (p->stage == 7) {
        tsr_error("%s:%d: text after the 'end' line", p->path, p->lineno);
        return TSR_EXIT_DATA;
    }
    if (p->stage == 0) {
        TSR_CHECK(index_magic(p, f, nf));
        p->stage = 1;
    } else if (p->stage <= INDEX_N_KEYS) {
        return index_header_key(p, f, nf, rest);
    } else if (p->stage == 6 && p->rows == 0 && strcmp(f[0], "tokenizer") == 0) {
        return index_tokenizer(p, f, nf);
    } else if (p->stage == 6 && p->rows == p->ix->n_shards) {
        if (nf != 1 || strcmp(f[0], "end") != 0) {
            tsr_error("%s:%d: expected 'end' after %d shard rows, found '%s'", p->path, p->lineno,
                      p->rows, f[0]);
            return TSR_EXIT_DATA;
        }
        p->stage = 7;
    } else {
        p->stage = 6;
        if (index_parse_row(p->path, p->lineno, f, nf, &p->ix->rows[p->rows])) return TSR_EXIT_DATA;
        p->rows++;
    }
    return 0;
}

/* Parses the index text (modified in place). Lines: magic+version, the five header keys in
 * order, optionally "tokenizer NAME", n_shards shard rows, "end". Blank lines and lines starting
 * with '#' are skipped. */
int index_parse(const char *path, char *text, dataset_index *ix) {
    index_parser p = {.path = path, .ix = ix};
    char *save = NULL;
    memset(ix, 0, sizeof *ix);
    for (char *line = text; line; line = save) {
        char *nl = strchr(line, '\n');
        save = nl ? nl + 1 : NULL;
        if (nl) *nl = '\0';
        p.lineno++;
        char *f[5];
        int nf = split_fields(line, f, 4);
        if (nf == 0 || f[0][0] == '#') continue;
        TSR_CHECK(index_line(&p, f, nf, save));
    }
    if (p.stage != 7) {
        tsr_error("%s: incomplete index (ends at line %d before the 'end' line; %d of %d shard "
                  "rows)", path, p.lineno, p.rows, ix->n_shards);
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

