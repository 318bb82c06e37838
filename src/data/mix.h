/* mix.h — which stream and which sample fill each slot of a global batch when several datasets
 * are mixed (data.mix, data.curriculum; docs/data-mixing.md).
 *
 * The data stream is a sequence of global batches d = 0, 1, 2, ... of gb samples each. Phase p
 * covers batches [start[p], start[p+1]); in it every batch holds exactly count[p][k] samples of
 * stream k, the largest-remainder rounding of gb x w_k / sum(w) (ties to the lower stream index),
 * so each batch holds the scheduled proportions exactly and deterministically. Slot j of batch d
 * goes to the stream whose range holds q = sampler_permute(seed, d, gb, j) (the streams' samples
 * are spread over the batch, so every rank and microbatch sees the mix), and takes that stream's
 * sample position cum_k(d) + (q - range start), where cum_k(d) is the count of stream-k samples in
 * batches [0, d): O(phases), so resuming at any batch is O(1) in the run's length and independent
 * of the rank count. A position maps to a sample of the stream's dataset by its own sampler
 * (seed, epoch, position), as for a single dataset. With one stream the slot order is the
 * identity: the mix reduces exactly to the single-dataset order.
 */
#ifndef TSR_MIX_H
#define TSR_MIX_H

#include <stdint.h>

#include "config/config.h"

typedef struct tsr_mix {
    int n_streams, n_phases;
    int64_t gb;
    uint64_t seed;
    int64_t start[TSR_MAX_PHASES + 1];           /* start[0] = 0; batches */
    int64_t count[TSR_MAX_PHASES + 1][TSR_MAX_STREAMS];
} tsr_mix;

/* Builds the plan. w[p][k] >= 0: weight of stream k in phase p (phase 0 = the base weights);
 * start[p] strictly increasing from start[0] = 0. A phase whose weights sum to 0 is an error.
 * Returns 0, or -1 with why (a sentence naming the phase) in why. */
int mix_build(tsr_mix *m, int n_streams, int n_phases, const int64_t *start,
              const double (*w)[TSR_MAX_STREAMS], int64_t gb, uint64_t seed, char *why, size_t why_n);
/* The phase holding batch d. */
int mix_phase(const tsr_mix *m, int64_t d);
/* cum[k] = samples of stream k in batches [0, d). */
void mix_cumulative(const tsr_mix *m, int64_t d, int64_t *cum);
/* For slots [lo, hi) of batch d: stream[i] and position pos[i] in that stream's sample order. */
void mix_slots(const tsr_mix *m, int64_t d, int64_t lo, int64_t hi, int *stream, uint64_t *pos);
/* Largest-remainder apportionment of gb over weights w (n of them, sum > 0) into out. */
void mix_apportion(const double *w, int n, int64_t gb, int64_t *out);
/* The seed of stream k's own sampler (stream 0 keeps the run's seed). */
uint64_t mix_stream_seed(uint64_t seed, int k);

#endif
