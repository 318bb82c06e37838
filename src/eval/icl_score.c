/* icl_score.c — scoring ICL tasks with a model over the ranks (icl_score.h). */
#include "eval/icl_score.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/decoder.h"
#include "generate/gen_batch.h"
#include "progress.h"
#include "tokenizer/tokenizer_eos.h"

int icl_rows(int64_t micro_batch) {
    if (micro_batch < 1) return 1;
    return micro_batch > ICL_MAX_ROWS ? ICL_MAX_ROWS : (int)micro_batch;
}

/* The first token id of t that is >= vocab, with its example (0-based); -1 when none. */
static int64_t first_outside(const icl_task *t, int vocab, int *example) {
    for (int i = 0; i < t->n; i++)
        for (int k = 0; k < t->ex[i].n_opts; k++) {
            const icl_option *o = &t->ex[i].opts[k];
            for (int j = 0; j < o->n_ctx + o->n_cont; j++)
                if (o->ids[j] >= (uint32_t)vocab) {
                    *example = i;
                    return (int64_t)o->ids[j];
                }
        }
    return -1;
}

int icl_suite_open(icl_suite *s, const tsr_icl_task_config *tasks, int n,
                   const tsr_tokenizer *tok, const char *tokenizer, uint64_t seed, int vocab, int B,
                   int T) {
    memset(s, 0, sizeof *s);
    s->tok = tok;
    if (n == 0) return 0;
    if (!tok) {
        tsr_error("icl_tasks need a tokenizer: set data.tokenizer (gpt2, a directory or a "
                  "`tessera tokenizer train` file)");
        return TSR_EXIT_USAGE;
    }
    int rc = 0;
    s->tasks = tsr_calloc((size_t)n, sizeof *s->tasks);
    for (int i = 0; !rc && i < n; i++) {
        rc = icl_task_load(&s->tasks[i], &tasks[i], tok, seed);
        int ex = 0;
        int64_t id = rc ? -1 : first_outside(&s->tasks[i], vocab, &ex);
        if (id >= 0) {
            tsr_error("%s: example %d: token id %lld is outside the model's vocabulary (%d ids): "
                      "data.tokenizer \"%s\" is not the tokenizer the model was trained with",
                      tasks[i].path, ex + 1, (long long)id, vocab, tokenizer);
            rc = TSR_EXIT_USAGE;
        }
        s->n = i + 1; /* loaded (or emptied by a failed load): icl_suite_close frees them */
    }
    if (rc) {
        icl_suite_close(s);
        return rc;
    }
    s->B = B;
    s->T = T;
    s->in = tsr_malloc((size_t)B * (size_t)T * sizeof *s->in);
    s->tg = tsr_malloc((size_t)B * (size_t)T * sizeof *s->tg);
    s->loss = tsr_malloc((size_t)B * (size_t)T * sizeof *s->loss);
    s->greedy = tsr_malloc((size_t)B * (size_t)T * sizeof *s->greedy);
    return 0;
}

void icl_suite_close(icl_suite *s) {
    for (int i = 0; s->tasks && i < s->n; i++) icl_task_free(&s->tasks[i]);
    tsr_free_all(s->tasks, s->in, s->tg, s->loss, s->greedy);
    memset(s, 0, sizeof *s);
}

/* Puts option o in row r of the suite's scratch: tokens 0..T-1 of the (left-cut) sequence as
 * inputs, the next tokens as targets where they belong to the continuation. */
static void put_option(icl_suite *s, int r, const icl_option *o) {
    int n = o->n_ctx + o->n_cont, skip = n > s->T + 1 ? n - (s->T + 1) : 0, len = n - skip;
    int32_t *in = s->in + (size_t)r * s->T, *tg = s->tg + (size_t)r * s->T;
    for (int j = 0; j < s->T; j++) in[j] = 0, tg[j] = -1;
    for (int j = 0; j + 1 < len; j++) {
        in[j] = (int32_t)o->ids[skip + j];
        if (skip + j + 1 >= o->n_ctx) tg[j] = (int32_t)o->ids[skip + j + 1];
    }
}

/* Scores rows [0, rows) of a forward pass of all B rows: mean NLL per continuation token, and
 * whether greedy decoding gives every continuation token (the argmax, ties to the lower id). On
 * any backend (model_token_scores: the CPU ops, or the GPU's through the model's hook). */
