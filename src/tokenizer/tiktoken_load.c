/* tiktoken_load.c — a tokenizer in tiktoken's format, loaded into an hf_tok (hf_tok.h) so that
 * encoding and decoding are hf_bpe.c's.
 *
 * The file (tiktoken's load_tiktoken_bpe) has one token a line: its bytes in base64, a space, its
 * rank; empty lines are skipped. Ranks are the ids, 0..N-1 each once. BPE: repeatedly merge the
 * adjacent pair whose concatenated bytes are the token of lowest rank (the leftmost among equal
 * ranks), a piece that is a token whole being that token (hf_tok's ignore_merges). So there is no
 * merge table: (l, r) merges when the bytes of l then r are a token (hf_tok's rank_merges).
 * The pre-tokenizer pattern and the special tokens are not in the file:
 *   DIR/tiktoken.model + DIR/tokenizer_config.json (Kimi K2, Moonlight; DIR or its tiktoken.model):
 *     the config must name TikTokenTokenizer (tokenizer_class, or auto_map's AutoTokenizer:
 *     tokenization_kimi.py / tokenization_moonshot.py, whose pat_str is Kimi's: hf_o200k.c); the
 *     ids N..N+255 are special tokens (num_reserved_special_tokens), named by the config's
 *     added_tokens_decoder, the others <|reserved_token_ID|>, as tokenization_kimi.py names them.
 *   NAME.tiktoken (OpenAI's files): NAME says the encoding; o200k_base only (tiktoken's
 *     openai_public: o200k's pattern, <|endoftext|> 199999, <|endofprompt|> 200018).
 * Untrusted input: the file at most 1 GiB, a token at most TT_TOKEN_MAX bytes, ids below 2^24,
 * every refusal names the file, the line or key and what was expected (exit 2).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "fsutil.h"
#include "json.h"
#include "tokenizer/hf_tok_internal.h"

#define TT_MAX_IDS (1u << 24)
#define TT_TOKEN_MAX HF_RANK_TOKEN_MAX
#define TT_FILE_MAX ((size_t)1 << 30) /* Kimi's tiktoken.model: 2.3 MB; o200k_base: 3.6 MB */
#define TT_CONFIG_MAX ((size_t)16 << 20)
#define KIMI_SPECIALS 256u          /* tokenization_kimi.py's num_reserved_special_tokens */
#define SPECIAL_MAX 256u            /* bytes in a special token's name */

/* The tokens of a ranks file: bytes of rank r at blob + off[r], len[r] bytes. */
typedef struct tt_ranks {
    uint32_t n;
    size_t used; /* bytes in blob */
    uint8_t *blob;
    size_t *off;
    uint32_t *len, *line; /* line: where rank r was given (0: not given yet) */
} tt_ranks;

/* The special tokens: name k (NUL-terminated) has id[k]. */
typedef struct tt_specials {
    uint32_t n;
    char **name;
    uint32_t *id;
} tt_specials;

static int fail(const char *path, const char *what) {
    tsr_error("%s: %s", path, what);
    return TSR_EXIT_DATA;
}

static int failf(const char *path, unsigned long line, const char *what) {
    tsr_error("%s: line %lu: %s", path, line, what);
    return TSR_EXIT_DATA;
}

static int b64_value(uint8_t c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Standard base64 with padding, n characters at s -> bytes at out (room for 3n/4): the byte
 * count, or -1. */
static long b64_decode(const uint8_t *s, size_t n, uint8_t *out) {
    if (n == 0 || n % 4) return -1;
    size_t pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0, o = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        for (size_t k = 0; k < 4; k++) {
            int d = i + k >= n - pad ? 0 : b64_value(s[i + k]);
            if (d < 0) return -1;
            v = v << 6 | (uint32_t)d;
        }
        for (size_t k = 0; k < 3; k++) out[o++] = (uint8_t)(v >> (16 - 8 * k));
    }
    return (long)(o - pad);
}

