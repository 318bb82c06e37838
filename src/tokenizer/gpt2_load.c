/* gpt2_load.c — GPT-2's tokenizer files: encoder.json (token string -> id) and vocab.bpe (merges).
 *
 * encoder.json is one flat JSON object of string -> integer. Its strings spell bytes through GPT-2's
 * bytes_to_unicode table: the 188 printable bytes ! .. ~, ¡ .. ¬, ® .. ÿ stand for themselves
 * (as code points), the other 68 bytes, in increasing order, for U+0100, U+0101, ... . vocab.bpe is
 * a version comment line then one "left right" merge per line in rank order; the reference keeps
 * lines[1 : -1] of the file split at '\n' (so a last line without '\n' is dropped, as here).
 * "<|endoftext|>" (id 50256) is the special token.
 *
 * The reference (npm gpt-3-encoder) looks a pair's rank up under the key left + "," + right, so a
 * pair whose key equals a merge's key (e.g. '",' + '"' and '"' + ',"') gets that merge's rank: we
 * add these aliases to the pair map so that encoding stays token-for-token identical to it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fsutil.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

#define SPECIAL_EOT "<|endoftext|>"

/* code point (< 324) of bytes_to_unicode -> byte, or -1 */
static void unicode_to_byte(int16_t map[324]) {
    for (int i = 0; i < 324; i++) map[i] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        if (printable) map[b] = (int16_t)b;
        else map[256 + n++] = (int16_t)b;
    }
}

/* A byte string -> id map (open addressing) for the vocabulary. */
typedef struct str_map {
    uint32_t *slot; /* id + 1; 0 = empty */
    size_t mask;
    const uint8_t *const *tok;
    const uint32_t *len;
} str_map;

static uint64_t str_hash(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint32_t map_find(const str_map *m, const uint8_t *p, size_t n) {
    for (size_t s = str_hash(p, n) & m->mask; m->slot[s]; s = (s + 1) & m->mask) {
        uint32_t id = m->slot[s] - 1;
        if (m->len[id] == n && memcmp(m->tok[id], p, n) == 0) return id;
    }
    return UINT32_MAX;
}

/* Parsed encoder.json: tokens by id (bytes), plus whether "<|endoftext|>" is there. */
typedef struct vocab {
    uint32_t n;
    uint8_t **tok;
    uint32_t *len;
} vocab;

static void vocab_free(vocab *v) {
    if (v->tok)
        for (uint32_t i = 0; i < v->n; i++) free(v->tok[i]);
    free(v->tok);
    free(v->len);
}

static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static int hex4(const char *p, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* Parses a JSON string at p (at its '"') into code points cps (cap entries); returns the char after
 * the closing quote, or NULL with *why set. Raw UTF-8 inside the string is decoded too. */
static const char *parse_string(const char *p, uint32_t *cps, size_t cap, size_t *ncp, const char **why) {
    size_t n = 0;
    if (*p++ != '"') return *why = "expected a string", NULL;
    for (;;) {
        uint32_t cp;
        unsigned char c = (unsigned char)*p;
        if (c == '\0') return *why = "unterminated string", NULL;
        if (c == '"') {
            p++;
            break;
        }
        if (c < 0x20) return *why = "control character in a string", NULL;
        if (c == '\\') {
            char e = p[1];
            p += 2;
            switch (e) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = 8; break;
            case 'f': cp = 12; break;
            case 'n': cp = 10; break;
            case 'r': cp = 13; break;
            case 't': cp = 9; break;
            case 'u':
                if (hex4(p, &cp)) return *why = "bad \\u escape", NULL;
                p += 4;
                if (cp >= 0xD800 && cp <= 0xDBFF && p[0] == '\\' && p[1] == 'u') {
                    uint32_t lo;
                    if (hex4(p + 2, &lo)) return *why = "bad \\u escape", NULL;
                    if (lo >= 0xDC00 && lo <= 0xDFFF) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        p += 6;
                    }
                }
                break;
            default: return *why = "unknown escape", NULL;
            }
        } else if (c < 0x80) {
            cp = c;
            p++;
        } else {
            int k = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
            if (k < 0) return *why = "invalid UTF-8", NULL;
            cp = c & (0x3F >> k);
            p++;
            for (int i = 0; i < k; i++, p++) {
                if (((unsigned char)*p & 0xC0) != 0x80) return *why = "invalid UTF-8", NULL;
                cp = cp << 6 | ((unsigned char)*p & 0x3F);
            }
        }
        if (n == cap) return *why = "string too long (over 4096 characters)", NULL;
        cps[n++] = cp;
    }
    *ncp = n;
    return p;
}

