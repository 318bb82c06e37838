/* wgmma_layouts.cuh — wgmma's operand and accumulator layouts (kernels/cuda/cuda_ptx.h) against
 * the PTX ISA's formulas, written out here independently of the kernels, with double sums of the
 * same bf16 values: run by the SIMT emulator's selftest (tests/gpu/simt_selftest.cu, which adds
 * the emulator's stops) and, on a GPU of compute capability 9.0, by build/tests/test_wgmma_gpu
 * (tests/gpu/test_wgmma_gpu.cu). Both pass only if the emulator's wgmma and the hardware's agree
 * with the same formulas, which is what makes the emulator's verdict on the wgmma attention
 * kernel worth something. Include after cuda_ptx.h and tap.h.
 */
#ifndef TSR_WGMMA_LAYOUTS_CUH
#define TSR_WGMMA_LAYOUTS_CUH

#include <cmath>
#include <cstdio>
#include <vector>

typedef __nv_bfloat16 wg_bf16;

/* device copies of host vectors (the SIMT emulator runs kernels on host memory) */
#ifdef TCU_SIMT
template <class T> static T *wg_dev(std::vector<T> &v) { return v.data(); }
template <class T> static void wg_back(std::vector<T> &v, T *d) { (void)v, (void)d; }
template <class T> static void wg_free(T *d) { (void)d; }
#else
template <class T> static T *wg_dev(std::vector<T> &v) {
    T *d = nullptr;
    if (cudaMalloc(&d, v.size() * sizeof(T)) != cudaSuccess ||
        cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "wgmma_layouts: cudaMalloc/cudaMemcpy of %zu bytes failed\n",
                v.size() * sizeof(T));
        exit(1);
    }
    return d;
}
template <class T> static void wg_back(std::vector<T> &v, T *d) {
    if (cudaMemcpy(v.data(), d, v.size() * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) {
        fprintf(stderr, "wgmma_layouts: cudaMemcpy back failed: %s\n",
                cudaGetErrorString(cudaGetLastError()));
        exit(1);
    }
}
template <class T> static void wg_free(T *d) { cudaFree(d); }
#endif

/* element (row r, column k) of a K-major operand, (k, n) of an MN-major one, without swizzle (the
 * PTX ISA's canonical layouts: core matrices of 8 rows of 16 bytes; lbo between core matrices
 * adjacent in K, sbo between those adjacent in M or N), in bytes: where the test places the
 * operands. Which descriptor field each stride goes in is cuda_ptx.h's (wgmma_desc_kmajor,
 * wgmma_desc_mnmajor), the kernels' too. */
__host__ __device__ inline size_t kmajor_at(int r, int k, uint32_t lbo, uint32_t sbo) {
    return (size_t)(r / 8) * sbo + (size_t)(r % 8) * 16 + (size_t)(k / 8) * lbo +
           (size_t)(k % 8) * 2;
}
__host__ __device__ inline size_t mnmajor_at(int k, int n, uint32_t lbo, uint32_t sbo) {
    return (size_t)(n / 8) * sbo + (size_t)(n % 8) * 2 + (size_t)(k / 8) * lbo +
           (size_t)(k % 8) * 16;
}

/* WG_OK, or a mistake the emulator must stop (tests/gpu/simt_selftest.cu; never on a GPU), or
 * WG_PROXY_TWICE, a correct order it must let run */
enum { WG_OK, WG_NO_FENCE, WG_A_CHANGED, WG_NO_WAIT, WG_REFENCE, WG_SMEM_CHANGED, WG_ACC_WRITTEN,
       WG_NO_PROXY_FENCE, WG_PROXY_FENCE_EARLY, WG_PROXY_FENCE_SOME, WG_PROXY_NO_BARRIER,
       WG_PROXY_TWICE };

/* D (64 x N, row-major) = (scale_d ? C : 0) + A B over K = 32 (two k16 products on one
 * accumulator, one commit group): A (64 x 32) and B (32 x N) row-major in global memory, placed in
 * shared memory by the formulas above (A K-major at byte 0 with lbo_a, sbo_a; B at 16 KiB, MN-major
 * when A_REGS, else K-major, with lbo_b, sbo_b); with A_REGS, A from registers (the mma.sync A
 * fragment of the thread's warp's 16 rows, g = lane/4, t = lane%4). The accumulator starts as C
 * by the ISA's D layout (thread (w, lane), element (j, e): row 16w + g + 8 (e >= 2), column
 * 8j + 2t + (e & 1)). before[thread]: its first accumulator read between the issue and the wait.
 * mode: WG_OK, or a mistake the emulator must stop. swap: 0, or wgmma_swap_diagnosis's descriptor
 * read with its strides the other way round (bit 0 A's, bit 1 B's). */
template <int N, bool A_REGS>
__global__ void wgmma_kernel(float *D, float *before, const wg_bf16 *A, const wg_bf16 *B, const float *C,
                             int scale_d, uint32_t lbo_a, uint32_t sbo_a, uint32_t lbo_b,
                             uint32_t sbo_b, int mode, int swap) {
#ifdef TCU_SIMT /* tools/simt_cu.py rewrites the .cu it is given, not this header */
    unsigned char *wg_smem = tcu_simt::dynamic_smem();
#else
    extern __shared__ __align__(128) unsigned char wg_smem[];
#endif
    unsigned char *sa = wg_smem, *sb = wg_smem + 16384;
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    /* this thread's share of A and B in shared memory (zeros instead with zero) */
    auto store_a = [&](bool zero) {
        for (int i = tid; i < 64 * 32; i += blockDim.x)
            *reinterpret_cast<wg_bf16 *>(sa + kmajor_at(i / 32, i % 32, lbo_a, sbo_a)) =
                zero ? __float2bfloat16_rn(0.0f) : A[i];
    };
    auto store_b = [&](bool zero) {
        for (int i = tid; i < 32 * N; i += blockDim.x) {
            const int k = i / N, n = i % N;
            *reinterpret_cast<wg_bf16 *>(sb + (A_REGS ? mnmajor_at(k, n, lbo_b, sbo_b)
                                                   : kmajor_at(n, k, lbo_b, sbo_b))) =
                zero ? __float2bfloat16_rn(0.0f) : B[i];
        }
    };
#ifdef TCU_SIMT
    if (mode == WG_PROXY_FENCE_EARLY) fence_proxy_async(); /* before the stores: too early */
    if (mode == WG_PROXY_FENCE_SOME) { /* a first round of zeros, published by every thread */
        store_a(true), store_b(true);
        fence_proxy_async();
        __syncthreads();
    }
    store_a(false);
    if (mode == WG_PROXY_TWICE) fence_proxy_async(); /* stores, fence, stores, fence: correct */
    store_b(false);
    /* the second round fenced in warps 0-2 only: the async proxy may still see the zeros */
    if (mode != WG_NO_PROXY_FENCE && mode != WG_PROXY_FENCE_EARLY &&
        (mode != WG_PROXY_FENCE_SOME || w != 3))
        fence_proxy_async();
    if (mode != WG_PROXY_NO_BARRIER) __syncthreads();
#else
    store_a(false), store_b(false);
    fence_proxy_async();
    __syncthreads();
#endif
    float d[N / 8][4];
    for (int j = 0; j < N / 8; j++)
        for (int e = 0; e < 4; e++)
            d[j][e] = C[(16 * w + g + 8 * (e >= 2)) * N + 8 * j + 2 * t + (e & 1)];
    auto pk = [](wg_bf16 lo, wg_bf16 hi) {
        return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
    };
    uint32_t a[2][4];
    for (int ks = 0; ks < 2; ks++) {
        const wg_bf16 *r0 = A + (16 * w + g) * 32 + 16 * ks, *r8 = r0 + 8 * 32;
        a[ks][0] = pk(r0[2 * t], r0[2 * t + 1]), a[ks][1] = pk(r8[2 * t], r8[2 * t + 1]);
        a[ks][2] = pk(r0[2 * t + 8], r0[2 * t + 9]), a[ks][3] = pk(r8[2 * t + 8], r8[2 * t + 9]);
    }
    /* the descriptors as the kernels build them; swap (wgmma_swap_diagnosis): A's (bit 0) or B's
     * (bit 1) given its two strides the other way round, the placement and the k16 steps (moves
     * of the start address along K) unchanged */
    const uint64_t da = (swap & 1) ? wgmma_desc_kmajor(sa, sbo_a, lbo_a)
                                   : wgmma_desc_kmajor(sa, lbo_a, sbo_a);
    const uint32_t kb = (swap & 2) ? sbo_b : lbo_b, mnb = (swap & 2) ? lbo_b : sbo_b;
    const uint64_t db = A_REGS ? wgmma_desc_mnmajor(sb, kb, mnb) : wgmma_desc_kmajor(sb, kb, mnb);
#ifdef TCU_SIMT
    if (mode != WG_NO_FENCE) wgmma_fence();
#else
    wgmma_fence(); /* no condition around it: ptxas would add waits of its own */
#endif
    for (int ks = 0; ks < 2; ks++) { /* a k16 step: 2 core matrices along K */
        const uint64_t step_a = 2 * lbo_a * ks / 16, step_b = 2 * lbo_b * ks / 16;
#ifdef TCU_SIMT
        if (mode == WG_REFENCE && ks == 1) wgmma_commit(); /* a second batch, unfenced */
#endif
        if constexpr (A_REGS)
            wgmma_rs_mn<N>(d, a[ks], db + step_b, scale_d || ks > 0);
        else
            wgmma_ss<N>(d, da + step_a, db + step_b, scale_d || ks > 0);
    }
    wgmma_commit();
#ifdef TCU_SIMT /* undefined on a GPU (ptxas would wait for the product there) */
    before[tid] = d[0][0];
    if (mode == WG_A_CHANGED) a[1][2] ^= 1u;
    if (mode == WG_SMEM_CHANGED && tid == 0) sb[0] ^= 1u;
    if (mode == WG_ACC_WRITTEN) d[1][1] = 0.0f;
    if (mode == WG_NO_WAIT) return;
#else
    (void)before, (void)mode;
#endif
    wgmma_wait<0>();
    for (int j = 0; j < N / 8; j++)
        for (int e = 0; e < 4; e++)
            D[(16 * w + g + 8 * (e >= 2)) * N + 8 * j + 2 * t + (e & 1)] = d[j][e];
}

/* the dynamic shared memory of wgmma_kernel: A and B as placed take the first 32 KiB; a
 * descriptor read another way than placed (the hardware's reading differing from the formulas
 * above, or a swap of wgmma_swap_diagnosis) reaches further, up to 84.3 KiB at N = 128. Every
 * run gets 128 KiB, so such a read returns garbage, a wrong product, inside the allocation, where
 * a read past it would end the context on a GPU (and the run on the emulator) before the
 * diagnosis could say what was read wrong */
static const int kWgSmem = 131072;

/* the first launch error of a wgmma_run (empty: none): a failed check says it, and the swap
 * diagnosis does not run on a kernel that did not */
static char wg_launch_error[256];

/* runs wgmma_kernel<N, A_REGS> on random wg_bf16 A, B and fp32 C; the worst |D - double| (inf
 * where the launch failed) and the count of threads whose read before the wait was not NaN */
template <int N, bool A_REGS>
static double wgmma_run(int scale_d, uint32_t lbo_a, uint32_t sbo_a, uint32_t lbo_b, uint32_t sbo_b,
                        int *not_nan, int threads = 128, int mode = WG_OK, int swap = 0) {
    std::vector<wg_bf16> A(64 * 32), B(32 * N);
    std::vector<float> Af(64 * 32), Bf(32 * N), C(64 * N), D(64 * N, NAN), before(threads, 0);
    unsigned seed = 777u + (unsigned)N;
    auto rnd = [&seed]() {
        seed = seed * 1103515245u + 12345u;
        return (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    };
    for (size_t i = 0; i < A.size(); i++)
        A[i] = __float2bfloat16_rn(rnd()), Af[i] = __bfloat162float(A[i]);
    for (size_t i = 0; i < B.size(); i++)
        B[i] = __float2bfloat16_rn(rnd()), Bf[i] = __bfloat162float(B[i]);
    for (float &c : C) c = rnd();
    auto k = wgmma_kernel<N, A_REGS>;
    const cudaError_t attr =
        cudaFuncSetAttribute((const void *)k, cudaFuncAttributeMaxDynamicSharedMemorySize, kWgSmem);
    float *dD = wg_dev(D), *dbefore = wg_dev(before), *dC = wg_dev(C);
    wg_bf16 *dA = wg_dev(A), *dB = wg_dev(B);
#ifdef TCU_SIMT
    tcu_simt::launch(k, 1, threads, kWgSmem)(dD, dbefore, dA, dB, dC, scale_d, lbo_a, sbo_a, lbo_b,
                                           sbo_b, mode, swap);
#else
    k<<<1, threads, kWgSmem>>>(dD, dbefore, dA, dB, dC, scale_d, lbo_a, sbo_a, lbo_b, sbo_b, mode,
                            swap);
#endif
    const cudaError_t err = attr != cudaSuccess ? attr : cudaGetLastError();
    if (err != cudaSuccess) {
        fprintf(stderr, "wgmma_kernel: %s\n", cudaGetErrorString(err));
        if (!wg_launch_error[0])
            snprintf(wg_launch_error, sizeof wg_launch_error, "wgmma_kernel<%d, %s>: %s%s", N,
                     A_REGS ? "A in registers" : "A in shared memory", cudaGetErrorString(err),
                     attr != cudaSuccess ? " (cudaFuncSetAttribute, 128 KiB)" : " (the launch)");
    }
    wg_back(D, dD), wg_back(before, dbefore);
    wg_free(dD), wg_free(dbefore), wg_free(dC), wg_free(dA), wg_free(dB);
    double worst = 0; /* |D - ref| over the sum of |terms| (|C| and each |a b|) */
    for (int r = 0; r < 64; r++)
        for (int n = 0; n < N; n++) {
            double ref = scale_d ? C[r * N + n] : 0.0, mag = fabs(ref);
            for (int kk = 0; kk < 32; kk++) {
                const double t = (double)Af[r * 32 + kk] * Bf[kk * N + n];
                ref += t, mag += fabs(t);
            }
            const double e = fabs(D[r * N + n] - ref) / mag;
            worst = e == e ? fmax(worst, e) : INFINITY;
        }
    if (err != cudaSuccess) worst = INFINITY;
    *not_nan = 0;
    for (int i = 0; i < threads; i++) *not_nan += !std::isnan(before[i]);
    return worst;
}

/* a layout read wrong gives errors of the size of the terms; fp32 sums of 33 terms, in any order
 * and rounding, stay far below this */
static const double kWgTol = 1.0 / 16384;

/* The three configurations of the checks below. Where a check fails, wgmma_swap_diagnosis runs
 * it again with a descriptor given its two strides the other way round (LBO as SBO): the stride
 * order is the layout fact most likely to differ between the PTX ISA's text, as read here, and
 * the hardware, and a swap that gives the right product names the one line to change. The
 * strides are not symmetric, so where the unswapped read is right every swapped one is wrong:
 * simt_selftest checks that, which is what makes the diagnosis mean something. */
enum { WG_CFG_SS64, WG_CFG_RS128, WG_CFG_RS64, WG_CFGS };
static double wgmma_cfg_run(int cfg, int swap, int *not_nan, int scale_d = 1) {
    if (cfg == WG_CFG_SS64)
        return scale_d ? wgmma_run<64, false>(1, 1024, 128, 2048, 256, not_nan, 128, WG_OK, swap)
                       : wgmma_run<64, false>(0, 128, 512, 128, 1024, not_nan, 128, WG_OK, swap);
    if (cfg == WG_CFG_RS128)
        return wgmma_run<128, true>(1, 2048, 128, 4096, 128, not_nan, 128, WG_OK, swap);
    return wgmma_run<64, true>(1, 1024, 128, 2048, 256, not_nan, 128, WG_OK, swap);
}
/* the swaps that apply to cfg (bit 0: A's descriptor, only where A is in shared memory; bit 1:
 * B's) and what each names */
static int wgmma_cfg_swaps(int cfg) { return cfg == WG_CFG_SS64 ? 3 : 2; }
static const char *wgmma_swap_names(int cfg, int swap) {
    if (cfg == WG_CFG_SS64)
        return swap == 1 ? "A's descriptor only (K-major)"
                         : swap == 2 ? "B's descriptor only (K-major)"
                                     : "both descriptors (K-major)";
    return "B's descriptor (MN-major)";
}

/* Which swap of cfg (at scale_d) gives the right product, said in tap_diag lines, with the line
 * to change: a major read the other way is the same for every operand of that major, so for the
 * shared-memory check only the swap of both descriptors names wgmma_desc_kmajor; A's or B's alone
 * would mean the two are read differently, which no stride order explains. */
static void wgmma_swap_diagnosis(int cfg, int scale_d) {
    int right = 0, nn;
    for (int swap = 1; swap <= 3; swap++) {
        if ((swap & wgmma_cfg_swaps(cfg)) != swap) continue;
        const double e = wgmma_cfg_run(cfg, swap, &nn, scale_d);
        tap_diag("diagnosis: with LBO and SBO swapped in %s the worst error is %.1e: %s",
                 wgmma_swap_names(cfg, swap), e, e < kWgTol ? "RIGHT" : "wrong too");
        if (e < kWgTol) right |= 1 << swap;
    }
    const int whole = cfg == WG_CFG_SS64 ? 3 : 2; /* the swap of every operand of the major */
    if (right & (1 << whole))
        tap_diag("  the hardware reads the %s strides the other way round: swap the two fields "
                 "in kernels/cuda/cuda_ptx.h's %s (the attention kernels and this test build "
                 "their descriptors with it) and that major's reading in "
                 "kernels/cuda_simt/simt.cpp's wg_operands, then rebuild and pack again",
                 cfg == WG_CFG_SS64 ? "K-major" : "MN-major",
                 cfg == WG_CFG_SS64 ? "wgmma_desc_kmajor" : "wgmma_desc_mnmajor");
    else if (right)
        tap_diag("  only one operand's swap is right: A and B of one major read differently, "
                 "which no stride order explains; suspect the descriptors' start addresses or "
                 "this test's placement");
    else
        tap_diag("diagnosis: no swap of LBO and SBO gives the right product: suspect the "
                 "descriptor's encoding (cuda_ptx.h's wgmma_desc), the A fragment or the "
                 "accumulator layout (the D positions here and in simt.cpp's wg_d_pos)");
}

/* the three layout checks (tap_ok each): strides that are not the compact ones (core matrices
 * adjacent in K far apart, those adjacent in M or N next to each other), so a stride read as the
 * other fails; on the emulator also the accumulator read between issue and wait, NaN there
 * (undefined on a GPU: not checked). Then, for each failed check, the launch error if there was
 * one, else wgmma_swap_diagnosis: after all three, so that a diagnosis run that faults (and ends
 * the process) does not keep the later checks from running. */
static void wgmma_layout_checks(void) {
    int nn = 0, nn0 = 0;
    const double w1 = wgmma_cfg_run(WG_CFG_SS64, 0, &nn);
    const double w0 = wgmma_cfg_run(WG_CFG_SS64, 0, &nn0, 0);
#ifndef TCU_SIMT
    nn = nn0 = 0;
#endif
    tap_ok(w1 < kWgTol && w0 < kWgTol && nn == 0 && nn0 == 0,
           "wgmma m64n64k16 A and B from shared memory (K-major), two k16 products on one "
           "accumulator: D = C + A B within %.1e of double, and with scale-d 0 D = A B within "
           "%.1e (relative to the sum of |terms|, want < 2^-14); on the emulator the accumulator "
           "read between issue and wait is NaN (%d threads not)", w1, w0, nn + nn0);
    const double w2 = wgmma_cfg_run(WG_CFG_RS128, 0, &nn);
#ifndef TCU_SIMT
    nn = 0;
#endif
    tap_ok(w2 < kWgTol && nn == 0,
           "wgmma m64n128k16 A from registers (the mma.sync A fragment), B from shared memory "
           "MN-major (trans-b): D = C + A B within %.1e of double (relative, want < 2^-14); NaN "
           "before the wait on the emulator (%d threads not)", w2, nn);
    const double w3 = wgmma_cfg_run(WG_CFG_RS64, 0, &nn);
    tap_ok(w3 < kWgTol, "wgmma m64n64k16 A from registers, B MN-major: within %.1e of double "
           "(relative, want < 2^-14)", w3);

    if (!(w1 < kWgTol && w0 < kWgTol && w2 < kWgTol && w3 < kWgTol) && wg_launch_error[0]) {
        tap_diag("a launch failed, so the products say nothing of the layouts: %s",
                 wg_launch_error);
        return;
    }
    if (w1 < kWgTol && !(w0 < kWgTol))
        tap_diag("diagnosis: the K-major layouts read right with scale-d 1 and wrong with "
                 "scale-d 0: suspect the scale-d predicate (cuda_ptx.h's wgmma_ss), not a layout");
    else if (!(w1 < kWgTol))
        wgmma_swap_diagnosis(WG_CFG_SS64, 1);
    if (!(w2 < kWgTol)) wgmma_swap_diagnosis(WG_CFG_RS128, 1);
    if (!(w3 < kWgTol)) wgmma_swap_diagnosis(WG_CFG_RS64, 1);
}

#endif
