/* hc_gpu_kernels.h — the health checker's few CUDA kernels (hc_gpu_kernels.cu), callable from C.
 * Each launcher enqueues on `s` and returns cudaGetLastError() (the launch's own error).
 * Counters are unsigned long long on the device, accumulated with atomicAdd (zero them first). */
#ifndef TSR_HC_GPU_KERNELS_H
#define TSR_HC_GPU_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the burn's element types */
typedef enum { HCK_F32 = 0, HCK_BF16, HCK_E4M3 } hck_type;
/* dst (n) = src (n) converted to t: exact for |src| <= 127 in fp32 and bf16, for |src| <= 16 in
 * E4M3 (3 mantissa bits: every integer up to 16; 17 is not). */
cudaError_t hck_widen_i8(const signed char *src, void *dst, size_t n, hck_type t, cudaStream_t s);
/* *bad += #{i < n : !(c[i] == r[i])}: the burn's compare with the reference (NaN counts). */
cudaError_t hck_count_diff(const float *c, const float *r, size_t n, unsigned long long *bad,
                           cudaStream_t s);
/* c[i] += 1: the corrupt_gemm fault. */
cudaError_t hck_add_one(float *c, size_t i, cudaStream_t s);
/* a[i] = i mod 1021 (exact in fp32): the copy's source. */
cudaError_t hck_fill_pattern(float *a, size_t n, cudaStream_t s);
/* b = a, 16 bytes per thread and step; n a multiple of 4, a and b 16-byte aligned. */
cudaError_t hck_copy(const float *a, float *b, size_t n, cudaStream_t s);
/* *bad += #{i < n : b[i] != i mod 1021}. */
cudaError_t hck_check_pattern(const float *b, size_t n, unsigned long long *bad, cudaStream_t s);
/* x[i] = (rank + i mod 7) mod 5: an all-reduce input whose sums are small exact integers. */
cudaError_t hck_fill_allreduce(float *x, size_t n, int rank, cudaStream_t s);
/* *bad += #{i < n : x[i] != want[i mod 7]}, want[k] = sum over ranks r of (r + k) mod 5. */
cudaError_t hck_check_allreduce(const float *x, size_t n, const float want[7], unsigned long long *bad,
                                cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
