/* train.c — `tessera tokenizer train`: learns a byte-level BPE tokenizer (GPT-2's scheme).
 *
 *   tessera tokenizer train --vocab-size N --out FILE [--min-frequency K] [--special TEXT]...
 *                           [--max-memory MB] INPUT...
 *
 * Phases (docs/tokenizer.md "tessera tokenizer train"):
 *  1. count: stream every input in chunks of CHUNK bytes, cut where no pre-token can straddle the
 *     cut; split each chunk at literal special tokens, pre-tokenise the rest with GPT-2's rule
 *     (tokenizer_pretokenize) and count distinct pieces in a hash table. The corpus is never held
 *     in memory: memory is O(distinct pieces), kept under --max-memory by pruning rare pieces.
 *  2. merge: every piece becomes a word of byte ids with its count. Pair counts (count-weighted)
 *     live in a hash table, each pair with the list of words it occurs in, and a max-heap ordered
 *     by (count desc, left asc, right asc) picks the next merge. A merge rewrites only the words in
 *     its pair's list and updates the counts of the pairs around each occurrence; heap entries
 *     whose count went stale are re-pushed with the current count when they surface (counts of existing
 *     pairs only ever fall; pairs holding the new token are pushed after the merge).
 *  3. write: ids 0..255 are the bytes 0..255, then one token per merge in merge order, then the
 *     special tokens; saved with tokenizer_save_parts (tokfile.c), then loaded back as a check.
 * Deterministic: same inputs and options give a byte-identical file (fixed chunking, ordered
 * inputs, total order on heap entries).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cli_commands.h"
#include "common.h"
#include "fsutil.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_cmd.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/tokfile.h"

#define CHUNK (UINT64_C(4) << 20) /* bytes of input pre-tokenised at a time */
#define MAX_SPECIALS 1024
#define MAX_VOCAB (INT64_C(1) << 31)

/* ================================ options ================================ */

typedef struct train_args {
    int64_t vocab_size, min_freq, max_memory_mb;
    const char *out;
    const char **specials;
    uint32_t n_specials;
    int quiet;
} train_args;

static const cli_opt train_opts[] = {
    {"vocab-size", CLI_NO_SHORT('v'), "N", "vocabulary size: 256 bytes + merges + special tokens (required)"},
    {"out", 'o', "FILE", "tokenizer file to write (tessera format, docs/tokenizer.md) (required)"},
    {"min-frequency", CLI_NO_SHORT('f'), "K", "merge only pairs seen at least K times (default 2)"},
    {"special", CLI_NO_SHORT('s'), "TEXT", "a special token, e.g. '<|endoftext|>' (repeatable; last ids)"},
    {"max-memory", CLI_NO_SHORT('m'), "MB", "bound on the piece table: rare pieces are pruned (default 1024)"},
    {"quiet", 'q', NULL, "print only warnings and errors"},
    {"help", 'h', NULL, "show this help"},
};
const cli_cmd tokenizer_train_cli = {
    "tokenizer train", "INPUT...",
    "Learns a byte-level BPE tokenizer (GPT-2's scheme) from text; --vocab-size and --out are\n"
    "required. INPUT: a text file, a directory (its files, recursively, in sorted order; names\n"
    "starting with '.' are skipped), or '-' for stdin.",
    train_opts, (int)(sizeof train_opts / sizeof train_opts[0]), NULL,
};

static int usage(const char *msg, const char *detail) {
    return cli_usage_error(&tokenizer_train_cli, msg, detail);
}

static int train_on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    train_args *a = ctx;
    switch (ch) {
    case CLI_NO_SHORT('v'): return cli_number(c, ch, val, 257, MAX_VOCAB, &a->vocab_size);
    case 'o': a->out = val; return 0;
    case CLI_NO_SHORT('f'): return cli_number(c, ch, val, 1, INT64_MAX / 2, &a->min_freq);
    case CLI_NO_SHORT('m'): return cli_number(c, ch, val, 1, INT64_C(1) << 30, &a->max_memory_mb);
    case 'q': a->quiet = 1; return 0;
    case CLI_NO_SHORT('s'):
        if (!val[0]) return usage("--special: the text is empty", NULL);
        for (uint32_t k = 0; k < a->n_specials; k++)
            if (!strcmp(a->specials[k], val)) return usage("--special given twice: ", val);
        if (a->n_specials == MAX_SPECIALS) return usage("too many --special (max 1024)", NULL);
        a->specials[a->n_specials++] = val;
        return 0;
    default: return usage("unhandled option", NULL);
    }
}

