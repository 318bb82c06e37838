/* prep_doc.c — one `tessera prep` item to tokens and a loss mask (see prep_doc.h, docs/prep.md).
 *
 * Documents are [BOS] segments [EOS]. Each segment (a text, a prompt, a response, a chat header
 * "ROLE: ", a turn's content, its "\n") is tokenized on its own, so a segment boundary is always a
 * token boundary and a mask byte never straddles two segments.
 */
#include "prep/prep_doc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "chat/chat_render.h"

/* put_text's `special` for the rest of a text cut at tokenizer_stream_cut (a streamed document's
 * later part): plain text, not a text's start (tokenizer_encode_continued) */
#define TEXT_CONTINUED 2

/* Appends the tokens of text (mask m) to the item; special: 1 when special tokens in the text are
 * recognised (a chat template's output), 0 when they are plain text (the user's data), or
 * TEXT_CONTINUED. */
static void put_text(const prep_doc_rules *r, prep_item *it, const char *s, size_t n, uint8_t m,
                     int special) {
    size_t before = it->n;
    const uint8_t *u = (const uint8_t *)s;
    if (special == TEXT_CONTINUED)
        tokenizer_encode_continued(r->tok, u, n, &it->tok, &it->n, &it->cap);
    else
        tokenizer_encode(r->tok, u, n, special, &it->tok, &it->n, &it->cap);
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

/* 1 when id is a special (added) token: its text names it back. */
static int is_special(const tsr_tokenizer *tok, uint32_t id) {
    uint8_t text[256];
    size_t n = tokenizer_decode(tok, &id, 1, text, sizeof text - 1);
    if (n >= sizeof text) return 0; /* also (size_t)-1: an id out of range */
    text[n] = 0;
    return tokenizer_special_id(tok, (const char *)text) == id;
}

/* Bytes of each token of it->tok[from..] in order (decoded one by one), into *len (malloc'd).
 * Returns the sum, or (size_t)-1 when a token does not decode. */
static size_t token_bytes(const tsr_tokenizer *tok, const prep_item *it, size_t from, size_t **len) {
    size_t total = 0;
    uint8_t buf[64];
    *len = tsr_malloc((it->n - from + 1) * sizeof **len);
    for (size_t k = from; k < it->n; k++) {
        size_t n = tokenizer_decode(tok, &it->tok[k], 1, buf, sizeof buf);
        if (n == (size_t)-1) return n;
        (*len)[k - from] = n;
        total += n;
    }
    return total;
}

/* A conversation through the model's chat template (chat/chat_render.h). The whole rendered text is
 * tokenized at once, special tokens recognised, as transformers tokenizes a rendered conversation
 * (so the ids equal its apply_chat_template's). Targets: every token that holds a byte of an
 * assistant turn's content, and the special token that closes the turn when it comes right after
 * (<|eot_id|>, <|im_end|>, <end_of_turn>); the rest is prompt (mask tp). The template writes the
 * BOS/EOS it wants: prep adds none. */
static void put_chat(const prep_doc_rules *r, const json_value *root, prep_item *it, uint8_t tp) {
    chat_render cr;
    char why[sizeof it->err];
    int rc = chat_render_turns(r->chat, root, &cr, why, sizeof why);
    if (rc) {
        bad(it, "%s", why);
        if (rc == JINJA_EBUDGET) it->status = ITEM_FATAL; /* every line would take as long */
        return;
    }
    size_t from = it->n, *len, at = 0, s = 0;
    put_text(r, it, cr.text, cr.len, tp, 1);
    if (token_bytes(r->tok, it, from, &len) != cr.len) {
        bad(it, "the chat template's output does not decode back to itself token by token: its "
            "loss mask cannot be placed");
    } else {
        for (size_t k = from; k < it->n; at += len[k - from], k++) {
            while (s < cr.n_spans && at >= cr.spans[s].off + cr.spans[s].len) {
                if (at == cr.spans[s].off + cr.spans[s].len && is_special(r->tok, it->tok[k]))
                    it->mask[k] = 1; /* the turn's closing token */
                s++;
            }
            if (s < cr.n_spans && at + len[k - from] > cr.spans[s].off) it->mask[k] = 1;
        }
    }
    free(len);
    chat_render_free(&cr);
}

/* A plain document (a text file's, or a JSONL line's "text"): [BOS] text [EOS], every token a
 * target; an empty text is an empty item. */
static void put_plain(const prep_doc_rules *r, prep_item *it, const char *s, size_t n, int part) {
    if (n == 0) {
        it->status = ITEM_EMPTY;
        return;
    }
    if (r->bos && (part & PART_FIRST)) put_id(it, r->bos_id, 1);
    put_text(r, it, s, n, 1, part & PART_FIRST ? 0 : TEXT_CONTINUED);
    if (!r->no_eos && (part & PART_LAST)) put_id(it, r->eos, 1);
}

/* A prompt/response example: [BOS] prompt response [EOS], the prompt a target only with
 * target_prompts. */
static void put_example(const prep_doc_rules *r, prep_item *it, const json_value *prompt,
                        const json_value *resp) {
    uint8_t tp = (uint8_t)r->target_prompts;
    if (r->bos) put_id(it, r->bos_id, tp);
    put_text(r, it, prompt->str, prompt->len, tp, 0);
    put_text(r, it, resp->str, resp->len, 1, 0);
    if (!r->no_eos) put_id(it, r->eos, 1);
}

/* {"prompt", "response"} ("completion" is accepted in place of "response"). */
static void put_sft(const prep_doc_rules *r, prep_item *it, const json_value *root) {
    const json_value *prompt = get_str(it, root, "prompt"), *resp;
    if (!prompt) return;
    resp = json_get(root, "response") || !json_get(root, "completion")
               ? get_str(it, root, "response") : get_str(it, root, "completion");
    if (!resp) return;
    put_example(r, it, prompt, resp);
}

/* Chat turn k in the "ROLE: content" format: "ROLE: " (never a target), the content and "\n"
 * (targets for the assistant, or with target_prompts). Returns 0, or -1 after bad().
 * *assistant: the role is "assistant". */
static int put_turn(const prep_doc_rules *r, prep_item *it, const json_value *m, int k,
                    int *assistant) {
    uint8_t tp = (uint8_t)r->target_prompts;
    if (m->type != JSON_OBJECT) return bad(it, "messages[%d] is %s, expected an object", k, what(m->type));
    const json_value *role = get_str(it, m, "role"), *content;
    if (!role || !(content = get_str(it, m, "content"))) {
        char why[sizeof it->err];
        snprintf(why, sizeof why, "%s", it->err);
        return bad(it, "messages[%d]: %s", k, why);
    }
    *assistant = strcmp(role->str, "assistant") == 0;
    if (k == 0 && r->bos) put_id(it, r->bos_id, tp);
    char small[128], *head = role->len + 3 <= sizeof small ? small : tsr_malloc(role->len + 3);
    memcpy(head, role->str, role->len);
    memcpy(head + role->len, ": ", 3);
    put_text(r, it, head, role->len + 2, tp, 0); /* the header "ROLE: " is never a target */
    if (head != small) free(head);
    uint8_t m_content = (uint8_t)(*assistant || tp);
    put_text(r, it, content->str, content->len, m_content, 0);
    put_text(r, it, "\n", 1, m_content, 0);
    return 0;
}

/* {"messages": [{"role", "content"}, ...]} without a chat template: the turns, then EOS (a target
 * after an assistant's last turn, or with target_prompts). */
static void put_role_chat(const prep_doc_rules *r, prep_item *it, const json_value *root) {
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
    for (const json_value *m = msgs->child; m; m = m->next, k++)
        if (put_turn(r, it, m, k, &last_assistant)) return;
    if (!r->no_eos) put_id(it, r->eos, (uint8_t)(last_assistant || r->target_prompts));
}

/* The conversation {"messages": [{"role": "user", "content": prompt}, {"role": "assistant",
 * "content": answer}]} through the chat template: the tokens and mask a chat line holding these two
 * messages gets. The values are built here, pointing at the line's strings. */
static void put_pair_chat(const prep_doc_rules *r, prep_item *it, const json_value *prompt,
                          const json_value *answer) {
    static const char *const roles[2] = {"user", "assistant"};
    const json_value *content[2] = {prompt, answer};
    json_value role[2], text[2], msg[2], msgs, conv;
    for (int k = 0; k < 2; k++) {
        role[k] = (json_value){.type = JSON_STRING, .str = roles[k], .len = strlen(roles[k]),
                               .key = "role", .key_len = 4, .next = &text[k]};
        text[k] = *content[k];
        text[k].key = "content";
        text[k].key_len = 7;
        text[k].next = NULL;
        msg[k] = (json_value){.type = JSON_OBJECT, .len = 2, .child = &role[k],
                              .next = k ? NULL : &msg[1]};
    }
    msgs = (json_value){.type = JSON_ARRAY, .len = 2, .key = "messages", .key_len = 8,
                        .child = &msg[0]};
    conv = (json_value){.type = JSON_OBJECT, .len = 1, .child = &msgs};
    put_chat(r, &conv, it, (uint8_t)r->target_prompts);
}

/* {"prompt", "chosen", "rejected"}: the chosen example, then the rejected one (prep_doc.h). */
static void put_pref(const prep_doc_rules *r, prep_item *it, const json_value *root) {
    static const char *const names[2] = {"chosen", "rejected"};
    const json_value *prompt = get_str(it, root, "prompt"), *answer[2] = {NULL, NULL};
    for (int k = 0; k < 2 && prompt; k++)
        if (!(answer[k] = get_str(it, root, names[k]))) return;
    if (!prompt) return;
    if (answer[0]->len == answer[1]->len && !memcmp(answer[0]->str, answer[1]->str, answer[0]->len))
        it->pair_note = PAIR_SAME;
    else if (strspn(answer[0]->str, " \t\r\n") == answer[0]->len || strspn(answer[1]->str, " \t\r\n") == answer[1]->len)
        it->pair_note = PAIR_EMPTY;
    for (int k = 0; k < 2 && it->status == ITEM_OK; k++) {
        if (k) it->n_first = it->n;
        if (r->chat) put_pair_chat(r, it, prompt, answer[k]);
        else put_example(r, it, prompt, answer[k]);
        if (it->status != ITEM_OK) { /* the template refused or rewrote it: say which answer */
            int st = it->status;
            char why[sizeof it->err];
            snprintf(why, sizeof why, "%s", it->err);
            bad(it, "%s answer: %s", names[k], why);
            it->status = st;
        }
    }
}

/* conv through the chat template with the generation prompt: a prompt to be completed, every
 * token a target (mask 1: the prompt's tokens; the padding after it has none) */
static void put_generation_prompt(const prep_doc_rules *r, prep_item *it, const json_value *conv) {
    const json_value *ctx[2] = {r->chat->vars, conv};
    const jinja_overrides ov = {.nmessages = -1, .add_generation_prompt = 1};
    char *text = NULL;
    size_t n = 0;
    jinja_error e;
    if (jinja_render_ex(r->chat->tpl, ctx, 2, &ov, &text, &n, &e) != JINJA_OK)
        bad(it, "the chat template: %s", e.msg);
    else put_text(r, it, text, n, 1, 1);
    free(text);
}

/* {"prompt": TEXT} or {"messages": [...]}, with an optional "answer" (a string or a number) and
 * anything else (kept for the reward, not tokenized): the prompt alone, mask 1, no EOS (the
 * completion follows it). "messages" needs a chat template; "prompt" goes through it as one user
 * message when there is one, else as plain text. */
static void put_prompts(const prep_doc_rules *r, prep_item *it, const json_value *root) {
    const json_value *prompt = json_get(root, "prompt"), *msgs = json_get(root, "messages");
    const json_value *answer = json_get(root, "answer");
    if (!!prompt == !!msgs) {
        bad(it, "wants exactly one of \"prompt\" and \"messages\"");
        return;
    }
    if (answer && answer->type != JSON_STRING && answer->type != JSON_NUMBER) {
        bad(it, "field \"answer\" is %s, expected a string or a number", what(answer->type));
        return;
    }
    if (answer && answer->type == JSON_NUMBER && !isfinite(answer->num)) {
        bad(it, "field \"answer\" is a number beyond a double's range (it reads as %g), which no "
            "completion can equal: give it as a string", answer->num);
        return;
    }
    if (msgs && (!r->chat || msgs->type != JSON_ARRAY || msgs->len == 0)) {
        bad(it, r->chat ? "field \"messages\" must be a non-empty array of {\"role\", \"content\"}"
                        : "\"messages\" needs a chat template (a tokenizer_config.json with "
                          "chat_template beside the tokenizer, or --chat-template)");
        return;
    }
    if (msgs) {
        put_generation_prompt(r, it, root);
        return;
    }
    if (!(prompt = get_str(it, root, "prompt"))) return;
    if (r->max_prompt_bytes && prompt->len > r->max_prompt_bytes) { /* unread: it cannot fit */
        bad(it, "the prompt has %zu bytes, more than the %zu a prompt that fits --pack can have "
            "(docs/prep.md): not tokenized", prompt->len, r->max_prompt_bytes);
        return;
    }
    if (!r->chat) {
        put_text(r, it, prompt->str, prompt->len, 1, 0);
        return;
    }
    json_value role = {.type = JSON_STRING, .str = "user", .len = 4, .key = "role", .key_len = 4},
               text = *prompt, msg, list, conv;
    text.key = "content", text.key_len = 7, text.next = NULL;
    role.next = &text;
    msg = (json_value){.type = JSON_OBJECT, .len = 2, .child = &role};
    list = (json_value){.type = JSON_ARRAY, .len = 1, .key = "messages", .key_len = 8,
                        .child = &msg};
    conv = (json_value){.type = JSON_OBJECT, .len = 1, .child = &list};
    put_generation_prompt(r, it, &conv);
}

void prep_tokenize(const prep_doc_rules *r, prep_format kind, const char *s, prep_item *it,
                   json_doc *jd) {
    it->n = 0;
    it->n_first = 0;
    it->pair_note = 0;
    it->status = ITEM_OK;
    if (kind == FMT_TEXT) {
        put_plain(r, it, s, it->len, it->part);
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
        if (t) put_plain(r, it, t->str, t->len, PART_WHOLE);
    } else if (kind == FMT_SFT) {
        put_sft(r, it, root);
    } else if (kind == FMT_PREF) {
        put_pref(r, it, root);
    } else if (kind == FMT_PROMPTS) {
        put_prompts(r, it, root);
    } else if (r->chat) {
        put_chat(r, root, it, (uint8_t)r->target_prompts);
    } else {
        put_role_chat(r, it, root);
    }
}
