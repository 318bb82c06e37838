/* chat_render.c — a conversation through its model's chat template, with the assistant turns
 * located in the output (chat_render.h, docs/prep.md "Chat templates"). */
#include "chat/chat_render.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "why.h"

enum { MARK_CAP = 48 };

/* The answer of an assistant content: what follows its last "</think>", or all of it. */
static const char *answer_of(const char *content) {
    const char *a = content;
    for (const char *p = content; (p = strstr(p, "</think>")); p += 8) a = p + 8;
    return a;
}

/* a message whose content is trained on: role "assistant", content a string whose answer has
 * something besides white space (an empty one, beside tool_calls, has nothing to train, and a
 * marker there would flip the template's `if message.content`) */
static int is_assistant(const json_value *m) {
    const json_value *r = json_get(m, "role"), *c = json_get(m, "content");
    if (m->type != JSON_OBJECT || !r || r->type != JSON_STRING || strcmp(r->str, "assistant") ||
        !c || c->type != JSON_STRING)
        return 0;
    for (const char *p = answer_of(c->str); *p; p++)
        if (!strchr(" \t\r\n", *p)) return 1;
    return 0;
}

/* The marker that stands for assistant turn i's content. Reasoning before a "</think>" stays in
 * front of it, so that templates that split it off (Qwen 3) render the same text around the
 * marker as around the answer: the reasoning is then template text, not a target. */
static char *marker_for(const json_value *content, size_t i, char mark[MARK_CAP], size_t *len) {
    snprintf(mark, MARK_CAP, "@@tessera-assistant-turn-%zu@@", i);
    size_t keep = (size_t)(answer_of(content->str) - content->str), m = strlen(mark);
    char *s = tsr_malloc(keep + m + 1);
    memcpy(s, content->str, keep);
    memcpy(s + keep, mark, m + 1);
    *len = keep + m;
    return s;
}

/* A shallow copy of the object obj (nodes[*k], then its members) with every member named key
 * replaced by repl (keeping the member's key). The copy's own `next` is left NULL. */
static json_value *copy_replacing(const json_value *obj, const char *key, const json_value *repl,
                                  json_value *nodes, size_t *k) {
    json_value *o = &nodes[(*k)++], *last = NULL;
    *o = *obj;
    o->child = o->next = NULL;
    for (const json_value *m = obj->child; m; m = m->next) {
        json_value *c = &nodes[(*k)++];
        *c = *m;
        if (json_key_is(m, key)) {
            *c = *repl;
            c->key = m->key;
            c->key_len = m->key_len;
        }
        c->next = NULL;
        if (last) last->next = c;
        else o->child = c;
        last = c;
    }
    return o;
}

/* The conversation with assistant turn i's content replaced by a string holding the marker
 * marks[i] (marker_for): nodes are allocated in *nodes, the strings in *strs, the markers in
 * *marks; *n_assist turns, the i-th being messages[at[i]] (*at). The caller frees all four. */
static const json_value *marked_conversation(const json_value *conv, const json_value *msgs,
                                             json_value **nodes, char ***strs,
                                             char (**marks)[MARK_CAP], size_t **at,
                                             size_t *n_assist) {
    size_t count = 2 + conv->len, k = 0, i = 0, idx = 0;
    for (const json_value *m = msgs->child; m; m = m->next) count += 1 + (is_assistant(m) ? m->len : 0);
    *nodes = tsr_calloc(count, sizeof **nodes);
    *strs = tsr_calloc(msgs->len + 1, sizeof **strs);
    *marks = tsr_calloc(msgs->len + 1, sizeof **marks);
    *at = tsr_calloc(msgs->len + 1, sizeof **at);
    json_value *arr = &(*nodes)[k++], *last = NULL;
    *arr = *msgs;
    arr->child = arr->next = NULL;
    for (const json_value *m = msgs->child; m; m = m->next, idx++) {
        json_value *c;
        if (is_assistant(m)) {
            json_value s = {.type = JSON_STRING};
            s.str = (*strs)[i] = marker_for(json_get(m, "content"), i, (*marks)[i], &s.len);
            c = copy_replacing(m, "content", &s, *nodes, &k);
            (*at)[i++] = idx;
        } else {
            c = &(*nodes)[k++];
            *c = *m;
            c->next = NULL;
        }
        if (last) last->next = c;
        else arr->child = c;
        last = c;
    }
    *n_assist = i;
    return copy_replacing(conv, "messages", arr, *nodes, &k);
}

