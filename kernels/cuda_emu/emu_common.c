/* cuda_emu.c — a host emulator of the CUDA backend's C API (kernels/cuda/cuda_ops.h): every tcu_*
 * function, on host memory, computed by the fp32 CPU ops (kernels/ops.h) with bf16 storage. It is
 * for testing the GPU code path's orchestration (bf16 activations, fp32 master weights and
 * gradients, the sequence of tcu_* calls, buffer sizes and lifetimes) on machines without a GPU;
 * it proves nothing about the CUDA kernels themselves (tests/gpu/test_gpu_ops.c on a GPU does).
 * Link it instead of libtessera-cuda.a.
 *
 * File-wide conventions:
 *   - "device memory" is host memory: tcu_malloc returns 256-byte aligned blocks with a header
 *     (magic, size) in the 256 bytes before them, filled with 0xff bytes (NaN in bf16 and fp32),
 *     so that reading memory nobody wrote shows as NaN (the contract: memory is not zeroed). The
 *     emulated capacity is TSR_EMU_MEM bytes (a plain integer) or 8 GiB; live bytes are the sizes
 *     asked for (0 counts 1); tcu_malloc dies past it, tcu_try_malloc returns NULL;
 *   - 8 devices, or TSR_EMU_DEVICES (each process's capacity of this host's memory: ranks of a
 *     test take one each, or share them), no real streams: every op has finished when it returns,
 *     so streams and events are dummy handles and record, wait and sync do nothing, and a host
 *     function (tcu_launch_host) runs at once; pinned host memory is malloc; the NULL stream is
 *     accepted;
 *   - each op widens its bf16 inputs to fp32 temporaries (exact), computes with tsr_cpu_ops or a
 *     direct loop, and rounds to bf16 (nearest even, NaN stays NaN) where the real kernels round:
 *     a bf16 input gradient += is round(widen(old) + fp32 increment), an fp32 gradient += is an
 *     fp32 add (mostly the CPU op's own); GELU after a matmul reads the rounded pre_gelu;
 *   - preconditions the real ops check (shapes, NULL pointers, head size, 16-byte alignment for
 *     attention, tcu_init before the ops that need the context) exit 1 with
 *     "tessera cuda: WHAT: MSG (emulator)", as tcu_fail does;
 *   - attention backward reads the forward's lse (P = exp(s - lse)), as the real kernel does, so a
 *     stale lse shows; out is not read (the CPU op forms rowsum(dout * out) from P), except for
 *     the sinks' gradient, which reads it as the kernel does;
 *   - deterministic run to run, tokens_host or not (each output is made by one thread in a fixed
 *     order; sgemm for a fixed thread count, which the caller's cpu_ops_set_threads sets, never
 *     the emulator). Temporaries are host malloc, not counted as device memory.
 */
#include <stdbool.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_ops.h"
#include "tcu_fp8_gemm.h"
#include "tcu_gemm_tune.h"
#include "ops.h"

#define EMU_ALIGN 256                     /* device pointer alignment; header room */
#define EMU_MAGIC 0x74737265756d6531ull   /* "tsreume1": the header of a live block */
#define EMU_DEFAULT_MEM ((size_t)8 << 30) /* capacity without TSR_EMU_MEM */
#define EMU_ROWS 1024                     /* rows per chunk of the matmul temporaries */

static const tsr_ops *const cpu = &tsr_cpu_ops;

/* every op has finished when it returns: the streams (and a few inputs, said where) go unread */
#pragma GCC diagnostic ignored "-Wunused-parameter"

/* ---- failing ------------------------------------------------------------------------------- */

static void (*fail_hook)(int status);

/* the SIMT build links kernels/cuda/cuda_fail.cu, whose tcu_set_fail_hook is the kernels' */
#ifndef TCU_EMU_SIMT_KERNELS
void tcu_set_fail_hook(void (*hook)(int status)) { fail_hook = hook; }
#endif

__attribute__((format(printf, 2, 3))) static _Noreturn void emu_fail(const char *what,
                                                                     const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "tessera cuda: %s: %s (emulator)\n", what, msg);
    fflush(stderr);
    if (fail_hook) fail_hook(1);
    exit(1);
}

#define REQUIRE(cond, what, ...) do { if (!(cond)) emu_fail(what, __VA_ARGS__); } while (0)

/* ---- bf16 and host temporaries ------------------------------------------------------------- */

/* fp32 -> bf16, round to nearest even; NaN -> a quiet NaN of the same sign (never Inf) */
static inline tsr_bf16 bf16_round(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (tsr_bf16)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (tsr_bf16)(x >> 16);
}

/* bf16 -> fp32, exact */
static inline float bf16_widen(tsr_bf16 h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static void *host_alloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    REQUIRE(p, what, "out of host memory for a temporary of %zu bytes", bytes);
    return p;
}

static float *host_zeros(size_t n, const char *what) {
    float *p = calloc(n ? n : 1, sizeof *p);
    REQUIRE(p, what, "out of host memory for a temporary of %zu floats", n);
    return p;
}

static void widen_into(float *f, const tsr_bf16 *x, size_t n) {
    for (size_t i = 0; i < n; i++) f[i] = bf16_widen(x[i]);
}

/* a new fp32 copy of x (n) */
static float *widen(const tsr_bf16 *x, size_t n, const char *what) {
    float *f = host_alloc(n * sizeof *f, what);
    widen_into(f, x, n);
    return f;
}

static void round_into(tsr_bf16 *x, const float *f, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(f[i]);
}

/* x (bf16) += inc (fp32): one rounding of the fp32 sum */
static void add_round_into(tsr_bf16 *x, const float *inc, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(bf16_widen(x[i]) + inc[i]);
}

/* an input gradient by its mode (ops.h): TSR_GRAD_ADD += as add_round_into, TSR_GRAD_SET = round
 * (x unread) */
static void grad_round_into(tsr_bf16 *x, const float *inc, size_t n, tsr_grad_mode mode) {
    if (mode == TSR_GRAD_SET) round_into(x, inc, n);
    else add_round_into(x, inc, n);
}

/* ---- device, memory, context --------------------------------------------------------------- */

typedef struct {
    uint64_t magic;
    size_t bytes; /* as counted in emu_live */
} emu_head;

static atomic_size_t emu_live, emu_cap; /* live bytes; capacity (0: TSR_EMU_MEM not read yet) */
static atomic_size_t emu_peak;          /* the most live at once */
static int emu_inits;                   /* tcu_init calls since tcu_shutdown (0: no context) */

static size_t emu_capacity(void) {
    size_t cap = atomic_load(&emu_cap);
    if (cap) return cap;
    cap = EMU_DEFAULT_MEM;
    const char *e = getenv("TSR_EMU_MEM");
    if (e && *e) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(e, &end, 10);
        REQUIRE(*e >= '0' && *e <= '9' && *end == '\0' && errno == 0 && v > 0 && v <= SIZE_MAX,
                "TSR_EMU_MEM", "'%s' is not a positive number of bytes (a plain integer)", e);
        cap = (size_t)v;
    }
    atomic_store(&emu_cap, cap);
    return cap;
}

/* As many devices as a GPU node has (8, or TSR_EMU_DEVICES: 1 makes the ranks of a test share one,
 * as parallel.gpu_comm = "mpi" allows), so that several ranks of one test may each take one (every
 * "device" is this host; the gradient sums go through MPI, not NCCL). */
/* environment variable `name` as a whole number in [lo, hi], or def when unset or empty; anything
 * else dies naming it and `what` it should be */
static int emu_env_int(const char *name, int lo, int hi, int def, const char *what) {
    const char *e = getenv(name);
    if (!e || !*e) return def;
    char *end = NULL;
    long v = strtol(e, &end, 10);
    REQUIRE(*e >= '0' && *e <= '9' && *end == '\0' && v >= lo && v <= hi, name,
            "'%s' is not %s", e, what);
    return (int)v;
}

int tcu_device_count(void) {
    static int n; /* TSR_EMU_DEVICES, read once */
    if (!n) n = emu_env_int("TSR_EMU_DEVICES", 1, 64, 8, "a number of devices from 1 to 64");
    return n;
}

/* The compute capability the emulator reports (major * 10 + minor): TSR_EMU_SM, or 90, an H100's
 * (it computes the FP8 GEMM, which needs 8.9: tests set a lower one to see the refusal). */
static int emu_sm(void) {
    static int sm; /* read once */
    if (!sm)
        sm = emu_env_int("TSR_EMU_SM", 10, 199, 90, "a compute capability as major * 10 + minor "
                         "(10 to 199, e.g. 80, 90)");
    return sm;
}

/* Any output pointer may be NULL (that fact is skipped). */
void tcu_device_info(char *name, size_t n, int *sm, size_t *free_bytes, size_t *total_bytes) {
    if (name && n > 0) snprintf(name, n, "%s", "tessera CUDA emulator (host memory)");
    if (sm) *sm = emu_sm();
    size_t cap = emu_capacity(), live = atomic_load(&emu_live);
    if (free_bytes) *free_bytes = cap > live ? cap - live : 0;
    if (total_bytes) *total_bytes = cap;
}

/* NULL when the capacity would be exceeded (*host_oom = 0) or the host has no memory left
 * (*host_oom = 1) */
static void *emu_alloc(size_t bytes, int *host_oom) {
    const size_t want = bytes ? bytes : 1, cap = emu_capacity();
    const size_t body = (want + EMU_ALIGN - 1) & ~(size_t)(EMU_ALIGN - 1);
    *host_oom = 0;
    size_t live = atomic_load(&emu_live);
    do {
        if (want > cap || live > cap - want) return NULL;
    } while (!atomic_compare_exchange_weak(&emu_live, &live, live + want));
    unsigned char *base = NULL;
    if (body >= want && body <= SIZE_MAX - EMU_ALIGN)
        base = aligned_alloc(EMU_ALIGN, EMU_ALIGN + body);
    if (!base) {
        atomic_fetch_sub(&emu_live, want);
        *host_oom = 1;
        return NULL;
    }
    size_t peak = atomic_load(&emu_peak); /* live + want was live after this block at least */
    while (live + want > peak && !atomic_compare_exchange_weak(&emu_peak, &peak, live + want)) {
    }
    const emu_head h = {EMU_MAGIC, want};
    memcpy(base, &h, sizeof h);
    memset(base + EMU_ALIGN, 0xff, body);
    return base + EMU_ALIGN;
}

void *tcu_malloc(size_t bytes, const char *what) {
    int host_oom;
    void *p = emu_alloc(bytes, &host_oom);
    if (p) return p;
    size_t free_b = 0, total_b = 0;
    tcu_device_info(NULL, 0, NULL, &free_b, &total_b);
    emu_fail("tcu_malloc",
             "cannot allocate %.1f MiB (%zu bytes) for %s: %s; device 0 has %.1f MiB free (%zu "
             "bytes) of %.1f MiB (TSR_EMU_MEM; use a smaller microbatch or model)",
             bytes / 1048576.0, bytes, what ? what : "?",
             host_oom ? "the host is out of memory" : "out of emulated device memory",
             free_b / 1048576.0, free_b, total_b / 1048576.0);
}

void *tcu_try_malloc(size_t bytes) {
    int host_oom;
    return emu_alloc(bytes, &host_oom);
}

void tcu_free(void *p) {
    if (!p) return;
    REQUIRE((uintptr_t)p % EMU_ALIGN == 0, "tcu_free", "%p is not a pointer from tcu_malloc", p);
    unsigned char *base = (unsigned char *)p - EMU_ALIGN;
    emu_head h;
    memcpy(&h, base, sizeof h);
    REQUIRE(h.magic == EMU_MAGIC, "tcu_free",
            "%p is not a live pointer from tcu_malloc (freed twice, or host memory)", p);
    atomic_fetch_sub(&emu_live, h.bytes);
    free(base);
}

void tcu_mem_stats(size_t *live, size_t *peak) {
    if (live) *live = atomic_load(&emu_live);
    if (peak) *peak = atomic_load(&emu_peak);
}

/* Pinned host memory: the emulator copies as it always does, but keeps CUDA's rules, so that a
 * use real CUDA would refuse fails here too: a range overlapping one registered already is
 * refused (-1: cudaErrorHostMemoryAlreadyRegistered), and unregistering a pointer that starts no
 * registered range stops the program (CUDA: cudaErrorHostMemoryNotRegistered). */
#define EMU_PINNED_MAX 64
static struct {
    char *p;
    size_t bytes;
} emu_pinned[EMU_PINNED_MAX];
static pthread_mutex_t emu_pinned_mu = PTHREAD_MUTEX_INITIALIZER;

int tcu_host_register(void *p, size_t bytes) {
    if (!p || !bytes) return 0;
    int rc = -1, k, at = -1;
    pthread_mutex_lock(&emu_pinned_mu);
    for (k = 0; k < EMU_PINNED_MAX; k++) {
        char *q = emu_pinned[k].p;
        if (!q) {
            if (at < 0) at = k;
            continue;
        }
        if ((char *)p < q + emu_pinned[k].bytes && q < (char *)p + bytes) break; /* overlap */
    }
    if (k == EMU_PINNED_MAX && at >= 0) {
        emu_pinned[at].p = p, emu_pinned[at].bytes = bytes;
        rc = 0;
    }
    pthread_mutex_unlock(&emu_pinned_mu);
    return rc;
}

void tcu_host_unregister(void *p) {
    if (!p) return;
    int found = 0;
    pthread_mutex_lock(&emu_pinned_mu);
    for (int k = 0; k < EMU_PINNED_MAX && !found; k++)
        if (emu_pinned[k].p == p) emu_pinned[k].p = NULL, emu_pinned[k].bytes = 0, found = 1;
    pthread_mutex_unlock(&emu_pinned_mu);
    REQUIRE(found, "tcu_host_unregister", "%p starts no registered host range", p);
}

void tcu_zero(void *p, size_t bytes, tcu_stream s) { if (bytes) memset(p, 0, bytes); }

void tcu_memcpy_h2d(void *dst, const void *src_host, size_t bytes, tcu_stream s) {
    if (bytes) memcpy(dst, src_host, bytes);
}

void tcu_memcpy_d2h(void *dst_host, const void *src, size_t bytes, tcu_stream s) {
    if (bytes) memcpy(dst_host, src, bytes);
}

void tcu_memcpy_d2d(void *dst, const void *src, size_t bytes, tcu_stream s) {
    if (bytes) memcpy(dst, src, bytes);
}

void tcu_memcpy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                  size_t rows, tcu_stream s) {
    for (size_t r = 0; r < rows; r++)
        memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}

