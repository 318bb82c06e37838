/* stage.c — node-local staging of dataset shards (stage.h; protocol in docs/staging.md).
 *
 * Vocabulary: S = shards of the dataset, k = a shard, "window" = the list of one stager_want; the
 * current window is the previous call's list, the next window the latest one.
 * Ownership: the main thread owns the window lists, the redirects and their file identities; the
 * copy thread and the main thread share the queue, the per-shard states, the byte counts and the
 * statistics under s->mu. The copy thread never prints: it queues notes that the main thread
 * prints with tsr_warn (whose mute flag and rank prefix are plain globals of the main thread).
 */
#include "data/stage.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "crc32c.h"
#include "data/s3.h"
#include "data/shard_format.h"
#include "fsutil.h"

#define COPY_BUF (4u << 20) /* bytes per read/write of a copy */
#define MAX_NOTES 16        /* copy failures reported with a warning; later ones are counted */
#define NOTE_LEN 1024
#define FETCH_TRIES 3       /* fetches of an object whose body does not match the index */

enum { ST_ABSENT = 0, ST_COMMITTED = 1 };
enum { WIN_CUR = 1, WIN_NEXT = 2 }; /* bits of in_win */

/* What the stager knows of one shard; [mu]: shared under s->mu, [main]: main thread only. */
typedef struct slot {
    uint64_t bytes;    /* committed bytes, 0 when absent [mu] */
    uint64_t last_req; /* number of its latest request: eviction order [mu] */
    uint64_t redir_id; /* identity of the file it is redirected to [main] */
    uint64_t bad_id;   /* identity of a file that failed validation [main] */
    uint8_t state;     /* ST_* [mu] */
    uint8_t failed;    /* its copy failed in this window: not retried [mu] */
    uint8_t in_win;    /* WIN_* bits, written by main under mu [mu] */
    uint8_t warned;    /* a failure of it was reported [copy thread] */
} slot;

struct tsr_stager {
    tsr_dataset *ds;
    char *dir;      /* stage_root/<8 hex of the index CRC> */
    char tag[96];   /* ".tmp.HOST." of this host's temporary names */
    uint64_t limit; /* 0: unlimited */
    int is_stager, link_ok, S;
    int parallel;   /* shards staged at once: object store, TSR_S3_CONNECTIONS (8); else 1 */
    long slow_ms;   /* test-only: TSR_FAULT="stage_slow:MS" (stage_slow) */
    slot *slot;     /* (S) */
    int *ints;      /* one block: win[0], win[1], redir, queue, victims, (S) each */
    /* main thread */
    int *win[2], n_win[2]; /* [0] current, [1] next window */
    int *redir, n_redir;   /* redirected shards */
    uint64_t seq;          /* request counter */
    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t wake, idle;
    pthread_t thread;
    int started, stop, busy, *queue, q_pos, q_len;
    uint64_t cache_bytes;
    tsr_stage_stats st;
    char notes[MAX_NOTES][NOTE_LEN];
    int n_notes, n_printed;
    char fatal[NOTE_LEN]; /* object store: the first shard that could not be staged, and why */
    /* copy thread */
    _Atomic int abandon;
    int *victims;
    uint8_t *buf; /* (COPY_BUF) */
    char (*etag)[S3_ETAG_LEN]; /* object store: each shard's ETag at its first fetch, "" before (S) */
};

/* ---------------------------------------------------------------- notes
 * The copy thread reports through s->notes (MAX_NOTES in the stager's life, one per shard, under
 * mu); the main thread prints them with tsr_warn at its next call. */

