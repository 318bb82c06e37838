/* pp_schedule.c — the pipeline schedules' generators, their simulator and their grid
 * (pp_schedule.h; docs/pipeline.md). */
#include "pipeline/pp_schedule.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "why.h"

static const char *const kind_names[] = {"1f1b", "interleaved", "zb"};
_Static_assert(sizeof kind_names / sizeof kind_names[0] == PP_KIND_COUNT, "a name a kind");

const char *pp_kind_name(pp_kind k) { return (unsigned)k < PP_KIND_COUNT ? kind_names[k] : "?"; }

int pp_kind_parse(const char *name, pp_kind *k) {
    for (int i = 0; i < PP_KIND_COUNT; i++)
        if (!strcmp(name, kind_names[i])) return *k = (pp_kind)i, 0;
    return -1;
}

/* the chunks a rank holds that kind k needs (0: any of at least 2) */
static int kind_chunks(pp_kind k) { return k == PP_INTERLEAVED ? 0 : 1; }

static int chunks_check(pp_kind k, int V, char *why, size_t n) {
    const int want = kind_chunks(k);
    if (want && V != want)
        return tsr_why(-1, why, n,
                       "the %s schedule runs %d chunk%s a rank, not %d (virtual "
                       "stages: %d)", kind_names[k], want, want > 1 ? "s" : "", V, want);
    if (!want && V < 2)
        return tsr_why(-1, why, n, "the interleaved schedule runs 2 or more chunks a rank, not "
                                   "%d (for one chunk a rank: 1f1b)", V);
    return 0;
}

int pp_layout_check(pp_kind k, int P, int V, int M, char *why, size_t n) {
    if ((unsigned)k >= PP_KIND_COUNT)
        return tsr_why(-1, why, n, "no pipeline schedule %d", (int)k);
    if (P < 1 || V < 1 || (int64_t)P * V > PP_MAX_STAGES)
        return tsr_why(-1, why, n, "%d ranks of %d chunks: expected 1 to %d stages in all", P, V,
                                   PP_MAX_STAGES);
    if (chunks_check(k, V, why, n)) return -1;
    if (M < P)
        return tsr_why(-1, why, n, "%d microbatches for %d stages: the %s schedule needs at "
                                   "least as many microbatches as pipeline ranks (%d)", M, P,
                                   kind_names[k], P);
    if (k == PP_INTERLEAVED && M % P)
        return tsr_why(-1, why, n,
                       "%d microbatches for %d ranks: the interleaved schedule "
                       "needs a multiple of the pipeline ranks (%d or %d)", M, P, M / P * P,
                       (M / P + 1) * P);
    return 0;
}

int pp_stage(const pp_schedule *s, int r, int c) { return c * s->P + r; }

const pp_action *pp_action_at(const pp_schedule *s, int r, int i) {
    return &s->act[(size_t)r * s->per_rank + i];
}

static int split_backward(pp_kind k) { return k == PP_ZB; }

/* ---- the generators --------------------------------------------------------------------- */

typedef struct list {
    pp_action *a;
    int k;
} list;

static void put(list *l, pp_op op, int chunk, int mb) {
    l->a[l->k++] = (pp_action){.op = (uint8_t)op, .chunk = (uint8_t)chunk, .mb = mb};
}

/* warm forwards, then a forward and a backward in turn, then the backwards left; the k-th
 * forward and backward of the rank are slot(k, 0, ...) and slot(k, 1, ...) */
static void one_f_one_b(const pp_schedule *s, list *l, int total, int warm,
                        void (*slot)(const pp_schedule *, int, int, int *, int *)) {
    int c, m;
    for (int i = 0; i < warm; i++) slot(s, i, 0, &c, &m), put(l, PP_F, c, m);
    for (int i = 0; i < total - warm; i++) {
        slot(s, warm + i, 0, &c, &m), put(l, PP_F, c, m);
        slot(s, i, 1, &c, &m), put(l, PP_BW, c, m);
    }
    for (int i = total - warm; i < total; i++) slot(s, i, 1, &c, &m), put(l, PP_BW, c, m);
}

static void plain_slot(const pp_schedule *s, int k, int backward, int *chunk, int *mb) {
    (void)s, (void)backward;
    *chunk = 0, *mb = k;
}

