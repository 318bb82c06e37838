/* test_sdc_vote.c — the judgement of a fingerprint comparison (src/train/sdc_vote.h,
 * docs/health.md "The verdict") on canned tables: agreement, a copy outvoted by a majority, two
 * copies with no majority, a tie, several replica sets per entry (hsdp, experts), entries without
 * a replica, a set of one, and more culprits than a vote names. */
#include "tap.h"
#include "train/sdc_vote.h"

/* A table of W ranks x K entries (W K <= 15), every fingerprint base + entry, every color 0, and
 * room for 4 votes */
typedef struct table {
    int W, K;
    uint32_t crc[15];
    int color[15];
    sdc_vote v[4];
} table;

static table fill(int W, int K) {
    table t = {.W = W, .K = K};
    for (int r = 0; r < W; r++)
        for (int k = 0; k < K; k++) t.crc[r * K + k] = 0x1000u + (uint32_t)k;
    return t;
}

/* sdc_vote_find over t, keeping at most max_votes votes */
static int find(table *t, int max_votes) {
    return sdc_vote_find(t->W, t->K, t->crc, t->color, t->v, max_votes);
}

static void agreement(void) {
    table t = fill(4, 3);
    tap_ok(find(&t, 4) == 0, "4 ranks x 3 entries that agree: no vote");
}

static void outvoted(void) {
    table t = fill(4, 3);
    const sdc_vote *v = t.v;
    t.crc[2 * 3 + 1] ^= 1u << 20; /* rank 2's entry 1 */
    int n = find(&t, 4);
    tap_ok(n == 1 && v[0].entry == 1 && v[0].copies == 4 && v[0].majority && v[0].n_bad == 1 &&
               v[0].bad[0] == 2 && v[0].good == 0x1001u && v[0].bad_crc[0] == (0x1001u ^ (1u << 20)),
           "a flipped copy among 4: entry 1, rank 2 outvoted by the 3 that agree on 0x1001 (%d votes)", n);
}

static void two_copies(void) {
    table t = fill(2, 2);
    const sdc_vote *v = t.v;
    t.crc[1 * 2 + 0] = 7;
    int n = find(&t, 2);
    tap_ok(n == 1 && !v[0].majority && v[0].n_bad == 2 && v[0].bad[0] == 0 && v[0].bad[1] == 1,
           "two copies that differ: no majority, both ranks named (unattributed)");
}

static void tie(void) {
    uint32_t crc[4];
    int color[4] = {0, 0, 0, 0};
    sdc_vote v[1];
    crc[0] = crc[1] = 5, crc[2] = crc[3] = 6;
    int n = sdc_vote_find(4, 1, crc, color, v, 1);
    tap_ok(n == 1 && !v[0].majority && v[0].n_bad == 4, "2 against 2: a tie is no majority");
}

/* hsdp 2 x 3: ranks 0..5, group rank r % 3 is the replica set (color); entry 0 is replicated,
 * entry 1 has no replica (-1: different on every rank, never compared) */
static void replica_sets(void) {
    enum { W = 6, K = 2 };
    uint32_t crc[W * K];
    int color[W * K];
    sdc_vote v[4];
    for (int r = 0; r < W; r++) {
        crc[r * K] = 100u + (uint32_t)(r % 3), color[r * K] = r % 3;
        crc[r * K + 1] = 200u + (uint32_t)r, color[r * K + 1] = -1;
    }
    tap_ok(sdc_vote_find(W, K, crc, color, v, 4) == 0,
           "hsdp 2 x 3: each replica set agrees within itself, unreplicated entries are not compared");
    crc[4 * K] = 999; /* rank 4, set 1: its copy and rank 1's differ */
    int n = sdc_vote_find(W, K, crc, color, v, 4);
    tap_ok(n == 1 && v[0].color == 1 && v[0].copies == 2 && !v[0].majority && v[0].bad[0] == 1 &&
               v[0].bad[1] == 4,
           "a flip in replica set 1 (ranks 1 and 4): that set alone, two copies, unattributed");
}

static void single_copy(void) {
    uint32_t crc[3] = {1, 2, 3};
    int color[3] = {0, 1, 2};
    sdc_vote v[1];
    tap_ok(sdc_vote_find(3, 1, crc, color, v, 1) == 0, "sets of one copy each: nothing to compare");
}

/* 20 ranks, 10 of which disagree with the other 10: no majority; the vote names the first 8 */
static void many_bad(void) {
    enum { W = 20 };
    uint32_t crc[W];
    int color[W];
    sdc_vote v[1];
    for (int r = 0; r < W; r++) crc[r] = r < 12 ? 1 : (uint32_t)(50 + r), color[r] = 0;
    int n = sdc_vote_find(W, 1, crc, color, v, 1);
    tap_ok(n == 1 && v[0].majority && v[0].good == 1 && v[0].n_bad == 8 && v[0].bad[0] == 12 &&
               v[0].bad[7] == 19,
           "12 of 20 agree: the 8 others outvoted, in rank order");
    for (int r = 0; r < W; r++) crc[r] = r < 10 ? 1 : 2;
    n = sdc_vote_find(W, 1, crc, color, v, 1);
    tap_ok(n == 1 && !v[0].majority && v[0].n_bad == W && v[0].bad[7] == 7,
           "10 against 10: unattributed, 20 copies counted, the first %d named", SDC_VOTE_MAX_BAD);
}

static void more_than_cap(void) {
    table t = fill(3, 5);
    const sdc_vote *v = t.v;
    for (int k = 0; k < 5; k++) t.crc[0 * 5 + k] = 0;
    int n = find(&t, 2);
    tap_ok(n == 5 && v[0].entry == 0 && v[1].entry == 1 && v[0].bad[0] == 0,
           "5 entries differ, room for 2 votes: all 5 counted, the first 2 kept in entry order");
}

/* a replay's tie-break: who computed the odd result */
static void replay_suspect(void) {
    tap_ok(sdc_replay_suspect(1, 2, 1, 2) == SDC_RP_ORIGINAL,
           "replay: the third rank agrees with the replay: the original is the odd one");
    tap_ok(sdc_replay_suspect(1, 2, 1, 1) == SDC_RP_REPLAYER,
           "replay: the third rank agrees with the original: the replayer is");
    tap_ok(sdc_replay_suspect(1, 2, 1, 3) == SDC_RP_NOBODY, "replay: three results: nobody (unattributed)");
    tap_ok(sdc_replay_suspect(1, 2, 0, 0) == SDC_RP_EITHER, "replay: two ranks: either (second tries decide)");
}

int main(void) {
    tap_plan(14);
    agreement();
    outvoted();
    two_copies();
    tie();
    replica_sets();
    single_copy();
    many_bad();
    more_than_cap();
    replay_suspect();
    return tap_done();
}