static void note(tsr_stager *s, int k, int in_place, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void note(tsr_stager *s, int k, int in_place, const char *fmt, ...) {
    if (s->slot[k].warned || s->n_notes == MAX_NOTES) return; /* n_notes: written by us only */
    s->slot[k].warned = 1;
    char text[NOTE_LEN - 96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&s->mu);
    snprintf(s->notes[s->n_notes], NOTE_LEN, "staging shard %d: %s%s%s", k, text,
             in_place ? "; it is read in place" : "",
             s->n_notes + 1 == MAX_NOTES ? " (further staging failures are only counted)" : "");
    s->n_notes++;
    pthread_mutex_unlock(&s->mu);
}

static void notes_flush(tsr_stager *s) {
    pthread_mutex_lock(&s->mu);
    while (s->n_printed < s->n_notes) tsr_warn("%s", s->notes[s->n_printed++]);
    pthread_mutex_unlock(&s->mu);
}

/* ---------------------------------------------------------------- copy thread */

static char *stage_path(const tsr_stager *s, int k) {
    return data_path_join(s->dir, dataset_shard_name(s->ds, k));
}

/* Test-only (TSR_FAULT="stage_slow:MS", tests/s3/test_s3_wait.sh): each read of a copy waits MS
 * ms first, as on a slow parallel filesystem; stager_close's abandon cuts the wait short. */
static void stage_slow(tsr_stager *s) {
    for (long ms = s->slow_ms; ms > 0 && !atomic_load(&s->abandon); ms -= 50) usleep(50 * 1000);
}

static int write_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Copies src to tmp checking the header and the payload CRC32C on the way, then fsyncs.
 * Returns 0, 1 when abandoned (stager_close), -1 after a note. */
static int copy_one(tsr_stager *s, int k, const char *src, const char *tmp) {
    const uint64_t total = dataset_shard_bytes(s->ds, k);
    uint8_t hdr[SHARD_HEADER_SIZE];
    uint32_t crc = 0;
    int in = open(src, O_RDONLY | O_CLOEXEC), rc = -1;
    if (in < 0) {
        note(s, k, 1, "cannot open %s: %s", src, strerror(errno));
        return -1;
    }
    posix_fadvise(in, 0, 0, POSIX_FADV_SEQUENTIAL);
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        note(s, k, 1, "cannot create %s: %s", tmp, strerror(errno));
        close(in);
        return -1;
    }
    uint64_t off = 0;
    while (off < total) {
        if (s->slow_ms) stage_slow(s);
        if (atomic_load_explicit(&s->abandon, memory_order_relaxed)) {
            rc = 1;
            goto done;
        }
        size_t want = total - off < COPY_BUF ? (size_t)(total - off) : COPY_BUF;
        ssize_t got = read(in, s->buf, want);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            note(s, k, 1, "reading %s at byte %llu: %s", src, (unsigned long long)off,
                        got ? strerror(errno) : "unexpected end of file (the shard changed?)");
            goto done;
        }
        size_t h = off < SHARD_HEADER_SIZE ? SHARD_HEADER_SIZE - (size_t)off : 0;
        if (h > (size_t)got) h = (size_t)got;
        memcpy(hdr + off, s->buf, h);
        crc = tsr_crc32c(crc, s->buf + h, (size_t)got - h);
        if (write_all(out, s->buf, (size_t)got) != 0) {
            note(s, k, 1, "writing %s: %s", tmp, strerror(errno));
            goto done;
        }
        off += (uint64_t)got;
    }
    if (!dataset_shard_header_matches(s->ds, k, hdr) ||
        crc != dataset_shard_payload_crc(s->ds, k)) {
        note(s, k, 1, "copy %s of %s does not match: payload CRC32C 0x%08x, index says 0x%08x%s"
                    " (not retried in this window)", tmp, src, crc,
                    dataset_shard_payload_crc(s->ds, k),
                    dataset_shard_header_matches(s->ds, k, hdr) ? "" : ", header differs");
        goto done;
    }
    if (fsync(out) != 0) {
        note(s, k, 1, "fsync of %s: %s", tmp, strerror(errno));
        goto done;
    }
    rc = 0;
done:
    if (close(out) != 0 && rc == 0) {
        note(s, k, 1, "closing %s: %s", tmp, strerror(errno));
        rc = -1;
    }
    close(in);
    return rc;
}

/* Object store: why the fetched file at path is not shard k as the index lists it (size, header,
 * payload CRC32C), or NULL when it is. */
