/* gen_sample.h — choosing the next token from a distribution: greedy, or temperature with top-k
 * and top-p (nucleus), deterministic from (seed, step).
 *
 * With temperature T > 0 the candidates are sorted by probability (ties: lower id first), cut to
 * the top k, weighted w_i = p_i^(1/T) (= softmax(logits / T) up to normalisation), then cut to the
 * shortest prefix whose weight reaches top_p of the total (at least one token); the pick is the
 * first candidate whose running weight exceeds u * (kept total), u = tsr_rand_uniform(seed,
 * GEN_RAND_STREAM, step). The trainer's end-of-run sample (src/train/sample.c) picks with it too
 * (top_p = 1), so both draw the same tokens from the same seed. It lives in the generation
 * library (src/generate/gen_batch.*, gen_sample.*), below both `tessera generate` and the trainer.
 */
#ifndef TSR_GEN_SAMPLE_H
#define TSR_GEN_SAMPLE_H

#include <stdint.h>

/* The random stream of the draws: u at step s is tsr_rand_uniform(seed, GEN_RAND_STREAM, s). */
#define GEN_RAND_STREAM 0x5a3317eu

typedef struct gen_sampling {
    double temperature; /* 0 = greedy (argmax, ties: lower id) */
    int64_t top_k;      /* 0, or >= V: no cut */
    double top_p;       /* in (0, 1]; 1 = no cut */
    uint64_t seed;
} gen_sampling;

typedef struct gen_cand {
    float p;
    int32_t id;
} gen_cand;

/* The token after step `step` (0 = the first new token). probs (V) sums to 1; cand (V) and w (V)
 * are scratch. */
int32_t gen_pick(const float *probs, int V, const gen_sampling *s, uint64_t step, gen_cand *cand,
                 double *w);

#endif
