/* gpu_pp.c — pipeline parallelism on device = cuda (gpu_pp.h): the 1F1B and interleaved schedules'
 * actions on the device model, the activations and their gradients between the stages through host copies and
 * MPI, the evaluation's stages in turn. */
#include "gpu/gpu_pp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu/gpu_train_int.h"
#include "model/decoder.h"
#include "model/model_pp.h"
#include "pipeline/pp_schedule.h"

#define GPP_SENDS 8 /* host buffers of sends in flight at most (1F1B has two a rank) */

/* a microbatch's device activations (mb -1: free) */
typedef struct gpp_set {
    tsr_acts a;
    int c, mb, own; /* its chunk; own: allocated here (1f1b's set 0 is the model's: try_acts) */
} gpp_set;

struct gpu_pp {
    pp_schedule sched;
    tsr_group *pipe;       /* the mesh's pipeline group */
    int P, p, V, S;        /* pipeline ranks, this rank's, chunks a rank, stages */
    gpp_set *sets;
    int n_sets;
    void *x_dev, *dy_dev;  /* the received activations and gradient on the device */
    void *recv_host;       /* a received message */
    void *send_host[GPP_SENDS];
    void *send_req[GPP_SENDS];
    size_t msg_bytes;      /* the largest message: micro x T x C activations */
    gpu_comm *stage;       /* the stage's data ranks (more than one): the gradients' sum, or NULL */
    size_t off, len;       /* the whole flat gradient buffer, summed as one slice */
};

/* bytes of B sequences' stage output (bf16 activations) */
static size_t out_bytes(const gpu_train_ctx *c, int B) {
    const tsr_gpu_model *g = &c->state->g;
    return (size_t)B * (size_t)c->T * (size_t)c->model->C * tsr_dtype_size(g->be.act);
}

/* the schedule's kind: interleaved with chunks a rank (zb refused on the device: config.h
 * config_pipeline_cuda_pair) */
static pp_kind kind_of(const tsr_pp *pp) { return pp->V > 1 ? PP_INTERLEAVED : PP_1F1B; }

/* the most chunk microbatches rank p holds between a forward and its backward (the schedule's
 * table, simulated at equal action times) */
static int peak_in_flight(const tsr_pp *pp, int M) {
    pp_schedule s;
    pp_timing tm;
    char why[400];
    const pp_costs unit = {1, 1, 1};
    if (pp_schedule_build(&s, kind_of(pp), pp->P, pp->V, M, why, sizeof why) != 0 ||
        pp_simulate(&s, unit, &tm, why, sizeof why) != 0)
        tsr_die(TSR_EXIT_INTERNAL, "pipeline (cuda): %s (checked at start)", why);
    const int k = tm.peak[pp->p];
    pp_timing_free(&tm);
    pp_schedule_free(&s);
    return k;
}

int gpu_pp_sets(const gpu_train_ctx *c) {
    const tsr_pp *pp = c->model->pp;
    if (!pp) return 1;
    const int k = peak_in_flight(pp, (int)(c->per_rank / c->micro));
    /* interleaved: the model's own (a whole part's, unused) and the chunks' (1 / V of it each) */
    return pp->V == 1 ? k : 1 + (k + pp->V - 1) / pp->V;
}

/* a message's tag: direction (0 forward, 1 backward), the receiving chunk, the microbatch */
static int tag(int dir, int ch, int mb) { return ((mb % 4096) * TSR_PART_MAX + ch) * 2 + dir; }

/* ---- the messages ------------------------------------------------------------------------ */

/* n bytes of device src sent to pipeline rank `to` (copied to the host first: the stream's work
 * up to here waits) */
static void send_dev(gpu_train_ctx *c, const void *src, size_t n, int to, int t) {
    struct gpu_pp *x = c->state->pp;
    int k = -1;
    while (k < 0)
        for (int i = 0; i < GPP_SENDS && k < 0; i++)
            if (!x->send_req[i] || dist_test(x->send_req[i])) k = i;
    x->send_req[k] = NULL;
    tcu_memcpy_d2h(x->send_host[k], src, n, c->state->s);
    x->send_req[k] = dist_group_isend(x->pipe, x->send_host[k], n, to, t);
}

