/* layout.c — --fit layout (layout.h; docs/planning.md "Choosing the layout"). */
#include "plan/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "pipeline/pp_schedule.h"

#define GIB 1073741824.0
#define TOP 5      /* the layouts printed */
#define MAX_OPT 16 /* values a dimension tries */

/* one layout tried and its figures */
typedef struct lay {
    int P, V, T, N, EP, shard, ckpt, micro;
    pp_kind sched;
    double mem;            /* device memory per rank, the activations in flight counted */
    timeplan_layout f;
    const char *not_yet;   /* the key a device = "cuda" start refuses it with (NULL: it runs) */
    const char *value;     /* ... and that key's value, as the config's refusal names it */
} lay;

typedef struct search {
    const tsr_config *cfg;
    const tsr_dist *d;
    double gpu;
    const timeplan *p;
    plan_layout_trial trial;
    lay cur, best[TOP], naive;
    lay other[3], today;       /* the fastest without a pipeline, with one, with a pipeline and
                                * tensor parallelism together; the fastest that runs today */
    int has_other[3], has_today;
    int n_best, tried, planned, fit, has_naive, untimed;
} search;

/* ---- one layout ----------------------------------------------------------------------------- */

/* the first key a device = "cuda" start refuses layout c with, its value in *v (NULL when a start
 * runs it): the config's own tables (config_checks.c validate_pipeline and validate_tensor, the
 * trainer's tensor_device_check), not a copy of them: the modes the pipeline and tensor
 * parallelism do not run with yet, then those their GPU paths do not (docs/pipeline.md,
 * docs/parallelism.md "Tensor parallelism on the GPU"). (config_pipeline_check's refusals within
 * the search, zb with zero3 or hsdp, interleaved with experts, are the GPU table's too.) */
static const char *not_yet(const tsr_config *c, const char **v) {
    const char *k = config_pipeline_pair(c, v);
    if (!k) k = config_tensor_pair(c, v);
    if (!k) k = config_pipeline_cuda_pair(c, v);
    if (!k) k = config_tensor_cuda_pair(c, v);
    if (!k) *v = "";
    return k;
}

/* a before b: more tokens/s a GPU; at a tie (within 0.05 %), one that runs in tessera today, then
 * the less memory */
static int better(const lay *a, const lay *b) {
    const double ta = a->f.tokens_gpu, tb = b->f.tokens_gpu;
    if (ta > tb * 1.0005 || tb > ta * 1.0005) return ta > tb;
    if (!a->not_yet != !b->not_yet) return !a->not_yet;
    return a->mem < b->mem;
}

/* the best of kind k (search's other) */
static void keep_kind(search *s, const lay *l, int k) {
    if (!s->has_other[k] || better(l, &s->other[k])) s->other[k] = *l, s->has_other[k] = 1;
}

/* the best few, the best of each kind (without a pipeline, with one, with one and tensor
 * parallelism) and the best that runs */
static void keep(search *s, const lay *l) {
    keep_kind(s, l, l->P > 1);
    if (l->P > 1 && l->T > 1) keep_kind(s, l, 2);
    if (!l->not_yet && (!s->has_today || better(l, &s->today))) s->today = *l, s->has_today = 1;
    int i = s->n_best < TOP ? s->n_best++ : TOP;
    if (i == TOP && !better(l, &s->best[TOP - 1])) return;
    if (i == TOP) i = TOP - 1;
    while (i > 0 && better(l, &s->best[i - 1])) s->best[i] = s->best[i - 1], i--;
    s->best[i] = *l;
}

/* the trial's view of the layout s->cur: its memory (rank 0's activations in flight: a whole
 * microbatch's over V chunks, the schedule's table) and its step */
static void use(const plan_view *v, double fixed, double acts, void *ctx) {
    search *s = ctx;
    lay *l = &s->cur;
    int first = 1, last = 1;
    if (l->P > 1) plan_pipeline_table(v, (int)(v->per_rank / v->micro), &first, &last);
    l->mem = fixed + acts * (first > l->V ? (double)first / l->V : 1);
    int rc = timeplan_layout_of(s->p, v, &l->f);
    if (rc < 0) s->untimed = 1;
    l->f.tokens_gpu = rc ? 0 : l->f.tokens_gpu;
}