void *tcu_host_alloc(size_t bytes, const char *what) { return host_alloc(bytes, what); }
void tcu_host_free(void *p) { free(p); }

void tcu_memcpy_d2h_async(void *dst_host, const void *src, size_t bytes, tcu_stream s) {
    if (bytes) memcpy(dst_host, src, bytes);
}

/* the stream is synchronous: it reaches this point now */
void tcu_launch_host(tcu_stream s, void (*fn)(void *), void *arg) {
    REQUIRE(s && fn, "tcu_launch_host", "a NULL stream or function");
    fn(arg);
}

void tcu_sync(tcu_stream s) {}

tcu_stream tcu_stream_create(void) { return host_alloc(1, "tcu_stream_create"); }
void tcu_stream_destroy(tcu_stream s) { free(s); }
/* An event holds the host time of its last record (the emulator runs each op when called, so
 * the host's clock is its device's) and whether it was created for timing: CUDA refuses the
 * elapsed time of an event made with cudaEventDisableTiming (tcu_event_create), and so does the
 * emulator (ring_bench's events, made so, failed on the first GPU it ran on, 2026-11-27) */
typedef struct {
    double t; /* < 0: never recorded */
    bool timed;
} emu_event;
static tcu_event event_new(bool timed, const char *what) {
    emu_event *e = host_alloc(sizeof *e, what);
    *e = (emu_event){.t = -1.0, .timed = timed};
    return (tcu_event)e;
}
tcu_event tcu_event_create(void) { return event_new(false, "tcu_event_create"); }
tcu_event tcu_event_create_timed(void) { return event_new(true, "tcu_event_create_timed"); }
void tcu_event_destroy(tcu_event e) { free(e); }

/* CUDA rejects a NULL event; so does the emulator */
void tcu_event_record(tcu_event e, tcu_stream s) {
    REQUIRE(e, "tcu_event_record", "the event is NULL");
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ((emu_event *)e)->t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

float tcu_event_elapsed_ms(tcu_event start, tcu_event end) {
    REQUIRE(start && end, "tcu_event_elapsed_ms", "an event is NULL");
    const emu_event *a = (const emu_event *)start, *b = (const emu_event *)end;
    REQUIRE(a->timed && b->timed, "tcu_event_elapsed_ms",
            "an event was created without timing (tcu_event_create; CUDA: invalid resource handle)");
    REQUIRE(a->t >= 0.0 && b->t >= 0.0, "tcu_event_elapsed_ms", "an event was never recorded");
    return (float)((b->t - a->t) * 1e3);
}

void tcu_stream_wait_event(tcu_stream s, tcu_event e) {
    REQUIRE(e, "tcu_stream_wait_event", "the event is NULL");
}

void tcu_init(int device) {
    REQUIRE(device >= 0 && device < tcu_device_count(), "tcu_init",
            "device %d does not exist (%d devices)", device, tcu_device_count());
    emu_inits++;
}

/* (tcu_fp8_linear.c's scratch stays: host memory outlives a context here, and the backend's
 * tcu_shutdown frees it only because its device memory does not) */
void tcu_shutdown(void) { emu_inits = 0; }

/* the ops whose real twins use the context (cuBLASLt, scratch) die without tcu_init, as they do */
static void need_context(const char *what) {
    REQUIRE(emu_inits > 0, what,
            "the CUDA backend is not initialised (call tcu_init(device) first)");
}

void tcu_f32_to_bf16(tsr_bf16 *out, const float *inp, size_t n, tcu_stream s) {
    round_into(out, inp, n);
}

void tcu_bf16_to_f32(float *out, const tsr_bf16 *inp, size_t n, tcu_stream s) {
    widen_into(out, inp, n);
}

/* ---- encoder ------------------------------------------------------------------------------- */

static void check_btc(const char *what, int B, int T, int C) {
    REQUIRE(B > 0 && T > 0 && C > 0, what, "B = %d, T = %d, C = %d must be > 0", B, T, C);
    REQUIRE((size_t)B * T < ((size_t)1 << 30), what,
            "B*T = %zu rows is too many (at most 2^30 - 1)", (size_t)B * T);
}

/* out = round(wte[tok] + wpe[pos or t]) (an exact fp32 sum of two bf16 values); without wpe the
 * wte row is copied (bits, -0 included) */
void tcu_encoder_forward(tsr_bf16 *out, const int32_t *tokens, const tsr_bf16 *wte,
                         const tsr_bf16 *wpe, const int32_t *pos, int B, int T, int C,
                         tcu_stream s) {
    const char *what = "tcu_encoder_forward";
    check_btc(what, B, T, C);
    REQUIRE(out && tokens && wte, what, "out, tokens and wte must not be NULL");
    const size_t N = (size_t)B * T;
    for (size_t n = 0; n < N; n++) {
        const tsr_bf16 *e = wte + (size_t)tokens[n] * C;
        tsr_bf16 *o = out + n * C;
        if (!wpe) {
            memcpy(o, e, (size_t)C * sizeof *o);
            continue;
        }
        const tsr_bf16 *p = wpe + (pos ? (size_t)pos[n] : n % (size_t)T) * C;
        for (int c = 0; c < C; c++) o[c] = bf16_round(bf16_widen(e[c]) + bf16_widen(p[c]));
    }
}

/* the CPU op on the widened dout (dwte, dwpe fp32 +=, each or NULL: frozen; a fixed order with or
 * without tokens_host; without dwte the tokens are not read) */
void tcu_encoder_backward(float *dwte, float *dwpe, const tsr_bf16 *dout, const int32_t *tokens,
                          const int32_t *tokens_host, const int32_t *pos, int B, int T, int C,
                          tcu_stream s) {
    const char *what = "tcu_encoder_backward";
    check_btc(what, B, T, C);
    REQUIRE(dout && (!dwte || tokens || tokens_host), what,
            "dout, and with dwte tokens (or tokens_host), must not be NULL");
    if (!dwte && !dwpe) return;
    const size_t N = (size_t)B * T;
    if (dwte && tokens_host)
        for (size_t n = 0; n < N; n++)
            REQUIRE(tokens_host[n] >= 0, what, "tokens_host[%zu] = %d is negative", n,
                    (int)tokens_host[n]);
    float *g = widen(dout, N * C, what);
    cpu->encoder_backward(dwte, dwpe, g, dwte ? (tokens ? tokens : tokens_host) : NULL, pos, B, T,
                          C);
    free(g);
}

/* Built with TCU_EMU_SIMT_KERNELS, the norms and the Llama-style blocks below are left out too:
 * the SIMT build runs cuda_layernorm.cu's and cuda_llama.cu's kernels instead. */
#ifndef TCU_EMU_SIMT_KERNELS

/* ---- layernorm ----------------------------------------------------------------------------- */

/* The input of a norm, widened: a, or (fused) residual = round(a + b), written, then read back as
 * stored (the fused op is bit for bit the residual op and the norm op) */
static float *norm_input(const char *what, int fused, tsr_bf16 *residual, const tsr_bf16 *a,
                         const tsr_bf16 *b, size_t n) {
    float *x = host_alloc(n * sizeof *x, what);
    for (size_t i = 0; i < n; i++) {
        if (fused) residual[i] = bf16_round(bf16_widen(a[i]) + bf16_widen(b[i]));
        x[i] = bf16_widen(fused ? residual[i] : a[i]);
    }
    return x;
}

/* out = round(LN(x)) with x = inp, or (fused) x = residual = round(a + b): the LayerNorm of the
 * rounded residual, bit for bit the two separate ops; mean, rstd written when not NULL */
static void ln_forward(const char *what, int fused, tsr_bf16 *residual, tsr_bf16 *out,
                       float *mean, float *rstd, const tsr_bf16 *a, const tsr_bf16 *b,
                       const tsr_bf16 *w, const tsr_bf16 *bias, int N, int C) {
    REQUIRE(N >= 0 && C >= 1, what, "need N >= 0 and C >= 1, got N=%d C=%d", N, C);
    REQUIRE(out && a && w && (!fused || (b && residual)), what, "a required pointer is NULL");
    if (N == 0) return;
    const size_t n = (size_t)N * C;
    float *x = norm_input(what, fused, residual, a, b, n), *o = host_alloc(n * sizeof *o, what);
    float *wf = widen(w, C, what), *bf = bias ? widen(bias, C, what) : NULL;
    float *mn = mean ? mean : host_alloc((size_t)N * sizeof *mn, what);
    float *rs = rstd ? rstd : host_alloc((size_t)N * sizeof *rs, what);
    cpu->layernorm_forward(o, mn, rs, x, wf, bf, N, C);
    round_into(out, o, n);
    if (!mean) free(mn);
    if (!rstd) free(rs);
    free(bf), free(wf), free(o), free(x);
}

void tcu_layernorm_forward(tsr_bf16 *out, float *mean, float *rstd, const tsr_bf16 *inp,
                           const tsr_bf16 *w, const tsr_bf16 *b, int N, int C, tcu_stream s) {
    ln_forward("tcu_layernorm_forward", 0, NULL, out, mean, rstd, inp, NULL, w, b, N, C);
}

void tcu_residual_layernorm_forward(tsr_bf16 *residual, tsr_bf16 *out, float *mean, float *rstd,
                                    const tsr_bf16 *a, const tsr_bf16 *b, const tsr_bf16 *w,
                                    const tsr_bf16 *bias, int N, int C, tcu_stream s) {
    ln_forward("tcu_residual_layernorm_forward", 1, residual, out, mean, rstd, a, b, w, bias, N,
               C);
}

/* the real backward's HOLD variant (same bits): the emulator has one norm backward, and says so */
void tcu_norm_set_hold(int mask) {
    REQUIRE(mask >= 0 && mask <= TCU_NORM_HOLD_ALL, "tcu_norm_set_hold",
            "mask = %d: expected 0 ... %d", mask, TCU_NORM_HOLD_ALL);
}
int tcu_norm_hold(void) { return 0; }

/* dinp (bf16) += the CPU op's fp32 increment; dw, db fp32 += by the CPU op (each or NULL) */
void tcu_layernorm_backward(tsr_bf16 *dinp, float *dw, float *db, const tsr_bf16 *dout,
                            const tsr_bf16 *inp, const tsr_bf16 *w, const float *mean,
                            const float *rstd, int N, int C, tcu_stream s) {
    const char *what = "tcu_layernorm_backward";
    REQUIRE(N >= 0 && C >= 1, what, "need N >= 0 and C >= 1, got N=%d C=%d", N, C);
    REQUIRE(dinp && dout && inp && w && mean && rstd, what, "a required pointer is NULL");
    if (N == 0) return;
    need_context(what);
    const size_t n = (size_t)N * C;
    float *x = widen(inp, n, what), *g = widen(dout, n, what), *wf = widen(w, C, what);
    float *dx = host_zeros(n, what);
    cpu->layernorm_backward(dx, dw, db, g, x, wf, mean, rstd, N, C);
    add_round_into(dinp, dx, n);
    free(dx), free(wf), free(g), free(x);
}

/* ---- the Llama-style blocks ----------------------------------------------------------------- */

/* out = round(RMSNorm(x)) with x = inp, or (fused) x = residual = round(a + b): the RMSNorm of the
 * rounded residual, bit for bit the two separate ops; rstd written when not NULL */
static void rms_forward(const char *what, int fused, tsr_bf16 *residual, tsr_bf16 *out,
                        float *rstd, const tsr_bf16 *a, const tsr_bf16 *b, const tsr_bf16 *w, int N,
                        int C, float eps) {
    REQUIRE(N >= 0 && C >= 1, what, "need N >= 0 and C >= 1, got N=%d C=%d", N, C);
    REQUIRE(eps >= 0.0f, what, "eps = %g must be >= 0", (double)eps);
    REQUIRE(out && a && w && (!fused || (b && residual)), what, "a required pointer is NULL");
    if (N == 0) return;
    const size_t n = (size_t)N * C;
    float *x = norm_input(what, fused, residual, a, b, n), *o = host_alloc(n * sizeof *o, what);
    float *wf = widen(w, C, what);
    float *rs = rstd ? rstd : host_alloc((size_t)N * sizeof *rs, what);
    cpu->rmsnorm_forward(o, rs, x, wf, N, C, eps);
    round_into(out, o, n);
    if (!rstd) free(rs);
    free(wf), free(o), free(x);
}

void tcu_rmsnorm_forward(tsr_bf16 *out, float *rstd, const tsr_bf16 *inp, const tsr_bf16 *w,
                         int N, int C, float eps, tcu_stream s) {
    rms_forward("tcu_rmsnorm_forward", 0, NULL, out, rstd, inp, NULL, w, N, C, eps);
}

void tcu_residual_rmsnorm_forward(tsr_bf16 *residual, tsr_bf16 *out, float *rstd,
                                  const tsr_bf16 *a, const tsr_bf16 *b, const tsr_bf16 *w, int N,
                                  int C, float eps, tcu_stream s) {
    rms_forward("tcu_residual_rmsnorm_forward", 1, residual, out, rstd, a, b, w, N, C, eps);
}

/* dinp (bf16) += the CPU op's fp32 increment; dw fp32 += by the CPU op (or NULL) */
void tcu_rmsnorm_backward(tsr_bf16 *dinp, float *dw, const tsr_bf16 *dout, const tsr_bf16 *inp,
                          const tsr_bf16 *w, const float *rstd, int N, int C, tcu_stream s) {
    const char *what = "tcu_rmsnorm_backward";
    REQUIRE(N >= 0 && C >= 1, what, "need N >= 0 and C >= 1, got N=%d C=%d", N, C);
    REQUIRE(dinp && dout && inp && w && rstd, what, "a required pointer is NULL");
    if (N == 0) return;
    need_context(what);
    const size_t n = (size_t)N * C;
    float *x = widen(inp, n, what), *g = widen(dout, n, what), *wf = widen(w, C, what);
    float *dx = host_zeros(n, what);
    cpu->rmsnorm_backward(dx, dw, g, x, wf, rstd, N, C);
    add_round_into(dinp, dx, n);
    free(dx), free(wf), free(g), free(x);
}

static void check_heads(const char *what, int N, int NH, int KVH, int hs) {
    REQUIRE(N >= 0 && NH >= 1 && KVH >= 1 && NH % KVH == 0 && hs >= 1, what,
            "bad shape N=%d NH=%d KVH=%d hs=%d (NH a multiple of KVH >= 1, hs >= 1)", N, NH, KVH,
            hs);
    REQUIRE((long long)N * (NH + KVH) < (1ll << 31), what,
            "N*(NH+KVH) = %lld head rows is too many (at most 2^31 - 1)",
            (long long)N * (NH + KVH));
}

/* QK-norm through the CPU op (cpu->qknorm_forward or its per-projection twin): per head, qw and
 * kw (hs), rstd (N, NH+KVH); per projection, qw (NH hs), kw (KVH hs), rstd (N, 2) */
typedef void (*qk_fwd_op)(float *, float *, const float *, const float *, const float *, int, int,
                          int, int, float);
typedef void (*qk_bwd_op)(float *, float *, float *, const float *, const float *, const float *,
                          const float *, const float *, int, int, int, int);

/* out = round(the CPU op on the widened inp): the value heads, copied exactly */
static void qknorm_forward_emu(const char *what, int per_head, qk_fwd_op op, tsr_bf16 *out,
                               float *rstd, const tsr_bf16 *inp, const tsr_bf16 *qw,
                               const tsr_bf16 *kw, int N, int NH, int KVH, int hs, float eps) {
    check_heads(what, N, NH, KVH, hs);
    REQUIRE(eps >= 0.0f, what, "eps = %g must be >= 0", (double)eps);
    REQUIRE(out && inp && qw && kw, what, "out, inp, qw and kw must not be NULL");
    if (N == 0) return;
    const size_t n = (size_t)N * (NH + 2 * KVH) * hs;
    const size_t nr = (size_t)N * (per_head ? NH + KVH : 2);
    float *x = widen(inp, n, what), *qf = widen(qw, (size_t)(per_head ? 1 : NH) * hs, what);
    float *kf = widen(kw, (size_t)(per_head ? 1 : KVH) * hs, what);
    float *rs = rstd ? rstd : host_alloc(nr * sizeof *rs, what);
    op(x, rs, x, qf, kf, N, NH, KVH, hs, eps);
    round_into(out, x, n);
    if (!rstd) free(rs);
    free(kf), free(qf), free(x);
}

/* dinp (bf16) += the CPU op's fp32 increment (the value columns: dout, exact before the add);
 * dqw, dkw fp32 += by the CPU op (each or NULL) */
static void qknorm_backward_emu(const char *what, int per_head, qk_bwd_op op, tsr_bf16 *dinp,
                                float *dqw, float *dkw, const tsr_bf16 *dout, const tsr_bf16 *inp,
                                const tsr_bf16 *qw, const tsr_bf16 *kw, const float *rstd, int N,
                                int NH, int KVH, int hs) {
    check_heads(what, N, NH, KVH, hs);
    REQUIRE(dinp && dout && inp && qw && kw && rstd, what, "a required pointer is NULL");
    if (N == 0) return;
    need_context(what);
    const size_t n = (size_t)N * (NH + 2 * KVH) * hs;
    float *x = widen(inp, n, what), *g = widen(dout, n, what), *dx = host_zeros(n, what);
    float *qf = widen(qw, (size_t)(per_head ? 1 : NH) * hs, what);
    float *kf = widen(kw, (size_t)(per_head ? 1 : KVH) * hs, what);
    op(dx, dqw, dkw, g, x, qf, kf, rstd, N, NH, KVH, hs);
    add_round_into(dinp, dx, n);
    free(kf), free(qf), free(dx), free(g), free(x);
}

void tcu_qknorm_forward(tsr_bf16 *out, float *rstd, const tsr_bf16 *inp, const tsr_bf16 *qw,
                        const tsr_bf16 *kw, int N, int NH, int KVH, int hs, float eps,
                        tcu_stream s) {
    qknorm_forward_emu("tcu_qknorm_forward", 1, cpu->qknorm_forward, out, rstd, inp, qw, kw, N,
                       NH, KVH, hs, eps);
}

void tcu_qknorm_backward(tsr_bf16 *dinp, float *dqw, float *dkw, const tsr_bf16 *dout,
                         const tsr_bf16 *inp, const tsr_bf16 *qw, const tsr_bf16 *kw,
                         const float *rstd, int N, int NH, int KVH, int hs, tcu_stream s) {
    qknorm_backward_emu("tcu_qknorm_backward", 1, cpu->qknorm_backward, dinp, dqw, dkw, dout, inp,
                        qw, kw, rstd, N, NH, KVH, hs);
}

/* in place: round(the CPU rotation of the widened qkv): rot 0 the plain one (cpu->rope_*), else
 * the partial/scaled one of rot dims (cpu->rope_part_*, mscale); the value heads come back
 * unchanged (widening and rounding a bf16 is exact) */
static void rope_emu(const char *what, tsr_bf16 *qkv, const int32_t *pos, int p0,
                     const float *inv_freq, int B, int T, int NH, int KVH, int hs, int rot,
                     float mscale, int backward) {
    if (rot) /* partial / scaled (cpu->rope_part_*) */
        REQUIRE(B >= 0 && T >= 1 && hs >= 2 && rot >= 2 && rot % 2 == 0 && rot <= hs, what,
                "bad shape B=%d T=%d hs=%d rot=%d (rot even, 2 <= rot <= hs)", B, T, hs, rot);
    else
        REQUIRE(B >= 0 && T >= 1 && hs >= 2 && hs % 2 == 0, what,
                "bad shape B=%d T=%d hs=%d (hs even)", B, T, hs);
    check_heads(what, B * T, NH, KVH, hs);
    REQUIRE(qkv && inv_freq, what, "qkv and inv_freq must not be NULL");
    REQUIRE(pos || p0 >= 0, what, "p0 = %d must be >= 0", p0);
    const size_t n = (size_t)B * T * (NH + 2 * KVH) * hs;
    if (n == 0) return;
    float *x = widen(qkv, n, what);
    if (rot)
        (backward ? cpu->rope_part_backward : cpu->rope_part_forward)(x, pos, p0, inv_freq, B, T,
                                                                      NH, KVH, hs, rot, mscale);
    else if (backward) cpu->rope_backward(x, pos, p0, inv_freq, B, T, NH, KVH, hs);
    else cpu->rope_forward(x, pos, p0, inv_freq, B, T, NH, KVH, hs);
    round_into(qkv, x, n);
    free(x);
}

void tcu_rope_forward(tsr_bf16 *qkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                      int T, int NH, int KVH, int hs, tcu_stream s) {
    rope_emu("tcu_rope_forward", qkv, pos, p0, inv_freq, B, T, NH, KVH, hs, 0, 1.0f, 0);
}

void tcu_rope_backward(tsr_bf16 *dqkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                       int T, int NH, int KVH, int hs, tcu_stream s) {
    rope_emu("tcu_rope_backward", dqkv, pos, p0, inv_freq, B, T, NH, KVH, hs, 0, 1.0f, 1);
}

static void check_nf(const char *what, int N, int F, int ok) {
    REQUIRE(N >= 0 && F >= 1, what, "need N >= 0 and F >= 1, got N=%d F=%d", N, F);
    REQUIRE(ok, what, "a required pointer is NULL");
}

void tcu_swiglu_forward(tsr_bf16 *out, const tsr_bf16 *inp, int N, int F, tcu_stream s) {
    const char *what = "tcu_swiglu_forward";
    check_nf(what, N, F, out && inp);
    if (N == 0) return;
    const size_t n = (size_t)N * F;
    float *x = widen(inp, 2 * n, what), *o = host_alloc(n * sizeof *o, what);
    cpu->swiglu_forward(o, x, N, F);
    round_into(out, o, n);
    free(o), free(x);
}

/* dinp (bf16) += the CPU op's fp32 increment */
void tcu_swiglu_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, int N, int F,
                         tsr_grad_mode mode, tcu_stream s) {
    const char *what = "tcu_swiglu_backward";
    check_nf(what, N, F, dinp && inp && dout);
    if (N == 0) return;
    const size_t n = (size_t)N * F;
    float *x = widen(inp, 2 * n, what), *g = widen(dout, n, what), *dx = host_zeros(2 * n, what);
    cpu->swiglu_backward(dx, x, g, N, F);
    grad_round_into(dinp, dx, 2 * n, mode);
    free(dx), free(g), free(x);
}

