/* gen_chat.c — the chat template and end-of-turn ids of `tessera generate --chat` (gen_chat.h). */
#include "chat/gen_chat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "fsutil.h"
#include "json.h"
#include "chat/chat_render.h"

enum { CONV_NODES = 2 + 3 * 3 }; /* the object, "messages", three messages of two members */

/* NAME of "NAME=JSON": a Jinja identifier, not one generate sets, not given before. */
static int check_var_name(const gen_chat_vars *v, const char *spec, size_t n, char *why,
                          size_t cap) {
    int ok = n > 0 && n < GEN_CHAT_VAR_NAME && !(spec[0] >= '0' && spec[0] <= '9');
    for (size_t i = 0; i < n; i++)
        ok &= (spec[i] >= 'a' && spec[i] <= 'z') || (spec[i] >= 'A' && spec[i] <= 'Z') ||
              (spec[i] >= '0' && spec[i] <= '9') || spec[i] == '_';
    if (!ok) {
        snprintf(why, cap, "--template-var %s: '%.*s' is not a name (letters, digits and _, not "
                 "starting with a digit, at most %d)", spec, (int)n, spec, GEN_CHAT_VAR_NAME - 1);
        return -1;
    }
    static const char *const own[] = {"messages", "add_generation_prompt"};
    for (int k = 0; k < 2; k++)
        if (strlen(own[k]) == n && !strncmp(spec, own[k], n)) {
            snprintf(why, cap, "--template-var %s: generate sets it (--prompt, --system: "
                     "messages; add_generation_prompt is true)", spec);
            return -1;
        }
    for (int k = 0; k < v->n; k++)
        if (v->member[k].key_len == n && !strncmp(v->member[k].key, spec, n)) {
            snprintf(why, cap, "--template-var %.*s: given twice", (int)n, spec);
            return -1;
        }
    return 0;
}

int gen_chat_var_add(gen_chat_vars *v, const char *spec, char *why, size_t cap) {
    const char *eq = strchr(spec, '=');
    if (!eq) {
        snprintf(why, cap, "--template-var wants NAME=JSON (e.g. enable_thinking=false), got '%s'",
                 spec);
        return -1;
    }
    if (check_var_name(v, spec, (size_t)(eq - spec), why, cap)) return -1;
    if (v->n == GEN_CHAT_MAX_VARS) {
        snprintf(why, cap, "--template-var %s: more than %d --template-var", spec,
                 GEN_CHAT_MAX_VARS);
        return -1;
    }
    json_doc *d = &v->doc[v->n];
    json_doc_init(d);
    json_value *root;
    json_error je;
    if (json_parse(d, eq + 1, strlen(eq + 1), &root, &je)) {
        json_doc_free(d);
        snprintf(why, cap, "--template-var %s: the value is not JSON (byte %zu: %s): write false, "
                 "3, \"text\" (quoted for the shell: '\"text\"'), [...] or {...}", spec, je.pos,
                 je.msg);
        return -1;
    }
    json_value *m = &v->member[v->n];
    *m = *root;
    m->key_len = (size_t)(eq - spec);
    memcpy(v->name[v->n], spec, m->key_len);
    v->name[v->n][m->key_len] = '\0';
    m->key = v->name[v->n];
    m->next = NULL;
    if (v->n) v->member[v->n - 1].next = m;
    v->n++;
    return 0;
}

void gen_chat_vars_free(gen_chat_vars *v) {
    for (int k = 0; k < v->n; k++) json_doc_free(&v->doc[k]);
    v->n = 0;
}

int gen_chat_open(gen_chat *gc, const char *spec, const tsr_tokenizer *tok, int chat,
                  const gen_chat_vars *vars, const jinja_budget *budget) {
    memset(gc, 0, sizeof *gc);
    gc->vars = vars;
    if (!tokenizer_is_hf(tok) || chat_config_find(spec, gc->path, sizeof gc->path) != 1) return 0;
    jinja_error e;
    if (chat_config_load(gc->path, &gc->cc, &e)) {
        const char *syn = e.status == JINJA_ESYNTAX ? " (the chat_template's syntax)" : "";
        if (chat) {
            tsr_error("generate: %s%s", e.msg, syn);
            return TSR_EXIT_DATA;
        }
        /* a plain completion needs no template: its end-of-text id falls back (open_tokenizer) */
        tsr_warn("generate: %s%s: ignored without --chat (no eos_token from it either)", e.msg,
                 syn);
        return 0;
    }
    gc->loaded = 1;
    if (gc->cc.tpl) jinja_set_budget(gc->cc.tpl, budget);
    return 0;
}

void gen_chat_free(gen_chat *gc) {
    if (gc->loaded) chat_config_free(&gc->cc);
    gc->loaded = 0;
}

uint32_t gen_chat_eos_id(const gen_chat *gc, const tsr_tokenizer *tok) {
    const char *eos = gc->loaded ? chat_config_token(&gc->cc, "eos_token") : NULL;
    return eos ? tokenizer_special_id(tok, eos) : UINT32_MAX;
}

