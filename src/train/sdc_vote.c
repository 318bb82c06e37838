/* sdc_vote.c — see sdc_vote.h. */
#include "train/sdc_vote.h"

#include <stdlib.h>

#include "common.h"

typedef struct copy {
    int color, rank;
    uint32_t crc;
} copy;

/* by color, then fingerprint, then rank */
static int by_color_crc(const void *a, const void *b) {
    const copy *x = a, *y = b;
    if (x->color != y->color) return x->color < y->color ? -1 : 1;
    if (x->crc != y->crc) return x->crc < y->crc ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* The most common fingerprint of the copies c[0, n) (sorted by fingerprint) and how many hold it */
static uint32_t most_common(const copy *c, int n, int *count) {
    uint32_t best = c[0].crc;
    int most = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j < n && c[j].crc == c[i].crc) j++;
        if (j - i > most) most = j - i, best = c[i].crc;
        i = j;
    }
    *count = most;
    return best;
}

static int by_rank(const void *a, const void *b) {
    const copy *x = a, *y = b;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* Ranks outside the majority (all copies when there is none) into v, in rank order */
static void name_bad(const copy *c, int n, sdc_vote *v) {
    copy *bad = tsr_malloc((size_t)n * sizeof *bad);
    v->n_bad = 0;
    for (int i = 0; i < n; i++)
        if (!v->majority || c[i].crc != v->good) bad[v->n_bad++] = c[i];
    qsort(bad, (size_t)v->n_bad, sizeof *bad, by_rank);
    for (int i = 0; i < v->n_bad && i < SDC_VOTE_MAX_BAD; i++)
        v->bad[i] = bad[i].rank, v->bad_crc[i] = bad[i].crc;
    free(bad);
}

/* One replica set c[0, n) of entry k (sorted by fingerprint): 1 with *v filled when it
 * disagrees, else 0 */
static int judge_set(const copy *c, int n, int k, sdc_vote *v) {
    if (n < 2 || c[0].crc == c[n - 1].crc) return 0;
    int most;
    v->entry = k, v->color = c[0].color, v->copies = n;
    v->good = most_common(c, n, &most);
    v->majority = 2 * most > n;
    name_bad(c, n, v);
    return 1;
}

int sdc_vote_find(int W, int K, const uint32_t *crc, const int *color, sdc_vote *out, int cap) {
    copy *c = tsr_malloc((size_t)(W > 0 ? W : 1) * sizeof *c);
    int found = 0;
    for (int k = 0; k < K; k++) {
        int n = 0;
        for (int r = 0; r < W; r++)
            if (color[(size_t)r * K + k] >= 0)
                c[n++] = (copy){color[(size_t)r * K + k], r, crc[(size_t)r * K + k]};
        qsort(c, (size_t)n, sizeof *c, by_color_crc);
        for (int i = 0; i < n;) {
            int j = i;
            while (j < n && c[j].color == c[i].color) j++;
            sdc_vote v;
            if (judge_set(c + i, j - i, k, &v)) {
                if (found < cap) out[found] = v;
                found++;
            }
            i = j;
        }
    }
    free(c);
    return found;
}

sdc_rp_who sdc_replay_suspect(uint32_t original, uint32_t replay, int have_third, uint32_t third) {
    if (!have_third) return SDC_RP_EITHER;
    if (third == replay) return SDC_RP_ORIGINAL;
    return third == original ? SDC_RP_REPLAYER : SDC_RP_NOBODY;
}