/* n bytes from pipeline rank `from` into device dst (queued on the stream) */
static void recv_dev(gpu_train_ctx *c, void *dst, size_t n, int from, int t) {
    struct gpu_pp *x = c->state->pp;
    dist_wait(dist_group_irecv(x->pipe, x->recv_host, n, from, t));
    tcu_memcpy_h2d(dst, x->recv_host, n, c->state->s);
}

static void sends_wait(struct gpu_pp *x) {
    for (int i = 0; i < GPP_SENDS; i++) {
        if (x->send_req[i]) dist_wait(x->send_req[i]);
        x->send_req[i] = NULL;
    }
}

/* ---- the activation sets ------------------------------------------------------------------- */

/* a free set for microbatch mb: the model's own first, then new ones (dies when the device is
 * full: the plan counted gpu_pp_sets of them) */
/* chunk ch's model: the part itself under 1f1b, else its chunk (model_pp.h: its tensors at their
 * places in the part's flat buffers) */
static const tsr_model *chunk_model(const gpu_train_ctx *c, int ch) {
    return c->state->pp->V == 1 ? c->state->g.m : &c->model->pp->chunk[ch];
}

static gpp_set *set_take(gpu_train_ctx *c, int ch, int mb) {
    struct gpu_pp *x = c->state->pp;
    tsr_gpu_model *g = &c->state->g;
    const tsr_model *cm = chunk_model(c, ch);
    for (int i = 0; i < x->n_sets; i++)
        if (x->sets[i].mb < 0 && x->sets[i].c == ch) return x->sets[i].mb = mb, &x->sets[i];
    x->sets = tsr_realloc(x->sets, (size_t)(x->n_sets + 1) * sizeof *x->sets);
    gpp_set *s = &x->sets[x->n_sets++];
    memset(s, 0, sizeof *s);
    s->own = 1, s->c = ch, s->mb = mb;
    if (dec_try_alloc_acts(cm, &g->be, &s->a, c->micro, c->T) != 0)
        tsr_die(TSR_EXIT_USAGE, "pipeline on device = \"cuda\": out of device memory allocating "
                "the activations of microbatch in flight number %d (%.1f MiB a microbatch of %d "
                "x %d): use activation checkpointing or a smaller micro_batch", x->n_sets,
                (double)gpu_model_acts_bytes(cm, c->micro, c->T) / 1048576.0, c->micro, c->T);
    return s;
}

static gpp_set *set_of(struct gpu_pp *x, int ch, int mb) {
    for (int i = 0; i < x->n_sets; i++)
        if (x->sets[i].mb == mb && x->sets[i].c == ch) return &x->sets[i];
    tsr_die(TSR_EXIT_INTERNAL, "pipeline (cuda): no activations of chunk %d's microbatch %d", ch,
            mb);
}

/* the model runs on set s from now on, its own activations kept in s (a second swap puts them
 * back) */
static void set_swap(tsr_gpu_model *g, gpp_set *s) {
    if (!s->own) return; /* (the model's own set: in place) */
    const tsr_acts a = g->a;
    g->a = s->a, s->a = a;
}

/* the model runs chunk ch on set s until leave (the part and its activations kept) */
static const tsr_model *enter(gpu_train_ctx *c, int ch, gpp_set *s) {
    tsr_gpu_model *g = &c->state->g;
    const tsr_model *part = g->m;
    g->m = chunk_model(c, ch);
    set_swap(g, s);
    return part;
}

static void leave(gpu_train_ctx *c, const tsr_model *part, gpp_set *s) {
    set_swap(&c->state->g, s);
    c->state->g.m = part;
}

/* ---- the actions ----------------------------------------------------------------------------- */

/* chunk ch's forward of microbatch mb: its input from the stage before (none on the first), its
 * output to the stage after, or (the last stage) its losses staged */
