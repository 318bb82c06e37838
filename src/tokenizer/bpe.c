/* bpe.c — the tokenizer object: building it, encoding (special tokens, pre-tokenisation, merges by
 * rank) and decoding.
 *
 * Merging a piece follows the reference encoder (npm gpt-3-encoder, the same rounds as OpenAI's
 * encoder.py): map its bytes to byte tokens; each round finds the adjacent pair of lowest rank and
 * merges every occurrence of that pair, left to right; stop when no pair has a rank. Pieces seen
 * before in one tokenizer_encode call come from a per-call cache (no shared mutable state, so
 * several threads may encode at once). Opening one by its spec (gpt2, a directory, a file) is
 * tokenizer_open.c's: the loaders build on this file, this file knows none of them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer/hf_tok.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

#define NO_RANK UINT32_MAX
#define PAIR_EMPTY UINT64_MAX
#define CACHE_MAX_ENTRIES (1u << 20) /* per call; beyond this pieces are merged without caching */
#ifndef BPE_HEAP_MIN
#define BPE_HEAP_MIN 96 /* pieces at least this long merge with a heap (bpe_merge_heap) */
#endif

struct tsr_tokenizer {
    uint32_t n_tokens;
    uint8_t *blob;     /* every token's bytes, back to back */
    uint64_t *off;     /* (n_tokens + 1) offsets into blob */
    uint32_t byte_tok[256];
    uint32_t n_merges;
    tsr_merge *merges; /* (n_merges) rank order */
    /* (left, right) -> rank, result: open addressing, power-of-two capacity */
    uint64_t *pair_key;
    uint32_t *pair_rank, *pair_result;
    uint64_t pair_mask;
    uint32_t n_specials;
    char **specials;
    uint32_t *special_len, *special_ids;
    hf_tok *hf; /* non-NULL: a Hugging Face tokenizer.json; every call goes to hf_tok_* instead */
};

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) tsr_die(TSR_EXIT_INTERNAL, "out of memory: realloc(%zu bytes) in %s", n, __FILE__);
    return q;
}

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* ================================ pair map ================================ */

static uint64_t pair_slot(const tsr_tokenizer *t, uint64_t key) {
    uint64_t s = mix64(key) & t->pair_mask;
    while (t->pair_key[s] != PAIR_EMPTY && t->pair_key[s] != key) s = (s + 1) & t->pair_mask;
    return s;
}

static inline uint32_t pair_lookup(const tsr_tokenizer *t, uint32_t l, uint32_t r, uint32_t *res) {
    uint64_t key = (uint64_t)l << 32 | r;
    uint64_t s = mix64(key) & t->pair_mask;
    for (;;) {
        uint64_t k = t->pair_key[s];
        if (k == key) {
            *res = t->pair_result[s];
            return t->pair_rank[s];
        }
        if (k == PAIR_EMPTY) return NO_RANK;
        s = (s + 1) & t->pair_mask;
    }
}

/* Sets (l, r) -> rank, result, replacing an existing entry. The map holds at most 2x merges. */
void tsr_tokenizer_set_pair(tsr_tokenizer *t, uint32_t l, uint32_t r, uint32_t rank, uint32_t res) {
    uint64_t key = (uint64_t)l << 32 | r;
    uint64_t s = pair_slot(t, key);
    t->pair_key[s] = key;
    t->pair_rank[s] = rank;
    t->pair_result[s] = res;
}

/* ================================ build / free ================================ */

void tokenizer_free(tsr_tokenizer *t) {
    if (!t) return;
    hf_tok_free(t->hf);
    tsr_free_all(t->blob, t->off, t->merges, t->pair_key, t->pair_rank, t->pair_result);
    for (uint32_t k = 0; k < t->n_specials; k++) free(t->specials[k]);
    free(t->specials);
    free(t->special_len);
    free(t->special_ids);
    free(t);
}

