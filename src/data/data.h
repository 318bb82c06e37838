/* data.h — token datasets: the shard format, a writer, an mmap reader and the deterministic sampler.
 *
 * A dataset is a directory: shard files holding tokens (uint16 when vocab <= 65536, else uint32),
 * an optional per-token loss-mask channel, and an index listing shards, sizes and checksums. The
 * byte layout is specified in docs/data-format.md.
 *
 * Samples: for a sequence length T, a shard of n tokens holds (n - 1) / T samples; sample k of a
 * shard covers tokens [k*T, k*T + T] (T + 1 tokens: inputs are the first T, targets the last T).
 * Samples never cross shards. Global sample index = shard-order concatenation.
 *
 * Errors: functions returning int return 0 on success, else TSR_EXIT_DATA after tsr_error() has
 * named the file and the fault (bad magic, version, checksum, truncation ...).
 */
#ifndef TSR_DATA_H
#define TSR_DATA_H

#include <stddef.h>
#include <stdint.h>

#define TSR_DATA_VERSION 1
/* tessera prep --format prompts: each split's records (docs/rl.md "Prompts"): line k of
 * SPLIT/prompts.jsonl belongs to sample k; index.tsv notes "prompts" (the line count) and
 * "prompts_crc32c" */
#define DATASET_PROMPTS "prompts.jsonl"

/* The mask channel (an index's has_mask, dataset_writer_open's with_mask): none; a loss mask (bytes
 * 0 or 1); or a loss mask whose bytes also mark, with DATASET_SEGMENT_BIT, the first token of each
 * segment: packed examples (tessera prep --pack) that document-masked attention keeps apart
 * (docs/data-format.md "Segments"). Bit 0 is the loss mask in both. */
enum { DATASET_NO_MASK, DATASET_MASK, DATASET_MASK_SEGMENTS };
#define DATASET_SEGMENT_BIT 2u

/* ---- reader ---- */
typedef struct tsr_dataset tsr_dataset;

/* Opens the dataset directory `dir` and memory-maps its shards. With verify != 0, every shard's
 * payload checksum is checked against the index (O(size)); headers are always checked.
 * dir = "s3://BUCKET/PREFIX": only the index is fetched (see dataset_s3). */
int dataset_open(tsr_dataset **out, const char *dir, int verify);
void dataset_close(tsr_dataset *ds);
/* Object-store datasets (dir = "s3://BUCKET/PREFIX"): dataset_index_fetch GETs dir's index.tsv
 * into a malloc'd NUL-terminated text (0, or an exit status after tsr_error naming the object);
 * dataset_index_preset hands such a text to this process, so that dataset_open and
 * dataset_index_note of dir use it instead of fetching (the trainer fetches each index on rank 0
 * and broadcasts it: src/data/dataloader.c). Main thread, before the datasets open. */
int dataset_index_fetch(const char *dir, char **text, size_t *len);
/* Another object of an object-store dataset (dir/name, e.g. prompts.jsonl), at most max bytes,
 * into a malloc'd NUL-terminated text: 0, or an exit status after tsr_error naming the object. */
int dataset_object_fetch(const char *dir, const char *name, size_t max, char **text,
                         size_t *len);
void dataset_index_preset(const char *dir, const char *text, size_t len);
/* A note of dir/index.tsv's header comments, "# KEY<TAB>VALUE<TAB>(...)", written by tessera prep
 * (packed_seq_len, preference_pairs; docs/prep.md): 1 with *value set, 0 when absent, -1 when
 * index.tsv cannot be read. dir may be s3://... (the preset index, else one GET). */
int dataset_index_note(const char *dir, const char *key, uint64_t *value);
/* The same note's value field as text (up to its tab or the line's end; "" when absent): 1, 0 when
 * absent, -1 when index.tsv cannot be read. */
int dataset_index_note_text(const char *dir, const char *key, char *out, size_t cap);
/* 1 when the file at path is part of a tessera dataset (a shard, or an index.tsv: their magics),
 * else 0 (also when it cannot be read): what `tessera prep` must not read as text. */
