/* jinja_builtin.c — what templates call, filters aside (jinja_filter.c): tests
 * (`x is string`), global functions (namespace, raise_exception, range, strftime_now), the
 * methods of strings (startswith, split, strip...) and objects (get, items...), macros, and
 * slicing. Each follows @huggingface/jinja 0.5.11, quirks included: strip('\n') strips all
 * whitespace (hf ignores the argument), `+` on a float prints it as JavaScript does ("1" for
 * 1.0). */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/jinja_int.h"

static jj_value *new_str(jj_interp *in, const char *s, size_t n) { return jj_str(in->a, s, n); }

static jj_value *buf_value(jj_interp *in, jj_buf *b) {
    jj_value *v = jj_new(in->a, V_STR);
    v->s = b->p ? b->p : "";
    v->n = b->n;
    return v;
}

static jj_value *arg(const jj_args *a, size_t i, const char *kw) {
    if (i < a->npos) return a->pos[i];
    return a->kw && kw ? jj_map_get(a->kw, kw, strlen(kw)) : NULL;
}

/* ---- strings ---- */
static jj_value *trim(jj_interp *in, const jj_value *s, int left, int right) {
    jj_charge(in->f, s->n >> 10);
    const char *p = s->s;
    size_t n = s->n, k;
    while (left && n && (k = jj_space_at(p, n))) p += k, n -= k;
    while (right && n && (k = jj_space_before(p, n))) n -= k;
    return new_str(in, p, n);
}

static int is_word(unsigned char c) { return isalnum(c) || c == '_'; }

/* /\b\w/g -> upper case: the first word character after a non-word one */
static jj_value *title(jj_interp *in, const jj_value *s) {
    jj_value *v = new_str(in, s->s, s->n);
    char *p = (char *)v->s;
    for (size_t i = 0; i < v->n; i++)
        if (is_word((unsigned char)p[i]) && (i == 0 || !is_word((unsigned char)p[i - 1])))
            p[i] = (char)toupper((unsigned char)p[i]);
    return v;
}


static int affix(const jj_value *s, const jj_value *p, int end) {
    if (p->n > s->n) return 0;
    return !memcmp(end ? s->s + s->n - p->n : s->s, p->s, p->n);
}

static jj_value *starts_ends(jj_interp *in, const jj_value *s, const jj_args *a, int end) {
    const char *name = end ? "endswith" : "startswith";
    jj_value *p = arg(a, 0, NULL);
    if (!p) jj_rt_fail(in, "%s() requires at least one argument", name);
    jj_charge(in->f, 1 + (p->t == V_STR ? p->n >> 10 : p->n));
    if (p->t == V_STR) return jj_bool(in->a, affix(s, p, end));
    if (p->t != V_ARRAY && p->t != V_TUPLE)
        jj_rt_fail(in, "%s() argument must be a string or tuple of strings", name);
    for (size_t i = 0; i < p->n; i++) {
        if (p->items[i]->t != V_STR) jj_rt_fail(in, "%s() tuple elements must be strings", name);
        if (affix(s, p->items[i], end)) return jj_bool(in->a, true);
    }
    return jj_bool(in->a, false);
}

static void push_item(jj_interp *in, jj_value ***items, size_t *n, size_t *cap, jj_value *v) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 8;
        jj_value **p = jj_alloc(in->a, c * sizeof *p);
        if (*n) memcpy(p, *items, *n * sizeof *p);
        *items = p;
        *cap = c;
    }
    (*items)[(*n)++] = v;
}

static jj_value *split_space(jj_interp *in, const jj_value *s, double maxsplit) {
    jj_value **items = NULL;
    size_t n = 0, cap = 0, k;
    const char *p = s->s, *end = s->s + s->n;
    while (p < end && (k = jj_space_at(p, (size_t)(end - p)))) p += k;
    while (p < end) {
        if (maxsplit != -1 && (double)n >= maxsplit) {
            push_item(in, &items, &n, &cap, new_str(in, p, (size_t)(end - p)));
            break;
        }
        const char *w = p;
        while (p < end && !jj_space_at(p, (size_t)(end - p))) {
            jj_utf8_decode(p, (size_t)(end - p), &k);
            p += k;
        }
        push_item(in, &items, &n, &cap, new_str(in, w, (size_t)(p - w)));
        while (p < end && (k = jj_space_at(p, (size_t)(end - p)))) p += k;
    }
    return jj_array(in->a, items, n);
}

