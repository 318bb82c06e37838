/* grpo_int.h — what the files of objective = grpo share (grpo.c: the prompts and the rollouts;
 * grpo_loss.c: the objective's pass; grpo_ref.c: the KL reference). Internal to src/posttrain/.
 *
 * A row record: the header below, then the context (ctx_max int32: the EOT the prompt follows,
 * the prompt, the completion), then the completion's log-probabilities at the rollout (N floats);
 * rec bytes in all. A step's rows live in kept (global_batch x G records, every rank the same);
 * this rank trains on groups [q per_rank, (q + 1) per_rank) of them, q its data rank (a tensor
 * group's ranks share one: the rows are the same on each, the passes split).
 */
#ifndef TSR_GRPO_INT_H
#define TSR_GRPO_INT_H

#include <stdint.h>
#include <stdio.h>

#include "posttrain/grpo.h"
#include "posttrain/reward.h"

typedef struct grpo_row {
    uint64_t prompt;        /* its dataset index */
    int32_t pos, sample;    /* its group's position in the step (round x global_batch + j), g */
    int32_t n_prompt, n;    /* prompt tokens (after the EOT), completion tokens (>= 1) */
    int32_t stop, pass;     /* gen_stop; the reward's verdict */
    double reward, adv;     /* the reward (overlong penalty included), the advantage */
    double entropy;         /* summed over its tokens */
} grpo_row;

/* The records of one split of a prompts dataset: line k of its prompts.jsonl. */
typedef struct grpo_records {
    char *text;
    size_t *at;             /* (n + 1) line offsets */
    uint64_t n;
} grpo_records;

struct tsr_grpo {
    int P, G, N, ctx_max;   /* prompts' pack length, group size, max new tokens, P + N */
    double stats[GRPO_NSTATS]; /* the step's statistics (grpo.h GRPO_*) */
    double val_accuracy;    /* the last evaluation's pass@1 (-1: its reward failed) */
    double val_reward;      /* the last evaluation's mean reward */
    size_t rec;             /* bytes of a row record */
    grpo_records recs[2];   /* data.train's, data.val's */
    int32_t stop_ids[16];   /* what ends a completion: the end of text, the prompts' noted ids */
    int n_stop;
    reward_harmony harmony; /* the prompts' template is harmony: rewards read the final channel */
    int kv_said;            /* the rollout caches' size printed (the first generation) */
    reward_ctx rw;
    char *round, *kept;     /* (global_batch x G) records: a round's, the step's */
    double w_tok;           /* loss_agg token / constant: each token's weight; sequence: 0 */
    double w_row;           /* sequence: each row's weight (its tokens share it) */
    int update;             /* grpo_compute's passes since the rollout */
    int update_held;        /* a replay's recomputation: the step's own count, kept */
    int32_t *in, *tg;       /* (micro, T) a microbatch of rows */
    float *losses, *dl, *ref; /* (micro, T) */
    FILE *log;              /* rank 0: run_dir/completions.jsonl, once written to */
    float *ref_params;      /* grpo_ref.c: the initial weights (their flat layout or shard) */
    const tsr_ops *ops;     /* the host ops ref_params came from (freed with them) */
    struct tsr_fsdp *ref_fsdp; /* zero3 / hsdp: the reference's sharded source */
    uint32_t ref_crc;
};

static inline grpo_row *grpo_row_at(const tsr_grpo *g, char *base, size_t i) {
    return (grpo_row *)(base + i * g->rec);
}
static inline int32_t *grpo_ctx(grpo_row *r) { return (int32_t *)(r + 1); }
static inline float *grpo_logp(const tsr_grpo *g, grpo_row *r) {
    return (float *)(grpo_ctx(r) + g->ctx_max);
}

/* grpo_ref.c: the reference's log-probabilities of the microbatch's targets, ref (B*T, 0 where
 * no target): the base without adapters, or the initial weights. */
void grpo_ref_logps(const tsr_run *run, tsr_grpo *g, const int32_t *in, const int32_t *tg, int B,
                    float *ref);
void grpo_ref_free(tsr_grpo *g);

#endif
