/* cuda_ptx.h — the PTX instructions the tensor-core kernels use (cuda_attention.cu), each wrapped
 * in one inline function: cp.async (16-byte global -> shared copies), ldmatrix (8x8 b16 matrices
 * from shared memory into mma fragments), mma.sync m16n8k16 bf16 -> fp32 (sm_80 and sm_90a), and
 * the acquire/release pair one block uses to wait for another's turn (the fused dq of the
 * attention backward).
 * Built with TCU_SIMT (the CPU SIMT emulator, kernels/cuda_simt/simt.h), the same functions run
 * the emulator's versions, which follow the PTX ISA's fragment layouts written below. */
#ifndef TSR_CUDA_PTX_H
#define TSR_CUDA_PTX_H

#include <stdint.h>
#include <stdio.h>

#include <cuda_bf16.h>

#ifndef TCU_SIMT
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
#endif

/* 16 bytes global -> shared, asynchronous; src_bytes 0 writes zeros (reads nothing) */
__device__ __forceinline__ void cp_async16(void *sdst, const void *gsrc, int src_bytes) {
#ifdef TCU_SIMT
    tcu_simt::cp_async(sdst, gsrc, 16, src_bytes);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(sdst)),
                 "l"(gsrc), "r"(src_bytes)
                 : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifdef TCU_SIMT
    tcu_simt::cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
/* wait until at most N of this thread's committed groups are still in flight */
template <int N> __device__ __forceinline__ void cp_async_wait() {
#ifdef TCU_SIMT
    tcu_simt::cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
/* four 8x8 b16 matrices; lanes 8m..8m+7 address the rows of matrix m; thread l gets of each
 * matrix row l/4, columns 2(l%4), 2(l%4)+1 (.trans: rows 2(l%4), 2(l%4)+1 of column l/4) */
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const __nv_bfloat16 *p) {
#ifdef TCU_SIMT
    tcu_simt::ldmatrix_x4(r, p, false);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p))
                 : "memory");
#endif
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const __nv_bfloat16 *p) {
#ifdef TCU_SIMT
    tcu_simt::ldmatrix_x4(r, p, true);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p))
                 : "memory");
#endif
}
/* c (16x8 fp32) += a (16x16 bf16, row) * b (16x8 bf16, col). Fragments (g = lane/4, t = lane%4):
 * a = {A[g][2t..], A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]}, b = {B[2t..][g], B[2t+8..][g]},
 * c = {C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1]} */
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
#ifdef TCU_SIMT
    tcu_simt::mma_m16n8k16_bf16(c, a, b0, b1);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* *p, loaded with acquire semantics at GPU scope: what the block that released the value wrote
 * before its release is visible after it (to this thread, and to its block after a barrier) */
__device__ __forceinline__ int ld_acquire_gpu(const int *p) {
#ifdef TCU_SIMT
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#else
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
#endif
}
/* *p = v with release semantics at GPU scope (after a barrier: the block's earlier writes too) */
__device__ __forceinline__ void st_release_gpu(int *p, int v) {
#ifdef TCU_SIMT
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
#else
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
#endif
}
#ifndef TCU_SIMT
/* spin_wait_eq's way out, kept out of line (printf's frame and registers stay off the kernels) */
static __device__ __noinline__ void spin_wait_timeout(const char *what, int have, int want) {
    printf("tessera: %s: waited 10 s for a turn that did not come (have %d, want %d)\n", what, have,
           want);
    __trap();
}
#endif
/* The calling thread waits until *p == want (acquire loads). A block may only wait for blocks
 * that have already started (an earlier start ticket: the fused dq's rule), so a wait of more
 * than about 10 s cannot be a legitimate one: instead of hanging the kernel it stops it (a
 * message naming `what`, then a trap; the error shows at the stream's next synchronising call,
 * which names its own op). */
