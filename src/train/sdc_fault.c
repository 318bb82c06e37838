/* sdc_fault.c — the injected faults of docs/health.md "Fault injection", for tests and for sites
 * that drill: TSR_FAULT="flip:SITE:TENSOR:BIT:WHO:STEP" flips bit BIT (0..31) of one float of
 * parameter TENSOR (its name: wte, qkvw, ...; expw1, expw2 under parallel.expert) as rank WHO
 * holds it (a world rank, or node=NAME: every rank on that node, named as Slurm names it when
 * srun started the rank, else by its host name), once per process:
 *   weights, m, v   the weights or the optimizer's first or second moment, at rest after step
 *                   STEP (before step STEP + 1 uses them)
 *   grads           in step STEP, this rank's gradients before the reduction
 *   rgrads          in step STEP, the reduced gradients (before the update)
 *   loaded          the weights of a run resumed at step STEP, as the load left them (before
 *                   the start's checks: the read path)
 *   acts            in step STEP, the output of layer L (TENSOR layerL: its MLP branch's, before
 *                   the residual add) in the rank's first forward of its own work
 *   sent, received  in step STEP, TENSOR's gradients as the rank sends them into the reduction
 *                   or receives them reduced: that step's all-reduce is done as a reduce-scatter
 *                   and an all-gather (ddp's flat gradients: sdc_fault_reduce), the bit flipped
 *                   in the rank's reduce-scatter input or in what its all-gather brought (the
 *                   middle float outside the rank's own part)
 * The float is the middle one of the rank's holding of the tensor in that set (its whole copy,
 * its part or its shard's pieces). TSR_FAULT is a test switch (src/base/common.h tsr_fault):
 * unset, nothing here runs; set to a malformed flip, the run is refused (exit 1) rather than
 * drill nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu/gpu_train.h"
#include "train/sdc_int.h"

static const char *const site_names[SDC_N_SITES] = {"weights", "m", "v", "grads", "rgrads",
                                                     "loaded", "acts", "sent", "received"};

#define FLIP_FORM "flip:SITE:TENSOR:BIT:WHO:STEP (SITE weights, m, v, grads, rgrads, loaded, " \
                  "acts, sent or received; TENSOR a parameter, or layerL for acts; BIT 0..31; " \
                  "WHO a rank or node=NAME; docs/health.md)"

/* rank 0 names what is wrong with the flip */
static int refuse(const tsr_trainer *t, const char *flip, const char *why) {
    if (t->dist.rank == 0)
        tsr_error("TSR_FAULT: flip:%s: %s; expected " FLIP_FORM, flip, why);
    return TSR_EXIT_USAGE;
}

/* the parameter named name in this model (numel > 0), or -1 */
static int param_id(const tsr_trainer *t, const char *name) {
    /* (the whole model's: a pipeline rank's part lacks the other stages' tensors, and every rank
     * must judge the flip alike) */
    const tsr_model *m = t->model.global ? t->model.global : &t->model;
    for (int i = 0; i < TSR_P_COUNT; i++)
        if (m->params_info[i].numel && !strcmp(m->params_info[i].name, name)) return i;
    return -1;
}

/* a root tensor of the fsdp plan (unit 0): its gradients stay on the rank until the step's end */
static int in_root(const tsr_fsdp *f, int id) {
    for (int k = 0; k < f->units[0].n_seg; k++)
        if (f->units[0].seg[k].id == id) return 1;
    return 0;
}

/* Why the flip of the reduction's data (sent, received) cannot be reached in this run, or NULL */
static const char *unreachable_comm(const tsr_trainer *t, int id) {
    const tsr_train_part *pt = &t->part;
    if (pt->zero1 || pt->fsdp_on || pt->lora_on || t->model.params_info[id].ep)
        return "sent and received act on the all-reduce of the flat gradients (ddp, context, "
               "tensor, pipeline): under zero1, zero3, hsdp, LoRA and for the experts the "
               "reduction is another";
    if (pt->flat_world < 2) return "one data-parallel rank: the gradients are not reduced";
    return NULL;
}

/* Why the flip of an activation cannot be reached in this run, or NULL */
static const char *unreachable_acts(const tsr_trainer *t, const sdc_flip *f) {
    if (t->part.pp_on) return "a pipeline stage's layers run in its chunks' own models: not built";
    if ((size_t)f->bit >= 8 * tsr_dtype_size(t->model.be.act))
        return "BIT exceeds the activations' type (16 bits)";
    return NULL;
}

/* device = cuda: the flip reaches the device's weights and optimizer state through the
 * backend's copy (pulled, flipped on the host, pushed back); NULL, or why not */