static inline uint32_t tok_len(const tsr_tokenizer *t, uint32_t id) {
    return (uint32_t)(t->off[id + 1] - t->off[id]);
}

/* The tokens' bytes into t->blob / t->off, and the token of each single byte (all 256 needed). */
static int build_vocab(tsr_tokenizer *t, uint32_t n_tokens, const uint8_t *const *tokens,
                       const uint32_t *len) {
    t->n_tokens = n_tokens;
    t->off = tsr_malloc(((size_t)n_tokens + 1) * sizeof *t->off);
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_tokens; i++) {
        t->off[i] = total;
        total += len[i];
    }
    t->off[n_tokens] = total;
    t->blob = tsr_malloc(total ? total : 1);
    for (uint32_t i = 0; i < n_tokens; i++) memcpy(t->blob + t->off[i], tokens[i], len[i]);
    for (int b = 0; b < 256; b++) t->byte_tok[b] = UINT32_MAX;
    for (uint32_t i = 0; i < n_tokens; i++)
        if (len[i] == 1 && t->byte_tok[tokens[i][0]] == UINT32_MAX) t->byte_tok[tokens[i][0]] = i;
    for (int b = 0; b < 256; b++)
        if (t->byte_tok[b] == UINT32_MAX) {
            tsr_error("tokenizer: no token holds the single byte 0x%02x; a byte-level vocabulary "
                      "needs all 256", b);
            return TSR_EXIT_DATA;
        }
    return 0;
}

/* The merges in rank order, and the pair table (left, right) -> rank, result; each merge's ids in
 * range, its result the left's bytes then the right's, no pair twice. */
static int build_merges(tsr_tokenizer *t, const uint8_t *const *tokens, const uint32_t *len,
                        uint32_t n_merges, const tsr_merge *merges) {
    uint32_t n_tokens = t->n_tokens;
    t->n_merges = n_merges;
    t->merges = tsr_malloc((n_merges ? n_merges : 1) * sizeof *t->merges);
    if (n_merges) memcpy(t->merges, merges, n_merges * sizeof *merges);
    uint64_t cap = 16;
    while (cap < 4ull * n_merges + 16) cap <<= 1; /* load <= 1/2 even with as many aliases (gpt2_load.c) */
    t->pair_mask = cap - 1;
    t->pair_key = tsr_malloc(cap * sizeof *t->pair_key);
    t->pair_rank = tsr_malloc(cap * sizeof *t->pair_rank);
    t->pair_result = tsr_malloc(cap * sizeof *t->pair_result);
    memset(t->pair_key, 0xff, cap * sizeof *t->pair_key);
    for (uint32_t r = 0; r < n_merges; r++) {
        const tsr_merge *m = &merges[r];
        if (m->left >= n_tokens || m->right >= n_tokens || m->result >= n_tokens) {
            tsr_error("tokenizer: merge %u (%u %u -> %u): id out of range (vocabulary of %u)", r,
                      m->left, m->right, m->result, n_tokens);
            return TSR_EXIT_DATA;
        }
        uint32_t ll = len[m->left], lr = len[m->right];
        if (len[m->result] != ll + lr || memcmp(tokens[m->result], tokens[m->left], ll) != 0 ||
            memcmp(tokens[m->result] + ll, tokens[m->right], lr) != 0) {
            tsr_error("tokenizer: merge %u (%u %u -> %u): the result's bytes are not the left's "
                      "followed by the right's", r, m->left, m->right, m->result);
            return TSR_EXIT_DATA;
        }
        uint32_t dummy;
        uint32_t prev = pair_lookup(t, m->left, m->right, &dummy);
        if (prev != NO_RANK) {
            tsr_error("tokenizer: merge %u (%u %u) repeats merge %u", r, m->left, m->right, prev);
            return TSR_EXIT_DATA;
        }
        tsr_tokenizer_set_pair(t, m->left, m->right, r, m->result);
    }
    return 0;
}

