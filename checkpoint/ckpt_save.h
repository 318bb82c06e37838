/* ckpt_save.h — one save between its start and its commit (ckpt.h ckpt_pending), shared by
 * ckpt.c (the collective parts: creating the file, agreeing, the commit; always the caller's
 * thread) and ckpt_writer.c (this rank's slices: in the caller's thread for a synchronous save,
 * on a thread of its own for an asynchronous one, which calls neither MPI nor HDF5). Internal.
 */
#ifndef TSR_CKPT_SAVE_H
#define TSR_CKPT_SAVE_H

#include <pthread.h>
#include <stdatomic.h>

#include "ckpt_h5.h"

/* Per-tensor state of a save: the datasets, their addresses in the file, this rank's slice CRCs
 * and whether it wrote its slice, the whole-tensor CRCs. */
typedef struct save_state {
    hid_t *ds;
    haddr_t *off;
    uint32_t *slice_crc, *crc;
    int *ok;
    const ckpt_tensor **ptr;
} save_state;

/* This rank's writer: its outcome is read only after ck_writer_wait (done says when, lock-free) */
typedef struct ck_writer {
    pthread_t th;
    int threaded;       /* a thread runs it (else it ran in the caller's thread) */
    atomic_int done;    /* 1 once it has finished, ok or not */
    pthread_mutex_t mu; /* copied, under mu, signalled on cv */
    pthread_cond_t cv;
    int copied;         /* the slices are in the stage: the caller's data may change */
    int started;        /* ck_writer_start ran (mu and cv exist) */
    int ok;             /* every slice written and, where needed, fsync'ed */
    char why[1024];     /* when not ok: the tensor, its range, the file and the error */
    double seconds;     /* its wall time */
    double cpu;         /* its CPU time (the copies and the CRC run on it; its I/O threads
                         * mostly wait for the disk), = cpu_copy + cpu_slices + cpu_fsync: */
    double cpu_copy;    /* the copy into the stage (with the CRC32C) */
    double cpu_slices;  /* ck_transfer_slices: bounce copies, CRCs not known, pwrite of the ends */
    double cpu_fsync;   /* the checks after it and the fsync */
    double cpu_io;      /* its I/O threads' CPU time (O_DIRECT writes), not in cpu */
    uint64_t bounced;   /* bytes copied into bounce buffers (ck_xfer) */
    uint32_t *crc;      /* while it runs: the slices' CRCs from the copy into the stage, where */
    char *have_crc;     /* have_crc[i] (ck_xfer); NULL: none */
} ck_writer;

struct ckpt_pending {
    char run_dir[1024], base[64], final[1100], tmp[1200]; /* (run_dir: at most 200 used) */
    int n, keep_last, async, rank, path_ok;
    int64_t step;
    ckpt_tensor *tensors; /* the caller's descriptors (data: the caller's, unchanged until the
                           * commit, or until the writer copied it into the stage, which then
                           * points them there); their names copied into names */
    float *stage;         /* async: where the writer first copies the slices (NULL: none) */
    size_t stage_floats;
    char *names;
    save_state st;
    hid_t file, dxpl;
    uint64_t need, bytes; /* the file's estimated size (ckpt_file_bytes); its tensor bytes */
    double t0, started;   /* when the save began; the caller's seconds in ckpt_save_start */
    ck_writer w;
};

/* TSR_CKPT_FAULT (test-only; docs/checkpoint-format.md), a comma-separated list of
 * "abort-after:K", "skip-space-check", "slow-write:MS", "allow-nonfinite", "v1-read-seconds:S"
 * (ckpt_meta.c): the text after "KIND:" of the entry of
 * that kind ("" for an entry without a value), or NULL when there is none. Local. */
const char *ck_fault(const char *kind);

/* fsync of a file (dir 0) or directory (dir 1): 0, or -1 with why naming it and the error
 * (ckpt_writer.c). Local, thread-safe. */
int ck_fsync_path(const char *path, int dir, char *why, size_t cap);

/* Writes this rank's slices of p (ckpt_writer.c): p->async, on a thread of its own when one can
 * be started (signals blocked there), pwrite only (ck_transfer_slices with no datasets); else in
 * the calling thread, the ends of the slices through HDF5. With a stage, the slices are first
 * copied into it (ckpt_save_start). Then fsync (every rank when async, ranks other than 0
 * otherwise: rank 0's commit fsyncs). Fills p->st.slice_crc, p->st.ok, p->w. */
void ck_writer_start(struct ckpt_pending *p);
/* Of a stage of cap floats (NULL: none) for p's slices: the floats up to the end of those already
 * inside it, and in *copy the floats of the others (which ck_writer_start copies in after them,
 * each at a CK_DIRECT_ALIGN-congruent place as far as the floats beyond both allow). Local. */
size_t ck_stage_used(const struct ckpt_pending *p, const float *stage, size_t cap, size_t *copy);
/* Waits until p's slices are in its stage (at once without one). Returns the seconds it waited. */
double ck_writer_wait_copied(struct ckpt_pending *p);
/* Waits for p's writer to finish (joins its thread). Returns the seconds it waited. */
double ck_writer_wait(struct ckpt_pending *p);

#endif
