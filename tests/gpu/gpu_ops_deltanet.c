/* gpu_ops_deltanet.c — the Gated DeltaNet core on CUDA (tcu_deltanet_forward, cuda_deltanet.cu;
 * issue 68) against its CPU oracle cpu_deltanet_forward (kernels/cpu/cpu_deltanet.c) at chunk 64.
 * Included by test_gpu_ops.c, whose helpers (rng, bf16 rounding, guarded buffers, check_close) it
 * uses: test_gpu_ops_emu runs it on kernels/cuda_emu's stand-in, test_gpu_ops_simt on the real
 * kernel under the SIMT emulator (tiny shapes: a few seconds), test_gpu_ops on a GPU.
 *
 * The CPU reads the same bf16-rounded q, k, v and the same fp32 g, beta, state0. Tolerances
 * (docs/deltanet.md "CUDA"), u = 2^-8: the kernel rounds to bf16 the normalised q and k, the
 * inverse (I + A)^-1 scaled by beta (and e^gam), W, the corrected values Vn, the masked scores,
 * the decayed queries and keys and the state as a product operand; each is one rounding (u/2 ..
 * u relative) of a value the next product sums over with terms of both signs. Chained through
 * the chunk (k -> A -> (I + A)^-1 -> Vn -> out and the state), the error of an output element is
 * a few u of the size of the row it belongs to, not of the element (a small element is a sum of
 * larger cancelling terms). So: |gpu - cpu| <= 8u rms(row of cpu) + 2u |cpu| for the output
 * (2u: its own rounding to bf16), and 8u rms(cpu state) for the states, whose errors carry
 * from chunk to chunk (decayed: |alpha| <= 1). On the emulator (the CPU core itself) only the
 * output's rounding differs. Measured worst err/tol is printed by each check. */
#include "cpu/cpu_deltanet.h"

typedef struct { int B, T, HK, HV, dk, dv, seq, state0; } dn_cfg;
static const dn_cfg DN[] = {
    {2, 100, 1, 2, 32, 32, 1, 1}, /* packed documents (row 1: a start at t = 64), GQA, T % 64 */
    {1, 130, 1, 2, 16, 16, 0, 1}, /* one document over three chunks, from an initial state */
    {1, 64, 2, 4, 16, 32, 0, 0},  /* one full chunk, dk != dv, no state, no documents */
    {1, 70, 1, 2, 128, 128, 1, 1}, /* Qwen3-Next's head size: the ~209 KiB shared-memory layouts */
};
#define DN_CHECKS 4

/* the rms of x (n): the value scale of the tolerances */
static double dn_rms(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s / (double)(n ? n : 1));
}

typedef struct {
    tsr_bf16 *q, *k, *v, *out;
    float *g, *beta, *s0, *sout, *ck;
    int32_t *seq;
} dn_dev;

static void dn_run(const dn_cfg *c, const dn_dev *d) {
    tcu_deltanet_forward(d->out, d->sout, d->ck, d->q, d->k, d->v, d->g, d->beta, d->s0, d->seq,
                         c->B, c->T, c->HK, c->HV, c->dk, c->dv, g_s);
    tcu_sync(g_s);
}

