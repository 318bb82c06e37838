/* hc_gpu_nccl.c — NCCL all-reduce bus bandwidth (see hc_gpu.h): among this node's GPUs (one
 * process, ncclCommInitAll) and, bootstrapped by the executable over MPI, among the GPUs of a
 * group of nodes (ncclCommInitRank, one rank per GPU).
 *
 * Per GPU: float send and recv buffers of allreduce_mib MiB; sum all-reduce, 2 warm-ups then
 * allreduce_iters timed ones, each timed on the host from launch to every stream done (so an
 * iteration lasts as long as the slowest GPU, and in a group as its slowest node: the executable
 * takes the maximum over the nodes). nccl-tests' convention (its doc/PERFORMANCE.md):
 * algbw = bytes / t, busbw = algbw x 2 (n - 1) / n, n = GPUs in the communicator, t = the best
 * iteration. Inputs x[i] = (rank + i mod 7) mod 5 make every sum a small exact integer, checked
 * element by element on the device after the last iteration.
 */
#include <stdlib.h>
#include <string.h>

#include "hc_gpu_impl.h"
#include "hc_gpu_kernels.h"

_Static_assert(sizeof(ncclUniqueId) == HC_NCCL_ID_BYTES, "hc_gpu.h's id size is NCCL's");

typedef struct ar_state {
    int nd;                    /* this process's GPUs: CUDA devices 0 .. nd-1 */
    size_t count;              /* floats per buffer */
    cudaStream_t s[HC_MAX_GPUS];
    float *send[HC_MAX_GPUS], *recv[HC_MAX_GPUS];
    unsigned long long *bad[HC_MAX_GPUS];
} ar_state;

/* One all-reduce on every local GPU, waited for. Returns 0 or 2 (err set). */
static int allreduce_once(ar_state *a, ncclComm_t *comms, char *err, size_t ne) {
    NCCL_TRY(err, ne, ncclGroupStart());
    for (int d = 0; d < a->nd; d++)
        NCCL_TRY(err, ne, ncclAllReduce(a->send[d], a->recv[d], a->count, ncclFloat, ncclSum, comms[d], a->s[d]));
    NCCL_TRY(err, ne, ncclGroupEnd());
    for (int d = 0; d < a->nd; d++) GPU_TRY(err, ne, cudaStreamSynchronize(a->s[d]));
    return 0;
fail:
    return 2;
}

static void ar_free(ar_state *a) {
    for (int d = 0; d < a->nd; d++) { /* release: errors would only echo an earlier failure */
        if (cudaSetDevice(d) != cudaSuccess) continue;
        if (a->s[d]) (void)cudaStreamDestroy(a->s[d]);
        (void)cudaFree(a->send[d]), (void)cudaFree(a->recv[d]), (void)cudaFree(a->bad[d]);
    }
}

/* The timed all-reduces on comms (local GPU d is rank first + d of nranks). Returns 0 or 2. */
static int run_allreduce(const hc_gpu_job *job, ncclComm_t *comms, int first, int nranks, double *iter_s,
                         long long *wrong, char *err, size_t ne) {
    ar_state a;
    memset(&a, 0, sizeof a);
    a.nd = job->n_devices;
    a.count = (size_t)job->allreduce_mib * 1024 * 1024 / sizeof(float);
    float want[7];
    double last = 0;
    *wrong = 0;
    for (int k = 0; k < 7; k++) {
        want[k] = 0;
        for (int r = 0; r < nranks; r++) want[k] += (float)((r + k) % 5); /* < 2^24: exact */
    }
    for (int d = 0; d < a.nd; d++) {
        GPU_TRY(err, ne, cudaSetDevice(d));
        GPU_TRY(err, ne, cudaStreamCreateWithFlags(&a.s[d], cudaStreamNonBlocking));
        GPU_TRY(err, ne, cudaMalloc((void **)&a.send[d], a.count * sizeof(float)));
        GPU_TRY(err, ne, cudaMalloc((void **)&a.recv[d], a.count * sizeof(float)));
        GPU_TRY(err, ne, cudaMalloc((void **)&a.bad[d], sizeof(unsigned long long)));
        GPU_TRY(err, ne, cudaMemsetAsync(a.bad[d], 0, sizeof(unsigned long long), a.s[d]));
        GPU_TRY(err, ne, hck_fill_allreduce(a.send[d], a.count, first + d, a.s[d]));
        GPU_TRY(err, ne, cudaStreamSynchronize(a.s[d]));
    }
    for (int w = 0; w < 2; w++) { /* warm-up; the low_busbw fault sleeps 99x the last one's time */
        double t0 = gpu_now();
        if (allreduce_once(&a, comms, err, ne)) goto fail;
        last = gpu_now() - t0;
    }
    for (int i = 0; i < job->allreduce_iters; i++) {
        double t0 = gpu_now();
        if (HC_FAULT(job->faults, HC_FAULT_LOW_BUSBW)) gpu_sleep(99 * last);
        if (allreduce_once(&a, comms, err, ne)) goto fail;
        iter_s[i] = gpu_now() - t0;
    }
    for (int d = 0; d < a.nd; d++) {
        unsigned long long bad = 0;
        GPU_TRY(err, ne, cudaSetDevice(d));
        GPU_TRY(err, ne, hck_check_allreduce(a.recv[d], a.count, want, a.bad[d], a.s[d]));
        GPU_TRY(err, ne, cudaMemcpyAsync(&bad, a.bad[d], sizeof bad, cudaMemcpyDeviceToHost, a.s[d]));
        GPU_TRY(err, ne, cudaStreamSynchronize(a.s[d]));
        *wrong += (long long)bad;
    }
    ar_free(&a);
    return 0;
fail:
    ar_free(&a);
    return 2;
}

