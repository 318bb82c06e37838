/* decode_checks.h — the decode cache checks the C unit tests make of a tiny model (header-only,
 * like tap.h): a model built on the CPU, greedy picks, random prompts, and the scenario of
 * test_kv_window.c and test_mla_decode.c: a prompt of DEC_P fed in chunks of 8, then DEC_GEN tokens
 * one at a time, against the no-cache forward (model_forward_last over the whole sequence); and 3
 * prompts of 12, 9 and 14 decoded side by side in gen_batch_run's slots. */
#ifndef TSR_DECODE_CHECKS_H
#define TSR_DECODE_CHECKS_H

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

enum { DEC_P = 12, DEC_GEN = 40, DEC_NP = 3, DEC_T = 14 + DEC_GEN, DEC_CHUNK = 8 };

/* m: config c on the CPU for sequences of up to T, weights from seed, activations for 1 row of T;
 * exits 1 when model_config_check refuses c */
static inline void dec_build(tsr_model *m, const tsr_model_config *c, int T, uint64_t seed) {
    char why[512] = "";
    if (model_config_check(c, why, sizeof why)) {
        fprintf(stderr, "dec_build: the test's config refused: %s\n", why);
        exit(1);
    }
    model_init(m, c, T, &tsr_cpu_ops);
    model_alloc_params(m);
    model_init_weights(m, seed);
    model_alloc_acts(m, 1, T);
}

/* the first index of p's largest of n: greedy's pick */
static inline int dec_argmax(const float *p, int n) {
    int best = 0;
    for (int j = 1; j < n; j++)
        if (p[j] > p[best]) best = j;
    return best;
}

/* n ids in [0, below) from seed s (a 64-bit LCG: the same everywhere) */
static inline void dec_ids(int32_t *tok, int n, uint64_t s, int below) {
    for (int t = 0; t < n; t++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tok[t] = (int32_t)((s >> 33) % (uint64_t)below);
    }
}

/* a test's prompts: ids in [0, below); with eot >= 0 the sixth token (of more than 6) is eot */
typedef struct {
    int below, eot;
} dec_prompts;

static inline void dec_prompt(int32_t *tok, int n, uint64_t s, dec_prompts pr) {
    dec_ids(tok, n, s, pr.below);
    if (pr.eot >= 0 && n > 6) tok[5] = pr.eot;
}

/* the prompt (seed 99) in chunks of DEC_CHUNK, then a token at a time: the largest |difference|
 * of the cache's next-token probabilities from the no-cache forward's over DEC_GEN positions
 * (worst), and whether greedy gives the tokens of re-running the whole sequence (same) */
typedef struct {
    double worst;
    int same;
} dec_single;

static inline dec_single dec_single_run(tsr_model *m, dec_prompts pr) {
    enum { N = DEC_P + DEC_GEN };
    tsr_kv_cache kv;
    model_kv_init(&kv, m, DEC_T, DEC_CHUNK);
    float *probs = calloc((size_t)m->Vp, sizeof(float));
    int32_t seq[N], ref[N];
    dec_prompt(seq, DEC_P, 99, pr);
    memcpy(ref, seq, sizeof ref);
    model_infer_forward(m, &kv, seq, DEC_P, probs);
    dec_single r = {0.0, 0};
    for (int n = DEC_P; n < N; n++) {
        const float *want = model_forward_last(m, seq, n);
        for (int j = 0; j < m->Vp; j++) {
            double e = fabs((double)probs[j] - want[j]);
            if (!(e <= r.worst)) r.worst = e;
        }
        seq[n] = dec_argmax(probs, m->V);
        ref[n] = dec_argmax(model_forward_last(m, ref, n), m->V);
        if (n + 1 < N) model_infer_forward(m, &kv, seq + n, 1, probs);
    }
    r.same = memcmp(seq, ref, sizeof ref) == 0;
    model_kv_free(&kv, m);
    free(probs);
    return r;
}

/* the one-sequence cache's greedy completion (DEC_GEN tokens) of tok (n) */
static inline void dec_greedy_one(const tsr_model *m, const int32_t *tok, int n, int32_t *out) {
    tsr_kv_cache kv;
    model_kv_init(&kv, m, DEC_T, DEC_CHUNK);
    float *probs = calloc((size_t)m->Vp, sizeof(float));
    model_infer_forward(m, &kv, tok, n, probs);
    for (int i = 0; i < DEC_GEN; i++) {
        out[i] = dec_argmax(probs, m->V);
        if (i + 1 < DEC_GEN) model_infer_forward(m, &kv, &out[i], 1, probs);
    }
    model_kv_free(&kv, m);
    free(probs);
}

/* 1 check: gen_batch_run's greedy over 3 slots (prompts of 12, 9, 14, seeds 7, 8, 9) gives each
 * prompt the one-sequence cache's tokens */
static inline void dec_check_slots(tsr_model *m, const char *name, dec_prompts pr) {
    static const int plen[DEC_NP] = {12, 9, 14};
    tsr_decoder d;
    model_infer_decoder(m, &d);
    int32_t prompts[DEC_NP][DEC_T], ids[DEC_NP][DEC_GEN], want[DEC_GEN];
    gen_seq seqs[DEC_NP];
    for (int p = 0; p < DEC_NP; p++) {
        dec_prompt(prompts[p], plen[p], 7 + (uint64_t)p, pr);
        seqs[p] = (gen_seq){.prompt = prompts[p], .n_prompt = plen[p], .ids = ids[p]};
    }
    gen_batch_opts o = {.sampling = {.temperature = 0, .top_p = 1.0}, .max_new = DEC_GEN,
                        .batch = DEC_NP, .cap = DEC_T};
    gen_batch_run(&d, &o, seqs, DEC_NP);
    int same = 1;
    for (int p = 0; p < DEC_NP; p++) {
        dec_greedy_one(m, prompts[p], plen[p], want);
        same &= seqs[p].n == DEC_GEN && memcmp(ids[p], want, sizeof want) == 0;
    }
    tap_ok(same, "%s: batched greedy, 3 slots (prompts of 12, 9, 14; %d tokens each) = the "
           "one-sequence cache's tokens", name, DEC_GEN);
}

#endif
