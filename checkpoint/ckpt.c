/* ckpt.c — writing a checkpoint: HDF5 file and datasets created collectively through MPI-IO, every
 * rank's slices written independently (ckpt_io.c), per-tensor CRC32C, the commit protocol and
 * retention (ckpt.h; docs/checkpoint-format.md). The NO_MPI build runs the same code as a world of
 * one (src/dist/dist.h) on serial HDF5's default driver (ck_fapl_driver): the same file.
 *
 * Order of a save (all ranks, MPI_COMM_WORLD):
 *   1. check the arguments, and that the ranks' ranges tile every tensor (one allgather), before
 *      any file exists (agreed: all ranks fail together);
 *   2. every rank opens RUN_DIR/step-NNNNNNNN.h5.tmp itself first (rank 0 creates it, then the
 *      others open it for writing; agreed: open_tmp_everywhere), then H5Fcreate through MPI-IO
 *      (metadata packed at the start of the file, large datasets aligned to 4 KiB); root
 *      attributes; every dataset of its global shape (collective, contiguous, allocated at once,
 *      never filled);
 *   3. each rank writes all its slices without waiting for the others (ckpt_writer.c,
 *      ck_transfer_slices: whole 4 KiB blocks with O_DIRECT, the partial blocks at the ends through
 *      HDF5/MPI-IO, the slice's CRC32C computed on the way); the write errors are agreed once.
 *      An asynchronous save (ckpt_save_start with async) returns to the caller here: a thread of
 *      the rank copies its slices into the caller's stage (the snapshot) and writes them from
 *      there (pwrite instead of HDF5 for the ends: no MPI, no HDF5 call on it) while the caller
 *      trains, and ckpt_save_finish does steps 4 and 5 at a later step boundary;
 *   4. the slice CRCs are allgathered once and combined; "crc32c" attributes (collective);
 *   5. H5Fclose; rank 0 commits: fsync the file, rename, fsync the directory, replace `latest`
 *      (latest.tmp + fsync + rename + fsync dir), then retention (keep_last newest, stale *.tmp).
 * Why in this order: a save used to move each tensor collectively, one after the other, so every
 * rank waited for the owner of each tensor and the writes of the ranks never overlapped; and
 * buffered writes left all of the disk traffic to the final fsync (docs/benchmarks.md).
 * A crash before the rename of step 5 leaves only a *.tmp, which readers ignore.
 *
 * Test-only fault injection (TSR_CKPT_FAULT, ckpt_writer.c): "abort-after:K" makes rank 0 abort()
 * (SIGABRT, no cleanup) right after the K-th tensor of a save is written; tests/mpi/test_ckpt_mpi.sh
 * uses it to check that a crash mid-save leaves the previous checkpoint valid; "slow-write:MS"
 * and "skip-space-check" below. Never set them in production.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_save.h"
#include "common.h"
#include "dist/dist.h"

int ck_write_latest(const char *run_dir, const char *base, char *why, size_t cap) {
    char latest[4200], latest_tmp[4200];
    snprintf(latest, sizeof latest, "%s/latest", run_dir);
    snprintf(latest_tmp, sizeof latest_tmp, "%s/latest.tmp", run_dir);
    FILE *f = fopen(latest_tmp, "w");
    if (!f) {
        snprintf(why, cap, "cannot create %.300s: %.300s", latest_tmp, strerror(errno));
        return -1;
    }
    int bad = fprintf(f, "%s\n", base) < 0;
    bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad) {
        snprintf(why, cap, "writing %.300s failed: %.300s", latest_tmp, strerror(errno));
        unlink(latest_tmp);
        return -1;
    }
    if (rename(latest_tmp, latest) != 0) {
        snprintf(why, cap, "rename %.300s -> %.300s failed: %.300s", latest_tmp, latest,
                 strerror(errno));
        unlink(latest_tmp);
        return -1;
    }
    return ck_fsync_path(run_dir, 1, why, cap) ? -1 : 0;
}

/* Rank 0: makes the written .tmp the committed checkpoint and points `latest` at it. */
static int commit(const char *run_dir, const char *tmp, const char *final, const char *base,
                  char *why, size_t cap) {
    if (ck_fsync_path(tmp, 0, why, cap)) return -1;
    if (rename(tmp, final) != 0) {
        snprintf(why, cap, "rename %.300s -> %.300s failed: %.300s", tmp, final, strerror(errno));
        return -1;
    }
    if (ck_fsync_path(run_dir, 1, why, cap)) return -1;
    /* from here on the checkpoint is committed: a failure leaves `latest` naming the previous
     * one (a resume still finds the newest valid file) and no latest.tmp behind */
    return ck_write_latest(run_dir, base, why, cap) ? -2 : 0;
}

