/* reward_keeper.c — the keeper of a reward program (reward_keeper.h). Plain libc; it runs in a
 * fresh image of tessera-train that initialises nothing (no MPI, no model). */
#include "posttrain/reward_keeper.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static volatile sig_atomic_t g_term; /* SIGTERM, SIGHUP or SIGINT arrived: end everything */

static void on_term(int sig) {
    (void)sig;
    g_term = 1;
}

/* SIGKILL to every process whose parent is this one: the program's descendants that lost their
 * parent are reparented here (a subreaper). The number signalled. */
static int kill_children(void) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    const long me = (long)getpid();
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = '\0';
        const char *p = strrchr(buf, ')'); /* then " STATE PPID" */
        char state;
        long ppid;
        if (p && sscanf(p + 1, " %c %ld", &state, &ppid) == 2 && ppid == me)
            n += kill((pid_t)atol(e->d_name), SIGKILL) == 0;
    }
    closedir(d);
    return n;
}

/* Everything the keeper keeps, ended and reaped: each child SIGKILLed, round after round (a killed
 * one's children come here in their turn), until none is left. */
static void end_all(void) {
    for (;;) {
        kill_children();
        pid_t w;
        int reaped = 0;
        while ((w = waitpid(-1, NULL, WNOHANG)) > 0) reaped++;
        if (w < 0 && errno == ECHILD) return;
        if (!reaped) usleep(2000);
    }
}

/* Exits as the program did: its status, or its signal (without a core file). */
static void exit_as(int st) {
    if (WIFSIGNALED(st)) {
        const int sig = WTERMSIG(st);
        struct rlimit no = {0, 0};
        setrlimit(RLIMIT_CORE, &no);
        signal(sig, SIG_DFL);
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, sig);
        sigprocmask(SIG_UNBLOCK, &s, NULL);
        kill(getpid(), sig);
        _exit(128 + sig);
    }
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 125);
}

static pid_t start_program(char **argv) {
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP) sigaddset(&dfl, s);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int rc = posix_spawn(&pid, "/bin/sh", NULL, &at, argv, environ);
    posix_spawnattr_destroy(&at);
    if (rc) {
        fprintf(stderr, "tessera-train: reward.command: cannot start /bin/sh: %s\n", strerror(rc));
        return -1;
    }
    return pid;
}

int reward_keeper_main(int argc, char **argv) {
    if (argc < 4) _exit(125);
    prctl(PR_SET_NAME, "tessera-keeper", 0, 0, 0);
    if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0)
        fprintf(stderr, "tessera-train: warning: reward.command: PR_SET_CHILD_SUBREAPER: %s: what "
                "the program starts in a session of its own may outlive the run\n", strerror(errno));
    fcntl(REWARD_KEEPER_LIFELINE, F_SETFD, FD_CLOEXEC);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    const pid_t prog = start_program(argv + 2);
    /* the pipes are the program's now: the rank sees their ends when it closes them */
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) dup2(null, 0), dup2(null, 1), close(null);
    if (prog < 0) _exit(125);
    struct pollfd life = {REWARD_KEEPER_LIFELINE, POLLIN, 0};
    for (;;) {
        int st;
        siginfo_t in;
        memset(&in, 0, sizeof in);
        if (waitid(P_PID, (id_t)prog, &in, WEXITED | WNOHANG | WNOWAIT) == 0 && in.si_pid == prog) {
            kill(-prog, SIGKILL); /* (its group, while its unreaped leader keeps the id) */
            waitpid(prog, &st, 0);
            end_all(); /* the program has ended: what it left behind goes too */
            exit_as(st);
        }
        pid_t w;
        while ((w = waitpid(-1, &st, WNOHANG)) > 0) /* orphans that end on their own */
            if (w == prog) end_all(), exit_as(st);
        /* (a 20 ms tick: a signal may land on another thread of this image, which sets the flag
         * but does not interrupt this poll) */
        if (g_term || (poll(&life, 1, 20) > 0 && life.revents)) break;
    }
    kill(-prog, SIGKILL);
    end_all();
    _exit(125);
}
