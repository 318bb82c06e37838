/* dist.c — MPI behind the dist.h interface; a world of one when built with NO_MPI. */
#include "dist/dist.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common.h"

void dist_init_single(tsr_dist *d) {
    memset(d, 0, sizeof *d);
    d->world = d->local_world = 1;
    if (gethostname(d->host, sizeof d->host) != 0) strcpy(d->host, "?");
    d->host[sizeof d->host - 1] = '\0';
    tsr_log_set_rank(0, 1);
}

/* the exit status a failed MPI call dies with (dist_set_fail_code) */
static int fail_code = TSR_EXIT_INTERNAL;
void dist_set_fail_code(int code) { fail_code = code; }

#ifndef TSR_NO_MPI
#include <mpi.h>

static int initialized;
static int provided_level = MPI_THREAD_SINGLE; /* what MPI_Init_thread granted */

/* Every MPI call goes through this: on error, name the call, file, line, and abort all ranks. */
#define MPI_CHECK(call)                                                                     \
    do {                                                                                    \
        int mpi_rc_ = (call);                                                               \
        if (mpi_rc_ != MPI_SUCCESS) {                                                       \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                            \
            int mpi_len_ = 0;                                                               \
            MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);                                 \
            tsr_die(fail_code, "%s:%d: %s failed: %s", __FILE__, __LINE__, #call,             \
                    mpi_msg_);                                                              \
        }                                                                                   \
    } while (0)

/* A rank started by a launcher dies with it: when mpirun (or Open MPI's local daemon, or srun's
 * slurmstepd) is killed outright, nothing tells the ranks, which trained on and wrote checkpoints
 * for ~20 s until a collective failed. PR_SET_PDEATHSIG sends SIGKILL (not SIGTERM: that would ask
 * for a checkpoint) when the parent exits. A launcher that died between the two calls is caught
 * by comparing the parent before and after. A program started by hand (a singleton, nohup) has
 * a shell for parent and keeps running without it. */
static void die_with_launcher(void) {
    if (!dist_launched()) return;
    pid_t parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) {
        tsr_warn("prctl(PR_SET_PDEATHSIG): %s: this rank will not stop by itself if its launcher "
                 "is killed", strerror(errno));
        return;
    }
    /* the parent changed between getppid() and prctl: the launcher died in between. A parent of
     * pid 1 is no sign of that: in a container (docker run without --init, a PID namespace)
     * mpirun itself is pid 1, and every rank exited 3 */
    if (getppid() != parent) {
        tsr_error("the launcher of this rank (pid %d) is gone: exiting", (int)parent);
        _exit(TSR_EXIT_INTERNAL);
    }
}

void dist_init(tsr_dist *d, int *argc, char ***argv) {
    die_with_launcher();
    /* MULTIPLE: the main thread calls MPI, and with parallel.gpu_comm = "mpi" so does the
     * host-staged transport's communication thread (on its own communicators); OpenMP and the
     * checkpoint I/O threads never do. A library that grants less runs everything else as before
     * (FUNNELED is all the rest needs); that transport then refuses to start (dist_thread_multiple) */
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided_level));
    initialized = 1;
    tsr_set_exit_hooks(dist_abort, dist_finalize);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &d->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &d->world));
    MPI_Comm local;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL,
                                  &local));
    MPI_CHECK(MPI_Comm_rank(local, &d->local_rank));
    MPI_CHECK(MPI_Comm_size(local, &d->local_world));
    MPI_Comm_free(&local);
    if (gethostname(d->host, sizeof d->host) != 0) strcpy(d->host, "?");
    d->host[sizeof d->host - 1] = '\0';
    d->view = NULL;
    tsr_log_set_rank(d->rank, d->world);
}

void dist_finalize(void) {
    if (initialized) {
        initialized = 0;
        tsr_set_exit_hooks(NULL, NULL);
        MPI_Finalize();
    }
}

int dist_is_initialized(void) { return initialized; }

int dist_thread_multiple(void) { return !initialized || provided_level >= MPI_THREAD_MULTIPLE; }

/* MPI is up: started by dist_init, or by a program that called MPI_Init itself (the checkpoint
 * test driver, tests/mpi/ckpt_driver.c, which uses checkpoint/ and through it these functions). */
static int mpi_live(void) {
    int on = 0, off = 0;
    if (initialized) return 1;
    MPI_Initialized(&on);
    if (on) MPI_Finalized(&off);
    return on && !off;
}

