/* dataloader.h — the data loader: what a run reads, in llm.c's shape (dataloader_open, _next,
 * _close; docs/dataloader.md). It owns the run's datasets (data.train, or the streams of
 * data.mix with their curriculum, and data.val), the sampler of each, the mix plan, this rank's
 * rows of a global batch, the node-local staging of the shards (data.stage_to) and an object
 * store's windows (s3://: each window waits for its shards, under the hang watchdog, answering a
 * stop request), and the fetches rank 0 makes once for every rank (an object-store dataset's
 * index, a prompts file). The trainer reads its batches through it, GRPO its prompts, the
 * evaluations their splits; it knows the config, the world and this rank's place in it, nothing
 * of the trainer, the model or the objective but the kind of samples its datasets hold.
 *
 * Batch math (docs/architecture.md "Data flow", docs/training.md): global batch d of the stream
 * is global_batch samples, composed by the mix; data rank r of D takes rows [r per_rank,
 * (r + 1) per_rank) of it. The trainer's step s reads data batch d = s + data_offset (rollbacks
 * skip windows: the offset grows), so a batch is a function of the step: a resume is O(1). */
#ifndef TSR_DATALOADER_H
#define TSR_DATALOADER_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "data/data.h"
#include "data/mix.h"
#include "dist/dist.h"
#include "mesh/mesh.h"

struct tsr_stager;
struct tsr_tokenizer;

/* What a loader is opened with: the run it reads for. */
typedef struct dataloader_opts {
    const tsr_config *cfg;       /* data.*, seed, global_batch, seq_len and max_duration's units;
                                  * model.vocab_size, attn_mask and eot_token (the checks);
                                  * watchdog.hang_timeout (staging's warning); kept, not copied */
    const tsr_dist *dist;        /* the world: rank 0 reports, the node's ranks stage; kept */
    int T;                       /* a row's tokens (seq_len): a sample is T + 1 of them */
    int64_t per_rank;            /* this rank's rows of a global batch */
    int data_rank;               /* this rank's data rank (its rows' place in the batch) */
    const tsr_mesh *mesh;        /* the rank mesh: a node's ranks' data ranks (staging:
                                  * mesh_data_rank; a tensor or context group's ranks share their
                                  * rows); kept */
    int pairs;                   /* the datasets hold preference pairs (objective = dpo) */
    int prompts;                 /* the datasets hold prompts (objective = grpo) */
    int segment_starts;          /* the batch carries segment starts under attn_mask = document */
    const struct tsr_tokenizer *tok; /* names ids in the checks' messages; NULL: none */
} dataloader_opts;

/* The loader. data.train alone is one stream named "train"; data.mix lists several. */
typedef struct tsr_dataloader {
    dataloader_opts o;
    tsr_dataset *train, *val;    /* train = streams[0] */
    tsr_sampler sampler;         /* = samplers[0] */
    int n_streams;
    tsr_dataset *streams[TSR_MAX_STREAMS];
    const char *stream_names[TSR_MAX_STREAMS], *stream_paths[TSR_MAX_STREAMS];
    tsr_sampler samplers[TSR_MAX_STREAMS];
    tsr_mix mix;
    int64_t stream_seen[TSR_MAX_STREAMS];   /* samples trained on per stream (not skipped away) */
    int64_t stream_loaded[TSR_MAX_STREAMS]; /* this rank's samples per stream in the current batch */
    int *slot_stream;            /* (per_rank) scratch of dataloader_next */
    uint64_t *slot_pos;
    struct tsr_stager *stagers[TSR_MAX_STREAMS]; /* data.stage_to, else NULL */
    int *node_ranks, n_node_ranks; /* global ranks on this node (staging) */
    int stage_started;
    int64_t stage_last[2];       /* staged / in-place reads at the last window boundary */
    double stage_fetch_wait;     /* s (max over ranks): an object-store window waited for its
                                  * shards since the last staging line */
    double step_wait;            /* s this step waited for data before it began */
    double wait_t0, wait_next_note; /* a window's wait: when it began; its next progress line, s */
    int64_t at_step;             /* the trainer's step at the window being started (its lines) */
    FILE *metrics;               /* where the staging lines go (rank 0's metrics.jsonl), or NULL */
    struct tsr_stager *val_stager; /* data.val on an object store: staged whole, else NULL */
    int64_t data_offset;         /* data batch of step s (0-based) = s + data_offset (rollbacks) */
    int32_t *inputs, *targets;   /* this rank's batch (per_rank, T) */
    uint8_t *starts;             /* its segment starts (per_rank, T) when attn_mask = document
                                  * and a stream records them (tsr_model.starts), else NULL */
    uint64_t *row_sample;        /* (per_rank) the sample index of each row of the batch in its
                                  * stream (objective = dpo: row 2j's / 2 is the pair) */
} tsr_dataloader;

