/* sdc.c — the order of the checks in a run (sdc.h; docs/health.md "When the checks run").
 *
 * A comparison (after the update of a fingerprint step, before every save, once at start) hashes
 * every entry, and the ranks all-gather their fingerprints and colors in one small collective;
 * every rank judges the same table (sdc_vote.h), so all agree on the verdict with no second
 * collective. The at-rest entries' fingerprints are then stored, and the next update (or, after
 * a run's last save, sdc_final) hashes them again before it changes them: a rank whose state
 * changed in between (a flipped bit in memory, or in the checkpoint's copy of it, which the
 * writer takes in that window) names itself, replica or not; one all-reduce says whether any
 * rank did. The reduced gradients of a fingerprint step are hashed right after the reduction,
 * before the update uses them. */
#include "train/sdc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "common.h"
#include "train/sdc_int.h"

int sdc_configured(const tsr_config *cfg) {
    return cfg->health.fingerprint_interval > 0 && cfg->device != TSR_DEVICE_CUDA;
}

int sdc_init(tsr_trainer *t) {
    tsr_sdc *s = tsr_calloc(1, sizeof *s);
    t->sdc = s;
    s->interval = t->cfg.health.fingerprint_interval;
    s->compared = s->grads_step = s->reduced_step = -1;
    s->v.suspect_from = -1;
    TSR_CHECK(sdc_fault_parse(t, &s->flip));
    /* device = cuda: the state lives on the device, the host's buffers are a mirror filled at a
     * save (docs/health.md "On the GPU") */
    s->on = sdc_configured(&t->cfg);
    if (s->on) sdc_build(t, s);
    TSR_CHECK(sdc_fault_matmul(t));
    sdc_replay_init(t, s); /* (collective: every rank says whether its mode is covered) */
    return 0;
}

void sdc_free(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s) return;
    free(s->e), free(s->runs), free(s->crc), free(s->stored), free(s->hosts), free(s->table);
    free(s->v.rest_entry), free(s->v.rest_count), free(s->v.rest_crc);
    sdc_replay_free(t, s);
    free(s);
    t->sdc = NULL;
}

int sdc_on(const tsr_trainer *t) { return t->sdc && t->sdc->on; }

/* a fingerprint step: health.fingerprint_interval divides it */
static int due(const tsr_sdc *s, int64_t step) {
    return s->on && step > 0 && step % s->interval == 0;
}

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

/* The comparison of the state after step t->step, with this step's reduced gradients when they
 * are in the buffers. Collective. */
static int compare(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    const int with_grads = s->reduced_step == t->step;
    sdc_hash_sets(t, s, 1, with_grads && s->grads_step != t->step);
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
    s->comparisons++;
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

/* The at-rest entries whose fingerprint now (s->crc) differs from s->stored: each rank's first
 * such entry and their count, gathered; a verdict of kind `found` when any rank has one.
 * Collective. */
static int judge_rest(tsr_trainer *t, sdc_found found, int64_t now_step) {
    tsr_sdc *s = t->sdc;
    const double t0 = tsr_now();
    int first = -1, count = 0;
    for (int k = 0; k < s->n; k++) {
        if (!sdc_at_rest(&s->e[k]) || s->crc[k] == s->stored[k]) continue;
        if (first < 0) first = k;
        count++;
    }
    int any = count > 0;
    dist_allreduce_max_int(&any, 1);
    if (any) gather_rest(t, s, first, count);
    s->comm_s += tsr_now() - t0;
    if (!any) return 0;
    s->v.found = found;
    s->v.since = s->window_step;
    s->v.step = now_step;
    /* a checkpoint of the window's step was written from the state that changed */
    s->v.suspect_from = found == SDC_FOUND_AT_REST ? s->window_step : -1;
    sdc_report(t, s);
    return TSR_EXIT_SDC;
}

/* The stored fingerprints checked against the state now (the window closes). Collective. */
static int check_rest(tsr_trainer *t, int64_t now_step) {
    tsr_sdc *s = t->sdc;
    s->window = 0;
    s->rest_checks++;
    sdc_hash_sets(t, s, 1, 0);
    return judge_rest(t, SDC_FOUND_AT_REST, now_step);
}

/* After a resume: what each rank holds whole, against the checkpoint's crc32c attributes (the
 * read path: what the load read, moved and gathered into the rank's state; a tensor held in
 * parts or shards is compared between its replicas only). Collective. */
static int check_load(tsr_trainer *t) {
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
    return judge_rest(t, SDC_FOUND_LOAD, t->step);
}

int sdc_start(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s) return 0;
    const size_t W = (size_t)t->dist.world;
    s->hosts = tsr_calloc(W, sizeof *s->hosts);
    trainer_node_names(t, s->hosts);
    if (!s->on) return 0;
    sdc_fault(t, SDC_LOADED);
    sdc_hash_sets(t, s, 1, 0);
    TSR_CHECK(check_load(t));
    TSR_CHECK(compare(t));
    for (int k = 0; k < s->n; k++)
        if (s->e[k].frozen) s->stored[k] = s->crc[k];
    return 0;
}

void sdc_grads(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s || !s->on) return;
    s->reduced_step = t->step + 1; /* (the step being taken: t->step counts those done) */
    if (!due(s, t->step + 1)) return;
    sdc_hash_sets(t, s, 0, 1);
    s->grads_step = t->step + 1;
}

int sdc_before_update(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s || !s->on || !s->window) return 0;
    return check_rest(t, t->step + 1);
}

int sdc_after_step(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s || !due(s, t->step) || s->compared == t->step) return 0;
    return compare(t);
}

int sdc_before_save(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s || !s->on || s->compared == t->step) return 0;
    return compare(t);
}

int sdc_agreed(const tsr_trainer *t) {
    return t->sdc && t->sdc->on && t->sdc->compared == t->step;
}

int sdc_final(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s || !s->on || !s->window || s->window_step != t->step) return 0;
    return check_rest(t, t->step);
}

void sdc_stopped(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s || s->v.found == SDC_FOUND_NONE) return;
    if (s->v.suspect_from >= 0) {
        ckpt_set_aside_from(t->cfg.run_dir, s->v.suspect_from, "sdc");
        if (t->dist.rank == 0)
            printf("health: the checkpoints of step %lld and later, written from the state that "
                   "changed, are set aside as step-N.h5.sdc; a restart resumes from the newest "
                   "one left\n", (long long)s->v.suspect_from);
    }
    sdc_write_culprit(t, s);
}
