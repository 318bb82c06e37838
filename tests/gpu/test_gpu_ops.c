/* test_gpu_ops.c — every CUDA op (kernels/cuda, cuda_ops.h) against its fp32 CPU twin
 * (kernels/cpu, ops.h), on random inputs drawn afresh each run (the seed is printed;
 * TSR_TEST_SEED=S replays it). tests/gpu/README.md has the reasoning at length.
 *
 * Inputs are drawn in fp32 and rounded to bf16 on the host (host_bf16: round to nearest even), so
 * the CPU op (fp32) and the GPU op (bf16 storage, fp32 arithmetic) read the same numbers; the GPU
 * API's fp32 inputs are plain fp32 on both sides. Write-only outputs are poisoned (bytes 0xff: NaN
 * in bf16 and fp32) before each run, so a forgotten element stays NaN; += outputs start from the
 * same random values on both sides, which also checks that the op adds. Device buffers carry 256
 * guard bytes on each side; the last check says whether any op wrote into them.
 *
 * Comparison (docs/style.md "Tests"): NaN/Inf counted first, then |gpu - cpu| <= atol + rtol |cpu| + mtol mag,
 * written !(err <= tol); mag is a per-element size of the terms that made the result (sum of
 * |terms|: the CPU op run on absolute values where it is linear). Failures name the worst element.
 * Tolerances, in units of u = 2^-8 (bf16 has 8 significant bits; rounding to nearest errs by
 * 2^-9 .. 2^-8 relative, by where the value lies in its binade):
 *   - one rounding of an fp32-accurate value to bf16: rtol 2u (RTOL_BF16);
 *   - fp32 sums of products of bf16 values (exact products): error <= depth * 2^-24 of the sum of
 *     |terms|; MTOL_SUM = 2^-14 covers any order for <= 1024 terms, and blocked longer sums;
 *   - an intermediate a GPU op may round to bf16 (P and dS in flash attention, the increment of a
 *     += before the add): u or 2u of that term's own size.
 * Single roundings of exact fp32 values (encoder, residual, the fused LayerNorm's residual,
 * conversions, AdamW's bf16 copy) are compared bit for bit, and the ops cuda_ops.h calls
 * deterministic are run twice and compared bit for bit.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_ops.h"
#include "ops.h"
#include "tcu_cudnn.h" /* cuDNN's fused attention (gpu_ops_cudnn.c) */
#include "tcu_fp8_gemm.h"
#include "tap.h"

#define U_BF16 0x1p-8    /* bf16 unit roundoff */
#define RTOL_BF16 0x1p-7 /* 2u: one rounding to bf16 of an fp32-accurate value */
#define MTOL_SUM 0x1p-14 /* fp32 summation error, relative to the sum of |terms| (above) */
#define ATOL_LN 0x1p-12  /* LayerNorm outputs of order 1: fp32 statistics differ by ~1e-6 */

static const tsr_ops *cpu = &tsr_cpu_ops;
static tcu_stream g_s;

/* ---- host helpers: rng, bf16, memory ------------------------------------------------------ */

static uint64_t rng_state;
static uint64_t rng_next(void) { /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}
static double urand(void) { return (double)(rng_next() >> 11) * 0x1.0p-53; }
static float uni(double lo, double hi) { return (float)(lo + (hi - lo) * urand()); }
static int irand(int n) { return (int)(urand() * n); }

/* fp32 -> bf16 bits, round to nearest even; NaN -> a quiet NaN of the same sign (never Inf) */
static uint16_t host_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
static float bf16_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}
static float rbf16(float f) { return bf16_f32(host_bf16(f)); }
static int nan16(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu); }

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test_gpu_ops: out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* Buffers of one test live in a scope; scope_end frees them all (host and device) and checks the
 * guard bytes around every device buffer. */
#define MAX_LIVE 96
#define GUARD 256
#define GUARD_BYTE 0xa5
static void *host_live[MAX_LIVE];
static int n_host;
static struct { unsigned char *base; size_t bytes; } dev_live[MAX_LIVE];
static int n_dev;
static size_t dev_allocs, dev_frees, guards_checked, guards_broken;

static void room(int live) {
    if (live < MAX_LIVE) return;
    fprintf(stderr, "test_gpu_ops: more than %d host or device buffers in one test\n", MAX_LIVE);
    exit(1);
}
static void *halloc(size_t bytes) {
    room(n_host);
    return host_live[n_host++] = xmalloc(bytes);
}
static float *hf(size_t n) { return halloc(n * sizeof(float)); }
static int32_t *hi32(size_t n) { return halloc(n * sizeof(int32_t)); }
static uint16_t *h16(size_t n) { return halloc(n * sizeof(uint16_t)); }
static float *hcopy(const float *x, size_t n) { return memcpy(hf(n), x, n * sizeof(float)); }
static float *habs(const float *x, size_t n) {
    float *a = hf(n);
    for (size_t i = 0; i < n; i++) a[i] = fabsf(x[i]);
    return a;
}
static void fill_bf16(float *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = rbf16(uni(lo, hi));
}
static void fill_f32(float *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = uni(lo, hi);
}

static void h2d(void *d, const void *h, size_t bytes) {
    tcu_memcpy_h2d(d, h, bytes, g_s);
    tcu_sync(g_s);
}
static void d2h(void *h, const void *d, size_t bytes) {
    tcu_memcpy_d2h(h, d, bytes, g_s);
    tcu_sync(g_s);
}
static void fill_bytes(void *d, int byte, size_t bytes) {
    unsigned char *h = xmalloc(bytes);
    memset(h, byte, bytes);
    h2d(d, h, bytes);
    free(h);
}
/* every byte 0xff: bf16 0xffff and fp32 0xffffffff are NaN */
static void poison(void *d, size_t bytes) { fill_bytes(d, 0xff, bytes); }

static void *dalloc(size_t bytes) {
    room(n_dev);
    unsigned char *base = tcu_malloc(bytes + 2 * GUARD, "test_gpu_ops buffer");
    fill_bytes(base, GUARD_BYTE, bytes + 2 * GUARD);
    dev_live[n_dev].base = base;
    dev_live[n_dev++].bytes = bytes;
    dev_allocs++;
    return base + GUARD;
}
static tsr_bf16 *d16(size_t n) { return dalloc(n * sizeof(tsr_bf16)); }
static float *df32(size_t n) { return dalloc(n * sizeof(float)); }

static void put_bf16(tsr_bf16 *d, const float *x, size_t n) {
    uint16_t *h = xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = host_bf16(x[i]);
    h2d(d, h, n * sizeof *h);
    free(h);
}
static void put_f32(float *d, const float *x, size_t n) { h2d(d, x, n * sizeof(float)); }
static tsr_bf16 *new_bf16(const float *x, size_t n) {
    tsr_bf16 *d = d16(n);
    put_bf16(d, x, n);
    return d;
}
static float *new_f32(const float *x, size_t n) {
    float *d = df32(n);
    put_f32(d, x, n);
    return d;
}
static int32_t *new_i32(const int32_t *x, size_t n) {
    int32_t *d = dalloc(n * sizeof(int32_t));
    h2d(d, x, n * sizeof(int32_t));
    return d;
}
static float *get_bf16(const tsr_bf16 *d, size_t n) { /* into a new host float array */
    uint16_t *h = h16(n);
    float *x = hf(n);
    d2h(h, d, n * sizeof *h);
    for (size_t i = 0; i < n; i++) x[i] = bf16_f32(h[i]);
    return x;
}
static float *get_f32(const float *d, size_t n) {
    float *x = hf(n);
    d2h(x, d, n * sizeof(float));
    return x;
}

static void scope_end(const char *what) {
    for (int k = 0; k < n_dev; k++) {
        unsigned char *g = xmalloc(2 * GUARD);
        d2h(g, dev_live[k].base, GUARD);
        d2h(g + GUARD, dev_live[k].base + GUARD + dev_live[k].bytes, GUARD);
        int broken = 0;
        for (int i = 0; i < 2 * GUARD; i++) broken |= g[i] != GUARD_BYTE;
        guards_checked++;
        if (broken) {
            guards_broken++;
            tap_diag("%s: an op wrote outside device buffer %d of this test (%zu bytes)", what, k,
                     dev_live[k].bytes);
        }
        free(g);
        tcu_free(dev_live[k].base);
        dev_frees++;
    }
    n_dev = 0;
    for (int k = 0; k < n_host; k++) free(host_live[k]);
    n_host = 0;
}

/* ---- checks ------------------------------------------------------------------------------- */

/* a label in one of 4 rotating buffers (call sites only: the check helpers do not use it) */
static const char *L(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *L(const char *fmt, ...) {
    static char buf[4][256];
    static int k;
    char *b = buf[k++ & 3];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof buf[0], fmt, ap);
    va_end(ap);
    return b;
}

/* got vs ref (n): NaN/Inf counted first, then |got - ref| <= atol + rtol |ref| + mtol mag[i]. */
static int check_close(const char *what, const float *got, const float *ref, size_t n, double atol,
                       double rtol, const float *mag, double mtol) {
    size_t nonfinite = 0, first_nf = 0, bad = 0, wi = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) || !isfinite(ref[i])) {
            if (!nonfinite++) first_nf = i;
            continue;
        }
        double err = fabs((double)got[i] - ref[i]);
        double tol = atol + rtol * fabs((double)ref[i]) + (mag ? mtol * mag[i] : 0.0);
        if (!(err <= tol)) bad++;
        double r = tol > 0.0 ? err / tol : err > 0.0 ? INFINITY : 0.0;
        if (r > worst) worst = r, wi = i;
    }
    char nf[96] = "", mt[32] = "";
    if (nonfinite)
        snprintf(nf, sizeof nf, " (first [%zu]: gpu %g cpu %g)", first_nf, got[first_nf],
                 ref[first_nf]);
    if (mag) snprintf(mt, sizeof mt, " + %.2g mag", mtol);
    return tap_ok(nonfinite == 0 && bad == 0,
                  "%s: worst err/tol %.3g at [%zu] (gpu %.7g cpu %.7g), %zu of %zu over tol "
                  "(atol %.2g + rtol %.2g|cpu|%s), %zu NaN/Inf%s",
                  what, worst, wi, got[wi], ref[wi], bad, n, atol, rtol, mt, nonfinite, nf);
}

/* bf16 bits on the device == want (bits); a wanted NaN accepts any NaN */
static int check_bits16(const char *what, const tsr_bf16 *d, const uint16_t *want, size_t n) {
    uint16_t *got = h16(n);
    d2h(got, d, n * sizeof *got);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (nan16(want[i]) ? !nan16(got[i]) : got[i] != want[i])
            if (!bad++) first = i;
    char fb[96] = "";
    if (bad)
        snprintf(fb, sizeof fb, " (first [%zu]: gpu 0x%04x = %g, want 0x%04x = %g)", first,
                 got[first], bf16_f32(got[first]), want[first], bf16_f32(want[first]));
    return tap_ok(bad == 0, "%s: %zu of %zu differ%s", what, bad, n, fb);
}
/* bf16 on the device == bf16(ref) bit for bit */
static int check_exact16(const char *what, const tsr_bf16 *d, const float *ref, size_t n) {
    uint16_t *want = h16(n);
    for (size_t i = 0; i < n; i++) want[i] = host_bf16(ref[i]);
    return check_bits16(what, d, want, n);
}
/* number of elements (of elem bytes) that differ */
static size_t ndiff(const void *a, const void *b, size_t n, size_t elem) {
    size_t k = 0;
    const char *x = a, *y = b;
    for (size_t i = 0; i < n; i++) k += memcmp(x + i * elem, y + i * elem, elem) != 0;
    return k;
}
/* TSR_GRAD_SET (ops.h): an op's input gradient written over a poisoned buffer (0xff bytes: NaN)
 * against the same op's += over zeros. bits: the same bits (0 + x in the kernel); else the same
 * values (cuBLASLt's beta = 0 may keep a -0 that 0 + x turns into +0). Returns how many differ;
 * a poison element read shows as a NaN. */
static size_t set_vs_add(const float *set, const float *add, size_t n, int bits) {
    if (bits) return ndiff(set, add, n, sizeof(float));
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += !(set[i] == add[i]);
    return k;
}

/* e[i] = a * |x[i] - y[i]| (+ b * |z[i]| when z): extra tolerance terms */
static float *absdiff(const float *x, const float *y, size_t n, float a, const float *z, float b) {
    float *e = hf(n);
    for (size_t i = 0; i < n; i++) e[i] = a * fabsf(x[i] - y[i]) + (z ? b * fabsf(z[i]) : 0.0f);
    return e;
}

/* Segment ids of one row of T: runs of lengths 3,1,5,2,8,1,13,4,30,6 (from `shift` on, cycling)
 * with ids 7,2,9,7,4,2,11,7,0,5: 7 comes back after 2 and 9, a new segment (runs, not labels). */
static void make_segments(int32_t *seq, int T, int shift) {
    static const int lens[10] = {3, 1, 5, 2, 8, 1, 13, 4, 30, 6};
    static const int32_t ids[10] = {7, 2, 9, 7, 4, 2, 11, 7, 0, 5};
    for (int t = 0, k = shift; t < T; k++)
        for (int r = 0; r < lens[k % 10] && t < T; r++) seq[t++] = ids[k % 10];
}

/* ---- conversions -------------------------------------------------------------------------- */

static void test_convert(void) {
    /* {fp32 bits, bf16 bits}; 0x7fc0 stands for "any NaN" */
    static const uint32_t table[][2] = {
        {0x00000000, 0x0000}, {0x80000000, 0x8000}, {0x3f800000, 0x3f80}, {0xbf800000, 0xbf80},
        {0x3f808000, 0x3f80}, /* tie, even: down */ {0x3f818000, 0x3f82}, /* tie, odd: up */
        {0xbf808000, 0xbf80}, {0xbf818000, 0xbf82}, {0x3f807fff, 0x3f80}, {0x3f808001, 0x3f81},
        {0x3fff8000, 0x4000}, /* tie rounds up into the exponent */
        {0x3eaaaaab, 0x3eab}, {0x40490fdb, 0x4049}, {0x7f800000, 0x7f80}, {0xff800000, 0xff80},
        {0x7f7fffff, 0x7f80}, {0xff7fffff, 0xff80}, /* FLT_MAX overflows to inf */
        {0x7f7f7fff, 0x7f7f}, {0x7f7f8000, 0x7f80}, /* tie at the top: odd, up to inf */
        {0x7fc00000, 0x7fc0}, {0xffc00000, 0x7fc0}, {0x7f800001, 0x7fc0}, /* signalling NaN */
        {0x7fffffff, 0x7fc0}, {0xff800001, 0x7fc0}, {0x00000001, 0x0000}, {0x80000001, 0x8000},
        {0x00008000, 0x0000}, {0x00018000, 0x0002}, {0x00010000, 0x0001}, /* subnormals */
        {0x007fffff, 0x0080}, {0x00800000, 0x0080}, {0x807fffff, 0x8080},
    };
    const size_t ns = sizeof table / sizeof table[0], nr = ((size_t)1 << 20) + 3, n = ns + nr;
    uint32_t *in = halloc(n * sizeof *in);
    uint16_t *want = h16(n);
    size_t host_bad = 0;
    for (size_t i = 0; i < ns; i++) {
        in[i] = table[i][0];
        want[i] = (uint16_t)table[i][1];
        float f;
        memcpy(&f, &in[i], sizeof f);
        uint16_t h = host_bf16(f);
        host_bad += nan16(want[i]) ? !nan16(h) : h != want[i]; /* the test's own rounding */
    }
    for (size_t i = ns; i < n; i++) { /* every exponent, sign and mantissa, NaNs included */
        in[i] = (uint32_t)(rng_next() >> 32);
        float f;
        memcpy(&f, &in[i], sizeof f);
        want[i] = host_bf16(f);
    }
    float *d_in = dalloc(n * sizeof(float));
    tsr_bf16 *d_out = d16(n);
    h2d(d_in, in, n * sizeof(float));
    fill_bytes(d_out, 0x5a, n * sizeof(tsr_bf16)); /* finite poison: an unwritten NaN shows */
    tcu_f32_to_bf16(d_out, d_in, n, g_s);
    if (host_bad) tap_diag("test_gpu_ops: host_bf16 disagrees with the table %zu times", host_bad);
    uint16_t *got = h16(n);
    d2h(got, d_out, n * sizeof *got);
    size_t bad = host_bad, first = 0;
    for (size_t i = 0; i < ns; i++)
        if (nan16(want[i]) ? !nan16(got[i]) : got[i] != want[i])
            if (!bad++) first = i;
    tap_ok(bad == 0,
           "f32_to_bf16: %zu special values (ties to even, carry into the exponent, +-0, +-inf, "
           "FLT_MAX -> inf, quiet and signalling NaN stay NaN, subnormals): %zu wrong%s",
           ns, bad,
           bad ? L(" (first 0x%08x -> 0x%04x, want 0x%04x)", in[first], got[first], want[first])
               : "");
    check_bits16(L("f32_to_bf16: n=%zu random fp32 bit patterns == host round-to-nearest-even "
                   "(NaN stays NaN)", nr), d_out + ns, want + ns, nr);

    /* bf16 -> f32: every one of the 65536 values is exact (bits << 16); NaN stays NaN */
    const size_t nb = 65536;
    uint16_t *all = h16(nb);
    for (size_t i = 0; i < nb; i++) all[i] = (uint16_t)i;
    tsr_bf16 *d_b = d16(nb);
    float *d_f = df32(nb);
    h2d(d_b, all, nb * sizeof *all);
    fill_bytes(d_f, 0x5a, nb * sizeof(float));
    tcu_bf16_to_f32(d_f, d_b, nb, g_s);
    uint32_t *gf = halloc(nb * sizeof *gf);
    d2h(gf, d_f, nb * sizeof *gf);
    bad = 0;
    for (size_t i = 0; i < nb; i++) {
        int want_nan = nan16(all[i]), got_nan = (gf[i] & 0x7fffffffu) > 0x7f800000u;
        if (want_nan ? !got_nan : gf[i] != (uint32_t)i << 16)
            if (!bad++) first = i;
    }
    tap_ok(bad == 0, "bf16_to_f32: all 65536 bf16 values exact (NaN stays NaN): %zu wrong%s", bad,
           bad ? L(" (first 0x%04zx -> 0x%08x)", first, gf[first]) : "");
    scope_end("convert");
}

/* ---- encoder ------------------------------------------------------------------------------ */

typedef struct { int B, T, C, V, Vp, wpe, pos, tok_range; } enc_cfg;
static int enc_checks(const enc_cfg *e) { return 4 + 2 * e->wpe; }

static void test_encoder(const enc_cfg *e) {
    const int B = e->B, T = e->T, C = e->C, Tmax = T + 3; /* wpe rows >= T are never read */
    const size_t N = (size_t)B * T, no = N * C, nwte = (size_t)e->Vp * C, nwpe = (size_t)Tmax * C;
    char tag[128];
    snprintf(tag, sizeof tag, "B=%d T=%d C=%d V=%d Vp=%d %s%s", B, T, C, e->V, e->Vp,
             !e->wpe ? "no wpe" : e->pos ? "wpe at pos" : "wpe at t",
             e->tok_range < e->V ? " (repeated tokens)" : "");
    int32_t *tok = hi32(N), *pos = hi32(N), *seq = hi32(T);
    for (size_t n = 0; n < N; n++) tok[n] = irand(e->tok_range);
    tok[N - 1] = e->V - 1;
    for (int b = 0; b < B; b++) { /* positions restart with each document (segment) */
        make_segments(seq, T, 2 * b);
        for (int t = 0; t < T; t++)
            pos[b * T + t] = t && seq[t] == seq[t - 1] ? pos[b * T + t - 1] + 1 : 0;
    }
    const int32_t *ps = e->pos ? pos : NULL;
    float *wte = hf(nwte), *wpe = hf(nwpe), *dout = hf(no), *ref = hf(no);
    fill_bf16(wte, nwte, -1, 1), fill_bf16(wpe, nwpe, -1, 1), fill_bf16(dout, no, -1, 1);
    tsr_bf16 *d_wte = new_bf16(wte, nwte), *d_wpe = e->wpe ? new_bf16(wpe, nwpe) : NULL;
    tsr_bf16 *d_out = d16(no), *d_dout = new_bf16(dout, no);
    int32_t *d_tok = new_i32(tok, N), *d_pos = e->pos ? new_i32(pos, N) : NULL;

    /* forward: one fp32 addition of two bf16 values (exact), one rounding: bits of bf16(cpu) */
    cpu->encoder_forward(ref, tok, wte, e->wpe ? wpe : NULL, ps, B, T, C);
    poison(d_out, no * sizeof(tsr_bf16));
    tcu_encoder_forward(d_out, d_tok, d_wte, d_wpe, d_pos, B, T, C, g_s);
    check_exact16(L("encoder_forward %s: out == bf16(cpu)", tag), d_out, ref, no);

    /* backward: dwte rows are fp32 sums of the dout rows of one token (<= ~100 here), dwpe rows
     * of one position: MTOL_SUM of the sum of |terms| (mag: the CPU op on |dout| from |g0|) */
    float *g0w = hf(nwte), *g0p = hf(nwpe);
    fill_f32(g0w, nwte, -1, 1), fill_f32(g0p, nwpe, -1, 1);
    float *rw = hcopy(g0w, nwte), *rp = hcopy(g0p, nwpe);
    float *mw = habs(g0w, nwte), *mp = habs(g0p, nwpe);
    cpu->encoder_backward(rw, e->wpe ? rp : NULL, dout, tok, ps, B, T, C);
    cpu->encoder_backward(mw, e->wpe ? mp : NULL, habs(dout, no), tok, ps, B, T, C);
    float *d_dw = df32(nwte), *d_dp = e->wpe ? df32(nwpe) : NULL, *gw[3], *gp[3];
    for (int k = 0; k < 3; k++) { /* tokens_host twice, then NULL (atomics) */
        put_f32(d_dw, g0w, nwte);
        if (d_dp) put_f32(d_dp, g0p, nwpe);
        tcu_encoder_backward(d_dw, d_dp, d_dout, d_tok, k < 2 ? tok : NULL, d_pos, B, T, C, g_s);
        gw[k] = get_f32(d_dw, nwte);
        gp[k] = d_dp ? get_f32(d_dp, nwpe) : NULL;
    }
    for (int k = 0; k < 3; k += 2) {
        const char *how = k ? "tokens_host NULL (atomics)" : "tokens_host";
        const char *what = L("encoder_backward %s, %s", tag, how);
        check_close(L("%s: dwte", what), gw[k], rw, nwte, 0, 0, mw, MTOL_SUM);
        if (e->wpe) check_close(L("%s: dwpe", what), gp[k], rp, nwpe, 0, 0, mp, MTOL_SUM);
        if (k) break;
        size_t dif = ndiff(gw[0], gw[1], nwte, 4) + (e->wpe ? ndiff(gp[0], gp[1], nwpe, 4) : 0);
        tap_ok(dif == 0, "%s: run twice, dwte%s bit-identical (%zu differ)", what,
               e->wpe ? " and dwpe" : "", dif);
    }
    scope_end(tag);
}

/* ---- layernorm ---------------------------------------------------------------------------- */

typedef struct { int N, C, bias; float offset; } ln_cfg;
static int ln_checks(const ln_cfg *l) { return 11 + l->bias; }

/* The norm backwards' HOLD variant (tcu_norm_set_hold, issue 25), 1 check. The op checks run with
 * it off for both norms (main sets the mask 0: each row read twice, the reference of the held
 * kernel's bits, whatever the library's default). norm_hold_on switches it on for both at every
 * C (TCU_NORM_HOLD_ALL) and returns 1 where it runs, for the caller to run the backward again
 * from the same inputs, check that it leaves the twice-read kernel's bits (norm_hold_check),
 * which switches it off again; else skips the check, saying why, and returns 0: C outside the
 * warp-per-row kernel's reach (C % 8 != 0 or C > 1024: the row-group kernel), or a backend
 * without it (kernels/cuda_emu). */
static int norm_hold_on(const char *tag, int C) {
    tcu_norm_set_hold(TCU_NORM_HOLD_ALL);
    const char *why = C % 8 != 0 || C > 1024 ? "C takes the row-group kernel"
                      : !tcu_norm_hold() ? "this backend has one norm backward (tcu_norm_hold: 0)"
                                         : NULL;
    if (!why) return 1;
    tap_skip(L("%s: rows held in registers", tag), why);
    tcu_norm_set_hold(0);
    return 0;
}
static void norm_hold_check(const char *tag, size_t differ) {
    tap_ok(differ == 0, "%s: rows held in registers (tcu_norm_set_hold), the bits of the rows "
           "read twice (%zu differ)", tag, differ);
    tcu_norm_set_hold(0);
}

/* out vs CPU: ATOL_LN + RTOL_BF16 (normalised values of order 1, one rounding); mean: fp32 sums of
 * C values of size <= amp, 2^-16 amp; rstd: fp32 variance (one pass with an offset of <= 4
 * standard deviations loses ~30 ulp), 1e-4 relative */
static void check_ln_fwd(const char *what, const tsr_bf16 *d_out, const float *d_mean,
                         const float *d_rstd, const float *out, const float *mean,
                         const float *rstd, int N, int C, double amp) {
    size_t n = (size_t)N * C;
    check_close(L("%s: out", what), get_bf16(d_out, n), out, n, ATOL_LN, RTOL_BF16, NULL, 0);
    check_close(L("%s: mean", what), get_f32(d_mean, N), mean, N, 0x1p-16 * amp, 1e-6, NULL, 0);
    check_close(L("%s: rstd", what), get_f32(d_rstd, N), rstd, N, 0, 1e-4, NULL, 0);
}

