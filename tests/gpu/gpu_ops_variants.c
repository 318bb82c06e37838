/* gpu_ops_variants.c — the op checks of issue 67/68's model variants on the CUDA backend
 * (docs/cuda.md "Model variants"), included by tests/gpu/test_gpu_ops.c (its helpers, tolerances
 * and CPU oracle `cpu`): QK-norm over the projection, partial/scaled RoPE, GeGLU-tanh, gpt-oss's
 * clamped unit and expert biases, the embedding scale, the attention output gate, the shared
 * expert's gate, the final-logit soft-cap in softmax + cross-entropy and argmax. Each op forward
 * and backward against the CPU op at the tolerances of its plain sibling (test_rmsnorm's,
 * test_rope's, test_swiglu's, test_xent's). Tiny shapes: the SIMT build runs them on the real
 * kernels (build/tests/test_gpu_ops_simt), the host emulator on its stand-ins
 * (build/tests/test_gpu_ops_emu), a GPU on the device (build/tests/test_gpu_ops). */

/* ---- QK-norm over the projection (OLMo 2) --------------------------------------------------- */

#define QKNP_CHECKS 7

/* test_gpu_ops.c's test_qk per projection */
static void test_qknorm_proj(int N, int NH, int KVH, int hs) {
    char tag[96];
    snprintf(tag, sizeof tag, "qknorm_proj N=%d NH=%d KVH=%d hs=%d", N, NH, KVH, hs);
    test_qk(N, NH, KVH, hs, 0, tag);
    scope_end(tag);
}

/* ---- partial / scaled RoPE (YaRN's mscale, partial_rotary_factor) --------------------------- */

#define ROPEP_CHECKS 3

static void test_rope_part(int B, int T, int NH, int KVH, int hs, int rot, float ms, int given) {
    const size_t ld = (size_t)(NH + 2 * KVH) * hs, N = (size_t)B * T, n = N * ld;
    char tag[128];
    snprintf(tag, sizeof tag, "rope_part B=%d T=%d NH=%d KVH=%d hs=%d rot=%d mscale=%g %s", B, T,
             NH, KVH, hs, rot, (double)ms, given ? "positions given" : "t + p0");
    float *x = hf(n), *f = hf(rot / 2), *mag = hf(n), *ref = hf(n), *dref = hf(n);
    int32_t *pos = hi32(N);
    fill_bf16(x, n, -2, 2);
    for (int i = 0; i < rot / 2; i++) f[i] = (float)pow(10000.0, -2.0 * i / rot);
    for (size_t r = 0; r < N; r++) pos[r] = (int32_t)((r * 7) % 23);
    for (size_t i = 0; i < n; i++) { /* (|x| + |partner|) mscale inside the rotated dims */
        const size_t c = i % ld, d = c % hs;
        const size_t partner = d < (size_t)rot ? i - d + (d < (size_t)rot / 2 ? d + rot / 2
                                                                              : d - rot / 2)
                                               : i;
        mag[i] = (fabsf(x[i]) + fabsf(x[partner])) * (ms > 1 ? ms : 1);
    }
    const int32_t *ps = given ? pos : NULL;
    memcpy(ref, x, n * sizeof *ref), memcpy(dref, x, n * sizeof *dref);
    cpu->rope_part_forward(ref, ps, 3, f, B, T, NH, KVH, hs, rot, ms);
    cpu->rope_part_backward(dref, ps, 3, f, B, T, NH, KVH, hs, rot, ms);
    tsr_bf16 *d_x = new_bf16(x, n), *d_dx = new_bf16(x, n);
    float *d_f = new_f32(f, rot / 2);
    int32_t *d_pos = given ? new_i32(pos, N) : NULL;
    tcu_rope_part_forward(d_x, d_pos, 3, d_f, B, T, NH, KVH, hs, rot, ms, g_s);
    tcu_rope_part_backward(d_dx, d_pos, 3, d_f, B, T, NH, KVH, hs, rot, ms, g_s);
    float *gf = get_bf16(d_x, n), *gb = get_bf16(d_dx, n);
    check_close(L("%s forward", tag), gf, ref, n, 0, RTOL_BF16, mag, 0x1p-13);
    check_close(L("%s backward", tag), gb, dref, n, 0, RTOL_BF16, mag, 0x1p-13);
    size_t bad = 0; /* dims rot..hs-1 of every head and the value heads: untouched */
    for (size_t i = 0; i < n; i++) {
        const size_t c = i % ld;
        if (c >= VCOL(0) || c % hs >= (size_t)rot) bad += (gf[i] != x[i]) + (gb[i] != x[i]);
    }
    tap_ok(bad == 0, "%s: the unrotated dims and the value heads untouched (%zu differ)", tag, bad);
    scope_end(tag);
}

