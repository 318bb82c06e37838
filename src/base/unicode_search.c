/* unicode_search.c — membership in the code point range tables of unicode_tables.h (the tables
 * themselves are generated: unicode_tables.c). */
#include "unicode_tables.h"

int tsr_uc_in(const tsr_uc_class *c, uint32_t cp) {
    const uint32_t (*r)[2] = c->r;
    uint32_t a = 0, b = c->n;
    while (a < b) {
        uint32_t m = (a + b) / 2;
        if (cp < r[m][0]) b = m;
        else if (cp > r[m][1]) a = m + 1;
        else return 1;
    }
    return 0;
}