/* Rank 0, before a save: RUN_DIR/latest, when it exists, must be a regular file (a directory
 * there would make the commit fail after the checkpoint is written). */
static int latest_writable(const char *run_dir, char *why, size_t cap) {
    char latest[4200];
    struct stat st;
    snprintf(latest, sizeof latest, "%s/latest", run_dir);
    if (lstat(latest, &st) != 0 || S_ISREG(st.st_mode)) return 0;
    snprintf(why, cap, "%.300s is %s, expected a regular file naming the newest checkpoint: "
             "remove or rename it (a resume without it takes the newest valid step-*.h5)",
             latest, S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
    return -1;
}

/* "tmpfs at /mnt/x": the type and mount point of the filesystem holding path (the longest mount
 * point of /proc/self/mounts that is a prefix of its real path), or "the filesystem". */
static void fs_describe(const char *path, char *out, size_t cap) {
    snprintf(out, cap, "the filesystem");
    char *real = realpath(path, NULL);
    FILE *f = real ? fopen("/proc/self/mounts", "r") : NULL;
    size_t best = 0;
    char line[4096], dev[1024], mnt[2048], type[256];
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "%1023s %2047s %255s", dev, mnt, type) != 3) continue;
        size_t n = strlen(mnt);
        int under = strncmp(real, mnt, n) == 0 && (real[n] == '/' || real[n] == '\0' || n == 1);
        if (under && n >= best) {
            best = n;
            snprintf(out, cap, "%.200s at %.800s", type, mnt);
        }
    }
    if (f) fclose(f);
    free(real);
}

/* Bytes a checkpoint file takes: its tensors' fp32 values, 64 KiB of metadata, the root
 * attributes (strings), and up to one 4 KiB alignment gap per dataset: an estimate from above
 * (the 256 KiB metadata block is mostly a hole: only what HDF5 writes of it takes room). */
uint64_t ckpt_file_bytes(const ckpt_meta *m, const ckpt_tensor *t, int n) {
    uint64_t b = (64u << 10) + strlen(m->config) + strlen(m->guard_state) +
                 strlen(m->skipped_batches) + strlen(m->mix_tokens) + strlen(m->mix_plan) +
                 strlen(m->data_sources) + 4096;
    for (int i = 0; i < n; i++) b += ckpt_numel(t[i].ndim, t[i].shape) * sizeof(float) + 4096;
    return b;
}

/* "ckpt: tmpfs at /mnt/x (RUN_DIR) has N bytes free, the checkpoint needs M ..." into why;
 * returns the bytes free (UINT64_MAX when statvfs cannot tell). */
static uint64_t space_msg(const char *run_dir, uint64_t need, char *why, size_t cap) {
    struct statvfs sv;
    if (statvfs(run_dir, &sv) != 0) return UINT64_MAX; /* cannot tell: the write will say */
    uint64_t avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    char fs[1100];
    fs_describe(run_dir, fs, sizeof fs);
    snprintf(why, cap, "ckpt: %.400s (%.300s) has %llu bytes free, the checkpoint needs %llu: free "
             "space there", fs, run_dir, (unsigned long long)avail, (unsigned long long)need);
    return avail;
}

/* Rank 0, before a save (and the trainer's warning at start): room for the whole file on
 * run_dir's filesystem (the previous checkpoints stay until this one is committed). */
