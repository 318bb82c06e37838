/* reward_proc.c — the reward program of reward.kind = command (reward_proc.h, reward.h).
 *
 * The program runs as `/bin/sh -c reward.command`, spawned (posix_spawn: no fork of the MPI
 * process's address space) with its stdin and stdout on pipes and its stderr the trainer's. A
 * step's requests are written and its answers read together (poll on both pipes, so a program
 * that answers before it has read everything cannot block on a full pipe), against one deadline.
 * Ids run on across steps, so a late answer to an earlier step is an id this step did not send.
 * Bounds: its lines (REWARD_MAX_LINE) and time (reward.timeout) here; its memory by `ulimit -v`
 * (reward.memory_mib) in the shell that starts it; it runs under a keeper (reward_keeper.h), a
 * subreaper tied to this rank by a lifeline pipe, which ends whatever the program started, in a
 * session of its own too, when the rank ends however it ends, or when it is stopped.
 */
#include "posttrain/reward_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "posttrain/reward_keeper.h"

extern char **environ;

#define QUOTE_MAX 300 /* bytes of a request or an answer a message quotes */

/* Is s a simple command: words of plain characters only (no quote, expansion, redirection,
 * list, pipe, glob or assignment), the first a program? Then sh -c runs "exec s" alike. */
static int simple_command(const char *s) {
    static const char plain[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                                "_./:+,@%-";
    int words = 0;
    for (const char *p = s; *p;) {
        while (*p == ' ' || *p == '\t') p++;
        const size_t n = strspn(p, plain);
        if (!*p) break;
        if (!n || (p[n] && p[n] != ' ' && p[n] != '\t')) return 0;
        p += n, words++;
    }
    return words > 0;
}

/* The program a simple reward.command starts, checked before the first rollout (docs/rl.md): found
 * in PATH (as sh would look) or at the path named, a regular file, executable. 1 (the path in exe),
 * 0 (not a simple command, or a shell builtin: sh will tell), or TSR_EXIT_DATA after tsr_error. */
static int command_program(const char *cmd, char *exe, size_t cap) {
    static const char *const builtins[] = {"cd", "exec", "exit", "eval", "export", "set", "trap",
                                           "ulimit", "umask", "wait", "read", ".", ":", NULL};
    if (!simple_command(cmd)) return 0;
    char word[1024];
    while (*cmd == ' ' || *cmd == '\t') cmd++;
    snprintf(word, sizeof word, "%.*s", (int)strcspn(cmd, " \t"), cmd);
    for (int i = 0; builtins[i]; i++)
        if (!strcmp(word, builtins[i])) return 0;
    const char *path = strchr(word, '/') ? "" : getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    struct stat st;
    int seen = 0; /* a file of that name, not a runnable one */
    for (const char *d = path;; d += strcspn(d, ":") + 1) {
        const int n = (int)strcspn(d, ":");
        if (strchr(word, '/')) snprintf(exe, cap, "%s", word);
        else snprintf(exe, cap, "%.*s%s%s", n, d, n ? "/" : "", word);
        if (stat(exe, &st) == 0) {
            if (S_ISREG(st.st_mode) && access(exe, X_OK) == 0) return 1;
            seen = 1;
        }
        if (!d[n] || strchr(word, '/')) break;
    }
    if (strchr(word, '/'))
        tsr_error("reward.command = \"%s\": %s: %s", cmd, word,
                  !seen ? "no such file" : S_ISDIR(st.st_mode) ? "a directory, not a program"
                                                             : "not an executable file (chmod +x?)");
    else
        tsr_error("reward.command = \"%s\": %s: %s in PATH (%s)", cmd, word,
                  seen ? "no executable file of that name" : "not found", path);
    return TSR_EXIT_DATA;
}

/* The keeper (reward_keeper.h: this executable again) of sh -c reward.command, the keeper leading
 * a process group of its own, the program under ulimit -v reward.memory_mib set by a shell that
 * then runs the command as sh -c would without it. A simple command runs as "exec COMMAND": no
 * shell waits above its program, holding its output open, so that a program that closes its
 * output is seen at once. posix_spawn's status. */
static int spawn(reward_ctx *r, const posix_spawn_file_actions_t *fa, char **env, int simple) {
    char wrap[256], *cmd = NULL;
    const long long kib = (long long)r->cfg->reward.memory_mib * 1024;
    snprintf(wrap, sizeof wrap, "ulimit -v %lld || { echo \"tessera-train: reward.memory_mib: "
             "ulimit -v %lld refused (a lower hard limit?)\" >&2; exit 125; }\n"
             "exec /bin/sh -c \"$1\"", kib, kib);
    if (asprintf(&cmd, "%s%s", simple ? "exec " : "", r->cfg->reward.command) < 0)
        tsr_die(TSR_EXIT_INTERNAL, "reward.command: out of memory");
    char *keeper = REWARD_KEEPER_ARG;
    char *plain[] = {"tessera-keeper", keeper, "/bin/sh", "-c", cmd, NULL};
    char *bounded[] = {"tessera-keeper", keeper, "/bin/sh", "-c", wrap, "sh", cmd, NULL};
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&at, 0);
    int rc = posix_spawn(&r->pid, "/proc/self/exe", fa, &at,
                         r->cfg->reward.memory_mib ? bounded : plain, env);
    posix_spawnattr_destroy(&at);
    free(cmd);
    return rc;
}