static void act_forward(gpu_train_ctx *c, int ch, int mb, float scale) {
    struct tsr_gpu_train *gt = c->state;
    struct gpu_pp *x = gt->pp;
    tsr_gpu_model *g = &gt->g;
    const int st = ch * x->P + x->p;
    const size_t n = out_bytes(c, c->micro), at = (size_t)mb * (size_t)c->micro * (size_t)c->T;
    if (st > 0) recv_dev(c, x->x_dev, n, (st - 1) % x->P, tag(0, ch, mb));
    gpp_set *s = set_take(c, ch, mb);
    const tsr_model *part = enter(c, ch, s);
    g->pp_x = st > 0 ? x->x_dev : NULL;
    g->starts = c->starts ? c->starts + at : NULL;
    gpu_model_forward(g, c->inputs + at, c->targets + at, c->micro, c->T, scale);
    g->pp_x = NULL, g->starts = NULL;
    if (st == x->S - 1) gpu_model_stage_losses(g, gt->losses + at, c->micro, c->T);
    else send_dev(c, gpu_model_output(g), n, (st + 1) % x->P, tag(0, (st + 1) / x->P, mb));
    leave(c, part, s);
}

/* its backward: the output's gradient from the stage after (none on the last), the input's to
 * the stage before */
static void act_backward(gpu_train_ctx *c, int ch, int mb, float scale) {
    struct tsr_gpu_train *gt = c->state;
    struct gpu_pp *x = gt->pp;
    tsr_gpu_model *g = &gt->g;
    const int st = ch * x->P + x->p;
    const size_t n = out_bytes(c, c->micro), at = (size_t)mb * (size_t)c->micro * (size_t)c->T;
    if (st < x->S - 1) recv_dev(c, x->dy_dev, n, (st + 1) % x->P, tag(1, ch, mb));
    gpp_set *s = set_of(x, ch, mb);
    const tsr_model *part = enter(c, ch, s);
    g->pp_dy = st < x->S - 1 ? x->dy_dev : NULL;
    gpu_model_backward_stage(g, c->inputs + at, c->targets + at, c->micro, c->T, scale);
    g->pp_dy = NULL;
    if (st > 0) send_dev(c, g->a.dresidual, n, (st - 1) % x->P, tag(1, (st - 1) / x->P, mb));
    leave(c, part, s);
    s->mb = -1;
}

/* the last stage's losses of the step, summed microbatch by microbatch (as the whole model's
 * step sums them), broadcast to every stage */
static double step_loss(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    struct gpu_pp *x = gt->pp;
    double sum = 0.0;
    if (x->p == x->P - 1) {
        tcu_memcpy_d2h(gt->losses_host, gt->losses, (size_t)c->per_rank * c->T * sizeof(float),
                       gt->s);
        for (int64_t b = 0; b < c->per_rank; b += c->micro)
            sum += dec_sum_losses(gt->losses_host + b * c->T, c->targets + b * c->T,
                                  (size_t)c->micro * (size_t)c->T);
    }
    dist_group_bcast(x->pipe, &sum, sizeof sum, x->P - 1);
    return sum;
}

/* tied embeddings: the two copies' gradients (the first stage's embedding, the last one's head)
 * summed between the pipeline's two ends (each sends its own and adds the other's: a + b on one,
 * b + a on the other, the same bits), through the host */
static void tied_grads(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    const tsr_pp *pp = c->model->pp;
    size_t lo, n;
    if (!c->model->cfg.tie_embeddings || (pp->p != 0 && pp->p != pp->P - 1)) return;
    pp_wte_range(c->model, &lo, &n);
    float *mine = tsr_malloc(n * sizeof *mine), *other = tsr_malloc(n * sizeof *other);
    const int peer = pp->p == 0 ? pp->P - 1 : 0;
    tcu_memcpy_d2h(mine, gt->g.grads + lo, n * sizeof *mine, gt->s);
    dist_group_sendrecv(gt->pp->pipe, mine, peer, other, peer, n * sizeof *other);
    for (size_t i = 0; i < n; i++) mine[i] += other[i];
    tcu_memcpy_h2d(gt->g.grads + lo, mine, n * sizeof *mine, gt->s);
    tcu_sync(gt->s); /* (the host copy freed next) */
    free(mine);
    free(other);
}

