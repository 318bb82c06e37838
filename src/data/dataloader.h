/* train_data.h — the trainer's data side: opening the streams, the mix plan, loading a rank's
 * share of a global batch, per-stream counts, staging (src/train/train_data.c). */
#ifndef TSR_TRAIN_DATA_H
#define TSR_TRAIN_DATA_H

#include "train/train_state.h"

/* Opens data.train (or every data.mix stream) and data.val; checks vocabularies and sizes.
 * Returns 0 or an exit code after reporting. */
int train_data_open(tsr_trainer *t);
/* data.tokenizer from the first training dataset's index (the tokenizer tessera prep made it with)
 * when the recipe leaves it out ("auto"), else, when that records none, the directory of
 * train_data_init_dir's tokenizer; one the recipe names that differs from the dataset's is an
 * error (exit 1) unless data.tokenizer_mismatch = "allow". 0 or TSR_EXIT_USAGE after tsr_error
 * (every rank alike). */
int train_data_tokenizer(tsr_trainer *t);
/* The indexes of the run's datasets on an object store (data.train or the mixture's streams,
 * data.val): each fetched once for the job by rank 0 and broadcast (dataset_index_preset), so
 * every later dataset_open of them needs no request (docs/object-storage.md). Collective: every
 * rank calls it, first thing at start. */
void train_data_share_indexes(const tsr_trainer *t);
/* Object `name` of the object-store dataset dir (e.g. a GRPO prompts dataset's prompts.jsonl),
 * at most max bytes: fetched once, by rank 0, and broadcast. 0 with *text (malloc'd,
 * NUL-terminated, *len bytes) on every rank, or the same exit status on every rank after rank 0's
 * tsr_error naming the object. Every rank, together. */
int train_data_fetch_shared(const tsr_trainer *t, const char *dir, const char *name, size_t max,
                            char **text, size_t *len);
/* The Hugging Face directory the run starts from (--init-from HF_DIR; before trainer_init): its
 * tokenizer files (tokenizer_find_files), if any, are data.tokenizer "auto"'s when the dataset
 * records no tokenizer (docs/hf.md "Import"). A directory with tokenizer files supplies the
 * tokenizer: a data.tokenizer the recipe file names (cfg; "" included) is set back to "auto",
 * unless a --set gave it (set_on_cli). cfg NULL: the directory only. */
void train_data_init_dir(const char *dir, tsr_config *cfg, int set_on_cli);
/* Samples per epoch of the training data (the `ep` unit): one stream's samples; for a mix, the
 * sum of the streams' epoch sizes (docs/data-mixing.md). */
uint64_t train_data_epoch_samples(const tsr_trainer *t);
/* Builds t->mix from the config once total_steps is known; prints the plan (rank 0). */
int train_data_plan(tsr_trainer *t);
/* Loads this rank's share of data batch d into t->inputs / t->targets; returns the count of
 * counted targets. Test hook TSR_FAULT="garbage:LO:HI": batches LO..HI-1 are replaced by
 * pseudo-random tokens (a corrupt data window). */
int64_t train_data_load(tsr_trainer *t, int64_t d);
/* Reads sample idx of ds (named name in errors); a sample the reader refuses (a token id beyond
 * the vocabulary in a dataset opened without verify) is seen by this rank only, so it aborts
 * every rank. Returns the count of counted targets. */
int64_t train_data_read(const tsr_dataset *ds, const char *name, int T, uint64_t idx,
                        int32_t *inputs, int32_t *targets);
/* Mean loss over the counted targets of the first `limit` samples of ds (0 = all), split over the
 * ranks in contiguous ranges, in forward passes of up to B rows (the model's activations must hold
 * B x T); inputs/targets hold B x T. Collective. The trainer's periodic eval and `tessera eval`. */
double train_data_eval_loss(tsr_model *m, const tsr_dataset *ds, const char *name, int T, int B,
                            int64_t limit, const tsr_dist *d, int32_t *inputs, int32_t *targets,
                            uint64_t *samples);
/* "name=tokens,...": tokens trained on from each stream (t->stream_seen x seq_len). */
void train_data_mix_tokens(const tsr_trainer *t, char *buf, size_t n);
/* t->stream_seen from the plan at the current data batch, less the windows rollbacks skipped (at
 * start, after a resume or a rollback); steps then add what they actually loaded. */
void train_data_reset_seen(tsr_trainer *t);
/* The plan as "start:count,count;start:...", phase starts in data batches: stored in checkpoints
 * so a resume with a plan that moved (a changed max_duration moves percent phases) is refused. */
void train_data_format_plan(const tsr_trainer *t, char *buf, size_t n);
/* Staging (data.stage_to): opens the stagers; at each step boundary announces the next window
 * and installs redirects. No-ops without data.stage_to. An object-store stream (s3://, never read
 * in place) waits at a window's start until its shards are local, and data.stage_wait for the
 * copies announced a window ago; the wait is under the hang watchdog (WD_DATA_WAIT, naming the
 * source), prints progress lines while it lasts, and answers a stop request (SIGUSR1/SIGTERM on
 * any rank) within a round. stage_step returns 0, TSR_EXIT_DATA on every rank when a shard could
 * not be staged, or TSR_EXIT_REQUEUE on every rank after a stop request (nothing saved: the
 * caller's; collective). */
int train_data_stage_open(tsr_trainer *t);
int train_data_stage_step(tsr_trainer *t);
/* Logs the last window's staging counters (collective; no-op without staging). */
void train_data_stage_end(tsr_trainer *t);
void train_data_close(tsr_trainer *t);

#endif
