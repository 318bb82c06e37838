/* dataloader_check.h — a training dataset against the run's model (dataloader_check.c): the
 * token ids it holds against model.vocab_size, its document end against the document mask's
 * token. The loader (dataloader.c) opens the datasets and calls it for each. */
#ifndef TSR_DATALOADER_CHECK_H
#define TSR_DATALOADER_CHECK_H

#include "data/dataloader.h"

/* The ids ds holds (at path) against a model of vocab rows: 0 when its largest id
 * (dataset_max_token_id) is below vocab, whatever its vocabulary says (a tokenizer may have ids
 * the model never sees: Gemma 3's 262,145 over 262,144 rows); else TSR_EXIT_USAGE after tsr_error
 * naming both (the trainer and `tessera eval` before they read a sample: an id past the rows would
 * index beyond the embedding). */
int dataloader_check_ids(const tsr_dataset *ds, const char *path, int vocab);
/* The dataset ds at path against the model of the run o reads for (o->cfg's model keys; o->tok
 * names the ids): its largest token id (dataset_max_token_id) must be
 * below model.vocab_size, whatever its vocabulary (the tokenizer's size: Gemma 3's 262,145 ids
 * for 262,144 rows) says; a larger vocabulary is said in one line (first: data.train or the first
 * stream, once) naming the ids the model cannot produce. With model.attn_mask = "document" and no
 * recorded segments, the document end tessera prep noted (document_end) must be model.eot_token.
 * Returns 0, or TSR_EXIT_USAGE after tsr_error naming both values (docs/training.md). */
int dataloader_check_model(const dataloader_opts *o, const tsr_dataset *ds, const char *path,
                           int first);

#endif
