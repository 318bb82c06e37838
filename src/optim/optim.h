/* optim.h — the optimizer slot: AdamW and Muon (optim.name) behind one table, so that a sharding
 * strategy never needs a table per optimizer (docs/training.md "The update", "Muon").
 *
 * The trainer's strategy (src/train/trainer.c: ddp, zero1, zero3 / hsdp, LoRA) knows which part of
 * the weights this rank updates and how its gradients were summed; the slot knows how a part is
 * updated. The trainer hands it each part it owns, once per applied update:
 *   OPTIM_PART_FLAT     the flat layout's owned range [lo, hi) (ddp: all of it; zero1: the rank's
 *                       part): w the whole flat buffer, g, m, v from lo; the experts' tensors
 *                       (params_info[].ep) are left to their own part;
 *   OPTIM_PART_SHARD    zero3 / hsdp: the fsdp shard (model/fsdp.h), w = f->params, g = f->grads,
 *                       m, v in shard order; tensor piece by tensor piece;
 *   OPTIM_PART_EXPERTS  parallel.expert: the experts' store (model/model_ep.h), [0, n);
 *   OPTIM_PART_LORA     the LoRA adapters (model/model_lora.h), [0, n), decayed as weights.
 * State (what a checkpoint saves as optim/<set>/<tensor>, per element of the owned part):
 * optim_state_sets, m and v for both: AdamW's moments; under Muon m is also its matrices'
 * momentum, and v stays zero over them. Memory (what the plan counts): those sets, and
 * optim_scratch_bytes beyond them (Muon's iteration and exchange; AdamW none).
 * device = cuda: the library runs the same optimizers on the device (src/gpu/gpu_train_step.c, its
 * Muon in src/gpu/gpu_muon.h, from the same plan, optim/muon_plan.h); the host's slot is off.
 */
#ifndef TSR_OPTIM_H
#define TSR_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "model/fsdp.h"
#include "model/model.h"
#include "optim/muon.h"

typedef enum {
    OPTIM_PART_FLAT = 0,
    OPTIM_PART_SHARD,
    OPTIM_PART_EXPERTS,
    OPTIM_PART_LORA,
    OPTIM_PART_COUNT
} optim_part_kind;

/* A part of the trainable weights that this rank updates, with its summed gradients and state. */
typedef struct optim_part {
    optim_part_kind kind;
    float *w;          /* FLAT: the whole flat buffer; the others: the part's own, from 0 */
    const float *g;    /* the summed gradients of [lo, hi), from lo */
    float *m, *v;      /* the state of [lo, hi), from lo */
    size_t lo, hi;     /* FLAT: the owned range of the flat layout; the others: 0, n (SHARD:
                        * f->shard_n) */
} optim_part;

/* Muon's exchange between the ranks over a run (zero3 / hsdp; on device = cuda every sharded
 * mode): G the ranks of a sharding group (0: no exchange), the bytes this rank sent, and the
 * formula's per step and group (muon_plan_step_bytes). */
typedef struct optim_traffic {
    int G;
    uint64_t sent, step_bytes;
} optim_traffic;

struct optim_api;

/* One rank's optimizer: the table of optim.name and its state beyond the moments. Zeroed (api
 * NULL): off, as on device = cuda, where every call below but the plan's does nothing. */
typedef struct tsr_optim {
    const struct optim_api *api;
    tsr_optim_config o;
    const tsr_ops *ops;         /* the host's fp32 ops: the update and the scratch's allocator */
    const tsr_param_info *info; /* (TSR_P_COUNT) the model's tensors: kinds, flat offsets */
    tsr_fsdp *f;                /* zero3 / hsdp: the shard's plan, else NULL */
    tsr_muon muon;              /* optim.name = muon (optim/muon.h) */
} tsr_optim;

/* An optimizer, as the slot calls it. */
typedef struct optim_api {
    const char *name;           /* optim.name's value */
    void (*init)(tsr_optim *op, const tsr_model *m);
    void (*free)(tsr_optim *op);
    /* the update of part p at learning rate lr (optim.lr times the schedule's multiplier), the
     * summed gradients times gscale (clipping); step: the bias-correction step, from 1 */
    void (*step)(tsr_optim *op, const optim_part *p, double lr, float gscale, int64_t step);
    /* zero1: moves the trainer's cuts of the flat layout (n floats over W ranks) where the
     * optimizer needs them; NULL: they stand */
    void (*partition)(const tsr_optim *op, size_t n, int W, size_t *displs, size_t *counts);
    /* the host bytes init allocates beyond the state, with groups of G (zero3 / hsdp; 0 none) */
    size_t (*scratch_bytes)(const tsr_model *m, const tsr_optim_config *o, int G);
    optim_traffic (*traffic)(const tsr_optim *op); /* NULL: no exchange */
    const char *const *state;   /* the state sets, per element of a part ("m", "v") */
    int n_state;
} optim_api;

extern const optim_api optim_adamw; /* optim/adamw.c */
extern const optim_api optim_muon;  /* optim/muon.c */

/* The slot for o on model m's tensors (f: zero3 / hsdp's plan, else NULL), its scratch from ops.
 * Call once the model's layout is final; the moments are the trainer's (tsr_train_part m, v). */
void optim_init(tsr_optim *op, const tsr_optim_config *o, const tsr_model *m, tsr_fsdp *f,
                const tsr_ops *ops);
void optim_free(tsr_optim *op);
/* One update of part p (see above); nothing when off. */
void optim_step(tsr_optim *op, const optim_part *p, double lr, float gscale, int64_t step);
/* zero1: the partition's cuts, moved where the optimizer needs them (Muon: each matrix whole in
 * one part, optim/muon.h); unchanged when off or not needed. */
void optim_partition(const tsr_optim *op, size_t n, int W, size_t *displs, size_t *counts);
/* The host bytes the slot allocates for o on model m beyond its state, with sharding groups of G
 * (zero3 / hsdp; 0: none): the memory plan's (nothing allocated). */
size_t optim_scratch_bytes(const tsr_model *m, const tsr_optim_config *o, int G);
/* The state sets of o, per element of a part: names (as in optim/<set>/<tensor>), *n of them. */
const char *const *optim_state_sets(const tsr_optim_config *o, int *n);
/* The slot's exchange so far (G = 0: none, or off). */
optim_traffic optim_traffic_of(const tsr_optim *op);
/* Rank 0 prints the exchange's bytes over a run's steps, all ranks, beside the formula's;
 * nothing when x.G = 0. Collective otherwise. */
void optim_report(optim_traffic x, int64_t steps, int world);

#endif
