/* sdc_state.c — the entries of a run (docs/health.md "What is compared"): each tensor of each set
 * (weights, the optimizer's two state sets, the reduced gradients) as this rank holds it, where
 * its floats lie, and which ranks hold the same bytes; their fingerprints (CRC32C, as the
 * checkpoints' tensors, taken in chunks on the rank's threads and combined).
 *
 * Which ranks hold the same bytes (the entry's color; -1: no replica, checked at rest only):
 *   ddp         weights, m, v, reduced gradients: every rank (color 0)
 *   zero1       weights: every rank; m, v: the rank's part only (-1); its reduced gradients are
 *               its own slice, used in the step that made them (not an entry)
 *   zero3       the shards (-1); the reduced gradients are not an entry
 *   hsdp        the shards and their reduced gradients: the ranks of the same place in every group
 *               (the mesh's replica group)
 *   LoRA        the adapters and their state and gradients: every rank; the frozen base as the
 *               mode holds it (every rank under ddp and zero1, a shard under zero3 / hsdp)
 *   experts     parallel.expert's store: the ranks that hold the same experts (expert_data)
 * Context parallelism changes none of these (every rank of a context group holds the state as
 * its mode says). Tensor and pipeline parallelism (model/model_tp.h, model/model_pp.h) narrow
 * each: the ranks of one tensor_data group hold the same split, the ranks of one stage the same
 * layers, so only ranks at the same place of their tensor groups and pipelines compare; a tensor
 * the split or the cut divides is not held whole (its total is the whole model's tensor's). A
 * tensor every rank of a tensor group holds whole (the norms, the row-split projections' biases,
 * a key/value tensor whose one head every rank reads) is compared over the tensor group too:
 * between all the ranks of its stage that hold it, as the whole model's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "common.h"
#include "crc32c.h"
#include "gpu/gpu_train.h"
#include "train/checkpointing_tensors.h"
#include "train/sdc_int.h"

/* Floats per chunk of a fingerprint (chunks are hashed in parallel, then combined) */
#define SDC_CHUNK ((size_t)1 << 20)

static void grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return;
    *cap = *cap ? 2 * *cap : 64;
    if (*cap < need) *cap = need;
    *p = tsr_realloc(*p, (size_t)*cap * elem);
}

typedef struct builder {
    tsr_sdc *s;
    int cap_e, cap_r;
    int T, tp, P, pp;  /* the tensor group's ranks and this rank's place in it; the pipeline's
                        * stages and this rank's (1, 0: none) */
    const tsr_model *global; /* and the whole model's layout, else NULL */
} builder;

/* A replica set's color under tensor or pipeline parallelism: the ranks of one color at this
 * rank's place (the others hold another split or other layers); a tensor every rank of the
 * tensor group holds whole (tensor = 1: a norm, a row-split projection's bias) is the same on
 * every tensor rank of the stage */
static int split_color(const builder *b, int color, int tensor) {
    const int T = tensor ? 1 : b->T, places = T * b->P, place = (tensor ? 0 : b->tp) + T * b->pp;
    return color < 0 || places <= 1 ? color : color * places + place;
}

