/* prep_pack.c — `tessera prep --pack T`: whole examples in sample windows (see prep_pack.h for
 * the layout, docs/prep.md "Packing" for the rules and the diagram).
 *
 * The packer keeps the current window (T tokens) in memory and hands the writer one complete
 * window at a time, preceded by one leading EOT at the start of each shard. The writer was opened
 * with shards of 1 + m*T tokens, so it closes a shard exactly after the m-th window of it and
 * the next window opens a new shard, which gets its own leading EOT: samples never cross shards,
 * and every shard holds exactly m (the last one 1..m) whole samples. Preference pairs take two
 * windows each, one per example, and m is even: a pair never straddles two shards.
 */
#include "prep/prep_pack.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

struct prep_packer {
    tsr_dataset_writer *w;
    uint32_t eot;
    uint64_t T;          /* tokens per window */
    int paired;          /* preference pairs: one example per window, 2 windows per pair */
    uint8_t start;       /* DATASET_SEGMENT_BIT when the segment starts are marked, else 0 */
    uint64_t per_shard;  /* windows per shard: m */
    uint64_t in_shard;   /* windows written into the open shard, 0..m-1 */
    uint64_t fill;       /* tokens in the current window, 0..T */
    uint32_t *tok;       /* the current window (T) */
    uint8_t *mask;       /* its mask bytes (T) */
    pack_stats st;
};

uint64_t pack_shard_tokens(uint64_t n, uint64_t T, int paired) {
    uint64_t group = paired ? 2 * T : T; /* a pair's two windows stay in one shard */
    if (T == 0 || n < group + 1) return 0;
    return 1 + (n - 1) / group * group;
}

prep_packer *pack_open(tsr_dataset_writer *w, uint32_t eot, uint64_t T, uint64_t shard_tokens,
                       int paired, int segments) {
    prep_packer *p = tsr_calloc(1, sizeof *p);
    p->start = segments ? DATASET_SEGMENT_BIT : 0;
    p->w = w;
    p->eot = eot;
    p->T = T;
    p->paired = paired;
    p->per_shard = (shard_tokens - 1) / T;
    p->tok = tsr_malloc((size_t)T * sizeof *p->tok);
    p->mask = tsr_malloc((size_t)T);
    return p;
}

/* Fills the rest of the current window with EOT padding (mask 0) and writes it, after the
 * shard's leading EOT when it is the first window of a shard. */
static int window_close(prep_packer *p) {
    for (uint64_t k = p->fill; k < p->T; k++) {
        p->tok[k] = p->eot;
        p->mask[k] = k == p->fill ? p->start : 0; /* the padding is a segment of its own */
    }
    p->st.pad += p->T - p->fill;
    if (p->in_shard == 0) {
        if (dataset_writer_append(p->w, &p->eot, &p->start, 1)) return TSR_EXIT_DATA;
        p->st.pad++;
        p->st.tokens++;
    }
    if (dataset_writer_append(p->w, p->tok, p->mask, (size_t)p->T)) return TSR_EXIT_DATA;
    p->st.tokens += p->T;
    p->st.windows++;
    p->in_shard = p->in_shard + 1 == p->per_shard ? 0 : p->in_shard + 1;
    p->fill = 0;
    return 0;
}

/* Appends n tokens to the current window (the caller checked that they fit). */
static void window_put(prep_packer *p, const uint32_t *tok, const uint8_t *mask, size_t n) {
    memcpy(p->tok + p->fill, tok, n * sizeof *tok);
    memcpy(p->mask + p->fill, mask, n);
    for (size_t k = 0; k < n; k++) p->st.targets += mask[k];
    if (n) p->mask[p->fill] |= p->start; /* the example's first token starts its segment */
    p->fill += n;
}

/* The tokens of an n-token example that are written: all of them when it fits a window; else, as
 * LLM Foundry's collator truncates, its start (the prompt and the beginning of the response):
 * T-1 tokens, then one EOT of padding, so the window still ends with an EOT. The example's own
 * EOT is cut off: the model is not taught to stop where the cut happened. */
static size_t kept_tokens(const prep_packer *p, size_t n) {
    return (uint64_t)n > p->T ? (size_t)p->T - 1 : n;
}

static int has_target(const uint8_t *mask, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (mask[k]) return 1;
    return 0;
}

/* Writes the first `keep` tokens of an example alone into a window of their own, padded. */
static int window_alone(prep_packer *p, const uint32_t *tok, const uint8_t *mask, size_t keep) {
    if (p->fill && window_close(p)) return TSR_EXIT_DATA;
    window_put(p, tok, mask, keep);
    return window_close(p);
}

