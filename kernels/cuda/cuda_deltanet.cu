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
#define DN_C TCU_DN_CHUNK /* the chunk (tcu_index.h: the emulator runs the CPU core at it) */
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
 * The block's warps take the 16 x 8 tiles in turn; K, M multiples of 16, N of 8. No barrier.
 * Rows of C from mrows on are neither read nor written (a chunk's rows past T). */
template <class EA, class EB>
__device__ void dn_mma(float *c, int ldc, dn_mat<EA> A, dn_mat<EB> B, int M, int N, int K,
                       float cs, int mrows = 1 << 30) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int nt = N / 8;
    for (int tile = warp; tile < (M / 16) * nt; tile += DN_THREADS / 32) {
        const int r0 = (tile / nt) * 16, c0 = (tile % nt) * 8;
        float *c0p = c + (size_t)(r0 + g) * ldc + c0 + 2 * t, *c8p = c0p + (size_t)8 * ldc;
        const bool in0 = r0 + g < mrows, in8 = r0 + g + 8 < mrows;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        if (cs != 0.f && in0) acc[0] = cs * c0p[0], acc[1] = cs * c0p[1];
        if (cs != 0.f && in8) acc[2] = cs * c8p[0], acc[3] = cs * c8p[1];
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
        if (in0) c0p[0] = acc[0], c0p[1] = acc[1];
        if (in8) c8p[0] = acc[2], c8p[1] = acc[3];
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

/* Tm = (I + A)^-1 (A strictly lower, 64 x 64): column c by thread c, forward substitution */
__device__ void dn_invert(const float *A, float *Tm) {
    const int c = threadIdx.x;
    if (c >= DN_C) return;
    for (int i = 0; i < DN_C; i++) {
        float x = i == c ? 1.f : 0.f;
        for (int j = c; j < i; j++) x -= A[i * DN_C + j] * Tm[j * DN_C + c];
        Tm[i * DN_C + c] = i < c ? 0.f : x;
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
    dn_invert(m.G, m.Tm);
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


/* ---- the backward ----------------------------------------------------------------------------
 * One block per (value head, sequence), the chunks from the last: the chunk's forward recomputed
 * from its saved entering state (ckpt; none after a reset at its first position), then the
 * gradients of its equations (above) in reverse, their products on the tensor cores as the
 * forward's. dS, the gradient of the state leaving the chunk, and a product's fp32 work rows (F)
 * live in global scratch; the normalised rows' gradients dQn, dKn (per value head) too, from
 * which deltanet_l2_backward_kernel sums a key head's value heads through the L2 norms' backward
 * into dq and dk. Per-row scalar gradients (dgam, dbeta) are summed in shared memory by the
 * thread or warp that owns the row, dg is dgam's reverse cumulative sum within the chunk. */
struct dnb_args {
    dn_args fw; /* the forward's inputs (its outputs unused) */
    bf16 *dq, *dk, *dv;
    float *dg, *dbeta, *dstate0;
    const bf16 *dout;
    const float *dstate_out;
    float *dqn, *dkn, *dS, *F; /* scratch (tcu_deltanet_backward_scratch_bytes) */
};

struct dnb_smem {
    dn_smem f;                /* Qn, Kn, Vb, gam, bet, doc as the forward's */
    float *Tm, *GE, *Pf, *Wk; /* (64, 64) */
    bf16 *TB, *TW;            /* (64, 64) */
    bf16 *X, *Y;              /* (64, dk): -W; a scaled operand */
    bf16 *Vn, *dO, *Z;        /* (64, dv): Vnew, d out, d Vnew */
    float *dgm, *dbt, *lac, *red;
};

/* the chunk a block works on: its rows, the state it starts from (NULL: zero), its scratch */
struct dnb_chunk {
    int b, h, t0, n;
    const float *S;
    float *dS, *F, *dqn, *dkn; /* dqn, dkn: row t0 of the head, row stride ld */
    int ld;
};

static size_t dnb_smem_bytes(int dk, int dv) {
    const size_t C = DN_C;
    return sizeof(float) * (4 * C * C + 6 * C + 32) +
           sizeof(bf16) * (2 * C * C + 4 * C * dk + 4 * C * dv);
}

__device__ dnb_smem dnb_carve(unsigned char *base, int dk, int dv) {
    const int C = DN_C;
    dnb_smem m;
    float *p = reinterpret_cast<float *>(base);
    m.Tm = p, m.GE = p + C * C, m.Pf = p + 2 * C * C, m.Wk = p + 3 * C * C;
    p += 4 * C * C;
    m.f.gam = p, m.f.bet = p + C, m.f.doc = reinterpret_cast<int *>(p + 2 * C);
    m.dgm = p + 3 * C, m.dbt = p + 4 * C, m.lac = p + 5 * C, m.red = p + 6 * C;
    bf16 *q = reinterpret_cast<bf16 *>(p + 6 * C + 32);
    m.TB = q, m.TW = q + C * C;
    q += 2 * C * C;
    m.f.Qn = q, m.f.Kn = q + C * dk, m.X = q + 2 * C * dk, m.Y = q + 3 * C * dk;
    q += 4 * C * dk;
    m.f.Vb = q, m.Vn = q + C * dv, m.dO = q + 2 * C * dv, m.Z = q + 3 * C * dv;
    m.f.S = m.f.F = m.f.G = m.f.Tm = nullptr;
    m.f.X = m.f.Vn = nullptr;
    return m;
}

/* the sum of v over the block (every thread gets it) */
__device__ float dnb_block_sum(float v, float *red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = 0.f;
    for (int w = 0; w < DN_THREADS / 32; w++) v += red[w];
    __syncthreads();
    return v;
}

/* the chunk's forward again: Qn, Kn, V, d out; GE (masked K K^T e_ij), Tm, TB, TW, X = -W,
 * Vn, Pf (masked scores, fp32) */
/* dst = src (64 x 64) under the causal decay: e^(gam_i - gam_j) src_ij where j <= i in one
 * document, else 0 (dst may be src: each element read and written by one thread) */
__device__ void dnb_decay(const dn_smem &f, const float *src, float *dst) {
    for (int e = threadIdx.x; e < DN_C * DN_C; e += DN_THREADS) {
        const int i = e / DN_C, j = e % DN_C;
        const bool keep = j <= i && f.doc[i] == f.doc[j];
        dst[e] = keep ? src[e] * expf(f.gam[i] - f.gam[j]) : 0.f;
    }
}

__device__ void dnb_recompute(const dnb_args &a, const dnb_smem &m, const dnb_chunk &c) {
    const int dk = a.fw.dk, dv = a.fw.dv, C = DN_C, tid = threadIdx.x;
    dn_load(a.fw, m.f, c.b, c.h, c.t0, c.n);
    for (int e = tid; e < C * dv; e += DN_THREADS) {
        const size_t row = (size_t)c.b * a.fw.T + c.t0 + e / dv;
        m.dO[e] = e / dv < c.n ? a.dout[(row * a.fw.HV + c.h) * dv + e % dv] : __float2bfloat16_rn(0.f);
    }
    for (int i = tid; i < C; i += DN_THREADS) m.dgm[i] = m.dbt[i] = m.lac[i] = 0.f;
    __syncthreads();
    dn_mma(m.Wk, C, dn_mat<bf16>{m.f.Kn, dk, 1}, dn_mat<bf16>{m.f.Kn, 1, dk}, C, C, dk, 0.f);
    __syncthreads();
    for (int e = tid; e < C * C; e += DN_THREADS) {
        const int i = e / C, j = e % C;
        const bool keep = j < i && m.f.doc[i] == m.f.doc[j];
        m.GE[e] = keep ? m.Wk[e] * expf(m.f.gam[i] - m.f.gam[j]) : 0.f;
        m.Wk[e] = m.GE[e] * m.f.bet[i];
    }
    __syncthreads();
    dn_invert(m.Wk, m.Tm);
    __syncthreads();
    for (int e = tid; e < C * C; e += DN_THREADS) {
        m.TB[e] = __float2bfloat16_rn(m.Tm[e] * m.f.bet[e % C]);
        m.TW[e] = __float2bfloat16_rn(m.Tm[e] * m.f.bet[e % C] * expf(m.f.gam[e % C]));
    }
    __syncthreads();
    dn_mma(c.F, dk, dn_mat<bf16>{m.TW, C, 1}, dn_mat<bf16>{m.f.Kn, dk, 1}, C, dk, C, 0.f);
    __syncthreads();
    for (int e = tid; e < C * dk; e += DN_THREADS)
        m.X[e] = __float2bfloat16_rn(m.f.doc[e / dk] == 0 ? -c.F[e] : 0.f);
    __syncthreads();
    dn_mma(c.F, dv, dn_mat<bf16>{m.TB, C, 1}, dn_mat<bf16>{m.f.Vb, dv, 1}, C, dv, C, 0.f);
    if (c.S) dn_mma(c.F, dv, dn_mat<bf16>{m.X, dk, 1}, dn_mat<float>{c.S, dv, 1}, C, dv, dk, 1.f);
    __syncthreads();
    for (int e = tid; e < C * dv; e += DN_THREADS) m.Vn[e] = __float2bfloat16_rn(c.F[e]);
    dn_mma(m.Wk, C, dn_mat<bf16>{m.f.Qn, dk, 1}, dn_mat<bf16>{m.f.Kn, 1, dk}, C, C, dk, 0.f);
    __syncthreads();
    dnb_decay(m.f, m.Wk, m.Pf);
    __syncthreads();
}

/* row i's decay of the leaving state's keys: e^(gam_last - gam_i) in the last document, else 0 */
__device__ __forceinline__ float dnb_kd(const dnb_smem &m, const dnb_chunk &c, int i) {
    const int last = c.n - 1;
    return i < c.n && m.f.doc[i] == m.f.doc[last] ? expf(m.f.gam[last] - m.f.gam[i]) : 0.f;
}

/* row i's decay of the entering state's queries: e^gam_i in the first document, else 0 */
__device__ __forceinline__ float dnb_qs(const dnb_smem &m, const dnb_chunk &c, int i) {
    return c.S && i < c.n && m.f.doc[i] == 0 ? expf(m.f.gam[i]) : 0.f;
}

/* s = sum over the warp's lanes of the lane's terms (every lane gets it) */
__device__ __forceinline__ float dnb_warp_sum(float s) {
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

/* Z = d Vnew = Pm^T dO + Kd dS;  the leaving state's decay and keys: dgam, dKn (set) */
__device__ void dnb_dvnew(const dnb_args &a, const dnb_smem &m, const dnb_chunk &c) {
    const int dk = a.fw.dk, dv = a.fw.dv, C = DN_C, tid = threadIdx.x, last = c.n - 1;
    const int warp = tid >> 5, lane = tid & 31;
    dn_mma(c.F, dv, dn_mat<bf16>{m.f.Kn, dk, 1}, dn_mat<float>{c.dS, dv, 1}, C, dv, dk, 0.f);
    float part = 0.f;
    for (int e = tid; c.S && e < dk * dv; e += DN_THREADS) part += c.S[e] * c.dS[e];
    const float sds = dnb_block_sum(part, m.red); /* (its barriers order the product too) */
    for (int e = tid; e < C * dv; e += DN_THREADS) c.F[e] *= dnb_kd(m, c, e / dv);
    __syncthreads();
    dn_mma(c.F, dv, dn_mat<float>{m.Pf, 1, C}, dn_mat<bf16>{m.dO, dv, 1}, C, dv, C, 1.f);
    __syncthreads();
    for (int e = tid; e < C * dv; e += DN_THREADS) m.Z[e] = __float2bfloat16_rn(c.F[e]);
    __syncthreads();
    dn_mma(c.F, dk, dn_mat<bf16>{m.Vn, dv, 1}, dn_mat<float>{c.dS, 1, dv}, C, dk, dv, 0.f);
    __syncthreads();
    for (int j = warp; j < c.n; j += DN_THREADS / 32) { /* dKd = Vn dS^T */
        const float kd = dnb_kd(m, c, j);
        float s = 0.f;
        for (int col = lane; col < dk; col += 32) {
            const float x = c.F[j * dk + col];
            c.dkn[(size_t)j * c.ld + col] = kd * x;
            s += x * dn_f(m.f.Kn[j * dk + col]);
        }
        s = dnb_warp_sum(s) * kd;
        if (lane == 0) m.dgm[j] -= s, m.lac[j] = s;
    }
    if (tid == 0) m.red[31] = m.f.doc[last] == 0 ? expf(m.f.gam[last]) * sds : 0.f;
    __syncthreads();
}

/* the entering state's queries: dQn (set), dgam; the scores: dgam, dQn, dKn */
__device__ void dnb_scores(const dnb_args &a, const dnb_smem &m, const dnb_chunk &c) {
    const int dk = a.fw.dk, dv = a.fw.dv, C = DN_C, tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    if (c.S) dn_mma(c.F, dk, dn_mat<bf16>{m.dO, dv, 1}, dn_mat<float>{c.S, 1, dv}, C, dk, dv, 0.f);
    dn_mma(m.Wk, C, dn_mat<bf16>{m.dO, dv, 1}, dn_mat<bf16>{m.Vn, 1, dv}, C, C, dv, 0.f);
    __syncthreads();
    for (int i = warp; i < c.n; i += DN_THREADS / 32) { /* dQs = dO S^T */
        const float qs = dnb_qs(m, c, i);
        float s = 0.f;
        for (int col = lane; col < dk; col += 32) {
            const float x = c.S ? c.F[i * dk + col] : 0.f;
            c.dqn[(size_t)i * c.ld + col] = qs * x;
            s += x * dn_f(m.f.Qn[i * dk + col]);
        }
        s = dnb_warp_sum(s) * qs;
        if (lane == 0) m.dgm[i] += s;
    }
    __syncthreads();
    if (tid < C) { /* dPm (in Wk) against the scores' decays */
        float r = 0.f;
        for (int j = 0; j < C; j++) r += m.Wk[tid * C + j] * m.Pf[tid * C + j] - m.Wk[j * C + tid] * m.Pf[j * C + tid];
        m.dgm[tid] += r;
    }
    __syncthreads();
    dnb_decay(m.f, m.Wk, m.Wk);
    __syncthreads();
    dn_mma(c.dqn, c.ld, dn_mat<float>{m.Wk, C, 1}, dn_mat<bf16>{m.f.Kn, dk, 1}, C, dk, C, 1.f, c.n);
    dn_mma(c.dkn, c.ld, dn_mat<float>{m.Wk, 1, C}, dn_mat<bf16>{m.f.Qn, dk, 1}, C, dk, C, 1.f, c.n);
    __syncthreads();
}

/* dS <- delta dS + Qs^T dO - W^T Z: the gradient of the state entering the chunk */
__device__ void dnb_dstate(const dnb_args &a, const dnb_smem &m, const dnb_chunk &c) {
    const int dk = a.fw.dk, dv = a.fw.dv, C = DN_C, last = c.n - 1;
    for (int e = threadIdx.x; e < C * dk; e += DN_THREADS)
        m.Y[e] = __float2bfloat16_rn(dnb_qs(m, c, e / dk) * dn_f(m.f.Qn[e]));
    __syncthreads();
    const float delta = m.f.doc[last] == 0 ? expf(m.f.gam[last]) : 0.f;
    dn_mma(c.dS, dv, dn_mat<bf16>{m.Y, 1, dk}, dn_mat<bf16>{m.dO, dv, 1}, dk, dv, C, delta);
    dn_mma(c.dS, dv, dn_mat<bf16>{m.X, 1, dk}, dn_mat<bf16>{m.Z, dv, 1}, dk, dv, C, 1.f);
    __syncthreads();
}

/* through Vnew = Tm diag(beta) V - Tm diag(beta e^gam) Kn S: dTm (in Wk), dv, dbeta, dKn, dgam */
__device__ void dnb_ut(const dnb_args &a, const dnb_smem &m, const dnb_chunk &c) {
    const int dk = a.fw.dk, dv = a.fw.dv, C = DN_C, tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    if (c.S) dn_mma(c.F, dk, dn_mat<bf16>{m.Z, dv, 1}, dn_mat<float>{c.S, 1, dv}, C, dk, dv, 0.f);
    __syncthreads();
    for (int e = tid; e < C * dk; e += DN_THREADS) /* dW = -[d = 0] Z S^T */
        m.Y[e] = __float2bfloat16_rn(c.S && m.f.doc[e / dk] == 0 ? -c.F[e] : 0.f);
    __syncthreads();
    dn_mma(m.Wk, C, dn_mat<bf16>{m.Z, dv, 1}, dn_mat<bf16>{m.f.Vb, 1, dv}, C, C, dv, 0.f);
    dn_mma(m.Pf, C, dn_mat<bf16>{m.Y, dk, 1}, dn_mat<bf16>{m.f.Kn, 1, dk}, C, C, dk, 0.f);
    dn_mma(c.F, dv, dn_mat<float>{m.Tm, 1, C}, dn_mat<bf16>{m.Z, dv, 1}, C, dv, C, 0.f);
    __syncthreads();
    for (int e = tid; e < C * C; e += DN_THREADS)
        m.Wk[e] = m.f.bet[e % C] * (m.Wk[e] + m.Pf[e] * expf(m.f.gam[e % C]));
    for (int j = warp; j < c.n; j += DN_THREADS / 32) { /* dV = diag(beta) Tm^T Z */
        bf16 *dvr = a.dv + (((size_t)c.b * a.fw.T + c.t0 + j) * a.fw.HV + c.h) * dv;
        float s = 0.f;
        for (int col = lane; col < dv; col += 32) {
            const float x = c.F[j * dv + col];
            dvr[col] = __float2bfloat16_rn(dn_f(dvr[col]) + m.f.bet[j] * x);
            s += x * dn_f(m.f.Vb[j * dv + col]);
        }
        s = dnb_warp_sum(s);
        if (lane == 0) m.dbt[j] += s;
    }
    __syncthreads();
    dn_mma(c.F, dk, dn_mat<float>{m.Tm, 1, C}, dn_mat<bf16>{m.Y, dk, 1}, C, dk, C, 0.f);
    __syncthreads();
    for (int j = warp; j < c.n; j += DN_THREADS / 32) { /* dR = Tm^T dW, R = diag(beta e^gam) Kn */
        const float eg = expf(m.f.gam[j]), be = m.f.bet[j] * eg;
        float s = 0.f;
        for (int col = lane; col < dk; col += 32) {
            const float x = c.F[j * dk + col];
            c.dkn[(size_t)j * c.ld + col] += be * x;
            s += x * dn_f(m.f.Kn[j * dk + col]);
        }
        s = dnb_warp_sum(s);
        if (lane == 0) m.dbt[j] += eg * s, m.dgm[j] += be * s;
    }
    __syncthreads();
}

/* through Tm = (I + A)^-1, A = beta_i G_ij e_ij: dA = -Tm^T dTm Tm^T; dbeta, dgam, dKn */
__device__ void dnb_inverse(const dnb_args &a, const dnb_smem &m, const dnb_chunk &c) {
    const int dk = a.fw.dk, C = DN_C, tid = threadIdx.x;
    dn_mma(m.Pf, C, dn_mat<float>{m.Tm, 1, C}, dn_mat<float>{m.Wk, C, 1}, C, C, C, 0.f);
    __syncthreads();
    dn_mma(m.Wk, C, dn_mat<float>{m.Pf, C, 1}, dn_mat<float>{m.Tm, 1, C}, C, C, C, 0.f);
    __syncthreads(); /* Wk = -dA where A may vary: GE != 0 there */
    if (tid < C) {
        float r = 0.f, col = 0.f, db = 0.f;
        for (int j = 0; j < C; j++) {
            const float x = -m.Wk[tid * C + j] * m.GE[tid * C + j];
            db += x, r += x * m.f.bet[tid];
            col -= m.Wk[j * C + tid] * m.GE[j * C + tid] * m.f.bet[j];
        }
        m.dbt[tid] += db, m.dgm[tid] += r - col;
    }
    for (int e = tid; e < C * C; e += DN_THREADS) { /* dG + dG^T, dG_ij = dA_ij beta_i e_ij */
        const int i = e / C, j = e % C;
        const bool lij = j < i && m.f.doc[i] == m.f.doc[j], lji = i < j && m.f.doc[i] == m.f.doc[j];
        float x = 0.f;
        if (lij) x -= m.Wk[e] * m.f.bet[i] * expf(m.f.gam[i] - m.f.gam[j]);
        if (lji) x -= m.Wk[j * C + i] * m.f.bet[j] * expf(m.f.gam[j] - m.f.gam[i]);
        m.Pf[e] = x;
    }
    __syncthreads();
    dn_mma(c.dkn, c.ld, dn_mat<float>{m.Pf, C, 1}, dn_mat<bf16>{m.f.Kn, dk, 1}, C, dk, C, 1.f, c.n);
    __syncthreads();
}

/* dg (the reverse cumulative sum of dgam within the chunk) and dbeta +=; dS zero after a reset */
__device__ void dnb_finish(const dnb_args &a, const dnb_smem &m, const dnb_chunk &c, bool reset) {
    if (threadIdx.x == 0) {
        float tolast = m.red[31], acc = 0.f;
        for (int j = 0; j < c.n; j++) tolast += m.lac[j];
        m.dgm[c.n - 1] += tolast;
        for (int i = c.n - 1; i >= 0; i--) {
            const size_t at = ((size_t)c.b * a.fw.T + c.t0 + i) * a.fw.HV + c.h;
            acc += m.dgm[i];
            a.dg[at] += acc;
            a.dbeta[at] += m.dbt[i];
        }
    }
    for (int e = threadIdx.x; reset && e < a.fw.dk * a.fw.dv; e += DN_THREADS) c.dS[e] = 0.f;
    __syncthreads();
}

/* Launch: grid (HV, B), DN_THREADS, dnb_smem_bytes(dk, dv) of dynamic shared memory */
__global__ void __launch_bounds__(DN_THREADS) deltanet_backward_kernel(dnb_args a) {
    extern __shared__ __align__(16) unsigned char dn_raw[];
    const dn_args &f = a.fw;
    const dnb_smem m = dnb_carve(dn_raw, f.dk, f.dv);
    const int h = blockIdx.x, b = blockIdx.y, ss = f.dk * f.dv, w = f.dk > f.dv ? f.dk : f.dv;
    const size_t bh = (size_t)b * f.HV + h;
    const int32_t *seq = f.seq ? f.seq + (size_t)b * f.T : nullptr;
    float *dS = a.dS + bh * ss;
    for (int e = threadIdx.x; e < ss; e += DN_THREADS) dS[e] = a.dstate_out ? a.dstate_out[bh * ss + e] : 0.f;
    __syncthreads();
    for (int ci = f.nchunk - 1; ci >= 0; ci--) {
        const int t0 = ci * DN_C, n = f.T - t0 < DN_C ? f.T - t0 : DN_C;
        const bool reset = dn_start(seq, t0);
        const size_t row = ((size_t)b * f.T + t0) * f.HV + h;
        const dnb_chunk c = {b, h, t0, n, reset ? nullptr : f.ckpt + (bh * f.nchunk + ci) * ss, dS,
                             a.F + bh * DN_C * w, a.dqn + row * f.dk, a.dkn + row * f.dk, f.HV * f.dk};
        dnb_recompute(a, m, c);
        dnb_dvnew(a, m, c);
        dnb_scores(a, m, c);
        dnb_dstate(a, m, c);
        dnb_ut(a, m, c);
        dnb_inverse(a, m, c);
        dnb_finish(a, m, c, reset);
    }
    for (int e = threadIdx.x; a.dstate0 && e < ss; e += DN_THREADS) a.dstate0[bh * ss + e] += dS[e];
}

/* Launch: grid (B T, HK) (rows in x: past 65535), 32 threads: row's key head hk, dq and dk (bf16 +=) through the L2
 * norms' backward from the sum of its value heads' dQn, dKn (in head order) */
__global__ void __launch_bounds__(32)
    deltanet_l2_backward_kernel(bf16 *dq, bf16 *dk, const bf16 *q, const bf16 *k, const float *dqn,
                                const float *dkn, int HK, int HV, int d) {
    const int hk = blockIdx.y, lane = threadIdx.x, grp = HV / HK;
    const size_t row = blockIdx.x;
    for (int which = 0; which < 2; which++) {
        const bf16 *x = (which ? k : q) + (row * HK + hk) * d;
        const float *dy = (which ? dkn : dqn) + (row * HV + (size_t)hk * grp) * d;
        bf16 *dx = (which ? dk : dq) + (row * HK + hk) * d;
        const float mul = which ? 1.f : 1.f / sqrtf((float)d);
        float ss = 0.f, yd = 0.f;
        for (int c = lane; c < d; c += 32) {
            float y = 0.f;
            for (int gi = 0; gi < grp; gi++) y += dy[(size_t)gi * d + c];
            ss += dn_f(x[c]) * dn_f(x[c]), yd += dn_f(x[c]) * y;
        }
        ss = dnb_warp_sum(ss), yd = dnb_warp_sum(yd);
        const float r = 1.f / sqrtf(ss + DN_EPS);
        for (int c = lane; c < d; c += 32) {
            float y = 0.f;
            for (int gi = 0; gi < grp; gi++) y += dy[(size_t)gi * d + c];
            dx[c] = __float2bfloat16_rn(dn_f(dx[c]) + mul * r * (y - r * r * dn_f(x[c]) * yd));
        }
    }
}

extern "C" size_t tcu_deltanet_ckpt_floats(int B, int T, int HV, int dk, int dv) {
    return (size_t)B * HV * (size_t)((T + DN_C - 1) / DN_C) * dk * dv;
}

/* the shapes both directions take; dies naming the op otherwise */
static void dn_require(const char *what, int B, int T, int HK, int HV, int dk, int dv) {
    TCU_REQUIRE(B >= 0 && T >= 0 && HK >= 1 && HV >= HK && HV % HK == 0, what,
                tcu_msg("need B, T >= 0 and HV a multiple of HK >= 1: B=%d T=%d HK=%d HV=%d", B,
                        T, HK, HV));
    TCU_REQUIRE(dk >= 16 && dk <= 128 && dk % 16 == 0 && dv >= 16 && dv <= 128 && dv % 16 == 0,
                what, tcu_msg("head sizes dk = %d, dv = %d: the kernel takes multiples of 16 "
                              "from 16 to 128", dk, dv));
}

/* the kernel's dynamic shared-memory limit = smem, after checking the GPU has it */
static void dn_smem_limit(const void *kernel, size_t smem, int dk, int dv, const char *what) {
    TCU_REQUIRE(smem <= tcu_context_get(what)->smem_optin, what,
                tcu_msg("dk = %d, dv = %d need %zu bytes of shared memory, the GPU gives %zu", dk,
                        dv, smem, tcu_context_get(what)->smem_optin));
    TCU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
              what);
}

extern "C" void tcu_deltanet_forward(tsr_bf16 *out, float *state_out, float *ckpt,
                                     const tsr_bf16 *q, const tsr_bf16 *k, const tsr_bf16 *v,
                                     const float *g, const float *beta, const float *state0,
                                     const int32_t *seq, int B, int T, int HK, int HV, int dk,
                                     int dv, tcu_stream s) {
    const char *what = "tcu_deltanet_forward";
    dn_require(what, B, T, HK, HV, dk, dv);
    if (B == 0 || T == 0) return;
    const size_t smem = dn_smem_bytes(dk, dv);
    dn_smem_limit((const void *)deltanet_forward_kernel, smem, dk, dv, what);
    const dn_args a = {(bf16 *)out, state_out, ckpt, (const bf16 *)q, (const bf16 *)k,
                       (const bf16 *)v, g, beta, state0, seq, T, HK, HV, dk, dv,
                       (T + DN_C - 1) / DN_C};
    deltanet_forward_kernel<<<dim3((unsigned)HV, (unsigned)B), DN_THREADS, smem,
                              (cudaStream_t)s>>>(a);
    TCU_CHECK_LAUNCH(what);
}

extern "C" size_t tcu_deltanet_backward_scratch_bytes(int B, int T, int HV, int dk, int dv) {
    return tcu_dn_backward_scratch_bytes(B, T, HV, dk, dv);
}

extern "C" void tcu_deltanet_backward(tsr_bf16 *dq, tsr_bf16 *dk, tsr_bf16 *dv, float *dg,
                                      float *dbeta, float *dstate0, const tsr_bf16 *dout,
                                      const float *dstate_out, const float *ckpt,
                                      const tsr_bf16 *q, const tsr_bf16 *k, const tsr_bf16 *v,
                                      const float *g, const float *beta, const int32_t *seq,
                                      void *scratch, int B, int T, int HK, int HV, int dkd,
                                      int dvd, tcu_stream s) {
    const char *what = "tcu_deltanet_backward";
    dn_require(what, B, T, HK, HV, dkd, dvd);
    if (B == 0 || T == 0) return;
    TCU_REQUIRE(scratch && ckpt, what, tcu_msg("scratch (%s) and ckpt (%s) must be given",
                                               scratch ? "given" : "NULL", ckpt ? "given" : "NULL"));
    const size_t smem = dnb_smem_bytes(dkd, dvd), bh = (size_t)B * HV;
    dn_smem_limit((const void *)deltanet_backward_kernel, smem, dkd, dvd, what);
    float *sc = static_cast<float *>(scratch);
    const dn_args f = {nullptr, nullptr, const_cast<float *>(ckpt), (const bf16 *)q,
                       (const bf16 *)k, (const bf16 *)v, g, beta, nullptr, seq, T, HK, HV, dkd,
                       dvd, (T + DN_C - 1) / DN_C};
    const dnb_args a = {f, (bf16 *)dq, (bf16 *)dk, (bf16 *)dv, dg, dbeta, dstate0,
                        (const bf16 *)dout, dstate_out, sc, sc + bh * T * dkd,
                        sc + 2 * bh * T * dkd, sc + 2 * bh * T * dkd + bh * dkd * dvd};
    cudaStream_t st = (cudaStream_t)s;
    deltanet_backward_kernel<<<dim3((unsigned)HV, (unsigned)B), DN_THREADS, smem, st>>>(a);
    TCU_CHECK_LAUNCH(what);
    deltanet_l2_backward_kernel<<<dim3((unsigned)((size_t)B * T), (unsigned)HK), 32, 0, st>>>(
        (bf16 *)dq, (bf16 *)dk, (const bf16 *)q, (const bf16 *)k, sc, sc + bh * T * dkd, HK, HV,
        dkd);
    TCU_CHECK_LAUNCH(what);
}
