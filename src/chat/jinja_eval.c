/* jinja_eval.c — the interpreter: statements and expressions, as @huggingface/jinja's
 * Interpreter evaluates them. Scoping as hf: a for loop (one scope for all its iterations) and
 * a macro call open a scope; if and set do not; lookups walk up the scopes; an unknown name is
 * undefined. {% break %} / {% continue %} set in->ctl: the blocks unwind, and the iteration's
 * text is dropped (hf throws, losing it). Filters, tests and builtin methods: jinja_builtin.c. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "chat/jinja_int.h"

enum { MAX_CALL_DEPTH = 100 };

static jj_value *lookup(jj_scope *sc, const char *name, size_t n) {
    for (; sc; sc = sc->parent) {
        jj_value *v = jj_map_get(&sc->vars, name, n);
        if (v) return v;
    }
    return NULL;
}

static jj_scope *scope_new(jj_interp *in, jj_scope *parent) {
    jj_scope *s = jj_alloc(in->a, sizeof *s);
    s->parent = parent;
    return s;
}

static void set_var(jj_interp *in, jj_scope *sc, const char *name, size_t n, jj_value *v) {
    jj_map_set(in->a, &sc->vars, name, n, v);
}

static jj_value *undef(jj_interp *in) { return jj_new(in->a, V_UNDEF); }

jj_value *jj_eval_block(jj_interp *in, const jj_list *l, jj_scope *sc) {
    jj_buf b;
    jj_buf_init(&b, in->a);
    jj_buf_add(&b, "", 0);
    for (size_t i = 0; i < l->n && !in->ctl; i++) {
        jj_value *v = jj_eval(in, l->v[i], sc);
        if (in->ctl) break;
        if (v->t != V_NULL && v->t != V_UNDEF) {
            in->f->line = l->v[i]->line;
            in->f->col = l->v[i]->col;
            jj_to_string(in->f, &b, v);
        }
    }
    jj_value *s = jj_new(in->a, V_STR);
    s->s = b.p;
    s->n = b.n;
    return s;
}

/* ---- assignment ---- */
/* a, b = v: in a set v may be a list or a tuple; a for loop's item must be a list (hf) */
static void assign_tuple(jj_interp *in, const jj_node *target, jj_value *v, jj_scope *sc,
                         const char *where) {
    if (v->t != V_ARRAY && (v->t != V_TUPLE || !*where))
        jj_rt_fail(in, "Cannot unpack non-iterable type%s: %s", where, jj_type_name(v->t));
    if (v->n != target->body.n) /* too many or too few */
        jj_rt_fail(in, "Too %s items to unpack%s", target->body.n > v->n ? "few" : "many", where);
    for (size_t i = 0; i < v->n; i++) {
        const jj_node *e = target->body.v[i];
        if (e->type != N_IDENT) jj_rt_fail(in, "Cannot unpack to non-identifier%s", where);
        set_var(in, sc, e->s, e->n, v->items[i]);
    }
}

static jj_value *eval_set(jj_interp *in, const jj_node *nd, jj_scope *sc) {
    in->stores++;
    jj_value *rhs = nd->b ? jj_eval(in, nd->b, sc) : jj_eval_block(in, &nd->body, sc);
    const jj_node *t = nd->a;
    in->f->line = nd->line;
    in->f->col = nd->col;
    if (t->type == N_IDENT) {
        set_var(in, sc, t->s, t->n, rhs);
    } else if (t->type == N_TUPLE) {
        assign_tuple(in, t, rhs, sc, " in set");
    } else if (t->type == N_MEMBER) {
        jj_value *obj = jj_eval(in, t->a, sc);
        if (obj->t != V_NS) jj_rt_fail(in, "cannot assign attribute on non-namespace object");
        if (t->b->type != N_IDENT)
            jj_rt_fail(in, "Cannot assign to member with non-identifier property");
        jj_map_set(in->a, obj->map, t->b->s, t->b->n, rhs);
    } else {
        jj_rt_fail(in, "Invalid left-hand side in a set statement");
    }
    return jj_new(in->a, V_NULL);
}