static const char *fetched_mismatch(tsr_stager *s, int k, const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    uint8_t hdr[SHARD_HEADER_SIZE];
    const char *why = NULL;
    if (fd < 0 || fstat(fd, &st) != 0) return "cannot be read back";
    if ((uint64_t)st.st_size != dataset_shard_bytes(s->ds, k)) why = "its size differs";
    else if (pread(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr ||
             !dataset_shard_header_matches(s->ds, k, hdr))
        why = "its header differs";
    uint32_t crc = 0;
    if (!why && lseek(fd, SHARD_HEADER_SIZE, SEEK_SET) != SHARD_HEADER_SIZE) why = "cannot be read";
    for (ssize_t got; !why && (got = read(fd, s->buf, COPY_BUF)) > 0;)
        crc = tsr_crc32c(crc, s->buf, (size_t)got);
    if (!why && crc != dataset_shard_payload_crc(s->ds, k)) why = "its payload CRC32C differs";
    close(fd);
    return why;
}

/* Object store, copy thread: "" when the ETag of shard k's answer is its first one in this run
 * (recorded) or the same, else why it is not. */
static const char *etag_changed(tsr_stager *s, int k, const char *etag, char *why, size_t n) {
    why[0] = '\0';
    if (!etag[0]) return why; /* a store that sends none: the size and CRC32C checks remain */
    if (!s->etag[k][0]) snprintf(s->etag[k], sizeof s->etag[k], "%s", etag);
    else if (strcmp(s->etag[k], etag) != 0)
        snprintf(why, n, "its ETag %.60s differs from %.60s at its first fetch in this run (the "
                 "object changed under the run)", etag, s->etag[k]);
    return why;
}

/* A fetch of shard k whose ETag changed becomes a failed one (rc, err): fetching it again would
 * not bring the object the run started with back. */
static void etag_fault(tsr_stager *s, int k, s3_fetch *f) {
    char why[300], what[S3_ERR_LEN];
    if (!etag_changed(s, k, f->etag, why, sizeof why)[0]) return;
    s3_describe(dataset_s3(s->ds), f->name, what, sizeof what);
    tsr_snprintf(f->err, S3_ERR_LEN, "%s: %s", what, why);
    f->rc = TSR_EXIT_DATA;
}

/* Under no lock: records the stager's first fatal fault (object store). */
static void set_fatal(tsr_stager *s, int k, const char *fmt, const char *a, const char *b) {
    char text[NOTE_LEN - 32];
    snprintf(text, sizeof text, fmt, a, b);
    note(s, k, 0, "%s", text);
    pthread_mutex_lock(&s->mu);
    if (!s->fatal[0]) snprintf(s->fatal, sizeof s->fatal, "%s", text);
    pthread_mutex_unlock(&s->mu);
}

/* fsyncs the file at path; 0 or -1 with errno. */
static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = fd >= 0 && fsync(fd) == 0 ? 0 : -1;
    if (fd >= 0) close(fd);
    return rc;
}

/* Object store: fetches the shards batch[0..n) to their temporary files tmp[i] with ranged GETs on
 * up to s->parallel connections (s3.c retries timeouts and 5xx), and checks each against the index;
 * a body that does not match (cut off, corrupted on the way) is fetched again, FETCH_TRIES times in
 * all. rc[i]: 0 (fsynced), 1 when abandoned, -1 after set_fatal. */
static void fetch_batch(tsr_stager *s, const int *batch, char **tmp, int n, int *rc) {
    s3_fetch *f = tsr_calloc((size_t)n, sizeof *f);
    int m = 0;
    const char **why = tsr_calloc((size_t)n, sizeof *why);
    for (int i = 0; i < n; i++) {
        f[i] = (s3_fetch){.name = dataset_shard_name(s->ds, batch[i]), .path = tmp[i],
                          .size = dataset_shard_bytes(s->ds, batch[i])};
        rc[i] = 0;
    }
    for (int t = 0; t < FETCH_TRIES && (t == 0 || m > 0); t++) {
        s3_fetch *round = tsr_malloc((size_t)n * sizeof *round);
        int *map = tsr_malloc((size_t)n * sizeof *map), r = 0;
        for (int i = 0; i < n; i++)
            if (t == 0 || (rc[i] == 0 && why[i])) map[r] = i, round[r++] = f[i];
        s3_get_files(dataset_s3(s->ds), round, r, s->parallel, &s->abandon);
        m = 0;
        for (int j = 0; j < r; j++) {
            int i = map[j];
            f[i] = round[j];
            if (!f[i].rc) etag_fault(s, batch[i], &f[i]);
            if (f[i].rc) rc[i] = f[i].rc < 0 ? 1 : -1;
            why[i] = f[i].rc ? NULL : fetched_mismatch(s, batch[i], tmp[i]);
            m += why[i] != NULL;
        }
        free(round);
        free(map);
    }
    for (int i = 0; i < n; i++) {
        char what[S3_ERR_LEN];
        s3_describe(dataset_s3(s->ds), f[i].name, what, sizeof what);
        if (rc[i] < 0) set_fatal(s, batch[i], "%s%s", f[i].err, "");
        else if (!rc[i] && why[i])
            set_fatal(s, batch[i], "%s: %s from the dataset's index.tsv after 3 fetches (the "
                      "object changed under the run, or the store holds a corrupted copy)", what,
                      why[i]);
        else if (!rc[i] && fsync_path(tmp[i]) != 0)
            note(s, batch[i], 0, "fsync of %s: %s", tmp[i], strerror(errno));
        else continue;
        if (!rc[i]) rc[i] = -1;
    }
    free(why);
    free(f);
}

