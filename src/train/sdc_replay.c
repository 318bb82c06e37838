/* sdc_replay.c — deterministic replay (docs/health.md "Deterministic replay"): a rank's work
 * recomputed by its left neighbour (a shifted assignment: every rank's work is checked by
 * another) and the two fingerprints of the gradients (and loss) compared bit for bit, since a
 * step is a pure function of its inputs (docs/training.md). It runs
 *   every health.replay_interval steps, on each rank's first microbatch: the neighbour's is
 *     recomputed first, into the rank's own gradient buffers (no second copy), then the rank's
 *     own microbatches, whose first is fingerprinted as its backward ends;
 *   at once when the spike guard finds an outlier (a spike, a NaN or an Inf), on each rank's
 *     whole batch (every step fingerprints the gradients a rank hands to the reduction): before
 *     the guard's response, so its verdict is known; all agree: the data, a real spike.
 * Where two differ, a third rank recomputes the same work (the tie-break; with two ranks there is
 * none), the rank it points at recomputes it once more (the second try), and the verdict is
 *   transient    the suspect agrees on its second try: the run goes on (a rank whose own first
 *                microbatch was wrong computes its microbatches again before the reduction);
 *   persistent   it does not: exit 87 naming it, as a fingerprint mismatch does;
 *   unattributed no result is held by two of three computations: exit 87, both suspects.
 * Under zero3 and hsdp a microbatch's forward and backward gather the layers from the shard
 * group, so every rank recomputes at the same time (lockstep): its neighbour's work, or in the
 * tie-break and the second try the one rank's work in question; a layer's gradients are
 * fingerprinted as its backward completes them, before their reduce-scatter, which a
 * recomputation skips (model/fsdp.h's tap). Under tensor, context or expert parallelism a
 * microbatch's forward and backward are a collective of the group (S consecutive ranks), so the
 * partner is the same position in the group before (rank - S): every group recomputes the next
 * group's work together, each member its counterpart's rows, its collectives matched; in the
 * tie-break and the second try every group recomputes the group in question's work; a fault of
 * one member may change every member's gradients, so the verdict blames the members whose
 * results differ (sdc_report). Under parallel.pipeline a rank's partner is the same stage's
 * rank of the data pipeline before (the ring is the stage's W / P ranks, a group the pipeline's
 * P ranks, W / P apart): every pipeline recomputes the next one's batch through the schedule
 * (pipeline_replay), the unit a batch, since the schedule mixes its microbatches' gradients.
 * It covers ddp, zero1, zero3, hsdp and LoRA on the CPU, tensor, context or expert groups (not
 * context with expert, nor with zero3 / hsdp; two at least), pipelines (ddp, zero1, LoRA; two
 * at least), the lm objective, dpo and grpo (ddp, zero1: its pass over a rank's rows is the
 * unit, recomputed with the original's dropout; no replay after an outlier; grpo's rows, the
 * step's completions with their rewards and advantages, every rank holds: none are sent), and
 * the same threads on every rank (a GEMM's summation order may follow the thread count). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "crc32c.h"
#include "jsonl.h"
#include "run/objective.h"
#include "train/pipeline.h"
#include "train/sdc_int.h"

/* The ranks of one model-parallel group: the consecutive ranks that share a microbatch's forward
 * and backward (a tensor group, its context group, or its expert group: rank = (d N + c) T + t,
 * an expert group EP consecutive ranks of a tensor_data group); 1 without. Local. */
static int group_size(const tsr_trainer *t) {
    return t->mesh.T * (t->part.ep_on ? t->mesh.EP : t->mesh.N);
}

/* Why replay does not run under parallel.pipeline in this mode, or NULL: every pipeline
 * recomputes the pipeline before it's batch through the schedule, each stage its counterpart's
 * (the lockstep of ddp, zero1 and LoRA over the stages). Local. */
static const char *pipeline_why(const tsr_trainer *t) {
    if (t->objective->pass)
        return "parallel.pipeline with objective = dpo or grpo: its pass runs the stages in turn, "
               "whose recomputation is not built";
    if (group_size(t) > 1 || t->part.fsdp_on)
        return "parallel.pipeline with a tensor, context or expert group or under zero3 or hsdp: "
               "their lockstep recomputation through the stages is not built";
    if (t->dist.world == t->mesh.P)
        return "one data-parallel pipeline (the world is parallel.pipeline ranks): no other "
               "pipeline holds the same stages to recompute its batch";
    return NULL;
}

