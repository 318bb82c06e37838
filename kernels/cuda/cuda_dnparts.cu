/* cuda_dnparts.cu — the Gated DeltaNet layer's parts around its core on the GPU (cuda_ops.h
 * tcu_dn_*; docs/deltanet.md "CUDA"): the short causal depthwise convolution with SiLU (its
 * packed-document reset and the history before row 0), the gates beta = sigmoid(b) and
 * g = -exp(A_log) softplus(a + dt_bias), the SiLU gate of the normed output, forward and backward:
 * kernels/cpu/cpu_deltanet_layer.c's maths with bf16 activations and fp32 arithmetic.
 *
 * Plain designs, untuned (no GPU has measured them; docs/cuda.md): one thread per output element
 * for the elementwise outputs and the activation gradients (the convolution's backward recomputes
 * its K pre-activations per input row: K <= 16, HF's K is 4), and one block per parameter
 * (channel or head) for the parameter gradients, each thread summing a fixed stride of rows and
 * the block adding the threads' sums in a fixed tree: deterministic, no atomics. Activation
 * gradients are added with one rounding (bf16 += the fp32 sum); parameter gradients fp32 +=.
 */
#include <cstdint>

#include "cuda_internal.h"

#define DNP_THREADS 256 /* elementwise kernels */
#define DNP_RED 128     /* the parameter gradients' blocks (a power of two) */
#define DNP_MAX_BLOCKS 65536u
#define DNP_KMAX 16

static unsigned dnp_grid(size_t items) {
    const unsigned b = tcu_blocks(items, DNP_THREADS);
    return b < DNP_MAX_BLOCKS ? b : DNP_MAX_BLOCKS;
}

__device__ __forceinline__ float dnp_f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float dnp_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float dnp_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float dnp_silu_grad(float x) {
    const float s = dnp_sigmoid(x);
    return s * (1.0f + x * (1.0f - s));
}
/* *p (bf16) += v, one rounding */
__device__ __forceinline__ void dnp_add(bf16 *p, float v) { *p = __float2bfloat16_rn(dnp_f(*p) + v); }

/* the sum of v over the block (DNP_RED threads) in a fixed tree; every thread gets it */
__device__ float dnp_block_sum(float v, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = DNP_RED / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}

/* ---- the convolution -------------------------------------------------------------------------- */

/* one sequence's view: its rows x (T, CD), hist (K-1, CD) or NULL, its document ids or NULL */
struct dnp_seq {
    const bf16 *x, *hist, *w;
    const int32_t *sq;
    int CD, K;
};

__device__ __forceinline__ dnp_seq dnp_view(const bf16 *x, const bf16 *hist, const bf16 *w,
                                            const int32_t *seq, int b, int T, int CD, int K) {
    const size_t row = (size_t)b * T;
    return dnp_seq{x + row * CD, hist ? hist + (size_t)b * (K - 1) * CD : nullptr, w,
                   seq ? seq + row : nullptr, CD, K};
}

/* a document starts at row u (> 0: row 0 continues the history) */
__device__ __forceinline__ bool dnp_start(const dnp_seq &s, int u) {
    return s.sq && u > 0 && s.sq[u] != s.sq[u - 1];
}

/* the first row of row t's window (rows below 0 are the history's) */
__device__ int dnp_lo(const dnp_seq &s, int t) {
    int lo = t;
    while (lo > t - (s.K - 1) && !dnp_start(s, lo)) lo--;
    return lo;
}

__device__ __forceinline__ float dnp_in(const dnp_seq &s, int r, int c) {
    if (r >= 0) return dnp_f(s.x[(size_t)r * s.CD + c]);
    return s.hist ? dnp_f(s.hist[(size_t)(s.K - 1 + r) * s.CD + c]) : 0.0f;
}

/* the pre-activation at row t, channel c */
__device__ float dnp_pre(const dnp_seq &s, int t, int c) {
    float a = 0.0f;
    for (int r = dnp_lo(s, t); r <= t; r++)
        a += dnp_f(s.w[(size_t)c * s.K + (s.K - 1) - (t - r)]) * dnp_in(s, r, c);
    return a;
}