/* Megatron's interleaved order: groups of P microbatches go through chunk 0, then chunk 1, ...;
 * the backwards through the chunks in reverse */
static void interleaved_slot(const pp_schedule *s, int k, int backward, int *chunk, int *mb) {
    const int P = s->P, V = s->V, c = (k / P) % V;
    *chunk = backward ? V - 1 - c : c;
    *mb = k / (P * V) * P + k % P;
}

static void build_1f1b(pp_schedule *s) {
    for (int r = 0; r < s->P; r++) {
        list l = {s->act + (size_t)r * s->per_rank, 0};
        const int warm = s->P - r - 1 < s->M ? s->P - r - 1 : s->M;
        one_f_one_b(s, &l, s->M, warm, plain_slot);
    }
}

static void build_interleaved(pp_schedule *s) {
    const int total = s->M * s->V;
    for (int r = 0; r < s->P; r++) {
        list l = {s->act + (size_t)r * s->per_rank, 0};
        const int want = (s->P - r - 1) * 2 + (s->V - 1) * s->P;
        one_f_one_b(s, &l, total, want < total ? want : total, interleaved_slot);
    }
}

/* The zero-bubble lists (ZB-H1) are made by running the pipeline at one tick an action: each
 * tick a rank takes the first that can start of its next B, the oldest W when more than P - 1
 * are pending, its next forward (only while fewer than P - r of its forwards wait for their B:
 * 1F1B's activations in flight), and the oldest W. Deferring W is what fills the bubbles; the
 * last stage defers its W too, so that its last B comes early (ZB-H1's figure: a third of
 * 1F1B's bubble at F = B = W). A pending W keeps only what the weights' gradients read (each
 * linear layer's input and its output's gradient). The loops over chunks leave room for more
 * than one chunk a rank (the V-shaped ZBV), which is not built yet. */
typedef struct greedy {
    const pp_schedule *s;
    int S;
    int64_t *fend, *bend;   /* (S, M) end tick of each stage's F and B, -1 before */
    int *nf, *nb;           /* (P, V) the next microbatch to forward / backward */
    int *inflight, *wq, *wh, *wt; /* (P) chunks held; W queue (P, M V) as (chunk, mb) codes */
    list *l;                /* (P) */
} greedy;

static int ready(const int64_t *end, int64_t t) { return *end >= 0 && *end <= t; }

static int64_t *at(const greedy *g, int64_t *a, int stage, int mb) {
    return &a[(size_t)stage * g->s->M + mb];
}

/* chunks of rank r from the deepest stage to the shallowest */
static int chunk_by_depth(const pp_schedule *s, int r, int i) {
    (void)r;
    return s->V - 1 - i;
}

static int try_backward(greedy *g, int r, int64_t t) {
    const pp_schedule *s = g->s;
    for (int i = 0; i < s->V; i++) {
        const int c = chunk_by_depth(s, r, i), st = pp_stage(s, r, c), m = g->nb[r * s->V + c];
        if (m >= s->M || !ready(at(g, g->fend, st, m), t)) continue;
        if (st < g->S - 1 && !ready(at(g, g->bend, st + 1, m), t)) continue;
        *at(g, g->bend, st, m) = t + 1;
        g->nb[r * s->V + c]++;
        g->inflight[r]--;
        g->wq[(size_t)r * s->M * s->V + g->wt[r]++] = c * s->M + m;
        return put(&g->l[r], PP_B, c, m), 1;
    }
    return 0;
}

static int try_forward(greedy *g, int r, int64_t t, int cap) {
    const pp_schedule *s = g->s;
    if (g->inflight[r] >= cap) return 0;
    for (int i = 0; i < s->V; i++) {
        const int c = chunk_by_depth(s, r, i), st = pp_stage(s, r, c), m = g->nf[r * s->V + c];
        if (m >= s->M || (st > 0 && !ready(at(g, g->fend, st - 1, m), t))) continue;
        *at(g, g->fend, st, m) = t + 1;
        g->nf[r * s->V + c]++;
        g->inflight[r]++;
        return put(&g->l[r], PP_F, c, m), 1;
    }
    return 0;
}