/* Why replay does not run in this mode (see the top), the thread counts aside, or NULL. Local. */
static const char *not_covered(const tsr_trainer *t) {
    if (t->be.gpu || t->cfg.device == TSR_DEVICE_CUDA) return "device = cuda (not built)";
    static char why[200];
    snprintf(why, sizeof why, "objective = %s with a tensor, context or expert group or under "
             "zero3 or hsdp (its pass's lockstep recomputation is not built)", t->objective->name);
    if (t->part.pp_on) return pipeline_why(t);
    if (t->objective->pass && (group_size(t) > 1 || t->part.fsdp_on)) return why;
    if (group_size(t) == 1) return NULL;
    if (t->mesh.N > 1 && t->part.ep_on)
        return "parallel.context with parallel.expert: a microbatch's forward spans a context "
               "and an expert group, whose lockstep recomputation is not built";
    if (t->part.fsdp_on)
        return "parallel.sharding = zero3 or hsdp with a tensor, context or expert group: the "
               "layers' gathers inside a group's lockstep recomputation are not built";
    if (t->dist.world == group_size(t))
        return "one replica group (the world is one tensor, context or expert group): no other "
               "group holds the same positions to recompute its microbatch";
    return NULL;
}

static int mode_covered(const tsr_trainer *t) { return not_covered(t) == NULL; }

/* Replay runs in this mode, the same threads on every rank (collective: every rank asks); rank
 * 0 says why not where health.replay_interval asks for it */
static int covered(const tsr_trainer *t) {
    int threads[2] = {t->be.threads, -t->be.threads};
    dist_allreduce_max_int(threads, 2);
    const char *why = threads[0] != -threads[1] ? "the ranks' thread counts differ" : not_covered(t);
    if (why && t->dist.rank == 0)
        printf("health: no deterministic replay in this run (health.replay_interval = %lld): "
               "%s%s\n", (long long)t->cfg.health.replay_interval, why,
               t->sdc->on ? "; the fingerprints' comparisons still run" : "");
    return why == NULL;
}

/* Every rank recomputes at once: the layers are gathered from the shard group (zero3, hsdp), or a
 * microbatch's forward is a collective of its tensor, context or expert group */
static int lockstep(const tsr_trainer *t) {
    return t->part.fsdp_on || group_size(t) > 1 || t->part.pp_on;
}

/* One row of a batch as a replay sends it: its tokens, targets and segment starts (and dpo's
 * sample index); none for grpo, whose step's rows (the completions, their rewards and
 * advantages, the rollout's log-probabilities) every rank holds whole (posttrain/grpo_int.h) */
static size_t row_bytes(const tsr_trainer *t) {
    if (t->objective->prompts) return 0;
    return (size_t)t->T * (2 * sizeof(int32_t) + 1) + (t->objective->pairs ? sizeof(uint64_t) : 0);
}

/* The rows a replay recomputes: a rank's first microbatch, or (dpo) its pass over its batch, the
 * objective's unit (it fingerprints the pass as a whole), or (parallel.pipeline) its batch, the
 * schedule's unit (a microbatch's gradients are mixed with the others' before the step's end) */
static int64_t replay_rows(const tsr_trainer *t) {
    return t->objective->pass || t->part.pp_on ? t->per_rank : t->micro;
}

/* The rank k groups after rank q around the replay's ring (k < 0: before). Local. */
static int shift(const tsr_trainer *t, int q, int k) {
    const sdc_replay_state *rp = &t->sdc->rp;
    const int n = rp->ring, at = q % n;
    return q - at + ((at + k * rp->stride) % n + n) % n;
}

/* Rank r's position in its group, and its group's index among the groups of that position (the
 * mesh's arithmetic, which also opens rp->pos) */
static int position(const sdc_replay_state *rp, int r) {
    return mesh_member_position(rp->members, rp->mstep, r);
}
static int group_index(const sdc_replay_state *rp, int r) {
    return mesh_member_group(rp->members, rp->mstep, r);
}

