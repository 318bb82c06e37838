/* test_init_threads.c — the initial weights do not depend on the threads that draw them, and the
 * CPU backend's large blocks come back zeroed and untouched (src/model/model.c
 * model_init_weights, kernels/cpu/cpu_ops.c):
 *   - a model of 17M weights (its store 68 MB: a mapped block) drawn on 1, 2 and 3 threads: the
 *     same bits (the generator is counter-based; the threads split each tensor's elements);
 *   - a MoE model's store likewise (the router and experts' streams);
 *   - a fresh 64 MiB block reads as zeros and is not resident before it is written
 *     (cpu_ops_unresident_bytes), resident after; freed, it leaves the live count as it was;
 *   - a block under 64 MiB (the heap) reads as zeros;
 *   - model_init_weights_range (a ZeRO-3 rank's pieces) gives the full initialisation's bits over
 *     ranges that start and end inside tensors, span several, sit in wte's padded rows or cover
 *     everything; dense and MoE. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_table.h"
#include "model/model.h"
#include "ops.h"
#include "tap.h"
#include "tiny_models.h"

static tsr_model_config big_config(int moe) {
    tsr_config defaults;
    cfgtab_defaults(&defaults);
    tsr_model_config c = defaults.model;
    c.n_layer = 2;
    c.d_model = 512;
    c.n_head = 8;
    c.vocab_size = 32768; /* wte 16.8M weights: the store passes 64 MiB */
    c.max_seq_len = 64;
    if (moe) {
        c.norm = TSR_NORM_RMSNORM;
        c.mlp = TSR_MLP_SWIGLU;
        c.pos = TSR_POS_ROPE;
        c.intermediate_size = 256;
        c.moe_experts = 4;
        c.moe_top_k = 2;
        c.moe_intermediate_size = 128;
    }
    return c;
}

/* the store of config c drawn on `threads` threads (seed 99) */
static float *draw(const tsr_model_config *c, int threads, size_t *n) {
    tsr_model m;
    cpu_ops_set_threads(threads);
    model_init(&m, c, 64, &tsr_cpu_ops);
    model_alloc_params(&m);
    model_init_weights(&m, 99);
    *n = m.n_params;
    float *copy = malloc(m.n_params * sizeof(float));
    memcpy(copy, m.params, m.n_params * sizeof(float));
    model_free(&m);
    return copy;
}

static void same_on_threads(int moe) {
    tsr_model_config c = big_config(moe);
    size_t n1, n2, n3;
    float *a = draw(&c, 1, &n1), *b = draw(&c, 2, &n2), *d = draw(&c, 3, &n3);
    size_t nonzero = 0;
    for (size_t i = 0; i < n1; i++) nonzero += a[i] != 0.0f;
    tap_ok(n1 == n2 && n2 == n3 && !memcmp(a, b, n1 * sizeof(float)) &&
               !memcmp(a, d, n1 * sizeof(float)) && nonzero > n1 / 2,
           "%s, %zu weights (%zu not zero): drawn on 1, 2 and 3 threads, the same bits",
           moe ? "MoE model" : "dense model", n1, nonzero);
    free(a), free(b), free(d);
}

/* the flat ranges [lo, hi) of the store of config c drawn alone equal the whole store's slices */
static void ranges_equal_whole(int moe) {
    tsr_model_config c = tiny_model(2, 32, 4, 100, 64);
    c.max_seq_len = 16;
    if (moe) {
        c.norm = TSR_NORM_RMSNORM, c.mlp = TSR_MLP_SWIGLU, c.pos = TSR_POS_ROPE;
        c.intermediate_size = 48, c.moe_experts = 4, c.moe_top_k = 2;
    }
    tsr_model m;
    model_init(&m, &c, 16, &tsr_cpu_ops);
    model_alloc_params(&m);
    model_init_weights(&m, 7);
    const size_t n = m.n_params;
    const tsr_param_info *wte = &m.params_info[TSR_P_WTE];
    const size_t pad = wte->offset + (size_t)m.V * m.C; /* wte's first padded row */
    size_t cuts[][2] = {{0, n}, {0, 1}, {n - 1, n}, {5, 3000}, {pad - 10, pad + 40},
                        {pad + 3, pad + 50}, {n / 3, 2 * n / 3}, {n / 2, n / 2 + 1}};
    int same = 1, ranges = 0;
    float *buf = malloc(n * sizeof(float));
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        const size_t lo = cuts[i][0], hi = cuts[i][1];
        for (size_t k = 0; k < hi - lo; k++) buf[k] = -1.0f; /* every element written */
        model_init_weights_range(&m, 7, lo, hi, buf);
        same &= !memcmp(buf, m.params + lo, (hi - lo) * sizeof(float));
        ranges++;
    }
    /* every split of the store into 7 consecutive ranges, as the shards' pieces cut it */
    for (size_t r = 0, at = 0; r < 7; r++) {
        size_t next = r == 6 ? n : at + n / 7 + r;
        model_init_weights_range(&m, 7, at, next, buf + at);
        at = next;
    }
    same &= !memcmp(buf, m.params, n * sizeof(float));
    tap_ok(same, "%s, %zu weights: %d ranges (inside tensors, across them, wte's padded rows, the "
                 "whole) and 7 consecutive ones drawn alone equal the full initialisation's bits",
           moe ? "MoE model" : "dense model", n, ranges);
    free(buf);
    model_free(&m);
}

static void big_blocks(void) {
    const size_t n = (size_t)64 << 20, live = cpu_ops_live_bytes();
    const size_t before = cpu_ops_unresident_bytes();
    unsigned char *p = tsr_cpu_ops.alloc(n);
    const size_t fresh = cpu_ops_unresident_bytes() - before;
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i += 4096) nonzero += p[i] != 0;
    memset(p, 1, n);
    const size_t written = cpu_ops_unresident_bytes() - before;
    tap_ok(nonzero == 0 && fresh >= n && written == 0,
           "a fresh 64 MiB block: zeros, %zu bytes not resident before it is written, %zu after",
           fresh, written);
    tsr_cpu_ops.free(p);
    unsigned char *q = tsr_cpu_ops.alloc(1 << 20);
    nonzero = 0;
    for (size_t i = 0; i < (1 << 20); i++) nonzero += q[i] != 0;
    tsr_cpu_ops.free(q);
    tap_ok(cpu_ops_live_bytes() == live && nonzero == 0,
           "freed, the live count is back (%zu B); a 1 MiB heap block reads as zeros", live);
}

int main(void) {
    tap_plan(6);
    same_on_threads(0);
    same_on_threads(1);
    ranges_equal_whole(0);
    ranges_equal_whole(1);
    big_blocks();
    return tap_done();
}
