/* mesh.h — the rank mesh: every group of ranks a run uses, built from the config and the world
 * once (docs/parallelism.md "The rank mesh").
 *
 * Pipeline outermost (parallel.pipeline = P, docs/pipeline.md): the W / P consecutive ranks
 * r / (W / P) = p are stage p's (its `stage` group), the P ranks of the same r mod (W / P) one
 * place in every stage (its `pipeline` group: the point-to-point sends of activations and their
 * gradients); every group below is formed within one stage's ranks, as over a world of W / P
 * (r below is r mod (W / P), W the stage's ranks). With P = 1 the stage is the world.
 * World rank r of W, with T = parallel.tensor, N = parallel.context, EP = parallel.expert (a MoE
 * model), G the sharding group (mesh_shard_size), forms (tensor innermost, Megatron's order: the
 * tensor groups' collectives, several per layer, stay among neighbouring ranks, within a node):
 *   tensor       the T consecutive ranks r / T that split each layer's matrices (model/model_tp.h)
 *   tensor_data  the W / T ranks of the same r % T, which hold the same split: they sum its
 *                gradients, and everything below is formed within them
 *   tensor_kv    the T / KVH consecutive ranks of a tensor group that hold the same key/value
 *                head, when the model has fewer of them (KVH) than T
 * and over the Wt = W / T ranks of one tensor_data group (its rank q = r / T), each group below
 * within one of them (its color the same for every r % T):
 *   context      the N consecutive ranks q / N that share a sequence (model/model_ring.h)
 *   data         the D = Wt / N ranks of the same q % N: the data dimension's sums (tsr_dist view)
 *   expert       the EP consecutive ranks q / EP that hold every expert once (model/model_ep.h)
 *   expert_data  the Wt / EP ranks of the same q % EP, which hold the same experts
 *   shard        the G consecutive ranks q / G that shard the state (model/fsdp.h)
 *   replica      the R = Wt / G ranks of the same q % G, which hold the same shard (hsdp)
 *   world        every rank (the GPU's ddp sums; MPI_COMM_WORLD itself on the CPU)
 *   pipeline     (P > 1) the P ranks of this place in each stage, in stage order
 *   stage        (P > 1) this stage's W / P ranks: with T = 1 the ranks that hold the same
 *                layers (their sums and parts: ddp, zero1), as tensor_data's under T > 1
 * With T = 1 every group is as it was before tensor parallelism (q = r).
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
    TSR_MESH_TENSOR,
    TSR_MESH_TENSOR_DATA,
    TSR_MESH_TENSOR_KV,
    TSR_MESH_PIPELINE,
    TSR_MESH_STAGE,
    TSR_MESH_N_GROUPS
} tsr_mesh_id;

typedef struct tsr_mesh_group {
    const char *name;            /* "context", "expert_data", ... */
    int on;                      /* the run has this group (mesh_build says when) */
    int color, key;              /* this rank's split: the ranks of one color, ordered by key */
    int rank, size;              /* this rank's place in the group, the group's ranks */
    tsr_group *cpu;              /* the CPU communicator; NULL when off, in a plan, and for the
                                  * world (dist.h's world collectives are its) but under tensor
                                  * parallelism (its checkpoint exchange, model/model_tp.h) */
} tsr_mesh_group;

typedef struct tsr_mesh {
    int P;                       /* stages' ranks of the pipeline (1: none) */
    int T;                       /* ranks per tensor group (1: none) */
    int N, D;                    /* ranks per context group, data ranks (W / (T N)) */
    int EP;                      /* ranks per expert group (1: none) */
    int G, R;                    /* ranks per sharding group, replicas (W / G); 0 when off */
    /* The data dimension: the world itself when T N = 1, else a view (rank / (T N) of
     * W / (T N) ranks) whose dist_view_* sums run over the data group (the tensor_data group when
     * N = 1). Code that splits the batch or an evaluation over ranks, and sums what they
     * computed, works on it: a tensor or context group, whose ranks share their sequences and
     * hold the same sums, counts once. */
    tsr_dist data;
    tsr_mesh_group group[TSR_MESH_N_GROUPS];
} tsr_mesh;

/* The sharding group's ranks: parallel.replica_group under hsdp (0: the ranks of one node,
 * local_world), else the world; 0 when that does not divide the world (the trainer reports it:
 * run_shard_group). world and local_world count the ranks of one tensor_data group (W / T,
 * and a node's ranks / T) under tensor parallelism. */
int mesh_shard_size(const tsr_config *cfg, int world, int local_world);

/* Every group of the run from cfg and world (a world, not a view), collective over the world
 * unless plan: a plan (--dry-run, --plan RANKS) has no MPI world of its size and gets the
 * descriptors' numbers alone. On: context and data with parallel.context > 1; expert and
 * expert_data with parallel.expert > 1 in a MoE model; shard and replica under zero3 and hsdp,
 * and under zero1 with device = cuda (the GPU partitions zero1's state with the shard layout over
 * the world: src/gpu/gpu_shard.h); world always (no CPU communicator). mesh_free releases it. */
void mesh_build(tsr_mesh *me, const tsr_config *cfg, const tsr_dist *world, int plan);
void mesh_free(tsr_mesh *me);

/* The data rank (0 .. D - 1) of world rank r: r mod (W / P) / (T N). */
int mesh_data_rank(const tsr_mesh *me, int r);

/* parallel.tensor's groups within a node (unless parallel.tensor_across_nodes): 0, or
 * TSR_EXIT_USAGE after rank 0 named the keys, when a tensor group's ranks are not all on one
 * host (a tensor group spans local_world's boundary, or its hosts differ). Collective over the
 * world unless plan (then the numbers alone: T must divide local_world). */
int mesh_check_tensor(const tsr_mesh *me, const tsr_config *cfg, const tsr_dist *world,
                      int plan);

/* The group named id (never NULL; ->on says whether the run has it). */
const tsr_mesh_group *mesh_group(const tsr_mesh *me, tsr_mesh_id id);

/* A new CPU communicator over g's ranks, for a user that must not share the mesh's (a GPU
 * transport: src/gpu/gpu_comm_*.c). Collective over the world: every rank opens the same group at
 * the same point. dist_group_free releases it. */
tsr_group *mesh_group_open(const tsr_mesh_group *g);

/* Replay's member groups (src/train/sdc_replay.c; docs/health.md "Deterministic replay"): the world
 * cut into groups of `members` ranks `mstep` apart (consecutive ranks when mstep = 1: a tensor,
 * context or expert group; a data pipeline's stages when mstep = a stage's ranks). Rank r's
 * position in its group and its group's index; and the communicator of the ranks at r's position,
 * one from each group, ordered by group (collective over the world, like mesh_group_open). */
int mesh_member_position(int members, int mstep, int r);
int mesh_member_group(int members, int mstep, int r);
tsr_group *mesh_position_open(int members, int mstep, int r);

#endif
