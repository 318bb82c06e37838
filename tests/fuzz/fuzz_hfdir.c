/* fuzz_hfdir.c — a Hugging Face directory as `tessera-train --init-from` reads it (src/hf/hf_import.c
 * and hf_config.c over safetensors.c): config.json checked against the run's model, then
 * model.safetensors or model.safetensors.index.json and the shards it names, every tensor matched,
 * read and converted.
 * Input: config.json FUZZ_SEP model.safetensors [FUZZ_SEP index.json FUZZ_SEP shard 1 FUZZ_SEP
 * shard 2]. With an index part, the weights are model-00001-of-00002.safetensors and
 * model-00002-of-00002.safetensors (parts 4 and 5) and there is no model.safetensors. The run's
 * model is a tiny one of the family config.json names ("qwen3" QK-norm, "qwen2" q/k/v biases,
 * otherwise Llama/Mistral: L 1, d_model 8, 2 heads, 1 key/value head, head 4, MLP 8, vocabulary
 * 16 padded to 24, untied), so the seeds (tests/fuzz/corpus/hfdir, written by hf_fixture.py's
 * formats) import; or, when hf_config_alone accepts config.json (with the weights' headers) and
 * the model is small, the model it states: the seeds of the 2026 families (Gemma 2/3, OLMo 2/3,
 * SmolLM3: hf_fixture.py --fuzz-seeds) import whole, and gpt-oss's and Qwen3-Next's config.json
 * seeds (no weights) start the fuzzer on their keys. An import that succeeds must have read
 * finite values only. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config/config_table.h"
#include "fuzz_common.h"
#include "fuzz_llama.h"
#include "hf/hf.h"
#include "model/model.h"
#include "ops.h"

/* The model config.json states (hf_config_alone: the families of issue 67 too), when it is
 * accepted and small (at most 2^16 parameters); 0 leaves m untouched. */
static int build_from_config(tsr_model *m) {
    static tsr_config c;
    if (hf_config_alone(fuzz_dir(), NULL, 0, &c)) return 0;
    model_init(m, &c.model, 16, &tsr_cpu_ops);
    if (m->n_params > ((size_t)1 << 16)) {
        model_free(m);
        return 0;
    }
    model_alloc_params(m);
    return 1;
}

static void build(tsr_model *m, const fuzz_part *cfg) {
    if (build_from_config(m)) return;
    static tsr_config d;
    fuzz_tiny_llama(&d);
    tsr_model_config c = d.model;
    c.qk_norm = memmem(cfg->p, cfg->n, "\"qwen3\"", 7) != NULL;
    c.qkv_bias = memmem(cfg->p, cfg->n, "\"qwen2\"", 7) != NULL;
    model_init(m, &c, 16, &tsr_cpu_ops);
    model_alloc_params(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part part[5];
    int np = fuzz_split(data, size, part, 5);
    for (int k = np; k < 5; k++) part[k] = (fuzz_part){(const uint8_t *)"", 0};
    fuzz_write("config.json", part[0].p, part[0].n);
    if (np >= 3) {
        fuzz_unlink("model.safetensors");
        fuzz_write("model.safetensors.index.json", part[2].p, part[2].n);
        fuzz_write("model-00001-of-00002.safetensors", part[3].p, part[3].n);
        fuzz_write("model-00002-of-00002.safetensors", part[4].p, part[4].n);
    } else {
        fuzz_unlink("model.safetensors.index.json");
        fuzz_unlink("model-00001-of-00002.safetensors");
        fuzz_unlink("model-00002-of-00002.safetensors");
        fuzz_write("model.safetensors", part[1].p, part[1].n);
    }
    tsr_model m;
    build(&m, &part[0]);
    hf_import *h = NULL;
    uint64_t bytes = 0;
    if (hf_import_open(&h, fuzz_dir(), &m) == 0 && hf_import_read(h, &m, 0, m.n_params, m.params, &bytes) == 0)
        for (size_t i = 0; i < m.n_params; i++)
            if (!isfinite(m.params[i])) abort(); /* the import refuses non-finite values */
    hf_import_close(h);
    model_free(&m);
    return 0;
}
