/* gen_chat.h — a chat template for generation (`tessera generate --chat`): the
 * tokenizer_config.json beside a Hugging Face tokenizer, the prompt rendered as one user turn by
 * its chat_template, and the ids that end an assistant turn (docs/generate.md "Chat"). In
 * src/chat, below its users: tessera generate, prep's prompts (their stop ids) and the Hugging
 * Face export (generation_config.json's end of turn), so src/hf does not include src/generate,
 * which reads a Hugging Face directory through src/hf (hf_model_importer).
 *
 * The conversation is messages = [{system}?, {user}], rendered with the special-token variables
 * (bos_token, eos_token, ...) and add_generation_prompt = true, as transformers'
 * apply_chat_template does; the caller encodes the text with special tokens recognised. A turn
 * ends at any of: the tokenizer_config's eos_token, the template's own end-of-turn token (what it
 * prints right after an assistant message: <|eot_id|>, <|im_end|>, <end_of_turn>) and the
 * eos_token_id list of a generation_config.json beside the tokenizer. --template-var NAME=JSON
 * adds variables (enable_thinking, tools, ...), as apply_chat_template's keyword arguments do.
 */
#ifndef TSR_GEN_CHAT_H
#define TSR_GEN_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "chat/chat_config.h"
#include "json.h"
#include "tokenizer/tokenizer.h"

enum { GEN_CHAT_MAX_VARS = 16, GEN_CHAT_VAR_NAME = 64 };

/* The --template-var variables: JSON values keyed by their names, in the order given. */
typedef struct gen_chat_vars {
    int n;
    json_doc doc[GEN_CHAT_MAX_VARS];      /* doc[k] holds value k */
    json_value member[GEN_CHAT_MAX_VARS]; /* value k as a member NAME (next: member k + 1) */
    char name[GEN_CHAT_MAX_VARS][GEN_CHAT_VAR_NAME];
} gen_chat_vars;

/* Adds "NAME=JSON" (NAME a template identifier other than messages and add_generation_prompt,
 * which generate sets, and not given before; JSON any JSON value: false, 3, "text", [...], {...}).
 * Returns 0, or -1 with the reason (naming spec) in why. */
int gen_chat_var_add(gen_chat_vars *v, const char *spec, char *why, size_t cap);
void gen_chat_vars_free(gen_chat_vars *v);

typedef struct gen_chat {
    chat_config cc;
    int loaded;        /* cc holds the tokenizer_config.json at path */
    char path[4096];   /* the tokenizer_config.json beside the tokenizer (looked at) */
    const gen_chat_vars *vars; /* --template-var, rendered after the special tokens; NULL: none */
} gen_chat;

/* Loads the tokenizer_config.json beside the tokenizer opened from spec when tok is a Hugging Face
 * one and the file exists (gc->loaded = 1); neither is an error (loaded 0). vars (NULL: none) are
 * the template variables of every render; they must outlive gc. budget: the template's render
 * budget (--template-steps, --template-memory; zeros keep the defaults). Returns 0, or, with
 * chat (--chat), TSR_EXIT_DATA when the file is there but unreadable or its template does not
 * compile; without chat that is a warning (loaded 0): a plain completion needs no template. */
int gen_chat_open(gen_chat *gc, const char *spec, const tsr_tokenizer *tok, int chat,
                  const gen_chat_vars *vars, const jinja_budget *budget);
void gen_chat_free(gen_chat *gc);

/* The id of the tokenizer_config's eos_token, or UINT32_MAX (no file, no eos_token, or the
 * tokenizer does not have it as an added token). */
uint32_t gen_chat_eos_id(const gen_chat *gc, const tsr_tokenizer *tok);

/* The --chat prompt: [system (when not NULL), user] through the chat_template with the generation
 * prompt and gc->vars, into *text (malloc'd, NUL-terminated, *n bytes). Returns 0, or TSR_EXIT_USAGE after an
 * error naming the tokenizer (no chat_template) or the template's own error (raise_exception),
 * TSR_EXIT_DATA when the render went over the template's budget. */
int gen_chat_render(const gen_chat *gc, const char *spec, const char *system, const char *user,
                    char **text, size_t *n);

/* The same for a whole conversation: messages, a JSON array of {"role", "content"} objects (a
 * `generate --prompts` line's), rendered with the generation prompt and gc->vars. */
int gen_chat_render_messages(const gen_chat *gc, const char *spec, const json_value *messages,
                             char **text, size_t *n);

/* The token that ends an assistant turn calling a tool: the added token that ends the template's
 * rendering of [user "Hi", assistant calling a function], when it follows the call's arguments
 * (harmony's <|call|>, Qwen's <|im_end|>), else UINT32_MAX (no template, one that refuses or
 * drops tool calls, or one that ends them with text). */
uint32_t gen_chat_tool_call_end(const gen_chat *gc, const tsr_tokenizer *tok);

/* The template's end-of-turn token: the first token of what the template prints after an
 * assistant message's content (white space skipped) when that token is an added token of tok,
 * else UINT32_MAX. Found by rendering the same conversation with an assistant reply added
 * (chat_render_turns's location of assistant turns). */
uint32_t gen_chat_end_of_turn(const gen_chat *gc, const tsr_tokenizer *tok, const char *system,
                              const char *user);

/* bytes of a generation_config.json (real ones: under 1 KB) */
enum { GEN_CONFIG_MAX = 1 << 20 };
/* The eos_token_id of the generation_config.json beside the tokenizer_config.json (a number or a
 * list of numbers), appended to ids[*n..cap). A missing file or key adds nothing. Returns 0, or
 * TSR_EXIT_DATA after an error naming the file (unreadable, over GEN_CONFIG_MAX bytes, not JSON,
 * eos_token_id not integers). */
int gen_chat_generation_eos(const gen_chat *gc, int64_t *ids, int cap, int *n);

#endif