/* Returns 0, -1 after --help, or an exit status. Operands are argv[optind..argc). */
static int parse_args(int argc, char **argv, train_args *a) {
    *a = (train_args){.min_freq = 2, .max_memory_mb = 1024};
    a->specials = tsr_calloc(MAX_SPECIALS, sizeof *a->specials);
    int rc = cli_parse(&tokenizer_train_cli, argc, argv, train_on_opt, a);
    if (rc) return rc;
    if (!a->vocab_size) return usage("--vocab-size N is required", NULL);
    if (!a->out) return usage("--out FILE is required", NULL);
    if (optind >= argc) return usage("no INPUT given (a text file, a directory, or '-')", NULL);
    if (a->vocab_size < 256 + (int64_t)a->n_specials + 1) {
        char msg[160];
        snprintf(msg, sizeof msg, "--vocab-size %lld leaves no room for merges: it must be at "
                 "least 256 (bytes) + %u (specials) + 1", (long long)a->vocab_size, a->n_specials);
        return usage(msg, NULL);
    }
    return 0;
}

/* ================================ inputs ================================ */

typedef struct path_list {
    char **p;
    size_t n, cap;
} path_list;

static void paths_add(path_list *l, const char *path) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        char **np = realloc(l->p, l->cap * sizeof *np);
        if (!np) tsr_die(TSR_EXIT_INTERNAL, "out of memory listing inputs");
        l->p = np;
    }
    size_t n = strlen(path) + 1;
    l->p[l->n] = tsr_malloc(n);
    memcpy(l->p[l->n++], path, n);
}

static int add_walked(void *ctx, const char *path, const struct stat *st) {
    (void)st;
    paths_add(ctx, path);
    return 0;
}

static int list_inputs(path_list *l, int n, char **operands) {
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (!strcmp(operands[i], "-")) {
            paths_add(l, "-");
        } else if (stat(operands[i], &st) != 0) {
            tsr_error("%s: cannot read input: %s", operands[i], strerror(errno));
            return TSR_EXIT_DATA;
        } else if (S_ISDIR(st.st_mode)) {
            TSR_CHECK(fs_walk(operands[i], add_walked, l));
        } else {
            paths_add(l, operands[i]);
        }
    }
    return 0;
}

/* ================================ phase 1: counting pieces ================================ */

typedef struct piece {
    uint64_t count;
    uint64_t off; /* into arena */
    uint32_t len;
    uint32_t hash; /* low 32 bits of the 64-bit hash, to skip most memcmp */
} piece;

typedef struct piece_table {
    piece *e;
    uint32_t n, cap;
    uint32_t *slot; /* open addressing, linear probing: entry index + 1, or 0 when empty */
    uint64_t mask;  /* slots - 1 (a power of two) */
    uint8_t *arena;
    uint64_t an, acap;
    uint64_t limit;                /* bytes: --max-memory */
    uint64_t n_prunes, pruned, pruned_count, prune_max_threshold;
} piece_table;

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    return tsr_hash64(h);
}

/* Bytes the table holds (its allocations). */
static uint64_t pt_bytes(const piece_table *t) {
    return (uint64_t)t->cap * sizeof(piece) + (t->mask + 1) * sizeof(uint32_t) + t->acap;
}

static void *xrealloc(void *p, size_t n, const char *what) {
    void *np = realloc(p, n ? n : 1);
    if (!np) tsr_die(TSR_EXIT_INTERNAL, "out of memory: %zu bytes for %s (lower --max-memory?)", n,
                     what);
    return np;
}

static void pt_rehash(piece_table *t, uint64_t slots) {
    free(t->slot);
    t->slot = tsr_calloc(slots, sizeof *t->slot);
    t->mask = slots - 1;
    for (uint32_t i = 0; i < t->n; i++) {
        uint64_t j = t->e[i].hash & t->mask;
        while (t->slot[j]) j = (j + 1) & t->mask;
        t->slot[j] = i + 1;
    }
}

/* Slot count for n entries at load factor <= 1/2. */
static uint64_t slots_for(uint64_t n) {
    uint64_t s = 1024;
    while (s < 2 * n) s *= 2;
    return s;
}

static void pt_init(piece_table *t, uint64_t limit) {
    memset(t, 0, sizeof *t);
    t->limit = limit;
    t->cap = 1024;
    t->e = tsr_malloc(t->cap * sizeof *t->e);
    t->acap = 16384;
    t->arena = tsr_malloc(t->acap);
    pt_rehash(t, 1024);
}

/* Frees the allocations; the statistics stay. */
static void pt_free(piece_table *t) {
    free(t->e);
    free(t->slot);
    free(t->arena);
    t->e = NULL;
    t->slot = NULL;
    t->arena = NULL;
    t->n = t->cap = 0;
    t->an = t->acap = 0;
}