/* Hard-links src to tmp (same filesystem) and checks the header. 0, or -1 with errno set when
 * linking is not possible (the caller copies instead), or -2 after a note. */
static int link_one(tsr_stager *s, int k, const char *src, const char *tmp) {
    if (link(src, tmp) != 0) return -1;
    uint8_t hdr[SHARD_HEADER_SIZE];
    int fd = open(tmp, O_RDONLY | O_CLOEXEC);
    int ok = fd >= 0 && pread(fd, hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr &&
             dataset_shard_header_matches(s->ds, k, hdr);
    if (fd >= 0) close(fd);
    if (!ok) note(s, k, 1, "hard link %s of %s: header does not match the index", tmp, src);
    return ok ? 0 : -2;
}

/* NAME.tmp.HOST.PID of shard k (malloc'd), removed if left over. */
static char *tmp_path(const tsr_stager *s, int k) {
    char *dst = stage_path(s, k);
    size_t n = strlen(dst) + sizeof s->tag + 24;
    char *tmp = tsr_malloc(n);
    snprintf(tmp, n, "%s%s%ld", dst, s->tag, (long)getpid());
    free(dst);
    unlink(tmp);
    return tmp;
}

/* Renames a verified temporary file to shard k's committed name (rc == 0), else removes it.
 * Returns rc, or -1 after a note when the rename fails. */
static int commit_tmp(tsr_stager *s, int k, const char *tmp, int rc) {
    char *dst = stage_path(s, k);
    if (rc == 0 && rename(tmp, dst) != 0) {
        note(s, k, !dataset_s3(s->ds), "rename %s to %s: %s", tmp, dst, strerror(errno));
        rc = -1;
    }
    if (rc == 0) {
        int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd); /* durability only; a lost rename is re-staged next time */
            close(dfd);
        }
    } else {
        unlink(tmp);
    }
    free(dst);
    return rc;
}

/* Stages shard k under its committed name: link (same filesystem) or copy to NAME.tmp.HOST.PID,
 * then rename. Returns 0, 1 when abandoned, -1 after a note; never leaves the temporary file. */
static int stage_one(tsr_stager *s, int k, int *linked) {
    char *src = data_path_join(dataset_dir(s->ds), dataset_shard_name(s->ds, k));
    char *tmp = tmp_path(s, k);
    int rc = s->link_ok ? link_one(s, k, src, tmp) : -1;
    *linked = rc == 0;
    if (rc == -2) rc = -1; /* a link with a wrong header: the source itself changed */
    else if (rc == -1) rc = copy_one(s, k, src, tmp); /* also when link() is refused (EPERM) */
    rc = commit_tmp(s, k, tmp, rc);
    free(tmp);
    free(src);
    return rc;
}

/* Stages the shards batch[0..n): fetched together from an object store, else one (n = 1) linked or
 * copied. rc[i], linked[i] as stage_one's. */
static void stage_batch(tsr_stager *s, const int *batch, int n, int *rc, int *linked) {
    if (!dataset_s3(s->ds)) {
        rc[0] = stage_one(s, batch[0], &linked[0]);
        return;
    }
    char **tmp = tsr_malloc((size_t)n * sizeof *tmp);
    for (int i = 0; i < n; i++) tmp[i] = tmp_path(s, batch[i]), linked[i] = 0;
    fetch_batch(s, batch, tmp, n, rc);
    for (int i = 0; i < n; i++) {
        rc[i] = commit_tmp(s, batch[i], tmp[i], rc[i]);
        free(tmp[i]);
    }
    free(tmp);
}

/* Under mu: shard k has no committed file any more. */
static void forget(tsr_stager *s, int k) {
    s->slot[k].state = ST_ABSENT;
    s->cache_bytes -= s->slot[k].bytes;
    s->slot[k].bytes = 0;
}

