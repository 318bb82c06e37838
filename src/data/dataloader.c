/* dataloader.c — the loader's datasets, its shared fetches, the mix plan and a rank's rows of a
 * batch (dataloader.h; docs/dataloader.md, docs/data-mixing.md). Staging: dataloader_stage.c. */
#include "data/dataloader.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "data/dataloader_check.h"
#include "data/s3.h"
#include "data/stage.h"
#include "tokenizer/tokenizer.h"

static int check_dataset(const tsr_dataloader *dl, tsr_dataset *ds, const char *name, int first) {
    TSR_CHECK(dataloader_check_model(&dl->o, ds, name, first)); /* ids, document end */
    if (!dl->o.prompts && dataset_n_samples(ds, dl->o.T) == 0) { /* (grpo: prompts) */
        tsr_error("%s: %llu tokens hold no sample of seq_len + 1 = %d tokens", name,
                  (unsigned long long)dataset_n_tokens(ds), dl->o.T + 1);
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
static int open_dataset(const tsr_dataloader *dl, tsr_dataset **ds, const char *path,
                        const char *key) {
    const tsr_config *c = dl->o.cfg;
    int rc = dataset_open(ds, path, c->data.verify);
    if (!rc) rc = check_dataset(dl, *ds, path, !strcmp(key, "data.train") ||
                                                  !strncmp(key, "data.streams[0]", 15));
    if (rc) {
        tsr_error("%s = \"%s\": the dataset (above) cannot be used for training; fix the path or "
                  "the data (tessera prep, tessera verify-data)", key, path);
        return rc;
    }
    const char *made = dataset_tokenizer(*ds), *want = c->data.tokenizer;
    if (!same_tokenizer(made, want) && dl->o.dist->rank == 0)
        tsr_warn("%s = \"%s\" was made with the tokenizer \"%s\", but data.tokenizer = \"%s\": "
                 "the samples and ICL tasks will be decoded/encoded with another vocabulary than "
                 "the tokens'", key, path, made, want);
    return 0;
}

/* objective = dpo: the dataset at path holds preference pairs packed for this seq_len */
static int check_pairs(const tsr_dataloader *dl, const char *path, const char *key) {
    uint64_t pairs = 0, T = 0;
    int found = dataset_pairs_for(path, dl->o.T, &pairs, &T);
    if (found == 0) {
        if (dl->o.dist->rank == 0)
            tsr_error("%s = \"%s\": objective = \"dpo\" needs preference pairs (tessera prep "
                      "--format preference --pack SEQ_LEN; docs/dpo.md), and its index.tsv has no "
                      "preference_pairs note", key, path);
        return TSR_EXIT_USAGE;
    }
    if (found < 0) {
        if (dl->o.dist->rank == 0)
            tsr_error("%s = \"%s\": its pairs are packed for seq_len %llu, this run has seq_len "
                      "= %d: set seq_len to it (or prep again with --pack %d)", key, path,
                      (unsigned long long)T, dl->o.T, dl->o.T);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

static char init_dir[4096]; /* dataloader_init_dir's, "" for none */
static char recipe_tok[sizeof ((tsr_config *)0)->data.tokenizer]; /* the value it replaced */
static int replaced;

void dataloader_init_dir(const char *dir, tsr_config *cfg, int set_on_cli) {
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
static void init_dir_tokenizer(tsr_config *cfg, const tsr_dist *d) {
    tokenizer_files f;
    if (!init_dir[0] || tokenizer_find_files(init_dir, &f) == TOKENIZER_FILES_NONE) return;
    if (tsr_snprintf(cfg->data.tokenizer, sizeof cfg->data.tokenizer, "%s", init_dir)) {
        cfg->data.tokenizer[0] = '\0';
        tsr_warn("--init-from %.200s...: its path is too long for data.tokenizer (%zu bytes): no "
                 "tokenizer taken from it", init_dir, sizeof cfg->data.tokenizer - 1);
        return;
    }
    if (d->rank == 0)
        printf("data.tokenizer = \"%s\": the --init-from directory's (the dataset records none)"
               "%s%s%s\n", init_dir, replaced ? "; the recipe's \"" : "",
               replaced ? recipe_tok : "",
               replaced ? "\" gives way to it (--set data.tokenizer=... keeps one)" : "");
}

/* Rank 0's text (n bytes; n < 0: none) handed to every rank: n returned, *text allocated on the
 * others (n >= 0). In pieces of 1 GiB (MPI counts are ints). Every rank. */
static int64_t bcast_text(const tsr_dist *d, char **text, int64_t n) {
    dist_bcast(&n, sizeof n, 0);
    if (n < 0) return n;
    if (d->rank != 0) *text = tsr_malloc((size_t)n + 1);
    for (int64_t off = 0; off < n; off += 1 << 30)
        dist_bcast(*text + off, (size_t)(n - off < (1 << 30) ? n - off : (1 << 30)), 0);
    (*text)[n] = '\0';
    return n;
}

/* An object-store dataset's index fetched once, by rank 0, and handed to every rank
 * (dataset_index_preset): one GET per dataset and job instead of two per rank. A fetch that fails
 * presets nothing: each rank's dataset_open then fetches again and reports why. Every rank. */
static void share_index(const tsr_dist *d, const char *path) {
    char *text = NULL;
    size_t len = 0;
    int64_t n = -1;
    if (!s3_is_url(path)) return;
    if (d->rank == 0) {
        tsr_log_mute(1); /* the fault is dataset_open's to report */
        if (dataset_index_fetch(path, &text, &len) == 0) n = (int64_t)len;
        tsr_log_mute(d->rank != 0);
    }
    n = bcast_text(d, &text, n);
    if (n >= 0) dataset_index_preset(path, text, (size_t)n);
    free(text);
}

int dataloader_fetch_shared(const tsr_dist *d, const char *dir, const char *name, size_t max,
                            char **text, size_t *len) {
    int64_t n = -TSR_EXIT_DATA;
    *text = NULL;
    if (d->rank == 0) {
        size_t got = 0;
        int rc = dataset_object_fetch(dir, name, max, text, &got);
        n = rc ? -(int64_t)rc : (int64_t)got;
    }
    n = bcast_text(d, text, n);
    if (n < 0) return (int)-n;
    *len = (size_t)n;
    return 0;
}

void dataloader_share_indexes(const tsr_config *c, const tsr_dist *d) {
    for (int k = 0; k < c->data.n_streams; k++) share_index(d, c->data.streams[k].path);
    if (!c->data.n_streams) share_index(d, c->data.train);
    if (c->data.val[0]) share_index(d, c->data.val);
}

int dataloader_tokenizer(tsr_config *c, const tsr_dist *d) {
    const char *path = c->data.n_streams ? c->data.streams[0].path : c->data.train;
    tsr_dataset *ds = NULL;
    const int automatic = !strcmp(c->data.tokenizer, "auto");
    if (automatic) c->data.tokenizer[0] = '\0'; /* none, unless the dataset names one */
    const int was = tsr_log_muted(); /* (a quiet plan's trial, --fit: stays quiet) */
    tsr_log_mute(1); /* a dataset that does not open is dataloader_open's to report */
    int rc = dataset_open(&ds, path, 0);
    tsr_log_mute(was || d->rank != 0);
    if (rc) return 0;
    const char *made = dataset_tokenizer(ds), *want = c->data.tokenizer;
    if (automatic && !made[0]) {
        init_dir_tokenizer(c, d);
    } else if (automatic) {
        snprintf(c->data.tokenizer, sizeof c->data.tokenizer, "%s", made);
        if (d->rank == 0)
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
static int data_segments(const tsr_dataloader *dl) {
    const tsr_config *c = dl->o.cfg;
    int segments = 0;
    for (int k = 0; k < dl->n_streams; k++) {
        if (!dataset_has_segments(dl->streams[k])) continue;
        segments = 1;
        if (c->model.attn_mask != TSR_MASK_DOCUMENT && dl->o.dist->rank == 0)
            tsr_warn("%s = \"%s\" holds packed examples (tessera prep --pack) and model.attn_mask "
                     "= \"causal\" lets each attend to the examples before it in its sample: "
                     "set model.attn_mask = \"document\" to keep them apart (docs/prep.md "
                     "\"Packing\")", c->data.n_streams ? "data.streams[].path" : "data.train",
                     dl->stream_paths[k]);
    }
    return segments && c->model.attn_mask == TSR_MASK_DOCUMENT;
}

/* The streams (data.train alone: one, "train"; else data.mix's) opened and checked, their
 * samplers */
static int open_streams(tsr_dataloader *dl) {
    const tsr_config *c = dl->o.cfg;
    dl->n_streams = c->data.n_streams ? c->data.n_streams : 1;
    for (int k = 0; k < dl->n_streams; k++) {
        dl->stream_names[k] = c->data.n_streams ? c->data.streams[k].name : "train";
        dl->stream_paths[k] = c->data.n_streams ? c->data.streams[k].path : c->data.train;
        char key[160];
        if (c->data.n_streams) snprintf(key, sizeof key, "data.streams[%d].path (stream %s)", k,
                                        dl->stream_names[k]);
        else snprintf(key, sizeof key, "data.train");
        TSR_CHECK(open_dataset(dl, &dl->streams[k], dl->stream_paths[k], key));
        dl->samplers[k].n = dataset_n_samples(dl->streams[k], dl->o.T);
        dl->samplers[k].seed = mix_stream_seed((uint64_t)c->seed, k);
        dl->samplers[k].shuffle = c->data.shuffle;
    }
    return 0;
}

int dataloader_open(tsr_dataloader *dl, const dataloader_opts *o) {
    dl->o = *o;
    const tsr_config *c = o->cfg;
    TSR_CHECK(open_streams(dl));
    if (o->pairs) { /* (dpo) pairs, whole in a sample each (docs/dpo.md) */
        TSR_CHECK(check_pairs(dl, c->data.train, "data.train"));
        dl->samplers[0].pairs = 1;
    }
    dl->train = dl->streams[0];
    dl->sampler = dl->samplers[0];
    if (c->data.val[0]) {
        TSR_CHECK(open_dataset(dl, &dl->val, c->data.val, "data.val"));
        if (o->pairs) TSR_CHECK(check_pairs(dl, c->data.val, "data.val"));
    }
    const size_t rows = (size_t)o->per_rank;
    if (data_segments(dl) && o->segment_starts) dl->starts = tsr_malloc(rows * o->T);
    dl->slot_stream = tsr_malloc(rows * sizeof *dl->slot_stream);
    dl->slot_pos = tsr_malloc(rows * sizeof *dl->slot_pos);
    dl->row_sample = tsr_malloc(rows * sizeof *dl->row_sample);
    dl->inputs = tsr_malloc(rows * o->T * sizeof *dl->inputs);
    dl->targets = tsr_malloc(rows * o->T * sizeof *dl->targets);
    return 0;
}

void dataloader_set_samples(tsr_dataloader *dl, uint64_t n) {
    dl->sampler.n = dl->samplers[0].n = n;
}

/* Stream k's base weight: its proportion, or its samples per epoch (repeat x size, choose). */
static double base_weight(const tsr_dataloader *dl, int k) {
    const tsr_stream_config *s = &dl->o.cfg->data.streams[k];
    if (!dl->o.cfg->data.n_streams) return 1.0;
    if (s->kind == TSR_MIX_PROPORTION) return s->value;
    if (s->kind == TSR_MIX_REPEAT) return round(s->value * (double)dl->samplers[k].n);
    return s->value;
}

uint64_t dataloader_epoch_samples(const tsr_dataloader *dl) {
    const tsr_data_config *dc = &dl->o.cfg->data;
    if (dc->n_streams == 0) return dl->samplers[0].n;
    double sum = 0;
    for (int k = 0; k < dl->n_streams; k++)
        sum += dc->streams[k].kind == TSR_MIX_PROPORTION ? (double)dl->samplers[k].n
                                                         : base_weight(dl, k);
    return sum >= 1 ? (uint64_t)sum : 1;
}

/* Curriculum phase i's weights into w (its stream's unit: a proportion phase's value of a repeat
 * stream is a repeat factor, x its size; of a choose stream a sample count) */
static void phase_weights(const tsr_dataloader *dl, const tsr_phase_config *ph, double *w) {
    const tsr_data_config *dc = &dl->o.cfg->data;
    for (int k = 0; k < dl->n_streams; k++) {
        double b = base_weight(dl, k), v = ph->w[k];
        if (ph->kind == TSR_PHASE_PROPORTION && dc->streams[k].kind == TSR_MIX_REPEAT)
            v = round(v * (double)dl->samplers[k].n);
        w[k] = !ph->named[k] ? b : ph->kind == TSR_PHASE_PROPORTION ? v : b * v;
    }
}

/* The mix plan printed (rank 0, a mixture): each phase's samples per stream and global batch */
static void print_plan(const tsr_dataloader *dl, int np, const int64_t *start) {
    const tsr_config *c = dl->o.cfg;
    if (dl->o.dist->rank != 0 || !c->data.n_streams) return;
    for (int p = 0; p < np; p++) {
        printf("data mix from step %lld:", (long long)start[p]);
        for (int k = 0; k < dl->n_streams; k++)
            printf(" %s %lld/%lld", dl->stream_names[k], (long long)dl->mix.count[p][k],
                   (long long)c->global_batch);
        printf(" (samples per global batch)\n");
    }
}

int dataloader_plan(tsr_dataloader *dl, int64_t total_steps) {
    const tsr_config *c = dl->o.cfg;
    const tsr_data_config *dc = &c->data;
    double w[TSR_MAX_PHASES + 1][TSR_MAX_STREAMS];
    int64_t start[TSR_MAX_PHASES + 1];
    int np = 1;
    int64_t prev_at = 0;
    start[0] = 0;
    for (int k = 0; k < dl->n_streams; k++) w[0][k] = base_weight(dl, k);
    for (int i = 0; i < dc->n_phases; i++) {
        const tsr_phase_config *ph = &dc->phases[i];
        int64_t at = ph->at_percent >= 0
                         ? (int64_t)floor((double)total_steps * ph->at_percent / 100.0)
                         : duration_to_steps(ph->at, c->global_batch, c->seq_len,
                                             dataloader_epoch_samples(dl));
        /* a first phase at step 0 replaces the base weights; any other must start after the
         * phase before it (percents of a short run can round onto the same step) */
        int p = at == 0 && i == 0 ? 0 : np++;
        if (i > 0 && at <= prev_at) {
            tsr_error("%s: data.curriculum[%d] starts at step %lld, not after data.curriculum[%d] "
                      "(step %lld): list the phases in increasing `at`, at least one step apart",
                      c->source, i, (long long)at, i - 1, (long long)prev_at);
            return TSR_EXIT_USAGE;
        }
        prev_at = at;
        start[p] = at;
        phase_weights(dl, ph, w[p]);
    }
    char why[256];
    if (mix_build(&dl->mix, dl->n_streams, np, start, (const double(*)[TSR_MAX_STREAMS])w,
                  c->global_batch, (uint64_t)c->seed, why, sizeof why) != 0) {
        tsr_error("%s: data.mix / data.curriculum: %s", c->source, why);
        return TSR_EXIT_USAGE;
    }
    print_plan(dl, np, start);
    return 0;
}

int64_t dataloader_next(tsr_dataloader *dl, int64_t d) {
    const int T = dl->o.T;
    int64_t lo = dl->o.data_rank * dl->o.per_rank, counted = 0; /* (the data rank's rows) */
    mix_slots(&dl->mix, d, lo, lo + dl->o.per_rank, dl->slot_stream, dl->slot_pos);
    memset(dl->stream_loaded, 0, sizeof dl->stream_loaded);
    for (int64_t i = 0; i < dl->o.per_rank; i++) {
        int k = dl->slot_stream[i];
        dl->stream_loaded[k]++;
        uint64_t idx = sampler_index(&dl->samplers[k], dl->slot_pos[i]);
        dl->row_sample[i] = idx;
        int32_t *in = dl->inputs + i * T, *tg = dl->targets + i * T;
        counted += dataloader_read(dl->streams[k], dl->stream_paths[k], T, idx, in, tg);
        if (dl->starts) /* (read above: a sample in range) */
            dataset_read_starts(dl->streams[k], T, idx, dl->o.cfg->model.eot_token,
                                dl->starts + i * T);
    }
    return counted;
}

uint64_t dataloader_index(const tsr_dataloader *dl, int64_t d, int64_t j) {
    const uint64_t GB = (uint64_t)dl->o.cfg->global_batch;
    return sampler_index(&dl->sampler, (uint64_t)d * GB + (uint64_t)j);
}

void dataloader_mix_tokens(const tsr_dataloader *dl, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (int k = 0; k < dl->n_streams && o < n; k++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s=%lld", k ? "," : "", dl->stream_names[k],
                              (long long)dl->stream_seen[k] * dl->o.T);
}

void dataloader_reset_seen(tsr_dataloader *dl, int64_t d, const int64_t (*skips)[2], int n) {
    int64_t lo[TSR_MAX_STREAMS], hi[TSR_MAX_STREAMS];
    mix_cumulative(&dl->mix, d, dl->stream_seen);
    for (int i = 0; i < n; i++) { /* windows a rollback skipped were not trained on */
        if (skips[i][1] > d) continue;
        mix_cumulative(&dl->mix, skips[i][0], lo);
        mix_cumulative(&dl->mix, skips[i][1], hi);
        for (int k = 0; k < dl->n_streams; k++) dl->stream_seen[k] -= hi[k] - lo[k];
    }
}

void dataloader_format_plan(const tsr_dataloader *dl, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (int p = 0; p < dl->mix.n_phases && o < n; p++) {
        o += (size_t)snprintf(buf + o, n - o, "%s%lld:", p ? ";" : "",
                              (long long)dl->mix.start[p]);
        for (int k = 0; k < dl->n_streams && o < n; k++)
            o += (size_t)snprintf(buf + o, n - o, "%s%lld", k ? "," : "",
                                  (long long)dl->mix.count[p][k]);
    }
}

void dataloader_close(tsr_dataloader *dl) {
    for (int k = 0; k < dl->n_streams; k++) {
        stager_close(dl->stagers[k]); /* before its dataset */
        if (dl->streams[k]) dataset_close(dl->streams[k]);
    }
    free(dl->node_ranks);
    stager_close(dl->val_stager); /* before its dataset */
    if (dl->val) dataset_close(dl->val);
    tsr_free_all(dl->slot_stream, dl->slot_pos, dl->row_sample, dl->starts, dl->inputs,
                 dl->targets);
}