/* Drops the pieces counted at most `threshold` times, compacts entries and arena in place (both
 * are in insertion order), and shrinks the allocations to fit with a quarter of headroom. */
static void pt_prune_at(piece_table *t, uint64_t threshold) {
    uint32_t o = 0;
    uint64_t ao = 0;
    for (uint32_t i = 0; i < t->n; i++) {
        piece p = t->e[i];
        if (p.count <= threshold) {
            t->pruned++;
            t->pruned_count += p.count;
            continue;
        }
        memmove(t->arena + ao, t->arena + p.off, p.len);
        p.off = ao;
        ao += p.len;
        t->e[o++] = p;
    }
    t->n = o;
    t->an = ao;
    t->cap = o + o / 4 + 1024;
    t->e = xrealloc(t->e, (size_t)t->cap * sizeof *t->e, "the piece table");
    t->acap = ao + ao / 4 + 16384;
    t->arena = xrealloc(t->arena, t->acap, "the piece table");
    pt_rehash(t, slots_for(t->cap));
}

/* Called when the table must grow past its limit: prunes pieces seen once, then twice, 4, 8 ...
 * times until the table is at most half the limit (so pruning is rare), or nothing is left. */
static void pt_prune(piece_table *t) {
    uint64_t threshold = 1;
    t->n_prunes++;
    for (;;) {
        pt_prune_at(t, threshold);
        if (threshold > t->prune_max_threshold) t->prune_max_threshold = threshold;
        if (pt_bytes(t) <= t->limit / 2 || t->n == 0) break;
        threshold *= 2;
    }
}

static void pt_add(piece_table *t, const uint8_t *p, size_t len) {
    uint64_t h = hash_bytes(p, len);
    uint64_t j = h & t->mask;
    for (uint32_t s; (s = t->slot[j]); j = (j + 1) & t->mask) {
        piece *e = &t->e[s - 1];
        if (e->hash == (uint32_t)h && e->len == len && !memcmp(t->arena + e->off, p, len)) {
            e->count++;
            return;
        }
    }
    if (len > UINT32_MAX) tsr_die(TSR_EXIT_DATA, "a pre-token of %zu bytes: too long", len);
    if (t->n >= UINT32_MAX - 1) tsr_die(TSR_EXIT_DATA, "more than 2^32 distinct pieces");
    /* Grow (or prune) before inserting; then find the slot again. */
    int grow_e = t->n == t->cap, grow_a = t->an + len > t->acap;
    int grow_s = 2 * (uint64_t)(t->n + 1) > t->mask + 1;
    if (grow_e || grow_a || grow_s) {
        uint64_t more = (grow_e ? (uint64_t)t->cap * sizeof(piece) : 0) +
                        (grow_a ? t->acap + len : 0) + (grow_s ? (t->mask + 1) * 4 : 0);
        if (pt_bytes(t) + more > t->limit) pt_prune(t);
        if (t->n == t->cap) {
            t->cap = t->cap * 2;
            t->e = xrealloc(t->e, (size_t)t->cap * sizeof *t->e, "the piece table");
        }
        if (t->an + len > t->acap) {
            while (t->an + len > t->acap) t->acap *= 2;
            t->arena = xrealloc(t->arena, t->acap, "the piece table");
        }
        if (2 * (uint64_t)(t->n + 1) > t->mask + 1) pt_rehash(t, 2 * (t->mask + 1));
        j = h & t->mask;
        while (t->slot[j]) j = (j + 1) & t->mask;
    }
    memcpy(t->arena + t->an, p, len);
    t->e[t->n] = (piece){1, t->an, (uint32_t)len, (uint32_t)h};
    t->an += len;
    t->slot[j] = ++t->n;
}

static void on_piece(void *ctx, const uint8_t *p, size_t len) {
    if (len) pt_add(ctx, p, len);
}

typedef struct counter {
    piece_table t;
    const char *const *specials;
    size_t *special_len;
    size_t *special_next; /* (n_specials) count_text's cache of the next occurrence */
    uint32_t n_specials;
    uint64_t *special_seen; /* (n_specials) occurrences in the input */
    uint64_t bytes, files;
    uint64_t replaced; /* chunks that held ill-formed UTF-8 */
} counter;

/* Counts the pieces of one chunk: literal special tokens are cut out first (earliest match wins,
 * the longest at equal positions), the text between them is pre-tokenised. Each special's next
 * occurrence is cached, so a rare special is searched once per chunk, not once per match. */
