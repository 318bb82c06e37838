/* jinja_value.c — runtime values of the Jinja subset: constructors, ordered maps, truth,
 * printing (JavaScript's number formatting, as @huggingface/jinja prints through JS), equality
 * (==, which is JavaScript's loose ==, and the strict one `in` uses) and tojson. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_int.h"

static const char *const type_names[V_VTYPE_COUNT] = {
    "UndefinedValue", "NullValue", "BooleanValue", "IntegerValue", "FloatValue", "StringValue",
    "ArrayValue", "TupleValue", "ObjectValue", "KeywordArgumentsValue", "NamespaceValue",
    "FunctionValue"};

const char *jj_type_name(jj_vtype t) { return t < V_VTYPE_COUNT ? type_names[t] : "?"; }

jj_value *jj_new(jj_arena *a, jj_vtype t) {
    jj_value *v = jj_alloc(a, sizeof *v);
    v->t = t;
    return v;
}

jj_value *jj_str(jj_arena *a, const char *s, size_t n) {
    jj_value *v = jj_new(a, V_STR);
    v->s = jj_strdup(a, s, n);
    v->n = n;
    return v;
}

jj_value *jj_num(jj_arena *a, jj_vtype t, double x) {
    jj_value *v = jj_new(a, t);
    v->num = x;
    return v;
}

jj_value *jj_bool(jj_arena *a, bool b) {
    jj_value *v = jj_new(a, V_BOOL);
    v->b = b;
    return v;
}

jj_value *jj_array(jj_arena *a, jj_value **items, size_t n) {
    jj_value *v = jj_new(a, V_ARRAY);
    v->items = items;
    v->n = n;
    return v;
}

jj_map *jj_map_new(jj_arena *a) {
    jj_map *m = jj_alloc(a, sizeof *m);
    return m;
}

/* Maps of more than MAP_LINEAR keys get a hash table (open addressing, 2 cap slots): a
 * template's namespace or a conversation's object of 100,000 keys stays linear to build. */
enum { MAP_LINEAR = 8 };

