/* fuzz_peft.c — a PEFT LoRA adapter directory as `tessera-train --init-from` reads it (src/hf/hf_peft.c
 * hf_read_adapter over safetensors.c): adapter_config.json checked against the run's LoRA (peft_type,
 * r, lora_alpha, rank_pattern, alpha_pattern, rsLoRA, DoRA, target_modules), then
 * adapter_model.safetensors, every tensor matched by PEFT's name and shape, read and converted.
 * Input: adapter_config.json FUZZ_SEP adapter_model.safetensors. The run's model is fuzz_hfdir's tiny
 * Llama (L 1, d_model 8, 2 heads, 1 key/value head, head 4, MLP 8) with adapters of r 2 and alpha 4
 * on q_proj and v_proj, or on all seven targets when adapter_config.json names down_proj: the seeds
 * (tests/fuzz/corpus/peft, written by hf_export_adapter) load. An adapter that loads must hold
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
#include "model/model_lora.h"
#include "ops.h"

static void build(tsr_model *m, tsr_config *cfg, tsr_lora *lo, const fuzz_part *json) {
    fuzz_tiny_llama(cfg);
    int all = memmem(json->p, json->n, "down_proj", 9) != NULL;
    cfg->lora.rank = 2;
    cfg->lora.alpha = 4;
    snprintf(cfg->lora.targets, sizeof cfg->lora.targets, "%s", all ? "all-linear" : "q,v");
    model_init(m, &cfg->model, 16, &tsr_cpu_ops);
    model_alloc_params(m);
    /* all-linear on this dense SwiGLU model: the seven targets before the hybrid layers' */
    unsigned mask = all ? (1u << TSR_LORA_QKVZ) - 1 : (1u << TSR_LORA_Q) | (1u << TSR_LORA_V);
    lora_init(lo, m, 2, 4.0, 0.0, mask);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part part[2];
    int np = fuzz_split(data, size, part, 2);
    if (np < 2) part[1] = (fuzz_part){(const uint8_t *)"", 0};
    fuzz_write("adapter_config.json", part[0].p, part[0].n);
    fuzz_write("adapter_model.safetensors", part[1].p, part[1].n);
    static tsr_config cfg;
    tsr_model m;
    tsr_lora lo;
    build(&m, &cfg, &lo, &part[0]);
    char base[1024];
    if (hf_read_adapter(fuzz_dir(), &cfg, &lo, base, sizeof base) == 0) {
        for (size_t i = 0; i < lo.n; i++)
            if (!isfinite(lo.w[i])) abort(); /* the reader refuses non-finite values */
        if (!memchr(base, '\0', sizeof base)) abort();
    }
    lora_free(&lo);
    model_free(&m);
    return 0;
}
