/* train_data.c — the training streams, the mix plan and batch loading (docs/data-mixing.md). */
#include "data/dataloader.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "jsonl.h"
#include "data/data_loss.h"
#include "data/s3.h"
#include "data/stage.h"
#include "dist.h"
#include "tokenizer/tokenizer.h"
#include "telemetry/account.h"
#include "telemetry/metrics.h"
#include "watchdog/stop.h"
#include "train/objective.h"
#include "data/dataloader_check.h"
#include "watchdog/watchdog.h"

static int check_dataset(const tsr_trainer *t, tsr_dataset *ds, const char *name, int first) {
    TSR_CHECK(train_data_check_model(t, ds, name, first)); /* ids, document end */
    if (!t->objective->prompts && dataset_n_samples(ds, t->T) == 0) { /* (grpo: prompts) */
        tsr_error("%s: %llu tokens hold no sample of seq_len + 1 = %d tokens", name,
                  (unsigned long long)dataset_n_tokens(ds), t->T + 1);
        return TSR_EXIT_DATA;
    }
    return 0;
}

/* 1 when the dataset's recorded tokenizer `made` and the run's `want` are the same one: the same
 * name, or the same file or directory by another path ("gpt2" standing for its directory, which
 * the start-up check found when the run names it). An unknown side ("") matches anything. */
static int same_tokenizer(const char *made, const char *want) {
    if (!made[0] || !want[0] || strcmp(made, want) == 0) return 1;
    char gpt2[4096], a[4096], b[4096];
    if (strcmp(want, "gpt2") == 0) {
        if (tokenizer_gpt2_dir(gpt2, sizeof gpt2)) return 0;
        want = gpt2;
    }
    return realpath(made, a) && realpath(want, b) && strcmp(a, b) == 0;
}

/* The dataset at config key `key` (data.train, data.val, data.streams[k].path): opened, checked
 * against the model, and its recorded tokenizer compared with data.tokenizer (a warning: the
 * tokens may still be right, e.g. the same files under another path). */
static int open_dataset(const tsr_trainer *t, tsr_dataset **ds, const char *path, const char *key) {
    const tsr_config *c = &t->cfg;
    int rc = dataset_open(ds, path, c->data.verify);
    if (!rc) rc = check_dataset(t, *ds, path, !strcmp(key, "data.train") ||
                                                  !strncmp(key, "data.streams[0]", 15));
    if (rc) {
        tsr_error("%s = \"%s\": the dataset (above) cannot be used for training; fix the path or "
                  "the data (tessera prep, tessera verify-data)", key, path);
        return rc;
    }
    const char *made = dataset_tokenizer(*ds), *want = c->data.tokenizer;
    if (!same_tokenizer(made, want) && t->dist.rank == 0)
        tsr_warn("%s = \"%s\" was made with the tokenizer \"%s\", but data.tokenizer = \"%s\": "
                 "the samples and ICL tasks will be decoded/encoded with another vocabulary than "
                 "the tokens'", key, path, made, want);
    return 0;
}