static int try_weights(greedy *g, int r, int at_least) {
    const pp_schedule *s = g->s;
    if (g->wt[r] - g->wh[r] <= at_least) return 0;
    const int code = g->wq[(size_t)r * s->M * s->V + g->wh[r]++];
    return put(&g->l[r], PP_W, code / s->M, code % s->M), 1;
}

static int greedy_cap(const pp_schedule *s, int r) { return s->P - r; }
/* the W a rank may leave pending before a W goes ahead of a forward */
static int greedy_wcap(const pp_schedule *s) { return s->P - 1; }

/* One tick of every rank (the W of a B done this tick waits for the next: a B ends at t + 1);
 * 1 when some rank acted. */
static int greedy_tick(greedy *g, int64_t t) {
    int acted = 0;
    for (int r = 0; r < g->s->P; r++) {
        if (g->l[r].k == g->s->per_rank) continue;
        acted |= try_backward(g, r, t) || try_weights(g, r, greedy_wcap(g->s)) ||
                 try_forward(g, r, t, greedy_cap(g->s, r)) || try_weights(g, r, 0);
    }
    return acted;
}

static int build_greedy(pp_schedule *s, char *why, size_t n) {
    const int P = s->P, V = s->V, M = s->M, S = P * V;
    greedy g = {.s = s, .S = S};
    g.fend = tsr_malloc(2 * sizeof *g.fend * S * M), g.bend = g.fend + (size_t)S * M;
    for (size_t i = 0; i < 2 * (size_t)S * M; i++) g.fend[i] = -1;
    g.nf = tsr_calloc((size_t)2 * P * V + 3 * (size_t)P, sizeof(int));
    g.nb = g.nf + P * V, g.inflight = g.nb + P * V, g.wh = g.inflight + P, g.wt = g.wh + P;
    g.wq = tsr_malloc(sizeof *g.wq * (size_t)P * M * V);
    g.l = tsr_malloc(sizeof *g.l * P);
    for (int r = 0; r < P; r++) g.l[r] = (list){s->act + (size_t)r * s->per_rank, 0};
    int done = 0, rc = 0;
    for (int64_t t = 0; !done && !rc; t++) {
        if (!greedy_tick(&g, t)) rc = -1;
        done = 1;
        for (int r = 0; r < P; r++) done &= g.l[r].k == s->per_rank;
    }
    if (rc)
        tsr_why(-1, why, n, "the %s generator stalled at P %d, V %d, M %d", kind_names[s->kind],
                P, V, M);
    free(g.fend), free(g.nf), free(g.wq), free(g.l);
    return rc;
}

int pp_schedule_build(pp_schedule *s, pp_kind k, int P, int V, int M, char *why, size_t n) {
    memset(s, 0, sizeof *s);
    if (pp_layout_check(k, P, V, M, why, n)) return -1;
    *s = (pp_schedule){.kind = k, .P = P, .V = V, .M = M,
                       .per_rank = (split_backward(k) ? 3 : 2) * M * V};
    s->act = tsr_calloc((size_t)P * s->per_rank, sizeof *s->act);
    if (k == PP_1F1B) build_1f1b(s);
    else if (k == PP_INTERLEAVED) build_interleaved(s);
    else if (build_greedy(s, why, n)) return pp_schedule_free(s), -1;
    return 0;
}

void pp_schedule_free(pp_schedule *s) {
    free(s->act);
    s->act = NULL;
}

/* ---- the simulator ---------------------------------------------------------------------- */

typedef struct sim {
    const pp_schedule *s;
    pp_costs c;
    int S;
    int64_t *end;  /* (PP_OP_COUNT, S, M) end ticks, -1 before */
    int *pos;      /* (P) the next action of each rank */
    int64_t *free_at; /* (P) when each rank's previous action ends */
} sim;

static int64_t *end_of(const sim *m, int op, int stage, int mb) {
    return &m->end[((size_t)op * m->S + stage) * m->s->M + mb];
}

static int cost(const sim *m, int op) {
    return op == PP_F ? m->c.f : op == PP_B ? m->c.b : op == PP_W ? m->c.w : m->c.b + m->c.w;
}

/* the end tick of what the backward through stage st of microbatch mb gave the stage before
 * (its B, or its BW), -1 before */
static int64_t grad_end(const sim *m, int st, int mb) {
    const int64_t b = *end_of(m, PP_B, st, mb);
    return b >= 0 ? b : *end_of(m, PP_BW, st, mb);
}