#endif /* TCU_EMU_SIMT_KERNELS */

/* Built with TCU_EMU_SIMT_KERNELS: left out, cuda_moe.cu's kernels run instead (SIMT emulator) */
#ifndef TCU_EMU_SIMT_KERNELS

/* ---- mixture of experts --------------------------------------------------------------------- */

/* The CPU ops are optional in their table (ops.h): an emulated MoE op without its twin dies */
static void need_cpu_op(const char *what, int present) {
    REQUIRE(present, what, "the fp32 CPU op it runs on is missing from tsr_cpu_ops (kernels/cpu)");
}

static void check_moe(const char *what, int N, int E, int K) {
    REQUIRE(N >= 0 && E >= 1 && K >= 1 && K <= E, what,
            "need N >= 0 and 1 <= K <= E, got N=%d E=%d K=%d", N, E, K);
    REQUIRE((long long)N * K < (1ll << 31), what, "N*K = %lld assignments is too many (< 2^31)",
            (long long)N * K);
}

/* the CPU op on the widened logits: every output is fp32 or int32, written in place */
void tcu_moe_route(float *probs, float *lse, int32_t *idx, float *wts, int32_t *offs,
                   int32_t *rows, int32_t *slot, float *stats, const tsr_bf16 *logits, int N,
                   int E, int K, int norm, tcu_stream s) {
    const char *what = "tcu_moe_route";
    check_moe(what, N, E, K);
    REQUIRE(probs && lse && idx && wts && offs && rows && slot && stats && logits, what,
            "a required pointer is NULL");
    need_cpu_op(what, cpu->moe_route != NULL);
    float *x = widen(logits, (size_t)N * E, what);
    cpu->moe_route(probs, lse, idx, wts, offs, rows, slot, stats, x, N, E, K, norm);
    free(x);
}

static void check_nkc(const char *what, int N, int K, int C, int ok) {
    REQUIRE(N >= 0 && K >= 1 && C >= 1, what, "need N >= 0, K >= 1 and C >= 1, got N=%d K=%d C=%d",
            N, K, C);
    REQUIRE((long long)N * K < (1ll << 31), what, "N*K = %lld assignments is too many (< 2^31)",
            (long long)N * K);
    REQUIRE(ok, what, "a required pointer is NULL");
}

/* a copy of bits (widening and rounding back is exact) */
void tcu_moe_gather(tsr_bf16 *xg, const tsr_bf16 *x, const int32_t *rows, int N, int K, int C,
                    tcu_stream s) {
    const char *what = "tcu_moe_gather";
    check_nkc(what, N, K, C, xg && x && rows);
    need_cpu_op(what, cpu->moe_gather != NULL);
    if (N == 0) return;
    const size_t NK = (size_t)N * K;
    float *xf = widen(x, (size_t)N * C, what), *o = host_alloc(NK * C * sizeof *o, what);
    cpu->moe_gather(o, xf, rows, N, K, C);
    round_into(xg, o, NK * C);
    free(o), free(xf);
}

/* the CPU op on the widened dx itself (dx + dxg rows in j order, fp32), rounded once: the kernel's
 * order and rounding */
void tcu_moe_gather_backward(tsr_bf16 *dx, const tsr_bf16 *dxg, const int32_t *slot, int N, int K,
                             int C, tcu_stream s) {
    const char *what = "tcu_moe_gather_backward";
    check_nkc(what, N, K, C, dx && dxg && slot);
    need_cpu_op(what, cpu->moe_gather_backward != NULL);
    if (N == 0) return;
    const size_t n = (size_t)N * C;
    float *d = widen(dx, n, what), *g = widen(dxg, (size_t)N * K * C, what);
    cpu->moe_gather_backward(d, g, slot, N, K, C);
    round_into(dx, d, n);
    free(g), free(d);
}

static void check_grouped(const char *what, int E, int NK, int IC, int OC, int ok) {
    REQUIRE(E >= 1 && NK >= 0 && IC >= 1 && OC >= 1, what,
            "need E >= 1, NK >= 0, IC >= 1 and OC >= 1, got E=%d NK=%d IC=%d OC=%d", E, NK, IC,
            OC);
    REQUIRE(ok, what, "a required pointer is NULL");
}

/* out = round(the CPU op on the widened operands); every row belongs to an expert */
void tcu_moe_matmul_forward(tsr_bf16 *out, const tsr_bf16 *inp, const tsr_bf16 *w,
                            const int32_t *offs, int E, int NK, int IC, int OC, tcu_stream s) {
    const char *what = "tcu_moe_matmul_forward";
    check_grouped(what, E, NK, IC, OC, out && inp && w && offs);
    need_cpu_op(what, cpu->moe_matmul_forward != NULL);
    if (NK == 0) return;
    float *x = widen(inp, (size_t)NK * IC, what), *wf = widen(w, (size_t)E * OC * IC, what);
    float *o = host_alloc((size_t)NK * OC * sizeof *o, what);
    cpu->moe_matmul_forward(o, x, wf, offs, E, NK, IC, OC);
    round_into(out, o, (size_t)NK * OC);
    free(o), free(wf), free(x);
}

/* dinp (bf16) += the CPU op's fp32 increment; dw fp32 += by the CPU op (or NULL: inp unread) */
void tcu_moe_matmul_backward(tsr_bf16 *dinp, float *dw, const tsr_bf16 *dout,
                             const tsr_bf16 *inp, const tsr_bf16 *w, const int32_t *offs, int E,
                             int NK, int IC, int OC, tcu_stream s) {
    const char *what = "tcu_moe_matmul_backward";
    check_grouped(what, E, NK, IC, OC, dinp && dout && (inp || !dw) && w && offs);
    need_cpu_op(what, cpu->moe_matmul_backward != NULL);
    if (NK == 0) return;
    const size_t ni = (size_t)NK * IC;
    float *x = dw ? widen(inp, ni, what) : NULL, *g = widen(dout, (size_t)NK * OC, what);
    float *wf = widen(w, (size_t)E * OC * IC, what), *dx = host_zeros(ni, what);
    cpu->moe_matmul_backward(dx, dw, g, x, wf, offs, E, NK, IC, OC);
    add_round_into(dinp, dx, ni);
    free(dx), free(wf), free(g), free(x);
}

/* out = round(the CPU op on the widened base (or NULL) and y); out may be base */
void tcu_moe_combine(tsr_bf16 *out, const tsr_bf16 *base, const tsr_bf16 *y, const float *wts,
                     const int32_t *slot, int N, int K, int C, tcu_stream s) {
    const char *what = "tcu_moe_combine";
    check_nkc(what, N, K, C, out && y && wts && slot);
    need_cpu_op(what, cpu->moe_combine != NULL);
    if (N == 0) return;
    const size_t n = (size_t)N * C;
    float *b = base ? widen(base, n, what) : NULL, *yf = widen(y, (size_t)N * K * C, what);
    float *o = host_alloc(n * sizeof *o, what);
    cpu->moe_combine(o, b, yf, wts, slot, N, K, C);
    round_into(out, o, n);
    free(o), free(yf), free(b);
}