static void test_layernorm(const ln_cfg *l) {
    const int N = l->N, C = l->C;
    const size_t n = (size_t)N * C;
    const double off = l->offset, amp = fabs(off) + 2.0;
    char tag[96];
    snprintf(tag, sizeof tag, "N=%d C=%d %s offset %g", N, C, l->bias ? "bias" : "no bias", off);
    float *x = hf(n), *w = hf(C), *b = hf(C), *out = hf(n), *mean = hf(N), *rstd = hf(N);
    fill_bf16(x, n, off - 2, off + 2), fill_bf16(w, C, 0.5, 1.5), fill_bf16(b, C, -1, 1);
    const float *bb = l->bias ? b : NULL;
    tsr_bf16 *d_x = new_bf16(x, n), *d_w = new_bf16(w, C), *d_b = l->bias ? new_bf16(b, C) : NULL;
    tsr_bf16 *d_out = d16(n), *d_res = d16(n);
    float *d_mean = df32(N), *d_rstd = df32(N);

    cpu->layernorm_forward(out, mean, rstd, x, w, bb, N, C);
    poison(d_out, n * 2), poison(d_mean, N * 4), poison(d_rstd, N * 4);
    tcu_layernorm_forward(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C, g_s);
    check_ln_fwd(L("layernorm_forward %s", tag), d_out, d_mean, d_rstd, out, mean, rstd, N, C, amp);

    /* fused: residual = bf16(a + b) exactly (an exact fp32 sum, one rounding); the LayerNorm is
     * that of the bf16 residual, the tensor backward will see as its input */
    float *a = hf(n), *a2 = hf(n), *res = hf(n), *out2 = hf(n), *mean2 = hf(N), *rstd2 = hf(N);
    fill_bf16(a, n, off - 1.5, off + 1.5), fill_bf16(a2, n, -0.5, 0.5);
    for (size_t i = 0; i < n; i++) res[i] = rbf16(a[i] + a2[i]);
    cpu->layernorm_forward(out2, mean2, rstd2, res, w, bb, N, C);
    tsr_bf16 *d_a = new_bf16(a, n), *d_a2 = new_bf16(a2, n);
    poison(d_res, n * 2), poison(d_out, n * 2), poison(d_mean, N * 4), poison(d_rstd, N * 4);
    tcu_residual_layernorm_forward(d_res, d_out, d_mean, d_rstd, d_a, d_a2, d_w, d_b, N, C, g_s);
    check_exact16(L("residual_layernorm_forward %s: residual == bf16(a + b)", tag), d_res, res, n);
    check_ln_fwd(L("residual_layernorm_forward %s", tag), d_out, d_mean, d_rstd, out2, mean2,
                 rstd2, N, C, amp);

    /* backward, from the CPU forward's mean and rstd (both sides read the same statistics) */
    float *dout = hf(n), *g0i = hf(n), *g0w = hf(C), *g0b = hf(C);
    fill_bf16(dout, n, -1, 1), fill_bf16(g0i, n, -1, 1);
    fill_f32(g0w, C, -1, 1), fill_f32(g0b, C, -1, 1);
    float *ri = hcopy(g0i, n), *rw = hcopy(g0w, C), *rb = hcopy(g0b, C);
    cpu->layernorm_backward(ri, rw, l->bias ? rb : NULL, dout, x, w, mean, rstd, N, C);
    float *mw = habs(g0w, C), *mb = habs(g0b, C); /* sums of |terms| of dw and db */
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++) {
            float g = dout[(size_t)r * C + c], nrm = (x[(size_t)r * C + c] - mean[r]) * rstd[r];
            mw[c] += fabsf(g * nrm);
            mb[c] += fabsf(g);
        }
    tsr_bf16 *d_dout = new_bf16(dout, n), *d_gi = d16(n);
    float *d_mn = new_f32(mean, N), *d_rs = new_f32(rstd, N), *d_gw = df32(C), *d_gb = df32(C);
    float *gi[2], *gw[2], *gb[2];
    for (int k = 0; k < 2; k++) {
        put_bf16(d_gi, g0i, n), put_f32(d_gw, g0w, C), put_f32(d_gb, g0b, C);
        tcu_layernorm_backward(d_gi, d_gw, l->bias ? d_gb : NULL, d_dout, d_x, d_w, d_mn, d_rs, N,
                               C, g_s);
        gi[k] = get_bf16(d_gi, n), gw[k] = get_f32(d_gw, C), gb[k] = get_f32(d_gb, C);
    }
    /* dinp: fp32 sums of C terms of order 1 (ATOL_LN), one rounding of g0 + increment (2u), or
     * two if the increment is rounded first (u of |increment|) */
    check_close(L("layernorm_backward %s: dinp", tag), gi[0], ri, n, ATOL_LN, RTOL_BF16,
                absdiff(ri, g0i, n, 1.0f, NULL, 0), U_BF16);
    /* dw, db: fp32 sums over N rows */
    check_close(L("layernorm_backward %s: dw", tag), gw[0], rw, C, 0, 0, mw, MTOL_SUM);
    if (l->bias) check_close(L("layernorm_backward %s: db", tag), gb[0], rb, C, 0, 0, mb, MTOL_SUM);
    size_t dif = ndiff(gi[0], gi[1], n, 4) + ndiff(gw[0], gw[1], C, 4) + ndiff(gb[0], gb[1], C, 4);
    tap_ok(dif == 0, "layernorm_backward %s: run twice, dinp dw db bit-identical (%zu differ)",
           tag, dif);
    if (norm_hold_on(L("layernorm_backward %s", tag), C)) {
        put_bf16(d_gi, g0i, n), put_f32(d_gw, g0w, C), put_f32(d_gb, g0b, C);
        tcu_layernorm_backward(d_gi, d_gw, l->bias ? d_gb : NULL, d_dout, d_x, d_w, d_mn, d_rs, N,
                               C, g_s);
        norm_hold_check(L("layernorm_backward %s", tag),
                        ndiff(get_bf16(d_gi, n), gi[0], n, 4) +
                            ndiff(get_f32(d_gw, C), gw[0], C, 4) +
                            ndiff(get_f32(d_gb, C), gb[0], C, 4));
    }
    scope_end(tag);
}

/* ---- matmul ------------------------------------------------------------------------------- */

typedef struct { int N, IC, OC, bias, gelu; } mmf_cfg; /* gelu: -1 none, else tsr_gelu_kind */
static const char *mm_scheme = ""; /* the tags' note of a split-K scheme other than the default */
static int mmf_checks(const mmf_cfg *m) { return m->gelu < 0 ? 1 : 2; }
static const char *gelu_name(int kind) { return kind == TSR_GELU_TANH ? "tanh" : "exact"; }

/* x (N,IC) U(-1,1); w (OC,IC) U(-a,a) with a = 3/sqrt(IC), so that outputs have std ~1 (the
 * range where GELU bends) */
static void mm_inputs(float **x, float **w, float **bias, int N, int IC, int OC) {
    *x = hf((size_t)N * IC), *w = hf((size_t)OC * IC), *bias = hf(OC);
    fill_bf16(*x, (size_t)N * IC, -1, 1);
    fill_bf16(*w, (size_t)OC * IC, -3.0 / sqrt(IC), 3.0 / sqrt(IC));
    fill_bf16(*bias, OC, -0.5, 0.5);
}

static void test_matmul_fwd(const mmf_cfg *m) {
    const int N = m->N, IC = m->IC, OC = m->OC;
    const size_t no = (size_t)N * OC;
    char tag[96];
    snprintf(tag, sizeof tag, "N=%d IC=%d OC=%d %s%s%s%s", N, IC, OC, m->bias ? "bias" : "no bias",
             m->gelu < 0 ? "" : " gelu ", m->gelu < 0 ? "" : gelu_name(m->gelu), mm_scheme);
    float *x, *w, *bias;
    mm_inputs(&x, &w, &bias, N, IC, OC);
    float *ref = hf(no), *mag = hf(no);
    cpu->matmul_forward(ref, x, w, m->bias ? bias : NULL, N, IC, OC);
    cpu->matmul_forward(mag, habs(x, (size_t)N * IC), habs(w, (size_t)OC * IC),
                        m->bias ? habs(bias, OC) : NULL, N, IC, OC); /* sum of |terms| */
    tsr_bf16 *d_x = new_bf16(x, (size_t)N * IC), *d_w = new_bf16(w, (size_t)OC * IC);
    tsr_bf16 *d_b = m->bias ? new_bf16(bias, OC) : NULL, *d_out = d16(no);
    tsr_bf16 *d_pre = m->gelu < 0 ? NULL : d16(no);
    poison(d_out, no * 2);
    if (d_pre) poison(d_pre, no * 2);
    tcu_matmul_forward(d_out, d_pre, d_x, d_w, d_b, N, IC, OC,
                       m->gelu < 0 ? TSR_GELU_TANH : (tsr_gelu_kind)m->gelu, g_s);
    /* fp32 accumulation (MTOL_SUM of the sum of |terms|), one rounding to bf16 */
    if (m->gelu < 0) {
        check_close(L("matmul_forward %s: out", tag), get_bf16(d_out, no), ref, no, 0, RTOL_BF16,
                    mag, MTOL_SUM);
    } else {
        check_close(L("matmul_forward %s: pre_gelu", tag), get_bf16(d_pre, no), ref, no, 0,
                    RTOL_BF16, mag, MTOL_SUM);
        /* out = gelu(pre) vs CPU gelu of the CPU matmul: exact GELU reads the bf16 pre_gelu (u
         * of |pre| through gelu' <= 1.13), tanh may use a fast tanh (2^-12 of |pre|), plus the
         * matmul's error through gelu' */
        float *refg = hf(no), *extra = hf(no);
        cpu->gelu_forward(refg, ref, no, (tsr_gelu_kind)m->gelu);
        for (size_t i = 0; i < no; i++)
            extra[i] = (float)((2 * U_BF16 + 0x1p-12) * fabsf(ref[i]) + 1.2 * MTOL_SUM * mag[i]);
        check_close(L("matmul_forward %s: out = gelu(pre)", tag), get_bf16(d_out, no), refg, no, 0,
                    RTOL_BF16, extra, 1.0);
    }
    scope_end(tag);
}

typedef struct { int N, IC, OC, dinp, dw, dbias; } mmb_cfg; /* 0: that output NULL */
static int mmb_checks(const mmb_cfg *m) {
    return 2 * m->dinp + m->dw + m->dbias + (m->dinp && m->dw);
}

static void test_matmul_bwd(const mmb_cfg *m) {
    const int N = m->N, IC = m->IC, OC = m->OC;
    const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    const int runs = m->dinp && m->dw ? 2 : 1;
    char tag[96];
    snprintf(tag, sizeof tag, "N=%d IC=%d OC=%d%s%s%s%s", N, IC, OC, m->dinp ? "" : " dinp NULL",
             m->dw ? "" : " dw NULL", m->dbias ? "" : " dbias NULL", mm_scheme);
    float *x, *w, *bias, *dout = hf(no), *g0i = hf(ni), *g0w = hf(nw), *g0b = hf(OC);
    mm_inputs(&x, &w, &bias, N, IC, OC);
    fill_bf16(dout, no, -1, 1), fill_bf16(g0i, ni, -1, 1);
    fill_f32(g0w, nw, -1, 1), fill_f32(g0b, OC, -1, 1);
    float *ri = hcopy(g0i, ni), *rw = hcopy(g0w, nw), *rb = hcopy(g0b, OC);
    float *mi = habs(g0i, ni), *mw = habs(g0w, nw), *mb = habs(g0b, OC);
    cpu->matmul_backward(ri, rw, rb, dout, x, w, N, IC, OC);
    cpu->matmul_backward(mi, mw, mb, habs(dout, no), habs(x, ni), habs(w, nw), N, IC, OC);
    tsr_bf16 *d_x = new_bf16(x, ni), *d_w = new_bf16(w, nw), *d_dout = new_bf16(dout, no);
    tsr_bf16 *d_gi = d16(ni);
    float *d_gw = df32(nw), *d_gb = df32(OC), *gi[2], *gw[2], *gb[2];
    for (int k = 0; k < runs; k++) {
        put_bf16(d_gi, g0i, ni), put_f32(d_gw, g0w, nw), put_f32(d_gb, g0b, OC);
        tcu_matmul_backward(m->dinp ? d_gi : NULL, m->dw ? d_gw : NULL, m->dbias ? d_gb : NULL,
                            d_dout, d_x, d_w, N, IC, OC, TSR_GRAD_ADD, g_s);
        gi[k] = get_bf16(d_gi, ni), gw[k] = get_f32(d_gw, nw), gb[k] = get_f32(d_gb, OC);
    }
    /* dinp (bf16): fp32 sums of OC terms, g0 + increment rounded once (2u) or the increment
     * rounded first (u of it); dw, dbias (fp32): sums of N terms */
    if (m->dinp) {
        float *extra = absdiff(ri, g0i, ni, (float)U_BF16, mi, (float)MTOL_SUM);
        check_close(L("matmul_backward %s: dinp", tag), gi[0], ri, ni, 0, RTOL_BF16, extra, 1.0);
    }
    if (m->dw) check_close(L("matmul_backward %s: dw", tag), gw[0], rw, nw, 0, 0, mw, MTOL_SUM);
    if (m->dbias)
        check_close(L("matmul_backward %s: dbias", tag), gb[0], rb, OC, 0, 0, mb, MTOL_SUM);
    if (runs == 2) {
        size_t dif = ndiff(gi[0], gi[1], ni, 4) + ndiff(gw[0], gw[1], nw, 4);
        dif += ndiff(gb[0], gb[1], OC, 4);
        tap_ok(dif == 0, "matmul_backward %s: run twice, dinp dw%s bit-identical (%zu differ)",
               tag, m->dbias ? " dbias" : "", dif);
    }
    if (m->dinp) { /* beta = 0 */
        tcu_zero(d_gi, ni * 2, g_s);
        tcu_matmul_backward(d_gi, NULL, NULL, d_dout, d_x, d_w, N, IC, OC, TSR_GRAD_ADD, g_s);
        float *add = get_bf16(d_gi, ni);
        poison(d_gi, ni * 2);
        tcu_matmul_backward(d_gi, NULL, NULL, d_dout, d_x, d_w, N, IC, OC, TSR_GRAD_SET, g_s);
        size_t dif = set_vs_add(get_bf16(d_gi, ni), add, ni, 0);
        tap_ok(dif == 0, "matmul_backward %s: dinp TSR_GRAD_SET over NaNs = += over zeros (%zu "
               "differ)", tag, dif);
    }
    scope_end(tag);
}

/* tcu_matmul_backward_dgelu: dinp = gelu_tanh'(pre) * (dout @ w), written over NaNs, against the
 * CPU's matmul_backward then gelu_backward in fp32; dw, dbias the bits of tcu_matmul_backward's;
 * run twice: the same bits. IC % 8 != 0 (no DGELU epilogue): the unfused GPU sequence's bits. */
typedef struct { int N, IC, OC; } mmdg_cfg;
static int mmdg_checks(const mmdg_cfg *m) { return 3 + (m->IC % 8 != 0); }

static void test_matmul_bwd_dgelu(const mmdg_cfg *m) {
    const int N = m->N, IC = m->IC, OC = m->OC;
    const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    char tag[96];
    snprintf(tag, sizeof tag, "matmul_backward_dgelu N=%d IC=%d OC=%d", N, IC, OC);
    float *x, *w, *bias, *dout = hf(no), *pre = hf(ni), *g0w = hf(nw), *g0b = hf(OC);
    mm_inputs(&x, &w, &bias, N, IC, OC);
    fill_bf16(dout, no, -1, 1), fill_bf16(pre, ni, -4, 4); /* where gelu' bends */
    fill_f32(g0w, nw, -1, 1), fill_f32(g0b, OC, -1, 1);
    /* the CPU: dx = dout @ w, then gelu_tanh'(pre) dx; mag: the sums of |terms|, times |gelu'|
     * <= 1.13 */
    float *dx = hf(ni), *ref = hf(ni), *mag = hf(ni);
    memset(dx, 0, ni * sizeof *dx), memset(ref, 0, ni * sizeof *ref), memset(mag, 0, ni * 4);
    cpu->matmul_backward(dx, NULL, NULL, dout, NULL, w, N, IC, OC);
    cpu->gelu_backward(ref, pre, dx, ni, TSR_GELU_TANH);
    cpu->matmul_backward(mag, NULL, NULL, habs(dout, no), NULL, habs(w, nw), N, IC, OC);
    /* the epilogue's gelu' = 0.5 (1 + t) + 0.5 x (1 - t^2) u'(x), t = tanh(u(x)), may use a fast
     * tanh (error ~2^-11 in t): |d gelu'| <= 2^-11 (0.5 + |x| u'(x)) of the product, plus 2^-10 of
     * it for the rest of the epilogue's fp32 arithmetic, plus the sum's error */
    float *extra = hf(ni);
    for (size_t i = 0; i < ni; i++) {
        const double a = pre[i], du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * a * a);
        extra[i] = (float)((0x1p-10 + 0x1p-11 * (0.5 + fabs(a) * du)) * fabsf(dx[i]) +
                           1.2 * MTOL_SUM * mag[i]);
    }
    tsr_bf16 *d_x = new_bf16(x, ni), *d_w = new_bf16(w, nw), *d_dout = new_bf16(dout, no);
    tsr_bf16 *d_pre = new_bf16(pre, ni), *d_gi = d16(ni);
    float *d_gw = df32(nw), *d_gb = df32(OC), *gi[3], *gw[3], *gb[3];
    for (int k = 0; k < 3; k++) { /* 0, 1: fused, twice; 2: tcu_matmul_backward (dw, dbias) */
        poison(d_gi, ni * 2), put_f32(d_gw, g0w, nw), put_f32(d_gb, g0b, OC);
        if (k < 2)
            tcu_matmul_backward_dgelu(d_gi, d_gw, d_gb, d_dout, d_x, d_w, d_pre, N, IC, OC, g_s);
        else
            tcu_matmul_backward(NULL, d_gw, d_gb, d_dout, d_x, d_w, N, IC, OC, TSR_GRAD_SET, g_s);
        gi[k] = get_bf16(d_gi, ni), gw[k] = get_f32(d_gw, nw), gb[k] = get_f32(d_gb, OC);
    }
    check_close(L("%s: dinp against the CPU's matmul then GELU backward", tag), gi[0], ref, ni, 0,
                RTOL_BF16, extra, 1.0);
    size_t dif = ndiff(gw[0], gw[2], nw, 4) + ndiff(gb[0], gb[2], OC, 4);
    tap_ok(dif == 0, "%s: dw, dbias bit-identical to tcu_matmul_backward's (%zu differ)", tag, dif);
    dif = ndiff(gi[0], gi[1], ni, 4) + ndiff(gw[0], gw[1], nw, 4) + ndiff(gb[0], gb[1], OC, 4);
    tap_ok(dif == 0, "%s: run twice, dinp dw dbias bit-identical (%zu differ)", tag, dif);
    /* the unfused sequence: matmul (=), then the GELU backward in place */
    poison(d_gi, ni * 2);
    tcu_matmul_backward(d_gi, NULL, NULL, d_dout, NULL, d_w, N, IC, OC, TSR_GRAD_SET, g_s);
    tcu_gelu_backward(d_gi, d_pre, d_gi, ni, TSR_GELU_TANH, TSR_GRAD_SET, g_s);
    dif = ndiff(gi[0], get_bf16(d_gi, ni), ni, 4);
    if (IC % 8 != 0) /* no DGELU epilogue: the op runs that sequence */
        tap_ok(dif == 0, "%s: IC %% 8 != 0: the unfused sequence's bits (%zu differ)", tag, dif);
    else /* one rounding against two: some elements differ unless the epilogue did not run */
        tap_diag("%s: %zu of %zu elements differ from the unfused sequence's (0: cuBLASLt had no "
                 "DGELU algorithm, the fallback ran)", tag, dif, ni);
    scope_end(tag);
}

/* ---- LoRA's adapter path (tcu_lora_forward, tcu_lora_backward) ------------------------------ */

/* out's column block [col, col + OC) of rows ld wide; dA or dB 0: that gradient NULL (frozen) */
typedef struct { int N, IC, OC, R, ld, col; float p; int dA, dB; } lora_cfg;
static int lora_checks(const lora_cfg *c) { return 4 + c->dA + c->dB; }

static void test_lora(const lora_cfg *c) {
    const int N = c->N, IC = c->IC, OC = c->OC, R = c->R, ld = c->ld;
    const size_t ni = (size_t)N * IC, nld = (size_t)N * ld, na = (size_t)R * IC,
                 nb = (size_t)OC * R;
    const float scale = 2.0f;
    const uint64_t key = rng_next();
    const int64_t row0 = 1000 + irand(1000);
    char tag[128];
    snprintf(tag, sizeof tag, "N=%d IC=%d OC=%d R=%d ld=%d col=%d p=%g%s%s", N, IC, OC, R, ld,
             c->col, (double)c->p, c->dA ? "" : " dA NULL", c->dB ? "" : " dB NULL");
    float *x = hf(ni), *A = hf(na), *B = hf(nb), *out0 = hf(nld), *dout = hf(nld), *g0 = hf(ni);
    fill_bf16(x, ni, -1, 1), fill_bf16(out0, nld, -1, 1), fill_bf16(dout, nld, -1, 1);
    fill_bf16(g0, ni, -1, 1);
    fill_f32(A, na, -1.0 / sqrt(IC), 1.0 / sqrt(IC)), fill_f32(B, nb, -0.5, 0.5);
    float *gA0 = hf(na), *gB0 = hf(nb);
    fill_f32(gA0, na, -1, 1), fill_f32(gB0, nb, -1, 1);
    /* the CPU oracle on the same (bf16-valued) inputs, and on their absolute values (the sums
     * of |terms|: the same mask, every factor >= 0) */
    const size_t scr = (size_t)N * R + ni;
    float *t = hf(scr), *xd = t + (size_t)N * R;
    float *ref = hcopy(out0, nld), *mag = habs(out0, nld);
    cpu->lora_forward(ref + c->col, ld, x, A, B, scale, c->p, key, row0, t, xd, N, IC, OC, R);
    float *ax = habs(x, ni), *aA = habs(A, na), *aB = habs(B, nb), *adout = habs(dout, nld);
    for (size_t i = 0; i < nld; i++) mag[i] = 0.0f;
    cpu->lora_forward(mag + c->col, ld, ax, aA, aB, scale, c->p, key, row0, t, xd, N, IC, OC, R);
    float *ri = hcopy(g0, ni), *rA = hcopy(gA0, na), *rB = hcopy(gB0, nb);
    float *mi = hf(ni), *mA = habs(gA0, na), *mB = habs(gB0, nb);
    for (size_t i = 0; i < ni; i++) mi[i] = 0.0f;
    cpu->lora_backward(ri, rA, rB, dout + c->col, ld, x, A, B, scale, c->p, key, row0, t, xd, N,
                       IC, OC, R);
    cpu->lora_backward(mi, mA, mB, adout + c->col, ld, ax, aA, aB, scale, c->p, key, row0, t, xd,
                       N, IC, OC, R);

    tsr_bf16 *d_x = new_bf16(x, ni), *d_out = new_bf16(out0, nld), *d_dout = new_bf16(dout, nld);
    tsr_bf16 *d_gi = d16(ni);
    float *d_A = new_f32(A, na), *d_B = new_f32(B, nb), *d_gA = df32(na), *d_gB = df32(nb);
    void *d_scr = dalloc(tcu_lora_scratch_bytes(N, IC, OC, R));
    tcu_lora_forward(d_out + c->col, ld, d_x, d_A, d_B, scale, c->p, key, row0, d_scr, N, IC, OC,
                     R, g_s);
    /* the block: out0 + an fp32 sum rounded once (2u of the result, u of the increment, fp32
     * summation MTOL_SUM of the sum of |terms|); a wrong dropout mask is off by whole terms */
    float *got = get_bf16(d_out, nld);
    float *gb = hf((size_t)N * OC), *rb = hf((size_t)N * OC), *eb = hf((size_t)N * OC);
    size_t outside = 0;
    for (int n = 0; n < N; n++)
        for (int j = 0; j < ld; j++) {
            const size_t i = (size_t)n * ld + j;
            if (j >= c->col && j < c->col + OC) {
                const size_t k = (size_t)n * OC + (j - c->col);
                gb[k] = got[i], rb[k] = ref[i];
                eb[k] = (float)(U_BF16 * fabs(ref[i] - out0[i]) + MTOL_SUM * mag[i]);
            } else {
                outside += memcmp(&got[i], &out0[i], sizeof(float)) != 0;
            }
        }
    check_close(L("lora_forward %s: out's block", tag), gb, rb, (size_t)N * OC, 0, RTOL_BF16, eb,
                1.0);
    tap_ok(outside == 0, "lora_forward %s: columns outside the block untouched (%zu differ)", tag,
           outside);
    float *gi[2], *gA[2], *gB[2];
    for (int k = 0; k < 2; k++) {
        put_bf16(d_gi, g0, ni), put_f32(d_gA, gA0, na), put_f32(d_gB, gB0, nb);
        tcu_lora_backward(d_gi, c->dA ? d_gA : NULL, c->dB ? d_gB : NULL, d_dout + c->col, ld, d_x,
                          d_A, d_B, scale, c->p, key, row0, d_scr, N, IC, OC, R, g_s);
        gi[k] = get_bf16(d_gi, ni), gA[k] = get_f32(d_gA, na), gB[k] = get_f32(d_gB, nb);
    }
    float *extra = absdiff(ri, g0, ni, (float)U_BF16, mi, (float)MTOL_SUM);
    check_close(L("lora_backward %s: dinp", tag), gi[0], ri, ni, 0, RTOL_BF16, extra, 1.0);
    if (c->dA) check_close(L("lora_backward %s: dA", tag), gA[0], rA, na, 0, 0, mA, MTOL_SUM);
    if (c->dB) check_close(L("lora_backward %s: dB", tag), gB[0], rB, nb, 0, 0, mB, MTOL_SUM);
    size_t dif = ndiff(gi[0], gi[1], ni, 4) + ndiff(gA[0], gA[1], na, 4) +
                 ndiff(gB[0], gB[1], nb, 4);
    tap_ok(dif == 0, "lora_backward %s: run twice, bit-identical (%zu differ)", tag, dif);
    scope_end(tag);
}

/* ---- gelu, residual ----------------------------------------------------------------------- */

typedef struct { size_t n; int kind; } gelu_cfg;
#define GELU_CHECKS 3

static void test_gelu(const gelu_cfg *g) {
    const size_t n = g->n;
    char tag[64];
    snprintf(tag, sizeof tag, "%s n=%zu", gelu_name(g->kind), n);
    static const float special[] = {0, -0.0f, 1e-20f, -1e-20f, 30, -30, 100, -100, 3, -3, 0.5f};
    float *x = hf(n), *dout = hf(n), *g0 = hf(n), *ref = hf(n);
    fill_bf16(x, n, -6, 6);
    for (size_t i = 0; i < n && i < sizeof special / sizeof *special; i++) x[i] = rbf16(special[i]);
    fill_bf16(dout, n, -1, 1), fill_bf16(g0, n, -1, 1);
    for (size_t i = 0; i < n; i += 4) g0[i] = 0.0f; /* there the increment is not hidden by g0 */
    tsr_bf16 *d_x = new_bf16(x, n), *d_out = d16(n), *d_dout = new_bf16(dout, n);
    tsr_bf16 *d_g = new_bf16(g0, n);
    cpu->gelu_forward(ref, x, n, (tsr_gelu_kind)g->kind);
    poison(d_out, n * 2);
    tcu_gelu_forward(d_out, d_x, n, (tsr_gelu_kind)g->kind, g_s);
    /* one rounding (2u); where gelu -> 0 (x << 0) fp32 cancellation in 1 + tanh or 1 + erf:
     * 2^-16 |x| absolute (accurate tanhf/erff/expf, or __expf, err ~1e-7 |x|). Tight on purpose:
     * the two kinds differ by ~4e-4 at x = -3 (10% of gelu there), which a fast tanh
     * (tanh.approx.f32, 2^-11) would blur; there it is caught */
    check_close(L("gelu_forward %s: out", tag), get_bf16(d_out, n), ref, n, 0, RTOL_BF16,
                habs(x, n), 0x1p-16);
    float *rg = hcopy(g0, n);
    cpu->gelu_backward(rg, x, dout, n, (tsr_gelu_kind)g->kind);
    tcu_gelu_backward(d_g, d_x, d_dout, n, (tsr_gelu_kind)g->kind, TSR_GRAD_ADD, g_s);
    /* g0 + gelu'(x) dout rounded once (2u), the increment maybe rounded first (u of it), and
     * 2^-16 |dout| for the derivative's own fp32 error (as forward) */
    check_close(L("gelu_backward %s: dinp", tag), get_bf16(d_g, n), rg, n, 0, RTOL_BF16,
                absdiff(rg, g0, n, (float)U_BF16, dout, 0x1p-16f), 1.0);
    tcu_zero(d_g, n * 2, g_s);
    tcu_gelu_backward(d_g, d_x, d_dout, n, (tsr_gelu_kind)g->kind, TSR_GRAD_ADD, g_s);
    float *add = get_bf16(d_g, n);
    poison(d_g, n * 2);
    tcu_gelu_backward(d_g, d_x, d_dout, n, (tsr_gelu_kind)g->kind, TSR_GRAD_SET, g_s);
    size_t dif = set_vs_add(get_bf16(d_g, n), add, n, 1);
    tap_ok(dif == 0, "gelu_backward %s: TSR_GRAD_SET over NaNs = += over zeros, bit for bit (%zu "
           "differ)", tag, dif);
    scope_end(tag);
}

