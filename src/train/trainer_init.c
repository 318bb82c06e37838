/* trainer_init.c — the trainer's start and end (trainer.h): the config checked against the world,
 * the tokenizer, the data and the schedule, the model's layout and the plan, the weights, the
 * optimizer's state and the batch buffers, the device, the host memory's check and the save mode
 * it decides; run_dir opened once the checkpoint is read; everything freed. */
#include "trainer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "tokenizer/tokenizer.h"
#include "mesh/binding.h"
#include "train/checkpointing.h"
#include "run/objective.h"
#include "train/train_plan.h"
#include "train/pipeline.h"
#include "train/sdc.h"
#include "telemetry/metrics.h"
#include "telemetry/tboard.h"
#include "train/train_gpu.h"
#include "train/trainer_int.h"


/* A warmup (and wsd's decay) longer than the run is a mistake, not a schedule: exit 1 at start.
 * A max_duration given with --set (a trial run cut short: --set max_duration=10ba on a recipe)
 * gets a warning instead. */
static int check_sched(const tsr_trainer *t, int dry_run) {
    const tsr_config *c = &t->cfg;
    const tsr_sched_steps *sc = &t->sched;
    tsr_duration dd = {0, TSR_DUR_BATCHES};
    duration_parse(c->optim.decay, &dd);
    const int epochs = c->max_duration.unit == TSR_DUR_EPOCHS ||
                       c->optim.warmup.unit == TSR_DUR_EPOCHS ||
                       (c->optim.schedule == TSR_SCHED_WSD && dd.unit == TSR_DUR_EPOCHS);
    /* --dry-run opens no data: a duration in epochs has no steps to compare */
    if (sc->warmup + sc->decay <= sc->total || (dry_run && epochs)) return 0;
    char w[64], m[64];
    duration_format(w, sizeof w, c->optim.warmup);
    duration_format(m, sizeof m, c->max_duration);
    if (c->max_duration_set) {
        if (t->dist.rank == 0)
            tsr_warn("--set max_duration=%s (%lld steps) is shorter than optim.warmup = \"%s\"%s "
                     "(%lld steps): a trial run, the learning rate stays below optim.lr (in a "
                     "recipe this is an error)", m, (long long)sc->total, w,
                     sc->decay ? " plus optim.decay" : "", (long long)(sc->warmup + sc->decay));
        return 0;
    }
    if (t->dist.rank == 0) {
        if (sc->decay)
            tsr_error("optim.warmup = \"%s\" (%lld steps) and optim.decay = \"%s\" (%lld steps) "
                      "are longer than the run, max_duration = \"%s\" (%lld steps): shorten them "
                      "or lengthen max_duration", w, (long long)sc->warmup, c->optim.decay,
                      (long long)sc->decay, m, (long long)sc->total);
        else
            tsr_error("optim.warmup = \"%s\" (%lld steps) is longer than the run, max_duration = "
                      "\"%s\" (%lld steps): the learning rate would never reach optim.lr; "
                      "shorten optim.warmup or lengthen max_duration", w,
                      (long long)sc->warmup, m, (long long)sc->total);
    }
    return TSR_EXIT_USAGE;
}

/* Threads per rank: the config's value, else the cores Slurm gave the task: one per core of the
 * rank's CPU set when it was bound to fewer cores than the node has (srun --cpu-bind), else
 * SLURM_CPUS_PER_TASK when Slurm set it (a cluster whose task plugin does not bind), else the
 * node's cores shared among its ranks. */
int trainer_threads(const tsr_config *cfg, const tsr_dist *d) {
    if (cfg->threads > 0) return cfg->threads;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int bound = binding_cores();
    if (bound > 0 && bound < cores) return bound;
    const char *cpt = getenv("SLURM_CPUS_PER_TASK");
    if (cpt && atoi(cpt) > 0 && atoi(cpt) <= 4096) return atoi(cpt);
    int n = (int)(cores / (d->local_world > 0 ? d->local_world : 1));
    return n > 0 ? n : 1;
}

/* A rank's block that other ranks receive (a ZeRO-1 or checkpoint part of the flat buffer, a
 * zero3 / hsdp shard) is one MPI int count; the buffer itself may pass 2^31 floats (all-reduces
 * are chunked, src/dist/dist.h), and a world or group of one exchanges nothing. Checked before anything
 * is allocated; under --plan a warning (the memory figures still come). */
