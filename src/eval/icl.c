/* icl.c — loading ICL task files into token sequences (icl.h). */
#include "eval/icl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "data/data.h"
#include "json.h"
#include "strbuf.h"

/* One parsed line: the strings of the example (pointers into the JSON document). */
typedef struct raw_example {
    const char *ctx[64];  /* multiple_choice: query; LM: context; schema: the context options */
    int n_ctx;
    const char *cont[64]; /* multiple_choice: the choices; LM and schema: the continuation */
    int n_cont;
    int gold;
} raw_example;

/* Strings of an array member (or one string); returns the count, -1 on a wrong type. */
static int strings_of(const json_value *v, const char **out, int max) {
    if (v && v->type == JSON_STRING) {
        out[0] = v->str;
        return 1;
    }
    if (!v || v->type != JSON_ARRAY || v->len == 0 || v->len > (size_t)max) return -1;
    int n = 0;
    for (const json_value *e = v->child; e; e = e->next) {
        if (e->type != JSON_STRING) return -1;
        out[n++] = e->str;
    }
    return n;
}

static int parse_line(const tsr_icl_task_config *c, const json_value *o, raw_example *r,
                      const char **why) {
    static const char *const ctx_key[] = {"query", "context", "context_options", "context"};
    static const char *const cont_key[] = {"choices", "continuation", "continuation", "answer"};
    memset(r, 0, sizeof *r);
    if (o->type != JSON_OBJECT) return *why = "the line is not a JSON object", -1;
    const json_value *cv = json_get(o, ctx_key[c->type]), *kv = json_get(o, cont_key[c->type]);
    const json_value *gv = json_get(o, "gold");
    if (c->type == TSR_ICL_SCHEMA) r->n_ctx = strings_of(cv, r->ctx, 64);
    else r->n_ctx = cv && cv->type == JSON_STRING ? strings_of(cv, r->ctx, 1) : -1;
    if (r->n_ctx < 1) return *why = c->type == TSR_ICL_SCHEMA ? "\"context_options\": expected an array of 1 to 64 strings" : c->type == TSR_ICL_MC ? "\"query\": expected a string" : "\"context\": expected a string", -1;
    if (c->type == TSR_ICL_MC) r->n_cont = kv && kv->type == JSON_ARRAY ? strings_of(kv, r->cont, 64) : -1;
    else r->n_cont = kv && kv->type == JSON_STRING ? strings_of(kv, r->cont, 1) : -1;
    if (r->n_cont < 1) return *why = c->type == TSR_ICL_MC ? "\"choices\": expected an array of 1 to 64 strings" : c->type == TSR_ICL_GEN ? "\"answer\": expected a string" : "\"continuation\": expected a string", -1;
    if (c->type == TSR_ICL_GEN) { /* the aliases after the answer */
        const json_value *al = json_get(o, "aliases");
        int k = !al || (al->type == JSON_ARRAY && al->len == 0) ? 0 : strings_of(al, r->cont + 1, 63);
        if (k < 0) return *why = "\"aliases\": expected an array of at most 63 strings", -1;
        r->n_cont += k;
        return 0;
    }
    if (c->type == TSR_ICL_LM) return 0;
    int n_opts = c->type == TSR_ICL_MC ? r->n_cont : r->n_ctx;
    if (!gv || gv->type != JSON_NUMBER || gv->num != (double)(int)gv->num || gv->num < 0 ||
        gv->num >= n_opts)
        return *why = "\"gold\": expected the index of the right option (an integer from 0)", -1;
    r->gold = (int)gv->num;
    return 0;
}

/* The text of option k (context part, continuation part) of r, without any few-shot prefix. */
static void option_text(const tsr_icl_task_config *c, const raw_example *r, int k, const char **ctx,
                        const char **cont) {
    *ctx = c->type == TSR_ICL_SCHEMA ? r->ctx[k] : r->ctx[0];
    *cont = c->type == TSR_ICL_MC ? r->cont[k] : r->cont[0];
}