/* v becomes a string member key: s (the next sibling is set by the caller). */
static json_value *string_member(json_value *v, const char *key, const char *s) {
    *v = (json_value){.type = JSON_STRING, .str = s, .len = strlen(s), .key = key,
                      .key_len = strlen(key)};
    return v;
}

/* {"messages": [{"role": roles[i], "content": contents[i]} for i < n], vars...} built in nodes
 * (CONV_NODES), pointing at the caller's strings and at vars (NULL: none). */
static const json_value *conversation(json_value *nodes, const char *const *roles,
                                      const char *const *contents, int n,
                                      const gen_chat_vars *vars) {
    json_value *conv = &nodes[0], *msgs = &nodes[1], *prev = NULL;
    const int nv = vars ? vars->n : 0;
    *conv = (json_value){.type = JSON_OBJECT, .len = 1 + (size_t)nv, .child = msgs};
    *msgs = (json_value){.type = JSON_ARRAY, .len = (size_t)n, .key = "messages", .key_len = 8,
                         /* the renderer only reads the context: vars stay as they are */
                         .next = nv ? (json_value *)&vars->member[0] : NULL};
    for (int i = 0; i < n; i++) {
        json_value *m = &nodes[2 + 3 * i];
        *m = (json_value){.type = JSON_OBJECT, .len = 2, .child = m + 1};
        string_member(m + 1, "role", roles[i])->next = string_member(m + 2, "content", contents[i]);
        if (prev) prev->next = m;
        else msgs->child = m;
        prev = m;
    }
    return conv;
}

/* [system?, user] (+ an assistant reply when reply is not NULL) in nodes, with gc's variables. */
static const json_value *chat_turns(const gen_chat *gc, json_value *nodes, const char *system,
                                    const char *user, const char *reply) {
    const char *roles[3], *contents[3];
    int n = 0;
    if (system) roles[n] = "system", contents[n++] = system;
    roles[n] = "user", contents[n++] = user;
    if (reply) roles[n] = "assistant", contents[n++] = reply;
    return conversation(nodes, roles, contents, n, gc->vars);
}

/* conv through the chat_template with the generation prompt into *text (0), or the refusal */
static int render_conv(const gen_chat *gc, const char *spec, const json_value *conv, char **text,
                       size_t *n) {
    if (!gc->loaded || !gc->cc.tpl) {
        char where[sizeof gc->path + 64];
        if (!gc->path[0]) snprintf(where, sizeof where, "it is not a tokenizer.json");
        else snprintf(where, sizeof where, "%s %s", gc->path,
                      gc->loaded ? "has none, nor is a chat_template.jinja beside it" : "does not exist");
        tsr_error("generate: --chat: the tokenizer %s has no chat_template (%s): --chat needs a "
                  "Hugging Face tokenizer.json whose tokenizer_config.json beside it has one, or a "
                  "chat_template.jinja beside that file; leave --chat out to complete the prompt "
                  "as plain text", spec, where);
        return TSR_EXIT_USAGE;
    }
    const json_value *ctx[2] = {gc->cc.vars, conv};
    const jinja_overrides ov = {.nmessages = -1, .add_generation_prompt = 1};
    jinja_error e;
    if (jinja_render_ex(gc->cc.tpl, ctx, 2, &ov, text, n, &e) == JINJA_OK) return 0;
    if (e.status == JINJA_EBUDGET) {
        tsr_error("generate: --chat: the chat template of %s, line %d:%d: %s (%s)", gc->cc.source,
                  e.line, e.col, e.msg, CHAT_BUDGET_HINT);
        return TSR_EXIT_DATA;
    }
    if (e.line)
        tsr_error("generate: --chat: the chat template of %s, line %d:%d: %s", gc->cc.source, e.line,
                  e.col, e.msg);
    else
        tsr_error("generate: --chat: the chat template of %s: %s", gc->cc.source, e.msg);
    return TSR_EXIT_USAGE;
}

int gen_chat_render(const gen_chat *gc, const char *spec, const char *system, const char *user,
                    char **text, size_t *n) {
    json_value nodes[CONV_NODES];
    return render_conv(gc, spec, chat_turns(gc, nodes, system, user, NULL), text, n);
}

int gen_chat_render_messages(const gen_chat *gc, const char *spec, const json_value *messages,
                             char **text, size_t *n) {
    const int nv = gc->vars ? gc->vars->n : 0;
    json_value msgs = *messages;
    msgs.key = "messages", msgs.key_len = 8;
    msgs.next = nv ? (json_value *)&gc->vars->member[0] : NULL;
    const json_value conv = {.type = JSON_OBJECT, .len = 1 + (size_t)nv, .child = &msgs};
    return render_conv(gc, spec, &conv, text, n);
}