static int check_int_counts(const tsr_trainer *t, int dry_run) {
    const tsr_model *m = &t->model;
    if (m->EP > 1) { /* the experts' checkpoint exchange moves one layer of a tensor at a time
                      * (model/model_ep.c part_exchange): its counts within E experts */
        size_t x = (size_t)2 * m->FE * m->C, block = (size_t)m->E * x;
        if (block > (size_t)INT32_MAX) {
            if (t->dist.rank == 0)
                (dry_run ? tsr_warn : tsr_error)(
                    "parallel.expert = %d: one layer's %d experts hold %zu floats of expw1, more "
                    "than MPI's int counts (2^31 - 1) carry in the checkpoint's exchange (one "
                    "layer at a time): not supported yet with expert parallelism",
                    m->EP, m->E, block);
            if (!dry_run) return TSR_EXIT_USAGE;
        }
    }
    size_t n = t->model.n_params, W = (size_t)t->part.flat_world;
    if (W == 1) return 0;
    /* (the group was validated already) */
    int G = t->part.fsdp_on && t->part.fsdp_group > 1 ? t->part.fsdp_group : (int)W;
    size_t block = n / (size_t)G + 16; /* parts are cut at multiples of 16 floats */
    if (block <= (size_t)INT32_MAX) return 0;
    if (t->dist.rank == 0)
        (dry_run ? tsr_warn : tsr_error)(
            "%zu parameters over %s%d ranks: %zu per rank exceed MPI's int counts (2^31 - 1); use "
            "more ranks%s", n, G < (int)W ? "hsdp groups of " : "", G, n / (size_t)G,
            G < (int)W ? " or a larger parallel.replica_group" : "");
    return dry_run ? 0 : TSR_EXIT_USAGE;
}

/* The rank partition of the flat parameter buffer: rank r's part is [displs[r], +counts[r]),
 * 16-float aligned, in rank order. ZeRO-1 ranks own their part (optimizer state, update); DDP
 * ranks own everything but still use the partition to split checkpoint I/O. */
static int plan_shards(tsr_trainer *t) {
    size_t n = t->model.n_params, W = (size_t)t->part.flat_world; /* (the world, or tensor_data) */
    const int me = t->part.flat_rank;
    t->part.part_counts = tsr_malloc(W * sizeof(size_t));
    t->part.part_displs = tsr_malloc(W * sizeof(size_t));
    for (size_t r = 0; r < W; r++) {
        size_t lo = n * r / W / 16 * 16, hi = r + 1 == W ? n : n * (r + 1) / W / 16 * 16;
        t->part.part_displs[r] = lo;
        t->part.part_counts[r] = hi - lo;
    }
    t->part.zero1 = t->cfg.sharding == TSR_SHARD_ZERO1 && W > 1; /* (zero3 and hsdp: model/fsdp.h) */
    if (t->part.zero1) /* the optimizer's cuts (Muon: each matrix whole in one part) */
        optim_partition(&t->part.optim, n, (int)W, t->part.part_displs, t->part.part_counts);
    t->part.shard_lo = t->part.zero1 ? t->part.part_displs[me] : 0;
    t->part.shard_hi = t->part.zero1 ? t->part.shard_lo + t->part.part_counts[me] : n;
    /* (the GPU reduce-scatters on the device; LoRA's base has no gradients) */
    if (t->part.zero1 && t->cfg.device != TSR_DEVICE_CUDA && !t->part.lora_on)
        t->part.gslice = t->be.ops->alloc((t->part.shard_hi - t->part.shard_lo) * sizeof(float));
    return 0;
}

/* ZeRO-3 / HSDP: the model's weights live in shards. Each rank draws its shard's values alone
 * (the initial weights are a pure function of the seed and the element: the same bits as the full
 * initialisation, no full copy on any rank). */
static void init_sharded(tsr_trainer *t, uint64_t seed) {
    tsr_model *m = &t->model;
    fsdp_init(&t->part.fsdp, m, &t->mesh, t->part.lora_on);
    fsdp_init_weights(&t->part.fsdp, seed);
    model_alloc_slopes(m);
}

/* tensor parallelism: the checkpoints' exchange (model/model_tp.h tp_io) from what this rank
 * holds of its split layout: its part over its tensor_data group (ddp, zero1), or under zero3 /
 * hsdp its part of its sharding group's partition in the first group (the others none).
 * Collective. */
