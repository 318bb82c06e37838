/* test_gen_batch.c — batched generation (src/generate/gen_batch.h; docs/generate.md "Batched
 * generation") on tiny random models of three kinds: GPT-2 style (learned positions, biases),
 * MPT style (ALiBi) and Llama/Qwen style (RoPE, GQA 4:2, RMSNorm, SwiGLU, QK-norm, untied head),
 * the last with attn_mask = document. Checked:
 *   - the batch-invariant product (ops.h matmul_rows): every row of a 37-row product is the same
 *     bits as that row computed alone and in a product of 5, and within 1e-5 relative of sgemm's;
 *   - attention_decode_rows: the same bits as attention_decode of each row alone (also with
 *     a soft cap on the scores, model.attn_logit_softcapping);
 *   - greedy: the batched generator (8 prompts of different lengths, batch 3) gives the tokens of
 *     the one-sequence generator (model_infer_forward + gen_pick) token for token;
 *   - sampling (temperature 1, top-k 20, top-p 0.95), 4 prompts x 3 samples: the tokens and
 *     log-probabilities of every sequence are the same bits at batch 1, 5 and 12, and when the
 *     sequences come in another order beside other prompts (the random stream is the sequence's
 *     own, the products row by row);
 *   - the recorded log-probabilities equal the training forward's (model_forward over prompt +
 *     completion: minus each target's loss) within 1e-5;
 *   - the samples of one prompt differ from each other (their streams differ);
 *   - stop ids end a completion with the id kept; max_new ends it with GEN_STOP_LENGTH.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/decoder.h"
#include "generate/gen_batch.h"
#include "model/model.h"
#include "ops.h"
#include "tap.h"
#include "tiny_models.h"
#include "xorshift.h"

enum { T = 48, V = 60, EOT = V - 1, NP = 8, MAXNEW = 20 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t urand_below(uint32_t n) {
    return (uint32_t)((xorshift64s(&rng) >> 32) % n);
}

static tsr_model_config tiny(tsr_pos_kind pos) {
    tsr_model_config c = tiny_model(2, 32, 4, V, 16);
    if (pos == TSR_POS_ROPE) {
        c = tiny_llama(c);
        c.qkv_bias = 1, c.rope_theta = 100, c.attn_mask = TSR_MASK_DOCUMENT;
    }
    c.pos = pos;
    c.bias = pos == TSR_POS_LEARNED;
    c.gelu = pos == TSR_POS_LEARNED ? TSR_GELU_TANH : TSR_GELU_EXACT;
    c.init_std = 0.3; /* peaked distributions: greedy has no near-ties */
    c.eot_token = EOT;
    return c;
}

static void test_matmul_rows(void) {
    enum { N = 37, IC = 70, OC = 45 };
    float *x = calloc(N * IC, 4), *w = calloc(OC * IC, 4), *b = calloc(OC, 4);
    float *all = calloc(N * OC, 4), *one = calloc(OC, 4), *five = calloc(5 * OC, 4);
    float *ref = calloc(N * OC, 4);
    for (int i = 0; i < N * IC; i++) x[i] = (float)urand_below(2001) / 1000.0f - 1.0f;
    for (int i = 0; i < OC * IC; i++) w[i] = (float)urand_below(2001) / 1000.0f - 1.0f;
    for (int i = 0; i < OC; i++) b[i] = (float)urand_below(2001) / 1000.0f - 1.0f;
    tsr_cpu_ops.matmul_rows(all, x, w, b, N, IC, OC);
    tsr_cpu_ops.matmul_forward(ref, x, w, b, N, IC, OC);
    int same = 1;
    double worst = 0.0;
    for (int r = 0; r < N; r++) {
        tsr_cpu_ops.matmul_rows(one, x + (size_t)r * IC, w, b, 1, IC, OC);
        same &= memcmp(one, all + (size_t)r * OC, OC * 4) == 0;
        if (r + 5 <= N) {
            tsr_cpu_ops.matmul_rows(five, x + (size_t)r * IC, w, b, 5, IC, OC);
            same &= memcmp(five, all + (size_t)r * OC, 5 * OC * 4) == 0;
        }
    }
    for (int i = 0; i < N * OC; i++) {
        double e = fabs((double)all[i] - ref[i]) / (1e-5 + 1e-5 * fabs((double)ref[i]));
        if (!(e <= worst)) worst = e;
    }
    tap_ok(same, "matmul_rows: each of 37 rows the same bits alone, in blocks of 5 and all "
           "together (IC 70, OC 45: tails of the 16-lane and 4x4 blocks)");
    tap_ok(worst <= 1.0, "matmul_rows = sgemm within 1e-5 + 1e-5 |x| (worst %.3g of tolerance)",
           worst);
    free(x), free(w), free(b), free(all), free(one), free(five), free(ref);
}

