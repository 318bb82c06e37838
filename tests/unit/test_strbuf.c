/* test_strbuf.c — the growing string of src/base/strbuf.h: appends across many reallocations keep
 * every byte and the NUL, an empty add makes a valid empty string, sb_addn copies embedded NULs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "strbuf.h"

int main(void) {
    tap_plan(5);
    strbuf e = {0};
    sb_add(&e, "");
    tap_ok(e.s && e.s[0] == '\0' && e.n == 0, "sb_add of \"\": a valid empty string");
    free(e.s);

    strbuf b = {0};
    char want[20000] = "", num[16];
    for (int i = 0; i < 3000; i++) {
        snprintf(num, sizeof num, "%d,", i);
        sb_add(&b, num);
        strcat(want, num);
    }
    tap_ok(b.n == strlen(want) && strcmp(b.s, want) == 0,
           "3000 appends (%zu bytes, many reallocations): every byte in order", b.n);
    tap_ok(b.cap > b.n && b.s[b.n] == '\0', "NUL-terminated within its capacity (%zu > %zu)", b.cap,
           b.n);
    free(b.s);

    strbuf z = {0};
    sb_addn(&z, "ab\0cd", 5);
    sb_addn(&z, "ef", 1);
    tap_ok(z.n == 6 && memcmp(z.s, "ab\0cde", 7) == 0, "sb_addn: embedded NULs kept, k bytes only");
    sb_addn(&z, NULL, 0);
    tap_ok(z.n == 6 && z.s[6] == '\0', "sb_addn of 0 bytes: unchanged");
    free(z.s);
    return tap_done();
}
