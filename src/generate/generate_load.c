/* generate_load.c — the checkpoint's model for `tessera generate` (generate.h): both builds read
 * HDF5 checkpoints (the NO_MPI=1 build through serial HDF5). */
#include "generate/generate.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "model/ckpt_model.h"
#include "common.h"
#include "hf/hf_importer.h"

int gen_load_model(const char *path, const char *const *sets, int n_sets, tsr_config *cfg,
                   tsr_model *m, char *resolved, size_t cap) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        tsr_error("generate: --ckpt %s: %s (give a step-NNNNNNNN.h5 file, a run directory or its "
                  "`latest`)", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    return ckpt_model_load(&hf_model_importer, path, sets, n_sets, 0, cfg, m, resolved, cap);
}
