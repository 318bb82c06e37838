/* hf_importer.h — Hugging Face directories as the layers below take them (docs/architecture.md
 * "Hand-overs").
 *
 * The trainer (src/train, a layer below) reads weights-only sources for --init-from through the
 * checkpointing_importer in its trainer_uses; hf_checkpointing_importer is the one for Hugging
 * Face directories and PEFT adapters (docs/hf.md), used by tessera-train and the reference test's
 * ref_dump alike. A checkpoint's model in one process (model/ckpt_model.h: eval, generate, ckpt
 * export and import, a PEFT adapter's base) reads one through hf_model_importer. */
#ifndef TSR_HF_IMPORTER_H
#define TSR_HF_IMPORTER_H

#include "model/ckpt_model.h"
#include "model/model_importer.h"

extern const checkpointing_importer hf_checkpointing_importer;
extern const ckpt_model_importer hf_model_importer;

#endif
