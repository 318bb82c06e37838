/* hf_internal.h — what src/hf/'s files share: the tensor table, config.json (the classes' rows:
 * hf_family.h).
 *
 * Dimensions as in model.h: L layers, C d_model, NH heads, KVH key/value heads, hs head size,
 * QD = NH hs, F MLP width, V real vocabulary, Vp padded rows of wte, maxT rows of wpe; MoE: E
 * experts, FE expert width, LM MoE layers, LD = L - LM dense-MLP layers.
 */
#ifndef TSR_HF_INTERNAL_H
#define TSR_HF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* A transformers class: its row (hf_family.h). */
typedef struct hf_family hf_family;

/* One tensor of the HF model and the block of tessera's flat parameter buffer it maps to. */
typedef struct hf_tensor {
    char name[96];        /* full HF name, "transformer.h.3.attn.c_attn.weight" */
    int ndim;             /* 1, 2 or 3 (Qwen3-Next's conv1d (CD, 1, K), gpt-oss's experts) */
    int64_t shape[3];     /* HF shape */
    int present;          /* 0: tessera's model has no such tensor (the biases of a bias-free
                             GPT-2-style model): exported as zeros, imported only if all zero */
    size_t offset, numel; /* the block in m->params (numel = HF numel; wte: the first V rows) */
    int transpose;        /* GPT-2 Conv1D: HF (in, out) = the transpose of tessera's (out, in) */
    int64_t rows, cols;   /* tessera's block shape (out, in) when transpose */
    float add;            /* tessera's value = the HF one + add (Gemma's norms: 1), else 0 */
    /* groups > 0: the HF rows interleave pieces of several tessera blocks (Qwen3-Next's fused
     * projections, hf_qwen3next.c): group g's rows are piece 0's rows [g rows0, (g + 1) rows0)
     * (at piece[0].offset + g rows0 cols in m->params), then piece 1's, ...; offset and numel
     * above are unused then (no transpose, no add) */
    int groups, npieces;
    struct { size_t offset; int64_t rows; } piece[4];
    int64_t experts;      /* > 0: E blocks of (rows, cols), each transposed when transpose, its
                             rows [gate | up] interleaved when interleave (gpt-oss: hf_gptoss.h) */
    int interleave;
    int mxfp4;            /* stored as NAME_blocks + NAME_scales (hf_gptoss.h), read dequantised */
    int copy;             /* a second name of an earlier row's block (DeepSeek's MTP layer's
                             embed_tokens and shared_head.head: the model's own): exported from the
                             block, imported only when equal to that row's tensor, never read in */
} hf_tensor;

/* Contiguous run i of tensor t: *len elements at tessera flat offset *at, from element *hf of the
 * HF tensor; returns the number of runs (1 for a plain tensor) when i is past the last. */
int hf_tensor_runs(const hf_tensor *t, int i, size_t *at, size_t *hf, size_t *len);

/* transformers' router_aux_loss_coef for tessera's model.moe_aux_loss_coef coef (docs/moe.md). */
double hf_aux_coef(const tsr_model *m, double coef);

/* The parsed config.json of an import: its architecture and the choices that change the weights. */
typedef struct hf_config {
    const hf_family *fam; /* the class of its model_type */
    int tied;             /* tie_word_embeddings (default true for GPT-2 and MPT, false for the
                             Llama family, as in transformers) */
    int mxfp4;            /* quantization_config.quant_method = "mxfp4" (gpt-oss's experts) */
    int fp8;              /* quant_method "fp8": F8_E4M3 weights with block scales (DeepSeek's) */
    int64_t fp8_block[2]; /* its weight_block_size (rows, cols) */
} hf_config;

/* Writes config.json for m as class f; bos, eos = token ids or -1 (then left out).
 * 0 or TSR_EXIT_DATA. */
int hf_config_write(const char *path, const tsr_model *m, const hf_family *f,
                    const char *torch_dtype, long bos, long eos);
/* Reads config.json and checks it against the model m of this run: 0, TSR_EXIT_USAGE (a size,
 * the architecture or the GELU differ: both values named, with the --set that fixes it) or
 * TSR_EXIT_DATA (unreadable, not JSON, or a setting tessera cannot represent). notes: also warn
 * of the training choices the run makes otherwise than the model (router_aux_loss_coef): a
 * training run's import says it once (hf_config_load with a recipe); reading the model for
 * eval, generate or ckpt does not, nor do the later checks of the same directory. */
int hf_config_check(const char *path, const tsr_model *m, int notes, hf_config *out);

/* The safetensors headers of the directory dir (model.safetensors or its shards; no tensor data
 * read) against the model m that config.json describes: the layer count, width, vocabulary and MLP
 * width named by their config.json keys, then every tensor's name and shape (hf_import_open's
 * match). Needs m's layout only (model_init, nothing allocated): hf_config_load calls it so that
 * a config.json that lies about its weights is refused before any model memory is taken.
 * 0 or TSR_EXIT_DATA after tsr_error. */
int hf_weights_check(const char *dir, const tsr_model *m);

/* Writes n bytes to path atomically (path.tmp, fsync, rename, fsync of the directory).
 * 0 or TSR_EXIT_DATA after tsr_error. */
int hf_write_file(const char *path, const void *data, size_t n);

#endif
