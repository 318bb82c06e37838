/* hf_runkeys.h — a config.json read as a run's keys (hf_reader's fill) checked against the run's
 * model: the classes whose check is their fill compared key by key (Qwen3-Next, DeepSeek). */
#ifndef TSR_HF_RUNKEYS_H
#define TSR_HF_RUNKEYS_H

#include <stddef.h>

#include "hf/hf_reader.h"
#include "model/model.h"

/* The run's value of model.* key, in the fill's format ("" when no family fills that key). */
void hf_run_value(const tsr_model *m, const char *key, char *v, size_t cap);
/* Every hard entry of fl but skip's (a key the caller checks itself, or NULL) must be m's: a
 * fault (exit 1) naming the first that is not, with the --set that makes the run fit.
 * model.intermediate_size is not compared when every layer is a MoE layer (no dense MLP). */
void hf_fill_check(hf_reader *c, const tsr_model *m, const tsr_config_fill *fl, const char *skip);

#endif
