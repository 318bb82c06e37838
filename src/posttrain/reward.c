/* reward.c — the built-in rewards and the dispatch (reward.h; docs/rl.md "Rewards"). The program
 * of reward.kind = command: reward_proc.c. */
#include "posttrain/reward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "posttrain/reward_proc.h"

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static const char *trim(const char *s, size_t *n) {
    while (*n && is_space(*s)) s++, (*n)--;
    while (*n && is_space(s[*n - 1])) (*n)--;
    return s;
}

/* the content of the last \boxed{...} (braces nested), or NULL */
static const char *boxed(const char *text, size_t *n) {
    const char *at = NULL;
    for (const char *p = strstr(text, "\\boxed{"); p; p = strstr(p + 1, "\\boxed{")) at = p;
    if (!at) return NULL;
    const char *s = at + 7, *e = s;
    for (int depth = 1; *e; e++) {
        depth += *e == '{' ? 1 : *e == '}' ? -1 : 0;
        if (!depth) break;
    }
    if (!*e) return NULL; /* not closed: no answer */
    *n = (size_t)(e - s);
    return s;
}

/* the text after the last marker, or NULL */
static const char *after_marker(const char *text, const char *marker, size_t *n) {
    const char *at = NULL;
    const size_t m = strlen(marker);
    for (const char *p = strstr(text, marker); p; p = strstr(p + 1, marker)) at = p;
    if (!at) return NULL;
    *n = strlen(at + m);
    return at + m;
}

/* ---- what a reward sees (docs/rl.md "What a reward sees") ---- */

void reward_harmony_find(reward_harmony *h, const tsr_tokenizer *tok, const int32_t *stop,
                         int n_stop) {
    static const char *const names[] = {"<|channel|>", "<|message|>", "<|start|>", "<|end|>",
                                        "<|return|>", "<|call|>"};
    int32_t *const at[] = {&h->channel, &h->message, &h->start, &h->end, &h->ret, &h->call};
    memset(h, 0, sizeof *h);
    for (size_t i = 0; tok && i < sizeof names / sizeof names[0]; i++) {
        const uint32_t id = tokenizer_special_id(tok, names[i]);
        if (id > INT32_MAX) return; /* UINT32_MAX: the tokenizer has no such token */
        *at[i] = (int32_t)id;
    }
    for (int i = 0; tok && i < n_stop; i++) h->on |= stop[i] == h->ret;
}

/* a token that ends a header or a message */
static int harmony_mark(const reward_harmony *h, int32_t id) {
    return id == h->channel || id == h->message || id == h->start || id == h->end ||
           id == h->ret || id == h->call;
}

/* do the k ids decode to "final" (spaces around it dropped)? */
static int header_final(const tsr_tokenizer *tok, const int32_t *ids, int k) {
    size_t len;
    char *s = tokenizer_decode_text(tok, (const uint32_t *)ids, (size_t)k, &len);
    const char *w = trim(s, &len);
    const int yes = len == 5 && memcmp(w, "final", 5) == 0;
    free(s);
    return yes;
}

/* the last final-channel message of ids: [*from, *to), 1; or 0 */
static int final_span(const reward_harmony *h, const tsr_tokenizer *tok, const int32_t *ids,
                      int n, int *from, int *to) {
    int found = 0;
    for (int c = 0; c < n; c++) {
        if (ids[c] != h->channel) continue;
        int m = c + 1, e;
        while (m < n && !harmony_mark(h, ids[m])) m++;
        if (m == n || ids[m] != h->message || !header_final(tok, ids + c + 1, m - c - 1)) continue;
        for (e = m + 1; e < n && !harmony_mark(h, ids[e]);) e++;
        *from = m + 1, *to = e, found = 1;
    }
    return found;
}

void reward_texts(const reward_harmony *h, const tsr_tokenizer *tok, const int32_t *ids, int n,
                  char **text, char **final) {
    size_t len;
    int from, to;
    *text = tok ? tokenizer_decode_text(tok, (const uint32_t *)ids, (size_t)n, &len) : strdup("");
    *final = NULL;
    if (tok && h->on && final_span(h, tok, ids, n, &from, &to))
        *final = tokenizer_decode_text(tok, (const uint32_t *)ids + from, (size_t)(to - from), &len);
}

const char *reward_seen(const reward_req *q) { return q->harmony ? q->final : q->completion; }

const char *reward_extract(const tsr_config *cfg, const char *text, size_t *n) {
    const tsr_extract_kind k = cfg->reward.extract;
    const char *s = NULL;
    if (k != TSR_EXTRACT_MARKER) s = boxed(text, n);
    if (!s && k != TSR_EXTRACT_BOXED) s = after_marker(text, cfg->reward.marker, n);
    if (!s && k == TSR_EXTRACT_AUTO) s = text, *n = strlen(text);
    return s ? trim(s, n) : NULL;
}