static const char *unreachable_gpu(const tsr_trainer *t, const sdc_flip *f) {
    if (f->site > SDC_SITE_V && f->site != SDC_SITE_LOADED)
        return "on device = cuda the flips reach the device's weights, m and v (and loaded): the "
               "gradients, activations and the reduction's data are the device's own";
    if (t->part.lora_on) return "on device = cuda LoRA's base is bf16 on the device only";
    if (t->part.zero1 && f->site != SDC_SITE_M && f->site != SDC_SITE_V)
        return "under zero1 on device = cuda a rank's fp32 weights are its part: flip m or v";
    return NULL;
}

/* Why the flip's site cannot be reached in this run, or NULL */
static const char *unreachable(const tsr_trainer *t, const sdc_flip *f, int id) {
    if (t->be.gpu) return unreachable_gpu(t, f);
    if (f->site == SDC_SITE_ACTS) return unreachable_acts(t, f);
    if (f->site == SDC_SITE_SENT || f->site == SDC_SITE_RECEIVED) return unreachable_comm(t, id);
    const int ep = t->model.params_info[id].ep;
    const int grads = f->site == SDC_SITE_GRADS || f->site == SDC_SITE_RGRADS;
    if (t->part.lora_on && (grads || f->site == SDC_SITE_M || f->site == SDC_SITE_V))
        return "LoRA's base is frozen: it has weights only (no gradients, no optimizer state)";
    if (f->site == SDC_SITE_GRADS && t->part.fsdp_on && !ep && !in_root(&t->part.fsdp, id))
        return "under zero3 and hsdp a layer's gradients are reduce-scattered inside the backward: "
               "flip a root tensor's (wte, wpe, lnfw, lnfb, lm_head)";
    return NULL;
}

/* the fields of "SITE:TENSOR:BIT:WHO:STEP" into f; NULL or why not */
static const char *parse_fields(char *buf, sdc_flip *f) {
    char *field[5], *save = NULL;
    int n = 0;
    for (char *p = strtok_r(buf, ":", &save); p && n < 6; p = strtok_r(NULL, ":", &save)) {
        if (n == 5) return "more than five fields";
        field[n++] = p;
    }
    if (n != 5) return "fewer than five fields";
    int64_t v;
    f->site = SDC_N_SITES;
    for (int k = 0; k < SDC_N_SITES; k++)
        if (!strcmp(field[0], site_names[k])) f->site = (sdc_site)k;
    if (f->site == SDC_N_SITES) return "unknown SITE";
    snprintf(f->tensor, sizeof f->tensor, "%s", field[1]);
    if (tsr_parse_i64(field[2], 0, 31, &v)) return "BIT is not an integer in 0..31";
    f->bit = (int)v;
    f->rank = -1;
    if (!strncmp(field[3], "node=", 5) && field[3][5]) snprintf(f->node, sizeof f->node, "%s", field[3] + 5);
    else if (tsr_parse_i64(field[3], 0, 1 << 30, &v)) return "WHO is neither a rank nor node=NAME";
    else f->rank = (int)v;
    if (tsr_parse_i64(field[4], 0, INT64_MAX, &f->step)) return "STEP is not an integer >= 0";
    return NULL;
}

/* acts' TENSOR layerL: L into f->layer; NULL or why not */
static const char *parse_layer(const tsr_trainer *t, sdc_flip *f) {
    int64_t v;
    if (strncmp(f->tensor, "layer", 5) != 0 || tsr_parse_i64(f->tensor + 5, 0, t->model.L - 1, &v))
        return "acts' TENSOR is not layerL with L a layer of this model (0 .. n_layer - 1)";
    f->layer = (int)v;
    return NULL;
}

static void act_flip(void *ctx, int layer, void *out, size_t n, size_t elem);

int sdc_fault_parse(tsr_trainer *t, sdc_flip *f) {
    memset(f, 0, sizeof *f);
    const char *a = tsr_fault("flip");
    if (!a) return 0;
    char flip[256];
    snprintf(flip, sizeof flip, "%.*s", (int)strcspn(a, ","), a);
    char buf[256];
    memcpy(buf, flip, sizeof buf);
    const char *why = parse_fields(buf, f);
    if (why) return refuse(t, flip, why);
    const int acts = f->site == SDC_SITE_ACTS;
    if (acts && ((why = unreachable(t, f, 0)) || (why = parse_layer(t, f))))
        return refuse(t, flip, why);
    const int id = acts ? 0 : param_id(t, f->tensor);
    if (id < 0) return refuse(t, flip, "no such TENSOR in this model (docs/model.md names them)");
    if (f->rank >= t->dist.world) return refuse(t, flip, "WHO is not a rank of this run");
    if ((why = unreachable(t, f, id))) return refuse(t, flip, why);
    f->on = 1;
    if (acts) t->model.act_fault = act_flip, t->model.act_fault_ctx = t;
    return 0;
}