static void tp_io_open(tsr_trainer *t) {
    const tsr_fsdp *f = &t->part.fsdp;
    size_t lo = t->part.part_displs[t->part.flat_rank];
    size_t hi = lo + t->part.part_counts[t->part.flat_rank];
    if (t->part.fsdp_on) {
        lo = f->gindex == 0 ? f->part_displs[f->grank] : 0;
        hi = f->gindex == 0 ? lo + f->part_counts[f->grank] : 0;
    }
    tp_io_plan(&t->part.tpio, &t->model, &t->mesh, lo, hi);
}

/* This node's available host memory in KiB (/proc/meminfo's MemAvailable), -1 when unknown.
 * Test hook: TSR_FAULT="mem_available:KIB". */
static long long mem_available_kib(void) {
    long long kib = -1;
    const char *fault = tsr_fault("mem_available");
    if (fault) return atoll(fault);
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib;
}

/* Host blocks of 64 MiB and more are committed when first written (kernels/cpu/cpu_ops.c): a GPU
 * run's host copies of the gradients and AdamW state at its first checkpoint, a CPU run's at its
 * first step. Each node's first rank warns at start when the node's ranks (its own untouched
 * bytes times the ranks on the node) will need more than kib, rather than leave it to an
 * out-of-memory kill hours later. */
static void host_memory_warn(const tsr_trainer *t, long long kib) {
    if (t->dist.local_rank != 0) return;
    const int ranks = t->dist.local_world > 0 ? t->dist.local_world : 1;
    const double need = (double)cpu_ops_unresident_bytes() * ranks, have = 1024.0 * (double)kib;
    if (kib < 0 || need <= have) return;
    tsr_warn("host memory: this node's %d rank(s) will commit %.2f GiB more when they first write "
             "their host buffers (%s), more than the %.2f GiB the node has available (/proc/meminfo "
             "MemAvailable): the run may be killed then; use fewer ranks per node, "
             "parallel.sharding = \"zero3\", or nodes with more memory",
             ranks, need / 1073741824.0,
             t->cfg.device == TSR_DEVICE_CUDA
                 ? "the host copies of the gradients and AdamW state, at the first checkpoint"
                 : "the gradients and AdamW state, at the first step",
             have / 1073741824.0);
}

/* save_async_copy: `auto` copies in the save step on a CPU run whose threads take every core a
 * rank may run on (the cores it is bound to, else the node's: a background copy there takes a
 * rank's core while the others wait for it at every all-reduce), else on the writer thread */
static int copy_in_step(const tsr_trainer *t) {
    if (t->cfg.save_async_copy != TSR_SNAPCOPY_AUTO)
        return t->cfg.save_async_copy == TSR_SNAPCOPY_STEP;
    if (t->cfg.device != TSR_DEVICE_CPU) return 0;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int bound = binding_cores(), threads = trainer_threads(&t->cfg, &t->dist);
    if (bound > 0 && bound < cores) return threads >= bound; /* a rank bound to its own cores (srun) */
    const long ranks = t->dist.local_world > 0 ? t->dist.local_world : 1;
    return threads * ranks >= cores;
}

/* save_async: each node's first rank checks that its ranks' snapshots (the host copy a background
 * save takes, checkpointing_snapshot_bytes) fit in kib beside what the run still commits; when
 * one node's do not, every rank saves synchronously (rank 0 warns): not an out-of-memory kill at
 * the first save. Collective. */
static void choose_save_mode(tsr_trainer *t, long long kib) {
    t->ck.committed = -1;
    t->ck.async = t->cfg.save_async;
    t->ck.copy_in_step = copy_in_step(t);
    if (!t->ck.async) return;
    const int ranks = t->dist.local_world > 0 ? t->dist.local_world : 1;
    const double snap = (double)t->ck.snap_plan;
    const double need = ((double)cpu_ops_unresident_bytes() + snap) * ranks;
    int64_t short_nodes = t->dist.local_rank == 0 && kib >= 0 && need > 1024.0 * (double)kib;
    dist_allreduce_sum_i64(&short_nodes, 1);
    if (!short_nodes) return;
    t->ck.async = 0;
    if (t->dist.rank == 0)
        tsr_warn("save_async: the snapshot of a background save (%.2f GiB of host memory per rank) "
                 "does not fit beside the run on %lld node(s) (rank 0's node: %d rank(s) need "
                 "%.2f GiB, %.2f GiB available, /proc/meminfo MemAvailable): every checkpoint is "
                 "written synchronously, training stopping for each save; set save_async = false "
                 "to choose that, or use more nodes or parallel.sharding = \"zero3\"",
                 snap / 1073741824.0, (long long)short_nodes, ranks, need / 1073741824.0,
                 1024.0 * (double)kib / 1073741824.0);
}

