/* test_actckpt.c — model.activation_checkpointing: recomputing in backward gives the same bits.
 *
 * A tiny model of L = 3 layers, GPT-2 style (learned positions, biases, tanh GELU), MPT style
 * (ALiBi, no biases, exact GELU) and Llama/Qwen style (RoPE, RMSNorm, SwiGLU, 4 query heads on 2
 * key/value heads of head_dim 6, QK-norm, q/k/v biases, an untied head), each with attn_mask =
 * causal and document. Two microbatches
 * accumulate into the gradients (B = 2, then B = 1 on activations allocated for B = 2, so the
 * strides of a partly used buffer are exercised too); random tokens with end-of-text tokens among
 * them. For every mode (block, attention, mlp) over all layers and over the first 2 of 3, against
 * the same weights and data with activation_checkpointing = none (and, with
 * activation_checkpointing_range, over layers 1-2 and layer 1 alone: the shared slot between
 * kept layers):
 *   - both forwards' loss sums and per-token losses, and every parameter gradient, compared with
 *     memcmp: the recomputation runs the same ops on the same inputs, so anything but equal bits
 *     is a bug (no tolerance);
 *   - before each backward the shared one-layer buffers the recomputation writes are filled with
 *     NaN, so a backward that read what the last checkpointed layer's forward left there (instead
 *     of recomputing) would fail the gradient check;
 *   - model_acts_bytes is what model_alloc_acts allocated (counted through the op table's alloc),
 *     and exactly the none figure minus (Lc - 1) layers of the groups the mode drops.
 * The check itself can fail: one weight moved by a millionth of itself changes the gradient bits (control).
 * model_config_check refuses activation_checkpointing_layers = 0 and > n_layer, and malformed or
 * out-of-range activation_checkpointing_range values, naming the key.
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

enum { L = 3, T = 16, V = 50, C = 32, NH = 4, F = 4 * C, EOT = V - 1, BMAX = 2 };
enum { N_VARIANTS = 6, N_MODES = 3, N_RANGES = 4, HS_ROPE = 6, KVH_ROPE = 2, F_ROPE = 40 };
/* per variant and mode and range 3, per variant 1; two controls; three config checks */
#define NCHECKS (N_VARIANTS * (N_MODES * N_RANGES * 3 + 1) + 2 + 3)

static uint64_t rng = 0x9e3779b97f4a7c15ull; /* xorshift64*: the test needs nothing external */
static uint32_t urand_below(uint32_t n) {
    return (uint32_t)((xorshift64s(&rng) >> 32) % n);
}

/* the op table with allocators that count the bytes asked for (the memory plan's unit) */
static size_t alloc_bytes;
static void *counting_alloc(size_t bytes) {
    alloc_bytes += bytes;
    return tsr_cpu_ops.alloc(bytes);
}
static void *counting_try_alloc(size_t bytes) {
    alloc_bytes += bytes;
    return tsr_cpu_ops.try_alloc(bytes);
}
static tsr_ops counting_ops;

static tsr_model_config tiny(tsr_pos_kind pos, tsr_attn_mask_kind mask, tsr_actckpt_kind mode,
                             int layers, const char *range) {
    tsr_model_config c = tiny_model(L, C, NH, V, 16);
    if (pos == TSR_POS_ROPE) { /* the Llama/Qwen blocks, all at once */
        c = tiny_llama(c);
        c.norm_eps = 1e-6;
        c.intermediate_size = F_ROPE;
        c.n_kv_head = KVH_ROPE;
        c.head_dim = HS_ROPE;
        c.qkv_bias = 1;
    }
    c.pos = pos;
    c.bias = pos == TSR_POS_LEARNED;
    c.gelu = pos == TSR_POS_LEARNED ? TSR_GELU_TANH : TSR_GELU_EXACT;
    c.expansion_ratio = 4;
    c.init_std = 0.1; /* attention far from uniform */
    c.attn_mask = mask;
    c.eot_token = EOT;
    c.activation_checkpointing = mode;
    c.activation_checkpointing_layers = layers;
    snprintf(c.activation_checkpointing_range, sizeof c.activation_checkpointing_range, "%s", range);
    return c;
}

