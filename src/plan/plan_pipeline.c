/* plan_pipeline.c — the plan's pipeline line (plan.h plan_pipeline; docs/pipeline.md "The
 * plan"): the stages' cut in parallel.pipeline_layout's spelling, the schedule's microbatches and
 * its bubble by its own table, the activations each end of the pipeline holds in flight, the
 * bytes a rank sends to its neighbours a step. */
#include <stdio.h>
#include <string.h>

#include "pipeline/pp_schedule.h"
#include "plan/plan.h"
#include "metrics_units.h"

void plan_pipeline_cut(const tsr_pp *pp, char *out, size_t n) {
    size_t at = 0;
    out[0] = '\0';
    for (int s = 0; s < pp->S && at + 32 < n; s++) {
        const int k = pp->cut[s + 1] - pp->cut[s];
        at += (size_t)snprintf(out + at, n - at, "%s%st", s ? "|" : "", s ? "" : "E");
        if (k > 1) at += (size_t)snprintf(out + at, n - at, "*%d", k);
        if (s == pp->S - 1) snprintf(out + at, n - at, "L");
    }
}

/* (plan.h) the schedule's table at equal action times: its bubble, and the microbatches rank r holds in
 * flight at most (chunks of a microbatch, V of them a whole one); -1 when it does not build */
double plan_pipeline_table(const plan_view *t, int M, int *first, int *last) {
    const tsr_pp *pp = &t->part.pp;
    pp_schedule s;
    pp_timing tm;
    char why[400];
    const pp_costs unit = {1, 1, 1};
    if (pp_schedule_build(&s, (pp_kind)t->cfg.pipeline_schedule, pp->P, pp->V, M, why,
                          sizeof why) != 0)
        return -1;
    double b = -1;
    if (pp_simulate(&s, unit, &tm, why, sizeof why) == 0) {
        b = pp_bubble(&s, &tm);
        *first = tm.peak[0], *last = tm.peak[pp->P - 1];
        pp_timing_free(&tm);
    }
    pp_schedule_free(&s);
    return b;
}

void plan_pipeline(const plan_view *t) {
    const tsr_pp *pp = &t->part.pp;
    const int M = (int)(t->per_rank / t->micro);
    int first = 0, last = 0;
    const double bubble = plan_pipeline_table(t, M, &first, &last);
    char cut[512], acts[32], sent[32];
    plan_pipeline_cut(pp, cut, sizeof cut);
    /* a chunk's activations: the part's per microbatch over its V chunks */
    const double chunk = (double)model_acts_bytes(&t->model, t->micro, t->T) / pp->V;
    metrics_human_bytes(acts, sizeof acts, chunk * first);
    /* each microbatch's output forward and its gradient back, at every chunk boundary a rank has */
    const size_t act = t->cfg.device == TSR_DEVICE_CUDA ? 2 : sizeof(float);
    /* (sequence parallelism: a tensor rank sends its 1 / T of the tokens) */
    const int sp = t->model.tp && t->model.tp->sp ? t->model.tp->T : 1;
    const double msg = (double)t->micro * (t->T / t->model.cpN) / sp * t->model.C * act;
    metrics_human_bytes(sent, sizeof sent, 2.0 * M * pp->V * msg);
    const int Wp = t->dist.world / pp->P;
    printf("pipeline: %d ranks a pipeline (each stage on %d rank%s), %d model chunk%s a rank, %d "
           "stages cut "
           "%s (%s); %d microbatches a step, schedule %s: bubble %.4f by its table at equal "
           "action times; rank 0 holds up to %d microbatch chunk%s of activations in flight (%s; "
           "the memory line counts one microbatch), rank %d up to %d; a rank sends at most %s a "
           "step to its neighbours (activations and their gradients)\n",
           pp->P, Wp, Wp == 1 ? "" : "s", pp->V, pp->V > 1 ? "s" : "", pp->S, cut,
           t->cfg.pipeline_layout[0] ? "parallel.pipeline_layout" : "balanced by cost",
           M, pp_kind_name((pp_kind)t->cfg.pipeline_schedule), bubble, first,
           first == 1 ? "" : "s", acts, pp->P - 1, last, sent);
}
