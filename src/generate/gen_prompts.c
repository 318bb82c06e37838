/* gen_prompts.c — `tessera generate --prompts` (gen_prompts.h; docs/generate.md "Many prompts").
 *
 * Phases: read the file -> per chunk of lines: each line's prompt ids (rendered, encoded) -> the
 * sequences (samples of each prompt, their streams) -> gen_batch_run with the progress line ->
 * each completion's line -> rename OUT.tmp to OUT.
 */
#include "generate/gen_prompts.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "fsutil.h"
#include "json.h"
#include "generate/gen_batch.h"

#define MAX_FILE_BYTES (1ull << 32) /* the prompts file */
#define CHUNK_LINES 1024            /* prompts generated together, then written */
#define PROGRESS_TTY_S 0.25
#define PROGRESS_LOG_S 5.0

typedef struct prompt {
    int32_t *ids;
    int n;
    char id[256];        /* the line's "id" as JSON, "" without */
    uint64_t index;      /* the line's 0-based number among the prompts */
} prompt;

typedef struct run_state {
    const tsr_model *m;
    const tsr_tokenizer *tok;
    const gen_chat *chat;
    const gen_prompts_opts *o;
    FILE *out;
    int tty;
    double t0, t_shown;
    int64_t total, done_before, tokens_before; /* sequences in all, of earlier chunks */
    size_t max_bytes; /* a text prompt's bytes that can fit (encode), 0: not known yet */
} run_state;

/* ---------------------------------------------------------------- a line's prompt */

static int bad_line(const run_state *r, uint64_t line, const char *why) {
    tsr_error("generate: --prompts %s, line %llu: %s", r->o->in, (unsigned long long)line, why);
    return TSR_EXIT_USAGE;
}

/* A text prompt: refused unread when it cannot fit the position table of a model with learned
 * positions (more bytes than maxT - 1 tokens can hold: tokenizer_bytes_bound), else encoded. */
static int encode(run_state *r, uint64_t line, const char *text, size_t n, prompt *p) {
    if (!r->max_bytes) /* (once: it reads the whole vocabulary) */
        r->max_bytes = r->m->cfg.pos == TSR_POS_LEARNED
                           ? tokenizer_bytes_bound(r->tok, (size_t)r->m->maxT - 1) : SIZE_MAX;
    const size_t most = r->max_bytes;
    if (n > most) {
        char why[200];
        snprintf(why, sizeof why, "the prompt has %zu bytes, more than the %zu that the model's "
                 "position table of %d tokens can hold (model.max_seq_len): shorten it", n, most,
                 r->m->maxT);
        return bad_line(r, line, why);
    }
    uint32_t *u = NULL;
    size_t nu = 0, cap = 0;
    tokenizer_encode(r->tok, (const uint8_t *)text, n, 1, &u, &nu, &cap);
    p->ids = tsr_malloc((nu ? nu : 1) * sizeof *p->ids);
    for (size_t i = 0; i < nu; i++) p->ids[i] = u[i] > INT32_MAX ? INT32_MAX : (int32_t)u[i];
    p->n = (int)nu;
    free(u);
    return 0;
}

static int ids_of(const run_state *r, uint64_t line, const json_value *arr, prompt *p) {
    if (arr->type != JSON_ARRAY) return bad_line(r, line, "\"prompt_ids\" is not an array");
    p->ids = tsr_malloc((arr->len ? arr->len : 1) * sizeof *p->ids);
    p->n = 0;
    for (const json_value *v = arr->child; v; v = v->next) {
        if (v->type != JSON_NUMBER || v->num < 0 || v->num >= r->m->V || v->num != (int32_t)v->num)
            return bad_line(r, line, "\"prompt_ids\" holds something that is not a token id of "
                            "the model (an integer in [0, V))");
        p->ids[p->n++] = (int32_t)v->num;
    }
    return 0;
}