static void test_deltanet(const dn_cfg *c) {
    const char *tag = L("deltanet B=%d T=%d HK=%d HV=%d dk=%d dv=%d%s%s", c->B, c->T, c->HK,
                        c->HV, c->dk, c->dv, c->seq ? " packed" : "", c->state0 ? " state0" : "");
    const size_t N = (size_t)c->B * c->T, nq = N * c->HK * c->dk, nv = N * c->HV * c->dv,
                 ng = N * c->HV, ns = (size_t)c->B * c->HV * c->dk * c->dv,
                 nck = tcu_deltanet_ckpt_floats(c->B, c->T, c->HV, c->dk, c->dv);
    float *q = hf(nq), *k = hf(nq), *v = hf(nv), *g = hf(ng), *beta = hf(ng);
    float *s0 = c->state0 ? hf(ns) : NULL;
    int32_t *seq = c->seq ? hi32(N) : NULL;
    fill_bf16(q, nq, -1, 1), fill_bf16(k, nq, -1, 1), fill_bf16(v, nv, -1, 1);
    fill_f32(g, ng, -1, 0), fill_f32(beta, ng, 0, 1);
    if (s0) fill_f32(s0, ns, -0.5, 0.5);
    for (int b = 0; seq && b < c->B; b++) make_segments(seq + (size_t)b * c->T, c->T, 3 * b);
    const tsr_dn_shape sh = {c->B, c->T, c->HK, c->HV, c->dk, c->dv, 64};
    float *ro = hf(nv), *rs = hf(ns), *rc = hf(nck);
    cpu_deltanet_forward(ro, rs, rc, q, k, v, g, beta, s0, seq, &sh);
    dn_dev d = {new_bf16(q, nq), new_bf16(k, nq), new_bf16(v, nv), d16(nv), new_f32(g, ng),
                new_f32(beta, ng), s0 ? new_f32(s0, ns) : NULL, df32(ns), df32(nck),
                seq ? new_i32(seq, N) : NULL};
    poison(d.out, nv * sizeof(tsr_bf16)), poison(d.sout, ns * 4), poison(d.ck, nck * 4);
    dn_run(c, &d);
    float *go = get_bf16(d.out, nv), *gs = get_f32(d.sout, ns), *gc = get_f32(d.ck, nck);
    const double tol = 4 * U_BF16 * dn_rms(v, nv);
    check_close(L("%s: out", tag), go, ro, nv, tol, 2 * U_BF16, NULL, 0);
    check_close(L("%s: final state", tag), gs, rs, ns, tol, 0, NULL, 0);
    check_close(L("%s: saved chunk states", tag), gc, rc, nck, tol, 0, NULL, 0);
    dn_run(c, &d); /* deterministic: the same bits again */
    float *go2 = get_bf16(d.out, nv), *gs2 = get_f32(d.sout, ns);
    tap_ok(ndiff(go, go2, nv, 4) == 0 && ndiff(gs, gs2, ns, 4) == 0,
           "%s: a second run gives the same bits (out and state)", tag);
    scope_end(tag);
}

/* the backward's checks: |gpu - cpu| <= 2u |cpu| + DN_GTOL u rms(cpu) per gradient tensor
 * (docs/deltanet.md "CUDA": the roundings of the products' operands, as the forward's, of
 * terms of the gradients' scale), then that it adds (+=) and is deterministic */
#define DN_BWD_CHECKS 8
#define DN_GTOL 16

/* x (n) random in [lo, hi), and the same on the device as bf16 (x rounded to it) or fp32 */
static float *dn_rand(size_t n, double lo, double hi, int b16, void **dev) {
    float *x = hf(n);
    b16 ? fill_bf16(x, n, lo, hi) : fill_f32(x, n, lo, hi);
    *dev = b16 ? (void *)new_bf16(x, n) : (void *)new_f32(x, n);
    return x;
}

/* the six gradients of one case: host arrays, device buffers, sizes, bf16 or fp32 */
typedef struct {
    float *h[6];
    void *d[6];
    size_t n[6];
} dn_grads6;
static const char *const DN_GNAME[6] = {"dq", "dk", "dv", "dg", "dbeta", "dstate0"};

/* the device gradients set to start (NULL: zeros) */
static void dn_grads_put(const dn_grads6 *G, float *const *start) {
    for (int i = 0; i < 6; i++) {
        float *z = start ? start[i] : memset(hf(G->n[i]), 0, G->n[i] * sizeof(float));
        i < 3 ? put_bf16(G->d[i], z, G->n[i]) : put_f32(G->d[i], z, G->n[i]);
    }
}
static void dn_grads_get(const dn_grads6 *G, float **out) {
    for (int i = 0; i < 6; i++) out[i] = i < 3 ? get_bf16(G->d[i], G->n[i]) : get_f32(G->d[i], G->n[i]);
}

