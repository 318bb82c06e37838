/* test_init_threads.c — the initial weights do not depend on the threads that draw them, and the
 * CPU backend's large blocks come back zeroed and untouched (src/model/model.c
 * model_init_weights, kernels/cpu/cpu_ops.c):
 *   - a model of 17M weights (its store 68 MB: a mapped block) drawn on 1, 2 and 3 threads: the
 *     same bits (the generator is counter-based; the threads split each tensor's elements);
 *   - a MoE model's store likewise (the router and experts' streams);
 *   - a fresh 64 MiB block reads as zeros and is not resident before it is written
 *     (cpu_ops_unresident_bytes), resident after; freed, it leaves the live count as it was;
 *   - a block under 64 MiB (the heap) reads as zeros. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_table.h"
#include "model/model.h"
#include "ops.h"
#include "tap.h"

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
    tap_plan(4);
    same_on_threads(0);
    same_on_threads(1);
    big_blocks();
    return tap_done();
}