/* the "id" member as JSON text (a string or a number) */
static int copy_id(const run_state *r, uint64_t line, const json_value *id, prompt *p) {
    p->id[0] = '\0';
    if (!id) return 0;
    if (id->type == JSON_NUMBER) {
        if (!isfinite(id->num)) /* (1e999: "inf" written back is not JSON) */
            return bad_line(r, line, "\"id\" is a number beyond a double's range: give it as a "
                            "string");
        snprintf(p->id, sizeof p->id, "%.17g", id->num);
        return 0;
    }
    if (id->type != JSON_STRING || id->len > sizeof p->id / 8)
        return bad_line(r, line, "\"id\" must be a string of at most 32 bytes or a number");
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    json_fput_string(f, id->str);
    fclose(f);
    snprintf(p->id, sizeof p->id, "%s", buf);
    free(buf);
    return 0;
}

/* The prompt of one line: rendered (messages; --chat), encoded, or its ids. */
static int parse_prompt(run_state *r, uint64_t line, const char *s, size_t n, json_doc *jd,
                        prompt *p) {
    json_value *root;
    json_error je;
    char why[200];
    if (json_parse(jd, s, n, &root, &je)) {
        snprintf(why, sizeof why, "not JSON (byte %zu: %s)", je.pos, je.msg);
        return bad_line(r, line, why);
    }
    if (root->type != JSON_OBJECT) return bad_line(r, line, "not a JSON object");
    TSR_CHECK(copy_id(r, line, json_get(root, "id"), p));
    const json_value *text = json_get(root, "prompt"), *msgs = json_get(root, "messages");
    const json_value *ids = json_get(root, "prompt_ids");
    if (!!text + !!msgs + !!ids != 1)
        return bad_line(r, line, "wants exactly one of \"prompt\", \"messages\", \"prompt_ids\"");
    if (ids) TSR_CHECK(ids_of(r, line, ids, p));
    else if (!r->tok) return bad_line(r, line, "a text prompt needs a tokenizer (--tokenizer)");
    else if (text && text->type != JSON_STRING) return bad_line(r, line, "\"prompt\" is not a string");
    else if (msgs && msgs->type != JSON_ARRAY) return bad_line(r, line, "\"messages\" is not an array");
    else if (text && !r->o->chat) TSR_CHECK(encode(r, line, text->str, text->len, p));
    else {
        char *t = NULL;
        size_t tn = 0;
        int rc = msgs ? gen_chat_render_messages(r->chat, r->o->tok_spec, msgs, &t, &tn)
                      : gen_chat_render(r->chat, r->o->tok_spec, r->o->system, text->str, &t, &tn);
        if (rc) {
            free(t);
            return bad_line(r, line, "the chat template cannot render it (above)");
        }
        rc = encode(r, line, t, tn, p);
        free(t);
        TSR_CHECK(rc);
    }
    if (p->n < 1) return bad_line(r, line, "the prompt has no tokens");
    const int learned = r->m->cfg.pos == TSR_POS_LEARNED;
    if (learned && p->n >= r->m->maxT) {
        snprintf(why, sizeof why, "the prompt has %d tokens, the model's position table %d "
                 "(model.max_seq_len): shorten it", p->n, r->m->maxT);
        return bad_line(r, line, why);
    }
    return 0;
}

/* ---------------------------------------------------------------- stop strings */

/* the completion's text (its ids; the last one dropped when it is a stop id) into *out */
static size_t text_of(const tsr_tokenizer *tok, const gen_seq *q, int drop_last, char **out) {
    size_t len;
    *out = tokenizer_decode_text(tok, (const uint32_t *)q->ids, (size_t)q->n - (drop_last ? 1 : 0),
                                 &len);
    return len;
}

/* the earliest stop string in text, or NULL */
static const char *first_stop(const gen_prompts_opts *o, const char *text) {
    const char *best = NULL;
    for (int k = 0; k < o->n_stops; k++) {
        const char *at = strstr(text, o->stops[k]);
        if (at && (!best || at < best)) best = at;
    }
    return best;
}