/* Under mu: picks committed shards in neither window, least recently requested first, until
 * `need` more bytes fit the limit. Marks them absent and returns how many (in out), or -1
 * (nothing evicted) when even all of them would not make room. */
static int pick_victims(tsr_stager *s, uint64_t need, int *out) {
    uint64_t freeable = 0;
    for (int k = 0; k < s->S; k++)
        if (s->slot[k].state == ST_COMMITTED && !s->slot[k].in_win) freeable += s->slot[k].bytes;
    if (need > s->limit || s->cache_bytes - freeable > s->limit - need) return -1;
    int n = 0;
    while (s->cache_bytes > s->limit - need) {
        int best = -1;
        for (int k = 0; k < s->S; k++)
            if (s->slot[k].state == ST_COMMITTED && !s->slot[k].in_win &&
                (best < 0 || s->slot[k].last_req < s->slot[best].last_req))
                best = k;
        forget(s, best);
        s->st.files_evicted++;
        out[n++] = best;
    }
    return n;
}

/* Under mu: the next shard of the queue to stage, with room made for it in the cache (its
 * victims appended to s->victims at *nv) and its bytes reserved there; -1 when none is left. A
 * shard that does not fit is skipped (object store: it cannot be read in place, so fatal). */
static int take_next(tsr_stager *s, int *nv) {
    while (s->q_pos < s->q_len) {
        int k = s->queue[s->q_pos++], n = 0;
        if (s->slot[k].state == ST_COMMITTED || s->slot[k].failed) continue;
        uint64_t need = dataset_shard_bytes(s->ds, k);
        if (s->limit && s->cache_bytes + need > s->limit &&
            (n = pick_victims(s, need, s->victims + *nv)) < 0) {
            s->st.skipped_for_space++;
            if (!dataset_s3(s->ds)) continue;
            s->slot[k].failed = 1;
            if (!s->fatal[0])
                snprintf(s->fatal, sizeof s->fatal, "%s/%s does not fit data.cache_limit beside "
                         "the window's other shards (an object-store dataset is never read in "
                         "place: raise data.cache_limit or shorten data.stage_window)",
                         dataset_dir(s->ds), dataset_shard_name(s->ds, k));
            continue;
        }
        *nv += n;
        s->cache_bytes += need; /* reserved while it is staged */
        return k;
    }
    return -1;
}

/* Under mu: the outcome of staging shard k (its bytes were reserved by take_next). */
static void staged(tsr_stager *s, int k, int rc, int linked) {
    uint64_t need = dataset_shard_bytes(s->ds, k);
    if (rc == 0) {
        s->slot[k].state = ST_COMMITTED;
        s->slot[k].bytes = need;
        s->st.files_staged++;
        s->st.bytes_staged += need;
        s->st.linked += (uint64_t)linked;
        return;
    }
    s->cache_bytes -= need;
    if (rc < 0) {
        s->slot[k].failed = 1;
        s->st.failed++;
        if (dataset_s3(s->ds) && !s->fatal[0]) /* never read in place: a window would wait on */
            snprintf(s->fatal, sizeof s->fatal, "%s/%s could not be staged into %s (the warning "
                     "above says why)", dataset_dir(s->ds), dataset_shard_name(s->ds, k), s->dir);
    }
}

/* Without mu: removes the files of the victims s->victims[0..n). */
static void evict_files(tsr_stager *s, int n) {
    for (int v = 0; v < n; v++) {
        char *p = stage_path(s, s->victims[v]);
        if (unlink(p) != 0 && errno != ENOENT)
            note(s, s->victims[v], 0, "cannot evict %s: %s", p, strerror(errno));
        free(p);
    }
}

/* The copy thread: takes up to s->parallel shards at a time (1 unless from an object store). */
static void *stage_thread(void *arg) {
    tsr_stager *s = arg;
    int *batch = tsr_malloc((size_t)s->parallel * 3 * sizeof *batch);
    int *rc = batch + s->parallel, *linked = rc + s->parallel;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && s->q_pos == s->q_len) {
            s->busy = 0;
            pthread_cond_broadcast(&s->idle);
            pthread_cond_wait(&s->wake, &s->mu);
        }
        if (s->stop) break;
        s->busy = 1;
        int n = 0, nv = 0, k;
        while (n < s->parallel && (k = take_next(s, &nv)) >= 0) batch[n++] = k;
        if (!n) continue;
        pthread_mutex_unlock(&s->mu);
        evict_files(s, nv);
        stage_batch(s, batch, n, rc, linked);
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < n; i++) staged(s, batch[i], rc[i], linked[i]);
    }
    s->busy = 0;
    pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->mu);
    free(batch);
    return NULL;
}

