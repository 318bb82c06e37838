/* dataloader_stage.c — the loader's staging (dataloader.h "staging"; docs/staging.md): the
 * stagers of the streams and of an object store's validation set, each window's shards announced
 * at its start, and an object store's wait for them (docs/object-storage.md "A slow store"): under
 * the hang watchdog, with progress lines, answering a stop request. */
#include "data/dataloader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "data/stage.h"
#include "jsonl.h"
#include "watchdog/stop.h"
#include "watchdog/watchdog.h"

/* An object-store dataset at key = path without data.stage_to: refused (exit 1). */
static int need_stage_to(const tsr_dataloader *dl, const tsr_dataset *ds, const char *key,
                         const char *path) {
    if (!ds || !dataset_s3(ds) || dl->o.cfg->data.stage_to[0]) return 0;
    tsr_error("%s = \"%s\": an object-store dataset is read from node-local copies: set "
              "data.stage_to to a node-local directory (docs/object-storage.md)", key, path);
    return TSR_EXIT_USAGE;
}

/* data.val on an object store: its stager wants every shard at once (a validation set is small:
 * it is staged whole, beside the first window, and kept for the run; docs/object-storage.md). */
static int val_stage_open(tsr_dataloader *dl) {
    tsr_dataset *ds = dl->val;
    if (!ds || !dataset_s3(ds)) return 0;
    int rc = stager_open(&dl->val_stager, ds, dl->o.cfg->data.stage_to,
                         dl->o.cfg->data.cache_limit_bytes, dl->o.dist->local_rank == 0);
    if (rc) return rc;
    int n = dataset_n_shards(ds), *all = tsr_malloc((size_t)n * sizeof *all);
    for (int i = 0; i < n; i++) all[i] = i;
    stager_want(dl->val_stager, all, n);
    free(all);
    return 0;
}

/* data.stage_wait is a wait under the hang watchdog: a timeout not above it takes a slow window
 * for a hang (rank 0 warns, as for grpo's reward.timeout) */
static void warn_stage_wait(const tsr_dataloader *dl) {
    const double wait = dl->o.cfg->data.stage_wait, hang = dl->o.cfg->watchdog.hang_timeout;
    if (dl->o.dist->rank == 0 && wait > 0 && hang > 0 && hang <= wait)
        tsr_warn("watchdog.hang_timeout = %g s is not above data.stage_wait = %g s: a window "
                 "that waits that long for its copies is taken for a hang (exit 3); set "
                 "watchdog.hang_timeout above data.stage_wait (docs/staging.md)", hang, wait);
}

/* the global ranks on this node: their batches decide what the node stages */
static void node_ranks(tsr_dataloader *dl) {
    const tsr_dist *d = dl->o.dist;
    char *hosts = tsr_malloc((size_t)d->world * sizeof d->host);
    dist_allgather(d->host, hosts, sizeof d->host);
    dl->node_ranks = tsr_malloc((size_t)d->world * sizeof *dl->node_ranks);
    for (int r = 0; r < d->world; r++)
        if (!strncmp(hosts + (size_t)r * sizeof d->host, d->host, sizeof d->host))
            dl->node_ranks[dl->n_node_ranks++] = r;
    free(hosts);
}

int dataloader_stage_open(tsr_dataloader *dl) {
    const tsr_data_config *dc = &dl->o.cfg->data;
    for (int k = 0; k < dl->n_streams; k++)
        TSR_CHECK(need_stage_to(dl, dl->streams[k], dc->n_streams ? "data.streams[].path"
                                                                  : "data.train",
                                dl->stream_paths[k]));
    TSR_CHECK(need_stage_to(dl, dl->val, "data.val", dc->val));
    if (!dc->stage_to[0]) return 0;
    warn_stage_wait(dl);
    node_ranks(dl);
    int rc = 0;
    for (int k = 0; k < dl->n_streams && !rc; k++)
        rc = stager_open(&dl->stagers[k], dl->streams[k], dc->stage_to, dc->cache_limit_bytes,
                         dl->o.dist->local_rank == 0);
    if (!rc) rc = val_stage_open(dl);
    /* one rank failing (a full or missing local disk) stops every rank */
    int64_t bad = rc != 0;
    dist_allreduce_sum_i64(&bad, 1);
    if (bad && !rc) rc = TSR_EXIT_USAGE;
    if (!rc && dl->o.dist->rank == 0)
        printf("staging: %d dataset(s) to %s per node, windows of %lld steps, cache limit %s\n",
               dl->n_streams, dc->stage_to, (long long)dc->stage_window,
               dc->cache_limit_bytes ? dc->cache_limit : "none");
    return rc;
}