__global__ void dnp_conv_forward_kernel(bf16 *y, const bf16 *x, const bf16 *hist, const bf16 *w,
                                        const int32_t *seq, int B, int T, int CD, int K) {
    const size_t n = (size_t)B * T * CD, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int c = (int)(i % CD), t = (int)((i / CD) % T), b = (int)(i / CD / T);
        const dnp_seq s = dnp_view(x, hist, w, seq, b, T, CD, K);
        const float p = dnp_pre(s, t, c);
        y[i] = __float2bfloat16_rn(p * dnp_sigmoid(p));
    }
}

/* the input gradient of rows -(K-1) .. T-1 (below 0: the history's, into dhist or dropped): each
 * output row t of the same document whose window holds row r, in t's order */
__global__ void dnp_conv_dx_kernel(bf16 *dx, bf16 *dhist, const bf16 *dy, const bf16 *x,
                                   const bf16 *hist, const bf16 *w, const int32_t *seq, int B,
                                   int T, int CD, int K) {
    const int R = T + K - 1;
    const size_t n = (size_t)B * R * CD, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int c = (int)(i % CD), r = (int)((i / CD) % R) - (K - 1), b = (int)(i / CD / R);
        if (r < 0 && !dhist) continue;
        const dnp_seq s = dnp_view(x, hist, w, seq, b, T, CD, K);
        float sum = 0.0f;
        for (int t = r > 0 ? r : 0; t <= r + K - 1 && t < T; t++) {
            if (t > r && dnp_start(s, t)) break;
            const float d = dnp_f(dy[((size_t)b * T + t) * CD + c]) * dnp_silu_grad(dnp_pre(s, t, c));
            sum += d * dnp_f(w[(size_t)c * K + (K - 1) - (t - r)]);
        }
        if (r >= 0) dnp_add(dx + ((size_t)b * T + r) * CD + c, sum);
        else dnp_add(dhist + ((size_t)b * (K - 1) + (K - 1 + r)) * CD + c, sum);
    }
}

/* dw (CD, K) += : block c sums its channel's rows (thread i: rows i, i + DNP_RED, ...) */
__global__ void dnp_conv_dw_kernel(float *dw, const bf16 *dy, const bf16 *x, const bf16 *hist,
                                   const bf16 *w, const int32_t *seq, int B, int T, int CD, int K) {
    __shared__ float sh[DNP_RED];
    const int c = blockIdx.x;
    float acc[DNP_KMAX];
    for (int j = 0; j < DNP_KMAX; j++) acc[j] = 0.0f;
    for (size_t nrow = threadIdx.x; nrow < (size_t)B * T; nrow += DNP_RED) {
        const int b = (int)(nrow / T), t = (int)(nrow % T);
        const dnp_seq s = dnp_view(x, hist, w, seq, b, T, CD, K);
        const float d = dnp_f(dy[nrow * CD + c]) * dnp_silu_grad(dnp_pre(s, t, c));
        for (int r = dnp_lo(s, t); r <= t; r++) acc[(K - 1) - (t - r)] += d * dnp_in(s, r, c);
    }
    for (int j = 0; j < K; j++) {
        const float v = dnp_block_sum(acc[j], sh);
        if (threadIdx.x == 0) dw[(size_t)c * K + j] += v;
    }
}

void tcu_dn_conv_forward(tsr_bf16 *y, const tsr_bf16 *x, const tsr_bf16 *hist, const tsr_bf16 *w,
                         const int32_t *seq, int B, int T, int CD, int K, tcu_stream s) {
    const char *what = "tcu_dn_conv_forward";
    TCU_REQUIRE(B >= 0 && T >= 0 && CD >= 0 && K >= 1 && K <= DNP_KMAX, what,
                tcu_msg("need B, T, CD >= 0 and 1 <= K <= 16: B=%d T=%d CD=%d K=%d", B, T, CD, K));
    if ((size_t)B * T * CD == 0) return;
    TCU_REQUIRE(y && x && w, what, "y, x and w must be given");
    dnp_conv_forward_kernel<<<dnp_grid((size_t)B * T * CD), DNP_THREADS, 0, (cudaStream_t)s>>>(
        (bf16 *)y, (const bf16 *)x, (const bf16 *)hist, (const bf16 *)w, seq, B, T, CD, K);
    TCU_CHECK_LAUNCH(what);
}

