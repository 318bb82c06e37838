/* data_sources.c — the data sources' identities kept in checkpoints and compared on resume: see
 * data_sources.h. */
#include "train/data_sources.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "data/data.h"
#include "data/mix.h"
#include "dist/dist.h"
#include "train/train_state.h"

#define MAX_SOURCES (TSR_MAX_STREAMS + 1)

/* A source of this run: its key ("data.train", "data.mix.NAME", "data.val"), path, identity
 * ("crc32c:XXXXXXXX shards:N tokens:N") and training stream (-1: data.val) */
typedef struct source {
    char key[96];
    char path[1100];
    char ident[80];
    int stream;
} source;

static void source_set(source *s, const char *key, const char *path, const tsr_dataset *ds,
                       int stream) {
    snprintf(s->key, sizeof s->key, "%s", key);
    snprintf(s->path, sizeof s->path, "%s", path);
    snprintf(s->ident, sizeof s->ident, "crc32c:%08x shards:%d tokens:%llu",
             dataset_index_crc(ds), dataset_n_shards(ds),
             (unsigned long long)dataset_n_tokens(ds));
    s->stream = stream;
}

/* This run's sources into s (MAX_SOURCES); returns how many */
static int sources_now(const tsr_trainer *t, source *s) {
    int n = 0;
    char key[96];
    for (int k = 0; k < t->data.n_streams; k++) {
        if (t->cfg.data.n_streams) snprintf(key, sizeof key, "data.mix.%.80s", t->data.stream_names[k]);
        else snprintf(key, sizeof key, "data.train");
        source_set(&s[n++], key, t->data.stream_paths[k], t->data.streams[k], k);
    }
    if (t->data.val) source_set(&s[n++], "data.val", t->cfg.data.val, t->data.val, -1);
    return n;
}

void data_sources_format(const tsr_trainer *t, char *buf, size_t n) {
    source s[MAX_SOURCES];
    const int m = sources_now(t, s);
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < m; i++) {
        int w = snprintf(buf + o, n - o, "%s %s %s\n", s[i].key, s[i].ident, s[i].path);
        if (w < 0 || (size_t)w >= n - o) {
            buf[o] = '\0'; /* (a whole line or none) */
            return;
        }
        o += (size_t)w;
    }
}

/* The checkpoint's record of key in saved (its data_sources): the identity into ident, the path
 * it had into path; 1 when there is one, else 0 */
static int saved_source(const char *saved, const char *key, char *ident, size_t ni, char *path,
                        size_t np) {
    for (const char *p = saved; *p;) {
        const char *e = strchr(p, '\n');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[1400], k[96], a[32], b[32], c[40];
        int off = 0;
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        p += len + (e ? 1 : 0);
        if (sscanf(line, "%95s %31s %31s %39s %n", k, a, b, c, &off) != 4 || strcmp(k, key) != 0)
            continue;
        tsr_snprintf(ident, ni, "%s %s %s", a, b, c); /* (a longer record: no match) */
        snprintf(path, np, "%s", line + off);
        return 1;
    }
    return 0;
}

/* 1 when source s is not the checkpoint's (saved): another identity, or a training stream the
 * checkpoint has no record of (a data.val it has none of is new, not changed) */
static int changed(const source *s, const char *saved) {
    char was[96], path[1100];
    if (!saved_source(saved, s->key, was, sizeof was, path, sizeof path)) return s->stream >= 0;
    return strcmp(was, s->ident) != 0;
}

/* With data.allow_changed: where changed source s goes on, into out */
static void position(const tsr_trainer *t, const source *s, char *out, size_t n) {
    if (s->stream < 0) {
        snprintf(out, n, "evaluations use this one");
        return;
    }
    int64_t cum[TSR_MAX_STREAMS];
    mix_cumulative(&t->data.mix, t->step + t->data.data_offset, cum);
    const uint64_t P = (uint64_t)cum[s->stream], N = t->data.samplers[s->stream].n;
    snprintf(out, n, "its sampler goes on at position %llu of the stream: epoch %llu, sample %llu "
             "of this dataset's %llu, in this dataset's order", (unsigned long long)P,
             (unsigned long long)(P / N), (unsigned long long)(P % N), (unsigned long long)N);
}

/* Names changed source s (on the first rank that found a change): an error, or with
 * data.allow_changed a warning with its sampler's position; split: other ranks read the
 * checkpoint's data (node-local copies differ), an error either way */
static void report(const tsr_trainer *t, const source *s, const char *saved, const char *ck_path,
                   int split) {
    char was[96] = "", then[1200] = "", where[300] = "", rank[160] = "";
    if (saved_source(saved, s->key, was, sizeof was, then, sizeof then))
        snprintf(where, sizeof where, "%s in the checkpoint", was);
    else
        snprintf(where, sizeof where, "no %s in the checkpoint's data_sources", s->key);
    if (split)
        snprintf(rank, sizeof rank, " on rank %d, while other ranks read the checkpoint's: the "
                 "ranks' copies differ (node-local copies?), whatever data.allow_changed says",
                 t->dist.rank);
    if (t->cfg.data.allow_changed && !split) {
        char pos[300];
        position(t, s, pos, sizeof pos);
        tsr_warn("data.allow_changed = true: %s = \"%s\" is not the data %s was saved with (%s "
                 "now, %s%s%s%s)%s; %s", s->key, s->path, ck_path, s->ident, where,
                 then[0] ? ", then at \"" : "", then, then[0] ? "\"" : "", rank, pos);
        return;
    }
    tsr_error("%s = \"%s\" is not the data %s was saved with: %s now, %s%s%s%s%s. A resume would "
              "continue the sampler's position on other data: restore that dataset, or set "
              "data.allow_changed = true to go on with this one (docs/training.md \"Resuming on "
              "the same data\")", s->key, s->path, ck_path, s->ident, where,
              then[0] ? " (then at \"" : "", then, then[0] ? "\")" : "", rank);
}

int data_sources_check(tsr_trainer *t, const char *saved, const char *ck_path) {
    source s[MAX_SOURCES];
    const int n = sources_now(t, s);
    char was[96], then[1100];
    if (!saved[0]) {
        if (t->dist.rank == 0)
            printf("resume: %s records no identity of its data sources (written before checkpoint "
                   "format 3, or by tessera ckpt import): the data could not be compared with the "
                   "data it was saved with\n", ck_path);
        return 0;
    }
    int mine = 0;
    for (int i = 0; i < n; i++) mine += changed(&s[i], saved);
    int first = mine ? t->dist.rank : INT_MAX; /* the first rank that sees a change reports */
    int all = mine > 0;                         /* ... and whether every rank does */
    dist_allreduce_min_int(&first, 1);
    dist_allreduce_min_int(&all, 1);
    for (int i = 0; i < n && t->dist.rank == 0; i++)
        if (s[i].stream < 0 && !saved_source(saved, s[i].key, was, sizeof was, then, sizeof then))
            printf("resume: %s = \"%s\" is new (%s has no data.val): not compared\n", s[i].key,
                   s[i].path, ck_path);
    if (first == INT_MAX) return 0;
    for (int i = 0; i < n && t->dist.rank == first; i++)
        if (changed(&s[i], saved)) report(t, &s[i], saved, ck_path, !all);
    return t->cfg.data.allow_changed && all ? 0 : TSR_EXIT_DATA;
}
