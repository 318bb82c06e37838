/* data_loss.c — see data_loss.h. */
#include "data/data_loss.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "progress.h"

int data_check_ids(const tsr_dataset *ds, const char *path, int vocab) {
    const char *how = NULL;
    const uint32_t top = dataset_max_token_id(ds, &how);
    if (top < (uint32_t)vocab) return 0;
    tsr_error("%s: the dataset holds token ids up to %u (%s; its vocabulary has %u), but "
              "model.vocab_size = %d: the model must cover every token id the data holds (set "
              "model.vocab_size >= %u, or use data of this model's tokenizer)", path, top,
              how ? how : "its vocab_size - 1: the index records no max_token_id and data.verify "
              "= false read no token", dataset_vocab_size(ds), vocab, top + 1);
    return TSR_EXIT_USAGE;
}

int64_t data_read_or_die(const tsr_dataset *ds, const char *name, int T, uint64_t idx,
                         int32_t *inputs, int32_t *targets) {
    int k = dataset_read_sample(ds, T, idx, inputs, targets);
    if (k < 0)
        tsr_die(TSR_EXIT_DATA, "%s: cannot read sample %llu (reason above); set data.verify = "
                "true to check the whole dataset at start", name, (unsigned long long)idx);
    return k;
}

double data_mean_loss(const tsr_dataset *ds, const char *name, int T, int B, int64_t limit,
                      const tsr_dist *d, data_forward_fn forward, void *model, int32_t *inputs,
                      int32_t *targets, int doc, uint64_t *samples) {
    uint8_t *starts = doc && dataset_has_segments(ds) ? tsr_malloc((size_t)B * T) : NULL;
    uint64_t n = dataset_n_samples(ds, T);
    if (limit > 0 && (uint64_t)limit < n) n = (uint64_t)limit;
    uint64_t lo = n * (uint64_t)d->rank / (uint64_t)d->world;
    uint64_t hi = n * (uint64_t)(d->rank + 1) / (uint64_t)d->world;
    double acc[2] = {0.0, 0.0}; /* loss sum, counted targets */
    /* the calls of the rank with the longest range, made by every rank (the idle ones: B = 0) */
    const uint64_t mine = (hi - lo + (uint64_t)B - 1) / (uint64_t)B;
    double most = (double)mine;
    if (d->world > 1) dist_view_max_f64(d, &most, 1);
    char what[256];
    tsr_progress p;
    snprintf(what, sizeof what, "eval: %s", name);
    tsr_progress_begin(&p, what, mine, "batches"); /* (rank 0's share) */
    for (uint64_t s = lo; s < hi; s += (uint64_t)B) {
        int b_n = (int)(hi - s < (uint64_t)B ? hi - s : (uint64_t)B);
        for (int b = 0; b < b_n; b++) {
            acc[1] += (double)data_read_or_die(ds, name, T, s + (uint64_t)b, inputs + b * T,
                                               targets + b * T);
            if (starts) dataset_read_starts(ds, T, s + (uint64_t)b, -1, starts + b * T);
        }
        acc[0] += forward(model, inputs, targets, starts, b_n, T);
        tsr_progress_tick(&p, (s - lo) / (uint64_t)B + 1);
    }
    for (uint64_t k = mine; k < (uint64_t)most; k++) forward(model, NULL, NULL, NULL, 0, T);
    free(starts);
    dist_view_sum_f64(d, acc, 2); /* (a context group counts once: tsr_dist.view) */
    if (samples) *samples = n;
    return acc[1] > 0 ? acc[0] / acc[1] : NAN;
}
