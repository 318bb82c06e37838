/* model_muon.h — which of a model's weights Muon updates, as matrices (optim.name = "muon";
 * src/train/muon.h has the update, docs/training.md "Muon").
 *
 * Every projection of the hidden layers is a matrix of its own, also where tessera stores several
 * fused: qkvw's q, k and v rows, SwiGLU's gate and up rows (fcw, each expert's expw1, shw1), each
 * expert's down projection, the router, attention's and the MLP's output projections. Each is a
 * contiguous run of rows x cols floats of the flat layout, row-major. The embeddings, the LM head,
 * norms and biases are not (AdamW's). Lives with the model so that the trainer (src/train) and the
 * CUDA path (src/gpu) both plan from it.
 */
#ifndef TSR_MODEL_MUON_H
#define TSR_MODEL_MUON_H

#include <stddef.h>

#include "config/config.h"
#include "model/model.h"

/* the quintic Newton-Schulz coefficients (Keller Jordan's Muon, Moonlight) and the
 * normalisation's epsilon */
#define MUON_NS_A 3.4445f
#define MUON_NS_B (-4.7750f)
#define MUON_NS_C 2.0315f
#define MUON_NS_EPS 1e-7

typedef struct muon_matrix {
    int id;             /* its tensor */
    size_t flat;        /* its first element in the flat layout (rows x cols, row-major) */
    int rows, cols;
    float scale;        /* the update's multiplier (optim.muon.scale) */
    int owner;          /* zero3 / hsdp: the group rank that orthogonalises it (train/muon.h) */
} muon_matrix;

/* Whether tensor id holds Muon matrices (when present in the model). */
int model_muon_tensor(int id);
/* Fills out (when not NULL) with model m's Muon matrices in flat order, each with its scale under
 * optimizer o (rms: o->muon.rms x sqrt(max(rows, cols)); shape: sqrt(max(1, rows / cols))); the
 * expert store's tensors (parallel.expert) are left out. Returns their number. */
int model_muon_matrices(const tsr_model *m, const tsr_optim_config *o, muon_matrix *out);
/* Muon's learning rate at a step whose AdamW rate is lr (optim.lr times the schedule's
 * multiplier): optim.muon.lr (or optim.lr when 0) times the same multiplier. */
double muon_lr(const tsr_optim_config *o, double lr);

#endif
