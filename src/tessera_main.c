/* tessera — the user's tool: one subcommand per job, dispatched from a table. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "blas_env.h"
#include "ckpt/ckpt_cmd.h"
#include "cli_commands.h"
#include "common.h"
#include "progress.h"
#include "config/config.h"
#include "data/data_cmd.h"
#include "eval/eval_cmd.h"
#include "generate/generate.h"
#include "prep/prep.h"
#include "report/report.h"
#include "tokenizer/tokenizer_cmd.h"

#ifndef TSR_VERSION
#define TSR_VERSION "unknown"
#endif

static int config_doc_on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    (void)ch, (void)val, (void)ctx;
    return cli_usage_error(c, "internal: unhandled option", NULL);
}

static int cmd_config_doc(int argc, char **argv) {
    int rc = cli_parse(&config_doc_cli, argc, argv, config_doc_on_opt, NULL);
    if (rc) return rc < 0 ? 0 : rc; /* -1: --help was printed */
    if (optind < argc) return cli_usage_error(&config_doc_cli, "unexpected operand: ", argv[optind]);
    config_doc_markdown(stdout);
    return 0;
}

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"prep", cmd_prep, "tokenize text / JSONL files into a dataset (DIR/train, DIR/val)"},
    {"report", cmd_report, "plots (PNG, via gnuplot) and a summary of a run's metrics.jsonl"},
    {"tokenizer", cmd_tokenizer, "encode, decode, or train a byte-level BPE tokenizer"},
    {"shard", cmd_shard, "write a dataset (token shards + index) from token ids"},
    {"synth", cmd_synth, "write the deterministic synthetic corpus used by the demo and tests"},
    {"verify-data", cmd_verify_data, "check a dataset's headers and checksums"},
    {"data", cmd_data, "data push DIR s3://BUCKET/PREFIX: publish a dataset to an object store"},
    {"config-doc", cmd_config_doc, "print the config key reference (docs/config.md)"},
    {"generate", cmd_generate, "complete a prompt with a checkpoint's or Hugging Face model (KV cache)"},
    {"ckpt", cmd_ckpt, "checkpoints: ls, verify, inspect; export to and import from Hugging Face"},
    {"eval", cmd_eval, "score a checkpoint or Hugging Face model: validation loss, ICL tasks"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: tessera COMMAND [ARGS]   (tessera COMMAND --help for its options)\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nexit codes: %s\noption letters: one meaning in every tessera program (docs/cli.md)\n",
            CLI_EXITS);
}

int main(int argc, char **argv) {
    tsr_line_buffered(); /* a batch log shows each line as it is written */
    blas_fix_coretype(argv);
    if (argc < 2) {
        usage(stderr);
        return TSR_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("tessera %s\n", TSR_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    tsr_error("unknown command '%s'", argv[1]);
    usage(stderr);
    return TSR_EXIT_USAGE;
}
