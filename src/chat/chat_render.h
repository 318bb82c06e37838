/* chat_render.h — a conversation rendered with the model's own chat template, and where each
 * assistant turn's content lies in the rendered text: `tessera prep`'s loss-mask targets, and
 * `tessera generate --chat`'s end of turn (what the template prints after a reply). The rules are
 * in docs/prep.md ("Chat templates").
 *
 * The text is the template's render of the whole conversation (add_generation_prompt false). The
 * assistant turns are found by rendering once more with each assistant message's content replaced
 * by a marker: the text between the markers is the template's own, and must appear in the first
 * render in the same order; what lies between those pieces is each turn's content as the template
 * printed it (trimmed, for instance). A template that moves or rewrites the content so that this
 * does not hold is reported, never guessed.
 */
#ifndef TSR_CHAT_RENDER_H
#define TSR_CHAT_RENDER_H

#include <stddef.h>

#include "chat/chat_config.h"
#include "json.h"

typedef struct chat_span {
    size_t off, len; /* bytes of one assistant turn's content in the rendered text */
} chat_span;

typedef struct chat_render {
    char *text; /* the rendered conversation (malloc'd, NUL-terminated) */
    size_t len;
    chat_span *spans; /* the assistant turns, in order (malloc'd) */
    size_t n_spans;
} chat_render;

/* Renders conv (a JSON object with "messages", and whatever else the template reads: "tools", ...)
 * with cc's template and its special-token variables. Returns 0, or nonzero with the reason in
 * why: the template's own failure as its status (JINJA_ERUNTIME, ...; JINJA_EBUDGET: a render
 * went over the template's budget), or -1 when the assistant turns cannot be located.
 * Thread-safe. */
int chat_render_turns(const chat_config *cc, const json_value *conv, chat_render *out, char *why,
                     size_t why_cap);
void chat_render_free(chat_render *r);

#endif