int reward_proc_start(reward_ctx *r, int rank, int world) {
    char exe[1200];
    const int simple = command_program(r->cfg->reward.command, exe, sizeof exe);
    if (simple == TSR_EXIT_DATA) return simple;
    int in[2], out[2], life[2]; /* life: the lifeline, its write end the rank's alone */
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(life, O_CLOEXEC))
        tsr_die(TSR_EXIT_INTERNAL, "reward.command: pipe: %s", strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, life[0], REWARD_KEEPER_LIFELINE);
    size_t ne = 0;
    while (environ[ne]) ne++;
    char **env = tsr_malloc((ne + 3) * sizeof *env), rk[48], wd[48];
    memcpy(env, environ, ne * sizeof *env);
    snprintf(rk, sizeof rk, "TESSERA_RANK=%d", rank);
    snprintf(wd, sizeof wd, "TESSERA_WORLD=%d", world);
    env[ne] = rk, env[ne + 1] = wd, env[ne + 2] = NULL;
    int rc = spawn(r, &fa, env, simple);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    close(in[0]), close(out[1]), close(life[0]);
    if (rc) {
        close(in[1]), close(out[0]), close(life[1]);
        r->pid = 0;
        tsr_error("reward.command = \"%s\": cannot start its keeper (/proc/self/exe): %s",
                  r->cfg->reward.command, strerror(rc));
        return TSR_EXIT_DATA;
    }
    tsr_child_group(r->pid, 1); /* (the keeper leads its group: posix_spawn's SETPGROUP 0) */
    r->to_child = in[1], r->from_child = out[0], r->life = life[1];
    fcntl(r->to_child, F_SETFL, O_NONBLOCK);
    fcntl(r->from_child, F_SETFL, O_NONBLOCK);
    signal(SIGPIPE, SIG_IGN); /* a program that exits makes our writes fail, not kill us */
    return 0;
}

/* s (n bytes) for a message: control bytes escaped, cut at QUOTE_MAX */
static void quote(char *out, size_t cap, const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n && i < QUOTE_MAX && k + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) k += (size_t)snprintf(out + k, cap - k, "\\x%02x", c);
        else out[k++] = (char)c;
    }
    if (n > QUOTE_MAX && k + 4 < cap) memcpy(out + k, "...", 3), k += 3;
    out[k] = '\0';
}