#define RESIDUAL_CHECKS 3
/* exact fp32 sums of two bf16 values, one rounding: bit for bit */
static void test_residual(size_t n) {
    float *a = hf(n), *b = hf(n), *dout = hf(n), *ga = hf(n), *gb = hf(n), *w = hf(n);
    fill_bf16(a, n, -1, 1), fill_bf16(b, n, -1, 1), fill_bf16(dout, n, -1, 1);
    fill_bf16(ga, n, -1, 1), fill_bf16(gb, n, -1, 1);
    tsr_bf16 *d_a = new_bf16(a, n), *d_b = new_bf16(b, n), *d_out = d16(n);
    tsr_bf16 *d_dout = new_bf16(dout, n), *d_ga = new_bf16(ga, n), *d_gb = new_bf16(gb, n);
    poison(d_out, n * 2);
    tcu_residual_forward(d_out, d_a, d_b, n, g_s);
    tcu_residual_backward(d_ga, d_gb, d_dout, n, g_s);
    for (size_t i = 0; i < n; i++) w[i] = a[i] + b[i];
    check_exact16(L("residual_forward n=%zu: out == bf16(a + b)", n), d_out, w, n);
    for (size_t i = 0; i < n; i++) w[i] = ga[i] + dout[i];
    check_exact16(L("residual_backward n=%zu: da == bf16(da0 + dout)", n), d_ga, w, n);
    for (size_t i = 0; i < n; i++) w[i] = gb[i] + dout[i];
    check_exact16(L("residual_backward n=%zu: db == bf16(db0 + dout)", n), d_gb, w, n);
    scope_end("residual");
}

/* ---- attention ---------------------------------------------------------------------------- */

typedef struct { int B, T, NH, KVH, hs, alibi, seq; } att_cfg;
#define ATT_CHECKS 9

/* first index of the segment (run of equal ids) that holds i */
static int seg_lo(const int32_t *sq, int i) {
    int lo = i;
    while (sq && lo > 0 && sq[lo - 1] == sq[i]) lo--;
    return sq ? lo : 0;
}

/* Column of query head h, of key head g and of value head g in a qkv row of (NH + 2 KVH) hs */
#define QCOL(h) ((size_t)(h) * hs)
#define KCOL(g) ((size_t)(NH + (g)) * hs)
#define VCOL(g) ((size_t)(NH + KVH + (g)) * hs)

/* one past the end of the run of equal ids holding j (T without seq) */
static int seg_hi(const int32_t *sq, int j, int T) {
    while (sq && j + 1 < T && sq[j + 1] == sq[j]) j++;
    return sq ? j + 1 : T;
}

/* One case's attention backward on the device: its shape, dqkv (g, nq bf16) and the inputs */
typedef struct {
    const att_cfg *a;
    tsr_bf16 *g;
    const tsr_bf16 *dout, *qkv, *out;
    const float *lse, *slopes;
    const int32_t *seq;
    size_t nq;
} att_bwd;

/* runs the backward into v->g as it starts: g0 (then += or =), or without g0 zeros for += and
 * NaNs for = (TSR_GRAD_SET); returns what it left there */
static float *att_bwd_run(const att_bwd *v, void *scratch, const float *g0, tsr_grad_mode mode) {
    const att_cfg *a = v->a;
    if (g0) put_bf16(v->g, g0, v->nq);
    else if (mode == TSR_GRAD_SET) poison(v->g, v->nq * 2);
    else tcu_zero(v->g, v->nq * 2, g_s);
    tcu_attention_backward(v->g, v->dout, v->qkv, v->out, v->lse, v->slopes, v->seq, scratch,
                           a->B, a->T, a->NH, a->KVH, a->hs, mode, g_s);
    return get_bf16(v->g, v->nq);
}

/* The fused dq (tcu_attention_set_dq_fused, issue 25), 4 checks: from the same inputs as the
 * backward just checked (got: its += over g0, add: its += over zeros; ref, extra: the CPU's result
 * and tolerance; sq: the host's seq or NULL), dqkv += over g0 has the dq kernel's bits where the
 * tiles agree (16 rows a warp, no seq; else within the same tolerance of the CPU), the same bits
 * twice, = over NaNs gives the bits of += over zeros, and the turns at the scratch's end show that
 * the fused kernel ran: the start ticket at the number of blocks, each tile's counter at the
 * number of key blocks that reach it (from this file's own tiling rule: BK = 64 x rows / 16 keys
 * a block, BQ = 32 queries a step at hs 128 or 32 rows, else 64; none at hs 256). The scratch starts as NaNs (its
 * sums are written before they are read). Skipped, saying so, on a backend without it
 * (kernels/cuda_emu). */
static void test_attention_dq_fused(const att_bwd *v, const char *tag, const int32_t *sq,
                                    const float *got, const float *add, const float *ref,
                                    const float *extra, const float *g0) {
    const att_cfg *a = v->a;
    const int B = a->B, T = a->T, NH = a->NH, KVH = a->KVH, hs = a->hs;
    const size_t nq = v->nq;
    if (tcu_attention_wgmma(hs)) { /* the fused dq is mma.sync's: checked in the other pass */
        for (int k = 0; k < 4; k++)
            tap_skip(L("attention_backward %s: fused dq", tag),
                     "the fused dq runs the mma.sync kernels, checked without wgmma");
        return;
    }
    if (hs == 256) { /* its dk/dv blocks own half the columns each: no fused dq (docs/cuda.md) */
        for (int k = 0; k < 4; k++)
            tap_skip(L("attention_backward %s: fused dq", tag),
                     "hs 256 has no fused dq: the dq kernel runs (cuda_attention.cu KV_NS)");
        return;
    }
    tcu_attention_set_dq_fused(1);
    if (!tcu_attention_dq_fused()) {
        for (int k = 0; k < 4; k++)
            tap_skip(L("attention_backward %s: fused dq", tag),
                     "this backend has one dq (tcu_attention_dq_fused: 0)");
        tcu_attention_set_dq_fused(0);
        return;
    }
    const size_t bytes = tcu_attention_scratch_bytes(B, T, NH, KVH, hs);
    void *d_scratch = dalloc(bytes);
    float *f[2];
    for (int k = 0; k < 2; k++) {
        poison(d_scratch, bytes);
        f[k] = att_bwd_run(v, d_scratch, g0, TSR_GRAD_ADD);
    }
    const int same_tiles = !a->seq && tcu_attention_warp_rows(hs) == 16;
    if (same_tiles) {
        size_t d = ndiff(f[0], got, nq, 4);
        tap_ok(d == 0, "attention_backward %s: fused dq (scratch %zu bytes): the dq kernel's bits "
               "(%zu differ)", tag, bytes, d);
    } else {
        check_close(L("attention_backward %s: fused dq (scratch %zu bytes): dqkv", tag, bytes),
                    f[0], ref, nq, 0, RTOL_BF16, extra, 1.0);
    }
    size_t dif = ndiff(f[0], f[1], nq, 4);
    tap_ok(dif == 0, "attention_backward %s: fused dq, run twice, bit-identical (%zu differ)", tag,
           dif);
    const int ms = tcu_attention_warp_rows(hs) / 16, BK = 64 * ms;
    const int BQ = hs >= 128 || ms == 2 ? 32 : 64, nqt = (T + BQ - 1) / BQ, nkb = (T + BK - 1) / BK;
    const size_t nt = (size_t)B * NH * nqt;
    int32_t *turns = hi32(nt + 1);
    d2h(turns, (const unsigned char *)d_scratch + bytes - (nt + 1) * sizeof(int32_t),
        (nt + 1) * sizeof(int32_t));
    size_t wrong = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int iq = 0; iq < nqt; iq++) {
                const int32_t *sb = sq ? sq + (size_t)b * T : NULL;
                const int it0 = iq * BQ, top = it0 / BK;
                int low = top; /* the lowest key block whose last key's document reaches it0 */
                while (low > 0 && seg_hi(sb, low * BK - 1, T) > it0) low--;
                wrong += turns[1 + ((size_t)b * NH + h) * nqt + iq] != top - low + 1;
            }
    tap_ok(turns[0] == nkb * KVH * B && wrong == 0,
           "attention_backward %s: fused dq ran: %d start tickets (want %d), each of %zu tiles' "
           "turn counters at the key blocks that reach it (%zu wrong)",
           tag, turns[0], nkb * KVH * B, nt, wrong);
    /* = over NaNs against += over zeros: the dq kernel's += (add) where the tiles agree, else the
     * fused path's own */
    const float *zero_add = same_tiles ? add : att_bwd_run(v, d_scratch, NULL, TSR_GRAD_ADD);
    size_t nset = set_vs_add(att_bwd_run(v, d_scratch, NULL, TSR_GRAD_SET), zero_add, nq, 1);
    tap_ok(nset == 0, "attention_backward %s: fused dq, TSR_GRAD_SET over NaNs = += over zeros, "
           "bit for bit (%zu differ)", tag, nset);
    tcu_attention_set_dq_fused(0);
}

/* lse[b,h,i] = log sum_{j in [lo(i), i]} exp(s[i,j]), in double, from ops.h's formula (query
 * head h reads key head h / (NH/KVH)) */
static void host_lse(float *lse, const float *qkv, const float *slopes, const int32_t *seq, int B,
                     int T, int NH, int KVH, int hs) {
    const size_t ld = (size_t)(NH + 2 * KVH) * hs;
    const double scale = 1.0 / sqrt((double)hs);
    double *s = xmalloc((size_t)T * sizeof *s);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const int lo = seg_lo(seq ? seq + (size_t)b * T : NULL, i);
                const float *q = qkv + ((size_t)b * T + i) * ld + QCOL(h);
                double mx = -INFINITY, sum = 0.0;
                for (int j = lo; j <= i; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * ld + KCOL(h / (NH / KVH));
                    double dot = 0.0;
                    for (int d = 0; d < hs; d++) dot += (double)q[d] * k[d];
                    s[j] = dot * scale - (slopes ? (double)slopes[h] * (i - j) : 0.0);
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = lo; j <= i; j++) sum += exp(s[j] - mx);
                lse[((size_t)b * NH + h) * T + i] = (float)(mx + log(sum));
            }
    free(s);
}

/* mag (B,T,QKV) = sums of |terms| of dq, dk, dv (att from the CPU forward; a key/value head's
 * terms summed over the query heads that read it):
 *   dv_j: sum_i P_ij |dout_i|;  dS_ij bound: P_ij (sum|dout_i v_j| + sum|dout_i out_i|) scale;
 *   dq_i: sum_j |dS_ij| |k_j|;  dk_j: sum_i |dS_ij| |q_i| */
static void attention_bwd_mag(float *mag, const float *qkv, const float *att, const float *out,
                              const float *dout, int B, int T, int NH, int KVH, int hs) {
    const size_t ld = (size_t)(NH + 2 * KVH) * hs, C = (size_t)NH * hs;
    const double scale = 1.0 / sqrt((double)hs);
    memset(mag, 0, (size_t)B * T * ld * sizeof *mag);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const int g = h / (NH / KVH);
                const size_t ri = (size_t)b * T + i;
                const float *q = qkv + ri * ld + QCOL(h), *go = dout + ri * C + QCOL(h);
                const float *o = out + ri * C + QCOL(h);
                double dabs = 0.0;
                for (int d = 0; d < hs; d++) dabs += fabs((double)go[d] * o[d]);
                for (int j = 0; j <= i; j++) {
                    const double P = att[(((size_t)b * NH + h) * T + i) * T + j];
                    if (P == 0.0) continue;
                    const size_t rj = (size_t)b * T + j;
                    const float *k = qkv + rj * ld + KCOL(g), *v = qkv + rj * ld + VCOL(g);
                    double dpabs = 0.0;
                    for (int d = 0; d < hs; d++) dpabs += fabs((double)go[d] * v[d]);
                    const double ds = P * (dpabs + dabs) * scale;
                    float *mq = mag + ri * ld + QCOL(h), *mk = mag + rj * ld + KCOL(g);
                    float *mv = mag + rj * ld + VCOL(g);
                    for (int d = 0; d < hs; d++) {
                        mq[d] += (float)(ds * fabsf(k[d]));
                        mk[d] += (float)(ds * fabsf(q[d]));
                        mv[d] += (float)(P * fabsf(go[d]));
                    }
                }
            }
}

/* q, k in U(-2,2) (scores of std ~1.3), v in U(-1,1), bf16 values; qabs: the same with |v|
 * (test_attention's and gpu_ops_attnvar.c's) */
static void attn_inputs(float *qkv, float *qabs, size_t rows, size_t ld, size_t vcol) {
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < ld; c++) {
            const int qk = c < vcol;
            const float v = rbf16(qk ? uni(-2, 2) : uni(-1, 1));
            qkv[r * ld + c] = v, qabs[r * ld + c] = qk ? v : fabsf(v);
        }
}

static void test_attention(const att_cfg *a) {
    const int B = a->B, T = a->T, NH = a->NH, KVH = a->KVH, hs = a->hs;
    const size_t ld = (size_t)(NH + 2 * KVH) * hs, C = (size_t)NH * hs;
    const size_t nq = (size_t)B * T * ld, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    const size_t na = (size_t)B * NH * T * T;
    char tag[96];
    snprintf(tag, sizeof tag, "B=%d T=%d NH=%d KVH=%d hs=%d%s%s%s", B, T, NH, KVH, hs,
             a->alibi ? " alibi" : "", a->seq ? " seq" : "",
             tcu_attention_wgmma(hs)              ? " (wgmma)"
             : tcu_attention_warp_rows(hs) == 32 ? " (32 rows a warp)"
                                                  : "");
    float *qkv = hf(nq), *qabs = hf(nq), *slopes = hf(NH), *dout = hf(no), *g0 = hf(nq);
    int32_t *seq = hi32((size_t)B * T);
    attn_inputs(qkv, qabs, (size_t)B * T, ld, VCOL(0));
    for (int b = 0; b < B; b++) { /* a third row, if any, is one segment */
        if (b < 2) make_segments(seq + (size_t)b * T, T, 3 * b);
        else for (int t = 0; t < T; t++) seq[(size_t)b * T + t] = 42;
    }
    int p = 1; /* ALiBi slopes (Press et al.), also for head counts that are not powers of 2 */
    while (p * 2 <= NH) p *= 2;
    for (int h = 0; h < NH; h++)
        slopes[h] = powf(2.0f, h < p ? -8.0f * (h + 1) / p : -8.0f * (2 * (h - p) + 1) / (2 * p));
    const float *sl = a->alibi ? slopes : NULL;
    const int32_t *sq = a->seq ? seq : NULL;
    fill_bf16(dout, no, -1, 1), fill_bf16(g0, nq, -1, 1);

    float *out = hf(no), *att = hf(na), *oabs = hf(no), *tmp = hf(na), *lse = hf(nl);
    cpu->attention_forward(out, att, qkv, sl, sq, NULL, B, T, NH, KVH, hs);
    cpu->attention_forward(oabs, tmp, qabs, sl, sq, NULL, B, T, NH, KVH, hs); /* sum_j P_ij |v_j| */
    host_lse(lse, qkv, sl, sq, B, T, NH, KVH, hs);
    tsr_bf16 *d_qkv = new_bf16(qkv, nq), *d_out = d16(no);
    float *d_lse = df32(nl), *d_sl = a->alibi ? new_f32(slopes, NH) : NULL;
    int32_t *d_seq = a->seq ? new_i32(seq, (size_t)B * T) : NULL;
    poison(d_out, no * 2), poison(d_lse, nl * 4);
    tcu_attention_forward(d_out, d_lse, d_qkv, d_sl, d_seq, B, T, NH, KVH, hs, g_s);
    /* out: P may be rounded to bf16 for P.V (u per term: u sum_j P|v_j|, 2x room), one rounding
     * of the output (2u) */
    check_close(L("attention_forward %s: out", tag), get_bf16(d_out, no), out, no, 0, RTOL_BF16,
                oabs, 2 * U_BF16);
    /* lse: fp32 scores (~1e-6 abs), fp32 row sums (~1e-6 rel), exp/log of a few ulp; 1e-4 abs
     * leaves room (P rounded to bf16 before summing would show as ~4e-3) */
    check_close(L("attention_forward %s: lse", tag), get_f32(d_lse, nl), lse, nl, 1e-4, 1e-5,
                NULL, 0);

    /* backward from the CPU forward's out (as bf16) and the host lse: tests this op alone */
    float *ref = hcopy(g0, nq), *mag = hf(nq), *outb = hf(no);
    for (size_t i = 0; i < no; i++) outb[i] = rbf16(out[i]);
    cpu->attention_backward(ref, dout, qkv, att, sq, NULL, B, T, NH, KVH, hs);
    attention_bwd_mag(mag, qkv, att, out, dout, B, T, NH, KVH, hs);
    tsr_bf16 *d_dout = new_bf16(dout, no), *d_g = d16(nq), *d_ob = new_bf16(outb, no);
    float *d_lh = new_f32(lse, nl), *got[2];
    size_t scratch_bytes = tcu_attention_scratch_bytes(B, T, NH, KVH, hs);
    void *d_scratch = dalloc(scratch_bytes);
    const att_bwd v = {a, d_g, d_dout, d_qkv, d_ob, d_lh, d_sl, d_seq, nq};
    for (int k = 0; k < 2; k++) got[k] = att_bwd_run(&v, d_scratch, g0, TSR_GRAD_ADD);
    float *add = att_bwd_run(&v, d_scratch, NULL, TSR_GRAD_ADD);
    size_t nset = set_vs_add(att_bwd_run(&v, d_scratch, NULL, TSR_GRAD_SET), add, nq, 1);
    tap_ok(nset == 0, "attention_backward %s: TSR_GRAD_SET over NaNs = += over zeros, bit for bit "
           "(%zu differ)", tag, nset);
    /* P and dS may be rounded to bf16 for the matmuls, D = rowsum(dout out) reads bf16 out: each
     * term of dq, dk, dv within 2u of its size (mag); g0 + increment: 2u, increment first: u */
    float *extra = absdiff(ref, g0, nq, (float)U_BF16, mag, (float)(2 * U_BF16));
    check_close(L("attention_backward %s: dqkv (scratch %zu bytes)", tag, scratch_bytes), got[0],
                ref, nq, 0, RTOL_BF16, extra, 1.0);
    size_t dif = ndiff(got[0], got[1], nq, 4);
    tap_ok(dif == 0, "attention_backward %s: run twice, dqkv bit-identical (%zu differ)", tag, dif);
    test_attention_dq_fused(&v, tag, sq, got[0], add, ref, extra, g0);
    scope_end(tag);
}

/* ---- the Llama-style blocks: RMSNorm, QK-norm, RoPE, SwiGLU ---------------------------------- */

#define RMS_EPS 1e-6f

typedef struct { int N, C; float offset; } rms_cfg;
#define RMS_CHECKS 9

/* sums of |terms| of the norm backward's weight gradient over R rows of C (strided like QK-norm's
 * heads: row r of token r / H at (r / H) * ld + (r % H) * C, rstd at (r / H) * sld + r % H),
 * added into mw (C) */
static void rms_dw_mag(float *mw, const float *dout, const float *x, const float *rstd, int R,
                       int C, int H, size_t ld, int sld) {
    for (int r = 0; r < R; r++) {
        const size_t o = (size_t)(r / H) * ld + (size_t)(r % H) * C;
        const float rs = rstd[(size_t)(r / H) * sld + r % H];
        for (int c = 0; c < C; c++) mw[c] += fabsf(dout[o + c] * x[o + c] * rs);
    }
}

/* out vs CPU as LayerNorm's (normalised values of order 1, one rounding: ATOL_LN + 2u); rstd: an
 * fp32 sum of squares against the CPU's double, 1e-5 relative */
static void check_rms_fwd(const char *what, const tsr_bf16 *d_out, const float *d_rstd,
                          const float *out, const float *rstd, size_t n, size_t nr) {
    check_close(L("%s: out", what), get_bf16(d_out, n), out, n, ATOL_LN, RTOL_BF16, NULL, 0);
    check_close(L("%s: rstd", what), get_f32(d_rstd, nr), rstd, nr, 0, 1e-5, NULL, 0);
}

static void test_rmsnorm(const rms_cfg *r) {
    const int N = r->N, C = r->C;
    const size_t n = (size_t)N * C;
    char tag[96];
    snprintf(tag, sizeof tag, "N=%d C=%d offset %g", N, C, r->offset);
    float *x = hf(n), *w = hf(C), *out = hf(n), *rstd = hf(N);
    fill_bf16(x, n, r->offset - 2, r->offset + 2), fill_bf16(w, C, 0.5, 1.5);
    tsr_bf16 *d_x = new_bf16(x, n), *d_w = new_bf16(w, C), *d_out = d16(n), *d_res = d16(n);
    float *d_rstd = df32(N);
    cpu->rmsnorm_forward(out, rstd, x, w, N, C, RMS_EPS);
    poison(d_out, n * 2), poison(d_rstd, N * 4);
    tcu_rmsnorm_forward(d_out, d_rstd, d_x, d_w, N, C, RMS_EPS, g_s);
    check_rms_fwd(L("rmsnorm_forward %s", tag), d_out, d_rstd, out, rstd, n, N);

    /* fused: residual = bf16(a + b) exactly, the RMSNorm that of the bf16 residual */
    float *a = hf(n), *a2 = hf(n), *res = hf(n), *out2 = hf(n), *rstd2 = hf(N);
    fill_bf16(a, n, r->offset - 1.5, r->offset + 1.5), fill_bf16(a2, n, -0.5, 0.5);
    for (size_t i = 0; i < n; i++) res[i] = rbf16(a[i] + a2[i]);
    cpu->rmsnorm_forward(out2, rstd2, res, w, N, C, RMS_EPS);
    tsr_bf16 *d_a = new_bf16(a, n), *d_a2 = new_bf16(a2, n);
    poison(d_res, n * 2), poison(d_out, n * 2), poison(d_rstd, N * 4);
    tcu_residual_rmsnorm_forward(d_res, d_out, d_rstd, d_a, d_a2, d_w, N, C, RMS_EPS, g_s);
    check_exact16(L("residual_rmsnorm_forward %s: residual == bf16(a + b)", tag), d_res, res, n);
    check_rms_fwd(L("residual_rmsnorm_forward %s", tag), d_out, d_rstd, out2, rstd2, n, N);

    /* backward from the CPU forward's rstd */
    float *dout = hf(n), *g0i = hf(n), *g0w = hf(C);
    fill_bf16(dout, n, -1, 1), fill_bf16(g0i, n, -1, 1), fill_f32(g0w, C, -1, 1);
    float *ri = hcopy(g0i, n), *rw = hcopy(g0w, C), *mw = habs(g0w, C);
    cpu->rmsnorm_backward(ri, rw, dout, x, w, rstd, N, C);
    rms_dw_mag(mw, dout, x, rstd, N, C, 1, (size_t)C, 1);
    tsr_bf16 *d_dout = new_bf16(dout, n), *d_gi = d16(n);
    float *d_rs = new_f32(rstd, N), *d_gw = df32(C), *gi[2], *gw[2];
    for (int k = 0; k < 2; k++) {
        put_bf16(d_gi, g0i, n), put_f32(d_gw, g0w, C);
        tcu_rmsnorm_backward(d_gi, d_gw, d_dout, d_x, d_w, d_rs, N, C, g_s);
        gi[k] = get_bf16(d_gi, n), gw[k] = get_f32(d_gw, C);
    }
    /* dinp as LayerNorm's: ATOL_LN, g0 + increment rounded once (2u), or the increment first (u) */
    check_close(L("rmsnorm_backward %s: dinp", tag), gi[0], ri, n, ATOL_LN, RTOL_BF16,
                absdiff(ri, g0i, n, 1.0f, NULL, 0), U_BF16);
    check_close(L("rmsnorm_backward %s: dw", tag), gw[0], rw, C, 0, 0, mw, MTOL_SUM);
    size_t dif = ndiff(gi[0], gi[1], n, 4) + ndiff(gw[0], gw[1], C, 4);
    tap_ok(dif == 0, "rmsnorm_backward %s: run twice, dinp and dw bit-identical (%zu differ)", tag,
           dif);
    if (norm_hold_on(L("rmsnorm_backward %s", tag), C)) {
        put_bf16(d_gi, g0i, n), put_f32(d_gw, g0w, C);
        tcu_rmsnorm_backward(d_gi, d_gw, d_dout, d_x, d_w, d_rs, N, C, g_s);
        norm_hold_check(L("rmsnorm_backward %s", tag),
                        ndiff(get_bf16(d_gi, n), gi[0], n, 4) +
                            ndiff(get_f32(d_gw, C), gw[0], C, 4));
    }
    scope_end(tag);
}

typedef struct { int N, NH, KVH, hs; } qkn_cfg;
#define QKN_CHECKS 7

/* QK-norm per head (every query and key head one RMSNorm row of hs; rstd (N, NH+KVH)) or per
 * projection (OLMo 2, gpu_ops_variants.c: the NH hs query columns one row, the KVH hs key columns
 * one; rstd (N, 2)) against the CPU op: forward, value columns bit for bit, backward; then per
 * head the backward run twice (bit-identical), per projection frozen (NULL weight gradients). */