static jj_value *split(jj_interp *in, const jj_value *s, const jj_args *a) {
    jj_value *sep = arg(a, 0, NULL), *max = arg(a, 1, NULL);
    if (sep && sep->t != V_STR && sep->t != V_NULL)
        jj_rt_fail(in, "sep argument must be a string or null");
    if (max && max->t != V_INT) jj_rt_fail(in, "maxsplit argument must be a number");
    double maxsplit = max ? max->num : -1;
    jj_charge(in->f, s->n >> 10);
    if (!sep || sep->t == V_NULL) return split_space(in, s, maxsplit);
    if (sep->n == 0) jj_rt_fail(in, "empty separator");
    jj_value **items = NULL;
    size_t n = 0, cap = 0;
    const char *p = s->s, *end = s->s + s->n;
    for (;;) {
        const char *hit = (maxsplit == -1 || (double)n < maxsplit)
                              ? memmem(p, (size_t)(end - p), sep->s, sep->n) : NULL;
        if (!hit) {
            push_item(in, &items, &n, &cap, new_str(in, p, (size_t)(end - p)));
            break;
        }
        push_item(in, &items, &n, &cap, new_str(in, p, (size_t)(hit - p)));
        p = hit + sep->n;
    }
    return jj_array(in->a, items, n);
}

/* str.replace(old, new[, count]); an empty old inserts new between every character */
static jj_value *replace(jj_interp *in, const jj_value *s, const jj_args *a) {
    jj_value *from = arg(a, 0, NULL), *to = arg(a, 1, NULL), *count = arg(a, 2, "count");
    if (!from || !to) jj_rt_fail(in, "replace() requires at least two arguments");
    if (from->t != V_STR || to->t != V_STR) jj_rt_fail(in, "replace() arguments must be strings");
    if (count && count->t != V_INT && count->t != V_NULL)
        jj_rt_fail(in, "replace() count argument must be a number or null");
    double left = !count || count->t == V_NULL || count->num < 0 ? INFINITY : count->num;
    jj_charge(in->f, s->n >> 10);
    jj_buf b;
    jj_buf_init(&b, in->a);
    jj_buf_add(&b, "", 0);
    const char *p = s->s, *end = s->s + s->n;
    if (from->n == 0) {
        size_t len;
        for (;; p += len) {
            if (left > 0) jj_buf_add(&b, to->s, to->n), left--;
            if (p >= end) break;
            jj_utf8_decode(p, (size_t)(end - p), &len);
            jj_buf_add(&b, p, len);
        }
        return buf_value(in, &b);
    }
    while (left > 0) {
        const char *hit = memmem(p, (size_t)(end - p), from->s, from->n);
        if (!hit) break;
        jj_buf_add(&b, p, (size_t)(hit - p));
        jj_buf_add(&b, to->s, to->n);
        p = hit + from->n;
        left--;
    }
    jj_buf_add(&b, p, (size_t)(end - p));
    return buf_value(in, &b);
}

/* ---- slicing (utils.ts slice): arrays by element, strings by code point ---- */
static void slice_bounds(double len, jj_value *start, jj_value *stop, double step, double *s,
                         double *e) {
    if (step >= 0) {
        *s = start->t == V_UNDEF ? 0
             : start->num < 0    ? fmax(len + start->num, 0)
                                 : fmin(start->num, len);
        *e = stop->t == V_UNDEF ? len
             : stop->num < 0    ? fmax(len + stop->num, 0)
                                : fmin(stop->num, len);
    } else {
        *s = start->t == V_UNDEF ? len - 1
             : start->num < 0    ? fmax(len + start->num, -1)
                                 : fmin(start->num, len - 1);
        *e = stop->t == V_UNDEF ? -1
             : stop->num < -1   ? fmax(len + stop->num, -1)
                                : fmin(stop->num, len - 1);
    }
}

