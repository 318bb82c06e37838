/* ckpt_model.h — a trained model from a checkpoint, in one process (no MPI): what `tessera eval`,
 * `tessera generate` and `tessera ckpt export` start from (both builds: HDF5's default driver). */
#ifndef TSR_CKPT_MODEL_H
#define TSR_CKPT_MODEL_H

#include <stddef.h>

#include "config/config.h"
#include "model/model.h"
#include "model/model_lora.h"

/* A model read from elsewhere than a checkpoint (a Hugging Face directory: src/hf's
 * hf_model_importer, hf/hf_importer.h), given to ckpt_model_load by its caller, a layer above
 * (docs/architecture.md "Hand-overs"): is_source(path) says whether path is one; config builds
 * the config of its model alone (no recipe; the "key=value" overrides in sets applied); load
 * fills m->params whole (0, or an exit code after reporting). */
typedef struct ckpt_model_importer {
    int (*is_source)(const char *path);
    int (*load)(const char *path, tsr_model *m);
    int (*config)(const char *path, const char *const *sets, int n_sets, tsr_config *cfg);
    /* a PEFT adapter directory: is_adapter(path), and the whole model (base + adapters merged) */
    int (*is_adapter)(const char *path);
    int (*adapter)(const char *path, const char *const *sets, int n_sets, int T, tsr_config *cfg,
                   tsr_model *m);
} ckpt_model_importer;

/* Opens `path` (a checkpoint file, a run directory or its `latest`: ckpt_resolve_path; or a
 * directory the importer imp reads, a Hugging Face one: its config.json makes the config; imp
 * NULL: checkpoints only), reads
 * its effective config into cfg (with the "key=value" overrides in sets applied after it, e.g.
 * threads), builds the model for sequence length T (0 = the config's seq_len) on the CPU ops and
 * reads every model/ tensor, each checked against its shape and its crc32c attribute. A LoRA
 * checkpoint (lora.rank > 0; docs/lora.md) has no model/ tensors: its base is read from
 * lora.base (a checkpoint, or a Hugging Face directory through the importer; "" = the seed's
 * weights), checked against lora.base_checksum, and the adapters merged into it (lora_merge). The
 * resolved file is written to resolved (may be NULL). Returns 0, or TSR_EXIT_USAGE (the stored
 * config does not load with the overrides) / TSR_EXIT_DATA (file, tensor or checksum), after
 * tsr_error named the file and the fault. On success free the model with model_free. */
int ckpt_model_load(const ckpt_model_importer *imp, const char *path, const char *const *sets,
                    int n_sets, int T, tsr_config *cfg, tsr_model *m, char *resolved, size_t cap);
/* The same without the weights: cfg and m's layout, its parameters allocated but not read (so a
 * LoRA checkpoint's base is not opened: `ckpt export --adapter`). */
int ckpt_model_layout(const ckpt_model_importer *imp, const char *path, const char *const *sets,
                      int n_sets, int T, tsr_config *cfg, tsr_model *m, char *resolved,
                      size_t cap);

/* A LoRA checkpoint's adapters (lora/<t>_A, lora/<t>_B, each checked against its shape and
 * crc32c) into lo: planned for m and cfg's lora keys, its store allocated (lora_free it).
 * 0 or TSR_EXIT_DATA after reporting. */
int ckpt_lora_read(const char *file, const tsr_config *cfg, tsr_model *m, tsr_lora *lo);

/* A checkpoint's stored config text (ckpt_meta.config) -> cfg, with the "key=value" overrides in
 * sets applied after it; path names the checkpoint in errors. 0, TSR_EXIT_USAGE (does not load)
 * or TSR_EXIT_DATA (cannot stage it), after reporting. */
int ckpt_config_from_text(const char *path, const char *text, const char *const *sets, int n_sets,
                          tsr_config *cfg);

#endif
