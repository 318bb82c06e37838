/* runlock.c — the lock file of a run directory or an output (runlock.h). */
#include "runlock.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "why.h"

#define LOCK_MAGIC "tessera-lock 1"
enum { MAX_HELD = 4 };

/* The locks this process holds, released at exit: atexit() takes no argument, so they are kept
 * here (the only state of this file; a lock is taken once or twice per process). */
static tsr_lock *g_held[MAX_HELD];

static void release_all(void) {
    for (int i = 0; i < MAX_HELD; i++)
        if (g_held[i]) tsr_lock_release(g_held[i]);
}

static void remember(tsr_lock *l) {
    static int registered;
    if (!registered) registered = atexit(release_all) == 0;
    for (int i = 0; i < MAX_HELD; i++)
        if (!g_held[i]) {
            g_held[i] = l;
            return;
        }
}

static void forget(const tsr_lock *l) {
    for (int i = 0; i < MAX_HELD; i++)
        if (g_held[i] == l) g_held[i] = NULL;
}

/* ---- who a process is ---- */

static void read_line(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    buf[0] = '\0';
    if (f && fgets(buf, (int)cap, f)) buf[strcspn(buf, "\n")] = '\0';
    if (f) fclose(f);
}

/* The start time of process pid in clock ticks since boot (/proc/PID/stat field 22): 0, or -1
 * when there is no such process or it has ended (a zombie: state Z or X, dead but not yet reaped,
 * as an MPI rank is for a few seconds after mpirun returns), -2 when it cannot be read. */
static int proc_start(long pid, unsigned long long *ticks) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? -1 : -2;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces and ')' */
    if (!p) return -2;
    if (p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X')) return -1; /* field 3, the state */
    for (int field = 2; field < 22; field++) { /* p is at the end of field 2 */
        p = strchr(p + 1, ' ');
        if (!p) return -2;
    }
    return sscanf(p + 1, "%llu", ticks) == 1 ? 0 : -2;
}

/* A Slurm id from the environment: digits and '_' only (it goes into a squeue command line). */
static void slurm_env(const char *name, char *buf, size_t cap) {
    const char *v = getenv(name);
    snprintf(buf, cap, "%s", v && *v && strspn(v, "0123456789_") == strlen(v) ? v : "");
}

static void self_info(tsr_lock_info *in, const char *what) {
    memset(in, 0, sizeof *in);
    snprintf(in->what, sizeof in->what, "%s", what);
    if (gethostname(in->host, sizeof in->host - 1) != 0) strcpy(in->host, "?");
    read_line("/proc/sys/kernel/random/boot_id", in->boot, sizeof in->boot);
    in->pid = (long)getpid();
    if (proc_start(in->pid, &in->start) != 0) in->start = 0;
    slurm_env("SLURM_JOB_ID", in->job, sizeof in->job);
    slurm_env("SLURM_STEP_ID", in->step, sizeof in->step);
    const char *rc = getenv("SLURM_RESTART_COUNT");
    in->restart = in->job[0] ? (rc && *rc ? strtol(rc, NULL, 10) : 0) : -1;
    in->since = (long long)time(NULL);
}

/* ---- the file ---- */

static int write_info(int fd, const tsr_lock_info *in) {
    char buf[1024];
    int n = snprintf(buf, sizeof buf,
                     LOCK_MAGIC "\nwhat %s\nhost %s\nboot %s\npid %ld\nstart %llu\njob %s\n"
                     "step %s\nrestart %ld\nsince %lld\n",
                     in->what, in->host, in->boot[0] ? in->boot : "-", in->pid, in->start,
                     in->job[0] ? in->job : "-", in->step[0] ? in->step : "-", in->restart,
                     in->since);
    return n > 0 && (size_t)n < sizeof buf && write(fd, buf, (size_t)n) == n && fsync(fd) == 0 ? 0 : -1;
}

