/* gpu_mtp.c — multi-token prediction on device = "cuda" (gpu_train_int.h; docs/cuda.md
 * "Multi-token prediction"; docs/models.md "Multi-token prediction"): src/model/mtp.c's modules,
 * run by the one decoder on the CUDA backend over the device model's units (unit 0 the root with
 * the modules' frame tensors, unit L + 1 + d depth d's layer: its rows of mtp_layer_w and
 * mtp_layer_n in the flat buffers). Their activations and the frame's buffers are on the device,
 * their loss sums on the host model (model_mtp_loss_sum, read by the trainer as on the CPU). No
 * kernel of its own: the frame is the backend's embedding, RMSNorm, row copies and matmul. */
#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu_train_int.h"
#include "model/mtp.h"

void gtrain_mtp_begin(gpu_train_ctx *c) { model_mtp_reset(c->model); }

void gtrain_mtp_pass(gpu_train_ctx *c, const int32_t *in, const int32_t *tg, float scale,
                     void (*ready)(void *ctx, int unit), void *ctx) {
    struct tsr_gpu_train *gt = c->state;
    tsr_model *m = c->model;
    if (!m->D) return;
    const tsr_decoder d = gpu_model_decoder(&gt->g);
    gt->g.pp_dy = mtp_train(m, &d, in, tg, c->micro, c->T, scale);
    for (int u = m->L + 1; ready && u <= m->L + m->D; u++) ready(ctx, u); /* (complete now) */
}

void gtrain_mtp_free(gpu_train_ctx *c) {
    if (c->model) mtp_release(c->model);
}
