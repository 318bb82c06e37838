/* run.c — the questions the layers below the trainer ask of a run, over its view (run.h). */
#include "run/run.h"

#include <stdlib.h>

#include "ckpt.h"
#include "common.h"
#include "gpu/gpu_train.h"
#include "model/ckpt_model.h"

void run_lora_pass(const tsr_run *r, int64_t b) {
    if (!r->part->lora_on) return;
    lora_set_pass(&r->part->lora, 1, run_lora_key(r),
                  lora_pass_row0(r->mesh->data.rank, *r->per_rank, b, *r->T));
}

uint64_t run_lora_key(const tsr_run *r) {
    int64_t d = *r->step + r->data->data_offset;
    return tsr_rand_u64((uint64_t)r->cfg->seed, 0x64726F70ull /* "drop" */, (uint64_t)d);
}

void run_eval_scope(const tsr_run *r, int on) {
    tsr_train_part *p = r->part;
    if (p->tp_on && on) p->tp_sent_steps = p->tp.sent;
    else if (p->tp_on) p->tp.sent = p->tp_sent_steps;
    if (!p->ep_on) return;
    if (on) p->ep_sent_steps = p->ep.sent_bytes;
    else p->ep.sent_bytes = p->ep_sent_steps;
}

gpu_train_ctx *run_gpu(const tsr_run *r) {
    gpu_train_ctx *g = r->be->gpu;
    g->micro = *r->micro;
    if (r->part->lora_on) g->lora_key = run_lora_key(r);
    return g;
}

int run_resumed_config(const tsr_run *r, tsr_config *ck) {
    ckpt_peeked *pk = tsr_malloc(sizeof *pk);
    tsr_log_mute(1); /* (the resume read this metadata already and reported its faults) */
    int rc = ckpt_peek_meta(r->out->start_load.path, pk, 0) == 0 &&
                     ckpt_config_from_text(pk->path, pk->meta.config, NULL, 0, ck) == 0
                 ? 0 : -1;
    tsr_log_mute(0);
    free(pk);
    return rc;
}

int run_shard_group(const tsr_config *cfg, int world, int local_world, int *G) {
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