__device__ __forceinline__ void spin_wait_eq(const int *p, int want, const char *what) {
#ifdef TCU_SIMT
    tcu_simt::spin_wait_eq(p, want, what);
#else
    const long long t0 = clock64();
    while (ld_acquire_gpu(p) != want) {
        __nanosleep(64);
        if (clock64() - t0 > 20000000000LL) /* 10 s at 2 GHz */
            spin_wait_timeout(what, ld_acquire_gpu(p), want);
    }
#endif
}

/* ---- wgmma (sm_90a): warpgroup tensor-core products ------------------------------------------
 * A warpgroup (4 consecutive warps, 128 threads) multiplies a 64 x 16 A by a 16 x N B into a
 * 64 x N fp32 accumulator spread over its registers: thread (warp w, lane l), g = l/4, t = l%4,
 * holds d[j][e] = D[16w + g + 8 (e >= 2)][8j + 2t + (e & 1)], the mma.sync layout of its warp's
 * 16 rows for each 8 columns. A comes from registers (the mma.sync A fragment of the warp's 16
 * rows) or from shared memory; B from shared memory, both through matrix descriptors
 * (wgmma_desc_kmajor, wgmma_desc_mnmajor). Asynchronous: wgmma_fence before a batch (the
 * registers it reads or accumulates were written by ordinary instructions), wgmma_commit after
 * it, wgmma_wait<N> before reading the accumulators or changing the A registers or the shared
 * memory read. Shared memory written by
 * ordinary stores or cp.async is made visible to the wgmma (the async proxy) by
 * fence_proxy_async in each writing thread, then a barrier.
 * Only the layouts without swizzle (kernels/cuda_simt/simt.h has the byte formulas): core matrices
 * of 8 rows x 16 bytes, 128 contiguous bytes each; lbo the byte distance between core matrices
 * adjacent in K, sbo between those adjacent in M or N. These exist on sm_90a only: elsewhere (the
 * sm_80 build) they trap, and the host launches the kernels using them on a 9.0 device only. */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TCU_WGMMA_ASM 1
#endif

