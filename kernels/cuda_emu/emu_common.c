/* emu_common.c — the host emulator of cuda_common.cu (emu.h): the device, its memory, streams
 * and events, the conversions and the optimizer's ops; and what the other parts share: failing,
 * fp32 host temporaries of bf16 tensors, a norm's input, a layer's
 * attention variants. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu.h"

#define EMU_ALIGN 256                     /* device pointer alignment; header room */
#define EMU_MAGIC 0x74737265756d6531ull   /* "tsreume1": the header of a live block */
#define EMU_DEFAULT_MEM ((size_t)8 << 30) /* capacity without TSR_EMU_MEM */

static const tsr_ops *const cpu = &tsr_cpu_ops;

static void (*fail_hook)(int status);

void emu_set_fail_hook(void (*hook)(int status)) { fail_hook = hook; }

_Noreturn void emu_fail(const char *what, const char *fmt, ...) {
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

void *emu_host_alloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    REQUIRE(p, what, "out of host memory for a temporary of %zu bytes", bytes);
    return p;
}

float *emu_host_zeros(size_t n, const char *what) {
    float *p = calloc(n ? n : 1, sizeof *p);
    REQUIRE(p, what, "out of host memory for a temporary of %zu floats", n);
    return p;
}

void emu_widen_into(float *f, const tsr_bf16 *x, size_t n) {
    for (size_t i = 0; i < n; i++) f[i] = bf16_widen(x[i]);
}

float *emu_widen(const tsr_bf16 *x, size_t n, const char *what) {
    float *f = emu_host_alloc(n * sizeof *f, what);
    emu_widen_into(f, x, n);
    return f;
}

void emu_round_into(tsr_bf16 *x, const float *f, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(f[i]);
}

void emu_add_round_into(tsr_bf16 *x, const float *inc, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(bf16_widen(x[i]) + inc[i]);
}

void emu_grad_round_into(tsr_bf16 *x, const float *inc, size_t n, tsr_grad_mode mode) {
    if (mode == TSR_GRAD_SET) emu_round_into(x, inc, n);
    else emu_add_round_into(x, inc, n);
}

typedef struct {
    uint64_t magic;
    size_t bytes; /* as counted in emu_live */
} emu_head;

static atomic_size_t emu_live, emu_cap; /* live bytes; capacity (0: TSR_EMU_MEM not read yet) */
static atomic_size_t emu_peak;          /* the most live at once */

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

void *tcu_host_alloc(size_t bytes, const char *what) { return emu_host_alloc(bytes, what); }

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

tcu_stream tcu_stream_create(void) { return emu_host_alloc(1, "tcu_stream_create"); }

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
    emu_event *e = emu_host_alloc(sizeof *e, what);
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

void tcu_f32_to_bf16(tsr_bf16 *out, const float *inp, size_t n, tcu_stream s) {
    emu_round_into(out, inp, n);
}

void tcu_bf16_to_f32(float *out, const tsr_bf16 *inp, size_t n, tcu_stream s) {
    emu_widen_into(out, inp, n);
}

/* The input of a norm, widened: a, or (fused) residual = round(a + b), written, then read back as
 * stored (the fused op is bit for bit the residual op and the norm op) */
float *emu_norm_input(const char *what, int fused, tsr_bf16 *residual, const tsr_bf16 *a,
                         const tsr_bf16 *b, size_t n) {
    float *x = emu_host_alloc(n * sizeof *x, what);
    for (size_t i = 0; i < n; i++) {
        if (fused) residual[i] = bf16_round(bf16_widen(a[i]) + bf16_widen(b[i]));
        x[i] = bf16_widen(fused ? residual[i] : a[i]);
    }
    return x;
}

/* The layer's variants for the CPU ops: var (or NULL) with its sinks, bf16 on this backend
 * (cuda_ops.h tcu_attention_forward_var), widened into *sk (NH floats; free it after), in *v */
const tsr_attn_var *emu_var(const tsr_attn_var *var, int NH, tsr_attn_var *v, float **sk,
                                   const char *what) {
    *sk = NULL;
    if (!var) return NULL;
    *v = *var;
    if (var->sinks) {
        *sk = emu_host_alloc((size_t)NH * sizeof **sk, what);
        emu_widen_into(*sk, (const tsr_bf16 *)(const void *)var->sinks, (size_t)NH);
        v->sinks = *sk;
    }
    return v;
}

/* *acc += (float) of the CPU op's double sum */
void tcu_sumsq(float *acc, const float *g, size_t n, tcu_stream s) {
    if (n == 0) return;
    REQUIRE(acc && g, "tcu_sumsq", "acc and g must not be NULL");
    *acc += (float)cpu->sumsq(g, n);
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
    if (p_bf16) emu_round_into(p_bf16, p, n);
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