/* The non-empty lines of text (a trailing '\r' is not part of a line), counted. */
static uint32_t count_lines(const char *text, size_t n) {
    uint64_t count = 0;
    for (size_t i = 0; i < n;) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - text) : n, m = e - i;
        if (m && text[i + m - 1] == '\r') m--;
        count += m > 0;
        i = e + 1;
    }
    return count > TT_MAX_IDS ? TT_MAX_IDS + 1 : (uint32_t)count;
}

/* One line "BASE64 RANK" (m bytes at s, line number ln) into r; *used: blob bytes used so far. */
static int parse_line(tt_ranks *r, const char *s, size_t m, unsigned long ln, size_t *used,
                      const char *path) {
    char msg[200];
    const char *sp = memchr(s, ' ', m);
    size_t tl = sp ? (size_t)(sp - s) : m, i = tl + 1;
    uint64_t rank = 0;
    if (!sp || tl == 0 || i >= m) return failf(path, ln, "expected a token in base64, a space, its rank");
    for (; i < m && s[i] >= '0' && s[i] <= '9' && rank < TT_MAX_IDS; i++)
        rank = rank * 10 + (uint64_t)(s[i] - '0');
    if (i < m || rank >= r->n) {
        int show = (int)(m - tl - 1 < 40 ? m - tl - 1 : 40);
        tsr_snprintf(msg, sizeof msg, "the rank '%.*s': expected a number below %u (ranks are the ids "
                     "0..N-1 of the N tokens, each once)", show, sp + 1, r->n);
        return failf(path, ln, msg);
    }
    long len = -2; /* (too long to decode) */
    if (tl <= 4 * ((TT_TOKEN_MAX + 2) / 3)) len = b64_decode((const uint8_t *)s, tl, r->blob + *used);
    if (len <= 0 || (uint32_t)len > TT_TOKEN_MAX) {
        tsr_snprintf(msg, sizeof msg, "the token '%.*s%s': expected 1 to %u bytes in standard base64 "
                     "(A-Z a-z 0-9 + /, = padding)", (int)(tl < 40 ? tl : 40), s, tl > 40 ? "..." : "",
                     TT_TOKEN_MAX);
        return failf(path, ln, msg);
    }
    if (r->line[rank]) {
        tsr_snprintf(msg, sizeof msg, "rank %llu given twice (line %u too)", (unsigned long long)rank,
                     r->line[rank]);
        return failf(path, ln, msg);
    }
    r->off[rank] = *used, r->len[rank] = (uint32_t)len;
    r->line[rank] = (uint32_t)(ln < UINT32_MAX ? ln : UINT32_MAX);
    *used += (size_t)len;
    return 0;
}

static void ranks_free(tt_ranks *r) {
    free(r->blob), free(r->off), free(r->len), free(r->line);
    memset(r, 0, sizeof *r);
}

/* The ranks file at path into r. */
static int read_ranks(const char *path, tt_ranks *r) {
    char *text;
    size_t n, used = 0;
    memset(r, 0, sizeof *r);
    if (fs_read_all(path, TT_FILE_MAX, &text, &n)) return TSR_EXIT_DATA;
    r->n = count_lines(text, n);
    int rc = r->n == 0 ? fail(path, "no tokens (expected lines of a token in base64, a space, its rank)")
             : r->n > TT_MAX_IDS ? fail(path, "more than 16,777,216 tokens") : 0;
    if (!rc) {
        r->blob = tsr_malloc(n + 1), r->off = tsr_calloc(r->n, sizeof *r->off);
        r->len = tsr_calloc(r->n, sizeof *r->len), r->line = tsr_calloc(r->n, sizeof *r->line);
    }
    unsigned long ln = 0;
    for (size_t i = 0; !rc && i < n;) {
        const char *nl = memchr(text + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - text) : n, m = e - i;
        ln++;
        if (m && text[i + m - 1] == '\r') m--;
        if (m) rc = parse_line(r, text + i, m, ln, &used, path);
        i = e + 1;
    }
    free(text);
    r->used = used;
    if (rc) ranks_free(r);
    return rc;
}

