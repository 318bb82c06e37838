/* jinja.c — the public face of the Jinja subset (jinja.h): compile once, render per
 * conversation. The context arrives as parsed JSON (src/base/json.h) and becomes runtime values
 * the way @huggingface/jinja converts a JavaScript object: integral numbers are integers, other
 * numbers floats, and an object's keys come in JavaScript's order (array-index keys first, in
 * numeric order, then the rest as written; a repeated key keeps its first place, last value). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/jinja_int.h"

struct jinja_template {
    jj_arena arena; /* tokens and syntax tree */
    jj_list prog;
    jinja_budget budget;
};

static const char *const status_names[] = {
    "ok", "syntax error", "raise_exception", "render error", "context error", "out of memory",
    "over budget"};
_Static_assert(sizeof status_names / sizeof status_names[0] == JINJA_STATUS_COUNT, "status names");

const char *jinja_status_name(int status) {
    return status >= 0 && status < JINJA_STATUS_COUNT ? status_names[status] : "unknown status";
}

static void clear_error(jinja_error *err) {
    err->status = JINJA_OK;
    err->line = err->col = 0;
    err->msg[0] = '\0';
    err->steps = err->peak_bytes = 0;
}

int jinja_compile(const char *src, size_t n, jinja_template **out, jinja_error *err) {
    clear_error(err);
    *out = NULL;
    jinja_template *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return err->status = JINJA_ENOMEM;
    }
    jj_fail_ctx f = {.err = err};
    t->arena.f = &f;
    if (setjmp(f.jmp)) {
        jj_arena_free(&t->arena);
        free(t);
        return f.status;
    }
    size_t count;
    jj_token *toks = jj_tokenize(&t->arena, &f, src, n, &count);
    t->prog = jj_parse(&t->arena, &f, toks, count);
    t->arena.f = NULL; /* the template's arena takes no more allocations */
    t->budget = (jinja_budget){JINJA_DEFAULT_STEPS, JINJA_DEFAULT_BYTES};
    *out = t;
    return JINJA_OK;
}

void jinja_set_budget(jinja_template *t, const jinja_budget *b) {
    if (b->steps) t->budget.steps = b->steps;
    if (b->bytes) t->budget.bytes = b->bytes;
}

jinja_budget jinja_get_budget(const jinja_template *t) { return t->budget; }

void jinja_free(jinja_template *t) {
    if (!t) return;
    jj_arena_free(&t->arena);
    free(t);
}

/* ---- JSON context -> values ---- */
static jj_value *from_json(jj_interp *in, const json_value *j);

/* a canonical array index ("0", "17"; not "01", "-1", >= 2^32-1) sorts first in JS objects */
static int array_index(const char *k, size_t n, unsigned long *out) {
    if (n == 0 || n > 10 || (n > 1 && k[0] == '0')) return 0;
    unsigned long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (k[i] < '0' || k[i] > '9') return 0;
        v = v * 10 + (unsigned long)(k[i] - '0');
    }
    *out = v;
    return v < 4294967295UL;
}

static jj_value *object_from_json(jj_interp *in, const json_value *j) {
    jj_value *o = jj_new(in->a, V_OBJECT);
    o->map = jj_map_new(in->a);
    jj_map tmp = {0};
    for (const json_value *c = j->child; c; c = c->next) /* first place, last value */
        jj_map_set(in->a, &tmp, c->key, c->key_len, from_json(in, c));
    size_t nidx = 0;
    unsigned long *idx = jj_alloc(in->a, (tmp.n ? tmp.n : 1) * sizeof *idx);
    size_t *pos = jj_alloc(in->a, (tmp.n ? tmp.n : 1) * sizeof *pos);
    for (size_t i = 0; i < tmp.n; i++) {
        unsigned long v;
        if (!array_index(tmp.keys[i], tmp.klen[i], &v)) continue;
        size_t k = nidx++; /* insertion sort by index: few such keys */
        while (k > 0 && idx[k - 1] > v) idx[k] = idx[k - 1], pos[k] = pos[k - 1], k--;
        idx[k] = v;
        pos[k] = i;
    }
    for (size_t k = 0; k < nidx; k++)
        jj_map_set(in->a, o->map, tmp.keys[pos[k]], tmp.klen[pos[k]], tmp.vals[pos[k]]);
    for (size_t i = 0; i < tmp.n; i++) {
        unsigned long v;
        if (!array_index(tmp.keys[i], tmp.klen[i], &v))
            jj_map_set(in->a, o->map, tmp.keys[i], tmp.klen[i], tmp.vals[i]);
    }
    return o;
}

static jj_value *from_json(jj_interp *in, const json_value *j) {
    switch (j->type) {
    case JSON_NULL: return jj_new(in->a, V_NULL);
    case JSON_FALSE:
    case JSON_TRUE: return jj_bool(in->a, j->type == JSON_TRUE);
    case JSON_NUMBER:
        return jj_num(in->a,
                      j->num > -9.3e18 && j->num < 9.3e18 && j->num == (double)(long long)j->num
                          ? V_INT
                          : V_FLOAT,
                      j->num);
    case JSON_STRING: return jj_str(in->a, j->str, j->len);
    case JSON_ARRAY: {
        jj_value **items = jj_alloc(in->a, (j->len ? j->len : 1) * sizeof *items);
        size_t n = 0;
        for (const json_value *c = j->child; c; c = c->next) items[n++] = from_json(in, c);
        return jj_array(in->a, items, n);
    }
    case JSON_OBJECT: return object_from_json(in, j);
    default: return jj_new(in->a, V_UNDEF);
    }
}

