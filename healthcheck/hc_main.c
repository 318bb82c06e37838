/* tessera-healthcheck — is this node fit to train? One MPI rank per node; each gathers facts
 * (measurements) once, judges them against thresholds from healthcheck.cfg, and rank 0 prints one
 * verdict line per check and node. Exit 0 healthy, 1 unhealthy or usage error, 2 could not run.
 * Phases: parse options -> GPU or CPU checks -> identify node -> load thresholds -> gather ->
 * judge -> report -> drain.
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
#include "dist/dist.h"           /* MPI init/finalize, rank, ranks per node, collectives */
#include "hc.h"             /* checks, facts, judge, verdict lines */
#include "hc_config.h"      /* healthcheck.cfg */
#include "hc_drain.h"       /* --drain, --resume-own */
#include "hc_fault.h"       /* TSR_HC_FAULT */
#include "hc_measure.h"     /* the gather step: CPU measurements, the GPU library's loader */
#include "hc_report.h"      /* verdict lines, JSON */
#include "hc_sdc.h"         /* --sdc-report */

#ifndef TSR_VERSION
#define TSR_VERSION "unknown"
#endif

void openblas_set_num_threads(int);
char *openblas_get_corename(void);

typedef struct hc_opts {
    hc_mode mode;
    int mode_set, drain, resume_own, threads, version;
    double burn_s; /* 0 = the config's */
    const char *config, *json, *gpu_lib, *prometheus, *sdc_report;
    hc_gpu_mode gpu;
} hc_opts;

typedef struct hc_gpu_ctx { /* the GPU mode's state on this rank */
    const hc_gpu_api *api;  /* NULL: the GPU library is not loaded here */
    hc_gpu_info info;
    char lib[4096], why[1024]; /* the library tried, and why this rank has no usable GPU */
    int on;                 /* every rank runs the GPU checks */
} hc_gpu_ctx;

static const cli_opt opts[] = {
    {"quick", CLI_NO_SHORT('q'), NULL, "quick mode (default): a short fp32 + fp64 GEMM burn (GPU: NVML state and a bf16 "
                         "+ fp32 + FP8 burn), for prologs"},
    {"full", CLI_NO_SHORT('f'), NULL, "full mode: longer burn, memory bandwidth, all-reduce in the node (GPU) and "
                        "between node pairs"},
    {"config", 'c', "FILE", "thresholds (default: $TESSERA_HC_CONFIG, else the installed healthcheck.cfg)"},
    {"json", CLI_NO_SHORT('j'), "FILE", "also write a JSON report of every node to FILE (rank 0)"},
    {"prometheus", CLI_NO_SHORT('m'), "DIR", "also keep each node's verdicts in DIR/tessera_healthcheck_NODE.prom "
                                           "for node_exporter's textfile collector"},
    {"drain", 'd', NULL, "as root: drain this node if unhealthy (reason \"tessera-hc: ...\")"},
    {"resume-own", CLI_NO_SHORT('r'), NULL, "as root: resume this node if healthy and drained by tessera-hc"},
    {"sdc-report", CLI_NO_SHORT('s'), "FILE", "no checks: is this node a culprit of a training run's "
                                              "run_dir/sdc-culprit.json (exit 1 if so)? With --drain "
                                              "it is drained (reason \"tessera-hc: sdc ...\")"},
    {"burn", 'b', "SECONDS", "GEMM burn time (fp32 + fp64, GPU: bf16 + fp32 + FP8, together) instead of the config's"},
    {"threads", 'j', "N", "BLAS/OpenMP threads per rank (default: cores / ranks on the node)"},
    {"threads", CLI_MOVED('t'), NULL, NULL}, /* its letter until -t became --tokenizer (docs/cli.md) */
    {"gpu", 'g', "MODE", "auto (default): GPU checks where " HC_GPU_LIB_NAME " finds a GPU; on: GPU "
                         "checks or exit 2; off: CPU checks"},
    {"gpu-lib", 'l', "FILE", "the GPU gather library (default: $TESSERA_HC_GPU_LIB, else "
                             HC_GPU_LIB_NAME " beside the program or in ../lib/tessera/)"},
    {"version", 'V', NULL, "print the version and exit"},
    {"help", 'h', NULL, "print this help and exit"},
};
static const cli_cmd cmd = {"tessera-healthcheck", "",
                            "tessera-healthcheck: node health verdicts, one line per check: NODE CHECK "
                            "OK|FAIL ACTUAL EXPECTED UNIT.\nDocs: tessera-healthcheck(8), docs/healthcheck.md.",
                            opts, (int)(sizeof opts / sizeof opts[0]),
                            "0 healthy, 1 unhealthy or usage error, 2 could not run"};

