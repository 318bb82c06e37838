/* config_load.c — config_load: defaults, then the libconfig file, then --set overrides, then a
 * model's own values (config_load_filled) or another config's (config_load_over), then the checks
 * across keys (config_checks.c). The keys themselves are in config_table.c; a model's derived
 * sizes in config_dims.c, the checks against the world size in config_world.c, docs/config.md in
 * config_doc.c.
 *
 * Every error is printed with tsr_error() naming file:line (or "--set ..."), the key, the value
 * and what is accepted; config_load reports every error it finds in the file before returning
 * TSR_EXIT_USAGE, so one edit-run cycle fixes them all.
 */
#include <libconfig.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "config/config_icl.h"
#include "config/config_load_int.h"
#include "config/config_mix.h"
#include "config/config_table.h"

/* ---- libconfig 1.5 integers ----
 * libconfig 1.5 stores an integer literal without an L suffix in 32 bits, silently wrapping
 * 3000000000 to -1294967296. We re-read such a literal from the source text and refuse a value that
 * changed. */

static char *read_text(const char *name) {
    FILE *f = fopen(name, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        if (cap >= (64u << 20)) { /* not a config file */
            free(buf);
            buf = NULL;
            break;
        }
        char *bigger = realloc(buf, 2 * cap + 1);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

static const char *source_text(load_ctx *c, const char *file) {
    if (c->text_name && strcmp(c->text_name, file) == 0) return c->text;
    free(c->text_name);
    free(c->text);
    c->text_name = strdup(file);
    /* an @include'd file's name is relative to the include directory, the config's own */
    if (strcmp(file, c->path) != 0 && file[0] != '/' && c->include_dir[0]) {
        char joined[2100];
        snprintf(joined, sizeof joined, "%s/%s", c->include_dir, file);
        c->text = read_text(joined);
    }
    if (!c->text) c->text = read_text(file);
    return c->text;
}

static int is_name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-' || ch == '*';
}

/* Nonzero when the literal of setting `name` at file:line does not read as `stored`; the literal
 * goes to lit. Zero also when the literal cannot be found (nothing to compare). */
static int int_literal_changed(load_ctx *c, const char *file, int line, const char *name,
                               int64_t stored, char *lit, size_t n) {
    const char *t = source_text(c, file);
    if (!t || line < 1) return 0;
    for (int l = 1; l < line && t; l++) {
        t = strchr(t, '\n');
        if (t) t++;
    }
    if (!t) return 0;
    size_t nl = strlen(name);
    const char *eol = strchr(t, '\n');
    for (const char *p = t; (p = strstr(p, name)) != NULL && (!eol || p < eol); p++) {
        if ((p > t && is_name_char(p[-1])) || is_name_char(p[nl])) continue;
        const char *q = p + nl;
        while (*q == ' ' || *q == '\t') q++;
        if (*q != '=' && *q != ':') continue;
        q++;
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
        size_t len = strspn(q, "+-0123456789abcdefABCDEFxX");
        if (len == 0 || len >= n) return 0;
        memcpy(lit, q, len);
        lit[len] = '\0';
        int hex = strstr(lit, "0x") || strstr(lit, "0X");
        errno = 0;
        char *end;
        long long v = hex ? (long long)strtoull(lit, &end, 16) : strtoll(lit, &end, 10);
        return errno == ERANGE || *end != '\0' || v != stored;
    }
    return 0;
}

/* ---- walking the file ---- */

static void setting_value(const config_setting_t *s, cfgtab_value *v) {
    memset(v, 0, sizeof *v);
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: v->kind = CFGV_INT, v->i = config_setting_get_int64(s); break;
    case CONFIG_TYPE_FLOAT: v->kind = CFGV_FLOAT, v->f = config_setting_get_float(s); break;
    case CONFIG_TYPE_BOOL: v->kind = CFGV_BOOL, v->i = config_setting_get_bool(s); break;
    case CONFIG_TYPE_STRING: v->kind = CFGV_STRING, v->s = config_setting_get_string(s); break;
    case CONFIG_TYPE_GROUP: v->kind = CFGV_GROUP; break;
    default: v->kind = CFGV_LIST; break;
    }
}

static void unknown_key(const char *prefix, const char *name) {
    const char *near = cfgtab_suggest(name);
    if (near)
        tsr_error("%sunknown key '%s' (did you mean '%s'?)", prefix, name, near);
    else
        tsr_error("%sunknown key '%s' (the keys are listed in docs/config.md)", prefix, name);
}

