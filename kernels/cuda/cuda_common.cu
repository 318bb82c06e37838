/* cuda_common.cu — what every CUDA op stands on (failing loudly is cuda_fail.cu's): the process-wide
 * context's data (made by tcu_init, cuda_context.cu), device queries, memory and streams, the fp32 <-> bf16 conversions; and the
 * optimizer kernels over the fp32 master state: the gradient norm's sum of squares and AdamW.
 *
 * File-wide conventions:
 *   - every CUDA runtime call is checked; a failure exits the process (status 1) with
 *     "tessera cuda: WHAT: MSG (file:line)" (tcu_fail). The only calls that return an error instead
 *     are tcu_device_count (0) and tcu_try_malloc (NULL), and both clear the error they saw;
 *   - copies and memsets are stream-ordered (async) on the caller's stream, except that
 *     tcu_memcpy_d2h synchronises that stream before it returns (the host data is then valid);
 *   - kernels here are grid-stride loops over a flat size_t index (of elements, or of quads of 4
 *     fp32 moved as one 16-byte access when the pointers are aligned: the same arithmetic per
 *     element either way), 256 threads a block, at most 65536 blocks; n == 0 launches nothing;
 *   - deterministic: the sum of squares adds in a fixed order that depends on n only.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "tcu_memtab.h"

/* threads per block of the flat kernels, and the most blocks a grid-stride launch uses */
#define FLAT_THREADS 256u
#define FLAT_MAX_BLOCKS 65536u
#define FULL_MASK 0xffffffffu

tcu_context tcu_ctx;
bool tcu_initialised = false;

/* "1.50 GiB" at or above 1 GiB, else "12.3 MiB" (into buf) */
static const char *fmt_bytes(char *buf, size_t n, size_t bytes) {
    double b = (double)bytes;
    if (b >= 1024.0 * 1024.0 * 1024.0)
        snprintf(buf, n, "%.2f GiB", b / (1024.0 * 1024.0 * 1024.0));
    else
        snprintf(buf, n, "%.1f MiB", b / (1024.0 * 1024.0));
    return buf;
}

const tcu_context *tcu_context_get(const char *what) {
    if (!tcu_initialised)
        tcu_fail(what, "the CUDA backend is not initialised (call tcu_init(device) first)",
                 __FILE__, __LINE__);
    return &tcu_ctx;
}

/* ---- device queries ------------------------------------------------------------------------ */

int tcu_device_count(void) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver / no device: clear it, callers skip GPU work */
        return 0;
    }
    return n > 0 ? n : 0;
}

/* Any output pointer may be NULL (that fact is skipped); name gets at most n bytes, terminated. */
void tcu_device_info(char *name, size_t n, int *sm, size_t *free_bytes, size_t *total_bytes) {
    int dev = 0;
    TCU_CHECK(cudaGetDevice(&dev), "tcu_device_info: cudaGetDevice");
    if (name || sm) {
        cudaDeviceProp prop;
        TCU_CHECK(cudaGetDeviceProperties(&prop, dev), "tcu_device_info: cudaGetDeviceProperties");
        if (name && n > 0) snprintf(name, n, "%s", prop.name);
        if (sm) *sm = prop.major * 10 + prop.minor;
    }
    if (free_bytes || total_bytes) {
        size_t f = 0, t = 0;
        TCU_CHECK(cudaMemGetInfo(&f, &t), "tcu_device_info: cudaMemGetInfo");
        if (free_bytes) *free_bytes = f;
        if (total_bytes) *total_bytes = t;
    }
}

/* ---- memory -------------------------------------------------------------------------------- */

/* What tcu_malloc / tcu_try_malloc hold (tcu_mem_stats): every live block's size, by address. */
static tcu_memtab mem_tab;

static void mem_track(void *p, size_t bytes) {
    TCU_REQUIRE(tcu_memtab_add(&mem_tab, p, bytes) == 0, "tcu_malloc",
                "the host is out of memory (the table of device blocks)");
}

static void mem_untrack(void *p) {
    TCU_REQUIRE(tcu_memtab_remove(&mem_tab, p) == 0, "tcu_free",
                tcu_msg("%p is not a live pointer from tcu_malloc (freed twice, or not device "
                        "memory from tessera)",
                        p));
}

