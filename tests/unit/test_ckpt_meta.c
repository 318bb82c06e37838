/* test_ckpt_meta.c — ck_meta_check, the identities every checkpoint reader enforces
 * (checkpoint/ckpt_meta.c, docs/checkpoint-format.md "What a reader checks"). No MPI, no file.
 *
 * A consistent record passes; each identity broken by one (data_cursor, optim_step, a negative
 * counter, a zero global_batch) fails naming the attribute; skipped_batches parses "lo-hi,..."
 * (sums the skipped batches into the data_cursor identity) and refuses a trailing comma, junk,
 * hi < lo, a negative lo and a sum that overflows int64; fingerprints_agreed is 0, 1 or -1 (absent
 * in a file written before it: docs/health.md "Verified checkpoints").
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ckpt_h5.h"
#include "tap.h"

static ckpt_meta m; /* 200 KiB: not on the stack */

static void base(void) {
    memset(&m, 0, sizeof m);
    m.step = 10, m.tokens = 2560, m.world_size = 2, m.global_batch = 8, m.seed = 1;
    m.optim_step = 9, m.updates_skipped = 1, m.rollbacks = 1;
    snprintf(m.skipped_batches, sizeof m.skipped_batches, "4-7,12-13"); /* 3 + 1 batches */
    m.data_cursor = (10 + 4) * 8;
}

/* ck_meta_check on m: 1 when it fails and why contains want (want NULL: when it passes). */
static int check(const char *want, char *why, size_t cap) {
    why[0] = '\0';
    int rc = ck_meta_check(&m, why, cap);
    return want ? rc != 0 && strstr(why, want) != NULL : rc == 0;
}

int main(void) {
    char why[1024];
    tap_plan(14);
    base();
    tap_ok(check(NULL, why, sizeof why), "consistent: data_cursor = (10 + 4 skipped) x 8 (%s)", why);
    m.data_cursor += 1;
    tap_ok(check("data_cursor = 113, expected (step 10 + skipped batches 4) x global_batch 8 = 112",
                 why, sizeof why), "data_cursor + 1 refused: %s", why);
    base();
    m.optim_step = 11;
    tap_ok(check("optim_step = 11, expected 0..step (10)", why, sizeof why),
           "optim_step > step refused: %s", why);
    base();
    m.optim_step = -1; /* absent (version 1) */
    tap_ok(check(NULL, why, sizeof why), "optim_step -1 (absent in version 1) accepted (%s)", why);
    base();
    m.tokens = -1;
    tap_ok(check("tokens = -1, expected >= 0", why, sizeof why), "negative tokens refused: %s", why);
    base();
    m.global_batch = 0, m.data_cursor = 0;
    tap_ok(check("global_batch = 0: expected >= 1", why, sizeof why), "global_batch 0 refused: %s",
           why);
    base();
    m.fingerprints_agreed = 2;
    tap_ok(check("fingerprints_agreed = 2, expected 0 or 1", why, sizeof why),
           "fingerprints_agreed 2 refused: %s", why);
    base();
    m.fingerprints_agreed = -1; /* absent (written before the attribute) */
    tap_ok(check(NULL, why, sizeof why), "fingerprints_agreed -1 (absent) accepted (%s)", why);
    static const char *const bad_skips[] = {"4-7,", "4-7;12-13", "7-4", "-1-3", "4-7,x",
                                            "0-9223372036854775807,0-9223372036854775807"};
    for (int k = 0; k < 6; k++) {
        base();
        snprintf(m.skipped_batches, sizeof m.skipped_batches, "%s", bad_skips[k]);
        tap_ok(check("skipped_batches", why, sizeof why), "skipped_batches \"%s\" refused: %s",
               bad_skips[k], why);
    }
    return tap_done();
}