static void walk(load_ctx *c, const config_setting_t *grp, const char *group) {
    int n = config_setting_length(grp);
    for (int i = 0; i < n; i++) {
        const config_setting_t *s = config_setting_get_elem(grp, (unsigned)i);
        const char *name = config_setting_name(s);
        const char *file = config_setting_source_file(s) ? config_setting_source_file(s) : c->path;
        int line = config_setting_source_line(s);
        char full[256], at[1200], val[4200], why[256];
        snprintf(full, sizeof full, "%s%s%s", group ? group : "", group ? "." : "", name ? name : "?");
        snprintf(at, sizeof at, "%s:%d: ", file, line);
        cfgtab_value v;
        setting_value(s, &v);
        const cfgtab_key *k = cfgtab_find(full);
        if (!k && !strcmp(full, "icl_tasks")) {
            c->errors += cfgicl_parse(s, file, c->cfg);
            continue;
        }
        if (!k && (!strcmp(full, "data.mix") || !strcmp(full, "data.curriculum"))) {
            /* a curriculum after a refused mix would only repeat that error */
            if (full[5] == 'c' && c->mix_line && c->cfg->data.n_streams == 0) continue;
            c->errors += cfgmix_parse(s, full, file, c->cfg);
            if (!strcmp(full, "data.mix")) c->mix_line = line, c->mix_file = file;
            continue;
        }
        if (!k) {
            if (cfgtab_is_group(full)) { /* a group, or a group in one (optim.muon) */
                if (v.kind == CFGV_GROUP) {
                    walk(c, s, full);
                } else {
                    cfgtab_format_value(&v, val, sizeof val);
                    tsr_error("%s%s = %s: expected a group, e.g. %s = { ... };", at, full, val, full);
                    c->errors++;
                }
            } else {
                unknown_key(at, full);
                c->errors++;
            }
            continue;
        }
        char lit[64];
        c->present[key_index(k)] = 1;
        if (config_setting_type(s) == CONFIG_TYPE_INT &&
            int_literal_changed(c, file, line, name, v.i, lit, sizeof lit)) {
            tsr_error("%s%s = %s: libconfig reads an integer beyond 32 bits only with an L suffix: "
                      "write %sL", at, full, lit, lit);
            c->errors++;
            continue;
        }
        const char *err = cfgtab_assign(k, c->cfg, &v, why, sizeof why);
        if (err) {
            cfgtab_format_value(&v, val, sizeof val);
            tsr_error("%s%s = %s: %s", at, full, val, err);
            c->errors++;
            continue;
        }
        c->given[key_index(k)] = 1;
        c->line[key_index(k)] = line;
        c->file[key_index(k)] = file;
    }
}

static int read_file(load_ctx *c, config_t *lc) {
    const char *path = c->path;
    FILE *f = fopen(path, "r");
    struct stat st;
    if (!f || (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode))) {
        int err = f ? EISDIR : errno;
        if (f) fclose(f);
        tsr_error("%s: cannot read config: %s", path, strerror(err));
        return TSR_EXIT_USAGE;
    }
    fclose(f);
    snprintf(c->include_dir, sizeof c->include_dir, "%s", path);
    char *slash = strrchr(c->include_dir, '/');
    if (slash) *slash = '\0';
    else snprintf(c->include_dir, sizeof c->include_dir, ".");
    config_set_include_dir(lc, c->include_dir);
    if (!config_read_file(lc, path)) {
        const char *file = config_error_file(lc) ? config_error_file(lc) : path;
        const char *text = config_error_text(lc) ? config_error_text(lc) : "unknown error";
        if (config_error_type(lc) == CONFIG_ERR_FILE_IO)
            tsr_error("%s: cannot read config: %s", file, text);
        else if (strcmp(text, "syntax error") == 0)
            tsr_error("%s:%d: syntax error", file, config_error_line(lc));
        else
            tsr_error("%s:%d: syntax error: %s", file, config_error_line(lc), text);
        return TSR_EXIT_USAGE;
    }
    walk(c, config_root_setting(lc), NULL);
    return 0;
}

/* ---- --set ---- */