typedef struct {
    const dn_cfg *c;
    void *in[5], *dout, *dso, *ck, *scratch;
    int32_t *seq;
} dn_bwd_dev;

static void dn_bwd_run(const dn_bwd_dev *D, const dn_grads6 *G) {
    const dn_cfg *c = D->c;
    tcu_deltanet_backward(G->d[0], G->d[1], G->d[2], G->d[3], G->d[4], G->d[5], D->dout, D->dso,
                          D->ck, D->in[0], D->in[1], D->in[2], D->in[3], D->in[4], D->seq,
                          D->scratch, c->B, c->T, c->HK, c->HV, c->dk, c->dv, g_s);
    tcu_sync(g_s);
}

/* run from a random start adds what the run from zeros gave (one rounding for bf16, exact fp32);
 * a second run from zeros gives the first's bits */
static void dn_bwd_adds(const char *tag, const dn_bwd_dev *D, const dn_grads6 *G, float **first) {
    float *start[6], *got[6];
    void *unused;
    size_t bad = 0, same = 0;
    for (int i = 0; i < 6; i++) start[i] = dn_rand(G->n[i], -1, 1, i < 3, &unused);
    dn_grads_put(G, start);
    dn_bwd_run(D, G);
    dn_grads_get(G, got);
    for (int i = 0; i < 6; i++)
        for (size_t e = 0; e < G->n[i]; e++) {
            const float want = start[i][e] + first[i][e];
            bad += !(fabsf(got[i][e] - want) <= (i < 3 ? RTOL_BF16 * (fabsf(want) + fabsf(first[i][e])) : 0.f));
        }
    tap_ok(bad == 0, "%s: adds into its six outputs (%zu elements not start + the run from zeros)", tag, bad);
    dn_grads_put(G, NULL);
    dn_bwd_run(D, G);
    dn_grads_get(G, got);
    for (int i = 0; i < 6; i++) same += ndiff(got[i], first[i], G->n[i], sizeof(float));
    tap_ok(same == 0, "%s: a second run gives the same bits (%zu differ)", tag, same);
}

