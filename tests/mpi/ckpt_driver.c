/* ckpt_driver.c — drives checkpoint saves and loads for tests/mpi/test_ckpt_mpi.sh.
 *
 *   ckpt_driver save RUN_DIR STEP...   save each STEP (keep_last 2) from W ranks
 *   ckpt_driver save-gap RUN_DIR STEP  the same, but model/wte's last element is owned by no rank
 *   ckpt_driver resume RUN_DIR         ckpt_resume at this world size, check every element
 *   ckpt_driver load FILE [PREFIX]     ckpt_load of one file, check every (PREFIX) element
 *   ckpt_driver setattr FILE NAME V    overwrites the int64 root attribute NAME with V in place
 *                                      (what an edit with h5py does; one process)
 *
 * Tensors of 1-D..4-D shapes whose sizes are not multiples of the world size; element i of tensor
 * t at step s is v(t, i, s), an exactly representable float, so checks are exact (count of wrong
 * elements). Each tensor's flat range is split unevenly across the ranks (weights r + 1, some
 * ranks empty), differently for each world size: loading at another world size is elastic.
 * Exit: 0 all exact, 1 wrong elements or metadata, else the library's status (1 = no checkpoint
 * for resume, 2 = invalid). A failed save prints "rank R: save of step S returned RC" on every
 * rank (the tests check that every rank returned, none hung or was killed).
 */
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "common.h"

#define NT 5
static const struct {
    const char *name;
    int ndim;
    int64_t shape[4];
} spec[NT] = {
    {"model/wte", 2, {37, 11}},     {"model/ln_f/bias", 1, {13}},      {"model/scalar", 1, {1}},
    {"optim/m/attn", 3, {5, 7, 3}}, {"optim/v/attn", 4, {3, 4, 5, 2}},
};

static float value(int t, uint64_t i, int64_t step) {
    return (float)((i * 7 + (uint64_t)t * 13 + (uint64_t)step * 101) % 65536) - 32768.0f + 0.25f;
}

/* Rank r's range of tensor t at world size w: weights r + 1, zero when (r + t) % 3 == 2. */
static void split(int t, uint64_t numel, int w, int r, uint64_t *lo, uint64_t *hi) {
    uint64_t total = 0, before = 0;
    for (int k = 0; k < w; k++) {
        uint64_t wk = ((k + t) % 3 == 2) ? 0 : (uint64_t)(k + 1);
        if (k < r) before += wk;
        total += wk;
    }
    uint64_t mine = ((r + t) % 3 == 2) ? 0 : (uint64_t)(r + 1);
    if (total == 0) { /* every rank was excluded: rank 0 takes it all */
        total = 1;
        mine = r == 0;
        before = 0;
    }
    *lo = numel * before / total;
    *hi = numel * (before + mine) / total;
}

static void make_tensors(ckpt_tensor *ts, int w, int r) {
    for (int t = 0; t < NT; t++) {
        ckpt_tensor *x = &ts[t];
        memset(x, 0, sizeof *x);
        x->name = spec[t].name;
        x->ndim = spec[t].ndim;
        uint64_t numel = 1;
        for (int d = 0; d < x->ndim; d++)
            x->shape[d] = spec[t].shape[d], numel *= (uint64_t)spec[t].shape[d];
        split(t, numel, w, r, &x->lo, &x->hi);
        x->data = tsr_calloc(x->hi - x->lo + 1, sizeof(float));
    }
}

/* Wrong elements of this rank's slices (only tensors starting with prefix, if given). */
static long check(const ckpt_tensor *ts, int64_t step, const char *prefix) {
    long bad = 0;
    for (int t = 0; t < NT; t++) {
        if (prefix && strncmp(ts[t].name, prefix, strlen(prefix)) != 0) continue;
        for (uint64_t i = ts[t].lo; i < ts[t].hi; i++)
            if (ts[t].data[i - ts[t].lo] != value(t, i, step)) bad++;
    }
    return bad;
}

