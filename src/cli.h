/* cli.h — the `tessera` subcommands' option tables: one table per command drives getopt_long and
 * the generated --help, so help and parser cannot drift apart (STYLE.md "Build and CLI").
 * Usage errors read "NAME: MESSAGE (see 'tessera NAME --help')" and return TSR_EXIT_USAGE. */
#ifndef TSR_CLI_H
#define TSR_CLI_H

#include <stdint.h>
#include <stdio.h>

typedef struct cli_opt {
    const char *name;  /* long name */
    int short_name;
    const char *arg;   /* placeholder of the argument; NULL for a flag */
    const char *help;
} cli_opt;

typedef struct cli_cmd {
    const char *name, *operands, *summary; /* name as typed after `tessera`, e.g. "tokenizer encode" */
    const cli_opt *opts;
    int n_opts;                            /* at most CLI_MAX_OPTS */
} cli_cmd;

#define CLI_MAX_OPTS 31

void cli_help(FILE *f, const cli_cmd *c);
int cli_usage_error(const cli_cmd *c, const char *msg, const char *detail);
/* The long name of the option with this short name ("?" if none). */
const char *cli_opt_name(const cli_cmd *c, int short_name);
/* Parses an integer option value in [lo, hi]; on error names the option and the range. */
int cli_number(const cli_cmd *c, int ch, const char *val, int64_t lo, int64_t hi, int64_t *out);

/* Called for each option (ch = its short name, val = its argument or NULL); returns 0 or a status. */
typedef int (*cli_opt_fn)(const cli_cmd *c, int ch, const char *val, void *ctx);
/* getopt_long over argv (from a clean state; operands start at optind afterwards). 'h' prints the
 * help. Returns 0, -1 after --help, or an exit status (bad option, or on_opt's status). */
int cli_parse(const cli_cmd *c, int argc, char **argv, cli_opt_fn on_opt, void *ctx);

#endif
