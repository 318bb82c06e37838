/* generate_load.c — the checkpoint's model for `tessera generate`, in either build (generate.h).
 * Checkpoints are HDF5 files; the NO_MPI=1 build has no HDF5 (Makefile: checkpoint/ but its pure
 * parts is left out), so there the command exists and says which build it needs. */
#include "generate/generate.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#ifndef TSR_NO_MPI
#include "../checkpoint/ckpt_model.h"
#endif

int gen_load_model(const char *path, const char *const *sets, int n_sets, tsr_config *cfg,
                   tsr_model *m, char *resolved, size_t cap) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        tsr_error("generate: --ckpt %s: %s (give a step-NNNNNNNN.h5 file, a run directory or its "
                  "`latest`)", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
#ifndef TSR_NO_MPI
    return ckpt_model_load(path, sets, n_sets, 0, cfg, m, resolved, cap);
#else
    (void)sets, (void)n_sets, (void)cfg, (void)m, (void)resolved, (void)cap;
    tsr_error("generate: reading the checkpoint %s needs the HDF5 build of tessera; this one was "
              "built with NO_MPI=1 (no MPI, no HDF5): build with `make` (MPI + HDF5)", path);
    return TSR_EXIT_USAGE;
#endif
}