int ckpt_room(const char *run_dir, uint64_t need, char *why, size_t cap) {
    char msg[1200] = "";
    if (space_msg(run_dir, need, msg, sizeof msg) >= need) return 0;
    snprintf(why, cap, "%s", msg);
    return -1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Rank 0, after a commit: keeps the keep_last newest step-*.h5 (never the one just written),
 * removes older ones and stale *.h5.tmp. Failures to delete are warnings, not errors. */
static void retention(const char *run_dir, int keep_last, int64_t just_written) {
    int64_t *steps;
    int n = ckpt_list_steps(run_dir, &steps);
    char path[4200];
    for (int k = keep_last; k < n; k++) {
        if (steps[k] == just_written) continue;
        snprintf(path, sizeof path, "%s/step-%08lld.h5", run_dir, (long long)steps[k]);
        if (unlink(path) != 0 && errno != ENOENT)
            tsr_warn("checkpoint retention: cannot remove %s: %s", path, strerror(errno));
    }
    free(steps);
    DIR *d = opendir(run_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "step-", 5) != 0 || !ends_with(e->d_name, ".h5.tmp")) continue;
        snprintf(path, sizeof path, "%s/%s", run_dir, e->d_name);
        if (unlink(path) != 0 && errno != ENOENT)
            tsr_warn("checkpoint retention: cannot remove %s: %s", path, strerror(errno));
    }
    closedir(d);
}

/* TSR_CKPT_FAULT="skip-space-check" (test-only): the free-space checks of a save (statvfs before,
 * fallocate after the datasets are placed) are skipped, so a full filesystem is met by the writes
 * and the close (tests/ckpt/test_ckpt_diskfull.sh). */
static int fault_skip_space_check(void) { return ck_fault("skip-space-check") != NULL; }

