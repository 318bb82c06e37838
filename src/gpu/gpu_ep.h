/* gpu_ep.h — expert parallelism on device = cuda (parallel.expert = EP; docs/moe.md, "On the
 * GPU").
 *
 * The exchange is model_ep.c's, the one the CPU runs: the decoder calls ep_forward/ep_backward
 * with the CUDA backend, so the routed rows are bf16 activations in device memory, and this file
 * gives it the way to move them (tsr_ep_xfer): gpu_comm_alltoallv on a communicator over the EP
 * group (NCCL: grouped ncclSend/ncclRecv), device-to-device copies on the compute stream for the
 * reordering. The experts' store lives on the device here, laid out as the host store
 * (model_ep.h: [expw1 (LM, El, 2FE, C) | expw2 (LM, El, C, FE)], El = E / EP): fp32 master
 * weights and their bf16 copy, fp32 gradients and AdamW moments. The host store (tsr_ep w, m, v)
 * is its mirror for checkpoints (gpu_ep_pull, gpu_ep_push), as the host model is the dense
 * weights'. The experts' gradients are summed over the EDP group (a second communicator), their
 * squared norm over the EP group, and every EDP member runs the same AdamW on them, as on the CPU.
 * Evaluations run through the exchange, as training forwards do (the ranks top up with idle
 * forwards: train/train_state.h); the end-of-run sample, on the host, with every expert gathered
 * there (ep_full).
 */
#ifndef TSR_GPU_EP_H
#define TSR_GPU_EP_H

#include <stddef.h>

#include "cuda_ops.h"
#include "dist/dist.h"
#include "gpu/gpu_comm.h"
#include "model/model.h"
#include "model/model_ep.h"

typedef struct gpu_ep {
    tsr_ep *ep;              /* the host side: groups, the exchange, the store's mirror */
    const tsr_model *m;
    tcu_stream s;            /* the compute stream */
    gpu_comm *group, *edp;   /* the EP group (the exchange), the EDP group (gradient sums) */
    tsr_ep_xfer xfer;
    float *w, *g, *mo, *v;   /* (n) fp32 master weights, gradients, AdamW moments */
    tsr_bf16 *wbf;           /* (n) the bf16 copy the ops read */
    float *acc;              /* (1) sum of squares */
    gpu_comm *dense[2];      /* the dense gradients' communicators (ddp: the world's; zero1,
                              * zero3, hsdp: the shards' and the replicas'), whose collectives run
                              * during the backward: the exchange and the experts' sums are
                              * ordered after what they queued (gpu_comm_after), or NULL */
} gpu_ep;

/* Device bytes of the store for model m at degree EP (weights fp32 + bf16, gradients, AdamW). */
size_t gpu_ep_state_bytes(const tsr_model *m, int EP);
/* Device bytes of the exchange's buffers for microbatches of B x T with balanced routing (each
 * rank receives B T K rows per MoE layer: the received rows, their SwiGLU input and output kept
 * per MLP activation slot, and the staging and backward buffers). More unbalanced routing grows
 * them, up to EP times. */
size_t gpu_ep_exchange_bytes(const tsr_model *m, int EP, int B, int T);
/* Opens the communicators (collective over the world), allocates the store and uploads the host
 * store's weights (moments zero), and sets ep->xfer. 0, or -1 with the reason in why. */
int gpu_ep_init(gpu_ep *x, tsr_ep *ep, const tsr_model *m, const tsr_mesh *mesh, tcu_stream s,
                char *why, size_t n);
/* The decoder's expert tensors of unit u (gpu_model.h experts hook): bf16 weights from the store,
 * fp32 gradients in backward. ctx: the gpu_ep. */
void gpu_ep_unit(void *ctx, int u, int backward, const void **w, float **gr);
void gpu_ep_zero_grads(gpu_ep *x);
/* The gradients summed over the EDP group; the compute stream waits for it. */
void gpu_ep_reduce(gpu_ep *x);
/* Squared norm of the summed gradients, every expert once (summed over the EP group). */
double gpu_ep_sumsq(gpu_ep *x);
void gpu_ep_update(gpu_ep *x, const tsr_optim_config *o, float decay, double lr, float gscale,
                   int step);
/* Host store <- device (weights; and the moments when with_optim) / device <- host store. */
void gpu_ep_pull(gpu_ep *x, int with_optim);
void gpu_ep_push(gpu_ep *x, int with_optim);
/* on = 1: every expert gathered on the host (ep_full, from the device's weights: the end-of-run
 * sample's host model); on = 0: freed. Collective. */
void gpu_ep_full(gpu_ep *x, int on);
/* Frees the store and the exchange's device buffers (before tcu_shutdown), unsets ep->xfer. */
void gpu_ep_free(gpu_ep *x);

#endif