/* ---- for ---- */
static jj_value *loop_object(jj_interp *in, jj_value **items, size_t i, size_t n) {
    jj_value *o = jj_new(in->a, V_OBJECT);
    o->map = jj_map_new(in->a);
    struct {
        const char *k;
        jj_value *v;
    } f[] = {
        {"index", jj_num(in->a, V_INT, (double)i + 1)},
        {"index0", jj_num(in->a, V_INT, (double)i)},
        {"revindex", jj_num(in->a, V_INT, (double)(n - i))},
        {"revindex0", jj_num(in->a, V_INT, (double)(n - i - 1))},
        {"first", jj_bool(in->a, i == 0)},
        {"last", jj_bool(in->a, i == n - 1)},
        {"length", jj_num(in->a, V_INT, (double)n)},
        {"previtem", i > 0 ? items[i - 1] : undef(in)},
        {"nextitem", i + 1 < n ? items[i + 1] : undef(in)},
    };
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
        jj_map_set(in->a, o->map, f[k].k, strlen(f[k].k), f[k].v);
    return o;
}

static void bind_loop_var(jj_interp *in, const jj_node *target, jj_value *item, jj_scope *sc) {
    if (target->type == N_IDENT) set_var(in, sc, target->s, target->n, item);
    else assign_tuple(in, target, item, sc, "");
}

static jj_value *object_keys(jj_interp *in, const jj_map *m) {
    jj_value **items = jj_alloc(in->a, (m->n ? m->n : 1) * sizeof *items);
    for (size_t i = 0; i < m->n; i++) items[i] = jj_str(in->a, m->keys[i], m->klen[i]);
    return jj_array(in->a, items, m->n);
}

/* The loop's names bound once before the first iteration, so that binding them again per
 * iteration allocates nothing (an iteration's memory can then be released: run_iteration). */
static void prebind(jj_interp *in, const jj_node *target, jj_scope *sc) {
    set_var(in, sc, "loop", 4, undef(in));
    if (target->type == N_IDENT) return set_var(in, sc, target->s, target->n, undef(in));
    for (size_t i = 0; i < target->body.n; i++)
        if (target->body.v[i]->type == N_IDENT)
            set_var(in, sc, target->body.v[i]->s, target->body.v[i]->n, undef(in));
}

/* The items the loop runs over: all, or those passing `for x in xs if test` */
static size_t loop_items(jj_interp *in, const jj_node *nd, jj_value *it, jj_scope *sc,
                         jj_value **items) {
    const jj_node *test = nd->b->type == N_SELECT ? nd->b->b : NULL;
    size_t n = 0;
    for (size_t i = 0; i < it->n; i++) {
        jj_charge(in->f, 1);
        if (test) {
            jj_mark m = jj_arena_mark(in->a);
            unsigned long stores = in->stores;
            jj_scope *ls = scope_new(in, sc);
            bind_loop_var(in, nd->a, it->items[i], ls);
            int pass = jj_truthy(jj_eval(in, test, ls));
            if (in->stores == stores) jj_arena_release(in->a, m);
            if (!pass) continue;
        } else if (nd->a->type == N_TUPLE) {
            jj_scope tmp = {.parent = NULL};
            bind_loop_var(in, nd->a, it->items[i], &tmp); /* hf checks unpacking up front */
        }
        items[n++] = it->items[i];
    }
    return n;
}

/* One iteration's text appended to b. An iteration that ran no set statement and defined no
 * macro kept no value of its own: everything it allocated is released but its text. */
static int run_iteration(jj_interp *in, const jj_node *nd, jj_value **items, size_t i, size_t n,
                         jj_scope *sc, jj_buf *b) {
    jj_mark m = jj_arena_mark(in->a);
    unsigned long stores = in->stores;
    set_var(in, sc, "loop", 4, loop_object(in, items, i, n));
    bind_loop_var(in, nd->a, items[i], sc);
    jj_value *s = jj_eval_block(in, &nd->body, sc);
    if (in->ctl) {
        int brk = in->ctl == 1;
        in->ctl = 0;
        return brk ? -1 : 0;
    }
    const char *text = s->s;
    if (in->stores == stores) text = jj_arena_keep(in->a, m, s->s, s->n);
    jj_buf_add(b, text, s->n);
    return 1;
}

