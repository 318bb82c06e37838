/* model_muon.c — the Muon matrices of a model (model_muon.h). */
#include "model/model_muon.h"

#include <math.h>

/* The hidden matrices, in tensor id (= flat) order. */
static const tsr_param_id muon_ids[] = {TSR_P_QKVW,    TSR_P_ATTPROJW, TSR_P_FCW,
                                        TSR_P_FCPROJW, TSR_P_ROUTERW,  TSR_P_EXPW1,
                                        TSR_P_EXPW2,   TSR_P_SHW1,     TSR_P_SHW2};

/* One slice of tensor id is (rows, cols) from its shape's last two dimensions; its row blocks
 * (the projections stored fused) into split: q, k, v of qkvw; gate, up of SwiGLU's fcw, expw1,
 * shw1; else the slice itself. Returns the number of blocks. */
static int row_split(const tsr_model *m, int id, int *rows, int *cols, int split[3]) {
    const tsr_param_info *p = &m->params_info[id];
    *rows = (int)p->shape[p->ndim - 2];
    *cols = (int)p->shape[p->ndim - 1];
    if (id == TSR_P_QKVW) {
        split[0] = m->NH * m->hs, split[1] = split[2] = m->KVH * m->hs;
        return 3;
    }
    int halves = id == TSR_P_EXPW1 || id == TSR_P_SHW1 ||
                 (id == TSR_P_FCW && m->cfg.mlp == TSR_MLP_SWIGLU);
    split[0] = split[1] = halves ? *rows / 2 : *rows;
    return halves ? 2 : 1;
}

static float update_scale(const tsr_optim_config *o, int rows, int cols) {
    double big = rows > cols ? rows : cols;
    if (o->muon.scale == TSR_MUON_SCALE_RMS) return (float)(o->muon.rms * sqrt(big));
    return (float)sqrt(rows > cols ? (double)rows / cols : 1.0);
}

int model_muon_matrices(const tsr_model *m, const tsr_optim_config *o, muon_matrix *out) {
    int n = 0;
    for (size_t k = 0; k < sizeof muon_ids / sizeof *muon_ids; k++) {
        const tsr_param_info *p = &m->params_info[muon_ids[k]];
        if (!p->numel || p->ep) continue;
        int rows, cols, split[3];
        int nb = row_split(m, muon_ids[k], &rows, &cols, split);
        size_t slices = p->numel / ((size_t)rows * (size_t)cols), at = p->offset;
        for (size_t s = 0; s < slices; s++)
            for (int b = 0; b < nb; b++) {
                if (out) out[n] = (muon_matrix){muon_ids[k], at, split[b], cols,
                                                update_scale(o, split[b], cols), 0};
                at += (size_t)split[b] * (size_t)cols;
                n++;
            }
    }
    return n;
}

int model_muon_tensor(int id) {
    for (size_t k = 0; k < sizeof muon_ids / sizeof *muon_ids; k++)
        if ((int)muon_ids[k] == id) return 1;
    return 0;
}

double muon_lr(const tsr_optim_config *o, double lr) {
    return o->muon.lr > 0 ? lr * (o->muon.lr / o->lr) : lr;
}
