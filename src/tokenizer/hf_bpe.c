/* hf_bpe.c — encoding and decoding with a loaded tokenizer.json (byte-level BPE family).
 *
 * encode(text), as transformers.js's _encode_text does it:
 *   1. ill-formed UTF-8 -> U+FFFD per maximal subpart (node's reading of a file);
 *   2. added tokens split out: at each position the longest added token starting there, scanning
 *      left to right (DictionarySplitter); each is its id;
 *   3. each section between them: NFC when the normalizer says so (hf_nfc.c), the Split pre-tokenizer
 *      (hf_pretok.c), then per piece: with ignore_merges the piece's id when the whole piece is a
 *      vocab entry, else BPE on its bytes: repeatedly merge the adjacent pair of lowest rank, the
 *      leftmost first among equal ranks (transformers.js orders its queue by rank + start/length),
 *      until no adjacent pair has a merge: a scan per merge for short pieces, a heap of the pairs
 *      for longer ones (hf_word_merge, O(n log n); a 100 KB run of letters took 60 s). Pieces up
 *      to 48 bytes are cached per call.
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer/hf_nfc.h"
#include "tokenizer/hf_tok_internal.h"
#include "tokenizer/tokenizer_internal.h"

typedef hf_ids_out ids_out;

/* Per-call cache of short pieces -> their ids (no shared mutable state: encode stays thread-safe).
 * Keys and ids are copied into growing pools, so a piece may come from a freed NFC buffer. */
#define CACHE_KEY_MAX 48
#define CACHE_SLOTS (1u << 16) /* at most half filled; beyond that pieces are merged uncached */

typedef struct cache_slot {
    uint32_t key_off, ids_off; /* into key_pool / id_pool */
    uint8_t key_len, n_ids;    /* key_len 0: empty */
} cache_slot;

enum { SCAN_MAX = 64 }; /* pieces up to this many bytes merge by scanning: no heap to build */

typedef struct piece_ctx {
    const hf_tok *t;
    ids_out *out;
    uint32_t *sym; /* scratch: the symbols of one piece */
    size_t sym_cap;
    hf_word word; /* longer pieces: the heap's word, kept for the next one */
    cache_slot *slot; /* (CACHE_SLOTS), allocated on first use */
    uint32_t n_cached;
    uint8_t *key_pool;
    uint32_t *id_pool;
    size_t key_n, key_cap, id_n, id_cap;
} piece_ctx;

static uint32_t piece_hash(const uint8_t *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h ^ (h >> 15);
}

/* The cached slot of piece p (found: key_len != 0), or the empty slot to fill; NULL: no cache. */
static cache_slot *cache_find(piece_ctx *c, const uint8_t *p, size_t n) {
    if (n > CACHE_KEY_MAX) return NULL;
    if (!c->slot) c->slot = tsr_calloc(CACHE_SLOTS, sizeof *c->slot);
    for (uint32_t s = piece_hash(p, n) & (CACHE_SLOTS - 1);; s = (s + 1) & (CACHE_SLOTS - 1)) {
        cache_slot *e = &c->slot[s];
        if (e->key_len == 0 || (e->key_len == n && memcmp(c->key_pool + e->key_off, p, n) == 0)) return e;
    }
}

static void cache_put(piece_ctx *c, cache_slot *e, const uint8_t *p, size_t n, const uint32_t *ids,
                      size_t m) {
    if (c->n_cached >= CACHE_SLOTS / 2 || m > 255) return;
    if (c->key_n + n > c->key_cap) c->key_pool = tsr_realloc(c->key_pool, c->key_cap = 2 * (c->key_cap + n));
    if (c->id_n + m > c->id_cap) c->id_pool = tsr_realloc(c->id_pool, (c->id_cap = 2 * (c->id_cap + m)) * sizeof *ids);
    memcpy(c->key_pool + c->key_n, p, n);
    memcpy(c->id_pool + c->id_n, ids, m * sizeof *ids);
    *e = (cache_slot){(uint32_t)c->key_n, (uint32_t)c->id_n, (uint8_t)n, (uint8_t)m};
    c->key_n += n, c->id_n += m;
    c->n_cached++;
}