static void test_qk(int N, int NH, int KVH, int hs, int per_head, const char *tag) {
    const int H = per_head ? NH + KVH : 2, RH = per_head ? NH : 1, RK = per_head ? KVH : 1;
    const int CQ = per_head ? hs : NH * hs, CK = per_head ? hs : KVH * hs;
    const size_t ld = (size_t)(NH + 2 * KVH) * hs, n = (size_t)N * ld, nr = (size_t)N * H;
    float *x = hf(n), *qw = hf(CQ), *kw = hf(CK), *out = hf(n), *rstd = hf(nr);
    fill_bf16(x, n, -2, 2), fill_bf16(qw, CQ, 0.5, 1.5), fill_bf16(kw, CK, 0.5, 1.5);
    tsr_bf16 *d_x = new_bf16(x, n), *d_qw = new_bf16(qw, CQ), *d_kw = new_bf16(kw, CK);
    tsr_bf16 *d_out = d16(n);
    float *d_rstd = df32(nr);
    (per_head ? cpu->qknorm_forward : cpu->qknorm_proj_forward)(out, rstd, x, qw, kw, N, NH, KVH,
                                                                hs, RMS_EPS);
    poison(d_out, n * 2), poison(d_rstd, nr * 4);
    (per_head ? tcu_qknorm_forward : tcu_qknorm_proj_forward)(d_out, d_rstd, d_x, d_qw, d_kw, N,
                                                              NH, KVH, hs, RMS_EPS, g_s);
    check_rms_fwd(L("%s forward", tag), d_out, d_rstd, out, rstd, n, nr);
    float *gout = get_bf16(d_out, n);
    size_t vbad = 0;
    for (int r = 0; r < N; r++)
        vbad += ndiff(gout + r * ld + VCOL(0), x + r * ld + VCOL(0), (size_t)KVH * hs, 4);
    tap_ok(vbad == 0, "%s forward: value heads copied bit for bit (%zu differ)", tag, vbad);

    float *dout = hf(n), *g0i = hf(n), *g0q = hf(CQ), *g0k = hf(CK);
    fill_bf16(dout, n, -1, 1), fill_bf16(g0i, n, -1, 1);
    fill_f32(g0q, CQ, -1, 1), fill_f32(g0k, CK, -1, 1);
    float *ri = hcopy(g0i, n), *rq = hcopy(g0q, CQ), *rk = hcopy(g0k, CK);
    float *mq = habs(g0q, CQ), *mk = habs(g0k, CK);
    (per_head ? cpu->qknorm_backward : cpu->qknorm_proj_backward)(ri, rq, rk, dout, x, qw, kw,
                                                                  rstd, N, NH, KVH, hs);
    rms_dw_mag(mq, dout, x, rstd, N * RH, CQ, RH, ld, H);
    rms_dw_mag(mk, dout + KCOL(0), x + KCOL(0), rstd + RH, N * RK, CK, RK, ld, H);
    tsr_bf16 *d_dout = new_bf16(dout, n), *d_gi = d16(n);
    float *d_rs = new_f32(rstd, nr), *d_gq = df32(CQ), *d_gk = df32(CK), *gi[2], *gq[2], *gk[2];
    void (*bwd)(tsr_bf16 *, float *, float *, const tsr_bf16 *, const tsr_bf16 *, const tsr_bf16 *,
                const tsr_bf16 *, const float *, int, int, int, int, tcu_stream) =
        per_head ? tcu_qknorm_backward : tcu_qknorm_proj_backward;
    for (int k = 0; k < 2; k++) { /* per head: twice; per projection: the second frozen */
        put_bf16(d_gi, g0i, n), put_f32(d_gq, g0q, CQ), put_f32(d_gk, g0k, CK);
        const int frozen = k && !per_head;
        bwd(d_gi, frozen ? NULL : d_gq, frozen ? NULL : d_gk, d_dout, d_x, d_qw, d_kw, d_rs, N, NH,
            KVH, hs, g_s);
        gi[k] = get_bf16(d_gi, n), gq[k] = get_f32(d_gq, CQ), gk[k] = get_f32(d_gk, CK);
    }
    check_close(L("%s backward: dinp", tag), gi[0], ri, n, ATOL_LN, RTOL_BF16,
                absdiff(ri, g0i, n, 1.0f, NULL, 0), U_BF16);
    check_close(L("%s backward: dqw", tag), gq[0], rq, CQ, 0, 0, mq, MTOL_SUM);
    check_close(L("%s backward: dkw", tag), gk[0], rk, CK, 0, 0, mk, MTOL_SUM);
    size_t dif = ndiff(gi[0], gi[1], n, 4);
    if (per_head) dif += ndiff(gq[0], gq[1], CQ, 4) + ndiff(gk[0], gk[1], CK, 4);
    tap_ok(dif == 0, "%s backward %s bit-identical (%zu differ)", tag,
           per_head ? "run twice: dinp dqw dkw" : "frozen (dqw = dkw = NULL): dinp", dif);
}

static void test_qknorm(const qkn_cfg *q) {
    char tag[96];
    snprintf(tag, sizeof tag, "qknorm N=%d NH=%d KVH=%d hs=%d", q->N, q->NH, q->KVH, q->hs);
    test_qk(q->N, q->NH, q->KVH, q->hs, 1, tag);
    scope_end(tag);
}

typedef struct { int B, T, NH, KVH, hs, pos, p0; } rope_cfg;
#define ROPE_CHECKS 3

/* Llama's frequencies theta^(-2i/hs), theta = 500000 (the model's own come from model.c) */
static void rope_freqs(float *f, int hs) {
    for (int i = 0; i < hs / 2; i++) f[i] = (float)pow(500000.0, -2.0 * i / hs);
}

/* x' = x c - y s, y' = y c + x s rounded once (2u of the result) plus the GPU's fp32 angle and
 * sincosf against the CPU's double: |a| 2^-24 of angle error, a few ulp of cos and sin, of
 * |x| + |y| (mag): 2^-13 mag covers angles to ~2000 rad */
static void test_rope(const rope_cfg *r) {
    const int B = r->B, T = r->T, NH = r->NH, KVH = r->KVH, hs = r->hs;
    const size_t ld = (size_t)(NH + 2 * KVH) * hs, N = (size_t)B * T, n = N * ld;
    char tag[128];
    snprintf(tag, sizeof tag, "B=%d T=%d NH=%d KVH=%d hs=%d %s p0=%d", B, T, NH, KVH, hs,
             r->pos ? "positions given" : "t + p0", r->p0);
    float *x = hf(n), *f = hf(hs / 2), *mag = hf(n), *ref = hf(n), *dref = hf(n);
    int32_t *pos = hi32(N), *seq = hi32(T);
    fill_bf16(x, n, -2, 2), rope_freqs(f, hs);
    for (int b = 0; b < B; b++) { /* positions restart with each document (segment) */
        make_segments(seq, T, b);
        for (int t = 0; t < T; t++)
            pos[b * T + t] = t && seq[t] == seq[t - 1] ? pos[b * T + t - 1] + 1 : 0;
    }
    const int32_t *ps = r->pos ? pos : NULL;
    for (size_t i = 0; i < n; i++) { /* |x| + |partner| */
        const size_t c = i % ld, h0 = c / hs * hs, d = c - h0;
        const size_t partner = i - d + (d < (size_t)hs / 2 ? d + hs / 2 : d - hs / 2);
        mag[i] = fabsf(x[i]) + fabsf(x[partner]);
    }
    memcpy(ref, x, n * sizeof *ref), memcpy(dref, x, n * sizeof *dref);
    cpu->rope_forward(ref, ps, r->p0, f, B, T, NH, KVH, hs);
    cpu->rope_backward(dref, ps, r->p0, f, B, T, NH, KVH, hs);
    tsr_bf16 *d_x = new_bf16(x, n), *d_dx = new_bf16(x, n);
    float *d_f = new_f32(f, hs / 2);
    int32_t *d_pos = r->pos ? new_i32(pos, N) : NULL;
    tcu_rope_forward(d_x, d_pos, r->p0, d_f, B, T, NH, KVH, hs, g_s);
    tcu_rope_backward(d_dx, d_pos, r->p0, d_f, B, T, NH, KVH, hs, g_s);
    float *gf = get_bf16(d_x, n), *gb = get_bf16(d_dx, n);
    check_close(L("rope_forward %s", tag), gf, ref, n, 0, RTOL_BF16, mag, 0x1p-13);
    check_close(L("rope_backward %s", tag), gb, dref, n, 0, RTOL_BF16, mag, 0x1p-13);
    size_t vbad = 0;
    for (size_t row = 0; row < N; row++) {
        vbad += ndiff(gf + row * ld + VCOL(0), x + row * ld + VCOL(0), (size_t)KVH * hs, 4);
        vbad += ndiff(gb + row * ld + VCOL(0), x + row * ld + VCOL(0), (size_t)KVH * hs, 4);
    }
    tap_ok(vbad == 0, "rope %s: value heads untouched by forward and backward (%zu differ)", tag,
           vbad);
    scope_end(tag);
}

typedef struct { int N, F; } swiglu_cfg;
#define SWIGLU_CHECKS 3

/* silu(g) u in fp32 (expf against the CPU's: a few ulp), rounded once: 2u + 2^-20 |g u|; the
 * backward's increment in fp32 (a few ulp of its terms), g0 + increment rounded once (2u), or the
 * increment first (u) */
static void test_swiglu(const swiglu_cfg *c) {
    const int N = c->N, F = c->F;
    const size_t n = (size_t)N * F;
    char tag[64];
    snprintf(tag, sizeof tag, "N=%d F=%d", N, F);
    float *x = hf(2 * n), *out = hf(n), *mag = hf(n), *dout = hf(n), *g0 = hf(2 * n);
    for (int r = 0; r < N; r++) /* gates over the whole sigmoid, ups of order 1 */
        for (int f = 0; f < 2 * F; f++)
            x[(size_t)r * 2 * F + f] = rbf16(f < F ? uni(-8, 8) : uni(-2, 2));
    for (int r = 0; r < N; r++)
        for (int f = 0; f < F; f++)
            mag[(size_t)r * F + f] = fabsf(x[(size_t)r * 2 * F + f] * x[(size_t)r * 2 * F + F + f]);
    fill_bf16(dout, n, -1, 1), fill_bf16(g0, 2 * n, -1, 1);
    cpu->swiglu_forward(out, x, N, F);
    tsr_bf16 *d_x = new_bf16(x, 2 * n), *d_out = d16(n), *d_dout = new_bf16(dout, n);
    tsr_bf16 *d_g = new_bf16(g0, 2 * n);
    poison(d_out, n * 2);
    tcu_swiglu_forward(d_out, d_x, N, F, g_s);
    check_close(L("swiglu_forward %s", tag), get_bf16(d_out, n), out, n, 0, RTOL_BF16, mag,
                0x1p-20);
    float *ref = hcopy(g0, 2 * n);
    cpu->swiglu_backward(ref, x, dout, N, F);
    tcu_swiglu_backward(d_g, d_x, d_dout, N, F, TSR_GRAD_ADD, g_s);
    check_close(L("swiglu_backward %s: dinp", tag), get_bf16(d_g, 2 * n), ref, 2 * n, 1e-6,
                RTOL_BF16, absdiff(ref, g0, 2 * n, 1.0f, NULL, 0), U_BF16);
    tcu_zero(d_g, 2 * n * 2, g_s);
    tcu_swiglu_backward(d_g, d_x, d_dout, N, F, TSR_GRAD_ADD, g_s);
    float *add = get_bf16(d_g, 2 * n);
    poison(d_g, 2 * n * 2);
    tcu_swiglu_backward(d_g, d_x, d_dout, N, F, TSR_GRAD_SET, g_s);
    size_t dif = set_vs_add(get_bf16(d_g, 2 * n), add, 2 * n, 1);
    tap_ok(dif == 0, "swiglu_backward %s: TSR_GRAD_SET over NaNs = += over zeros, bit for bit (%zu "
           "differ)", tag, dif);
    scope_end(tag);
}

/* ---- mixture of experts ------------------------------------------------------------------- */

/* N rows, E experts, K per row, C channels, F an expert's output width; norm (the K weights
 * normalised); starve (expert E-1 never chosen: an expert without rows); base (combine adds a
 * base, else NULL) */
typedef struct { int N, E, K, C, F, norm, starve, base; } moe_cfg;
#define MOE_CHECKS 16
/* the CPU routing every other MoE op reads (plain malloc: it outlives the scopes of the tests) */
typedef struct { float *probs, *lse, *wts, stats[2]; int32_t *idx, *offs, *rows, *slot; } moe_ref;

/* Routing: logits on a grid of 1/16 in [-4, 4] (exact in bf16; ties frequent, to the lower index;
 * distinct values >= 1/16 apart, so both sides order them alike), -8 for a starved expert.
 * idx, offs, rows, slot exact; probs, wts to 2^-18 relative (expf against the CPU's: a few ulp),
 * lse 1e-5; stats (double sums) 2^-18; run twice: the same bits. */
static void test_moe_route(const moe_cfg *c, const char *tag, moe_ref *r) {
    const int N = c->N, E = c->E, K = c->K;
    const size_t ne = (size_t)N * E, nk = (size_t)N * K;
    float *x = hf(ne);
    for (size_t i = 0; i < ne; i++)
        x[i] = c->starve && i % E == (size_t)E - 1 ? -8.0f : (float)(irand(129) - 64) / 16.0f;
    cpu->moe_route(r->probs, r->lse, r->idx, r->wts, r->offs, r->rows, r->slot, r->stats, x, N, E,
                   K, c->norm);
    tsr_bf16 *d_x = new_bf16(x, ne);
    float *d_p = df32(ne), *d_lse = df32(N), *d_w = df32(nk), *d_st = df32(2), *p[2], *st[2];
    int32_t *d_idx = dalloc(nk * 4), *d_offs = dalloc((E + 1) * 4), *d_rows = dalloc(nk * 4);
    int32_t *d_slot = dalloc(nk * 4), *ints[2];
    size_t ni = 3 * nk + E + 1, dif = 0;
    for (int k = 0; k < 2; k++) {
        poison(d_p, ne * 4), poison(d_lse, N * 4), poison(d_w, nk * 4), poison(d_st, 8);
        poison(d_idx, nk * 4), poison(d_offs, (E + 1) * 4), poison(d_rows, nk * 4);
        poison(d_slot, nk * 4);
        tcu_moe_route(d_p, d_lse, d_idx, d_w, d_offs, d_rows, d_slot, d_st, d_x, N, E, K, c->norm,
                      g_s);
        p[k] = get_f32(d_p, ne), st[k] = get_f32(d_st, 2), ints[k] = hi32(ni);
        d2h(ints[k], d_idx, nk * 4), d2h(ints[k] + nk, d_rows, nk * 4);
        d2h(ints[k] + 2 * nk, d_slot, nk * 4), d2h(ints[k] + 3 * nk, d_offs, (E + 1) * 4);
        dif += ndiff(p[k], p[0], ne, 4) + ndiff(st[k], st[0], 2, 4);
        dif += ndiff(ints[k], ints[0], ni, 4);
    }
    size_t bad = ndiff(ints[0], r->idx, nk, 4) + ndiff(ints[0] + nk, r->rows, nk, 4);
    bad += ndiff(ints[0] + 2 * nk, r->slot, nk, 4) + ndiff(ints[0] + 3 * nk, r->offs, E + 1, 4);
    tap_ok(bad == 0, "moe_route %s: idx, rows, slot, offs exact (%zu of %zu differ)", tag, bad, ni);
    check_close(L("moe_route %s: probs", tag), p[0], r->probs, ne, 0, 0x1p-18, NULL, 0);
    check_close(L("moe_route %s: lse", tag), get_f32(d_lse, N), r->lse, N, 1e-5, 0, NULL, 0);
    check_close(L("moe_route %s: wts", tag), get_f32(d_w, nk), r->wts, nk, 0, 0x1p-18, NULL, 0);
    check_close(L("moe_route %s: stats (aux, z)", tag), st[0], r->stats, 2, 0, 0x1p-18, NULL, 0);
    tap_ok(dif == 0, "moe_route %s: run twice, every output bit-identical (%zu differ)", tag, dif);
}

/* gather (bits) and its backward (dx + the K rows in j order, fp32, rounded once: bf16 of the
 * CPU's fp32 result, bit for bit); the grouped products as matmul (2u + sums; dinp 2u or u of
 * the increment; dw sums), backward run twice: the same bits */
static void test_moe_experts(const moe_cfg *c, const char *tag, const moe_ref *r) {
    const int N = c->N, E = c->E, K = c->K, C = c->C, F = c->F, NK = N * K;
    const size_t nc = (size_t)N * C, ni = (size_t)NK * C, no = (size_t)NK * F;
    const size_t nw = (size_t)E * F * C;
    float *x = hf(nc), *xg = hf(ni), *dxg = hf(ni), *dx = hf(nc), *w = hf(nw), *out = hf(no);
    float *dout = hf(no), *g0i = hf(ni), *g0w = hf(nw), *mo = hf(no), *gi[2], *gw[2];
    fill_bf16(x, nc, -1, 1), fill_bf16(dxg, ni, -1, 1), fill_bf16(dx, nc, -1, 1);
    fill_bf16(w, nw, -1, 1), fill_bf16(dout, no, -1, 1), fill_bf16(g0i, ni, -1, 1);
    fill_f32(g0w, nw, -1, 1);
    int32_t *d_rows = new_i32(r->rows, NK), *d_slot = new_i32(r->slot, NK);
    int32_t *d_offs = new_i32(r->offs, E + 1);
    tsr_bf16 *d_x = new_bf16(x, nc), *d_xg = d16(ni), *d_dxg = new_bf16(dxg, ni);
    tsr_bf16 *d_dx = new_bf16(dx, nc), *d_w = new_bf16(w, nw), *d_out = d16(no);
    tsr_bf16 *d_dout = new_bf16(dout, no), *d_gi = d16(ni);
    float *d_gw = df32(nw);
    cpu->moe_gather(xg, x, r->rows, N, K, C);
    poison(d_xg, ni * 2);
    tcu_moe_gather(d_xg, d_x, d_rows, N, K, C, g_s);
    check_exact16(L("moe_gather %s: xg", tag), d_xg, xg, ni);
    cpu->moe_gather_backward(dx, dxg, r->slot, N, K, C);
    tcu_moe_gather_backward(d_dx, d_dxg, d_slot, N, K, C, g_s);
    check_exact16(L("moe_gather_backward %s: dx", tag), d_dx, dx, nc);
    cpu->moe_matmul_forward(out, xg, w, r->offs, E, NK, C, F);
    cpu->moe_matmul_forward(mo, habs(xg, ni), habs(w, nw), r->offs, E, NK, C, F);
    poison(d_out, no * 2);
    tcu_moe_matmul_forward(d_out, d_xg, d_w, d_offs, E, NK, C, F, g_s);
    check_close(L("moe_matmul_forward %s: out", tag), get_bf16(d_out, no), out, no, 0, RTOL_BF16,
                mo, MTOL_SUM);
    float *ri = hcopy(g0i, ni), *rw = hcopy(g0w, nw), *mi = habs(g0i, ni), *mw = habs(g0w, nw);
    cpu->moe_matmul_backward(ri, rw, dout, xg, w, r->offs, E, NK, C, F);
    cpu->moe_matmul_backward(mi, mw, habs(dout, no), habs(xg, ni), habs(w, nw), r->offs, E, NK, C,
                             F);
    for (int k = 0; k < 2; k++) {
        put_bf16(d_gi, g0i, ni), put_f32(d_gw, g0w, nw);
        tcu_moe_matmul_backward(d_gi, d_gw, d_dout, d_xg, d_w, d_offs, E, NK, C, F, g_s);
        gi[k] = get_bf16(d_gi, ni), gw[k] = get_f32(d_gw, nw);
    }
    check_close(L("moe_matmul_backward %s: dinp", tag), gi[0], ri, ni, 0, RTOL_BF16,
                absdiff(ri, g0i, ni, (float)U_BF16, mi, (float)MTOL_SUM), 1.0);
    check_close(L("moe_matmul_backward %s: dw", tag), gw[0], rw, nw, 0, 0, mw, MTOL_SUM);
    size_t dif = ndiff(gi[0], gi[1], ni, 4) + ndiff(gw[0], gw[1], nw, 4);
    tap_ok(dif == 0, "moe_matmul_backward %s: run twice, dinp dw bit-identical (%zu differ)", tag,
           dif);
}

/* combine (base + K weighted rows, fp32, rounded once: 2u + sums); its backward: dy = bf16(w g)
 * bit for bit, dwts (double dots of exact products) to 2^-22; the router backward (double
 * arithmetic both sides, the CPU rounding dp to fp32 on the way: 2^-20 absolute), rounded once */
static void test_moe_combine_router(const moe_cfg *c, const char *tag, const moe_ref *r) {
    const int N = c->N, E = c->E, K = c->K, C = c->C, NK = N * K;
    const size_t nc = (size_t)N * C, ny = (size_t)NK * C, ne = (size_t)N * E;
    float *y = hf(ny), *base = hf(nc), *out = hf(nc), *mag = hf(nc), *dout = hf(nc), *dy = hf(ny);
    float *dwts = hf(NK), *gw = hf(NK), *dl = hf(ne);
    fill_bf16(y, ny, -1, 1), fill_bf16(base, nc, -1, 1), fill_bf16(dout, nc, -1, 1);
    fill_f32(gw, NK, -1, 1);
    int32_t *d_slot = new_i32(r->slot, NK), *d_idx = new_i32(r->idx, NK);
    int32_t *d_offs = new_i32(r->offs, E + 1);
    float *d_wts = new_f32(r->wts, NK), *d_dwts = df32(NK), *d_gw = new_f32(gw, NK);
    float *d_p = new_f32(r->probs, ne), *d_lse = new_f32(r->lse, N);
    tsr_bf16 *d_y = new_bf16(y, ny), *d_base = c->base ? new_bf16(base, nc) : NULL;
    tsr_bf16 *d_out = d16(nc), *d_dout = new_bf16(dout, nc), *d_dy = d16(ny), *d_dl = d16(ne);
    cpu->moe_combine(out, c->base ? base : NULL, y, r->wts, r->slot, N, K, C);
    cpu->moe_combine(mag, c->base ? habs(base, nc) : NULL, habs(y, ny), habs(r->wts, NK), r->slot,
                     N, K, C);
    poison(d_out, nc * 2);
    tcu_moe_combine(d_out, d_base, d_y, d_wts, d_slot, N, K, C, g_s);
    check_close(L("moe_combine %s: out", tag), get_bf16(d_out, nc), out, nc, 0, RTOL_BF16, mag,
                MTOL_SUM);
    cpu->moe_combine_backward(dy, dwts, dout, y, r->wts, r->slot, N, K, C);
    poison(d_dy, ny * 2), poison(d_dwts, NK * 4);
    tcu_moe_combine_backward(d_dy, d_dwts, d_dout, d_y, d_wts, d_slot, N, K, C, g_s);
    check_exact16(L("moe_combine_backward %s: dy", tag), d_dy, dy, ny);
    check_close(L("moe_combine_backward %s: dwts", tag), get_f32(d_dwts, NK), dwts, NK, 1e-12,
                0x1p-22, NULL, 0);
    cpu->moe_router_backward(dl, gw, r->probs, r->lse, r->idx, r->wts, r->offs, N, E, K, c->norm,
                             0.5f, 0.25f);
    poison(d_dl, ne * 2);
    tcu_moe_router_backward(d_dl, d_gw, d_p, d_lse, d_idx, d_wts, d_offs, N, E, K, c->norm, 0.5f,
                            0.25f, g_s);
    check_close(L("moe_router_backward %s: dlogits", tag), get_bf16(d_dl, ne), dl, ne, 0x1p-20,
                RTOL_BF16, NULL, 0);
}

static int moe_cpu_ops(void) {
    return cpu->moe_route && cpu->moe_gather && cpu->moe_gather_backward &&
           cpu->moe_matmul_forward && cpu->moe_matmul_backward && cpu->moe_combine &&
           cpu->moe_combine_backward && cpu->moe_router_backward;
}

static void test_moe(const moe_cfg *c) {
    char tag[96];
    snprintf(tag, sizeof tag, "N=%d E=%d K=%d C=%d F=%d%s%s%s", c->N, c->E, c->K, c->C, c->F,
             c->norm ? " norm" : "", c->starve ? " starved" : "", c->base ? " base" : "");
    if (!moe_cpu_ops()) { /* optional in the table (ops.h), but the oracle these compare with */
        for (int i = 0; i < MOE_CHECKS; i++)
            tap_ok(0, "%s: the CPU MoE ops are missing from tsr_cpu_ops", L("moe %s", tag));
        return;
    }
    const size_t ne = (size_t)c->N * c->E, nk = (size_t)c->N * c->K;
    moe_ref r = {xmalloc(ne * 4), xmalloc(c->N * 4), xmalloc(nk * 4), {0, 0}, xmalloc(nk * 4),
                 xmalloc((c->E + 1) * 4), xmalloc(nk * 4), xmalloc(nk * 4)};
    test_moe_route(c, tag, &r);
    scope_end(tag);
    test_moe_experts(c, tag, &r);
    scope_end(tag);
    test_moe_combine_router(c, tag, &r);
    scope_end(tag);
    free(r.probs), free(r.lse), free(r.wts), free(r.idx), free(r.offs), free(r.rows), free(r.slot);
}

/* ---- softmax + cross-entropy -------------------------------------------------------------- */

typedef struct { int N, V, Vp; float scale; } xent_cfg;
#define XENT_CHECKS 7

