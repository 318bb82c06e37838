/* ckpt_io.c — moving one rank's slices of a checkpoint between memory and the file.
 *
 * Where the time of a save or load went on a local disk (docs/benchmarks.md, "Checkpoint save and
 * load"): the tensors were moved one after the other with collective transfers, so the ranks took
 * turns instead of writing at the same time; a buffered write copies 1.5 GB into fresh page-cache
 * pages (slow to come by in a VM: as long as the disk transfer itself) and leaves all the disk
 * traffic to the final fsync; and a disk wants several large requests in flight to reach its
 * bandwidth. So here:
 *
 *   - each rank moves all its slices without waiting for the other ranks (independent transfers;
 *     the caller agrees on errors and combines the CRCs once, afterwards);
 *   - the whole 4 KiB blocks of a slice (CK_DIRECT_ALIGN), i.e. nearly all of it, go with O_DIRECT
 *     between the disk and aligned bounce buffers, in pieces of CK_DIRECT_PIECE_BYTES, with up to
 *     CK_SLOTS pieces in flight per rank (one I/O thread per bounce buffer: 64 MiB per rank while
 *     a save or load runs); the CRC32C of a piece is computed in the same pass as its copy
 *     between the tensor and the bounce buffer (so the rank's own thread does copy + CRC while
 *     its I/O threads wait for the disk); a write whose memory is itself 4 KiB-aligned goes
 *     straight from it, with no bounce copy (the asynchronous save's snapshot places its slices
 *     so, and passes the CRCs it computed in that copy: ck_xfer);
 *   - the at most two partial blocks at the ends of a slice (shared with the neighbouring rank's
 *     slice or with HDF5 metadata) go through HDF5 and MPI-IO, so no block is written two ways;
 *     the asynchronous save's writer thread, which may call neither HDF5 (not thread-safe) nor
 *     MPI, writes them with pwrite through the page cache at the same addresses instead (as
 *     MPI-IO's independent writes do on a POSIX filesystem).
 *
 * The file is the same byte for byte: HDF5 allocated every dataset (contiguous layout, early
 * allocation, no fill value written) before any data moves, and only its raw little-endian float32
 * bytes are written here, at the address H5Dget_offset gives. Without O_DIRECT (a filesystem that
 * refuses it, TSR_CKPT_DIRECT=0, an unknown address, a big-endian float), or after a transfer
 * failed with it, the bytes go through HDF5 in CK_PIECE_BYTES pieces, and on writes
 * sync_file_range starts the write-back of each piece at once so the final fsync has little left.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_h5.h"
#include "common.h"
#include "crc32c.h"

#define CK_SLOTS 4                  /* bounce buffers = I/O threads = pieces in flight per rank */
#define CK_STEP_BYTES (256u << 10) /* copy + CRC in steps that stay in the core's cache */

/* One piece of a slice. Every piece gets its own CRC; a slice's CRC is folded from its pieces' in
 * flat order (crc32c_combine), so the pieces may move in any order. */
typedef struct item {
    int t;          /* tensor index */
    int direct;     /* whole aligned blocks moved with O_DIRECT (else through HDF5) */
    int ok;
    uint32_t crc;
    uint64_t a, b;  /* elements [a, b) */
} item;

enum { SLOT_IDLE, SLOT_QUEUED, SLOT_DONE };

typedef struct slot {
    char *buf;      /* CK_DIRECT_PIECE_BYTES, CK_DIRECT_ALIGN-aligned */
    char *src;      /* what it moves: buf, or (a write from aligned memory) the tensor's bytes */
    int state, err;
    int item;       /* the item it holds, -1 none */
    size_t n;
    uint64_t off;
} slot;

/* The I/O threads of one rank and their slots. Slots are used round robin, and the threads take
 * queued slots in FIFO order, so waiting for slot k % CK_SLOTS waits for the oldest transfer. */
typedef struct io_pool {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    slot s[CK_SLOTS];
    int queue[CK_SLOTS], qhead, qlen;
    int fd, writing, quit, nthreads;
    pthread_t th[CK_SLOTS];
    double cpu;     /* the CPU seconds of the threads that have ended (under mu) */
} io_pool;

