/* test_exit_hooks.c — the fatal paths of src/base/common.c and the hooks the MPI wrapper registers
 * (tsr_set_exit_hooks; src/dist/dist.c registers dist_abort and dist_finalize): tsr_die calls the abort
 * hook with its code, tsr_exit and tsr_fail_all the finalize hook, then exit(code); without hooks they
 * only exit. Each case runs in a child process, which reports the hooks it saw through a pipe. */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "tap.h"

static int report_fd = -1;

static void note(const char *what, int code) {
    char line[64];
    int n = snprintf(line, sizeof line, "%s %d;", what, code);
    if (write(report_fd, line, (size_t)n) != n) _exit(99);
}
/* the real hook (MPI_Abort) does not return; this one does, and tsr_die exits after it */
static void abort_hook(int code) { note("abort", code); }
static void finalize_hook(void) { note("finalize", 0); }

enum how { DIE, EXIT, FAIL_ALL };

/* Runs the fatal call `how` with `code` in a child, hooks set or not; returns the child's exit
 * status and the hooks it called in seen. */
static int run_child(enum how how, int code, int hooks, char *seen, size_t n) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        report_fd = fds[1];
        tsr_set_exit_hooks(hooks ? abort_hook : NULL, hooks ? finalize_hook : NULL);
        tsr_log_mute(1); /* keep the test's TAP output clean; tsr_die prints regardless */
        if (how == DIE) tsr_die(code, "test_exit_hooks: the expected fatal message");
        if (how == FAIL_ALL) tsr_fail_all(code, "test_exit_hooks: the expected collective error");
        tsr_exit(code);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < n && (r = read(fds[0], seen + got, n - 1 - got)) > 0) got += (size_t)r;
    seen[got] = '\0';
    close(fds[0]);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

int main(void) {
    tap_plan(8);
    char seen[256];
    int rc = run_child(DIE, 5, 1, seen, sizeof seen);
    tap_ok(rc == 5, "tsr_die(5) with hooks exits 5 (got %d)", rc);
    tap_ok(!strcmp(seen, "abort 5;"), "tsr_die calls the abort hook with its code, not finalize (saw '%s')", seen);
    rc = run_child(EXIT, 7, 1, seen, sizeof seen);
    tap_ok(rc == 7, "tsr_exit(7) with hooks exits 7 (got %d)", rc);
    tap_ok(!strcmp(seen, "finalize 0;"), "tsr_exit calls the finalize hook only (saw '%s')", seen);
    rc = run_child(FAIL_ALL, 2, 1, seen, sizeof seen);
    tap_ok(rc == 2 && !strcmp(seen, "finalize 0;"),
           "tsr_fail_all(2) finalizes and exits 2 (got %d, saw '%s')", rc, seen);
    rc = run_child(DIE, 3, 0, seen, sizeof seen);
    tap_ok(rc == 3 && !seen[0], "tsr_die(3) without hooks only exits 3 (got %d, saw '%s')", rc, seen);
    rc = run_child(EXIT, 0, 0, seen, sizeof seen);
    tap_ok(rc == 0 && !seen[0], "tsr_exit(0) without hooks only exits 0 (got %d, saw '%s')", rc, seen);
    rc = run_child(FAIL_ALL, 1, 0, seen, sizeof seen);
    tap_ok(rc == 1 && !seen[0], "tsr_fail_all(1) without hooks only exits 1 (got %d, saw '%s')", rc, seen);
    return tap_done();
}