static void test_xent(const xent_cfg *x) {
    const int N = x->N, V = x->V, Vp = x->Vp;
    const size_t nl = (size_t)N * Vp;
    char tag[96];
    snprintf(tag, sizeof tag, "N=%d V=%d Vp=%d logits in +-%g", N, V, Vp, x->scale);
    float *logits = hf(nl), *dl = hf(N), *losses = hf(N), *probs = hf(nl), *dref = hf(nl);
    int32_t *t = hi32(N);
    uint16_t *bits = h16(nl);
    for (size_t i = 0; i < nl; i++) /* padding columns 100: dominate the softmax if read */
        logits[i] = (int)(i % Vp) < V ? rbf16(uni(-x->scale, x->scale)) : 100.0f;
    for (size_t i = 0; i < nl; i++) bits[i] = host_bf16(logits[i]);
    for (int n = 0; n < N; n++) t[n] = n % 5 == 2 ? -1 : irand(V);
    t[N - 1] = N > 1 ? V - 1 : t[N - 1];
    fill_f32(dl, N, 0.1, 1.0);
    cpu->softmax_xent_forward(losses, probs, logits, t, N, V, Vp);
    cpu->softmax_xent_backward(dref, dl, probs, t, N, V, Vp);
    tsr_bf16 *d_logits = new_bf16(logits, nl);
    float *d_losses = df32(N), *d_dl = new_f32(dl, N);
    int32_t *d_t = new_i32(t, N);
    uint16_t *after = h16(nl);

    /* losses: fp32 max and sum of exp over V (blocked sums: ~1e-5 relative at V=5e4), log: 1e-4 */
    poison(d_losses, N * 4);
    tcu_softmax_xent(d_losses, d_logits, d_t, NULL, N, V, Vp, g_s);
    float *l0 = get_f32(d_losses, N);
    check_close(L("softmax_xent %s, dlosses NULL: losses", tag), l0, losses, N, 1e-4, 1e-5, 0, 0);
    d2h(after, d_logits, nl * 2);
    size_t dif = ndiff(after, bits, nl, 2), nz = 0;
    for (int n = 0; n < N; n++) nz += t[n] < 0 && l0[n] != 0.0f;
    tap_ok(dif == 0 && nz == 0,
           "softmax_xent %s, dlosses NULL: logits untouched bit for bit (%zu differ), losses of "
           "target -1 rows exactly 0 (%zu not)", tag, dif, nz);

    poison(d_losses, N * 4);
    tcu_softmax_xent(d_losses, d_logits, d_t, d_dl, N, V, Vp, g_s);
    float *l1 = get_f32(d_losses, N), *dg = get_bf16(d_logits, nl);
    check_close(L("softmax_xent %s, with dlosses: losses", tag), l1, losses, N, 1e-4, 1e-5, 0, 0);
    /* (p - onehot) dl rounded once (2u); p - 1 cancels at the target: 2^-16 absolute */
    check_close(L("softmax_xent %s: dlogits (targets -1 at rows n%%5 == 2)", tag), dg, dref, nl,
                0x1p-16, RTOL_BF16, NULL, 0);
    nz = 0;
    for (size_t i = 0; i < nl; i++) nz += ((int)(i % Vp) >= V || t[i / Vp] < 0) && dg[i] != 0.0f;
    for (int n = 0; n < N; n++) nz += t[n] < 0 && l1[n] != 0.0f;
    tap_ok(nz == 0, "softmax_xent %s: dlogits exactly 0 in columns >= V and rows with target -1, "
           "their losses 0 (%zu not)", tag, nz);

    /* the row kept in registers (tcu_softmax_xent_set_resident): the same bits, losses and
     * dlogits, and without dlosses the same losses and the logits untouched; where the shape does
     * not allow it (Vp % 8 != 0) the same kernel runs */
    uint16_t *g0 = h16(nl), *g1 = h16(nl);
    d2h(g0, d_logits, nl * 2);
    put_bf16(d_logits, logits, nl);
    tcu_softmax_xent_set_resident(1);
    poison(d_losses, N * 4);
    tcu_softmax_xent(d_losses, d_logits, d_t, NULL, N, V, Vp, g_s);
    float *l3 = get_f32(d_losses, N);
    d2h(g1, d_logits, nl * 2);
    size_t ev_dif = ndiff(l0, l3, N, 4) + ndiff(g1, bits, nl, 2);
    poison(d_losses, N * 4);
    tcu_softmax_xent(d_losses, d_logits, d_t, d_dl, N, V, Vp, g_s);
    tcu_softmax_xent_set_resident(0);
    float *l2 = get_f32(d_losses, N);
    d2h(g1, d_logits, nl * 2);
    size_t dg_dif = ndiff(g0, g1, nl, 2), l_dif = ndiff(l1, l2, N, 4);
    tap_ok(dg_dif == 0 && l_dif == 0 && ev_dif == 0, "softmax_xent %s: the row kept in registers "
           "(%s): dlogits and losses the same bits as the two passes' (%zu, %zu differ); without "
           "dlosses the same losses, the logits untouched (%zu differ)", tag,
           Vp % 8 == 0 ? "its kernel" : "Vp % 8 != 0: not used", dg_dif, l_dif, ev_dif);

    /* a target >= V (no such class: a bug upstream) poisons its row, in both kernels: loss NaN,
     * with dlosses dlogits NaN in its first V columns and 0 in the padding; the other rows keep
     * the bits above. Row 0 gets V (its target was in [0, V)), row 3 INT32_MAX where N > 3; the
     * losses start as 0, not the poison's NaN bytes, so a NaN is the kernel's */
    int32_t *tb = hi32(N);
    memcpy(tb, t, (size_t)N * sizeof *tb);
    tb[0] = V;
    if (N > 3) tb[3] = INT32_MAX;
    int32_t *d_tb = new_i32(tb, N);
    size_t pz_bad = 0, pz_other = 0;
    for (int res = 0; res < 2; res++) {
        tcu_softmax_xent_set_resident(res);
        put_bf16(d_logits, logits, nl);
        fill_bytes(d_losses, 0, N * 4);
        tcu_softmax_xent(d_losses, d_logits, d_tb, NULL, N, V, Vp, g_s);
        float *le = get_f32(d_losses, N);
        d2h(g1, d_logits, nl * 2);
        pz_other += ndiff(g1, bits, nl, 2); /* without dlosses: the logits untouched */
        fill_bytes(d_losses, 0, N * 4);
        tcu_softmax_xent(d_losses, d_logits, d_tb, d_dl, N, V, Vp, g_s);
        float *lg = get_f32(d_losses, N);
        d2h(g1, d_logits, nl * 2);
        for (int n = 0; n < N; n++) {
            if (tb[n] >= V) {
                pz_bad += !isnan(le[n]) + !isnan(lg[n]);
                for (int j = 0; j < Vp; j++) {
                    const float v = bf16_f32(g1[(size_t)n * Vp + j]);
                    pz_bad += j < V ? !isnan(v) : v != 0.0f || signbit(v);
                }
            } else {
                pz_other += ndiff(le + n, l0 + n, 1, 4) + ndiff(lg + n, l1 + n, 1, 4) +
                            ndiff(g1 + (size_t)n * Vp, g0 + (size_t)n * Vp, Vp, 2);
            }
        }
    }
    tcu_softmax_xent_set_resident(0);
    tap_ok(pz_bad == 0 && pz_other == 0, "softmax_xent %s: a target >= V (V, INT32_MAX) poisons "
           "its row in both kernels: loss NaN, dlogits NaN below V and +0 in the padding (%zu "
           "not); the other rows the bits of the good targets' run (%zu differ)", tag, pz_bad,
           pz_other);
    scope_end(tag);
}

/* argmax (ICL's greedy tokens): exact, so compared element for element with the rule written out
 * here: the largest of the first V columns, the lowest column on ties, NaN as -inf. Rows carry a
 * tie planted before the maximum (the earlier column wins) or after it (the original stays), NaN
 * in column 0 and elsewhere, a row of -inf, a row of NaN; padding columns are 100 (never chosen). */
static void test_argmax(const xent_cfg *x) {
    const int N = x->N, V = x->V, Vp = x->Vp;
    const size_t nl = (size_t)N * Vp;
    int32_t *want = hi32(N), *got = hi32(N);
    const double sc = fabs(x->scale);
    float *lg_all = hf(nl + 1), *lg = lg_all + 1; /* lg_all[0]: the element before, unaligned case */
    lg_all[0] = 0.0f;
    for (size_t i = 0; i < nl; i++) lg[i] = (int)(i % Vp) < V ? rbf16(uni(-sc, sc)) : 100.0f;
    for (int n = 0; n < N; n++) {
        float *r = lg + (size_t)n * Vp;
        int top = 0;
        for (int j = 1; j < V; j++) top = r[j] > r[top] ? j : top;
        if (n % 4 == 1 && V > 1) { /* a tie in another column, before or after the maximum */
            int c = irand(V - 1);
            r[c + (c >= top)] = r[top];
        }
        if (n % 7 == 3) r[0] = NAN, r[irand(V)] = NAN;
        if (n == N - 1 && N > 2)
            for (int j = 0; j < V; j++) r[j] = -INFINITY;
        if (n == N - 2 && N > 2)
            for (int j = 0; j < V; j++) r[j] = NAN;
        float bv = -INFINITY;
        want[n] = 0;
        for (int j = 0; j < V; j++) {
            float v = isnan(r[j]) ? -INFINITY : r[j];
            if (v > bv) bv = v, want[n] = j;
        }
    }
    /* x->scale < 0: the logits one bf16 past a 16-byte boundary (the op's unaligned path) */
    tsr_bf16 *d_all = new_bf16(lg - (x->scale < 0), nl + (x->scale < 0)), *d_lg = d_all + (x->scale < 0);
    int32_t *d_idx = new_i32(want, N);
    poison(d_idx, (size_t)N * sizeof(int32_t));
    tcu_argmax(d_idx, d_lg, N, V, Vp, g_s);
    d2h(got, d_idx, (size_t)N * sizeof(int32_t));
    int bad = 0, first = -1;
    for (int n = 0; n < N; n++)
        if (got[n] != want[n]) bad++, first = first < 0 ? n : first;
    tap_ok(bad == 0, "argmax N=%d V=%d Vp=%d logits in +-%g%s (ties both ways, NaN, a -inf row, a "
           "NaN row, padding 100): %d of %d rows differ%s", N, V, Vp, sc,
           x->scale < 0 ? " at an unaligned address" : "", bad, N,
           first < 0 ? "" : " (see the first below)");
    if (first >= 0) tap_diag("row %d: gpu %d, expected %d", first, got[first], want[first]);
    scope_end("argmax");
}

/* ---- sumsq, adamw ------------------------------------------------------------------------- */

#define SUMSQ_CHECKS 3
static void test_sumsq(size_t n) {
    float *g = hf(n), r[3];
    fill_f32(g, n, -2, 2);
    g[n - 1] = -1000.0f; /* large ends: a lost first or last element shows */
    if (n > 2) g[0] = 300.0f;
    double want = 0.0;
    for (size_t i = 0; i < n; i++) want += (double)g[i] * g[i];
    float *d_g = new_f32(g, n), *d_acc = df32(1);
    const float a0 = (float)(0.375 * want);
    for (int k = 0; k < 3; k++) {
        if (k < 2) tcu_zero(d_acc, sizeof(float), g_s);
        else put_f32(d_acc, &a0, 1);
        tcu_sumsq(d_acc, d_g, n, g_s);
        d2h(&r[k], d_acc, sizeof(float));
    }
    /* positive terms summed in fp32: error <= depth * 2^-24 relative; 1e-4 allows depth ~1700 */
    tap_ok(fabs(r[0] - want) <= 1e-4 * want,
           "sumsq n=%zu: %.9g vs %.17g (double), rel err %.3g (tol 1e-4)", n, r[0], want,
           fabs(r[0] - want) / want);
    tap_ok(!memcmp(&r[0], &r[1], sizeof(float)), "sumsq n=%zu: run twice, bit-identical (%a, %a)",
           n, r[0], r[1]);
    tap_ok(fabs(r[2] - (a0 + want)) <= 1e-4 * (a0 + want),
           "sumsq n=%zu: adds into *acc: %.9g vs %.9g + %.9g", n, r[2], a0, want);
    scope_end("sumsq");
}

typedef struct { size_t n; int t, bf16; } adamw_cfg;
static int adamw_checks(const adamw_cfg *a) { return 3 + a->bf16; }

static void test_adamw(const adamw_cfg *a) {
    const size_t n = a->n;
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f;
    char tag[64];
    snprintf(tag, sizeof tag, "n=%zu t=%d%s", n, a->t, a->bf16 ? "" : " p_bf16 NULL");
    float *p = hf(n), *g = hf(n), *m = hf(n), *v = hf(n);
    fill_f32(p, n, -1, 1);
    for (size_t i = 0; i < n; i++) g[i] = uni(-1, 1) * powf(10.0f, uni(-3, 0));
    g[0] = 0.0f; /* at t = 1: decay only */
    fill_f32(m, n, -0.05, 0.05), fill_f32(v, n, 0, 1e-3);
    if (a->t == 1) memset(m, 0, n * sizeof *m), memset(v, 0, n * sizeof *v);
    float *rp = hcopy(p, n), *rm = hcopy(m, n), *rv = hcopy(v, n);
    float *mp = hf(n), *mm = hf(n), *mv = hf(n);
    cpu->adamw_update(rp, g, rm, rv, n, lr, b1, b2, eps, wd, gs, a->t);
    for (size_t i = 0; i < n; i++) { /* sizes of the terms of each result */
        float gg = g[i] * gs, kept = p[i] * (1.0f - lr * wd);
        mm[i] = fabsf(b1 * m[i]) + fabsf((1.0f - b1) * gg);
        mv[i] = b2 * v[i] + (1.0f - b2) * gg * gg;
        mp[i] = fabsf(kept) + fabsf(rp[i] - kept);
    }
    float *d_p = new_f32(p, n), *d_g = new_f32(g, n), *d_m = new_f32(m, n), *d_v = new_f32(v, n);
    tsr_bf16 *d_pb = a->bf16 ? d16(n) : NULL;
    if (d_pb) poison(d_pb, n * 2);
    tcu_adamw_update(d_p, d_pb, d_g, d_m, d_v, n, lr, b1, b2, eps, wd, gs, a->t, g_s);
    /* fp32 in another order (fma, lerp, beta^t in fp32): a few ulp; 2^-19 (32 ulp) of the size
     * of the terms */
    float *gp = get_f32(d_p, n);
    check_close(L("adamw_update %s: p", tag), gp, rp, n, 0, 0, mp, 0x1p-19);
    check_close(L("adamw_update %s: m", tag), get_f32(d_m, n), rm, n, 0, 0, mm, 0x1p-19);
    check_close(L("adamw_update %s: v", tag), get_f32(d_v, n), rv, n, 0, 0, mv, 0x1p-19);
    if (d_pb) check_exact16(L("adamw_update %s: p_bf16 == bf16(p)", tag), d_pb, gp, n);
    scope_end(tag);
}

/* tcu_adamw_update_segments over one store: 80 segments, 71 of them not empty (two launches: 64
 * and 7; empty ones are skipped, not counted), lengths 0 to 1000, starts on and off 16-byte
 * boundaries, gaps between some of them, two weight decays;
 * against one tcu_adamw_update per segment on a copy (the same bits), the CPU op per segment,
 * and the gaps left as they were */
#define ADAMW_SEG_CHECKS 3
static void test_adamw_segments(int t, int bf16) {
    enum { NSEG = 80 };
    const float lr = 2e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, gs = 0.7f;
    char tag[64];
    snprintf(tag, sizeof tag, "adamw_update_segments %d segments t=%d%s", NSEG, t,
             bf16 ? "" : " p_bf16 NULL");
    tcu_adamw_seg segs[NSEG];
    size_t n = 0;
    for (int k = 0; k < NSEG; k++) {
        static const size_t lens[] = {1000, 0, 1, 3, 5, 4, 257, 8, 31};
        n += (size_t)(k % 3 == 2) * (size_t)(1 + k % 5); /* a gap before some segments */
        segs[k] = (tcu_adamw_seg){n, lens[k % 9], k % 4 == 1 ? 0.0f : 0.1f};
        n += segs[k].n;
    }
    n += 3; /* and after the last one */
    int filled = 0;
    for (int k = 0; k < NSEG; k++) filled += segs[k].n > 0;
    if (filled <= 64) tap_diag("%s: only %d segments hold elements: one launch", tag, filled);
    float *p = hf(n), *g = hf(n), *m = hf(n), *v = hf(n);
    fill_f32(p, n, -1, 1), fill_f32(g, n, -1, 1), fill_f32(m, n, -0.05, 0.05);
    fill_f32(v, n, 0, 1e-3);
    if (t == 1) memset(m, 0, n * sizeof *m), memset(v, 0, n * sizeof *v);
    float *d_g = new_f32(g, n), *d[2][3];
    tsr_bf16 *d_pb[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++) { /* r = 0: the segments call; 1: one call per segment */
        d[r][0] = new_f32(p, n), d[r][1] = new_f32(m, n), d[r][2] = new_f32(v, n);
        if (bf16) d_pb[r] = d16(n), poison(d_pb[r], n * 2);
    }
    tcu_adamw_update_segments(segs, NSEG, d[0][0], d_pb[0], d_g, d[0][1], d[0][2], lr, b1, b2, eps,
                              gs, t, g_s);
    for (int k = 0; k < NSEG; k++) {
        const size_t at = segs[k].at;
        tcu_adamw_update(d[1][0] + at, bf16 ? d_pb[1] + at : NULL, d_g + at, d[1][1] + at,
                         d[1][2] + at, segs[k].n, lr, b1, b2, eps, segs[k].wd, gs, t, g_s);
    }
    size_t dif = 0;
    float *got[3];
    for (int j = 0; j < 3; j++) {
        got[j] = get_f32(d[0][j], n);
        dif += ndiff(got[j], get_f32(d[1][j], n), n, sizeof(float));
    }
    if (bf16) {
        uint16_t *a = h16(n), *b = h16(n);
        d2h(a, d_pb[0], n * 2), d2h(b, d_pb[1], n * 2);
        dif += ndiff(a, b, n, 2);
    }
    tap_ok(dif == 0, "%s: p, m, v%s bit-identical to one tcu_adamw_update per segment (%zu differ)",
           tag, bf16 ? ", p_bf16" : "", dif);
    /* the CPU op per segment; the gaps kept */
    float *rp = hcopy(p, n), *rm = hcopy(m, n), *rv = hcopy(v, n), *mp = hf(n);
    unsigned char *in_seg = calloc(n, 1);
    for (int k = 0; k < NSEG; k++) {
        const size_t at = segs[k].at;
        if (segs[k].n)
            cpu->adamw_update(rp + at, g + at, rm + at, rv + at, segs[k].n, lr, b1, b2, eps,
                              segs[k].wd, gs, t);
        memset(in_seg + at, 1, segs[k].n);
    }
    size_t moved = 0;
    uint16_t *pb = bf16 ? h16(n) : NULL; /* poisoned (0xffff) outside the segments */
    if (pb) d2h(pb, d_pb[0], n * 2);
    for (size_t i = 0; i < n; i++) {
        if (pb && !in_seg[i]) moved += pb[i] != 0xffffu;
        mp[i] = fabsf(p[i]) + fabsf(rp[i] - p[i]); /* sizes of p's terms */
        if (!in_seg[i])
            moved += memcmp(&got[0][i], &p[i], 4) || memcmp(&got[1][i], &m[i], 4) ||
                     memcmp(&got[2][i], &v[i], 4);
    }
    check_close(L("%s: p against the CPU op per segment", tag), got[0], rp, n, 0, 0, mp, 0x1p-19);
    tap_ok(moved == 0, "%s: elements outside every segment untouched (%zu changed)", tag, moved);
    free(in_seg);
    scope_end(tag);
}

/* ---- fp32 add, device-to-device copy ------------------------------------------------------ */

/* float bits on the device == want (n) bit for bit (NaN included) */
static int check_bits32(const char *what, const float *d, const float *want, size_t n) {
    float *got = get_f32(d, n);
    size_t bad = ndiff(got, want, n, sizeof(float)), first = 0;
    while (bad && !memcmp(&got[first], &want[first], sizeof(float))) first++;
    char fb[96] = "";
    if (bad)
        snprintf(fb, sizeof fb, " (first [%zu]: gpu %a, want %a)", first, got[first], want[first]);
    return tap_ok(bad == 0, "%s: %zu of %zu differ%s", what, bad, n, fb);
}

#define ADD_F32_CHECKS 3
/* dst += src: one fp32 add per element, so bit for bit the host's dst0[i] + src[i]. Magnitudes
 * spread over 1e-3 .. 1e3 so most adds round. n == 0: buffers of 16 left as they are (and NULL
 * pointers accepted). The aliased call (dst == src: 2 dst) runs on a stream of its own: the op
 * may run on any stream. */
static void test_add_f32(size_t n) {
    const size_t m = n ? n : 16;
    float *x = hf(m), *y = hf(m), *want = hf(m);
    for (size_t i = 0; i < m; i++) {
        x[i] = uni(-1, 1) * powf(10.0f, uni(-3, 3));
        y[i] = uni(-1, 1) * powf(10.0f, uni(-3, 3));
    }
    if (m > 2) x[0] = 1.0f, y[0] = 0x1p-24f, x[m - 1] = -3.0f, y[m - 1] = 3.0f; /* a tie; exact 0 */
    float *d_x = new_f32(x, m), *d_y = new_f32(y, m);
    tcu_add_f32(d_x, d_y, n, g_s);
    if (n == 0) tcu_add_f32(NULL, NULL, 0, g_s);
    for (size_t i = 0; i < m; i++) {
        volatile float sum = x[i] + y[i]; /* one fp32 rounding */
        want[i] = i < n ? sum : x[i];
    }
    check_bits32(n ? L("add_f32 n=%zu: dst == dst0 + src (fp32) bit for bit", n)
                   : "add_f32 n=0: dst left as it was (and NULL pointers accepted)",
                 d_x, want, m);
    check_bits32(L("add_f32 n=%zu: src unchanged", n), d_y, y, m);
    tcu_stream s2 = tcu_stream_create();
    tcu_add_f32(d_y, d_y, n, s2);
    tcu_sync(s2);
    tcu_stream_destroy(s2);
    for (size_t i = 0; i < m; i++) want[i] = i < n ? y[i] + y[i] : y[i];
    check_bits32(L("add_f32 n=%zu: dst == src (aliased, on another stream): %s", n,
                   n ? "dst == 2 dst0" : "left as it was"),
                 d_y, want, m);
    scope_end("add_f32");
}

typedef struct { size_t bytes, dst_off, src_off; } d2d_cfg;
#define D2D_CHECKS 3
/* random bytes from src + src_off into a poisoned dst at dst_off (byte offsets: any alignment),
 * stream-ordered before the read-back on the same stream */
static void test_memcpy_d2d(const d2d_cfg *c) {
    const size_t tail = 77, nd = c->dst_off + c->bytes + tail, ns = c->src_off + c->bytes + 5;
    unsigned char *src = halloc(ns), *got = halloc(nd);
    for (size_t i = 0; i < ns; i++) src[i] = (unsigned char)(rng_next() >> 56);
    unsigned char *d_src = dalloc(ns), *d_dst = dalloc(nd);
    h2d(d_src, src, ns);
    poison(d_dst, nd);
    tcu_memcpy_d2d(d_dst + c->dst_off, d_src + c->src_off, c->bytes, g_s);
    d2h(got, d_dst, nd);
    size_t out = 0;
    for (size_t i = 0; i < nd; i++)
        if (i < c->dst_off || i >= c->dst_off + c->bytes) out += got[i] != 0xff;
    tap_ok(!memcmp(got + c->dst_off, src + c->src_off, c->bytes),
           "memcpy_d2d %zu bytes (dst +%zu, src +%zu): the copied bytes == src (%zu differ)",
           c->bytes, c->dst_off, c->src_off,
           ndiff(got + c->dst_off, src + c->src_off, c->bytes, 1));
    tap_ok(out == 0, "memcpy_d2d %zu bytes (dst +%zu, src +%zu): the %zu bytes of dst outside the "
           "range untouched (%zu changed)", c->bytes, c->dst_off, c->src_off, nd - c->bytes, out);
    unsigned char *src_after = halloc(ns);
    d2h(src_after, d_src, ns);
    tap_ok(!memcmp(src_after, src, ns), "memcpy_d2d %zu bytes: src unchanged", c->bytes);
    scope_end("memcpy_d2d");
}

/* ---- frozen parameters: NULL weight gradients ---------------------------------------------
 * Every weight-gradient output of a backward op may be NULL (a frozen parameter, cuda_ops.h). Each
 * case runs the op with its gradients, then with some of them NULL: the input gradient is checked
 * against the CPU oracle given the same NULLs, and bit for bit against the op's own run with the
 * gradients (the ops are deterministic), as are the gradients still asked for. */

/* the n floats got and want have the same bits */
static int check_same(const char *what, const float *got, const float *want, size_t n) {
    size_t dif = ndiff(got, want, n, 4);
    return tap_ok(dif == 0, "%s: %zu of %zu differ from the run with every gradient", what, dif,
                  n);
}

/* a (na) then b (nb) in a new host array */
static float *cat2(const float *a, size_t na, const float *b, size_t nb) {
    float *c = hf(na + nb);
    memcpy(c, a, na * sizeof *c);
    memcpy(c + na, b, nb * sizeof *c);
    return c;
}

/* wpe: dwte NULL (tokens NULL too: unread), then dwpe close to the CPU's and the bits of the run
 * beside dwte; then (any cfg) both NULL: returns, dout untouched */
static int enc_frozen_checks(const enc_cfg *e) { return e->wpe ? 3 : 1; }

static void test_encoder_frozen(const enc_cfg *e) {
    const int B = e->B, T = e->T, C = e->C, Tmax = T + 3;
    const size_t N = (size_t)B * T, no = N * C, nwte = (size_t)e->Vp * C, nwpe = (size_t)Tmax * C;
    char tag[128];
    snprintf(tag, sizeof tag, "encoder_backward B=%d T=%d C=%d %s, frozen", B, T, C,
             !e->wpe ? "no wpe" : e->pos ? "wpe at pos" : "wpe at t");
    int32_t *tok = hi32(N), *pos = hi32(N);
    for (size_t n = 0; n < N; n++) tok[n] = irand(e->tok_range), pos[n] = (int32_t)(n % T % 11);
    const int32_t *ps = e->pos ? pos : NULL;
    float *dout = hf(no), *g0w = hf(nwte), *g0p = hf(nwpe);
    fill_bf16(dout, no, -1, 1), fill_f32(g0w, nwte, -1, 1), fill_f32(g0p, nwpe, -1, 1);
    tsr_bf16 *d_dout = new_bf16(dout, no);
    int32_t *d_tok = new_i32(tok, N), *d_pos = e->pos ? new_i32(pos, N) : NULL;
    if (e->wpe) {
        float *rp = hcopy(g0p, nwpe), *mp = habs(g0p, nwpe);
        cpu->encoder_backward(NULL, rp, dout, NULL, ps, B, T, C);
        cpu->encoder_backward(NULL, mp, habs(dout, no), NULL, ps, B, T, C);
        float *d_dw = new_f32(g0w, nwte), *d_dp = new_f32(g0p, nwpe);
        tcu_encoder_backward(d_dw, d_dp, d_dout, d_tok, tok, d_pos, B, T, C, g_s);
        float *full = get_f32(d_dp, nwpe);
        put_f32(d_dp, g0p, nwpe);
        tcu_encoder_backward(NULL, d_dp, d_dout, NULL, NULL, d_pos, B, T, C, g_s);
        float *got = get_f32(d_dp, nwpe);
        check_close(L("%s dwte NULL: dwpe", tag), got, rp, nwpe, 0, 0, mp, MTOL_SUM);
        check_same(L("%s dwte NULL: dwpe", tag), got, full, nwpe);
    }
    tcu_encoder_backward(NULL, NULL, d_dout, NULL, NULL, d_pos, B, T, C, g_s);
    tcu_sync(g_s);
    check_exact16(L("%s dwte, dwpe NULL: returns, dout untouched", tag), d_dout, dout, no);
    scope_end(tag);
}

/* every gradient NULL: dinp close to the CPU's and the bits of the run with them; with a bias,
 * dw NULL alone (dinp, db the same bits) and db NULL alone (dinp, dw) */
static int ln_frozen_checks(const ln_cfg *l) { return 2 + 2 * l->bias; }

static void test_layernorm_frozen(const ln_cfg *l) {
    const int N = l->N, C = l->C;
    const size_t n = (size_t)N * C;
    char tag[96];
    snprintf(tag, sizeof tag, "layernorm_backward N=%d C=%d %s, frozen", N, C,
             l->bias ? "bias" : "no bias");
    float *x = hf(n), *w = hf(C), *b = hf(C), *out = hf(n), *mean = hf(N), *rstd = hf(N);
    float *dout = hf(n), *g0i = hf(n), *g0w = hf(C), *g0b = hf(C);
    fill_bf16(x, n, l->offset - 2, l->offset + 2), fill_bf16(w, C, 0.5, 1.5);
    fill_bf16(b, C, -1, 1), fill_bf16(dout, n, -1, 1), fill_bf16(g0i, n, -1, 1);
    fill_f32(g0w, C, -1, 1), fill_f32(g0b, C, -1, 1);
    cpu->layernorm_forward(out, mean, rstd, x, w, l->bias ? b : NULL, N, C);
    float *ri = hcopy(g0i, n);
    cpu->layernorm_backward(ri, NULL, NULL, dout, x, w, mean, rstd, N, C);
    tsr_bf16 *d_x = new_bf16(x, n), *d_w = new_bf16(w, C), *d_dout = new_bf16(dout, n);
    tsr_bf16 *d_gi = new_bf16(g0i, n);
    float *d_mn = new_f32(mean, N), *d_rs = new_f32(rstd, N);
    float *d_gw = new_f32(g0w, C), *d_gb = l->bias ? new_f32(g0b, C) : NULL;
    tcu_layernorm_backward(d_gi, d_gw, d_gb, d_dout, d_x, d_w, d_mn, d_rs, N, C, g_s);
    float *fi = get_bf16(d_gi, n), *fw = get_f32(d_gw, C), *fb = d_gb ? get_f32(d_gb, C) : NULL;
    put_bf16(d_gi, g0i, n);
    tcu_layernorm_backward(d_gi, NULL, NULL, d_dout, d_x, d_w, d_mn, d_rs, N, C, g_s);
    float *gi = get_bf16(d_gi, n);
    check_close(L("%s dw, db NULL: dinp", tag), gi, ri, n, ATOL_LN, RTOL_BF16,
                absdiff(ri, g0i, n, 1.0f, NULL, 0), U_BF16);
    check_same(L("%s dw, db NULL: dinp", tag), gi, fi, n);
    if (l->bias) {
        put_bf16(d_gi, g0i, n), put_f32(d_gb, g0b, C);
        tcu_layernorm_backward(d_gi, NULL, d_gb, d_dout, d_x, d_w, d_mn, d_rs, N, C, g_s);
        check_same(L("%s dw NULL: dinp and db", tag),
                   cat2(get_bf16(d_gi, n), n, get_f32(d_gb, C), C), cat2(fi, n, fb, C), n + C);
        put_bf16(d_gi, g0i, n), put_f32(d_gw, g0w, C);
        tcu_layernorm_backward(d_gi, d_gw, NULL, d_dout, d_x, d_w, d_mn, d_rs, N, C, g_s);
        check_same(L("%s db NULL: dinp and dw", tag),
                   cat2(get_bf16(d_gi, n), n, get_f32(d_gw, C), C), cat2(fi, n, fw, C), n + C);
    }
    scope_end(tag);
}