/* The special tokens: each non-empty and the vocabulary entry of its id. */
static int build_specials(tsr_tokenizer *t, const uint8_t *const *tokens, const uint32_t *len,
                          uint32_t n_specials, const char *const *specials,
                          const uint32_t *special_ids) {
    t->n_specials = n_specials;
    t->specials = tsr_calloc(n_specials ? n_specials : 1, sizeof *t->specials);
    t->special_len = tsr_malloc((n_specials ? n_specials : 1) * sizeof *t->special_len);
    t->special_ids = tsr_malloc((n_specials ? n_specials : 1) * sizeof *t->special_ids);
    for (uint32_t k = 0; k < n_specials; k++) {
        size_t sl = strlen(specials[k]);
        uint32_t id = special_ids[k];
        if (sl == 0 || id >= t->n_tokens || len[id] != sl || memcmp(tokens[id], specials[k], sl) != 0) {
            tsr_error("tokenizer: special token '%s' (id %u) is empty, out of range or not the "
                      "vocabulary entry of its id", specials[k], id);
            return TSR_EXIT_DATA;
        }
        t->specials[k] = tsr_malloc(sl + 1);
        memcpy(t->specials[k], specials[k], sl + 1);
        t->special_len[k] = (uint32_t)sl;
        t->special_ids[k] = id;
    }
    return 0;
}

int tokenizer_build(tsr_tokenizer **out, uint32_t n_tokens, const uint8_t *const *tokens,
                    const uint32_t *len, uint32_t n_merges, const tsr_merge *merges,
                    uint32_t n_specials, const char *const *specials, const uint32_t *special_ids) {
    *out = NULL;
    if (n_tokens < 256) {
        tsr_error("tokenizer: %u tokens; a byte-level vocabulary needs at least the 256 single bytes",
                  n_tokens);
        return TSR_EXIT_DATA;
    }
    tsr_tokenizer *t = tsr_calloc(1, sizeof *t);
    if (build_vocab(t, n_tokens, tokens, len) || build_merges(t, tokens, len, n_merges, merges) ||
        build_specials(t, tokens, len, n_specials, specials, special_ids)) {
        tokenizer_free(t);
        return TSR_EXIT_DATA;
    }
    *out = t;
    return 0;
}

/* ================================ accessors ================================ */

uint32_t tokenizer_vocab_size(const tsr_tokenizer *t) {
    return t->hf ? hf_tok_vocab_size(t->hf) : t->n_tokens;
}

int tokenizer_is_hf(const tsr_tokenizer *t) { return t->hf != NULL; }

uint32_t tokenizer_special_id(const tsr_tokenizer *t, const char *name) {
    if (t->hf) return hf_tok_added_id(t->hf, name);
    for (uint32_t k = 0; k < t->n_specials; k++)
        if (strcmp(t->specials[k], name) == 0) return t->special_ids[k];
    return UINT32_MAX;
}

const char *tokenizer_special_of(const tsr_tokenizer *t, uint32_t id) {
    if (t->hf) return hf_tok_special_of(t->hf, id);
    for (uint32_t k = 0; k < t->n_specials; k++)
        if (t->special_ids[k] == id) return t->specials[k];
    return NULL;
}

const char *tokenizer_id_label(const tsr_tokenizer *t, uint32_t id, char *buf, size_t cap) {
    uint32_t len = 0;
    const char *name = t ? tokenizer_special_of(t, id) : NULL;
    const uint8_t *b = t && !name ? tokenizer_token_bytes(t, id, &len) : NULL;
    buf[0] = '\0';
    if (name) snprintf(buf, cap, " (%.*s)", (int)(cap - 4), name);
    if (!b) return buf;
    size_t n = len < cap - 6 ? len : cap - 6, o = 0;
    o += (size_t)snprintf(buf, cap, " ('");
    for (size_t i = 0; i < n; i++) buf[o++] = b[i] < 0x20 || b[i] == 0x7f ? '?' : (char)b[i];
    snprintf(buf + o, cap - o, "')");
    return buf;
}