void tcu_dn_conv_backward(tsr_bf16 *dx, tsr_bf16 *dhist, float *dw, const tsr_bf16 *dy,
                          const tsr_bf16 *x, const tsr_bf16 *hist, const tsr_bf16 *w,
                          const int32_t *seq, int B, int T, int CD, int K, tcu_stream s) {
    const char *what = "tcu_dn_conv_backward";
    TCU_REQUIRE(B >= 0 && T >= 0 && CD >= 0 && K >= 1 && K <= DNP_KMAX, what,
                tcu_msg("need B, T, CD >= 0 and 1 <= K <= 16: B=%d T=%d CD=%d K=%d", B, T, CD, K));
    if ((size_t)B * T * CD == 0) return;
    TCU_REQUIRE(dx && dy && x && w, what, "dx, dy, x and w must be given");
    const size_t n = (size_t)B * (T + K - 1) * CD;
    dnp_conv_dx_kernel<<<dnp_grid(n), DNP_THREADS, 0, (cudaStream_t)s>>>(
        (bf16 *)dx, (bf16 *)dhist, (const bf16 *)dy, (const bf16 *)x, (const bf16 *)hist,
        (const bf16 *)w, seq, B, T, CD, K);
    TCU_CHECK_LAUNCH(what);
    if (!dw) return;
    dnp_conv_dw_kernel<<<CD, DNP_RED, 0, (cudaStream_t)s>>>(dw, (const bf16 *)dy, (const bf16 *)x,
                                                           (const bf16 *)hist, (const bf16 *)w,
                                                           seq, B, T, CD, K);
    TCU_CHECK_LAUNCH(what);
}

/* ---- the gates -------------------------------------------------------------------------------- */

__global__ void dnp_gates_forward_kernel(float *beta, float *g, const bf16 *b, const bf16 *a,
                                         const bf16 *A_log, const bf16 *dt_bias, int N, int HV) {
    const size_t n = (size_t)N * HV, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int h = (int)(i % HV);
        beta[i] = dnp_sigmoid(dnp_f(b[i]));
        g[i] = -expf(dnp_f(A_log[h])) * dnp_softplus(dnp_f(a[i]) + dnp_f(dt_bias[h]));
    }
}

/* d beta / d b = s (1 - s); d g / d a = -e^A_log sigmoid(a + dt_bias) (softplus' = sigmoid) */
__global__ void dnp_gates_dx_kernel(bf16 *db, bf16 *da, const float *dbeta, const float *dg,
                                    const bf16 *b, const bf16 *a, const bf16 *A_log,
                                    const bf16 *dt_bias, int N, int HV) {
    const size_t n = (size_t)N * HV, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int h = (int)(i % HV);
        const float s = dnp_sigmoid(dnp_f(b[i])), u = dnp_f(a[i]) + dnp_f(dt_bias[h]);
        dnp_add(db + i, dbeta[i] * s * (1.0f - s));
        dnp_add(da + i, -dg[i] * expf(dnp_f(A_log[h])) * dnp_sigmoid(u));
    }
}

/* block h: dA_log[h] += sum_n dg[n,h] g[n,h] (d g / d A_log = g), ddt_bias[h] += sum_n dg[n,h]
 * (d g / d a) */
__global__ void dnp_gates_dparam_kernel(float *dA_log, float *ddt_bias, const float *dg,
                                        const bf16 *a, const bf16 *A_log, const bf16 *dt_bias,
                                        int N, int HV) {
    __shared__ float sh[DNP_RED];
    const int h = blockIdx.x;
    const float e = expf(dnp_f(A_log[h])), bias = dnp_f(dt_bias[h]);
    float sa = 0.0f, sd = 0.0f;
    for (int nrow = threadIdx.x; nrow < N; nrow += DNP_RED) {
        const size_t i = (size_t)nrow * HV + h;
        const float u = dnp_f(a[i]) + bias;
        sd += -dg[i] * e * dnp_sigmoid(u);
        sa += dg[i] * -e * dnp_softplus(u);
    }
    sa = dnp_block_sum(sa, sh);
    sd = dnp_block_sum(sd, sh);
    if (threadIdx.x == 0 && dA_log) dA_log[h] += sa;
    if (threadIdx.x == 0 && ddt_bias) ddt_bias[h] += sd;
}