static jj_value *eval_for(jj_interp *in, const jj_node *nd, jj_scope *env) {
    jj_scope *sc = scope_new(in, env);
    const jj_node *test = nd->b->type == N_SELECT ? nd->b->b : NULL;
    jj_value *it = jj_eval(in, test ? nd->b->a : nd->b, sc);
    in->f->line = nd->line;
    in->f->col = nd->col;
    if (it->t == V_OBJECT || it->t == V_KWARGS) it = object_keys(in, it->map);
    if (it->t != V_ARRAY && it->t != V_TUPLE)
        jj_rt_fail(in, "Expected iterable or object type in for loop: got %s", jj_type_name(it->t));
    jj_value **items = jj_alloc(in->a, (it->n ? it->n : 1) * sizeof *items);
    size_t n = loop_items(in, nd, it, sc, items);
    if (n) prebind(in, nd->a, sc); /* with no item the else block sees the names outside */
    jj_buf b;
    jj_buf_init(&b, in->a);
    jj_buf_add(&b, "", 0);
    int none = 1;
    for (size_t i = 0; i < n; i++) {
        int r = run_iteration(in, nd, items, i, n, sc, &b);
        if (r < 0) break;
        if (r > 0) none = 0;
    }
    if (none) {
        jj_value *s = jj_eval_block(in, &nd->alt, sc);
        jj_buf_add(&b, s->s, s->n);
    }
    return jj_str(in->a, b.p, b.n);
}

/* ---- member access ---- */
static size_t code_points(jj_interp *in, const jj_value *s) {
    jj_charge(in->f, s->n >> 10);
    size_t n = 0;
    for (size_t i = 0, len; i < s->n; i += len, n++) jj_utf8_decode(s->s + i, s->n - i, &len);
    return n;
}

static jj_value *member_of(jj_interp *in, jj_value *obj, jj_value *prop) {
    jj_value *v = NULL;
    if (obj->t == V_OBJECT || obj->t == V_KWARGS || obj->t == V_NS) {
        if (prop->t != V_STR)
            jj_rt_fail(in, "Cannot access property with non-string: got %s", jj_type_name(prop->t));
        v = jj_map_get(obj->map, prop->s, prop->n);
        if (!v && obj->t != V_NS) v = jj_builtin_member(in, obj, prop->s, prop->n);
    } else if (obj->t == V_ARRAY || obj->t == V_TUPLE || obj->t == V_STR) {
        if (prop->t == V_INT) { /* lists by element, strings by code point */
            double i = prop->num < 0
                           ? prop->num + (double)(obj->t == V_STR ? code_points(in, obj) : obj->n)
                           : prop->num;
            if (obj->t == V_STR) {
                jj_value one = {.t = V_INT, .num = i};
                jj_value end = {.t = V_INT, .num = i + 1};
                jj_value *s = i >= 0 ? jj_slice(in, obj, &one, &end, NULL) : NULL;
                v = s && s->n ? s : NULL;
            } else if (i >= 0 && i < (double)obj->n) {
                v = obj->items[(size_t)i];
            }
        } else if (prop->t == V_STR) {
            v = jj_builtin_member(in, obj, prop->s, prop->n);
        } else {
            jj_rt_fail(in, "Cannot access property with non-string/non-number: got %s",
                       jj_type_name(prop->t));
        }
    } else {
        if (prop->t != V_STR)
            jj_rt_fail(in, "Cannot access property with non-string: got %s", jj_type_name(prop->t));
    }
    return v ? v : undef(in);
}

static jj_value *eval_member(jj_interp *in, const jj_node *nd, jj_scope *sc) {
    jj_value *obj = jj_eval(in, nd->a, sc);
    const jj_node *p = nd->b;
    jj_value *prop;
    if (nd->flag && p->type == N_SLICE) {
        jj_value *a = p->a ? jj_eval(in, p->a, sc) : undef(in);
        jj_value *b = p->b ? jj_eval(in, p->b, sc) : undef(in);
        jj_value *c = p->c ? jj_eval(in, p->c, sc) : undef(in);
        in->f->line = nd->line;
        in->f->col = nd->col;
        return jj_slice(in, obj, a, b, c);
    }
    if (nd->flag) prop = jj_eval(in, p, sc);
    else if (p->type == N_INT) prop = jj_num(in->a, V_INT, p->num);
    else prop = jj_str(in->a, p->s, p->n);
    in->f->line = nd->line;
    in->f->col = nd->col;
    return member_of(in, obj, prop);
}

