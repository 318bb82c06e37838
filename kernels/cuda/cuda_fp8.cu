/* cuda_fp8.cu — the FP8 casts of cuda_ops.h (tcu_amax_bf16, tcu_fp8_quantize) and the FP8 linear
 * forward over them (tcu_matmul_forward_fp8: amax, casts, then cuBLASLt's FP8 GEMM of
 * cuda_matmul.cu). The formats, the rounding and the scale are tcu_fp8.h's, the same functions
 * the emulator runs on the host, so both give the same bits.
 *
 * The casts are plain grid-stride kernels (no tuning: docs/cuda.md "FP8" says why); the amax is a
 * maximum of magnitudes as fp32 bit patterns (non-negative floats order as their bits, a NaN
 * above every number), combined by atomicMax: the maximum does not depend on the order, so the
 * result is deterministic.
 */
#include <cstdio>
#include <mutex>

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

/* ---- the FP8 linear forward: scratch for the quantised operands ---------------------------- */

/* one process-wide buffer (the ops' one-stream rule, cuda_ops.h): the two amax, the two inverse
 * scales, then the quantised input and weight; grown on demand (the device synchronised first),
 * freed by tcu_shutdown */
static std::mutex fp8_mutex;
static unsigned char *fp8_scratch;
static size_t fp8_scratch_bytes;

static unsigned char *fp8_scratch_get(size_t bytes, const char *what) {
    std::lock_guard<std::mutex> lock(fp8_mutex);
    if (bytes <= fp8_scratch_bytes) return fp8_scratch;
    if (fp8_scratch) {
        TCU_CHECK(cudaDeviceSynchronize(), what);
        tcu_free(fp8_scratch);
    }
    fp8_scratch = static_cast<unsigned char *>(tcu_malloc(bytes, "the FP8 operands' scratch"));
    fp8_scratch_bytes = bytes;
    return fp8_scratch;
}

void tcu_fp8_release(void) {
    std::lock_guard<std::mutex> lock(fp8_mutex);
    tcu_free(fp8_scratch);
    fp8_scratch = nullptr;
    fp8_scratch_bytes = 0;
}

static size_t round256(size_t b) { return (b + 255) / 256 * 256; }

void tcu_matmul_forward_fp8(tsr_bf16 *out, tsr_bf16 *pre_gelu, const tsr_bf16 *inp,
                            const tsr_bf16 *w, const tsr_bf16 *bias, int N, int IC, int OC,
                            tsr_gelu_kind gelu, tcu_stream s) {
    const char *what = "tcu_matmul_forward_fp8";
    TCU_REQUIRE(out && inp && w && N >= 1 && IC >= 1 && OC >= 1, what,
                tcu_msg("out, inp, w non-NULL and N, IC, OC >= 1 (N=%d IC=%d OC=%d)", N, IC, OC));
    TCU_REQUIRE(pre_gelu != out, what, "pre_gelu must not alias out");
    const size_t nx = (size_t)N * IC, nw = (size_t)OC * IC;
    unsigned char *p = fp8_scratch_get(256 + round256(nx) + round256(nw), what);
    float *f = reinterpret_cast<float *>(p); /* amax x, amax w, scale_inv x, scale_inv w */
    tsr_fp8 *qx = p + 256, *qw = qx + round256(nx);
    tcu_amax_bf16(f + 0, inp, nx, s);
    tcu_amax_bf16(f + 1, w, nw, s);
    tcu_fp8_quantize(qx, f + 2, inp, f + 0, nx, TCU_FP8_E4M3, s);
    tcu_fp8_quantize(qw, f + 3, w, f + 1, nw, TCU_FP8_E4M3, s);
    tcu_matmul_fp8(pre_gelu ? pre_gelu : out, qx, f + 2, qw, f + 3, bias, N, IC, OC, s);
    if (pre_gelu) tcu_gelu_forward(out, pre_gelu, (size_t)N * OC, gelu, s);
}