/* One encoder.json entry as read, before the table is sized. */
typedef struct enc_entry {
    uint32_t id, len;
    uint8_t *bytes;
} enc_entry;

/* Moves the entries into v, indexed by id. The table is sized by the entry count, never by the
 * largest id: ids must be exactly 0..n-1, so a small file cannot ask for a huge table (an id of
 * 2,000,000,000 in a 3 KB file is refused by name, not allocated). Frees every entry's bytes on
 * failure. */
static int place_entries(const char *path, enc_entry *e, size_t n, vocab *v) {
    for (size_t k = 0; k < n; k++)
        if (e[k].id >= n) {
            tsr_error("%s: token id %u is out of range: the file has %zu entries, so the ids must "
                      "be 0..%zu, one per entry", path, e[k].id, n, n - 1);
            for (size_t j = 0; j < n; j++) free(e[j].bytes);
            return TSR_EXIT_DATA;
        }
    v->tok = tsr_calloc(n, sizeof *v->tok);
    v->len = tsr_calloc(n, sizeof *v->len);
    v->n = (uint32_t)n;
    for (size_t k = 0; k < n; k++) {
        if (v->tok[e[k].id]) {
            tsr_error("%s: token id %u appears twice", path, e[k].id);
            for (size_t j = k; j < n; j++) free(e[j].bytes);
            return TSR_EXIT_DATA;
        }
        v->tok[e[k].id] = e[k].bytes;
        v->len[e[k].id] = e[k].len;
    }
    return 0; /* n entries, n distinct ids below n: every id 0..n-1 is there */
}

/* One `"token": id` of encoder.json at *pp: the token's bytes (each code point through
 * bytes_to_unicode reversed) into e, malloc'd; *is_eot when it is <|endoftext|>. Returns 0 with *pp
 * after the id, or -1 with *pp at the fault and *why saying what it is. */
static int parse_entry(const char **pp, const int16_t *u2b, enc_entry *e, int *is_eot,
                       const char **why) {
    uint32_t cps[4096];
    uint8_t bytes[4096];
    size_t ncp;
    const char *at = skip_ws(*pp), *p = parse_string(at, cps, 4096, &ncp, why);
    if (!p) {
        *pp = at; /* the error names where the string starts */
        return -1;
    }
    p = skip_ws(p);
    if (*p++ != ':') {
        *pp = p;
        *why = "expected ':'";
        return -1;
    }
    p = skip_ws(p);
    char *end;
    errno = 0;
    long long id = strtoll(p, &end, 10);
    if (end == p || errno || id < 0 || id >= (1ll << 31) || *end == '.' || *end == 'e' || *end == 'E') {
        *pp = p;
        *why = "expected a token id (an integer in [0, 2^31))";
        return -1;
    }
    *pp = end;
    *is_eot = 0;
    for (size_t i = 0; i < ncp; i++) {
        if (cps[i] >= 324 || u2b[cps[i]] < 0) {
            /* only the special token may hold other characters (it holds none in GPT-2) */
            *why = "a token holds a character outside GPT-2's byte-to-unicode table";
            return -1;
        }
        bytes[i] = (uint8_t)u2b[cps[i]];
    }
    *is_eot = ncp == strlen(SPECIAL_EOT) && memcmp(bytes, SPECIAL_EOT, ncp) == 0;
    e->id = (uint32_t)id;
    e->len = (uint32_t)ncp;
    e->bytes = tsr_malloc(ncp ? ncp : 1);
    memcpy(e->bytes, bytes, ncp);
    return 0;
}