/* dy = round(the CPU op's wts * dout); dwts written by it (double dot products) */
void tcu_moe_combine_backward(tsr_bf16 *dy, float *dwts, const tsr_bf16 *dout, const tsr_bf16 *y,
                              const float *wts, const int32_t *slot, int N, int K, int C,
                              tcu_stream s) {
    const char *what = "tcu_moe_combine_backward";
    check_nkc(what, N, K, C, dy && dwts && dout && y && wts && slot);
    need_cpu_op(what, cpu->moe_combine_backward != NULL);
    if (N == 0) return;
    const size_t n = (size_t)N * C, nk = n * (size_t)K;
    float *g = widen(dout, n, what), *d = host_alloc(nk * sizeof *d, what);
    float *yf = host_zeros(nk, what); /* zeroed first: gcc 12 cannot see widen's buffer filled */
    widen_into(yf, y, nk);
    cpu->moe_combine_backward(d, dwts, g, yf, wts, slot, N, K, C);
    round_into(dy, d, nk);
    free(d), free(yf), free(g);
}

/* dlogits = round(the CPU op's fp32 gradient) */
void tcu_moe_router_backward(tsr_bf16 *dlogits, const float *dwts, const float *probs,
                             const float *lse, const int32_t *idx, const float *wts,
                             const int32_t *offs, int N, int E, int K, int norm, float aux_w,
                             float z_w, tcu_stream s) {
    const char *what = "tcu_moe_router_backward";
    check_moe(what, N, E, K);
    REQUIRE(dlogits && dwts && probs && lse && idx && wts && offs, what,
            "a required pointer is NULL");
    need_cpu_op(what, cpu->moe_router_backward != NULL);
    if (N == 0) return;
    const size_t n = (size_t)N * E;
    float *d = host_alloc(n * sizeof *d, what);
    cpu->moe_router_backward(d, dwts, probs, lse, idx, wts, offs, N, E, K, norm, aux_w, z_w);
    round_into(dlogits, d, n);
    free(d);
}

#endif /* TCU_EMU_SIMT_KERNELS */

/* ---- matmul -------------------------------------------------------------------------------- */

static void require_shape(const char *what, int N, int IC, int OC) {
    REQUIRE(N >= 1 && IC >= 1 && OC >= 1, what,
            "N=%d IC=%d OC=%d: every dimension must be >= 1", N, IC, OC);
}

static int gelu_kind_ok(tsr_gelu_kind k) { return (unsigned)k < (unsigned)TSR_GELU_COUNT; }

/* In chunks of EMU_ROWS rows: acc = inp @ w^T + bias (fp32); without pre_gelu out = round(acc);
 * with it pre_gelu = round(acc), out = round(gelu(widen(pre_gelu))) */
void tcu_matmul_forward(tsr_bf16 *out, tsr_bf16 *pre_gelu, const tsr_bf16 *inp,
                        const tsr_bf16 *w, const tsr_bf16 *bias, int N, int IC, int OC,
                        tsr_gelu_kind gelu, tcu_stream s) {
    const char *what = "tcu_matmul_forward";
    require_shape(what, N, IC, OC);
    REQUIRE(out && inp && w, what, "out, inp and w must not be NULL");
    if (pre_gelu) {
        REQUIRE(gelu_kind_ok(gelu), what, "unknown GELU kind %d", (int)gelu);
        REQUIRE(pre_gelu != out, what, "pre_gelu must not alias out");
    }
    need_context(what);
    const int rows = N < EMU_ROWS ? N : EMU_ROWS;
    float *wf = widen(w, (size_t)OC * IC, what), *bf = bias ? widen(bias, OC, what) : NULL;
    float *x = host_alloc((size_t)rows * IC * sizeof *x, what);
    float *o = host_alloc((size_t)rows * OC * sizeof *o, what);
    for (int n0 = 0; n0 < N; n0 += rows) {
        const int nr = N - n0 < rows ? N - n0 : rows;
        const size_t no = (size_t)nr * OC, off = (size_t)n0 * OC;
        widen_into(x, inp + (size_t)n0 * IC, (size_t)nr * IC);
        cpu->matmul_forward(o, x, wf, bf, nr, IC, OC);
        if (pre_gelu) {
            round_into(pre_gelu + off, o, no);
            widen_into(o, pre_gelu + off, no);
            cpu->gelu_forward(o, o, no, gelu);
        }
        round_into(out + off, o, no);
    }
    free(o), free(x), free(bf), free(wf);
}

/* In chunks of EMU_ROWS rows, the CPU op: dinp (bf16) += (SET: =) its fp32 increment of the
 * chunk; dw and dbias fp32 += by it (one fp32 add per chunk), each or NULL as the CPU op takes
 * them (dw NULL: inp unread). A NULL dinp gets a scratch stand-in (the CPU op needs one) and w then reads as
 * zeros. */
void tcu_matmul_backward(tsr_bf16 *dinp, float *dw, float *dbias, const tsr_bf16 *dout,
                         const tsr_bf16 *inp, const tsr_bf16 *w, int N, int IC, int OC,
                         tsr_grad_mode mode, tcu_stream s) {
    const char *what = "tcu_matmul_backward";
    require_shape(what, N, IC, OC);
    REQUIRE(dout != NULL, what, "dout must not be NULL");
    REQUIRE(!dinp || w, what, "dinp needs w (w is NULL)");
    REQUIRE(!dw || inp, what, "dw needs inp (inp is NULL)");
    need_context(what);
    if (!dinp && !dw && !dbias) return;
    const int rows = N < EMU_ROWS ? N : EMU_ROWS;
    const size_t nw = (size_t)OC * IC;
    float *wf = dinp ? widen(w, nw, what) : host_zeros(nw, what);
    float *g = host_alloc((size_t)rows * OC * sizeof *g, what);
    float *x = dw ? host_alloc((size_t)rows * IC * sizeof *x, what) : NULL;
    float *dx = host_alloc((size_t)rows * IC * sizeof *dx, what);
    for (int n0 = 0; n0 < N; n0 += rows) {
        const int nr = N - n0 < rows ? N - n0 : rows;
        const size_t ni = (size_t)nr * IC;
        widen_into(g, dout + (size_t)n0 * OC, (size_t)nr * OC);
        if (dw) widen_into(x, inp + (size_t)n0 * IC, ni);
        memset(dx, 0, ni * sizeof *dx);
        cpu->matmul_backward(dx, dw, dbias, g, x, wf, nr, IC, OC);
        if (dinp) grad_round_into(dinp + (size_t)n0 * IC, dx, ni, mode);
    }
    free(dx), free(x), free(g), free(wf);
}

/* no split-K here (every product one fp32 sum): the scheme is checked and changes nothing */
void tcu_matmul_set_reduction(tcu_reduction r) {
    REQUIRE(r == TCU_REDUCTION_COMPUTE || r == TCU_REDUCTION_NONE || r == TCU_REDUCTION_ANY,
            "tcu_matmul_set_reduction", "%d is not a tcu_reduction", (int)r);
}

/* TSR_GEMM_TUNE: the file read and checked as on a GPU (the emulator's device name, cuBLASLt
 * version 0); with one way for every matmul nothing is ever timed or added */
static tcu_tune_table emu_tune;

int tcu_matmul_tune_open(const char *path, int timing, char *err, size_t n) {
    need_context("tcu_matmul_tune_open");
    char dev[128];
    tcu_device_info(dev, sizeof dev, NULL, NULL, NULL);
    tcu_tune_release(&emu_tune);
    return tcu_tune_open(&emu_tune, path, dev, 0, timing, err, n);
}

uint64_t tcu_matmul_tune_hash(void) { return tcu_tune_hash(&emu_tune); }

void tcu_matmul_tune_stats(tcu_tune_stats *st) {
    memset(st, 0, sizeof *st);
    st->loaded = emu_tune.loaded;
}

int tcu_matmul_tune_save(const char *path, char *err, size_t n) {
    (void)path, (void)err, (void)n;
    return 0;
}

int tcu_matmul_report(FILE *f) {
    if (f)
        fprintf(f, "cuBLASLt: the emulator has no cuBLASLt (one way for every matmul): 0 shape(s), "
                   "0 split-K\n");
    return 0;
}

/* dinp = round(gelu_tanh'(pre_gelu) * (dout @ w)) from the fp32 product (the DGELU epilogue's one
 * rounding); IC % 8 != 0, as the CUDA op (no epilogue): tcu_matmul_backward (=), then
 * tcu_gelu_backward in place, two roundings; dw, dbias by tcu_matmul_backward */
void tcu_matmul_backward_dgelu(tsr_bf16 *dinp, float *dw, float *dbias, const tsr_bf16 *dout,
                               const tsr_bf16 *inp, const tsr_bf16 *w, const tsr_bf16 *pre_gelu,
                               int N, int IC, int OC, tcu_stream s) {
    const char *what = "tcu_matmul_backward_dgelu";
    require_shape(what, N, IC, OC);
    REQUIRE(dinp && dout && w && pre_gelu, what, "dinp, dout, w and pre_gelu must not be NULL");
    REQUIRE(pre_gelu != dinp, what, "pre_gelu must not alias dinp");
    need_context(what);
    if (IC % 8 != 0) {
        tcu_matmul_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC, TSR_GRAD_SET, s);
        tcu_gelu_backward(dinp, pre_gelu, dinp, (size_t)N * IC, TSR_GELU_TANH, TSR_GRAD_SET, s);
        return;
    }
    const int rows = N < EMU_ROWS ? N : EMU_ROWS;
    float *wf = widen(w, (size_t)OC * IC, what);
    float *g = host_alloc((size_t)rows * OC * sizeof *g, what);
    float *pre = host_alloc((size_t)rows * IC * sizeof *pre, what);
    float *dx = host_alloc((size_t)rows * IC * sizeof *dx, what);
    float *d = host_alloc((size_t)rows * IC * sizeof *d, what);
    for (int n0 = 0; n0 < N; n0 += rows) {
        const int nr = N - n0 < rows ? N - n0 : rows;
        const size_t ni = (size_t)nr * IC;
        widen_into(g, dout + (size_t)n0 * OC, (size_t)nr * OC);
        widen_into(pre, pre_gelu + (size_t)n0 * IC, ni);
        memset(dx, 0, ni * sizeof *dx);
        cpu->matmul_backward(dx, NULL, NULL, g, NULL, wf, nr, IC, OC);
        memset(d, 0, ni * sizeof *d);
        cpu->gelu_backward(d, pre, dx, ni, TSR_GELU_TANH);
        round_into(dinp + (size_t)n0 * IC, d, ni);
    }
    free(d), free(dx), free(pre), free(g), free(wf);
    if (dw || dbias) tcu_matmul_backward(NULL, dw, dbias, dout, inp, w, N, IC, OC, TSR_GRAD_SET, s);
}

/* ---- FP8 (cuda_ops.h; the formats and the scale: tcu_fp8.h, the functions cuda_fp8.cu runs) -- */

void tcu_amax_bf16(float *amax, const tsr_bf16 *x, size_t n, tcu_stream s) {
    const char *what = "tcu_amax_bf16";
    REQUIRE(amax && (x || n == 0), what, "amax and x must not be NULL");
    uint32_t m = 0; /* magnitudes as fp32 bits: they order as the numbers, a NaN above all */
    for (size_t i = 0; i < n; i++) {
        const uint32_t a = tcu_fp8_f32_bits(bf16_widen(x[i])) & 0x7fffffffu;
        if (a > m) m = a;
    }
    *amax = tcu_fp8_bits_f32(m);
}

void tcu_fp8_quantize(tsr_fp8 *q, float *scale_inv, const tsr_bf16 *x, const float *amax,
                      size_t n, tcu_fp8_format fmt, tcu_stream s) {
    const char *what = "tcu_fp8_quantize";
    REQUIRE(q && scale_inv && x && amax, what, "q, scale_inv, x and amax must not be NULL");
    REQUIRE((unsigned)fmt < (unsigned)TCU_FP8_FORMAT_COUNT, what, "unknown FP8 format %d",
            (int)fmt);
    const float scale = tcu_fp8_scale(*amax, fmt);
    for (size_t i = 0; i < n; i++) q[i] = tcu_fp8_quantize_one(bf16_widen(x[i]), scale, fmt);
    *scale_inv = tcu_fp8_scale_inv(*amax, fmt);
}

void tcu_fp8_dequantize(tsr_bf16 *x, const tsr_fp8 *q, const float *scale_inv, size_t n,
                        tcu_fp8_format fmt, tcu_stream s) {
    const char *what = "tcu_fp8_dequantize";
    REQUIRE(x && q && scale_inv, what, "x, q and scale_inv must not be NULL");
    REQUIRE((unsigned)fmt < (unsigned)TCU_FP8_FORMAT_COUNT, what, "unknown FP8 format %d",
            (int)fmt);
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(tcu_fp8_dequantize_one(q[i], *scale_inv, fmt));
}

/* the decoded products summed in fp32 by the CPU's sgemm (cuBLASLt's up to the order of the
 * sums), times sx_inv * sw_inv, plus bias: rounded once to bf16 where the backend's plan
 * (tcu_fp8_gemm_plan, the same function) puts the bias in the BIAS epilogue, else rounded, then
 * the bias added and rounded again (bias_add_rows_kernel). The plan is refused as the backend
 * refuses it (tcu_fp8_gemm_check: cuBLASLt's FP8 rules); the emulator has no workspace. */
