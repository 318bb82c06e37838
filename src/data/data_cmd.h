/* data_cmd.h — the dataset subcommands of the `tessera` tool (usage: docs/data-format.md).
 *
 * Each takes the arguments after `tessera`, so argv[0] is the subcommand name, and returns the
 * process exit status: 0 ok, 1 usage error (TSR_EXIT_USAGE), 2 data or I/O error (TSR_EXIT_DATA).
 */
#ifndef TSR_DATA_CMD_H
#define TSR_DATA_CMD_H

#include <stddef.h>

/* tessera shard --out DIR --vocab V [--mask] [--shard-tokens N] FILE...
 * Token ids as whitespace-separated decimal text ("-" = stdin); with --mask each is ID:M. */
int cmd_shard(int argc, char **argv);
/* tessera synth --out DIR [--vocab 512] [--tokens 2000000] [--val-tokens N/10] [--seed 1] ...
 * Writes the datasets DIR/train and DIR/val: a deterministic order-2 Markov corpus with a known
 * entropy (the achievable loss floor). */
int cmd_synth(int argc, char **argv);
/* tessera verify-data [--seq-len T] DIR: opens with every check on and prints a summary. */
int cmd_verify_data(int argc, char **argv);
/* tessera data push DIR s3://BUCKET/PREFIX (push_cmd.c, docs/object-storage.md): uploads a
 * verified dataset, its shards first and index.tsv last. */
int cmd_data(int argc, char **argv);
/* The work of `tessera data push DIR URL` (also `tessera prep --out s3://...`): DIR a dataset, or
 * a directory holding train (and val); 0, TSR_EXIT_USAGE or TSR_EXIT_DATA after tsr_error. */
int data_push(const char *dir, const char *url);

#endif
