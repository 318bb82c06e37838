/* test_memtab.c — the CUDA backend's table of live device blocks (kernels/cuda/tcu_memtab.h),
 * which tcu_mem_stats and metrics.jsonl's peak_mem_bytes stand on under device = cuda. It is
 * plain host C, so it is checked here on every machine, against a reference kept as a plain
 * array: 200,000 random adds and removes over addresses spaced like cudaMalloc's (256-byte
 * aligned, packed in runs so that probe runs collide and wrap around the table's end), with the
 * live bytes, the peak, the count and every live block's presence checked as it goes; removal by
 * backward shift is what can lose a block, so every block still live is looked up again after
 * each removal batch. Also: unknown and double frees are refused and change nothing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "tcu_memtab.h"

#define MAXLIVE 5000 /* the table grows past 256, 512, ... 16384 slots */
#define OPS 200000

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void) { /* xorshift64*: reproducible without depending on libc's rand */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

typedef struct {
    void *p;
    size_t bytes;
} block;

/* An address no live block has: most from a dense region (consecutive 256-byte slots, so home
 * slots cluster), some far apart. */
static void *fresh_addr(const block *live, int n) {
    for (;;) {
        uintptr_t a = (rnd() % 8) ? 0x7f0000000000u + (uintptr_t)(rnd() % 20000) * 256u
                                  : 0x100000000u + (uintptr_t)(rnd() % (1u << 30)) * 256u;
        int used = 0;
        for (int i = 0; i < n && !used; i++) used = live[i].p == (void *)a;
        if (!used) return (void *)a;
    }
}

/* A removal of a live block must leave every other live block findable: remove it and put it
 * back (the peak does not move: live returns to what it was) */
static int all_findable(tcu_memtab *t, const block *live, int n) {
    for (int i = 0; i < n; i++) {
        if (tcu_memtab_remove(t, live[i].p) != 0) return 0;
        if (tcu_memtab_add(t, live[i].p, live[i].bytes) != 0) return 0;
    }
    return 1;
}

int main(void) {
    tap_plan(7);
    static block live[MAXLIVE];
    int n = 0, bad_sum = 0, bad_find = 0, bad_remove = 0;
    size_t sum = 0, peak = 0, max_cap = 0;
    tcu_memtab t;
    memset(&t, 0, sizeof t);

    for (int op = 0; op < OPS; op++) {
        /* phases: grow towards MAXLIVE, then shrink towards 0, twice, with noise */
        int phase = (op / (OPS / 4)) % 2;
        int add = n == 0 || (n < MAXLIVE && (rnd() % 100) < (phase == 0 ? 65u : 35u));
        if (add) {
            void *p = fresh_addr(live, n);
            size_t bytes = 1 + (size_t)(rnd() % (1u << 24));
            if (tcu_memtab_add(&t, p, bytes) != 0) {
                bad_sum++;
                continue;
            }
            live[n].p = p, live[n].bytes = bytes, n++;
            sum += bytes;
            if (sum > peak) peak = sum;
        } else {
            int k = (int)(rnd() % (uint64_t)n);
            if (tcu_memtab_remove(&t, live[k].p) != 0) bad_remove++;
            sum -= live[k].bytes;
            live[k] = live[--n];
        }
        if (t.live != sum || t.peak != peak || t.n != (size_t)n) bad_sum++;
        if (t.cap > max_cap) max_cap = t.cap;
        if (op % 4999 == 0 && !all_findable(&t, live, n)) bad_find++;
    }
    tap_ok(bad_remove == 0, "%d random adds and removes: every remove of a live block succeeds (%d failed)",
           OPS, bad_remove);
    tap_ok(bad_sum == 0, "live bytes, peak and count equal the reference after every operation "
           "(%d mismatches; peak %zu bytes, table grew to %zu slots)", bad_sum, peak, max_cap);
    tap_ok(bad_find == 0 && all_findable(&t, live, n),
           "every live block is found again after removals by backward shift (%d misses)", bad_find);
    tap_ok(2 * t.n <= t.cap && max_cap >= 2 * MAXLIVE,
           "the table stays at most half full (%zu of %zu slots) and grew to %zu", t.n, t.cap, max_cap);

    /* refusals change nothing */
    size_t live_before = t.live, n_before = t.n;
    void *unknown = (void *)(uintptr_t)0x123400;
    int r1 = tcu_memtab_remove(&t, unknown), r2 = tcu_memtab_remove(&t, NULL);
    tap_ok(r1 == -1 && r2 == -1 && t.live == live_before && t.n == n_before,
           "a pointer never added, and NULL, are refused (-1) and change nothing");
    int r3 = -1, r4 = 0;
    if (n > 0) {
        r3 = tcu_memtab_remove(&t, live[0].p);
        r4 = tcu_memtab_remove(&t, live[0].p);
        sum -= live[0].bytes;
        live[0] = live[--n];
    }
    tap_ok(r3 == 0 && r4 == -1 && t.live == sum, "a double free is refused the second time");

    /* empty it: live back to 0, the peak kept */
    int left = 0;
    while (n > 0) left += tcu_memtab_remove(&t, live[--n].p) != 0;
    tcu_memtab_release(&t);
    tap_ok(left == 0 && t.live == 0 && t.peak == peak && t.key == NULL,
           "removing every block leaves 0 bytes live, the peak (%zu) kept; release frees the table", peak);
    return tap_done();
}