void tcu_matmul_fp8(tsr_bf16 *out, const tsr_fp8 *qx, const float *sx_inv, const tsr_fp8 *qw,
                    const float *sw_inv, const tsr_bf16 *bias, int N, int IC, int OC,
                    tcu_stream s) {
    const char *what = "tcu_matmul_fp8";
    require_shape(what, N, IC, OC);
    REQUIRE(out && qx && qw && sx_inv && sw_inv, what,
            "out, qx, qw, sx_inv and sw_inv must not be NULL");
    tcu_fp8_gemm p;
    char desc[640];
    tcu_fp8_gemm_plan(&p, out, qx, sx_inv, qw, sw_inv, bias, N, IC, OC, NULL, 0);
    const char *why = tcu_fp8_gemm_check(&p);
    REQUIRE(!why, what, "N=%d IC=%d OC=%d: %s (cuBLASLt's FP8 rules; the call: %s)", N, IC, OC,
            why ? why : "", tcu_fp8_gemm_describe(&p, desc, sizeof desc));
    need_context(what);
    const size_t nx = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *x = host_alloc(nx * sizeof *x, what), *w = host_alloc(nw * sizeof *w, what);
    float *o = host_alloc(no * sizeof *o, what);
    for (size_t i = 0; i < nx; i++) x[i] = tcu_fp8_decode(qx[i], TCU_FP8_E4M3);
    for (size_t i = 0; i < nw; i++) w[i] = tcu_fp8_decode(qw[i], TCU_FP8_E4M3);
    cpu->matmul_forward(o, x, w, NULL, N, IC, OC);
    const float f = *sx_inv * *sw_inv;
    for (size_t i = 0; i < no; i++) {
        const float b = bias ? bf16_widen(bias[i % (size_t)OC]) : 0.0f;
        out[i] = p.bias_epilogue ? bf16_round(o[i] * f + b) : bf16_round(o[i] * f);
        if (bias && !p.bias_epilogue) out[i] = bf16_round(bf16_widen(out[i]) + b);
    }
    (void)s;
    free(o), free(w), free(x);
}

/* Built with TCU_EMU_SIMT_KERNELS: left out, cuda_lora.cu's kernels run instead (SIMT emulator) */
#ifndef TCU_EMU_SIMT_KERNELS

/* ---- LoRA's adapter path (cuda_ops.h tcu_lora_*) ------------------------------------------- */

/* the CUDA op's layout (cuda_lora.cu): t (N,R), xd (N,IC), dz (N,OC) fp32, each 256-byte
 * aligned; the emulator keeps its own host temporaries but plans the device's bytes */
size_t tcu_lora_scratch_bytes(int N, int IC, int OC, int R) {
    const size_t n = (size_t)N, parts[3] = {n * (size_t)R, n * (size_t)IC, n * (size_t)OC};
    size_t bytes = 0;
    for (int i = 0; i < 3; i++) bytes += (parts[i] * sizeof(float) + 255) / 256 * 256;
    return bytes;
}

static void check_lora(const char *what, int N, int IC, int OC, int R, int ld, float p,
                       const void *scratch) {
    REQUIRE(N >= 1 && IC >= 1 && OC >= 1 && R >= 1, what,
            "N=%d IC=%d OC=%d R=%d: every dimension must be >= 1", N, IC, OC, R);
    REQUIRE(ld >= OC, what, "ld=%d: the output's rows must hold OC=%d", ld, OC);
    REQUIRE(p >= 0.0f && p < 1.0f, what, "p=%g: dropout must be in [0, 1)", (double)p);
    REQUIRE(scratch != NULL, what, "scratch is NULL (tcu_lora_scratch_bytes)");
    need_context(what);
}

/* the CPU op on widened inputs: out's block = round(out + scale t B^T) (the kernel's one
 * rounding per element) */
void tcu_lora_forward(tsr_bf16 *out, int ld, const tsr_bf16 *inp, const float *A, const float *B,
                      float scale, float p, uint64_t key, int64_t row0, void *scratch, int N,
                      int IC, int OC, int R, tcu_stream s) {
    const char *what = "tcu_lora_forward";
    check_lora(what, N, IC, OC, R, ld, p, scratch);
    float *x = widen(inp, (size_t)N * IC, what), *inc = host_zeros((size_t)N * OC, what);
    float *t = host_alloc((size_t)N * R * sizeof *t, what);
    float *xd = host_alloc((size_t)N * IC * sizeof *xd, what);
    cpu->lora_forward(inc, OC, x, A, B, scale, p, key, row0, t, xd, N, IC, OC, R);
    for (int n = 0; n < N; n++)
        add_round_into(out + (size_t)n * ld, inc + (size_t)n * OC, (size_t)OC);
    free(xd), free(t), free(inc), free(x);
}

/* the CPU op on widened inputs: dinp = round(dinp + its fp32 increment); dA, dB fp32 += */
void tcu_lora_backward(tsr_bf16 *dinp, float *dA, float *dB, const tsr_bf16 *dout, int ld,
                       const tsr_bf16 *inp, const float *A, const float *B, float scale, float p,
                       uint64_t key, int64_t row0, void *scratch, int N, int IC, int OC, int R,
                       tcu_stream s) {
    const char *what = "tcu_lora_backward";
    check_lora(what, N, IC, OC, R, ld, p, scratch);
    REQUIRE(dout != NULL && inp != NULL, what, "dout and inp must not be NULL");
    if (!dinp && !dA && !dB) return;
    float *x = widen(inp, (size_t)N * IC, what), *g = host_alloc((size_t)N * OC * sizeof *g, what);
    for (int n = 0; n < N; n++) widen_into(g + (size_t)n * OC, dout + (size_t)n * ld, (size_t)OC);
    float *dx = host_zeros((size_t)N * IC, what), *t = host_alloc((size_t)N * R * sizeof *t, what);
    float *xd = host_alloc((size_t)N * IC * sizeof *xd, what);
    cpu->lora_backward(dx, dA, dB, g, OC, x, A, B, scale, p, key, row0, t, xd, N, IC, OC, R);
    if (dinp) add_round_into(dinp, dx, (size_t)N * IC);
    free(xd), free(t), free(dx), free(g), free(x);
}

#endif /* TCU_EMU_SIMT_KERNELS */

/* ---- gelu, residual ------------------------------------------------------------------------ */

void tcu_gelu_forward(tsr_bf16 *out, const tsr_bf16 *inp, size_t n, tsr_gelu_kind kind,
                      tcu_stream s) {
    const char *what = "tcu_gelu_forward";
    REQUIRE(gelu_kind_ok(kind), what, "unknown GELU kind %d", (int)kind);
    if (n == 0) return;
    float *x = widen(inp, n, what);
    cpu->gelu_forward(x, x, n, kind);
    round_into(out, x, n);
    free(x);
}

/* dinp = round(dinp + gelu'(inp) dout) */
void tcu_gelu_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, size_t n,
                       tsr_gelu_kind kind, tsr_grad_mode mode, tcu_stream s) {
    const char *what = "tcu_gelu_backward";
    REQUIRE(gelu_kind_ok(kind), what, "unknown GELU kind %d", (int)kind);
    if (n == 0) return;
    float *x = widen(inp, n, what), *g = widen(dout, n, what), *d = host_zeros(n, what);
    cpu->gelu_backward(d, x, g, n, kind);
    grad_round_into(dinp, d, n, mode);
    free(d), free(g), free(x);
}

void tcu_residual_forward(tsr_bf16 *out, const tsr_bf16 *a, const tsr_bf16 *b, size_t n,
                          tcu_stream s) {
    for (size_t i = 0; i < n; i++) out[i] = bf16_round(bf16_widen(a[i]) + bf16_widen(b[i]));
}

/* da = round(da + dout), db = round(db + dout); da == db: round((da + dout) + dout), as the real
 * kernel (the CPU's two += on one buffer, rounded once) */
void tcu_residual_backward(tsr_bf16 *da, tsr_bf16 *db, const tsr_bf16 *dout, size_t n,
                           tcu_stream s) {
    for (size_t i = 0; i < n; i++) {
        const float g = bf16_widen(dout[i]), x = bf16_widen(da[i]) + g;
        if (da == db) {
            da[i] = bf16_round(x + g);
        } else {
            db[i] = bf16_round(bf16_widen(db[i]) + g);
            da[i] = bf16_round(x);
        }
    }
}

/* Built with TCU_EMU_SIMT_KERNELS (build/tests/test_gpu_ops_simt), the attention and softmax +
 * cross-entropy ops below are left out: the real kernels of kernels/cuda/, run by the SIMT
 * emulator (kernels/cuda_simt/), take their place (the norms' too, above). */
#ifndef TCU_EMU_SIMT_KERNELS

/* ---- attention ----------------------------------------------------------------------------- */

