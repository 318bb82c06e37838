/* train_data_check.h — a training dataset against the run's model (src/train/train_data_check.c):
 * the token ids it holds against model.vocab_size, its document end against the document mask's
 * token. train_data.c opens the datasets and calls it for each. */
#ifndef TSR_TRAIN_DATA_CHECK_H
#define TSR_TRAIN_DATA_CHECK_H

#include "train/train_state.h"

/* The dataset ds at path against t's model: its largest token id (dataset_max_token_id) must be
 * below model.vocab_size, whatever its vocabulary (the tokenizer's size: Gemma 3's 262,145 ids
 * for 262,144 rows) says; a larger vocabulary is said in one line (first: data.train or the first
 * stream, once) naming the ids the model cannot produce. With model.attn_mask = "document" and no
 * recorded segments, the document end tessera prep noted (document_end) must be model.eot_token.
 * Returns 0, or TSR_EXIT_USAGE after tsr_error naming both values (docs/training.md). */
int train_data_check_model(const tsr_trainer *t, const tsr_dataset *ds, const char *path, int first);

#endif
