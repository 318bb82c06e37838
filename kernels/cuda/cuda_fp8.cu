/* cuda_fp8.cu — the FP8 casts of cuda_ops.h (tcu_amax_bf16, tcu_fp8_quantize, tcu_fp8_dequantize); the GEMM is
 * cuda_matmul.cu's tcu_matmul_fp8, the linear forward over both tcu_fp8_linear.c's. The formats,
 * the rounding and the scale are tcu_fp8.h's, the same functions the emulator runs on the host,
 * so both give the same bits.
 *
 * The casts are plain grid-stride kernels (no tuning: docs/cuda.md "FP8" says why); the amax is a
 * maximum of magnitudes as fp32 bit patterns (non-negative floats order as their bits, a NaN
 * above every number), combined by atomicMax: the maximum does not depend on the order, so the
 * result is deterministic.
 */
#include "cuda_internal.h"
#include "tcu_fp8.h"

#define FP8_THREADS 256

/* *amax_bits = max(*amax_bits, |x[i]| as fp32 bits) over the grid's elements; a warp's maximum
 * by shuffles, one atomicMax per warp */
static __global__ void __launch_bounds__(FP8_THREADS)
    amax_bf16_kernel(unsigned *amax_bits, const bf16 *x, size_t n) {
    unsigned m = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        m = max(m, tcu_fp8_f32_bits(__bfloat162float(x[i])) & 0x7fffffffu);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0 && m) atomicMax(amax_bits, m);
}

/* q[i] = encode(x[i] * scale) (saturating), scale from *amax; thread 0 writes *scale_inv */
static __global__ void __launch_bounds__(FP8_THREADS)
    quantize_kernel(tsr_fp8 *q, float *scale_inv, const bf16 *x, const float *amax, size_t n,
                    tcu_fp8_format fmt) {
    const float a = *amax, scale = tcu_fp8_scale(a, fmt);
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (first == 0) *scale_inv = tcu_fp8_scale_inv(a, fmt);
    for (size_t i = first; i < n; i += (size_t)gridDim.x * blockDim.x)
        q[i] = tcu_fp8_quantize_one(__bfloat162float(x[i]), scale, fmt);
}

/* x[i] = bf16(decode(q[i]) * *scale_inv), to nearest even */
static __global__ void __launch_bounds__(FP8_THREADS)
    dequantize_kernel(bf16 *x, const tsr_fp8 *q, const float *scale_inv, size_t n,
                      tcu_fp8_format fmt) {
    const float sinv = *scale_inv;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16_rn(tcu_fp8_dequantize_one(q[i], sinv, fmt));
}

/* blocks for n elements: at most 32 a multiprocessor (grid-stride beyond) */
static unsigned fp8_blocks(size_t n, const char *what) {
    unsigned blocks = tcu_blocks(n, FP8_THREADS);
    const unsigned cap = (unsigned)tcu_context_get(what)->sm_count * 32u;
    if (cap > 0 && blocks > cap) blocks = cap;
    return blocks ? blocks : 1;
}

void tcu_amax_bf16(float *amax, const tsr_bf16 *x, size_t n, tcu_stream s) {
    const char *what = "tcu_amax_bf16";
    TCU_REQUIRE(amax && (x || n == 0), what, "amax and x must not be NULL");
    TCU_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), (cudaStream_t)s), what);
    if (n == 0) return;
    amax_bf16_kernel<<<fp8_blocks(n, what), FP8_THREADS, 0, (cudaStream_t)s>>>(
        reinterpret_cast<unsigned *>(amax), reinterpret_cast<const bf16 *>(x), n);
    TCU_CHECK_LAUNCH(what);
}

void tcu_fp8_quantize(tsr_fp8 *q, float *scale_inv, const tsr_bf16 *x, const float *amax,
                      size_t n, tcu_fp8_format fmt, tcu_stream s) {
    const char *what = "tcu_fp8_quantize";
    TCU_REQUIRE(q && scale_inv && x && amax, what, "q, scale_inv, x and amax must not be NULL");
    TCU_REQUIRE((unsigned)fmt < (unsigned)TCU_FP8_FORMAT_COUNT, what,
                tcu_msg("unknown FP8 format %d", (int)fmt));
    quantize_kernel<<<fp8_blocks(n, what), FP8_THREADS, 0, (cudaStream_t)s>>>(
        q, scale_inv, reinterpret_cast<const bf16 *>(x), amax, n, fmt);
    TCU_CHECK_LAUNCH(what);
}

void tcu_fp8_dequantize(tsr_bf16 *x, const tsr_fp8 *q, const float *scale_inv, size_t n,
                        tcu_fp8_format fmt, tcu_stream s) {
    const char *what = "tcu_fp8_dequantize";
    TCU_REQUIRE(x && q && scale_inv, what, "x, q and scale_inv must not be NULL");
    TCU_REQUIRE((unsigned)fmt < (unsigned)TCU_FP8_FORMAT_COUNT, what,
                tcu_msg("unknown FP8 format %d", (int)fmt));
    if (n == 0) return;
    dequantize_kernel<<<fp8_blocks(n, what), FP8_THREADS, 0, (cudaStream_t)s>>>(
        reinterpret_cast<bf16 *>(x), q, scale_inv, n, fmt);
    TCU_CHECK_LAUNCH(what);
}
