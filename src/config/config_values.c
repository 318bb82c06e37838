/* config_values.c — what the key table (config_table.c) drives alone: finding a key (and the
 * nearest one to a misspelt name), the defaults, converting and range-checking a value into its
 * field, formatting a value back, sizes and durations; the first set entry of a table of settings a
 * mode does not run with (config_first_pair). */
#include "config/config_table.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common.h"

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* a duration's units (docs/config.md "Durations"): index = tsr_dur_unit */
static const char *const dur_units[] = {"ba", "tok", "ep"};
_Static_assert(NELEM(dur_units) == TSR_DUR_COUNT, "dur_units vs tsr_dur_unit");

/* ---- lookup ---- */

const cfgtab_key *cfgtab_find(const char *name) {
    for (int i = 0; i < cfgtab_n_keys; i++)
        if (strcmp(cfgtab_keys[i].name, name) == 0) return &cfgtab_keys[i];
    return NULL;
}

int cfgtab_is_group(const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < cfgtab_n_keys; i++)
        if (strncmp(cfgtab_keys[i].name, name, n) == 0 && cfgtab_keys[i].name[n] == '.') return 1;
    return 0;
}

static size_t edit_distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b), row[128];
    if (na >= 127 || nb >= 127) return (size_t)-1;
    for (size_t j = 0; j <= nb; j++) row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb];
}

static const char *leaf(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot ? dot + 1 : name;
}

/* Candidates are the keys and the group names; a key whose last part equals the unknown name's
 * last part ("n_layer" for "model.n_layer") counts as distance 1. Close = within 2 edits, or a
 * third of the name's length. */
const char *cfgtab_suggest(const char *name) {
    static char group[64];
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (int i = 0; i < cfgtab_n_keys; i++) {
        const char *k = cfgtab_keys[i].name;
        size_t d = edit_distance(name, k);
        if (strcmp(leaf(name), leaf(k)) == 0 && d > 1) d = 1;
        if (d < best_d) best_d = d, best = k;
        const char *dot = strchr(k, '.');
        if (dot && (size_t)(dot - k) < sizeof group) {
            char g[64];
            memcpy(g, k, (size_t)(dot - k));
            g[dot - k] = '\0';
            d = edit_distance(name, g);
            if (d < best_d) {
                best_d = d;
                memcpy(group, g, sizeof g);
                best = group;
            }
        }
    }
    if (best && best_d > 0 && (best_d <= 2 || best_d * 3 <= strlen(name))) return best;
    return NULL;
}

/* ---- text values (--set, defaults) ---- */

/* Strips one pair of surrounding double quotes, undoing libconfig's escapes inside them. */
static int unquote(const char *s, char *out, size_t n) {
    size_t len = strlen(s), o = 0;
    if (len < 2 || s[0] != '"' || s[len - 1] != '"') {
        if (len >= n) return -1;
        memcpy(out, s, len + 1);
        return 0;
    }
    for (size_t i = 1; i + 1 < len; i++) {
        char c = s[i];
        if (c == '\\' && i + 2 < len) {
            c = s[++i];
            if (c == 'n') c = '\n';
            else if (c == 't') c = '\t';
            else if (c == 'r') c = '\r';
            else if (c == 'f') c = '\f';
            else if (c == 'x' && i + 3 < len && isxdigit((unsigned char)s[i + 1]) &&
                     isxdigit((unsigned char)s[i + 2])) {
                char hex[3] = {s[i + 1], s[i + 2], 0};
                c = (char)strtol(hex, NULL, 16);
                i += 2;
            }
        }
        if (o + 1 >= n) return -1;
        out[o++] = c;
    }
    out[o] = '\0';
    return 0;
}

/* Decimal integer, optionally with libconfig's L suffix. */
static int parse_int_text(const char *s, int64_t *out) {
    char *end;
    if (!(isdigit((unsigned char)s[0]) || ((s[0] == '-' || s[0] == '+') && isdigit((unsigned char)s[1]))))
        return -1;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE) return -1;
    if (*end == 'L') end++;
    if (*end != '\0') return -1;
    *out = (int64_t)v;
    return 0;
}

