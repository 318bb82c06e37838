/* mesh.c — the rank mesh (mesh.h): each group's split computed once from the config and the
 * world, and the only dist_group_split calls of the trainer. */
#include "mesh/mesh.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

int mesh_shard_size(const tsr_config *cfg, int world, int local_world) {
    if (cfg->sharding != TSR_SHARD_HSDP) return world;
    int G = cfg->replica_group > 0 ? (int)cfg->replica_group : local_world;
    return G >= 1 && world % G == 0 ? G : 0;
}

/* The groups of n over the Wt ranks of this rank's tensor_data group (its index q there, t its
 * tensor rank of T): blocks of n consecutive ranks (lo: q / n) and the ranks of the same index in
 * every block (hi: q % n), in order; each color made distinct for every tensor rank t. */
static void set_pair(tsr_mesh *me, tsr_mesh_id lo, tsr_mesh_id hi, int q, int Wt, int n) {
    const int T = me->T, t = me->group[TSR_MESH_WORLD].rank % T;
    me->group[lo] = (tsr_mesh_group){.name = me->group[lo].name, .on = 1, .color = q / n * T + t,
                                     .key = q % n, .rank = q % n, .size = n};
    me->group[hi] = (tsr_mesh_group){.name = me->group[hi].name, .on = 1, .color = q % n * T + t,
                                     .key = q / n, .rank = q / n, .size = Wt / n};
}

/* parallel.tensor = T > 1: the tensor group (T consecutive ranks), the tensor_data group (the
 * ranks of the same tensor rank), and, with fewer key/value heads KVH than T, the tensor_kv
 * groups of T / KVH consecutive ranks inside a tensor group */
static void tensor_groups(tsr_mesh *me, const tsr_config *cfg, int r, int W) {
    const int T = me->T, t = r % T, q = r / T;
    me->group[TSR_MESH_TENSOR] = (tsr_mesh_group){.name = "tensor", .on = 1, .color = q,
                                                  .key = t, .rank = t, .size = T};
    me->group[TSR_MESH_TENSOR_DATA] = (tsr_mesh_group){.name = "tensor_data", .on = 1,
                                                       .color = t, .key = q, .rank = q,
                                                       .size = W / T};
    tsr_model_dims d;
    const char *key;
    char why[400];
    if (config_model_dims(&cfg->model, &d, &key, why, sizeof why) != 0 || d.KVH >= T ||
        T % d.KVH != 0)
        return;
    const int R = T / d.KVH; /* the ranks holding one key/value head */
    me->group[TSR_MESH_TENSOR_KV] = (tsr_mesh_group){.name = "tensor_kv", .on = 1,
                                                     .color = q * d.KVH + t / R, .key = t % R,
                                                     .rank = t % R, .size = R};
}

/* parallel.pipeline = P > 1: the pipeline group (the P ranks of one place in each stage) and the
 * stage (its Wp consecutive ranks); every other group (but the world) made distinct per stage p:
 * each was formed within the stage's ranks */
static void pipeline_groups(tsr_mesh *me, int p, int rs, int Wp) {
    for (int i = TSR_MESH_WORLD + 1; i < TSR_MESH_N_GROUPS; i++)
        if (me->group[i].on) me->group[i].color = me->group[i].color * me->P + p;
    me->group[TSR_MESH_PIPELINE] = (tsr_mesh_group){.name = "pipeline", .on = 1, .color = rs,
                                                    .key = p, .rank = p, .size = me->P};
    me->group[TSR_MESH_STAGE] = (tsr_mesh_group){.name = "stage", .on = 1, .color = p,
                                                 .key = rs, .rank = rs, .size = Wp};
}

/* the groups that are on and their numbers (no communication): formed over the Wp = W / P ranks
 * of this rank's stage (its place rs there), then (P > 1) the pipeline's own */
static void plan_groups(tsr_mesh *me, const tsr_config *cfg, const tsr_dist *world) {
    static const char *const names[TSR_MESH_N_GROUPS] = {
        "world", "context", "data", "expert", "expert_data", "shard", "replica",
        "tensor", "tensor_data", "tensor_kv", "pipeline", "stage"};
    for (int i = 0; i < TSR_MESH_N_GROUPS; i++)
        me->group[i] = (tsr_mesh_group){.name = names[i], .size = 1};
    me->group[TSR_MESH_WORLD] = (tsr_mesh_group){.name = names[TSR_MESH_WORLD], .on = 1,
                                                 .color = 0, .key = world->rank,
                                                 .rank = world->rank, .size = world->world};
    me->P = cfg->pipeline > 1 ? (int)cfg->pipeline : 1;
    const int W = world->world / me->P, r = world->rank % W;
    me->T = cfg->tensor > 1 ? (int)cfg->tensor : 1;
    const int Wt = W / me->T, q = r / me->T;
    if (me->T > 1) tensor_groups(me, cfg, r, W);
    me->N = cfg->context > 1 ? (int)cfg->context : 1;
    me->D = Wt / me->N;
    if (me->N > 1) set_pair(me, TSR_MESH_CONTEXT, TSR_MESH_DATA, q, Wt, me->N);
    me->EP = cfg->expert > 1 && cfg->model.moe_experts > 0 ? (int)cfg->expert : 1;
    if (me->EP > 1) set_pair(me, TSR_MESH_EXPERT, TSR_MESH_EXPERT_DATA, q, Wt, me->EP);
    const int sharded = cfg->sharding == TSR_SHARD_ZERO3 || cfg->sharding == TSR_SHARD_HSDP ||
                        (cfg->sharding == TSR_SHARD_ZERO1 && cfg->device == TSR_DEVICE_CUDA);
    const int G = sharded ? mesh_shard_size(cfg, Wt, world->local_world / me->T) : 0;
    if (G > 0) {
        me->G = G, me->R = Wt / G;
        set_pair(me, TSR_MESH_SHARD, TSR_MESH_REPLICA, q, Wt, G);
    }
    if (me->P > 1) pipeline_groups(me, world->rank / W, r, W);
}