/* device = cuda without a CUDA backend in this build (or its library) is refused before anything
 * starts (the configuration itself loads in every build: `tessera eval` reads a GPU run's stored
 * config). */
static int cuda_config_check(int rank) {
    char why[1400];
    if (gpu_backend(why, sizeof why)) return 0;
    if (rank == 0) tsr_error("device = \"cuda\": %s (device); or use device = \"cpu\"", why);
    return TSR_EXIT_USAGE;
}

/* The tokenizer the run names (data.tokenizer: the samples, the ICL tasks) is loaded once at start
 * and kept for the samples, so a wrong name or missing files stop the run before anything is
 * written, not after the last step. */
static int open_tokenizer(tsr_trainer *t) {
    if (!t->cfg.data.tokenizer[0]) return 0;
    int rc = tokenizer_open(&t->tok, t->cfg.data.tokenizer);
    if (rc) {
        t->tok = NULL;
        tsr_error("data.tokenizer = \"%s\": cannot load it (above); it decodes the samples and "
                  "the ICL tasks: fix it, or set data.tokenizer = \"\" to print token ids",
                  t->cfg.data.tokenizer);
    }
    return rc;
}

/* icl_tasks: the suite, opened with the program's ICL evaluation (t->uses.icl). */
static int open_icl(tsr_trainer *t) {
    if (t->cfg.n_icl == 0) return 0;
    if (!t->uses.icl) {
        if (t->dist.rank == 0)
            tsr_error("icl_tasks: this program has no ICL evaluation (tessera-train has): remove "
                      "icl_tasks from the recipe");
        return TSR_EXIT_USAGE;
    }
    return t->uses.icl->open(&t->icl, &t->cfg, t->tok, t->model.V, t->micro, t->T);
}

/* What each rank reads for itself at start (its GPU, the tokenizer's and the data's files) can
 * differ between nodes: node-local copies, a mount missing on one node. Every rank calls this
 * with its outcome rc, and all return the worst status when any failed: a rank that stopped alone
 * would leave the others waiting in their next collective. Only rank 0 reports start-up errors
 * (train_main.c), so when the ranks disagree it names the first rank that failed and its host. */
static int agree_start(const tsr_trainer *t, int rc, const char *what) {
    int64_t n[2] = {1, rc != 0}; /* ranks, failed ranks (t->dist is --plan's world) */
    dist_allreduce_sum_i64(n, 2);
    if (n[1] == 0) return 0;
    int worst = rc, first = rc ? t->dist.rank : INT_MAX;
    dist_allreduce_max_int(&worst, 1);
    dist_allreduce_min_int(&first, 1);
    char host[sizeof t->dist.host];
    memcpy(host, t->dist.host, sizeof host);
    dist_bcast(host, sizeof host, first);
    host[sizeof host - 1] = '\0';
    if (n[1] < n[0] && t->dist.rank == 0) {
        if (rc)
            tsr_error("rank 0 could not use its %s (above), but %lld of the other %lld ranks could: "
                      "the files differ between nodes (node-local copies?)", what,
                      (long long)(n[0] - n[1]), (long long)(n[0] - 1));
        else
            tsr_error("%lld of %lld ranks could not use the %s that rank 0 opened, the first rank "
                      "%d on %s: the files differ between nodes (node-local copies, a missing "
                      "mount?); its own message is muted (rank 0 reports start-up errors): run "
                      "on that node alone to see it%s",
                      (long long)n[1], (long long)n[0], what, first, host,
                      strcmp(what, "data") == 0 ? ", or check its copy with 'tessera verify-data'"
                                                : "");
    }
    return worst;
}

/* The rank mesh (mesh/mesh.h: every group, built once; parallel.tensor's groups within a node)
 * and, with parallel.context = N > 1, the CPU model's ring over its context group. A plan
 * (dry_run) has no MPI world of its size: its mesh is the numbers alone. */
static int mesh_open(tsr_trainer *t, int dry_run) {
    mesh_build(&t->mesh, &t->cfg, &t->dist, dry_run);
    const tsr_mesh_group *context = mesh_group(&t->mesh, TSR_MESH_CONTEXT);
    if (context->cpu) ring_init_mpi(&t->ring, context->cpu);
    return mesh_check_tensor(&t->mesh, &t->cfg, &t->dist, dry_run);
}

static void mesh_close(tsr_trainer *t) {
    ring_free(&t->ring);
    mesh_free(&t->mesh);
}

