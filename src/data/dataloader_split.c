/* dataloader_split.c — the loader's splits read whole (dataloader.h "splits"): a validation set,
 * `tessera eval`'s datasets, the pairs and prompts the objectives read by index; an object
 * store's dataset fetched whole first; the mean loss of a model over a split. */
#include "data/dataloader.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"
#include "data/dataloader_check.h"
#include "data/s3.h"
#include "data/shard_format.h"
#include "fsutil.h"
#include "progress.h"

int64_t dataloader_read(const tsr_dataset *ds, const char *name, int T, uint64_t idx,
                        int32_t *inputs, int32_t *targets) {
    int k = dataset_read_sample(ds, T, idx, inputs, targets);
    if (k < 0)
        tsr_die(TSR_EXIT_DATA, "%s: cannot read sample %llu (reason above); set data.verify = "
                "true to check the whole dataset at start", name, (unsigned long long)idx);
    return k;
}

/* Fetches shards [k0, k0 + n) into dir and checks each as a local shard (dataset_shard_redirect:
 * header, size, payload CRC32C, token ids, mask bytes); keep: the redirects stay (the files are
 * unlinked at once: their mappings hold them until dataset_close), else they are dropped. */
static int fetch_batch(tsr_dataset *ds, const char *dir, int k0, int n, int keep) {
    s3_fetch *f = tsr_calloc((size_t)n, sizeof *f);
    char **path = tsr_calloc((size_t)n, sizeof *path);
    for (int i = 0; i < n; i++) {
        path[i] = data_path_join(dir, dataset_shard_name(ds, k0 + i));
        f[i] = (s3_fetch){.name = dataset_shard_name(ds, k0 + i), .path = path[i],
                          .size = dataset_shard_bytes(ds, k0 + i)};
    }
    int rc = s3_get_files(dataset_s3(ds), f, n, n, NULL) ? TSR_EXIT_DATA : 0;
    for (int i = 0; i < n; i++) {
        if (f[i].rc) tsr_error("%s", f[i].err);
        else if (!rc && dataset_shard_redirect(ds, k0 + i, path[i])) rc = TSR_EXIT_DATA;
        if (!keep) dataset_shard_redirect(ds, k0 + i, NULL);
        unlink(path[i]);
        free(path[i]);
    }
    free(path);
    free(f);
    return rc;
}

int dataloader_fetch_all(tsr_dataset *ds, int keep) {
    char dir[4096];
    int rc = fs_temp_dir(dir, sizeof dir, "fetch"), S = dataset_n_shards(ds);
    int batch = s3_connections();
    for (int k0 = 0; !rc && k0 < S; k0 += batch)
        rc = fetch_batch(ds, dir, k0, S - k0 < batch ? S - k0 : batch, keep);
    rmdir(dir);
    return rc;
}

int dataloader_open_split(tsr_dataset **ds, const char *dir, int vocab) {
    TSR_CHECK(dataset_open(ds, dir, 1));
    int rc = dataset_s3(*ds) && dataloader_fetch_all(*ds, 1) ? TSR_EXIT_DATA
                                                               : dataloader_check_ids(*ds, dir, vocab);
    if (rc) dataset_close(*ds);
    return rc;
}

double dataloader_mean_loss(const tsr_dataset *ds, const char *name, int T, int B, int64_t limit,
                            const tsr_dist *d, dataloader_forward_fn forward, void *model,
                            int32_t *inputs, int32_t *targets, int doc, uint64_t *samples) {
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
            acc[1] += (double)dataloader_read(ds, name, T, s + (uint64_t)b, inputs + b * T,
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