void tcu_mem_stats(size_t *live, size_t *peak) {
    if (live) *live = mem_tab.live;
    if (peak) *peak = mem_tab.peak;
}

/* A request of 0 bytes allocates 1 (cudaMalloc would return NULL, which tcu_try_malloc uses for
 * failure). cudaMalloc memory is aligned to at least 256 bytes. */
void *tcu_malloc(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err == cudaSuccess) {
        mem_track(p, bytes ? bytes : 1);
        return p;
    }
    (void)cudaGetLastError();
    char want[32], freeb[32], totalb[32];
    size_t f = 0, t = 0;
    int dev = -1;
    (void)cudaGetDevice(&dev);
    if (cudaMemGetInfo(&f, &t) == cudaSuccess) {
        tcu_fail("tcu_malloc",
                 tcu_msg("cannot allocate %s (%zu bytes) for %s: %s; device %d has %s free of %s "
                         "(use a smaller microbatch or model)",
                         fmt_bytes(want, sizeof want, bytes), bytes, what ? what : "?",
                         cudaGetErrorString(err), dev, fmt_bytes(freeb, sizeof freeb, f),
                         fmt_bytes(totalb, sizeof totalb, t)),
                 __FILE__, __LINE__);
    }
    (void)cudaGetLastError();
    tcu_fail("tcu_malloc",
             tcu_msg("cannot allocate %s (%zu bytes) for %s: %s; device %d, free memory unknown",
                     fmt_bytes(want, sizeof want, bytes), bytes, what ? what : "?",
                     cudaGetErrorString(err), dev),
             __FILE__, __LINE__);
}

/* NULL when the device is out of memory (the error is cleared); any other error (a fault of an
 * earlier kernel reported here, no device) still exits, since it is not a question of size. */
void *tcu_try_malloc(size_t bytes) {
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err == cudaSuccess) {
        mem_track(p, bytes ? bytes : 1);
        return p;
    }
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        return NULL;
    }
    tcu_fail("tcu_try_malloc", cudaGetErrorString(err), __FILE__, __LINE__);
}

void tcu_free(void *p) {
    if (!p) return;
    mem_untrack(p);
    TCU_CHECK(cudaFree(p), "tcu_free");
}

int tcu_host_register(void *p, size_t bytes) {
    if (!p || !bytes) return 0;
    if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) == cudaSuccess) return 0;
    (void)cudaGetLastError(); /* not a sticky error: cleared, the memory stays pageable */
    return -1;
}

void tcu_host_unregister(void *p) {
    if (p && cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
}

void tcu_zero(void *p, size_t bytes, tcu_stream s) {
    if (bytes) TCU_CHECK(cudaMemsetAsync(p, 0, bytes, s), "tcu_zero");
}

/* Stream-ordered. From pageable host memory CUDA has read src_host when this returns; from pinned
 * memory the copy may still be pending, so src_host must then stay unchanged until the stream
 * reaches it. */
void tcu_memcpy_h2d(void *dst, const void *src_host, size_t bytes, tcu_stream s) {
    if (bytes)
        TCU_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, s),
                  "tcu_memcpy_h2d");
}

/* Stream-ordered, then synchronises stream s: dst_host holds the data when this returns (and all
 * work queued on s before it has finished). */
void tcu_memcpy_d2h(void *dst_host, const void *src, size_t bytes, tcu_stream s) {
    if (!bytes) return;
    TCU_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, s), "tcu_memcpy_d2h");
    TCU_CHECK(cudaStreamSynchronize(s), "tcu_memcpy_d2h: cudaStreamSynchronize");
}

void *tcu_host_alloc(size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        char b[32];
        tcu_fail("tcu_host_alloc",
                 tcu_msg("cannot pin %s of host memory for %s: %s", fmt_bytes(b, sizeof b, bytes),
                         what ? what : "?", cudaGetErrorString(e)),
                 __FILE__, __LINE__);
    }
    return p;
}

void tcu_host_free(void *p) {
    if (p) TCU_CHECK(cudaFreeHost(p), "tcu_host_free");
}

void tcu_memcpy_d2h_async(void *dst_host, const void *src, size_t bytes, tcu_stream s) {
    if (bytes)
        TCU_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, s),
                  "tcu_memcpy_d2h_async");
}

