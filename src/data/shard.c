/* shard.c — the dataset format (docs/data-format.md): shard headers and the mmap reader over a
 * dataset's index (parsed by shard_index_parse.c; the writer is shard_writer.c).
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
#include "fsutil.h"
#include "crc32c.h"
#include "data/data.h"
#include "data/s3.h"

#include "data/shard_format.h"

/* ================================ header ================================ */

void shard_put_u32(uint8_t *p, uint32_t v) {
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
void shard_header_encode(shard_header *h, uint8_t out[SHARD_HEADER_SIZE]) {
    memcpy(out, SHARD_MAGIC, 8);
    shard_put_u32(out + 8, h->version);
    shard_put_u32(out + 12, h->header_size);
    shard_put_u32(out + 16, h->token_width);
    shard_put_u32(out + 20, h->flags);
    shard_put_u32(out + 24, h->vocab_size);
    shard_put_u32(out + 28, h->shard_no);
    put_u64(out + 32, h->n_tokens);
    put_u64(out + 40, h->token_offset);
    put_u64(out + 48, h->mask_offset);
    shard_put_u32(out + 56, h->payload_crc);
    h->header_crc = tsr_crc32c(0, out, SHARD_HEADER_CRC_AT);
    shard_put_u32(out + 60, h->header_crc);
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

uint32_t shard_flags(int has_mask) {
    return has_mask ? SHARD_FLAG_MASK | (has_mask == DATASET_MASK_SEGMENTS ? SHARD_FLAG_SEGMENTS : 0)
                    : 0;
}

unsigned shard_mask_max(int has_mask) {
    return has_mask == DATASET_MASK_SEGMENTS ? 1u | DATASET_SEGMENT_BIT : 1u;
}

/* Bytes a shard of n tokens occupies. */
static uint64_t shard_file_size(uint64_t n, uint32_t width, int mask) {
    return SHARD_HEADER_SIZE + n * width + (mask ? n : 0);
}

/* ================================ reader ================================ */

typedef struct shard_map {
    char *path;
    const uint8_t *map; /* the whole file, read-only */
    size_t map_len;
    const uint8_t *tokens, *mask; /* mask is NULL without a mask channel */
    uint64_t n_tokens;
    /* A validated copy of this shard (node-local staging, stage.c) that reads use instead; NULL:
     * read in place. Set and cleared only by dataset_shard_redirect, never while reads run. */
    _Atomic(struct shard_map *) staged;
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
    dataset_index ix;               /* kept to validate staged copies against it */
    uint32_t index_crc;             /* CRC32C of the index.tsv text: the dataset's identity */
    uint32_t max_id;                /* the largest token id (dataset_max_token_id) */
    const char *max_how;            /* how it is known, NULL: unknown (vocab - 1) */
    _Atomic uint64_t reads_staged, reads_in_place; /* samples read, relaxed counters */
    tsr_s3 *s3; /* an object-store dataset (s3://): no shard is mapped until staged */
};

static uint32_t token_at(const uint8_t *tokens, uint32_t width, uint64_t i) {
    const uint8_t *p = tokens + i * width;
    return width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : get_u32(p);
}

/* Header fields that must agree with the index and with the layout rules. */
static int shard_check_header(const char *path, const shard_header *h, const dataset_index *ix,
                              int k) {
    const index_row *row = &ix->rows[k];
    uint32_t want_flags = shard_flags(ix->has_mask);
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

/* Every token id of s below vocab_size and at most the index's max_token_id; *seen: the largest. */
static int shard_verify_ids(const char *path, const shard_map *s, const dataset_index *ix,
                            uint32_t *seen) {
    for (uint64_t i = 0; i < s->n_tokens; i++) {
        uint32_t t = token_at(s->tokens, ix->width, i);
        if (t > ix->id_max) {
            if (t >= ix->vocab)
                tsr_error("%s: token %u at position %llu is >= vocab size %u", path, t,
                          (unsigned long long)i, ix->vocab);
            else
                tsr_error("%s: token %u at position %llu is above max_token_id %u (index.tsv "
                          "says no id is larger)", path, t, (unsigned long long)i, ix->id_max);
            return TSR_EXIT_DATA;
        }
        if (t > *seen) *seen = t;
    }
    return 0;
}

/* The O(size) checks: payload CRC, token ids (shard_verify_ids), mask bytes 0/1. */
static int shard_verify_payload(const char *path, const shard_map *s, const shard_header *h,
                                const dataset_index *ix, uint32_t *seen) {
    size_t len = s->map_len - SHARD_HEADER_SIZE;
    uint32_t crc = tsr_crc32c(0, s->tokens, len);
    if (crc != h->payload_crc) {
        tsr_error("%s: payload checksum mismatch: computed 0x%08x over %zu bytes, header and "
                  "index say 0x%08x (the file is corrupted; regenerate or restore it)",
                  path, crc, len, h->payload_crc);
        return TSR_EXIT_DATA;
    }
    if (shard_verify_ids(path, s, ix, seen)) return TSR_EXIT_DATA;
    for (uint64_t i = 0; s->mask && i < s->n_tokens; i++) {
        if (s->mask[i] > shard_mask_max(ix->has_mask)) {
            tsr_error("%s: mask byte %u at position %llu, expected 0 to %u", path, s->mask[i],
                      (unsigned long long)i, shard_mask_max(ix->has_mask));
            return TSR_EXIT_DATA;
        }
    }
    return 0;
}

/* Checks the mapped file of shard k against its header and the index (verify: its payload too,
 * *seen the largest token id there; else *seen is not touched). */
static int shard_validate(shard_map *s, const dataset_index *ix, int k, int verify, uint32_t *seen) {
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
    return verify ? shard_verify_payload(path, s, &h, ix, seen) : 0;
}

/* Maps shard file `path` read-only. */
static int shard_map_file(shard_map *s) {
    int fd = fs_open_data(s->path, "shard (listed in the index)");
    if (fd < 0) return TSR_EXIT_DATA;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        tsr_error("%s: fstat failed: %s", s->path, strerror(errno));
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

/* The index text: read from the directory, or fetched from the object store (s3://) unless it
 * was preset (dataset_index_preset). */
static int index_text(tsr_dataset *ds, const char *ipath, char **text, size_t *len) {
    if (!s3_is_url(ds->dir)) return index_read_file(ipath, text, len);
    size_t n = 0;
    const char *pre = index_preset_text(ds->dir, &n);
    int rc = s3_open(&ds->s3, ds->dir);
    if (rc || !pre) return rc ? rc : dataset_index_fetch(ds->dir, text, len);
    *text = tsr_malloc(n + 1);
    memcpy(*text, pre, n + 1);
    *len = n;
    return 0;
}

/* Shard k of an object-store dataset: known from the index until a staged copy is mapped. */
static void remote_shard(shard_map *s, const dataset_index *ix, int k) {
    s->n_tokens = ix->rows[k].n_tokens;
    s->map_len = shard_file_size(s->n_tokens, ix->width, ix->has_mask);
}

/* max_token_id (docs/data-format.md: every token id is at most it; the writer records the
 * largest), its value field note or NULL when the index has none: into ix->id_max (else vocab - 1). */
static int index_id_max(const char *path, const char *note, dataset_index *ix) {
    uint64_t v = 0;
    ix->id_max = ix->vocab - 1;
    if (!note) return 0;
    if (index_parse_u64(note, &v) || v >= ix->vocab) {
        tsr_error("%s: max_token_id '%.40s': expected a token id below vocab_size %u", path, note,
                  ix->vocab);
        return TSR_EXIT_DATA;
    }
    ix->id_max = (uint32_t)v, ix->id_noted = 1;
    return 0;
}

/* The shards of ds (mapped and checked; with verify every token read, so the largest id is
 * known even without the index's note) and what the dataset knows of its largest id. */
static int open_shards(tsr_dataset *ds, const dataset_index *ix, int verify) {
    int rc = 0;
    uint32_t seen = 0;
    ds->vocab = ix->vocab;
    ds->width = ix->width;
    ds->has_mask = ix->has_mask;
    ds->n_tokens = ix->n_tokens;
    ds->shards = tsr_calloc((size_t)ix->n_shards + 1, sizeof *ds->shards);
    for (int k = 0; k < ix->n_shards && !rc; k++) {
        shard_map *s = &ds->shards[k];
        ds->n_shards = k + 1;
        s->path = data_path_join(ds->dir, ix->rows[k].name);
        if (ds->s3) {
            remote_shard(s, ix, k);
            continue;
        }
        rc = shard_map_file(s);
        if (!rc) rc = shard_validate(s, ix, k, verify, &seen);
    }
    ds->max_id = ix->id_max;
    ds->max_how = ix->id_noted ? "the max_token_id of its index.tsv" : NULL;
    if (verify && !ds->s3) ds->max_id = seen, ds->max_how = "every token read (data.verify)";
    return rc;
}

int dataset_open(tsr_dataset **out, const char *dir, int verify) {
    *out = NULL;
    tsr_dataset *ds = tsr_calloc(1, sizeof *ds);
    atomic_init(&ds->tables, NULL);
    ds->dir = data_dir_dup(dir);
    char *ipath = data_path_join(ds->dir, INDEX_NAME), *text = NULL;
    size_t len;
    dataset_index ix = {0};
    int rc = index_text(ds, ipath, &text, &len);
    if (!rc && strlen(text) != len) {
        tsr_error("%s: contains a NUL byte; not a tessera index", ipath);
        rc = TSR_EXIT_DATA;
    }
    if (!rc) {
        char note[64];
        ds->index_crc = tsr_crc32c(0, text, len); /* before index_parse edits the text */
        int noted = index_note_in_text(text, "max_token_id", note, sizeof note);
        rc = index_parse(ipath, text, &ix);
        if (!rc) rc = index_id_max(ipath, noted ? note : NULL, &ix);
        ds->ix = ix; /* freed by dataset_close */
    }
    if (!rc) rc = open_shards(ds, &ix, verify);
    free(text);
    free(ipath);
    if (rc) {
        dataset_close(ds);
        return rc; /* TSR_EXIT_DATA; TSR_EXIT_USAGE: an s3:// url without settings */
    }
    *out = ds;
    return 0;
}

void dataset_close(tsr_dataset *ds) {
    if (!ds) return;
    for (int k = 0; k < ds->n_shards; k++) {
        dataset_shard_redirect(ds, k, NULL);
        if (ds->shards[k].map) munmap((void *)ds->shards[k].map, ds->shards[k].map_len);
        free(ds->shards[k].path);
    }
    free(ds->ix.rows);
    sample_table *t = atomic_load(&ds->tables);
    while (t) {
        sample_table *next = t->next;
        free(t->prefix);
        free(t);
        t = next;
    }
    free(ds->shards);
    free(ds->dir);
    s3_close(ds->s3);
    free(ds);
}

uint32_t dataset_vocab_size(const tsr_dataset *ds) { return ds->vocab; }
uint64_t dataset_n_tokens(const tsr_dataset *ds) { return ds->n_tokens; }
int dataset_n_shards(const tsr_dataset *ds) { return ds->n_shards; }
int dataset_has_mask(const tsr_dataset *ds) { return ds->has_mask != 0; }
int dataset_has_segments(const tsr_dataset *ds) { return ds->has_mask == DATASET_MASK_SEGMENTS; }
const char *dataset_tokenizer(const tsr_dataset *ds) { return ds->ix.tokenizer; }

uint32_t dataset_max_token_id(const tsr_dataset *ds, const char **how) {
    *how = ds->max_how;
    return ds->max_id;
}

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

/* The shard holding global sample i < pre[n_shards]: binary search of the prefix sums. */
static int shard_of_sample(const uint64_t *pre, int n_shards, uint64_t i) {
    int lo = 0, hi = n_shards; /* invariant: pre[lo] <= i < pre[hi] */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (pre[mid] <= i) lo = mid;
        else hi = mid;
    }
    return lo;
}

int dataset_sample_shard(const tsr_dataset *ds, int T, uint64_t i) {
    if (T < 1) return -1;
    const uint64_t *pre = sample_prefix(ds, T);
    return i < pre[ds->n_shards] ? shard_of_sample(pre, ds->n_shards, i) : -1;
}

/* The shard map holding global sample i (its staged copy when redirected) and the sample's first
 * token in it; NULL after tsr_error() when T < 1 or i is out of range. */
static const shard_map *sample_at(const tsr_dataset *ds, int T, uint64_t i, uint64_t *start,
                                  const shard_map **staged) {
    if (T < 1) {
        tsr_error("%s: sample length T = %d, expected >= 1", ds->dir, T);
        return NULL;
    }
    const uint64_t *pre = sample_prefix(ds, T);
    if (i >= pre[ds->n_shards]) {
        tsr_error("%s: sample %llu out of range: the dataset has %llu samples of length %d",
                  ds->dir, (unsigned long long)i, (unsigned long long)pre[ds->n_shards], T);
        return NULL;
    }
    int lo = shard_of_sample(pre, ds->n_shards, i);
    const shard_map *s = &ds->shards[lo];
    *staged = atomic_load_explicit(&s->staged, memory_order_acquire);
    *start = (i - pre[lo]) * (uint64_t)T;
    if (!*staged && !s->map) {
        tsr_error("%s: not staged yet (an object-store dataset is read from its node-local "
                  "copies: docs/object-storage.md)", s->path);
        return NULL;
    }
    return *staged ? *staged : s;
}

int dataset_read_starts(const tsr_dataset *ds, int T, uint64_t i, int eot, uint8_t *starts) {
    uint64_t start;
    const shard_map *staged, *s = sample_at(ds, T, i, &start, &staged);
    if (!s) return -1;
    for (int j = 0; j < T; j++) {
        const uint64_t at = start + (uint64_t)j;
        starts[j] = j == 0 || (ds->has_mask == DATASET_MASK_SEGMENTS
                                   ? (s->mask[at] & DATASET_SEGMENT_BIT) != 0
                                   : eot >= 0 && token_at(s->tokens, ds->width, at - 1) == (uint32_t)eot);
    }
    return 0;
}

int dataset_read_sample(const tsr_dataset *ds, int T, uint64_t i, int32_t *inputs,
                        int32_t *targets) {
    uint64_t start;
    const shard_map *staged, *s = sample_at(ds, T, i, &start, &staged);
    if (!s) return -1;
    int kept = 0;
    for (int j = 0; j <= T; j++) {
        uint32_t t = token_at(s->tokens, ds->width, start + (uint64_t)j);
        if (t > ds->ix.id_max) { /* (id_max < vocab) */
            tsr_error("%s: token %u at position %llu is %s %u (open with verify to check every "
                      "token)", s->path, t, (unsigned long long)(start + (uint64_t)j),
                      t >= ds->vocab ? ">= vocab size" : "above the index's max_token_id",
                      t >= ds->vocab ? ds->vocab : ds->ix.id_max);
            return -1;
        }
        if (j < T) inputs[j] = (int32_t)t;
        if (j == 0) continue;
        int keep = !s->mask || (s->mask[start + (uint64_t)j] & 1u);
        targets[j - 1] = keep ? (int32_t)t : -1;
        kept += keep;
    }
    tsr_dataset *mds = (tsr_dataset *)ds; /* only the atomic counters are updated */
    atomic_fetch_add_explicit(staged ? &mds->reads_staged : &mds->reads_in_place, 1,
                              memory_order_relaxed);
    return kept;
}

/* ================================ staging hooks ================================ */

const char *dataset_dir(const tsr_dataset *ds) { return ds->dir; }
uint32_t dataset_index_crc(const tsr_dataset *ds) { return ds->index_crc; }
const char *dataset_shard_name(const tsr_dataset *ds, int k) { return ds->ix.rows[k].name; }
uint64_t dataset_shard_bytes(const tsr_dataset *ds, int k) { return ds->shards[k].map_len; }
uint32_t dataset_shard_payload_crc(const tsr_dataset *ds, int k) { return ds->ix.rows[k].crc; }

int dataset_shard_header_matches(const tsr_dataset *ds, int k, const void *hdr) {
    if (ds->shards[k].map) return memcmp(hdr, ds->shards[k].map, SHARD_HEADER_SIZE) == 0;
    const index_row *row = &ds->ix.rows[k]; /* object store: the header the index implies */
    shard_header h = {TSR_DATA_VERSION, SHARD_HEADER_SIZE, ds->width, shard_flags(ds->has_mask),
                      ds->vocab, (uint32_t)k, row->n_tokens, SHARD_HEADER_SIZE,
                      ds->has_mask ? SHARD_HEADER_SIZE + row->n_tokens * ds->width : 0, row->crc, 0};
    uint8_t want[SHARD_HEADER_SIZE];
    shard_header_encode(&h, want);
    return memcmp(hdr, want, SHARD_HEADER_SIZE) == 0;
}

tsr_s3 *dataset_s3(const tsr_dataset *ds) { return ds->s3; }

static void shard_map_free(shard_map *m) {
    if (!m) return;
    if (m->map) munmap((void *)m->map, m->map_len);
    free(m->path);
    free(m);
}

int dataset_shard_redirect(tsr_dataset *ds, int k, const char *path) {
    shard_map *s = &ds->shards[k];
    shard_map *old = atomic_load_explicit(&s->staged, memory_order_relaxed);
    if (!path) {
        atomic_store_explicit(&s->staged, NULL, memory_order_release);
        shard_map_free(old);
        return 0;
    }
    shard_map *m = tsr_calloc(1, sizeof *m);
    m->path = data_dir_dup(path);
    int rc = shard_map_file(m);
    uint32_t seen = 0;
    if (!rc) rc = shard_validate(m, &ds->ix, k, 1, &seen);
    if (rc) {
        tsr_error("  %s is not a valid copy of %s: not used", path, s->path);
        shard_map_free(m);
        return TSR_EXIT_DATA; /* a previous redirect of k, if any, stays */
    }
    atomic_store_explicit(&s->staged, m, memory_order_release);
    shard_map_free(old);
    return 0;
}

int dataset_shard_redirected(const tsr_dataset *ds, int k) {
    return atomic_load_explicit(&ds->shards[k].staged, memory_order_relaxed) != NULL;
}

void dataset_read_counts(const tsr_dataset *ds, uint64_t *staged, uint64_t *in_place) {
    if (staged) *staged = atomic_load_explicit(&ds->reads_staged, memory_order_relaxed);
    if (in_place) *in_place = atomic_load_explicit(&ds->reads_in_place, memory_order_relaxed);
}

int dataset_file_is_part(const char *path) {
    char head[32] = {0};
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f) fclose(f);
    size_t im = strlen(INDEX_MAGIC);
    return (n >= sizeof SHARD_MAGIC - 1 && !memcmp(head, SHARD_MAGIC, sizeof SHARD_MAGIC - 1)) ||
           (n > im && !memcmp(head, INDEX_MAGIC, im) && (head[im] == '\t' || head[im] == ' '));
}

