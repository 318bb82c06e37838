/* test_hybrid_decode.c — a hybrid linear-attention model (model.layer_types with
 * linear_attention layers: Hugging Face Qwen3-Next's Gated DeltaNet; docs/deltanet.md "Wiring")
 * and Qwen3-Next's gated attention on its full layer (model.attn_output_gate), outside the float64
 * reference (tests/reference/test_hybrid.py):
 *   - the parameter layout: the attention tensors stacked over the full layers only, the
 *     DeltaNet's over the linear ones, model_layer_slot counting each kind in layer order;
 *     model_kv_bytes counts the full layers' keys and values only;
 *   - decoding (model_infer_forward: the linear layers carry their state and convolution tail in
 *     the cache): over a packed row of three documents (the second and third start inside the
 *     sequence), a prompt in chunks of 5 then one token at a time gives the no-cache forward's
 *     next-token probabilities at every position within 1e-5 (sgemv vs sgemm rounding), and
 *     greedy decoding (temperature 0) of 24 tokens gives the same tokens as re-running the
 *     whole sequence each step (model_forward_last);
 *   - block activation checkpointing on every layer: the same loss and gradients, bit for bit,
 *     as without (the linear layers recompute their DeltaNet from the kept input).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode_checks.h"
#include "model/model.h"
#include "ops.h"
#include "tap.h"
#include "tiny_models.h"

enum { T = 48, V = 40, EOT = V - 1, P = 12, GEN = 24 };

static tsr_model_config hybrid(void) {
    tsr_model_config c = tiny_linear_layers(tiny_llama(tiny_model(4, 24, 4, V, 8)),
                                            "linear_attention,linear_attention,full_attention,linear_attention");
    c.intermediate_size = 40;
    c.init_std = 0.1;
    c.attn_mask = TSR_MASK_DOCUMENT;
    c.eot_token = EOT;
    c.attn_output_gate = 1; /* the full layer's output gated, as Qwen3-Next's */
    return c;
}

static void build(tsr_model *m, const tsr_model_config *c) { dec_build(m, c, T, 4321); }

static void test_layout(const tsr_model *m) {
    const tsr_param_info *q = &m->params_info[TSR_P_QKVW], *d = &m->params_info[TSR_P_DNQKVW];
    const int slots[4] = {model_layer_slot(m, TSR_P_DNQKVW, 0), model_layer_slot(m, TSR_P_DNQKVW, 1),
                          model_layer_slot(m, TSR_P_QKVW, 2), model_layer_slot(m, TSR_P_DNQKVW, 3)};
    tap_ok(m->LL == 3 && m->LA == 1 && q->shape[0] == 1 && d->shape[0] == 3 &&
               d->shape[1] == 2 * 2 * 8 + 4 * 6 && slots[0] == 0 && slots[1] == 1 &&
               slots[2] == 0 && slots[3] == 2 && model_layer_slot(m, TSR_P_QKVW, 1) == -1 &&
               model_layer_slot(m, TSR_P_DNOW, 2) == -1,
           "layout: qkvw stacked over the 1 full layer, dnqkvw (3, %lld, 24) over the 3 linear "
           "ones; slots by kind in layer order", (long long)d->shape[1]);
    tap_ok(model_kv_bytes(m, 100) == 2 * (size_t)1 * 100 * m->KVH * m->hs * sizeof(float),
           "model_kv_bytes counts the full layer's keys and values only (%zu bytes for 100 "
           "positions)", model_kv_bytes(m, 100));
}

/* a packed row: documents of 9 and 15 tokens ending with EOT, then one running on */
static void make_row(int32_t *tok) {
    dec_ids(tok, T, 0x9e3779b97f4a7c15ull, EOT);
    tok[8] = tok[23] = EOT;
}

static void test_kv_probs(tsr_model *m, const int32_t *tok) {
    tsr_kv_cache kv;
    model_kv_init(&kv, m, T, 5);
    float *probs = calloc((size_t)m->Vp, sizeof(float));
    double worst = 0.0;
    for (int n = P; n <= T; n++) {
        if (n == P) model_infer_forward(m, &kv, tok, P, probs);
        else model_infer_forward(m, &kv, tok + n - 1, 1, probs);
        const float *want = model_forward_last(m, tok, n);
        for (int j = 0; j < m->Vp; j++) {
            double e = fabs((double)probs[j] - want[j]);
            if (!(e <= worst)) worst = e;
        }
    }
    tap_ok(worst <= 1e-5 && kv.seg == 24, "decode: the cache's state over a packed row (prompt "
           "in chunks of 5, then a token at a time) = the no-cache forward at every position "
           "(max |diff| %.3g <= 1e-5; segment at %d, want 24)", worst, kv.seg);
    model_kv_free(&kv, m);
    free(probs);
}

static void test_greedy(tsr_model *m, const int32_t *tok) {
    int32_t a[T], b[T];
    memcpy(a, tok, P * sizeof *a);
    memcpy(b, tok, P * sizeof *b);
    tsr_kv_cache kv;
    model_kv_init(&kv, m, T, 5);
    float *probs = calloc((size_t)m->Vp, sizeof(float));
    model_infer_forward(m, &kv, a, P, probs);
    for (int n = P; n < P + GEN; n++) {
        a[n] = dec_argmax(probs, m->V);
        if (n + 1 < P + GEN) model_infer_forward(m, &kv, a + n, 1, probs);
        b[n] = dec_argmax(model_forward_last(m, b, n), m->V);
    }
    tap_ok(memcmp(a, b, sizeof(int32_t) * (P + GEN)) == 0, "decode: greedy (temperature 0) "
           "with the cache gives the same %d tokens as re-running the whole sequence", GEN);
    model_kv_free(&kv, m);
    free(probs);
}

static void test_ckpt_bits(const tsr_model_config *base, const int32_t *tok) {
    int32_t tg[T];
    for (int t = 0; t < T; t++) tg[t] = t + 1 < T ? tok[t + 1] : -1;
    tsr_model_config cc = *base;
    cc.activation_checkpointing = TSR_ACTCKPT_BLOCK;
    tsr_model m0, m1;
    build(&m0, base);
    build(&m1, &cc);
    double l0 = model_forward(&m0, tok, tg, 1, T), l1 = model_forward(&m1, tok, tg, 1, T);
    model_backward(&m0, tok, tg, 1, T, 1.0f);
    model_backward(&m1, tok, tg, 1, T, 1.0f);
    tap_ok(m1.n_ckpt == 4 && l0 == l1 &&
               memcmp(m0.grads, m1.grads, m0.n_params * sizeof(float)) == 0,
           "block activation checkpointing of all 4 layers: the same loss (%.7f) and gradients, "
           "bit for bit", l0);
    model_free(&m0);
    model_free(&m1);
}

int main(void) {
    tap_plan(5);
    const tsr_model_config c = hybrid();
    tsr_model m;
    build(&m, &c);
    int32_t tok[T];
    make_row(tok);
    test_layout(&m);
    test_kv_probs(&m, tok);
    test_greedy(&m, tok);
    test_ckpt_bits(&c, tok);
    model_free(&m);
    return tap_done();
}
