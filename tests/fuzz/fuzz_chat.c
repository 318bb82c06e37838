/* fuzz_chat.c — chat templates and prep's assistant-turn finder (src/chat/jinja*.c,
 * src/chat/chat_render.c): a tokenizer_config.json's chat_template and the JSONL lines of a chat
 * dataset both come from the user. Input: TEMPLATE FUZZ_SEP CONVERSATION (a template of the fuzzer's
 * own, compiled and rendered), or a CONVERSATION alone, rendered with two built-in templates shaped
 * like Llama 3's (trim) and Qwen 3's (reasoning split off at </think>). For a conversation that
 * renders, the spans must lie inside the text, in order, without overlap. Inputs reach 128 KB
 * (-max_len in fuzz.mk: long expression chains and deep values are in length) with the template
 * dictionary tests/fuzz/chat.dict; renders run within a budget of 10^6 steps and 64 MiB (the
 * default 10^7 steps would pass libFuzzer's 10 s limit under ASan). */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fuzz_common.h"
#include "chat/chat_render.h"

static const char *const builtin[] = {
    "{{ bos_token }}{% for m in messages %}<|h|>{{ m['role'] }}<|e|>\n\n{{ m['content'] | trim }}"
    "<|eot|>{% endfor %}{% if add_generation_prompt %}<|h|>assistant<|e|>\n\n{% endif %}",
    "{%- for m in messages %}{%- set c = m.content if m.content is string else '' %}"
    "{%- if m.role == 'assistant' and '</think>' in c %}{%- set r = c.split('</think>')[0] %}"
    "{%- set c = c.split('</think>')[-1].lstrip('\\n') %}<|im_start|>assistant\n<think>\n{{ r }}\n"
    "</think>\n\n{{ c }}<|im_end|>\n{%- else %}<|im_start|>{{ m.role }}\n{{ c }}<|im_end|>\n"
    "{%- endif %}{%- endfor %}",
};
static jinja_template *g_builtin[2];
static json_doc g_doc;
static json_value g_vars = {.type = JSON_OBJECT};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_quiet();
    json_doc_init(&g_doc);
    for (int i = 0; i < 2; i++) {
        jinja_error e;
        if (jinja_compile(builtin[i], strlen(builtin[i]), &g_builtin[i], &e)) abort();
    }
    return 0;
}

static void check(const jinja_template *t, const json_value *conv) {
    chat_config cc = {.tpl = (jinja_template *)t, .vars = &g_vars};
    chat_render r;
    char why[256];
    if (chat_render_turns(&cc, conv, &r, why, sizeof why)) {
        if (!memchr(why, '\0', sizeof why)) abort();
        return;
    }
    size_t end = 0;
    for (size_t i = 0; i < r.n_spans; i++) {
        if (r.spans[i].off < end || r.spans[i].off + r.spans[i].len > r.len) abort();
        end = r.spans[i].off + r.spans[i].len;
    }
    if (r.text[r.len] != '\0') abort();
    chat_render_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part part[2];
    int n = fuzz_split(data, size, part, 2);
    const fuzz_part *conv = &part[n - 1];
    char *line = malloc(conv->n ? conv->n : 1);
    memcpy(line, conv->p, conv->n);
    json_value *root;
    json_error err;
    if (json_parse(&g_doc, line, conv->n, &root, &err) == 0 && root->type == JSON_OBJECT) {
        if (n == 2) {
            jinja_template *t;
            jinja_error e;
            if (jinja_compile((const char *)part[0].p, part[0].n, &t, &e) == JINJA_OK) {
                jinja_set_budget(t, &(jinja_budget){.steps = 1000000, .bytes = 64u << 20});
                check(t, root);
                jinja_free(t);
            }
        } else {
            for (int i = 0; i < 2; i++) check(g_builtin[i], root);
        }
    }
    free(line);
    return 0;
}