/* ---------------------------------------------------------------- open */

/* Sums the sizes of the committed files present; with adopt, marks them committed (stager_open
 * of the stager: they count toward the cache and are validated when polled). */
static uint64_t committed_on_disk(tsr_stager *s, int adopt) {
    uint64_t sum = 0;
    for (int k = 0; k < s->S; k++) {
        char *p = stage_path(s, k);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            sum += (uint64_t)st.st_size;
            if (adopt) {
                s->slot[k].state = ST_COMMITTED;
                s->slot[k].bytes = (uint64_t)st.st_size;
            }
        }
        free(p);
    }
    return sum;
}

/* Removes this host's temporary files of processes that are no longer alive. */
static void remove_stale(tsr_stager *s) {
    DIR *d = opendir(s->dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char *t = strstr(e->d_name, s->tag), *end;
        long pid = t ? strtol(t + strlen(s->tag), &end, 10) : 0;
        if (pid > 0 && *end == '\0' && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
            char *p = data_path_join(s->dir, e->d_name);
            unlink(p);
            free(p);
        }
    }
    if (d) closedir(d);
}

/* The checks of stager_open on the two directories; 0 or TSR_EXIT_USAGE after tsr_error. */
static int open_dirs(const char *root, const char *dir, int is_stager, const char *tag) {
    struct stat st;
    errno = 0;
    if (stat(root, &st) != 0 && (errno != ENOENT || fs_make_parents(root) != 0 ||
                                 (mkdir(root, 0700) != 0 && errno != EEXIST) ||
                                 stat(root, &st) != 0)) {
        tsr_error("data.stage_to %s: cannot create the staging directory: %s (set it to a "
                  "node-local directory the job can write, e.g. /local/scratch/$USER)", root,
                  strerror(errno));
        return TSR_EXIT_USAGE;
    }
    if (!S_ISDIR(st.st_mode)) {
        tsr_error("data.stage_to %s: not a directory (set it to a node-local directory)", root);
        return TSR_EXIT_USAGE;
    }
    if ((mkdir(dir, 0700) != 0 && errno != EEXIST) || stat(dir, &st) != 0) {
        tsr_error("data.stage_to %s: cannot create %s: %s", root, dir, strerror(errno));
        return TSR_EXIT_USAGE;
    }
    if (!S_ISDIR(st.st_mode)) {
        tsr_error("data.stage_to %s: %s is not a directory (remove it)", root, dir);
        return TSR_EXIT_USAGE;
    }
    if (!is_stager) return 0;
    char probe[4096];
    if (tsr_snprintf(probe, sizeof probe, "%s/probe%s%ld", dir, tag, (long)getpid())) {
        tsr_error("data.stage_to %s: path too long", root);
        return TSR_EXIT_USAGE;
    }
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        tsr_error("data.stage_to %s: not writable: cannot create a file in %s: %s", root, dir,
                  strerror(errno));
        return TSR_EXIT_USAGE;
    }
    close(fd);
    unlink(probe);
    return 0;
}

