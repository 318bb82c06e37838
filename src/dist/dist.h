/* dist.h — the only interface through which tessera touches MPI.
 *
 * Built against MPI normally; with NO_MPI=1 (single-process build) the same functions run a world
 * of one rank. Collectives are blocking and called by every rank in the same order.
 */
#ifndef TSR_DIST_H
#define TSR_DIST_H

#include <stddef.h>
#include <stdint.h>

struct tsr_group;

typedef struct tsr_dist {
    int rank, world;          /* in MPI_COMM_WORLD (a view: below) */
    int local_rank, local_world; /* among the ranks sharing this node */
    char host[64];
    /* NULL: the world. Else this is a view, the data dimension of a data x context mesh
     * (parallel.context, docs/parallelism.md; src/mesh/mesh.h): rank and world count data ranks,
     * and the dist_view_* sums run over this group, the world's ranks of the same context rank.
     * Code that splits work over data ranks and sums their results takes a tsr_dist and sums
     * with dist_view_*, so that a context group, whose ranks share their sequences and hold the
     * same sums, counts once. */
    struct tsr_group *view;
} tsr_dist;

/* Initialises MPI (if built with it) and fills d. A rank started by a launcher (dist_launched)
 * is first tied to it: the kernel SIGKILLs it when the launcher exits (PR_SET_PDEATHSIG). */
void dist_init(tsr_dist *d, int *argc, char ***argv);
/* A world of one without touching MPI: for a program not started by mpirun/srun (see
 * healthcheck/hc_main.c); dist_is_initialized() stays 0. The NO_MPI build's dist_init uses it. */
void dist_init_single(tsr_dist *d);
void dist_finalize(void);
/* The exit status every rank dies with when an MPI call fails (the call, file and line named):
 * TSR_EXIT_INTERNAL unless a program sets its own (tessera-healthcheck: 2, could not run). */
void dist_set_fail_code(int code);
/* Started by mpirun or srun --mpi=...? (an MPI launcher's variables are set). A program run by
 * slurmd (Prolog, HealthCheckProgram) or by hand is not, and OpenMPI's singleton MPI_Init then
 * aborts with exit 1 when it finds a job's Slurm variables but no PMI server: such programs use
 * dist_init_single instead (tessera-healthcheck, tessera eval). */
int dist_launched(void);
int dist_is_initialized(void);
/* 1 when any thread may call MPI while another does (dist_init asks for MPI_THREAD_MULTIPLE: the
 * host-staged GPU transport's communication thread, src/gpu/gpu_comm_staged.c, calls MPI beside
 * the main thread), 0 when the MPI library granted less; 1 without MPI (a world of one). */
int dist_thread_multiple(void);
/* This process's rank in the world and the world's size: 0 and 1 in the NO_MPI build and without
 * MPI_Init (dist_init_single). For code that has no tsr_dist at hand (checkpoint/). Like the
 * collectives, they use MPI whenever it is initialised, by dist_init or by the program itself. */
int dist_world_rank(void);
int dist_world_size(void);
/* In-place minima and maxima over all ranks. */
void dist_allreduce_min_int(int *buf, size_t n);
void dist_allreduce_max_int(int *buf, size_t n);
/* In-place sums over all ranks. */
void dist_allreduce_sum_f32(float *buf, size_t n);
void dist_allreduce_sum_f64(double *buf, size_t n);
void dist_allreduce_sum_i64(int64_t *buf, size_t n);
void dist_allreduce_max_f64(double *buf, size_t n);
/* ZeRO-1: recv (counts[rank]) = this rank's block of the element-wise sum of send (sum of counts)
 * over all ranks; blocks in rank order. Counts and offsets are size_t: a flat buffer of more than
 * 2^31 floats (a 7B model) works as long as each block is under 2^31 (MPI's int counts: one call
 * when everything fits an int, else one collective per rank's block). */
void dist_reduce_scatter_sum_f32(const float *send, float *recv, const size_t *counts);
/* In place: rank r's block buf[displs[r] .. + counts[r]) is sent to every rank. */
void dist_allgatherv_f32(float *buf, const size_t *counts, const size_t *displs);
/* all[r * bytes .. (r+1) * bytes) = rank r's `mine` (bytes each), on every rank */
void dist_allgather(const void *mine, void *all, size_t bytes);
/* Every rank's node, as Slurm names it when srun started the rank (SLURMD_NODENAME: what
 * ExcNodeList and scontrol take, though two test nodes may share a host), else its host name
 * (d->host); into nodes[world], on every rank. The watchdog's and the fingerprints' messages
 * (src/train/sdc.h) name ranks by it. Collective. */
void dist_node_names(const tsr_dist *d, char (*nodes)[64]);
/* The same on world rank root only (all: world * bytes there; unused elsewhere). */
void dist_gather(const void *mine, void *all, size_t bytes, int root);
void dist_barrier(void);

/* Groups of ranks (the rank mesh's, src/mesh/mesh.h: context, data, expert, sharding; the health
 * checker's node pairs, healthcheck/hc_net.c): a communicator over a subset of the world.
 * dist_group_split is collective over the world: ranks passing the same color form a group,
 * ranked by key. In tessera's programs only src/mesh/ calls it (tests/tools/test_mesh_only.sh):
 * everything else asks the mesh for a group by name. In the NO_MPI build (or without MPI_Init)
 * every group is this one rank. Counts and displacements are per group rank, in floats. */