void tcu_dn_gates_forward(float *beta, float *g, const tsr_bf16 *b, const tsr_bf16 *a,
                          const tsr_bf16 *A_log, const tsr_bf16 *dt_bias, int N, int HV,
                          tcu_stream s) {
    const char *what = "tcu_dn_gates_forward";
    TCU_REQUIRE(N >= 0 && HV >= 0, what, tcu_msg("need N, HV >= 0: N=%d HV=%d", N, HV));
    if ((size_t)N * HV == 0) return;
    TCU_REQUIRE(beta && g && b && a && A_log && dt_bias, what, "a required pointer is NULL");
    dnp_gates_forward_kernel<<<dnp_grid((size_t)N * HV), DNP_THREADS, 0, (cudaStream_t)s>>>(
        beta, g, (const bf16 *)b, (const bf16 *)a, (const bf16 *)A_log, (const bf16 *)dt_bias, N,
        HV);
    TCU_CHECK_LAUNCH(what);
}

void tcu_dn_gates_backward(tsr_bf16 *db, tsr_bf16 *da, float *dA_log, float *ddt_bias,
                           const float *dbeta, const float *dg, const tsr_bf16 *b,
                           const tsr_bf16 *a, const tsr_bf16 *A_log, const tsr_bf16 *dt_bias,
                           int N, int HV, tcu_stream s) {
    const char *what = "tcu_dn_gates_backward";
    TCU_REQUIRE(N >= 0 && HV >= 0, what, tcu_msg("need N, HV >= 0: N=%d HV=%d", N, HV));
    if ((size_t)N * HV == 0) return;
    TCU_REQUIRE(db && da && dbeta && dg && b && a && A_log && dt_bias, what,
                "a required pointer is NULL");
    dnp_gates_dx_kernel<<<dnp_grid((size_t)N * HV), DNP_THREADS, 0, (cudaStream_t)s>>>(
        (bf16 *)db, (bf16 *)da, dbeta, dg, (const bf16 *)b, (const bf16 *)a, (const bf16 *)A_log,
        (const bf16 *)dt_bias, N, HV);
    TCU_CHECK_LAUNCH(what);
    if (!dA_log && !ddt_bias) return;
    dnp_gates_dparam_kernel<<<HV, DNP_RED, 0, (cudaStream_t)s>>>(
        dA_log, ddt_bias, dg, (const bf16 *)a, (const bf16 *)A_log, (const bf16 *)dt_bias, N, HV);
    TCU_CHECK_LAUNCH(what);
}

/* ---- the output gate: out = x silu(z) --------------------------------------------------------- */

__global__ void dnp_silu_gate_forward_kernel(bf16 *out, const bf16 *x, const bf16 *z, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float zf = dnp_f(z[i]);
        out[i] = __float2bfloat16_rn(dnp_f(x[i]) * zf * dnp_sigmoid(zf));
    }
}

__global__ void dnp_silu_gate_backward_kernel(bf16 *dx, bf16 *dz, const bf16 *dout, const bf16 *x,
                                              const bf16 *z, size_t n) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float zf = dnp_f(z[i]), d = dnp_f(dout[i]);
        dnp_add(dx + i, d * zf * dnp_sigmoid(zf));
        dnp_add(dz + i, d * dnp_f(x[i]) * dnp_silu_grad(zf));
    }
}

void tcu_dn_silu_gate_forward(tsr_bf16 *out, const tsr_bf16 *x, const tsr_bf16 *z, size_t n,
                              tcu_stream s) {
    const char *what = "tcu_dn_silu_gate_forward";
    if (n == 0) return;
    TCU_REQUIRE(out && x && z, what, "a required pointer is NULL");
    dnp_silu_gate_forward_kernel<<<dnp_grid(n), DNP_THREADS, 0, (cudaStream_t)s>>>(
        (bf16 *)out, (const bf16 *)x, (const bf16 *)z, n);
    TCU_CHECK_LAUNCH(what);
}

void tcu_dn_silu_gate_backward(tsr_bf16 *dx, tsr_bf16 *dz, const tsr_bf16 *dout,
                               const tsr_bf16 *x, const tsr_bf16 *z, size_t n, tcu_stream s) {
    const char *what = "tcu_dn_silu_gate_backward";
    if (n == 0) return;
    TCU_REQUIRE(dx && dz && dout && x && z, what, "a required pointer is NULL");
    dnp_silu_gate_backward_kernel<<<dnp_grid(n), DNP_THREADS, 0, (cudaStream_t)s>>>(
        (bf16 *)dx, (bf16 *)dz, (const bf16 *)dout, (const bf16 *)x, (const bf16 *)z, n);
    TCU_CHECK_LAUNCH(what);
}