/* one exchange: the requests as text, their line offsets, what came back */
typedef struct exch {
    char *req;
    size_t req_len, sent;
    size_t *line_at;   /* (n + 1) offsets of the request lines */
    int n, answered;
    uint64_t id0;      /* the id of request 0 */
    char *done;        /* (n) answered */
} exch;

static void put_request(FILE *f, const reward_req *q, uint64_t id) {
    fprintf(f, "{\"id\": %llu, \"step\": %lld, \"prompt_index\": %llu, \"sample\": %d, \"prompt\": ",
            (unsigned long long)id, (long long)q->step, (unsigned long long)q->prompt_index,
            q->sample);
    fwrite(q->record, 1, q->record_len, f);
    fputs(", \"completion\": ", f);
    json_fput_string(f, q->completion);
    if (q->harmony) { /* the final channel's text, null without one (docs/rl.md) */
        fputs(", \"final\": ", f);
        if (q->final) json_fput_string(f, q->final);
        else fputs("null", f);
    }
    fputs(", \"tokens\": [", f);
    for (int i = 0; i < q->n; i++) fprintf(f, "%s%d", i ? ", " : "", q->ids[i]);
    fprintf(f, "], \"stop\": \"%s\"}\n", q->stop);
}

static void exch_build(exch *x, const reward_req *q, int n, uint64_t id0) {
    memset(x, 0, sizeof *x);
    x->n = n, x->id0 = id0;
    x->line_at = tsr_malloc((size_t)(n + 1) * sizeof *x->line_at);
    x->done = tsr_calloc((size_t)(n ? n : 1), 1);
    FILE *f = open_memstream(&x->req, &x->req_len);
    for (int i = 0; i < n; i++) {
        fflush(f);
        x->line_at[i] = x->req_len;
        put_request(f, &q[i], id0 + (uint64_t)i);
    }
    fclose(f);
    x->line_at[n] = x->req_len;
}

static void exch_free(exch *x) { free(x->req), free(x->line_at), free(x->done); }

/* request i quoted */
static void quote_request(const exch *x, int i, char *out, size_t cap) {
    quote(out, cap, x->req + x->line_at[i], x->line_at[i + 1] - x->line_at[i] - 1);
}

/* The error: what went wrong, the request it concerns (or the first unanswered one) and the
 * answer, quoted; the program is stopped. */
static int fail(reward_ctx *r, const exch *x, int req, const char *answer, size_t alen,
                const char *what) {
    char rq[QUOTE_MAX * 4 + 8] = "", an[QUOTE_MAX * 4 + 8] = "";
    for (int i = 0; req < 0 && i < x->n; i++)
        if (!x->done[i]) req = i;
    if (req >= 0) quote_request(x, req, rq, sizeof rq);
    if (answer) quote(an, sizeof an, answer, alen);
    snprintf(r->err, sizeof r->err, "reward.command \"%.200s\": %s (%d of %d completions "
             "answered)%s%s%s%s%s; the run stops: no completion is scored 0 in its place (docs/rl.md "
             "\"The reward program\")", r->cfg->reward.command, what, x->answered, x->n,
             req >= 0 ? "; it was sent: " : "", rq, answer ? "; it answered: " : "", an,
             answer && alen > QUOTE_MAX ? " (cut)" : "");
    reward_proc_stop(r);
    return TSR_EXIT_DATA;
}

