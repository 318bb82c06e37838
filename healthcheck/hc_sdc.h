/* hc_sdc.h — --sdc-report FILE: a training run's culprit record (run_dir/sdc-culprit.json, written
 * when tessera-train stops with exit 87: docs/health.md "The verdict") judged for this node, so
 * that the job script can have a node that corrupted data drained through the checker's own path
 * (docs/healthcheck.md "Silent data corruption found by a run"), though it would pass the burn.
 * The record comes from the user's run directory: it is read as untrusted input (a regular file
 * of at most HC_SDC_MAX_BYTES, one JSON object, the fields' types checked). */
#ifndef TSR_HC_SDC_H
#define TSR_HC_SDC_H

#include <stddef.h>

#define HC_SDC_MAX_BYTES 65536

typedef struct hc_sdc {
    int named;          /* the record's "nodes" (comma-separated) lists this node */
    long long step;     /* the step that found it */
    char reason[256];   /* "tessera-hc: sdc step S TENSOR VERDICT", sanitised (hc_sanitize_reason) */
} hc_sdc;

/* Reads the record at path for node: 0 with out filled, or 2 (could not run) with why naming the
 * file and the fault. Local. */
int hc_sdc_read(const char *path, const char *node, hc_sdc *out, char *why, size_t cap);

#endif
