/* mesh.c — the rank mesh (mesh.h): each group's split computed once from the config and the
 * world, and the only dist_group_split calls of the trainer. */
#include "mesh/mesh.h"

#include <string.h>

int mesh_shard_size(const tsr_config *cfg, int world, int local_world) {
    if (cfg->sharding != TSR_SHARD_HSDP) return world;
    int G = cfg->replica_group > 0 ? (int)cfg->replica_group : local_world;
    return G >= 1 && world % G == 0 ? G : 0;
}

/* The groups of n: blocks of n consecutive world ranks (lo: color r / n) and the ranks of the same
 * index in every block (hi: color r % n), the world's order kept in both. */
static void set_pair(tsr_mesh *me, tsr_mesh_id lo, tsr_mesh_id hi, int r, int W, int n) {
    me->group[lo] = (tsr_mesh_group){.name = me->group[lo].name, .on = 1, .color = r / n,
                                     .key = r % n, .rank = r % n, .size = n};
    me->group[hi] = (tsr_mesh_group){.name = me->group[hi].name, .on = 1, .color = r % n,
                                     .key = r / n, .rank = r / n, .size = W / n};
}

/* the groups that are on and their numbers (no communication) */
static void plan_groups(tsr_mesh *me, const tsr_config *cfg, const tsr_dist *world) {
    static const char *const names[TSR_MESH_N_GROUPS] = {
        "world", "context", "data", "expert", "expert_data", "shard", "replica"};
    const int r = world->rank, W = world->world;
    for (int i = 0; i < TSR_MESH_N_GROUPS; i++)
        me->group[i] = (tsr_mesh_group){.name = names[i], .size = 1};
    me->group[TSR_MESH_WORLD] = (tsr_mesh_group){.name = names[TSR_MESH_WORLD], .on = 1,
                                                 .color = 0, .key = r, .rank = r, .size = W};
    me->N = cfg->context > 1 ? (int)cfg->context : 1;
    me->D = W / me->N;
    if (me->N > 1) set_pair(me, TSR_MESH_CONTEXT, TSR_MESH_DATA, r, W, me->N);
    me->EP = cfg->expert > 1 && cfg->model.moe_experts > 0 ? (int)cfg->expert : 1;
    if (me->EP > 1) set_pair(me, TSR_MESH_EXPERT, TSR_MESH_EXPERT_DATA, r, W, me->EP);
    const int sharded = cfg->sharding == TSR_SHARD_ZERO3 || cfg->sharding == TSR_SHARD_HSDP ||
                        (cfg->sharding == TSR_SHARD_ZERO1 && cfg->device == TSR_DEVICE_CUDA);
    const int G = sharded ? mesh_shard_size(cfg, W, world->local_world) : 0;
    if (G > 0) {
        me->G = G, me->R = W / G;
        set_pair(me, TSR_MESH_SHARD, TSR_MESH_REPLICA, r, W, G);
    }
}

void mesh_build(tsr_mesh *me, const tsr_config *cfg, const tsr_dist *world, int plan) {
    memset(me, 0, sizeof *me);
    plan_groups(me, cfg, world);
    for (int i = TSR_MESH_WORLD + 1; !plan && i < TSR_MESH_N_GROUPS; i++)
        if (me->group[i].on) me->group[i].cpu = mesh_group_open(&me->group[i]);
    me->data = *world;
    me->data.rank /= me->N, me->data.world = me->D;
    me->data.view = me->group[TSR_MESH_DATA].cpu; /* (NULL when N = 1: the world's sums) */
}

void mesh_free(tsr_mesh *me) {
    for (int i = 0; i < TSR_MESH_N_GROUPS; i++) dist_group_free(me->group[i].cpu);
    memset(me, 0, sizeof *me);
}

const tsr_mesh_group *mesh_group(const tsr_mesh *me, tsr_mesh_id id) { return &me->group[id]; }

tsr_group *mesh_group_open(const tsr_mesh_group *g) { return dist_group_split(g->color, g->key); }