static void try_layout(search *s, tsr_config *c, int naive) {
    lay *l = &s->cur;
    c->pipeline = l->P, c->pipeline_virtual = l->V, c->pipeline_schedule = (int)l->sched;
    c->tensor = l->T, c->context = l->N, c->expert = l->EP, c->micro_batch = l->micro;
    c->sharding = l->shard, c->replica_group = 0;
    c->model.activation_checkpointing = l->ckpt ? TSR_ACTCKPT_BLOCK : TSR_ACTCKPT_NONE;
    c->model.activation_checkpointing_layers = -1;
    c->pipeline_layout[0] = '\0';
    l->not_yet = not_yet(c, &l->value);
    s->tried++;
    memset(&l->f, 0, sizeof l->f);
    if (s->trial(c, s->d, use, s) != 0 || l->f.tokens_gpu <= 0) return;
    s->planned++;
    if (naive) { /* (a row of its own; the search tries it again among the rest) */
        s->naive = *l, s->has_naive = 1;
        return;
    }
    if (l->mem > s->gpu) return;
    s->fit++;
    keep(s, l);
}

/* ---- the layouts ---------------------------------------------------------------------------- */

/* the divisors of n in 1 .. cap into out; their count */
static int divisors(long long n, long long cap, int *out) {
    int k = 0;
    for (long long v = 1; v <= cap && v <= n && k < MAX_OPT; v++)
        if (n % v == 0) out[k++] = (int)v;
    return k;
}

/* a layout's microbatches (the divisors of its per-rank batch up to 8) and checkpointing */
static void try_micro(search *s, tsr_config *c) {
    lay *l = &s->cur;
    const long long D = s->d->world / ((long long)l->P * l->T * l->N);
    if (c->global_batch % D) return;
    const long long per_rank = c->global_batch / D;
    int mb[MAX_OPT];
    const int nm = divisors(per_rank, 8, mb);
    for (int i = 0; i < nm; i++) {
        l->micro = mb[i];
        char why[200];
        if (l->P > 1 && pp_layout_check(l->sched, l->P, l->V, (int)(per_rank / l->micro), why,
                                        sizeof why) != 0)
            continue;
        for (l->ckpt = 0; l->ckpt < 2; l->ckpt++) try_layout(s, c, 0);
    }
}

/* the pipeline's schedules at P: 1f1b, zb, interleaved at V chunks a rank (L a multiple of P V) */
static void try_schedules(search *s, tsr_config *c) {
    lay *l = &s->cur;
    const int L = (int)c->model.n_layer;
    l->V = 1, l->sched = PP_1F1B;
    if (l->P == 1) return try_micro(s, c);
    try_micro(s, c);
    l->sched = PP_ZB;
    try_micro(s, c);
    l->sched = PP_INTERLEAVED;
    for (l->V = 2; l->V <= 8 && l->P * l->V <= L; l->V++)
        if (L % (l->P * l->V) == 0) try_micro(s, c);
}

/* the sharding modes, then the schedules */
static void try_shards(search *s, tsr_config *c) {
    static const int modes[] = {TSR_SHARD_DDP, TSR_SHARD_ZERO1, TSR_SHARD_ZERO3, TSR_SHARD_HSDP};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        s->cur.shard = modes[i];
        try_schedules(s, c);
    }
}

/* the tensor (within a node), pipeline, context and expert splits that divide the world and the
 * model */
static void try_splits(search *s, tsr_config *c) {
    lay *l = &s->cur;
    const int W = s->d->world, G = s->d->local_world;
    const int mla = c->model.kv_lora_rank > 0, moe = c->model.moe_experts > 0;
    int Ts[MAX_OPT], Ps[MAX_OPT], Ns[MAX_OPT], Es[MAX_OPT];
    const int nt = divisors(G, G, Ts), np = divisors(W, c->model.n_layer, Ps);
    const int nn = divisors(W, mla ? 1 : 8, Ns), ne = divisors(moe ? c->model.moe_experts : 1, W, Es);
    const char *key;
    char why[400];
    for (int a = 0; a < nt; a++)
        for (int b = 0; b < np; b++)
            for (int e = 0; e < nn; e++)
                for (int x = 0; x < ne; x++) {
                    l->T = Ts[a], l->P = Ps[b], l->N = Ns[e], l->EP = Es[x];
                    if (W % (l->T * l->P * l->N) ||
                        c->seq_len % (2 * l->N * l->T) || (W / (l->T * l->P)) % l->EP ||
                        config_tensor_split(c, l->T, &key, why, sizeof why))
                        continue;
                    try_shards(s, c);
                }
}

/* ---- the report ----------------------------------------------------------------------------- */

