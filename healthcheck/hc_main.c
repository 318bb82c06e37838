/* tessera-healthcheck — is this node fit to train? One MPI rank per node; each gathers facts
 * (measurements) once, judges them against thresholds from healthcheck.cfg, and rank 0 prints one
 * verdict line per check and node. Exit 0 healthy, 1 unhealthy, 2 could not run.
 * Phases: parse options -> identify node -> load thresholds -> gather -> judge -> report -> drain.
 */
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blas_env.h"       /* blas_fix_coretype: OpenBLAS kernels on unrecognised CPUs */
#include "cli.h"            /* the option table, --help */
#include "common.h"         /* tsr_error, tsr_now, number parsing */
#include "dist.h"           /* MPI init/finalize, rank, ranks per node */
#include "hc.h"             /* checks, facts, judge, verdict lines */
#include "hc_config.h"      /* healthcheck.cfg */
#include "hc_drain.h"       /* --drain, --resume-own */
#include "hc_fault.h"       /* TSR_HC_FAULT */
#include "hc_measure.h"     /* the CPU gather step */
#include "hc_report.h"      /* verdict lines, JSON */

#ifndef TSR_VERSION
#define TSR_VERSION "unknown"
#endif

void openblas_set_num_threads(int);
char *openblas_get_corename(void);

typedef struct hc_opts {
    hc_mode mode;
    int mode_set, drain, resume_own, threads, version;
    double burn_s; /* 0 = the config's */
    const char *config, *json;
} hc_opts;

static const cli_opt opts[] = {
    {"quick", 'q', NULL, "quick mode (default): a short fp32 + fp64 GEMM burn, for prologs"},
    {"full", 'f', NULL, "full mode: longer burn, memory bandwidth, all-reduce between node pairs"},
    {"config", 'c', "FILE", "thresholds (default: $TESSERA_HC_CONFIG, else the installed healthcheck.cfg)"},
    {"json", 'j', "FILE", "also write a JSON report of every node to FILE (rank 0)"},
    {"drain", 'd', NULL, "as root: drain this node if unhealthy (reason \"tessera-hc: ...\")"},
    {"resume-own", 'r', NULL, "as root: resume this node if healthy and drained by tessera-hc"},
    {"burn", 'b', "SECONDS", "GEMM burn time (fp32 + fp64 together) instead of the config's"},
    {"threads", 't', "N", "BLAS/OpenMP threads per rank (default: cores / ranks on the node)"},
    {"version", 'V', NULL, "print the version and exit"},
    {"help", 'h', NULL, "print this help and exit"},
};
static const cli_cmd cmd = {"tessera-healthcheck", "",
                            "tessera-healthcheck: node health verdicts, one line per check: NODE CHECK "
                            "OK|FAIL ACTUAL EXPECTED UNIT.\nExit 0 healthy, 1 unhealthy, 2 could not run. "
                            "Docs: tessera-healthcheck(8), docs/healthcheck.md.",
                            opts, (int)(sizeof opts / sizeof opts[0])};

static int on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    hc_opts *o = ctx;
    int64_t v;
    switch (ch) {
    case 'q':
    case 'f': {
        hc_mode m = ch == 'q' ? HC_MODE_QUICK : HC_MODE_FULL;
        if (o->mode_set && o->mode != m) return cli_usage_error(c, "--quick and --full exclude each other", NULL);
        o->mode = m, o->mode_set = 1;
        return 0;
    }
    case 'c': o->config = val; return 0;
    case 'j': o->json = val; return 0;
    case 'd': o->drain = 1; return 0;
    case 'r': o->resume_own = 1; return 0;
    case 'V': o->version = 1; return 0;
    case 't':
        if (cli_number(c, ch, val, 1, 4096, &v)) return TSR_EXIT_USAGE;
        o->threads = (int)v;
        return 0;
    case 'b':
        if (tsr_parse_f64(val, 0.01, 3600, &o->burn_s))
            return cli_usage_error(c, "--burn: expected seconds in [0.01, 3600], got ", val);
        return 0;
    }
    return cli_usage_error(c, "internal: unhandled option", NULL);
}

/* NODE: the Slurm node name when slurmd started us, else the host name. */
static void node_name(char *buf, size_t n, const char *host) {
    const char *s = getenv("SLURMD_NODENAME");
    snprintf(buf, n, "%s", s && *s ? s : host);
}

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        colon += 1 + (colon[1] == ' ');
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(buf, n, "%s", colon);
        break;
    }
    if (f) fclose(f);
}

static int default_threads(int ranks_on_node) {
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    int t = cores / (ranks_on_node > 0 ? ranks_on_node : 1);
    return t > 0 ? t : 1;
}

