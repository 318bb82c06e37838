/* hc_net.c — all-reduce bus bandwidth between node pairs (MPI on CPUs; NCCL on GPUs, bootstrapped
 * here), and the driver's collectives (see hc_measure.h). The only healthcheck file that calls MPI
 * directly: dist.h has no sub-communicators or gathers yet. Every MPI call goes through
 * HC_MPI_CHECK, which names the call and aborts every rank with exit 2 (could not run). */
#include <stdio.h>
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

/* The partner groups (hc_measure.h): round 1 pairs (2k, 2k+1), the last rank of an odd world
 * joining the previous pair; round 2, with world >= 4, pairs (k, k + world/2). Returns the rounds. */
static int round_colors(int rank, int world, int colors[2]) {
    int pairs = world / 2, half = world / 2;
    colors[0] = rank / 2 < pairs ? rank / 2 : pairs - 1;
    colors[1] = rank % half;
    return world >= 4 ? 2 : 1;
}

void hc_net_allreduce(int mib, int iters, unsigned faults, int rank, int world, hc_facts *f) {
    f->n_rounds = 0;
    if (world < 2) return;
    size_t count = (size_t)mib * 1024 * 1024 / sizeof(float);
    float *send = malloc(count * sizeof *send), *recv = malloc(count * sizeof *recv);
    if (!send || !recv) tsr_die(HC_EXIT_CANNOT_RUN, "all-reduce: cannot allocate 2 x %d MiB", mib);
    int colors[2];
    int rounds = round_colors(rank, world, colors);
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

/* One GPU round: the nodes of this rank's color form one NCCL communicator of all their GPUs.
 * Returns busbw in GB/s (0 when a member has no GPU, NCCL failed anywhere, or a sum was wrong). */
static double gpu_round_busbw(const hc_gpu_api *api, const hc_gpu_job *mine, int color, int rank,
                              int *n_gpus, int *partner) {
    MPI_Comm g;
    HC_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, rank, &g));
    int n = 0, me = 0;
    HC_MPI_CHECK(MPI_Comm_size(g, &n));
    HC_MPI_CHECK(MPI_Comm_rank(g, &me));
    /* nodes of different GPU models judge by different config sections: measure with the
     * smallest message and count of the group, so every member makes the same calls */
    hc_gpu_job grp = *mine;
    const hc_gpu_job *job = &grp;
    HC_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &grp.allreduce_mib, 1, MPI_INT, MPI_MIN, g));
    HC_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &grp.allreduce_iters, 1, MPI_INT, MPI_MIN, g));
    int *ranks = malloc((size_t)n * sizeof *ranks), *gpus = malloc((size_t)n * sizeof *gpus);
    double *t = malloc((size_t)job->allreduce_iters * sizeof *t);
    if (!ranks || !gpus || !t) tsr_die(HC_EXIT_CANNOT_RUN, "NCCL pairs: out of memory");
    HC_MPI_CHECK(MPI_Allgather(&rank, 1, MPI_INT, ranks, 1, MPI_INT, g));
    HC_MPI_CHECK(MPI_Allgather(&job->n_devices, 1, MPI_INT, gpus, 1, MPI_INT, g));
    *partner = ranks[me == 0 ? 1 : 0];
    int first = 0, total = 0, empty = 0;
    for (int k = 0; k < n; k++) {
        if (k < me) first += gpus[k];
        total += gpus[k];
        empty |= gpus[k] == 0;
    }
    *n_gpus = total;
    char err[512] = "";
    /* the id travels with a status, so a node that could not make one stops the whole group */
    struct { int rc; unsigned char id[HC_NCCL_ID_BYTES]; } msg = {0, {0}};
    if (empty) { /* every member knows it from the allgather */
        snprintf(err, sizeof err, "a node of the group has no GPU");
        msg.rc = 1;
    } else if (me == 0) {
        msg.rc = api->nccl_id(msg.id, err, sizeof err);
    }
    HC_MPI_CHECK(MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, g));
    long long wrong = 0;
    int rc = msg.rc;
    for (int i = 0; i < job->allreduce_iters; i++) t[i] = 0;
    if (!rc) rc = api->nccl_group(job, msg.id, first, total, t, &wrong, err, sizeof err);
    /* an iteration lasts as long as its slowest node; any failure or wrong sum fails the group */
    long long bad[2] = {rc != 0, wrong};
    HC_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bad, 2, MPI_LONG_LONG, MPI_MAX, g));
    HC_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t, job->allreduce_iters, MPI_DOUBLE, MPI_MAX, g));
    HC_MPI_CHECK(MPI_Comm_free(&g));
    double best = t[0];
    for (int i = 1; i < job->allreduce_iters; i++) best = t[i] < best ? t[i] : best;
    free(ranks), free(gpus), free(t);
    if (bad[0] || bad[1]) {
        if (err[0]) tsr_warn("NCCL all-reduce with rank %d: %s", *partner, err);
        else if (bad[1]) tsr_warn("NCCL all-reduce with rank %d: %lld elements wrong", *partner, bad[1]);
        else tsr_warn("NCCL all-reduce with rank %d failed on a partner node (see its messages)", *partner);
        tsr_warn("NCCL all-reduce with rank %d: bus bandwidth counted as 0", *partner);
        return 0.0;
    }
    double algbw = (double)job->allreduce_mib * 1024 * 1024 / best / 1e9;
    return algbw * 2.0 * (total - 1) / total;
}

void hc_net_gpu_pairs(const hc_gpu_api *api, const hc_gpu_job *job, int rank, int world, hc_facts *f) {
    f->n_rounds = 0;
    if (world < 2) return;
    int colors[2];
    int rounds = round_colors(rank, world, colors);
    double best = 0;
    for (int r = 0; r < rounds; r++) {
        f->busbw_round[r] = gpu_round_busbw(api, job, colors[r], rank, &f->group_size[r], &f->partner[r]);
        if (f->busbw_round[r] > best) best = f->busbw_round[r];
    }
    f->n_rounds = rounds;
    hc_fact_set(f, HC_NCCL_PAIRS, best);
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
void hc_net_gpu_pairs(const hc_gpu_api *api, const hc_gpu_job *job, int rank, int world, hc_facts *f) {
    (void)api, (void)job, (void)rank, (void)world;
    f->n_rounds = 0;
}
void hc_net_gather(const void *mine, void *all, size_t bytes) { memcpy(all, mine, bytes); }
int hc_net_max(int v) { return v; }

#endif
