/* cuda_deltanet.cu — the Gated DeltaNet core on the GPU (cuda_ops.h tcu_deltanet_forward;
 * docs/deltanet.md "CUDA"): kernels/cpu/cpu_deltanet.c's chunked (WY/UT) forward, chunk 64, with
 * bf16 inputs and outputs, the state and every accumulation in fp32, the chunk's matrix products
 * on the tensor cores (mma.sync m16n8k16 bf16 -> fp32, cuda_ptx.h).
 *
 * One block per (value head h, sequence b), DN_THREADS threads, the chunks in order. A chunk is
 * the 64 positions t0 .. t0 + 63 (fewer at the end); a document start inside it is handled by
 * masks instead of splitting it (the CPU splits): with d_i the number of document starts at
 * t0 + 1 .. t0 + i, the products between rows i and j keep only d_i == d_j, the entering state
 * reaches only the rows with d_i == 0 (after a reset at t0 itself it is zero), and the leaving
 * state is built from the rows of the last document (the old state decayed only when d = 0 there).
 * With gam the cumulative log-decay from t0, e_ij = exp(gam_i - gam_j) (j <= i, same document):
 *   A   = strictly lower (beta_i k_i.k_j e_ij)              G = Kn Kn^T   (tensor cores)
 *   Tm  = (I + A)^-1                                          forward substitution, fp32, a
 *                                                             thread per column
 *   Vn  = Tm diag(beta) V - [d = 0] Tm diag(beta e^gam) Kn S  (tensor cores, fp32 sum)
 *   out = [d = 0] (Qn e^gam) S + (Qn Kn^T masked e_ij) Vn    (tensor cores)
 *   S   = [d_last = 0] e^gam_last S + (Kn [d = d_last] e^(gam_last - gam))^T Vn
 * Qn, Kn are the L2-normalised rows (fp32 norms of the bf16 inputs; q also times 1/sqrt(dk)),
 * rounded to bf16 once. The products' operands are rounded to bf16 where they are loaded into
 * the mma fragments (Tm, the fp32 state, the masked scores), their sums are fp32: the rounding
 * points the tolerances of tests/gpu/gpu_ops_deltanet.c account for. Deterministic (no atomics;
 * fixed order). Fragments are loaded from shared memory element by element (no ldmatrix): the
 * straightforward form, to be tuned only by what a GPU call measures (docs/cuda.md). */
#include <cstdint>

#include "cuda_internal.h"
#include "cuda_ptx.h"

#define DN_THREADS 256 /* 8 warps */
#define DN_C 64        /* the chunk */
#define DN_EPS 1e-6f   /* the L2 norm's, as HF's l2norm and the CPU core */

struct dn_args {
    bf16 *out;
    float *state_out, *ckpt;
    const bf16 *q, *k, *v;
    const float *g, *beta, *state0;
    const int32_t *seq;
    int T, HK, HV, dk, dv, nchunk;
};

/* the block's shared memory, carved from its dynamic part (dn_smem_bytes: the same sums) */
struct dn_smem {
    float *S;        /* (dk, dv) the state */
    float *F;        /* (64, max(dk, dv)): W, then Vn, then the output, fp32 */
    float *G;        /* (64, 64): K K^T -> A; then (as bf16) Tm diag(beta), Tm diag(beta e^gam) */
    float *Tm;       /* (64, 64): (I + A)^-1; then Q K^T; then (as bf16) the masked scores */
    bf16 *Qn, *Kn;   /* (64, dk) */
    bf16 *Vb, *Vn;   /* (64, dv): the values; the corrected values */
    bf16 *X;         /* (64, dk): -W; then the decayed queries; then the decayed keys */
    float *gam, *bet;
    int *doc;
};

static size_t dn_smem_bytes(int dk, int dv) {
    const size_t C = DN_C, w = (size_t)(dk > dv ? dk : dv);
    return sizeof(float) * ((size_t)dk * dv + C * w + 2 * C * C + 3 * C) +
           sizeof(bf16) * (3 * C * dk + 2 * C * dv);
}

__device__ dn_smem dn_carve(unsigned char *base, int dk, int dv) {
    const int C = DN_C, w = dk > dv ? dk : dv;
    dn_smem m;
    m.S = reinterpret_cast<float *>(base);
    m.F = m.S + dk * dv;
    m.G = m.F + C * w;
    m.Tm = m.G + C * C;
    m.gam = m.Tm + C * C;
    m.bet = m.gam + C;
    m.doc = reinterpret_cast<int *>(m.bet + C);
    m.Qn = reinterpret_cast<bf16 *>(m.doc + C);
    m.Kn = m.Qn + C * dk;
    m.X = m.Kn + C * dk;
    m.Vb = m.X + C * dk;
    m.Vn = m.Vb + C * dv;
    return m;
}