static int check_args(const ckpt_meta *meta, const ckpt_tensor *t, int n, int keep_last, char *why,
                      size_t cap) {
    if (keep_last < 2) {
        snprintf(why, cap,
                 "keep_last = %d, expected >= 2 (a crash must leave a previous checkpoint)",
                 keep_last);
        return -1;
    }
    if (meta->step < 0) {
        snprintf(why, cap, "step = %lld, expected >= 0", (long long)meta->step);
        return -1;
    }
    if (n < 0 || (n > 0 && !t)) {
        snprintf(why, cap, "%d tensors given", n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        uint64_t numel = ckpt_numel(t[i].ndim, t[i].shape);
        if (!t[i].name || !t[i].name[0]) {
            snprintf(why, cap, "tensor #%d has no name", i);
            return -1;
        }
        if (numel == 0) {
            snprintf(why, cap, "tensor %s: ndim %d and shape must have 1..4 dimensions >= 1",
                     t[i].name, t[i].ndim);
            return -1;
        }
        if (t[i].lo > t[i].hi || t[i].hi > numel || (t[i].hi > t[i].lo && !t[i].data)) {
            snprintf(why, cap,
                     "tensor %s: range [%llu, %llu) is not inside [0, %llu) (or data is NULL)",
                     t[i].name, (unsigned long long)t[i].lo, (unsigned long long)t[i].hi,
                     (unsigned long long)numel);
            return -1;
        }
    }
    /* a file breaking the identities every reader checks would never load again: a bug here */
    char bad[600];
    if (ck_meta_check(meta, bad, sizeof bad) != 0) {
        snprintf(why, cap, "its metadata is inconsistent (a bug in the caller): %s", bad);
        return -1;
    }
    return 0;
}

static void state_init(save_state *st, const ckpt_tensor *tensors, int n) {
    size_t k = (size_t)(n > 0 ? n : 1);
    st->ds = tsr_malloc(k * sizeof *st->ds);
    st->off = tsr_malloc(k * sizeof *st->off);
    st->slice_crc = tsr_calloc(k, sizeof *st->slice_crc);
    st->crc = tsr_calloc(k, sizeof *st->crc);
    st->ok = tsr_calloc(k, sizeof *st->ok);
    st->ptr = tsr_calloc(k, sizeof *st->ptr);
    for (int i = 0; i < n; i++) st->ds[i] = -1, st->off[i] = HADDR_UNDEF, st->ptr[i] = &tensors[i];
}

static void state_close(save_state *st, int n) {
    for (int i = 0; i < n && st->ds; i++)
        if (st->ds[i] >= 0) H5Dclose(st->ds[i]);
    free(st->ds), free(st->off), free(st->slice_crc), free(st->crc), free(st->ok), free(st->ptr);
    memset(st, 0, sizeof *st);
}

/* Creates one tensor's dataset of its global shape (collective). Returns the agreed ok. */
static int create_dataset(hid_t file, const ckpt_tensor *t, hid_t lcpl, hid_t dcpl, hid_t *ds,
                          haddr_t *off, char *why, size_t cap) {
    hsize_t dims[CKPT_MAX_NDIM];
    for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
    hid_t fs = H5Screate_simple(t->ndim, dims, NULL);
    *ds = fs < 0 ? -1 : H5Dcreate2(file, t->name, H5T_IEEE_F32LE, fs, lcpl, dcpl, H5P_DEFAULT);
    if (fs >= 0) H5Sclose(fs);
    if (*ds < 0)
        snprintf(why, cap, "tensor %s: cannot create the dataset (a duplicate name?)", t->name);
    else
        *off = H5Dget_offset(*ds);
    return ck_agree(*ds >= 0, why, cap);
}

/* Rank 0, once every dataset has its address: reserves the blocks of the whole file (up to the
 * end of its last dataset, metadata block included) with fallocate, so a full filesystem is met here,
 * before any data moves, and never by the final flush inside H5Fclose (which HDF5 cannot undo:
 * close_before_error). A filesystem without fallocate is written as before. */
static int reserve(const save_state *st, const ckpt_tensor *t, int n, const char *tmp,
                   const char *run_dir, char *why, size_t cap) {
    uint64_t end = 0; /* the end of the last dataset: the metadata block lies before them */
    for (int i = 0; i < n; i++) {
        if (st->off[i] == HADDR_UNDEF) return 0; /* unknown: written as before */
        uint64_t e = (uint64_t)st->off[i] + ckpt_numel(t[i].ndim, t[i].shape) * sizeof(float);
        if (e > end) end = e;
    }
    int fd = end ? open(tmp, O_WRONLY | O_CLOEXEC) : -1;
    if (fd < 0) return 0;
    int rc = fallocate(fd, 0, 0, (off_t)end) == 0 ? 0 : errno;
    close(fd);
    if (rc == ENOSPC || rc == EDQUOT) {
        space_msg(run_dir, end, why, cap);
        return -1;
    }
    return 0;
}

/* Step 2 after H5Fcreate: the root attributes, every dataset (collective: metadata only), the
 * file's blocks reserved (rank 0). Returns the agreed ok. */
static int create_all(ckpt_pending *p, const ckpt_meta *meta, const char *created, char *why,
                      size_t cap) {
    int ok = ck_meta_write(p->file, meta, created, why, cap) == 0;
    if (!ck_agree(ok, why, cap)) return 0;
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY); /* addresses fixed before any data moves */
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);   /* every element is written */
    for (int i = 0; i < p->n && ok; i++)
        ok = create_dataset(p->file, &p->tensors[i], lcpl, dcpl, &p->st.ds[i], &p->st.off[i], why,
                            cap);
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    if (ok && !fault_skip_space_check())
        ok = ck_agree(p->rank != 0 || reserve(&p->st, p->tensors, p->n, p->tmp, p->run_dir, why,
                                              cap) == 0, why, cap);
    /* a writer without HDF5 needs every address (contiguous, allocated early: always known) */
    for (int i = 0; i < p->n && p->async; i++)
        if (p->st.off[i] == HADDR_UNDEF) p->async = 0; /* then written as a synchronous save */
    return ok;
}

/* Step 4: the whole-tensor CRCs from the slice CRCs (one allgather), the "crc32c" attributes
 * (collective). Returns the agreed ok. */
static int crc_attrs(ckpt_pending *p, char *why, size_t cap) {
    save_state *st = &p->st;
    int ok = ck_tensors_crc(p->n, st->ptr, st->slice_crc, st->ok, st->crc, why, cap) == 0;
    for (int i = 0; i < p->n && ok; i++) {
        int aok = ck_attr_write_u32(st->ds[i], "crc32c", st->crc[i]) == 0;
        if (!aok)
            snprintf(why, cap, "tensor %s: cannot write the crc32c attribute", p->tensors[i].name);
        ok = ck_agree(aok, why, cap);
    }
    return ok;
}

