/* deltanet_dump.c — the Gated DeltaNet core of kernels/cpu/cpu_deltanet.c, or the layer around it
 * (src/model/deltanet_layer.c), on stdin's inputs, for the float64 reference of
 * tests/reference/test_deltanet.py (docs/deltanet.md).
 *
 * deltanet_dump (the core): stdin, native byte order: int32 B, T, HK, HV, dk, dv, chunk, has_seg; fp32 q, k (B,T,HK,dk),
 * v (B,T,HV,dv), g, beta (B,T,HV), state0 (B,HV,dk,dv), dout (B,T,HV,dv), dstate_out
 * (B,HV,dk,dv); with has_seg, int32 seq (B,T).
 * stdout, fp32: the chunked forward's out and final state, the recurrent form's out and final
 * state (from state0), then the chunked backward's dq, dk, dv, dg, dbeta, dstate0 for the loss
 * sum(out * dout) + sum(final state * dstate_out).
 * deltanet_dump layer: stdin int32 B, T, C, HK, HV, dk, dv, K, chunk, has_seg; fp32 x (B,T,C),
 * the parameters in dn_params' order (wqkv, wz, wb, wa, conv, dt_bias, a_log, normw, wo), dout
 * (B,T,C); with has_seg, int32 seq (B,T). stdout, fp32: out, the final state, dx, then the
 * parameters' gradients in the same order; then out and the final state again, computed as a
 * prefill of the first ceil(T/2) rows and then one row at a time with the cache carried (the
 * decoding path). The gated RMSNorm's eps is 1e-6 (HF's rms_norm_eps).
 * Exit 1 on short or bad input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "cpu/cpu_deltanet.h"
#include "model/deltanet_layer.h"

/* the fp32 backend the layer runs on (the decoder's on the CPU) */
static const tsr_backend *cpu_be(void) {
    static tsr_backend be;
    if (!be.name) be = tsr_fp32_backend(&tsr_cpu_ops);
    return &be;
}

static void *read_in(size_t n, size_t elem) {
    void *p = tsr_calloc(n ? n : 1, elem);
    if (fread(p, elem, n, stdin) != n) tsr_die(TSR_EXIT_USAGE, "deltanet_dump: short input");
    return p;
}

static void write_out(const float *p, size_t n) {
    if (fwrite(p, sizeof *p, n, stdout) != n) tsr_die(TSR_EXIT_INTERNAL, "deltanet_dump: write failed");
}

static int core_main(void) {
    int32_t hd[8];
    if (fread(hd, sizeof hd, 1, stdin) != 1) tsr_die(TSR_EXIT_USAGE, "deltanet_dump: no header");
    const tsr_dn_shape s = {hd[0], hd[1], hd[2], hd[3], hd[4], hd[5], hd[6]};
    if (s.B < 1 || s.T < 1 || s.HK < 1 || s.HV % s.HK || s.dk < 1 || s.dv < 1 || s.chunk < 1)
        tsr_die(TSR_EXIT_USAGE, "deltanet_dump: bad shape");
    const size_t N = (size_t)s.B * s.T, nq = N * s.HK * s.dk, nv = N * s.HV * s.dv,
                 ng = N * s.HV, ns = (size_t)s.B * s.HV * s.dk * s.dv;
    float *q = read_in(nq, 4), *k = read_in(nq, 4), *v = read_in(nv, 4), *g = read_in(ng, 4),
          *beta = read_in(ng, 4), *st0 = read_in(ns, 4), *dout = read_in(nv, 4),
          *dst = read_in(ns, 4);
    int32_t *seq = hd[7] ? read_in(N, 4) : NULL;
    float *out = tsr_calloc(nv, 4), *st = tsr_calloc(ns, 4), *outr = tsr_calloc(nv, 4),
          *str = tsr_calloc(ns, 4), *ck = tsr_calloc(cpu_deltanet_ckpt_floats(&s), 4);
    float *dq = tsr_calloc(nq, 4), *dk = tsr_calloc(nq, 4), *dv = tsr_calloc(nv, 4),
          *dg = tsr_calloc(ng, 4), *db = tsr_calloc(ng, 4), *dst0 = tsr_calloc(ns, 4);
    cpu_deltanet_forward(out, st, ck, q, k, v, g, beta, st0, seq, &s);
    memcpy(str, st0, ns * 4);
    cpu_deltanet_recurrent(outr, str, q, k, v, g, beta, seq, &s);
    cpu_deltanet_backward(dq, dk, dv, dg, db, dst0, dout, dst, ck, q, k, v, g, beta, seq, &s);
    write_out(out, nv), write_out(st, ns), write_out(outr, nv), write_out(str, ns);
    write_out(dq, nq), write_out(dk, nq), write_out(dv, nv), write_out(dg, ng), write_out(db, ng);
    write_out(dst0, ns);
    return 0;
}