/* A short piece's merges: a scan for the pair of lowest rank (the leftmost) per merge, in s. */
static size_t merge_scan(const hf_tok *t, uint32_t *s, size_t m) {
    while (m > 1) {
        uint32_t best = HF_NONE, best_res = 0, res;
        size_t at = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            uint32_t r = hf_merge_find(t, s[i], s[i + 1], &res);
            if (r < best) best = r, best_res = res, at = i;
        }
        if (best == HF_NONE) break;
        s[at] = best_res;
        memmove(s + at + 1, s + at + 2, (m - at - 2) * sizeof *s);
        m--;
    }
    return m;
}

/* A long piece's merges with the heap; its ids into s (n entries), their count returned. */
static size_t merge_heap(piece_ctx *c, const uint8_t *p, size_t n, uint32_t *s) {
    hf_word *w = &c->word;
    hf_word_reserve(w, n);
    for (size_t i = 0; i < n; i++) w->id[i] = c->t->byte_tok[p[i]], w->off[i] = (uint32_t)i, w->len[i] = 1;
    hf_word_merge(c->t, w, n);
    size_t m = 0;
    for (int32_t i = 0; i >= 0; i = w->next[i]) s[m++] = w->id[i];
    return m;
}

/* BPE of one piece of n bytes: lowest rank first, leftmost among equal ranks. */
static void bpe_piece(void *vctx, const uint8_t *p, size_t n) {
    piece_ctx *c = vctx;
    const hf_tok *t = c->t;
    if (tok_piece_split(bpe_piece, vctx, p, n)) return; /* in bounded chunks */
    if (t->ignore_merges) {
        uint32_t id = hf_vocab_find(t, p, n);
        if (id != HF_NONE) {
            hf_ids_push(c->out, id);
            return;
        }
    }
    cache_slot *e = cache_find(c, p, n);
    if (e && e->key_len) {
        for (uint32_t k = 0; k < e->n_ids; k++) hf_ids_push(c->out, c->id_pool[e->ids_off + k]);
        return;
    }
    if (n > c->sym_cap) {
        c->sym_cap = 2 * n;
        c->sym = tsr_realloc(c->sym, c->sym_cap * sizeof *c->sym);
    }
    uint32_t *s = c->sym;
    size_t m = n;
    if (n > SCAN_MAX) {
        m = merge_heap(c, p, n, s);
    } else {
        for (size_t i = 0; i < n; i++) s[i] = t->byte_tok[p[i]];
        m = merge_scan(t, s, n);
    }
    for (size_t i = 0; i < m; i++) hf_ids_push(c->out, s[i]);
    if (e) cache_put(c, e, p, n, s, m);
}

/* SentencePiece-style BPE of one piece (hf_spm.c), through the same per-call cache. */
static void spm_piece(void *vctx, const uint8_t *p, size_t n) {
    piece_ctx *c = vctx;
    if (tok_piece_split(spm_piece, vctx, p, n)) return; /* in bounded chunks, as bpe_piece */
    cache_slot *e = cache_find(c, p, n);
    if (e && e->key_len) {
        for (uint32_t k = 0; k < e->n_ids; k++) hf_ids_push(c->out, c->id_pool[e->ids_off + k]);
        return;
    }
    size_t before = *c->out->n;
    hf_spm_piece(c->t, p, n, c->out);
    if (e && *c->out->n > before) /* a piece may give no id: no byte token and no unk_token */
        cache_put(c, e, p, n, *c->out->ids + before, *c->out->n - before);
}

/* One section between added tokens; where: HF_SECTION_* (hf_spm_normalize). */
static void encode_section(piece_ctx *c, const uint8_t *p, size_t n, int where) {
    if (n == 0) return;
    if (c->t->spm) {
        size_t sn;
        uint8_t *s = hf_spm_normalize(c->t, p, n, where, &sn);
        hf_spm_split(c->t, s, sn, spm_piece, c);
        free(s);
        return;
    }
    size_t nfc_n;
    uint8_t *nfc = c->t->nfc ? hf_nfc(p, n, &nfc_n) : NULL;
    if (nfc) p = nfc, n = nfc_n;
    hf_pretok_split(c->t->split, p, n, bpe_piece, c);
    free(nfc);
}

/* Longest added token starting at p (n bytes left), special ones only with allow_special: its
 * index, length in *len; or -1. */
