/* simt_selftest.cu — the SIMT emulator's own primitives (kernels/cuda_simt/) against what the CUDA
 * programming guide and the PTX ISA define, independently of any tessera kernel: built like a
 * kernel file (tools/simt_cu.py, then g++ with simt.h) into build/tests/test_simt_selftest.
 * test_gpu_ops_simt trusts these: the shuffles and reductions, the barrier predicates, ldmatrix
 * and mma.sync's fragment layouts (each element placed by the ISA's formula, written out here),
 * cp.async's completion at wait_group, static shared memory per block on several OS threads, a
 * race between warps and a static array's leftover shown as NaN, an overrun of dynamic shared
 * memory faulting, and the failures a GPU would show (a launch past the limits, too much dynamic
 * shared memory) or leave undefined (a deadlock, a collective with a lane gone), each stopping the
 * run (in a child process) with its message.
 */
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_ptx.h"
#include "tap.h"
#include "gpu/wgmma_layouts.cuh"

typedef __nv_bfloat16 bf16;

/* ---- shuffles, warp reductions, barrier predicates ------------------------------------------ */

/* out[t*8 + k]: thread t's results (two warps) */
__global__ void collectives_kernel(int *out) {
    const int t = threadIdx.x, lane = t & 31;
    const int v = 100 * t + 7;
    int *o = out + t * 8;
    o[0] = __shfl_xor_sync(0xffffffffu, v, 5);
    o[1] = __shfl_sync(0xffffffffu, v, 9);
    o[2] = __shfl_down_sync(0xffffffffu, v, 3);
    o[3] = __shfl_up_sync(0xffffffffu, v, 4);
    o[4] = __reduce_max_sync(0xffffffffu, (lane * 37) % 32);
    o[5] = __reduce_min_sync(0xffffffffu, 50 - lane);
    o[6] = (int)__ballot_sync(0xffffffffu, lane % 3 == 0);
    o[7] = __syncthreads_count(t % 3 == 0) * 4 + __syncthreads_or(t == 77) * 2 +
           __syncthreads_and(t < 1000);
}

/* ---- ldmatrix and mma ----------------------------------------------------------------------- */

/* four 8x8 bf16 matrices in shared memory (rows of 8, matrix m's row r at (8m + r) * 8 + pad),
 * value m*64 + r*8 + c; out[l*8 + m*2 + h]: lane l's register m, half h, by ldmatrix (trans: 1) */
template <bool TRANS> __global__ void ldmatrix_kernel(float *out) {
    __shared__ __align__(16) bf16 s[32 * 16]; /* row stride 16 bf16: rows 16-byte aligned */
    const int l = threadIdx.x;
    for (int i = l; i < 32 * 16; i += 32) {
        const int row = i / 16, c = i % 16;
        s[i] = __float2bfloat16_rn(c < 8 ? (float)(row * 8 + c) : -1.0f);
    }
    __syncthreads();
    uint32_t r[4];
    if (TRANS)
        ldsm_x4_trans(r, s + l * 16); /* lane l addresses row l (matrix l/8, row l%8) */
    else
        ldsm_x4(r, s + l * 16);
    for (int m = 0; m < 4; m++)
        for (int h = 0; h < 2; h++) {
            const uint16_t b = (uint16_t)(h ? r[m] >> 16 : r[m] & 0xffffu);
            out[l * 8 + m * 2 + h] = __bfloat162float(__ushort_as_bfloat16(b));
        }
}

/* D = A B + C, A (16x16), B (16x8) bf16, C, D (16x8) fp32, row-major in global memory; each lane
 * builds its fragments from the ISA's formulas (g = lane/4, t = lane%4) */
__global__ void mma_kernel(float *D, const bf16 *A, const bf16 *B, const float *C) {
    const int l = threadIdx.x, g = l / 4, t = l % 4;
    auto pk = [](bf16 lo, bf16 hi) {
        return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
    };
    const uint32_t a[4] = {pk(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]),
                           pk(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]),
                           pk(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]),
                           pk(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9])};
    const uint32_t b0 = pk(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]);
    const uint32_t b1 = pk(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
    float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t],
                  C[(g + 8) * 8 + 2 * t + 1]};
    mma_bf16(c, a, b0, b1);
    D[g * 8 + 2 * t] = c[0], D[g * 8 + 2 * t + 1] = c[1];
    D[(g + 8) * 8 + 2 * t] = c[2], D[(g + 8) * 8 + 2 * t + 1] = c[3];
}