static void add_entry(builder *b, const char *name, sdc_set set, int color, int frozen,
                      uint64_t total) {
    tsr_sdc *s = b->s;
    grow((void **)&s->e, &b->cap_e, s->n + 1, sizeof *s->e);
    sdc_entry *e = &s->e[s->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->set = set, e->color = color, e->frozen = frozen, e->total = total;
    e->run0 = s->n_runs;
}

/* a run of the last entry */
static void add_run(builder *b, const float *p, size_t at, size_t len) {
    tsr_sdc *s = b->s;
    if (!p || !len) return;
    grow((void **)&s->runs, &b->cap_r, s->n_runs + 1, sizeof *s->runs);
    s->runs[s->n_runs++] = (sdc_run){p, at, len};
    s->e[s->n - 1].n_runs++;
    s->e[s->n - 1].numel += len;
}

/* the name of parameter p in set `set` (the checkpoint's; "grads/NAME" for the gradients) */
static void param_name(const tsr_trainer *t, int set, const tsr_param_info *p, char *name) {
    ckpt_tensor c;
    if (set == SDC_GRADS) snprintf(name, 64, "grads/%s", p->name);
    else ckio_param_tensor(&c, name, &t->cfg.optim, set, p);
}

/* Parameter i as the whole model has it (a split or cut model's whole tensor), or NULL where
 * the model has none or the experts' store holds it: every rank lists the same entries, whatever
 * part of the model it holds (the comparison's table is one all-gather) */
static const tsr_param_info *whole_param(const builder *b, const tsr_trainer *t, int i) {
    const tsr_param_info *g = b->global ? &b->global->params_info[i] : &t->model.params_info[i];
    return g->numel && !g->ep ? g : NULL;
}

/* The entry of parameter i (whole: g) in set `set`, of the whole tensor's size; no replica where
 * this rank holds none of it (another stage's tensor) */
static void param_entry(builder *b, const tsr_trainer *t, int set, int i,
                        const tsr_param_info *g, int color, int frozen) {
    char name[64];
    param_name(t, set, g, name);
    const size_t numel = t->model.params_info[i].numel;
    const int whole = b->T > 1 && numel == g->numel; /* (replicated over the tensor group) */
    add_entry(b, name, (sdc_set)set, numel ? split_color(b, color, whole) : -1, frozen, g->numel);
}

/* The flat layout's tensors of set `set` in buf, whose first float is flat element origin, as
 * far as [lo, hi) covers them */
static void flat_set(builder *b, const tsr_trainer *t, int set, const float *buf, size_t origin,
                     size_t lo, size_t hi, int color, int frozen) {
    for (int i = 0; buf && i < TSR_P_COUNT; i++) {
        const tsr_param_info *g = whole_param(b, t, i), *p = &t->model.params_info[i];
        if (!g) continue;
        param_entry(b, t, set, i, g, color, frozen);
        size_t a = p->offset > lo ? p->offset : lo;
        size_t z = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (p->numel && a < z) add_run(b, buf + (a - origin), a - p->offset, z - a);
    }
}

/* The shard's tensors of set `set` in buf (zero3 / hsdp: this rank's pieces) */
static void shard_set(builder *b, const tsr_trainer *t, int set, const float *buf, int color,
                      int frozen) {
    const tsr_fsdp *f = &t->part.fsdp;
    for (int i = 0; buf && i < TSR_P_COUNT; i++) {
        const tsr_param_info *g = whole_param(b, t, i), *p = &t->model.params_info[i];
        if (!g) continue;
        param_entry(b, t, set, i, g, color, frozen);
        for (int k = 0; p->numel && k < f->n_pieces[f->grank]; k++) {
            const fsdp_piece *q = &f->pieces[f->grank][k];
            if (q->id == i) add_run(b, buf + q->shard, q->flat - p->offset, q->len);
        }
    }
}

/* LoRA's adapters (replicated on every rank) of one set of the store */
static void lora_set(builder *b, const tsr_trainer *t, int set, const float *store) {
    const tsr_lora *lo = &t->part.lora;
    for (int k = 0; store && k < 2 * TSR_LORA_COUNT; k++) {
        char tname[TSR_LORA_NAME], prefix[32], name[64];
        int64_t shape[3];
        size_t at, numel;
        if (!lora_tensor(lo, k, tname, shape, &at, &numel)) continue;
        if (set == SDC_GRADS) snprintf(prefix, sizeof prefix, "grads/lora/");
        else ckio_set_prefix(prefix, sizeof prefix, &t->cfg.optim, set, 1);
        snprintf(name, sizeof name, "%s%s", prefix, tname);
        add_entry(b, name, (sdc_set)set, split_color(b, 0, 0), 0, numel);
        add_run(b, store + at, 0, numel);
    }
}

/* parallel.expert's store of one set: this rank's experts of expw1, then of expw2 (their
 * elements counted from the rank's first) */
static void expert_set(builder *b, const tsr_trainer *t, int set, const float *store) {
    const tsr_ep *ep = &t->part.ep;
    const tsr_mesh_group *edp = mesh_group(&t->mesh, TSR_MESH_EXPERT_DATA);
    const int color = edp->on && edp->size > 1 ? edp->color : -1;
    for (int which = 0; store && which < 2; which++) {
        const tsr_param_info *p = &t->model.params_info[which ? TSR_P_EXPW2 : TSR_P_EXPW1];
        char name[64];
        param_name(t, set, p, name);
        add_entry(b, name, (sdc_set)set, split_color(b, color, 0), t->part.lora_on, p->numel);
        add_run(b, store + (which ? ep->n1 : 0), 0, which ? ep->n - ep->n1 : ep->n1);
    }
}

/* The replica set of a shard's copies under hsdp (the mesh's replica group), -1 under zero3 */
static int shard_color(const tsr_trainer *t) {
    const tsr_mesh_group *rep = mesh_group(&t->mesh, TSR_MESH_REPLICA);
    return rep->on && rep->size > 1 ? rep->color : -1;
}

/* The reduced gradients that have replicas (ddp, hsdp; LoRA's adapters, the experts): first, so
 * that a report names the cause (a gradient that differs) before its effects on the state */
static void grad_sets(builder *b, const tsr_trainer *t) {
    const tsr_train_part *pt = &t->part;
    const int gpu = t->be.gpu != NULL; /* (the library mirrors ddp's and LoRA's only) */
    if (pt->lora_on) lora_set(b, t, SDC_GRADS, pt->lora.g);
    else if (pt->fsdp_on && shard_color(t) >= 0 && !gpu) shard_set(b, t, SDC_GRADS, pt->fsdp.grads, shard_color(t), 0);
    else if (!pt->fsdp_on && !pt->zero1) flat_set(b, t, SDC_GRADS, t->model.grads, 0, 0, t->model.n_params, 0, 0);
    if (pt->ep_on && !pt->lora_on && !gpu) expert_set(b, t, SDC_GRADS, pt->ep.g);
}

/* The base model's weights and optimizer state as the mode holds them */
static void base_sets(builder *b, const tsr_trainer *t) {
    const tsr_train_part *pt = &t->part;
    const int frozen = pt->lora_on;
    if (pt->fsdp_on) {
        shard_set(b, t, SDC_WEIGHTS, pt->fsdp.params, shard_color(t), frozen);
        shard_set(b, t, SDC_M, pt->m, shard_color(t), 0);
        shard_set(b, t, SDC_V, pt->v, shard_color(t), 0);
        return;
    }
    const int part_color = pt->zero1 ? -1 : 0;
    if (t->be.gpu && pt->zero1 && !frozen) /* (the device's fp32 weights: the rank's part) */
        flat_set(b, t, SDC_WEIGHTS, t->model.params, 0, pt->shard_lo, pt->shard_hi, -1, 0);
    else flat_set(b, t, SDC_WEIGHTS, t->model.params, 0, 0, t->model.n_params, 0, frozen);
    flat_set(b, t, SDC_M, pt->m, pt->shard_lo, pt->shard_lo, pt->shard_hi, part_color, 0);
    flat_set(b, t, SDC_V, pt->v, pt->shard_lo, pt->shard_lo, pt->shard_hi, part_color, 0);
}

void sdc_build(tsr_trainer *t, tsr_sdc *s) {
    builder b = {s, 0, 0, 1, 0, 1, 0, t->model.global};
    if (t->part.tp_on) b.T = t->part.tp.T, b.tp = t->part.tp.t;
    if (t->part.pp_on) b.P = t->part.pp.P, b.pp = t->part.pp.p;
    grad_sets(&b, t);
    base_sets(&b, t);
    if (t->part.lora_on) {
        const tsr_lora *lo = &t->part.lora;
        lora_set(&b, t, SDC_WEIGHTS, lo->w), lora_set(&b, t, SDC_M, lo->m);
        lora_set(&b, t, SDC_V, lo->v);
    }
    if (t->part.ep_on) {
        const tsr_ep *ep = &t->part.ep;
        expert_set(&b, t, SDC_WEIGHTS, ep->w), expert_set(&b, t, SDC_M, ep->m);
        expert_set(&b, t, SDC_V, ep->v);
    }
    const size_t n = (size_t)(s->n ? s->n : 1);
    s->crc = tsr_calloc(n, sizeof *s->crc);
    s->stored = tsr_calloc(n, sizeof *s->stored);
    s->table = tsr_calloc(2 * n * (size_t)t->dist.world, sizeof *s->table);
}

int sdc_at_rest(const sdc_entry *e) { return e->set != SDC_GRADS; }

/* One chunk of a fingerprint: entry k's floats [off, off + len) of run r */
typedef struct chunk {
    int k;
    const float *p;
    size_t len;
    uint32_t crc;
} chunk;

/* The chunks of the entries `pick` selects, in entry and run order; *n their count */
static chunk *chunks_of(const tsr_sdc *s, const int *pick, int *n) {
    int cap = 0;
    chunk *c = NULL;
    *n = 0;
    for (int k = 0; k < s->n; k++) {
        if (!pick[k]) continue;
        for (int r = 0; r < s->e[k].n_runs; r++) {
            const sdc_run *u = &s->runs[s->e[k].run0 + r];
            for (size_t o = 0; o < u->len; o += SDC_CHUNK) {
                grow((void **)&c, &cap, *n + 1, sizeof *c);
                size_t len = u->len - o < SDC_CHUNK ? u->len - o : SDC_CHUNK;
                c[(*n)++] = (chunk){k, u->p + o, len, 0};
            }
        }
    }
    return c;
}

/* s->crc[k] of every entry pick[k] selects, its chunks hashed on the rank's threads */
static void hash_picked(const tsr_trainer *t, tsr_sdc *s, const int *pick) {
    int n;
    chunk *c = chunks_of(s, pick, &n);
#pragma omp parallel for schedule(dynamic) num_threads(t->be.threads > 0 ? t->be.threads : 1)
    for (int j = 0; j < n; j++) c[j].crc = tsr_crc32c(0, c[j].p, c[j].len * sizeof(float));
    for (int k = 0; k < s->n; k++)
        if (pick[k]) s->crc[k] = 0;
    for (int j = 0, first = 1; j < n; j++) {
        first = j == 0 || c[j - 1].k != c[j].k;
        uint32_t *crc = &s->crc[c[j].k];
        *crc = first ? c[j].crc : crc32c_combine(*crc, c[j].crc, c[j].len * sizeof(float));
    }
    free(c);
}

uint32_t sdc_crc_floats(const tsr_trainer *t, const float *p, size_t n) {
    const size_t k = (n + SDC_CHUNK - 1) / SDC_CHUNK;
    uint32_t *c = tsr_malloc((k ? k : 1) * sizeof *c), crc = 0;
#pragma omp parallel for schedule(dynamic) num_threads(t->be.threads > 0 ? t->be.threads : 1)
    for (size_t j = 0; j < k; j++) {
        const size_t len = n - j * SDC_CHUNK < SDC_CHUNK ? n - j * SDC_CHUNK : SDC_CHUNK;
        c[j] = tsr_crc32c(0, p + j * SDC_CHUNK, len * sizeof(float));
    }
    for (size_t j = 0; j < k; j++) {
        const size_t len = n - j * SDC_CHUNK < SDC_CHUNK ? n - j * SDC_CHUNK : SDC_CHUNK;
        crc = j ? crc32c_combine(crc, c[j], len * sizeof(float)) : c[j];
    }
    free(c);
    return crc;
}

/* device = cuda: the device's state copied into the host mirror first (the weights and the
 * optimizer state as a checkpoint's pull takes them; the reduced gradients where the library
 * mirrors them), hashed there as on the CPU. Collective when rest (zero1's pull gathers). */
static void from_device(tsr_trainer *t, int rest, int grads) {
    if (!t->be.gpu) return;
    if (rest) gpu_train_pull(t->be.gpu);
    if (grads) gpu_train_pull_grads(t->be.gpu);
}

void sdc_hash_sets(tsr_trainer *t, tsr_sdc *s, int rest, int grads) {
    const double t0 = tsr_now();
    from_device(t, rest, grads);
    int *pick = tsr_calloc((size_t)(s->n ? s->n : 1), sizeof *pick);
    for (int k = 0; k < s->n; k++) pick[k] = sdc_at_rest(&s->e[k]) ? rest : grads;
    hash_picked(t, s, pick);
    free(pick);
    s->hash_s += tsr_now() - t0;
}
