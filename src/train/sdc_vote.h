/* sdc_vote.h — the judgement of a fingerprint comparison (docs/health.md "Fingerprints"): given
 * every rank's fingerprint of every entry and which ranks must hold the same bytes, the entries
 * whose copies disagree and, where three or more copies allow it, the majority and the ranks
 * outside it. Pure (no MPI, no trainer): every rank runs it on the same gathered table and reaches
 * the same verdict, and tests/unit/test_sdc_vote.c runs it on canned tables. */
#ifndef TSR_SDC_VOTE_H
#define TSR_SDC_VOTE_H

#include <stdint.h>

/* Ranks a vote names at most (the count says how many there were). */
#define SDC_VOTE_MAX_BAD 8

typedef struct sdc_vote {
    int entry;                 /* the entry whose copies disagree */
    int color;                 /* the replica set (the ranks of this color) */
    int copies;                /* ranks in it */
    int majority;              /* 1: more than half of the copies agree; bad[] are the others.
                                * 0: no majority (two copies, or a tie): unattributed, bad[] are
                                * every copy */
    uint32_t good;             /* the majority's fingerprint (majority = 1) */
    int n_bad;                 /* ranks outside the majority, or every copy */
    int bad[SDC_VOTE_MAX_BAD]; /* the first of them, in rank order */
    uint32_t bad_crc[SDC_VOTE_MAX_BAD]; /* their fingerprints */
} sdc_vote;

/* W ranks' fingerprints of K entries, crc[r * K + k], and the replica set each copy belongs to,
 * color[r * K + k]: the ranks of one color must hold the same bytes of entry k; -1: no replica
 * (not compared). The disagreeing (entry, color) pairs, in entry order then color, the first cap
 * of them into out; returns how many there are in all (0: every replica set agrees). */
int sdc_vote_find(int W, int K, const uint32_t *crc, const int *color, sdc_vote *out, int cap);

/* A replay (docs/health.md "Replay"): whose computation of a microbatch is the odd one, when the
 * original's gradients' fingerprint and a replay's differ, given a third rank's (when
 * have_third): ORIGINAL when the third agrees with the replay, REPLAYER when with the original,
 * NOBODY when with neither; EITHER without a third (two computations cannot tell: second tries
 * decide). */
typedef enum { SDC_RP_NOBODY = 0, SDC_RP_ORIGINAL, SDC_RP_REPLAYER, SDC_RP_EITHER } sdc_rp_who;
sdc_rp_who sdc_replay_suspect(uint32_t original, uint32_t replay, int have_third, uint32_t third);

#endif