/* objective = dpo: the dataset at path holds preference pairs packed for this seq_len */
static int check_pairs(const tsr_trainer *t, const char *path, const char *key) {
    uint64_t pairs = 0, T = 0;
    int found = dataset_pairs_for(path, t->T, &pairs, &T);
    if (found == 0) {
        if (t->dist.rank == 0)
            tsr_error("%s = \"%s\": objective = \"dpo\" needs preference pairs (tessera prep "
                      "--format preference --pack SEQ_LEN; docs/dpo.md), and its index.tsv has no "
                      "preference_pairs note", key, path);
        return TSR_EXIT_USAGE;
    }
    if (found < 0) {
        if (t->dist.rank == 0)
            tsr_error("%s = \"%s\": its pairs are packed for seq_len %llu, this run has seq_len "
                      "= %d: set seq_len to it (or prep again with --pack %d)", key, path,
                      (unsigned long long)T, t->T, t->T);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

static char init_dir[4096]; /* train_data_init_dir's, "" for none */
static char recipe_tok[sizeof ((tsr_config *)0)->data.tokenizer]; /* the value it replaced */
static int replaced;

void train_data_init_dir(const char *dir, tsr_config *cfg, int set_on_cli) {
    snprintf(init_dir, sizeof init_dir, "%s", dir ? dir : "");
    tokenizer_files f;
    replaced = 0;
    if (!cfg || set_on_cli || !init_dir[0] || !strcmp(cfg->data.tokenizer, "auto") ||
        tokenizer_find_files(init_dir, &f) == TOKENIZER_FILES_NONE)
        return;
    snprintf(recipe_tok, sizeof recipe_tok, "%s", cfg->data.tokenizer);
    snprintf(cfg->data.tokenizer, sizeof cfg->data.tokenizer, "auto");
    replaced = 1;
}

/* "auto" with a dataset that records no tokenizer: the --init-from directory's, if it has one. */
static void init_dir_tokenizer(tsr_trainer *t) {
    tokenizer_files f;
    if (!init_dir[0] || tokenizer_find_files(init_dir, &f) == TOKENIZER_FILES_NONE) return;
    if (tsr_snprintf(t->cfg.data.tokenizer, sizeof t->cfg.data.tokenizer, "%s", init_dir)) {
        t->cfg.data.tokenizer[0] = '\0';
        tsr_warn("--init-from %.200s...: its path is too long for data.tokenizer (%zu bytes): no "
                 "tokenizer taken from it", init_dir, sizeof t->cfg.data.tokenizer - 1);
        return;
    }
    if (t->dist.rank == 0)
        printf("data.tokenizer = \"%s\": the --init-from directory's (the dataset records none)"
               "%s%s%s\n", init_dir, replaced ? "; the recipe's \"" : "",
               replaced ? recipe_tok : "",
               replaced ? "\" gives way to it (--set data.tokenizer=... keeps one)" : "");
}

/* Rank 0's text (n bytes; n < 0: none) handed to every rank: n returned, *text allocated on the
 * others (n >= 0). In pieces of 1 GiB (MPI counts are ints). Every rank. */
static int64_t bcast_text(const tsr_trainer *t, char **text, int64_t n) {
    dist_bcast(&n, sizeof n, 0);
    if (n < 0) return n;
    if (t->dist.rank != 0) *text = tsr_malloc((size_t)n + 1);
    for (int64_t off = 0; off < n; off += 1 << 30)
        dist_bcast(*text + off, (size_t)(n - off < (1 << 30) ? n - off : (1 << 30)), 0);
    (*text)[n] = '\0';
    return n;
}

/* An object-store dataset's index fetched once, by rank 0, and handed to every rank
 * (dataset_index_preset): one GET per dataset and job instead of two per rank. A fetch that fails
 * presets nothing: each rank's dataset_open then fetches again and reports why. Every rank. */
static void share_index(const tsr_trainer *t, const char *path) {
    char *text = NULL;
    size_t len = 0;
    int64_t n = -1;
    if (!s3_is_url(path)) return;
    if (t->dist.rank == 0) {
        tsr_log_mute(1); /* the fault is dataset_open's to report */
        if (dataset_index_fetch(path, &text, &len) == 0) n = (int64_t)len;
        tsr_log_mute(t->dist.rank != 0);
    }
    n = bcast_text(t, &text, n);
    if (n >= 0) dataset_index_preset(path, text, (size_t)n);
    free(text);
}

int train_data_fetch_shared(const tsr_trainer *t, const char *dir, const char *name, size_t max,
                            char **text, size_t *len) {
    int64_t n = -TSR_EXIT_DATA;
    *text = NULL;
    if (t->dist.rank == 0) {
        size_t got = 0;
        int rc = dataset_object_fetch(dir, name, max, text, &got);
        n = rc ? -(int64_t)rc : (int64_t)got;
    }
    n = bcast_text(t, text, n);
    if (n < 0) return (int)-n;
    *len = (size_t)n;
    return 0;
}

void train_data_share_indexes(const tsr_trainer *t) {
    const tsr_config *c = &t->cfg;
    for (int k = 0; k < c->data.n_streams; k++) share_index(t, c->data.streams[k].path);
    if (!c->data.n_streams) share_index(t, c->data.train);
    if (c->data.val[0]) share_index(t, c->data.val);
}

int train_data_tokenizer(tsr_trainer *t) {
    tsr_config *c = &t->cfg;
    const char *path = c->data.n_streams ? c->data.streams[0].path : c->data.train;
    tsr_dataset *ds = NULL;
    const int automatic = !strcmp(c->data.tokenizer, "auto");
    if (automatic) c->data.tokenizer[0] = '\0'; /* none, unless the dataset names one */
    tsr_log_mute(1); /* a dataset that does not open is train_data_open's to report */
    int rc = dataset_open(&ds, path, 0);
    tsr_log_mute(t->dist.rank != 0);
    if (rc) return 0;
    const char *made = dataset_tokenizer(ds), *want = c->data.tokenizer;
    if (automatic && !made[0]) {
        init_dir_tokenizer(t);
    } else if (automatic) {
        snprintf(c->data.tokenizer, sizeof c->data.tokenizer, "%s", made);
        if (t->dist.rank == 0)
            printf("data.tokenizer = \"%s\": the dataset's (%s/index.tsv)\n", made, path);
    } else if (want[0] && !same_tokenizer(made, want) &&
               c->data.tokenizer_mismatch == TSR_TOK_MISMATCH_ERROR) {
        tsr_error("data.tokenizer = \"%s\", but %s was made with the tokenizer \"%s\" (its "
                  "index.tsv): the samples and ICL tasks would be decoded and encoded with another "
                  "vocabulary than the tokens'; leave data.tokenizer out (\"auto\") to take the "
                  "dataset's, or set data.tokenizer_mismatch = \"allow\" to use this one", want,
                  path, made);
        rc = TSR_EXIT_USAGE;
    }
    dataset_close(ds);
    return rc;
}

/* 1 when the batches need their segment starts (attn_mask = document and a stream records them);
 * a stream that records them under attn_mask = causal is warned about. */
static int data_segments(const tsr_trainer *t) {
    int segments = 0;
    for (int k = 0; k < t->data.n_streams; k++) {
        if (!dataset_has_segments(t->data.streams[k])) continue;
        segments = 1;
        if (t->cfg.model.attn_mask != TSR_MASK_DOCUMENT && t->dist.rank == 0)
            tsr_warn("%s = \"%s\" holds packed examples (tessera prep --pack) and model.attn_mask "
                     "= \"causal\" lets each attend to the examples before it in its sample: "
                     "set model.attn_mask = \"document\" to keep them apart (docs/prep.md "
                     "\"Packing\")", t->cfg.data.n_streams ? "data.streams[].path" : "data.train",
                     t->data.stream_paths[k]);
    }
    return segments && t->cfg.model.attn_mask == TSR_MASK_DOCUMENT;
}

int train_data_open(tsr_trainer *t) {
    const tsr_config *c = &t->cfg;
    t->data.n_streams = c->data.n_streams ? c->data.n_streams : 1;
    for (int k = 0; k < t->data.n_streams; k++) {
        t->data.stream_names[k] = c->data.n_streams ? c->data.streams[k].name : "train";
        t->data.stream_paths[k] = c->data.n_streams ? c->data.streams[k].path : c->data.train;
        char key[160];
        if (c->data.n_streams) snprintf(key, sizeof key, "data.streams[%d].path (stream %s)", k,
                                        t->data.stream_names[k]);
        else snprintf(key, sizeof key, "data.train");
        TSR_CHECK(open_dataset(t, &t->data.streams[k], t->data.stream_paths[k], key));
        t->data.samplers[k].n = dataset_n_samples(t->data.streams[k], t->T);
        t->data.samplers[k].seed = mix_stream_seed((uint64_t)c->seed, k);
        t->data.samplers[k].shuffle = c->data.shuffle;
    }
    if (t->objective->pairs) { /* (dpo) pairs, whole in a sample each (docs/dpo.md) */
        TSR_CHECK(check_pairs(t, c->data.train, "data.train"));
        t->data.samplers[0].pairs = 1;
    }
    t->data.train = t->data.streams[0];
    t->data.sampler = t->data.samplers[0];
    if (c->data.val[0]) {
        TSR_CHECK(open_dataset(t, &t->data.val, c->data.val, "data.val"));
        if (t->objective->pairs) TSR_CHECK(check_pairs(t, c->data.val, "data.val"));
    }
    if (data_segments(t) && t->objective->segment_starts)
        t->data.starts = tsr_malloc((size_t)t->per_rank * t->T);
    t->data.slot_stream = tsr_malloc((size_t)t->per_rank * sizeof *t->data.slot_stream);
    t->data.slot_pos = tsr_malloc((size_t)t->per_rank * sizeof *t->data.slot_pos);
    t->data.row_sample = tsr_malloc((size_t)t->per_rank * sizeof *t->data.row_sample);
    return 0;
}

/* Stream k's base weight: its proportion, or its samples per epoch (repeat x size, choose). */
static double base_weight(const tsr_trainer *t, int k) {
    const tsr_stream_config *s = &t->cfg.data.streams[k];
    if (!t->cfg.data.n_streams) return 1.0;
    if (s->kind == TSR_MIX_PROPORTION) return s->value;
    if (s->kind == TSR_MIX_REPEAT) return round(s->value * (double)t->data.samplers[k].n);
    return s->value;
}

uint64_t train_data_epoch_samples(const tsr_trainer *t) {
    if (t->cfg.data.n_streams == 0) return t->data.samplers[0].n;
    double sum = 0;
    for (int k = 0; k < t->data.n_streams; k++)
        sum += t->cfg.data.streams[k].kind == TSR_MIX_PROPORTION ? (double)t->data.samplers[k].n
                                                                 : base_weight(t, k);
    return sum >= 1 ? (uint64_t)sum : 1;
}

int train_data_plan(tsr_trainer *t) {
    const tsr_data_config *dc = &t->cfg.data;
    double w[TSR_MAX_PHASES + 1][TSR_MAX_STREAMS];
    int64_t start[TSR_MAX_PHASES + 1];
    int np = 1;
    int64_t prev_at = 0;
    start[0] = 0;
    for (int k = 0; k < t->data.n_streams; k++) w[0][k] = base_weight(t, k);
    for (int i = 0; i < dc->n_phases; i++) {
        const tsr_phase_config *ph = &dc->phases[i];
        int64_t at = ph->at_percent >= 0
                         ? (int64_t)floor((double)t->total_steps * ph->at_percent / 100.0)
                         : duration_to_steps(ph->at, t->cfg.global_batch, t->cfg.seq_len,
                                             train_data_epoch_samples(t));
        /* a first phase at step 0 replaces the base weights; any other must start after the
         * phase before it (percents of a short run can round onto the same step) */
        int p = at == 0 && i == 0 ? 0 : np++;
        if (i > 0 && at <= prev_at) {
            tsr_error("%s: data.curriculum[%d] starts at step %lld, not after data.curriculum[%d] "
                      "(step %lld): list the phases in increasing `at`, at least one step apart",
                      t->cfg.source, i, (long long)at, i - 1, (long long)prev_at);
            return TSR_EXIT_USAGE;
        }
        prev_at = at;
        start[p] = at;
        for (int k = 0; k < t->data.n_streams; k++) {
            double b = base_weight(t, k), v = ph->w[k];
            /* proportion phases give weights in the stream's own unit: a repeat stream's value is
             * a repeat factor (x its size), a choose stream's a sample count */
            if (ph->kind == TSR_PHASE_PROPORTION && dc->streams[k].kind == TSR_MIX_REPEAT)
                v = round(v * (double)t->data.samplers[k].n);
            w[p][k] = !ph->named[k] ? b : ph->kind == TSR_PHASE_PROPORTION ? v : b * v;
        }
    }
    char why[256];
    if (mix_build(&t->data.mix, t->data.n_streams, np, start, (const double(*)[TSR_MAX_STREAMS])w,
                  t->cfg.global_batch, (uint64_t)t->cfg.seed, why, sizeof why) != 0) {
        tsr_error("%s: data.mix / data.curriculum: %s", t->cfg.source, why);
        return TSR_EXIT_USAGE;
    }
    if (t->dist.rank == 0 && dc->n_streams) {
        for (int p = 0; p < np; p++) {
            printf("data mix from step %lld:", (long long)start[p]);
            for (int k = 0; k < t->data.n_streams; k++)
                printf(" %s %lld/%lld", t->data.stream_names[k], (long long)t->data.mix.count[p][k],
                       (long long)t->cfg.global_batch);
            printf(" (samples per global batch)\n");
        }
    }
    return 0;
}

int64_t train_data_read(const tsr_dataset *ds, const char *name, int T, uint64_t idx,
                           int32_t *inputs, int32_t *targets) {
    return data_read_or_die(ds, name, T, idx, inputs, targets);
}

/* model_forward over rows whose segments begin at starts (NULL: at the eot_tokens) */
static double forward(void *m, const int32_t *inputs, const int32_t *targets,
                      const uint8_t *starts, int B, int T) {
    return model_forward_starts(m, inputs, targets, starts, B, T);
}

double train_data_eval_loss(tsr_model *m, const tsr_dataset *ds, const char *name, int T, int B,
                            int64_t limit, const tsr_dist *d, int32_t *inputs, int32_t *targets,
                            uint64_t *samples) {
    return data_mean_loss(ds, name, T, B, limit, d, forward, m, inputs, targets,
                          m->cfg.attn_mask == TSR_MASK_DOCUMENT, samples);
}

/* TSR_FAULT="garbage:LO:HI" (test hook): is data batch d in [LO, HI)? */
static int garbage_batch(int64_t d) {
    const char *f = tsr_fault("garbage");
    long long lo, hi;
    return f && sscanf(f, "%lld:%lld", &lo, &hi) == 2 && d >= lo && d < hi;
}

static uint64_t hash64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

int64_t train_data_load(tsr_trainer *t, int64_t d) {
    int64_t lo = t->mesh.data.rank * t->per_rank, counted = 0; /* (the data rank's rows) */
    mix_slots(&t->data.mix, d, lo, lo + t->per_rank, t->data.slot_stream, t->data.slot_pos);
    int garbage = garbage_batch(d);
    memset(t->data.stream_loaded, 0, sizeof t->data.stream_loaded);
    for (int64_t i = 0; i < t->per_rank; i++) {
        int k = t->data.slot_stream[i];
        t->data.stream_loaded[k]++;
        uint64_t idx = sampler_index(&t->data.samplers[k], t->data.slot_pos[i]);
        t->data.row_sample[i] = idx;
        int32_t *in = t->data.inputs + i * t->T, *tg = t->data.targets + i * t->T;
        counted += train_data_read(t->data.streams[k], t->data.stream_paths[k], t->T, idx, in, tg);
        if (t->data.starts) /* (read above: a sample in range) */
            dataset_read_starts(t->data.streams[k], t->T, idx, t->cfg.model.eot_token,
                                t->data.starts + i * t->T);
        for (int j = 0; garbage && j < t->T; j++) {
            uint64_t h = hash64(((uint64_t)d * (uint64_t)t->cfg.global_batch + (uint64_t)(lo + i)) *
                                    (uint64_t)(t->T + 1) + (uint64_t)j);
            in[j] = (int32_t)(h % (uint64_t)t->model.V);
            if (tg[j] >= 0) tg[j] = (int32_t)((h >> 32) % (uint64_t)t->model.V);
        }
    }
    return counted;
}

void train_data_mix_tokens(const tsr_trainer *t, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (int k = 0; k < t->data.n_streams && o < n; k++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s=%lld", k ? "," : "", t->data.stream_names[k],
                              (long long)t->data.stream_seen[k] * t->T);
}

void train_data_reset_seen(tsr_trainer *t) {
    int64_t d = t->step + t->data.data_offset, lo[TSR_MAX_STREAMS], hi[TSR_MAX_STREAMS];
    mix_cumulative(&t->data.mix, d, t->data.stream_seen);
    for (int i = 0; i < t->guard.n_skips; i++) { /* windows a rollback skipped were not trained on */
        if (t->guard.skips[i][1] > d) continue;
        mix_cumulative(&t->data.mix, t->guard.skips[i][0], lo);
        mix_cumulative(&t->data.mix, t->guard.skips[i][1], hi);
        for (int k = 0; k < t->data.n_streams; k++) t->data.stream_seen[k] -= hi[k] - lo[k];
    }
}

void train_data_format_plan(const tsr_trainer *t, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (int p = 0; p < t->data.mix.n_phases && o < n; p++) {
        o += (size_t)snprintf(buf + o, n - o, "%s%lld:", p ? ";" : "",
                              (long long)t->data.mix.start[p]);
        for (int k = 0; k < t->data.n_streams && o < n; k++)
            o += (size_t)snprintf(buf + o, n - o, "%s%lld", k ? "," : "",
                                  (long long)t->data.mix.count[p][k]);
    }
}

/* ---- staging (docs/staging.md) ---- */

/* An object-store dataset at key = path without data.stage_to: refused (exit 1). */
static int need_stage_to(const tsr_trainer *t, const tsr_dataset *ds, const char *key,
                         const char *path) {
    if (!ds || !dataset_s3(ds) || t->cfg.data.stage_to[0]) return 0;
    tsr_error("%s = \"%s\": an object-store dataset is read from node-local copies: set "
              "data.stage_to to a node-local directory (docs/object-storage.md)", key, path);
    return TSR_EXIT_USAGE;
}

/* data.val on an object store: its stager wants every shard at once (a validation set is small:
 * it is staged whole, beside the first window, and kept for the run; docs/object-storage.md). */
static int val_stage_open(tsr_trainer *t) {
    tsr_dataset *ds = t->data.val;
    if (!ds || !dataset_s3(ds)) return 0;
    int rc = stager_open(&t->data.val_stager, ds, t->cfg.data.stage_to,
                         t->cfg.data.cache_limit_bytes, t->dist.local_rank == 0);
    if (rc) return rc;
    int n = dataset_n_shards(ds), *all = tsr_malloc((size_t)n * sizeof *all);
    for (int i = 0; i < n; i++) all[i] = i;
    stager_want(t->data.val_stager, all, n);
    free(all);
    return 0;
}

/* data.stage_wait is a wait under the hang watchdog: a timeout not above it takes a slow window
 * for a hang (rank 0 warns, as for grpo's reward.timeout) */
static void warn_stage_wait(const tsr_trainer *t) {
    const double wait = t->cfg.data.stage_wait, hang = t->cfg.watchdog.hang_timeout;
    if (t->dist.rank == 0 && wait > 0 && hang > 0 && hang <= wait)
        tsr_warn("watchdog.hang_timeout = %g s is not above data.stage_wait = %g s: a window "
                 "that waits that long for its copies is taken for a hang (exit 3); set "
                 "watchdog.hang_timeout above data.stage_wait (docs/staging.md)", hang, wait);
}

int train_data_stage_open(tsr_trainer *t) {
    const tsr_data_config *dc = &t->cfg.data;
    for (int k = 0; k < t->data.n_streams; k++)
        TSR_CHECK(need_stage_to(t, t->data.streams[k], t->cfg.data.n_streams ?
                                "data.streams[].path" : "data.train", t->data.stream_paths[k]));
    TSR_CHECK(need_stage_to(t, t->data.val, "data.val", t->cfg.data.val));
    if (!dc->stage_to[0]) return 0;
    warn_stage_wait(t);
    /* the global ranks on this node: their batches decide what the node stages */
    char *hosts = tsr_malloc((size_t)t->dist.world * sizeof t->dist.host);
    dist_allgather(t->dist.host, hosts, sizeof t->dist.host);
    t->data.node_ranks = tsr_malloc((size_t)t->dist.world * sizeof *t->data.node_ranks);
    for (int r = 0; r < t->dist.world; r++)
        if (!strncmp(hosts + (size_t)r * sizeof t->dist.host, t->dist.host, sizeof t->dist.host))
            t->data.node_ranks[t->data.n_node_ranks++] = r;
    free(hosts);
    int rc = 0;
    for (int k = 0; k < t->data.n_streams && !rc; k++)
        rc = stager_open(&t->data.stagers[k], t->data.streams[k], dc->stage_to, dc->cache_limit_bytes,
                         t->dist.local_rank == 0);
    if (!rc) rc = val_stage_open(t);
    /* one rank failing (a full or missing local disk) stops every rank */
    int64_t bad = rc != 0;
    dist_allreduce_sum_i64(&bad, 1);
    if (bad && !rc) rc = TSR_EXIT_USAGE;
    if (!rc && t->dist.rank == 0)
        printf("staging: %d dataset(s) to %s per node, windows of %lld steps, cache limit %s\n",
               t->data.n_streams, dc->stage_to, (long long)dc->stage_window,
               dc->cache_limit_bytes ? dc->cache_limit : "none");
    return rc;
}

/* The shards of stream k the node reads in data batches [a, b), in order of first use. */
static int window_shards(tsr_trainer *t, int k, int64_t a, int64_t b, int *out, unsigned char *seen) {
    int n = 0, n_shards = dataset_n_shards(t->data.streams[k]);
    memset(seen, 0, (size_t)n_shards);
    for (int64_t d = a; d < b; d++)
        for (int i = 0; i < t->data.n_node_ranks; i++) {
            int64_t lo = t->data.node_ranks[i] / t->mesh.N * t->per_rank; /* its data rank's */
            mix_slots(&t->data.mix, d, lo, lo + t->per_rank, t->data.slot_stream, t->data.slot_pos);
            for (int64_t j = 0; j < t->per_rank; j++) {
                if (t->data.slot_stream[j] != k) continue;
                uint64_t idx = sampler_index(&t->data.samplers[k], t->data.slot_pos[j]);
                int s = dataset_sample_shard(t->data.streams[k], t->T, idx);
                if (s >= 0 && !seen[s]) seen[s] = 1, out[n++] = s;
            }
        }
    return n;
}

/* At a window boundary: counters over all ranks since the last one, to the log (rank 0). */
static void stage_log(tsr_trainer *t, int64_t window, double waited) {
    int64_t v[7] = {0}; /* staged reads, in-place reads, files staged, ranks that staged, evicted,
                           skipped for space, cache bytes (max over ranks) */
    for (int k = 0; k < t->data.n_streams; k++) {
        tsr_stage_stats st;
        stager_stats(t->data.stagers[k], &st);
        v[0] += (int64_t)st.staged_reads;
        v[1] += (int64_t)st.in_place_reads;
        v[2] += (int64_t)st.files_staged;
        v[4] += (int64_t)st.files_evicted;
        v[5] += (int64_t)st.skipped_for_space;
        v[6] += (int64_t)st.cache_bytes;
    }
    v[3] = v[2] > 0;
    double mx[2] = {(double)v[6], waited + t->data.stage_fetch_wait};
    t->data.stage_fetch_wait = 0;
    dist_allreduce_sum_i64(v, 6);
    dist_allreduce_max_f64(mx, 2); /* also lines the ranks up after a data.stage_wait */
    int64_t reads = v[0] - t->data.stage_last[0], in_place = v[1] - t->data.stage_last[1];
    t->data.stage_last[0] = v[0], t->data.stage_last[1] = v[1];
    if (t->dist.rank != 0 || window == 0) return;
    if (t->out.metrics) {
        fprintf(t->out.metrics,
                "{\"event\": \"staging\", \"step\": %lld, \"window\": %lld, \"staged_reads\": "
                "%lld, \"in_place_reads\": %lld, \"files_staged\": %lld, \"ranks_staging\": %lld, "
                "\"files_evicted\": %lld, \"skipped_for_space\": %lld, \"cache_bytes\": %.0f, "
                "\"wait_s\": %.3f",
                (long long)t->step, (long long)window - 1, (long long)reads, (long long)in_place,
                (long long)v[2], (long long)v[3], (long long)v[4], (long long)v[5], mx[0], mx[1]);
        jsonl_end_record(t->out.metrics);
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
static int wait_round(const tsr_trainer *t, int64_t *v, int have, int want) {
    const int node = t->dist.local_rank == 0;
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
static void wait_note(tsr_trainer *t, const char *path, const char *part, int have, int want,
                      const int64_t *v) {
    char line[512], nodes[48] = "";
    snprintf(line, sizeof line, "%.300s, %s: %d of %d shards committed on this node", path, part,
             have, want);
    watchdog_detail(line);
    const double w = tsr_now() - t->data.wait_t0;
    if (t->dist.rank != 0 || w < t->data.wait_next_note) return;
    t->data.wait_next_note = w + WAIT_NOTE_EVERY;
    if (v[WV_NODES] > 1) snprintf(nodes, sizeof nodes, " (%lld nodes together)", (long long)v[WV_NODES]);
    printf("staging: waiting %.0f s so far for %s of %s: %lld of %lld shards committed%s\n", w,
           part, path, (long long)v[WV_HAVE], (long long)v[WV_WANT], nodes);
    fflush(stdout);
}

/* An object-store stream (s3://) is never read in place: every rank polls until the node's shards
 * list[0..n) (part: which) are local on every node, a wait_round every 20 ms; a shard that cannot
 * be staged (stager_local -1) stops the run with exit 2 naming the object, a stop request with
 * TSR_EXIT_REQUEUE (every rank). The wait is added to the next staging line's wait_s and printed
 * by rank 0 when it is over a second. */
static int wait_local(tsr_trainer *t, tsr_stager *s, const char *path, const char *part,
                      const int *list, int n) {
    double t0 = tsr_now();
    char why[1024] = "";
    int rc = 0;
    for (;;) {
        stager_poll(s);
        int m = stager_local(s, list, n, why, sizeof why);
        int64_t v[WV_COUNT] = {m > 0 ? m : 0, m < 0};
        int stop = wait_round(t, v, m < 0 ? 0 : n - m, n);
        if (v[WV_FAILED]) {
            if (m < 0) tsr_error("%s", why);
            tsr_error("%s: a shard could not be staged (above): stopping", path);
            return TSR_EXIT_DATA;
        }
        if (stop) rc = TSR_EXIT_REQUEUE;
        if (stop || !v[WV_MISSING]) break;
        wait_note(t, path, part, n - m, n, v);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    double w = tsr_now() - t0;
    dist_allreduce_max_f64(&w, 1);
    t->data.stage_fetch_wait += w;
    t->data.step_wait += w;
    if (!rc && w > 1 && t->dist.rank == 0)
        printf("staging: step %lld waited %.1f s for the shards of %s\n", (long long)t->step, w,
               path);
    return rc;
}

/* One round of data.stage_wait on this rank: up to `slice` s for the first stream whose copies
 * are not done (its index in *busy, else -1); *have, *want: the window's shards committed of all
 * streams (stager_poll installs what is) */
static void copies_round(tsr_trainer *t, const window_wait *w, double slice, int *busy,
                         int *have, int *want) {
    char why[16];
    *busy = -1, *have = *want = 0;
    for (int k = 0; k < t->data.n_streams; k++) {
        if (stager_wait_idle_for(t->data.stagers[k], *busy < 0 ? slice : 0) && *busy < 0)
            *busy = k;
        stager_poll(t->data.stagers[k]);
        int m = stager_local(t->data.stagers[k], w->list[k], w->n[k], why, sizeof why);
        *have += w->n[k] - (m > 0 ? m : 0);
        *want += w->n[k];
    }
}

/* data.stage_wait (a window after the first): each node's stager gives the copies announced a
 * window ago (this window's shards) up to data.stage_wait s to finish, in rounds of at most
 * WAIT_ROUND_S that every rank joins, so the ranks start the window together and a stop request
 * is answered within a round; when the time passes first, the stager warns and the readers go on
 * in place. Returns 0, or TSR_EXIT_REQUEUE on a stop request; *waited: the seconds it took. */
static int wait_copies(tsr_trainer *t, const window_wait *w, double *waited) {
    const double t0 = tsr_now(), limit = t->cfg.data.stage_wait;
    int late = 0, stop = 0;
    for (;;) {
        double left = limit - (tsr_now() - t0);
        int busy, have, want;
        copies_round(t, w, left < 0 ? 0 : left < WAIT_ROUND_S ? left : WAIT_ROUND_S, &busy,
                     &have, &want);
        late = busy >= 0 && tsr_now() - t0 >= limit;
        int64_t v[WV_COUNT] = {busy >= 0 && !late};
        stop = wait_round(t, v, have, want);
        if (stop || !v[WV_MISSING]) break;
        wait_note(t, t->data.stream_paths[busy < 0 ? 0 : busy], w->part, have, want, v);
    }
    if (late)
        tsr_warn("staging of window %lld not done after data.stage_wait=%g s; reading in place "
                 "meanwhile", (long long)w->window, limit);
    *waited = tsr_now() - t0;
    return stop ? TSR_EXIT_REQUEUE : 0;
}

/* The first window of this process: the validation set on an object store is local before it
 * goes on (it was asked for whole at train_data_stage_open), so an evaluation never waits. */
static int wait_val(tsr_trainer *t) {
    if (!t->data.val_stager) return 0;
    int n = dataset_n_shards(t->data.val), *all = tsr_malloc((size_t)n * sizeof *all);
    for (int i = 0; i < n; i++) all[i] = i;
    int rc = wait_local(t, t->data.val_stager, t->cfg.data.val, "the validation set (all its "
                        "shards)", all, n);
    free(all);
    return rc;
}

/* The window that starts at data batch d (W batches a window): its number and steps, and each
 * stream's shards of the rest of it and of the next one (window_wait; the caller frees list[k]) */
static void window_lists(tsr_trainer *t, window_wait *w, int64_t d, int64_t W) {
    const int64_t a = d / W * W;
    w->window = d / W;
    snprintf(w->part, sizeof w->part, "window %lld (steps %lld-%lld)", (long long)w->window,
             (long long)t->step + 1, (long long)(a + W - t->data.data_offset));
    for (int k = 0; k < t->data.n_streams; k++) {
        int n_shards = dataset_n_shards(t->data.streams[k]);
        unsigned char *seen = tsr_malloc((size_t)n_shards);
        w->list[k] = tsr_malloc(2 * (size_t)n_shards * sizeof *w->list[k]);
        w->n[k] = window_shards(t, k, d, a + W, w->list[k], seen);
        w->m[k] = window_shards(t, k, a + W, a + 2 * W, w->list[k] + w->n[k], seen);
        free(seen);
    }
}

/* A window's start: data.stage_wait's wait for the copies announced a window ago, the last
 * window's staging line, this window and the next announced (this one first: it may lag at the
 * very start), and an object-store stream's wait for this window's shards (the validation set's
 * too at the first window), all under the hang watchdog (WD_DATA_WAIT). Returns 0,
 * TSR_EXIT_DATA (a shard that cannot be staged) or TSR_EXIT_REQUEUE (a stop request). */
static int window_start(tsr_trainer *t, int64_t d, int64_t W) {
    window_wait w;
    window_lists(t, &w, d, W);
    t->data.wait_t0 = tsr_now();
    t->data.wait_next_note = WAIT_NOTE_FIRST;
    watchdog_phase(WD_DATA_WAIT, t->step);
    char meet[512]; /* (until a wait says what it waits for: the ranks' staging line) */
    snprintf(meet, sizeof meet, "%.300s, %s: the ranks meet at its start", t->data.stream_paths[0],
             w.part);
    watchdog_detail(meet);
    double waited = 0;
    int rc = 0;
    if (t->data.stage_started && t->cfg.data.stage_wait > 0) rc = wait_copies(t, &w, &waited);
    if (!rc) stage_log(t, t->data.stage_started ? w.window : 0, waited);
    for (int k = 0; k < t->data.n_streams; k++) {
        if (!rc) stager_want(t->data.stagers[k], w.list[k], w.n[k] + w.m[k]);
        if (!rc && dataset_s3(t->data.streams[k]))
            rc = wait_local(t, t->data.stagers[k], t->data.stream_paths[k], w.part, w.list[k],
                            w.n[k]);
        free(w.list[k]);
    }
    if (!rc && !t->data.stage_started) rc = wait_val(t);
    t->data.step_wait += waited;
    account_add(ACC_DATA, t->data.step_wait); /* the accounting's data part */
    watchdog_phase(WD_IDLE, t->step);
    t->data.stage_started = 1;
    return rc;
}

int train_data_stage_step(tsr_trainer *t) {
    if (!t->data.stagers[0]) return 0;
    int rc = 0;
    int64_t W = t->cfg.data.stage_window, d = t->step + t->data.data_offset;
    t->data.step_wait = 0;
    /* a window starts every W batches, and at the first step of this process (resume) */
    if (d % W == 0 || !t->data.stage_started) rc = window_start(t, d, W);
    for (int k = 0; k < t->data.n_streams; k++) stager_poll(t->data.stagers[k]);
    return rc;
}

void train_data_stage_end(tsr_trainer *t) {
    if (!t->data.stagers[0]) return;
    int64_t d = t->step + t->data.data_offset, W = t->cfg.data.stage_window;
    stage_log(t, (d - 1) / W + 1, 0); /* the last (maybe partial) window */
}

void train_data_close(tsr_trainer *t) {
    for (int k = 0; k < t->data.n_streams; k++) {
        stager_close(t->data.stagers[k]); /* before its dataset */
        if (t->data.streams[k]) dataset_close(t->data.streams[k]);
    }
    free(t->data.node_ranks);
    stager_close(t->data.val_stager); /* before its dataset */
    if (t->data.val) dataset_close(t->data.val);
    free(t->data.slot_stream);
    free(t->data.slot_pos);
    free(t->data.row_sample);
    free(t->data.starts);
}
