/* gen_chat.h — `tessera generate --chat`: the tokenizer_config.json beside a Hugging Face
 * tokenizer, the prompt rendered as one user turn by its chat_template, and the ids that end an
 * assistant turn (docs/generate.md "Chat"). Internal to src/generate/.
 *
 * The conversation is messages = [{system}?, {user}], rendered with the special-token variables
 * (bos_token, eos_token, ...) and add_generation_prompt = true, as transformers'
 * apply_chat_template does; the caller encodes the text with special tokens recognised. A turn
 * ends at any of: the tokenizer_config's eos_token, the template's own end-of-turn token (what it
 * prints right after an assistant message: <|eot_id|>, <|im_end|>, <end_of_turn>) and the
 * eos_token_id list of a generation_config.json beside the tokenizer.
 */
#ifndef TSR_GEN_CHAT_H
#define TSR_GEN_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "chat/chat_config.h"
#include "tokenizer/tokenizer.h"

typedef struct gen_chat {
    chat_config cc;
    int loaded;        /* cc holds the tokenizer_config.json at path */
    char path[4096];   /* the tokenizer_config.json beside the tokenizer (looked at) */
} gen_chat;

/* Loads the tokenizer_config.json beside the tokenizer opened from spec when tok is a Hugging Face
 * one and the file exists (gc->loaded = 1); neither is an error (loaded 0). Returns 0, or, with
 * chat (--chat), TSR_EXIT_DATA when the file is there but unreadable or its template does not
 * compile; without chat that is a warning (loaded 0): a plain completion needs no template. */
int gen_chat_open(gen_chat *gc, const char *spec, const tsr_tokenizer *tok, int chat);
void gen_chat_free(gen_chat *gc);

/* The id of the tokenizer_config's eos_token, or UINT32_MAX (no file, no eos_token, or the
 * tokenizer does not have it as an added token). */
uint32_t gen_chat_eos_id(const gen_chat *gc, const tsr_tokenizer *tok);

/* The --chat prompt: [system (when not NULL), user] through the chat_template with the generation
 * prompt, into *text (malloc'd, NUL-terminated, *n bytes). Returns 0, or TSR_EXIT_USAGE after an
 * error naming the tokenizer (no chat_template) or the template's own error (raise_exception). */
int gen_chat_render(const gen_chat *gc, const char *spec, const char *system, const char *user,
                    char **text, size_t *n);

/* The template's end-of-turn token: the first token of what the template prints after an
 * assistant message's content (white space skipped) when that token is an added token of tok,
 * else UINT32_MAX. Found by rendering the same conversation with an assistant reply added
 * (chat_render_turns's location of assistant turns). */
uint32_t gen_chat_end_of_turn(const gen_chat *gc, const tsr_tokenizer *tok, const char *system,
                              const char *user);

/* The eos_token_id of the generation_config.json beside the tokenizer_config.json (a number or a
 * list of numbers), appended to ids[*n..cap). A missing file or key adds nothing. Returns 0, or
 * TSR_EXIT_DATA after an error naming the file (unreadable, not JSON, eos_token_id not integers). */
int gen_chat_generation_eos(const gen_chat *gc, int64_t *ids, int cap, int *n);

#endif
