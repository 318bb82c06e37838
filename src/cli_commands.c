/* cli_commands.c — see cli_commands.h. */
#include "cli_commands.h"

#include <stddef.h>

static const cli_opt config_doc_opts[] = {
    {"help", 'h', NULL, "show this help"},
};
const cli_cmd config_doc_cli = {
    "config-doc", "",
    "Writes the config key reference (docs/config.md) to stdout: every key, its type, default,\n"
    "range and meaning, from the table the config parser uses.",
    config_doc_opts, (int)(sizeof config_doc_opts / sizeof config_doc_opts[0]), NULL,
};

const cli_cmd *const tsr_cli_cmds[] = {
    &prep_cli,           &report_cli,           &tokenizer_train_cli,
    &tokenizer_encode_cli, &tokenizer_decode_cli, &shard_cli,
    &synth_cli,          &verify_data_cli,      &config_doc_cli,
    &generate_cli,       &eval_cli,             &data_push_cli,        NULL,
};
