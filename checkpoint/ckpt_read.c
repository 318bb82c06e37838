/* ckpt_read.c — loading and verifying checkpoints, and choosing the one to resume from.
 *
 * A load has rank 0 read and check the root attributes (ck_meta_read_file: format, version, the
 * metadata CRC and the counters' identities; or take them from its peek: ckpt_peeked) and
 * broadcast them, then opens the file read-only
 * (through MPI-IO; in the NO_MPI build serial HDF5: ck_fapl_driver), then checks per tensor that the
 * dataset exists with the expected global shape; then each rank reads its flat ranges of all
 * tensors without waiting for the others (ck_transfer_slices, O_DIRECT for whole blocks), the
 * slice CRCs are allgathered once and combined, and each result must equal the dataset's "crc32c"
 * attribute. Every decision is agreed over MPI_COMM_WORLD
 * (ck_agree), so all ranks accept or reject a file together and move on to the next together.
 * The layout (ranges) is the caller's at THIS world size: loading is elastic.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt_h5.h"
#include "common.h"
#include "dist/dist.h"

static int wanted(const ckpt_tensor *t, const char *prefix) {
    return !prefix || strncmp(t->name, prefix, strlen(prefix)) == 0;
}

/* Opens one dataset and checks its shape against t's; -1 with why when absent or different. */
static hid_t open_checked(hid_t file, const ckpt_tensor *t, uint32_t *crc_attr, char *why,
                          size_t cap) {
    uint64_t numel = ckpt_numel(t->ndim, t->shape);
    if (numel == 0 || t->lo > t->hi || t->hi > numel || (t->hi > t->lo && !t->data)) {
        snprintf(why, cap, "tensor %s: bad request (ndim %d, range [%llu, %llu))", t->name, t->ndim,
                 (unsigned long long)t->lo, (unsigned long long)t->hi);
        return -1;
    }
    hid_t ds = H5Dopen2(file, t->name, H5P_DEFAULT);
    if (ds < 0) {
        snprintf(why, cap, "tensor %s: no such dataset in the file", t->name);
        return -1;
    }
    int nd = 0;
    int64_t shape[CKPT_MAX_NDIM] = {0};
    int shape_ok = ck_dataset_shape(ds, &nd, shape) == 0 && nd == t->ndim;
    for (int d = 0; shape_ok && d < nd; d++) shape_ok = shape[d] == t->shape[d];
    if (!shape_ok) {
        char a[128], b[128];
        ck_shape_str(a, sizeof a, nd, shape);
        ck_shape_str(b, sizeof b, t->ndim, t->shape);
        snprintf(why, cap, "tensor %s: shape %s in the file, expected %s", t->name, a, b);
        H5Dclose(ds);
        return -1;
    }
    hid_t type = H5Dget_type(ds);
    int is_f32 = type >= 0 && H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4;
    if (type >= 0) H5Tclose(type);
    if (!is_f32) {
        snprintf(why, cap, "tensor %s: not a float32 dataset", t->name);
        H5Dclose(ds);
        return -1;
    }
    if (ck_attr_read_u32(ds, "crc32c", crc_attr) != 0) {
        snprintf(why, cap, "tensor %s: no crc32c attribute", t->name);
        H5Dclose(ds);
        return -1;
    }
    return ds;
}

/* A file's identity (ckpt_peeked.file_id): device, inode, size, modification time in ns. 0, or
 * -1 when stat fails. Local. */
static int file_identity(const char *path, uint64_t id[4]) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    id[0] = (uint64_t)st.st_dev, id[1] = (uint64_t)st.st_ino, id[2] = (uint64_t)st.st_size;
    id[3] = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
    return 0;
}

/* Rank 0 in a load: path's root attributes, taken from peeked when it holds those of this very
 * file, unchanged since, else read and checked now (ck_meta_read_file). 0, or -1 with why. */
static int read_meta(const char *path, const ckpt_peeked *peeked, ckpt_meta *meta, char *why,
                     size_t cap) {
    uint64_t id[4];
    if (peeked && peeked->path[0] && file_identity(path, id) == 0 &&
        memcmp(id, peeked->file_id, sizeof id) == 0) {
        memcpy(meta, &peeked->meta, sizeof *meta);
        return 0;
    }
    return ck_meta_read_file(path, meta, NULL, why, cap);
}

/* Loads one file (collective). 0, or -1 with why (agreed on every rank).
 * 1. per wanted tensor, in order: the dataset is there with the right shape, type and a crc32c
 *    attribute (agreed tensor by tensor, so the first fault in file order is named);
 * 2. this rank reads its slices, computing their CRCs on the way (independent transfers: the
 *    ranks read at the same time, no rank waits for another between tensors);
 * 3. one allgather of the slice CRCs; per tensor, in order, the combined CRC must equal the
 *    attribute. */