const uint8_t *tokenizer_token_bytes(const tsr_tokenizer *t, uint32_t id, uint32_t *len) {
    if (t->hf) return hf_tok_token_bytes(t->hf, id, len);
    if (id >= t->n_tokens) return NULL;
    *len = tok_len(t, id);
    return t->blob + t->off[id];
}

size_t tokenizer_bytes_bound(const tsr_tokenizer *t, size_t tokens) {
    uint32_t most = 4, len;
    for (uint32_t id = 0, n = tokenizer_vocab_size(t); id < n; id++)
        if (tokenizer_token_bytes(t, id, &len) && len > most) most = len;
    return tokens > SIZE_MAX / (2 * (size_t)most) ? SIZE_MAX : tokens * 2 * most;
}

uint32_t tokenizer_n_merges(const tsr_tokenizer *t) { return t->n_merges; }
const tsr_merge *tokenizer_merges(const tsr_tokenizer *t) { return t->merges; }
uint32_t tokenizer_n_specials(const tsr_tokenizer *t) { return t->n_specials; }
const char *tokenizer_special_name(const tsr_tokenizer *t, uint32_t k) { return t->specials[k]; }
uint32_t tokenizer_special_id_at(const tsr_tokenizer *t, uint32_t k) { return t->special_ids[k]; }

/* ================================ decode ================================ */

size_t tokenizer_decode(const tsr_tokenizer *t, const uint32_t *ids, size_t n, uint8_t *out,
                        size_t cap) {
    if (t->hf) return hf_tok_decode(t->hf, ids, n, out, cap);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->n_tokens) {
            tsr_error("decode: token id %u at position %zu is out of range (vocabulary of %u)",
                      ids[i], i, t->n_tokens);
            return (size_t)-1;
        }
        uint32_t l = tok_len(t, ids[i]);
        if (o + l <= cap) memcpy(out + o, t->blob + t->off[ids[i]], l);
        else if (o < cap) memcpy(out + o, t->blob + t->off[ids[i]], cap - o);
        o += l;
    }
    return o;
}

/* ================================ encode ================================ */

typedef struct cache_entry {
    uint64_t hash;   /* 0 = empty */
    size_t piece;    /* offset of the piece's bytes in the byte arena */
    size_t ids;      /* offset of its ids in the id arena */
    uint32_t len, n; /* piece length, number of ids */
} cache_entry;

typedef struct enc_ctx {
    const tsr_tokenizer *t;
    uint32_t **ids;
    size_t *n_ids, *cap;
    uint32_t *work;  /* scratch for one piece */
    size_t work_cap;
    cache_entry *cache;
    size_t cache_mask, cache_n;
    uint8_t *bytes;  /* arena of cached pieces */
    size_t bytes_n, bytes_cap;
    uint32_t *cids;  /* arena of cached ids */
    size_t cids_n, cids_cap;
} enc_ctx;

static inline void out_reserve(enc_ctx *c, size_t extra) {
    if (*c->n_ids + extra <= *c->cap) return;
    size_t nc = *c->cap ? *c->cap : 1024;
    while (nc < *c->n_ids + extra) nc *= 2;
    *c->ids = xrealloc(*c->ids, nc * sizeof **c->ids);
    *c->cap = nc;
}

