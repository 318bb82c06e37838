/* jinja.h — chat templates: the Jinja subset that tokenizer_config.json's chat_template uses,
 * rendering byte-identical to @huggingface/jinja 0.5.11 (docs/chat-templates.md).
 *
 *   jinja_template *t;  jinja_error e;
 *   if (jinja_compile(src, strlen(src), &t, &e)) -> e.line:e.col e.msg (syntax error)
 *   char *out; size_t n;
 *   const json_value *ctx[2] = { tokenizer_vars, conversation };   // objects, merged in order
 *   if (jinja_render(t, ctx, 2, &out, &n, &e)) -> e.status, e.msg (raise_exception, type error)
 *   free(out);  jinja_free(t);
 *
 * A compiled template is read-only while rendering: one template may be rendered from several
 * threads at once. Each render works in its own arena, freed before it returns.
 *
 * A template is untrusted input (it comes with a downloaded model): compiling bounds its nesting
 * (200 blocks) and each expression's depth (256 operators, filters, members... in a chain); a
 * render gets a budget of steps and bytes (jinja_set_budget; JINJA_EBUDGET past it), prints no
 * value nested over 512 deep or containing itself, and releases a loop iteration's memory when
 * the iteration keeps nothing (docs/chat-templates.md "Limits").
 */
#ifndef TSR_JINJA_H
#define TSR_JINJA_H

#include <stddef.h>

#include "json.h"

enum {
    JINJA_OK = 0,
    JINJA_ESYNTAX,  /* the template does not lex or parse: line/col point at the fault */
    JINJA_ERAISE,   /* the template called raise_exception(msg): msg is its message */
    JINJA_ERUNTIME, /* evaluation failed (type error, unknown filter...): line/col of the node */
    JINJA_ECONTEXT, /* the context is not an object, or a key clashes with a global (true, ...) */
    JINJA_ENOMEM,
    JINJA_EBUDGET,  /* the render went over its budget of steps or bytes (jinja_set_budget) */
    JINJA_STATUS_COUNT
};

typedef struct jinja_error {
    int status;
    int line, col; /* 1-based position in the template; 0 when none */
    char msg[256];
    unsigned long long steps, peak_bytes; /* what a render used of its budget (also on success) */
} jinja_error;

typedef struct jinja_template jinja_template;

/* Compiles n bytes of template source. Returns JINJA_OK and *out, or a status with *err filled. */
int jinja_compile(const char *src, size_t n, jinja_template **out, jinja_error *err);
void jinja_free(jinja_template *t);

/* A render's budget: steps (a node evaluated, a loop iteration, an element a filter visits, a
 * KiB allocated or printed) and bytes of memory held at once. 0 keeps the default. */
#define JINJA_DEFAULT_STEPS 10000000ull
#define JINJA_DEFAULT_BYTES (256ull << 20)
typedef struct jinja_budget {
    unsigned long long steps, bytes;
} jinja_budget;
/* Sets t's budget for the renders that follow (not while t renders elsewhere). */
void jinja_set_budget(jinja_template *t, const jinja_budget *b);
jinja_budget jinja_get_budget(const jinja_template *t);

/* Renders with the members of the nctx JSON objects as variables (a later object's member
 * replaces an earlier one's). On JINJA_OK *out is a malloc'd NUL-terminated string of *out_len
 * bytes (the caller frees it); otherwise *out is NULL and *err says why. strftime_now() reads
 * the clock, or TSR_JINJA_NOW (seconds since the epoch, UTC) when set, for reproducible tests. */
int jinja_render(const jinja_template *t, const json_value *const *ctx, size_t nctx, char **out,
                 size_t *out_len, jinja_error *err);

/* What jinja_render_ex changes in the context after merging it: messages cut to the first
 * nmessages (-1: all), add_generation_prompt set to 0/1 (-1: as the context says). */
typedef struct jinja_overrides {
    long nmessages;
    int add_generation_prompt;
} jinja_overrides;

int jinja_render_ex(const jinja_template *t, const json_value *const *ctx, size_t nctx,
                    const jinja_overrides *ov, char **out, size_t *out_len, jinja_error *err);

/* "syntax error", "raise_exception", ... for messages. */
const char *jinja_status_name(int status);

#endif
