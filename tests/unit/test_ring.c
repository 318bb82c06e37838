/* test_ring.c — context parallelism's pieces that need no MPI (src/model/model_ring.c;
 * docs/parallelism.md):
 *   - the zig-zag split: for N = 1, 2, 4, 8 the ranks' local positions are a permutation of the
 *     sequence, rank r holds chunks r and 2N-1-r in order, and every rank's causal attention work
 *     (sum over its positions of p + 1 keys) is the same; ring_split and ring_join are inverses
 *     (B = 3 rows, every rank's share gathered).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_ring.h"
#include "tap.h"

static void check_layout(void) {
    int ok_perm = 1, ok_chunks = 1, ok_work = 1;
    for (int N = 1; N <= 8; N *= 2) {
        const int TT = 2 * N * 3, Tl = TT / N, c = 3;
        int *seen = calloc((size_t)TT, sizeof *seen);
        long work0 = -1;
        for (int r = 0; r < N; r++) {
            long work = 0;
            for (int t = 0; t < Tl; t++) {
                const int p = ring_position(N, r, TT, t), chunk = t < c ? r : 2 * N - 1 - r;
                seen[p]++;
                ok_chunks &= p / c == chunk && p % c == t % c;
                work += p + 1;
            }
            if (work0 < 0) work0 = work;
            ok_work &= work == work0;
        }
        for (int p = 0; p < TT; p++) ok_perm &= seen[p] == 1;
        free(seen);
    }
    tap_ok(ok_perm, "zig-zag: the local positions of N = 1, 2, 4, 8 ranks are a permutation of "
                    "the sequence");
    tap_ok(ok_chunks, "zig-zag: rank r holds chunks r and 2N-1-r, in order");
    tap_ok(ok_work, "zig-zag: every rank's causal attention work (its positions' key counts) is "
                    "the same");
    int ok = 1;
    for (int N = 1; N <= 4; N *= 2) {
        const int TT = 16, Tl = TT / N;
        int32_t full[3 * 16], back[3 * 16], all[3 * 16];
        for (int i = 0; i < 3 * TT; i++) full[i] = 1000 * i + 7;
        for (int r = 0; r < N; r++) ring_split(all + r * 3 * Tl, full, 4, 3, N, r, TT);
        ring_join(back, all, 4, 3, N, TT);
        ok &= !memcmp(full, back, sizeof full);
        for (int r = 0; r < N; r++)
            for (int b = 0; b < 3; b++)
                for (int t = 0; t < Tl; t++)
                    ok &= all[(r * 3 + b) * Tl + t] == full[b * TT + ring_position(N, r, TT, t)];
    }
    tap_ok(ok, "ring_split gives each rank its positions of every row; ring_join undoes it");
}

int main(void) {
    tap_plan(4);
    check_layout();
    return tap_done();
}