/* a number read from n bytes (spaces and thousands commas dropped, a leading '$' too), or 0 */
static int read_number(const char *s, size_t n, double *v) {
    char buf[128];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ',' || is_space(s[i]) || (s[i] == '$' && k == 0)) continue;
        if (k + 1 == sizeof buf) return 0;
        buf[k++] = s[i];
    }
    buf[k] = '\0';
    return k > 0 && tsr_parse_f64(buf, -HUGE_VAL, HUGE_VAL, v) == 0 && isfinite(*v);
}

int reward_equal(const tsr_config *cfg, const char *answer, size_t n, const char *want) {
    size_t wn = strlen(want);
    want = trim(want, &wn);
    if (cfg->reward.compare == TSR_COMPARE_EXACT) return n == wn && memcmp(answer, want, n) == 0;
    double a, b;
    if (!read_number(answer, n, &a) || !read_number(want, wn, &b)) return 0;
    return fabs(a - b) <= 1e-9 * fmax(1.0, fmax(fabs(a), fabs(b)));
}

/* the record's "answer" as text (a number printed shortest), or NULL */
static const char *record_answer(reward_ctx *r, const reward_req *q, char *buf, size_t cap) {
    json_value *root;
    json_error je;
    if (json_parse(&r->jd, q->record, q->record_len, &root, &je) || root->type != JSON_OBJECT)
        return NULL;
    const json_value *a = json_get(root, "answer");
    if (!a) return NULL;
    if (a->type == JSON_STRING) return a->str;
    if (a->type != JSON_NUMBER) return NULL;
    snprintf(buf, cap, "%.17g", a->num);
    return buf;
}

/* reward.kind = answer, regex: 1 or 0 (pass the same), then the format reward */
static int builtin(reward_ctx *r, const reward_req *q, double *reward, int *pass) {
    const tsr_config *c = r->cfg;
    const char *seen = reward_seen(q); /* NULL: harmony without a final channel, no answer */
    int ok;
    if (c->reward.kind == TSR_REWARD_REGEX) {
        ok = seen && regexec(&r->re, seen, 0, NULL, 0) == 0;
    } else {
        char num[64];
        const char *want = record_answer(r, q, num, sizeof num);
        if (!want) {
            snprintf(r->err, sizeof r->err, "reward.kind = \"answer\": the record of prompt %llu "
                     "has no \"answer\" (a string or a number): %.300s",
                     (unsigned long long)q->prompt_index, q->record);
            return TSR_EXIT_DATA;
        }
        size_t n = 0;
        const char *got = seen ? reward_extract(c, seen, &n) : NULL;
        ok = got && reward_equal(c, got, n, want);
    }
    *pass = ok;
    *reward = ok ? 1.0 : 0.0;
    if (r->have_fmt && seen && regexec(&r->fmt, seen, 0, NULL, 0) == 0)
        *reward += c->reward.format_weight;
    return 0;
}

static int compile(regex_t *re, const char *expr, const char *key) {
    int rc = regcomp(re, expr, REG_EXTENDED | REG_NOSUB);
    if (rc == 0) return 0;
    char why[256];
    regerror(rc, re, why, sizeof why);
    tsr_error("%s = \"%s\": not a POSIX extended regular expression: %s", key, expr, why);
    return TSR_EXIT_USAGE;
}

int reward_open(reward_ctx *r, const tsr_config *cfg, int rank, int world) {
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->rank = rank;
    r->to_child = r->from_child = r->life = -1;
    json_doc_init(&r->jd);
    if (cfg->reward.kind == TSR_REWARD_REGEX) {
        TSR_CHECK(compile(&r->re, cfg->reward.regex, "reward.regex"));
        r->have_re = 1;
    }
    if (cfg->reward.format_regex[0]) {
        TSR_CHECK(compile(&r->fmt, cfg->reward.format_regex, "reward.format_regex"));
        r->have_fmt = 1;
    }
    return cfg->reward.kind == TSR_REWARD_COMMAND ? reward_proc_start(r, rank, world) : 0;
}

int reward_score(reward_ctx *r, const reward_req *q, int n, double *reward, int *pass) {
    if (r->cfg->reward.kind == TSR_REWARD_COMMAND) {
        TSR_CHECK(reward_proc_score(r, q, n, reward, pass));
        if (r->have_fmt)
            for (int i = 0; i < n; i++)
                if (reward_seen(&q[i]) && regexec(&r->fmt, reward_seen(&q[i]), 0, NULL, 0) == 0)
                    reward[i] += r->cfg->reward.format_weight;
        return 0;
    }
    for (int i = 0; i < n; i++) TSR_CHECK(builtin(r, &q[i], &reward[i], &pass[i]));
    return 0;
}

void reward_close(reward_ctx *r) {
    if (!r->cfg) return;
    reward_proc_stop(r);
    if (r->have_re) regfree(&r->re);
    if (r->have_fmt) regfree(&r->fmt);
    json_doc_free(&r->jd);
    free(r->buf);
    memset(r, 0, sizeof *r);
}