static int load_file(const char *path, const ckpt_peeked *peeked, ckpt_meta *meta, ckpt_tensor *t,
                     int n, const char *prefix, uint64_t *bytes, char *why, size_t cap) {
    ck_h5_quiet();
    *bytes = 0;
    size_t k = (size_t)(n > 0 ? n : 1);
    hid_t *ds = tsr_malloc(k * sizeof *ds);
    uint32_t *want = tsr_calloc(k, sizeof *want), *slice = tsr_calloc(k, sizeof *slice);
    uint32_t *got = tsr_calloc(k, sizeof *got);
    int *read_ok = tsr_calloc(k, sizeof *read_ok);
    const ckpt_tensor **sel = tsr_calloc(k, sizeof *sel);
    int m = 0; /* tensors wanted: sel[0..m), ds[0..m) */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), dxpl = H5Pcreate(H5P_DATASET_XFER);
    ck_fapl_driver(fapl);
    ck_dxpl_independent(dxpl);
    /* the root attributes: rank 0 reads and checks them (its own open, ckpt_meta.c; or has them
     * from its peek: read_meta), then all ranks have its answer; only a file whose metadata
     * passed is opened through MPI-IO, and only by a path MPI-IO survives */
    int ok = ckpt_check_load_path(path, why, cap) == 0;
    if (ok && dist_world_rank() == 0) ok = read_meta(path, peeked, meta, why, cap) == 0;
    ok = ck_agree(ok, why, cap);
    if (ok) dist_bcast(meta, sizeof *meta, 0);
    hid_t file = ok ? H5Fopen(path, H5F_ACC_RDONLY, fapl) : -1;
    if (ok && file < 0) snprintf(why, cap, "cannot open it as HDF5 (missing, truncated or not HDF5)");
    if (ok) ok = ck_agree(file >= 0, why, cap);
    for (int i = 0; i < n && ok; i++) {
        if (!wanted(&t[i], prefix)) continue;
        ds[m] = open_checked(file, &t[i], &want[m], why, cap);
        ok = ck_agree(ds[m] >= 0, why, cap);
        if (ds[m] < 0) continue;
        sel[m++] = &t[i];
        *bytes += ckpt_numel(t[i].ndim, t[i].shape) * sizeof(float);
    }
    haddr_t *off = tsr_malloc(k * sizeof *off);
    for (int i = 0; i < m; i++) off[i] = H5Dget_offset(ds[i]);
    if (ok) ck_transfer_slices(path, 0, m, sel, ds, off, dxpl, slice, read_ok, NULL, NULL);
    free(off);
    if (ok) ok = ck_tensors_crc(m, sel, slice, read_ok, got, why, cap) == 0;
    for (int i = 0; i < m && ok; i++) {
        if (got[i] != want[i]) { /* the same on every rank: both are whole-tensor values */
            snprintf(why, cap,
                     "tensor %s: CRC32C mismatch: data 0x%08x, attribute crc32c 0x%08x (corrupt)",
                     sel[i]->name, got[i], want[i]);
            ok = 0;
        }
    }
    for (int i = 0; i < m; i++) H5Dclose(ds[i]);
    if (file >= 0) H5Fclose(file);
    H5Pclose(fapl);
    H5Pclose(dxpl);
    free(ds), free(want), free(slice), free(got), free(read_ok), free(sel);
    return ok ? 0 : -1;
}

int ckpt_load(const char *path, ckpt_meta *meta, ckpt_tensor *tensors, int n,
              const char *only_prefix, ckpt_stats *stats, const ckpt_peeked *peeked) {
    int rank = dist_world_rank();
    dist_barrier(); /* timed from when every rank is here (ckpt_stats) */
    double t0 = tsr_now();
    char why[1024] = "";
    uint64_t bytes;
    if (load_file(path, peeked, meta, tensors, n, only_prefix, &bytes, why, sizeof why) != 0) {
        if (rank == 0) tsr_error("checkpoint %s: %s", path, why);
        return TSR_EXIT_DATA;
    }
    if (stats) {
        stats->seconds = tsr_now() - t0;
        stats->bytes = bytes;
    }
    return 0;
}

/* Rank 0's view of the run directory, broadcast: candidate basenames, newest first, "\n"-joined;
 * note: a remark about `latest` for the warnings (empty when it was fine). */