/* ---- GeGLU-tanh and gpt-oss's clamped unit -------------------------------------------------- */

#define UNIT_CHECKS 3

/* gptoss 0: GeGLU-tanh; 1: gpt-oss's unit with alpha 1.702 and limit 1.5 (inputs across it) */
static void test_unit(int N, int F, int gptoss) {
    const size_t n = (size_t)N * F;
    const float alpha = 1.702f, limit = 1.5f;
    char tag[64];
    snprintf(tag, sizeof tag, "%s N=%d F=%d", gptoss ? "moe_gptoss" : "geglu", N, F);
    float *x = hf(2 * n), *out = hf(n), *mag = hf(n), *dout = hf(n), *g0 = hf(2 * n);
    for (size_t i = 0; i < 2 * n; i++) x[i] = rbf16(uni(-3, 3));
    for (int r = 0; r < N; r++)
        for (int f = 0; f < F; f++) {
            const float g = x[(size_t)r * 2 * F + f], u = x[(size_t)r * 2 * F + F + f];
            mag[(size_t)r * F + f] = fabsf(g) * (fabsf(u) + 1.0f);
        }
    fill_bf16(dout, n, -1, 1), fill_bf16(g0, 2 * n, -1, 1);
    if (gptoss) cpu->moe_gptoss_forward(out, x, N, F, alpha, limit);
    else cpu->geglu_forward(out, x, N, F);
    tsr_bf16 *d_x = new_bf16(x, 2 * n), *d_out = d16(n), *d_dout = new_bf16(dout, n);
    tsr_bf16 *d_g = new_bf16(g0, 2 * n);
    poison(d_out, n * 2);
    if (gptoss) tcu_moe_gptoss_forward(d_out, d_x, N, F, alpha, limit, g_s);
    else tcu_geglu_forward(d_out, d_x, N, F, g_s);
    check_close(L("%s forward", tag), get_bf16(d_out, n), out, n, 0, RTOL_BF16, mag, 0x1p-20);
    float *ref = hcopy(g0, 2 * n);
    if (gptoss) cpu->moe_gptoss_backward(ref, x, dout, N, F, alpha, limit);
    else cpu->geglu_backward(ref, x, dout, N, F);
    if (gptoss) tcu_moe_gptoss_backward(d_g, d_x, d_dout, N, F, alpha, limit, TSR_GRAD_ADD, g_s);
    else tcu_geglu_backward(d_g, d_x, d_dout, N, F, TSR_GRAD_ADD, g_s);
    check_close(L("%s backward: dinp", tag), get_bf16(d_g, 2 * n), ref, 2 * n, 1e-6, RTOL_BF16,
                absdiff(ref, g0, 2 * n, 1.0f, NULL, 0), U_BF16);
    tcu_zero(d_g, 2 * n * 2, g_s);
    if (gptoss) tcu_moe_gptoss_backward(d_g, d_x, d_dout, N, F, alpha, limit, TSR_GRAD_ADD, g_s);
    else tcu_geglu_backward(d_g, d_x, d_dout, N, F, TSR_GRAD_ADD, g_s);
    float *add = get_bf16(d_g, 2 * n);
    poison(d_g, 2 * n * 2);
    if (gptoss) tcu_moe_gptoss_backward(d_g, d_x, d_dout, N, F, alpha, limit, TSR_GRAD_SET, g_s);
    else tcu_geglu_backward(d_g, d_x, d_dout, N, F, TSR_GRAD_SET, g_s);
    size_t dif = set_vs_add(get_bf16(d_g, 2 * n), add, 2 * n, 1);
    tap_ok(dif == 0, "%s backward: TSR_GRAD_SET over NaNs = += over zeros, bit for bit (%zu "
           "differ)", tag, dif);
    scope_end(tag);
}

