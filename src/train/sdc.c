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

int sdc_configured(const tsr_config *cfg) { return cfg->health.fingerprint_interval != 0; }

int64_t sdc_interval(const tsr_config *cfg) {
    const int64_t v = cfg->health.fingerprint_interval;
    return v >= 0 ? v : cfg->device == TSR_DEVICE_CUDA ? 0 : 10;
}

int sdc_init(tsr_trainer *t) {
    tsr_sdc *s = tsr_calloc(1, sizeof *s);
    t->sdc = s;
    s->interval = sdc_interval(&t->cfg);
    s->compared = s->grads_step = s->reduced_step = s->window_step = -1;
    s->v.suspect_from = -1;
    TSR_CHECK(sdc_fault_parse(t, &s->flip));
    /* device = cuda: the state lives on the device; each check copies it into the host's mirror
     * first and hashes it there (sdc_state.c; docs/health.md "On the GPU") */
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
    return s->on && s->interval > 0 && step > 0 && step % s->interval == 0;
}

int sdc_start(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s) return 0;
    const size_t W = (size_t)t->dist.world;
    s->hosts = tsr_calloc(W, sizeof *s->hosts);
    dist_node_names(&t->dist, s->hosts);
    if (!s->on) return 0;
    sdc_fault(t, SDC_LOADED);
    sdc_hash_sets(t, s, 1, 0);
    TSR_CHECK(sdc_check_load(t));
    TSR_CHECK(sdc_compare(t, 0));
    for (int k = 0; k < s->n; k++)
        if (s->e[k].frozen) s->stored[k] = s->crc[k], s->n_frozen++;
    s->start_step = t->step;
    return 0;
}

void sdc_grads(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s || !s->on) return;
    s->reduced_step = t->step + 1; /* (the step being taken: t->step counts those done) */
    if (!due(s, t->step + 1)) return;
    const double t0 = tsr_now();
    sdc_hash_sets(t, s, 0, 1);
    s->grads_step = t->step + 1;
    t->out.health.step_s += tsr_now() - t0;
}

int sdc_before_update(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s || !s->on || !s->window) return 0;
    const double t0 = tsr_now();
    const int rc = sdc_check_rest(t, t->step + 1);
    t->out.health.step_s += tsr_now() - t0;
    return rc;
}

int sdc_after_step(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s || !due(s, t->step) || s->compared == t->step) return 0;
    const double t0 = tsr_now();
    const int rc = sdc_compare(t, s->reduced_step == t->step);
    t->out.health.step_s += tsr_now() - t0;
    return rc;
}

int sdc_before_save(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s || !s->on || s->compared == t->step) return 0;
    return sdc_compare(t, s->reduced_step == t->step);
}

int sdc_agreed(const tsr_trainer *t) {
    return t->sdc && t->sdc->on && t->sdc->compared == t->step;
}

int sdc_final(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s || !s->on || !s->window || s->window_step != t->step) return 0;
    return sdc_check_rest(t, t->step);
}

void sdc_stopped(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s || s->v.found == SDC_FOUND_NONE) return;
    t->out.health.found = 1;
    if (s->v.suspect_from >= 0) {
        ckpt_set_aside_from(t->cfg.run_dir, s->v.suspect_from, "sdc");
        if (t->dist.rank == 0)
            printf("health: the checkpoints of step %lld and later, written from the state that "
                   "changed, are set aside as step-N.h5.sdc; a restart resumes from the newest "
                   "one left\n", (long long)s->v.suspect_from);
    }
    sdc_write_culprit(t, s);
}
