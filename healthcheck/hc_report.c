/* hc_report.c — see hc_report.h. */
#include "hc_report.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "fsutil.h"
#include "prom.h"

int hc_print_verdicts(FILE *f, const hc_run_info *ri, const hc_node_report *r, int n) {
    int bad = 0, checks = 0;
    char line[512], bad_names[256] = "";
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < r[i].n_verdicts; k++) {
            if (hc_verdict_line(line, sizeof line, r[i].facts.node, &r[i].v[k]) == 0)
                fprintf(f, "%s\n", line);
            checks++;
        }
        if (r[i].n_failed) {
            size_t len = strlen(bad_names);
            if (len + 70 < sizeof bad_names)
                snprintf(bad_names + len, sizeof bad_names - len, "%s%s", bad ? "," : "", r[i].facts.node);
            bad++;
        }
    }
    fprintf(f, "# tessera-healthcheck %s%s: %d node%s, %d checks, %d unhealthy%s%s%s -> %s\n", ri->mode,
            ri->gpu ? " (GPU)" : "", n, n == 1 ? "" : "s", checks, bad, bad ? " (" : "", bad_names,
            bad ? ")" : "", bad ? "exit 1 (unhealthy)" : "exit 0 (healthy)");
    if (r[0].facts.skipped[0]) fprintf(f, "# not measured: %s\n", r[0].facts.skipped);
    fflush(f);
    return bad;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fputs("null", f);
}

/* GPU mode: every GPU's own facts (the verdicts judge the worst GPU; this says which is which). */
static void json_gpus(FILE *f, const hc_facts *x) {
    fprintf(f, ",\n     \"gpus\": [");
    for (int d = 0; d < x->n_gpus && d < HC_MAX_GPUS; d++) {
        const hc_gpu_dev *g = &x->gpus[d];
        fprintf(f, "%s\n       {\"index\": %d, \"name\": ", d ? "," : "", d);
        json_str(f, g->name);
        fprintf(f, ", \"bus_id\": ");
        json_str(f, g->bus_id);
        fprintf(f, ", \"error\": ");
        json_str(f, g->error);
        fprintf(f, ", \"compute_capability\": %d, \"bf16_iters\": %ld, \"fp32_iters\": %ld, \"fp8_iters\": %ld, "
                "\"clock_samples\": %d, \"clock_reasons\": %llu", g->compute_capability, g->gemm_iters[0],
                g->gemm_iters[1], g->gemm_iters[2], g->clock_samples, g->clock_reasons);
        for (int c = 0; c < HC_CHECK_COUNT; c++) {
            if (!(g->measured & (1u << c))) continue;
            fprintf(f, ", \"%s\": ", hc_checks[c].name);
            json_num(f, g->value[c]);
        }
        fprintf(f, "}");
    }
    fprintf(f, "]");
}

static void json_node(FILE *f, const hc_node_report *r) {
    const hc_facts *x = &r->facts;
    fprintf(f, "    {\"node\": ");
    json_str(f, x->node);
    fprintf(f, ", \"rank\": %d, \"device\": ", x->rank);
    json_str(f, x->device);
    fprintf(f, ", \"section\": ");
    json_str(f, r->section);
    fprintf(f, ", \"threads\": %d, \"healthy\": %s,\n     \"checks\": [", x->threads,
            r->n_failed ? "false" : "true");
    for (int k = 0; k < r->n_verdicts; k++) {
        const hc_verdict *v = &r->v[k];
        fprintf(f, "%s\n       {\"check\": \"%s\", \"ok\": %s, \"actual\": ", k ? "," : "",
                hc_checks[v->check].name, v->ok ? "true" : "false");
        json_num(f, v->actual);
        fprintf(f, ", \"expected\": ");
        json_num(f, v->limit);
        fprintf(f, ", \"sense\": \"%s\", \"unit\": \"%s\"",
                hc_checks[v->check].sense == HC_AT_LEAST ? ">=" : "<=", hc_checks[v->check].unit);
        if (x->gpu_mode && hc_checks[v->check].scope != HC_PER_NODE)
            fprintf(f, ", \"gpu\": %d", x->worst_gpu[v->check]); /* whose value it is; -1 none */
        fprintf(f, "}");
    }
    fprintf(f, "],\n     \"gemm\": {\"fp32_iters\": %ld, \"fp32_seconds\": ", x->gemm_iters[0]);
    json_num(f, x->gemm_seconds[0]);
    fprintf(f, ", \"fp64_iters\": %ld, \"fp64_seconds\": ", x->gemm_iters[1]);
    json_num(f, x->gemm_seconds[1]);
    fprintf(f, "},\n     \"allreduce_rounds\": [");
    for (int k = 0; k < x->n_rounds && k < 2; k++) {
        fprintf(f, "%s{\"group_size\": %d, \"partner_rank\": %d, \"busbw\": ", k ? ", " : "",
                x->group_size[k], x->partner[k]);
        json_num(f, x->busbw_round[k]);
        fprintf(f, "}");
    }
    fprintf(f, "], \"not_measured\": ");
    json_str(f, x->skipped);
    if (x->gpu_mode) json_gpus(f, x);
    fprintf(f, "}");
}

