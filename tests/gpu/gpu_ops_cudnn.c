/* gpu_ops_cudnn.c — cuDNN's fused attention (issue 66 item 1; kernels/cuda/tcu_cudnn*.c,
 * docs/cuda.md "cuDNN attention") through tcu_attention_forward / _backward with the backend set
 * to cudnn (tcu_cudnn_set_backend, as TSR_ATTENTION=cudnn), against the CPU oracle with
 * test_attention's tolerances: out within 2u plus the bf16-P term, lse within 1e-4, dqkv within
 * 2u of each term's size (mag); the backward written over NaNs (TSR_GRAD_SET, the only mode
 * cuDNN takes), run twice with the same bits (the deterministic graph), the forward too; and
 * tcu_cudnn_calls proves cuDNN ran each (not the own kernels' fallback). Included by
 * test_gpu_ops.c, which runs it last (tcu_cudnn_set_fatal(0): a failed execute fails its case's
 * checks, not the whole test). Also: a forward of a shape not yet sized declines (no plan built
 * inside a step), and sizing allocates no device memory. Skipped, saying so, only where cuDNN
 * cannot run: no usable libcudnn.so.9, not an sm_90 device, or no GPU (the emulators: cudnnCreate
 * fails); on an sm_90 device with the library, no plan is a failed check carrying the reason. */

/* phase-1 shapes: hs 32, 64, 128; GQA ratios 1, 2, 4; T not a multiple of 64 or 128 once */
static const att_cfg CUDNN_ATT[] = {
    {2, 128, 4, 4, 32, 0, 0}, {2, 256, 4, 2, 64, 0, 0}, {2, 384, 4, 1, 128, 0, 0},
    {1, 130, 8, 2, 64, 0, 0}, {2, 200, 4, 2, 128, 0, 0},
};
#define CUDNN_CHECKS 7

static int cudnn_checks(void) { return (int)NCASES(CUDNN_ATT) * CUDNN_CHECKS; }

/* the inputs of one case on the host: test_attention's distributions */
typedef struct {
    float *qkv, *qabs, *dout, *out, *oabs, *att, *lse, *ref, *mag;
} cudnn_host;

static void cudnn_host_ref(cudnn_host *h, const att_cfg *a) {
    const int B = a->B, T = a->T, NH = a->NH, KVH = a->KVH, hs = a->hs;
    const size_t ld = (size_t)(NH + 2 * KVH) * hs, C = (size_t)NH * hs;
    const size_t nq = (size_t)B * T * ld, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    h->qkv = hf(nq), h->qabs = hf(nq), h->dout = hf(no), h->out = hf(no), h->oabs = hf(no);
    h->att = hf(na), h->lse = hf((size_t)B * NH * T), h->ref = hf(nq), h->mag = hf(nq);
    float *tmp = hf(na);
    attn_inputs(h->qkv, h->qabs, (size_t)B * T, ld, VCOL(0));
    fill_bf16(h->dout, no, -1, 1);
    cpu->attention_forward(h->out, h->att, h->qkv, NULL, NULL, NULL, B, T, NH, KVH, hs);
    cpu->attention_forward(h->oabs, tmp, h->qabs, NULL, NULL, NULL, B, T, NH, KVH, hs);
    host_lse(h->lse, h->qkv, NULL, NULL, B, T, NH, KVH, hs);
    memset(h->ref, 0, nq * sizeof(float));
    cpu->attention_backward(h->ref, h->dout, h->qkv, h->att, NULL, NULL, B, T, NH, KVH, hs);
    attention_bwd_mag(h->mag, h->qkv, h->att, h->out, h->dout, B, T, NH, KVH, hs);
}

/* one backward into d_g over NaNs; what it left there */
static float *cudnn_bwd(const att_cfg *a, tsr_bf16 *d_g, const tsr_bf16 *d_dout,
                        const tsr_bf16 *d_qkv, const tsr_bf16 *d_ob, const float *d_lse,
                        void *scratch, size_t nq) {
    poison(d_g, nq * 2);
    tcu_attention_backward(d_g, d_dout, d_qkv, d_ob, d_lse, NULL, NULL, scratch, a->B, a->T, a->NH,
                           a->KVH, a->hs, TSR_GRAD_SET, g_s);
    return get_bf16(d_g, nq);
}