/* one answer line: {"id", "reward"[, "pass"]} for an id sent and not answered yet */
static int take_line(reward_ctx *r, exch *x, const char *s, size_t n, double *reward, int *pass) {
    json_value *root;
    json_error je;
    if (json_parse(&r->jd, s, n, &root, &je) || root->type != JSON_OBJECT)
        return fail(r, x, -1, s, n, "it answered a line that is not a JSON object");
    const json_value *id = json_get(root, "id"), *rw = json_get(root, "reward");
    const json_value *ps = json_get(root, "pass");
    if (!id || id->type != JSON_NUMBER || !rw || rw->type != JSON_NUMBER || !isfinite(rw->num) ||
        (ps && ps->type != JSON_TRUE && ps->type != JSON_FALSE))
        return fail(r, x, -1, s, n, "an answer needs \"id\" (a number it was sent), \"reward\" (a "
                    "finite number) and optionally \"pass\" (true or false)");
    if (fabs(rw->num) > REWARD_MAX_ABS)
        return fail(r, x, -1, s, n, "a reward beyond the bound |reward| <= 1e6 (a reward that "
                    "large overflows the advantages and the loss)");
    const double k = id->num - (double)x->id0;
    if (!(k >= 0 && k < x->n && k == floor(k)))
        return fail(r, x, -1, s, n, "it answered an id it was not sent in this step");
    const int i = (int)k;
    if (x->done[i]) return fail(r, x, i, s, n, "it answered the same id twice");
    x->done[i] = 1, x->answered++;
    reward[i] = rw->num;
    pass[i] = ps ? ps->type == JSON_TRUE : rw->num >= 1.0;
    return 0;
}

/* The complete lines in r->buf taken; the rest kept. A line over REWARD_MAX_LINE is refused. */
static int take_lines(reward_ctx *r, exch *x, double *reward, int *pass) {
    size_t at = 0;
    for (char *nl; x->answered < x->n && (nl = memchr(r->buf + at, '\n', r->len - at));) {
        size_t n = (size_t)(nl - (r->buf + at));
        if (n > REWARD_MAX_LINE)
            return fail(r, x, -1, r->buf + at, n, "it answered a line longer than 65536 bytes");
        if (n && r->buf[at + n - 1] == '\r') n--;
        if (n) TSR_CHECK(take_line(r, x, r->buf + at, n, reward, pass));
        at = (size_t)(nl - r->buf) + 1;
    }
    memmove(r->buf, r->buf + at, r->len - at);
    r->len -= at;
    if (r->len > REWARD_MAX_LINE)
        return fail(r, x, -1, r->buf, r->len, "it answered a line longer than 65536 bytes");
    return 0;
}

/* Has the program ended? Its keeper's status (the program's) in *info, the zombie left unreaped
 * (WNOWAIT) until reward_proc_stop. Waits up to ms. */