static void count_text(counter *c, const uint8_t *text, size_t n) {
    size_t pos = 0;
    for (uint32_t k = 0; k < c->n_specials; k++) c->special_next[k] = SIZE_MAX; /* not searched */
    while (pos < n) {
        size_t best = n, best_len = 0;
        uint32_t best_k = 0;
        for (uint32_t k = 0; k < c->n_specials; k++) {
            size_t *at = &c->special_next[k];
            if (*at == SIZE_MAX || (*at < pos && *at != n)) {
                const uint8_t *m = memmem(text + pos, n - pos, c->specials[k], c->special_len[k]);
                *at = m ? (size_t)(m - text) : n; /* n: none in this chunk */
            }
            if (*at < best || (*at == best && *at < n && c->special_len[k] > best_len)) {
                best = *at;
                best_len = c->special_len[k];
                best_k = k;
            }
        }
        if (best > pos) tokenizer_pretokenize(text + pos, best - pos, on_piece, &c->t);
        if (best == n) break;
        c->special_seen[best_k]++;
        pos = best + best_len;
    }
}

static int is_ascii_space(uint8_t b) { return b == ' ' || (b >= '\t' && b <= '\r'); }

/* Where to cut a chunk of n bytes (not at the end of the input) so that no pre-token straddles the
 * cut and the pieces on both sides are those of the whole text: before an ASCII whitespace byte
 * that follows a printable ASCII byte (a pre-token never runs from a non-space into a space, and
 * the GPT-2 rule has no look-behind). Prefers newlines. Without one (megabytes without such a
 * place), cuts at a UTF-8 character start: the pieces at that one cut may then differ. */
static size_t find_cut(const uint8_t *buf, size_t n) {
    for (int pass = 0; pass < 2; pass++)
        for (size_t c = n - 1; c >= 1 && c > n / 2; c--)
            if ((pass ? is_ascii_space(buf[c]) : buf[c] == '\n') && buf[c - 1] > 0x20 &&
                buf[c - 1] < 0x7f)
                return c;
    size_t c = n - 1;
    while (c > 0 && (buf[c] & 0xC0) == 0x80) c--;
    return c > 0 ? c : n;
}

static int count_file(counter *c, const char *path, uint8_t *buf, size_t cap) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        tsr_error("%s: cannot open input: %s", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    size_t have = 0;
    int eof = 0;
    while (!eof || have) {
        if (!eof) {
            size_t k = fread(buf + have, 1, cap - have, f); /* fread fills unless EOF/error */
            if (ferror(f)) {
                tsr_error("%s: read error after %llu bytes: %s", path,
                          (unsigned long long)c->bytes, strerror(errno));
                if (f != stdin) fclose(f);
                return TSR_EXIT_DATA;
            }
            c->bytes += k;
            have += k;
            eof = have < cap;
        }
        size_t cut = eof ? have : find_cut(buf, have);
        /* The encoder reads ill-formed UTF-8 as U+FFFD (tokenizer_internal.h): count what it will
         * see. A cut never splits an ill-formed subpart (cuts are before ASCII or lead bytes). */
        size_t m;
        uint8_t *clean = tsr_utf8_sanitize(buf, cut, &m);
        if (clean) c->replaced++;
        count_text(c, clean ? clean : buf, clean ? m : cut);
        free(clean);
        memmove(buf, buf + cut, have - cut);
        have -= cut;
    }
    if (f != stdin) fclose(f);
    else clearerr(stdin);
    c->files++;
    return 0;
}

/* ================================ phase 2: merging ================================ */

typedef struct word {
    uint64_t count;
    uint64_t off; /* symbols in sym[off, off + len) */
    uint32_t len;
} word;

typedef struct pair {
    uint32_t left, right;
    int64_t count;   /* sum over occurrences of the word's count */
    uint32_t *occ;   /* words it occurs (or occurred) in; no repeats */
    uint32_t n_occ, cap_occ;
    uint32_t touched; /* last merge (1-based) that raised its count */
} pair;

typedef struct heap_entry {
    int64_t count;
    uint32_t pair;
} heap_entry;

typedef struct bpe {
    word *w;
    uint32_t n_words;
    uint32_t *sym;
    pair *p;
    uint32_t n_pairs, cap_pairs;
    uint32_t *pslot; /* pair table: index + 1 */
    uint64_t pmask;
    heap_entry *h;
    size_t n_heap, cap_heap;
    uint32_t *touched; /* pairs raised by the current merge */
    size_t n_touched, cap_touched;
    uint32_t stamp;
} bpe;

static uint64_t pair_hash(uint32_t l, uint32_t r) { return tsr_hash64((uint64_t)l << 32 | r); }

