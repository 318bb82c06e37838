/* fuzz_safetensors.c — the safetensors reader (src/hf/safetensors.c), as `tessera ckpt import`
 * uses it: open and check the header, then read each float tensor (up to 4 MB each). */
#include <stdlib.h>

#include "common.h"
#include "fuzz_common.h"
#include "hf/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write("model.safetensors", data, size);
    st_file f;
    if (st_open(&f, path) != 0) return 0;
    for (int i = 0; i < f.n; i++) {
        const st_entry *e = &f.t[i];
        if (st_find(&f, e->name) == NULL) abort(); /* every entry is found by its name */
        if (e->end - e->begin > f.file_size) abort(); /* the checks let through a tensor beyond the file */
        if (e->numel > (1u << 20)) continue;
        float *dst = malloc(e->numel ? e->numel * sizeof *dst : 1);
        st_read_f32(&f, e, dst);
        free(dst);
    }
    for (int i = 0; i < f.n_meta; i++)
        if (st_meta(&f, f.meta[i].key) == NULL) abort();
    st_close(&f);
    return 0;
}
