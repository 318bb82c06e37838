/* train_state.c — the small questions asked of the trainer's state (train_state.h). */
#include "train/train_state.h"

#include <limits.h>
#include <stdlib.h>

#include "common.h"
#include "gpu/gpu_train.h"
#include "train/pipeline.h"

/* the partition's counts and displacements as MPI's ints (a part fits one: check_int_counts) */
static int *int_parts(const tsr_trainer *t) {
    const int W = t->part.flat_world;
    int *v = tsr_malloc(2 * (size_t)W * sizeof *v);
    for (int r = 0; r < W; r++)
        v[r] = (int)t->part.part_counts[r], v[W + r] = (int)t->part.part_displs[r];
    return v;
}

void trainer_flat_allreduce(tsr_trainer *t, float *buf, size_t n) {
    if (t->part.flat) dist_group_allreduce_sum_f32(t->part.flat, buf, n);
    else if (t->dist.world > 1) dist_allreduce_sum_f32(buf, n);
}

void trainer_flat_reduce_scatter(tsr_trainer *t, const float *send, float *recv) {
    if (!t->part.flat) {
        dist_reduce_scatter_sum_f32(send, recv, t->part.part_counts);
        return;
    }
    int *v = int_parts(t);
    dist_group_reduce_scatter_f32(t->part.flat, send, recv, v);
    free(v);
}

void trainer_flat_allgather(tsr_trainer *t, float *buf) {
    if (!t->part.flat) {
        dist_allgatherv_f32(buf, t->part.part_counts, t->part.part_displs);
        return;
    }
    int *v = int_parts(t);
    const int W = t->part.flat_world;
    dist_group_allgatherv_f32(t->part.flat, buf + v[W + t->part.flat_rank], buf, v, v + W);
    free(v);
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

int trainer_split(const tsr_trainer *t) { return t->part.tp_on || t->part.pp_on; }

int trainer_acts_B(const tsr_trainer *t) {
    return t->be.gpu ? gpu_train_acts_B(t->be.gpu)
           : t->part.pp_on ? pipeline_acts_B(t) /* (the pipeline's sets) */
                           : t->model.acts.B;
}