/* ---- calls ---- */
void jj_eval_args(jj_interp *in, const jj_list *l, jj_scope *sc, jj_args *out) {
    out->pos = jj_alloc(in->a, (l->n ? l->n : 1) * sizeof *out->pos);
    out->npos = 0;
    out->kw = NULL;
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i]->type != N_KWARG) out->pos[out->npos++] = jj_eval(in, l->v[i], sc);
    for (size_t i = 0; i < l->n; i++) {
        const jj_node *k = l->v[i];
        if (k->type != N_KWARG) continue;
        if (!out->kw) out->kw = jj_map_new(in->a);
        if (jj_map_get(out->kw, k->s, k->n))
            jj_rt_fail(in, "Got multiple values for keyword argument '%s'", k->s);
        jj_map_set(in->a, out->kw, k->s, k->n, jj_eval(in, k->a, sc));
    }
}

static jj_value *call_macro(jj_interp *in, jj_value *fn, const jj_args *a, jj_scope *caller) {
    const jj_node *m = fn->macro;
    jj_scope *sc = jj_alloc(in->a, sizeof *sc);
    sc->parent = caller; /* hf: the macro sees the caller's variables */
    if (a->npos > m->alt.n)
        jj_rt_fail(in, "macro '%s' takes not more than %zu argument(s)", m->s, m->alt.n);
    size_t used_kw = 0;
    for (size_t i = 0; i < m->alt.n; i++) {
        const jj_node *p = m->alt.v[i];
        jj_value *v = i < a->npos ? a->pos[i] : a->kw ? jj_map_get(a->kw, p->s, p->n) : NULL;
        if (i >= a->npos && v) used_kw++;
        if (!v && p->type == N_KWARG) continue;
        jj_map_set(in->a, &sc->vars, p->s, p->n, v ? v : jj_new(in->a, V_UNDEF));
    }
    if (a->kw && used_kw < a->kw->n)
        jj_rt_fail(in, "macro '%s' got an unknown keyword argument", m->s);
    for (size_t i = 0; i < m->alt.n; i++) { /* defaults, evaluated in the macro's scope */
        const jj_node *p = m->alt.v[i];
        if (p->type == N_KWARG && !jj_map_get(&sc->vars, p->s, p->n))
            jj_map_set(in->a, &sc->vars, p->s, p->n, jj_eval(in, p->a, sc));
    }
    return jj_eval_block(in, &m->body, sc);
}

static jj_value *eval_call(jj_interp *in, const jj_node *nd, jj_scope *sc) {
    jj_args args;
    jj_eval_args(in, &nd->body, sc, &args);
    jj_value *fn = jj_eval(in, nd->a, sc);
    in->f->line = nd->line;
    in->f->col = nd->col;
    if (fn->t != V_FUNC)
        jj_rt_fail(in, "Cannot call something that is not a function: got %s", jj_type_name(fn->t));
    if (++in->depth > MAX_CALL_DEPTH)
        jj_rt_fail(in, "calls nested too deeply (over %d)", MAX_CALL_DEPTH);
    jj_value *r = fn->fn == FN_MACRO ? call_macro(in, fn, &args, sc) : jj_call(in, fn, &args);
    in->depth--;
    return r;
}

/* A filter, its arguments evaluated here (selectattr and rejectattr take their string literals as
 * they are: jinja_filter.c). */
