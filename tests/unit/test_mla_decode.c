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
#include <stddef.h>

#include "decode_checks.h"
#include "model/model.h"
#include "ops.h"
#include "tap.h"
#include "tiny_models.h"

enum { T = DEC_T, V = 48, EOT = V - 1 };

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

static void test_bytes(const tsr_model *m, const char *name) {
    const size_t per = (size_t)(m->kvr + m->dr) * sizeof(float);
    tap_ok(model_kv_bytes(m, T) == per * (size_t)m->LX * T,
           "%s: the cache keeps %d + %d floats a position on each of %d MLA layers "
           "(model_kv_bytes %zu; expanded keys and values: %zu)", name, m->kvr, m->dr, m->LX,
           model_kv_bytes(m, T),
           (size_t)m->NH * (m->dn + m->dr + m->dv) * sizeof(float) * m->LX * T);
}

/* the cache's probabilities at every position against the no-cache forward; greedy against
 * re-running the whole sequence (dec_single_run) */
static void test_single(tsr_model *m, const char *name, dec_prompts pr) {
    const dec_single r = dec_single_run(m, pr);
    tap_ok(r.worst <= 1e-5, "%s: the compressed cache's next-token probabilities = the no-cache "
           "forward's at %d positions (max |diff| %.3g <= 1e-5)", name, DEC_GEN, r.worst);
    tap_ok(r.same, "%s: greedy, %d tokens after a prompt of %d fed in chunks of 8: the same "
           "tokens as the no-cache forward", name, DEC_GEN, DEC_P);
}

static void run(const tsr_model_config *c, const char *name) {
    tsr_model m;
    dec_build(&m, c, T, 1357);
    /* ids below the end-of-text id; with the document mask, the sixth is it */
    const dec_prompts pr = {EOT, c->attn_mask == TSR_MASK_DOCUMENT ? EOT : -1};
    test_bytes(&m, name);
    test_single(&m, name, pr);
    dec_check_slots(&m, name, pr);
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