typedef struct holding {
    float *p[4096];
    size_t len[4096];
    int n;
    size_t total;
} holding;

static void hold(holding *h, float *p, size_t len) {
    if (!p || !len || h->n == 4096) return;
    h->p[h->n] = p, h->len[h->n++] = len;
    h->total += len;
}

/* [lo, hi) of the flat layout as far as tensor p covers it, from buf whose first float is flat
 * element origin */
static void hold_flat(holding *h, float *buf, size_t origin, size_t lo, size_t hi,
                      const tsr_param_info *p) {
    size_t a = p->offset > lo ? p->offset : lo;
    size_t z = p->offset + p->numel < hi ? p->offset + p->numel : hi;
    if (buf && a < z) hold(h, buf + (a - origin), z - a);
}

static void hold_pieces(holding *h, const tsr_fsdp *f, float *buf, int id) {
    for (int k = 0; buf && k < f->n_pieces[f->grank]; k++)
        if (f->pieces[f->grank][k].id == id)
            hold(h, buf + f->pieces[f->grank][k].shard, f->pieces[f->grank][k].len);
}

/* The expert store of the site (parallel.expert), this rank's expw1 or expw2 */
static void hold_experts(holding *h, tsr_trainer *t, sdc_site site, int id) {
    tsr_ep *ep = &t->part.ep;
    float *store[] = {ep->w, ep->m, ep->v, ep->g, ep->g};
    const int two = id == TSR_P_EXPW2;
    if (store[site]) hold(h, store[site] + (two ? ep->n1 : 0), two ? ep->n - ep->n1 : ep->n1);
}

/* The root's gradients of tensor id under zero3 / hsdp (the gathered unit 0, before the step's
 * reduce-scatter) */
static void hold_root_grads(holding *h, tsr_fsdp *f, int id) {
    for (int k = 0; k < f->units[0].n_seg; k++)
        if (f->units[0].seg[k].id == id) hold(h, f->root_g + f->units[0].seg[k].at, f->units[0].seg[k].len);
}

/* Where this rank holds the flip's tensor in its site's set */
static void holding_of(tsr_trainer *t, const sdc_flip *f, int id, holding *h) {
    const tsr_param_info *p = &t->model.params_info[id];
    tsr_train_part *pt = &t->part;
    const size_t lo = pt->shard_lo, hi = pt->shard_hi, n = t->model.n_params;
    const sdc_site site = f->site == SDC_SITE_LOADED ? SDC_SITE_WEIGHTS : f->site;
    if (p->ep) return hold_experts(h, t, site, id);
    if (pt->fsdp_on) {
        float *set[] = {pt->fsdp.params, pt->m, pt->v, NULL, pt->fsdp.grads};
        if (site == SDC_SITE_GRADS) return hold_root_grads(h, &pt->fsdp, id);
        return hold_pieces(h, &pt->fsdp, set[site], id);
    }
    switch (site) {
    case SDC_SITE_WEIGHTS: return hold_flat(h, t->model.params, 0, 0, n, p);
    case SDC_SITE_M: return hold_flat(h, pt->m, lo, lo, hi, p);
    case SDC_SITE_V: return hold_flat(h, pt->v, lo, lo, hi, p);
    case SDC_SITE_GRADS: return hold_flat(h, t->model.grads, 0, 0, n, p);
    default:
        if (pt->zero1) return hold_flat(h, pt->gslice, lo, lo, hi, p);
        return hold_flat(h, t->model.grads, 0, 0, n, p);
    }
}

/* The flip is due now (at this site and step) */
static int due_now(const tsr_trainer *t, const sdc_flip *f, sdc_when when) {
    if (when == SDC_AT_REST) return f->site <= SDC_SITE_V && t->step == f->step;
    if (when == SDC_LOADED) return f->site == SDC_SITE_LOADED && t->step == f->step;
    const sdc_site site = when == SDC_BEFORE_REDUCE ? SDC_SITE_GRADS : SDC_SITE_RGRADS;
    return f->site == site && t->step + 1 == f->step;
}