/* gen_text_stop's match: the text holds a stop string of o (gen_prompts_opts) */
static int stop_string(const void *o, const char *text, size_t len) {
    (void)len;
    return first_stop(o, text) != NULL;
}

/* ---------------------------------------------------------------- progress */

static void progress(void *ctx, int64_t done, int64_t tokens) {
    run_state *r = ctx;
    const double now = tsr_now();
    if (now - r->t_shown < (r->tty ? PROGRESS_TTY_S : PROGRESS_LOG_S)) return;
    r->t_shown = now;
    const int64_t d = r->done_before + done, k = r->tokens_before + tokens;
    fprintf(stderr, "%sgenerate: %lld/%lld sequences, %lld tokens, %.1f tokens/s%s",
            r->tty ? "\r" : "", (long long)d, (long long)r->total, (long long)k,
            (double)k / (now - r->t0 > 0 ? now - r->t0 : 1e-9), r->tty ? "" : "\n");
    fflush(stderr);
}

/* ---------------------------------------------------------------- output */

static void write_ids(FILE *f, const gen_seq *q) {
    fputs(", \"ids\": [", f);
    for (int i = 0; i < q->n; i++) fprintf(f, "%s%d", i ? ", " : "", q->ids[i]);
    fputc(']', f);
}

static void write_one(const run_state *r, const prompt *p, int g, const gen_seq *q) {
    FILE *f = r->out;
    double lp = 0.0;
    for (int i = 0; i < q->n; i++) lp += q->logp[i];
    fprintf(f, "{\"index\": %llu, ", (unsigned long long)p->index);
    if (p->id[0]) fprintf(f, "\"id\": %s, ", p->id);
    fprintf(f, "\"sample\": %d", g);
    if (r->tok) {
        char *text;
        text_of(r->tok, q, q->stop == GEN_STOP_EOS, &text);
        char *cut = (char *)first_stop(r->o, text);
        if (cut) *cut = '\0';
        fputs(", \"completion\": ", f);
        json_fput_string(f, text);
        free(text);
    }
    if (!r->tok || r->o->ids) write_ids(f, q);
    fprintf(f, ", \"tokens\": %d, \"stop\": \"%s\", \"logprob\": %.9g}\n", q->n,
            gen_stop_names[q->stop], lp);
}

/* ---------------------------------------------------------------- a chunk of lines */

/* Generates the prompts p (n) and writes their completions in order. */
static void run_chunk(run_state *r, prompt *p, int n) {
    const gen_prompts_opts *o = r->o;
    const int S = o->samples, N = n * S;
    int maxp = 0;
    for (int i = 0; i < n; i++) maxp = p[i].n > maxp ? p[i].n : maxp;
    gen_seq *q = tsr_calloc((size_t)N, sizeof *q);
    int32_t *ids = tsr_malloc((size_t)N * o->max_new * sizeof *ids);
    float *lp = tsr_malloc((size_t)N * o->max_new * sizeof *lp);
    for (int i = 0; i < N; i++) {
        const prompt *pi = &p[i / S];
        q[i] = (gen_seq){.prompt = pi->ids, .n_prompt = pi->n,
                         .key = gen_stream_key(o->smp.seed, 0, pi->index, (uint64_t)(i % S)),
                         .ids = ids + (size_t)i * o->max_new, .logp = lp + (size_t)i * o->max_new};
    }
    gen_text_stop_ctx sc = {r->tok, stop_string, o};
    const gen_batch_opts bo = {.sampling = o->smp, .max_new = o->max_new, .stop_ids = o->stop_ids,
                               .n_stop_ids = o->n_stop_ids,
                               .stop_cb = o->n_stops && r->tok ? gen_text_stop : NULL,
                               .stop_ctx = &sc, .batch = o->batch, .cap = maxp + o->max_new,
                               .progress = progress, .progress_ctx = r};
    tsr_decoder d;
    model_infer_decoder(r->m, &d);
    r->tokens_before += gen_batch_run(&d, &bo, q, N);
    r->done_before += N;
    for (int i = 0; i < N; i++) write_one(r, &p[i / S], i % S, &q[i]);
    free(q), free(ids), free(lp);
}

