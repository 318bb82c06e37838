/* jinja_util.c — the arena, failure unwinding, byte buffers and the UTF-8 helpers of the Jinja
 * subset. Characters are judged as JavaScript does (\s, String.length), since the reference
 * implementation (@huggingface/jinja) runs on JavaScript strings. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_int.h"
#include "unicode_tables.h"

struct jj_chunk {
    jj_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

enum { JJ_CHUNK = 64 * 1024 };
#define JJ_MAX_STRING ((size_t)32 << 20) /* no string (output included) grows past 32 MiB: a
                                         * conversation renders to KBs, 128k tokens to ~0.5 MB */

void jj_charge(jj_fail_ctx *f, unsigned long long n) {
    f->steps += n;
    if (f->max_steps && f->steps > f->max_steps)
        jj_fail(f, JINJA_EBUDGET, 0, 0, "the render went over its budget of %llu steps (a loop "
                "or recursion too long for a chat template)", f->max_steps);
}

static jj_chunk *new_chunk(jj_arena *a, size_t cap) {
    if (a->max_bytes && a->bytes + cap > a->max_bytes)
        jj_fail(a->f, JINJA_EBUDGET, 0, 0, "the render went over its budget of %zu bytes of "
                "memory (%zu held, %zu more asked)", a->max_bytes, a->bytes, cap);
    jj_chunk *c = cap == JJ_CHUNK ? a->spare : NULL;
    if (c) a->spare = NULL;
    else c = malloc(sizeof *c + cap);
    if (!c) jj_fail(a->f, JINJA_ENOMEM, 0, 0, "out of memory (%zu bytes more)", cap);
    c->cap = cap;
    c->used = 0;
    c->next = a->head;
    a->head = c;
    a->bytes += cap;
    if (a->bytes > a->peak) a->peak = a->bytes;
    return c;
}

