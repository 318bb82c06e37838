/* data_loss.h — the mean loss of a model over a dataset, with the model passed in as a forward
 * function: the trainer's periodic evaluation and `tessera eval` share it, and it needs nothing
 * above the data layer. */
#ifndef TSR_DATA_LOSS_H
#define TSR_DATA_LOSS_H

#include <stdint.h>

#include "data/data.h"
#include "dist.h"

/* The ids ds holds (at path) against a model of vocab rows: 0 when its largest id
 * (dataset_max_token_id) is below vocab, whatever its vocabulary says (a tokenizer may have ids
 * the model never sees: Gemma 3's 262,145 over 262,144 rows); else TSR_EXIT_USAGE after tsr_error
 * naming both (the trainer and `tessera eval` before they read a sample: an id past the rows would
 * index beyond the embedding). */
int data_check_ids(const tsr_dataset *ds, const char *path, int vocab);

/* Reads sample idx of ds (named name in errors); a sample the reader refuses (a token id beyond
 * the vocabulary in a dataset opened without verify) is seen by this rank only, so it aborts
 * every rank (tsr_die). Returns the count of counted targets. */
int64_t data_read_or_die(const tsr_dataset *ds, const char *name, int T, uint64_t idx,
                         int32_t *inputs, int32_t *targets);

/* The summed loss of B rows of T tokens (inputs, targets), as model_forward returns it. B = 0
 * (inputs, targets NULL): a call that scores nothing, made by the ranks whose range is shorter
 * until each rank has made as many calls as the one with the longest (a sharded model's forward
 * is collective: model_forward's idle forward); 0. */
typedef double (*data_forward_fn)(void *model, const int32_t *inputs, const int32_t *targets,
                                  const uint8_t *starts, int B, int T);

/* Mean loss over the counted targets of the first `limit` samples of ds (0 = all), split over the
 * ranks in contiguous ranges, in calls of forward(model, ...) of up to B rows (the model's
 * activations must hold B x T), the same number of calls on every rank (the idle ones last);
 * inputs/targets hold B x T. doc (the model keeps segments apart: attn_mask = document) and a
 * dataset that records segments (dataset_has_segments): forward gets the rows' segment starts
 * (dataset_read_starts), else NULL.
 * Collective (sums over d's ranks);
 * *samples (may be NULL) = the samples evaluated. NaN when no target counted. A long one says
 * how far it is, every TSR_PROGRESS_S seconds on rank 0 ("eval: NAME: 24/64 batches (37%), ...";
 * progress.h). */
double data_mean_loss(const tsr_dataset *ds, const char *name, int T, int B, int64_t limit,
                      const tsr_dist *d, data_forward_fn forward, void *model, int32_t *inputs,
                      int32_t *targets, int doc, uint64_t *samples);

#endif