static void pairs_rehash(bpe *b, uint64_t slots) {
    free(b->pslot);
    b->pslot = tsr_calloc(slots, sizeof *b->pslot);
    b->pmask = slots - 1;
    for (uint32_t i = 0; i < b->n_pairs; i++) {
        uint64_t j = pair_hash(b->p[i].left, b->p[i].right) & b->pmask;
        while (b->pslot[j]) j = (j + 1) & b->pmask;
        b->pslot[j] = i + 1;
    }
}

/* Index of pair (l, r), created with count 0 when absent (create) or UINT32_MAX. */
static uint32_t pair_find(bpe *b, uint32_t l, uint32_t r, int create) {
    uint64_t j = pair_hash(l, r) & b->pmask;
    for (uint32_t s; (s = b->pslot[j]); j = (j + 1) & b->pmask)
        if (b->p[s - 1].left == l && b->p[s - 1].right == r) return s - 1;
    if (!create) return UINT32_MAX;
    if (b->n_pairs == UINT32_MAX - 1) tsr_die(TSR_EXIT_INTERNAL, "more than 2^32 pairs");
    if (b->n_pairs == b->cap_pairs) {
        b->cap_pairs = b->cap_pairs ? 2 * b->cap_pairs : 4096;
        b->p = xrealloc(b->p, (size_t)b->cap_pairs * sizeof *b->p, "pair counts");
    }
    b->p[b->n_pairs] = (pair){l, r, 0, NULL, 0, 0, 0};
    if (2 * (uint64_t)(b->n_pairs + 1) > b->pmask + 1) {
        b->n_pairs++;
        pairs_rehash(b, 2 * (b->pmask + 1));
        return b->n_pairs - 1;
    }
    b->pslot[j] = ++b->n_pairs;
    return b->n_pairs - 1;
}

/* Heap order: higher count first; ties by lower (left, right), so the result is deterministic. */
static int above(const bpe *b, heap_entry x, heap_entry y) {
    if (x.count != y.count) return x.count > y.count;
    const pair *px = &b->p[x.pair], *py = &b->p[y.pair];
    if (px->left != py->left) return px->left < py->left;
    return px->right < py->right;
}

static void heap_push(bpe *b, int64_t count, uint32_t pi) {
    if (b->n_heap == b->cap_heap) {
        b->cap_heap = b->cap_heap ? 2 * b->cap_heap : 4096;
        b->h = xrealloc(b->h, b->cap_heap * sizeof *b->h, "the pair heap");
    }
    heap_entry x = {count, pi};
    size_t i = b->n_heap++;
    while (i > 0 && above(b, x, b->h[(i - 1) / 2])) {
        b->h[i] = b->h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    b->h[i] = x;
}

static heap_entry heap_pop(bpe *b) {
    heap_entry top = b->h[0], x = b->h[--b->n_heap];
    size_t i = 0, n = b->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && above(b, b->h[c + 1], b->h[c])) c++;
        if (!above(b, b->h[c], x)) break;
        b->h[i] = b->h[c];
        i = c;
    }
    if (n) b->h[i] = x;
    return top;
}

/* Raises pair (l, r) by n for word wi: records the word and, during a merge, the pair. */
static void pair_add(bpe *b, uint32_t l, uint32_t r, uint64_t n, uint32_t wi) {
    uint32_t pi = pair_find(b, l, r, 1);
    pair *p = &b->p[pi];
    p->count += (int64_t)n;
    if (p->n_occ == 0 || p->occ[p->n_occ - 1] != wi) {
        if (p->n_occ == p->cap_occ) {
            p->cap_occ = p->cap_occ ? 2 * p->cap_occ : 4;
            p->occ = xrealloc(p->occ, (size_t)p->cap_occ * sizeof *p->occ, "pair occurrences");
        }
        p->occ[p->n_occ++] = wi;
    }
    if (b->stamp && p->touched != b->stamp) {
        p->touched = b->stamp;
        if (b->n_touched == b->cap_touched) {
            b->cap_touched = b->cap_touched ? 2 * b->cap_touched : 1024;
            b->touched = xrealloc(b->touched, b->cap_touched * sizeof *b->touched, "merge state");
        }
        b->touched[b->n_touched++] = pi;
    }
}

static void pair_sub(bpe *b, uint32_t l, uint32_t r, uint64_t n) {
    uint32_t pi = pair_find(b, l, r, 0);
    if (pi == UINT32_MAX) tsr_die(TSR_EXIT_INTERNAL, "BPE training: pair (%u, %u) missing", l, r);
    b->p[pi].count -= (int64_t)n;
}

