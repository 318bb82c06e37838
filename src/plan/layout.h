/* layout.h — which layout for this model on these GPUs (tessera-train --fit layout; docs/planning.md
 * "Choosing the layout"): the data/shard, tensor, pipeline (schedule, virtual stages), context and
 * expert splits, the microbatch and activation checkpointing of W GPUs, G a node, tried in turn;
 * each planned by the trainer's dry start (the device memory plan, as --plan plans it) and timed by
 * the time plan (plan/timeplan.h, the pipeline's bubble and stage sends included); the fastest that
 * fit a GPU of the given memory printed, with why the best wins, each marked by whether a
 * device = "cuda" start runs it (the config's pair tables: "runs on cuda"). No second cost model:
 * both figures are the plan's own. */
#ifndef TSR_PLAN_LAYOUT_H
#define TSR_PLAN_LAYOUT_H

#include "plan/timeplan.h"

/* What the search does with one planned layout: its view, its device memory per rank without the
 * activations (fixed) and one microbatch's activations (acts) */
typedef void (*plan_layout_use)(const plan_view *v, double fixed, double acts, void *ctx);
/* The trainer's dry start of cfg on the world d (train/train_plan.h trainer_layout_trial): calls
 * use once and returns 0, or -1 when the trainer refuses the layout (nothing called). */
typedef int (*plan_layout_trial)(const tsr_config *cfg, const tsr_dist *d, plan_layout_use use,
                                 void *ctx);

/* The search for cfg (device = cuda) on d's world (d->world GPUs, d->local_world a node) against
 * gpu_bytes a GPU, timed by p: rank 0 prints the fastest layouts that fit, the naive one (ZeRO-3
 * over all ranks), the fastest that a device = "cuda" start runs when the best is not one, and why
 * the best wins. 0, or TSR_EXIT_USAGE after saying why (p cannot time the recipe). */
int plan_layout_search(const tsr_config *cfg, const tsr_dist *d, double gpu_bytes,
                       const timeplan *p, plan_layout_trial trial);

#endif
