/* tessera-train — pretrain a decoder LM from a libconfig recipe, under mpirun/srun or alone.
 *
 *   phases: fix BLAS core -> MPI init -> parse options -> load config -> banner + plan -> lock
 *   run_dir -> train
 * Exit codes: docs/tessera-train.md (0 ok, 1 usage/config, 2 data/checkpoint or run_dir locked by
 * another trainer, 3 internal). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blas_env.h"
#include "cli.h"
#include "common.h"
#include "config/config.h"
#include "dist/dist.h"
#include "eval/train_icl.h"
#include "fsutil.h"
#include "hf/hf.h"
#include "hf/hf_importer.h"
#include "ops.h"
#include "progress.h"
#include "report/account_read.h"
#include "posttrain/reward_keeper.h"
#include "runlock.h"
#include "mesh/binding.h"
#include "train/checkpointing.h"
#include "plan/fit.h"
#include "data/dataloader.h"
#include "plan/timeplan.h"
#include "train/train_gpu.h"
#include "train/train_plan.h"
#include "telemetry/metrics.h"
#include "telemetry/metrics_prom.h"
#include "train/trainer.h"

#ifndef TSR_VERSION
#define TSR_VERSION "unknown"
#endif

#define MAX_SETS 256

/* The option table (cli.h): the parser (cli_parse) and the help text are both generated from it;
 * its last row is the help's paragraph on the recipe. One meaning per letter across tessera's
 * programs (docs/cli.md): --plan has none (-p is generate's --prompt). --time's value is optional
 * ("[=...]": --time or --time=H100). */
static const cli_opt options[] = {
    {"config", 'c', "FILE", "training recipe (libconfig), required"},
    {"set", 's', "KEY=VALUE", "override a config key (repeatable), e.g. --set optim.lr=1e-3"},
    {"resume", 'r', "PATH", "resume from this checkpoint: a step-*.h5, a run directory or a latest file (default: run_dir's latest valid one)"},
    {"init-from", 'i', "PATH", "start a new run from these weights: a checkpoint (PATH as for --resume), a Hugging Face directory (its config.json gives the model.* keys the recipe leaves out) or a PEFT adapter directory (a LoRA run); ignored, with a warning, when run_dir has a checkpoint"},
    {"dry-run", 'n', NULL, "validate the config, print the plan and the effective config (every key), exit"},
    {"plan", CLI_NO_SHORT('p'), "RANKS[/PER_NODE]", "--dry-run as if started on RANKS ranks (PER_NODE per node, default all on one: hsdp's default group); the memory plan of any recipe at any scale"},
    {"time", CLI_NO_SHORT('t'), "[=GPU|FILE]", "--dry-run with the time plan: step time, tokens/s, MFU, time to max_duration and GPU-hours at W = 1, 8, 64, 512 (and --plan's) on GPU (H200, H100, ...; default H200) or by the TSR_PROFILE table in FILE (docs/planning.md)"},
    {"link", CLI_NO_SHORT('l'), "NODE[,NET]", "--time's bus bandwidth in GB/s within a node and between nodes (default: the health checker's expected figures for the GPU)"},
    {"gpu-mem", CLI_NO_SHORT('g'), "GIB", "--dry-run that says whether the device memory plan per rank (device = cuda) fits a GPU of GIB GiB: 'fits: X of GIB GiB' or 'does not fit: needs X' (docs/planning.md)"},
    {"fit", CLI_NO_SHORT('f'), "seq_len|micro_batch|layout|world", "with --gpu-mem: the longest seq_len (multiples of 128) or the largest micro_batch (divisors of the per-rank batch) whose plan fits, at --plan's world; layout: the fastest tensor/pipeline/context/expert/data splits that fit --plan W/PER_NODE, timed by --time's table (docs/planning.md \"Choosing the layout\"); world: the fewest GPUs, in whole nodes from --plan's, that fit"},
    {"version", 'V', NULL, "print the version and exit"},
    {"help", 'h', NULL, "this help"},
    {"", CLI_TEXT, NULL,
     "what a recipe turns on (its keys; every key: docs/config.md, or `tessera config-doc`):\n"
     "  objective = \"dpo\" | \"grpo\"    DPO on preference pairs (docs/dpo.md); GRPO, RL on\n"
     "                                reward programs' scores (docs/rl.md, tessera-job rl)\n"
     "  lora.rank = R                 LoRA adapters on a frozen base (docs/lora.md)\n"
     "  optim.name = \"muon\"           Muon for the hidden matrices, AdamW the rest (docs/training.md)\n"
     "  parallel.sharding             ddp, zero1, zero3, hsdp (docs/sharding.md)\n"
     "  parallel.context, parallel.expert   context parallelism (docs/parallelism.md);\n"
     "                                mixture-of-experts ranks (docs/moe.md)\n"
     "  precision.fp8, model.activation_compression = \"fp8\"   FP8 GEMMs and all-gathers,\n"
     "                                FP8 activations (device = \"cuda\"; docs/cuda.md)\n"
     "  save_async                    checkpoints written in the background (the default)\n"
     "  metrics.prometheus_dir        Prometheus metrics for node_exporter (docs/site.md);\n"
     "                                metrics.jsonl, TensorBoard and the run's cost: tessera report\n"
     "  watchdog.*                    a slow rank or MFU stops the run with a checkpoint (exit 86),\n"
     "                                a hung phase aborts it (exit 3)\n"},
};
#define N_OPTIONS (int)(sizeof options / sizeof options[0])
_Static_assert(sizeof options / sizeof options[0] <= CLI_MAX_OPTS, "cli_parse takes them");

