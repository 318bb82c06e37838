/* icl_score.h — scoring in-context-learning tasks (icl.h) with a model, the examples split over
 * the ranks. Shared by `tessera eval` and the trainer's periodic evaluation (docs/eval.md).
 *
 * Dimensions: B rows per forward pass (micro_batch, at most ICL_MAX_ROWS), T = seq_len.
 * An option (context + continuation, icl.h) fills one row: the context is cut from the left to
 * fit T + 1 tokens, the targets are its continuation tokens only; its score is the mean negative
 * log-likelihood per continuation token. An example's options go through the model B at a time
 * (rows past the last option repeat one and are not read). Rank r of W scores examples i with
 * i % W == r; the counts correct and scored are summed over the ranks as doubles (integers below
 * 2^53: exact), so the accuracies do not depend on W.
 *
 *   accuracy = correct / examples                   (NaN without examples)
 *   rescaled = icl_rescale(accuracy, baseline)      (LLM Foundry's gauntlet, icl.h)
 *   gauntlet = mean of the tasks' rescaled accuracies, summed in task order
 *
 * generation_task_with_answers: this rank's examples completed together by the batched generator
 * (generate/gen_batch.h; greedy, at most ICL_GEN_TOKENS tokens, ending at the end-of-text id or the
 * task's example delimiter), the text cut at the delimiter, right when it equals the answer or an
 * alias after LLM Foundry's normalisation (lower case, ASCII punctuation and the articles a, an,
 * the removed, white space collapsed). Needs m's full weights on the CPU (m->params, no sharded
 * source, no device hooks: train_icl.c refuses the task otherwise).
 */
#ifndef TSR_ICL_SCORE_H
#define TSR_ICL_SCORE_H

#include <stdint.h>

#include "config/config.h"
#include "dist/dist.h"
#include "eval/icl.h"
#include "model/model.h"

#define ICL_MAX_ROWS 64       /* rows per forward pass at most (per-row scores live on the stack) */
#define ICL_DEFAULT_SEED 1234 /* few-shot order: `tessera eval --seed`'s default, the trainer's */
#define ICL_GEN_TOKENS 64     /* generation tasks: the longest completion */

typedef struct icl_suite {
    const tsr_tokenizer *tok; /* the caller's (generation tasks decode their completions) */
    int n;                /* tasks */
    icl_task *tasks;      /* (n) tokenized, in the order of icl_tasks */
    int B, T;             /* rows per forward pass, sequence length */
    int32_t *in, *tg;     /* (B, T) inputs and targets of one pass; target -1 = not scored */
    float *loss;          /* (B, T) a pass's per-position losses (model_token_scores) */
    int32_t *greedy;      /* (B, T) and its greedy tokens */
} icl_suite;

typedef struct icl_scores {
    int n; /* tasks */
    double correct[TSR_MAX_ICL_TASKS], examples[TSR_MAX_ICL_TASKS]; /* summed over the ranks */
    double accuracy[TSR_MAX_ICL_TASKS], rescaled[TSR_MAX_ICL_TASKS];
    double gauntlet; /* NaN without tasks */
} icl_scores;

/* Rows per forward pass for a recipe's micro_batch: micro_batch (1 when unset), at most
 * ICL_MAX_ROWS. Never more than micro_batch, so activations sized for training microbatches fit. */
int icl_rows(int64_t micro_batch);
/* Tokenizes the n tasks with tok, the caller's tokenizer opened from `tokenizer` (data.tokenizer,
 * named in messages; NULL tok: there is none), on every rank, the same work: the suite opens no
 * tokenizer itself, so a program that already holds one (the trainer's) reads it once. Checks
 * that every token id is below vocab (the model's vocabulary), and allocates the B x T scratch.
 * Nothing to do when n == 0. Errors name the key or the file (and line): exit 1 for a missing
 * tokenizer or one that does not fit the model, else what the loaders return (2 for a missing or
 * bad file). On error nothing stays allocated; tok is the caller's to free (the tasks hold ids). */
int icl_suite_open(icl_suite *s, const tsr_icl_task_config *tasks, int n,
                   const tsr_tokenizer *tok, const char *tokenizer, uint64_t seed, int vocab, int B,
                   int T);
/* Collective (every rank, same suite): scores every task with m's current weights. Writes only
 * m's activations (sized for at least B x T) and the suite's scratch. */
void icl_suite_score(icl_suite *s, tsr_model *m, const tsr_dist *d, icl_scores *out);
void icl_suite_close(icl_suite *s);

#endif
