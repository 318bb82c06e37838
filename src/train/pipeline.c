/* pipeline.c — pipeline parallelism's glue in the trainer (train/pipeline.h): the microbatches
 * against the schedule, the cut and this rank's part at start, the executor and the evaluation
 * hooks once the weights exist, the tied embeddings' gradients, the gradient norm's shares, the
 * end-of-run report. The executor is pipeline_exec.c's, the split backward pipeline_zb.c's. */
#include "train/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/decoder.h"
#include "model/model_ep.h"
#include "train/pipeline_int.h"
#include "watchdog/watchdog.h"

_Static_assert((int)TSR_PP_1F1B == (int)PP_1F1B && (int)TSR_PP_INTERLEAVED == (int)PP_INTERLEAVED &&
               (int)TSR_PP_ZB == (int)PP_ZB, "parallel.pipeline_schedule's order is pp_kind's");

/* the step's microbatches against the schedule: 0, or TSR_EXIT_USAGE after rank 0 named the
 * keys, the schedule's reason and what to change */
static int check_microbatches(const tsr_trainer *t, int P, int V) {
    const tsr_config *c = &t->cfg;
    const int M = (int)(t->per_rank / t->micro);
    char why[400];
    if (pp_layout_check((pp_kind)c->pipeline_schedule, P, V, M, why, sizeof why) == 0) return 0;
    if (t->dist.rank == 0)
        tsr_error("parallel.pipeline = %d, parallel.pipeline_schedule = \"%s\": %s; a step's "
                  "microbatches are the per-rank batch (global_batch %lld / %d data ranks = "
                  "%lld) over micro_batch = %d: change micro_batch or global_batch",
                  P, pp_kind_name((pp_kind)c->pipeline_schedule), why,
                  (long long)c->global_batch, t->mesh.D, (long long)t->per_rank, t->micro);
    return TSR_EXIT_USAGE;
}

int pipeline_init(tsr_trainer *t) {
    if (t->mesh.P <= 1) return 0;
    const int P = t->mesh.P, V = (int)t->cfg.pipeline_virtual, S = P * V;
    TSR_CHECK(check_microbatches(t, P, V));
    int *cut = tsr_malloc((size_t)(S + 1) * sizeof *cut);
    pp_cut(t->model.global ? t->model.global : &t->model, &t->cfg, t->T, S, cut);
    const tsr_mesh_group *pg = mesh_group(&t->mesh, TSR_MESH_PIPELINE);
    const tsr_mesh_group *sg = mesh_group(&t->mesh, TSR_MESH_STAGE);
    model_set_pipeline(&t->model, &t->part.pp, P, V, pg->rank, cut);
    free(cut);
    t->part.pp_on = 1;
    if (t->part.tp_on) return 0; /* (the flat layout's ranks: tensor_data's, within the stage) */
    t->part.flat = sg->cpu; /* (NULL in a plan) */
    t->part.flat_rank = sg->rank, t->part.flat_world = sg->size;
    return 0;
}

void pipeline_open(tsr_trainer *t) {
    if (!t->part.pp_on) return;
    tsr_pp *pp = &t->part.pp;
    pp_attach(pp, &t->model);
    pp_exec *x = tsr_calloc(1, sizeof *x);
    char why[400];
    const int M = (int)(t->per_rank / t->micro);
    if (pp_schedule_build(&x->sched, (pp_kind)t->cfg.pipeline_schedule, pp->P, pp->V, M, why,
                          sizeof why) != 0)
        tsr_die(TSR_EXIT_INTERNAL, "pipeline: %s (checked at start)", why);
    x->pipe = mesh_group(&t->mesh, TSR_MESH_PIPELINE)->cpu;
    x->ep = t->part.ep_on ? &t->part.ep : NULL;
    x->B = t->micro;
    x->msg_bytes = (size_t)x->B * (size_t)t->T * (size_t)t->model.C * sizeof(float);
    x->w = tsr_calloc((size_t)pp->V * (size_t)M, sizeof *x->w);
    t->part.ppx = x;
    t->model.fwd = pp_eval_forward, t->model.scores = pp_eval_scores, t->model.fwd_ctx = t;
    t->model.bwd_weighted = pp_turn_backward, t->model.moe_stats = pp_turn_moe_stats;
}