int hc_write_json(const char *path, const hc_run_info *ri, const hc_node_report *r, int n, int exit_code) {
    char tmp[4200];
    FILE *f = fs_open_beside(path, tmp, sizeof tmp);
    if (!f) return 2;
    int unhealthy = 0;
    for (int i = 0; i < n; i++) unhealthy += r[i].n_failed > 0;
    fprintf(f, "{\"tool\": \"tessera-healthcheck\", \"format\": %d, \"version\": ", HC_REPORT_FORMAT);
    json_str(f, ri->version);
    fprintf(f, ",\n \"mode\": \"%s\", \"backend\": \"%s\", \"config\": ", ri->mode, ri->gpu ? "gpu" : "cpu");
    json_str(f, ri->config);
    fprintf(f, ", \"nodes\": %d, \"unhealthy\": %d, \"exit\": %d,\n \"results\": [\n", n, unhealthy,
            exit_code);
    for (int i = 0; i < n; i++) {
        json_node(f, &r[i]);
        fprintf(f, "%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, " ]}\n");
    return fs_commit_beside(f, tmp, path) ? 2 : 0;
}

/* ---- --prometheus DIR ---- */

typedef struct prom_ctx {
    const hc_run_info *ri;
    const hc_node_report *r;
} prom_ctx;

static void prom_checks(FILE *f, const hc_node_report *r, const char *name, const char *help,
                        int what) {
    prom_family(f, name, help);
    for (int i = 0; i < r->n_verdicts; i++) {
        const hc_verdict *v = &r->v[i];
        const hc_check_info *ci = &hc_checks[v->check];
        char l[512];
        if (what) prom_labels(l, sizeof l, "node", r->facts.node, "check", ci->name, "unit",
                              ci->unit, NULL);
        else prom_labels(l, sizeof l, "node", r->facts.node, "check", ci->name, NULL);
        prom_sample(f, name, l, what == 0 ? v->ok : what == 1 ? v->actual : v->limit);
    }
}

static void prom_fill(FILE *f, const void *ctx) {
    const prom_ctx *c = ctx;
    const hc_node_report *r = c->r;
    char l[512];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    prom_labels(l, sizeof l, "node", r->facts.node, "mode", c->ri->mode, "backend",
                c->ri->gpu ? "gpu" : "cpu", NULL);
    prom_family(f, "tessera_healthcheck_healthy", "1 when every check of the last run passed");
    prom_sample(f, "tessera_healthcheck_healthy", l, r->n_failed == 0);
    prom_family(f, "tessera_healthcheck_checks_failed", "checks that failed in the last run");
    prom_sample(f, "tessera_healthcheck_checks_failed", l, r->n_failed);
    prom_family(f, "tessera_healthcheck_last_run_timestamp_seconds", "when the last run ended "
                "(Unix seconds)");
    prom_sample(f, "tessera_healthcheck_last_run_timestamp_seconds", l,
                (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
    prom_checks(f, r, "tessera_healthcheck_check_ok", "1 when the check passed", 0);
    prom_checks(f, r, "tessera_healthcheck_check_value", "the check's measured figure", 1);
    prom_checks(f, r, "tessera_healthcheck_check_limit", "the threshold it was judged against", 2);
}

int hc_write_prometheus(const char *dir, const hc_run_info *ri, const hc_node_report *r) {
    char name[160];
    snprintf(name, sizeof name, "tessera_healthcheck_%.100s", r->facts.node);
    for (char *p = name; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '-' || *p == '.')) *p = '_';
    strcat(name, ".prom");
    prom_ctx c = {ri, r};
    return prom_write(dir, name, prom_fill, &c) ? 2 : 0;
}
