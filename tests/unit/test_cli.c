/* test_cli.c — the option tables of tessera's subcommands (src/base/cli_commands.h) give each letter
 * one meaning (docs/cli.md), and cli.c's parse loop and help handle long-only options, a help
 * paragraph row (CLI_TEXT), a missing value, and print no help on a muted rank.
 * `test_cli --list` prints the subcommands' names, one a line, for tests/cli/test_cli.sh, which checks
 * the letters of every program (tessera-train, tessera-healthcheck, tessera-job too) from --help. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"
#include "cli.h"
#include "cli_commands.h"
#include "common.h"

static int has_letter(const cli_opt *o) { return o->short_name > 0 && o->short_name < 0x100; }

/* Pairs of options (any two tables) where one letter has two long names; each printed. */
static int letter_conflicts(void) {
    int bad = 0;
    for (int a = 0; tsr_cli_cmds[a]; a++)
        for (int i = 0; i < tsr_cli_cmds[a]->n_opts; i++) {
            const cli_opt *o = &tsr_cli_cmds[a]->opts[i];
            if (!has_letter(o)) continue;
            for (int b = a; tsr_cli_cmds[b]; b++)
                for (int j = b == a ? i + 1 : 0; j < tsr_cli_cmds[b]->n_opts; j++) {
                    const cli_opt *p = &tsr_cli_cmds[b]->opts[j];
                    if (p->short_name != o->short_name || !strcmp(p->name, o->name)) continue;
                    tap_diag("-%c is --%s in '%s' but --%s in '%s'", o->short_name, o->name,
                             tsr_cli_cmds[a]->name, p->name, tsr_cli_cmds[b]->name);
                    bad++;
                }
        }
    return bad;
}

/* Tables where two rows share a key (the value on_opt tells them apart by), or --help is missing. */
static int table_faults(void) {
    int bad = 0;
    for (int a = 0; tsr_cli_cmds[a]; a++) {
        const cli_cmd *c = tsr_cli_cmds[a];
        int help = 0;
        for (int i = 0; i < c->n_opts; i++) {
            help |= c->opts[i].short_name == 'h' && !strcmp(c->opts[i].name, "help");
            for (int j = i + 1; j < c->n_opts; j++)
                if (c->opts[i].short_name == c->opts[j].short_name &&
                    c->opts[i].short_name != CLI_TEXT) { /* (paragraphs share theirs) */
                    tap_diag("'%s': --%s and --%s share a key", c->name, c->opts[i].name, c->opts[j].name);
                    bad++;
                }
        }
        if (!help) tap_diag("'%s' has no -h, --help", c->name), bad++;
    }
    return bad;
}

static const cli_opt demo_opts[] = {
    {"plan", CLI_NO_SHORT('p'), "R", "long-only"},
    {"quiet", 'q', NULL, "a letter"},
    {"help", 'h', NULL, "help"},
    {"", CLI_TEXT, NULL, "a paragraph\n"},
};
static const cli_cmd demo = {"demo", "", "a demo", demo_opts, 4, NULL};

typedef struct seen {
    int plan, quiet;
    char plan_val[16];
} seen;

static int demo_on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    seen *s = ctx;
    (void)c;
    if (ch == CLI_NO_SHORT('p')) s->plan++, snprintf(s->plan_val, sizeof s->plan_val, "%s", val);
    else if (ch == 'q') s->quiet++;
    else return 99;
    return 0;
}

static int parse(seen *s, int argc, char **argv) {
    memset(s, 0, sizeof *s);
    return cli_parse(&demo, argc, argv, demo_on_opt, s);
}

/* cli_parse of argv with stdout into out (its bytes: *n): its status */
static int parse_stdout(seen *s, int argc, char **argv, char *out, size_t cap, size_t *n) {
    FILE *tmp = tmpfile();
    fflush(stdout);
    const int saved = dup(1);
    dup2(fileno(tmp), 1);
    const int rc = parse(s, argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    rewind(tmp);
    *n = fread(out, 1, cap - 1, tmp);
    out[*n] = 0;
    fclose(tmp);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (int a = 0; tsr_cli_cmds[a]; a++) printf("%s\n", tsr_cli_cmds[a]->name);
        return 0;
    }
    tap_plan(8);
    int n = 0;
    while (tsr_cli_cmds[n]) n++;
    tap_ok(n >= 11, "tsr_cli_cmds lists every subcommand's table (%d)", n);
    tap_ok(letter_conflicts() == 0, "one long name per letter across tessera's subcommands");
    tap_ok(table_faults() == 0, "every table: keys distinct, -h/--help present");

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cli_help(f, &demo);
    fclose(f);
    tap_ok(strstr(buf, "\n      --plan R ") && strstr(buf, "\n  -q, --quiet ") &&
               !strstr(buf, "-p,") && strstr(buf, "help\n\na paragraph\n\nexit codes: " CLI_EXITS "\n"),
           "help: long-only as '      --plan R', letters as '-q, --quiet', a CLI_TEXT row's "
           "paragraph in its place, the exit codes");
    free(buf);

    seen s;
    char *ok_argv[] = {"demo", "--plan", "4", "-q", NULL};
    int rc = parse(&s, 4, ok_argv);
    tap_ok(rc == 0 && s.plan == 1 && !strcmp(s.plan_val, "4") && s.quiet == 1,
           "--plan 4 -q: on_opt gets CLI_NO_SHORT('p') with '4', then 'q' (rc %d)", rc);
    char *bad_argv[] = {"demo", "-p", "4", NULL};
    rc = parse(&s, 3, bad_argv);
    tap_ok(rc == TSR_EXIT_USAGE && s.plan == 0, "-p (long-only --plan): a usage error, exit 1 (rc %d)", rc);
    char *miss_argv[] = {"demo", "-q", "--plan", NULL};
    rc = parse(&s, 3, miss_argv);
    tap_ok(rc == TSR_EXIT_USAGE && s.quiet == 1 && s.plan == 0,
           "--plan without its value: a usage error, exit 1 (rc %d)", rc);
    char out[4096];
    size_t got;
    char *help_argv[] = {"demo", "--help", NULL};
    rc = parse_stdout(&s, 2, help_argv, out, sizeof out, &got);
    const int shown = rc == -1 && strstr(out, "usage: tessera demo [options]\na demo\n");
    tsr_log_mute(1); /* a rank other than 0 under MPI */
    rc = parse_stdout(&s, 2, help_argv, out, sizeof out, &got);
    tsr_log_mute(0);
    tap_ok(shown && rc == -1 && got == 0, "--help: printed, -1; muted (a rank but 0): nothing "
           "printed, still -1 (%zu bytes)", got);
    return tap_done();
}
