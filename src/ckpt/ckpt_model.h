/* ckpt_model.h — a trained model from a checkpoint, in one process (no MPI): what `tessera eval`,
 * `tessera generate` and `tessera ckpt export` start from (both builds: HDF5's default driver). */
#ifndef TSR_CKPT_MODEL_H
#define TSR_CKPT_MODEL_H

#include <stddef.h>

#include "config/config.h"
#include "model/model.h"

/* Opens `path` (a checkpoint file, a run directory or its `latest`: ckpt_resolve_path), reads
 * its effective config into cfg (with the "key=value" overrides in sets applied after it, e.g.
 * threads), builds the model for sequence length T (0 = the config's seq_len) on the CPU ops and
 * reads every model/ tensor, each checked against its shape and its crc32c attribute. The
 * resolved file is written to resolved (may be NULL). Returns 0, or TSR_EXIT_USAGE (the stored
 * config does not load with the overrides) / TSR_EXIT_DATA (file, tensor or checksum), after
 * tsr_error named the file and the fault. On success free the model with model_free. */
int ckpt_model_load(const char *path, const char *const *sets, int n_sets, int T, tsr_config *cfg,
                    tsr_model *m, char *resolved, size_t cap);

/* A checkpoint's stored config text (ckpt_meta.config) -> cfg, with the "key=value" overrides in
 * sets applied after it; path names the checkpoint in errors. 0, TSR_EXIT_USAGE (does not load)
 * or TSR_EXIT_DATA (cannot stage it), after reporting. */
int ckpt_config_from_text(const char *path, const char *text, const char *const *sets, int n_sets,
                          tsr_config *cfg);

#endif