static int parse_encoder(const char *path, const char *buf, vocab *v, int *has_eot) {
    int16_t u2b[324];
    unicode_to_byte(u2b);
    const char *why = NULL, *p = skip_ws(buf);
    enc_entry *ents = NULL;
    size_t n_ents = 0, cap = 0;
    *has_eot = 0;
    memset(v, 0, sizeof *v);
    if (*p++ != '{') {
        why = "expected '{' (a JSON object of token -> id)";
        goto bad;
    }
    p = skip_ws(p);
    if (*p == '}') {
        why = "empty object";
        goto bad;
    }
    for (;;) {
        if (n_ents == cap) { /* grows with the entries read: bounded by the file's size */
            cap = cap ? 2 * cap : 1024;
            ents = tsr_realloc(ents, cap * sizeof *ents);
        }
        int is_eot;
        if (parse_entry(&p, u2b, &ents[n_ents], &is_eot, &why)) goto bad;
        n_ents++;
        if (is_eot) *has_eot = 1;
        p = skip_ws(p);
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p == '}') break;
        why = "expected ',' or '}'";
        goto bad;
    }
    if (*skip_ws(p + 1) != '\0') {
        why = "trailing characters after the object";
        goto bad;
    }
    int rc = place_entries(path, ents, n_ents, v);
    free(ents);
    return rc;
bad:
    tsr_error("%s: malformed encoder.json at byte %zu: %s", path, (size_t)(p - buf), why);
    for (size_t j = 0; j < n_ents; j++) free(ents[j].bytes);
    free(ents);
    return TSR_EXIT_DATA;
}

/* Splits one vocab.bpe line at ASCII whitespace into exactly two parts. */
static int split_merge(char *line, char **a, char **b) {
    char *parts[3];
    int n = 0;
    for (char *s = line; *s;) {
        while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\v' || *s == '\f') s++;
        if (!*s) break;
        if (n == 3) return -1;
        parts[n++] = s;
        while (*s && !(*s == ' ' || *s == '\t' || *s == '\r' || *s == '\v' || *s == '\f')) s++;
        if (*s) *s++ = '\0';
    }
    if (n != 2) return -1;
    *a = parts[0], *b = parts[1];
    return 0;
}

/* The bytes of one merge operand (its text through bytes_to_unicode reversed). */
static int operand_bytes(const char *s, const int16_t *u2b, uint8_t *out, size_t *n) {
    uint32_t cps[4096];
    if (strlen(s) > 4000) return -1;
    /* no escapes in vocab.bpe: plain UTF-8 */
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        uint32_t cp;
        int extra = *p >= 0xF0 ? 3 : *p >= 0xE0 ? 2 : *p >= 0xC0 ? 1 : *p >= 0x80 ? -1 : 0;
        if (extra < 0) return -1;
        cp = extra ? (uint32_t)(*p & (0x3F >> extra)) : *p;
        p++;
        for (int i = 0; i < extra; i++, p++) {
            if ((*p & 0xC0) != 0x80) return -1;
            cp = cp << 6 | (*p & 0x3F);
        }
        cps[k++] = cp;
    }
    for (size_t i = 0; i < k; i++) {
        if (cps[i] >= 324 || u2b[cps[i]] < 0) return -1;
        out[i] = (uint8_t)u2b[cps[i]];
    }
    *n = k;
    return 0;
}

/* The vocabulary's token -> id map (open addressing over v's tokens). */
static str_map map_vocab(const vocab *v) {
    size_t mcap = 16;
    while (mcap < 2ull * v->n) mcap <<= 1;
    str_map m = {tsr_calloc(mcap, sizeof(uint32_t)), mcap - 1, (const uint8_t *const *)v->tok, v->len};
    for (uint32_t i = 0; i < v->n; i++) {
        size_t s = str_hash(v->tok[i], v->len[i]) & m.mask;
        while (m.slot[s]) s = (s + 1) & m.mask;
        m.slot[s] = i + 1;
    }
    return m;
}

/* The merges of vocab.bpe (bbuf, bn bytes; lines[1 : -1], as the reference reads it) as token ids
 * of m, into merges (one per line at most); their count in *n_merges. Returns 0 or TSR_EXIT_DATA
 * after tsr_error() named the line. */
