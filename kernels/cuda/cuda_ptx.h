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

#endif