/* Decimal number: digits, '.', exponent; no hex, inf or nan. */
static int parse_double_text(const char *s, double *out) {
    char *end;
    if (s[0] == '\0' || strspn(s, "0123456789.eE+-") != strlen(s)) return -1;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* ---- assignment with type and range checks ---- */

static const char *range_text(const cfgtab_key *k, char *buf, size_t n) {
    if (k->type == CFGK_INT) {
        int64_t type_max = k->size == sizeof(int) ? INT_MAX : INT64_MAX;
        if (k->ihi < type_max)
            snprintf(buf, n, "[%lld, %lld]", (long long)k->ilo, (long long)k->ihi);
        else
            snprintf(buf, n, ">= %lld", (long long)k->ilo);
    } else {
        char lo[64], hi[64];
        cfgtab_format_double(lo, sizeof lo, k->lo);
        cfgtab_format_double(hi, sizeof hi, k->hi);
        if (isfinite(k->hi))
            snprintf(buf, n, "%c%s, %s%c", k->lo_open ? '(' : '[', lo, hi, k->hi_open ? ')' : ']');
        else
            snprintf(buf, n, "%s %s", k->lo_open ? ">" : ">=", lo);
    }
    return buf;
}

static const char *out_of_range(const cfgtab_key *k, char *why, size_t n) {
    char r[160];
    snprintf(why, n, "out of range, accepted %s%s%s%s", range_text(k, r, sizeof r),
             k->auto_word ? " or \"" : "", k->auto_word ? k->auto_word : "",
             k->auto_word ? "\"" : "");
    return why;
}

static const char *enum_accepted(const cfgtab_key *k, char *why, size_t n) {
    size_t o = (size_t)snprintf(why, n, "accepted:");
    for (int i = 0; i < k->n_names && o < n; i++)
        o += (size_t)snprintf(why + o, n - o, "%s %s", i ? " |" : "", k->names[i]);
    return why;
}

const char *cfgtab_accepted(const cfgtab_key *k, char *buf, size_t n) {
    size_t o = 0;
    switch (k->type) {
    case CFGK_INT:
        range_text(k, buf, n);
        if (k->auto_word) snprintf(buf + strlen(buf), n - strlen(buf), ", or `\"%s\"`", k->auto_word);
        return buf;
    case CFGK_FLOAT: return range_text(k, buf, n);
    case CFGK_BOOL: return "`true`, `false`";
    case CFGK_STRING:
        snprintf(buf, n, "%sat most %zu bytes", k->ilo > 0 ? "non-empty, " : "", k->size - 1);
        return buf;
    case CFGK_DURATION: return ">= 0, e.g. `100ba`, `2e9tok`, `1ep`";
    case CFGK_ENUM:
        buf[0] = '\0';
        for (int i = 0; i < k->n_names && o < n; i++)
            o += (size_t)snprintf(buf + o, n - o, "%s`%s`", i ? ", " : "", k->names[i]);
        return buf;
    case CFGK_TYPE_COUNT: break;
    }
    return "?";
}

#define DURATION_HINT "expected a duration like 100ba, 2e9tok or 1ep"

/* The assign_* steps of cfgtab_assign: each stores a value of its key type into field, or returns
 * why the value is refused (a literal, or why[n] filled). */

/* CFGK_INT: an integer in [ilo, ihi], or the key's auto word (stored as auto_as). str: the value when
 * it is a string. */
static const char *assign_int(const cfgtab_key *k, char *field, const cfgtab_value *v,
                              const char *str, char *why, size_t n) {
    char text[2048];
    int64_t x;
    if (k->auto_word && v->kind == CFGV_TEXT && unquote(v->s, text, sizeof text) == 0)
        str = text; /* --set micro_batch=auto or ="auto" */
    if (k->auto_word && str && strcmp(str, k->auto_word) == 0) {
        x = k->auto_as; /* decided at run time */
    } else {
        if (v->kind == CFGV_INT) {
            x = v->i;
        } else if (v->kind != CFGV_TEXT || parse_int_text(v->s, &x) != 0) {
            if (!k->auto_word) return "expected an integer";
            snprintf(why, n, "expected an integer or \"%s\"", k->auto_word);
            return why;
        }
        if (x < k->ilo || x > k->ihi) return out_of_range(k, why, n);
    }
    if (k->size == sizeof(int)) {
        int y = (int)x;
        memcpy(field, &y, sizeof y);
    } else {
        memcpy(field, &x, sizeof x);
    }
    return NULL;
}

/* CFGK_FLOAT: a finite number in the key's (open or closed) range. */
static const char *assign_float(const cfgtab_key *k, char *field, const cfgtab_value *v,
                                char *why, size_t n) {
    double x;
    if (v->kind == CFGV_INT) x = (double)v->i;
    else if (v->kind == CFGV_FLOAT) x = v->f;
    else if (v->kind != CFGV_TEXT || parse_double_text(v->s, &x) != 0) return "expected a number";
    if (!isfinite(x) || x < k->lo || x > k->hi || (k->lo_open && x == k->lo) ||
        (k->hi_open && x == k->hi))
        return out_of_range(k, why, n);
    memcpy(field, &x, sizeof x);
    return NULL;
}

/* CFGK_BOOL: a libconfig boolean, or true/false (any case) from --set. */
static const char *assign_bool(char *field, const cfgtab_value *v) {
    int b;
    if (v->kind == CFGV_BOOL) b = v->i != 0;
    else if (v->kind == CFGV_TEXT && strcasecmp(v->s, "true") == 0) b = 1;
    else if (v->kind == CFGV_TEXT && strcasecmp(v->s, "false") == 0) b = 0;
    else return "expected true or false";
    memcpy(field, &b, sizeof b);
    return NULL;
}

/* CFGK_STRING: fits the field, at least ilo characters. */
static const char *assign_string(const cfgtab_key *k, char *field, const char *str, char *why,
                                 size_t n) {
    if (!str) return "expected a string";
    size_t len = strlen(str);
    if (len >= k->size) {
        snprintf(why, n, "too long (%zu characters), at most %zu", len, k->size - 1);
        return why;
    }
    if ((int64_t)len < k->ilo) return "must not be empty";
    memcpy(field, str, len + 1);
    return NULL;
}

const char *cfgtab_assign(const cfgtab_key *k, tsr_config *cfg, const cfgtab_value *v, char *why,
                          size_t n) {
    char *field = (char *)cfg + k->offset;
    char text[2048];
    const char *str = NULL; /* string-like value, unquoted */
    if (v->kind == CFGV_STRING) str = v->s;
    if (v->kind == CFGV_TEXT && k->type != CFGK_INT && k->type != CFGK_FLOAT && k->type != CFGK_BOOL) {
        if (unquote(v->s, text, sizeof text) != 0) {
            snprintf(why, n, "too long, at most %zu characters", k->size ? k->size - 1 : 0);
            return why;
        }
        str = text;
    }
    switch (k->type) {
    case CFGK_INT: return assign_int(k, field, v, str, why, n);
    case CFGK_FLOAT: return assign_float(k, field, v, why, n);
    case CFGK_BOOL: return assign_bool(field, v);
    case CFGK_STRING: return assign_string(k, field, str, why, n);
    case CFGK_ENUM:
        for (int i = 0; str && i < k->n_names; i++)
            if (strcmp(str, k->names[i]) == 0) {
                memcpy(field, &i, sizeof i);
                return NULL;
            }
        return enum_accepted(k, why, n);
    case CFGK_DURATION: {
        tsr_duration d;
        memset(&d, 0, sizeof d); /* padding too: configs compare equal with memcmp */
        if (!str || duration_parse(str, &d) != 0) return DURATION_HINT;
        memcpy(field, &d, sizeof d);
        return NULL;
    }
    case CFGK_TYPE_COUNT: break;
    }
    return "internal error: unknown key type";
}

void cfgtab_defaults(tsr_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < cfgtab_n_keys; i++) {
        const cfgtab_key *k = &cfgtab_keys[i];
        if (!k->def) continue;
        cfgtab_value v = {.kind = CFGV_TEXT, .s = k->def};
        char why[256];
        const char *err = cfgtab_assign(k, cfg, &v, why, sizeof why);
        if (err) tsr_die(TSR_EXIT_INTERNAL, "config table: default of %s (%s): %s", k->name, k->def, err);
    }
}