void tcu_launch_host(tcu_stream s, void (*fn)(void *), void *arg) {
    TCU_CHECK(cudaLaunchHostFunc(s, fn, arg), "tcu_launch_host");
}

/* Stream-ordered; bytes 0 does nothing. */
void tcu_memcpy_d2d(void *dst, const void *src, size_t bytes, tcu_stream s) {
    if (bytes)
        TCU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "tcu_memcpy_d2d");
}

void tcu_memcpy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                  size_t rows, tcu_stream s) {
    if (width && rows)
        TCU_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice,
                                    s),
                  "tcu_memcpy2d");
}

/* Waits for all work queued on s; reports (and exits on) a fault of any kernel that ran there. */
void tcu_sync(tcu_stream s) { TCU_CHECK(cudaStreamSynchronize(s), "tcu_sync"); }

/* A blocking stream: it orders with the legacy default stream (stray work on stream 0 is safe). */
tcu_stream tcu_stream_create(void) {
    cudaStream_t s = NULL;
    TCU_CHECK(cudaStreamCreate(&s), "tcu_stream_create");
    return s;
}

void tcu_stream_destroy(tcu_stream s) {
    if (s) TCU_CHECK(cudaStreamDestroy(s), "tcu_stream_destroy");
}

tcu_event tcu_event_create(void) {
    cudaEvent_t e = NULL;
    TCU_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "tcu_event_create");
    return e;
}

void tcu_event_destroy(tcu_event e) {
    if (e) TCU_CHECK(cudaEventDestroy(e), "tcu_event_destroy");
}

void tcu_event_record(tcu_event e, tcu_stream s) {
    TCU_CHECK(cudaEventRecord(e, s), "tcu_event_record");
}

void tcu_stream_wait_event(tcu_stream s, tcu_event e) {
    TCU_CHECK(cudaStreamWaitEvent(s, e, 0), "tcu_stream_wait_event");
}

tcu_event tcu_event_create_timed(void) {
    cudaEvent_t e = NULL;
    TCU_CHECK(cudaEventCreate(&e), "tcu_event_create_timed");
    return e;
}

float tcu_event_elapsed_ms(tcu_event start, tcu_event end) {
    float ms = 0.0f;
    TCU_CHECK(cudaEventSynchronize(end), "tcu_event_elapsed_ms");
    TCU_CHECK(cudaEventElapsedTime(&ms, start, end), "tcu_event_elapsed_ms");
    return ms;
}

/* ---- fp32 <-> bf16 ------------------------------------------------------------------------- */

static unsigned flat_grid(size_t items) {
    unsigned b = tcu_blocks(items, FLAT_THREADS);
    return b < FLAT_MAX_BLOCKS ? b : FLAT_MAX_BLOCKS;
}

static bool aligned(const void *p, uintptr_t bytes) { return ((uintptr_t)p & (bytes - 1)) == 0; }

/* out[i] = bf16(inp[i]), round to nearest even (NaN stays NaN).  out (n) bf16, inp (n) fp32.
 * Grid-stride, 256 threads, at most 65536 blocks; n > 0 (the launcher returns on 0). */
static __global__ void f32_to_bf16_grid_stride(bf16 *out, const float *inp, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = __float2bfloat16_rn(inp[i]);
}

/* out[i] = float(inp[i]) (exact).  out (n) fp32, inp (n) bf16.  Launch as f32_to_bf16. */
static __global__ void bf16_to_f32_grid_stride(float *out, const bf16 *inp, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = __bfloat162float(inp[i]);
}

void tcu_f32_to_bf16(tsr_bf16 *out, const float *inp, size_t n, tcu_stream s) {
    if (n == 0) return;
    f32_to_bf16_grid_stride<<<flat_grid(n), FLAT_THREADS, 0, s>>>((bf16 *)out, inp, n);
    TCU_CHECK_LAUNCH("tcu_f32_to_bf16");
}

void tcu_bf16_to_f32(float *out, const tsr_bf16 *inp, size_t n, tcu_stream s) {
    if (n == 0) return;
    bf16_to_f32_grid_stride<<<flat_grid(n), FLAT_THREADS, 0, s>>>(
        out, (const bf16 *)inp, n);
    TCU_CHECK_LAUNCH("tcu_bf16_to_f32");
}

