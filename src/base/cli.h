/* cli.h — tessera's command lines: one option table per command drives getopt_long and the
 * generated --help, so help and parser cannot drift apart (docs/style.md "Build and command line").
 * The one builder of getopt_long's tables, the help lines and the "no short form" hints for every
 * program: the `tessera` subcommands (cli_parse), tessera-healthcheck, tessera-train's parse_cli
 * and `tessera ckpt`'s subcommands (cli_getopt, cli_help_opts, cli_no_short_hint).
 * Usage errors read "PROGRAM: error: NAME: MESSAGE (see 'tessera NAME --help')" and return
 * TSR_EXIT_USAGE. One meaning per option letter across every program: docs/cli.md. */
#ifndef TSR_CLI_H
#define TSR_CLI_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

/* An option with no short letter (docs/cli.md gives each letter one meaning across all programs):
 * short_name CLI_NO_SHORT('s') is a getopt_long value >= 256 that on_opt tells apart by, while
 * "-s" stays free for the letter's one meaning. */
#define CLI_NO_SHORT(c) (0x100 | (c))
/* A letter that an option had before it moved to another (docs/cli.md "Letters that moved"): a row
 * {"threads", CLI_MOVED('t'), NULL, NULL} beside the option's own row is in neither the help nor
 * the parser; it turns "-t" into "unknown option: -t (--threads is -j now: -j N or --threads N)". */
#define CLI_MOVED(c) (0x200 | (c))

typedef struct cli_opt {
    const char *name;  /* long name */
    int short_name;    /* its letter, or CLI_NO_SHORT(c): long-only; the value on_opt receives */
    const char *arg;   /* placeholder of the argument; NULL for a flag; one that starts with '['
                        * ("[=GPU|FILE]") makes the value optional: --time or --time=H200 */
    const char *help;
} cli_opt;

typedef struct cli_cmd {
    const char *name, *operands, *summary; /* name as typed after `tessera`, e.g. "tokenizer encode" */
    const cli_opt *opts;
    int n_opts;                            /* at most CLI_MAX_OPTS */
    const char *exits;                     /* the "exit codes:" help line; NULL: CLI_EXITS */
} cli_cmd;

/* The exit codes of tessera's subcommands (docs/cli.md "Exit codes"). */
#define CLI_EXITS "0 ok, 1 usage or config error, 2 data, checkpoint or I/O error, 3 internal error"

#define CLI_MAX_OPTS 31

void cli_help(FILE *f, const cli_cmd *c);
/* The option lines of a table (cli_help_line for each row but the CLI_MOVED ones), in its order. */
void cli_help_opts(FILE *f, const cli_opt *opts, int n_opts);
/* One option line of a --help: "  -s, --set KEY=VALUE   help" or "      --plan RANKS   help" for a
 * long-only option; every program's help prints its options with it. */
void cli_help_line(FILE *f, int short_name, const char *name, const char *arg, const char *help);
int cli_usage_error(const cli_cmd *c, const char *msg, const char *detail);
/* The long name of the option with this short name ("?" if none). */
const char *cli_opt_name(const cli_cmd *c, int short_name);
/* Parses an integer option value in [lo, hi]; on error names the option and the range. */
int cli_number(const cli_cmd *c, int ch, const char *val, int64_t lo, int64_t hi, int64_t *out);

/* getopt_long's tables built from option tables: the long options (val = short_name; CLI_MOVED
 * rows left out; an optional value as cli_opt.arg says) and the short-option string (':' first,
 * so that a missing value reads ':'; a letter for each row that has one, ':' after it when it
 * takes a value). Fill with cli_getopt_init, then cli_getopt_add for each table. */
typedef struct cli_getopt {
    struct option lo[CLI_MAX_OPTS + 1]; /* terminated by a zero row */
    char shorts[3 * CLI_MAX_OPTS + 2];
    int n; /* rows in lo */
} cli_getopt;
void cli_getopt_init(cli_getopt *g);
/* Appends the rows of opts: 0, or -1 (g unchanged) when g would hold more than CLI_MAX_OPTS. */
int cli_getopt_add(cli_getopt *g, const cli_opt *opts, int n_opts);
/* The long name of the option of opts that lost `letter` (its row is CLI_NO_SHORT(letter):
 * docs/cli.md), or NULL: what getopt_long's "unknown option -p" meant. */
const char *cli_lost_letter(const cli_opt *opts, int n_opts, int letter);
/* "-p (it has no short form here: use --plan)" into buf for a letter that opts lost
 * (cli_lost_letter); NULL when none did. */
const char *cli_no_short_hint(char *buf, size_t cap, const cli_opt *opts, int n_opts, int letter);

/* Called for each option (ch = its short name, val = its argument or NULL); returns 0 or a status. */
typedef int (*cli_opt_fn)(const cli_cmd *c, int ch, const char *val, void *ctx);
/* getopt_long over argv (from a clean state; operands start at optind afterwards). 'h' prints the
 * help. Returns 0, -1 after --help, or an exit status (bad option, or on_opt's status). */
int cli_parse(const cli_cmd *c, int argc, char **argv, cli_opt_fn on_opt, void *ctx);

#endif
