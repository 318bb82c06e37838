/* ckpt_writer.c — this rank's slices of a save (ckpt_save.h): step 3 of ckpt.c's order.
 *
 * A synchronous save runs it in the caller's thread, the partial blocks at the ends of the slices
 * through HDF5 (ckpt_io.c). An asynchronous save (ckpt_save_start with async) runs it on a thread
 * of its own while the caller goes on training: that thread calls neither MPI (the programs
 * initialise MPI for one thread: MPI_THREAD_FUNNELED at most) nor HDF5 (Debian's is not built
 * thread-safe, and the main thread's commit uses it), so every byte goes with pwrite or O_DIRECT
 * at the addresses HDF5 gave the datasets when the caller created them. Its outcome is read by
 * the caller after ck_writer_wait; the caller agrees on it with the other ranks (ckpt.c).
 *
 * With a stage (an asynchronous save's snapshot buffer), the writer first copies the slices into
 * it, each where its whole blocks can go to the disk with O_DIRECT straight from the stage, its
 * CRC32C computed in the same pass (one pass over the state, no bounce copy after it): the
 * caller's state is read while the caller goes on (the next step's forward and backward only
 * read it), and ck_writer_wait_copied lets the caller wait for the copy before it changes
 * the state (the next update).
 *
 * Test-only faults (TSR_CKPT_FAULT, ck_fault): "abort-after:K" makes rank 0 abort() right after
 * the K-th tensor (a crash in the middle of the write); "slow-write:MS" copies and writes one
 * tensor at a time and sleeps MS ms before each, so that a test can land a kill or a signal
 * inside the background write, or make the next update wait for the copy
 * (tests/ckpt/test_ckpt_async*.sh); "allow-nonfinite" writes a state that is not finite as an
 * older build did (tests/ckpt/test_ckpt_nonfinite.sh: what `tessera ckpt verify` says of one);
 * "v1-read-seconds:S" bounds the read of a version 1 file's strings at S seconds, not 30
 * (ckpt_meta.c; tests/ckpt/test_ckpt_damage.sh). Never set them in production.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "ckpt_save.h"
#include "common.h"

static const char *const fault_kinds[] = {"abort-after", "skip-space-check", "slow-write",
                                           "allow-nonfinite", "v1-read-seconds"};

/* kind matches the entry at p (up to its ':' or ',') */
static int entry_is(const char *p, const char *kind) {
    size_t n = strlen(kind);
    return strncmp(p, kind, n) == 0 && (p[n] == ':' || p[n] == ',' || p[n] == '\0');
}