jj_value *jj_slice(jj_interp *in, jj_value *obj, jj_value *start, jj_value *stop, jj_value *step) {
    jj_value u = {.t = V_UNDEF};
    if (!step) step = &u;
    if (obj->t != V_ARRAY && obj->t != V_TUPLE && obj->t != V_STR)
        jj_rt_fail(in, "Slice object must be an array or string");
    if ((start->t != V_INT && start->t != V_UNDEF) || (stop->t != V_INT && stop->t != V_UNDEF) ||
        (step->t != V_INT && step->t != V_UNDEF))
        jj_rt_fail(in, "Slice start, stop and step must be integers or undefined");
    double st = step->t == V_UNDEF ? 1 : step->num;
    if (st == 0) jj_rt_fail(in, "slice step cannot be zero");
    size_t len = obj->n;
    const char **cp = NULL; /* strings: start of each code point */
    if (obj->t == V_STR) {
        cp = jj_alloc(in->a, (obj->n + 1) * sizeof *cp);
        len = 0;
        for (size_t i = 0, k; i < obj->n; i += k) {
            cp[len++] = obj->s + i;
            jj_utf8_decode(obj->s + i, obj->n - i, &k);
        }
        cp[len] = obj->s + obj->n;
    }
    double s, e, dir = st > 0 ? 1 : -1;
    slice_bounds((double)len, start, stop, st, &s, &e);
    jj_value **items = NULL;
    size_t n = 0, cap = 0;
    jj_buf b;
    jj_buf_init(&b, in->a);
    jj_buf_add(&b, "", 0);
    for (double i = s; dir * i < dir * e; i += st) {
        size_t k = (size_t)i;
        if (cp) jj_buf_add(&b, cp[k], (size_t)(cp[k + 1] - cp[k]));
        else push_item(in, &items, &n, &cap, obj->items[k]);
    }
    return cp ? buf_value(in, &b) : jj_array(in->a, items, n);
}

/* ---- builtin members ---- */
static const char *const str_methods[] = {"upper", "lower", "strip", "title", "capitalize",
    "rstrip", "lstrip", "startswith", "endswith", "split", "replace", NULL};
static const char *const obj_methods[] = {"get", "items", "keys", "values", "dictsort", NULL};

static const char *find_name(const char *const *names, const char *s, size_t n) {
    for (; *names; names++)
        if (strlen(*names) == n && !memcmp(*names, s, n)) return *names;
    return NULL;
}

jj_value *jj_builtin_member(jj_interp *in, jj_value *obj, const char *name, size_t n) {
    const char *m = NULL;
    jj_fn fn = FN_STR_METHOD;
    if ((obj->t == V_STR || obj->t == V_ARRAY || obj->t == V_TUPLE) && n == 6 &&
        !memcmp(name, "length", 6)) {
        jj_charge(in->f, obj->t == V_STR ? obj->n >> 10 : 0);
        return jj_num(in->a, V_INT,
                      obj->t == V_STR ? (double)jj_utf16_len(obj->s, obj->n) : (double)obj->n);
    }
    if (obj->t == V_STR) m = find_name(str_methods, name, n);
    if (obj->t == V_OBJECT || obj->t == V_KWARGS)
        m = find_name(obj_methods, name, n), fn = FN_OBJ_METHOD;
    if (!m) return NULL;
    jj_value *f = jj_new(in->a, V_FUNC);
    f->fn = fn;
    f->s = m;
    f->self = obj;
    return f;
}

static jj_value *items_of(jj_interp *in, const jj_map *m, int what) { /* 0 items 1 keys 2 values */
    jj_value **items = jj_alloc(in->a, (m->n ? m->n : 1) * sizeof *items);
    for (size_t i = 0; i < m->n; i++) {
        jj_value *k = new_str(in, m->keys[i], m->klen[i]);
        if (what == 1) items[i] = k;
        else if (what == 2) items[i] = m->vals[i];
        else {
            jj_value **pair = jj_alloc(in->a, 2 * sizeof *pair);
            pair[0] = k;
            pair[1] = m->vals[i];
            items[i] = jj_array(in->a, pair, 2);
        }
    }
    return jj_array(in->a, items, m->n);
}

static jj_value *str_method(jj_interp *in, const char *m, jj_value *s, const jj_args *a) {
    if (!strcmp(m, "upper")) return jj_case_map(in->a, s, 1, SIZE_MAX);
    if (!strcmp(m, "lower")) return jj_case_map(in->a, s, 0, SIZE_MAX);
    if (!strcmp(m, "strip")) return trim(in, s, 1, 1);
    if (!strcmp(m, "lstrip")) return trim(in, s, 1, 0);
    if (!strcmp(m, "rstrip")) return trim(in, s, 0, 1);
    if (!strcmp(m, "title")) return title(in, s);
    if (!strcmp(m, "capitalize")) return jj_case_map(in->a, s, 1, 1); /* the rest stays as it is */
    if (!strcmp(m, "startswith")) return starts_ends(in, s, a, 0);
    if (!strcmp(m, "endswith")) return starts_ends(in, s, a, 1);
    if (!strcmp(m, "split")) return split(in, s, a);
    return replace(in, s, a);
}

