/* emu_decode.c — the host emulator of cuda_decode.cu (emu.h): batched decoding: attention over
 * the KV cache, the batch-invariant matmul. */
#include <stdlib.h>

#include "emu.h"

static const tsr_ops *const cpu = &tsr_cpu_ops;

/* Each row alone: its slot's cache widened (the layer's KVH heads, cap positions), the CPU's
 * attention_decode of one row (which stores the row's key and value), the output rounded, the
 * row's key and value rounded back into the slot (the cache a ring: position p at index p % cap,
 * as the CPU's) */
void tcu_attention_decode_var(tsr_bf16 *out, tsr_bf16 *kt, tsr_bf16 *v, const tsr_bf16 *qkv,
                              const float *alibi_slopes, const tsr_attn_var *var,
                              const int32_t *slot, const int32_t *pos, const int32_t *seg, int p0,
                              int seg0, int n, size_t slot_stride, int cap, int NH, int KVH,
                              int hs, tcu_stream s) {
    const char *what = "tcu_attention_decode";
    (void)s;
    REQUIRE_RULE(what, tcu_rule_decode, n, cap, NH, KVH, hs);
    tsr_attn_var vw;
    float *sk;
    var = emu_var(var, NH, &vw, &sk, what);
    const size_t per = (size_t)KVH * hs * cap, QKV = (size_t)(NH + 2 * KVH) * hs;
    float *k = emu_host_alloc(per * sizeof *k, what), *vv = emu_host_alloc(per * sizeof *vv, what);
    float *x = emu_host_alloc(QKV * sizeof *x, what);
    float *o = emu_host_alloc((size_t)NH * hs * sizeof *o, what);
    float *row = emu_host_alloc((size_t)cap * sizeof *row, what);
    for (int i = 0; i < n; i++) {
        int sl, p, sg;
        tcu_decode_row(slot, pos, seg, p0, seg0, i, &sl, &p, &sg);
        const size_t at = (size_t)sl * slot_stride;
        emu_widen_into(k, kt + at, per), emu_widen_into(vv, v + at, per);
        emu_widen_into(x, qkv + (size_t)i * QKV, QKV);
        cpu->attention_decode(o, k, vv, x, alibi_slopes, var, row, 1, p, 1, sg, cap, NH, KVH, hs);
        emu_round_into(out + (size_t)i * NH * hs, o, (size_t)NH * hs);
        for (int g = 0; g < KVH; g++)
            for (int d = 0; d < hs; d++) {
                const size_t kk = tcu_kv_key_at(g, d, p, hs, cap);
                const size_t vk = tcu_kv_value_at(g, d, p, hs, cap);
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
    REQUIRE_RULE(what, tcu_rule_matmul, N, IC, OC);
    float *wf = emu_widen(w, (size_t)OC * IC, what), *bf = bias ? emu_widen(bias, OC, what) : NULL;
    float *x = emu_widen(inp, (size_t)N * IC, what);
    float *o = emu_host_alloc((size_t)N * OC * sizeof *o, what);
    cpu->matmul_rows(o, x, wf, bf, N, IC, OC);
    emu_round_into(out, o, (size_t)N * OC);
    free(wf), free(bf), free(x), free(o);
}
