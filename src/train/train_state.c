/* train_state.c — the small questions asked of the trainer's state (train_state.h). */
#include "train/train_state.h"

#include <limits.h>
#include <stdlib.h>

#include "common.h"
#include "gpu/gpu_train.h"

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