static const cli_cmd train_cli = {
    "tessera-train", "--config FILE [--set KEY=VALUE ...] [--dry-run | --plan RANKS]\n"
    "       mpirun -np N tessera-train --config FILE ...", "", options, N_OPTIONS,
    "0 finished, 1 usage/config error, 2 data or checkpoint error, 3 internal\n"
    "error, 85 checkpoint committed after SIGUSR1/SIGTERM (requeue me), 86 checkpoint\n"
    "committed because the run got slow (sweep the node, then requeue)\n"
    "config keys: docs/config.md (`tessera config-doc` writes it); option letters: docs/cli.md",
};

typedef struct cli {
    const char *config;
    const char *sets[MAX_SETS];
    const char *resume, *init_from;
    int n_sets, dry_run;
    int plan_world, plan_per_node; /* --plan: the world the plan is for (0: the real one) */
    int time, per_node_given;      /* --time; --plan named PER_NODE */
    timeplan_opts tp;              /* --time's GPU, --link */
    double gpu_mem;                /* --gpu-mem in bytes (0: none) */
    plan_fit_key fit;              /* --fit */
    int rank;                      /* this process's: rank 0 prints --version */
} cli;

/* --plan RANKS[/PER_NODE] */
static void on_plan(cli *c, const char *val) {
    char end = 0;
    int k = sscanf(val, "%d/%d%c", &c->plan_world, &c->plan_per_node, &end);
    if (k == 1) c->plan_per_node = c->plan_world;
    c->per_node_given = k == 2;
    if (!(k == 1 || k == 2) || c->plan_world < 1 || c->plan_world > 1000000 ||
        c->plan_per_node < 1 || c->plan_world % c->plan_per_node != 0)
        tsr_fail_all(TSR_EXIT_USAGE, "--plan %s: expected RANKS or RANKS/PER_NODE (1 .. "
                     "1000000 ranks, PER_NODE dividing RANKS), e.g. --plan 64/8", val);
    c->dry_run = 1;
}