static void name_of(const lay *l, int W, char *out, size_t n) {
    static const char *const shard[] = {"ddp", "zero1", "zero3", "hsdp"};
    const int D = W / (l->P * l->T * l->N);
    size_t at = (size_t)snprintf(out, n, "TP%d PP%d", l->T, l->P);
    if (l->P > 1) at += (size_t)snprintf(out + at, n - at, " %s", pp_kind_name(l->sched));
    if (l->V > 1) at += (size_t)snprintf(out + at, n - at, " VP%d", l->V);
    at += (size_t)snprintf(out + at, n - at, " CP%d", l->N);
    if (l->EP > 1) at += (size_t)snprintf(out + at, n - at, " EP%d", l->EP);
    snprintf(out + at, n - at, " DP%d %s mb%d%s", D, shard[l->shard], l->micro,
             l->ckpt ? " ckpt" : "");
}

/* whether a device = "cuda" start runs l: "yes", or "no: KEY VALUE" (the key it refuses) */
static void cuda_mark(const lay *l, char *out, size_t n) {
    if (!l->not_yet) snprintf(out, n, "yes");
    else snprintf(out, n, "no: %s%s%s", l->not_yet, l->value[0] ? " " : "", l->value);
}

/* l's name and its mark (the report's lines that name a layout beside the rows) */
static void marked_name(const lay *l, int W, char *out, size_t n) {
    char mark[160];
    name_of(l, W, out, n);
    cuda_mark(l, mark, sizeof mark);
    const size_t at = strlen(out);
    snprintf(out + at, n - at, "; runs on cuda: %s", mark);
}

static void print_row(int rank, const lay *l, int W) {
    char name[128], mark[160];
    name_of(l, W, name, sizeof name);
    cuda_mark(l, mark, sizeof mark);
    printf("%2d  %-44s %8.1f %7.4f %10.1f %10.1f %9.0f  %s\n", rank, name, l->mem / GIB,
           l->f.bubble, l->f.node_bytes / 1e9, l->f.net_bytes / 1e9, l->f.tokens_gpu, mark);
}

/* the --set options of layout l */
static void print_sets(const lay *l) {
    static const char *const shard[] = {"ddp", "zero1", "zero3", "hsdp"};
    printf("--set parallel.tensor=%d --set parallel.pipeline=%d ", l->T, l->P);
    if (l->P > 1)
        printf("--set parallel.pipeline_schedule=%s --set parallel.pipeline_virtual=%d ",
               pp_kind_name(l->sched), l->V);
    printf("--set parallel.context=%d --set parallel.expert=%d --set parallel.sharding=%s --set "
           "micro_batch=%d --set model.activation_checkpointing=%s\n", l->N, l->EP,
           shard[l->shard], l->micro, l->ckpt ? "block" : "none");
}

/* why a device = "cuda" start refuses layout l (the config's key and value) */
static void print_refused(const lay *l) {
    printf("device = \"cuda\" does not run it yet: a start refuses %s%s%s (docs/pipeline.md, "
           "docs/parallelism.md); its keys: ", l->not_yet, l->value[0] ? " " : "", l->value);
}

/* the fastest layout that fits and that a device = "cuda" start runs (the best is not one) */
static void print_today(const search *s) {
    char name[128];
    if (!s->has_today) {
        printf("runs on cuda: none of the %d layouts that fit runs on device = \"cuda\" today\n",
               s->fit);
        return;
    }
    name_of(&s->today, s->d->world, name, sizeof name);
    printf("runs on cuda: %s: %.0f tokens/s/GPU, %.1f GiB a GPU; a run: ", name,
           s->today.f.tokens_gpu, s->today.mem / GIB);
    print_sets(&s->today);
}

/* the part of the step where a wins most over b, in words */
static void why_best(const lay *a, const lay *b, const char *bname, const char *what) {
    const double dc = b->f.compute_ms - a->f.compute_ms, di = b->f.idle_ms - a->f.idle_ms,
                 de = b->f.exposed_ms - a->f.exposed_ms;
    const char *part = dc >= di && dc >= de ? "compute" : di >= de ? "pipeline bubble"
                                                                   : "exposed communication";
    if (!better(a, b) || a->f.tokens_gpu <= b->f.tokens_gpu * 1.0005) {
        printf("  %s (%s) ties with it in the plan's model: %.0f tokens/s/GPU; %.1f / %.1f GiB a "
               "GPU\n", what, bname, b->f.tokens_gpu, a->mem / GIB, b->mem / GIB);
        return;
    }
    printf("  against %s (%s): %.0f against %.0f tokens/s/GPU; the step %.1f ms against %.1f, most "
           "of the difference in %s (compute %.1f / %.1f ms, bubble %.1f / %.1f, exposed links "
           "%.1f / %.1f; %.1f / %.1f GiB a GPU)\n", what, bname, a->f.tokens_gpu, b->f.tokens_gpu,
           a->f.step_ms, b->f.step_ms, part, a->f.compute_ms, b->f.compute_ms, a->f.idle_ms,
           b->f.idle_ms, a->f.exposed_ms, b->f.exposed_ms, a->mem / GIB, b->mem / GIB);
}