__device__ __forceinline__ float dn_f(float x) { return x; }
__device__ __forceinline__ float dn_f(bf16 x) { return __bfloat162float(x); }

/* two operand elements as one bf16x2 fragment register, lo in the low half */
template <class E> __device__ __forceinline__ uint32_t dn_pack(const E *p, int s) {
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(dn_f(p[0]))) |
           ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(dn_f(p[s]))) << 16);
}

/* an operand in shared memory: element (r, c) at p[r rs + c cs], fp32 or bf16 */
template <class E> struct dn_mat {
    const E *p;
    int rs, cs;
    __device__ const E *at(int r, int c) const { return p + r * rs + c * cs; }
};

/* C (M x N, fp32, row stride ldc) = cs C + A (M x K) B (K x N), cs == 0: C = A B (C not read).
 * The block's warps take the 16 x 8 tiles in turn; K, M multiples of 16, N of 8. No barrier. */
template <class EA, class EB>
__device__ void dn_mma(float *c, int ldc, dn_mat<EA> A, dn_mat<EB> B, int M, int N, int K,
                       float cs) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int nt = N / 8;
    for (int tile = warp; tile < (M / 16) * nt; tile += DN_THREADS / 32) {
        const int r0 = (tile / nt) * 16, c0 = (tile % nt) * 8;
        float *c0p = c + (r0 + g) * ldc + c0 + 2 * t, *c8p = c0p + 8 * ldc;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        if (cs != 0.f) acc[0] = cs * c0p[0], acc[1] = cs * c0p[1], acc[2] = cs * c8p[0],
                       acc[3] = cs * c8p[1];
        for (int k0 = 0; k0 < K; k0 += 16) {
            uint32_t a[4];
            a[0] = dn_pack(A.at(r0 + g, k0 + 2 * t), A.cs);
            a[1] = dn_pack(A.at(r0 + g + 8, k0 + 2 * t), A.cs);
            a[2] = dn_pack(A.at(r0 + g, k0 + 2 * t + 8), A.cs);
            a[3] = dn_pack(A.at(r0 + g + 8, k0 + 2 * t + 8), A.cs);
            const uint32_t b0 = dn_pack(B.at(k0 + 2 * t, c0 + g), B.rs);
            const uint32_t b1 = dn_pack(B.at(k0 + 2 * t + 8, c0 + g), B.rs);
            mma_bf16(acc, a, b0, b1);
        }
        c0p[0] = acc[0], c0p[1] = acc[1], c8p[0] = acc[2], c8p[1] = acc[3];
    }
}

__device__ __forceinline__ bool dn_start(const int32_t *seq, int t) {
    return seq && t > 0 && seq[t] != seq[t - 1];
}

/* the chunk's rows: Qn, Kn (L2-normalised, a warp a row), V; gam, beta, doc (thread 0); rows
 * n .. 63 zero (their beta 0: they change nothing) */
__device__ void dn_load(const dn_args &a, const dn_smem &m, int b, int h, int t0, int n) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, hk = h / (a.HV / a.HK);
    const float qscale = 1.f / sqrtf((float)a.dk);
    for (int i = warp; i < DN_C; i += DN_THREADS / 32) {
        const size_t row = (size_t)b * a.T + t0 + i;
        const bf16 *q = a.q + (row * a.HK + hk) * a.dk, *k = a.k + (row * a.HK + hk) * a.dk;
        float sq = 0.f, sk = 0.f;
        for (int c = lane; c < a.dk && i < n; c += 32)
            sq += dn_f(q[c]) * dn_f(q[c]), sk += dn_f(k[c]) * dn_f(k[c]);
        for (int o = 16; o > 0; o >>= 1)
            sq += __shfl_xor_sync(0xffffffffu, sq, o), sk += __shfl_xor_sync(0xffffffffu, sk, o);
        const float rq = qscale / sqrtf(sq + DN_EPS), rk = 1.f / sqrtf(sk + DN_EPS);
        for (int c = lane; c < a.dk; c += 32) {
            m.Qn[i * a.dk + c] = __float2bfloat16_rn(i < n ? dn_f(q[c]) * rq : 0.f);
            m.Kn[i * a.dk + c] = __float2bfloat16_rn(i < n ? dn_f(k[c]) * rk : 0.f);
        }
        const bf16 *v = a.v + (row * a.HV + h) * a.dv;
        for (int c = lane; c < a.dv; c += 32) m.Vb[i * a.dv + c] = i < n ? v[c] : __float2bfloat16_rn(0.f);
    }
    if (threadIdx.x == 0) {
        const int32_t *seq = a.seq ? a.seq + (size_t)b * a.T : nullptr;
        float gam = 0.f;
        int d = 0;
        for (int i = 0; i < DN_C; i++) {
            const size_t at = ((size_t)b * a.T + t0 + i) * a.HV + h;
            if (i < n) {
                gam += a.g[at];
                d += i > 0 && dn_start(seq, t0 + i);
            }
            m.gam[i] = gam, m.bet[i] = i < n ? a.beta[at] : 0.f, m.doc[i] = d;
        }
    }
}

