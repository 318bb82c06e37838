/* model_pp.h — pipeline parallelism's cut of a model (parallel.pipeline = P; docs/pipeline.md):
 * the stages' layers (balanced by cost, or parallel.pipeline_layout's hand cut), a rank's part of
 * the model, and its chunks.
 *
 * The cut. The whole model's L layers are cut into S = P V stages of consecutive layers, stage 0
 * holding the embedding as well, stage S - 1 the final norm, the head and the loss; chunk c of
 * pipeline rank p is stage c P + p (src/pipeline/pp_schedule.h). Every stage runs at least one
 * layer.
 *
 * The part. Rank p holds a model of its chunks' layers in chunk order (tsr_model_config's part:
 * its layer l is the whole model's config_layer_at(l), so every per-layer rule of the config and
 * the layer kinds reads the whole model's layer), with the embedding on rank 0 and the final
 * norm and the head on rank P - 1 (an untied model's head, or a second copy of wte: tied
 * embeddings' two copies get the sum of their gradients, pp_tied_*). Its flat layout is the
 * usual one of its tensors, each stacked over its layers: the data-parallel machinery (ddp,
 * zero1, zero3 / hsdp over the `stage` group, AdamW, Muon) runs on it as on a whole model (a
 * sharded part's chunks ask for their layers by the part's units: chunk_src). m->global keeps
 * the whole model's layout: the checkpoints' shapes, the initialisation's element numbers, the
 * FLOPs.
 *
 * The chunks. The decoder runs one chunk at a time: pp->chunk[c] is a model of chunk c's layers
 * alone (a part of one range, the embedding only in stage 0's, the head only in stage S - 1's),
 * whose tensors lie in the rank's flat buffer (its stacks' slices of those layers), so a
 * chunk's forward and backward read and accumulate the rank's weights and gradients.
 *
 * Runs. Each tensor of the part is a list of runs of the whole model's flat layout, in model_tp.h's
 * form (one block each): a root tensor whole, a per-layer tensor one run per chunk (its layers'
 * slices). Tied embeddings' second copy (on the last rank) is not counted (the gradient norm, the
 * checkpoint's writer: the first rank's copy is).
 */
#ifndef TSR_MODEL_PP_H
#define TSR_MODEL_PP_H

#include <stddef.h>

#include "config/config.h"
#include "model/model.h"
#include "model/model_tp.h"

/* a pipeline rank's part as runs of the whole model: the runs (above), tensors in id order, each
 * run's local offsets from its tensor's offset in that part's layout (off) */
typedef struct pp_part_layout {
    tp_run *runs;
    size_t n_runs;
    size_t off[TSR_P_COUNT];
} pp_part_layout;

typedef struct tsr_pp {
    int P, V, S, p;                /* pipeline ranks, chunks a rank, stages, this rank's place */
    int *cut;                      /* (S + 1) stage s's first layer; cut[S] = L */
    tsr_model global;              /* the whole model's layout (no buffers) */
    tsr_model chunk[TSR_PART_MAX]; /* chunk c: stage c P + p's layers over the part's buffers */
    int chunk_l0[TSR_PART_MAX];    /* chunk c's first layer in the part */
    int moe_before[TSR_PART_MAX];  /* the whole model's MoE layers before chunk c's first */
    pp_part_layout *parts;         /* (P) every pipeline rank's part: the checkpoints' exchange
                                    * (model_tp.h tp_io) finds each rank's elements there */
    const tp_run *runs;            /* this rank's: parts[p]'s */
    size_t n_runs;
    /* a sharded part (zero3 / hsdp: the part's m->src): chunk c's source hands its unit u >= 1
     * to the part's unit chunk_l0[c] + u (the root, unit 0, is the part's) */
    struct pp_chunk_src {
        const tsr_param_source *part;
        int l0;
    } chunk_map[TSR_PART_MAX];
    tsr_param_source chunk_src[TSR_PART_MAX];
} tsr_pp;

/* The cost model of the balanced cut (the plan's, per token of a sequence of T positions): a
 * layer's training FLOPs (6 x the parameters a token passes through, plus its mixer's own
 * products), the embedding's (a lookup: 0), the head's and loss's (6 V C). */
double pp_layer_cost(const tsr_model *m, int l, int T);
double pp_head_cost(const tsr_model *m);
/* The cut of the whole model m into S stages (cut: S + 1 entries): cfg's parallel.pipeline_layout
 * when it is set (config_pipeline_layout; checked at load), else the cut that minimises the most
 * costly stage (the embedding counted in stage 0, the head in stage S - 1), every stage at least
 * one layer, the earliest cut among equals. */
void pp_cut(const tsr_model *m, const tsr_config *cfg, int T, int S, int *cut);
/* After model_init (and before anything is allocated): m becomes pipeline rank p's part of a
 * pipeline of P ranks, V chunks a rank, cut `cut` (S + 1 entries); pp filled, m->pp and m->global
 * set. P = 1 changes nothing. On a split model (model_set_tensor first) the part is of the
 * split, m->global stays the whole model and tp->runs become the part's (pp_tp_runs). */
void model_set_pipeline(tsr_model *m, tsr_pp *pp, int P, int V, int p, const int *cut);
/* The chunks' buffers from m's (its weights, gradients, ALiBi slopes, RoPE tables): after they
 * are allocated, and again whenever they change. */
void pp_attach(tsr_pp *pp, const tsr_model *m);
void pp_free(tsr_pp *pp);
/* Pipeline rank q's runs of tensor id (at most TSR_PART_MAX), each run's local offset from
 * *lbase in q's flat layout: its count */
int pp_part_runs(const tsr_pp *pp, int q, tsr_param_id id, tp_run *runs, size_t *lbase);
/* Under tensor parallelism as well (pp->global the split model, model_tp.h): layout q = p T + t,
 * tensor rank t of pipeline rank p's part; its runs of tensor id in the whole model (at most
 * PP_TP_MAX_RUNS), each run's local offset from *lbase in the part's flat layout: its count.
 * model_set_pipeline makes this rank's the tensor split's runs (tp->runs): the gradient sums,
 * the norm's share and the initial weights read the part through them. */
#define PP_TP_MAX_RUNS (TP_MAX_RUNS * TSR_PART_MAX)
int pp_tp_runs(const tsr_pp *pp, const tsr_tp *tp, int q, tsr_param_id id, tp_run *runs,
               size_t *lbase);
/* The stage of chunk c (c P + p) */
int pp_chunk_stage(const tsr_pp *pp, int c);
/* Tied embeddings under a pipeline: the part holds a second copy of wte (the head's, on the last
 * rank, not counted), 0 otherwise. */
int pp_tied_copy(const tsr_pp *pp, const tsr_model *m);
/* The squared norm of the part's gradients g (flat [lo, hi) of the part) that it counts (all but
 * a tied wte's second copy). */
double pp_sumsq(const tsr_pp *pp, const tsr_model *m, const float *g, size_t lo, size_t hi);
/* The part's wte range [*lo, *lo + *n) of its flat layout (n 0 without it) */
void pp_wte_range(const tsr_model *m, size_t *lo, size_t *n);

#endif
