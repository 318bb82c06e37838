/* prep.h — `tessera prep`: text and JSON Lines to a token dataset (usage: docs/prep.md).
 *
 * Takes the arguments after `tessera` (argv[0] is "prep") and returns the process exit status:
 * 0 ok, 1 usage error (TSR_EXIT_USAGE), 2 data or I/O error (TSR_EXIT_DATA). On any error nothing
 * is left at --out: the datasets are staged in OUT.tmp and renamed into place when complete.
 */
#ifndef TSR_PREP_H
#define TSR_PREP_H

/* tessera prep --out DIR [--tokenizer gpt2|PATH] [--format auto|text|jsonl|sft|chat]
 *              [--val-fraction F] [--seed S] [--bos] [--eos TOKEN] [--no-eos] [--target-prompts]
 *              [--strict] [--doc-sep SEP] [--shard-tokens N] [--pack T] [--threads N] [--quiet] INPUT... */
int cmd_prep(int argc, char **argv);

#endif