/* Merges one piece of len bytes into w (len entries of scratch); returns the number of ids. */
static size_t bpe_merge(const tsr_tokenizer *t, const uint8_t *p, size_t len, uint32_t *w) {
    for (size_t i = 0; i < len; i++) w[i] = t->byte_tok[p[i]];
    size_t n = len;
    while (n > 1) {
        /* the pair of lowest rank; among equal ranks the last one, as the reference picks */
        uint32_t best = NO_RANK, bl = 0, br = 0, bres = 0, res;
        for (size_t i = 0; i + 1 < n; i++) {
            uint32_t rk = pair_lookup(t, w[i], w[i + 1], &res);
            if (rk <= best && rk != NO_RANK) best = rk, bl = w[i], br = w[i + 1], bres = res;
        }
        if (best == NO_RANK) break;
        size_t j = 0;
        for (size_t i = 0; i < n; j++) {
            if (i + 1 < n && w[i] == bl && w[i + 1] == br) {
                w[j] = bres;
                i += 2;
            } else {
                w[j] = w[i++];
            }
        }
        n = j;
    }
    return n;
}

/* ---- long pieces: the same rounds with a heap, O(n log n) instead of O(n x rounds) ----
 * Symbols form a linked list over the piece's positions; the heap holds (rank, position) of every
 * adjacent pair, smallest first, an entry going stale when its pair changes (checked on pop: token
 * ids only grow, so a pair whose current rank is still r is the one pushed). One round pops every
 * entry of the lowest rank r, takes the pair of the rightmost (as bpe_merge), merges its
 * occurrences left to right, and pushes the pairs the merges made for the following rounds. */
typedef struct heap_ent {
    uint32_t rank, pos;
} heap_ent;

static inline int he_less(heap_ent a, heap_ent b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(heap_ent *h, size_t *n, heap_ent e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!he_less(e, h[up])) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = e;
}

static heap_ent heap_pop(heap_ent *h, size_t *n) {
    heap_ent top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && he_less(h[c + 1], h[c])) c++;
        if (!he_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* w: (len) ids out; scratch: (8 len) uint32 words: next, prev, and a heap of up to 3 len entries.
 * Returns the number of ids. */
static size_t bpe_merge_heap(const tsr_tokenizer *t, const uint8_t *p, size_t len, uint32_t *w,
                             uint32_t *scratch) {
    const uint32_t END = UINT32_MAX, DEAD = UINT32_MAX;
    uint32_t *nxt = scratch, *prv = scratch + len;
    heap_ent *heap = (heap_ent *)(scratch + 2 * len); /* live pairs + 2 per merge <= 3 len */
    heap_ent *batch = malloc(3 * len * sizeof *batch);
    heap_ent *keep = malloc(3 * len * sizeof *keep);
    if (!batch || !keep) tsr_die(TSR_EXIT_INTERNAL, "out of memory merging a %zu-byte piece", len);
    size_t nh = 0, res;
    uint32_t r32;
    for (size_t i = 0; i < len; i++) {
        w[i] = t->byte_tok[p[i]];
        nxt[i] = i + 1 < len ? (uint32_t)(i + 1) : END;
        prv[i] = i ? (uint32_t)(i - 1) : END;
    }
    for (size_t i = 0; i + 1 < len; i++) {
        uint32_t rk = pair_lookup(t, w[i], w[i + 1], &r32);
        if (rk != NO_RANK) heap_push(heap, &nh, (heap_ent){rk, (uint32_t)i});
    }
    while (nh) {
        uint32_t r = heap[0].rank;
        size_t nb = 0, nk = 0;
        while (nh && heap[0].rank == r) {
            heap_ent e = heap_pop(heap, &nh);
            uint32_t q = nxt[e.pos];
            if (w[e.pos] == DEAD || q == END || (nb && batch[nb - 1].pos == e.pos)) continue;
            if (pair_lookup(t, w[e.pos], w[q], &r32) != r) continue; /* stale */
            batch[nb++] = e;
        }
        if (!nb) continue;
        uint32_t bl = w[batch[nb - 1].pos], br = w[nxt[batch[nb - 1].pos]], bres = 0;
        pair_lookup(t, bl, br, &bres);
        for (size_t k = 0; k < nb; k++) {
            uint32_t a = batch[k].pos, b = nxt[a];
            if (w[a] == DEAD || b == END) continue;
            if (w[a] != bl || w[b] != br) {
                if (pair_lookup(t, w[a], w[b], &r32) == r) keep[nk++] = batch[k]; /* another pair of rank r */
                continue;
            }
            w[a] = bres;
            w[b] = DEAD;
            nxt[a] = nxt[b];
            if (nxt[b] != END) prv[nxt[b]] = a;
            uint32_t rk;
            if (prv[a] != END && (rk = pair_lookup(t, w[prv[a]], w[a], &r32)) != NO_RANK)
                heap_push(heap, &nh, (heap_ent){rk, prv[a]});
            if (nxt[a] != END && (rk = pair_lookup(t, w[a], w[nxt[a]], &r32)) != NO_RANK)
                heap_push(heap, &nh, (heap_ent){rk, a});
        }
        for (size_t k = 0; k < nk; k++) heap_push(heap, &nh, keep[k]);
    }
    free(batch);
    free(keep);
    res = 0;
    for (uint32_t i = 0; i != END; i = nxt[i]) w[res++] = w[i];
    return res;
}

static inline uint64_t piece_hash(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        h = mix64(h ^ v);
    }
    uint64_t v = 0;
    memcpy(&v, p + i, n - i);
    h = mix64(h ^ v ^ ((uint64_t)(n - i) << 59));
    return h ? h : 1;
}