/* The shards of stream k the node reads in data batches [a, b), in order of first use. */
static int window_shards(tsr_dataloader *dl, int k, int64_t a, int64_t b, int *out,
                         unsigned char *seen) {
    int n = 0, n_shards = dataset_n_shards(dl->streams[k]);
    memset(seen, 0, (size_t)n_shards);
    for (int64_t d = a; d < b; d++)
        for (int i = 0; i < dl->n_node_ranks; i++) {
            /* its data rank's */
            int64_t lo = mesh_data_rank(dl->o.mesh, dl->node_ranks[i]) * dl->o.per_rank;
            mix_slots(&dl->mix, d, lo, lo + dl->o.per_rank, dl->slot_stream, dl->slot_pos);
            for (int64_t j = 0; j < dl->o.per_rank; j++) {
                if (dl->slot_stream[j] != k) continue;
                uint64_t idx = sampler_index(&dl->samplers[k], dl->slot_pos[j]);
                int s = dataset_sample_shard(dl->streams[k], dl->o.T, idx);
                if (s >= 0 && !seen[s]) seen[s] = 1, out[n++] = s;
            }
        }
    return n;
}

/* At a window boundary: counters over all ranks since the last one, to the log (rank 0). */
static void stage_log(tsr_dataloader *dl, int64_t window, double waited) {
    int64_t v[7] = {0}; /* staged reads, in-place reads, files staged, ranks that staged, evicted,
                           skipped for space, cache bytes (max over ranks) */
    for (int k = 0; k < dl->n_streams; k++) {
        tsr_stage_stats st;
        stager_stats(dl->stagers[k], &st);
        v[0] += (int64_t)st.staged_reads;
        v[1] += (int64_t)st.in_place_reads;
        v[2] += (int64_t)st.files_staged;
        v[4] += (int64_t)st.files_evicted;
        v[5] += (int64_t)st.skipped_for_space;
        v[6] += (int64_t)st.cache_bytes;
    }
    v[3] = v[2] > 0;
    double mx[2] = {(double)v[6], waited + dl->stage_fetch_wait};
    dl->stage_fetch_wait = 0;
    dist_allreduce_sum_i64(v, 6);
    dist_allreduce_max_f64(mx, 2); /* also lines the ranks up after a data.stage_wait */
    int64_t reads = v[0] - dl->stage_last[0], in_place = v[1] - dl->stage_last[1];
    dl->stage_last[0] = v[0], dl->stage_last[1] = v[1];
    if (dl->o.dist->rank != 0 || window == 0) return;
    if (dl->metrics) {
        fprintf(dl->metrics,
                "{\"event\": \"staging\", \"step\": %lld, \"window\": %lld, \"staged_reads\": "
                "%lld, \"in_place_reads\": %lld, \"files_staged\": %lld, \"ranks_staging\": %lld, "
                "\"files_evicted\": %lld, \"skipped_for_space\": %lld, \"cache_bytes\": %.0f, "
                "\"wait_s\": %.3f",
                (long long)dl->at_step, (long long)window - 1, (long long)reads,
                (long long)in_place,
                (long long)v[2], (long long)v[3], (long long)v[4], (long long)v[5], mx[0], mx[1]);
        jsonl_end_record(dl->metrics);
    }
}

