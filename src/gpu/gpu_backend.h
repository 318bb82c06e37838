/* gpu_backend.h — the CUDA backend of kernels/backend.h (gpu_backend.c): bf16 activations and
 * weights over kernels/cuda/cuda_ops.h, ctx = the stream; the decoder runs on it through
 * gpu_model.h. */
#ifndef TSR_GPU_BACKEND_H
#define TSR_GPU_BACKEND_H

#include <stdint.h>

#include "backend.h"
#include "cuda_ops.h"

/* The backend on stream s (NULL: for the decoder's plans and sizes, which run no op). Its
 * matmul_forward_fp8 is NULL (gpu_backend_use_fp8), its matmul_backward_gelu NULL when the
 * environment sets TSR_DGELU_FUSION=0 (docs/cuda.md). */
tsr_backend gpu_backend_table(tcu_stream s);
/* be's matmul_forward_fp8: the FP8 forward (on) or none. Only for a model's own table (the entry
 * finds the model's gathered FP8 weights from be: gpu_model.h tsr_gpu_model.be). */
void gpu_backend_use_fp8(tsr_backend *be, int on);
/* 1 when the FP8 forward takes a linear layer of IC inputs and OC outputs (cuBLASLt's FP8 rule:
 * both multiples of 16); the others stay bf16 */
int gpu_backend_fp8_shape_ok(int64_t IC, int64_t OC);
/* TSR_DECODE_GEMM (issue 66 item 3, a measurement switch: docs/cuda.md "Batched decoding"): 1 sends
 * batched decoding's linear layers, at 8 rows or more and a multiple of 8, through cuBLASLt's GEMM
 * (matmul_forward) instead of the batch-invariant per-row product; 0 (the default) keeps that.
 * Process-wide; set before any decoding. */
void gpu_backend_set_decode_gemm(int on);

#endif