/* ---- sum of squares ------------------------------------------------------------------------ */

#define SUMSQ_THREADS 256u
#define SUMSQ_MAX_BLOCKS 1024u /* partials; also the threads of the finishing block */

namespace {

__device__ float sumsq_partials[SUMSQ_MAX_BLOCKS];

/* Sum of v over the block, in a fixed tree (shuffles within warps, then warp 0 over the warp
 * sums); valid in thread 0. blockDim a multiple of 32, at most 1024; every thread calls it. */
__device__ float block_sum_fixed(float v) {
    __shared__ float warp_sums[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL_MASK, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? warp_sums[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL_MASK, v, o);
    }
    return v;
}

/* one Kahan-compensated step s += x^2 (c carries the lost low part, negated); the fma keeps
 * x^2 exact before the compensation is applied */
__device__ __forceinline__ void kahan_add_square(float &sum, float &c, float x) {
    float y = __fmaf_rn(x, x, -c);
    float t = __fadd_rn(sum, y);
    c = __fsub_rn(__fsub_rn(t, sum), y);
    sum = t;
}

/* sumsq_partials[block] = sum of g[i]^2 over the block's quads. Quad q = g[4q .. 4q+3] goes to
 * thread q mod (grid threads) and its 4 squares are added in order to that thread's Kahan sum
 * (float4 loads when vec: g 16-byte aligned; scalar loads otherwise: the same order, the same
 * bits); then a fixed tree over the block. g (n) fp32. Grid = min(ceil(n/4/256), 1024) blocks of
 * 256 threads: a function of n only. */
__global__ void sumsq_partials_kahan(const float *g, size_t n, bool vec) {
    const size_t nq = (n + 3) / 4, stride = (size_t)gridDim.x * blockDim.x;
    float sum = 0.0f, c = 0.0f;
    for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < nq; q += stride) {
        size_t i0 = 4 * q;
        if (vec && i0 + 4 <= n) {
            float4 v = *reinterpret_cast<const float4 *>(g + i0);
            kahan_add_square(sum, c, v.x);
            kahan_add_square(sum, c, v.y);
            kahan_add_square(sum, c, v.z);
            kahan_add_square(sum, c, v.w);
        } else {
            for (size_t i = i0; i < i0 + 4 && i < n; i++) kahan_add_square(sum, c, g[i]);
        }
    }
    float v = block_sum_fixed(sum - c);
    if (threadIdx.x == 0) sumsq_partials[blockIdx.x] = v;
}

/* *acc += sum of sumsq_partials[0 .. nparts) in a fixed tree.  acc (1) fp32. One block of 1024
 * threads; nparts <= 1024. */
__global__ void sumsq_finish_fixed_order(float *acc, unsigned nparts) {
    float v = threadIdx.x < nparts ? sumsq_partials[threadIdx.x] : 0.0f;
    v = block_sum_fixed(v);
    if (threadIdx.x == 0) *acc += v;
}

} // namespace

/* Per-thread Kahan sums keep fp32 accurate for n up to ~1e9 (each thread adds ~n/262144 squares
 * with an error of a few ulp; the two trees add ~18 roundings). Uses the file's static partials:
 * concurrent calls on different streams would race (call it on one stream). */
void tcu_sumsq(float *acc, const float *g, size_t n, tcu_stream s) {
    const char *what = "tcu_sumsq";
    if (n == 0) return;
    TCU_REQUIRE(acc && g, what, "acc and g must not be NULL");
    unsigned blocks = tcu_blocks((n + 3) / 4, SUMSQ_THREADS);
    if (blocks > SUMSQ_MAX_BLOCKS) blocks = SUMSQ_MAX_BLOCKS;
    sumsq_partials_kahan<<<blocks, SUMSQ_THREADS, 0, s>>>(g, n, aligned(g, 16));
    TCU_CHECK_LAUNCH("tcu_sumsq (partials)");
    sumsq_finish_fixed_order<<<1, SUMSQ_MAX_BLOCKS, 0, s>>>(acc, blocks);
    TCU_CHECK_LAUNCH("tcu_sumsq (finish)");
}

/* ---- AdamW --------------------------------------------------------------------------------- */