void pipeline_free(tsr_trainer *t) {
    pp_exec *x = t->part.ppx;
    if (x) {
        pp_sends_wait(x);
        pp_sets_free(x, t->part.pp.V);
        for (int i = 0; i < x->n_msgs; i++) free(x->msgs[i]->buf), free(x->msgs[i]);
        free(x->msgs);
        for (int i = 0; i < t->part.pp.V * x->sched.M; i++) zb_list_free(&x->w[i]);
        free(x->w);
        pp_schedule_free(&x->sched);
        free(x);
        t->part.ppx = NULL;
    }
    pp_free(&t->part.pp);
}

int pipeline_try_acts(tsr_trainer *t) {
    pp_exec *x = t->part.ppx;
    for (int c = 0; c < t->part.pp.V; c++) {
        tsr_model *m = &t->part.pp.chunk[c];
        if (x->n_sets[c]) continue;
        pp_set *s = pp_set_new(x, m);
        if (dec_try_alloc_acts(m, &m->be, &s->a, x->B, t->T) != 0) {
            if (x->ep) ep_slots_free(x->ep, s->ep_slots, s->n_ep_slots);
            free(s);
            pipeline_free_acts(t);
            return -1;
        }
        x->sets[c] = tsr_malloc(sizeof *x->sets[c]);
        x->sets[c][0] = s, x->n_sets[c] = 1;
    }
    return 0;
}

void pipeline_free_acts(tsr_trainer *t) {
    if (t->part.ppx) pp_sets_free(t->part.ppx, t->part.pp.V);
}

int pipeline_acts_B(const tsr_trainer *t) {
    const pp_exec *x = t->part.ppx;
    return x && x->n_sets[0] ? x->B : 0;
}

/* ---- the stages in turn: DPO's pass -------------------------------------------------------- */

void pp_turn_backward(void *ctx, const int32_t *tokens, const int32_t *targets, int B, int T,
                      const float *dlosses, float moe_w) {
    tsr_trainer *t = ctx;
    pp_exec *x = t->part.ppx;
    const tsr_pp *pp = &t->part.pp;
    const size_t n = pp_out_bytes(t, B);
    x->phase = WD_COMPUTE;
    for (int c = pp->V - 1; c >= 0; c--) {
        const int s = pp_chunk_stage(pp, c);
        pp_msg *g = s < pp->S - 1 ? pp_recv(t, n, (s + 1) % pp->P, pp_tag(1, c, 0),
                                            "a pass's gradient", s + 1) : NULL;
        tsr_decoder d;
        pp_chunk_decoder(t, c, x->turn[c], NULL, t->model.starts, &d);
        d.pp_dy = g ? g->buf : NULL;
        dec_backward_weighted(&d, tokens, targets, B, T, dlosses, moe_w);
        if (g) g->held = 0;
        if (s > 0)
            pp_send(t, x->turn[c]->a.dresidual, n, (s - 1) % pp->P, pp_tag(1, (s - 1) / pp->P, 0));
    }
    pp_sends_wait(x);
}

void pp_turn_moe_stats(void *ctx, double w, double *acc) {
    tsr_trainer *t = ctx;
    const tsr_pp *pp = &t->part.pp;
    for (int c = 0; c < pp->V; c++) {
        const tsr_model *m = &pp->chunk[c];
        tsr_decoder d;
        if (!m->LM) continue;
        pp_chunk_decoder(t, c, t->part.ppx->turn[c], NULL, NULL, &d);
        dec_moe_stats_add(&d, w, acc + (size_t)pp->moe_before[c] * (size_t)(2 + m->E));
    }
}

/* ---- the gradients ------------------------------------------------------------------------- */

/* the part's wte gradients: in the flat buffer, or (zero3 / hsdp) in the root unit's, gathered
 * for the step (model/fsdp.h) */
static float *wte_grads(tsr_trainer *t) {
    size_t lo, n;
    pp_wte_range(&t->model, &lo, &n);
    if (!t->part.fsdp_on) return t->model.grads + lo;
    const fsdp_unit *root = &t->part.fsdp.units[0];
    for (int k = 0; k < root->n_seg; k++)
        if (root->seg[k].id == TSR_P_WTE) return t->part.fsdp.root_g + root->seg[k].at;
    tsr_die(TSR_EXIT_INTERNAL, "pipeline: no wte in the sharded root");
}