int dataset_file_is_part(const char *path);
/* Does dir hold preference pairs (tessera prep --format preference) packed for seq_len T? 1 (and
 * *pairs), 0 when it holds none, -1 when they are packed for another length (*packed_T). */
int dataset_pairs_for(const char *dir, int T, uint64_t *pairs, uint64_t *packed_T);
uint32_t dataset_vocab_size(const tsr_dataset *ds);
uint64_t dataset_n_tokens(const tsr_dataset *ds);
int dataset_n_shards(const tsr_dataset *ds);
int dataset_has_mask(const tsr_dataset *ds);
/* 1 when the dataset records segment starts (has_mask 2), else 0. */
int dataset_has_segments(const tsr_dataset *ds);
/* The tokenizer that made the dataset, as its index records it (tessera prep's --tokenizer), or ""
 * when the index has no `tokenizer` line (unknown: older datasets, tessera synth). */
const char *dataset_tokenizer(const tsr_dataset *ds);
/* The largest token id the dataset holds, and in *how how that is known: "the max_token_id of
 * its index.tsv" (the writer's note), "every token read (data.verify)" (opened with verify), or
 * NULL when neither tells (an older index opened without verify, or an object-store one): then
 * vocab_size - 1, the bound the format gives. Reads refuse an id above it (dataset_read_sample). */
uint32_t dataset_max_token_id(const tsr_dataset *ds, const char **how);
/* Samples of length T in the whole dataset (see above). */
uint64_t dataset_n_samples(const tsr_dataset *ds, int T);
/* Global sample i (< dataset_n_samples): inputs (T) and targets (T); a target whose loss-mask byte
 * is 0 is written as -1. Lookup is O(log n_shards). Returns the number of targets kept (not -1),
 * or -1 after tsr_error() when i is out of range, T < 1, or the sample holds a token >= vocab
 * (possible only when the dataset was opened without verify). Safe to call from several threads;
 * the first call for a new T builds a small per-T table (O(n_shards)). */
int dataset_read_sample(const tsr_dataset *ds, int T, uint64_t i, int32_t *inputs,
                        int32_t *targets);
/* The segment starts of global sample i's inputs (T bytes): starts[j] = 1 when input j begins a
 * segment (j = 0 always does), from the dataset's record (dataset_has_segments), or, in a dataset
 * without one, after each input equal to eot (eot < 0: none). Returns 0, or -1 as
 * dataset_read_sample. */
int dataset_read_starts(const tsr_dataset *ds, int T, uint64_t i, int eot, uint8_t *starts);

/* ---- hooks for node-local staging (stage.h, docs/staging.md) ----
 * Shard k is in [0, dataset_n_shards). A shard can be redirected to a validated copy of it
 * (e.g. on node-local storage): reads of its samples then come from the copy. Redirects are
 * installed and dropped only when no dataset_read_sample runs (the trainer's main thread, between
 * steps); reads stay safe from several threads otherwise. */
/* The shard holding global sample i (same lookup as dataset_read_sample), -1 when i is out of
 * range or T < 1. */
int dataset_sample_shard(const tsr_dataset *ds, int T, uint64_t i);
/* The dataset directory as opened (without trailing slashes). */
const char *dataset_dir(const tsr_dataset *ds);
/* CRC32C of the index.tsv text: the same dataset reached by two paths has the same value, a
 * regenerated one (almost surely) another. */
uint32_t dataset_index_crc(const tsr_dataset *ds);
/* Shard k's file name in the directory ("shard-00003.bin"), its size in bytes, and the payload
 * CRC32C the index lists for it. */
const char *dataset_shard_name(const tsr_dataset *ds, int k);
uint64_t dataset_shard_bytes(const tsr_dataset *ds, int k);
uint32_t dataset_shard_payload_crc(const tsr_dataset *ds, int k);
/* 1 when the 64 bytes at hdr equal shard k's header (as validated at open), else 0. */
int dataset_shard_header_matches(const tsr_dataset *ds, int k, const void *hdr);
/* path != NULL: maps `path` and validates it as shard k exactly as dataset_open(verify = 1) does
 * (header against the index, size, payload checksum, token range, mask bytes); on success reads of
 * shard k come from it (the original stays mapped). Returns 0, or TSR_EXIT_DATA after tsr_error()
 * with nothing changed (a previous redirect of k stays). path == NULL: drops the redirect (unmaps
 * the copy), reads are in place again; returns 0. */