/* The member at position p of rank q's group. Local. */
static int member(const sdc_replay_state *rp, int q, int p) {
    return q - position(rp, q) * rp->mstep + p * rp->mstep;
}

size_t sdc_plan_bytes(const tsr_trainer *t) {
    if (t->cfg.health.replay_interval <= 0 || !mode_covered(t)) return 0;
    return 2 * (size_t)t->per_rank * row_bytes(t);
}

/* A layer's gradients of a microbatch before their reduce-scatter, into the running tap */
static void tap_layer(void *ctx, const float *g, size_t n) {
    tsr_trainer *t = ctx;
    const uint32_t c = sdc_crc_floats(t, g, n);
    t->sdc->rp.tap = tsr_crc32c(t->sdc->rp.tap, &c, sizeof c);
}

void sdc_replay_init(tsr_trainer *t, tsr_sdc *s) {
    sdc_replay_state *rp = &s->rp;
    memset(rp, 0, sizeof *rp);
    rp->step = rp->whole_step = -1;
    rp->interval = t->cfg.health.replay_interval;
    if (rp->interval <= 0 || !covered(t)) return;
    rp->on = 1;
    rp->world = mesh_group_open(mesh_group(&t->mesh, TSR_MESH_WORLD));
    const int P = t->part.pp_on ? t->mesh.P : 1, me = t->dist.rank;
    rp->stride = group_size(t);
    rp->ring = t->dist.world / P;
    rp->members = P > 1 ? P : rp->stride, rp->mstep = P > 1 ? rp->ring : 1;
    if (rp->members > 1) rp->pos = mesh_position_open(rp->members, rp->mstep, me);
    rp->bytes = (size_t)t->per_rank * row_bytes(t);
    rp->mine = tsr_malloc(rp->bytes);
    rp->theirs = tsr_malloc(rp->bytes);
    if (lockstep(t) && !t->part.lora_on)
        t->part.fsdp.tap = tap_layer, t->part.fsdp.tap_ctx = t;
}

void sdc_replay_free(tsr_trainer *t, tsr_sdc *s) {
    sdc_replay_state *rp = &s->rp;
    if (rp->world) dist_group_free(rp->world);
    if (rp->pos) dist_group_free(rp->pos);
    if (t->part.fsdp.tap_ctx == t) t->part.fsdp.tap = NULL, t->part.fsdp.tap_ctx = NULL;
    free(rp->mine), free(rp->theirs);
    memset(rp, 0, sizeof *rp);
}

static int replay_due(const tsr_trainer *t) {
    const sdc_replay_state *rp = &t->sdc->rp;
    return rp->on && !rp->busy && (t->step + 1) % rp->interval == 0;
}

/* The fingerprint of the gradients a rank's computation left for the reduction (its flat
 * buffer, LoRA's adapters, or under zero3 / hsdp its layers' tap and the root's gradients) and
 * of its loss sum. Local. */
static uint32_t fingerprint(tsr_trainer *t, double loss) {
    uint32_t c;
    if (t->part.lora_on) {
        c = sdc_crc_floats(t, t->part.lora.g, t->part.lora.n);
    } else if (t->part.fsdp_on) {
        const uint32_t root = sdc_crc_floats(t, t->part.fsdp.root_g, t->part.fsdp.units[0].size);
        c = tsr_crc32c(t->sdc->rp.tap, &root, sizeof root);
    } else {
        c = sdc_crc_floats(t, t->model.grads, t->model.n_params);
    }
    if (t->part.ep_on && !t->part.lora_on) { /* (this rank's experts': its group's tokens) */
        const uint32_t e = sdc_crc_floats(t, t->part.ep.g, t->part.ep.n);
        c = tsr_crc32c(c, &e, sizeof e);
    }
    return tsr_crc32c(c, &loss, sizeof loss);
}

void sdc_replay_begin(tsr_trainer *t) {
    if (t->sdc && t->sdc->rp.on && !t->sdc->rp.busy) t->sdc->rp.tap = 0;
}

void sdc_replay_first(tsr_trainer *t, double loss) {
    tsr_sdc *s = t->sdc;
    if (!s || !replay_due(t)) return;
    const double t0 = tsr_now();
    s->rp.own = fingerprint(t, loss);
    s->rp.step = t->step + 1;
    s->rp.seconds += tsr_now() - t0;
}