const char *cfgtab_type_name(const cfgtab_key *k, char *buf, size_t n) {
    switch (k->type) {
    case CFGK_INT:
        if (!k->auto_word) return "integer";
        snprintf(buf, n, "integer or \"%s\"", k->auto_word);
        return buf;
    case CFGK_FLOAT: return "number";
    case CFGK_BOOL: return "boolean";
    case CFGK_STRING: return "string";
    case CFGK_DURATION: return "duration";
    case CFGK_ENUM: {
        size_t o = (size_t)snprintf(buf, n, "one of");
        for (int i = 0; i < k->n_names && o < n; i++)
            o += (size_t)snprintf(buf + o, n - o, "%s %s", i ? " |" : "", k->names[i]);
        return buf;
    }
    case CFGK_TYPE_COUNT: break;
    }
    return "?";
}

/* ---- formatting ---- */

void cfgtab_format_double(char *buf, size_t n, double v) {
    char tmp[64];
    tsr_fmt_shortest(tmp, sizeof tmp, v);
    /* Tidy the exponent: "2e+09" -> "2e9", "1e-08" -> "1e-8". */
    char *e = strchr(tmp, 'e');
    if (e) {
        char *p = e + 1, *q = e + 1;
        if (*p == '+') p++;
        else if (*p == '-') *q++ = *p++;
        while (*p == '0' && p[1]) p++;
        memmove(q, p, strlen(p) + 1);
    }
    /* Whole numbers below 1e6 without an exponent: "4800", not "4.8e3". */
    if (e && v == floor(v) && fabs(v) < 1e6) snprintf(tmp, sizeof tmp, "%.0f", v);
    snprintf(buf, n, "%s", tmp);
}