/* why the best wins: against the best of the other kind, the best that runs, the naive one */
static void report_why(const search *s, const lay *b) {
    const int W = s->d->world, k = b->P == 1;
    char name[320];
    if (s->has_other[k]) {
        marked_name(&s->other[k], W, name, sizeof name);
        why_best(b, &s->other[k], name, b->P > 1 ? "the fastest without a pipeline"
                                                 : "the fastest with one");
    }
    /* (tensor and pipeline together: unless the best is such a layout or the line above was) */
    if (s->has_other[2] && (b->P == 1 || b->T == 1) && (!s->has_other[k] || s->other[k].T == 1 ||
                                                         s->other[k].P == 1)) {
        marked_name(&s->other[2], W, name, sizeof name);
        why_best(b, &s->other[2], name, "the fastest with tensor and pipeline parallelism");
    }
    if (s->has_today && b->not_yet) {
        marked_name(&s->today, W, name, sizeof name);
        why_best(b, &s->today, name, "the fastest that runs on cuda today");
    }
    if (!s->has_naive) {
        printf("  the naive layout (ZeRO-3 over all %d ranks) does not split the batch\n", W);
        return;
    }
    marked_name(&s->naive, W, name, sizeof name);
    if (s->naive.mem > s->gpu)
        printf("  against the naive layout, row 0 (%s): it does not fit: %.1f GiB a GPU\n", name,
               s->naive.mem / GIB);
    else why_best(b, &s->naive, name, "the naive layout, row 0");
}

static void report(const search *s) {
    const int W = s->d->world;
    char name[128];
    printf("fit: layouts of %d GPUs (%d a node) against %.1f GiB a GPU: %d tried, %d planned, %d "
           "fit (--fit layout; docs/planning.md \"Choosing the layout\")\n", W, s->d->local_world,
           s->gpu / GIB, s->tried, s->planned, s->fit);
    if (s->n_best == 0) {
        printf("fit: no layout fits %.1f GiB a GPU on %d GPUs\n", s->gpu / GIB, W);
        return;
    }
    printf("%2s  %-44s %8s %7s %10s %10s %9s  %s\n", "#", "layout", "GiB/GPU", "bubble",
           "node GB", "net GB", "tok/s/GPU", "runs on cuda");
    for (int i = 0; i < s->n_best; i++) print_row(i + 1, &s->best[i], W);
    if (s->has_naive) print_row(0, &s->naive, W);
    const lay *b = &s->best[0];
    name_of(b, W, name, sizeof name);
    printf("best: %s: %.0f tokens/s/GPU, %.1f GiB a GPU; ", name, b->f.tokens_gpu, b->mem / GIB);
    if (b->not_yet) print_refused(b);
    else printf("a run: ");
    print_sets(b);
    if (b->not_yet) print_today(s);
    report_why(s, b);
}

/* ZeRO-3 over all ranks, the recipe's microbatch (or the largest that divides) and checkpointing */
static void try_naive(search *s, tsr_config *c) {
    lay *l = &s->cur;
    const long long per_rank = c->global_batch / s->d->world;
    if (per_rank < 1 || c->global_batch % s->d->world) return;
    *l = (lay){.P = 1, .V = 1, .T = 1, .N = 1, .EP = 1, .shard = TSR_SHARD_ZERO3,
               .sched = PP_1F1B, .ckpt = s->cfg->model.activation_checkpointing != TSR_ACTCKPT_NONE};
    l->micro = (int)(s->cfg->micro_batch > 0 ? s->cfg->micro_batch : 1);
    while (per_rank % l->micro) l->micro--;
    try_layout(s, c, 1);
}

int plan_layout_search(const tsr_config *cfg, const tsr_dist *d, double gpu_bytes,
                       const timeplan *p, plan_layout_trial trial) {
    search *s = tsr_calloc(1, sizeof *s);
    *s = (search){.cfg = cfg, .d = d, .gpu = gpu_bytes, .p = p, .trial = trial};
    tsr_config *c = tsr_malloc(sizeof *c);
    *c = *cfg;
    try_naive(s, c);
    *c = *cfg;
    try_splits(s, c);
    free(c);
    int rc = 0;
    if (s->untimed && !s->planned) {
        tsr_error("--fit layout ranks layouts by the time plan, which cannot time this recipe (no "
                  "per-op table for the GPU, or ops it has no rows for: --time says which); give "
                  "--time=FILE with a table (docs/planning.md)");
        rc = TSR_EXIT_USAGE;
    } else if (d->rank == 0) report(s);
    fflush(stdout);
    free(s);
    return rc;
}
