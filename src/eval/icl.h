/* icl.h — in-context-learning tasks in LLM Foundry's JSONL schemas, turned into token sequences
 * to score (docs/eval.md).
 *
 * Every example becomes one or more options, each a context and a continuation (token ids):
 *   multiple_choice {query, choices, gold}:           one option per choice, same context;
 *   language_modeling {context, continuation}:         one option (right when greedy decoding
 *                                                       reproduces every continuation token);
 *   schema {context_options, continuation, gold}:     one option per context, same continuation;
 *   generation_task_with_answers {context, answer, aliases}: one option (the context; the answer
 *                                                       is the continuation of few-shot examples),
 *                                                       the answer and its aliases kept as text.
 * The predicted option of multiple_choice and schema is the one whose continuation has the lowest
 * mean negative log-likelihood per token. fewshot other examples of the same file, chosen by a
 * seeded permutation, come first, each written out with its gold answer and separated by the
 * example delimiter; the continuation delimiter joins context and continuation. A context that
 * ends in a space gives that space to the continuation (BPE tokenizers put it in the word's token,
 * as the model saw it in training).
 */
#ifndef TSR_ICL_H
#define TSR_ICL_H

#include <stdint.h>

#include "config/config.h"
#include "tokenizer/tokenizer.h"

typedef struct icl_option {
    uint32_t *ids;  /* context then continuation */
    int n_ctx, n_cont;
} icl_option;

typedef struct icl_example {
    int n_opts, gold;
    icl_option *opts;
    char **answers;        /* generation_task_with_answers: the answer, then its aliases */
    int n_answers;
} icl_example;

typedef struct icl_task {
    tsr_icl_task_config cfg;
    int n;                 /* examples */
    icl_example *ex;
    double baseline;       /* expected accuracy of a random guess: mean 1 / options (LM: 0) */
} icl_task;

/* Reads cfg->path and tokenizes every example (and its few-shot prefix) with tok. Errors name the
 * file, the line and the field; returns 0 or TSR_EXIT_DATA. */
int icl_task_load(icl_task *t, const tsr_icl_task_config *cfg, const tsr_tokenizer *tok,
                  uint64_t seed);
void icl_task_free(icl_task *t);
/* Random-baseline rescaling (LLM Foundry's gauntlet): (acc - baseline) / (1 - baseline). */
double icl_rescale(double accuracy, double baseline);

#endif