/* builds the model; returns the bytes model_alloc_acts allocated */
static size_t build(tsr_model *m, const tsr_model_config *c) {
    model_init(m, c, T, &counting_ops);
    model_alloc_params(m);
    model_init_weights(m, 1234);
    alloc_bytes = 0;
    model_alloc_acts(m, BMAX, T);
    return alloc_bytes;
}

/* what one run leaves: both forwards' loss sums and per-token losses, and the gradients */
typedef struct result {
    double sum[2];
    float losses[2][BMAX * T];
    float *grads;
} result;

/* Fills the shared slot 0 of every group a checkpointed layer recomputes with NaN. */
static void poison_shared(tsr_model *m) {
    if (m->n_ckpt == 0) return;
    tsr_acts *a = &m->acts;
    size_t N = (size_t)a->B * T;
    const size_t qkv = (size_t)m->QKV, qkn = (size_t)(m->NH + m->KVH);
    struct { float *p; size_t n; int mode_mask; } bufs[] = {
        /* mode bits: 1 block, 2 attention, 4 mlp */
        {a->ln1, N * C, 1}, {a->ln1_mean, N, 1}, {a->ln1_rstd, N, 1},
        {a->qkv, N * qkv, 3}, {a->qkvr, N * qkv, 3}, {a->qkn_rstd, N * qkn, 3},
        {a->atty, N * m->QD, 3}, {a->att, (size_t)a->B * NH * T * T, 3},
        {a->residual2, N * C, 1}, {a->ln2, N * C, 1}, {a->ln2_mean, N, 1}, {a->ln2_rstd, N, 1},
        {a->fch, N * m->FW, 5}, {a->fch_gelu, N * m->F, 5},
    };
    int bit = 1 << (m->cfg.activation_checkpointing - 1);
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i].p && (bufs[i].mode_mask & bit)) /* NULL: a buffer this model has not */
            for (size_t k = 0; k < bufs[i].n; k++) bufs[i].p[k] = NAN;
}

/* two microbatches (B = 2, then B = 1) accumulated into zeroed gradients */
static void run(tsr_model *m, const int32_t *tok, const int32_t *tg, result *r) {
    memset(m->grads, 0, m->n_params * sizeof(float));
    memset(r->losses, 0, sizeof r->losses);
    for (int mb = 0; mb < 2; mb++) {
        int B = mb == 0 ? 2 : 1;
        const int32_t *x = tok + mb * BMAX * T, *y = tg + mb * BMAX * T;
        r->sum[mb] = model_forward(m, x, y, B, T);
        memcpy(r->losses[mb], m->acts.losses, (size_t)B * T * sizeof(float));
        poison_shared(m);
        model_backward(m, x, y, B, T, 1.0f / 48);
    }
    r->grads = malloc(m->n_params * sizeof(float));
    if (!r->grads) {
        fprintf(stderr, "test_actckpt: out of memory\n");
        exit(1);
    }
    memcpy(r->grads, m->grads, m->n_params * sizeof(float));
}

/* the first parameter tensor whose gradient bits differ, or NULL */
static const char *grads_differ(const tsr_model *m, const float *a, const float *b) {
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const tsr_param_info *p = &m->params_info[i];
        if (p->numel && memcmp(a + p->offset, b + p->offset, p->numel * sizeof(float)))
            return p->name;
    }
    return NULL;
}

/* bytes of one layer of each group a mode drops, for B x T (model.h), written out by hand: the
 * Llama/Qwen style has no LayerNorm means, a pre-QK-norm copy of qkv and its statistics, and a
 * SwiGLU input twice the MLP width */