typedef struct candidates {
    char names[16384];
    char note[1024];
    char passed[1024];  /* agreed_first: the newer candidates put behind the agreed one */
    int count;
    int latest_missing; /* RUN_DIR/latest does not exist (a fresh run when nothing else is there) */
} candidates;

/* Rank 0's peek at one file: its identity first (a change while reading shows as a mismatch
 * later), then its root attributes read and checked. 0, or -1. */
static int peek_file(const char *path, ckpt_peeked *out) {
    char why[1024];
    if (file_identity(path, out->file_id) != 0 ||
        ck_meta_read_file(path, &out->meta, NULL, why, sizeof why) != 0)
        return -1;
    snprintf(out->path, sizeof out->path, "%s", path);
    return 0;
}

/* Whether path's fingerprints agreed when it was saved (its root attributes: those of `known`
 * when it is that very file, else read; into an empty `fill` as rank 0's peek, so that the
 * peek reads them once) */
static int fingerprints_agreed(const char *path, const ckpt_peeked *known, ckpt_peeked *fill) {
    char why[1024];
    if (fill && !fill->path[0]) return peek_file(path, fill) == 0 && fill->meta.fingerprints_agreed == 1;
    ckpt_meta *m = tsr_malloc(sizeof *m);
    int ok = read_meta(path, known, m, why, sizeof why) == 0 && m->fingerprints_agreed == 1;
    free(m);
    return ok;
}

/* agreed_first: the candidates whose fingerprints agreed (fingerprints_agreed = 1, read from
 * their root attributes) move ahead of the others, in their order; the newer ones they pass are
 * named in c->passed. The newest agreed (the usual case): the order stands, the rest unread. */
static void agreed_first(const char *run_dir, candidates *c, const ckpt_peeked *known,
                         ckpt_peeked *fill) {
    char *names[1024], buf[sizeof c->names];
    int n = 0, agreed[1024], first = -1;
    memcpy(buf, c->names, sizeof buf);
    char *save = NULL;
    for (char *p = strtok_r(buf, "\n", &save); p && n < 1024; p = strtok_r(NULL, "\n", &save)) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", run_dir, p);
        agreed[n] = fingerprints_agreed(path, known, fill);
        if (agreed[n] && first < 0) first = n;
        names[n++] = p;
        if (first == 0) return;
    }
    if (first < 0) return; /* none is agreed: the order stands */
    size_t o = 0, q = 0;
    for (int pass = 1; pass >= 0; pass--)
        for (int k = 0; k < n; k++)
            if (agreed[k] == pass) o += (size_t)snprintf(c->names + o, sizeof c->names - o, "%s\n", names[k]);
    for (int k = 0; k < first && q < sizeof c->passed - 80; k++)
        q += (size_t)snprintf(c->passed + q, sizeof c->passed - q, "%s%s", k ? ", " : "", names[k]);
}

static void list_candidates(const char *run_dir, candidates *c, int want_agreed,
                            const ckpt_peeked *known, ckpt_peeked *fill) {
    memset(c, 0, sizeof *c);
    char latest[256] = "", why[1024] = "";
    int lr = ckpt_read_latest(run_dir, latest, sizeof latest, why, sizeof why);
    size_t o = 0;
    if (lr == 1) {
        o += (size_t)snprintf(c->names + o, sizeof c->names - o, "%s\n", latest);
        c->count++;
    } else if (lr == 0) {
        snprintf(c->note, sizeof c->note, "%.900s/latest does not exist", run_dir);
        c->latest_missing = 1;
    } else {
        snprintf(c->note, sizeof c->note, "%s", why);
    }
    int64_t *steps;
    int n = ckpt_list_steps(run_dir, &steps);
    for (int k = 0; k < n; k++) {
        char name[64];
        snprintf(name, sizeof name, "step-%08lld.h5", (long long)steps[k]);
        if (lr == 1 && strcmp(name, latest) == 0) continue;
        if (o + strlen(name) + 2 >= sizeof c->names) break; /* keep the newest ~800 */
        o += (size_t)snprintf(c->names + o, sizeof c->names - o, "%s\n", name);
        c->count++;
    }
    free(steps);
    if (want_agreed) agreed_first(run_dir, c, known, fill);
}