static void test_deltanet_backward(const dn_cfg *c) {
    char tag[160];
    snprintf(tag, sizeof tag, "deltanet backward B=%d T=%d HK=%d HV=%d dk=%d dv=%d%s%s", c->B,
             c->T, c->HK, c->HV, c->dk, c->dv, c->seq ? " packed" : "", c->state0 ? " state0" : "");
    const size_t N = (size_t)c->B * c->T, nq = N * c->HK * c->dk, nv = N * c->HV * c->dv,
                 ng = N * c->HV, ns = (size_t)c->B * c->HV * c->dk * c->dv,
                 nck = tcu_deltanet_ckpt_floats(c->B, c->T, c->HV, c->dk, c->dv);
    dn_bwd_dev D = {.c = c};
    float *q = dn_rand(nq, -1, 1, 1, &D.in[0]), *k = dn_rand(nq, -1, 1, 1, &D.in[1]);
    float *v = dn_rand(nv, -1, 1, 1, &D.in[2]), *g = dn_rand(ng, -1, 0, 0, &D.in[3]);
    float *beta = dn_rand(ng, 0, 1, 0, &D.in[4]), *ck = hf(nck);
    float *s0 = c->state0 ? hf(ns) : NULL;
    if (s0) fill_f32(s0, ns, -0.5, 0.5);
    int32_t *seq = c->seq ? hi32(N) : NULL;
    for (int b = 0; seq && b < c->B; b++) make_segments(seq + (size_t)b * c->T, c->T, 3 * b);
    const tsr_dn_shape sh = {c->B, c->T, c->HK, c->HV, c->dk, c->dv, 64};
    cpu_deltanet_forward(hf(nv), NULL, ck, q, k, v, g, beta, s0, seq, &sh);
    /* d final state of the scale of the state gradients the chunks make themselves (the next
     * rank's under context parallelism): |q~| = dk^-1/2 times d out over a few decayed rows */
    float *dout = dn_rand(nv, -1, 1, 1, &D.dout), *dso = dn_rand(ns, -0.05, 0.05, 0, &D.dso);
    dn_grads6 G = {.n = {nq, nq, nv, ng, ng, ns}};
    float *ref[6], *got[6];
    for (int i = 0; i < 6; i++) {
        ref[i] = memset(hf(G.n[i]), 0, G.n[i] * sizeof(float));
        G.d[i] = dalloc(G.n[i] * (i < 3 ? sizeof(tsr_bf16) : sizeof(float)));
    }
    cpu_deltanet_backward(ref[0], ref[1], ref[2], ref[3], ref[4], ref[5], dout, dso, ck, q, k, v,
                          g, beta, seq, &sh);
    D.scratch = dalloc(tcu_deltanet_backward_scratch_bytes(c->B, c->T, c->HV, c->dk, c->dv));
    D.ck = new_f32(ck, nck), D.seq = seq ? new_i32(seq, N) : NULL;
    dn_grads_put(&G, NULL);
    dn_bwd_run(&D, &G);
    dn_grads_get(&G, got);
    for (int i = 0; i < 6; i++)
        check_close(L("%s: %s", tag, DN_GNAME[i]), got[i], ref[i], G.n[i],
                    DN_GTOL * U_BF16 * dn_rms(ref[i], G.n[i]), 2 * U_BF16, NULL, 0);
    dn_bwd_adds(tag, &D, &G, got);
    scope_end(tag);
}

/* ---- the layer's parts around the core (tcu_dn_*, cuda_dnparts.cu) against cpu_dn_* -------
 * The CPU reads the same bf16-rounded inputs (the gates' dbeta, dg fp32 as the core gives them).
 * Every gradient starts from a random value, so one check shows both the sum and the +=: bf16
 * outputs within 2u |cpu| (their one rounding) + 1e-5 (fp32 vs the CPU's double sums of K terms);
 * fp32 outputs (beta, g: 1e-5 relative, expf/log1pf against double) and parameter gradients (sums
 * of B T terms of size ~1 in another order: 1e-5 + 1e-5 relative). */
typedef struct { int B, T, CD, K, HV, seq, hist; } dnp_cfg;
static const dnp_cfg DNP[] = {
    {2, 37, 24, 4, 3, 1, 1}, /* packed documents (a start inside the first window), history */
    {1, 19, 16, 4, 2, 0, 0}, /* one sequence from zeros, no documents */
};
#define DNP_CHECKS 14

/* the CPU's x + (a copy of start) after fn; a start (n) random in [-1, 1), bf16 or fp32 */
static float *dnp_start(size_t n, int b16) {
    float *x = hf(n);
    b16 ? fill_bf16(x, n, -1, 1) : fill_f32(x, n, -1, 1);
    return x;
}