static void apply_set(load_ctx *c, const char *arg) {
    const char *eq = strchr(arg, '=');
    char key[256], why[256];
    if (!eq) {
        tsr_error("--set %s (expected key=value)", arg);
        c->errors++;
        return;
    }
    snprintf(key, sizeof key, "%.*s", (int)(eq - arg), arg);
    const cfgtab_key *k = cfgtab_find(key);
    if (!k && (!strcmp(key, "data.mix") || !strcmp(key, "data.curriculum") || !strcmp(key, "icl_tasks"))) {
        tsr_error("--set %.500s: %s is a list: write it in the config file (docs/config.md)", arg, key);
        c->errors++;
        return;
    }
    if (!k) {
        char at[600];
        snprintf(at, sizeof at, "--set %.500s: ", arg);
        if (cfgtab_is_group(key))
            tsr_error("%s'%s' is a group: set its keys one by one, e.g. --set %s.<key>=value", at,
                      key, key);
        else
            unknown_key(at, key);
        c->errors++;
        return;
    }
    cfgtab_value v = {.kind = CFGV_TEXT, .s = eq + 1};
    c->present[key_index(k)] = 1;
    const char *err = cfgtab_assign(k, c->cfg, &v, why, sizeof why);
    if (err) {
        tsr_error("--set %s: %s", arg, err);
        c->errors++;
        return;
    }
    c->given[key_index(k)] = 1;
    c->line[key_index(k)] = -1;
    c->file[key_index(k)] = NULL;
    c->set_arg[key_index(k)] = arg;
}

int config_check_set(const char *key, const char *value, char *why, size_t n) {
    const cfgtab_key *k = cfgtab_find(key);
    if (!k) {
        snprintf(why, n, "no such key");
        return -1;
    }
    tsr_config *scratch = tsr_calloc(1, sizeof *scratch);
    cfgtab_value v = {.kind = CFGV_TEXT, .s = value};
    const char *err = cfgtab_assign(k, scratch, &v, why, n);
    if (err && err != why) snprintf(why, n, "%s", err);
    free(scratch);
    return err ? -1 : 0;
}

static void check_required(load_ctx *c) {
    for (int i = 0; i < cfgtab_n_keys; i++) {
        const cfgtab_key *k = &cfgtab_keys[i];
        if (k->def || c->present[i]) continue; /* invalid values were reported already */
        if (!strcmp(k->name, "data.train") && c->mix_line) continue; /* data.mix replaces it */
        char tbuf[128], ex[512];
        const char *type = cfgtab_type_name(k, tbuf, sizeof tbuf), *dot = strchr(k->name, '.');
        if (!c->path)
            snprintf(ex, sizeof ex, "--set %s=%s", k->name, k->example);
        else if (dot)
            snprintf(ex, sizeof ex, "%.*s = { %s = %s; };", (int)(dot - k->name), k->name, dot + 1,
                     k->example);
        else
            snprintf(ex, sizeof ex, "%s = %s;", k->name, k->example);
        tsr_error("%s%smissing required key '%s' (%s, e.g. %s)", c->path ? c->path : "",
                  c->path ? ": " : "", k->name, type, ex);
        c->errors++;
    }
}

/* ---- values a model's own files state (config_load_filled) ---- */

/* A size the model config derives when it is 0 (model.n_kv_head 0 = n_head ...): its resolved
 * value in *v, or 0 when key is not one of them or the config does not resolve. */
static int resolved_size(const tsr_model_config *m, const char *key, long *v) {
    tsr_model_dims d;
    const char *bad;
    char why[256];
    if (config_model_dims(m, &d, &bad, why, sizeof why) != 0) return 0;
    if (!strcmp(key, "model.n_kv_head")) *v = d.KVH;
    else if (!strcmp(key, "model.head_dim")) *v = d.hs;
    else if (!strcmp(key, "model.intermediate_size")) *v = d.F;
    else if (!strcmp(key, "model.moe_intermediate_size")) *v = d.FE;
    else return 0;
    return 1;
}

/* model.layer_types and model.no_rope_layers by what they make of each of a's layers, not as
 * text: spaces after the commas, a pattern and the whole list it repeats into are the same */
static int same_layer_kinds(const tsr_model_config *a, const tsr_model_config *b) {
    for (int l = 0; l < a->n_layer; l++)
        if ((config_layer_window(a, l) > 0) != (config_layer_window(b, l) > 0) ||
            config_layer_linear(a, l) != config_layer_linear(b, l) ||
            config_layer_rope(a, l) != config_layer_rope(b, l))
            return 0;
    return 1;
}

