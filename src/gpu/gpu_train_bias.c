/* gpu_train_bias.c — auxiliary-loss-free balancing on the CUDA trainer (gpu_train_int.h; docs/cuda.md
 * "Multi-head latent attention and DeepSeek's router"): the router's correction bias (routercorr)
 * copied to the host, moved by the CPU's rule (model_moe_bias_step) on the step's loads, which the
 * trainer holds on the host already (c->moe, summed over the ranks), and copied back into the fp32
 * master weights and the bf16 copy the router reads. E numbers a MoE layer: no kernel of its own. */
#include <stdlib.h>

#include "common.h"
#include "gpu/gpu_train_int.h"

void gtrain_moe_bias(gpu_train_ctx *c) {
    struct tsr_gpu_train *gt = c->state;
    const tsr_model *m = c->model;
    const tsr_param_info *q = &m->params_info[TSR_P_ROUTERCORR];
    /* (LoRA: the bias stays frozen with the base, as on the CPU; sharded: refused at load) */
    if (!q->numel || !c->moe || gt->lora_on || gt->sharded || !gt->g.params) return;
    const size_t bytes = q->numel * sizeof(float);
    float *h = tsr_malloc(bytes), *dev = gt->g.params + q->offset;
    tcu_memcpy_d2h(h, dev, bytes, gt->s);
    model_moe_bias_step(m, c->moe, q->offset, h, q->numel);
    tcu_memcpy_h2d(dev, h, bytes, gt->s);
    tcu_f32_to_bf16(gt->g.wbf + q->offset, dev, q->numel, gt->s);
    tcu_sync(gt->s); /* (h is freed next) */
    free(h);
}