static void set_global(jj_interp *in, jj_scope *g, const char *name, jj_value *v) {
    jj_map_set(in->a, &g->vars, name, strlen(name), v);
}

static jj_value *func(jj_interp *in, jj_fn fn) {
    jj_value *v = jj_new(in->a, V_FUNC);
    v->fn = fn;
    return v;
}

/* hf's setupGlobals; a context key of the same name is an error there ("already declared") */
static void setup_globals(jj_interp *in, jj_scope *g) {
    set_global(in, g, "namespace", func(in, FN_NAMESPACE));
    set_global(in, g, "false", jj_bool(in->a, false));
    set_global(in, g, "true", jj_bool(in->a, true));
    set_global(in, g, "none", jj_new(in->a, V_NULL));
    set_global(in, g, "raise_exception", func(in, FN_RAISE));
    set_global(in, g, "range", func(in, FN_RANGE));
    set_global(in, g, "strftime_now", func(in, FN_STRFTIME));
    set_global(in, g, "True", jj_bool(in->a, true));
    set_global(in, g, "False", jj_bool(in->a, false));
    set_global(in, g, "None", jj_new(in->a, V_NULL));
}

static void load_context(jj_interp *in, jj_scope *g, const json_value *const *ctx, size_t nctx) {
    size_t nglobals = g->vars.n;
    jj_map vars = {0};
    for (size_t i = 0; i < nctx; i++) {
        if (!ctx[i] || ctx[i]->type != JSON_OBJECT)
            jj_fail(in->f, JINJA_ECONTEXT, 0, 0, "context %zu is %s, expected a JSON object", i,
                    ctx[i] ? json_type_name(ctx[i]->type) : "missing");
        jj_value *o = object_from_json(in, ctx[i]);
        for (size_t k = 0; k < o->map->n; k++)
            jj_map_set(in->a, &vars, o->map->keys[k], o->map->klen[k], o->map->vals[k]);
    }
    for (size_t k = 0; k < vars.n; k++) {
        for (size_t i = 0; i < nglobals; i++)
            if (g->vars.klen[i] == vars.klen[k] &&
                !memcmp(g->vars.keys[i], vars.keys[k], vars.klen[k]))
                jj_fail(in->f, JINJA_ECONTEXT, 0, 0,
                        "context key '%s' clashes with the global of that name", vars.keys[k]);
        jj_map_set(in->a, &g->vars, vars.keys[k], vars.klen[k], vars.vals[k]);
    }
}

static long long clock_now(void) {
    const char *e = getenv("TSR_JINJA_NOW");
    if (e && *e) {
        char *end;
        errno = 0;
        long long v = strtoll(e, &end, 10);
        if (!*end && !errno) return v;
    }
    return (long long)time(NULL);
}

static void apply_overrides(jj_interp *in, jj_scope *g, const jinja_overrides *ov) {
    if (!ov) return;
    jj_value *m = jj_map_get(&g->vars, "messages", 8);
    if (ov->nmessages >= 0) {
        if (!m || m->t != V_ARRAY)
            jj_fail(in->f, JINJA_ECONTEXT, 0, 0, "the context has no messages array to cut");
        jj_value *cut =
            jj_array(in->a, m->items, (size_t)ov->nmessages < m->n ? (size_t)ov->nmessages : m->n);
        jj_map_set(in->a, &g->vars, "messages", 8, cut);
    }
    if (ov->add_generation_prompt >= 0)
        jj_map_set(in->a, &g->vars, "add_generation_prompt", 21,
                   jj_bool(in->a, ov->add_generation_prompt));
}

int jinja_render(const jinja_template *t, const json_value *const *ctx, size_t nctx, char **out,
                 size_t *out_len, jinja_error *err) {
    return jinja_render_ex(t, ctx, nctx, NULL, out, out_len, err);
}

int jinja_render_ex(const jinja_template *t, const json_value *const *ctx, size_t nctx,
                    const jinja_overrides *ov, char **out, size_t *out_len, jinja_error *err) {
    clear_error(err);
    *out = NULL;
    *out_len = 0;
    jj_arena *arena = calloc(1, sizeof *arena); /* not a local: it changes after setjmp */
    if (!arena) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return err->status = JINJA_ENOMEM;
    }
    jj_fail_ctx f = {.err = err, .max_steps = t->budget.steps};
    jj_interp in = {.a = arena, .f = &f, .now = clock_now()};
    if (setjmp(f.jmp)) {
        err->peak_bytes = arena->peak;
        jj_arena_free(arena);
        free(arena);
        return f.status;
    }
    arena->f = &f;
    arena->max_bytes = (size_t)t->budget.bytes;
    jj_scope *g = jj_alloc(arena, sizeof *g);
    setup_globals(&in, g);
    load_context(&in, g, ctx, nctx);
    apply_overrides(&in, g, ov);
    jj_value *s = jj_eval_block(&in, &t->prog, g);
    if (in.ctl)
        jj_fail(&f, JINJA_ERUNTIME, 0, 0, "{%% %s %%} outside a for loop",
                in.ctl == 1 ? "break" : "continue");
    char *r = malloc(s->n + 1);
    if (!r) jj_fail(&f, JINJA_ENOMEM, 0, 0, "out of memory: %zu bytes of output", s->n);
    memcpy(r, s->s, s->n);
    r[s->n] = '\0';
    *out = r;
    *out_len = s->n;
    err->steps = f.steps;
    err->peak_bytes = arena->peak;
    jj_arena_free(arena);
    free(arena);
    return JINJA_OK;
}
