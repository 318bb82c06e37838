/* trainer.c — the training steps over the sharding strategies, the update through the optimizer
 * slot (optim/optim.h) with schedule and clipping, evaluation. */
#include "trainer.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "tokenizer/tokenizer.h"
#include "mesh/binding.h"
#include "train/checkpointing.h"
#include "train/objective.h"
#include "plan/plan.h"
#include "telemetry/metrics.h"
#include "telemetry/tboard.h"
#include "train/train_data.h"
#include "train/train_gpu.h"
#include "train/watchdog.h"


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

/* Test-only faults inside a step's compute (TSR_FAULT, see maybe_fault): "slow:MS:RANK" makes RANK
 * sleep MS ms in every step (a straggler); "hang:STEP:RANK" makes it stop for good in step STEP. */
static void compute_fault(const tsr_trainer *t) {
    watchdog_slow_fault("slow", t->dist.rank);
    watchdog_hang_fault("hang", t->step + 1, t->dist.rank);
}

/* Test-only (TSR_FAULT="nan:STEP:RANK" or "nan:FROM-TO:RANK"): RANK's gradient gets a NaN in
 * step STEP (1-based), or in every step FROM..TO. */
static void nan_fault(tsr_trainer *t) {
    const char *f = tsr_fault("nan");
    long long from, to, rank;
    if (!f) return;
    if (sscanf(f, "%lld-%lld:%lld", &from, &to, &rank) != 3) {
        if (sscanf(f, "%lld:%lld", &from, &rank) != 2) return;
        to = from;
    }
    if (t->step + 1 >= from && t->step + 1 <= to && rank == t->dist.rank) {
        if (t->part.lora_on) t->part.lora.g[t->part.lora.n / 2] = NAN;
        else if (t->part.fsdp_on) t->part.fsdp.grads[t->part.fsdp.shard_n / 2] = NAN;
        else t->model.grads[t->model.n_params / 2] = NAN;
    }
}

/* The step's strategies (chosen once, by trainer_pick_strategy): how this run computes, sums and
 * measures its gradients, which part of the weights it updates, and how updated weights come back
 * to the ranks that compute. The update itself is the optimizer slot's (optim/optim.h), whatever
 * the optimizer: the strategy only names the part. ddp: every rank owns the whole flat buffer,
 * gradients are all-reduced; zero1: rank r owns its part [shard_lo, shard_hi) and its summed
 * gradients (reduce-scatter into gslice), the updated parts are all-gathered; fsdp (zero3, hsdp):
 * weights, gradients and moments are fsdp shards, the layers' gradients are reduce-scattered
 * during backward; lora: the adapters, replicated; device (device = cuda): the library sums the
 * gradients during backward and runs the optimizer on the device. */
typedef struct trainer_strategy {
    const char *name;
    /* forward and backward over this rank's batch in microbatches, gradients scaled by scale:
     * returns this rank's loss sum */
    double (*compute)(tsr_trainer *t, float scale);
    void (*reduce)(tsr_trainer *t);   /* the gradients summed over the ranks into the owned part */
    double (*sumsq)(tsr_trainer *t);  /* squared norm of the summed gradients, equal on all ranks */
    /* the part of the weights this rank updates, for the optimizer slot; NULL: the device's
     * library updates its own (device = cuda) */
    optim_part (*owned)(tsr_trainer *t);
    void (*gather)(tsr_trainer *t);   /* the updated weights to every rank that computes */
    size_t (*mem_peak)(void);         /* the training allocator's peak bytes */
} trainer_strategy;

static void zero_flat_grads(tsr_trainer *t) {
    t->be.ops->zero(t->model.grads, t->model.n_params * sizeof(float));
}

static void zero_shard_grads(tsr_trainer *t) { fsdp_zero_grads(&t->part.fsdp); }

/* MoE: the microbatch's statistics into the step's (docs/moe.md) */
static void moe_stats_add(tsr_trainer *t, const int32_t *tg, float scale) {
    if (t->out.moe) model_moe_stats_add(&t->model, tg, t->micro, t->T, scale, t->out.moe);
}


/* CPU: the microbatches' forward and backward (the gradients accumulate), after zero; or the
 * objective's own pass (DPO's over pairs, GRPO's over completions: train/objective.h). */
static double cpu_compute(tsr_trainer *t, float scale, void (*zero)(tsr_trainer *)) {
    tsr_model *m = &t->model;
    double loss_sum = 0.0;
    zero(t);
    if (t->part.ep_on) ep_zero_grads(&t->part.ep);
    if (t->objective->pass) { /* a pass of the objective's own (dpo, grpo: train/objective.h) */
        loss_sum = t->objective->pass(t, scale);
        nan_fault(t);
        return loss_sum;
    }
    for (int64_t b = 0; b < t->per_rank; b += t->micro) {
        const int32_t *in = t->data.inputs + b * t->T, *tg = t->data.targets + b * t->T;
        trainer_lora_pass(t, b);
        m->starts = t->data.starts ? t->data.starts + b * t->T : NULL;
        loss_sum += model_forward(m, in, tg, t->micro, t->T);
        moe_stats_add(t, tg, scale);
        model_backward(m, in, tg, t->micro, t->T, scale);
    }
    m->starts = NULL;
    if (t->part.lora_on) lora_set_pass(&t->part.lora, 0, 0, 0); /* evaluations: no dropout */
    nan_fault(t);
    return loss_sum;
}

static double flat_compute(tsr_trainer *t, float scale) {
    return cpu_compute(t, scale, zero_flat_grads);
}

static double shard_compute(tsr_trainer *t, float scale) {
    return cpu_compute(t, scale, zero_shard_grads);
}

static void nothing(tsr_trainer *t) { (void)t; }

/* LoRA (model/model_lora.h): the adapters' gradients, replicated on every rank whatever the
 * sharding; the base has none */
static void lora_zero_grads(tsr_trainer *t) {
    t->be.ops->zero(t->part.lora.g, t->part.lora.n * sizeof(float));
}

static double lora_compute(tsr_trainer *t, float scale) {
    return cpu_compute(t, scale, lora_zero_grads);
}

