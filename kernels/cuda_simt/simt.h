/* simt.h — a CPU SIMT emulator for the CUDA kernels of kernels/cuda/: the kernels' own source,
 * compiled for the host (g++) and run thread by thread, so that a kernel's indexing, tiling,
 * barriers, warp shuffles and tensor-core fragment layouts are checked against the CPU oracle on
 * a machine without a GPU (tests/gpu/test_gpu_ops.c, linked as build/tests/test_gpu_ops_simt).
 * Unlike kernels/cuda_emu (an op-level stand-in that proves nothing about the kernels), this runs
 * the kernels themselves. It proves nothing about speed, the memory model or what the hardware
 * rounds differently (docs/cuda.md, "The SIMT emulator").
 *
 * How a kernel file gets here: tools/simt_cu.py rewrites its launches `k<<<g, b, smem, s>>>(args)`
 * into `tcu_simt::launch(k, g, b, smem, s)(args)` and `extern __shared__ T x[];` into a pointer to
 * the block's dynamic shared memory, and adds tcu_simt::shared_block_init after each static
 * `__shared__` declaration, keeping every line where it was; g++ then compiles it with
 * this header forced in first (-include) and TCU_SIMT defined (kernels/cuda/cuda_ptx.h takes its
 * emulated PTX wrappers then).
 *
 * The model:
 *   - a grid's blocks are dealt to TSR_SIMT_THREADS OS threads (default: the CPUs, at most 8),
 *     block b to thread b mod n, each running its blocks one after another (blocks never wait for
 *     each other on a GPU either); a block's threads are fibers on its OS thread, each with its
 *     own stack, running until it reaches a barrier, a warp collective or its end (cooperative:
 *     no two threads of a block run at once). A warp runs ahead as far as it can, to a block
 *     barrier, before the next warp starts, and every phase between barriers runs the warps in
 *     the block's order: warp 0 first when (block + launch) is even, the last warp first when
 *     odd (simt.cpp, switch_away). So shared memory one warp writes and another reads with no
 *     barrier between shows, in one of the two orders, as a read of NaN; a race inside a warp, or
 *     one whose values happen to agree, does not (compute-sanitizer's racecheck on a GPU);
 *   - __syncthreads waits for every thread of the block that has not exited; warp collectives
 *     (shuffles, reductions, ldmatrix, mma) need every lane of the warp present (a full warp of
 *     live threads: the emulator stops with a message otherwise, as the hardware's behaviour is
 *     undefined there) and the full mask;
 *   - a block whose threads all wait and none can go on is a deadlock: the emulator stops and says
 *     which barrier each thread waits at;
 *   - `__shared__` arrays are static thread_local storage, one copy shared by the threads of the
 *     block its OS thread runs; they and the dynamic shared memory are filled with 0xff bytes
 *     (NaN) at each block's start, so a read of shared memory nobody wrote shows; the dynamic
 *     part ends at an unmapped page, so an access past the size the launch asked for faults;
 *   - a cp.async destination is NaN bytes from the copy's issue to the cp.async.wait_group that
 *     completes its group, where the data lands: reading a tile before waiting for it, or
 *     refilling a buffer another warp still reads (a missing barrier), reads NaN;
 *   - a launch with more than 1024 threads, a grid past the hardware's limits, or more dynamic
 *     shared memory than cudaFuncSetAttribute allowed (48 KiB by default) fails as on a GPU:
 *     cudaGetLastError reports it and the kernel does not run. A GPU also counts the kernel's
 *     static __shared__ arrays: without the attribute, static + dynamic may not pass 48 KiB;
 *     with it, static + the attribute may not pass 227 KiB. The emulator learns the static size
 *     as a block's threads reach the declarations, so it stops the run there, naming both sizes;
 *   - a block may wait for another (a thread spinning on cuda_ptx.h's ld_acquire_gpu until the
 *     other's st_release_gpu: spin_wait_eq, which gives the OS thread away between loads and stops
 *     the run after 120 s): each OS thread runs its
 *     blocks one at a time, so a block that took its start ticket (an atomicAdd) is running or
 *     done, and a kernel whose blocks wait only for earlier tickets goes on.
 *     Blocks on different OS threads run at once: a missing wait shows as a race between them
 *     with TSR_SIMT_THREADS >= 2, by chance, not every time;
 *   - mma.sync m16n8k16 bf16 -> fp32 sums the 16 exact products in k order onto the accumulator
 *     (fmaf): the hardware's order and internal precision differ (tests compare with tolerances).
 */
