/* model_importer.h — a weights-only source a model is read from that is not a checkpoint: a
 * Hugging Face directory or a PEFT adapter (docs/hf.md), as the trainer's --init-from takes it
 * (train/checkpointing.h). Declared here, below both the trainer and its implementation
 * (src/hf/hf_importer.c), which the program hands over (trainer_init's trainer_uses.importer). */
#ifndef TSR_MODEL_IMPORTER_H
#define TSR_MODEL_IMPORTER_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "model/model.h"
#include "model/model_lora.h"

/* A weights-only source for --init-from other than a checkpoint: a Hugging Face directory
 * (docs/hf.md). Its reader sits above the trainer (src/hf), so the program hands it over in
 * trainer_init's uses (train/train_state.h trainer_uses.importer; train_main.c); without one every
 * --init-from names a checkpoint.
 * is_source: path is one of its directories; open checks it against the model (h is set, also
 * on failure); read fills the flat range [lo, hi) into dst (dst[i - lo]: hf.h hf_import_read) and
 * adds the bytes read; close takes any h. */
typedef struct checkpointing_importer {
    int (*is_source)(const char *path);
    int (*open)(void **h, const char *dir, const tsr_model *m);
    int (*read)(void *h, const tsr_model *m, size_t lo, size_t hi, float *dst, uint64_t *bytes);
    void (*close)(void *h);
    /* LoRA (docs/lora.md): path is a PEFT adapter directory; read_adapter fills lo's weights
     * from one and names its base (hf.h hf_read_adapter) */
    int (*is_adapter)(const char *path);
    int (*read_adapter)(const char *dir, const tsr_config *cfg, tsr_lora *lo, char *base,
                        size_t cap);
} checkpointing_importer;

#endif