/* pwrite/pread of the whole buffer; 0, or -1 (short transfers are continued, errors are not). */
static int full_io(int fd, int writing, void *buf, size_t n, uint64_t off) {
    char *p = buf;
    while (n > 0) {
        ssize_t k = writing ? pwrite(fd, p, n, (off_t)off) : pread(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k, n -= (size_t)k, off += (uint64_t)k;
    }
    return 0;
}

static void *io_thread(void *arg) {
    io_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->qlen == 0 && !p->quit) pthread_cond_wait(&p->work, &p->mu);
        if (p->qlen == 0) break; /* quit, nothing left */
        slot *s = &p->s[p->queue[p->qhead]];
        p->qhead = (p->qhead + 1) % CK_SLOTS;
        p->qlen--;
        pthread_mutex_unlock(&p->mu);
        int err = full_io(p->fd, p->writing, s->src, s->n, s->off) != 0;
        pthread_mutex_lock(&p->mu);
        s->err = err;
        s->state = SLOT_DONE;
        pthread_cond_broadcast(&p->done);
    }
    p->cpu += tsr_thread_cpu();
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

uint64_t ckpt_io_buffer_bytes(void) { return (uint64_t)CK_SLOTS * CK_DIRECT_PIECE_BYTES; }

/* 0 with the buffers and (where they can be had) threads; -1 when no buffer could be allocated. */
static int pool_start(io_pool *p, int fd, int writing) {
    memset(p, 0, sizeof *p);
    p->fd = fd;
    p->writing = writing;
    for (int k = 0; k < CK_SLOTS; k++) {
        p->s[k].item = -1;
        p->s[k].buf = p->s[k].src = aligned_alloc(CK_DIRECT_ALIGN, CK_DIRECT_PIECE_BYTES);
        if (!p->s[k].buf) {
            while (k-- > 0) free(p->s[k].buf);
            return -1;
        }
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    /* the I/O threads take no signals: a stop request (SIGUSR1, SIGTERM) reaches the thread that
     * runs the trainer, as without them */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (p->nthreads < CK_SLOTS && pthread_create(&p->th[p->nthreads], NULL, io_thread, p) == 0)
        p->nthreads++; /* none at all: the transfers run in the calling thread */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return 0;
}

static void pool_submit(io_pool *p, int k) {
    slot *s = &p->s[k];
    if (p->nthreads == 0) {
        s->err = full_io(p->fd, p->writing, s->src, s->n, s->off) != 0;
        s->state = SLOT_DONE;
        return;
    }
    pthread_mutex_lock(&p->mu);
    s->state = SLOT_QUEUED;
    p->queue[(p->qhead + p->qlen) % CK_SLOTS] = k;
    p->qlen++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
}

static void pool_wait(io_pool *p, int k) {
    pthread_mutex_lock(&p->mu);
    while (p->s[k].state == SLOT_QUEUED) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static void pool_stop(io_pool *p) {
    for (int k = 0; k < CK_SLOTS; k++) pool_wait(p, k);
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int k = 0; k < p->nthreads; k++) pthread_join(p->th[k], NULL);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    for (int k = 0; k < CK_SLOTS; k++) free(p->s[k].buf);
}

/* Elements [a, b) of t through HDF5, in pieces cut at multiples of CK_PIECE_BYTES in the tensor;
 * crc (NULL: none) is advanced over them. hint_fd >= 0: start each written piece's write-back. */
static int via_hdf5(hid_t ds, const ckpt_tensor *t, int writing, hid_t dxpl, int hint_fd,
                    haddr_t off, uint64_t a, uint64_t b, uint32_t *crc) {
    const uint64_t piece = CK_PIECE_BYTES / sizeof(float);
    hid_t fs = H5Dget_space(ds);
    int rc = fs < 0 ? -1 : 0;
    while (rc == 0 && a < b) {
        uint64_t e = (a / piece + 1) * piece;
        if (e > b) e = b;
        float *buf = t->data + (a - t->lo);
        size_t bytes = (size_t)(e - a) * sizeof(float);
        hsize_t m = e - a;
        hid_t ms = H5Screate_simple(1, &m, NULL);
        if (writing && crc) *crc = tsr_crc32c(*crc, buf, bytes);
        if (ms < 0 || ck_select_range(fs, t->ndim, t->shape, a, e) != 0 ||
            (writing ? H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, fs, dxpl, buf)
                     : H5Dread(ds, H5T_NATIVE_FLOAT, ms, fs, dxpl, buf)) < 0)
            rc = -1;
        else if (!writing && crc)
            *crc = tsr_crc32c(*crc, buf, bytes);
#ifdef SYNC_FILE_RANGE_WRITE
        if (rc == 0 && writing && hint_fd >= 0 && off != HADDR_UNDEF) /* a hint only */
            (void)sync_file_range(hint_fd, (off64_t)(off + a * sizeof(float)), (off64_t)bytes,
                                  SYNC_FILE_RANGE_WRITE);
#else
        (void)hint_fd, (void)off;
#endif
        if (ms >= 0) H5Sclose(ms);
        a = e;
    }
    if (fs >= 0) H5Sclose(fs);
    return rc;
}