/* parallel.tensor on device = cuda with a mode its split model does not run with yet
 * (config_tensor_cuda_pair): a plan (--dry-run, --plan, --time) prices it, a run is refused
 * (docs/parallelism.md "Tensor parallelism on the GPU") */
static int tensor_device_check(const tsr_config *cfg, int rank, int dry_run) {
    const char *value, *key = config_tensor_cuda_pair(cfg, &value);
    if (!key) return 0;
    if (rank == 0)
        (dry_run ? tsr_warn : tsr_error)(
            "parallel.tensor = %lld with device = \"cuda\" and %s %s: tensor parallelism on "
            "the GPU does not run with it yet%s", (long long)cfg->tensor, key, value,
            dry_run ? "; the plan below prices it as the GPU would run it"
                    : ": change it, or set parallel.tensor = 1 or device = \"cpu\" "
                      "(docs/parallelism.md \"Tensor parallelism on the GPU\")");
    return dry_run ? 0 : TSR_EXIT_USAGE;
}

/* The view the layers below the trainer take (run/run.h): its parts and counters, lent */
static void init_view(tsr_trainer *t) {
    t->run = (tsr_run){
        .cfg = &t->cfg, .dist = &t->dist, .mesh = &t->mesh, .model = &t->model, .part = &t->part,
        .be = &t->be, .out = &t->out, .data = &t->data, .objective = t->objective,
        .T = &t->T, .micro = &t->micro, .per_rank = &t->per_rank, .step = &t->step,
        .total_steps = &t->total_steps, .tokens_seen = &t->tokens_seen};
}

/* trainer_init's first step: the trainer from the config and the world; the GPU's and the
 * tokenizer's checks, agreed by every rank */
static int init_start(tsr_trainer *t, const tsr_config *cfg, const tsr_dist *d, int dry_run,
                      const trainer_uses *uses) {
    memset(t, 0, sizeof *t);
    if (uses) t->uses = *uses;
    t->cfg = *cfg;
    t->dist = *d;
    t->objective = objective_of(cfg->objective); /* (the one choice: run/objective.h) */
    init_view(t);
    if (t->objective->create) t->run.objective_state = t->objective->create(); /* (its own) */
    t->be.ops = &tsr_cpu_ops;
    t->T = (int)cfg->seq_len;
    TSR_CHECK(config_check_world(cfg, d->world));
    TSR_CHECK(tensor_device_check(cfg, d->rank, dry_run));
    dataloader_share_indexes(cfg, d); /* (collective: before any check a rank may fail alone) */
    int rc = cfg->device == TSR_DEVICE_CUDA ? cuda_config_check(d->rank) : 0;
    if (!rc) rc = dataloader_tokenizer(&t->cfg, d); /* data.tokenizer: the dataset's, unless named */
    if (!rc) rc = open_tokenizer(t);
    t->run.tok = t->tok;
    return agree_start(t, rc, "GPU or tokenizer");
}

/* the mesh, the batch of a rank and its microbatch, the threads and the peak FLOP/s */
static int init_batch(tsr_trainer *t, const tsr_config *cfg, const tsr_dist *d, int dry_run) {
    TSR_CHECK(mesh_open(t, dry_run));
    t->per_rank = cfg->global_batch / t->mesh.D; /* the data ranks' share */
    t->auto_micro = cfg->micro_batch == 0; /* "auto": start with the whole per-rank batch */
    t->micro = t->auto_micro ? trainer_micro_at_most(t, t->per_rank) : (int)cfg->micro_batch;
    if (t->objective->rows_per_sample) /* rows: (grpo) a prompt's completions */
        t->micro *= (int)t->objective->rows_per_sample(cfg);
    t->be.threads = trainer_threads(cfg, d);
    cpu_ops_set_threads(t->be.threads);
    t->out.peak_flops = cfg->peak_flops > 0 ? cfg->peak_flops
                                            : metrics_peak_flops("cpu", t->be.threads);
    return 0;
}

/* The data loader over the run's datasets (data/dataloader.h): what the objective's samples are,
 * this rank's rows of the batch */
static int open_data(tsr_trainer *t) {
    const dataloader_opts o = {
        .cfg = &t->cfg, .dist = &t->dist, .T = t->T, .per_rank = t->per_rank,
        .data_rank = t->mesh.data.rank, .mesh = &t->mesh, .pairs = t->objective->pairs,
        .prompts = t->objective->prompts, .segment_starts = t->objective->segment_starts,
        .tok = t->tok};
    return dataloader_open(&t->data, &o);
}

