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

#ifdef __cplusplus
}
#endif

#endif