static void att_check(const char *what, int B, int T, int NH, int KVH, int hs) {
    REQUIRE(B >= 1 && B <= 65535 && T >= 1 && NH >= 1 && NH <= 65535 && KVH >= 1 &&
                NH % KVH == 0,
            what, "bad shape B=%d T=%d NH=%d KVH=%d (B, NH in 1..65535, T >= 1, KVH >= 1 "
            "dividing NH)", B, T, NH, KVH);
    REQUIRE(tcu_attention_head_size_ok(hs), what,
            "head size hs = %d (NH=%d) has no kernel: " TCU_ATTENTION_HEAD_SIZES, hs, NH);
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* The layer's variants for the CPU ops: var (or NULL) with its sinks, bf16 on this backend
 * (cuda_ops.h tcu_attention_forward_var), widened into *sk (NH floats; free it after), in *v */
static const tsr_attn_var *emu_var(const tsr_attn_var *var, int NH, tsr_attn_var *v, float **sk,
                                   const char *what) {
    *sk = NULL;
    if (!var) return NULL;
    *v = *var;
    if (var->sinks) {
        *sk = host_alloc((size_t)NH * sizeof **sk, what);
        widen_into(*sk, (const tsr_bf16 *)(const void *)var->sinks, (size_t)NH);
        v->sinks = *sk;
    }
    return v;
}

/* Rows r = h*T + i of sequence b (x (T,QKV): its widened qkv, query head h reading key head
 * h / (NH/KVH)), over j in [lo(i), i], lo(i) the start of i's segment (run of equal ids in sq, or
 * 0; with a window W, at least i - W + 1), with s[i,j] = c(q_i . k_j scale) - slope (i - j) in
 * fp32 (fma dot products, as the CPU op; scale 1/sqrt(hs) or var's, c var's soft cap or none):
 * with lse_out, lse_out[b,h,i] = log (sum_j exp(s[i,j]) + exp(sink_h)) (online, in double; the
 * sink term with var's sinks only); else att (NH,T,T) row r = exp(s[i,j] - lse[b,h,i]), exact
 * zeros elsewhere */
static void att_rows(float *lse_out, float *att, const float *lse, const float *x,
                     const float *slopes, const int32_t *sq, const tsr_attn_var *var, int *lo,
                     int b, int T, int NH, int KVH, int hs) {
    const size_t ld = (size_t)(NH + 2 * KVH) * hs;
    const float scale = var && var->scale > 0.0f ? var->scale : 1.0f / sqrtf((float)hs);
    const float cap = var ? var->softcap : 0.0f;
    const int W = var ? var->window : 0;
    lo[0] = 0;
    for (int i = 1; i < T; i++) lo[i] = !sq ? 0 : sq[i] == sq[i - 1] ? lo[i - 1] : i;
    for (int i = 0; i < T && W > 0; i++) lo[i] = lo[i] > i - W + 1 ? lo[i] : i - W + 1;
#pragma omp parallel for schedule(dynamic, 16)
    for (long r = 0; r < (long)NH * T; r++) {
        const int h = (int)(r / T), i = (int)(r % T), g = h / (NH / KVH);
        const float slope = slopes ? slopes[h] : 0.0f, *q = x + (size_t)i * ld + (size_t)h * hs;
        const size_t at = ((size_t)b * NH + h) * T + i;
        const int sink = var && var->sinks;
        double m = sink ? var->sinks[h] : -INFINITY, sum = sink ? 1.0 : 0.0;
        if (!lse_out) memset(att + (size_t)r * T, 0, (size_t)T * sizeof *att);
        for (int j = lo[i]; j <= i; j++) {
            const float *k = x + (size_t)j * ld + (size_t)(NH + g) * hs;
            float dot = 0.0f;
            for (int d = 0; d < hs; d++) dot = fmaf(q[d], k[d], dot);
            float sj = scale * dot;
            if (cap > 0.0f) sj = cap * tanhf(sj / cap);
            if (slope != 0.0f) sj -= slope * (float)(i - j);
            if (!lse_out) att[(size_t)r * T + j] = expf(sj - lse[at]);
            else if (sj > m) sum = sum * exp(m - sj) + 1.0, m = sj;
            else sum += exp(sj - m);
        }
        if (lse_out) lse_out[at] = (float)(m + log(sum));
    }
}

void tcu_attention_forward(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv,
                           const float *alibi_slopes, const int32_t *seq, int B, int T, int NH,
                           int KVH, int hs, tcu_stream s) {
    tcu_attention_forward_var(out, lse, qkv, alibi_slopes, seq, NULL, B, T, NH, KVH, hs, s);
}

/* One sequence at a time (att temporaries of NH*T*T): out = round(CPU attention_forward of the
 * widened qkv, with var); lse[b,h,i] = log sum_{lo(i) <= j <= i} exp(s[i,j]) (+ the sink's
 * term; att_rows) */
void tcu_attention_forward_var(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv,
                               const float *alibi_slopes, const int32_t *seq,
                               const tsr_attn_var *var, int B, int T, int NH, int KVH, int hs,
                               tcu_stream s) {
    const char *what = "tcu_attention_forward";
    att_check(what, B, T, NH, KVH, hs);
    REQUIRE(out && lse && qkv, what, "out, lse and qkv must not be NULL");
    tsr_attn_var vw;
    float *sk;
    var = emu_var(var, NH, &vw, &sk, what);
    REQUIRE(aligned16(qkv) && aligned16(out), what, "qkv and out must be 16-byte aligned");
    const size_t nx = (size_t)T * (NH + 2 * KVH) * hs, no = (size_t)T * NH * hs;
    float *x = host_alloc(nx * sizeof *x, what), *o = host_alloc(no * sizeof *o, what);
    float *att = host_alloc((size_t)NH * T * T * sizeof *att, what);
    int *lo = host_alloc((size_t)T * sizeof *lo, what);
    for (int b = 0; b < B; b++) {
        const int32_t *sq = seq ? seq + (size_t)b * T : NULL;
        widen_into(x, qkv + b * nx, nx);
        cpu->attention_forward(o, att, x, alibi_slopes, sq, var, 1, T, NH, KVH, hs);
        round_into(out + b * no, o, no);
        att_rows(lse, NULL, NULL, x, alibi_slopes, sq, var, lo, b, T, NH, KVH, hs);
    }
    free(lo), free(att), free(o), free(x), free(sk);
}

size_t tcu_attention_scratch_bytes(int B, int T, int NH, int KVH, int hs) {
    (void)KVH, (void)hs;
    return (size_t)B * NH * T * sizeof(float);
}

/* One sequence at a time: att = exp(s - lse) from the given lse (att_rows), the CPU
 * attention_backward into fp32 zeros (a key/value head's gradient summed over its query heads
 * there), dqkv (bf16) += that. out and scratch are not read (scratch must be given, as on the
 * GPU). */
void tcu_attention_backward(tsr_bf16 *dqkv, const tsr_bf16 *dout, const tsr_bf16 *qkv,
                            const tsr_bf16 *out, const float *lse, const float *alibi_slopes,
                            const int32_t *seq, void *scratch, int B, int T, int NH, int KVH,
                            int hs, tsr_grad_mode mode, tcu_stream s) {
    tcu_attention_backward_var(dqkv, dout, qkv, out, lse, alibi_slopes, seq, NULL, scratch, B, T,
                               NH, KVH, hs, mode, s);
}

/* The sink gradients as the kernel takes them: dsinks[h] += -sum_i exp(sink_h - lse[b,h,i]) D_i,
 * D_i = dout_i . out_i from the bf16 out (the CPU op's D is sum_j P dA, its fp32 out's), rows in
 * order; sinks widened, g (T, NH hs) sequence b's widened dout */
static void emu_sink_grads(float *dsinks, const float *sinks, const float *lse, const float *g,
                           const tsr_bf16 *out, int b, int T, int NH, int hs) {
    for (int h = 0; h < NH; h++) {
        float acc = 0.0f;
        for (int i = 0; i < T; i++) {
            const size_t r = (size_t)i * NH * hs + (size_t)h * hs;
            float D = 0.0f;
            for (int d = 0; d < hs; d++) D = fmaf(g[r + d], bf16_widen(out[r + d]), D);
            acc -= expf(sinks[h] - lse[((size_t)b * NH + h) * T + i]) * D;
        }
        dsinks[h] += acc;
    }
}

/* ... with var: the sink gradient as the kernel's (emu_sink_grads) into var->dsinks */
void tcu_attention_backward_var(tsr_bf16 *dqkv, const tsr_bf16 *dout, const tsr_bf16 *qkv,
                                const tsr_bf16 *out, const float *lse, const float *alibi_slopes,
                                const int32_t *seq, const tsr_attn_var *var, void *scratch, int B,
                                int T, int NH, int KVH, int hs, tsr_grad_mode mode, tcu_stream s) {
    const char *what = "tcu_attention_backward";
    att_check(what, B, T, NH, KVH, hs);
    REQUIRE(dqkv && dout && qkv && out && lse, what,
            "dqkv, dout, qkv, out and lse must not be NULL");
    REQUIRE(aligned16(dqkv) && aligned16(dout) && aligned16(qkv) && aligned16(out), what,
            "dqkv, dout, qkv and out must be 16-byte aligned");
    REQUIRE(scratch != NULL, what, "scratch is NULL");
    tsr_attn_var vw;
    float *sk;
    var = emu_var(var, NH, &vw, &sk, what);
    float *dsinks = var && var->sinks ? var->dsinks : NULL;
    vw.dsinks = NULL; /* (var is &vw or NULL) */
    const size_t nx = (size_t)T * (NH + 2 * KVH) * hs, no = (size_t)T * NH * hs;
    float *x = host_alloc(nx * sizeof *x, what), *g = host_alloc(no * sizeof *g, what);
    float *dx = host_alloc(nx * sizeof *dx, what);
    float *att = host_alloc((size_t)NH * T * T * sizeof *att, what);
    int *lo = host_alloc((size_t)T * sizeof *lo, what);
    for (int b = 0; b < B; b++) {
        const int32_t *sq = seq ? seq + (size_t)b * T : NULL;
        widen_into(x, qkv + b * nx, nx);
        widen_into(g, dout + b * no, no);
        att_rows(NULL, att, lse, x, alibi_slopes, sq, var, lo, b, T, NH, KVH, hs);
        memset(dx, 0, nx * sizeof *dx);
        cpu->attention_backward(dx, g, x, att, sq, var, 1, T, NH, KVH, hs);
        grad_round_into(dqkv + b * nx, dx, nx, mode);
        if (dsinks) emu_sink_grads(dsinks, var->sinks, lse, g, out + b * no, b, T, NH, hs);
    }
    free(lo), free(att), free(dx), free(g), free(x), free(sk);
}

/* the real kernels' tiles: the emulator has one attention, whatever is asked (its sums have their
 * own order), and says so: 16 rows */
void tcu_attention_set_warp_rows(int rows) {
    REQUIRE(rows == 16 || rows == 32, "tcu_attention_set_warp_rows", "rows = %d: expected 16 or 32",
            rows);
}
int tcu_attention_warp_rows(int hs) {
    (void)hs;
    return 16;
}
/* ... and one dq: the fused one is not here, and it says so */
void tcu_attention_set_dq_fused(int on) {
    REQUIRE(on == 0 || on == 1, "tcu_attention_set_dq_fused", "on = %d: expected 0 or 1", on);
}
int tcu_attention_dq_fused(void) { return 0; }
/* ... and no wgmma kernels: never possible here (the SIMT build runs the real ones) */
void tcu_attention_set_wgmma(int on) {
    REQUIRE(on == 0 || on == 1, "tcu_attention_set_wgmma", "on = %d: expected 0 or 1", on);
}
int tcu_attention_wgmma(int hs) {
    (void)hs;
    return 0;
}
int tcu_attention_wgmma_possible(int hs) {
    (void)hs;
    return 0;
}

/* ---- softmax + cross-entropy --------------------------------------------------------------- */

/* Row by row (in parallel): the CPU ops on the widened row, in place; with dlosses the row of
 * logits is overwritten by round(dlogits) (0 for target < 0 and columns >= V), without it left
 * as it is. A target >= V poisons its row as the kernels do (cuda_xent.cu): loss NaN and, with
 * dlosses, dlogits NaN in the first V columns and 0 in the padding. */
void tcu_softmax_xent(float *losses, tsr_bf16 *logits, const int32_t *targets,
                      const float *dlosses, int N, int V, int Vp, tcu_stream s) {
    const char *what = "tcu_softmax_xent";
    REQUIRE(N >= 0 && V >= 1 && Vp >= V, what,
            "need N >= 0 and 1 <= V <= Vp, got N=%d V=%d Vp=%d", N, V, Vp);
    REQUIRE(losses && logits && targets, what, "a required pointer is NULL");
    if (N == 0) return;
#pragma omp parallel
    {
        float *row = host_alloc((size_t)Vp * sizeof *row, what);
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            tsr_bf16 *lr = logits + (size_t)n * Vp;
            if (targets[n] >= V) { /* the kernels' NaN, CUDART_NAN_F: bits 0x7fffffff */
                const uint32_t nan_bits = 0x7fffffffu;
                float nan;
                memcpy(&nan, &nan_bits, sizeof nan);
                losses[n] = nan;
                if (dlosses) {
                    for (int j = 0; j < Vp; j++) row[j] = j < V ? nan : 0.0f;
                    round_into(lr, row, Vp);
                }
                continue;
            }
            widen_into(row, lr, Vp);
            cpu->softmax_xent_forward(losses + n, row, row, targets + n, 1, V, Vp);
            if (dlosses) {
                cpu->softmax_xent_backward(row, dlosses + n, row, targets + n, 1, V, Vp);
                round_into(lr, row, Vp);
            }
        }
        free(row);
    }
}

/* the real kernels' register-resident variant gives the same bits: nothing changes here */
void tcu_softmax_xent_set_resident(int on) { (void)on; }

void tcu_argmax(int32_t *idx, const tsr_bf16 *logits, int N, int V, int Vp, tcu_stream s) {
    const char *what = "tcu_argmax";
    REQUIRE(N >= 0 && V >= 1 && Vp >= V, what, "need N >= 0 and 1 <= V <= Vp, got N=%d V=%d Vp=%d",
            N, V, Vp);
    REQUIRE(idx && logits, what, "a required pointer is NULL");
    for (int n = 0; n < N; n++) { /* the largest value, the lowest column on ties, NaN as -inf */
        const tsr_bf16 *x = logits + (size_t)n * Vp;
        float bv = -INFINITY;
        int bj = 0;
        for (int j = 0; j < V; j++) {
            float v = bf16_widen(x[j]);
            if (isnan(v)) v = -INFINITY;
            if (v > bv) bv = v, bj = j;
        }
        idx[n] = bj;
    }
}

/* ---- ring attention's blocks (context parallelism) --------------------------------------------- */

/* rows 0..n-1 of each of B sequences of bs rows (ld elements apart, the first w of them read) of
 * a bf16 matrix, widened into an fp32 temporary laid out alike (the rows not read are 0) */
static float *widen_rows(const void *src, int B, int bs, int n, size_t ld, size_t w,
                         const char *what) {
    float *t = host_alloc((size_t)B * bs * ld * sizeof *t, what);
    memset(t, 0, (size_t)B * bs * ld * sizeof *t);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) {
            const size_t at = ((size_t)b * bs + i) * ld;
            widen_into(t + at, (const tsr_bf16 *)src + at, w);
        }
    return t;
}

size_t tcu_ring_scratch_bytes(int B, int T, int NH, int KVH, int hs) {
    (void)B, (void)T, (void)NH, (void)KVH, (void)hs;
    return 0;
}

/* The CPU's block (ops.h ring_forward) on the widened q and kv: acc and lse are fp32 already */
void tcu_ring_forward(float *acc, float *lse, const tsr_ring_block *k, int merge, void *scratch,
                      tcu_stream s) {
    const char *what = "tcu_ring_forward";
    REQUIRE(acc && lse && k && k->q && k->kv, what, "acc, lse, the block's q and kv must not be NULL");
    tsr_ring_block f = *k;
    float *q = widen_rows(k->q, k->B, k->qbs, k->Tq, (size_t)k->ldq, (size_t)k->NH * k->hs, what);
    float *kv = widen_rows(k->kv, k->B, k->kbs, k->Tk, (size_t)k->ldkv,
                           (size_t)2 * k->KVH * k->hs, what);
    tsr_attn_var vw;
    float *sk;
    f.q = q, f.kv = kv, f.var = emu_var(k->var, k->NH, &vw, &sk, what);
    cpu->ring_forward(acc, lse, &f, merge);
    free(kv), free(q), free(sk);
}

/* The CPU's block (ops.h ring_backward) on the widened q, kv, dout and out, into the fp32 sums */
void tcu_ring_backward(float *dq, int lddq, float *dkv, int lddkv, const tsr_bf16 *dout,
                       const tsr_bf16 *out, const float *lse, const tsr_ring_block *k,
                       void *scratch, tcu_stream s) {
    const char *what = "tcu_ring_backward";
    REQUIRE(dq && dkv && dout && out && lse && k && k->q && k->kv, what,
            "dq, dkv, dout, out, lse, the block's q and kv must not be NULL");
    const size_t C = (size_t)k->NH * k->hs;
    tsr_ring_block f = *k;
    float *q = widen_rows(k->q, k->B, k->qbs, k->Tq, (size_t)k->ldq, C, what);
    float *kv = widen_rows(k->kv, k->B, k->kbs, k->Tk, (size_t)k->ldkv,
                           (size_t)2 * k->KVH * k->hs, what);
    float *g = widen_rows(dout, k->B, k->qbs, k->Tq, C, C, what);
    float *o = widen_rows(out, k->B, k->qbs, k->Tq, C, C, what);
    tsr_attn_var vw;
    float *sk;
    f.q = q, f.kv = kv, f.var = emu_var(k->var, k->NH, &vw, &sk, what);
    cpu->ring_backward(dq, lddq, dkv, lddkv, g, o, lse, &f);
    free(o), free(g), free(kv), free(q), free(sk);
}

#endif /* TCU_EMU_SIMT_KERNELS */

/* ---- optimizer ----------------------------------------------------------------------------- */

/* *acc += (float) of the CPU op's double sum */
void tcu_sumsq(float *acc, const float *g, size_t n, tcu_stream s) {
    if (n == 0) return;
    REQUIRE(acc && g, "tcu_sumsq", "acc and g must not be NULL");
    *acc += (float)cpu->sumsq(g, n);
}

/* dst[i] = dst[i] + src[i], one fp32 add each (as the kernel); needs no context (as the kernel) */
void tcu_add_f32(float *dst, const float *src, size_t n, tcu_stream s) {
    if (n == 0) return;
    REQUIRE(dst && src, "tcu_add_f32", "dst and src must not be NULL");
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

/* the CPU op on the fp32 state, then p_bf16 = round(p) */
void tcu_adamw_update(float *p, tsr_bf16 *p_bf16, const float *g, float *m, float *v, size_t n,
                      float lr, float beta1, float beta2, float eps, float wd, float grad_scale,
                      int t, tcu_stream s) {
    const char *what = "tcu_adamw_update";
    REQUIRE(t >= 1, what, "step t = %d must be >= 1", t);
    if (n == 0) return;
    REQUIRE(p && g && m && v, what, "p, g, m and v must not be NULL");
    cpu->adamw_update(p, g, m, v, n, lr, beta1, beta2, eps, wd, grad_scale, t);
    if (p_bf16) round_into(p_bf16, p, n);
}

/* the CPU op on each segment in turn (its own tensor to the CPU op: the same bits) */
void tcu_adamw_update_segments(const tcu_adamw_seg *segs, int nseg, float *p, tsr_bf16 *p_bf16,
                               const float *g, float *m, float *v, float lr, float beta1,
                               float beta2, float eps, float grad_scale, int t, tcu_stream s) {
    const char *what = "tcu_adamw_update_segments";
    REQUIRE(t >= 1, what, "step t = %d must be >= 1", t);
    REQUIRE(nseg >= 0 && (nseg == 0 || segs), what, "nseg = %d segments (segs %s)", nseg,
            segs ? "given" : "NULL");
    for (int k = 0; k < nseg; k++) {
        const size_t at = segs[k].at;
        if (segs[k].n == 0) continue;
        REQUIRE(p && g && m && v, what, "p, g, m and v must not be NULL");
        tcu_adamw_update(p + at, p_bf16 ? p_bf16 + at : NULL, g + at, m + at, v + at, segs[k].n,
                         lr, beta1, beta2, eps, segs[k].wd, grad_scale, t, s);
    }
}

/* ---- Muon's element-wise steps (cuda_muon.cu: the same fp32 operations, element by element) -- */

void tcu_muon_momentum(float *buf, const float *g, float *u, size_t n, float beta, float gscale,
                       int nesterov, tcu_stream s) {
    if (n == 0) return;
    REQUIRE(buf && g && u, "tcu_muon_momentum", "buf, g and u must not be NULL");
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        buf[i] = beta * buf[i] + gi;
        u[i] = nesterov ? gi + beta * buf[i] : buf[i];
    }
}