void cfgtab_quote(char *buf, size_t n, const char *s) {
    size_t o = 0;
    if (n < 3) {
        if (n) buf[0] = '\0';
        return;
    }
    buf[o++] = '"';
    for (; *s && o + 6 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') buf[o++] = '\\', buf[o++] = (char)c;
        else if (c == '\n') buf[o++] = '\\', buf[o++] = 'n';
        else if (c == '\t') buf[o++] = '\\', buf[o++] = 't';
        else if (c == '\r') buf[o++] = '\\', buf[o++] = 'r';
        else if (c == '\f') buf[o++] = '\\', buf[o++] = 'f';
        else if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
        else buf[o++] = (char)c;
    }
    buf[o++] = '"';
    buf[o] = '\0';
}

void cfgtab_print_string(FILE *f, const char *s) {
    char q[4 * 1024 + 8]; /* strings of the config are at most 1023 bytes, each at most 4 escaped */
    cfgtab_quote(q, sizeof q, s);
    fputs(q, f);
}

static void format_float_literal(char *buf, size_t n, double v) {
    cfgtab_format_double(buf, n, v);
    if (!strpbrk(buf, ".eEn")) strncat(buf, ".0", n - strlen(buf) - 1); /* libconfig float */
}

static void format_int_literal(char *buf, size_t n, int64_t x) {
    snprintf(buf, n, "%lld%s", (long long)x, (x > INT32_MAX || x < INT32_MIN) ? "L" : "");
}

void cfgtab_format(const cfgtab_key *k, const tsr_config *cfg, char *buf, size_t n) {
    const char *field = (const char *)cfg + k->offset;
    switch (k->type) {
    case CFGK_INT: {
        int64_t x;
        if (k->size == sizeof(int)) {
            int y;
            memcpy(&y, field, sizeof y);
            x = y;
        } else {
            memcpy(&x, field, sizeof x);
        }
        if (k->auto_word && x == k->auto_as) cfgtab_quote(buf, n, k->auto_word);
        else format_int_literal(buf, n, x);
        return;
    }
    case CFGK_FLOAT: {
        double x;
        memcpy(&x, field, sizeof x);
        format_float_literal(buf, n, x);
        return;
    }
    case CFGK_BOOL: {
        int b;
        memcpy(&b, field, sizeof b);
        snprintf(buf, n, "%s", b ? "true" : "false");
        return;
    }
    case CFGK_STRING: cfgtab_quote(buf, n, field); return;
    case CFGK_ENUM: {
        int i;
        memcpy(&i, field, sizeof i);
        cfgtab_quote(buf, n, i >= 0 && i < k->n_names ? k->names[i] : "?");
        return;
    }
    case CFGK_DURATION: {
        tsr_duration d;
        char tmp[96];
        memcpy(&d, field, sizeof d);
        duration_format(tmp, sizeof tmp, d);
        cfgtab_quote(buf, n, tmp);
        return;
    }
    case CFGK_TYPE_COUNT: break;
    }
    snprintf(buf, n, "?");
}

void cfgtab_format_value(const cfgtab_value *v, char *buf, size_t n) {
    switch (v->kind) {
    case CFGV_INT: format_int_literal(buf, n, v->i); return;
    case CFGV_FLOAT: format_float_literal(buf, n, v->f); return;
    case CFGV_BOOL: snprintf(buf, n, "%s", v->i ? "true" : "false"); return;
    case CFGV_STRING: cfgtab_quote(buf, n, v->s); return;
    case CFGV_TEXT: snprintf(buf, n, "%s", v->s); return;
    case CFGV_GROUP: snprintf(buf, n, "{ ... }"); return;
    case CFGV_LIST: snprintf(buf, n, "[ ... ]"); return;
    }
    snprintf(buf, n, "?");
}

/* ---- sizes ---- */

