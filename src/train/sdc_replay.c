/* sdc_replay.c — deterministic replay (docs/health.md "Replay"): every health.replay_interval
 * steps, each rank fingerprints the gradients of its first microbatch as it computes them, and
 * recomputes its right neighbour's first microbatch (a shifted assignment: every rank's work is
 * checked by another) into gradients of its own; the fingerprints must agree bit for bit, since a
 * step is a pure function of its inputs (docs/training.md). Where they do not, a third rank
 * recomputes the same microbatch (the tie-break; with two ranks there is none), the rank it
 * points at recomputes it once more (the second try), and the verdict is
 *   transient    the suspect agrees on its second try: the step goes on (a rank whose own
 *                microbatch was wrong recomputes its microbatches before the reduction);
 *   persistent   it does not: exit 87 naming it, as a fingerprint mismatch does;
 *   unattributed no result is held by two of three computations: exit 87, both suspects.
 * It covers the modes whose gradients of a microbatch lie whole in one buffer of the rank before
 * the reduction and whose forward and backward call no other rank: ddp, zero1 and LoRA's
 * adapters on the CPU, the lm objective, one rank per context, tensor and expert group and no
 * pipeline, and the same threads on every rank (a GEMM's summation order may follow the thread
 * count). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "run/objective.h"
#include "train/sdc_int.h"

/* The rank's gradients of its microbatches (its flat buffer, or LoRA's adapters) */
static float **grads_slot(tsr_trainer *t) {
    return t->part.lora_on ? &t->part.lora.g : &t->model.grads;
}

/* Replay runs in this mode (see the top), the thread counts aside. Local. */
static int mode_covered(const tsr_trainer *t) {
    return !t->be.gpu && t->cfg.device != TSR_DEVICE_CUDA && !t->part.fsdp_on &&
           !t->part.ep_on && !t->part.pp_on && t->mesh.N == 1 && t->mesh.T == 1 &&
           !t->objective->pass;
}

/* Replay runs in this mode, the same threads on every rank (collective: every rank asks) */
static int covered(const tsr_trainer *t) {
    int threads[2] = {t->be.threads, -t->be.threads};
    dist_allreduce_max_int(threads, 2);
    return mode_covered(t) && threads[0] == -threads[1];
}

/* One microbatch as a replay sends it: its tokens, targets and segment starts */
static size_t microbatch_bytes(const tsr_trainer *t) {
    return (size_t)t->micro * (size_t)t->T * (2 * sizeof(int32_t) + 1);
}

/* The gradients a replay recomputes into: the rank's flat buffer's, or LoRA's adapters' */
static size_t grads_numel(const tsr_trainer *t) {
    return t->part.lora_on ? t->part.lora.n : t->model.n_params;
}

size_t sdc_plan_bytes(const tsr_trainer *t) {
    if (t->cfg.health.replay_interval <= 0 || !mode_covered(t)) return 0;
    return grads_numel(t) * sizeof(float) + 2 * microbatch_bytes(t);
}

void sdc_replay_init(tsr_trainer *t, tsr_sdc *s) {
    sdc_replay_state *rp = &s->rp;
    memset(rp, 0, sizeof *rp);
    rp->step = -1;
    rp->interval = t->cfg.health.replay_interval;
    if (rp->interval <= 0 || !covered(t)) return;
    rp->on = 1;
    rp->world = mesh_group_open(mesh_group(&t->mesh, TSR_MESH_WORLD));
    rp->bytes = microbatch_bytes(t);
    rp->mine = tsr_malloc(rp->bytes);
    rp->theirs = tsr_malloc(rp->bytes);
    rp->n = grads_numel(t);
    rp->scratch = t->be.ops->alloc(rp->n * sizeof(float));
}

void sdc_replay_free(tsr_trainer *t, tsr_sdc *s) {
    sdc_replay_state *rp = &s->rp;
    if (rp->world) dist_group_free(rp->world);
    if (rp->scratch) t->be.ops->free(rp->scratch);
    free(rp->mine), free(rp->theirs);
    memset(rp, 0, sizeof *rp);
}

