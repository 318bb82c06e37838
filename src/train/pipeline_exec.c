/* pipeline_exec.c — the schedule's executor (train/pipeline.h; docs/pipeline.md "The
 * executor"): each rank runs its list of actions in order, a forward receiving its input from
 * the stage before (a wait) and sending its output to the stage after (a non-blocking send), a
 * backward likewise with the gradients; a microbatch's activations live in a set of its chunk
 * from its F to its B (or BW); the last stage's losses are the step's. Each action's compute and
 * each wait is timed: the bubble. Evaluations run every chunk once per batch, stage after stage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "model/decoder.h"
#include "model/model_ep.h"
#include "model/model_ring.h"
#include "run/run.h"
#include "train/pipeline.h"
#include "train/pipeline_int.h"
#include "watchdog/watchdog.h"

/* ---- the sets and the messages ---------------------------------------------------------------- */

void pp_chunk_decoder(tsr_trainer *t, int c, pp_set *s, const tsr_backend *be,
                      const uint8_t *starts, tsr_decoder *d) {
    if (t->part.ppx->ep) ep_slots_use(t->part.ppx->ep, s->ep_slots, s->n_ep_slots);
    model_decoder_of(&t->part.pp.chunk[c], &s->a, be ? be : &s->be, d);
    d->starts = starts;
    d->lora = t->model.lora; /* (DPO's reference pass runs the base without them) */
}

pp_set *pp_set_take(tsr_trainer *t, int c, int mb) {
    pp_exec *x = t->part.ppx;
    for (int i = 0; i < x->n_sets[c]; i++)
        if (x->sets[c][i]->mb < 0) {
            x->sets[c][i]->mb = mb;
            return x->sets[c][i];
        }
    tsr_model *m = &t->part.pp.chunk[c];
    pp_set *s = pp_set_new(x, m);
    if (dec_try_alloc_acts(m, &m->be, &s->a, x->B, t->T) != 0)
        tsr_die(TSR_EXIT_USAGE, "pipeline: out of memory allocating the activations of chunk %d "
                "(stage %d) for its microbatch in flight number %d (%.1f MiB a microbatch of %d "
                "x %d): use activation checkpointing, a smaller micro_batch or more pipeline "
                "stages", c, pp_chunk_stage(&t->part.pp, c), x->n_sets[c] + 1,
                (double)dec_acts_bytes(m, &m->be, x->B, t->T) / 1048576.0, x->B, t->T);
    x->sets[c] = tsr_realloc(x->sets[c], (size_t)(x->n_sets[c] + 1) * sizeof *x->sets[c]);
    x->sets[c][x->n_sets[c]++] = s;
    s->mb = mb;
    return s;
}

pp_set *pp_set_of(pp_exec *x, int c, int mb) {
    for (int i = 0; i < x->n_sets[c]; i++)
        if (x->sets[c][i]->mb == mb) return x->sets[c][i];
    tsr_die(TSR_EXIT_INTERNAL, "pipeline: no activations of chunk %d's microbatch %d (a "
            "backward before its forward)", c, mb);
}

pp_set *pp_set_new(pp_exec *x, const tsr_model *m) {
    pp_set *s = tsr_calloc(1, sizeof *s);
    s->be = m->be, s->mb = -1;
    if (m->be.capped) s->be.capped = &s->capped;
    if (x->ep) s->ep_slots = ep_slots_new(x->ep, m->L), s->n_ep_slots = m->L;
    return s;
}

void pp_sets_free(pp_exec *x, int V) {
    if (x->ep) ep_slots_use(x->ep, NULL, 0);
    for (int c = 0; c < V; c++) {
        for (int i = 0; i < x->n_sets[c]; i++) {
            pp_set *s = x->sets[c][i];
            if (x->ep) ep_slots_free(x->ep, s->ep_slots, s->n_ep_slots);
            dec_free_acts(&s->be, &s->a);
            free(s->capped.z);
            free(s);
        }
        free(x->sets[c]);
        x->sets[c] = NULL, x->n_sets[c] = 0;
    }
}

int pp_tag(int dir, int c, int mb) { return ((mb % 512) * TSR_PART_MAX + c) * 2 + dir; }

/* the sends that have finished made free again */
static void reap(pp_exec *x) {
    for (int i = 0; i < x->n_msgs; i++)
        if (x->msgs[i]->req && dist_test(x->msgs[i]->req)) x->msgs[i]->req = NULL;
}