static void score_rows(tsr_model *m, icl_suite *s, int rows, double *nll, int *greedy) {
    model_token_scores(m, s->in, s->tg, s->B, s->T, s->loss, s->greedy);
    for (int r = 0; r < rows; r++) {
        double sum = 0;
        int k = 0, ok = 1;
        for (int j = 0; j < s->T; j++) {
            size_t at = (size_t)r * s->T + (size_t)j;
            int32_t want = s->tg[at];
            if (want < 0) continue;
            sum += s->loss[at];
            k++;
            ok &= s->greedy[at] == want;
        }
        nll[r] = k ? sum / k : INFINITY;
        greedy[r] = ok && k > 0;
    }
}

/* The forwards this rank runs for task t (its examples' options, B rows a forward) */
static int64_t task_forwards(const icl_suite *s, const icl_task *t, const tsr_dist *d) {
    int64_t n = 0;
    for (int i = d->rank; i < t->n; i += d->world) n += (t->ex[i].n_opts + s->B - 1) / s->B;
    return n;
}

/* LLM Foundry's answer normalisation (QA accuracy): lower case, ASCII punctuation and the
 * articles a, an, the removed, white space collapsed to single spaces; in place. */
static void normalize(char *s) {
    char *w = s;
    for (char *r = s; *r; r++) {
        unsigned char c = (unsigned char)*r;
        if (ispunct(c)) continue;
        *w++ = isspace(c) ? ' ' : (char)tolower(c);
    }
    *w = '\0';
    char *out = s;
    for (char *tok = strtok(s, " "); tok; tok = strtok(NULL, " ")) { /* words, articles dropped */
        if (!strcmp(tok, "a") || !strcmp(tok, "an") || !strcmp(tok, "the")) continue;
        size_t k = strlen(tok);
        if (out != s) *out++ = ' ';
        memmove(out, tok, k);
        out += k;
    }
    *out = '\0';
}

/* gen_text_stop's match: the completion so far holds the example delimiter (after its first
 * character) */
static int at_delimiter(const void *delim, const char *text, size_t len) {
    const char *d = delim;
    return d[0] && len > 1 && strstr(text + 1, d) != NULL;
}

/* Is completion q (cut at the delimiter) one of example e's answers? */
static int gen_right(const icl_suite *s, const icl_task *t, const icl_example *e, const gen_seq *q) {
    size_t len;
    const int drop = q->stop == GEN_STOP_EOS;
    char *text = tokenizer_decode_text(s->tok, (const uint32_t *)q->ids, (size_t)(q->n - drop), &len);
    const char *d = t->cfg.example_delimiter;
    char *cut = d[0] && len > 1 ? strstr(text + 1, d) : NULL;
    if (cut) *cut = '\0';
    normalize(text);
    int ok = 0;
    for (int k = 0; k < e->n_answers && !ok; k++) {
        char *want = strdup(e->answers[k]);
        normalize(want);
        ok = strcmp(text, want) == 0;
        free(want);
    }
    free(text);
    return ok;
}

/* generation_task_with_answers: this rank's examples completed together, then judged */
static void gen_task(tsr_model *m, icl_suite *s, const icl_task *t, const tsr_dist *d,
                     double sums[2]) {
    const int mine = t->n > d->rank ? (t->n - d->rank + d->world - 1) / d->world : 0;
    if (!mine) return;
    gen_seq *q = tsr_calloc((size_t)mine, sizeof *q);
    int32_t *ids = tsr_malloc((size_t)mine * ICL_GEN_TOKENS * sizeof *ids), maxp = 1;
    int32_t **prompt = tsr_calloc((size_t)mine, sizeof *prompt);
    for (int k = 0; k < mine; k++) {
        const icl_option *o = &t->ex[d->rank + k * d->world].opts[0];
        const int n = o->n_ctx > s->T ? s->T : o->n_ctx, skip = o->n_ctx - n; /* left-cut */
        prompt[k] = tsr_malloc((size_t)(n ? n : 1) * sizeof **prompt);
        for (int j = 0; j < n; j++) prompt[k][j] = (int32_t)o->ids[skip + j];
        q[k] = (gen_seq){.prompt = prompt[k], .n_prompt = n, .ids = ids + (size_t)k * ICL_GEN_TOKENS};
        maxp = n > maxp ? n : maxp;
    }
    const uint32_t eos = tokenizer_eos_id(s->tok, NULL, TOKENIZER_EOS_DOCUMENT);
    const int32_t stop = eos < (uint32_t)m->V ? (int32_t)eos : m->V - 1;
    gen_text_stop_ctx sc = {s->tok, at_delimiter, t->cfg.example_delimiter};
    const gen_batch_opts o = {.sampling = {.temperature = 0.0, .top_p = 1.0},
                              .max_new = ICL_GEN_TOKENS, .stop_ids = &stop, .n_stop_ids = 1,
                              .stop_cb = gen_text_stop, .stop_ctx = &sc, .batch = s->B,
                              .cap = maxp + ICL_GEN_TOKENS};
    tsr_decoder dec;
    model_infer_decoder(m, &dec);
    gen_batch_run(&dec, &o, q, mine);
    for (int k = 0; k < mine; k++) {
        sums[0] += gen_right(s, t, &t->ex[d->rank + k * d->world], &q[k]);
        sums[1] += 1;
        free(prompt[k]);
    }
    free(q), free(ids), free(prompt);
}