static int parse_merges(const char *vocab_bpe, const char *encoder_json, char *bbuf, size_t bn,
                        const str_map *m, tsr_merge *merges, uint32_t *n_merges) {
    int16_t u2b[324];
    unicode_to_byte(u2b);
    *n_merges = 0;
    char *line = bbuf, *nl = memchr(bbuf, '\n', bn);
    if (!nl) {
        tsr_error("%s: malformed vocab.bpe: no line break (expected a '#version' line, then merges)",
                  vocab_bpe);
        return TSR_EXIT_DATA;
    }
    long lineno = 1;
    for (line = nl + 1; (nl = memchr(line, '\n', bn - (size_t)(line - bbuf))) != NULL; line = nl + 1) {
        *nl = '\0';
        lineno++;
        char *a, *b;
        uint8_t ab[8200];
        size_t la, lb;
        if (split_merge(line, &a, &b) || operand_bytes(a, u2b, ab, &la) ||
            operand_bytes(b, u2b, ab + la, &lb)) {
            tsr_error("%s:%ld: malformed vocab.bpe: expected two tokens 'left right' spelled "
                      "through GPT-2's byte-to-unicode table", vocab_bpe, lineno);
            return TSR_EXIT_DATA;
        }
        uint32_t l = map_find(m, ab, la), r = map_find(m, ab + la, lb), res = map_find(m, ab, la + lb);
        if (l == UINT32_MAX || r == UINT32_MAX || res == UINT32_MAX) {
            tsr_error("%s:%ld: merge '%s %s': %s is not in %s", vocab_bpe, lineno, a, b,
                      l == UINT32_MAX ? "the left token" : r == UINT32_MAX ? "the right token" : "the merged token",
                      encoder_json);
            return TSR_EXIT_DATA;
        }
        merges[(*n_merges)++] = (tsr_merge){l, r, res};
    }
    return 0;
}

/* The reference's rank keys are left + "," + right: every split of a merge's key at a comma into
 * two vocabulary tokens gets the rank (the last merge with that key wins). */
static void add_comma_ranks(tsr_tokenizer *t, const vocab *v, const str_map *m,
                            const tsr_merge *merges, uint32_t n_merges) {
    for (uint32_t r = 0; r < n_merges; r++) {
        uint8_t key[8200];
        uint32_t la = v->len[merges[r].left], lb = v->len[merges[r].right];
        memcpy(key, v->tok[merges[r].left], la);
        key[la] = ',';
        memcpy(key + la + 1, v->tok[merges[r].right], lb);
        size_t kl = la + 1 + lb;
        for (size_t p = 1; p + 1 < kl; p++) {
            if (key[p] != ',') continue;
            uint32_t x = map_find(m, key, p), y = map_find(m, key + p + 1, kl - p - 1);
            if (x == UINT32_MAX || y == UINT32_MAX) continue;
            uint8_t xy[8200];
            memcpy(xy, key, p);
            memcpy(xy + p, key + p + 1, kl - p - 1);
            uint32_t res = map_find(m, xy, kl - 1);
            if (res != UINT32_MAX) tsr_tokenizer_set_pair(t, x, y, r, res);
        }
    }
}

int tokenizer_load_gpt2(tsr_tokenizer **out, const char *encoder_json, const char *vocab_bpe) {
    char *ebuf = NULL, *bbuf = NULL;
    size_t en, bn;
    vocab v = {0};
    tsr_merge *merges = NULL;
    str_map m = {0};
    int rc, has_eot = 0;
    *out = NULL;
    if ((rc = fs_read_all(encoder_json, GPT2_FILE_MAX, &ebuf, &en)) ||
        (rc = fs_read_all(vocab_bpe, GPT2_FILE_MAX, &bbuf, &bn)))
        goto done;
    if (strlen(ebuf) != en) {
        tsr_error("%s: malformed encoder.json: holds a NUL byte", encoder_json);
        rc = TSR_EXIT_DATA;
        goto done;
    }
    if ((rc = parse_encoder(encoder_json, ebuf, &v, &has_eot))) goto done;
    m = map_vocab(&v);
    size_t n_lines = 0;
    for (size_t i = 0; i < bn; i++) n_lines += bbuf[i] == '\n';
    merges = tsr_malloc((n_lines + 1) * sizeof *merges);
    uint32_t n_merges = 0;
    if ((rc = parse_merges(vocab_bpe, encoder_json, bbuf, bn, &m, merges, &n_merges))) goto done;

    const char *special = SPECIAL_EOT;
    uint32_t eot_id = UINT32_MAX;
    if (has_eot) eot_id = map_find(&m, (const uint8_t *)SPECIAL_EOT, strlen(SPECIAL_EOT));
    rc = tokenizer_build(out, v.n, (const uint8_t *const *)v.tok, v.len, n_merges, merges,
                         has_eot ? 1 : 0, &special, &eot_id);
    if (rc) {
        tsr_error("  while loading %s + %s", encoder_json, vocab_bpe);
        goto done;
    }
    add_comma_ranks(*out, &v, &m, merges, n_merges);
done:
    free(m.slot);
    free(merges);
    vocab_free(&v);
    free(ebuf);
    free(bbuf);
    return rc;
}