static void test_decode_rows(const tsr_attn_var *var) {
    enum { NH = 4, KVH = 2, hs = 8, CAP = 20, SL = 3 };
    const size_t QKV = (NH + 2 * KVH) * hs, per = (size_t)KVH * hs * CAP;
    float *kt = calloc(SL * per, 4), *v = calloc(SL * per, 4), *kt1 = calloc(per, 4),
          *v1 = calloc(per, 4), *qkv = calloc(SL * QKV, 4), *out = calloc(SL * NH * hs, 4),
          *out1 = calloc(NH * hs, 4), *scr = calloc(4 * CAP, 4);
    for (size_t i = 0; i < SL * per; i++) kt[i] = v[i] = (float)urand_below(1001) / 500.0f - 1.0f;
    for (size_t i = 0; i < SL * QKV; i++) qkv[i] = (float)urand_below(1001) / 500.0f - 1.0f;
    const int32_t slot[SL] = {2, 0, 1}, pos[SL] = {7, 12, 3}, seg[SL] = {0, 5, 0};
    const float slopes[NH] = {0.5f, 0.25f, 0.125f, 0.0625f};
    tsr_cpu_ops.attention_decode_rows(out, kt, v, qkv, slopes, var, scr, 4, slot, pos, seg, SL,
                                      per, CAP, NH, KVH, hs);
    int same = 1;
    for (int i = 0; i < SL; i++) {
        memcpy(kt1, kt + slot[i] * per, per * 4); /* (the row's own store rewrites it alike) */
        memcpy(v1, v + slot[i] * per, per * 4);
        tsr_cpu_ops.attention_decode(out1, kt1, v1, qkv + i * QKV, slopes, var, scr, 4, pos[i], 1,
                                     seg[i], CAP, NH, KVH, hs);
        same &= memcmp(out1, out + (size_t)i * NH * hs, NH * hs * 4) == 0;
    }
    tap_ok(same, "attention_decode_rows: 3 rows of 3 slots (one with a segment)%s = "
           "attention_decode of each alone, bit for bit",
           var ? ", soft cap 0.75" : "");
    free(kt), free(v), free(kt1), free(v1), free(qkv), free(out), free(out1), free(scr);
}

typedef struct fixture {
    tsr_model m;
    tsr_decoder d;
    int32_t prompts[NP][T];
    int np[NP];
} fixture;

static void fixture_init(fixture *f, tsr_pos_kind pos) {
    tsr_model_config c = tiny(pos);
    model_init(&f->m, &c, T, &tsr_cpu_ops);
    model_alloc_params(&f->m);
    model_init_weights(&f->m, 4321);
    model_alloc_acts(&f->m, 1, T);
    model_infer_decoder(&f->m, &f->d);
    for (int p = 0; p < NP; p++) {
        f->np[p] = 2 + (int)urand_below(14);
        for (int t = 0; t < f->np[p]; t++) f->prompts[p][t] = (int32_t)urand_below(EOT);
        if (pos == TSR_POS_ROPE && f->np[p] > 6) f->prompts[p][3] = EOT; /* a second document */
    }
}