static jj_value *obj_method(jj_interp *in, const char *m, jj_value *o, const jj_args *a) {
    if (!strcmp(m, "get")) {
        jj_value *k = arg(a, 0, NULL), *def = arg(a, 1, NULL);
        if (!k || k->t != V_STR)
            jj_rt_fail(in, "Object key must be a string: got %s",
                       k ? jj_type_name(k->t) : "nothing");
        jj_value *v = jj_map_get(o->map, k->s, k->n);
        return v ? v : def ? def : jj_new(in->a, V_NULL);
    }
    if (!strcmp(m, "dictsort")) return jj_dictsort(in, o, a);
    return items_of(in, o->map, !strcmp(m, "items") ? 0 : !strcmp(m, "keys") ? 1 : 2);
}

/* ---- global functions ---- */
/* one [key, value] pair of namespace([...]); a two-character string is a pair of characters */
static void namespace_pair(jj_interp *in, jj_map *m, jj_value *pair) {
    jj_value *k = NULL, *v = NULL;
    if ((pair->t == V_ARRAY || pair->t == V_TUPLE) && pair->n == 2) {
        k = pair->items[0];
        v = pair->items[1];
    } else if (pair->t == V_STR) {
        size_t l1, l2 = 0;
        if (pair->n) jj_utf8_decode(pair->s, pair->n, &l1);
        if (pair->n && l1 < pair->n) jj_utf8_decode(pair->s + l1, pair->n - l1, &l2);
        if (pair->n && l1 + l2 == pair->n && l2) {
            k = jj_str(in->a, pair->s, l1);
            v = jj_str(in->a, pair->s + l1, l2);
        }
    }
    if (!k) jj_rt_fail(in, "namespace expected an object or an iterable of [key, value] pairs");
    if (k->t != V_STR) jj_rt_fail(in, "namespace keys must be strings");
    jj_map_set(in->a, m, k->s, k->n, v);
}

static jj_value *namespace_fn(jj_interp *in, const jj_args *a) {
    jj_value *ns = jj_new(in->a, V_NS);
    ns->map = jj_map_new(in->a);
    if (a->npos > 1) jj_rt_fail(in, "namespace expected at most 1 argument, got %zu", a->npos);
    const jj_value *src = a->npos == 1 ? a->pos[0] : NULL;
    if (src && (src->t == V_OBJECT || src->t == V_KWARGS)) {
        for (size_t i = 0; i < src->map->n; i++)
            jj_map_set(in->a, ns->map, src->map->keys[i], src->map->klen[i], src->map->vals[i]);
    } else if (src && (src->t == V_ARRAY || src->t == V_TUPLE)) {
        for (size_t i = 0; i < src->n; i++) namespace_pair(in, ns->map, src->items[i]);
    } else if (src) {
        jj_rt_fail(in, "'%s' object is not iterable", jj_type_name(src->t));
    }
    for (size_t i = 0; a->kw && i < a->kw->n; i++)
        jj_map_set(in->a, ns->map, a->kw->keys[i], a->kw->klen[i], a->kw->vals[i]);
    return ns;
}

static jj_value *range_fn(jj_interp *in, const jj_args *a) {
    for (size_t i = 0; i < a->npos; i++)
        if (a->pos[i]->t != V_INT) jj_rt_fail(in, "range() takes integers");
    if (a->npos < 1 || a->npos > 3) jj_rt_fail(in, "range() takes 1 to 3 arguments");
    double start = a->npos == 1 ? 0 : a->pos[0]->num;
    double stop = a->npos == 1 ? a->pos[0]->num : a->pos[1]->num;
    double step = a->npos == 3 ? a->pos[2]->num : 1;
    if (step == 0) jj_rt_fail(in, "range() step must not be zero");
    double count = ceil((stop - start) / step);
    if (count > 1e6) jj_rt_fail(in, "range() of %.0f items: at most 1000000", count);
    size_t n = count > 0 ? (size_t)count : 0;
    jj_value **items = jj_alloc(in->a, (n ? n : 1) * sizeof *items);
    for (size_t i = 0; i < n; i++) items[i] = jj_num(in->a, V_INT, start + step * (double)i);
    return jj_array(in->a, items, n);
}