static int render(const chat_config *cc, const json_value *conv, char **out, size_t *n, char *why,
                  size_t cap) {
    const json_value *ctx[2] = {cc->vars, conv};
    const jinja_overrides ov = {.nmessages = -1, .add_generation_prompt = 0};
    jinja_error e;
    if (jinja_render_ex(cc->tpl, ctx, 2, &ov, out, n, &e) == JINJA_OK) return 0;
    if (e.line) tsr_why(-1, why, cap, "chat template, line %d:%d: %s", e.line, e.col, e.msg);
    else tsr_why(-1, why, cap, "chat template: %s", e.msg);
    return e.status;
}

/* Splits the marked render into the template's own pieces between the markers: seg[0..k]. */
static int split_marked(const char *marked, size_t mn, char (*marks)[MARK_CAP], const size_t *at,
                        size_t k, chat_span *seg, char *why, size_t cap) {
    size_t start = 0;
    for (size_t i = 0; i < k; i++) {
        const char *p = strstr(marked + start, marks[i]);
        if (!p)
            return tsr_why(-1, why, cap,
                           "the chat template leaves out or rewrites the content of "
                           "messages[%zu] (an assistant turn): its loss mask cannot be placed",
                           at[i]);
        size_t mlen = strlen(marks[i]);
        if (strstr(p + mlen, marks[i]))
            return tsr_why(-1, why, cap,
                           "the chat template prints the content of messages[%zu] twice: "
                           "its loss mask cannot be placed", at[i]);
        seg[i] = (chat_span){start, (size_t)(p - marked) - start};
        start = (size_t)(p - marked) + mlen;
    }
    seg[k] = (chat_span){start, mn - start};
    return 0;
}

/* Places the pieces seg[0..k] of the marked render in the full render, in order; what lies
 * between them is each assistant turn's content. */
static int place_spans(const char *full, size_t n, const char *marked, const chat_span *seg,
                       const size_t *at, size_t k, chat_span *spans, char *why, size_t cap) {
    if (seg[0].len > n || memcmp(full, marked + seg[0].off, seg[0].len))
        return tsr_why(-1, why, cap,
                       "the chat template renders the text before messages[%zu] "
                       "differently when its content changes: its loss mask cannot be placed",
                       at[0]);
    size_t pos = seg[0].len;
    for (size_t i = 0; i < k; i++) {
        const chat_span *s = &seg[i + 1];
        const char *q;
        if (i + 1 == k) {
            q = s->len <= n - pos && !memcmp(full + n - s->len, marked + s->off, s->len)
                    ? full + n - s->len : NULL;
        } else {
            q = s->len ? memmem(full + pos, n - pos, marked + s->off, s->len) : NULL;
        }
        if (!q)
            return tsr_why(-1, why, cap,
                           "the chat template renders the text after messages[%zu] "
                           "differently when its content changes: its loss mask cannot be placed",
                           at[i]);
        spans[i] = (chat_span){pos, (size_t)(q - full) - pos};
        pos = (size_t)(q - full) + s->len;
    }
    return 0;
}

int chat_render_turns(const chat_config *cc, const json_value *conv, chat_render *out, char *why,
                     size_t why_cap) {
    memset(out, 0, sizeof *out);
    const json_value *msgs = json_get(conv, "messages");
    if (!msgs || msgs->type != JSON_ARRAY || msgs->len == 0)
        return tsr_why(-1, why, why_cap,
                       "field \"messages\" must be a non-empty array of {\"role\", "
                       "\"content\"}");
    int st = render(cc, conv, &out->text, &out->len, why, why_cap);
    if (st) return st;
    json_value *nodes;
    char **strs, (*marks)[MARK_CAP];
    size_t *at, k, mn;
    char *marked = NULL;
    const json_value *mconv = marked_conversation(conv, msgs, &nodes, &strs, &marks, &at, &k);
    chat_span *seg = tsr_calloc(k + 1, sizeof *seg);
    out->spans = tsr_calloc(k + 1, sizeof *out->spans);
    out->n_spans = k;
    int rc = k ? render(cc, mconv, &marked, &mn, why, why_cap) : 0;
    if (!rc && k) rc = split_marked(marked, mn, marks, at, k, seg, why, why_cap);
    if (!rc && k) rc = place_spans(out->text, out->len, marked, seg, at, k, out->spans, why, why_cap);
    free(marked);
    free(seg);
    free(nodes);
    for (size_t i = 0; i < k; i++) free(strs[i]);
    free(strs);
    free(marks);
    free(at);
    if (rc) chat_render_free(out);
    return rc;
}

void chat_render_free(chat_render *r) {
    free(r->text);
    free(r->spans);
    memset(r, 0, sizeof *r);
}
