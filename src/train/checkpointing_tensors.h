/* checkpointing_tensors.h — which tensors a checkpoint of this trainer holds and which slice of
 * each this rank writes or reads: the layout the save (checkpointing_save.c) and the loads
 * (checkpointing_resume.c: resume, --init-from, rollback) share. Internal to the checkpointing
 * files; the trainer calls checkpointing.h.
 *
 * Tensors (docs/checkpoint-format.md): model/<name> (fp32 weights), optim/m/<name>, optim/v/<name>
 * (AdamW moments), each at its global shape; LoRA's adapters instead of the base. Rank r writes
 * and reads the intersection of each tensor with its part of the flat parameter buffer
 * (trainer.h), so every rank does 1/W of the I/O in DDP and ZeRO-1 alike, and a checkpoint loads
 * at any world size. */
#ifndef TSR_CHECKPOINTING_TENSORS_H
#define TSR_CHECKPOINTING_TENSORS_H

#include "ckpt.h"
#include "train/train_state.h"

/* The three sets of a parameter: its weights, its first and second moments. */
enum { CKIO_MODEL = 0, CKIO_M, CKIO_V, CKIO_SETS };
/* The most tensors a rank's checkpoint names (ckio_tensors' ts, names). */
#define CKIO_MAX_TENSORS (CKIO_SETS * TSR_P_COUNT)

/* The flat range [lo, hi) this rank reads and writes, and where each set's floats of it are
 * (base[set], its first float at flat index origin[set]): DDP and ZeRO-1 ranks use their part of
 * the trainer's partition, straight from the model and the moments; ZeRO-3 / HSDP ranks of the
 * first group their part of the group's partition, through t->part.ckio (filled from the shards
 * before a save, moved into them after a load); the other groups none. */
void ckio_layout(tsr_trainer *t, int with_optim, size_t *lo, size_t *hi, float **base,
                 size_t *origin);
/* Tensor parallelism: where set's held range of the split layout (this rank's part over its
 * tensor_data group, part_displs) lies: in the weights, or in the owned moments */
float *ckio_tp_held(tsr_trainer *t, int set);
/* Frees the I/O parts ckio_layout and the expert tensors allocated (t->part.ckio, ep_io,
 * tp_gpart). */
void ckio_release(tsr_trainer *t);
/* parallel.expert: this rank writes and reads the expert tensors (the first EP group, world ranks
 * 0 .. EP - 1, rank j its part: model_ep.h; under tensor parallelism that of tensor rank 0); the
 * other ranks name them with empty ranges. */
int ckio_ep_writer(const tsr_trainer *t);
/* parallel.expert: this rank takes part in the experts' exchange with the checkpoint's parts
 * (ep_to_part, ep_from_part): the first EP group's ranks (expert_data rank 0) of every tensor
 * rank; the writers without tensor parallelism */
int ckio_ep_io(const tsr_trainer *t);
/* The experts' store of a set (weights, m, v). */
float *ckio_ep_store(tsr_trainer *t, int set);
/* A set's name prefix: the weights' ("model/", LoRA's "lora/"), or the optimizer slot's state set
 * (optim/optim.h: "optim/m/", "optim/v/"; LoRA's "optim/m/lora/", ...). */
void ckio_set_prefix(char *out, size_t n, const tsr_optim_config *o, int set, int lora);
/* c: parameter p of set `set` as a checkpoint tensor: its name (written into name, 64 bytes; the
 * optimizer's sets named by its slot, optim/optim.h) and its global shape; no data yet
 * (lo = hi = 0, data NULL). */
void ckio_param_tensor(ckpt_tensor *c, char *name, const tsr_optim_config *o, int set,
                       const tsr_param_info *p);
/* LoRA (docs/lora.md): the adapters (and their moments with with_optim), rank 0's whole, the
 * others' empty. Returns the count. */
int ckio_lora_tensors(tsr_trainer *t, int with_optim, ckpt_tensor *ts, char (*names)[64]);
/* The base model's tensors (and its moments with with_optim) at this rank's slices. */
int ckio_base_tensors(tsr_trainer *t, int with_optim, ckpt_tensor *ts, char (*names)[64]);
/* Fills up to CKIO_MAX_TENSORS tensor descriptors; names are written into names (64 each): the
 * base model's tensors (and its moments with with_optim), or LoRA's adapters. */
int ckio_tensors(tsr_trainer *t, int with_optim, ckpt_tensor *ts, char (*names)[64]);

#endif
