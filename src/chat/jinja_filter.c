/* jinja_filter.c — `value | filter` and `value | filter(args)`, dispatched as
 * @huggingface/jinja's applyFilter does: safe, tojson, join, int/float and default take any
 * value; the others depend on the value's type (length on strings, arrays and objects; trim on
 * strings; items on objects; ...). A filter the value's type lacks is an error naming both. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_int.h"

static jj_value *str_of(jj_interp *in, jj_buf *b) {
    jj_value *v = jj_new(in->a, V_STR);
    v->s = b->p;
    v->n = b->n;
    return v;
}

static void buf_start(jj_interp *in, jj_buf *b) {
    jj_buf_init(b, in->a);
    jj_buf_add(b, "", 0);
}

static jj_value *kwarg(const jj_args *a, const char *k) {
    return a->kw ? jj_map_get(a->kw, k, strlen(k)) : NULL;
}

static jj_value *arg_or(const jj_args *a, size_t i, const char *k) {
    return i < a->npos ? a->pos[i] : kwarg(a, k);
}

static jj_value *tojson(jj_interp *in, jj_value *v, const jj_args *a) {
    jj_json_opts o = {.undef_null = true};
    jj_value *indent = a ? kwarg(a, "indent") : NULL, *ascii = a ? kwarg(a, "ensure_ascii") : NULL;
    jj_value *sort = a ? kwarg(a, "sort_keys") : NULL, *sep = a ? kwarg(a, "separators") : NULL;
    if (indent && indent->t != V_INT && indent->t != V_NULL)
        jj_rt_fail(in, "If set, indent must be a number");
    if (ascii && ascii->t != V_BOOL) jj_rt_fail(in, "If set, ensure_ascii must be a boolean");
    if (sort && sort->t != V_BOOL) jj_rt_fail(in, "If set, sort_keys must be a boolean");
    if (indent && indent->t == V_INT) {
        if (indent->num < 0 || indent->num > 64)
            jj_rt_fail(in, "tojson indent %g: expected 0 to 64", indent->num);
        o.indent = (int)indent->num;
    }
    o.ensure_ascii = ascii && ascii->b;
    o.sort_keys = sort && sort->b;
    if (sep && sep->t != V_NULL) {
        if ((sep->t != V_ARRAY && sep->t != V_TUPLE) || sep->n != 2 || sep->items[0]->t != V_STR ||
            sep->items[1]->t != V_STR)
            jj_rt_fail(in, "separators must be a tuple of two strings");
        o.custom_sep = true;
        o.item_sep = sep->items[0]->s;
        o.key_sep = sep->items[1]->s;
    }
    jj_buf b;
    buf_start(in, &b);
    jj_to_json(in->f, &b, v, &o, 0);
    return str_of(in, &b);
}

static jj_value *join(jj_interp *in, jj_value *v, const jj_args *a) {
    jj_value *sep = a ? arg_or(a, 0, "separator") : NULL;
    if (sep && sep->t != V_STR) jj_rt_fail(in, "separator must be a string");
    jj_buf b;
    buf_start(in, &b);
    if (v->t == V_STR) { /* the characters of the string */
        for (size_t i = 0, len; i < v->n; i += len) {
            if (i && sep) jj_buf_add(&b, sep->s, sep->n);
            jj_utf8_decode(v->s + i, v->n - i, &len);
            jj_buf_add(&b, v->s + i, len);
        }
        return str_of(in, &b);
    }
    for (size_t i = 0; i < v->n; i++) { /* Array.join: null and undefined join as "" */
        if (i && sep) jj_buf_add(&b, sep->s, sep->n);
        jj_value *x = v->items[i];
        if (x->t != V_NULL && x->t != V_UNDEF) jj_raw_string(in->f, &b, x);
    }
    return str_of(in, &b);
}