static int on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    hc_opts *o = ctx;
    int64_t v;
    switch (ch) {
    case CLI_NO_SHORT('q'):
    case CLI_NO_SHORT('f'): {
        hc_mode m = ch == CLI_NO_SHORT('q') ? HC_MODE_QUICK : HC_MODE_FULL;
        if (o->mode_set && o->mode != m) return cli_usage_error(c, "--quick and --full exclude each other", NULL);
        o->mode = m, o->mode_set = 1;
        return 0;
    }
    case 'c': o->config = val; return 0;
    case 'l': o->gpu_lib = val; return 0;
    case 'g':
        for (int k = 0; k < HC_GPU_MODE_COUNT; k++) {
            if (strcmp(val, hc_gpu_mode_names[k])) continue;
            o->gpu = (hc_gpu_mode)k;
            return 0;
        }
        return cli_usage_error(c, "--gpu: expected auto, on or off, got ", val);
    case CLI_NO_SHORT('j'): o->json = val; return 0;
    case CLI_NO_SHORT('m'): o->prometheus = val; return 0;
    case 'd': o->drain = 1; return 0;
    case CLI_NO_SHORT('r'): o->resume_own = 1; return 0;
    case CLI_NO_SHORT('s'): o->sdc_report = val; return 0;
    case 'V': o->version = 1; return 0;
    case 'j':
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

/* Gather, CPU mode: measure what the mode asks for. Collective (the all-reduce). */
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

/* The maximum of v over all ranks (a status: any rank's error stops every rank). Collective. */
static int max_over_ranks(int v) {
    dist_allreduce_max_int(&v, 1);
    return v;
}

/* GPU or CPU checks. Every rank runs the same kind (their collectives differ): the GPU checks when
 * any rank has a usable GPU (auto) or always (on: a rank without one makes every rank exit 2). In
 * auto, a node with an NVIDIA driver but no loadable GPU library is an error, not a CPU node. A
 * rank without a GPU in a GPU run reports gpu_count 0, judged by the section of the other ranks'
 * GPU. Collective. Sets the device name that selects the config section. Returns 0 or 2. */
static int choose_checks(const hc_opts *o, const tsr_dist *d, hc_gpu_ctx *g, hc_facts *f) {
    g->api = hc_gpu_open(o->gpu_lib, o->gpu, g->lib, sizeof g->lib, g->why, sizeof g->why);
    int driver = access("/dev/nvidiactl", F_OK) == 0, rc = 0;
    if (!g->api && o->gpu == HC_GPU_AUTO && driver) {
        /* a GPU node whose GPU library is missing or broken must not pass as a CPU node */
        tsr_error("%s has an NVIDIA driver (/dev/nvidiactl) but no usable GPU library: %s (--gpu off "
                  "runs the CPU checks)", f->node, g->why);
        rc = HC_EXIT_CANNOT_RUN;
    }
    if (g->api && g->api->probe(&g->info, g->why, sizeof g->why)) g->info.n_devices = 0;
    else if (g->api && g->info.n_devices <= 0)
        snprintf(g->why, sizeof g->why, "CUDA sees no GPU (CUDA_VISIBLE_DEVICES empty?)");
    int have = g->api && g->info.n_devices > 0;
    if (o->gpu == HC_GPU_ON && !have) {
        tsr_error("--gpu on: no usable GPU on %s: %s", f->node, g->why);
        rc = HC_EXIT_CANNOT_RUN;
    }
    if (max_over_ranks(rc)) return HC_EXIT_CANNOT_RUN;
    g->on = max_over_ranks(have);
    if (!g->on) {
        cpu_model(f->device, sizeof f->device);
        return 0;
    }
    char *names = tsr_calloc((size_t)d->world, sizeof g->info.name0), mine[sizeof g->info.name0] = "";
    if (have) memcpy(mine, g->info.name0, sizeof mine);
    dist_allgather(mine, names, sizeof mine);
    for (int r = 0; r < d->world && !f->device[0]; r++)
        snprintf(f->device, sizeof f->device, "%s", names + (size_t)r * sizeof g->info.name0);
    free(names);
    if (!have) tsr_warn("%s: no usable GPU (%s) in a GPU run: gpu_count 0, judged as \"%s\"", f->node,
                        g->why, f->device);
    return 0;
}

/* Gather, GPU mode: the GPU library measures the GPUs CUDA sees (less one with missing_gpu). */
static void gather_gpu(const hc_opts *o, const hc_thresholds *t, unsigned faults, const tsr_dist *d,
                       const hc_gpu_ctx *g, hc_facts *f) {
    const hc_params *p = &t->params;
    double burn = o->burn_s > 0 ? o->burn_s : o->mode == HC_MODE_FULL ? p->full_burn_s : p->quick_burn_s;
    int found = g->api && g->info.n_devices > 0 ? g->info.n_devices : 0;
    int fp8 = t->lim[HC_GEMM_FP8].set;
    hc_gpu_job job = {.n_devices = hc_gpu_select(found, faults), .gemm_n = p->gemm_n, .burn_s = burn / (fp8 ? 3 : 2),
                      .membw_mib = p->membw_mib, .membw_reps = p->membw_reps,
                      .allreduce_mib = p->allreduce_mib, .allreduce_iters = p->allreduce_iters,
                      .faults = faults, .fp8 = fp8};
    if (!fp8) {
        char note[160];
        snprintf(note, sizeof note, "gemm_fp8, gemm_fp8_verify (section \"%s\" gives no thresholds for them)",
                 t->section);
        hc_note_skipped(f, note);
    }
    if (found > HC_MAX_GPUS) tsr_warn("%s: %d GPUs; only the first %d are checked", f->node, found, HC_MAX_GPUS);
    if (g->api && g->info.nvml[0]) {
        char note[256];
        snprintf(note, sizeof note, "NVML state and throttling (%s)", g->info.nvml);
        hc_note_skipped(f, note);
    }
    hc_gpu_gather(g->api, &job, o->mode == HC_MODE_FULL, d->rank, d->world, f);
}

/* MPI when a launcher started us (not under slurmd's prolog: dist.h says why that matters), else a
 * world of one. A failed MPI call then stops every rank with 2, could not run. */
static void start(int *argc, char ***argv, tsr_dist *d) {
    blas_fix_coretype(*argv);
    if (dist_launched()) dist_init(d, argc, argv);
    else dist_init_single(d);
    dist_set_fail_code(HC_EXIT_CANNOT_RUN);
}

/* Every rank parses the same argv, rank 0 reports. Exits on --help, --version and usage errors. */
static void parse_options(int argc, char **argv, const tsr_dist *d, hc_opts *o) {
    *o = (hc_opts){.mode = HC_MODE_QUICK, .gpu = HC_GPU_AUTO};
    tsr_log_mute(d->rank != 0);
    int rc = cli_parse(&cmd, argc, argv, on_opt, o);
    if (rc == 0 && optind < argc) rc = cli_usage_error(&cmd, "unexpected operand: ", argv[optind]);
    if (rc == 0 && o->sdc_report &&
        (o->mode_set || o->resume_own || o->json || o->prometheus || o->burn_s > 0))
        rc = cli_usage_error(&cmd, "--sdc-report runs no checks: it does not go with --quick, "
                             "--full, --burn, --json, --prometheus or --resume-own", NULL);
    tsr_log_mute(0);
    if (rc == -1) tsr_exit(0);
    if (rc) tsr_exit(rc); /* a usage error: 1, as in every tessera program */
    if (o->version) {
        if (d->rank == 0) printf("tessera-healthcheck %s\n", TSR_VERSION);
        tsr_exit(0);
    }
}

/* Identify this node, choose GPU or CPU checks, load its thresholds and faults; any rank's error
 * stops every rank with 2. Collective. */
static void prepare(const hc_opts *o, const tsr_dist *d, hc_node_report *me, hc_gpu_ctx *gpu,
                    hc_thresholds *th, unsigned *faults, char *cfg_path, size_t np) {
    hc_facts *f = &me->facts;
    node_name(f->node, sizeof f->node, d->host);
    if (choose_checks(o, d, gpu, f)) tsr_exit(HC_EXIT_CANNOT_RUN);
    f->rank = d->rank;
    f->threads = o->threads ? o->threads : default_threads(d->local_world);
    int rc = o->config ? (tsr_snprintf(cfg_path, np, "%s", o->config) ? 2 : 0)
                       : hc_config_default_path(cfg_path, np);
    if (!rc) rc = hc_config_load(cfg_path, gpu->on, f->device, th);
    if (!rc) rc = hc_fault_parse(getenv("TSR_HC_FAULT"), f->node, d->rank, faults);
    if (!rc && !hc_node_name_ok(f->node)) {
        tsr_error("node name '%s' (SLURMD_NODENAME or host name) is not [A-Za-z0-9._-]+", f->node);
        rc = HC_EXIT_CANNOT_RUN;
    }
    if (max_over_ranks(rc)) tsr_exit(HC_EXIT_CANNOT_RUN);
    snprintf(me->section, sizeof me->section, "%s", th->section);
    omp_set_num_threads(f->threads);
    openblas_set_num_threads(f->threads);
}

/* Rank 0's banner on stderr: the mode, the config section, the libraries; then each injected
 * fault, on its rank. */
static void announce(const hc_opts *o, const tsr_dist *d, const hc_gpu_ctx *gpu, const hc_thresholds *th,
                     unsigned faults, const char *cfg_path, const hc_facts *f) {
    if (d->rank == 0) {
        char mpi[256];
        dist_version(mpi, sizeof mpi);
        if (gpu->on)
            fprintf(stderr, "tessera-healthcheck %s: %s mode, GPU checks, %d rank%s, %d GPU%s on rank 0, "
                    "config %s (section \"%s\" for \"%s\"), %s (%s; NVML %s), %s\n", TSR_VERSION,
                    hc_mode_names[o->mode], d->world, d->world == 1 ? "" : "s", gpu->info.n_devices,
                    gpu->info.n_devices == 1 ? "" : "s", cfg_path, th->section, f->device, gpu->lib,
                    gpu->info.versions, gpu->info.nvml[0] ? gpu->info.nvml : "loaded", mpi);
        else
            fprintf(stderr, "tessera-healthcheck %s: %s mode, %d rank%s, %d thread%s/rank, config %s "
                    "(section \"%s\" for \"%s\"), OpenBLAS core %s, %s; CPU checks (rank 0: %s)\n",
                    TSR_VERSION, hc_mode_names[o->mode], d->world, d->world == 1 ? "" : "s", f->threads,
                    f->threads == 1 ? "" : "s", cfg_path, th->section, f->device, openblas_get_corename(),
                    mpi, gpu->why);
    }
    if (faults)
        for (int k = 0; k < HC_FAULT_COUNT; k++)
            if (HC_FAULT(faults, k)) tsr_warn("TSR_HC_FAULT: injecting %s on %s", hc_fault_names[k], f->node);
}

/* Rank 0 prints every node's verdicts and writes the JSON. Returns the exit status, the same on
 * every rank. Collective. */
static int report(const hc_opts *o, const tsr_dist *d, const hc_gpu_ctx *gpu, const char *cfg_path,
                  const hc_node_report *me) {
    hc_node_report *all = d->rank == 0 ? tsr_calloc((size_t)d->world, sizeof *all) : NULL;
    dist_gather(me, all, sizeof *me, 0);
    int code = me->n_failed ? 1 : 0;
    hc_run_info ri = {TSR_VERSION, cfg_path, hc_mode_names[o->mode], d->world, gpu->on};
    if (d->rank == 0) {
        int bad = hc_print_verdicts(stdout, &ri, all, d->world);
        code = bad ? 1 : 0;
        if (o->json && hc_write_json(o->json, &ri, all, d->world, code)) code = HC_EXIT_CANNOT_RUN;
        free(all);
    }
    /* every rank its own node's file (each node's exporter serves its own directory) */
    if (o->prometheus && hc_write_prometheus(o->prometheus, &ri, me)) code = HC_EXIT_CANNOT_RUN;
    return max_over_ranks(code);
}

/* --sdc-report FILE (hc_sdc.h): no measurement; each rank's line says whether the record names
 * its node (NODE sdc FAIL 1 0 reports), and --drain drains a named node with the record's reason
 * (its own rule: docs/healthcheck.md). Returns 1 when a node is named, 0 when none, 2 when the
 * record cannot be read, on every rank. Collective until MPI is finalized. */
static int sdc_report_run(const hc_opts *o, const tsr_dist *d) {
    char node[64], why[1200] = "";
    hc_sdc r = {0};
    node_name(node, sizeof node, d->host);
    int rc = 2;
    if (!hc_node_name_ok(node))
        snprintf(why, sizeof why, "node name '%s' is not [A-Za-z0-9._-]+", node);
    else
        rc = hc_sdc_read(o->sdc_report, node, &r, why, sizeof why);
    if (rc) tsr_error("--sdc-report: %s", why);
    else printf("%s sdc %s %d 0 reports\n", node, r.named ? "FAIL" : "OK", r.named);
    fflush(stdout);
    int code = max_over_ranks(rc ? HC_EXIT_CANNOT_RUN : r.named);
    if (d->rank == 0)
        printf("# tessera-healthcheck sdc-report %s: %d rank%s -> exit %d (%s)\n", o->sdc_report,
               d->world, d->world == 1 ? "" : "s", code,
               code == 1 ? "named: the run found it corrupting data" : code ? "could not run" : "not named");
    dist_finalize();
    if (!rc && r.named) hc_drain_node(node, r.reason, HC_FAILED_SDC, o->drain, 0);
    return code;
}

int main(int argc, char **argv) {
    tsr_dist d;
    start(&argc, &argv, &d);
    hc_opts o;
    parse_options(argc, argv, &d, &o);
    if (o.sdc_report) return sdc_report_run(&o, &d);

    hc_node_report me;
    memset(&me, 0, sizeof me);
    hc_facts *f = &me.facts;
    hc_gpu_ctx gpu;
    memset(&gpu, 0, sizeof gpu);
    char cfg_path[4096];
    hc_thresholds th;
    unsigned faults = 0;
    prepare(&o, &d, &me, &gpu, &th, &faults, cfg_path, sizeof cfg_path);
    announce(&o, &d, &gpu, &th, faults, cfg_path, f);

    if (gpu.on) gather_gpu(&o, &th, faults, &d, &gpu, f);
    else gather(&o, &th, faults, &d, f);
    me.n_verdicts = hc_judge(f, &th, me.v, &me.n_failed);
    int code = report(&o, &d, &gpu, cfg_path, &me);

    /* drain/resume after MPI is done: no fork under a live MPI library */
    if (gpu.api) gpu.api->close();
    dist_finalize();
    hc_drain_apply(f->node, me.v, me.n_verdicts, me.n_failed, o.drain, o.resume_own);
    return code;
}