void sdc_replay_whole(tsr_trainer *t, double loss) {
    tsr_sdc *s = t->sdc;
    if (!s || !s->rp.on || s->rp.busy) return;
    const double t0 = tsr_now();
    s->rp.whole = fingerprint(t, loss);
    s->rp.whole_step = t->step + 1;
    s->rp.seconds += tsr_now() - t0;
    t->out.health.step_s += tsr_now() - t0;
}

/* This rank's first `rows` rows (their tokens, targets, segment starts) into rp->mine */
static void pack(tsr_trainer *t, int64_t rows) {
    sdc_replay_state *rp = &t->sdc->rp;
    const size_t n = (size_t)rows * (size_t)t->T;
    if (t->objective->prompts) return; /* (grpo: nothing to send) */
    memcpy(rp->mine, t->data.inputs, n * sizeof(int32_t));
    memcpy(rp->mine + n * sizeof(int32_t), t->data.targets, n * sizeof(int32_t));
    if (t->data.starts) memcpy(rp->mine + 2 * n * sizeof(int32_t), t->data.starts, n);
    if (t->objective->pairs) /* (dpo: each row's sample, its reference's index) */
        memcpy(rp->mine + n * (2 * sizeof(int32_t) + 1), t->data.row_sample,
               (size_t)rows * sizeof(uint64_t));
}

/* The objective's pass (dpo) or the pipeline's schedule over rank q's rows mb (packed as pack
 * does): the batch's buffers point at them, the data rank q's (LoRA's dropout rows), no MoE
 * statistics (the step's own are counted); its loss sum */
static double recompute_batch(tsr_trainer *t, const uint8_t *mb, int q, int64_t rows,
                              float scale) {
    const struct { int32_t *in, *tg; uint8_t *starts; uint64_t *rs; double *moe; } saved = {
        t->data.inputs, t->data.targets, t->data.starts, t->data.row_sample, t->out.moe};
    const int rank = t->mesh.data.rank, sent = !t->objective->prompts;
    const size_t n = (size_t)rows * (size_t)t->T;
    uint8_t *starts = t->data.starts ? (uint8_t *)mb + 2 * n * sizeof(int32_t) : NULL;
    uint64_t *rs = NULL;
    if (t->objective->pairs) { /* (each row's sample, aligned) */
        rs = tsr_malloc((size_t)rows * sizeof *rs);
        memcpy(rs, mb + n * (2 * sizeof(int32_t) + 1), (size_t)rows * sizeof *rs);
    }
    if (sent) t->data.inputs = (int32_t *)mb, t->data.targets = (int32_t *)mb + n;
    if (sent) t->data.starts = starts, t->data.row_sample = rs;
    t->out.moe = NULL, t->mesh.data.rank = mesh_data_rank(&t->mesh, q);
    void (*scope)(void *, int) = t->objective->replay_scope;
    if (scope) scope(t->run.objective_state, 1);
    const double loss = t->objective->pass
                            ? t->objective->pass(&t->run, t->run.objective_state, scale)
                            : pipeline_replay(t, scale);
    if (scope) scope(t->run.objective_state, 0);
    t->mesh.data.rank = rank;
    t->data.inputs = saved.in, t->data.targets = saved.tg, t->out.moe = saved.moe;
    t->data.starts = saved.starts, t->data.row_sample = saved.rs;
    free(rs);
    return loss;
}

/* The buffers a recomputation's backward fills, zeroed (fsdp: the root's and the tap) */
static void zero_grads(tsr_trainer *t) {
    if (t->part.lora_on)
        t->be.ops->zero(t->part.lora.g, t->part.lora.n * sizeof(float));
    else if (t->part.fsdp_on)
        t->be.ops->zero(t->part.fsdp.root_g, t->part.fsdp.units[0].size * sizeof(float));
    else
        t->be.ops->zero(t->model.grads, t->model.n_params * sizeof(float));
    if (t->part.ep_on) ep_zero_grads(&t->part.ep);
    t->sdc->rp.tap = 0;
}

/* The forward and backward of the first `rows` rows of rank q's batch (packed as pack does) in
 * microbatches, at the step's scale, into this rank's own gradient buffers (which it computes
 * again when it needs them: rp->clobbered); their fingerprint. Under zero3 / hsdp nothing is
 * reduce-scattered, and every rank of the shard group must recompute at the same time. */
