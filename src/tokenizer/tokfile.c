/* tokfile.c — tessera's tokenizer file: tokenizer_save(_parts), tokfile_read, tokenizer_load.
 *
 * Format version 1 (docs/tokenizer.md "File format"), ASCII text, one record per line, '\n' ends
 * every line, fields separated by one space, numbers in decimal, byte strings in lowercase hex:
 *
 *   tessera-tokenizer 1          magic and format version
 *   tokens N                     vocabulary size (ids 0..N-1)
 *   merges M                     M <= N
 *   specials S                   S <= N
 *   t ID HEX                     N lines, ID = 0..N-1 in order: the token's bytes (1 or more)
 *   m LEFT RIGHT RESULT          M lines in rank order: bytes(RESULT) = bytes(LEFT) bytes(RIGHT)
 *   s ID HEX                     S lines: a special token's text; bytes(ID) must equal it
 *   crc32c XXXXXXXX              CRC32C of every byte before this line (8 lowercase hex digits)
 *
 * tokenizer_save reads a built tokenizer's parts through the accessors of tokenizer.h (bpe.c).
 *
 * The reader checks, in order: the magic, the version, the closing crc32c line (a file cut short
 * lacks it), the checksum, then every record and every cross-reference. Each fault is reported
 * with the file name (and line number) and returns TSR_EXIT_DATA.
 */
#include "tokenizer/tokfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "crc32c.h"
#include "fsutil.h"

#define MAX_TOKENS (UINT32_C(1) << 31) /* ids fit int32, as dataset vocabularies (data-format.md) */
#define MAX_FILE_BYTES (UINT64_C(1) << 34)

/* ================================ writing ================================ */

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_reserve(sbuf *b, size_t more) {
    if (b->n + more <= b->cap) return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more) cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np) tsr_die(TSR_EXIT_INTERNAL, "out of memory: %zu bytes for the tokenizer file", cap);
    b->p = np;
    b->cap = cap;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    sb_reserve(b, 64);
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k < 0) tsr_die(TSR_EXIT_INTERNAL, "vsnprintf failed");
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        sb_reserve(b, (size_t)k + 1);
    }
}

static void sb_hex(sbuf *b, const uint8_t *p, size_t n) {
    static const char digits[] = "0123456789abcdef";
    sb_reserve(b, 2 * n + 1);
    for (size_t i = 0; i < n; i++) {
        b->p[b->n++] = digits[p[i] >> 4];
        b->p[b->n++] = digits[p[i] & 15];
    }
}

