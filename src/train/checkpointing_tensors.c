/* checkpointing_tensors.c — see checkpointing_tensors.h. */
#include "train/checkpointing_tensors.h"

#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "optim/optim.h"

void ckio_set_prefix(char *out, size_t n, const tsr_optim_config *o, int set, int lora) {
    int ns;
    const char *const *state = optim_state_sets(o, &ns);
    if (ns != CKIO_SETS - 1)
        tsr_die(TSR_EXIT_INTERNAL, "the optimizer slot names %d state sets, the checkpoint's "
                "layout %d", ns, CKIO_SETS - 1);
    if (set == CKIO_MODEL) snprintf(out, n, "%s", lora ? "lora/" : "model/");
    else snprintf(out, n, "optim/%s/%s", state[set - 1], lora ? "lora/" : "");
}

/* tensor parallelism: this rank's part of the global flat layout (tp_io), per set in
 * t->part.tp_gpart (allocated zeroed at the first use, freed by ckio_release) */
static void tp_layout(tsr_trainer *t, int with_optim, size_t *lo, size_t *hi, float **base,
                      size_t *origin) {
    const tp_io *io = &t->part.tpio;
    const size_t n = tp_io_part(io), held = io->hold_hi[io->rank] - io->hold_lo[io->rank];
    *lo = io->io_lo[io->rank], *hi = *lo + n;
    for (int set = 0; set < CKIO_SETS; set++) {
        const int on = set == CKIO_MODEL || with_optim;
        if (!t->part.tp_gpart[set] && on && n > 0)
            t->part.tp_gpart[set] = tsr_calloc(n, sizeof(float));
        /* zero3 / hsdp: the first group's parts of the split layout, moved from the shards */
        if (t->part.fsdp_on && !t->part.ckio[set] && on && held > 0)
            t->part.ckio[set] = tsr_calloc(held, sizeof(float));
        base[set] = t->part.tp_gpart[set];
        origin[set] = *lo;
    }
}

float *ckio_tp_held(tsr_trainer *t, int set) {
    if (t->part.fsdp_on) return t->part.ckio[set]; /* (the first group's part, else none) */
    const size_t lo = t->part.part_displs[t->part.flat_rank];
    if (set == CKIO_MODEL) return t->model.params + lo;
    return (set == CKIO_M ? t->part.m : t->part.v) + (lo - t->part.shard_lo);
}

void ckio_layout(tsr_trainer *t, int with_optim, size_t *lo, size_t *hi, float **base,
                 size_t *origin) {
    if (trainer_split(t)) {
        tp_layout(t, with_optim, lo, hi, base, origin);
        return;
    }
    if (!t->part.fsdp_on) {
        *lo = t->part.part_displs[t->dist.rank];
        *hi = *lo + t->part.part_counts[t->dist.rank];
        base[CKIO_MODEL] = t->model.params, base[CKIO_M] = t->part.m, base[CKIO_V] = t->part.v;
        origin[CKIO_MODEL] = 0, origin[CKIO_M] = origin[CKIO_V] = t->part.shard_lo;
        return;
    }
    tsr_fsdp *f = &t->part.fsdp;
    size_t n = f->gindex == 0 ? f->part_counts[f->grank] : 0;
    *lo = f->gindex == 0 ? f->part_displs[f->grank] : 0;
    *hi = *lo + n;
    for (int set = 0; set < CKIO_SETS; set++) {
        if (!t->part.ckio[set] && (set == CKIO_MODEL || with_optim) && n > 0) {
            t->part.ckio[set] = t->be.ops->alloc(n * sizeof(float));
            t->be.ops->zero(t->part.ckio[set], n * sizeof(float));
        }
        base[set] = t->part.ckio[set];
        origin[set] = *lo;
    }
}

void ckio_release(tsr_trainer *t) {
    for (int set = 0; set < CKIO_SETS; set++) {
        if (t->part.ckio[set] && trainer_split(t)) free(t->part.ckio[set]); /* (tp_layout's) */
        else if (t->part.ckio[set]) t->be.ops->free(t->part.ckio[set]);
        t->part.ckio[set] = NULL;
        free(t->part.ep_io[set]);
        t->part.ep_io[set] = NULL;
        free(t->part.tp_gpart[set]);
        t->part.tp_gpart[set] = NULL;
    }
}

int ckio_ep_io(const tsr_trainer *t) {
    return t->part.ep_on && mesh_group(&t->mesh, TSR_MESH_EXPERT_DATA)->rank == 0;
}

int ckio_ep_writer(const tsr_trainer *t) {
    return ckio_ep_io(t) && (!t->part.tp_on || t->part.tp.t == 0);
}

float *ckio_ep_store(tsr_trainer *t, int set) {
    tsr_ep *ep = &t->part.ep;
    return set == CKIO_MODEL ? ep->w : set == CKIO_M ? ep->m : ep->v;
}

