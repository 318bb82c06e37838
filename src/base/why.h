/* why.h — the reason a check gives for its answer, formatted into a buffer its caller owns
 * (runlock's stale holder, the chat template's and the pipeline schedule's refusals). */
#ifndef TSR_WHY_H
#define TSR_WHY_H

#include <stddef.h>

/* Writes the printf-formatted reason into why (cap bytes, cut to fit) and returns rc. */
int tsr_why(int rc, char *why, size_t cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
