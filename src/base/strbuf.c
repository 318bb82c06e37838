/* strbuf.c — a growing NUL-terminated string (strbuf.h). */
#include "strbuf.h"

#include <string.h>

#include "common.h"

void sb_addn(strbuf *b, const char *p, size_t k) {
    if (b->n + k + 1 > b->cap) {
        b->cap = (b->n + k + 1) * 2;
        b->s = tsr_realloc(b->s, b->cap);
    }
    if (k) memcpy(b->s + b->n, p, k);
    b->n += k;
    b->s[b->n] = '\0';
}

void sb_add(strbuf *b, const char *s) { sb_addn(b, s, strlen(s)); }