/* Where the pieces that do not go with O_DIRECT go: through HDF5 (ds[i], dxpl), or, when there
 * are no dataset handles (ds NULL: writes only), with pwrite through the page cache at the
 * datasets' addresses (buffered fd), which calls neither HDF5 nor MPI. */
typedef struct sink {
    const ckpt_tensor *const *t;
    ck_xfer *x;  /* the caller's (never NULL here: a zeroed one when it gave none) */
    const hid_t *ds;
    const haddr_t *off;
    hid_t dxpl;
    int fd;      /* ds NULL: the file opened for buffered writes */
    int hint_fd; /* >= 0: start each written piece's write-back (sync_file_range) */
    int err;     /* the errno of the first pwrite that failed (0: none, or HDF5's failure) */
} sink;

/* Elements [a, b) of tensor i with pwrite on k->fd, in CK_PIECE_BYTES pieces; crc is advanced. */
static int via_pwrite(sink *k, int i, uint64_t a, uint64_t b, uint32_t *crc) {
    const uint64_t piece = CK_PIECE_BYTES / sizeof(float);
    const ckpt_tensor *t = k->t[i];
    for (; a < b; a = (a / piece + 1) * piece) {
        uint64_t e = (a / piece + 1) * piece < b ? (a / piece + 1) * piece : b;
        const float *buf = t->data + (a - t->lo);
        size_t bytes = (size_t)(e - a) * sizeof(float);
        uint64_t at = k->off[i] + a * sizeof(float);
        if (crc) *crc = tsr_crc32c(*crc, buf, bytes);
        if (full_io(k->fd, 1, (void *)buf, bytes, at) != 0) {
            if (!k->err) k->err = errno ? errno : EIO;
            return -1;
        }
#ifdef SYNC_FILE_RANGE_WRITE
        (void)sync_file_range(k->fd, (off64_t)at, (off64_t)bytes, SYNC_FILE_RANGE_WRITE);
#endif
    }
    return 0;
}

/* Elements [a, b) of tensor i the way k says (through HDF5, or pwrite). */
static int via_sink(sink *k, int writing, int i, uint64_t a, uint64_t b, uint32_t *crc) {
    if (!k->ds) return via_pwrite(k, i, a, b, crc);
    return via_hdf5(k->ds[i], k->t[i], writing, k->dxpl, k->hint_fd, k->off[i], a, b, crc);
}

uint32_t ck_copy_crc(void *dst, const void *src, size_t bytes, int crc_of_dst, uint32_t crc) {
    char *d = dst;
    const char *r = src;
    for (size_t s = 0; s < bytes; s += CK_STEP_BYTES) {
        size_t k = bytes - s < CK_STEP_BYTES ? bytes - s : CK_STEP_BYTES;
        if (!crc_of_dst) crc = tsr_crc32c(crc, r + s, k);
        memcpy(d + s, r + s, k);
        if (crc_of_dst) crc = tsr_crc32c(crc, d + s, k);
    }
    return crc;
}

/* The caller gave slice i's CRC (ck_xfer): not computed again */
static int crc_given(const sink *k, int i) { return k->x->have_crc && k->x->have_crc[i]; }

/* A write's direct piece x (its bytes at mem) into slot s: straight from mem when mem is aligned
 * (its CRC read from there), else copied into the slot's bounce buffer (its CRC in the copy). */
static void fill_slot(slot *s, item *x, char *mem, size_t bytes, sink *snk) {
    const int given = crc_given(snk, x->t);
    s->src = s->buf;
    if ((uintptr_t)mem % CK_DIRECT_ALIGN == 0) {
        s->src = mem;
        x->crc = given ? 0 : tsr_crc32c(0, mem, bytes);
    } else if (given) {
        memcpy(s->buf, mem, bytes);
    } else {
        x->crc = ck_copy_crc(s->buf, mem, bytes, 0, 0);
    }
    if (s->src == s->buf) snk->x->bounced += bytes;
}