/* a free message buffer, a new one when none is */
static pp_msg *msg_free(pp_exec *x) {
    reap(x);
    for (int i = 0; i < x->n_msgs; i++)
        if (!x->msgs[i]->req && !x->msgs[i]->held) return x->msgs[i];
    x->msgs = tsr_realloc(x->msgs, (size_t)(x->n_msgs + 1) * sizeof *x->msgs);
    pp_msg *g = tsr_calloc(1, sizeof *g);
    g->buf = tsr_malloc(x->msg_bytes);
    return x->msgs[x->n_msgs++] = g;
}

void pp_sends_wait(pp_exec *x) {
    for (int i = 0; i < x->n_msgs; i++) {
        dist_wait(x->msgs[i]->req);
        x->msgs[i]->req = NULL;
    }
}

/* the world rank of pipeline rank q in this rank's pipeline (the same place in stage q) */
static int world_rank_of(const tsr_trainer *t, int q) {
    const int Wp = t->dist.world / t->part.pp.P;
    return q * Wp + t->dist.rank % Wp;
}

pp_msg *pp_recv(tsr_trainer *t, size_t n, int from, int tag, const char *what, int stage) {
    pp_exec *x = t->part.ppx;
    pp_msg *g = msg_free(x);
    char line[200];
    snprintf(line, sizeof line, "waiting for stage %d (world rank %d) to send %s", stage,
             world_rank_of(t, from), what);
    watchdog_detail(line);
    watchdog_phase(WD_PIPE_WAIT, t->step);
    const double t0 = tsr_now();
    dist_wait(dist_group_irecv(x->pipe, g->buf, n, from, tag));
    x->wait += tsr_now() - t0;
    watchdog_phase((tsr_wd_phase)x->phase, t->step);
    g->held = 1;
    return g;
}

void pp_send(tsr_trainer *t, const void *src, size_t n, int to, int tag) {
    pp_exec *x = t->part.ppx;
    pp_msg *g = msg_free(x);
    memcpy(g->buf, src, n);
    g->req = dist_group_isend(x->pipe, g->buf, n, to, tag);
    x->sent += n;
}

/* ---- the actions ------------------------------------------------------------------------------ */

/* a microbatch's rows: its inputs, targets and segment starts in this rank's batch */
typedef struct mb_rows {
    const int32_t *in, *tg;
    const uint8_t *starts;
} mb_rows;

static mb_rows rows_of(const tsr_trainer *t, int mb) {
    const size_t at = (size_t)mb * (size_t)t->micro * (size_t)t->T;
    return (mb_rows){t->data.inputs + at, t->data.targets + at,
                     t->data.starts ? t->data.starts + at : NULL};
}

size_t pp_out_bytes(const tsr_trainer *t, int B) {
    const tsr_tp *tp = t->model.tp;
    const size_t N = (size_t)B * (size_t)(t->T / t->model.cpN);
    return N / (tp && tp->sp ? (size_t)tp->T : 1) * (size_t)t->model.C * sizeof(float);
}

/* MoE: the microbatch's routing statistics of chunk c's layers, at their place in the whole
 * model's records (as model_moe_stats_add: its counted targets x scale; under context
 * parallelism this rank's share of them, which the forward just staged) */
static void moe_stats(tsr_trainer *t, int c, const tsr_decoder *d, const int32_t *tg,
                      float scale) {
    const tsr_model *m = &t->part.pp.chunk[c];
    if (!t->out.moe || !m->LM) return;
    const tsr_ring *g = d->ring;
    const size_t N = (size_t)t->micro * (size_t)(t->T / m->cpN);
    const double w = dec_moe_weight(g ? g->targets : tg, N, scale);
    dec_moe_stats_add(d, w, t->out.moe + (size_t)t->part.pp.moe_before[c] * (size_t)(2 + m->E));
}

/* what chunk c's microbatch mb waits for: the activations from the stage before (bw 0) or the
 * gradient from the stage after (bw 1); NULL at the end of the pipeline that has no such stage */
static pp_msg *act_wait(tsr_trainer *t, int c, int mb, int bw) {
    const tsr_pp *pp = &t->part.pp;
    const int from = pp_chunk_stage(pp, c) + (bw ? 1 : -1);
    if (from < 0 || from >= pp->S) return NULL;
    char what[64];
    snprintf(what, sizeof what, "microbatch %d's %s", mb, bw ? "gradient" : "activations");
    return pp_recv(t, pp_out_bytes(t, t->micro), from % pp->P, pp_tag(bw, c, mb), what, from);
}

