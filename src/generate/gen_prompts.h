/* gen_prompts.h — `tessera generate --prompts FILE.jsonl --out FILE.jsonl`: many prompts completed
 * together by the batched generator (generate/gen_batch.h), completions written as JSON Lines, a
 * progress line with tokens/s on stderr (docs/generate.md "Many prompts"). Internal to
 * src/generate/.
 *
 * Each input line is an object with one of "prompt" (text; with --chat a user message rendered
 * by the chat template), "messages" (a conversation, rendered by the chat template with the
 * generation prompt) or "prompt_ids" (token ids), and optionally "id" (a string or number, copied
 * to the output). Each output line is one completion, in input order, samples in order:
 *   {"index": I, "id": ..., "sample": G, "completion": "TEXT", "ids": [...], "tokens": N,
 *    "stop": "eos"|"stop"|"length"|"context", "logprob": SUM}
 * ("completion" with a tokenizer, cut before a stop id or stop string; "ids" without one or with
 * --ids). Sample G of prompt I draws from gen_stream_key(seed, 0, I, G): the same text whatever
 * --batch is.
 */
#ifndef TSR_GEN_PROMPTS_H
#define TSR_GEN_PROMPTS_H

#include <stdint.h>

#include "chat/gen_chat.h"
#include "generate/gen_sample.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#define GEN_MAX_STOP_STRINGS 16

typedef struct gen_prompts_opts {
    const char *in, *out;      /* --prompts, --out */
    int batch, samples, max_new, chat, ids;
    const char *system;        /* --chat's system message, or NULL */
    const char *tok_spec;      /* what tok was opened from (messages name it) */
    const char *stops[GEN_MAX_STOP_STRINGS]; /* --stop strings */
    int n_stops;
    const int32_t *stop_ids;   /* end of text, and with a chat template its end-of-turn ids */
    int n_stop_ids;
    gen_sampling smp;
} gen_prompts_opts;

/* Completes every prompt of o->in on m (fp32 CPU), writing o->out (staged in OUT.tmp, renamed when
 * complete). tok may be NULL (prompt_ids only, ids out); chat: the tokenizer's chat template
 * (messages, --chat). Returns 0, 1 (a bad prompt line: its number and why), 2 (a file cannot be
 * read or written). */
int gen_prompts_run(const tsr_model *m, const tsr_tokenizer *tok, const gen_chat *chat,
                    const gen_prompts_opts *o);

#endif