static size_t dropped_layer_bytes(tsr_pos_kind pos, tsr_actckpt_kind mode) {
    size_t N = (size_t)BMAX * T, att = (size_t)BMAX * NH * T * T;
    size_t ln1 = N * (C + 2), attn = N * 4 * C + att;
    size_t res2 = N * (2 * C + 2), mlp = N * 2 * F;
    if (pos == TSR_POS_ROPE) {
        size_t qkv = (size_t)(NH + 2 * KVH_ROPE) * HS_ROPE;
        ln1 = N * (C + 1);
        attn = N * (2 * qkv + NH + KVH_ROPE + NH * HS_ROPE) + att;
        res2 = N * (2 * C + 1);
        mlp = N * 3 * F_ROPE;
    }
    size_t f = mode == TSR_ACTCKPT_BLOCK ? ln1 + attn + res2 + mlp
               : mode == TSR_ACTCKPT_ATTENTION ? attn
                                               : mlp;
    return f * sizeof(float);
}

static const char *const mode_names[] = {"none", "block", "attention", "mlp"};

static void run_variant(tsr_pos_kind pos, tsr_attn_mask_kind mask, int control) {
    char name[64];
    snprintf(name, sizeof name, "%s, %s",
             pos == TSR_POS_LEARNED ? "GPT-2 (learned)"
             : pos == TSR_POS_ALIBI ? "MPT (alibi)"
                                    : "Llama/Qwen (rope)",
             mask == TSR_MASK_DOCUMENT ? "document mask" : "causal");
    int32_t tok[2 * BMAX * T], tg[2 * BMAX * T];
    for (int i = 0; i < 2 * BMAX * T; i++) {
        tok[i] = urand_below(6) == 0 ? EOT : (int32_t)urand_below(EOT);
        tg[i] = urand_below(8) == 0 ? -1 : (int32_t)urand_below(V);
    }
    tsr_model_config c0 = tiny(pos, mask, TSR_ACTCKPT_NONE, -1, "");
    tsr_model m0;
    size_t bytes0 = build(&m0, &c0);
    result r0;
    run(&m0, tok, tg, &r0);

    if (control) {
        /* a millionth of one weight of layer 0's qkv: the gradients' bits move */
        float *w = m0.params + m0.params_info[TSR_P_QKVW].offset + 5;
        float saved = *w;
        *w *= 1.000001f; /* a few ulps: one can round away in a normalised q */
        result rc;
        run(&m0, tok, tg, &rc);
        *w = saved;
        const char *d = grads_differ(&m0, rc.grads, r0.grads);
        tap_ok(d != NULL, "%s: control: one qkv weight moved by a millionth changes the gradient bits (first "
               "in %s): a bitwise check can fail", name, d ? d : "none");
        free(rc.grads);
    }

    for (int mode = TSR_ACTCKPT_BLOCK; mode < TSR_ACTCKPT_COUNT; mode++) {
        for (int range = 0; range < N_RANGES; range++) {
            static const int layers_of[N_RANGES] = {-1, 2, -1, -1}, lc_of[N_RANGES] = {L, 2, 2, 1};
            static const char *const range_of[N_RANGES] = {"", "", "1-2", "1-1"};
            static const char *const what_of[N_RANGES] = {"all 3 layers", "the first 2 of 3",
                                                          "range 1-2", "range 1-1"};
            int layers = layers_of[range], lc = lc_of[range];
            tsr_model_config c = tiny(pos, mask, (tsr_actckpt_kind)mode, layers, range_of[range]);
            tsr_model m;
            size_t bytes = build(&m, &c);
            result r;
            run(&m, tok, tg, &r);
            char what[160];
            snprintf(what, sizeof what, "%s, %s on %s", name, mode_names[mode], what_of[range]);
            int same_loss = !memcmp(r.sum, r0.sum, sizeof r.sum) &&
                            !memcmp(r.losses, r0.losses, sizeof r.losses);
            tap_ok(same_loss, "%s: loss sums and per-token losses of both microbatches "
                   "bit-identical to none (%.9g, %.9g)", what, r.sum[0], r.sum[1]);
            const char *d = grads_differ(&m, r.grads, r0.grads);
            tap_ok(d == NULL, "%s: every gradient bit-identical to none%s%s", what,
                   d ? "; first differing: " : "", d ? d : "");
            size_t want =
                bytes0 - (size_t)(lc - 1) * dropped_layer_bytes(pos, (tsr_actckpt_kind)mode);
            size_t got = model_acts_bytes(&m, BMAX, T);
            tap_ok(got == bytes && got == want && (got < bytes0 || lc == 1), /* 1 saves nothing */
                   "%s: model_acts_bytes %zu = allocated %zu = none's %zu - %d layers of what it "
                   "recomputes (%zu)", what, got, bytes, bytes0, lc - 1, want);
            free(r.grads);
            model_free(&m);
        }
    }
    tap_ok(model_acts_bytes(&m0, BMAX, T) == bytes0,
           "%s: none: model_acts_bytes %zu = allocated %zu", name,
           model_acts_bytes(&m0, BMAX, T), bytes0);
    free(r0.grads);
    model_free(&m0);
}