/* ---- before the loader: the start's shared fetches and the tokenizer's choice ---- */

/* The indexes of the run's datasets on an object store (data.train or the mixture's streams,
 * data.val): each fetched once for the job by rank 0 and broadcast (dataset_index_preset), so
 * every later dataset_open of them needs no request (docs/object-storage.md). Collective: every
 * rank calls it, first thing at start. */
void dataloader_share_indexes(const tsr_config *cfg, const tsr_dist *d);
/* Object `name` of the object-store dataset dir (e.g. a GRPO prompts dataset's prompts.jsonl),
 * at most max bytes: fetched once, by rank 0, and broadcast. 0 with *text (malloc'd,
 * NUL-terminated, *len bytes) on every rank, or the same exit status on every rank after rank 0's
 * tsr_error naming the object. Every rank, together. */
int dataloader_fetch_shared(const tsr_dist *d, const char *dir, const char *name, size_t max,
                            char **text, size_t *len);
/* The Hugging Face directory the run starts from (--init-from HF_DIR; before the loader): its
 * tokenizer files (tokenizer_find_files), if any, are data.tokenizer "auto"'s when the dataset
 * records no tokenizer (docs/hf.md "Import"). A directory with tokenizer files supplies the
 * tokenizer: a data.tokenizer the recipe file names (cfg; "" included) is set back to "auto",
 * unless a --set gave it (set_on_cli). cfg NULL: the directory only. */
void dataloader_init_dir(const char *dir, tsr_config *cfg, int set_on_cli);
/* data.tokenizer from the first training dataset's index (the tokenizer tessera prep made it with)
 * when the recipe leaves it out ("auto"), else, when that records none, the directory of
 * dataloader_init_dir's tokenizer; one the recipe names that differs from the dataset's is an
 * error (exit 1) unless data.tokenizer_mismatch = "allow". 0 or TSR_EXIT_USAGE after tsr_error
 * (every rank alike). */
int dataloader_tokenizer(tsr_config *cfg, const tsr_dist *d);

/* ---- the loader ---- */

/* Opens data.train (or every data.mix stream) and data.val, checks each against the run
 * (dataloader_check.h) and the kind of samples o names, allocates the batch. 0 or an exit code
 * after reporting. */
int dataloader_open(tsr_dataloader *dl, const dataloader_opts *o);
/* Samples per epoch of the training data (the `ep` unit): one stream's samples; for a mix, the
 * sum of the streams' epoch sizes (docs/data-mixing.md). */
uint64_t dataloader_epoch_samples(const tsr_dataloader *dl);
/* objective = grpo: the training stream holds n prompts (its records): its sampler draws from
 * them. */
void dataloader_set_samples(tsr_dataloader *dl, uint64_t n);
/* Builds the mix plan once the run's steps (total_steps) are known; prints it (rank 0). */
int dataloader_plan(tsr_dataloader *dl, int64_t total_steps);
/* Loads this rank's rows of global batch d into inputs / targets (starts, row_sample, the
 * per-stream counts); returns the count of counted targets. */
int64_t dataloader_next(tsr_dataloader *dl, int64_t d);
/* The sample index of position j (0 .. global_batch - 1) of global batch d of the one stream
 * (no mixture: the stream's sampler over its positions d x global_batch + j). */
uint64_t dataloader_index(const tsr_dataloader *dl, int64_t d, int64_t j);
/* "name=tokens,...": tokens trained on from each stream (stream_seen x seq_len). */
void dataloader_mix_tokens(const tsr_dataloader *dl, char *buf, size_t n);
/* stream_seen from the plan at data batch d (the step's), less the windows rollbacks skipped
 * (skips[i] = data batches [lo, hi), n of them; at start, after a resume or a rollback); steps
 * then add what they actually loaded. */
void dataloader_reset_seen(tsr_dataloader *dl, int64_t d, const int64_t (*skips)[2], int n);
/* The plan as "start:count,count;start:...", phase starts in data batches: stored in checkpoints
 * so a resume with a plan that moved (a changed max_duration moves percent phases) is refused. */