uint32_t gen_chat_end_of_turn(const gen_chat *gc, const tsr_tokenizer *tok, const char *system,
                              const char *user) {
    if (!gc->loaded || !gc->cc.tpl) return UINT32_MAX;
    json_value nodes[CONV_NODES];
    chat_render r;
    char why[256];
    if (chat_render_turns(&gc->cc, chat_turns(gc, nodes, system, user, "OK"), &r, why, sizeof why))
        return UINT32_MAX;
    if (r.n_spans != 1) { /* the template hides the reply: no end of turn to learn from it */
        chat_render_free(&r);
        return UINT32_MAX;
    }
    const char *after = r.text + r.spans[0].off + r.spans[0].len, *end = r.text + r.len;
    while (after < end && strchr(" \t\r\n", *after)) after++;
    uint32_t *ids = NULL, id = UINT32_MAX;
    size_t nids = 0, cap = 0;
    tokenizer_encode(tok, (const uint8_t *)after, (size_t)(end - after), 1, &ids, &nids, &cap);
    uint32_t len = 0;
    const uint8_t *b = nids ? tokenizer_token_bytes(tok, ids[0], &len) : NULL;
    if (b) {
        char *name = tsr_malloc((size_t)len + 1);
        memcpy(name, b, len);
        name[len] = '\0';
        if (tokenizer_special_id(tok, name) == ids[0]) id = ids[0];
        free(name);
    }
    free(ids);
    chat_render_free(&r);
    return id;
}

/* The added token that ends text (n bytes; white space after it skipped), else UINT32_MAX */
static uint32_t last_special(const tsr_tokenizer *tok, const char *text, size_t n) {
    while (n && strchr(" \t\r\n", text[n - 1])) n--;
    uint32_t *ids = NULL, id = UINT32_MAX, len = 0;
    size_t nids = 0, cap = 0;
    tokenizer_encode(tok, (const uint8_t *)text, n, 1, &ids, &nids, &cap);
    const uint8_t *b = nids ? tokenizer_token_bytes(tok, ids[nids - 1], &len) : NULL;
    if (b) {
        char *name = tsr_malloc((size_t)len + 1);
        memcpy(name, b, len);
        name[len] = '\0';
        if (tokenizer_special_id(tok, name) == ids[nids - 1]) id = ids[nids - 1];
        free(name);
    }
    free(ids);
    return id;
}

uint32_t gen_chat_tool_call_end(const gen_chat *gc, const tsr_tokenizer *tok) {
    static const char conv[] =
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", "
        "\"content\": \"\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": "
        "\"tsr_probe_fn\", \"arguments\": {\"tsr_probe_arg\": 1}}}]}]}";
    if (!gc->loaded || !gc->cc.tpl) return UINT32_MAX;
    json_doc d;
    json_value *root = NULL;
    json_error err;
    uint32_t id = UINT32_MAX;
    json_doc_init(&d);
    if (json_parse(&d, conv, sizeof conv - 1, &root, &err) == 0) {
        const json_value *ctx[2] = {gc->cc.vars, root};
        const jinja_overrides ov = {.nmessages = -1, .add_generation_prompt = 0};
        char *text = NULL;
        size_t n = 0;
        jinja_error e; /* a template that refuses tool calls has no such end */
        /* the end after the call's arguments: a template that drops tool calls has none */
        const char *at = NULL;
        if (jinja_render_ex(gc->cc.tpl, ctx, 2, &ov, &text, &n, &e) == JINJA_OK)
            for (const char *p = text; (p = strstr(p, "tsr_probe_arg")); p++) at = p;
        if (at) id = last_special(tok, at, n - (size_t)(at - text));
        free(text);
    }
    json_doc_free(&d);
    return id;
}

/* One eos_token_id entry: a non-negative integer. */
static int id_of(const json_value *v, int64_t *out) {
    if (v->type != JSON_NUMBER || v->num < 0 || v->num > INT32_MAX || v->num != floor(v->num))
        return -1;
    *out = (int64_t)v->num;
    return 0;
}

int gen_chat_generation_eos(const gen_chat *gc, int64_t *ids, int cap, int *n) {
    char path[sizeof gc->path + 32];
    const char *slash = strrchr(gc->path, '/');
    int dir = slash ? (int)(slash - gc->path) : 1;
    snprintf(path, sizeof path, "%.*s/generation_config.json", dir, slash ? gc->path : ".");
    struct stat st;
    if (!gc->path[0] || stat(path, &st) != 0) return 0;
    char *text;
    size_t len;
    TSR_CHECK(fs_read_all(path, GEN_CONFIG_MAX, &text, &len));
    json_doc doc;
    json_doc_init(&doc);
    json_value *root;
    json_error je;
    int rc = 0;
    if (json_parse(&doc, text, len, &root, &je)) {
        tsr_error("generate: %s: byte %zu: %s", path, je.pos, je.msg);
        rc = TSR_EXIT_DATA;
    }
    const json_value *e = rc ? NULL : json_get(root, "eos_token_id");
    if (e && e->type != JSON_NULL) {
        const json_value *one = e->type == JSON_ARRAY ? e->child : e;
        for (; one && !rc; one = e->type == JSON_ARRAY ? one->next : NULL) {
            int64_t id;
            if (id_of(one, &id)) {
                tsr_error("generate: %s: eos_token_id: expected a token id (an integer >= 0) or a "
                          "list of them, found a %s", path, json_type_name(one->type));
                rc = TSR_EXIT_DATA;
            } else if (*n < cap) {
                ids[(*n)++] = id;
            }
        }
    }
    json_doc_free(&doc);
    free(text);
    return rc;
}