/* ---- gpt-oss's expert biases ---------------------------------------------------------------- */

#define BIAS_CHECKS 2

/* E = 3 experts over grouped rows offs = {0, 4, 4, 9}: expert 1 has none */
static void test_moe_bias(int OC) {
    const int E = 3, NK = 9;
    const int32_t offs[4] = {0, 4, 4, 9};
    const size_t n = (size_t)NK * OC, nb = (size_t)E * OC;
    char tag[64];
    snprintf(tag, sizeof tag, "moe_bias E=%d NK=%d OC=%d", E, NK, OC);
    float *out = hf(n), *b = hf(nb), *db = hf(nb), *dout = hf(n);
    fill_bf16(out, n, -2, 2), fill_bf16(b, nb, -1, 1), fill_f32(db, nb, -1, 1);
    fill_bf16(dout, n, -1, 1);
    tsr_bf16 *d_out = new_bf16(out, n), *d_b = new_bf16(b, nb), *d_dout = new_bf16(dout, n);
    float *d_db = new_f32(db, nb), *rdb = hcopy(db, nb), *mag = hf(nb);
    int32_t *d_offs = new_i32(offs, 4);
    float *ref = hcopy(out, n);
    cpu->moe_bias_forward(ref, b, offs, E, OC);
    tcu_moe_bias_forward(d_out, d_b, d_offs, E, OC, g_s);
    check_close(L("%s forward", tag), get_bf16(d_out, n), ref, n, 0, RTOL_BF16, NULL, 0);
    cpu->moe_bias_backward(rdb, dout, offs, E, OC);
    for (int e = 0; e < E; e++)
        for (int c = 0; c < OC; c++) {
            mag[(size_t)e * OC + c] = fabsf(db[(size_t)e * OC + c]);
            for (int r = offs[e]; r < offs[e + 1]; r++)
                mag[(size_t)e * OC + c] += fabsf(dout[(size_t)r * OC + c]);
        }
    tcu_moe_bias_backward(d_db, d_dout, d_offs, E, OC, g_s);
    check_close(L("%s backward: db", tag), get_f32(d_db, nb), rdb, nb, 0, 0, mag, MTOL_SUM);
    scope_end(tag);
}

/* ---- the embedding scale, the attention output gate ------------------------------------------ */

#define SCALE_GATE_CHECKS 4

static void test_scale_gate(size_t n) {
    char tag[64];
    snprintf(tag, sizeof tag, "scale, gate n=%zu", n);
    float *x = hf(n), *g = hf(n), *dy = hf(n), *sc = hf(n);
    fill_bf16(x, n, -3, 3), fill_bf16(g, n, -6, 6), fill_bf16(dy, n, -1, 1);
    const float s = 5.656854f; /* sqrt(32): Gemma's sqrt(d_model) */
    for (size_t i = 0; i < n; i++) sc[i] = x[i] * s;
    tsr_bf16 *d_x = new_bf16(x, n), *d_g = new_bf16(g, n), *d_dy = new_bf16(dy, n);
    tsr_bf16 *d_o = d16(n), *d_dg = d16(n);
    tcu_scale_bf16(d_x, s, n, g_s);
    check_exact16(L("%s: scale_bf16 = round(x s)", tag), d_x, sc, n);
    put_bf16(d_x, x, n);
    /* the CPU backend's gate (kernels/cpu/cpu_backend.c f_gate_*) written out */
    float *o = hf(n), *rdy = hf(n), *rdg = hf(n), *mag = hf(n);
    for (size_t i = 0; i < n; i++) {
        const float sg = 1.0f / (1.0f + expf(-g[i]));
        o[i] = x[i] * sg;
        rdg[i] = dy[i] * x[i] * sg * (1.0f - sg);
        rdy[i] = dy[i] * sg;
        mag[i] = fabsf(dy[i] * x[i]);
    }
    tcu_gate_forward(d_o, d_x, d_g, n, g_s);
    check_close(L("%s: gate forward", tag), get_bf16(d_o, n), o, n, 0, RTOL_BF16, x, 0x1p-20);
    poison(d_dg, n * 2);
    tcu_gate_backward(d_dy, d_dg, d_x, d_g, n, g_s);
    check_close(L("%s: gate backward d(gate)", tag), get_bf16(d_dg, n), rdg, n, 0, RTOL_BF16, mag,
                0x1p-20);
    check_close(L("%s: gate backward d(y)", tag), get_bf16(d_dy, n), rdy, n, 0, RTOL_BF16, dy,
                0x1p-20);
    scope_end(tag);
}

