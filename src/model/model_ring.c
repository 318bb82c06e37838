/* model_ring.c — context parallelism's zig-zag split (model_ring.h; docs/parallelism.md). */
#include "model/model_ring.h"

#include <stdlib.h>
#include <string.h>


/* ---- the zig-zag split ---------------------------------------------------------------------- */

/* the chunk (of 2N) that local chunk k (0 or 1) of rank r is */
static int chunk_of(int N, int r, int k) { return k ? 2 * N - 1 - r : r; }

int ring_position(int N, int r, int T, int t) {
    const int c = T / (2 * N);
    return chunk_of(N, r, t >= c) * c + t % c;
}

void ring_split(void *local, const void *full, size_t elem, int B, int N, int r, int T) {
    const int c = T / (2 * N), Tl = T / N;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < 2; k++)
            memcpy((char *)local + ((size_t)b * Tl + (size_t)k * c) * elem,
                   (const char *)full + ((size_t)b * T + (size_t)chunk_of(N, r, k) * c) * elem,
                   (size_t)c * elem);
}

void ring_join(void *full, const void *all, size_t elem, int B, int N, int T) {
    const int c = T / (2 * N), Tl = T / N;
    for (int r = 0; r < N; r++)
        for (int b = 0; b < B; b++)
            for (int k = 0; k < 2; k++)
                memcpy((char *)full + ((size_t)b * T + (size_t)chunk_of(N, r, k) * c) * elem,
                       (const char *)all + (((size_t)r * B + b) * Tl + (size_t)k * c) * elem,
                       (size_t)c * elem);
}
