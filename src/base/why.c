/* why.c — see why.h. */
#include "why.h"

#include <stdarg.h>
#include <stdio.h>

int tsr_why(int rc, char *why, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return rc;
}