static uint32_t recompute(tsr_trainer *t, const uint8_t *mb, int q, int64_t rows, float scale) {
    sdc_replay_state *rp = &t->sdc->rp;
    tsr_model *m = &t->model;
    const size_t n = (size_t)rows * (size_t)t->T, T = (size_t)t->T;
    const int32_t *in = (const int32_t *)mb, *tg = in + n;
    const uint8_t *starts = t->data.starts ? mb + 2 * n * sizeof(int32_t) : NULL;
    double loss = 0.0;
    zero_grads(t);
    rp->busy = rp->clobbered = 1;
    t->part.fsdp.tap_only = 1;
    const int whole = t->objective->pass || t->part.pp_on;
    if (whole) loss = recompute_batch(t, mb, q, rows, scale);
    for (int64_t b = 0; b < rows && !whole; b += t->micro) {
        if (t->part.lora_on) /* the dropout of rank q's rows (model_lora.h) */
            lora_set_pass(&t->part.lora, 1, run_lora_key(&t->run),
                          lora_pass_row0(mesh_data_rank(&t->mesh, q), t->per_rank, b, t->T));
        m->starts = starts ? (uint8_t *)(starts + (size_t)b * T) : NULL;
        loss += model_forward(m, in + (size_t)b * T, tg + (size_t)b * T, t->micro, t->T);
        model_backward(m, in + (size_t)b * T, tg + (size_t)b * T, t->micro, t->T, scale);
    }
    t->part.fsdp.tap_only = 0;
    rp->busy = 0;
    m->starts = NULL;
    if (t->part.lora_on) lora_set_pass(&t->part.lora, 0, 0, 0);
    return fingerprint(t, loss);
}

/* The rank whose rows this rank recomputes when the work of rank q's group is recomputed: the
 * same position in q's group (q itself without a tensor, context or expert group or a
 * pipeline). Local. */
static int counterpart(const tsr_trainer *t, int q) {
    const sdc_replay_state *rp = &t->sdc->rp;
    return member(rp, q, position(rp, t->dist.rank));
}

/* Rank c recomputes rank q's first `rows` rows (q sends them, unless c is q; in lockstep every
 * rank does: under zero3 / hsdp q's rows broadcast, in a tensor, context or expert group each
 * position's rows of q's group broadcast to that position in every group, each group
 * recomputing them together); c's fingerprint, on every rank. Collective. */
static uint32_t compute_on(tsr_trainer *t, int c, int q, int64_t rows, float scale) {
    sdc_replay_state *rp = &t->sdc->rp;
    const int me = t->dist.rank, src = counterpart(t, q);
    const size_t bytes = (size_t)rows * row_bytes(t);
    uint32_t crc = 0;
    if (lockstep(t)) {
        if (me == src) memcpy(rp->theirs, rp->mine, bytes);
        if (rp->pos) dist_group_bcast(rp->pos, rp->theirs, bytes, group_index(rp, src));
        else dist_bcast(rp->theirs, bytes, q);
        crc = recompute(t, rp->theirs, src, rows, scale);
    } else {
        if (c != q && (me == q || me == c))
            dist_group_sendrecv(rp->world, rp->mine, me == q ? c : -1, rp->theirs,
                                me == c ? q : -1, bytes);
        if (me == c) crc = recompute(t, c == q ? rp->mine : rp->theirs, q, rows, scale);
    }
    dist_bcast(&crc, sizeof crc, c);
    return crc;
}

/* The verdict on rank q's work, whose fingerprint fq rank r's recomputation contradicted (rr):
 * the third opinion, the second try (sdc_vote.h). *suspect: the rank whose computation erred
 * (-1: none known), *original: it was q's own, which the step used. Collective. */
