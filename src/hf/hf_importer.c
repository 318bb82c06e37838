/* hf_importer.c — the checkpointing_importer over hf_import_* and the PEFT reader, and the
 * ckpt_model_importer over hf_model_read and its kin (hf_importer.h) */
#include "hf/hf_importer.h"

#include "hf/hf.h"

static int hf_open(void **h, const char *dir, const tsr_model *m) {
    hf_import *x = NULL;
    int rc = hf_import_open(&x, dir, m);
    *h = x;
    return rc;
}
static int hf_read(void *h, const tsr_model *m, size_t lo, size_t hi, float *dst,
                   uint64_t *bytes) {
    return hf_import_read(h, m, lo, hi, dst, bytes);
}
static void hf_close(void *h) { hf_import_close(h); }

const checkpointing_importer hf_checkpointing_importer = {hf_is_dir, hf_open, hf_read, hf_close,
                                                          hf_is_peft_dir, hf_read_adapter};

const ckpt_model_importer hf_model_importer = {hf_is_dir, hf_model_read, hf_config_alone,
                                               hf_is_peft_dir, hf_peft_model_load};