static jj_value *apply_filter(jj_interp *in, jj_value *v, const jj_node *filter, jj_scope *sc) {
    jj_args args, *a = NULL;
    /* the parser takes `| f`, `| f(...)`, and member and call chains after those (`| f(x).y`,
     * `| f(x)(y)`), which the reference refuses at run time by the node's type */
    const jj_node *bad = filter->type == N_MEMBER ? filter
                         : filter->type == N_CALL && filter->a->type != N_IDENT ? filter->a : NULL;
    if (bad) {
        in->f->line = filter->line;
        in->f->col = filter->col;
        jj_rt_fail(in, "Unknown filter: %s", bad->type == N_CALL ? "CallExpression" : "MemberExpression");
    }
    if (filter->type != N_IDENT && strcmp(filter->a->s, "selectattr") &&
        strcmp(filter->a->s, "rejectattr")) {
        jj_eval_args(in, &filter->body, sc, &args);
        a = &args;
    }
    return jj_apply_filter(in, v, filter, a);
}

static jj_value *eval_macro_def(jj_interp *in, const jj_node *nd, jj_scope *sc) {
    in->stores++;
    jj_value *fn = jj_new(in->a, V_FUNC);
    fn->fn = FN_MACRO;
    fn->macro = nd;
    fn->s = nd->s;
    set_var(in, sc, nd->s, nd->n, fn);
    return jj_new(in->a, V_NULL);
}

/* ---- operators ---- */
static jj_value *eval_unary(jj_interp *in, const jj_node *nd, jj_scope *sc) {
    jj_value *v = jj_eval(in, nd->a, sc);
    in->f->line = nd->line;
    in->f->col = nd->col;
    if (!strcmp(nd->s, "not")) return jj_bool(in->a, !jj_truthy(v));
    double sign = nd->s[0] == '-' ? -1 : 1;
    if (jj_is_num(v)) return jj_num(in->a, v->t, sign * v->num);
    if (v->t == V_BOOL) return jj_num(in->a, V_INT, sign * (v->b ? 1 : 0));
    jj_rt_fail(in, "Unknown operator \"%s\" for %s", nd->s, jj_type_name(v->t));
}

static jj_value *concat(jj_interp *in, const jj_value *l, const jj_value *r) {
    jj_buf b;
    jj_buf_init(&b, in->a);
    jj_buf_add(&b, "", 0);
    jj_raw_string(in->f, &b, l);
    jj_raw_string(in->f, &b, r);
    jj_value *s = jj_new(in->a, V_STR);
    s->s = b.p;
    s->n = b.n;
    return s;
}

static jj_value *arith(jj_interp *in, const char *op, const jj_value *l, const jj_value *r) {
    double a = l->num, b = r->num;
    jj_vtype t = l->t == V_FLOAT || r->t == V_FLOAT ? V_FLOAT : V_INT;
    switch (op[0]) {
    case '+': return jj_num(in->a, t, a + b);
    case '-': return jj_num(in->a, t, a - b);
    case '*': return jj_num(in->a, t, a * b);
    case '/': return op[1] ? jj_num(in->a, t, floor(a / b)) : jj_num(in->a, V_FLOAT, a / b);
    case '%': return jj_num(in->a, t, fmod(a, b));
    case '<': return jj_bool(in->a, op[1] ? a <= b : a < b);
    case '>': return jj_bool(in->a, op[1] ? a >= b : a > b);
    default: return NULL;
    }
}

static jj_value *power(jj_interp *in, const jj_value *l, const jj_value *r) {
    double a = l->t == V_BOOL ? l->b : l->num, b = r->t == V_BOOL ? r->b : r->num;
    if (a == 0 && b < 0) jj_rt_fail(in, "0.0 cannot be raised to a negative power");
    double x = pow(a, b);
    if (!isfinite(x)) jj_rt_fail(in, "Exponentiation result is not a finite real number");
    return jj_num(in->a, l->t == V_FLOAT || r->t == V_FLOAT || b < 0 ? V_FLOAT : V_INT, x);
}

/* `needle in list`: each comparison of a string reads at most the needle's bytes */
static int contains(jj_interp *in, const jj_value *hay, const jj_value *needle) {
    jj_charge(in->f, hay->n * (1 + (needle->t == V_STR ? needle->n >> 10 : 0)));
    for (size_t i = 0; i < hay->n; i++)
        if (jj_strict_eq(hay->items[i], needle)) return 1;
    return 0;
}