static void dnp_conv(const dnp_cfg *c, const char *tag, const int32_t *seq, const int32_t *dseq) {
    const size_t n = (size_t)c->B * c->T * c->CD, nh = (size_t)c->B * (c->K - 1) * c->CD + 1,
                 nw = (size_t)c->CD * c->K;
    float *x = dnp_start(n, 1), *w = dnp_start(nw, 1), *dy = dnp_start(n, 1);
    float *hist = c->hist ? dnp_start(nh, 1) : NULL, *y = hf(n);
    float *dx = dnp_start(n, 1), *dh = dnp_start(nh, 1), *dw = dnp_start(nw, 0);
    tsr_bf16 *Dx = new_bf16(x, n), *Dw = new_bf16(w, nw), *Ddy = new_bf16(dy, n), *Dy = d16(n);
    tsr_bf16 *Dh = hist ? new_bf16(hist, nh) : NULL, *Ddx = new_bf16(dx, n), *Ddh = new_bf16(dh, nh);
    float *Ddw = new_f32(dw, nw), *dx0 = hcopy(dx, n), *dw0 = hcopy(dw, nw);
    cpu_dn_conv_forward(y, x, hist, w, seq, c->B, c->T, c->CD, c->K);
    tcu_dn_conv_forward(Dy, Dx, Dh, Dw, dseq, c->B, c->T, c->CD, c->K, g_s);
    cpu_dn_conv_backward(dx, dh, dw, dy, x, hist, w, seq, c->B, c->T, c->CD, c->K);
    tcu_dn_conv_backward(Ddx, Ddh, Ddw, Ddy, Dx, Dh, Dw, dseq, c->B, c->T, c->CD, c->K, g_s);
    tcu_sync(g_s);
    check_close(L("%s: conv y", tag), get_bf16(Dy, n), y, n, 1e-5, RTOL_BF16, NULL, 0);
    check_close(L("%s: conv dx +=", tag), get_bf16(Ddx, n), dx, n, 1e-5, RTOL_BF16, NULL, 0);
    check_close(L("%s: conv dhist +=", tag), get_bf16(Ddh, nh - 1), dh, nh - 1, 1e-5, RTOL_BF16,
                NULL, 0);
    check_close(L("%s: conv dw +=", tag), get_f32(Ddw, nw), dw, nw, 1e-5, 1e-5, NULL, 0);
    /* deterministic, and dx the same without dhist: again from the same start, the same bits */
    float *gx = get_bf16(Ddx, n), *gw = get_f32(Ddw, nw);
    put_bf16(Ddx, dx0, n), put_f32(Ddw, dw0, nw);
    tcu_dn_conv_backward(Ddx, NULL, Ddw, Ddy, Dx, Dh, Dw, dseq, c->B, c->T, c->CD, c->K, g_s);
    tcu_sync(g_s);
    tap_ok(ndiff(get_bf16(Ddx, n), gx, n, 4) == 0 && ndiff(get_f32(Ddw, nw), gw, nw, 4) == 0,
           "%s: conv backward again from the same start (no dhist): the same bits", tag);
}

static void dnp_gates(const dnp_cfg *c, const char *tag) {
    const int N = c->B * c->T, HV = c->HV;
    const size_t n = (size_t)N * HV;
    float *b = dnp_start(n, 1), *a = dnp_start(n, 1), *al = dnp_start(HV, 1), *dt = dnp_start(HV, 1);
    float *beta = hf(n), *g = hf(n), *dbeta = dnp_start(n, 0), *dg = dnp_start(n, 0);
    float *db = dnp_start(n, 1), *da = dnp_start(n, 1), *dal = dnp_start(HV, 0);
    float *ddt = dnp_start(HV, 0);
    tsr_bf16 *Db = new_bf16(b, n), *Da = new_bf16(a, n), *Dal = new_bf16(al, HV);
    tsr_bf16 *Ddt = new_bf16(dt, HV), *Ddb = new_bf16(db, n), *Dda = new_bf16(da, n);
    float *Dbeta = df32(n), *Dg = df32(n), *Ddbeta = new_f32(dbeta, n), *Ddg = new_f32(dg, n);
    float *Ddal = new_f32(dal, HV), *Dddt = new_f32(ddt, HV);
    cpu_dn_gates_forward(beta, g, b, a, al, dt, N, HV);
    tcu_dn_gates_forward(Dbeta, Dg, Db, Da, Dal, Ddt, N, HV, g_s);
    cpu_dn_gates_backward(db, da, dal, ddt, dbeta, dg, b, a, al, dt, N, HV);
    tcu_dn_gates_backward(Ddb, Dda, Ddal, Dddt, Ddbeta, Ddg, Db, Da, Dal, Ddt, N, HV, g_s);
    tcu_sync(g_s);
    check_close(L("%s: beta", tag), get_f32(Dbeta, n), beta, n, 1e-6, 1e-5, NULL, 0);
    check_close(L("%s: g", tag), get_f32(Dg, n), g, n, 1e-6, 1e-5, NULL, 0);
    check_close(L("%s: db +=", tag), get_bf16(Ddb, n), db, n, 1e-5, RTOL_BF16, NULL, 0);
    check_close(L("%s: da +=", tag), get_bf16(Dda, n), da, n, 1e-5, RTOL_BF16, NULL, 0);
    check_close(L("%s: dA_log +=", tag), get_f32(Ddal, HV), dal, HV, 1e-5, 1e-5, NULL, 0);
    check_close(L("%s: ddt_bias +=", tag), get_f32(Dddt, HV), ddt, HV, 1e-5, 1e-5, NULL, 0);
}