/* --time, --link, --gpu-mem, --fit: the planning options (each implies --dry-run but --link) */
static void on_planning(cli *c, int ch, const char *val) {
    char why[200];
    int bad = 0;
    if (ch == CLI_NO_SHORT('t')) c->time = 1, c->tp.gpu = val;
    else if (ch == CLI_NO_SHORT('l')) bad = timeplan_parse_link(val, &c->tp, why, sizeof why);
    else if (ch == CLI_NO_SHORT('g')) bad = plan_fit_parse_mem(val, &c->gpu_mem, why, sizeof why);
    else bad = plan_fit_parse_key(val, &c->fit, why, sizeof why);
    if (bad) tsr_fail_all(TSR_EXIT_USAGE, "%s", why);
    if (ch != CLI_NO_SHORT('l')) c->dry_run = 1;
}

static int on_opt(const cli_cmd *cmd, int ch, const char *val, void *ctx) {
    cli *c = ctx;
    (void)cmd;
    switch (ch) {
    case 'c': c->config = val; break;
    case 's':
        if (c->n_sets == MAX_SETS) tsr_fail_all(TSR_EXIT_USAGE, "more than %d --set options", MAX_SETS);
        c->sets[c->n_sets++] = val;
        break;
    case 'n': c->dry_run = 1; break;
    case CLI_NO_SHORT('p'): on_plan(c, val); break;
    case 'r': c->resume = val; break;
    case 'i': c->init_from = val; break;
    case 'V':
        if (c->rank == 0) printf("tessera-train %s\n", TSR_VERSION);
        tsr_exit(TSR_EXIT_OK);
    default: on_planning(c, ch, val);
    }
    return 0;
}

/* Every rank parses the same argv; rank 0 reports. Exits on --help, --version and usage errors. */
static void parse_cli(cli *c, int argc, char **argv, int rank) {
    memset(c, 0, sizeof *c);
    c->rank = rank;
    tsr_log_mute(rank != 0);
    int rc = cli_parse(&train_cli, argc, argv, on_opt, c);
    if (rc == 0 && optind < argc) rc = cli_usage_error(&train_cli, "unexpected operand: ", argv[optind]);
    tsr_log_mute(0);
    if (rc) tsr_exit(rc < 0 ? TSR_EXIT_OK : rc);
    if (c->tp.link_node && !c->time)
        tsr_fail_all(TSR_EXIT_USAGE, "--link is --time's: give --time too (docs/planning.md)");
    if (c->fit && !c->gpu_mem)
        tsr_fail_all(TSR_EXIT_USAGE, "--fit needs --gpu-mem GIB: the memory it fits (docs/planning.md)");
    if (c->fit == PLAN_FIT_LAYOUT && !c->per_node_given)
        tsr_fail_all(TSR_EXIT_USAGE, "--fit layout needs --plan W/PER_NODE: the GPUs and the GPUs "
                     "a node it lays out, e.g. --plan 64/8 (docs/planning.md)");
    if (c->time && c->per_node_given) c->tp.per_node = c->plan_per_node;
    c->tp.plan_world = c->plan_world;
    if (!c->config) {
        if (rank == 0) cli_help(stderr, &train_cli);
        tsr_fail_all(TSR_EXIT_USAGE, "--config FILE is required");
    }
}

/* --config NAME: a file, else (NAME without a slash) an installed recipe by name, looked for as
 * PREFIX/share/tessera/configs/NAME[.cfg] beside the program, then the checkout's configs/ beside a
 * program built in build/ (docs/training.md, "Finding GPT-2's files and recipes"). Returns the path to load: arg
 * itself when it is a file or nothing matched (config_load then says it is missing). */
