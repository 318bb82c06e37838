/* prep_doc.c — one `tessera prep` item to tokens and a loss mask (see prep_doc.h, docs/prep.md).
 *
 * Documents are [BOS] segments [EOS]. Each segment (a text, a prompt, a response, a chat header
 * "ROLE: ", a turn's content, its "\n") is tokenized on its own, so a segment boundary is always a
 * token boundary and a mask byte never straddles two segments.
 */
#include "prep/prep_doc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* Appends the tokens of text (mask m) to the item. */
static void put_text(const prep_doc_rules *r, prep_item *it, const char *s, size_t n, uint8_t m) {
    size_t before = it->n;
    tokenizer_encode(r->tok, (const uint8_t *)s, n, 0, &it->tok, &it->n, &it->cap);
    if (it->mask_cap < it->cap) {
        uint8_t *nm = realloc(it->mask, it->cap);
        if (!nm) tsr_die(TSR_EXIT_INTERNAL, "prep: out of memory (%zu mask bytes)", it->cap);
        it->mask = nm;
        it->mask_cap = it->cap;
    }
    memset(it->mask + before, m, it->n - before);
}

static void put_id(prep_item *it, uint32_t id, uint8_t m) {
    if (it->n == it->cap) {
        it->cap = it->cap ? 2 * it->cap : 256;
        uint32_t *nt = realloc(it->tok, it->cap * sizeof *nt);
        if (!nt) tsr_die(TSR_EXIT_INTERNAL, "prep: out of memory (%zu tokens)", it->cap);
        it->tok = nt;
    }
    if (it->mask_cap < it->cap) {
        uint8_t *nm = realloc(it->mask, it->cap);
        if (!nm) tsr_die(TSR_EXIT_INTERNAL, "prep: out of memory (%zu mask bytes)", it->cap);
        it->mask = nm;
        it->mask_cap = it->cap;
    }
    it->tok[it->n] = id;
    it->mask[it->n++] = m;
}

static int bad(prep_item *it, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(prep_item *it, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->err, sizeof it->err, fmt, ap);
    va_end(ap);
    it->status = ITEM_BAD;
    return -1;
}

/* "a number", "an array", "null", ... for messages. */
static const char *what(json_type t) {
    switch (t) {
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "an array";
    case JSON_OBJECT: return "an object";
    default: return json_type_name(t);
    }
}

/* A string member of obj, or a reason in it->err. */
static const json_value *get_str(prep_item *it, const json_value *obj, const char *key) {
    const json_value *v = json_get(obj, key);
    if (!v) {
        bad(it, "missing field \"%s\"", key);
        return NULL;
    }
    if (v->type != JSON_STRING) {
        bad(it, "field \"%s\" is %s, expected a string", key, what(v->type));
        return NULL;
    }
    return v;
}

void prep_tokenize(const prep_doc_rules *r, prep_format kind, const char *s, prep_item *it,
                   json_doc *jd) {
    uint8_t tp = (uint8_t)r->target_prompts;
    it->n = 0;
    it->status = ITEM_OK;
    if (kind == FMT_TEXT) {
        if (it->len == 0) {
            it->status = ITEM_EMPTY;
            return;
        }
        if (r->bos) put_id(it, r->eos, 1);
        put_text(r, it, s, it->len, 1);
        if (!r->no_eos) put_id(it, r->eos, 1);
        return;
    }
    json_value *root;
    json_error err;
    if (json_parse(jd, s, it->len, &root, &err) != 0) {
        bad(it, "invalid JSON at column %zu: %s", err.pos + 1, err.msg);
        return;
    }
    if (root->type != JSON_OBJECT) {
        bad(it, "expected a JSON object, found %s", what(root->type));
        return;
    }
    if (kind == FMT_JSONL) {
        const json_value *t = get_str(it, root, "text");
        if (!t) return;
        if (t->len == 0) {
            it->status = ITEM_EMPTY;
            return;
        }
        if (r->bos) put_id(it, r->eos, 1);
        put_text(r, it, t->str, t->len, 1);
        if (!r->no_eos) put_id(it, r->eos, 1);
        return;
    }
    if (kind == FMT_SFT) {
        /* "completion" is accepted in place of "response" */
        const json_value *prompt = get_str(it, root, "prompt"), *resp;
        if (!prompt) return;
        resp = json_get(root, "response") || !json_get(root, "completion")
                   ? get_str(it, root, "response") : get_str(it, root, "completion");
        if (!resp) return;
        if (r->bos) put_id(it, r->eos, tp);
        put_text(r, it, prompt->str, prompt->len, tp);
        put_text(r, it, resp->str, resp->len, 1);
        if (!r->no_eos) put_id(it, r->eos, 1);
        return;
    }
    /* chat */
    const json_value *msgs = json_get(root, "messages");
    if (!msgs) {
        bad(it, "missing field \"messages\"");
        return;
    }
    if (msgs->type != JSON_ARRAY || msgs->len == 0) {
        bad(it, "field \"messages\" must be a non-empty array of {\"role\", \"content\"}");
        return;
    }
    int k = 0, last_assistant = 0;
    for (const json_value *m = msgs->child; m; m = m->next, k++) {
        if (m->type != JSON_OBJECT) {
            bad(it, "messages[%d] is %s, expected an object", k, what(m->type));
            return;
        }
        const json_value *role = get_str(it, m, "role"), *content;
        if (!role || !(content = get_str(it, m, "content"))) {
            char why[sizeof it->err];
            snprintf(why, sizeof why, "%s", it->err);
            bad(it, "messages[%d]: %s", k, why);
            return;
        }
        last_assistant = strcmp(role->str, "assistant") == 0;
        if (k == 0 && r->bos) put_id(it, r->eos, tp);
        char small[128], *head = role->len + 3 <= sizeof small ? small : tsr_malloc(role->len + 3);
        memcpy(head, role->str, role->len);
        memcpy(head + role->len, ": ", 3);
        put_text(r, it, head, role->len + 2, tp); /* the header "ROLE: " is never a target */
        if (head != small) free(head);
        uint8_t m_content = (uint8_t)(last_assistant || tp);
        put_text(r, it, content->str, content->len, m_content);
        put_text(r, it, "\n", 1, m_content);
    }
    if (!r->no_eos) put_id(it, r->eos, (uint8_t)(last_assistant || tp));
}