/* the parameters' sizes in dn_params' order */
static void layer_sizes(size_t n[9], const dn_dims *d) {
    const size_t C = (size_t)d->C, kd = (size_t)d->HK * d->dk, vd = (size_t)d->HV * d->dv,
                 cd = 2 * kd + vd, hv = (size_t)d->HV;
    const size_t all[9] = {cd * C, vd * C, hv * C, hv * C, cd * (size_t)d->K, hv, hv,
                           (size_t)d->dv, C * vd};
    memcpy(n, all, sizeof all);
}

/* rows t0 .. t0 + n - 1 of each of B sequences of T rows of width w (elem bytes each) */
static void *slice_rows(const void *src, int B, int T, int t0, int n, size_t w, size_t elem) {
    char *dst = tsr_malloc((size_t)B * n * w * elem + 1);
    for (int b = 0; b < B; b++)
        memcpy(dst + (size_t)b * n * w * elem, (const char *)src + ((size_t)b * T + t0) * w * elem,
               (size_t)n * w * elem);
    return dst;
}

/* the layer's rows t0 .. t0 + n - 1 with the cache carried: out's rows, cache updated. A
 * sequence whose row t0 starts a document starts from zeros (the decoder's part). */
static void layer_rows(float *out, dn_cache *cache, const float *x, const dn_params *p,
                       const int32_t *seq, const dn_dims *full, int t0, int n) {
    dn_dims d = *full;
    d.T = n;
    const size_t cd = 2 * (size_t)d.HK * d.dk + (size_t)d.HV * d.dv, ss = (size_t)d.HV * d.dk * d.dv;
    for (int b = 0; b < d.B; b++)
        if (seq && t0 > 0 && seq[(size_t)b * full->T + t0] != seq[(size_t)b * full->T + t0 - 1]) {
            memset(cache->state + b * ss, 0, ss * sizeof(float));
            memset(cache->conv + b * (d.K - 1) * cd, 0, (d.K - 1) * cd * sizeof(float));
        }
    float *xs = slice_rows(x, d.B, full->T, t0, n, (size_t)d.C, 4), *os = tsr_calloc((size_t)d.B * n * d.C, 4);
    int32_t *ss_ = seq ? slice_rows(seq, d.B, full->T, t0, n, 1, 4) : NULL;
    dn_acts a;
    dn_acts_alloc(&a, &d);
    dn_layer_forward(cpu_be(), os, cache, cache, &a, xs, p, ss_, &d);
    for (int b = 0; b < d.B; b++)
        memcpy(out + ((size_t)b * full->T + t0) * d.C, os + (size_t)b * n * d.C, (size_t)n * d.C * 4);
    dn_acts_free(&a);
    free(xs), free(os), free(ss_);
}

/* rows t1 of the sequences that start a document there: zeros in cache c (B sequences) */
static void zero_fresh(dn_cache *c, const int32_t *seq, const dn_dims *full, int t1) {
    const size_t cd = 2 * (size_t)full->HK * full->dk + (size_t)full->HV * full->dv,
                 ss = (size_t)full->HV * full->dk * full->dv, cs = (size_t)(full->K - 1) * cd;
    for (int b = 0; b < full->B; b++)
        if (seq && seq[(size_t)b * full->T + t1] != seq[(size_t)b * full->T + t1 - 1]) {
            memset(c->state + b * ss, 0, ss * sizeof(float));
            memset(c->conv + b * cs, 0, cs * sizeof(float));
        }
}

/* rows of (B, n, w) into rows t0 .. t0 + n - 1 of (B, T, w) */
static void put_rows(float *dst, const float *src, int B, int T, int t0, int n, size_t w) {
    for (int b = 0; b < B; b++)
        memcpy(dst + ((size_t)b * T + t0) * w, src + (size_t)b * n * w, (size_t)n * w * 4);
}

/* The layer as two passes, rows 0 .. t1 - 1 then t1 .. T - 1, the cache carried from the first to
 * the second (zeros where row t1 starts a document) and its gradient carried back (context
 * parallelism's way: src/model/dn_ring.c): out and dx (B, T, C), g's parameter gradients. */
