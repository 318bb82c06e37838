/* gen_batch.h — batched generation: many sequences completed together over a KV cache of slots
 * (model.h tsr_kv_slots), on any backend with batched decoding (docs/generate.md "Batched
 * generation"; `tessera generate --prompts`, the GRPO rollouts).
 *
 * Up to `batch` sequences are decoded together, one new token each per step; a finished one
 * hands its slot to the next waiting sequence (its prompt fed alone, in chunks). Consecutive
 * sequences with the same prompt (the G samples of a GRPO prompt) feed it once: the first's cache
 * is copied into the others' slots. Each sequence samples from its own random stream, key =
 * gen_stream_key(seed, step, prompt, sample): token i is gen_pick's draw at step i with seed =
 * key. The products are batch-invariant (decoder.h dec_kv_slots), so a sequence's tokens, log-
 * probabilities and entropies are a function of its prompt, its key and the weights alone: the
 * same whatever batch, slot or rank it is decoded in, and whatever else is decoded beside it.
 */
#ifndef TSR_GEN_BATCH_H
#define TSR_GEN_BATCH_H

#include <stdint.h>

#include "model/decoder.h"
#include "generate/gen_sample.h"

struct tsr_tokenizer;

/* Why a completion ended. */
typedef enum gen_stop {
    GEN_STOP_EOS = 0, /* a stop id (end of text, end of turn): the last token is it */
    GEN_STOP_STRING,  /* the stop callback: a stop string ends the text */
    GEN_STOP_LENGTH,  /* max_new tokens */
    GEN_STOP_CONTEXT, /* the slot's positions (or the learned position table) are full */
    GEN_STOP_COUNT
} gen_stop;
extern const char *const gen_stop_names[GEN_STOP_COUNT]; /* "eos", "stop", "length", "context" */

/* One sequence: the prompt and its stream (in), the completion (out). */
typedef struct gen_seq {
    const int32_t *prompt; /* (n_prompt >= 1) */
    int n_prompt;
    uint64_t key;          /* the random stream (gen_stream_key) */
    int32_t *ids;          /* (max_new) the caller's: the new tokens */
    float *logp;           /* (max_new) or NULL: each token's log-probability under the model's
                            * distribution (temperature 1, no cut), from its softmax in fp32 */
    int n;                 /* tokens generated (stop ids included) */
    gen_stop stop;
    double entropy;        /* sum over its tokens of the entropy (nats) of the model's
                            * distribution each was drawn from */
} gen_seq;

typedef struct gen_batch_opts {
    gen_sampling sampling; /* temperature, top_k, top_p; its seed is unused (each key is) */
    int max_new;           /* >= 1 */
    const int32_t *stop_ids; /* ids that end a completion (kept as its last token), or NULL */
    int n_stop_ids;
    /* or NULL: 1 when the completion so far ends the sequence (a stop string) */
    int (*stop_cb)(void *ctx, const gen_seq *s);
    void *stop_ctx;
    int batch;             /* sequences decoded together (slots), >= 1 */
    int cap;               /* positions per slot: at least the longest prompt */
    /* or NULL: called after each decode step: sequences finished, tokens generated so far */
    void (*progress)(void *ctx, int64_t done, int64_t tokens);
    void *progress_ctx;
} gen_batch_opts;

/* A stop_cb on the completion's text: gen_text_stop with a gen_text_stop_ctx as stop_ctx ends a
 * sequence when match(arg, the text tok decodes its ids to, that text's length) is 1. Called from
 * several threads: match only reads. */
typedef struct gen_text_stop_ctx {
    const struct tsr_tokenizer *tok;
    int (*match)(const void *arg, const char *text, size_t len);
    const void *arg;
} gen_text_stop_ctx;
int gen_text_stop(void *ctx, const gen_seq *q);

/* The random stream of sample `sample` of prompt `prompt` at step `step`: a hash of the four. */
uint64_t gen_stream_key(uint64_t seed, uint64_t step, uint64_t prompt, uint64_t sample);

/* Completes seqs (n) on decoder d (its backend: batched decoding, dec_kv_slots); the caches are
 * allocated for the call. Returns the tokens generated. */
int64_t gen_batch_run(const tsr_decoder *d, const gen_batch_opts *o, gen_seq *seqs, int n);

/* Bytes gen_batch_run allocates on d's backend for o (the memory plan). */
size_t gen_batch_bytes(const tsr_decoder *d, const gen_batch_opts *o);

#endif