int stager_open(tsr_stager **out, tsr_dataset *ds, const char *stage_root, uint64_t cache_limit,
                int is_stager) {
    *out = NULL;
    if (!stage_root || !*stage_root) {
        tsr_error("data.stage_to is empty: expected a node-local directory");
        return TSR_EXIT_USAGE;
    }
    char host[64] = "localhost", hex[16];
    if (gethostname(host, sizeof host) != 0) strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++) /* keep temporary names plain */
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '-' || *c == '.'))
            *c = '_';
    snprintf(hex, sizeof hex, "%08x", dataset_index_crc(ds));
    char *root = data_dir_dup(stage_root), *dir = data_path_join(root, hex);
    tsr_stager *s = tsr_calloc(1, sizeof *s);
    snprintf(s->tag, sizeof s->tag, ".tmp.%s.", host);
    int rc = open_dirs(root, dir, is_stager, s->tag);
    if (rc) {
        free(root);
        free(dir);
        free(s);
        return rc;
    }
    free(root);
    size_t S = (size_t)dataset_n_shards(ds) + 1;
    s->ds = ds;
    s->dir = dir;
    s->limit = cache_limit;
    s->is_stager = is_stager;
    s->S = dataset_n_shards(ds);
    s->slot = tsr_calloc(S, sizeof *s->slot);
    s->ints = tsr_malloc(5 * S * sizeof(int));
    s->win[0] = s->ints;
    s->win[1] = s->ints + S;
    s->redir = s->ints + 2 * S;
    s->queue = s->ints + 3 * S;
    s->victims = s->ints + 4 * S;
    atomic_init(&s->abandon, 0);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->idle, NULL);
    *out = s;
    if (!is_stager) return 0;
    struct stat a, b;
    const char *no_link = getenv("TSR_STAGE_NO_LINK");
    s->link_ok = !(no_link && strcmp(no_link, "1") == 0) && stat(dataset_dir(ds), &a) == 0 &&
                 stat(dir, &b) == 0 && a.st_dev == b.st_dev;
    s->buf = tsr_malloc(COPY_BUF);
    const char *slow = tsr_fault("stage_slow");
    s->slow_ms = slow ? strtol(slow, NULL, 10) : 0;
    s->parallel = !dataset_s3(ds) ? 1 : s3_connections();
    if (dataset_s3(ds)) s->etag = tsr_calloc((size_t)S, sizeof *s->etag);
    remove_stale(s);
    s->cache_bytes = committed_on_disk(s, 1);
    int err = pthread_create(&s->thread, NULL, stage_thread, s);
    if (err) {
        tsr_error("data.stage_to %s: cannot start the staging thread: %s", dir, strerror(err));
        stager_close(s);
        *out = NULL;
        return TSR_EXIT_INTERNAL;
    }
    s->started = 1;
    return 0;
}

/* ---------------------------------------------------------------- main thread */

void stager_want(tsr_stager *s, const int *shards, int n) {
    notes_flush(s);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_win[0]; i++) s->slot[s->win[0][i]].in_win = 0;
    for (int i = 0; i < s->n_win[1]; i++) s->slot[s->win[1][i]].in_win = WIN_CUR;
    int *t = s->win[0];
    s->win[0] = s->win[1];
    s->n_win[0] = s->n_win[1];
    s->win[1] = t;
    s->n_win[1] = 0;
    for (int i = 0; i < n; i++) {
        int k = shards[i];
        if (k < 0 || k >= s->S || (s->slot[k].in_win & WIN_NEXT)) continue;
        s->slot[k].in_win |= WIN_NEXT;
        s->win[1][s->n_win[1]++] = k;
    }
    if (s->is_stager) {
        for (int k = 0; k < s->S; k++) { /* a new window retries; notice deleted files */
            char *p = s->slot[k].state == ST_COMMITTED ? stage_path(s, k) : NULL;
            struct stat st;
            if (p && stat(p, &st) != 0 && errno == ENOENT) forget(s, k);
            s->slot[k].failed = 0;
            free(p);
        }
        s->q_pos = s->q_len = 0;
        for (int i = 0; i < s->n_win[1]; i++) {
            int k = s->win[1][i];
            s->slot[k].last_req = ++s->seq;
            if (s->slot[k].state != ST_COMMITTED) s->queue[s->q_len++] = k;
        }
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
}

/* Under mu: appends k to the copy queue unless it is pending already. */
static void queue_push(tsr_stager *s, int k) {
    for (int i = s->q_pos; i < s->q_len; i++)
        if (s->queue[i] == k) return;
    if (s->q_len == s->S) { /* pending entries are distinct shards: compacting makes room */
        memmove(s->queue, s->queue + s->q_pos, (size_t)(s->q_len - s->q_pos) * sizeof(int));
        s->q_len -= s->q_pos;
        s->q_pos = 0;
    }
    s->queue[s->q_len++] = k;
    pthread_cond_signal(&s->wake);
}

static uint64_t file_id(const struct stat *st) {
    return tsr_hash64((uint64_t)st->st_ino) ^ tsr_hash64((uint64_t)st->st_mtim.tv_nsec ^
                                                          (uint64_t)st->st_mtim.tv_sec << 30) ^
           (uint64_t)st->st_size;
}