/* ---- the shared expert's gate ----------------------------------------------------------------- */

#define SHGATE_CHECKS 4

static void test_shgate(int N, int S, int C) {
    const size_t n = (size_t)N * C, ns = (size_t)N * S;
    char tag[64];
    snprintf(tag, sizeof tag, "moe_shgate N=%d S=%d C=%d", N, S, C);
    float *x = hf(n), *w = hf(C), *out = hf(n), *shg = hf(ns), *dshg = hf(ns), *gw = hf(C);
    float *dx = hf(n), *dg = hf(N), *mag = hf(n);
    fill_bf16(x, n, -1, 1), fill_bf16(w, C, -0.3, 0.3), fill_bf16(out, n, -2, 2);
    fill_bf16(shg, ns, -1, 1), fill_bf16(dshg, ns, -1, 1), fill_f32(gw, C, -1, 1);
    fill_bf16(dx, n, -1, 1);
    tsr_bf16 *d_x = new_bf16(x, n), *d_w = new_bf16(w, C), *d_out = new_bf16(out, n);
    tsr_bf16 *d_shg = new_bf16(shg, ns), *d_dshg = new_bf16(dshg, ns), *d_dx = new_bf16(dx, n);
    float *d_gw = new_f32(gw, C), *d_dg = df32(N);
    float *ro = hcopy(out, n), *rgw = hcopy(gw, C), *rdx = hcopy(dx, n), *mgw = habs(gw, C);
    cpu->moe_shgate_forward(ro, x, w, N, C);
    tcu_moe_shgate_forward(d_out, d_x, d_w, N, C, g_s);
    check_close(L("%s forward", tag), get_bf16(d_out, n), ro, n, 0, RTOL_BF16, out, 0x1p-18);
    cpu->moe_shgate_grad(dg, rgw, shg, dshg, x, w, N, S, C);
    tcu_moe_shgate_grad(d_dg, d_gw, d_shg, d_dshg, d_x, d_w, N, S, C, g_s);
    float *mdg = hf(N);
    memset(mdg, 0, (size_t)N * sizeof *mdg);
    for (int r = 0; r < N; r++) {
        for (int k = 0; k < S; k++) mdg[r] += fabsf(shg[(size_t)r * S + k] * dshg[(size_t)r * S + k]);
        for (int c = 0; c < C; c++) mgw[c] += fabsf(dg[r] * x[(size_t)r * C + c]) + mdg[r] * 0x1p-8f;
    }
    check_close(L("%s grad: dg", tag), get_f32(d_dg, N), dg, N, 0, 0, mdg, 0x1p-12);
    check_close(L("%s grad: gw", tag), get_f32(d_gw, C), rgw, C, 0, 0, mgw, 0x1p-12);
    cpu->moe_shgate_dx(rdx, dg, w, N, C);
    tcu_moe_shgate_dx(d_dx, d_dg, d_w, N, C, g_s);
    for (size_t i = 0; i < n; i++) mag[i] = fabsf(rdx[i] - dx[i]) + fabsf(dx[i]) * 0x1p-8f;
    check_close(L("%s dx", tag), get_bf16(d_dx, n), rdx, n, 1e-6, RTOL_BF16, mag, 0x1p-10);
    scope_end(tag);
}