static sdc_rp_kind judge(tsr_trainer *t, int q, int r, uint32_t fq, uint32_t rr, int64_t rows,
                         float scale, int *suspect, int *original) {
    const int groups = t->dist.world / t->sdc->rp.members;
    const int third = groups >= 3 ? shift(t, q, 1) : -1; /* (the same position, the group after) */
    sdc_verdict *v = &t->sdc->v;
    *suspect = -1, *original = 0;
    v->rp_third = third;
    v->rp_crc[2] = third >= 0 ? compute_on(t, third, q, rows, scale) : 0;
    sdc_rp_who who = sdc_replay_suspect(fq, rr, third >= 0, v->rp_crc[2]);
    if (who == SDC_RP_NOBODY) return SDC_RP_UNATTRIBUTED;
    if (who == SDC_RP_EITHER) { /* (no third rank) the original's second try first */
        v->rp_crc[3] = compute_on(t, v->rp_retry = q, q, rows, scale);
        if (v->rp_crc[3] == rr) return (*suspect = q), (*original = 1), SDC_RP_TRANSIENT;
        if (v->rp_crc[3] != fq) return SDC_RP_UNATTRIBUTED;
        if (q == r) return (*suspect = q), SDC_RP_TRANSIENT; /* (one rank: its replay erred) */
        who = SDC_RP_REPLAYER; /* q repeats itself: the replayer's second try decides */
    }
    *suspect = who == SDC_RP_ORIGINAL ? q : r;
    *original = who == SDC_RP_ORIGINAL;
    v->rp_crc[3] = compute_on(t, v->rp_retry = *suspect, q, rows, scale);
    if (v->rp_crc[3] == (*original ? rr : fq)) return SDC_RP_TRANSIENT;
    if (third >= 0) return SDC_RP_PERSISTENT;
    return (*suspect = -1), SDC_RP_UNATTRIBUTED; /* (two ranks, each agreeing with itself) */
}

/* A tensor, context or expert group's replay: the positions (bit p) of rank q's group whose
 * original and recomputation differ, where more than one does (a fault of one member may change
 * the others' gradients: the group is blamed); 0 otherwise */
static uint64_t group_differs(const tsr_trainer *t, int q, const uint32_t *pairs) {
    const sdc_replay_state *rp = &t->sdc->rp;
    uint64_t mask = 0;
    for (int p = 0; p < rp->members && p < 64; p++) {
        const int a = member(rp, q, p), r = shift(t, a, -1);
        if (pairs[2 * a] != pairs[2 * r + 1]) mask |= (uint64_t)1 << p;
    }
    return mask & (mask - 1) ? mask : 0;
}

/* The verdict on a mismatch of rank q, replayed by r, recorded (and reported: sdc_report);
 * *redo = 1 on rank q when its own result, which the step used, erred. */
static int verdict(tsr_trainer *t, int q, int r, const uint32_t *pairs, int64_t rows,
                   float scale, int *redo) {
    tsr_sdc *s = t->sdc;
    s->v.rp_stride = s->rp.members, s->v.rp_mstep = s->rp.mstep;
    s->v.rp_group = group_differs(t, q, pairs), s->v.rp_batch = t->part.pp_on;
    t->out.health.replay_mismatches++;
    s->v.rp_q = q, s->v.rp_r = r, s->v.rp_crc[0] = pairs[2 * q], s->v.rp_crc[1] = pairs[2 * r + 1];
    s->v.rp_crc[2] = s->v.rp_crc[3] = 0;
    s->v.rp_third = s->v.rp_retry = -1;
    int original;
    s->v.rp_kind = judge(t, q, r, s->v.rp_crc[0], s->v.rp_crc[1], rows, scale,
                         &s->v.rp_suspect, &original);
    s->v.found = SDC_FOUND_REPLAY;
    s->v.step = t->step + 1;
    s->v.suspect_from = -1;
    sdc_report(t, s);
    if (s->v.rp_kind != SDC_RP_TRANSIENT) return TSR_EXIT_SDC;
    t->out.health.transients++;
    s->v.found = SDC_FOUND_NONE; /* (the run goes on) */
    if (original && t->dist.rank == q) *redo = 1;
    return 0;
}

/* The replay of every rank's first `rows` rows by its left neighbour: the fingerprints
 * (own: this rank's original, theirs: its recomputation of its right neighbour's) gathered and
 * judged. Returns 0 or TSR_EXIT_SDC; *redo as verdict's, and on every rank whose buffers a
 * recomputation used (in lockstep: every rank). Collective. */
