/* json.c — strict JSON parser, one value per call (see json.h).
 *
 * Recursive descent over (s, n) with an explicit depth limit. Strings are decoded into the arena:
 * a decoded string is never longer than its source, so the source length (+1 for the NUL) is
 * reserved before decoding. Errors record the byte offset of the first bad byte.
 */
#include "json.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define BLOCK_MIN (64u * 1024u)

struct json_block {
    json_block *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

void json_doc_init(json_doc *d) {
    d->blocks = d->cur = NULL;
}

void json_doc_free(json_doc *d) {
    for (json_block *b = d->blocks, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    d->blocks = d->cur = NULL;
}

static void *arena_alloc(json_doc *d, size_t n) {
    n = (n + 15) & ~(size_t)15;
    json_block *b = d->cur;
    while (b && b->size - b->used < n) b = b->next; /* later blocks are empty after a reset */
    if (!b) {
        size_t size = n > BLOCK_MIN ? n : BLOCK_MIN;
        b = tsr_malloc(sizeof *b + size);
        b->size = size;
        b->used = 0;
        b->next = NULL;
        if (!d->blocks) d->blocks = b;
        else {
            json_block *last = d->blocks;
            while (last->next) last = last->next;
            last->next = b;
        }
    }
    d->cur = b;
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

static void arena_reset(json_doc *d) {
    for (json_block *b = d->blocks; b; b = b->next) b->used = 0;
    d->cur = d->blocks;
}

/* ---- parser ---- */

typedef struct parser {
    const unsigned char *s;
    size_t n, i;
    json_doc *d;
    json_error *err;
} parser;

static int fail(parser *p, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(parser *p, size_t pos, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err->msg, sizeof p->err->msg, fmt, ap);
    va_end(ap);
    p->err->pos = pos;
    return -1;
}

/* Describes the byte at i for messages: 'x', or byte 0xNN, or end of line. */
static const char *what_at(const parser *p, size_t i, char *buf, size_t cap) {
    if (i >= p->n) snprintf(buf, cap, "end of line");
    else if (p->s[i] >= 0x21 && p->s[i] < 0x7f) snprintf(buf, cap, "'%c'", p->s[i]);
    else snprintf(buf, cap, "byte 0x%02x", p->s[i]);
    return buf;
}

static void skip_ws(parser *p) {
    while (p->i < p->n &&
           (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int hex4(parser *p, size_t at, unsigned *out) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        if (at + k >= p->n) return fail(p, at + k, "\\u escape needs 4 hex digits");
        unsigned c = p->s[at + k], h;
        if (c >= '0' && c <= '9') h = c - '0';
        else if (c >= 'a' && c <= 'f') h = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') h = c - 'A' + 10;
        else return fail(p, at + k, "\\u escape needs 4 hex digits");
        v = v << 4 | h;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(unsigned char *o, unsigned cp) {
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the valid UTF-8 sequence at s[i] (1..4), or 0 when it is invalid (overlong forms,
 * surrogates and code points above U+10FFFF are invalid). */
static size_t utf8_len(const unsigned char *s, size_t i, size_t n) {
    unsigned c = s[i];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    if (i + len > n) return 0;
    if (s[i + 1] < lo || s[i + 1] > hi) return 0;
    for (size_t k = 2; k < len; k++)
        if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
    return len;
}

/* Parses the string starting at the opening quote p->i; decoded into the arena. */
static int parse_string(parser *p, const char **out, size_t *out_len) {
    size_t start = p->i++;
    size_t end = p->i; /* find the closing quote first, to size the buffer */
    while (end < p->n && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->n) return fail(p, start, "unterminated string");
    unsigned char *o = arena_alloc(p->d, end - p->i + 1);
    size_t k = 0;
    char buf[24];
    while (p->s[p->i] != '"') {
        unsigned c = p->s[p->i];
        if (c < 0x20)
            return fail(p, p->i, "raw control character byte 0x%02x in a string (escape it)", c);
        if (c != '\\') {
            size_t len = utf8_len(p->s, p->i, p->n);
            if (!len) return fail(p, p->i, "invalid UTF-8 (byte 0x%02x)", c);
            memcpy(o + k, p->s + p->i, len);
            k += len;
            p->i += len;
            continue;
        }
        size_t at = p->i;
        unsigned e = p->s[p->i + 1];
        p->i += 2;
        switch (e) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u': {
            unsigned cp = 0, lo = 0;
            if (hex4(p, p->i, &cp)) return -1;
            p->i += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return fail(p, at, "lone low surrogate \\u%04X", cp);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (p->i + 1 >= p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
                    return fail(p, at, "high surrogate \\u%04X not followed by a low surrogate",
                                cp);
                if (hex4(p, p->i + 2, &lo)) return -1;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return fail(p, p->i, "high surrogate \\u%04X followed by \\u%04X, not a low "
                                "surrogate", cp, lo);
                p->i += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            k += put_utf8(o + k, cp);
            break;
        }
        default:
            if (e >= 0x21 && e < 0x7f) return fail(p, at, "invalid escape '\\%c' in a string", e);
            return fail(p, at, "invalid escape: '\\' followed by %s",
                        what_at(p, at + 1, buf, sizeof buf));
        }
    }
    p->i++; /* closing quote */
    o[k] = '\0';
    *out = (const char *)o;
    *out_len = k;
    return 0;
}

static int parse_number(parser *p, json_value *v) {
    size_t start = p->i, i = p->i;
    char buf[24];
    if (i < p->n && p->s[i] == '-') i++;
    if (i < p->n && p->s[i] == '0') i++;
    else if (i < p->n && p->s[i] >= '1' && p->s[i] <= '9')
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') i++;
    else return fail(p, i, "invalid number: expected a digit, found %s", what_at(p, i, buf, sizeof buf));
    if (i < p->n && p->s[i] == '.') {
        i++;
        if (i >= p->n || p->s[i] < '0' || p->s[i] > '9')
            return fail(p, i, "invalid number: expected a digit after '.'");
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') i++;
    }
    if (i < p->n && (p->s[i] == 'e' || p->s[i] == 'E')) {
        i++;
        if (i < p->n && (p->s[i] == '+' || p->s[i] == '-')) i++;
        if (i >= p->n || p->s[i] < '0' || p->s[i] > '9')
            return fail(p, i, "invalid number: expected a digit in the exponent");
        while (i < p->n && p->s[i] >= '0' && p->s[i] <= '9') i++;
    }
    size_t len = i - start;
    char small[64], *tmp = len < sizeof small ? small : tsr_malloc(len + 1);
    memcpy(tmp, p->s + start, len);
    tmp[len] = '\0';
    v->type = JSON_NUMBER;
    v->num = strtod(tmp, NULL); /* the grammar was checked above; overflow gives +-HUGE_VAL */
    if (tmp != small) free(tmp);
    p->i = i;
    return 0;
}

static int parse_value(parser *p, json_value *v, int depth);

static int parse_container(parser *p, json_value *v, int depth, int is_object) {
    char buf[24];
    if (depth >= JSON_MAX_DEPTH) return fail(p, p->i, "nesting deeper than %d", JSON_MAX_DEPTH);
    v->type = is_object ? JSON_OBJECT : JSON_ARRAY;
    char close = is_object ? '}' : ']';
    p->i++;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        return 0;
    }
    json_value **tail = &v->child;
    for (;;) {
        json_value *c = arena_alloc(p->d, sizeof *c);
        memset(c, 0, sizeof *c);
        if (is_object) {
            if (p->i >= p->n || p->s[p->i] != '"')
                return fail(p, p->i, "expected a member name in quotes, found %s",
                            what_at(p, p->i, buf, sizeof buf));
            if (parse_string(p, &c->key, &c->key_len)) return -1;
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':')
                return fail(p, p->i, "expected ':' after a member name, found %s",
                            what_at(p, p->i, buf, sizeof buf));
            p->i++;
            skip_ws(p);
        }
        if (parse_value(p, c, depth + 1)) return -1;
        *tail = c;
        tail = &c->next;
        v->len++;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            skip_ws(p);
            continue;
        }
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            return 0;
        }
        return fail(p, p->i, "expected ',' or '%c', found %s", close,
                    what_at(p, p->i, buf, sizeof buf));
    }
}

static int parse_literal(parser *p, json_value *v, const char *word, json_type t) {
    size_t len = strlen(word);
    if (p->n - p->i < len || memcmp(p->s + p->i, word, len) != 0)
        return fail(p, p->i, "invalid literal (expected '%s')", word);
    v->type = t;
    p->i += len;
    return 0;
}

static int parse_value(parser *p, json_value *v, int depth) {
    char buf[24];
    if (p->i >= p->n) return fail(p, p->i, "expected a value, found end of line");
    switch (p->s[p->i]) {
    case '{': return parse_container(p, v, depth, 1);
    case '[': return parse_container(p, v, depth, 0);
    case '"':
        v->type = JSON_STRING;
        return parse_string(p, &v->str, &v->len);
    case 't': return parse_literal(p, v, "true", JSON_TRUE);
    case 'f': return parse_literal(p, v, "false", JSON_FALSE);
    case 'n': return parse_literal(p, v, "null", JSON_NULL);
    default:
        if (p->s[p->i] == '-' || (p->s[p->i] >= '0' && p->s[p->i] <= '9'))
            return parse_number(p, v);
        return fail(p, p->i, "expected a value, found %s", what_at(p, p->i, buf, sizeof buf));
    }
}

int json_parse(json_doc *d, const char *s, size_t n, json_value **root, json_error *err) {
    arena_reset(d);
    parser p = {(const unsigned char *)s, n, 0, d, err};
    err->pos = 0;
    err->msg[0] = '\0';
    json_value *v = arena_alloc(d, sizeof *v);
    memset(v, 0, sizeof *v);
    skip_ws(&p);
    if (parse_value(&p, v, 0)) return -1;
    skip_ws(&p);
    if (p.i != n) {
        char buf[24];
        return fail(&p, p.i, "unexpected %s after the value", what_at(&p, p.i, buf, sizeof buf));
    }
    *root = v;
    return 0;
}

int json_key_is(const json_value *m, const char *name) {
    size_t len = strlen(name);
    return m->key && m->key_len == len && memcmp(m->key, name, len) == 0;
}

int json_key_plain(const json_value *m) { return m->key && strlen(m->key) == m->key_len; }

int json_str_plain(const json_value *v) {
    return v->type == JSON_STRING && strlen(v->str) == v->len;
}

const json_value *json_get(const json_value *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    const json_value *found = NULL;
    for (const json_value *c = obj->child; c; c = c->next)
        if (json_key_is(c, key)) found = c;
    return found;
}

const char *json_type_name(json_type t) {
    static const char *const names[] = {"null", "false", "true", "number", "string", "array",
                                        "object"};
    _Static_assert(sizeof names / sizeof names[0] == JSON_TYPE_COUNT, "json_type names");
    return (unsigned)t < JSON_TYPE_COUNT ? names[t] : "?";
}

const char *json_describe(const json_value *v, char *buf, size_t cap) {
    if (!cap) return buf;
    if (v->type == JSON_NUMBER) {
        tsr_fmt_shortest(buf, cap, v->num);
    } else if (v->type == JSON_ARRAY || v->type == JSON_OBJECT) {
        snprintf(buf, cap, "an %s of %zu%s", v->type == JSON_ARRAY ? "array" : "object", v->len,
                 v->type == JSON_OBJECT ? (v->len == 1 ? " member" : " members") : "");
    } else if (v->type != JSON_STRING) {
        snprintf(buf, cap, "%s", json_type_name(v->type));
    } else {
        size_t o = 0, keep = cap > 72 ? 60 : cap / 2;
        buf[o++] = '"';
        for (size_t i = 0; i < v->len && o + 8 < cap; i++) {
            unsigned char c = (unsigned char)v->str[i];
            if (i == keep) {
                o += (size_t)snprintf(buf + o, cap - o, "...");
                break;
            }
            if (c == '"' || c == '\\') o += (size_t)snprintf(buf + o, cap - o, "\\%c", c);
            else if (c < 32) o += (size_t)snprintf(buf + o, cap - o, "\\u%04x", c);
            else buf[o++] = (char)c;
        }
        snprintf(buf + o, cap - o, "\"");
    }
    return buf;
}

void json_fput_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 32) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}