void pipeline_tied_grads(tsr_trainer *t) {
    const tsr_pp *pp = &t->part.pp;
    size_t lo, n;
    if (!t->cfg.model.tie_embeddings || (pp->p != 0 && pp->p != pp->P - 1)) return;
    pp_wte_range(&t->model, &lo, &n);
    float *g = wte_grads(t), *other = tsr_malloc(n * sizeof *other);
    const int peer = pp->p == 0 ? pp->P - 1 : 0;
    /* each end sends its own and adds the other's: a + b on one, b + a on the other (the same
     * bits) */
    dist_group_sendrecv(t->part.ppx->pipe, g, peer, other, peer, n * sizeof *other);
    for (size_t i = 0; i < n; i++) g[i] += other[i];
    free(other);
}

double pipeline_shard_sumsq(const tsr_trainer *t) {
    const tsr_fsdp *f = &t->part.fsdp;
    if (!pp_tied_copy(&t->part.pp, &t->model)) return t->be.ops->sumsq(f->grads, f->shard_n);
    double sq = 0.0;
    for (int k = 0; k < f->n_pieces[f->grank]; k++) {
        const fsdp_piece *p = &f->pieces[f->grank][k];
        if (p->id != TSR_P_WTE) sq += t->be.ops->sumsq(f->grads + p->shard, p->len);
    }
    return sq;
}

double pipeline_sumsq(const tsr_trainer *t, const float *g, size_t lo, size_t hi) {
    return pp_sumsq(&t->part.pp, &t->model, g, lo, hi);
}

double pipeline_sum_stages(const tsr_trainer *t, double sq) {
    dist_group_allreduce_sum_f64(t->part.ppx->pipe, &sq, 1);
    return sq;
}

/* ---- auxiliary-loss-free balancing -------------------------------------------------------- */

double *pipeline_part_moe(const tsr_trainer *t, const double *moe) {
    const tsr_pp *pp = &t->part.pp;
    const size_t row = (size_t)(2 + t->model.E);
    double *part = tsr_malloc(((size_t)t->model.LM + 1) * row * sizeof *part), *at = part;
    for (int c = 0; c < pp->V; c++) {
        const size_t n = (size_t)pp->chunk[c].LM * row;
        memcpy(at, moe + (size_t)pp->moe_before[c] * row, n * sizeof *at);
        at += n;
    }
    return part;
}

/* ---- the report ---------------------------------------------------------------------------- */

/* the schedule's bubble at equal costs of its actions (docs/pipeline.md's formulas, by its
 * simulator) */
static double schedule_bubble(const pp_schedule *s) {
    pp_timing tm;
    char why[200];
    const pp_costs unit = {1, 1, 1};
    if (pp_simulate(s, unit, &tm, why, sizeof why) != 0) return -1;
    const double b = pp_bubble(s, &tm);
    pp_timing_free(&tm);
    return b;
}

/* each stage's idle share of the measured steps' wall (its own timer, pipeline_exec.c), rank 0's
 * line: "pipeline: idle per rank 0.2011 0.1934 ..." in stage order */
static void report_idle(tsr_trainer *t) {
    pp_exec *x = t->part.ppx;
    const int P = t->part.pp.P;
    double *idle = tsr_calloc((size_t)P, sizeof *idle);
    idle[t->part.pp.p] = x->idle;
    dist_group_allreduce_sum_f64(x->pipe, idle, (size_t)P);
    if (t->dist.rank == 0 && x->sum_wall > 0) {
        printf("pipeline: idle per rank (stage order, share of the measured steps' wall):");
        for (int r = 0; r < P; r++) printf(" %.4f", idle[r] / (x->sum_wall / P));
        printf("\n");
    }
    free(idle);
}

void pipeline_report(tsr_trainer *t) {
    pp_exec *x = t->part.ppx;
    if (!x || t->be.gpu) return; /* (device = cuda: the library's executor, src/gpu/gpu_pp.c) */
    report_idle(t);
    int64_t sent = (int64_t)x->sent;
    dist_allreduce_sum_i64(&sent, 1);
    if (t->dist.rank != 0) return;
    printf("pipeline: %lld bytes sent between stages in %lld steps (all %d ranks, activations "
           "and their gradients, evaluations included)\n", (long long)sent,
           (long long)t->out.steps_run, t->dist.world);
    if (x->sum_wall > 0)
        printf("pipeline: bubble %.4f measured over %lld steps (idle share of the %d stages' "
               "time), %.4f by the %s schedule's table at equal action times (P %d, V %d, "
               "M %d)\n", 1.0 - x->sum_busy / x->sum_wall, (long long)(x->steps - 1), t->part.pp.P,
               schedule_bubble(&x->sched), pp_kind_name(x->sched.kind), x->sched.P, x->sched.V,
               x->sched.M);
}
