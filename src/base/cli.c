/* cli.c — see cli.h. */
#include "cli.h"

#include <getopt.h>
#include <string.h>

#include "common.h"

/* How the command is typed: "tessera NAME" for a subcommand, NAME itself for a program of its own
 * (a name starting with "tessera-", e.g. tessera-healthcheck). */
static const char *typed(const cli_cmd *c, char *buf, size_t n) {
    snprintf(buf, n, strncmp(c->name, "tessera-", 8) == 0 ? "%s" : "tessera %s", c->name);
    return buf;
}

/* A program of its own names itself in the error prefix (tsr_error); a subcommand names itself
 * after it: "tessera: error: prep: ...". */
static const char *own_name(const cli_cmd *c) {
    return strncmp(c->name, "tessera-", 8) == 0 ? "" : c->name;
}

static int has_short(int short_name) { return short_name > 0 && short_name < 0x100; }
static int is_moved(int short_name) { return (short_name & ~0xff) == CLI_MOVED(0); }
/* a row that is no option: a letter that moved, a paragraph of the help */
static int no_option(int short_name) { return is_moved(short_name) || short_name == CLI_TEXT; }

/* The option called name (not a CLI_MOVED row), or NULL. */
static const cli_opt *opt_named(const cli_cmd *c, const char *name) {
    for (int k = 0; k < c->n_opts; k++)
        if (!no_option(c->opts[k].short_name) && !strcmp(c->opts[k].name, name)) return &c->opts[k];
    return NULL;
}

/* "-t (--threads is -j now: -j N or --threads N)" for a letter that moved (CLI_MOVED), else NULL. */
static const char *moved_hint(const cli_cmd *c, int letter, char *buf, size_t n) {
    const cli_opt *now = opt_named(c, cli_opt_name(c, CLI_MOVED(letter)));
    if (!now || !has_short(now->short_name)) return NULL;
    const char *arg = now->arg ? now->arg : "", *sp = now->arg ? " " : "";
    snprintf(buf, n, "-%c (--%s is -%c now: -%c%s%s or --%s%s%s)", letter, now->name, now->short_name,
             now->short_name, sp, arg, now->name, sp, arg);
    return buf;
}

/* One option line of a --help: "  -s, --set KEY=VALUE   help", "      --plan RANKS   help". */
static void help_line(FILE *f, int short_name, const char *name, const char *arg, const char *help) {
    char left[64];
    snprintf(left, sizeof left, "%c%c%c --%s%s%s", has_short(short_name) ? '-' : ' ',
             has_short(short_name) ? short_name : ' ', has_short(short_name) ? ',' : ' ', name,
             arg ? " " : "", arg ? arg : "");
    fprintf(f, "  %-26s %s\n", left, help);
}


void cli_help(FILE *f, const cli_cmd *c) {
    char t[96];
    fprintf(f, "usage: %s [options]%s%s\n%s%s\noptions:\n", typed(c, t, sizeof t),
            c->operands[0] ? " " : "", c->operands, c->summary, c->summary[0] ? "\n" : "");
    for (int k = 0; k < c->n_opts; k++) {
        const cli_opt *o = &c->opts[k];
        if (o->short_name == CLI_TEXT) fprintf(f, "\n%s", o->help);
        else if (!is_moved(o->short_name)) help_line(f, o->short_name, o->name, o->arg, o->help);
    }
    fprintf(f, "\nexit codes: %s\n", c->exits ? c->exits : CLI_EXITS);
}

int cli_usage_error(const cli_cmd *c, const char *msg, const char *detail) {
    char t[96];
    const char *own = own_name(c);
    tsr_error("%s%s%s%s (see '%s --help')", own, own[0] ? ": " : "", msg, detail ? detail : "",
              typed(c, t, sizeof t));
    return TSR_EXIT_USAGE;
}

const char *cli_opt_name(const cli_cmd *c, int short_name) {
    for (int k = 0; k < c->n_opts; k++)
        if (c->opts[k].short_name == short_name) return c->opts[k].name;
    return "?";
}