static void cache_grow(enc_ctx *c) {
    size_t ncap = c->cache ? 2 * (c->cache_mask + 1) : 4096;
    cache_entry *nt = tsr_calloc(ncap, sizeof *nt);
    if (c->cache)
        for (size_t s = 0; s <= c->cache_mask; s++) {
            if (!c->cache[s].hash) continue;
            size_t d = c->cache[s].hash & (ncap - 1);
            while (nt[d].hash) d = (d + 1) & (ncap - 1);
            nt[d] = c->cache[s];
        }
    free(c->cache);
    c->cache = nt;
    c->cache_mask = ncap - 1;
}

static void encode_piece(void *ctx, const uint8_t *p, size_t len) {
    enc_ctx *c = ctx;
    const tsr_tokenizer *t = c->t;
    if (tok_piece_split(encode_piece, ctx, p, len)) return; /* in bounded chunks */
    if (len == 1) {
        out_reserve(c, 1);
        (*c->ids)[(*c->n_ids)++] = t->byte_tok[p[0]];
        return;
    }
    uint64_t h = piece_hash(p, len);
    size_t s = 0;
    if (c->cache) {
        s = h & c->cache_mask;
        for (; c->cache[s].hash; s = (s + 1) & c->cache_mask) {
            cache_entry *e = &c->cache[s];
            if (e->hash == h && e->len == len && memcmp(c->bytes + e->piece, p, len) == 0) {
                out_reserve(c, e->n);
                memcpy(*c->ids + *c->n_ids, c->cids + e->ids, e->n * sizeof(uint32_t));
                *c->n_ids += e->n;
                return;
            }
        }
    }
    if (9 * len > c->work_cap) { /* ids (len) + the heap merge's scratch (8 len) */
        c->work_cap = 18 * len;
        c->work = xrealloc(c->work, c->work_cap * sizeof *c->work);
    }
    size_t n = len >= BPE_HEAP_MIN ? bpe_merge_heap(t, p, len, c->work, c->work + len)
                                   : bpe_merge(t, p, len, c->work);
    out_reserve(c, n);
    memcpy(*c->ids + *c->n_ids, c->work, n * sizeof(uint32_t));
    *c->n_ids += n;
    if (!c->cache || c->cache_n >= CACHE_MAX_ENTRIES || len > 256) return;
    if (2 * (c->cache_n + 1) > c->cache_mask + 1) {
        cache_grow(c);
        for (s = h & c->cache_mask; c->cache[s].hash; s = (s + 1) & c->cache_mask) {}
    }
    if (c->bytes_n + len > c->bytes_cap) {
        c->bytes_cap = 2 * (c->bytes_n + len);
        c->bytes = xrealloc(c->bytes, c->bytes_cap);
    }
    if (c->cids_n + n > c->cids_cap) {
        c->cids_cap = 2 * (c->cids_n + n);
        c->cids = xrealloc(c->cids, c->cids_cap * sizeof *c->cids);
    }
    memcpy(c->bytes + c->bytes_n, p, len);
    memcpy(c->cids + c->cids_n, c->work, n * sizeof(uint32_t));
    c->cache[s] = (cache_entry){h, c->bytes_n, c->cids_n, (uint32_t)len, (uint32_t)n};
    c->bytes_n += len;
    c->cids_n += n;
    c->cache_n++;
}