static const char *find_recipe(const char *arg, char *buf, size_t cap, int rank) {
    if (access(arg, F_OK) == 0 || strchr(arg, '/')) return arg;
    char exe[4096];
    fs_exe_dir(exe, sizeof exe);
    if (!*exe) return arg;
    size_t n = strlen(arg);
    const char *ext = n > 4 && strcmp(arg + n - 4, ".cfg") == 0 ? "" : ".cfg";
    static const char *const dirs[] = {"../share/tessera/configs", "../configs"};
    for (int i = 0; i < 2; i++) {
        if (tsr_snprintf(buf, cap, "%s/%s/%s%s", exe, dirs[i], arg, ext)) continue;
        if (access(buf, R_OK) == 0) {
            if (rank == 0) printf("--config %s: the recipe %s\n", arg, buf);
            return buf;
        }
    }
    return arg;
}

/* The start's first lines (docs/tessera-train.md "OUTPUT"): what runs, and where each rank runs
 * (its cores, NUMA node and GPU: collective; not under --plan). The plan follows (trainer_init). */
static void banner(const tsr_dist *d, const tsr_dist *pd, const tsr_config *cfg, int plan_world) {
    if (pd->rank == 0) {
        char mpi[256];
        int threads = trainer_threads(cfg, pd);
        dist_version(mpi, sizeof mpi);
        printf("tessera-train %s | %d rank%s | %s\n", TSR_VERSION, pd->world, pd->world > 1 ? "s" : "",
               mpi);
        if (cfg->device == TSR_DEVICE_CUDA) /* the host still runs data, checkpoints and samples */
            printf("backend cuda (bf16 activations and matmuls; docs/cuda.md) | host: OpenBLAS core "
                   "%s, %d thread%s per rank\n", cpu_ops_blas_core(), threads, threads > 1 ? "s" : "");
        else
            printf("backend cpu (fp32) | OpenBLAS core %s | %d thread%s per rank\n",
                   cpu_ops_blas_core(), threads, threads > 1 ? "s" : "");
        fflush(stdout);
    }
    if (plan_world == 0) binding_print(d, cfg->device == TSR_DEVICE_CUDA ? d->local_rank : -1);
}

/* --plan W for a world whose per-rank batch the recipe's micro_batch does not divide (gpt2-350m's
 * 16 at W = 64: 8 sequences a rank): the plan takes the largest micro_batch that divides it (an even
 * one for dpo), says so, and a run at W needs that --set; the time plan keeps the recipe's at every
 * W (docs/planning.md). A global_batch W's data ranks do not split is config_check_world's error. */
static void plan_fit_micro(tsr_config *cfg, const tsr_dist *pd) {
    const long long fit = config_micro_fitting(cfg, pd->world);
    if (fit == 0) return;
    const long long N = cfg->context > 1 ? cfg->context : 1, D = pd->world / N;
    const long long gb = cfg->global_batch;
    if (pd->rank == 0)
        printf("--plan %d: micro_batch = %lld does not divide the per-rank batch %lld (global_batch "
               "%lld / %lld data ranks): the plan uses micro_batch = %lld; a run on %d ranks needs "
               "--set micro_batch=%lld\n", pd->world, (long long)cfg->micro_batch, gb / D, gb, D,
               fit, pd->world, fit);
    cfg->micro_batch = fit;
}

/* After the plan: where the effective config (every key, as the trainer resolved it: data.tokenizer
 * taken from the dataset) is, and the files the run's figures go to (docs/tracking.md, the
 * Prometheus file: docs/site.md); --dry-run, which writes no run directory, prints the config. */
static void config_note(const tsr_dist *d, const tsr_trainer *t, int dry_run) {
    const tsr_config *cfg = &t->cfg;
    if (d->rank != 0) return;
    if (dry_run) {
        printf("---- effective config (%s) ----\n", cfg->source);
        config_print(stdout, cfg);
        printf("----\n");
    } else {
        char prom[1300];
        printf("effective config (every key): %s/config.cfg\n", cfg->run_dir);
        printf("metrics: %s/metrics.jsonl, TensorBoard %s/tb/", cfg->run_dir, cfg->run_dir);
        if (metrics_prom_path(&t->run, prom, sizeof prom))
            printf(", Prometheus %s (every %g s)", prom, cfg->metrics.prometheus_interval);
        printf("\n");
    }
    fflush(stdout);
}

