/* muon_plan.h — which of a model's weights Muon updates, as matrices, and the plan of who
 * orthogonalises which under sharding (optim.name = "muon"; optim/muon.c has the update on the
 * CPU, src/gpu/gpu_muon.h on the device, docs/training.md "Muon").
 *
 * Every projection of the hidden layers is a matrix of its own, also where tessera stores several
 * fused: qkvw's q, k and v rows, SwiGLU's gate and up rows (fcw, each expert's expw1, shw1), each
 * expert's down projection, the router, attention's and the MLP's output projections. Each is a
 * contiguous run of rows x cols floats of the flat layout, row-major (under parallel.expert the
 * experts' are runs of the experts' store, model_ep.h). The embeddings, the LM head, norms and
 * biases are not (AdamW's). The optimizer's, not the model's (the model knows nothing of it): it
 * lives in the optimizer slot's layer, below the CUDA path (src/gpu), so that the host's slot
 * and the device plan from the same code: both backends agree on the matrices, their owners and
 * the bytes of the exchange.
 */
#ifndef TSR_MUON_PLAN_H
#define TSR_MUON_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "model/fsdp.h"
#include "model/model.h"

/* the quintic Newton-Schulz coefficients (Keller Jordan's Muon, Moonlight) and the
 * normalisation's epsilon */
#define MUON_NS_A 3.4445f
#define MUON_NS_B (-4.7750f)
#define MUON_NS_C 2.0315f
#define MUON_NS_EPS 1e-7

typedef struct muon_matrix {
    int id;             /* its tensor */
    size_t flat;        /* its first element in the flat layout (the experts' store: in the
                         * store), rows x cols, row-major */
    int rows, cols;
    float scale;        /* the update's multiplier (optim.muon.scale) */
    int owner;          /* zero3 / hsdp: the group rank that orthogonalises it (muon_plan_shards) */
} muon_matrix;

/* zero3 / hsdp (and zero1 on device = cuda): a run of a group rank's shard inside a matrix */
typedef struct muon_seg {
    int mx;                /* the matrix */
    size_t shard, at, len; /* its offset in the shard (fsdp.h, unpadded), in the matrix; floats */
} muon_seg;

/* A model's Muon matrices and, over a sharding group (muon_plan_shards), each one's owner: the
 * group rank that receives the other ranks' runs of it, orthogonalises it whole and sends each
 * rank its runs of the result back (two all-to-alls a step). Owners are spread by the iteration's
 * cost (rows x cols x min(rows, cols)), largest first, each to the least loaded group rank (the
 * lower on ties): the same on every rank. */
typedef struct muon_plan {
    int n;               /* the matrices of the flat layout, in flat order */
    muon_matrix *mx;
    int n_ep;            /* parallel.expert: the matrices of this rank's experts' store */
    muon_matrix *ep;
    size_t big, sq;      /* floats of the largest matrix and of the largest min(rows, cols)^2:
                          * the iteration's scratch (u, X, the next X; A, A A) */
    /* muon_plan_shards */
    int G, me;           /* the group's size, this rank's place in it (0 before) */
    int *n_segs;         /* (G) */
    muon_seg **segs;     /* (G) each group rank's shard as runs of matrices, in shard order */
    size_t *owned_at;    /* (n) where a matrix `me` owns starts in its owned buffer, else SIZE_MAX */
    size_t owned_n;      /* floats of the matrices `me` owns */
    size_t *sc, *sd, *rc, *rd; /* (G) the exchange's counts and displacements, floats: what `me`
                                * sends each owner (its runs, by owner, in shard order) and
                                * receives from each rank */
    size_t send_n, recv_n;
} muon_plan;

/* The largest per-rank buffers of Muon, in floats, for the memory plan (nothing allocated, no
 * communication): the iteration's (big, sq; muon_plan) and, with an exchange over a group of G,
 * the rank's owned matrices, what it sends and what it receives (of the rank needing the most). */
typedef struct muon_mem {
    size_t big, sq, owned, send, recv;
    size_t whole; /* tensor parallelism: the largest whole matrix (the iteration's big and sq are
                   * the whole model's then) */
} muon_mem;

/* Whether tensor id holds Muon matrices (when present in the model). */
int muon_plan_tensor(int id);
/* The plan of model m's matrices under optimizer o, each with its scale (rms: o->muon.rms x
 * sqrt(max(rows, cols)); shape: sqrt(max(1, rows / cols))); with parallel.expert (m->EP > 1) the
 * experts' store's too (model_ep.h's layout: [expw1 (LM, E/EP, 2FE, C) | expw2 (LM, E/EP, C,
 * FE)]). No owners yet. */
void muon_plan_init(muon_plan *p, const tsr_model *m, const tsr_optim_config *o);
/* The owners over f's group and the runs of every group rank's shard (f->grank's exchange). No
 * communication: the same on every rank. */
void muon_plan_shards(muon_plan *p, const tsr_fsdp *f);
void muon_plan_free(muon_plan *p);
/* The flat-layout matrix holding flat offset x, or -1. */
int muon_plan_matrix_at(const muon_plan *p, size_t x);
/* Copies n floats (the backend's memory: host or device), for muon_plan_owned_runs. */
typedef void (*muon_copy_fn)(void *ctx, float *dst, const float *src, size_t n);
/* After muon_plan_shards, on the owner `me`: group rank x's runs of the matrices `me` owns, copied
 * from x's packed block of the exchange (what x sent: its runs of them, in x's shard order) into
 * their places in owned (to_owned = 1: each owned matrix whole, muon_plan.owned_at), or back
 * (to_owned = 0), by copy. */
void muon_plan_owned_runs(const muon_plan *p, int x, float *owned, float *packed, int to_owned,
                          muon_copy_fn copy, void *ctx);
/* After muon_plan_shards: the bytes one group's ranks send each other per step, both
 * all-to-alls, fp32: 2 x 4 x the sum over matrices of (its elements - its owner's own run). */
uint64_t muon_plan_step_bytes(const muon_plan *p);
/* The memory plan's figures (muon_mem) for model m under o: G = 0 no exchange (ddp, the CPU's
 * zero1), else the exchange over groups of G (zero3, hsdp; zero1 on the device). Zeroes when o is
 * not Muon. */
void muon_plan_mem(const tsr_model *m, const tsr_optim_config *o, int G, muon_mem *mm);
/* Muon's learning rate at a step whose AdamW rate is lr (optim.lr times the schedule's
 * multiplier): optim.muon.lr (or optim.lr when 0) times the same multiplier. */
double muon_lr(const tsr_optim_config *o, double lr);

#endif