int dist_world_rank(void) {
    int r = 0;
    if (mpi_live()) MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &r));
    return r;
}
int dist_world_size(void) {
    int w = 1;
    if (mpi_live()) MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &w));
    return w;
}

/* The most elements one MPI call may address (counts and displacements are ints): INT32_MAX, or
 * less under the test hook TSR_FAULT=mpi_int_limit:N (read once), which makes small runs take the
 * chunked and per-block paths of the collectives below (tests/mpi/test_zero1.sh). */
static size_t extent_limit(void) {
    static size_t lim;
    if (lim) return lim;
    lim = (size_t)INT32_MAX;
    const char *f = tsr_fault("mpi_int_limit");
    int64_t v = 0;
    if (f && tsr_parse_i64(f, 1, INT32_MAX, &v) == 0) lim = (size_t)v;
    else if (f) tsr_warn("TSR_FAULT=mpi_int_limit:%s: not a count in [1, 2^31 - 1]; ignored", f);
    return lim;
}

/* Over comm, n elements of elem bytes from send into buf (send NULL: in place) in calls of at most
 * extent_limit() each (a gradient of more than 2^31 floats); n = 0 makes no call (the same n on
 * every rank). */
static void allreduce_from(const void *send, void *buf, size_t n, size_t elem, MPI_Datatype type,
                           MPI_Op op, MPI_Comm comm) {
    const size_t chunk = extent_limit();
    for (size_t at = 0; at < n; at += chunk) {
        size_t k = n - at < chunk ? n - at : chunk;
        MPI_CHECK(MPI_Allreduce(send ? (const char *)send + at * elem : MPI_IN_PLACE,
                                (char *)buf + at * elem, (int)k, type, op, comm));
    }
}
static void allreduce_chunked(void *buf, size_t n, size_t elem, MPI_Datatype type, MPI_Op op,
                              MPI_Comm comm) {
    allreduce_from(NULL, buf, n, elem, type, op, comm);
}

/* Without MPI_Init (dist_init_single: a world of one) the collectives are what they are for one
 * rank: sums and maxima are the input, gathers copy, the rest does nothing. */