/* parseInt(s, 10) / parseFloat(s): leading whitespace, then the longest number prefix */
static int parse_number(const char *s, size_t n, int is_int, double *out) {
    size_t k;
    while (n && (k = jj_space_at(s, n))) s += k, n -= k;
    char tmp[128];
    size_t m = n < sizeof tmp - 1 ? n : sizeof tmp - 1;
    memcpy(tmp, s, m);
    tmp[m] = '\0';
    if (!is_int && (!strncmp(tmp, "Infinity", 8) || !strncmp(tmp, "+Infinity", 9) ||
                    !strncmp(tmp, "-Infinity", 9))) {
        *out = tmp[0] == '-' ? -INFINITY : INFINITY;
        return 1;
    }
    size_t i = tmp[0] == '+' || tmp[0] == '-';
    size_t d = i;
    while (tmp[d] >= '0' && tmp[d] <= '9') d++;
    if (is_int) {
        if (d == i) return 0;
        tmp[d] = '\0';
        *out = strtod(tmp, NULL);
        return 1;
    }
    if (strchr("iInN", tmp[i]) && tmp[i])
        return 0; /* strtod reads inf and nan; parseFloat does not */
    if (tmp[i] == 'x' || tmp[i] == 'X' ||
        (tmp[i] == '0' && (tmp[i + 1] == 'x' || tmp[i + 1] == 'X'))) {
        *out = tmp[i] == '0' ? 0 : NAN; /* strtod would read hex; parseFloat stops at the x */
        return tmp[i] == '0';
    }
    char *end;
    *out = strtod(tmp, &end);
    return end != tmp && !(end == tmp + i);
}

static jj_value *to_number(jj_interp *in, jj_value *v, int is_int, jj_value *def) {
    jj_vtype t = is_int ? V_INT : V_FLOAT;
    if (v->t == V_STR) {
        double x;
        if (!parse_number(v->s, v->n, is_int, &x)) return def ? def : jj_num(in->a, t, 0);
        return jj_num(in->a, t, x);
    }
    if (jj_is_num(v)) return v;
    if (v->t == V_BOOL) return jj_num(in->a, t, v->b ? 1 : 0);
    jj_rt_fail(in, "Cannot apply filter \"%s\" to type: %s", is_int ? "int" : "float",
               jj_type_name(v->t));
}

static jj_value *indent(jj_interp *in, jj_value *v, const jj_args *a) {
    jj_value *w = a ? arg_or(a, 0, "width") : NULL;
    jj_value *first = a ? arg_or(a, 1, "first") : NULL, *blank = a ? arg_or(a, 2, "blank") : NULL;
    if (w && w->t != V_INT) jj_rt_fail(in, "width must be a number");
    int width = w ? (int)fmin(fmax(w->num, 0), 1024) : 4;
    jj_buf b;
    buf_start(in, &b);
    const char *p = v->s, *end = v->s + v->n;
    for (size_t line = 0;; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        int pad = !((line == 0 && !(first && jj_truthy(first))) ||
                    (le == p && !(blank && jj_truthy(blank))));
        for (int i = 0; pad && i < width; i++) jj_buf_addc(&b, ' ');
        jj_buf_add(&b, p, (size_t)(le - p));
        if (!nl) break;
        jj_buf_addc(&b, '\n');
        p = nl + 1;
    }
    return str_of(in, &b);
}

static jj_value *reverse(jj_interp *in, jj_value *v) {
    jj_value **items = jj_alloc(in->a, (v->n ? v->n : 1) * sizeof *items);
    for (size_t i = 0; i < v->n; i++) items[i] = v->items[v->n - 1 - i];
    return jj_array(in->a, items, v->n);
}

static jj_value *unique(jj_interp *in, jj_value *v) {
    jj_value **items = jj_alloc(in->a, (v->n ? v->n : 1) * sizeof *items);
    size_t n = 0;
    for (size_t i = 0; i < v->n; i++) {
        size_t j = 0;
        const jj_value *x = v->items[i];
        jj_charge(in->f, (1 + n) * (1 + (x->t == V_STR ? x->n >> 10 : 0)));
        while (j < n && !jj_strict_eq(items[j], x)) j++;
        if (j == n) items[n++] = v->items[i];
    }
    return jj_array(in->a, items, n);
}

/* map(attribute='a.b', default=x) */
static jj_value *map_attr(jj_interp *in, jj_value *v, const jj_args *a) {
    jj_value *attr = kwarg(a, "attribute"), *def = kwarg(a, "default");
    if (!attr)
        jj_rt_fail(in, "`map` expressions without `attribute` set are not currently supported.");
    if (attr->t != V_STR) jj_rt_fail(in, "attribute must be a string");
    jj_value **items = jj_alloc(in->a, (v->n ? v->n : 1) * sizeof *items);
    for (size_t i = 0; i < v->n; i++) {
        jj_value *x = v->items[i];
        if (x->t != V_OBJECT && x->t != V_KWARGS && x->t != V_NS)
            jj_rt_fail(in, "items in map must be an object");
        x = jj_attr_path(x, attr->s, attr->n);
        items[i] = x ? x : def ? def : jj_new(in->a, V_UNDEF);
    }
    return jj_array(in->a, items, v->n);
}