typedef struct tsr_group tsr_group;
tsr_group *dist_group_split(int color, int key);
void dist_group_free(tsr_group *g);
int dist_group_rank(const tsr_group *g);
int dist_group_size(const tsr_group *g);
void dist_group_allreduce_sum_f32(tsr_group *g, float *buf, size_t n);
void dist_group_allreduce_sum_f64(tsr_group *g, double *buf, size_t n);
/* recv = the sum of send over the group (send is left as it is: a measurement repeats it) */
void dist_group_allreduce_sum_f32_from(tsr_group *g, const float *send, float *recv, size_t n);
void dist_group_allreduce_max_f64(tsr_group *g, double *buf, size_t n);
void dist_group_allreduce_max_f32(tsr_group *g, float *buf, size_t n);
void dist_group_allreduce_min_int(tsr_group *g, int *buf, size_t n);
void dist_group_barrier(tsr_group *g);
/* all[displs[r] .. + counts[r]) = rank r's mine (counts[r] floats), on every group rank; mine
 * may be all + displs[rank] (in place) */
void dist_group_allgatherv_f32(tsr_group *g, const float *mine, float *all, const int *counts,
                               const int *displs);
/* The same, started now and completed by dist_wait (prefetch); returns a handle (NULL = done). */
void *dist_group_iallgatherv_f32(tsr_group *g, const float *mine, float *all, const int *counts,
                                 const int *displs);
void dist_wait(void *request);
/* recv (counts[rank]) = this rank's block of the sum of send over the group; recv may be send
 * (in place: the block lands at its start) */
void dist_group_reduce_scatter_f32(tsr_group *g, const float *send, float *recv, const int *counts);
void dist_group_bcast_f32(tsr_group *g, float *buf, size_t n, int root);
/* Byte-wise variants (device = cuda: NCCL ids, and bf16 data in the CUDA emulator):
 * all[r * bytes .. + bytes) = group rank r's mine. */
void dist_group_bcast(tsr_group *g, void *buf, size_t bytes, int root);
void dist_group_allgather(tsr_group *g, const void *mine, void *all, size_t bytes);
/* All-to-all-v over the group of elements of elem bytes, counts and displacements in elements
 * (size_t): fsdp's fp32 pieces, the expert exchange's fp32 rows on the CPU and bf16 rows in the
 * CUDA emulator. MPI's int counts apply to runs of elements: the largest run that divides every
 * count and displacement (a row of C elements for the exchange), so counts may pass 2^31 elements
 * as long as each is under 2^31 such runs (else an internal error names the block). */
void dist_group_alltoallv(tsr_group *g, const void *send, const size_t *scounts,
                          const size_t *sdispls, void *recv, const size_t *rcounts,
                          const size_t *rdispls, size_t elem);
/* In-place sums (maxima) over the ranks of d: the world's, or a view's (tsr_dist.view) */
void dist_view_sum_f64(const tsr_dist *d, double *buf, size_t n);
void dist_view_sum_i64(const tsr_dist *d, int64_t *buf, size_t n);
void dist_view_max_f64(const tsr_dist *d, double *buf, size_t n);

/* The ring exchange of context parallelism (model/model_ring.c): sends `bytes` of send to group
 * rank (me + 1) mod size and receives as many from (me - 1) mod size into recv, started now
 * (non-blocking point-to-point); dist_wait completes it (send and recv are untouched until then).
 * A group of one copies. Returns the handle (NULL: done). */
void *dist_group_ring_shift(tsr_group *g, const void *send, void *recv, size_t bytes);
/* Blocking point-to-point in a group (the Gated DeltaNet state under context parallelism,
 * model/dn_ring.c): sends `bytes` of send to group rank `to` and receives as many from group
 * rank `from` into recv; to or from -1 skips that half. */
void dist_group_sendrecv(tsr_group *g, const void *send, int to, void *recv, int from,
                         size_t bytes);
void dist_group_allreduce_sum_i64(tsr_group *g, int64_t *buf, size_t n);
/* Non-blocking point-to-point in a group (pipeline parallelism's activations and their
 * gradients, src/train/pipeline_exec.c): `bytes` of buf sent to group rank `to`, or received
 * from group rank `from` into buf, under tag (0 .. 32767); started now, completed by dist_wait
 * (buf untouched until then) or by a dist_test that returns 1. A sender's messages of one tag
 * arrive in the order sent. Returns the handle. */
void *dist_group_isend(tsr_group *g, const void *buf, size_t bytes, int to, int tag);
void *dist_group_irecv(tsr_group *g, void *buf, size_t bytes, int from, int tag);
/* 1 when the operation of request has completed (the handle then freed; NULL: done), else 0:
 * a sender's progress without waiting */
int dist_test(void *request);

/* buf (bytes) of world rank root, on every rank */
void dist_bcast(void *buf, size_t bytes, int root);
_Noreturn void dist_abort(int code);
/* Library version string (compile-time vs run-time), for the banner. */
void dist_version(char *buf, size_t n);

#endif