/* the data (not for a plan), and the steps it makes: the schedule, eval and save intervals */
static int init_schedule(tsr_trainer *t, const tsr_config *cfg, int dry_run) {
    TSR_CHECK(agree_start(t, dry_run ? 0 : open_data(t), "data"));
    if (!dry_run && t->objective->start) /* (grpo: docs/rl.md) */
        TSR_CHECK(t->objective->start(&t->run, t->run.objective_state));
    uint64_t epoch_samples = dry_run ? 1 : dataloader_epoch_samples(&t->data);
    t->epoch_samples = epoch_samples;
    t->sched = sched_steps_of(cfg, epoch_samples);
    t->total_steps = t->sched.total;
    t->warmup_steps = t->sched.warmup;
    TSR_CHECK(check_sched(t, dry_run));
    t->eval_every = duration_to_steps(cfg->eval_interval, cfg->global_batch, cfg->seq_len, epoch_samples);
    t->save_every = duration_to_steps(cfg->save_interval, cfg->global_batch, cfg->seq_len, epoch_samples);
    guard_init(&t->guard, cfg);
    return 0;
}

/* the model the adapters are laid out over: the whole model's layers under a pipeline (each
 * rank holds every stage's adapters, replicated as elsewhere: docs/pipeline.md), else the run's */
static tsr_model *lora_model(tsr_trainer *t) {
    return t->part.pp_on ? &t->part.pp.global : &t->model;
}

/* lora.rank > 0: the adapters' layout now (the plan shows it), their store later */
static void init_lora_plan(tsr_trainer *t, const tsr_config *cfg) {
    unsigned mask;
    char why[400];
    if (config_lora_targets(&cfg->model, cfg->lora.targets, &mask, why, sizeof why) != 0)
        tsr_die(TSR_EXIT_INTERNAL, "lora.targets: %s (the config check let it through)", why);
    t->part.lora_on = 1;
    lora_plan(&t->part.lora, lora_model(t), (int)cfg->lora.rank, cfg->lora.alpha,
              cfg->lora.dropout, mask);
    /* MFU counts the work done (docs/lora.md): the base's weight-gradient products (2N of
     * 6N) are skipped, the adapters' three products (6 per adapter parameter) added */
    t->out.flops_per_token += 6.0 * (double)t->part.lora.n -
                              2.0 * (double)lora_model(t)->n_params_counted;
}

/* parallel.tensor = T > 1: the model becomes this rank's split of its tensor group's (the
 * layout; model/model_tp.h), whose flat layout the tensor_data group's ranks share; else the
 * flat layout is the world's */
static void init_tensor(tsr_trainer *t, const tsr_config *cfg) {
    const tsr_mesh_group *tg = mesh_group(&t->mesh, TSR_MESH_TENSOR);
    const tsr_mesh_group *td = mesh_group(&t->mesh, TSR_MESH_TENSOR_DATA);
    t->part.flat_rank = t->dist.rank, t->part.flat_world = t->dist.world;
    if (t->mesh.T <= 1) return;
    t->part.tp_on = 1;
    model_set_tensor(&t->model, &t->part.tp, t->mesh.T, tg->rank, cfg->sequence);
    tp_attach(&t->part.tp, &t->mesh);
    t->part.flat = td->cpu; /* (NULL in a plan) */
    t->part.flat_rank = td->rank, t->part.flat_world = td->size;
}

/* the model's layout (nothing allocated but the MoE figures): sharding, experts, context,
 * adapters, references, and the FLOPs per token they make */
static int init_layout(tsr_trainer *t, const tsr_config *cfg, const tsr_dist *d) {
    /* (tensor parallelism: a tensor_data group's ranks share the state, a node's / T of them) */
    const int T = t->mesh.T;
    TSR_CHECK(run_shard_group(cfg, d->world / T, d->local_world / T > 0 ? d->local_world / T
                              : 1, &t->part.fsdp_group));
    t->part.fsdp_on = cfg->sharding == TSR_SHARD_ZERO3 || cfg->sharding == TSR_SHARD_HSDP;
    model_init(&t->model, &cfg->model, t->T, t->be.ops);
    model_set_expert_parallel(&t->model, (int)cfg->expert);
    init_tensor(t, cfg);
    TSR_CHECK(pipeline_init(t)); /* (parallel.pipeline: this rank's stages, train/pipeline.h) */
    model_set_context(&t->model, t->mesh.N);
    if (mesh_group(&t->mesh, TSR_MESH_CONTEXT)->cpu) t->model.ring = &t->ring;
    t->out.flops_per_token = model_flops_per_token(&t->model, t->T);
    if (cfg->lora.rank > 0) init_lora_plan(t, cfg);
    if (t->objective->references) /* (and their FLOPs) */
        t->objective->references(&t->run, t->run.objective_state);
    if (t->model.E) { /* (the whole model's layers: a pipeline rank's part has its own) */
        t->out.moe_layers = (t->model.global ? t->model.global : &t->model)->LM;
        t->out.moe = tsr_calloc((size_t)t->out.moe_layers * (size_t)(2 + t->model.E),
                                sizeof(double));
    }
    return 0;
}

