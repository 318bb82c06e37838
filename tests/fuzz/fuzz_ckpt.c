/* fuzz_ckpt.c — the checkpoint reader (checkpoint/, read only) as `tessera eval`, `generate` and
 * `ckpt export` use it: ckpt_model_load opens the HDF5 file, reads and checks its metadata and
 * stored config, builds the model and reads every tensor against its shape and crc32c.
 * HDF5 itself is not instrumented: only tessera's code around it is. Input: an .h5 file. */
#include <stdlib.h>

#include "model/ckpt_model.h"
#include "common.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write("step-00000001.h5", data, size);
    tsr_config *cfg = malloc(sizeof *cfg);
    tsr_model m;
    static const char *const sets[] = {"threads=1"};
    if (ckpt_model_load(NULL, path, sets, 1, 0, cfg, &m, NULL, 0) == 0) model_free(&m);
    free(cfg);
    return 0;
}