#ifndef TSR_CUDA_SIMT_H
#define TSR_CUDA_SIMT_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <utility>

/* the device qualifiers mean nothing on the host */
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static thread_local
#define __launch_bounds__(...)

namespace tcu_simt {

/* the running thread's coordinates (set by the scheduler before it resumes a fiber; one set per
 * OS thread: blocks of a grid run on several, TSR_SIMT_THREADS) */
extern thread_local uint3 g_thread_idx, g_block_idx;
extern thread_local dim3 g_block_dim, g_grid_dim;

/* the running block's dynamic shared memory */
unsigned char *dynamic_smem();
/* a static __shared__ array (tools/simt_cu.py adds the call after its declaration): filled with
 * 0xff bytes by the first thread of each block that reaches the declaration, so a read of an
 * element this block never wrote shows (NaN, or -1 for integers) */
void shared_block_init(void *p, size_t bytes);

/* ---- warp collectives ---------------------------------------------------------------------- */

/* Every lane of the running thread's warp deposits `bytes` bytes (at most kSlotBytes) and waits
 * until all have; returns the 32 deposits (slot l at l * kSlotBytes), valid until this lane's next
 * collective. With `complete`, the last lane to arrive first calls it on the 32 slots (it may
 * rewrite them: a result per lane computed once for the warp). `what` names the collective in
 * error messages. */
constexpr int kSlotBytes = 64;
typedef void (*complete_fn)(unsigned char *slots);
const unsigned char *warp_exchange(const void *mine, size_t bytes, unsigned mask, const char *what,
                                   complete_fn complete = nullptr);
int lane_id();

template <class T> inline T warp_shfl(unsigned mask, T v, int src_lane, const char *what) {
    static_assert(sizeof(T) <= kSlotBytes, "a slot holds it");
    const unsigned char *all = warp_exchange(&v, sizeof v, mask, what);
    T r;
    memcpy(&r, all + (size_t)(src_lane & 31) * kSlotBytes, sizeof r);
    return r;
}

/* ---- barriers ------------------------------------------------------------------------------ */

/* __syncthreads with a predicate: returns the OR (kind 0), AND (1) or count (2) over the block */
int block_barrier(int pred, int kind);

/* ---- launching ----------------------------------------------------------------------------- */

/* runs body() as every thread of a grid (a failed launch runs nothing and sets the error
 * cudaGetLastError returns) */
typedef void (*body_fn)(void *ctx);
void run_grid(const void *kernel, dim3 grid, dim3 block, size_t smem, body_fn body, void *ctx);

template <class... P> struct Launcher {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    template <class... A> void operator()(A &&...a) const {
        std::tuple<P...> args(std::forward<A>(a)...); /* converted to the kernel's parameters */
        struct Ctx {
            void (*k)(P...);
            std::tuple<P...> *args;
        } ctx{kernel, &args};
        run_grid((const void *)kernel, grid, block, smem,
                 [](void *c) {
                     Ctx *x = static_cast<Ctx *>(c);
                     std::tuple<P...> copy = *x->args; /* by value, per thread, as on a GPU */
                     std::apply(x->k, copy);
                 },
                 &ctx);
    }
};
template <class... P>
Launcher<P...> launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem = 0,
                      cudaStream_t stream = nullptr) {
    (void)stream; /* every launch has finished when it returns */
    return Launcher<P...>{kernel, grid, block, smem};
}

/* ---- cp.async ------------------------------------------------------------------------------ */

void cp_async(void *sdst, const void *gsrc, int bytes, int src_bytes);
void cp_async_commit();
void cp_async_wait(int n);

/* ---- ldmatrix and mma ---------------------------------------------------------------------- */

/* ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: p is this lane's row address */
void ldmatrix_x4(uint32_t (&r)[4], const void *p, bool trans);
/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, c += a b */
void mma_m16n8k16_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

/* ---- wgmma (sm_90a): warpgroup tensor-core products, asynchronous ------------------------- */