void dist_allreduce_sum_f32(float *buf, size_t n) {
    if (mpi_live()) allreduce_chunked(buf, n, sizeof *buf, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}
void dist_allreduce_sum_f64(double *buf, size_t n) {
    if (mpi_live()) allreduce_chunked(buf, n, sizeof *buf, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}
void dist_allreduce_sum_i64(int64_t *buf, size_t n) {
    if (mpi_live()) allreduce_chunked(buf, n, sizeof *buf, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
}
void dist_allreduce_max_f64(double *buf, size_t n) {
    if (mpi_live()) allreduce_chunked(buf, n, sizeof *buf, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
}
void dist_allreduce_min_int(int *buf, size_t n) {
    if (mpi_live()) allreduce_chunked(buf, n, sizeof *buf, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
}
void dist_allreduce_max_int(int *buf, size_t n) {
    if (mpi_live()) allreduce_chunked(buf, n, sizeof *buf, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
}
/* n as an MPI count: a rank's block, which trainer_init's check_int_counts keeps within an int
 * (anything larger here is a bug, named by what) */
static int block_count(size_t n, const char *what) {
    if (n > (size_t)INT32_MAX)
        tsr_die(TSR_EXIT_INTERNAL, "%s: a block of %zu floats exceeds MPI's int counts", what, n);
    return (int)n;
}

/* Every block's end within extent_limit(): the counts' int copies in ic (and the offsets in id),
 * else 0 */
static int as_ints(const size_t *counts, const size_t *displs, int W, int *ic, int *id) {
    size_t lim = extent_limit(), end = 0;
    for (int r = 0; r < W; r++) {
        size_t e = (displs ? displs[r] : end) + counts[r];
        if (e > lim) return 0;
        ic[r] = (int)counts[r];
        if (id) id[r] = (int)(displs ? displs[r] : end);
        end = e;
    }
    return 1;
}

void dist_reduce_scatter_sum_f32(const float *send, float *recv, const size_t *counts) {
    int W = dist_world_size(), me = dist_world_rank();
    if (W == 1) { /* no MPI call: one process's block may be any size */
        memcpy(recv, send, counts[0] * sizeof(float));
        return;
    }
    int *ic = tsr_malloc((size_t)W * sizeof(int));
    if (as_ints(counts, NULL, W, ic, NULL)) {
        MPI_CHECK(MPI_Reduce_scatter(send, recv, ic, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    } else { /* block r summed onto rank r, one block at a time (each block's count is an int) */
        size_t at = 0;
        for (int r = 0; r < W; at += counts[r], r++) {
            MPI_CHECK(MPI_Reduce(send + at, r == me ? recv : NULL,
                                 block_count(counts[r], "reduce-scatter"), MPI_FLOAT, MPI_SUM, r,
                                 MPI_COMM_WORLD));
        }
    }
    free(ic);
}
void dist_allgatherv_f32(float *buf, const size_t *counts, const size_t *displs) {
    int W = dist_world_size();
    if (W == 1) return; /* in place: one process has everything */
    int *ic = tsr_malloc(2 * (size_t)W * sizeof(int));
    if (as_ints(counts, displs, W, ic, ic + W)) {
        MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, ic, ic + W, MPI_FLOAT,
                                 MPI_COMM_WORLD));
    } else { /* rank r's block broadcast from r, one block at a time (offsets in size_t) */
        for (int r = 0; r < W; r++) {
            MPI_CHECK(MPI_Bcast(buf + displs[r], block_count(counts[r], "all-gather"), MPI_FLOAT,
                                r, MPI_COMM_WORLD));
        }
    }
    free(ic);
}
void dist_allgather(const void *mine, void *all, size_t bytes) {
    if (!mpi_live()) memcpy(all, mine, bytes);
    else MPI_CHECK(MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD));
}
void dist_gather(const void *mine, void *all, size_t bytes, int root) {
    if (!mpi_live()) memcpy(all, mine, bytes);
    else MPI_CHECK(MPI_Gather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD));
}
void dist_barrier(void) {
    if (mpi_live()) MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}
void dist_bcast(void *buf, size_t bytes, int root) {
    if (mpi_live()) MPI_CHECK(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD));
}
struct tsr_group {
    MPI_Comm comm;
    int rank, size;
};

/* a handle of dist_wait: the requests of one non-blocking operation */
typedef struct dist_request {
    int n;
    MPI_Request r[];
} dist_request;
static dist_request *request_new(int n) {
    dist_request *r = tsr_malloc(sizeof *r + (size_t)n * sizeof(MPI_Request));
    r->n = n;
    return r;
}

tsr_group *dist_group_split(int color, int key) {
    tsr_group *g = tsr_calloc(1, sizeof *g);
    if (!mpi_live()) {
        g->comm = MPI_COMM_NULL, g->size = 1;
        return g;
    }
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &g->comm));
    MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN);
    MPI_CHECK(MPI_Comm_rank(g->comm, &g->rank));
    MPI_CHECK(MPI_Comm_size(g->comm, &g->size));
    return g;
}
void dist_group_free(tsr_group *g) {
    if (!g) return;
    if (g->comm != MPI_COMM_NULL && mpi_live()) MPI_Comm_free(&g->comm);
    free(g);
}
int dist_group_rank(const tsr_group *g) { return g->rank; }
int dist_group_size(const tsr_group *g) { return g->size; }
/* a group of one needs no MPI call (and has none without MPI_Init) */
void dist_group_allreduce_sum_f32(tsr_group *g, float *buf, size_t n) {
    if (g->size > 1)
        allreduce_chunked(buf, n, sizeof *buf, MPI_FLOAT, MPI_SUM, g->comm);
}
void dist_group_allreduce_sum_f64(tsr_group *g, double *buf, size_t n) {
    if (g->size > 1)
        allreduce_chunked(buf, n, sizeof *buf, MPI_DOUBLE, MPI_SUM, g->comm);
}
void dist_group_allreduce_sum_f32_from(tsr_group *g, const float *send, float *recv, size_t n) {
    if (g->size == 1) memmove(recv, send, n * sizeof *recv);
    else allreduce_from(send, recv, n, sizeof *recv, MPI_FLOAT, MPI_SUM, g->comm);
}
void dist_group_allreduce_max_f64(tsr_group *g, double *buf, size_t n) {
    if (g->size > 1)
        allreduce_chunked(buf, n, sizeof *buf, MPI_DOUBLE, MPI_MAX, g->comm);
}
void dist_group_allreduce_max_f32(tsr_group *g, float *buf, size_t n) {
    if (g->size > 1)
        allreduce_chunked(buf, n, sizeof *buf, MPI_FLOAT, MPI_MAX, g->comm);
}
void dist_group_allreduce_min_int(tsr_group *g, int *buf, size_t n) {
    if (g->size > 1)
        allreduce_chunked(buf, n, sizeof *buf, MPI_INT, MPI_MIN, g->comm);
}
void dist_group_barrier(tsr_group *g) {
    if (g->size > 1) MPI_CHECK(MPI_Barrier(g->comm));
}
void dist_group_allgatherv_f32(tsr_group *g, const float *mine, float *all, const int *counts,
                               const int *displs) {
    if (g->size == 1) memmove(all + displs[0], mine, (size_t)counts[0] * sizeof(float));
    else if (mine == all + displs[g->rank]) /* in place */
        MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, counts, displs,
                                 MPI_FLOAT, g->comm));
    else MPI_CHECK(MPI_Allgatherv(mine, counts[g->rank], MPI_FLOAT, all, counts, displs, MPI_FLOAT, g->comm));
}
void *dist_group_iallgatherv_f32(tsr_group *g, const float *mine, float *all, const int *counts,
                                 const int *displs) {
    if (g->size == 1) {
        memmove(all + displs[0], mine, (size_t)counts[0] * sizeof(float));
        return NULL;
    }
    dist_request *r = request_new(1);
    MPI_CHECK(MPI_Iallgatherv(mine, counts[g->rank], MPI_FLOAT, all, counts, displs, MPI_FLOAT,
                              g->comm, &r->r[0]));
    return r;
}
void dist_wait(void *request) {
    if (!request) return;
    dist_request *r = request;
    MPI_CHECK(MPI_Waitall(r->n, r->r, MPI_STATUSES_IGNORE));
    free(r);
}
void dist_group_allreduce_sum_i64(tsr_group *g, int64_t *buf, size_t n) {
    if (g->size > 1)
        allreduce_chunked(buf, n, sizeof *buf, MPI_INT64_T, MPI_SUM, g->comm);
}
/* The receive and the send in pieces of at most extent_limit() bytes (a block of keys and values
 * may pass 2^31 bytes), each piece a tag of its own. */