static int replay_due(const tsr_trainer *t) {
    const sdc_replay_state *rp = &t->sdc->rp;
    return rp->on && !rp->busy && (t->step + 1) % rp->interval == 0;
}

void sdc_replay_first(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s || !replay_due(t)) return;
    const double t0 = tsr_now();
    s->rp.own = sdc_crc_floats(t, *grads_slot(t), s->rp.n);
    s->rp.step = t->step + 1;
    s->rp.seconds += tsr_now() - t0;
}

/* This rank's first microbatch (its tokens, targets, segment starts) into rp->mine */
static void pack_first(tsr_trainer *t) {
    sdc_replay_state *rp = &t->sdc->rp;
    const size_t n = (size_t)t->micro * (size_t)t->T;
    memcpy(rp->mine, t->data.inputs, n * sizeof(int32_t));
    memcpy(rp->mine + n * sizeof(int32_t), t->data.targets, n * sizeof(int32_t));
    if (t->data.starts) memcpy(rp->mine + 2 * n * sizeof(int32_t), t->data.starts, n);
}

/* The forward and backward of microbatch mb (packed as pack_first does), the first of rank q's
 * batch, into the scratch gradients at the step's scale; their fingerprint. The rank's own
 * gradients stay as they are. Local. */
static uint32_t recompute(tsr_trainer *t, const uint8_t *mb, int q, float scale) {
    sdc_replay_state *rp = &t->sdc->rp;
    tsr_model *m = &t->model;
    const size_t n = (size_t)t->micro * (size_t)t->T;
    const int32_t *in = (const int32_t *)mb, *tg = in + n;
    float **g = grads_slot(t), *keep = *g;
    *g = rp->scratch;
    t->be.ops->zero(rp->scratch, rp->n * sizeof(float));
    if (t->part.lora_on) /* the dropout of rank q's rows (model_lora.h) */
        lora_set_pass(&t->part.lora, 1, run_lora_key(&t->run), lora_pass_row0(q, t->per_rank, 0, t->T));
    m->starts = t->data.starts ? (uint8_t *)(mb + 2 * n * sizeof(int32_t)) : NULL;
    rp->busy = 1;
    model_forward(m, in, tg, t->micro, t->T);
    model_backward(m, in, tg, t->micro, t->T, scale);
    rp->busy = 0;
    m->starts = NULL;
    if (t->part.lora_on) lora_set_pass(&t->part.lora, 0, 0, 0);
    *g = keep;
    return sdc_crc_floats(t, rp->scratch, rp->n);
}

/* Rank c recomputes rank q's first microbatch (q sends it, unless c is q); its fingerprint, on
 * every rank. Collective. */
static uint32_t compute_on(tsr_trainer *t, int c, int q, float scale) {
    sdc_replay_state *rp = &t->sdc->rp;
    const int me = t->dist.rank;
    uint32_t crc = 0;
    if (c != q && (me == q || me == c))
        dist_group_sendrecv(rp->world, rp->mine, me == q ? c : -1, rp->theirs, me == c ? q : -1,
                            rp->bytes);
    if (me == c) crc = recompute(t, c == q ? rp->mine : rp->theirs, q, scale);
    dist_bcast(&crc, sizeof crc, c);
    return crc;
}

/* The verdict on rank q's first microbatch, whose gradients' fingerprint fq rank r's
 * recomputation contradicted (rr): the third opinion, the second try (sdc_vote.h). *suspect: the
 * rank whose computation erred (-1: none known), *original: it was q's own, which the step used.
 * Collective. */