/* Writes buf to path.tmp, fsync, rename to path, fsync the directory. */
static int write_atomic(const char *path, const char *buf, size_t n) {
    char tmp[4096], dir[4096];
    if (tsr_snprintf(tmp, sizeof tmp, "%s.tmp", path) ||
        tsr_snprintf(dir, sizeof dir, "%s", path)) {
        tsr_error("%s: cannot write the tokenizer: path too long", path);
        return TSR_EXIT_DATA;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        tsr_error("%s: cannot write the tokenizer: open: %s", tmp, strerror(errno));
        return TSR_EXIT_DATA;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t k = write(fd, buf + done, n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            tsr_error("%s: cannot write the tokenizer: write: %s (%zu of %zu bytes written)", tmp,
                      k < 0 ? strerror(errno) : "no progress", done, n);
            close(fd);
            unlink(tmp);
            return TSR_EXIT_DATA;
        }
        done += (size_t)k;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        tsr_error("%s: cannot write the tokenizer: fsync/close: %s", tmp, strerror(errno));
        unlink(tmp);
        return TSR_EXIT_DATA;
    }
    if (rename(tmp, path) != 0) {
        tsr_error("%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        unlink(tmp);
        return TSR_EXIT_DATA;
    }
    char *slash = strrchr(dir, '/');
    if (slash == dir) dir[1] = '\0';
    else if (slash) *slash = '\0';
    else strcpy(dir, ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || (fsync(dfd) != 0 && errno != EINVAL))
        tsr_warn("%s: fsync of the directory failed: %s", dir, strerror(errno));
    if (dfd >= 0) close(dfd);
    return 0;
}

int tokenizer_save_parts(const char *path, uint32_t n_tokens, const uint8_t *const *tokens,
                         const uint32_t *len, uint32_t n_merges, const tsr_merge *merges,
                         uint32_t n_specials, const char *const *specials,
                         const uint32_t *special_ids) {
    /* Validate what we are about to write: a file we would refuse to read is a bug. */
    if (n_tokens == 0 || n_tokens > MAX_TOKENS || n_merges > n_tokens || n_specials > n_tokens) {
        tsr_error("%s: cannot save tokenizer: %u tokens, %u merges, %u specials (expected 1..2^31 "
                  "tokens, merges and specials <= tokens)", path, n_tokens, n_merges, n_specials);
        return TSR_EXIT_USAGE;
    }
    for (uint32_t i = 0; i < n_tokens; i++)
        if (len[i] == 0 || !tokens[i]) {
            tsr_error("%s: cannot save tokenizer: token %u is empty", path, i);
            return TSR_EXIT_USAGE;
        }
    for (uint32_t k = 0; k < n_merges; k++) {
        const tsr_merge *m = &merges[k];
        if (m->left >= n_tokens || m->right >= n_tokens || m->result >= n_tokens ||
            (uint64_t)len[m->left] + len[m->right] != len[m->result] ||
            memcmp(tokens[m->result], tokens[m->left], len[m->left]) != 0 ||
            memcmp(tokens[m->result] + len[m->left], tokens[m->right], len[m->right]) != 0) {
            tsr_error("%s: cannot save tokenizer: merge %u (%u %u -> %u) is not a concatenation "
                      "of vocabulary entries", path, k, m->left, m->right, m->result);
            return TSR_EXIT_USAGE;
        }
    }
    for (uint32_t k = 0; k < n_specials; k++) {
        size_t sl = specials[k] ? strlen(specials[k]) : 0;
        uint32_t id = special_ids[k];
        if (sl == 0 || id >= n_tokens || len[id] != sl || memcmp(tokens[id], specials[k], sl)) {
            tsr_error("%s: cannot save tokenizer: special token %u ('%s', id %u) is empty, out of "
                      "range or differs from its vocabulary entry", path, k,
                      specials[k] ? specials[k] : "(null)", id);
            return TSR_EXIT_USAGE;
        }
    }

    sbuf b = {0};
    sb_printf(&b, "%s %d\ntokens %u\nmerges %u\nspecials %u\n", TSR_TOKFILE_MAGIC,
              TSR_TOKFILE_VERSION, n_tokens, n_merges, n_specials);
    for (uint32_t i = 0; i < n_tokens; i++) {
        sb_printf(&b, "t %u ", i);
        sb_hex(&b, tokens[i], len[i]);
        sb_printf(&b, "\n");
    }
    for (uint32_t k = 0; k < n_merges; k++)
        sb_printf(&b, "m %u %u %u\n", merges[k].left, merges[k].right, merges[k].result);
    for (uint32_t k = 0; k < n_specials; k++) {
        sb_printf(&b, "s %u ", special_ids[k]);
        sb_hex(&b, (const uint8_t *)specials[k], strlen(specials[k]));
        sb_printf(&b, "\n");
    }
    uint32_t crc = tsr_crc32c(0, b.p, b.n);
    sb_printf(&b, "crc32c %08x\n", crc);
    int rc = write_atomic(path, b.p, b.n);
    free(b.p);
    return rc;
}

/* ================================ reading ================================ */

typedef struct reader {
    const char *path;
    const char *p, *end; /* the unread part of the records */
    long line;           /* line number of the record being read (1-based) */
} reader;

/* Reports what is wrong with the record being read (a printf format and its values). */
static int bad_record(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad_record(reader *r, const char *fmt, ...) {
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    tsr_error("%s: line %ld: %s", r->path, r->line, what);
    return TSR_EXIT_DATA;
}

/* Takes the next line [*s, *e) (without '\n'; empty at the end, which is an error); every line
 * ends with '\n' (the caller checked). */
static int next_line(reader *r, const char **s, const char **e) {
    *s = *e = r->p;
    if (r->p >= r->end) return bad_record(r, "file ends early: more records were announced");
    const char *nl = memchr(r->p, '\n', (size_t)(r->end - r->p));
    *s = r->p;
    *e = nl;
    r->p = nl + 1;
    r->line++;
    return 0;
}

/* Parses a decimal u32 at *s (no sign, no leading zeros except "0"), advancing *s. */
static int parse_u32(const char **s, const char *e, uint32_t *out) {
    const char *p = *s;
    uint64_t v = 0;
    if (p >= e || *p < '0' || *p > '9') return -1;
    if (*p == '0' && p + 1 < e && p[1] >= '0' && p[1] <= '9') return -1;
    while (p < e && *p >= '0' && *p <= '9') {
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > UINT32_MAX) return -1;
        p++;
    }
    *s = p;
    *out = (uint32_t)v;
    return 0;
}

static int expect(const char **s, const char *e, const char *lit) {
    size_t n = strlen(lit);
    if ((size_t)(e - *s) < n || memcmp(*s, lit, n) != 0) return -1;
    *s += n;
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Decodes lowercase hex [s, e) (non-empty, even length) into a new buffer (NUL-terminated). */
static int parse_hex(const char *s, const char *e, uint8_t **out, uint32_t *len) {
    size_t n = (size_t)(e - s);
    if (n == 0 || n % 2 || n / 2 > UINT32_MAX) return -1;
    uint8_t *b = tsr_malloc(n / 2 + 1);
    for (size_t i = 0; i < n / 2; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(b);
            return -1;
        }
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    b[n / 2] = 0;
    *out = b;
    *len = (uint32_t)(n / 2);
    return 0;
}

/* "KEY N" header line with N <= max. */
static int read_count(reader *r, const char *key, uint32_t max, uint32_t *out) {
    const char *s, *e;
    TSR_CHECK(next_line(r, &s, &e));
    if (expect(&s, e, key) || expect(&s, e, " ") || parse_u32(&s, e, out) || s != e)
        return bad_record(r, "expected '%s N', found '%.*s'", key,
                          (int)((e - s) < 60 ? (e - s) : 60), s);
    if (*out > max) return bad_record(r, "%s %u is larger than the limit %u", key, *out, max);
    return 0;
}

void tokfile_parts_free(tsr_tokfile_parts *p) {
    if (!p) return;
    if (p->tokens)
        for (uint32_t i = 0; i < p->n_tokens; i++) free(p->tokens[i]);
    if (p->specials)
        for (uint32_t k = 0; k < p->n_specials; k++) free(p->specials[k]);
    tsr_free_all(p->tokens, p->len, p->merges, p->specials, p->special_ids);
    memset(p, 0, sizeof *p);
}

/* Everything after the checksum was verified: the records and their cross-references. */
/* The header counts, checked against each other and against the file's size, then t's arrays
 * allocated for them. */
static int read_counts(reader *r, tsr_tokfile_parts *t) {
    uint32_t n_tok, n_mer, n_spe;
    TSR_CHECK(read_count(r, "tokens", MAX_TOKENS, &n_tok));
    TSR_CHECK(read_count(r, "merges", MAX_TOKENS, &n_mer));
    TSR_CHECK(read_count(r, "specials", MAX_TOKENS, &n_spe));
    if (n_tok == 0 || n_mer > n_tok || n_spe > n_tok)
        return bad_record(r, "inconsistent counts: %u tokens, %u merges, %u specials (expected at "
                          "least 1 token, merges and specials <= tokens)", n_tok, n_mer, n_spe);
    /* Each record line takes at least 4 bytes: refuse counts the file cannot hold before
     * allocating for them. */
    if ((uint64_t)n_tok + n_mer + n_spe > (uint64_t)(r->end - r->p) / 4 + 1)
        return bad_record(r, "the counts announce more records than the file can hold");
    t->tokens = tsr_calloc(n_tok, sizeof *t->tokens);
    t->len = tsr_calloc(n_tok, sizeof *t->len);
    t->merges = tsr_calloc(n_mer ? n_mer : 1, sizeof *t->merges);
    t->specials = tsr_calloc(n_spe ? n_spe : 1, sizeof *t->specials);
    t->special_ids = tsr_calloc(n_spe ? n_spe : 1, sizeof *t->special_ids);
    t->n_tokens = n_tok; /* from here tokfile_parts_free frees what was read */
    t->n_specials = n_spe;
    t->n_merges = n_mer;
    return 0;
}

/* A 'TAG ID HEX' record (tag "t " or "s "): its id, and its bytes (malloc'd) and their count;
 * else the error "expected 'TAG ID HEX' (what)". */
static int read_id_hex(reader *r, const char *tag, const char *what, uint32_t *id, uint8_t **bytes,
                       uint32_t *len) {
    const char *s, *e;
    TSR_CHECK(next_line(r, &s, &e));
    if (expect(&s, e, tag) || parse_u32(&s, e, id) || expect(&s, e, " ") ||
        parse_hex(s, e, bytes, len))
        return bad_record(r, "expected '%sID HEX' (%s)", tag, what);
    return 0;
}

/* The 't ID HEX' records: ids 0..n_tokens-1 in order. */
static int read_tokens(reader *r, tsr_tokfile_parts *t) {
    for (uint32_t i = 0; i < t->n_tokens; i++) {
        uint32_t id;
        TSR_CHECK(read_id_hex(r, "t ", "a token: its id and its bytes in lowercase hex, at least "
                              "one byte", &id, &t->tokens[i], &t->len[i]));
        if (id != i) return bad_record(r, "token id %u out of order (expected %u)", id, i);
    }
    return 0;
}

/* The 'm LEFT RIGHT RESULT' records: ids in range, the result's bytes the left's then the right's. */
static int read_merges(reader *r, tsr_tokfile_parts *t) {
    const char *s, *e;
    uint32_t n_tok = t->n_tokens;
    for (uint32_t k = 0; k < t->n_merges; k++) {
        TSR_CHECK(next_line(r, &s, &e));
        tsr_merge *m = &t->merges[k];
        if (expect(&s, e, "m ") || parse_u32(&s, e, &m->left) || expect(&s, e, " ") ||
            parse_u32(&s, e, &m->right) || expect(&s, e, " ") || parse_u32(&s, e, &m->result) ||
            s != e)
            return bad_record(r, "expected 'm LEFT RIGHT RESULT' (a merge: three token ids)");
        if (m->left >= n_tok || m->right >= n_tok || m->result >= n_tok)
            return bad_record(r, "merge %u (%u %u -> %u): id out of range (vocabulary of %u)", k,
                              m->left, m->right, m->result, n_tok);
        uint32_t ll = t->len[m->left], lr = t->len[m->right];
        if ((uint64_t)ll + lr != t->len[m->result] ||
            memcmp(t->tokens[m->result], t->tokens[m->left], ll) != 0 ||
            memcmp(t->tokens[m->result] + ll, t->tokens[m->right], lr) != 0)
            return bad_record(r, "merge %u (%u %u -> %u): the result's bytes are not the left "
                              "token's bytes followed by the right's", k, m->left, m->right,
                              m->result);
    }
    return 0;
}

/* The 's ID HEX' records: each the text of its vocabulary entry, no NUL, none repeated. */
static int read_specials(reader *r, tsr_tokfile_parts *t) {
    uint32_t n_tok = t->n_tokens;
    for (uint32_t k = 0; k < t->n_specials; k++) {
        uint32_t id, sl;
        uint8_t *text = NULL;
        TSR_CHECK(read_id_hex(r, "s ", "a special token: its id and its text in lowercase hex", &id,
                              &text, &sl));
        t->specials[k] = (char *)text;
        t->special_ids[k] = id;
        if (memchr(text, 0, sl)) return bad_record(r, "a special token's text contains a NUL byte");
        if (id >= n_tok || t->len[id] != sl || memcmp(t->tokens[id], text, sl) != 0)
            return bad_record(r, "special token %u (id %u): %s", k, id,
                              id >= n_tok ? "id out of range"
                                          : "its text differs from the vocabulary entry of that id");
        for (uint32_t j = 0; j < k; j++)
            if (!strcmp(t->specials[j], t->specials[k]) || t->special_ids[j] == id)
                return bad_record(r, "special token %u repeats special token %u", k, j);
    }
    return 0;
}

static int read_records(reader *r, tsr_tokfile_parts *t) {
    TSR_CHECK(read_counts(r, t));
    TSR_CHECK(read_tokens(r, t));
    TSR_CHECK(read_merges(r, t));
    TSR_CHECK(read_specials(r, t));
    if (r->p != r->end) return bad_record(r, "unexpected record after the special tokens");
    return 0;
}

int tokfile_read(tsr_tokfile_parts *out, const char *path) {
    memset(out, 0, sizeof *out);
    char *buf;
    size_t n;
    TSR_CHECK(fs_read_all(path, (size_t)MAX_FILE_BYTES, &buf, &n));
    int rc = TSR_EXIT_DATA;
    size_t ml = strlen(TSR_TOKFILE_MAGIC);
    /* 1. magic */
    if (n < ml + 1 || memcmp(buf, TSR_TOKFILE_MAGIC, ml) != 0 || buf[ml] != ' ') {
        char shown[40];
        size_t k = 0;
        for (; k < n && k < 20; k++) shown[k] = (buf[k] >= 32 && buf[k] < 127) ? buf[k] : '?';
        shown[k] = '\0';
        tsr_error("%s: not a tessera tokenizer file: it starts with '%s', expected '%s %d' "
                  "(GPT-2 files are loaded with --tokenizer gpt2 or a directory)", path, shown,
                  TSR_TOKFILE_MAGIC, TSR_TOKFILE_VERSION);
        goto out;
    }
    /* 2. version */
    {
        const char *s = buf + ml + 1, *e = memchr(s, '\n', n - ml - 1);
        uint32_t v;
        if (!e || parse_u32(&s, e, &v) || s != e) {
            tsr_error("%s: line 1: expected '%s VERSION'", path, TSR_TOKFILE_MAGIC);
            goto out;
        }
        if (v != TSR_TOKFILE_VERSION) {
            tsr_error("%s: tokenizer format version %u, this tessera reads version %d (written by "
                      "a %s tessera?)", path, v, TSR_TOKFILE_VERSION,
                      v > TSR_TOKFILE_VERSION ? "newer" : "different");
            goto out;
        }
    }
    /* 3. the closing checksum line: "crc32c XXXXXXXX\n" at the very end */
    const size_t cl = 16; /* strlen("crc32c 01234567\n") */
    if (n < cl || memcmp(buf + n - cl, "crc32c ", 7) != 0 || buf[n - 1] != '\n' ||
        (n > cl && buf[n - cl - 1] != '\n')) {
        tsr_error("%s: truncated or damaged: the closing 'crc32c XXXXXXXX' line is missing "
                  "(file is %zu bytes; was it cut short while copying?)", path, n);
        goto out;
    }
    uint32_t stored = 0;
    for (size_t i = n - cl + 7; i < n - 1; i++) {
        int h = hexval(buf[i]);
        if (h < 0) {
            tsr_error("%s: the closing crc32c line is damaged: '%.15s'", path, buf + n - cl);
            goto out;
        }
        stored = stored << 4 | (uint32_t)h;
    }
    /* 4. the checksum */
    uint32_t crc = tsr_crc32c(0, buf, n - cl);
    if (crc != stored) {
        tsr_error("%s: checksum mismatch: the file says crc32c %08x, its %zu bytes of records give "
                  "%08x (corrupted, or edited by hand)", path, stored, n - cl, crc);
        goto out;
    }
    /* 5. the records */
    reader r = {path, memchr(buf, '\n', n) + 1, buf + n - cl, 1};
    rc = read_records(&r, out);
    if (rc) tokfile_parts_free(out);
out:
    free(buf);
    return rc;
}

int tokenizer_load(tsr_tokenizer **out, const char *path) {
    tsr_tokfile_parts t;
    *out = NULL;
    TSR_CHECK(tokfile_read(&t, path));
    int rc = tokenizer_build(out, t.n_tokens, (const uint8_t *const *)t.tokens, t.len, t.n_merges,
                             t.merges, t.n_specials, (const char *const *)t.specials,
                             t.special_ids);
    if (rc) tsr_error("%s: the tokenizer it describes was refused (see above)", path);
    tokfile_parts_free(&t);
    return rc;
}

int tokenizer_save(const tsr_tokenizer *tok, const char *path) {
    if (tokenizer_is_hf(tok)) {
        tsr_error("%s: not written: a Hugging Face tokenizer.json cannot be saved in tessera's "
                  "tokenizer format (use the tokenizer.json itself)", path);
        return TSR_EXIT_USAGE;
    }
    uint32_t n = tokenizer_vocab_size(tok), ns = tokenizer_n_specials(tok);
    const uint8_t **tokens = tsr_malloc((size_t)n * sizeof *tokens);
    uint32_t *len = tsr_malloc((size_t)n * sizeof *len);
    const char **specials = tsr_malloc((size_t)(ns ? ns : 1) * sizeof *specials);
    uint32_t *ids = tsr_malloc((size_t)(ns ? ns : 1) * sizeof *ids);
    for (uint32_t i = 0; i < n; i++) tokens[i] = tokenizer_token_bytes(tok, i, &len[i]);
    for (uint32_t k = 0; k < ns; k++) {
        specials[k] = tokenizer_special_name(tok, k);
        ids[k] = tokenizer_special_id_at(tok, k);
    }
    int rc = tokenizer_save_parts(path, n, tokens, len, tokenizer_n_merges(tok),
                                  tokenizer_merges(tok), ns, specials, ids);
    free(tokens);
    free(len);
    free(specials);
    free(ids);
    return rc;
}