/* One "key value" line into in; unknown keys are ignored (a later format may add some). */
static void parse_line(tsr_lock_info *in, const char *key, const char *val) {
    struct { const char *k; char *s; size_t cap; } strs[] = {
        {"what", in->what, sizeof in->what}, {"host", in->host, sizeof in->host},
        {"boot", in->boot, sizeof in->boot}, {"job", in->job, sizeof in->job},
        {"step", in->step, sizeof in->step}};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (!strcmp(key, strs[i].k)) snprintf(strs[i].s, strs[i].cap, "%s", strcmp(val, "-") ? val : "");
    if (!strcmp(key, "pid")) in->pid = strtol(val, NULL, 10);
    if (!strcmp(key, "start")) in->start = strtoull(val, NULL, 10);
    if (!strcmp(key, "restart")) in->restart = strtol(val, NULL, 10);
    if (!strcmp(key, "since")) in->since = strtoll(val, NULL, 10);
}

static int read_info(FILE *f, tsr_lock_info *in) {
    char line[512];
    memset(in, 0, sizeof *in);
    in->restart = -1;
    if (!fgets(line, sizeof line, f) || strncmp(line, LOCK_MAGIC "\n", sizeof LOCK_MAGIC) != 0) return -1;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *sp = strchr(line, ' ');
        if (!sp) continue;
        *sp = '\0';
        parse_line(in, line, sp + 1);
    }
    /* the job ids go into a squeue command line: digits and '_' only */
    if (strspn(in->job, "0123456789_") != strlen(in->job)) in->job[0] = '\0';
    if (strspn(in->step, "0123456789_") != strlen(in->step)) in->step[0] = '\0';
    return in->pid > 0 && in->host[0] ? 0 : -1;
}

/* What a file that is not a regular one is, for a message. */
static const char *odd_kind(mode_t m) {
    return S_ISLNK(m) ? "a symbolic link" : S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO"
           : S_ISSOCK(m) ? "a socket" : S_ISCHR(m) ? "a character device"
           : S_ISBLK(m) ? "a block device" : "not a regular file";
}

/* The lock file at path opened for reading, never following a symbolic link nor waiting on a FIFO
 * (O_NOFOLLOW, O_NONBLOCK: a FIFO at the name hung the open, beyond SIGTERM's reach): NULL with
 * errno, or with *kind set (errno 0) when the name is not a regular file. */
static FILE *open_lock(const char *path, const char **kind) {
    *kind = NULL;
    struct stat st;
    if (lstat(path, &st) != 0) return NULL;
    int fd = -1;
    if (S_ISREG(st.st_mode)) {
        fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ELOOP) st.st_mode = S_IFLNK; /* replaced since the lstat */
        else if (fd < 0) return NULL;
        else if (fstat(fd, &st) != 0) st.st_mode = 0;
    }
    if (!S_ISREG(st.st_mode)) {
        if (fd >= 0) close(fd);
        *kind = odd_kind(st.st_mode);
        errno = 0;
        return NULL;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) close(fd);
    return f;
}

int tsr_lock_read(const char *path, tsr_lock_info *info) {
    const char *kind;
    FILE *f = open_lock(path, &kind);
    if (!f) return -1;
    int rc = read_info(f, info);
    fclose(f);
    return rc;
}

/* ---- is the holder gone? ---- */

static int terminal_state(const char *s) {
    static const char *const ended[] = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
                                        "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", NULL};
    for (const char *const *e = ended; *e; e++)
        if (!strncmp(s, *e, strlen(*e))) return 1;
    return 0;
}

/* squeue's answer about a job (want NULL: `-t all -j JOB -o %T` lists its state) or one of its
 * steps (want "JOB.STEP": `-s -j JOB -o %i` lists the running steps): 1 alive, 0 ended (an ended
 * state, not listed, or "Invalid job id": Slurm forgot it), -1 squeue cannot say (not installed,
 * no controller). */
static int squeue_alive(const char *args, const char *want) {
    char cmd[256], line[256];
    snprintf(cmd, sizeof cmd, "squeue -h %s 2>&1", args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    int alive = 0, invalid = 0;
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = '\0';
        if (strstr(line, "Invalid job id")) invalid = 1;
        else if (want ? !strcmp(line, want) : !terminal_state(line)) alive = 1;
    }
    int st = pclose(p);
    if (invalid) return 0;
    if (st != 0) return -1;
    return alive;
}