/* This process's descriptors of tmp (HDF5's, MPI-IO's: whatever opened it) are pointed at an
 * anonymous file in memory (memfd), so that the flush inside H5Fclose of a save given up writes
 * there and succeeds even when the filesystem has 0 bytes left and the .tmp holds none of its
 * blocks (its metadata was never written): a failed flush leaves HDF5 1.10 with a half-closed
 * file that its clean-up inside MPI_Finalize then dereferences (SIGSEGV in H5F__close_cb, exit 139,
 * the run's lock left behind: issue 64). The .tmp itself is removed by rank 0 anyway. */
static void detach_tmp(const char *tmp) {
    struct stat want, st;
    DIR *d = opendir("/proc/self/fd");
    if (!d || stat(tmp, &want) != 0) {
        if (d) closedir(d);
        return;
    }
    int mem = memfd_create("tessera-ckpt-given-up", MFD_CLOEXEC);
    for (struct dirent *e; mem >= 0 && (e = readdir(d));) {
        const int fd = atoi(e->d_name);
        if (fd != dirfd(d) && fd != mem && e->d_name[0] != '.' && fstat(fd, &st) == 0 &&
            st.st_dev == want.st_dev && st.st_ino == want.st_ino)
            dup3(mem, fd, fcntl(fd, F_GETFD) & FD_CLOEXEC ? O_CLOEXEC : 0);
    }
    if (mem >= 0) close(mem);
    closedir(d);
}

/* A save that failed is given up before its file is closed: HDF5's H5Fclose ends with a flush,
 * and when that flush fails (a full disk) HDF5 1.10 leaves the file half closed; closing it again,
 * or HDF5's own clean-up inside MPI_Finalize, then crashed (SIGSEGV in H5F__close: exit 139,
 * which the job hook took for a crash and requeued). So rank 0 empties the .tmp first (its blocks
 * go back to the filesystem) and the flush has room. */
static void close_before_error(const char *tmp, const char *run_dir, uint64_t need, char *why,
                               size_t cap) {
    dist_barrier(); /* every rank's own writes are over */
    char room[1200];
    size_t o = strlen(why);
    if (dist_world_rank() == 0 && !strstr(why, "bytes free") &&
        ckpt_room(run_dir, need, room, sizeof room) != 0 && o < cap)
        snprintf(why + o, cap - o, "; %.600s", room); /* a full disk: say which and how full */
    if (dist_world_rank() == 0 && truncate(tmp, 0) != 0 && errno != ENOENT)
        tsr_warn("checkpoint %s: cannot empty it after the failure: %s", tmp, strerror(errno));
    dist_barrier();
    detach_tmp(tmp); /* and the flush has room even at 0 bytes free */
}

/* Rank 0, before a save: creates run_dir if needed; `latest` there is writable; room for need
 * bytes (unless TSR_CKPT_FAULT=skip-space-check). 0, or -1 with why. */
static int check_run_dir(const char *run_dir, uint64_t need, char *why, size_t cap) {
    if (mkdir(run_dir, 0777) != 0 && errno != EEXIST) {
        snprintf(why, cap, "cannot create the run directory: %s", strerror(errno));
        return -1;
    }
    if (latest_writable(run_dir, why, cap)) return -1;
    return !fault_skip_space_check() && ckpt_room(run_dir, need, why, cap) ? -1 : 0;
}

/* "2026-11-23T11:22:33Z" (the "created" attribute) */
static void utc_now(char *out, size_t cap) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Opens path with flags (mode 0666 when it creates) and closes it: 0, or the open's errno. */
static int try_open(const char *path, int flags) {
    int fd = open(path, flags | O_CLOEXEC, 0666);
    if (fd < 0) return errno;
    close(fd);
    return 0;
}

/* Before H5Fcreate: rank 0 creates tmp (empty), then every other rank opens it for writing, and
 * the ranks agree on the outcome (ck_agree: the lowest failing rank's reason, naming the path).
 * Why: H5Fcreate opens the file with MPI_File_open, and Open MPI's OMPIO does not agree on the
 * failure of a rank other than 0 to open the file rank 0 created: that rank leaves MPI_File_open
 * with an error while the others wait inside it for good (a hang inside H5Fcreate, before any
 * status could be agreed; tests/mpi/test_ckpt_mpi.sh). A rank fails so when its node's view of
 * run_dir differs (node-local, read-only or absent there). Returns the agreed ok; when not ok,
 * rank 0 has removed what it created. */
