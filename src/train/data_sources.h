/* data_sources.h — the identity of each data source a run reads, kept in its checkpoints and
 * compared on resume (docs/training.md "Resuming on the same data", docs/checkpoint-format.md
 * `data_sources`).
 *
 * A source is data.train, each data.mix stream ("data.mix.NAME") and data.val; DPO's pairs and
 * GRPO's prompts are data.train's (their prompts.jsonl is named with its CRC32C in the index).
 * Its identity is its index.tsv's CRC32C (which lists every shard's size and payload CRC32C),
 * its shard count and its token count; the path is kept beside it, for the messages only (the
 * same dataset under another path is the same source). */
#ifndef TSR_DATA_SOURCES_H
#define TSR_DATA_SOURCES_H

#include <stddef.h>

struct tsr_trainer;
/* The run's sources, a line each: "KEY crc32c:XXXXXXXX shards:N tokens:N PATH" (the checkpoint's
 * data_sources attribute). Cut short (never mid-line) when n is too small. */
void data_sources_format(const struct tsr_trainer *t, char *buf, size_t n);
/* A resume from ck_path (after its step and data position are applied): each source against
 * saved, the checkpoint's data_sources ("": written before format version 3 or by tessera ckpt
 * import; rank 0 says in one line that the sources could not be compared). A source whose
 * identity differs is named with both identities by the first rank that sees it, and every rank
 * returns TSR_EXIT_DATA; with data.allow_changed = true it is a warning that also says where the
 * sampler continues, unless only some ranks see the change (their copies differ: refused). A
 * data.val the checkpoint did not have is noted, not refused. Collective; 0 otherwise. */
int data_sources_check(struct tsr_trainer *t, const char *saved, const char *ck_path);

#endif
