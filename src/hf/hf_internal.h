/* hf_internal.h — what src/hf/'s files share: the architecture, the tensor table, config.json.
 *
 * Dimensions as in model.h: L layers, C d_model, NH heads, F MLP width, V real vocabulary, Vp
 * padded rows of wte, maxT rows of wpe.
 */
#ifndef TSR_HF_INTERNAL_H
#define TSR_HF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

typedef enum { HF_GPT2 = 0, HF_MPT, HF_ARCH_COUNT } hf_arch;

extern const char *const hf_model_type[HF_ARCH_COUNT];   /* "gpt2", "mpt" */
extern const char *const hf_class_name[HF_ARCH_COUNT];   /* "GPT2LMHeadModel", "MptForCausalLM" */

/* One tensor of the HF model and the block of tessera's flat parameter buffer it maps to. */
typedef struct hf_tensor {
    char name[96];        /* full HF name, "transformer.h.3.attn.c_attn.weight" */
    int ndim;             /* 1 or 2 */
    int64_t shape[2];     /* HF shape */
    int present;          /* 0: tessera's model has no such tensor (the biases of a bias-free
                             GPT-2-style model): exported as zeros, imported only if all zero */
    size_t offset, numel; /* the block in m->params (numel = HF numel; wte: the first V rows) */
    int transpose;        /* GPT-2 Conv1D: HF (in, out) = the transpose of tessera's (out, in) */
    int64_t rows, cols;   /* tessera's block shape (out, in) when transpose */
} hf_tensor;

/* Which architecture m exports to: learned positions -> GPT-2, ALiBi -> MPT, whose transformers
 * class has no biases, exact GELU only and an MLP of 4 d_model. 0, or TSR_EXIT_USAGE with the
 * reason in why. */
int hf_arch_of(const tsr_model *m, hf_arch *a, char *why, size_t cap);
/* The HF tensors of m for architecture a, in tessera's parameter order (malloc'd; *n entries). */
hf_tensor *hf_tensor_table(const tsr_model *m, hf_arch a, int *n);

/* The parsed config.json of an import: its architecture and the choices that change the weights. */
typedef struct hf_config {
    hf_arch arch;
    int tied;             /* tie_word_embeddings (default true) */
} hf_config;

/* Writes config.json for m (architecture a); eot = id of <|endoftext|> or -1. 0 or TSR_EXIT_DATA. */
int hf_config_write(const char *path, const tsr_model *m, hf_arch a, const char *torch_dtype,
                    long eot);
/* Reads config.json and checks it against the model m of this run: 0, TSR_EXIT_USAGE (a size,
 * the architecture or the GELU differ: both values named, with the --set that fixes it) or
 * TSR_EXIT_DATA (unreadable, not JSON, or a setting tessera cannot represent). */
int hf_config_check(const char *path, const tsr_model *m, hf_config *out);

/* Writes n bytes to path atomically (path.tmp, fsync, rename, fsync of the directory).
 * 0 or TSR_EXIT_DATA after tsr_error. */
int hf_write_file(const char *path, const void *data, size_t n);

#endif