static long added_at(const hf_tok *t, const uint8_t *p, size_t n, int allow_special, size_t *len) {
    long best = -1;
    *len = 0;
    for (uint32_t k = 0; k < t->n_added; k++) {
        uint32_t l = t->added_len[k];
        if (l > *len && l <= n && (allow_special || !t->added_special[k]) &&
            (uint8_t)t->added[k][0] == p[0] && memcmp(t->added[k], p, l) == 0)
            best = k, *len = l;
    }
    return best;
}

/* hf_tok_encode, the text's first section at start_where (HF_SECTION_FIRST, or _CONTINUED). */
static size_t encode_from(const hf_tok *t, const uint8_t *text, size_t n, int allow_special,
                          int start_where, uint32_t **ids, size_t *n_ids, size_t *cap) {
    size_t fixed_n, before = *n_ids;
    uint8_t *fixed = tsr_utf8_sanitize(text, n, &fixed_n);
    if (fixed) text = fixed, n = fixed_n;
    ids_out out = {ids, n_ids, cap};
    piece_ctx c = {.t = t, .out = &out};
    size_t start = 0;
    for (size_t i = 0; i < n && (allow_special ? t->n_added : t->n_added_plain);) {
        size_t len;
        long k = t->added_first[text[i]] ? added_at(t, text + i, n - i, allow_special, &len) : -1;
        if (k < 0) {
            i++;
            continue;
        }
        encode_section(&c, text + start, i - start, start == 0 ? start_where : HF_SECTION_LATER);
        hf_ids_push(&out, t->added_id[k]);
        i += len;
        start = i;
    }
    encode_section(&c, text + start, n - start, start == 0 ? start_where : HF_SECTION_LATER);
    free(c.sym);
    hf_word_free(&c.word);
    free(c.slot), free(c.key_pool), free(c.id_pool);
    free(fixed);
    return *n_ids - before;
}

size_t hf_tok_encode(const hf_tok *t, const uint8_t *text, size_t n, int allow_special,
                     uint32_t **ids, size_t *n_ids, size_t *cap) {
    return encode_from(t, text, n, allow_special, HF_SECTION_FIRST, ids, n_ids, cap);
}

size_t hf_tok_encode_continued(const hf_tok *t, const uint8_t *text, size_t n, uint32_t **ids,
                               size_t *n_ids, size_t *cap) {
    return encode_from(t, text, n, 0, HF_SECTION_CONTINUED, ids, n_ids, cap);
}

/* 1 when an added token that is not special (matched without allow_special) lies across byte q. */
static int added_across(const hf_tok *t, const uint8_t *text, size_t n, size_t q) {
    size_t len;
    for (size_t j = q > t->added_plain_max ? q - t->added_plain_max + 1 : 0; j < q; j++)
        if (t->added_first[text[j]] && added_at(t, text + j, n - j, 0, &len) >= 0 && j + len > q)
            return 1;
    return 0;
}

size_t hf_tok_stream_cut(const hf_tok *t, const uint8_t *text, size_t n) {
    size_t q;
    while ((q = t->spm ? hf_spm_stream_cut(t, text, n) : tokenizer_cut_before(text, n, '\n')) &&
           t->n_added_plain && added_across(t, text, n, q))
        n = q; /* an earlier place */
    return q;
}

size_t hf_tok_decode(const hf_tok *t, const uint32_t *ids, size_t n, uint8_t *out, size_t cap) {
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= t->n_ids || !t->assigned[ids[i]]) {
            tsr_error("hf tokenizer: token id %u at position %zu is not in the vocabulary (%u ids)",
                      ids[i], i, t->n_ids);
            return (size_t)-1;
        }
        if (t->spm) { /* Strip(" ", 1, 0) applies to the first token only */
            len += hf_spm_decode_id(t, ids[i], i == 0 && t->strip_first, len < cap ? out + len : NULL,
                                    len < cap ? cap - len : 0);
            continue;
        }
        size_t m = t->off[ids[i] + 1] - t->off[ids[i]];
        if (len < cap) memcpy(out + len, t->blob + t->off[ids[i]], m < cap - len ? m : cap - len);
        len += m;
    }
    return len;
}

const uint8_t *hf_tok_token_bytes(const hf_tok *t, uint32_t id, uint32_t *len) {
    if (id >= t->n_ids || !t->assigned[id]) return NULL;
    *len = (uint32_t)(t->off[id + 1] - t->off[id]);
    return t->blob + t->off[id];
}
