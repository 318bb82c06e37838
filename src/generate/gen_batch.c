/* gen_batch.c — batched generation over a KV cache of slots (gen_batch.h). */
#include "generate/gen_batch.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer/tokenizer.h"

const char *const gen_stop_names[GEN_STOP_COUNT] = {"eos", "stop", "length", "context"};

#define PREFILL_ROWS 128 /* prompt tokens per forward (at least the batch) */

uint64_t gen_stream_key(uint64_t seed, uint64_t step, uint64_t prompt, uint64_t sample) {
    uint64_t k = tsr_hash64(seed ^ 0x67656e6261746368ull); /* "genbatch" */
    k = tsr_hash64(k ^ step);
    k = tsr_hash64(k ^ prompt);
    return tsr_hash64(k ^ sample);
}

/* The state of a call: the caches, each slot's sequence (-1: free) and the distribution its next
 * token is drawn from, and each OpenMP thread's sampling scratch. */
typedef struct gen_state {
    const tsr_decoder *d;
    const gen_batch_opts *o;
    gen_seq *seqs;
    int n, next;                 /* sequences, the next one to start */
    tsr_kv_slots ks;
    int *seq_of;                 /* (batch) */
    float *probs;                /* (batch, Vp) host */
    int32_t *row_slot, *row_tok; /* (batch) one decode step's rows */
    gen_cand *cand;              /* (threads, V) */
    double *w;                   /* (threads, V) */
    int threads;
    int64_t done, tokens;
} gen_state;

static int rows_of(const gen_batch_opts *o) {
    const int pre = o->cap < PREFILL_ROWS ? o->cap : PREFILL_ROWS;
    return o->batch > pre ? o->batch : pre;
}

size_t gen_batch_bytes(const tsr_decoder *d, const gen_batch_opts *o) {
    return model_kv_slots_bytes(d->m, d->be, o->batch, o->cap, rows_of(o));
}

static int same_prompt(const gen_seq *a, const gen_seq *b) {
    return a->n_prompt == b->n_prompt &&
           (a->prompt == b->prompt ||
            memcmp(a->prompt, b->prompt, (size_t)a->n_prompt * sizeof *a->prompt) == 0);
}

/* Starts the waiting sequences in the free slots: each prompt fed once, and copied into the slot
 * of the next sequence when it has the same prompt. */
static void fill(gen_state *g) {
    const int Vp = g->d->m->Vp;
    int prev = -1; /* the slot started last in this call */
    for (int s = 0; s < g->o->batch && g->next < g->n; s++) {
        if (g->seq_of[s] >= 0) continue;
        gen_seq *q = &g->seqs[g->next];
        model_kv_slots_reset(&g->ks, s);
        if (prev >= 0 && same_prompt(q, &g->seqs[g->seq_of[prev]])) {
            model_kv_slots_copy(&g->ks, g->d->be, g->d->m, s, prev);
            memcpy(g->probs + (size_t)s * Vp, g->probs + (size_t)prev * Vp, (size_t)Vp * sizeof(float));
        } else {
            if (q->n_prompt < 1 || q->n_prompt > g->o->cap)
                tsr_die(TSR_EXIT_INTERNAL, "gen_batch: a prompt of %d tokens, slots of %d positions",
                        q->n_prompt, g->o->cap);
            model_kv_slots_feed(g->d, &g->ks, s, q->prompt, q->n_prompt,
                                g->probs + (size_t)s * Vp);
        }
        q->n = 0, q->entropy = 0.0;
        g->seq_of[s] = g->next++;
        prev = s;
    }
}

/* the entropy (nats) of a distribution over V ids */
static double entropy_of(const float *p, int V) {
    double h = 0.0;
    for (int i = 0; i < V; i++)
        if (p[i] > 0.0f) h -= (double)p[i] * log((double)p[i]);
    return h;
}

static int is_stop_id(const gen_batch_opts *o, int32_t id) {
    for (int i = 0; i < o->n_stop_ids; i++)
        if (o->stop_ids[i] == id) return 1;
    return 0;
}

/* slot s's next token drawn (scratch of thread th), recorded, and whether the sequence ends */
static int draw(gen_state *g, int s, int th) {
    const tsr_model *m = g->d->m;
    gen_seq *q = &g->seqs[g->seq_of[s]];
    const float *p = g->probs + (size_t)s * m->Vp;
    gen_sampling how = g->o->sampling;
    how.seed = q->key;
    const int32_t id = gen_pick(p, m->V, &how, (uint64_t)q->n, g->cand + (size_t)th * m->V,
                                g->w + (size_t)th * m->V);
    q->ids[q->n] = id;
    if (q->logp) q->logp[q->n] = (float)log((double)p[id]);
    q->entropy += entropy_of(p, m->V);
    q->n++;
    const int learned = m->params_info[TSR_P_WPE].numel > 0;
    const tsr_kv_slots *ks = &g->ks;
    if (is_stop_id(g->o, id)) q->stop = GEN_STOP_EOS;
    else if (g->o->stop_cb && g->o->stop_cb(g->o->stop_ctx, q)) q->stop = GEN_STOP_STRING;
    else if (q->n >= g->o->max_new) q->stop = GEN_STOP_LENGTH;
    else if (ks->len[s] >= ks->buf.cap || (learned && ks->len[s] - ks->seg[s] >= m->maxT))
        q->stop = GEN_STOP_CONTEXT;
    else return 0;
    return 1;
}