/* ---- cp.async ------------------------------------------------------------------------------- */

/* thread t copies 16 bytes of src (and, with src-size 0, zeros) into shared memory; out[t*3 + 0]:
 * the first word before any wait (the dynamic shared memory's fill, 0xffffffff); + 1: after
 * wait_group 1 (its first group complete, the second not); + 2: after wait_group 0 */
__global__ void cp_async_kernel(unsigned *out, const unsigned *src) {
    extern __shared__ __align__(16) unsigned char dyn[];
    unsigned *s = reinterpret_cast<unsigned *>(dyn);
    const int t = threadIdx.x;
    cp_async16(s + t * 8, src + t * 4, 16);
    cp_async_commit();
    cp_async16(s + t * 8 + 4, src + t * 4, 0);
    cp_async_commit();
    out[t * 3] = s[t * 8];
    cp_async_wait<1>();
    out[t * 3 + 1] = s[t * 8] + s[t * 8 + 4]; /* the second copy not landed: still 0xffffffff */
    cp_async_wait<0>();
    out[t * 3 + 2] = s[t * 8 + 4];
}

/* ---- blocks on several OS threads, static shared memory ------------------------------------ */

__global__ void blocks_kernel(int *out) {
    __shared__ int sum[1];
    if (threadIdx.x == 0) sum[0] = 0;
    __syncthreads();
    for (unsigned i = 0; i < blockDim.x; i++) { /* threads take turns (fibers: any order) */
        if (threadIdx.x == i) sum[0] += (int)(blockIdx.x + 1);
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = sum[0];
}

/* ---- shared memory races and leftovers ------------------------------------------------------ */

/* warp 0 writes its value for warp 1, and warp 1 reads it, with no barrier between (a race);
 * out[b]: what warp 1 read in block b */
__global__ void race_kernel(unsigned *out) {
    __shared__ unsigned v[1];
    if (threadIdx.x == 0) v[0] = 1234u;
    const unsigned seen = __shfl_sync(0xffffffffu, v[0], 0); /* a collective: warps interleave */
    if (threadIdx.x == 32) out[blockIdx.x] = seen;
}

/* a static __shared__ element (and a scalar) this block never wrote (block 0 did: with more blocks
 * than OS threads, some later block runs on block 0's OS thread) */
__global__ void leftover_kernel(unsigned *out) {
    __shared__ unsigned v[2], w;
    if (blockIdx.x == 0 && threadIdx.x == 0) v[1] = 99u, w = 98u;
    __syncthreads();
    if (threadIdx.x == 0) out[2 * blockIdx.x] = v[1], out[2 * blockIdx.x + 1] = w;
}

/* warps 0 and 1 of 4 race after a barrier: warp 0 writes, warp 1 reads (no barrier between);
 * out[b]: what warp 1 read in block b */
__global__ void race_after_barrier_kernel(unsigned *out) {
    __shared__ unsigned v[1];
    __syncthreads();
    if (threadIdx.x == 0) v[0] = 4321u;
    const unsigned seen = __shfl_sync(0xffffffffu, v[0], 0);
    if (threadIdx.x == 32) out[blockIdx.x] = seen;
}

/* one byte past the dynamic shared memory the launch asked for */
__global__ void overrun_kernel(unsigned *out) {
    extern __shared__ __align__(16) unsigned char dyn[];
    if (threadIdx.x == 0) out[0] = dyn[4096];
}

/* ---- what a GPU leaves undefined: stopped with a message ------------------------------------ */

__global__ void deadlock_kernel(int *out) {
    if (threadIdx.x == 0)
        __syncthreads(); /* lane 0 at the block barrier, its warp at a shuffle: nobody goes on */
    else
        out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

__global__ void lane_gone_kernel(int *out) {
    if (threadIdx.x == 5) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

__global__ void big_smem_kernel(int *out) {
    extern __shared__ __align__(16) unsigned char dyn[];
    dyn[threadIdx.x] = (unsigned char)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = dyn[(threadIdx.x + 1) % 64];
}

/* 1 KiB of static shared memory beside the dynamic part; Tag makes kernels of their own (the
 * attribute is per kernel) */
template <int Tag> __global__ void static_smem_kernel(int *out) {
    __shared__ int st[256];
    extern __shared__ __align__(16) unsigned char dyn[];
    st[threadIdx.x] = (int)threadIdx.x;
    dyn[threadIdx.x] = 1;
    __syncthreads();
    out[threadIdx.x] = st[(threadIdx.x + 1) % 64] + dyn[threadIdx.x];
}

/* runs fn in a child process (no core file); true when a signal killed it */
template <class F> static bool child_killed(F fn) {
    const pid_t pid = fork();
    if (pid == 0) {
        const struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        fn();
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st);
}

/* runs fn in a child process; true when it exited with status 1 and stderr holds `want` */
template <class F> static bool child_fails_with(F fn, const char *want, std::string *err) {
    int pipefd[2];
    if (pipe(pipefd) != 0) return false;
    const pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        dup2(pipefd[1], 2);
        fn();
        _exit(0);
    }
    close(pipefd[1]);
    char buf[4096];
    ssize_t n;
    err->clear();
    while ((n = read(pipefd[0], buf, sizeof buf)) > 0) err->append(buf, (size_t)n);
    close(pipefd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 1 && err->find(want) != std::string::npos;
}

static float host_bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

int main() {
    tap_plan(22);

    /* 1, 2: collectives */
    std::vector<int> out(64 * 8, -1);
    collectives_kernel<<<1, 64>>>(out.data());
    int bad = 0;
    for (int t = 0; t < 64; t++) {
        const int lane = t % 32, w = t / 32 * 32;
        auto v = [](int th) { return 100 * th + 7; };
        const int want[6] = {v(w + (lane ^ 5)), v(w + 9), v(w + (lane + 3 < 32 ? lane + 3 : lane)),
                             v(w + (lane >= 4 ? lane - 4 : lane)), 31, 50 - 31};
        for (int k = 0; k < 6; k++) bad += out[t * 8 + k] != want[k];
        bad += (unsigned)out[t * 8 + 6] != 0x49249249u; /* lanes 0, 3, ..., 30 */
    }
    tap_ok(bad == 0, "shuffles (xor, indexed, down, up: the own value past the warp's edge), "
           "__reduce_max/min_sync, __ballot_sync over two warps (%d wrong)", bad);
    bad = 0;
    for (int t = 0; t < 64; t++) bad += out[t * 8 + 7] != 22 * 4 + 0 * 2 + 1;
    tap_ok(bad == 0, "__syncthreads_count (22 of 64), _or (nobody), _and (everybody) (%d wrong)",
           bad);

    /* 3, 4: ldmatrix: lane l, register m, half h: row l/4, column 2(l%4)+h of matrix m; .trans:
     * row 2(l%4)+h, column l/4 */
    for (int trans = 0; trans < 2; trans++) {
        std::vector<float> r(32 * 8, NAN);
        if (trans)
            ldmatrix_kernel<true><<<1, 32>>>(r.data());
        else
            ldmatrix_kernel<false><<<1, 32>>>(r.data());
        bad = 0;
        for (int l = 0; l < 32; l++)
            for (int m = 0; m < 4; m++)
                for (int h = 0; h < 2; h++) {
                    const int row = trans ? 2 * (l % 4) + h : l / 4;
                    const int col = trans ? l / 4 : 2 * (l % 4) + h;
                    bad += r[l * 8 + m * 2 + h] != (float)((8 * m + row) * 8 + col);
                }
        tap_ok(bad == 0, "ldmatrix.x4%s: every lane's registers as the PTX ISA places them (%d wrong)",
               trans ? ".trans" : "", bad);
    }

    /* 5: mma against double sums of the same bf16 values */
    std::vector<bf16> A(256), B(128);
    std::vector<float> Af(256), Bf(128), C(128), D(128);
    unsigned seed = 12345;
    auto rnd = [&seed]() {
        seed = seed * 1103515245u + 12345u;
        return (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    };
    for (int i = 0; i < 256; i++) Af[i] = host_bf16_round(rnd()), A[i] = __float2bfloat16_rn(Af[i]);
    for (int i = 0; i < 128; i++) Bf[i] = host_bf16_round(rnd()), B[i] = __float2bfloat16_rn(Bf[i]);
    for (int i = 0; i < 128; i++) C[i] = rnd();
    mma_kernel<<<1, 32>>>(D.data(), A.data(), B.data(), C.data());
    double worst = 0;
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            double ref = C[r * 8 + n];
            for (int k = 0; k < 16; k++) ref += (double)Af[r * 16 + k] * Bf[k * 8 + n];
            worst = fmax(worst, fabs(D[r * 8 + n] - ref));
        }
    tap_ok(worst < 1e-5, "mma.m16n8k16 bf16 -> fp32 with fragments built by the ISA's formulas: "
           "D = A B + C within %.1e of double (want < 1e-5)", worst);

    /* 6: cp.async */
    std::vector<unsigned> src(64 * 4), got(64 * 3, 0);
    for (int i = 0; i < 64 * 4; i++) src[i] = 0x1000u + (unsigned)i;
    cp_async_kernel<<<1, 64, 64 * 32>>>(got.data(), src.data());
    bad = 0;
    for (int t = 0; t < 64; t++)
        bad += got[t * 3] != 0xffffffffu || got[t * 3 + 1] != src[t * 4] + 0xffffffffu ||
               got[t * 3 + 2] != 0;
    tap_ok(bad == 0, "cp.async: shared memory unchanged until its group's wait_group (0xff fill), "
           "the copy after wait_group 1, src-size 0 zeros after wait_group 0 (%d threads wrong)",
           bad);

    /* 7: 200 blocks of 96 threads, static shared memory per block, on the OS threads */
    std::vector<int> sums(200, -1);
    blocks_kernel<<<200, 96>>>(sums.data());
    bad = 0;
    for (int b = 0; b < 200; b++) bad += sums[b] != 96 * (b + 1);
    tap_ok(bad == 0, "200 blocks: each block's __shared__ sum of its 96 threads' turns (%d wrong)",
           bad);

    /* 8: launches past the limits fail as on a GPU, and run nothing */
    std::vector<int> o(1100, 7);
    (void)cudaGetLastError();
    big_smem_kernel<<<1, 1056, 64>>>(o.data());
    const cudaError_t e1 = cudaGetLastError();
    big_smem_kernel<<<1, 64, 49 * 1024>>>(o.data());
    const cudaError_t e2 = cudaGetLastError();
    const bool untouched = o[0] == 7 && o[63] == 7;
    cudaFuncSetAttribute((const void *)big_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         49 * 1024);
    big_smem_kernel<<<1, 64, 49 * 1024>>>(o.data());
    const cudaError_t e3 = cudaGetLastError();
    tap_ok(e1 != cudaSuccess && e2 != cudaSuccess && untouched && e3 == cudaSuccess && o[0] == 1 &&
               o[63] == 0,
           "1056 threads a block: %s; 49 KiB of dynamic shared memory: %s, nothing run; after "
           "cudaFuncSetAttribute: %s, run",
           cudaGetErrorString(e1), cudaGetErrorString(e2), cudaGetErrorString(e3));

    /* 9, 10: undefined on a GPU, stopped here */
    std::string err;
    bool ok = child_fails_with([] {
        std::vector<int> x(32);
        deadlock_kernel<<<1, 32>>>(x.data());
    }, "deadlock", &err);
    tap_ok(ok, "a deadlock (lane 0 at __syncthreads, the rest at a shuffle) stops the run, exit 1, "
           "naming it");
    if (!ok) tap_diag("stderr: %s", err.c_str());
    ok = child_fails_with([] {
        std::vector<int> x(32);
        lane_gone_kernel<<<1, 32>>>(x.data());
    }, "a full mask needs all 32", &err);
    tap_ok(ok, "a shuffle after lane 5 returned stops the run, exit 1, naming the collective");
    if (!ok) tap_diag("stderr: %s", err.c_str());

    /* 11: the emulator's barrier counts: a grid whose blocks would see a stale barrier otherwise */
    std::vector<int> sums2(3, -1);
    blocks_kernel<<<3, 1024>>>(sums2.data());
    tap_ok(sums2[0] == 1024 && sums2[1] == 2048 && sums2[2] == 3072,
           "3 blocks of 1024 threads (1024 barriers each): sums %d %d %d (want 1024 2048 3072)",
           sums2[0], sums2[1], sums2[2]);

    /* 12-15: shared memory: a race between warps, a static array's leftover, a race after a
     * barrier, an overrun */
    std::vector<unsigned> seen(2, 0);
    race_kernel<<<2, 64>>>(seen.data());
    tap_ok((seen[0] == 1234u && seen[1] == 0xffffffffu) ||
               (seen[1] == 1234u && seen[0] == 0xffffffffu),
           "warp 1 reads warp 0's shared write with no barrier: the block where warp 0 ran ahead "
           "reads 1234, the other the NaN fill 0xffffffff (read 0x%08x and 0x%08x)", seen[0],
           seen[1]);
    std::vector<unsigned> left(2 * 17, 0);
    leftover_kernel<<<17, 32>>>(left.data());
    bad = 0;
    for (int b = 1; b < 17; b++) bad += left[2 * b] != 0xffffffffu || left[2 * b + 1] != 0xffffffffu;
    tap_ok(left[0] == 99u && left[1] == 98u && bad == 0,
           "a static __shared__ array element and scalar written by block 0 only: the other 16 "
           "blocks (more than the OS threads) read the fill 0xffffffff (%d do not)", bad);
    std::vector<unsigned> seen2(2, 0);
    race_after_barrier_kernel<<<2, 128>>>(seen2.data());
    tap_ok((seen2[0] == 4321u) != (seen2[1] == 4321u) &&
               (seen2[0] == 0xffffffffu || seen2[1] == 0xffffffffu),
           "the same race after a barrier, in a block of 4 warps: one of the two blocks shows it "
           "(warp 1 read %u and 0x%08x)", seen2[0], seen2[1]);
    ok = child_killed([] {
        std::vector<unsigned> x(1);
        overrun_kernel<<<1, 32, 4096>>>(x.data());
    });
    tap_ok(ok, "a read one byte past the 4096 bytes of dynamic shared memory a launch asked for "
           "faults (the child killed by a signal)");

    /* 16: static + dynamic shared memory as a GPU counts them (kernels/cuda_layernorm.cu once
     * failed its launch so at d_model ~ 6144: issue 22, item 2) */
    std::vector<int> s64(64, -1);
    static_smem_kernel<0><<<1, 64, 47 * 1024>>>(s64.data()); /* 1 + 47 KiB: the limit, allowed */
    const cudaError_t at_limit = cudaGetLastError();
    bad = 0;
    for (int t = 0; t < 64; t++) bad += s64[t] != (t + 1) % 64 + 1;
    std::string err2, err3;
    const bool over = child_fails_with([] {
        std::vector<int> x(64);
        static_smem_kernel<1><<<1, 64, 47 * 1024 + 16>>>(x.data());
    }, "1024 bytes of static __shared__ memory and 48144 of dynamic", &err2);
    cudaFuncSetAttribute((const void *)static_smem_kernel<2>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024);
    static_smem_kernel<2><<<1, 64, 47 * 1024 + 16>>>(s64.data());
    const cudaError_t opted = cudaGetLastError();
    const bool optin = child_fails_with([] {
        std::vector<int> x(64);
        cudaFuncSetAttribute((const void *)static_smem_kernel<3>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
        static_smem_kernel<3><<<1, 64, 64>>>(x.data());
    }, "a dynamic maximum of 232448", &err3);
    tap_ok(at_limit == cudaSuccess && bad == 0 && over && opted == cudaSuccess && optin,
           "1 KiB of static shared memory: with 47 KiB dynamic it runs (%s, %d wrong); 16 bytes "
           "more stop the run naming both sizes; the attribute at 100 KiB lets them run (%s); the "
           "attribute at 227 KiB stops it (static + maximum past 227 KiB)",
           cudaGetErrorString(at_limit), bad, cudaGetErrorString(opted));
    if (!over) tap_diag("stderr: %s", err2.c_str());
    if (!optin) tap_diag("stderr: %s", err3.c_str());
    /* 17-19: wgmma's layouts (wgmma_layouts.cuh, run on a GPU by test_wgmma_gpu too) */
    wgmma_layout_checks();

    /* 20: what the PTX ISA leaves undefined with wgmma, stopped here */
    static const char kUnpublished[] =
        "since the block's threads last all executed fence.proxy.async";
    struct {
        int mode;
        bool regs;
        const char *want, *what;
    } stops[] = {
        {WG_NO_FENCE, false, "without a wgmma.fence", "no wgmma.fence before the products"},
        {WG_REFENCE, false, "without a wgmma.fence", "a second batch after a commit, unfenced"},
        {WG_A_CHANGED, true, "changed its A registers", "A registers changed before the wait"},
        {WG_SMEM_CHANGED, false, "shared memory a product reads changed",
         "an operand's shared memory changed before the wait"},
        {WG_ACC_WRITTEN, false, "an accumulator of a product in flight was written",
         "an accumulator written before the wait"},
        {WG_NO_WAIT, false, "not waited for", "a block ending with products not waited for"},
        {WG_OK, false, "a warpgroup is 128 threads", "a block of 96 threads"},
        {WG_NO_PROXY_FENCE, false, kUnpublished, "operands stored with no fence.proxy.async"},
        {WG_PROXY_FENCE_EARLY, false, kUnpublished,
         "fence.proxy.async before the stores, not after"},
        {WG_PROXY_FENCE_SOME, true, kUnpublished,
         "zeros published, then the operands fenced in 3 of the 4 warps"},
        {WG_PROXY_NO_BARRIER, false, "a barrier must come between the fences and the wgmma",
         "no barrier between the proxy fences and the wgmma"},
    };
    std::string missed, ew;
    for (const auto &c : stops) {
        const int mode = c.mode, threads = c.mode == WG_OK ? 96 : 128;
        const bool stopped = child_fails_with([mode, threads, &c] {
            int x;
            if (c.regs)
                wgmma_run<64, true>(1, 1024, 128, 2048, 256, &x, threads, mode);
            else
                wgmma_run<64, false>(1, 128, 512, 128, 1024, &x, threads, mode);
        }, c.want, &ew);
        if (!stopped) {
            missed += std::string(missed.empty() ? "" : "; ") + c.what;
            tap_diag("%s: stderr: %s", c.what, ew.c_str());
        }
    }
    tap_ok(missed.empty(), "wgmma stops the run, exit 1, naming it, on each of 11 mistakes (no "
           "fence, an unfenced second batch, A registers, an operand's shared memory or an "
           "accumulator changed before the wait, products never waited for, 96 threads, operands "
           "stored with no proxy fence, the proxy fence before the stores, zeros published and "
           "the operands then fenced in 3 of 4 warps, no barrier after the proxy fences); "
           "missed: %s",
           missed.empty() ? "none" : missed.c_str());

    /* 21: the descriptor diagnosis of test_wgmma_gpu means something: with either descriptor's
     * strides swapped, every configuration's product is wrong (the strides are not symmetric),
     * where the same configuration unswapped, run beside it as the control, is right */
    std::string right, control;
    int swaps_run = 0;
    for (int cfg = 0; cfg < WG_CFGS; cfg++)
        for (int scale_d = 1; scale_d >= (cfg == WG_CFG_SS64 ? 0 : 1); scale_d--) {
            int x;
            const double e0 = wgmma_cfg_run(cfg, 0, &x, scale_d);
            if (!(e0 < kWgTol)) {
                char b[120];
                snprintf(b, sizeof b, "%sconfiguration %d (scale-d %d): %.1e",
                         control.empty() ? "" : "; ", cfg, scale_d, e0);
                control += b;
            }
            for (int swap = 1; swap <= 3; swap++) {
                if ((swap & wgmma_cfg_swaps(cfg)) != swap) continue;
                const double e = wgmma_cfg_run(cfg, swap, &x, scale_d);
                swaps_run++;
                if (!(e >= kWgTol)) {
                    char b[200];
                    snprintf(b, sizeof b, "%s%s of configuration %d (scale-d %d): %.1e",
                             right.empty() ? "" : "; ", wgmma_swap_names(cfg, swap), cfg, scale_d,
                             e);
                    right += b;
                }
            }
        }
    tap_ok(swaps_run == 8 && right.empty() && control.empty() && !wg_launch_error[0],
           "wgmma with a descriptor's LBO and SBO swapped gives a wrong product in each of %d "
           "cases (want 8: A, B and both in the shared-memory check at scale-d 1 and 0, B in the "
           "two register checks), the unswapped controls right, so test_wgmma_gpu's swap "
           "diagnosis can name the layout; swaps right anyway: %s; controls wrong: %s; launch "
           "error: %s", swaps_run, right.empty() ? "none" : right.c_str(),
           control.empty() ? "none" : control.c_str(),
           wg_launch_error[0] ? wg_launch_error : "none");

    /* 22: a correct order the proxy model must let run: A stored, a fence, B stored, a fence,
     * then the barrier (the second fence of the phase publishes again) */
    std::string ew2;
    double twice_err = INFINITY;
    const bool ran = !child_fails_with([] {
        int x;
        const double e = wgmma_run<64, false>(1, 1024, 128, 2048, 256, &x, 128, WG_PROXY_TWICE);
        _exit(e < kWgTol ? 0 : 3);
    }, "", &ew2);
    int x22;
    if (ran) twice_err = wgmma_run<64, false>(1, 1024, 128, 2048, 256, &x22, 128, WG_PROXY_TWICE);
    tap_ok(ran && twice_err < kWgTol,
           "stores, fence.proxy.async, more stores, a second fence, then the barrier (correct): "
           "the emulator lets the wgmma run, D within %.1e of double (want < 2^-14)%s%s",
           twice_err, ran ? "" : "; it stopped: ", ran ? "" : ew2.c_str());
    return tap_done();
}
