/* model_ring.h — context parallelism (parallel.context; docs/parallelism.md): a sequence split
 * over the N ranks of a context group, and ring attention over the group.
 *
 * The zig-zag split: a sequence of T positions is cut into 2N chunks of c = T / 2N, and rank r of
 * the group holds chunks r and 2N-1-r, in that order, as its local sequence of Tl = T / N
 * positions. Under a causal mask chunk k's queries see k + 1 chunks of keys, so every rank's two
 * chunks see 2N + 1 chunks together: the same attention work on every rank.
 */
#ifndef TSR_MODEL_RING_H
#define TSR_MODEL_RING_H

#include <stddef.h>
#include <stdint.h>

/* Position in the whole sequence of local position t of rank r (T positions, N ranks). */
int ring_position(int N, int r, int T, int t);
/* local (B, T/N) = rank r's zig-zag share of full (B, T), elements of elem bytes */
void ring_split(void *local, const void *full, size_t elem, int B, int N, int r, int T);
/* full (B, T) from every rank's share, all (N, B, T/N) in rank order */
void ring_join(void *full, const void *all, size_t elem, int B, int N, int T);

#endif
