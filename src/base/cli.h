/* cli.h — tessera's command lines: one option table per command drives getopt_long and the
 * generated --help, so help and parser cannot drift apart (docs/style.md "Build and command line").
 * The one parse loop of every program's options (cli_parse): the `tessera` subcommands, `tessera
 * ckpt`'s, tessera-train and tessera-healthcheck, each over its table.
 * Usage errors read "PROGRAM: error: NAME: MESSAGE (see 'tessera NAME --help')" (a program of its
 * own: "PROGRAM: error: MESSAGE (see 'PROGRAM --help')"), one wording for each fault:
 * "unknown option: --x", "option --x needs a value", "unexpected operand: x"; they return
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
/* A paragraph of the help, not an option: a row {"", CLI_TEXT, NULL, "text\n"} prints its text
 * in its place among the option lines, after an empty line (tessera-train's "what a recipe turns
 * on"), and is in no parser. */
#define CLI_TEXT 0x400

typedef struct cli_opt {
    const char *name;  /* long name */
    int short_name;    /* its letter, or CLI_NO_SHORT(c): long-only; the value on_opt receives */
    const char *arg;   /* placeholder of the argument; NULL for a flag; one that starts with '['
                        * ("[=GPU|FILE]") makes the value optional: --time or --time=H200 */
    const char *help;
} cli_opt;

typedef struct cli_cmd {
    const char *name, *operands, *summary; /* name as typed after `tessera`, e.g. "tokenizer encode"
                                            * (a program of its own: "tessera-train"); summary ""
                                            * prints no line */
    const cli_opt *opts;
    int n_opts;                            /* at most CLI_MAX_OPTS */
    const char *exits;                     /* the "exit codes:" help line; NULL: CLI_EXITS */
} cli_cmd;

/* The exit codes of tessera's subcommands (docs/cli.md "Exit codes"). */
#define CLI_EXITS "0 ok, 1 usage or config error, 2 data, checkpoint or I/O error, 3 internal error"

#define CLI_MAX_OPTS 31

/* The help of c: "usage: NAME [options] OPERANDS", the summary, a line per option ("  -s, --set
 * KEY=VALUE   help", "      --plan RANKS   help" for a long-only one; a CLI_TEXT row's
 * paragraph), the exit codes. */
void cli_help(FILE *f, const cli_cmd *c);
int cli_usage_error(const cli_cmd *c, const char *msg, const char *detail);
/* The long name of the option with this short name ("?" if none). */
const char *cli_opt_name(const cli_cmd *c, int short_name);
/* Parses an integer option value in [lo, hi]; on error names the option and the range. */
int cli_number(const cli_cmd *c, int ch, const char *val, int64_t lo, int64_t hi, int64_t *out);

/* Called for each option (ch = its short name, val = its argument or NULL); returns 0 or a status. */
typedef int (*cli_opt_fn)(const cli_cmd *c, int ch, const char *val, void *ctx);
/* The parse loop: getopt_long over argv with the tables built from c's rows (long options, and
 * a short-option string for the rows with a letter), from a clean state; operands start at
 * optind afterwards. 'h' prints the
 * help on stdout (not while tsr_log_mute is on: under MPI, rank 0 alone prints it). Returns 0, -1
 * after --help, or an exit status (bad option, reported; or on_opt's status). */
int cli_parse(const cli_cmd *c, int argc, char **argv, cli_opt_fn on_opt, void *ctx);

#endif