/* Words from the counted pieces (the table is freed), initial pair counts, the heap. */
static void bpe_init(bpe *b, piece_table *t) {
    memset(b, 0, sizeof *b);
    b->n_words = t->n;
    b->w = tsr_malloc(((size_t)t->n + 1) * sizeof *b->w);
    b->sym = tsr_malloc((size_t)(t->an + 1) * sizeof *b->sym);
    for (uint32_t i = 0; i < t->n; i++) {
        const piece *p = &t->e[i];
        b->w[i] = (word){p->count, p->off, p->len};
        for (uint32_t k = 0; k < p->len; k++) b->sym[p->off + k] = t->arena[p->off + k];
    }
    pt_free(t);
    pairs_rehash(b, 1 << 16);
    for (uint32_t i = 0; i < b->n_words; i++) {
        const uint32_t *s = b->sym + b->w[i].off;
        for (uint32_t k = 0; k + 1 < b->w[i].len; k++)
            pair_add(b, s[k], s[k + 1], b->w[i].count, i);
    }
    for (uint32_t i = 0; i < b->n_pairs; i++)
        if (b->p[i].count > 0) heap_push(b, b->p[i].count, i);
}

static void bpe_free(bpe *b) {
    for (uint32_t i = 0; i < b->n_pairs; i++) free(b->p[i].occ);
    tsr_free_all(b->p, b->pslot, b->h, b->touched, b->w, b->sym);
}

/* Merges every occurrence of (A, B) into X, left to right, in the words that hold it. */
static void bpe_merge(bpe *b, uint32_t pi, uint32_t x) {
    uint32_t A = b->p[pi].left, B = b->p[pi].right;
    uint32_t *occ = b->p[pi].occ, n_occ = b->p[pi].n_occ;
    b->p[pi].occ = NULL; /* (A, B) will not occur again */
    b->p[pi].n_occ = b->p[pi].cap_occ = 0;
    b->stamp++;
    b->n_touched = 0;
    for (uint32_t k = 0; k < n_occ; k++) {
        uint32_t wi = occ[k];
        word *w = &b->w[wi];
        uint32_t *s = b->sym + w->off, n = w->len, o = 0, r = 0;
        uint64_t c = w->count;
        while (r < n) {
            if (r + 1 < n && s[r] == A && s[r + 1] == B) {
                if (o > 0) { /* the symbol before: already rewritten, may be X */
                    pair_sub(b, s[o - 1], A, c);
                    pair_add(b, s[o - 1], x, c, wi);
                }
                if (r + 2 < n) { /* the symbol after: not yet rewritten */
                    pair_sub(b, B, s[r + 2], c);
                    pair_add(b, x, s[r + 2], c, wi);
                }
                pair_sub(b, A, B, c);
                s[o++] = x;
                r += 2;
            } else {
                s[o++] = s[r++];
            }
        }
        w->len = o;
    }
    free(occ);
    for (size_t k = 0; k < b->n_touched; k++) {
        uint32_t t = b->touched[k];
        if (b->p[t].count > 0) heap_push(b, b->p[t].count, t);
    }
}

/* Learns up to max_merges merges of pairs seen at least min_freq times; returns how many. */
static uint32_t bpe_train(bpe *b, uint32_t max_merges, int64_t min_freq, tsr_merge *merges) {
    uint32_t n = 0;
    while (n < max_merges && b->n_heap) {
        heap_entry top = heap_pop(b);
        int64_t now = b->p[top.pair].count;
        if (now != top.count) { /* stale: counts of existing pairs only fall */
            if (now > 0) heap_push(b, now, top.pair);
            continue;
        }
        if (now < min_freq) break;
        uint32_t x = 256 + n;
        merges[n] = (tsr_merge){b->p[top.pair].left, b->p[top.pair].right, x};
        bpe_merge(b, top.pair, x);
        n++;
    }
    return n;
}

static void print_count(FILE *f, const char *label, uint64_t v) {
    fprintf(f, "%s%llu", label, (unsigned long long)v);
}

/* ================================ the command ================================ */

/* What the run learned and measured, for the summary and the closing warnings. */
typedef struct train_run {
    counter c;
    uint64_t piece_bytes, special_bytes; /* input bytes in counted pieces, in specials */
    uint64_t n_tok_out;                  /* the training input's tokens under the learned merges */
    uint64_t table_peak;                 /* bytes of the piece table after counting */
    uint32_t n_distinct, want, n_merges, n_tokens;
    double t0, t1, t2, t3; /* start, counted, merged, written */
} train_run;