static void specials_free(tt_specials *s) {
    for (uint32_t k = 0; k < s->n; k++) free(s->name[k]);
    free(s->name), free(s->id);
    memset(s, 0, sizeof *s);
}

static void special_add(tt_specials *s, const char *name, size_t len, uint32_t id) {
    s->name = tsr_realloc(s->name, (s->n + 1) * sizeof *s->name);
    s->id = tsr_realloc(s->id, (s->n + 1) * sizeof *s->id);
    s->name[s->n] = tsr_malloc(len + 1);
    memcpy(s->name[s->n], name, len);
    s->name[s->n][len] = 0;
    s->id[s->n++] = id;
}

/* 0 when no two special tokens have the same name, else fail() naming it (tiktoken would keep one
 * of the two ids, the text alone cannot say which). */
static int specials_unique(const tt_specials *s, const char *path) {
    char msg[400];
    for (uint32_t a = 0; a < s->n; a++)
        for (uint32_t b = a + 1; b < s->n; b++) {
            if (strcmp(s->name[a], s->name[b]) != 0) continue;
            tsr_snprintf(msg, sizeof msg, "added_tokens_decoder: '%.256s' names both %u and %u", s->name[a],
                         s->id[a], s->id[b]);
            return fail(path, msg);
        }
    return 0;
}

/* 1 when the config names TikTokenTokenizer: tokenizer_class, or auto_map.AutoTokenizer (a string
 * or a list whose first item is one). */
static int names_tiktoken_class(const json_value *cfg) {
    const json_value *tc = json_get(cfg, "tokenizer_class"), *am = json_get(cfg, "auto_map");
    const json_value *at = am && am->type == JSON_OBJECT ? json_get(am, "AutoTokenizer") : NULL;
    if (at && at->type == JSON_ARRAY) at = at->child;
    if (tc && tc->type == JSON_STRING && !strcmp(tc->str, "TikTokenTokenizer")) return 1;
    return at && at->type == JSON_STRING && strstr(at->str, ".TikTokenTokenizer") != NULL;
}

/* One entry of added_tokens_decoder ("ID": {"content": ...}) into name[id - n_base]. */
static int decoder_entry(const json_value *v, uint32_t n_base, char **name, const char *path) {
    char msg[300], *end;
    unsigned long id = strtoul(v->key, &end, 10);
    const json_value *c = v->type == JSON_OBJECT ? json_get(v, "content") : NULL;
    int digits = v->key_len && !*end && v->key[0] >= '0' && v->key[0] <= '9';
    if (!digits || id < n_base || id >= n_base + KIMI_SPECIALS) {
        tsr_snprintf(msg, sizeof msg, "added_tokens_decoder: id '%.40s': expected %u..%u (the %u ids "
                     "after the %u tokens of tiktoken.model)", v->key, n_base, n_base + KIMI_SPECIALS - 1,
                     KIMI_SPECIALS, n_base);
        return fail(path, msg);
    }
    if (!c || c->type != JSON_STRING || c->len == 0 || c->len > SPECIAL_MAX ||
        memchr(c->str, 0, c->len)) {
        tsr_snprintf(msg, sizeof msg, "added_tokens_decoder.%lu.content: expected a string of 1 to %u "
                     "bytes", id, SPECIAL_MAX);
        return fail(path, msg);
    }
    free(name[id - n_base]);
    name[id - n_base] = tsr_malloc(c->len + 1);
    memcpy(name[id - n_base], c->str, c->len + 1);
    return 0;
}