/* the latest end of a's dependencies, or -1 while one is not done */
static int64_t deps_end(const sim *m, int st, const pp_action *a) {
    int64_t e = 0, d;
    if (a->op == PP_F) return st == 0 ? 0 : *end_of(m, PP_F, st - 1, a->mb);
    if (a->op == PP_W) return *end_of(m, PP_B, st, a->mb);
    if ((d = *end_of(m, PP_F, st, a->mb)) < 0) return -1;
    e = d;
    if (st < m->S - 1 && (d = grad_end(m, st + 1, a->mb)) < 0) return -1;
    return d > e ? d : e;
}

/* Runs rank r's actions while their dependencies are done; 1 when it ran one. */
static int sim_rank(sim *m, pp_timing *t, int r) {
    const pp_schedule *s = m->s;
    int ran = 0;
    while (m->pos[r] < s->per_rank) {
        const pp_action *a = pp_action_at(s, r, m->pos[r]);
        const int st = pp_stage(s, r, a->chunk);
        const int64_t d = deps_end(m, st, a);
        if (d < 0) break;
        const int64_t start = d > m->free_at[r] ? d : m->free_at[r];
        t->start[(size_t)r * s->per_rank + m->pos[r]++] = start;
        m->free_at[r] = *end_of(m, a->op, st, a->mb) = start + cost(m, a->op);
        t->busy[r] += cost(m, a->op);
        ran = 1;
    }
    return ran;
}

static void deadlock(const sim *m, char *why, size_t n) {
    snprintf(why, n, "the %s schedule deadlocks:", kind_names[m->s->kind]);
    size_t o = strlen(why);
    for (int r = 0; r < m->s->P && o < n; r++) {
        if (m->pos[r] == m->s->per_rank) continue;
        const pp_action *a = pp_action_at(m->s, r, m->pos[r]);
        o += (size_t)snprintf(why + o, n - o, " rank %d waits at its action %d (%c of "
                              "microbatch %d, chunk %d);", r, m->pos[r], "FBWX"[a->op], a->mb,
                              a->chunk);
    }
}

/* Each (op, stage, microbatch) once, the backward split or not as the kind says, and on its
 * rank every F before its B or BW and every B before its W. 0, or -1 and why. */
static int check_lists(const pp_schedule *s, char *why, size_t n) {
    const size_t per = (size_t)s->P * s->V * s->M;
    int *seen = tsr_calloc(PP_OP_COUNT * per, sizeof *seen), rc = 0;
    for (int r = 0; r < s->P && !rc; r++)
        for (int i = 0; i < s->per_rank && !rc; i++) {
            const pp_action *a = pp_action_at(s, r, i);
            const int op = a->op, m = a->mb, c = a->chunk;
            const int ok_op = split_backward(s->kind) ? op != PP_BW : op == PP_F || op == PP_BW;
            if (op >= PP_OP_COUNT || c >= s->V || m < 0 || m >= s->M || !ok_op) {
                rc = tsr_why(-1, why, n, "rank %d action %d is not one of this schedule's", r, i);
                break;
            }
            const size_t key = ((size_t)pp_stage(s, r, c) * s->M + m);
            const int need = op == PP_F ? -1 : op == PP_W ? PP_B : PP_F;
            if (seen[op * per + key]++)
                rc = tsr_why(-1, why, n, "rank %d repeats %c of microbatch %d, chunk %d", r,
                                         "FBWX"[op], m, c);
            else if (need >= 0 && !seen[need * per + key])
                rc = tsr_why(-1, why, n, "rank %d runs %c of microbatch %d, chunk %d before its "
                                         "%c", r, "FBWX"[op], m, c, "FBWX"[need]);
        }
    if (!rc && s->per_rank != (split_backward(s->kind) ? 3 : 2) * s->M * s->V)
        rc = tsr_why(-1, why, n, "%d actions a rank, expected every microbatch's", s->per_rank);
    free(seen);
    return rc ? -1 : 0;
}

