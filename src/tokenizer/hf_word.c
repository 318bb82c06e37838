/* hf_word.c — one word's BPE with a heap, as transformers.js merges (hf_tok_internal.h hf_word):
 * the byte-level BPE of long pieces (hf_bpe.c) and the SentencePiece-style BPE (hf_spm.c) both
 * merge through it. The heap holds every adjacent pair the vocab merges, ordered by rank and then
 * by the left symbol's position; a pair goes stale when either side changed (checked on pop), so
 * a word of n symbols takes O(n log n). */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "tokenizer/hf_tok_internal.h"

static int before(const hf_pair *a, const hf_pair *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(hf_word *w, hf_pair p) {
    if (w->nheap == w->capheap) {
        w->capheap = w->capheap ? 2 * w->capheap : 256;
        w->heap = tsr_realloc(w->heap, w->capheap * sizeof *w->heap);
    }
    size_t i = w->nheap++;
    while (i > 0 && before(&p, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = p;
}

static hf_pair heap_pop(hf_word *w) {
    hf_pair top = w->heap[0], last = w->heap[--w->nheap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->nheap) break;
        if (c + 1 < w->nheap && before(&w->heap[c + 1], &w->heap[c])) c++;
        if (!before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->nheap) w->heap[i] = last;
    return top;
}

/* The pair (l, r) into the heap when the vocab merges it. */
static void offer(const hf_tok *t, hf_word *w, int32_t l, int32_t r) {
    if (l < 0 || r < 0 || w->id[l] == HF_NONE || w->id[r] == HF_NONE) return;
    uint32_t res, rank = hf_merge_find(t, w->id[l], w->id[r], &res);
    if (rank != HF_NONE)
        heap_push(w, (hf_pair){rank, (uint32_t)l, w->id[l], w->id[r], (uint32_t)r, res});
}

void hf_word_reserve(hf_word *w, size_t n) {
    if (n + 1 <= w->cap) return;
    w->cap = 2 * (n + 1);
    w->id = tsr_realloc(w->id, w->cap * sizeof *w->id);
    w->off = tsr_realloc(w->off, w->cap * sizeof *w->off);
    w->len = tsr_realloc(w->len, w->cap * sizeof *w->len);
    w->prev = tsr_realloc(w->prev, w->cap * sizeof *w->prev);
    w->next = tsr_realloc(w->next, w->cap * sizeof *w->next);
}

void hf_word_merge(const hf_tok *t, hf_word *w, size_t m) {
    w->nheap = 0;
    for (size_t i = 0; i < m; i++) w->prev[i] = (int32_t)i - 1, w->next[i] = (int32_t)i + 1;
    if (m) w->next[m - 1] = -1;
    for (size_t i = 0; i + 1 < m; i++) offer(t, w, (int32_t)i, (int32_t)i + 1);
    while (w->nheap) {
        hf_pair p = heap_pop(w);
        int32_t l = (int32_t)p.left, r = (int32_t)p.right;
        if (w->next[l] != r || w->id[l] != p.lid || w->id[r] != p.rid) continue; /* stale */
        w->id[l] = p.res;
        w->len[l] += w->len[r];
        w->next[l] = w->next[r];
        if (w->next[r] >= 0) w->prev[w->next[r]] = l;
        w->id[r] = HF_NONE, w->next[r] = -2; /* gone */
        offer(t, w, w->prev[l], l);
        offer(t, w, l, w->next[l]);
    }
}

void hf_word_free(hf_word *w) {
    free(w->id), free(w->off), free(w->len), free(w->prev), free(w->next), free(w->heap);
    memset(w, 0, sizeof *w);
}