/* Kimi's special tokens from the parsed tokenizer_config.json cfg (at path). */
static int kimi_specials(const json_value *cfg, uint32_t n_base, tt_specials *s, const char *path) {
    if (cfg->type != JSON_OBJECT || !names_tiktoken_class(cfg))
        return fail(path, "tokenizer_class / auto_map.AutoTokenizer: expected TikTokenTokenizer (Kimi "
                          "K2's tokenization_kimi.py, Moonlight's tokenization_moonshot.py, whose "
                          "pre-tokenizer pattern tessera knows; another tiktoken.model's pattern is in its "
                          "Python code)");
    const json_value *dec = json_get(cfg, "added_tokens_decoder");
    if (dec && dec->type != JSON_OBJECT && dec->type != JSON_NULL)
        return fail(path, "added_tokens_decoder: expected an object {\"ID\": {\"content\": ...}}");
    char **name = tsr_calloc(KIMI_SPECIALS, sizeof *name);
    int rc = 0;
    for (const json_value *v = dec && dec->type == JSON_OBJECT ? dec->child : NULL; v && !rc; v = v->next)
        rc = decoder_entry(v, n_base, name, path);
    for (uint32_t k = 0; k < KIMI_SPECIALS; k++) {
        char buf[48];
        snprintf(buf, sizeof buf, "<|reserved_token_%u|>", n_base + k);
        const char *nm = name[k] ? name[k] : buf;
        if (!rc) special_add(s, nm, strlen(nm), n_base + k);
        free(name[k]);
    }
    free(name);
    return rc ? rc : specials_unique(s, path);
}

typedef struct config_ctx {
    uint32_t n_base;
    tt_specials *s;
} config_ctx;

/* hf_json_file's load of tokenizer_config.json: its specials */
static int config_specials(void *ctx, const json_value *root, const char *path) {
    config_ctx *c = ctx;
    return kimi_specials(root, c->n_base, c->s, path);
}

/* The specials of a directory's tokenizer_config.json (path). */
static int read_config(const char *path, uint32_t n_base, tt_specials *s) {
    config_ctx c = {n_base, s};
    return hf_json_file(path, TT_CONFIG_MAX, config_specials, &c);
}

/* Every id's bytes into t in id order: the ranks' tokens, then the specials' names (s in id order,
 * above the ranks). */
static void fill_blob(hf_tok *t, const tt_ranks *r, const tt_specials *s) {
    size_t total = r->used;
    for (uint32_t k = 0; k < s->n; k++) total += strlen(s->name[k]);
    t->blob = tsr_malloc(total + 1);
    t->off = tsr_calloc((size_t)t->n_ids + 1, sizeof *t->off);
    t->assigned = tsr_calloc(t->n_ids, 1);
    uint64_t o = 0;
    for (uint32_t id = 0, k = 0; id < t->n_ids; id++) {
        const uint8_t *p = NULL;
        size_t len = 0;
        if (id < r->n) p = r->blob + r->off[id], len = r->len[id];
        else if (k < s->n && s->id[k] == id) p = (const uint8_t *)s->name[k], len = strlen(s->name[k++]);
        t->off[id] = o;
        if (!p) continue;
        memcpy(t->blob + o, p, len);
        o += len;
        t->assigned[id] = 1;
    }
    t->off[t->n_ids] = o;
}

/* The vocab lookup over the ranks, each token once, and the tokens of the 256 single bytes. */
static int index_ranks(hf_tok *t, const tt_ranks *r, const tt_specials *s, const char *path) {
    char msg[200];
    uint8_t *skip = tsr_calloc(t->n_ids, 1);
    for (uint32_t k = 0; k < s->n; k++) skip[s->id[k]] = 1;
    hf_vocab_index(t, skip);
    free(skip);
    for (uint32_t id = 0; id < r->n; id++) {
        uint32_t other = hf_vocab_find(t, t->blob + t->off[id], r->len[id]);
        if (other == id) continue;
        tsr_snprintf(msg, sizeof msg, "lines %u and %u give the same token (ranks %u and %u)",
                     r->line[other], r->line[id], other, id);
        return fail(path, msg);
    }
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        t->byte_tok[b] = hf_vocab_find(t, &c, 1);
        if (t->byte_tok[b] != HF_NONE) continue;
        tsr_snprintf(msg, sizeof msg, "no token for the byte 0x%02X (byte-level BPE needs all 256)", b);
        return fail(path, msg);
    }
    return 0;
}