/* A warpgroup is 4 consecutive warps (threads 128w .. 128w+127 of the block); every wgmma
 * instruction is a collective of its 128 threads (all present, none exited). The model:
 *   - wgmma_desc(p, lbo, sbo): a shared-memory matrix descriptor as the PTX ISA packs it (bits
 *     0-13: the address >> 4, 16-29: the leading byte offset >> 4, 32-45: the stride byte offset
 *     >> 4, 62-63: the swizzle mode, 0 here), the address being p's offset in the block's dynamic
 *     shared memory (a GPU's shared window); p must lie there, 16-byte aligned. Only the
 *     canonical layouts without swizzle: core matrices of 8 rows of 16 bytes, 128 contiguous
 *     bytes each, the leading byte offset the distance between core matrices adjacent in K, the
 *     stride byte offset between those adjacent in M or N. K-major: element (row r, k) at
 *     (r/8) sbo + (r%8) 16 + (k/8) lbo + (k%8) 2; MN-major (trans-b): element (k, n) at
 *     (n/8) sbo + (n%8) 2 + (k/8) lbo + (k%8) 16;
 *   - wgmma_mma(d, n, a, da, db, scale_d, trans_b): wgmma.mma_async m64nNk16 .f32.bf16.bf16,
 *     d (this thread's N/2 accumulators) = (scale_d ? d : 0) + A B. A (64 x 16) from registers
 *     (a: this thread's 4, the mma.sync A layout of its warp's 16 rows: warp w of the group owns
 *     rows 16w..16w+15) or, a == nullptr, from shared memory (da, K-major); B (16 x N) from
 *     shared memory (db; K-major, or MN-major with trans_b). D: thread (w, lane), g = lane/4,
 *     t = lane%4, element i: row 16w + g + 8 ((i%4) >= 2), column 8 (i/4) + 2t + (i%2);
 *   - asynchronous as on a GPU: the product is made at the wgmma_wait that completes its commit
 *     group; from the issue to that wait the accumulators hold NaN (a read before the wait
 *     shows). The run stops where a GPU's result would be undefined: the A registers, the shared
 *     memory the product reads, or an accumulator changed between the issue and that wait; an
 *     issue without a wgmma_fence since this thread's last commit or wait (the PTX rule is a
 *     fence between register accesses and the wgmma that uses them; the emulator asks for one
 *     before every batch, a stricter rule);
 *   - shared memory a product reads as the async proxy sees it (fence_proxy_async below);
 *   - wgmma_commit: the group's uncommitted products become one group; wgmma_wait(n): all but
 *     the n most recent groups complete, in issue order (a product on an accumulator still in
 *     flight adds to that product's result); a product never committed never completes;
 *   - the sum: each output element, the 16 products added in k order onto the accumulator (fmaf),
 *     as the emulated mma.sync. */
uint64_t wgmma_desc(const void *p, uint32_t lbo, uint32_t sbo);
void wgmma_fence();
/* fence.proxy.async.shared::cta: shared memory written by stores or cp.async becomes visible to
 * the wgmma (the async proxy) only after the writing thread's fence and a barrier. The model: the
 * block's dynamic shared memory is published to the async proxy when every live thread of the
 * block has executed fence_proxy_async since the last publication, and again at each later
 * fence in the same barrier phase (a stricter rule than the PTX ISA's, which asks it of the
 * writing threads only: it rules out warpgroups that fence on their own schedules, such as
 * FlashAttention-3's producer warps or ping-pong, which would need a per-thread model; the kernels
 * here fence in every thread, once a phase); a wgmma whose operands differ from the last
 * publication (the 0xff fill before the first) stops the run. It catches a fence missing in some
 * or all threads, and stores of the last thread to fence that came after its fence. It compares
 * values and cannot tell which thread wrote a byte, so it misses: a store by a thread after its
 * own fence while another has yet to fence; a store that leaves the value as it was; a thread
 * that stores and exits without fencing (its exit drops it from the count). A wgmma issued in
 * the barrier phase of the publication it reads (no barrier between the fences and it) stops the
 * run too. */
void fence_proxy_async();
void wgmma_mma(float *d, int n, const uint32_t *a, uint64_t da, uint64_t db, bool scale_d,
               bool trans_b);
void wgmma_commit();
void wgmma_wait(int n);

/* ---- waiting for another block ------------------------------------------------------------ */

/* cuda_ptx.h's spin_wait_eq: until *p == want (acquire loads), giving the OS thread away between
 * loads (the block waited for, one that started earlier, runs on another); a wait past 120 s
 * stops the run naming `what` */
void spin_wait_eq(const int *p, int want, const char *what);

} // namespace tcu_simt

/* cuda_runtime.h's typed overload, which host-only code does not get: a kernel pointer for the
 * untyped one (simt.cpp) */
template <class T>
inline cudaError_t cudaFuncSetAttribute(T *entry, enum cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void *)entry, attr, value);
}