/* This rank's share of task t (examples i with i % world == rank): sums[0] += examples right,
 * sums[1] += examples scored. */
static void score_task(tsr_model *m, icl_suite *s, const icl_task *t, const tsr_dist *d,
                       double sums[2]) {
    double nll[ICL_MAX_ROWS];
    int greedy[ICL_MAX_ROWS];
    for (int i = d->rank; i < t->n; i += d->world) {
        const icl_example *e = &t->ex[i];
        double best = INFINITY;
        int pick = -1, ok = 0;
        for (int k0 = 0; k0 < e->n_opts; k0 += s->B) {
            int rows = e->n_opts - k0 < s->B ? e->n_opts - k0 : s->B;
            for (int r = 0; r < rows; r++) put_option(s, r, &e->opts[k0 + r]);
            for (int r = rows; r < s->B; r++) put_option(s, r, &e->opts[k0]); /* padding */
            score_rows(m, s, rows, nll, greedy);
            for (int r = 0; r < rows; r++)
                if (nll[r] < best) best = nll[r], pick = k0 + r; /* ties: the lower option */
            if (t->cfg.type == TSR_ICL_LM) ok = greedy[0];
        }
        if (t->cfg.type != TSR_ICL_LM) ok = pick == e->gold;
        sums[0] += ok;
        sums[1] += 1;
    }
}

void icl_suite_score(icl_suite *s, tsr_model *m, const tsr_dist *d, icl_scores *out) {
    double sums[2 * TSR_MAX_ICL_TASKS] = {0}; /* per task: examples right, scored */
    int64_t mine = 0;
    for (int i = 0; i < s->n; i++)
        if (s->tasks[i].cfg.type != TSR_ICL_GEN) mine += task_forwards(s, &s->tasks[i], d);
    /* ranks score different numbers of options: idle forwards last, where a forward is a
     * collective (model_forwards_most) */
    const int64_t most = model_forwards_most(m, mine);
    tsr_progress pg; /* every TSR_PROGRESS_S on rank 0, after a task */
    tsr_progress_begin(&pg, "eval: icl_tasks", (uint64_t)s->n, "tasks");
    for (int i = 0; i < s->n; i++) {
        if (s->tasks[i].cfg.type == TSR_ICL_GEN) gen_task(m, s, &s->tasks[i], d, sums + 2 * i);
        else score_task(m, s, &s->tasks[i], d, sums + 2 * i);
        tsr_progress_tick(&pg, (uint64_t)i + 1);
    }
    for (int64_t k = mine; k < most; k++) model_forward(m, NULL, NULL, 0, s->T);
    dist_view_sum_f64(d, sums, 2 * (size_t)s->n);
    memset(out, 0, sizeof *out);
    out->n = s->n;
    double sum = 0;
    for (int i = 0; i < s->n; i++) {
        out->correct[i] = sums[2 * i];
        out->examples[i] = sums[2 * i + 1];
        out->accuracy[i] = out->examples[i] > 0 ? out->correct[i] / out->examples[i] : NAN;
        out->rescaled[i] = icl_rescale(out->accuracy[i], s->tasks[i].baseline);
        sum += out->rescaled[i];
    }
    out->gauntlet = s->n ? sum / s->n : NAN;
}