/* The pieces of this rank's slices, in order; direct ones only where O_DIRECT can serve them. */
static item *plan(int n, const ckpt_tensor *const *t, const haddr_t *off, int direct, int *count) {
    const uint64_t dpiece = CK_DIRECT_PIECE_BYTES / sizeof(float);
    size_t cap = 16, m = 0;
    item *it = malloc(cap * sizeof *it);
    for (int i = 0; i < n && it; i++) {
        uint64_t lo = t[i]->lo, hi = t[i]->hi, a = hi, b = hi; /* direct: elements [a, b) */
        if (lo >= hi) continue;
        if (direct && off[i] != HADDR_UNDEF && off[i] % sizeof(float) == 0) {
            uint64_t f0 = off[i] + lo * sizeof(float), f1 = off[i] + hi * sizeof(float);
            uint64_t fa = (f0 + CK_DIRECT_ALIGN - 1) / CK_DIRECT_ALIGN * CK_DIRECT_ALIGN;
            uint64_t fb = f1 / CK_DIRECT_ALIGN * CK_DIRECT_ALIGN;
            if (fa < fb) a = (fa - off[i]) / sizeof(float), b = (fb - off[i]) / sizeof(float);
        }
        size_t need = 2 + (size_t)((b - a + dpiece - 1) / dpiece);
        if (m + need > cap) {
            while (m + need > cap) cap *= 2;
            item *p = realloc(it, cap * sizeof *it);
            if (!p) {
                free(it);
                return NULL;
            }
            it = p;
        }
        if (lo < a) it[m++] = (item){i, 0, 1, 0, lo, a};
        for (uint64_t x = a; x < b; x += dpiece)
            it[m++] = (item){i, 1, 1, 0, x, x + dpiece < b ? x + dpiece : b};
        if (b < hi) it[m++] = (item){i, 0, 1, 0, b, hi};
    }
    *count = (int)m;
    return it;
}

static int native_is_f32le(void) { return H5Tequal(H5T_NATIVE_FLOAT, H5T_IEEE_F32LE) > 0; }

/* Writes: waits for the piece in slot k; one that failed is written again the other way (its CRC
 * was taken from memory). Returns 1 when it had failed. */
static int settle_write(io_pool *pool, int k, item *it, sink *snk) {
    slot *s = &pool->s[k];
    pool_wait(pool, k);
    int failed = s->item >= 0 && s->err;
    if (failed) {
        item *y = &it[s->item];
        y->ok = via_sink(snk, 1, y->t, y->a, y->b, NULL) == 0;
    }
    s->item = -1;
    return failed;
}

/* The direct pieces it[didx[0..nd)], up to CK_SLOTS in flight; piece d uses slot d % CK_SLOTS.
 * After a failure (O_DIRECT refused after all), that piece and every one not yet in flight go
 * the other way (snk). */
static void direct_pieces(io_pool *pool, item *it, const int *didx, int nd, int writing,
                          sink *snk) {
    const ckpt_tensor *const *t = snk->t;
    const haddr_t *off = snk->off;
    int broken = 0, queued = 0; /* reads: pieces queued so far */
    for (int d = 0; d < nd; d++) {
        item *x = &it[didx[d]];
        const ckpt_tensor *ti = t[x->t];
        char *mem = (char *)(ti->data + (x->a - ti->lo));
        size_t bytes = (size_t)(x->b - x->a) * sizeof(float);
        int k = d % CK_SLOTS;
        slot *s = &pool->s[k];
        if (writing) {
            broken |= settle_write(pool, k, it, snk);
            if (!broken) {
                fill_slot(s, x, mem, bytes, snk);
                s->item = didx[d], s->err = 0, s->n = bytes;
                s->off = off[x->t] + x->a * sizeof(float);
                pool_submit(pool, k);
                continue;
            }
        } else {
            /* keep the next CK_SLOTS pieces in flight: slot q % CK_SLOTS last held piece
             * q - CK_SLOTS < d, already taken */
            for (; !broken && queued < nd && queued < d + CK_SLOTS; queued++) {
                const item *y = &it[didx[queued]];
                slot *r = &pool->s[queued % CK_SLOTS];
                r->item = didx[queued], r->err = 0, r->src = r->buf;
                r->n = (size_t)(y->b - y->a) * sizeof(float);
                r->off = off[y->t] + y->a * sizeof(float);
                pool_submit(pool, queued % CK_SLOTS);
            }
            if (s->item == didx[d]) {
                pool_wait(pool, k);
                s->item = -1;
                if (!s->err) {
                    x->crc = ck_copy_crc(mem, s->buf, bytes, 1, 0);
                    continue;
                }
                broken = 1;
            }
        }
        x->crc = 0;
        x->ok = via_sink(snk, writing, x->t, x->a, x->b,
                         writing && crc_given(snk, x->t) ? NULL : &x->crc) == 0;
    }
    for (int k = 0; writing && k < CK_SLOTS; k++) settle_write(pool, k, it, snk);
}