static int open_tmp_everywhere(const char *tmp, char *why, size_t cap) {
    int rank = dist_world_rank();
    int err = rank == 0 ? try_open(tmp, O_WRONLY | O_CREAT | O_TRUNC) : 0;
    if (err) snprintf(why, cap, "cannot create %.300s: %.200s", tmp, strerror(err));
    int ok = ck_agree(!err, why, cap);
    err = ok && rank != 0 ? try_open(tmp, O_RDWR) : 0; /* RDWR: as MPI-IO will open it */
    if (err)
        snprintf(why, cap, "cannot open %.300s for writing after rank 0 created it: %.200s (run_dir "
                 "must be one directory that every rank sees and can write: a shared filesystem, "
                 "not a node-local path)", tmp, strerror(err));
    if (ok) ok = ck_agree(!err, why, cap);
    if (!ok && rank == 0) unlink(tmp); /* ENOENT when it was never created */
    return ok;
}

/* After H5Fcreate (collective): 1 when every rank has the file, 0 when none has (why agreed).
 * Some ranks with it and others without is a state no orderly way out of exists: H5Fclose is
 * collective over the ranks that have it (the others would never join), and HDF5 closes what is
 * left at exit (the same). So every rank stops there, through tsr_die (MPI_Abort in the programs),
 * rather than hang; open_tmp_everywhere makes it the rare case of HDF5 failing on some ranks
 * only after each could open the file. */
static int agree_created(hid_t file, const char *tmp, char *why, size_t cap) {
    if (file < 0)
        snprintf(why, cap, "HDF5 cannot create %.300s through MPI-IO (H5Fcreate failed)", tmp);
    int any = file >= 0;
    dist_allreduce_max_int(&any, 1);
    int all = ck_agree(file >= 0, why, cap);
    if (!all && any)
        tsr_die(TSR_EXIT_DATA, "checkpoint %s: %s; the file exists on some ranks only, which no "
                "collective close can undo: stopping every rank (the previous checkpoint stays "
                "the newest)", tmp, why);
    return all;
}

/* A copy of the save's names and descriptors (the caller's data pointers kept), and its paths. */
static ckpt_pending *pending_new(const char *run_dir, const ckpt_meta *meta,
                                 const ckpt_tensor *tensors, int n, int keep_last, int async) {
    ckpt_pending *p = tsr_calloc(1, sizeof *p);
    p->rank = dist_world_rank();
    p->n = n > 0 && tensors ? n : 0;
    p->keep_last = keep_last;
    p->async = async;
    p->step = meta->step;
    p->file = p->dxpl = -1;
    snprintf(p->base, sizeof p->base, "step-%08lld.h5", (long long)meta->step);
    p->path_ok = !tsr_snprintf(p->run_dir, sizeof p->run_dir, "%s", run_dir) &&
                 !tsr_snprintf(p->final, sizeof p->final, "%s/%s", run_dir, p->base);
    snprintf(p->tmp, sizeof p->tmp, "%s.tmp", p->final);
    size_t len = 1;
    for (int i = 0; i < p->n; i++) len += tensors[i].name ? strlen(tensors[i].name) + 1 : 0;
    p->tensors = tsr_malloc((size_t)(p->n ? p->n : 1) * sizeof *p->tensors);
    p->names = tsr_malloc(len);
    char *at = p->names;
    for (int i = 0; i < p->n; i++) {
        p->tensors[i] = tensors[i];
        if (!tensors[i].name) continue;
        p->tensors[i].name = strcpy(at, tensors[i].name);
        at += strlen(at) + 1;
    }
    return p;
}

static void pending_free(ckpt_pending *p) {
    if (p->w.started) pthread_mutex_destroy(&p->w.mu), pthread_cond_destroy(&p->w.cv);
    state_close(&p->st, p->n);
    if (p->dxpl >= 0) H5Pclose(p->dxpl);
    free(p->tensors);
    free(p->names);
    free(p);
}

/* A save given up (nothing committed): the file emptied and closed, rank 0 removes the .tmp. */
static void give_up(ckpt_pending *p, char *why, size_t cap) {
    state_close(&p->st, p->n);
    if (p->file >= 0) {
        close_before_error(p->tmp, p->run_dir, p->need, why, cap);
        H5Fclose(p->file);
        p->file = -1;
    }
    if (p->rank == 0) unlink(p->tmp); /* ENOENT when it was never created */
}

