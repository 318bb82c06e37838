/* hc_drain.c — see hc_drain.h. */
#include "hc_drain.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

extern char **environ;

void hc_parse_show_node(const char *text, char *state, size_t ns, char *reason, size_t nr) {
    state[0] = reason[0] = '\0';
    for (const char *p = text; p && *p; p++) {
        int at_word = p == text || p[-1] == ' ' || p[-1] == '\n' || p[-1] == '\t';
        if (at_word && !strncmp(p, "State=", 6)) {
            size_t k = strcspn(p + 6, " \t\n");
            snprintf(state, ns, "%.*s", (int)k, p + 6);
        } else if (at_word && !strncmp(p, "Reason=", 7)) {
            size_t k = strcspn(p + 7, "\n"); /* the reason runs to the end of the line */
            snprintf(reason, nr, "%.*s", (int)k, p + 7);
            size_t len = strlen(reason);
            while (len && reason[len - 1] == ' ') reason[--len] = '\0';
            char *br = strrchr(reason, '[');
            if (br && len && reason[len - 1] == ']' && br > reason && br[-1] == ' ' && strchr(br, '@'))
                br[-1] = '\0'; /* " [root@2024-05-01T10:00:00]" */
            if (!strcmp(reason, "(null)") || !strcmp(reason, "none") || !strcmp(reason, "None"))
                reason[0] = '\0';
        }
    }
}

hc_action hc_drain_decide(int failed, int drain, int resume_own, const char *state,
                          const char *reason) {
    int ours = !strncmp(reason, HC_REASON_PREFIX, strlen(HC_REASON_PREFIX));
    if (failed && drain) return reason[0] == '\0' || ours ? HC_ACT_DRAIN : HC_ACT_FOREIGN;
    if (!failed && resume_own && ours && strstr(state, "DRAIN")) return HC_ACT_RESUME;
    return HC_ACT_NONE;
}

/* Runs argv (no shell); captures up to n-1 bytes of stdout into out when out != NULL. Returns the
 * exit status, or -1 when it could not be started or died of a signal. */
static int run_argv(char *const argv[], char *out, size_t n) {
    int fd[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out) {
        if (pipe(fd) != 0) return -1;
        posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
        posix_spawn_file_actions_addclose(&fa, fd[0]);
        posix_spawn_file_actions_addclose(&fa, fd[1]);
    }
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (out) close(fd[1]);
    if (rc != 0) {
        if (out) close(fd[0]);
        tsr_error("cannot run %s: %s", argv[0], strerror(rc));
        return -1;
    }
    if (out) {
        size_t got = 0;
        for (;;) {
            char tmp[4096];
            ssize_t k = read(fd[0], tmp, sizeof tmp);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) break;
            size_t keep = got + (size_t)k < n - 1 ? (size_t)k : n - 1 - got;
            memcpy(out + got, tmp, keep);
            got += keep;
        }
        out[got] = '\0';
        close(fd[0]);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int hc_drain_apply(const char *node, const hc_verdict *v, int n, int n_failed, int drain,
                   int resume_own) {
    if (!drain && !resume_own) return 0;
    if (!n_failed && !resume_own) return 0;
    if (n_failed && !drain) return 0;
    char reason[256] = "", arg_node[96], arg_reason[300];
    if (n_failed) hc_drain_reason(reason, sizeof reason, v, n);
    if (!hc_node_name_ok(node)) {
        tsr_error("--drain: node name '%s' is not a plain Slurm node name: not touched", node);
        return 2;
    }
    const char *sc = getenv("TSR_HC_SCONTROL");
    if (!sc || !*sc) sc = "scontrol";
    snprintf(arg_node, sizeof arg_node, "nodename=%s", node);
    snprintf(arg_reason, sizeof arg_reason, "reason=%s", reason);
    if (geteuid() != 0) {
        if (n_failed)
            fprintf(stderr, "tessera-healthcheck: not root: --drain does nothing; as root it would read "
                            "'%s show node %s' and, unless another reason is set, run: %s update %s "
                            "state=drain \"%s\"\n", sc, node, sc, arg_node, arg_reason);
        else
            fprintf(stderr, "tessera-healthcheck: not root: --resume-own does nothing; as root it would "
                            "resume %s if drained with a \"%s\" reason\n", node, HC_REASON_PREFIX);
        return 0;
    }
    static char show[65536];
    char *show_argv[] = {(char *)sc, "show", "node", (char *)node, NULL};
    int rc = run_argv(show_argv, show, sizeof show);
    if (rc != 0) {
        tsr_error("'%s show node %s' failed (exit %d): node state not changed", sc, node, rc);
        return 2;
    }
    char state[128], cur[512];
    hc_parse_show_node(show, state, sizeof state, cur, sizeof cur);
    hc_action act = hc_drain_decide(n_failed > 0, drain, resume_own, state, cur);
    if (act == HC_ACT_FOREIGN) {
        fprintf(stderr, "tessera-healthcheck: %s is unhealthy (%s) but carries another reason "
                        "(\"%s\"): left as it is\n", node, reason, cur);
        return 0;
    }
    if (act == HC_ACT_NONE) return 0;
    char *drain_argv[] = {(char *)sc, "update", arg_node, "state=drain", arg_reason, NULL};
    char *resume_argv[] = {(char *)sc, "update", arg_node, "state=resume", NULL};
    char *const *argv = act == HC_ACT_DRAIN ? drain_argv : resume_argv;
    fprintf(stderr, "tessera-healthcheck: %s: %s update %s %s%s%s%s\n", node, sc, arg_node, argv[3],
            act == HC_ACT_DRAIN ? " \"" : "", act == HC_ACT_DRAIN ? arg_reason : "",
            act == HC_ACT_DRAIN ? "\"" : "");
    rc = run_argv(argv, NULL, 0);
    if (rc != 0) {
        tsr_error("'%s update %s %s' failed (exit %d)", sc, arg_node, argv[3], rc);
        return 2;
    }
    return 0;
}