int cli_number(const cli_cmd *c, int ch, const char *val, int64_t lo, int64_t hi, int64_t *out) {
    if (tsr_parse_i64(val, lo, hi, out) == 0) return 0;
    char t[96];
    const char *own = own_name(c);
    tsr_error("%s%s--%s '%s': expected an integer in [%lld, %lld] (see '%s --help')", own,
              own[0] ? ": " : "", cli_opt_name(c, ch), val, (long long)lo, (long long)hi,
              typed(c, t, sizeof t));
    return TSR_EXIT_USAGE;
}

/* getopt_long's tables of c's rows: the long options (val = short_name; no CLI_MOVED or CLI_TEXT
 * row; an optional value as cli_opt.arg says) and the short-option string (':' first, so that a
 * missing value reads ':'; a letter for each row that has one, ':' after it when it takes a
 * value, '::' when optionally). */
typedef struct getopt_tables {
    struct option lo[CLI_MAX_OPTS + 1]; /* terminated by a zero row */
    char shorts[3 * CLI_MAX_OPTS + 2];
} getopt_tables;

/* 0, or -1 when c has more than CLI_MAX_OPTS rows */
static int tables_of(const cli_cmd *c, getopt_tables *g) {
    memset(g, 0, sizeof *g);
    if (c->n_opts > CLI_MAX_OPTS) return -1;
    size_t s = 0;
    int n = 0;
    g->shorts[s++] = ':';
    for (int k = 0; k < c->n_opts; k++) {
        const cli_opt *o = &c->opts[k];
        if (no_option(o->short_name)) continue;
        const int has_arg = !o->arg ? no_argument : o->arg[0] == '[' ? optional_argument
                                                                     : required_argument;
        g->lo[n++] = (struct option){o->name, has_arg, NULL, o->short_name};
        if (!has_short(o->short_name)) continue;
        g->shorts[s++] = (char)o->short_name;
        if (has_arg != no_argument) g->shorts[s++] = ':';
        if (has_arg == optional_argument) g->shorts[s++] = ':';
    }
    return 0;
}

/* "-p (it has no short form here: use --plan)" into buf for a letter that an option of c lost
 * (its row is CLI_NO_SHORT(letter): docs/cli.md), else NULL: what getopt_long's "unknown option
 * -p" meant. */
static const char *no_short_hint(const cli_cmd *c, int letter, char *buf, size_t cap) {
    if (!has_short(letter)) return NULL;
    for (int k = 0; k < c->n_opts; k++)
        if (c->opts[k].short_name == CLI_NO_SHORT(letter)) {
            snprintf(buf, cap, "-%c (it has no short form here: use --%s)", letter, c->opts[k].name);
            return buf;
        }
    return NULL;
}

/* The usage error of getopt_long's answer ch (':' a value missing, '?' an unknown option). */
static int bad_option(const cli_cmd *c, int ch, char **argv) {
    char bad[192], msg[256];
    if (ch == ':') { /* optopt: the option's key, for a long option too */
        snprintf(msg, sizeof msg, "option --%s needs a value", cli_opt_name(c, optopt));
        return cli_usage_error(c, msg, NULL);
    }
    if (!(has_short(optopt) && moved_hint(c, optopt, bad, sizeof bad)) && /* another letter now */
        !no_short_hint(c, optopt, bad, sizeof bad)) { /* a letter it lost */
        if (optopt) snprintf(bad, sizeof bad, "-%c", optopt);
        else snprintf(bad, sizeof bad, "%.120s", argv[optind - 1]);
    }
    return cli_usage_error(c, "unknown option: ", bad);
}

int cli_parse(const cli_cmd *c, int argc, char **argv, cli_opt_fn on_opt, void *ctx) {
    getopt_tables g;
    if (tables_of(c, &g) != 0) return cli_usage_error(c, "internal: too many options", NULL);
    for (int k = 0; k < c->n_opts; k++)
        for (int j = 0; j < k; j++)
            if (c->opts[j].short_name == c->opts[k].short_name && c->opts[k].short_name != CLI_TEXT)
                return cli_usage_error(c, "internal: two options with one key: --", c->opts[k].name);
    optind = 0; /* full re-initialisation: commands may run more than once per process */
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, g.shorts, g.lo, NULL)) != -1) {
        if (ch == 'h') {
            if (!tsr_log_muted()) cli_help(stdout, c);
            return -1;
        }
        if (ch == ':' || ch == '?') return bad_option(c, ch, argv);
        int rc = on_opt(c, ch, optarg, ctx);
        if (rc) return rc;
    }
    return 0;
}