void *dist_group_ring_shift(tsr_group *g, const void *send, void *recv, size_t bytes) {
    if (g->size == 1) {
        memmove(recv, send, bytes);
        return NULL;
    }
    const size_t chunk = extent_limit(), pieces = bytes ? (bytes + chunk - 1) / chunk : 0;
    const int next = (g->rank + 1) % g->size, prev = (g->rank + g->size - 1) % g->size;
    if (pieces > 1000000)
        tsr_die(TSR_EXIT_INTERNAL, "dist: a ring exchange of %zu bytes is too many pieces", bytes);
    dist_request *r = request_new((int)(2 * pieces));
    for (size_t p = 0; p < pieces; p++) {
        const size_t at = p * chunk, k = bytes - at < chunk ? bytes - at : chunk;
        MPI_CHECK(MPI_Irecv((char *)recv + at, (int)k, MPI_BYTE, prev, (int)p, g->comm,
                            &r->r[2 * p]));
        MPI_CHECK(MPI_Isend((const char *)send + at, (int)k, MPI_BYTE, next, (int)p, g->comm,
                            &r->r[2 * p + 1]));
    }
    return r;
}
/* a non-blocking send (to >= 0) or receive of bytes in pieces of at most extent_limit() bytes,
 * all under one tag (MPI matches a sender's messages of one tag in order) */
