/* plan.c — the plan rank 0 prints at start (and --dry-run / --plan alone): the model, its
 * parameters and FLOPs per token, one rank's memory (fp32 on the host; device = cuda: the
 * device's, from the CUDA path's own sizes), context parallelism, the batch split and the steps.
 * See plan.h. */
#include "plan/plan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/model_pp.h"
#include "model/model_ring.h"
#include "metrics_units.h"
#include "run/objective.h"

static void human_count(char *buf, size_t n, double v) {
    if (v >= 1e9) snprintf(buf, n, "%.2fB", v / 1e9);
    else if (v >= 1e6) snprintf(buf, n, "%.2fM", v / 1e6);
    else if (v >= 1e3) snprintf(buf, n, "%.1fK", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
}

/* optim.name = muon on the CPU: its scratch (the optimizer slot's, optim/optim.h; device = cuda:
 * the device plan's) */
static double muon_scratch(const plan_view *t) {
    if (t->cfg.device == TSR_DEVICE_CUDA) return 0.0;
    return (double)optim_scratch_bytes(&t->model, &t->cfg.optim,
                                       t->part.fsdp_on ? t->part.fsdp_group : 0);
}

/* The planned fp32 memory of one rank, in bytes: weights = grads = pb, the optimizer ob (AdamW's
 * moments and Muon's scratch), activations of one microbatch ab; returns the total. */
static double plan_bytes(const plan_view *t, int lora, double *pb, double *gb, double *ob,
                         double *cb, double *ab) {
    *pb = *gb = (double)t->model.n_params * sizeof(float);
    *ab = (double)model_acts_bytes(&t->model, t->micro, t->T); /* the linear layers' slot in it */
    /* ZeRO-1 keeps AdamW state for 1/W of the parameters on each rank (W: the ranks holding
     * the same layout, the world or under tensor parallelism the tensor_data group), and
     * receives its slice of the summed gradients into a buffer of that size; DDP all-reduces in
     * place */
    const int W = t->part.flat_world, zero1 = t->cfg.sharding == TSR_SHARD_ZERO1 && W > 1;
    *ob = 2 * *pb / (zero1 ? W : 1);
    *cb = zero1 ? *pb / W : 0;
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
    return *pb + *gb + *ob + *cb + *ab + t->sdc_bytes; /* (the replay's: plan_memory names it) */
}

/* The memory line's optional parts: Muon's buffers (mu), the checkpoint's buffers of io bytes
 * and the save_async snapshot of sb bytes (snap), context parallelism's share of a sequence and
 * the linear layers' backward scratch (share); "" where they do not apply. */
static void memory_notes(const plan_view *t, double io, double sb, char mu[96], char snap[160],
                         char share[160]) {
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
    const double dn = (double)model_dn_scratch_bytes(&t->model, t->micro, t->T);
    if (dn > 0) { /* docs/deltanet.md "Wiring": a linear layer's backward scratch */
        metrics_human_bytes(b, sizeof b, dn);
        size_t o = strlen(share);
        snprintf(share + o, 160 - o, " (a linear layer's backward scratch %s in them)", b);
    }
}

/* the plan's model line: size, shape, MLP (and MoE), vocabulary, positions, norm (a split
 * model's whole sizes), then the variants (config_variants_text) */
static void plan_model(const plan_view *t) {
    const tsr_model *m = t->model.global ? t->model.global : &t->model;
    const tsr_config *c = &t->cfg;
    char np[32];
    human_count(np, sizeof np, (double)m->n_params_counted);
    static const char *const pos[] = {"learned", "alibi", "rope"};
    _Static_assert(sizeof pos / sizeof pos[0] == TSR_POS_COUNT, "pos names");
    char arch[160];
    if (config_mlp_gated(&c->model))
        snprintf(arch, sizeof arch, "mlp=%s %d",
                 c->model.mlp == TSR_MLP_SWIGLU ? "swiglu" : "geglu_tanh", m->F);
    else snprintf(arch, sizeof arch, "mlp=%d gelu=%s", m->F, c->model.gelu ? "exact" : "tanh");
    if (m->E) { /* docs/moe.md */
        char shared[32] = "";
        if (m->S) snprintf(shared, sizeof shared, " shared=%d", m->S);
        size_t o = strlen(arch);
        snprintf(arch + o, sizeof arch - o, " moe: experts=%d top_k=%d width=%d layers=%d/%d%s%s",
                 m->E, m->K, m->FE, m->LM, m->L, shared,
                 c->model.moe_norm_topk ? "" : " unnormalised");
    }
    char variants[640]; /* docs/planning.md "The model line" */
    config_variants_text(&c->model, variants, sizeof variants);
    printf("model: %s, L=%d d_model=%d heads=%d kv_heads=%d head_dim=%d %s vocab=%d (padded %d) "
           "pos=%s norm=%s bias=%s%s%s%s%s%s\n",
           np, m->L, m->C, m->NH, m->KVH, m->hs, arch, m->V, m->Vp, pos[c->model.pos],
           c->model.norm == TSR_NORM_RMSNORM ? "rmsnorm" : "layernorm", c->model.bias ? "yes" : "no",
           c->model.qkv_bias && !c->model.bias ? " qkv_bias" : "", c->model.qk_norm ? " qk_norm" : "",
           c->model.tie_embeddings ? "" : " untied", variants[0] ? "; " : "", variants);
}

/* the plan's parameter line (trainable, frozen, FLOPs per token) and, with experts over several
 * ranks, the expert-parallel line */
static void plan_params(const plan_view *t, int lora) {
    const tsr_model *m = &t->model;
    char trainable[96]; /* under LoRA the adapters train, the base is frozen */
    if (lora)
        snprintf(trainable, sizeof trainable, "%zu trainable (LoRA adapters), %zu frozen (the "
                 "base)", t->part.lora.n, m->n_params_counted);
    else
        snprintf(trainable, sizeof trainable, "%zu trainable", m->n_params_counted);
    /* the attention term: L T keys a query, fewer where sliding-window layers see W < T or
     * linear layers see none; the linear layers' own products (docs/mfu.md) */
    const char *keys = model_attn_keys(m, t->T) < (double)m->L * t->T ? "keys" : "L*T";
    char dn[64] = "";
    if (m->LL) snprintf(dn, sizeof dn, " + DeltaNet %.6g", model_dn_flops(m, t->T));
    /* multi-head latent attention: scores of dqk, values of dv (mixer_mla.c's mla_flops) */
    const char *att = m->kvr ? "6*heads*(qk_nope+qk_rope+v_head_dim)" : "12*(heads*head_dim)";
    if (m->E)
        printf("params: %s, %.0f active per token (%d of %d experts); FLOPs/token = "
               "6N_active + %s*%s%s = %.4g (docs/mfu.md)\n", trainable,
               model_active_params(m), m->K, m->E, att, keys, dn, t->out.flops_per_token);
    else
        printf("params: %s; FLOPs/token = 6N + %s*%s%s = %.4g (docs/mfu.md)\n", trainable, att,
               keys, dn, t->out.flops_per_token);
    if (m->EP > 1)
        printf("expert parallelism: %d ranks per group share the %d experts, %d on each; %d "
               "cop%s of each expert (docs/moe.md)\n", m->EP, m->E, m->E / m->EP,
               t->dist.world / m->EP, t->dist.world / m->EP == 1 ? "y" : "ies");
}

/* the plan's LoRA line (docs/lora.md): the adapters, and the memory saved against a full
 * finetuning, whose plan is planned = the LoRA run's per rank, snapshots aside */
static void plan_lora(const plan_view *t, double planned) {
    const tsr_model *m = &t->model;
    const tsr_config *c = &t->cfg;
    double fpb, fgb, fob, fcb, fab, full = plan_bytes(t, 0, &fpb, &fgb, &fob, &fcb, &fab);
    char saved[32], fulls[32];
    metrics_human_bytes(saved, sizeof saved, full - planned);
    metrics_human_bytes(fulls, sizeof fulls, full);
    char names[128] = "", why[160];
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

double plan_rank_bytes(const plan_view *t, int lora) {
    double pb, gb, ob, cb, ab;
    return plan_bytes(t, lora, &pb, &gb, &ob, &cb, &ab);
}

/* how the state is sharded, for the memory line: " (ZeRO-3: ...)", or "" for DDP */
static void plan_sharding(const plan_view *t, int lora, char how[160]) {
    const tsr_config *c = &t->cfg;
    how[0] = '\0';
    if (c->sharding == TSR_SHARD_ZERO1 && t->part.flat_world > 1)
        snprintf(how, 160, " (ZeRO-1: sharded over %d ranks)", t->part.flat_world);
    if (c->sharding == TSR_SHARD_ZERO3)
        snprintf(how, 160, " (ZeRO-3: %s sharded over %d ranks)",
                 lora ? "the frozen base" : "all state", t->part.fsdp_group);
    if (c->sharding == TSR_SHARD_HSDP)
        snprintf(how, 160, " (HSDP: %s sharded over groups of %d ranks, %d replicas)",
                 lora ? "the frozen base" : "all state", t->part.fsdp_group,
                 t->dist.world / t->part.fsdp_group);
}

/* the plan's memory line: one rank's fp32 bytes (plan_bytes) and sb, save_async's snapshot */
static void plan_memory(const plan_view *t, int lora, double sb) {
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
    char how[160], mu[96], snap[160], share[160], replay[96] = "";
    plan_sharding(t, lora, how);
    memory_notes(t, io, sb, mu, snap, share);
    if (t->sdc_bytes > 0) { /* docs/health.md "Deterministic replay" */
        char rb[32];
        metrics_human_bytes(rb, sizeof rb, t->sdc_bytes);
        snprintf(replay, sizeof replay, ", replay buffers %s (health.replay_interval)", rb);
    }
    printf("memory per rank (fp32): weights %s, grads %s, %s %s%s%s, communication buffers %s%s, "
           "activations %s per microbatch of %d x %d%s%s; total %s\n",
           w, g, mu[0] ? "optimizer" : "AdamW", opt, mu, how, comm, replay, acts, t->micro, t->T,
           share, snap, tot);
}

/* the plan's context-parallel line (docs/parallelism.md); the ring's activations bf16 on the GPU:
 * per rank, layer and microbatch, and a step's over the ring layers (every layer but the linear
 * ones, whose state passes along the group apart) without activation checkpointing's reruns;
 * with multi-head latent attention, what the latent ring sends a token against the expanded
 * keys and values */
static void plan_context(const plan_view *t) {
    const int N = t->mesh.N;
    char fw[32], bw[32];
    const tsr_model *mm = &t->model;
    const size_t act = t->cfg.device == TSR_DEVICE_CUDA ? 2 : sizeof(float);
    const tsr_ring_dims rd = ring_dims_of(mm);
    const uint64_t f = ring_layer_bytes(act, N, t->micro, t->T, rd.width, 0);
    const uint64_t b = ring_layer_bytes(act, N, t->micro, t->T, rd.width, 1);
    const uint64_t step = (uint64_t)(t->per_rank / t->micro) * (uint64_t)(mm->L - mm->LL) * (f + b);
    metrics_human_bytes(fw, sizeof fw, (double)f);
    metrics_human_bytes(bw, sizeof bw, (double)b);
    printf("context parallelism: each sequence split over %d ranks (%d group%s of %d "
           "consecutive ranks) in %d chunks of %d positions, zig-zag (rank r of a group holds "
           "chunks r and %d-r); attention runs as a ring, sending per rank, layer and "
           "microbatch %s forward and %s backward, %llu B per rank and step over %d ring "
           "layers\n",
           N, t->mesh.D, t->mesh.D == 1 ? "" : "s", N, 2 * N, t->T / (2 * N), 2 * N - 1, fw,
           bw, (unsigned long long)step, mm->L - mm->LL);
    if (!rd.latent) return;
    const int kvw = rd.KVH * (rd.hs + rd.dv);
    printf("  multi-head latent attention rings its latent: %d numbers a token (kv_lora_rank + "
           "qk_rope_head_dim) instead of the expanded keys and values' %d (n_head x "
           "(qk_nope_head_dim + qk_rope_head_dim + v_head_dim)), %.1fx fewer\n",
           rd.width, kvw, (double)kvw / rd.width);
}

/* the plan's tensor-parallel line (docs/parallelism.md "Tensor parallelism"): the split, and
 * the bytes a rank sends per step over its tensor group (model_tp.h tp_step_bytes, bf16
 * activations on the GPU) and over its tensor_data group (ddp's gradient sum) */
static void plan_tensor(const plan_view *t) {
    const tsr_model *m = &t->model, *g = m->global;
    const tsr_tp *tp = m->tp;
    const size_t act = t->cfg.device == TSR_DEVICE_CUDA ? 2 : sizeof(float);
    const int M = (int)(t->per_rank / t->micro), Wd = t->part.flat_world;
    char step[32], data[32], kv[96] = "";
    const uint64_t sb = tp_step_bytes(m, M, t->micro, t->T, act);
    metrics_human_bytes(step, sizeof step, (double)sb);
    /* ddp: an all-reduce of the fp32 gradients; zero1: their reduce-scatter and the weights'
     * all-gather (in the activations' precision on the GPU) */
    const double per = sizeof(float) + (t->cfg.sharding == TSR_SHARD_ZERO1 ? act : sizeof(float));
    metrics_human_bytes(data, sizeof data,
                        Wd > 1 ? per * (Wd - 1) / Wd * (double)m->n_params : 0);
    if (tp->R > 1)
        snprintf(kv, sizeof kv, " (of the %d, each held by %d ranks)", g->KVH, tp->R);
    printf("tensor parallelism: %d group%s of %d consecutive ranks%s; a rank holds %d of %d query "
           "heads, %d key/value head%s%s, %d of the MLP's %d, %d of %d vocabulary rows; sequence "
           "parallelism %s; per rank and step it sends %s (%llu B) over its tensor group and %s "
           "over its %d-rank tensor_data group (the gradients' %s)\n",
           t->dist.world / tp->T, t->dist.world / tp->T == 1 ? "" : "s", tp->T,
           t->cfg.tensor_across_nodes ? "" : " within a node", m->NH, g->NH, m->KVH,
           m->KVH == 1 ? "" : "s", kv, m->F, g->F, m->Vp, g->Vp,
           tp->sp ? "on: the norms and residuals hold 1/T of the tokens" : "off", step,
           (unsigned long long)sb, data, Wd,
           t->cfg.sharding == TSR_SHARD_ZERO1 ? "reduce-scatter, the weights' all-gather"
                                              : "all-reduce");
}

/* the plan's batch line; grpo: micro_batch counts prompts, each with its group_size completions
 * (t->micro rows) */
static void plan_batch(const plan_view *t) {
    const tsr_config *c = &t->cfg;
    const int N = t->mesh.N * t->mesh.T * t->mesh.P;
    const int64_t rows = t->objective->rows_per_sample ? t->objective->rows_per_sample(c) : 1;
    printf("batch: global %lld = %d %srank%s x %lld per rank = %lld microbatches of %d%s%s; "
           "seq_len %d; %lld tokens/step\n",
           (long long)c->global_batch, t->mesh.D, N > 1 ? "data " : "",
           N > 1 && t->mesh.D == 1 ? "" : "s", (long long)t->per_rank,
           (long long)(t->per_rank * rows / t->micro), t->micro,
           rows > 1 ? " sequences (prompts x grpo.group_size)" : "",
           t->auto_micro ? " (micro_batch = auto: the size tried first; halved on out-of-memory)"
                         : "", t->T, (long long)(c->global_batch * c->seq_len));
}

/* the plan's last line: a dry run's, or the steps of a real one */
static void plan_steps(const plan_view *t, int dry_run) {
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
           (unsigned long long)t->samples, (long long)t->eval_every, peak);
}

static int plan_quiet;

void plan_set_quiet(int quiet) { plan_quiet = quiet; }

void plan_print(const plan_view *t, int dry_run) {
    if (t->dist.rank != 0 || plan_quiet) return;
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
    if (t->model.tp) plan_tensor(t);
    if (t->part.pp_on) plan_pipeline(t);
    plan_batch(t);
    plan_steps(t, dry_run);
    fflush(stdout);
}

/* the bytes a decoder layer keeps for its backward, with and without compression (docs/cuda.md
 * "Compressed activations") */
static void plan_layer_acts(const plan_view *t, const gpu_train_ctx *c) {
    const double plain = (double)gpu_train_layer_bytes(c, t->micro, 0);
    const double fp8 = (double)gpu_train_layer_bytes(c, t->micro, 1);
    char a[32], b[32];
    metrics_human_bytes(a, sizeof a, plain);
    metrics_human_bytes(b, sizeof b, fp8);
    printf("activations kept per decoder layer (microbatch of %d x %d): %s as computed, %s with "
           "model.activation_compression = \"fp8\" (%.1f%% less); this run: %s\n", t->micro,
           t->T, a, b, plain > 0 ? 100.0 * (plain - fp8) / plain : 0.0,
           t->cfg.model.activation_compression == TSR_ACTCOMP_FP8 ? "fp8" : "none");
}

double plan_device_bytes(const gpu_train_ctx *c, int micro) {
    return (double)gpu_train_plan_bytes(c) + (double)gpu_train_acts_bytes(c, micro);
}

/* the device memory line (c: a copy, changed to price the run without FP8) */
static void device_memory(const plan_view *t, gpu_train_ctx c) {
    size_t fixed = gpu_train_plan_bytes(&c), acts = gpu_train_acts_bytes(&c, t->micro);
    char a[32], tot[32], st[32];
    metrics_human_bytes(a, sizeof a, (double)acts);
    metrics_human_bytes(tot, sizeof tot, plan_device_bytes(&c, t->micro)); /* (fixed + acts) */
    /* parallel.expert: the experts' store (fp32 master + bf16 copy, gradients, AdamW; src/gpu/gpu_ep.h)
     * is in the total and apart in the line; the exchange's buffers are in the activations */
    const tsr_model *md = &t->model;
    double exb = md->EP > 1 ? (double)md->LM * (md->E / md->EP) * 3.0 * md->FE * md->C *
                                  (4 * sizeof(float) + sizeof(uint16_t))
                            : 0.0;
    char ex[160] = "", exs[32], mus[32];
    metrics_human_bytes(exs, sizeof exs, exb);
    if (exb > 0) snprintf(ex, sizeof ex, "experts' store %s (E/EP = %d), ", exs, md->E / md->EP);
    /* optim.name = muon: its buffers (src/gpu/gpu_muon.h) in the total and apart in the line */
    const double mub = (double)gpu_train_muon_bytes(&c);
    metrics_human_bytes(mus, sizeof mus, mub);
    if (mub > 0)
        snprintf(ex + strlen(ex), sizeof ex - strlen(ex), "Muon %s (the iteration%s), ", mus,
                 c.mode != GPU_SHARD_DDP ? ", the owned matrices and the exchange" : "");
    char share[160] = ""; /* context parallelism: the rank's positions (docs/parallelism.md) */
    if (t->mesh.N > 1)
        snprintf(share, sizeof share, " (this rank's %d positions of each)", t->T / t->mesh.N);
    const tsr_pp *pp = t->model.pp; /* a pipeline: rank 0's stage */
    if (pp)
        snprintf(share + strlen(share), sizeof share - strlen(share), " (this stage's %d layers; "
                 "the microbatches it holds at once: the pipeline line)", t->model.L);
    /* precision.fp8: its operands' scratch is in the activations (what the key adds to them) */
    gpu_train_ctx no_fp8 = c;
    no_fp8.fp8 = TSR_FP8_NONE;
    const size_t f8 = acts - gpu_train_acts_bytes(&no_fp8, t->micro);
    char f8s[32];
    metrics_human_bytes(f8s, sizeof f8s, (double)f8);
    if (f8) snprintf(share + strlen(share), sizeof share - strlen(share), ", FP8 operands' scratch %s (%zu B) in them", f8s, f8);
    if (c.mode != GPU_SHARD_DDP) {
        /* (LoRA: the frozen base's bf16 shard and gathers, and the adapters' store) */
        metrics_human_bytes(st, sizeof st, (double)fixed - exb - mub);
        printf("device memory per rank (cuda, bf16 activations, %s%s over %d ranks): shards, "
               "gathered weights and communication buffers %s, %sactivations %s per microbatch of "
               "%d x %d%s; total %s\n",
               c.mode == GPU_SHARD_ZERO1              ? "zero1"
               : t->cfg.sharding == TSR_SHARD_HSDP ? "hsdp" /* (tensor parallelism: zero3 over */
                                                  : "zero3", /* tensor_data, G < the world) */
               c.lora ? ", lora: frozen bf16 base" : "", c.G, st, ex, a, t->micro, t->T, share,
               tot);
        return;
    }
    char w[32], g[32], o[32];
    double nb = (double)t->model.n_params;
    if (c.lora) { /* the frozen base in bf16 only; the adapters' fp32 store (w, g, m, v) */
        double na = (double)t->part.lora.n;
        metrics_human_bytes(w, sizeof w, nb * sizeof(uint16_t) /* bf16 */);
        metrics_human_bytes(o, sizeof o, na * 4 * sizeof(float));
        printf("device memory per rank (cuda, bf16 activations, lora): frozen base %s (bf16 "
               "only: no fp32 master, gradients or AdamW), adapters %s (fp32 weights, grads, "
               "AdamW), activations and adapter scratch %s per microbatch of %d x %d%s; total "
               "%s\n",
               w, o, a, t->micro, t->T, share, tot);
        return;
    }
    metrics_human_bytes(w, sizeof w, nb * (double)(sizeof(float) + sizeof(uint16_t) /* bf16 */));
    metrics_human_bytes(g, sizeof g, nb * sizeof(float));
    metrics_human_bytes(o, sizeof o, nb * 2 * sizeof(float));
    printf("device memory per rank (cuda, bf16 activations): weights %s (fp32 master + bf16 "
           "copy), grads %s, AdamW %s, %sactivations %s per microbatch of %d x %d%s; total %s\n",
           w, g, o, ex, a, t->micro, t->T, share, tot);
}

void plan_print_device(const plan_view *t, const gpu_train_ctx *c) {
    if (t->dist.rank != 0 || plan_quiet) return;
    device_memory(t, *c);
    plan_layer_acts(t, c);
}