/* Position of the first special token at or after `from` (n when none); *which gets its index.
 * next[k] caches special k's next occurrence (SIZE_MAX: not searched yet). At one position the
 * longest special wins. */
static size_t next_special(const tsr_tokenizer *t, const uint8_t *s, size_t n, size_t from,
                           size_t *next, uint32_t *which) {
    size_t best = n;
    for (uint32_t k = 0; k < t->n_specials; k++) {
        if (next[k] == SIZE_MAX || next[k] < from) {
            const uint8_t *f = memmem(s + from, n - from, t->specials[k], t->special_len[k]);
            next[k] = f ? (size_t)(f - s) : n;
        }
        if (next[k] < best || (next[k] == best && best < n && t->special_len[k] > t->special_len[*which]))
            best = next[k], *which = k;
    }
    return best;
}

size_t tokenizer_encode(const tsr_tokenizer *t, const uint8_t *text, size_t n, int allow_special,
                        uint32_t **ids, size_t *n_ids, size_t *cap) {
    if (t->hf) return hf_tok_encode(t->hf, text, n, allow_special, ids, n_ids, cap);
    size_t start = *n_ids, clean_n = 0;
    uint8_t *clean = tsr_utf8_sanitize(text, n, &clean_n);
    if (clean) text = clean, n = clean_n;
    enc_ctx c = {.t = t, .ids = ids, .n_ids = n_ids, .cap = cap};
    if (n >= 4096) cache_grow(&c); /* a cache pays off on more than a few pieces */
    if (allow_special && t->n_specials) {
        size_t *next = tsr_malloc(t->n_specials * sizeof *next);
        for (uint32_t k = 0; k < t->n_specials; k++) next[k] = SIZE_MAX;
        size_t pos = 0;
        while (pos < n) {
            uint32_t which = 0;
            size_t at = next_special(t, text, n, pos, next, &which);
            tokenizer_pretokenize(text + pos, at - pos, encode_piece, &c);
            if (at == n) break;
            out_reserve(&c, 1);
            (*ids)[(*n_ids)++] = t->special_ids[which];
            pos = at + t->special_len[which];
        }
        free(next);
    } else {
        tokenizer_pretokenize(text, n, encode_piece, &c);
    }
    tsr_free_all(c.work, c.cache, c.bytes, c.cids, clean);
    return *n_ids - start;
}

size_t tokenizer_encode_continued(const tsr_tokenizer *t, const uint8_t *text, size_t n,
                                  uint32_t **ids, size_t *n_ids, size_t *cap) {
    if (t->hf) return hf_tok_encode_continued(t->hf, text, n, ids, n_ids, cap);
    return tokenizer_encode(t, text, n, 0, ids, n_ids, cap);
}

size_t tokenizer_stream_cut(const tsr_tokenizer *t, const uint8_t *text, size_t n) {
    return t->hf ? hf_tok_stream_cut(t->hf, text, n) : tokenizer_cut_before(text, n, '\n');
}

/* ================================ a tokenizer.json ================================ */

int tokenizer_wrap_hf(tsr_tokenizer **out, hf_tok *h) {
    tsr_tokenizer *t = tsr_calloc(1, sizeof *t);
    t->hf = h;
    *out = t;
    return 0;
}
