/* test_kv_window.c — the rolling KV window (docs/decoder.md "Rolling window"): a sliding layer
 * (model.layer_types sliding_attention, model.sliding_window W) keeps only its last W keys and
 * values in the decode cache, a ring of W positions; full layers keep the whole context.
 * Two tiny models, W = 4:
 *   - Gemma-3-like: sliding, sliding, full; sandwich norms, the embedding times sqrt(d), GeGLU,
 *     per-head QK-norm, one key/value head, query_pre_attn_scalar, the local RoPE base, attention
 *     and final-logit soft-capping;
 *   - gpt-oss-like: sliding, full; attention sinks (4 .. 10, on the scale of the scores), q/k/v
 *     biases, a MoE of 4 experts (top 2,
 *     router and expert biases, gpt-oss's clamped unit).
 * For each:
 *   - model_kv_bytes and the cache's rings: W positions on a sliding layer, the context on a
 *     full one;
 *   - a prompt of 12 fed in chunks of 8 (longer than W: the chunk's keys wrap round the ring),
 *     then 40 tokens one at a time: the cache's next-token probabilities at every position equal
 *     the no-cache forward's (model_forward_last over the whole sequence: the full attention
 *     with its window, sinks and soft caps) within 1e-5 (sgemv vs sgemm rounding);
 *   - greedy (temperature 0): the 40 tokens equal those of re-running the whole sequence;
 *   - batched (gen_batch_run, 3 slots, 3 prompts of different lengths, rings of every slot):
 *     the greedy tokens of each prompt equal the one-sequence cache's.
 */
#include <stddef.h>
#include <stdio.h>

#include "config/config_table.h"
#include "decode_checks.h"
#include "model/model.h"
#include "ops.h"
#include "tap.h"

enum { W = 4, T = DEC_T, V = 48 };

static tsr_model_config base(void) {
    tsr_config defaults;
    cfgtab_defaults(&defaults);
    tsr_model_config c = defaults.model;
    c.d_model = 32, c.n_head = 4, c.vocab_size = V, c.vocab_multiple = 16;
    c.pos = TSR_POS_ROPE, c.norm = TSR_NORM_RMSNORM, c.bias = 0, c.tie_embeddings = 0;
    c.rope_theta = 1000, c.init_std = 0.3; /* peaked distributions: no near-ties for greedy */
    c.sliding_window = W;
    return c;
}

static tsr_model_config gemma_like(void) {
    tsr_model_config c = base();
    c.n_layer = 3, c.n_kv_head = 1, c.head_dim = 16;
    snprintf(c.layer_types, sizeof c.layer_types, "sliding_attention,sliding_attention,"
             "full_attention");
    c.mlp = TSR_MLP_GEGLU_TANH, c.intermediate_size = 48, c.qk_norm = 1, c.tie_embeddings = 1;
    c.norm_placement = TSR_NPLACE_SANDWICH, c.embed_scale = TSR_EMB_SCALE_SQRT_D;
    c.query_pre_attn_scalar = 12, c.rope_local_theta = 100;
    c.attn_logit_softcapping = 2.0, c.final_logit_softcapping = 3.0;
    return c;
}

static tsr_model_config gptoss_like(void) {
    tsr_model_config c = base();
    c.n_layer = 2, c.n_kv_head = 2, c.qkv_bias = 1, c.mlp = TSR_MLP_SWIGLU;
    snprintf(c.layer_types, sizeof c.layer_types, "sliding_attention,full_attention");
    c.attn_sinks = 1;
    c.moe_experts = 4, c.moe_top_k = 2, c.moe_intermediate_size = 24, c.moe_every = 1;
    c.moe_router_bias = 1, c.moe_expert_bias = 1, c.moe_act = TSR_MOE_ACT_GPTOSS;
    c.swiglu_limit = 7.0;
    return c;
}

static void build(tsr_model *m, const tsr_model_config *c) {
    dec_build(m, c, T, 2468);
    /* sinks on the scale of the scores (init_std 0.3 makes them ~10), so that they hold a
     * share of each row's softmax that shows in the probabilities */
    const tsr_param_info *s = &m->params_info[TSR_P_SINKS];
    for (size_t i = 0; i < s->numel; i++) m->params[s->offset + i] = (float)(4 + 2 * (i % 4));
}

static void test_layout(const tsr_model *m, const char *name, int sliding) {
    const int L = m->L;
    tsr_kv_cache kv;
    model_kv_init(&kv, m, T, 8);
    int ok = 1;
    for (int l = 0; l < L; l++) {
        const int la = model_layer_slot(m, TSR_P_QKVW, l), want = l < sliding ? W : T;
        ok &= kv.lcap[la] == want && model_kv_layer_cap(m, l, T) == want;
    }
    const size_t per = 2 * (size_t)m->KVH * m->hs * sizeof(float);
    const size_t want = per * ((size_t)sliding * W + (size_t)(L - sliding) * T);
    tap_ok(ok && model_kv_bytes(m, T) == want,
           "%s: the cache keeps %d positions on each of %d sliding layers, %d on the full ones "
           "(model_kv_bytes %zu, want %zu; a full cache: %zu)", name, W, sliding, T,
           model_kv_bytes(m, T), want, per * L * T);
    model_kv_free(&kv, m);
}

/* the cache's probabilities at every position against the no-cache forward; greedy against
 * re-running the whole sequence (dec_single_run: the prompt's chunks of 8 wrap round the ring) */
static void test_single(tsr_model *m, const char *name) {
    const dec_single r = dec_single_run(m, (dec_prompts){V, -1});
    tap_ok(r.worst <= 1e-5, "%s: the ring cache's next-token probabilities = the no-cache "
           "forward's at %d positions (max |diff| %.3g <= 1e-5)", name, DEC_GEN, r.worst);
    tap_ok(r.same, "%s: greedy, %d tokens after a prompt of %d fed in chunks of 8 (> W = %d): the "
           "same tokens as the no-cache forward", name, DEC_GEN, DEC_P, W);
}

static void run(const tsr_model_config *c, const char *name, int sliding) {
    tsr_model m;
    build(&m, c);
    test_layout(&m, name, sliding);
    test_single(&m, name);
    dec_check_slots(&m, name, (dec_prompts){V, -1});
    model_free(&m);
}

int main(void) {
    tap_plan(8);
    const tsr_model_config g = gemma_like(), o = gptoss_like();
    run(&g, "Gemma-3-like", 2);
    run(&o, "gpt-oss-like", 1);
    return tap_done();
}
