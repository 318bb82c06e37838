/* layer_kinds.c — the list of the layer kinds (layer_kind.h) and the choice of each layer's:
 * the one place that names every row. A new kind is a row in a file of its own, and a line here
 * (before the rows whose layers it takes: a half's last row serves every layer).
 */
#include <stddef.h>

#include "model/layer_kind.h"

const tsr_layer_kind *const tsr_layer_kinds[] = {
    &kind_root, &kind_block,                          /* the frame (model.c) */
    &kind_mtp,                                        /* multi-token prediction (mtp.c) */
    &kind_deltanet, &kind_mla, &kind_attention,       /* the mixers */
    &kind_moe, &kind_gated, &kind_dense,              /* the MLPs */
    NULL,
};

/* the first row of half h that serves layer l */
static const tsr_layer_kind *chosen(const tsr_model_config *c, tsr_layer_half h, int l) {
    const tsr_layer_kind *last = NULL;
    for (const tsr_layer_kind *const *k = tsr_layer_kinds; *k; k++) {
        if ((*k)->half != h) continue;
        if (!(*k)->serves || (*k)->serves(c, l)) return *k;
        last = *k;
    }
    return last;
}

const tsr_layer_kind *model_mixer(const tsr_model_config *c, int l) {
    return chosen(c, TSR_HALF_MIXER, l);
}

const tsr_layer_kind *model_mlp(const tsr_model_config *c, int l) {
    return chosen(c, TSR_HALF_MLP, l);
}

int model_layer_is(const tsr_model *m, const tsr_layer_kind *k, int l) {
    switch (k->half) {
    case TSR_HALF_ROOT: return 0;
    case TSR_HALF_BLOCK: return 1;
    case TSR_HALF_MIXER: return model_mixer(&m->cfg, l) == k;
    default: return model_mlp(&m->cfg, l) == k;
    }
}

int model_kind_layers(const tsr_model *m, const tsr_layer_kind *k) {
    int n = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) n += model_layer_is(m, k, l);
    return n;
}

/* the row of id in k's tensors, or NULL */
static const tsr_param_row *row_in(const tsr_layer_kind *k, tsr_param_id id) {
    for (int i = 0; i < k->n_params; i++)
        if (k->params[i].id == id) return &k->params[i];
    return NULL;
}

const tsr_param_row *layer_param_row(tsr_param_id id, const tsr_layer_kind **kind) {
    for (const tsr_layer_kind *const *k = tsr_layer_kinds; *k; k++) {
        const tsr_param_row *row = row_in(*k, id);
        if (row) {
            *kind = *k;
            return row;
        }
    }
    *kind = NULL;
    return NULL;
}

const tsr_layer_kind *layer_kind_of(const tsr_model_config *c, tsr_param_id id) {
    const tsr_layer_kind *first = NULL;
    for (const tsr_layer_kind *const *k = tsr_layer_kinds; *k; k++) {
        if (!row_in(*k, id)) continue;
        if (!first) first = *k;
        if (!(*k)->serves) return *k;
        for (int l = 0; l < c->n_layer; l++)
            if ((*k)->serves(c, l)) return *k;
    }
    return first;
}

const tsr_layer_kind *model_param_kind(const tsr_model *m, tsr_param_id id) {
    return m->kind_of[id];
}

const tsr_param_row *model_param_row(const tsr_model *m, tsr_param_id id) {
    return row_in(m->kind_of[id], id);
}

int model_kind_on(const tsr_model *m, const tsr_layer_kind *k) {
    return m->kind_of[k->params[0].id] == k;
}