static sdc_rp_kind judge(tsr_trainer *t, int q, int r, uint32_t fq, uint32_t rr, float scale,
                         int *suspect, int *original) {
    const int W = t->dist.world, third = W >= 3 ? (q + 1) % W : -1;
    sdc_verdict *v = &t->sdc->v;
    *suspect = -1, *original = 0;
    v->rp_third = third;
    v->rp_crc[2] = third >= 0 ? compute_on(t, third, q, scale) : 0;
    sdc_rp_who who = sdc_replay_suspect(fq, rr, third >= 0, v->rp_crc[2]);
    if (who == SDC_RP_NOBODY) return SDC_RP_UNATTRIBUTED;
    if (who == SDC_RP_EITHER) { /* (no third rank) the original's second try first */
        v->rp_crc[3] = compute_on(t, v->rp_retry = q, q, scale);
        if (v->rp_crc[3] == rr) return (*suspect = q), (*original = 1), SDC_RP_TRANSIENT;
        if (v->rp_crc[3] != fq) return SDC_RP_UNATTRIBUTED;
        if (q == r) return (*suspect = q), SDC_RP_TRANSIENT; /* (one rank: its replay erred) */
        who = SDC_RP_REPLAYER; /* q repeats itself: the replayer's second try decides */
    }
    *suspect = who == SDC_RP_ORIGINAL ? q : r;
    *original = who == SDC_RP_ORIGINAL;
    v->rp_crc[3] = compute_on(t, v->rp_retry = *suspect, q, scale);
    if (v->rp_crc[3] == (*original ? rr : fq)) return SDC_RP_TRANSIENT;
    if (third >= 0) return SDC_RP_PERSISTENT;
    return (*suspect = -1), SDC_RP_UNATTRIBUTED; /* (two ranks, each agreeing with itself) */
}

/* Each rank's (own fingerprint, replay's) on every rank: pairs[2 r], pairs[2 r + 1] */
static uint32_t *exchange(tsr_trainer *t, float scale) {
    sdc_replay_state *rp = &t->sdc->rp;
    const int me = t->dist.rank, W = t->dist.world;
    pack_first(t);
    /* rank q's first microbatch goes to q - 1, which recomputes it */
    dist_group_sendrecv(rp->world, rp->mine, (me - 1 + W) % W, rp->theirs, (me + 1) % W, rp->bytes);
    uint32_t mine[2] = {rp->own, recompute(t, rp->theirs, (me + 1) % W, scale)};
    uint32_t *pairs = tsr_malloc((size_t)W * sizeof mine);
    dist_allgather(mine, pairs, sizeof mine);
    return pairs;
}

/* The verdict on a mismatch of rank q, replayed by r, recorded (and reported: sdc_report) */
static int verdict(tsr_trainer *t, int q, int r, uint32_t fq, uint32_t rr, float scale, int *redo) {
    tsr_sdc *s = t->sdc;
    t->out.health.replay_mismatches++;
    s->v.rp_q = q, s->v.rp_r = r, s->v.rp_crc[0] = fq, s->v.rp_crc[1] = rr;
    s->v.rp_crc[2] = s->v.rp_crc[3] = 0;
    s->v.rp_third = s->v.rp_retry = -1;
    int original;
    s->v.rp_kind = judge(t, q, r, fq, rr, scale, &s->v.rp_suspect, &original);
    s->v.found = SDC_FOUND_REPLAY;
    s->v.step = t->step + 1;
    s->v.suspect_from = -1;
    sdc_report(t, s);
    if (s->v.rp_kind != SDC_RP_TRANSIENT) return TSR_EXIT_SDC;
    t->out.health.transients++;
    s->v.found = SDC_FOUND_NONE; /* (the run goes on) */
    if (original && t->dist.rank == q) *redo = 1; /* (the step used q's wrong gradients) */
    return 0;
}

int sdc_replay(tsr_trainer *t, float scale, int *redo) {
    tsr_sdc *s = t->sdc;
    *redo = 0;
    if (!s || !replay_due(t) || s->rp.step != t->step + 1) return 0;
    const double t0 = tsr_now();
    TSR_CHECK(sdc_before_replay(t)); /* (the state it recomputes from agrees first) */
    const int W = t->dist.world;
    uint32_t *pairs = exchange(t, scale);
    t->out.health.replays++;
    int rc = 0;
    for (int q = 0; q < W && !rc; q++) {
        const int r = (q - 1 + W) % W; /* (rank r recomputed q's microbatch) */
        if (pairs[2 * q] != pairs[2 * r + 1])
            rc = verdict(t, q, r, pairs[2 * q], pairs[2 * r + 1], scale, redo);
    }
    free(pairs);
    s->rp.seconds += tsr_now() - t0;
    t->out.health.step_s += tsr_now() - t0;
    return rc;
}