/* The holder on this host: gone when it booted since, no process has the PID, or the one that
 * has it started at another time. */
static int gone_here(const tsr_lock_info *h, const tsr_lock_info *me, char *why, size_t cap) {
    if (h->boot[0] && me->boot[0] && strcmp(h->boot, me->boot))
        return tsr_why(1, why, cap, "%s has booted since", h->host);
    unsigned long long start;
    int st = proc_start(h->pid, &start);
    if (st == -1) return tsr_why(1, why, cap, "process %ld on %s has ended", h->pid, h->host);
    if (st == 0 && h->start && start != h->start)
        return tsr_why(1, why, cap,
                       "PID %ld on %s is another process now (started at tick %llu, the "
                       "holder at %llu)", h->pid, h->host, start, h->start);
    snprintf(why, cap, "process %ld runs on this host", h->pid);
    return 0;
}

/* A holder under Slurm: an earlier run of this job (requeued since), or a job or step squeue
 * says has ended. */
static int gone_slurm(const tsr_lock_info *h, const tsr_lock_info *me, char *why, size_t cap) {
    char args[128], step[80];
    if (!strcmp(h->job, me->job) && h->restart >= 0 && me->restart > h->restart)
        return tsr_why(1, why, cap,
                       "it is an earlier run of this Slurm job %s (restart %ld; this is "
                       "restart %ld: requeued since)", h->job, h->restart, me->restart);
    int same_job = !strcmp(h->job, me->job), alive;
    if (same_job && h->step[0] && strcmp(h->step, me->step)) { /* another step of this job */
        snprintf(args, sizeof args, "-s -j %s -o %%i", h->job);
        snprintf(step, sizeof step, "%s.%s", h->job, h->step);
        alive = squeue_alive(args, step);
        if (alive == 0) return tsr_why(1, why, cap, "squeue lists no step %s running", step);
    } else if (!same_job) {
        snprintf(args, sizeof args, "-t all -j %s -o %%T", h->job);
        alive = squeue_alive(args, NULL);
        if (alive == 0) return tsr_why(1, why, cap, "squeue says Slurm job %s has ended", h->job);
    } else {
        alive = 1; /* the same step of the same job: a second trainer in it */
    }
    snprintf(why, cap, alive > 0 ? "Slurm job %s%s%s is running" : "squeue cannot say whether "
             "Slurm job %s%s%s has ended", h->job, h->step[0] ? " step " : "", h->step);
    return 0;
}

static int holder_gone(const tsr_lock_info *h, const tsr_lock_info *me, char *why, size_t cap) {
    if (!strcmp(h->host, me->host)) return gone_here(h, me, why, cap);
    if (h->job[0]) return gone_slurm(h, me, why, cap);
    snprintf(why, cap, "it runs on another host without Slurm: whether it is alive cannot be "
             "checked from here");
    return 0;
}

/* ---- taking ---- */