/* Tokenizes prefix + ctx + delimiter | continuation into o; a trailing space of the context
 * moves to the continuation. */
static void build_option(const tsr_tokenizer *tok, const char *prefix, const char *ctx,
                         const char *delim, const char *cont, icl_option *o) {
    strbuf a = {0}, b = {0};
    sb_add(&a, prefix);
    sb_add(&a, ctx);
    sb_add(&a, delim);
    if (a.n > 0 && a.s[a.n - 1] == ' ') {
        a.s[--a.n] = '\0';
        sb_add(&b, " ");
    }
    sb_add(&b, cont);
    uint32_t *ids = NULL;
    size_t n = 0, cap = 0;
    tokenizer_encode(tok, (const uint8_t *)a.s, a.n, 0, &ids, &n, &cap);
    size_t n_ctx = n;
    tokenizer_encode(tok, (const uint8_t *)b.s, b.n, 0, &ids, &n, &cap);
    o->ids = ids;
    o->n_ctx = (int)n_ctx;
    o->n_cont = (int)(n - n_ctx);
    free(a.s);
    free(b.s);
}

/* A task file as read: every non-blank line kept with its parsed document (few-shot prefixes need
 * the other examples), and the example it holds. */
typedef struct task_file {
    json_doc *docs;
    raw_example *raw;
    char **lines;
    int n;
} task_file;

static void task_file_free(task_file *tf) {
    for (int i = 0; i < tf->n; i++) {
        json_doc_free(&tf->docs[i]);
        free(tf->lines[i]);
    }
    free(tf->docs);
    free(tf->raw);
    free(tf->lines);
}

/* Reads every example of the task file c->path into tf. Returns 0 or TSR_EXIT_DATA after
 * tsr_error() named the file and line. */
static int read_task_file(const tsr_icl_task_config *c, task_file *tf) {
    FILE *f = fopen(c->path, "r");
    if (!f) {
        tsr_error("%s: cannot read ICL task '%s': %s", c->path, c->label, strerror(errno));
        return TSR_EXIT_DATA;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int n = 0, rc = 0, lineno = 0;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t k = (size_t)len;
        while (k && (line[k - 1] == '\n' || line[k - 1] == '\r' || line[k - 1] == ' ')) k--;
        if (k == 0) continue;
        tf->docs = tsr_realloc(tf->docs, (size_t)(n + 1) * sizeof *tf->docs);
        tf->raw = tsr_realloc(tf->raw, (size_t)(n + 1) * sizeof *tf->raw);
        tf->lines = tsr_realloc(tf->lines, (size_t)(n + 1) * sizeof *tf->lines);
        tf->lines[n] = tsr_malloc(k + 1);
        memcpy(tf->lines[n], line, k);
        tf->lines[n][k] = '\0';
        json_doc_init(&tf->docs[n]);
        json_value *root;
        json_error err;
        const char *why = NULL;
        if (json_parse(&tf->docs[n], tf->lines[n], k, &root, &err) != 0) {
            tsr_error("%s:%d: not JSON: %s at byte %zu", c->path, lineno, err.msg, err.pos + 1);
            rc = TSR_EXIT_DATA;
        } else if (parse_line(c, root, &tf->raw[n], &why) != 0) {
            tsr_error("%s:%d: %s example: %s", c->path, lineno, config_icl_type_name(c->type), why);
            rc = TSR_EXIT_DATA;
        }
        tf->n = ++n;
    }
    free(line);
    fclose(f);
    return rc;
}

/* The few-shot prefix of example i into prefix: c->fewshot other examples, in the order of a
 * seeded permutation of the file (skipping i), each with its gold option. */