static void peaks(const pp_schedule *s, pp_timing *t) {
    for (int r = 0; r < s->P; r++) {
        int held = 0, wait_w = 0;
        for (int i = 0; i < s->per_rank; i++) {
            const int op = pp_action_at(s, r, i)->op;
            held += op == PP_F ? 1 : op == PP_W ? 0 : -1;
            wait_w += op == PP_B ? 1 : op == PP_W ? -1 : 0;
            if (held > t->peak[r]) t->peak[r] = held;
            if (wait_w > t->peak_w[r]) t->peak_w[r] = wait_w;
        }
    }
}

static int sim_run(sim *m, pp_timing *t, char *why, size_t n) {
    const pp_schedule *s = m->s;
    for (int left = 1; left;) {
        int ran = 0;
        left = 0;
        for (int r = 0; r < s->P; r++) ran |= sim_rank(m, t, r), left |= m->pos[r] < s->per_rank;
        if (left && !ran) return deadlock(m, why, n), -1;
    }
    for (int r = 0; r < s->P; r++)
        if (m->free_at[r] > t->makespan) t->makespan = m->free_at[r];
    return 0;
}

int pp_simulate(const pp_schedule *s, pp_costs c, pp_timing *t, char *why, size_t n) {
    memset(t, 0, sizeof *t);
    if (c.f < 1 || c.b < 1 || c.w < 1)
        return tsr_why(-1, why, n, "costs %d %d %d: each at least 1 tick", c.f, c.b, c.w);
    if (check_lists(s, why, n)) return -1;
    const int S = s->P * s->V;
    sim m = {.s = s, .c = c, .S = S};
    m.end = tsr_malloc(sizeof *m.end * PP_OP_COUNT * S * s->M);
    for (size_t i = 0; i < (size_t)PP_OP_COUNT * S * s->M; i++) m.end[i] = -1;
    m.pos = tsr_calloc(s->P, sizeof *m.pos);
    m.free_at = tsr_calloc(s->P, sizeof *m.free_at);
    t->busy = tsr_calloc(s->P, sizeof *t->busy);
    t->peak = tsr_calloc(s->P, sizeof *t->peak);
    t->peak_w = tsr_calloc(s->P, sizeof *t->peak_w);
    t->start = tsr_calloc((size_t)s->P * s->per_rank, sizeof *t->start);
    int rc = sim_run(&m, t, why, n);
    if (!rc) peaks(s, t);
    free(m.end), free(m.pos), free(m.free_at);
    if (rc) pp_timing_free(t);
    return rc;
}

void pp_timing_free(pp_timing *t) {
    free(t->busy), free(t->peak), free(t->peak_w), free(t->start);
    memset(t, 0, sizeof *t);
}

double pp_bubble(const pp_schedule *s, const pp_timing *t) {
    int64_t busy = 0;
    for (int r = 0; r < s->P; r++) busy += t->busy[r];
    return t->makespan ? 1.0 - (double)busy / ((double)s->P * t->makespan) : 0.0;
}

/* ---- the grid ---------------------------------------------------------------------------- */

static void print_row(const pp_schedule *s, const pp_timing *t, pp_costs c, int r, FILE *f) {
    const sim m = {.s = s, .c = c};
    char cell[16];
    fprintf(f, "rank %2d |", r);
    int64_t tick = 0;
    for (int i = 0; i < s->per_rank; i++) {
        const pp_action *a = pp_action_at(s, r, i);
        const int64_t st = t->start[(size_t)r * s->per_rank + i];
        for (; tick < st; tick++) fprintf(f, " %5s", ".");
        if (s->V > 1) snprintf(cell, sizeof cell, "%c%d:%d", "FBWX"[a->op], a->mb, a->chunk);
        else snprintf(cell, sizeof cell, "%c%d", "FBWX"[a->op], a->mb);
        for (int k = 0; k < cost(&m, a->op); k++, tick++) fprintf(f, " %5s", cell);
    }
    fprintf(f, "\n");
}

void pp_schedule_print(const pp_schedule *s, const pp_timing *t, pp_costs c, FILE *f) {
    fprintf(f, "%s: %d ranks, %d chunk%s a rank, %d microbatches; F %d, B %d, W %d ticks "
            "(X = B and W); bubble %.1f %%\n", kind_names[s->kind], s->P, s->V,
            s->V > 1 ? "s" : "", s->M, c.f, c.b, c.w, 100.0 * pp_bubble(s, t));
    for (int r = 0; r < s->P; r++) print_row(s, t, c, r, f);
}