/* dw NULL: dinp close to the CPU's and the bits of the run with dw */
#define RMS_FROZEN_CHECKS 2

static void test_rmsnorm_frozen(const rms_cfg *r) {
    const int N = r->N, C = r->C;
    const size_t n = (size_t)N * C;
    char tag[96];
    snprintf(tag, sizeof tag, "rmsnorm_backward N=%d C=%d, frozen", N, C);
    float *x = hf(n), *w = hf(C), *out = hf(n), *rstd = hf(N), *dout = hf(n), *g0i = hf(n);
    float *g0w = hf(C);
    fill_bf16(x, n, r->offset - 2, r->offset + 2), fill_bf16(w, C, 0.5, 1.5);
    fill_bf16(dout, n, -1, 1), fill_bf16(g0i, n, -1, 1), fill_f32(g0w, C, -1, 1);
    cpu->rmsnorm_forward(out, rstd, x, w, N, C, RMS_EPS);
    float *ri = hcopy(g0i, n);
    cpu->rmsnorm_backward(ri, NULL, dout, x, w, rstd, N, C);
    tsr_bf16 *d_x = new_bf16(x, n), *d_w = new_bf16(w, C), *d_dout = new_bf16(dout, n);
    tsr_bf16 *d_gi = new_bf16(g0i, n);
    float *d_rs = new_f32(rstd, N), *d_gw = new_f32(g0w, C);
    tcu_rmsnorm_backward(d_gi, d_gw, d_dout, d_x, d_w, d_rs, N, C, g_s);
    float *fi = get_bf16(d_gi, n);
    put_bf16(d_gi, g0i, n);
    tcu_rmsnorm_backward(d_gi, NULL, d_dout, d_x, d_w, d_rs, N, C, g_s);
    float *gi = get_bf16(d_gi, n);
    check_close(L("%s dw NULL: dinp", tag), gi, ri, n, ATOL_LN, RTOL_BF16,
                absdiff(ri, g0i, n, 1.0f, NULL, 0), U_BF16);
    check_same(L("%s dw NULL: dinp", tag), gi, fi, n);
    scope_end(tag);
}

/* dqw, dkw NULL: dinp close to the CPU's and the bits of the run with them; dqw NULL alone
 * (dinp, dkw the same bits); dkw NULL alone (dinp, dqw) */
#define QKN_FROZEN_CHECKS 4

static void test_qknorm_frozen(const qkn_cfg *q) {
    const int N = q->N, NH = q->NH, KVH = q->KVH, hs = q->hs;
    const size_t ld = (size_t)(NH + 2 * KVH) * hs, n = (size_t)N * ld, nr = (size_t)N * (NH + KVH);
    char tag[96];
    snprintf(tag, sizeof tag, "qknorm_backward N=%d NH=%d KVH=%d hs=%d, frozen", N, NH, KVH, hs);
    float *x = hf(n), *qw = hf(hs), *kw = hf(hs), *out = hf(n), *rstd = hf(nr), *dout = hf(n);
    float *g0i = hf(n), *g0q = hf(hs), *g0k = hf(hs);
    fill_bf16(x, n, -2, 2), fill_bf16(qw, hs, 0.5, 1.5), fill_bf16(kw, hs, 0.5, 1.5);
    fill_bf16(dout, n, -1, 1), fill_bf16(g0i, n, -1, 1);
    fill_f32(g0q, hs, -1, 1), fill_f32(g0k, hs, -1, 1);
    cpu->qknorm_forward(out, rstd, x, qw, kw, N, NH, KVH, hs, RMS_EPS);
    float *ri = hcopy(g0i, n);
    cpu->qknorm_backward(ri, NULL, NULL, dout, x, qw, kw, rstd, N, NH, KVH, hs);
    tsr_bf16 *d_x = new_bf16(x, n), *d_qw = new_bf16(qw, hs), *d_kw = new_bf16(kw, hs);
    tsr_bf16 *d_dout = new_bf16(dout, n), *d_gi = new_bf16(g0i, n);
    float *d_rs = new_f32(rstd, nr), *d_gq = new_f32(g0q, hs), *d_gk = new_f32(g0k, hs);
    tcu_qknorm_backward(d_gi, d_gq, d_gk, d_dout, d_x, d_qw, d_kw, d_rs, N, NH, KVH, hs, g_s);
    float *fi = get_bf16(d_gi, n), *fq = get_f32(d_gq, hs), *fk = get_f32(d_gk, hs);
    put_bf16(d_gi, g0i, n);
    tcu_qknorm_backward(d_gi, NULL, NULL, d_dout, d_x, d_qw, d_kw, d_rs, N, NH, KVH, hs, g_s);
    float *gi = get_bf16(d_gi, n);
    check_close(L("%s dqw, dkw NULL: dinp", tag), gi, ri, n, ATOL_LN, RTOL_BF16,
                absdiff(ri, g0i, n, 1.0f, NULL, 0), U_BF16);
    check_same(L("%s dqw, dkw NULL: dinp", tag), gi, fi, n);
    put_bf16(d_gi, g0i, n), put_f32(d_gk, g0k, hs);
    tcu_qknorm_backward(d_gi, NULL, d_gk, d_dout, d_x, d_qw, d_kw, d_rs, N, NH, KVH, hs, g_s);
    check_same(L("%s dqw NULL: dinp and dkw", tag),
               cat2(get_bf16(d_gi, n), n, get_f32(d_gk, hs), hs), cat2(fi, n, fk, hs), n + hs);
    put_bf16(d_gi, g0i, n), put_f32(d_gq, g0q, hs);
    tcu_qknorm_backward(d_gi, d_gq, NULL, d_dout, d_x, d_qw, d_kw, d_rs, N, NH, KVH, hs, g_s);
    check_same(L("%s dkw NULL: dinp and dqw", tag),
               cat2(get_bf16(d_gi, n), n, get_f32(d_gq, hs), hs), cat2(fi, n, fq, hs), n + hs);
    scope_end(tag);
}

/* dw, dbias NULL (a frozen linear): dinp close to the CPU's and the bits of the run with them;
 * dw NULL alone (dinp, dbias the same bits); dbias NULL alone (dinp, dw) */
typedef struct { int N, IC, OC; } mm_frozen_cfg;
#define MM_FROZEN_CHECKS 4

static void test_matmul_frozen(const mm_frozen_cfg *m) {
    const int N = m->N, IC = m->IC, OC = m->OC;
    const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    char tag[96];
    snprintf(tag, sizeof tag, "matmul_backward N=%d IC=%d OC=%d, frozen", N, IC, OC);
    float *x, *w, *bias, *dout = hf(no), *g0i = hf(ni), *g0w = hf(nw), *g0b = hf(OC);
    mm_inputs(&x, &w, &bias, N, IC, OC);
    fill_bf16(dout, no, -1, 1), fill_bf16(g0i, ni, -1, 1);
    fill_f32(g0w, nw, -1, 1), fill_f32(g0b, OC, -1, 1);
    float *ri = hcopy(g0i, ni), *mi = habs(g0i, ni);
    cpu->matmul_backward(ri, NULL, NULL, dout, x, w, N, IC, OC);
    cpu->matmul_backward(mi, NULL, NULL, habs(dout, no), habs(x, ni), habs(w, nw), N, IC, OC);
    tsr_bf16 *d_x = new_bf16(x, ni), *d_w = new_bf16(w, nw), *d_dout = new_bf16(dout, no);
    tsr_bf16 *d_gi = new_bf16(g0i, ni);
    float *d_gw = new_f32(g0w, nw), *d_gb = new_f32(g0b, OC);
    tcu_matmul_backward(d_gi, d_gw, d_gb, d_dout, d_x, d_w, N, IC, OC, TSR_GRAD_ADD, g_s);
    float *fi = get_bf16(d_gi, ni), *fw = get_f32(d_gw, nw), *fb = get_f32(d_gb, OC);
    put_bf16(d_gi, g0i, ni);
    tcu_matmul_backward(d_gi, NULL, NULL, d_dout, d_x, d_w, N, IC, OC, TSR_GRAD_ADD, g_s);
    float *gi = get_bf16(d_gi, ni);
    check_close(L("%s dw, dbias NULL: dinp", tag), gi, ri, ni, 0, RTOL_BF16,
                absdiff(ri, g0i, ni, (float)U_BF16, mi, (float)MTOL_SUM), 1.0);
    check_same(L("%s dw, dbias NULL: dinp", tag), gi, fi, ni);
    put_bf16(d_gi, g0i, ni), put_f32(d_gb, g0b, OC);
    tcu_matmul_backward(d_gi, NULL, d_gb, d_dout, d_x, d_w, N, IC, OC, TSR_GRAD_ADD, g_s);
    check_same(L("%s dw NULL: dinp and dbias", tag),
               cat2(get_bf16(d_gi, ni), ni, get_f32(d_gb, OC), OC), cat2(fi, ni, fb, OC),
               ni + OC);
    put_bf16(d_gi, g0i, ni), put_f32(d_gw, g0w, nw);
    tcu_matmul_backward(d_gi, d_gw, NULL, d_dout, d_x, d_w, N, IC, OC, TSR_GRAD_ADD, g_s);
    check_same(L("%s dbias NULL: dinp and dw", tag),
               cat2(get_bf16(d_gi, ni), ni, get_f32(d_gw, nw), nw), cat2(fi, ni, fw, nw), ni + nw);
    scope_end(tag);
}

/* the experts frozen (dw NULL, inp NULL: unread): dinp close to the CPU's and the bits of the run
 * with dw, on the CPU's routing of random logits */
#define MOE_FROZEN_CHECKS 2

static void test_moe_matmul_frozen(const moe_cfg *c) {
    const int N = c->N, E = c->E, K = c->K, C = c->C, F = c->F, NK = N * K;
    const size_t ne = (size_t)N * E, ni = (size_t)NK * C, no = (size_t)NK * F;
    const size_t nw = (size_t)E * F * C;
    char tag[96];
    snprintf(tag, sizeof tag, "moe_matmul_backward N=%d E=%d K=%d C=%d F=%d, frozen", N, E, K, C,
             F);
    if (!moe_cpu_ops()) {
        for (int i = 0; i < MOE_FROZEN_CHECKS; i++)
            tap_ok(0, "%s: the CPU MoE ops are missing from tsr_cpu_ops", tag);
        return;
    }
    float *lg = hf(ne), *probs = hf(ne), *lse = hf(N), *wts = hf(NK), *st = hf(2);
    int32_t *idx = hi32(NK), *offs = hi32(E + 1), *rows = hi32(NK), *slot = hi32(NK);
    for (size_t i = 0; i < ne; i++)
        lg[i] = c->starve && i % E == (size_t)E - 1 ? -8.0f : (float)(irand(129) - 64) / 16.0f;
    cpu->moe_route(probs, lse, idx, wts, offs, rows, slot, st, lg, N, E, K, c->norm);
    float *xg = hf(ni), *w = hf(nw), *dout = hf(no), *g0i = hf(ni), *g0w = hf(nw);
    fill_bf16(xg, ni, -1, 1), fill_bf16(w, nw, -1, 1), fill_bf16(dout, no, -1, 1);
    fill_bf16(g0i, ni, -1, 1), fill_f32(g0w, nw, -1, 1);
    float *ri = hcopy(g0i, ni), *mi = habs(g0i, ni);
    cpu->moe_matmul_backward(ri, NULL, dout, xg, w, offs, E, NK, C, F);
    cpu->moe_matmul_backward(mi, NULL, habs(dout, no), habs(xg, ni), habs(w, nw), offs, E, NK, C,
                             F);
    tsr_bf16 *d_xg = new_bf16(xg, ni), *d_w = new_bf16(w, nw), *d_dout = new_bf16(dout, no);
    tsr_bf16 *d_gi = new_bf16(g0i, ni);
    float *d_gw = new_f32(g0w, nw);
    int32_t *d_offs = new_i32(offs, E + 1);
    tcu_moe_matmul_backward(d_gi, d_gw, d_dout, d_xg, d_w, d_offs, E, NK, C, F, g_s);
    float *fi = get_bf16(d_gi, ni);
    put_bf16(d_gi, g0i, ni);
    tcu_moe_matmul_backward(d_gi, NULL, d_dout, NULL, d_w, d_offs, E, NK, C, F, g_s);
    float *gi = get_bf16(d_gi, ni);
    check_close(L("%s dw NULL: dinp", tag), gi, ri, ni, 0, RTOL_BF16,
                absdiff(ri, g0i, ni, (float)U_BF16, mi, (float)MTOL_SUM), 1.0);
    check_same(L("%s dw NULL: dinp", tag), gi, fi, ni);
    scope_end(tag);
}

/* ---- main --------------------------------------------------------------------------------- */

static const enc_cfg ENC[] = {
    {2, 7, 8, 50, 64, 1, 0, 50},       {4, 65, 24, 50, 64, 0, 0, 5},
    {2, 130, 72, 1000, 1024, 1, 1, 1000}, {1, 1, 768, 1000, 1024, 1, 0, 1000},
    {4, 130, 768, 1000, 1024, 1, 1, 7}, {2, 7, 12, 50, 64, 1, 1, 50}, /* C % 8 != 0: scalar */
};
static const ln_cfg LN[] = {
    {1, 8, 1, 0}, {7, 24, 0, 0}, {65, 72, 1, 4}, {257, 768, 0, 1}, {130, 768, 1, 0},
    {7, 20, 1, 0}, /* C % 8 != 0: the scalar path */
    {65, 6144, 1, 0}, /* backward: 48 KiB of dynamic shared memory + the kernel's static 256 B */
    /* the warp-per-row backward (C <= 1024): 500 groups of 10 rows (every warp busy) at 4 packs
     * a lane; 3 packs with the last one on some lanes only */
    {5000, 1024, 1, 2}, {300, 576, 0, 0},
};
static const mmf_cfg MMF[] = {
    {1, 24, 40, 1, -1},    {7, 72, 200, 0, -1},   {65, 24, 40, 0, -1},
    {257, 768, 3072, 1, -1}, {65, 72, 200, 1, TSR_GELU_TANH}, {7, 768, 3072, 1, TSR_GELU_EXACT},
    {257, 24, 40, 0, TSR_GELU_TANH}, {65, 3072, 768, 1, TSR_GELU_EXACT},
    {65, 24, 36, 1, TSR_GELU_TANH}, {7, 24, 36, 1, -1}, /* OC % 8 != 0: unfused GELU, fallbacks */
};
static const mmb_cfg MMB[] = {
    {1, 24, 40, 1, 1, 1}, {7, 72, 200, 1, 1, 1}, {65, 24, 40, 1, 1, 0}, {257, 768, 3072, 1, 1, 1},
    /* the bias gradient's row groups: OC % 8 != 0 (scalar columns, 65 groups); 500 groups of 10
     * rows (every warp of a block busy) over 4 column blocks, the last one partly outside OC */
    {257, 24, 37, 1, 1, 1}, {5000, 24, 776, 1, 1, 1},
};
/* long sums into few outputs, where the heuristic splits K: checked under the default scheme
 * and with no split-K (tcu_matmul_set_reduction, TSR_GEMM_REDUCTION: issue 25, item 4) */
static const mmf_cfg MMF_SPLIT[] = {{64, 8192, 64, 1, -1}};
static const mmb_cfg MMB_SPLIT[] = {{8192, 64, 64, 1, 1, 1}};
static const gelu_cfg GELU[] = {
    {18720, TSR_GELU_TANH}, {18720, TSR_GELU_EXACT},
    {789504, TSR_GELU_TANH}, {789504, TSR_GELU_EXACT},
};
static const size_t RESID[] = {18720, 789504};
static const att_cfg ATT[] = {
    {2, 65, 4, 4, 32, 0, 0}, {2, 65, 4, 4, 32, 1, 0}, {2, 65, 4, 4, 32, 0, 1},
    {2, 65, 4, 4, 32, 1, 1}, {1, 130, 2, 2, 64, 1, 1}, {2, 7, 3, 3, 128, 0, 0},
    {1, 1, 2, 2, 64, 0, 0},  {3, 130, 2, 2, 128, 0, 1}, {1, 257, 12, 12, 64, 1, 0},
    /* grouped-query (KVH = NH/2) and multi-query (KVH = 1) attention, hs 64 and 128 */
    {2, 130, 4, 2, 64, 0, 1}, {2, 97, 8, 4, 128, 1, 0}, {1, 130, 4, 1, 64, 1, 1},
    {2, 65, 6, 1, 128, 0, 0}, {3, 70, 6, 3, 64, 1, 1}, {1, 33, 4, 2, 32, 0, 0},
    /* T a multiple of the 64-row tiles (no partial tile), and hs 32 at T >= 128 (the dK/dV
     * kernel's unmasked-tile path); the third row one segment of 2200 (the segment scans'
     * rounds of 1024 positions: more than one) */
    {2, 128, 2, 2, 32, 0, 0}, {1, 192, 4, 2, 64, 1, 1}, {3, 2200, 1, 1, 32, 0, 1},
    /* documents that start exactly at a key block's first key: row 0's at 256 (a 128-key block
     * of the 32-row kernels, and a 64-key one), row 1's at 64 (64-key blocks only); the query
     * tile at 256 is the first of its document, so no lower key block reaches it */
    {2, 260, 2, 1, 64, 1, 1},
    /* hs 256 (Gemma 3; issue 67): its own tiles (32-key forward steps, dk/dv in two column
     * halves), GQA, documents, ALiBi; two query tiles and a partial one */
    {1, 150, 2, 1, 256, 1, 1},
};
/* ring attention's blocks (context parallelism; tcu_ring_forward / _backward): B, c (a chunk's
 * rows), NH, KVH, hs, alibi, doc. The query rows, the second chunk of a rank's local sequence
 * (whole-sequence positions 5c..6c), take three blocks: their own keys (diagonal), then two
 * earlier chunks' from another rank (c..2c and 2c..3c), merged by the log-sum-exp */
typedef struct { int B, c, NH, KVH, hs, alibi, doc; } ring_cfg;
#define RING_CHECKS 4
/* the chunk c: below, at and past a query tile (64 rows; keys' blocks start their queries at the
 * tile holding row c: 64 and 72, 100 with the tile's rows before c computed and unused) */
static const ring_cfg RING[] = {
    {2, 48, 4, 2, 64, 0, 0}, {1, 64, 4, 1, 64, 1, 1}, {2, 33, 2, 2, 32, 1, 0},
    {1, 40, 4, 4, 128, 0, 1}, {1, 100, 2, 1, 64, 1, 1}, {1, 72, 2, 2, 128, 0, 0},
    {1, 40, 2, 1, 256, 0, 1}, /* hs 256 (Gemma 3) */
};
static const rms_cfg RMS[] = {
    {1, 8, 0}, {7, 24, 1}, {65, 72, 0}, {257, 768, 3}, {130, 2048, 0},
    {7, 20, 0}, /* C % 8 != 0: the scalar path */
    {9, 12288, 0}, /* backward: 48 KiB of dynamic shared memory + the kernel's static part */
    {5000, 768, 1}, {300, 1024, 0}, /* the warp-per-row backward: every warp busy; 4 packs */
};
static const qkn_cfg QKN[] = {
    {7, 4, 2, 64}, {65, 8, 1, 128}, {33, 2, 2, 32}, {130, 16, 8, 64},
    {5, 3, 1, 20}, /* hs % 8 != 0: the scalar path */
};
static const rope_cfg ROPE[] = {
    {2, 65, 4, 2, 64, 0, 0}, {2, 65, 4, 2, 64, 1, 0}, {1, 33, 8, 1, 128, 0, 1000},
    {3, 17, 2, 2, 32, 1, 0}, {1, 9, 3, 1, 12, 0, 5}, /* hs/2 % 8 != 0: the scalar path */
};
static const swiglu_cfg SWIGLU[] = {{7, 24}, {65, 200}, {257, 1376}, {33, 20}};
/* N, E, K, C, F, norm, starve, base: Mixtral's 8/2; an expert without rows; E past a warp's 32
 * lanes (128) and many assignment chunks of 256; K = E; C % 8 != 0 (the scalar paths); one row */
static const moe_cfg MOE[] = {
    {7, 8, 2, 24, 40, 1, 0, 1},     {65, 8, 2, 72, 200, 0, 1, 0}, {130, 64, 6, 64, 48, 1, 0, 1},
    {257, 128, 8, 32, 16, 1, 1, 0}, {300, 4, 4, 20, 36, 1, 0, 0}, {1, 3, 1, 8, 8, 0, 0, 1},
    {1025, 16, 4, 136, 72, 1, 1, 1},
};
static const xent_cfg XENT[] = {
    {1, 50, 64, 5}, {65, 50, 64, 60}, {65, 1000, 1024, 5}, {7, 50257, 50304, 5},
    {65, 50, 60, 5}, /* Vp % 8 != 0: the scalar path */
};
/* argmax beyond the softmax shapes: the scalar path with many chunks per thread and many warps
 * (Vp not a multiple of 8), and the vector-eligible shape at an unaligned address (scale < 0) */
static const xent_cfg ARGMAX_MORE[] = {{7, 50257, 50260, 5.0f}, {65, 1000, 1024, -5.0f}};
static const size_t SUMSQ[] = {1, 1000, 1000003};
static const adamw_cfg ADAMW[] = {{7, 1, 1}, {100003, 10, 1}, {4099, 1, 0}};
/* 0; under, over and not a multiple of the 256-thread block; past 65536 blocks (grid-stride) */
static const size_t ADD_F32[] = {0, 1, 255, 257, 1000003, ((size_t)1 << 24) + 1001};
static const d2d_cfg D2D[] = {
    {0, 8, 0}, {1, 3, 0}, {7, 0, 5}, {4096 + 13, 256, 1}, {((size_t)1 << 22) + 5, 3, 256},
};
/* last: what cuda_ops.h does not spell out (elementwise n not a multiple of 8; matmul_backward
 * with dinp NULL), then the frozen-parameter cases (NULL weight gradients, newer than the rest):
 * a crash here loses no other check */
static const gelu_cfg GELU_ODD[] = {{1001, TSR_GELU_TANH}, {1001, TSR_GELU_EXACT}};
static const size_t RESID_ODD = 1001;
static const mmb_cfg MMB_NULL[] = {{65, 72, 200, 0, 1, 1}, {65, 72, 200, 1, 0, 1}};
/* frozen parameters (NULL weight gradients): vector and scalar paths (C, hs or OC % 8 != 0),
 * shared-memory accumulators, several row groups; a starved expert */
static const enc_cfg ENC_FZ[] = {
    {2, 130, 72, 1000, 1024, 1, 1, 1000}, {2, 7, 12, 50, 64, 1, 0, 50},
    {4, 65, 24, 50, 64, 0, 0, 5},
};
static const ln_cfg LN_FZ[] = {{65, 72, 1, 4}, {7, 20, 1, 0}, {257, 768, 0, 1}};
static const rms_cfg RMS_FZ[] = {{65, 72, 0}, {7, 20, 0}, {130, 2048, 0}};
static const qkn_cfg QKN_FZ[] = {{7, 4, 2, 64}, {5, 3, 1, 20}, {130, 16, 8, 64}};
static const mm_frozen_cfg MM_FZ[] = {{65, 72, 200}, {7, 24, 36}, {257, 768, 3072}};
/* matmul backward fused with the tanh GELU's (the MLP's output projection: IC = F, OC = C) */
static const mmdg_cfg MMDG[] = {{65, 200, 72}, {257, 3072, 768}, {7, 36, 24}};
static const moe_cfg MOE_FZ[] = {{65, 8, 2, 72, 200, 0, 1, 0}, {300, 4, 4, 20, 36, 1, 0, 0}};

/* LoRA: no dropout; dropout with the block inside a wider fused row (q, k, v); a frozen A or B;
 * R not a multiple of 8, N odd */