static jj_value *strftime_fn(jj_interp *in, const jj_args *a) {
    static const char *const months[] = {"January", "February", "March", "April", "May", "June",
        "July", "August", "September", "October", "November", "December"};
    jj_value *fmt = arg(a, 0, NULL);
    if (!fmt || fmt->t != V_STR) jj_rt_fail(in, "strftime_now() takes a format string");
    time_t t = (time_t)in->now;
    struct tm tm;
    localtime_r(&t, &tm);
    jj_buf b;
    jj_buf_init(&b, in->a);
    jj_buf_add(&b, "", 0);
    for (size_t i = 0; i < fmt->n; i++) {
        char c = i + 1 < fmt->n && fmt->s[i] == '%' ? fmt->s[i + 1] : 0;
        char num[16];
        int v = c == 'Y' ? tm.tm_year + 1900 : c == 'm' ? tm.tm_mon + 1 : c == 'd' ? tm.tm_mday
              : c == 'H' ? tm.tm_hour : c == 'M' ? tm.tm_min : -1;
        if (v >= 0) snprintf(num, sizeof num, c == 'Y' ? "%d" : "%02d", v), jj_buf_adds(&b, num);
        else if (c == 'b') jj_buf_add(&b, months[tm.tm_mon], 3);
        else if (c == 'B') jj_buf_adds(&b, months[tm.tm_mon]);
        else if (c == '%') jj_buf_addc(&b, '%');
        else {
            jj_buf_addc(&b, fmt->s[i]);
            continue;
        }
        i++;
    }
    return buf_value(in, &b);
}

jj_value *jj_call(jj_interp *in, jj_value *fn, jj_args *a) {
    switch (fn->fn) {
    case FN_NAMESPACE: return namespace_fn(in, a);
    case FN_RAISE: {
        jj_buf b;
        jj_buf_init(&b, in->a);
        jj_buf_add(&b, "", 0);
        if (a->npos) jj_raw_string(in->f, &b, a->pos[0]);
        jj_fail(in->f, JINJA_ERAISE, 0, 0, "%s", b.p);
    }
    case FN_RANGE: return range_fn(in, a);
    case FN_STRFTIME: return strftime_fn(in, a);
    case FN_STR_METHOD: return str_method(in, fn->s, fn->self, a);
    case FN_OBJ_METHOD: return obj_method(in, fn->s, fn->self, a);
    default: jj_rt_fail(in, "unknown function");
    }
}

/* ---- tests ---- */
/* s === s.toLowerCase() (or upper) */
static int is_lower_upper(jj_interp *in, const jj_value *v, int upper) {
    if (v->t != V_STR) return 0;
    jj_value *m = jj_case_map(in->a, v, upper, SIZE_MAX);
    return m->n == v->n && !memcmp(m->s, v->s, v->n);
}

bool jj_run_test(jj_interp *in, const char *name, const jj_value *v, const jj_value *other) {
    jj_vtype t = v->t;
    if (!strcmp(name, "equalto") || !strcmp(name, "eq")) {
        if (!other) jj_rt_fail(in, "the test %s needs a value to compare with", name);
        return jj_strict_eq(v, other);
    }
    if (!strcmp(name, "defined")) return t != V_UNDEF;
    if (!strcmp(name, "undefined")) return t == V_UNDEF;
    if (!strcmp(name, "none")) return t == V_NULL;
    if (!strcmp(name, "string")) return t == V_STR;
    if (!strcmp(name, "boolean")) return t == V_BOOL;
    if (!strcmp(name, "true")) return t == V_BOOL && v->b;
    if (!strcmp(name, "false")) return t == V_BOOL && !v->b;
    if (!strcmp(name, "number")) return jj_is_num(v);
    if (!strcmp(name, "integer")) return t == V_INT;
    if (!strcmp(name, "iterable")) return t == V_ARRAY || t == V_STR;
    if (!strcmp(name, "mapping")) return t == V_OBJECT || t == V_KWARGS;
    if (!strcmp(name, "sequence"))
        return t == V_ARRAY || t == V_TUPLE || t == V_OBJECT || t == V_KWARGS || t == V_STR;
    if (!strcmp(name, "callable")) return t == V_FUNC;
    if (!strcmp(name, "lower")) return is_lower_upper(in, v, 0);
    if (!strcmp(name, "upper")) return is_lower_upper(in, v, 1);
    if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (t != V_INT) jj_rt_fail(in, "cannot %s on %s", name, jj_type_name(t));
        return (fmod(v->num, 2) != 0) == (name[0] == 'o');
    }
    jj_rt_fail(in, "Unknown test: %s", name);
}