void tcu_muon_normalize(tsr_bf16 *x, const float *u, const float *sumsq, int rows, int cols,
                        int transpose, float eps, tcu_stream s) {
    const char *what = "tcu_muon_normalize";
    REQUIRE(rows > 0 && cols > 0, what, "rows = %d, cols = %d must be > 0", rows, cols);
    REQUIRE(x && u && sumsq, what, "x, u and sumsq must not be NULL");
    const float inv = (float)(1.0 / (sqrt((double)*sumsq) + (double)eps));
    for (size_t i = 0; i < (size_t)rows; i++)
        for (size_t j = 0; j < (size_t)cols; j++) {
            size_t k = i * (size_t)cols + j;
            x[transpose ? j * (size_t)rows + i : k] = bf16_round(u[k] * inv);
        }
}

void tcu_axpby_bf16(tsr_bf16 *out, float alpha, const tsr_bf16 *x, float beta, const tsr_bf16 *y,
                    size_t n, tcu_stream s) {
    if (n == 0) return;
    REQUIRE(out && x, "tcu_axpby_bf16", "out and x must not be NULL");
    for (size_t i = 0; i < n; i++) {
        float v = alpha * bf16_widen(x[i]);
        if (y) v = v + beta * bf16_widen(y[i]);
        out[i] = bf16_round(v);
    }
}

void tcu_muon_apply(float *p, tsr_bf16 *p_bf16, const tsr_bf16 *o, int rows, int cols,
                    int transposed, float decay, float step, tcu_stream s) {
    const char *what = "tcu_muon_apply";
    REQUIRE(rows > 0 && cols > 0, what, "rows = %d, cols = %d must be > 0", rows, cols);
    REQUIRE(p && o, what, "p and o must not be NULL");
    for (size_t i = 0; i < (size_t)rows; i++)
        for (size_t j = 0; j < (size_t)cols; j++) {
            size_t k = i * (size_t)cols + j;
            float ok = bf16_widen(o[transposed ? j * (size_t)rows + i : k]);
            p[k] = p[k] * decay - step * ok;
            if (p_bf16) p_bf16[k] = bf16_round(p[k]);
        }
}

/* ---- batched decoding (cuda_decode.cu) ------------------------------------------------------- */

/* Built with TCU_EMU_SIMT_KERNELS: left out, cuda_decode.cu's kernels run instead (SIMT emulator) */
#ifndef TCU_EMU_SIMT_KERNELS

/* Each row alone: its slot's cache widened (the layer's KVH heads, cap positions), the CPU's
 * attention_decode of one row (which stores the row's key and value), the output rounded, the
 * row's key and value rounded back into the slot. */
void tcu_attention_decode(tsr_bf16 *out, tsr_bf16 *kt, tsr_bf16 *v, const tsr_bf16 *qkv,
                          const float *alibi_slopes, const int32_t *slot, const int32_t *pos,
                          const int32_t *seg, int p0, int seg0, int n, size_t slot_stride, int cap,
                          int NH, int KVH, int hs, tcu_stream s) {
    tcu_attention_decode_var(out, kt, v, qkv, alibi_slopes, NULL, slot, pos, seg, p0, seg0, n,
                             slot_stride, cap, NH, KVH, hs, s);
}

/* ... with var (the cache a ring: position p at index p % cap, as the CPU's) */
void tcu_attention_decode_var(tsr_bf16 *out, tsr_bf16 *kt, tsr_bf16 *v, const tsr_bf16 *qkv,
                              const float *alibi_slopes, const tsr_attn_var *var,
                              const int32_t *slot, const int32_t *pos, const int32_t *seg, int p0,
                              int seg0, int n, size_t slot_stride, int cap, int NH, int KVH,
                              int hs, tcu_stream s) {
    const char *what = "tcu_attention_decode";
    (void)s;
    REQUIRE(n >= 0 && cap >= 1 && hs >= 1 && KVH >= 1 && NH % KVH == 0, what,
            "need n >= 0, cap, hs >= 1 and NH a multiple of KVH: n=%d cap=%d NH=%d KVH=%d hs=%d", n,
            cap, NH, KVH, hs);
    tsr_attn_var vw;
    float *sk;
    var = emu_var(var, NH, &vw, &sk, what);
    const size_t per = (size_t)KVH * hs * cap, QKV = (size_t)(NH + 2 * KVH) * hs;
    float *k = host_alloc(per * sizeof *k, what), *vv = host_alloc(per * sizeof *vv, what);
    float *x = host_alloc(QKV * sizeof *x, what), *o = host_alloc((size_t)NH * hs * sizeof *o, what);
    float *row = host_alloc((size_t)cap * sizeof *row, what);
    for (int i = 0; i < n; i++) {
        const size_t at = (size_t)(slot ? slot[i] : 0) * slot_stride;
        const int p = pos ? pos[i] : p0 + i, sg = seg ? seg[i] : seg0;
        widen_into(k, kt + at, per), widen_into(vv, v + at, per);
        widen_into(x, qkv + (size_t)i * QKV, QKV);
        cpu->attention_decode(o, k, vv, x, alibi_slopes, var, row, 1, p, 1, sg, cap, NH, KVH, hs);
        round_into(out + (size_t)i * NH * hs, o, (size_t)NH * hs);
        const int ix = p % cap; /* the ring's index */
        for (int g = 0; g < KVH; g++)
            for (int d = 0; d < hs; d++) {
                const size_t kk = ((size_t)g * hs + d) * cap + ix;
                const size_t vk = ((size_t)g * cap + ix) * hs + d;
                kt[at + kk] = bf16_round(k[kk]);
                v[at + vk] = bf16_round(vv[vk]);
            }
    }
    free(k), free(vv), free(x), free(o), free(row), free(sk);
}

void tcu_matmul_rows(tsr_bf16 *out, const tsr_bf16 *inp, const tsr_bf16 *w, const tsr_bf16 *bias,
                     int N, int IC, int OC, tcu_stream s) {
    const char *what = "tcu_matmul_rows";
    (void)s;
    require_shape(what, N, IC, OC);
    float *wf = widen(w, (size_t)OC * IC, what), *bf = bias ? widen(bias, OC, what) : NULL;
    float *x = widen(inp, (size_t)N * IC, what), *o = host_alloc((size_t)N * OC * sizeof *o, what);
    cpu->matmul_rows(o, x, wf, bf, N, IC, OC);
    round_into(out, o, (size_t)N * OC);
    free(wf), free(bf), free(x), free(o);
}
#endif /* TCU_EMU_SIMT_KERNELS */

/* ---- Gated DeltaNet core (issue 68; cuda_deltanet.cu) ----------------------------------------- */

/* Built with TCU_EMU_SIMT_KERNELS: left out, cuda_deltanet.cu's kernel runs instead (SIMT) */
#ifndef TCU_EMU_SIMT_KERNELS
#include "cpu/cpu_deltanet.h" /* the CPU core this stand-in runs */

size_t tcu_deltanet_ckpt_floats(int B, int T, int HV, int dk, int dv) {
    const tsr_dn_shape sh = {B, T, 1, HV, dk, dv, 64};
    return cpu_deltanet_ckpt_floats(&sh);
}

/* The CPU core at chunk 64 on the widened bf16 inputs, its output rounded to bf16: the rounding
 * of the kernel's interface (its inner bf16 operands are the SIMT emulator's to check). */
void tcu_deltanet_forward(tsr_bf16 *out, float *state_out, float *ckpt, const tsr_bf16 *q,
                          const tsr_bf16 *k, const tsr_bf16 *v, const float *g, const float *beta,
                          const float *state0, const int32_t *seq, int B, int T, int HK, int HV,
                          int dk, int dv, tcu_stream s) {
    const char *what = "tcu_deltanet_forward";
    REQUIRE(B >= 0 && T >= 0 && HK >= 1 && HV >= HK && HV % HK == 0, what,
            "need B, T >= 0 and HV a multiple of HK >= 1: B=%d T=%d HK=%d HV=%d", B, T, HK, HV);
    REQUIRE(dk >= 16 && dk <= 128 && dk % 16 == 0 && dv >= 16 && dv <= 128 && dv % 16 == 0, what,
            "head sizes dk = %d, dv = %d: the kernel takes multiples of 16 from 16 to 128", dk, dv);
    if (B == 0 || T == 0) return;
    const tsr_dn_shape sh = {B, T, HK, HV, dk, dv, 64};
    const size_t N = (size_t)B * T, nq = N * HK * dk, nv = N * HV * dv;
    float *qf = host_zeros(nq, what), *kf = host_zeros(nq, what), *vf = host_zeros(nv, what);
    float *o = host_alloc(nv * sizeof *o, what);
    widen_into(qf, q, nq), widen_into(kf, k, nq), widen_into(vf, v, nv);
    cpu_deltanet_forward(o, state_out, ckpt, qf, kf, vf, g, beta, state0, seq, &sh);
    round_into(out, o, nv);
    free(qf), free(kf), free(vf), free(o);
}

size_t tcu_deltanet_backward_scratch_bytes(int B, int T, int HV, int dk, int dv) {
    const size_t w = (size_t)(dk > dv ? dk : dv); /* the kernel's size, unused here */
    return sizeof(float) * (size_t)B * HV * ((size_t)2 * T * dk + (size_t)dk * dv + 64 * w);
}

/* The CPU core's backward on the widened inputs; dq, dk, dv get one rounding of their sums */
void tcu_deltanet_backward(tsr_bf16 *dq, tsr_bf16 *dk, tsr_bf16 *dv, float *dg, float *dbeta,
                           float *dstate0, const tsr_bf16 *dout, const float *dstate_out,
                           const float *ckpt, const tsr_bf16 *q, const tsr_bf16 *k,
                           const tsr_bf16 *v, const float *g, const float *beta,
                           const int32_t *seq, void *scratch, int B, int T, int HK, int HV,
                           int dkd, int dvd, tcu_stream s) {
    const char *what = "tcu_deltanet_backward";
    REQUIRE(B >= 0 && T >= 0 && HK >= 1 && HV >= HK && HV % HK == 0, what,
            "need B, T >= 0 and HV a multiple of HK >= 1: B=%d T=%d HK=%d HV=%d", B, T, HK, HV);
    if (B == 0 || T == 0) return;
    REQUIRE(scratch && ckpt, what, "scratch and ckpt must be given");
    const tsr_dn_shape sh = {B, T, HK, HV, dkd, dvd, 64};
    const size_t N = (size_t)B * T, nq = N * HK * dkd, nv = N * HV * dvd;
    float *qf = host_zeros(nq, what), *kf = host_zeros(nq, what), *vf = host_zeros(nv, what);
    float *of = host_zeros(nv, what), *gq = host_zeros(nq, what), *gk = host_zeros(nq, what);
    float *gv = host_zeros(nv, what);
    widen_into(qf, q, nq), widen_into(kf, k, nq), widen_into(vf, v, nv), widen_into(of, dout, nv);
    cpu_deltanet_backward(gq, gk, gv, dg, dbeta, dstate0, of, dstate_out, ckpt, qf, kf, vf, g,
                          beta, seq, &sh);
    add_round_into(dq, gq, nq), add_round_into(dk, gk, nq), add_round_into(dv, gv, nv);
    free(qf), free(kf), free(vf), free(of), free(gq), free(gk), free(gv);
}

/* ---- the layer's parts around the core (cuda_dnparts.cu): the CPU functions on the widened
 * tensors, the outputs rounded to bf16 (added with one rounding where the op adds) ---- */

/* x (n) widened, or NULL for NULL */
static float *widen_opt(const tsr_bf16 *x, size_t n, const char *what) {
    return x ? widen(x, n, what) : NULL;
}

static void dn_conv_dims(const char *what, int B, int T, int CD, int K) {
    REQUIRE(B >= 0 && T >= 0 && CD >= 0 && K >= 1 && K <= 16, what,
            "need B, T, CD >= 0 and 1 <= K <= 16: B=%d T=%d CD=%d K=%d", B, T, CD, K);
}

void tcu_dn_conv_forward(tsr_bf16 *y, const tsr_bf16 *x, const tsr_bf16 *hist, const tsr_bf16 *w,
                         const int32_t *seq, int B, int T, int CD, int K, tcu_stream s) {
    const char *what = "tcu_dn_conv_forward";
    dn_conv_dims(what, B, T, CD, K);
    const size_t n = (size_t)B * T * CD, nh = (size_t)B * (K - 1) * CD;
    if (n == 0) return;
    float *xf = widen(x, n, what), *hf = widen_opt(hist, nh, what);
    float *wf = widen(w, (size_t)CD * K, what), *yf = host_alloc(n * sizeof *yf, what);
    cpu_dn_conv_forward(yf, xf, hf, wf, seq, B, T, CD, K);
    round_into(y, yf, n);
    free(xf), free(hf), free(wf), free(yf);
}

void tcu_dn_conv_backward(tsr_bf16 *dx, tsr_bf16 *dhist, float *dw, const tsr_bf16 *dy,
                          const tsr_bf16 *x, const tsr_bf16 *hist, const tsr_bf16 *w,
                          const int32_t *seq, int B, int T, int CD, int K, tcu_stream s) {
    const char *what = "tcu_dn_conv_backward";
    dn_conv_dims(what, B, T, CD, K);
    const size_t n = (size_t)B * T * CD, nh = (size_t)B * (K - 1) * CD;
    if (n == 0) return;
    float *xf = widen(x, n, what), *hf = widen_opt(hist, nh, what);
    float *wf = widen(w, (size_t)CD * K, what), *dyf = widen(dy, n, what);
    float *gx = host_zeros(n, what), *gh = dhist ? host_zeros(nh + 1, what) : NULL;
    cpu_dn_conv_backward(gx, gh, dw, dyf, xf, hf, wf, seq, B, T, CD, K);
    add_round_into(dx, gx, n);
    if (dhist) add_round_into(dhist, gh, nh);
    free(xf), free(hf), free(wf), free(dyf), free(gx), free(gh);
}

void tcu_dn_gates_forward(float *beta, float *g, const tsr_bf16 *b, const tsr_bf16 *a,
                          const tsr_bf16 *A_log, const tsr_bf16 *dt_bias, int N, int HV,
                          tcu_stream s) {
    const char *what = "tcu_dn_gates_forward";
    REQUIRE(N >= 0 && HV >= 0, what, "need N, HV >= 0: N=%d HV=%d", N, HV);
    const size_t n = (size_t)N * HV;
    if (n == 0) return;
    float *bf = widen(b, n, what), *af = widen(a, n, what), *al = widen(A_log, HV, what);
    float *dt = widen(dt_bias, HV, what);
    cpu_dn_gates_forward(beta, g, bf, af, al, dt, N, HV);
    free(bf), free(af), free(al), free(dt);
}

