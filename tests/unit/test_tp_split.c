/* test_tp_split.c — tensor parallelism's split of a model (src/model/model_tp.h) without MPI:
 *   - for a GPT-2 style model (biases, tied head), a grouped-query Llama (4 query, 2 key/value
 *     heads, QK-norm per head, an untied head) at T = 2 and 4 (key/value heads replicated over 2
 *     ranks), and a hybrid's linear_attention layers at T = 2: each rank's split sizes are the
 *     whole model's divided as docs/parallelism.md says; over the T ranks the runs each counts
 *     cover every element of every global tensor exactly once; a rank's runs tile its split
 *     tensors; and the initial weights of each rank's split model are, element for element,
 *     the whole model's at the global elements its runs name (the same bits);
 *   - the replicated tensors' gradients are summed over the group where a rank holds a share of
 *     them (a bias one rank adds, a weight every head shares, the frame's norms with sequence
 *     parallelism, a key/value head held by two ranks), and not otherwise;
 *   - tp_step_bytes equals docs/parallelism.md's formula worked by hand for a two-layer model.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/layer_kind.h"
#include "model/model.h"
#include "model/model_tp.h"
#include "ops.h"
#include "tap.h"
#include "tiny_models.h"

static tsr_model_config base(void) { return tiny_model(2, 32, 4, 100, 16); }

static tsr_model_config llama(void) { return tiny_llama(base()); }

static tsr_model_config hybrid(void) {
    return tiny_linear_layers(llama(), "linear_attention,full_attention");
}

/* each global element of every tensor counted once over the T ranks' runs, and the split
 * models' initial weights the whole model's at those elements */
static int covered(const tsr_model_config *c, int T, int sp, const char *what) {
    tsr_model g, *m = tsr_calloc((size_t)T, sizeof *m);
    tsr_tp *tp = tsr_calloc((size_t)T, sizeof *tp);
    model_init(&g, c, 16, &tsr_cpu_ops);
    model_alloc_params(&g);
    model_init_weights(&g, 7);
    unsigned char *hits = tsr_calloc(g.n_params, 1);
    int ok = 1;
    for (int t = 0; t < T; t++) {
        model_init(&m[t], c, 16, &tsr_cpu_ops);
        model_set_tensor(&m[t], &tp[t], T, t, sp);
        model_alloc_params(&m[t]);
        model_init_weights(&m[t], 7);
        for (size_t i = 0; i < tp[t].n_runs; i++) {
            const tp_run *r = &tp[t].runs[i];
            const size_t lo = m[t].params_info[r->id].offset, go = g.params_info[r->id].offset;
            for (size_t k = 0; k < r->count; k++)
                for (size_t j = 0; j < r->len; j++) {
                    const size_t gi = go + r->global + k * r->gstride + j;
                    const size_t li = lo + r->local + k * r->lstride + j;
                    if (gi >= go + g.params_info[r->id].numel ||
                        m[t].params[li] != g.params[gi])
                        ok = 0;
                    hits[gi] += r->counted;
                }
        }
    }
    for (int id = 0; id < TSR_P_COUNT; id++)
        for (size_t e = 0; e < g.params_info[id].numel; e++)
            if (hits[g.params_info[id].offset + e] != 1) ok = 0;
    tap_ok(ok, "%s at T = %d: every global element counted by exactly one rank, each rank's split "
           "weights the whole model's initial weights at the elements its runs name", what, T);
    for (int t = 0; t < T; t++) model_free(&m[t]), tp_free(&tp[t]);
    model_free(&g);
    free(hits), free(m), free(tp);
    return ok;
}