/* Phase 1: counts the pieces of every input into r->c. Returns 0 or an exit status. */
static int count_inputs(train_run *r, const train_args *a, const path_list *inputs) {
    counter *c = &r->c;
    c->specials = a->specials;
    c->n_specials = a->n_specials;
    c->special_len = tsr_calloc(a->n_specials + 1, sizeof *c->special_len);
    c->special_seen = tsr_calloc(a->n_specials + 1, sizeof *c->special_seen);
    c->special_next = tsr_calloc(a->n_specials + 1, sizeof *c->special_next);
    for (uint32_t k = 0; k < a->n_specials; k++) c->special_len[k] = strlen(a->specials[k]);
    pt_init(&c->t, (uint64_t)a->max_memory_mb << 20);
    uint8_t *buf = tsr_malloc(CHUNK);
    int rc = 0;
    for (size_t i = 0; i < inputs->n && !rc; i++) rc = count_file(c, inputs->p[i], buf, CHUNK);
    free(buf);
    if (rc) return rc;
    for (uint32_t i = 0; i < c->t.n; i++) r->piece_bytes += c->t.e[i].count * c->t.e[i].len;
    uint64_t special_seen = 0;
    for (uint32_t k = 0; k < a->n_specials; k++) {
        r->special_bytes += c->special_seen[k] * c->special_len[k];
        special_seen += c->special_seen[k];
    }
    r->n_tok_out = special_seen;
    r->n_distinct = c->t.n;
    r->table_peak = pt_bytes(&c->t);
    return 0;
}

/* Phase 2: learns up to r->want merges from the counted pieces; returns them (malloc'd). */
static tsr_merge *learn_merges(train_run *r, int64_t min_freq) {
    bpe b;
    bpe_init(&b, &r->c.t);
    /* Each merge shortens some word by at least one symbol: at most sum(len - 1) merges. */
    uint64_t most = 0;
    for (uint32_t i = 0; i < b.n_words; i++) most += b.w[i].len - 1;
    tsr_merge *merges = tsr_malloc((size_t)(most < r->want ? most + 1 : r->want) * sizeof *merges);
    r->n_merges = bpe_train(&b, r->want, min_freq, merges);
    for (uint32_t i = 0; i < b.n_words; i++) r->n_tok_out += b.w[i].count * b.w[i].len;
    bpe_free(&b);
    return merges;
}

/* Phase 3: the vocabulary (bytes, merges, specials) written to a->out, then loaded back as a
 * check. Returns 0 or an exit status. */
static int write_vocab(train_run *r, const train_args *a, const tsr_merge *merges) {
    uint32_t n_merges = r->n_merges, n_tokens = r->n_tokens = 256 + n_merges + a->n_specials;
    uint8_t **tok = tsr_malloc((size_t)n_tokens * sizeof *tok);
    uint32_t *len = tsr_malloc((size_t)n_tokens * sizeof *len);
    uint32_t *special_ids = tsr_malloc((size_t)(a->n_specials + 1) * sizeof *special_ids);
    for (uint32_t i = 0; i < 256; i++) {
        tok[i] = tsr_malloc(1);
        tok[i][0] = (uint8_t)i;
        len[i] = 1;
    }
    for (uint32_t k = 0; k < n_merges; k++) {
        uint32_t l = merges[k].left, rt = merges[k].right, x = merges[k].result;
        len[x] = len[l] + len[rt];
        tok[x] = tsr_malloc(len[x]);
        memcpy(tok[x], tok[l], len[l]);
        memcpy(tok[x] + len[l], tok[rt], len[rt]);
    }
    for (uint32_t k = 0; k < a->n_specials; k++) {
        uint32_t id = 256 + n_merges + k;
        special_ids[k] = id;
        len[id] = (uint32_t)r->c.special_len[k];
        tok[id] = tsr_malloc(len[id]);
        memcpy(tok[id], a->specials[k], len[id]);
    }
    int rc = tokenizer_save_parts(a->out, n_tokens, (const uint8_t *const *)tok, len, n_merges,
                                  merges, a->n_specials, a->specials, special_ids);
    tsr_tokenizer *check = NULL;
    if (!rc) {
        rc = tokenizer_load(&check, a->out);
        if (rc) tsr_error("%s: the file just written does not load back (a bug)", a->out);
        tokenizer_free(check);
    }
    for (uint32_t i = 0; i < n_tokens; i++) free(tok[i]);
    free(tok);
    free(len);
    free(special_ids);
    return rc;
}