/* Every active slot draws its token (in parallel: each draw is a function of its slot alone);
 * the finished free their slots, the others make the rows of the next decode step. Returns them. */
static int draw_all(gen_state *g) {
    int active[1024], na = 0, ended[1024];
    int *act = g->o->batch <= 1024 ? active : tsr_malloc((size_t)g->o->batch * 2 * sizeof(int));
    int *end = g->o->batch <= 1024 ? ended : act + g->o->batch;
    for (int s = 0; s < g->o->batch; s++)
        if (g->seq_of[s] >= 0) act[na++] = s;
#pragma omp parallel for schedule(dynamic, 1) num_threads(g->threads) if (na > 1)
    for (int i = 0; i < na; i++) end[i] = draw(g, act[i], omp_get_thread_num());
    int rows = 0;
    for (int i = 0; i < na; i++) {
        const int s = act[i];
        g->tokens++;
        if (end[i]) {
            g->seq_of[s] = -1, g->done++;
        } else {
            g->row_slot[rows] = s;
            g->row_tok[rows++] = g->seqs[g->seq_of[s]].ids[g->seqs[g->seq_of[s]].n - 1];
        }
    }
    if (act != active) free(act);
    return rows;
}

/* the rows' next-token distributions into their slots' */
static void step(gen_state *g, int rows) {
    const int Vp = g->d->m->Vp;
    float *out = tsr_malloc((size_t)rows * Vp * sizeof *out);
    model_kv_slots_step(g->d, &g->ks, g->row_slot, g->row_tok, rows, out);
    for (int i = 0; i < rows; i++)
        memcpy(g->probs + (size_t)g->row_slot[i] * Vp, out + (size_t)i * Vp, (size_t)Vp * sizeof *out);
    free(out);
}

static void state_init(gen_state *g, const tsr_decoder *d, const gen_batch_opts *o, gen_seq *seqs,
                       int n) {
    memset(g, 0, sizeof *g);
    g->d = d, g->o = o, g->seqs = seqs, g->n = n;
    const int B = o->batch, V = d->m->V;
    model_kv_slots_init(&g->ks, d->m, d->be, B, o->cap, rows_of(o));
    g->seq_of = tsr_malloc((size_t)B * sizeof *g->seq_of);
    for (int s = 0; s < B; s++) g->seq_of[s] = -1;
    g->probs = tsr_malloc((size_t)B * d->m->Vp * sizeof *g->probs);
    g->row_slot = tsr_malloc((size_t)B * sizeof *g->row_slot);
    g->row_tok = tsr_malloc((size_t)B * sizeof *g->row_tok);
    g->threads = omp_get_max_threads();
    g->cand = tsr_malloc((size_t)g->threads * V * sizeof *g->cand);
    g->w = tsr_malloc((size_t)g->threads * V * sizeof *g->w);
}

static void state_free(gen_state *g) {
    model_kv_slots_free(&g->ks, g->d->be);
    free(g->seq_of), free(g->probs), free(g->row_slot), free(g->row_tok), free(g->cand), free(g->w);
}

int64_t gen_batch_run(const tsr_decoder *d, const gen_batch_opts *o, gen_seq *seqs, int n) {
    if (o->batch < 1 || o->max_new < 1 || o->cap < 1)
        tsr_die(TSR_EXIT_INTERNAL, "gen_batch_run: batch %d, max_new %d, cap %d", o->batch,
                o->max_new, o->cap);
    gen_state g;
    state_init(&g, d, o, seqs, n);
    for (;;) {
        fill(&g);
        const int rows = draw_all(&g);
        if (o->progress) o->progress(o->progress_ctx, g.done, g.tokens);
        if (rows) step(&g, rows);
        else if (g.next >= g.n) break;
    }
    state_free(&g);
    return g.tokens;
}

int gen_text_stop(void *ctx, const gen_seq *q) {
    const gen_text_stop_ctx *c = ctx;
    size_t len;
    char *text = tokenizer_decode_text(c->tok, (const uint32_t *)q->ids, (size_t)q->n, &len);
    const int hit = c->match(c->arg, text, len);
    free(text);
    return hit;
}