namespace {

struct adamw_args {
    float beta1, beta2, one_minus_b1, one_minus_b2, eps, step, inv_sqrt_bc2, decay, grad_scale;
};

/* The CPU's arithmetic, operation for operation with round-to-nearest intrinsics (no fused
 * multiply-adds), so p, m, v have the CPU's bits for the same inputs:
 *   g' = g s;  m = b1 m + (1-b1) g';  v = b2 v + ((1-b2) g') g';
 *   p = p decay - (step m) / (sqrt(v) inv_sqrt_bc2 + eps),  step = lr / bc1, decay = 1 - lr wd. */
__device__ __forceinline__ float adamw_one(const adamw_args &a, float p, float g, float &m,
                                           float &v) {
    float gi = __fmul_rn(g, a.grad_scale);
    float mi = __fadd_rn(__fmul_rn(a.beta1, m), __fmul_rn(a.one_minus_b1, gi));
    float vi = __fadd_rn(__fmul_rn(a.beta2, v), __fmul_rn(__fmul_rn(a.one_minus_b2, gi), gi));
    m = mi;
    v = vi;
    float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), a.inv_sqrt_bc2), a.eps);
    return __fsub_rn(__fmul_rn(p, a.decay), __fdiv_rn(__fmul_rn(a.step, mi), denom));
}

/* Up to ADAMW_SEGS segments of one flat store, for one launch: segment k is elements
 * [at[k], at[k] + len[k]) with decay[k] = 1 - lr wd[k]; its quads (4 elements, the last one
 * short) are the launch's quads q0[k] .. q0[k+1] - 1. Passed by value (1.8 KB; with the other
 * arguments under 2 KB of kernel parameters, within the 4 KB every architecture takes). */
#define ADAMW_SEGS 64
struct adamw_segs {
    int n;
    size_t q0[ADAMW_SEGS + 1];
    size_t at[ADAMW_SEGS], len[ADAMW_SEGS];
    float decay[ADAMW_SEGS];
};

/* p, m, v of every segment updated in place, p_bf16 = bf16(p) (round to nearest even) when not
 * NULL. p, g, m, v fp32 and p_bf16 bf16 (or NULL): the flat store the segments index.
 * Grid-stride over the launch's quads, 256 threads; a thread finds its first quad's segment by
 * bisection, then walks forward. vec (p, g, m, v 16-byte and p_bf16 4-byte aligned) takes the
 * 16-byte path for the full quads of a segment whose start is a multiple of 4 elements; the
 * scalar path does the same arithmetic, so the bits do not depend on the path. */
__global__ void adamw_segments_quads(float *p, bf16 *p_bf16, const float *g, float *m, float *v,
                                     adamw_args a, adamw_segs sg, bool vec) {
    const size_t nq = sg.q0[sg.n], stride = (size_t)gridDim.x * blockDim.x;
    size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= nq) return;
    int lo = 0, hi = sg.n - 1; /* the last k with q0[k] <= q */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (sg.q0[mid] <= q) lo = mid;
        else hi = mid - 1;
    }
    int k = lo;
    for (; q < nq; q += stride) {
        while (q >= sg.q0[k + 1]) k++;
        a.decay = sg.decay[k];
        const size_t end = sg.at[k] + sg.len[k], i0 = sg.at[k] + 4 * (q - sg.q0[k]);
        if (vec && sg.at[k] % 4 == 0 && i0 + 4 <= end) {
            float4 pp = *reinterpret_cast<const float4 *>(p + i0);
            float4 gg = *reinterpret_cast<const float4 *>(g + i0);
            float4 mm = *reinterpret_cast<const float4 *>(m + i0);
            float4 vv = *reinterpret_cast<const float4 *>(v + i0);
            pp.x = adamw_one(a, pp.x, gg.x, mm.x, vv.x);
            pp.y = adamw_one(a, pp.y, gg.y, mm.y, vv.y);
            pp.z = adamw_one(a, pp.z, gg.z, mm.z, vv.z);
            pp.w = adamw_one(a, pp.w, gg.w, mm.w, vv.w);
            *reinterpret_cast<float4 *>(p + i0) = pp;
            *reinterpret_cast<float4 *>(m + i0) = mm;
            *reinterpret_cast<float4 *>(v + i0) = vv;
            if (p_bf16) {
                __nv_bfloat162 *pb = reinterpret_cast<__nv_bfloat162 *>(p_bf16 + i0);
                pb[0] = __floats2bfloat162_rn(pp.x, pp.y); /* .x = first, the lower address */
                pb[1] = __floats2bfloat162_rn(pp.z, pp.w);
            }
        } else {
            for (size_t i = i0; i < i0 + 4 && i < end; i++) {
                float mi = m[i], vi = v[i];
                float pi = adamw_one(a, p[i], g[i], mi, vi);
                p[i] = pi;
                m[i] = mi;
                v[i] = vi;
                if (p_bf16) p_bf16[i] = __float2bfloat16_rn(pi);
            }
        }
    }
}

} // namespace