/* Installs (or moves) the redirect of shard k in a window, when its committed file validates. */
static void poll_one(tsr_stager *s, int k) {
    char *path = stage_path(s, k);
    struct stat st;
    int exists = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    int redirected = dataset_shard_redirected(s->ds, k);
    if (s->is_stager) {
        pthread_mutex_lock(&s->mu);
        int committed = s->slot[k].state == ST_COMMITTED;
        if (committed && !exists) { /* deleted by someone: stage it again */
            forget(s, k);
            queue_push(s, k);
        }
        pthread_mutex_unlock(&s->mu);
        exists = exists && committed;
    }
    uint64_t id = exists ? file_id(&st) : 0;
    if (exists && !(redirected && s->slot[k].redir_id == id) && s->slot[k].bad_id != id) {
        if (dataset_shard_redirect(s->ds, k, path) == 0) {
            if (!redirected) s->redir[s->n_redir++] = k;
            s->slot[k].redir_id = id;
        } else {
            tsr_warn("staged copy %s failed validation (see above): %s; shard %d is read in "
                     "place", path, s->is_stager ? "deleted" : "ignored", k);
            s->slot[k].bad_id = id;
            if (s->is_stager) {
                pthread_mutex_lock(&s->mu);
                if (s->slot[k].state == ST_COMMITTED) forget(s, k);
                s->st.failed++;
                unlink(path);
                if (dataset_s3(s->ds)) queue_push(s, k); /* never read in place: fetch again */
                pthread_mutex_unlock(&s->mu);
            }
        }
    }
    free(path);
}

void stager_poll(tsr_stager *s) {
    notes_flush(s);
    for (int i = 0; i < s->n_redir;) { /* drop redirects outside both windows */
        int k = s->redir[i];
        if (s->slot[k].in_win) {
            i++;
            continue;
        }
        dataset_shard_redirect(s->ds, k, NULL);
        s->redir[i] = s->redir[--s->n_redir];
    }
    for (int i = 0; i < s->n_win[1]; i++) poll_one(s, s->win[1][i]);
    for (int i = 0; i < s->n_win[0]; i++)
        if (!(s->slot[s->win[0][i]].in_win & WIN_NEXT)) poll_one(s, s->win[0][i]);
    notes_flush(s);
}

void stager_wait_idle(tsr_stager *s) {
    if (s->is_stager) {
        pthread_mutex_lock(&s->mu);
        while (s->q_pos < s->q_len || s->busy) pthread_cond_wait(&s->idle, &s->mu);
        pthread_mutex_unlock(&s->mu);
    }
    notes_flush(s);
}

int stager_wait_idle_for(tsr_stager *s, double timeout_s) {
    int late = 0;
    if (s->is_stager) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until); /* the condition variable's clock */
        time_t whole = (time_t)timeout_s; /* timeout_s >= 0 */
        until.tv_sec += whole;
        until.tv_nsec += (long)((timeout_s - (double)whole) * 1e9);
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_mutex_lock(&s->mu);
        while ((s->q_pos < s->q_len || s->busy) && !late)
            late = pthread_cond_timedwait(&s->idle, &s->mu, &until) == ETIMEDOUT &&
                   (s->q_pos < s->q_len || s->busy);
        pthread_mutex_unlock(&s->mu);
    }
    notes_flush(s);
    return late;
}

int stager_local(tsr_stager *s, const int *shards, int n, char *why, size_t why_len) {
    int missing = 0;
    pthread_mutex_lock(&s->mu);
    if (s->fatal[0]) snprintf(why, why_len, "%s", s->fatal);
    int fatal = s->fatal[0] != 0;
    pthread_mutex_unlock(&s->mu);
    if (fatal) return -1;
    for (int i = 0; i < n; i++) missing += !dataset_shard_redirected(s->ds, shards[i]);
    return missing;
}

void stager_stats(const tsr_stager *cs, tsr_stage_stats *st) {
    tsr_stager *s = (tsr_stager *)cs; /* only to take the lock */
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    st->cache_bytes = s->cache_bytes;
    pthread_mutex_unlock(&s->mu);
    dataset_read_counts(s->ds, &st->staged_reads, &st->in_place_reads);
    if (!s->is_stager) st->cache_bytes = committed_on_disk(s, 0); /* it keeps no ledger */
}

void stager_close(tsr_stager *s) {
    if (!s) return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        atomic_store(&s->abandon, 1);
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    for (int i = 0; i < s->n_redir; i++) dataset_shard_redirect(s->ds, s->redir[i], NULL);
    notes_flush(s);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->idle);
    tsr_free_all(s->slot, s->ints, s->buf, s->etag, s->dir, s);
}