static jj_value *eval_binary(jj_interp *in, const jj_node *nd, jj_scope *sc) {
    const char *op = nd->s;
    jj_value *l = jj_eval(in, nd->a, sc);
    if (!strcmp(op, "and")) return jj_truthy(l) ? jj_eval(in, nd->b, sc) : l;
    if (!strcmp(op, "or")) return jj_truthy(l) ? l : jj_eval(in, nd->b, sc);
    jj_value *r = jj_eval(in, nd->b, sc);
    in->f->line = nd->line;
    in->f->col = nd->col;
    int is_in = !strcmp(op, "in"), not_in = !strcmp(op, "not in");
    if (!strcmp(op, "==") || !strcmp(op, "!=")) {
        jj_charge(in->f, ((l->t == V_STR ? l->n : 0) + (r->t == V_STR ? r->n : 0)) >> 10);
        return jj_bool(in->a, jj_loose_eq(in->f, in->a, l, r) == (op[0] == '='));
    }
    if (l->t == V_UNDEF || r->t == V_UNDEF) {
        if (r->t == V_UNDEF && (is_in || not_in)) return jj_bool(in->a, not_in);
        jj_rt_fail(in, "Cannot perform operation %s on undefined values", op);
    }
    if (l->t == V_NULL || r->t == V_NULL) jj_rt_fail(in, "Cannot perform operation on null values");
    if (!strcmp(op, "~")) return concat(in, l, r);
    int lnum = jj_is_num(l) || l->t == V_BOOL, rnum = jj_is_num(r) || r->t == V_BOOL;
    if (!strcmp(op, "**") && lnum && rnum) return power(in, l, r);
    jj_value *res = NULL;
    int l_arr = l->t == V_ARRAY || l->t == V_TUPLE, r_arr = r->t == V_ARRAY || r->t == V_TUPLE;
    if (jj_is_num(l) && jj_is_num(r)) {
        res = arith(in, op, l, r);
    } else if (l_arr && r_arr) {
        if (!strcmp(op, "+")) {
            jj_value **items = jj_alloc(in->a, (l->n + r->n + 1) * sizeof *items);
            if (l->n) memcpy(items, l->items, l->n * sizeof *items);
            if (r->n) memcpy(items + l->n, r->items, r->n * sizeof *items);
            res = jj_array(in->a, items, l->n + r->n);
        }
    } else if (r_arr) {
        if (is_in || not_in) res = jj_bool(in->a, contains(in, r, l) == is_in);
    }
    if (res) return res;
    if ((l->t == V_STR || r->t == V_STR) && !strcmp(op, "+")) return concat(in, l, r);
    if (l->t == V_STR && r->t == V_STR && (is_in || not_in)) {
        jj_charge(in->f, r->n >> 10);
        int found = memmem(r->s, r->n, l->s, l->n) != NULL || l->n == 0;
        return jj_bool(in->a, found == is_in);
    }
    if (l->t == V_STR && (r->t == V_OBJECT || r->t == V_KWARGS) && (is_in || not_in))
        return jj_bool(in->a, (jj_map_get(r->map, l->s, l->n) != NULL) == is_in);
    jj_rt_fail(in, "Unknown operator \"%s\" between %s and %s", op, jj_type_name(l->t),
               jj_type_name(r->t));
}

/* ---- literals ---- */
static jj_value *eval_list(jj_interp *in, const jj_node *nd, jj_scope *sc, jj_vtype t) {
    jj_value **items = jj_alloc(in->a, (nd->body.n ? nd->body.n : 1) * sizeof *items);
    for (size_t i = 0; i < nd->body.n; i++) items[i] = jj_eval(in, nd->body.v[i], sc);
    jj_value *v = jj_array(in->a, items, nd->body.n);
    v->t = t;
    return v;
}

static jj_value *eval_object(jj_interp *in, const jj_node *nd, jj_scope *sc) {
    jj_value *o = jj_new(in->a, V_OBJECT);
    o->map = jj_map_new(in->a);
    for (size_t i = 0; i < nd->body.n; i++) {
        jj_value *k = jj_eval(in, nd->body.v[i], sc);
        if (k->t != V_STR)
            jj_rt_fail(in, "Object keys must be strings: got %s", jj_type_name(k->t));
        jj_map_set(in->a, o->map, k->s, k->n, jj_eval(in, nd->alt.v[i], sc));
    }
    return o;
}

