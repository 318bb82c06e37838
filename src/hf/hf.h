/* hf.h — Hugging Face interop: export a tessera model as a `transformers` directory, import one.
 *
 * A model with learned positions becomes GPT2LMHeadModel, one with ALiBi MptForCausalLM, one with
 * RoPE + RMSNorm + SwiGLU LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or
 * Qwen3ForCausalLM; the directory holds model.safetensors or its shards model-0000k-of-0000n.
 * safetensors + model.safetensors.index.json (src/hf/safetensors.h), config.json,
 * generation_config.json and the tokenizer's files (GPT-2's vocab.json + merges.txt +
 * tokenizer_config.json, or a tokenizer.json and its tokenizer_config.json). The name mapping, the
 * transposes and the rules are in docs/hf.md. No MPI and no HDF5: builds everywhere.
 */
#ifndef TSR_HF_H
#define TSR_HF_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "hf/safetensors.h"
#include "model/model.h"

typedef struct hf_export_opts {
    st_dtype dtype;        /* ST_F32 (exact) or ST_BF16 (round to nearest even) */
    const char *tokenizer; /* "gpt2", a directory holding a tokenizer (tokenizer_find_files), a
                              tokenizer.json, or "none"; NULL = the config's data.tokenizer */
    const char *source;    /* recorded in the safetensors metadata (the checkpoint file) */
    const char *arch;      /* model_type to write ("llama", "mistral", "qwen2", "qwen3"); NULL:
                              the one the model's features name (hf_map.c) */
    uint64_t max_shard;    /* bytes of tensor data per file; 0: $TSR_HF_MAX_SHARD, else 5e9 */
} hf_export_opts;

#define HF_MAX_SHARD_DEFAULT 5000000000ull /* transformers' max_shard_size "5GB" */
/* bytes of a config.json: real ones hold a few KB (a classifier's id2label map some hundreds) */
#define HF_CONFIG_MAX ((size_t)4 << 20)

/* Writes out_dir/model.safetensors (or its shards and index), out_dir/config.json,
 * generation_config.json and the tokenizer files for the model m (its config cfg). Prints what it
 * wrote to stdout. Returns 0, TSR_EXIT_USAGE (the model has no transformers equivalent, e.g. ALiBi
 * with biases; an unknown arch or TSR_HF_MAX_SHARD; a tokenizer larger than the vocabulary) or
 * TSR_EXIT_DATA (I/O, tokenizer files) after tsr_error. Local. */
int hf_export(const tsr_model *m, const tsr_config *cfg, const char *out_dir,
              const hf_export_opts *o);
/* Whether `tessera ckpt export --format hf` finds a transformers class for m (the one
 * model.hf_model_type names, else the one its features name: the export's own choice, hf_map.c):
 * 0, or TSR_EXIT_USAGE with the export's reason in why. tessera-train says it at start
 * (docs/hf.md "Export"), so that a run learns it before it trains, not at its export. */
int hf_exportable(const tsr_model *m, char *why, size_t cap);
/* The options alone (arch, the shard limit): 0, or TSR_EXIT_USAGE after tsr_error. hf_export checks
 * them too; a caller checks them first to refuse a typo before reading a large checkpoint. */
int hf_export_check_opts(const hf_export_opts *o);

/* A LoRA checkpoint's adapters lo (ckpt_model.h ckpt_lora_read) of the Llama-family model m as a
 * PEFT directory (docs/lora.md): out_dir/adapter_model.safetensors, tensors
 * base_model.model.model.layers.<l>.<self_attn|mlp>.<q_proj..down_proj>.lora_<A|B>.weight at
 * (r, in) and (out, r) in o->dtype, and adapter_config.json (r, lora_alpha, lora_dropout,
 * target_modules, base_model_name_or_path = lora.base). Qwen3-Next (a hybrid): linear_attn.
 * <in_proj_qkvz|in_proj_ba|out_proj> on the linear layers, B's rows in HF's per-head order, and
 * a gated q_proj holding q's and attn_gate's adapters (rank 2 r with rank_pattern / alpha_pattern
 * when both: docs/lora.md "PEFT and the hybrid"). 0, TSR_EXIT_USAGE (not a Llama-family model)
 * or TSR_EXIT_DATA after tsr_error. Local. */
int hf_export_adapter(const tsr_model *m, const tsr_config *cfg, const struct tsr_lora *lo,
                      const char *out_dir, const hf_export_opts *o);

