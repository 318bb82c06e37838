/* mesh.h — the rank mesh: every group of ranks a run uses, built from the config and the world
 * once (docs/parallelism.md "The rank mesh").
 *
 * World rank r of W, with N = parallel.context, EP = parallel.expert (a MoE model), G the sharding
 * group (mesh_shard_size), forms:
 *   context      the N consecutive ranks r / N that share a sequence (model/model_ring.h)
 *   data         the D = W / N ranks of the same r % N: the data dimension's sums (tsr_dist view)
 *   expert       the EP consecutive ranks r / EP that hold every expert once (model/model_ep.h)
 *   expert_data  the W / EP ranks of the same r % EP, which hold the same experts
 *   shard        the G consecutive ranks r / G that shard the state (model/fsdp.h)
 *   replica      the R = W / G ranks of the same r % G, which hold the same shard (hsdp)
 *   world        every rank (the GPU's ddp sums; MPI_COMM_WORLD itself on the CPU)
 * Each group is a descriptor: the (color, key) of this rank's split, its place and size, and the
 * CPU communicator the mesh split once (dist.h). Code that communicates over a group asks for it
 * by name (mesh_group) and never computes a color: this file is the only caller of
 * dist_group_split (tests/tools/test_mesh_only.sh). The GPU library opens its communicators from
 * the same descriptors (src/gpu/gpu_comm.h gpu_comm_open); a transport that needs an MPI
 * communicator of its own (the host-staged one calls MPI from a thread) asks mesh_group_open.
 * Checkpoints never depend on the mesh.
 */
#ifndef TSR_MESH_H
#define TSR_MESH_H

#include "config/config.h"
#include "dist/dist.h"

typedef enum tsr_mesh_id {
    TSR_MESH_WORLD = 0,
    TSR_MESH_CONTEXT,
    TSR_MESH_DATA,
    TSR_MESH_EXPERT,
    TSR_MESH_EXPERT_DATA,
    TSR_MESH_SHARD,
    TSR_MESH_REPLICA,
    TSR_MESH_N_GROUPS
} tsr_mesh_id;

typedef struct tsr_mesh_group {
    const char *name;            /* "context", "expert_data", ... */
    int on;                      /* the run has this group (mesh_build says when) */
    int color, key;              /* this rank's split: the ranks of one color, ordered by key */
    int rank, size;              /* this rank's place in the group, the group's ranks */
    tsr_group *cpu;              /* the CPU communicator; NULL when off, in a plan, and for the
                                  * world (dist.h's world collectives are its) */
} tsr_mesh_group;

typedef struct tsr_mesh {
    int N, D;                    /* ranks per context group, data ranks (W / N) */
    int EP;                      /* ranks per expert group (1: none) */
    int G, R;                    /* ranks per sharding group, replicas (W / G); 0 when off */
    /* The data dimension: the world itself when N = 1, else a view (rank / N of W / N ranks)
     * whose dist_view_* sums run over the data group. Code that splits the batch or an
     * evaluation over ranks, and sums what they computed, works on it: a context group, whose
     * ranks share their sequences and hold the same sums, counts once. */
    tsr_dist data;
    tsr_mesh_group group[TSR_MESH_N_GROUPS];
} tsr_mesh;

/* The sharding group's ranks: parallel.replica_group under hsdp (0: the ranks of one node,
 * local_world), else the world; 0 when that does not divide the world (the trainer reports it:
 * run_shard_group). */
int mesh_shard_size(const tsr_config *cfg, int world, int local_world);

/* Every group of the run from cfg and world (a world, not a view), collective over the world
 * unless plan: a plan (--dry-run, --plan RANKS) has no MPI world of its size and gets the
 * descriptors' numbers alone. On: context and data with parallel.context > 1; expert and
 * expert_data with parallel.expert > 1 in a MoE model; shard and replica under zero3 and hsdp,
 * and under zero1 with device = cuda (the GPU partitions zero1's state with the shard layout over
 * the world: src/gpu/gpu_shard.h); world always (no CPU communicator). mesh_free releases it. */
void mesh_build(tsr_mesh *me, const tsr_config *cfg, const tsr_dist *world, int plan);
void mesh_free(tsr_mesh *me);

/* The group named id (never NULL; ->on says whether the run has it). */
const tsr_mesh_group *mesh_group(const tsr_mesh *me, tsr_mesh_id id);

/* A new CPU communicator over g's ranks, for a user that must not share the mesh's (a GPU
 * transport: src/gpu/gpu_comm_*.c). Collective over the world: every rank opens the same group at
 * the same point. dist_group_free releases it. */
tsr_group *mesh_group_open(const tsr_mesh_group *g);

#endif