/* if / elif ... / else: the chain of elifs walked in a loop */
static jj_value *eval_if(jj_interp *in, const jj_node *nd, jj_scope *sc) {
    while (!jj_truthy(jj_eval(in, nd->a, sc))) {
        if (nd->alt.n != 1 || nd->alt.v[0]->type != N_IF || !nd->alt.v[0]->flag)
            return jj_eval_block(in, &nd->alt, sc);
        nd = nd->alt.v[0];
        jj_charge(in->f, 1);
    }
    return jj_eval_block(in, &nd->body, sc);
}

static jj_value *eval_node(jj_interp *in, const jj_node *nd, jj_scope *sc);

/* Every node, counted against the budget and the depth of evaluations inside each other (a
 * macro recursing 100 deep through 200 nested blocks would otherwise end the C stack). */
jj_value *jj_eval(jj_interp *in, const jj_node *nd, jj_scope *sc) {
    in->f->line = nd->line;
    in->f->col = nd->col;
    jj_charge(in->f, 1);
    if (++in->eval_depth > JJ_MAX_EVAL_DEPTH)
        jj_rt_fail(in, "the template's evaluation nests too deeply (over %d expressions and "
                   "blocks inside each other, macro calls included)", JJ_MAX_EVAL_DEPTH);
    jj_value *v = eval_node(in, nd, sc);
    in->eval_depth--;
    return v;
}

static jj_value *eval_node(jj_interp *in, const jj_node *nd, jj_scope *sc) {
    switch (nd->type) {
    case N_STR: {
        jj_value *v = jj_new(in->a, V_STR); /* literals are never changed: share the bytes */
        v->s = nd->s;
        v->n = nd->n;
        return v;
    }
    case N_INT:
    case N_FLOAT: return jj_num(in->a, nd->type == N_INT ? V_INT : V_FLOAT, nd->num);
    case N_COMMENT: return jj_new(in->a, V_NULL);
    case N_IF: return eval_if(in, nd, sc);
    case N_FOR: return eval_for(in, nd, sc);
    case N_SET: return eval_set(in, nd, sc);
    case N_MACRO: return eval_macro_def(in, nd, sc);
    case N_BREAK:
    case N_CONTINUE:
        in->ctl = nd->type == N_BREAK ? 1 : 2;
        return jj_new(in->a, V_NULL);
    case N_FILTER_STMT: return apply_filter(in, jj_eval_block(in, &nd->body, sc), nd->a, sc);
    case N_ARRAY: return eval_list(in, nd, sc, V_ARRAY);
    case N_TUPLE: return eval_list(in, nd, sc, V_TUPLE);
    case N_OBJECT: return eval_object(in, nd, sc);
    case N_IDENT: {
        jj_value *v = lookup(sc, nd->s, nd->n);
        return v ? v : undef(in);
    }
    case N_CALL: return eval_call(in, nd, sc);
    case N_MEMBER: return eval_member(in, nd, sc);
    case N_UNARY: return eval_unary(in, nd, sc);
    case N_BINARY: return eval_binary(in, nd, sc);
    case N_FILTER: {
        jj_value *v = jj_eval(in, nd->a, sc);
        in->f->line = nd->line;
        in->f->col = nd->col;
        return apply_filter(in, v, nd->b, sc);
    }
    case N_TEST: {
        jj_value *v = jj_eval(in, nd->a, sc);
        in->f->line = nd->line;
        in->f->col = nd->col;
        return jj_bool(in->a, jj_run_test(in, nd->s, v, NULL) != nd->flag);
    }
    case N_SELECT:
        return jj_truthy(jj_eval(in, nd->b, sc)) ? jj_eval(in, nd->a, sc) : undef(in);
    case N_TERNARY:
        return jj_eval(in, jj_truthy(jj_eval(in, nd->a, sc)) ? nd->b : nd->c, sc);
    default: jj_rt_fail(in, "Unknown node type %d", (int)nd->type);
    }
}