double gpu_pp_compute(gpu_train_ctx *c, float scale) {
    struct tsr_gpu_train *gt = c->state;
    struct gpu_pp *x = gt->pp;
    tcu_zero(gt->g.grads, c->model->n_params * sizeof(float), gt->s);
    for (int i = 0; i < x->sched.per_rank; i++) {
        const pp_action *a = pp_action_at(&x->sched, x->p, i);
        if (a->op == PP_F) act_forward(c, a->chunk, a->mb, scale);
        else if (a->op == PP_BW) act_backward(c, a->chunk, a->mb, scale);
        else tsr_die(TSR_EXIT_INTERNAL, "pipeline (cuda): action %d of the %s table", a->op,
                     pp_kind_name(x->sched.kind));
    }
    sends_wait(x);
    tied_grads(c);
    if (x->stage) { /* (the stage's data ranks: one sum after the schedule; the norm waits) */
        gpu_comm_allreduce(x->stage, gt->g.grads, &x->off, &x->len, 1);
        gpu_comm_wait(x->stage);
    }
    return step_loss(c);
}

/* tied embeddings: the squared norm of the last stage's copy of wte (counted once, on the first
 * stage) */
static double tied_copy_sumsq(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    size_t lo, n;
    float sq = 0.0f;
    if (!pp_tied_copy(c->model->pp, c->model)) return 0.0;
    pp_wte_range(c->model, &lo, &n);
    tcu_zero(gt->acc, sizeof(float), gt->s);
    tcu_sumsq(gt->acc, gt->g.grads + lo, n, gt->s);
    tcu_memcpy_d2h(&sq, gt->acc, sizeof sq, gt->s);
    return sq;
}

double gpu_pp_sum_stages(gpu_train_ctx *c, double sq) {
    sq -= tied_copy_sumsq(c);
    dist_group_allreduce_sum_f64(c->state->pp->pipe, &sq, 1);
    return sq;
}

/* ---- evaluations: the stages in turn ---------------------------------------------------------- */

/* one batch's forward through every stage, chunk after chunk; on the last stage its results:
 * the loss sum into *loss, or (losses not NULL) each position's loss and greedy token */
static void eval_pass(gpu_train_ctx *c, const int32_t *tokens, const int32_t *targets, int B,
                      double *loss, float *losses, int32_t *greedy) {
    struct tsr_gpu_train *gt = c->state;
    struct gpu_pp *x = gt->pp;
    tsr_gpu_model *g = &gt->g;
    const size_t n = out_bytes(c, B);
    for (int ch = 0; ch < x->V; ch++) {
        const int st = ch * x->P + x->p;
        if (st > 0) recv_dev(c, x->x_dev, n, (st - 1) % x->P, tag(0, ch, 0));
        gpp_set *s = set_take(c, ch, 0);
        const tsr_model *part = enter(c, ch, s);
        g->pp_x = st > 0 ? x->x_dev : NULL;
        g->starts = c->model->starts;
        gpu_model_forward(g, tokens, targets, B, c->T, -1.0f);
        g->pp_x = NULL, g->starts = NULL;
        if (st < x->S - 1) send_dev(c, gpu_model_output(g), n, (st + 1) % x->P, tag(0, (st + 1) / x->P, 0));
        else if (losses) gpu_model_token_scores(g, targets, B, c->T, losses, greedy);
        else *loss = gpu_model_loss_sum(g, targets, B, c->T);
        leave(c, part, s);
        s->mb = -1;
    }
    sends_wait(x);
}

static double eval_forward(void *ctx, const int32_t *tokens, const int32_t *targets, int B,
                           int T) {
    gpu_train_ctx *c = ctx;
    double loss = 0.0;
    (void)T;
    eval_pass(c, tokens, targets, B, &loss, NULL, NULL);
    dist_group_bcast(c->state->pp->pipe, &loss, sizeof loss, c->state->pp->P - 1);
    return loss;
}