/* the sizes of rank 1 of T, and the sums of some runs' gradients */
static void sizes_and_sums(void) {
    tsr_model_config c = llama();
    tsr_model m;
    tsr_tp tp;
    model_init(&m, &c, 16, &tsr_cpu_ops);
    model_set_tensor(&m, &tp, 4, 1, 1);
    int ok = m.NH == 1 && m.KVH == 1 && m.F == 12 && m.FW == 24 && m.Vp == 28 && tp.R == 2 &&
             tp.v0 == 28 && tp.Vl == 28 && m.global->NH == 4 && m.global->KVH == 2;
    /* qkvw: q split (no sum), k and v replicated over the 2 ranks of a head (summed there, counted
     * by the first: rank 1 is the second); qnormw shared by the heads (summed, counted by rank 0);
     * ln1w a frame norm (summed: sequence parallelism) */
    int q = 0, kv = 0, qn = 0, ln = 0;
    for (size_t i = 0; i < tp.n_runs; i++) {
        const tp_run *r = &tp.runs[i];
        if (r->id == TSR_P_QKVW && r->sum == TP_SUM_NONE && r->counted) q++;
        if (r->id == TSR_P_QKVW && r->sum == TP_SUM_KV && !r->counted) kv++;
        if (r->id == TSR_P_QNORMW && r->sum == TP_SUM_TENSOR && !r->counted) qn++;
        if (r->id == TSR_P_LN1W && r->sum == TP_SUM_TENSOR && !r->counted) ln++;
    }
    ok = ok && q == 1 && kv == 2 && qn == 1 && ln == 1;
    model_free(&m);
    tp_free(&tp);
    tsr_model_config gc = base(); /* GPT-2: attprojb added by one rank, summed; without sequence
                                   * parallelism ln1w is whole on every rank (no sum) */
    model_init(&m, &gc, 16, &tsr_cpu_ops);
    model_set_tensor(&m, &tp, 2, 0, 0);
    for (size_t i = 0; i < tp.n_runs; i++) {
        const tp_run *r = &tp.runs[i];
        if (r->id == TSR_P_ATTPROJB) ok = ok && r->sum == TP_SUM_TENSOR && r->counted;
        if (r->id == TSR_P_LN1W) ok = ok && r->sum == TP_SUM_NONE && r->counted;
    }
    model_free(&m);
    tp_free(&tp);
    tap_ok(ok, "rank 1 of 4 holds 1 of 4 query heads, 1 key/value head (of 2, each on 2 ranks), "
           "12 of the MLP's 48, vocabulary rows 28..55; the gradients summed over the group where "
           "a rank holds a share (a replicated key/value head over its 2 ranks, QK-norm's shared "
           "weight, the norms with sequence parallelism, a bias one rank adds), not the norms "
           "without it");
}

/* docs/parallelism.md's formula for 2 layers of width 32, 4 sequences of 16 tokens (N = 64),
 * T = 2, one microbatch: with sequence parallelism 24 all-gathers or reduce-scatters of (N, C)
 * (1 + 4L + 1 forward, 1 + 6L + 1 backward) of 32 x 32 x 4 = 4096 bytes sent each; the
 * cross-entropy's 2 all-reduces of N floats and 2N doubles, 256 + 1024; the partial gradients'
 * sum, 2 (T-1)/T of (ln1w, ln2w, lnfw: 5 x 32 floats; qnormw, knormw: 2 x 2 x 8) x 4 = 768 */
static void formula(void) {
    tsr_model_config c = llama();
    tsr_model m;
    tsr_tp tp;
    model_init(&m, &c, 16, &tsr_cpu_ops);
    model_set_tensor(&m, &tp, 2, 0, 1);
    const uint64_t got = tp_step_bytes(&m, 1, 4, 16, 4);
    const uint64_t want = 24 * 4096 + 256 + 1024 + 768;
    tap_ok(got == want, "tp_step_bytes of a 2-layer model at T = 2: %llu, the formula worked by "
           "hand %llu", (unsigned long long)got, (unsigned long long)want);
    model_free(&m);
    tp_free(&tp);
}

int main(void) {
    tap_plan(7);
    tsr_model_config g = base(), l = llama(), h = hybrid();
    covered(&g, 2, 1, "GPT-2 style");
    covered(&l, 2, 1, "Llama style (GQA 4:2)");
    covered(&l, 4, 1, "Llama style, key/value heads replicated");
    covered(&l, 4, 0, "Llama style without sequence parallelism");
    covered(&h, 2, 1, "a hybrid's linear_attention layers");
    sizes_and_sums();
    formula();
    return tap_done();
}