static void dnp_silu_gate(const dnp_cfg *c, const char *tag) {
    const size_t n = (size_t)c->B * c->T * c->CD;
    float *x = dnp_start(n, 1), *z = dnp_start(n, 1), *dout = dnp_start(n, 1), *out = hf(n);
    float *dx = dnp_start(n, 1), *dz = dnp_start(n, 1);
    tsr_bf16 *Dx = new_bf16(x, n), *Dz = new_bf16(z, n), *Dd = new_bf16(dout, n), *Do = d16(n);
    tsr_bf16 *Ddx = new_bf16(dx, n), *Ddz = new_bf16(dz, n);
    cpu_dn_silu_gate_forward(out, x, z, n);
    tcu_dn_silu_gate_forward(Do, Dx, Dz, n, g_s);
    cpu_dn_silu_gate_backward(dx, dz, dout, x, z, n);
    tcu_dn_silu_gate_backward(Ddx, Ddz, Dd, Dx, Dz, n, g_s);
    tcu_sync(g_s);
    check_close(L("%s: silu gate out", tag), get_bf16(Do, n), out, n, 1e-6, RTOL_BF16, NULL, 0);
    check_close(L("%s: silu gate dx +=", tag), get_bf16(Ddx, n), dx, n, 1e-6, RTOL_BF16, NULL, 0);
    check_close(L("%s: silu gate dz +=", tag), get_bf16(Ddz, n), dz, n, 1e-6, RTOL_BF16, NULL, 0);
}

static void test_dn_parts(const dnp_cfg *c) {
    char tag[128]; /* its own copy: L's buffers turn over */
    snprintf(tag, sizeof tag, "deltanet parts B=%d T=%d CD=%d K=%d HV=%d%s%s", c->B, c->T, c->CD,
             c->K, c->HV, c->seq ? " packed" : "", c->hist ? " history" : "");
    const size_t N = (size_t)c->B * c->T;
    int32_t *seq = c->seq ? hi32(N) : NULL;
    for (int b = 0; seq && b < c->B; b++) make_segments(seq + (size_t)b * c->T, c->T, 2 * b + 1);
    dnp_conv(c, tag, seq, seq ? new_i32(seq, N) : NULL);
    dnp_gates(c, tag);
    dnp_silu_gate(c, tag);
    scope_end(tag);
}

static int deltanet_checks(void) {
    return (int)NCASES(DN) * (DN_CHECKS + DN_BWD_CHECKS) + (int)NCASES(DNP) * DNP_CHECKS;
}
static void run_deltanet(void) {
    for (size_t i = 0; i < NCASES(DN); i++) test_deltanet(&DN[i]);
    for (size_t i = 0; i < NCASES(DN); i++) test_deltanet_backward(&DN[i]);
    for (size_t i = 0; i < NCASES(DNP); i++) test_dn_parts(&DNP[i]);
}
