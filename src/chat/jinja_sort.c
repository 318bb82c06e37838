/* jinja_sort.c — ordering for the Jinja subset: `xs | sort(reverse, case_sensitive, attribute)`,
 * `d | dictsort(case_sensitive, by, reverse)` and attribute paths ('a.b.0') shared with `map`.
 * As @huggingface/jinja: numbers and booleans compare as numbers, strings as strings (lower-cased
 * unless case_sensitive), two nones or two undefineds are equal, anything else mixed is an error;
 * the sort is stable (JavaScript's Array.prototype.sort is). */
#include <stdint.h>
#include <string.h>

#include "chat/jinja_int.h"

static int numlike(const jj_value *v) { return v->t == V_INT || v->t == V_FLOAT || v->t == V_BOOL; }
static double num(const jj_value *v) { return v->t == V_BOOL ? (v->b ? 1 : 0) : v->num; }

static int compare(jj_interp *in, const jj_value *a, const jj_value *b, int case_sensitive) {
    jj_charge(in->f, 1 + (a->t == V_STR ? a->n >> 10 : 0));
    if ((a->t == V_NULL && b->t == V_NULL) || (a->t == V_UNDEF && b->t == V_UNDEF)) return 0;
    if (a->t == V_NULL || b->t == V_NULL || a->t == V_UNDEF || b->t == V_UNDEF)
        jj_rt_fail(in, "Cannot compare %s with %s", jj_type_name(a->t), jj_type_name(b->t));
    if (numlike(a) && numlike(b)) return num(a) < num(b) ? -1 : num(a) > num(b) ? 1 : 0;
    if (a->t != b->t)
        jj_rt_fail(in, "Cannot compare different types: %s and %s", jj_type_name(a->t),
                   jj_type_name(b->t));
    if (a->t != V_STR) jj_rt_fail(in, "Cannot compare type: %s", jj_type_name(a->t));
    if (!case_sensitive) { /* as the lower() method */
        a = jj_case_map(in->a, a, 0, SIZE_MAX);
        b = jj_case_map(in->a, b, 0, SIZE_MAX);
    }
    size_t n = a->n < b->n ? a->n : b->n;
    int c = memcmp(a->s, b->s, n);
    return c ? (c < 0 ? -1 : 1) : a->n < b->n ? -1 : a->n > b->n ? 1 : 0;
}

jj_value *jj_attr_path(const jj_value *v, const char *path, size_t n) {
    const char *p = path, *end = path + n;
    jj_value *x = (jj_value *)v;
    for (;;) { /* objects by key, arrays by index */
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t len = (size_t)((dot ? dot : end) - p);
        if (x->t == V_OBJECT || x->t == V_KWARGS || x->t == V_NS) {
            x = jj_map_get(x->map, p, len);
        } else if ((x->t == V_ARRAY || x->t == V_TUPLE) && len && len < 10 &&
                   strspn(p, "0123456789") >= len) {
            size_t i = 0;
            for (size_t k = 0; k < len; k++) i = i * 10 + (size_t)(p[k] - '0');
            x = i < x->n ? x->items[i] : NULL;
        } else {
            x = NULL;
        }
        if (!x || !dot) return x;
        p = dot + 1;
    }
}

typedef struct sort_key {
    jj_value *item, *key;
} sort_key;

/* stable merge sort of n keys (tmp: n more) */
static void merge_sort(jj_interp *in, sort_key *k, sort_key *tmp, size_t n, int cs, int rev) {
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(in, k, tmp, h, cs, rev);
    merge_sort(in, k + h, tmp, n - h, cs, rev);
    size_t i = 0, j = h, o = 0;
    while (i < h && j < n) {
        int c = compare(in, k[j].key, k[i].key, cs);
        tmp[o++] = (rev ? c > 0 : c < 0) ? k[j++] : k[i++];
    }
    while (i < h) tmp[o++] = k[i++];
    while (j < n) tmp[o++] = k[j++];
    memcpy(k, tmp, n * sizeof *k);
}

static jj_value *sorted(jj_interp *in, jj_value **items, jj_value **keys, size_t n, int cs,
                        int rev) {
    sort_key *k = jj_alloc(in->a, (n ? n : 1) * 2 * sizeof *k);
    for (size_t i = 0; i < n; i++) k[i] = (sort_key){items[i], keys[i]};
    merge_sort(in, k, k + n, n, cs, rev);
    jj_value **out = jj_alloc(in->a, (n ? n : 1) * sizeof *out);
    for (size_t i = 0; i < n; i++) out[i] = k[i].item;
    return jj_array(in->a, out, n);
}

static jj_value *arg(const jj_args *a, size_t i, const char *kw) {
    if (a && i < a->npos) return a->pos[i];
    return a && a->kw ? jj_map_get(a->kw, kw, strlen(kw)) : NULL;
}

static int flag(jj_interp *in, const jj_args *a, size_t i, const char *kw) {
    jj_value *v = arg(a, i, kw);
    if (v && v->t != V_BOOL) jj_rt_fail(in, "%s must be a boolean", kw);
    return v && v->b;
}

jj_value *jj_sort(jj_interp *in, jj_value *v, const jj_args *a) {
    int rev = flag(in, a, 0, "reverse"), cs = flag(in, a, 1, "case_sensitive");
    jj_value *attr = arg(a, 2, "attribute");
    if (attr && attr->t != V_STR && attr->t != V_INT && attr->t != V_NULL)
        jj_rt_fail(in, "attribute must be a string, integer, or null");
    jj_value **keys = jj_alloc(in->a, (v->n ? v->n : 1) * sizeof *keys);
    jj_buf path;
    jj_buf_init(&path, in->a);
    jj_buf_add(&path, "", 0);
    if (attr && attr->t == V_INT) jj_fmt_number(&path, attr->num);
    if (attr && attr->t == V_STR) jj_buf_add(&path, attr->s, attr->n);
    for (size_t i = 0; i < v->n; i++) {
        jj_value *k =
            attr && attr->t != V_NULL ? jj_attr_path(v->items[i], path.p, path.n) : v->items[i];
        keys[i] = k ? k : jj_new(in->a, V_UNDEF);
    }
    return sorted(in, v->items, keys, v->n, cs, rev);
}

jj_value *jj_dictsort(jj_interp *in, jj_value *obj, const jj_args *a) {
    int cs = flag(in, a, 0, "case_sensitive"), rev = flag(in, a, 2, "reverse");
    jj_value *by = arg(a, 1, "by");
    if (by && by->t != V_STR) jj_rt_fail(in, "by must be a string");
    int by_value = by && !strcmp(by->s, "value");
    if (by && !by_value && strcmp(by->s, "key"))
        jj_rt_fail(in, "by must be either 'key' or 'value'");
    const jj_map *m = obj->map;
    jj_value **pairs = jj_alloc(in->a, (m->n ? m->n : 1) * sizeof *pairs);
    jj_value **keys = jj_alloc(in->a, (m->n ? m->n : 1) * sizeof *keys);
    for (size_t i = 0; i < m->n; i++) {
        jj_value **kv = jj_alloc(in->a, 2 * sizeof *kv);
        kv[0] = jj_str(in->a, m->keys[i], m->klen[i]);
        kv[1] = m->vals[i];
        pairs[i] = jj_array(in->a, kv, 2);
        keys[i] = kv[by_value];
    }
    return sorted(in, pairs, keys, m->n, cs, rev);
}
