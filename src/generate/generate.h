/* generate.h — `tessera generate`: text from a checkpoint, one sequence, with a KV cache
 * (docs/generate.md). */
#ifndef TSR_GENERATE_H
#define TSR_GENERATE_H

#include <stddef.h>

#include "config/config.h"
#include "model/model.h"

/* argv[0] is "generate"; returns the exit status: 0, 1 (usage), 2 (the checkpoint or tokenizer
 * cannot be read). */
int cmd_generate(int argc, char **argv);

/* The checkpoint's config and weights (ckpt_model_load; either build: the NO_MPI=1 one reads
 * through serial HDF5). */
int gen_load_model(const char *path, const char *const *sets, int n_sets, tsr_config *cfg,
                   tsr_model *m, char *resolved, size_t cap);

#endif
