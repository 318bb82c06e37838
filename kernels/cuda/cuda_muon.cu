/* cuda_muon.cu — the element-wise steps of Muon around its products (cuda_ops.h tcu_muon_*;
 * src/optim/muon.h has the maths, src/gpu/gpu_train.c the sequence; the products are
 * tcu_matmul_forward and tcu_matmul_backward, bf16 with fp32 accumulation).
 *
 * File-wide conventions: grid-stride loops over a flat size_t index, 256 threads, at most 65536
 * blocks; n == 0 launches nothing; fp32 arithmetic with round-to-nearest intrinsics (no fused
 * multiply-adds), so each element gets the CPU emulator's bits (kernels/cuda_emu/emu_muon.c).
 */
#include <math.h>
#include <stdint.h>

#include "cuda_internal.h"

#define MUON_THREADS 256u
#define MUON_MAX_BLOCKS 65536u

static unsigned muon_grid(size_t n) {
    size_t b = (n + MUON_THREADS - 1) / MUON_THREADS;
    return (unsigned)(b < MUON_MAX_BLOCKS ? b : MUON_MAX_BLOCKS);
}

namespace {

__global__ void muon_momentum_kernel(float *buf, const float *g, float *u, size_t n, float beta,
                                     float gscale, int nesterov) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float gi = __fmul_rn(g[i], gscale);
        float b = __fadd_rn(__fmul_rn(beta, buf[i]), gi);
        buf[i] = b;
        u[i] = nesterov ? __fadd_rn(gi, __fmul_rn(beta, b)) : b;
    }
}

/* x[i, j] of (r, c): u[i, j] (or u[j, i] transposed) times 1 / (sqrt(*sumsq) + eps) */
__global__ void muon_normalize_kernel(bf16 *x, const float *u, const float *sumsq, int rows,
                                      int cols, int transpose, float eps) {
    const size_t n = (size_t)rows * (size_t)cols, stride = (size_t)gridDim.x * blockDim.x;
    const float inv = (float)(1.0 / (sqrt((double)*sumsq) + (double)eps));
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
        x[tcu_muon_at(k, rows, cols, transpose)] = __float2bfloat16_rn(__fmul_rn(u[k], inv));
}

__global__ void axpby_bf16_kernel(bf16 *out, float alpha, const bf16 *x, float beta, const bf16 *y,
                                  size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = __fmul_rn(alpha, __bfloat162float(x[i]));
        if (y) v = __fadd_rn(v, __fmul_rn(beta, __bfloat162float(y[i])));
        out[i] = __float2bfloat16_rn(v);
    }
}

__global__ void muon_apply_kernel(float *p, bf16 *pb, const bf16 *o, int rows, int cols,
                                  int transposed, float decay, float step) {
    const size_t n = (size_t)rows * (size_t)cols, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) {
        float ok = __bfloat162float(o[tcu_muon_at(k, rows, cols, transposed)]);
        float v = __fsub_rn(__fmul_rn(p[k], decay), __fmul_rn(step, ok));
        p[k] = v;
        if (pb) pb[k] = __float2bfloat16_rn(v);
    }
}

} // namespace

void tcu_muon_momentum(float *buf, const float *g, float *u, size_t n, float beta, float gscale,
                       int nesterov, tcu_stream s) {
    const char *what = "tcu_muon_momentum";
    if (n == 0) return;
    TCU_REQUIRE(buf && g && u, what, "buf, g and u must not be NULL");
    muon_momentum_kernel<<<muon_grid(n), MUON_THREADS, 0, s>>>(buf, g, u, n, beta, gscale,
                                                               nesterov);
    TCU_CHECK_LAUNCH(what);
}

void tcu_muon_normalize(tsr_bf16 *x, const float *u, const float *sumsq, int rows, int cols,
                        int transpose, float eps, tcu_stream s) {
    const char *what = "tcu_muon_normalize";
    TCU_REQUIRE(rows > 0 && cols > 0, what,
                tcu_msg("rows = %d, cols = %d must be > 0", rows, cols));
    TCU_REQUIRE(x && u && sumsq, what, "x, u and sumsq must not be NULL");
    const size_t n = (size_t)rows * (size_t)cols;
    muon_normalize_kernel<<<muon_grid(n), MUON_THREADS, 0, s>>>((bf16 *)x, u, sumsq, rows, cols,
                                                                transpose, eps);
    TCU_CHECK_LAUNCH(what);
}

void tcu_axpby_bf16(tsr_bf16 *out, float alpha, const tsr_bf16 *x, float beta, const tsr_bf16 *y,
                    size_t n, tcu_stream s) {
    const char *what = "tcu_axpby_bf16";
    if (n == 0) return;
    TCU_REQUIRE(out && x, what, "out and x must not be NULL");
    axpby_bf16_kernel<<<muon_grid(n), MUON_THREADS, 0, s>>>((bf16 *)out, alpha, (const bf16 *)x,
                                                            beta, (const bf16 *)y, n);
    TCU_CHECK_LAUNCH(what);
}

void tcu_muon_apply(float *p, tsr_bf16 *p_bf16, const tsr_bf16 *o, int rows, int cols,
                    int transposed, float decay, float step, tcu_stream s) {
    const char *what = "tcu_muon_apply";
    TCU_REQUIRE(rows > 0 && cols > 0, what,
                tcu_msg("rows = %d, cols = %d must be > 0", rows, cols));
    TCU_REQUIRE(p && o, what, "p and o must not be NULL");
    const size_t n = (size_t)rows * (size_t)cols;
    muon_apply_kernel<<<muon_grid(n), MUON_THREADS, 0, s>>>(p, (bf16 *)p_bf16, (const bf16 *)o,
                                                            rows, cols, transposed, decay, step);
    TCU_CHECK_LAUNCH(what);
}
