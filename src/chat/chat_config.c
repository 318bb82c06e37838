/* chat_config.c — tokenizer_config.json -> compiled chat template + special-token variables
 * (chat_config.h). The variables are json_value nodes built in place, pointing at strings of
 * the parsed file, so they live as long as the chat_config. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chat/chat_config.h"
#include "config/config.h"
#include "fsutil.h"

static const char *const special[CHAT_SPECIAL_TOKENS] = {
    "bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"};

static int fail(jinja_error *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(jinja_error *err, int status, const char *fmt, ...) {
    va_list ap;
    err->status = status;
    err->line = err->col = 0;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return status;
}

/* the template source: a string, or the "default" of a list of named templates */
static const json_value *template_of(const json_value *cfg) {
    const json_value *t = json_get(cfg, "chat_template");
    if (!t || t->type != JSON_ARRAY) return t;
    for (const json_value *c = t->child; c; c = c->next) {
        const json_value *name = json_get(c, "name");
        if (name && name->type == JSON_STRING && !strcmp(name->str, "default"))
            return json_get(c, "template");
    }
    return NULL;
}

/* {"bos_token": "...", ...} from the special tokens given as strings or {"content": "..."} */
static void build_vars(chat_config *cc, const json_value *cfg) {
    json_value *obj = &cc->nodes[0], *last = NULL;
    memset(cc->nodes, 0, sizeof cc->nodes);
    obj->type = JSON_OBJECT;
    for (int i = 0; i < CHAT_SPECIAL_TOKENS; i++) {
        const json_value *t = json_get(cfg, special[i]);
        if (t && t->type == JSON_OBJECT) t = json_get(t, "content");
        if (!t || t->type != JSON_STRING) continue;
        json_value *m = &cc->nodes[1 + obj->len];
        *m = *t;
        m->key = special[i];
        m->key_len = strlen(special[i]);
        m->next = NULL;
        if (last) last->next = m;
        else obj->child = m;
        last = m;
        obj->len++;
    }
    cc->vars = obj;
}

const char *chat_config_token(const chat_config *cc, const char *name) {
    const json_value *v = json_get(cc->vars, name);
    return v && v->type == JSON_STRING ? v->str : NULL;
}

/* Compiles n bytes of template source read from `from` into cc->tpl, an error naming the file
 * (and, for the config's, the key). */
static int compile(chat_config *cc, const char *src, size_t n, const char *from, const char *key,
                   jinja_error *err) {
    int rc = jinja_compile(src, n, &cc->tpl, err);
    if (rc != JINJA_OK) {
        char m[sizeof err->msg], at[48] = "";
        snprintf(m, sizeof m, "%s", err->msg);
        if (err->line) snprintf(at, sizeof at, ", line %d:%d", err->line, err->col);
        snprintf(err->msg, sizeof err->msg, "%.100s%s%s: %.120s", from, key, at, m);
        return rc;
    }
    snprintf(cc->source, sizeof cc->source, "%s", from);
    return JINJA_OK;
}

/* The template: chat_template.jinja beside path when there is one (transformers' precedence:
 * the file over the config's key), else the config's chat_template src (may be NULL). */
static int load_template(chat_config *cc, const char *path, const json_value *src,
                         jinja_error *err) {
    char file[sizeof cc->source];
    size_t n = 0;
    int has = chat_config_template_file(path, file, sizeof file);
    if (has < 0) return fail(err, JINJA_ECONTEXT, "%.200s: its directory's path is too long", path);
    if (has) {
        if (fs_read_all(file, CHAT_TEMPLATE_MAX, &cc->jinja, &n))
            return fail(err, JINJA_ECONTEXT, "%.200s: cannot read it (above; at most %d bytes)",
                        file, CHAT_TEMPLATE_MAX);
        return compile(cc, cc->jinja, n, file, "", err);
    }
    if (src && src->type == JSON_STRING) return compile(cc, src->str, src->len, path, ": chat_template", err);
    return JINJA_OK;
}

int chat_config_load(const char *path, chat_config *cc, jinja_error *err) {
    memset(cc, 0, sizeof *cc);
    size_t n = 0;
    if (fs_read_all(path, CHAT_CONFIG_MAX, &cc->text, &n))
        return fail(err, JINJA_ECONTEXT, "%s: cannot read it (above)", path);
    json_doc_init(&cc->doc);
    json_value *cfg;
    json_error je;
    int rc = JINJA_OK;
    const json_value *src = NULL;
    if (json_parse(&cc->doc, cc->text, n, &cfg, &je))
        rc = fail(err, JINJA_ECONTEXT, "%s: byte %zu: %s", path, je.pos, je.msg);
    else if (cfg->type != JSON_OBJECT)
        rc = fail(err, JINJA_ECONTEXT, "%s: is %s, expected a JSON object", path,
                  json_type_name(cfg->type));
    else if ((src = template_of(cfg)) && src->type != JSON_STRING && src->type != JSON_NULL)
        rc = fail(err, JINJA_ECONTEXT, "%s: chat_template is %s, expected a string or a list of "
                  "{\"name\", \"template\"} with a \"default\"", path, json_type_name(src->type));
    if (rc == JINJA_OK) rc = load_template(cc, path, src, err);
    if (rc != JINJA_OK) {
        chat_config_free(cc);
        return rc;
    }
    build_vars(cc, cfg);
    return JINJA_OK;
}

void chat_config_free(chat_config *cc) {
    jinja_free(cc->tpl);
    json_doc_free(&cc->doc);
    free(cc->text);
    free(cc->jinja);
    memset(cc, 0, sizeof *cc);
}

int chat_config_template_file(const char *config_path, char *buf, size_t cap) {
    struct stat st;
    const char *slash = strrchr(config_path, '/');
    int dir = slash ? (int)(slash - config_path) : 1;
    int n = snprintf(buf, cap, "%.*s/chat_template.jinja", dir, slash ? config_path : ".");
    if (n < 0 || (size_t)n >= cap) return -1;
    return stat(buf, &st) == 0 && S_ISREG(st.st_mode);
}

int chat_config_find(const char *tokenizer_spec, char *buf, size_t cap) {
    struct stat st;
    int n;
    if (stat(tokenizer_spec, &st) == 0 && S_ISDIR(st.st_mode)) {
        n = snprintf(buf, cap, "%s/tokenizer_config.json", tokenizer_spec);
    } else {
        const char *slash = strrchr(tokenizer_spec, '/');
        int dir = slash ? (int)(slash - tokenizer_spec) : 1;
        n = snprintf(buf, cap, "%.*s/tokenizer_config.json", dir, slash ? tokenizer_spec : ".");
    }
    if (n < 0 || (size_t)n >= cap) return -1;
    return stat(buf, &st) == 0 && S_ISREG(st.st_mode);
}

int chat_budget_option(const cli_cmd *c, int ch, const char *val, jinja_budget *b) {
    if (ch == CHAT_OPT_STEPS) {
        int64_t n;
        int rc = cli_number(c, ch, val, 1000, INT64_C(1) << 50, &n);
        if (!rc) b->steps = (unsigned long long)n;
        return rc;
    }
    if (ch != CHAT_OPT_MEMORY) return 1;
    uint64_t n;
    if (size_parse(val, &n) != 0 || n < (1u << 20) || n > (UINT64_C(1) << 40))
        return cli_usage_error(c, "--template-memory: expected a size from 1M to 1T (e.g. 512M), "
                               "found ", val);
    b->bytes = n;
    return 0;
}
