/* tcu_memtab.h — the sizes of the live device blocks, for tcu_mem_stats (cuda_ops.h).
 *
 * cudaFree does not say how large a block was, so the backend keeps each live block's size in
 * this table, keyed by its address: open addressing with linear probing, grown to stay at most
 * half full, removal by backward shift (no tombstones, so a long run of allocations and frees
 * never degrades it). Plain C on the host, so tests/unit/test_memtab.c checks it on any machine.
 * Not thread-safe: one host thread allocates (cuda_ops.h's one-stream-per-process rule).
 */
#ifndef TCU_MEMTAB_H
#define TCU_MEMTAB_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tcu_memtab {
    void **key;     /* (cap) live block addresses, NULL = empty slot */
    size_t *bytes;  /* (cap) their sizes */
    size_t cap;     /* a power of two, or 0 before the first block */
    size_t n;       /* live blocks */
    size_t live;    /* bytes of the live blocks */
    size_t peak;    /* the most live bytes at once */
} tcu_memtab;

/* Counts block p of `bytes` bytes. 0, or -1 when the host cannot grow the table (nothing
 * changed). p must be non-NULL and not live already. */
int tcu_memtab_add(tcu_memtab *t, void *p, size_t bytes);
/* Forgets block p: 0, or -1 when p is not live (freed twice, or never counted). */
int tcu_memtab_remove(tcu_memtab *t, const void *p);
/* Frees the table's own memory; live and peak stay as they were. */
void tcu_memtab_release(tcu_memtab *t);

/* The FP8 linear forward's scratch (tcu_fp8_linear.c) for an (N, IC) input and an (OC, IC)
 * weight: 256 bytes of scale slots, then each operand's E4M3 codes rounded up to 256 bytes. The
 * one formula for what the forward allocates and what the device memory plan counts
 * (gpu_model_fp8_scratch_bytes: the largest of the FP8 layers'). */
static inline size_t tcu_fp8_scratch_bytes(size_t N, size_t IC, size_t OC) {
    return 256 + (N * IC + 255) / 256 * 256 + (OC * IC + 255) / 256 * 256;
}

#ifdef __cplusplus
}
#endif

#endif