/* The summary on stdout (not with --quiet). */
static void print_summary(FILE *f, const train_run *r, const train_args *a) {
    const counter *c = &r->c;
    print_count(f, "read: ", c->bytes);
    print_count(f, " bytes from ", c->files);
    fprintf(f, " file(s) in %.2f s (%.1f MB/s)\n", r->t1 - r->t0,
            (double)c->bytes / 1e6 / (r->t1 - r->t0 > 1e-9 ? r->t1 - r->t0 : 1e-9));
    print_count(f, "pieces: ", r->n_distinct);
    fprintf(f, " distinct (table %.1f MB at the end, limit %lld MB",
            (double)r->table_peak / (1 << 20), (long long)a->max_memory_mb);
    if (c->t.n_prunes) fprintf(f, "; pruned %llu", (unsigned long long)c->t.pruned);
    fprintf(f, ")");
    for (uint32_t k = 0; k < a->n_specials; k++)
        fprintf(f, "%s'%s' x %llu", k ? ", " : "; specials: ", a->specials[k],
                (unsigned long long)c->special_seen[k]);
    fprintf(f, "\nmerges: %u in %.2f s; vocabulary %u = 256 bytes + %u merges + %u specials\n",
            r->n_merges, r->t2 - r->t1, r->n_tokens, r->n_merges, a->n_specials);
    uint64_t in_bytes = r->piece_bytes + r->special_bytes;
    if (in_bytes)
        fprintf(f, "tokens per byte on the training input: %.4f (%llu tokens / %llu bytes%s)\n",
                (double)r->n_tok_out / (double)in_bytes, (unsigned long long)r->n_tok_out,
                (unsigned long long)in_bytes, c->t.n_prunes ? ", pruned pieces excluded" : "");
    fprintf(f, "wrote %s (loads back) in %.2f s; total %.2f s\n", a->out, r->t3 - r->t2,
            r->t3 - r->t0);
}

/* Warnings about what the run could not do as asked: pruning, ill-formed UTF-8, fewer merges. */
static void warn_shortfalls(const train_run *r, const train_args *a) {
    const counter *c = &r->c;
    if (c->t.n_prunes)
        tsr_warn("tokenizer train: the piece table reached --max-memory %lld MB %llu time(s): "
                 "dropped %llu distinct pieces (%llu occurrences) counted at most %llu times when "
                 "dropped; "
                 "merges are learned from the rest", (long long)a->max_memory_mb,
                 (unsigned long long)c->t.n_prunes, (unsigned long long)c->t.pruned,
                 (unsigned long long)c->t.pruned_count,
                 (unsigned long long)c->t.prune_max_threshold);
    if (c->replaced)
        tsr_warn("tokenizer train: %llu chunk(s) of the input held ill-formed UTF-8: counted as "
                 "U+FFFD, as the encoder reads it", (unsigned long long)c->replaced);
    if (r->n_merges < r->want)
        tsr_warn("tokenizer train: stopped after %u merges: no pair left that occurs at least "
                 "--min-frequency %lld times; vocabulary is %u tokens, not the %lld asked for "
                 "(more text or a lower --min-frequency gives more)", r->n_merges,
                 (long long)a->min_freq, r->n_tokens, (long long)a->vocab_size);
}

/* Phases 1-3 over the listed inputs, then the summary. Returns 0 or an exit status. */
static int train_tokenizer(train_run *r, const train_args *a, const path_list *inputs) {
    r->t0 = tsr_now();
    int rc = count_inputs(r, a, inputs);
    if (rc) return rc;
    r->t1 = tsr_now();
    r->want = (uint32_t)(a->vocab_size - 256 - a->n_specials);
    tsr_merge *merges = learn_merges(r, a->min_freq);
    r->t2 = tsr_now();
    rc = write_vocab(r, a, merges);
    free(merges);
    r->t3 = tsr_now();
    if (rc) return rc;
    if (!a->quiet) print_summary(stdout, r, a);
    fflush(stdout);
    warn_shortfalls(r, a);
    return 0;
}

int cmd_tokenizer_train(int argc, char **argv) {
    train_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) {
        free(a.specials);
        return rc < 0 ? 0 : rc;
    }
    path_list inputs = {0};
    rc = list_inputs(&inputs, argc - optind, argv + optind);
    if (!rc && inputs.n == 0) {
        tsr_error("tokenizer train: the inputs hold no files");
        rc = TSR_EXIT_DATA;
    }
    train_run r = {0};
    if (!rc) rc = train_tokenizer(&r, &a, &inputs);
    pt_free(&r.c.t);
    free(r.c.special_len);
    free(r.c.special_seen);
    free(r.c.special_next);
    for (size_t i = 0; i < inputs.n; i++) free(inputs.p[i]);
    free(inputs.p);
    free(a.specials);
    return rc;
}
