/* train_state.c — the small questions asked of the trainer's state (train_state.h). */
#include "train/train_state.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "ckpt.h"
#include "common.h"
#include "gpu/gpu_train.h"
#include "model/ckpt_model.h"

int trainer_shard_group(const tsr_config *cfg, int world, int local_world, int *G) {
    *G = mesh_shard_size(cfg, world, local_world); /* (the mesh's rule: mesh/mesh.h) */
    if (*G == 0) {
        *G = cfg->replica_group > 0 ? (int)cfg->replica_group : local_world;
        tsr_error("parallel.replica_group = %lld%s: the %d ranks do not split into groups of %d "
                  "(hsdp shards within a group and replicates across groups): choose a divisor "
                  "of the rank count", (long long)cfg->replica_group,
                  cfg->replica_group > 0 ? "" : " (the ranks of one node)", world, *G);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

void trainer_eval_scope(tsr_trainer *t, int on) {
    if (!t->part.ep_on) return;
    if (on) t->part.ep_sent_steps = t->part.ep.sent_bytes;
    else t->part.ep.sent_bytes = t->part.ep_sent_steps;
}

void trainer_host_weights(tsr_trainer *t, int on) {
    if (t->part.ep_on) ep_full(&t->part.ep, on);
    if (on && t->part.fsdp_on) fsdp_params_changed(&t->part.fsdp);
}

int trainer_micro_at_most(const tsr_trainer *t, int64_t at_most) {
    int64_t b = at_most < t->per_rank ? at_most : t->per_rank;
    if (b > INT_MAX) b = INT_MAX;
    while (b > 1 && t->per_rank % b != 0) b--;
    return b < 1 ? 1 : (int)b;
}

int trainer_acts_B(const tsr_trainer *t) {
    return t->be.gpu ? gpu_train_acts_B(t->be.gpu) : t->model.acts.B;
}

/* LoRA's dropout in microbatch b of this rank's batch (model/model_lora.h): the key of the step's
 * data batch and the global row number of the microbatch's first row, so that a row's mask does
 * not depend on the rank count */
void trainer_lora_pass(tsr_trainer *t, int64_t b) {
    if (!t->part.lora_on) return;
    lora_set_pass(&t->part.lora, 1, trainer_lora_key(t),
                  lora_pass_row0(t->mesh.data.rank, t->per_rank, b, t->T));
}

uint64_t trainer_lora_key(const tsr_trainer *t) {
    int64_t d = t->step + t->data.data_offset;
    return tsr_rand_u64((uint64_t)t->cfg.seed, 0x64726F70ull /* "drop" */, (uint64_t)d);
}

int trainer_resumed_config(const tsr_trainer *t, tsr_config *ck) {
    ckpt_peeked *pk = tsr_malloc(sizeof *pk);
    tsr_log_mute(1); /* (the resume read this metadata already and reported its faults) */
    int rc = ckpt_peek_meta(t->out.start_load.path, pk, 0) == 0 &&
                     ckpt_config_from_text(pk->path, pk->meta.config, NULL, 0, ck) == 0
                 ? 0 : -1;
    tsr_log_mute(0);
    free(pk);
    return rc;
}

void trainer_node_names(const tsr_trainer *t, char (*nodes)[64]) {
    char mine[64];
    const char *node = getenv("SLURMD_NODENAME"); /* the Slurm name when run by srun */
    snprintf(mine, sizeof mine, "%s", node && *node ? node : t->dist.host);
    dist_allgather(mine, nodes, sizeof mine);
}