static double best_of(const double *t, int n) {
    double best = t[0];
    for (int i = 1; i < n; i++) best = t[i] < best ? t[i] : best;
    return best;
}

double gpu_nccl_node(const hc_gpu_job *job, char *err, size_t ne) {
    ncclComm_t comms[HC_MAX_GPUS] = {0};
    const int nd = job->n_devices;
    double *t = calloc((size_t)job->allreduce_iters, sizeof *t), busbw = 0;
    long long wrong = 0;
    if (!t) {
        gpu_note(err, ne, "NCCL all-reduce: out of host memory");
        return 0.0;
    }
    NCCL_TRY(err, ne, ncclCommInitAll(comms, nd, NULL)); /* NULL: devices 0 .. nd-1 */
    if (run_allreduce(job, comms, 0, nd, t, &wrong, err, ne)) goto fail;
    if (wrong) {
        gpu_note(err, ne, "NCCL all-reduce among %d GPUs: %lld elements wrong", nd, wrong);
        goto fail;
    }
    /* bus bandwidth (NCCL's convention); one GPU: the algorithm bandwidth (bytes / time) */
    busbw = (double)job->allreduce_mib * 1024 * 1024 / best_of(t, job->allreduce_iters) / 1e9 *
            (nd > 1 ? 2.0 * (nd - 1) / nd : 1.0);
fail:
    for (int d = 0; d < nd; d++)
        if (comms[d]) (void)ncclCommDestroy(comms[d]);
    free(t);
    return busbw;
}

int gpu_nccl_id(unsigned char id[HC_NCCL_ID_BYTES], char *err, size_t ne) {
    ncclUniqueId u;
    NCCL_TRY(err, ne, ncclGetUniqueId(&u));
    memcpy(id, &u, sizeof u);
    return 0;
fail:
    return 2;
}

int gpu_nccl_group(const hc_gpu_job *job, const unsigned char id[HC_NCCL_ID_BYTES], int first_rank,
                   int nranks, double *iter_s, long long *wrong, char *err, size_t ne) {
    ncclComm_t comms[HC_MAX_GPUS] = {0};
    ncclUniqueId u;
    int rc = 2, in_group = 0;
    memcpy(&u, id, sizeof u);
    /* one thread initialises several ranks: inside a group, or the first would wait for the rest */
    NCCL_TRY(err, ne, ncclGroupStart());
    in_group = 1;
    for (int d = 0; d < job->n_devices; d++) {
        GPU_TRY(err, ne, cudaSetDevice(d));
        NCCL_TRY(err, ne, ncclCommInitRank(&comms[d], nranks, u, first_rank + d));
    }
    in_group = 0;
    NCCL_TRY(err, ne, ncclGroupEnd());
    rc = run_allreduce(job, comms, first_rank, nranks, iter_s, wrong, err, ne);
fail:
    if (in_group) (void)ncclGroupEnd();
    for (int d = 0; d < job->n_devices; d++)
        if (comms[d]) (void)ncclCommDestroy(comms[d]);
    return rc;
}