__device__ __forceinline__ uint64_t wgmma_desc(const void *p, uint32_t lbo, uint32_t sbo) {
#ifdef TCU_SIMT
    return tcu_simt::wgmma_desc(p, lbo, sbo);
#else
    return (uint64_t)((smem_u32(p) & 0x3ffffu) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
           ((uint64_t)(sbo >> 4) << 32);
#endif
}
/* The descriptor of an operand without swizzle from its two strides in bytes: k_bytes between
 * core matrices adjacent in K, mn_bytes between those adjacent in M or N. The one place that says
 * which stride goes in which field, for each major: the PTX ISA's canonical layouts (in CuTe
 * notation K-major ((8,m),(T,2k)):((1T,SBO),(1,LBO)),
 * MN-major ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)))
 * put the K stride in the leading byte offset for both. If the hardware reads a major the other
 * way (test_wgmma_gpu's swap diagnosis says so), that major's line changes here, and with it the
 * emulator's reading of that major in kernels/cuda_simt/simt.cpp (wg_operands). */
__device__ __forceinline__ uint64_t wgmma_desc_kmajor(const void *p, uint32_t k_bytes,
                                                      uint32_t mn_bytes) {
    return wgmma_desc(p, k_bytes, mn_bytes);
}
__device__ __forceinline__ uint64_t wgmma_desc_mnmajor(const void *p, uint32_t k_bytes,
                                                       uint32_t mn_bytes) {
    return wgmma_desc(p, k_bytes, mn_bytes);
}
__device__ __forceinline__ void wgmma_fence() {
#if defined(TCU_SIMT)
    tcu_simt::wgmma_fence();
#elif defined(TCU_WGMMA_ASM)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(TCU_SIMT)
    tcu_simt::wgmma_commit();
#elif defined(TCU_WGMMA_ASM)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}
template <int N> __device__ __forceinline__ void wgmma_wait() {
#if defined(TCU_SIMT)
    tcu_simt::wgmma_wait(N);
#elif defined(TCU_WGMMA_ASM)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
}
/* this thread's earlier shared-memory writes (st.shared, cp.async once waited for) visible to the
 * async proxy (the wgmma's reads); a barrier after it makes the block's visible */
__device__ __forceinline__ void fence_proxy_async() {
#if defined(TCU_SIMT)
    tcu_simt::fence_proxy_async();
#elif defined(TCU_WGMMA_ASM)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/* the compiler may not move this thread's reads or writes of d across this point (the wgmma
 * writes d behind its back: before a batch and after its wait) */
template <int NT> __device__ __forceinline__ void wgmma_fence_operand(float (&d)[NT][4]) {
#ifndef TCU_SIMT
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(d[j][e])::"memory");
#else
    (void)d;
#endif
}

/* the accumulator operands of a wgmma asm: d[j][e] in the order of the PTX fragment, 16, 32 or
 * 64 of them ("+f": read, accumulated, written) */
#define TCU_WG_ACC4(d, j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define TCU_WG_ACC16(d) TCU_WG_ACC4(d, 0), TCU_WG_ACC4(d, 1), TCU_WG_ACC4(d, 2), TCU_WG_ACC4(d, 3)
#define TCU_WG_ACC32(d) \
    TCU_WG_ACC16(d), TCU_WG_ACC4(d, 4), TCU_WG_ACC4(d, 5), TCU_WG_ACC4(d, 6), TCU_WG_ACC4(d, 7)
#define TCU_WG_ACC64(d) \
    TCU_WG_ACC32(d), TCU_WG_ACC4(d, 8), TCU_WG_ACC4(d, 9), TCU_WG_ACC4(d, 10), TCU_WG_ACC4(d, 11), \
        TCU_WG_ACC4(d, 12), TCU_WG_ACC4(d, 13), TCU_WG_ACC4(d, 14), TCU_WG_ACC4(d, 15)

/* d (64 x N) = (scale_d ? d : 0) + A B: A 64 x 16 from shared memory (da, K-major), B 16 x N from
 * shared memory (db, K-major: B[k][n] at row n, column k); N = 32 or 64 */
template <int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t da, uint64_t db,
                                         int scale_d) {
    static_assert(N == 32 || N == 64, "the shapes the kernels use");
#if defined(TCU_SIMT)
    tcu_simt::wgmma_mma(&d[0][0], N, nullptr, da, db, scale_d != 0, false);
#elif defined(TCU_WGMMA_ASM)
    if constexpr (N == 32) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
                     "%12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                     : TCU_WG_ACC16(d)
                     : "l"(da), "l"(db), "r"(scale_d));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
                     "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
                     "%24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : TCU_WG_ACC32(d)
                     : "l"(da), "l"(db), "r"(scale_d));
    }
#elif defined(__CUDA_ARCH__)
    (void)d, (void)da, (void)db, (void)scale_d;
    __trap();
#endif
}

/* d (64 x N) = (scale_d ? d : 0) + A B: A 64 x 16 from this thread's registers a (the mma.sync A
 * fragment of its warp's 16 rows), B 16 x N from shared memory (db, MN-major: B[k][n] at row k,
 * column n, the transpose bit set); N = 64 or 128 */
template <int N>
__device__ __forceinline__ void wgmma_rs_mn(float (&d)[N / 8][4], const uint32_t (&a)[4],
                                            uint64_t db, int scale_d) {
    static_assert(N == 64 || N == 128, "the shapes the kernels use");
#if defined(TCU_SIMT)
    tcu_simt::wgmma_mma(&d[0][0], N, a, 0, db, scale_d != 0, true);
#elif defined(TCU_WGMMA_ASM)
    if constexpr (N == 64) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
                     "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
                     "%24, %25, %26, %27, %28, %29, %30, %31}, "
                     "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                     : TCU_WG_ACC32(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
                     "%12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, "
                     "%24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
                     "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, "
                     "%60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                     : TCU_WG_ACC64(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
    }
#elif defined(__CUDA_ARCH__)
    (void)d, (void)a, (void)db, (void)scale_d;
    __trap();
#endif
}

#endif
