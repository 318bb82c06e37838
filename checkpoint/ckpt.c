/* ckpt.c — writing a checkpoint: collective HDF5 writes of every rank's slices, per-tensor CRC32C,
 * the commit protocol and retention (ckpt.h; docs/checkpoint-format.md).
 *
 * Order of a save (all ranks, MPI_COMM_WORLD):
 *   1. check the arguments and every rank's ranges (agreed: all ranks fail together);
 *   2. H5Fcreate RUN_DIR/step-NNNNNNNN.h5.tmp through MPI-IO; root attributes;
 *   3. per tensor: slice CRCs allgathered and combined (the ranges must tile the tensor), dataset
 *      of the global shape created collectively, each rank's range written as a union of
 *      hyperslabs (collective transfer), "crc32c" attribute;
 *   4. H5Fclose; rank 0 commits: fsync the file, rename, fsync the directory, replace `latest`
 *      (latest.tmp + fsync + rename + fsync dir), then retention (keep_last newest, stale *.tmp).
 * A crash before the rename of step 4 leaves only a *.tmp, which readers ignore.
 *
 * Test-only fault injection: TSR_CKPT_FAULT="abort-after:K" makes rank 0 abort() (SIGABRT, no
 * cleanup) right after the K-th tensor of a save is written; tests/mpi/test_ckpt_mpi.sh uses it to
 * check that a crash mid-save leaves the previous checkpoint valid. Never set it in production.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_h5.h"
#include "common.h"
#include "data/data.h"

static int fsync_path(const char *path, int dir, char *why, size_t cap) {
    int fd = open(path, (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL)) {
        snprintf(why, cap, "fsync of %.300s failed: %.300s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* Rank 0: makes the written .tmp the committed checkpoint and points `latest` at it. */
static int commit(const char *run_dir, const char *tmp, const char *final, const char *base,
                  char *why, size_t cap) {
    char latest[4200], latest_tmp[4200];
    if (fsync_path(tmp, 0, why, cap)) return -1;
    if (rename(tmp, final) != 0) {
        snprintf(why, cap, "rename %.300s -> %.300s failed: %.300s", tmp, final, strerror(errno));
        return -1;
    }
    if (fsync_path(run_dir, 1, why, cap)) return -1;
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
        return -1;
    }
    if (rename(latest_tmp, latest) != 0) {
        snprintf(why, cap, "rename %.300s -> %.300s failed: %.300s", latest_tmp, latest,
                 strerror(errno));
        return -1;
    }
    return fsync_path(run_dir, 1, why, cap);
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

/* TSR_CKPT_FAULT="abort-after:K" (test-only): K, or -1 when unset. */
static long fault_abort_after(void) {
    const char *v = getenv("TSR_CKPT_FAULT");
    if (!v || !*v) return -1;
    int64_t k;
    if (strncmp(v, "abort-after:", 12) != 0 || tsr_parse_i64(v + 12, 0, 1 << 30, &k) != 0) {
        tsr_warn("TSR_CKPT_FAULT=\"%s\" not understood (expected \"abort-after:K\"); ignored", v);
        return -1;
    }
    return (long)k;
}

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
    return 0;
}

/* Writes one tensor (collective). Returns 0, or -1 with why (agreed on every rank). */
static int write_tensor(hid_t file, const ckpt_tensor *t, hid_t lcpl, hid_t dcpl, hid_t dxpl,
                        char *why, size_t cap) {
    uint64_t numel = ckpt_numel(t->ndim, t->shape), cnt = t->hi - t->lo;
    static const float dummy = 0.0f;
    const float *data = cnt ? t->data : &dummy;
    uint32_t crc;
    if (ck_tensor_crc(t->name, numel, t->lo, t->hi, tsr_crc32c(0, data, cnt * sizeof(float)), 1,
                      &crc, why, cap))
        return -1;
    hsize_t dims[CKPT_MAX_NDIM], mdim = cnt ? cnt : 1;
    for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
    hid_t fs = H5Screate_simple(t->ndim, dims, NULL), ms = H5Screate_simple(1, &mdim, NULL);
    hid_t ds = fs < 0 ? -1 : H5Dcreate2(file, t->name, H5T_IEEE_F32LE, fs, lcpl, dcpl, H5P_DEFAULT);
    int ok = 1;
    if (ds < 0) {
        snprintf(why, cap, "tensor %s: cannot create the dataset (a duplicate name?)", t->name);
        ok = 0;
    } else if (ck_select_range(fs, t->ndim, t->shape, t->lo, t->hi) != 0 ||
               (cnt == 0 && H5Sselect_none(ms) < 0)) {
        snprintf(why, cap, "tensor %s: cannot select the range [%llu, %llu)", t->name,
                 (unsigned long long)t->lo, (unsigned long long)t->hi);
        ok = 0;
    } else if (H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, fs, dxpl, data) < 0) {
        snprintf(why, cap, "tensor %s: writing [%llu, %llu) failed (disk full? quota?)", t->name,
                 (unsigned long long)t->lo, (unsigned long long)t->hi);
        ok = 0;
    } else if (ck_attr_write_u32(ds, "crc32c", crc) != 0) {
        snprintf(why, cap, "tensor %s: cannot write the crc32c attribute", t->name);
        ok = 0;
    }
    if (ds >= 0) H5Dclose(ds);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return ck_agree(ok, why, cap) ? 0 : -1;
}