/* A string literal's value, as evaluating it gives (the bytes shared with the node). */
static jj_value *literal(jj_interp *in, const jj_node *nd) {
    jj_value *v = jj_new(in->a, V_STR);
    v->s = nd->s;
    v->n = nd->n;
    return v;
}

/* selectattr('attr'[, 'test']) / rejectattr: string literals only */
static jj_value *select_attr(jj_interp *in, jj_value *v, const jj_node *call, int select) {
    for (size_t i = 0; i < call->body.n; i++)
        if (call->body.v[i]->type != N_STR)
            jj_rt_fail(in, "arguments of `%s` must be strings",
                       select ? "selectattr" : "rejectattr");
    if (call->body.n < 1) jj_rt_fail(in, "selectattr/rejectattr need an attribute name");
    jj_value *attr = literal(in, call->body.v[0]);
    const char *test = call->body.n > 1 ? call->body.v[1]->s : NULL;
    jj_value *other = call->body.n > 2 ? literal(in, call->body.v[2]) : NULL;
    jj_value **items = jj_alloc(in->a, (v->n ? v->n : 1) * sizeof *items);
    size_t n = 0;
    for (size_t i = 0; i < v->n; i++)
        if (v->items[i]->t != V_OBJECT && v->items[i]->t != V_NS)
            jj_rt_fail(in, "`%s` can only be applied to array of objects",
                       select ? "selectattr" : "rejectattr");
    for (size_t i = 0; i < v->n; i++) {
        jj_value *x = jj_map_get(v->items[i]->map, attr->s, attr->n);
        int r = x ? (test ? jj_run_test(in, test, x, other) : jj_truthy(x)) : 0;
        if (r == select) items[n++] = v->items[i];
    }
    return jj_array(in->a, items, n);
}

static jj_value *array_filter(jj_interp *in, jj_value *v, const char *f) {
    if (!strcmp(f, "list")) return v;
    if ((!strcmp(f, "first") || !strcmp(f, "last")) && !v->n) /* hf fails on it (a JS TypeError) */
        jj_rt_fail(in, "the %s of an empty list", f);
    if (!strcmp(f, "first")) return v->items[0];
    if (!strcmp(f, "last")) return v->items[v->n - 1];
    if (!strcmp(f, "length")) return jj_num(in->a, V_INT, (double)v->n);
    if (!strcmp(f, "reverse")) return reverse(in, v);
    if (!strcmp(f, "join")) return join(in, v, NULL);
    if (!strcmp(f, "unique")) return unique(in, v);
    if (!strcmp(f, "sort")) return jj_sort(in, v, NULL);
    if (!strcmp(f, "string")) {
        jj_buf b;
        jj_json_opts o = {0};
        buf_start(in, &b);
        jj_to_json(in->f, &b, v, &o, 0);
        return str_of(in, &b);
    }
    jj_rt_fail(in, "Unknown ArrayValue filter: %s", f);
}

static jj_value *string_filter(jj_interp *in, jj_value *v, const char *f) {
    static const char *const methods[] = {"upper", "lower", "title", "capitalize", NULL};
    for (const char *const *m = methods; *m; m++) {
        if (strcmp(f, *m)) continue;
        jj_args none = {0};
        return jj_call(in, jj_builtin_member(in, v, f, strlen(f)), &none);
    }
    if (!strcmp(f, "length")) return jj_builtin_member(in, v, "length", 6);
    if (!strcmp(f, "trim")) {
        jj_args none = {0};
        return jj_call(in, jj_builtin_member(in, v, "strip", 5), &none);
    }
    if (!strcmp(f, "indent")) return indent(in, v, NULL);
    if (!strcmp(f, "join") || !strcmp(f, "string")) return v;
    if (!strcmp(f, "int") || !strcmp(f, "float")) return to_number(in, v, f[0] == 'i', NULL);
    jj_rt_fail(in, "Unknown StringValue filter: %s", f);
}

