/* adamw.h — AdamW in the optimizer slot (optim/optim.h; docs/training.md "The update"): decoupled
 * weight decay as torch.optim.AdamW, through the backend's adamw_update, tensor by tensor so that
 * each gets its kind's decay (optim.decay_embeddings, decay_norms_biases). Also Muon's update of
 * the tensors that are not its matrices (optim/muon.h).
 */
#ifndef TSR_ADAMW_H
#define TSR_ADAMW_H

#include <stdint.h>

#include "config/config.h"
#include "model/model.h"
#include "optim/optim.h"

/* The weight decay of a tensor of this kind: optim.weight_decay, or 0 for embeddings without
 * optim.decay_embeddings and norms and biases without optim.decay_norms_biases. */
float adamw_decay(const tsr_optim_config *o, tsr_param_kind kind);
/* AdamW on part p (optim.h), leaving out the tensors `skip` answers 1 for (NULL: none; another
 * optimizer's, FLAT and SHARD parts only). */
void adamw_step_part(const tsr_optim *op, const optim_part *p, double lr, float gscale,
                     int64_t step, int (*skip)(const tsr_optim *op, int id));

#endif