static void layer_split(float *out, float *dx, const dn_params *g, const float *x,
                        const float *dout, const dn_params *p, const int32_t *seq,
                        const dn_dims *full, int t1) {
    dn_dims d[2] = {*full, *full};
    d[0].T = t1, d[1].T = full->T - t1;
    const int t0[2] = {0, t1};
    float *xs[2], *ds[2], *os[2], *dxs[2];
    int32_t *sq[2];
    dn_acts a[2];
    dn_cache c, dc;
    dn_cache_alloc(&c, full), dn_cache_alloc(&dc, full);
    for (int i = 0; i < 2; i++) {
        const size_t n = (size_t)d[i].B * d[i].T * d[i].C;
        xs[i] = slice_rows(x, full->B, full->T, t0[i], d[i].T, (size_t)full->C, 4);
        ds[i] = slice_rows(dout, full->B, full->T, t0[i], d[i].T, (size_t)full->C, 4);
        sq[i] = seq ? slice_rows(seq, full->B, full->T, t0[i], d[i].T, 1, 4) : NULL;
        os[i] = tsr_calloc(n + 1, 4), dxs[i] = tsr_calloc(n + 1, 4);
        dn_acts_alloc(&a[i], &d[i]);
    }
    dn_layer_forward(cpu_be(), os[0], NULL, &c, &a[0], xs[0], p, sq[0], &d[0]);
    zero_fresh(&c, seq, full, t1);
    dn_layer_forward(cpu_be(), os[1], &c, NULL, &a[1], xs[1], p, sq[1], &d[1]);
    void *work = tsr_malloc(dn_backward_bytes(cpu_be(), full)); /* covers each half's */
    dn_layer_backward(cpu_be(), dxs[1], g, ds[1], NULL, &dc, &c, &a[1], xs[1], p, sq[1], work,
                      &d[1]);
    zero_fresh(&dc, seq, full, t1);
    dn_layer_backward(cpu_be(), dxs[0], g, ds[0], &dc, NULL, NULL, &a[0], xs[0], p, sq[0], work,
                      &d[0]);
    free(work);
    for (int i = 0; i < 2; i++) {
        put_rows(out, os[i], full->B, full->T, t0[i], d[i].T, (size_t)full->C);
        put_rows(dx, dxs[i], full->B, full->T, t0[i], d[i].T, (size_t)full->C);
        dn_acts_free(&a[i]);
        free(xs[i]), free(ds[i]), free(sq[i]), free(os[i]), free(dxs[i]);
    }
    dn_cache_free(&c), dn_cache_free(&dc);
}

static int layer_main(void) {
    int32_t hd[10];
    if (fread(hd, sizeof hd, 1, stdin) != 1) tsr_die(TSR_EXIT_USAGE, "deltanet_dump: no header");
    const dn_dims d = {hd[0], hd[1], hd[2], hd[3], hd[4], hd[5], hd[6], hd[7], hd[8], 1e-6f};
    dn_check(&d);
    const size_t N = (size_t)d.B * d.T, ns = (size_t)d.B * d.HV * d.dk * d.dv;
    size_t n[9];
    layer_sizes(n, &d);
    float *x = read_in(N * d.C, 4), *pp[9], *gp[9];
    for (int i = 0; i < 9; i++) pp[i] = read_in(n[i], 4), gp[i] = tsr_calloc(n[i], 4);
    float *dout = read_in(N * d.C, 4), *out = tsr_calloc(N * d.C, 4), *dx = tsr_calloc(N * d.C, 4),
          *inc = tsr_calloc(N * d.C, 4);
    int32_t *seq = hd[9] ? read_in(N, 4) : NULL;
    const dn_params p = {pp[0], pp[1], pp[2], pp[3], pp[4], pp[5], pp[6], pp[7], pp[8], NULL};
    const dn_params g = {gp[0], gp[1], gp[2], gp[3], gp[4], gp[5], gp[6], gp[7], gp[8], NULL};
    dn_acts a;
    dn_cache fin, run;
    dn_acts_alloc(&a, &d), dn_cache_alloc(&fin, &d), dn_cache_alloc(&run, &d);
    dn_layer_forward(cpu_be(), out, NULL, &fin, &a, x, &p, seq, &d);
    void *work = tsr_malloc(dn_backward_bytes(cpu_be(), &d));
    dn_layer_backward(cpu_be(), dx, &g, dout, NULL, NULL, NULL, &a, x, &p, seq, work, &d);
    free(work);
    layer_rows(inc, &run, x, &p, seq, &d, 0, (d.T + 1) / 2); /* a prefill, then a row at a time */
    for (int t = (d.T + 1) / 2; t < d.T; t++) layer_rows(inc, &run, x, &p, seq, &d, t, 1);
    write_out(out, N * d.C), write_out(fin.state, ns), write_out(dx, N * d.C);
    for (int i = 0; i < 9; i++) write_out(gp[i], n[i]);
    write_out(inc, N * d.C), write_out(run.state, ns);
    float *gs[9], *os = tsr_calloc(N * d.C, 4), *dxs = tsr_calloc(N * d.C, 4);
    for (int i = 0; i < 9; i++) gs[i] = tsr_calloc(n[i], 4);
    const dn_params g2 = {gs[0], gs[1], gs[2], gs[3], gs[4], gs[5], gs[6], gs[7], gs[8], NULL};
    layer_split(os, dxs, &g2, x, dout, &p, seq, &d, d.T - 2); /* a second pass shorter than K-1 */
    write_out(os, N * d.C), write_out(dxs, N * d.C);
    for (int i = 0; i < 9; i++) write_out(gs[i], n[i]);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "layer")) return layer_main();
    if (argc != 1) tsr_die(TSR_EXIT_USAGE, "usage: deltanet_dump [layer] < INPUT > OUTPUT");
    return core_main();
}