static int check_meta(const ckpt_meta *m, int64_t step) {
    return m->tokens == step * 1000 && m->data_cursor == step * 8 && m->global_batch == 8 &&
           m->seed == 7 && strcmp(m->config, "seed = 7;\nglobal_batch = 8;\n") == 0 &&
           strcmp(m->program_version, "ckpt_driver 1") == 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    tsr_log_set_rank(rank, world);
    if (argc < 3) {
        if (rank == 0)
            fprintf(
                stderr,
                "usage: ckpt_driver save RUN_DIR STEP... | resume RUN_DIR | load FILE [PREFIX]\n");
        MPI_Finalize();
        return 1;
    }
    if (strcmp(argv[1], "setattr") == 0) { /* serial HDF5 open, as h5py would */
        int64_t v;
        if (argc != 5 || tsr_parse_i64(argv[4], INT64_MIN, INT64_MAX, &v))
            tsr_die(1, "usage: ckpt_driver setattr FILE NAME INT64");
        hid_t f = H5Fopen(argv[2], H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t a = f < 0 ? -1 : H5Aopen(f, argv[3], H5P_DEFAULT);
        int bad = a < 0 || H5Awrite(a, H5T_NATIVE_INT64, &v) < 0;
        if (a >= 0) H5Aclose(a);
        if (f >= 0 && H5Fclose(f) < 0) bad = 1;
        if (bad) fprintf(stderr, "ckpt_driver: cannot set %s in %s\n", argv[3], argv[2]);
        MPI_Finalize();
        return bad;
    }
    ckpt_tensor ts[NT];
    make_tensors(ts, world, rank);
    static ckpt_meta meta;
    int rc = 0;
    if (strcmp(argv[1], "save-gap") == 0) {
        uint64_t numel0 = (uint64_t)(spec[0].shape[0] * spec[0].shape[1]);
        if (ts[0].hi == numel0 && ts[0].hi > ts[0].lo) ts[0].hi--;
        argv[1] = "save";
    }
    if (strcmp(argv[1], "save") == 0) {
        for (int a = 3; a < argc && rc == 0; a++) {
            int64_t step;
            if (tsr_parse_i64(argv[a], 0, 99999999, &step)) tsr_die(1, "bad step '%s'", argv[a]);
            for (int t = 0; t < NT; t++)
                for (uint64_t i = ts[t].lo; i < ts[t].hi; i++)
                    ts[t].data[i - ts[t].lo] = value(t, i, step);
            memset(&meta, 0, sizeof meta);
            meta.step = step, meta.tokens = step * 1000, meta.data_cursor = step * 8;
            meta.world_size = world, meta.global_batch = 8, meta.seed = 7;
            snprintf(meta.config, sizeof meta.config, "seed = 7;\nglobal_batch = 8;\n");
            snprintf(meta.program_version, sizeof meta.program_version, "ckpt_driver 1");
            char path[4096];
            ckpt_stats st;
            rc = ckpt_save(argv[2], &meta, ts, NT, 2, path, sizeof path, &st);
            if (rc == 0 && rank == 0)
                printf("saved %s on %d ranks: %llu bytes in %.3f s\n", path, world,
                       (unsigned long long)st.bytes, st.seconds);
            if (rc != 0) /* every rank says so: a failed save returns on every rank */
                printf("rank %d: save of step %lld returned %d\n", rank, (long long)step, rc);
        }
    } else if (strcmp(argv[1], "resume") == 0 || strcmp(argv[1], "load") == 0) {
        const char *prefix = argc > 3 ? argv[3] : NULL;
        char path[4096] = "";
        ckpt_stats st = {0};
        if (argv[1][0] == 'r')
            rc = ckpt_resume(argv[2], &meta, ts, NT, path, sizeof path, &st, NULL, 0);
        else
            rc = ckpt_load(argv[2], &meta, ts, NT, prefix, &st, NULL),
            snprintf(path, sizeof path, "%s", argv[2]);
        if (rc == 0) {
            long bad = check(ts, meta.step, prefix);
            MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
            int meta_ok = check_meta(&meta, meta.step);
            if (rank == 0)
                printf(
                    "loaded step %lld from %s on %d ranks (written by %lld): %ld wrong elements, "
                    "metadata %s, %llu bytes\n",
                    (long long)meta.step, path, world, (long long)meta.world_size, bad,
                    meta_ok ? "ok" : "WRONG", (unsigned long long)st.bytes);
            rc = (bad == 0 && meta_ok) ? 0 : 1;
        } else if (rank == 0) {
            printf("%s returned %d\n", argv[1], rc);
        }
    } else {
        if (rank == 0) fprintf(stderr, "ckpt_driver: unknown command %s\n", argv[1]);
        rc = 1;
    }
    for (int t = 0; t < NT; t++) free(ts[t].data);
    MPI_Finalize();
    return rc;
}
