/* cli_commands.h — every `tessera` subcommand's option table, in one list: the help and the test
 * that keeps one meaning per option letter (docs/cli.md, tests/unit/test_cli.c) read it. A
 * registry declared low, filled high: the tables are data defined beside each command (its
 * *_cmd.c), the list in src/cli_commands.c; here, in base, every command's folder can include it
 * without including the folder that lists them all. */
#ifndef TSR_CLI_COMMANDS_H
#define TSR_CLI_COMMANDS_H

#include "cli.h"

/* Defined beside the code that runs each command. */
extern const cli_cmd prep_cli, report_cli, shard_cli, synth_cli, verify_data_cli,
    tokenizer_train_cli, tokenizer_encode_cli, tokenizer_decode_cli, eval_cli, generate_cli,
    config_doc_cli, data_push_cli;

/* All of them, NULL-terminated. (tessera ckpt's subcommands keep their own rows: ckpt_cmd.c.) */
extern const cli_cmd *const tsr_cli_cmds[];

#endif
