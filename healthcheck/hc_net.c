/* hc_net.c — all-reduce bus bandwidth between node pairs, and the driver's collectives (see
 * hc_measure.h). The only healthcheck file that calls MPI directly: dist.h has no
 * sub-communicators or gathers yet. Every MPI call goes through HC_MPI_CHECK, which names the
 * call and aborts every rank with exit 2 (could not run). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "hc_fault.h"
#include "dist.h"
#include "hc_measure.h"

#ifndef TSR_NO_MPI
#include <mpi.h>

#define HC_MPI_CHECK(call)                                                                   \
    do {                                                                                     \
        int hc_rc_ = (call);                                                                 \
        if (hc_rc_ != MPI_SUCCESS) {                                                         \
            char hc_msg_[MPI_MAX_ERROR_STRING];                                              \
            int hc_len_ = 0;                                                                 \
            MPI_Error_string(hc_rc_, hc_msg_, &hc_len_);                                     \
            tsr_die(HC_EXIT_CANNOT_RUN, "%s:%d: %s failed: %s", __FILE__, __LINE__, #call,  \
                    hc_msg_);                                                                \
        }                                                                                    \
    } while (0)

/* One round: all-reduce within the group of this rank's color; returns busbw in GB/s. */
static double round_busbw(int color, int rank, size_t count, int iters, unsigned faults,
                          float *send, float *recv, int *group_size, int *partner) {
    MPI_Comm g;
    HC_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, rank, &g));
    int n = 0, me = 0;
    HC_MPI_CHECK(MPI_Comm_size(g, &n));
    HC_MPI_CHECK(MPI_Comm_rank(g, &me));
    int other = me == 0 ? 1 : 0, world_of_other = -1;
    MPI_Group gg, wg;
    HC_MPI_CHECK(MPI_Comm_group(g, &gg));
    HC_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    HC_MPI_CHECK(MPI_Group_translate_ranks(gg, 1, &other, wg, &world_of_other));
    MPI_Group_free(&gg);
    MPI_Group_free(&wg);
    *group_size = n;
    *partner = world_of_other;
    /* inputs: small integers, so the float sum is exact and checkable */
    for (size_t i = 0; i < count; i++) send[i] = (float)((rank + (int)(i % 7)) % 5);
    double last = 0; /* a warm-up all-reduce's time: the low_busbw fault sleeps 99x it */
    for (int w = 0; w < 2; w++) {
        double c0 = tsr_now();
        HC_MPI_CHECK(MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, g));
        last = tsr_now() - c0;
    }
    double *t = malloc((size_t)iters * sizeof *t);
    if (!t) tsr_die(HC_EXIT_CANNOT_RUN, "all-reduce: out of memory");
    for (int it = 0; it < iters; it++) {
        HC_MPI_CHECK(MPI_Barrier(g));
        double c0 = tsr_now();
        if (HC_FAULT(faults, HC_FAULT_LOW_BUSBW)) {
            double s = 99 * last;
            struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
            nanosleep(&ts, NULL);
        }
        HC_MPI_CHECK(MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, g));
        t[it] = tsr_now() - c0;
    }
    /* an iteration takes as long as its slowest member; keep the best iteration, so a healthy
     * node that shares its cores with other jobs is not judged by its preempted iterations */
    HC_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t, iters, MPI_DOUBLE, MPI_MAX, g));
    double best = t[0];
    for (int it = 1; it < iters; it++) best = t[it] < best ? t[it] : best;
    free(t);
    /* expected sum of the group's inputs, element by element */
    int *members = malloc((size_t)n * sizeof *members), *idx = malloc((size_t)n * sizeof *idx);
    if (!members || !idx) tsr_die(HC_EXIT_CANNOT_RUN, "all-reduce: out of memory");
    for (int k = 0; k < n; k++) idx[k] = k;
    HC_MPI_CHECK(MPI_Comm_group(g, &gg));
    HC_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    HC_MPI_CHECK(MPI_Group_translate_ranks(gg, n, idx, wg, members));
    MPI_Group_free(&gg);
    MPI_Group_free(&wg);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
        int want = 0;
        for (int k = 0; k < n; k++) want += (members[k] + (int)(i % 7)) % 5;
        bad += recv[i] != (float)want;
    }
    free(members);
    free(idx);
    MPI_Comm_free(&g);
    if (bad) {
        tsr_warn("all-reduce with rank %d: %zu of %zu elements wrong: bus bandwidth counted as 0",
                 world_of_other, bad, count);
        return 0.0;
    }
    double algbw = (double)count * sizeof(float) / best / 1e9;
    return algbw * 2.0 * (n - 1) / n;
}

void hc_net_allreduce(int mib, int iters, unsigned faults, int rank, int world, hc_facts *f) {
    f->n_rounds = 0;
    if (world < 2) return;
    size_t count = (size_t)mib * 1024 * 1024 / sizeof(float);
    float *send = malloc(count * sizeof *send), *recv = malloc(count * sizeof *recv);
    if (!send || !recv) tsr_die(HC_EXIT_CANNOT_RUN, "all-reduce: cannot allocate 2 x %d MiB", mib);
    int pairs = world / 2, half = world / 2;
    int colors[2] = {rank / 2 < pairs ? rank / 2 : pairs - 1, rank % half};
    int rounds = world >= 4 ? 2 : 1;
    double best = 0;
    for (int r = 0; r < rounds; r++) {
        f->busbw_round[r] = round_busbw(colors[r], rank, count, iters, faults, send, recv,
                                        &f->group_size[r], &f->partner[r]);
        if (f->busbw_round[r] > best) best = f->busbw_round[r];
    }
    f->n_rounds = rounds;
    hc_fact_set(f, HC_ALLREDUCE, best);
    free(send);
    free(recv);
}

/* Run by slurmd (prolog, HealthCheckProgram) the checker has no MPI launcher and never initialises
 * MPI (hc_main.c): then it is a world of one, like the NO_MPI build. */
void hc_net_gather(const void *mine, void *all, size_t bytes) {
    if (!dist_is_initialized()) {
        memcpy(all, mine, bytes);
        return;
    }
    HC_MPI_CHECK(MPI_Gather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD));
}

int hc_net_max(int v) {
    if (!dist_is_initialized()) return v;
    HC_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return v;
}

#else /* TSR_NO_MPI: a world of one; no partner to measure with */

void hc_net_allreduce(int mib, int iters, unsigned faults, int rank, int world, hc_facts *f) {
    (void)mib, (void)iters, (void)faults, (void)rank, (void)world;
    f->n_rounds = 0;
}
void hc_net_gather(const void *mine, void *all, size_t bytes) { memcpy(all, mine, bytes); }
int hc_net_max(int v) { return v; }

#endif
