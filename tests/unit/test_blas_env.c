/* test_blas_env.c — src/base/blas_env.c: which core it asks for (blas_core_choice, every case of
 * its table), and its fallback when it cannot re-execute: it sets
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

/* blas_core_choice: (core OpenBLAS picked, avx512, avx2) -> the core asked for, or NULL */
static const struct {
    const char *core;
    int avx512, avx2;
    const char *want;
} cases[] = {
    {"Prescott", 1, 1, "SkylakeX"}, /* a Xeon 0.3.21 does not know */
    {"Haswell", 1, 1, "SkylakeX"},  /* AMD Zen 4/5: 0.3.21 gives them its AVX2 kernels */
    {"Zen", 1, 1, "SkylakeX"},
    {"SkylakeX", 1, 1, NULL},
    {"Cooperlake", 1, 1, NULL},
    {"SAPPHIRERAPIDS", 1, 1, NULL}, /* names compare without case */
    {"Prescott", 0, 1, "Haswell"},
    {"Core2", 0, 1, "Haswell"},
    {"Katmai", 0, 1, "Haswell"},
    {"Haswell", 0, 1, NULL},
    {"Zen", 0, 1, NULL},
    {"Prescott", 0, 0, NULL}, /* nothing better to ask for */
    {NULL, 1, 1, NULL},
};

int main(int argc, char **argv) {
    if (argc > 1) { /* the exec succeeded after all: the test cannot check the fallback */
        printf("not ok 1 - execv with a %zu-byte argument was expected to fail\n", strlen(argv[1]));
        return 1;
    }
    const int n_cases = (int)(sizeof cases / sizeof *cases);
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2");
#else
    const int avx2 = 0;
#endif
    tap_plan(n_cases + 5);
    /* the selection is x86's; elsewhere blas_fix_coretype leaves OpenBLAS alone */
#if defined(__x86_64__) || defined(__i386__)
    tap_ok(blas_core_selection_applies() == 1, "x86: the OpenBLAS core selection applies");
#else
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("TSR_NO_BLAS_REEXEC");
    blas_fix_coretype(argv); /* would re-execute (argc > 1 then fails) if it applied */
    tap_ok(blas_core_selection_applies() == 0 && !getenv("OPENBLAS_CORETYPE"),
           "not x86: no OpenBLAS core selection, OPENBLAS_CORETYPE left unset");
#endif
    for (int i = 0; i < n_cases; i++) {
        const char *got = blas_core_choice(cases[i].core, cases[i].avx512, cases[i].avx2);
        tap_ok(got == cases[i].want || (got && cases[i].want && !strcmp(got, cases[i].want)),
               "core %s, avx512 %d, avx2 %d: asks for %s (want %s)",
               cases[i].core ? cases[i].core : "(none)", cases[i].avx512, cases[i].avx2,
               got ? got : "no change", cases[i].want ? cases[i].want : "no change");
    }
    if (!avx2) { /* the stand-in Prescott core gets no better one here (on aarch64 there is no
                  * selection at all): nothing re-executes */
        for (int i = 0; i < 4; i++)
            tap_skip("the re-execution fallback", "no AVX2 (or not x86): blas_fix_coretype does not re-execute here");
        return tap_done();
    }
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