int ckpt_save(const char *run_dir, const ckpt_meta *meta, const ckpt_tensor *tensors, int n,
              int keep_last, char *path_out, size_t path_cap, ckpt_stats *stats) {
    double t0 = MPI_Wtime();
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    ck_h5_quiet();
    char why[1024] = "", base[64], final[4200], tmp[4300];
    snprintf(base, sizeof base, "step-%08lld.h5", (long long)meta->step);
    int ok = snprintf(final, sizeof final, "%s/%s", run_dir, base) < (int)sizeof final;
    snprintf(tmp, sizeof tmp, "%s.tmp", final);
    if (!ok)
        snprintf(why, sizeof why, "run directory path too long");
    else if (check_args(meta, tensors, n, keep_last, why, sizeof why))
        ok = 0;
    else if (rank == 0 && mkdir(run_dir, 0777) != 0 && errno != EEXIST) {
        snprintf(why, sizeof why, "cannot create the run directory: %s", strerror(errno));
        ok = 0;
    }
    if (!ck_agree(ok, why, sizeof why)) {
        if (rank == 0) tsr_error("checkpoint %s: %s", final, why);
        return TSR_EXIT_DATA;
    }

    char created[64] = "";
    if (rank == 0) {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    MPI_Bcast(created, (int)sizeof created, MPI_CHAR, 0, MPI_COMM_WORLD);

    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), lcpl = H5Pcreate(H5P_LINK_CREATE);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL);
    H5Pset_create_intermediate_group(lcpl, 1);
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER); /* every element is written */
    H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
    hid_t file = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (file < 0) snprintf(why, sizeof why, "cannot create the file (directory writable? MPI-IO?)");
    ok = ck_agree(file >= 0, why, sizeof why);
    if (ok && ck_meta_write(file, meta, created) != 0) {
        snprintf(why, sizeof why, "cannot write the root attributes");
        ok = 0;
    }
    ok = ck_agree(ok, why, sizeof why);
    long fault = rank == 0 ? fault_abort_after() : -1;
    uint64_t bytes = 0;
    for (int i = 0; i < n && ok; i++) {
        if (write_tensor(file, &tensors[i], lcpl, dcpl, dxpl, why, sizeof why) != 0) ok = 0;
        bytes += ckpt_numel(tensors[i].ndim, tensors[i].shape) * sizeof(float);
        if (fault >= 0 && i + 1 == fault) {
            fprintf(stderr, "TSR_CKPT_FAULT: aborting after %d tensors of %s\n", i + 1, tmp);
            abort();
        }
    }
    if (file >= 0 && H5Fclose(file) < 0 && ok) {
        snprintf(why, sizeof why, "closing the file failed (data not flushed)");
        ok = 0;
    }
    H5Pclose(fapl);
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Pclose(dxpl);
    ok = ck_agree(ok, why, sizeof why);
    if (ok && rank == 0 && commit(run_dir, tmp, final, base, why, sizeof why) != 0) ok = 0;
    if (!ok && rank == 0) unlink(tmp);
    if (ok && rank == 0) retention(run_dir, keep_last, meta->step);
    if (!ck_agree(ok, why,
                  sizeof why)) { /* also the barrier: every rank returns after the commit */
        if (rank == 0) tsr_error("checkpoint %s not written: %s", final, why);
        return TSR_EXIT_DATA;
    }
    if (path_out && path_cap) snprintf(path_out, path_cap, "%s", final);
    if (stats) {
        stats->seconds = MPI_Wtime() - t0;
        stats->bytes = bytes;
    }
    return 0;
}