void mesh_build(tsr_mesh *me, const tsr_config *cfg, const tsr_dist *world, int plan) {
    memset(me, 0, sizeof *me);
    plan_groups(me, cfg, world);
    for (int i = TSR_MESH_WORLD + 1; !plan && i < TSR_MESH_N_GROUPS; i++)
        if (me->group[i].on) me->group[i].cpu = mesh_group_open(&me->group[i]);
    /* (tensor and pipeline parallelism's checkpoint exchange runs over the world) */
    if (!plan && (me->T > 1 || me->P > 1))
        me->group[TSR_MESH_WORLD].cpu = mesh_group_open(&me->group[TSR_MESH_WORLD]);
    me->data = *world;
    me->data.rank = mesh_data_rank(me, world->rank), me->data.world = me->D;
    /* (NULL when P T N = 1: the world's sums) */
    me->data.view = me->N > 1   ? me->group[TSR_MESH_DATA].cpu
                    : me->T > 1 ? me->group[TSR_MESH_TENSOR_DATA].cpu
                                : me->group[TSR_MESH_STAGE].cpu;
}

int mesh_data_rank(const tsr_mesh *me, int r) {
    return r % (me->group[TSR_MESH_WORLD].size / me->P) / (me->T * me->N);
}

/* whether this rank's tensor group has ranks on another host than this one's (collective over
 * the group; 0 in a group of one) */
static int tensor_hosts_differ(const tsr_mesh *me, const tsr_dist *world) {
    const tsr_mesh_group *g = &me->group[TSR_MESH_TENSOR];
    if (!g->cpu) return 0;
    char *hosts = tsr_malloc((size_t)g->size * sizeof world->host);
    dist_group_allgather(g->cpu, world->host, hosts, sizeof world->host);
    int differ = 0;
    for (int k = 0; k < g->size; k++)
        differ |= strncmp(hosts + (size_t)k * sizeof world->host, world->host,
                          sizeof world->host) != 0;
    free(hosts);
    return differ;
}

int mesh_check_tensor(const tsr_mesh *me, const tsr_config *cfg, const tsr_dist *world,
                      int plan) {
    if (me->T <= 1 || cfg->tensor_across_nodes) return 0;
    const int per_node = world->local_world > 0 ? world->local_world : 1;
    int bad = per_node % me->T != 0;
    if (!plan) {
        bad |= tensor_hosts_differ(me, world);
        dist_allreduce_max_int(&bad, 1);
    }
    if (!bad) return 0;
    int fits = me->T - 1; /* the largest group size below T that divides a node's ranks */
    while (fits > 1 && per_node % fits != 0) fits--;
    if (world->rank == 0)
        tsr_error("parallel.tensor = %d: a tensor group of %d consecutive ranks would span nodes "
                  "(%d rank%s on this node%s); its collectives, several per layer, would cross the "
                  "network: choose a parallel.tensor that divides the ranks per node (such as "
                  "%d), start the ranks in blocks per node (srun's default), or set "
                  "parallel.tensor_across_nodes = true", me->T, me->T, per_node,
                  per_node == 1 ? "" : "s",
                  plan ? ", from --plan RANKS/PER_NODE" : " or its ranks on several hosts",
                  fits);
    return TSR_EXIT_USAGE;
}

void mesh_free(tsr_mesh *me) {
    for (int i = 0; i < TSR_MESH_N_GROUPS; i++) dist_group_free(me->group[i].cpu);
    memset(me, 0, sizeof *me);
}

const tsr_mesh_group *mesh_group(const tsr_mesh *me, tsr_mesh_id id) { return &me->group[id]; }

tsr_group *mesh_group_open(const tsr_mesh_group *g) { return dist_group_split(g->color, g->key); }

int mesh_member_position(int members, int mstep, int r) { return r / mstep % members; }
int mesh_member_group(int members, int mstep, int r) { return mstep == 1 ? r / members : r % mstep; }

tsr_group *mesh_position_open(int members, int mstep, int r) {
    return dist_group_split(mesh_member_position(members, mstep, r),
                            mesh_member_group(members, mstep, r));
}