/* Tm = (I + A)^-1 (A in G, strictly lower): column c by thread c, forward substitution */
__device__ void dn_invert(const dn_smem &m) {
    const int c = threadIdx.x;
    if (c >= DN_C) return;
    for (int i = 0; i < DN_C; i++) {
        float x = i == c ? 1.f : 0.f;
        for (int j = c; j < i; j++) x -= m.G[i * DN_C + j] * m.Tm[j * DN_C + c];
        m.Tm[i * DN_C + c] = i < c ? 0.f : x;
    }
}

/* G (64 x 64) elementwise: Kn Kn^T -> A (strict lower, same document, beta_i e_ij) or, incl,
 * Qn Kn^T -> the masked scores (lower with the diagonal), written as bf16 to dst */
template <bool INCL> __device__ void dn_mask(const dn_smem &m, const float *src, void *dst) {
    for (int e = threadIdx.x; e < DN_C * DN_C; e += DN_THREADS) {
        const int i = e / DN_C, j = e % DN_C;
        const bool keep = (INCL ? j <= i : j < i) && m.doc[i] == m.doc[j];
        const float x = keep ? src[e] * expf(m.gam[i] - m.gam[j]) : 0.f;
        if (INCL)
            static_cast<bf16 *>(dst)[e] = __float2bfloat16_rn(x);
        else
            static_cast<float *>(dst)[e] = x * m.bet[i];
    }
}

/* one chunk: rows t0 .. t0 + n - 1 of (b, h); S in and out */
__device__ void dn_chunk(const dn_args &a, const dn_smem &m, int b, int h, int t0, int n) {
    const int dk = a.dk, dv = a.dv, C = DN_C, tid = threadIdx.x;
    dn_load(a, m, b, h, t0, n);
    __syncthreads();
    dn_mma(m.G, C, dn_mat<bf16>{m.Kn, dk, 1}, dn_mat<bf16>{m.Kn, 1, dk}, C, C, dk, 0.f);
    __syncthreads();
    dn_mask<false>(m, m.G, m.G);
    __syncthreads();
    dn_invert(m);
    __syncthreads();
    bf16 *TB = reinterpret_cast<bf16 *>(m.G), *TW = TB + C * C;
    for (int e = tid; e < C * C; e += DN_THREADS) {
        const int j = e % C;
        TB[e] = __float2bfloat16_rn(m.Tm[e] * m.bet[j]);
        TW[e] = __float2bfloat16_rn(m.Tm[e] * m.bet[j] * expf(m.gam[j]));
    }
    __syncthreads();
    dn_mma(m.F, dk, dn_mat<bf16>{TW, C, 1}, dn_mat<bf16>{m.Kn, dk, 1}, C, dk, C, 0.f);
    __syncthreads();
    for (int e = tid; e < C * dk; e += DN_THREADS)
        m.X[e] = __float2bfloat16_rn(m.doc[e / dk] == 0 ? -m.F[e] : 0.f);
    __syncthreads();
    dn_mma(m.F, dv, dn_mat<bf16>{TB, C, 1}, dn_mat<bf16>{m.Vb, dv, 1}, C, dv, C, 0.f);
    dn_mma(m.F, dv, dn_mat<bf16>{m.X, dk, 1}, dn_mat<float>{m.S, dv, 1}, C, dv, dk, 1.f);
    __syncthreads();
    for (int e = tid; e < C * dv; e += DN_THREADS) m.Vn[e] = __float2bfloat16_rn(m.F[e]);
    dn_mma(m.Tm, C, dn_mat<bf16>{m.Qn, dk, 1}, dn_mat<bf16>{m.Kn, 1, dk}, C, C, dk, 0.f);
    __syncthreads();
    bf16 *P = reinterpret_cast<bf16 *>(m.G);
    dn_mask<true>(m, m.Tm, P);
    for (int e = tid; e < C * dk; e += DN_THREADS) {
        const int i = e / dk;
        m.X[e] = __float2bfloat16_rn(m.doc[i] == 0 ? dn_f(m.Qn[e]) * expf(m.gam[i]) : 0.f);
    }
    __syncthreads();
    dn_mma(m.F, dv, dn_mat<bf16>{m.X, dk, 1}, dn_mat<float>{m.S, dv, 1}, C, dv, dk, 0.f);
    dn_mma(m.F, dv, dn_mat<bf16>{P, C, 1}, dn_mat<bf16>{m.Vn, dv, 1}, C, dv, C, 1.f);
    __syncthreads();
    const int last = n - 1, dl = m.doc[last];
    for (int e = tid; e < n * dv; e += DN_THREADS) {
        const int i = e / dv, c = e % dv;
        a.out[(((size_t)b * a.T + t0 + i) * a.HV + h) * dv + c] = __float2bfloat16_rn(m.F[e]);
    }
    for (int e = tid; e < C * dk; e += DN_THREADS) {
        const int j = e / dk;
        const bool keep = j < n && m.doc[j] == dl;
        m.X[e] = __float2bfloat16_rn(keep ? dn_f(m.Kn[e]) * expf(m.gam[last] - m.gam[j]) : 0.f);
    }
    __syncthreads();
    const float decay = dl == 0 ? expf(m.gam[last]) : 0.f;
    dn_mma(m.S, dv, dn_mat<bf16>{m.X, 1, dk}, dn_mat<bf16>{m.Vn, dv, 1}, dk, dv, C, decay);
    __syncthreads();
}