/* The hf_tok of ranks r, specials s (id order) and pre-tokenizer split. */
static int build_tok(hf_tok **out, const tt_ranks *r, const tt_specials *s, hf_split_kind split,
                     const char *path) {
    hf_tok *t = tsr_calloc(1, sizeof *t);
    t->split = split, t->ignore_merges = 1, t->rank_merges = 1, t->unk = HF_NONE;
    t->n_ids = s->n ? s->id[s->n - 1] + 1 : r->n;
    for (uint32_t id = 0; id < r->n; id++)
        if (r->len[id] > t->max_tok_len) t->max_tok_len = r->len[id];
    fill_blob(t, r, s);
    int rc = index_ranks(t, r, s, path);
    if (!rc) {
        hf_added_alloc(t, s->n);
        for (uint32_t k = 0; k < s->n; k++) hf_added_set(t, k, s->name[k], strlen(s->name[k]), s->id[k], 1);
    }
    if (rc) hf_tok_free(t);
    else *out = t;
    return rc;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

int tiktoken_is_file(const char *path) {
    return ends_with(path, ".tiktoken") || strcmp(base_name(path), "tiktoken.model") == 0;
}

int tiktoken_in_dir(const char *dir) {
    char p[4200];
    struct stat st;
    return !tsr_snprintf(p, sizeof p, "%s/tiktoken.model", dir) && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* OpenAI's NAME.tiktoken: o200k_base (tiktoken's openai_public) only. */
static int load_openai(hf_tok **out, const char *path) {
    char msg[400];
    const char *base = base_name(path);
    if (strcmp(base, "o200k_base.tiktoken") != 0) {
        tsr_snprintf(msg, sizeof msg, "unknown tiktoken encoding '%.*s': a .tiktoken file's name says its "
                     "pre-tokenizer pattern and special tokens (not in the file), and tessera knows "
                     "o200k_base; for Kimi K2 or Moonlight give the directory holding tiktoken.model and "
                     "tokenizer_config.json", (int)(strlen(base) - 9 < 100 ? strlen(base) - 9 : 100), base);
        return fail(path, msg);
    }
    tt_ranks r;
    TSR_CHECK(read_ranks(path, &r));
    int rc = r.n == 199998 ? 0 : fail(path, "expected the 199,998 tokens of o200k_base");
    tt_specials s = {0};
    special_add(&s, "<|endoftext|>", 13, 199999);
    special_add(&s, "<|endofprompt|>", 15, 200018);
    if (!rc) rc = build_tok(out, &r, &s, HF_SPLIT_TT_O200K, path);
    specials_free(&s);
    ranks_free(&r);
    return rc;
}

/* Kimi's / Moonlight's: dir/tiktoken.model and dir/tokenizer_config.json. */
static int load_kimi(hf_tok **out, const char *dir) {
    char model[4200], config[4200];
    if (tsr_snprintf(model, sizeof model, "%s/tiktoken.model", dir) ||
        tsr_snprintf(config, sizeof config, "%s/tokenizer_config.json", dir)) {
        tsr_error("tokenizer '%.200s...': the path is too long", dir);
        return TSR_EXIT_DATA;
    }
    tt_ranks r;
    TSR_CHECK(read_ranks(model, &r));
    tt_specials s = {0};
    int rc = read_config(config, r.n, &s);
    if (!rc) rc = build_tok(out, &r, &s, HF_SPLIT_TT_KIMI, model);
    specials_free(&s);
    ranks_free(&r);
    return rc;
}

int tiktoken_load(hf_tok **out, const char *path) {
    struct stat st;
    char dir[4200];
    *out = NULL;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return load_kimi(out, path);
    if (ends_with(path, ".tiktoken")) return load_openai(out, path);
    const char *base = base_name(path);
    if (base == path) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", (int)(base - path - 1), path);
    return load_kimi(out, dir);
}