/* Does the recipe's value of k (in c->cfg) equal the fill's (in mine, the recipe's config with
 * every fill value assigned)? Floats within 1e-6 relative (a float32 written to JSON); derived
 * sizes resolved. */
static int same_value(const load_ctx *c, const cfgtab_key *k, const tsr_config *mine) {
    long a, b;
    if (resolved_size(&c->cfg->model, k->name, &a) && resolved_size(&mine->model, k->name, &b))
        return a == b;
    if (!strcmp(k->name, "model.layer_types") || !strcmp(k->name, "model.no_rope_layers"))
        return same_layer_kinds(&c->cfg->model, &mine->model);
    if (k->type == CFGK_FLOAT) {
        double x = *(const double *)((const char *)c->cfg + k->offset);
        double y = *(const double *)((const char *)mine + k->offset);
        return fabs(x - y) <= 1e-6 * fabs(y);
    }
    return memcmp((const char *)c->cfg + k->offset, (const char *)mine + k->offset, k->size) == 0;
}

/* A disagreement of the recipe's key k with fill entry e, appended to list. */
static void add_disagreement(const load_ctx *c, const cfgtab_key *k, const char *from,
                             const char *value, char *list, size_t cap) {
    char val[256], at[1200];
    size_t used = strlen(list);
    cfgtab_format(k, c->cfg, val, sizeof val);
    if (used + 1 < cap)
        snprintf(list + used, cap - used, "\n  %s%s = %s, but %s: --set %s=%s",
                 cfgload_where(c, k->name, at, sizeof at), k->name, val, from, k->name, value);
}

/* The model config.json describes (mine: the recipe with every fill value) against the rules
 * across its sizes (config_model_dims): key/value heads that do not divide the heads, an odd head
 * size under RoPE, a top-k above the experts, value heads of the linear layers that are no
 * multiple of their key heads... When the rule it breaks names a key the fill gave, no model has
 * that: the source's fault (exit 2, as a value out of range), said naming its key and value.
 * Returns 1 when refused. */
static int fill_dims_refused(const tsr_config_fill *f, const tsr_config *mine) {
    tsr_model_dims d;
    const char *key = NULL;
    char why[400];
    if (config_model_dims(&mine->model, &d, &key, why, sizeof why) == 0) return 0;
    for (int j = 0; j < f->n; j++)
        if (!strcmp(f->kv[j].key, key)) {
            tsr_error("%s: %s (%s = %s): no model has that: %s", f->source, f->kv[j].from,
                      f->kv[j].key, f->kv[j].value, why);
            return 1;
        }
    return 0; /* a key the recipe gave: the recipe's fault, which the checks report */
}

/* The fill's values for the keys the recipe left out; every hard one it sets otherwise is listed
 * in one error (compared once all are filled, so that sizes resolve against the final model).
 * Returns the number of values no model has (the source's fault: exit 2, docs/hf.md). */
static int apply_fill(load_ctx *c) {
    const tsr_config_fill *f = c->fill;
    tsr_config *mine = tsr_malloc(sizeof *mine); /* the recipe with every fill value */
    char why[256], *list = tsr_calloc(1, 16384);
    int differ = 0, bad = 0;
    *mine = *c->cfg;
    for (int j = 0; j < f->n; j++) {
        const cfgtab_key *k = cfgtab_find(f->kv[j].key);
        cfgtab_value v = {.kind = CFGV_TEXT, .s = f->kv[j].value};
        const char *err = k ? cfgtab_assign(k, mine, &v, why, sizeof why) : "no such key";
        if (err) { /* a value no model has: the source's fault */
            tsr_error("%s: %s gives %s = %s: %s", f->source, f->kv[j].from, f->kv[j].key,
                      f->kv[j].value, err);
            c->errors++, bad++;
        } else if (!c->given[key_index(k)]) {
            int i = key_index(k);
            cfgtab_assign(k, c->cfg, &v, why, sizeof why);
            c->present[i] = 1;
            c->line[i] = -2;
            c->file[i] = f->source;
        }
    }
    if (!c->errors && fill_dims_refused(f, mine)) c->errors++, bad++;
    for (int j = 0; j < f->n && !c->errors; j++) {
        const cfgtab_key *k = cfgtab_find(f->kv[j].key);
        if (f->kv[j].soft || c->line[key_index(k)] == -2 || !c->given[key_index(k)]) continue;
        if (!same_value(c, k, mine)) {
            differ++;
            add_disagreement(c, k, f->kv[j].from, f->kv[j].value, list, 16384);
        }
    }
    for (int i = 0; i < cfgtab_n_keys; i++)
        if (c->line[i] == -2) c->given[i] = 1;
    if (differ) {
        tsr_error("%s describes the model, and the recipe sets %d key%s otherwise (leave the "
                  "model.* keys out of the recipe to take them from it, or start from weights of "
                  "the recipe's shape):%s", f->source, differ, differ > 1 ? "s" : "", list);
        c->errors++;
    }
    free(list);
    free(mine);
    return bad;
}

