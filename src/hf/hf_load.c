/* hf_load.c — a run's config and a whole model from a Hugging Face directory (hf.h): what
 * tessera-train's --init-from, `tessera eval`, `generate` and `ckpt` start from (docs/hf.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "hf/hf.h"
#include "hf/hf_internal.h"
#include "ops.h"
#include "tokenizer/tokenizer.h"

/* The soft entry of key in f, or NULL. */
static const char *fill_value(const tsr_config_fill *f, const char *key) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->kv[i].key, key)) return f->kv[i].value;
    return NULL;
}

static void fill_soft(tsr_config_fill *f, const char *key, const char *value, const char *from) {
    if (f->n == TSR_FILL_MAX) tsr_die(TSR_EXIT_INTERNAL, "hf_load: raise TSR_FILL_MAX");
    snprintf(f->kv[f->n].key, sizeof f->kv[0].key, "%s", key);
    snprintf(f->kv[f->n].value, sizeof f->kv[0].value, "%s", value);
    snprintf(f->kv[f->n].from, sizeof f->kv[0].from, "%s", from);
    f->kv[f->n++].soft = 1;
}

/* No recipe: the keys a training recipe must give, with values for reading the model. */
static int fill_standalone(tsr_config_fill *f, const char *dir) {
    const char *ctx = fill_value(f, "model.max_seq_len");
    long T = ctx ? atol(ctx) : 0;
    char v[32];
    snprintf(v, sizeof v, "%ld", T > 0 && T < 2048 ? T : 2048);
    fill_soft(f, "seq_len", v, "the model's context, up to 2048");
    fill_soft(f, "max_duration", "1ba", "reading the model only");
    fill_soft(f, "global_batch", "1", "reading the model only");
    fill_soft(f, "micro_batch", "1", "reading the model only");
    fill_soft(f, "optim.lr", "1e-4", "reading the model only");
    if (strlen(dir) >= sizeof f->kv[0].value) {
        tsr_error("%s: the directory's path is longer than %zu bytes", dir, sizeof f->kv[0].value - 1);
        return TSR_EXIT_USAGE;
    }
    fill_soft(f, "data.train", dir, "the model's directory (not read)");
    tokenizer_files tf; /* (a directory tessera exported holds one: docs/hf.md) */
    int has = tokenizer_find_files(dir, &tf) != TOKENIZER_FILES_NONE;
    fill_soft(f, "data.tokenizer", has ? dir : "", "its tokenizer files, if any");
    return 0;
}

int hf_config_load(const char *dir, const char *path, const char *const *sets, int n_sets,
                   int standalone, tsr_config *cfg) {
    tsr_config_fill *f = tsr_malloc(sizeof *f);
    int rc = hf_config_fill(dir, f);
    if (!rc && standalone) rc = fill_standalone(f, dir);
    if (!rc) rc = config_load_filled(cfg, path, sets, n_sets, f);
    if (!rc) { /* config.json against the model's layout: nothing is allocated yet */
        tsr_model lay;
        hf_config hc;
        model_init(&lay, &cfg->model, (int)cfg->seq_len, &tsr_cpu_ops);
        rc = hf_config_check(f->source, &lay, !standalone, &hc); /* (a recipe: a training run) */
        if (!rc) rc = hf_weights_check(dir, &lay); /* and against the weights' headers */
        model_free(&lay); /* (what model_init allocates: the final soft cap's buffer) */
    }
    free(f);
    return rc;
}

int hf_model_read(const char *dir, tsr_model *m) {
    hf_import *h = NULL;
    uint64_t bytes = 0;
    int rc = hf_import_open(&h, dir, m);
    if (!rc) rc = hf_import_read(h, m, 0, m->n_params, m->params, &bytes);
    hf_import_close(h);
    return rc;
}

int hf_config_alone(const char *dir, const char *const *sets, int n_sets, tsr_config *cfg) {
    return hf_config_load(dir, NULL, sets, n_sets, 1, cfg);
}
