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
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_table.h"
#include "generate/gen_batch.h"
#include "generate/gen_sample.h"
#include "model/decoder.h"
#include "model/model.h"
#include "ops.h"
#include "tap.h"

enum { W = 4, P = 12, GEN = 40, NP = 3, T = 14 + GEN, V = 48 };
static const int PLEN[NP] = {12, 9, 14};

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
    char why[512] = "";
    if (model_config_check(c, why, sizeof why)) {
        fprintf(stderr, "test_kv_window: config refused: %s\n", why);
        exit(1);
    }
    model_init(m, c, T, &tsr_cpu_ops);
    model_alloc_params(m);
    model_init_weights(m, 2468);
    model_alloc_acts(m, 1, T);
    /* sinks on the scale of the scores (init_std 0.3 makes them ~10), so that they hold a
     * share of each row's softmax that shows in the probabilities */
    const tsr_param_info *s = &m->params_info[TSR_P_SINKS];
    for (size_t i = 0; i < s->numel; i++) m->params[s->offset + i] = (float)(4 + 2 * (i % 4));
}

static int argmax(const float *p, int n) {
    int best = 0;
    for (int j = 1; j < n; j++)
        if (p[j] > p[best]) best = j;
    return best;
}

static void prompt(int32_t *tok, int n, uint64_t s) {
    for (int t = 0; t < n; t++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tok[t] = (int32_t)((s >> 33) % V);
    }
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

/* the prompt in chunks of 8, then a token at a time: the cache's probabilities at every
 * position against the no-cache forward; greedy against re-running the whole sequence */
static void test_single(tsr_model *m, const char *name, int32_t *seq) {
    tsr_kv_cache kv;
    model_kv_init(&kv, m, T, 8);
    float *probs = calloc((size_t)m->Vp, sizeof(float));
    int32_t ref[P + GEN];
    prompt(seq, P, 99);
    memcpy(ref, seq, sizeof ref);
    model_infer_forward(m, &kv, seq, P, probs);
    double worst = 0.0;
    for (int n = P; n < P + GEN; n++) {
        const float *want = model_forward_last(m, seq, n);
        for (int j = 0; j < m->Vp; j++) {
            double e = fabs((double)probs[j] - want[j]);
            if (!(e <= worst)) worst = e;
        }
        seq[n] = argmax(probs, m->V);
        ref[n] = argmax(model_forward_last(m, ref, n), m->V);
        if (n + 1 < P + GEN) model_infer_forward(m, &kv, seq + n, 1, probs);
    }
    tap_ok(worst <= 1e-5, "%s: the ring cache's next-token probabilities = the no-cache "
           "forward's at %d positions (max |diff| %.3g <= 1e-5)", name, GEN, worst);
    tap_ok(memcmp(seq, ref, sizeof ref) == 0, "%s: greedy, %d tokens after a prompt of %d fed in "
           "chunks of 8 (> W = %d): the same tokens as the no-cache forward", name, GEN, P, W);
    model_kv_free(&kv, m);
    free(probs);
}

/* the one-sequence cache's greedy completion (GEN tokens) of tok (n) */
static void greedy_one(const tsr_model *m, const int32_t *tok, int n, int32_t *out) {
    tsr_kv_cache kv;
    model_kv_init(&kv, m, T, 8);
    float *probs = calloc((size_t)m->Vp, sizeof(float));
    model_infer_forward(m, &kv, tok, n, probs);
    for (int i = 0; i < GEN; i++) {
        out[i] = argmax(probs, m->V);
        if (i + 1 < GEN) model_infer_forward(m, &kv, &out[i], 1, probs);
    }
    model_kv_free(&kv, m);
    free(probs);
}

static void test_slots(tsr_model *m, const char *name) {
    tsr_decoder d;
    model_infer_decoder(m, &d);
    int32_t prompts[NP][T], ids[NP][GEN], want[GEN];
    gen_seq seqs[NP];
    for (int p = 0; p < NP; p++) {
        prompt(prompts[p], PLEN[p], 7 + (uint64_t)p);
        seqs[p] = (gen_seq){.prompt = prompts[p], .n_prompt = PLEN[p], .ids = ids[p]};
    }
    gen_batch_opts o = {.sampling = {.temperature = 0, .top_p = 1.0}, .max_new = GEN,
                        .batch = NP, .cap = T};
    gen_batch_run(&d, &o, seqs, NP);
    int same = 1;
    for (int p = 0; p < NP; p++) {
        greedy_one(m, prompts[p], PLEN[p], want);
        same &= seqs[p].n == GEN && memcmp(ids[p], want, sizeof want) == 0;
    }
    tap_ok(same, "%s: batched greedy, 3 slots (prompts of 12, 9, 14; %d tokens each) = the "
           "one-sequence cache's tokens", name, GEN);
}

static void run(const tsr_model_config *c, const char *name, int sliding) {
    tsr_model m;
    build(&m, c);
    int32_t seq[P + GEN];
    test_layout(&m, name, sliding);
    test_single(&m, name, seq);
    test_slots(&m, name);
    model_free(&m);
}

int main(void) {
    tap_plan(8);
    const tsr_model_config g = gemma_like(), o = gptoss_like();
    run(&g, "Gemma-3-like", 2);
    run(&o, "gpt-oss-like", 1);
    return tap_done();
}