/* Opens the file's descriptors: dfd for O_DIRECT (-1 without), and for what does not go with it
 * snk->fd (ds NULL: buffered writes) or snk->hint_fd (write-back hints through HDF5's writes). */
static int open_fds(const char *path, int writing, sink *snk, io_pool *pool) {
    int dfd = -1;
    const char *env = getenv("TSR_CKPT_DIRECT");
#ifdef O_DIRECT
    if (!(env && strcmp(env, "0") == 0) && native_is_f32le())
        dfd = open(path, (writing ? O_WRONLY : O_RDONLY) | O_DIRECT | O_CLOEXEC);
#else
    (void)env;
#endif
    if (dfd >= 0 && pool_start(pool, dfd, writing) != 0) {
        close(dfd);
        dfd = -1;
    }
    snk->fd = snk->hint_fd = -1;
    if (!snk->ds && (snk->fd = open(path, O_WRONLY | O_CLOEXEC)) < 0) snk->err = errno;
    /* without O_DIRECT the write-back of each piece is started at once (sync_file_range); with
     * it, the few small pieces left to HDF5 wait for the fsync (a hint would queue them behind
     * the direct transfers) */
    if (snk->ds && writing && dfd < 0) snk->hint_fd = open(path, O_RDONLY | O_CLOEXEC);
    return dfd;
}

int ck_transfer_slices(const char *path, int writing, int n, const ckpt_tensor *const *t,
                       const hid_t *ds, const haddr_t *off, hid_t dxpl, uint32_t *slice_crc,
                       int *slice_ok, int *err, ck_xfer *x) {
    for (int i = 0; i < n; i++) slice_crc[i] = 0, slice_ok[i] = 1;
    ck_xfer none = {0};
    if (!x || !writing) x = &none; /* (reads: nothing to be told) */
    x->io_cpu = 0, x->bounced = 0;
    sink snk = {t, x, ds, off, dxpl, -1, -1, 0};
    io_pool pool;
    int dfd = open_fds(path, writing, &snk, &pool);
    int m = 0, nd = 0;
    item *it = plan(n, t, off, dfd >= 0, &m);
    int *didx = it ? malloc(((size_t)m + 1) * sizeof *didx) : NULL;
    if (!didx) { /* out of memory: every slice the other way as a whole */
        for (int i = 0; i < n; i++)
            slice_ok[i] = via_sink(&snk, writing, i, t[i]->lo, t[i]->hi,
                                   crc_given(&snk, i) ? NULL : &slice_crc[i]) == 0;
        m = 0;
    }
    /* 1. the pieces through HDF5 first (small ones with O_DIRECT: the ends of the slices), so no
     *    small read waits behind the queue of large direct ones */
    for (int j = 0; j < m; j++) {
        item *y = &it[j];
        if (y->direct) {
            didx[nd++] = j;
            continue;
        }
        y->ok = via_sink(&snk, writing, y->t, y->a, y->b,
                         crc_given(&snk, y->t) ? NULL : &y->crc) == 0;
    }
    /* 2. the direct pieces */
    if (nd > 0) direct_pieces(&pool, it, didx, nd, writing, &snk);
    if (dfd >= 0) {
        pool_stop(&pool);
        x->io_cpu = pool.cpu;
        close(dfd);
    }
    if (snk.hint_fd >= 0) close(snk.hint_fd);
    if (snk.fd >= 0) close(snk.fd);
    /* 3. each slice's CRC from its pieces' */
    for (int j = 0; j < m; j++) {
        const item *y = &it[j];
        slice_crc[y->t] = crc32c_combine(slice_crc[y->t], y->crc, (y->b - y->a) * sizeof(float));
        if (!y->ok) slice_ok[y->t] = 0;
    }
    for (int i = 0; i < n; i++)
        if (crc_given(&snk, i)) slice_crc[i] = x->crc[i];
    free(didx);
    free(it);
    if (err) *err = snk.err;
    for (int i = 0; i < n; i++)
        if (!slice_ok[i]) return -1;
    return 0;
}