/* ---- the final-logit soft-cap in softmax + cross-entropy, argmax ---------------------------- */

#define CAP_CHECKS 4

/* rows of logits up to +-3 cap (the cap saturates), row 1 ignored (target -1) */
static void test_xent_capped(int N, int V, int Vp, float cap) {
    const size_t n = (size_t)N * Vp;
    char tag[64];
    snprintf(tag, sizeof tag, "softmax_xent capped N=%d V=%d Vp=%d cap=%g", N, V, Vp, (double)cap);
    float *x = hf(n), *z = hf(n), *losses = hf(N), *dl = hf(N), *d = hf(n);
    int32_t *t = hi32(N), *am = hi32(N);
    fill_bf16(x, n, -3 * cap, 3 * cap);
    for (int r = 0; r < N; r++) t[r] = r == 1 ? -1 : irand(V), dl[r] = uni(0.5, 1.5);
    cpu->softcap_forward(z, x, N, V, Vp, cap);
    cpu->softmax_xent_forward(losses, d, z, t, N, V, Vp);
    cpu->softmax_xent_backward(d, dl, d, t, N, V, Vp);
    cpu->softcap_backward(d, z, N, V, Vp, cap);
    for (int r = 0; r < N; r++) { /* the CPU's argmax over the capped logits */
        am[r] = 0;
        for (int j = 1; j < V; j++)
            if (z[(size_t)r * Vp + j] > z[(size_t)r * Vp + am[r]]) am[r] = j;
    }
    tsr_bf16 *d_x = new_bf16(x, n);
    int32_t *d_t = new_i32(t, N), *d_am = new_i32(t, N);
    float *d_l = df32(N), *d_dl = new_f32(dl, N);
    tcu_argmax_capped(d_am, d_x, N, V, Vp, cap, g_s);
    int32_t *gam = hi32(N);
    d2h(gam, d_am, N * sizeof *gam);
    tap_ok(ndiff(gam, am, N, 4) == 0, "%s: argmax over the capped logits = the CPU's", tag);
    tcu_softmax_xent_capped(d_l, d_x, d_t, NULL, N, V, Vp, cap, g_s);
    check_close(L("%s: losses (evaluation)", tag), get_f32(d_l, N), losses, N, 1e-3, 1e-2, NULL,
                0);
    tcu_softmax_xent_capped(d_l, d_x, d_t, d_dl, N, V, Vp, cap, g_s);
    check_close(L("%s: losses (training)", tag), get_f32(d_l, N), losses, N, 1e-3, 1e-2, NULL, 0);
    check_close(L("%s: dlogits", tag), get_bf16(d_x, n), d, n, 1e-4, 2 * RTOL_BF16, NULL, 0);
    scope_end(tag);
}

/* ---- the cases ------------------------------------------------------------------------------ */

static int variants_checks(void) {
    return 2 * QKNP_CHECKS + 2 * ROPEP_CHECKS + 4 * UNIT_CHECKS + 2 * BIAS_CHECKS +
           SCALE_GATE_CHECKS + SHGATE_CHECKS + 2 * CAP_CHECKS;
}

static void run_variants(void) {
    tap_diag("next: issue 67/68's model variants (gpu_ops_variants.c)");
    test_qknorm_proj(5, 4, 2, 8);
    test_qknorm_proj(3, 2, 1, 12); /* rows of 24 and 12: no 8-wide vectors for the keys */
    test_rope_part(2, 5, 2, 1, 16, 8, 1.2f, 1);
    test_rope_part(1, 6, 4, 2, 12, 4, 1.0f, 0);
    test_unit(5, 16, 0);
    test_unit(3, 7, 0);
    test_unit(5, 16, 1);
    test_unit(3, 7, 1);
    test_moe_bias(12);
    test_moe_bias(5);
    test_scale_gate(77);
    test_shgate(6, 12, 40);
    test_xent_capped(4, 50, 56, 5.0f);
    test_xent_capped(3, 30, 30, 2.0f);
}