static void test_cudnn(const att_cfg *a) {
    const int B = a->B, T = a->T, NH = a->NH, KVH = a->KVH, hs = a->hs;
    const size_t ld = (size_t)(NH + 2 * KVH) * hs, C = (size_t)NH * hs;
    const size_t nq = (size_t)B * T * ld, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    char tag[96];
    snprintf(tag, sizeof tag, "cuDNN B=%d T=%d NH=%d KVH=%d hs=%d", B, T, NH, KVH, hs);
    cudnn_host h;
    cudnn_host_ref(&h, a);
    tsr_bf16 *d_qkv = new_bf16(h.qkv, nq), *d_out = d16(no);
    float *d_lse = df32(nl);
    /* not sized yet: the own kernels run it; sizing (both plans built) allocates nothing */
    size_t calls0 = tcu_cudnn_calls(), live0, live1, peak;
    tcu_attention_forward(d_out, d_lse, d_qkv, NULL, NULL, B, T, NH, KVH, hs, g_s);
    const size_t unsized = tcu_cudnn_calls() - calls0;
    tcu_mem_stats(&live0, &peak);
    const size_t sb = tcu_attention_scratch_bytes(B, T, NH, KVH, hs);
    tcu_mem_stats(&live1, &peak);
    tap_ok(unsized == 0 && live1 == live0, "%s: an unsized forward ran on cuDNN %zu times "
           "(expected 0); sizing allocated %zd bytes (expected 0)", tag, unsized,
           (ssize_t)(live1 - live0));
    calls0 = tcu_cudnn_calls();
    poison(d_out, no * 2), poison(d_lse, nl * 4);
    tcu_attention_forward(d_out, d_lse, d_qkv, NULL, NULL, B, T, NH, KVH, hs, g_s);
    float *out1 = get_bf16(d_out, no), *lse1 = get_f32(d_lse, nl);
    check_close(L("attention_forward %s: out", tag), out1, h.out, no, 0, RTOL_BF16, h.oabs,
                2 * U_BF16);
    check_close(L("attention_forward %s: lse", tag), lse1, h.lse, nl, 1e-4, 1e-5, NULL, 0);
    poison(d_out, no * 2), poison(d_lse, nl * 4);
    tcu_attention_forward(d_out, d_lse, d_qkv, NULL, NULL, B, T, NH, KVH, hs, g_s);
    size_t dif = ndiff(get_bf16(d_out, no), out1, no, 4) + ndiff(get_f32(d_lse, nl), lse1, nl, 4);
    tap_ok(dif == 0, "attention_forward %s: run twice, out and lse bit-identical (%zu differ)", tag,
           dif);

    float *outb = hf(no);
    for (size_t i = 0; i < no; i++) outb[i] = rbf16(h.out[i]);
    tsr_bf16 *d_dout = new_bf16(h.dout, no), *d_g = d16(nq), *d_ob = new_bf16(outb, no);
    float *d_lh = new_f32(h.lse, nl);
    void *d_scratch = dalloc(sb);
    float *g1 = cudnn_bwd(a, d_g, d_dout, d_qkv, d_ob, d_lh, d_scratch, nq);
    float *zero = hf(nq);
    memset(zero, 0, nq * sizeof(float));
    float *extra = absdiff(h.ref, zero, nq, (float)U_BF16, h.mag, (float)(2 * U_BF16));
    check_close(L("attention_backward %s: dqkv = (scratch %zu bytes)", tag, sb), g1, h.ref, nq, 0,
                RTOL_BF16, extra, 1.0);
    dif = ndiff(cudnn_bwd(a, d_g, d_dout, d_qkv, d_ob, d_lh, d_scratch, nq), g1, nq, 4);
    tap_ok(dif == 0, "attention_backward %s: the deterministic graph run twice, dqkv "
           "bit-identical (%zu differ)", tag, dif);
    const size_t ran = tcu_cudnn_calls() - calls0;
    tap_ok(ran == 4, "%s: cuDNN ran the 2 forwards and 2 backwards (tcu_cudnn_calls: %zu)%s%s", tag,
           ran, tcu_cudnn_last_error()[0] ? "; last failure: " : "", tcu_cudnn_last_error());
    scope_end(tag);
}

/* no plan for case a (why): skipped where cuDNN cannot run here (no library, not sm_90, the
 * emulators, where cudnnCreate finds no GPU), else failed with the reason */
static void cudnn_no_plan(const att_cfg *a, const char *why) {
    char name[256] = "";
    tcu_device_info(name, sizeof name, NULL, NULL, NULL);
    const char *skip = tcu_cudnn_load();
    if (!skip && g_sm != 90) skip = "not an sm_90 device";
    if (!skip && strstr(name, "emulator") && !strncmp(why, "cudnnCreate", 11)) skip = why;
    for (int k = 0; k < CUDNN_CHECKS; k++) {
        if (skip) tap_skip(L("cuDNN attention T=%d hs=%d", a->T, a->hs), skip);
        else tap_ok(0, "cuDNN attention T=%d hs=%d: no plan on sm_90 with cuDNN %zu: %s", a->T,
                    a->hs, tcu_cudnn_version(), why);
    }
}

static void run_cudnn(void) {
    tap_diag("next: cuDNN's fused attention (tests/gpu/gpu_ops_cudnn.c)");
    tcu_cudnn_set_backend(TCU_ATT_CUDNN);
    tcu_cudnn_set_fatal(0);
    for (size_t i = 0; i < NCASES(CUDNN_ATT); i++) {
        const att_cfg *a = &CUDNN_ATT[i];
        const tcu_cudnn_shape sh = {a->B, a->T, a->NH, a->KVH, a->hs};
        tcu_cudnn_plan_info fi, bi;
        char why[512] = "";
        if (tcu_cudnn_plan_info_of(sh, 0, &fi, why, sizeof why) ||
            tcu_cudnn_plan_info_of(sh, 1, &bi, why, sizeof why)) {
            cudnn_no_plan(a, why);
            continue;
        }
        tap_diag("cuDNN plans: forward engine %lld, %zu bytes, %.0f ms; backward engine %lld, "
                 "%zu bytes, %.0f ms", (long long)fi.engine, fi.ws, fi.build_ms,
                 (long long)bi.engine, bi.ws, bi.build_ms);
        test_cudnn(a);
    }
    tcu_cudnn_set_fatal(1);
    tcu_cudnn_set_backend(TCU_ATT_OWN);
}