static void *p2p_start(tsr_group *g, void *buf, size_t bytes, int to, int from, int tag) {
    const size_t chunk = extent_limit(), pieces = bytes ? (bytes + chunk - 1) / chunk : 0;
    if (pieces > 1000000)
        tsr_die(TSR_EXIT_INTERNAL, "dist: a point-to-point message of %zu bytes is too many "
                "pieces", bytes);
    dist_request *r = request_new((int)pieces);
    for (size_t p = 0; p < pieces; p++) {
        const size_t at = p * chunk, k = bytes - at < chunk ? bytes - at : chunk;
        if (to >= 0)
            MPI_CHECK(MPI_Isend((char *)buf + at, (int)k, MPI_BYTE, to, tag, g->comm, &r->r[p]));
        else MPI_CHECK(MPI_Irecv((char *)buf + at, (int)k, MPI_BYTE, from, tag, g->comm, &r->r[p]));
    }
    return r;
}
void *dist_group_isend(tsr_group *g, const void *buf, size_t bytes, int to, int tag) {
    return p2p_start(g, (void *)buf, bytes, to, -1, tag);
}
void *dist_group_irecv(tsr_group *g, void *buf, size_t bytes, int from, int tag) {
    return p2p_start(g, buf, bytes, -1, from, tag);
}
int dist_test(void *request) {
    if (!request) return 1;
    dist_request *r = request;
    int done = 0;
    MPI_CHECK(MPI_Testall(r->n, r->r, &done, MPI_STATUSES_IGNORE));
    if (done) free(r);
    return done;
}
void dist_group_sendrecv(tsr_group *g, const void *send, int to, void *recv, int from,
                         size_t bytes) {
    const size_t chunk = extent_limit();
    for (size_t at = 0; at < bytes; at += chunk) {
        const int k = (int)(bytes - at < chunk ? bytes - at : chunk);
        MPI_CHECK(MPI_Sendrecv(to >= 0 ? (const char *)send + at : NULL, to >= 0 ? k : 0, MPI_BYTE,
                               to >= 0 ? to : MPI_PROC_NULL, 0,
                               from >= 0 ? (char *)recv + at : NULL, from >= 0 ? k : 0, MPI_BYTE,
                               from >= 0 ? from : MPI_PROC_NULL, 0, g->comm, MPI_STATUS_IGNORE));
    }
}
void dist_group_reduce_scatter_f32(tsr_group *g, const float *send, float *recv, const int *counts) {
    if (g->size == 1) memmove(recv, send, (size_t)counts[0] * sizeof(float));
    else MPI_CHECK(MPI_Reduce_scatter(send == recv ? MPI_IN_PLACE : send, recv, counts, MPI_FLOAT,
                                      MPI_SUM, g->comm));
}
static size_t gcd_size(size_t a, size_t b) {
    while (b) {
        const size_t t = a % b;
        a = b, b = t;
    }
    return a;
}
/* the smallest prime factor of n >= 2 */
static size_t smallest_factor(size_t n) {
    for (size_t f = 2; f <= n / f; f++)
        if (n % f == 0) return f;
    return n;
}
void dist_group_alltoallv(tsr_group *g, const void *send, const size_t *scounts,
                          const size_t *sdispls, void *recv, const size_t *rcounts,
                          const size_t *rdispls, size_t elem) {
    if (g->size == 1) {
        memmove((char *)recv + rdispls[0] * elem, (const char *)send + sdispls[0] * elem,
                scounts[0] * elem);
        return;
    }
    /* MPI counts and displacements are ints in units of the datatype: the unit is the largest
     * run of elements that divides every count and displacement (the expert exchange's rows of
     * C elements, so rows x C may pass 2^31) whose bytes fit an int */
    int n = g->size, *v = tsr_malloc(4 * (size_t)n * sizeof(int));
    const size_t *in[4] = {scounts, sdispls, rcounts, rdispls};
    size_t unit = 0;
    for (int k = 0; k < 4; k++)
        for (int r = 0; r < n; r++) unit = gcd_size(unit, in[k][r]);
    if (unit == 0) unit = 1;
    while (unit > 1 && unit > (size_t)INT32_MAX / elem) unit /= smallest_factor(unit);
    MPI_Datatype t;
    MPI_CHECK(MPI_Type_contiguous(block_count(unit * elem, "all-to-all element"), MPI_BYTE, &t));
    MPI_CHECK(MPI_Type_commit(&t));
    for (int k = 0; k < 4; k++)
        for (int r = 0; r < n; r++) v[k * n + r] = block_count(in[k][r] / unit, "all-to-all");
    MPI_CHECK(MPI_Alltoallv(send, v, v + n, t, recv, v + 2 * n, v + 3 * n, t, g->comm));
    MPI_CHECK(MPI_Type_free(&t));
    free(v);
}
/* broadcasts of any size: in pieces of at most INT32_MAX elements (MPI's int counts) */
static void bcast_chunked(void *buf, size_t n, size_t elem, MPI_Datatype type, int root,
                          MPI_Comm comm) {
    for (size_t at = 0; at < n; at += (size_t)INT32_MAX) {
        size_t k = n - at < (size_t)INT32_MAX ? n - at : (size_t)INT32_MAX;
        MPI_CHECK(MPI_Bcast((char *)buf + at * elem, (int)k, type, root, comm));
    }
}
void dist_group_bcast_f32(tsr_group *g, float *buf, size_t n, int root) {
    if (g->size > 1) bcast_chunked(buf, n, sizeof *buf, MPI_FLOAT, root, g->comm);
}
void dist_group_bcast(tsr_group *g, void *buf, size_t bytes, int root) {
    if (g->size > 1) bcast_chunked(buf, bytes, 1, MPI_BYTE, root, g->comm);
}
void dist_group_allgather(tsr_group *g, const void *mine, void *all, size_t bytes) {
    if (g->size == 1) memmove(all, mine, bytes);
    else MPI_CHECK(MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, g->comm));
}
void dist_abort(int code) {
    tsr_kill_child_groups();
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}
void dist_version(char *buf, size_t n) {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0, major = 0, minor = 0;
    MPI_Get_library_version(lib, &len);
    MPI_Get_version(&major, &minor);
    char *nl = strchr(lib, ',');
    if (nl) *nl = '\0';
    snprintf(buf, n, "MPI %d.%d, %s (compiled against %s %d.%d.%d)", major, minor, lib,
             "Open MPI", OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION);
}