/* The flip of element total / 2 of the holding; its index in *at */
static void flip_middle(holding *h, int bit, size_t *at, float *was, float *now) {
    size_t k = h->total / 2;
    *at = k;
    for (int i = 0; i < h->n; k -= h->len[i++]) {
        if (k >= h->len[i]) continue;
        uint32_t u;
        *was = h->p[i][k];
        memcpy(&u, &h->p[i][k], sizeof u);
        u ^= (uint32_t)1 << bit;
        memcpy(&h->p[i][k], &u, sizeof u);
        *now = h->p[i][k];
        return;
    }
}

/* This rank is the flip's WHO (a rank, or every rank on node=NAME) */
static int is_who(const tsr_trainer *t, const sdc_flip *f) {
    const tsr_sdc *s = t->sdc; /* (the node names: Slurm's, gathered at sdc_start) */
    const char *node = s->hosts ? s->hosts[t->dist.rank] : t->dist.host;
    return f->rank >= 0 ? f->rank == t->dist.rank : strcmp(f->node, node) == 0;
}

/* The flip of the middle element of h, said on stderr (or that h is empty) */
static void flip_holding(const tsr_trainer *t, const sdc_flip *f, holding *h) {
    size_t at = 0;
    float was = 0.0f, now = 0.0f;
    if (h->total) flip_middle(h, f->bit, &at, &was, &now);
    if (h->total)
        fprintf(stderr, "tessera-train: [rank %d %s] TSR_FAULT: flipped bit %d of %s element %zu "
                "of %zu this rank holds (%s, step %lld): %g -> %g\n", t->dist.rank, t->dist.host,
                f->bit, f->tensor, at, h->total, site_names[f->site], (long long)f->step,
                (double)was, (double)now);
    else
        tsr_warn("TSR_FAULT: rank %d holds no element of %s in its %s: nothing flipped",
                 t->dist.rank, f->tensor, site_names[f->site]);
}

/* device = cuda: the flip through the backend's copy (every rank pulls and pushes: zero1's pull
 * gathers), the host mirror then restored: the device alone holds the flipped bit */
static void device_flip(tsr_trainer *t, const sdc_flip *f, holding *h, int who) {
    size_t at;
    float was, now;
    gpu_train_pull(t->be.gpu);
    if (who) flip_holding(t, f, h);
    gpu_train_push(t->be.gpu, 1);
    if (h->total) flip_middle(h, f->bit, &at, &was, &now); /* (back: the mirror restored) */
}

void sdc_fault(tsr_trainer *t, sdc_when when) {
    sdc_flip *f = t->sdc ? &t->sdc->flip : NULL;
    if (!f || !f->on || f->done || !due_now(t, f, when)) return;
    f->done = 1; /* (once per process, on every rank: a later step is not hit again) */
    const int who = is_who(t, f);
    holding *h = tsr_calloc(1, sizeof *h);
    if (who) holding_of(t, f, param_id(t, f->tensor), h);
    if (t->be.gpu) device_flip(t, f, h, who);
    else if (who) flip_holding(t, f, h);
    free(h);
}

/* TSR_FAULT's acts: layer L's output in WHO's first forward of its own work in step STEP (not
 * a replay's recomputation), bit BIT of its middle element */
static void act_flip(void *ctx, int layer, void *out, size_t n, size_t elem) {
    tsr_trainer *t = ctx;
    sdc_flip *f = &t->sdc->flip;
    if (f->done || layer != f->layer || t->step + 1 != f->step || t->sdc->rp.busy || !is_who(t, f))
        return;
    f->done = 1;
    uint8_t *e = (uint8_t *)out + n / 2 * elem;
    e[f->bit / 8] ^= (uint8_t)(1u << (f->bit % 8)); /* (little-endian: bit b of the element) */
    fprintf(stderr, "tessera-train: [rank %d %s] TSR_FAULT: flipped bit %d of layer %d's output "
            "element %zu of %zu (acts, step %lld)\n", t->dist.rank, t->dist.host, f->bit, layer,
            n / 2, n, (long long)f->step);
}

int sdc_fault_reduce(tsr_trainer *t, float *buf) {
    sdc_flip *f = t->sdc ? &t->sdc->flip : NULL;
    const int sent = f && f->site == SDC_SITE_SENT;
    if (!f || !f->on || f->done || (!sent && f->site != SDC_SITE_RECEIVED) ||
        t->step + 1 != f->step)
        return 0;
    f->done = 1; /* (every rank: the step's reduction is done here by all) */
    const tsr_param_info *p = &t->model.params_info[param_id(t, f->tensor)];
    const size_t lo = t->part.part_displs[t->part.flat_rank];
    const size_t n = t->part.part_counts[t->part.flat_rank], N = t->model.n_params;
    holding *h = tsr_calloc(1, sizeof *h);
    if (sent) hold_flat(h, buf, 0, 0, N, p);
    else hold_flat(h, buf, 0, 0, lo, p), hold_flat(h, buf, 0, lo + n, N, p); /* (not its own) */
    if (sent && is_who(t, f)) flip_holding(t, f, h);
    float *slice = tsr_malloc(n * sizeof *slice + 1);
    trainer_flat_reduce_scatter(t, buf, slice);
    memcpy(buf + lo, slice, n * sizeof *slice);
    free(slice);
    trainer_flat_allgather(t, buf);
    if (!sent && is_who(t, f)) flip_holding(t, f, h);
    free(h);
    return 1;
}