/* Is path a PEFT adapter directory (one holding adapter_config.json)? */
int hf_is_peft_dir(const char *path);
/* A PEFT LoRA directory into lo's weights (lo planned and allocated for the run's model):
 * adapter_config.json must agree with cfg's lora keys (r, lora_alpha, the target modules; no
 * rsLoRA, no DoRA), adapter_model.safetensors hold exactly the run's tensors at their shapes
 * (F32, BF16 or F16); a gated q_proj of rank 2 r (the export's) or r (PEFT's own: q and attn_gate
 * share its A), entries the run cannot hold refused (TSR_EXIT_USAGE). base gets base_model_name_or_path ("" when absent). 0, TSR_EXIT_USAGE (the
 * adapter's settings differ from the run's: both named) or TSR_EXIT_DATA after tsr_error. */
int hf_read_adapter(const char *dir, const tsr_config *cfg, struct tsr_lora *lo, char *base,
                    size_t cap);

/* A PEFT adapter directory as a whole model (tessera eval, generate, ckpt export --merge): its
 * base (--set lora.base=PATH among sets, else base_model_name_or_path: a checkpoint, run directory
 * or Hugging Face directory) read with sets (but the lora.* ones) through ckpt_model_load, then
 * the adapters read (hf_read_adapter) and merged in. cfg is the base's, with the adapter's lora
 * keys. 0 or an exit status after tsr_error; on failure m holds nothing. */
int hf_peft_model_load(const char *dir, const char *const *sets, int n_sets, int T,
                       tsr_config *cfg, tsr_model *m);

/* Is path a Hugging Face directory (a directory holding model.safetensors,
 * model.safetensors.index.json or config.json)? */
int hf_is_dir(const char *path);

/* config.json of the Hugging Face directory dir as a run's model.* keys (docs/hf.md "Import":
 * every key the weights fix, and the model's context as a soft entry), for config_load_filled.
 * 0 or TSR_EXIT_DATA (unreadable, not JSON, another model_type) after tsr_error. */
int hf_config_fill(const char *dir, tsr_config_fill *f);
/* The run's config for the model in the Hugging Face directory dir: config_load_filled with
 * hf_config_fill's entries (the recipe path, NULL for none, and sets), then config.json checked
 * against the resulting model's layout (nothing allocated), so that every fault is reported before
 * the weights are. standalone (no recipe: tessera eval, generate, ckpt on the directory): the
 * training keys a recipe must give are filled for reading the model (seq_len = the model's
 * context up to 2048, data.tokenizer = dir when it holds a tokenizer.json). 0, TSR_EXIT_USAGE or
 * TSR_EXIT_DATA after tsr_error. */
int hf_config_load(const char *dir, const char *path, const char *const *sets, int n_sets,
                   int standalone, tsr_config *cfg);
/* Every weight of the allocated model m (its config hf_config_load's) from dir, on this process.
 * 0 or an exit status after tsr_error. */
int hf_model_read(const char *dir, tsr_model *m);
/* hf_config_load standing alone (no recipe, sets applied): `tessera eval`, `generate` and `ckpt`
 * on a Hugging Face directory (ckpt_model.h's importer). */
int hf_config_alone(const char *dir, const char *const *sets, int n_sets, tsr_config *cfg);

/* Import, in two phases so that a parallel caller can mute all ranks but one around the first:
 *   hf_import_open  reads config.json and the safetensors header and checks them against m's
 *                   config (every rank gets the same answer): 0, TSR_EXIT_USAGE (config.json
 *                   describes another model than the run's: both values named) or TSR_EXIT_DATA
 *                   (missing or malformed files, a tensor missing or of the wrong shape);
 *   hf_import_read  fills the range [lo, hi) of m's flat buffer (this rank's part) into dst
 *                   (dst[i - lo] = flat element i: m->params + lo, or a part buffer of a sharded
 *                   run) from the tensors that intersect it, padded vocabulary rows with 0; adds
 *                   the bytes read to *bytes. 0 or TSR_EXIT_DATA (I/O, a non-finite value).
 * Always call hf_import_close (also after a failed open; h may be NULL). */
typedef struct hf_import hf_import;
int hf_import_open(hf_import **h, const char *dir, const tsr_model *m);
int hf_import_read(hf_import *h, const tsr_model *m, size_t lo, size_t hi, float *dst,
                   uint64_t *bytes);
void hf_import_close(hf_import *h);

#endif