void tcu_dn_gates_backward(tsr_bf16 *db, tsr_bf16 *da, float *dA_log, float *ddt_bias,
                           const float *dbeta, const float *dg, const tsr_bf16 *b,
                           const tsr_bf16 *a, const tsr_bf16 *A_log, const tsr_bf16 *dt_bias,
                           int N, int HV, tcu_stream s) {
    const char *what = "tcu_dn_gates_backward";
    REQUIRE(N >= 0 && HV >= 0, what, "need N, HV >= 0: N=%d HV=%d", N, HV);
    const size_t n = (size_t)N * HV;
    if (n == 0) return;
    float *bf = widen(b, n, what), *af = widen(a, n, what), *al = widen(A_log, HV, what);
    float *dt = widen(dt_bias, HV, what), *gb = host_zeros(n, what), *ga = host_zeros(n, what);
    cpu_dn_gates_backward(gb, ga, dA_log, ddt_bias, dbeta, dg, bf, af, al, dt, N, HV);
    add_round_into(db, gb, n), add_round_into(da, ga, n);
    free(bf), free(af), free(al), free(dt), free(gb), free(ga);
}

void tcu_dn_silu_gate_forward(tsr_bf16 *out, const tsr_bf16 *x, const tsr_bf16 *z, size_t n,
                              tcu_stream s) {
    const char *what = "tcu_dn_silu_gate_forward";
    if (n == 0) return;
    float *xf = widen(x, n, what), *zf = widen(z, n, what), *o = host_alloc(n * sizeof *o, what);
    cpu_dn_silu_gate_forward(o, xf, zf, n);
    round_into(out, o, n);
    free(xf), free(zf), free(o);
}

void tcu_dn_silu_gate_backward(tsr_bf16 *dx, tsr_bf16 *dz, const tsr_bf16 *dout,
                               const tsr_bf16 *x, const tsr_bf16 *z, size_t n, tcu_stream s) {
    const char *what = "tcu_dn_silu_gate_backward";
    if (n == 0) return;
    float *xf = widen(x, n, what), *zf = widen(z, n, what), *df = widen(dout, n, what);
    float *gx = host_zeros(n, what), *gz = host_zeros(n, what);
    cpu_dn_silu_gate_backward(gx, gz, df, xf, zf, n);
    add_round_into(dx, gx, n), add_round_into(dz, gz, n);
    free(xf), free(zf), free(df), free(gx), free(gz);
}
#endif /* TCU_EMU_SIMT_KERNELS */

/* ---- issue 67/68's model variants (cuvar67; cuda_llama.cu, cuda_moe.cu, cuda_xent.cu) -------- */

/* Built with TCU_EMU_SIMT_KERNELS: left out, the real kernels run instead (SIMT emulator) */
#ifndef TCU_EMU_SIMT_KERNELS

/* the per-head op's emulation with the CPU's per-projection op */
void tcu_qknorm_proj_forward(tsr_bf16 *out, float *rstd, const tsr_bf16 *inp, const tsr_bf16 *qw,
                             const tsr_bf16 *kw, int N, int NH, int KVH, int hs, float eps,
                             tcu_stream s) {
    qknorm_forward_emu("tcu_qknorm_proj_forward", 0, cpu->qknorm_proj_forward, out, rstd, inp, qw,
                       kw, N, NH, KVH, hs, eps);
}

void tcu_qknorm_proj_backward(tsr_bf16 *dinp, float *dqw, float *dkw, const tsr_bf16 *dout,
                              const tsr_bf16 *inp, const tsr_bf16 *qw, const tsr_bf16 *kw,
                              const float *rstd, int N, int NH, int KVH, int hs, tcu_stream s) {
    qknorm_backward_emu("tcu_qknorm_proj_backward", 0, cpu->qknorm_proj_backward, dinp, dqw, dkw,
                        dout, inp, qw, kw, rstd, N, NH, KVH, hs);
}

/* partial / scaled RoPE: rope_emu with rot and mscale */
void tcu_rope_part_forward(tsr_bf16 *qkv, const int32_t *pos, int p0, const float *inv_freq,
                           int B, int T, int NH, int KVH, int hs, int rot, float mscale,
                           tcu_stream s) {
    rope_emu("tcu_rope_part_forward", qkv, pos, p0, inv_freq, B, T, NH, KVH, hs, rot,
             mscale, 0);
}

void tcu_rope_part_backward(tsr_bf16 *dqkv, const int32_t *pos, int p0, const float *inv_freq,
                            int B, int T, int NH, int KVH, int hs, int rot, float mscale,
                            tcu_stream s) {
    rope_emu("tcu_rope_part_backward", dqkv, pos, p0, inv_freq, B, T, NH, KVH, hs, rot,
             mscale, 1);
}

/* a gated unit's forward and backward (the CPU op on the widened rows): GeGLU or gpt-oss's
 * (alpha, limit) */
static void unit_emu(const char *what, int gptoss, tsr_bf16 *o, const tsr_bf16 *inp,
                     const tsr_bf16 *dout, int N, int F, float alpha, float limit,
                     tsr_grad_mode mode) {
    check_nf(what, N, F, o && inp);
    if (N == 0) return;
    const size_t n = (size_t)N * F;
    float *x = widen(inp, 2 * n, what);
    if (!dout) {
        float *y = host_alloc(n * sizeof *y, what);
        if (gptoss) cpu->moe_gptoss_forward(y, x, N, F, alpha, limit);
        else cpu->geglu_forward(y, x, N, F);
        round_into(o, y, n);
        free(y), free(x);
        return;
    }
    float *g = widen(dout, n, what), *dx = host_zeros(2 * n, what);
    if (gptoss) cpu->moe_gptoss_backward(dx, x, g, N, F, alpha, limit);
    else cpu->geglu_backward(dx, x, g, N, F);
    grad_round_into(o, dx, 2 * n, mode);
    free(dx), free(g), free(x);
}

void tcu_geglu_forward(tsr_bf16 *out, const tsr_bf16 *inp, int N, int F, tcu_stream s) {
    unit_emu("tcu_geglu_forward", 0, out, inp, NULL, N, F, 0.0f, 0.0f, TSR_GRAD_SET);
}

void tcu_geglu_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, int N, int F,
                        tsr_grad_mode mode, tcu_stream s) {
    REQUIRE(dout, "tcu_geglu_backward", "a required pointer is NULL");
    unit_emu("tcu_geglu_backward", 0, dinp, inp, dout, N, F, 0.0f, 0.0f, mode);
}

void tcu_moe_gptoss_forward(tsr_bf16 *out, const tsr_bf16 *inp, int N, int F, float alpha,
                            float limit, tcu_stream s) {
    unit_emu("tcu_moe_gptoss_forward", 1, out, inp, NULL, N, F, alpha, limit, TSR_GRAD_SET);
}

void tcu_moe_gptoss_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, int N,
                             int F, float alpha, float limit, tsr_grad_mode mode, tcu_stream s) {
    REQUIRE(dout, "tcu_moe_gptoss_backward", "a required pointer is NULL");
    unit_emu("tcu_moe_gptoss_backward", 1, dinp, inp, dout, N, F, alpha, limit, mode);
}

/* out's rows of expert e = round(out + b[e]) (the CPU op on the widened rows) */
void tcu_moe_bias_forward(tsr_bf16 *out, const tsr_bf16 *b, const int32_t *offs, int E, int OC,
                          tcu_stream s) {
    const char *what = "tcu_moe_bias_forward";
    REQUIRE(E >= 1 && OC >= 1 && out && b && offs, what, "bad arguments E=%d OC=%d", E, OC);
    const size_t n = (size_t)offs[E] * OC;
    float *x = widen(out, n, what), *bf = widen(b, (size_t)E * OC, what);
    cpu->moe_bias_forward(x, bf, offs, E, OC);
    round_into(out, x, n);
    free(bf), free(x);
}

void tcu_moe_bias_backward(float *db, const tsr_bf16 *dout, const int32_t *offs, int E, int OC,
                           tcu_stream s) {
    const char *what = "tcu_moe_bias_backward";
    REQUIRE(E >= 1 && OC >= 1 && db && dout && offs, what, "bad arguments E=%d OC=%d", E, OC);
    float *g = widen(dout, (size_t)offs[E] * OC, what);
    cpu->moe_bias_backward(db, g, offs, E, OC);
    free(g);
}

void tcu_scale_bf16(tsr_bf16 *x, float sc, size_t n, tcu_stream s) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(bf16_widen(x[i]) * sc);
}

static float emu_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

void tcu_gate_forward(tsr_bf16 *gated, const tsr_bf16 *y, const tsr_bf16 *gate, size_t n,
                      tcu_stream s) {
    for (size_t i = 0; i < n; i++)
        gated[i] = bf16_round(bf16_widen(y[i]) * emu_sigmoid(bf16_widen(gate[i])));
}

void tcu_gate_backward(tsr_bf16 *dy, tsr_bf16 *dgate, const tsr_bf16 *y, const tsr_bf16 *gate,
                       size_t n, tcu_stream s) {
    for (size_t i = 0; i < n; i++) {
        const float sg = emu_sigmoid(bf16_widen(gate[i])), d = bf16_widen(dy[i]);
        dgate[i] = bf16_round(d * bf16_widen(y[i]) * sg * (1.0f - sg));
        dy[i] = bf16_round(d * sg);
    }
}

/* the shared expert's gate: the CPU ops on the widened tensors, activations rounded back */
void tcu_moe_shgate_forward(tsr_bf16 *out, const tsr_bf16 *x, const tsr_bf16 *w, int N, int C,
                            tcu_stream s) {
    const char *what = "tcu_moe_shgate_forward";
    REQUIRE(N >= 0 && C >= 1 && out && x && w, what, "bad arguments N=%d C=%d", N, C);
    const size_t n = (size_t)N * C;
    float *o = widen(out, n, what), *xf = widen(x, n, what), *wf = widen(w, C, what);
    cpu->moe_shgate_forward(o, xf, wf, N, C);
    round_into(out, o, n);
    free(wf), free(xf), free(o);
}

void tcu_moe_shgate_grad(float *dg, float *gw, const tsr_bf16 *shg, const tsr_bf16 *dshg,
                         const tsr_bf16 *x, const tsr_bf16 *w, int N, int S, int C, tcu_stream s) {
    const char *what = "tcu_moe_shgate_grad";
    REQUIRE(N >= 0 && C >= 1 && S >= 1 && dg && shg && dshg && x && w, what,
            "bad arguments N=%d S=%d C=%d", N, S, C);
    const size_t n = (size_t)N * C, ns = (size_t)N * S;
    float *xf = widen(x, n, what), *wf = widen(w, C, what);
    float *hf = widen(shg, ns, what), *df = widen(dshg, ns, what);
    cpu->moe_shgate_grad(dg, gw, hf, df, xf, wf, N, S, C);
    free(df), free(hf), free(wf), free(xf);
}

void tcu_moe_shgate_dx(tsr_bf16 *dx, const float *dg, const tsr_bf16 *w, int N, int C,
                       tcu_stream s) {
    const char *what = "tcu_moe_shgate_dx";
    REQUIRE(N >= 0 && C >= 1 && dx && dg && w, what, "bad arguments N=%d C=%d", N, C);
    const size_t n = (size_t)N * C;
    float *d = host_zeros(n, what), *wf = widen(w, C, what);
    cpu->moe_shgate_dx(d, dg, wf, N, C);
    add_round_into(dx, d, n);
    free(wf), free(d);
}

/* each row's capped logits z (the CPU's softcap_forward on the widened row), the softmax and loss
 * over z, with dlosses the gradient times the CPU's 1 - (z / cap)^2, rounded over the row */
void tcu_softmax_xent_capped(float *losses, tsr_bf16 *logits, const int32_t *targets,
                             const float *dlosses, int N, int V, int Vp, float cap, tcu_stream s) {
    const char *what = "tcu_softmax_xent";
    REQUIRE(cap >= 0.0f, what, "cap = %g must be >= 0", (double)cap);
    if (!(cap > 0.0f) || N == 0) {
        tcu_softmax_xent(losses, logits, targets, dlosses, N, V, Vp, s);
        return;
    }
    REQUIRE(V >= 1 && Vp >= V && N > 0 && losses && logits && targets, what, "bad arguments");
    float *row = host_alloc((size_t)Vp * sizeof *row, what);
    float *z = host_alloc((size_t)Vp * sizeof *z, what);
    for (int n = 0; n < N; n++) {
        tsr_bf16 *lr = logits + (size_t)n * Vp;
        widen_into(row, lr, Vp);
        for (int j = 0; j < Vp; j++) z[j] = row[j];
        cpu->softcap_forward(z, row, 1, V, Vp, cap);
        for (int j = 0; j < Vp; j++) row[j] = z[j];
        if (targets[n] >= V) { /* tcu_softmax_xent's poisoned row, its NaN bits */
            tcu_softmax_xent(losses + n, lr, targets + n, dlosses ? dlosses + n : NULL, 1, V, Vp, s);
            continue;
        }
        cpu->softmax_xent_forward(losses + n, row, row, targets + n, 1, V, Vp);
        if (!dlosses) continue;
        cpu->softmax_xent_backward(row, dlosses + n, row, targets + n, 1, V, Vp);
        if (targets[n] >= 0) cpu->softcap_backward(row, z, 1, V, Vp, cap);
        round_into(lr, row, Vp);
    }
    free(z), free(row);
}

void tcu_argmax_capped(int32_t *idx, const tsr_bf16 *logits, int N, int V, int Vp, float cap,
                       tcu_stream s) {
    const char *what = "tcu_argmax";
    REQUIRE(N >= 0 && V >= 1 && Vp >= V && idx && logits, what, "bad arguments");
    if (!(cap > 0.0f)) {
        tcu_argmax(idx, logits, N, V, Vp, s);
        return;
    }
    for (int n = 0; n < N; n++) { /* the largest capped value, the lowest column on ties */
        const tsr_bf16 *x = logits + (size_t)n * Vp;
        float bv = -INFINITY;
        int bj = 0;
        for (int j = 0; j < V; j++) {
            float v = cap * tanhf(bf16_widen(x[j]) / cap);
            if (isnan(v)) v = -INFINITY;
            if (v > bv) bv = v, bj = j;
        }
        idx[n] = bj;
    }
}

#endif /* TCU_EMU_SIMT_KERNELS */