#else /* TSR_NO_MPI: a world of one */

static int initialized;

void dist_init(tsr_dist *d, int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    initialized = 1;
    tsr_set_exit_hooks(dist_abort, dist_finalize);
    dist_init_single(d);
}
void dist_finalize(void) {
    initialized = 0;
    tsr_set_exit_hooks(NULL, NULL);
}
int dist_is_initialized(void) { return initialized; }
int dist_thread_multiple(void) { return 1; }
int dist_world_rank(void) { return 0; }
int dist_world_size(void) { return 1; }
void dist_allreduce_min_int(int *buf, size_t n) { (void)buf; (void)n; }
void dist_allreduce_sum_f32(float *buf, size_t n) { (void)buf; (void)n; }
void dist_allreduce_sum_f64(double *buf, size_t n) { (void)buf; (void)n; }
void dist_allreduce_sum_i64(int64_t *buf, size_t n) { (void)buf; (void)n; }
void dist_allreduce_max_f64(double *buf, size_t n) { (void)buf; (void)n; }
void dist_allreduce_max_int(int *buf, size_t n) { (void)buf; (void)n; }
void dist_reduce_scatter_sum_f32(const float *send, float *recv, const size_t *counts) {
    memcpy(recv, send, counts[0] * sizeof(float));
}
void dist_allgatherv_f32(float *buf, const size_t *counts, const size_t *displs) {
    (void)buf, (void)counts, (void)displs;
}
void dist_allgather(const void *mine, void *all, size_t bytes) { memcpy(all, mine, bytes); }
void dist_gather(const void *mine, void *all, size_t bytes, int root) {
    (void)root;
    memcpy(all, mine, bytes);
}
void dist_barrier(void) {}
void dist_bcast(void *buf, size_t bytes, int root) { (void)buf; (void)bytes; (void)root; }
struct tsr_group {
    int rank, size;
};
tsr_group *dist_group_split(int color, int key) {
    (void)color, (void)key;
    tsr_group *g = tsr_calloc(1, sizeof *g);
    g->size = 1;
    return g;
}
void dist_group_free(tsr_group *g) { free(g); }
int dist_group_rank(const tsr_group *g) { return g->rank; }
int dist_group_size(const tsr_group *g) { return g->size; }
void dist_group_allreduce_sum_f32(tsr_group *g, float *buf, size_t n) { (void)g, (void)buf, (void)n; }
void dist_group_allreduce_sum_f64(tsr_group *g, double *buf, size_t n) { (void)g, (void)buf, (void)n; }
void dist_group_allreduce_sum_f32_from(tsr_group *g, const float *send, float *recv, size_t n) {
    (void)g;
    memmove(recv, send, n * sizeof *recv);
}
void dist_group_allreduce_max_f64(tsr_group *g, double *buf, size_t n) { (void)g, (void)buf, (void)n; }
void dist_group_allreduce_max_f32(tsr_group *g, float *buf, size_t n) { (void)g, (void)buf, (void)n; }
void dist_group_allreduce_min_int(tsr_group *g, int *buf, size_t n) { (void)g, (void)buf, (void)n; }
void dist_group_barrier(tsr_group *g) { (void)g; }
void dist_group_allgatherv_f32(tsr_group *g, const float *mine, float *all, const int *counts,
                               const int *displs) {
    (void)g;
    memmove(all + displs[0], mine, (size_t)counts[0] * sizeof(float));
}
void *dist_group_iallgatherv_f32(tsr_group *g, const float *mine, float *all, const int *counts,
                                 const int *displs) {
    dist_group_allgatherv_f32(g, mine, all, counts, displs);
    return NULL;
}
void dist_wait(void *request) { (void)request; }
void dist_group_allreduce_sum_i64(tsr_group *g, int64_t *buf, size_t n) { (void)g, (void)buf, (void)n; }
void *dist_group_ring_shift(tsr_group *g, const void *send, void *recv, size_t bytes) {
    (void)g;
    memmove(recv, send, bytes);
    return NULL;
}
void dist_group_sendrecv(tsr_group *g, const void *send, int to, void *recv, int from,
                         size_t bytes) {
    (void)g;
    if (to >= 0 && from >= 0) memmove(recv, send, bytes);
}
/* (a world of one has no other rank to send to: a pipeline needs two ranks or more) */
void *dist_group_isend(tsr_group *g, const void *buf, size_t bytes, int to, int tag) {
    (void)g, (void)buf, (void)bytes, (void)to, (void)tag;
    tsr_die(TSR_EXIT_INTERNAL, "dist: a point-to-point send in a world of one");
}
void *dist_group_irecv(tsr_group *g, void *buf, size_t bytes, int from, int tag) {
    (void)g, (void)buf, (void)bytes, (void)from, (void)tag;
    tsr_die(TSR_EXIT_INTERNAL, "dist: a point-to-point receive in a world of one");
}
int dist_test(void *request) {
    (void)request;
    return 1;
}
void dist_group_reduce_scatter_f32(tsr_group *g, const float *send, float *recv, const int *counts) {
    (void)g;
    memmove(recv, send, (size_t)counts[0] * sizeof(float));
}
void dist_group_alltoallv(tsr_group *g, const void *send, const size_t *scounts,
                          const size_t *sdispls, void *recv, const size_t *rcounts,
                          const size_t *rdispls, size_t elem) {
    (void)g, (void)rcounts;
    memmove((char *)recv + rdispls[0] * elem, (const char *)send + sdispls[0] * elem,
            scounts[0] * elem);
}
void dist_group_bcast_f32(tsr_group *g, float *buf, size_t n, int root) {
    (void)g, (void)buf, (void)n, (void)root;
}
void dist_group_bcast(tsr_group *g, void *buf, size_t bytes, int root) {
    (void)g, (void)buf, (void)bytes, (void)root;
}
void dist_group_allgather(tsr_group *g, const void *mine, void *all, size_t bytes) {
    (void)g;
    memmove(all, mine, bytes);
}
void dist_abort(int code) {
    tsr_kill_child_groups();
    exit(code);
}
void dist_version(char *buf, size_t n) { snprintf(buf, n, "no MPI (NO_MPI=1 build)"); }

#endif

void dist_view_sum_f64(const tsr_dist *d, double *buf, size_t n) {
    if (d->view) dist_group_allreduce_sum_f64(d->view, buf, n);
    else dist_allreduce_sum_f64(buf, n);
}

void dist_view_sum_i64(const tsr_dist *d, int64_t *buf, size_t n) {
    if (d->view) dist_group_allreduce_sum_i64(d->view, buf, n);
    else dist_allreduce_sum_i64(buf, n);
}

void dist_view_max_f64(const tsr_dist *d, double *buf, size_t n) {
    if (d->view) dist_group_allreduce_max_f64(d->view, buf, n);
    else dist_allreduce_max_f64(buf, n);
}

int dist_launched(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"};
    for (size_t k = 0; k < sizeof vars / sizeof *vars; k++)
        if (getenv(vars[k])) return 1;
    return 0;
}

void dist_node_names(const tsr_dist *d, char (*nodes)[64]) {
    char mine[64];
    const char *node = getenv("SLURMD_NODENAME"); /* the Slurm name when run by srun */
    snprintf(mine, sizeof mine, "%s", node && *node ? node : d->host);
    dist_allgather(mine, nodes, sizeof mine);
}