static void fewshot_prefix(const tsr_icl_task_config *c, const task_file *tf, int i, uint64_t seed,
                           strbuf *prefix) {
    sb_add(prefix, "");
    for (int p = 0, used = 0; used < c->fewshot; p++) {
        int j = (int)sampler_permute(seed, (uint64_t)i, (uint64_t)tf->n, (uint64_t)p);
        if (j == i) continue;
        const char *sctx, *scont;
        option_text(c, &tf->raw[j], c->type == TSR_ICL_LM || c->type == TSR_ICL_GEN ? 0 : tf->raw[j].gold,
                    &sctx, &scont);
        sb_add(prefix, sctx);
        sb_add(prefix, c->continuation_delimiter);
        sb_add(prefix, scont);
        sb_add(prefix, c->example_delimiter);
        used++;
    }
}

/* Example i of the task, every option tokenized after the prefix. Returns 0, or TSR_EXIT_DATA
 * when an option's continuation has no tokens. */
static int build_example(const tsr_icl_task_config *c, const tsr_tokenizer *tok,
                         const raw_example *r, int i, const char *prefix, icl_example *e) {
    int rc = 0;
    e->n_opts = c->type == TSR_ICL_MC ? r->n_cont : c->type == TSR_ICL_SCHEMA ? r->n_ctx : 1;
    e->gold = r->gold;
    e->opts = tsr_calloc((size_t)e->n_opts, sizeof *e->opts);
    if (c->type == TSR_ICL_GEN) {
        e->n_answers = r->n_cont;
        e->answers = tsr_calloc((size_t)r->n_cont, sizeof *e->answers);
        for (int k = 0; k < r->n_cont; k++) e->answers[k] = strdup(r->cont[k]);
    }
    for (int k = 0; k < e->n_opts; k++) {
        const char *ctx, *cont;
        option_text(c, r, k, &ctx, &cont);
        build_option(tok, prefix, ctx, c->continuation_delimiter, cont, &e->opts[k]);
        if (e->opts[k].n_cont == 0) {
            tsr_error("%s: example %d option %d: the continuation has no tokens", c->path, i + 1, k);
            rc = TSR_EXIT_DATA;
        }
    }
    return rc;
}

int icl_task_load(icl_task *t, const tsr_icl_task_config *c, const tsr_tokenizer *tok,
                  uint64_t seed) {
    memset(t, 0, sizeof *t);
    t->cfg = *c;
    task_file tf = {0};
    int rc = read_task_file(c, &tf), n = tf.n;
    if (!rc && n == 0) {
        tsr_error("%s: no examples (ICL task '%s')", c->path, c->label);
        rc = TSR_EXIT_DATA;
    }
    if (!rc && c->fewshot >= n) {
        tsr_error("%s: fewshot = %d needs more than %d examples in the file", c->path, c->fewshot, n);
        rc = TSR_EXIT_DATA;
    }
    if (!rc) {
        t->n = n;
        t->ex = tsr_calloc((size_t)n, sizeof *t->ex);
        double base = 0;
        for (int i = 0; i < n; i++) {
            strbuf prefix = {0};
            fewshot_prefix(c, &tf, i, seed, &prefix);
            if (build_example(c, tok, &tf.raw[i], i, prefix.s, &t->ex[i])) rc = TSR_EXIT_DATA;
            base += c->type == TSR_ICL_LM || c->type == TSR_ICL_GEN ? 0.0 : 1.0 / t->ex[i].n_opts;
            free(prefix.s);
        }
        t->baseline = base / n;
    }
    task_file_free(&tf);
    if (rc) icl_task_free(t);
    return rc;
}

void icl_task_free(icl_task *t) {
    for (int i = 0; t->ex && i < t->n; i++) {
        for (int k = 0; k < t->ex[i].n_opts; k++) free(t->ex[i].opts[k].ids);
        for (int k = 0; k < t->ex[i].n_answers; k++) free(t->ex[i].answers[k]);
        free(t->ex[i].opts);
        free(t->ex[i].answers);
    }
    free(t->ex);
    memset(t, 0, sizeof *t);
}

double icl_rescale(double accuracy, double baseline) {
    return baseline < 1 ? (accuracy - baseline) / (1 - baseline) : 0;
}