/* Launch: grid (HV, B), DN_THREADS, dn_smem_bytes(dk, dv) of dynamic shared memory */
__global__ void __launch_bounds__(DN_THREADS) deltanet_forward_kernel(dn_args a) {
    extern __shared__ __align__(16) unsigned char dn_raw[];
    const dn_smem m = dn_carve(dn_raw, a.dk, a.dv);
    const int h = blockIdx.x, b = blockIdx.y, ss = a.dk * a.dv;
    const size_t bh = (size_t)b * a.HV + h;
    const int32_t *seq = a.seq ? a.seq + (size_t)b * a.T : nullptr;
    for (int e = threadIdx.x; e < ss; e += DN_THREADS) m.S[e] = a.state0 ? a.state0[bh * ss + e] : 0.f;
    for (int c = 0; c < a.nchunk; c++) {
        const int t0 = c * DN_C, n = a.T - t0 < DN_C ? a.T - t0 : DN_C;
        const bool reset = dn_start(seq, t0);
        float *ck = a.ckpt ? a.ckpt + (bh * a.nchunk + c) * ss : nullptr;
        for (int e = threadIdx.x; e < ss; e += DN_THREADS) { /* the state entering the block */
            if (ck) ck[e] = m.S[e];
            if (reset) m.S[e] = 0.f;
        }
        __syncthreads();
        dn_chunk(a, m, b, h, t0, n);
    }
    if (a.state_out)
        for (int e = threadIdx.x; e < ss; e += DN_THREADS) a.state_out[bh * ss + e] = m.S[e];
}

extern "C" size_t tcu_deltanet_ckpt_floats(int B, int T, int HV, int dk, int dv) {
    return (size_t)B * HV * (size_t)((T + DN_C - 1) / DN_C) * dk * dv;
}

extern "C" void tcu_deltanet_forward(tsr_bf16 *out, float *state_out, float *ckpt,
                                     const tsr_bf16 *q, const tsr_bf16 *k, const tsr_bf16 *v,
                                     const float *g, const float *beta, const float *state0,
                                     const int32_t *seq, int B, int T, int HK, int HV, int dk,
                                     int dv, tcu_stream s) {
    const char *what = "tcu_deltanet_forward";
    TCU_REQUIRE(B >= 0 && T >= 0 && HK >= 1 && HV >= HK && HV % HK == 0, what,
                tcu_msg("need B, T >= 0 and HV a multiple of HK >= 1: B=%d T=%d HK=%d HV=%d", B,
                        T, HK, HV));
    TCU_REQUIRE(dk >= 16 && dk <= 128 && dk % 16 == 0 && dv >= 16 && dv <= 128 && dv % 16 == 0,
                what, tcu_msg("head sizes dk = %d, dv = %d: the kernel takes multiples of 16 "
                              "from 16 to 128", dk, dv));
    if (B == 0 || T == 0) return;
    const size_t smem = dn_smem_bytes(dk, dv);
    TCU_REQUIRE(smem <= tcu_context_get(what)->smem_optin, what,
                tcu_msg("dk = %d, dv = %d need %zu bytes of shared memory, the GPU gives %zu", dk,
                        dv, smem, tcu_context_get(what)->smem_optin));
    TCU_CHECK(cudaFuncSetAttribute(deltanet_forward_kernel,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
              what);
    const dn_args a = {(bf16 *)out, state_out, ckpt, (const bf16 *)q, (const bf16 *)k,
                       (const bf16 *)v, g, beta, state0, seq, T, HK, HV, dk, dv,
                       (T + DN_C - 1) / DN_C};
    deltanet_forward_kernel<<<dim3((unsigned)HV, (unsigned)B), DN_THREADS, smem,
                              (cudaStream_t)s>>>(a);
    TCU_CHECK_LAUNCH(what);
}