static jj_value *scalar_filter(jj_interp *in, jj_value *v, const char *f) {
    jj_buf b;
    if (jj_is_num(v)) {
        if (!strcmp(f, "abs")) return jj_num(in->a, v->t, fabs(v->num));
        if (!strcmp(f, "int")) return jj_num(in->a, V_INT, floor(v->num));
        if (!strcmp(f, "float")) return jj_num(in->a, V_FLOAT, v->num);
        if (!strcmp(f, "string")) {
            buf_start(in, &b);
            jj_to_string(in->f, &b, v);
            return str_of(in, &b);
        }
        jj_rt_fail(in, "Unknown NumericValue filter: %s", f);
    }
    if (!strcmp(f, "bool")) return jj_bool(in->a, v->b);
    if (!strcmp(f, "int") || !strcmp(f, "float")) return to_number(in, v, f[0] == 'i', NULL);
    if (!strcmp(f, "string")) return jj_str(in->a, v->b ? "true" : "false", v->b ? 4 : 5);
    jj_rt_fail(in, "Unknown BooleanValue filter: %s", f);
}

static jj_value *object_filter(jj_interp *in, jj_value *v, const char *f, jj_args *a) {
    if (!a && !strcmp(f, "length")) return jj_num(in->a, V_INT, (double)v->map->n);
    jj_value *m = jj_builtin_member(in, v, f, strlen(f));
    if (!m) jj_rt_fail(in, "Unknown ObjectValue filter: %s", f);
    jj_args none = {0};
    return jj_call(in, m, a ? a : &none);
}

static jj_value *plain_filter(jj_interp *in, jj_value *v, const char *f) {
    if (!strcmp(f, "safe")) return v;
    if (!strcmp(f, "tojson")) return tojson(in, v, NULL);
    switch (v->t) {
    case V_ARRAY:
    case V_TUPLE: return array_filter(in, v, f);
    case V_STR: return string_filter(in, v, f);
    case V_INT:
    case V_FLOAT:
    case V_BOOL: return scalar_filter(in, v, f);
    case V_OBJECT:
    case V_KWARGS: return object_filter(in, v, f, NULL);
    default: jj_rt_fail(in, "Cannot apply filter \"%s\" to type: %s", f, jj_type_name(v->t));
    }
}

static jj_value *call_filter(jj_interp *in, jj_value *v, const jj_node *call, jj_args *a) {
    const char *f = call->a->s;
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr")) {
        if (v->t != V_ARRAY && v->t != V_TUPLE)
            jj_rt_fail(in, "Cannot apply filter \"%s\" to type: %s", f, jj_type_name(v->t));
        return select_attr(in, v, call, f[0] == 's');
    }
    in->f->line = call->line;
    in->f->col = call->col;
    if (!strcmp(f, "tojson")) return tojson(in, v, a);
    if (!strcmp(f, "join")) {
        if (v->t != V_STR && v->t != V_ARRAY && v->t != V_TUPLE)
            jj_rt_fail(in, "Cannot apply filter \"join\" to type: %s", jj_type_name(v->t));
        return join(in, v, a);
    }
    if (!strcmp(f, "int") || !strcmp(f, "float"))
        return to_number(in, v, f[0] == 'i', arg_or(a, 0, "default"));
    if (!strcmp(f, "default")) {
        jj_value *def = a->npos ? a->pos[0] : jj_str(in->a, "", 0),
                 *boolean = arg_or(a, 1, "boolean");
        if (boolean && boolean->t != V_BOOL)
            jj_rt_fail(in, "`default` filter flag must be a boolean");
        return v->t == V_UNDEF || (boolean && boolean->b && !jj_truthy(v)) ? def : v;
    }
    if ((v->t == V_ARRAY || v->t == V_TUPLE) && !strcmp(f, "map")) return map_attr(in, v, a);
    if ((v->t == V_ARRAY || v->t == V_TUPLE) && !strcmp(f, "sort")) return jj_sort(in, v, a);
    if (v->t == V_STR && !strcmp(f, "indent")) return indent(in, v, a);
    if (v->t == V_STR && !strcmp(f, "replace")) {
        jj_value *fn = jj_builtin_member(in, v, "replace", 7);
        return jj_call(in, fn, a);
    }
    if (v->t == V_OBJECT || v->t == V_KWARGS) return object_filter(in, v, f, a);
    jj_rt_fail(in, "Unknown filter %s(...) for %s", f, jj_type_name(v->t));
}

jj_value *jj_apply_filter(jj_interp *in, jj_value *v, const jj_node *filter, jj_args *args) {
    if (filter->type == N_IDENT) return plain_filter(in, v, filter->s);
    return call_filter(in, v, filter, args);
}