static gen_batch_opts opts(double temp, int batch) {
    return (gen_batch_opts){.sampling = {.temperature = temp, .top_k = temp > 0 ? 20 : 0,
                                         .top_p = temp > 0 ? 0.95 : 1.0},
                            .max_new = MAXNEW, .batch = batch, .cap = T};
}

/* the one-sequence generator's greedy completion of prompt p */
static int greedy_one(fixture *f, int p, int32_t *out) {
    tsr_kv_cache kv;
    model_kv_init(&kv, &f->m, T, 8);
    float *probs = calloc((size_t)f->m.Vp, 4);
    gen_sampling g = {.temperature = 0, .top_p = 1};
    model_infer_forward(&f->m, &kv, f->prompts[p], f->np[p], probs);
    int n = 0;
    for (; n < MAXNEW; n++) {
        out[n] = gen_pick(probs, V, &g, (uint64_t)n, NULL, NULL);
        if (n + 1 < MAXNEW) model_infer_forward(&f->m, &kv, &out[n], 1, probs);
    }
    model_kv_free(&kv, &f->m);
    free(probs);
    return n;
}

static void check_greedy(fixture *f, const char *name) {
    gen_seq s[NP];
    int32_t ids[NP][MAXNEW], want[MAXNEW];
    for (int p = 0; p < NP; p++)
        s[p] = (gen_seq){.prompt = f->prompts[p], .n_prompt = f->np[p], .ids = ids[p]};
    const gen_batch_opts o = opts(0.0, 3);
    gen_batch_run(&f->d, &o, s, NP);
    int same = 1;
    for (int p = 0; p < NP; p++) {
        int n = greedy_one(f, p, want);
        same &= s[p].n == n && memcmp(ids[p], want, (size_t)n * 4) == 0 &&
                s[p].stop == GEN_STOP_LENGTH;
    }
    tap_ok(same, "%s: greedy, 8 prompts at batch 3 = the one-sequence generator, token for token",
           name);
}

enum { SP = 4, G = 3, NS = SP * G };

/* samples of prompts 0..SP-1, G each, key (7, 1, p, g); order: seqs in `perm` order, with
 * `extra` other prompts' sequences mixed in front */
static void sample_run(fixture *f, int batch, const int *perm, int extra, int32_t ids[NS][MAXNEW],
                       float lp[NS][MAXNEW], int n[NS]) {
    gen_seq s[NS + 4];
    int32_t xids[4][MAXNEW];
    int k = 0;
    for (int e = 0; e < extra; e++, k++)
        s[k] = (gen_seq){.prompt = f->prompts[SP + e], .n_prompt = f->np[SP + e],
                         .key = gen_stream_key(7, 1, SP + e, 0), .ids = xids[e]};
    for (int i = 0; i < NS; i++, k++) {
        const int q = perm ? perm[i] : i, p = q / G, g = q % G;
        s[k] = (gen_seq){.prompt = f->prompts[p], .n_prompt = f->np[p],
                         .key = gen_stream_key(7, 1, p, g), .ids = ids[q], .logp = lp[q]};
    }
    const gen_batch_opts o = opts(1.0, batch);
    gen_batch_run(&f->d, &o, s, k);
    for (int i = 0; i < NS; i++) n[perm ? perm[i] : i] = s[extra + i].n;
}

