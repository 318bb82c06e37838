/* gpu_train_bias.c — auxiliary-loss-free balancing on the CUDA trainer (gpu_train_int.h; docs/cuda.md
 * "Multi-head latent attention and DeepSeek's router"): the router's correction bias (routercorr)
 * copied to the host, moved by the CPU's rule (model_moe_bias_step) on the step's loads, which the
 * trainer holds on the host already (c->moe, summed over the ranks), and copied back into the fp32
 * master weights and the bf16 copy the router reads. ddp: the whole bias in the model's flat
 * weights. zero1 / zero3 / hsdp: this rank's pieces of it in the device shard (every replica of a
 * piece moved alike, as the CPU's sharded trainer moves its shard), then the shard's refresh
 * (gpu_shard_refresh: zero1 gathers the units holding the bias again). E numbers a MoE layer: no
 * kernel of its own. */
#include <stdlib.h>

#include "common.h"
#include "gpu/gpu_train_int.h"

/* the bias's elements [flat, flat + n) of the flat layout, at w (fp32, device) and wbf (its bf16
 * copy), moved by the host's rule */
static void bias_range(const gpu_train_ctx *c, size_t flat, float *w, tsr_bf16 *wbf, size_t n,
                       tcu_stream s) {
    const size_t bytes = n * sizeof(float);
    float *h = tsr_malloc(bytes);
    tcu_memcpy_d2h(h, w, bytes, s);
    model_moe_bias_step(c->model, c->moe, flat, h, n);
    tcu_memcpy_h2d(w, h, bytes, s);
    tcu_f32_to_bf16(wbf, w, n, s);
    tcu_sync(s); /* (h is freed next) */
    free(h);
}

/* zero1 / zero3 / hsdp: the pieces of the bias this rank's shard holds */
static void shard_bias(gpu_train_ctx *c, gpu_shard *sh) {
    const tsr_fsdp *f = sh->f;
    const tsr_param_info *q = &c->model->params_info[TSR_P_ROUTERCORR];
    for (int k = 0; k < f->n_pieces[f->grank]; k++) {
        const fsdp_piece *p = &f->pieces[f->grank][k];
        if (p->id == TSR_P_ROUTERCORR)
            bias_range(c, p->flat, sh->params + sh->piece_at[k], sh->wbf + sh->piece_at[k],
                       p->len, sh->s);
    }
    gpu_shard_refresh(sh, q->offset, q->numel);
}

void gtrain_moe_bias(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    const tsr_param_info *q = &c->model->params_info[TSR_P_ROUTERCORR];
    /* (LoRA: the bias stays frozen with the base, as on the CPU) */
    if (!q->numel || !c->moe || gt->lora_on || c->model->cfg.moe_bias_update_rate == 0.0) return;
    if (gt->sharded) shard_bias(c, &gt->sh);
    else if (gt->g.params)
        bias_range(c, q->offset, gt->g.params + q->offset, gt->g.wbf + q->offset, q->numel, gt->s);
}