int dataset_shard_redirect(tsr_dataset *ds, int k, const char *path);
int dataset_shard_redirected(const tsr_dataset *ds, int k);
/* An object-store dataset (dataset_open of "s3://BUCKET/PREFIX", docs/object-storage.md): its
 * client, else NULL. Such a dataset fetches only its index at open; no shard is read in place:
 * a sample of a shard without a redirect (a staged copy) is an error. */
struct tsr_s3;
struct tsr_s3 *dataset_s3(const tsr_dataset *ds);
/* Samples read (dataset_read_sample successes) from redirected copies and from the original
 * shards since dataset_open. Either pointer may be NULL. */
void dataset_read_counts(const tsr_dataset *ds, uint64_t *staged, uint64_t *in_place);

/* ---- writer ---- */
typedef struct tsr_dataset_writer tsr_dataset_writer;

/* Starts a dataset in `dir`, which must not exist yet. Everything is written under `dir`.tmp and
 * renamed into place by dataset_writer_close, so a failure never leaves a partial dataset at `dir`.
 * shard_tokens: tokens per shard before starting a new one (the last shard may be shorter).
 * with_mask: DATASET_NO_MASK, DATASET_MASK or DATASET_MASK_SEGMENTS (above). */
int dataset_writer_open(tsr_dataset_writer **out, const char *dir, uint32_t vocab_size,
                        int with_mask, uint64_t shard_tokens);
/* Appends n tokens (each < vocab_size) and, when the dataset has a mask, n mask bytes (0 or 1;
 * with segments, DATASET_SEGMENT_BIT may be added). */
int dataset_writer_append(tsr_dataset_writer *w, const uint32_t *tokens, const uint8_t *mask,
                          size_t n);
/* Records in the index the tokenizer that made the tokens (a name or path without whitespace,
 * at most 1023 bytes; anything else is refused with TSR_EXIT_USAGE after tsr_error()). */
int dataset_writer_set_tokenizer(tsr_dataset_writer *w, const char *name);
/* Finishes the last shard, writes the index, fsyncs, renames `dir`.tmp to `dir`. Frees w. */
int dataset_writer_close(tsr_dataset_writer *w);
/* Removes `dir`.tmp and frees w. */
void dataset_writer_abort(tsr_dataset_writer *w);
/* Removes OUT.tmp left by an interrupted write of a train/val pair (tessera synth, tessera prep):
 * only the datasets' own files (shard-*, index.tsv, prompts.jsonl) under train/, val/ and their
 * .tmp twins, and OUT.tmp/train.prompts.jsonl, val.prompts.jsonl;
 * anything else makes the final rmdir fail, reported naming OUT.tmp. Returns 0 or TSR_EXIT_DATA. */
int dataset_split_remove_staging(const char *tmp);

/* ---- sampler ----
 * The sample at global position g (counting across epochs) is a pure function of
 * (seed, epoch = g / n, g % n): a keyed Feistel permutation of [0, n) with cycle walking, O(1)
 * memory and expected O(1) time. It never depends on the rank count. */
typedef struct tsr_sampler {
    uint64_t n;    /* samples per epoch, >= 1 */
    uint64_t seed;
    int shuffle;   /* 0: identity order */
    int pairs;     /* samples 2i, 2i+1 are a pair (preference data): the pairs are permuted and
                    * position g takes member g % 2 of the pair at g / 2 (n even) */
} tsr_sampler;

/* Position p in [0, n) of epoch e -> sample index in [0, n). A bijection for each (seed, e). */
uint64_t sampler_permute(uint64_t seed, uint64_t epoch, uint64_t n, uint64_t p);
/* Global position g -> sample index. */
uint64_t sampler_index(const tsr_sampler *s, uint64_t g);

#endif