/* A model `tessera ckpt export --format hf` would refuse (no transformers class holds its shape:
 * OLMo 3 or SmolLM3 shrunk by --set model.d_model without model.head_dim, ...): said once, at
 * start, in the export's own words (hf_exportable), so that the run learns it before it trains. */
static void hf_class_note(const tsr_dist *d, const tsr_trainer *t) {
    char why[512];
    if (d->rank == 0 && hf_exportable(&t->model, why, sizeof why))
        tsr_warn("no Hugging Face class holds this model: `tessera ckpt export --format hf` will "
                 "refuse its checkpoints: %s (docs/hf.md \"Export\")", why);
}

/* The run directory's lock (runlock.h, docs/tessera-train.md "THE RUN DIRECTORY LOCK"): rank 0
 * takes RUN_DIR/tessera.lock before the checkpoint is read and anything is written; every rank
 * learns the outcome. A second trainer on the directory is refused here, having written nothing.
 * *made: rank 0 created RUN_DIR for the lock (removed again if the start fails). */
static int lock_run_dir(const tsr_dist *d, const tsr_trainer *t, tsr_lock *lock, int *made) {
    const tsr_config *cfg = &t->cfg;
    int64_t rc = 0;
    *made = 0;
    /* what would stop the start once run_dir is open is refused before the lock makes run_dir */
    if (d->rank == 0 && !(rc = metrics_prom_check(&t->run))) {
        char path[sizeof cfg->run_dir + 16];
        struct stat st;
        *made = stat(cfg->run_dir, &st) != 0;
        snprintf(path, sizeof path, "%s/tessera.lock", cfg->run_dir);
        if (*made && (fs_make_parents(path) != 0 || (mkdir(cfg->run_dir, 0777) != 0 && errno != EEXIST))) {
            tsr_error("run_dir = \"%s\": cannot create: %s", cfg->run_dir, strerror(errno));
            rc = TSR_EXIT_DATA;
        }
        if (!rc) rc = tsr_lock_take(lock, path, "tessera-train");
    }
    dist_allreduce_sum_i64(&rc, 1); /* rank 0's outcome, on every rank */
    return (int)rc;
}

/* The recipe; with --init-from a Hugging Face directory, its config.json gives every model.*
 * key the recipe leaves out, and one the recipe sets otherwise is refused, all of them in one
 * error, before anything is allocated (docs/hf.md "Import"). */
/* 1 when a --set gives key ("key=..." or "key = ...") */
static int cli_sets_key(const cli *c, const char *key) {
    const size_t n = strlen(key);
    for (int i = 0; i < c->n_sets; i++) {
        const char *s = c->sets[i];
        if (strncmp(s, key, n)) continue;
        s += n;
        while (*s == ' ' || *s == '\t') s++;
        if (*s == '=') return 1;
    }
    return 0;
}

static int load_config(const cli *c, const char *recipe, tsr_config *cfg) {
    if (c->init_from && hf_is_dir(c->init_from) && !hf_is_peft_dir(c->init_from))
        return hf_config_load(c->init_from, recipe, c->sets, c->n_sets, 0, cfg);
    return config_load(cfg, recipe, c->sets, c->n_sets);
}

/* What the trainer takes from the layers above it, given to trainer_init (docs/architecture.md
 * "Hand-overs"): --init-from a Hugging Face directory (src/hf/hf_importer.h), the ICL evaluation
 * (src/eval) and the reader of a run's accounting for its last "cost:" lines
 * (src/report/account_read.h). */
static const trainer_icl_api icl_evaluation = {train_icl_open, train_icl_run, train_icl_close};
static const trainer_uses handed_over = {&hf_checkpointing_importer, &icl_evaluation,
                                         account_run_line};