/* the plan (a dry run's: the layout only, nothing allocated); device = cuda: the GPU's
 * switches and its plan */
static int init_plans(tsr_trainer *t, const tsr_config *cfg, int dry_run) {
    trainer_plan_print(t, dry_run);
    if (cfg->device != TSR_DEVICE_CUDA) return 0;
    TSR_CHECK(train_gpu_switches(t));
    train_gpu_print_plan(t);
    return 0;
}

/* the weights: sharded, replicated or a frozen base; the adapters' and the experts' stores */
static void init_weights(tsr_trainer *t, const tsr_config *cfg) {
    if (t->part.fsdp_on) {
        init_sharded(t, (uint64_t)cfg->seed);
    } else {
        if (t->part.lora_on) model_alloc_frozen(&t->model);
        else model_alloc_params(&t->model);
        model_init_weights(&t->model, (uint64_t)cfg->seed);
    }
    if (t->part.lora_on) {
        const tsr_lora plan = t->part.lora;
        lora_init(&t->part.lora, lora_model(t), plan.R, cfg->lora.alpha, cfg->lora.dropout,
                  plan.mask);
        t->model.lora = &t->part.lora; /* (a pipeline's chunks take it: pp_attach) */
        lora_set_context(&t->part.lora, t->mesh.N, mesh_group(&t->mesh, TSR_MESH_CONTEXT)->rank,
                         t->T);
        lora_init_weights(&t->part.lora, (uint64_t)cfg->seed);
    }
    if (t->model.EP > 1) {
        t->part.ep_on = 1;
        ep_init(&t->part.ep, &t->model, &t->mesh);
        ep_init_weights(&t->part.ep, &t->model, (uint64_t)cfg->seed);
    }
}

/* a run's state: the data plan and staging, the weights, the ICL tasks, the optimizer's state */
static int init_state(tsr_trainer *t, const tsr_config *cfg) {
    TSR_CHECK(dataloader_plan(&t->data, t->total_steps));
    TSR_CHECK(dataloader_stage_open(&t->data));
    init_weights(t, cfg);
    pipeline_open(t);
    TSR_CHECK(open_icl(t)); /* the task files are read before the first step */
    if (cfg->device != TSR_DEVICE_CUDA) /* (device = cuda: the library's, src/gpu/gpu_train.c) */
        optim_init(&t->part.optim, &cfg->optim, &t->model,
                   t->part.fsdp_on ? &t->part.fsdp : NULL, t->be.ops);
    TSR_CHECK(plan_shards(t));
    if (trainer_split(t)) tp_io_open(t); /* (tensor, pipeline) */
    size_t owned = t->part.fsdp_on ? t->part.fsdp.shard_n : t->part.shard_hi - t->part.shard_lo;
    if (!t->part.lora_on) { /* (a frozen base has no AdamW state) */
        t->part.m = t->be.ops->alloc(owned * sizeof(float));
        t->part.v = t->be.ops->alloc(owned * sizeof(float));
    }
    /* the batch's buffers are the loader's (dataloader_open); the activations are allocated by
     * the first step (trainer_ensure_acts), where micro_batch = auto can still back off */
    return 0;
}

/* the plans, the device (the GPU's), the silent-data-corruption checks (what the fingerprints
 * cover, the replay's buffers, the injected faults checked: train/sdc.h), the CPU's memory fault
 * of a test (its limit above what is live, those buffers included), the host memory's check and
 * what it decides: the save mode, the snapshot; the step strategy */
