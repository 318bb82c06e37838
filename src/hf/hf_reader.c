/* hf_reader.c — the one reader of a Hugging Face config.json (hf_reader.h). */
#include "hf/hf_reader.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

void hfr_fault(hf_reader *c, int rc, const char *fmt, ...) {
    if (c->rc) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tsr_error("%s: %s", c->path, msg);
    c->rc = rc;
}

const json_value *hfr_member(const json_value *obj, const char *key) {
    return obj && obj->type == JSON_OBJECT ? json_get(obj, key) : NULL;
}

/* A value of another type than expected (what): a fault naming the key and the value. */
static void wrong_type(hf_reader *c, const char *key, const json_value *v, const char *what) {
    char got[96];
    hfr_fault(c, TSR_EXIT_DATA, "%s = %s, expected %s", key, json_describe(v, got, sizeof got), what);
}

long hfr_int(hf_reader *c, const json_value *obj, const char *key, long def) {
    const json_value *v = hfr_member(obj, key);
    if (!v || v->type == JSON_NULL) return def;
    if (v->type != JSON_NUMBER || v->num != floor(v->num) || fabs(v->num) > 1e15) {
        wrong_type(c, key, v, "an integer");
        return def;
    }
    return (long)v->num;
}

double hfr_num(hf_reader *c, const json_value *obj, const char *key, double def) {
    const json_value *v = hfr_member(obj, key);
    if (!v) return def;
    if (v->type != JSON_NUMBER) {
        wrong_type(c, key, v, "a number");
        return def;
    }
    return v->num;
}

int hfr_bool(hf_reader *c, const json_value *obj, const char *key, int def) {
    const json_value *v = hfr_member(obj, key);
    if (!v) return def;
    if (v->type != JSON_TRUE && v->type != JSON_FALSE) {
        wrong_type(c, key, v, "true or false");
        return def;
    }
    return v->type == JSON_TRUE;
}

const char *hfr_str(hf_reader *c, const json_value *obj, const char *key, const char *def) {
    const json_value *v = hfr_member(obj, key);
    if (!v) return def;
    if (v->type == JSON_NULL) return "";
    if (v->type != JSON_STRING) {
        wrong_type(c, key, v, "a string");
        return def;
    }
    return v->str;
}

/* ---- checking ---- */

/* exit 1 naming both and the --set that makes the run fit, or exit 2 when the file's value is
 * none the key accepts (vocab_size = -5 is a damaged file, not a suggestion). */
void hfr_same(hf_reader *c, const char *key, long hf, const char *run_key, long run, const char *note) {
    char val[32], why[256] = "integers >= 1: a size or count";
    if (hf == run) return;
    snprintf(val, sizeof val, "%ld", hf);
    if (hf < 1 || config_check_set(run_key, val, why, sizeof why) != 0)
        hfr_fault(c, TSR_EXIT_DATA, "%s = %ld: no model has that (%s accepts %s): a damaged "
                  "config.json, or not one of this family", key, hf, run_key, why);
    else
        hfr_fault(c, TSR_EXIT_USAGE, "%s = %ld, but this run has %s = %ld%s: the weights do not fit "
                  "the run's model; set --set %s=%ld (or start from weights of the run's shape)", key,
                  hf, run_key, run, note, run_key, hf);
}

void hfr_same_num(hf_reader *c, const char *key, double hf, const char *run_key, double run) {
    char h[32], r[32];
    if (!c->rc && !(fabs(hf - run) <= 1e-6 * fabs(run)))
        hfr_fault(c, TSR_EXIT_USAGE, "%s = %s, but this run has %s = %s: set --set %s=%s", key,
                  hfr_double(h, sizeof h, hf), run_key, hfr_double(r, sizeof r, run), run_key, h);
}

void hfr_same_bool(hf_reader *c, const char *key, int hf, const char *run_key, int run) {
    if (hf != run)
        hfr_fault(c, TSR_EXIT_USAGE, "%s = %s, but this run has %s = %s: set --set %s=%s", key,
                  hf ? "true" : "false", run_key, run ? "true" : "false", run_key,
                  hf ? "true" : "false");
}

/* ---- filling ---- */

void hfr_put(hf_reader *c, int soft, const char *run_key, const char *value, const char *from) {
    tsr_config_fill *f = c->fill;
    if (f->n == TSR_FILL_MAX) tsr_die(TSR_EXIT_INTERNAL, "hf_config_fill: raise TSR_FILL_MAX");
    snprintf(f->kv[f->n].key, sizeof f->kv[0].key, "%s", run_key);
    snprintf(f->kv[f->n].value, sizeof f->kv[0].value, "%s", value);
    snprintf(f->kv[f->n].from, sizeof f->kv[0].from, "config.json has %.79s", from);
    f->kv[f->n++].soft = soft;
}

void hfr_put_key(hf_reader *c, int soft, const char *run_key, const json_value *obj,
                 const char *hf_key, const char *value) {
    char from[96];
    if (hfr_member(obj, hf_key)) snprintf(from, sizeof from, "%s = %s", hf_key, value);
    else snprintf(from, sizeof from, "no %s (transformers' default: %s)", hf_key, value);
    hfr_put(c, soft, run_key, value, from);
}

/* (tessera reads 0 of some of these keys as "derived": model.n_kv_head, head_dim,
 * intermediate_size, which config.json's 0 is not) */
void hfr_put_int(hf_reader *c, int soft, const char *run_key, const char *hf_key, long def) {
    char v[32];
    long x = hfr_int(c, c->root, hf_key, def);
    if (x < 1) hfr_fault(c, TSR_EXIT_DATA, "%s = %ld: expected an integer >= 1 (a size or count)",
                         hf_key, x);
    snprintf(v, sizeof v, "%ld", x);
    hfr_put_key(c, soft, run_key, c->root, hf_key, v);
}

void hfr_put_layers(hf_reader *c, const char *run_key, const char *hf_key, long def) {
    hfr_put_int(c, 0, run_key, hf_key, def); /* (below 1: its fault) */
    long L = hfr_int(c, c->root, hf_key, def);
    if (L > HF_MAX_LAYERS)
        hfr_fault(c, TSR_EXIT_DATA, "%s = %ld: expected 1 to %d", hf_key, L, HF_MAX_LAYERS);
}

void hfr_put_num(hf_reader *c, const char *run_key, const json_value *obj, const char *hf_key,
                 double def) {
    char v[32];
    hfr_put_key(c, 0, run_key, obj, hf_key, hfr_double(v, sizeof v, hfr_num(c, obj, hf_key, def)));
}

void hfr_put_bool(hf_reader *c, const char *run_key, const char *hf_key, int def) {
    hfr_put_key(c, 0, run_key, c->root, hf_key, hfr_bool(c, c->root, hf_key, def) ? "true" : "false");
}

void hfr_put_word(hf_reader *c, const char *run_key, const char *word, const char *model_type,
                  const char *what) {
    char from[96];
    snprintf(from, sizeof from, "model_type \"%s\" (%s)", model_type, what);
    hfr_put(c, 0, run_key, word, from);
}

/* ---- writing ---- */

void hfr_add(hf_text *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s + b->n, sizeof b->s - b->n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof b->s - b->n) b->overflow = 1;
    else b->n += (size_t)k;
}

const char *hfr_double(char *buf, size_t cap, double v) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".en")) { /* "500000" -> "500000.0" (no 'n': inf and nan never get here) */
        size_t n = strlen(buf);
        if (n + 3 <= cap) memcpy(buf + n, ".0", 3);
    }
    return buf;
}
