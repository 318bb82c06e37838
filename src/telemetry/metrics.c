/* metrics.c — the plan, per-step lines, eval lines, run_dir/metrics.jsonl and the TensorBoard
 * event file run_dir/tb/ (rank 0 only; tags in docs/tracking.md). */
#include "telemetry/metrics.h"
#include "train/dpo.h"
#include "train/grpo.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "common.h"
#include "tokenizer/tokenizer.h"
#include "telemetry/account.h"
#include "telemetry/metrics_prom.h"
#include "telemetry/tboard.h"

/* Peak dense FLOP/s per device (per rank). GPUs: bf16 dense from the vendors' datasheets.
 * cpu: 172.5 GFLOP/s per core = half the measured 2-core AVX-512 FMA roofline of the CI
 * machine kind (docs/mfu.md); set peak_flops for other CPUs. */
static const struct { const char *name; double flops; int per_thread; } peak_table[] = {
    {"H100", 989.4e12, 0}, {"H200", 989.4e12, 0}, {"A100", 312e12, 0}, {"cpu", 172.5e9, 1},
};

double metrics_peak_flops(const char *device, int threads) {
    for (size_t i = 0; i < sizeof peak_table / sizeof peak_table[0]; i++)
        if (strcasecmp(peak_table[i].name, device) == 0)
            return peak_table[i].flops * (peak_table[i].per_thread ? threads : 1);
    return 0.0;
}

void metrics_human_bytes(char *buf, size_t n, double b) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024.0 && i < 4) b /= 1024.0, i++;
    snprintf(buf, n, "%.1f %s", b, u[i]);
}