static void check_config(void) {
    char why[256] = "";
    tsr_model_config c = tiny(TSR_POS_LEARNED, TSR_MASK_CAUSAL, TSR_ACTCKPT_BLOCK, 0, "");
    int rc0 = model_config_check(&c, why, sizeof why);
    int named = strstr(why, "model.activation_checkpointing_layers = 0") != NULL;
    c.activation_checkpointing_layers = L + 1;
    char why2[256] = "";
    int rc1 = model_config_check(&c, why2, sizeof why2);
    tap_ok(rc0 == -1 && named && rc1 == -1 &&
               strstr(why2, "model.activation_checkpointing_layers = 4 with model.n_layer = 3"),
           "model_config_check refuses activation_checkpointing_layers = 0 and = n_layer + 1 "
           "(\"%s\")", why2);
    c.activation_checkpointing_layers = -1;
    int ok = model_config_check(&c, why, sizeof why) == 0;
    c.activation_checkpointing_layers = L;
    ok &= model_config_check(&c, why, sizeof why) == 0;
    c.activation_checkpointing = TSR_ACTCKPT_NONE;
    c.activation_checkpointing_layers = 0;
    ok &= model_config_check(&c, why, sizeof why) == 0;
    tap_ok(ok, "model_config_check accepts layers -1 and n_layer, and any value with none");
    static const char *const bad[] = {"2-1", "0-3", "1", "-1-2", "1-2x", "a-b"};
    int refused = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = tiny(TSR_POS_LEARNED, TSR_MASK_CAUSAL, TSR_ACTCKPT_MLP, -1, bad[i]);
        why[0] = '\0';
        refused += model_config_check(&c, why, sizeof why) == -1 &&
                   strstr(why, "model.activation_checkpointing_range = ") != NULL;
    }
    c = tiny(TSR_POS_LEARNED, TSR_MASK_CAUSAL, TSR_ACTCKPT_MLP, 2, "0-1");
    int both = model_config_check(&c, why2, sizeof why2) == -1 && strstr(why2, "both given");
    tap_ok(refused == 6 && both, "activation_checkpointing_range: 2-1, 0-3, 1, -1-2, 1-2x, a-b "
           "refused naming the key (%d of 6), and together with layers = 2 (\"%s\")", refused, why2);
}

int main(void) {
    counting_ops = tsr_cpu_ops;
    counting_ops.alloc = counting_alloc;
    counting_ops.try_alloc = counting_try_alloc;
    tap_plan(NCHECKS);
    tap_diag("L = %d, C = %d, NH = %d, T = %d; microbatches of 2 and 1 rows", L, C, NH, T);
    run_variant(TSR_POS_LEARNED, TSR_MASK_CAUSAL, 1);
    run_variant(TSR_POS_LEARNED, TSR_MASK_DOCUMENT, 0);
    run_variant(TSR_POS_ALIBI, TSR_MASK_CAUSAL, 0);
    run_variant(TSR_POS_ALIBI, TSR_MASK_DOCUMENT, 0);
    run_variant(TSR_POS_ROPE, TSR_MASK_CAUSAL, 1);
    run_variant(TSR_POS_ROPE, TSR_MASK_DOCUMENT, 0);
    check_config();
    return tap_done();
}
