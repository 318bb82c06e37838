/* chat_config.h — a tokenizer's chat template, from its tokenizer_config.json, ready to render.
 *
 *   chat_config cc;  jinja_error e;
 *   if (chat_config_load("tok/tokenizer_config.json", &cc, &e)) -> e.status, e.msg (and line:col)
 *   if (!cc.tpl) -> no chat_template: prep keeps its "ROLE: content" format
 *   const json_value *ctx[2] = { cc.vars, conversation_line };
 *   jinja_render(cc.tpl, ctx, 2, &out, &n, &e);
 *   chat_config_free(&cc);
 *
 * chat_template is a string, or a list of {"name", "template"} whose "default" is taken; a
 * chat_template.jinja beside the file takes its place, as transformers reads a tokenizer directory
 * (save_pretrained writes the template there; gpt-oss's repository ships it so). The special tokens (bos, eos, unk, pad, sep, cls, mask) become string variables bos_token, ...:
 * each a string or an added-token object {"content": ...} in the file; null or absent ones are
 * left out, as transformers leaves them out of the template's variables.
 */
#ifndef TSR_CHAT_CONFIG_H
#define TSR_CHAT_CONFIG_H

#include "chat/jinja.h"
#include "cli.h"

enum { CHAT_SPECIAL_TOKENS = 7 };

typedef struct chat_config {
    jinja_template *tpl;   /* NULL when the file has no chat_template (and no chat_template.jinja
                            * is beside it) */
    const json_value *vars; /* object {"bos_token": "<s>", ...}: the first render context */
    char source[4096];     /* the file tpl came from: chat_template.jinja or the config; "" */
    /* owned storage */
    json_doc doc;
    char *text, *jinja;
    json_value nodes[1 + CHAT_SPECIAL_TOKENS];
} chat_config;

/* JINJA_OK, or JINJA_ECONTEXT (file unreadable, not JSON, chat_template of a wrong type, a
 * chat_template.jinja over CHAT_TEMPLATE_MAX bytes; the message names the file) or the
 * template's JINJA_ESYNTAX. On failure nothing needs freeing. */
int chat_config_load(const char *path, chat_config *cc, jinja_error *err);
void chat_config_free(chat_config *cc);

/* The special token `name` ("bos_token", "eos_token", ...) of the file as a string, NULL when the
 * file leaves it out or sets it to null. Valid while cc is. */
const char *chat_config_token(const chat_config *cc, const char *name);

/* The chat_template.jinja beside the tokenizer_config.json at config_path (its directory's):
 * 1 and the path in buf when that file exists, 0 when not, -1 when the path does not fit. */
int chat_config_template_file(const char *config_path, char *buf, size_t cap);
enum { CHAT_TEMPLATE_MAX = 16 << 20 }; /* bytes of a chat_template.jinja (gpt-oss's: 16 KB) */
/* bytes of a tokenizer_config.json: Gemma 3's, with 6,000 added tokens, is 1.2 MB; one may hold a
 * template as large as a chat_template.jinja besides */
enum { CHAT_CONFIG_MAX = 64 << 20 };

/* The tokenizer_config.json that goes with a Hugging Face tokenizer spec: DIR/tokenizer_config.json
 * for a directory, the one beside FILE for a tokenizer.json file. Returns 1 and the path in buf when
 * that file exists, 0 when it does not (buf then holds the path looked at), -1 when the path does
 * not fit in cap bytes. */
int chat_config_find(const char *tokenizer_spec, char *buf, size_t cap);

/* The options of the commands that render a chat template (prep, generate) that set a render's
 * budget (jinja_set_budget); long-only. */
#define CHAT_OPT_STEPS CLI_NO_SHORT('u')
#define CHAT_OPT_MEMORY CLI_NO_SHORT('m')
#define CHAT_BUDGET_OPTS                                                                        \
    {"template-steps", CHAT_OPT_STEPS, "N", "a chat template's budget of steps per render "    \
                                            "(default 10000000; docs/chat-templates.md)"},     \
    {"template-memory", CHAT_OPT_MEMORY, "SIZE", "a chat template's budget of memory per "      \
                                                 "render, e.g. 512M (default 256M)"}
/* Parses the value of one of them into b: 0, or a usage error's status. 1: ch is neither. */
int chat_budget_option(const cli_cmd *c, int ch, const char *val, jinja_budget *b);
/* What a message about a render over its budget adds: where the budget is set. */
#define CHAT_BUDGET_HINT "raise it with --template-steps N or --template-memory SIZE, or check " \
                         "the template (docs/chat-templates.md \"Limits\")"

#endif