static void lora_reduce(tsr_trainer *t) {
    if (t->dist.world > 1) dist_allreduce_sum_f32(t->part.lora.g, t->part.lora.n);
}

static double lora_sumsq(tsr_trainer *t) {
    return t->be.ops->sumsq(t->part.lora.g, t->part.lora.n);
}

static void ddp_reduce(tsr_trainer *t) {
    if (t->dist.world > 1) dist_allreduce_sum_f32(t->model.grads, t->model.n_params);
}

static void zero1_reduce(tsr_trainer *t) {
    dist_reduce_scatter_sum_f32(t->model.grads, t->part.gslice, t->part.part_counts);
}

/* the layers' gradients are reduce-scattered already: the root's, and hsdp's replica sum */
static void fsdp_reduce(tsr_trainer *t) { fsdp_finish_grads(&t->part.fsdp); }

/* the summed gradients of the owned part [shard_lo, shard_hi) of the flat layout */
static float *owned_grads(tsr_trainer *t) {
    return t->part.zero1 ? t->part.gslice : t->model.grads;
}

static double ddp_sumsq(tsr_trainer *t) {
    return t->be.ops->sumsq(t->model.grads, t->part.shard_hi - t->part.shard_lo);
}

static double zero1_sumsq(tsr_trainer *t) {
    double sq = t->be.ops->sumsq(t->part.gslice, t->part.shard_hi - t->part.shard_lo);
    dist_allreduce_sum_f64(&sq, 1);
    return sq;
}

static double fsdp_sumsq(tsr_trainer *t) {
    double sq = t->be.ops->sumsq(t->part.fsdp.grads, t->part.fsdp.shard_n);
    dist_group_allreduce_sum_f64(t->part.fsdp.group, &sq, 1); /* replicas are equal */
    return sq;
}

/* the parts the optimizer slot updates (optim/optim.h) */
static optim_part flat_owned(tsr_trainer *t) {
    return (optim_part){OPTIM_PART_FLAT, t->model.params, owned_grads(t), t->part.m, t->part.v,
                        t->part.shard_lo, t->part.shard_hi};
}

static optim_part shard_owned(tsr_trainer *t) {
    tsr_fsdp *f = &t->part.fsdp;
    return (optim_part){OPTIM_PART_SHARD, f->params, f->grads, t->part.m, t->part.v, 0, f->shard_n};
}

static optim_part lora_owned(tsr_trainer *t) {
    tsr_lora *lo = &t->part.lora;
    return (optim_part){OPTIM_PART_LORA, lo->w, lo->g, lo->m, lo->v, 0, lo->n};
}

/* parallel.expert: the experts' store, on every rank of their EDP group (model_ep.h) */
static optim_part ep_owned(tsr_trainer *t) {
    tsr_ep *ep = &t->part.ep;
    return (optim_part){OPTIM_PART_EXPERTS, ep->w, ep->g, ep->m, ep->v, 0, ep->n};
}

/* The update of what this rank owns at learning rate lr, gradients times gscale: the optimizer
 * slot over the strategy's part, then, parallel.expert on the host, over the experts' store;
 * device = cuda: the library's (its experts' too, src/gpu/gpu_ep.h) */
static void update(tsr_trainer *t, double lr, float gscale) {
    const trainer_strategy *s = t->be.strategy;
    if (!s->owned) {
        gpu_train_update(t->be.gpu, lr, gscale, (int)t->optim_step);
        return;
    }
    optim_part p = s->owned(t);
    optim_step(&t->part.optim, &p, lr, gscale, t->optim_step);
    if (t->part.ep_on) {
        p = ep_owned(t);
        optim_step(&t->part.optim, &p, lr, gscale, t->optim_step);
    }
}

/* Muon's exchange over the run so far: the slot's, or device = cuda the library's (optim.h) */
static optim_traffic exchange_traffic(const tsr_trainer *t) {
    const gpu_train_ctx *g = t->be.gpu;
    if (!g) return optim_traffic_of(&t->part.optim);
    return (optim_traffic){g->muon_G, g->muon_sent, g->muon_step_bytes};
}

static void zero1_gather(tsr_trainer *t) {
    dist_allgatherv_f32(t->model.params, t->part.part_counts, t->part.part_displs);
}

static void fsdp_gather(tsr_trainer *t) { fsdp_params_changed(&t->part.fsdp); }

static double device_compute(tsr_trainer *t, float scale) {
    return gpu_train_compute(train_gpu(t), scale);
}

static double device_sumsq(tsr_trainer *t) { return gpu_train_grad_sumsq(t->be.gpu); }

static size_t cpu_mem_peak(void) { return cpu_ops_peak_bytes(); }

static const trainer_strategy strategy_ddp = {
    "ddp", flat_compute, ddp_reduce, ddp_sumsq, flat_owned, nothing, cpu_mem_peak};
static const trainer_strategy strategy_zero1 = {
    "zero1", flat_compute, zero1_reduce, zero1_sumsq, flat_owned, zero1_gather, cpu_mem_peak};
/* the base's weights never change: nothing to gather */
static const trainer_strategy strategy_lora = {
    "lora", lora_compute, lora_reduce, lora_sumsq, lora_owned, nothing, cpu_mem_peak};
static const trainer_strategy strategy_fsdp = {
    "fsdp", shard_compute, fsdp_reduce, fsdp_sumsq, shard_owned, fsdp_gather, cpu_mem_peak};
/* the gradients are summed during backward, the weights refreshed by the library's update */
static const trainer_strategy strategy_device = {
    "device", device_compute, nothing, device_sumsq, NULL, nothing, gpu_train_mem_peak};

static const trainer_strategy *trainer_pick_strategy(const tsr_trainer *t) {
    if (t->be.gpu) return &strategy_device;
    if (t->part.lora_on) return &strategy_lora;
    if (t->part.fsdp_on) return &strategy_fsdp;
    return t->part.zero1 ? &strategy_zero1 : &strategy_ddp;
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
 * are chunked, src/dist.h), and a world or group of one exchanges nothing. Checked before anything
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
    size_t n = t->model.n_params, W = (size_t)t->dist.world;
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
    size_t n = t->model.n_params, W = (size_t)t->dist.world;
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
    t->part.shard_lo = t->part.zero1 ? t->part.part_displs[t->dist.rank] : 0;
    t->part.shard_hi = t->part.zero1 ? t->part.shard_lo + t->part.part_counts[t->dist.rank] : n;
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

