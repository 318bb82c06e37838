// hc_gpu_kernels.cu — the health checker's kernels (see hc_gpu_kernels.h). All are grid-stride
// loops over a flat index i < n with 256-thread blocks; each counts into one 64-bit device counter
// with one atomicAdd per warp. Precondition checks (alignment, sizes) are the launchers'; every
// launch is on an explicit stream and its error is returned.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "hc_gpu_kernels.h"

namespace {

constexpr int kThreads = 256;

// Enough blocks to fill any current GPU several times over, few enough to keep atomics rare.
unsigned blocks_for(size_t n) {
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

__device__ void warp_add(unsigned long long *bad, unsigned long long v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0 && v) atomicAdd(bad, v);
}

__global__ void widen_kernel(const signed char *src, void *dst, size_t n, hck_type t) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = (float)src[i];
        if (t == HCK_BF16) ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(v);
        else if (t == HCK_E4M3) ((__nv_fp8_e4m3 *)dst)[i] = __nv_fp8_e4m3(v); // satfinite, round to nearest even
        else ((float *)dst)[i] = v;
    }
}

// every thread of every warp reaches warp_add: the loop bound does not depend on the data
__global__ void count_diff_kernel(const float *c, const float *r, size_t n, unsigned long long *bad) {
    unsigned long long k = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        k += !(c[i] == r[i]);
    warp_add(bad, k);
}

__global__ void add_one_kernel(float *c, size_t i) { c[i] += 1.0f; }

__global__ void fill_pattern_kernel(float *a, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        a[i] = (float)(i % 1021);
}

__global__ void copy_kernel(const float4 *a, float4 *b, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x)
        b[i] = a[i];
}

__global__ void check_pattern_kernel(const float *b, size_t n, unsigned long long *bad) {
    unsigned long long k = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        k += !(b[i] == (float)(i % 1021));
    warp_add(bad, k);
}

__global__ void fill_allreduce_kernel(float *x, size_t n, int rank) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = (float)((rank + (int)(i % 7)) % 5);
}

struct want7 {
    float v[7];
};

__global__ void check_allreduce_kernel(const float *x, size_t n, want7 want, unsigned long long *bad) {
    unsigned long long k = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        k += !(x[i] == want.v[i % 7]);
    warp_add(bad, k);
}

}  // namespace

extern "C" cudaError_t hck_widen_i8(const signed char *src, void *dst, size_t n, hck_type t, cudaStream_t s) {
    widen_kernel<<<blocks_for(n), kThreads, 0, s>>>(src, dst, n, t);
    return cudaGetLastError();
}

extern "C" cudaError_t hck_count_diff(const float *c, const float *r, size_t n, unsigned long long *bad,
                                      cudaStream_t s) {
    count_diff_kernel<<<blocks_for(n), kThreads, 0, s>>>(c, r, n, bad);
    return cudaGetLastError();
}

extern "C" cudaError_t hck_add_one(float *c, size_t i, cudaStream_t s) {
    add_one_kernel<<<1, 1, 0, s>>>(c, i);
    return cudaGetLastError();
}

extern "C" cudaError_t hck_fill_pattern(float *a, size_t n, cudaStream_t s) {
    fill_pattern_kernel<<<blocks_for(n), kThreads, 0, s>>>(a, n);
    return cudaGetLastError();
}

extern "C" cudaError_t hck_copy(const float *a, float *b, size_t n, cudaStream_t s) {
    if (n % 4 != 0 || ((uintptr_t)a | (uintptr_t)b) % 16 != 0) return cudaErrorInvalidValue;
    copy_kernel<<<blocks_for(n / 4), kThreads, 0, s>>>((const float4 *)a, (float4 *)b, n / 4);
    return cudaGetLastError();
}

extern "C" cudaError_t hck_check_pattern(const float *b, size_t n, unsigned long long *bad, cudaStream_t s) {
    check_pattern_kernel<<<blocks_for(n), kThreads, 0, s>>>(b, n, bad);
    return cudaGetLastError();
}

extern "C" cudaError_t hck_fill_allreduce(float *x, size_t n, int rank, cudaStream_t s) {
    fill_allreduce_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, n, rank);
    return cudaGetLastError();
}

extern "C" cudaError_t hck_check_allreduce(const float *x, size_t n, const float want[7],
                                           unsigned long long *bad, cudaStream_t s) {
    want7 w;
    for (int k = 0; k < 7; k++) w.v[k] = want[k];
    check_allreduce_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, n, w, bad);
    return cudaGetLastError();
}