static int judge_all(tsr_trainer *t, uint32_t own, uint32_t theirs, int64_t rows, float scale,
                     int *redo) {
    const int W = t->dist.world;
    uint32_t mine[2] = {own, theirs}, *pairs = tsr_malloc((size_t)W * sizeof mine);
    dist_allgather(mine, pairs, sizeof mine);
    t->out.health.replays++;
    t->sdc->rp.clobbered = 0;
    const sdc_replay_state *rp = &t->sdc->rp;
    int rc = 0;
    for (int g = 0; g < W && !rc; g++) { /* (each group's first member: its verdict covers all) */
        for (int p = 0; p < rp->members && position(rp, g) == 0; p++) {
            const int q = member(rp, g, p), r = shift(t, q, -1); /* (r recomputed q's rows) */
            if (pairs[2 * q] == pairs[2 * r + 1]) continue;
            rc = verdict(t, q, r, pairs, rows, scale, redo);
            break;
        }
    }
    free(pairs);
    *redo |= t->sdc->rp.clobbered;
    return rc;
}

/* This rank's first `rows` rows sent to its left neighbour, its right neighbour's recomputed:
 * their fingerprint. Collective. */
static uint32_t shifted(tsr_trainer *t, int64_t rows, float scale) {
    sdc_replay_state *rp = &t->sdc->rp;
    const int me = t->dist.rank;
    pack(t, rows);
    dist_group_sendrecv(rp->world, rp->mine, shift(t, me, -1), rp->theirs, shift(t, me, 1),
                        (size_t)rows * row_bytes(t));
    return recompute(t, rp->theirs, shift(t, me, 1), rows, scale);
}

int sdc_replay_before(tsr_trainer *t, float scale) {
    tsr_sdc *s = t->sdc;
    if (!s || !replay_due(t)) return 0;
    const double t0 = tsr_now();
    TSR_CHECK(sdc_before_replay(t)); /* (the state it recomputes from agrees first) */
    s->rp.theirs_crc = shifted(t, replay_rows(t), scale);
    s->rp.seconds += tsr_now() - t0;
    t->out.health.step_s += tsr_now() - t0;
    return 0;
}

int sdc_replay(tsr_trainer *t, float scale, int *redo) {
    tsr_sdc *s = t->sdc;
    *redo = 0;
    if (!s || !replay_due(t) || s->rp.step != t->step + 1) return 0;
    const double t0 = tsr_now();
    s->v.rp_whole = 0;
    const int rc = judge_all(t, s->rp.own, s->rp.theirs_crc, replay_rows(t), scale, redo);
    s->rp.seconds += tsr_now() - t0;
    t->out.health.step_s += tsr_now() - t0;
    return rc;
}

/* Every recomputation agreed with the original: the data (rank 0's line and event) */
static void report_data(tsr_trainer *t, const char *trigger) {
    if (t->dist.rank != 0) return;
    printf("health: replay of step %lld after the spike guard's %s: every rank's batch "
           "recomputed by its neighbour gives the same gradients: the data, not the hardware; "
           "the guard's response follows\n", (long long)(t->step + 1), trigger);
    if (!t->out.metrics) return;
    fprintf(t->out.metrics, "{\"event\": \"replay\", \"step\": %lld, \"trigger\": \"%s\", "
            "\"verdict\": \"data\"", (long long)(t->step + 1), trigger);
    jsonl_end_record(t->out.metrics);
}

int sdc_replay_trip(tsr_trainer *t, float scale, const char *trigger, int *redo) {
    tsr_sdc *s = t->sdc;
    *redo = 0;
    if (!s || !s->rp.on || s->rp.busy || s->rp.whole_step != t->step + 1) return 0;
    const double t0 = tsr_now();
    TSR_CHECK(sdc_before_replay(t));
    s->v.rp_whole = 1;
    const int64_t mismatches = t->out.health.replay_mismatches;
    const uint32_t theirs = shifted(t, t->per_rank, scale);
    const int rc = judge_all(t, s->rp.whole, theirs, t->per_rank, scale, redo);
    if (!rc && t->out.health.replay_mismatches == mismatches) report_data(t, trigger);
    *redo = 1; /* (every rank's buffers held a recomputation) */
    s->rp.seconds += tsr_now() - t0;
    t->out.health.step_s += tsr_now() - t0;
    return rc;
}
