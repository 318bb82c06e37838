/* strbuf.h — a growing NUL-terminated string (the one string builder of the project).
 *
 * strbuf b = {0}; sb_add(&b, "a"); sb_addn(&b, p, k); ... use b.s (b.n bytes, NUL-terminated
 * once anything was added) ... free(b.s). Out of memory stops the program (tsr_realloc).
 */
#ifndef TSR_STRBUF_H
#define TSR_STRBUF_H

#include <stddef.h>

typedef struct strbuf {
    char *s;    /* the text, NUL-terminated (NULL until the first add) */
    size_t n;   /* its length, without the NUL */
    size_t cap; /* bytes allocated */
} strbuf;

/* Appends the k bytes at p (which may hold NULs; the text stays NUL-terminated). */
void sb_addn(strbuf *b, const char *p, size_t k);
/* Appends the string s ("" makes b.s a valid empty string). */
void sb_add(strbuf *b, const char *s);

#endif
