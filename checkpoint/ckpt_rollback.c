/* ckpt_rollback.c — what the spike guard needs from the run directory (src/train/guard.h): the
 * newest committed checkpoint at or before a step, and setting aside the checkpoints of the
 * abandoned trajectory after a rollback. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void ckpt_set_aside_after(const char *run_dir, int64_t step) {
    if (dist_world_rank() == 0) {
        int64_t *steps = NULL;
        int n = ckpt_list_steps(run_dir, &steps);
        for (int k = 0; k < n; k++) {
            if (steps[k] <= step) continue;
            char from[4200], to[4300];
            snprintf(from, sizeof from, "%s/step-%08lld.h5", run_dir, (long long)steps[k]);
            snprintf(to, sizeof to, "%s.rolledback", from);
            if (rename(from, to) != 0)
                tsr_warn("rollback: cannot rename %s to %s: %s (resume could pick it up)", from, to,
                         strerror(errno));
        }
        free(steps);
    }
    dist_barrier();
}
