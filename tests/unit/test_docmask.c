/* test_docmask.c — model.attn_mask = document: packed examples do not see each other.
 *
 * A tiny model (GPT-2 style with learned positions, MPT style with ALiBi, and Llama/Qwen style
 * with RoPE: GQA 4:2, RMSNorm, SwiGLU, QK-norm, q/k/v biases, an untied head) gets one row of
 * T = 32 tokens holding three random examples: 9 tokens ending with the end-of-text token, 15
 * ending with it, and 8 cut by the end of the row (no end-of-text, as a window cut leaves them);
 * it is the second row of a batch of two.
 * Each example is also run alone, at the start of a row of its own (the rest of that row is
 * filler with no loss), with the targets it has in the packed row. Checked:
 *   - per-token losses of every example: packed = alone. The attention op gives the same bits
 *     (tests/unit/test_ops.c), and so does every row-wise op; sgemm may round a row differently
 *     depending on where it sits in the matrix and on the matrix's height, so the check allows
 *     1e-6 + 2e-6 |loss| (measured <= 1.4e-7 relative, on losses ~4; a leak across examples moves
 *     them by 1e-1) and reports how many losses are bitwise equal;
 *   - gradients: packed backward = the sum of the three alone backwards, per tensor
 *     ||packed - sum|| / ||sum|| <= 1e-5 (sums over 32 rows regrouped: fp32 rounding ~1e-7 .. 1e-6;
 *     a leak across examples moves them by 1e-2 and more);
 *   - the same row with attn_mask = causal does leak (the losses differ by > 1e-3): the check above
 *     can fail;
 *   - generation's KV-cache forward (model_infer_forward, chunks of 5 that do not line up with the
 *     end-of-text tokens, then one token at a time) gives the no-cache forward's next-token
 *     probabilities within 1e-5 at every position (they differ by sgemv vs sgemm rounding only);
 *   - model_acts_bytes counts the segment ids and positions; model_config_check rejects an
 *     eot_token outside the vocabulary, naming the key, the value and vocab_size.
 * The Llama/Qwen case runs again with the attention variants (docs/models.md): layer 0 sliding
 * with a window of 6 (shorter than two of the examples), layer 1 full, attention sinks and a
 * query_pre_attn_scalar of 10: the same checks, the KV-cache decode with the window and sinks
 * included.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "ops.h"
#include "tap.h"
#include "tiny_models.h"
#include "xorshift.h"

#define NCHECKS 23

enum { T = 32, V = 50, EOT = V - 1, NEX = 3 };
static const int LEN[NEX] = {9, 15, 8}; /* the first two end with EOT; sum = T */

static uint64_t rng = 0x2545f4914f6cdd1dull; /* xorshift64*: the test needs nothing external */
static uint32_t urand_below(uint32_t n) {
    return (uint32_t)((xorshift64s(&rng) >> 32) % n);
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "test_docmask: out of memory (%zu x %zu bytes)\n", n, size);
        exit(1);
    }
    return p;
}

static tsr_model_config tiny(tsr_pos_kind pos, tsr_attn_mask_kind mask) {
    tsr_model_config c = tiny_model(2, 32, 4, V, 16);
    if (pos == TSR_POS_ROPE) { /* RoPE positions restart per document, in training and decoding */
        c = tiny_llama(c);
        c.qkv_bias = 1;
        c.rope_theta = 100; /* fast turns over 32 positions: a wrong position shows */
    }
    c.pos = pos;
    c.bias = pos == TSR_POS_LEARNED; /* GPT-2 style, or MPT style: no biases, exact GELU */
    c.gelu = pos == TSR_POS_LEARNED ? TSR_GELU_TANH : TSR_GELU_EXACT;
    c.expansion_ratio = 4;
    c.init_std = 0.1; /* large enough that attention is far from uniform */
    c.attn_mask = mask;
    c.eot_token = EOT;
    return c;
}

/* the attention variants: sliding layer 0 (window 6), full layer 1, sinks, scores / sqrt(10) */
static void add_variants(tsr_model_config *c) {
    snprintf(c->layer_types, sizeof c->layer_types, "sliding_attention,full_attention");
    c->sliding_window = 6;
    c->attn_sinks = 1;
    c->query_pre_attn_scalar = 10;
}

static void build(tsr_model *m, const tsr_model_config *c, int B) {
    model_init(m, c, T, &tsr_cpu_ops);
    model_alloc_params(m);
    model_init_weights(m, 1234);
    model_alloc_acts(m, B, T);
}