/* TSR_FAULT="matmul:STEP:WHO[:every]" (test-only): the CPU backend's product is wrapped; WHO's
 * first product of its own work in step STEP (not a replay's recomputation; every: each of its products from STEP on, the replays' too) gets
 * bit 22 of its last element flipped, as a unit that computes wrong would (the last row's: the
 * first row of a layer's first product is the first position's query, which attends to itself
 * alone and changes nothing) */
static struct {
    const tsr_trainer *t;
    int64_t step;
    int rank, every, fired;
    char node[64];
    void (*orig)(const tsr_backend *be, void *out, void *pre_gelu, const void *inp,
                 const void *w, const void *bias, int N, int IC, int OC, tsr_gelu_kind gelu);
} wrong;

/* the wrapped product is due to be wrong now */
static int wrong_now(void) {
    const tsr_trainer *t = wrong.t;
    const int64_t step = t->step + 1; /* (the step being computed) */
    if (wrong.every ? step < wrong.step : step != wrong.step || wrong.fired) return 0;
    if (!wrong.every && t->sdc->rp.busy) return 0; /* (once: the rank's own products) */
    const char *node = t->sdc->hosts ? t->sdc->hosts[t->dist.rank] : t->dist.host;
    return wrong.rank >= 0 ? wrong.rank == t->dist.rank : !strcmp(wrong.node, node);
}

static void wrong_matmul(const tsr_backend *be, void *out, void *pre_gelu, const void *inp,
                         const void *w, const void *bias, int N, int IC, int OC,
                         tsr_gelu_kind gelu) {
    wrong.orig(be, out, pre_gelu, inp, w, bias, N, IC, OC, gelu);
    if (!wrong_now()) return;
    float *last = (float *)out + (size_t)N * (size_t)OC - 1;
    uint32_t u;
    memcpy(&u, last, sizeof u);
    u ^= (uint32_t)1 << 22;
    memcpy(last, &u, sizeof u);
    if (!wrong.fired)
        fprintf(stderr, "tessera-train: [rank %d] TSR_FAULT: a wrong matrix product in step %lld%s\n",
                wrong.t->dist.rank, (long long)(wrong.t->step + 1),
                wrong.every ? " (and in every later one)" : "");
    wrong.fired = 1;
}

int sdc_fault_matmul(tsr_trainer *t) {
    const char *a = tsr_fault("matmul");
    if (!a) return 0;
    char buf[160], *save = NULL, *f[4];
    int n = 0;
    snprintf(buf, sizeof buf, "%.*s", (int)strcspn(a, ","), a);
    for (char *p = strtok_r(buf, ":", &save); p && n < 4; p = strtok_r(NULL, ":", &save)) f[n++] = p;
    int64_t v = 0;
    memset(&wrong, 0, sizeof wrong);
    wrong.rank = -1;
    int bad = n < 2 || tsr_parse_i64(f[0], 1, INT64_MAX, &wrong.step) || t->be.gpu ||
              (n == 3 && strcmp(f[2], "every") != 0);
    if (!bad && !strncmp(f[1], "node=", 5) && f[1][5]) snprintf(wrong.node, sizeof wrong.node, "%s", f[1] + 5);
    else if (!bad) bad = tsr_parse_i64(f[1], 0, t->dist.world - 1, &v), wrong.rank = (int)v;
    if (bad) {
        if (t->dist.rank == 0)
            tsr_error("TSR_FAULT: matmul:%.100s: expected matmul:STEP:WHO[:every] (STEP >= 1, WHO a "
                      "rank of this run or node=NAME; device = cpu; docs/health.md)", a);
        return TSR_EXIT_USAGE;
    }
    wrong.t = t, wrong.every = n == 3;
    wrong.orig = t->model.be.matmul_forward;
    t->model.be.matmul_forward = wrong_matmul;
    for (int c = 0; t->part.pp_on && c < t->part.pp.V; c++) /* (the pipeline's chunks: copies) */
        t->part.pp.chunk[c].be.matmul_forward = wrong_matmul;
    return 0;
}