void *jj_alloc(jj_arena *a, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    jj_charge(a->f, 1 + (n >> 10));
    jj_chunk *c = a->head;
    if (!c || c->cap - c->used < n) c = new_chunk(a, n > JJ_CHUNK ? n : JJ_CHUNK);
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *jj_strdup(jj_arena *a, const char *s, size_t n) {
    char *p = jj_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void jj_arena_free(jj_arena *a) {
    for (jj_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(a->spare);
    free(a->scratch);
    a->head = a->spare = NULL;
    a->scratch = NULL;
    a->bytes = a->scratch_cap = 0;
}

jj_mark jj_arena_mark(const jj_arena *a) { return (jj_mark){a->head, a->head ? a->head->used : 0}; }

/* Chunks made after the mark go (one kept as the spare); the mark's chunk is cut back. */
void jj_arena_release(jj_arena *a, jj_mark m) {
    while (a->head != m.head) {
        jj_chunk *c = a->head;
        a->head = c->next;
        a->bytes -= c->cap;
        if (c->cap == JJ_CHUNK && !a->spare) a->spare = c;
        else free(c);
    }
    if (a->head) a->head->used = m.used;
}

const char *jj_arena_keep(jj_arena *a, jj_mark m, const char *s, size_t n) {
    if (n + 1 > a->scratch_cap) {
        char *p = realloc(a->scratch, n + 1);
        if (!p) jj_fail(a->f, JINJA_ENOMEM, 0, 0, "out of memory (%zu bytes more)", n + 1);
        a->scratch = p;
        a->scratch_cap = n + 1;
    }
    if (n) memcpy(a->scratch, s, n);
    a->scratch[n] = '\0';
    jj_arena_release(a, m);
    return a->scratch;
}

void jj_fail(jj_fail_ctx *f, int status, int line, int col, const char *fmt, ...) {
    va_list ap;
    f->err->status = status;
    f->err->line = line ? line : f->line;
    f->err->col = line ? col : f->col;
    va_start(ap, fmt);
    vsnprintf(f->err->msg, sizeof f->err->msg, fmt, ap);
    va_end(ap);
    f->status = status;
    f->err->steps = f->steps;
    longjmp(f->jmp, 1);
}

/* ---- buffers: arena memory, so a failure that unwinds leaks nothing ---- */
void jj_buf_init(jj_buf *b, jj_arena *a) {
    b->a = a;
    b->p = NULL;
    b->n = b->cap = 0;
}

void jj_buf_add(jj_buf *b, const char *s, size_t n) {
    jj_charge(b->a->f, 1 + (n >> 10));
    if (n > JJ_MAX_STRING - b->n)
        jj_fail(b->a->f, JINJA_ERUNTIME, 0, 0, "a string would exceed %zu MiB",
                JJ_MAX_STRING >> 20);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = jj_alloc(b->a, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void jj_buf_adds(jj_buf *b, const char *s) { jj_buf_add(b, s, strlen(s)); }
void jj_buf_addc(jj_buf *b, char c) { jj_buf_add(b, &c, 1); }

/* ---- UTF-8 ---- */
unsigned jj_utf8_decode(const char *s, size_t n, size_t *len) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[0];
    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (k == 0 || k > n) {
        *len = 1;
        return 0xfffd;
    }
    unsigned cp = k == 1 ? c : k == 2 ? (c & 0x1f) : k == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t i = 1; i < k; i++) {
        if ((u[i] & 0xc0) != 0x80) {
            *len = 1;
            return 0xfffd;
        }
        cp = cp << 6 | (u[i] & 0x3f);
    }
    *len = k;
    return cp;
}

void jj_utf8_encode(jj_buf *b, unsigned cp) {
    char t[4];
    if (cp >= 0xd800 && cp < 0xe000) cp = 0xfffd; /* a lone surrogate prints as U+FFFD in node */
    if (cp < 0x80) {
        t[0] = (char)cp;
        jj_buf_add(b, t, 1);
    } else if (cp < 0x800) {
        t[0] = (char)(0xc0 | cp >> 6);
        t[1] = (char)(0x80 | (cp & 0x3f));
        jj_buf_add(b, t, 2);
    } else if (cp < 0x10000) {
        t[0] = (char)(0xe0 | cp >> 12);
        t[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        t[2] = (char)(0x80 | (cp & 0x3f));
        jj_buf_add(b, t, 3);
    } else {
        t[0] = (char)(0xf0 | cp >> 18);
        t[1] = (char)(0x80 | (cp >> 12 & 0x3f));
        t[2] = (char)(0x80 | (cp >> 6 & 0x3f));
        t[3] = (char)(0x80 | (cp & 0x3f));
        jj_buf_add(b, t, 4);
    }
}

/* JavaScript's WhiteSpace and LineTerminator: what \s, trim() and trimEnd() match (the
 * tokenizer's table of \s, generated from node) */
static int js_space(unsigned cp) {
    return tsr_uc_in(&tsr_uc_space, cp);
}

size_t jj_space_at(const char *s, size_t n) {
    if (n == 0) return 0;
    size_t len;
    unsigned cp = jj_utf8_decode(s, n, &len);
    return js_space(cp) ? len : 0;
}

size_t jj_space_before(const char *s, size_t n) {
    if (n == 0) return 0;
    size_t k = 1;
    while (k < 4 && k < n && ((unsigned char)s[n - k] & 0xc0) == 0x80) k++;
    size_t len;
    unsigned cp = jj_utf8_decode(s + n - k, k, &len);
    return len == k && js_space(cp) ? k : 0;
}

size_t jj_utf16_len(const char *s, size_t n) {
    size_t units = 0;
    for (size_t i = 0, len; i < n; i += len) {
        unsigned cp = jj_utf8_decode(s + i, n - i, &len);
        units += cp >= 0x10000 ? 2 : 1;
    }
    return units;
}

void jj_rt_fail(jj_interp *in, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jj_fail(in->f, JINJA_ERUNTIME, 0, 0, "%s", msg);
}
