/* timeplan.h — tessera-train --time: how long a recipe trains on W GPUs (docs/planning.md).
 *
 * The step's compute time comes from a per-op table measured on one GPU of the model asked for
 * (TSR_PROFILE=1's table, kept as configs/profiles/MODEL.prof and installed in
 * share/tessera/profiles/): the table's GEMMs give a FLOP rate, its attention another, its
 * softmax + cross-entropy a time per logit, the rest of its forward + backward (norms,
 * element-wise ops, launch gaps) a time per token x layer x d_model, its AdamW and gradient norm a
 * time per parameter; the recipe's work is divided by them. The bytes of every collective per step
 * are docs/sharding.md's formulas (those bench/comm_volume.sh checks), at the GPU path's element
 * sizes, over the links' bus bandwidth (within a node, between nodes), less what the schedule
 * overlaps with the backward pass. Printed for W = 1, 8, 64, 512 (and the --plan world), with every
 * assumption. A recipe needing ops the table has no rows for (MoE, LoRA, Muon) gets no step time:
 * the plan names what is missing and the GPU call that measures it.
 */
#ifndef TSR_TIMEPLAN_H
#define TSR_TIMEPLAN_H

#include "plan/plan.h"

typedef struct timeplan_opts {
    const char *gpu;           /* "H200", "H100", ... or a file holding a TSR_PROFILE table */
    double link_node, link_net; /* GB/s bus bandwidth within a node, between nodes; 0: default */
    int per_node;              /* GPUs per node; 0: 8 */
    int plan_world;            /* --plan's world, shown beside the standard ones (0: none) */
} timeplan_opts;

/* Parses --link NODE[,NET] (GB/s, each > 0 and at most 100000). 0, or -1 with why. */
int timeplan_parse_link(const char *s, timeplan_opts *o, char *why, size_t n);

typedef struct timeplan timeplan;
/* Finds and reads o->gpu's table (NULL: H200's). NULL with *rc = TSR_EXIT_USAGE (not a GPU
 * tessera knows nor a file) or TSR_EXIT_DATA (a table that cannot be read), after saying why. A
 * known GPU without a table is not an error: the plan says so and gives the communication alone. */
timeplan *timeplan_open(const timeplan_opts *o, int *rc);
/* Prints the time plan of t (initialised for a dry run) on rank 0, every W with the recipe's
 * micro_batch recipe_micro (at most W's per-rank batch; 0: t's): --plan W may have given t a
 * smaller one that divides W's per-rank batch (docs/planning.md). */
void timeplan_print(const timeplan *p, const plan_view *t, long long recipe_micro);
void timeplan_close(timeplan *p);

/* One layout's step by the same model (--fit layout, plan/layout.h): t planned on its own world
 * (t->dist.world ranks, t->dist.local_world a node) at its micro_batch */
typedef struct timeplan_layout {
    double step_ms, compute_ms;   /* the step; its compute (the pipeline's costliest rank's) */
    double exposed_ms, idle_ms;   /* the links' waits; the pipeline's bubble */
    double bubble;                /* the schedule's idle share (0: no pipeline) */
    double node_bytes, net_bytes; /* a rank's bytes a step on the node's links, the network's */
    double tokens_gpu;            /* tokens/s a GPU */
    char na[160];                 /* why the layout has no figures (its batch does not split) */
} timeplan_layout;
/* 0 with *r filled, 1 when the layout has no figures (r->na says why), -1 when the table cannot
 * time the recipe (no table, or ops it has no rows for) */
int timeplan_layout_of(const timeplan *p, const plan_view *t, timeplan_layout *r);

#endif
