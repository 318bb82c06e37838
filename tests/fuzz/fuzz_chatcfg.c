/* fuzz_chatcfg.c — a tokenizer's tokenizer_config.json as prep and generate --chat load it
 * (src/chat/chat_config.c chat_config_load: the JSON, chat_template as a string or a list of named
 * templates, the special tokens as strings or {"content": ...}), then its template rendered the
 * ways they render it: prep's assistant-turn finder (chat_render_turns) and generate's prompt
 * (jinja_render_ex with add_generation_prompt). Input: tokenizer_config.json [FUZZ_SEP
 * conversation]; without a conversation (or one that is not a JSON object) a fixed one with a
 * system, user and assistant turn is rendered. Renders run within a budget of 10^6 steps and
 * 64 MiB (the default 10^7 steps would pass libFuzzer's 10 s limit under ASan). Checks: a failed
 * load leaves a NUL-terminated message and a known status; each special token read back is a
 * NUL-terminated string; the spans of a render lie inside its text, in order. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fuzz_common.h"
#include "chat/chat_render.h"

static const char *const specials[] = {"bos_token", "eos_token", "unk_token", "pad_token",
                                       "sep_token", "cls_token", "mask_token"};
static const char fixed_conv[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
    "\"content\": \"Hi \\u00e9\"}, {\"role\": \"assistant\", \"content\": \"<think>x</think>Yes.\"}]}";

static void check_error(const jinja_error *e, int rc) {
    if (rc <= JINJA_OK || rc >= JINJA_STATUS_COUNT || e->status != rc || !memchr(e->msg, '\0', sizeof e->msg))
        abort();
}

static void render(const chat_config *cc, const json_value *conv) {
    chat_render r;
    char why[256];
    if (chat_render_turns(cc, conv, &r, why, sizeof why) == 0) {
        size_t end = 0;
        for (size_t i = 0; i < r.n_spans; i++) {
            if (r.spans[i].off < end || r.spans[i].off + r.spans[i].len > r.len) abort();
            end = r.spans[i].off + r.spans[i].len;
        }
        chat_render_free(&r);
    } else if (!memchr(why, '\0', sizeof why)) {
        abort();
    }
    const json_value *ctx[2] = {cc->vars, conv};
    const jinja_overrides ov = {.nmessages = -1, .add_generation_prompt = 1};
    char *out = NULL;
    size_t n;
    jinja_error e;
    int rc = jinja_render_ex(cc->tpl, ctx, 2, &ov, &out, &n, &e);
    if (rc == JINJA_OK && (!out || out[n] != '\0')) abort();
    if (rc != JINJA_OK) check_error(&e, rc);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part part[2];
    int np = fuzz_split(data, size, part, 2);
    chat_config cc;
    jinja_error e;
    int rc = chat_config_load(fuzz_write("tokenizer_config.json", part[0].p, part[0].n), &cc, &e);
    if (rc != JINJA_OK) {
        check_error(&e, rc);
        return 0;
    }
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++) {
        const char *t = chat_config_token(&cc, specials[k]);
        if (t && strlen(t) > part[0].n) abort(); /* a string of the file, NUL-terminated */
    }
    if (cc.tpl) {
        jinja_set_budget(cc.tpl, &(jinja_budget){.steps = 1000000, .bytes = 64u << 20});
        static json_doc doc;
        static int init;
        if (!init) json_doc_init(&doc), init = 1;
        json_value *conv;
        json_error je;
        char *text = np == 2 ? malloc(part[1].n + 1) : NULL;
        if (text) memcpy(text, part[1].p, part[1].n);
        if (!text || json_parse(&doc, text, part[1].n, &conv, &je) != 0 || conv->type != JSON_OBJECT)
            json_parse(&doc, fixed_conv, sizeof fixed_conv - 1, &conv, &je);
        render(&cc, conv);
        free(text);
    }
    chat_config_free(&cc);
    return 0;
}