int pack_add(prep_packer *p, const uint32_t *tok, const uint8_t *mask, size_t n, pack_fate *fate) {
    *fate = PACK_WHOLE;
    if ((uint64_t)n > p->T) {
        /* Too long for any window: the kept start alone in a window. Without a target in it the
         * prompt alone fills the window, and there is nothing to learn: drop it. */
        size_t keep = kept_tokens(p, n);
        if (!has_target(mask, keep)) {
            *fate = PACK_DROPPED;
            p->st.dropped++;
            return 0;
        }
        *fate = PACK_TRUNCATED;
        p->st.truncated++;
        p->st.examples++;
        return window_alone(p, tok, mask, keep);
    }
    if (p->fill + n > p->T && window_close(p)) return TSR_EXIT_DATA;
    window_put(p, tok, mask, n);
    p->st.examples++;
    return p->fill == p->T ? window_close(p) : 0; /* full: its last token is the example's EOT */
}

int pack_add_pair(prep_packer *p, const uint32_t *tok, const uint8_t *mask, const size_t n[2],
                  pack_fate fate[2]) {
    const size_t at[2] = {0, n[0]};
    int dropped = 0;
    for (int k = 0; k < 2; k++) {
        size_t keep = kept_tokens(p, n[k]);
        fate[k] = !has_target(mask + at[k], keep) ? PACK_DROPPED
                  : keep < n[k]                   ? PACK_TRUNCATED : PACK_WHOLE;
        dropped |= fate[k] == PACK_DROPPED;
    }
    if (dropped) { /* a pair is trained on as a whole: never one answer without the other */
        p->st.pairs_dropped++;
        p->st.dropped += 2;
        return 0;
    }
    /* the packer holds only whole pairs, so the chosen example starts an even window (fill 0)
     * and, the shard holding an even number of windows, the rejected one follows in its shard */
    for (int k = 0; k < 2; k++) {
        p->st.truncated += fate[k] == PACK_TRUNCATED;
        p->st.examples++;
        if (window_alone(p, tok + at[k], mask + at[k], kept_tokens(p, n[k]))) return TSR_EXIT_DATA;
    }
    p->st.pairs++;
    return 0;
}

int pack_add_alone(prep_packer *p, const uint32_t *tok, const uint8_t *mask, size_t n,
                   pack_fate *fate) {
    *fate = PACK_WHOLE;
    if ((uint64_t)n >= p->T || !has_target(mask, n)) {
        *fate = PACK_DROPPED;
        p->st.dropped++;
        return 0;
    }
    p->st.examples++;
    return window_alone(p, tok, mask, n);
}

int pack_finish(prep_packer *p) {
    return p->fill ? window_close(p) : 0;
}

const pack_stats *pack_get_stats(const prep_packer *p) {
    return &p->st;
}

void pack_free(prep_packer *p) {
    if (!p) return;
    free(p->tok);
    free(p->mask);
    free(p);
}

/* ================================ the index note ================================ */

static int note_fail(const char *path, const char *what) {
    tsr_error("%s: %s failed: %s", path, what, strerror(errno));
    return TSR_EXIT_DATA;
}

int pack_note_lines(const char *dir, const char *lines) {
    char path[4096];
    if (tsr_snprintf(path, sizeof path, "%s/index.tsv", dir)) {
        tsr_error("%s: path too long", dir);
        return TSR_EXIT_DATA;
    }
    FILE *f = fopen(path, "rb");
    if (!f) return note_fail(path, "open");
    char *text = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len + 4096 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *nt = realloc(text, cap);
            if (!nt) tsr_die(TSR_EXIT_INTERNAL, "prep: out of memory (%zu bytes of index)", cap);
            text = nt;
        }
        got = fread(text + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(text);
        return note_fail(path, "read");
    }
    /* After the magic line and the comment lines right after it: the index's header comments. */
    size_t at = 0;
    do {
        const char *nl = memchr(text + at, '\n', len - at);
        at = nl ? (size_t)(nl - text) + 1 : len;
    } while (at < len && text[at] == '#');
    f = fopen(path, "wb");
    if (!f) {
        free(text);
        return note_fail(path, "rewrite");
    }
    int rc = 0;
    if (fwrite(text, 1, at, f) != at || fputs(lines, f) < 0 ||
        fwrite(text + at, 1, len - at, f) != len - at || fflush(f) != 0)
        rc = note_fail(path, "write");
    else if (fsync(fileno(f)) != 0)
        rc = note_fail(path, "fsync");
    if (fclose(f) != 0 && !rc) rc = note_fail(path, "close");
    free(text);
    return rc;
}

int pack_note_index(const prep_packer *p, const char *dir) {
    char lines[512];
    unsigned long long T = (unsigned long long)p->T;
    size_t n = (size_t)snprintf(lines, sizeof lines, "# packed_seq_len\t%llu\t(tessera prep --pack: "
                                "every example is whole inside one sample when seq_len = %llu; "
                                "docs/prep.md)\n", T, T);
    if (p->paired)
        snprintf(lines + n, sizeof lines - n, "# preference_pairs\t%llu\t(tessera prep --format "
                 "preference: samples 2i and 2i+1 are pair i's chosen and rejected answers; "
                 "docs/prep.md)\n", (unsigned long long)p->st.pairs);
    return pack_note_lines(dir, lines);
}
