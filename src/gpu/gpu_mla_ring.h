/* gpu_mla_ring.h — context parallelism's ring blocks (backend.h ring_forward, ring_backward) over
 * heads the ring kernels lack: value heads of var->dv != hs, or a head size without a kernel
 * (cuda_shapes.h), as multi-head latent attention's are (docs/cuda.md "Multi-head latent
 * attention"). Composed of tcu_* ops (no kernel of its own): the block's rows zero-padded to
 * heads of gpu_attn_pad_size (gpu_mla.h), the ring kernels on the copies, the results copied
 * back. gpu_backend.c's ring entries send such blocks here (gpu_attn_padded). */
#ifndef TSR_GPU_MLA_RING_H
#define TSR_GPU_MLA_RING_H

#include "backend.h"

/* backend.h ring_forward's maths on block k (acc, lse fp32; the block's rows bf16) */
void gpu_ring_padded_forward(const tsr_backend *be, float *acc, float *lse,
                             const tsr_ring_block *k, int merge);
/* backend.h ring_backward's: dq (lddq) and dkv (lddkv) fp32 +=; dout, out bf16 */
void gpu_ring_padded_backward(const tsr_backend *be, float *dq, int lddq, float *dkv, int lddkv,
                              const void *dout, const void *out, const float *lse,
                              const tsr_ring_block *k);

#endif