static void act_forward(tsr_trainer *t, int c, int mb, float scale, double *loss) {
    pp_exec *x = t->part.ppx;
    const tsr_pp *pp = &t->part.pp;
    const int s = pp_chunk_stage(pp, c), P = pp->P;
    pp_msg *g = act_wait(t, c, mb, 0);
    const double t0 = tsr_now();
    pp_set *set = pp_set_take(t, c, mb);
    const mb_rows r = rows_of(t, mb);
    const size_t n = pp_out_bytes(t, t->micro);
    tsr_decoder d;
    pp_chunk_decoder(t, c, set, NULL, r.starts, &d);
    d.pp_x = g ? g->buf : NULL;
    run_lora_pass(&t->run, (int64_t)mb * t->micro); /* (LoRA's dropout of these rows) */
    dec_forward(&d, r.in, r.tg, t->micro, t->T, -1.0f);
    if (g) g->held = 0;
    if (s == pp->S - 1) *loss += dec_loss_sum(&d, r.tg, t->micro, t->T);
    moe_stats(t, c, &d, r.tg, scale);
    if (s < pp->S - 1) pp_send(t, dec_output(&d), n, (s + 1) % P, pp_tag(0, (s + 1) / P, mb));
    x->busy += tsr_now() - t0;
}

/* a BW, or (split) a zero-bubble B: its weights' half kept in the microbatch's W list */
static void act_backward(tsr_trainer *t, int c, int mb, float scale, int split) {
    pp_exec *x = t->part.ppx;
    const tsr_pp *pp = &t->part.pp;
    const int s = pp_chunk_stage(pp, c), P = pp->P;
    const size_t n = pp_out_bytes(t, t->micro);
    pp_msg *g = act_wait(t, c, mb, 1);
    const double t0 = tsr_now();
    const mb_rows r = rows_of(t, mb);
    pp_set *set = pp_set_of(x, c, mb);
    tsr_decoder d;
    if (t->model.ring) /* (context parallelism: this microbatch's share again, for the backward) */
        ring_stage(t->model.ring, r.in, r.tg, t->micro, t->T,
                   t->model.cfg.attn_mask == TSR_MASK_DOCUMENT ? t->model.cfg.eot_token : -1,
                   r.starts);
    if (split) {
        zb_backend_use(&x->zb, &set->be);
        x->zb.into = &x->w[(size_t)c * (size_t)x->sched.M + (size_t)mb];
    }
    pp_chunk_decoder(t, c, set, split ? &x->zb.be : NULL, r.starts, &d);
    d.pp_dy = g ? g->buf : NULL;
    run_lora_pass(&t->run, (int64_t)mb * t->micro);
    dec_backward(&d, r.in, r.tg, t->micro, t->T, scale, NULL, NULL);
    x->zb.into = NULL;
    if (g) g->held = 0;
    if (s > 0) pp_send(t, set->a.dresidual, n, (s - 1) % P, pp_tag(1, (s - 1) / P, mb));
    set->mb = -1; /* (a B's weights' half holds copies of what it reads) */
    x->busy += tsr_now() - t0;
}

static void act_weights(tsr_trainer *t, int c, int mb) {
    pp_exec *x = t->part.ppx;
    const double t0 = tsr_now();
    zb_run(&x->zb, &x->w[(size_t)c * (size_t)x->sched.M + (size_t)mb], t->be.ops);
    x->busy += tsr_now() - t0;
}

/* this rank's idle time in a measured step: the pipeline's slowest wall less its own busy
 * (pipeline_report's idle per rank; bench/pp_bubble.sh) */
static void idle_add(pp_exec *x, double wall) { x->idle += wall - x->busy; }

/* the step's times over the pipeline: every rank's busy seconds, the slowest rank's wall (the
 * first step, which allocates the sets, not counted) */
static void measure(tsr_trainer *t) {
    pp_exec *x = t->part.ppx;
    double busy = x->busy, wall = x->wall;
    dist_group_allreduce_sum_f64(x->pipe, &busy, 1);
    dist_group_allreduce_max_f64(x->pipe, &wall, 1);
    if (x->steps++ == 0) return;
    x->sum_busy += busy, x->sum_wall += wall * t->part.pp.P;
    idle_add(x, wall);
}

/* TSR_FAULT="stall_pipeline:STEP:RANK" (tests): RANK stops for good before step STEP's first
 * action, its own watchdog idle (a stage stuck where nothing of its own notices, a node that
 * froze): its neighbours' waits name it (docs/pipeline.md "Hangs") */
static void fault_stall(const tsr_trainer *t) {
    long long s, r;
    const char *f = tsr_fault("stall_pipeline");
    if (!f || sscanf(f, "%lld:%lld", &s, &r) != 2 || r != t->dist.rank || s != t->step + 1) return;
    watchdog_phase(WD_IDLE, t->step);
    for (;;) pause();
}