static void eval_scores(void *ctx, const int32_t *tokens, const int32_t *targets, int B, int T,
                        float *losses, int32_t *greedy) {
    gpu_train_ctx *c = ctx;
    struct gpu_pp *x = c->state->pp;
    const size_t N = (size_t)B * (size_t)T;
    eval_pass(c, tokens, targets, B, NULL, losses, greedy);
    dist_group_bcast(x->pipe, losses, N * sizeof *losses, x->P - 1);
    if (greedy) dist_group_bcast(x->pipe, greedy, N * sizeof *greedy, x->P - 1);
}

/* ---- start and end ------------------------------------------------------------------------- */

/* the stage's data ranks' communicator (more than one rank a stage): 0, or TSR_EXIT_USAGE with
 * the reason printed by rank 0 */
static int open_stage(gpu_train_ctx *c, struct gpu_pp *x) {
    const tsr_mesh_group *sg = mesh_group(c->mesh, TSR_MESH_STAGE);
    char why[512] = "";
    x->len = c->model->n_params;
    if (sg->size < 2) return 0;
    x->stage = gpu_comm_open(sg, c->state->s, why, sizeof why);
    if (x->stage) return 0;
    if (c->dist->rank == 0)
        tsr_error("device = \"cuda\" with parallel.pipeline = %d on %d ranks: %s", x->P,
                  c->dist->world, why);
    return TSR_EXIT_USAGE;
}

int gpu_pp_init(gpu_train_ctx *c) {
    const tsr_pp *pp = c->model->pp;
    if (!pp) return 0;
    struct gpu_pp *x = tsr_calloc(1, sizeof *x);
    char why[400];
    c->state->pp = x;
    x->P = pp->P, x->p = pp->p, x->V = pp->V, x->S = pp->S;
    if (pp_schedule_build(&x->sched, kind_of(pp), pp->P, pp->V, (int)(c->per_rank / c->micro),
                          why, sizeof why) != 0)
        tsr_die(TSR_EXIT_INTERNAL, "pipeline (cuda): %s (checked at start)", why);
    x->pipe = mesh_group(c->mesh, TSR_MESH_PIPELINE)->cpu;
    x->msg_bytes = out_bytes(c, c->micro);
    x->x_dev = tcu_malloc(x->msg_bytes, "pipeline: the received activations");
    x->dy_dev = tcu_malloc(x->msg_bytes, "pipeline: the received gradient");
    x->recv_host = tsr_malloc(x->msg_bytes);
    for (int i = 0; i < GPP_SENDS; i++) x->send_host[i] = tsr_malloc(x->msg_bytes);
    x->sets = tsr_calloc(1, sizeof *x->sets);
    x->sets[0].mb = -1; /* (1f1b: the model's own, the whole part's, never freed here) */
    x->n_sets = x->V == 1;
    TSR_CHECK(open_stage(c, x));
    c->model->fwd = eval_forward, c->model->scores = eval_scores, c->model->fwd_ctx = c;
    if (c->dist->rank == 0)
        printf("pipeline: %d stages on the device, %s (%d model chunk%s a rank), activations and "
               "their gradients between stages through host copies and MPI (%zu bytes a "
               "message); gradients %s%s\n", pp->S, pp_kind_name(x->sched.kind), pp->V,
               pp->V > 1 ? "s" : "", x->msg_bytes, x->stage ? "summed over the stage's data ranks after the schedule by "
                                      : "the stage's own (one rank a stage)",
               x->stage ? gpu_comm_name(x->stage) : "");
    return 0;
}

void gpu_pp_free(gpu_train_ctx *c) {
    struct gpu_pp *x = c->state ? c->state->pp : NULL;
    if (!x) return;
    sends_wait(x);
    for (int i = 0; i < x->n_sets; i++)
        if (x->sets[i].own) dec_free_acts(&c->state->g.be, &x->sets[i].a);
    free(x->sets);
    gpu_comm_close(x->stage);
    tcu_free(x->x_dev), tcu_free(x->dy_dev);
    free(x->recv_host);
    for (int i = 0; i < GPP_SENDS; i++) free(x->send_host[i]);
    pp_schedule_free(&x->sched);
    free(x);
    c->state->pp = NULL;
}