/* Test hook (tests/train/test_auto_micro.sh): TSR_FAULT="oom:MICRO:RANK" (RANK -1: every rank) makes
 * RANK's CPU backend behave like a device on which the activations of more than MICRO sequences
 * do not fit: try_alloc fails past what is live now plus 1.5x the activations of MICRO sequences,
 * so MICRO fits and 2 x MICRO fails partway through allocating (a real failed allocation, not a
 * flag). MICRO 0: no activations fit at all. */
static void oom_fault(const tsr_trainer *t) {
    long long micro, rank;
    const char *f = tsr_fault("oom");
    if (!f || sscanf(f, "%lld:%lld", &micro, &rank) != 2 || micro < 0) return;
    if (rank != -1 && rank != t->dist.rank) return;
    size_t acts = model_acts_bytes(&t->model, (int)micro, t->T);
    cpu_ops_set_mem_limit(cpu_ops_live_bytes() + acts + acts / 2);
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

static const trainer_icl_api *icl_api;

void trainer_use_icl(const trainer_icl_api *api) { icl_api = api; }

/* icl_tasks: the suite, opened with the program's ICL evaluation (trainer_use_icl). */
static int open_icl(tsr_trainer *t) {
    if (t->cfg.n_icl == 0) return 0;
    if (!icl_api) {
        if (t->dist.rank == 0)
            tsr_error("icl_tasks: this program has no ICL evaluation (tessera-train has): remove "
                      "icl_tasks from the recipe");
        return TSR_EXIT_USAGE;
    }
    return icl_api->open(&t->icl, &t->cfg, t->tok, t->model.V, t->micro, t->T);
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

/* The rank mesh (mesh/mesh.h: every group, built once) and, with parallel.context = N > 1, the
 * CPU model's ring over its context group. A plan (dry_run) has no MPI world of its size: its
 * mesh is the numbers alone. */
static void mesh_open(tsr_trainer *t, int dry_run) {
    mesh_build(&t->mesh, &t->cfg, &t->dist, dry_run);
    const tsr_mesh_group *context = mesh_group(&t->mesh, TSR_MESH_CONTEXT);
    if (context->cpu) ring_init_mpi(&t->ring, context->cpu);
}

static void mesh_close(tsr_trainer *t) {
    ring_free(&t->ring);
    mesh_free(&t->mesh);
}

/* trainer_init's first step: the trainer from the config and the world; the GPU's and the
 * tokenizer's checks, agreed by every rank */
static int init_start(tsr_trainer *t, const tsr_config *cfg, const tsr_dist *d) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    t->dist = *d;
    t->objective = objective_of(cfg->objective); /* (the one choice: train/objective.h) */
    t->be.ops = &tsr_cpu_ops;
    t->T = (int)cfg->seq_len;
    TSR_CHECK(config_check_world(cfg, d->world));
    int rc = cfg->device == TSR_DEVICE_CUDA ? cuda_config_check(d->rank) : 0;
    if (!rc) rc = train_data_tokenizer(t); /* data.tokenizer: the dataset's, unless named */
    if (!rc) rc = open_tokenizer(t);
    return agree_start(t, rc, "GPU or tokenizer");
}

/* the mesh, the batch of a rank and its microbatch, the threads and the peak FLOP/s */
static void init_batch(tsr_trainer *t, const tsr_config *cfg, const tsr_dist *d, int dry_run) {
    mesh_open(t, dry_run);
    t->per_rank = cfg->global_batch / t->mesh.D; /* the data ranks' share */
    t->auto_micro = cfg->micro_batch == 0; /* "auto": start with the whole per-rank batch */
    t->micro = t->auto_micro ? trainer_micro_at_most(t, t->per_rank) : (int)cfg->micro_batch;
    if (t->objective->rows_per_sample) /* rows: (grpo) a prompt's completions */
        t->micro *= (int)t->objective->rows_per_sample(cfg);
    t->be.threads = trainer_threads(cfg, d);
    cpu_ops_set_threads(t->be.threads);
    t->out.peak_flops = cfg->peak_flops > 0 ? cfg->peak_flops
                                            : metrics_peak_flops("cpu", t->be.threads);
}

/* the data (not for a plan), and the steps it makes: the schedule, eval and save intervals */
static int init_schedule(tsr_trainer *t, const tsr_config *cfg, int dry_run) {
    TSR_CHECK(agree_start(t, dry_run ? 0 : train_data_open(t), "data"));
    if (!dry_run && t->objective->start) TSR_CHECK(t->objective->start(t)); /* (grpo: docs/rl.md) */
    uint64_t epoch_samples = dry_run ? 1 : train_data_epoch_samples(t);
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

/* lora.rank > 0: the adapters' layout now (the plan shows it), their store later */
static void init_lora_plan(tsr_trainer *t, const tsr_config *cfg) {
    unsigned mask;
    char why[400];
    if (config_lora_targets(&cfg->model, cfg->lora.targets, &mask, why, sizeof why) != 0)
        tsr_die(TSR_EXIT_INTERNAL, "lora.targets: %s (the config check let it through)", why);
    t->part.lora_on = 1;
    lora_plan(&t->part.lora, &t->model, (int)cfg->lora.rank, cfg->lora.alpha,
              cfg->lora.dropout, mask);
    /* MFU counts the work done (docs/lora.md): the base's weight-gradient products (2N of
     * 6N) are skipped, the adapters' three products (6 per adapter parameter) added */
    t->out.flops_per_token += 6.0 * (double)t->part.lora.n -
                              2.0 * (double)t->model.n_params_counted;
}

/* the model's layout (nothing allocated but the MoE figures): sharding, experts, context,
 * adapters, references, and the FLOPs per token they make */
static int init_layout(tsr_trainer *t, const tsr_config *cfg, const tsr_dist *d) {
    TSR_CHECK(trainer_shard_group(cfg, d->world, d->local_world, &t->part.fsdp_group));
    t->part.fsdp_on = cfg->sharding == TSR_SHARD_ZERO3 || cfg->sharding == TSR_SHARD_HSDP;
    model_init(&t->model, &cfg->model, t->T, t->be.ops);
    model_set_expert_parallel(&t->model, (int)cfg->expert);
    model_set_context(&t->model, t->mesh.N);
    if (mesh_group(&t->mesh, TSR_MESH_CONTEXT)->cpu) t->model.ring = &t->ring;
    t->out.flops_per_token = model_flops_per_token(&t->model, t->T);
    if (cfg->lora.rank > 0) init_lora_plan(t, cfg);
    if (t->objective->references) t->objective->references(t); /* (and their FLOPs) */
    if (t->model.E)
        t->out.moe = tsr_calloc((size_t)t->model.LM * (size_t)(2 + t->model.E), sizeof(double));
    return 0;
}

/* the plan (a dry run's: the layout only, nothing allocated); device = cuda: the GPU's
 * switches and its plan */
static int init_plans(tsr_trainer *t, const tsr_config *cfg, int dry_run) {
    plan_print(t, dry_run);
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
        lora_init(&t->part.lora, &t->model, plan.R, cfg->lora.alpha, cfg->lora.dropout, plan.mask);
        lora_set_context(&t->part.lora, t->mesh.N, t->dist.rank % t->mesh.N, t->T);
        lora_init_weights(&t->part.lora, (uint64_t)cfg->seed);
    }
    if (t->model.EP > 1) {
        t->part.ep_on = 1;
        ep_init(&t->part.ep, &t->model, &t->mesh);
        ep_init_weights(&t->part.ep, &t->model, (uint64_t)cfg->seed);
    }
}

/* a run's state: the data plan and staging, the weights, the ICL tasks, the optimizer's state
 * and the batch buffers */
static int init_state(tsr_trainer *t, const tsr_config *cfg) {
    TSR_CHECK(train_data_plan(t));
    TSR_CHECK(train_data_stage_open(t));
    init_weights(t, cfg);
    TSR_CHECK(open_icl(t)); /* the task files are read before the first step */
    if (cfg->device != TSR_DEVICE_CUDA) /* (device = cuda: the library's, src/gpu/gpu_train.c) */
        optim_init(&t->part.optim, &cfg->optim, &t->model,
                   t->part.fsdp_on ? &t->part.fsdp : NULL, t->be.ops);
    TSR_CHECK(plan_shards(t));
    size_t owned = t->part.fsdp_on ? t->part.fsdp.shard_n : t->part.shard_hi - t->part.shard_lo;
    if (!t->part.lora_on) { /* (a frozen base has no AdamW state) */
        t->part.m = t->be.ops->alloc(owned * sizeof(float));
        t->part.v = t->be.ops->alloc(owned * sizeof(float));
    }
    t->data.inputs = tsr_malloc((size_t)t->per_rank * t->T * sizeof(int32_t));
    t->data.targets = tsr_malloc((size_t)t->per_rank * t->T * sizeof(int32_t));
    /* the activations are allocated by the first step (trainer_ensure_acts), where micro_batch =
     * auto can still back off */
    return 0;
}

/* the plans, the device (the GPU's, or the CPU's memory fault of a test), the host memory's
 * check and what it decides: the save mode, the snapshot; the step strategy */
static int init_device(tsr_trainer *t, const tsr_config *cfg) {
    TSR_CHECK(init_plans(t, cfg, 0));
    if (cfg->device == TSR_DEVICE_CUDA) TSR_CHECK(train_gpu_init(t));
    else oom_fault(t);
    const long long kib = mem_available_kib();
    host_memory_warn(t, kib);
    choose_save_mode(t, kib);
    checkpointing_snapshot_alloc(t);
    train_gpu_pin_snapshot(t);
    t->be.strategy = trainer_pick_strategy(t);
    return 0;
}

int trainer_init(tsr_trainer *t, const tsr_config *cfg, const tsr_dist *d, int dry_run) {
    TSR_CHECK(init_start(t, cfg, d));
    init_batch(t, cfg, d, dry_run);
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

int trainer_open_run_dir(tsr_trainer *t) {
    /* a resume's stored reference is checked before anything is written (dpo: train/dpo_ref.h) */
    if (t->objective->check_reference) TSR_CHECK(t->objective->check_reference(t));
    int64_t rc = t->dist.rank == 0 ? metrics_open_run_dir(t) : 0;
    dist_allreduce_sum_i64(&rc, 1); /* rank 0's outcome, on every rank */
    if (!rc) metrics_log_start(t); /* a process's first record (docs/tracking.md) */
    if (!rc) checkpointing_room_warn(t);
    if (!rc && t->out.start_load.what[0]) /* then the checkpoint it read, before run_dir was opened */
        metrics_log_checkpoint(t, t->out.start_load.what, t->out.start_load.path,
                               t->out.start_load.seconds,
                               t->out.start_load.bytes);
    /* the reference built, copied into run_dir or read back (dpo, grpo: train/objective.h) */
    if (!rc && t->objective->open_reference) rc = t->objective->open_reference(t);
    return (int)rc;
}

void trainer_ensure_acts(tsr_trainer *t) {
    tsr_model *m = &t->model;
    if (trainer_acts_B(t) > 0) return;
    for (;;) {
        int64_t failed = (t->be.gpu ? gpu_train_try_acts(train_gpu(t), t->micro)
                                 : model_try_alloc_acts(m, t->micro, t->T)) != 0;
        dist_allreduce_sum_i64(&failed, 1); /* every rank learns of any rank's failure */
        if (!failed) break;
        /* the ranks that succeeded give theirs back too */
        if (t->be.gpu) gpu_train_free_acts(t->be.gpu);
        else model_free_acts(m);
        if (!t->auto_micro || t->micro == 1) {
            double need = (double)(t->be.gpu ? gpu_train_acts_bytes(t->be.gpu, t->micro)
                                          : model_acts_bytes(m, t->micro, t->T)) / (1024.0 * 1024.0);
            plan_print(t, 0);
            if (t->be.gpu) train_gpu_print_plan(t);
            tsr_fail_all(TSR_EXIT_USAGE,
                         "out of memory on %lld of %d ranks allocating the activations for a "
                         "microbatch of %d x %d (%.1f MiB, plan above)%s: use activation "
                         "checkpointing, parallel.sharding = zero3, more ranks, a shorter seq_len "
                         "or a smaller model", (long long)failed, t->dist.world, t->micro, t->T,
                         need, t->auto_micro ? "; micro_batch = auto is down to 1 sequence" : "");
        }
        int next = trainer_micro_at_most(t, t->micro / 2);
        metrics_log_micro(t, t->micro, next, failed);
        t->micro = next;
    }
    if (t->auto_micro) metrics_log_micro(t, 0, t->micro, 0);
}

/* The step's data: this rank's part of global batch d loaded; counted targets and samples per
 * stream summed over the ranks (sums[0], sums[1 + k]); a curriculum phase that starts with it
 * restarts the spike window (its loss level may differ). */
static int64_t step_load(tsr_trainer *t, int64_t d, int64_t *sums, tsr_step_stats *st) {
    watchdog_phase(WD_DATA, t->step);
    sums[0] = train_data_load(t, d);
    for (int k = 0; k < t->data.n_streams; k++) sums[1 + k] = t->data.stream_loaded[k];
    dist_view_sum_i64(&t->mesh.data, sums, 1 + (size_t)t->data.n_streams); /* (a context group
                                                                             * counts once) */
    st->phase_switch = d > 0 && mix_phase(&t->data.mix, d) != mix_phase(&t->data.mix, d - 1);
    if (st->phase_switch) guard_restart_window(&t->guard);
    return sums[0];
}

/* The global loss (mean over the counted targets) and the ranks' peak memory. */
static double step_global_loss(tsr_trainer *t, double loss_sum, int64_t counted,
                               tsr_step_stats *st) {
    /* (every rank of a context group holds its sequences' sum: model_forward) */
    if (t->mesh.D > 1) dist_view_sum_f64(&t->mesh.data, &loss_sum, 1);
    double mem[2] = {(double)t->be.strategy->mem_peak(), (double)tsr_peak_rss()};
    if (t->dist.world > 1) dist_allreduce_max_f64(mem, 2);
    st->peak_mem = mem[0], st->peak_rss = mem[1];
    return counted > 0 ? loss_sum / (double)counted : NAN;
}

/* The spike guard judges before the update, on rank 0's numbers (all-reduced, so equal on every
 * rank unless a reduction differed in the last bit): every rank's guard state and verdict are then
 * the same by construction. Counts the step; returns whether its update is applied. */
static int step_judge(tsr_trainer *t, double loss, double norm, tsr_step_stats *st) {
    double judged[2] = {loss, norm};
    if (t->dist.world > 1) dist_bcast(judged, sizeof judged, 0);
    st->verdict = guard_judge(&t->guard, t->step + 1, judged[0], judged[1], st->why, sizeof st->why);
    st->rebaselined = t->guard.rebaselined;
    t->step++;
    int apply = st->verdict == GUARD_OK || st->verdict == GUARD_WARN;
    if (apply) t->optim_step++;
    return apply;
}

/* The optimizer updates of a step (grpo: grpo.updates; else 1) */
static int step_updates(const tsr_trainer *t) {
    return t->objective->updates ? t->objective->updates(&t->cfg) : 1;
}

/* The gradients' multiplier under clipping (optim.grad_clip), 1 when within it. */
static float clip_scale(const tsr_optim_config *o, double norm) {
    return o->grad_clip > 0 && norm > o->grad_clip ? (float)(o->grad_clip / (norm + 1e-6)) : 1.0f;
}

/* The step's data: the batch loaded, or the objective's rollouts made (grpo); the counted
 * targets (all ranks), -1 when the step failed (st->exit_code set) */
static int64_t step_data(tsr_trainer *t, int64_t d, int64_t *sums, tsr_step_stats *st) {
    if (!t->objective->rollout) return step_load(t, d, sums, st);
    watchdog_phase(WD_DATA, t->step);
    st->phase_switch = 0; /* (no data mix) */
    memset(sums, 0, (1 + (size_t)t->data.n_streams) * sizeof *sums);
    const int64_t counted = t->objective->rollout(t, d);
    st->exit_code = counted < 0 ? TSR_EXIT_DATA : 0;
    sums[1] = t->cfg.global_batch; /* prompts of the stream */
    return counted;
}

/* One pass of the objective and its update (when applied); the step's first (pass 0) is judged
 * by the spike guard (its verdict applies to the step: a skipped step applies none). Returns
 * whether the update was applied; *loss, *norm the pass's. With grpo.updates = U a step applies
 * up to U AdamW updates but counts one in optim_step (so optim_step <= step, as checkpoints
 * check): pass k's bias-correction step is (optim_step - 1) U + 1 + k, the count of updates a
 * run applying every pass has made (a non-finite later pass, not applied, leaves its number
 * unused). */
static int step_update(tsr_trainer *t, tsr_step_stats *st, int64_t denom, int pass, double lr,
                       double *loss, double *norm) {
    const int first = pass == 0;
    const trainer_strategy *s = t->be.strategy;
    const tsr_optim_config *o = &t->cfg.optim;
    const size_t n_moe = (size_t)t->model.LM * (size_t)(2 + t->model.E);
    watchdog_phase(WD_COMPUTE, t->step);
    double tc = tsr_now();
    double loss_sum = s->compute(t, denom > 0 ? 1.0f / (float)denom : 0.0f);
    compute_fault(t);
    st->compute_time += tsr_now() - tc;
    if (t->out.moe && t->dist.world > 1 && first) dist_allreduce_sum_f64(t->out.moe, n_moe);
    if (t->objective->reduce_stats) t->objective->reduce_stats(t); /* (dpo's sums) */
    watchdog_phase(WD_REDUCE, t->step);
    s->reduce(t);
    /* the experts' part (model_ep.h); on device = cuda the library's reduce, sumsq and update
     * include it (src/gpu/gpu_ep.h) */
    const int ep_host = t->part.ep_on && !t->be.gpu;
    if (ep_host) ep_reduce(&t->part.ep);
    *norm = sqrt(s->sumsq(t) + (ep_host ? ep_sumsq(&t->part.ep, t->be.ops) : 0.0));
    *loss = step_global_loss(t, loss_sum, denom, st);
    if (t->ck.pending) { /* the state changes from here: a background save's copy is done */
        watchdog_phase(WD_CHECKPOINT, t->step);
        checkpointing_before_update(t);
    }
    watchdog_phase(WD_OPTIMIZER, t->step);
    int apply;
    if (first) {
        apply = step_judge(t, *loss, *norm, st);
    } else { /* (grpo.updates: the step's verdict holds; a non-finite pass is not applied) */
        apply = isfinite(*loss) && isfinite(*norm);
    }
    if (apply) {
        const int64_t steps = t->optim_step, U = step_updates(t);
        t->optim_step = (steps - 1) * U + 1 + pass; /* the update's bias-correction step */
        update(t, lr, clip_scale(o, *norm));
        t->optim_step = steps;
        s->gather(t);
    }
    return apply;
}

void trainer_step(tsr_trainer *t, tsr_step_stats *st) {
    double t0 = tsr_now();
    int64_t d = t->step + t->data.data_offset, sums[1 + TSR_MAX_STREAMS];
    const size_t n_moe = (size_t)t->model.LM * (size_t)(2 + t->model.E);
    if (t->out.moe) memset(t->out.moe, 0, n_moe * sizeof(double));
    memset(t->out.dpo, 0, sizeof t->out.dpo);
    st->compute_time = 0.0, st->exit_code = 0;
    int64_t counted = step_data(t, d, sums, st);
    if (st->exit_code) return; /* (nothing applied: the run stops at this step boundary) */
    /* the loss is a mean over the counted targets, (dpo) over the pairs; grpo's pass weighs its
     * tokens itself (train/objective.h) */
    int64_t denom = t->objective->denominator(t, counted);
    trainer_ensure_acts(t); /* micro_batch = auto: the batch just loaded runs at the size that fits */
    double lr = sched_lr_at(&t->cfg, t->sched, t->step);
    const int updates = step_updates(t);
    double loss = NAN, norm = NAN, l, n;
    int apply = step_update(t, st, denom, 0, lr, &loss, &norm);
    for (int k = 1; apply && k < updates; k++) step_update(t, st, denom, k, lr, &l, &n);
    t->tokens_seen += t->cfg.global_batch * t->T;
    for (int k = 0; apply && k < t->data.n_streams; k++) t->data.stream_seen[k] += sums[1 + k];
    st->step = t->step, st->data_batch = d, st->tokens = counted;
    st->loss = loss, st->lr = lr, st->grad_norm = norm;
    st->step_time = tsr_now() - t0;
}

double trainer_eval(tsr_trainer *t) {
    if (!t->data.val) return NAN;
    trainer_ensure_acts(t);
    trainer_eval_scope(t, 1); /* ranks run different numbers of batches (train_state.h) */
    /* the validation loss; dpo: the pairs' DPO loss; grpo: pass@1 (train/objective.h) */
    double loss = t->objective->eval(t);
    trainer_eval_scope(t, 0);
    return loss;
}

/* Test-only fault injection (tests/resume/test_resume.sh): TSR_FAULT="kill:STEP:RANK" makes that rank
 * SIGKILL itself right after that step, with no warning to anyone; "usr1:STEP:RANK" sends it
 * SIGUSR1 (a stop request, as Slurm's --signal would) at exactly that point; "term:STEP:RANK"
 * sends SIGTERM (what scancel and a requeue send). */
static void maybe_fault(const tsr_trainer *t) {
    static const char *const kinds[] = {"kill", "usr1", "term"};
    static const int sigs[] = {SIGKILL, SIGUSR1, SIGTERM};
    for (int i = 0; i < 3; i++) {
        const char *f = tsr_fault(kinds[i]);
        long long step = -1, rank = -1;
        if (f && sscanf(f, "%lld:%lld", &step, &rank) == 2 && step == t->step && rank == t->dist.rank)
            raise(sigs[i]);
    }
}

/* rank 0: run_dir/guard-report.json, what the guard saw and did, when it stops the run */
static void guard_report(const tsr_trainer *t, const tsr_step_stats *st, const char *reason) {
    if (t->dist.rank != 0) return;
    char path[1200];
    snprintf(path, sizeof path, "%s/guard-report.json", t->cfg.run_dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        tsr_warn("%s: cannot write the guard report", path);
        return;
    }
    const tsr_guard *g = &t->guard;
    fprintf(f, "{\n  \"stopped_at_step\": %lld,\n  \"data_batch\": %lld,\n  \"reason\": \"%s\",\n"
               "  \"rollbacks\": %lld,\n  \"max_rollbacks\": %lld,\n  \"updates_skipped\": %lld,\n"
               "  \"skipped_batches\": [",
            (long long)st->step, (long long)st->data_batch, reason, (long long)g->rollbacks,
            (long long)g->max_rollbacks, (long long)g->updates_skipped);
    for (int i = 0; i < g->n_skips; i++)
        fprintf(f, "%s[%lld, %lld]", i ? ", " : "", (long long)g->skips[i][0], (long long)g->skips[i][1]);
    fprintf(f, "],\n  \"global_batch\": %lld\n}\n", (long long)t->cfg.global_batch);
    fclose(f);
}

/* After a step the guard did not pass: log it; roll back, or stop. Returns 0 to go on, 1 after a
 * rollback (the run continues from the restored step), else an exit code. */
static int guard_respond(tsr_trainer *t, const tsr_step_stats *st) {
    tsr_guard *g = &t->guard;
    char reason[1100];
    if (st->verdict == GUARD_WARN || st->verdict == GUARD_SKIP) {
        metrics_log_guard(t, st->verdict == GUARD_WARN ? "warn" : "skip", st);
        if (st->rebaselined)
            metrics_log_guard_note(t, "rebaseline", st, "guard.patience consecutive outliers: taken "
                                   "as a lasting change of level, the window starts over");
        return 0;
    }
    snprintf(reason, sizeof reason, "%s", st->why);
    if (st->verdict == GUARD_ROLLBACK) {
        metrics_log_guard(t, "rollback", st);
        char path[1200];
        int64_t from = t->step, d_next = t->step + t->data.data_offset, d_c = 0;
        int nonfinite = g->nonfinite_streak > 0;
        int rc = g->n_skips >= TSR_GUARD_MAX_SKIPS ? -1 /* no room to record the skip */
                 : checkpointing_rollback(t, g->streak_first - 1, path, sizeof path, &d_c);
        if (rc == 0) {
            guard_record_rollback(g, d_c, d_next);
            t->data.data_offset = d_next - t->step;
            train_data_reset_seen(t);
            t->data.stage_started = 0; /* the data position jumped: announce new windows */
            metrics_log_rollback(t, from, path, d_c, d_next);
            /* commit the restored step with the skip recorded (this also points `latest` at
             * it), then set the abandoned trajectory's checkpoints aside */
            if ((rc = checkpointing_save(t, 0))) return rc;
            checkpointing_set_aside_after(t);
            return 1;
        }
        if (rc == -1) {
            snprintf(reason, sizeof reason, "%s; %d skipped data windows are recorded, no room for "
                     "another", st->why, TSR_GUARD_MAX_SKIPS);
        } else if (rc != 1) {
            return rc;
        } else if (!nonfinite) {
            /* no checkpoint from before the spike: keep going on the new level rather than stop
             * a run for a finite spike (loudly: the data window stays in the run) */
            guard_restart_window(g);
            metrics_log_guard_note(t, "rebaseline", st, "no checkpoint before the spike to roll "
                                   "back to (save more often: save_interval, keep_last); the "
                                   "window starts over");
            return 0;
        } else {
            snprintf(reason, sizeof reason, "%s; no checkpoint at or before step %lld (before the "
                     "first non-finite step) to roll back to: save more often (save_interval) and "
                     "keep more (keep_last)", st->why, (long long)(g->streak_first - 1));
        }
    }
    if (t->dist.rank == 0) {
        tsr_error("spike guard: stopping at step %lld: %s (report: %s/guard-report.json)",
                  (long long)st->step, reason, t->cfg.run_dir);
        if (t->out.metrics) {
            fprintf(t->out.metrics, "{\"event\": \"guard\", \"action\": \"stop\", \"step\": %lld, "
                                "\"why\": \"%s\"", (long long)st->step, reason);
            metrics_end_record(t->out.metrics);
        }
    }
    guard_report(t, st, reason);
    return TSR_EXIT_DATA;
}

/* The save in flight committed, then a synchronous checkpoint of this step unless that was it (or
 * a periodic save of this step committed it already): what a stop (exit 85, 86) leaves. */
static int final_checkpoint(tsr_trainer *t) {
    int rc;
    watchdog_phase(WD_CHECKPOINT, t->step);
    if ((rc = checkpointing_drain(t))) return rc;
    return t->ck.committed != t->step ? checkpointing_save(t, 0) : 0;
}

/* At a step boundary after a stop request (SIGUSR1/SIGTERM on any rank): the checkpoint of this
 * step (final_checkpoint). Returns TSR_EXIT_REQUEUE or an exit code. */
static int stop_on_request(tsr_trainer *t) {
    int rc;
    if ((rc = final_checkpoint(t))) return rc;
    if (t->dist.rank == 0)
        printf("stop requested (SIGUSR1/SIGTERM): checkpoint of step %lld committed; "
               "exit %d = requeue me\n", (long long)t->step, TSR_EXIT_REQUEUE);
    return TSR_EXIT_REQUEUE;
}

/* The evaluations due after this step: validation loss (grpo: pass@1), the ICL tasks. Returns
 * 0, or TSR_EXIT_DATA when grpo's reward failed (reported). */
static int evaluate(tsr_trainer *t) {
    const double t0 = tsr_now();
    if (t->data.val) {
        watchdog_phase(WD_EVAL, t->step);
        double loss = trainer_eval(t);
        metrics_log_eval(t, loss, tsr_now() - t0);
        if (t->objective->eval_failed && t->objective->eval_failed(t)) return TSR_EXIT_DATA;
    }
    if (t->icl) {
        watchdog_phase(WD_EVAL, t->step);
        trainer_eval_scope(t, 1);
        trainer_ensure_acts(t);
        icl_api->run(t->icl, &t->model, &t->mesh.data, trainer_acts_B(t), t->step, t->out.metrics,
                     t->out.tb);
        trainer_eval_scope(t, 0);
    }
    account_add(ACC_EVAL, tsr_now() - t0);
    return 0;
}

/* parallel.expert: the bytes the experts' exchange sent between ranks in this process's steps,
 * all ranks together (bench/comm_volume.sh compares them with the loopback's count). Collective. */
static void ep_report(tsr_trainer *t) {
    if (!t->part.ep_on) return;
    int64_t sent = (int64_t)t->part.ep.sent_bytes;
    dist_allreduce_sum_i64(&sent, 1);
    if (t->dist.rank == 0)
        printf("expert exchange: %lld bytes sent between ranks in %lld steps (all %d ranks, "
               "forward and backward)\n", (long long)sent, (long long)t->out.steps_run,
               t->dist.world);
}

/* parallel.context on the CPU: the bytes the ring sent between ranks in this process's steps and
 * evaluations, all ranks together (bench/comm_volume.sh compares them with the loopback's count
 * and docs/parallelism.md's formula). Collective. */
static void ring_report(tsr_trainer *t) {
    if (!mesh_group(&t->mesh, TSR_MESH_CONTEXT)->cpu || t->be.gpu) return;
    int64_t sent = (int64_t)t->ring.sent;
    dist_allreduce_sum_i64(&sent, 1);
    if (t->dist.rank == 0)
        printf("context ring: %lld bytes sent between ranks in %lld steps (all %d ranks, forward "
               "and backward)\n", (long long)sent, (long long)t->out.steps_run, t->dist.world);
}

/* sample.tokens after the run: rank 0 samples on the host's fp32 ops (device = cuda: from the
 * device's weights) and logs it; under zero3 / hsdp every rank samples alongside, on its shard
 * (each forward gathers the units over the group: the same forwards on every rank). The prompt is
 * the end-of-text token, by convention the vocabulary's last id (GPT-2's 50256, the synthetic
 * corpus' V-1, a trained tokenizer's last special). Collective. */
static void end_of_run_sample(tsr_trainer *t) {
    if (t->cfg.sample.tokens <= 0) return;
    trainer_ensure_acts(t); /* collective: a resumed run that was already done ran no step */
    checkpointing_before_pull(t);
    if (t->be.gpu) gpu_train_host_model(t->be.gpu, 1);
    else trainer_host_weights(t, 1);
    if (t->dist.rank == 0 || t->part.fsdp_on) {
        int32_t eot = t->model.V - 1, n = (int32_t)t->cfg.sample.tokens;
        int32_t *ids = tsr_malloc((size_t)n * sizeof *ids);
        trainer_sample(t, &eot, 1, n, (uint64_t)t->cfg.seed, ids);
        if (t->dist.rank == 0) metrics_log_sample(t, ids, n);
        free(ids);
    }
    if (t->be.gpu) gpu_train_host_model(t->be.gpu, 0);
    else trainer_host_weights(t, 0);
}

/* After a step: its log line, the guard's response, evaluation, periodic checkpoint (in the
 * background with save_async, but the last one), the straggler watchdog. Returns 0 to go on, 1
 * after a rollback, else an exit code (TSR_EXIT_SLOW after a checkpoint). */
static int after_step(tsr_trainer *t, const tsr_step_stats *st) {
    int rc;
    account_step(t, st->step_time);
    checkpointing_step_done(st->step_time);
    metrics_log_step(t, st);
    if (st->phase_switch)
        metrics_log_guard_note(t, "restart-window", st, "a data-mix curriculum phase starts "
                               "with this batch: the spike window starts over");
    if (st->verdict != GUARD_OK) {
        if (st->verdict == GUARD_ROLLBACK) watchdog_phase(WD_CHECKPOINT, t->step);
        if ((rc = guard_respond(t, st))) return rc;
    }
    int last = t->step == t->total_steps;
    if (((t->eval_every > 0 && t->step % t->eval_every == 0) || last) && (rc = evaluate(t)))
        return rc;
    /* no periodic save inside an outlier streak: it would be useless to a rollback and its
     * retention could delete the last checkpoint from before the spike */
    if ((t->save_every > 0 && t->step % t->save_every == 0 && t->guard.streak == 0) ||
        (last && t->cfg.save_final)) {
        watchdog_phase(WD_CHECKPOINT, t->step);
        if ((rc = checkpointing_save(t, !last))) return rc;
    }
    if (watchdog_after_step(t, st) && !last) /* a straggler or low MFU: exit 86 */
        return (rc = final_checkpoint(t)) ? rc : TSR_EXIT_SLOW;
    return 0;
}

/* A run that stops with rc: the save in flight committed first (it is a good checkpoint; a
 * failed save left none in flight). Returns rc. */
static int stop_run(tsr_trainer *t, int rc) {
    watchdog_phase(WD_CHECKPOINT, t->step);
    checkpointing_drain(t); /* (its failure is reported; the run's own status stands) */
    watchdog_stop();
    return rc;
}

static int run_steps(tsr_trainer *t) {
    tsr_step_stats st = {0};
    watchdog_start(t);
    while (t->step < t->total_steps) {
        int rc, stop;
        if (t->ck.pending) watchdog_phase(WD_CHECKPOINT, t->step); /* a commit may come */
        /* at a step boundary, all ranks together: a stop request, a background save to commit */
        if ((rc = checkpointing_boundary(t, &stop))) return stop_run(t, rc);
        if (stop) /* the hang watchdog watches its save */
            return stop_run(t, stop_on_request(t));
        train_data_stage_step(t);
        trainer_step(t, &st);
        if (st.exit_code) return stop_run(t, st.exit_code); /* (the previous checkpoint stands) */
        rc = after_step(t, &st);
        if (rc == 1) continue; /* rolled back: the loop goes on from the restored step */
        if (rc) return stop_run(t, rc);
        maybe_fault(t);
    }
    int rc = checkpointing_drain(t); /* (save_final = false: a periodic save may be in flight) */
    if (rc) return watchdog_stop(), rc;
    watchdog_stop();
    train_data_stage_end(t);
    ep_report(t);
    optim_report(exchange_traffic(t), t->out.steps_run, t->dist.world);
    ring_report(t);
    metrics_finish(t);
    end_of_run_sample(t);
    return TSR_EXIT_OK;
}

/* The steps, between the accounting of this start (telemetry/account.h): its record is written
 * whichever way the steps end (finished, 85, 86, the guard's stop) */
int trainer_run(tsr_trainer *t) {
    account_run_begin(t);
    int rc = run_steps(t);
    acc_start s;
    account_close(t, &s);
    metrics_log_account(t, rc, &s);
    return rc;
}

void trainer_free(tsr_trainer *t) {
    train_gpu_free(t);
    free(t->ck.snap);
    if (t->part.gslice) t->be.ops->free(t->part.gslice);
    free(t->part.part_counts);
    free(t->part.part_displs);
    if (t->part.m) t->be.ops->free(t->part.m);
    if (t->part.v) t->be.ops->free(t->part.v);
    free(t->data.inputs);
    free(t->data.targets);
    optim_free(&t->part.optim); /* (before the fsdp plan it points to) */
    fsdp_free(&t->part.fsdp);
    ep_free(&t->part.ep);
    lora_free(&t->part.lora);
    if (t->objective && t->objective->release) t->objective->release(t);
    model_free(&t->model);
    train_data_close(t);
    mesh_close(t);
    if (icl_api) icl_api->close(&t->icl);
    if (t->tok) tokenizer_free(t->tok);
    guard_free(&t->guard);
    if (t->out.metrics) fclose(t->out.metrics);
    if (t->out.tb) tboard_close(t->out.tb); /* every record is flushed already: this only closes */
    free(t->out.moe);
    memset(t, 0, sizeof *t);
}