/* this rank's actions of the schedule, every send waited for; the last stage's loss sum */
static double run_actions(tsr_trainer *t, float scale) {
    pp_exec *x = t->part.ppx;
    const tsr_pp *pp = &t->part.pp;
    double loss = 0.0;
    for (int i = 0; i < x->sched.per_rank; i++) {
        const pp_action *a = pp_action_at(&x->sched, pp->p, i);
        switch ((pp_op)a->op) {
        case PP_F: act_forward(t, a->chunk, a->mb, scale, &loss); break;
        case PP_B: act_backward(t, a->chunk, a->mb, scale, 1); break;
        case PP_BW: act_backward(t, a->chunk, a->mb, scale, 0); break;
        case PP_W: act_weights(t, a->chunk, a->mb); break;
        default: tsr_die(TSR_EXIT_INTERNAL, "pipeline: action %d", a->op);
        }
    }
    pp_sends_wait(x);
    return loss;
}

double pipeline_compute(tsr_trainer *t, float scale) {
    pp_exec *x = t->part.ppx;
    fault_stall(t);
    x->busy = x->wait = 0.0, x->phase = WD_COMPUTE;
    const double t0 = tsr_now();
    double loss = run_actions(t, scale);
    x->wall = tsr_now() - t0;
    measure(t);
    dist_group_bcast(x->pipe, &loss, sizeof loss, t->part.pp.P - 1); /* (the last stage's) */
    return loss;
}

double pipeline_replay(tsr_trainer *t, float scale) {
    pp_exec *x = t->part.ppx;
    const uint64_t sent = x->sent;
    x->phase = WD_COMPUTE;
    double loss = run_actions(t, scale);
    x->sent = sent; /* (the report counts the steps' and evaluations' bytes) */
    dist_group_bcast(x->pipe, &loss, sizeof loss, t->part.pp.P - 1);
    return loss;
}

/* ---- evaluation --------------------------------------------------------------------------- */

/* every stage's forward of one batch in turn; on the last stage, the chunk's decoder stays set
 * in *last for its results (its set is free again when the next batch comes) */
static void eval_pass(tsr_trainer *t, const int32_t *tokens, const int32_t *targets, int B,
                      tsr_decoder *last) {
    pp_exec *x = t->part.ppx;
    const tsr_pp *pp = &t->part.pp;
    const size_t n = pp_out_bytes(t, B);
    x->phase = WD_EVAL;
    for (int c = 0; c < pp->V; c++) {
        const int s = pp_chunk_stage(pp, c);
        pp_msg *g = s > 0 ? pp_recv(t, n, (s - 1) % pp->P, pp_tag(0, c, 0),
                                    "an evaluation batch's activations", s - 1) : NULL;
        pp_set *set = pp_set_take(t, c, 0);
        tsr_decoder d;
        pp_chunk_decoder(t, c, set, NULL, t->model.starts, &d);
        d.pp_x = g ? g->buf : NULL;
        dec_forward(&d, tokens, targets, B, t->T, -1.0f);
        if (g) g->held = 0;
        if (s < pp->S - 1) pp_send(t, dec_output(&d), n, (s + 1) % pp->P, pp_tag(0, (s + 1) / pp->P, 0));
        else *last = d;
        set->mb = -1, x->turn[c] = set;
    }
    pp_sends_wait(x);
}

double pp_eval_forward(void *ctx, const int32_t *tokens, const int32_t *targets, int B, int T) {
    tsr_trainer *t = ctx;
    tsr_decoder last = {0};
    double loss = 0.0;
    (void)T;
    eval_pass(t, tokens, targets, B, &last);
    if (last.m) loss = dec_loss_sum(&last, targets, B, t->T);
    dist_group_bcast(t->part.ppx->pipe, &loss, sizeof loss, t->part.pp.P - 1);
    return loss;
}

void pp_eval_scores(void *ctx, const int32_t *tokens, const int32_t *targets, int B, int T,
                    float *losses, int32_t *greedy) {
    tsr_trainer *t = ctx;
    tsr_decoder last = {0};
    const size_t N = (size_t)B * (size_t)T;
    eval_pass(t, tokens, targets, B, &last);
    if (last.m) dec_token_scores(&last, targets, B, T, losses, greedy);
    dist_group_bcast(t->part.ppx->pipe, losses, N * sizeof *losses, t->part.pp.P - 1);
    if (greedy) dist_group_bcast(t->part.ppx->pipe, greedy, N * sizeof *greedy, t->part.pp.P - 1);
}