int ckpt_resume(const char *run_dir, ckpt_meta *meta, ckpt_tensor *tensors, int n, char *path_out,
                size_t path_cap, ckpt_stats *stats, const ckpt_peeked *peeked, int agreed) {
    int rank = dist_world_rank();
    dist_barrier(); /* timed from when every rank is here (ckpt_stats) */
    double t0 = tsr_now();
    candidates *c = calloc(1, sizeof *c);
    if (!c) tsr_die(TSR_EXIT_INTERNAL, "out of memory");
    if (rank == 0) list_candidates(run_dir, c, agreed, peeked, NULL);
    dist_bcast(c, sizeof *c, 0);
    if (c->count == 0) {
        int latest_exists = !c->latest_missing;
        if (latest_exists && rank == 0)
            tsr_error("no checkpoint to resume from in %s: %s", run_dir, c->note);
        free(c);
        return latest_exists ? TSR_EXIT_DATA : 1; /* 1: a fresh run */
    }
    if (rank == 0 && c->note[0])
        tsr_warn("%s; resuming from the newest valid step-*.h5 instead", c->note);
    if (rank == 0 && c->passed[0])
        tsr_warn("%s: the fingerprints of %s were not compared when they were saved "
                 "(health.fingerprint_interval = 0, device = cuda or an older tessera): resuming "
                 "from the newest checkpoint whose fingerprints agreed instead (docs/health.md; "
                 "--resume FILE takes one by name)", run_dir, c->passed);
    size_t tried_cap = 65536, to = 0;
    char *tried = calloc(1, tried_cap);
    char *save = NULL;
    int rc = TSR_EXIT_DATA;
    for (char *name = strtok_r(c->names, "\n", &save); name; name = strtok_r(NULL, "\n", &save)) {
        char path[4200], why[1024] = "";
        uint64_t bytes;
        snprintf(path, sizeof path, "%s/%s", run_dir, name);
        int64_t named_step = -1;
        ckpt_parse_name(name, &named_step);
        int valid = load_file(path, peeked, meta, tensors, n, NULL, &bytes, why, sizeof why) == 0;
        if (valid && meta->step != named_step) { /* same on every rank: the same attribute */
            snprintf(why, sizeof why, "its step attribute is %lld, its name says %lld",
                     (long long)meta->step, (long long)named_step);
            valid = 0;
        }
        if (valid) {
            if (path_out && path_cap) snprintf(path_out, path_cap, "%s", path);
            if (stats) {
                stats->seconds = tsr_now() - t0;
                stats->bytes = bytes;
            }
            rc = 0;
            break;
        }
        if (rank == 0) tsr_warn("checkpoint %s skipped: %s; trying the next one", path, why);
        if (tried && to < tried_cap)
            to += (size_t)snprintf(tried + to, tried_cap - to, "\n  %s: %s", path, why);
    }
    if (rc != 0 && rank == 0)
        tsr_error("no valid checkpoint in %s (exit %d); tried:%s", run_dir, TSR_EXIT_DATA,
                  tried ? tried : "");
    free(tried);
    free(c);
    return rc;
}

int ckpt_peek_meta(const char *run_dir, ckpt_peeked *out, int agreed) {
    struct stat st;
    out->path[0] = '\0';
    if (stat(run_dir, &st) == 0 && S_ISREG(st.st_mode)) /* a checkpoint file itself */
        return peek_file(run_dir, out) == 0 ? 0 : 1;
    candidates *c = calloc(1, sizeof *c);
    if (!c) tsr_die(TSR_EXIT_INTERNAL, "out of memory");
    list_candidates(run_dir, c, agreed, NULL, out);
    int rc = 1;
    char *save = NULL;
    for (char *name = strtok_r(c->names, "\n", &save); name && rc;
         name = strtok_r(NULL, "\n", &save)) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", run_dir, name);
        rc = (out->path[0] && strcmp(out->path, path) == 0) || peek_file(path, out) == 0 ? 0 : 1;
    }
    free(c);
    return rc;
}

int ckpt_check_load_path(const char *path, char *why, size_t cap) {
    size_t n = strlen(path);
    if (n > CKPT_MPIIO_PATH_MAX) {
        snprintf(why, cap, "the checkpoint path %.120s... is %zu characters long, at most %d can be "
                 "opened (Open MPI's MPI-IO overflows a buffer and aborts on longer paths): move it, "
                 "or point a shorter symbolic link at its directory", path, n, CKPT_MPIIO_PATH_MAX);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

int ckpt_check_run_dir(const char *run_dir, char *why, size_t cap) {
    size_t n = strlen(run_dir);
    if (n > CKPT_RUN_DIR_MAX) {
        snprintf(why, cap, "run_dir is %zu characters long, at most %d are supported (Open MPI's "
                 "MPI-IO overflows a buffer and aborts on longer checkpoint paths): use a shorter "
                 "path or a symbolic link", n, CKPT_RUN_DIR_MAX);
        return TSR_EXIT_USAGE;
    }
    return 0;
}