/* ||a - b|| / ||b|| in double */
static double rel_err(const float *a, const float *b, size_t n) {
    double d = 0.0, nb = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = (double)a[i] - b[i];
        d += x * x;
        nb += (double)b[i] * b[i];
    }
    return nb > 0 ? sqrt(d / nb) : (d > 0 ? INFINITY : 0.0);
}

static void run_case(tsr_pos_kind pos, int variants) {
    const char *name = pos == TSR_POS_LEARNED ? "learned positions"
                       : pos == TSR_POS_ALIBI ? "alibi"
                       : variants             ? "rope with a window, sinks and a score scale"
                                              : "rope (Llama/Qwen)";
    const int positions = pos != TSR_POS_ALIBI; /* learned and RoPE need the segment positions */
    tsr_model_config cfg = tiny(pos, TSR_MASK_DOCUMENT);
    if (variants) add_variants(&cfg);
    tsr_model m;
    build(&m, &cfg, 2);
    const size_t np = m.n_params;

    /* the packed row: examples of random non-EOT tokens; targets = the next token, the last one
     * a random token as the stream would continue. It is row 1 of a batch of two; row 0 has
     * other tokens (EOTs among them) and no targets, so it adds nothing to the gradients. */
    int32_t batch[2 * T], btg[2 * T], *tok = batch + T, *tg = btg + T, start[NEX + 1] = {0};
    for (int k = 0; k < NEX; k++) start[k + 1] = start[k] + LEN[k];
    for (int t = 0; t < T; t++) {
        batch[t] = (int32_t)urand_below(V);
        btg[t] = -1;
        tok[t] = (int32_t)urand_below(EOT);
    }
    tok[start[1] - 1] = tok[start[2] - 1] = EOT;
    for (int t = 0; t < T; t++) tg[t] = t + 1 < T ? tok[t + 1] : (int32_t)urand_below(V);

    float lp[T], la[T];
    double sum_p = model_forward(&m, batch, btg, 2, T);
    memcpy(lp, m.acts.losses + T, sizeof lp);
    memset(m.grads, 0, np * sizeof(float));
    model_backward(&m, batch, btg, 2, T, 1.0f);
    float *gp = xcalloc(np, sizeof(float));
    memcpy(gp, m.grads, np * sizeof(float));

    /* each example alone at the start of a row of its own (a batch of one); backward accumulates
     * into m.grads */
    memset(m.grads, 0, np * sizeof(float));
    double sum_a = 0.0;
    for (int k = 0; k < NEX; k++) {
        int32_t row[T], rtg[T];
        const int n = LEN[k];
        for (int t = 0; t < T; t++) row[t] = (int32_t)urand_below(EOT), rtg[t] = -1;
        memcpy(row, tok + start[k], (size_t)n * sizeof *row);
        memcpy(rtg, tg + start[k], (size_t)n * sizeof *rtg);
        sum_a += model_forward(&m, row, rtg, 1, T);
        memcpy(la + start[k], m.acts.losses, (size_t)n * sizeof *la);
        model_backward(&m, row, rtg, 1, T, 1.0f);
    }
    int bitwise = 0;
    double worst = 0.0;
    for (int t = 0; t < T; t++) {
        bitwise += memcmp(&lp[t], &la[t], sizeof lp[t]) == 0;
        double e = fabs((double)lp[t] - la[t]) / (1e-6 + 2e-6 * fabs((double)la[t]));
        if (!(e <= worst)) worst = e;
    }
    tap_diag("%s: packed loss sum %.9g, alone %.9g; %d of %d per-token losses bitwise equal", name,
             sum_p, sum_a, bitwise, T);
    tap_ok(worst <= 1.0, "%s: per-token losses of 3 packed examples = each run alone (max diff "
           "%.3g of tolerance)", name, worst);

    double gworst = 0.0;
    const char *gname = "";
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const tsr_param_info *p = &m.params_info[i];
        if (!p->numel) continue;
        double e = rel_err(gp + p->offset, m.grads + p->offset, p->numel);
        if (!(e <= gworst)) gworst = e, gname = p->name;
    }
    tap_ok(gworst <= 1e-5, "%s: gradients of the packed row = sum of the examples' alone (worst "
           "%s, rel err %.3g <= 1e-5)", name, gname, gworst);

    /* control: the same weights with attn_mask = causal see across the end-of-text tokens */
    tsr_model_config ccfg = tiny(pos, TSR_MASK_CAUSAL);
    if (variants) add_variants(&ccfg);
    tsr_model mc;
    build(&mc, &ccfg, 1);
    memcpy(mc.params, m.params, np * sizeof(float));
    model_forward(&mc, tok, tg, 1, T);
    double leak = 0.0;
    for (int t = start[1]; t < T; t++) {
        double e = fabs((double)mc.acts.losses[t] - la[t]) / fabs((double)la[t]);
        if (e > leak) leak = e;
    }
    tap_ok(leak > 1e-3, "%s: with attn_mask = causal the later examples' losses differ from "
           "alone (max rel diff %.3g > 1e-3): the mask matters", name, leak);
    model_free(&mc);

    /* generation: KV cache in chunks of 5, then token by token, against the no-cache forward */
    tsr_kv_cache kv;
    model_kv_init(&kv, &m, T, 5);
    float *probs = xcalloc((size_t)m.Vp, sizeof(float));
    const int P = 12; /* the prompt: the first example and the start of the second */
    double kvworst = 0.0;
    for (int n = P; n <= T; n++) {
        if (n == P) model_infer_forward(&m, &kv, tok, P, probs);
        else model_infer_forward(&m, &kv, tok + n - 1, 1, probs);
        const float *want = model_forward_last(&m, tok, n);
        for (int j = 0; j < m.Vp; j++) {
            double e = fabs((double)probs[j] - want[j]);
            if (!(e <= kvworst)) kvworst = e;
        }
    }
    tap_ok(kvworst <= 1e-5 && kv.seg == start[2], "%s: KV-cache forward over the packed row = "
           "no-cache forward at every position (max |diff| %.3g <= 1e-5; segment starts at %d, "
           "want %d)", name, kvworst, kv.seg, start[2]);
    model_kv_free(&kv, &m);
    free(probs);

    size_t ints = (size_t)T * (positions ? 2 : 1) * sizeof(int32_t);
    tap_ok(model_acts_bytes(&m, 1, T) == model_acts_bytes(&mc, 1, T) + ints,
           "%s: model_acts_bytes counts %zu bytes of segment ids%s", name, ints,
           positions ? " and positions" : "");
    free(gp);
    model_free(&m);
}

