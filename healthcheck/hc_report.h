/* hc_report.h — what one rank sends to rank 0, and rank 0's outputs: verdict lines + footer on
 * stdout, and the JSON report (--json FILE). */
#ifndef TSR_HC_REPORT_H
#define TSR_HC_REPORT_H

#include <stdio.h>

#include "hc.h"

#define HC_REPORT_FORMAT 1

typedef struct hc_node_report { /* plain bytes: gathered with MPI_BYTE by the same binary */
    hc_facts facts;
    hc_verdict v[HC_CHECK_COUNT];
    int n_verdicts, n_failed;
    char section[64]; /* the config section judged against */
} hc_node_report;

typedef struct hc_run_info {
    const char *version, *config, *mode;
    int world;
    int gpu; /* the GPU checks ran */
} hc_run_info;

/* One verdict line per check of every node, in rank order, then the footer ("# ..."). Returns
 * the number of unhealthy nodes. */
int hc_print_verdicts(FILE *f, const hc_run_info *ri, const hc_node_report *r, int n);

/* Writes the JSON report to path: a fresh temp file beside it (mkstemp: never an existing name,
 * never through a symlink), fsync, rename over path, fsync of the directory. Returns 0, or 2 after
 * tsr_error (path is then untouched). */
int hc_write_json(const char *path, const hc_run_info *ri, const hc_node_report *r, int n, int exit_code);

/* --prometheus DIR (every rank, its own node): DIR/tessera_healthcheck_NODE.prom for node_exporter's
 * textfile collector, replaced atomically (prom.h): healthy, checks failed, the last run's time,
 * and per check ok, value and limit. Returns 0, or 2 after tsr_error. */
int hc_write_prometheus(const char *dir, const hc_run_info *ri, const hc_node_report *r);

#endif