/* Bias corrections 1 - beta^t in double on the host, then step = float(lr / bc1),
 * inv_sqrt_bc2 = float(1 / sqrt(bc2)) and each segment's decay = 1 - lr wd (fp32) as the CPU op
 * computes them; one launch per ADAMW_SEGS segments (zero-length segments skipped). t >= 1. */
static void adamw_segments(const char *what, const tcu_adamw_seg *segs, int nseg, float *p,
                           tsr_bf16 *p_bf16, const float *g, float *m, float *v, float lr,
                           float beta1, float beta2, float eps, float grad_scale, int t,
                           tcu_stream s) {
    TCU_REQUIRE(t >= 1, what, tcu_msg("step t = %d must be >= 1", t));
    TCU_REQUIRE(nseg >= 0 && (nseg == 0 || segs), what,
                tcu_msg("nseg = %d segments (segs %s)", nseg, segs ? "given" : "NULL"));
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    adamw_args a;
    a.beta1 = beta1;
    a.beta2 = beta2;
    a.one_minus_b1 = 1.0f - beta1;
    a.one_minus_b2 = 1.0f - beta2;
    a.eps = eps;
    a.step = (float)((double)lr / bc1);
    a.inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    a.decay = 1.0f; /* per segment */
    a.grad_scale = grad_scale;
    bf16 *pb = (bf16 *)p_bf16;
    const bool vec = aligned(p, 16) && aligned(g, 16) && aligned(m, 16) && aligned(v, 16) &&
                     (!pb || aligned(pb, 4));
    adamw_segs sg;
    sg.n = 0;
    sg.q0[0] = 0;
    for (int k = 0; k <= nseg; k++) {
        if (k < nseg && segs[k].n > 0) {
            TCU_REQUIRE(p && g && m && v, what, "p, g, m and v must not be NULL");
            sg.at[sg.n] = segs[k].at;
            sg.len[sg.n] = segs[k].n;
            sg.decay[sg.n] = 1.0f - lr * segs[k].wd;
            sg.q0[sg.n + 1] = sg.q0[sg.n] + (segs[k].n + 3) / 4;
            sg.n++;
        }
        if (sg.n > 0 && (sg.n == ADAMW_SEGS || k == nseg)) {
            adamw_segments_quads<<<flat_grid(sg.q0[sg.n]), FLAT_THREADS, 0, s>>>(p, pb, g, m, v,
                                                                                  a, sg, vec);
            TCU_CHECK_LAUNCH(what);
            sg.n = 0;
        }
    }
}

void tcu_adamw_update_segments(const tcu_adamw_seg *segs, int nseg, float *p, tsr_bf16 *p_bf16,
                               const float *g, float *m, float *v, float lr, float beta1,
                               float beta2, float eps, float grad_scale, int t, tcu_stream s) {
    adamw_segments("tcu_adamw_update_segments", segs, nseg, p, p_bf16, g, m, v, lr, beta1, beta2,
                   eps, grad_scale, t, s);
}

/* one segment: the same kernel; its errors name this function */
void tcu_adamw_update(float *p, tsr_bf16 *p_bf16, const float *g, float *m, float *v, size_t n,
                      float lr, float beta1, float beta2, float eps, float wd, float grad_scale,
                      int t, tcu_stream s) {
    const tcu_adamw_seg one = {0, n, wd};
    adamw_segments("tcu_adamw_update", &one, 1, p, p_bf16, g, m, v, lr, beta1, beta2, eps,
                   grad_scale, t, s);
}