static const lora_cfg LORA[] = {
    {65, 72, 40, 8, 200, 48, 0.0f, 1, 1},   {130, 96, 64, 16, 64, 0, 0.25f, 1, 1},
    {7, 20, 12, 4, 36, 24, 0.1f, 0, 1},     {33, 40, 24, 3, 72, 24, 0.5f, 1, 0},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* TSR_GPU_OPS_QUICK=1: the first QUICK_CASES cases of each table only (device.sh runs the full set
 * under compute-sanitizer's memcheck and this reduced set under racecheck and synccheck, which
 * are slower by far) */
enum { QUICK_CASES = 2 };
static int quick;
#define NCASES(a) (quick && COUNT(a) > QUICK_CASES ? (size_t)QUICK_CASES : COUNT(a))

/* the attention cases: with 16 rows a warp (the default), then again with 32 where the head size
 * has that variant (hs <= 64; tcu_attention_set_warp_rows, issue 25 item 2) and T <= 1024 (the
 * one longer case is there for the segment scans, which the row setting does not change);
 * skipped, saying so, on a backend without it (kernels/cuda_emu: tcu_attention_warp_rows says
 * 16) */
static int att_cases_32(void) {
    int n = 0;
    for (size_t i = 0; i < NCASES(ATT); i++) n += ATT[i].hs <= 64;
    return n;
}
/* ... and again on wgmma (tcu_attention_set_wgmma, issue 25 item 2) where the head size has those
 * kernels (64, 128; the longest such case has T = 260): the same checks, the fused dq's skipped
 * (it runs the mma.sync kernels); skipped, saying so, where wgmma cannot run (a GPU other than
 * compute capability 9.0, a build without sm_90a code, kernels/cuda_emu) */
static int att_cases_wgmma(void) {
    int n = 0;
    for (size_t i = 0; i < NCASES(ATT); i++) n += ATT[i].hs == 64 || ATT[i].hs == 128;
    return n;
}
static void run_attention(void) {
    for (size_t i = 0; i < NCASES(ATT); i++) test_attention(&ATT[i]);
    tcu_attention_set_warp_rows(32);
    for (size_t i = 0; i < NCASES(ATT); i++) {
        if (ATT[i].hs > 64) continue;
        if (ATT[i].T > 1024) { /* the segment scans' rounds: the same code in both settings */
            for (int k = 0; k < ATT_CHECKS; k++)
                tap_skip(L("attention T=%d, 32 rows a warp", ATT[i].T),
                         "T > 1024 runs with 16 rows only (CI time)");
            continue;
        }
        if (tcu_attention_warp_rows(ATT[i].hs) == 32) {
            test_attention(&ATT[i]);
            continue;
        }
        for (int k = 0; k < ATT_CHECKS; k++)
            tap_skip(L("attention hs=%d, 32 rows a warp", ATT[i].hs),
                     "this backend has one attention kernel (tcu_attention_warp_rows: 16)");
    }
    tcu_attention_set_warp_rows(16);
    for (size_t i = 0; i < NCASES(ATT); i++) {
        const att_cfg *a = &ATT[i];
        if (a->hs != 64 && a->hs != 128) continue;
        if (!tcu_attention_wgmma_possible(a->hs)) {
            for (int k = 0; k < ATT_CHECKS; k++)
                tap_skip(L("attention T=%d hs=%d on wgmma", a->T, a->hs),
                         "no wgmma here (an sm_90 GPU with sm_90a code, or the SIMT emulator)");
            continue;
        }
        tcu_attention_set_wgmma(1);
        test_attention(a);
        tcu_attention_set_wgmma(0);
    }
}

/* The three blocks of a RING case (above) on the CPU op and the device op alike: the output and
 * log-sum-exp merged over them, then with that merged output (rounded to bf16, as a layer keeps
 * it) the gradients: dq summed over the blocks (rows QKV apart), dk, dv of each key chunk. bf16
 * P and dS (2u each) and each block's bf16 output and gradients before their fp32 sums (u): the
 * output within 4u of the largest |out|, lse within 1e-3, the gradients within 2% of their
 * largest; a wrong mask, offset or merge moves them by O(1). */
static void test_ring(const ring_cfg *r) {
    const int B = r->B, c = r->c, NH = r->NH, KVH = r->KVH, hs = r->hs, Tl = 2 * c, T = 6 * c;
    const int QKV = (NH + 2 * KVH) * hs, C = NH * hs, KVW = 2 * KVH * hs;
    char tag[160];
    snprintf(tag, sizeof tag, "ring blocks B=%d c=%d NH=%d KVH=%d hs=%d%s%s%s", B, c, NH, KVH, hs,
             r->alibi ? " alibi" : "", r->doc ? " document" : "",
             tcu_attention_wgmma(hs) ? " (wgmma)" : "");
    const size_t nq = (size_t)B * Tl * QKV, nkv = (size_t)B * Tl * KVW, no = (size_t)B * Tl * C;
    float *qkv = hf(nq), *kv = hf(nkv), *dout = hf(no), *sl = hf(NH);
    fill_bf16(qkv, nq, -2, 2), fill_bf16(kv, nkv, -2, 2), fill_bf16(dout, no, -1, 1);
    for (int h = 0; h < NH; h++) /* slopes the distances between chunks do not drown */
        sl[h] = r->alibi ? 0.5f / (float)((h + 1) * c) : 0.0f;
    int32_t *lo = hi32((size_t)B * T), *hi = hi32((size_t)B * T), *seq = hi32(T);
    for (int b = 0; b < B; b++) { /* documents across the chunks' edges (doc), else one */
        make_segments(seq, T, b);  /* and one from inside key chunk 1 into the query chunk 5 */
        for (int t = c + c / 2 + b; t < 5 * c + c / 2; t++) seq[t] = 99;
        for (int t = 0; t < T; t++) lo[b * T + t] = r->doc ? seg_lo(seq, t) : 0;
        for (int t = 0; t < T; t++) hi[b * T + t] = r->doc ? seg_hi(seq, t, T) : T;
    }
    tsr_bf16 *d_qkv = new_bf16(qkv, nq), *d_kv = new_bf16(kv, nkv), *d_g = new_bf16(dout, no);
    int32_t *d_lo = new_i32(lo, (size_t)B * T), *d_hi = new_i32(hi, (size_t)B * T);
    float *d_sl = r->alibi ? new_f32(sl, NH) : NULL;
    const size_t nsc = tcu_ring_scratch_bytes(B, Tl, NH, KVH, hs);
    void *d_sc = nsc ? dalloc(nsc) : NULL;
    if (d_sc) poison(d_sc, nsc); /* NaN: a row the blocks read and did not lay out shows */
    /* block k: queries = local chunk 1; keys = own chunk 1 (k 0), remote chunks 0, 1 (k 1, 2) */
    const int koff[3] = {5 * c, c, 2 * c};
    tsr_ring_block h[3], d[3];
    for (int k = 0; k < 3; k++) {
        h[k] = (tsr_ring_block){.B = B, .NH = NH, .KVH = KVH, .hs = hs, .Tq = c, .Tk = c,
                                .qoff = 5 * c, .koff = koff[k], .ldq = QKV, .qbs = Tl, .kbs = Tl,
                                .lo = r->doc ? lo : NULL, .hi = r->doc ? hi : NULL, .T = T,
                                .slopes = r->alibi ? sl : NULL};
        d[k] = h[k];
        d[k].lo = r->doc ? d_lo : NULL, d[k].hi = r->doc ? d_hi : NULL, d[k].slopes = d_sl;
        const size_t q0 = (size_t)c * QKV, k0 = (size_t)(k == 2 ? c : 0) * KVW;
        h[k].q = qkv + q0, d[k].q = d_qkv + q0;
        h[k].kv = k ? (const void *)(kv + k0) : (const void *)(qkv + q0 + C);
        d[k].kv = k ? (const void *)(d_kv + k0) : (const void *)(d_qkv + q0 + C);
        h[k].ldkv = d[k].ldkv = k ? KVW : QKV;
    }
    const size_t na = (size_t)B * Tl * C, nl = (size_t)B * NH * Tl;
    float *acc = hf(na), *lse = hf(nl), *d_acc = df32(na), *d_lse = df32(nl);
    memset(acc, 0, na * sizeof(float)), memset(lse, 0, nl * sizeof(float));
    poison(d_acc, na * sizeof(float)), poison(d_lse, nl * sizeof(float));
    for (int k = 0; k < 3; k++) { /* into the queries' rows, c.. of each sequence */
        cpu->ring_forward(acc + (size_t)c * C, lse + c, &h[k], k > 0);
        tcu_ring_forward(d_acc + (size_t)c * C, d_lse + c, &d[k], k > 0, d_sc, g_s);
    }
    float *ga = get_f32(d_acc, na), *gl = get_f32(d_lse, nl);
    float omax = 0, *ra = hf(na), *ea = hf(na), *rl = hf(nl), *el = hf(nl);
    size_t m = 0, ml = 0;
    for (size_t i = 0; i < na; i++)
        if ((i / C) % Tl >= (size_t)c) ra[m] = acc[i], ea[m++] = ga[i], omax = fmaxf(omax, fabsf(acc[i]));
    for (size_t i = 0; i < nl; i++)
        if (i % Tl >= (size_t)c) rl[ml] = lse[i], el[ml++] = gl[i];
    check_close(L("%s: out merged over 3 blocks", tag), ea, ra, m, 4 * U_BF16 * omax, 0, NULL, 0);
    check_close(L("%s: lse", tag), el, rl, ml, 1e-3, 1e-5, NULL, 0);
    /* the backward with the merged output as the layer keeps it (bf16), and the CPU's lse on both */
    float *out = hf(na);
    for (size_t i = 0; i < na; i++) out[i] = rbf16(acc[i]);
    tsr_bf16 *d_out = new_bf16(out, na);
    put_f32(d_lse, lse, nl);
    float *dq = hf(nq), *dkv = hf(nkv + (size_t)B * Tl * KVW), *d_dq = df32(nq);
    float *d_dkv = df32(nkv + (size_t)B * Tl * KVW); /* the remote kv's, then the own chunk's */
    memset(dq, 0, nq * sizeof(float)), memset(dkv, 0, (nkv + (size_t)B * Tl * KVW) * sizeof(float));
    tcu_zero(d_dq, nq * sizeof(float), g_s), tcu_zero(d_dkv, (nkv + nkv) * sizeof(float), g_s);
    for (int k = 0; k < 3; k++) {
        const size_t dk0 = k ? (size_t)(k == 2 ? c : 0) * KVW : nkv + (size_t)c * KVW;
        cpu->ring_backward(dq + (size_t)c * QKV, QKV, dkv + dk0, KVW, dout + (size_t)c * C,
                           out + (size_t)c * C, lse + c, &h[k]);
        tcu_ring_backward(d_dq + (size_t)c * QKV, QKV, d_dkv + dk0, KVW, d_g + (size_t)c * C,
                          d_out + (size_t)c * C, d_lse + c, &d[k], d_sc, g_s);
    }
    float *gq = get_f32(d_dq, nq), *gk = get_f32(d_dkv, 2 * nkv);
    float qmax = 0, kmax = 0;
    for (size_t i = 0; i < nq; i++) qmax = fmaxf(qmax, fabsf(dq[i]));
    for (size_t i = 0; i < 2 * nkv; i++) kmax = fmaxf(kmax, fabsf(dkv[i]));
    check_close(L("%s: dq summed over the blocks", tag), gq, dq, nq, 0.02 * qmax, 0.02, NULL, 0);
    check_close(L("%s: dk, dv of the 3 key chunks", tag), gk, dkv, 2 * nkv, 0.02 * kmax, 0.02,
                NULL, 0);
    scope_end(tag);
}

/* the RING cases, then again on wgmma where the head size has those kernels (64, 128), as the
 * attention cases; skipped, saying so, where wgmma cannot run */
static int ring_cases_wgmma(void) {
    int n = 0;
    for (size_t i = 0; i < NCASES(RING); i++) n += RING[i].hs == 64 || RING[i].hs == 128;
    return n;
}
static void run_ring(void) {
    for (size_t i = 0; i < NCASES(RING); i++) test_ring(&RING[i]);
    for (size_t i = 0; i < NCASES(RING); i++) {
        if (RING[i].hs != 64 && RING[i].hs != 128) continue;
        if (!tcu_attention_wgmma_possible(RING[i].hs)) {
            for (int k = 0; k < RING_CHECKS; k++)
                tap_skip(L("ring blocks hs=%d on wgmma", RING[i].hs),
                         "no wgmma here (an sm_90 GPU with sm_90a code, or the SIMT emulator)");
            continue;
        }
        tcu_attention_set_wgmma(1);
        test_ring(&RING[i]);
        tcu_attention_set_wgmma(0);
    }
}

/* The warp-per-row norm backwards on rows that are not 16-byte aligned (x, dout and dinp one bf16
 * past an aligned start: the scalar loads and stores), LayerNorm with db and RMSNorm, against the
 * same inputs aligned: the kernel maps elements to lanes alike in both, so the same bits; then
 * again with the rows held in registers (tcu_norm_set_hold). NORM_UNALIGNED_CHECKS checks;
 * skipped, saying so, on a backend whose norms are not those kernels (kernels/cuda_emu: the CPU
 * op either way, where the check could not fail). */
#define NORM_UNALIGNED_CHECKS 4
static void test_norm_unaligned(void) {
    const int N = 37, C = 200; /* C % 8 == 0: 25 packs of 8, lanes 25..31 without one */
    const size_t n = (size_t)N * C;
    const char *tag = "norm backward N=37 C=200, rows 2 bytes past 16-byte alignment";
    tcu_norm_set_hold(TCU_NORM_HOLD_ALL);
    const int real = tcu_norm_hold();
    tcu_norm_set_hold(0);
    if (!real) {
        for (int k = 0; k < NORM_UNALIGNED_CHECKS; k++)
            tap_skip(L("%s", tag), "this backend's norms are the CPU op (tcu_norm_hold: 0)");
        return;
    }
    float *x = hf(n), *dout = hf(n), *g0 = hf(n), *w = hf(C), *mean = hf(N), *rstd = hf(N);
    fill_bf16(x, n, -2, 2), fill_bf16(dout, n, -1, 1), fill_bf16(g0, n, -0.5, 0.5);
    fill_bf16(w, C, 0.5, 1.5);
    for (int r = 0; r < N; r++)
        mean[r] = 0.01f * (float)(r % 7) - 0.03f, rstd[r] = 0.5f + 0.05f * (float)(r % 11);
    float *d_mn = new_f32(mean, N), *d_rs = new_f32(rstd, N), *d_gw = df32(C), *d_gb = df32(C);
    tsr_bf16 *d_w = new_bf16(w, C);
    /* a: aligned buffers; u: the same values one element past an aligned start */
    tsr_bf16 *a_x = new_bf16(x, n), *a_g = new_bf16(dout, n), *a_i = d16(n);
    tsr_bf16 *u_x = d16(n + 1) + 1, *u_g = d16(n + 1) + 1, *u_i = d16(n + 1) + 1;
    put_bf16(u_x, x, n), put_bf16(u_g, dout, n);
    for (int rms = 0; rms < 2; rms++) {
        const char *op = rms ? "rmsnorm_backward" : "layernorm_backward";
        float *ref[3] = {NULL, NULL, NULL};
        for (int run = 0; run < 3; run++) { /* aligned, unaligned, unaligned held */
            tsr_bf16 *dx = run ? u_x : a_x, *dg = run ? u_g : a_g, *di = run ? u_i : a_i;
            put_bf16(di, g0, n);
            tcu_zero(d_gw, C * sizeof(float), g_s), tcu_zero(d_gb, C * sizeof(float), g_s);
            tcu_norm_set_hold(run == 2 ? TCU_NORM_HOLD_ALL : 0);
            if (rms) tcu_rmsnorm_backward(di, d_gw, dg, dx, d_w, d_rs, N, C, g_s);
            else tcu_layernorm_backward(di, d_gw, d_gb, dg, dx, d_w, d_mn, d_rs, N, C, g_s);
            tcu_norm_set_hold(0);
            float *gi = get_bf16(di, n), *gw = get_f32(d_gw, C), *gb = get_f32(d_gb, C);
            if (run == 0) {
                ref[0] = gi, ref[1] = gw, ref[2] = gb;
                continue;
            }
            size_t d = ndiff(gi, ref[0], n, 4) + ndiff(gw, ref[1], C, 4) + ndiff(gb, ref[2], C, 4);
            tap_ok(d == 0, "%s: %s%s: the aligned run's bits (%zu differ)", tag, op,
                   run == 2 ? ", rows held in registers" : "", d);
        }
    }
    scope_end(tag);
}

/* Built with TSR_GPU_OPS_SIMT (build/tests/test_gpu_ops_simt): the ops whose real kernels the SIMT
 * emulator runs on the CPU (kernels/cuda_simt/: attention, softmax + cross-entropy, argmax,
 * LayerNorm, RMSNorm, QK-norm, RoPE, SwiGLU, the mixture-of-experts ops, LoRA's adapter path; the
 * other ops of that build are kernels/cuda_emu's stand-ins, checked by test_gpu_ops_emu), then
 * the guard bytes. */
#ifdef TSR_GPU_OPS_SIMT
enum { simt_only = 1 };
#else
enum { simt_only = 0 };
#endif

/* ---- batched decoding (cuda_decode.cu) ------------------------------------------------------ */

/* slots: 0 = a chunk of slot 0 at p0.. (no row arrays), else rows of that many slots */
typedef struct { int n, slots, cap, NH, KVH, hs, alibi, p0, seg0; } dec_cfg;
#define DEC_CHECKS 3
static const dec_cfg DEC[] = {
    {3, 4, 40, 4, 2, 32, 1, 0, 0}, /* rows of 3 slots of 4, ALiBi, one with a segment */
    {4, 0, 24, 4, 4, 16, 0, 7, 2}, /* a chunk of 4 rows at positions 7..10, segment from 2 */
    {3, 4, 40, 2, 1, 256, 0, 0, 0}, /* hs 256 (Gemma 3), rows of 3 slots */
};

/* tcu_attention_decode vs the CPU's attention_decode(_rows) on the same bf16 values: the outputs
 * within bf16 rounding of fp32 sums, the cache stores exact, each row alone the same bits */
static void test_decode(const dec_cfg *c) {
    const int R = c->slots ? c->slots : 1, NH = c->NH, KVH = c->KVH, hs = c->hs, n = c->n;
    const size_t per = (size_t)KVH * hs * c->cap, QKV = (size_t)(NH + 2 * KVH) * hs;
    const size_t no = (size_t)n * NH * hs, nc = (size_t)R * per;
    char tag[96];
    snprintf(tag, sizeof tag, "attention_decode n=%d slots=%d cap=%d NH=%d KVH=%d hs=%d%s", n,
             c->slots, c->cap, NH, KVH, hs, c->alibi ? " alibi" : "");
    float *kt = hf(nc), *v = hf(nc), *qkv = hf((size_t)n * QKV), *slopes = hf(NH), *ref = hf(no);
    float *scr = hf(4 * (size_t)c->cap);
    fill_bf16(kt, nc, -1, 1), fill_bf16(v, nc, -1, 1), fill_bf16(qkv, (size_t)n * QKV, -1, 1);
    for (int h = 0; h < NH; h++) slopes[h] = exp2f(-8.0f * (float)(h + 1) / (float)NH);
    int32_t slot[8], pos[8], seg[8];
    for (int i = 0; i < n; i++) /* distinct slots, positions < cap - 1 */
        slot[i] = (i * 3 + 1) % R, pos[i] = c->slots ? 5 + 7 * i : c->p0 + i,
        seg[i] = c->slots ? (i == 1 ? 3 : 0) : c->seg0;
    tsr_bf16 *d_kt = new_bf16(kt, nc), *d_v = new_bf16(v, nc), *d_q = new_bf16(qkv, (size_t)n * QKV);
    float *d_sl = c->alibi ? new_f32(slopes, NH) : NULL;
    int32_t *d_slot = c->slots ? new_i32(slot, n) : NULL, *d_pos = c->slots ? new_i32(pos, n) : NULL;
    int32_t *d_seg = c->slots ? new_i32(seg, n) : NULL;
    tsr_bf16 *d_out = d16(no), *d_one = d16((size_t)NH * hs);
    tcu_attention_decode(d_out, d_kt, d_v, d_q, d_sl, d_slot, d_pos, d_seg, c->p0, c->seg0, n,
                         per, c->cap, NH, KVH, hs, g_s);
    if (c->slots)
        cpu->attention_decode_rows(ref, kt, v, qkv, c->alibi ? slopes : NULL, NULL, scr, 4, slot,
                                   pos, seg, n, per, c->cap, NH, KVH, hs);
    else
        cpu->attention_decode(ref, kt, v, qkv, NULL, NULL, scr, 4, c->p0, n, c->seg0, c->cap, NH,
                              KVH, hs);
    /* scores and outputs are fp32 sums of bf16 products (terms of magnitude <= 1): 2^-14 of
     * hs, then one rounding to bf16 */
    check_close(L("%s: out", tag), get_bf16(d_out, no), ref, no, 0x1p-14 * hs, RTOL_BF16, NULL, 0);
    size_t bad = ndiff(get_bf16(d_kt, nc), kt, nc, sizeof(float)) +
                 ndiff(get_bf16(d_v, nc), v, nc, sizeof(float));
    tap_ok(bad == 0, "%s: the rows' keys and values stored into their slots exactly (%zu "
           "elements differ)", tag, bad);
    size_t diff = 0;
    for (int i = 0; i < n && c->slots; i++) { /* row i alone */
        tcu_attention_decode(d_one, d_kt, d_v, d_q + (size_t)i * QKV, d_sl, d_slot + i, d_pos + i,
                             d_seg + i, 0, 0, 1, per, c->cap, NH, KVH, hs, g_s);
        diff += ndiff(get_bf16(d_one, (size_t)NH * hs), get_bf16(d_out + (size_t)i * NH * hs,
                      (size_t)NH * hs), (size_t)NH * hs, sizeof(float));
    }
    tap_ok(diff == 0, "%s: each row alone gives the same bits as beside the others (%zu differ)",
           tag, diff);
    scope_end(tag);
}

typedef struct { int N, IC, OC, bias; } mmr_cfg;
#define MMR_CHECKS 2
static const mmr_cfg MMR[] = {{5, 70, 45, 1}, {1, 64, 300, 0}, {9, 192, 128, 1}};

/* tcu_matmul_rows vs the CPU's matmul_rows: within bf16 rounding of fp32 sums; each row alone the
 * same bits */
static void test_matmul_rows(const mmr_cfg *m) {
    const int N = m->N, IC = m->IC, OC = m->OC;
    const size_t no = (size_t)N * OC;
    char tag[96];
    snprintf(tag, sizeof tag, "matmul_rows N=%d IC=%d OC=%d%s", N, IC, OC, m->bias ? " bias" : "");
    float *x, *w, *bias;
    mm_inputs(&x, &w, &bias, N, IC, OC);
    float *ref = hf(no), *mag = hf(no);
    cpu->matmul_rows(ref, x, w, m->bias ? bias : NULL, N, IC, OC);
    cpu->matmul_rows(mag, habs(x, (size_t)N * IC), habs(w, (size_t)OC * IC),
                     m->bias ? habs(bias, OC) : NULL, N, IC, OC);
    tsr_bf16 *d_x = new_bf16(x, (size_t)N * IC), *d_w = new_bf16(w, (size_t)OC * IC);
    tsr_bf16 *d_b = m->bias ? new_bf16(bias, OC) : NULL, *d_out = d16(no), *d_one = d16(OC);
    tcu_matmul_rows(d_out, d_x, d_w, d_b, N, IC, OC, g_s);
    check_close(L("%s: out", tag), get_bf16(d_out, no), ref, no, 0, RTOL_BF16, mag, MTOL_SUM);
    size_t diff = 0;
    for (int r = 0; r < N; r++) {
        tcu_matmul_rows(d_one, d_x + (size_t)r * IC, d_w, d_b, 1, IC, OC, g_s);
        diff += ndiff(get_bf16(d_one, OC), get_bf16(d_out + (size_t)r * OC, OC), OC, sizeof(float));
    }
    tap_ok(diff == 0, "%s: each row alone gives the same bits (%zu differ)", tag, diff);
    scope_end(tag);
}

/* ---- FP8 (tcu_fp8.h; issue 51) ------------------------------------------------------------ */

/* bias: 0 none, 1 a 16-byte aligned one (the BIAS epilogue), 2 one 2 bytes off (not 16-byte
 * aligned: tcu_fp8_gemm_plan leaves it out of the epilogue, a kernel adds it after the GEMM) */
typedef struct { int N, IC, OC, bias; } fp8_cfg;
#define FP8_CHECKS 7
static const fp8_cfg FP8[] = {{37, 64, 48, 1}, {128, 256, 96, 0}, {24, 32, 16, 2}};

/* U(-1,1) times 2^U(-12,0): after current scaling some land among E4M3's subnormals */
static void fill_fp8_input(float *x, size_t n, double a) {
    for (size_t i = 0; i < n; i++) x[i] = rbf16((float)(a * uni(-1, 1) * exp2(uni(-12, 0))));
}

/* the largest |x| as tcu_amax_bf16 defines it (x already bf16 values) */
static float host_amax(const float *x, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* |dequantised - x| <= max(2^-4 |x|, 2^-10 sinv): E4M3's half ulp in its normal range (3 mantissa
 * bits), half its subnormal step (2^-9) below, in x's units (sinv = 1 / scale) */
static double fp8_err(float x, float sinv) {
    const double r = 0x1p-4 * fabs((double)x), s = 0x1p-10 * (double)sinv;
    return r > s ? r : s;
}

/* The casts and the FP8 GEMM against the header's definitions and float64 references:
 *  - tcu_amax_bf16 == the host's largest |x|; tcu_fp8_quantize's codes and inverse scales ==
 *    tcu_fp8.h evaluated on the host, bit for bit (on a GPU: the device kernels against the host);
 *  - tcu_matmul_fp8 vs the fp64 product of the decoded codes times the inverse scales (+ bias):
 *    fp32 accumulation (MTOL_SUM of the sum of |terms|) and one bf16 rounding, the tight test of
 *    cuBLASLt's arithmetic against the definition;
 *  - vs the fp64 product of the unquantised inputs: within the quantisation's own bound,
 *    sum_k (ex |w| + |x| ew + ex ew) with e = fp8_err, plus the same GEMM tolerance;
 *  - tcu_matmul_forward_fp8 (amax, casts, GEMM) == those steps, bit for bit;
 *  - tcu_fp8_dequantize (model.activation_compression's read back) == tcu_fp8.h's
 *    tcu_fp8_dequantize_one rounded to bf16 on the host, bit for bit, and within E4M3's half
 *    step of the unquantised input;
 *  - a NaN in the input makes every output NaN (the scale's inverse is NaN: the loss shows it). */
static int g_sm; /* the device's compute capability (major * 10 + minor) */

/* tcu_fp8_dequantize of x's codes qx (d_qx, scale_inv d_sx on the device; sxi on the host): the
 * host definition's bits, and each value within E4M3's rounding of x (fp8_err) plus bf16's */
static void test_fp8_dequantize(const char *tag, const float *x, const unsigned char *qx,
                                const tsr_fp8 *d_qx, const float *d_sx, float sxi, size_t n) {
    tsr_bf16 *d_xd = d16(n);
    poison(d_xd, n * 2);
    tcu_fp8_dequantize(d_xd, d_qx, d_sx, n, TCU_FP8_E4M3, g_s);
    float *xd = get_bf16(d_xd, n);
    size_t bad = 0, far = 0;
    for (size_t i = 0; i < n; i++) {
        const float want = rbf16(tcu_fp8_dequantize_one(qx[i], sxi, TCU_FP8_E4M3));
        bad += memcmp(&xd[i], &want, sizeof want) != 0;
        far += fabs((double)xd[i] - x[i]) > fp8_err(x[i], sxi) + 0x1p-8 * fabs((double)x[i]);
    }
    tap_ok(bad == 0 && far == 0, "%s: tcu_fp8_dequantize == tcu_fp8.h's definition rounded to "
           "bf16, bit for bit (%zu differ), each within E4M3's step of x (%zu not)", tag, bad, far);
}

static void test_fp8(const fp8_cfg *c) {
    const int N = c->N, IC = c->IC, OC = c->OC;
    const size_t nx = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    char tag[96];
    snprintf(tag, sizeof tag, "fp8 N=%d IC=%d OC=%d%s", N, IC, OC,
             c->bias == 2 ? " bias (2 bytes off)" : c->bias ? " bias" : "");
    if (g_sm < 89) { /* cuBLASLt has no FP8 GEMM before Ada */
        for (int k = 0; k < FP8_CHECKS; k++)
            tap_skip(L("%s: check %d of %d", tag, k + 1, FP8_CHECKS),
                     L("sm_%d: cuBLASLt's FP8 GEMM needs compute capability 8.9", g_sm));
        return;
    }
    float *x = hf(nx), *w = hf(nw), *bias = hf(OC);
    fill_fp8_input(x, nx, 1.0), fill_fp8_input(w, nw, 3.0 / sqrt(IC));
    fill_bf16(bias, OC, -0.5, 0.5);
    float *bias_off = hf(OC + 1); /* bias 2: the vector one bf16 past the allocation's start */
    bias_off[0] = 0, memcpy(bias_off + 1, bias, (size_t)OC * sizeof *bias);
    tsr_bf16 *d_x = new_bf16(x, nx), *d_w = new_bf16(w, nw);
    tsr_bf16 *d_b = c->bias == 1 ? new_bf16(bias, OC) : c->bias == 2 ? new_bf16(bias_off, OC + 1) + 1 : NULL;
    /* amax x, amax w, scale_inv x, scale_inv w, each in a 16-byte slot (tcu_matmul_fp8's rule) */
    float *d_f = df32(16), *d_ax = d_f, *d_aw = d_f + 4, *d_sx = d_f + 8, *d_sw = d_f + 12;
    tsr_fp8 *d_qx = dalloc(nx), *d_qw = dalloc(nw);
    tsr_bf16 *d_out = d16(no), *d_out2 = d16(no);
    tcu_amax_bf16(d_ax, d_x, nx, g_s);
    tcu_amax_bf16(d_aw, d_w, nw, g_s);
    tcu_fp8_quantize(d_qx, d_sx, d_x, d_ax, nx, TCU_FP8_E4M3, g_s);
    tcu_fp8_quantize(d_qw, d_sw, d_w, d_aw, nw, TCU_FP8_E4M3, g_s);
    poison(d_out, no * 2);
    tcu_matmul_fp8(d_out, d_qx, d_sx, d_qw, d_sw, d_b, N, IC, OC, g_s);
    float *f16 = get_f32(d_f, 16), ax = host_amax(x, nx), aw = host_amax(w, nw);
    const float f[4] = {f16[0], f16[4], f16[8], f16[12]};
    tap_ok(f[0] == ax && f[1] == aw, "%s: tcu_amax_bf16 (%g, %g) == the largest |x|, |w| (%g, %g)",
           tag, f[0], f[1], ax, aw);
    unsigned char *qx = halloc(nx), *qw = halloc(nw);
    d2h(qx, d_qx, nx), d2h(qw, d_qw, nw);
    const float sx = tcu_fp8_scale(ax, TCU_FP8_E4M3), sw = tcu_fp8_scale(aw, TCU_FP8_E4M3);
    size_t bad = 0;
    for (size_t i = 0; i < nx; i++) bad += qx[i] != tcu_fp8_quantize_one(x[i], sx, TCU_FP8_E4M3);
    for (size_t i = 0; i < nw; i++) bad += qw[i] != tcu_fp8_quantize_one(w[i], sw, TCU_FP8_E4M3);
    const float sxi = tcu_fp8_scale_inv(ax, TCU_FP8_E4M3), swi = tcu_fp8_scale_inv(aw, TCU_FP8_E4M3);
    tap_ok(bad == 0 && f[2] == sxi && f[3] == swi, "%s: tcu_fp8_quantize's codes and inverse scales "
           "are tcu_fp8.h's, bit for bit (%zu codes differ; scale_inv %g %g, want %g %g)", tag, bad,
           f[2], f[3], sxi, swi);
    test_fp8_dequantize(tag, x, qx, d_qx, d_sx, sxi, nx);
    float *refq = hf(no), *magq = hf(no), *ref = hf(no), *bound = hf(no);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double q = 0, m = 0, r = 0, e = 0;
            for (int k = 0; k < IC; k++) {
                const size_t ix = (size_t)n * IC + k, iw = (size_t)o * IC + k;
                const double dx = tcu_fp8_decode(qx[ix], TCU_FP8_E4M3);
                const double dw = tcu_fp8_decode(qw[iw], TCU_FP8_E4M3);
                const double ex = fp8_err(x[ix], sxi), ew = fp8_err(w[iw], swi);
                q += dx * dw, m += fabs(dx * dw), r += (double)x[ix] * w[iw];
                e += ex * fabs(w[iw]) + fabs(x[ix]) * ew + ex * ew;
            }
            const double b = c->bias ? bias[o] : 0.0, s = (double)sxi * swi;
            const size_t at = (size_t)n * OC + o;
            refq[at] = (float)(q * s + b), magq[at] = (float)(m * s + fabs(b));
            ref[at] = (float)(r + b), bound[at] = (float)(e + MTOL_SUM * (m * s + fabs(b)));
        }
    float *out = get_bf16(d_out, no);
    /* bias 2: the product rounded to bf16 before the bias is added (a second rounding: 2^-9 of
     * |product| at most, under its sum of |terms|; 2^-8 of that allowed) */
    check_close(L("%s: the GEMM vs the fp64 product of the decoded codes", tag), out, refq, no, 0,
                RTOL_BF16, magq, c->bias == 2 ? 0x1p-8 : MTOL_SUM);
    check_close(L("%s: the GEMM vs the fp64 product of the unquantised inputs (bound: E4M3's "
                  "precision)", tag), out, ref, no, 0, RTOL_BF16, bound, 1.0);
    poison(d_out2, no * 2);
    tcu_matmul_forward_fp8(d_out2, NULL, d_x, d_w, d_b, N, IC, OC, TSR_GELU_TANH, g_s);
    tap_ok(ndiff(get_bf16(d_out2, no), out, no, sizeof(float)) == 0, "%s: tcu_matmul_forward_fp8 "
           "gives the bits of amax, casts and tcu_matmul_fp8 called one by one", tag);
    x[nx / 2] = NAN;
    put_bf16(d_x, x, nx);
    tcu_matmul_forward_fp8(d_out2, NULL, d_x, d_w, d_b, N, IC, OC, TSR_GELU_TANH, g_s);
    float *poisoned = get_bf16(d_out2, no);
    size_t finite = 0;
    for (size_t i = 0; i < no; i++) finite += isfinite(poisoned[i]) != 0;
    tap_ok(finite == 0, "%s: one NaN in the input makes every output NaN (%zu of %zu finite)", tag,
           finite, no);
    scope_end(tag);
}