void ckio_param_tensor(ckpt_tensor *c, char *name, const tsr_optim_config *o, int set,
                       const tsr_param_info *p) {
    char prefix[32];
    ckio_set_prefix(prefix, sizeof prefix, o, set, 0);
    snprintf(name, 64, "%s%s", prefix, p->name);
    c->name = name;
    c->ndim = p->ndim;
    for (int d = 0; d < 4; d++) c->shape[d] = d < p->ndim ? p->shape[d] : 0;
    c->lo = c->hi = 0;
    c->data = NULL;
}

/* parallel.expert: the two stacked expert tensors of a set, this rank's part of each (the
 * writers') or none */
static int ep_tensors(tsr_trainer *t, int set, ckpt_tensor *ts, char (*names)[64]) {
    const tsr_model *m = trainer_split(t) ? t->model.global : &t->model; /* (global shapes) */
    int n = 0;
    for (int which = 0; which < 2; which++) {
        const tsr_param_info *p = &m->params_info[which ? TSR_P_EXPW2 : TSR_P_EXPW1];
        ckpt_tensor *c = &ts[n];
        ckio_param_tensor(c, names[n], &t->cfg.optim, set, p);
        if (ckio_ep_writer(t)) {
            if (!t->part.ep_io[set])
                t->part.ep_io[set] = tsr_calloc(ep_part_floats(&t->part.ep), sizeof(float));
            ep_part_range(&t->part.ep, which, &c->lo, &c->hi);
            c->data = t->part.ep_io[set] + (which ? t->part.ep.gn1 : 0);
        }
        n++;
    }
    return n;
}

/* LoRA (docs/lora.md): the checkpoint holds the adapters and their AdamW moments, not the frozen
 * base (lora.base and lora.base_checksum in its config name it): lora/q_A .. at their global
 * shapes. The store is replicated: rank 0 writes and reads it whole, the others name empty
 * ranges (gather_after_load broadcasts what rank 0 read). */
int ckio_lora_tensors(tsr_trainer *t, int with_optim, ckpt_tensor *ts, char (*names)[64]) {
    tsr_lora *lo = &t->part.lora;
    float *store[CKIO_SETS] = {lo->w, lo->m, lo->v};
    int n = 0;
    for (int set = 0; set < (with_optim ? CKIO_SETS : 1); set++)
        for (int k = 0; k < 2 * TSR_LORA_COUNT; k++) {
            char name[TSR_LORA_NAME];
            int64_t shape[3];
            size_t at, numel;
            if (!lora_tensor(lo, k, name, shape, &at, &numel)) continue;
            ckpt_tensor *c = &ts[n];
            char prefix[32];
            ckio_set_prefix(prefix, sizeof prefix, &t->cfg.optim, set, 1);
            snprintf(names[n], 64, "%s%s", prefix, name);
            c->name = names[n];
            c->ndim = 3;
            for (int d = 0; d < 4; d++) c->shape[d] = d < 3 ? shape[d] : 0;
            c->lo = 0;
            c->hi = t->dist.rank == 0 ? numel : 0;
            c->data = t->dist.rank == 0 ? store[set] + at : NULL;
            n++;
        }
    return n;
}

int ckio_tensors(tsr_trainer *t, int with_optim, ckpt_tensor *ts, char (*names)[64]) {
    if (t->part.lora_on) return ckio_lora_tensors(t, with_optim, ts, names);
    return ckio_base_tensors(t, with_optim, ts, names);
}

int ckio_base_tensors(tsr_trainer *t, int with_optim, ckpt_tensor *ts, char (*names)[64]) {
    /* (a split model's checkpoint: the whole model's layout and shapes) */
    const tsr_model *m = trainer_split(t) ? t->model.global : &t->model;
    size_t lo, hi, origin[CKIO_SETS];
    float *base[CKIO_SETS];
    ckio_layout(t, with_optim, &lo, &hi, base, origin);
    int n = 0;
    for (int set = 0; set < (with_optim ? CKIO_SETS : 1); set++) {
        for (int i = 0; i < TSR_P_COUNT; i++) {
            const tsr_param_info *p = &m->params_info[i];
            if (!p->numel) continue;
            if (p->ep) {
                if (i == TSR_P_EXPW1) n += ep_tensors(t, set, ts + n, names + n);
                continue;
            }
            size_t a = p->offset > lo ? p->offset : lo;
            size_t b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
            if (a > b) a = b = p->offset; /* empty, anywhere inside */
            ckpt_tensor *c = &ts[n];
            ckio_param_tensor(c, names[n], &t->cfg.optim, set, p);
            c->lo = a - p->offset;
            c->hi = b - p->offset;
            c->data = a < b ? base[set] + (a - origin[set]) : NULL;
            n++;
        }
    }
    return n;
}