static void check_sampling(fixture *f, const char *name) {
    static int32_t ids[4][NS][MAXNEW];
    static float lp[4][NS][MAXNEW];
    int n[4][NS];
    const int perm[NS] = {5, 11, 0, 7, 2, 9, 1, 10, 3, 6, 4, 8};
    sample_run(f, 1, NULL, 0, ids[0], lp[0], n[0]);
    sample_run(f, 5, NULL, 0, ids[1], lp[1], n[1]);
    sample_run(f, 12, NULL, 0, ids[2], lp[2], n[2]);
    sample_run(f, 4, perm, 3, ids[3], lp[3], n[3]);
    int same = 1;
    for (int r = 1; r < 4; r++)
        same &= memcmp(n[0], n[r], sizeof n[0]) == 0 && memcmp(ids[0], ids[r], sizeof ids[0]) == 0 &&
                memcmp(lp[0], lp[r], sizeof lp[0]) == 0;
    tap_ok(same, "%s: 4 prompts x 3 samples: tokens and log-probabilities the same bits at batch "
           "1, 5, 12, and in another order beside 3 other prompts at batch 4", name);
    int differ = 0;
    for (int p = 0; p < SP; p++)
        differ += memcmp(ids[0][p * G], ids[0][p * G + 1], MAXNEW * 4) != 0;
    tap_ok(differ == SP, "%s: the samples of each prompt differ (%d of %d prompts)", name, differ,
           SP);
    /* the training forward over prompt + completion: -loss of each completion token */
    double worst = 0.0;
    for (int q = 0; q < NS; q++) {
        const int p = q / G, P = f->np[p], L = P + n[0][q] - 1;
        int32_t tok[T], tg[T];
        for (int t = 0; t < T; t++) tok[t] = 0, tg[t] = -1;
        memcpy(tok, f->prompts[p], (size_t)P * 4);
        memcpy(tok + P, ids[0][q], (size_t)(n[0][q] - 1) * 4);
        for (int t = P - 1; t < L; t++) tg[t] = ids[0][q][t - P + 1];
        model_forward(&f->m, tok, tg, 1, T);
        for (int t = P - 1; t < L; t++) {
            double e = fabs(-(double)f->m.acts.losses[t] - lp[0][q][t - P + 1]) / 1e-5;
            if (!(e <= worst)) worst = e;
        }
    }
    tap_ok(worst <= 1.0, "%s: recorded log-probabilities = the training forward's within 1e-5 "
           "(worst %.3g of tolerance)", name, worst);
}

static void check_stops(fixture *f) {
    int32_t ids[MAXNEW];
    gen_seq s = {.prompt = f->prompts[0], .n_prompt = f->np[0], .key = 3, .ids = ids};
    gen_batch_opts o = opts(0.0, 2);
    gen_batch_run(&f->d, &o, &s, 1);
    const int32_t stop = ids[4];
    int first = 0;
    while (ids[first] != stop) first++;
    o.stop_ids = &stop, o.n_stop_ids = 1;
    gen_batch_run(&f->d, &o, &s, 1);
    tap_ok(s.stop == GEN_STOP_EOS && s.n == first + 1 && ids[first] == stop,
           "stop id %d: the completion ends with it (%d tokens, stop %s)", stop, s.n,
           gen_stop_names[s.stop]);
    o.n_stop_ids = 0, o.max_new = 3;
    gen_batch_run(&f->d, &o, &s, 1);
    tap_ok(s.stop == GEN_STOP_LENGTH && s.n == 3, "max_new 3: 3 tokens, stop %s",
           gen_stop_names[s.stop]);
}

int main(void) {
    tap_plan(3 + 3 * 4 + 3);
    cpu_ops_set_threads(2);
    test_matmul_rows();
    test_decode_rows(NULL);
    const tsr_attn_var cap = {.softcap = 0.75f}; /* Gemma 2's attention soft cap */
    test_decode_rows(&cap);
    const tsr_pos_kind kinds[3] = {TSR_POS_LEARNED, TSR_POS_ALIBI, TSR_POS_ROPE};
    const char *names[3] = {"learned", "alibi", "rope+document mask"};
    for (int k = 0; k < 3; k++) {
        fixture f;
        fixture_init(&f, kinds[k]);
        check_greedy(&f, names[k]);
        check_sampling(&f, names[k]);
        if (k == 0) check_stops(&f);
        model_free(&f.m);
    }
    return tap_done();
}