static size_t key_hash(const char *k, size_t n) {
    size_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static long map_find(const jj_map *m, const char *k, size_t kn) {
    if (!m->slot) {
        for (size_t i = 0; i < m->n; i++)
            if (m->klen[i] == kn && !memcmp(m->keys[i], k, kn)) return (long)i;
        return -1;
    }
    size_t mask = 2 * m->cap - 1;
    for (size_t s = key_hash(k, kn) & mask;; s = (s + 1) & mask) {
        unsigned i = m->slot[s];
        if (!i) return -1;
        if (m->klen[i - 1] == kn && !memcmp(m->keys[i - 1], k, kn)) return (long)i - 1;
    }
}

static void slot_put(jj_map *m, size_t i) {
    size_t mask = 2 * m->cap - 1, s = key_hash(m->keys[i], m->klen[i]) & mask;
    while (m->slot[s]) s = (s + 1) & mask;
    m->slot[s] = (unsigned)i + 1;
}

jj_value *jj_map_get(const jj_map *m, const char *k, size_t kn) {
    long i = map_find(m, k, kn);
    return i < 0 ? NULL : m->vals[i];
}

static void map_grow(jj_arena *a, jj_map *m) {
    size_t cap = m->cap ? m->cap * 2 : MAP_LINEAR;
    const char **keys = jj_alloc(a, cap * sizeof *keys);
    size_t *klen = jj_alloc(a, cap * sizeof *klen);
    jj_value **vals = jj_alloc(a, cap * sizeof *vals);
    if (m->n) {
        memcpy(keys, m->keys, m->n * sizeof *keys);
        memcpy(klen, m->klen, m->n * sizeof *klen);
        memcpy(vals, m->vals, m->n * sizeof *vals);
    }
    m->keys = keys;
    m->klen = klen;
    m->vals = vals;
    m->cap = cap;
    m->slot = NULL;
    if (cap <= MAP_LINEAR) return;
    m->slot = jj_alloc(a, 2 * cap * sizeof *m->slot);
    for (size_t i = 0; i < m->n; i++) slot_put(m, i);
}

/* A new key goes last; an existing key keeps its place (JavaScript's Map). */
void jj_map_set(jj_arena *a, jj_map *m, const char *k, size_t kn, jj_value *v) {
    long i = map_find(m, k, kn);
    if (i >= 0) {
        m->vals[i] = v;
        return;
    }
    if (m->n == m->cap) map_grow(a, m);
    m->keys[m->n] = k;
    m->klen[m->n] = kn;
    m->vals[m->n] = v;
    if (m->slot) slot_put(m, m->n);
    m->n++;
}

bool jj_is_num(const jj_value *v) { return v->t == V_INT || v->t == V_FLOAT; }

bool jj_truthy(const jj_value *v) {
    switch (v->t) {
    case V_BOOL: return v->b;
    case V_INT:
    case V_FLOAT: return v->num != 0 && !isnan(v->num);
    case V_STR: return v->n > 0;
    case V_ARRAY:
    case V_TUPLE: return v->n > 0;
    case V_OBJECT:
    case V_KWARGS: return v->map->n > 0;
    case V_NS:
    case V_FUNC: return true;
    default: return false;
    }
}

/* ---- numbers as JavaScript prints them (Number.prototype.toString) ---- */
void jj_fmt_number(jj_buf *b, double x) {
    if (isnan(x)) return jj_buf_adds(b, "NaN");
    if (isinf(x)) return jj_buf_adds(b, x > 0 ? "Infinity" : "-Infinity");
    if (x == 0) return jj_buf_adds(b, "0");
    if (x < 0) {
        jj_buf_addc(b, '-');
        x = -x;
    }
    char e[40];
    int prec;
    for (prec = 0; prec < 17; prec++) { /* shortest digits that read back as x */
        snprintf(e, sizeof e, "%.*e", prec, x);
        if (strtod(e, NULL) == x) break;
    }
    char dig[24];
    int k = 0;
    for (const char *q = e; *q && *q != 'e'; q++)
        if (*q != '.') dig[k++] = *q;
    while (k > 1 && dig[k - 1] == '0') k--;
    dig[k] = '\0';
    int n = atoi(strchr(e, 'e') + 1) + 1; /* x = 0.dig * 10^n */
    char out[64];
    if (k <= n && n <= 21) {
        snprintf(out, sizeof out, "%s%0*d", dig, n - k, 0);
        if (n == k) snprintf(out, sizeof out, "%s", dig);
    } else if (0 < n && n <= 21) {
        snprintf(out, sizeof out, "%.*s.%s", n, dig, dig + n);
    } else if (-6 < n && n <= 0) {
        snprintf(out, sizeof out, "0.%0*d%s", -n, 0, dig);
        if (n == 0) snprintf(out, sizeof out, "0.%s", dig);
    } else {
        snprintf(out, sizeof out, "%c%s%s%se%c%d", dig[0], k > 1 ? "." : "", dig + 1, "",
                 n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
    jj_buf_adds(b, out);
}

static void fmt_float(jj_buf *b, double x) {
    if (x == 0 && signbit(x)) return jj_buf_adds(b, "-0.0");
    if (isfinite(x) && x == floor(x) && fabs(x) < 1e21) { /* toFixed(1) */
        char out[40];
        snprintf(out, sizeof out, "%.1f", x);
        return jj_buf_adds(b, out);
    }
    jj_fmt_number(b, x);
}

void jj_to_string(jj_fail_ctx *f, jj_buf *b, const jj_value *v) {
    jj_json_opts o = {0};
    switch (v->t) {
    case V_UNDEF: return jj_buf_adds(b, "undefined");
    case V_NULL: return jj_buf_adds(b, "null");
    case V_BOOL: return jj_buf_adds(b, v->b ? "true" : "false");
    case V_INT: return jj_fmt_number(b, v->num);
    case V_FLOAT: return fmt_float(b, v->num);
    case V_STR: return jj_buf_add(b, v->s, v->n);
    case V_ARRAY:
    case V_TUPLE:
    case V_OBJECT:
    case V_KWARGS:
    case V_NS: return jj_to_json(f, b, v, &o, 0);
    default:
        jj_fail(f, JINJA_ERUNTIME, 0, 0, "cannot print a %s", jj_type_name(v->t));
    }
}

void jj_raw_string(jj_fail_ctx *f, jj_buf *b, const jj_value *v) {
    switch (v->t) {
    case V_INT:
    case V_FLOAT: return jj_fmt_number(b, v->num);
    case V_ARRAY:
    case V_TUPLE: /* Array.prototype.toString: elements' toString() joined by "," */
        for (size_t i = 0; i < v->n; i++) {
            if (i) jj_buf_addc(b, ',');
            jj_to_string(f, b, v->items[i]);
        }
        return;
    case V_OBJECT:
    case V_KWARGS:
    case V_NS: return jj_buf_adds(b, "[object Map]");
    default: return jj_to_string(f, b, v);
    }
}

/* ---- equality ---- */
bool jj_strict_eq(const jj_value *x, const jj_value *y) {
    if (jj_is_num(x) && jj_is_num(y)) return x->num == y->num;
    if (x->t != y->t) return false;
    switch (x->t) {
    case V_UNDEF:
    case V_NULL: return true;
    case V_BOOL: return x->b == y->b;
    case V_STR: return x->n == y->n && !memcmp(x->s, y->s, x->n);
    case V_ARRAY:
    case V_TUPLE: return x->items == y->items && x->n == y->n;
    case V_OBJECT:
    case V_KWARGS:
    case V_NS: return x->map == y->map;
    default: return x == y;
    }
}

/* ToNumber of a JS string: whitespace-trimmed decimal, "" is 0, anything else NaN */
static double str_to_number(const char *s, size_t n) {
    size_t k;
    while (n && (k = jj_space_at(s, n))) s += k, n -= k;
    while (n && (k = jj_space_before(s, n))) n -= k;
    if (n == 0) return 0;
    char tmp[64];
    if (n >= sizeof tmp) return NAN;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    if (!strcmp(tmp, "Infinity") || !strcmp(tmp, "+Infinity")) return INFINITY;
    if (!strcmp(tmp, "-Infinity")) return -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789+-.eE", tmp[i])) return NAN;
    char *end;
    double x = strtod(tmp, &end);
    return *end ? NAN : x;
}

static bool is_numlike(const jj_value *v) { return jj_is_num(v) || v->t == V_BOOL; }
static double numlike(const jj_value *v) { return v->t == V_BOOL ? (v->b ? 1 : 0) : v->num; }
static bool is_container(const jj_value *v) {
    return v->t == V_ARRAY || v->t == V_TUPLE || v->t == V_OBJECT || v->t == V_KWARGS ||
           v->t == V_NS;
}

/* JavaScript's == on the wrapped values (hf compares left.value == right.value) */
bool jj_loose_eq(jj_fail_ctx *f, jj_arena *a, const jj_value *x, const jj_value *y) {
    bool xn = x->t == V_UNDEF || x->t == V_NULL, yn = y->t == V_UNDEF || y->t == V_NULL;
    if (xn || yn) return xn && yn;
    if (is_container(x) && is_container(y)) return jj_strict_eq(x, y);
    if (x->t == V_FUNC || y->t == V_FUNC) return x == y;
    if (is_container(x) || is_container(y)) { /* ToPrimitive: the object's string */
        jj_buf b;
        jj_buf_init(&b, a);
        jj_buf_add(&b, "", 0);
        jj_raw_string(f, &b, is_container(x) ? x : y);
        jj_value s = {.t = V_STR, .s = b.p, .n = b.n};
        return is_container(x) ? jj_loose_eq(f, a, &s, y) : jj_loose_eq(f, a, x, &s);
    }
    if (x->t == V_STR && y->t == V_STR) return jj_strict_eq(x, y);
    double dx = x->t == V_STR ? str_to_number(x->s, x->n) : numlike(x);
    double dy = y->t == V_STR ? str_to_number(y->s, y->n) : numlike(y);
    return is_numlike(x) || is_numlike(y) ? dx == dy : false;
}

/* ---- tojson: JSON.stringify's escapes, hf's separators and indentation ---- */
static void json_string(jj_buf *b, const char *s, size_t n, bool ascii) {
    jj_buf_addc(b, '"');
    for (size_t i = 0, len; i < n; i += len) {
        unsigned cp = jj_utf8_decode(s + i, n - i, &len);
        char esc[16];
        const char *short_esc = cp == '"' ? "\\\"" : cp == '\\' ? "\\\\" : cp == '\b' ? "\\b"
                              : cp == '\f' ? "\\f" : cp == '\n' ? "\\n" : cp == '\r' ? "\\r"
                              : cp == '\t' ? "\\t" : NULL;
        if (short_esc) {
            jj_buf_adds(b, short_esc);
        } else if (cp < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", cp);
            jj_buf_adds(b, esc);
        } else if (ascii && cp >= 0x7f) { /* UTF-16 units, as hf's makeAsciiSafe */
            if (cp >= 0x10000) {
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + ((cp - 0x10000) >> 10),
                         0xdc00 + ((cp - 0x10000) & 0x3ff));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
            jj_buf_adds(b, esc);
        } else {
            jj_buf_add(b, s + i, len);
        }
    }
    jj_buf_addc(b, '"');
}

static void json_pad(jj_buf *b, int indent, int depth) {
    jj_buf_addc(b, '\n');
    for (int i = 0; i < indent * depth; i++) jj_buf_addc(b, ' ');
}

typedef struct key_ref {
    const char *key;
    size_t len, i;
} key_ref;

/* byte order over all len bytes (a key may hold \u0000), a prefix first */
static int key_cmp(const void *x, const void *y) {
    const key_ref *a = x, *b = y;
    int c = memcmp(a->key, b->key, a->len < b->len ? a->len : b->len);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

/* The lists and dicts being serialised, innermost first: a value met again inside itself is a
 * cycle (`{% set ns.a = ns %}`), which JSON cannot write (JavaScript: "Converting circular
 * structure to JSON"); one deeper than JJ_MAX_VALUE_DEPTH is refused before the C stack ends. */
typedef struct json_up {
    const void *id; /* the dict's map, the list's items */
    const struct json_up *up;
} json_up;

static void to_json(jj_fail_ctx *f, jj_buf *b, const jj_value *v, const jj_json_opts *o, int depth,
                    const json_up *up);

static void json_object(jj_fail_ctx *f, jj_buf *b, const jj_map *m, const jj_json_opts *o,
                        int depth, const json_up *up, const char *isep, const char *ksep) {
    size_t n = m->n;
    key_ref *order = jj_alloc(b->a, (n ? n : 1) * sizeof *order);
    for (size_t i = 0; i < n; i++) order[i] = (key_ref){m->keys[i], m->klen[i], i};
    if (o->sort_keys) qsort(order, n, sizeof *order, key_cmp); /* byte order (hf: localeCompare) */
    jj_buf_addc(b, '{');
    for (size_t j = 0; j < n; j++) {
        size_t i = order[j].i;
        if (j) jj_buf_adds(b, isep);
        if (o->indent) json_pad(b, o->indent, depth + 1);
        json_string(b, m->keys[i], m->klen[i], o->ensure_ascii);
        jj_buf_adds(b, ksep);
        to_json(f, b, m->vals[i], o, depth + 1, up);
    }
    if (o->indent && n) json_pad(b, o->indent, depth);
    jj_buf_addc(b, '}');
}

static void json_array(jj_fail_ctx *f, jj_buf *b, const jj_value *v, const jj_json_opts *o,
                       int depth, const json_up *up, const char *isep) {
    jj_buf_addc(b, '[');
    for (size_t i = 0; i < v->n; i++) {
        if (i) jj_buf_adds(b, isep);
        if (o->indent) json_pad(b, o->indent, depth + 1);
        to_json(f, b, v->items[i], o, depth + 1, up);
    }
    if (o->indent && v->n) json_pad(b, o->indent, depth);
    jj_buf_addc(b, ']');
}

/* A list or dict entered: refused when it is one of its own ancestors, or too deep. */
static json_up enter_container(jj_fail_ctx *f, const void *id, int depth, const json_up *up) {
    for (const json_up *u = up; u && id; u = u->up)
        if (u->id == id)
            jj_fail(f, JINJA_ERUNTIME, 0, 0, "Converting circular structure to JSON: a value "
                    "that contains itself cannot be printed or serialised");
    if (depth >= JJ_MAX_VALUE_DEPTH)
        jj_fail(f, JINJA_ERUNTIME, 0, 0, "a value nested more than %d lists or dicts deep "
                "cannot be printed or serialised", JJ_MAX_VALUE_DEPTH);
    return (json_up){id, up};
}

static void to_json(jj_fail_ctx *f, jj_buf *b, const jj_value *v, const jj_json_opts *o, int depth,
                    const json_up *up) {
    const char *isep = o->custom_sep ? o->item_sep : o->indent ? "," : ", ";
    const char *ksep = o->custom_sep ? o->key_sep : ": ";
    json_up here;
    switch (v->t) {
    case V_NULL: return jj_buf_adds(b, "null");
    case V_UNDEF: return jj_buf_adds(b, o->undef_null ? "null" : "undefined");
    case V_BOOL: return jj_buf_adds(b, v->b ? "true" : "false");
    case V_INT:
    case V_FLOAT:
        if (!isfinite(v->num)) return jj_buf_adds(b, "null");
        return jj_fmt_number(b, v->num);
    case V_STR: return json_string(b, v->s, v->n, o->ensure_ascii);
    case V_ARRAY:
        here = enter_container(f, v->n ? (const void *)v->items : NULL, depth, up);
        return json_array(f, b, v, o, depth, &here, isep);
    case V_OBJECT:
    case V_NS:
        here = enter_container(f, v->map, depth, up);
        return json_object(f, b, v->map, o, depth, &here, isep, ksep);
    default:
        jj_fail(f, JINJA_ERUNTIME, 0, 0, "Cannot convert to JSON: %s", jj_type_name(v->t));
    }
}

void jj_to_json(jj_fail_ctx *f, jj_buf *b, const jj_value *v, const jj_json_opts *o, int depth) {
    to_json(f, b, v, o, depth, NULL);
}

static const char *case_of(unsigned cp, int upper) {
    const jj_case *t = upper ? jj_case_upper : jj_case_lower;
    size_t lo = 0, hi = upper ? jj_case_upper_n : jj_case_lower_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t[mid].cp == cp) return t[mid].to;
        if (t[mid].cp < cp) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

jj_value *jj_case_map(jj_arena *a, const jj_value *s, int upper, size_t count) {
    jj_buf b;
    jj_buf_init(&b, a);
    jj_buf_add(&b, "", 0);
    size_t i = 0, len;
    for (size_t c = 0; i < s->n && c < count; i += len, c++) {
        unsigned cp = jj_utf8_decode(s->s + i, s->n - i, &len);
        const char *to = cp < 0x80 ? NULL : case_of(cp, upper);
        if (cp < 0x80) jj_buf_addc(&b, (char)(upper ? toupper((int)cp) : tolower((int)cp)));
        else if (to) jj_buf_adds(&b, to);
        else jj_buf_add(&b, s->s + i, len);
    }
    jj_buf_add(&b, s->s + i, s->n - i);
    jj_value *v = jj_new(a, V_STR);
    v->s = b.p ? b.p : "";
    v->n = b.n;
    return v;
}
