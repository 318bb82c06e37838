/* reward.h — the rewards of GRPO's completions (reward.*; docs/rl.md "Rewards").
 *
 * Built in: `answer` (the completion's final answer, the content of the last \boxed{...} or the
 * text after the last reward.marker, against the prompt record's "answer", as numbers or as
 * text), `regex` (1 when reward.regex matches), plus an optional format reward (format_weight
 * when reward.format_regex matches). `command`: a program of the user's, started once per rank
 * (sh -c reward.command, TESSERA_RANK and TESSERA_WORLD in its environment) and kept running; it
 * gets one JSON line per completion on its stdin and answers one line each on its stdout:
 *   -> {"id": 17, "step": 3, "prompt_index": 40, "sample": 2, "prompt": {the record},
 *       "completion": "TEXT", "tokens": [ids], "stop": "eos"}
 *   <- {"id": 17, "reward": 0.5}            (optionally "pass": true|false)
 * in any order (a harmony run adds "final": the final channel's text or null, after
 * "completion": reward_texts). It is untrusted: its address space at most reward.memory_mib; each line at most
 * REWARD_MAX_LINE bytes, all of a step's within reward.timeout seconds, exactly one per id sent; anything else (the program
 * exits, hangs, writes a line that is not such an object, a reward that is not a finite number,
 * an id it was not sent or one twice) is an error that quotes the exchange: the run stops, never
 * scoring a completion 0 in its place.
 */
#ifndef TSR_REWARD_H
#define TSR_REWARD_H

#include <regex.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config/config.h"
#include "json.h"
#include "tokenizer/tokenizer.h"

#define REWARD_MAX_LINE 65536
#define REWARD_MAX_ABS 1e6 /* the bound on |reward| an answer may give (docs/rl.md) */

/* One completion to score. */
typedef struct reward_req {
    uint64_t id;              /* unique among one call's */
    const char *record;       /* the prompt's record: a JSON object (its line of prompts.jsonl) */
    size_t record_len;
    const char *completion;   /* its text (NUL-terminated; "" without a tokenizer) */
    const char *final;        /* harmony: its final channel's text, NULL when it has none */
    int harmony;              /* the prompts' chat template is harmony: the built-in rewards read
                               * final (NULL: no answer), the program gets it as "final" */
    const int32_t *ids;       /* its tokens */
    int n;
    const char *stop;         /* how it ended: "eos", "length", ... */
    int64_t step;
    uint64_t prompt_index;
    int sample;
} reward_req;

typedef struct reward_ctx {
    const tsr_config *cfg;
    regex_t re, fmt;
    int have_re, have_fmt;
    json_doc jd;
    pid_t pid;                /* reward.command: the program's keeper (it exits as the program did), or 0 */
    int to_child, from_child;
    int life;                 /* the write end of the keeper's lifeline (reward_keeper.h), or -1 */
    char *buf;                /* its output not yet read as lines */
    size_t len, cap;
    int rank;
    uint64_t next_id;         /* the id of the next request (ids run on across the steps) */
    char err[4096];           /* the last error, quoting the exchange */
} reward_ctx;

/* Compiles the regular expressions and, with reward.kind = command, starts the program. Returns
 * 0, or TSR_EXIT_USAGE (a bad expression) / TSR_EXIT_DATA (the program cannot start) after
 * tsr_error(). */
int reward_open(reward_ctx *r, const tsr_config *cfg, int rank, int world);
/* Scores n completions: reward[i], pass[i] (1: correct; for the program its "pass", else
 * reward >= 1). Returns 0, or TSR_EXIT_DATA with the reason (quoting the exchange) in r->err; the
 * program is then stopped. */
int reward_score(reward_ctx *r, const reward_req *q, int n, double *reward, int *pass);
/* Stops the program (its stdin closed, then, after a second, its keeper's lifeline: the keeper
 * SIGKILLs whatever is left of it and what it started) and frees r. */
void reward_close(reward_ctx *r);

/* gpt-oss's harmony format: the ids of its tokens, on when the prompts' chat template is
 * harmony (docs/rl.md "What a reward sees"). */
typedef struct reward_harmony {
    int on;
    int32_t channel, message, start, end, ret, call;
} reward_harmony;

/* Harmony is on when tok has <|channel|>, <|message|>, <|start|>, <|end|>, <|return|> and
 * <|call|> as added tokens and the stop ids (the prompts' stop_ids: their template's ends of an
 * assistant turn) hold <|return|>; off without a tokenizer. */
void reward_harmony_find(reward_harmony *h, const tsr_tokenizer *tok, const int32_t *stop,
                         int n_stop);
/* What a reward sees of a completion's ids (n, its stop id left out): *text its decode (as
 * tokenizer_decode_text; "" without a tokenizer), and with harmony on *final the text of its last
 * final-channel message (after the last <|channel|>final<|message|>, up to the next <|end|>,
 * <|return|>, <|call|>, <|start|> or <|channel|>, else the end: a message cut by
 * grpo.max_new_tokens as it stands), NULL when it has none; off, *final = NULL. Both malloc'd. */
void reward_texts(const reward_harmony *h, const tsr_tokenizer *tok, const int32_t *ids, int n,
                  char **text, char **final);
/* The text the built-in rewards (and the format reward) read of q: harmony's final (NULL: no
 * answer, scored 0), else the completion. */
const char *reward_seen(const reward_req *q);

/* The final answer of a completion (reward.extract, reward.marker): its bytes in text (a pointer
 * into it and *n), trimmed. Exposed for the tests and `tessera eval`'s generation tasks. */
const char *reward_extract(const tsr_config *cfg, const char *text, size_t *n);
/* Is the answer (n bytes) equal to want (reward.compare)? */
int reward_equal(const tsr_config *cfg, const char *answer, size_t n, const char *want);

#endif