int size_parse(const char *s, uint64_t *out) {
    if (!s || !out || !(isdigit((unsigned char)s[0]) || s[0] == '.')) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v >= 0)) return -1;
    double mul = 1;
    const char *u = "KMGTP", *hit = *end ? strchr(u, toupper((unsigned char)*end)) : NULL;
    if (hit) {
        for (const char *q = u; q <= hit; q++) mul *= 1024;
        end++;
        if (*end == 'i') end++;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    double bytes = v * mul;
    if (bytes >= 18446744073709551615.0 || (!hit && bytes != floor(bytes))) return -1;
    *out = (uint64_t)bytes;
    return 0;
}

/* ---- durations ---- */

int duration_parse(const char *s, tsr_duration *out) {
    if (!s || !out) return -1;
    size_t len = strlen(s);
    for (int u = 0; u < TSR_DUR_COUNT; u++) {
        size_t ul = strlen(dur_units[u]);
        if (len <= ul || strcmp(s + len - ul, dur_units[u]) != 0) continue;
        char num[64];
        size_t nl = len - ul;
        if (nl >= sizeof num) return -1;
        memcpy(num, s, nl);
        num[nl] = '\0';
        /* digits first (no sign, space, hex, inf or nan), then what strtod reads as decimal */
        if (!(isdigit((unsigned char)num[0]) || num[0] == '.')) return -1;
        double v;
        if (parse_double_text(num, &v) != 0 || v < 0) return -1;
        if (u == TSR_DUR_BATCHES && (v != floor(v) || v > 9007199254740992.0)) return -1;
        out->value = v;
        out->unit = (tsr_dur_unit)u;
        return 0;
    }
    return -1;
}

int64_t decay_to_steps(const char *spec, int64_t total, int64_t global_batch, int64_t seq_len,
                       uint64_t samples_per_epoch) {
    tsr_duration d;
    double f;
    if (duration_parse(spec, &d) == 0)
        return duration_to_steps(d, global_batch, seq_len, samples_per_epoch);
    if (!spec || !(isdigit((unsigned char)spec[0]) || spec[0] == '.') ||
        parse_double_text(spec, &f) != 0 || !(f > 0 && f <= 1) || total < 0)
        return -1;
    int64_t n = llround(f * (double)total);
    return n > 0 ? n : 1;
}

void duration_format(char *buf, size_t n, tsr_duration d) {
    char num[64];
    if (d.unit == TSR_DUR_BATCHES && d.value == floor(d.value) && d.value < 1e18)
        snprintf(num, sizeof num, "%.0f", d.value);
    else
        cfgtab_format_double(num, sizeof num, d.value);
    snprintf(buf, n, "%s%s", num, (unsigned)d.unit < TSR_DUR_COUNT ? dur_units[d.unit] : "?");
}

/* ceil(x / div) for x >= 0; an x within 1e-9 (relative) of a whole number counts as that number,
 * so that 0.1ep of 1000 samples is 100 samples, not 100.00000000000001. */
static int64_t ceil_div(double x, double div) {
    double r = nearbyint(x);
    if (fabs(x - r) <= 1e-9 * fmax(1.0, fabs(x))) x = r;
    x = ceil(x);
    if (x < 9007199254740992.0 && div < 9007199254740992.0) {
        uint64_t a = (uint64_t)x, b = (uint64_t)div;
        return (int64_t)(a / b + (a % b != 0));
    }
    double q = ceil(x / div);
    return q >= 9.2e18 ? INT64_MAX : (int64_t)q;
}

/* Returns -1 when global_batch or seq_len is not positive. */
int64_t duration_to_steps(tsr_duration d, int64_t global_batch, int64_t seq_len,
                          uint64_t samples_per_epoch) {
    if (global_batch <= 0 || seq_len <= 0 || !(d.value >= 0)) return -1;
    switch (d.unit) {
    case TSR_DUR_BATCHES: return d.value >= 9.2e18 ? INT64_MAX : (int64_t)ceil(d.value);
    case TSR_DUR_TOKENS: return ceil_div(d.value, (double)global_batch * (double)seq_len);
    case TSR_DUR_EPOCHS: return ceil_div(d.value * (double)samples_per_epoch, (double)global_batch);
    case TSR_DUR_COUNT: break;
    }
    return -1;
}

const char *config_first_pair(const tsr_cfg_pair *pairs, size_t n, const char **value) {
    for (size_t k = 0; k < n; k++)
        if (pairs[k].bad) {
            *value = pairs[k].value;
            return pairs[k].key;
        }
    return NULL;
}
