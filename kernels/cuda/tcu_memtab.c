/* tcu_memtab.c — the live device blocks' sizes (tcu_memtab.h). */
#include "tcu_memtab.h"

#include <stdint.h>
#include <stdlib.h>

/* The home slot of p: Fibonacci hashing of the address without its low 8 bits (cudaMalloc blocks
 * are 256-byte aligned, so those bits carry nothing). */
static size_t home(const void *p, size_t cap) {
    uint64_t h = ((uint64_t)(uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (cap - 1);
}

static void put(tcu_memtab *t, void *p, size_t bytes) {
    size_t i = home(p, t->cap);
    while (t->key[i]) i = (i + 1) & (t->cap - 1);
    t->key[i] = p;
    t->bytes[i] = bytes;
}

static int grow(tcu_memtab *t) {
    size_t cap = t->cap ? 2 * t->cap : 256;
    tcu_memtab g = *t;
    g.key = calloc(cap, sizeof *g.key);
    g.bytes = calloc(cap, sizeof *g.bytes);
    if (!g.key || !g.bytes || cap < t->cap) {
        free(g.key);
        free(g.bytes);
        return -1;
    }
    g.cap = cap;
    for (size_t i = 0; i < t->cap; i++)
        if (t->key[i]) put(&g, t->key[i], t->bytes[i]);
    free(t->key);
    free(t->bytes);
    *t = g;
    return 0;
}

int tcu_memtab_add(tcu_memtab *t, void *p, size_t bytes) {
    if (2 * (t->n + 1) > t->cap && grow(t)) return -1;
    put(t, p, bytes);
    t->n++;
    t->live += bytes;
    if (t->live > t->peak) t->peak = t->live;
    return 0;
}

int tcu_memtab_remove(tcu_memtab *t, const void *p) {
    if (!t->cap || !p) return -1;
    size_t i = home(p, t->cap);
    while (t->key[i] && t->key[i] != p) i = (i + 1) & (t->cap - 1);
    if (t->key[i] != p) return -1;
    t->live -= t->bytes[i];
    t->n--;
    /* backward shift: each later entry of the probe run moves into the hole unless its home
     * lies cyclically in (hole, j], where moving it would put it before its home */
    size_t hole = i;
    for (size_t j = (i + 1) & (t->cap - 1); t->key[j]; j = (j + 1) & (t->cap - 1)) {
        size_t h = home(t->key[j], t->cap);
        int stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
        if (stays) continue;
        t->key[hole] = t->key[j];
        t->bytes[hole] = t->bytes[j];
        hole = j;
    }
    t->key[hole] = NULL;
    t->bytes[hole] = 0;
    return 0;
}

void tcu_memtab_release(tcu_memtab *t) {
    free(t->key);
    free(t->bytes);
    t->key = NULL;
    t->bytes = NULL;
    t->cap = t->n = 0;
}