/* Gather: measure what the mode asks for. Collective (the all-reduce). */
static void gather(const hc_opts *o, const hc_thresholds *t, unsigned faults, const tsr_dist *d,
                   hc_facts *f) {
    const hc_params *p = &t->params;
    double burn = o->burn_s > 0 ? o->burn_s : o->mode == HC_MODE_FULL ? p->full_burn_s : p->quick_burn_s;
    hc_gemm_burn(0, p->gemm_n, burn / 2, faults, f);
    hc_gemm_burn(1, p->gemm_n, burn / 2, faults, f);
    if (o->mode == HC_MODE_QUICK) {
        snprintf(f->skipped, sizeof f->skipped, "membw, allreduce (quick mode; --full measures them)");
        return;
    }
    hc_membw(p->membw_mib, p->membw_reps, faults, f);
    hc_net_allreduce(p->allreduce_mib, p->allreduce_iters, faults, d->rank, d->world, f);
    if (d->world < 2) snprintf(f->skipped, sizeof f->skipped, "allreduce (1 rank: no partner node)");
}

int main(int argc, char **argv) {
    blas_fix_coretype(argv);
    tsr_dist d;
    if (dist_launched()) { /* not under slurmd's prolog: dist.h says why that matters */
        dist_init(&d, &argc, &argv);
    } else {
        dist_init_single(&d);
    }
    hc_opts o = {.mode = HC_MODE_QUICK};
    tsr_log_mute(d.rank != 0); /* every rank parses the same argv: report once */
    int rc = cli_parse(&cmd, argc, argv, on_opt, &o);
    if (rc == 0 && optind < argc) rc = cli_usage_error(&cmd, "unexpected operand: ", argv[optind]);
    tsr_log_mute(0);
    if (rc == -1) tsr_exit(0);
    if (rc) tsr_exit(HC_EXIT_CANNOT_RUN);
    if (o.version) {
        if (d.rank == 0) printf("tessera-healthcheck %s\n", TSR_VERSION);
        tsr_exit(0);
    }

    /* identify this node, load its thresholds and faults; any rank's error stops every rank */
    hc_node_report me;
    memset(&me, 0, sizeof me);
    hc_facts *f = &me.facts;
    node_name(f->node, sizeof f->node, d.host);
    cpu_model(f->device, sizeof f->device);
    f->rank = d.rank;
    f->threads = o.threads ? o.threads : default_threads(d.local_world);
    char cfg_path[4096];
    hc_thresholds th;
    unsigned faults = 0;
    rc = o.config ? (tsr_snprintf(cfg_path, sizeof cfg_path, "%s", o.config) ? 2 : 0)
                  : hc_config_default_path(cfg_path, sizeof cfg_path);
    if (!rc) rc = hc_config_load(cfg_path, 0, f->device, &th);
    if (!rc) rc = hc_fault_parse(getenv("TSR_HC_FAULT"), f->node, d.rank, &faults);
    if (!rc && !hc_node_name_ok(f->node)) {
        tsr_error("node name '%s' (SLURMD_NODENAME or host name) is not [A-Za-z0-9._-]+", f->node);
        rc = HC_EXIT_CANNOT_RUN;
    }
    if (hc_net_max(rc)) tsr_exit(HC_EXIT_CANNOT_RUN);
    snprintf(me.section, sizeof me.section, "%s", th.section);
    omp_set_num_threads(f->threads);
    openblas_set_num_threads(f->threads);
    if (d.rank == 0) {
        char mpi[256];
        dist_version(mpi, sizeof mpi);
        fprintf(stderr, "tessera-healthcheck %s: %s mode, %d rank%s, %d thread%s/rank, config %s "
                "(section \"%s\" for \"%s\"), OpenBLAS core %s, %s\n", TSR_VERSION, hc_mode_names[o.mode],
                d.world, d.world == 1 ? "" : "s", f->threads, f->threads == 1 ? "" : "s", cfg_path,
                th.section, f->device, openblas_get_corename(), mpi);
    }
    if (faults)
        for (int k = 0; k < HC_FAULT_COUNT; k++)
            if (HC_FAULT(faults, k)) tsr_warn("TSR_HC_FAULT: injecting %s on %s", hc_fault_names[k], f->node);

    gather(&o, &th, faults, &d, f);
    me.n_verdicts = hc_judge(f, &th, me.v, &me.n_failed);

    /* report: rank 0 prints every node's verdicts and writes the JSON */
    hc_node_report *all = d.rank == 0 ? tsr_calloc((size_t)d.world, sizeof *all) : NULL;
    hc_net_gather(&me, all, sizeof me);
    int code = me.n_failed ? 1 : 0;
    if (d.rank == 0) {
        hc_run_info ri = {TSR_VERSION, cfg_path, hc_mode_names[o.mode], d.world};
        int bad = hc_print_verdicts(stdout, &ri, all, d.world);
        code = bad ? 1 : 0;
        if (o.json && hc_write_json(o.json, &ri, all, d.world, code)) code = HC_EXIT_CANNOT_RUN;
        free(all);
    }
    code = hc_net_max(code);

    /* drain/resume after MPI is done: no fork under a live MPI library */
    dist_finalize();
    hc_drain_apply(f->node, me.v, me.n_verdicts, me.n_failed, o.drain, o.resume_own);
    return code;
}