/* tcu_fp8_gemm_check (src/base/tcu_fp8_gemm.h), host only: the plan tcu_matmul_fp8 makes for
 * aligned operands passes, and each plan that breaks one documented FP8 rule (docs/cuda.md "FP8",
 * the table) is refused naming that rule; the same function refuses it in the backend, before
 * cuBLASLt sees the call, and in the emulator. */
typedef enum {
    R_E5M2, R_COMPUTE, R_NN, R_CTYPE, R_BIASTYPE, R_K, R_LDD, R_ALIGN, R_BETA, R_INPLACE,
    R_BIASAL, R_SCALE, R_FAST, R_WS, R_WSAL, R_COUNT
} fp8_rule;
static const char *const fp8_rule_key[R_COUNT] = {
    "not both E5M2", "CUBLAS_COMPUTE_32F", "\"TN\"", "C of D's type", "vector must be bf16",
    "stored rows of A, B, C and D", "leading dimensions must be", "16-byte aligned (cublasLtMatmul",
    "beta must be 0", "in-place", "vector must be 16-byte aligned", "scale pointers",
    "fast accumulation", "at least the heuristic's limit", "256-byte aligned"};
#define FP8_RULE_CHECKS (R_COUNT + 3)

static void fp8_break(tcu_fp8_gemm *g, fp8_rule r, const unsigned char *base) {
    switch (r) {
    case R_E5M2: g->a_type = g->b_type = TCU_LT_E5M2; break;
    case R_COMPUTE: g->compute = TCU_LT_BF16; break;
    case R_NN: g->ta = 'N'; break;
    case R_CTYPE: g->c_type = TCU_LT_F32; break;
    case R_BIASTYPE: g->bias_type = TCU_LT_F32; break;
    case R_K: g->k = g->lda = g->ldb = 40; break;      /* IC = 40: 40 bytes of E4M3 */
    case R_LDD: g->ldd = g->ldc = g->m + 4; break;     /* 8 bytes more of bf16 */
    case R_ALIGN: g->a = base + 8; break;
    case R_BETA: g->beta = 1.0f; break;
    case R_INPLACE: g->ldc = g->m + 8; break;          /* C = D with another ld */
    case R_BIASAL: g->bias = base + 2; break;
    case R_SCALE: g->a_scale = (const float *)(const void *)(base + 4); break;
    case R_FAST: g->fast_accum = 1; break;
    case R_WS: g->ws_call = g->ws_heuristic / 2; break;
    case R_WSAL: g->workspace = base + 128; break;
    default: break;
    }
}

static void test_fp8_rules(void) {
    static _Alignas(256) unsigned char mem[1024];
    const float *sc = (const float *)(const void *)(mem + 256);
    tcu_fp8_gemm good, g;
    char desc[640];
    tcu_fp8_gemm_plan(&good, mem, mem, sc, mem, sc, mem, 37, 64, 48, mem, 1u << 25);
    const char *why = tcu_fp8_gemm_check(&good);
    tap_ok(!why && good.bias_epilogue && good.ta == 'T' && good.tb == 'N' && good.beta == 0.0f &&
           good.c == good.d && good.ws_call == good.ws_heuristic,
           "fp8 plan: tcu_matmul_fp8's plan passes every rule (TN, bias in the BIAS epilogue, C = D, "
           "beta 0, one workspace size): %s; %s", why ? why : "ok",
           tcu_fp8_gemm_describe(&good, desc, sizeof desc));
    tcu_fp8_gemm_plan(&g, mem, mem, sc, mem, sc, mem + 2, 37, 64, 48, mem, 1u << 25);
    tap_ok(!tcu_fp8_gemm_check(&g) && !g.bias_epilogue && !g.bias,
           "fp8 plan: a bias 2 bytes off 16-byte alignment is left out of the BIAS epilogue (added "
           "by a kernel after the GEMM)");
    for (int r = 0; r < R_COUNT; r++) {
        g = good;
        fp8_break(&g, (fp8_rule)r, mem);
        why = tcu_fp8_gemm_check(&g);
        tap_ok(why && strstr(why, fp8_rule_key[r]), "fp8 plan: broken (%s) is refused naming it: %s",
               fp8_rule_key[r], why ? why : "accepted");
    }
    /* the health checker's FP8 burn (healthcheck/gpu/hc_gpu_fp8.c): the same plan, fp32 C = D, no
     * bias; N = 8192 passes, N = 8200 (rows of 8200 bytes of E4M3: not a multiple of 16) not */
    tcu_fp8_gemm_plan_f32(&g, (float *)(void *)mem, mem, sc, mem, sc + 4, 8192, 8192, 8192, mem, 1u << 25);
    why = tcu_fp8_gemm_check(&g);
    tcu_fp8_gemm burn_bad;
    tcu_fp8_gemm_plan_f32(&burn_bad, (float *)(void *)mem, mem, sc, mem, sc + 4, 8200, 8200, 8200, mem, 1u << 25);
    const char *why_bad = tcu_fp8_gemm_check(&burn_bad);
    tap_ok(!why && g.c_type == TCU_LT_F32 && g.d_type == TCU_LT_F32 && !g.bias_epilogue && g.ta == 'T' &&
               why_bad && strstr(why_bad, fp8_rule_key[R_K]),
           "fp8 plan: the health checker's burn plan (fp32 C = D, no bias, N = 8192) passes every rule: %s; "
           "N = 8200 refused: %s", why ? why : "ok", why_bad ? why_bad : "accepted");
}

#include "gpu_ops_deltanet.c" /* the Gated DeltaNet core (issue 68) */
#include "gpu_ops_variants.c" /* issue 67/68's model variants (cuvar67): run_variants */
#include "gpu_ops_attnvar.c" /* issue 67's attention variants: attnvar_checks, run_attnvar */
#include "gpu_ops_cudnn.c"   /* cuDNN's fused attention (issue 66 item 1): run_cudnn */
#include "gpu_ops_mla.c"     /* MLA's decoding (gpu_mla.c, issue 84 item 2): run_mla */

static int plan_size_simt(void) {
    int ndn = deltanet_checks();
    int n = ((int)NCASES(ATT) + att_cases_32() + att_cases_wgmma()) * ATT_CHECKS +
            ((int)NCASES(RING) + ring_cases_wgmma()) * RING_CHECKS +
            (int)NCASES(XENT) * (XENT_CHECKS + 1) +
            (int)NCASES(ARGMAX_MORE) + 1 + ndn;
    for (size_t i = 0; i < NCASES(LN); i++) n += ln_checks(&LN[i]);
    for (size_t i = 0; i < NCASES(LN_FZ); i++) n += ln_frozen_checks(&LN_FZ[i]);
    n += (int)NCASES(RMS) * RMS_CHECKS + (int)NCASES(QKN) * QKN_CHECKS;
    n += (int)NCASES(RMS_FZ) * RMS_FROZEN_CHECKS + (int)NCASES(QKN_FZ) * QKN_FROZEN_CHECKS;
    n += NORM_UNALIGNED_CHECKS;
    n += (int)NCASES(ROPE) * ROPE_CHECKS + (int)NCASES(SWIGLU) * SWIGLU_CHECKS;
    n += (int)NCASES(MOE) * MOE_CHECKS + (int)NCASES(MOE_FZ) * MOE_FROZEN_CHECKS;
    for (size_t i = 0; i < NCASES(LORA); i++) n += lora_checks(&LORA[i]);
    n += (int)NCASES(DEC) * DEC_CHECKS + (int)NCASES(MMR) * MMR_CHECKS;
    n += attnvar_checks(); /* issue 67's attention variants (gpu_ops_attnvar.c) */
    n += mla_checks();     /* MLA's decoding (gpu_ops_mla.c) */
    return n;
}

static void run_decode(void) {
    for (size_t i = 0; i < NCASES(DEC); i++) test_decode(&DEC[i]);
    for (size_t i = 0; i < NCASES(MMR); i++) test_matmul_rows(&MMR[i]);
}

static void run_simt(void) {
    run_attention();
    run_attnvar();
    run_ring();
    for (size_t i = 0; i < NCASES(XENT); i++) test_xent(&XENT[i]);
    for (size_t i = 0; i < NCASES(XENT); i++) test_argmax(&XENT[i]);
    for (size_t i = 0; i < NCASES(ARGMAX_MORE); i++) test_argmax(&ARGMAX_MORE[i]);
    for (size_t i = 0; i < NCASES(LN); i++) test_layernorm(&LN[i]);
    for (size_t i = 0; i < NCASES(RMS); i++) test_rmsnorm(&RMS[i]);
    for (size_t i = 0; i < NCASES(QKN); i++) test_qknorm(&QKN[i]);
    for (size_t i = 0; i < NCASES(ROPE); i++) test_rope(&ROPE[i]);
    for (size_t i = 0; i < NCASES(SWIGLU); i++) test_swiglu(&SWIGLU[i]);
    for (size_t i = 0; i < NCASES(LN_FZ); i++) test_layernorm_frozen(&LN_FZ[i]);
    for (size_t i = 0; i < NCASES(RMS_FZ); i++) test_rmsnorm_frozen(&RMS_FZ[i]);
    test_norm_unaligned();
    for (size_t i = 0; i < NCASES(QKN_FZ); i++) test_qknorm_frozen(&QKN_FZ[i]);
    for (size_t i = 0; i < NCASES(MOE); i++) test_moe(&MOE[i]);
    for (size_t i = 0; i < NCASES(MOE_FZ); i++) test_moe_matmul_frozen(&MOE_FZ[i]);
    for (size_t i = 0; i < NCASES(LORA); i++) test_lora(&LORA[i]);
    run_decode();
    run_mla();
    run_deltanet();
    run_variants();
}

static int plan_size(void) {
    if (simt_only) return plan_size_simt();
    int n = 3 + 1 + 1 + deltanet_checks(); /* conversions; guard bytes; memory statistics; DeltaNet */
    for (size_t i = 0; i < NCASES(ENC); i++) n += enc_checks(&ENC[i]);
    for (size_t i = 0; i < NCASES(LN); i++) n += ln_checks(&LN[i]);
    for (size_t i = 0; i < NCASES(MMF); i++) n += mmf_checks(&MMF[i]);
    for (size_t i = 0; i < NCASES(MMB); i++) n += mmb_checks(&MMB[i]);
    for (size_t i = 0; i < NCASES(MMDG); i++) n += mmdg_checks(&MMDG[i]);
    for (size_t i = 0; i < NCASES(MMF_SPLIT); i++) n += 2 * mmf_checks(&MMF_SPLIT[i]);
    for (size_t i = 0; i < NCASES(MMB_SPLIT); i++) n += 2 * mmb_checks(&MMB_SPLIT[i]);
    n += 1; /* no split-K algorithm in use under TCU_REDUCTION_NONE */
    for (size_t i = 0; i < NCASES(MMB_NULL); i++) n += mmb_checks(&MMB_NULL[i]);
    for (size_t i = 0; i < NCASES(ENC_FZ); i++) n += enc_frozen_checks(&ENC_FZ[i]);
    for (size_t i = 0; i < NCASES(LN_FZ); i++) n += ln_frozen_checks(&LN_FZ[i]);
    n += (int)NCASES(RMS_FZ) * RMS_FROZEN_CHECKS + (int)NCASES(QKN_FZ) * QKN_FROZEN_CHECKS;
    n += NORM_UNALIGNED_CHECKS;
    n += (int)NCASES(MM_FZ) * MM_FROZEN_CHECKS + (int)NCASES(MOE_FZ) * MOE_FROZEN_CHECKS;
    for (size_t i = 0; i < NCASES(ADAMW); i++) n += adamw_checks(&ADAMW[i]);
    n += 2 * ADAMW_SEG_CHECKS;
    for (size_t i = 0; i < NCASES(LORA); i++) n += lora_checks(&LORA[i]);
    n += (int)(NCASES(GELU) + NCASES(GELU_ODD)) * GELU_CHECKS;
    n += (int)(NCASES(RESID) + 1) * RESIDUAL_CHECKS;
    n += ((int)NCASES(ATT) + att_cases_32() + att_cases_wgmma()) * ATT_CHECKS;
    n += ((int)NCASES(RING) + ring_cases_wgmma()) * RING_CHECKS;
    n += (int)NCASES(RMS) * RMS_CHECKS + (int)NCASES(QKN) * QKN_CHECKS;
    n += (int)NCASES(ROPE) * ROPE_CHECKS + (int)NCASES(SWIGLU) * SWIGLU_CHECKS;
    n += (int)NCASES(MOE) * MOE_CHECKS;
    n += (int)NCASES(XENT) * (XENT_CHECKS + 1) + (int)NCASES(ARGMAX_MORE); /* + argmax */
    n += (int)NCASES(SUMSQ) * SUMSQ_CHECKS;
    n += (int)NCASES(ADD_F32) * ADD_F32_CHECKS + (int)NCASES(D2D) * D2D_CHECKS;
    n += (int)NCASES(DEC) * DEC_CHECKS + (int)NCASES(MMR) * MMR_CHECKS;
    n += (int)NCASES(FP8) * FP8_CHECKS + FP8_RULE_CHECKS;
    n += attnvar_checks(); /* issue 67's attention variants (gpu_ops_attnvar.c) */
    n += cudnn_checks();   /* cuDNN's fused attention (gpu_ops_cudnn.c) */
    n += mla_checks();     /* MLA's decoding (gpu_ops_mla.c) */
    return n;
}

int main(void) {
    if (tcu_device_count() == 0) {
        printf("# SKIP no CUDA device (tcu_device_count() = 0): the GPU op tests need one; run "
               "make check-gpu on a GPU node\n");
        return 77;
    }
    const char *q = getenv("TSR_GPU_OPS_QUICK");
    if (q && *q && strcmp(q, "0") != 0 && strcmp(q, "1") != 0) {
        fprintf(stderr, "test_gpu_ops: TSR_GPU_OPS_QUICK='%s': expected 0 or 1\n", q);
        return 2;
    }
    quick = q && strcmp(q, "1") == 0;
    const char *env = getenv("TSR_TEST_SEED");
    uint64_t seed = env && *env ? strtoull(env, NULL, 0)
                                : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
    tap_diag("seed %llu (replay with TSR_TEST_SEED=%llu)", (unsigned long long)seed,
             (unsigned long long)seed);
    rng_state = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull; /* never 0 for xorshift */
    if (!rng_state) rng_state = 1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_ops_set_threads(ncpu < 1 ? 1 : ncpu > 16 ? 16 : (int)ncpu);

    tcu_init(0);
    tcu_norm_set_hold(0); /* the norm checks' reference: norm_hold_on */
    g_s = tcu_stream_create();
    char name[256] = "";
    int sm = 0;
    size_t mem_free = 0, mem_total = 0;
    tcu_device_info(name, sizeof name, &sm, &mem_free, &mem_total);
    g_sm = sm;
    tap_diag("device 0: %s, sm_%d, %.1f GiB (%.1f GiB free); CPU reference: %ld threads, %s",
             name, sm, mem_total / 1073741824.0, mem_free / 1073741824.0, ncpu,
             cpu_ops_blas_core());
    if (quick) tap_diag("TSR_GPU_OPS_QUICK=1: the first %d cases of each table", QUICK_CASES);
    tap_plan(plan_size() + variants_checks());
    if (simt_only) {
        run_simt();
        tap_ok(guards_broken == 0, "no kernel wrote into the %d guard bytes around its buffers "
               "(%zu of %zu buffers hit)", GUARD, guards_broken, guards_checked);
        tcu_stream_destroy(g_s);
        tcu_shutdown();
        return tap_done();
    }

    test_convert();
    for (size_t i = 0; i < NCASES(D2D); i++) test_memcpy_d2d(&D2D[i]);
    for (size_t i = 0; i < NCASES(ENC); i++) test_encoder(&ENC[i]);
    for (size_t i = 0; i < NCASES(LN); i++) test_layernorm(&LN[i]);
    for (size_t i = 0; i < NCASES(MMF); i++) test_matmul_fwd(&MMF[i]);
    for (size_t i = 0; i < NCASES(MMB); i++) test_matmul_bwd(&MMB[i]);
    for (size_t i = 0; i < NCASES(MMDG); i++) test_matmul_bwd_dgelu(&MMDG[i]);
    for (int r = 0; r < 2; r++) { /* the default, then no split-K (its algorithms chosen anew) */
        tcu_matmul_set_reduction(r ? TCU_REDUCTION_NONE : TCU_REDUCTION_COMPUTE);
        mm_scheme = r ? " no split-K" : "";
        for (size_t i = 0; i < NCASES(MMF_SPLIT); i++) test_matmul_fwd(&MMF_SPLIT[i]);
        for (size_t i = 0; i < NCASES(MMB_SPLIT); i++) test_matmul_bwd(&MMB_SPLIT[i]);
        /* what the heuristic picked (the measurement of issue 25 item 4 reads this table): under
         * the default it may split K or not; with no split-K allowed, no algorithm may */
        tcu_matmul_report(stdout);
        if (r)
            tap_ok(tcu_matmul_report(NULL) == 0,
                   "matmul: with no split-K allowed (TCU_REDUCTION_NONE), no algorithm in use "
                   "splits K (tcu_matmul_report: %d do)", tcu_matmul_report(NULL));
    }
    tcu_matmul_set_reduction(TCU_REDUCTION_COMPUTE), mm_scheme = "";
    for (size_t i = 0; i < NCASES(GELU); i++) test_gelu(&GELU[i]);
    for (size_t i = 0; i < NCASES(RESID); i++) test_residual(RESID[i]);
    run_attention();
    run_attnvar();
    run_ring();
    for (size_t i = 0; i < NCASES(RMS); i++) test_rmsnorm(&RMS[i]);
    for (size_t i = 0; i < NCASES(QKN); i++) test_qknorm(&QKN[i]);
    for (size_t i = 0; i < NCASES(ROPE); i++) test_rope(&ROPE[i]);
    for (size_t i = 0; i < NCASES(SWIGLU); i++) test_swiglu(&SWIGLU[i]);
    for (size_t i = 0; i < NCASES(MOE); i++) test_moe(&MOE[i]);
    for (size_t i = 0; i < NCASES(XENT); i++) test_xent(&XENT[i]);
    for (size_t i = 0; i < NCASES(XENT); i++) test_argmax(&XENT[i]);
    for (size_t i = 0; i < NCASES(ARGMAX_MORE); i++) test_argmax(&ARGMAX_MORE[i]);
    for (size_t i = 0; i < NCASES(SUMSQ); i++) test_sumsq(SUMSQ[i]);
    for (size_t i = 0; i < NCASES(ADAMW); i++) test_adamw(&ADAMW[i]);
    test_adamw_segments(1, 1);
    test_adamw_segments(7, 0);
    for (size_t i = 0; i < NCASES(ADD_F32); i++) test_add_f32(ADD_F32[i]);
    tap_diag("next: what cuda_ops.h does not spell out (odd n, matmul_backward dinp NULL)");
    for (size_t i = 0; i < NCASES(GELU_ODD); i++) test_gelu(&GELU_ODD[i]);
    test_residual(RESID_ODD);
    for (size_t i = 0; i < NCASES(MMB_NULL); i++) test_matmul_bwd(&MMB_NULL[i]);
    tap_diag("next: frozen parameters (every backward with NULL weight gradients)");
    for (size_t i = 0; i < NCASES(ENC_FZ); i++) test_encoder_frozen(&ENC_FZ[i]);
    for (size_t i = 0; i < NCASES(LN_FZ); i++) test_layernorm_frozen(&LN_FZ[i]);
    for (size_t i = 0; i < NCASES(RMS_FZ); i++) test_rmsnorm_frozen(&RMS_FZ[i]);
    test_norm_unaligned();
    for (size_t i = 0; i < NCASES(QKN_FZ); i++) test_qknorm_frozen(&QKN_FZ[i]);
    for (size_t i = 0; i < NCASES(MM_FZ); i++) test_matmul_frozen(&MM_FZ[i]);
    for (size_t i = 0; i < NCASES(MOE_FZ); i++) test_moe_matmul_frozen(&MOE_FZ[i]);
    tap_diag("next: LoRA's adapter path (dropout masks from the CPU's hash)");
    for (size_t i = 0; i < NCASES(LORA); i++) test_lora(&LORA[i]);
    tap_diag("next: batched decoding (the KV cache of slots, the batch-invariant product)");
    run_decode();
    run_mla();
    tap_diag("next: FP8 (the casts of tcu_fp8.h, cuBLASLt's FP8 GEMM)");
    test_fp8_rules();
    for (size_t i = 0; i < NCASES(FP8); i++) test_fp8(&FP8[i]);
    run_deltanet();
    run_variants();
    run_cudnn(); /* last: new, never run on a GPU yet (issue 66 item 1) */

    tap_ok(guards_broken == 0, "no op wrote into the %d guard bytes around its buffers (%zu of %zu "
           "buffers hit)", GUARD, guards_broken, guards_checked);
    /* tcu_mem_stats (metrics.jsonl's peak_mem_bytes): a block counts exactly while it lives and
     * raises the peak to at least the live bytes it made */
    size_t live0, peak0, live1, peak1, live2, peak2, big = ((size_t)3 << 20) + 1;
    tcu_mem_stats(&live0, &peak0);
    void *blk = tcu_malloc(big, "the memory statistics check");
    tcu_mem_stats(&live1, &peak1);
    tcu_free(blk);
    tcu_mem_stats(&live2, &peak2);
    tap_ok(live1 == live0 + big && live2 == live0 && peak1 >= live1 && peak2 == peak1 && peak0 <= peak1,
           "tcu_mem_stats: a %zu-byte block adds exactly its size while live (%zu -> %zu -> %zu "
           "bytes), the peak holds it (%zu -> %zu)", big, live0, live1, live2, peak0, peak2);
    tcu_stream_destroy(g_s);
    tcu_shutdown();
    tap_diag("device buffers: %zu allocated, %zu freed", dev_allocs, dev_frees);
    return tap_done();
}