void dataloader_format_plan(const tsr_dataloader *dl, char *buf, size_t n);
void dataloader_close(tsr_dataloader *dl);

/* ---- splits read whole (dataloader_split.c): a validation set, tessera eval's datasets, the
 * pairs and prompts an objective reads by index ---- */

/* Reads sample idx of ds (named name in errors); a sample the reader refuses (a token id beyond
 * the vocabulary in a dataset opened without verify) is seen by this rank only, so it aborts
 * every rank (tsr_die). Returns the count of counted targets. */
int64_t dataloader_read(const tsr_dataset *ds, const char *name, int T, uint64_t idx,
                        int32_t *inputs, int32_t *targets);
/* The dataset at dir checked whole (dataset_open with verify; its ids against a model of vocab
 * rows: dataloader_check_ids); an object-store one fetched whole first (dataloader_fetch_all,
 * kept). 0 with *ds open, or an exit code after tsr_error (nothing open). */
int dataloader_open_split(tsr_dataset **ds, const char *dir, int vocab);
/* An object-store dataset (dataset_s3): every shard fetched through s3.c, s3_connections() at a
 * time, into a private temporary directory, and checked as a local one (header, size, CRC32C,
 * token ids, mask bytes); keep: reads then come from these copies until dataset_close (their
 * files are unlinked at once), else nothing is kept (tessera verify-data). The directory is
 * removed. 0, or TSR_EXIT_DATA after tsr_error naming the object. */
int dataloader_fetch_all(tsr_dataset *ds, int keep);
/* The summed loss of B rows of T tokens (inputs, targets), as model_forward returns it. B = 0
 * (inputs, targets NULL): a call that scores nothing, made by the ranks whose range is shorter
 * until each rank has made as many calls as the one with the longest (a sharded model's forward
 * is collective: model_forward's idle forward); 0. The loader knows no model: its caller hands
 * the forward over. */
typedef double (*dataloader_forward_fn)(void *model, const int32_t *inputs,
                                        const int32_t *targets, const uint8_t *starts, int B,
                                        int T);
/* Mean loss over the counted targets of the first `limit` samples of ds (0 = all), split over the
 * ranks in contiguous ranges, in calls of forward(model, ...) of up to B rows (the model's
 * activations must hold B x T), the same number of calls on every rank (the idle ones last);
 * inputs/targets hold B x T. doc (the model keeps segments apart: attn_mask = document) and a
 * dataset that records segments (dataset_has_segments): forward gets the rows' segment starts
 * (dataset_read_starts), else NULL. Collective (sums over d's ranks); *samples (may be NULL) =
 * the samples evaluated. NaN when no target counted. A long one says how far it is, every
 * TSR_PROGRESS_S seconds on rank 0 ("eval: NAME: 24/64 batches (37%), ..."; progress.h). The
 * trainer's periodic evaluation and `tessera eval`. */
double dataloader_mean_loss(const tsr_dataset *ds, const char *name, int T, int B, int64_t limit,
                            const tsr_dist *d, dataloader_forward_fn forward, void *model,
                            int32_t *inputs, int32_t *targets, int doc, uint64_t *samples);

/* ---- staging (dataloader_stage.c; docs/staging.md) ---- */

/* Staging (data.stage_to): opens the stagers; at each step boundary announces the next window
 * and installs redirects. No-ops without data.stage_to. An object-store stream (s3://, never read
 * in place) waits at a window's start until its shards are local, and data.stage_wait for the
 * copies announced a window ago; the wait is under the hang watchdog (WD_DATA_WAIT, naming the
 * source), prints progress lines while it lasts, and answers a stop request (SIGUSR1/SIGTERM on
 * any rank) within a round. stage_step (step: the trainer's steps taken; metrics: where the
 * staging line goes, rank 0's metrics.jsonl or NULL) returns 0, TSR_EXIT_DATA on every rank when
 * a shard could not be staged, or TSR_EXIT_REQUEUE on every rank after a stop request (nothing
 * saved: the caller's; collective); step_wait is then the seconds this step waited for data. */
int dataloader_stage_open(tsr_dataloader *dl);
int dataloader_stage_step(tsr_dataloader *dl, int64_t step, FILE *metrics);
/* Logs the last window's staging counters (collective; no-op without staging). */
void dataloader_stage_end(tsr_dataloader *dl, int64_t step, FILE *metrics);

#endif