/* ---- the wait at a window's start (docs/object-storage.md "A slow store", docs/staging.md) ---- */

#define WAIT_NOTE_FIRST 5.0  /* s a wait lasts before its first progress line */
#define WAIT_NOTE_EVERY 10.0 /* s between its progress lines */
#define WAIT_ROUND_S 0.25    /* data.stage_wait: the longest round (a stop request waits one) */

/* A window's wait: its number, "window 2 (steps 11-15)", and each stream's shards the node reads
 * in the rest of it, then in the next window: list[k][0..n[k]), list[k][n[k]..n[k]+m[k]) */
typedef struct window_wait {
    int64_t window;
    char part[96];
    int *list[TSR_MAX_STREAMS], n[TSR_MAX_STREAMS], m[TSR_MAX_STREAMS];
} window_wait;

/* The figures of a round of a wait, summed over the ranks by wait_round */
enum { WV_MISSING, WV_FAILED, WV_STOP, WV_HAVE, WV_WANT, WV_NODES, WV_COUNT };

/* A round of a wait, every rank together: v[WV_MISSING] (shards this rank still waits for, or a
 * stager still copying) and v[WV_FAILED] as the caller set them, this rank's stop request
 * (SIGUSR1/SIGTERM) and, from each node's stager rank (local rank 0), that node's `have` of `want`
 * shards, all summed over the ranks. Returns 1 when any rank was asked to stop: every rank sees
 * it in the same round, and the stop's grace timer is cancelled as at a step boundary. */
static int wait_round(const tsr_dataloader *dl, int64_t *v, int have, int want) {
    const int node = dl->o.dist->local_rank == 0;
    v[WV_STOP] = stop_signalled();
    v[WV_HAVE] = node ? have : 0;
    v[WV_WANT] = node ? want : 0;
    v[WV_NODES] = node;
    dist_allreduce_sum_i64(v, WV_COUNT);
    if (v[WV_STOP]) stop_proceed();
    return v[WV_STOP] > 0;
}

/* While a wait lasts: what it waits for (path, part), for the hang watchdog's line (this node's
 * have of want shards), and from WAIT_NOTE_FIRST s on, every WAIT_NOTE_EVERY s, rank 0's progress
 * line (every node's: v, summed by wait_round) */
static void wait_note(tsr_dataloader *dl, const char *path, const char *part, int have, int want,
                      const int64_t *v) {
    char line[512], nodes[48] = "";
    snprintf(line, sizeof line, "%.300s, %s: %d of %d shards committed on this node", path, part,
             have, want);
    watchdog_detail(line);
    const double w = tsr_now() - dl->wait_t0;
    if (dl->o.dist->rank != 0 || w < dl->wait_next_note) return;
    dl->wait_next_note = w + WAIT_NOTE_EVERY;
    if (v[WV_NODES] > 1)
        snprintf(nodes, sizeof nodes, " (%lld nodes together)", (long long)v[WV_NODES]);
    printf("staging: waiting %.0f s so far for %s of %s: %lld of %lld shards committed%s\n", w,
           part, path, (long long)v[WV_HAVE], (long long)v[WV_WANT], nodes);
    fflush(stdout);
}

/* An object-store stream (s3://) is never read in place: every rank polls until the node's shards
 * list[0..n) (part: which) are local on every node, a wait_round every 20 ms; a shard that cannot
 * be staged (stager_local -1) stops the run with exit 2 naming the object, a stop request with
 * TSR_EXIT_REQUEUE (every rank). The wait is added to the next staging line's wait_s and printed
 * by rank 0 when it is over a second. */
