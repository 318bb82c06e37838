/* test_mix.c — the batch composition of data mixes (src/data/mix.c): exact shares per global
 * batch, the schedule switch, positions that cover each stream without gaps or repeats, the
 * cumulative counts a resume relies on, and the single-stream identity. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/mix.h"
#include "tap.h"

/* Every batch in [d0, d1): stream counts equal want (per phase); per stream the positions drawn
 * are exactly cum(d0) .. cum(d1)-1, each once; slots split over R "ranks" give the same. */
static int check_batches(const tsr_mix *m, int64_t d0, int64_t d1, int R, char *why, size_t n) {
    int64_t gb = m->gb, cum0[TSR_MAX_STREAMS], cum1[TSR_MAX_STREAMS];
    mix_cumulative(m, d0, cum0);
    mix_cumulative(m, d1, cum1);
    int64_t total[TSR_MAX_STREAMS] = {0};
    unsigned char *seen[TSR_MAX_STREAMS];
    for (int k = 0; k < m->n_streams; k++) seen[k] = calloc((size_t)(cum1[k] - cum0[k]) + 1, 1);
    int *st = malloc((size_t)gb * sizeof *st);
    uint64_t *pos = malloc((size_t)gb * sizeof *pos);
    int bad = 0;
    for (int64_t d = d0; d < d1 && !bad; d++) {
        int64_t cnt[TSR_MAX_STREAMS] = {0};
        for (int r = 0; r < R; r++) /* each rank asks for its own slots only */
            mix_slots(m, d, gb * r / R, gb * (r + 1) / R, st + gb * r / R, pos + gb * r / R);
        for (int64_t j = 0; j < gb && !bad; j++) {
            int k = st[j];
            cnt[k]++;
            int64_t off = (int64_t)pos[j] - cum0[k];
            if (off < 0 || off >= cum1[k] - cum0[k] || seen[k][off]++) {
                snprintf(why, n, "batch %lld slot %lld: stream %d position %llu out of range or "
                         "repeated", (long long)d, (long long)j, k, (unsigned long long)pos[j]);
                bad = 1;
            }
        }
        const int64_t *want = m->count[mix_phase(m, d)];
        for (int k = 0; k < m->n_streams && !bad; k++) {
            total[k] += cnt[k];
            if (cnt[k] != want[k]) {
                snprintf(why, n, "batch %lld: stream %d has %lld samples, the plan says %lld",
                         (long long)d, k, (long long)cnt[k], (long long)want[k]);
                bad = 1;
            }
        }
    }
    for (int k = 0; k < m->n_streams; k++) {
        if (!bad && total[k] != cum1[k] - cum0[k]) {
            snprintf(why, n, "stream %d: %lld drawn, cumulative counts say %lld", k,
                     (long long)total[k], (long long)(cum1[k] - cum0[k]));
            bad = 1;
        }
        free(seen[k]);
    }
    free(st);
    free(pos);
    return !bad;
}

int main(void) {
    tap_plan(9);
    char why[256] = "";
    int64_t out[TSR_MAX_STREAMS];

    double w1[3] = {0.9, 0.1, 0};
    mix_apportion(w1, 3, 16, out); /* 14.4, 1.6, 0 -> 14 + 2 (largest remainder), never the 0 */
    tap_ok(out[0] == 14 && out[1] == 2 && out[2] == 0, "apportion 0.9/0.1/0 of 16: %lld %lld %lld",
           (long long)out[0], (long long)out[1], (long long)out[2]);
    double w2[3] = {1, 1, 1};
    mix_apportion(w2, 3, 8, out); /* ties go to the lower index */
    tap_ok(out[0] == 3 && out[1] == 3 && out[2] == 2, "apportion thirds of 8: %lld %lld %lld (ties to the lower index)",
           (long long)out[0], (long long)out[1], (long long)out[2]);

    /* two phases: 0.7/0.3 of 20 until batch 50, then domain x3 -> 0.7/0.9 -> 8.75/11.25 */
    tsr_mix m;
    double w[TSR_MAX_PHASES + 1][TSR_MAX_STREAMS] = {{0.7, 0.3}, {0.7, 0.9}};
    int64_t start[2] = {0, 50};
    int rc = mix_build(&m, 2, 2, start, (const double(*)[TSR_MAX_STREAMS])w, 20, 42, why, sizeof why);
    tap_ok(rc == 0 && m.count[0][0] == 14 && m.count[0][1] == 6 && m.count[1][0] == 9 &&
               m.count[1][1] == 11,
           "plan: 14/6 per batch, then 9/11 from batch 50 (%s)", why);
    tap_ok(check_batches(&m, 0, 120, 1, why, sizeof why), "120 batches: exact counts per batch, "
           "positions gap-free and unique per stream, across the switch %s", why);
    int64_t c[TSR_MAX_STREAMS];
    mix_cumulative(&m, 73, c);
    tap_ok(c[0] == 50 * 14 + 23 * 9 && c[1] == 50 * 6 + 23 * 11,
           "cumulative counts at batch 73 in O(phases): %lld %lld", (long long)c[0], (long long)c[1]);
    int same = check_batches(&m, 37, 91, 4, why, sizeof why);
    for (int64_t d = 37; d < 91 && same; d++) { /* 4 ranks' slot ranges == the whole batch at once */
        int sa[20], sb[20];
        uint64_t pa[20], pb[20];
        mix_slots(&m, d, 0, 20, sa, pa);
        for (int r = 0; r < 4; r++) mix_slots(&m, d, 5 * r, 5 * r + 5, sb + 5 * r, pb + 5 * r);
        same = !memcmp(sa, sb, sizeof sa) && !memcmp(pa, pb, sizeof pa);
    }
    tap_ok(same, "batches 37..90 from 4 ranks' slot ranges: the same streams and positions as one "
           "rank's whole batch %s", why);

    int st1[20], st2[20];
    uint64_t p1[20], p2[20];
    mix_slots(&m, 7, 0, 20, st1, p1);
    mix_slots(&m, 8, 0, 20, st2, p2);
    tap_ok(memcmp(st1, st2, sizeof st1) != 0, "the streams' slots are spread differently in each batch");

    double wone[TSR_MAX_PHASES + 1][TSR_MAX_STREAMS] = {{1}};
    int64_t s0[1] = {0};
    mix_build(&m, 1, 1, s0, (const double(*)[TSR_MAX_STREAMS])wone, 8, 42, why, sizeof why);
    int ok = 1;
    for (int64_t d = 0; d < 5; d++) {
        mix_slots(&m, d, 2, 6, st1, p1);
        for (int j = 0; j < 4; j++) ok &= st1[j] == 0 && p1[j] == (uint64_t)(d * 8 + 2 + j);
    }
    tap_ok(ok, "one stream: slot j of batch d is position d x gb + j (the single-dataset order)");

    double wz[TSR_MAX_PHASES + 1][TSR_MAX_STREAMS] = {{1, 1}, {0, 0}};
    int64_t sz[2] = {0, 10};
    rc = mix_build(&m, 2, 2, sz, (const double(*)[TSR_MAX_STREAMS])wz, 8, 42, why, sizeof why);
    tap_ok(rc != 0 && strstr(why, "phase 1"), "a phase whose weights are all 0 is refused: %s", why);
    return tap_done();
}