static int has_ended(const reward_ctx *r, siginfo_t *info, int ms) {
    for (int k = 0;; k += 10) {
        memset(info, 0, sizeof *info);
        if (waitid(P_PID, (id_t)r->pid, info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            info->si_pid == r->pid)
            return 1;
        if (k >= ms) return 0;
        usleep(10000);
    }
}

/* Could the program have ended for its memory bound (docs/rl.md)? Killed by SIGKILL (the kernel's
 * out-of-memory killer), SIGSEGV, SIGBUS or SIGABRT (a failed allocation in C, C++'s bad_alloc),
 * a shell's 128 + one of them, or exit status 1 (Python's MemoryError); not exit 0, 127 (not
 * found), 126 (not executable) or any other status. */
static int memory_ending(int exited, int status) {
    const int sig = !exited ? status : status > 128 && status < 160 ? status - 128 : 0;
    if (exited && status == 1) return 1;
    return sig == SIGKILL || sig == SIGSEGV || sig == SIGBUS || sig == SIGABRT;
}

/* how the program ended, for a message (it may close its output just before it exits) */
static void ended(const reward_ctx *r, char *out, size_t cap) {
    siginfo_t in;
    int k;
    const int gone = r->pid > 0 && has_ended(r, &in, 500);
    if (!gone) k = snprintf(out, cap, "it closed its output (it is still running)");
    else if (in.si_code == CLD_EXITED) k = snprintf(out, cap, "it exited with status %d", in.si_status);
    else k = snprintf(out, cap, "it was killed by signal %d", in.si_status);
    if (gone && r->cfg->reward.memory_mib && k > 0 && (size_t)k < cap &&
        memory_ending(in.si_code == CLD_EXITED, in.si_status)) /* the likely cause */
        snprintf(out + k, cap - (size_t)k, " (its memory is bounded by reward.memory_mib = %lld)",
                 (long long)r->cfg->reward.memory_mib);
}

/* what is readable from the program into r->buf: 0, 1 at its end (EOF), or -1 (an error) */
static int read_some(reward_ctx *r) {
    if (r->cap - r->len < 65536) {
        r->cap = r->cap ? 2 * r->cap : 4 * 65536;
        char *nb = realloc(r->buf, r->cap);
        if (!nb) tsr_die(TSR_EXIT_INTERNAL, "reward.command: out of memory (%zu bytes)", r->cap);
        r->buf = nb;
    }
    ssize_t got = read(r->from_child, r->buf + r->len, r->cap - r->len);
    if (got > 0) r->len += (size_t)got;
    return got == 0 ? 1 : got < 0 && errno != EAGAIN && errno != EINTR ? -1 : 0;
}

/* requests out and answers in until every request is answered, the deadline, or an error */
static int pump(reward_ctx *r, exch *x, double *reward, int *pass) {
    const double deadline = tsr_now() + r->cfg->reward.timeout;
    char why[160];
    while (x->answered < x->n) {
        const double left = deadline - tsr_now();
        if (left <= 0) {
            snprintf(why, sizeof why, "no answer within reward.timeout = %g s (a program on a "
                     "pipe must flush each line: python -u, fflush)", r->cfg->reward.timeout);
            return fail(r, x, -1, NULL, 0, why);
        }
        struct pollfd p[2] = {{r->from_child, POLLIN, 0}, {r->to_child, POLLOUT, 0}};
        const int np = x->sent < x->req_len ? 2 : 1;
        if (poll(p, (nfds_t)np, (int)(left * 1000) + 1) < 0 && errno != EINTR)
            tsr_die(TSR_EXIT_INTERNAL, "reward.command: poll: %s", strerror(errno));
        if (np == 2 && p[1].revents) {
            ssize_t w = write(r->to_child, x->req + x->sent, x->req_len - x->sent);
            if (w > 0) x->sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EINTR) {
                ended(r, why, sizeof why);
                return fail(r, x, -1, NULL, 0, why);
            }
        }
        if (p[0].revents) {
            const int end = read_some(r);
            TSR_CHECK(take_lines(r, x, reward, pass));
            if (end && x->answered < x->n) {
                ended(r, why, sizeof why);
                return fail(r, x, -1, r->len ? r->buf : NULL, r->len, why);
            }
        }
    }
    return 0;
}

int reward_proc_score(reward_ctx *r, const reward_req *q, int n, double *reward, int *pass) {
    if (!r->pid) {
        snprintf(r->err, sizeof r->err, "reward.command \"%.200s\": the program is not running "
                 "(it was stopped after an earlier error)", r->cfg->reward.command);
        return TSR_EXIT_DATA;
    }
    exch x;
    exch_build(&x, q, n, r->next_id);
    r->next_id += (uint64_t)n; /* ids run on across the steps */
    int rc = pump(r, &x, reward, pass);
    exch_free(&x);
    return rc;
}

void reward_proc_stop(reward_ctx *r) {
    if (r->to_child >= 0) close(r->to_child);
    if (r->from_child >= 0) close(r->from_child);
    r->to_child = r->from_child = -1;
    siginfo_t in;
    if (r->pid > 0) has_ended(r, &in, 1000); /* a second to end on its own, its input closed */
    if (r->life >= 0) close(r->life); /* the keeper then ends whatever is left */
    r->life = -1;
    if (r->pid <= 0) return;
    if (!has_ended(r, &in, 5000)) kill(-r->pid, SIGKILL); /* (a keeper stuck: not ours to wait for) */
    waitpid(r->pid, NULL, 0);
    tsr_child_group(r->pid, 0);
    r->pid = 0;
}