/* ---- public ---- */

/* config_load and its two variants: fill (a model's values) or base (the start instead of the
 * defaults) may be given. */
static int load(tsr_config *cfg, const char *path, const char *const *sets, int n_sets,
                const tsr_config_fill *fill, const tsr_config *base) {
    load_ctx c;
    config_t lc;
    memset(&c, 0, sizeof c);
    if (cfgtab_n_keys > MAX_KEYS) tsr_die(TSR_EXIT_INTERNAL, "config: raise MAX_KEYS to %d", cfgtab_n_keys);
    if (base) *cfg = *base;
    else cfgtab_defaults(cfg);
    c.cfg = cfg;
    c.path = path;
    c.fill = fill;
    c.over = base != NULL;
    if (c.over) memset(c.present, 1, sizeof c.present);
    if (path && tsr_snprintf(cfg->source, sizeof cfg->source, "%s", path) != 0) {
        tsr_error("%.200s...: cannot read config: path longer than %zu bytes", path,
                  sizeof cfg->source - 1);
        return TSR_EXIT_USAGE;
    }
    config_init(&lc);
    int rc = path ? read_file(&c, &lc) : 0;
    if (rc == 0) {
        for (int i = 0; i < n_sets; i++) apply_set(&c, sets[i]);
        const int bad_fill = fill && c.errors == 0 ? apply_fill(&c) : 0;
        if (!bad_fill) check_required(&c); /* (a key the bad value left unset is no more news) */
        if (c.errors == 0) cfgload_validate(&c);
        rc = bad_fill ? TSR_EXIT_DATA : c.errors ? TSR_EXIT_USAGE : 0;
    }
    config_destroy(&lc);
    free(c.text_name);
    free(c.text);
    return rc;
}

int config_load(tsr_config *cfg, const char *path, const char *const *sets, int n_sets) {
    return load(cfg, path, sets, n_sets, NULL, NULL);
}

int config_load_filled(tsr_config *cfg, const char *path, const char *const *sets, int n_sets,
                       const tsr_config_fill *fill) {
    return load(cfg, path, sets, n_sets, fill, NULL);
}

/* A key under one of the prefixes fixed[] with another value than base's: reported. */
static int pinned_differs(const cfgtab_key *k, const tsr_config *cfg, const tsr_config *base,
                          const char *path, const char *base_name, const char *const *fixed,
                          int n_fixed) {
    int pinned = 0;
    for (int j = 0; j < n_fixed; j++) pinned |= !strncmp(k->name, fixed[j], strlen(fixed[j]));
    char mine[256], theirs[256];
    cfgtab_format(k, cfg, mine, sizeof mine);
    cfgtab_format(k, base, theirs, sizeof theirs);
    if (!pinned || !strcmp(mine, theirs)) return 0;
    tsr_error("%s: %s = %s, but it comes from %s, which has %s: leave it out", path ? path : "--set",
              k->name, mine, base_name, theirs);
    return 1;
}

int config_load_over(tsr_config *cfg, const char *path, const char *const *sets, int n_sets,
                     const tsr_config *base, const char *base_name, const char *const *fixed,
                     int n_fixed) {
    int rc = load(cfg, path, sets, n_sets, NULL, base), bad = 0;
    for (int i = 0; !rc && i < cfgtab_n_keys; i++)
        bad += pinned_differs(&cfgtab_keys[i], cfg, base, path, base_name, fixed, n_fixed);
    return rc ? rc : bad ? TSR_EXIT_USAGE : 0;
}