/* The temporary file beside the lock, written in full: its path in tmp. -1 on an I/O error. */
static int write_tmp(const char *path, const tsr_lock_info *me, char *tmp, size_t cap) {
    if (tsr_snprintf(tmp, cap, "%s.%s.%ld.tmp", path, me->host, me->pid)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    unlink(tmp); /* one this PID left on this host: ours */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    int rc = write_info(fd, me);
    int err = errno;
    close(fd);
    errno = err;
    if (rc) unlink(tmp);
    return rc;
}

/* link(tmp, path): 1 taken, 0 the name exists, -1 another error (errno). NFS may report a
 * failure for a link that was made (a retried request): the link count of tmp tells. */
static int try_link(const char *tmp, const char *path) {
    if (link(tmp, path) == 0) return 1;
    int err = errno;
    struct stat st;
    if (stat(tmp, &st) == 0 && st.st_nlink == 2) return 1;
    errno = err;
    return err == EEXIST ? 0 : -1;
}

/* The stale lock (inode ino) renamed away and removed; a fresh lock that took its place in
 * between is put back. 1 when removed. */
static int break_stale(const char *path, const tsr_lock_info *me, ino_t ino) {
    char moved[4200];
    snprintf(moved, sizeof moved, "%s.stale.%s.%ld", path, me->host, me->pid);
    if (rename(path, moved) != 0) return 0;
    struct stat st;
    if (stat(moved, &st) == 0 && st.st_ino == ino) {
        unlink(moved);
        return 1;
    }
    if (link(moved, path) != 0 && errno != EEXIST) rename(moved, path); /* not ours to break */
    unlink(moved);
    return 0;
}

static int refuse(const char *path, const tsr_lock_info *h, const char *why) {
    char since[64] = "?";
    time_t t = (time_t)h->since;
    struct tm tm;
    if (h->since > 0 && gmtime_r(&t, &tm)) strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S UTC", &tm);
    char job[96] = "";
    if (h->job[0]) snprintf(job, sizeof job, ", Slurm job %s%s%s", h->job, h->step[0] ? "." : "", h->step);
    tsr_error("%s: held by %s, PID %ld on %s%s, since %s (%s): one writer at a time. Stop it "
              "first; if it is gone, remove %s", path, h->what[0] ? h->what : "?", h->pid, h->host,
              job, since, why, path);
    return TSR_EXIT_DATA;
}

/* The lock exists: 1 when it was stale and is gone now (try again), else the refusal's status. */
static int judge(const char *path, const tsr_lock_info *me) {
    const char *kind;
    FILE *f = open_lock(path, &kind);
    if (!f && kind) {
        tsr_error("%s: is %s, expected a tessera lock file (a regular file) or nothing: one writer "
                  "at a time; remove it if nothing writes here", path, kind);
        return TSR_EXIT_DATA;
    }
    if (!f) return errno == ENOENT ? 1 : (tsr_error("%s: cannot read the lock file: %s", path,
                                                     strerror(errno)), TSR_EXIT_DATA);
    struct stat st;
    tsr_lock_info h;
    int bad = fstat(fileno(f), &st) != 0 || read_info(f, &h) != 0;
    fclose(f);
    if (bad) {
        tsr_error("%s: exists but is not a tessera lock file: one writer at a time; remove it if "
                  "nothing writes here", path);
        return TSR_EXIT_DATA;
    }
    char why[300];
    if (!holder_gone(&h, me, why, sizeof why)) return refuse(path, &h, why);
    if (!break_stale(path, me, st.st_ino)) return 1; /* someone else broke it: look again */
    tsr_warn("%s: taking over the lock of %s, PID %ld on %s: %s", path, h.what, h.pid, h.host, why);
    return 1;
}

int tsr_lock_take(tsr_lock *l, const char *path, const char *what) {
    memset(l, 0, sizeof *l);
    tsr_lock_info me;
    self_info(&me, what);
    char tmp[4300];
    if (tsr_snprintf(l->path, sizeof l->path, "%s", path) || write_tmp(path, &me, tmp, sizeof tmp)) {
        tsr_error("%s: cannot write the lock file: %s", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    int rc = -1;
    for (int tries = 0; tries < 5 && rc < 0; tries++) {
        int got = try_link(tmp, path), j;
        if (got < 0) tsr_error("%s: cannot make the lock file: %s", path, strerror(errno));
        if (got) rc = got > 0 ? 0 : TSR_EXIT_DATA;
        else if ((j = judge(path, &me)) != 1) rc = j;
    }
    if (rc < 0) {
        tsr_error("%s: the lock file changed hands 5 times while this process tried to take it: "
                  "several writers are starting at once", path);
        rc = TSR_EXIT_DATA;
    }
    unlink(tmp);
    if (rc) return rc;
    l->pid = getpid();
    remember(l);
    return 0;
}

void tsr_lock_release(tsr_lock *l) {
    if (!l->pid || l->pid != getpid()) return; /* not taken, or a child of the taker */
    tsr_lock_info h;
    char host[256];
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "?");
    host[sizeof host - 1] = '\0';
    if (tsr_lock_read(l->path, &h) == 0 && h.pid == (long)l->pid && !strcmp(h.host, host))
        unlink(l->path);
    l->pid = 0;
    forget(l);
}
