/* hf_importer.h — --init-from a Hugging Face directory, as the trainer's checkpointing takes it.
 *
 * The trainer (src/train, a layer below) reads weights-only sources through a
 * checkpointing_importer it is handed (checkpointing_use_importer); this is the one for Hugging
 * Face directories and PEFT adapters (docs/hf.md), used by tessera-train and the reference test's
 * ref_dump alike. */
#ifndef TSR_HF_IMPORTER_H
#define TSR_HF_IMPORTER_H

#include "model/model_importer.h"

extern const checkpointing_importer hf_checkpointing_importer;

#endif
