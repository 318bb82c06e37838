/* ckpt_rollback.c — what the spike guard needs from the run directory (src/train/guard.h): the
 * newest committed checkpoint at or before a step, and setting aside the checkpoints of the
 * abandoned trajectory after a rollback. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_internal.h"
#include "common.h"
#include "dist/dist.h"

int ckpt_newest_at_or_before(const char *run_dir, int64_t max_step, char *path_out, size_t cap,
                             int64_t *step_out) {
    long long found = -1;
    if (dist_world_rank() == 0) {
        int64_t *steps = NULL;
        int n = ckpt_list_steps(run_dir, &steps); /* newest first */
        for (int k = 0; k < n; k++)
            if (steps[k] <= max_step) {
                found = steps[k];
                break;
            }
        free(steps);
    }
    dist_bcast(&found, sizeof found, 0);
    if (found < 0) return 1;
    snprintf(path_out, cap, "%s/step-%08lld.h5", run_dir, found);
    *step_out = found;
    return 0;
}

/* Rank 0: renames the committed checkpoints of steps from..to to step-N.h5.SUFFIX; returns the
 * newest step left below from (-1: none) */
static int64_t rename_range(const char *run_dir, int64_t from, const char *suffix,
                            const char *why_for) {
    int64_t *steps = NULL, kept = -1;
    int n = ckpt_list_steps(run_dir, &steps); /* newest first */
    for (int k = 0; k < n; k++) {
        if (steps[k] < from) {
            if (kept < 0) kept = steps[k];
            continue;
        }
        char path[4200], to[4300];
        snprintf(path, sizeof path, "%s/step-%08lld.h5", run_dir, (long long)steps[k]);
        snprintf(to, sizeof to, "%s.%s", path, suffix);
        if (rename(path, to) != 0)
            tsr_warn("%s: cannot rename %s to %s: %s (resume could pick it up)", why_for, path, to,
                     strerror(errno));
    }
    free(steps);
    return kept;
}

void ckpt_set_aside_after(const char *run_dir, int64_t step) {
    if (dist_world_rank() == 0) rename_range(run_dir, step + 1, "rolledback", "rollback");
    dist_barrier();
}

/* Rank 0: `latest` names the newest checkpoint left (step kept), or goes when none is left */
static void repoint_latest(const char *run_dir, int64_t kept) {
    char name[64], path[4200], why[1024] = "";
    int bad;
    if (kept < 0) {
        snprintf(path, sizeof path, "%s/latest", run_dir);
        bad = unlink(path) != 0;
        if (bad) snprintf(why, sizeof why, "%s", strerror(errno));
    } else {
        snprintf(name, sizeof name, "step-%08lld.h5", (long long)kept);
        bad = ck_write_latest(run_dir, name, why, sizeof why) != 0;
    }
    if (bad)
        tsr_warn("setting aside: cannot update %s/latest: %s (a resume takes the newest step-*.h5 "
                 "left)", run_dir, why);
}

void ckpt_set_aside_from(const char *run_dir, int64_t step, const char *suffix) {
    if (dist_world_rank() == 0) {
        char name[256], why[1024];
        const int had = ckpt_read_latest(run_dir, name, sizeof name, why, sizeof why) == 1;
        int64_t named = -1, kept = rename_range(run_dir, step, suffix, "setting aside");
        if (had && ckpt_parse_name(name, &named) && named >= step) repoint_latest(run_dir, kept);
    }
    dist_barrier();
}
