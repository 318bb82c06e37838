/* cuda_shapes.h — the model shapes the CUDA backend's kernels are built for, as one rule that the
 * kernels, the emulator (kernels/cuda_emu) and the config check (src/config/config_checks.c) share:
 * a recipe with device = "cuda" and a shape outside it is refused when the config loads (--plan
 * and --dry-run included, on a node without a GPU), not on a GPU node after the job has queued.
 * Plain C, no CUDA types: every build includes it. */
#ifndef TSR_CUDA_SHAPES_H
#define TSR_CUDA_SHAPES_H

/* the head sizes the fused attention kernels are compiled for (cuda_attention.cu's tile table) */
#define TCU_ATTENTION_HEAD_SIZES "32, 64, 128 or 256"

/* 1 when the attention ops have a kernel for head size hs, else 0 */
static inline int tcu_attention_head_size_ok(int hs) { return hs == 32 || hs == 64 || hs == 128 || hs == 256; }

#endif
