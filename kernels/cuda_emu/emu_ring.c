/* emu_ring.c — the host emulator of cuda_ring.cu (emu.h): ring attention's blocks (context
 * parallelism). */
#include <stdlib.h>
#include <string.h>

#include "emu.h"

static const tsr_ops *const cpu = &tsr_cpu_ops;

/* rows 0..n-1 of each of B sequences of bs rows (ld elements apart, the first w of them read) of
 * a bf16 matrix, widened into an fp32 temporary laid out alike (the rows not read are 0) */
static float *widen_rows(const void *src, int B, int bs, int n, size_t ld, size_t w,
                         const char *what) {
    float *t = emu_host_alloc((size_t)B * bs * ld * sizeof *t, what);
    memset(t, 0, (size_t)B * bs * ld * sizeof *t);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) {
            const size_t at = ((size_t)b * bs + i) * ld;
            emu_widen_into(t + at, (const tsr_bf16 *)src + at, w);
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
