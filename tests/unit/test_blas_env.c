/* test_blas_env.c — src/base/blas_env.c's fallback when it cannot re-execute: it sets
 * OPENBLAS_CORETYPE, the exec fails, and the warning it prints is a tessera message like every other
 * ("PROGRAM: warning: ...", docs/cli.md "Error messages") naming the core and why the exec failed.
 * The test stands in for OpenBLAS's openblas_get_corename (a generic "Prescott" core, as Debian's
 * OpenBLAS reports on CPUs it does not know) and makes execv fail for sure with one argument
 * longer than the kernel takes (MAX_ARG_STRLEN, 128 KiB: E2BIG). Needs an AVX2 CPU, else skips. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blas_env.h"
#include "tap.h"

char *openblas_get_corename(void);
/* the executable's definition wins over libopenblas's for the library code linked into it */
char *openblas_get_corename(void) { return "Prescott"; }

/* Runs blas_fix_coretype(argv) with stderr sent to a temporary file; returns what it printed. */
static void captured_stderr(char **argv, char *out, size_t n) {
    FILE *tmp = tmpfile();
    int saved = dup(2);
    if (!tmp || saved < 0) {
        snprintf(out, n, "(test setup: %s)", strerror(errno));
        return;
    }
    fflush(stderr);
    dup2(fileno(tmp), 2);
    blas_fix_coretype(argv);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t got = fread(out, 1, n - 1, tmp);
    out[got] = '\0';
    fclose(tmp);
}

int main(int argc, char **argv) {
    if (argc > 1) { /* the exec succeeded after all: the test cannot check the fallback */
        printf("not ok 1 - execv with a %zu-byte argument was expected to fail\n", strlen(argv[1]));
        return 1;
    }
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2")) {
        printf("no AVX2 on this CPU: blas_fix_coretype does not re-execute here\n");
        return 77;
    }
    tap_plan(4);
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("TSR_NO_BLAS_REEXEC");
    size_t big = 200 * 1024; /* > MAX_ARG_STRLEN */
    char *huge = malloc(big + 1);
    if (!huge) return 1;
    memset(huge, 'x', big);
    huge[big] = '\0';
    char *args[] = {argv[0], huge, NULL};
    char err[4096];
    captured_stderr(args, err, sizeof err);
    free(huge);

    const char *core = getenv("OPENBLAS_CORETYPE");
    tap_ok(core && (!strcmp(core, "SkylakeX") || !strcmp(core, "Haswell")),
           "OPENBLAS_CORETYPE is set for the AVX2/AVX-512 core (%s)", core ? core : "unset");
    char want[256];
    snprintf(want, sizeof want, "%s: warning: could not re-execute with OPENBLAS_CORETYPE=%s",
             program_invocation_short_name, core ? core : "?");
    tap_ok(strncmp(err, want, strlen(want)) == 0, "the warning starts with the program's name: '%.*s'",
           (int)strcspn(err, "\n"), err);
    tap_ok(strstr(err, strerror(E2BIG)) != NULL, "it says why the exec failed (%s)", strerror(E2BIG));
    tap_ok(strchr(err, '\n') == err + strlen(err) - 1, "one line");
    return tap_done();
}