static int wait_local(tsr_dataloader *dl, tsr_stager *s, const char *path, const char *part,
                      const int *list, int n) {
    double t0 = tsr_now();
    char why[1024] = "";
    int rc = 0;
    for (;;) {
        stager_poll(s);
        int m = stager_local(s, list, n, why, sizeof why);
        int64_t v[WV_COUNT] = {m > 0 ? m : 0, m < 0};
        int stop = wait_round(dl, v, m < 0 ? 0 : n - m, n);
        if (v[WV_FAILED]) {
            if (m < 0) tsr_error("%s", why);
            tsr_error("%s: a shard could not be staged (above): stopping", path);
            return TSR_EXIT_DATA;
        }
        if (stop) rc = TSR_EXIT_REQUEUE;
        if (stop || !v[WV_MISSING]) break;
        wait_note(dl, path, part, n - m, n, v);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    double w = tsr_now() - t0;
    dist_allreduce_max_f64(&w, 1);
    dl->stage_fetch_wait += w;
    dl->step_wait += w;
    if (!rc && w > 1 && dl->o.dist->rank == 0)
        printf("staging: step %lld waited %.1f s for the shards of %s\n", (long long)dl->at_step,
               w, path);
    return rc;
}

/* One round of data.stage_wait on this rank: up to `slice` s for the first stream whose copies
 * are not done (its index in *busy, else -1); *have, *want: the window's shards committed of all
 * streams (stager_poll installs what is) */
static void copies_round(tsr_dataloader *dl, const window_wait *w, double slice, int *busy,
                         int *have, int *want) {
    char why[16];
    *busy = -1, *have = *want = 0;
    for (int k = 0; k < dl->n_streams; k++) {
        if (stager_wait_idle_for(dl->stagers[k], *busy < 0 ? slice : 0) && *busy < 0)
            *busy = k;
        stager_poll(dl->stagers[k]);
        int m = stager_local(dl->stagers[k], w->list[k], w->n[k], why, sizeof why);
        *have += w->n[k] - (m > 0 ? m : 0);
        *want += w->n[k];
    }
}

/* data.stage_wait (a window after the first): each node's stager gives the copies announced a
 * window ago (this window's shards) up to data.stage_wait s to finish, in rounds of at most
 * WAIT_ROUND_S that every rank joins, so the ranks start the window together and a stop request
 * is answered within a round; when the time passes first, the stager warns and the readers go on
 * in place. Returns 0, or TSR_EXIT_REQUEUE on a stop request; *waited: the seconds it took. */
static int wait_copies(tsr_dataloader *dl, const window_wait *w, double *waited) {
    const double t0 = tsr_now(), limit = dl->o.cfg->data.stage_wait;
    int late = 0, stop = 0;
    for (;;) {
        double left = limit - (tsr_now() - t0);
        int busy, have, want;
        copies_round(dl, w, left < 0 ? 0 : left < WAIT_ROUND_S ? left : WAIT_ROUND_S, &busy,
                     &have, &want);
        late = busy >= 0 && tsr_now() - t0 >= limit;
        int64_t v[WV_COUNT] = {busy >= 0 && !late};
        stop = wait_round(dl, v, have, want);
        if (stop || !v[WV_MISSING]) break;
        wait_note(dl, dl->stream_paths[busy < 0 ? 0 : busy], w->part, have, want, v);
    }
    if (late)
        tsr_warn("staging of window %lld not done after data.stage_wait=%g s; reading in place "
                 "meanwhile", (long long)w->window, limit);
    *waited = tsr_now() - t0;
    return stop ? TSR_EXIT_REQUEUE : 0;
}

/* The first window of this process: the validation set on an object store is local before it
 * goes on (it was asked for whole at dataloader_stage_open), so an evaluation never waits. */
static int wait_val(tsr_dataloader *dl) {
    if (!dl->val_stager) return 0;
    int n = dataset_n_shards(dl->val), *all = tsr_malloc((size_t)n * sizeof *all);
    for (int i = 0; i < n; i++) all[i] = i;
    int rc = wait_local(dl, dl->val_stager, dl->o.cfg->data.val, "the validation set (all its "
                        "shards)", all, n);
    free(all);
    return rc;
}

/* The window that starts at data batch d (W batches a window): its number and steps, and each
 * stream's shards of the rest of it and of the next one (window_wait; the caller frees list[k]) */
static void window_lists(tsr_dataloader *dl, window_wait *w, int64_t d, int64_t W) {
    const int64_t a = d / W * W;
    w->window = d / W;
    snprintf(w->part, sizeof w->part, "window %lld (steps %lld-%lld)", (long long)w->window,
             (long long)dl->at_step + 1, (long long)(a + W - dl->data_offset));
    for (int k = 0; k < dl->n_streams; k++) {
        int n_shards = dataset_n_shards(dl->streams[k]);
        unsigned char *seen = tsr_malloc((size_t)n_shards);
        w->list[k] = tsr_malloc(2 * (size_t)n_shards * sizeof *w->list[k]);
        w->n[k] = window_shards(dl, k, d, a + W, w->list[k], seen);
        w->m[k] = window_shards(dl, k, a + W, a + 2 * W, w->list[k] + w->n[k], seen);
        free(seen);
    }
}

/* A window's start: data.stage_wait's wait for the copies announced a window ago, the last
 * window's staging line, this window and the next announced (this one first: it may lag at the
 * very start), and an object-store stream's wait for this window's shards (the validation set's
 * too at the first window), all under the hang watchdog (WD_DATA_WAIT). Returns 0,
 * TSR_EXIT_DATA (a shard that cannot be staged) or TSR_EXIT_REQUEUE (a stop request). */
static int window_start(tsr_dataloader *dl, int64_t d, int64_t W) {
    window_wait w;
    window_lists(dl, &w, d, W);
    dl->wait_t0 = tsr_now();
    dl->wait_next_note = WAIT_NOTE_FIRST;
    watchdog_phase(WD_DATA_WAIT, dl->at_step);
    char meet[512]; /* (until a wait says what it waits for: the ranks' staging line) */
    snprintf(meet, sizeof meet, "%.300s, %s: the ranks meet at its start", dl->stream_paths[0],
             w.part);
    watchdog_detail(meet);
    double waited = 0;
    int rc = 0;
    if (dl->stage_started && dl->o.cfg->data.stage_wait > 0) rc = wait_copies(dl, &w, &waited);
    if (!rc) stage_log(dl, dl->stage_started ? w.window : 0, waited);
    for (int k = 0; k < dl->n_streams; k++) {
        if (!rc) stager_want(dl->stagers[k], w.list[k], w.n[k] + w.m[k]);
        if (!rc && dataset_s3(dl->streams[k]))
            rc = wait_local(dl, dl->stagers[k], dl->stream_paths[k], w.part, w.list[k],
                            w.n[k]);
        free(w.list[k]);
    }
    if (!rc && !dl->stage_started) rc = wait_val(dl);
    dl->step_wait += waited;
    watchdog_phase(WD_IDLE, dl->at_step);
    dl->stage_started = 1;
    return rc;
}

int dataloader_stage_step(tsr_dataloader *dl, int64_t step, FILE *metrics) {
    if (!dl->stagers[0]) return 0;
    dl->at_step = step, dl->metrics = metrics;
    int rc = 0;
    int64_t W = dl->o.cfg->data.stage_window, d = dl->at_step + dl->data_offset;
    dl->step_wait = 0;
    /* a window starts every W batches, and at the first step of this process (resume) */
    if (d % W == 0 || !dl->stage_started) rc = window_start(dl, d, W);
    for (int k = 0; k < dl->n_streams; k++) stager_poll(dl->stagers[k]);
    return rc;
}

void dataloader_stage_end(tsr_dataloader *dl, int64_t step, FILE *metrics) {
    if (!dl->stagers[0]) return;
    dl->at_step = step, dl->metrics = metrics;
    int64_t d = dl->at_step + dl->data_offset, W = dl->o.cfg->data.stage_window;
    stage_log(dl, (d - 1) / W + 1, 0); /* the last (maybe partial) window */
}
