/* test_mla_decode.c — decoding multi-head latent attention over its compressed cache
 * (src/model/mixer_mla.c, kernels/cpu/cpu_mla.c cpu_mla_decode; docs/models.md "DeepSeek"): each
 * MLA layer keeps a position's normed latent and turned RoPE key only, kv_lora_rank +
 * qk_rope_head_dim numbers, and the decode absorbs kv_b_proj's key rows into the queries and its
 * value rows after the weighted sum. Two tiny models:
 *   - V3-like: the queries' low-rank path, interleaved RoPE pairs, YaRN with mscale and
 *     mscale_all_dim, the document mask (the prompts hold an end-of-text token);
 *   - V2-Lite-like: q_proj, rotate-half pairs, no scaling, a second MLA layer.
 * For each:
 *   - model_kv_bytes prices the compressed cache: (kv_lora_rank + qk_rope_head_dim) floats a
 *     position a layer, not the expanded keys and values;
 *   - a prompt of 12 fed in chunks of 8, then 40 tokens one at a time: the cache's next-token
 *     probabilities at every position equal the no-cache forward's (model_forward_last: the
 *     training path's expanded keys and values) within 1e-5, and greedy gives its tokens;
 *   - batched (gen_batch_run, 3 slots, prompts of 12, 9, 14): each prompt's greedy tokens equal
 *     the one-sequence cache's.
 * And DeepSeek-V3's shapes: 576 numbers a token a layer against 128 heads x (192 + 128) = 40,960
 * expanded, 71x fewer (docs/models.md).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate/gen_batch.h"
#include "model/decoder.h"
#include "model/model.h"
#include "ops.h"
#include "tap.h"
#include "tiny_models.h"

enum { P = 12, GEN = 40, NP = 3, T = 14 + GEN, V = 48, EOT = V - 1 };
static const int PLEN[NP] = {12, 9, 14};

static tsr_model_config base(void) {
    tsr_model_config c = tiny_model(0, 32, 4, V, 16); /* (n_layer: the cases') */
    c.pos = TSR_POS_ROPE, c.norm = TSR_NORM_RMSNORM, c.bias = 0, c.tie_embeddings = 0;
    c.mlp = TSR_MLP_SWIGLU, c.intermediate_size = 48;
    c.rope_theta = 1000, c.init_std = 0.3; /* peaked distributions: no near-ties for greedy */
    c.kv_lora_rank = 16, c.qk_nope_head_dim = 8, c.qk_rope_head_dim = 8, c.v_head_dim = 6;
    return c;
}

static tsr_model_config v3_like(void) {
    tsr_model_config c = base();
    c.n_layer = 1, c.q_lora_rank = 12, c.rope_interleave = 1;
    c.rope_scaling = TSR_ROPE_SCALING_YARN, c.rope_factor = 4, c.rope_original_max_pos = 32;
    c.rope_mscale = 0.9, c.rope_mscale_all_dim = 0.6;
    c.attn_mask = TSR_MASK_DOCUMENT, c.eot_token = EOT;
    return c;
}

static tsr_model_config v2lite_like(void) {
    tsr_model_config c = base();
    c.n_layer = 2;
    return c;
}

static void build(tsr_model *m, const tsr_model_config *c) {
    char why[512] = "";
    if (model_config_check(c, why, sizeof why)) {
        fprintf(stderr, "test_mla_decode: config refused: %s\n", why);
        exit(1);
    }
    model_init(m, c, T, &tsr_cpu_ops);
    model_alloc_params(m);
    model_init_weights(m, 1357);
    model_alloc_acts(m, 1, T);
}

static int argmax(const float *p, int n) {
    int best = 0;
    for (int j = 1; j < n; j++)
        if (p[j] > p[best]) best = j;
    return best;
}

/* n tokens below the end-of-text id; with eot, one of them (the sixth) is it */
static void prompt(int32_t *tok, int n, uint64_t s, int eot) {
    for (int t = 0; t < n; t++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tok[t] = (int32_t)((s >> 33) % (V - 1));
    }
    if (eot && n > 6) tok[5] = EOT;
}

static void test_bytes(const tsr_model *m, const char *name) {
    const size_t per = (size_t)(m->kvr + m->dr) * sizeof(float);
    tap_ok(model_kv_bytes(m, T) == per * (size_t)m->LX * T,
           "%s: the cache keeps %d + %d floats a position on each of %d MLA layers "
           "(model_kv_bytes %zu; expanded keys and values: %zu)", name, m->kvr, m->dr, m->LX,
           model_kv_bytes(m, T),
           (size_t)m->NH * (m->dn + m->dr + m->dv) * sizeof(float) * m->LX * T);
}

/* the prompt in chunks of 8, then a token at a time: the cache's probabilities at every
 * position against the no-cache forward; greedy against re-running the whole sequence */
static void test_single(tsr_model *m, const char *name, int eot) {
    tsr_kv_cache kv;
    model_kv_init(&kv, m, T, 8);
    float *probs = calloc((size_t)m->Vp, sizeof(float));
    int32_t seq[P + GEN], ref[P + GEN];
    prompt(seq, P, 99, eot);
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
    tap_ok(worst <= 1e-5, "%s: the compressed cache's next-token probabilities = the no-cache "
           "forward's at %d positions (max |diff| %.3g <= 1e-5)", name, GEN, worst);
    tap_ok(memcmp(seq, ref, sizeof ref) == 0, "%s: greedy, %d tokens after a prompt of %d fed in "
           "chunks of 8: the same tokens as the no-cache forward", name, GEN, P);
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

static void test_slots(tsr_model *m, const char *name, int eot) {
    tsr_decoder d;
    model_infer_decoder(m, &d);
    int32_t prompts[NP][T], ids[NP][GEN], want[GEN];
    gen_seq seqs[NP];
    for (int p = 0; p < NP; p++) {
        prompt(prompts[p], PLEN[p], 7 + (uint64_t)p, eot);
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

static void run(const tsr_model_config *c, const char *name) {
    tsr_model m;
    build(&m, c);
    const int eot = c->attn_mask == TSR_MASK_DOCUMENT;
    test_bytes(&m, name);
    test_single(&m, name, eot);
    test_slots(&m, name, eot);
    model_free(&m);
}

/* DeepSeek-V3's attention shapes (the layout only: nothing allocated) */
static void test_v3_shapes(void) {
    tsr_model_config c = base();
    c.n_layer = 61, c.d_model = 7168, c.n_head = 128, c.q_lora_rank = 1536;
    c.kv_lora_rank = 512, c.qk_nope_head_dim = 128, c.qk_rope_head_dim = 64, c.v_head_dim = 128;
    c.vocab_size = 129280, c.intermediate_size = 18432;
    tsr_model m;
    model_init(&m, &c, 4096, &tsr_cpu_ops);
    const size_t latent = model_kv_bytes(&m, 1) / sizeof(float) / (size_t)m.L;
    const size_t expanded = (size_t)m.NH * (m.dn + m.dr + m.dv);
    tap_ok(latent == 576 && expanded == 40960 && expanded / latent == 71,
           "DeepSeek-V3's shapes: %zu numbers a token a layer in the cache, against %zu for the "
           "expanded keys and values (%zux fewer)", latent, expanded, expanded / latent);
    model_free(&m);
}

int main(void) {
    tap_plan(9);
    const tsr_model_config a = v3_like(), b = v2lite_like();
    run(&a, "V3-like");
    run(&b, "V2-Lite-like");
    test_v3_shapes();
    return tap_done();
}
