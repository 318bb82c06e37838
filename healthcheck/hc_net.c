/* hc_net.c — all-reduce bus bandwidth between node pairs (MPI on CPUs; NCCL on GPUs, bootstrapped
 * here) through dist.h's groups (see hc_measure.h). A failed MPI call stops every rank with exit 2
 * (could not run: hc_main.c sets dist_set_fail_code). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "dist/dist.h"
#include "hc_fault.h"
#include "hc_measure.h"

/* The world ranks of the group's members, by group rank (n = the group's size); collective. */
static int *group_members(tsr_group *g, int rank) {
    int *members = malloc((size_t)dist_group_size(g) * sizeof *members);
    if (!members) tsr_die(HC_EXIT_CANNOT_RUN, "all-reduce: out of memory");
    dist_group_allgather(g, &rank, members, sizeof rank);
    return members;
}

/* The fastest of iters all-reduces of count floats from send into recv over g, each after a barrier;
 * an iteration lasts as long as its slowest member. The low_busbw fault sleeps 99x a warm-up's time
 * in every iteration. */
static double best_allreduce_s(tsr_group *g, size_t count, int iters, unsigned faults, const float *send,
                               float *recv) {
    double last = 0; /* a warm-up all-reduce's time: the low_busbw fault sleeps 99x it */
    for (int w = 0; w < 2; w++) {
        double c0 = tsr_now();
        dist_group_allreduce_sum_f32_from(g, send, recv, count);
        last = tsr_now() - c0;
    }
    double *t = malloc((size_t)iters * sizeof *t);
    if (!t) tsr_die(HC_EXIT_CANNOT_RUN, "all-reduce: out of memory");
    for (int it = 0; it < iters; it++) {
        dist_group_barrier(g);
        double c0 = tsr_now();
        if (HC_FAULT(faults, HC_FAULT_LOW_BUSBW)) {
            double s = 99 * last;
            struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
            nanosleep(&ts, NULL);
        }
        dist_group_allreduce_sum_f32_from(g, send, recv, count);
        t[it] = tsr_now() - c0;
    }
    /* keep the best iteration, so a healthy node that shares its cores with other jobs is not
     * judged by its preempted iterations */
    dist_group_allreduce_max_f64(g, t, (size_t)iters);
    double best = t[0];
    for (int it = 1; it < iters; it++) best = t[it] < best ? t[it] : best;
    free(t);
    return best;
}

/* One round: all-reduce within the group of this rank's color; returns busbw in GB/s. */
static double round_busbw(int color, int rank, size_t count, int iters, unsigned faults,
                          float *send, float *recv, int *group_size, int *partner) {
    tsr_group *g = dist_group_split(color, rank);
    int n = dist_group_size(g), me = dist_group_rank(g);
    int *members = group_members(g, rank);
    *group_size = n;
    *partner = members[me == 0 ? 1 : 0];
    /* inputs: small integers, so the float sum is exact and checkable */
    for (size_t i = 0; i < count; i++) send[i] = (float)((rank + (int)(i % 7)) % 5);
    double best = best_allreduce_s(g, count, iters, faults, send, recv);
    /* expected sum of the group's inputs, element by element */
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
        int want = 0;
        for (int k = 0; k < n; k++) want += (members[k] + (int)(i % 7)) % 5;
        bad += recv[i] != (float)want;
    }
    free(members);
    dist_group_free(g);
    if (bad) {
        tsr_warn("all-reduce with rank %d: %zu of %zu elements wrong: bus bandwidth counted as 0",
                 *partner, bad, count);
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
    tsr_group *g = dist_group_split(color, rank);
    int n = dist_group_size(g), me = dist_group_rank(g);
    /* nodes of different GPU models judge by different config sections: measure with the
     * smallest message and count of the group, so every member makes the same calls */
    hc_gpu_job grp = *mine;
    const hc_gpu_job *job = &grp;
    dist_group_allreduce_min_int(g, &grp.allreduce_mib, 1);
    dist_group_allreduce_min_int(g, &grp.allreduce_iters, 1);
    int *ranks = group_members(g, rank), *gpus = malloc((size_t)n * sizeof *gpus);
    double *t = malloc((size_t)job->allreduce_iters * sizeof *t);
    if (!gpus || !t) tsr_die(HC_EXIT_CANNOT_RUN, "NCCL pairs: out of memory");
    dist_group_allgather(g, &job->n_devices, gpus, sizeof *gpus);
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
    dist_group_bcast(g, &msg, sizeof msg, 0);
    long long wrong = 0;
    int rc = msg.rc;
    for (int i = 0; i < job->allreduce_iters; i++) t[i] = 0;
    if (!rc) rc = api->nccl_group(job, msg.id, first, total, t, &wrong, err, sizeof err);
    /* an iteration lasts as long as its slowest node; any failure or wrong sum fails the group
     * (counts of wrong elements are exact in a double) */
    double bad[2] = {rc != 0, (double)wrong};
    dist_group_allreduce_max_f64(g, bad, 2);
    dist_group_allreduce_max_f64(g, t, (size_t)job->allreduce_iters);
    dist_group_free(g);
    double best = t[0];
    for (int i = 1; i < job->allreduce_iters; i++) best = t[i] < best ? t[i] : best;
    free(ranks), free(gpus), free(t);
    if (bad[0] != 0 || bad[1] != 0) {
        if (err[0]) tsr_warn("NCCL all-reduce with rank %d: %s", *partner, err);
        else if (bad[1] != 0) tsr_warn("NCCL all-reduce with rank %d: %.0f elements wrong", *partner, bad[1]);
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