const char *ck_fault(const char *kind) {
    const char *v = getenv("TSR_CKPT_FAULT");
    for (const char *p = v; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (entry_is(p, kind)) return p + strlen(kind) + (p[strlen(kind)] == ':');
    return NULL;
}

/* The fault's value (a number in 0 .. 2^30): -1 when unset; an entry not understood is warned
 * about once per save and ignored. */
static long fault_value(const char *kind) {
    const char *v = getenv("TSR_CKPT_FAULT");
    for (const char *p = v; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        int known = 0;
        for (size_t k = 0; k < sizeof fault_kinds / sizeof fault_kinds[0]; k++)
            known |= entry_is(p, fault_kinds[k]);
        if (!known && strcmp(kind, fault_kinds[0]) == 0)
            tsr_warn("TSR_CKPT_FAULT=\"%s\": entry \"%.*s\" not understood (expected "
                     "\"abort-after:K\", \"skip-space-check\", \"slow-write:MS\", "
                     "\"allow-nonfinite\" or \"v1-read-seconds:S\", separated by "
                     "commas); ignored", v, (int)strcspn(p, ","), p);
    }
    const char *s = ck_fault(kind);
    char num[32];
    int64_t k;
    if (!s) return -1;
    snprintf(num, sizeof num, "%.*s", (int)strcspn(s, ","), s);
    if (tsr_parse_i64(num, 0, 1 << 30, &k) != 0) {
        tsr_warn("TSR_CKPT_FAULT=\"%s\": %s needs a number (0 .. 2^30), got \"%s\"; ignored", v,
                 kind, num);
        return -1;
    }
    return (long)k;
}

int ck_fsync_path(const char *path, int dir, char *why, size_t cap) {
    int fd = open(path, (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL)) {
        char eb[128];
        snprintf(why, cap, "fsync of %.300s failed: %.300s", path, strerror_r(errno, eb, sizeof eb));
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* This rank's slices of tensors [0, upto) into p->tmp, with the CRCs the stage's copy computed
 * (w->crc); the errno of the first failed write in *err (0 when unknown). Under
 * "slow-write:MS" one tensor at a time, MS ms before each, until one fails. */
static void transfer(struct ckpt_pending *p, int upto, long slow_ms, int *err) {
    save_state *st = &p->st;
    ck_writer *w = &p->w;
    const hid_t *ds = p->async ? NULL : st->ds;
    ck_xfer x = {w->crc, w->have_crc, 0, 0};
    if (slow_ms < 0) {
        ck_transfer_slices(p->tmp, 1, upto, st->ptr, ds, st->off, p->dxpl, st->slice_crc, st->ok,
                           err, &x);
        w->cpu_io = x.io_cpu, w->bounced = x.bounced;
        return;
    }
    for (int i = 0; i < upto; i++) {
        int e = 0;
        sleep_ms(slow_ms);
        x.crc = w->crc ? w->crc + i : NULL, x.have_crc = w->have_crc ? w->have_crc + i : NULL;
        ck_transfer_slices(p->tmp, 1, 1, st->ptr + i, ds ? ds + i : NULL, st->off + i, p->dxpl,
                           st->slice_crc + i, st->ok + i, &e, &x);
        w->cpu_io += x.io_cpu, w->bounced += x.bounced;
        if (!*err) *err = e;
        if (!st->ok[i]) break; /* the save has failed: no more delays for the rest (unwritten) */
    }
}

/* Where slice i goes in the stage, from float `at` on: the first place whose address is congruent
 * to the slice's address in the file modulo CK_DIRECT_ALIGN, so that its whole blocks go with
 * O_DIRECT straight from the stage (no bounce copy: ckpt_io.c), as far as *slack (the stage's
 * floats beyond what the slices need) allows; else at. */
_Static_assert(CKPT_STAGE_PAD_FLOATS * sizeof(float) == CK_DIRECT_ALIGN, "a slice's padding");
static size_t aligned_at(const struct ckpt_pending *p, int i, size_t at, size_t *slack) {
    const haddr_t off = p->st.off[i];
    if (off == HADDR_UNDEF || off % sizeof(float)) return at;
    const uintptr_t want = (uintptr_t)((off + p->tensors[i].lo * sizeof(float)) % CK_DIRECT_ALIGN);
    const uintptr_t have = (uintptr_t)(p->stage + at) % CK_DIRECT_ALIGN;
    const size_t pad = (want + CK_DIRECT_ALIGN - have) % CK_DIRECT_ALIGN / sizeof(float);
    if (pad > *slack) return at;
    *slack -= pad;
    return at + pad;
}

size_t ck_stage_used(const struct ckpt_pending *p, const float *stage, size_t cap, size_t *copy) {
    size_t at = 0;
    *copy = 0;
    for (int i = 0; i < p->n; i++) {
        const ckpt_tensor *t = &p->tensors[i];
        const size_t len = t->hi - t->lo;
        if (len && stage && t->data >= stage && t->data < stage + cap) {
            const size_t end = (size_t)(t->data - stage) + len;
            at = end > at ? end : at;
        } else {
            *copy += len;
        }
    }
    return at;
}

/* The stage: each slice whose data lies outside it copied in (after those already inside, which
 * stay; aligned_at), its CRC32C computed in the same pass (w->crc, w->have_crc), its descriptor
 * pointing there; then the caller's data may change (copied, signalled). Under "slow-write:MS"
 * MS ms before each copy too. */
static void copy_to_stage(struct ckpt_pending *p, long slow_ms) {
    ck_writer *w = &p->w;
    const float *lo = p->stage, *hi = p->stage ? p->stage + p->stage_floats : NULL;
    size_t copy = 0, at = ck_stage_used(p, p->stage, p->stage_floats, &copy);
    size_t slack = p->stage ? p->stage_floats - at - copy : 0; /* (ckpt_save_start checked) */
    w->crc = p->stage ? calloc((size_t)p->n + 1, sizeof *w->crc) : NULL;
    w->have_crc = w->crc ? calloc((size_t)p->n + 1, 1) : NULL;
    for (int i = 0; i < p->n && p->stage; i++) {
        ckpt_tensor *t = &p->tensors[i];
        const size_t len = t->hi - t->lo;
        if (!len || (t->data >= lo && t->data < hi)) continue;
        if (slow_ms >= 0) sleep_ms(slow_ms);
        at = aligned_at(p, i, at, &slack);
        if (w->have_crc)
            w->crc[i] = ck_copy_crc(p->stage + at, t->data, len * sizeof(float), 0, 0);
        else
            memcpy(p->stage + at, t->data, len * sizeof(float));
        t->data = p->stage + at;
        at += len;
        if (w->have_crc) w->have_crc[i] = 1;
    }
    pthread_mutex_lock(&p->w.mu);
    p->w.copied = 1;
    pthread_cond_broadcast(&p->w.cv);
    pthread_mutex_unlock(&p->w.mu);
}

/* A slice that is not finite (a diverged run: NaN or Inf in a weight or a moment) makes the save
 * fail as a failed write does, naming the first such tensor: it is never committed, and `latest`
 * keeps naming the previous checkpoint. The check reads each slice once, where the writer has it
 * (the stage it has just copied it into, or the caller's data of a synchronous save): 1 when one
 * is not finite (w->why says which). */
static int nonfinite_slice(struct ckpt_pending *p) {
    for (int i = 0; i < p->n && !ck_fault("allow-nonfinite"); i++) {
        const ckpt_tensor *t = &p->tensors[i];
        uint64_t first, bad = t->hi > t->lo ? ckpt_nonfinite(t->data, t->hi - t->lo, &first) : 0;
        if (!bad) continue;
        snprintf(p->w.why, sizeof p->w.why, "tensor %s is not finite: %llu of its values in "
                 "[%llu, %llu) are NaN or Inf, the first at element %llu (a diverged run: a "
                 "checkpoint whose state is not finite is never committed; the spike guard, "
                 "guard.*, skips or rolls back such steps)", t->name, (unsigned long long)bad,
                 (unsigned long long)t->lo, (unsigned long long)t->hi,
                 (unsigned long long)(t->lo + first));
        return 1;
    }
    return 0;
}

static void write_slices(struct ckpt_pending *p) {
    const double t0 = tsr_now(), c0 = tsr_thread_cpu();
    ck_writer *w = &p->w;
    long fault = p->rank == 0 ? fault_value("abort-after") : -1;
    int n = p->n, upto = fault >= 1 && fault <= n ? (int)fault : n, err = 0;
    const long slow = fault_value("slow-write");
    copy_to_stage(p, slow);
    const int nonfinite = nonfinite_slice(p);
    const double c1 = tsr_thread_cpu();
    w->cpu_copy = c1 - c0;
    if (!nonfinite) transfer(p, upto, slow, &err);
    const double c2 = tsr_thread_cpu();
    w->cpu_slices = c2 - c1;
    if (!nonfinite && (upto < n || (fault >= 1 && fault == n))) {
        fprintf(stderr, "TSR_CKPT_FAULT: aborting after %d tensors of %s\n", upto, p->tmp);
        abort();
    }
    w->ok = !nonfinite;
    for (int i = 0; i < n && w->ok; i++) {
        if (p->st.ok[i]) continue;
        char eb[128] = "";
        const ckpt_tensor *t = &p->tensors[i];
        snprintf(w->why, sizeof w->why, "tensor %s: writing [%llu, %llu) failed%s%s", t->name,
                 (unsigned long long)t->lo, (unsigned long long)t->hi, err ? ": " : "",
                 err ? strerror_r(err, eb, sizeof eb) : " (disk full? quota?)");
        w->ok = 0;
    }
    /* what this rank wrote through its page cache (the ends of its slices; everything without
     * O_DIRECT) must be on disk before rank 0 commits: its fsync covers its own node only. An
     * asynchronous writer fsyncs on rank 0 too: its commit then has only HDF5's metadata left */
    if (w->ok && (p->async || p->rank != 0) &&
        ck_fsync_path(p->tmp, 0, w->why, sizeof w->why) != 0)
        w->ok = 0;
    w->seconds = tsr_now() - t0;
    w->cpu = tsr_thread_cpu() - c0;
    w->cpu_fsync = w->cpu - (c2 - c0);
    free(w->crc), free(w->have_crc);
    w->crc = NULL, w->have_crc = NULL;
    atomic_store(&w->done, 1);
}

static void *writer_main(void *arg) {
    write_slices(arg);
    return NULL;
}

void ck_writer_start(struct ckpt_pending *p) {
    ck_writer *w = &p->w;
    atomic_init(&w->done, 0);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->started = 1, w->copied = 0;
    w->cpu_copy = w->cpu_slices = w->cpu_fsync = w->cpu_io = 0, w->bounced = 0;
    w->threaded = 0;
    if (p->async) { /* a stop request (SIGUSR1, SIGTERM) reaches the trainer's thread, not this */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        w->threaded = pthread_create(&w->th, NULL, writer_main, p) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (!w->threaded) write_slices(p); /* (no thread to be had: the write blocks, as sync) */
}

double ck_writer_wait_copied(struct ckpt_pending *p) {
    const double t0 = tsr_now();
    pthread_mutex_lock(&p->w.mu);
    while (!p->w.copied) pthread_cond_wait(&p->w.cv, &p->w.mu);
    pthread_mutex_unlock(&p->w.mu);
    return tsr_now() - t0;
}

double ck_writer_wait(struct ckpt_pending *p) {
    double t0 = tsr_now();
    if (p->w.threaded) pthread_join(p->w.th, NULL);
    p->w.threaded = 0;
    return tsr_now() - t0;
}