/* Steps 1 and 2 (the order above): the checks, the .tmp on every rank, the file, its root
 * attributes and datasets. 0, or an exit code after rank 0 reported (nothing left behind). */
static int prepare(ckpt_pending *p, const char *run_dir, const ckpt_meta *meta,
                   const ckpt_tensor *tensors, int n) {
    char why[1024] = "";
    int usage = ckpt_check_run_dir(run_dir, why, sizeof why); /* the same on every rank */
    if (usage) {
        if (p->rank == 0) tsr_error("checkpoint %.300s... not written: %s", run_dir, why);
        return usage;
    }
    int ok = p->path_ok;
    if (!ok)
        snprintf(why, sizeof why, "run directory path too long");
    else if (check_args(meta, tensors, n, p->keep_last, why, sizeof why) ||
             (p->rank == 0 && check_run_dir(p->run_dir, ckpt_file_bytes(meta, tensors, n), why,
                                            sizeof why)))
        ok = 0;
    if (!ck_agree(ok, why, sizeof why)) {
        if (p->rank == 0) tsr_error("checkpoint %s not written: %s", p->final, why);
        return TSR_EXIT_DATA;
    }
    p->need = ckpt_file_bytes(meta, p->tensors, p->n);
    for (int i = 0; i < p->n; i++)
        p->bytes += ckpt_numel(p->tensors[i].ndim, p->tensors[i].shape) * sizeof(float);
    state_init(&p->st, p->tensors, p->n);
    /* the ranks' ranges must tile every tensor (refused before any file exists), and every rank
     * must be able to open the .tmp (before HDF5 opens it on all of them at once) */
    if (ck_tensors_crc(p->n, p->st.ptr, NULL, NULL, NULL, why, sizeof why) != 0 ||
        !open_tmp_everywhere(p->tmp, why, sizeof why)) {
        state_close(&p->st, p->n);
        if (p->rank == 0) tsr_error("checkpoint %s not written: %s", p->final, why);
        return TSR_EXIT_DATA;
    }
    char created[64] = "";
    if (p->rank == 0) utc_now(created, sizeof created);
    dist_bcast(created, sizeof created, 0);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    ck_fapl_driver(fapl);
    H5Pset_alignment(fapl, 65536, CK_DIRECT_ALIGN); /* large datasets start on a block */
    H5Pset_meta_block_size(fapl, 256 << 10); /* metadata together at the start: a load reads
                                                * one region, not 50 headers among the data */
    p->file = H5Fcreate(p->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    p->dxpl = H5Pcreate(H5P_DATASET_XFER);
    ck_dxpl_independent(p->dxpl);
    ok = agree_created(p->file, p->tmp, why, sizeof why);
    if (ok) ok = create_all(p, meta, created, why, sizeof why);
    if (!ok) {
        give_up(p, why, sizeof why);
        if (p->rank == 0) tsr_error("checkpoint %s not written: %s", p->final, why);
        return TSR_EXIT_DATA;
    }
    return 0;
}

int ckpt_save_start(const char *run_dir, const ckpt_meta *meta, const ckpt_tensor *tensors, int n,
                    int keep_last, int async, float *stage, size_t stage_floats,
                    ckpt_pending **out) {
    *out = NULL;
    dist_barrier(); /* timed from when every rank is here (ckpt_stats) */
    double t0 = tsr_now();
    ck_h5_quiet();
    ckpt_pending *p = pending_new(run_dir, meta, tensors, n, keep_last, async);
    p->t0 = t0;
    if (async && stage) {
        size_t copy;
        const size_t need = ck_stage_used(p, stage, stage_floats, &copy) + copy;
        if (need > stage_floats)
            tsr_die(TSR_EXIT_INTERNAL, "ckpt_save_start: the stage holds %zu floats, this rank's "
                    "slices need %zu", stage_floats, need);
        p->stage = stage, p->stage_floats = stage_floats;
    }
    int rc = prepare(p, run_dir, meta, tensors, n);
    if (rc) {
        pending_free(p);
        return rc;
    }
    ck_writer_start(p);
    p->started = tsr_now() - t0;
    *out = p;
    return 0;
}

int ckpt_save_written(const ckpt_pending *p) { return atomic_load(&p->w.done); }

double ckpt_save_wait_copied(ckpt_pending *p) { return ck_writer_wait_copied(p); }

int64_t ckpt_save_step(const ckpt_pending *p) { return p->step; }

/* Steps 4 to 6 once this rank's writer is done: agreed outcome, CRCs, close; the commit. Returns
 * 1 when committed, 0 when not (why says; the .tmp removed), -1 when the file was committed but
 * `latest` not updated. Collective. */
static int close_and_commit(ckpt_pending *p, char *why, size_t cap) {
    snprintf(why, cap, "%s", p->w.why);
    int ok = ck_agree(p->w.ok, why, cap);
    if (ok) ok = crc_attrs(p, why, cap);
    state_close(&p->st, p->n);
    if (!ok) close_before_error(p->tmp, p->run_dir, p->need, why, cap);
    if (H5Fclose(p->file) < 0 && ok) {
        snprintf(why, cap, "closing the file failed (data not flushed)");
        ok = 0;
    }
    p->file = -1;
    ok = ck_agree(ok, why, cap);
    int committed = 0; /* rank 0: the rename to the final name happened */
    if (ok && p->rank == 0) {
        int c = commit(p->run_dir, p->tmp, p->final, p->base, why, cap);
        committed = c == 0 || c == -2;
        ok = c == 0;
    }
    if (!ok && p->rank == 0 && !committed) unlink(p->tmp);
    if (ok && p->rank == 0) retention(p->run_dir, p->keep_last, p->step);
    dist_bcast(&committed, sizeof committed, 0);
    ok = ck_agree(ok, why, cap); /* also the barrier: every rank returns after the commit */
    return ok ? 1 : committed ? -1 : 0;
}

int ckpt_save_finish(ckpt_pending *p, char *path_out, size_t path_cap, ckpt_stats *stats) {
    const double t1 = tsr_now(), waited = ck_writer_wait(p);
    /* the slowest rank's writer, the longest wait, the most CPU a writer used (and of each of
     * its phases, its I/O threads', the bytes it bounced) */
    double most[8] = {p->w.seconds, waited, p->w.cpu, p->w.cpu_copy, p->w.cpu_slices,
                      p->w.cpu_fsync, p->w.cpu_io, (double)p->w.bounced};
    dist_allreduce_max_f64(most, 8);
    char why[1024];
    int c = close_and_commit(p, why, sizeof why);
    if (c == -1 && p->rank == 0)
        tsr_error("checkpoint %s was written and committed, but %s/latest could not be updated "
                  "(it still names the previous checkpoint): %s", p->final, p->run_dir, why);
    else if (c == 0 && p->rank == 0)
        tsr_error("checkpoint %s not written: %s", p->final, why);
    if (c == 1 && path_out && path_cap) snprintf(path_out, path_cap, "%s", p->final);
    if (c == 1 && stats) {
        const double now = tsr_now();
        /* an asynchronous save's own time: its start, its writers, its commit (not the
         * training in between) */
        stats->seconds = p->async ? p->started + most[0] + (now - t1 - waited) : now - p->t0;
        stats->bytes = p->bytes;
        stats->blocking = p->async ? p->started + (now - t1) : stats->seconds;
        stats->write = most[0];
        stats->waited = most[1];
        stats->write_cpu = most[2];
        stats->write_cpu_copy = most[3], stats->write_cpu_slices = most[4];
        stats->write_cpu_fsync = most[5], stats->write_cpu_io = most[6];
        stats->write_bounced = (uint64_t)most[7];
    }
    pending_free(p);
    return c == 1 ? 0 : TSR_EXIT_DATA;
}

int ckpt_save(const char *run_dir, const ckpt_meta *meta, const ckpt_tensor *tensors, int n,
              int keep_last, char *path_out, size_t path_cap, ckpt_stats *stats) {
    ckpt_pending *p;
    int rc = ckpt_save_start(run_dir, meta, tensors, n, keep_last, 0, NULL, 0, &p);
    return rc ? rc : ckpt_save_finish(p, path_out, path_cap, stats);
}