static int init_device(tsr_trainer *t, const tsr_config *cfg) {
    TSR_CHECK(init_plans(t, cfg, 0));
    if (cfg->device == TSR_DEVICE_CUDA) TSR_CHECK(train_gpu_init(t));
    TSR_CHECK(sdc_init(t));
    if (cfg->device != TSR_DEVICE_CUDA) trainer_fault_oom(t);
    const long long kib = mem_available_kib();
    host_memory_warn(t, kib);
    choose_save_mode(t, kib);
    checkpointing_snapshot_alloc(t);
    train_gpu_pin_snapshot(t);
    t->be.strategy = trainer_pick_strategy(t);
    return 0;
}

int trainer_init(tsr_trainer *t, const tsr_config *cfg, const tsr_dist *d, int dry_run,
                 const trainer_uses *uses) {
    TSR_CHECK(init_start(t, cfg, d, dry_run, uses));
    TSR_CHECK(init_batch(t, cfg, d, dry_run));
    TSR_CHECK(init_schedule(t, cfg, dry_run));
    TSR_CHECK(init_layout(t, cfg, d));
    TSR_CHECK(check_int_counts(t, dry_run));
    t->ck.snap_plan = checkpointing_snapshot_bytes(t); /* (the plan shows them) */
    t->ck.io_plan = checkpointing_io_bytes(t);
    if (dry_run) return init_plans(t, cfg, 1); /* --dry-run, --plan */
    TSR_CHECK(init_state(t, cfg));
    TSR_CHECK(init_device(t, cfg));
    return 0; /* run_dir is not touched yet: trainer_open_run_dir, once the checkpoint is read */
}

/* The objective's reference built, copied into run_dir or read back (dpo, grpo: run/objective.h);
 * one whose opening runs forwards (dpo's reference pass) gets the activations first, and an
 * evaluation's scope (ranks run different numbers of forwards: run/run.h) */
static int open_reference(tsr_trainer *t) {
    const tsr_objective *o = t->objective;
    void *s = t->run.objective_state;
    const int forwards = o->reference_forwards && o->reference_forwards(s);
    if (forwards) {
        trainer_ensure_acts(t);
        run_eval_scope(&t->run, 1);
    }
    int rc = o->open_reference(&t->run, s);
    if (forwards) run_eval_scope(&t->run, 0);
    return rc;
}

int trainer_open_run_dir(tsr_trainer *t) {
    /* a resume's stored reference is checked before anything is written (dpo:
     * posttrain/dpo_ref.h) */
    if (t->objective->check_reference)
        TSR_CHECK(t->objective->check_reference(&t->run, t->run.objective_state));
    TSR_CHECK(trainer_acts_fit(t)); /* a run that does not fit writes nothing either */
    int64_t rc = t->dist.rank == 0 ? metrics_open_run_dir(&t->run) : 0;
    dist_allreduce_sum_i64(&rc, 1); /* rank 0's outcome, on every rank */
    if (!rc) metrics_log_start(&t->run); /* a process's first record (docs/tracking.md) */
    if (!rc) checkpointing_room_warn(t);
    if (!rc && t->out.start_load.what[0]) /* then the checkpoint it read, before run_dir was opened */
        metrics_log_checkpoint(&t->run, t->out.start_load.what, t->out.start_load.path,
                               t->out.start_load.seconds,
                               t->out.start_load.bytes);
    if (!rc && t->objective->open_reference) rc = open_reference(t);
    return (int)rc;
}

void trainer_free(tsr_trainer *t) {
    sdc_free(t);
    train_gpu_free(t);
    free(t->ck.snap);
    if (t->part.gslice) t->be.ops->free(t->part.gslice);
    free(t->part.part_counts);
    free(t->part.part_displs);
    if (t->part.m) t->be.ops->free(t->part.m);
    if (t->part.v) t->be.ops->free(t->part.v);
    optim_free(&t->part.optim); /* (before the fsdp plan it points to) */
    fsdp_free(&t->part.fsdp);
    pipeline_free(t); /* (its activation sets' records of the experts' exchange first) */
    ep_free(&t->part.ep);
    lora_free(&t->part.lora);
    if (t->objective && t->objective->release) t->objective->release(t->run.objective_state);
    model_free(&t->model);
    tp_io_free(&t->part.tpio);
    tp_free(&t->part.tp);
    dataloader_close(&t->data);
    mesh_close(t);
    if (t->uses.icl) t->uses.icl->close(&t->icl);
    if (t->tok) tokenizer_free(t->tok);
    guard_free(&t->guard);
    if (t->out.metrics) fclose(t->out.metrics);
    if (t->out.tb) tboard_close(t->out.tb); /* every record is flushed already: this only closes */
    free(t->out.moe);
    memset(t, 0, sizeof *t);
}