#define threadIdx (tcu_simt::g_thread_idx)
#define blockIdx (tcu_simt::g_block_idx)
#define blockDim (tcu_simt::g_block_dim)
#define gridDim (tcu_simt::g_grid_dim)

/* ---- the device builtins the kernels use --------------------------------------------------- */

inline void __syncthreads() { tcu_simt::block_barrier(0, 0); }
inline int __syncthreads_or(int p) { return tcu_simt::block_barrier(p != 0, 0); }
inline int __syncthreads_and(int p) { return tcu_simt::block_barrier(p != 0, 1); }
inline int __syncthreads_count(int p) { return tcu_simt::block_barrier(p != 0, 2); }
/* integer atomics over every OS thread (blocks run on several) */
inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }

/* a fence over every OS thread (blocks run on several) */
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    (void)tcu_simt::warp_exchange(nullptr, 0, mask, "__syncwarp");
}

template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    const int lane = tcu_simt::lane_id();
    return tcu_simt::warp_shfl(mask, v, (lane & ~(width - 1)) + (src & (width - 1)), "__shfl_sync");
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int o, int width = 32) {
    const int lane = tcu_simt::lane_id(), src = lane ^ o;
    /* a source in a later width-group gives the lane's own value (earlier groups are read) */
    const int s = (src & ~(width - 1)) > (lane & ~(width - 1)) ? lane : src;
    return tcu_simt::warp_shfl(mask, v, s, "__shfl_xor_sync");
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
    const int lane = tcu_simt::lane_id(), src = lane + (int)d;
    const int s = (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : lane;
    return tcu_simt::warp_shfl(mask, v, s, "__shfl_down_sync");
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
    const int lane = tcu_simt::lane_id(), src = lane - (int)d;
    const int s = src >= (lane & ~(width - 1)) ? src : lane;
    return tcu_simt::warp_shfl(mask, v, s, "__shfl_up_sync");
}

namespace tcu_simt {
template <class T, class F> inline T warp_reduce(unsigned mask, T v, F f, const char *what) {
    const unsigned char *all = warp_exchange(&v, sizeof v, mask, what);
    T r;
    memcpy(&r, all, sizeof r);
    for (int l = 1; l < 32; l++) {
        T x;
        memcpy(&x, all + (size_t)l * kSlotBytes, sizeof x);
        r = f(r, x);
    }
    return r;
}
} // namespace tcu_simt
inline int __reduce_max_sync(unsigned mask, int v) {
    return tcu_simt::warp_reduce(mask, v, [](int a, int b) { return a > b ? a : b; },
                                 "__reduce_max_sync");
}
inline int __reduce_min_sync(unsigned mask, int v) {
    return tcu_simt::warp_reduce(mask, v, [](int a, int b) { return a < b ? a : b; },
                                 "__reduce_min_sync");
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned v) {
    return tcu_simt::warp_reduce(mask, v, [](unsigned a, unsigned b) { return a > b ? a : b; },
                                 "__reduce_max_sync");
}
inline unsigned __reduce_min_sync(unsigned mask, unsigned v) {
    return tcu_simt::warp_reduce(mask, v, [](unsigned a, unsigned b) { return a < b ? a : b; },
                                 "__reduce_min_sync");
}
inline int __reduce_add_sync(unsigned mask, int v) {
    return tcu_simt::warp_reduce(mask, v, [](int a, int b) { return a + b; }, "__reduce_add_sync");
}
inline unsigned __ballot_sync(unsigned mask, int p) {
    const unsigned bit = p ? 1u << tcu_simt::lane_id() : 0u;
    return tcu_simt::warp_reduce(mask, bit, [](unsigned a, unsigned b) { return a | b; },
                                 "__ballot_sync");
}
inline int __any_sync(unsigned mask, int p) { return __ballot_sync(mask, p) != 0; }
inline int __all_sync(unsigned mask, int p) { return __ballot_sync(mask, p) == 0xffffffffu; }

/* cache-hinted global loads and stores (L2 only on a GPU): plain ones here */
template <class T> inline T __ldcg(const T *p) { return *p; }
template <class T> inline void __stcg(T *p, T v) { *p = v; }

/* bit casts (math_constants.h's CUDART_INF_F and CUDART_NAN_F are made with __int_as_float) */
inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
inline int __float_as_int(float f) {
    int i;
    memcpy(&i, &f, sizeof i);
    return i;
}
inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* the device's integer max/min (CUDA's math_functions overloads; absent in host code) */
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }

#endif
