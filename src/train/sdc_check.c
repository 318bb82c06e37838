/* sdc_check.c — the checks themselves (sdc_int.h; their order in a run is sdc.c's): the
 * comparison of the replicas' fingerprints (one all-gather, the vote), the at-rest check of the
 * stored ones (one all-reduce, a gather when a rank changed), the check after a resume against
 * the checkpoint's CRC32C, and the comparison a replay asks for before it recomputes. */
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "common.h"
#include "train/sdc_int.h"

/* The gathered table as the vote reads it: crc[r n + k], color[r n + k] */
static int vote(tsr_trainer *t, tsr_sdc *s) {
    const size_t n = (size_t)s->n, W = (size_t)t->dist.world;
    uint32_t *crc = tsr_malloc(W * n * sizeof *crc + 1);
    int *color = tsr_malloc(W * n * sizeof *color + 1);
    for (size_t r = 0; r < W; r++) {
        memcpy(crc + r * n, s->table + 2 * r * n, n * sizeof *crc);
        for (size_t k = 0; k < n; k++) color[r * n + k] = (int)s->table[2 * r * n + n + k];
    }
    s->v.n_mismatch = sdc_vote_find((int)W, (int)n, crc, color, s->v.votes, SDC_MAX_VOTES);
    s->v.n_votes = s->v.n_mismatch < SDC_MAX_VOTES ? s->v.n_mismatch : SDC_MAX_VOTES;
    free(crc), free(color);
    return s->v.n_mismatch;
}

/* The fingerprints stored at rest after an agreed comparison: the next update checks them (a
 * frozen entry keeps those of the start) */
static void open_window(tsr_trainer *t, tsr_sdc *s) {
    for (int k = 0; k < s->n; k++)
        if (sdc_at_rest(&s->e[k]) && !s->e[k].frozen) s->stored[k] = s->crc[k];
    s->window = 1;
    s->window_step = s->compared = t->step;
}

/* Each rank's first entry that changed at rest, how many, and that entry's two fingerprints, on
 * every rank (into s->v) */
static void gather_rest(tsr_trainer *t, tsr_sdc *s, int first, int count) {
    const int W = t->dist.world;
    uint32_t mine[4] = {(uint32_t)first, (uint32_t)count, first >= 0 ? s->stored[first] : 0,
                        first >= 0 ? s->crc[first] : 0};
    uint32_t *all = tsr_malloc((size_t)W * sizeof mine);
    dist_allgather(mine, all, sizeof mine);
    s->v.rest_entry = tsr_malloc((size_t)W * sizeof(int));
    s->v.rest_count = tsr_malloc((size_t)W * sizeof(int));
    s->v.rest_crc = tsr_malloc((size_t)W * 2 * sizeof(uint32_t));
    for (int r = 0; r < W; r++) {
        s->v.rest_entry[r] = (int)all[4 * r], s->v.rest_count[r] = (int)all[4 * r + 1];
        s->v.rest_crc[2 * r] = all[4 * r + 2], s->v.rest_crc[2 * r + 1] = all[4 * r + 3];
    }
    free(all);
}

/* The at-rest entries (frozen_only: the frozen ones) whose fingerprint now (s->crc) differs from
 * s->stored: each rank's first such entry and their count, gathered; a verdict of kind `found`
 * when any rank has one. Collective. */
static int judge_rest(tsr_trainer *t, sdc_found found, int64_t now_step, int frozen_only) {
    tsr_sdc *s = t->sdc;
    const double t0 = tsr_now();
    int first = -1, count = 0;
    for (int k = 0; k < s->n; k++) {
        if (!sdc_at_rest(&s->e[k]) || (frozen_only && !s->e[k].frozen)) continue;
        if (s->crc[k] == s->stored[k]) continue;
        if (first < 0) first = k;
        count++;
    }
    int any = count > 0;
    dist_allreduce_max_int(&any, 1);
    if (any) gather_rest(t, s, first, count);
    s->comm_s += tsr_now() - t0;
    if (!any) return 0;
    s->v.found = found;
    s->v.since = frozen_only ? s->start_step : s->window_step;
    s->v.step = now_step;
    /* a checkpoint of the window's step was written from the state that changed */
    s->v.suspect_from = found == SDC_FOUND_AT_REST && !frozen_only ? s->window_step : -1;
    sdc_report(t, s);
    return TSR_EXIT_SDC;
}

/* The comparison of the state after step t->step, with this step's reduced gradients when
 * with_grads (they are in the buffers); a frozen tensor (LoRA's base) is checked first against
 * its own fingerprint of the start, which names the rank whatever the copies say. Collective. */
int sdc_compare(tsr_trainer *t, int with_grads) {
    tsr_sdc *s = t->sdc;
    sdc_hash_sets(t, s, 1, with_grads && s->grads_step != t->step);
    if (s->window_step >= 0 && s->n_frozen) TSR_CHECK(judge_rest(t, SDC_FOUND_AT_REST, t->step, 1));
    const double t0 = tsr_now();
    const size_t n = (size_t)s->n;
    uint32_t *mine = tsr_malloc(2 * n * sizeof *mine + 1);
    for (size_t k = 0; k < n; k++) {
        const int used = sdc_at_rest(&s->e[k]) || with_grads;
        mine[k] = s->crc[k];
        mine[n + k] = (uint32_t)(used ? s->e[k].color : -1);
    }
    dist_allgather(mine, s->table, 2 * n * sizeof *mine);
    free(mine);
    t->out.health.comparisons++;
    const int found = vote(t, s);
    s->comm_s += tsr_now() - t0;
    if (!found) {
        open_window(t, s);
        return 0;
    }
    s->v.found = SDC_FOUND_REPLICAS;
    s->v.step = t->step;
    sdc_report(t, s);
    return TSR_EXIT_SDC;
}

/* The stored fingerprints checked against the state now (the window closes). Collective. */
int sdc_check_rest(tsr_trainer *t, int64_t now_step) {
    tsr_sdc *s = t->sdc;
    s->window = 0;
    t->out.health.rest_checks++;
    sdc_hash_sets(t, s, 1, 0);
    return judge_rest(t, SDC_FOUND_AT_REST, now_step, 0);
}

/* After a resume: what each rank holds whole, against the checkpoint's crc32c attributes (the
 * read path: what the load read, moved and gathered into the rank's state; a tensor held in
 * parts or shards is compared between its replicas only). Collective. */
int sdc_check_load(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    const size_t n = (size_t)s->n;
    if (strcmp(t->out.start_load.what, "resume") != 0 || !n) return 0;
    const char **names = tsr_malloc(n * sizeof *names);
    int *have = tsr_calloc(n, sizeof *have), ok = 1;
    for (size_t k = 0; k < n; k++) names[k] = s->e[k].name;
    if (t->dist.rank == 0) ok = ckpt_tensor_crcs(t->out.start_load.path, names, (int)n, s->stored, have) == 0;
    dist_bcast(&ok, sizeof ok, 0);
    dist_bcast(s->stored, n * sizeof *s->stored, 0);
    dist_bcast(have, n * sizeof *have, 0);
    for (size_t k = 0; k < n; k++) /* (what is not held whole is not judged here) */
        if (!ok || !have[k] || s->e[k].numel != s->e[k].total) s->stored[k] = s->crc[k];
    free(names), free(have);
    return judge_rest(t, SDC_FOUND_LOAD, t->step, 0);
}

int sdc_before_replay(tsr_trainer *t) {
    tsr_sdc *s = t->sdc; /* (the state the replay recomputes from: the last update's) */
    if (!s || !s->on || s->compared == t->step) return 0;
    return sdc_compare(t, 0);
}