static void free_prompts(prompt *p, int n) {
    for (int i = 0; i < n; i++) free(p[i].ids);
}

/* The lines of buf (n bytes): counted, then parsed and generated chunk by chunk. */
static int run_lines(run_state *r, char *buf, size_t n) {
    int64_t lines = 0;
    for (size_t i = 0; i < n; i++) lines += buf[i] == '\n' || (i + 1 == n);
    r->total = lines * r->o->samples;
    prompt *p = tsr_calloc(CHUNK_LINES, sizeof *p);
    json_doc jd;
    json_doc_init(&jd);
    int rc = 0, k = 0;
    uint64_t line = 0, index = 0;
    for (char *s = buf; s < buf + n && !rc; line++) {
        char *e = memchr(s, '\n', (size_t)(buf + n - s));
        size_t len = e ? (size_t)(e - s) : (size_t)(buf + n - s);
        if (len && s[len - 1] == '\r') len--;
        char *next = e ? e + 1 : buf + n;
        if (len) { /* (blank lines are skipped) */
            p[k].index = index++;
            rc = parse_prompt(r, line + 1, s, len, &jd, &p[k]);
            if (!rc && ++k == CHUNK_LINES) run_chunk(r, p, k), free_prompts(p, k), k = 0;
        }
        s = next;
    }
    r->total = (int64_t)index * r->o->samples;
    if (!rc && k) run_chunk(r, p, k);
    free_prompts(p, k + (rc ? 1 : 0));
    free(p);
    json_doc_free(&jd);
    return rc;
}

int gen_prompts_run(const tsr_model *m, const tsr_tokenizer *tok, const gen_chat *chat,
                    const gen_prompts_opts *o) {
    char *buf, tmp[4200];
    size_t n;
    TSR_CHECK(fs_read_all(o->in, MAX_FILE_BYTES, &buf, &n));
    if (tsr_snprintf(tmp, sizeof tmp, "%s.tmp", o->out)) {
        free(buf);
        tsr_error("generate: --out %s: the path is too long", o->out);
        return TSR_EXIT_USAGE;
    }
    run_state r = {.m = m, .tok = tok, .chat = chat, .o = o, .tty = isatty(STDERR_FILENO),
                   .t0 = tsr_now()};
    r.t_shown = r.t0; /* the first progress line after one interval */
    if (!(r.out = fopen(tmp, "w"))) {
        free(buf);
        tsr_error("generate: --out %s: cannot create %s: %s", o->out, tmp, strerror(errno));
        return TSR_EXIT_DATA;
    }
    int rc = run_lines(&r, buf, n);
    free(buf);
    const double dt = tsr_now() - r.t0;
    int bad = fflush(r.out) != 0 || fsync(fileno(r.out)) != 0;
    bad |= fclose(r.out) != 0;
    if (!rc && bad) {
        tsr_error("generate: --out %s: writing %s failed: %s", o->out, tmp, strerror(errno));
        rc = TSR_EXIT_DATA;
    }
    if (!rc && rename(tmp, o->out) != 0) {
        tsr_error("generate: --out %s: cannot rename %s into place: %s", o->out, tmp,
                  strerror(errno));
        rc = TSR_EXIT_DATA;
    }
    if (rc) unlink(tmp);
    else
        fprintf(stderr, "%sgenerate: %lld completions of %lld prompts in %.2f s: %lld tokens, %.1f "
                "tokens/s (batch %d), written to %s\n", r.tty ? "\r" : "", (long long)r.total,
                (long long)(r.total / o->samples), dt, (long long)r.tokens_before,
                (double)r.tokens_before / (dt > 0 ? dt : 1e-9), o->batch, o->out);
    return rc;
}