static void test_config_check(void) {
    char why[256] = "";
    tsr_model_config c = tiny(TSR_POS_LEARNED, TSR_MASK_DOCUMENT);
    int ok = model_config_check(&c, why, sizeof why) == 0;
    c.eot_token = V;
    ok = ok && model_config_check(&c, why, sizeof why) != 0 &&
         strstr(why, "model.eot_token = 50") && strstr(why, "model.vocab_size = 50") &&
         strstr(why, "[0, 50)");
    tap_ok(ok, "model_config_check: eot_token = vocab_size is refused (\"%s\")", why);
    c.attn_mask = TSR_MASK_CAUSAL; /* eot_token is unused then */
    c.eot_token = 50256;
    tap_ok(model_config_check(&c, why, sizeof why) == 0,
           "model_config_check: attn_mask = causal accepts any eot_token (default 50256, V = 50)");
}

/* Segment boundaries from the tokens, seen through the learned-position embedding: with pos =
 * learned and zero token embeddings, encoded[t] = wpe[position of t]. */
static void test_positions(void) {
    tsr_model_config cfg = tiny(TSR_POS_LEARNED, TSR_MASK_DOCUMENT);
    tsr_model m;
    build(&m, &cfg, 1);
    const int C = m.C;
    float *wte = m.params + m.params_info[TSR_P_WTE].offset;
    float *wpe = m.params + m.params_info[TSR_P_WPE].offset;
    memset(wte, 0, m.params_info[TSR_P_WTE].numel * sizeof(float));
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) wpe[t * C + c] = (float)t;
    int32_t tok[T], tg[T];
    for (int t = 0; t < T; t++) tok[t] = 1, tg[t] = -1;
    tok[0] = tok[5] = tok[6] = tok[20] = EOT; /* an EOT first, two in a row, ... */
    const int want[T] = {0, 0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8,
                         9, 10, 11, 12, 13, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    model_forward(&m, tok, tg, 1, T);
    int ok = 1;
    for (int t = 0; t < T; t++) ok &= m.acts.encoded[(size_t)t * C] == (float)want[t];
    tap_ok(ok, "positions restart at 0 after each eot_token (EOT at 0, 5, 6, 20)");
    model_free(&m);
}

int main(void) {
    tap_plan(NCHECKS);
    cpu_ops_set_threads(2);
    run_case(TSR_POS_LEARNED, 0);
    run_case(TSR_POS_ALIBI, 0);
    run_case(TSR_POS_ROPE, 0);
    run_case(TSR_POS_ROPE, 1);
    test_config_check();
    test_positions();
    return tap_done();
}