static void human_count(char *buf, size_t n, double v) {
    if (v >= 1e9) snprintf(buf, n, "%.2fB", v / 1e9);
    else if (v >= 1e6) snprintf(buf, n, "%.2fM", v / 1e6);
    else if (v >= 1e3) snprintf(buf, n, "%.1fK", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
}

/* optim.name = muon on the CPU: its scratch (train/muon.h; device = cuda: the device plan's) */
static double muon_scratch(const tsr_trainer *t) {
    if (t->cfg.device == TSR_DEVICE_CUDA) return 0.0;
    return (double)muon_host_bytes(&t->model, &t->cfg.optim,
                                   t->part.fsdp_on ? t->part.fsdp_group : 0);
}

/* The planned fp32 memory of one rank, in bytes: weights = grads = pb, the optimizer ob (AdamW's
 * moments and Muon's scratch), activations of one microbatch ab; returns the total. */
static double plan_bytes(const tsr_trainer *t, int lora, double *pb, double *gb, double *ob,
                         double *cb, double *ab) {
    *pb = *gb = (double)t->model.n_params * sizeof(float);
    *ab = (double)model_acts_bytes(&t->model, t->micro, t->T);
    /* ZeRO-1 keeps AdamW state for 1/W of the parameters on each rank, and receives its slice
     * of the summed gradients into a buffer of that size; DDP all-reduces in place */
    int zero1 = t->cfg.sharding == TSR_SHARD_ZERO1 && t->dist.world > 1;
    *ob = 2 * *pb / (zero1 ? t->dist.world : 1);
    *cb = zero1 ? *pb / t->dist.world : 0;
    /* ZeRO-3 / HSDP: shards, plus the gather buffers (model/fsdp.h) */
    const int frozen = lora; /* LoRA: the base has weights only */
    if (frozen) *gb = *ob = *cb = 0;
    if (t->part.fsdp_on) fsdp_plan_bytes(&t->model, t->part.fsdp_group, frozen, pb, gb, ob, cb);
    if (frozen) { /* the adapters' store, replicated (model/model_lora.h), and its scratch */
        double lb = (double)t->part.lora.n * sizeof(float);
        *pb += lb, *gb += lb, *ob += 2 * lb;
        *ab += (double)lora_scratch_bytes(&t->part.lora, &t->model.be, t->micro * t->T);
    }
    const tsr_model *m = &t->model;
    if (m->EP > 1) { /* the expert store (model/model_ep.h): this rank's E / EP experts, replicated
                      * over their EDP group whatever the sharding; and the rows it receives for
                      * them per microbatch with a balanced routing, kept for the backward (a
                      * skewed one takes up to EP times that) */
        double eb = (double)m->LM * (m->E / m->EP) * 3.0 * m->FE * m->C * sizeof(float);
        *pb += eb, *gb += eb, *ob += 2 * eb;
        /* one buffer per MLP activation slot of a MoE layer (checkpointed layers share one) */
        int slots = 0;
        unsigned char *used = tsr_calloc((size_t)m->L, 1);
        for (int l = 0; l < m->L; l++) {
            size_t s = model_act_group_slot(m, TSR_AG_MLP, l);
            if (model_moe_layer(m, l) && !used[s]) used[s] = 1, slots++;
        }
        free(used);
        *cb += (double)slots * t->micro * t->T * m->K * (m->C + 3.0 * m->FE) * sizeof(float);
    }
    *ob += muon_scratch(t);
    return *pb + *gb + *ob + *cb + *ab;
}

/* The memory line's optional parts: Muon's buffers (mu), the checkpoint's buffers of io bytes
 * and the save_async snapshot of sb bytes (snap), context parallelism's share of a sequence
 * (share); "" where they do not apply. */
static void memory_notes(const tsr_trainer *t, double io, double sb, char mu[96], char snap[160],
                         char share[64]) {
    char b[32], c[32];
    mu[0] = snap[0] = share[0] = '\0';
    if (muon_scratch(t) > 0) {
        metrics_human_bytes(b, sizeof b, muon_scratch(t));
        snprintf(mu, 96, " (Muon's iteration%s: %s)",
                 t->part.fsdp_on ? ", owned matrices and exchange" : "", b);
    }
    metrics_human_bytes(c, sizeof c, io);
    metrics_human_bytes(b, sizeof b, sb);
    snprintf(snap, 160, ", checkpoint I/O %s (host, while a save runs)%s%s%s", c,
             sb > 0 ? ", checkpoint snapshot " : "", sb > 0 ? b : "", sb > 0 ? " (save_async, host)" : "");
    if (t->mesh.N > 1)
        snprintf(share, 64, " (this rank's %d positions of each)", t->T / t->mesh.N);
}

/* the plan's model line: size, shape, MLP (and MoE), vocabulary, positions, norm */
static void plan_model(const tsr_trainer *t) {
    const tsr_model *m = &t->model;
    const tsr_config *c = &t->cfg;
    char np[32];
    human_count(np, sizeof np, (double)m->n_params_counted);
    static const char *const pos[] = {"learned", "alibi", "rope"};
    _Static_assert(sizeof pos / sizeof pos[0] == TSR_POS_COUNT, "pos names");
    char arch[160];
    if (c->model.mlp == TSR_MLP_SWIGLU)
        snprintf(arch, sizeof arch, "mlp=swiglu %d", m->F);
    else snprintf(arch, sizeof arch, "mlp=%d gelu=%s", m->F, c->model.gelu ? "exact" : "tanh");
    if (m->E) { /* docs/moe.md */
        char shared[32] = "";
        if (m->S) snprintf(shared, sizeof shared, " shared=%d", m->S);
        size_t o = strlen(arch);
        snprintf(arch + o, sizeof arch - o, " moe: experts=%d top_k=%d width=%d layers=%d/%d%s%s",
                 m->E, m->K, m->FE, m->LM, m->L, shared,
                 c->model.moe_norm_topk ? "" : " unnormalised");
    }
    printf("model: %s, L=%d d_model=%d heads=%d kv_heads=%d head_dim=%d %s vocab=%d (padded %d) "
           "pos=%s norm=%s bias=%s%s%s%s\n",
           np, m->L, m->C, m->NH, m->KVH, m->hs, arch, m->V, m->Vp, pos[c->model.pos],
           c->model.norm == TSR_NORM_RMSNORM ? "rmsnorm" : "layernorm", c->model.bias ? "yes" : "no",
           c->model.qkv_bias && !c->model.bias ? " qkv_bias" : "", c->model.qk_norm ? " qk_norm" : "",
           c->model.tie_embeddings ? "" : " untied");
}

/* the plan's parameter line (trainable, frozen, FLOPs per token) and, with experts over several
 * ranks, the expert-parallel line */
static void plan_params(const tsr_trainer *t, int lora) {
    const tsr_model *m = &t->model;
    char trainable[96]; /* under LoRA the adapters train, the base is frozen */
    if (lora)
        snprintf(trainable, sizeof trainable, "%zu trainable (LoRA adapters), %zu frozen (the "
                 "base)", t->part.lora.n, m->n_params_counted);
    else
        snprintf(trainable, sizeof trainable, "%zu trainable", m->n_params_counted);
    if (m->E)
        printf("params: %s, %.0f active per token (%d of %d experts); FLOPs/token = "
               "6N_active + 12*L*(heads*head_dim)*T = %.4g (docs/mfu.md)\n", trainable,
               model_active_params(m),
               m->K, m->E, t->out.flops_per_token);
    else
        printf("params: %s; FLOPs/token = 6N + 12*L*(heads*head_dim)*T = %.4g (docs/mfu.md)\n",
               trainable, t->out.flops_per_token);
    if (m->EP > 1)
        printf("expert parallelism: %d ranks per group share the %d experts, %d on each; %d "
               "cop%s of each expert (docs/moe.md)\n", m->EP, m->E, m->E / m->EP,
               t->dist.world / m->EP, t->dist.world / m->EP == 1 ? "y" : "ies");
}

/* the plan's LoRA line (docs/lora.md): the adapters, and the memory saved against a full
 * finetuning, whose plan is planned = the LoRA run's per rank, snapshots aside */
static void plan_lora(const tsr_trainer *t, double planned) {
    const tsr_model *m = &t->model;
    const tsr_config *c = &t->cfg;
    double fpb, fgb, fob, fcb, fab, full = plan_bytes(t, 0, &fpb, &fgb, &fob, &fcb, &fab);
    char saved[32], fulls[32];
    metrics_human_bytes(saved, sizeof saved, full - planned);
    metrics_human_bytes(fulls, sizeof fulls, full);
    char names[64] = "", why[160];
    unsigned mask = 0; /* the config check accepted the list */
    config_lora_targets(&c->model, c->lora.targets, &mask, why, sizeof why);
    for (int k = 0; k < TSR_LORA_COUNT; k++)
        if (mask >> k & 1u) {
            size_t o = strlen(names);
            snprintf(names + o, sizeof names - o, "%s%s", o ? "," : "",
                     config_lora_target_name(k));
        }
    printf("lora: r=%lld alpha=%g dropout=%g targets=%s; %zu adapter parameters (%.3f%% of "
           "the base's %zu, frozen); memory per rank %s less than full finetuning (%s)\n",
           (long long)c->lora.rank, c->lora.alpha, c->lora.dropout, names,
           t->part.lora.n, 100.0 * (double)t->part.lora.n / (double)m->n_params_counted,
           m->n_params_counted, saved, fulls);
}

/* how the state is sharded, for the memory line: " (ZeRO-3: ...)", or "" for DDP */
static void plan_sharding(const tsr_trainer *t, int lora, char how[160]) {
    const tsr_config *c = &t->cfg;
    how[0] = '\0';
    if (c->sharding == TSR_SHARD_ZERO1 && t->dist.world > 1)
        snprintf(how, 160, " (ZeRO-1: sharded over %d ranks)", t->dist.world);
    if (c->sharding == TSR_SHARD_ZERO3)
        snprintf(how, 160, " (ZeRO-3: %s sharded over %d ranks)",
                 lora ? "the frozen base" : "all state", t->part.fsdp_group);
    if (c->sharding == TSR_SHARD_HSDP)
        snprintf(how, 160, " (HSDP: %s sharded over groups of %d ranks, %d replicas)",
                 lora ? "the frozen base" : "all state", t->part.fsdp_group,
                 t->dist.world / t->part.fsdp_group);
}

/* the plan's memory line: one rank's fp32 bytes (plan_bytes) and sb, save_async's snapshot */
static void plan_memory(const tsr_trainer *t, int lora, double sb) {
    double pb, gb, ob, cb, ab;
    const double io = (double)t->ck.io_plan; /* the checkpoint's host buffers */
    double total = plan_bytes(t, lora, &pb, &gb, &ob, &cb, &ab) + io + sb;
    char w[32], g[32], opt[32], acts[32], tot[32], comm[32];
    metrics_human_bytes(comm, sizeof comm, cb);
    metrics_human_bytes(w, sizeof w, pb);
    metrics_human_bytes(g, sizeof g, gb);
    metrics_human_bytes(opt, sizeof opt, ob);
    metrics_human_bytes(acts, sizeof acts, ab);
    metrics_human_bytes(tot, sizeof tot, total);
    char how[160], mu[96], snap[160], share[64];
    plan_sharding(t, lora, how);
    memory_notes(t, io, sb, mu, snap, share);
    printf("memory per rank (fp32): weights %s, grads %s, %s %s%s%s, communication buffers %s, "
           "activations %s per microbatch of %d x %d%s%s; total %s\n",
           w, g, mu[0] ? "optimizer" : "AdamW", opt, mu, how, comm, acts, t->micro, t->T, share,
           snap, tot);
}

/* the plan's context-parallel line (docs/parallelism.md); the ring's activations bf16 on the GPU */
static void plan_context(const tsr_trainer *t) {
    const int N = t->mesh.N;
    char fw[32], bw[32];
    const tsr_model *mm = &t->model;
    const size_t act = t->cfg.device == TSR_DEVICE_CUDA ? 2 : sizeof(float);
    metrics_human_bytes(fw, sizeof fw, (double)ring_layer_bytes(act, N, t->micro, t->T,
                                                                mm->KVH, mm->hs, 0));
    metrics_human_bytes(bw, sizeof bw, (double)ring_layer_bytes(act, N, t->micro, t->T,
                                                                mm->KVH, mm->hs, 1));
    printf("context parallelism: each sequence split over %d ranks (%d group%s of %d "
           "consecutive ranks) in %d chunks of %d positions, zig-zag (rank r of a group holds "
           "chunks r and %d-r); attention runs as a ring, sending per rank, layer and "
           "microbatch %s forward and %s backward\n",
           N, t->mesh.D, t->mesh.D == 1 ? "" : "s", N, 2 * N, t->T / (2 * N), 2 * N - 1, fw,
           bw);
}

/* the plan's batch line; grpo: micro_batch counts prompts, each with its group_size completions
 * (t->micro rows) */
static void plan_batch(const tsr_trainer *t) {
    const tsr_config *c = &t->cfg;
    const int N = t->mesh.N;
    const int64_t G = c->objective == TSR_OBJ_GRPO ? c->grpo.group_size : 1;
    printf("batch: global %lld = %d %srank%s x %lld per rank = %lld microbatches of %d%s%s; "
           "seq_len %d; %lld tokens/step\n",
           (long long)c->global_batch, t->mesh.D, N > 1 ? "data " : "",
           N > 1 && t->mesh.D == 1 ? "" : "s", (long long)t->per_rank,
           (long long)(t->per_rank * G / t->micro), t->micro,
           G > 1 ? " sequences (prompts x grpo.group_size)" : "",
           t->auto_micro ? " (micro_batch = auto: the size tried first; halved on out-of-memory)"
                         : "", t->T, (long long)(c->global_batch * c->seq_len));
}

/* the plan's last line: a dry run's, or the steps of a real one */
static void plan_steps(const tsr_trainer *t, int dry_run) {
    const tsr_config *c = &t->cfg;
    if (dry_run) {
        printf("dry run: plan only, no data opened, nothing allocated\n");
        return;
    }
    /* the GPU's peak is known once the device is open: train_gpu_init prints it (a re-print
     * after an out-of-memory back-off, the device open, gives the number) */
    char peak[48] = "peak FLOP/s: the GPU's (below)";
    if (!(c->device == TSR_DEVICE_CUDA && c->peak_flops <= 0 && !t->be.gpu))
        snprintf(peak, sizeof peak, "peak %.4g FLOP/s per rank", t->out.peak_flops);
    printf("steps: %lld (warmup %lld), train samples/epoch %llu, eval every %lld steps; %s\n",
           (long long)t->total_steps, (long long)t->warmup_steps,
           (unsigned long long)t->data.sampler.n, (long long)t->eval_every, peak);
}

void metrics_print_plan(const tsr_trainer *t, int dry_run) {
    if (t->dist.rank != 0) return;
    const int lora = t->cfg.lora.rank > 0;
    const double sb = (double)t->ck.snap_plan; /* save_async's host copy */
    plan_model(t);
    plan_params(t, lora);
    if (lora) {
        double pb, gb, ob, cb, ab;
        plan_lora(t, plan_bytes(t, lora, &pb, &gb, &ob, &cb, &ab));
    }
    plan_memory(t, lora, sb);
    if (t->mesh.N > 1) plan_context(t);
    plan_batch(t);
    plan_steps(t, dry_run);
    fflush(stdout);
}

static int mkdir_p(const char *path) {
    char buf[1024];
    if (tsr_snprintf(buf, sizeof buf, "%s", path)) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

int metrics_save_config(const tsr_trainer *t) {
    char path[1200];
    snprintf(path, sizeof path, "%s/config.cfg", t->cfg.run_dir);
    return config_save(path, &t->cfg);
}

int metrics_open_run_dir(tsr_trainer *t) {
    TSR_CHECK(metrics_prom_check(t)); /* (before run_dir is written) */
    char path[1200];
    if (mkdir_p(t->cfg.run_dir) != 0) {
        tsr_error("run_dir = \"%s\": cannot create: %s", t->cfg.run_dir, strerror(errno));
        return TSR_EXIT_DATA;
    }
    TSR_CHECK(metrics_save_config(t));
    /* appended to: a resumed or requeued run continues the same file (a "start" line marks each
     * process start; a step logged twice after a crash is the later line that counts) */
    snprintf(path, sizeof path, "%s/metrics.jsonl", t->cfg.run_dir);
    t->out.metrics = fopen(path, "a");
    if (!t->out.metrics) {
        tsr_error("%s: cannot open for writing: %s", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    /* a new event file per process start: TensorBoard merges the files of run_dir/tb/ */
    TSR_CHECK(tboard_open(&t->out.tb, t->cfg.run_dir));
    return 0;
}

void metrics_end_record(FILE *f) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fprintf(f, ", \"time\": %lld.%03ld}\n", (long long)ts.tv_sec, ts.tv_nsec / 1000000);
    fflush(f);
}

static void format_eta(char *buf, size_t n, double s) {
    long v = (long)(s + 0.5);
    if (v >= 3600) snprintf(buf, n, "%ldh%02ldm", v / 3600, v / 60 % 60);
    else if (v >= 60) snprintf(buf, n, "%ldm%02lds", v / 60, v % 60);
    else snprintf(buf, n, "%lds", v);
}

static void json_number(char *buf, size_t n, double v) {
    if (isfinite(v)) snprintf(buf, n, "%.9g", v);
    else snprintf(buf, n, "null");
}

/* MoE: one layer's expert load of the step: tokens routed (assignments), fewest and most per
 * expert, coefficient of variation (population standard deviation / mean) */
typedef struct moe_load {
    double tokens, min, max, cv;
} moe_load;

static moe_load moe_layer_load(const double *counts, int E) {
    moe_load s = {0, counts[0], counts[0], 0};
    for (int e = 0; e < E; e++) {
        s.tokens += counts[e];
        if (counts[e] < s.min) s.min = counts[e];
        if (counts[e] > s.max) s.max = counts[e];
    }
    double mean = s.tokens / E, var = 0;
    for (int e = 0; e < E; e++) var += (counts[e] - mean) * (counts[e] - mean);
    s.cv = mean > 0 ? sqrt(var / E) / mean : 0;
    return s;
}

/* The step's summed MoE losses over the layers: [aux, z] */
static void moe_losses(const tsr_trainer *t, double out[2]) {
    out[0] = out[1] = 0;
    for (int k = 0; k < t->model.LM; k++) {
        const double *x = t->out.moe + (size_t)k * (size_t)(2 + t->model.E);
        out[0] += x[0];
        out[1] += x[1];
    }
}

/* One figure of an objective's step, PREFIX_NAME into the metrics.jsonl record and PREFIX/NAME
 * into the TensorBoard step */
static void log_figure(tsr_trainer *t, const char *prefix, const char *name, double v) {
    if (t->out.metrics) {
        char num[32];
        json_number(num, sizeof num, v);
        fprintf(t->out.metrics, ", \"%s_%s\": %s", prefix, name, num);
    }
    if (t->out.tb) {
        char tag[64];
        snprintf(tag, sizeof tag, "%s/%s", prefix, name);
        tboard_scalar(t->out.tb, tag, v);
    }
}

/* objective = dpo: the step's means over its pairs (train/dpo.h; docs/dpo.md), into the
 * metrics.jsonl record and the TensorBoard step */
static void dpo_log(tsr_trainer *t) {
    if (t->cfg.objective != TSR_OBJ_DPO) return;
    const double P = (double)(t->cfg.global_batch / 2);
    const double *s = t->out.dpo;
    const struct { const char *name; double v; } f[] = {
        {"reward_chosen", s[DPO_CHOSEN_REWARD] / P},
        {"reward_rejected", s[DPO_REJECTED_REWARD] / P},
        {"reward_margin", (s[DPO_CHOSEN_REWARD] - s[DPO_REJECTED_REWARD]) / P},
        {"accuracy", s[DPO_ACCURACY] / P},
        {"logp_chosen", s[DPO_CHOSEN_LOGP] / P},
        {"logp_rejected", s[DPO_REJECTED_LOGP] / P},
    };
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) log_figure(t, "dpo", f[k].name, f[k].v);
}

/* objective = grpo: the step's figures (train/grpo.h grpo_metrics; docs/rl.md "Metrics"), into
 * the metrics.jsonl record and the TensorBoard step */
static void grpo_log(tsr_trainer *t, const tsr_step_stats *st) {
    if (t->cfg.objective != TSR_OBJ_GRPO) return;
    grpo_metric f[GRPO_NSTATS];
    const int n = grpo_metrics(t, st, f);
    for (int k = 0; k < n; k++) log_figure(t, "grpo", f[k].name, f[k].v);
}

/* the MoE part of a metrics.jsonl record and of the TensorBoard step (docs/moe.md) */
static void moe_log(tsr_trainer *t) {
    if (!t->out.moe) return;
    const int E = t->model.E;
    double lz[2];
    moe_losses(t, lz);
    if (t->out.metrics) { /* non-finite values (a diverged step) are null, as the loss is */
        char aux[32], z[32], cv[32];
        json_number(aux, sizeof aux, lz[0]);
        json_number(z, sizeof z, lz[1]);
        fprintf(t->out.metrics, ", \"moe_aux\": %s, \"moe_z\": %s, \"moe_load\": [", aux, z);
        for (int k = 0; k < t->model.LM; k++) {
            moe_load s = moe_layer_load(t->out.moe + (size_t)k * (size_t)(2 + E) + 2, E);
            json_number(cv, sizeof cv, s.cv);
            fprintf(t->out.metrics, "%s{\"tokens\": %.0f, \"min\": %.0f, \"max\": %.0f, "
                    "\"cv\": %s}", k ? ", " : "", s.tokens, s.min, s.max, cv);
        }
        fprintf(t->out.metrics, "]");
    }
    if (t->out.tb) {
        char tag[64];
        tboard_scalar(t->out.tb, "moe/aux", lz[0]);
        tboard_scalar(t->out.tb, "moe/z", lz[1]);
        for (int k = 0; k < t->model.LM; k++) {
            moe_load s = moe_layer_load(t->out.moe + (size_t)k * (size_t)(2 + E) + 2, E);
            snprintf(tag, sizeof tag, "moe/load_cv/%d", k);
            tboard_scalar(t->out.tb, tag, s.cv);
            snprintf(tag, sizeof tag, "moe/load_max/%d", k);
            tboard_scalar(t->out.tb, tag, s.max);
            snprintf(tag, sizeof tag, "moe/load_min/%d", k);
            tboard_scalar(t->out.tb, tag, s.min);
        }
    }
}

/* a step's rates: the mean step time of this process, tokens/s and MFU */
typedef struct step_rates {
    double avg, tok_s, mfu;
} step_rates;

/* the step's rates; counts the step into this process's mean step time */
static step_rates step_rates_of(tsr_trainer *t, const tsr_step_stats *st) {
    step_rates r;
    /* the first step of this process pays for page faults and thread start-up: keep it out of
     * the average, which divides this process's time by this process's steps (after a resume
     * the step number counts the earlier runs' steps too) */
    if (++t->out.steps_run > 1) t->out.time_sum += st->step_time;
    r.avg = t->out.steps_run > 1 ? t->out.time_sum / (double)(t->out.steps_run - 1)
                                 : st->step_time;
    r.tok_s = (double)(t->cfg.global_batch * t->T) / st->step_time;
    r.mfu = t->out.peak_flops > 0
                ? t->out.flops_per_token * r.tok_s / (t->dist.world * t->out.peak_flops) : 0;
    return r;
}

/* the objective's and the MoE's figures of the step line: " | margin ... acc ...", ... */
static void step_line_aux(const tsr_trainer *t, const tsr_step_stats *st, char aux[96]) {
    size_t o = 0;
    aux[0] = '\0';
    if (t->cfg.objective == TSR_OBJ_DPO) { /* docs/dpo.md */
        const double P = (double)(t->cfg.global_batch / 2), *s = t->out.dpo;
        o += (size_t)snprintf(aux, 96, " | margin %.4f acc %.2f",
                              (s[DPO_CHOSEN_REWARD] - s[DPO_REJECTED_REWARD]) / P,
                              s[DPO_ACCURACY] / P);
    }
    if (t->cfg.objective == TSR_OBJ_GRPO) { /* docs/rl.md */
        grpo_metric f[GRPO_NSTATS];
        grpo_metrics(t, st, f);
        o += (size_t)snprintf(aux, 96, " | reward %.4f pass %.3f len %.1f", f[0].v, f[2].v,
                              f[3].v);
    }
    if (t->out.moe && o < 96) { /* (DPO on a MoE model: both) */
        double lz[2];
        moe_losses(t, lz);
        snprintf(aux + o, 96 - o, " | aux %.4f", lz[0]);
    }
}

/* the step line on stdout */
static void step_line(const tsr_trainer *t, const tsr_step_stats *st, const step_rates *r) {
    char eta[32], mem[32], aux[96];
    format_eta(eta, sizeof eta, r->avg * (double)(t->total_steps - st->step));
    metrics_human_bytes(mem, sizeof mem, st->peak_mem);
    step_line_aux(t, st, aux);
    printf("step %*lld/%lld | loss %.6f%s | lr %.3e | norm %.4f | %.0f tok/s | mfu %.1f%% | "
           "%.1f ms | mem %s | eta %s\n",
           (int)snprintf(NULL, 0, "%lld", (long long)t->total_steps), (long long)st->step,
           (long long)t->total_steps, st->loss, aux, st->lr, st->grad_norm, r->tok_s,
           100 * r->mfu, 1e3 * st->step_time, mem, eta);
    fflush(stdout);
}

/* a mixture's samples trained on from each stream so far, as loaded, into the record */
static void step_record_streams(const tsr_trainer *t) {
    FILE *f = t->out.metrics;
    fprintf(f, ", \"samples\": {");
    for (int k = 0; k < t->data.n_streams; k++)
        fprintf(f, "%s\"%s\": %lld", k ? ", " : "", t->data.stream_names[k],
                (long long)t->data.stream_seen[k]);
    fprintf(f, "}, \"stream_tokens\": {");
    for (int k = 0; k < t->data.n_streams; k++)
        fprintf(f, "%s\"%s\": %lld", k ? ", " : "", t->data.stream_names[k],
                (long long)t->data.stream_seen[k] * t->T);
    fprintf(f, "}");
}

/* the step's metrics.jsonl record, up to the objective's and the MoE's figures */
static void step_record(const tsr_trainer *t, const tsr_step_stats *st, const step_rates *r) {
    /* JSON has no NaN or Inf: a non-finite value is null (a zero step time from a coarse
     * clock would make the rates infinite) */
    char loss[32], norm[32], rate[32], frac[32], secs[32];
    json_number(loss, sizeof loss, st->loss);
    json_number(norm, sizeof norm, st->grad_norm);
    json_number(rate, sizeof rate, r->tok_s);
    json_number(frac, sizeof frac, r->mfu);
    json_number(secs, sizeof secs, st->step_time);
    fprintf(t->out.metrics,
            "{\"step\": %lld, \"loss\": %s, \"lr\": %.9g, \"grad_norm\": %s, "
            "\"tokens\": %lld, \"tokens_per_s\": %s, \"mfu\": %s, \"step_time_s\": %s, "
            "\"data_batch\": %lld, \"targets\": %lld, \"peak_mem_bytes\": %.0f, "
            "\"peak_rss_bytes\": %.0f",
            (long long)st->step, loss, st->lr, norm, (long long)t->tokens_seen,
            rate, frac, secs, (long long)st->data_batch, (long long)st->tokens,
            st->peak_mem, st->peak_rss);
    if (t->data.n_streams > 1) step_record_streams(t);
    static const char *const verdicts[] = {"ok", "warn", "skip", "rollback", "stop"};
    if (st->verdict != GUARD_OK)
        fprintf(t->out.metrics, ", \"guard\": \"%s\"", verdicts[st->verdict]);
}

/* the step's TensorBoard figures after the objective's and the MoE's: the same as the JSONL
 * line (mfu as a fraction, as there); writes the step */
static void step_tboard(const tsr_trainer *t, const tsr_step_stats *st, const step_rates *r) {
    double pb, gb, ob, cb, ab;
    tboard_scalar(t->out.tb, "train/loss", st->loss);
    tboard_scalar(t->out.tb, "train/lr", st->lr);
    tboard_scalar(t->out.tb, "train/grad_norm", st->grad_norm);
    tboard_scalar(t->out.tb, "train/tokens_per_s", r->tok_s);
    tboard_scalar(t->out.tb, "train/mfu", r->mfu);
    tboard_scalar(t->out.tb, "train/step_time_s", st->step_time);
    tboard_scalar(t->out.tb, "train/tokens", (double)t->tokens_seen);
    tboard_scalar(t->out.tb, "memory/planned_bytes", plan_bytes(t, t->part.lora_on, &pb, &gb, &ob, &cb, &ab));
    tboard_scalar(t->out.tb, "memory/peak_bytes", st->peak_mem);
    tboard_scalar(t->out.tb, "memory/peak_rss_bytes", st->peak_rss);
    tboard_write_step(t->out.tb, st->step);
}

void metrics_log_step(tsr_trainer *t, const tsr_step_stats *st) {
    if (t->dist.rank != 0) return;
    const step_rates r = step_rates_of(t, st);
    if (st->step % t->cfg.log_interval == 0 || st->step == t->total_steps || st->step == 1)
        step_line(t, st, &r);
    metrics_prom_step(t, st, r.tok_s, r.mfu, r.avg * (double)(t->total_steps - st->step));
    if (t->out.metrics) step_record(t, st, &r);
    moe_log(t); /* the record's MoE part and the TensorBoard step's (before it is written) */
    dpo_log(t);
    grpo_log(t, st);
    if (t->out.metrics) metrics_end_record(t->out.metrics);
    if (t->out.tb) step_tboard(t, st, &r);
}

void metrics_log_guard_note(const tsr_trainer *t, const char *action, const tsr_step_stats *st,
                            const char *note) {
    if (t->dist.rank != 0) return;
    printf("guard: %s at step %lld (data batch %lld): %s\n", action, (long long)st->step,
           (long long)st->data_batch, note);
    fflush(stdout);
    if (t->out.metrics) {
        fprintf(t->out.metrics, "{\"event\": \"guard\", \"action\": \"%s\", \"step\": %lld, "
                "\"data_batch\": %lld, \"why\": \"%s\"", action, (long long)st->step,
                (long long)st->data_batch, note);
        metrics_end_record(t->out.metrics);
    }
}

void metrics_log_guard(const tsr_trainer *t, const char *action, const tsr_step_stats *st) {
    if (t->dist.rank != 0) return;
    printf("guard: %s step %lld (data batch %lld): %s\n", action, (long long)st->step,
           (long long)st->data_batch, st->why);
    fflush(stdout);
    char loss[32], norm[32];
    json_number(loss, sizeof loss, st->loss);
    json_number(norm, sizeof norm, st->grad_norm);
    if (t->out.metrics) {
        fprintf(t->out.metrics,
                "{\"event\": \"guard\", \"action\": \"%s\", \"step\": %lld, \"data_batch\": %lld, "
                "\"outlier_loss\": %s, \"outlier_grad_norm\": %s, \"why\": \"%s\"",
                action, (long long)st->step, (long long)st->data_batch, loss, norm, st->why);
        metrics_end_record(t->out.metrics);
    }
}

void metrics_log_rollback(const tsr_trainer *t, int64_t from_step, const char *path, int64_t lo,
                          int64_t hi) {
    if (t->dist.rank != 0) return;
    account_rolled_back(from_step, t->step); /* the steps after the restored one: lost */
    long long gb = (long long)t->cfg.global_batch;
    printf("guard: rollback at step %lld to step %lld (%s); skipping data batches [%lld, %lld) = "
           "global samples [%lld, %lld); rollback %lld of %lld\n",
           (long long)from_step, (long long)t->step, path, (long long)lo, (long long)hi,
           (long long)lo * gb, (long long)hi * gb, (long long)t->guard.rollbacks,
           (long long)t->guard.max_rollbacks);
    fflush(stdout);
    if (t->out.metrics) {
        fprintf(t->out.metrics,
                "{\"event\": \"rollback\", \"step\": %lld, \"to_step\": %lld, \"checkpoint\": "
                "\"%s\", \"skipped_batches\": [%lld, %lld], \"skipped_samples\": [%lld, %lld], "
                "\"rollbacks\": %lld",
                (long long)from_step, (long long)t->step, path, (long long)lo, (long long)hi,
                (long long)lo * gb, (long long)hi * gb, (long long)t->guard.rollbacks);
        metrics_end_record(t->out.metrics);
    }
}

/* Rank 0: "checkpoint WHAT step S | PATH | X s | Y MB | Z GB/s" printed (no newline) and its
 * metrics.jsonl record begun (left open for more fields). */
static void checkpoint_record(const tsr_trainer *t, const char *what, int64_t step,
                              const char *path, double seconds, uint64_t bytes) {
    double gbs = seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0;
    printf("checkpoint %s step %lld | %s | %.3f s | %.1f MB | %.2f GB/s", what, (long long)step,
           path, seconds, (double)bytes / 1e6, gbs);
    if (t->out.metrics)
        fprintf(t->out.metrics,
                "{\"step\": %lld, \"checkpoint\": \"%s\", \"path\": \"%s\", \"seconds\": %.6g, "
                "\"bytes\": %llu, \"gb_per_s\": %.6g",
                (long long)step, what, path, seconds, (unsigned long long)bytes, gbs);
}

void metrics_log_checkpoint(const tsr_trainer *t, const char *what, const char *path,
                            double seconds, uint64_t bytes) {
    if (t->dist.rank != 0) return;
    account_add(ACC_LOAD, seconds); /* (saves: metrics_log_save) */
    checkpoint_record(t, what, t->step, path, seconds, bytes);
    printf("\n");
    fflush(stdout);
    if (t->out.metrics) metrics_end_record(t->out.metrics);
}

void metrics_log_save(const tsr_trainer *t, int64_t step, const char *path, const ckpt_stats *st,
                      int async) {
    if (t->dist.rank != 0) return;
    account_add(ACC_SAVE, st->blocking); /* the time training stood still for it (goodput) */
    metrics_prom_saved(t);
    checkpoint_record(t, "save", step, path, st->seconds, st->bytes);
    if (async)
        printf(" | blocking %.3f s (snapshot %.3f s%s); written in the background in %.3f s, "
               "waited %.3f s for it; committed at step %lld", st->blocking, t->ck.snap_s,
               t->ck.copy_in_step ? ", copied in the step" : "", st->write, st->waited,
               (long long)t->step);
    printf("\n");
    fflush(stdout);
    if (!t->out.metrics) return;
    fprintf(t->out.metrics, ", \"async\": %s, \"blocking_s\": %.6g, \"write_s\": %.6g, "
            "\"waited_s\": %.6g, \"committed_step\": %lld", async ? "true" : "false",
            st->blocking, st->write, st->waited, (long long)t->step);
    fprintf(t->out.metrics, ", \"write_cpu_s\": %.6g, \"write_cpu_copy_s\": %.6g, "
            "\"write_cpu_slices_s\": %.6g, \"write_cpu_fsync_s\": %.6g, \"write_cpu_io_s\": %.6g, "
            "\"write_bounced_bytes\": %llu", st->write_cpu, st->write_cpu_copy,
            st->write_cpu_slices, st->write_cpu_fsync, st->write_cpu_io,
            (unsigned long long)st->write_bounced);
    if (async)
        fprintf(t->out.metrics, ", \"snapshot_s\": %.6g, \"copy_in_step\": %s", t->ck.snap_s,
                t->ck.copy_in_step ? "true" : "false");
    metrics_end_record(t->out.metrics);
}

void metrics_log_micro(const tsr_trainer *t, int from, int micro, int64_t failed) {
    if (t->dist.rank != 0) return;
    const double mib = 1024.0 * 1024.0;
    if (from > 0)
        printf("micro_batch auto: %d x %d sequences (%.1f MiB of activations) do not fit on %lld "
               "of %d ranks: step %lld reruns with microbatches of %d\n", from, t->T,
               (double)model_acts_bytes(&t->model, from, t->T) / mib, (long long)failed,
               t->dist.world, (long long)t->step + 1, micro);
    else
        printf("micro_batch auto: %d sequences per pass (%lld passes per step), %.1f MiB of "
               "activations per rank\n", micro, (long long)(t->per_rank / micro),
               (double)model_acts_bytes(&t->model, micro, t->T) / mib);
    fflush(stdout);
    if (t->out.metrics) {
        fprintf(t->out.metrics, "{\"event\": \"micro_batch\", \"step\": %lld, \"micro_batch\": %d",
                (long long)t->step, micro);
        if (from > 0)
            fprintf(t->out.metrics, ", \"did_not_fit\": %d, \"ranks_failed\": %lld", from,
                    (long long)failed);
        metrics_end_record(t->out.metrics);
    }
}

void metrics_log_start(tsr_trainer *t) {
    if (t->dist.rank != 0 || !t->out.metrics) return;
    fprintf(t->out.metrics, "{\"event\": \"start\", \"step\": %lld, \"world\": %d",
            (long long)t->step, t->dist.world);
    account_start_fields(t, t->out.metrics); /* when and what this start holds (account.h) */
    metrics_end_record(t->out.metrics);
}

/* A number or null (JSON has no NaN) as `, "key": v`. */
static void put_num(FILE *f, const char *key, double v) {
    if (isfinite(v)) fprintf(f, ", \"%s\": %.6g", key, v);
    else fprintf(f, ", \"%s\": null", key);
}

static void account_record(FILE *f, const acc_start *s, int rc) {
    const double h = s->wall / 3600;
    fprintf(f, "{\"event\": \"account\", \"step\": %lld, \"exit\": %d, \"wall_s\": %.6g",
            (long long)s->step, rc, s->wall);
    for (int p = 0; p < ACC_PARTS; p++)
        fprintf(f, ", \"%s\": %.6g", account_part_key((acc_part)p), s->s[p]);
    fprintf(f, ", \"goodput\": %.6g, \"ranks\": %d, \"gpus\": %d, \"threads\": %d, "
               "\"gpu_hours\": %.6g, \"cpu_hours\": %.6g, \"core_hours\": %.6g",
            s->wall > 0 ? s->s[ACC_STEPS] / s->wall : 0, s->ranks, s->gpus, s->threads,
            s->gpus * h, s->ranks * h, s->ranks * s->threads * h);
    put_num(f, "gpu_energy_j", s->gpu_j);
    put_num(f, "cpu_energy_j", s->cpu_j);
    metrics_end_record(f);
}

static void energy_words(char *buf, size_t n, const char *what, double j, int gpu) {
    if (isfinite(j)) snprintf(buf, n, "%s %.4g kWh", what, j / 3.6e6);
    else snprintf(buf, n, "%s not measured (%s)", what, account_energy_why(gpu));
}

void metrics_log_account(const tsr_trainer *t, int rc, const acc_start *s) {
    if (t->dist.rank != 0 || !t->out.metrics) return;
    metrics_prom_end(t, rc);
    account_record(t->out.metrics, s, rc);
    char ge[256], ce[256], path[1200], line[400];
    energy_words(ge, sizeof ge, "GPU energy", s->gpu_j, 1);
    energy_words(ce, sizeof ce, "CPU package energy", s->cpu_j, 0);
    printf("cost: this start %.1f s x %d rank%s: %.4g GPU-h, %.4g CPU-h, goodput %.1f%%; %s; %s\n",
           s->wall, s->ranks, s->ranks > 1 ? "s" : "", s->gpus * s->wall / 3600,
           s->ranks * s->wall / 3600, s->wall > 0 ? 100 * s->s[ACC_STEPS] / s->wall : 0, ge, ce);
    acc_run r; /* the run so far, every start of run_dir (its own file: an error is not expected) */
    snprintf(path, sizeof path, "%s/metrics.jsonl", t->cfg.run_dir);
    if (account_read(&r, path) == 0 && r.n > 0) {
        account_line(&r, t->step, line, sizeof line);
        printf("cost: run so far: %s\n", line);
        fflush(stdout);
        if (account_comment_file(line) == 1)
            printf("cost: the line for the job's comment in TSR_COMMENT_FILE (the hook sets it)\n");
    }
    account_free(&r);
    fflush(stdout);
}

void metrics_log_eval(tsr_trainer *t, double val_loss, double seconds) {
    if (t->dist.rank != 0) return;
    if (t->cfg.objective == TSR_OBJ_DPO) { /* the pairs' DPO loss and accuracy (docs/dpo.md) */
        printf("eval step %lld | val dpo loss %.6f | val accuracy %.4f | %.2f s\n",
               (long long)t->step, val_loss, t->out.val_accuracy, seconds);
        fflush(stdout);
        if (t->out.metrics) {
            char vl[32], va[32]; /* null when there were no pairs (NaN) */
            json_number(vl, sizeof vl, val_loss);
            json_number(va, sizeof va, t->out.val_accuracy);
            fprintf(t->out.metrics, "{\"step\": %lld, \"val_loss\": %s, \"val_dpo_accuracy\": %s",
                    (long long)t->step, vl, va);
            metrics_end_record(t->out.metrics);
        }
        tboard_scalar(t->out.tb, "eval/val_loss", val_loss);
        tboard_scalar(t->out.tb, "eval/val_dpo_accuracy", t->out.val_accuracy);
        tboard_write_step(t->out.tb, t->step);
        return;
    }
    if (t->cfg.objective == TSR_OBJ_GRPO) { /* held-out pass@1 (docs/rl.md) */
        if (t->out.val_accuracy < 0) return; /* (the reward failed: reported) */
        printf("eval step %lld | val pass@1 %.4f | val reward %.4f | %.2f s\n",
               (long long)t->step, t->out.val_accuracy, t->out.val_reward, seconds);
        fflush(stdout);
        if (t->out.metrics) {
            char vp[32], vr[32];
            json_number(vp, sizeof vp, t->out.val_accuracy);
            json_number(vr, sizeof vr, t->out.val_reward);
            fprintf(t->out.metrics, "{\"step\": %lld, \"val_pass_at_1\": %s, \"val_reward\": %s",
                    (long long)t->step, vp, vr);
            metrics_end_record(t->out.metrics);
        }
        tboard_scalar(t->out.tb, "eval/val_pass_at_1", t->out.val_accuracy);
        tboard_scalar(t->out.tb, "eval/val_reward", t->out.val_reward);
        tboard_write_step(t->out.tb, t->step);
        return;
    }
    printf("eval step %lld | val loss %.6f | val ppl %.4f | %.2f s\n", (long long)t->step,
           val_loss, exp(val_loss), seconds);
    fflush(stdout);
    if (t->out.metrics) {
        fprintf(t->out.metrics, "{\"step\": %lld, \"val_loss\": %.9g, \"val_ppl\": %.9g",
                (long long)t->step, val_loss, exp(val_loss));
        metrics_end_record(t->out.metrics);
    }
    tboard_scalar(t->out.tb, "eval/val_loss", val_loss);
    tboard_scalar(t->out.tb, "eval/val_ppl", exp(val_loss));
    tboard_write_step(t->out.tb, t->step);
}

void metrics_finish(tsr_trainer *t) {
    if (t->dist.rank != 0) return;
    double avg = t->out.steps_run > 1 ? t->out.time_sum / (double)(t->out.steps_run - 1) : 0;
    if (t->out.steps_run > 1)
        /* a count, not a step range: a guard rollback makes this process run steps again */
        printf("done: %lld steps, %lld tokens, %.1f ms/step average (over the %lld steps this "
               "process ran after its first)\n", (long long)t->step, (long long)t->tokens_seen,
               1e3 * avg, (long long)(t->out.steps_run - 1));
    else
        printf("done: %lld steps, %lld tokens (%lld run by this process: no average)\n",
               (long long)t->step, (long long)t->tokens_seen, (long long)t->out.steps_run);
    fflush(stdout);
    /* (the early-return paths close it in trainer_free; every record is flushed already) */
    tboard_close(t->out.tb);
    t->out.tb = NULL;
}

void metrics_log_sample(const tsr_trainer *t, const int32_t *ids, int n) {
    printf("sample (%d tokens, temperature %g, top-k %lld):\n", n, t->cfg.sample.temperature,
           (long long)t->cfg.sample.top_k);
    const tsr_tokenizer *tok = t->tok; /* loaded at start (trainer_init) */
    if (tok) {
        uint32_t *u = tsr_malloc((size_t)n * sizeof *u);
        for (int i = 0; i < n; i++) u[i] = (uint32_t)ids[i];
        size_t len = tokenizer_decode(tok, u, (size_t)n, NULL, 0);
        uint8_t *text = len == (size_t)-1 ? NULL : tsr_malloc(len + 1);
        if (text) tokenizer_decode(tok, u, (size_t)n, text, len);
        if (text) printf("%.*s\n", (int)len, (const char *)text);
        free(text);
        free(u);
    } else {
        for (int i = 0; i < n; i++) printf("%d%c", ids[i], i + 1 == n ? '\n' : ' ');
    }
    fflush(stdout);
}