int main(int argc, char **argv) {
    /* a reward program's keeper (this executable again, started by a rank): nothing else runs */
    if (argc > 1 && !strcmp(argv[1], REWARD_KEEPER_ARG)) return reward_keeper_main(argc, argv);
    tsr_line_buffered(); /* a Slurm log shows each line as it is written */
    blas_fix_coretype(argv);
    tsr_dist d;
    dist_init(&d, &argc, &argv);
    cli c;
    parse_cli(&c, argc, argv, d.rank);
    tsr_config cfg;
    /* Every rank parses the same file and opens the same data: an error there stops all of them
     * with the same status, and rank 0 alone reports it. */
    tsr_log_mute(d.rank != 0);
    tsr_warn_hold(); /* the start's warnings come last, before the first step (tsr_warn_release) */
    char recipe[4200];
    int rc = 0;
    timeplan *tp = c.time ? timeplan_open(&c.tp, &rc) : NULL; /* --time's table, read first */
    timeplan *ftp = c.fit == PLAN_FIT_LAYOUT && !rc ? timeplan_open(&c.tp, &rc) : NULL; /* (its own) */
    /* a plan prices a GPU target whose kernels are not built yet (config_plan_only) */
    config_plan_only(c.plan_world > 0 || c.time || c.gpu_mem > 0);
    if (!rc) rc = load_config(&c, find_recipe(c.config, recipe, sizeof recipe, d.rank), &cfg);
    tsr_trainer t;
    tsr_dist pd = d; /* --plan: the plan's world; rank 0 still prints it */
    if (c.plan_world > 0) pd.world = c.plan_world, pd.local_world = c.plan_per_node;
    if (c.init_from && hf_is_dir(c.init_from)) /* its tokenizer, unless a --set names one */
        dataloader_init_dir(c.init_from, rc ? NULL : &cfg, cli_sets_key(&c, "data.tokenizer"));
    if (!rc) banner(&d, &pd, &cfg, c.plan_world);
    const long long recipe_micro = rc ? 0 : cfg.micro_batch;
    if (!rc && c.plan_world > 0) plan_fit_micro(&cfg, &pd);
    if (!rc && c.gpu_mem > 0) rc = plan_fit_check(&cfg, d.world, c.fit);
    if (!rc) rc = trainer_init(&t, &cfg, &pd, c.dry_run, &handed_over);
    tsr_log_mute(0);
    if (rc) tsr_exit(rc);
    hf_class_note(&pd, &t);
    config_note(&pd, &t, c.dry_run);
    if (tp) trainer_plan_time(&t, tp, recipe_micro); /* (last: --dry-run --time and --plan W --time end alike) */
    timeplan_close(tp);
    if (c.gpu_mem > 0) plan_fit_print(&t.dist, train_gpu_plan_total(&t), c.gpu_mem);
    if (ftp) rc = plan_layout_search(&cfg, &pd, c.gpu_mem, ftp, trainer_layout_trial);
    else if (c.fit) rc = plan_fit_search(&cfg, &pd, c.fit, c.gpu_mem, trainer_plan_trial);
    timeplan_close(ftp);
    tsr_lock lock = {0}; /* held until exit (tsr_exit below): released then */
    if (!c.dry_run) {
        int made = 0;
        stop_install_signals();
        rc = lock_run_dir(&d, &t, &lock, &made);
        /* the checkpoint is read (and a model that differs from the config's refused) before
         * anything is written in run_dir */
        if (!rc) rc = checkpointing_resume(&t, c.resume, c.init_from);
        if (!rc) rc = trainer_open_run_dir(&t);
        tsr_warn_release(); /* (then the steps) */
        if (!rc) rc = trainer_run(&t);
        if (rc && made && !t.out.steps_run) { /* a refused start leaves no run_dir it made (rmdir:
                                                 * only when nothing was written, e.g. a run
                                                 * refused by its activations' check) */
            tsr_lock_release(&lock);
            rmdir(cfg.run_dir);
        }
    }
    trainer_free(&t);
    tsr_exit(rc);
}
